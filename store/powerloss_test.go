package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestStorePowerLoss is the power-loss simulation of issue 9: concurrent
// writers Put to several queues of two topics (single messages and
// batches, small and near-MaxMessageSize bodies, segment rolls with a
// small SegmentSize, SealActive from another goroutine) while the test
// takes CrashClone or CrashCloneTorn copies of the files at random
// moments. Each copy is opened as after a power loss and must hold:
//
//   - FlushSync: every Put acknowledged before the copy, at its queue
//     and commitlog offsets, with its bytes.
//   - FlushAsync: every Put whose records end at or below the store's
//     durable offset (s.flushed: the end the last completed flush round
//     fdatasynced) read just before the copy. With virtual time
//     (async-interval, testing/synctest: the flusher ticks exactly every
//     FlushInterval and a round takes no virtual time) also every Put
//     acknowledged more than one FlushInterval before the copy: that is
//     "a machine crash loses at most the last interval", and never more.
//
// In every mode: no record read back is corrupt (DecodeRecord checks the
// CRC), each queue's offsets run 0, 1, 2, ... with no hole, every record is
// one a writer put to that queue (no duplicate, no stranger), records do
// not overlap in the commitlog, an acknowledged Put that is not required
// is either wholly at its offsets or absent, and new Puts on the recovered
// store take the next queue offset and the end of the log. The recovered
// store is then crashed once more (after its new Puts are durable) and
// must keep both generations.
//
// The CI form runs a few hundred crashes; STRATAMQ_LONG=1 runs thousands.
// STRATAMQ_POWERLOSS_SEED=n starts the seeds at n (a failure names its
// seed; the interleaving of the writers is not reproducible, the
// parameters and crash points are).
func TestStorePowerLoss(t *testing.T) {
	iters := map[string]int{"sync": 80, "async": 80, "async-interval": 80}
	if os.Getenv("STRATAMQ_LONG") == "1" {
		iters = map[string]int{"sync": 1500, "async": 1500, "async-interval": 1500}
	}
	base := uint64(time.Now().UnixNano())
	if v := os.Getenv("STRATAMQ_POWERLOSS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("STRATAMQ_POWERLOSS_SEED=%q: %v", v, err)
		}
		base = n
	}
	t.Logf("seeds from %d (STRATAMQ_POWERLOSS_SEED)", base)
	for _, name := range []string{"sync", "async", "async-interval"} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			var st plStats
			for i := range iters[name] {
				seed := base + uint64(i)
				p := plParams{mode: FlushAsync, seed: seed, virtual: name == "async-interval"}
				if name == "sync" {
					p.mode = FlushSync
				}
				if p.virtual {
					synctest.Test(t, func(t *testing.T) { st.add(powerLossRun(t, p)) })
				} else {
					st.add(powerLossRun(t, p))
				}
				if t.Failed() {
					t.Fatalf("failed at seed %d (rerun: STRATAMQ_POWERLOSS_SEED=%d)", seed, seed)
				}
			}
			t.Logf("%s: %d runs, %d crashes (%d torn), %d acks checked, %d required, %d not required and lost, in %v",
				name, iters[name], st.crashes, st.torn, st.acks, st.required, st.lost, time.Since(start).Round(time.Millisecond))
		})
	}
}

type plParams struct {
	mode    FlushMode
	seed    uint64
	virtual bool // inside a synctest bubble: writers pace themselves, the interval bound is checked
}

type plStats struct{ crashes, torn, acks, required, lost int }

func (s *plStats) add(o plStats) {
	s.crashes += o.crashes
	s.torn += o.torn
	s.acks += o.acks
	s.required += o.required
	s.lost += o.lost
}

// plAck is one acknowledged message.
type plAck struct {
	topic string
	qid   int32
	res   PutResult
	body  string
	at    time.Time // when its Put returned
}

func (a plAck) String() string {
	return fmt.Sprintf("%s/%d@%d (commitlog [%d,%d), body %.24q)", a.topic, a.qid, a.res.QueueOffset,
		a.res.PhysOffset, a.res.PhysOffset+int64(a.res.Size), a.body)
}

