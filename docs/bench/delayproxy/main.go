// Command delayproxy is a TCP proxy that adds a drawn latency to every HTTP
// response passing through it: a stand-in for an object store slower than
// a loopback versitygw (tc netem is not available on the benchmark
// machine). docs/bench/wal.sh puts it in front of versitygw.
//
//	go run ./docs/bench/delayproxy -listen 127.0.0.1:27181 -target 127.0.0.1:27171 \
//	    -dist 30ms-60ms:94,60ms-150ms:5,150ms-400ms:1
//
// Per connection, the bytes from the client go to the server at once; the
// first bytes the server sends after the client spoke (the start of an
// answer to a new request: keep-alive HTTP/1.1 without pipelining) are
// held for a delay drawn from -dist, and every later byte of the
// connection keeps its order behind them. An interim "HTTP/1.1 100" answer
// (Expect: 100-continue) is passed on undelayed, so a PUT pays one delay,
// on its final answer. The server has done the work (the object exists)
// when the delay starts, as in a store whose commit happens somewhere
// within the request's latency.
//
// -dist is a list of weighted uniform ranges, lo-hi:weight, comma
// separated: 30ms-60ms:94,60ms-150ms:5,150ms-400ms:1 draws 30-60 ms with
// probability 0.94, 60-150 ms with 0.05 and 150-400 ms with 0.01. On
// SIGTERM or SIGINT it prints one JSON line on stdout: the answers
// delayed and the percentiles of the delays drawn.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type band struct {
	lo, hi time.Duration
	weight float64
}

type dist struct {
	bands []band
	total float64
}

func parseDist(s string) (dist, error) {
	var d dist
	for _, part := range strings.Split(s, ",") {
		rng, w, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			w = "1"
		}
		los, his, ok := strings.Cut(rng, "-")
		if !ok {
			his = los
		}
		lo, err := time.ParseDuration(los)
		if err != nil {
			return d, fmt.Errorf("-dist %q: %w", part, err)
		}
		hi, err := time.ParseDuration(his)
		if err != nil {
			return d, fmt.Errorf("-dist %q: %w", part, err)
		}
		wf, err := strconv.ParseFloat(w, 64)
		if err != nil || wf <= 0 || hi < lo || lo < 0 {
			return d, fmt.Errorf("-dist %q: want lo-hi:weight with 0 <= lo <= hi and weight > 0", part)
		}
		d.bands = append(d.bands, band{lo, hi, wf})
		d.total += wf
	}
	if len(d.bands) == 0 {
		return d, errors.New("-dist: empty")
	}
	return d, nil
}

// draw returns one delay; rnd is not safe for concurrent use (the caller locks).
func (d dist) draw(rnd *rand.Rand) time.Duration {
	x := rnd.Float64() * d.total
	b := d.bands[len(d.bands)-1]
	for _, c := range d.bands {
		if x < c.weight {
			b = c
			break
		}
		x -= c.weight
	}
	return b.lo + time.Duration(rnd.Float64()*float64(b.hi-b.lo))
}

type proxy struct {
	target string
	dist   dist

	mu     sync.Mutex
	rnd    *rand.Rand
	drawn  []time.Duration // every delay drawn, for the percentiles
	conns  atomic.Int64
	passed atomic.Int64 // interim 100 answers passed undelayed
}

func (p *proxy) delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.dist.draw(p.rnd)
	p.drawn = append(p.drawn, d)
	return d
}

type chunk struct {
	b       []byte
	release time.Time
}

func (p *proxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		log.Printf("delayproxy: dial %s: %v", p.target, err)
		return
	}
	defer s.Close()
	p.conns.Add(1)
	var spoke atomic.Bool // the client sent bytes since the server last started an answer
	done := make(chan struct{}, 2)
	go func() { // client -> server, undelayed
		buf := make([]byte, 256<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				spoke.Store(true)
				if _, werr := s.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		if tc, ok := s.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	// server -> client: a reader stamps each chunk with its release time,
	// a writer sends them in order at that time.
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		var last time.Time
		for {
			buf := make([]byte, 256<<10)
			n, err := s.Read(buf)
			if n > 0 {
				now := time.Now()
				rel := now
				if spoke.CompareAndSwap(true, false) {
					if bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 100 ")) {
						p.passed.Add(1)
					} else {
						rel = now.Add(p.delay())
					}
				}
				if rel.Before(last) {
					rel = last
				}
				last = rel
				q <- chunk{buf[:n], rel}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		for ch := range q {
			if d := time.Until(ch.release); d > 0 {
				time.Sleep(d)
			}
			if _, err := c.Write(ch.b); err != nil {
				break
			}
		}
		for range q { // drain, so the reader ends
		}
		done <- struct{}{}
	}()
	<-done
}

func (p *proxy) stats() map[string]any {
	p.mu.Lock()
	d := slices.Clone(p.drawn)
	p.mu.Unlock()
	slices.Sort(d)
	pct := func(f float64) float64 {
		if len(d) == 0 {
			return 0
		}
		i := int(f * float64(len(d)-1))
		return float64(d[i].Microseconds()) / 1000
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	mean := 0.0
	if len(d) > 0 {
		mean = float64(sum.Microseconds()) / 1000 / float64(len(d))
	}
	return map[string]any{
		"delayed": len(d), "conns": p.conns.Load(), "interim_passed": p.passed.Load(),
		"p50_ms": pct(0.50), "p90_ms": pct(0.90), "p99_ms": pct(0.99), "max_ms": pct(1), "mean_ms": mean,
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:27181", "address to listen on")
	target := flag.String("target", "127.0.0.1:27171", "address to forward to")
	spec := flag.String("dist", "30ms-60ms:94,60ms-150ms:5,150ms-400ms:1", "delay of each answer: weighted uniform ranges lo-hi:weight, comma separated")
	seed := flag.Uint64("seed", 1, "random seed of the draws")
	flag.Parse()
	d, err := parseDist(*spec)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	p := &proxy{target: *target, dist: d, rnd: rand.New(rand.NewPCG(*seed, *seed^0x9e3779b97f4a7c15))}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		_ = ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		go p.serve(c)
	}
	_ = json.NewEncoder(os.Stdout).Encode(p.stats())
}
