package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/acl2"
	"github.com/stratamq/stratamq/broker/compaction"
	"github.com/stratamq/stratamq/broker/consumers"
	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/broker/failover"
	"github.com/stratamq/stratamq/broker/follow"
	"github.com/stratamq/stratamq/broker/pop"
	"github.com/stratamq/stratamq/broker/replication"
	"github.com/stratamq/stratamq/broker/retention"
	"github.com/stratamq/stratamq/broker/schedule"
	"github.com/stratamq/stratamq/broker/tiering"
	"github.com/stratamq/stratamq/broker/txn"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
	"github.com/stratamq/stratamq/tier/wal"
)

// Version is the RocketMQ version ordinal the broker puts in responses
// (V4_9_7): clients treat >= 232 as "SQL filter capable" and otherwise only
// compare it with 0.
const Version = 407

// Deps are the broker's collaborators, injected by cmd and tests.
type Deps struct {
	FS     vfs.FS       // default vfs.OS()
	Logger *slog.Logger // default slog.Default()
	// Metrics receives the broker's counters; nil disables them.
	Metrics *Metrics
	// Bucket, when set, is where sealed segments go (tiered storage); the
	// broker scopes it to <cluster>/<brokerName>/. Nil keeps everything local.
	Bucket tier.Bucket
	// Registerer receives the tier's collectors; nil skips them.
	Registerer prometheus.Registerer
	// TLS: the broker and HA ports' TLS, and the broker's own
	// connections' (tls.go); the zero value is plain.
	TLS TLS
	// GRPC: the gRPC endpoint's callbacks (grpc_backend.go); zero: none.
	GRPC GRPCDeps
	// Mono is the monotonic clock the bucket lease measures its validity
	// and a watching slave its TTL with; nil: the process's. The fault
	// simulator gives each node a skewed one.
	Mono offsets.MonoClock
	// Net is where the broker listens (its port, the HA port) and dials
	// (name servers, its master); nil: the host's TCP. The fault
	// simulator (broker/simtest) passes an in-memory network.
	Net Network

	// lease is the bucket lease a promoted slave took (Node hands it to
	// the master generation it starts); holdOff keeps a demoted master's
	// slave generation from taking the lease back for that long.
	lease   *offsets.Lease
	holdOff time.Duration
	// masterCut: where the master said the next (slave) generation's log
	// diverged (a hello refused with StatusDiverged); nil when it did not.
	masterCut *int64
	// restartAt: the next (slave) generation starts its log again at this
	// offset, the master's local start (StatusBeforeLogStart); 0: no.
	restartAt int64
	// afresh: the next (slave) generation sets its data dir aside and
	// restores afresh (its log could not follow the master's numbering).
	afresh bool
	// listOutOfOrder (tests only): the broker's uploader lists a
	// commitlog object while one below it is still missing, as binaries
	// before ordered listing did; the tests of reading and taking over a
	// bucket whose manifest has such a hole set it.
	listOutOfOrder bool

	// BootID names the machine boot the broker runs in (default: Linux's
	// /proc/sys/kernel/random/boot_id; "" where there is none). Tests and
	// the fault simulator give each simulated power cycle its own.
	BootID string
}

