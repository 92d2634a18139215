package compaction

// Tests from a storage review of compaction: each failed on the first
// version and guards the scenario its comment names (the comment says how
// it went wrong then).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestCompactionNeverDeletesAListedRetriedKey (loses data): a round
// whose PUT succeeded but whose manifest delta was refused (upload's
// commit returns the fence's refusal when the lease has lapsed for a
// moment: a renewal late by a bucket hiccup, after which it is renewed
// again) dooms its object key. The next round at the same point (the
// queue got no new upload in between: a quiet queue, or the newest object
// does not hold it) under the same epoch writes the SAME key
// (Key(topic, queue, point, epoch)) and lists it. Grace after the first
// failure deleteDoomed deletes that key, which the manifest lists: retention
// has already deleted the segments below its point, so the queue's whole
// compacted history is gone and every read below the point fails.
func TestCompactionNeverDeletesAListedRetriedKey(t *testing.T) {
	f := newFixture(t, Config{TombstoneRetention: time.Hour})
	f.send(t, 300, 20, rand.New(rand.NewPCG(21, 22)))
	ctx := context.Background()
	tp := Topic{Name: "T", Queues: 1}
	f.log.fail = errors.New("upload: manifest write: lease expired")
	if err := f.c.CompactQueue(ctx, tp, 0, 300); err == nil {
		t.Fatal("a refused manifest delta reported success")
	}
	f.log.fail = nil // the lease is renewed
	f.now = f.now.Add(time.Minute)
	if err := f.c.CompactQueue(ctx, tp, 0, 300); err != nil {
		t.Fatal(err)
	}
	listed := f.log.gens[QueueKey{"T", 0}]
	f.now = f.now.Add(5 * time.Minute) // Grace (default) past the first round
	f.c.deleteDoomed(ctx)              // what every Round does first
	if _, err := f.bucket.Stat(ctx, listed.Key); err != nil {
		t.Fatalf("the listed generation %s was deleted by the compactor (%v): the manifest lists a missing object, "+
			"its queue's records below point %d are lost", listed.Key, err, listed.Base)
	}
}

// ambiguousLog lists the put objects and then reports an error, as
// upload's commit does when its PutIf of the delta landed but the answer
// was lost (timeout) and the retry then finds the fence refusing or ctx
// done: commit returns that error, the delta is in the bucket.
type ambiguousLog struct {
	*memLog
	once sync.Once
}

func (l *ambiguousLog) Replace(ctx context.Context, put, del []upload.Object, cond func(map[QueueKey]upload.Object) error) error {
	err := l.memLog.Replace(ctx, put, del, cond)
	failed := false
	l.once.Do(func() { failed = true })
	if err == nil && failed {
		return errors.New("upload: manifest write: lease expired")
	}
	return err
}

// TestCompactionAmbiguousListingKeepsTheGeneration (loses data): a
// Replace whose delta landed but which returned an error (ambiguous
// outcome) makes the compactor doom the new, listed generation; Grace
// later it deletes it while the manifest lists it. Nothing re-checks the
// manifest before deleting a doomed key.
func TestCompactionAmbiguousListingKeepsTheGeneration(t *testing.T) {
	f := newFixture(t, Config{TombstoneRetention: time.Hour})
	al := &ambiguousLog{memLog: f.log}
	f.c.d.Log = al
	f.send(t, 300, 20, rand.New(rand.NewPCG(23, 24)))
	ctx := context.Background()
	tp := Topic{Name: "T", Queues: 1}
	_ = f.c.CompactQueue(ctx, tp, 0, 300) // listed, but reported failed
	listed, ok := f.log.gens[QueueKey{"T", 0}]
	if !ok {
		t.Fatal("setup: the delta did not list the generation")
	}
	f.now = f.now.Add(5 * time.Minute)
	f.c.deleteDoomed(ctx)
	if _, err := f.bucket.Stat(ctx, listed.Key); err != nil {
		t.Fatalf("the listed generation %s was deleted by the compactor (%v)", listed.Key, err)
	}
}

