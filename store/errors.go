package store

import (
	"errors"
	"fmt"
)

// Errors returned by the store. Wrapped errors match them with errors.Is.
var (
	// ErrMessageTooLarge: a record exceeds MaxMessageSize, a topic exceeds
	// 127 bytes or properties exceed 32767 bytes (MESSAGE_ILLEGAL).
	ErrMessageTooLarge = errors.New("store: message too large")
	// ErrFlushTimeout: FlushSync did not complete within SyncFlushTimeout.
	// The message was written and may still become durable (FLUSH_DISK_TIMEOUT).
	ErrFlushTimeout = errors.New("store: flush timeout")
	// ErrDiskFull: free space is below MinFreeBytes, or a write hit ENOSPC.
	// Not sticky: Put works again once space is freed.
	ErrDiskFull = errors.New("store: disk full")
	// ErrCorrupt marks data that failed a magic, length or CRC check.
	ErrCorrupt = errors.New("store: corrupt data")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrNotFound: no record at that commitlog offset, or an empty queue.
	ErrNotFound = errors.New("store: not found")
	// ErrOffsetMismatch: AppendRaw was given bytes that do not start at the
	// end of the local commitlog.
	ErrOffsetMismatch = errors.New("store: commitlog offset mismatch")
	// ErrQueueNumbering (with ErrOffsetMismatch): AppendRaw was given a
	// record numbered below its queue's restored (or reclaimed) range: the
	// writer of those bytes numbers the queue otherwise than this store's
	// restore did.
	ErrQueueNumbering = errors.New("store: queue offset below the queue's restored range")
	// ErrColdRead: Options.Cold failed to serve bytes below the local log.
	// The cold reader's own error is wrapped too.
	ErrColdRead = errors.New("store: cold read failed")
	// ErrQueueLimit: a Put would create a topic past Options.MaxTopics or
	// a queue past Options.MaxQueuesPerTopic; nothing was stored.
	ErrQueueLimit = errors.New("store: queue limit")
	// ErrCannotDrop: DropSegment was refused (active segment, not the
	// oldest local segment, or no Options.Cold).
	ErrCannotDrop = errors.New("store: segment cannot be dropped")
)

// corruptError is an error marked as corruption.
type corruptError struct{ msg string }

func (e *corruptError) Error() string        { return "store: corrupt: " + e.msg }
func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }

func corruptf(format string, args ...any) error {
	return &corruptError{msg: fmt.Sprintf(format, args...)}
}
