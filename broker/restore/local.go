package restore

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// Local is what a non-empty data dir is judged by (CheckLocal, Decide).
type Local struct {
	Self offsets.Identity     // this run: instance and lease epoch
	Prev *offsets.WriterState // what the data dir recorded (writer.json); nil before there was one
	// Loaded is the bucket's checkpoint (nil: none); CommitLog its
	// commitlog section, HaveCP whether it was read.
	Loaded    *offsets.Checkpoint
	CommitLog durability.CommitLog
	HaveCP    bool
	Manifest  *upload.Manifest // the bucket's manifest, read (claimed) just before
	// WAL is the byte ranges of the log the bucket WAL's chain holds, in
	// order (none: no WAL). Those offsets are in the bucket as much as the
	// segments are.
	WAL []durability.OffsetRange
	// WALEnds is, per lease epoch, where the data objects that epoch's
	// writer put in the WAL's chain end (claims and fillers hold none). This data dir's log
	// agrees with the chain up to its own epoch's end: past it, what it
	// wrote was never shipped, even where a later writer's objects cover
	// the same offsets with its own records.
	WALEnds map[int64]int64
	// BucketOnly reports whether the record at phys, of topic with props, was
	// acknowledged only once the bucket held it (a bucket-durable topic's
	// send) or never (nil: unknown, every record may have been). A deposed
	// writer's tail past the WAL's end whose records all are is set aside,
	// not refused: nothing in it was acknowledged.
	BucketOnly func(phys int64, topic, props string) bool
}

// Action is what Decide tells the start-up to do with the local data.
type Action int

const (
	// Keep: the local log is ours to serve.
	Keep Action = iota
	// KeepPromoted: a promoted slave's copy that reaches the end of what
	// the bucket holds: served, and the checkpoint's metadata adopted.
	KeepPromoted
	// SetAside: the bucket holds every byte of the local log that counts;
	// it is renamed out of the way and the broker restores from the bucket.
	SetAside
	// Refuse: the local log holds (or lost) offsets the bucket lacks
	// (Verdict.Range): refuse to start, or with STRATAMQ_ACCEPT_LOSS set it
	// aside anyway (RefuseOrSetAside).
	Refuse
)

// Verdict is Decide's answer.
type Verdict struct {
	Action     Action
	Why        string                 // SetAside, Refuse: the reason, for the log and the error
	Range      durability.OffsetRange // Refuse: the offsets at stake
	LocalHolds bool                   // Refuse: they are on this disk alone (else they are lost)
	// Unshipped (Refuse): Range is this data dir's own tail that the
	// bucket lacks, after another broker wrote the prefix (past the WAL
	// chain's end, past its own last WAL object where a later writer's
	// objects cover its offsets, in a gap the next writer's log resumed
	// after, or past the segments); CheckLocal reads its records and sets
	// it aside instead when none was acknowledged (Local.BucketOnly). A
	// range that does not start at a record boundary of the local log is
	// refused (its records do not read back).
	Unshipped bool
}

