package broker

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stratamq/stratamq/tier"
)

// A topic created after the last bucket checkpoint is written (its queue
// offsets handed out under the checkpoint's reservation for queues it
// does not list), then the disk is lost uncleanly. The broker on the
// empty disk knows no such topic (the checkpoint's table lacks it); its
// first send to it must not hand out the lost broker's offsets again.
func TestEmptyDiskTopicCreatedAfterTheCheckpointKeepsReservations(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := walConfig(t)
	cfg.Durability = DurabilityLocal
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	walSend(t, cl, first, "Early", []byte("early"))
	mustCheckpoint(t, first)
	const n = 10
	for i := range n {
		walSend(t, cl, first, "Late", []byte(fmt.Sprintf("late %d", i)))
	}
	dieAndWait(t, first)

	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: bucket})
	r := walSend(t, cl2, second, "Late", []byte("after"))
	t.Logf("queue offset after the restore: %s", r.ExtFields["queueOffset"])
	if off, _ := strconv.Atoi(r.ExtFields["queueOffset"]); off < n {
		t.Fatalf("after an unclean disk loss a send to a topic created after the last checkpoint got queue offset %d: offsets 0..%d were acknowledged before and are handed out again", off, n-1)
	}
}
