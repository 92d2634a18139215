#!/usr/bin/env bash
# Bucket durability (durability=bucket, the bucket WAL): ack latency at
# object-storage speed and throughput into an unshaped bucket, next to a
# local-durable topic on the same broker in the same run.
#
#   docs/bench/wal.sh                                 # every case, 3 rounds (~10 min)
#   CASES=standard ROUNDS=5 docs/bench/wal.sh         # one case
#   KEEP=1 docs/bench/wal.sh                          # keep the work dir (logs, runs.jsonl)
#   PROFILE=1 CASES=throughput docs/bench/wal.sh      # also a 10 s broker CPU profile per bucket row
#
# Cases (each a fresh versitygw bucket and a fresh broker; loopback only):
#   standard    versitygw behind docs/bench/delayproxy with S3 Standard-like
#               PUT latency ($STD_DIST: 30-60 ms, a 5 % tail to 150 ms, 1 %
#               to 400 ms), STRATAMQ_WAL_LINGER at its default (200 ms);
#   express     the proxy at ~10 ms ($EXPRESS_DIST, S3 Express-like),
#               STRATAMQ_WAL_LINGER=20ms;
#   throughput  versitygw unshaped, defaults; the sends batched
#               ($TP_ARGS) so that enough bytes are in flight to fill
#               4 MiB WAL objects.
# The proxy delays every answer of the bucket (WAL PUTs, manifest, lease,
# GETs alike): see docs/bench/delayproxy.
#
# Each round runs the bucket-durable topic's row, then the local-durable
# topic's row, on the same broker ($LAT_ARGS: 1 KiB single sends, 64 in
# flight on one connection, for $SECONDS_PER_ROW s, the local row at most
# $LOCAL_MSGS messages); the throughput case runs $TP_ARGS for $TP_SECONDS
# s or $TP_MSGS messages. The latency cases run with $LAT_SEGMENT segments
# and capped local rows, so that no segment seals within a case: a sealed
# segment's WAL objects are trimmed one DELETE at a time on the WAL
# writer's goroutine, and bucket-durable sends wait meanwhile (seconds at
# these latencies: LAT_SEGMENT=256MiB LOCAL_MSGS=2000000 shows it; the
# trimmed column counts the objects deleted during a row). Around each row
# the broker's /metrics give the WAL PUTs, objects, bytes and trims and the
# commit latency's mean; /proc the CPU of the broker, versitygw and the load
# generator, and how busy the whole machine was (other work included).
# Printed: every row, then the median of the rounds per case and topic, and
# the machine's load.
set -euo pipefail
CASES=${CASES:-standard express throughput}
ROUNDS=${ROUNDS:-3}
SECONDS_PER_ROW=${SECONDS_PER_ROW:-30}
MAX_MSGS=${MAX_MSGS:-2000000}
LOCAL_MSGS=${LOCAL_MSGS:-250000}
TP_MSGS=${TP_MSGS:-4000000}
LAT_SEGMENT=${LAT_SEGMENT:-1GiB}
LAT_ARGS=${LAT_ARGS:---batch 1 --conns 1 --inflight 64}
TP_ARGS=${TP_ARGS:---batch 64 --conns 4 --inflight 32}
TP_SECONDS=${TP_SECONDS:-15}
STD_DIST=${STD_DIST:-30ms-60ms:94,60ms-150ms:5,150ms-400ms:1}
EXPRESS_DIST=${EXPRESS_DIST:-8ms-12ms:99,12ms-30ms:1}
QUEUES=${QUEUES:-8}
PROFILE=${PROFILE:-0}
SETTLE=${SETTLE:-1}
VGW_PORT=${VGW_PORT:-27271}
PROXY_PORT=${PROXY_PORT:-27281}
NS_PORT=${NS_PORT:-19977}
BROKER_PORT=${BROKER_PORT:-19992}
HTTP_PORT=${HTTP_PORT:-19658}
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/stratamq-wal.XXXXXX")
VGW=$(go env GOPATH)/bin/versitygw
say() { echo "wal: $*" >&2; }
[[ -x $VGW ]] || { say "no versitygw at $VGW: run bash .ci/versitygw.sh"; exit 1; }

PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	if [[ ${KEEP:-0} == 1 ]]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

wait_http() { # url: until it answers 200, at most 30 s
	for _ in $(seq 300); do
		if [[ $(curl -s -o /dev/null -w '%{http_code}' "$1" || true) == 200 ]]; then return 0; fi
		sleep 0.1
	done
	say "$1 did not answer 200 within 30 s"
	return 1
}
wait_port() {
	for _ in $(seq 300); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	say "nothing listens on 127.0.0.1:$1"
	return 1
}
stop() { # pid: SIGTERM, at most 60 s, then SIGKILL
	kill -TERM "$1" 2>/dev/null || return 0
	for _ in $(seq 600); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$1" 2>/dev/null && { say "$1 did not stop within 60 s"; kill -KILL "$1"; }
	wait "$1" 2>/dev/null || true
}

