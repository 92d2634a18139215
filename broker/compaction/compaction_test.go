package compaction

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stratamq/stratamq/infra/importcheck"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/upload"
)

func TestCompactionImportsNoBroker(t *testing.T) { importcheck.NoBroker(t, "compaction") }

// memLog is a manifest of generations in memory, with Replace's rule.
type memLog struct {
	mu      sync.Mutex
	version int64
	gens    map[QueueKey]upload.Object
	ends    map[QueueKey]int64
	fail    error // Replace fails with it
}

func (l *memLog) Generations(context.Context) (map[QueueKey]upload.Object, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gens, l.version, nil
}

func (l *memLog) FreshGenerations(ctx context.Context) (map[QueueKey]upload.Object, error) {
	g, _, err := l.Generations(ctx)
	return g, err
}

func (l *memLog) UploadedEnds(context.Context) (map[QueueKey]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ends, nil
}

func (l *memLog) Replace(_ context.Context, put, del []upload.Object, cond func(map[QueueKey]upload.Object) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	if cond != nil {
		if err := cond(l.gens); err != nil {
			return err
		}
	}
	next := map[QueueKey]upload.Object{}
	for k, o := range l.gens {
		if !slices.ContainsFunc(del, func(d upload.Object) bool { return d.Key == o.Key }) {
			next[k] = o
		}
	}
	for _, o := range put {
		next[QueueKey{o.Topic, int32(o.QueueID)}] = o
	}
	l.gens = next
	l.version++
	return nil
}

type sent struct {
	offset int64
	key    string // "" keyless
	body   string // "" tombstone
	stored int64
}

type fixture struct {
	st     *store.Store
	bucket tier.Bucket
	log    *memLog
	r      *Reader
	c      *Compactor
	sent   []sent
	now    time.Time
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	st, err := store.Open(store.Options{FS: vfs.NewMem(), Dir: "/data", SegmentSize: 1 << 20, MaxMessageSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := tier.NewMem()
	cold, err := coldread.New(coldread.Config{Bucket: b, CacheBytes: 8 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cold.Close() })
	f := &fixture{st: st, bucket: b, log: &memLog{gens: map[QueueKey]upload.Object{}}, now: time.Now()}
	f.r = NewReader(f.log, cold)
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return f.now }
	}
	f.c = New(cfg, Deps{Store: st, Topics: topicList{{Name: "T", Queues: 1}}, Log: f.log, Reader: f.r, Bucket: b,
		Fence: func() (int64, error) { return 3, nil }, ValidFor: func() time.Duration { return time.Minute }})
	return f
}

type topicList []Topic

func (l topicList) Compacted() []Topic { return l }

// send puts n messages over keys k0..k(keys-1) (every 10th keyless, every
// 7th an empty body) into T/0.
func (f *fixture) send(t *testing.T, n, keys int, rng *rand.Rand) {
	t.Helper()
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("k%d", rng.IntN(keys))
		body := fmt.Sprintf("v%d-%s", len(f.sent), key)
		if i%10 == 9 {
			key = ""
		}
		if i%7 == 6 {
			body = ""
		}
		props := "UNIQ_KEY\x01" + fmt.Sprintf("U%08d", len(f.sent)) + "\x02TAGS\x01a"
		if key != "" {
			props = "KEYS\x01" + key + "\x02" + props
		}
		res, err := f.st.Put(context.Background(), []store.Message{{Topic: "T", Body: []byte(body), Properties: props}})
		if err != nil {
			t.Fatal(err)
		}
		f.sent = append(f.sent, sent{offset: res[0].QueueOffset, key: key, body: body, stored: res[0].StoreTimestamp})
	}
}

