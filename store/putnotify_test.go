package store

import (
	"errors"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

// TestStorePutNotifySyncDurableBeforeAck: in FlushSync a PutNotify callback
// fires only once the records are durable: a crash right after it keeps them.
func TestStorePutNotifySyncDurableBeforeAck(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.Flush = FlushSync
	s := mustOpen(t, o)
	const n = 50
	type ack struct {
		res []PutResult
		err error
	}
	acks := make(chan ack, n)
	for i := 0; i < n; i++ {
		s.PutNotify([]Message{msg("N", int32(i%3), "m")}, func(res []PutResult, err error) { acks <- ack{res, err} })
	}
	var got []PutResult
	deadline := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case a := <-acks:
			if a.err != nil {
				t.Fatal(a.err)
			}
			got = append(got, a.res...)
		case <-deadline:
			t.Fatalf("only %d of %d acks", len(got), n)
		}
	}
	crashed := fs.CrashClone()
	mustClose(t, s)
	o.FS = crashed
	r := mustOpen(t, o)
	defer mustClose(t, r)
	for _, p := range got {
		if _, err := r.ReadRecord(p.PhysOffset); err != nil {
			t.Fatalf("acked record at %d lost in the crash: %v", p.PhysOffset, err)
		}
	}
}

// TestStorePutNotifyAsyncAndErrors: FlushAsync acks before returning; a
// validation error is reported through the callback; a failing fdatasync
// reaches waiting callbacks as an error, never as an ack.
func TestStorePutNotifyAsyncAndErrors(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	called := false
	s.PutNotify([]Message{msg("A", 0, "x")}, func(res []PutResult, err error) {
		called = err == nil && len(res) == 1
	})
	if !called {
		t.Fatal("async PutNotify did not ack before returning")
	}
	big := msg("A", 0, string(make([]byte, 64<<10)))
	var verr error
	s.PutNotify([]Message{big}, func(_ []PutResult, err error) { verr = err })
	if !errors.Is(verr, ErrMessageTooLarge) {
		t.Fatalf("oversize: %v", verr)
	}
	mustClose(t, s)

	fail := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpFileSync {
			return errorfs.ErrInjected
		}
		return nil
	})}
	efs := errorfs.Wrap(vfs.NewMem(), fail)
	o := testOpts(efs)
	o.Flush = FlushSync
	s2 := mustOpen(t, o)
	fail.On()
	errc := make(chan error, 1)
	s2.PutNotify([]Message{msg("B", 0, "y")}, func(_ []PutResult, err error) { errc <- err })
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("acked although fdatasync failed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("callback never fired after a failed fdatasync")
	}
	fail.Off()
	_ = s2.Close()
}
