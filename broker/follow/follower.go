package follow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// PendingOffsetsFile keeps the offsets committed to a slave and not pushed
// yet across its restarts (in the config directory).
const PendingOffsetsFile = "slavePendingOffsets.json"

// Config is what the follower reads of the broker's configuration.
type Config struct {
	Dir      string        // the config directory: PendingOffsetsFile is under it
	Interval time.Duration // STRATAMQ_HA_SYNC_INTERVAL: one sync each
}

// Master is the slave's master as the sync reaches it over remoting
// (signed as the broker signs its own requests).
type Master interface {
	// Fetch sends a request of code, without header or body, to the master
	// at addr (GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
	// GET_ALL_CONSUMER_OFFSET).
	Fetch(ctx context.Context, addr string, code remoting.RequestCode) (*remoting.Command, error)
	// PushOffset sends UPDATE_CONSUMER_OFFSET with h to the master at addr.
	PushOffset(ctx context.Context, addr string, h remoting.UpdateConsumerOffsetRequestHeader) (*remoting.Command, error)
}

// Stream is the slave's HA stream as the follower asks it which master it
// is connected to.
type Stream interface {
	// Hello reports whether the stream is connected and the remoting
	// address its master's hello reply named ("" before one).
	Hello() (connected bool, masterAddr string)
}

// Table is a config table the master's copy replaces
// (configtable.Table: topics, subscription groups).
type Table[T any] interface {
	Mirror(src map[string]T, norm func(name string, v *T)) (removed []string, changed bool)
}

// Offsets is the consumer offset table (offsets.ConsumerOffsets).
type Offsets interface {
	Encode() ([]byte, int64, error)
	Replace(body []byte) error
	Commit(group, topic string, queueID int32, offset int64)
	DeleteTopic(topic string)
}

// Store is the local store as the follower changes it.
type Store interface {
	DeleteTopic(topic string) error
	SealedSegments() []store.SegmentInfo
}

// Bucket is the master's bucket as a slave follows it, read only
// (tiering.Tiering).
type Bucket interface {
	ReloadManifest(ctx context.Context) (*upload.Manifest, error)
	MarkCovered(covered []store.SegmentInfo)
	EnforceLocalRetention() error
}

// Retention raises queue minima by per-topic retention (retention.Service).
type Retention interface {
	ExpireTopics(ctx context.Context, now time.Time, defFloor int64) error
}

// Deps is what the follower works through.
type Deps struct {
	FS     vfs.FS
	Logger *slog.Logger
	Now    func() time.Time // time.Now when nil

	Master    Master
	Stream    Stream // nil until there is one: Hello is then "not connected"
	Topics    Table[remoting.TopicConfig]
	Groups    Table[remoting.SubscriptionGroupConfig]
	Offsets   Offsets
	Store     Store
	Bucket    Bucket // nil without a read-only bucket: no slave retention
	Retention Retention
}

// Key names one consumer offset.
type Key struct {
	Group, Topic string
	Queue        int32
}

// Follower is what a serving slave keeps beside its HA stream (see the
// package comment), and its sync loop (Run).
type Follower struct {
	cfg Config
	d   Deps

	nsHA     atomic.Pointer[string] // the master's HA address, from the name server
	nsMaster atomic.Pointer[string] // the master's remoting address, from the name server

	path string // <config dir>/PendingOffsetsFile: pending, across restarts

	mu      sync.Mutex
	pending map[Key]int64 // committed here, not yet pushed to the master
	version int64         // bumped when pending changes
	saved   int64         // version last written to path

	syncs    atomic.Int64 // syncs that reached the master (tests wait on it)
	rounds   atomic.Int64 // sync attempts finished, reached or not (tests wait on it)
	manifest atomic.Int64 // manifest reloads applied (tests wait on it)

	stopOnce sync.Once
	stopCh   chan struct{}
	started  atomic.Bool
	exited   chan struct{}
}

type pendingOffsetJSON struct {
	Group   string `json:"group"`
	Topic   string `json:"topic"`
	QueueID int32  `json:"queueId"`
	Offset  int64  `json:"offset"`
}

