package broker

import (
	"context"
	"encoding/binary"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// slowBucket answers every write after a delay, as a healthy remote bucket
// does (milliseconds, not the microseconds of tier.NewMem): a checkpoint
// takes a few of them, so a client is faster than the checkpoint its send
// triggered. match, if set, picks the keys that are slow; delay is read at
// each write (nanoseconds).
type slowBucket struct {
	tier.Bucket
	delay atomic.Int64
	match func(key string) bool
}

func (s *slowBucket) wait(ctx context.Context, key string) error {
	d := time.Duration(s.delay.Load())
	if d <= 0 || (s.match != nil && !s.match(key)) {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (s *slowBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := s.wait(ctx, key); err != nil {
		return err
	}
	return s.Bucket.Put(ctx, key, r, size)
}

func (s *slowBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, c tier.Cond) (string, error) {
	if err := s.wait(ctx, key); err != nil {
		return "", err
	}
	return s.Bucket.PutIf(ctx, key, r, size, c)
}

// batchReq is a SEND_BATCH_MESSAGE of n one-byte messages to topic/queue.
func batchReq(topic string, queue, n int) *remoting.Command {
	body := make([]byte, 0, n*23)
	for range n {
		body = binary.BigEndian.AppendUint32(body, 23) // total: 20 + body 1 + props length 2
		body = append(body, make([]byte, 12)...)       // magic, body CRC, flag
		body = binary.BigEndian.AppendUint32(body, 1)
		body = append(body, 'm')
		body = binary.BigEndian.AppendUint16(body, 0)
	}
	h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, QueueID: int32(queue), BornTimestamp: time.Now().UnixMilli(), Batch: true}
	return remoting.NewRequest(remoting.SendBatchMessage, h.Encode(), body)
}

// TestBrokerBatchesCrossReservationOnHealthyBucket (issue 29 item 9):
// batches of tiny messages to one queue run through queue reservations
// much faster than checkpoints land, but while the bucket answers, every
// batch is acknowledged: a send that reaches a reservation waits for the
// checkpoint it triggered, and the headroom grows with the rate. The
// reported case (two batches of 50,000 against the default 65,536) and a
// test-sized minimum smaller than one batch, with both flush modes. On
// 8aa1300 the second batch was refused (SERVICE_NOT_AVAILABLE, "the
// checkpoint reserved up to 65536").
func TestBrokerBatchesCrossReservationOnHealthyBucket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		flush        string
		reserveMin   int64
		batch, sends int
	}{
		{"reported/async", "async", 0, 50_000, 2},
		{"reported/sync", "sync", 0, 50_000, 2},
		{"batchOverMinimum/async", "async", 1000, 3000, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bucket := &slowBucket{Bucket: tier.NewMem()}
			bucket.delay.Store(int64(20 * time.Millisecond))
			// The default checkpoint interval (10 s): only the early
			// checkpoints a send triggers can keep up.
			cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, Flush: tc.flush,
				ReserveQueueMin: tc.reserveMin}
			b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
			mustSend(t, b, cl, "Batch", 0, "first") // the topic is checkpointed
			next := int64(1)
			for i := range tc.sends {
				r := invoke(t, cl, b.Addr().String(), batchReq("Batch", 0, tc.batch))
				if r.Code != int32(remoting.Success) {
					t.Fatalf("batch %d of %d messages (queue offset %d) on a healthy bucket: %d %s", i, tc.batch, next, r.Code, r.Remark)
				}
				if off, _ := parseInt64(r.ExtFields["queueOffset"]); off != next {
					t.Fatalf("batch %d stored at queue offset %d, want %d", i, off, next)
				}
				next += int64(tc.batch)
			}
		})
	}
}

// TestBrokerReservationRefusesPromptlyWhenBucketDown (issue 29 item 9):
// with checkpoints failing, or hanging, a send past the reservation is
// still refused SERVICE_NOT_AVAILABLE with a remark naming the checkpoint,
// within a bounded time (the wait for a checkpoint never hangs a send:
// a failed checkpoint refuses at once, a hanging one after
// STRATAMQ_CHECKPOINT_WAIT), and once the bucket answers again sends
// resume.
func TestBrokerReservationRefusesPromptlyWhenBucketDown(t *testing.T) {
	checkpoints := func(k string) bool { return strings.Contains(k, "meta/checkpoint") }
	for _, tc := range []struct {
		name   string
		remark string
		down   func(on bool) tier.Bucket
	}{
		{"failing", "the checkpoint to the bucket failed", func() func(bool) tier.Bucket {
			b := &faultBucket{Bucket: tier.NewMem(), match: checkpoints}
			return func(on bool) tier.Bucket { b.down.Store(on); return b }
		}()},
		{"hanging", "no new reservation within 2s", func() func(bool) tier.Bucket {
			b := &slowBucket{Bucket: tier.NewMem(), match: checkpoints}
			return func(on bool) tier.Bucket {
				if on {
					b.delay.Store(int64(4 * time.Second))
				} else {
					b.delay.Store(0)
				}
				return b
			}
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, LeaseTTL: 10 * time.Second,
				CheckpointInterval: time.Hour, ReserveQueueMin: 1000}
			b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: tc.down(false)})
			mustSend(t, b, cl, "Down", 0, "first")
			tc.down(true)
			var refused *remoting.Command
			for i := 0; i < 50 && refused == nil; i++ {
				start := time.Now()
				r := invoke(t, cl, b.Addr().String(), batchReq("Down", 0, 400))
				if took := time.Since(start); took > 8*time.Second {
					t.Fatalf("a send took %v with the bucket down", took)
				}
				if r.Code != int32(remoting.Success) {
					refused = r
				}
			}
			if refused == nil {
				t.Fatal("sends ran on past every reservation with checkpoints failing")
			}
			if refused.Code != int32(remoting.ServiceNotAvailable) || !strings.Contains(refused.Remark, "checkpoint") ||
				!strings.Contains(refused.Remark, tc.remark) {
				t.Fatalf("refusal: %d %s, want SERVICE_NOT_AVAILABLE saying %q", refused.Code, refused.Remark, tc.remark)
			}
			t.Logf("refused: %s", refused.Remark)
			tc.down(false)
			waitCond(t, 30*time.Second, "sends resume once checkpoints land", func() bool {
				return invoke(t, cl, b.Addr().String(), batchReq("Down", 0, 400)).Code == int32(remoting.Success)
			})
		})
	}
}

