package offsets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Checkpoint object keys, relative to the broker's prefix in the bucket.
const (
	// CheckpointKey is the latest checkpoint. Every write to it is
	// conditional on the ETag last seen (or on its absence), so it is the
	// fencing point between writers.
	CheckpointKey = "meta/checkpoint.json"
	// CheckpointHistoryPrefix holds copies of recent checkpoints, one per
	// version: meta/checkpoint/<20-digit version>.json.
	CheckpointHistoryPrefix = "meta/checkpoint/"
	// DefaultCheckpointHistory is how many history copies are kept.
	DefaultCheckpointHistory = 8
	// CheckpointFormat is the format number this package writes and reads.
	CheckpointFormat = 1
)

// CheckpointHistoryKey is the history copy of version v.
func CheckpointHistoryKey(v int64) string {
	return fmt.Sprintf("%s%020d.json", CheckpointHistoryPrefix, v)
}

// historyVersion parses a key made by CheckpointHistoryKey.
func historyVersion(key string) (int64, bool) {
	s, ok := strings.CutPrefix(key, CheckpointHistoryPrefix)
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, ".json")
	if !ok || len(s) != 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && v > 0
}

// ErrCorruptCheckpoint: a checkpoint object is not a valid checkpoint (bad
// JSON, checksum mismatch, missing fields).
var ErrCorruptCheckpoint = errors.New("offsets: corrupt checkpoint")

// Checkpoint is one saved state of the broker's metadata.
type Checkpoint struct {
	// Version is 1 for the first checkpoint on a prefix and previous+1 for
	// every later one, whoever writes it.
	Version int64
	// Writer is the broker instance that wrote it.
	Writer Identity
	// Time is the writer's clock when it wrote it.
	Time time.Time
	// Sections are the named, opaque parts: "consumerOffsets", "topics",
	// "subscriptionGroups", "delayOffsets", "commitlog", … Each is any JSON
	// value; offsets does not look inside.
	Sections map[string]json.RawMessage
}

