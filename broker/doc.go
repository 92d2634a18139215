// Package broker is the RocketMQ-compatible broker: it answers the remoting
// requests producers, consumers and admin tools send, on top of the local
// store (package store), and keeps the broker's live and durable state —
// topics, subscription groups, consumer offsets, connected producers and
// consumers, held long-poll pulls — and registers itself with the name
// servers.
//
// # Where a request goes
//
// remoting.Server reads a frame → Broker.ServeRemoting looks the code up in
// the handler table (handlers.go) → one file per request code,
// rcNNN_<name>.go, named by RocketMQ's code, so `ls broker/rc*` is the
// protocol surface. Handlers run on the remoting server's bounded pools
// (send, pull, admin, heartbeat); a full pool answers SYSTEM_BUSY.
//
// # State and who owns it
//
//	TopicConfigManager         topics.json; TBW102 auto-create
//	SubscriptionGroupManager   subscriptionGroup.json
//	offsets.ConsumerOffsets    consumerOffset.json
//	ConsumerManager            live consumer clients per group, their subscriptions (from heartbeats)
//	ProducerManager            live producer clients per group
//	pullHold                   long-polled pulls, woken by the store's dispatch
//	registrar                  REGISTER_BROKER to every name server every 30 s and on topic change
//
// # Goroutines
//
// Run owns every goroutine the broker starts (the remoting server, the
// hold-service checker, the registrar, the client-expiry scanner, the
// config flusher) and returns after they have all exited.
//
// # Shutdown order
//
// Stop accepting (listener closed) → drain in-flight requests under the
// shutdown deadline → answer held pulls → unregister from the name servers →
// flush the store and the config files → close the store.
//
// # Lock order
//
// Locks are leaf locks: no manager's lock is held while calling another
// manager, the store or the network. Where a method is called with a lock
// held its name ends in Locked.
package broker