say "building stratamq and delayproxy"
(cd "$ROOT" && go build -o "$WORK/stratamq" ./cmd/stratamq && go build -o "$WORK/delayproxy" ./docs/bench/delayproxy)
TOOL=$WORK/stratamq
export AWS_ACCESS_KEY_ID=walbench AWS_SECRET_ACCESS_KEY=walbenchsecret AWS_REGION=us-east-1

VPID= PPID_= BPID=
start_vgw() {
	rm -rf "$WORK/vgw"
	mkdir -p "$WORK/vgw/walbench"
	"$VGW" --port "127.0.0.1:$VGW_PORT" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --keep-alive --quiet \
		posix "$WORK/vgw" >>"$WORK/vgw.log" 2>&1 &
	VPID=$!
	PIDS+=("$VPID")
	wait_port "$VGW_PORT"
}
start_proxy() { # dist
	"$WORK/delayproxy" -listen "127.0.0.1:$PROXY_PORT" -target "127.0.0.1:$VGW_PORT" -dist "$1" >"$WORK/proxy.json" 2>>"$WORK/proxy.log" &
	PPID_=$!
	PIDS+=("$PPID_")
	wait_port "$PROXY_PORT"
}
start_broker() { # bucket-endpoint-port [env...]
	local port=$1
	shift
	rm -rf "$WORK/data"
	env "$@" STRATAMQ_BUCKET="s3://walbench/p?endpoint=http://127.0.0.1:$port&region=us-east-1" STRATAMQ_GRPC_LISTEN= STRATAMQ_PPROF=true \
		"$TOOL" serve --data-dir "$WORK/data" --namesrv-listen "127.0.0.1:$NS_PORT" \
		--listen "127.0.0.1:$BROKER_PORT" --http-listen "127.0.0.1:$HTTP_PORT" --log-level warn >>"$WORK/broker.log" 2>&1 &
	BPID=$!
	PIDS+=("$BPID")
	wait_port "$BROKER_PORT"
	wait_http "http://127.0.0.1:$HTTP_PORT/readyz"
	"$TOOL" admin updateTopic -b "127.0.0.1:$BROKER_PORT" -t WalBucket -r "$QUEUES" -w "$QUEUES" -a +durability=bucket >/dev/null
	"$TOOL" admin updateTopic -b "127.0.0.1:$BROKER_PORT" -t WalLocal -r "$QUEUES" -w "$QUEUES" -a +durability=local >/dev/null
}

# proc_cpu pid: CPU seconds (user and system) the process has used.
proc_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
# scrape: the broker's WAL counters, the CPU seconds of the broker (cpu)
# and of versitygw (vcpu), and the whole machine's busy CPU seconds (busy:
# user, nice, system, irq, softirq over every CPU), as a JSON object.
scrape() {
	local cpu vcpu busy
	cpu=$(proc_cpu "$BPID")
	vcpu=$(proc_cpu "$VPID")
	busy=$(awk -v hz="$(getconf CLK_TCK)" '/^cpu / { printf "%.2f", ($2 + $3 + $4 + $7 + $8) / hz }' /proc/stat)
	curl -s --max-time 10 "http://127.0.0.1:$HTTP_PORT/metrics" | awk -v cpu="$cpu" -v vcpu="$vcpu" -v busy="$busy" '
		$1 == "stratamq_wal_puts_total" { p = $2 }
		$1 == "stratamq_wal_objects_total" { o = $2 }
		$1 == "stratamq_wal_bytes_total" { b = $2 }
		$1 == "stratamq_wal_errors_total" { e = $2 }
		$1 == "stratamq_wal_trimmed_total" { t = $2 }
		$1 == "stratamq_wal_backlog_bytes" { q = $2 }
		$1 == "stratamq_wal_waiting_sends" { w = $2 }
		$1 == "rocketmq_tiered_store_upload_pending_segments" { u = $2 }
		$1 == "stratamq_wal_commit_seconds_sum" { s = $2 }
		$1 == "stratamq_wal_commit_seconds_count" { n = $2 }
		END { printf "{\"puts\":%.0f,\"objects\":%.0f,\"bytes\":%.0f,\"errors\":%.0f,\"trimmed\":%.0f,\"backlog\":%.0f,\"unlisted\":%.0f,\"waiting\":%.0f,\"commit_sum\":%.6f,\"commit_n\":%.0f,\"cpu\":%s,\"vcpu\":%s,\"busy\":%s}\n", p, o, b, e, t, q, u, w, s, n, cpu, vcpu, busy }'
}