// Open loads the pending offsets a previous run left in cfg.Dir. It
// starts nothing: Run does.
func Open(cfg Config, d Deps) (*Follower, error) {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	f := &Follower{cfg: cfg, d: d, path: filepath.Join(cfg.Dir, PendingOffsetsFile), pending: map[Key]int64{},
		stopCh: make(chan struct{}), exited: make(chan struct{})}
	raw, err := offsets.ReadFile(d.FS, f.path)
	if err != nil {
		return nil, err
	}
	if len(raw) > 0 {
		var list []pendingOffsetJSON
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("broker: %s (offsets committed to this slave, not yet pushed to the master): %w", f.path, err)
		}
		for _, p := range list {
			f.pending[Key{p.Group, p.Topic, p.QueueID}] = p.Offset
		}
	}
	return f, nil
}

// save writes the pending offsets when they changed since the last save
// (only the sync loop calls it).
func (f *Follower) save() error {
	f.mu.Lock()
	if f.version == f.saved {
		f.mu.Unlock()
		return nil
	}
	v := f.version
	list := make([]pendingOffsetJSON, 0, len(f.pending))
	for k, off := range f.pending {
		list = append(list, pendingOffsetJSON{Group: k.Group, Topic: k.Topic, QueueID: k.Queue, Offset: off})
	}
	f.mu.Unlock()
	slices.SortFunc(list, func(a, c pendingOffsetJSON) int {
		return cmp.Or(cmp.Compare(a.Topic, c.Topic), cmp.Compare(a.Group, c.Group), cmp.Compare(a.QueueID, c.QueueID))
	})
	raw, err := json.Marshal(list)
	if err != nil {
		return err
	}
	if err := offsets.WriteFileAtomic(f.d.FS, f.path, raw); err != nil {
		return err
	}
	f.mu.Lock()
	f.saved = max(f.saved, v)
	f.mu.Unlock()
	return nil
}

func loadStr(p *atomic.Pointer[string]) string {
	if s := p.Load(); s != nil {
		return *s
	}
	return ""
}

// Learned records the master's addresses from a REGISTER_BROKER answer
// (an empty one keeps what was known: the master may be away a moment).
func (f *Follower) Learned(h remoting.RegisterBrokerResponseHeader) {
	if h.HAServerAddr != "" {
		f.nsHA.Store(&h.HAServerAddr)
	}
	if h.MasterAddr != "" {
		f.nsMaster.Store(&h.MasterAddr)
	}
}

// NameServerHA is the master's HA address the name server last reported
// ("" before one).
func (f *Follower) NameServerHA() string { return loadStr(&f.nsHA) }

// NameServerMaster is the master's remoting address the name server last
// reported ("" before one).
func (f *Follower) NameServerMaster() string { return loadStr(&f.nsMaster) }

// MasterAddr is where the slave polls its master: the address of the
// master it is connected to (its hello reply), else the name server's
// masterAddr, else the last one a hello named.
func (f *Follower) MasterAddr() string {
	connected, hello := false, ""
	if f.d.Stream != nil {
		connected, hello = f.d.Stream.Hello()
	}
	ns := loadStr(&f.nsMaster)
	if (!connected || hello == "") && ns != "" {
		return ns
	}
	return hello
}

// Committed notes an offset a client committed to this slave. Call it
// before the offset table takes it (see ApplyOffsets).
func (f *Follower) Committed(group, topic string, queue int32, off int64) {
	f.mu.Lock()
	f.pending[Key{group, topic, queue}] = off
	f.version++
	f.mu.Unlock()
}

// Pending is a copy of the offsets committed here and not pushed yet.
func (f *Follower) Pending() map[Key]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.pending)
}

// Pushed forgets k unless it was committed again since the push (off).
func (f *Follower) Pushed(k Key, off int64) {
	f.mu.Lock()
	if cur, ok := f.pending[k]; ok && cur == off {
		delete(f.pending, k)
		f.version++
	}
	f.mu.Unlock()
}

// Syncs is the number of syncs that reached the master so far.
func (f *Follower) Syncs() int64 { return f.syncs.Load() }

// Rounds is the number of sync attempts finished so far, whether they
// reached the master or not.
func (f *Follower) Rounds() int64 { return f.rounds.Load() }

// ManifestReloads is the number of the master's manifests applied so far.
func (f *Follower) ManifestReloads() int64 { return f.manifest.Load() }

// errNoMaster: no master address is known yet.
var errNoMaster = errors.New("the master's remoting address is not known yet (neither an HA hello reply nor the name server named it)")
