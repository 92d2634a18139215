package broker

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// configOnDisk reads one config file of dataDir as the files stand now
// (what a process crash would leave: vfs.Mem keeps every write).
func configOnDisk(t *testing.T, fs vfs.FS, dataDir, name string) string {
	t.Helper()
	b, err := vfs.ReadFile(fs, filepath.Join(dataDir, "config", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// topicsOnDisk decodes topics.json as it stands.
func topicsOnDisk(t *testing.T, fs vfs.FS, dataDir string) map[string]remoting.TopicConfig {
	t.Helper()
	var f topicsJSON
	if s := configOnDisk(t, fs, dataDir, topicsFile); s != "" {
		if err := json.Unmarshal(offsets.QuoteIntKeys([]byte(s)), &f); err != nil {
			t.Fatal(err)
		}
	}
	return f.TopicConfigTable
}

// TestBrokerNewTopicsAndGroupsSavedBeforeAnswer: a topic a send
// auto-creates, and a group and retry topic a heartbeat creates, are in
// their config files when the request is answered (the periodic config
// flush is an hour here, so nothing else writes them); a second send to a
// topic whose creation is still being saved waits for that save (a crash
// then would forget the topic) and is answered once it is written.
func TestBrokerNewTopicsAndGroupsSavedBeforeAnswer(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMem()
	var holdTopics atomic.Bool
	held, release := make(chan struct{}, 1), make(chan struct{})
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpRename && strings.Contains(path, topicsFile) && holdTopics.Load() {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	}))
	dir := "/data"
	b, cl, _ := runBroker(t, Config{DataDir: dir, Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20,
		ConfigFlush: time.Hour}, Deps{Logger: discardLogger(), FS: fs})
	addr := b.Addr().String()

	if r := invoke(t, cl, addr, sendReq("Fresh", 1, []byte("first"), "")); r.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	tc, ok := topicsOnDisk(t, mem, dir)["Fresh"]
	if !ok || tc.WriteQueueNums != 4 {
		t.Fatalf("the auto-created topic is not in topics.json when its send is answered: %v %+v", ok, tc)
	}

	body, _ := json.Marshal(remoting.HeartbeatData{ClientID: "c1", ConsumerDataSet: []remoting.ConsumerData{{
		GroupName: "FreshGroup", ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING"}}})
	if r := invoke(t, cl, addr, remoting.NewRequest(remoting.HeartBeat, nil, body)); r.Code != int32(remoting.Success) {
		t.Fatalf("heartbeat: %d %s", r.Code, r.Remark)
	}
	if !strings.Contains(configOnDisk(t, mem, dir, subscriptionGroupFile), `"FreshGroup"`) {
		t.Fatal("the group a heartbeat created is not in subscriptionGroup.json when the heartbeat is answered")
	}
	if _, ok := topicsOnDisk(t, mem, dir)["%RETRY%FreshGroup"]; !ok {
		t.Fatal("the retry topic a heartbeat created is not in topics.json when the heartbeat is answered")
	}

	// Two senders on two connections create one topic; its save is held.
	holdTopics.Store(true)
	answered := make(chan *remoting.Command, 2)
	other := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer other.Close()
	for _, c := range []*remoting.Client{cl, other} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := c.Invoke(ctx, addr, sendReq("Held", 0, []byte("while saving"), ""))
			if err != nil {
				r = remoting.NewResponse(remoting.NewRequest(remoting.SendMessage, nil, nil), remoting.SystemError, err.Error())
			}
			answered <- r
		}()
	}
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the new topic's save never started")
	}
	// Neither send may be answered while the save that holds the topic
	// has not returned, however long it takes.
	select {
	case r := <-answered:
		close(release)
		t.Fatalf("a send to a topic being created was answered (%d %s) before topics.json held it", r.Code, r.Remark)
	case <-time.After(300 * time.Millisecond):
	}
	if _, ok := b.topics.Get("Held"); ok {
		close(release)
		t.Fatal("the topic is visible before its save returned")
	}
	holdTopics.Store(false)
	close(release)
	for range 2 {
		if r := <-answered; r.Code != int32(remoting.Success) {
			t.Fatalf("send after the save: %d %s", r.Code, r.Remark)
		}
	}
	if _, ok := topicsOnDisk(t, mem, dir)["Held"]; !ok {
		t.Fatal("topic Held not in topics.json")
	}
}

// TestBrokerNewTopicNotCreatedWhenItsSaveFails: a send whose new topic
// cannot be written to topics.json is refused (SYSTEM_ERROR naming the
// file), stores nothing and leaves no topic behind; once the disk works
// the same send creates and saves it.
func TestBrokerNewTopicNotCreatedWhenItsSaveFails(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMem()
	var fail atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpRename && strings.Contains(path, topicsFile) && fail.Load() {
			return errorfs.ErrInjected
		}
		return nil
	}))
	dir := "/data"
	b, cl, _ := runBroker(t, Config{DataDir: dir, Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20,
		ConfigFlush: time.Hour}, Deps{Logger: discardLogger(), FS: fs})
	addr := b.Addr().String()
	fail.Store(true)
	r := invoke(t, cl, addr, sendReq("Unsaved", 0, []byte("x"), ""))
	if r.Code != int32(remoting.SystemError) || !strings.Contains(r.Remark, "config file") {
		t.Fatalf("send whose topic cannot be saved: %d %s; want SYSTEM_ERROR naming the config file", r.Code, r.Remark)
	}
	if _, ok := b.topics.Get("Unsaved"); ok || b.store.MaxQueueOffset("Unsaved", 0) != 0 {
		t.Fatal("the refused send left a topic or a message")
	}
	fail.Store(false)
	if r := invoke(t, cl, addr, sendReq("Unsaved", 0, []byte("x"), "")); r.Code != int32(remoting.Success) {
		t.Fatalf("send once the disk works: %d %s", r.Code, r.Remark)
	}
	if _, ok := topicsOnDisk(t, mem, dir)["Unsaved"]; !ok {
		t.Fatal("topic not saved once the disk works")
	}
}