# settle: with SETTLE=1, wait until the WAL is idle: no send waiting, less
# than a batch (4 MiB) of log bytes unshipped (a local-durable row leaves
# up to a batch of its bytes unshipped until a bucket-durable send comes),
# no sealed segment waiting for its upload, and no WAL object trimmed for
# 2 s (the previous row's sealed segments listed and their WAL objects
# deleted); at most 120 s. Prints the seconds waited. Trimming runs on the
# WAL writer's goroutine, one DELETE at a time, so a row that starts
# while the previous row's objects are trimmed measures that stall
# (SETTLE=0 shows it).
settle() {
	local t0 prev cur n=0
	t0=$(date +%s.%N)
	[[ $SETTLE == 1 ]] || { echo 0; return; }
	prev=$(scrape)
	while (($(date +%s) - ${t0%.*} < 120)); do
		sleep 0.5
		cur=$(scrape)
		if [[ $(jq -n --argjson a "$prev" --argjson b "$cur" \
			'$b.waiting == 0 and $b.backlog < 4194304 and $b.unlisted == 0 and $b.trimmed == $a.trimmed') == true ]]; then
			n=$((n + 1))
			((n >= 4)) && break
		else
			n=0
		fi
		prev=$cur
	done
	echo "$(date +%s.%N) - $t0" | bc | xargs printf '%.1f'
}

# row case round topic seconds args...: one bench produce run, printed as a
# line of the table and appended to runs.jsonl.
row() {
	local cs=$1 rd=$2 topic=$3 secs=$4 before after prof= settled
	shift 4
	settled=$(settle)
	before=$(scrape)
	if [[ $PROFILE == 1 && $topic == WalBucket ]]; then
		curl -s -o "$WORK/$cs-$rd.pprof" "http://127.0.0.1:$HTTP_PORT/debug/pprof/profile?seconds=10" &
		prof=$!
	fi
	# In a subshell whose children's CPU (cutime + cstime, fields 16 and
	# 17 of its stat once they were waited for) is the load generator's.
	# shellcheck disable=SC2068 # the args are a list of flags
	(
		timeout $((secs + 60)) "$TOOL" bench produce --namesrv "" --broker "127.0.0.1:$BROKER_PORT" --topic "$topic" --create=false \
			--queues "$QUEUES" --size 1024 --duration "${secs}s" --messages "${LIMIT:-$MAX_MSGS}" --progress 0 $@ 2>>"$WORK/bench.log" | tail -1 >"$WORK/produce.json" || true
		awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($16 + $17) / hz }' "/proc/$BASHPID/stat" >"$WORK/gen.cpu"
	)
	[[ -n $prof ]] && wait "$prof"
	# a run that ended without its JSON line (bench exits early on a
	# connection error) still makes a row, with errors set
	jq -e .msgs_per_sec "$WORK/produce.json" >/dev/null 2>&1 ||
		echo "{\"topic\":\"$topic\",\"msgs_per_sec\":0,\"mb_per_sec\":0,\"p50_ms\":0,\"p99_ms\":0,\"max_ms\":0,\"errors\":-1,\"messages\":0,\"seconds\":$secs}" >"$WORK/produce.json"
	after=$(scrape)
	jq -c --arg c "$cs" --arg r "$rd" --argjson settled "$settled" --argjson ncpu "$(nproc)" --argjson gen "$(cat "$WORK/gen.cpu")" --argjson b "$before" --argjson a "$after" '
		{case: $c, round: ($r|tonumber), topic: .topic, msgs_per_sec: (.msgs_per_sec|round), mb_per_sec: (.mb_per_sec*10|round/10),
		 p50_ms: .p50_ms, p99_ms: .p99_ms, max_ms: .max_ms, errors: .errors, messages: .messages, seconds: .seconds,
		 puts_per_sec: ((($a.puts - $b.puts) / .seconds * 10 | round) / 10),
		 objects: ($a.objects - $b.objects),
		 kib_per_object: (if $a.objects > $b.objects then (($a.bytes - $b.bytes) / ($a.objects - $b.objects) / 1024 | round) else 0 end),
		 commit_ms: (if $a.commit_n > $b.commit_n then (($a.commit_sum - $b.commit_sum) / ($a.commit_n - $b.commit_n) * 10000 | round) / 10 else 0 end),
		 wal_errors: ($a.errors - $b.errors), trimmed: ($a.trimmed - $b.trimmed), settled_s: $settled,
		 cpu_us_per_msg: (if .messages > 0 then (($a.cpu - $b.cpu) / .messages * 1e7 | round) / 10 else 0 end),
		 broker_cores: ((($a.cpu - $b.cpu) / .seconds * 100 | round) / 100),
		 vgw_cores: ((($a.vcpu - $b.vcpu) / .seconds * 100 | round) / 100),
		 gen_cores: (($gen / .seconds * 100 | round) / 100),
		 machine_busy: ((($a.busy - $b.busy) / .seconds / $ncpu * 100 | round) / 100)}' "$WORK/produce.json" |
		tee -a "$WORK/runs.jsonl" >&2
}

