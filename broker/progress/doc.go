// Package progress keeps a saved progress honest about durability. The
// broker's internal services (the schedule service, the transaction check,
// POP's dead-lettering) move messages by writing them again: a delivery, a
// commit, a put-back, a DLQ copy. Their progress (everything below it is
// done) may be saved only once those writes are as durable as the save: a
// progress file on the local disk must not count a write a power loss
// takes back, and the bucket checkpoint must not count one a restore on an
// empty disk (or a failover) does not find. Otherwise recovery skips
// messages that were acknowledged.
//
// So each service records, with every step of its progress, the commitlog
// end the writes of that step reached (Log.Add), and a save takes the last
// step whose writes end at or below the durable end for its fault
// (Log.At). What recovery then finds below the saved progress is done;
// what it finds past it is done again (at least once). How far the
// commitlog is durable for each fault is the broker's to say
// (broker/durable_progress.go durableEnds); this package only keeps the
// steps.
//
// It owns no goroutine, no file and no lock: a Log is guarded by its
// owner. It must never import the broker or learn what a durable end is.
package progress