// TestBrokerShortLeaseDefaultCheckpointInterval (issue 29 item 12): a
// short STRATAMQ_LEASE_TTL with the default checkpoint interval (10 s):
// the lease is renewed on its own timer, so the master acknowledges every
// send for several TTLs. On 8aa1300 the lease was renewed only with each
// checkpoint and sends were refused ("could not renew its bucket lease in
// time") from 0.8 TTL after the last one.
func TestBrokerShortLeaseDefaultCheckpointInterval(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, LeaseTTL: ttl}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: tier.NewMem()})
	keepAcknowledging(t, b, cl, "ShortLease", 4*ttl)
}

// TestBrokerShortLeaseSyncMasterWithSlave (issue 29 item 12, as
// reported): a sync_master with a failover slave, a short lease and the
// default checkpoint interval: the master acknowledges every send for
// several TTLs and the slave, watching the lease, never sees it stand
// still long enough to take over. On 8aa1300 sends were refused and the
// slave took the lease from a live master.
func TestBrokerShortLeaseSyncMasterWithSlave(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	mem := tier.NewMem()
	short := func(role string) Config {
		c := failoverConfig(t, role)
		c.LeaseTTL, c.CheckpointInterval = ttl, 0 // the default interval, 10 s
		return c
	}
	a := runNode(t, short(RoleSyncMaster), Deps{Bucket: mem})
	b := runNode(t, short(RoleSlave), Deps{Bucket: mem})
	waitCond(t, 20*time.Second, "the slave to follow the master", func() bool { return a.Broker().haSlaves() == 1 })
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	keepAcknowledging(t, a.Broker(), cl, "ShortLeaseHA", 4*ttl)
	if b.role() != RoleSlave || a.role() != RoleSyncMaster {
		t.Fatalf("roles changed under a live master: master is %s, slave is %s", a.role(), b.role())
	}
}

// TestBrokerSlowCheckpointDoesNotDelayRenewal (issue 29 item 12): with
// checkpoints that each hang until their deadline (the checkpoint
// interval, longer than the lease's margin allows), the lease's renewal
// goes on: sends are acknowledged throughout. On 8aa1300 the renewal
// came only with each checkpoint, and sends were refused ("could not
// renew its bucket lease in time").
func TestBrokerSlowCheckpointDoesNotDelayRenewal(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	bucket := &slowBucket{Bucket: tier.NewMem(), match: func(k string) bool { return strings.Contains(k, "meta/checkpoint") }}
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, LeaseTTL: ttl,
		CheckpointInterval: 2 * time.Second}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	mustSend(t, b, cl, "SlowCheckpoint", 0, "first") // the topic is checkpointed
	bucket.delay.Store(int64(3 * ttl))
	t.Cleanup(func() { bucket.delay.Store(0) }) // the final checkpoint lands at once
	keepAcknowledging(t, b, cl, "SlowCheckpoint", 4*ttl)
}

// keepAcknowledging sends to topic/0 for d and fails the test on any
// refusal.
func keepAcknowledging(t *testing.T, b *Broker, cl *remoting.Client, topic string, d time.Duration) {
	t.Helper()
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		r := invoke(t, cl, b.Addr().String(), sendReq(topic, 0, []byte("m"), ""))
		if r.Code != int32(remoting.Success) {
			t.Fatalf("send %d, %v after the start: %d %s", n, time.Since(start).Round(time.Millisecond), r.Code, r.Remark)
		}
		n++
		time.Sleep(20 * time.Millisecond) // a steady producer, not a busy loop
	}
}

// TestConfigLeaseTTLFloor (issue 29 item 12): a lease too short to be
// renewed (each renewal must land within a fifth of the TTL) is refused at
// start, naming the setting; from 1s on, any checkpoint interval goes.
func TestConfigLeaseTTLFloor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ttl, interval time.Duration
		ok            bool
	}{
		{500 * time.Millisecond, 0, false},
		{-time.Second, 0, false},
		{time.Second, 0, true},
		{time.Second, time.Minute, true},
		{0, 0, true},
	} {
		err := Config{LeaseTTL: tc.ttl, CheckpointInterval: tc.interval}.Check()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "STRATAMQ_LEASE_TTL")) {
			t.Errorf("STRATAMQ_LEASE_TTL=%v STRATAMQ_CHECKPOINT_INTERVAL=%v: %v", tc.ttl, tc.interval, err)
		}
	}
}
