package retention

import (
	"context"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

type topicList []remoting.TopicConfig

func (l topicList) Configs() []remoting.TopicConfig { return l }

type savedPins []store.QueueMin

func (p savedPins) Saved() []store.QueueMin { return p }

// TestExpireTopicsByEachTopicsRetention, over the real store: two minutes
// on, Short (1m) expires entirely, Keep (forever) keeps everything, and
// the internal queue rises to its checkpointed progress, never past it.
func TestExpireTopicsByEachTopicsRetention(t *testing.T) {
	st, err := store.Open(store.Options{FS: vfs.NewMem(), Dir: "/data", SegmentSize: 1 << 20, MaxMessageSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for _, tp := range []string{"Short", "Keep", "Short", "SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX"} {
		if _, err := st.Put(ctx, []store.Message{{Topic: tp, Body: []byte("body of " + tp)}}); err != nil {
			t.Fatal(err)
		}
	}
	topics := topicList{
		{TopicName: "Keep", ReadQueueNums: 1, WriteQueueNums: 1, Attributes: map[string]string{Attribute: "forever"}},
		{TopicName: "SCHEDULE_TOPIC_XXXX", ReadQueueNums: 1, WriteQueueNums: 1, Attributes: map[string]string{Attribute: "1m"}},
		{TopicName: "Short", ReadQueueNums: 1, WriteQueueNums: 1, Attributes: map[string]string{Attribute: "1m"}},
	}
	s := New(Config{}, Deps{Store: st, Topics: topics, Pins: savedPins{{Topic: "SCHEDULE_TOPIC_XXXX", QueueID: 0, Min: 2}}})
	if !s.HasOverride() {
		t.Fatal("the overrides are not seen")
	}
	if d, override := s.Of(topics[1]); override || d != 0 {
		t.Fatalf("a system topic's retention: %v %v, want the default", d, override)
	}
	if err := s.ExpireTopics(ctx, time.Now().Add(2*time.Minute), -1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		topic    string
		min, max int64
	}{{"Short", 2, 2}, {"Keep", 0, 1}, {"SCHEDULE_TOPIC_XXXX", 2, 3}} {
		if mn, mx := st.MinQueueOffset(c.topic, 0), st.MaxQueueOffset(c.topic, 0); mn != c.min || mx != c.max {
			t.Errorf("%s: min %d, max %d, want %d, %d", c.topic, mn, mx, c.min, c.max)
		}
	}
	rep, err := s.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Topics) != 3 || rep.Topics[0].RetentionMillis != -1 || rep.Topics[0].OldestRetained == 0 || rep.Topics[2].OldestRetained != 0 {
		t.Fatalf("report: %+v", rep)
	}
}
