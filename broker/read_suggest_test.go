package broker

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/ha"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// TestBrokerSuggestWhichBrokerID (issue 10 item 3, slave reads): with
// STRATAMQ_SLAVE_READ_ENABLE a master sends a pull that read from the
// bucket, or one more than STRATAMQ_SLAVE_READ_LAG behind the log end, to
// the slave (suggestWhichBrokerId 1) — only once a caught-up slave is
// connected — and keeps the others (0); the slave keeps a lagging
// consumer and sends a caught-up one back to the master (0), until the
// master is gone: then it keeps every consumer (its own id). Without the
// setting the master always suggests itself.
func TestBrokerSuggestWhichBrokerID(t *testing.T) {
	t.Parallel()
	for _, enable := range []bool{true, false} {
		t.Run(fmt.Sprintf("enable=%v", enable), func(t *testing.T) { testSuggest(t, enable) })
	}
}

func testSuggest(t *testing.T, enable bool) {
	const lag = 64 << 10
	bucket := tier.NewMem()
	haAddr := haTestAddr(t)
	m, mcl, stopMaster := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true,
		SegmentSize: 1 << 20, MaxMessageSize: 256 << 10, LocalRetention: 0, HAListen: haAddr,
		SlaveReadEnable: enable, SlaveReadLag: lag},
		Deps{Logger: discardLogger(), Bucket: bucket})
	maddr := m.Addr().String()
	const topic = "Reads"
	var phys []int64 // by queue offset
	send := func(n, size int) {
		t.Helper()
		for range n {
			body := bytes.Repeat([]byte{byte('a' + len(phys)%26)}, size)
			r := invoke(t, mcl, maddr, sendReq(topic, 0, body, ""))
			if r.Code != int32(remoting.Success) {
				t.Fatalf("send %d: %d %s", len(phys), r.Code, r.Remark)
			}
			_, p, err := store.DecodeMessageID(r.ExtFields["msgId"])
			if err != nil {
				t.Fatal(err)
			}
			phys = append(phys, p)
		}
	}
	uploaded := func() {
		t.Helper()
		waitCond(t, 60*time.Second, "the master's sealed segments uploaded and dropped", func() bool {
			m.tier.Uploader().Flush()
			return len(m.store.SealedSegments()) == 0 && m.store.LocalMinPhysOffset() > 0
		})
	}
	send(450, 7000) // ≈ 3 MiB: sealed segments, uploaded and dropped
	uploaded()
	// The tail: 12 records of 10 KB (more than lag), then 3 small ones.
	tail := int64(len(phys))
	send(12, 10_000)
	send(3, 100)
	uploaded() // the tail may have sealed a segment too
	last := int64(len(phys) - 1)
	// Preconditions of the cases below.
	if phys[0] >= m.store.LocalMinPhysOffset() {
		t.Fatalf("record 0 at %d is still local (local log from %d)", phys[0], m.store.LocalMinPhysOffset())
	}
	firstLocal := tail
	for firstLocal <= last && phys[firstLocal] < m.store.LocalMinPhysOffset() {
		firstLocal++
	}
	if end := m.store.MaxPhysOffset(); firstLocal > last || end-phys[firstLocal] <= lag || end-phys[last] > lag {
		t.Fatalf("want a local record more than %d bytes behind the end %d and the last one within it: local from %d, record %d at %d, last at %d",
			lag, end, m.store.LocalMinPhysOffset(), firstLocal, phys[firstLocal], phys[last])
	}

	suggest := func(cl *remoting.Client, addr string, off int64, wantCode remoting.ResponseCode) int64 {
		t.Helper()
		h := remoting.PullMessageRequestHeader{ConsumerGroup: "G", Topic: topic, QueueOffset: off, MaxMsgNums: 32,
			SysFlag: pullFlagSubscription, Subscription: "*", ExpressionType: "TAG"} // no suspend: answered at once
		r := invoke(t, cl, addr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil))
		if r.Code != int32(wantCode) {
			t.Fatalf("pull at %d from %s: code %d (%s), want %d", off, addr, r.Code, r.Remark, wantCode)
		}
		id, err := strconv.ParseInt(r.ExtFields["suggestWhichBrokerId"], 10, 64)
		if err != nil {
			t.Fatalf("pull at %d from %s: suggestWhichBrokerId %q: %v", off, addr, r.ExtFields["suggestWhichBrokerId"], err)
		}
		return id
	}
	type tc struct {
		what string
		off  int64
		code remoting.ResponseCode
		want int64
	}
	check := func(who string, cl *remoting.Client, addr string, cases []tc) {
		t.Helper()
		for _, c := range cases {
			if got := suggest(cl, addr, c.off, c.code); got != c.want {
				t.Errorf("%s, %s (offset %d): suggestWhichBrokerId %d, want %d", who, c.what, c.off, got, c.want)
			}
		}
	}
	on := func(id int64) int64 {
		if enable {
			return id
		}
		return 0
	}

	// No slave yet: the master keeps every consumer.
	check("master without a slave", mcl, maddr, []tc{
		{"a pull from the bucket", 0, remoting.Success, 0},
		{"a pull far behind", firstLocal, remoting.Success, 0},
	})

	reg := prometheus.NewRegistry()
	s, scl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, Role: RoleSlave, HAMaster: haAddr, BrokerID: 1, SlaveReadEnable: enable},
		Deps{Logger: discardLogger(), Bucket: &readOnlyBucket{Bucket: bucket}, Metrics: NewMetrics(reg)})
	saddr := s.Addr().String()
	var st ha.SlaveStatus
	waitCond(t, 30*time.Second, "the slave to hold the master's log", func() bool {
		sl := m.repl.Listener().Slaves()
		if len(sl) != 1 {
			return false
		}
		st = sl[0]
		// The slave acks a transfer before it counts it as received:
		// wait for the count too.
		return st.Acked == m.store.MaxPhysOffset() && s.masterStreaming() &&
			counterValue(t, reg, "stratamq_ha_received_bytes_total") == float64(st.Sent-st.Start)
	})
	// stratamq_ha_received_bytes_total is what the master streamed: the tail.
	if got, want := counterValue(t, reg, "stratamq_ha_received_bytes_total"), float64(st.Sent-st.Start); got != want || want == 0 {
		t.Fatalf("stratamq_ha_received_bytes_total = %v, want the %v bytes the master streamed", got, want)
	}
	check("master with a caught-up slave", mcl, maddr, []tc{
		{"a pull from the bucket", 0, remoting.Success, on(1)},
		{"a local pull more than STRATAMQ_SLAVE_READ_LAG behind", firstLocal, remoting.Success, on(1)},
		{"a pull near the end", last, remoting.Success, 0},
		{"a pull at the end", last + 1, remoting.PullNotFound, 0},
	})
	// The slave: STRATAMQ_SLAVE_READ_LAG unset, only bucket reads lag.
	if phys[firstLocal] < s.store.LocalMinPhysOffset() {
		t.Fatalf("record %d at %d is not on the slave's local log (from %d)", firstLocal, phys[firstLocal], s.store.LocalMinPhysOffset())
	}
	check("slave with its master", scl, saddr, []tc{
		{"a pull from the bucket", 0, remoting.Success, on(1)},
		{"a local pull", firstLocal, remoting.Success, 0},
		{"a pull at the end", last + 1, remoting.PullNotFound, 0},
	})

	// The master gone: the slave keeps every consumer, reads on or off.
	stopMaster()
	waitCond(t, 30*time.Second, "the slave to see its master gone", func() bool { return !s.masterStreaming() })
	check("slave without its master", scl, saddr, []tc{
		{"a pull from the bucket", 0, remoting.Success, 1},
		{"a local pull", firstLocal, remoting.Success, 1},
		{"a pull at the end", last + 1, remoting.PullNotFound, 1},
	})
}

// counterValue is the value of the one counter series named name that reg
// gathers.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no single series %s in the registry", name)
	return 0
}
