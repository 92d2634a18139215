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

# Pass 1: everything, under the race detector.
TEST_RACE = $(GO) test -race -timeout 15m ./...
# Pass 2, without -race: tests that drive parts of the official Go client
# that race with themselves (its pull consumer; its answer to
# GET_CONSUMER_STATUS_FROM_CLIENT).
TEST_CLIENT = $(GO) test -count=1 -timeout 10m -run 'TestE2EReplay|TestE2EResetOffsetByTime|TestE2ESQLFilter' ./cmd/stratamq
# Pass 3, without -race: the cold-read cache's hit counts, the allocation
# budgets (counts differ under -race) and the schedule simulator.
TEST_NORACE = $(GO) test -count=1 -timeout 10m -run 'TestHotFramesSurviveAScan|TestRemotingSendPathAllocations|TestPutAllocs|TestBrokerSendAllocations|TestACLAllocations|TestSim' ./tier/coldread ./remoting ./store ./broker ./acl ./broker/simtest

.PHONY: build run test deps test-race test-client test-norace bench-short bench-wal

build:
	$(GO) build -o stratamq ./cmd/stratamq

run: build
	./stratamq serve

deps:
	bash .ci/deps.sh

test: deps
	$(TEST_RACE)
	$(TEST_CLIENT)
	$(TEST_NORACE)

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
