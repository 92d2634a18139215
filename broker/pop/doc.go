// Package pop is POP consumption: the broker keeps a consumer group's
// progress and what it has in flight, so consumers need no queue
// assignment. It is protocol-agnostic: the gRPC endpoint (package proxy)
// reaches it through package broker (grpc_pop_backend.go), which calls
// Engine.Receive, Ack, ChangeInvisible and ForwardToDLQ; RocketMQ's
// remoting POP codes could call them too.
//
// # What it owns
//
// One Engine per broker generation holds, per (group, topic, queue):
//
//	   acked/filtered      in flight (invisible or visible again)      not read yet
//	|..................|o...o.o..o...........o|.................................
//	                   ^ base                 ^ next
//
// next is the first queue offset no receive has read. Every offset below
// next is either done (acked, filtered out by the receive's filter,
// dead-lettered, or gone by retention) or an entry in flight. base is the
// smallest offset in flight (next when none): it is the group's consume
// progress, committed to the consumer offset store (Offsets; the broker's
// consumerOffset.json) as it moves, so remoting tools (consumerProgress,
// lag metrics) see POP groups too. An entry is invisible until its
// deadline; when the deadline passes (revive) it becomes visible again and
// the next receive delivers it again, its attempt counted, or, past the
// receive's maximum attempts, it is dead-lettered into %DLQ%<group>
// (DeadLetterer: the broker's send-back path) and is done. Redelivery is
// in place: the message is read again at its offset; no copy goes to a
// retry topic.
//
// FIFO receives hold a queue while any of its entries is invisible: a
// queue is served to one receive at a time, from its oldest undone offset
// on, so each message group (a producer hashes it to one queue) is
// delivered in order, one batch at a time.
//
// Bounded memory, shared fairly: at most Config.MaxInflight entries in all
// (default 100,000), Config.MaxInflightPerGroup per group (default 20,000)
// and Config.MaxInflightPerClient per client (its gRPC client id, all its
// groups together; default 10,000). A group takes from the total only
// while total/(n+2) stays free, n the groups with messages in flight (it
// among them): groups that never ack cannot take it all (the k-th finds
// about total/k² free), so another group finds room. A receive at a bound
// returns what fits, or ErrInflightLimit when nothing does.
//
// Receipt handles (Handle, handle.go) name the topic, queue, offset, pop
// time, invisible time and a random 64-bit nonce the entry holds; every
// delivery and every ChangeInvisible draws a new nonce, so a handle is
// valid until its message is acked, delivered again or extended, and a
// handle nobody was given cannot be guessed:
//
//	P1_<queueId>_<queueOffset>_<popMs>_<invisibleMs>_<nonce>_<topic>
//	P1_3_1207_1767369600000_30000_9f2c41d07a5be813_OrderEvents
//
// # Files
//
//	deps.go     the interfaces the engine declares (Store, Offsets, Catalog,
//	            DeadLetterer, Durability, Stopping), Config and Deps
//	engine.go   Engine, New, Run/Close, errors and bounds, long-poll wakes
//	state.go    groups, queues, entries, the deadline heap, the bounds' counters
//	receive.go  Receive: checks, visible-again entries, then new ones from the log
//	ack.go      Ack, ChangeInvisible, ForwardToDLQ
//	revive.go   expiry and dead-lettering (Revive)
//	persist.go  Save, Load, Section; releasing durable dead-letters
//	handle.go   the receipt handle's format
//
// # Goroutines
//
// One: Run, the revive loop (expiry every Config.ReviveInterval,
// dead-lettering what is due), started by the broker on a master only and
// stopped by its context or by Close (which waits for it). Everything
// else runs on the caller's goroutine; a receive with Request.Wait waits
// on its own goroutine for a wake (a dispatch, an ack, a revive), its
// timer or its context, and not at all once Stopping says the broker
// shuts down.
//
// # State file
//
// The same JSON is the local file <Config.Dir>/popState.json (the broker's
// <data dir>/config; written by Save with the config files, temp + fsync
// + rename) and the bucket checkpoint's "pop" section (Section; the broker
// writes the checkpoint):
//
//	{"format":1,"savedAt":1767369600000,
//	 "groups":{"<group>":{"<topic>":{"<queueId>":{"next":1210,
//	   "inflight":[{"o":1207,"p":88123,"a":2,"m":17,"t":1767369590000,"i":30000,
//	                "d":1767369620000,"n":"9f2c41d07a5be813"}]}}}}}
//
// next: the first queue offset not read yet; per entry in flight: o queue
// offset, p commitlog offset, a deliveries so far, m maximum deliveries,
// t pop time and i invisible duration of the last delivery (ms), d the
// unix ms it becomes visible again (0: visible now), n the nonce its
// receipt handle carries (so handles stay valid across a restart).
//
// Load takes the newer of the local file and the checkpoint's section
// (savedAt; a promoted slave takes the checkpoint's alone: its local file,
// if any, is from an older term). It then clamps every queue to the store
// and to the group's committed offset: entries below the committed offset
// were acked after the state was saved and are dropped; entries at or past
// the queue's end (a lost local tail) are dropped; next stays within
// [committed, end]. What the state lost is delivered again: entries in
// flight at a crash become visible at their deadline, and messages
// received after the save are read again from next. At least once, never
// lost.
//
// A dead-lettered entry is done only once its DLQ copy is durable for
// every fault (Durability.DurableAll: fdatasynced, and listed in the
// bucket's manifest; a slave's copy is not enough, as the slave may lose
// its disk while the master loses its unsynced tail): until then it
// stays in flight (not receivable, not holding a FIFO queue), so neither
// this state nor the group's committed offset passes it, and a state
// loaded after a fault dead-letters it again (its deadline is 1). Revive,
// Save and Release (the broker's, before a bucket checkpoint) take the
// entries whose copy became durable out of flight: a checkpoint written
// once everything is uploaded (a graceful stop, a handover) has none left.
//
// # Lock order
//
// Engine.mu guards the state and is never held across store or bucket
// I/O, nor while calling Catalog, DeadLetterer, Durability or Stopping.
// The one exception: Engine.mu -> Offsets.Commit (a queue's progress is
// committed under the lock, so commits land in order); the Offsets
// implementation must therefore never call back into the engine.
// Engine.wmu (long-poll wakes) and Engine.saveMu are leaves apart from
// saveMu -> mu. Methods called with mu held end in Locked.
//
// # What it must never do
//
// Import package broker, or reach the broker's state other than through
// the interfaces in deps.go; write to the log itself (a dead-letter is the
// broker's send-back, through DeadLetterer); count a dead-lettered message
// done before its copy is durable; hold Engine.mu across I/O; serve a
// receive on a slave (ErrNotMaster).
package pop
