package restore

import (
	"strings"
	"testing"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestDecide: the rules over a non-empty data dir, without a broker: the
// data dir that wrote the prefix last keeps its log (whatever its length
// past the durable end); one another broker wrote after is set aside only
// when the bucket holds it all, else the start is refused naming the
// range; a promoted slave's copy is kept only when it reaches the bucket's
// end.
func TestDecide(t *testing.T) {
	j := New(Config{DataDir: "/d", BrokerName: "b"}, Deps{})
	obj := func(base, n int64) upload.Object {
		return upload.Object{Kind: upload.KindCommitLog.String(), Base: base, Length: n}
	}
	seg := func(base, size int64) Segment { return Segment{Base: base, Size: size} }
	self := offsets.Identity{Broker: "b", Instance: "me", Epoch: 3}
	cp := func(epoch int64) *offsets.Checkpoint {
		return &offsets.Checkpoint{Writer: offsets.Identity{Broker: "b", Instance: "other", Epoch: epoch}}
	}
	for _, tc := range []struct {
		name   string
		in     Local
		segs   []Segment
		action Action
		rg     durability.OffsetRange
	}{
		{"we wrote last, log reaches the durable end",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 3}, Loaded: cp(3), CommitLog: durability.CommitLog{HWM: 100}, HaveCP: true, Manifest: &upload.Manifest{}},
			[]Segment{seg(0, 100)}, Keep, durability.OffsetRange{}},
		{"we wrote last, shorter than the bucket's objects but past the durable end: kept (never by size)",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 3}, Loaded: cp(3), CommitLog: durability.CommitLog{HWM: 50}, HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 200)}}},
			[]Segment{seg(0, 60)}, Keep, durability.OffsetRange{}},
		{"we wrote last, the disk lost synced data",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 3}, Loaded: cp(3), CommitLog: durability.CommitLog{HWM: 100}, HaveCP: true, Manifest: &upload.Manifest{}},
			[]Segment{seg(0, 40)}, Refuse, durability.OffsetRange{From: 40, To: 100}},
		{"another broker wrote since, the bucket holds every local segment",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 100), obj(100, 100)}}},
			[]Segment{seg(0, 100), seg(100, 100)}, SetAside, durability.OffsetRange{}},
		{"another broker wrote since, the bucket lacks the last segment",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 100)}}},
			[]Segment{seg(0, 100), seg(100, 30)}, Refuse, durability.OffsetRange{From: 100, To: 130}},
		{"another broker wrote since, the bucket WAL holds the tail past the segments",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 100)}},
				WAL: []durability.OffsetRange{{From: 90, To: 160}}},
			[]Segment{seg(0, 100), seg(100, 30)}, SetAside, durability.OffsetRange{}},
		{"another broker wrote since, the local log is longer than the bucket WAL: its tail may hold local topics' acknowledged messages",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{},
				WAL: []durability.OffsetRange{{From: 0, To: 120}}},
			[]Segment{seg(0, 100), seg(100, 30)}, Refuse, durability.OffsetRange{From: 120, To: 130}},
		{"another broker wrote since, its WAL objects cover the offsets this data dir wrote past its own WAL objects (longer than the bucket WAL's own run)",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{},
				WAL: []durability.OffsetRange{{From: 0, To: 200}}, WALEnds: map[int64]int64{2: 120, 3: 200}},
			[]Segment{seg(0, 100), seg(100, 50)}, Refuse, durability.OffsetRange{From: 120, To: 150}},
		{"another broker wrote since, this data dir's own WAL objects reach its log's end",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{},
				WAL: []durability.OffsetRange{{From: 0, To: 200}}, WALEnds: map[int64]int64{2: 150, 3: 200}},
			[]Segment{seg(0, 100), seg(100, 50)}, SetAside, durability.OffsetRange{}},
		{"another broker wrote since, only claims in the WAL (no topic bucket-durable), the bucket's segments hold every local byte",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 100), obj(100, 100)}},
				WALEnds: map[int64]int64{}},
			[]Segment{seg(0, 100), seg(100, 50)}, SetAside, durability.OffsetRange{}},
		{"another broker wrote since, this data dir's own uploads (its epoch's keys) hold what it wrote past its WAL objects",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true,
				Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 100), {Kind: upload.KindCommitLog.String(), Key: "commitlog/00000000000000000100.2.seg", Base: 100, Length: 60}}},
				WAL:      []durability.OffsetRange{{From: 60, To: 300}}, WALEnds: map[int64]int64{2: 120, 3: 300}},
			[]Segment{seg(0, 100), seg(100, 50)}, SetAside, durability.OffsetRange{}},
		{"another broker wrote since, its segments begin elsewhere than the local ones, the WAL holds the rest",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 60), obj(60, 90)}},
				WAL: []durability.OffsetRange{{From: 150, To: 200}}},
			[]Segment{seg(0, 100), seg(100, 80)}, SetAside, durability.OffsetRange{}},
		{"another broker wrote since, a hole neither its segments nor the WAL cover",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 60)}},
				WAL: []durability.OffsetRange{{From: 80, To: 200}}},
			[]Segment{seg(0, 100), seg(100, 80)}, Refuse, durability.OffsetRange{From: 60, To: 180}},
		{"the manifest's epoch is newer than the checkpoint's",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 3}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Epoch: 4}},
			[]Segment{seg(0, 30)}, Refuse, durability.OffsetRange{From: 0, To: 30}},
		{"a promoted copy that reaches the bucket's end",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 3, Replica: true}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 100)}}},
			[]Segment{seg(0, 120)}, KeepPromoted, durability.OffsetRange{}},
		{"a promoted copy that lags the bucket, all of it uploaded",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 3, Replica: true}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 100), obj(100, 100)}}},
			[]Segment{seg(0, 100), seg(100, 50)}, SetAside, durability.OffsetRange{}},
		{"a promoted copy that lags the bucket and holds a segment never listed",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 3, Replica: true}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(100, 100), obj(200, 100)}}},
			[]Segment{seg(0, 100), seg(100, 50)}, Refuse, durability.OffsetRange{From: 0, To: 100}},
		{"a slave's copy of an older epoch, every later epoch took over at its end, the bucket holds nothing past it: the only copy, kept",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 1, Replica: true}, Loaded: cp(2), HaveCP: true, Manifest: &upload.Manifest{},
				CommitLog: durability.CommitLog{Epochs: []durability.EpochStart{{Epoch: 1, From: 0}, {Epoch: 2, From: 120}}}},
			[]Segment{seg(0, 120)}, KeepPromoted, durability.OffsetRange{}},
		{"a slave's copy of an older epoch, a later epoch took over below its end: its tail diverged",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 1, Replica: true}, Loaded: cp(2), HaveCP: true, Manifest: &upload.Manifest{},
				CommitLog: durability.CommitLog{Epochs: []durability.EpochStart{{Epoch: 1, From: 0}, {Epoch: 2, From: 100}}}},
			[]Segment{seg(0, 120)}, Refuse, durability.OffsetRange{From: 0, To: 120}},
		{"a slave's copy of an older epoch, the later epoch's WAL holds records past it: the bucket is newer",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 1, Replica: true}, Loaded: cp(2), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 120)}},
				CommitLog: durability.CommitLog{Epochs: []durability.EpochStart{{Epoch: 1, From: 0}, {Epoch: 2, From: 120}}},
				WAL:       []durability.OffsetRange{{From: 120, To: 160}}},
			[]Segment{seg(0, 120)}, SetAside, durability.OffsetRange{}},
		{"a slave's copy of an older epoch, the later epoch's uploads reach past it",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 1, Replica: true}, Loaded: cp(2), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 120), obj(120, 80)}},
				CommitLog: durability.CommitLog{Epochs: []durability.EpochStart{{Epoch: 1, From: 0}, {Epoch: 2, From: 120}}}},
			[]Segment{seg(0, 120)}, SetAside, durability.OffsetRange{}},
		{"a slave's copy of an older epoch that the bucket holds whole: set aside (the restore resumes past the later epoch's offsets)",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 1, Replica: true}, Loaded: cp(2), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 120)}},
				CommitLog: durability.CommitLog{HWM: 240, Epochs: []durability.EpochStart{{Epoch: 1, From: 0}, {Epoch: 2, From: 120}}}},
			[]Segment{seg(0, 120)}, SetAside, durability.OffsetRange{}},
		{"a slave's copy of an older epoch below the retention floor's end: the later epoch uploaded past it (retention expired it): set aside, never kept",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 1, Replica: true}, Loaded: cp(2), HaveCP: true, Manifest: &upload.Manifest{Expired: []upload.Span{{From: 0, To: 200}}},
				CommitLog: durability.CommitLog{HWM: 200, Floor: 200, Epochs: []durability.EpochStart{{Epoch: 1, From: 0}, {Epoch: 2, From: 120}}}},
			[]Segment{seg(0, 120)}, SetAside, durability.OffsetRange{}},
		{"another broker took over at or past the local end, its objects (its own segment boundaries) cover the local log: set aside",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 1}, Loaded: cp(2), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 200)}},
				CommitLog: durability.CommitLog{HWM: 200, Epochs: []durability.EpochStart{{Epoch: 1, From: 0}, {Epoch: 2, From: 150}}}},
			[]Segment{seg(0, 100), seg(100, 50)}, SetAside, durability.OffsetRange{}},
		{"another broker took over below the local end, its objects cover the local log below that: the tail past it is its own",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 1}, Loaded: cp(2), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 200)}},
				CommitLog: durability.CommitLog{HWM: 200, Epochs: []durability.EpochStart{{Epoch: 1, From: 0}, {Epoch: 2, From: 120}}}},
			[]Segment{seg(0, 100), seg(100, 50)}, Refuse, durability.OffsetRange{From: 120, To: 150}},
		{"another broker took over at or past the local end, the history does not list this data dir's epoch (entries lost): judged by its segments, refused",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 1}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 200)}},
				CommitLog: durability.CommitLog{HWM: 200, Epochs: []durability.EpochStart{{Epoch: 3, From: 150}}}},
			[]Segment{seg(0, 100), seg(100, 50)}, Refuse, durability.OffsetRange{From: 100, To: 150}},
		{"another broker took over below the local end, the bucket lacks part of the local log below that",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 1}, Loaded: cp(2), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 60)}},
				CommitLog: durability.CommitLog{HWM: 200, Epochs: []durability.EpochStart{{Epoch: 1, From: 0}, {Epoch: 2, From: 120}}}},
			[]Segment{seg(0, 100), seg(100, 50)}, Refuse, durability.OffsetRange{From: 60, To: 150}},
		{"a promoted copy the bucket holds whole, the master synced past it: set aside (kept, it would write over offsets the master handed out)",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 3, Replica: true}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 100)}},
				CommitLog: durability.CommitLog{HWM: 150}},
			[]Segment{seg(0, 100)}, SetAside, durability.OffsetRange{}},
		{"a promoted copy the master synced past, holding bytes the bucket lacks: kept (maybe the only copy)",
			Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 3, Replica: true}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 100)}},
				CommitLog: durability.CommitLog{HWM: 150}},
			[]Segment{seg(0, 100), seg(100, 20)}, KeepPromoted, durability.OffsetRange{}},
		{"before writer.json, the log reaches the checkpoint's end",
			Local{Self: self, Loaded: cp(3), CommitLog: durability.CommitLog{HWM: 100}, HaveCP: true, Manifest: &upload.Manifest{}},
			[]Segment{seg(0, 100)}, Keep, durability.OffsetRange{}},
	} {
		v := j.Decide(tc.in, tc.segs)
		if v.Action != tc.action || v.Range != tc.rg {
			t.Errorf("%s: %+v, want action %d range %+v", tc.name, v, tc.action, tc.rg)
		}
		// A refusal for another broker's history names this disk's own
		// tail, which CheckLocal may read record by record; never a loss
		// of synced data nor a promoted copy's lag.
		if wantUnshipped := v.Action == Refuse && !strings.Contains(tc.name, "we wrote last") && !strings.Contains(tc.name, "promoted"); v.Unshipped != wantUnshipped {
			t.Errorf("%s: Unshipped %v, want %v", tc.name, v.Unshipped, wantUnshipped)
		}
	}
	// Whatever STRATAMQ_DURABILITY says (a topic may have durability=local),
	// a tail past the WAL's end and a hole below it (the new broker's log
	// resumed past a restore gap) are read record by record (CheckLocal),
	// never set aside unread.
	v := j.Decide(Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true, Manifest: &upload.Manifest{},
		WAL: []durability.OffsetRange{{From: 0, To: 120}}}, []Segment{seg(0, 100), seg(100, 30)})
	if v.Action != Refuse || !v.Unshipped {
		t.Errorf("local tail past the WAL's end: %+v, want it read record by record", v)
	}
	v = j.Decide(Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true,
		Manifest: &upload.Manifest{Objects: []upload.Object{obj(0, 60)}}, WAL: []durability.OffsetRange{{From: 80, To: 200}}},
		[]Segment{seg(0, 100), seg(100, 80)})
	if v.Action != Refuse || !v.Unshipped {
		t.Errorf("a hole below the WAL's end: %+v, want it read record by record", v)
	}
	// No WAL range left, the epoch history saying where the next writer
	// took over (past the local log: it resumed past a restore gap): the
	// local segments the bucket lacks are read record by record too.
	v = j.Decide(Local{Self: self, Prev: &offsets.WriterState{Instance: "me", Epoch: 2}, Loaded: cp(3), HaveCP: true,
		CommitLog: durability.CommitLog{Epochs: []durability.EpochStart{{Epoch: 3, From: 1000}}},
		Manifest:  &upload.Manifest{Objects: []upload.Object{obj(0, 100), obj(1000, 50)}}},
		[]Segment{seg(0, 100), seg(100, 80)})
	if want := (durability.OffsetRange{From: 100, To: 180}); v.Action != Refuse || !v.Unshipped || v.Range != want {
		t.Errorf("no WAL, a tail the bucket lacks: %+v, want %+v read record by record", v, want)
	}
}

