package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// startBroker runs a broker without name servers on a loopback port.
func startBroker(t *testing.T, mod func(*Config)) (*Broker, *remoting.Client) {
	t.Helper()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20}
	if mod != nil {
		mod(&cfg)
	}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger()})
	return b, cl
}

// runBroker starts a broker with cfg and deps and returns it, a client and
// a stop function (graceful; also run at cleanup, idempotent).
func runBroker(t *testing.T, cfg Config, deps Deps) (*Broker, *remoting.Client, func()) {
	t.Helper()
	return runBrokerWith(t, cfg, deps, nil)
}

// runBrokerWith is runBroker with hook (if not nil) run between New and
// Run, to set test hooks before any goroutine starts.
func runBrokerWith(t *testing.T, cfg Config, deps Deps, hook func(*Broker)) (*Broker, *remoting.Client, func()) {
	t.Helper()
	b, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		hook(b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cl.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, offsets.ErrFenced) { // a fenced broker cannot drain
				t.Errorf("Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("broker did not stop")
		}
	}
	t.Cleanup(stop)
	return b, cl, stop
}

func invoke(t *testing.T, cl *remoting.Client, addr string, req *remoting.Command) *remoting.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Invoke(ctx, addr, req)
	if err != nil {
		t.Fatalf("invoke code %d: %v", req.Code, err)
	}
	return resp
}

func sendReq(topic string, queue int, body []byte, props string) *remoting.Command {
	h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, QueueID: int32(queue), BornTimestamp: time.Now().UnixMilli(), Properties: props}
	return remoting.NewRequest(remoting.SendMessage, h.Encode(), body)
}

func TestBrokerRefusesOversizeMessageWithRemark(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	resp := invoke(t, cl, addr, sendReq("Big", 0, make([]byte, 4<<20+1), ""))
	if resp.Code != int32(remoting.MessageIllegal) {
		t.Fatalf("code %d (%s), want MESSAGE_ILLEGAL", resp.Code, resp.Remark)
	}
	if !strings.Contains(resp.Remark, "exceeds the limit") || !strings.Contains(resp.Remark, strconv.Itoa(4<<20+1)) {
		t.Fatalf("remark %q does not say why", resp.Remark)
	}
	// The connection stays usable and a normal message still goes in.
	resp = invoke(t, cl, addr, sendReq("Big", 0, []byte("ok"), ""))
	if resp.Code != int32(remoting.Success) {
		t.Fatalf("normal send after refusal: %d %s", resp.Code, resp.Remark)
	}
}

func TestBrokerUnknownCodeNotSupported(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	resp := invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.RequestCode(9999), nil, nil))
	if resp.Code != int32(remoting.RequestCodeNotSupported) {
		t.Fatalf("code %d, want REQUEST_CODE_NOT_SUPPORTED", resp.Code)
	}
	if !strings.Contains(resp.Remark, "9999") {
		t.Fatalf("remark %q does not name the code", resp.Remark)
	}
}

// TestBrokerMalformedFrameClosesOnlyThatConn: garbage on one connection
// closes it; another connection keeps working.
func TestBrokerMalformedFrameClosesOnlyThatConn(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	invoke(t, cl, addr, sendReq("Good", 0, []byte("before"), ""))

	bad, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	var frame [12]byte
	binary.BigEndian.PutUint32(frame[0:], 8)          // total length
	binary.BigEndian.PutUint32(frame[4:], 0x00FFFFFF) // header length far beyond the frame
	if _, err := bad.Write(frame[:]); err != nil {
		t.Fatal(err)
	}
	_ = bad.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := bad.Read(make([]byte, 1)); err == nil {
		t.Fatal("malformed frame: connection not closed")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("malformed frame: connection still open after 10s")
	}
	resp := invoke(t, cl, addr, sendReq("Good", 0, []byte("after"), ""))
	if resp.Code != int32(remoting.Success) {
		t.Fatalf("other connection broken: %d %s", resp.Code, resp.Remark)
	}
}

func pullReq(group, topic string, queue int, offset int64, suspendMs int, sub string) *remoting.Command {
	h := remoting.PullMessageRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: int32(queue), QueueOffset: offset,
		MaxMsgNums: 32, SysFlag: pullFlagSuspend | pullFlagSubscription, SuspendTimeoutMillis: int64(suspendMs),
		Subscription: sub, ExpressionType: "TAG"}
	return remoting.NewRequest(remoting.PullMessage, h.Encode(), nil)
}

// TestBrokerLongPollWakesOnSend: a pull at the end of the queue is held and
// answered as soon as a message arrives, long before its hold time ends.
func TestBrokerLongPollWakesOnSend(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	if r := invoke(t, cl, addr, sendReq("LP", 0, []byte("m0"), "")); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	type result struct {
		resp *remoting.Command
		err  error
	}
	got := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := cl.Invoke(ctx, addr, pullReq("g", "LP", 0, 1, 20000, "*"))
		got <- result{r, err}
	}()
	waitCond(t, 10*time.Second, "pull parked", func() bool { return b.hold.count() == 1 })
	if r := invoke(t, cl, addr, sendReq("LP", 0, []byte("m1"), "")); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.resp.Code != int32(remoting.Success) {
			t.Fatalf("held pull answered %d %s", r.resp.Code, r.resp.Remark)
		}
		if r.resp.ExtFields["nextBeginOffset"] != "2" {
			t.Fatalf("nextBeginOffset %q, want 2", r.resp.ExtFields["nextBeginOffset"])
		}
	case <-time.After(15 * time.Second):
		t.Fatal("held pull not woken by the new message")
	}
}

