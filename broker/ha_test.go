package broker

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/ha/hatest"
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
	t.Parallel()
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
			waitCond(t, 20*time.Second, "the slave to connect", func() bool { return len(m.repl.Listener().Slaves()) == 1 })
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
			waitCond(t, 20*time.Second, "the mute slave to connect", func() bool { return len(m.repl.Listener().Slaves()) == 2 })
			// Stop the real slave broker: only the mute one is left.
			stopSlave()
			waitCond(t, 20*time.Second, "the real slave to go", func() bool { return len(m.repl.Listener().Slaves()) == 1 })
			resp = invoke(t, cl, addr, sendReq("HA", 0, []byte("never acked"), ""))
			if resp.Code != int32(remoting.FlushSlaveTimeout) {
				t.Fatalf("send with a mute slave: code %d (%s), want FLUSH_SLAVE_TIMEOUT", resp.Code, resp.Remark)
			}
		})
	}
}

func TestConfigRole(t *testing.T) {
	t.Parallel()
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

// A sync_master send waiting for its slave's ack does not hold up its
// connection: another request on it is answered meanwhile, and the send is
// answered SUCCESS by the report that covers it (from a test-driven slave:
// it says hello, then reports only when told). Both flush modes.
func TestBrokerSyncMasterAckDoesNotHoldTheConn(t *testing.T) {
	t.Parallel()
	for _, flush := range []string{"async", "sync"} {
		t.Run(flush, func(t *testing.T) {
			haAddr := haTestAddr(t)
			m, cl := startBroker(t, func(c *Config) {
				c.Role, c.HAListen, c.HATimeout, c.Flush = RoleSyncMaster, haAddr, time.Minute, flush
			})
			addr := m.Addr().String()
			sl := toldSlave(t, m, haAddr)
			sent := sendWaitingForAck(t, m, cl, addr, "waits for its ack")
			if resp := invoke(t, cl, addr, remoting.NewRequest(remoting.GetBrokerConfig, nil, nil)); resp.Code != int32(remoting.Success) {
				t.Fatalf("a request behind a send waiting for its ack: code %d (%s)", resp.Code, resp.Remark)
			}
			ackAndExpectSuccess(t, m, sl, sent, "once acknowledged")
		})
	}
}

// A graceful stop waits for the answers of sync_master sends still waiting
// for their slave's ack: the ack that comes during the drain answers the
// send SUCCESS, before the connections close. Both flush modes.
func TestBrokerSyncMasterShutdownWaitsForAcks(t *testing.T) {
	t.Parallel()
	for _, flush := range []string{"async", "sync"} {
		t.Run(flush, func(t *testing.T) {
			haAddr := haTestAddr(t)
			m, _, stop := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true,
				SegmentSize: 8 << 20, Role: RoleSyncMaster, HAListen: haAddr, HATimeout: time.Minute, Flush: flush},
				Deps{Logger: discardLogger()})
			addr := m.Addr().String()
			sl := toldSlave(t, m, haAddr)
			cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second, Logger: discardLogger()})
			defer cl.Close()
			sent := sendWaitingForAck(t, m, cl, addr, "acked during the drain")
			stopped := make(chan struct{})
			go func() { stop(); close(stopped) }()
			defer func() { <-stopped }()
			waitCond(t, 20*time.Second, "the broker to stop accepting", func() bool {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err == nil {
					c.Close()
				}
				return err != nil
			})
			ackAndExpectSuccess(t, m, sl, sent, "acknowledged during the drain")
		})
	}
}

// toldSlave connects a slave to m's HA port that says hello at offset 0
// and then reports only what the test writes to the returned conn.
func toldSlave(t *testing.T, m *Broker, haAddr string) *hatest.Slave {
	t.Helper()
	waitCond(t, 20*time.Second, "the HA listener", func() bool { return m.repl.Master() != nil })
	sl := muteSlave(t, haAddr, 0)
	waitCond(t, 20*time.Second, "the slave to connect", func() bool { return len(m.repl.Listener().Slaves()) == 1 })
	return sl
}

// sendWaitingForAck sends one message through cl in the background and
// returns once m stored it and sent it to its only slave; the answer (or
// a SYSTEM_ERROR naming the client's error) comes on the channel.
func sendWaitingForAck(t *testing.T, m *Broker, cl *remoting.Client, addr, body string) <-chan *remoting.Command {
	t.Helper()
	sent := make(chan *remoting.Command, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := cl.Invoke(ctx, addr, sendReq("HA", 0, []byte(body), ""))
		if err != nil {
			resp = remoting.NewResponse(remoting.NewRequest(remoting.SendMessage, nil, nil), remoting.SystemError, err.Error())
		}
		sent <- resp
	}()
	waitCond(t, 20*time.Second, "the send to be stored and sent to the slave", func() bool {
		st := m.repl.Listener().Slaves()
		return m.Store().MaxPhysOffset() > 0 && len(st) == 1 && st[0].Sent == m.Store().MaxPhysOffset()
	})
	return sent
}

// ackAndExpectSuccess checks that the send is not answered yet, reports
// m's whole log from the told slave, and expects the send's SUCCESS.
func ackAndExpectSuccess(t *testing.T, m *Broker, sl *hatest.Slave, sent <-chan *remoting.Command, when string) {
	t.Helper()
	select {
	case resp := <-sent:
		t.Fatalf("the send was answered (code %d, %s) before a slave acknowledged it", resp.Code, resp.Remark)
	default:
	}
	if err := sl.ReadUntil(m.Store().MaxPhysOffset(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := sl.AckRead(); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-sent:
		if resp.Code != int32(remoting.Success) {
			t.Fatalf("the send %s: code %d (%s), want SUCCESS", when, resp.Code, resp.Remark)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no answer to the send %s", when)
	}
}
