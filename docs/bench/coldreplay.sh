#!/usr/bin/env bash
# Cold replay at the bucket's speed: how fast a new
# consumer group replays history that lives only in the bucket, next to how
# fast the same bucket serves the same objects to a plain GET loop.
#
#   docs/bench/coldreplay.sh                    # the working tree, 3 rounds
#   docs/bench/coldreplay.sh 4f9564f tree       # A/B: a revision's broker and the working tree's
#   docs/bench/coldreplay.sh a286bd1 /tmp/x     # ... or a prebuilt binary (absolute path)
#   PAYLOAD=json docs/bench/coldreplay.sh       # compressible bodies
#   QUEUES=64 ONE_QUEUE=1 ROUNDS=1 docs/bench/coldreplay.sh   # amplification
#   CONSUME_ARGS="--conns 8" docs/bench/coldreplay.sh         # more flags for bench consume
#   BUCKET_RATE=1600mbit docs/bench/coldreplay.sh  # a bucket that serves 200 MB/s (root, tc)
#   CLIENT=1 ROUNDS=2 docs/bench/coldreplay.sh     # also the official Go client's pull consumer, cold and hot
#
# Steps (loopback only, every wait bounded):
#  1. start versitygw on 127.0.0.1 (--keep-alive), build `stratamq` (the
#     working tree; with REV arguments also each REV, via git archive);
#  2. `serve` with STRATAMQ_SEGMENT_SIZE=$SEGMENT, STRATAMQ_LOCAL_RETENTION=0,
#     no gRPC listener (STRATAMQ_GRPC_LISTEN empty: :8081 is not loopback)
#     and the s3 bucket; `bench produce` $MSGS messages of $SIZE bytes
#     (--payload $PAYLOAD) on $QUEUES queues; SIGTERM (a graceful stop seals
#     and uploads everything), with the first broker under test; the
#     bucket is copied aside and put back before every replay;
#  3. ROUNDS times, for each broker under test: `bench rawget` (every .seg
#     object GET whole, one stream, then $STREAMS streams); a broker on an
#     EMPTY data dir with the same bucket; `bench consume --from first` with a
#     new group and --metrics (cold and hot bytes, bucket bytes); with
#     ONE_QUEUE=1 also a fresh broker replaying queue 0 alone; the broker's
#     peak RSS (VmHWM);
#  4. prints every run and the medians; ratio = consume MB/s ÷ rawget MB/s of
#     the same round; misses = frames the replay's reads fetched on
#     demand (rocketmq_tiered_store_read_ahead_cache_miss_total); wait_s =
#     the time the replay's reads spent waiting for
#     the bucket, summed over readers (the broker's
#     rocketmq_tiered_store_cold_read_wait_seconds_total; na for a broker
#     without it): what read-ahead did not hide.
#
# CLIENT=1 adds, to every round and broker, replays with the official Go
# client's pull consumer (docs/bench/clientpull: rocketmq-client-go's
# PullFrom, one goroutine per queue, from offset 0 to each queue's end),
# once per pull batch in CLIENT_BATCHES (default "32 1024": the client's
# default, and the broker's cap of 1024 records, 4 MiB, per pull):
#   clientN      cold: a fresh broker on an empty data dir with the bucket
#                restored, as for `all`, a new group;
#   hot          `bench consume --from first` on a broker restarted on the
#                producing broker's data dir (its segments kept there:
#                with CLIENT=1 the producing broker runs with
#                STRATAMQ_LOCAL_RETENTION=$HOT_RETENTION, which changes
#                nothing in the bucket), the bucket restored: local disk
#                and page cache, no bucket read;
#   hot-clientN  the client on that same hot broker, a new group each.
# Client rows fill the same columns: consume_MB/s is the client's record
# bytes (MessageExt.StoreSize, the unit bench consume counts) per second,
# so the client and bench consume compare like for like (the client's JSON
# in runs.jsonl also has body MB/s); cold_bytes, hot_bytes, bucket_bytes,
# amplification and gets come from the broker's metrics scraped around the
# client's run, as bench consume --metrics does. ratio_seq of every row is
# its MB/s ÷ the round's raw GET, hot rows included (what the path could
# deliver against what the bucket serves).
#
# BUCKET_RATE shapes what the bucket sends (versitygw's source port on lo)
# to that rate with tc's htb (root needed; nothing else on lo is shaped):
# the loopback server reads its page cache at memory speed, faster than
# any broker forwards it and than a real bucket serves one host, so "at
# the bucket's speed" is measured against a bucket of a given bandwidth.
# The shaping starts after the produce step and ends with the script.
#
# The load generator, producer and rawget are always the working tree's
# binary (older revisions lack --payload, --metrics and rawget); only the
# broker under test changes. PROFILE=DIR saves a 10 s broker CPU profile of
# every replay (STRATAMQ_PPROF=true). KEEP=1 keeps the work dir.
set -euo pipefail
MSGS=${MSGS:-600000}
SIZE=${SIZE:-1024}
QUEUES=${QUEUES:-8}
BATCH=${BATCH:-100}
PAYLOAD=${PAYLOAD:-random}
SEGMENT=${SEGMENT:-32MiB}
CACHE=${CACHE:-256MiB}
ROUNDS=${ROUNDS:-3}
STREAMS=${STREAMS:-4}
ONE_QUEUE=${ONE_QUEUE:-0}
PROFILE=${PROFILE:-}
CLIENT=${CLIENT:-0}
CLIENT_BATCHES=${CLIENT_BATCHES:-32 1024}
HOT_RETENTION=${HOT_RETENTION:-64GiB}
BUCKET_RATE=${BUCKET_RATE:-}
VGW_PORT=${VGW_PORT:-27171}
NS_PORT=${NS_PORT:-19877}
BROKER_PORT=${BROKER_PORT:-19912}
HTTP_PORT=${HTTP_PORT:-19558}
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/stratamq-coldreplay.XXXXXX")
VGW=$(go env GOPATH)/bin/versitygw
say() { echo "coldreplay: $*" >&2; }
[[ -x $VGW ]] || { say "no versitygw at $VGW: run bash .ci/versitygw.sh"; exit 1; }

