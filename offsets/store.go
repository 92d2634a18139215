package offsets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Errors an ObjectStore maps its own errors to. Check them with errors.Is.
var (
	// ErrObjectNotFound: the key has no object.
	ErrObjectNotFound = errors.New("offsets: object not found")
	// ErrPrecondition: a conditional Put found the object in another state
	// than the one it required, and stored nothing.
	ErrPrecondition = errors.New("offsets: precondition failed")
)

// ObjectStore is the object store the checkpoints and the lease live in: a
// tier.Bucket under the broker's prefix, adapted by the broker
// (broker/durability/objectstore.go). offsets declares it so that it need not
// import tier. Implementations are safe for concurrent use.
type ObjectStore interface {
	// Get returns the whole object and its ETag, both of one version of it:
	// never bytes of one version with the ETag of another, never a prefix.
	// A missing key gives ErrObjectNotFound.
	Get(ctx context.Context, key string) (data []byte, etag string, err error)

	// Put stores data under key, visible at once and whole or not at all.
	// With ifAbsent it succeeds only if no object exists under key; with a
	// non-empty ifMatch only if the current object has that ETag (a missing
	// object fails too); with neither it is unconditional. A failed
	// condition gives ErrPrecondition and stores nothing, and among
	// concurrent Puts with the same condition at most one succeeds.
	// It returns the new object's ETag.
	Put(ctx context.Context, key string, data []byte, ifAbsent bool, ifMatch string) (etag string, err error)

	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error

	// List returns every key that starts with prefix, in lexical order.
	List(ctx context.Context, prefix string) ([]string, error)
}

// NewMemStore returns an empty in-memory ObjectStore with the full contract
// (conditional writes included), for tests.
func NewMemStore() *MemStore {
	m := &MemStore{}
	m.mu.objs = map[string]memStoreObj{}
	return m
}

// MemStore is the in-memory ObjectStore NewMemStore returns.
type MemStore struct {
	// mu guards the map; held only around map access.
	mu struct {
		sync.Mutex
		objs map[string]memStoreObj
		next uint64 // last ETag handed out
	}
}

type memStoreObj struct {
	data []byte // never modified once stored
	etag string
}

// Get implements ObjectStore.
func (m *MemStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	m.mu.Lock()
	o, ok := m.mu.objs[key]
	m.mu.Unlock()
	if !ok {
		return nil, "", fmt.Errorf("%w: %q", ErrObjectNotFound, key)
	}
	return slices.Clone(o.data), o.etag, nil
}

// Put implements ObjectStore.
func (m *MemStore) Put(ctx context.Context, key string, data []byte, ifAbsent bool, ifMatch string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if ifAbsent && ifMatch != "" {
		return "", fmt.Errorf("offsets: put %q: both if-absent and if-match", key)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, exists := m.mu.objs[key]
	if ifAbsent && exists || ifMatch != "" && (!exists || cur.etag != ifMatch) {
		return "", fmt.Errorf("%w: put %q", ErrPrecondition, key)
	}
	m.mu.next++
	o := memStoreObj{data: slices.Clone(data), etag: "m" + strconv.FormatUint(m.mu.next, 10)}
	m.mu.objs[key] = o
	return o.etag, nil
}

// Delete implements ObjectStore.
func (m *MemStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.mu.objs, key)
	m.mu.Unlock()
	return nil
}

// List implements ObjectStore.
func (m *MemStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	var keys []string
	for k := range m.mu.objs {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	m.mu.Unlock()
	slices.Sort(keys)
	return keys, nil
}

// putDoc is a Put that is conditional on the last state seen: IfMatch(etag)
// when there was an object, IfAbsent when there was none.
func putDoc(ctx context.Context, s ObjectStore, key string, data []byte, etag string) (string, error) {
	if etag == "" {
		return s.Put(ctx, key, data, true, "")
	}
	return s.Put(ctx, key, data, false, etag)
}
