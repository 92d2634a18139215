package wal

import (
	"context"
	"errors"
	"testing"

	"github.com/stratamq/stratamq/tier"
)

// TestHeaderVersions: this build writes format version 2 (80-byte
// headers, claims naming their predecessor's writer) and reads version 1
// (64 bytes, no writer named) beside it: a bucket an older binary wrote
// walks as before, and a chain mixing both is one chain.
func TestHeaderVersions(t *testing.T) {
	ctx := context.Background()
	b := tier.NewMem()
	v1 := func(h Header) Header { h.v1 = true; return h }
	putObj(b, v1(Header{Seq: 1, Epoch: 1, Claim: 1}), nil)
	putObj(b, v1(Header{Seq: 2, Epoch: 1, Claim: 1, Prev: 1}), record("a", 100))
	putObj(b, Header{Seq: 3, Epoch: 2, Claim: 3, Prev: 2, Start: 100, PrevEpoch: 1, PrevClaim: 1}, nil)
	putObj(b, Header{Seq: 4, Epoch: 2, Claim: 3, Prev: 3, Start: 100}, record("b", 50))
	c, err := Read(ctx, b, "wal/")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Objects) != 4 || c.End(0) != 150 {
		t.Fatalf("chain %v, want all four objects to 150", c.Objects)
	}
	if !c.Objects[1].v1 || c.Objects[3].v1 || c.Objects[2].PrevEpoch != 1 || c.Objects[2].PrevClaim != 1 {
		t.Fatalf("headers read back as %+v", c.Objects)
	}
	fresh := newMemLog(0)
	if _, err := Reconcile(ctx, b, "wal/", c, 0, fresh); err != nil {
		t.Fatal(err)
	}
	if fresh.MaxPhysOffset() != 150 {
		t.Fatalf("a fresh log from both versions ends at %d, want 150", fresh.MaxPhysOffset())
	}

	// A claim naming a writer other than the one at its Prev does not
	// continue it (the object there landed late, after Prev was trimmed).
	other := Header{Seq: 5, Epoch: 3, Claim: 5, Prev: 4, Start: 150, PrevEpoch: 2, PrevClaim: 9}
	if other.continues(c.Objects[3]) {
		t.Fatalf("%+v continues %s, whose writer it does not name", other, c.Objects[3])
	}
	other.PrevClaim = 3
	if !other.continues(c.Objects[3]) {
		t.Fatalf("%+v does not continue %s, whose writer it names", other, c.Objects[3])
	}

	for name, h := range map[string]Header{
		"data object naming a writer": {Seq: 7, Epoch: 2, Claim: 3, Prev: 6, PrevEpoch: 2, PrevClaim: 3},
		"claim of nothing naming one": {Seq: 7, Epoch: 2, Claim: 7, PrevEpoch: 2, PrevClaim: 3},
		"filler naming a writer":      {Seq: 7, Epoch: 2, Claim: 7, Filler: true, PrevEpoch: 1},
	} {
		obj, _ := encode(h, nil)
		if _, err := decodeHeader(obj); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	obj, _ := encode(Header{Seq: 1, Epoch: 1, Claim: 1}, nil)
	obj[4] = 3
	if _, err := decodeHeader(obj); !errors.Is(err, ErrCorrupt) {
		t.Errorf("format version 3: %v, want ErrCorrupt", err)
	}
}

// FuzzDecodeHeader: any bytes decode to a header whose re-encoding is the
// same bytes, or to ErrCorrupt; never a panic.
func FuzzDecodeHeader(f *testing.F) {
	for _, h := range []Header{
		{Seq: 1, Epoch: 1, Claim: 1},
		{Seq: 3, Epoch: 2, Claim: 3, Prev: 2, Start: 100, PrevEpoch: 1, PrevClaim: 1},
		{Seq: 4, Epoch: 2, Claim: 3, Prev: 3, Start: 100, Length: 50},
		{Seq: 2, Epoch: 1, Claim: 1, Prev: 1, Length: 10, v1: true},
		{Seq: 5, Claim: 5, Epoch: 2, Filler: true},
	} {
		b := make([]byte, h.headerLen())
		encodeHeader(b, h)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		again := make([]byte, h.headerLen())
		encodeHeader(again, h)
		if string(again) != string(b[:h.headerLen()]) {
			t.Fatalf("%+v re-encodes to other bytes", h)
		}
	})
}
