package ha

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/store"
)

// BenchmarkHAReplication measures log replicated over loopback (1 KiB
// records, MB/s of commitlog): the master's log is written first, then a
// slave on an empty store follows it to the end.
func BenchmarkHAReplication(b *testing.B) {
	open := func(dir string) *store.Store {
		st, err := store.Open(store.Options{Dir: dir, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		return st
	}
	ms, ss := open(b.TempDir()), open(b.TempDir())
	defer ss.Close()
	defer ms.Close()
	batch := make([]store.Message, 64)
	body := make([]byte, 1024-store.RecordOverhead-2) // 1 KiB records (topic "T0")
	for i := 0; i < b.N; i += len(batch) {
		n := min(len(batch), b.N-i)
		for j := range n {
			batch[j] = store.Message{Topic: "T0", QueueID: int32(j % 4), Body: body, BornTimestamp: int64(i + j)}
		}
		if _, err := ms.Put(context.Background(), batch[:n]); err != nil {
			b.Fatal(err)
		}
	}
	end := ms.MaxPhysOffset()
	b.SetBytes(end / int64(b.N))
	addr := haAddr(b)
	m := startMaster(b, addr, ms, nil, nil)
	defer m.Close()
	b.ResetTimer()
	s := startSlave(b, addr, ss, nil)
	defer s.Close()
	waitFor(b, "the slave to replicate "+strconv.FormatInt(end, 10)+" bytes", 10*time.Minute, func() bool { return ss.MaxPhysOffset() == end })
	b.StopTimer()
}
