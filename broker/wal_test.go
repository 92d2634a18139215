package broker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/wal"
)

// walGate holds back the WAL's data objects while closed (a slow or
// unreachable bucket for them alone).
type walGate struct {
	tier.Bucket
	mu   sync.Mutex
	shut bool
	open chan struct{}
}

func newWalGate(b tier.Bucket) *walGate {
	return &walGate{Bucket: b, open: make(chan struct{})}
}

func (g *walGate) close() { g.mu.Lock(); g.shut = true; g.open = make(chan struct{}); g.mu.Unlock() }
func (g *walGate) release() {
	g.mu.Lock()
	if g.shut {
		g.shut = false
		close(g.open)
	}
	g.mu.Unlock()
}

func (g *walGate) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	if strings.Contains(key, "/"+walDir) && size > wal.HeaderSize { // a data object, not a claim
		g.mu.Lock()
		shut, open := g.shut, g.open
		g.mu.Unlock()
		if shut {
			select {
			case <-open:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
	}
	return g.Bucket.PutIf(ctx, key, r, size, cond)
}

func walConfig(t *testing.T) Config {
	return Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LeaseTTL: time.Second, CheckpointInterval: 200 * time.Millisecond,
		Durability: DurabilityBucket, WALLinger: 20 * time.Millisecond}
}

// A bucket-durable broker whose disk vanishes: a broker on an empty disk
// serves every acknowledged message at its queue offset and commitlog
// offset (so its offset msgId), and the next send continues after them.
func TestBucketDurableRestoresOnEmptyDisk(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := walConfig(t)
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	var bodies [][]byte
	var phys []string
	for i := range 40 {
		body := bytes.Repeat([]byte(fmt.Sprintf("%04d|", i)), 50)
		r := invoke(t, cl, first.Addr().String(), sendReq("Bk", 0, body, ""))
		if r.Code != int32(remoting.Success) {
			t.Fatalf("send %d: %d %s", i, r.Code, r.Remark)
		}
		if off := r.ExtFields["queueOffset"]; off != strconv.Itoa(i) {
			t.Fatalf("send %d got queue offset %s", i, off)
		}
		bodies = append(bodies, body)
		phys = append(phys, r.ExtFields["msgId"])
	}
	if st := first.wal.w.Stats(); st.Objects == 0 || st.Durable < first.store.MaxPhysOffset() {
		t.Fatalf("acknowledged sends but the WAL holds %+v (log end %d)", st, first.store.MaxPhysOffset())
	}
	// The machine dies: no final checkpoint, no upload, no lease release;
	// its disk is gone.
	first.dur.StopWriting()
	expires := first.dur.Lease().ExpiresAt()
	waitCond(t, 20*time.Second, "the dead broker's lease expired", func() bool { return time.Now().After(expires.Add(100 * time.Millisecond)) })
	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: bucket})
	readBack(t, second, cl2, "Bk", bodies)
	if got := second.store.MaxQueueOffset("Bk", 0); got != int64(len(bodies)) {
		t.Fatalf("restored queue ends at %d, want %d", got, len(bodies))
	}
	r := invoke(t, cl2, second.Addr().String(), sendReq("Bk", 0, []byte("after"), ""))
	if r.Code != int32(remoting.Success) || r.ExtFields["queueOffset"] != strconv.Itoa(len(bodies)) {
		t.Fatalf("send after the restore: %d %s offset %s", r.Code, r.Remark, r.ExtFields["queueOffset"])
	}
	// Same commitlog offsets: the offset msgId of message 7 resolves to it.
	h := remoting.ViewMessageRequestHeader{Offset: mustPhys(t, phys[7])}
	v := invoke(t, cl2, second.Addr().String(), remoting.NewRequest(remoting.ViewMessageByID, h.Encode(), nil))
	if v.Code != int32(remoting.Success) || !bytes.Contains(v.Body, bodies[7]) {
		t.Fatalf("view message 7 by its offset msgId after the restore: %d %s", v.Code, v.Remark)
	}
}

// Consumers never read a bucket-durable message before its WAL object is
// committed; a local-durable topic on the same broker is not held back.
func TestBucketDurableHiddenUntilCommitted(t *testing.T) {
	t.Parallel()
	g := newWalGate(tier.NewMem())
	cfg := walConfig(t)
	cfg.Durability = DurabilityLocal
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: g})
	create := remoting.NewRequest(remoting.UpdateAndCreateTopic, (&remoting.CreateTopicRequestHeader{Topic: "Hb",
		ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: "+durability=bucket"}).Encode(), nil)
	if r := invoke(t, cl, b.Addr().String(), create); r.Code != int32(remoting.Success) {
		t.Fatalf("create a bucket-durable topic: %d %s", r.Code, r.Remark)
	}
	g.close()
	answered := make(chan *remoting.Command, 1)
	go func() { answered <- invoke(t, cl, b.Addr().String(), sendReq("Hb", 0, []byte("held"), "")) }()
	waitCond(t, 10*time.Second, "the send stored locally", func() bool { return b.store.MaxQueueOffset("Hb", 0) == 1 })
	maxOff := func() string {
		h := remoting.GetMaxOffsetRequestHeader{Topic: "Hb", QueueID: 0}
		return invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.GetMaxOffset, h.Encode(), nil)).ExtFields["offset"]
	}
	if got := maxOff(); got != "0" {
		t.Fatalf("consumers see max offset %s of a bucket-durable queue before its WAL object was committed, want 0", got)
	}
	if r := invoke(t, cl, b.Addr().String(), sendReq("Local", 0, []byte("local"), "")); r.Code != int32(remoting.Success) {
		t.Fatalf("a local-durable send waited for the bucket: %d %s", r.Code, r.Remark)
	}
	select {
	case r := <-answered:
		t.Fatalf("a bucket-durable send was answered (%d %s) before its WAL object was committed", r.Code, r.Remark)
	default:
	}
	g.release()
	if r := <-answered; r.Code != int32(remoting.Success) {
		t.Fatalf("bucket-durable send: %d %s", r.Code, r.Remark)
	}
	if got := maxOff(); got != "1" {
		t.Fatalf("max offset %s after the commit, want 1", got)
	}
	got, bad := readAll(t, b, cl, "Hb", 0, 1)
	if bad != nil || len(got) != 1 || string(got[0]) != "held" {
		t.Fatalf("after the commit: %v %v", got, bad)
	}
}