// TestBrokerHeldPullDoesNotCommitAgain: a held pull's commit offset is
// applied when it arrives only. When it is run again (here: woken by a
// send) the group may have committed further; re-applying the old value
// would move the group back, and it would re-read messages after a restart.
func TestBrokerHeldPullDoesNotCommitAgain(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	for i := range 3 {
		if r := invoke(t, cl, addr, sendReq("HC", 0, []byte("m"+strconv.Itoa(i)), "")); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	h := remoting.PullMessageRequestHeader{ConsumerGroup: "g", Topic: "HC", QueueID: 0, QueueOffset: 3,
		MaxMsgNums: 32, SysFlag: pullFlagSuspend | pullFlagSubscription | pullFlagCommitOffset, CommitOffset: 1,
		SuspendTimeoutMillis: 20000, Subscription: "*", ExpressionType: "TAG"}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := cl.Invoke(ctx, addr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil))
		got <- err
	}()
	waitCond(t, 10*time.Second, "pull parked", func() bool { return b.hold.count() == 1 })
	if off, ok := b.offsets.Query("g", "HC", 0); !ok || off != 1 {
		t.Fatalf("the pull's commit offset: %d %v, want 1", off, ok)
	}
	u := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: "g", Topic: "HC", QueueID: 0, CommitOffset: 3}
	if r := invoke(t, cl, addr, remoting.NewRequest(remoting.UpdateConsumerOffset, u.Encode(), nil)); r.Code != 0 {
		t.Fatalf("update offset: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, addr, sendReq("HC", 0, []byte("m3"), "")); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("held pull not woken by the new message")
	}
	if off, _ := b.offsets.Query("g", "HC", 0); off != 3 {
		t.Fatalf("after the held pull ran again the group's offset is %d, want 3 (the later commit)", off)
	}
}

// TestBrokerPullFiltersTagsOnBroker: only matching records travel.
func TestBrokerPullFiltersTagsOnBroker(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	for i, tag := range []string{"TagA", "TagB", "TagC", "TagD", "TagA"} {
		props := "TAGS\x01" + tag + "\x02"
		if r := invoke(t, cl, addr, sendReq("F", 0, []byte(strconv.Itoa(i)), props)); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	resp := invoke(t, cl, addr, pullReq("g", "F", 0, 0, 0, "TagA || TagC"))
	if resp.Code != int32(remoting.Success) {
		t.Fatalf("pull: %d %s", resp.Code, resp.Remark)
	}
	var tags []string
	for body := resp.Body; len(body) > 0; {
		size := int(binary.BigEndian.Uint32(body))
		rec := body[:size]
		bodyLen := int(binary.BigEndian.Uint32(rec[84:]))
		topicLen := int(rec[88+bodyLen])
		pl := 88 + bodyLen + 1 + topicLen
		props := string(rec[pl+2 : pl+2+int(binary.BigEndian.Uint16(rec[pl:]))])
		v, _ := propValue(props, "TAGS")
		tags = append(tags, v)
		body = body[size:]
	}
	if strings.Join(tags, ",") != "TagA,TagC,TagA" {
		t.Fatalf("broker returned tags %v, want TagA,TagC,TagA", tags)
	}
	if resp.ExtFields["nextBeginOffset"] != "5" {
		t.Fatalf("nextBeginOffset %q, want 5", resp.ExtFields["nextBeginOffset"])
	}
}

func waitCond(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func discardLogger() *slog.Logger {
	if os.Getenv("BROKER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestBrokerSyncFlushDeferredAcks: with flush=sync the send handler returns
// at once and the ack is written after the group commit: concurrent sends
// on one connection are all acknowledged, each after its record is durable.
func TestBrokerSyncFlushDeferredAcks(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, func(c *Config) { c.Flush = "sync" })
	addr := b.Addr().String()
	const n = 64
	type result struct {
		resp *remoting.Command
		err  error
	}
	out := make(chan result, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := cl.Invoke(ctx, addr, sendReq("Durable", i%4, []byte("m"+strconv.Itoa(i)), ""))
			out <- result{r, err}
		}(i)
	}
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		r := <-out
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.resp.Code != int32(remoting.Success) {
			t.Fatalf("sync send: %d %s", r.resp.Code, r.resp.Remark)
		}
		id := r.resp.ExtFields["msgId"]
		if seen[id] {
			t.Fatalf("msgId %s acknowledged twice", id)
		}
		seen[id] = true
		_, off, err := store.DecodeMessageID(id)
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := b.store.ReadRecord(off); err != nil || len(rec) == 0 {
			t.Fatalf("acked record at %d not readable: %v", off, err)
		}
	}
	if b.store.MaxPhysOffset() == 0 {
		t.Fatal("nothing stored")
	}
}
