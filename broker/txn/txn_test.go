package txn

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/msgprop"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// The service over a real store; the broker's side (gates, producers,
// topics, durable ends) is what these fakes stand for.

// direct is a Writer without the broker's gates.
type direct struct{ st *store.Store }

func (w direct) WriteTrans(ctx context.Context, msgs []store.Message) ([]store.PutResult, error) {
	return w.st.Put(ctx, msgs)
}

// allDurable says every write is durable for every fault.
type allDurable struct{ st *store.Store }

func (d allDurable) DurableEnds() (int64, int64) { return d.st.MaxPhysOffset(), math.MaxInt64 }

// steps is a plain step log.
type steps struct {
	base State
	log  []struct {
		st  State
		end int64
	}
}

func (s *steps) Reset(base State) { s.base, s.log = base, nil }
func (s *steps) Add(st State, end int64) {
	if n := len(s.log); n > 0 {
		end = max(end, s.log[n-1].end)
	}
	s.log = append(s.log, struct {
		st  State
		end int64
	}{st, end})
}
func (s *steps) At(d int64) State {
	v := s.base
	for _, e := range s.log {
		if e.end > d {
			break
		}
		v = e.st
	}
	return v
}
func (s *steps) Latest() State {
	if n := len(s.log); n > 0 {
		return s.log[n-1].st
	}
	return s.base
}
func (s *steps) Trim(d int64) {
	for len(s.log) > 0 && s.log[0].end <= d {
		s.base, s.log = s.log[0].st, s.log[1:]
	}
}

// grpcOnly has no remoting producer; it records the checks handed to gRPC.
type grpcOnly struct {
	mu      sync.Mutex
	checked []int64 // half queue offsets of the copies checked
}

func (p *grpcOnly) Conn(string) *remoting.Conn { return nil }
func (p *grpcOnly) CheckGRPC(_ context.Context, _ string, _ map[string]string, put store.PutResult) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checked = append(p.checked, put.QueueOffset)
	return true
}

type allTopics struct{}

func (allTopics) Exists(string) bool { return true }

type rig struct {
	t   *testing.T
	dir string
	st  *store.Store
	p   *grpcOnly
}

