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
	cfg, _, err := loadConfig(cmd, rest, environ)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "stratamq %s: %v\n", cmd, err)
		return 2
	}
	log := newLogger(stderr, cfg.LogLevel)
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

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
