package follow

import (
	"context"
	"sync"
	"testing"

	"github.com/stratamq/stratamq/broker/configtable"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// fakeMaster answers the follower's requests as a master at addr would
// (the network boundary): fixed GET_ALL_* bodies, and it records the
// offsets pushed to it.
type fakeMaster struct {
	mu     sync.Mutex
	bodies map[remoting.RequestCode]string
	pushed []remoting.UpdateConsumerOffsetRequestHeader
	addrs  []string
}

func (m *fakeMaster) Fetch(_ context.Context, addr string, code remoting.RequestCode) (*remoting.Command, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addrs = append(m.addrs, addr)
	return &remoting.Command{Code: int32(remoting.Success), Body: []byte(m.bodies[code])}, nil
}

func (m *fakeMaster) PushOffset(_ context.Context, addr string, h remoting.UpdateConsumerOffsetRequestHeader) (*remoting.Command, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addrs = append(m.addrs, addr)
	m.pushed = append(m.pushed, h)
	return &remoting.Command{Code: int32(remoting.Success)}, nil
}

type stream struct {
	connected bool
	hello     string
}

func (s stream) Hello() (bool, string) { return s.connected, s.hello }

func newFollower(t *testing.T, fs vfs.FS, m Master, s Stream) (*Follower, *offsets.ConsumerOffsets, *configtable.Table[remoting.TopicConfig]) {
	t.Helper()
	offs, err := offsets.OpenConsumerOffsets(fs, "/cfg")
	if err != nil {
		t.Fatal(err)
	}
	var topics configtable.Table[remoting.TopicConfig]
	var groups configtable.Table[remoting.SubscriptionGroupConfig]
	if err := topics.Init(fs, "/cfg/topics.json"); err != nil {
		t.Fatal(err)
	}
	if err := groups.Init(fs, "/cfg/groups.json"); err != nil {
		t.Fatal(err)
	}
	f, err := Open(Config{Dir: "/cfg"}, Deps{FS: fs, Master: m, Stream: s, Topics: &topics, Groups: &groups, Offsets: offs})
	if err != nil {
		t.Fatal(err)
	}
	return f, offs, &topics
}

// TestFollowerSyncPushesThenAdopts: a sync pushes the offsets committed
// to the slave first, then adopts the master's topics and offsets; an
// offset committed here and not pushed is never overwritten.
func TestFollowerSyncPushesThenAdopts(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/cfg", 0o755); err != nil {
		t.Fatal(err)
	}
	m := &fakeMaster{bodies: map[remoting.RequestCode]string{
		remoting.GetAllTopicConfig:             `{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":2,"writeQueueNums":2,"perm":6}}}`,
		remoting.GetAllSubscriptionGroupConfig: `{"subscriptionGroupTable":{}}`,
		remoting.GetAllConsumerOffset:          `{"offsetTable":{"T@G":{"0":10,"1":20}}}`,
	}}
	f, offs, topics := newFollower(t, fs, m, stream{connected: true, hello: "master:10911"})
	f.Committed("G", "T", 0, 50)
	offs.Commit("G", "T", 0, 50)
	// Before the push: the master's offsets do not overwrite it.
	if err := f.ApplyOffsets([]byte(m.bodies[remoting.GetAllConsumerOffset])); err != nil {
		t.Fatal(err)
	}
	if off, _ := offs.Query("G", "T", 0); off != 50 {
		t.Fatalf("unpushed offset %d, want 50", off)
	}
	if err := f.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(m.pushed) != 1 || m.pushed[0].CommitOffset != 50 || m.addrs[0] != "master:10911" {
		t.Fatalf("pushed %+v to %v, want offset 50 to the hello's master first", m.pushed, m.addrs)
	}
	if p := f.Pending(); len(p) != 0 {
		t.Fatalf("pending after the push: %v", p)
	}
	if off, _ := offs.Query("G", "T", 1); off != 20 {
		t.Fatalf("queue 1 is %d, want the master's 20", off)
	}
	if _, ok := topics.Get("T"); !ok || f.Syncs() != 1 {
		t.Fatalf("topic T mirrored %v, syncs %d", ok, f.Syncs())
	}
}

// TestFollowerPendingSurvivesReopen: offsets not pushed yet are saved in
// the config directory and loaded by the next Open.
func TestFollowerPendingSurvivesReopen(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/cfg", 0o755); err != nil {
		t.Fatal(err)
	}
	f, _, _ := newFollower(t, fs, &fakeMaster{}, nil)
	f.Committed("G", "T", 1, 7)
	f.Close() // without Run: returns at once
	if err := f.save(); err != nil {
		t.Fatal(err)
	}
	g, _, _ := newFollower(t, fs, &fakeMaster{}, nil)
	if p := g.Pending(); len(p) != 1 || p[Key{Group: "G", Topic: "T", Queue: 1}] != 7 {
		t.Fatalf("reopened pending %v, want G/T/1 at 7", p)
	}
}

// TestFollowerMasterAddr: the master the HA stream is connected to (its
// hello), else the name server's, else the last hello.
func TestFollowerMasterAddr(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/cfg", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    Stream
		ns   string
		want string
	}{
		{"connected", stream{true, "hello:1"}, "ns:1", "hello:1"},
		{"not connected, name server known", stream{false, "hello:1"}, "ns:1", "ns:1"},
		{"not connected, no name server", stream{false, "hello:1"}, "", "hello:1"},
		{"no stream", nil, "ns:1", "ns:1"},
	} {
		f, _, _ := newFollower(t, fs, &fakeMaster{}, tc.s)
		f.Learned(remoting.RegisterBrokerResponseHeader{MasterAddr: tc.ns})
		if got := f.MasterAddr(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
