package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Errors every provider maps its own errors to. Check them with errors.Is;
// providers wrap them with the key and the underlying cause.
var (
	// ErrNotExist: the key has no object.
	ErrNotExist = errors.New("tier: object does not exist")
	// ErrPreconditionFailed: a conditional write (PutIf) found the object in
	// a state other than the one it required.
	ErrPreconditionFailed = errors.New("tier: precondition failed")
	// ErrRange: a ReadAt range does not lie within the object.
	ErrRange = errors.New("tier: range not within object")
	// ErrInvalidKey: the key breaks the rules in the package doc.
	ErrInvalidKey = errors.New("tier: invalid key")
	// ErrAccessDenied: the store rejected the credentials or the signature,
	// or the credentials lack permission. Not retryable.
	ErrAccessDenied = errors.New("tier: access denied")
)

// Attrs describe a stored object.
type Attrs struct {
	// Size is the object's length in bytes.
	Size int64
	// ETag identifies this version of the object. It is opaque: compare it
	// only with ETags from the same Bucket, and pass it back in IfMatch.
	// Every write produces a new version; two writes of the same bytes may
	// or may not share an ETag (S3: same bytes, same single-part ETag).
	ETag string
}

// Reader is the read-only half of a Bucket, for code that must not write.
type Reader interface {
	// ReadAt fills all of p with the object's bytes starting at off.
	//
	// It never returns a partial result: if off < 0 or off+len(p) is past the
	// end of the object, it returns an error matching ErrRange and the
	// contents of p are unspecified. A missing key gives ErrNotExist.
	// len(p) == 0 checks that the object exists and off <= size.
	// Each call reads one version of the object: a ReadAt that races an
	// overwrite sees all old bytes or all new bytes, never a mix.
	// Parallel ReadAt calls on the same or different keys are safe.
	ReadAt(ctx context.Context, key string, p []byte, off int64) error

	// Stat returns the object's size and ETag; a missing key gives ErrNotExist.
	Stat(ctx context.Context, key string) (Attrs, error)

	// List calls fn for every key that starts with prefix (a plain string
	// prefix, not only whole segments: "a/b" matches "a/b/c" and "a/bc"),
	// in lexical byte order, with the object's size. prefix "" lists all.
	// If fn returns an error, List stops and returns it unchanged (wrapped
	// errors stay matchable with errors.Is). Objects written or deleted
	// while List runs may or may not be reported.
	List(ctx context.Context, prefix string, fn func(key string, size int64) error) error
}

// Bucket stores objects under keys. It is safe for concurrent use.
//
// Six verbs plus Close. Every method checks ctx before doing I/O and returns
// an error matching ctx.Err() when it is already done; a cancelled write
// leaves no visible object (or the previous one, intact).
type Bucket interface {
	Reader

	// Put stores exactly size bytes read from r under key, replacing any
	// object there.
	//
	// The new object becomes visible at once and completely, or not at all:
	// a failed or cancelled Put leaves no object (or the previous one,
	// intact), and a reader racing an overwrite sees the old or the new
	// bytes, never a mix. If r ends before size bytes, Put fails. Put reads
	// no further than size bytes. If r also implements io.ReaderAt and
	// io.Seeker, a provider may read parts of it in parallel starting at its
	// current offset, without moving it.
	//
	// Uploads are idempotent: putting the same bytes again is harmless.
	Put(ctx context.Context, key string, r io.Reader, size int64) error

	// PutIf is Put under a precondition, checked atomically with the write:
	// IfAbsent() succeeds only if no object exists under key, IfMatch(etag)
	// only if the current object has that ETag. Otherwise it returns an
	// error matching ErrPreconditionFailed and stores nothing; IfMatch on a
	// missing key is ErrPreconditionFailed too. Among concurrent PutIf calls
	// with the same precondition at most one succeeds. On success it returns
	// the new object's ETag.
	//
	// Meant for fencing and checkpoints, not bulk data: a failed
	// precondition on a large object may be detected only after the upload.
	PutIf(ctx context.Context, key string, r io.Reader, size int64, cond Cond) (etag string, err error)

	// Delete removes the object under key. Deleting a missing key is not an
	// error (S3 semantics).
	Delete(ctx context.Context, key string) error

	// Close releases idle connections and other resources. The Bucket must
	// not be used afterwards.
	io.Closer
}

// FrozenFile is a Put body that is a whole local file at offset 0 that
// nobody writes again (the uploader's spool): a bucket in a local
// directory on the same filesystem may link it into place instead of
// copying its bytes. The caller may remove its own name for the file
// once Put returned.
type FrozenFile interface {
	io.Reader
	FrozenPath() string
}

// Cond is the precondition of a PutIf. Build one with IfAbsent or IfMatch;
// the zero Cond is invalid.
type Cond struct {
	absent bool
	etag   string
}

// IfAbsent requires that no object exists under the key (HTTP If-None-Match: *).
func IfAbsent() Cond { return Cond{absent: true} }

