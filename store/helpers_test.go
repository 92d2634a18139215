package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// Helpers shared by the crash, recovery and error tests: acknowledged
// messages, the checks that a recovered store kept them, and the
// concurrent writers that race a crash.

// acked is a message a Put acknowledged, at its queue offset.
type acked struct {
	qid  int32
	qoff int64
	body string
}

// appendAcked appends each of msgs, with the queue offset its PutResult
// gave it, to acks.
func appendAcked(acks []acked, msgs []Message, res []PutResult) []acked {
	for i, r := range res {
		acks = append(acks, acked{msgs[i].QueueID, r.QueueOffset, string(msgs[i].Body)})
	}
	return acks
}

// putAcked puts msgs as one batch (mustPut) and appends them to *acks.
func putAcked(t testing.TB, s *Store, acks *[]acked, msgs ...Message) []PutResult {
	t.Helper()
	res := mustPut(t, s, msgs...)
	*acks = appendAcked(*acks, msgs, res)
	return res
}

// checkAcked asserts every acked message is in s at its queue offset.
func checkAcked(t *testing.T, s *Store, topic string, acks []acked) {
	t.Helper()
	for _, a := range acks {
		r, err := s.Get(context.Background(), GetRequest{Topic: topic, QueueID: a.qid, Offset: a.qoff, MaxMsgs: 1})
		if err != nil {
			t.Fatalf("get %d@%d: %v", a.qid, a.qoff, err)
		}
		if r.Status != Found {
			t.Fatalf("acked %d@%d (%.20s) lost: %v (max %d)", a.qid, a.qoff, a.body, r.Status, r.MaxOffset)
		}
		rec, _, err := DecodeRecord(r.Records[0])
		if err != nil || string(rec.Body) != a.body {
			t.Fatalf("acked %d@%d: got %.20q, want %.20q (%v)", a.qid, a.qoff, rec.Body, a.body, err)
		}
	}
}

// checkConsistent asserts the recovered log is a clean prefix: every queue
// reads back without error, queue offsets are dense, and a new Put lands at
// the end.
func checkConsistent(t *testing.T, s *Store, topic string, queues int32) {
	t.Helper()
	for q := range queues {
		recs := readQueue(t, s, topic, q)
		for i, r := range recs {
			if r.QueueOffset != int64(i) {
				t.Fatalf("queue %d: record %d has queue offset %d", q, i, r.QueueOffset)
			}
			if r.PhysOffset+int64(r.Size) > s.MaxPhysOffset() {
				t.Fatalf("record past the end of the log")
			}
		}
		if int64(len(recs)) != s.MaxQueueOffset(topic, q) {
			t.Fatalf("queue %d: %d records, max offset %d", q, len(recs), s.MaxQueueOffset(topic, q))
		}
	}
	checkPutAtEnd(t, s, topic, 0, "after-recovery")
}

// checkPutAtEnd puts one message to topic/qid and asserts that it starts
// at the end of the log and took the queue's last offset.
func checkPutAtEnd(t *testing.T, s *Store, topic string, qid int32, body string) {
	t.Helper()
	end := s.MaxPhysOffset()
	res := mustPut(t, s, msg(topic, qid, body))
	if res[0].PhysOffset != end || res[0].QueueOffset != s.MaxQueueOffset(topic, qid)-1 {
		t.Fatalf("put %q: %+v, want it at the end of the log (%d) with the queue's last offset", body, res[0], end)
	}
}

// openRecovered opens o (over a crashed copy of a store's files), asserts
// that every message in acks is back and the log is consistent
// (checkConsistent), and returns the store, still open.
func openRecovered(t *testing.T, o Options, topic string, acks []acked, queues int32) *Store {
	t.Helper()
	s := mustOpen(t, o)
	checkAcked(t, s, topic, acks)
	checkConsistent(t, s, topic, queues)
	return s
}

// recoverFlushed opens o, puts each of flushed (one Put a message), flushes,
// puts each of unflushed, takes crash's copy of the files (o.FS, a
// *vfs.Mem) and closes the store; it returns the store recovered from the
// copy, with every flushed message back (openRecovered).
func recoverFlushed(t *testing.T, o Options, crash func(*vfs.Mem) *vfs.Mem, topic string, queues int32, flushed, unflushed []Message) *Store {
	t.Helper()
	s := mustOpen(t, o)
	var acks []acked
	for _, m := range flushed {
		putAcked(t, s, &acks, m)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, m := range unflushed {
		mustPut(t, s, m)
	}
	crashed := crash(o.FS.(*vfs.Mem))
	mustClose(t, s)
	o.FS = crashed
	return openRecovered(t, o, topic, acks, queues)
}

// putLoad describes the writers that race a crash: writer w makes up to
// puts Puts to queue w%queues of topic, each of 1 to maxBatch messages
// whose bodies carry fewer than maxPad bytes of padding.
type putLoad struct {
	topic                   string
	queues                  int32
	writers, puts, maxBatch int
	maxPad                  int
}

// ackLog collects what concurrent writers had acknowledged.
type ackLog struct {
	mu   sync.Mutex
	acks []acked
}

// start runs the writers on wg, writer w with the random stream (seed, w),
// until they are done or ctx is cancelled, and returns the log of their
// acknowledged messages. A Put that fails other than by the cancellation
// or ErrClosed fails the test.
func (p putLoad) start(ctx context.Context, t *testing.T, s *Store, wg *sync.WaitGroup, seed uint64) *ackLog {
	l := &ackLog{}
	for w := range p.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; i < p.puts && ctx.Err() == nil; i++ {
				var batch []Message
				for j := range 1 + r.IntN(p.maxBatch) {
					body := fmt.Sprintf("w%d-%d-%d-%s", w, i, j, bytes.Repeat([]byte("x"), r.IntN(p.maxPad)))
					batch = append(batch, msg(p.topic, int32(w)%p.queues, body))
				}
				res, err := s.Put(ctx, batch)
				if err != nil {
					if !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
						t.Errorf("put: %v", err)
					}
					return
				}
				l.mu.Lock()
				l.acks = appendAcked(l.acks, batch, res)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// snapshotWhen polls, every millisecond for at most timeout, until enough
// holds for the number of messages acknowledged so far, and returns a copy
// of them at that moment (the caller checks that it is enough).
func (l *ackLog) snapshotWhen(timeout time.Duration, enough func(n int) bool) []acked {
	deadline := time.Now().Add(timeout)
	for {
		l.mu.Lock()
		n := len(l.acks)
		l.mu.Unlock()
		if enough(n) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]acked(nil), l.acks...)
}
