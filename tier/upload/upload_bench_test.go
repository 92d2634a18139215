package upload_test

// Upload throughput and PUT requests per GiB against a real S3 server
// (versitygw on loopback), and against the in-memory bucket (encoding cost
// alone):
//
//	go test ./tier/upload -run '^$' -bench . -benchtime 2x
//	BENCH_SEG_MIB=512 BENCH_SEGS=1 go test ./tier/upload -run '^$' -bench Upload/versitygw -benchtime 1x
//
// Skips the versitygw case (loudly) when the binary is missing. MB/s is
// segment (uncompressed) bytes; PUTs/GiB counts every PUT and POST request
// on the wire (objects, multipart parts and the manifest), per GiB of
// segments.

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/s3"
	"github.com/stratamq/stratamq/tier/tiertest"
	"github.com/stratamq/stratamq/tier/upload"
)

type countingTransport struct {
	rt         http.RoundTripper
	puts, gets atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	switch r.Method {
	case http.MethodPut, http.MethodPost:
		c.puts.Add(1)
	case http.MethodGet, http.MethodHead:
		c.gets.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// Segment size and count: 4 x 64 MiB by default; BENCH_SEG_MIB and
// BENCH_SEGS override them (RocketMQ's default segment is 1024 MiB).
var benchSegLen, benchSegs = envInt("BENCH_SEG_MIB", 64) << 20, envInt("BENCH_SEGS", 4)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func benchSource(b *testing.B) *memSource {
	corpus, err := os.ReadFile("../segfile/testdata/orders.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 0, benchSegLen*benchSegs)
	for len(data) < cap(data) {
		data = append(data, corpus[:min(len(corpus), cap(data)-len(data))]...)
	}
	src := newSource()
	for i := range benchSegs {
		src.add(upload.Segment{Kind: upload.KindCommitLog, Base: int64(i * benchSegLen)}, data[i*benchSegLen:(i+1)*benchSegLen])
	}
	return src
}

func runUpload(b *testing.B, bkt tier.Bucket, src *memSource, prefix string) {
	u, err := upload.New(upload.Config{
		Bucket: bkt, Source: src, Prefix: prefix, Concurrency: 2,
		PollInterval: 10 * time.Millisecond, ManifestDelay: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- u.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Minute)
	for !src.allUploaded() {
		if time.Now().After(deadline) {
			b.Fatal("upload did not finish")
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	<-errc
	b.ReportMetric(float64(u.Stats().LogicalBytes)/float64(u.Stats().Bytes), "ratio")
}

func BenchmarkUpload(b *testing.B) {
	total := int64(benchSegLen * benchSegs)
	b.Run("versitygw", func(b *testing.B) {
		endpoint, ak, sk := tiertest.StartVersityGW(b)
		ct := &countingTransport{rt: http.DefaultTransport.(*http.Transport).Clone()}
		bkt, err := s3.New(context.Background(), s3.Config{
			Bucket: tiertest.BucketName(b), Region: "us-east-1", Endpoint: endpoint, AccessKey: ak, SecretKey: sk,
			HTTPClient: &http.Client{Transport: ct},
		})
		if err != nil {
			b.Fatal(err)
		}
		defer bkt.Close()
		if err := bkt.EnsureBucket(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(total)
		i := 0
		ct.puts.Store(0)
		for b.Loop() {
			src := benchSource(b)
			i++
			runUpload(b, bkt, src, "run"+string(rune('a'+i%26)))
		}
		b.ReportMetric(float64(ct.puts.Load())/float64(b.N)*float64(1<<30)/float64(total), "PUTs/GiB")
	})
	b.Run("mem", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			runUpload(b, tier.NewMem(), benchSource(b), "p")
		}
	})
}
