//go:build !race

// Reads the topic back with replayAll: the official client's pull consumer
// writes its group name on every PullFrom while its rebalance goroutine
// reads it (a data race inside rocketmq-client-go), so this test runs in
// the README's second, race-free test pass.

package main

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/stratamq/stratamq/remoting"
)

// TestE2ECompactionKill9Loop: compaction's crash safety with the real
// binary. `stratamq serve` over a file:// bucket (1 MiB segments sealed
// after 1 s, uploaded at once, compacted every 200 ms, tombstones dropped
// after 1 ms, replaced generations deleted 500 ms later) holds a compacted
// topic of 4 queues. The official Go client sends to it all the time, one
// send at a time, 300 keys each to its queue (FNV-1a of the key mod 4,
// through a manual queue selector), one send in 25 a tombstone (an empty
// body): 250 hot keys written again and again, and 50 cold ones, each
// written in one run only (their values wait in generations through the
// later kills and restores). The broker is killed with SIGKILL at a
// random moment of a run, or a random moment within a generation's grace
// after a compaction round, and started again, alternately on the same
// data dir and on an empty one (which restores from the bucket).
//
// After a last run like the others the sends stop, and once every
// queue's listed generation reaches the queue's max offset, every queue
// is read from offset 0 with the official pull consumer. Each key must
// then appear at most once, in its queue, with a value sent for it (byte
// for byte), at the queue offset its ack gave, offsets ascending in each
// queue, no tombstone left:
//
//   - a key whose latest acknowledged send is durable, and not followed by
//     a send whose outcome is unknown (the broker died under it) or an ack
//     an empty disk may have taken, holds exactly that value (absent if it
//     was a tombstone);
//   - otherwise it holds its latest durable value or any later one
//     (absent for a tombstone; absent too if no send of it is durable).
//
// A kill on the same disk loses nothing (docs/durability.md). An ack is
// durable unless the first empty-disk restart after it was sent came
// while the bucket's manifest held it neither in a listed commitlog object
// (listed in log order) nor below its queue's listed generation's point
// (which keeps it or a later record of its key): a lost disk takes what
// the manifest did not list yet. While sending, each queue's acked
// offsets and the acked commitlog offsets ascend (no offset handed out
// twice, across restores too). At the end the manifest lists at most one
// commitlog object (the generations cover the rest) and the bucket holds
// no generation object the manifest does not list (the sweep deletes a
// crashed round's object, and a replaced one a grace later).
//
// CI form: 4 kills (2 on an empty disk). STRATAMQ_LONG=1: 20.
// STRATAMQ_COMPACTKILL_KILLS=n sets the number of kills;
// STRATAMQ_COMPACTKILL_SEED=n fixes the random choices (keys, bodies,
// kill points; not the timing).
func TestE2ECompactionKill9Loop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	nKills := 4
	if os.Getenv("STRATAMQ_LONG") == "1" {
		nKills = 20
	}
	if v, err := strconv.Atoi(os.Getenv("STRATAMQ_COMPACTKILL_KILLS")); err == nil && v > 0 {
		nKills = v
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("STRATAMQ_COMPACTKILL_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("STRATAMQ_COMPACTKILL_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("seed %d (STRATAMQ_COMPACTKILL_SEED), %d kills", seed, nKills)
	rng := rand.New(rand.NewPCG(seed, 1))
	begin := time.Now()

	bin := buildBinary(t)
	root := t.TempDir()
	dataDir := filepath.Join(root, "data")
	bucketDir := filepath.Join(root, "bucket")
	ns := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	br := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := map[string]string{
		"STRATAMQ_DATA_DIR":                       dataDir,
		"STRATAMQ_NAMESRV_LISTEN":                 ns,
		"STRATAMQ_LISTEN":                         br,
		"STRATAMQ_HTTP_LISTEN":                    httpAddr,
		"STRATAMQ_GRPC_LISTEN":                    "",
		"STRATAMQ_LOG_LEVEL":                      "info",
		"STRATAMQ_BUCKET":                         "file://" + bucketDir,
		"STRATAMQ_SEGMENT_SIZE":                   "1MiB",
		"STRATAMQ_SEGMENT_MAX_AGE":                "1s",
		"STRATAMQ_LOCAL_RETENTION":                "0",
		"STRATAMQ_TIER_COMMIT_DELAY":              "100ms",
		"STRATAMQ_CHECKPOINT_INTERVAL":            "500ms",
		"STRATAMQ_LEASE_TTL":                      "3s",
		"STRATAMQ_COMPACTION_INTERVAL":            "200ms",
		"STRATAMQ_COMPACTION_MIN_MESSAGES":        "1",
		"STRATAMQ_COMPACTION_TOMBSTONE_RETENTION": "1ms",
		"STRATAMQ_COMPACTION_CPU":                 "50",
		"STRATAMQ_COMPACTION_GRACE":               "500ms",
		"STRATAMQ_COMPACTION_MAX_DELAY":           "500ms",
	}
	prefixDir := filepath.Join(bucketDir, "DefaultCluster", "broker-a")
	manifestPath := filepath.Join(prefixDir, "meta", "manifest.json")

	var procs []*binaryServe // every broker process, for the logs of a failure
	b := startCrashLoopBroker(t, bin, env, ns)
	procs = append(procs, b)
	topic := uniqueName(t, "CK")
	h := remoting.CreateTopicRequestHeader{Topic: topic, ReadQueueNums: ckQueues, WriteQueueNums: ckQueues, Perm: 6,
		Attributes: "+cleanup.policy=COMPACTION"}
	if r, ok := ask(br, remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil), 10*time.Second); !ok {
		t.Fatalf("create the compacted topic: %v", r)
	}
	waitFor(t, 10*time.Second, "route of "+topic, func() bool { return routeExists(ns, topic) })

	// On a failure, the logs of every broker process are kept in a
	// directory of their own (t's temporary directory goes).
	defer func() {
		if !t.Failed() {
			return
		}
		dir, err := os.MkdirTemp("", fmt.Sprintf("compactkill-%d-", seed))
		if err != nil {
			return
		}
		for i, p := range procs {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("broker-%02d.log", i)), []byte(p.logs.String()), 0o644)
		}
		t.Logf("seed %d: the logs of the %d broker processes are in %s", seed, len(procs), dir)
	}()

	l := &ckLog{byKey: make([][]*ckSend, ckKeys), lastQoff: [ckQueues]int64{-1, -1, -1, -1}, lastPhys: -1}
	var kills atomic.Int64 // kills so far: the run a send belongs to
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop.Store(true)
	p := newClientProducer(t, ns, rmqproducer.WithQueueSelector(rmqproducer.NewManualQueueSelector()),
		rmqproducer.WithSendMsgTimeout(3*time.Second), rmqproducer.WithRetry(0))
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(seed, 2))
		paced := time.Now()
		for seq := int64(0); !stop.Load(); seq++ {
			run := int(kills.Load())
			k := r.IntN(ckHot) // a hot key, sent again and again
			if r.IntN(100) < 2 {
				// A cold key: each is sent in one run only, so its value
				// waits in generations through the later kills.
				runs, slot := nKills+1, run%(nKills+1)
				if n := (ckKeys - ckHot - slot + runs - 1) / runs; n > 0 {
					k = ckHot + slot + runs*r.IntN(n)
				}
			}
			pad := 50 + r.IntN(1500)
			if r.IntN(25) == 0 {
				pad = -1 // a tombstone
			}
			key := ckKey(k)
			q := ckQueue(key)
			var body []byte
			if pad >= 0 {
				body = []byte(ckBody(key, seq, pad))
			}
			m := primitive.NewMessage(topic, body)
			m.WithKeys([]string{key})
			m.Queue = &primitive.MessageQueue{Topic: topic, BrokerName: "broker-a", QueueId: q}
			s := &ckSend{seq: seq, pad: pad, queue: q, run: run, qoff: -1, phys: -1}
			l.begin(k, s)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			res, err := p.SendSync(ctx, m)
			cancel()
			switch {
			case err != nil:
				l.unknown(s, err.Error())
			case res.Status != primitive.SendOK:
				l.unknown(s, fmt.Sprintf("status %v", res.Status))
			default:
				phys, perr := physOfMsgID(res.OffsetMsgID)
				l.ack(s, key, q, res, phys, perr)
				// At most ckRate sends a second: the machine is shared.
				paced = paced.Add(time.Second / ckRate)
				if d := time.Until(paced); d > 0 {
					time.Sleep(d)
				} else {
					paced = time.Now()
				}
				continue
			}
			time.Sleep(20 * time.Millisecond) // the broker is down or restarting
		}
	}()

	var killed []ckKill
	for i := range nKills {
		fresh := i%2 == 1
		k := ckKill{fresh: fresh}
		// A random moment of a run that acknowledged some sends: any, or
		// within a generation's grace after a round (the old generation
		// is still in the bucket, doomed).
		waitCKAcks(t, b, fmt.Sprintf("run %d", i), l, i, 20)
		if rng.IntN(2) == 0 {
			k.trigger = "random"
			runFor := time.Duration(200+rng.IntN(2800)) * time.Millisecond
			for time.Since(b.ready) < runFor {
				time.Sleep(10 * time.Millisecond)
			}
		} else {
			delay := time.Duration(rng.IntN(450)) * time.Millisecond
			k.trigger = fmt.Sprintf("%v after a round", delay)
			n0 := ckRoundsLogged(b)
			deadline := time.Now().Add(10 * time.Second)
			for ckRoundsLogged(b) == n0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if ckRoundsLogged(b) == n0 {
				k.trigger = "no round within 10s"
			}
			time.Sleep(delay)
		}
		k.scraped, _ = ckScrapeRounds(httpAddr)
		if err := b.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-b.exited
		k.at = time.Now()
		k.acked = l.acks()
		k.rounds = ckRoundsLogged(b)
		if fresh {
			m, err := loadManifestFile(manifestPath)
			if err != nil {
				t.Logf("kill %d: manifest: %v (every ack so far counted as perhaps lost)", i+1, err)
			} else {
				for _, o := range m.CommitLog() {
					k.uploadedEnd = max(k.uploadedEnd, o.End())
					k.segments++
				}
				for _, o := range m.Objects {
					if o.Kind == "compacted" && o.Topic == topic {
						k.points[o.QueueID] = max(k.points[o.QueueID], o.Base)
					}
				}
			}
			if err := os.RemoveAll(dataDir); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(dataDir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		kills.Add(1)
		b = startCrashLoopBroker(t, bin, env, ns)
		procs = append(procs, b)
		k.restart = b.ready.Sub(k.at)
		killed = append(killed, k)
	}

	// The last run, as long as the others; then the sends stop.
	waitCKAcks(t, b, "the last run", l, nKills, 20)
	for runFor := time.Duration(200+rng.IntN(2800)) * time.Millisecond; time.Since(b.ready) < runFor; {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	sendsDone := time.Now()
	if bad := l.violations(); len(bad) > 0 {
		t.Fatalf("seed %d: %d violations while sending, the first ones:\n%s", seed, len(bad), strings.Join(bad[:min(len(bad), 10)], "\n"))
	}

	// Every queue compacted to its end: its listed generation's point is
	// its max offset.
	points := map[int]int64{}
	var maxes [ckQueues]int64
	waitFor(t, 60*time.Second, "every queue's listed generation at the queue's max offset", func() bool {
		m, err := loadManifestFile(manifestPath)
		if err != nil {
			return false
		}
		clear(points)
		for _, o := range m.Objects {
			if o.Kind == "compacted" && o.Topic == topic {
				points[o.QueueID] = max(points[o.QueueID], o.Base)
			}
		}
		for q := range ckQueues {
			maxes[q] = queueMax(br, topic, q)
			if maxes[q] <= 0 || points[q] != maxes[q] {
				return false
			}
		}
		return true
	})
	compacted := time.Since(sendsDone)

	got := replayAll(t, ns, topic)
	checked := checkCompactKill(t, fmt.Sprintf("seed %d", seed), got, l, killed)

	// The bucket: no commitlog object listed but the newest, and no
	// generation object the manifest does not list.
	var listedSegs, genFiles, segFiles []string
	var listedGens map[string]bool
	waitFor(t, 30*time.Second, "the covered segments unlisted and the unlisted generations deleted", func() bool {
		m, err := loadManifestFile(manifestPath)
		if err != nil {
			return false
		}
		listedSegs = listedSegs[:0]
		for _, o := range m.CommitLog() {
			listedSegs = append(listedSegs, o.Key)
		}
		listedGens = map[string]bool{}
		for _, o := range m.Objects {
			if o.Kind == "compacted" {
				listedGens[filepath.Join(prefixDir, filepath.FromSlash(o.Key))] = true
			}
		}
		genFiles, _ = bucketObjects(bucketDir, "compacted/")
		segFiles, _ = bucketObjects(bucketDir, "commitlog/")
		if len(listedSegs) > 1 || len(listedGens) != ckQueues || len(genFiles) != ckQueues {
			return false
		}
		for _, f := range genFiles {
			if !listedGens[f] {
				return false
			}
		}
		return true
	})

	logRounds := 0
	for _, p := range procs {
		logRounds += ckRoundsLogged(p)
	}
	scraped, _ := ckScrapeRounds(httpAddr)
	for _, k := range killed {
		scraped += k.scraped
	}
	restarts := make([]time.Duration, 0, len(killed))
	for i, k := range killed {
		line := fmt.Sprintf("kill %d (%s, %s): %d acks before it, %d compaction rounds in its run, serving again %v later",
			i+1, map[bool]string{false: "same disk", true: "empty disk"}[k.fresh], k.trigger, k.acked, k.rounds, k.restart.Round(time.Millisecond))
		if k.fresh {
			line += fmt.Sprintf("; the manifest listed %d commitlog objects ending at %d and generations up to queue offsets %v: %d acks past both (perhaps lost)",
				k.segments, k.uploadedEnd, k.points, l.pastEnd(i, k))
		}
		t.Log(line)
		restarts = append(restarts, k.restart)
	}
	sort.Slice(restarts, func(i, j int) bool { return restarts[i] < restarts[j] })
	st := l.stats()
	t.Logf("%d kills, %d sends: %d acked (%d tombstones), %d with unknown outcome %v",
		len(killed), st.sends, st.acks, st.tombAcks, st.unknown, st.errs)
	t.Logf("%d keys: %d held exactly their one allowed value (%d absent: never sent or tombstoned; %d a value sent before the last kill, %d before an empty-disk restart), %d one of %d allowed values (unknown outcomes, acks perhaps lost)",
		ckKeys, checked.strict, checked.absent, checked.older, checked.emptyDisk, checked.loose, checked.choices)
	t.Logf("compaction: %d rounds logged (%.0f by stratamq_compaction_queue_rounds_total, scraped before each kill and at the end); queues compacted to their max offsets %v %v after the last send; bucket: %d generation objects, %d commitlog objects (%d listed)",
		logRounds, scraped, maxes, compacted.Round(time.Millisecond), len(genFiles), len(segFiles), len(listedSegs))
	if len(restarts) > 0 {
		t.Logf("kill to serving: min %v, median %v, max %v; in %v", restarts[0].Round(time.Millisecond),
			restarts[len(restarts)/2].Round(time.Millisecond), restarts[len(restarts)-1].Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	}
	if logRounds == 0 {
		t.Fatalf("seed %d: no compaction round ran", seed)
	}
}

const (
	ckQueues = 4
	ckKeys   = 300
	ckHot    = 250  // keys 0-249 take 98% of the sends; 250-299 the rest, each in one run
	ckRate   = 1500 // acknowledged sends a second, at most
)

func ckKey(k int) string { return fmt.Sprintf("ck-%03d", k) }

// ckQueue is the queue of key: FNV-1a 32 of it mod 4.
func ckQueue(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % ckQueues)
}

// ckBody is the body of send seq of key (pad < 0: a tombstone, empty).
func ckBody(key string, seq int64, pad int) string {
	if pad < 0 {
		return ""
	}
	return fmt.Sprintf("%s|%d|", key, seq) + strings.Repeat(string(rune('a'+seq%26)), pad)
}

// ckSend is one send to the compacted topic.
type ckSend struct {
	seq   int64
	pad   int // body padding; -1: a tombstone
	queue int
	run   int // kills before it was sent
	acked bool
	qoff  int64 // the ack's queue offset
	phys  int64 // the ack's commitlog offset
	err   string
}

func (s *ckSend) String() string {
	what := fmt.Sprintf("value %d", s.seq)
	if s.pad < 0 {
		what = fmt.Sprintf("tombstone %d", s.seq)
	}
	if s.acked {
		return fmt.Sprintf("%s sent in run %d, acked at queue offset %d, commitlog %d", what, s.run, s.qoff, s.phys)
	}
	if s.err == "" {
		return fmt.Sprintf("%s sent in run %d, no answer yet", what, s.run)
	}
	return fmt.Sprintf("%s sent in run %d, outcome unknown (%.80s)", what, s.run, s.err)
}

// ckKill is one kill -9.
type ckKill struct {
	fresh       bool   // restarted on an empty data dir
	trigger     string // how its moment was chosen
	at          time.Time
	acked       int
	uploadedEnd int64           // fresh: the end of the manifest's commitlog objects at the kill
	segments    int             // fresh: how many it listed
	points      [ckQueues]int64 // fresh: the points of the generations it listed
	restart     time.Duration
	rounds      int     // compaction rounds its process logged
	scraped     float64 // stratamq_compaction_queue_rounds_total just before it
}

// ckLog is the sends of every key, in order.
type ckLog struct {
	mu       sync.Mutex
	byKey    [][]*ckSend
	bySeq    map[int64]int // seq → key
	lastQoff [ckQueues]int64
	lastPhys int64
	bad      []string
}

func (l *ckLog) begin(k int, s *ckSend) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bySeq == nil {
		l.bySeq = map[int64]int{}
	}
	l.byKey[k] = append(l.byKey[k], s)
	l.bySeq[s.seq] = k
}

func (l *ckLog) unknown(s *ckSend, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.err = why
}

func (l *ckLog) ack(s *ckSend, key string, q int, res *primitive.SendResult, phys int64, perr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.acked, s.qoff, s.phys = true, res.QueueOffset, phys
	if perr != nil {
		l.bad = append(l.bad, fmt.Sprintf("%s %v: %v", key, s, perr))
	}
	if res.MessageQueue == nil || res.MessageQueue.QueueId != q {
		l.bad = append(l.bad, fmt.Sprintf("%s %v: acked on queue %v, sent to %d", key, s, res.MessageQueue, q))
		return
	}
	// One sender: each queue's acked offsets ascend, across restarts too
	// (no offset is ever handed out twice).
	if s.qoff <= l.lastQoff[q] {
		l.bad = append(l.bad, fmt.Sprintf("%s %v: queue %d offset not past the previous ack's %d", key, s, q, l.lastQoff[q]))
	}
	l.lastQoff[q] = s.qoff
	if s.phys <= l.lastPhys {
		l.bad = append(l.bad, fmt.Sprintf("%s %v: commitlog offset not past the previous ack's %d", key, s, l.lastPhys))
	}
	l.lastPhys = s.phys
}

func (l *ckLog) violations() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.bad...)
}

