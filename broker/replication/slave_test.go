package replication

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stratamq/stratamq/ha"
	"github.com/stratamq/stratamq/store"
)

// TestServiceSlaveStream: a slave's Service owns its stream from the
// master: Slave is nil before StartSlave, the stream it started copies
// the master's log, and Stop closes it while Slave keeps it readable.
func TestServiceSlaveStream(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func() *store.Store {
		st, err := store.Open(store.Options{Dir: t.TempDir(), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	ms, ss := open(), open()
	if _, err := ms.Put(context.Background(), []store.Message{{Topic: "T", Body: []byte("one")}, {Topic: "T", Body: []byte("two")}}); err != nil {
		t.Fatal(err)
	}
	master := New(Config{Listener: true})
	m, err := master.Start(ha.MasterOptions{Listen: "127.0.0.1:0", Log: ms, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Stop()
	if master.Slave() != nil {
		t.Fatal("a master's Service has a slave stream")
	}

	slave := New(Config{})
	if slave.Slave() != nil {
		t.Fatal("Slave before StartSlave: want nil")
	}
	s, err := slave.StartSlave(ha.SlaveOptions{Master: m.Addr().String(), Log: ss, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if slave.Slave() != s {
		t.Fatal("Slave is not the stream StartSlave started")
	}
	want := ms.MaxPhysOffset()
	for deadline := time.Now().Add(10 * time.Second); ss.MaxPhysOffset() < want || !s.State().Connected; {
		if time.Now().After(deadline) {
			t.Fatalf("the slave holds %d of the master's %d (connected %v)", ss.MaxPhysOffset(), want, s.State().Connected)
		}
		time.Sleep(10 * time.Millisecond)
	}
	slave.Stop()
	if slave.Slave() != s {
		t.Fatal("Slave after Stop: want the stopped stream, still readable")
	}
	if s.State().Connected {
		t.Error("the stream is connected after Stop")
	}
	if slave.Master() != nil || slave.Listener() != nil {
		t.Error("a slave's Service has a master")
	}
}
