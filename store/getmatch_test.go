package store

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// propN reads property n of encoded properties (-1: none).
func propN(props []byte) int {
	for _, pair := range bytes.Split(props, []byte{2}) {
		if k, v, ok := bytes.Cut(pair, []byte{1}); ok && string(k) == "n" {
			n, _ := strconv.Atoi(string(v))
			return n
		}
	}
	return -1
}

// TestStoreGetMatch: a Get with a record-level Match returns exactly the
// records it takes, in order, within MaxMsgs and MaxBytes, scans a bounded
// number of entries per call, and a reader that follows NextBeginOffset
// sees every matching record once.
func TestStoreGetMatch(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	const total = 3000
	var want []int
	for i := range total {
		m := msg("T", 0, fmt.Sprintf("body-%d", i))
		m.Properties = fmt.Sprintf("TAGS\x01t%d\x02n\x01%d\x02", i%2, i)
		m.TagsCode = TagsHash(fmt.Sprintf("t%d", i%2))
		mustPut(t, s, m)
		if i%10 == 3 {
			want = append(want, i)
		}
	}
	ctx := context.Background()
	read := func(req GetRequest) ([]int, int) {
		t.Helper()
		var got []int
		off, pulls := int64(0), 0
		for ; pulls < 10*total; pulls++ {
			req.Offset = off
			r, err := s.Get(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status == OffsetOverflowOne {
				return got, pulls
			}
			if r.Status != Found && r.Status != NoMatchedMessage {
				t.Fatalf("offset %d: status %v", off, r.Status)
			}
			if r.NextBeginOffset <= off || r.NextBeginOffset-off > 2*int64(getScanMin) {
				t.Fatalf("offset %d: next %d: no progress, or more than %d entries scanned", off, r.NextBeginOffset, 2*getScanMin)
			}
			max := req.MaxMsgs
			if max == 0 {
				max = DefaultGetMaxMsgs
			}
			if len(r.Records) > max || r.Status == Found && len(r.Records) == 0 {
				t.Fatalf("offset %d: %d records, status %v", off, len(r.Records), r.Status)
			}
			size := 0
			for _, rec := range r.Records {
				d, _, err := DecodeRecord(rec)
				if err != nil {
					t.Fatal(err)
				}
				n := propN([]byte(d.Properties))
				if string(d.Body) != fmt.Sprintf("body-%d", n) || d.QueueOffset != int64(n) || d.QueueOffset < off || d.QueueOffset >= r.NextBeginOffset {
					t.Fatalf("offset %d..%d: record %d (%q)", off, r.NextBeginOffset, d.QueueOffset, d.Body)
				}
				got = append(got, n)
				size += len(rec)
			}
			if size != r.Bytes || req.MaxBytes > 0 && len(r.Records) > 1 && size > req.MaxBytes {
				t.Fatalf("offset %d: %d bytes (Bytes %d, max %d)", off, size, r.Bytes, req.MaxBytes)
			}
			off = r.NextBeginOffset
		}
		t.Fatalf("no end after %d pulls", pulls)
		return nil, 0
	}
	same := func(what string, got, want []int) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: got %d records %v..., want %d", what, len(got), got[:min(len(got), 10)], len(want))
		}
	}
	m3 := func(props []byte) bool { return propN(props)%10 == 3 }
	got, pulls := read(GetRequest{Topic: "T", Match: m3})
	same("10% match", got, want)
	if pulls > total/(10*DefaultGetMaxMsgs)+5 {
		t.Errorf("10%% match took %d pulls of %d messages: the rounds do not fill a pull", pulls, total)
	}
	got, _ = read(GetRequest{Topic: "T", Match: m3, MaxMsgs: 3})
	same("MaxMsgs 3", got, want)
	got, _ = read(GetRequest{Topic: "T", Match: m3, MaxBytes: 500}) // about 3 records
	same("MaxBytes 500", got, want)
	// With the tags filter too: odd i have tag t1, so i%10 == 3 all pass it.
	got, _ = read(GetRequest{Topic: "T", Match: m3, Filter: func(c int64) bool { return c == TagsHash("t1") }})
	same("with a tags filter", got, want)
	var even []int
	for _, n := range want {
		if n%2 == 0 {
			even = append(even, n)
		}
	}
	got, _ = read(GetRequest{Topic: "T", Match: m3, Filter: func(c int64) bool { return c == TagsHash("t0") }})
	same("tags filter excluding all", got, even)
	// Nothing matches: each Get scans the budget and says NO_MATCHED.
	r, err := s.Get(ctx, GetRequest{Topic: "T", Match: func([]byte) bool { return false }})
	if err != nil || r.Status != NoMatchedMessage || r.NextBeginOffset != getScanMin {
		t.Fatalf("no match: %v next %d err %v; want NO_MATCHED next %d", r.Status, r.NextBeginOffset, err, getScanMin)
	}
	// Statuses before any record pass through.
	for _, c := range []struct {
		off    int64
		status GetStatus
	}{{total, OffsetOverflowOne}, {total + 5, OffsetOverflowBadly}, {-1, OffsetTooSmall}} {
		r, err := s.Get(ctx, GetRequest{Topic: "T", Offset: c.off, Match: m3})
		if err != nil || r.Status != c.status {
			t.Errorf("offset %d: %v, %v; want %v", c.off, r.Status, err, c.status)
		}
	}
	// A match that ends within the queue's last records: the final Get
	// stops at the end, not past it.
	r, err = s.Get(ctx, GetRequest{Topic: "T", Offset: total - 5, Match: m3})
	if err != nil || r.Status != NoMatchedMessage || r.NextBeginOffset != total {
		t.Fatalf("tail: %v next %d err %v", r.Status, r.NextBeginOffset, err)
	}
}