func (l *ckLog) acks() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ss := range l.byKey {
		for _, s := range ss {
			if s.acked {
				n++
			}
		}
	}
	return n
}

// acksIn counts the acks of sends of run.
func (l *ckLog) acksIn(run int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ss := range l.byKey {
		for i := len(ss) - 1; i >= 0 && ss[i].run >= run; i-- {
			if ss[i].acked && ss[i].run == run {
				n++
			}
		}
	}
	return n
}

// pastEnd counts the acks of runs up to kill i that k (an empty-disk
// kill) may have taken.
func (l *ckLog) pastEnd(i int, k ckKill) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ss := range l.byKey {
		for _, s := range ss {
			if s.acked && s.run <= i && !k.keeps(s) {
				n++
			}
		}
	}
	return n
}

// keeps: the bucket held s when k (an empty-disk kill) came: its
// commitlog offset in a listed commitlog object (listed in log order,
// without holes), or its queue offset below its queue's listed
// generation's point (which keeps s or a later record of its key).
func (k ckKill) keeps(s *ckSend) bool {
	return s.phys < k.uploadedEnd || s.qoff < k.points[s.queue]
}

type ckStats struct {
	sends, acks, tombAcks, unknown int
	errs                           map[string]int // unknown outcomes by error, shortened
}