func newRig(t *testing.T) *rig {
	dir := t.TempDir()
	st, err := store.Open(store.Options{Dir: filepath.Join(dir, "store"), SegmentSize: 1 << 20, MaxMessageSize: 64 << 10,
		ZeroAhead: -1, MinFreeBytes: 1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &rig{t: t, dir: dir, st: st, p: &grpcOnly{}}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// service makes a service over the rig's store and loads its progress.
func (r *rig) service(checkpoint json.RawMessage, promoted bool) *Service {
	r.t.Helper()
	s := New(Config{Dir: filepath.Join(r.dir, "config"), CheckInterval: time.Hour, Timeout: 6 * time.Second, CheckMax: 15, Logger: quiet()},
		Deps{FS: vfs.OS(), Store: r.st, Writer: direct{r.st}, Durability: allDurable{r.st}, Steps: &steps{},
			Producers: r.p, Topics: allTopics{}})
	if err := s.Load(checkpoint, nil, promoted); err != nil {
		r.t.Fatal(err)
	}
	return s
}

// halves stores n half messages born a minute ago (due for a check).
func (r *rig) halves(n int) {
	r.t.Helper()
	born := time.Now().Add(-time.Minute).UnixMilli()
	for i := range n {
		props := msgprop.With(msgprop.With(msgprop.With(msgprop.With("", msgprop.RealTopic, "T"), msgprop.RealQueueID, "0"),
			msgprop.UniqKey, "U"+strconv.Itoa(i)), msgprop.ProducerGroup, "pg")
		if _, err := r.st.Put(context.Background(), []store.Message{{Topic: HalfTopic, BornTimestamp: born, Body: []byte("h"), Properties: props}}); err != nil {
			r.t.Fatal(err)
		}
	}
	// A round passes over halves stored in the millisecond it begins.
	ms := time.Now().UnixMilli()
	for time.Now().UnixMilli() <= ms {
		time.Sleep(100 * time.Microsecond)
	}
}

// resolve ends the half at queue offset half as END_TRANSACTION does: a
// claim, its op record, the claim ended.
func resolve(t *testing.T, s *Service, w Writer, half int64) {
	t.Helper()
	if !s.Claim(half) {
		t.Fatalf("claim of half %d refused", half)
	}
	res, err := w.WriteTrans(context.Background(), []store.Message{s.OpMessage(half)})
	if err != nil {
		t.Fatal(err)
	}
	s.Resolved(half, res[0].QueueOffset)
}

// TestTxnClaimsResolveOnce: a half is claimed by one caller at a time and
// resolved at most once; HalfOffset moves over the resolved halves at its
// front, and a half resolved ahead of one in doubt is held until that one
// is resolved.
func TestTxnClaimsResolveOnce(t *testing.T) {
	r := newRig(t)
	r.halves(3)
	s := r.service(nil, false)
	w := direct{r.st}
	resolve(t, s, w, 1)
	if st, ahead := s.State(), s.ResolvedAhead(); st.HalfOffset != 0 || ahead != 1 {
		t.Fatalf("half 1 resolved ahead of 0: progress %+v, %d held; want HalfOffset 0, 1 held", st, ahead)
	}
	if s.Claim(1) {
		t.Fatal("a resolved half was claimed again")
	}
	if !s.Claim(0) || s.Claim(0) {
		t.Fatal("half 0: the first claim must hold, the second fail")
	}
	s.Unclaim(0)
	resolve(t, s, w, 0)
	if st, ahead := s.State(), s.ResolvedAhead(); st.HalfOffset != 2 || ahead != 0 || st.OpOffset != 0 {
		t.Fatalf("halves 0 and 1 resolved: progress %+v, %d held; want HalfOffset 2, OpOffset 0, none held", st, ahead)
	}
	if s.Claim(0) {
		t.Fatal("a half below HalfOffset was claimed")
	}
}

// TestTxnRoundChecksHalvesInDoubt: a round puts every half in doubt back
// with TRANSACTION_CHECK_TIMES 1 and an op record for the old copy, asks
// about each copy, passes the resolved half, and moves HalfOffset past the
// originals; the progress is saved, and loaded again from the file, or from
// a checkpoint that is further along; a promoted slave takes the
// checkpoint's alone.
func TestTxnRoundChecksHalvesInDoubt(t *testing.T) {
	r := newRig(t)
	r.halves(3)
	s := r.service(nil, false)
	resolve(t, s, direct{r.st}, 1)
	var rounds []int64
	var checked []int64
	s.SetHooks(Hooks{OnRound: func(n, _ int64) { rounds = append(rounds, n) }, OnCheck: func(_, half int64) { checked = append(checked, half) }})
	if err := s.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rounds, []int64{1}) || !slices.Equal(checked, []int64{0, 2}) {
		t.Fatalf("rounds %v checked %v, want round 1 checking halves 0 and 2", rounds, checked)
	}
	res, err := r.st.Get(context.Background(), store.GetRequest{Topic: HalfTopic, Offset: 3, MaxMsgs: 10})
	if err != nil {
		t.Fatal(err)
	}
	var copies []string
	for _, raw := range res.Records {
		rec, _, err := store.DecodeRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		p := msgprop.Parse(rec.Properties)
		copies = append(copies, p[msgprop.UniqKey]+"#"+p[PropCheckTimes])
	}
	if !slices.Equal(copies, []string{"U0#1", "U2#1"}) || !slices.Equal(r.p.checked, []int64{3, 4}) {
		t.Fatalf("put back %v, asked about %v; want [U0#1 U2#1] asked at 3 and 4", copies, r.p.checked)
	}
	if n := r.st.MaxQueueOffset(OpHalfTopic, 0); n != 3 {
		t.Fatalf("%d op records, want 3 (half 1's, and one per copy put back)", n)
	}
	// Every original half is resolved; OpOffset stays where the round's
	// sync of the op queue ended (its own op records are read next round).
	want := State{HalfOffset: 3, OpOffset: 1}
	if st := s.State(); st != want {
		t.Fatalf("progress after the round %+v, want %+v", st, want)
	}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	if st := r.service(nil, false).State(); st != want {
		t.Fatalf("loaded from %s: %+v, want %+v", File, st, want)
	}
	ahead, _ := json.Marshal(State{HalfOffset: 4, OpOffset: 3})
	if st := r.service(ahead, false).State(); st != (State{HalfOffset: 4, OpOffset: 3}) {
		t.Fatalf("with a checkpoint further along: %+v, want the checkpoint's", st)
	}
	if st := r.service(nil, true).State(); st != (State{}) {
		t.Fatalf("a promoted slave without a checkpoint section: %+v, want the zero progress (its own file ignored)", st)
	}
}
