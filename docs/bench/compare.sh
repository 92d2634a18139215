#!/usr/bin/env bash
# StrataMQ vs NATS JetStream vs klite, side by side, in one run on this machine.
#
#   docs/bench/compare.sh                # ~4 minutes; markdown table on stdout
#   OUT=results.md docs/bench/compare.sh # also write the table to a file
#
# Everything listens on 127.0.0.1 only, with data dirs under a fresh temp
# dir (on disk, not tmpfs: fsync matters) that is removed at the end
# (KEEP=1 keeps it, with the logs and every server's data; otherwise each
# server's data dir goes when the server stops). Each server runs alone
# while measured.
# Installs nats-server v2.14.10 and natscli v0.5.0 with `go install` when
# missing, and builds stratamq from this checkout's working tree, or from a
# commit with REV=HEAD (git archive: immune to uncommitted edits), or uses
# STRATAMQ_BIN. klite (github.com/klaudworks/klite, a Kafka-protocol broker)
# is built from KLITE_SRC (a git URL or directory, cloned) at KLITE_REV, or
# taken from KLITE_BIN; SKIP_KLITE=1 leaves it out. Its load generator is
# docs/bench/kafkaload (a separate Go module: franz-go, acks=all).
#
# What each side does (said plainly: the numbers are not like for
# like everywhere):
#   - `nats bench js pub async --batch=N` publishes single messages, one
#     per PUB, with up to N unacknowledged at a time: N is a window, not a
#     batch. NATS JetStream has no batch publish.
#   - `stratamq bench produce --batch N` sends SEND_BATCH_MESSAGE requests
#     of N messages each (one ack per N), with --inflight requests
#     unacknowledged per connection; --batch 1 sends one message per
#     SEND_MESSAGE request.
# So the like-for-like rows are "single sends, 64 in flight" (both: one
# message per request, 64 unacknowledged) and the durable single-send
# rows. The "batched" rows compare our batch requests with NATS's best
# window of single publishes: what each system offers for bulk sends, not
# the same work per message.
#   - `kafkaload` (klite) gives each connection its own franz-go client and
#     partition; with -batch 1 a record batch holds one record, so each
#     produce request carries one message, -window of them unacknowledged
#     (like our --batch 1 --inflight N); with -batch 500 -inflight 2 it
#     sends 500-record batches, two requests in flight (like our bulk row).
#     klite acknowledges a produce only after its WAL is fsync'd (group
#     commit), always: its rows are all durable ones.
#
# Knobs (environment): MSGS (async runs, 200000), SYNC_MSGS (our flush=sync
# runs, 50000), FSYNC_MSGS (NATS sync_interval: always runs, 10000: it does
# ~1-3 k msgs/s), NATS_SYNC_MSGS (NATS default sync publish, 50000),
# E2E_RATE (10000), E2E_MSGS (100000), SIZE (1024), and the loopback ports
# NATS_PORT (14222), NS_PORT (19876), BROKER_PORT (19911), HTTP_PORT (19912:
# the broker's metrics, read between rows), KLITE_PORT (19092),
# ORDER (the order the servers run in, "nats smq klite"; alternate it
# between runs to spread the machine's drift), KLITE_SINGLE_MSGS (klite's
# single-send rows, 20000: it handles a connection's produce requests one
# at a time, each after an fsync, so they run at ~1-3 k msgs/s),
# KLITE_TIMEOUT (120s: each klite row stops after this long), PAIRS (5:
# extra back-to-back pairs of the 1 × 64 single-send row, NATS and
# StrataMQ each on a fresh server, for a CPU ratio the machine's drift
# does not skew; 0 skips them).
#
# Below the table, each server's CPU per message in each row (user + system
# time of the server process from /proc/<pid>/stat, before and after the
# row, divided by the row's messages; the load generator's CPU is not in
# it), a table of each row's cost per message for every server (CPU per
# message and per MiB, context switches, read/write syscalls: server_snap),
# and for StrataMQ the segment bytes its uploader tiered
# meanwhile (rocketmq_tiered_store_upload_logical_bytes_total). Each
# StrataMQ produce row runs on a fresh broker (an empty data dir), and the
# consume row after the uploader went idle, so no row pays for tiering the
# bytes another row wrote; what a row tiered of its own bytes is in its
# "MB tiered".
set -euo pipefail

