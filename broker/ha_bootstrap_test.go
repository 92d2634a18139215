package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/ha"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// readOnlyBucket refuses and counts every write: a slave's view of its
// master's bucket.
type readOnlyBucket struct {
	tier.Bucket
	writes atomic.Int64
}

var errReadOnly = errors.New("test: a slave wrote to the bucket")

func (r *readOnlyBucket) Put(context.Context, string, io.Reader, int64) error {
	r.writes.Add(1)
	return errReadOnly
}

func (r *readOnlyBucket) PutIf(context.Context, string, io.Reader, int64, tier.Cond) (string, error) {
	r.writes.Add(1)
	return "", errReadOnly
}

func (r *readOnlyBucket) Delete(context.Context, string) error {
	r.writes.Add(1)
	return errReadOnly
}

// TestBrokerSlaveBootsFromBucket (issue 10 item 2, "Slave from the
// bucket"): a master holds tiered history (several uploaded segments,
// dropped locally) and an unsealed tail; a slave on an empty disk over the
// same bucket starts its log at U, the end of the last uploaded segment,
// receives only the tail over HA, serves every queue from offset 0 (old
// records through the bucket, new ones from its own log), follows new
// sends, and refuses sends itself. Restarted after the master uploaded
// more, it skips the gap the same way; restarted with its log at U it
// keeps it.
func TestBrokerSlaveBootsFromBucket(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	haAddr := haTestAddr(t)
	m, mcl, stopMaster := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true,
		SegmentSize: 1 << 20, MaxMessageSize: 256 << 10, LocalRetention: 0, HAListen: haAddr},
		Deps{Logger: discardLogger(), Bucket: bucket})
	maddr := m.Addr().String()

	type qid struct {
		topic string
		queue int
	}
	topics := []string{"HistA", "HistB"}
	sent := map[qid][][]byte{}
	seq := 0
	// send stores n messages spread over two topics and three queues;
	// big ones fill segments, small ones never fill the active one.
	send := func(n int, big bool) {
		t.Helper()
		for range n {
			k := qid{topics[seq%2], seq % 3}
			body := []byte(fmt.Sprintf("%06d|", seq))
			if big {
				body = bytes.Repeat(body, 1170)
			}
			seq++
			if r := invoke(t, mcl, maddr, sendReq(k.topic, k.queue, body, "")); r.Code != int32(remoting.Success) {
				t.Fatalf("send %d to the master: %d %s", seq, r.Code, r.Remark)
			}
			sent[k] = append(sent[k], body)
		}
	}
	uploaded := func() {
		t.Helper()
		waitCond(t, 60*time.Second, "the master's sealed segments uploaded and dropped", func() bool {
			m.tier.Uploader().Flush() // no batching delay for the manifest
			return len(m.store.SealedSegments()) == 0 && m.store.LocalMinPhysOffset() > 0
		})
	}
	checkReads := func(s *Broker, scl *remoting.Client, masterToo bool) {
		t.Helper()
		for k, want := range sent {
			for i, b := range []struct {
				b  *Broker
				cl *remoting.Client
			}{{s, scl}, {m, mcl}} {
				if i == 1 && !masterToo {
					continue
				}
				got, bad := readAll(t, b.b, b.cl, k.topic, k.queue, len(want))
				if bad != nil {
					t.Fatalf("pull %s/%d after %d messages from %s: code %d (%s)", k.topic, k.queue, len(got), b.b.cfg.Role, bad.Code, bad.Remark)
				}
				if len(got) != len(want) {
					t.Fatalf("%s %s/%d: %d messages, want %d", b.b.cfg.Role, k.topic, k.queue, len(got), len(want))
				}
				for i := range want {
					if !bytes.Equal(got[i], want[i]) {
						t.Fatalf("%s %s/%d offset %d differs from what was sent", b.b.cfg.Role, k.topic, k.queue, i)
					}
				}
			}
		}
	}
	// caughtUp waits until the one slave connected to the master holds
	// its whole log, and returns the master's view of it: Start is where
	// its stream began, Sent-Start what the master sent it over HA.
	caughtUp := func(s *Broker) ha.SlaveStatus {
		t.Helper()
		var st ha.SlaveStatus
		waitCond(t, 30*time.Second, "the slave to hold the master's log", func() bool {
			sl := m.repl.Listener().Slaves()
			if len(sl) != 1 {
				return false
			}
			st = sl[0]
			end := m.Store().MaxPhysOffset()
			return st.Acked == end && s.Store().MaxPhysOffset() == end
		})
		return st
	}
	gone := func() {
		t.Helper()
		waitCond(t, 30*time.Second, "the stopped slave to leave the master", func() bool { return len(m.repl.Listener().Slaves()) == 0 })
	}

	send(600, true) // ≈ 4.9 MiB: four sealed segments
	uploaded()
	send(20, false) // the unsealed tail
	u := m.store.LocalMinPhysOffset()
	history := m.store.MaxPhysOffset()

	scfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 1 << 20, MaxMessageSize: 256 << 10,
		Role: RoleSlave, HAMaster: haAddr, BrokerID: 1}
	// The slave never writes the bucket: no lease, checkpoint, upload or
	// retention delete.
	ro := &readOnlyBucket{Bucket: bucket}
	s, scl, stopSlave := runBroker(t, scfg, Deps{Logger: discardLogger(), Bucket: ro})
	st := caughtUp(s)
	// (a) only the tail came over HA; (b) the log starts at U.
	if got := st.Sent - st.Start; st.Start != u || got != history-u || got >= history/4 {
		t.Fatalf("the master streamed [%d, %d) to the slave (%d bytes); want the tail only, [%d, %d) of a %d-byte history",
			st.Start, st.Sent, got, u, history, history)
	}
	if got := s.Store().LocalMinPhysOffset(); got != u {
		t.Fatalf("the slave's local log starts at %d, want U = %d", got, u)
	}
	// (c) every queue from offset 0, old records through the bucket.
	checkReads(s, scl, true)
	// (d) new sends reach the slave.
	send(9, false)
	caughtUp(s)
	checkReads(s, scl, true)
	// A slave refuses sends (NO_PERMISSION: the official client retries).
	if r := invoke(t, scl, s.Addr().String(), sendReq(topics[0], 0, []byte("to the slave"), "")); r.Code != int32(remoting.NoPermission) {
		t.Fatalf("send to the slave: code %d (%s), want NO_PERMISSION", r.Code, r.Remark)
	}

	// Restarted with its log at or past U: the log is kept.
	stopSlave()
	gone()
	end := m.store.MaxPhysOffset()
	s, scl, stopSlave = runBroker(t, scfg, Deps{Logger: discardLogger(), Bucket: ro})
	st = caughtUp(s)
	if got := s.Store().LocalMinPhysOffset(); got != u || st.Start != end {
		t.Fatalf("restarted with the whole log: it starts at %d (want it kept from %d), streaming began at %d (want %d)", got, u, st.Start, end)
	}

	// Down while the master uploads more: its log ends below the new U,
	// and the restart skips the gap.
	stopSlave()
	gone()
	lagEnd := m.store.MaxPhysOffset()
	send(300, true)
	uploaded()
	send(5, false)
	u2 := m.store.LocalMinPhysOffset()
	if u2 <= lagEnd {
		t.Fatalf("the master's new upload end %d is not past the stopped slave's log end %d", u2, lagEnd)
	}
	s, scl, stopSlave = runBroker(t, scfg, Deps{Logger: discardLogger(), Bucket: ro})
	st = caughtUp(s)
	if got := s.Store().LocalMinPhysOffset(); got != u2 || st.Start != u2 {
		t.Fatalf("the lagging slave's local log starts at %d and its stream at %d, want both at the new U = %d", got, st.Start, u2)
	}
	checkReads(s, scl, true)
	// The master gone, the slave still serves every queue from offset 0.
	stopMaster()
	checkReads(s, scl, false)
	stopSlave()
	if n := ro.writes.Load(); n != 0 {
		t.Fatalf("the slave tried %d bucket writes, want none", n)
	}
}
