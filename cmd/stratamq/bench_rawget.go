package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/bucketurl"
)

const rawGetUsage = `usage: stratamq bench rawget --bucket URL [flags]

GETs every commitlog object (<prefix>/commitlog/*.seg) of a bucket whole,
one after another on one stream, then again spread over --streams parallel
streams: the bandwidth a cold replay of the same objects is compared with.
Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY as for the
broker. The last line on stdout is a JSON object (MB = 10^6 bytes).

flags:
`

type rawGetResult struct {
	Mode        string  `json:"mode"`
	Objects     int     `json:"objects"`
	Bytes       int64   `json:"bytes"` // object bytes per pass
	Chunk       int64   `json:"chunk,omitempty"`
	SeqSeconds  float64 `json:"seq_seconds"`
	SeqMBPerSec float64 `json:"seq_mb_per_sec"`
	Streams     int     `json:"streams"`
	ParSeconds  float64 `json:"par_seconds,omitempty"`
	ParMBPerSec float64 `json:"par_mb_per_sec,omitempty"`
}

// runRawGet is `stratamq bench rawget`.
func runRawGet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench rawget", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, rawGetUsage); fs.PrintDefaults() }
	bucket := fs.String("bucket", "", "bucket URL, as STRATAMQ_BUCKET (s3://bucket/prefix?endpoint=...)")
	prefix := fs.String("prefix", "DefaultCluster/broker-a", "the broker's prefix in the bucket: <cluster>/<brokerName>")
	streams := fs.Int("streams", 4, "parallel streams of the second pass (0: skip it)")
	chunk := fs.Int64("chunk", 0, "GET each object in ranged GETs of this many bytes (0: whole objects)")
	maxObjects := fs.Int("max-objects", 10000, "GET at most this many objects (the first ones)")
	timeout := fs.Duration("timeout", 10*time.Minute, "stop after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *bucket == "" || *streams < 0 || *chunk < 0 || *maxObjects < 1 {
		fmt.Fprintln(stderr, "stratamq bench rawget: need --bucket; --streams, --chunk ≥ 0; --max-objects ≥ 1")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	res, err := rawGet(ctx, *bucket, *prefix, *streams, *chunk, *maxObjects, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "stratamq bench rawget: %v\n", err)
		return 1
	}
	line, _ := json.Marshal(res)
	fmt.Fprintf(stdout, "%s\n", line)
	return 0
}

type rawObject struct {
	key  string
	size int64
}

func rawGet(ctx context.Context, url, prefix string, streams int, chunk int64, maxObjects int, log io.Writer) (*rawGetResult, error) {
	b, err := bucketurl.Open(ctx, url, bucketurl.Options{NoCreate: true})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	list := strings.Trim(prefix, "/")
	if list != "" {
		list += "/"
	}
	list += "commitlog/"
	var objs []rawObject
	var total, biggest int64
	err = b.List(ctx, list, func(key string, size int64) error {
		if !strings.HasSuffix(key, ".seg") || len(objs) >= maxObjects {
			return nil
		}
		objs = append(objs, rawObject{key, size})
		total += size
		biggest = max(biggest, size)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no .seg objects under %q", list)
	}
	fmt.Fprintf(log, "bench rawget: %d objects, %.1f MB under %s\n", len(objs), float64(total)/1e6, list)
	bufLen := biggest
	if chunk > 0 {
		bufLen = min(chunk, biggest)
	}
	res := &rawGetResult{Mode: "rawget", Objects: len(objs), Bytes: total, Chunk: chunk, Streams: streams}
	// Pass 1: one stream.
	buf := make([]byte, bufLen)
	t0 := time.Now()
	for _, o := range objs {
		if err := getObject(ctx, b, o, buf, chunk); err != nil {
			return nil, err
		}
	}
	res.SeqSeconds = time.Since(t0).Seconds()
	res.SeqMBPerSec = mbps(total, res.SeqSeconds)
	if streams == 0 {
		return res, nil
	}
	// Pass 2: the objects spread over parallel streams.
	var next atomic.Int64
	var wg sync.WaitGroup
	var errOnce sync.Once
	var first error
	t0 = time.Now()
	for range streams {
		wg.Go(func() {
			buf := make([]byte, bufLen)
			for {
				i := next.Add(1) - 1
				if i >= int64(len(objs)) || ctx.Err() != nil {
					return
				}
				if err := getObject(ctx, b, objs[i], buf, chunk); err != nil {
					errOnce.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	res.ParSeconds = time.Since(t0).Seconds()
	res.ParMBPerSec = mbps(total, res.ParSeconds)
	return res, nil
}

// getObject reads an object whole (chunk 0) or in ranged GETs of chunk bytes.
func getObject(ctx context.Context, b tier.Reader, o rawObject, buf []byte, chunk int64) error {
	if chunk <= 0 {
		return b.ReadAt(ctx, o.key, buf[:o.size], 0)
	}
	for off := int64(0); off < o.size; off += chunk {
		n := min(chunk, o.size-off)
		if err := b.ReadAt(ctx, o.key, buf[:n], off); err != nil {
			return err
		}
	}
	return nil
}

func mbps(bytes int64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return math.Round(float64(bytes)/secs/1e4) / 100
}
