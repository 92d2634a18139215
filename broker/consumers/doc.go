// Package consumers is the broker's view of its clients and consumer
// groups, as RocketMQ keeps them in ConsumerManager, ProducerManager and
// SubscriptionGroupManager.
//
// # What it owns
//
// Registry owns the live clients, from heartbeats: per consumer group its
// clients (client id, connection, last heartbeat), its consume type,
// message model and where it starts, and its subscriptions by topic
// (Subscription: the TAG codes a pull filters consumequeue entries by, or
// the compiled SQL92 expression the broker put there, or the SubError its
// pulls are refused with); per producer group its clients (transaction
// checks go to one of them). A client goes when its connection closes
// (ConnClosed), on UNREGISTER_CLIENT (Unregister, UnregisterProducer:
// only the connection that registered it may remove it), or after
// Config.ClientExpiry without a heartbeat (Expire). When a consumer group's
// client set changes the consumers that remain are named: Register and
// Unregister return them to the caller; ConnClosed and Expire hand them to
// the Notifier. The registry is memory only: clients register again with
// their next heartbeat after a restart.
//
// Groups owns the subscription group configs (consume enable, retry queue
// count and attempts, which broker to read from when slow, whether to
// notify on rebalance, ...): auto-created with RocketMQ's defaults on a
// group's first heartbeat, pull or send-back (GetOrCreate, Create: at
// most SetMaxGroups groups, STRATAMQ_MAX_GROUPS), put and deleted by
// admins, mirrored from the master on a slave (Mirror). Its table is a
// configtable.Table: versioned, and a new group is saved before any
// caller sees it.
//
// # Goroutines
//
// Registry.Run is the only one: every Config.ExpireEvery it drops the
// silent clients (Expire) and notifies. It ends when its context ends or
// on Close. Everything else runs on the caller's goroutine; the registry's
// mutexes are never held while a Notifier is called, and Groups' table
// lock never across I/O (saves of its file run one at a time).
//
// # What it writes
//
// Groups writes config/subscriptionGroup.json (GroupsFile), RocketMQ's
// format, through an atomic write (offsets.WriteFileAtomic) whenever its
// version moved since the last save (Save; the broker calls it on its
// config flush, on admin changes and at shutdown; a new group saves
// itself):
//
//	{"subscriptionGroupTable": {"<group>": SubscriptionGroupConfig, ...},
//	 "dataVersion": {"stateVersion": 0, "timestamp": <ms>, "counter": <n>}}
//
// Encode gives the same bytes for GET_ALL_SUBSCRIPTIONGROUP_CONFIG and the
// bucket checkpoint's subscriptionGroups section; DecodeGroups reads any
// of them. The Registry writes nothing.
//
// # What it must never do
//
// Import package broker or any other feature package under it (the leaf
// configtable aside): what it needs of the broker comes through Notifier.
// Send on a client's connection itself: notices are the broker's to send
// (the Notifier), so the registry never blocks on a slow client. Hold a
// lock while calling out. Refuse an admin's put past the group limit: the
// limit bounds what clients create, not what an operator configures.
package consumers