// plCrash is one crash copy and what was known when it was taken.
type plCrash struct {
	fs      *vfs.Mem
	torn    bool
	at      time.Time
	durable int64   // s.flushed read just before the copy
	acks    []plAck // acknowledged before the copy
}

type plQueue struct {
	topic string
	qid   int32
}

var plTopics = []string{"PA", "PB"}

// powerLossRun runs one store under load, takes its crash copies, and
// checks each (see TestStorePowerLoss).
func powerLossRun(t *testing.T, p plParams) plStats {
	rng := rand.New(rand.NewPCG(p.seed, 0x9041))
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.Flush = p.mode
	o.MaxMessageSize = 2 << 10
	o.SegmentSize = int64(o.MaxMessageSize) * int64(2+rng.IntN(7))
	o.CQEntriesPerFile = 4 + rng.IntN(60)
	o.FlushInterval = time.Duration(1+rng.IntN(4)) * time.Millisecond
	if p.virtual {
		o.FlushInterval = time.Duration(5+rng.IntN(16)) * time.Millisecond
	}
	o.ZeroAhead = []int64{-1, 0, 1 << 10}[rng.IntN(3)]
	nq := int32(1 + rng.IntN(3))
	writers := 2 + rng.IntN(4)
	ncrash := 1 + rng.IntN(3)
	desc := fmt.Sprintf("seed %d %v: segment %d, cq file %d entries, interval %v, zero-ahead %d, %d queues per topic, %d writers",
		p.seed, p.mode, o.SegmentSize, o.CQEntriesPerFile, o.FlushInterval, o.ZeroAhead, nq, writers)
	var queues []plQueue
	for _, tp := range plTopics {
		for q := range nq {
			queues = append(queues, plQueue{tp, q})
		}
	}

	s, err := Open(o)
	if err != nil {
		t.Fatalf("%s: open: %v", desc, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acks []plAck
	tried := make([]map[string]plQueue, writers) // body -> queue, per writer
	for w := range writers {
		tried[w] = map[string]plQueue{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := rand.New(rand.NewPCG(p.seed, uint64(w)+1))
			for i := 0; i < 600 && ctx.Err() == nil; i++ {
				if p.virtual {
					time.Sleep(time.Duration(1+wr.IntN(1000)) * time.Microsecond)
				}
				n := 1
				if wr.IntN(3) == 0 {
					n = 2 + wr.IntN(5)
				}
				batch := make([]Message, n)
				for j := range batch {
					q := queues[wr.IntN(len(queues))]
					prefix := fmt.Sprintf("%d/%d/%d/", w, i, j)
					pad := wr.IntN(600)
					if wr.IntN(10) == 0 { // close to MaxMessageSize: rolls segments
						pad = o.MaxMessageSize - RecordOverhead - len(q.topic) - 18 - len(prefix) - wr.IntN(100)
					}
					body := prefix + strings.Repeat(string(rune('a'+(i+j)%26)), pad)
					tried[w][body] = q
					batch[j] = msg(q.topic, q.qid, body)
				}
				res, err := s.Put(ctx, batch)
				if err != nil {
					if !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
						t.Errorf("%s: put: %v", desc, err)
					}
					return
				}
				now := time.Now()
				mu.Lock()
				for j, r := range res {
					acks = append(acks, plAck{batch[j].Topic, batch[j].QueueID, r, string(batch[j].Body), now})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() { // seals the active segment now and then
		defer wg.Done()
		sr := rand.New(rand.NewPCG(p.seed, 0x5ea1))
		for ctx.Err() == nil {
			time.Sleep(time.Duration(500+sr.IntN(5000)) * time.Microsecond)
			if err := s.SealActive(); err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("%s: seal: %v", desc, err)
				return
			}
		}
	}()

	var crashes []plCrash
	target := 0
	deadline := time.Now().Add(20 * time.Second)
	for range ncrash {
		target += 5 + rng.IntN(150)
		for {
			mu.Lock()
			n := len(acks)
			mu.Unlock()
			if n >= target || time.Now().After(deadline) || t.Failed() {
				break
			}
			time.Sleep(time.Duration(50+rng.IntN(500)) * time.Microsecond)
		}
		mu.Lock()
		snap := slices.Clone(acks)
		mu.Unlock()
		c := plCrash{durable: s.flushed.Load(), at: time.Now(), acks: snap, torn: rng.IntN(2) == 0}
		if c.torn {
			c.fs = fs.CrashCloneTorn(rng)
		} else {
			c.fs = fs.CrashClone()
		}
		crashes = append(crashes, c)
	}
	cancel()
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatalf("%s: close: %v", desc, err)
	}
	if t.Failed() {
		return plStats{}
	}
	if n := len(crashes[len(crashes)-1].acks); n < target {
		t.Fatalf("%s: only %d acks before the deadline, want %d", desc, n, target)
	}
	all := map[string]plQueue{}
	for _, m := range tried {
		for b, q := range m {
			all[b] = q
		}
	}

	var st plStats
	for k, c := range crashes {
		what := fmt.Sprintf("%s; crash %d of %d (torn %v, %d acks before it, durable offset %d)", desc, k+1, len(crashes), c.torn, len(c.acks), c.durable)
		st.add(checkPowerLoss(t, what, o, p, c, queues, all))
		if t.Failed() {
			break
		}
	}
	return st
}

// checkPowerLoss opens a store on c's files and checks it (see
// TestStorePowerLoss); then puts to every queue, crashes that store too
// and checks both generations.
func checkPowerLoss(t *testing.T, what string, o Options, p plParams, c plCrash, queues []plQueue, tried map[string]plQueue) plStats {
	t.Helper()
	st := plStats{crashes: 1}
	if c.torn {
		st.torn = 1
	}
	o.FS = c.fs
	s, err := Open(o)
	if err != nil {
		t.Fatalf("%s: open after the crash: %v", what, err)
	}
	defer s.Close()
	recs := checkRecoveredLog(t, what, s, queues, tried)
	if end := s.MaxPhysOffset(); end < c.durable {
		t.Fatalf("%s: recovered log ends at %d, below the durable offset %d", what, end, c.durable)
	}
	var keep []plAck // what the second crash must keep too
	for _, a := range c.acks {
		st.acks++
		end := a.res.PhysOffset + int64(a.res.Size)
		var why string
		switch {
		case p.mode == FlushSync:
			why = "FlushSync acknowledged it"
			if end > c.durable {
				t.Fatalf("%s: FlushSync acknowledged %v before the store's durable offset covered it", what, a)
			}
		case end <= c.durable:
			why = "the durable offset covered it"
		case p.virtual && c.at.Sub(a.at) > o.FlushInterval:
			why = fmt.Sprintf("it was acknowledged %v before the crash, more than the flush interval", c.at.Sub(a.at))
		}
		q := recs[plQueue{a.topic, a.qid}]
		if a.res.QueueOffset < int64(len(q)) {
			r := q[a.res.QueueOffset]
			if string(r.Body) != a.body || r.PhysOffset != a.res.PhysOffset || r.Size != a.res.Size {
				t.Fatalf("%s: acknowledged %v, but that queue offset holds commitlog [%d,%d) body %.24q",
					what, a, r.PhysOffset, r.PhysOffset+int64(r.Size), r.Body)
			}
			if why != "" {
				st.required++
				keep = append(keep, a)
			}
			continue
		}
		if why != "" {
			t.Fatalf("%s: lost %v: %s; the queue has %d records, the recovered log ends at %d",
				what, a, why, len(q), s.MaxPhysOffset())
		}
		st.lost++
	}

	// New Puts continue each queue and the log, colliding with nothing.
	for i, q := range queues {
		end := s.MaxPhysOffset()
		m := msg(q.topic, q.qid, fmt.Sprintf("after-crash-%d", i))
		res, err := s.Put(context.Background(), []Message{m})
		if err != nil {
			t.Fatalf("%s: put after recovery: %v", what, err)
		}
		if res[0].PhysOffset != end || res[0].QueueOffset != int64(len(recs[q])) {
			t.Fatalf("%s: put to %s/%d after recovery got commitlog %d, queue offset %d; want the end of the log %d and queue offset %d",
				what, q.topic, q.qid, res[0].PhysOffset, res[0].QueueOffset, end, len(recs[q]))
		}
		keep = append(keep, plAck{q.topic, q.qid, res[0], string(m.Body), time.Now()})
		tried[string(m.Body)] = q
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("%s: flush after recovery: %v", what, err)
	}
	again := c.fs.CrashClone()
	if err := s.Close(); err != nil {
		t.Fatalf("%s: close after recovery: %v", what, err)
	}
	o.FS = again
	s2, err := Open(o)
	if err != nil {
		t.Fatalf("%s: open after the second crash: %v", what, err)
	}
	defer s2.Close()
	recs = checkRecoveredLog(t, what+"; second crash", s2, queues, tried)
	for _, a := range keep {
		q := recs[plQueue{a.topic, a.qid}]
		if a.res.QueueOffset >= int64(len(q)) || string(q[a.res.QueueOffset].Body) != a.body || q[a.res.QueueOffset].PhysOffset != a.res.PhysOffset {
			t.Fatalf("%s: second crash (after a flush) lost %v", what, a)
		}
	}
	return st
}

// checkRecoveredLog reads every queue of a recovered store from its start
// and checks the records (see TestStorePowerLoss); it returns them by queue.
func checkRecoveredLog(t *testing.T, what string, s *Store, queues []plQueue, tried map[string]plQueue) map[plQueue][]Record {
	t.Helper()
	out := map[plQueue][]Record{}
	seen := map[string]bool{}
	type span struct{ from, to int64 }
	var spans []span
	end := s.MaxPhysOffset()
	for _, q := range queues {
		if m := s.MinQueueOffset(q.topic, q.qid); m != 0 {
			t.Fatalf("%s: queue %s/%d starts at %d", what, q.topic, q.qid, m)
		}
		recs := readQueue(t, s, q.topic, q.qid) // decodes each record, CRC included
		for i, r := range recs {
			switch b := string(r.Body); {
			case r.QueueOffset != int64(i):
				t.Fatalf("%s: queue %s/%d: record %d has queue offset %d", what, q.topic, q.qid, i, r.QueueOffset)
			case r.Topic != q.topic || r.QueueID != q.qid:
				t.Fatalf("%s: queue %s/%d@%d holds a record of %s/%d", what, q.topic, q.qid, i, r.Topic, r.QueueID)
			case tried[b] != q:
				t.Fatalf("%s: queue %s/%d@%d holds %.24q, which nobody put there", what, q.topic, q.qid, i, b)
			case seen[b]:
				t.Fatalf("%s: %.24q is in the log twice", what, b)
			case r.PhysOffset+int64(r.Size) > end:
				t.Fatalf("%s: %s/%d@%d ends at %d, past the end of the log %d", what, q.topic, q.qid, i, r.PhysOffset+int64(r.Size), end)
			}
			seen[string(r.Body)] = true
			spans = append(spans, span{r.PhysOffset, r.PhysOffset + int64(r.Size)})
		}
		if int64(len(recs)) != s.MaxQueueOffset(q.topic, q.qid) {
			t.Fatalf("%s: queue %s/%d: %d records, max offset %d", what, q.topic, q.qid, len(recs), s.MaxQueueOffset(q.topic, q.qid))
		}
		out[q] = recs
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.from - b.from) })
	for i := 1; i < len(spans); i++ {
		if spans[i].from < spans[i-1].to {
			t.Fatalf("%s: records [%d,%d) and [%d,%d) overlap", what, spans[i-1].from, spans[i-1].to, spans[i].from, spans[i].to)
		}
	}
	return out
}