// want is what a generation up to point holds: each key's latest below
// it, no tombstone older than tombRet, every keyless record.
func (f *fixture) want(point int64, tombRet time.Duration) []sent {
	latest := map[string]int64{}
	for _, s := range f.sent {
		if s.offset < point && s.key != "" {
			latest[s.key] = s.offset
		}
	}
	var out []sent
	for _, s := range f.sent {
		if s.offset >= point {
			break
		}
		if s.key != "" && (latest[s.key] != s.offset || s.body == "" && f.now.Sub(time.UnixMilli(s.stored)) >= tombRet) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// readAll pulls T/0 from 0 to point through the Reader as a consumer
// would, following NextBeginOffset.
func (f *fixture) readAll(t *testing.T, point int64) []sent {
	t.Helper()
	var out []sent
	for off, pulls := int64(0), 0; off < point; pulls++ {
		if pulls > 10000 {
			t.Fatal("no end")
		}
		res, ok, err := f.r.Get(context.Background(), store.GetRequest{Topic: "T", Offset: off, MaxMsgs: 17}, point)
		if err != nil || !ok {
			t.Fatalf("get at %d: ok %v err %v", off, ok, err)
		}
		for _, rec := range res.Records {
			r, _, err := store.DecodeRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			k, _ := property(r.Properties, "KEYS")
			out = append(out, sent{offset: r.QueueOffset, key: k, body: string(r.Body), stored: r.StoreTimestamp})
		}
		if res.NextBeginOffset <= off {
			t.Fatalf("next %d at %d (%v)", res.NextBeginOffset, off, res.Status)
		}
		off = res.NextBeginOffset
	}
	return out
}

func same(t *testing.T, what string, got, want []sent) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: record %d is %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

// TestCompactionKeepsTheLatestOfEachKey compacts a queue twice (the
// second round merging the first generation with newer records) and reads
// it from offset 0 as a consumer: exactly the latest record of each key,
// the recent tombstones and the keyless records, in offset order; then
// the tombstones go once older than their retention.
func TestCompactionKeepsTheLatestOfEachKey(t *testing.T) {
	f := newFixture(t, Config{TombstoneRetention: time.Hour})
	rng := rand.New(rand.NewPCG(1, 2))
	f.send(t, 3000, 120, rng)
	ctx := context.Background()
	tp := Topic{Name: "T", Queues: 1}
	if err := f.c.CompactQueue(ctx, tp, 0, 1500); err != nil {
		t.Fatal(err)
	}
	same(t, "first generation", f.readAll(t, 1500), f.want(1500, time.Hour))
	first := f.log.gens[QueueKey{"T", 0}].Key
	if err := f.c.CompactQueue(ctx, tp, 0, 3000); err != nil {
		t.Fatal(err)
	}
	same(t, "second generation", f.readAll(t, 3000), f.want(3000, time.Hour))
	if len(f.c.doomed) != 1 || f.c.doomed[0].key != first {
		t.Fatalf("doomed %v, want the first generation %s", f.c.doomed, first)
	}
	// Two hours on, the tombstones have gone from the next generation.
	f.send(t, 10, 120, rng)
	f.now = f.now.Add(2 * time.Hour)
	if err := f.c.CompactQueue(ctx, tp, 0, 3010); err != nil {
		t.Fatal(err)
	}
	got := f.readAll(t, 3010)
	same(t, "after the tombstone retention", got, f.want(3010, time.Hour))
	for _, s := range got {
		if s.key != "" && s.body == "" {
			t.Fatalf("tombstone %+v kept past its retention", s)
		}
	}
	// The replaced generations go after the grace (5 minutes by default):
	// the first now, the second (replaced just now) 5 minutes on.
	f.c.deleteDoomed(ctx)
	if len(f.c.doomed) != 1 {
		t.Fatalf("doomed %v, want the second generation only", f.c.doomed)
	}
	f.now = f.now.Add(5 * time.Minute)
	f.c.deleteDoomed(ctx)
	if err := f.bucket.List(ctx, "compacted/", func(key string, _ int64) error {
		if key != f.log.gens[QueueKey{"T", 0}].Key {
			return fmt.Errorf("replaced generation %s still in the bucket", key)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestCompactionLookups finds compacted records by msgId (commitlog
// offset), by key, by UNIQ_KEY and by time, and the queue's min.
func TestCompactionLookups(t *testing.T) {
	f := newFixture(t, Config{TombstoneRetention: time.Hour})
	f.send(t, 400, 20, rand.New(rand.NewPCG(3, 4)))
	ctx := context.Background()
	if err := f.c.CompactQueue(ctx, Topic{Name: "T", Queues: 1}, 0, 400); err != nil {
		t.Fatal(err)
	}
	want := f.want(400, time.Hour)
	g, err := f.r.generation(ctx, QueueKey{"T", 0})
	if err != nil || g == nil {
		t.Fatal(g, err)
	}
	if mn, ok, _ := f.r.Min(ctx, "T", 0); !ok || mn != want[0].offset {
		t.Fatalf("min %d %v, want %d", mn, ok, want[0].offset)
	}
	for i, e := range g.Entries {
		rec, ok, err := f.r.ReadRecord(ctx, e.Phys)
		if err != nil || !ok {
			t.Fatalf("msgId lookup of %d: %v %v", e.Phys, ok, err)
		}
		r, _, _ := store.DecodeRecord(rec)
		if r.QueueOffset != want[i].offset {
			t.Fatalf("msgId lookup: offset %d, want %d", r.QueueOffset, want[i].offset)
		}
		uniq, _ := property(r.Properties, "UNIQ_KEY")
		recs, err := f.r.QueryByKey(ctx, "T", uniq, 0, 0, 32)
		if err != nil || len(recs) != 1 || !bytes.Equal(recs[0], rec) {
			t.Fatalf("UNIQ_KEY %s: %d records, %v", uniq, len(recs), err)
		}
		if want[i].key != "" {
			recs, err := f.r.QueryByKey(ctx, "T", want[i].key, 0, 0, 32)
			if err != nil || len(recs) != 1 || !bytes.Equal(recs[0], rec) {
				t.Fatalf("key %s: %d records, %v", want[i].key, len(recs), err)
			}
		}
	}
	if _, ok, _ := f.r.ReadRecord(ctx, 1); ok {
		t.Fatal("a commitlog offset no record starts at was found")
	}
	if recs, _ := f.r.QueryByKey(ctx, "T", "nokey", 0, 0, 32); len(recs) != 0 {
		t.Fatalf("unknown key found %d records", len(recs))
	}
	mid := want[len(want)/2]
	if off, ok, err := f.r.OffsetAtTime(ctx, "T", 0, mid.stored); err != nil || !ok || off > mid.offset {
		t.Fatalf("offset at time %d: %d %v %v, want at most %d", mid.stored, off, ok, err, mid.offset)
	}
	// A filter that refuses everything scans on (NoMatchedMessage) to the point.
	res, _, err := f.r.Get(ctx, store.GetRequest{Topic: "T", Filter: func(int64) bool { return false }}, 400)
	if err != nil || res.Status != store.NoMatchedMessage || res.NextBeginOffset != 400 {
		t.Fatalf("filtered get: %v next %d err %v", res.Status, res.NextBeginOffset, err)
	}
	// Past the point the store serves the queue.
	if _, ok, _ := f.r.Get(ctx, store.GetRequest{Topic: "T", Offset: 400}, 400); ok {
		t.Fatal("the reader served an offset at its point")
	}
}

// TestCompactionCorruptGeneration: a generation whose bytes changed in the
// bucket is an error, never other records.
func TestCompactionCorruptGeneration(t *testing.T) {
	f := newFixture(t, Config{})
	f.send(t, 200, 10, rand.New(rand.NewPCG(5, 6)))
	ctx := context.Background()
	if err := f.c.CompactQueue(ctx, Topic{Name: "T", Queues: 1}, 0, 200); err != nil {
		t.Fatal(err)
	}
	o := f.log.gens[QueueKey{"T", 0}]
	buf := make([]byte, o.Size)
	if err := f.bucket.ReadAt(ctx, o.Key, buf, 0); err != nil {
		t.Fatal(err)
	}
	buf[len(buf)/3] ^= 0x40
	if err := f.bucket.Put(ctx, o.Key, bytes.NewReader(buf), int64(len(buf))); err != nil {
		t.Fatal(err)
	}
	cold, _ := coldread.New(coldread.Config{Bucket: f.bucket}, nil)
	defer cold.Close()
	r := NewReader(f.log, cold)
	_, _, err := r.Get(ctx, store.GetRequest{Topic: "T", MaxMsgs: 1000, MaxBytes: 64 << 20}, 200)
	if err == nil {
		t.Fatal("a corrupt generation read without an error")
	}
}

// TestCompactionFailedListingLeavesTheOldGeneration: a round whose
// manifest delta fails leaves the old generation listed and readable; its
// own object, unlisted, is doomed by the next sweep and deleted a grace
// later, and so is any other unlisted object (a crash's leftover); the
// listed generation is never deleted.
func TestCompactionFailedListingLeavesTheOldGeneration(t *testing.T) {
	f := newFixture(t, Config{TombstoneRetention: time.Hour})
	f.send(t, 300, 10, rand.New(rand.NewPCG(7, 8)))
	ctx := context.Background()
	tp := Topic{Name: "T", Queues: 1}
	if err := f.c.CompactQueue(ctx, tp, 0, 100); err != nil {
		t.Fatal(err)
	}
	f.log.fail = errors.New("fenced")
	if err := f.c.CompactQueue(ctx, tp, 0, 300); err == nil {
		t.Fatal("a failed listing reported success")
	}
	same(t, "old generation", f.readAll(t, 100), f.want(100, time.Hour))
	f.log.fail = nil
	if err := f.bucket.Put(ctx, Key("T", 0, 5, 1), bytes.NewReader([]byte("x")), 1); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		n := 0
		f.bucket.List(ctx, "compacted/", func(string, int64) error { n++; return nil })
		return n
	}
	if err := f.c.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if len(f.c.doomed) != 2 || count() != 3 {
		t.Fatalf("after the sweep: doomed %v, %d objects; want the two unlisted doomed, nothing deleted yet", f.c.doomed, count())
	}
	f.now = f.now.Add(5 * time.Minute)
	if err := f.c.deleteDoomed(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d generation objects a grace after the sweep, want the listed one", n)
	}
	same(t, "the listed generation", f.readAll(t, 100), f.want(100, time.Hour))
}

func TestParseKey(t *testing.T) {
	tp, q, p, e, err := parseKey(Key("Conf-1", 3, 12345, 7))
	if err != nil || tp != "Conf-1" || q != 3 || p != 12345 || e != 7 {
		t.Fatal(tp, q, p, e, err)
	}
	for _, bad := range []string{"compacted/x.cmp", "commitlog/1.seg", "compacted/T/a/1.2.cmp"} {
		if _, _, _, _, err := parseKey(bad); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// TestCompactionRateBound: with Config.Rate a round rests after each batch
// so that it reads no faster than the rate (a lower bound on its time,
// which rests only lengthen: no timing race), and the metrics count its
// reads and requests.
func TestCompactionRateBound(t *testing.T) {
	f := newFixture(t, Config{Rate: 256 << 10})
	f.c.d.Metrics = NewMetrics(nil)
	f.send(t, 1500, 30, rand.New(rand.NewPCG(9, 10)))
	start := time.Now()
	if err := f.c.CompactQueue(context.Background(), Topic{Name: "T", Queues: 1}, 0, 1500); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	read := counterValue(t, f.c.d.Metrics.read)
	if min := time.Duration(read / float64(256<<10) * 0.9 * float64(time.Second)); read < 100<<10 || took < min {
		t.Fatalf("read %.0f bytes in %s: want at least %s at 256 KiB/s", read, took, min)
	}
	if puts := counterValue(t, f.c.d.Metrics.requests.WithLabelValues("put")); puts != 1 {
		t.Fatalf("%v PUTs counted, want 1", puts)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestCompactionWaitsForAsManyNewAsKept: a queue whose generation keeps
// more records than the offsets uploaded since is not compacted again
// (each round rewrites the generation), and is once enough are.
func TestCompactionWaitsForAsManyNewAsKept(t *testing.T) {
	f := newFixture(t, Config{TombstoneRetention: time.Hour})
	f.send(t, 400, 200, rand.New(rand.NewPCG(31, 32)))
	ctx := context.Background()
	f.log.ends = map[QueueKey]int64{{"T", 0}: 400}
	if err := f.c.Round(ctx); err != nil {
		t.Fatal(err)
	}
	g, _ := f.r.generation(ctx, QueueKey{"T", 0})
	kept := int64(len(g.Entries))
	f.send(t, int(kept)-1, 200, rand.New(rand.NewPCG(33, 34)))
	f.log.ends = map[QueueKey]int64{{"T", 0}: 400 + kept - 1}
	if err := f.c.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := f.r.Point(ctx, "T", 0); p != 400 {
		t.Fatalf("compacted to %d with %d new offsets for %d kept", p, kept-1, kept)
	}
	f.send(t, 1, 200, rand.New(rand.NewPCG(35, 36)))
	f.log.ends = map[QueueKey]int64{{"T", 0}: 400 + kept}
	if err := f.c.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := f.r.Point(ctx, "T", 0); p != 400+kept {
		t.Fatalf("point %d, want %d once as many new offsets as kept records were uploaded", p, 400+kept)
	}
	// One more offset: compacted only MaxDelay (1h) after the last round.
	f.send(t, 1, 200, rand.New(rand.NewPCG(37, 38)))
	f.log.ends = map[QueueKey]int64{{"T", 0}: 401 + kept}
	f.now = f.now.Add(59 * time.Minute)
	if err := f.c.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := f.r.Point(ctx, "T", 0); p != 400+kept {
		t.Fatalf("compacted again after 59 minutes with one new offset: point %d", p)
	}
	f.now = f.now.Add(2 * time.Minute)
	if err := f.c.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := f.r.Point(ctx, "T", 0); p != 401+kept {
		t.Fatalf("point %d an hour after the last round, want %d", p, 401+kept)
	}
}

// TestReaderTablesBounded: a Reader holds at most its bound of decoded
// tables; the least recently used go first and are read again when needed.
func TestReaderTablesBounded(t *testing.T) {
	f := newFixture(t, Config{TombstoneRetention: time.Hour})
	f.c.d.Topics = topicList{{Name: "T", Queues: 2}}
	for i := range 600 {
		if _, err := f.st.Put(context.Background(), []store.Message{{Topic: "T", QueueID: int32(i % 2), Body: []byte("v"),
			Properties: fmt.Sprintf("KEYS\x01k%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for q := range int32(2) {
		if err := f.c.CompactQueue(ctx, Topic{Name: "T", Queues: 2}, q, 300); err != nil {
			t.Fatal(err)
		}
	}
	g0, _ := f.r.generation(ctx, QueueKey{"T", 0})
	one := tableBytes(g0.Index)
	f.r.max = one + one/2 // room for one table
	if _, err := f.r.generation(ctx, QueueKey{"T", 1}); err != nil {
		t.Fatal(err)
	}
	f.r.mu.Lock()
	held, n := f.r.held, len(f.r.loaded)
	f.r.mu.Unlock()
	if held > f.r.max || n != 1 {
		t.Fatalf("%d tables holding %d bytes, bound %d", n, held, f.r.max)
	}
	// Queue 0's table, dropped, is read again and serves the same records.
	res, ok, err := f.r.Get(ctx, store.GetRequest{Topic: "T", QueueID: 0, MaxMsgs: 1000, MaxBytes: 1 << 20}, 300)
	if err != nil || !ok || len(res.Records) != 300 {
		t.Fatalf("queue 0 after its table was dropped: %d records, %v %v", len(res.Records), ok, err)
	}
}
