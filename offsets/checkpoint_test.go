package offsets_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/offsets/offsetstest"
)

func TestOffsetsCheckpointSuite(t *testing.T) {
	offsetstest.RunCheckpointSuite(t, func(t *testing.T) offsets.ObjectStore {
		return offsets.NewMemStore()
	})
}

// lossyStore applies a Put and then reports it as failed, once per arm:
// the response was lost, the write was not.
type lossyStore struct {
	offsets.ObjectStore
	mu   sync.Mutex
	lose string // key whose next Put "loses" its response
}

var errLost = errors.New("connection reset (response lost)")

func (s *lossyStore) arm(key string) {
	s.mu.Lock()
	s.lose = key
	s.mu.Unlock()
}

func (s *lossyStore) Put(ctx context.Context, key string, data []byte, ifAbsent bool, ifMatch string) (string, error) {
	etag, err := s.ObjectStore.Put(ctx, key, data, ifAbsent, ifMatch)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.lose == key {
		s.lose = ""
		return "", errLost
	}
	return etag, err
}

func TestOffsetsCheckpointLostResponse(t *testing.T) {
	ctx := t.Context()
	s := &lossyStore{ObjectStore: offsets.NewMemStore()}
	c, err := offsets.NewCheckpointer(s, offsetstest.ID("a"), offsets.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Save(ctx, offsetstest.Sections(1, "a")); err != nil {
		t.Fatal(err)
	}
	s.arm(offsets.CheckpointKey)
	if err := c.Save(ctx, offsetstest.Sections(2, "a")); !errors.Is(err, errLost) || errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("Save with a lost response = %v, want the transport error", err)
	}
	// v2 did land. The next Save meets a failed condition, sees its own
	// write, adopts it and writes v3 above it.
	if err := c.Save(ctx, offsetstest.Sections(3, "a")); err != nil {
		t.Fatalf("Save after a lost response: %v", err)
	}
	cp, err := offsets.ReadCheckpoint(ctx, s)
	if err != nil || cp.Version != 3 || c.Version() != 3 {
		t.Fatalf("after adoption: stored %+v, %v, Version() %d; want v3", cp, err, c.Version())
	}
	// Also for the very first (if-absent) write.
	s2 := &lossyStore{ObjectStore: offsets.NewMemStore()}
	s2.arm(offsets.CheckpointKey)
	c2, _ := offsets.NewCheckpointer(s2, offsetstest.ID("a"), offsets.CheckpointOptions{})
	if err := c2.Save(ctx, offsetstest.Sections(1, "a")); !errors.Is(err, errLost) {
		t.Fatalf("first Save = %v, want the transport error", err)
	}
	if err := c2.Save(ctx, offsetstest.Sections(2, "a")); err != nil || c2.Version() != 2 {
		t.Fatalf("Save after a lost first write = %v, Version() %d; want v2", err, c2.Version())
	}
}

