// Package namesrv is StrataMQ's name server: RocketMQ's RouteInfoManager
// behind the remoting protocol, so Java and Go clients, and Apache RocketMQ
// brokers, can use it unchanged.
//
// It owns the in-memory routing tables: cluster → broker names, broker
// name → {broker id → address}, topic → broker name → queue data, and the
// liveness of each registered broker address. Nothing is persisted: brokers
// re-register every 30 s, so a restarted name server is whole again within
// one period. KV config (codes 100/101/102/219) is kept in memory too.
//
// It imports remoting, acl and the standard library only; it never
// imports broker.
//
// # Protocol surface
//
// One file per request code, named by number:
//
//	rc100_put_kv_config.go            rc105_get_routeinfo_by_topic.go
//	rc101_get_kv_config.go            rc106_get_broker_cluster_info.go
//	rc102_delete_kv_config.go         rc206_get_all_topic_list.go
//	rc103_register_broker.go          rc216_delete_topic_in_namesrv.go
//	rc104_unregister_broker.go        rc219_get_kvlist_by_namespace.go
//	rc224_get_topics_by_cluster.go    rc322_query_data_version.go
//
// Any other code is answered REQUEST_CODE_NOT_SUPPORTED.
//
// Names: DELETE_TOPIC_IN_NAMESRV refuses a topic that fails
// remoting.ValidateTopic (RocketMQ's charset, 127 bytes) with SYSTEM_ERROR;
// REGISTER_BROKER skips such topics of a broker's table (logged, no route);
// PUT_KV_CONFIG refuses a blank or over-long (255 bytes) namespace or key.
//
// # Route semantics (docs/rocketmq-protocol.md §5.2)
//
//   - REGISTER_BROKER adds the address under its broker id (an address
//     re-registering under another id replaces its old entry), and, for
//     a master (id 0), rewrites the broker's queue data from the topic
//     table when the data version changed or on first registration.
//   - A broker not re-registered within its heartbeat timeout (default
//     120 s) is removed by the scanner in Run; a broker whose registering
//     connection closes is removed at once (wire OnConnClose into
//     remoting.ServerConfig.OnClose). UNREGISTER_BROKER removes it too.
//     When a broker name has no address left, its queue data goes with it.
//   - Slaves are listed in brokerAddrs under their id; their REGISTER_BROKER
//     response carries the live master's haServerAddr and masterAddr.
//   - Routes are written in the compact JSON form client-go parses by hand.
//   - HoldRoutes (hold.go; `stratamq serve` sets it for its own broker):
//     until a named broker first registers, GET_ROUTEINFO_BY_TOPIC is
//     answered only when it does (each query waits at most a bound, the
//     hold ends after a window), from a goroutine per held query, so no
//     worker waits and the registration gets through.
//
// # Protection (issue 14)
//
// Unlike RocketMQ's, this name server keeps a live registration to the
// conn that made it: while it is live (not expired, its conn open, not
// unregistered), a REGISTER_BROKER from another conn of the same address,
// of another address under the same broker name and id, or of the same
// broker name under another cluster is refused with NO_PERMISSION, and so
// is an UNREGISTER_BROKER from another conn. A conn closing removes only
// the registrations made on it. A restarted broker is not refused: its old
// conn closed, which removed its registration; a master whose bucket
// lease lapsed unregisters itself (broker/registrar.go), so a promoted
// slave is not refused. A broker whose machine vanished without closing
// its conn holds its name until it expires (its heartbeat timeout: 30 s,
// three register intervals, for StrataMQ's brokers; the 120 s default
// for brokers that send none).
//
// With Config.ACL (STRATAMQ_ACL_FILE) the writes, REGISTER_BROKER,
// UNREGISTER_BROKER, PUT_KV_CONFIG, DELETE_KV_CONFIG and
// DELETE_TOPIC_IN_NAMESRV, need an admin account's signature
// (acl.IsNamesrvAdminCode); route and KV reads stay open, as RocketMQ's
// are.
//
// # Use
//
//	ns := namesrv.New(namesrv.Config{})
//	srv := remoting.NewServer(remoting.ServerConfig{Addr: ":9876", OnClose: ns.OnConnClose}, ns)
//	go ns.Run(ctx)        // expiry scanner
//	srv.Serve(ctx)
//
// Lock order: NameServer.mu is a leaf; it is never held while calling
// into remoting or doing I/O.
package namesrv