func (l *ckLog) stats() ckStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := ckStats{errs: map[string]int{}}
	for _, ss := range l.byKey {
		for _, s := range ss {
			st.sends++
			switch {
			case s.acked:
				st.acks++
				if s.pad < 0 {
					st.tombAcks++
				}
			default:
				st.unknown++
				e := s.err
				if i := strings.LastIndex(e, ": "); i >= 0 {
					e = e[i+2:]
				}
				st.errs[e[:min(len(e), 40)]]++
			}
		}
	}
	return st
}

// waitCKAcks waits up to 60 s until n sends of run are acked.
func waitCKAcks(t *testing.T, b *binaryServe, what string, l *ckLog, run, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for l.acksIn(run) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d acks after 60s, want %d; broker logs:\n%s", what, l.acksIn(run), n, tail(b.logs.String()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ckRoundsLogged counts the compaction rounds a broker process logged.
func ckRoundsLogged(b *binaryServe) int {
	return strings.Count(b.logs.String(), "msg=compacted ")
}

// ckScrapeRounds reads stratamq_compaction_queue_rounds_total from the
// broker's /metrics.
func ckScrapeRounds(addr string) (float64, bool) {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "stratamq_compaction_queue_rounds_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

type ckChecked struct {
	strict, loose, choices, absent int
	older                          int // strict keys holding a value of a run before the last kill
	emptyDisk                      int // ... of a run before an empty-disk restart
}

// ckAbsent stands for "the key is not there" among a key's allowed outcomes.
const ckAbsent = int64(-1)

// checkCompactKill checks the compacted topic read from offset 0 (got)
// against the sends (see TestE2ECompactionKill9Loop).
func checkCompactKill(t *testing.T, what string, got map[int][]*primitive.MessageExt, l *ckLog, killed []ckKill) ckChecked {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var problems []string
	// durable: an ack no empty disk may have taken.
	durable := func(s *ckSend) bool {
		if !s.acked {
			return false
		}
		for d := s.run; d < len(killed); d++ {
			if killed[d].fresh {
				return killed[d].keeps(s)
			}
		}
		return true
	}
	history := func(k int) string {
		ss := l.byKey[k]
		var b strings.Builder
		from := max(0, len(ss)-8)
		fmt.Fprintf(&b, "    %s (queue %d), %d sends, the last %d:", ckKey(k), ckQueue(ckKey(k)), len(ss), len(ss)-from)
		for _, s := range ss[from:] {
			fmt.Fprintf(&b, "\n      %v", s)
			if s.acked && !durable(s) {
				b.WriteString(" (perhaps lost with a disk)")
			}
		}
		return b.String()
	}
	type rec struct {
		m   *primitive.MessageExt
		seq int64 // ckAbsent: a tombstone, or a body not sent
	}
	found := map[int][]rec{} // key → records read
	for q := range ckQueues {
		prev := int64(-1)
		for _, m := range got[q] {
			if m.QueueOffset <= prev {
				problems = append(problems, fmt.Sprintf("queue %d: offset %d after %d", q, m.QueueOffset, prev))
			}
			prev = m.QueueOffset
			key := m.GetKeys()
			kk, kerr := strconv.Atoi(strings.TrimPrefix(key, "ck-"))
			if !strings.HasPrefix(key, "ck-") || kerr != nil || kk < 0 || kk >= ckKeys {
				problems = append(problems, fmt.Sprintf("queue %d offset %d: a record of key %q, never sent", q, m.QueueOffset, key))
				continue
			}
			found[kk] = append(found[kk], rec{m, ckAbsent})
			if ckQueue(key) != q {
				problems = append(problems, fmt.Sprintf("queue %d offset %d: key %s, sent to queue %d", q, m.QueueOffset, key, ckQueue(key)))
			}
			if len(m.Body) == 0 {
				problems = append(problems, fmt.Sprintf("queue %d offset %d: a tombstone of %s outlived its 1ms retention\n%s", q, m.QueueOffset, key, history(kk)))
				continue
			}
			parts := strings.SplitN(string(m.Body), "|", 3)
			seq, serr := int64(0), error(nil)
			if len(parts) == 3 {
				seq, serr = strconv.ParseInt(parts[1], 10, 64)
			}
			sk, sent := l.bySeq[seq]
			if len(parts) != 3 || serr != nil || !sent || sk != kk {
				problems = append(problems, fmt.Sprintf("queue %d offset %d: key %s holds %.40q: never sent for it", q, m.QueueOffset, key, m.Body))
				continue
			}
			var s *ckSend
			for _, c := range l.byKey[kk] {
				if c.seq == seq {
					s = c
				}
			}
			found[kk][len(found[kk])-1].seq = seq
			if string(m.Body) != ckBody(key, seq, s.pad) {
				problems = append(problems, fmt.Sprintf("queue %d offset %d: %s value %d: the body differs from the one sent (%d bytes, sent %d)", q, m.QueueOffset, key, seq, len(m.Body), len(ckBody(key, seq, s.pad))))
			}
			if s.acked && s.qoff != m.QueueOffset {
				problems = append(problems, fmt.Sprintf("queue %d offset %d: %s %v: read at another offset", q, m.QueueOffset, key, s))
			}
		}
	}
	var c ckChecked
	for k, ss := range l.byKey {
		recs := found[k]
		if len(recs) > 1 {
			var at []string
			for _, r := range recs {
				at = append(at, fmt.Sprintf("%d@%d %.24q", r.m.Queue.QueueId, r.m.QueueOffset, r.m.Body))
			}
			problems = append(problems, fmt.Sprintf("key %s read %d times: %s\n%s", ckKey(k), len(recs), strings.Join(at, ", "), history(k)))
			continue
		}
		// The allowed outcomes: the latest durable send's value and every
		// later one (a tombstone: absent); absent if none is durable.
		allowed := map[int64]bool{}
		j := -1
		for i, s := range ss {
			if durable(s) {
				j = i
			}
		}
		if j < 0 {
			allowed[ckAbsent] = true
		}
		for _, s := range ss[max(j, 0):] {
			if s.pad < 0 {
				allowed[ckAbsent] = true
			} else {
				allowed[s.seq] = true
			}
		}
		have := ckAbsent
		if len(recs) == 1 {
			have = recs[0].seq
		}
		if !allowed[have] && (len(recs) == 0 || have != ckAbsent) { // a bad record is reported above
			var want []string
			for v := range allowed {
				if v == ckAbsent {
					want = append(want, "absent")
				} else {
					want = append(want, strconv.FormatInt(v, 10))
				}
			}
			sort.Strings(want)
			holds := "absent"
			if have != ckAbsent {
				holds = fmt.Sprintf("value %d at %d@%d", have, recs[0].m.Queue.QueueId, recs[0].m.QueueOffset)
			}
			problems = append(problems, fmt.Sprintf("key %s holds %s, want one of [%s]\n%s", ckKey(k), holds, strings.Join(want, " "), history(k)))
			continue
		}
		if len(allowed) == 1 {
			c.strict++
			if have != ckAbsent && ss[j].run < len(killed) {
				c.older++
				for d := ss[j].run; d < len(killed); d++ {
					if killed[d].fresh {
						c.emptyDisk++
						break
					}
				}
			}
		} else {
			c.loose++
			c.choices += len(allowed)
		}
		if have == ckAbsent {
			c.absent++
		}
	}
	if len(problems) > 0 {
		var kl []string
		for i, k := range killed {
			s := fmt.Sprintf("kill %d after run %d: %s, %s, %d acks before it", i+1, i, map[bool]string{false: "same disk", true: "empty disk"}[k.fresh], k.trigger, k.acked)
			if k.fresh {
				s += fmt.Sprintf(", the manifest's commitlog ending at %d, its generations' points %v", k.uploadedEnd, k.points)
			}
			kl = append(kl, s)
		}
		t.Fatalf("%s: %d problems in %d queues read from offset 0; the first ones:\n%s\nthe kills:\n%s",
			what, len(problems), len(got), strings.Join(problems[:min(len(problems), 20)], "\n"), strings.Join(kl, "\n"))
	}
	return c
}
