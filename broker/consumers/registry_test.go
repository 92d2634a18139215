package consumers

import (
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
