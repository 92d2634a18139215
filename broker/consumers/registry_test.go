package consumers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// A client joining a group makes the broker notify the group's other
// clients, never the one that joined (it rebalances by itself); leaving
// notifies those that remain.
func TestConsumerManagerNotifiesOtherClients(t *testing.T) {
	m := NewRegistry(Config{}, nil)
	c1, c2 := &remoting.Conn{}, &remoting.Conn{}
	reg := func(id string, c *remoting.Conn) (bool, []*remoting.Conn) {
		return m.Register(Registration{Group: "g", ClientID: id, Conn: c, Now: time.Now()})
	}
	if changed, notify := reg("c1", c1); !changed || len(notify) != 0 {
		t.Fatalf("first client: changed %v, notify %d conns (want true, none)", changed, len(notify))
	}
	if changed, notify := reg("c1", c1); changed || len(notify) != 0 {
		t.Fatalf("same client again: changed %v, notify %d conns (want false, none)", changed, len(notify))
	}
	changed, notify := reg("c2", c2)
	if !changed || len(notify) != 1 || notify[0] != c1 {
		t.Fatalf("second client: changed %v, notify %v (want true, [c1])", changed, notify)
	}
	if left := m.Unregister("g", "c2", nil); len(left) != 1 || left[0] != c1 {
		t.Fatalf("c2 left: notify %v (want [c1])", left)
	}
	if left := m.Unregister("g", "c1", nil); len(left) != 0 {
		t.Fatalf("last client left: notify %v (want none)", left)
	}
}

type noticeLog struct {
	mu  sync.Mutex
	got map[string][]*remoting.Conn
}

func (n *noticeLog) ConsumerIdsChanged(group string, conns []*remoting.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got[group] = conns
}

// A closed connection takes its producers and consumers with it, and the
// consumers left in its groups are notified; a silent client expires the
// same way.
func TestRegistryConnClosedAndExpiry(t *testing.T) {
	n := &noticeLog{got: map[string][]*remoting.Conn{}}
	r := NewRegistry(Config{ClientExpiry: time.Minute}, n)
	c1, c2 := &remoting.Conn{}, &remoting.Conn{}
	t0 := time.Now()
	r.Register(Registration{Group: "g", ClientID: "c1", Conn: c1, Now: t0})
	r.Register(Registration{Group: "g", ClientID: "c2", Conn: c2, Now: t0.Add(30 * time.Second)})
	r.RegisterProducer("p", "c1", c1, t0)
	if r.ProducerConn("p") != c1 {
		t.Fatal("producer p has no conn")
	}
	r.Expire(t0.Add(61 * time.Second)) // c1 silent past a minute, c2 not
	if ids := r.ClientIDs("g"); len(ids) != 1 || ids[0] != "c2" {
		t.Fatalf("after expiry: group g holds %v (want [c2])", ids)
	}
	if got := n.got["g"]; len(got) != 1 || got[0] != c2 {
		t.Fatalf("after expiry: notified %v (want [c2])", got)
	}
	if len(r.ProducerGroups()) != 0 {
		t.Fatalf("after expiry: producer groups %v (want none)", r.ProducerGroups())
	}
	r.RegisterProducer("p", "c2", c2, t0)
	r.ConnClosed(c2)
	if len(r.Groups()) != 0 || len(r.ProducerGroups()) != 0 {
		t.Fatalf("after c2's conn closed: consumer groups %v, producer groups %v (want none)", r.Groups(), r.ProducerGroups())
	}
}

// Run ends on Close.
func TestRegistryRunEndsOnClose(t *testing.T) {
	r := NewRegistry(Config{ClientExpiry: time.Minute, ExpireEvery: time.Millisecond}, nil)
	done := make(chan struct{})
	go func() { r.Run(context.Background()); close(done) }()
	r.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end on Close")
	}
}
