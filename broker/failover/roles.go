package failover

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
)

// The roles a broker generation plays (STRATAMQ_ROLE).
const (
	RoleAsyncMaster = "async_master"
	RoleSyncMaster  = "sync_master"
	RoleSlave       = "slave"
)

// Config is what Roles needs of the broker's configuration; it never
// changes within a generation.
type Config struct {
	BrokerName string
	Role       string // this generation's role
	// NodeRole is the configured role of the node (SetNodeRole may set it
	// before Run): the master role a promoted slave takes if it is one.
	NodeRole   string
	HAFailover bool   // STRATAMQ_HA_FAILOVER
	HAMaster   string // STRATAMQ_HA_MASTER
	// LeaseTTL is the configured TTL (0: offsets.LeaseTTL of
	// CheckpointInterval).
	LeaseTTL           time.Duration
	CheckpointInterval time.Duration
	HATimeout          time.Duration // STRATAMQ_HA_ACK_TIMEOUT
	HAUncleanAfter     time.Duration // STRATAMQ_HA_UNCLEAN_TAKEOVER_AFTER
	HAMinInSync        int           // STRATAMQ_HA_MIN_INSYNC
	SyncFlush          bool          // STRATAMQ_FLUSH=sync
	BootID             string        // the machine boot this generation runs in
	Advertise          string        // the broker's advertised remoting address
	DataDir            string
	WriterState        string // the data dir's writer identity file (offsets.WriterStateFile)
	// Started is when the generation was made; NoTakeover, when set, is
	// the time before which a demoted master's slave takes no lease.
	Started    time.Time
	NoTakeover time.Time
	// MasterCut, when not negative, is where the master said this
	// (slave) generation's log diverged; RestartAt, when positive, is the
	// master's log start past this slave's end; Afresh: the last
	// generation's log could not follow the master's (see RoleChange).
	MasterCut int64
	RestartAt int64
	Afresh    bool
}

// Log is the open local commitlog as the lease watch reads it.
type Log interface {
	MaxPhysOffset() int64
}

// DataDir is the data dir's local log before the store opens: what a
// slave's rejoin checks and cuts.
type DataDir interface {
	// Fresh reports whether the local store holds nothing.
	Fresh() bool
	// LogRange is where the local commitlog's segment files start and
	// end (ok false: there are none).
	LogRange() (min, end int64, ok bool, err error)
	// SetAside renames the local store away (kept for operators) so that
	// it starts again empty; why is logged.
	SetAside(why string) error
	// CutLog cuts the local log at at, keeping the cut bytes in keep
	// (store.CutLog); it returns how many bytes it cut.
	CutLog(at int64, keep string) (int64, error)
}

// Checkpoints is the bucket checkpoint as a slave reads it.
type Checkpoints interface {
	// ReadReplica reads the master's last checkpoint (nil when none or
	// unreadable).
	ReadReplica() *offsets.Checkpoint
	// CommitLog is cp's commitlog section (false when none or unreadable).
	CommitLog(cp *offsets.Checkpoint) (durability.CommitLog, bool)
}

// Host is what Roles reads of the running broker.
type Host interface {
	// HAAddr is the HA address other brokers dial ("" without an HA
	// listener).
	HAAddr() string
	// CaughtUp reports whether this slave generation's log has reached
	// its master's end at least once (its HA stream caught up).
	CaughtUp() bool
}

// Deps are Roles' collaborators.
type Deps struct {
	FS     vfs.FS
	Logger *slog.Logger
	Mono   offsets.MonoClock // nil: the process's
	// Bucket is the lease's and checkpoints' object store under the
	// broker's prefix; nil without a bucket.
	Bucket      offsets.ObjectStore
	DataDir     DataDir
	Checkpoints Checkpoints
	Host        Host
}

