package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// node is one writer incarnation over its own local log.
type node struct {
	log *memLog
	w   *Writer
	ctx context.Context
	end context.CancelFunc
	run chan error
}

// start reads the chain, reconciles l with it from `from`, claims and runs.
func start(t *testing.T, b tier.Bucket, l *memLog, from int64, cfg Config) (*node, error) {
	t.Helper()
	ctx := context.Background()
	for try := 0; try < 5; try++ {
		c, err := Read(ctx, b, "wal/")
		if err != nil {
			return nil, err
		}
		end, err := Reconcile(ctx, b, "wal/", c, from, l)
		if err != nil {
			return nil, err
		}
		cfg.Bucket = b
		if cfg.Log == nil {
			cfg.Log = l
		}
		w := NewWriter(cfg, c, end)
		if err := w.Claim(ctx); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return nil, err
		}
		n := &node{log: l, w: w, run: make(chan error, 1)}
		n.ctx, n.end = context.WithCancel(ctx)
		go func() { n.run <- w.Run(n.ctx) }()
		return n, nil
	}
	return nil, errors.New("claim kept conflicting")
}

func (n *node) stop() error { n.end(); return <-n.run }

// acked collects the records whose sends were answered OK.
type acked struct {
	mu   sync.Mutex
	recs map[int64][]byte
	errs int
}

func (a *acked) send(n *node, name string, size int, timeout time.Time) (done chan error) {
	r := record(name, size)
	s, e := n.log.add(r)
	done = make(chan error, 1)
	n.w.Await(e, timeout, func(err error) {
		a.mu.Lock()
		if err == nil {
			if a.recs == nil {
				a.recs = map[int64][]byte{}
			}
			a.recs[s] = r
		} else {
			a.errs++
		}
		a.mu.Unlock()
		done <- err
	})
	return done
}

// check restores an empty log from the bucket and finds every acked
// record at its offset.
func (a *acked) check(t *testing.T, b tier.Bucket, from int64) *memLog {
	t.Helper()
	ctx := context.Background()
	c, err := Read(ctx, b, "wal/")
	if err != nil {
		t.Fatalf("read chain: %v", err)
	}
	fresh := newMemLog(from)
	if _, err := Reconcile(ctx, b, "wal/", c, from, fresh); err != nil {
		t.Fatalf("reconcile an empty log: %v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for off, r := range a.recs {
		if off < from {
			continue // in the segments, not the WAL's to restore
		}
		if got := fresh.bytesAt(off, off+int64(len(r))); !bytes.Equal(got, r) {
			t.Fatalf("acked record %q at %d: restored %q", r[4:12], off, got)
		}
	}
	return fresh
}

func TestShipAndRestoreOnEmptyDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		n, err := start(t, b, newMemLog(1000), 1000, Config{})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		var dones []chan error
		for i := range 50 {
			dones = append(dones, a.send(n, fmt.Sprintf("m%03d", i), 100+i, time.Time{}))
		}
		for _, d := range dones {
			if err := <-d; err != nil {
				t.Fatalf("send: %v", err)
			}
		}
		st := n.w.Stats()
		if st.Objects != 1 {
			t.Errorf("50 sends within one linger made %d objects, want 1", st.Objects)
		}
		if err := n.stop(); err != nil {
			t.Fatal(err)
		}
		fresh := a.check(t, b, 1000)
		if got, want := fresh.MaxPhysOffset(), n.log.MaxPhysOffset(); got != want {
			t.Errorf("restored log ends at %d, written to %d", got, want)
		}
	})
}

func TestLingerBoundsPutsAndLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		n, err := start(t, b, newMemLog(0), 0, Config{Linger: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		var worst time.Duration
		var wg sync.WaitGroup
		var mu sync.Mutex
		begin := time.Now()
		for i := 0; time.Since(begin) < 2*time.Second; i++ {
			sent := time.Now()
			d := a.send(n, fmt.Sprintf("m%04d", i), 200, time.Time{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := <-d; err != nil {
					t.Errorf("send: %v", err)
				}
				mu.Lock()
				worst = max(worst, time.Since(sent))
				mu.Unlock()
			}()
			time.Sleep(10 * time.Millisecond)
		}
		wg.Wait()
		// One object per linger at most: 2 s of sends, 200 ms lingers.
		if got := n.w.Stats().Objects; got > 11 {
			t.Errorf("%d objects for 2 s of sends at a 200ms linger, want at most 11", got)
		}
		if worst > 200*time.Millisecond {
			t.Errorf("a send waited %v with an instant bucket, want at most the linger", worst)
		}
		_ = n.stop()
		a.check(t, b, 0)
	})
}

func TestFullBatchDoesNotWaitForLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		n, err := start(t, b, newMemLog(0), 0, Config{Linger: time.Hour, Batch: 4096})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		var dones []chan error
		begin := time.Now()
		for i := range 10 {
			dones = append(dones, a.send(n, fmt.Sprintf("b%d", i), 1000, time.Time{}))
		}
		// Four 1000-byte records fill a 4096-byte batch: two full objects
		// go at once; the last two records wait for the linger.
		for i, d := range dones {
			if err := <-d; err != nil {
				t.Fatal(err)
			}
			waited := time.Since(begin)
			if i < 8 && waited != 0 {
				t.Fatalf("record %d of a full batch waited %v (virtual time), want 0", i, waited)
			}
			if i >= 8 && waited != time.Hour {
				t.Fatalf("record %d of a partial batch answered after %v, want the 1h linger", i, waited)
			}
		}
		if got := n.w.Stats().Objects; got != 3 {
			t.Errorf("%d objects, want 3 (two full, one at the linger)", got)
		}
		_ = n.stop()
		a.check(t, b, 0)
	})
}
