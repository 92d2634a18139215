package broker

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/loopback"
	"github.com/stratamq/stratamq/remoting"
)

// BenchmarkSyncMasterAck is the send → ack latency sync_master adds: one
// 1 KiB SEND_MESSAGE at a time over loopback to a master with a slave
// broker streaming from it (in-process), as async_master (acked once
// stored) and as sync_master (acked once the slave reports holding it).
// ns/op is the mean; p50/p99 are reported too. docs/bench/ha.sh measures
// the same with the real binaries and a load generator.
//
//	go test ./broker -run XXX -bench SyncMasterAck -benchtime 5000x
func BenchmarkSyncMasterAck(b *testing.B) {
	for _, role := range []string{RoleAsyncMaster, RoleSyncMaster} {
		b.Run("role="+role, func(b *testing.B) { benchMasterAck(b, role) })
	}
}

func benchMasterAck(b *testing.B, role string) {
	m := benchMasterSlave(b, role)
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	addr, body := m.Addr().String(), make([]byte, 1024)
	send := func() time.Duration {
		t0 := time.Now()
		resp, err := cl.Invoke(context.Background(), addr, sendReq("HABench", 0, body, ""))
		if err != nil || resp.Code != int32(remoting.Success) {
			b.Fatalf("send: %v %+v", err, resp)
		}
		return time.Since(t0)
	}
	for range 200 { // topic creation, connection, warm-up
		send()
	}
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		lat = append(lat, send())
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkBrokerPull is the PULL_MESSAGE path of a consumer that lags: 32
// stored 1 KiB messages per pull over loopback, from a master with a slave
// broker streaming from it, as async_master and as sync_master (whose pulls
// are bounded by what the slave acked). ns/op is the mean pull; p50/p99
// are reported too.
//
//	go test ./broker -run XXX -bench BrokerPull -benchtime 20000x
func BenchmarkBrokerPull(b *testing.B) {
	for _, role := range []string{RoleAsyncMaster, RoleSyncMaster} {
		b.Run("role="+role, func(b *testing.B) { benchPull(b, role) })
	}
}

func benchPull(b *testing.B, role string) {
	m := benchMasterSlave(b, role)
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	addr, body := m.Addr().String(), make([]byte, 1024)
	const stored, batch = 4096, 32
	for i := range stored {
		resp, err := cl.Invoke(context.Background(), addr, sendReq("PullBench", 0, body, ""))
		if err != nil || resp.Code != int32(remoting.Success) {
			b.Fatalf("send %d: %v %+v", i, err, resp)
		}
	}
	pull := func(off int64) time.Duration {
		t0 := time.Now()
		resp, err := cl.Invoke(context.Background(), addr, pullReq("pb", "PullBench", 0, off, 0, "*"))
		if err != nil || resp.Code != int32(remoting.Success) || len(resp.Body) < batch*len(body) {
			b.Fatalf("pull at %d: %v %+v", off, err, resp)
		}
		return time.Since(t0)
	}
	for i := range 200 { // connection, page cache
		pull(int64(i * batch % (stored - batch)))
	}
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(batch * len(body)))
	b.ResetTimer()
	for i := range b.N {
		lat = append(lat, pull(int64(i*batch%(stored-batch))))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// benchMasterSlave runs a master of role with a slave broker streaming
// from it, both stopped at the benchmark's cleanup.
func benchMasterSlave(b *testing.B, role string) *Broker {
	p, err := loopback.Port()
	if err != nil {
		b.Fatal(err)
	}
	haAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	start := func(cfg Config) *Broker {
		br, err := New(cfg, Deps{Logger: discardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- br.Run(ctx) }()
		b.Cleanup(func() { cancel(); <-done })
		return br
	}
	m := start(Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 256 << 20,
		Role: role, HAListen: haAddr})
	start(Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 256 << 20, Role: RoleSlave, HAMaster: haAddr, BrokerID: 1})
	for deadline := time.Now().Add(20 * time.Second); len(m.HAStatus().Slaves) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the slave did not connect")
		}
	}
	return m
}
