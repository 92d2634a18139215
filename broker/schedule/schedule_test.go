package schedule

import (
	"encoding/json"
	"math"
	"math/bits"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
)

// TestScheduleTimerHops: a timer due in r ms goes to the largest hop not
// past it, so following the hops lands on the due time, never past it,
// in at most one hop per bit of r in seconds.
func TestScheduleTimerHops(t *testing.T) {
	n := timerQueuesFor(DefaultTimerMaxDelay)
	if n != 24 {
		t.Fatalf("timer queues for 90 days: %d, want 24 (2^23 s > 90 days)", n)
	}
	for _, r := range []int64{1, 999, 1000, 1999, 2000, 3999, 60_000, 3_600_000 + 17, DefaultTimerMaxDelay.Milliseconds()} {
		left, hops := r, 0
		for left >= 1000 {
			k := timerQueueFor(left, n)
			d := timerHop(k).Milliseconds()
			if k < 1 || d > left || (k < n-1 && 2*d <= left) {
				t.Fatalf("r=%d: %d ms left went to queue %d (hop %d ms)", r, left, k, d)
			}
			left -= d
			hops++
		}
		if timerQueueFor(left, n) != 0 {
			t.Fatalf("r=%d: %d ms left not in queue 0", r, left)
		}
		if limit := bits.Len64(uint64(r / 1000)); hops > limit {
			t.Fatalf("r=%d: %d hops, want at most %d", r, hops, limit)
		}
	}
	// With STRATAMQ_RETENTION no hop is longer than a quarter of it.
	top := timerTop(n, 7*24*time.Hour)
	if hop := timerHop(top); hop > 42*time.Hour || 2*hop <= 42*time.Hour {
		t.Fatalf("retention 7 days: longest hop %s, want the largest power of two seconds within 42h", hop)
	}
	if k := timerQueueFor(DefaultTimerMaxDelay.Milliseconds(), top+1); k != top {
		t.Fatalf("a 90-day timer under 7-day retention goes to queue %d, want %d", k, top)
	}
}

// TestScheduleProgressMerge: progress loads from delayOffset.json and is
// raised, never lowered, by a checkpoint's sections (a fresh disk, a
// promoted slave); sections encode it in RocketMQ's delayOffset format.
func TestScheduleProgressMerge(t *testing.T) {
	fs := vfs.OS()
	dir := t.TempDir()
	if err := offsets.WriteFileAtomic(fs, dir+"/"+FileName, []byte(`{"offsetTable":{"1":5,"3":9},"timerOffsetTable":{"0":2}}`)); err != nil {
		t.Fatal(err)
	}
	l, err := Load(fs, dir, false, json.RawMessage(`{"offsetTable":{"1":7,"3":4}}`), json.RawMessage(`{"offsetTable":{"0":1,"5":3}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := newService(Config{Dir: dir}, Deps{FS: fs}, l)
	want := map[Queue]int64{{DelayTopic, 0}: 7, {DelayTopic, 2}: 9, {TimerTopic, 0}: 2, {TimerTopic, 5}: 3}
	for k, v := range want {
		if got := s.Progress(k); got != v {
			t.Errorf("%v: progress %d, want %d", k, got, v)
		}
	}
	d, tm, err := s.Sections(math.MaxInt64)
	if err != nil || string(d) != `{"offsetTable":{"1":7,"3":9}}` || string(tm) != `{"offsetTable":{"0":2,"5":3}}` {
		t.Fatalf("sections %s %s %v", d, tm, err)
	}
	if err := offsets.WriteFileAtomic(fs, dir+"/"+FileName, []byte(`{"offsetTable":`)); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(fs, dir, false, nil, nil); err == nil || !strings.Contains(err.Error(), FileName) {
		t.Fatalf("a torn delayOffset.json: %v, want an error naming it", err)
	}
}
