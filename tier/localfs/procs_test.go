package localfs_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/localfs"
)

// Environment of a contender process (TestTierLocalFSConditionalAcrossProcesses
// re-executes the test binary).
const (
	envContender = "LOCALFS_TEST_CONTENDER" // contender id
	envDir       = "LOCALFS_TEST_DIR"       // the bucket directory
)

const (
	contenders = 4
	rounds     = 40
	// The window between a condition's check and its rename is widened
	// to this, so that without a lock across processes two contenders
	// would both pass the check in almost every round.
	window = 2 * time.Millisecond
)

// TestTierLocalFSConditionalAcrossProcesses (issue 9 item 11): conditional
// writes are atomic among processes sharing the bucket directory, as two
// brokers on one file:// bucket do. Four processes race, round by round,
// an IfAbsent PUT of a new key and an IfMatch PUT on the ETag a key had
// before the round: exactly one wins each, and the object holds the
// winner's bytes.
func TestTierLocalFSConditionalAcrossProcesses(t *testing.T) {
	if id := os.Getenv(envContender); id != "" {
		contend(t, id, os.Getenv(envDir))
		return
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := filepath.Join(t.TempDir(), "bucket")
	b, err := localfs.New(dir, localfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var etags []string
	for r := range rounds {
		key := fmt.Sprintf("match/%d", r)
		if err := b.Put(ctx, key, strings.NewReader("initial"), 7); err != nil {
			t.Fatal(err)
		}
		a, err := b.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		etags = append(etags, a.ETag)
	}
	if err := os.WriteFile(filepath.Join(dir, "..", "etags"), []byte(strings.Join(etags, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	type proc struct {
		cmd *exec.Cmd
		out bytes.Buffer
	}
	procs := make([]*proc, contenders)
	for i := range procs {
		p := &proc{cmd: exec.CommandContext(rctx, os.Args[0], "-test.run=^TestTierLocalFSConditionalAcrossProcesses$", "-test.count=1")}
		p.cmd.Env = append(os.Environ(), envContender+"="+strconv.Itoa(i), envDir+"="+dir)
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = p
	}
	// All have opened the bucket: let them go at once.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready, err := filepath.Glob(filepath.Join(dir, "..", "ready.*"))
		if err != nil {
			t.Fatal(err)
		}
		if len(ready) == contenders {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d contenders ready after 30s", len(ready), contenders)
		}
		time.Sleep(time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(dir, "..", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wins := map[string][]string{} // "absent/3" -> winners
	for i, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("contender %d: %v\n%s", i, err, p.out.String())
		}
		sc := bufio.NewScanner(&p.out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "WON" {
				wins[f[1]] = append(wins[f[1]], f[2])
			}
		}
	}
	bad := 0
	for r := range rounds {
		for _, kind := range []string{"absent", "match"} {
			key := fmt.Sprintf("%s/%d", kind, r)
			w := wins[key]
			if len(w) != 1 {
				bad++
				t.Errorf("%s: %d winners %v, want exactly one", key, len(w), w)
				continue
			}
			a, err := b.Stat(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, a.Size)
			if err := b.ReadAt(ctx, key, got, 0); err != nil {
				t.Fatal(err)
			}
			if string(got) != "contender "+w[0] {
				t.Errorf("%s holds %q, but contender %s won it", key, got, w[0])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d conditional rounds had other than one winner", bad, 2*rounds)
	}
}

// contend is one contender process: after the start signal, for each
// round an IfAbsent PUT of absent/<round> and an IfMatch PUT of
// match/<round> on its ETag before the round, printing "WON <key> <id>"
// for each success.
func contend(t *testing.T, id, dir string) {
	raw, err := os.ReadFile(filepath.Join(dir, "..", "etags"))
	if err != nil {
		t.Fatal(err)
	}
	etags := strings.Split(string(raw), "\n")
	b, err := localfs.New(dir, localfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	localfs.SetAfterCheck(b, func(string) { time.Sleep(window) })
	if err := os.WriteFile(filepath.Join(dir, "..", "ready."+id), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "..", "go")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no start signal")
		}
		time.Sleep(time.Millisecond)
	}
	ctx := t.Context()
	body := "contender " + id
	put := func(key string, cond tier.Cond) {
		_, err := b.PutIf(ctx, key, strings.NewReader(body), int64(len(body)), cond)
		switch {
		case err == nil:
			fmt.Printf("WON %s %s\n", key, id)
		case !errors.Is(err, tier.ErrPreconditionFailed):
			t.Fatalf("%s: %v", key, err)
		}
	}
	for r := range rounds {
		put(fmt.Sprintf("absent/%d", r), tier.IfAbsent())
		put(fmt.Sprintf("match/%d", r), tier.IfMatch(etags[r]))
	}
}
