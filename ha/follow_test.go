package ha

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The hello reply carries the master's advertised remoting address; the
// slave reports it, and the address it dialled, in its state.
func TestHelloReplyCarriesAdvertise(t *testing.T) {
	ms, ss, addr, _ := masterPair(t, nil, func(o *MasterOptions) { o.Advertise = "10.1.2.3:10911" })
	s := startSlave(t, addr, ss, nil)
	defer s.Close()
	waitFor(t, "the slave to connect", 10*time.Second, func() bool { return s.State().Connected })
	if st := s.State(); st.MasterAddr != "10.1.2.3:10911" || st.Dialed != addr {
		t.Fatalf("slave state %+v: want MasterAddr 10.1.2.3:10911 (the master's Advertise), Dialed %s", st, addr)
	}
	if _, err := StartMaster(MasterOptions{Listen: haAddr(t), Log: ms, Advertise: strings.Repeat("a", MaxAddrLen+1)}); err == nil {
		t.Fatal("a master with a 256-byte Advertise started; want an error naming the limit")
	}
}

// The reply round-trips under its signature; a reply signed under
// another secret, or for other nonces, is refused as unauthenticated; a
// version-1 reply (24 bytes, no address) and an over-long address are
// refused with reasons naming them.
func TestReplyWire(t *testing.T) {
	sn, mn := [nonceLen]byte{1}, [nonceLen]byte{2}
	for _, want := range []reply{{status: StatusOK, epoch: 7, masterMax: 1 << 33, advertise: "127.0.0.1:10911"}, {status: StatusWrongBroker}} {
		b := appendSignedReply(nil, want, testSecret, sn, mn)
		if len(b) != replyLen+len(want.advertise)+macLen {
			t.Fatalf("reply %+v encodes to %d bytes, want %d", want, len(b), replyLen+len(want.advertise)+macLen)
		}
		got, err := readReply(bytes.NewReader(b), testSecret, sn, mn)
		if err != nil || got != want {
			t.Fatalf("reply %+v read back as %+v, %v", want, got, err)
		}
		if _, err := readReply(bytes.NewReader(b), []byte("another secret"), sn, mn); !errors.Is(err, ErrAuth) {
			t.Fatalf("reply %+v under another secret: %v, want ErrAuth", want, err)
		}
		if _, err := readReply(bytes.NewReader(b), testSecret, mn, sn); !errors.Is(err, ErrAuth) {
			t.Fatalf("reply %+v for other nonces (a replay): %v, want ErrAuth", want, err)
		}
	}
	v1 := binary.BigEndian.AppendUint32(nil, Magic)
	v1 = binary.BigEndian.AppendUint16(v1, 1)
	v1 = append(v1, make([]byte, 18)...) // status, epoch, masterMax: 24 bytes in all
	if _, err := readReply(bytes.NewReader(v1), testSecret, sn, mn); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("a version-1 reply: %v; want a protocol error naming version 1", err)
	}
	long := appendSignedReply(nil, reply{}, testSecret, sn, mn)
	binary.BigEndian.PutUint16(long[24:], MaxAddrLen+1)
	if _, err := readReply(bytes.NewReader(long), testSecret, sn, mn); !errors.Is(err, ErrProtocol) {
		t.Fatalf("a reply address of %d bytes: %v; want a protocol error", MaxAddrLen+1, err)
	}
}

// Resolve picks the address of each dial: the slave follows it from one
// master to another when the first goes away; an empty answer falls back
// to Master; neither is an error at start.
func TestSlaveResolve(t *testing.T) {
	ms, ss := openStore(t, t.TempDir()), openStore(t, t.TempDir())
	defer closeStore(t, ss)
	defer closeStore(t, ms)
	a1, a2 := haAddr(t), haAddr(t)
	m1 := startMaster(t, a1, ms, nil, func(o *MasterOptions) { o.Advertise = "one:1" })
	defer m1.Close()
	m2 := startMaster(t, a2, ms, nil, func(o *MasterOptions) { o.Advertise = "two:2" })
	defer m2.Close()
	put(t, ms, 20, 500, nil)

	var target atomic.Value
	target.Store(a1)
	var calls atomic.Int64
	s := startSlave(t, "", ss, func(o *SlaveOptions) {
		o.Resolve = func() string { calls.Add(1); return target.Load().(string) }
	})
	waitFor(t, "the slave on the first master", 10*time.Second, func() bool {
		st := s.State()
		return st.Connected && st.MasterAddr == "one:1" && ss.MaxPhysOffset() == ms.MaxPhysOffset()
	})
	if got := len(m2.Slaves()); got != 0 {
		t.Fatalf("the second master has %d slaves before Resolve named it", got)
	}
	target.Store(a2)
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	put(t, ms, 20, 500, m2.Notify)
	waitFor(t, "the slave on the second master", 10*time.Second, func() bool {
		st := s.State()
		return st.Connected && st.MasterAddr == "two:2" && st.Dialed == a2 && ss.MaxPhysOffset() == ms.MaxPhysOffset()
	})
	if calls.Load() < 2 {
		t.Fatalf("Resolve called %d times for two dials", calls.Load())
	}
	s.Close()

	// An empty answer: Master is dialled.
	s = startSlave(t, a2, ss, func(o *SlaveOptions) { o.Resolve = func() string { return "" } })
	waitFor(t, "the slave on the fallback", 10*time.Second, func() bool {
		st := s.State()
		return st.Connected && st.Dialed == a2
	})
	s.Close()

	if _, err := StartSlave(SlaveOptions{Log: ss}); err == nil {
		t.Fatal("a slave with neither Master nor Resolve started")
	}
}
