// Package proxy serves RocketMQ 5's gRPC protocol (the Proxy's
// apache.rocketmq.v2.MessagingService) inside the broker process, as
// RocketMQ's Proxy does in "local" mode, so the official 5.x clients (Java,
// Go v5, Node.js, Python, C#, C++, Rust) talk to StrataMQ directly.
//
// # What it owns
//
//   - proxy/apiv2: our own .proto definitions of the v2 API (same package,
//     service, message and field numbers as the public one, written for
//     StrataMQ) and the Go code protoc generates from them (go generate
//     ./proxy/apiv2; committed). drift_test.go checks them against the
//     .proto files the Node.js client ships.
//   - Server: a grpc.Server on STRATAMQ_GRPC_LISTEN (default :8081, empty
//     disables), with bounded streams, message sizes and keepalive, TLS from
//     the broker's TLS settings, and the ACL's accounts applied to the
//     5.x clients' authorization header.
//   - service: the MessagingService implementation. The producer side is in
//     rpc_route.go (QueryRoute, Heartbeat, NotifyClientTermination),
//     rpc_send.go (SendMessage, RecallMessage), rpc_transaction.go
//     (EndTransaction) and rpc_telemetry.go (Telemetry). Consumer RPCs are
//     methods on the same *service type in files of their own
//     (rpc_receive.go, ...); whatever a method does not implement answers
//     gRPC Unimplemented through the embedded generated stub.
//   - convert*.go: the mapping between a v2 Message and RocketMQ's message
//     model (properties string, sysFlag, born host/time, ids), both ways.
//
// It never touches the store: everything goes through Backend, which the
// broker implements (broker/grpc_backend.go) with the same code paths as
// its remoting handlers (topic checks and auto-create, half messages,
// delay and timer routing, flush and HA acknowledgement). Consumer RPCs
// needing more of the broker declare their own interface next to their
// RPCs and assert the backend to it; the broker implements both.
//
// It imports apiv2, acl, remoting (codes, TLS listener) and store (ids);
// broker imports proxy for Backend's types; cmd/stratamq wires both. It
// must never import broker.
//
// # The mapping (v2 ↔ RocketMQ properties)
//
//	system_properties.tag             TAGS
//	system_properties.keys            KEYS (joined by one space)
//	system_properties.message_id      UNIQ_KEY (the client's id; the id remoting consumers see)
//	system_properties.message_group   __SHARDINGKEY (FIFO: queue chosen by the client, else by its hash)
//	system_properties.delivery_timestamp TIMER_DELIVER_MS (unix ms; the broker's timer wheel)
//	system_properties.trace_context   TRACE_CONTEXT
//	system_properties.born_host       __BORNHOST (the client's host name; BORNHOST is the peer address)
//	system_properties.born_timestamp  the record's BORNTIMESTAMP
//	orphaned_transaction_recovery_duration CHECK_IMMUNITY_TIME_IN_SECONDS
//	message_type TRANSACTION          TRAN_MSG=true, PGROUP=<topic>, sysFlag prepared
//	user_properties                   as they are (system names refused)
//
// A transactional send's transaction_id and a timer send's recall_handle
// are opaque to clients; ours encode the half's commitlog and queue
// offsets (transaction) and the timer record's place and UNIQ_KEY
// (recall), see convert_ids.go.
//
// # Sessions and Telemetry
//
// A client is known by its x-mq-client-id header, and its session belongs
// to the caller that opened its Telemetry stream (session.go): the
// account its authorization header names (none without an ACL) and its
// connection. Another account's stream under that client id is refused
// (FORBIDDEN) and ends; so are its heartbeats under it; only the same
// account on the same connection may NotifyClientTermination it; a send's
// transaction topics and a receive's auto_renew count only for a session
// of the caller's account. A stream is authorized once, when it opens:
// the settings the clients send again on it every few minutes are checked
// against the ACL's permissions but not against the signed date's skew
// (the date is the stream's opening's, fixed for its life). Its Telemetry stream is
// owned by one goroutine (the RPC's), which alone writes to the stream; a
// reader goroutine only hands received commands over, and the broker's
// check service and Server.ThreadStack/VerifyMessage hand it commands
// through a bounded queue (64; full: the command is dropped and asked
// again later). Answers are matched by nonce (telemetry_ask.go). A
// client's settings answer echoes its own, with publishing.max_body_size
// the broker's limit and a backoff policy, as the clients wait for it
// before they start. A transaction check (broker/transaction_check.go) goes
// to a remoting producer of the half's group first, else to a gRPC
// producer whose settings (or transactional sends) name the topic.
//
// A receive with auto_renew (a PushConsumer's) has its receipt handles
// renewed by the server while the client's session lives (renew.go): one
// goroutine extends each before its deadline and maps the client's
// original handle to the current one for Ack, ChangeInvisibleDuration and
// ForwardMessageToDeadLetterQueue; a session's end drops its handles.
//
// # Bounds
//
// What a client can make the endpoint hold is bounded, authenticated or
// not (docs/security.md has the table):
//
//   - connections (limit.go): MaxConns in all and MaxConnsPerIP from one
//     IP (the remoting port's settings, counted apart); one more is closed
//     at accept and counted (OnRefuse). A connection must finish its
//     handshake within HandshakeTimeout, and one with no RPC for
//     IdleTimeout is sent GOAWAY.
//   - HTTP/2: MaxHeaderListSize (16 KiB) per request, MaxConcurrentStreams
//     (1024) per connection, keepalive pings no more often than every 10 s
//     (GOAWAY ENHANCE_YOUR_CALM).
//   - sends: MaxRecvMsgSize per request (the broker's message size + 1
//     MiB; RESOURCE_EXHAUSTED naming it), at most 1024 messages; gzip
//     bodies inflate to at most the message size each (the gzip size
//     field is checked first) and to MaxRecvMsgSize per request in all
//     (PAYLOAD_TOO_LARGE), so a compressed request stores and holds no
//     more than an uncompressed one could.
//   - receives: stored zlib bodies are inflated within ReceiveMemory, all
//     receives together (a byteBudget; a body counts twice until sent,
//     once until the next send returns), and a response a client does not
//     take within SendTimeout closes its connection (the transport keeps
//     what it queued for a stream until the client reads it or the
//     connection ends).
//
// Malformed protobuf is INTERNAL from grpc-go's decoder, that call only.
// hostile_test.go runs these attacks (-hostile.long at scale).
//
// # Sends
//
// SendMessage converts each message (toStore: refusals carry the v2 code
// the clients map to exceptions), checks PUB on the topic and each
// message's type against the topic's message.type (msgtype.go: the whole
// request is refused MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, as by the
// Proxy; the settings answer tells the clients not to check it
// themselves), and hands the batch to Backend.Send, which runs SEND_MESSAGE's checks per message and
// stores the batch with the other gRPC sends of the moment in one
// store.Put (broker/grpc_put.go). A recall stores a marker record, keyed
// by the message's topic and id, the scheduler reads before it moves a
// timer record on (broker/grpc_recall.go); RecallMessage needs PUB on
// that topic.
//
// # Creation
//
// QueryRoute creates an unknown topic (with the broker's auto-create
// policy) only for a caller with PUB on it, as a first send over remoting;
// QueryAssignment creates none. A consumer's settings need SUB on its
// group (created then, within STRATAMQ_MAX_GROUPS) even without a
// subscription.
package proxy