// CheckLocal decides whether a non-empty data dir's log may be served
// (Decide, over the data dir's segments) and carries the verdict out:
// setting the local data aside, or refusing. It reports whether the log
// kept is a promoted slave's copy (KeepPromoted).
func (j *Judge) CheckLocal(in Local) (promoted bool, err error) {
	segs, err := j.Segments()
	if err != nil {
		return false, err
	}
	switch v := j.Decide(in, segs); v.Action {
	case KeepPromoted:
		return true, nil
	case SetAside:
		return false, j.SetAside(v.Why)
	case Refuse:
		var objs []durability.OffsetRange
		if in.Manifest != nil {
			for _, o := range in.Manifest.CommitLog() {
				objs = append(objs, durability.OffsetRange{From: o.Base, To: o.End()})
			}
		}
		j.log.Warn("the local log holds offsets the bucket lacks", "range", v.Range, "unshipped", v.Unshipped,
			"localSegments", segs, "bucketObjects", objs, "wal", in.WAL, "walEnds", in.WALEnds, "writer", in.Prev)
		why := v.Why
		if v.Unshipped && in.BucketOnly != nil {
			acked, err := j.maybeAcked(v.Range, in.BucketOnly)
			if err != nil {
				return false, err
			}
			if acked == "" {
				return false, j.SetAside(fmt.Sprintf("%s: commitlog offsets [%d, %d), past what the bucket WAL holds of this data dir's log, hold only "+
					"records of bucket-durable topics, never acknowledged", v.Why, v.Range.From, v.Range.To))
			}
			why += " (" + acked + ")"
		}
		if v.Unshipped && j.cfg.Failover && in.Prev != nil && !in.Prev.Replica {
			// This data dir was its epoch's master, and the bucket's
			// history moved on without this tail of its own: what it would
			// cut (failover.rejoinCut: past the takeover) or set aside
			// (PrepareReplica's RestartAt: a successor that resumed past a
			// restore gap) rejoining the new master as a slave. Its
			// acknowledged sends there are async_master sends no slave
			// held, or sends a slave held, whose copy the takeover contest
			// preferred (two faults at once, that slave's copy lost too,
			// can lose them, as DESIGN §8 says). Kept, renamed; never a
			// start refused while the lease is free and this node could
			// serve. A slave's copy is refused as before: it may be the
			// only holder of what a sync_master acknowledged.
			j.log.Error("failover: this data dir's own tail past where the bucket's log moved on is set aside (renamed, not deleted); the broker restores from the bucket",
				"reason", why, "from", v.Range.From, "to", v.Range.To, "bytes", v.Range.To-v.Range.From)
			return false, j.SetAside(why)
		}
		return false, j.RefuseOrSetAside(why, v.Range, v.LocalHolds)
	}
	return false, nil
}

// maybeAcked reads the records of the local log in r and says which may
// have been acknowledged from this disk alone ("" when none: every one is
// a record bucketOnly says was not, and they cover r whole; a tail that
// does not parse counts as acknowledged, and is refused as before).
func (j *Judge) maybeAcked(r durability.OffsetRange, bucketOnly func(phys int64, topic, props string) bool) (string, error) {
	var acked string
	end, err := store.LogRecords(j.fs, filepath.Join(j.cfg.DataDir, "store"), j.cfg.MaxMessageSize, r.From,
		func(phys int64, topic, props string) error {
			if !bucketOnly(phys, topic, props) {
				acked = fmt.Sprintf("the record at %d is of topic %q, which was not bucket-durable when it was written (or the data dir's durability history does not say): it may have been acknowledged", phys, topic)
				return errStopScan
			}
			return nil
		})
	switch {
	case errors.Is(err, errStopScan):
		return acked, nil
	case err != nil:
		return "", fmt.Errorf("broker: read the local commitlog past the bucket WAL's end: %w", err)
	case end < r.To:
		return fmt.Sprintf("its records from %d end at %d, short of %d", r.From, end, r.To), nil
	}
	return "", nil
}

var errStopScan = errors.New("stop")

