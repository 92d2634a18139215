package broker

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// BenchmarkBrokerPullCommit is a consumer's pull/commit loop over loopback
// (a pull of one message, then UPDATE_CONSUMER_OFFSET for it) against a
// broker whose offset table holds entries offsets, with consumerOffset.json
// written within 100ms of a commit (flush=100ms) or, as before, only by the
// periodic config flush (flush=1h here: no write during the run). cpu-µs/op
// is the process's CPU time (client and broker, user+system) per
// pull+commit; saves/s the writes of the file.
//
//	go test ./broker -run XXX -bench BrokerPullCommit -benchtime 20000x -count 5
func BenchmarkBrokerPullCommit(b *testing.B) {
	for _, entries := range []int{100, 10_000} {
		for _, flush := range []time.Duration{100 * time.Millisecond, time.Hour} {
			b.Run(fmt.Sprintf("entries=%d/flush=%v", entries, flush), func(b *testing.B) { benchPullCommit(b, entries, flush) })
		}
	}
}

func benchPullCommit(b *testing.B, entries int, flush time.Duration) {
	var saves atomic.Int64
	fs := errorfs.Wrap(vfs.OS(), errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpRename && strings.Contains(path, offsets.ConsumerOffsetsFile) {
			saves.Add(1)
		}
		return nil
	}))
	br, err := New(Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 64 << 20,
		OffsetFlush: flush, ConfigFlush: time.Hour}, Deps{Logger: discardLogger(), FS: fs})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	for i := range entries { // other groups' offsets: the table each save encodes
		br.offsets.Commit(fmt.Sprintf("other%d", i/8), fmt.Sprintf("OtherTopic%d", i/8), int32(i%8), int64(i))
	}
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	addr, body := br.Addr().String(), make([]byte, 256)
	const stored = 2048
	for i := range stored {
		resp, err := cl.Invoke(context.Background(), addr, sendReq("CommitBench", 0, body, ""))
		if err != nil || resp.Code != int32(remoting.Success) {
			b.Fatalf("send %d: %v %+v", i, err, resp)
		}
	}
	step := func(i int) {
		off := int64(i % stored)
		h := remoting.PullMessageRequestHeader{ConsumerGroup: "cb", Topic: "CommitBench", QueueOffset: off,
			MaxMsgNums: 1, SysFlag: pullFlagSubscription, Subscription: "*", ExpressionType: "TAG"}
		resp, err := cl.Invoke(context.Background(), addr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil))
		if err != nil || resp.Code != int32(remoting.Success) {
			b.Fatalf("pull at %d: %v %+v", off, err, resp)
		}
		resp, err = cl.Invoke(context.Background(), addr, updateOffsetReq("cb", "CommitBench", 0, off+1+int64(i/stored)*stored))
		if err != nil || resp.Code != int32(remoting.Success) {
			b.Fatalf("commit: %v %+v", err, resp)
		}
	}
	for i := range 500 {
		step(i)
	}
	saves0 := saves.Load()
	cpu0, t0 := processCPU(), time.Now()
	b.ResetTimer()
	for i := range b.N {
		step(i)
	}
	b.StopTimer()
	cpu, wall := processCPU()-cpu0, time.Since(t0)
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(saves.Load()-saves0)/wall.Seconds(), "saves/s")
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
