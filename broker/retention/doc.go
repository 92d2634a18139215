// Package retention is StrataMQ's per-topic retention policy. It owns the
// rules (a topic's retention.time attribute, Attribute, overrides
// STRATAMQ_RETENTION for it, shorter or longer: a Go duration "90s",
// "720h", "30d", a number of milliseconds, "0" for the broker default or
// "-1"/"forever"), the queue minima they raise, and the report of what
// each topic holds back (STRATAMQ_TOPIC_RETENTION). It deletes nothing:
// package tiering decides which bucket segments may go (every queue with a
// record in one has its min past it) and deletes them, asking this
// package first (HasOverride, ExpireTopics).
//
// # Rules
//
// Expiry is logical: every second tiering's loop asks ExpireTopics, which
// raises each queue's min (store.RaiseQueueMins, durable; the checkpoint's
// per-queue Min carries it to a restore) past the messages it no longer
// keeps:
//
//   - a topic with an override past its messages stored longer ago than it;
//   - a topic on the default (while some topic has an override) past the
//     records of the objects the default rule would have deleted
//     (defFloor: uploaded longer ago than STRATAMQ_RETENTION, up to the
//     schedule pin): the same min the floor gives it without overrides;
//   - the internal queues the broker consumes itself (schedule, timer,
//     transaction half and op queues) up to their progress in the last
//     checkpoint written (Pins.Saved): below it nothing is read again.
//
// Consumers behind a min get PULL_OFFSET_MOVED with it. A slave raises
// its minima as its master does (same records, same store times).
//
// It writes no file and no object of its own: the minima it raises are
// the store's.
//
// # Goroutines
//
// None, so it has no Run or Close. ExpireTopics runs on tiering's
// housekeeping tick (a master) or a slave's follow loop, Report and
// OldestRetained on request handlers; every method may be called from any
// goroutine.
//
// # What it must never do
//
// It must never import package broker or any other broker feature package,
// nor reach the broker except through the interfaces it declares (Store,
// Topics, Pins, Holds); never lower a queue's min; never raise an internal
// queue's min past the progress a checkpoint saved; and never delete
// anything itself.
package retention