// Decide is the rule over a non-empty data dir whose log is segs. The log
// is ours to serve when this data dir wrote the prefix last: the epoch it
// recorded (writer.json) is at least the epoch stamped into the bucket's
// checkpoint (or its manifest, when newer). Otherwise another broker has
// written the prefix since (it restored from the bucket and carried on),
// and the two histories must not mix: the local data is set aside, but
// only when the bucket holds every local segment; if local segments hold
// messages the bucket lacks, the broker refuses to start, naming the
// range. Lengths are never compared to guess who wrote last: after a power
// loss an async log is legitimately shorter than its page-cache end. And
// a log is never kept below the end of what the bucket holds. Decide reads
// nothing and writes nothing.
func (j *Judge) Decide(in Local, segs []Segment) Verdict {
	cl, haveCP, m := in.CommitLog, in.HaveCP, in.Manifest
	var cpEpoch int64
	var writer offsets.Identity
	if in.Loaded != nil {
		cpEpoch, writer = in.Loaded.Writer.Epoch, in.Loaded.Writer
	}
	// The manifest carries the epoch of its writer too: a broker that
	// took over may have uploaded before its first checkpoint landed.
	if m.Epoch > cpEpoch && m.Epoch != in.Self.Epoch { // our own epoch: our claim
		cpEpoch = m.Epoch
		writer = offsets.Identity{Broker: j.cfg.BrokerName, Instance: "(unknown: manifest writer)", Epoch: m.Epoch}
	}
	var localEnd int64
	if n := len(segs); n > 0 {
		localEnd = segs[n-1].Base + segs[n-1].Size
	}
	prev := in.Prev
	switch {
	case prev != nil && prev.Replica && prev.Epoch >= cpEpoch:
		// A slave's copy of the log of the epoch the bucket was last
		// written under, now promoted. It is ours to serve when it
		// reaches the end of what the bucket holds; a copy that lags it
		// is set aside and the broker restores from the bucket (the
		// bucket's bytes are newer, and maybe acknowledged).
		var end int64
		for _, o := range m.CommitLog() {
			end = max(end, o.End())
		}
		if localEnd < end {
			why := fmt.Sprintf("this slave's copy of the log ends at offset %d, before the end %d of what the master uploaded", localEnd, end)
			// A copy is set aside only if the bucket holds all of it that
			// retention kept: a segment the master never got listed (its
			// upload failed, or a later one's delta landed first) may be
			// on this disk alone, acknowledged (DESIGN §8).
			floor := int64(0)
			if haveCP {
				floor = cl.Floor
			}
			if gap := BucketGap(m, segs, floor); gap != nil {
				return Verdict{Action: Refuse, Why: why + ", and it holds offsets no bucket object holds", Range: *gap, LocalHolds: true}
			}
			return Verdict{Action: SetAside, Why: why}
		}
		if haveCP && cl.HWM > localEnd && bucketGap(m, segs, cl.Floor, in.WAL...) == nil {
			// The master synced past this copy, and the bucket holds all
			// of it: restored from the bucket, which resumes past every
			// offset the master may have handed out (kept, it would write
			// at its own end over them).
			return Verdict{Action: SetAside, Why: fmt.Sprintf("this slave's copy of the log ends at offset %d, before the durable end %d "+
				"the master checkpointed, and the bucket holds all of it", localEnd, cl.HWM)}
		}
		return Verdict{Action: KeepPromoted}
	case prev != nil && prev.Replica && haveCP && olderCopyLeads(in, segs, localEnd):
		// A slave's copy of an older epoch's log, promoted after later
		// epochs wrote (their masters crashed or lost their disks before
		// uploading): every later epoch took the log over at or past its
		// end, so it is a prefix of the history, the bucket holds nothing
		// past it, and it holds bytes the bucket lacks: maybe the only
		// copy of what its master acknowledged. Served; the later
		// writers' bytes past it are on no disk this broker can see and
		// in no bucket object (DESIGN §8: an unclean takeover's trade).
		return Verdict{Action: KeepPromoted}
	case prev != nil && prev.Instance == in.Self.Instance && prev.Epoch >= cpEpoch:
		// We wrote the prefix last. The durable end we checkpointed must
		// still be here (it was fdatasynced): a shorter log means the disk
		// lost acknowledged data, and writing on would reuse offsets.
		if haveCP && localEnd < cl.HWM {
			return Verdict{Action: Refuse, Why: fmt.Sprintf("the local commitlog ends at offset %d, before the durable end %d this broker "+
				"checkpointed (epoch %d): the disk lost data it had synced, and writing on would reuse offsets", localEnd, cl.HWM, prev.Epoch),
				Range: durability.OffsetRange{From: localEnd, To: cl.HWM}}
		}
		return Verdict{Action: Keep}
	case prev == nil && (!haveCP || localEnd >= cl.HWM):
		// A data dir from before writer.json (or a prefix without a
		// checkpoint): as before, a log that reaches the checkpoint's end
		// is taken to be the one that wrote it.
		return Verdict{Action: Keep}
	}
	// Another broker wrote the prefix after this data dir did.
	lacking := LackingRange(m, segs)
	if n := len(in.WAL); lacking != nil && n > 0 {
		walEnd := in.WAL[n-1].To
		// With the bucket WAL the broker that took over continued this
		// very log at its offsets (the WAL's chain from the segments'
		// end), and its segments need not begin where the local ones do:
		// the bucket holds an offset that an object, an expired range or
		// the WAL covers. (A deposed writer's bytes there that the WAL
		// does not hold were never acknowledged from the bucket.)
		floor := int64(0)
		if haveCP {
			floor = cl.Floor
		}
		lacking = nil
		gap := bucketGap(m, segs, floor, in.WAL...)
		switch {
		case gap != nil && gap.From < walEnd:
			// A hole below the WAL's end: the new broker's log resumed
			// past a restore gap, and this data dir's bytes there (from
			// the end of a bucket object of its own log: a record
			// boundary) are its alone, acknowledged only if some record
			// is not a bucket-durable send (CheckLocal reads them).
			lacking = &durability.OffsetRange{From: gap.From, To: localEnd}
		case gap != nil:
			// Past the WAL's end: the deposed writer's tail; it may hold
			// local topics' acknowledged messages (a topic with
			// durability=local, whatever STRATAMQ_DURABILITY says), so
			// the start is refused naming it, unless CheckLocal finds
			// only records never acknowledged there.
			lacking = &durability.OffsetRange{From: gap.From, To: localEnd}
		}
	}
	// Where this data dir's log stops agreeing with the bucket's: the
	// end of its own data objects in the WAL's chain and of the segments
	// it uploaded itself (under its epoch's keys: its own bytes), or, if
	// earlier, where the first later epoch took the log over (the
	// checkpoint's epoch history, never trimmed: once the later writer's
	// segments are listed, the trim deletes this data dir's objects, and
	// those segments cover its tail's offsets with other bytes). Past it,
	// what it wrote was never shipped, even where a later writer's
	// objects cover the same offsets with its own records: this disk's
	// alone, refused naming it unless CheckLocal finds none was
	// acknowledged (only bucket-durable sends).
	own, ok := in.WALEnds[epochOf(prev)]
	if ok && prev != nil {
		for moved := true; moved; {
			moved = false
			for _, o := range m.CommitLog() {
				if upload.KeyEpoch(o.Key) == prev.Epoch && o.Base <= own && own < o.End() {
					own, moved = o.End(), true
				}
			}
		}
	}
	// From the WAL alone, only where a later writer's data objects reach
	// past own (it claimed where this data dir's run ended and wrote its
	// own records there); else the offsets past own may hold these very
	// bytes in the bucket (a promoted slave's uploads of what it
	// replicated), and the coverage checks above judge them.
	diverged := false
	for e, end := range in.WALEnds {
		diverged = diverged || (e > epochOf(prev) && end > own)
	}
	if cut, known := takenOverAt(cl.Epochs, epochOf(prev)); haveCP && known {
		if !ok || cut < own {
			own = cut
		}
		ok, diverged = true, true
	}
	if ok && diverged && prev != nil && localEnd > own && (lacking == nil || lacking.From >= own) {
		lacking = &durability.OffsetRange{From: own, To: localEnd}
	}
	// Without the WAL, and with the history naming where the next epoch
	// took over: below that cut the bucket's log is this one (the next
	// writer continued it, its segment boundaries its own), so the bucket
	// lacks only what no object covers there; past it the tail is this
	// data dir's alone, the divergent end a rejoining slave cuts.
	// The history must list this data dir's own epoch too: a history
	// that lost entries (a checkpoint whose section did not decode) could
	// miss an epoch in between, whose objects would then cover this data
	// dir's diverged bytes below the recorded cut.
	if cut, known := takenOverAt(cl.Epochs, epochOf(prev)); len(in.WAL) == 0 && len(in.WALEnds) == 0 && haveCP && known && prev != nil &&
		slices.ContainsFunc(cl.Epochs, func(e durability.EpochStart) bool { return e.Epoch == prev.Epoch }) {
		switch gap := bucketGap(m, below(segs, cut), cl.Floor); {
		case gap != nil:
			lacking = &durability.OffsetRange{From: gap.From, To: localEnd}
		case localEnd > cut:
			lacking = &durability.OffsetRange{From: cut, To: localEnd}
		default:
			lacking = nil
		}
	}
	if lacking == nil {
		return Verdict{Action: SetAside, Why: fmt.Sprintf("another broker (%s) wrote this prefix after this data dir did, and every local segment is in the bucket (its segments or its WAL)", writer)}
	}
	return Verdict{Action: Refuse, Why: fmt.Sprintf("another broker (%s) wrote this prefix after this data dir did (local epoch %d, bucket epoch %d), "+
		"and the local commitlog holds offsets the bucket lacks", writer, epochOf(prev), cpEpoch), Range: *lacking, LocalHolds: true, Unshipped: true}
}

