package upload

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/tier/segfile"
)

// Kind is what a segment holds.
type Kind int

const (
	// KindCommitLog is a commitlog segment; Base is the global commitlog
	// offset of its first byte.
	KindCommitLog Kind = iota + 1
	// KindConsumeQueue is a consumequeue file of 20-byte entries; Base is
	// the queue index of its first entry.
	KindConsumeQueue
	// KindQueueIndex is the queue index of one commitlog segment (every
	// consumequeue entry whose record lies in it, in the store's format);
	// Base is the segment's base offset.
	KindQueueIndex
	// KindKeyIndex is the key index of one commitlog segment (KEYS and
	// UNIQ_KEY hashes → commitlog offsets, in the store's format); Base is
	// the segment's base offset.
	KindKeyIndex
)

// KeyIndexFrameSize is the frame size of key index objects: small, so a
// lookup (header, fanout slot, one bucket) fetches little.
const KeyIndexFrameSize = 64 << 10

func (k Kind) String() string {
	switch k {
	case KindCommitLog:
		return "commitlog"
	case KindConsumeQueue:
		return "consumequeue"
	case KindQueueIndex:
		return "queueindex"
	case KindKeyIndex:
		return "keyindex"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ConsumeQueueEntrySize is the size of one consumequeue entry; frames of a
// consumequeue object hold whole entries.
const ConsumeQueueEntrySize = 20

// IndexEntrySize is the size of the fixed-size entries that make up most
// of a queue index (a consumequeue entry) and of a key index (hash,
// offset, time): their objects' frames are compressed as byte planes of
// this stride (segfile.Options.Planes), which zstd shrinks more and
// faster (a 256 MiB segment's key index of 1 KiB records: 2.3× in a third
// of the time, against 1.9×).
const IndexEntrySize = 20

// Segment is a sealed local segment as the store describes it.
type Segment struct {
	Kind     Kind
	Name     string    // the store's name for it (file name); not used in keys
	Base     int64     // see Kind
	Length   int64     // bytes; -1: known only once opened (the source builds it in Open)
	Topic    string    // KindConsumeQueue only
	QueueID  int       // KindConsumeQueue only
	SealedAt time.Time // for the upload-lag metric; zero = unknown
	// Skip, for a commitlog segment (and its indexes) the Uploader asks
	// Open for, is how many bytes at the start of the local segment are
	// already in the bucket: the object holds the part from Base (the
	// local segment's base + Skip) on, Length bytes. 0 for a whole
	// segment. A broker that took over continues the uploaded log exactly
	// where the manifest ends, and its local segments may straddle that
	// end (the old master sealed by age, a slave never does). Sealed never
	// sets it.
	Skip int64
	// End is set with Skip on a part (and on the index kinds of a part):
	// the commitlog offset the part ends at, which may be before the
	// local segment's end (the next object the manifest lists starts
	// there). 0 for a whole segment.
	End int64
}

// SegmentReader is an open sealed segment. Close releases it (the store
// may then delete the file if it was uploaded).
type SegmentReader interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// Cutter may be implemented by a SegmentReader to give the record
// boundaries (ascending offsets within the segment) where frames may end,
// so a record never straddles two frames.
type Cutter interface {
	Cuts() []int64
}

// Layouter may be implemented by the SegmentReader of a commitlog segment
// to store its bytes in another order (segfile's Options.Layout): each
// queue's records together. nil: in order.
type Layouter interface {
	Layout() []segfile.Run
}

// SegmentSource is what the Uploader needs from the store. It is declared
// here, where it is consumed. Methods may be called concurrently.
type SegmentSource interface {
	// Sealed lists sealed segments not yet marked uploaded, in any order.
	Sealed(ctx context.Context) ([]Segment, error)
	// Open opens a listed segment for reading. A segment listed with
	// Length -1 may be built here; its SegmentReader's Size is its length.
	// The Uploader closes the reader as soon as the segment is encoded,
	// before the object is put (and retried), so what Open holds is held
	// only while one segment is encoded.
	Open(ctx context.Context, s Segment) (SegmentReader, error)
	// MarkUploaded records that s is in the bucket and in the manifest as
	// obj. It must be idempotent; after it returns nil, Sealed no longer
	// lists s.
	MarkUploaded(ctx context.Context, s Segment, obj Object) error
}

// Key returns the object key of s under prefix ("" for none), without an
// epoch: the key of objects written before keys carried the lease epoch,
// and of a broker without a lease (KeyAt with epoch 0).
func Key(prefix string, s Segment) (string, error) { return KeyAt(prefix, s, 0) }

// KeyAt returns the object key of s written under lease epoch epoch: for
// a commitlog segment and its index objects with epoch > 0,
// commitlog/<20-digit base>.<epoch>.seg (.idx, .kix), so no two lease
// holders ever write the same key: a late PUT of a deposed holder can
// never replace an object a newer one listed. Epoch 0 gives the key
// without an epoch (Key).
func KeyAt(prefix string, s Segment, epoch int64) (string, error) {
	if epoch < 0 {
		return "", fmt.Errorf("upload: segment %q: negative epoch %d", s.Name, epoch)
	}
	ext := func(e string) string {
		if epoch == 0 {
			return fmt.Sprintf("commitlog/%020d.%s", s.Base, e)
		}
		return fmt.Sprintf("commitlog/%020d.%d.%s", s.Base, epoch, e)
	}
	var k string
	switch s.Kind {
	case KindCommitLog:
		k = ext("seg")
	case KindConsumeQueue:
		if s.Topic == "" {
			return "", fmt.Errorf("upload: consumequeue segment %q has no topic", s.Name)
		}
		k = fmt.Sprintf("consumequeue/%s/%d/%020d.cq", s.Topic, s.QueueID, s.Base)
	case KindQueueIndex:
		k = ext("idx")
	case KindKeyIndex:
		k = ext("kix")
	default:
		return "", fmt.Errorf("upload: segment %q: unknown kind %v", s.Name, s.Kind)
	}
	if s.Base < 0 {
		return "", fmt.Errorf("upload: segment %q: negative base %d", s.Name, s.Base)
	}
	return join(prefix, k), nil
}

// KeyEpoch is the lease epoch in an object key KeyAt made (0 for a key
// without one).
func KeyEpoch(key string) int64 {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		key = key[i+1:]
	}
	// <20-digit base>.<epoch>.<ext>
	parts := strings.Split(key, ".")
	if len(parts) != 3 || len(parts[0]) != 20 {
		return 0
	}
	e, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || e < 0 {
		return 0
	}
	return e
}

// ManifestKey is the manifest's key under prefix.
func ManifestKey(prefix string) string { return join(prefix, "meta/manifest.json") }

func join(prefix, k string) string {
	for len(prefix) > 0 && prefix[len(prefix)-1] == '/' {
		prefix = prefix[:len(prefix)-1]
	}
	if prefix == "" {
		return k
	}
	return prefix + "/" + k
}

// kindOf parses Kind.String (a manifest object's Kind).
func kindOf(s string) (Kind, bool) {
	for _, k := range []Kind{KindCommitLog, KindConsumeQueue, KindQueueIndex, KindKeyIndex} {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}