// TestFreshPointNeverBelowTheBucket: a fresh data dir's log starts past
// the checkpoint's reservation, its high-water mark and the end of every
// uploaded object; after a clean stop, without the reservation.
func TestFreshPointNeverBelowTheBucket(t *testing.T) {
	counts := func() map[string]int32 { return map[string]int32{"T": 2} }
	for _, tc := range []struct {
		name string
		in   Bucket
		want int64
	}{
		{"empty bucket", Bucket{QueueCounts: counts}, -1},
		{"objects only", Bucket{ObjectsEnd: 500, QueueCounts: counts}, 500},
		{"reservation past the objects", Bucket{HaveCP: true, CommitLog: durability.CommitLog{HWM: 300, Reserved: 900}, ObjectsEnd: 500, QueueCounts: counts}, 900},
		{"clean: no reservation", Bucket{HaveCP: true, CommitLog: durability.CommitLog{HWM: 300, Reserved: 900, Clean: true}, ObjectsEnd: 500, QueueCounts: counts}, 500},
		{"objects past the checkpoint", Bucket{HaveCP: true, CommitLog: durability.CommitLog{HWM: 300, Reserved: 400}, ObjectsEnd: 700, QueueCounts: counts}, 700},
	} {
		r := FreshPoint(tc.in)
		got := int64(-1)
		if r != nil {
			got = r.CommitLogStart
		}
		if got != tc.want {
			t.Errorf("%s: log starts at %d, want %d", tc.name, got, tc.want)
		}
	}
	// Unclean: a queue resumes past its reservation, and a checkpointed
	// topic's queue with no message yet past NewQueueReserved, read from 0
	// (what the bucket's segments hold of it was written after the
	// checkpoint).
	r := FreshPoint(Bucket{HaveCP: true, QueueCounts: counts, CommitLog: durability.CommitLog{NewQueueReserved: 7,
		Queues: map[string]map[string]durability.QueueRange{"T": {"0": {Min: 1, Max: 5, Reserved: 9}}}}})
	if got, want := r.Queues["T"], (map[int32]store.QueueRange{0: {Min: 1, Max: 9}, 1: {Min: 0, Max: 7}}); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("queues %v, want %v", got, want)
	}
}