MSGS=${MSGS:-200000}
SYNC_MSGS=${SYNC_MSGS:-50000}
FSYNC_MSGS=${FSYNC_MSGS:-10000}
NATS_SYNC_MSGS=${NATS_SYNC_MSGS:-50000}
E2E_RATE=${E2E_RATE:-10000}
E2E_MSGS=${E2E_MSGS:-100000}
SIZE=${SIZE:-1024}
NATS_PORT=${NATS_PORT:-14222}
NS_PORT=${NS_PORT:-19876}
BROKER_PORT=${BROKER_PORT:-19911}
HTTP_PORT=${HTTP_PORT:-19912}
KLITE_PORT=${KLITE_PORT:-19092}
KLITE_TIMEOUT=${KLITE_TIMEOUT:-120s}
PAIRS=${PAIRS:-5}
KLITE_SINGLE_MSGS=${KLITE_SINGLE_MSGS:-20000}
ORDER=${ORDER:-nats smq klite}
if [[ $(tr ' ' '\n' <<<"$ORDER" | grep -v '^$' | sort | tr '\n' ' ') != "klite nats smq " ]]; then
	echo "compare: ORDER must name nats, smq and klite once each (got: $ORDER)" >&2
	exit 2
fi
KLITE_SRC=${KLITE_SRC:-https://github.com/klaudworks/klite}
KLITE_REV=${KLITE_REV:-2493491310dcc4c31aae9c40b0a513425c43c160}
NATS_SERVER_VERSION=v2.14.10
NATSCLI_VERSION=v0.5.0

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/stratamq-compare.XXXXXX")
LOG=$WORK/log
PIDS=()

say() { echo "compare: $*" >&2; }

cleanup() {
	for p in "${PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [[ ${KEEP:-0} == 1 ]]; then
		say "kept $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT

# ---- tools ----
GOBIN=$(go env GOBIN)
[[ -n $GOBIN ]] || GOBIN=$(go env GOPATH)/bin
export PATH=$GOBIN:$PATH
if ! nats-server --version 2>/dev/null | grep -q "$NATS_SERVER_VERSION"; then
	say "installing nats-server@$NATS_SERVER_VERSION"
	go install "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION"
fi
if ! nats --version 2>&1 | grep -q "$NATSCLI_VERSION"; then
	say "installing natscli@$NATSCLI_VERSION"
	go install "github.com/nats-io/natscli/nats@$NATSCLI_VERSION"
fi
if [[ -n ${STRATAMQ_BIN:-} ]]; then
	SMQ=$STRATAMQ_BIN
elif [[ -n ${REV:-} ]]; then
	say "building stratamq at $REV"
	mkdir -p "$WORK/src"
	git -C "$ROOT" archive "$REV" | tar -x -C "$WORK/src"
	(cd "$WORK/src" && go build -o "$WORK/stratamq" ./cmd/stratamq)
	SMQ=$WORK/stratamq
else
	say "building stratamq from the working tree"
	(cd "$ROOT" && go build -o "$WORK/stratamq" ./cmd/stratamq)
	SMQ=$WORK/stratamq
fi
say "stratamq: $("$SMQ" version) ($(git -C "$ROOT" rev-parse --short "${REV:-HEAD}" 2>/dev/null || echo '?'))"

# klite and its load generator; KLITE stays empty if either is missing.
KLITE=
if [[ ${SKIP_KLITE:-0} != 1 ]]; then
	say "building kafkaload"
	if (cd "$ROOT/docs/bench/kafkaload" && go build -o "$WORK/kafkaload" .); then
		if [[ -n ${KLITE_BIN:-} ]]; then
			KLITE=$KLITE_BIN
		else
			say "building klite at $KLITE_REV from $KLITE_SRC"
			if git clone -q "$KLITE_SRC" "$WORK/klite-src" && git -C "$WORK/klite-src" checkout -q "$KLITE_REV" &&
				(cd "$WORK/klite-src" && go build -o "$WORK/klite" ./cmd/klite); then
				KLITE=$WORK/klite
			else
				say "could not build klite: its column stays empty"
			fi
		fi
	else
		say "could not build kafkaload: klite's column stays empty"
	fi
fi

for p in "$NATS_PORT" "$NS_PORT" "$BROKER_PORT" "$KLITE_PORT"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		echo "compare: port $p is in use on 127.0.0.1; set NATS_PORT/NS_PORT/BROKER_PORT/KLITE_PORT" >&2
		exit 1
	fi
done

# wait_port PORT: until something listens on 127.0.0.1:PORT (≤ 15 s).
wait_port() {
	for _ in $(seq 150); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "compare: nothing listens on 127.0.0.1:$1 after 15s" >&2
	return 1
}

# stop_last: stop the most recently started server, wait for it, and
# remove its data dir (unless KEEP=1): the rows that follow then do not
# share the machine with the writeback of gigabytes of earlier rows' data
# (in a run that kept them, StrataMQ's cost per single send doubled from
# the first paired row to the last).
stop_last() {
	local p=${PIDS[-1]} d=${PDIRS[-1]:-}
	kill -TERM "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
	unset 'PIDS[-1]'
	unset 'PDIRS[-1]'
	if [[ -n $d && ${KEEP:-0} != 1 ]]; then
		rm -rf "$d" "$d-bucket" # (a StrataMQ data dir's default bucket is its sibling)
	fi
}
PDIRS=()

# peak_rss_mib PID
peak_rss_mib() { awk '/VmHWM/ {printf "%d", $2/1024}' "/proc/$1/status" 2>/dev/null || echo "?"; }

# ---- NATS ----
S=nats://127.0.0.1:$NATS_PORT

start_nats() { # $1: config file (<store dir>.conf)
	nats-server -c "$1" >>"$LOG.nats-server" 2>&1 &
	PIDS+=($!)
	PDIRS+=("${1%.conf}")
	wait_port "$NATS_PORT"
}

nats_conf() { # $1: store dir, $2: extra jetstream settings
	mkdir -p "$1"
	cat >"$1.conf" <<EOF
listen: 127.0.0.1:$NATS_PORT
jetstream {
  store_dir: "$1"
  $2
}
EOF
	echo "$1.conf"
}

# server_ticks: CPU clock ticks (user + system) of the running server.
server_ticks() { awk '{print $14 + $15}' "/proc/${PIDS[-1]}/stat"; }
HZ=$(getconf CLK_TCK)
# per_msg TICKS MESSAGES: server CPU µs per message.
per_msg() { awk -v t="$1" -v hz="$HZ" -v n="$2" 'BEGIN{printf "%.1f", (n > 0 ? t / hz * 1e6 / n : 0)}'; }
# server_snap: "<CPU ticks> <context switches> <read/write syscalls>" of the
# running server so far: user + system ticks (/proc/PID/stat), voluntary
# and involuntary context switches summed over its threads
# (/proc/PID/task/*/status: the process's own status counts only its
# first thread), and the read- and write-type syscalls of the whole
# process, sockets included (/proc/PID/io syscr + syscw; epoll and futex
# calls are not in it).
server_snap() {
	local p=/proc/${PIDS[-1]}
	printf '%s %s %s\n' "$(awk '{print $14 + $15}' "$p/stat")" \
		"$(cat "$p"/task/*/status 2>/dev/null | awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ {s += $2} END {print s + 0}')" \
		"$(awk '/^sysc[rw]:/ {s += $2} END {print s + 0}' "$p/io" 2>/dev/null || echo 0)"
}
# row_cost NAME "SNAP0" MESSAGES: the server's cost per message during a
# row, into $WORK/NAME.sys: "<CPU µs/msg> <CPU µs per MiB of payload>
# <context switches/msg> <read/write syscalls/msg>".
row_cost() {
	local name=$1 before=$2 n=$3
	awk -v a="$before" -v b="$(server_snap)" -v hz="$HZ" -v n="$n" -v size="$SIZE" 'BEGIN {
		split(a, x, " "); split(b, y, " ")
		if (n <= 0) { print "n/a n/a n/a n/a"; exit }
		us = (y[1] - x[1]) / hz * 1e6
		printf "%.1f %.0f %.2f %.2f\n", us / n, us / (n * size / 1048576), (y[2] - x[2]) / n, (y[3] - x[3]) / n
	}' >"$WORK/$name.sys"
}

# nats_run NAME ARGS...: run `nats bench ...`, keep the stats line in
# $WORK/NAME and the server's CPU µs per message (of --msgs) in $WORK/NAME.cost.
nats_run() {
	local name=$1 t0 n s0
	shift
	n=$(printf '%s\n' "$@" | sed -n 's/^--msgs=//p')
	say "nats $*"
	t0=$(server_ticks)
	s0=$(server_snap)
	nats -s "$S" "$@" --no-progress >"$WORK/$name.out" 2>&1 || { cat "$WORK/$name.out" >&2; return 1; }
	per_msg $(($(server_ticks) - t0)) "$n" >"$WORK/$name.cost"
	row_cost "$name" "$s0" "$n"
	grep 'stats:' "$WORK/$name.out" | tail -1 >"$WORK/$name"
	say "  $(cat "$WORK/$name"), server µs/msg $(cat "$WORK/$name.cost")"
}
nats_rate() { sed -E 's/.*stats: ([0-9,]+) msgs\/sec.*/\1/' "$WORK/$1" | tr -d ,; }
nats_p() { # NAME P50|P99|P99.9 -> ms
	local us
	us=$(grep -oE "$2: [0-9,.]+us" "$WORK/$1" | head -1 | sed -E 's/.*: ([0-9,.]+)us/\1/' | tr -d ,)
	[[ -n $us ]] && awk -v u="$us" 'BEGIN{printf "%.3f", u/1000}' || echo "n/a"
}

# ---- the machine's state ----
# Issue 15 asks for three consecutive runs on a quiet machine. The
# numbers below let a reader tell a quiet run from a slow hour on this
# shared VM: a CPU probe (sha256 of 32 MiB of zeros on one core, 3 times;
# lower is faster) before and after the runs, the share of CPU time the
# hypervisor stole meanwhile, and the load average at the start.
cpu_probe() { # -> "min-max" ms of 3 probes
	local t0 t1 ms all=()
	for _ in 1 2 3; do
		t0=$(date +%s%N)
		head -c 33554432 /dev/zero | sha256sum >/dev/null
		t1=$(date +%s%N)
		ms=$(((t1 - t0) / 1000000))
		all+=("$ms")
	done
	printf '%s\n' "${all[@]}" | sort -n | awk 'NR==1{lo=$1} {hi=$1} END{print lo "-" hi}'
}
cpu_ticks() { awk '/^cpu / {print $2+$3+$4+$5+$6+$7+$8+$9, $9}' /proc/stat; } # total, steal
LOAD0=$(cut -d' ' -f1 /proc/loadavg)
PROBE0=$(cpu_probe)
read -r TICKS0 STEAL0 < <(cpu_ticks)
say "machine: load average $LOAD0, CPU probe $PROBE0 ms"

run_nats() {
	say "NATS JetStream, default file store (acks before fsync)"
	start_nats "$(nats_conf "$WORK/nats-default" "")"
	nats_run nats_sync bench js pub sync --create --purge --storage=file --msgs="$NATS_SYNC_MSGS" --size="$SIZE"B benchsubj
	nats_run nats_async64 bench js pub async --purge --storage=file --msgs="$MSGS" --size="$SIZE"B --batch=64 benchsubj
	nats_run nats_async4 bench js pub async --purge --storage=file --clients=4 --msgs="$MSGS" --size="$SIZE"B --batch=16 benchsubj
	nats_run nats_async bench js pub async --purge --storage=file --msgs="$MSGS" --size="$SIZE"B --batch=500 benchsubj
	nats -s "$S" consumer rm benchstream nats-bench -f >/dev/null 2>&1 || true
	nats_run nats_consume bench js consume --msgs="$MSGS" --size="$SIZE"B
	NATS_RSS=$(peak_rss_mib "${PIDS[-1]}")
	stop_last

	say "NATS JetStream, sync_interval: always (fsync on every write)"
	start_nats "$(nats_conf "$WORK/nats-always" "sync_interval: always")"
	nats_run nats_fsync bench js pub sync --create --purge --storage=file --msgs="$FSYNC_MSGS" --size="$SIZE"B benchsubj
	nats_run nats_fsync64 bench js pub sync --purge --storage=file --clients=64 --msgs="$FSYNC_MSGS" --size="$SIZE"B benchsubj
	nats_run nats_fsync_async bench js pub async --purge --storage=file --msgs="$FSYNC_MSGS" --size="$SIZE"B --batch=500 benchsubj
	stop_last
}

# ---- StrataMQ ----
start_smq() { # $1: data dir, $2: flush mode
	mkdir -p "$1"
	"$SMQ" serve --data-dir "$1" --flush "$2" --namesrv-listen "127.0.0.1:$NS_PORT" --listen "127.0.0.1:$BROKER_PORT" \
		--http-listen "127.0.0.1:$HTTP_PORT" --log-level warn >>"$LOG.stratamq" 2>&1 &
	PIDS+=($!)
	PDIRS+=("$1")
	wait_port "$BROKER_PORT"
	wait_port "$NS_PORT"
	wait_port "$HTTP_PORT"
}

broker_ticks() { server_ticks; }
# tiered_bytes: segment bytes the running broker's uploader has tiered.
tiered_bytes() {
	curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | awk '/^rocketmq_tiered_store_upload_logical_bytes_total / {printf "%d", $2; f=1} END {if (!f) print 0}'
}

# smq_run NAME MODE ARGS...: run `stratamq bench`, keep its JSON line in
# $WORK/NAME.json and the broker's cost during it in $WORK/NAME.cost
# ("<CPU µs per message> <MB tiered>").
smq_run() {
	local name=$1 t0 b0 s0
	shift
	say "stratamq bench $*"
	t0=$(broker_ticks)
	b0=$(tiered_bytes)
	s0=$(server_snap)
	"$SMQ" bench "$@" --namesrv "127.0.0.1:$NS_PORT" --broker "127.0.0.1:$BROKER_PORT" --size "$SIZE" --progress 0 >"$WORK/$name" 2>>"$LOG.bench" ||
		say "  (exit $?: errors, see below)"
	tail -1 "$WORK/$name" >"$WORK/$name.json"
	awk -v t=$(($(broker_ticks) - t0)) -v hz="$HZ" -v n="$(jq -r '.messages' "$WORK/$name.json")" -v b=$(($(tiered_bytes) - b0)) \
		'BEGIN{printf "%.1f %.0f", (n > 0 ? t / hz * 1e6 / n : 0), b / 1e6}' >"$WORK/$name.cost"
	row_cost "$name" "$s0" "$(jq -r '.messages' "$WORK/$name.json")"
	say "  $(jq -c '{msgs_per_sec, mb_per_sec, p50_ms, p99_ms, p999_ms, errors}' "$WORK/$name.json"), broker µs/msg and MB tiered: $(cat "$WORK/$name.cost")"
}
# cost NAME: "X µs/msg, Y MB tiered" of a StrataMQ row.
cost() { awk '{printf "%s µs/msg, %s MB tiered", $1, $2}' "$WORK/$1.cost"; }
j() { jq -r ".$2" "$WORK/$1.json"; }

# fresh_smq NAME MODE: stop the running broker (if any) and start a new
# one on an empty data dir: each produce row gets a broker of its own, so
# no row pays for tiering what an earlier row wrote.
fresh_smq() {
	if ((${#PIDS[@]})) && [[ ${SMQ_UP:-} == 1 ]]; then
		SMQ_RSS=$(( $(peak_rss_mib "${PIDS[-1]}") > ${SMQ_RSS:-0} ? $(peak_rss_mib "${PIDS[-1]}") : ${SMQ_RSS:-0} ))
		stop_last
	fi
	start_smq "$WORK/smq-$1" "$2"
	SMQ_UP=1
}
# tier_idle: wait (up to 120 s) until the running broker's uploader holds
# nothing pending: a row run after it tiers nothing of the rows before.
tier_idle() {
	local i
	for ((i = 0; i < 1200; i++)); do
		if curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | awk '/^rocketmq_tiered_store_upload_(pending_segments|held_objects) / {s += $2; f++} END {exit !(f == 2 && s == 0)}'; then
			return 0
		fi
		sleep 0.1
	done
	say "  (the uploader was still busy after 120 s)"
}

run_smq() {
	say "StrataMQ, flush=async (a fresh broker per produce row)"
	fresh_smq batch async
	smq_run smq_batch produce --topic BenchBatch --messages "$MSGS" --batch 500 --conns 1 --inflight 2
	tier_idle # the consume row reads the batch row's messages, tiering nothing
	smq_run smq_consume consume --topic BenchBatch --from first
	fresh_smq single async
	smq_run smq_single produce --topic BenchSingle --messages "$MSGS" --batch 1 --conns 1 --inflight 64
	fresh_smq single4 async
	smq_run smq_single4 produce --topic BenchSingle4 --messages "$MSGS" --batch 1 --conns 4 --inflight 16
	fresh_smq singlebin async
	smq_run smq_single_bin produce --topic BenchSingleBin --messages "$MSGS" --batch 1 --conns 1 --inflight 64 --serialize rocketmq
	fresh_smq e2e async
	smq_run smq_e2e e2e --topic BenchE2E --rate "$E2E_RATE" --messages "$E2E_MSGS" --conns 1 --inflight 64

	say "StrataMQ, flush=sync (acked after fdatasync, group commit)"
	fresh_smq sync64 sync
	smq_run smq_sync64 produce --topic BenchSync --messages "$SYNC_MSGS" --batch 1 --conns 4 --inflight 16
	fresh_smq syncbatch sync
	smq_run smq_sync_batch produce --topic BenchSyncBatch --messages "$MSGS" --batch 500 --conns 1 --inflight 2
	SMQ_RSS=$(( $(peak_rss_mib "${PIDS[-1]}") > ${SMQ_RSS:-0} ? $(peak_rss_mib "${PIDS[-1]}") : ${SMQ_RSS:-0} ))
	stop_last
	SMQ_UP=0
}

# ---- klite ----
start_klite() { # $1: data dir
	mkdir -p "$1"
	"$KLITE" --listen "127.0.0.1:$KLITE_PORT" --data-dir "$1" --default-partitions 4 --log-level warn >>"$LOG.klite" 2>&1 &
	PIDS+=($!)
	PDIRS+=("$1")
	wait_port "$KLITE_PORT"
}

# kl_run NAME ARGS...: run kafkaload, keep its JSON line in $WORK/NAME.json
# and klite's CPU µs per message during it in $WORK/NAME.cost.
kl_run() {
	local name=$1 t0 s0
	shift
	say "kafkaload $*"
	t0=$(server_ticks)
	s0=$(server_snap)
	"$WORK/kafkaload" -brokers "127.0.0.1:$KLITE_PORT" -size "$SIZE" -partitions 4 -timeout "$KLITE_TIMEOUT" "$@" >"$WORK/$name" 2>>"$LOG.kafkaload" ||
		say "  (exit $?: errors, see below)"
	tail -1 "$WORK/$name" >"$WORK/$name.json"
	per_msg $(($(server_ticks) - t0)) "$(jq -r '.messages' "$WORK/$name.json")" >"$WORK/$name.cost"
	row_cost "$name" "$s0" "$(jq -r '.messages' "$WORK/$name.json")"
	say "  $(jq -c '{msgs_per_sec, mb_per_sec, p50_ms, p99_ms, p999_ms, errors, msgs_per_request}' "$WORK/$name.json"), server µs/msg $(cat "$WORK/$name.cost")"
}

KLITE_RSS=n/a
run_klite() {
	[[ -n $KLITE ]] || return 0
	say "klite (acks after its WAL's fsync, always)"
	start_klite "$WORK/klite-data"
	kl_run kl_batch -topic kl-batch -messages "$MSGS" -conns 1 -batch 500 -inflight 2 -window 1500
	kl_run kl_single -topic kl-single -messages "$KLITE_SINGLE_MSGS" -conns 1 -batch 1 -window 64
	kl_run kl_single4 -topic kl-single4 -messages "$KLITE_SINGLE_MSGS" -conns 4 -batch 1 -window 16
	kl_run kl_consume -mode consume -topic kl-batch -messages "$MSGS"
	KLITE_RSS=$(peak_rss_mib "${PIDS[-1]}")
	stop_last
}

# ---- the runs, each server alone, in ORDER ----
for srv in $ORDER; do
	"run_$srv"
done

# ---- paired single sends ----
# The rows above run each server's rows together, so the machine's drift
# between them (this VM's speed changes by 2x within minutes) lands in
# the CPU ratio. PAIRS more runs of the 1 x 64 JSON row put the two
# servers back to back, each on a fresh server, alternating which goes
# first; the ratio of each pair and their median are reported.
pair_nats() { # I
	start_nats "$(nats_conf "$WORK/nats-pair$1" "")"
	nats_run "pair_nats$1" bench js pub async --create --purge --storage=file --msgs="$MSGS" --size="$SIZE"B --batch=64 benchsubj
	stop_last
}
pair_smq() { # I
	fresh_smq "pair$1" async
	smq_run "pair_smq$1" produce --topic BenchPair --messages "$MSGS" --batch 1 --conns 1 --inflight 64
	stop_last
	SMQ_UP=0
}
for ((i = 1; i <= PAIRS; i++)); do
	say "pair $i of $PAIRS: single sends, 1 x 64, JSON headers"
	if ((i % 2)); then pair_nats "$i" && pair_smq "$i"; else pair_smq "$i" && pair_nats "$i"; fi
done

# ---- table ----
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b+0 > 0 && a != "n/a") printf "%.2f×", a/b; else print "n/a" }'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN{ exit !(a+0 >= b+0) }'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN{ exit !(a+0 < b+0) }'; }
met() { if "$@"; then echo "**met**"; else echo "not met"; fi; }
mbps() { awk -v r="$1" -v s="$SIZE" 'BEGIN{printf "%.1f", r*s/1e6}'; }

NA=$(nats_rate nats_async)
NA64=$(nats_rate nats_async64)
NA4=$(nats_rate nats_async4)
NS=$(nats_rate nats_sync)
NF=$(nats_rate nats_fsync)
NF64=$(nats_rate nats_fsync64)
NFA=$(nats_rate nats_fsync_async)
NC=$(nats_rate nats_consume)
B=$(j smq_batch msgs_per_sec)
S1=$(j smq_single msgs_per_sec)
S4=$(j smq_single4 msgs_per_sec)
S1B=$(j smq_single_bin msgs_per_sec)
SY=$(j smq_sync64 msgs_per_sec)
SYB=$(j smq_sync_batch msgs_per_sec)
C=$(j smq_consume msgs_per_sec)
CMB=$(j smq_consume mb_per_sec)
CPAY=$(mbps "$C")
E99=$(j smq_e2e p99_ms)
# kl NAME: klite's "msgs/s (p99 X ms)" of a row, or "not run".
kl() {
	if [[ -z $KLITE ]]; then echo "not run"; else echo "$(j "$1" msgs_per_sec) (p99 $(j "$1" p99_ms) ms)"; fi
}
KERR=0
[[ -z $KLITE ]] || KERR=$(($(j kl_batch errors) + $(j kl_single errors) + $(j kl_single4 errors) + $(j kl_consume errors)))
PROBE1=$(cpu_probe)
read -r TICKS1 STEAL1 < <(cpu_ticks)
STEAL=$(awk -v t=$((TICKS1 - TICKS0)) -v s=$((STEAL1 - STEAL0)) 'BEGIN{printf "%.1f", (t > 0 ? 100 * s / t : 0)}')
ERR=$(($(j smq_batch errors) + $(j smq_single errors) + $(j smq_single4 errors) + $(j smq_single_bin errors) + $(j smq_consume errors) + $(j smq_e2e errors) + $(j smq_sync64 errors) + $(j smq_sync_batch errors)))

{
	echo "| $SIZE B messages | StrataMQ | NATS JetStream | klite | ratio | target | |"
	echo "|---|---|---|---|---|---|---|"
	echo "| async, bulk: msgs/s (ours SEND_BATCH_MESSAGE of 500 messages, 2 requests in flight; NATS single publishes, a window of 500 unacked: \`pub async --batch=500\`) | $B (p99 $(j smq_batch p99_ms) ms/batch) | $NA (p99 $(nats_p nats_async P99) ms) | $(kl kl_batch), batches of 500, 2 in flight | $(ratio "$B" "$NA") | ≥ 3× NATS | $(met ge "$(awk -v b="$B" -v n="$NA" 'BEGIN{print b/n}')" 3) |"
	echo "| async, single sends, 64 in flight, 1 connection: msgs/s (both one message per request, JSON headers like client-go's; NATS \`pub async --batch=64\`: a window of 64) | $S1 (p99 $(j smq_single p99_ms) ms) | $NA64 (p99 $(nats_p nats_async64 P99) ms) | $(kl kl_single), one record per produce request | $(ratio "$S1" "$NA64") | ≥ 3× NATS | $(met ge "$(awk -v b="$S1" -v n="$NA64" 'BEGIN{print b/n}')" 3) |"
	echo "| the same with RocketMQ's binary headers (\`--serialize rocketmq\`, the Java client's rocketmq.serialize.type=ROCKETMQ) | $S1B (p99 $(j smq_single_bin p99_ms) ms) | $NA64 | (Kafka binary protocol: the row above) | $(ratio "$S1B" "$NA64") | ≥ 3× NATS | $(met ge "$(awk -v b="$S1B" -v n="$NA64" 'BEGIN{print b/n}')" 3) |"
	echo "| async, single sends, 64 in flight over 4 connections (ours 4 × 16; NATS \`pub async --clients=4 --batch=16\`) | $S4 (p99 $(j smq_single4 p99_ms) ms) | $NA4 (p99 $(nats_p nats_async4 P99) ms) | $(kl kl_single4) | $(ratio "$S4" "$NA4") | ≥ 3× NATS | $(met ge "$(awk -v b="$S4" -v n="$NA4" 'BEGIN{print b/n}')" 3) |"
	echo "| durable, 64 concurrent producers, batch 1: msgs/s (ours flush=sync 4 conns × 16; NATS sync_interval: always, \`pub sync\`) | $SY (p99 $(j smq_sync64 p99_ms) ms) | $NF (1 client, p99 $(nats_p nats_fsync P99) ms); $NF64 (64 clients) | the 4 × 16 row (klite always fsyncs) | $(ratio "$SY" "$NF") vs 1 client; $(ratio "$SY" "$NF64") vs 64 | ≥ 50 k, p99 < 5 ms (~20× NATS) | $(met ge "$SY" 50000) / p99 $(met lt "$(j smq_sync64 p99_ms)" 5) |"
	echo "| durable, bulk: msgs/s (ours flush=sync, SEND_BATCH_MESSAGE of 500 × 2 in flight; NATS always, single publishes in a window of 500) | $SYB (p99 $(j smq_sync_batch p99_ms) ms/batch) | $NFA | the bulk row | $(ratio "$SYB" "$NFA") | | |"
	echo "| consume hot data: MB/s of payload (ours: also of stored records) | $CPAY ($CMB records; $C msgs/s) | $(mbps "$NC") ($NC msgs/s) | $([[ -z $KLITE ]] && echo "not run" || echo "$(j kl_consume mb_per_sec) ($(j kl_consume msgs_per_sec) msgs/s)") | $(ratio "$CPAY" "$(mbps "$NC")") | ≥ 500 MB/s | $(met ge "$CMB" 500) |"
	echo "| end-to-end at $E2E_RATE msgs/s: p50 / p99 / p99.9 ms | $(j smq_e2e p50_ms) / $E99 / $(j smq_e2e p999_ms) | n/a (no e2e mode in \`nats bench js\`) | not measured | | p99 < 5 ms | $(met lt "$E99" 5) |"
	echo "| broker peak RSS (the largest of its brokers), MiB | $SMQ_RSS | $NATS_RSS | $KLITE_RSS (all its rows) | | ≤ cache + 256 MiB | |"
	echo
	echo "StrataMQ bench errors in all runs: $ERR; klite kafkaload errors: $KERR. MB = 10^6 bytes. Ratio = StrataMQ / NATS."
	echo
	echo "Broker CPU per message and segment bytes tiered during each StrataMQ row: bulk $(cost smq_batch); 1 × 64 JSON $(cost smq_single); 4 × 16 $(cost smq_single4); 1 × 64 binary $(cost smq_single_bin); consume $(cost smq_consume); end to end $(cost smq_e2e); durable 4 × 16 $(cost smq_sync64); durable bulk $(cost smq_sync_batch)."
	echo
	echo "NATS server CPU per message (µs): bulk window of 500 $(cat "$WORK/nats_async.cost"); 1 × 64 $(cat "$WORK/nats_async64.cost"); 4 × 16 $(cat "$WORK/nats_async4.cost"); sync publish $(cat "$WORK/nats_sync.cost"); consume $(cat "$WORK/nats_consume.cost"); sync_interval always, 1 client $(cat "$WORK/nats_fsync.cost"), 64 clients $(cat "$WORK/nats_fsync64.cost"), window of 500 $(cat "$WORK/nats_fsync_async.cost")."
	cpu_ratio() { awk -v a="$(cut -d' ' -f1 "$WORK/$1.cost")" -v b="$(cat "$WORK/$2.cost")" 'BEGIN{if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }
	R1=$(cpu_ratio smq_single nats_async64)
	echo
	echo "Server CPU per message, StrataMQ ÷ NATS JetStream: 1 × 64 JSON headers $R1 (target ≤ 0.33: $([[ $R1 == n/a ]] && echo n/a || met lt "$R1" 0.3334)); 1 × 64 binary headers $(cpu_ratio smq_single_bin nats_async64); 4 × 16 $(cpu_ratio smq_single4 nats_async4); bulk $(cpu_ratio smq_batch nats_async); consume $(cpu_ratio smq_consume nats_consume)."
	if ((PAIRS > 0)); then
		PR=()
		for ((i = 1; i <= PAIRS; i++)); do
			PR+=("$(cpu_ratio "pair_smq$i" "pair_nats$i") ($(cut -d' ' -f1 "$WORK/pair_smq$i.cost") vs $(cat "$WORK/pair_nats$i.cost") µs)")
		done
		PMED=$(printf '%s\n' "${PR[@]}" | awk '{print $1}' | sort -n | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2 }')
		echo
		echo "Paired single sends (1 × 64, JSON headers; each pair back to back on fresh servers, alternating which goes first), server CPU per message, StrataMQ ÷ NATS JetStream: $(IFS=';'; echo "${PR[*]}" | sed 's/;/; /g'); median **$PMED** (target ≤ 0.33: $(met lt "$PMED" 0.3334))."
	fi
	if [[ -n $KLITE ]]; then
		echo
		echo "klite server CPU per message (µs): bulk $(cat "$WORK/kl_batch.cost") ($(j kl_batch msgs_per_request) msgs per produce request); 1 × 64 $(cat "$WORK/kl_single.cost") ($(j kl_single msgs_per_request) per request); 4 × 16 $(cat "$WORK/kl_single4.cost") ($(j kl_single4 msgs_per_request) per request); consume $(cat "$WORK/kl_consume.cost"). klite at ${KLITE_BIN:-$KLITE_REV}."
	fi
	echo
	echo "What each server spent per message in each row (server process only, from /proc: CPU user + system; per MiB of payload; context switches over all its threads; read- and write-type syscalls, sockets included, epoll and futex not):"
	echo
	echo "| row | server | CPU µs/msg | CPU µs/MiB | context switches/msg | read+write syscalls/msg |"
	echo "|---|---|---|---|---|---|"
	for r in "bulk:smq_batch:nats_async:kl_batch" "1 × 64 single sends:smq_single:nats_async64:kl_single" "1 × 64, binary headers:smq_single_bin::" \
		"4 × 16 single sends:smq_single4:nats_async4:kl_single4" "consume:smq_consume:nats_consume:kl_consume" "end to end:smq_e2e::" \
		"durable 64 producers:smq_sync64:nats_fsync64:" "durable bulk:smq_sync_batch:nats_fsync_async:" "NATS sync publish::nats_sync:" "NATS always, 1 client::nats_fsync:"; do
		IFS=: read -r label sm na kl <<<"$r"
		for pair in "StrataMQ:$sm" "NATS JetStream:$na" "klite:$kl"; do
			srv=${pair%%:*} f=${pair#*:}
			[[ -n $f && -f $WORK/$f.sys ]] || continue
			read -r c m x y <"$WORK/$f.sys"
			echo "| $label | $srv | $c | $m | $x | $y |"
		done
	done
	echo
	echo "Machine: $(nproc) cores; load average $LOAD0 at the start; CPU probe (sha256 of 32 MiB, one core, min-max of 3) $PROBE0 ms before the runs and $PROBE1 ms after; $STEAL % of CPU time stolen by the hypervisor during the runs."
} | tee "${OUT:-/dev/null}"
if [[ ${KEEP:-0} == 1 ]]; then
	say "raw outputs in $WORK"
fi
