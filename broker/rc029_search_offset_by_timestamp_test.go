package broker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// SEARCH_OFFSET_BY_TIMESTAMP's boundary types (issue 11 item 5): between
// two messages' store times, "lower" names the later message, "upper" the
// earlier; at a message's own time both name it.
func TestSearchOffsetByTimestampBoundaries(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	var times []int64
	for i := range 3 {
		if r := invoke(t, cl, addr, sendReq("ST", 0, []byte("m"+strconv.Itoa(i)), "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
		phys, _, _, ok, err := b.store.QueueEntryContext(context.Background(), "ST", 0, int64(i))
		if err != nil || !ok {
			t.Fatalf("queue entry %d: %v %v", i, ok, err)
		}
		st, err := b.store.StoreTimeAt(context.Background(), phys)
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, st)
		waitCond(t, time.Second, "the clock to move 3 ms", func() bool { return time.Now().UnixMilli() > st+2 })
	}
	search := func(ts int64, boundary string) int64 {
		h := remoting.SearchOffsetRequestHeader{Topic: "ST", QueueID: 0, Timestamp: ts, BoundaryType: boundary}
		r := invoke(t, cl, addr, remoting.NewRequest(remoting.SearchOffsetByTimestamp, h.Encode(), nil))
		if r.Code != int32(remoting.Success) {
			t.Fatalf("search %d %q: %d %s", ts, boundary, r.Code, r.Remark)
		}
		n, _ := strconv.ParseInt(r.ExtFields["offset"], 10, 64)
		return n
	}
	between := times[1] + 1 // after m1, before m2
	if got := search(between, "lower"); got != 2 {
		t.Fatalf("lower between m1 and m2: %d, want 2", got)
	}
	if got := search(between, "upper"); got != 1 {
		t.Fatalf("upper between m1 and m2: %d, want 1", got)
	}
	for _, bt := range []string{"lower", "upper", ""} {
		if got := search(times[1], bt); got != 1 {
			t.Fatalf("%q at m1's own time: %d, want 1", bt, got)
		}
	}
	if got := search(times[2]+1000, "lower"); got != 3 {
		t.Fatalf("lower after the last message: %d, want the end 3", got)
	}
}