func TestOffsetsCheckpointLeaseLostResponse(t *testing.T) {
	ctx := t.Context()
	clk := offsetstest.NewClock()
	s := &lossyStore{ObjectStore: offsets.NewMemStore()}

	// Acquire's write lands but its response is lost: acquiring again
	// finds our own lease and takes it.
	s.arm(offsets.LeaseKey)
	if _, err := offsets.AcquireLease(ctx, s, offsetstest.ID("a"), time.Minute, clk.Opts()); !errors.Is(err, errLost) {
		t.Fatalf("AcquireLease = %v, want the transport error", err)
	}
	l, err := offsets.AcquireLease(ctx, s, offsetstest.ID("a"), time.Minute, clk.Opts())
	if err != nil {
		t.Fatal(err)
	}
	// A Renew whose response is lost is adopted by the next one.
	s.arm(offsets.LeaseKey)
	clk.Advance(10 * time.Second)
	if err := l.Renew(ctx); !errors.Is(err, errLost) {
		t.Fatalf("Renew = %v, want the transport error", err)
	}
	clk.Advance(10 * time.Second)
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew after a lost response: %v", err)
	}
	if got, want := l.ExpiresAt(), clk.Now().Add(time.Minute); !got.Equal(want) {
		t.Fatalf("ExpiresAt = %v, want %v", got, want)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOffsetsCheckpointFormat(t *testing.T) {
	in := &offsets.Checkpoint{
		Version: 42,
		Writer:  offsetstest.ID("a"),
		Time:    time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC),
		Sections: map[string]json.RawMessage{
			"topics":          json.RawMessage(`{ "topicConfigTable" : {"a<b>&c": {"readQueueNums": 4}} }`),
			"consumerOffsets": json.RawMessage(`{"offsetTable":{}}`),
			"commitlog":       json.RawMessage(`{"maxOffset":123456789012}`),
		},
	}
	data, err := offsets.EncodeCheckpoint(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"format":1`, `"version":42`, `"broker":"broker-a"`, `"instance":"inst-a"`,
		`"host":"host-a"`, `"time":"2026-03-01T12:00:00.000000005Z"`, `"sectionsCrc32c":`, `"a<b>&c"`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("encoded checkpoint lacks %s:\n%s", want, data)
		}
	}
	out, err := offsets.DecodeCheckpoint(data)
	if err != nil {
		t.Fatal(err)
	}
	if out.Version != 42 || out.Writer != in.Writer || !out.Time.Equal(in.Time) || len(out.Sections) != 3 {
		t.Fatalf("round trip: %+v", out)
	}
	var topics struct {
		Table map[string]struct {
			ReadQueueNums int `json:"readQueueNums"`
		} `json:"topicConfigTable"`
	}
	if err := json.Unmarshal(out.Sections["topics"], &topics); err != nil || topics.Table["a<b>&c"].ReadQueueNums != 4 {
		t.Fatalf("topics section after round trip: %s, %v", out.Sections["topics"], err)
	}

	bad := func(name string, data []byte, wantCorrupt bool) {
		t.Helper()
		_, err := offsets.DecodeCheckpoint(data)
		if err == nil || errors.Is(err, offsets.ErrCorruptCheckpoint) != wantCorrupt {
			t.Errorf("%s: DecodeCheckpoint = %v (corrupt wanted: %v)", name, err, wantCorrupt)
		}
	}
	i := bytes.Index(data, []byte("123456789012"))
	flipped := bytes.Clone(data)
	flipped[i] = '9' // still valid JSON, wrong checksum
	bad("flipped digit", flipped, true)
	for n := range len(data) {
		if _, err := offsets.DecodeCheckpoint(data[:n]); !errors.Is(err, offsets.ErrCorruptCheckpoint) {
			t.Fatalf("prefix of %d bytes: %v, want ErrCorruptCheckpoint", n, err)
		}
	}
	bad("empty object", []byte(`{}`), true)
	bad("null sections", []byte(`{"format":1,"version":1,"writer":{"instance":"x"},"sectionsCrc32c":0,"sections":null}`), true)
	bad("newer format", bytes.Replace(data, []byte(`"format":1`), []byte(`"format":2`), 1), false)

	if got := offsets.CheckpointHistoryKey(7); got != "meta/checkpoint/00000000000000000007.json" {
		t.Errorf("CheckpointHistoryKey(7) = %q", got)
	}
	if got := offsets.LeaseTTL(10 * time.Second); got != 30*time.Second {
		t.Errorf("LeaseTTL(10s) = %v, want 30s", got)
	}
	if got := offsets.LeaseTTL(time.Minute); got != 3*time.Minute {
		t.Errorf("LeaseTTL(1m) = %v, want 3m", got)
	}
	if got := offsets.LeaseTTL(time.Second); got != offsets.MinLeaseTTL {
		t.Errorf("LeaseTTL(1s) = %v, want the minimum %v", got, offsets.MinLeaseTTL)
	}
}

func TestOffsetsCheckpointIdentity(t *testing.T) {
	a, err := offsets.NewIdentity("broker-a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := offsets.NewIdentity("broker-a")
	if a.Instance == b.Instance || len(a.Instance) != 16 || a.Host == "" {
		t.Fatalf("identities %v and %v", a, b)
	}
	if s := a.String(); !strings.Contains(s, "broker-a instance "+a.Instance+" on host "+a.Host) {
		t.Fatalf("String() = %q", s)
	}
	if _, err := offsets.NewCheckpointer(offsets.NewMemStore(), offsets.Identity{Broker: "x"}, offsets.CheckpointOptions{}); err == nil {
		t.Fatal("NewCheckpointer accepted an identity without an instance")
	}
	if _, err := offsets.AcquireLease(t.Context(), offsets.NewMemStore(), a, 0, offsets.AcquireOptions{}); err == nil {
		t.Fatal("AcquireLease accepted a zero TTL")
	}
}

func FuzzOffsetsCheckpointDecode(f *testing.F) {
	good, err := offsets.EncodeCheckpoint(&offsets.Checkpoint{Version: 1, Writer: offsetstest.ID("a"),
		Sections: offsetstest.Sections(1, "a")})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format":1,"version":1,"sections":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, err := offsets.DecodeCheckpoint(data)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes and decodes to the same checkpoint.
		again, err := offsets.EncodeCheckpoint(cp)
		if err != nil {
			t.Fatal(err)
		}
		cp2, err := offsets.DecodeCheckpoint(again)
		if err != nil || cp2.Version != cp.Version || cp2.Writer != cp.Writer || len(cp2.Sections) != len(cp.Sections) {
			t.Fatalf("re-decode: %+v, %v; first %+v", cp2, err, cp)
		}
	})
}
