// Benchmarks of the s3 provider against a real S3 server process
// (versitygw on loopback; skipped when the binary is missing):
//
//	go test -run '^$' -bench BenchmarkTierS3VersityGW -benchtime 20x -count 3 ./tier/s3
//
// put/size=64MiB is one signed PutObject (default 128 MiB parts);
// put-multipart/size=64MiB,part=16MiB is 4 parts, up to 4 in flight;
// get/size=1MiB is one ranged GET of 1 MiB from a 64 MiB object;
// delete/size=4MiB is one DELETE of a 4 MiB object (the bucket WAL trims
// its objects one at a time, in order: this is what bounds its pace).
// Client and server share the machine's cores; docs/infra.md has reference
// numbers for this machine class.
package s3_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stratamq/stratamq/tier/s3"
	"github.com/stratamq/stratamq/tier/tiertest"
)

func BenchmarkTierS3VersityGW(b *testing.B) {
	endpoint, ak, sk := tiertest.StartVersityGW(b)
	const size = 64 << 20
	data := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuv"), size/32)

	for _, c := range []struct {
		name     string
		partSize int64
	}{
		{"put/size=64MiB", 0},
		{"put-multipart/size=64MiB,part=16MiB", 16 << 20},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := testConfig(endpoint, ak, sk, tiertest.BucketName(b))
			cfg.PartSize = c.partSize
			bkt := open(b, cfg)
			b.SetBytes(size)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := bkt.Put(b.Context(), fmt.Sprintf("bench/%d", i%4), bytes.NewReader(data), size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	b.Run("delete/size=4MiB", func(b *testing.B) {
		cfg := testConfig(endpoint, ak, sk, tiertest.BucketName(b))
		cfg.PartSize = s3.DefaultPartSize
		bkt := open(b, cfg)
		obj := data[:4<<20]
		for i := range b.N {
			if err := bkt.Put(b.Context(), fmt.Sprintf("bench/del/%d", i), bytes.NewReader(obj), int64(len(obj))); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		for i := range b.N {
			if err := bkt.Delete(b.Context(), fmt.Sprintf("bench/del/%d", i)); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("get/size=1MiB", func(b *testing.B) {
		cfg := testConfig(endpoint, ak, sk, tiertest.BucketName(b))
		cfg.PartSize = s3.DefaultPartSize
		bkt := open(b, cfg)
		if err := bkt.Put(b.Context(), "bench/obj", bytes.NewReader(data), size); err != nil {
			b.Fatal(err)
		}
		p := make([]byte, 1<<20)
		b.SetBytes(int64(len(p)))
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			off := int64(i%64) << 20
			if err := bkt.ReadAt(b.Context(), "bench/obj", p, off); err != nil {
				b.Fatal(err)
			}
		}
	})
}
