package store

import (
	"fmt"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestStoreSegmentLayout: a sealed segment's layout lists every byte once,
// each queue's records together in log order, adjacent records of a queue
// in one run, queues in the order they first appear.
func TestStoreSegmentLayout(t *testing.T) {
	o := testOpts(vfs.NewMem())
	o.SegmentSize = 64 << 10
	s := mustOpen(t, o)
	defer mustClose(t, s)
	var puts []PutResult
	for i := range 300 {
		q := int32(i / 3 % 4) // runs of three messages per queue
		m := msg("L", q, fmt.Sprintf("%03d", i))
		if i%50 == 7 {
			m.Topic = "Other"
		}
		puts = append(puts, mustPut(t, s, m)...)
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	sg := s.SealedSegments()[0]
	runs, err := s.SegmentLayout(sg.Base)
	if err != nil {
		t.Fatal(err)
	}
	covered := int64(0)
	seen := map[int]bool{}
	for i, r := range runs {
		covered += r.Len
		if i > 0 && r.Group != runs[i-1].Group {
			if seen[r.Group] {
				t.Fatalf("group %d comes back at run %d", r.Group, i)
			}
			if r.Group != runs[i-1].Group+1 {
				t.Fatalf("group %d follows group %d", r.Group, runs[i-1].Group)
			}
		}
		seen[r.Group] = true
		if i > 0 && r.Group == runs[i-1].Group && r.Off <= runs[i-1].Off+runs[i-1].Len {
			t.Fatalf("runs %d and %d of group %d: adjacent or out of order", i-1, i, r.Group)
		}
	}
	if covered != sg.Length {
		t.Fatalf("layout covers %d bytes of %d", covered, sg.Length)
	}
	// Every record of the segment lies wholly in one run of its queue's group.
	groupOf := map[string]int{}
	for _, p := range puts {
		if p.PhysOffset+int64(p.Size) > sg.Base+sg.Length {
			continue
		}
		rec, err := s.ReadRecord(p.PhysOffset)
		if err != nil {
			t.Fatal(err)
		}
		d, _, _ := DecodeRecord(rec)
		k := fmt.Sprintf("%s/%d", d.Topic, d.QueueID)
		off := p.PhysOffset - sg.Base
		found := false
		for _, r := range runs {
			if off >= r.Off && off+int64(p.Size) <= r.Off+r.Len {
				if g, ok := groupOf[k]; ok && g != r.Group {
					t.Fatalf("%s in groups %d and %d", k, g, r.Group)
				}
				groupOf[k] = r.Group
				found = true
			}
		}
		if !found {
			t.Fatalf("record at %d is in no run", p.PhysOffset)
		}
	}
	groups := map[int]bool{}
	for _, r := range runs {
		groups[r.Group] = true
	}
	if len(groupOf) < 5 || len(groups) != len(groupOf) {
		t.Fatalf("%d groups in the layout for %d queues", len(groups), len(groupOf))
	}
	if _, err := s.SegmentLayout(sg.Base + 1); err == nil {
		t.Fatal("layout of no segment")
	}
}
