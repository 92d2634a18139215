package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// lendingCold is fakeCold lending its bytes as a cold reader of decoded
// frames does: the log is cut into frameLen-byte frames, each made once
// and lent from then on (the same memory every time).
type lendingCold struct {
	*fakeCold
	frameLen int64
	mu       sync.Mutex
	frames   map[int64][]byte
	lends    int
}

func (c *lendingCold) Lend(ctx context.Context, off int64, n int) ([]byte, error) {
	start := off / c.frameLen * c.frameLen
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lends++
	f := c.frames[start]
	if f == nil {
		f = make([]byte, c.frameLen)
		k, err := c.fakeCold.ReadAt(ctx, start, f)
		if k == 0 {
			return nil, err
		}
		f = f[:k]
		c.frames[start] = f
	}
	b := f[off-start:]
	return b[:min(len(b), n):min(len(b), n)], nil
}

// TestStoreGetLendsColdRecords: records below the local log come from a
// ColdLender by reference, byte-identical to what the store held before
// the drop; records lying in one lent frame are slices of it (no copy),
// one straddling two frames is copied whole; Chunks carries the same bytes
// as Records in fewer parts, for local and cold reads alike.
func TestStoreGetLendsColdRecords(t *testing.T) {
	fs := vfs.NewMem()
	cold := &lendingCold{fakeCold: newFakeCold(), frameLen: 3000, frames: map[int64][]byte{}}
	o := tieredOpts(fs, cold)
	s := mustOpen(t, o)
	defer mustClose(t, s)
	puts := fillTiered(t, s, 150)
	queues := []qref{{"A", 0}, {"B", 1}}
	before := takeSnapshot(t, s, queues, puts)
	checkChunks := func(what string) (records, chunks int) {
		for _, q := range queues {
			for off := s.MinQueueOffset(q.topic, q.id); off < s.MaxQueueOffset(q.topic, q.id); {
				r, err := s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: off, MaxMsgs: 64})
				if err != nil || r.Status != Found {
					t.Fatalf("%s: get %v@%d: %v %v", what, q, off, r.Status, err)
				}
				if !bytes.Equal(bytes.Join(r.Records, nil), bytes.Join(r.Chunks, nil)) {
					t.Fatalf("%s: %v@%d: chunks differ from records", what, q, off)
				}
				records, chunks = records+len(r.Records), chunks+len(r.Chunks)
				off = r.NextBeginOffset
			}
		}
		return records, chunks
	}
	if r, c := checkChunks("local"); c*4 > r {
		t.Fatalf("local reads: %d chunks for %d records", c, r)
	}
	segs := s.SealedSegments()
	for _, sg := range segs[:len(segs)-1] {
		copyAndDrop(t, s, fs, cold.fakeCold, sg)
	}
	readsBefore := cold.reads.Load()
	compareSnapshots(t, before, takeSnapshot(t, s, queues, puts))
	if cold.lends == 0 {
		t.Fatal("nothing was lent")
	}
	r, c := checkChunks("cold")
	t.Logf("cold: %d records in %d chunks, %d lends, %d copying reads", r, c, cold.lends, cold.reads.Load()-readsBefore)
	// Lent, not copied: a record inside one frame is a slice of that frame.
	lent, copied := 0, 0
	for _, p := range puts {
		if p.PhysOffset+int64(p.Size) > segs[len(segs)-1].Base {
			continue
		}
		res, err := s.Get(context.Background(), GetRequest{Topic: "A", QueueID: 0, Offset: p.QueueOffset, MaxMsgs: 1})
		if err != nil || res.Status != Found || int64(binary.BigEndian.Uint64(res.Records[0][offPhysOffset:])) != p.PhysOffset {
			continue // not an A/0 record
		}
		rec := res.Records[0]
		start := p.PhysOffset / cold.frameLen * cold.frameLen
		cold.mu.Lock()
		f := cold.frames[start]
		cold.mu.Unlock()
		switch {
		case p.PhysOffset+int64(p.Size) > start+cold.frameLen:
			copied++ // straddles: its own buffer
			if f != nil && &rec[0] == &f[p.PhysOffset-start] {
				t.Fatalf("record at %d straddles frames yet is a slice of one", p.PhysOffset)
			}
		case f != nil && &rec[0] == &f[p.PhysOffset-start]:
			lent++
		default:
			t.Fatalf("record at %d lies in one frame but was copied", p.PhysOffset)
		}
	}
	if lent == 0 || copied == 0 {
		t.Fatalf("lent %d records, copied %d straddling ones: want some of each", lent, copied)
	}
}
