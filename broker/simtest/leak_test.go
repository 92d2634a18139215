package simtest

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
	"github.com/stratamq/stratamq/tier"
)

// TestBrokerNewFailureLeaksNoGoroutine: broker.New that fails after it
// made the tiering (here: the store cannot open its directory) stops the
// cold reader's cache goroutines. In a bubble a leaked goroutine fails the
// test ("blocked goroutines remain"); it did before New's failure path
// closed the tiering, and every schedule with such a failed start died.
func TestBrokerNewFailureLeaksNoGoroutine(t *testing.T) {
	warm()
	synctest.Test(t, func(t *testing.T) {
		fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
			if op == errorfs.OpMkdirAll && strings.HasPrefix(path, "/data/store") {
				return errors.New("injected: store dir")
			}
			return nil
		}))
		cfg := broker.Config{DataDir: "/data", Listen: "10.0.0.1:10911", HAListen: "10.0.0.1:10912",
			Role: broker.RoleAsyncMaster, Cluster: "sim", BrokerName: brokerName, SegmentSize: 1 << 20,
			MaxMessageSize: 64 << 10, LeaseTTL: 2 * time.Second, CheckpointInterval: 200 * time.Millisecond,
			RegisterInterval: time.Hour, ReserveLogMin: 1 << 20, ReserveQueueMin: 1 << 10}
		stack := NewNet().Host("10.0.0.1").NewStack()
		b, err := broker.New(cfg, broker.Deps{FS: fs, Bucket: tier.NewMem(), Net: stack, Logger: discardLogger()})
		if err == nil {
			b.Close()
			t.Fatal("New succeeded over a store dir it cannot make")
		}
		if !strings.Contains(err.Error(), "injected") {
			t.Fatalf("New failed, not on the store: %v", err)
		}
	})
}
