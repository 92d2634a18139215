package main

import (
	"strings"
	"testing"
	"time"
)

func TestConfigEnvFlagsAndDefaults(t *testing.T) {
	cfg, _, err := loadConfig("serve", nil, map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "./data" || cfg.Listen != ":10911" || cfg.NamesrvListen != ":9876" || cfg.HTTPListen != ":5557" ||
		cfg.Flush != "async" || cfg.SegmentSize != 256<<20 || !cfg.AutoCreateTopic || cfg.Cluster != "DefaultCluster" {
		t.Fatalf("defaults: %+v", cfg)
	}
	if cfg, _, err := loadConfig("serve", nil, map[string]string{"STRATAMQ_HTTP_LISTEN": ""}); err != nil || cfg.HTTPListen != "" {
		t.Fatalf("STRATAMQ_HTTP_LISTEN set empty: %q, %v; want no endpoint, as its help says", cfg.HTTPListen, err)
	}
	env := map[string]string{
		"STRATAMQ_SEGMENT_SIZE":      "64MiB",
		"STRATAMQ_FLUSH":             "sync",
		"STRATAMQ_AUTO_CREATE_TOPIC": "false",
		"STRATAMQ_NAMESRV":           "10.0.0.1:9876;10.0.0.2:9876",
		"STRATAMQ_BROKER_ID":         "1",
		"STRATAMQ_LISTEN":            ":1111",
		"STRATAMQ_SHUTDOWN_TIMEOUT":  "7s",
	}
	cfg, _, err = loadConfig("broker", []string{"--listen", "127.0.0.1:2222", "--segment-size", "4MiB", "--auto-create-topic"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:2222" {
		t.Fatalf("flag must win over env: listen %q", cfg.Listen)
	}
	if cfg.SegmentSize != 4<<20 || cfg.Flush != "sync" || !cfg.AutoCreateTopic || cfg.BrokerID != 1 || cfg.ShutdownTimeout != 7*time.Second {
		t.Fatalf("parsed: %+v", cfg)
	}
	if ns := cfg.NameServers(); len(ns) != 2 || ns[1] != "10.0.0.2:9876" {
		t.Fatalf("name servers %v", ns)
	}
	if _, _, err := loadConfig("serve", nil, map[string]string{"STRATAMQ_SEGMENT_SIZE": "lots"}); err == nil {
		t.Fatal("bad size accepted")
	}
	if _, _, err := loadConfig("serve", []string{"--no-such-flag"}, nil); err == nil {
		t.Fatal("unknown flag accepted")
	}
}

// STRATAMQ_MIN_FREE_SPACE: 0 by default (the store computes 5% of the
// volume, at most 256 MiB), a size from the environment or the flag.
func TestConfigMinFreeSpace(t *testing.T) {
	cfg, _, err := loadConfig("serve", nil, map[string]string{})
	if err != nil || cfg.MinFreeSpace != 0 {
		t.Fatalf("default: %v %v", cfg.MinFreeSpace, err)
	}
	cfg, _, err = loadConfig("serve", nil, map[string]string{"STRATAMQ_MIN_FREE_SPACE": "8MiB"})
	if err != nil || cfg.MinFreeSpace != 8<<20 {
		t.Fatalf("from the environment: %v %v", cfg.MinFreeSpace, err)
	}
	cfg, _, err = loadConfig("serve", []string{"--min-free-space", "512k"}, map[string]string{"STRATAMQ_MIN_FREE_SPACE": "8MiB"})
	if err != nil || cfg.MinFreeSpace != 512<<10 {
		t.Fatalf("from the flag: %v %v", cfg.MinFreeSpace, err)
	}
}

// The remoting servers' resource limits (issue 9 item 7) come from the
// environment and flags, with their defaults, and bad values are named.
func TestConfigResourceLimits(t *testing.T) {
	cfg, _, err := loadConfig("serve", nil, map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxReadMemory != 64<<20 || cfg.MaxConnections != 4096 || cfg.MaxConnectionsPerIP != 1024 || cfg.FrameTimeout != 30*time.Second {
		t.Fatalf("defaults: read memory %s, connections %d, per IP %d, frame timeout %s",
			cfg.MaxReadMemory, cfg.MaxConnections, cfg.MaxConnectionsPerIP, cfg.FrameTimeout)
	}
	cfg, _, err = loadConfig("serve", []string{"--max-connections-per-ip", "7"}, map[string]string{
		"STRATAMQ_MAX_READ_MEMORY": "8MiB", "STRATAMQ_MAX_CONNECTIONS": "100", "STRATAMQ_FRAME_TIMEOUT": "5s"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxReadMemory != 8<<20 || cfg.MaxConnections != 100 || cfg.MaxConnectionsPerIP != 7 || cfg.FrameTimeout != 5*time.Second {
		t.Fatalf("parsed: read memory %s, connections %d, per IP %d, frame timeout %s",
			cfg.MaxReadMemory, cfg.MaxConnections, cfg.MaxConnectionsPerIP, cfg.FrameTimeout)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for env, bad := range map[string]string{"STRATAMQ_MAX_READ_MEMORY": "1KiB", "STRATAMQ_MAX_CONNECTIONS": "-1",
		"STRATAMQ_MAX_CONNECTIONS_PER_IP": "-5", "STRATAMQ_FRAME_TIMEOUT": "1ms"} {
		// loadConfig checks every setting before a command opens anything.
		_, _, err := loadConfig("serve", nil, map[string]string{env: bad})
		if err == nil || !strings.Contains(err.Error(), env) {
			t.Fatalf("%s=%s: %v, want an error naming %s", env, bad, err, env)
		}
	}
}
