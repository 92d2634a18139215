package broker

import (
	"context"
	"time"

	"github.com/stratamq/stratamq/broker/pop"
)

// POP consumption (issue 16) is package pop: the engine owns the groups'
// progress and messages in flight, their expiry, dead-lettering and
// persistence (broker/pop/doc.go). The broker constructs it
// (wire_pop.go), runs its revive loop on a master (Run), saves it with the
// config files and in the checkpoint, and answers through it here; the
// gRPC endpoint reaches it through grpc_pop_backend.go.

// The engine's types and errors, under the names package broker has
// always exported them by.
type (
	// PopRequest is one receive.
	PopRequest = pop.Request
	// PopMessage is one delivered message.
	PopMessage = pop.Message
)

// Errors of the POP engine (match with errors.Is).
var (
	ErrPopHandle        = pop.ErrHandle
	ErrPopHandleExpired = pop.ErrHandleExpired
	ErrPopInflightLimit = pop.ErrInflightLimit
	ErrPopNotMaster     = pop.ErrNotMaster
	ErrPopTopic         = pop.ErrTopic
	ErrPopGroup         = pop.ErrGroup
	ErrPopFilter        = pop.ErrFilter
	ErrPopInvisible     = pop.ErrInvisible
)

// Defaults and bounds.
const (
	DefaultPopMaxInflight          = pop.DefaultMaxInflight
	DefaultPopMaxInflightPerGroup  = pop.DefaultMaxInflightPerGroup
	DefaultPopMaxInflightPerClient = pop.DefaultMaxInflightPerClient
	// PopMaxInvisible caps an invisible duration (RocketMQ's 12 h).
	PopMaxInvisible = pop.MaxInvisible
)

// PopReceive delivers up to req.MaxMessages messages of req.Topic to
// req.Group and makes them invisible for req.Invisible. With req.Wait it
// waits that long for one (or ctx).
func (b *Broker) PopReceive(ctx context.Context, req PopRequest) ([]PopMessage, error) {
	return b.pop.Receive(ctx, req)
}

// PopAck acknowledges the message handle names: it is done for group.
// topic, when not empty, must be the handle's.
func (b *Broker) PopAck(group, topic, handle string) error {
	return b.pop.Ack(group, topic, handle)
}

// PopChangeInvisible makes the message handle names invisible for d from
// now and returns its new handle; the old one is no longer valid.
func (b *Broker) PopChangeInvisible(group, topic, handle string, d time.Duration) (string, time.Time, error) {
	return b.pop.ChangeInvisible(group, topic, handle, d)
}

// PopForwardToDLQ dead-letters the message handle names at once (a
// consumer gave up on it) and takes it out of flight.
func (b *Broker) PopForwardToDLQ(ctx context.Context, group, topic, handle string) error {
	return b.pop.ForwardToDLQ(ctx, group, topic, handle)
}

// PopInflight reports how many messages group has in flight (all groups
// when group is empty).
func (b *Broker) PopInflight(group string) int {
	return b.pop.Inflight(group)
}