// checkpointDoc is the JSON object stored. Sections are kept as the raw
// bytes so the checksum covers exactly what was written.
type checkpointDoc struct {
	Format         int             `json:"format"`
	Version        int64           `json:"version"`
	Writer         Identity        `json:"writer"`
	Time           time.Time       `json:"time"`
	SectionsCRC32C uint32          `json:"sectionsCrc32c"`
	Sections       json.RawMessage `json:"sections"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// marshalNoEscape is json.Marshal without HTML escaping, so the bytes are
// the same however often they are re-encoded.
func marshalNoEscape(v any) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(strings.TrimSuffix(b.String(), "\n")), nil
}

// EncodeCheckpoint returns the stored form of cp (see the package doc).
func EncodeCheckpoint(cp *Checkpoint) ([]byte, error) {
	sections := cp.Sections
	if sections == nil {
		sections = map[string]json.RawMessage{}
	}
	raw, err := marshalNoEscape(sections) // sorted keys, compact values
	if err != nil {
		return nil, fmt.Errorf("offsets: encode checkpoint sections: %w", err)
	}
	doc := checkpointDoc{
		Format: CheckpointFormat, Version: cp.Version, Writer: cp.Writer, Time: cp.Time.UTC(),
		SectionsCRC32C: crc32.Checksum(raw, castagnoli), Sections: raw,
	}
	return marshalNoEscape(doc)
}

// DecodeCheckpoint parses and verifies a stored checkpoint. A damaged one
// gives an error matching ErrCorruptCheckpoint; a format newer than
// CheckpointFormat gives another error (it is not damage, and must not be
// overwritten by an older program's fallback).
func DecodeCheckpoint(data []byte) (*Checkpoint, error) {
	var doc checkpointDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptCheckpoint, err)
	}
	if doc.Format > CheckpointFormat {
		return nil, fmt.Errorf("offsets: checkpoint format %d is newer than this broker's %d", doc.Format, CheckpointFormat)
	}
	switch {
	case doc.Format != CheckpointFormat:
		return nil, fmt.Errorf("%w: format %d", ErrCorruptCheckpoint, doc.Format)
	case doc.Version < 1:
		return nil, fmt.Errorf("%w: version %d", ErrCorruptCheckpoint, doc.Version)
	case doc.Writer.Instance == "":
		return nil, fmt.Errorf("%w: no writer instance", ErrCorruptCheckpoint)
	case len(doc.Sections) == 0:
		return nil, fmt.Errorf("%w: no sections", ErrCorruptCheckpoint)
	}
	if got := crc32.Checksum(doc.Sections, castagnoli); got != doc.SectionsCRC32C {
		return nil, fmt.Errorf("%w: sections crc32c %08x, stored %08x", ErrCorruptCheckpoint, got, doc.SectionsCRC32C)
	}
	cp := &Checkpoint{Version: doc.Version, Writer: doc.Writer, Time: doc.Time}
	if err := json.Unmarshal(doc.Sections, &cp.Sections); err != nil {
		return nil, fmt.Errorf("%w: sections: %v", ErrCorruptCheckpoint, err)
	}
	if cp.Sections == nil {
		return nil, fmt.Errorf("%w: sections are not an object", ErrCorruptCheckpoint)
	}
	return cp, nil
}

// ReadCheckpoint returns the newest readable checkpoint in store without
// writing anything: the latest object, or, when that is damaged or
// missing, the newest valid history copy. It returns (nil, nil) when the
// prefix has no checkpoint, and an error matching ErrCorruptCheckpoint when
// there are checkpoints but none is readable.
func ReadCheckpoint(ctx context.Context, store ObjectStore) (*Checkpoint, error) {
	r, err := readCheckpoint(ctx, store)
	return r.cp, err
}

type readResult struct {
	cp      *Checkpoint // nil: none readable
	etag    string      // of CheckpointKey; "" when it is missing
	version int64       // the highest version seen, latest or history
	history []int64     // history versions present (from List, if listed)
	listed  bool
}

func readCheckpoint(ctx context.Context, store ObjectStore) (readResult, error) {
	var r readResult
	data, etag, err := store.Get(ctx, CheckpointKey)
	var latestErr error
	switch {
	case errors.Is(err, ErrObjectNotFound):
	case err != nil:
		return r, fmt.Errorf("offsets: read %s: %w", CheckpointKey, err)
	default:
		r.etag = etag
		cp, err := DecodeCheckpoint(data)
		if err == nil {
			r.cp, r.version = cp, cp.Version
			return r, nil
		}
		if !errors.Is(err, ErrCorruptCheckpoint) {
			return r, fmt.Errorf("offsets: %s: %w", CheckpointKey, err)
		}
		latestErr = fmt.Errorf("offsets: %s: %w", CheckpointKey, err)
	}

	// The latest is missing or damaged: fall back to the newest valid copy.
	keys, err := store.List(ctx, CheckpointHistoryPrefix)
	if err != nil {
		return r, fmt.Errorf("offsets: list %s: %w", CheckpointHistoryPrefix, errors.Join(err, latestErr))
	}
	r.listed = true
	for _, k := range keys {
		if v, ok := historyVersion(k); ok {
			r.history = append(r.history, v)
		}
	}
	slices.Sort(r.history)
	if n := len(r.history); n > 0 {
		r.version = r.history[n-1]
	}
	for _, v := range slices.Backward(r.history) {
		data, _, err := store.Get(ctx, CheckpointHistoryKey(v))
		if errors.Is(err, ErrObjectNotFound) {
			continue // pruned meanwhile
		}
		if err != nil {
			return r, fmt.Errorf("offsets: read %s: %w", CheckpointHistoryKey(v), err)
		}
		cp, err := DecodeCheckpoint(data)
		if err != nil || cp.Version != v {
			continue
		}
		r.cp = cp
		return r, nil
	}
	if latestErr != nil {
		return r, fmt.Errorf("%w, and no history copy is readable", latestErr)
	}
	if len(r.history) > 0 {
		return r, fmt.Errorf("%w: %s is missing and no history copy is readable", ErrCorruptCheckpoint, CheckpointKey)
	}
	return r, nil
}

// CheckpointOptions tune a Checkpointer; the zero value means the defaults.
type CheckpointOptions struct {
	// History is how many history copies to keep (default
	// DefaultCheckpointHistory); negative keeps none.
	History int
	// Now is the clock for Checkpoint.Time (default time.Now).
	Now func() time.Time
}

// Checkpointer writes the checkpoints of one broker instance. Use one per
// Identity: two Checkpointers with the same instance id do not fence each
// other. Safe for concurrent use; Load and Save run one at a time.
type Checkpointer struct {
	store   ObjectStore
	id      Identity
	history int
	now     func() time.Time

	// mu serializes Load and Save and guards the fields below. Unlike most
	// locks in the project it IS held across I/O: one checkpoint write at
	// a time is the point.
	mu struct {
		sync.Mutex
		loaded  bool
		etag    string // of CheckpointKey as we last saw or wrote it; "" = absent
		version int64  // the highest version seen or written
		fenced  error  // sticky *FencedError
		pruned  bool   // history listed and pruned since Load
	}
}

// NewCheckpointer returns a Checkpointer writing as id. It does no I/O.
func NewCheckpointer(store ObjectStore, id Identity, opt CheckpointOptions) (*Checkpointer, error) {
	if err := id.validate(); err != nil {
		return nil, err
	}
	c := &Checkpointer{store: store, id: id, history: opt.History, now: opt.Now}
	if c.history == 0 {
		c.history = DefaultCheckpointHistory
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Load reads the newest checkpoint (see ReadCheckpoint: the latest object,
// else the newest valid history copy), remembers its version and ETag as
// the base of the next Save, and returns it; (nil, nil) when there is none.
// If every checkpoint is damaged it returns an error matching
// ErrCorruptCheckpoint, and a later Save still works: it overwrites the
// damaged object, conditionally, above every version seen.
//
// Loading adopts whatever is stored, whoever wrote it: that is how a new
// broker takes over a prefix. Hold the lease first.
func (c *Checkpointer) Load(ctx context.Context) (*Checkpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.fenced != nil {
		return nil, c.mu.fenced
	}
	return c.loadLocked(ctx)
}

func (c *Checkpointer) loadLocked(ctx context.Context) (*Checkpoint, error) {
	r, err := readCheckpoint(ctx, c.store)
	if err != nil && !errors.Is(err, ErrCorruptCheckpoint) {
		return nil, err
	}
	c.mu.loaded = true
	c.mu.etag = r.etag
	c.mu.version = r.version
	c.mu.pruned = false
	return r.cp, err
}

// Version is the version of the last checkpoint loaded or saved (0: none).
func (c *Checkpointer) Version() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.version
}

// Save writes sections as the next checkpoint (version previous+1) and
// returns when it is stored, whole. It loads first if Load was not called.
//
// The write is conditional on the checkpoint last seen. If another broker
// instance has written since, Save returns an error matching ErrFenced
// that names it, and this Checkpointer never writes again. If the stored
// checkpoint is our own (an earlier Save whose response was lost), Save
// adopts it and writes above it.
//
// Once the checkpoint is stored, Save copies it to the history and prunes
// old copies; an error there is returned too, but the checkpoint is saved
// (Version reports it).
func (c *Checkpointer) Save(ctx context.Context, sections map[string]json.RawMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.fenced != nil {
		return c.mu.fenced
	}
	if !c.mu.loaded {
		if _, err := c.loadLocked(ctx); err != nil && !errors.Is(err, ErrCorruptCheckpoint) {
			return err
		}
	}
	const attempts = 3 // each retry follows an adoption of our own write
	for range attempts {
		v := c.mu.version + 1
		data, err := EncodeCheckpoint(&Checkpoint{Version: v, Writer: c.id, Time: c.now(), Sections: sections})
		if err != nil {
			return err
		}
		etag, err := putDoc(ctx, c.store, CheckpointKey, data, c.mu.etag)
		if err == nil {
			c.mu.etag, c.mu.version = etag, v
			return c.historyLocked(ctx, v, data)
		}
		if !errors.Is(err, ErrPrecondition) {
			// Unknown outcome: it may have landed. The next Save finds
			// out (precondition failure, then our own writer → adopt).
			return fmt.Errorf("offsets: save checkpoint v%d: %w", v, err)
		}
		if err := c.adoptLocked(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("offsets: save checkpoint: condition failed %d times on our own writes", attempts)
}

// adoptLocked runs after a failed condition: it re-reads the checkpoint
// and either adopts it (our own write) or fences c.
func (c *Checkpointer) adoptLocked(ctx context.Context) error {
	data, etag, err := c.store.Get(ctx, CheckpointKey)
	if errors.Is(err, ErrObjectNotFound) {
		return c.fenceLocked(&FencedError{Key: CheckpointKey, Reason: "was deleted by someone else"})
	}
	if err != nil {
		return fmt.Errorf("offsets: re-read %s: %w", CheckpointKey, err)
	}
	cp, err := DecodeCheckpoint(data)
	if err != nil {
		return c.fenceLocked(&FencedError{Key: CheckpointKey, Reason: "was replaced by an unreadable object (" + err.Error() + ")"})
	}
	if !cp.Writer.SameWriter(c.id) && !(cp.Writer.Epoch < c.id.Epoch) {
		return c.fenceLocked(&FencedError{Key: CheckpointKey, By: cp.Writer})
	}
	// Ours, or a deposed holder's (an older epoch): a write it sent
	// before its lease ran out, applied by the server after we loaded.
	// It never holds the prefix again (epochs only grow), so it cannot
	// fence us: we write above it.
	c.mu.etag = etag
	c.mu.version = max(c.mu.version, cp.Version)
	return nil
}

func (c *Checkpointer) fenceLocked(e *FencedError) error {
	c.mu.fenced = e
	return e
}

// historyLocked writes the history copy of version v and deletes copies
// older than the last c.history.
func (c *Checkpointer) historyLocked(ctx context.Context, v int64, data []byte) error {
	if c.history < 0 {
		return nil
	}
	// IfAbsent: a version is written once; finding it there already (a
	// retry after a lost response) is fine.
	if _, err := c.store.Put(ctx, CheckpointHistoryKey(v), data, true, ""); err != nil && !errors.Is(err, ErrPrecondition) {
		return fmt.Errorf("offsets: checkpoint v%d saved; history copy: %w", v, err)
	}
	oldest := v - int64(c.history) // delete this and below
	if oldest < 1 {
		return nil
	}
	if c.mu.pruned {
		if err := c.store.Delete(ctx, CheckpointHistoryKey(oldest)); err != nil {
			return fmt.Errorf("offsets: checkpoint v%d saved; prune history: %w", v, err)
		}
		return nil
	}
	// First save since Load: clear whatever earlier runs left behind.
	keys, err := c.store.List(ctx, CheckpointHistoryPrefix)
	if err != nil {
		return fmt.Errorf("offsets: checkpoint v%d saved; list history: %w", v, err)
	}
	var errs []error
	for _, k := range keys {
		if hv, ok := historyVersion(k); ok && hv <= oldest {
			if err := c.store.Delete(ctx, k); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("offsets: checkpoint v%d saved; prune history: %w", v, errors.Join(errs...))
	}
	c.mu.pruned = true
	return nil
}
