package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// FlushMode says when a Put is acknowledged.
type FlushMode int

const (
	// FlushAsync acknowledges once the record is in the page cache; a flusher
	// fdatasyncs dirty data every FlushInterval.
	FlushAsync FlushMode = iota
	// FlushSync acknowledges after an fdatasync covering the record (group
	// commit: one fdatasync serves every writer queued behind it).
	FlushSync
)

func (m FlushMode) String() string {
	if m == FlushSync {
		return "sync"
	}
	return "async"
}

// Defaults for zero Options fields.
const (
	DefaultSegmentSize      = 128 << 20
	DefaultFlushInterval    = 500 * time.Millisecond
	DefaultSyncFlushTimeout = 5 * time.Second
	DefaultSyncGather       = time.Millisecond
	DefaultMaxMessageSize   = 4 << 20
	DefaultMinFreeBytes     = defaultMinFreeCap // the most MinFreeBytes defaults to (5% of the volume)
	DefaultCQEntriesPerFile = 300_000
	DefaultGetMaxMsgs       = 32
	DefaultGetMaxBytes      = 256 << 10
	DefaultZeroAhead        = 8 << 20
	// DefaultMaxTopics and DefaultMaxQueuesPerTopic bound the queues a Put
	// may create (Options.MaxTopics, MaxQueuesPerTopic).
	DefaultMaxTopics         = 4096
	DefaultMaxQueuesPerTopic = 1024
)

// Options configure a Store. Zero values mean the default.
type Options struct {
	FS               vfs.FS        // default vfs.OS()
	Dir              string        // holds commitlog/, consumequeue/, checkpoint, abort (required)
	SegmentSize      int64         // default 128 MiB; a record never spans segments
	Flush            FlushMode     // default FlushAsync
	FlushInterval    time.Duration // default 500ms: async commitlog flush; consumequeue+checkpoint in both modes
	SyncFlushTimeout time.Duration // default 5s → ErrFlushTimeout
	// SyncGather (FlushSync): after a group commit released several
	// waiters, how long the next one may wait for as many writers to ask
	// again (capped by the last fdatasync's duration); see groupCommitLoop.
	// Default DefaultSyncGather; negative: never wait.
	SyncGather     time.Duration
	MaxMessageSize int            // whole record, default 4 MiB → ErrMessageTooLarge
	StoreHost      netip.AddrPort // written in each record's STOREHOST
	MinFreeBytes   uint64         // refuse writes (ErrDiskFull) below this; default 5% of the volume, at most 256 MiB
	Logger         *slog.Logger   // default slog.Default()

	// OnDispatch is called after a record is visible to Get (it wakes held
	// long-poll pulls). It runs on the writer's goroutine, after the writer
	// lock is released; it must not block.
	OnDispatch func(topic string, queueID int32, queueOffset int64, tagsCode int64)

	// TagsCode computes the consume-queue tags code of a record found in the
	// commitlog without a Message (recovery, AppendRaw). Default: TagsHash of
	// the TAGS property. Put uses Message.TagsCode as given.
	TagsCode func(topic string, properties string) int64

	// CQEntriesPerFile is the number of 20-byte entries per consumequeue
	// file; default 300,000. Small values are for tests.
	CQEntriesPerFile int

	// MaxOpenQueueFiles bounds the consumequeue files open at once
	// (default DefaultMaxOpenQueueFiles, 1024): files open on first use
	// and the least recently used idle one is closed past the bound. Files
	// in use at that moment (a pread, the flusher) may exceed it briefly.
	MaxOpenQueueFiles int

	// MaxTopics and MaxQueuesPerTopic bound the consumequeues a Put may
	// create (defaults DefaultMaxTopics, 4096, and DefaultMaxQueuesPerTopic,
	// 1024): a Put that would create a topic past MaxTopics or a queue past
	// MaxQueuesPerTopic in its topic fails with ErrQueueLimit and stores
	// nothing. Queues that exist (recovered, replicated through AppendRaw)
	// are never refused.
	MaxTopics         int
	MaxQueuesPerTopic int

	// Cold serves commitlog bytes below the first local segment (segments
	// removed by DropSegment after upload). nil: no tier; DropSegment is
	// refused and offsets below the local log are not found.
	Cold ColdReader

	// ColdIndex serves the segment index blobs (BuildSegmentIndex) kept in
	// the tier. The store reads the consumequeue entries below its local
	// consumequeues from them, lazily: a store restored on an empty disk
	// (Restore) its history, and any store with Cold the entries of the
	// local consumequeue files it deletes once their records' segments
	// were dropped (reclaim; DropSegment must follow the upload of the
	// segment's blob). nil: every consumequeue file is kept.
	ColdIndex ColdIndex

	// ColdKeys serves the key index files of segments kept in the tier:
	// QueryByKey reads them for segments below the first local one. nil:
	// only local segments are searched.
	ColdKeys ColdKeyIndex

	// keyHash replaces keyHash (tests force collisions).
	keyHash func(topic, key string) uint32

	// ColdIndexCacheBytes bounds the cache of index directories and entry
	// blocks; default 32 MiB.
	ColdIndexCacheBytes int64

	// Restore starts the store from the tier when its directory holds no
	// commitlog segment (an empty disk); ignored, with a log line,
	// otherwise, except that a replica (Restore.Replica) whose log ends
	// below the restore point drops it and restores. See Restore.
	Restore *Restore

	// ZeroAhead is how many bytes of zeros a background goroutine keeps
	// ahead of the write position in the active commitlog segment, so
	// that the writes of the hot path overwrite cached, allocated pages
	// instead of growing the file. In FlushSync the zeros are also
	// fdatasynced, so the group commit's fdatasyncs commit no new file
	// size or extents (an fdatasync that must costs about twice as much);
	// default 8 MiB (DefaultZeroAhead). In FlushAsync they would not be
	// synced (the flusher writes them out with the records), and all they
	// save is the page-cache allocation of each new page on the writer's
	// goroutine, which the filler's own writes pay instead, plus the zeros:
	// off by default there (1 KiB single sends, one connection: 4.4 against
	// 4.8 µs of broker CPU per message with 1 MiB of zeros, six alternating
	// runs, and no less throughput). A positive value turns it on in
	// FlushAsync too. Negative disables it. Zeros are kept only up to
	// SegmentSize-MaxMessageSize. See the package doc.
	ZeroAhead int64
}

