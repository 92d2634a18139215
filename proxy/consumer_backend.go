package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/stratamq/stratamq/store"
)

// ConsumerBackend is what the consumer RPCs (rpc_receive.go,
// rpc_offset.go) need of the broker besides Backend: its POP engine and
// its consumer offsets. broker.Broker implements it
// (broker/grpc_pop_backend.go); the RPCs assert Config.Backend()'s value
// to it and answer UNSUPPORTED when it does not.
type ConsumerBackend interface {
	// Receive delivers messages to a group and makes them invisible (POP).
	Receive(ctx context.Context, r ReceiveRequest) ([]Received, error)
	// Ack acknowledges the message a receipt handle names.
	Ack(group, topic, handle string) error
	// ChangeInvisible makes it invisible for d from now; the new handle
	// replaces the old one.
	ChangeInvisible(group, topic, handle string, d time.Duration) (string, error)
	// ForwardToDLQ dead-letters it at once.
	ForwardToDLQ(ctx context.Context, group, topic, handle string) error
	// ConsumerGroup is a group's consumption settings (created with the
	// broker's defaults when unknown, as a first pull would).
	ConsumerGroup(group string) (GroupSettings, error)
	// Offsets of a queue: the group's committed offset (ok false: none),
	// and the queue's min and max.
	CommittedOffset(group, topic string, queueID int32) (int64, bool)
	QueueRange(topic string, queueID int32) (min, max int64)
	// OffsetAt is the first offset of a queue stored at or after ts.
	OffsetAt(ctx context.Context, topic string, queueID int32, ts time.Time) (int64, error)
	// CommitOffset sets the group's committed offset.
	CommitOffset(group, topic string, queueID int32, offset int64) error
}

// ReceiveRequest is one POP receive (broker.PopRequest).
type ReceiveRequest struct {
	Group, Topic                 string
	QueueID                      int32 // < 0: any queue
	FilterType, FilterExpression string
	MaxMessages                  int
	Invisible                    time.Duration
	FIFO                         bool
	MaxAttempts                  int32
	Wait                         time.Duration
	// Client names the receiving client for the per-client in-flight
	// bound: its account, client id and address.
	Client string
}

// Received is one delivered message.
type Received struct {
	Record         store.Record
	Handle         string
	Attempt        int32
	InvisibleUntil time.Time
}

// GroupSettings are a consumer group's settings the clients are told.
type GroupSettings struct {
	FIFO bool
	// MaxDeliveryAttempts: deliveries before a message is dead-lettered
	// (RocketMQ: retryMaxTimes + 1).
	MaxDeliveryAttempts int32
}

// Errors a ConsumerBackend wraps (errors.Is) so the RPCs answer the v2
// code the clients act on.
var (
	ErrInvalidReceiptHandle = errors.New("proxy: invalid receipt handle")      // INVALID_RECEIPT_HANDLE
	ErrReceiptHandleExpired = errors.New("proxy: receipt handle expired")      // INVALID_RECEIPT_HANDLE
	ErrTooManyInflight      = errors.New("proxy: too many messages in flight") // TOO_MANY_REQUESTS
	ErrTopicNotReadable     = errors.New("proxy: topic not readable")          // TOPIC_NOT_FOUND
	ErrGroupNotAllowed      = errors.New("proxy: consumer group refused")      // FORBIDDEN / ILLEGAL_CONSUMER_GROUP
	ErrBadFilter            = errors.New("proxy: bad filter expression")       // ILLEGAL_FILTER_EXPRESSION
	ErrBadInvisible         = errors.New("proxy: bad invisible duration")      // ILLEGAL_INVISIBLE_TIME
	ErrNotMaster            = errors.New("proxy: not the master")              // INTERNAL_SERVER_ERROR (retry)
)
