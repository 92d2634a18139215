// Package txn is the broker's transactional messages, as RocketMQ 4.9
// keeps them (TransactionalMessageBridge, TransactionalMessageServiceImpl,
// TransactionalMessageCheckService): which half messages are resolved,
// and the check service that asks producers about the ones in doubt.
//
// # What it owns
//
// Service owns the bookkeeping of half messages and its progress. A
// prepared send is stored (by the broker, send_half.go) as a half message
// in HalfTopic queue 0 with its real topic and queue in REAL_TOPIC and
// REAL_QID. END_TRANSACTION (the broker's handler) reads the half
// (ReadHalf), claims it (Claim), stores the commit (Committed) and the op
// record (OpMessage), or the op record alone for a rollback, in one store
// call, and ends the claim (Resolved, or Unclaim when the write failed).
// A half is resolved at most once per run: done holds the halves past
// HalfOffset with an op record, pending the ones claimed now.
//
// The progress (State) says every half below HalfOffset is resolved and
// every op record below OpOffset is of such a half. Each change is a step
// recorded with the commitlog end its writes reached (Steps), so a save
// counts only writes as durable as the save: the local file the
// fdatasynced ones (Durability's local end), the bucket checkpoint the
// ones a restore or a failover finds (its bucket end, StateAt).
//
// # Goroutines
//
// Run is the only one: on a master, a check round every
// Config.CheckInterval (Round), the progress saved after each and when
// Run's ctx ends. Close stops rounds (the broker calls it as shutdown
// begins); the broker's run context ending ends Run. Everything else runs
// on the caller's goroutine; mu guards the bookkeeping and is never held
// across store I/O.
//
// # What it writes
//
// Records, through Writer (the broker's gated put), each call's records
// landing together:
//
//	op record      OpHalfTopic queue 0, tag "d", body the half's queue offset in
//	               decimal ("17"): the half is resolved
//	put-back copy  HalfTopic queue 0, the half with TRANSACTION_CHECK_TIMES one
//	               higher, stored with the op record of the old copy; the producer
//	               group is then asked about the copy (CHECK_TRANSACTION_STATE, 39,
//	               the record under its real topic and queue)
//
// Files, through Deps.FS: <Config.Dir>/transactionOffset.json (File),
// written atomically (temp, fsync, rename), and the same JSON as the
// bucket checkpoint's "transactions" section (Section), which the broker
// writes:
//
//	{"halfOffset": 9, "opOffset": 6}
//
// # What it must never do
//
//   - Import the broker package, or reach the broker other than through
//     the interfaces it declares (Store, Writer, Durability, Steps,
//     Producers, Topics).
//   - Store a record other than through Writer (the lease, fencing and
//     acknowledgement gates), or a commit and its op record in two calls.
//   - Save a progress past writes not yet durable for the fault the save
//     must survive: recovery would skip acknowledged transactions.
//   - Resolve a half twice in a run, or hold mu across store I/O.
package txn
