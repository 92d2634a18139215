package failover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stratamq/stratamq/ha"
)

// ErrHandingOver: a demoting master refuses sends while its slave catches
// up and takes the lease (answered SERVICE_NOT_AVAILABLE: clients retry).
var ErrHandingOver = errors.New("broker: this master is handing over to its slave (admin demote); retry")

// Peer reaches a slave's master over the remoting protocol (admin
// promote).
type Peer interface {
	// MasterAddr is the master's remoting address ("" when not known yet).
	MasterAddr() string
	// AskDemote sends the master a demote request: agreed, or the remark
	// it refused with, or why it could not be asked.
	AskDemote(ctx context.Context, addr string) (agreed bool, remark string, err error)
}

// Demoting reports whether an admin demote is under way: the broker
// refuses sends meanwhile (ErrHandingOver).
func (r *Roles) Demoting() bool { return r.demoting.Load() }

// Promote asks a slave to become the master of its brokerName now (admin
// promote): it asks its master to demote itself, and takes the lease the
// master then releases. It needs STRATAMQ_HA_FAILOVER and a reachable
// master; a master that is gone is replaced without it, once its lease
// lapses. It returns once the master agreed.
func (r *Roles) Promote(ctx context.Context, peer Peer) error {
	if r.cfg.Role != RoleSlave {
		return fmt.Errorf("broker: this broker is already %s", r.cfg.Role)
	}
	if !r.cfg.HAFailover || r.deps.Bucket == nil {
		return errors.New("broker: promote needs STRATAMQ_HA_FAILOVER and a bucket (the lease decides who is master)")
	}
	addr := peer.MasterAddr()
	if addr == "" {
		return errors.New("broker: the master's address is not known yet; if it is gone, this slave takes over once its lease lapses")
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.HATimeout+10*time.Second)
	defer cancel()
	agreed, remark, err := peer.AskDemote(ctx, addr)
	if err != nil {
		return fmt.Errorf("broker: ask the master at %s to demote: %w (if it is gone, this slave takes over once its lease lapses)", addr, err)
	}
	if !agreed {
		return fmt.Errorf("broker: the master at %s refused to demote: %s", addr, remark)
	}
	r.deps.Logger.Warn("admin promote: the master agreed to hand over; taking the lease it releases", "master", addr)
	return nil
}

// Demote asks a master to hand over to its slave (admin demote): it
// refuses new sends, waits (up to STRATAMQ_HA_ACK_TIMEOUT) until a slave
// of m (the running HA master, nil without one) holds its whole log, then
// asks to continue as a slave (RoleChange with a hold-off of two TTLs):
// the generation stops as master — the drain, the final checkpoint and
// the lease release of a graceful stop — and follows whichever broker
// takes the lease. It needs STRATAMQ_HA_FAILOVER, a bucket and a
// connected slave.
func (r *Roles) Demote(ctx context.Context, m *ha.Master) error {
	if r.cfg.Role == RoleSlave {
		return errors.New("broker: this broker is a slave already")
	}
	if !r.cfg.HAFailover || r.deps.Bucket == nil {
		return errors.New("broker: demote needs STRATAMQ_HA_FAILOVER and a bucket (the lease decides who is master)")
	}
	if m == nil || len(m.Slaves()) == 0 {
		return errors.New("broker: no slave is connected to hand over to")
	}
	if !r.demoting.CompareAndSwap(false, true) {
		return errors.New("broker: a demote is already under way")
	}
	end := r.log.MaxPhysOffset()
	wctx, cancel := context.WithTimeout(ctx, r.cfg.HATimeout)
	defer cancel()
	if err := m.WaitAcked(wctx, end); err != nil {
		r.demoting.Store(false)
		return fmt.Errorf("broker: no slave caught up with the log end %d: %w", end, err)
	}
	r.deps.Logger.Warn("admin demote: a slave holds the whole log; handing the lease over", "end", end)
	r.RequestRoleChange(&RoleChange{Role: RoleSlave, Reason: "admin demote", HoldOff: 2 * r.LeaseTTL()})
	return nil
}