// Broker serves the RocketMQ remoting protocol over the local store.
type Broker struct {
	cfg     Config
	log     *slog.Logger
	fs      vfs.FS
	metrics *Metrics
	tls     TLS      // Deps.TLS, for the HA port and dial
	grpc    GRPCDeps // Deps.GRPC

	net  Network           // Deps.Net; nil: TCP
	mono offsets.MonoClock // Deps.Mono; nil: the process's

	store     *store.Store
	topics    *TopicConfigManager
	groups    *consumers.Groups // subscription group configs (wire_consumers.go)
	auth      *acl2.Store       // ACL 2.0's users and ACLs (auth2.go)
	authPath  string            // where auth is saved
	offsets   *offsets.ConsumerOffsets
	consumers *consumers.Registry // live consumer and producer clients (wire_consumers.go)
	hold      *pullHold
	tier      *tiering.Tiering      // nil without a bucket (wire_tiering.go)
	compactR  *compaction.Reader    // compacted queues' reads; nil without a bucket (wire_compaction.go)
	compactor *compaction.Compactor // a master with a bucket (wire_compaction.go)
	dur       *durability.Keeper    // nil without a bucket (wire_durability.go)
	scoped    tier.Bucket           // the bucket under <cluster>/<brokerName>/; nil without one
	locks     queueLocks
	uniq      *uniqIDs
	sqlCache  sqlCache          // compiled SQL92 subscriptions (sql_filter.go)
	lagLat    lagLatency        // store times of committed offsets for rocketmq_consumer_lag_latency (metrics_lag_latency.go)
	sched     *schedule.Service // delayed and timer messages (wire_schedule.go); set once the store is open
	trans     *txn.Service      // half messages and the check service (broker/txn, wire_txn.go)
	recall    recalls           // recalled timer messages (grpc_recall.go)
	grpcPuts  grpcPutter        // the gRPC endpoint's sends, stored together (grpc_put.go)
	pop       *pop.Engine       // POP consumption: in-flight messages and progress (package pop; wire_pop.go)

	// ret is per-topic retention's policy (package retention;
	// wire_retention.go); set once the store is open.
	ret *retention.Service

	server    *remoting.Server
	nsClient  *remoting.Client
	handlers  map[remoting.RequestCode]handlerFunc
	storeHost netip.AddrPort
	advertise string

	wal walState // the bucket WAL of bucket-durable topics (wire_wal.go)
	// durHist: under which durability each stretch of the log was written
	// (durability_history.go; nil on a slave or without a bucket); durGen
	// grows with every change of a topic's durability.
	durHist *durHistory          // (durability_history.go)
	durGen  atomic.Uint64        // (durability_history.go)
	follow  *follow.Follower     // a slave's follower (Run's startHA opens it; wire_follow.go); nil on a master
	repl    *replication.Service // a master's HA listener, high watermark and acknowledgement waits, or a slave's HA stream (wire_replication.go)
	hastat  haStatusState        // ha_status.go: what HAStatus reads besides repl and follow; the failover count

	// fo is this generation's part in failover: its identity, the lease
	// holder it follows, its role-change request, the lease watch
	// (package failover; wire_failover.go).
	fo             *failover.Roles
	restartAt      int64 // Deps.restartAt
	afresh         bool  // Deps.afresh
	listOutOfOrder bool  // Deps.listOutOfOrder
	// promotedReplica: a promoted slave kept its copy of the log
	// (checkLocalData); New then adopts the checkpoint's metadata.
	promotedReplica bool
	bootID          string    // Deps.BootID
	started         time.Time // when New made this generation

	dirLock     io.Closer // exclusive lock on <DataDir>/lock while the broker is open
	registerNow chan struct{}
	closing     atomic.Bool
	closeOnce   sync.Once
	closeErr    error

	// registeredWith: the name servers the last registration round
	// reached (registrar.go; Ready reads it); nil before the first and
	// while unregistered for a lapsed lease.
	registeredWith atomic.Pointer[[]string]
}