say "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
STEAL0=$(awk '/^cpu / { print $9 }' /proc/stat)
T0=$(date +%s)
for cs in $CASES; do
	start_vgw
	case $cs in
	standard)
		start_proxy "$STD_DIST"
		start_broker "$PROXY_PORT" STRATAMQ_SEGMENT_SIZE="$LAT_SEGMENT"
		;;
	express)
		start_proxy "$EXPRESS_DIST"
		start_broker "$PROXY_PORT" STRATAMQ_WAL_LINGER=20ms STRATAMQ_SEGMENT_SIZE="$LAT_SEGMENT"
		;;
	throughput)
		PPID_=
		start_broker "$VGW_PORT"
		;;
	*)
		say "unknown case $cs"
		exit 2
		;;
	esac
	say "case $cs"
	for rd in $(seq "$ROUNDS"); do
		if [[ $cs == throughput ]]; then
			# shellcheck disable=SC2086
			LIMIT=$TP_MSGS row "$cs" "$rd" WalBucket "$TP_SECONDS" $TP_ARGS
			# shellcheck disable=SC2086
			LIMIT=$TP_MSGS row "$cs" "$rd" WalLocal "$TP_SECONDS" $TP_ARGS
		else
			# shellcheck disable=SC2086
			row "$cs" "$rd" WalBucket "$SECONDS_PER_ROW" $LAT_ARGS
			# shellcheck disable=SC2086
			LIMIT=$LOCAL_MSGS row "$cs" "$rd" WalLocal "$SECONDS_PER_ROW" $LAT_ARGS
		fi
	done
	stop "$BPID"
	if [[ -n $PPID_ ]]; then
		stop "$PPID_"
		say "proxy: $(cat "$WORK/proxy.json")"
		jq -c --arg c "$cs" '{case: $c, proxy: .}' "$WORK/proxy.json" >>"$WORK/proxies.jsonl"
	fi
	stop "$VPID"
done
T1=$(date +%s)
STEAL1=$(awk '/^cpu / { print $9 }' /proc/stat)

echo
echo "every row:"
jq -r '[.case, .round, .topic, .msgs_per_sec, .mb_per_sec, .p50_ms, .p99_ms, .max_ms, .puts_per_sec, .kib_per_object, .commit_ms, .cpu_us_per_msg, .broker_cores, .vgw_cores, .gen_cores, .machine_busy, .trimmed, .settled_s, .errors, .wal_errors] | @tsv' \
	"$WORK/runs.jsonl" | (echo "case round topic msgs/s MB/s p50_ms p99_ms max_ms PUTs/s KiB/object commit_ms cpu_us/msg broker_cores vgw_cores gen_cores busy trimmed settled_s errors wal_errors"; cat) | column -t
echo
echo "medians over $ROUNDS rounds:"
jq -s -r 'def med: sort | if length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end;
	group_by([.case, .topic]) | .[] | [.[0].case, .[0].topic,
	(map(.msgs_per_sec)|med), (map(.mb_per_sec)|med), (map(.p50_ms)|med), (map(.p99_ms)|med), (map(.puts_per_sec)|med),
	(map(.kib_per_object)|med), (map(.commit_ms)|med), (map(.cpu_us_per_msg)|med), (map(.broker_cores)|med), (map(.vgw_cores)|med), (map(.gen_cores)|med), (map(.machine_busy)|med), (map(.errors)|add)] | @tsv' "$WORK/runs.jsonl" |
	(echo "case topic msgs/s MB/s p50_ms p99_ms PUTs/s KiB/object commit_ms cpu_us/msg broker_cores vgw_cores gen_cores busy errors"; cat) | column -t
[[ -s $WORK/proxies.jsonl ]] && { echo; echo "proxy delays drawn:"; cat "$WORK/proxies.jsonl"; }
echo
echo "machine: $(nproc) CPUs; load average before $LOAD0, after $(cut -d' ' -f1-3 /proc/loadavg);" \
	"steal $(((STEAL1 - STEAL0) * 100 / ($(getconf CLK_TCK) * (T1 - T0 + 1) * $(nproc))))% of the CPUs over the run"