PIDS=()
cleanup() {
	# (|| true: under set -e a failed command here would end the cleanup
	# before the kills, leaving versitygw and a broker running)
	if [[ -n $BUCKET_RATE ]]; then tc qdisc del dev lo root 2>/dev/null || true; fi
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

# 1. versitygw and the binaries.
export AWS_ACCESS_KEY_ID=coldreplay AWS_SECRET_ACCESS_KEY=coldreplaysecret AWS_REGION=us-east-1
mkdir -p "$WORK/vgw"
"$VGW" --port "127.0.0.1:$VGW_PORT" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --keep-alive --quiet \
	posix "$WORK/vgw" >"$WORK/vgw.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
	[[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$VGW_PORT/" || true) != 000 ]] && break
	sleep 0.1
done
BUCKET="s3://coldreplay/p?endpoint=http://127.0.0.1:$VGW_PORT&region=us-east-1"

say "building the working tree"
(cd "$ROOT" && go build -o "$WORK/stratamq-tree" ./cmd/stratamq)
TOOL=$WORK/stratamq-tree
if [[ $CLIENT == 1 ]]; then
	say "building docs/bench/clientpull"
	(cd "$ROOT" && go build -o "$WORK/clientpull" ./docs/bench/clientpull)
fi
BROKERS=()
if [[ $# -eq 0 ]]; then
	BROKERS=(tree)
else
	for rev in "$@"; do
		if [[ $rev == /* ]]; then # a prebuilt binary, by absolute path
			BROKERS+=("bin${#BROKERS[@]}")
			ln -s "$rev" "$WORK/stratamq-${BROKERS[-1]}"
			continue
		fi
		BROKERS+=("$rev")
		[[ $rev == tree ]] && continue # the working tree, built above
		say "building $rev"
		mkdir -p "$WORK/src-$rev"
		git -C "$ROOT" archive "$rev" | tar -x -C "$WORK/src-$rev"
		(cd "$WORK/src-$rev" && go build -o "$WORK/stratamq-$rev" ./cmd/stratamq)
	done
fi

BPID=
RETAIN=0 # STRATAMQ_LOCAL_RETENTION of the next broker started
start_broker() { # bin datadir [keep: serve what the data dir holds]
	[[ ${3:-} == keep ]] || rm -rf "$2"
	STRATAMQ_SEGMENT_SIZE=$SEGMENT STRATAMQ_LOCAL_RETENTION=$RETAIN STRATAMQ_CACHE_SIZE=$CACHE STRATAMQ_BUCKET=$BUCKET STRATAMQ_GRPC_LISTEN= \
		STRATAMQ_PPROF=true "$1" serve --data-dir "$2" --namesrv-listen "127.0.0.1:$NS_PORT" \
		--listen "127.0.0.1:$BROKER_PORT" --http-listen "127.0.0.1:$HTTP_PORT" --log-level warn >>"$WORK/broker.log" 2>&1 &
	BPID=$!
	PIDS+=("$BPID")
	wait_port "$BROKER_PORT"
	wait_port "$NS_PORT"
	wait_http "http://127.0.0.1:$HTTP_PORT/readyz"
}
stop_broker() { # graceful: seals and uploads the active segment; at most 120 s
	kill -TERM "$BPID"
	for _ in $(seq 1200); do
		kill -0 "$BPID" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$BPID" 2>/dev/null; then
		say "broker $BPID did not stop within 120 s"
		kill -KILL "$BPID"
	fi
	wait "$BPID" 2>/dev/null || true
}
common=(--namesrv "127.0.0.1:$NS_PORT" --broker "127.0.0.1:$BROKER_PORT" --topic Cold --progress 0)

# 2. Produce into the bucket, with the first broker under test (the oldest
# format every later revision reads). With CLIENT=1 its segments stay on its
# disk too, for the hot replays.
[[ $CLIENT == 1 ]] && RETAIN=$HOT_RETENTION
start_broker "$WORK/stratamq-${BROKERS[0]}" "$WORK/data-produce"
RETAIN=0
say "producing $MSGS x $SIZE B ($PAYLOAD) on $QUEUES queues, batch $BATCH"
timeout 900 "$TOOL" bench produce "${common[@]}" --queues "$QUEUES" --size "$SIZE" --payload "$PAYLOAD" \
	--messages "$MSGS" --batch "$BATCH" --conns 2 --inflight 8 2>>"$WORK/bench.log" | tail -1 >"$WORK/produce.json"
say "produce: $(jq -c '{msgs_per_sec,mb_per_sec,errors}' "$WORK/produce.json")"
stop_broker
say "bucket: $(find "$WORK/vgw/coldreplay" -name '*.seg' -path '*commitlog*' | wc -l) segments, $(du -sh "$WORK/vgw/coldreplay" | cut -f1)"
# Every replay starts from this copy of the bucket (a broker's start and stop
# write metadata, and a newer revision may migrate it).
cp -a "$WORK/vgw/coldreplay" "$WORK/bucket-snapshot"
restore_bucket() {
	rm -rf "$WORK/vgw/coldreplay"
	cp -a "$WORK/bucket-snapshot" "$WORK/vgw/coldreplay"
}

if [[ -n $BUCKET_RATE ]]; then
	# htb with no default class: only what the filter picks (versitygw's
	# replies) goes through the shaped class; the rest of lo is sent as is.
	tc qdisc del dev lo root 2>/dev/null || true
	tc qdisc add dev lo root handle 1: htb r2q 1000
	tc class add dev lo parent 1: classid 1:2 htb rate "$BUCKET_RATE" ceil "$BUCKET_RATE" burst 256k cburst 256k
	tc filter add dev lo protocol ip parent 1: prio 1 u32 match ip sport "$VGW_PORT" 0xffff flowid 1:2
	say "the bucket's replies shaped to $BUCKET_RATE (tc htb on lo, source port $VGW_PORT)"
fi

rawget() {
	timeout 600 "$TOOL" bench rawget --bucket "$BUCKET" --streams "$STREAMS" 2>>"$WORK/bench.log" | tail -1
}
rawget >/dev/null # warm the server's page cache

consume() { # bin tag group [queue]
	restore_bucket
	start_broker "$1" "$WORK/data-$2"
	local args=(bench consume "${common[@]}" --group "$3" --from first --metrics "http://127.0.0.1:$HTTP_PORT/metrics")
	[[ -n ${4:-} ]] && args+=(--queue "$4")
	# shellcheck disable=SC2206 # CONSUME_ARGS is a list of flags
	[[ -n ${CONSUME_ARGS:-} ]] && args+=($CONSUME_ARGS)
	local prof=
	if [[ -n $PROFILE ]]; then
		mkdir -p "$PROFILE"
		prof=$PROFILE/$2-$3.pprof
		curl -s -o "$prof" "http://127.0.0.1:$HTTP_PORT/debug/pprof/profile?seconds=10" &
		prof=$!
	fi
	timeout 900 "$TOOL" "${args[@]}" 2>>"$WORK/bench.log" | tail -1 >"$WORK/consume.json"
	[[ -n $prof ]] && wait "$prof"
	local hwm sc
	hwm=$(awk '/VmHWM/ {printf "%d", $2/1024}' "/proc/$BPID/status")
	sc=$(scrape) # a fresh broker: its waits are the replay's
	stop_broker
	jq -c --arg hwm "$hwm" --argjson sc "$sc" '. + {broker_vmhwm_mib: ($hwm|tonumber),
		misses: $sc.misses, wait_seconds: (if $sc.wait == null then null else ($sc.wait * 100 | round) / 100 end)}' "$WORK/consume.json"
}

# The broker's cold-read counters (those bench consume --metrics reads), as
# a JSON object.
scrape() {
	curl -s --max-time 10 "http://127.0.0.1:$HTTP_PORT/metrics" | awk '
		$1 == "rocketmq_tiered_store_cold_read_bytes_total" { c = $2 }
		$1 == "rocketmq_tiered_store_provider_download_bytes_total" { d = $2 }
		$1 == "rocketmq_tiered_store_cold_get_total" { g = $2 }
		$1 == "rocketmq_tiered_store_read_ahead_cache_miss_total" { m = $2 }
		$1 == "rocketmq_tiered_store_cold_read_wait_seconds_total" { w = $2 + 0 } # null: a broker without it
		END { printf "{\"cold\":%.0f,\"bucket\":%.0f,\"gets\":%.0f,\"misses\":%.0f,\"wait\":%s}\n", c, d, g, m, (w == "" ? "null" : w) }'
}
# broker_cpu: CPU seconds (user and system) the running broker has used.
broker_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$BPID/stat"; }
client_run() { # tag group batch: the client pull consumer against the running broker
	local before after cpu0 cpu1 args=(-namesrv "127.0.0.1:$NS_PORT" -topic Cold -group "$2" -pull-batch "$3" -messages "$MSGS" -timeout 10m)
	local prof=
	if [[ -n $PROFILE ]]; then
		args+=(-cpuprofile "$PROFILE/$1-$2.client.pprof")
		curl -s -o "$PROFILE/$1-$2.pprof" "http://127.0.0.1:$HTTP_PORT/debug/pprof/profile?seconds=10" &
		prof=$!
	fi
	before=$(scrape)
	cpu0=$(broker_cpu)
	# a failed run still prints its line (errors > 0); the row shows it
	timeout 900 "$WORK/clientpull" "${args[@]}" 2>>"$WORK/bench.log" | tail -1 >"$WORK/client.json" || true
	[[ -n $prof ]] && wait "$prof"
	[[ -s $WORK/client.json ]] || echo '{"mode":"clientpull","messages":0,"record_bytes":0,"seconds":0,"record_mb_per_sec":0,"errors":1}' >"$WORK/client.json"
	cpu1=$(broker_cpu)
	after=$(scrape)
	# the fields bench consume --metrics reports, from the two scrapes, and
	# the broker's CPU while the client ran (the client's start included)
	jq -c --argjson b "$before" --argjson a "$after" --argjson c0 "$cpu0" --argjson c1 "$cpu1" '
		(($a.cold - $b.cold) | if . < 0 then 0 else . end) as $cold |
		(($a.bucket - $b.bucket) | if . < 0 then 0 else . end) as $bucket |
		. + {broker_cpu_seconds: ((($c1 - $c0) * 100 | round) / 100), cold_bytes: $cold, hot_bytes: ([.record_bytes - $cold, 0] | max), bucket_bytes: $bucket,
			bucket_gets: ($a.gets - $b.gets), misses: ($a.misses - $b.misses),
			wait_seconds: (if $a.wait == null then null else ((($a.wait - $b.wait) * 100 | round) / 100) end),
			cold_mb_per_sec: (if .seconds > 0 then ($cold / .seconds / 1e4 | round) / 100 else 0 end),
			amplification: (if .record_bytes > 0 then ($bucket / .record_bytes * 1000 | round) / 1000 else 0 end)}' "$WORK/client.json"
}
broker_hwm() { awk '/VmHWM/ {printf "%d", $2/1024}' "/proc/$BPID/status"; }
client_cold() { # bin tag group batch: a fresh broker, the bucket restored
	restore_bucket
	start_broker "$1" "$WORK/data-$2"
	[[ -n $PROFILE ]] && mkdir -p "$PROFILE"
	local res hwm
	res=$(client_run "$2" "$3" "$4")
	hwm=$(broker_hwm)
	stop_broker
	jq -c --arg hwm "$hwm" '. + {broker_vmhwm_mib: ($hwm|tonumber)}' <<<"$res"
}
# hot_runs bin tag group: the producing broker's data dir (its segments on
# disk), the bucket restored; bench consume with group, then the client once
# per batch with group-cN. Writes $WORK/hot.lines, one line per replay, the
# case first.
hot_runs() {
	restore_bucket
	RETAIN=$HOT_RETENTION
	start_broker "$1" "$WORK/data-produce" keep
	RETAIN=0
	[[ -n $PROFILE ]] && mkdir -p "$PROFILE"
	local res b
	timeout 900 "$TOOL" bench consume "${common[@]}" --group "$3" --from first --metrics "http://127.0.0.1:$HTTP_PORT/metrics" \
		2>>"$WORK/bench.log" | tail -1 >"$WORK/consume.json"
	echo "hot $(jq -c --arg hwm "$(broker_hwm)" '. + {broker_vmhwm_mib: ($hwm|tonumber)}' "$WORK/consume.json")" >"$WORK/hot.lines"
	for b in $CLIENT_BATCHES; do
		res=$(client_run "$2" "$3-c$b" "$b")
		echo "hot-client$b $(jq -c --arg hwm "$(broker_hwm)" '. + {broker_vmhwm_mib: ($hwm|tonumber)}' <<<"$res")" >>"$WORK/hot.lines"
	done
	stop_broker
}

# 3. Rounds, brokers side by side.
echo "round broker case raw_seq_MB/s raw_par_MB/s consume_MB/s cold_MB/s ratio_seq cold_bytes hot_bytes bucket_bytes amplification gets vmhwm_MiB errors misses wait_s" >"$WORK/results"
# row round broker case json: one line of the table (bench consume's
# mb_per_sec is record bytes; the client's record_mb_per_sec is the same unit).
row() {
	echo "$4" >>"$WORK/runs.jsonl"
	jq -r --arg r "$1" --arg b "$2" --arg c "$3" --argjson s "$seq_mbs" --argjson p "$par_mbs" \
		'(if .mode == "clientpull" then .record_mb_per_sec else .mb_per_sec end) as $mbs |
		 [$r, $b, $c, $s, $p, $mbs, (.cold_mb_per_sec // 0), (if $s > 0 then ($mbs / $s * 1000 | round) / 1000 else 0 end),
		  (.cold_bytes // 0), (.hot_bytes // 0), (.bucket_bytes // 0), (.amplification // 0), (.bucket_gets // 0),
		  .broker_vmhwm_mib, .errors, (.misses // "na"), (if has("wait_seconds") and .wait_seconds != null then .wait_seconds else "na" end)] | @tsv' <<<"$4" | tr '\t' ' ' | tee -a "$WORK/results" >&2
}
g=0
for round in $(seq "$ROUNDS"); do
	for br in "${BROKERS[@]}"; do
		raw=$(rawget)
		seq_mbs=$(jq .seq_mb_per_sec <<<"$raw")
		par_mbs=$(jq .par_mb_per_sec <<<"$raw")
		cases=(all)
		[[ $ONE_QUEUE == 1 ]] && cases+=(q0)
		for c in "${cases[@]}"; do
			g=$((g + 1))
			q=
			[[ $c == q0 ]] && q=0
			res=$(consume "$WORK/stratamq-$br" "$br-$round-$c" "replay$g" $q)
			row "$round" "$br" "$c" "$res"
		done
		[[ $CLIENT == 1 ]] || continue
		for b in $CLIENT_BATCHES; do
			g=$((g + 1))
			row "$round" "$br" "client$b" "$(client_cold "$WORK/stratamq-$br" "$br-$round-client$b" "replay$g" "$b")"
		done
		g=$((g + 1))
		hot_runs "$WORK/stratamq-$br" "$br-$round-hot" "replay$g"
		while read -r c res; do
			row "$round" "$br" "$c" "$res"
		done <"$WORK/hot.lines"
	done
done

# 4. Everything, then the medians per broker and case.
column -t "$WORK/results"
echo
echo "medians:"
awk 'NR > 1 { k = $2 " " $3; n[k]++; for (i = 4; i <= 17; i++) { v[k, i, n[k]] = $i; if ($i == "na") na[k, i] = 1 } }
	END {
		printf "broker case raw_seq_MB/s raw_par_MB/s consume_MB/s cold_MB/s ratio_seq cold_bytes hot_bytes bucket_bytes amplification gets vmhwm_MiB errors misses wait_s\n"
		for (k in n) {
			line = k
			for (i = 4; i <= 17; i++) {
				if ((k, i) in na) { line = line " na"; continue }
				m = n[k]
				for (j = 1; j <= m; j++) { # insertion sort (mawk has no asort)
					x = v[k, i, j] + 0
					for (l = j - 1; l >= 1 && a[l] > x; l--) a[l + 1] = a[l]
					a[l + 1] = x
				}
				med = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
				line = line " " med
			}
			print line
		}
	}' "$WORK/results" | column -t
