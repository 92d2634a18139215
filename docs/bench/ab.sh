#!/usr/bin/env bash
# A/B of two StrataMQ revisions on this machine: alternating fresh brokers
# (`serve` on an empty data dir, default file:// bucket), 2 k warm-up, then
# one `stratamq bench produce` per run; prints every run and the medians,
# with the broker's CPU per message (`bench --server-pid`, from /proc: both
# revisions must have that flag).
#
#   docs/bench/ab.sh 760f746 HEAD          # 4 rounds of each case
#   ROUNDS=6 CASES="async1x64" docs/bench/ab.sh A B
#
# Cases: async1x64 (1 KiB single sends, 1 connection × 64 in flight, 200 k),
# async4x16 (4 × 16, 200 k), sync4x16 (flush=sync, 4 × 16, 100 k).
# Loopback only; data dirs under a temp dir on disk, removed at the end.
set -euo pipefail
A=${1:?rev A}
B=${2:?rev B}
ROUNDS=${ROUNDS:-4}
CASES=${CASES:-"async1x64 async4x16 sync4x16"}
NS_PORT=${NS_PORT:-19876}
BROKER_PORT=${BROKER_PORT:-19911}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/stratamq-ab.XXXXXX")
PID=
cleanup() {
	[[ -n $PID ]] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	if [[ ${KEEP:-0} == 1 ]]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
say() { echo "ab: $*" >&2; }

for rev in "$A" "$B"; do
	say "building $rev"
	mkdir -p "$WORK/src-$rev"
	git -C "$ROOT" archive "$rev" | tar -x -C "$WORK/src-$rev"
	(cd "$WORK/src-$rev" && go build -o "$WORK/stratamq-$rev" ./cmd/stratamq)
done

wait_port() {
	for _ in $(seq 300); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "ab: nothing listens on 127.0.0.1:$1" >&2
	return 1
}

run_case() { # rev case -> msgs/s p99
	local bin=$WORK/stratamq-$1 flush=async conns=1 inflight=64 msgs=200000
	case $2 in
	async1x64) ;;
	async4x16) conns=4 inflight=16 ;;
	sync4x16) flush=sync conns=4 inflight=16 msgs=100000 ;;
	esac
	local dir=$WORK/data-$RANDOM
	"$bin" serve --data-dir "$dir" --flush "$flush" --namesrv-listen "127.0.0.1:$NS_PORT" --listen "127.0.0.1:$BROKER_PORT" \
		--http-listen "" --log-level warn >>"$WORK/log" 2>&1 &
	PID=$!
	wait_port "$BROKER_PORT"
	wait_port "$NS_PORT"
	local common=(--namesrv "127.0.0.1:$NS_PORT" --broker "127.0.0.1:$BROKER_PORT" --size 1024 --progress 0 --batch 1)
	"$bin" bench produce "${common[@]}" --topic Warm --messages 2000 --conns 1 --inflight 16 >/dev/null 2>>"$WORK/log"
	"$bin" bench produce "${common[@]}" --topic AB --messages "$msgs" --conns "$conns" --inflight "$inflight" --server-pid "$PID" 2>>"$WORK/log" |
		tail -1 | jq -r '"\(.msgs_per_sec|floor) \(.p99_ms) \(.errors) \(.server_cpu_us_per_msg // "na")"'
	kill -TERM "$PID"
	wait "$PID" 2>/dev/null || true
	PID=
	rm -rf "$dir"
}

median() { sort -n | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else printf "%.0f\n", (a[NR/2]+a[NR/2+1])/2 }'; }

for c in $CASES; do
	: >"$WORK/$c.A"
	: >"$WORK/$c.B"
	for r in $(seq "$ROUNDS"); do
		for side in A B; do
			rev=$A
			[[ $side == B ]] && rev=$B
			run_case "$rev" "$c" >"$WORK/run" # not in a subshell read: the broker must be gone before the next run
			read -r rate p99 errs cpu <"$WORK/run"
			say "$c round $r $rev: $rate msgs/s p99 $p99 ms errors $errs, broker CPU $cpu µs/msg"
			echo "$rate $p99 $cpu" >>"$WORK/$c.$side"
		done
	done
	mid() { cut -d' ' -f"$2" "$WORK/$c.$1" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
	echo "| $c | $A: $(cut -d' ' -f1 "$WORK/$c.A" | median) msgs/s, p99 $(mid A 2) ms, broker CPU $(mid A 3) µs/msg | $B: $(cut -d' ' -f1 "$WORK/$c.B" | median) msgs/s, p99 $(mid B 2) ms, broker CPU $(mid B 3) µs/msg |"
done
