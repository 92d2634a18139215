// Package wal is the bucket write-ahead log: it makes a send to a
// bucket-durable topic durable in object storage before it is answered,
// so that a broker whose disk vanishes loses nothing it acknowledged.
//
// # What it ships
//
// The local commitlog, byte for byte, in order: an object holds whole
// records [Start, Start+Length) of the log, and the objects of the chain
// follow each other without a gap from where the manifest's segments end.
// Shipping the log itself (not only the bucket-durable topics' records)
// keeps one order of offsets: a broker on an empty disk appends the chain
// to the segments' end and has the same commitlog, queue offsets and
// msgIds as the broker that wrote it. Local-durable records between
// bucket-durable ones ride along (their bytes cost bandwidth, not
// requests); while some topic is bucket-durable (Config.Active), bytes no
// send waits for (a delayed message's delivery, a transaction's commit)
// are written a linger after they appear, or at once when Batch bytes are
// pending; else nothing is written while no send waits.
//
// # Objects
//
//	<prefix>/wal/<20-digit seq>      one object per number, created with PutIf(IfAbsent)
//
//	+--------+-----+-------+----------+-----+-------+-------+------+-------+--------+------------+------------+-----------+-------------+---------+
//	| "SMQW" | ver | flags | reserved | seq | epoch | claim | prev | start | length | prev epoch | prev claim | crc (pay) | crc (0..76) | payload |
//	|   4    |  1  |   1   |    2     |  8  |   8   |   8   |  8   |   8   |   8    |     8      |     8      |     4     |      4      | length  |
//	+--------+-----+-------+----------+-----+-------+-------+------+-------+--------+------------+------------+-----------+-------------+---------+
//
// little endian; CRC-32C (Castagnoli). flags: 0x01 claim, 0x02 filler.
// Format version 2 (80-byte header), written by this build. prev epoch
// and prev claim are set in a claim that continues an object (prev > 0):
// that object's writer, so that another writer's object a late PUT put at
// the same number after a trim is not taken for it; zero elsewhere.
// Version 1, written before, has a 64-byte header without them (its crc
// fields at 56 and 60); it is read as before: any object at prev that
// ends at or before the claim's start is taken for its predecessor.
//
// # Writers and the chain
//
// A writer (the lease holder) reads the chain, makes its local log agree
// with it (Reconcile), then claims: an empty object at the number after
// the highest listed, naming the chain's last object (Prev) with its
// writer, and its lease epoch. Before the claim it fills every free
// number between the lowest and the highest listed with an empty filler
// object, so that no older writer's PUT still in flight can land below
// the claim later. Its
// objects then take consecutive numbers; up to InFlight are written at
// once, and a send is answered once its bytes are in an object that, with
// every object of the writer before it, exists (Durable). A number a
// newer writer holds ends the writer (ErrDeposed): it acknowledges
// nothing past it. A number an older writer's late object holds (it had
// PUTs in flight when it lost the lease) breaks the writer's run there:
// it waits for its PUTs in flight, checks that the chain still ends with
// its own unbroken run (else it is deposed), fills the holes, claims
// again past the highest number and ships again from Durable.
//
// A reader (Read) walks the listed objects by number and keeps the newest
// writer's view, ordering writers by (epoch, claim): an older writer's
// object after a newer one's claim is skipped; a newer claim continues
// the object it names, number and writer (the objects after it that the
// claimer had not seen are dropped: their writer's run had a hole there,
// so it acknowledged none of them; an object of another writer at that
// number counts as trimmed); within a writer the chain ends at its first
// missing object, or one that starts inside the one before (one may start
// past it: the writer continued past what the segments hold). Fillers are
// skipped.
//
// Why nothing acknowledged is dropped: a writer acknowledges object k
// only when k and every object of its own from its claim to k exist.
// A newer writer's claim takes a number above every listed one and fills
// every hole below, so the older writer's run cannot be extended past
// what the newer writer listed; and what it listed unbroken is in the
// chain the newer writer continues. This holds without trusting clocks;
// the lease (Config.Fence, ValidFor) only keeps a deposed writer from
// wasting requests.
//
// # Trimming
//
// Once the manifest lists segments up to offset U, Trim(U) deletes every
// object below the first object of the chain that holds bytes past U
// (the skipped and filler objects below it too), in ascending order, one
// at a time, stopping at the first DELETE that fails. The chain's newest
// object (the writer's own, its claim at least) is never deleted: numbers
// never start again at #1, so a deposed writer's PUT that lands late is
// always older than the newest object listed and skipped. A chain whose
// claim was trimmed starts at its first listed object, which begins at or
// before U. When what is left holds nothing past U and nothing is in
// flight, the writer continues from U (the bytes before it are in
// segments): its next object continues the newest one left and starts
// past its end.
//
// # Costs and bounds
//
// At most one PUT per Linger while sends wait (the first waiting send
// starts the linger) or, while active, unshipped bytes remain; at most
// one per Batch bytes at a higher rate; none while idle; at most
// InFlight PUTs at once, each retried with jittered backoff (a 503
// SlowDown included) and bounded by AttemptTimeout and the lease; an
// attempt not answered within Hedge (by default twice the recent median)
// gets a second one beside it, the same bytes under the same conditional
// key, and the first to land commits the object (an object store's slow
// tail PUT holds no send back; a taken number holding this very header is
// success, as for a retry whose first answer was lost); put returns only
// once both attempts ended. Reconcile reads at most fetchAhead objects
// ahead; Read fetches headers eight at a time.
//
// # Goroutines
//
// Run owns shipping, the claim's successors and trimming; one goroutine
// per PUT in flight, and one per attempt of it (two while hedged). Await's callback runs on the caller's goroutine
// (already durable, or the writer stopped) or on Run's; it must not block.
//
// # Must never
//
// Overwrite an object (every write is a conditional create); acknowledge
// bytes past a hole in its own run; trim an object holding bytes the
// manifest does not; ship bytes it did not read from the log.
package wal