// TestDecideReturningTailAfterWALTrim: a data dir (epoch 2) shipped its
// log to the bucket WAL up to 120 and acknowledged a local topic's send
// in [120, 150) that never reached the WAL; another broker (epoch 3) took
// over at 120 (its epoch history says so), wrote its own records from
// there, uploaded segments past 150 and trimmed the WAL below them: no
// object of epoch 2 is left (WALEnds lacks it), and the bucket's segment
// objects cover [120, 150) with the other broker's bytes. The returning
// data dir's [120, 150) is its own: refused naming it (read record by
// record by CheckLocal), never set aside as if the bucket held it.
func TestDecideReturningTailAfterWALTrim(t *testing.T) {
	j := New(Config{DataDir: "/d", BrokerName: "b"}, Deps{})
	in := Local{Self: offsets.Identity{Broker: "b", Instance: "me", Epoch: 4}, Prev: &offsets.WriterState{Instance: "me", Epoch: 2},
		Loaded:    &offsets.Checkpoint{Writer: offsets.Identity{Broker: "b", Instance: "other", Epoch: 3}},
		CommitLog: durability.CommitLog{HWM: 260, Epochs: []durability.EpochStart{{Epoch: 1, From: 0}, {Epoch: 2, From: 50}, {Epoch: 3, From: 120}}},
		HaveCP:    true,
		Manifest:  &upload.Manifest{Objects: []upload.Object{{Kind: upload.KindCommitLog.String(), Base: 0, Length: 200}}},
		WAL:       []durability.OffsetRange{{From: 200, To: 260}}, WALEnds: map[int64]int64{3: 260}}
	v := j.Decide(in, []Segment{{Base: 0, Size: 100}, {Base: 100, Size: 50}})
	if want := (durability.OffsetRange{From: 120, To: 150}); v.Action != Refuse || v.Range != want || !v.Unshipped {
		t.Fatalf("%+v, want refused naming %+v (PastWAL: read record by record)", v, want)
	}
}
