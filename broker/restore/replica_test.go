package restore

import (
	"fmt"
	"testing"

	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestReplicaStart: U is the end of the contiguous prefix, from the lowest
// base, of commitlog objects listed together with their queue index.
func TestReplicaStart(t *testing.T) {
	cl := func(base, n int64) upload.Object {
		return upload.Object{Kind: upload.KindCommitLog.String(), Base: base, Length: n}
	}
	idx := func(base int64) upload.Object { return upload.Object{Kind: upload.KindQueueIndex.String(), Base: base} }
	for _, tc := range []struct {
		name string
		objs []upload.Object
		exp  []upload.Span
		want int64
	}{
		{"empty", nil, nil, 0},
		{"all indexed", []upload.Object{cl(100, 100), idx(100), cl(0, 100), idx(0)}, nil, 200},
		{"after retention", []upload.Object{cl(300, 50), idx(300), cl(350, 50), idx(350)}, nil, 400},
		{"index missing", []upload.Object{cl(0, 100), idx(0), cl(100, 100), cl(200, 100), idx(200)}, nil, 100},
		{"first index missing", []upload.Object{cl(0, 100), cl(100, 100), idx(100)}, nil, 0},
		{"gap", []upload.Object{cl(0, 100), idx(0), cl(150, 100), idx(150)}, nil, 100},
		// Per-topic retention deleted [100, 150): not an upload to come.
		{"expired gap", []upload.Object{cl(0, 100), idx(0), cl(150, 100), idx(150)}, []upload.Span{{From: 100, To: 150}}, 250},
		{"expired gap, then a real one", []upload.Object{cl(0, 100), idx(0), cl(150, 100), idx(150), cl(300, 10), idx(300)}, []upload.Span{{From: 100, To: 150}}, 250},
		{"expired range short of the next object", []upload.Object{cl(0, 100), idx(0), cl(150, 100), idx(150)}, []upload.Span{{From: 100, To: 140}}, 100},
	} {
		if got := ReplicaStart(&upload.Manifest{Objects: tc.objs, Expired: tc.exp}); got != tc.want {
			t.Errorf("%s: U = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestReplicaCovered: a slave drops only local segments wholly inside the
// manifest's indexed, contiguous commitlog prefix; never one the manifest
// does not list, lists without its queue index, or lists past a gap.
func TestReplicaCovered(t *testing.T) {
	cl := func(base, n int64) upload.Object {
		return upload.Object{Kind: upload.KindCommitLog.String(), Base: base, Length: n}
	}
	idx := func(base int64) upload.Object { return upload.Object{Kind: upload.KindQueueIndex.String(), Base: base} }
	seg := func(base, n int64) store.SegmentInfo { return store.SegmentInfo{Base: base, Length: n, Sealed: true} }
	local := []store.SegmentInfo{seg(0, 100), seg(100, 100), seg(200, 100), seg(300, 100)}
	for _, tc := range []struct {
		name string
		objs []upload.Object
		want []int64 // bases
	}{
		{"empty manifest", nil, nil},
		{"all listed", []upload.Object{cl(0, 100), idx(0), cl(100, 100), idx(100), cl(200, 100), idx(200), cl(300, 100), idx(300)}, []int64{0, 100, 200, 300}},
		{"tail not uploaded", []upload.Object{cl(0, 100), idx(0), cl(100, 100), idx(100)}, []int64{0, 100}},
		{"index missing", []upload.Object{cl(0, 100), idx(0), cl(100, 100), cl(200, 100), idx(200)}, []int64{0}},
		{"first index missing", []upload.Object{cl(0, 100), cl(100, 100), idx(100)}, nil},
		{"gap", []upload.Object{cl(0, 100), idx(0), cl(150, 150), idx(150)}, []int64{0}},
		{"other boundaries", []upload.Object{cl(0, 150), idx(0), cl(150, 100), idx(150)}, []int64{0, 100}},
		{"trimmed by bucket retention", []upload.Object{cl(200, 100), idx(200), cl(300, 100), idx(300)}, []int64{200, 300}},
	} {
		var got []int64
		for _, s := range ReplicaCovered(local, &upload.Manifest{Objects: tc.objs}) {
			got = append(got, s.Base)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: covered %v, want %v", tc.name, got, tc.want)
		}
	}
	// Per-topic retention deleted [100, 200) from the middle of the log:
	// the slave's copies there, and after, are covered (the gap is no
	// upload still to come).
	m := &upload.Manifest{Objects: []upload.Object{cl(0, 100), idx(0), cl(200, 100), idx(200), cl(300, 100), idx(300)},
		Expired: []upload.Span{{From: 100, To: 200}}}
	if got := ReplicaCovered(local, m); len(got) != 4 {
		t.Errorf("expired gap: covered %v, want all four local segments", got)
	}
}
