package ha

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stratamq/stratamq/infra/loopback"
	"github.com/stratamq/stratamq/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testTopics = 2
	testQueues = 3
)

func quietLogger() *slog.Logger {
	if os.Getenv("HA_TEST_LOG") != "" {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError + 1}))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func openStore(t testing.TB, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir, SegmentSize: 64 << 10, MaxMessageSize: 32 << 10, ZeroAhead: -1,
		MinFreeBytes: 1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// put writes n records of varying sizes spread over the test queues and
// calls notify after each batch.
func put(t testing.TB, st *store.Store, n, bodySize int, notify func()) {
	t.Helper()
	for i := 0; i < n; {
		var batch []store.Message
		for ; i < n && len(batch) < 8; i++ {
			body := bytes.Repeat([]byte{byte(i)}, bodySize+(i%7)*97)
			batch = append(batch, store.Message{Topic: "T" + strconv.Itoa(i%testTopics), QueueID: int32(i % testQueues),
				Body: body, Properties: "TAGS\x01t" + strconv.Itoa(i%5) + "\x02", BornTimestamp: int64(i)})
		}
		if _, err := st.Put(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		if notify != nil {
			notify()
		}
	}
}

func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sameLog asserts that the slave's log is byte-identical to the master's from
// `from` on, and that every test queue answers Get the same.
func sameLog(t testing.TB, master, slave *store.Store, from int64) {
	t.Helper()
	if m, s := master.MaxPhysOffset(), slave.MaxPhysOffset(); m != s {
		t.Fatalf("master's log ends at %d, slave's at %d", m, s)
	}
	end := master.MaxPhysOffset()
	a, b := make([]byte, 48<<10), make([]byte, 48<<10)
	for off := from; off < end; {
		na, err := master.ReadLog(context.Background(), off, a)
		if err != nil {
			t.Fatal(err)
		}
		nb, err := slave.ReadLog(context.Background(), off, b)
		if err != nil {
			t.Fatal(err)
		}
		if na != nb || !bytes.Equal(a[:na], b[:nb]) {
			t.Fatalf("logs differ in the %d bytes at %d (slave read %d)", na, off, nb)
		}
		off += int64(na)
	}
	for tp := 0; tp < testTopics; tp++ {
		for q := int32(0); q < testQueues; q++ {
			topic := "T" + strconv.Itoa(tp)
			if mx, sx := master.MaxQueueOffset(topic, q), slave.MaxQueueOffset(topic, q); mx != sx {
				t.Fatalf("%s/%d: master max queue offset %d, slave %d", topic, q, mx, sx)
			}
			for off := slave.MinQueueOffset(topic, q); ; {
				req := store.GetRequest{Topic: topic, QueueID: q, Offset: off, MaxMsgs: 64}
				mr, err := master.Get(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				sr, err := slave.Get(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if mr.Status != sr.Status || mr.NextBeginOffset != sr.NextBeginOffset || len(mr.Records) != len(sr.Records) {
					t.Fatalf("%s/%d at %d: master %v next %d (%d records), slave %v next %d (%d records)", topic, q, off,
						mr.Status, mr.NextBeginOffset, len(mr.Records), sr.Status, sr.NextBeginOffset, len(sr.Records))
				}
				for i := range mr.Records {
					if !bytes.Equal(mr.Records[i], sr.Records[i]) {
						t.Fatalf("%s/%d at %d: record %d differs", topic, q, off, i)
					}
				}
				if mr.Status != store.Found {
					break
				}
				off = mr.NextBeginOffset
			}
		}
	}
}

func haAddr(t testing.TB) string {
	t.Helper()
	p, err := loopback.Port()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

type testEpoch struct{ v atomic.Int64 }

func (e *testEpoch) get() int64 { return e.v.Load() }

// testSecret is the HA secret of the tests' masters and slaves
// (MasterOptions.Secret, SlaveOptions.Secret: the broker's
// STRATAMQ_HA_SECRET).
var testSecret = []byte("ha-test-secret")

func testSecretFn() []byte { return testSecret }

// stallAfter sets o's StallTimeout.
func stallAfter(o *MasterOptions, d time.Duration) { o.StallTimeout = d }

// helloRaw is a slave's handshake by hand on c: it reads the challenge,
// sends h (its nonce drawn here) signed under secret and reads the reply.
func helloRaw(c net.Conn, secret []byte, h hello) (reply, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	ch, err := readChallenge(c)
	if err != nil {
		return reply{}, err
	}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return reply{}, err
	}
	if _, err := c.Write(appendSignedHello(nil, h, secret, ch.nonce)); err != nil {
		return reply{}, err
	}
	return readReply(c, secret, h.nonce, ch.nonce)
}

func startMaster(t testing.TB, addr string, st *store.Store, epoch func() int64, mod func(*MasterOptions)) *Master {
	t.Helper()
	o := MasterOptions{Listen: addr, Log: st, Epoch: epoch, BrokerName: "b1", PollInterval: 20 * time.Millisecond,
		Logger: quietLogger(), Secret: testSecretFn}
	if mod != nil {
		mod(&o)
	}
	m, err := StartMaster(o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func startSlave(t testing.TB, addr string, app Appender, mod func(*SlaveOptions)) *Slave {
	t.Helper()
	o := SlaveOptions{Master: addr, BrokerName: "b1", Log: app, ReportInterval: 200 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: quietLogger(), Secret: testSecretFn}
	if mod != nil {
		mod(&o)
	}
	s, err := StartSlave(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func closeStore(t testing.TB, st *store.Store) {
	t.Helper()
	if err := st.Close(); err != nil {
		t.Error(fmt.Errorf("closing store: %w", err))
	}
}

// masterPair opens a master's store and a slave's, and starts a master on
// a fresh loopback address over the first (startMaster's epoch and mod).
// All three close when the test ends, the master first.
func masterPair(t testing.TB, epoch func() int64, mod func(*MasterOptions)) (ms, ss *store.Store, addr string, m *Master) {
	t.Helper()
	ms, ss = openStore(t, t.TempDir()), openStore(t, t.TempDir())
	t.Cleanup(func() { closeStore(t, ss) })
	t.Cleanup(func() { closeStore(t, ms) })
	addr = haAddr(t)
	m = startMaster(t, addr, ms, epoch, mod)
	t.Cleanup(func() { m.Close() })
	return ms, ss, addr, m
}