// ColdReader serves commitlog bytes whose local segment has been dropped
// after upload. ReadAt fills p from global commitlog offset off or errors.
// It returns n < len(p) only with an error (io.EOF past its end). The store
// calls it only for ranges below its first local segment, concurrently,
// with the caller's context.
type ColdReader interface {
	ReadAt(ctx context.Context, off int64, p []byte) (int, error)
}

// ColdLender is a ColdReader that can lend the bytes it holds instead of
// copying them: Get serves records below the local log as slices of them
// (records.go), with no buffer of its own and no copy.
type ColdLender interface {
	ColdReader
	// Lend returns between 1 and n bytes of the log at off, as a slice of
	// memory that is never written again (a cached, decoded frame): the
	// caller may keep it as long as it likes. Errors as ReadAt's.
	Lend(ctx context.Context, off int64, n int) ([]byte, error)
}

func (o *Options) withDefaults() (Options, error) {
	c := *o
	if c.Dir == "" {
		return c, errors.New("store: Options.Dir is required")
	}
	if c.FS == nil {
		c.FS = vfs.OS()
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = DefaultSegmentSize
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.SyncGather == 0 {
		c.SyncGather = DefaultSyncGather
	}
	if c.SyncFlushTimeout <= 0 {
		c.SyncFlushTimeout = DefaultSyncFlushTimeout
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.MinFreeBytes == 0 {
		c.MinFreeBytes = defaultMinFree(c.FS, c.Dir)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CQEntriesPerFile == 0 {
		c.CQEntriesPerFile = DefaultCQEntriesPerFile
	}
	if c.ColdIndexCacheBytes <= 0 {
		c.ColdIndexCacheBytes = DefaultColdIndexCacheBytes
	}
	if c.ZeroAhead == 0 {
		c.ZeroAhead = DefaultZeroAhead
		if c.Flush != FlushSync {
			c.ZeroAhead = -1 // see ZeroAhead
		}
	}
	if c.MaxOpenQueueFiles <= 0 {
		c.MaxOpenQueueFiles = DefaultMaxOpenQueueFiles
	}
	if c.MaxTopics <= 0 {
		c.MaxTopics = DefaultMaxTopics
	}
	if c.MaxQueuesPerTopic <= 0 {
		c.MaxQueuesPerTopic = DefaultMaxQueuesPerTopic
	}
	switch {
	case c.MaxMessageSize < RecordOverhead+32:
		return c, fmt.Errorf("store: MaxMessageSize %d is too small", c.MaxMessageSize)
	case c.SegmentSize < int64(c.MaxMessageSize):
		return c, fmt.Errorf("store: SegmentSize %d is smaller than MaxMessageSize %d", c.SegmentSize, c.MaxMessageSize)
	case c.CQEntriesPerFile < 1:
		return c, fmt.Errorf("store: CQEntriesPerFile %d must be positive", c.CQEntriesPerFile)
	case c.Flush != FlushAsync && c.Flush != FlushSync:
		return c, fmt.Errorf("store: unknown flush mode %d", c.Flush)
	}
	return c, nil
}

// Message is one message to store. The store fills in QUEUEOFFSET,
// PHYSICALOFFSET, STORETIMESTAMP, STOREHOST and BODYCRC.
type Message struct {
	Topic                     string
	QueueID                   int32
	Flag                      int32
	SysFlag                   int32
	BornTimestamp             int64
	BornHost                  netip.AddrPort
	ReconsumeTimes            int32
	PreparedTransactionOffset int64
	Body                      []byte
	Properties                string // encoded k\x01v\x02...
	TagsCode                  int64  // consumequeue tag hash (0 = no tag)
}

// PutResult describes one stored record.
type PutResult struct {
	PhysOffset     int64
	QueueOffset    int64
	Size           int32
	StoreTimestamp int64
}

// GetRequest asks for records of one queue from Offset on.
type GetRequest struct {
	Topic    string
	QueueID  int32
	Offset   int64
	MaxMsgs  int                       // default 32
	MaxBytes int                       // default 256 KiB; the first record is returned even if bigger
	Filter   func(tagsCode int64) bool // nil matches everything
	// Match, if set, is asked of every record the tags Filter passes, with
	// the record's encoded properties (name\x01value\x02..., aliasing a read
	// buffer: not to be kept); a record it refuses is skipped like a Filter
	// miss (SQL92 filters; getmatch.go says what the scan costs).
	Match func(props []byte) bool
	// MaxPhys, if positive, hides every record that ends past this
	// commitlog offset (sync_master's bound: what a slave holds; 1 hides
	// all). The queue then ends, for this Get, at the first hidden record:
	// the scan stops there, NextBeginOffset and MaxOffset are its queue
	// offset, HeldBack its end, and with nothing returned before it the
	// status is OffsetOverflowOne, as at the end of the queue.
	MaxPhys int64
}

// GetStatus is the outcome of Get (docs/rocketmq-protocol.md §4.3).
type GetStatus int

const (
	Found GetStatus = iota
	NoMatchedMessage
	NoMessageInQueue
	OffsetTooSmall
	OffsetOverflowOne
	OffsetOverflowBadly
	OffsetFoundNull
	MessageWasRemoving
)

var statusNames = [...]string{"FOUND", "NO_MATCHED_MESSAGE", "NO_MESSAGE_IN_QUEUE", "OFFSET_TOO_SMALL",
	"OFFSET_OVERFLOW_ONE", "OFFSET_OVERFLOW_BADLY", "OFFSET_FOUND_NULL", "MESSAGE_WAS_REMOVING"}

func (s GetStatus) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("GetStatus(%d)", int(s))
}

// GetResult is what Get found.
type GetResult struct {
	Status                                GetStatus
	NextBeginOffset, MinOffset, MaxOffset int64
	Records                               [][]byte // each one whole V1 record, byte-identical to the log
	Bytes                                 int      // sum of len(Records[i])
	// Chunks, when not nil, holds the bytes of Records back to back in
	// fewer, larger slices (records adjacent in one buffer or one lent
	// cold frame share a chunk): what a response sends.
	Chunks [][]byte
	// HeldBack is, when GetRequest.MaxPhys stopped the scan, the commitlog
	// end of the first record it hid (0: none): the bound that shows it.
	HeldBack int64
}

// SegmentInfo describes a local commitlog segment.
type SegmentInfo struct {
	Base   int64  // global offset of its first byte (its file name)
	Length int64  // bytes; the next segment starts at Base+Length
	Path   string // file path under Options.Dir, to open through Options.FS
	Sealed bool   // final: no record will be added (always true from SealedSegments)
	// Created is when the segment file was started; after a restart, the
	// store time of its first record (the file's mtime when it is empty).
	Created time.Time
	// FirstStoreTime and LastStoreTime are the STORETIMESTAMPs (unix ms) of
	// its first and last records; 0 when unknown (empty segment, or a
	// segment recovered without a scan has LastStoreTime 0).
	FirstStoreTime, LastStoreTime int64
}
