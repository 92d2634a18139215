package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stratamq/stratamq/infra/vfs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	testStoreHost = netip.MustParseAddrPort("10.1.2.3:10911")
	testBornHost  = netip.MustParseAddrPort("192.168.0.7:54321")
	quietLog      = slog.New(slog.NewTextHandler(io.Discard, nil))
)

func testOpts(fs vfs.FS) Options {
	return Options{
		FS:             fs,
		Dir:            "/data/store",
		SegmentSize:    64 << 10,
		MaxMessageSize: 8 << 10,
		FlushInterval:  time.Hour, // tests flush explicitly
		StoreHost:      testStoreHost,
		MinFreeBytes:   1,
		Logger:         quietLog,
	}
}

func mustOpen(t testing.TB, o Options) *Store {
	t.Helper()
	s, err := Open(o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func mustClose(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func msg(topic string, qid int32, body string) Message {
	return Message{
		Topic: topic, QueueID: qid, Body: []byte(body), BornHost: testBornHost,
		BornTimestamp: 1700000000000, Flag: 7, Properties: "TAGS\x01a\x02KEYS\x01k1\x02",
		TagsCode: TagsHash("a"),
	}
}

func mustPut(t testing.TB, s *Store, msgs ...Message) []PutResult {
	t.Helper()
	res, err := s.Put(context.Background(), msgs)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	return res
}

// readQueue returns the decoded records of a queue from offset 0 to max.
func readQueue(t testing.TB, s *Store, topic string, qid int32) []Record {
	t.Helper()
	var out []Record
	off := s.MinQueueOffset(topic, qid)
	for i := 0; i < 100000; i++ {
		r, err := s.Get(context.Background(), GetRequest{Topic: topic, QueueID: qid, Offset: off, MaxMsgs: 32})
		if err != nil {
			t.Fatalf("get %s/%d@%d: %v", topic, qid, off, err)
		}
		if r.Status != Found {
			if r.Status != OffsetOverflowOne && r.Status != NoMessageInQueue {
				t.Fatalf("get %s/%d@%d: status %v", topic, qid, off, r.Status)
			}
			return out
		}
		for _, b := range r.Records {
			rec, n, err := DecodeRecord(b)
			if err != nil || n != len(b) {
				t.Fatalf("decode: %v (n=%d len=%d)", err, n, len(b))
			}
			out = append(out, rec)
		}
		off = r.NextBeginOffset
	}
	t.Fatal("readQueue did not finish")
	return nil
}

func TestStorePutGetRoundTrip(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	var all []PutResult
	for i := range 50 {
		m := msg(fmt.Sprintf("T%d", i%3), int32(i%4), fmt.Sprintf("body-%d", i))
		all = append(all, mustPut(t, s, m)...)
	}
	// A batch: consecutive records and queue offsets.
	batch := mustPut(t, s, msg("T0", 0, "b1"), msg("T0", 0, "b2"), msg("T0", 0, "b3"))
	for i := 1; i < 3; i++ {
		if batch[i].PhysOffset != batch[i-1].PhysOffset+int64(batch[i-1].Size) || batch[i].QueueOffset != batch[i-1].QueueOffset+1 {
			t.Fatalf("batch not consecutive: %+v", batch)
		}
	}
	if got := s.MaxPhysOffset(); got != batch[2].PhysOffset+int64(batch[2].Size) {
		t.Fatalf("max phys %d", got)
	}
	total := 0
	for ti := range 3 {
		for q := range int32(4) {
			recs := readQueue(t, s, fmt.Sprintf("T%d", ti), q)
			total += len(recs)
			for i, r := range recs {
				if r.QueueOffset != int64(i) || r.QueueID != q || r.Topic != fmt.Sprintf("T%d", ti) {
					t.Fatalf("record %d: %+v", i, r)
				}
				if r.StoreHost != testStoreHost || r.BornHost != testBornHost || r.Flag != 7 || r.Properties != "TAGS\x01a\x02KEYS\x01k1\x02" {
					t.Fatalf("fields: %+v", r)
				}
				raw, err := s.ReadRecord(r.PhysOffset)
				if err != nil {
					t.Fatal(err)
				}
				if r2, _, _ := DecodeRecord(raw); !bytes.Equal(r2.Body, r.Body) {
					t.Fatalf("ReadRecord body %q != %q", r2.Body, r.Body)
				}
			}
		}
	}
	if total != 53 {
		t.Fatalf("read %d records, want 53", total)
	}
	if _, err := s.ReadRecord(all[1].PhysOffset + 1); err == nil {
		t.Fatal("ReadRecord at a non-record offset succeeded")
	}
	if _, err := s.ReadRecord(s.MaxPhysOffset()); err == nil {
		t.Fatal("ReadRecord past the end succeeded")
	}
}

func TestStoreIPv6Hosts(t *testing.T) {
	o := testOpts(vfs.NewMem())
	o.StoreHost = netip.MustParseAddrPort("[2001:db8::1]:10911")
	s := mustOpen(t, o)
	defer mustClose(t, s)
	m := msg("T", 0, "v6")
	m.BornHost = netip.MustParseAddrPort("[2001:db8::2]:1234")
	res := mustPut(t, s, m)
	if res[0].Size != int32(RecordOverhead+24+2+1+len(m.Properties)) {
		t.Fatalf("size %d", res[0].Size)
	}
	recs := readQueue(t, s, "T", 0)
	if len(recs) != 1 || recs[0].BornHost != m.BornHost || recs[0].StoreHost != o.StoreHost || string(recs[0].Body) != "v6" {
		t.Fatalf("got %+v", recs)
	}
	if id := EncodeMessageID(o.StoreHost, 5); len(id) != 56 {
		t.Fatalf("v6 id %q", id)
	}
}

func TestStoreValidation(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	big := msg("T", 0, string(make([]byte, 8<<10)))
	longTopic := msg(string(bytes.Repeat([]byte("t"), 128)), 0, "x")
	longProps := msg("T", 0, "x")
	longProps.Properties = string(make([]byte, 32768))
	for name, m := range map[string]Message{"body": big, "topic": longTopic, "props": longProps} {
		_, err := s.Put(context.Background(), []Message{msg("T", 0, "ok"), m})
		if !errors.Is(err, ErrMessageTooLarge) {
			t.Fatalf("%s: err = %v, want ErrMessageTooLarge", name, err)
		}
	}
	if s.MaxQueueOffset("T", 0) != 0 || s.MaxPhysOffset() != 0 {
		t.Fatal("a rejected batch was partly stored")
	}
}

// TestStoreFits: Fits answers true only when m, grown by the given bytes of
// properties and stored under any topic, is still a record Validate takes.
func TestStoreFits(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	limit := s.opts.MaxMessageSize
	for _, body := range []int{0, 100, limit / 2, limit - 2*RecordOverhead - 300, limit - RecordOverhead - 130, limit} {
		m := msg("T", 0, string(make([]byte, body)))
		for _, grow := range []int{0, 128} {
			got := s.Fits(&m, grow)
			grown := m
			grown.Topic = string(bytes.Repeat([]byte("t"), MaxTopicLen))
			grown.Properties = m.Properties + string(make([]byte, grow))
			if got && s.Validate(&grown) != nil {
				t.Fatalf("body %d grow %d: Fits true, but the grown copy is refused: %v", body, grow, s.Validate(&grown))
			}
			if !got && body < limit/2 {
				t.Fatalf("body %d grow %d: Fits false far below the limit %d", body, grow, limit)
			}
		}
	}
	bad := msg("T", -1, "x")
	if s.Fits(&bad, 0) {
		t.Fatal("Fits true for a negative queue id")
	}
}

func TestStoreTagsHashAndMessageID(t *testing.T) {
	cases := map[string]int64{
		"":                   0,
		"TagA":               2598919,
		"hello world":        1794106052,
		"polygenelubricants": -2147483648,
		"\U0001F600":         1772899,
		"é":                  233,
	}
	for s, want := range cases {
		if got := TagsHash(s); got != want {
			t.Errorf("TagsHash(%q) = %d, want %d", s, got, want)
		}
	}
	id := EncodeMessageID(netip.MustParseAddrPort("127.0.0.1:10911"), 0x1234)
	if id != "7F00000100002A9F0000000000001234" {
		t.Fatalf("id = %s", id)
	}
	host, off, err := DecodeMessageID(id)
	if err != nil || off != 0x1234 || host.String() != "127.0.0.1:10911" {
		t.Fatalf("decode id: %v %d %v", host, off, err)
	}
}

func TestStoreSegmentRollMixedSizes(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.SegmentSize = 16 << 10
	o.MaxMessageSize = 6 << 10
	s := mustOpen(t, o)
	sizes := []int{10, 5000, 300, 5900, 1, 4000, 4000, 4000, 77, 5800, 2500}
	var res []PutResult
	for round := range 6 {
		for i, n := range sizes {
			body := bytes.Repeat([]byte{byte('a' + (i+round)%26)}, n)
			m := Message{Topic: "roll", QueueID: int32(i % 2), Body: body}
			if i%4 == 0 {
				res = append(res, mustPut(t, s, m, m)...)
			} else {
				res = append(res, mustPut(t, s, m)...)
			}
		}
		if round == 2 {
			if err := s.SealActive(); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(s *Store) {
		t.Helper()
		segs := s.SealedSegments()
		if len(segs) < 5 {
			t.Fatalf("only %d sealed segments", len(segs))
		}
		for i, sg := range segs {
			if sg.Length > o.SegmentSize {
				t.Fatalf("segment %d is %d bytes", i, sg.Length)
			}
			if i > 0 && sg.Base != segs[i-1].Base+segs[i-1].Length {
				t.Fatalf("segments not contiguous: %+v", segs)
			}
			if want := fmt.Sprintf("/data/store/commitlog/%020d", sg.Base); sg.Path != want {
				t.Fatalf("path %s, want %s", sg.Path, want)
			}
		}
		for _, r := range res {
			raw, err := s.ReadRecord(r.PhysOffset)
			if err != nil {
				t.Fatalf("ReadRecord(%d): %v", r.PhysOffset, err)
			}
			if len(raw) != int(r.Size) {
				t.Fatalf("size %d != %d", len(raw), r.Size)
			}
		}
		n := len(readQueue(t, s, "roll", 0)) + len(readQueue(t, s, "roll", 1))
		if n != len(res) {
			t.Fatalf("queues hold %d records, want %d", n, len(res))
		}
	}
	check(s)
	mustClose(t, s)
	s = mustOpen(t, o)
	defer mustClose(t, s)
	check(s)
}
