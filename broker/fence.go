package broker

import (
	"context"
	"errors"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
)

// fence is the uploader's gate (upload.Config.Fence): the epoch to stamp
// into bucket writes, or why none may be written now.
func (b *Broker) fence() (int64, error) {
	if b.dur == nil {
		return 0, nil
	}
	return b.dur.Writable()
}

// writeGate says whether a send to topic/queueID may be stored and
// acknowledged now: never while the lease may have lapsed or after
// another broker took the prefix, and only to a queue the last durable
// checkpoint lists (it writes one for a new topic or queue first).
func (b *Broker) writeGate(ctx context.Context, topic string, queueID int32) error {
	if b.cfg.Role == RoleSlave {
		return errSlaveWrite
	}
	if b.dur == nil {
		if b.bucketTopic(topic) {
			return errNoWAL
		}
		return nil
	}
	if b.fo.Demoting() {
		return errHandingOver
	}
	if _, err := b.dur.Writable(); err != nil {
		return err
	}
	if b.bucketTopic(topic) {
		if err := b.walGate(ctx); err != nil {
			return err
		}
	}
	return b.dur.AwaitCovered(ctx, topic, queueID)
}

// errSlaveWrite: a slave stores only what its master streams to it.
var errSlaveWrite = errors.New("broker: this broker is a slave (STRATAMQ_ROLE=slave) and refuses writes; send to its master")

// ackGate is checked right before a success response goes out: with
// flush=sync the fdatasync may have taken a while since writeGate.
func (b *Broker) ackGate() error {
	if b.dur == nil {
		return nil
	}
	_, err := b.dur.Writable()
	return err
}

// isGateErr reports whether err is one of the gates' refusals (answered
// SERVICE_NOT_AVAILABLE: the client retries, elsewhere or later).
func isGateErr(err error) bool {
	return errors.Is(err, offsets.ErrFenced) || errors.Is(err, offsets.ErrLeaseExpired) || errors.Is(err, errHandingOver) ||
		errors.Is(err, errNotCheckpointed) || errors.Is(err, store.ErrReserved)
}