// TestBrokerOffsetCommitsReachTheFileSoon: a committed offset is in
// consumerOffset.json shortly after the commit (OffsetFlush, 100ms), not at
// the next periodic config flush (an hour here), and each burst of commits
// shares one write.
func TestBrokerOffsetCommitsReachTheFileSoon(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMem()
	var writes atomic.Int64
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpRename && strings.Contains(path, offsets.ConsumerOffsetsFile) {
			writes.Add(1)
		}
		return nil
	}))
	dir := "/data"
	b, cl, _ := runBroker(t, Config{DataDir: dir, Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20,
		ConfigFlush: time.Hour}, Deps{Logger: discardLogger(), FS: fs})
	addr := b.Addr().String()
	if r := invoke(t, cl, addr, createTopicReq("Acked", 2)); r.Code != 0 {
		t.Fatalf("create: %d %s", r.Code, r.Remark)
	}
	for i := range 5 {
		if r := invoke(t, cl, addr, sendReq("Acked", 0, []byte{byte('a' + i)}, "")); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	base := writes.Load()
	for off := int64(1); off <= 5; off++ {
		if r := invoke(t, cl, addr, updateOffsetReq("og", "Acked", 0, off)); r.Code != 0 {
			t.Fatalf("commit: %d %s", r.Code, r.Remark)
		}
	}
	onDisk := func() int64 {
		var f struct {
			OffsetTable map[string]map[string]int64 `json:"offsetTable"`
		}
		if s := configOnDisk(t, mem, dir, offsets.ConsumerOffsetsFile); s != "" {
			if err := json.Unmarshal([]byte(s), &f); err != nil {
				t.Fatal(err)
			}
		}
		return f.OffsetTable["Acked@og"]["0"]
	}
	waitCond(t, 20*time.Second, "the committed offset in consumerOffset.json", func() bool { return onDisk() == 5 })
	if n := writes.Load() - base; n > 5 {
		t.Fatalf("%d writes of consumerOffset.json for 5 commits", n)
	}
}

// TestBrokerStoredTopicMissingFromTableIsAddedBack: recovery's backstop. A
// topic whose messages the store holds but topics.json lacks (written by a
// crash between the two, or by an older version) is added back on open,
// with the queues that hold records, so its messages are routable and
// readable.
func TestBrokerStoredTopicMissingFromTableIsAddedBack(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMem()
	dir := "/data"
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20}
	b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger(), FS: mem})
	addr := b.Addr().String()
	for q := range 3 {
		if r := invoke(t, cl, addr, sendReq("Forgotten", q, []byte("kept"), "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	stop()
	// topics.json without the topic, as a crash before its save left it.
	path := filepath.Join(dir, "config", topicsFile)
	raw, err := vfs.ReadFile(mem, path)
	if err != nil {
		t.Fatal(err)
	}
	var f topicsJSON
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	delete(f.TopicConfigTable, "Forgotten")
	raw, _ = json.Marshal(f)
	if err := vfs.WriteFileAtomic(mem, path, raw); err != nil {
		t.Fatal(err)
	}

	b, cl, _ = runBroker(t, cfg, Deps{Logger: discardLogger(), FS: mem})
	addr = b.Addr().String()
	tc, ok := b.topics.Get("Forgotten")
	if !ok || tc.ReadQueueNums != 3 || tc.WriteQueueNums != 3 || tc.Perm != PermRead|PermWrite {
		t.Fatalf("after reopening: topic %v %+v; want it back with 3 queues, readable and writable", ok, tc)
	}
	if _, ok := topicsOnDisk(t, mem, dir)["Forgotten"]; !ok {
		t.Fatal("the topic added back is not saved")
	}
	r := invoke(t, cl, addr, pullReq("fg", "Forgotten", 2, 0, 0, "*"))
	if r.Code != int32(remoting.Success) || !strings.Contains(string(r.Body), "kept") {
		t.Fatalf("pull of the topic added back: %d %s", r.Code, r.Remark)
	}
}
