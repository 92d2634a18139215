// Package ha replicates the commitlog from a master to its slaves over TCP
// (DESIGN.md §9; RocketMQ's classic HAService, rocketmq-protocol.md §5.1,
// plus a hello, the master's epoch on every transfer and the master's end of
// log). It knows nothing about the broker: the master reads its log through
// Log (store.Store's MaxPhysOffset and ReadLog), the slave appends through
// Appender (store.Store's MaxPhysOffset and AppendRaw, which dispatches the
// consumequeues itself), and the epoch comes from a func (the lease's
// Epoch).
//
// # Protocol (version 4, all integers big-endian)
//
// The slave dials the master's HA listener (STRATAMQ_HA_LISTEN, default
// :10912). The master speaks first, a challenge:
//
//	0        4    6     8            24
//	+--------+----+-----+------------+
//	| magic  |ver |flags| nonce (16) |
//	|"SMHA"  |u16 | u16 | random     |
//	+--------+----+-----+------------+
//
// flags bit 0: the master has a secret. The slave answers with a hello:
//
//	0        4    6    8         8+n         16+n     24+n     40+n     72+n
//	+--------+----+----+---------+-----------+--------+--------+--------+
//	| magic  |ver |nlen| name(n) | maxOffset | epoch  | nonce  | mac    |
//	|"SMHA"  |u16 |u16 | broker  | int64     | int64  | 16     | 32     |
//	+--------+----+----+---------+-----------+--------+--------+--------+
//
// mac is HMAC-SHA256 under the shared secret (MasterOptions.Secret,
// SlaveOptions.Secret: STRATAMQ_HA_SECRET) of "stratamq-ha-hello-v4",
// the challenge's nonce and the hello's bytes before mac: a hello signed
// with another secret, or replayed from another connection, does not
// verify. Without a secret the key is empty, and each side accepts only a
// loopback peer (a slave refuses to follow a master on another host, a
// master refuses such a slave with StatusAuthRequired). name is the
// slave's brokerName (≤ 255 bytes), maxOffset the end of its local log:
// the master streams from there. epoch is the epoch the slave's log agrees
// with: SlaveOptions.MinEpoch at first, then the highest epoch a master
// accepted it under; 0 means it knows none, and is judged as the oldest
// epoch. The master answers once:
//
//	0        4    6      8         16        24   26        26+a    58+a
//	+--------+----+------+---------+---------+----+---------+-------+
//	| magic  |ver |status| epoch   |masterMax|alen| addr(a) | mac   |
//	|"SMHA"  |u16 | u16  | int64   | int64   |u16 | master  | 32    |
//	+--------+----+------+---------+---------+----+---------+-------+
//
// mac is HMAC-SHA256 of "stratamq-ha-reply-v4", the hello's nonce, the
// challenge's nonce and the reply's bytes before it; the slave acts on
// no reply that does not verify (a fake master cannot make it cut its
// log). Refusals for authentication or a full master (StatusAuthFailed,
// StatusAuthRequired, StatusBusy) are read unchecked: they only end the
// session. addr is the master's advertised remoting address
// (MasterOptions.Advertise, ≤ 255 bytes, alen 0 when unset): the slave
// reports it in SlaveState.MasterAddr, and the broker polls the master's
// topics, groups and offsets there. The versions do not mix: either side
// reads the other's version first and refuses it (a slave of version 3
// reads the challenge as a reply of version 4; a master reads a hello of
// version 3 and refuses it with StatusBadVersion). The handshake must end
// within 5 s (or IdleTimeout if shorter).
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
// starts again. Then the slave sends reports, each exactly 12 bytes: the
// end of its local log (int64) and the CRC-32C (Castagnoli, uint32) of
// every body byte of this session's stream up to it — after each applied
// transfer and at least every ReportInterval (5 s) — and the master sends
// transfers, each a 28-byte
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
// signed hello with its magic and version, and reports that prove what
// they acknowledge: each names the end of a transfer it sent (or the last
// ack again) with the checksum the master kept for that end, so a report
// past what was sent, or from a slave that did not read the bytes, drops
// the connection and counts for nothing. The master sends at most 32 MiB
// (4,096 transfers) past a slave's last ack. Either side drops a connection silent for
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
// The master keeps, per slave, the offset it has acked (its last proven
// report), the lag in bytes (master end − acked), when it last reported,
// and since when it waits for an ack of bytes it sent: a slave that
// acknowledged none of them for StallTimeout is stalled (insync.go), and
// counts as no slave to wait for. At most MaxConns slaves are served (a
// further one is refused StatusBusy) and as many connections may be in
// their handshake (past that the oldest is dropped); refusals and drops
// are logged at WARN at most once per 10 s per kind.
// WaitAcked(ctx, off) is the wait for a slave: nil once some slave acked ≥
// off; ErrSlaveNotAvailable at once when no slave is connected, every one
// is stalled, or the best one lags more than MaxLag (256 MiB, as
// RocketMQ); ErrSlaveTimeout when
// ctx ends first. AwaitAck(off, deadline, done) is sync_master's wait for a
// send: the same wait with no goroutine behind it, except that with
// MasterOptions.MinInSync 1 (RocketMQ 5's minInSyncReplicas, the master
// counted) it succeeds while no slave is in sync — connected, within
// MaxLag, not stalled, and no ack deadline missed since it last caught up
// (insync.go) —
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
