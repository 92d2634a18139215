package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Backend is what the producer RPCs need of the broker. broker.Broker
// implements it (broker/grpc_backend.go) on the same code paths as its
// remoting handlers. Methods return *Error for refusals (the remoting
// response code and remark RocketMQ would give), any other error is an
// internal one.
type Backend interface {
	// BrokerName is this broker's name (the route's Broker.name).
	BrokerName() string
	// AdvertisedAddr is the host:port the broker registers for remoting
	// clients; QueryRoute answers its host with the gRPC port.
	AdvertisedAddr() string
	// MaxMessageSize is the largest accepted message body, bytes.
	MaxMessageSize() int
	// ACL is the broker's ACL; nil when none is configured.
	ACL() *acl.ACL
	// Route is a topic's queues. With create (the caller has PUB on the
	// topic, as a first send over remoting needs) and the broker's
	// auto-create policy an unknown topic is created, as a first send
	// would; an unknown topic that is not created is an *Error with
	// remoting.TopicNotExist.
	Route(ctx context.Context, topic string, create bool) (Route, error)
	// Send stores msgs (each as one SEND_MESSAGE would) and returns one
	// result per message, in order.
	Send(ctx context.Context, msgs []Message) []SendResult
	// EndTransaction commits or rolls back a half message. allow is asked
	// about the half's real topic before anything is stored (ACL).
	EndTransaction(ctx context.Context, end EndTransaction, allow func(topic string) error) error
	// Recall cancels a delayed or timer message not yet delivered.
	Recall(ctx context.Context, r Recall) error
}

// Route is a topic's queues on this broker.
type Route struct {
	Topic       string
	ReadQueues  int32
	WriteQueues int32
	Perm        int32 // RocketMQ's bits: 2 read, 4 write
	// MessageType is the topic's message.type attribute ("" without one):
	// what its sends may be and its queues say they accept.
	MessageType remoting.TopicMessageType
}

// Message is one message to store, in RocketMQ's model.
type Message struct {
	Topic         string
	QueueID       int32 // < 0: the broker picks one
	Flag          int32
	SysFlag       int32
	BornTimestamp int64 // unix ms
	BornHost      netip.AddrPort
	Body          []byte
	Properties    string // encoded name\x01value\x02...
}

// SendResult is where one message was stored, or why not (Err).
type SendResult struct {
	Err         error
	MsgID       string // the message's UNIQ_KEY (the broker makes one when the client sent none)
	Topic       string // where the record went (the half or timer topic for those)
	QueueID     int32
	QueueOffset int64
	PhysOffset  int64
	// DeliverMs is the timer's due time when the message went to the timer
	// wheel (0 otherwise).
	DeliverMs int64
}

// EndTransaction ends the half message stored at PhysOffset (commitlog)
// and HalfOffset (its half queue offset).
type EndTransaction struct {
	ProducerGroup string
	PhysOffset    int64
	HalfOffset    int64
	MsgID         string // UNIQ_KEY, for logs
	Commit        bool
	FromCheck     bool
}

// Recall names a scheduled message: the record stored in Topic (the timer
// or schedule topic) at QueueID/QueueOffset, with UNIQ_KEY MsgID, for
// RealTopic.
type Recall struct {
	RealTopic   string
	Topic       string
	QueueID     int32
	QueueOffset int64
	PhysOffset  int64
	MsgID       string
}

// Error is a refusal in RocketMQ's terms: the remoting response code and
// remark the same request would get over remoting.
type Error struct {
	Code   remoting.ResponseCode
	Remark string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Remark) }

// Errorf builds an *Error.
func Errorf(code remoting.ResponseCode, format string, args ...any) error {
	return &Error{Code: code, Remark: fmt.Sprintf(format, args...)}
}

// ErrRecallUnsupported is Recall's answer when the message cannot be
// recalled by this broker (its scheduler has no cancellation).
var ErrRecallUnsupported = errors.New("proxy: recall is not supported by this broker")

// v2Code maps a remoting response code to the v2 status code the 5.x
// clients act on (their StatusChecker turns 4xxxx into client errors,
// 429xx into throttling, 5xxxx into server errors).
func v2Code(c remoting.ResponseCode) apiv2.Code {
	switch c {
	case remoting.Success:
		return apiv2.Code_OK
	case remoting.MessageIllegal:
		return apiv2.Code_BAD_REQUEST
	case remoting.NoPermission:
		return apiv2.Code_FORBIDDEN
	case remoting.TopicNotExist:
		return apiv2.Code_TOPIC_NOT_FOUND
	case remoting.SubscriptionNotExist:
		return apiv2.Code_CONSUMER_GROUP_NOT_FOUND
	case remoting.SystemBusy:
		return apiv2.Code_TOO_MANY_REQUESTS
	case remoting.FlushDiskTimeout:
		return apiv2.Code_MASTER_PERSISTENCE_TIMEOUT
	case remoting.FlushSlaveTimeout:
		return apiv2.Code_SLAVE_PERSISTENCE_TIMEOUT
	case remoting.SlaveNotAvailable:
		return apiv2.Code_HA_NOT_AVAILABLE
	case remoting.ServiceNotAvailable:
		return apiv2.Code_INTERNAL_SERVER_ERROR
	case remoting.RequestCodeNotSupported:
		return apiv2.Code_UNSUPPORTED
	case remoting.QueryNotFound:
		return apiv2.Code_MESSAGE_NOT_FOUND
	}
	return apiv2.Code_INTERNAL_SERVER_ERROR
}

// statusOf is the v2 status of err (nil: OK).
func statusOf(err error) *apiv2.Status {
	if err == nil {
		return okStatus()
	}
	var pe *Error
	if errors.As(err, &pe) {
		return &apiv2.Status{Code: v2Code(pe.Code), Message: pe.Remark}
	}
	var se *statusError
	if errors.As(err, &se) {
		return &apiv2.Status{Code: se.code, Message: se.msg}
	}
	if errors.Is(err, ErrRecallUnsupported) {
		return &apiv2.Status{Code: apiv2.Code_UNSUPPORTED, Message: err.Error()}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &apiv2.Status{Code: apiv2.Code_PROXY_TIMEOUT, Message: err.Error()}
	}
	return &apiv2.Status{Code: apiv2.Code_INTERNAL_ERROR, Message: err.Error()}
}

// statusError is a refusal decided by the proxy itself, with its v2 code.
type statusError struct {
	code apiv2.Code
	msg  string
}

func (e *statusError) Error() string { return e.code.String() + ": " + e.msg }

func bad(code apiv2.Code, format string, args ...any) error {
	return &statusError{code: code, msg: fmt.Sprintf(format, args...)}
}

func okStatus() *apiv2.Status { return &apiv2.Status{Code: apiv2.Code_OK, Message: "OK"} }

// OrphanedTransaction is a transaction check for a gRPC producer: the
// half message the check service put back (its new copy: Record, at
// PhysOffset and HalfOffset of the half queue), for its real topic and
// queue.
type OrphanedTransaction struct {
	ProducerGroup string
	Topic         string
	QueueID       int32
	Record        store.Record
	PhysOffset    int64
	HalfOffset    int64
}
