package broker

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/loopback"
	"github.com/stratamq/stratamq/remoting"
)

func haTestAddr(t *testing.T) string {
	t.Helper()
	p, err := loopback.Port()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// sync_master: a send is SLAVE_NOT_AVAILABLE without a slave, SUCCESS once a
// slave (a slave-role broker) holds it, FLUSH_SLAVE_TIMEOUT when the only
// slave never acknowledges; in both flush modes.
func TestBrokerSyncMasterAcks(t *testing.T) {
	for _, flush := range []string{"async", "sync"} {
		t.Run(flush, func(t *testing.T) {
			haAddr := haTestAddr(t)
			m, cl := startBroker(t, func(c *Config) {
				c.Role, c.HAListen, c.HATimeout, c.Flush = RoleSyncMaster, haAddr, 500*time.Millisecond, flush
			})
			addr := m.Addr().String()
			resp := invoke(t, cl, addr, sendReq("HA", 0, []byte("no slave yet"), ""))
			if resp.Code != int32(remoting.SlaveNotAvailable) {
				t.Fatalf("send without a slave: code %d (%s), want SLAVE_NOT_AVAILABLE", resp.Code, resp.Remark)
			}
			if m.Store().MaxPhysOffset() == 0 {
				t.Fatal("the message answered SLAVE_NOT_AVAILABLE is not stored")
			}

			s, _, stopSlave := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
				Role: RoleSlave, HAMaster: haAddr, BrokerID: 1}, Deps{Logger: discardLogger()})
			waitCond(t, 20*time.Second, "the slave to connect", func() bool { return len(m.ha.master.Slaves()) == 1 })
			for i := range 5 {
				resp = invoke(t, cl, addr, sendReq("HA", i%2, []byte("replicated "+strconv.Itoa(i)), ""))
				if resp.Code != int32(remoting.Success) {
					t.Fatalf("send %d with a slave: code %d (%s)", i, resp.Code, resp.Remark)
				}
				if got, want := s.Store().MaxPhysOffset(), m.Store().MaxPhysOffset(); got < want {
					t.Fatalf("send %d acknowledged with the slave at %d, the master at %d", i, got, want)
				}
			}
			for q := int32(0); q < 2; q++ {
				if got, want := s.Store().MaxQueueOffset("HA", q), m.Store().MaxQueueOffset("HA", q); got != want {
					t.Fatalf("slave HA/%d max offset %d, master %d", q, got, want)
				}
			}

			// A slave that says hello and never acknowledges.
			muteSlave(t, haAddr, m.Store().MaxPhysOffset())
			waitCond(t, 20*time.Second, "the mute slave to connect", func() bool { return len(m.ha.master.Slaves()) == 2 })
			// Stop the real slave broker: only the mute one is left.
			stopSlave()
			waitCond(t, 20*time.Second, "the real slave to go", func() bool { return len(m.ha.master.Slaves()) == 1 })
			resp = invoke(t, cl, addr, sendReq("HA", 0, []byte("never acked"), ""))
			if resp.Code != int32(remoting.FlushSlaveTimeout) {
				t.Fatalf("send with a mute slave: code %d (%s), want FLUSH_SLAVE_TIMEOUT", resp.Code, resp.Remark)
			}
		})
	}
}

func TestConfigRole(t *testing.T) {
	base := Config{}.withDefaults()
	if base.Role != RoleAsyncMaster || base.HAListen != "" {
		t.Fatalf("defaults: role %q, HA listen %q; want async_master and no HA listener", base.Role, base.HAListen)
	}
	if c := (Config{Role: RoleSyncMaster}).withDefaults(); c.HAListen != ":10912" || c.Validate() != nil {
		t.Fatalf("sync_master defaults: HA listen %q, %v; want :10912, valid", c.HAListen, c.Validate())
	}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Role: "master"}, "STRATAMQ_ROLE"},
		{Config{Role: RoleSlave, BrokerID: 1}, "STRATAMQ_HA_MASTER"},
		{Config{Role: RoleSlave, HAMaster: "127.0.0.1:10912"}, "STRATAMQ_BROKER_ID"},
		{Config{Role: RoleSyncMaster, HAListen: "nonsense"}, "STRATAMQ_HA_LISTEN"},
	} {
		err := tc.c.withDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want an error naming %s", tc.c, err, tc.want)
		}
	}
	if err := (Config{Role: RoleSlave, BrokerID: 1, HAMaster: "127.0.0.1:10912"}).withDefaults().Validate(); err != nil {
		t.Fatalf("a valid slave config: %v", err)
	}
}