// olderCopyLeads reports whether a slave's copy of epoch in.Prev.Epoch's
// log, segs ending at localEnd, is a prefix of the log the bucket's
// history describes (every later epoch started at or past localEnd, the
// history complete) that reaches the end of what the bucket holds or held
// (its objects, the ranges retention expired, the retention floor and the
// WAL's chain) and holds bytes the bucket lacks. A copy the bucket holds
// whole is set aside instead: the restore from the bucket resumes past
// every offset the later epochs may have handed out.
func olderCopyLeads(in Local, segs []Segment, localEnd int64) bool {
	cut, known := takenOverAt(in.CommitLog.Epochs, in.Prev.Epoch)
	if !known || localEnd > cut || localEnd <= 0 || in.CommitLog.Floor > localEnd {
		return false
	}
	for _, o := range in.Manifest.CommitLog() {
		if o.End() > localEnd {
			return false
		}
	}
	if in.Manifest != nil {
		for _, e := range in.Manifest.Expired {
			if e.To > localEnd {
				return false
			}
		}
	}
	for _, r := range in.WAL {
		if r.To > localEnd {
			return false
		}
	}
	return bucketGap(in.Manifest, segs, in.CommitLog.Floor, in.WAL...) != nil
}

// takenOverAt is where the log last written under epoch stops agreeing
// with the bucket's: the lowest start of a later epoch in the history h
// (failover.CutFor's rule); known is false when no later epoch is listed
// or the history may have dropped the entries that would say.
func takenOverAt(h []durability.EpochStart, epoch int64) (at int64, known bool) {
	if len(h) >= durability.MaxEpochHistory && h[0].Epoch > epoch {
		return 0, false
	}
	for _, e := range h {
		if e.Epoch > epoch && (!known || e.From < at) {
			at, known = e.From, true
		}
	}
	return at, known
}

// below is segs clipped to the offsets under end.
func below(segs []Segment, end int64) []Segment {
	var out []Segment
	for _, sg := range segs {
		if sg.Base >= end {
			break
		}
		out = append(out, Segment{Base: sg.Base, Size: min(sg.Size, end-sg.Base)})
	}
	return out
}

func epochOf(w *offsets.WriterState) int64 {
	if w == nil {
		return 0
	}
	return w.Epoch
}
