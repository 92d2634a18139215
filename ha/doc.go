// Package ha replicates the commitlog from a master to its slaves over TCP
// (DESIGN.md §9; RocketMQ's classic HAService, rocketmq-protocol.md §5.1,
// plus a hello, the master's epoch on every transfer and the master's end of
// log). It knows nothing about the broker: the master reads its log through
// Log (store.Store's MaxPhysOffset and ReadLog), the slave appends through
// Appender (store.Store's MaxPhysOffset and AppendRaw, which dispatches the
// consumequeues itself), and the epoch comes from a func (the lease's
// Epoch).
//
// # Protocol (version 3, all integers big-endian)
//
// The slave dials the master's HA listener (STRATAMQ_HA_LISTEN, default
// :10912) and sends a hello:
//
//	0        4    6    8         8+n           16+n        24+n
//	+--------+----+----+---------+-------------+-----------+
//	| magic  |ver |nlen| name(n) | maxOffset   | epoch     |
//	|"SMHA"  |u16 |u16 | broker  | int64       | int64     |
//	+--------+----+----+---------+-------------+-----------+
//
// name is the slave's brokerName (≤ 255 bytes), maxOffset the end of its
// local log: the master streams from there. epoch (version 3) is the
// epoch the slave's log agrees with: SlaveOptions.MinEpoch at first, then
// the highest epoch a master accepted it under; 0 means it knows none, and
// is judged as the oldest epoch. The master answers once:
//
//	0        4    6      8         16        24   26        26+a
//	+--------+----+------+---------+---------+----+---------+
//	| magic  |ver |status| epoch   |masterMax|alen| addr(a) |
//	|"SMHA"  |u16 | u16  | int64   | int64   |u16 | master  |
//	+--------+----+------+---------+---------+----+---------+
//
// addr is the master's advertised remoting address (MasterOptions.Advertise,
// ≤ 255 bytes, alen 0 when unset): the slave reports it in
// SlaveState.MasterAddr, and the broker polls the master's topics, groups
// and offsets there. Version 1 had no alen/addr (a 24-byte reply); the
// versions do not mix: either side reads the other's version first and
// refuses it (a slave reads 8 bytes before the rest, so a version-1
// master's shorter reply is named for its version).
//
// status 0 is OK; anything else (StatusBadVersion, StatusWrongBroker,
// StatusOffsetOutOfRange, StatusDiverged) is a refusal and the master
// closes the connection. StatusDiverged (version 3) answers a slave whose
// epoch is below the master's and whose maxOffset passes the offset where
// a newer epoch took the log over (MasterOptions.Diverged; masterMax then
// carries that offset, 0 when the master cannot tell): the bytes past it
// were never part of the master's log, so streaming on from maxOffset
// would append the master's records after foreign ones. The slave tells
// its owner (SlaveOptions.OnDiverged), which cuts its log there and
// starts again. Then the slave sends reports, each exactly 8 bytes, the end of
// its local log (int64) — after each applied transfer and at least every
// ReportInterval (5 s) — and the master sends transfers, each a 28-byte
// header and size bytes of commitlog starting at phyOffset:
//
//	0           8         16          24     28
//	+-----------+---------+-----------+------+----------------+
//	| phyOffset | epoch   | masterMax | size | body (size)    |
//	| int64     | int64   | int64     | int32| whole records  |
//	+-----------+---------+-----------+------+----------------+
//
// A body holds whole records (a record never spans transfers; a batch is at
// most BatchSize unless one record is bigger). size 0 is a heartbeat, sent
// after HeartbeatInterval (5 s) without a transfer. masterMax is the end of
// the master's log when the transfer was cut: the slave's lag.
//
// Checks. The slave requires phyOffset == the end of its log (contiguity:
// the first transfer starts at its hello's maxOffset) and an epoch never
// below one it has seen (the hello's, earlier transfers', its MinEpoch): a
// transfer from an older epoch — a fenced master — is refused and the
// connection dropped; it appends bodies verbatim. The master requires a
// hello with its magic and version, and reports that never go back and
// never pass what it has sent. Either side drops a connection silent for
// IdleTimeout (20 s). Malformed input (bad magic, a size past MaxTransfer, a
// record the appender rejects, a report out of range) closes that
// connection only, with the reason logged; the slave redials with backoff
// (100 ms doubling to 5 s). Before each dial the slave asks
// SlaveOptions.Resolve, if set, for the master's HA address (the broker
// follows the name server's answer, or the lease holder after a failover);
// SlaveOptions.Master is the fallback when it answers "".
//
// # Acks and backpressure
//
// The master keeps, per slave, the offset it has acked (its last report),
// the lag in bytes (master end − acked), and when it last reported.
// WaitAcked(ctx, off) is the wait for a slave: nil once some slave acked ≥
// off; ErrSlaveNotAvailable at once when no slave is connected or the best
// one lags more than MaxLag (256 MiB, as RocketMQ); ErrSlaveTimeout when
// ctx ends first. AwaitAck(off, deadline, done) is sync_master's wait for a
// send: the same wait with no goroutine behind it, except that with
// MasterOptions.MinInSync 1 (RocketMQ 5's minInSyncReplicas, the master
// counted) it succeeds while no slave is in sync — connected, within
// MaxLag, and no ack deadline missed since it last caught up (insync.go) —
// counted in AckedAlone (InSync reports the set); WaitAcked never does (a
// demote's check that a slave holds the log). AwaitAck's done runs once,
// on whichever goroutine settles it (the caller's when known at once, else
// the slave's report reader, a
// slave's connect or disconnect, the deadline timer, or Close), so the
// broker answers a sync_master send on the report reader itself, with no
// thread woken between the slave's ack and the client's answer. Pending
// waits are kept in offset order; one timer serves their deadlines.
// Acked answers the best ack and whether WaitAcked would wait
// for it (a slave connected within MaxLag) — sync_master's bound on what
// consumers read — and MasterOptions.OnAcked is told whenever that may have
// changed. The master streams from the log and holds one batch buffer per
// slave, so nothing queues for a slow slave: it just lags (TCP pushes back).
// New bytes are announced by Master.Notify (the writer calls it) and polled
// every PollInterval besides.
package ha
