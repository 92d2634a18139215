package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFirstHourBadSettings (issue 13 item 6): every bad setting gets a
// one-line error naming its variable and a non-zero exit before any port
// opens. The test holds the name server's and broker's ports itself: a
// command that tried to listen first would fail on them instead.
func TestFirstHourBadSettings(t *testing.T) {
	t.Parallel()
	hold := func() (string, func()) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln.Addr().String(), func() { ln.Close() }
	}
	nsAddr, closeNS := hold()
	defer closeNS()
	brAddr, closeBr := hold()
	defer closeBr()
	httpAddr, closeHTTP := hold()
	defer closeHTTP()
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // in the one line
	}{
		{"log level", map[string]string{"STRATAMQ_LOG_LEVEL": "loud"}, nil, `STRATAMQ_LOG_LEVEL="loud"`},
		{"segment size zero", map[string]string{"STRATAMQ_SEGMENT_SIZE": "0"}, nil, "STRATAMQ_SEGMENT_SIZE (--segment-size) is 0"},
		{"segment size zero flag", nil, []string{"--segment-size", "0"}, "STRATAMQ_SEGMENT_SIZE (--segment-size) is 0"},
		{"segment size unparsable", map[string]string{"STRATAMQ_SEGMENT_SIZE": "lots"}, nil, `STRATAMQ_SEGMENT_SIZE="lots"`},
		{"flush", map[string]string{"STRATAMQ_FLUSH": "maybe"}, nil, `STRATAMQ_FLUSH="maybe"`},
		{"max connections zero", map[string]string{"STRATAMQ_MAX_CONNECTIONS": "0"}, nil, "STRATAMQ_MAX_CONNECTIONS (--max-connections) is 0"},
		{"data dir", map[string]string{"STRATAMQ_DATA_DIR": filepath.Join(notADir, "data")}, nil, "STRATAMQ_DATA_DIR="},
		{"metrics port taken", map[string]string{"STRATAMQ_HTTP_LISTEN": httpAddr}, nil, "STRATAMQ_HTTP_LISTEN="},
		{"stray argument", nil, []string{"now"}, `unexpected argument "now"`},
		{"bucket URL", map[string]string{"STRATAMQ_BUCKET": "s3://b1/p"}, nil, "STRATAMQ_BUCKET="},
		{"bucket unreachable", map[string]string{"STRATAMQ_BUCKET": "minio://127.0.0.1:1/bucket/p?secure=false",
			"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "secretsecret"}, nil, "STRATAMQ_BUCKET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"STRATAMQ_NAMESRV_LISTEN": nsAddr, "STRATAMQ_LISTEN": brAddr,
				"STRATAMQ_HTTP_LISTEN": "127.0.0.1:0", "STRATAMQ_DATA_DIR": t.TempDir()}
			for k, v := range tc.env {
				env[k] = v
			}
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			code := run(ctx, append([]string{"serve"}, tc.args...), env, &stdout, &stderr)
			out := strings.TrimSpace(stderr.String())
			lines := strings.Split(out, "\n")
			last := lines[len(lines)-1]
			if code == 0 || !strings.Contains(last, tc.want) || tc.name == "metrics port taken" && !strings.Contains(last, httpAddr) {
				t.Fatalf("exit %d, stderr:\n%s\nwant a non-zero exit and an error naming %s", code, out, tc.want)
			}
			if strings.Contains(out, "address already in use") && tc.name != "metrics port taken" {
				t.Fatalf("it tried to listen before checking: %s", out)
			}
			if strings.Contains(out, "listening") {
				t.Fatalf("something listened before the error: %s", out)
			}
		})
	}
}

// TestFirstHourHelpPerCommand: `namesrv -h` lists the name server's
// settings only, a setting without a fixed default shows none, and every
// command's help names the variable beside the flag.
func TestFirstHourHelpPerCommand(t *testing.T) {
	help := func(cmd string) string {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{cmd, "-h"}, map[string]string{}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s -h: exit %d", cmd, code)
		}
		return stdout.String() + stderr.String()
	}
	ns := help("namesrv")
	for _, want := range []string{"--namesrv-listen  (STRATAMQ_NAMESRV_LISTEN)", "[default :9876]", "--max-connections"} {
		if !strings.Contains(ns, want) {
			t.Errorf("namesrv -h lacks %q:\n%s", want, ns)
		}
	}
	for _, broker := range []string{"--segment-size", "--bucket", "--role", "--data-dir"} {
		if strings.Contains(ns, broker) {
			t.Errorf("namesrv -h lists the broker's %s", broker)
		}
	}
	br := help("broker")
	if strings.Contains(br, "--namesrv-listen") || !strings.Contains(br, "--segment-size  (STRATAMQ_SEGMENT_SIZE)") {
		t.Errorf("broker -h:\n%s", br)
	}
	serve := help("serve")
	i := strings.Index(serve, "--lease-ttl")
	if i < 0 {
		t.Fatalf("serve -h lacks --lease-ttl:\n%s", serve)
	}
	entry := serve[i:]
	if j := strings.Index(entry[2:], "\n  --"); j >= 0 {
		entry = entry[:j+2]
	}
	if strings.Contains(entry, "[default") {
		t.Errorf("--lease-ttl shows a default of its zero value: %q", entry)
	}
}

// TestFirstHourDefaultBucketBesideDataDir: the default bucket lives beside
// the data dir, not in it (deleting the data dir keeps the system of
// record); a data dir holding the old default's bucket keeps using it,
// with a warning.
func TestFirstHourDefaultBucketBesideDataDir(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	if got, note := resolveBucket(Config{}.withDataDir(data)); got != "file://"+data+"-bucket" || note != "" {
		t.Fatalf("default bucket %q (%q), want file://%s-bucket", got, note, data)
	}
	if got, _ := resolveBucket(Config{Bucket: "s3://b/p"}.withDataDir(data)); got != "s3://b/p" {
		t.Fatalf("STRATAMQ_BUCKET not used: %q", got)
	}
	old := filepath.Join(data, "bucket", "DefaultCluster")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, note := resolveBucket(Config{}.withDataDir(data)); got != "file://"+filepath.Join(data, "bucket") || !strings.Contains(note, "STRATAMQ_BUCKET") {
		t.Fatalf("old layout: %q (%q), want the bucket inside the data dir kept, with a warning", got, note)
	}
}

func (c Config) withDataDir(dir string) Config { c.DataDir = dir; return c }

// TestFirstHourBenchHelp: `stratamq bench` lists its modes and says where
// their flags are (it ended with an empty "flags:"); `bench produce -h`
// lists produce's flags under a heading.
func TestFirstHourBenchHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	run(context.Background(), []string{"bench"}, map[string]string{}, &stdout, &stderr)
	if out := strings.TrimSpace(stderr.String()); strings.HasSuffix(out, "flags:") || !strings.Contains(out, "bench <mode> -h") {
		t.Fatalf("bench usage:\n%s", out)
	}
	stderr.Reset()
	run(context.Background(), []string{"bench", "produce", "-h"}, map[string]string{}, &stdout, &stderr)
	if out := stderr.String(); !strings.Contains(out, "flags of bench produce:\n") || !strings.Contains(out, "-messages") {
		t.Fatalf("bench produce -h:\n%s", out)
	}
}
