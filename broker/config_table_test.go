package broker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/remoting"
)

func createTopicReq(topic string, queues int32) *remoting.Command {
	h := remoting.CreateTopicRequestHeader{Topic: topic, DefaultTopic: DefaultTopic, ReadQueueNums: queues,
		WriteQueueNums: queues, Perm: PermRead | PermWrite, TopicFilterType: "SINGLE_TAG"}
	return remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil)
}

// TestBrokerConcurrentCreateTopicAllPersisted: six connections creating
// topics at once all get SUCCESS and topics.json lists every topic (issue 9
// item 8: unserialized saves through one temp path failed a third of the
// requests with "rename topics.json.tmp: no such file or directory").
func TestBrokerConcurrentCreateTopicAllPersisted(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, nil)
	addr := b.Addr().String()
	const conns, perConn = 6, 20
	var wg sync.WaitGroup
	errs := make(chan string, conns*perConn)
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
			defer cl.Close()
			for i := range perConn {
				resp := invoke(t, cl, addr, createTopicReq(fmt.Sprintf("Conc_%d_%d", c, i), 2))
				if resp.Code != int32(remoting.Success) {
					errs <- fmt.Sprintf("Conc_%d_%d: %d %s", c, i, resp.Code, resp.Remark)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	raw, err := os.ReadFile(filepath.Join(b.cfg.DataDir, "config", topicsFile))
	if err != nil {
		t.Fatal(err)
	}
	var f topicsJSON
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	for c := range conns {
		for i := range perConn {
			if _, ok := f.TopicConfigTable[fmt.Sprintf("Conc_%d_%d", c, i)]; !ok {
				t.Errorf("topics.json lacks Conc_%d_%d", c, i)
			}
		}
	}
	names, _ := os.ReadDir(filepath.Join(b.cfg.DataDir, "config"))
	for _, n := range names {
		if filepath.Ext(n.Name()) != ".json" {
			t.Errorf("config/ holds %s", n.Name())
		}
	}
}

// TestConfigTableSaveCrashModel: concurrent saves of the topic table on a
// crashable FS; a power loss at any moment leaves a topics.json that
// decodes and holds every topic whose save had returned.
func TestConfigTableSaveCrashModel(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	tm, err := OpenTopicConfigManager(m, "data/config", true)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		savedMu sync.Mutex
		saved   []string
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				name := fmt.Sprintf("T_%d_%d", w, i)
				tm.Put(remoting.TopicConfig{TopicName: name, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6})
				if err := tm.Save(); err != nil {
					t.Error(err)
					return
				}
				savedMu.Lock()
				saved = append(saved, name)
				savedMu.Unlock()
			}
		}()
	}
	// Crash clones taken while the writers run.
	var clones []struct {
		fs   *vfs.Mem
		want []string
	}
	for len(clones) < 40 {
		savedMu.Lock()
		want := slices.Clone(saved)
		savedMu.Unlock()
		clones = append(clones, struct {
			fs   *vfs.Mem
			want []string
		}{m.CrashClone(), want})
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	clones = append(clones, struct {
		fs   *vfs.Mem
		want []string
	}{m.CrashClone(), saved})
	for i, c := range clones {
		re, err := OpenTopicConfigManager(c.fs, "data/config", true)
		if err != nil {
			t.Fatalf("clone %d: reopen: %v", i, err)
		}
		for _, n := range c.want {
			if _, ok := re.Get(n); !ok {
				t.Fatalf("clone %d: topic %s was saved before the crash and is gone", i, n)
			}
		}
		names, _ := c.fs.ReadDir("data/config")
		if slices.ContainsFunc(names, func(n string) bool { return n != topicsFile }) {
			t.Fatalf("clone %d: reopen left %v", i, names)
		}
	}
}
