#!/usr/bin/env bash
# The ack latency sync_master adds: in one run, on this machine,
# `stratamq bench produce` against
#   async  `stratamq serve` as async_master (no slave), and
#   sync   `stratamq serve` as sync_master + a `stratamq broker` slave
#          (STRATAMQ_ROLE=slave, same bucket), each send acknowledged only
#          once the slave holds it,
# real binaries, loopback, fresh temp data dirs. Rounds alternate the two
# setups; prints every run, then the medians side by side.
#
#   docs/bench/ha.sh                      # 3 rounds of each case
#   ROUNDS=5 CASES="4x16" FLUSH=sync docs/bench/ha.sh
#
# Cases (connections x requests in flight per connection, 1 KiB single
# sends): 1x1 (one send at a time: the added round trip itself, 20 k),
# 4x16 (64 in flight, 100 k). SIZE, MSGS_1x1, MSGS_4x16 and FLUSH
# (async|sync, default async: RocketMQ's ASYNC_FLUSH + SYNC_MASTER) override;
# STRATAMQ_BIN runs that binary instead of building this checkout.
set -euo pipefail
ROUNDS=${ROUNDS:-3}
CASES=${CASES:-"1x1 4x16"}
FLUSH=${FLUSH:-async}
SIZE=${SIZE:-1024}
NS_PORT=${NS_PORT:-19876}
BROKER_PORT=${BROKER_PORT:-19911}
HA_PORT=${HA_PORT:-19912}
SLAVE_PORT=${SLAVE_PORT:-19921}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/stratamq-ha.XXXXXX")
PIDS=()
say() { echo "ha: $*" >&2; }
stop_all() {
	local p
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	PIDS=()
}
cleanup() {
	stop_all
	if [[ ${KEEP:-0} == 1 ]]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

if [[ -n ${STRATAMQ_BIN:-} ]]; then
	BIN=$STRATAMQ_BIN
else
	say "building"
	(cd "$ROOT" && go build -o "$WORK/stratamq" ./cmd/stratamq)
	BIN=$WORK/stratamq
fi

wait_port() {
	for _ in $(seq 300); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	say "nothing listens on 127.0.0.1:$1 (log: $WORK/log)"
	return 1
}

start_master() { # role dir
	"$BIN" serve --role "$1" --ha-listen "127.0.0.1:$HA_PORT" --data-dir "$2" --flush "$FLUSH" \
		--namesrv-listen "127.0.0.1:$NS_PORT" --listen "127.0.0.1:$BROKER_PORT" --http-listen "" --log-level warn >>"$WORK/log" 2>&1 &
	PIDS+=($!)
	wait_port "$BROKER_PORT"
	wait_port "$NS_PORT"
}

start_slave() { # master-dir dir
	"$BIN" broker --role slave --broker-id 1 --ha-master "127.0.0.1:$HA_PORT" --namesrv "127.0.0.1:$NS_PORT" \
		--listen "127.0.0.1:$SLAVE_PORT" --data-dir "$2" --bucket "file://$1/bucket" --flush "$FLUSH" \
		--http-listen "" --log-level warn >>"$WORK/log" 2>&1 &
	PIDS+=($!)
	wait_port "$SLAVE_PORT"
	for _ in $(seq 300); do # the master lists it once its hello arrived
		if "$BIN" admin haStatus -b "127.0.0.1:$BROKER_PORT" 2>/dev/null | grep -q '^  slave '; then return 0; fi
		sleep 0.1
	done
	say "the slave never connected (log: $WORK/log)"
	return 1
}

run_case() { # setup case -> "msgs/s p50 p99 p999 errors"
	local conns=${2%x*} inflight=${2#*x} msgs
	case $2 in
	1x1) msgs=${MSGS_1x1:-20000} ;;
	*) msgs=${MSGS_4x16:-100000} ;;
	esac
	local m=$WORK/m-$RANDOM
	if [[ $1 == sync ]]; then
		start_master sync_master "$m"
		start_slave "$m" "$WORK/s-$RANDOM"
	else
		start_master async_master "$m"
	fi
	local common=(--namesrv "127.0.0.1:$NS_PORT" --broker "127.0.0.1:$BROKER_PORT" --size "$SIZE" --progress 0 --batch 1)
	"$BIN" bench produce "${common[@]}" --topic Warm --messages 2000 --conns 1 --inflight 16 >/dev/null 2>>"$WORK/log"
	"$BIN" bench produce "${common[@]}" --topic HA --messages "$msgs" --conns "$conns" --inflight "$inflight" 2>>"$WORK/log" |
		tail -1 | jq -r '"\(.msgs_per_sec|floor) \(.p50_ms) \(.p99_ms) \(.p999_ms) \(.errors)"'
	if [[ $1 == sync ]]; then
		"$BIN" admin haStatus -b "127.0.0.1:$BROKER_PORT" >>"$WORK/log" 2>&1 || true
	fi
	stop_all
}

median() { sort -g | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }

say "$(nproc) cores, flush=$FLUSH, ${SIZE} B messages, $ROUNDS rounds; log in $WORK/log"
for c in $CASES; do
	: >"$WORK/$c.async"
	: >"$WORK/$c.sync"
	for r in $(seq "$ROUNDS"); do
		for setup in async sync; do
			run_case "$setup" "$c" >"$WORK/run" # the brokers must be gone before the next run
			read -r rate p50 p99 p999 errs <"$WORK/run"
			say "$c round $r $setup: $rate msgs/s p50 $p50 ms p99 $p99 ms p999 $p999 ms errors $errs"
			echo "$rate $p50 $p99 $p999 $errs" >>"$WORK/$c.$setup"
		done
	done
done

col() { cut -d' ' -f"$2" "$1" | median; }
echo
echo "| case | setup | msgs/s | p50 ms | p99 ms | p99.9 ms | errors |"
echo "|---|---|---|---|---|---|---|"
for c in $CASES; do
	for setup in async sync; do
		f=$WORK/$c.$setup
		name="async_master"
		[[ $setup == sync ]] && name="sync_master + slave"
		echo "| $c | $name | $(col "$f" 1) | $(col "$f" 2) | $(col "$f" 3) | $(col "$f" 4) | $(cut -d' ' -f5 "$f" | paste -sd+ | bc) |"
	done
done