// RoleChange is what a generation's Run returns when the broker must
// continue in another role on the same data dir: the node starts the
// next generation with it.
type RoleChange struct {
	Role   string // RoleAsyncMaster, RoleSyncMaster or RoleSlave
	Reason string
	Lease  *offsets.Lease // a promotion hands over the lease it took
	// HoldOff: the next generation (a demoted master's) does not try to
	// take the lease for this long, so its slave does.
	HoldOff time.Duration
	// Diverged: the master refused this slave's log (StatusDiverged)
	// and said where it diverged (MasterCut): the next generation cuts it
	// there.
	Diverged  bool
	MasterCut int64
	// RestartAt: the master's log starts past this slave's end (a hello
	// refused with StatusBeforeLogStart): the next generation sets its
	// log aside and starts it again there.
	RestartAt int64
	// Afresh: this slave's log cannot follow the master's (the master
	// numbers a queue below the range this log's own restore gave it):
	// the next generation sets the data dir aside and restores afresh
	// from the bucket and the master's stream.
	Afresh bool
}

func (r *RoleChange) Error() string {
	return fmt.Sprintf("broker: continuing as %s: %s", r.Role, r.Reason)
}

// Roles is one broker generation's part in failover (see the package
// comment): its identity, the lease holder it follows and the epoch its
// log agrees with, its requests to change role, and the lease watch.
type Roles struct {
	cfg  Config
	deps Deps
	log  Log

	// ident is this data dir's identity (its persistent instance id);
	// following is the lease holder a slave follows, with the epoch its
	// log agrees with. Both are set by PrepareReplica, before Run.
	ident     offsets.Identity
	following offsets.Identity
	// haMaster is a slave's master HA address (PrepareReplica).
	haMaster string
	// agreed is the epoch a slave's log is known to agree with (its
	// hello's epoch, its candidacy's): below following's epoch until the
	// master accepted the hello or the bucket listed the epoch's start.
	agreed atomic.Int64
	// replicaPublished is the newest epoch this slave published its
	// replica record for (offsets.PublishReplica), this generation.
	replicaPublished atomic.Int64
	changes          chan *RoleChange
	noTakeover       time.Time // a demoted master's slave takes no lease before it (Run's)
	// missingLogged: when Run last logged a wait for silent slaves.
	missingLogged time.Time
	demoting      atomic.Bool
	// mayLack: this slave generation's log may end before what the data
	// dir acknowledged as a replica (or wrote as a master): it restarted
	// after a power loss or a reboot with flush=async (LogSurvivedWhole),
	// so its page-cache tail is gone. Run's contest then waits, as for a
	// copy below the checkpointed end, for a better copy before taking
	// the lease (PrepareReplica sets it).
	mayLack atomic.Bool
}

// New returns the Roles of a generation; nothing runs until Run.
func New(cfg Config, deps Deps) *Roles {
	return &Roles{cfg: cfg, deps: deps, changes: make(chan *RoleChange, 1), noTakeover: cfg.NoTakeover}
}

// SetNodeRole sets Config.NodeRole (before Run).
func (r *Roles) SetNodeRole(role string) { r.cfg.NodeRole = role }

// SetLog gives Roles the open local commitlog (before Run).
func (r *Roles) SetLog(l Log) { r.log = l }

// RequestRoleChange asks the generation to stop and continue as rc (the
// first request wins).
func (r *Roles) RequestRoleChange(rc *RoleChange) {
	select {
	case r.changes <- rc:
	default:
	}
}

// Changes delivers the first RequestRoleChange.
func (r *Roles) Changes() <-chan *RoleChange { return r.changes }

// Ident is this data dir's identity (a slave's, set by PrepareReplica).
func (r *Roles) Ident() offsets.Identity { return r.ident }

// Following is the lease holder a slave follows, with the epoch of the
// bucket (PrepareReplica).
func (r *Roles) Following() offsets.Identity { return r.following }

// Agreed is the epoch a slave's log is known to agree with.
func (r *Roles) Agreed() int64 { return r.agreed.Load() }

// HAMaster is a slave's master HA address as PrepareReplica chose it
// ("" without a bucket, or when none is known yet).
func (r *Roles) HAMaster() string { return r.haMaster }

// LeaseTTL is the configured TTL, or the default for the checkpoint
// interval.
func (r *Roles) LeaseTTL() time.Duration {
	if r.cfg.LeaseTTL > 0 {
		return r.cfg.LeaseTTL
	}
	return offsets.LeaseTTL(r.cfg.CheckpointInterval)
}