// TestCompactionKeyTokensBounded (availability): the key table
// has one 12-byte entry per space-separated KEYS token, duplicates
// included, and every Reader keeps it decoded in memory for as long as
// the generation is listed (doc.go: "about 56 bytes per kept record").
// One record with KEYS "k a a a ... a" (a properties value of ~32 KiB)
// costs ~190 KiB of resident index per reader; 10,000 such keys (330 MB of
// messages) cost ~2 GB on the master, each slave and every msgId miss
// (ReadRecord opens every generation). A QUERY_MESSAGE for "a" then reads
// every kept record (ByKey returns all candidates, unbounded).
func TestCompactionKeyTokensBounded(t *testing.T) {
	f := newFixture(t, Config{})
	keys := "k0 " + strings.Repeat("a ", 15000)
	if _, err := f.st.Put(context.Background(), []store.Message{{Topic: "T", Body: []byte("v"), Properties: "KEYS\x01" + keys}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := f.c.CompactQueue(ctx, Topic{Name: "T", Queues: 1}, 0, 1); err != nil {
		t.Fatal(err)
	}
	g, err := f.r.generation(ctx, QueueKey{"T", 0})
	if err != nil || g == nil {
		t.Fatal(g, err)
	}
	if n := len(g.keys); n > 64 {
		t.Fatalf("one kept record holds %d key table entries (%d bytes resident per reader): duplicate tokens are not "+
			"deduplicated and a record's tokens are not bounded", n, n*keyRefSize)
	}
}

// maxReadObject records the largest single read of a generation.
type maxReadObject struct {
	ObjectReader
	mu  sync.Mutex
	max int
}

func (m *maxReadObject) ReadObjectAt(ctx context.Context, o coldread.Object, p []byte, off int64) error {
	m.mu.Lock()
	m.max = max(m.max, len(p))
	m.mu.Unlock()
	return m.ObjectReader.ReadObjectAt(ctx, o, p, off)
}

// TestCompactionMergeReadsBoundedBatches (availability): pass 2 reads the
// previous generation 1024 entries at a time into one buffer, whatever
// their size (readRecords: make([]byte, to-from)). With the default
// STRATAMQ_MAX_MESSAGE_SIZE (4 MiB) a queue of 1024 large values makes
// every round allocate up to 4 GiB at once (pass 1 reads 4 MiB per Get):
// the broker is OOM-killed, restarts, and the next round does it again.
// Here 600 records of 60 KiB: a single 36 MB read.
func TestCompactionMergeReadsBoundedBatches(t *testing.T) {
	f := newFixture(t, Config{})
	rng := rand.New(rand.NewPCG(25, 26))
	body := make([]byte, 60<<10)
	for i := range 600 {
		for j := range body {
			body[j] = byte(rng.Uint32())
		}
		if _, err := f.st.Put(context.Background(), []store.Message{{Topic: "T", Body: body,
			Properties: fmt.Sprintf("KEYS\x01k%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.st.Put(context.Background(), []store.Message{{Topic: "T", Body: []byte("x"), Properties: "KEYS\x01k0"}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tp := Topic{Name: "T", Queues: 1}
	if err := f.c.CompactQueue(ctx, tp, 0, 600); err != nil {
		t.Fatal(err)
	}
	cold, err := coldread.New(coldread.Config{Bucket: f.bucket, CacheBytes: 8 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Close()
	mr := &maxReadObject{ObjectReader: cold}
	f.r = NewReader(f.log, mr)
	f.c.d.Reader = f.r
	if err := f.c.CompactQueue(ctx, tp, 0, 601); err != nil {
		t.Fatal(err)
	}
	if mr.max > 8<<20 {
		t.Fatalf("one read of the previous generation of %d bytes: pass 2's batches are bounded by count only", mr.max)
	}
}
