package broker

import (
	"context"
	"errors"
)

// errRoleChangeUnbuilt is returned by Promote and Demote until failover
// lands (issue 10 item 4).
var errRoleChangeUnbuilt = errors.New("broker: role changes are not built yet")

// Promote asks a slave to take the bucket lease and become the master of
// its brokerName now, without waiting for the master's lease to lapse
// (admin promote). It returns once the change is under way.
func (b *Broker) Promote(ctx context.Context) error { return errRoleChangeUnbuilt }

// Demote asks a master to release the bucket lease and rejoin as a slave
// of whichever broker takes it (admin demote). It returns once the change
// is under way.
func (b *Broker) Demote(ctx context.Context) error { return errRoleChangeUnbuilt }
