# The common tasks. `make test` is the test command: it installs what the
# tests need and the machine lacks (.ci/deps.sh), then runs the three passes.
#
#   make build        the stratamq binary, ./stratamq
#   make run          build, then `./stratamq serve` (Ctrl-C or SIGTERM stops it cleanly)
#   make test         deps, then the three test passes below
#   make bench-short  a short StrataMQ vs NATS JetStream vs klite run of docs/bench/compare.sh (~3 min)
#   make bench-wal    bucket-durable sends at S3-like latency and throughput, docs/bench/wal.sh (~10 min)
#   make deps         only install the test dependencies

GO ?= go
export PATH := $(shell $(GO) env GOPATH)/bin:$(PATH)

# Pass 1: everything, under the race detector, as one step of two `go
# test` commands side by side (the step fails if either does), so that
# cmd/stratamq gets a -parallel of its own:
#  - cmd/stratamq, the longest package: its end-to-end tests that call
#    t.Parallel mostly wait (leases, failovers, the official client's 30 s
#    route polls, child processes), so four of them run at a time rather
#    than GOMAXPROCS (two here): on two cores its test binary ran 257 s
#    with -parallel 4 against 318 s with -parallel 3 (same tests, runs
#    back to back, no failure). The tests that change process-wide state
#    (t.Setenv, the official client's TLS switch, a serve hook) or bound
#    a timing that neighbours stretch stay serial and run first.
#  - every other package, three packages at a time (-p 3; with
#    cmd/stratamq beside them four run at once, as -p 4 did before) and
#    three parallel tests each: they wait more than they compute (broker:
#    ~70 s of CPU in ~9 min).
# `go build -race ./...` first compiles the packages both commands need
# once, into the build cache, instead of in both at the same time.
RACE_E2E_PKG = ./cmd/stratamq
TEST_RACE = $(GO) build -race ./... && { \
	$(GO) test -race -timeout 15m -parallel 4 $(RACE_E2E_PKG) & e2e=$$!; \
	$(GO) test -race -timeout 15m -p 3 -parallel 3 $$($(GO) list ./... | grep -vx 'github.com/stratamq/stratamq/cmd/stratamq'); rest=$$?; \
	wait $$e2e; e2e=$$?; [ $$rest -eq 0 ] && [ $$e2e -eq 0 ]; }
# Pass 2, without -race: tests that drive parts of the official Go client
# that race with themselves (its pull consumer; its answer to
# GET_CONSUMER_STATUS_FROM_CLIENT).
CLIENT_RUN = TestE2EReplay|TestE2EResetOffsetByTime|TestE2ESQLFilter|TestE2ECompactedTopic|TestE2ECompactionKill9Loop
TEST_CLIENT = $(GO) test -count=1 -timeout 10m -parallel 3 -run '$(CLIENT_RUN)' ./cmd/stratamq
# Pass 3, without -race: the cold-read cache's hit counts, the allocation
# budgets (counts differ under -race) and the schedule simulator.
NORACE_RUN = TestHotFramesSurviveAScan|TestRemotingSendPathAllocations|TestPutAllocs|TestBrokerSendAllocations|TestACLAllocations|TestSim
NORACE_PKGS = ./tier/coldread ./remoting ./store ./broker ./acl ./broker/simtest
TEST_NORACE = $(GO) test -count=1 -timeout 10m -run '$(NORACE_RUN)' $(NORACE_PKGS)
# make test runs passes 2 and 3 as one `go test`, so that their packages
# build and run side by side: neither pattern names a test in the other's
# packages, so the same tests run.
TEST_CLIENT_NORACE = $(GO) test -count=1 -timeout 10m -parallel 3 -run '$(CLIENT_RUN)|$(NORACE_RUN)' ./cmd/stratamq $(NORACE_PKGS)

.PHONY: build run test deps test-race test-client test-norace bench-short bench-wal

build:
	$(GO) build -o stratamq ./cmd/stratamq

run: build
	./stratamq serve

deps:
	bash .ci/deps.sh

test: deps
	$(TEST_RACE)
	$(TEST_CLIENT_NORACE)

test-race:
	$(TEST_RACE)

test-client:
	$(TEST_CLIENT)

test-norace:
	$(TEST_NORACE)

bench-short:
	MSGS=50000 SYNC_MSGS=10000 FSYNC_MSGS=2000 NATS_SYNC_MSGS=10000 E2E_MSGS=20000 KLITE_SINGLE_MSGS=5000 bash docs/bench/compare.sh

bench-wal:
	bash docs/bench/wal.sh
