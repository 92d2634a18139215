// Package simtest is the failover fault simulator: seeded, replayable
// schedules of faults over the real broker code (broker.Node and
// everything under it: store, ha, offsets, tier/upload, tier/coldread),
// with fakes only at the boundaries, and a checker run after every
// schedule.
//
// # What it owns
//
//   - An in-memory network (net.go: Net, Host, Stack) that the brokers
//     listen and dial on through broker.Deps.Net: buffered pipes with
//     deadlines on timers, links between two hosts that can be cut
//     (conns break, dials fail), and a per-process Stack that a crash
//     kills (listeners and conns closed, later calls fail).
//   - A per-node path to the shared bucket (bucket.go, over tier.NewMem):
//     cut off, flaky (503 SlowDown), or holding the next write so that it
//     times out at the client yet lands seconds later, even after its
//     process died.
//   - Process incarnations over vfs.Mem (cluster.go): a crash fails every
//     disk and bucket call of the dead process and keeps the page cache; a
//     power loss keeps what was synced (Mem.CrashClone, or CrashCloneTorn);
//     a disk swap starts on an empty Mem.
//   - The workloads (workload*.go), clients of the real brokers through
//     the requests the official clients send. Every schedule runs the
//     queue workload (workload.go): producers that send to the node that
//     last answered and try the next on failure, each body unique, every
//     SEND_OK recorded with its queue offset; a consumer that pulls every
//     queue from the node serving as master and records what it saw.
//     Beside it the seed draws each of these with probability 1/2 (its
//     own random stream: the faults a seed draws do not change;
//     -sim.workloads names them instead):
//   - delay (workload_delay.go): DELAY levels 1-3 and TIMER_DELIVER_MS
//     timers due in 0.1-6 s, each SEND_OK recorded with the earliest
//     time it may be delivered;
//   - tx (workload_tx.go): a TransactionProducer: halves ended commit,
//     rollback or unknown by a oneway END_TRANSACTION, a heartbeat every
//     second and a check handler that answers CHECK_TRANSACTION_STATE
//     (an unknown one unknown 0-2 times, then commit or rollback);
//   - retry (workload_retry.go): a consumer that answers some
//     deliveries with CONSUMER_SEND_MSG_BACK (delay level 1, 2 or the
//     broker's, maxReconsumeTimes 2, so the third failure goes to the
//     DLQ);
//   - pop (workload_pop.go): a SimpleConsumer's receive, ack and
//     changeInvisibleDuration, made on the master's broker as the gRPC
//     endpoint makes them (proxy.ConsumerBackend; the gRPC framing is not
//     run): some acked, some left to lapse, some with their invisible
//     time changed.
//     Each workload's choices are drawn from the seed per message, so a
//     replay makes the same ones. After the heal, before the checks, each
//     workload's consumers go on (Settle) until what they wait for came,
//     or a deadline: delayed messages due, transactions resolved,
//     retries delivered again, POP messages acked.
//   - Schedules (schedule.go): a seed (math/rand/v2 PCG) draws the
//     cluster's shape (2 or 3 nodes, sync_master or async_master) and up
//     to -sim.steps faults; the same seed draws the same schedule.
//     -sim.durability=bucket runs every topic bucket-durable
//     (STRATAMQ_DURABILITY=bucket: a send is answered once a committed
//     WAL object holds it), a third of the seeds on a lone async_master
//     (the serverless case: network cuts become bucket cuts, promote and
//     demote crashes); the checker then allows no acknowledged loss at
//     all, disks and power included. drawn, the default, makes a quarter
//     of the seeds so (its own random stream); local, none.
//   - The checker (check.go), after every fault healed, every node
//     restarted and one master sees its slaves in sync: every SEND_OK is
//     readable at its offset with its body (async_master: or kept in a
//     diverged/ directory, counted as an async loss); no queue offset was
//     acknowledged or read with two bodies; every node restarts on its
//     disk and a fresh node on an empty disk restores from the bucket
//     (which reads every listed object through the cold reader) and reads
//     every acknowledged message, and every record the healed master
//     held of the other workloads' topics. The other workloads' checks
//     (check.go, workload_*.go): every acknowledged delayed or timer
//     message delivered, never before its time, more than once only
//     when its first delivery lies within a fault window (nearFault: a
//     checkpoint interval before a fault to a lease TTL after it, the
//     at-least-once bound of docs/messaging.md); every committed
//     transaction delivered exactly once, no rolled-back one, every one
//     in doubt resolved by a check-back; every send-back's copy delivered
//     again (not early) or dead-lettered; every acknowledged POP message
//     delivered, every delivery not acked delivered again and not before
//     its invisible time, none delivered again after an ack except
//     within a fault window. Losses an async_master may have (and a
//     sync_master's when every copy that may have held the message was
//     lost) are counted, not violations.
//
// # Virtual time
//
// Every schedule runs in a testing/synctest bubble: timers, tickers and
// sleeps are virtual and advance when every goroutine is durably blocked,
// so a schedule with minutes of lease TTLs and recovery waits takes tens
// of milliseconds. Three rules follow, each learnt the hard way:
//
//   - Nothing a broker calls may wait on virtual time while the caller can
//     hold a mutex: a goroutine waiting for a sync.Mutex is not durably
//     blocked, so time stops and the wait never ends. The fakes never
//     delay a caller (a cut link fails a dial at once; a slow bucket is
//     modelled as failures and late landings, not as delays).
//   - State a package makes lazily and shares (zstd encoders and their
//     pools, sync.Pool objects holding channels or timers) must not be
//     made inside one bubble and used in another: the tests warm it
//     outside any bubble first, and empty the pools between bubbles.
//   - Every goroutine must end before the bubble does: a broker that
//     leaks one fails the run ("blocked goroutines remain").
//
// Goroutine interleavings within one instant are still the runtime's, so
// a replay draws the same schedule but may not take the same path.
//
// # What it found on its first runs
//
// On 8aa1300: issue 29 items 1 (a power-cut sync_master retaking its
// lease), 2 (a lagging slave winning), 4 (a promoted slave's objects
// overlapping the old master's: nodes that can no longer start) and 6 (a
// fenced master's late PUT overwriting the new master's object); a
// broker.New that failed after making the tiering leaked goroutines
// (fixed here); a failover slave started with its sync_master could take
// the never-written lease and run the brokerName as async_master (the
// simulator starts the configured master first). Then, on main after the
// fixes of items 1-6: a sync_master alone showed consumers what no slave
// held (its read bound is now a high watermark), and a slave whose log
// ended before its master's restored log began could never rejoin (the
// master now answers StatusBeforeLogStart and the slave starts again
// there). Then the workloads of issue 30, on main: a transaction check
// round that asks about one half in doubt when resolved and unresolved
// halves interleave (item 3); the schedule service's progress saved
// ahead of the deliveries and timer hops it depends on, lost in a power
// loss (item 1) or, on a sync_master cut off from its slave, with its
// disk (item 5), for delayed messages and retries alike; a send-back a
// sync_master with no slave acknowledged (item 5); a timer message
// delivered twice at once by the master after a failover (item 6). The
// long form then found a sync_master back from a power loss taking its
// lease while the slave that held its acknowledged tail could not reach
// the bucket (31 of 13,106 schedules; fixed by replica records: a
// takeover waits to hear from every slave of the epoch), and with it two
// contenders waiting for each other forever and a data dir that ran as a
// slave retaking a lease still in its name. All fixed on main; the timer
// delivered twice at a takeover is within the one-more-per-failover bound
// (a takeover counts as a replay point). knownOpen in sim_test.go names
// what is still found, each with its seed, its shortest schedule and what
// it loses; CI does not fail on its violation kinds while it is listed
// (empty now). TestSimScenarios keeps one hand-written schedule per bug.
//
// Nodes may be configured with the master role (Schedule.Masters): with
// failover the lease decides who is master, and a node so configured that
// restarts takes a lease in broker.New on its own copy, a path a slave's
// watch never takes. broker.New's last check (refusing to write below
// what the bucket holds) firing is a violation ("backstop").
//
// # Running it
//
//	go test ./broker/simtest -run 'TestSim$'                       # CI: 200 seeds or a minute
//	go test -c -o sim.test ./broker/simtest && nice -n 19 ./sim.test -test.run 'TestSim$' -test.timeout 0 \
//	    -sim.all -sim.keepgoing -sim.first=N -sim.seeds=100000 -sim.budget=20h -sim.hang=10m -sim.summary=long.summary
//	go test ./broker/simtest -run 'TestSim$' -sim.seed=N -sim.faults=... -sim.v -sim.shrink   # replay one
//
// TestSim prints a line on stderr after 10 and 100 schedules, then every
// -sim.progress (1000), and at the end (after a failure or a hang too):
// schedules run, failed and their violation kinds, schedules/s, CPU
// seconds, virtual time, and the fault kinds, workloads and cluster
// shapes drawn. -sim.summary (with -sim.keepgoing by default a file in
// the temp dir) keeps the last of those lines: go test in package list
// mode shows a passing package's output only with -v. The long form
// runs the binary itself, so stderr is seen; seed ranges split across
// processes run side by side (each schedule runs alone in its process:
// bubbles must not share the runtime's pools). A niced run on a busy
// machine may need a longer -sim.hang than the minute a schedule gets by
// default. The garbage collector runs between schedules and when the
// heap reaches -sim.memlimit (768 MiB), not by GOGC (about a third of
// the CPU otherwise).
//
// knownOpen in sim_test.go lists the bugs today's code still has: CI
// does not draw their fault kinds (none now) and reports their violation
// kinds as known open instead of failing; -sim.all draws and fails them.
// -sim.workloads=delay,tx,retry,pop runs those workloads in every
// schedule (none: the queue workload alone). The cluster runs the
// services with the broker's defaults (delay levels, timer wheel,
// transaction timeout and check maximum, POP revive interval) except
// STRATAMQ_TRANSACTION_CHECK_INTERVAL: 2 s instead of 60 s, or no check
// would run within a schedule of seconds (-sim.txinterval sets it).
package simtest