type handlerFunc func(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command

// New validates cfg, opens the store and config files and binds the
// listener. It starts no goroutine: Run does.
func New(cfg Config, deps Deps) (*Broker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.FS == nil {
		deps.FS = vfs.OS()
	}
	if deps.BootID == "" {
		deps.BootID = machineBootID()
	}
	// A record never spans segments: with small segments the largest
	// message shrinks to fit (said loudly, since clients see the limit).
	clamped := false
	if limit := cfg.SegmentSize - 64<<10; cfg.MaxMessageSize > limit {
		cfg.MaxMessageSize, clamped = limit, true
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	// One process per data dir: two would write the same files (and, with
	// the data dir's persistent instance id, look like one broker to the
	// lease).
	dirLock, err := vfs.Lock(deps.FS, filepath.Join(cfg.DataDir, "lock"))
	if err != nil {
		return nil, fmt.Errorf("broker: data dir %s is in use by another broker process: %w", cfg.DataDir, err)
	}
	b := &Broker{
		bootID: deps.BootID, started: time.Now(),
		cfg: cfg, log: deps.Logger.With("component", "broker", "broker", cfg.BrokerName),
		fs: deps.FS, metrics: deps.Metrics, grpc: deps.GRPC, net: deps.Net, mono: deps.Mono,
		registerNow: make(chan struct{}, 1),
		uniq:        newUniqIDs(),
	}
	b.consumers = b.newClientRegistry() // wire_consumers.go
	b.repl = newReplication(cfg)        // wire_replication.go
	masterCut, noTakeover := int64(-1), time.Time{}
	b.restartAt, b.afresh, b.listOutOfOrder = deps.restartAt, deps.afresh, deps.listOutOfOrder
	if deps.masterCut != nil {
		masterCut = *deps.masterCut
	}
	if deps.holdOff > 0 {
		noTakeover = time.Now().Add(deps.holdOff)
	}
	b.dirLock = dirLock
	b.hold = newPullHold(b)
	b.pop = newPopEngine(b)
	if clamped {
		b.log.Warn("largest accepted message lowered to fit the segment size",
			"maxMessageSize", cfg.MaxMessageSize.String(), "segmentSize", cfg.SegmentSize.String())
	}
	b.server = remoting.NewServer(remoting.ServerConfig{
		Addr:          cfg.Listen,
		Pools:         defaultPools(),
		Classify:      classify,
		Logger:        b.log,
		OnClose:       b.connClosed,
		MaxReadMemory: int64(cfg.MaxReadMemory),
		FrameTimeout:  cfg.FrameTimeout,
		MaxConns:      cfg.MaxConnections,
		MaxConnsPerIP: cfg.MaxConnectionsPerIP,
		OnRefuse:      deps.Metrics.ConnRefused("broker"),
		TLS:           deps.TLS.Server,
		TLSMode:       deps.TLS.Mode,
		Listener:      b.listener(),
	}, b)
	deps.Metrics.WatchServer("broker", b.server)
	if err := b.server.Listen(); err != nil {
		dirLock.Close()
		return nil, fmt.Errorf("broker: listen %s: %w", cfg.Listen, err)
	}
	b.advertise = AdvertiseFor(cfg.AdvertiseAddr, b.server.Addr())
	ap, err := netip.ParseAddrPort(b.advertise)
	if err != nil {
		if host, port, e := net.SplitHostPort(b.advertise); e == nil {
			if ips, e := net.LookupIP(host); e == nil && len(ips) > 0 {
				if a, ok := netip.AddrFromSlice(ips[0].To4()); ok {
					var p uint16
					fmt.Sscan(port, &p)
					ap, err = netip.AddrPortFrom(a, p), nil
				}
			}
		}
		if err != nil {
			b.server.Close()
			dirLock.Close()
			return nil, fmt.Errorf("broker: STRATAMQ_ADVERTISE_ADDR=%q: want ip:port: %w", b.advertise, err)
		}
	}
	b.storeHost = ap

	configDir := filepath.Join(cfg.DataDir, "config")
	fail := func(err error) (*Broker, error) {
		defer b.dirLock.Close()
		b.server.Close()
		if b.store != nil {
			b.store.Close()
		}
		if b.tier != nil {
			b.tier.Close() // its cold reader's cache runs goroutines
		}
		if b.dur != nil {
			_ = b.dur.Lease().Release(context.Background())
		}
		return nil, err
	}
	var scoped tier.Bucket
	var replicaCP *offsets.Checkpoint // a slave's read-only view of the master's checkpoint
	var manifest *upload.Manifest     // read by checkLocalData, reused by newTiering
	var cs offsets.ObjectStore        // the lease's and checkpoints' (failover)
	if deps.Bucket != nil {
		if scoped, err = tier.WithPrefix(deps.Bucket, cfg.Cluster+"/"+cfg.BrokerName); err != nil {
			return fail(err)
		}
		b.scoped, cs = scoped, newCheckpointStore(scoped)
	}
	if cfg.Durability == DurabilityBucket && deps.Bucket == nil {
		return fail(errors.New("broker: STRATAMQ_DURABILITY=bucket needs a bucket (STRATAMQ_BUCKET)"))
	}
	b.fo = newFailover(b, cs, noTakeover, masterCut) // wire_failover.go
	if deps.Bucket != nil {
		if cfg.Role == RoleSlave {
			// A slave only reads the master's prefix: no lease, no
			// checkpoint, no upload, no retention (issue 10 item 2).
			if replicaCP, err = b.fo.PrepareReplica(); err != nil {
				return fail(err)
			}
			if err := b.restoreMetadata(configDir, replicaCP); err != nil {
				return fail(err)
			}
		} else {
			if b.dur, err = newDurability(b, scoped, deps.lease); err != nil {
				return fail(err)
			}
			if manifest, b.promotedReplica, err = b.checkLocalData(); err != nil {
				return fail(err)
			}
			if err := b.restoreMetadata(configDir, b.dur.Loaded()); err != nil {
				return fail(err)
			}
		}
	}
	// Made durably before any handler saves into it (issue 9 item 11).
	if err := vfs.MkdirAllDurable(deps.FS, configDir); err != nil {
		return fail(fmt.Errorf("broker: make %s: %w", configDir, err))
	}
	if b.topics, err = OpenTopicConfigManager(deps.FS, configDir, cfg.AutoCreateTopic); err != nil {
		return fail(err)
	}
	b.topics.SetMaxTopics(cfg.MaxTopics)
	if b.groups, err = consumers.OpenGroups(deps.FS, configDir); err != nil {
		return fail(err)
	}
	b.groups.SetMaxGroups(cfg.MaxGroups)
	if b.offsets, err = offsets.OpenConsumerOffsets(deps.FS, configDir); err != nil {
		return fail(err)
	}
	if b.auth, b.authPath, err = b.openAuth(configDir); err != nil { // auth2.go
		return fail(err)
	}
	if b.promotedReplica {
		if err := b.adoptCheckpointMetadata(b.dur.Loaded()); err != nil {
			return fail(err)
		}
		if err := b.widenAdoptedQueues(b.dur.Loaded()); err != nil { // failover_topics.go
			return fail(err)
		}
		if err := b.adoptCheckpointAuth(b.dur.Loaded()); err != nil { // auth2.go
			return fail(err)
		}
		if err := b.persistAdopted(); err != nil {
			return fail(err)
		}
	}
	b.ensureTraceTopic() // trace.go

	schedLoaded, err := b.loadSchedule(configDir) // wire_schedule.go
	if err != nil {
		return fail(err)
	}
	var cold store.ColdReader
	var coldIndex store.ColdIndex
	var coldKeys store.ColdKeyIndex
	var restore *store.Restore
	var walChain *wal.Chain // a master with a bucket: the bucket WAL (wire_wal.go)
	var foldFrom int64 = -1 // >= 0: fold the WAL's tail past it first (wire_walfold.go)
	if scoped != nil {
		fresh := b.storeIsFresh()
		if b.tier, err = newTiering(b, scoped, deps.Registerer, manifest); err != nil {
			return fail(fmt.Errorf("broker: tiering: %w", err))
		}
		cold, coldIndex, coldKeys = b.tier.Cold(), b.tier, b.tier
		if b.dur != nil {
			if walChain, err = b.readWALChain(b.walHeld(nil)); err != nil {
				return fail(err)
			}
		}
		switch {
		case cfg.Role == RoleSlave:
			// Always: the store keeps a local log that reaches U and
			// drops one that lags it.
			if restore, err = b.replicaRestorePoint(replicaCP); err != nil {
				return fail(err)
			}
		case fresh:
			// The WAL's tail, if it holds one, continues the segments
			// byte for byte; else restorePoint resumes the log and queues
			// past the checkpoint's reservations. A WAL tail past which the
			// lost broker may have handed out offsets (local-durable
			// topics) is folded into segments first, and restorePoint
			// decides after all (wire_walfold.go).
			var fromWAL bool
			if err := b.fs.RemoveAll(filepath.Join(cfg.DataDir, walFoldDir)); err != nil {
				return fail(fmt.Errorf("broker: remove the scratch store of an unfinished fold: %w", err))
			}
			if walChain != nil {
				e := b.bucketObjectsEnd(manifest)
				if restore, fromWAL = b.walRestorePoint(walChain, e); fromWAL && b.walTailNeedsFold(walChain, e) {
					foldFrom = e
				}
			}
			if !fromWAL {
				if restore, err = b.restorePoint(); err != nil {
					return fail(err)
				}
			}
		}
		if b.dur != nil {
			if err := b.dur.RecordWriter(); err != nil {
				return fail(err)
			}
		}
	}
	flush := store.FlushAsync
	if cfg.Flush == "sync" {
		flush = store.FlushSync
	}
	storeOpts := store.Options{
		FS:               deps.FS,
		Dir:              filepath.Join(cfg.DataDir, "store"),
		SegmentSize:      int64(cfg.SegmentSize),
		Flush:            flush,
		FlushInterval:    cfg.FlushInterval,
		SyncGather:       cfg.SyncGather,
		MaxMessageSize:   int(cfg.MaxMessageSize),
		MinFreeBytes:     uint64(cfg.MinFreeSpace), // 0: the store's default
		StoreHost:        b.storeHost,
		Logger:           b.log,
		OnDispatch:       b.onDispatch,
		Cold:             cold,
		ColdIndex:        coldIndex,
		ColdKeys:         coldKeys,
		Restore:          restore,
		CQEntriesPerFile: cfg.CQEntriesPerFile,
		// The broker refuses topics and queues past its limits first (with
		// a remark); the store's are a backstop for what the broker does
		// not refuse (retry and DLQ topics, one per consumer group): twice
		// the topic limit.
		MaxTopics:         2 * cfg.MaxTopics,
		MaxQueuesPerTopic: cfg.MaxQueuesPerTopic,
		MaxOpenQueueFiles: cfg.MaxOpenQueueFiles,
	}
	if foldFrom >= 0 {
		held, err := b.foldWALTail(storeOpts, restore, walChain, foldFrom, func(s *store.Store) { b.store = s })
		if err != nil {
			return fail(err)
		}
		if restore, err = b.restorePoint(); err != nil {
			return fail(err)
		}
		withFolded(restore, held)
		storeOpts.Restore = restore
	}
	b.store, err = store.Open(storeOpts)
	if err != nil {
		return fail(fmt.Errorf("broker: open store: %w", err))
	}
	if walChain != nil {
		reopen := func() error {
			opts := storeOpts
			opts.Restore = nil
			b.store, err = store.Open(opts)
			return err
		}
		if err := b.recoverWAL(walChain, b.bucketObjectsEnd(manifest), reopen); err != nil {
			return fail(err)
		}
		b.registerWAL(deps.Registerer)
	}
	if restore != nil && (!restore.Replica || walChain != nil) {
		b.afterRestore(restore)
	}
	if b.promotedReplica {
		if err := b.resumeUnseenQueues(); err != nil { // wire_restore.go
			return fail(err)
		}
		// The consumer offsets adopted from the checkpoint may be past
		// this copy's queue ends (the old master wrote further): moved
		// back, or this broker's next messages there would be skipped.
		b.afterRestore(nil)
	}
	// The high watermark starts where another copy is known to hold the
	// log: a promoted slave's copy is the one that holds what the old
	// master acknowledged (its whole log); a master on its own log (a
	// restart, or a copy that won a contest) knows only what the bucket
	// holds: its tail past that may be in no slave (written, never
	// acknowledged), and neither consumers (readBound) nor the progress
	// saved for a failover (slaveHeld) may count it until a slave acks it
	// (a reconnecting slave's hello does, at once).
	if b.cfg.Role == RoleSyncMaster && !b.promotedReplica {
		b.repl.SetHW(min(b.store.MaxPhysOffset(), max(uploadedEnd(manifest, b.tier), b.store.MinPhysOffset())))
	} else {
		b.repl.SetHW(b.store.MaxPhysOffset())
	}
	b.repl.SetEntries(b.store)
	b.fo.SetLog(b.store)
	if cfg.Role != RoleSlave { // a slave's table is its master's
		if err := b.addStoredTopics(); err != nil {
			return fail(err)
		}
	}
	b.scanDurability() // wire_wal.go
	if b.dur != nil {
		// This run's durability rule, recorded before its first write. A
		// history that does not parse is started again: the records
		// below its first entry count as maybe acknowledged.
		if b.durHist, err = loadDurHistory(deps.FS, configDir); err != nil {
			b.log.Warn("the durability history does not parse; starting a new one (a returning tail below it counts as maybe acknowledged)", "err", err)
			b.durHist = newDurHistory(deps.FS, configDir)
		}
		if err := b.settleDurability(); err != nil { // durability_history.go
			return fail(err)
		}
	} else if cfg.Role == RoleSlave {
		// A slave's log is its master's from its end on (a tail the master
		// never had was cut before the store opened): the history of this
		// data dir's own runs as a master describes only what lies below.
		h, err := loadDurHistory(deps.FS, configDir)
		if err == nil {
			err = h.followFrom(b.store.MaxPhysOffset())
		}
		if err != nil {
			b.log.Warn("the durability history is unreadable or cannot be written; removing it (this data dir's own tail counts as maybe acknowledged)", "err", err)
			if err := deps.FS.Remove(filepath.Join(configDir, durHistoryFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fail(fmt.Errorf("broker: remove the durability history of a data dir now a slave's: %w", err))
			}
		}
	}
	held, useHeld := b.loadedHeld() // durable_progress.go
	if useHeld {
		schedLoaded.Raise(held.DelayOffsets, held.TimerOffsets)
	} else {
		held = heldProgress{}
	}
	b.sched = b.newSchedule(configDir, schedLoaded)            // clamped to the queues, now open
	b.ret = b.newRetention()                                   // wire_retention.go
	b.compactR, b.compactor = b.newCompaction(deps.Registerer) // wire_compaction.go
	if b.trans, err = b.newTrans(held.Transactions); err != nil {
		return fail(err)
	}
	if err := b.loadPop(); err != nil { // wire_pop.go
		return fail(err)
	}
	if b.dur != nil {
		// This epoch takes the log over from the older ones here. Never
		// below what the bucket already holds: the offsets past it would
		// name other messages than the uploaded ones. (checkLocalData
		// restores a copy that ends below it from the bucket; this is the
		// backstop that turns a mistake there into a refusal, not a loss.)
		from := b.store.MaxPhysOffset()
		b.dur.SetFrom(from)
		if end := uploadedEnd(manifest, b.tier); from < end {
			return fail(fmt.Errorf("broker: refusing to write: the local commitlog ends at offset %d, before the end %d of what the bucket holds; "+
				"writing on would reuse offsets of uploaded messages (start on an empty data dir to restore from the bucket)", from, end))
		}
		// No write before the first checkpoint of this run reserves
		// offsets for it; write that checkpoint now (the bucket answered
		// for the lease a moment ago). If it fails, the durability loop
		// retries and sends are refused meanwhile.
		b.dur.BlockWrites(b.store)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := b.dur.Checkpoint(ctx); err != nil {
			if errors.Is(err, offsets.ErrFenced) {
				cancel()
				return fail(fmt.Errorf("broker: first checkpoint: %w", err))
			}
			b.log.Warn("first checkpoint failed; sends are refused until one succeeds", "err", err)
		}
		cancel()
	}
	b.tls = deps.TLS
	b.nsClient = remoting.NewClient(remoting.ClientConfig{DialTimeout: 3 * time.Second, Logger: b.log, TLS: deps.TLS.Client,
		Dial: b.dialer()})
	b.handlers = b.handlerTable()
	b.initHAStatus(deps.Metrics)
	return b, nil
}

// Addr is the bound listen address.
func (b *Broker) Addr() net.Addr { return b.server.Addr() }

// AdvertisedAddr is the address registered with the name servers.
func (b *Broker) AdvertisedAddr() string { return b.advertise }

// Store exposes the store to tests and tools in this module.
func (b *Broker) Store() *store.Store { return b.store }

// Server exposes the remoting server (tests use its Control hook).
func (b *Broker) Server() *remoting.Server { return b.server }
