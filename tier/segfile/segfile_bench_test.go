package segfile_test

// Compression ratio and speed on the JSON corpus in testdata:
//
//	go test ./tier/segfile -run '^$' -bench . -benchtime 20x

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/stratamq/stratamq/tier/segfile"
)

func BenchmarkEncodeCorpus(b *testing.B) {
	data := loadCorpus(b)
	for _, fs := range []int{1 << 20, 2 << 20, 4 << 20} {
		for _, lvl := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression} {
			b.Run(fmt.Sprintf("frame=%dMiB/level=%s", fs>>20, lvl), func(b *testing.B) {
				var obj bytes.Buffer
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					obj.Reset()
					if _, err := segfile.Encode(&obj, bytes.NewReader(data), int64(len(data)), segfile.Options{FrameSize: fs, Level: lvl}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(data))/float64(obj.Len()), "ratio")
			})
		}
	}
}

func BenchmarkDecodeCorpus(b *testing.B) {
	data := loadCorpus(b)
	var obj bytes.Buffer
	f, err := segfile.Encode(&obj, bytes.NewReader(data), int64(len(data)), segfile.Options{FrameSize: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	raw := obj.Bytes()
	dst := make([]byte, 0, 1<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		for _, fr := range f.Frames {
			if dst, err = segfile.DecodeFrame(dst, fr, raw[fr.CompOff:fr.CompOff+fr.CompLen]); err != nil {
				b.Fatal(err)
			}
		}
	}
}
