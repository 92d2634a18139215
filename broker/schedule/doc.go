// Package schedule is StrataMQ's schedule service: it delivers DELAY-level
// and timer messages when due. It owns the schedule queues' progress and
// the one goroutine that delivers; the broker routes sends into it (Route),
// saves its progress (Save, Sections) and asks it what bucket retention
// must keep (PinnedFloor).
//
// # Queues
//
// It keeps no per-message state in memory:
//
//   - SCHEDULE_TOPIC_XXXX (DelayTopic) queue n-1 holds level n. A
//     record carries its due time (PropDelayDueMs, set by Route: a change
//     of STRATAMQ_DELAY_LEVELS applies to later sends, never to those
//     waiting), so a level's queue is in due order and its progress is a
//     queue offset (everything below it is delivered).
//   - rmq_sys_wheel_timer (TimerTopic) queue k >= 1 holds timer messages
//     for a hop of 2^(k-1) s: each is due at its store time plus the hop,
//     so these queues are in due order too. A due entry is either
//     delivered or, when its TIMER_DELIVER_MS is still a second or more
//     away, stored again in the queue of the largest hop that does not
//     pass it (a message hops at most once per bit of its delay in
//     seconds: 90 days is 23 bits). With a bucket retention no hop is
//     longer than a quarter of it. A hop an earlier run stored after its
//     last saved progress is found by the key index and not stored twice.
//   - Timer queue 0 holds messages due within a second of being stored:
//     the service reads up to 4096 of them ahead and delivers each at its
//     time (the one in-memory window, bounded in count).
//
// A delivered message goes to its real topic and queue (REAL_TOPIC,
// REAL_QID kept, DELAY removed); one that would not fit the record limit
// loses REAL_TOPIC and REAL_QID, one that fits in neither form or whose
// topic is gone is dropped, logged, and a recalled timer is dropped.
//
// # Progress: formats and durability
//
// Progress is saved in <config dir>/delayOffset.json (FileName), with the
// broker's config files, in RocketMQ's format plus the timer table:
//
//	{"offsetTable":{"<level>":offset},"timerOffsetTable":{"<queue>":offset}}
//
// and in the bucket checkpoint's sections delayOffsets and timerOffsets
// (Sections), each {"offsetTable":{...}}. The messages themselves are in
// the commitlog, so a restore on an empty disk needs nothing else. Each
// save counts only deliveries as durable as it (package progress): the
// file those fdatasynced, the checkpoint's sections those the bucket lists
// (Durability); on a sync_master the broker saves the progress over what a
// slave holds apart, and raises a loaded progress to it (Loaded.Raise)
// only on a copy of the log that holds those deliveries. Delivery is at least once: a
// message delivered after the saved progress is delivered again after a
// crash, a power loss, a restore or a failover. New clamps the loaded
// progress to each queue's end; a promoted slave loads the checkpoint's
// alone (Load's ignoreFile).
//
// # Goroutines
//
// Run, on a master only, is the one delivery goroutine (plus a helper that
// cancels a round when Close is called); Close stops it and waits. Route,
// Save, Sections, Snapshot, Trim, Progress and PinnedFloor may be called
// from any goroutine (mu guards the progress).
//
// # What it must never do
//
// It must never import package broker or reach the broker except through
// the interfaces it declares (Store, Topics, Gate, Durability, Recalls);
// never store a message past Gate (the broker's send gates) or after the
// broker's shutdown began; never save progress past writes that are not
// durable for the save's fault; and never hold per-message state beyond
// timer queue 0's bounded window.
package schedule
