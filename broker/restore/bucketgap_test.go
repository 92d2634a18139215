package restore

import (
	"testing"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestBucketGap: a promoted slave's copy may be set aside only if the
// bucket (listed objects, or ranges retention expired) covers every local
// byte at or above the retention floor; BucketGap names the first range
// it does not.
func TestBucketGap(t *testing.T) {
	obj := func(base, length int64) upload.Object {
		return upload.Object{Key: "k", Kind: upload.KindCommitLog.String(), Base: base, Length: length}
	}
	seg := func(base, size int64) Segment { return Segment{Base: base, Size: size} }
	for _, tc := range []struct {
		name    string
		objs    []upload.Object
		expired []upload.Span
		segs    []Segment
		floor   int64
		want    *durability.OffsetRange
	}{
		{"all listed", []upload.Object{obj(0, 100), obj(100, 100)}, nil, []Segment{seg(0, 100), seg(100, 40)}, 0, nil},
		{"first segment never listed", []upload.Object{obj(100, 100)}, nil, []Segment{seg(0, 100), seg(100, 40)}, 0, &durability.OffsetRange{From: 0, To: 100}},
		{"below the retention floor", []upload.Object{obj(100, 100)}, nil, []Segment{seg(0, 100), seg(100, 40)}, 100, nil},
		{"floor inside the missing segment", []upload.Object{obj(100, 100)}, nil, []Segment{seg(0, 100), seg(100, 40)}, 60, &durability.OffsetRange{From: 60, To: 100}},
		{"middle segment never listed", []upload.Object{obj(0, 100), obj(200, 100)}, nil, []Segment{seg(0, 100), seg(100, 100), seg(200, 10)}, 0, &durability.OffsetRange{From: 100, To: 200}},
		{"middle range expired", []upload.Object{obj(0, 100), obj(200, 100)}, []upload.Span{{From: 100, To: 200}}, []Segment{seg(0, 100), seg(100, 100), seg(200, 10)}, 0, nil},
		{"the master's segment is longer than the copy", []upload.Object{obj(0, 100)}, nil, []Segment{seg(0, 60)}, 0, nil},
		{"nothing listed", nil, nil, []Segment{seg(0, 50)}, 0, &durability.OffsetRange{From: 0, To: 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BucketGap(&upload.Manifest{Objects: tc.objs, Expired: tc.expired}, tc.segs, tc.floor)
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Fatalf("bucketGap = %v, want %v", got, tc.want)
			}
		})
	}
}
