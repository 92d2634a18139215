package durability

import (
	"encoding/json"
	"slices"

	"github.com/stratamq/stratamq/offsets"
)

// SectionCommitLog is the checkpoint section this package writes itself
// (CommitLog); every other section comes from the Source.
const SectionCommitLog = "commitlog"

// CommitLog is the "commitlog" checkpoint section: how far the log got
// durably, how far it may get before the next checkpoint (Reserved: a
// broker restored after an unclean loss starts its log there, so no offset
// or msgId handed out is ever reused; the store refuses writes past it),
// the retention floor and every queue's range.
type CommitLog struct {
	// HWM is the durable (fdatasynced) end of the log when the checkpoint
	// was taken: what a power loss cannot take back.
	HWM      int64                            `json:"hwm"`
	Reserved int64                            `json:"reserved"`
	Floor    int64                            `json:"floor"`
	Queues   map[string]map[string]QueueRange `json:"queues"`
	// NewQueueReserved is the reservation of every queue of a checkpointed
	// topic that Queues does not list (no message yet): after an unclean
	// loss such queues resume there.
	NewQueueReserved int64 `json:"newQueueReserved,omitempty"`
	// Clean: written at a graceful shutdown after a complete drain: every
	// message is in the bucket, the ranges are exact and no reservation is
	// needed.
	Clean bool `json:"clean,omitempty"`
	// DrainFailed: written at a graceful shutdown whose drain did not
	// finish: these commitlog offsets are only on that broker's disk. A
	// broker on an empty disk refuses to start over them unless
	// STRATAMQ_ACCEPT_LOSS is set.
	DrainFailed *OffsetRange `json:"drainFailed,omitempty"`
	// Epochs is the epoch history, oldest first: where each epoch's master
	// took the log over (broker/failover; a rejoining slave cuts its
	// log by it).
	Epochs []EpochStart `json:"epochs,omitempty"`
	// Deleted is the store's tombstones (store.Tombstones): per deleted
	// queue, the offset its next incarnation starts at, so a restore
	// neither brings the deleted queue back nor numbers it from 0 again.
	Deleted map[string]map[string]int64 `json:"deleted,omitempty"`
	// BucketOnly: its writer ran the bucket WAL and handed out nothing
	// the WAL did not hold (every topic bucket-durable: sends answered and
	// records shown only once the WAL holds them), and would checkpoint
	// again before that changed. A broker restoring from the WAL on an
	// empty disk then continues at the WAL's end; otherwise (older
	// checkpoints too) records past it may have been acknowledged, and it
	// resumes past the reservations (broker/wire_walfold.go).
	BucketOnly bool `json:"bucketOnly,omitempty"`
}

// OffsetRange is [From, To) of the commitlog.
type OffsetRange struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// QueueRange is one queue's range; Reserved is past every queue offset
// that may be handed out before the next checkpoint (no queue offset is
// reused after an unclean loss).
type QueueRange struct {
	Min      int64 `json:"min"`
	Max      int64 `json:"max"`
	Reserved int64 `json:"reserved,omitempty"`
}

// EpochStart is one entry of the checkpoint's epoch history: epoch Epoch
// began with the log inherited from older epochs up to From.
type EpochStart struct {
	Epoch int64 `json:"epoch"`
	From  int64 `json:"from"`
}

// MaxEpochHistory bounds the history kept in the checkpoint; a broker
// whose last epoch is older than it rejoins from the bucket alone.
const MaxEpochHistory = 64

// WithEpoch is h plus {epoch, from}, older entries above epoch dropped,
// trimmed to MaxEpochHistory.
func WithEpoch(h []EpochStart, epoch, from int64) []EpochStart {
	out := slices.DeleteFunc(slices.Clone(h), func(e EpochStart) bool { return e.Epoch >= epoch })
	out = append(out, EpochStart{Epoch: epoch, From: from})
	if n := len(out) - MaxEpochHistory; n > 0 {
		out = out[n:]
	}
	return out
}

// DecodeCommitLog decodes cp's commitlog section. ok is false when cp is
// nil or has none; err is set (and ok false) when the section does not
// decode.
func DecodeCommitLog(cp *offsets.Checkpoint) (cl CommitLog, ok bool, err error) {
	if cp == nil {
		return CommitLog{}, false, nil
	}
	raw, ok := cp.Sections[SectionCommitLog]
	if !ok {
		return CommitLog{}, false, nil
	}
	if err := json.Unmarshal(raw, &cl); err != nil {
		return CommitLog{}, false, err
	}
	return cl, true, nil
}
