package segfile_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/orders.jsonl from its generator")

const corpusPath = "testdata/orders.jsonl"

// genCorpus builds a deterministic corpus of order events, one JSON
// document per line, as producers send them: ids with real entropy (uuids,
// trace ids), timestamps that advance, amounts, a few enum fields and
// nested line items. About size bytes.
func genCorpus(size int) []byte {
	r := rand.New(rand.NewPCG(42, 2024))
	hex := func(n int) string {
		const digits = "0123456789abcdef"
		b := make([]byte, n)
		for i := range b {
			b[i] = digits[r.IntN(16)]
		}
		return string(b)
	}
	uuid := func() string { return hex(8) + "-" + hex(4) + "-4" + hex(3) + "-a" + hex(3) + "-" + hex(12) }
	cities := []string{"Berlin", "Lisbon", "Osaka", "Toronto", "Nairobi", "Lima", "Hangzhou", "Austin", "Lyon", "Pune"}
	statuses := []string{"CREATED", "PAID", "PACKED", "SHIPPED", "DELIVERED", "CANCELLED"}
	skus := make([]string, 400)
	for i := range skus {
		skus[i] = fmt.Sprintf("SKU-%05d", r.IntN(100000))
	}
	type item struct {
		SKU      string  `json:"sku"`
		Qty      int     `json:"qty"`
		Price    float64 `json:"unitPrice"`
		Discount float64 `json:"discount,omitempty"`
	}
	type event struct {
		EventID  string            `json:"eventId"`
		TraceID  string            `json:"traceId"`
		Type     string            `json:"type"`
		OrderID  string            `json:"orderId"`
		Customer int               `json:"customerId"`
		Status   string            `json:"status"`
		Time     string            `json:"timestamp"`
		City     string            `json:"shippingCity"`
		Currency string            `json:"currency"`
		Total    float64           `json:"total"`
		Items    []item            `json:"items"`
		Tags     map[string]string `json:"tags"`
		Version  int               `json:"schemaVersion"`
	}
	t := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for buf.Len() < size {
		t = t.Add(time.Duration(r.IntN(900)) * time.Millisecond)
		e := event{
			EventID: uuid(), TraceID: hex(32), Type: "order." + statuses[r.IntN(len(statuses))],
			OrderID: fmt.Sprintf("ORD-%d", 1_000_000+r.IntN(50_000)), Customer: 10_000 + r.IntN(5_000),
			Status: statuses[r.IntN(len(statuses))], Time: t.Format(time.RFC3339Nano),
			City: cities[r.IntN(len(cities))], Currency: []string{"EUR", "USD", "JPY"}[r.IntN(3)],
			Tags:    map[string]string{"channel": []string{"web", "ios", "android"}[r.IntN(3)], "region": "eu-" + []string{"west", "central"}[r.IntN(2)]},
			Version: 3,
		}
		for range 1 + r.IntN(4) {
			it := item{SKU: skus[r.IntN(len(skus))], Qty: 1 + r.IntN(5), Price: float64(r.IntN(20000)) / 100}
			if r.IntN(4) == 0 {
				it.Discount = float64(r.IntN(500)) / 100
			}
			e.Total += float64(it.Qty) * it.Price
			e.Items = append(e.Items, it)
		}
		e.Total = float64(int(e.Total*100)) / 100
		if err := enc.Encode(e); err != nil {
			panic(err)
		}
	}
	return buf.Bytes()
}

const corpusSize = 1_800_000

func loadCorpus(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(corpusPath)
	if err != nil {
		t.Fatalf("%v (regenerate with: go test ./tier/segfile -run TestCorpus -update)", err)
	}
	return b
}

// TestCorpus checks that the committed corpus is what the generator makes,
// so the benchmark's input is reproducible; -update rewrites it.
func TestCorpus(t *testing.T) {
	want := genCorpus(corpusSize)
	if *update {
		if err := os.MkdirAll(filepath.Dir(corpusPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(corpusPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := loadCorpus(t); !bytes.Equal(got, want) {
		t.Fatalf("%s differs from its generator (rerun with -update)", corpusPath)
	}
}
