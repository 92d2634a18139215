// Package replication keeps a broker generation's side of HA
// replication: a master's HA listener (ha.Master) while it runs, a
// sync_master's high watermark and acknowledgement waits, or a slave's
// stream from its master (ha.Slave).
//
// What it owns (Service):
//   - a slave's stream: started by StartSlave (ha.StartSlave with the
//     options the broker builds), readable through Slave from then on
//     (its state also after Stop), closed by Stop.
//   - the HA master: started by Start (ha.StartMaster with the options the
//     broker builds), reachable through Master while it runs, stopped by
//     Stop. Listener keeps the master Start made after Stop, for its
//     bound address.
//   - the high watermark (HW) of a sync_master: the highest commitlog end
//     a slave acknowledged in this run, never below where this epoch took
//     the log over (SetHW, once the store is open). It never goes back
//     when slaves leave.
//   - the read bound (ReadBound, Visible, HiddenEnd): a sync_master shows
//     consumers only what a slave holds (with STRATAMQ_HA_MIN_INSYNC=1:
//     what the in-sync slaves hold, nothing while none is in sync); no
//     bound for the other roles.
//   - the acknowledgement wait of a sync_master's sends (HoldNotify, Push,
//     Await, Ack) and what a slave of this run holds (Held), which the
//     broker counts as durable for a failover.
//
// Goroutines: none of its own. The ha.Master it starts runs its listener,
// stream and report goroutines until Stop, the ha.Slave its stream's; Await's done runs on the
// caller's goroutine or on the ha.Master's that settles the wait.
//
// Formats: none (the HA wire protocol is package ha's).
//
// It must never import the broker (or any broker feature package), let
// the high watermark go back, or report a bound above what a slave
// acknowledged. It reads the store only through Entries.
package replication
