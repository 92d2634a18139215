package store

import (
	"errors"
	"slices"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestLogRecordsReadsTheClosedLog: LogRecords gives each valid record's
// offset, topic and properties from a record boundary to the log's end
// (the end LogEnd finds), across segments; from a mid-record offset, or
// past the log, it reads nothing; fn's error stops it.
func TestLogRecordsReadsTheClosedLog(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.SegmentSize, o.MaxMessageSize = 4<<10, 1<<10 // several segments
	s := mustOpen(t, o)
	var res []PutResult
	var topics []string
	for i := range 40 {
		topic := "A"
		if i%3 == 0 {
			topic = "B"
		}
		res = append(res, mustPut(t, s, msg(topic, 0, "body-of-a-record-of-some-length"))...)
		topics = append(topics, topic)
	}
	mustClose(t, s)
	_, logEnd, err := LogEnd(fs, o.Dir, o.MaxMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	last := res[len(res)-1]
	if want := last.PhysOffset + int64(last.Size); logEnd != want {
		t.Fatalf("LogEnd %d, want %d", logEnd, want)
	}
	from := 10
	var gotPhys []int64
	var gotTopics []string
	end, err := LogRecords(fs, o.Dir, o.MaxMessageSize, res[from].PhysOffset, func(phys int64, topic, props string) error {
		gotPhys, gotTopics = append(gotPhys, phys), append(gotTopics, topic)
		if props == "" {
			t.Errorf("record at %d: no properties", phys)
		}
		return nil
	})
	if err != nil || end != logEnd {
		t.Fatalf("LogRecords: end %d err %v, want end %d", end, err, logEnd)
	}
	var wantPhys []int64
	for _, r := range res[from:] {
		wantPhys = append(wantPhys, r.PhysOffset)
	}
	if !slices.Equal(gotPhys, wantPhys) || !slices.Equal(gotTopics, topics[from:]) {
		t.Fatalf("LogRecords read %v %v, want %v %v", gotPhys, gotTopics, wantPhys, topics[from:])
	}
	n := 0
	count := func(int64, string, string) error { n++; return nil }
	if end, err := LogRecords(fs, o.Dir, o.MaxMessageSize, res[from].PhysOffset+1, count); err != nil || n != 0 || end != res[from].PhysOffset+1 {
		t.Fatalf("from mid-record: %d records, end %d, err %v; want none", n, end, err)
	}
	if end, err := LogRecords(fs, o.Dir, o.MaxMessageSize, logEnd+100, count); err != nil || n != 0 || end != logEnd+100 {
		t.Fatalf("from past the log: %d records, end %d, err %v; want none", n, end, err)
	}
	stop := errors.New("stop")
	if _, err := LogRecords(fs, o.Dir, o.MaxMessageSize, 0, func(int64, string, string) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("fn's error: %v after %d records, want it returned after 1", err, n)
	}
}
