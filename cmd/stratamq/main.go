package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/stratamq/stratamq/infra/sysmon"
	"github.com/stratamq/stratamq/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], environ(), os.Stdout, os.Stderr))
}

func environ() map[string]string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

const usage = `usage: stratamq <command> [flags]

commands:
  serve     name server + broker in one process
  namesrv   name server only
  broker    broker only (registers with --namesrv)
  bench     load generator: bench produce|consume|e2e (see 'stratamq bench -h')
  admin     operations on running brokers, mqadmin-style: topicList, topicStatus, consumerProgress, ... (see 'stratamq admin -h')
  replay    read a topic's history straight from a bucket, no broker needed (see 'stratamq replay -h')
  version   print the version

Run 'stratamq <command> -h' for the flags; each flag is also STRATAMQ_<NAME>.
`

// run is main without the process: tests call it.
func run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve", "namesrv", "broker":
	case "bench":
		return runBench(ctx, rest, stdout, stderr)
	case "admin":
		return runAdmin(ctx, rest, environ, stdout, stderr)
	case "replay":
		return runReplay(ctx, rest, environ, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "stratamq", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "stratamq: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	cfg, _, err := loadConfigTo(cmd, rest, environ, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "stratamq %s: %v\n", cmd, err)
		return 2
	}
	if err := aclCredentialsFromEnv(&cfg, environ); err != nil {
		fmt.Fprintf(stderr, "stratamq %s: %v\n", cmd, err)
		return 2
	}
	if err := sysmon.CheckEnv(environ[sysmon.Env]); err != nil {
		fmt.Fprintf(stderr, "stratamq %s: %v\n", cmd, err)
		return 2
	}
	haSecretFromEnv(&cfg, environ)
	if err := initAuthUserFromEnv(&cfg, environ); err != nil {
		fmt.Fprintf(stderr, "stratamq %s: %v\n", cmd, err)
		return 2
	}
	log := newLogger(stderr, cfg.LogLevel)
	limitOpenQueueFiles(&cfg, log)
	var runErr error
	switch cmd {
	case "serve":
		runErr = serve(ctx, cfg, log, true, true)
	case "namesrv":
		runErr = serve(ctx, cfg, log, true, false)
	case "broker":
		runErr = serve(ctx, cfg, log, false, true)
	}
	if runErr != nil {
		log.Error("exit", "err", runErr)
		return 1
	}
	return 0
}

const version = "0.1.0-dev"

// limitOpenQueueFiles raises the soft open file limit to the hard one and
// keeps STRATAMQ_MAX_OPEN_QUEUE_FILES within half of it: the other half is
// for commitlog segments, connections and the bucket, so a low limit
// (ulimit -n 1024) never runs the broker out of descriptors.
func limitOpenQueueFiles(cfg *Config, log *slog.Logger) {
	soft, ok := raiseFDLimit(log)
	n := cfg.MaxOpenQueueFiles
	if n <= 0 {
		n = store.DefaultMaxOpenQueueFiles
	}
	if ok && uint64(n) > soft/2 {
		log.Warn("STRATAMQ_MAX_OPEN_QUEUE_FILES lowered to half the open file limit; raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) to keep more consumequeue files open",
			"setting", n, "now", soft/2, "soft_limit", soft)
		cfg.MaxOpenQueueFiles = int(max(soft/2, 1))
	}
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
