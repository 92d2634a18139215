package broker

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/acl2"
	"github.com/stratamq/stratamq/infra/bytesize"
	"github.com/stratamq/stratamq/msgtrace"
	"github.com/stratamq/stratamq/remoting"
)

// Config is the broker's configuration. Every field is an environment
// variable STRATAMQ_<env tag> and a kebab-case flag (cmd/stratamq parses
// both); zero means default (see withDefaults).
type Config struct {
	DataDir         string        `env:"DATA_DIR" envDefault:"./data" help:"data directory: store, config, local bucket"`
	Listen          string        `env:"LISTEN" envDefault:":10911" help:"broker remoting listen address"`
	GRPCListen      string        `env:"GRPC_LISTEN" envDefault:":8081" help:"RocketMQ 5 gRPC (proxy protocol) listen address, for the 5.x clients; empty disables"`
	Namesrv         string        `env:"NAMESRV" help:"name servers, ';'-separated (serve: its own)"`
	Cluster         string        `env:"CLUSTER" envDefault:"DefaultCluster" help:"cluster name"`
	BrokerName      string        `env:"BROKER_NAME" envDefault:"broker-a" help:"broker name (also the bucket prefix)"`
	BrokerID        int64         `env:"BROKER_ID" help:"0 = master, >0 = slave"`
	AdvertiseAddr   string        `env:"ADVERTISE_ADDR" help:"address registered with name servers (default: listen address, or first non-loopback IP when listening on all interfaces)"`
	Flush           string        `env:"FLUSH" envDefault:"async" help:"async | sync (group commit: acked after fdatasync)"`
	SegmentSize     bytesize.Size `env:"SEGMENT_SIZE" envDefault:"256MiB" help:"commitlog segment size (larger segments: fewer PUTs per GiB)"`
	AutoCreateTopic bool          `env:"AUTO_CREATE_TOPIC" envDefault:"true" help:"create unknown topics on first send through TBW102"`
	MaxMessageSize  bytesize.Size `env:"MAX_MESSAGE_SIZE" envDefault:"4MiB" help:"largest accepted message (whole record)"`
	FlushInterval   time.Duration `env:"FLUSH_INTERVAL" envDefault:"500ms" help:"async flush period"`
	SyncGather      time.Duration `env:"SYNC_GATHER" envDefault:"1ms" help:"flush=sync: after a group commit acknowledged several sends, the next fdatasync waits up to this long (and no longer than the last fdatasync took) for as many new sends, so writers that send again once acknowledged share one; negative: never wait"`
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"30s" help:"graceful shutdown deadline"`
	MinFreeSpace    bytesize.Size `env:"MIN_FREE_SPACE" help:"refuse sends (SERVICE_NOT_AVAILABLE) while the data dir's volume has less free space than this (default: 5% of the volume, at most 256MiB)"`

	// EnableMixedMessageType (msgtype.go) is RocketMQ's enableMixedMessageType.
	EnableMixedMessageType bool `env:"ENABLE_MIXED_MESSAGE_TYPE" help:"allow a topic's message.type attribute to be MIXED (every kind of message on one topic), as RocketMQ's enableMixedMessageType; a topic without the attribute takes every kind anyway"`

	// Bounded resources: topics and queues a client may create, descriptors
	// of consumequeue files kept open.
	MaxTopics         int `env:"MAX_TOPICS" envDefault:"4096" help:"most topics the broker holds; creating one more (UPDATE_AND_CREATE_TOPIC, auto-create on send) is refused"`
	MaxGroups         int `env:"MAX_GROUPS" envDefault:"4096" help:"most consumer groups the broker holds; a client's heartbeat or gRPC settings or receive creating one more is refused"`
	MaxQueuesPerTopic int `env:"MAX_QUEUES_PER_TOPIC" envDefault:"1024" help:"most read or write queues of one topic"`
	MaxOpenQueueFiles int `env:"MAX_OPEN_QUEUE_FILES" envDefault:"1024" help:"consumequeue files kept open at once (least recently used ones are closed)"`

	// Tiering (used when a bucket is configured; cmd opens STRATAMQ_BUCKET).
	LocalRetention     bytesize.Size `env:"LOCAL_RETENTION" envDefault:"1GiB" help:"bytes of sealed, uploaded segments kept on local disk (0 = drop right after upload)"`
	CacheSize          bytesize.Size `env:"CACHE_SIZE" envDefault:"256MiB" help:"cold-read cache of decompressed frames, bytes"`
	TierLayout         string        `env:"TIER_LAYOUT" envDefault:"queue" help:"queue | log: how a segment's records are ordered in its bucket object; queue stores each queue's records together, so replaying one queue reads only its bytes"`
	SegmentMaxAge      time.Duration `env:"SEGMENT_MAX_AGE" envDefault:"10m" help:"seal (and upload) the active segment after this long"`
	TierCommitDelay    time.Duration `env:"TIER_COMMIT_DELAY" envDefault:"30s" help:"longest an uploaded segment waits to be listed in the bucket's manifest with the next ones (one manifest PUT for several segments); it waits only while another segment is uploading or due to seal within it, and stays on local disk until listed"`
	Retention          time.Duration `env:"RETENTION" help:"delete bucket objects uploaded longer ago than this (0 = keep forever)"`
	LeaseTTL           time.Duration `env:"LEASE_TTL" help:"lifetime of the bucket lease (default 3 × checkpoint interval, at least 30s; at least 1s), renewed every fifth of it; a crashed broker's replacement waits this long"`
	CheckpointInterval time.Duration `env:"CHECKPOINT_INTERVAL" envDefault:"10s" help:"how often offsets, topics, groups and the log's high-water mark are checkpointed to the bucket (the lease is renewed on its own, every fifth of its TTL)"`
	CheckpointWait     time.Duration `env:"CHECKPOINT_WAIT" envDefault:"2s" help:"longest a send waits for a bucket checkpoint it needs (the offsets the last one reserved ran out) before it is refused SERVICE_NOT_AVAILABLE; a checkpoint that fails refuses it at once"`
	// Compacted topics (package compaction, wire_compaction.go).
	CompactionInterval           time.Duration `env:"COMPACTION_INTERVAL" envDefault:"1m" help:"how often a master looks for compacted topics (cleanup.policy=COMPACTION) to compact"`
	CompactionMinMessages        int64         `env:"COMPACTION_MIN_MESSAGES" envDefault:"10000" help:"a compacted queue is compacted again once this many of its offsets past the last compaction are uploaded"`
	CompactionTombstoneRetention time.Duration `env:"COMPACTION_TOMBSTONE_RETENTION" envDefault:"24h" help:"a message with an empty body in a compacted topic (a tombstone) removes its key; it is itself dropped by the first compaction after it is this old"`
	CompactionRate               bytesize.Size `env:"COMPACTION_RATE" help:"most record bytes compaction reads per second (0 = no bound)"`
	CompactionMaxDelay           time.Duration `env:"COMPACTION_MAX_DELAY" envDefault:"1h" help:"a compacted queue is compacted again once as many new messages as its compacted history keeps are uploaded (each round rewrites it), or this long after its last round"`
	CompactionGrace              time.Duration `env:"COMPACTION_GRACE" envDefault:"5m" help:"a compacted generation replaced by a newer one is deleted from the bucket this long after (readers between manifest reloads, a slave's)"`
	CompactionCPU                int           `env:"COMPACTION_CPU" envDefault:"50" help:"most percent of one core compaction keeps busy: it rests after each batch in proportion to the time the batch took (1-100)"`
	// Bucket durability (package tier/wal, wire_wal.go).
	Durability    string        `env:"DURABILITY" envDefault:"local" help:"durability of topics without their own durability attribute: local (SEND_OK once the message is in the local log, per STRATAMQ_FLUSH and STRATAMQ_ROLE) or bucket (SEND_OK once it is in a committed WAL object in the bucket: nothing acknowledged is lost with the disk; needs a bucket)"`
	WALLinger     time.Duration `env:"WAL_LINGER" envDefault:"200ms" help:"bucket durability: longest the first waiting send waits for more before its WAL object is written (at most one WAL PUT per linger while sends wait)"`
	WALBatch      bytesize.Size `env:"WAL_BATCH" envDefault:"4MiB" help:"bucket durability: most log bytes in one WAL object; a full batch is written at once"`
	WALMaxBacklog bytesize.Size `env:"WAL_MAX_BACKLOG" envDefault:"64MiB" help:"bucket durability: log bytes not yet in the WAL past which a send to a bucket topic waits (up to STRATAMQ_CHECKPOINT_WAIT), then is refused SYSTEM_BUSY (a slow or throttling bucket)"`
	WALHedge      time.Duration `env:"WAL_HEDGE" envDefault:"0s" help:"bucket durability: a WAL PUT not answered within this long is sent again beside it and the first to land commits the object (for a bucket whose slow tail PUTs hold sends back; each hedge is one more PUT, and a cancelled attempt closes its connection); unset (0s): off; a positive value turns it on with that delay"`
	WALAckTimeout time.Duration `env:"WAL_ACK_TIMEOUT" envDefault:"10s" help:"bucket durability: a stored send whose WAL object is not committed within this long is answered FLUSH_DISK_TIMEOUT (stored locally, not yet in the bucket)"`
	AcceptLoss    bool          `env:"ACCEPT_LOSS" help:"start even though messages the bucket lacks would be left behind (a drain that failed, a local disk another broker has since overtaken, or a promoted slave's lagging copy holding offsets the bucket lacks); the local data is set aside, not deleted"`

	// Resource limits of the remoting servers (broker and name server each).
	MaxReadMemory       bytesize.Size `env:"MAX_READ_MEMORY" envDefault:"64MiB" help:"bytes of requests being read or waiting to be handled, per server; past it connections stop being read until memory frees (one request of up to 16 MiB may go past it)"`
	MaxConnections      int           `env:"MAX_CONNECTIONS" envDefault:"4096" help:"open client connections per server; more are closed at accept"`
	MaxConnectionsPerIP int           `env:"MAX_CONNECTIONS_PER_IP" envDefault:"1024" help:"open client connections per server from one remote IP; more are closed at accept"`
	FrameTimeout        time.Duration `env:"FRAME_TIMEOUT" envDefault:"30s" help:"a request must arrive whole within this long of its first byte, or its connection is closed"`

	// HA (issue 10): replication to a slave of the same brokerName.
	Role      string        `env:"ROLE" envDefault:"async_master" help:"async_master | sync_master (a send is acknowledged once a slave holds it) | slave (follows STRATAMQ_HA_MASTER)"`
	HAListen  string        `env:"HA_LISTEN" help:"HA listen address of a master (sync_master: default :10912; async_master: only when set)"`
	HAMaster  string        `env:"HA_MASTER" help:"slave: the master's HA address (host:port); may be empty with STRATAMQ_NAMESRV, whose answer to the slave's registration names it"`
	HAMaxLag  bytesize.Size `env:"HA_MAX_LAG" envDefault:"256MiB" help:"sync_master: SLAVE_NOT_AVAILABLE while the best slave lags more than this"`
	HATimeout time.Duration `env:"HA_ACK_TIMEOUT" envDefault:"5s" help:"sync_master: FLUSH_SLAVE_TIMEOUT when no slave acknowledged a send within this long"`

	HAMaxConns int `env:"HA_MAX_CONNS" envDefault:"8" help:"master: most slaves served on the HA port at once (as many more may be in their handshake, the oldest dropped past that); more are refused"`
	// HASecret is the shared secret of a master and its slaves
	// (STRATAMQ_HA_SECRET, read by cmd: a secret is never an environment
	// setting of Config, so GET_BROKER_CONFIG cannot show it). A slave
	// signs its hello with it, the master its reply (ha.MasterOptions.
	// Secret). Empty: the secret of the account the broker signs its own
	// requests with (credentials: the ACL's admin account), if any; else
	// the HA port serves, and a slave follows, peers on this host only.
	HASecret acl.Secret `env:"-"`
	// HAMinInSync is RocketMQ 5's minInSyncReplicas, the master counted
	// (ha.MasterOptions.MinInSync; ha/insync.go defines in sync).
	HAMinInSync int `env:"HA_MIN_INSYNC" envDefault:"2" help:"sync_master: copies, the master's included, that must hold a message before SEND_OK: 2 waits for a slave (SLAVE_NOT_AVAILABLE / FLUSH_SLAVE_TIMEOUT without one); 1 lets the master acknowledge alone while no slave is in sync (connected, within STRATAMQ_HA_MAX_LAG, and no ack missed past STRATAMQ_HA_ACK_TIMEOUT since it last caught up)"`
	// Slave reads (read_suggest.go): suggestWhichBrokerId.
	SlaveReadEnable bool          `env:"SLAVE_READ_ENABLE" help:"master: send a consumer that lags (its pull read from the bucket, or more than STRATAMQ_SLAVE_READ_LAG behind) to a caught-up slave (suggestWhichBrokerId); slave: keep such a consumer until it caught up. Off: the master always suggests itself (RocketMQ's slaveReadEnable)"`
	SlaveReadLag    bytesize.Size `env:"SLAVE_READ_LAG" help:"with STRATAMQ_SLAVE_READ_ENABLE: a pull this many log bytes behind the end lags too (0 = only pulls served from the bucket)"`
	// A serving slave (package follow, wire_follow.go).
	HASyncInterval time.Duration `env:"HA_SYNC_INTERVAL" envDefault:"3s" help:"slave: how often it pushes offsets committed to it to the master, copies the master's topics, groups and consumer offsets, and (with a bucket) reloads the master's manifest to drop local segments it lists"`
	// HAFailover: the bucket's lease decides who is master (issue 10 item 4).
	HAFailover bool `env:"HA_FAILOVER" help:"automatic failover through the bucket lease: a slave takes the lease and becomes master when its master's lease lapses; a master that finds another broker holding the lease becomes its slave (needs a bucket; STRATAMQ_HA_MASTER is then learned from the lease)"`
	// HAUncleanAfter: offsets.Contest.UncleanAfter.
	HAUncleanAfter time.Duration `env:"HA_UNCLEAN_TAKEOVER_AFTER" envDefault:"0s" help:"failover of a sync_master: a takeover waits until every slave that followed the old master (and so may hold what it acknowledged) was heard from in the bucket; after this long it takes the lease without the silent ones, which can lose what only they held. 0 (default): wait for them, however long (an operator can remove a dead slave's meta/replicas/<epoch>/<instance>.json object instead). With STRATAMQ_HA_MIN_INSYNC=1 and 0s the wait is three lease TTLs"`

	// SQL92 property filters (issue 11 item 6).
	SQLFilter string `env:"SQL_FILTER" envDefault:"true" help:"serve SQL92 subscriptions (MessageSelector.bySql), filtering on the broker by message properties; false refuses them (RocketMQ's enablePropertyFilter)"`
	// Scheduled messages (issue 11 item 1, package schedule).
	DelayLevels   string        `env:"DELAY_LEVELS" envDefault:"1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h" help:"delay levels 1, 2, ... of DELAY messages and retries, as RocketMQ's messageDelayLevel (units s, m, h, d)"`
	TimerMaxDelay time.Duration `env:"TIMER_MAX_DELAY" envDefault:"2160h" help:"how far ahead a timer message (TIMER_DELIVER_MS, TIMER_DELAY_SEC) may be due; later ones are refused MESSAGE_ILLEGAL"`
	// Transactions (issue 11 item 3; transaction.go): RocketMQ's
	// transactionTimeOut, transactionCheckInterval, transactionCheckMax.
	TransactionTimeout       time.Duration `env:"TRANSACTION_TIMEOUT" envDefault:"6s" help:"a half message with no commit or rollback is checked back with its producer group once it is this old (RocketMQ's transactionTimeOut)"`
	TransactionCheckInterval time.Duration `env:"TRANSACTION_CHECK_INTERVAL" envDefault:"60s" help:"how often the master checks back half messages in doubt (CHECK_TRANSACTION_STATE to a live producer of the group)"`
	TransactionCheckMax      int           `env:"TRANSACTION_CHECK_MAX" envDefault:"15" help:"checks of one half message before it is discarded (logged)"`

	// Message traces (trace.go): RocketMQ's traceTopicEnable, msgTraceTopicName.
	TraceTopicEnable  bool   `env:"TRACE_TOPIC_ENABLE" help:"master: create the message-trace topic (STRATAMQ_MSG_TRACE_TOPIC_NAME, 1 queue) and register its route, so clients with tracing on can send their trace records (RocketMQ's traceTopicEnable)"`
	MsgTraceTopicName string `env:"MSG_TRACE_TOPIC_NAME" envDefault:"RMQ_SYS_TRACE_TOPIC" help:"the trace topic STRATAMQ_TRACE_TOPIC_ENABLE creates (RocketMQ's msgTraceTopicName)"`

	// Access control (issue 14; acl package, broker/acl.go).
	ACLFile      string `env:"ACL_FILE" help:"a RocketMQ plain_acl.yml: every request must be signed by one of its accounts (AccessKey + HMAC signature, as the official clients send with credentials) and is checked against its permissions; reloaded when it changes. The name server protects its route and KV writes with it too. Empty: no ACL"`
	ACLAccessKey string `env:"ACL_ACCESS_KEY" help:"the account the broker signs its own requests with (name-server registration, a slave's calls to its master): an admin account of STRATAMQ_ACL_FILE (default: the file's first admin account); without an ACL file the secret comes from STRATAMQ_ACL_SECRET_KEY"`
	// ACL is the opened STRATAMQ_ACL_FILE (cmd opens it and runs its
	// reloader; tests set it); nil with no file. ACLCredentials, when
	// set, sign the broker's own requests instead of ACLAccessKey's
	// account (cmd fills it from STRATAMQ_ACL_ACCESS_KEY and
	// STRATAMQ_ACL_SECRET_KEY when there is no ACL file). Neither is an
	// environment setting, so GET_BROKER_CONFIG never shows them.
	ACL            *acl.ACL        `env:"-"`
	ACLCredentials acl.Credentials `env:"-"`
	// ACL 2.0 (package acl2, broker/auth2.go): RocketMQ 5.3's
	// authenticationEnabled, authorizationEnabled, initAuthenticationUser.
	AuthenticationEnabled bool `env:"AUTHENTICATION_ENABLED" help:"ACL 2.0: every request must be signed by a user (users are made with stratamq admin createUser; the signature is ACL 1.0's) or, with STRATAMQ_ACL_FILE, by one of its accounts; RocketMQ's authenticationEnabled"`
	AuthorizationEnabled  bool `env:"AUTHORIZATION_ENABLED" help:"ACL 2.0: a request signed by a user is allowed or refused by that user's policies (stratamq admin createAcl; super users pass); RocketMQ's authorizationEnabled"`
	// InitAuthenticationUser, when set, is a super user made at start if
	// no user of its name exists (cmd reads STRATAMQ_INIT_AUTHENTICATION_USER,
	// RocketMQ's initAuthenticationUser, JSON {"username","password"}: a
	// secret, so not an environment setting GET_BROKER_CONFIG shows).
	InitAuthenticationUser *acl2.UserInfo `env:"-"`

	// POP consumption (issue 16; package pop): bounds on the messages the
	// broker tracks in flight.
	PopMaxInflight          int `env:"POP_MAX_INFLIGHT" envDefault:"100000" help:"most POP-consumed (gRPC SimpleConsumer/PushConsumer) messages in flight, unacked, across all groups; a receive past it gets what fits, or a clear error when nothing does"`
	PopMaxInflightPerGroup  int `env:"POP_MAX_INFLIGHT_PER_GROUP" envDefault:"20000" help:"most POP-consumed messages one consumer group has in flight; a group takes from STRATAMQ_POP_MAX_INFLIGHT only while it leaves a share free for one more group"`
	PopMaxInflightPerClient int `env:"POP_MAX_INFLIGHT_PER_CLIENT" envDefault:"10000" help:"most POP-consumed messages one client (its gRPC client id) has in flight, all its groups together"`
	// PopReviveInterval is how often POP expiry runs (not from the
	// environment); default 100ms.
	PopReviveInterval time.Duration `env:"-"`

	// Not from the environment: set by tests and by serve.
	RegisterInterval time.Duration `env:"-"` // default 10s; the registration expires after 3 of them (registrar.go)
	ClientExpiry     time.Duration `env:"-"` // consumers/producers without heartbeat; default 120s
	ConfigFlush      time.Duration `env:"-"` // config files persisted this often when dirty; default 5s
	OffsetFlush      time.Duration `env:"-"` // consumerOffset.json written this long after a commit; default 100ms
	MaxHold          time.Duration `env:"-"` // cap on a long-poll hold; default 25s
	CQEntriesPerFile int           `env:"-"` // consumequeue file size in entries; default 300,000
	ReserveQueueMin  int64         `env:"-"` // least queue-offset reservation per checkpoint; default 65,536
	ReserveLogMin    int64         `env:"-"` // least commitlog reservation per checkpoint; default 1 GiB
}

// leaseTTLFloor is the shortest STRATAMQ_LEASE_TTL: the lease is renewed
// every fifth of it, each renewal a conditional PUT that must land within
// that fifth (200 ms at 1 s).
const leaseTTLFloor = time.Second

// defaultCheckpointWait is STRATAMQ_CHECKPOINT_WAIT's default.
const defaultCheckpointWait = 2 * time.Second

// Roles (STRATAMQ_ROLE).
const (
	RoleAsyncMaster = "async_master"
	RoleSyncMaster  = "sync_master"
	RoleSlave       = "slave"
)

func (c Config) withDefaults() Config {
	if c.DataDir == "" {
		c.DataDir = "./data"
	}
	if c.Listen == "" {
		c.Listen = ":10911"
	}
	if c.Cluster == "" {
		c.Cluster = "DefaultCluster"
	}
	if c.BrokerName == "" {
		c.BrokerName = "broker-a"
	}
	if c.Flush == "" {
		c.Flush = "async"
	}
	if c.MsgTraceTopicName == "" {
		c.MsgTraceTopicName = msgtrace.DefaultTopic
	}
	if c.TierLayout == "" {
		c.TierLayout = "queue"
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = 256 << 20
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 4 << 20
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = 500 * time.Millisecond
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.MaxTopics == 0 {
		c.MaxTopics = 4096
	}
	if c.MaxGroups == 0 {
		c.MaxGroups = 4096
	}
	if c.MaxQueuesPerTopic == 0 {
		c.MaxQueuesPerTopic = 1024
	}
	if c.MaxOpenQueueFiles == 0 {
		c.MaxOpenQueueFiles = 1024
	}
	if c.RegisterInterval == 0 {
		c.RegisterInterval = 10 * time.Second
	}
	if c.ClientExpiry == 0 {
		c.ClientExpiry = 120 * time.Second
	}
	if c.ConfigFlush == 0 {
		c.ConfigFlush = 5 * time.Second
	}
	if c.OffsetFlush == 0 {
		c.OffsetFlush = 100 * time.Millisecond
	}
	if c.PopReviveInterval == 0 {
		c.PopReviveInterval = 100 * time.Millisecond
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = 10 * time.Second
	}
	if c.CheckpointWait == 0 {
		c.CheckpointWait = defaultCheckpointWait
	}
	if c.CacheSize == 0 {
		c.CacheSize = 256 << 20
	}
	if c.SegmentMaxAge == 0 {
		c.SegmentMaxAge = 10 * time.Minute
	}
	if c.TierCommitDelay == 0 {
		c.TierCommitDelay = 30 * time.Second
	}
	if c.CompactionInterval == 0 {
		c.CompactionInterval = time.Minute
	}
	if c.CompactionMinMessages == 0 {
		c.CompactionMinMessages = 10000
	}
	if c.CompactionTombstoneRetention == 0 {
		c.CompactionTombstoneRetention = 24 * time.Hour
	}
	if c.CompactionMaxDelay == 0 {
		c.CompactionMaxDelay = time.Hour
	}
	if c.CompactionGrace == 0 {
		c.CompactionGrace = 5 * time.Minute
	}
	if c.CompactionCPU == 0 {
		c.CompactionCPU = 50
	}
	if c.MaxReadMemory == 0 {
		c.MaxReadMemory = remoting.DefaultMaxReadMemory
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = remoting.DefaultMaxConns
	}
	if c.MaxConnectionsPerIP == 0 {
		c.MaxConnectionsPerIP = remoting.DefaultMaxConnsPerIP
	}
	if c.FrameTimeout == 0 {
		c.FrameTimeout = remoting.DefaultFrameTimeout
	}
	if c.Role == "" {
		c.Role = RoleAsyncMaster
	}
	if c.HAListen == "" && (c.Role == RoleSyncMaster || c.HAFailover) {
		c.HAListen = ":10912"
	}
	if c.HAMaxLag == 0 {
		c.HAMaxLag = 256 << 20
	}
	if c.HATimeout == 0 {
		c.HATimeout = 5 * time.Second
	}
	if c.HAMinInSync == 0 {
		c.HAMinInSync = 2
	}
	if c.HAMaxConns == 0 {
		c.HAMaxConns = 8
	}
	if c.HASyncInterval == 0 {
		c.HASyncInterval = 3 * time.Second
	}
	if c.DelayLevels == "" {
		c.DelayLevels = DefaultDelayLevels
	}
	if c.TimerMaxDelay == 0 {
		c.TimerMaxDelay = DefaultTimerMaxDelay
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = 6 * time.Second
	}
	if c.TransactionCheckInterval == 0 {
		c.TransactionCheckInterval = 60 * time.Second
	}
	if c.TransactionCheckMax == 0 {
		c.TransactionCheckMax = 15
	}
	if c.Durability == "" {
		c.Durability = DurabilityLocal
	}
	if c.WALLinger == 0 {
		c.WALLinger = 200 * time.Millisecond
	}
	if c.WALBatch == 0 {
		c.WALBatch = 4 << 20
	}
	if c.WALMaxBacklog == 0 {
		c.WALMaxBacklog = 64 << 20
	}
	if c.WALAckTimeout == 0 {
		c.WALAckTimeout = 10 * time.Second
	}
	// LocalRetention 0 is meaningful (drop right after upload): no default here.
	if c.MaxHold == 0 {
		c.MaxHold = 25 * time.Second
	}
	return c
}

// Check is Validate of the configuration New would run with (defaults
// applied): a command checks its settings with it before opening anything.
func (c Config) Check() error { return c.withDefaults().Validate() }

// Validate names the setting at fault.
func (c Config) Validate() error {
	switch c.Flush {
	case "async", "sync":
	default:
		return fmt.Errorf("STRATAMQ_FLUSH=%q: want async or sync", c.Flush)
	}
	if c.SegmentSize < 1<<20 {
		return fmt.Errorf("STRATAMQ_SEGMENT_SIZE=%s: want at least 1MiB", c.SegmentSize)
	}
	switch c.TierLayout {
	case "queue", "log":
	default:
		return fmt.Errorf("STRATAMQ_TIER_LAYOUT=%q: want queue or log", c.TierLayout)
	}
	if c.MaxMessageSize < 1024 || c.MaxMessageSize > 15<<20 {
		return fmt.Errorf("STRATAMQ_MAX_MESSAGE_SIZE=%s: want 1KiB..15MiB", c.MaxMessageSize)
	}
	if c.MinFreeSpace < 0 {
		return fmt.Errorf("STRATAMQ_MIN_FREE_SPACE=%s: want >= 0 (0: 5%% of the volume, at most 256MiB)", c.MinFreeSpace)
	}
	if c.LocalRetention < 0 {
		return fmt.Errorf("STRATAMQ_LOCAL_RETENTION=%s: want >= 0", c.LocalRetention)
	}
	if c.CompactionInterval < 0 || c.CompactionMinMessages < 0 || c.CompactionTombstoneRetention < 0 || c.CompactionRate < 0 {
		return fmt.Errorf("STRATAMQ_COMPACTION_INTERVAL, _MIN_MESSAGES, _TOMBSTONE_RETENTION and _RATE must not be negative")
	}
	if c.CompactionCPU < 0 || c.CompactionCPU > 100 {
		return fmt.Errorf("STRATAMQ_COMPACTION_CPU=%d: want a percent of one core, 1-100", c.CompactionCPU)
	}
	if c.TierCommitDelay < 0 {
		return fmt.Errorf("STRATAMQ_TIER_COMMIT_DELAY=%s: want >= 0", c.TierCommitDelay)
	}
	if c.Retention < 0 || c.SegmentMaxAge < 0 {
		return fmt.Errorf("STRATAMQ_RETENTION and STRATAMQ_SEGMENT_MAX_AGE must not be negative")
	}
	if c.MaxTopics < 0 || c.MaxGroups < 0 || c.MaxQueuesPerTopic < 0 || c.MaxOpenQueueFiles < 0 {
		return fmt.Errorf("STRATAMQ_MAX_TOPICS, STRATAMQ_MAX_GROUPS, STRATAMQ_MAX_QUEUES_PER_TOPIC and STRATAMQ_MAX_OPEN_QUEUE_FILES must not be negative")
	}
	if c.LeaseTTL < 0 || (c.LeaseTTL > 0 && c.LeaseTTL < leaseTTLFloor) {
		return fmt.Errorf("STRATAMQ_LEASE_TTL=%s: want at least %s (the lease is renewed every fifth of it, and each renewal is a write to the bucket that must land within that fifth)", c.LeaseTTL, leaseTTLFloor)
	}
	if c.CheckpointInterval < 0 || c.CheckpointWait < 0 {
		return fmt.Errorf("STRATAMQ_CHECKPOINT_INTERVAL and STRATAMQ_CHECKPOINT_WAIT must not be negative")
	}
	if c.BrokerID < 0 {
		return fmt.Errorf("STRATAMQ_BROKER_ID=%d: want >= 0", c.BrokerID)
	}
	if err := checkDurability(c.Durability); err != nil {
		return fmt.Errorf("STRATAMQ_DURABILITY: %w", err)
	}
	if c.WALLinger < 0 || c.WALAckTimeout < 0 {
		return fmt.Errorf("STRATAMQ_WAL_LINGER and STRATAMQ_WAL_ACK_TIMEOUT must not be negative")
	}
	if c.WALBatch < 4<<10 || c.WALBatch > 64<<20 {
		return fmt.Errorf("STRATAMQ_WAL_BATCH=%s: want 4KiB..64MiB", c.WALBatch)
	}
	if c.WALMaxBacklog < c.WALBatch {
		return fmt.Errorf("STRATAMQ_WAL_MAX_BACKLOG=%s: want at least STRATAMQ_WAL_BATCH (%s)", c.WALMaxBacklog, c.WALBatch)
	}
	if c.TransactionTimeout < 0 || c.TransactionCheckInterval < 0 || c.TransactionCheckMax < 0 {
		return fmt.Errorf("STRATAMQ_TRANSACTION_TIMEOUT, STRATAMQ_TRANSACTION_CHECK_INTERVAL and STRATAMQ_TRANSACTION_CHECK_MAX must not be negative")
	}
	if strings.ContainsAny(c.BrokerName, "/ ") || c.BrokerName == "" {
		return fmt.Errorf("STRATAMQ_BROKER_NAME=%q: want a non-empty name without '/' or spaces", c.BrokerName)
	}
	if c.MaxReadMemory < 1<<20 {
		return fmt.Errorf("STRATAMQ_MAX_READ_MEMORY=%s: want at least 1MiB", c.MaxReadMemory)
	}
	if c.MaxConnections < 1 || c.MaxConnectionsPerIP < 1 {
		return fmt.Errorf("STRATAMQ_MAX_CONNECTIONS=%d, STRATAMQ_MAX_CONNECTIONS_PER_IP=%d: want at least 1 each",
			c.MaxConnections, c.MaxConnectionsPerIP)
	}
	if c.FrameTimeout < time.Second {
		return fmt.Errorf("STRATAMQ_FRAME_TIMEOUT=%s: want at least 1s", c.FrameTimeout)
	}
	switch c.Role {
	case RoleAsyncMaster, RoleSyncMaster:
		if c.HAListen != "" {
			if _, _, err := net.SplitHostPort(c.HAListen); err != nil {
				return fmt.Errorf("STRATAMQ_HA_LISTEN=%q: %v", c.HAListen, err)
			}
		}
	case RoleSlave:
		// Without STRATAMQ_HA_MASTER the name servers name the master, or,
		// with failover, the bucket lease's record does.
		if c.HAMaster != "" || (len(c.NameServers()) == 0 && !c.HAFailover) {
			if _, _, err := net.SplitHostPort(c.HAMaster); err != nil {
				return fmt.Errorf("STRATAMQ_HA_MASTER=%q: a slave needs its master's HA address (or STRATAMQ_NAMESRV, whose answer names it, or STRATAMQ_HA_FAILOVER, whose lease names it): %v", c.HAMaster, err)
			}
		}
		if c.BrokerID == 0 {
			return fmt.Errorf("STRATAMQ_ROLE=slave with STRATAMQ_BROKER_ID=0: a slave's broker id is 1 or more")
		}
	default:
		return fmt.Errorf("STRATAMQ_ROLE=%q: want async_master, sync_master or slave", c.Role)
	}
	if c.HASyncInterval < 0 {
		return fmt.Errorf("STRATAMQ_HA_SYNC_INTERVAL=%s: want > 0", c.HASyncInterval)
	}
	if c.HAMaxLag < 0 || c.HATimeout < 0 {
		return fmt.Errorf("STRATAMQ_HA_MAX_LAG and STRATAMQ_HA_ACK_TIMEOUT must not be negative")
	}
	if c.HAMaxConns < 0 {
		return fmt.Errorf("STRATAMQ_HA_MAX_CONNS=%d: want > 0", c.HAMaxConns)
	}
	if c.HAMinInSync < 1 || c.HAMinInSync > 2 {
		return fmt.Errorf("STRATAMQ_HA_MIN_INSYNC=%d: want 1 (a sync_master acknowledges alone while no slave is in sync) or 2 (it waits for a slave)", c.HAMinInSync)
	}
	if c.SlaveReadLag < 0 {
		return fmt.Errorf("STRATAMQ_SLAVE_READ_LAG=%s: want >= 0", c.SlaveReadLag)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("STRATAMQ_LISTEN=%q: %v", c.Listen, err)
	}
	if _, err := strconv.ParseBool(c.SQLFilter); err != nil && c.SQLFilter != "" {
		return fmt.Errorf("STRATAMQ_SQL_FILTER=%q: want true or false", c.SQLFilter)
	}
	if err := remoting.ValidateTopic(c.MsgTraceTopicName); err != nil {
		return fmt.Errorf("STRATAMQ_MSG_TRACE_TOPIC_NAME: %w", err)
	}
	if _, err := ParseDelayLevels(c.DelayLevels); err != nil {
		return err
	}
	if c.TimerMaxDelay < time.Second || c.TimerMaxDelay > 100*365*24*time.Hour {
		return fmt.Errorf("STRATAMQ_TIMER_MAX_DELAY=%s: want 1s..100 years", c.TimerMaxDelay)
	}
	return nil
}

// NameServers splits the ';'-separated list.
func (c Config) NameServers() []string {
	var out []string
	for _, s := range strings.Split(c.Namesrv, ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// AdvertiseFor returns the address to register: the configured one, the
// bound address when it names a host, else the first non-loopback IPv4 of
// this machine (127.0.0.1 when there is none).
func AdvertiseFor(configured string, bound net.Addr) string {
	if configured != "" {
		return configured
	}
	tcp, ok := bound.(*net.TCPAddr)
	if !ok {
		return bound.String()
	}
	if tcp.IP != nil && !tcp.IP.IsUnspecified() {
		return net.JoinHostPort(tcp.IP.String(), fmt.Sprint(tcp.Port))
	}
	ip := "127.0.0.1"
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				ip = n.IP.String()
				break
			}
		}
	}
	return net.JoinHostPort(ip, fmt.Sprint(tcp.Port))
}
