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
// offsets (transaction) and the timer record's topic, queue offset and
// UNIQ_KEY (recall), see convert_ids.go.
//
// # Sessions
//
// A client is known by its x-mq-client-id header. Its Telemetry stream is
// owned by one goroutine (the RPC's) which alone writes to the stream; the
// check service hands it commands through a bounded channel. A client's
// settings answer sets publishing.max_body_size to the broker's limit and
// echoes the backoff policy, as the clients wait for it before starting.
package proxy
