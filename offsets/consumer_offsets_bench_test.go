package offsets

import (
	"fmt"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// BenchmarkConsumerOffsetsEncode is the table encode every save does
// (SaveLoop: at most every 100ms under commits), for tables of entries
// queue offsets (8 queues per topic@group key).
//
//	go test ./offsets -run XXX -bench ConsumerOffsetsEncode
func BenchmarkConsumerOffsetsEncode(b *testing.B) {
	for _, entries := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			c := benchTable(b, entries)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, _, err := c.Encode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkConsumerOffsetsCommit is the commit path: a changed offset.
func BenchmarkConsumerOffsetsCommit(b *testing.B) {
	c := benchTable(b, 100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c.Commit("group3", "Topic3", 1, int64(i))
	}
}

func benchTable(b *testing.B, entries int) *ConsumerOffsets {
	c, err := OpenConsumerOffsets(vfs.NewMem(), "/config")
	if err != nil {
		b.Fatal(err)
	}
	for i := range entries {
		c.Commit(fmt.Sprintf("group%d", i/8), fmt.Sprintf("Topic%d", i/8), int32(i%8), int64(i)*1000)
	}
	return c
}