// IfMatch requires that the current object has the given ETag (HTTP If-Match).
func IfMatch(etag string) Cond { return Cond{etag: etag} }

// Absent reports whether c is IfAbsent.
func (c Cond) Absent() bool { return c.absent }

// ETag returns the ETag an IfMatch condition requires ("" for IfAbsent).
func (c Cond) ETag() string { return c.etag }

// Validate rejects the zero Cond and IfMatch("").
func (c Cond) Validate() error {
	if !c.absent && c.etag == "" {
		return errors.New("tier: PutIf needs IfAbsent() or IfMatch(non-empty etag)")
	}
	return nil
}

// Check returns nil if c holds for the current state of key: exists says
// whether an object is stored there, and etag is its ETag (ignored when
// exists is false). Otherwise it returns an error matching
// ErrPreconditionFailed. Providers that evaluate a condition themselves,
// rather than sending it to a server, call it.
func (c Cond) Check(key string, exists bool, etag string) error {
	if c.absent && !exists || !c.absent && exists && etag == c.etag {
		return nil
	}
	return fmt.Errorf("%w: put %q %s", ErrPreconditionFailed, key, c)
}

// String describes the condition for error messages.
func (c Cond) String() string {
	if c.absent {
		return "if-absent"
	}
	return fmt.Sprintf("if-match %s", c.etag)
}

// MaxKeyLen is the longest key a Bucket accepts, in bytes (S3's limit).
const MaxKeyLen = 1024

// ValidateKey reports whether key follows the rules in the package doc. The
// error matches ErrInvalidKey.
func ValidateKey(key string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, why)
	}
	switch {
	case key == "":
		return bad("empty")
	case len(key) > MaxKeyLen:
		return bad("longer than 1024 bytes")
	case !utf8.ValidString(key):
		return bad("not valid UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return bad("contains NUL")
	case key[0] == '/':
		return bad("leading '/'")
	case key[len(key)-1] == '/':
		return bad("trailing '/'")
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return bad("empty segment")
		case ".", "..":
			return bad("'.' or '..' segment")
		}
	}
	return nil
}

// CheckPut validates the arguments common to Put and PutIf. Providers call
// it first.
func CheckPut(key string, r io.Reader, size int64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("tier: put %q: nil reader", key)
	}
	if size < 0 {
		return fmt.Errorf("tier: put %q: negative size %d", key, size)
	}
	return nil
}

// PutFunc is the one write path behind a provider's Put and PutIf: it
// stores size bytes read from r under key, under cond unless cond is nil,
// and returns the new object's ETag. Its methods check the arguments and
// implement the Bucket methods of the same names, so a provider writes
//
//	func (b *Bucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
//		return tier.PutFunc(b.put).Put(ctx, key, r, size)
//	}
//
// and the same for PutIf. The function may assume that CheckPut passed and
// that cond, if not nil, is valid.
type PutFunc func(ctx context.Context, key string, r io.Reader, size int64, cond *Cond) (etag string, err error)

// Put is Bucket.Put: it checks the arguments with CheckPut and calls f
// without a condition.
func (f PutFunc) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := CheckPut(key, r, size); err != nil {
		return err
	}
	_, err := f(ctx, key, r, size, nil)
	return err
}

// PutIf is Bucket.PutIf: it rejects an invalid cond (Cond.Validate), checks
// the other arguments with CheckPut and calls f with cond.
func (f PutFunc) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond Cond) (string, error) {
	if err := cond.Validate(); err != nil {
		return "", err
	}
	if err := CheckPut(key, r, size); err != nil {
		return "", err
	}
	return f(ctx, key, r, size, &cond)
}

// CheckRange returns ErrRange unless [off, off+n) lies within an object of
// the given size.
func CheckRange(key string, off int64, n int, size int64) error {
	if off < 0 || off > size || int64(n) > size-off {
		return fmt.Errorf("%w: %q [%d, %d) of %d bytes", ErrRange, key, off, off+int64(n), size)
	}
	return nil
}

// readAtAttempts bounds how often ReadAtRetrying fetches a range again
// after its body was cut short.
const readAtAttempts = 3

// ReadAtRetrying is the part of Bucket.ReadAt that HTTP providers share:
// key and context checks, the empty or negative range answered from Stat
// (ErrRange or nil), and one ranged read (read) repeated up to three times,
// with a short backoff, while its body is cut short (io.ErrUnexpectedEOF).
func ReadAtRetrying(ctx context.Context, key string, p []byte, off int64,
	stat func(ctx context.Context, key string) (Attrs, error),
	read func(ctx context.Context, key string, p []byte, off int64) error) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(p) == 0 || off < 0 {
		a, err := stat(ctx, key)
		if err != nil {
			return err
		}
		return CheckRange(key, off, len(p), a.Size)
	}
	var err error
	for attempt := range readAtAttempts {
		if err = read(ctx, key, p, off); err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
			return err
		}
		t := time.NewTimer(time.Duration(10<<attempt) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	return err
}