func TestBucketDurabilityNeedsABucket(t *testing.T) {
	t.Parallel()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Durability: DurabilityBucket}
	if _, err := New(cfg, Deps{Logger: discardLogger()}); err == nil || !strings.Contains(err.Error(), "STRATAMQ_BUCKET") {
		t.Fatalf("STRATAMQ_DURABILITY=bucket without a bucket: %v", err)
	}
	b, cl := startBroker(t, nil)
	create := remoting.NewRequest(remoting.UpdateAndCreateTopic, (&remoting.CreateTopicRequestHeader{Topic: "Nb",
		ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: "+durability=bucket"}).Encode(), nil)
	if r := invoke(t, cl, b.Addr().String(), create); r.Code == int32(remoting.Success) || !strings.Contains(r.Remark, "bucket") {
		t.Fatalf("a bucket-durable topic on a broker without a bucket: %d %s", r.Code, r.Remark)
	}
	bad := remoting.NewRequest(remoting.UpdateAndCreateTopic, (&remoting.CreateTopicRequestHeader{Topic: "Nb",
		ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: "+durability=disk"}).Encode(), nil)
	if r := invoke(t, cl, b.Addr().String(), bad); r.Code == int32(remoting.Success) || !strings.Contains(r.Remark, "want local or bucket") {
		t.Fatalf("durability=disk: %d %s", r.Code, r.Remark)
	}
}

// mustPhys is the commitlog offset an offset msgId (storeHost + offset,
// hex) names.
func mustPhys(t *testing.T, msgID string) int64 {
	t.Helper()
	if len(msgID) < 16 {
		t.Fatalf("offset msgId %q", msgID)
	}
	off, err := strconv.ParseInt(msgID[len(msgID)-16:], 16, 64)
	if err != nil {
		t.Fatalf("offset msgId %q: %v", msgID, err)
	}
	return off
}

// A power cut of a bucket-durable broker (flush=async: its disk keeps only
// what was synced): the same disk comes back, and every acknowledged
// message is served at its offset, the lost page cache taken back from
// the WAL.
func TestBucketDurablePowerLossTakesTheTailFromTheWAL(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMem()
	bucket := &faultBucket{Bucket: tier.NewMem()}
	dir := "/data/walpower"
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", AutoCreateTopic: true, FlushInterval: time.Hour,
		LeaseTTL: time.Second, CheckpointInterval: time.Hour, ShutdownTimeout: time.Second,
		Durability: DurabilityBucket, WALLinger: 5 * time.Millisecond}
	first, cl, cancel, done := runUnchecked(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket, FS: mem})
	for i := range 10 {
		mustSend(t, first, cl, "Wp", 0, "synced-"+strings.Repeat("x", i))
	}
	if err := first.store.Flush(); err != nil {
		t.Fatal(err)
	}
	synced := first.store.MaxPhysOffset()
	var bodies []string
	for i := range 30 {
		body := "page-cache-only-" + strings.Repeat("y", i)
		mustSend(t, first, cl, "Wp", 0, body) // SEND_OK: in the WAL
		bodies = append(bodies, body)
	}
	end := first.store.MaxPhysOffset()
	crashed := mem.CrashClone() // power loss: only what was synced
	bucket.down.Store(true)
	cancel()
	<-done
	bucket.down.Store(false)
	if st, err := crashed.Stat(dir + "/store"); err != nil || !st.IsDir() {
		t.Fatalf("the crashed disk lost its store dir: %v", err)
	}
	again, cl2, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket, FS: crashed})
	if got := again.store.MaxPhysOffset(); got < end {
		t.Fatalf("after the power loss the log ends at %d, want %d (synced end %d): the WAL's tail was not taken back", got, end, synced)
	}
	got, bad := readAll(t, again, cl2, "Wp", 0, 10+len(bodies))
	if bad != nil {
		t.Fatalf("read after the power loss: %d %s", bad.Code, bad.Remark)
	}
	for i, b := range bodies {
		if string(got[10+i]) != b {
			t.Fatalf("acknowledged message at queue offset %d after the power loss: %q, want %q", 10+i, got[10+i], b)
		}
	}
}
