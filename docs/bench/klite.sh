#!/usr/bin/env bash
# StrataMQ and klite (github.com/klaudworks/klite, a Kafka-protocol broker
# in Go) side by side: durable produce, hot and cold reads, cold start.
#
#   KLITE_BIN=/tmp/klite docs/bench/klite.sh      # 3 rounds, ~4 minutes
#   MSGS=20000 SINGLE_MSGS=5000 ROUNDS=1 KLITE_BIN=/tmp/klite docs/bench/klite.sh   # a quick check
#   KEEP=1 ... docs/bench/klite.sh                # keep the temp dir (logs, raw JSON lines)
#
# The servers run ALTERNATELY, never together: in round r every row runs
# first on StrataMQ and then on klite, the order flipped in each round
# (odd rounds StrataMQ first, even rounds klite first), so the machine's
# drift spreads over both. Rows 1 and 2 each start a fresh server on an
# empty data dir under a fresh temp dir on disk (not tmpfs: fsync
# matters); rows 3-5 use row 2's server and data dir. Servers listen on
# 127.0.0.1 only (StrataMQ's gRPC port is off); every wait is bounded;
# every process started here is stopped on exit (SIGTERM to the script
# stops it after the load run under way). The temp dir is removed at the end unless KEEP=1.
#
# RUN AS ROOT: rows 4 and 5 drop the page cache (sync; echo 3 >
# /proc/sys/vm/drop_caches) between stopping a server and starting it again
# on the same data dir. That drops the whole machine's cache, not only
# ours. When it fails (not root, a read-only /proc/sys) the script says so
# and goes on without it: those rows then read from a warm page cache and
# their lines and the summary say "(cache NOT dropped)".
#
# Binaries: stratamq is built from this checkout's working tree (or
# STRATAMQ_BIN); klite is KLITE_BIN, or is built from KLITE_SRC (a git URL
# or directory, cloned) at KLITE_REV as compare.sh does; its load generator
# is docs/bench/kafkaload (a separate Go module: franz-go, acks=all, no
# compression; each connection its own client and partition).
#
# Rows (1 KiB messages, SIZE):
#  1. durable single sends, 64 outstanding: StrataMQ `serve --flush sync`
#     and `bench produce --batch 1 --conns 4 --inflight 16` (one message per
#     SEND_MESSAGE, 16 unacknowledged per connection); klite `kafkaload
#     -conns 4 -batch 1 -window 16` (one record per produce request).
#     klite acknowledges a produce only after the fsync of its WAL (always;
#     it has no earlier ack), and it handles ONE PRODUCE REQUEST PER
#     CONNECTION AT A TIME: the 16 requests in flight on a connection queue
#     behind each other's fsync and never share one; only the 4 connections
#     can share a group commit. StrataMQ takes a connection's requests
#     pipelined, and one fdatasync acknowledges every send written before
#     it, from any connection (group commit). SINGLE_MSGS messages.
#  2. durable batched produce: StrataMQ flush=sync, `--batch 64 --conns 1
#     --inflight 4` (SEND_BATCH_MESSAGE of 64, 4 requests in flight); a
#     second StrataMQ line with flush=async on a broker of its own (acked
#     once in the page cache, fsync'd every 500 ms: NOT durable at the ack;
#     klite has no such mode, so its column repeats its durable row); klite
#     `-conns 1 -batch 64 -inflight 4 -window 256` (64-record batches, one
#     produce request each, 4 in flight, 10 ms linger). MSGS messages.
#  3. hot consume: right after row 2's produce, on the same server, read
#     everything from the start: `bench consume --from first` (one
#     connection, a PULL_MESSAGE of up to 1024 records per queue at a time,
#     the 4 queues in parallel); klite `kafkaload -mode consume` (one
#     franz-go client, no group, all 4 partitions). Reported: payload MB/s
#     (msgs/s × SIZE, the same unit for both; StrataMQ's own mb_per_sec,
#     of stored records with their headers, is in the raw JSON).
#  4. cold read: stop the server (SIGTERM), drop the page cache, start the
#     same server on the same data dir, read everything from the start
#     with a new consumer. StrataMQ's stop seals its active segment and
#     uploads it to the default bucket (file://<data dir>-bucket, a local
#     directory), keeping the local copy (STRATAMQ_LOCAL_RETENTION 1GiB):
#     this read is from local disk, as klite's is. Also, for StrataMQ only,
#     "cold read from the bucket": a broker of its own with
#     STRATAMQ_LOCAL_RETENTION=0 (sealed segments dropped from local disk
#     once uploaded) and STRATAMQ_SEGMENT_SIZE=32MiB (so segments seal
#     while MSGS are produced), produced like row 2 but with random,
#     incompressible bodies (`--payload random`: the bucket's objects are
#     compressed, and the other rows' repeated a-z bodies would shrink
#     ~100× there; not a row: its numbers are only in the log), stopped
#     (which seals and uploads the rest), the page cache dropped, started
#     again: the read comes from the local-directory bucket (`--metrics`
#     reports the cold bytes, in the log). klite runs without a bucket
#     here (its S3 tier is optional and needs S3): it has no such row.
#  5. cold start: the same stop and cache drop, then the time from starting
#     the server process on that data dir (a fork of this shell) until a
#     new consumer got its first message: the consumer (`bench consume
#     --from first --messages 1 --create=false`, which needs the topic's
#     route from the name server; `kafkaload -mode consume -messages 1`)
#     starts as soon as the server's ports accept (polled every 5 ms) and
#     is started again while it finds nothing (at most COLDSTART_WAIT).
#     Reported: ms until the ports accept, ms until the first message (the
#     row's figure), and the same consumer alone against the then-running
#     server ("client alone": the part of the figure that is the client
#     process's own start, connect and first fetch), and the server's CPU
#     until the first message. Also for StrataMQ's bucket-only data dir.
#     The server's binary is paged in from disk too (the cache drop took
#     it: stratamq is the larger binary, sizes in the log); the clients run
#     from binaries read back into the cache right after each drop.
#
# Not like for like (read the rows with these in mind):
#   - row 1: klite serialises a connection's produce requests (above), so
#     its 64 outstanding sends do ~4 fsyncs' worth of work at a time;
#   - rows 1-2: StrataMQ's p50/p99 are per request (per batch of 64 in
#     row 2), klite's per record (from Produce() to its callback, the
#     batch's linger included);
#   - row 2a is not durable at the ack; klite has no such mode;
#   - rows 3-4: StrataMQ's consume clock starts after its route and offset
#     look-ups, kafkaload's at the client's creation (metadata and the
#     first fetch inside): a few ms of a run of ~1 s;
#   - row 4b has no klite counterpart (no bucket here), and its bodies are
#     random where every other row's are a repeated a-z pattern (neither
#     server compresses on local disk, so that changes only 4b);
#   - row 5: "client alone" differs per client (the stratamq bench binary
#     against franz-go), and StrataMQ's consumer also needs the name
#     server to route the topic (it retries until it does), klite's only
#     the broker's metadata;
#   - klite keeps at most --wal-max-disk-size (1 GiB) of WAL without a
#     bucket: keep MSGS × SIZE well under it.
#
# Each row prints msgs/s, MB/s for reads, p50/p99 (produce: send → ack of
# a request, per batch for batches on StrataMQ and per record on klite;
# consume: per PULL_MESSAGE request on StrataMQ, per PollFetches on klite),
# and the server's CPU per message: user + system time of the server
# process (/proc/PID/stat, all its threads) over the row, divided by the
# row's messages; the load generator's CPU is not in it. StrataMQ rows
# also run with `--server-pid`, which measures the same from inside the
# bench's timed part ("bench's own" in the log). At the end: a table of
# medians over the rounds per row.
#
# Knobs (environment): ROUNDS (3), SIZE (1024), SINGLE_MSGS (row 1, 20000:
# klite does ~1-3 k/s there), KLITE_SINGLE_MSGS (klite's row 1, default
# SINGLE_MSGS), MSGS (rows 2-5, 200000), SEGMENT (32MiB, the bucket-only
# broker's segment size), TOOL_TIMEOUT (300: seconds any one load run may
# take), KLITE_TIMEOUT (120s: kafkaload's own bound), COLDSTART_WAIT (60:
# seconds a cold start may take), the loopback ports NS_PORT (29876),
# BROKER_PORT (29911), HTTP_PORT (29912), KLITE_PORT (29092), and
# STRATAMQ_BIN, KLITE_BIN, KLITE_SRC, KLITE_REV, KEEP.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-1024}
SINGLE_MSGS=${SINGLE_MSGS:-20000}
KLITE_SINGLE_MSGS=${KLITE_SINGLE_MSGS:-$SINGLE_MSGS}
MSGS=${MSGS:-200000}
SEGMENT=${SEGMENT:-32MiB}
TOOL_TIMEOUT=${TOOL_TIMEOUT:-300}
KLITE_TIMEOUT=${KLITE_TIMEOUT:-120s}
COLDSTART_WAIT=${COLDSTART_WAIT:-60}
NS_PORT=${NS_PORT:-29876}
BROKER_PORT=${BROKER_PORT:-29911}
HTTP_PORT=${HTTP_PORT:-29912}
KLITE_PORT=${KLITE_PORT:-29092}
KLITE_SRC=${KLITE_SRC:-https://github.com/klaudworks/klite}
KLITE_REV=${KLITE_REV:-2493491310dcc4c31aae9c40b0a513425c43c160}

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/stratamq-klite.XXXXXX")
LOG=$WORK/log
OUTD=$WORK/out
RES=$WORK/res
mkdir -p "$OUTD" "$RES"
SPID= # the running server, if any (one at a time)

say() { echo "klite.sh: $*" >&2; }

# stop_server: SIGTERM the running server, wait for it (at most 120 s,
# then SIGKILL).
stop_server() {
	[[ -n $SPID ]] || return 0
	local i
	kill -TERM "$SPID" 2>/dev/null || true
	for ((i = 0; i < 1200; i++)); do
		kill -0 "$SPID" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$SPID" 2>/dev/null; then
		say "server $SPID did not stop within 120 s: SIGKILL"
		kill -KILL "$SPID" 2>/dev/null || true
	fi
	wait "$SPID" 2>/dev/null || true
	SPID=
}
cleanup() {
	stop_server
	if [[ ${KEEP:-0} == 1 ]]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ $(stat -f -c %T "$WORK") == tmpfs ]]; then
	say "$WORK is on tmpfs: fsync is free there; set TMPDIR to a directory on disk"
	exit 2
fi
for p in "$NS_PORT" "$BROKER_PORT" "$HTTP_PORT" "$KLITE_PORT"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		say "port $p is in use on 127.0.0.1; set NS_PORT/BROKER_PORT/HTTP_PORT/KLITE_PORT"
		exit 1
	fi
done

# ---- binaries ----
if [[ -n ${STRATAMQ_BIN:-} ]]; then
	SMQ=$STRATAMQ_BIN
else
	say "building stratamq from the working tree"
	(cd "$ROOT" && go build -o "$WORK/stratamq" ./cmd/stratamq)
	SMQ=$WORK/stratamq
fi
# The load tools run from a copy of the binary: dropping the page cache
# leaves the server's binary cold (paging it in is part of a cold start)
# while the client's, read back right after each drop, stays warm.
cp "$SMQ" "$WORK/stratamq-client"
SMQC=$WORK/stratamq-client
say "building kafkaload"
(cd "$ROOT/docs/bench/kafkaload" && go build -o "$WORK/kafkaload" .)
KLOAD=$WORK/kafkaload
if [[ -n ${KLITE_BIN:-} ]]; then
	KLITE=$KLITE_BIN
else
	say "building klite at $KLITE_REV from $KLITE_SRC"
	git clone -q "$KLITE_SRC" "$WORK/klite-src"
	git -C "$WORK/klite-src" checkout -q "$KLITE_REV"
	(cd "$WORK/klite-src" && go build -o "$WORK/klite" ./cmd/klite)
	KLITE=$WORK/klite
fi
SMQ_REV=$("$SMQ" version 2>/dev/null || echo '?')
[[ -n ${STRATAMQ_BIN:-} ]] || SMQ_REV+=" at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$([[ -z $(git -C "$ROOT" status --porcelain 2>/dev/null) ]] || echo ' + uncommitted changes')"
say "stratamq: $SMQ_REV; klite: ${KLITE_BIN:-$KLITE_REV}"
say "work dir $WORK ($(stat -f -c %T "$WORK")); $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg); binaries: stratamq $(($(stat -c %s "$SMQ") >> 20)) MiB, klite $(($(stat -c %s "$KLITE") >> 20)) MiB"

HZ=$(getconf CLK_TCK)
now_us() { echo "${EPOCHREALTIME/./}"; }
ticks() { awk '{print $14 + $15}' "/proc/$SPID/stat"; } # CPU ticks of the running server
cpu_us_per_msg() { # TICKS MSGS
	awk -v t="$1" -v hz="$HZ" -v n="$2" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "n/a" }'
}

# wait_ports PORT...: until each accepts on 127.0.0.1, polled every 5 ms;
# at most COLDSTART_WAIT seconds in all; fails if the server died.
wait_ports() {
	local p deadline=$(($(now_us) + COLDSTART_WAIT * 1000000))
	for p in "$@"; do
		until (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do
			if ! kill -0 "$SPID" 2>/dev/null; then
				say "the server exited before 127.0.0.1:$p accepted (log: $LOG.*)"
				return 1
			fi
			if (($(now_us) > deadline)); then
				say "nothing accepts on 127.0.0.1:$p after ${COLDSTART_WAIT}s"
				return 1
			fi
			sleep 0.005
		done
	done
}

CACHE_NOTE=
drop_caches() {
	if timeout 120 sync && { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
		cat "$SMQC" "$KLOAD" >/dev/null # the clients' binaries only (see above)
		return 0
	fi
	if [[ -z $CACHE_NOTE ]]; then
		say "could not drop the page cache (root is needed): rows 4 and 5 read from a warm cache"
	fi
	CACHE_NOTE=" (cache NOT dropped)"
}

# ---- servers (start_* only launch; the caller waits) ----
SMQ_ENV=() # extra environment of the next StrataMQ broker
launch_smq() { # DIR FLUSH
	mkdir -p "$1"
	env "${SMQ_ENV[@]}" STRATAMQ_GRPC_LISTEN= "$SMQ" serve --data-dir "$1" --flush "$2" \
		--namesrv-listen "127.0.0.1:$NS_PORT" --listen "127.0.0.1:$BROKER_PORT" \
		--http-listen "127.0.0.1:$HTTP_PORT" --log-level warn >>"$LOG.stratamq" 2>&1 &
	SPID=$!
}
start_smq() { # DIR FLUSH: and wait until it answers /readyz (registered and routed)
	local i
	launch_smq "$@"
	wait_ports "$NS_PORT" "$BROKER_PORT" "$HTTP_PORT"
	for ((i = 0; i < 300; i++)); do
		[[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$HTTP_PORT/readyz" || true) == 200 ]] && return 0
		sleep 0.1
	done
	say "StrataMQ not ready after 30 s"
	return 1
}
launch_klite() { # DIR
	mkdir -p "$1"
	"$KLITE" --listen "127.0.0.1:$KLITE_PORT" --data-dir "$1" --default-partitions 4 --log-level warn >>"$LOG.klite" 2>&1 &
	SPID=$!
}
start_klite() {
	launch_klite "$@"
	wait_ports "$KLITE_PORT"
}

# tier_idle: until StrataMQ's uploader holds nothing pending (≤ 120 s), so
# a read row does not pay for tiering the produce row's bytes.
tier_idle() {
	local i
	for ((i = 0; i < 1200; i++)); do
		if curl -s --max-time 2 "http://127.0.0.1:$HTTP_PORT/metrics" |
			awk '/^rocketmq_tiered_store_upload_(pending_segments|held_objects) / {s += $2; f++} END {exit !(f == 2 && s == 0)}'; then
			return 0
		fi
		sleep 0.1
	done
	say "  (the uploader was still busy after 120 s)"
}

# ---- load runs ----
# The JSON line of a run goes to $OUTD/NAME.json (a stub with errors -1 if
# the tool printed none); the server's CPU µs/msg over it to $OUTD/NAME.cpu.
stub='{"messages":0,"msgs_per_sec":0,"mb_per_sec":0,"p50_ms":0,"p99_ms":0,"errors":-1}'
finish_run() { # NAME TICKS0
	local n
	grep '^{' "$OUTD/$1.out" | tail -1 >"$OUTD/$1.json" || true
	[[ -s $OUTD/$1.json ]] || echo "$stub" >"$OUTD/$1.json"
	n=$(jq -r '.messages' "$OUTD/$1.json")
	cpu_us_per_msg $(($(ticks) - $2)) "$n" >"$OUTD/$1.cpu"
}
smq_bench() { # NAME ARGS...
	local name=$1 t0
	shift
	t0=$(ticks)
	timeout -k 10 "$TOOL_TIMEOUT" "$SMQC" bench "$@" --namesrv "127.0.0.1:$NS_PORT" --broker "127.0.0.1:$BROKER_PORT" \
		--size "$SIZE" --progress 0 --server-pid "$SPID" >"$OUTD/$name.out" 2>>"$LOG.bench" || say "  (stratamq bench exit $?: see $LOG.bench)"
	finish_run "$name" "$t0"
}
kl_bench() { # NAME ARGS...
	local name=$1 t0
	shift
	t0=$(ticks)
	timeout -k 10 "$TOOL_TIMEOUT" "$KLOAD" -brokers "127.0.0.1:$KLITE_PORT" -size "$SIZE" -partitions 4 -timeout "$KLITE_TIMEOUT" "$@" \
		>"$OUTD/$name.out" 2>>"$LOG.kafkaload" || say "  (kafkaload exit $?: see $LOG.kafkaload)"
	finish_run "$name" "$t0"
}

# record ROW SERVER NAME [note]: print the run and append "msgs/s MB/s p50
# p99 cpu errors" to $RES/ROW.SERVER (MB/s: of payload, msgs/s × SIZE).
record() {
	local row=$1 srv=$2 name=$3 note=${4:-} j=$OUTD/$3.json line own m mb p50 p99 cpu err
	line=$(jq -r --arg cpu "$(cat "$OUTD/$name.cpu")" --argjson size "$SIZE" \
		'"\(.msgs_per_sec | floor) \(.msgs_per_sec * $size / 1e6 * 10 | floor / 10) \(.p50_ms) \(.p99_ms) \($cpu) \(.errors)"' "$j")
	echo "$line" >>"$RES/$row.$srv"
	read -r m mb p50 p99 cpu err <<<"$line"
	own=$(jq -r 'if .server_cpu_us_per_msg then ", bench'"'"'s own \(.server_cpu_us_per_msg)" else "" end' "$j")
	say "  round $ROUND row $row $srv: $m msgs/s, $mb MB/s payload, p50 $p50 ms, p99 $p99 ms, server CPU $cpu µs/msg$own, errors $err$note"
}

# ---- cold start (row 5) ----
# coldstart_smq ROW DIR FLUSH / coldstart_klite ROW DIR: launch the server on
# DIR (the caller stopped it and dropped the cache), poll its ports, run a
# one-message consumer until it gets a message. Appends "first_ms port_ms
# client_alone_ms server_cpu_ms attempts" to $RES/ROW.SERVER.
probe_smq() { # NAME: a new consumer's first message
	timeout -k 5 30 "$SMQC" bench consume --topic "$TOPIC" --from first --messages 1 --create=false --group "probe$RANDOM" \
		--namesrv "127.0.0.1:$NS_PORT" --progress 0 >"$OUTD/$1.out" 2>>"$LOG.bench" || true
}
probe_klite() {
	timeout -k 5 30 "$KLOAD" -brokers "127.0.0.1:$KLITE_PORT" -mode consume -topic "$TOPIC" -messages 1 -timeout 10s \
		>"$OUTD/$1.out" 2>>"$LOG.kafkaload" || true
}
got_one() { [[ $(grep '^{' "$OUTD/$1.out" | tail -1 | jq -r '.messages // 0' 2>/dev/null || echo 0) -ge 1 ]]; }
coldstart() { # ROW SERVER(smq|klite) DIR [FLUSH]
	local row=$1 srv=$2 t0 tport tfirst t1 t2 tries=0 cpu deadline name f p a
	name=r$ROUND-$row-$srv-start
	t0=$(now_us)
	if [[ $srv == smq ]]; then
		launch_smq "$3" "$4"
		wait_ports "$NS_PORT" "$BROKER_PORT"
	else
		launch_klite "$3"
		wait_ports "$KLITE_PORT"
	fi
	tport=$(now_us)
	deadline=$((t0 + COLDSTART_WAIT * 1000000))
	while :; do
		tries=$((tries + 1))
		"probe_$srv" "$name"
		got_one "$name" && break
		if (($(now_us) > deadline)); then
			say "  round $ROUND row $row $srv: no message within ${COLDSTART_WAIT}s of the start ($tries tries)"
			echo "n/a n/a n/a n/a $tries" >>"$RES/$row.$srv"
			return 0
		fi
		sleep 0.005
	done
	tfirst=$(now_us)
	cpu=$(awk -v t="$(ticks)" -v hz="$HZ" 'BEGIN{printf "%.0f", t / hz * 1000}')
	t1=$(now_us)
	"probe_$srv" "$name-again"
	t2=$(now_us)
	got_one "$name-again" || say "  (the second probe got nothing)"
	read -r f p a <<<"$(awk -v t0="$t0" -v tp="$tport" -v tf="$tfirst" -v t1="$t1" -v t2="$t2" \
		'BEGIN{printf "%.1f %.1f %.1f", (tf - t0) / 1000, (tp - t0) / 1000, (t2 - t1) / 1000}')"
	echo "$f $p $a $cpu $tries" >>"$RES/$row.$srv"
	say "  round $ROUND row $row $srv: first message $f ms after the start (ports accept at $p ms; $tries consumer start(s); the consumer alone on the running server $a ms), server CPU $cpu ms$CACHE_NOTE"
}

# ---- the rows, per server ----
single_smq() {
	local d=$WORK/r$ROUND-smq-single
	start_smq "$d" sync
	smq_bench "r$ROUND-1-smq" produce --topic KlSingle --messages "$SINGLE_MSGS" --batch 1 --conns 4 --inflight 16
	record 1 smq "r$ROUND-1-smq"
	stop_server
	rm -rf "$d" "$d-bucket"
}
single_klite() {
	local d=$WORK/r$ROUND-klite-single
	start_klite "$d"
	kl_bench "r$ROUND-1-klite" -topic kl-single -messages "$KLITE_SINGLE_MSGS" -conns 4 -batch 1 -window 16
	record 1 klite "r$ROUND-1-klite"
	stop_server
	rm -rf "$d"
}

chain_smq() {
	local d=$WORK/r$ROUND-smq-batch b=$WORK/r$ROUND-smq-bucketonly
	TOPIC=KlBatch
	# 2, 3: durable batched produce, then read it hot
	start_smq "$d" sync
	smq_bench "r$ROUND-2-smq" produce --topic "$TOPIC" --messages "$MSGS" --batch 64 --conns 1 --inflight 4
	record 2 smq "r$ROUND-2-smq"
	tier_idle
	smq_bench "r$ROUND-3-smq" consume --topic "$TOPIC" --from first --group "hot$ROUND"
	record 3 smq "r$ROUND-3-smq"
	# 4: cold read from local disk
	stop_server
	drop_caches
	start_smq "$d" sync
	smq_bench "r$ROUND-4-smq" consume --topic "$TOPIC" --from first --group "cold$ROUND" --metrics "http://127.0.0.1:$HTTP_PORT/metrics"
	record 4 smq "r$ROUND-4-smq" "$CACHE_NOTE, $(jq -r '"cold (bucket) bytes \(.cold_bytes // "?"), hot (local) bytes \(.hot_bytes // "?")"' "$OUTD/r$ROUND-4-smq.json")"
	# 5: cold start
	stop_server
	drop_caches
	coldstart 5 smq "$d" sync
	stop_server
	rm -rf "$d" "$d-bucket"

	# 2, async flush: a broker of its own
	start_smq "$d-async" async
	smq_bench "r$ROUND-2a-smq" produce --topic "$TOPIC" --messages "$MSGS" --batch 64 --conns 1 --inflight 4
	record 2a smq "r$ROUND-2a-smq"
	stop_server
	rm -rf "$d-async" "$d-async-bucket"

	# 4b, 5b: the data only in the (local directory) bucket
	SMQ_ENV=(STRATAMQ_LOCAL_RETENTION=0 STRATAMQ_SEGMENT_SIZE="$SEGMENT")
	start_smq "$b" sync
	smq_bench "r$ROUND-setup-bucket" produce --topic "$TOPIC" --messages "$MSGS" --batch 64 --conns 1 --inflight 4 --payload random
	say "  (bucket-only broker's produce, not a row: $(jq -c '{msgs_per_sec, p99_ms, errors}' "$OUTD/r$ROUND-setup-bucket.json"))"
	stop_server
	say "  after its stop: local commitlog $(du -sm "$b/store/commitlog" 2>/dev/null | cut -f1) MiB, bucket $(du -sm "$b-bucket" 2>/dev/null | cut -f1) MiB"
	drop_caches
	start_smq "$b" sync
	smq_bench "r$ROUND-4b-smq" consume --topic "$TOPIC" --from first --group "bucket$ROUND" --metrics "http://127.0.0.1:$HTTP_PORT/metrics"
	record 4b smq "r$ROUND-4b-smq" "$CACHE_NOTE, $(jq -r '"cold (bucket) bytes \(.cold_bytes // "?"), hot (local) bytes \(.hot_bytes // "?"), bucket GETs \(.bucket_gets // "?")"' "$OUTD/r$ROUND-4b-smq.json")"
	stop_server
	drop_caches
	coldstart 5b smq "$b" sync
	stop_server
	SMQ_ENV=()
	rm -rf "$b" "$b-bucket"
}

chain_klite() {
	local d=$WORK/r$ROUND-klite-batch
	TOPIC=kl-batch
	start_klite "$d"
	kl_bench "r$ROUND-2-klite" -topic "$TOPIC" -messages "$MSGS" -conns 1 -batch 64 -inflight 4 -window 256
	record 2 klite "r$ROUND-2-klite"
	kl_bench "r$ROUND-3-klite" -mode consume -topic "$TOPIC" -messages "$MSGS"
	record 3 klite "r$ROUND-3-klite"
	stop_server
	drop_caches
	start_klite "$d"
	kl_bench "r$ROUND-4-klite" -mode consume -topic "$TOPIC" -messages "$MSGS"
	record 4 klite "r$ROUND-4-klite" "$CACHE_NOTE"
	stop_server
	drop_caches
	coldstart 5 klite "$d"
	stop_server
	rm -rf "$d"
}

say "$ROUNDS rounds; $SIZE B messages; row 1: $SINGLE_MSGS (klite $KLITE_SINGLE_MSGS) messages, rows 2-5: $MSGS"
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
	if ((ROUND % 2)); then order="smq klite"; else order="klite smq"; fi
	say "round $ROUND: $order"
	for part in single chain; do
		for srv in $order; do
			"${part}_$srv"
		done
	done
done

# ---- summary: medians over the rounds ----
# med ROW SERVER FIELD: the median of field FIELD of $RES/ROW.SERVER ("n/a"
# when there is none); errs ROW SERVER: the errors summed.
med() {
	[[ -f $RES/$1.$2 ]] || { echo n/a; return; }
	awk -v f="$3" '$f != "n/a" {print $f}' "$RES/$1.$2" | sort -g |
		awk '{a[NR] = $1} END {
			if (NR == 0) { print "n/a"; exit }
			v = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
			printf (v >= 1000 || v <= -1000) ? "%.0f\n" : (v >= 10 || v <= -10) ? "%.1f\n" : "%.2f\n", v
		}'
}
errs() { [[ -f $RES/$1.$2 ]] && awk '{s += $6} END {print s + 0}' "$RES/$1.$2" || echo n/a; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "n/a" && b != "n/a" && b + 0 > 0) printf "%.2f×", a / b; else print "n/a" }'; }
cell() { # ROW SERVER: "msgs/s (p99 X ms)"
	[[ -f $RES/$1.$2 ]] || { echo n/a; return; }
	echo "$(med "$1" "$2" 1) (p50 $(med "$1" "$2" 3), p99 $(med "$1" "$2" 4) ms)"
}
rcell() { # ROW SERVER: "MB/s (msgs/s)"
	[[ -f $RES/$1.$2 ]] || { echo n/a; return; }
	echo "$(med "$1" "$2" 2) MB/s ($(med "$1" "$2" 1) msgs/s)"
}
scell() { # ROW SERVER: cold start
	[[ -f $RES/$1.$2 ]] || { echo n/a; return; }
	echo "$(med "$1" "$2" 1) ms (ports $(med "$1" "$2" 2) ms; client alone $(med "$1" "$2" 3) ms; server CPU $(med "$1" "$2" 4) ms)"
}

echo
echo "StrataMQ ($SMQ_REV) and klite (${KLITE_BIN:-$KLITE_REV}), $SIZE B messages, medians of $ROUNDS round(s), servers alternating; ratio = StrataMQ ÷ klite; CPU = the server process's user + system µs per message."
echo
echo "| row | StrataMQ | klite | ratio | StrataMQ CPU µs/msg | klite CPU µs/msg |"
echo "|---|---|---|---|---|---|"
echo "| 1. durable single sends, 4 conns × 16 in flight ($SINGLE_MSGS / $KLITE_SINGLE_MSGS msgs): msgs/s | $(cell 1 smq) | $(cell 1 klite) | $(ratio "$(med 1 smq 1)" "$(med 1 klite 1)") | $(med 1 smq 5) | $(med 1 klite 5) |"
echo "| 2. durable batched produce, batches of 64, 4 in flight ($MSGS msgs): msgs/s (StrataMQ p50/p99 per batch, klite per record) | $(cell 2 smq) | $(cell 2 klite) | $(ratio "$(med 2 smq 1)" "$(med 2 klite 1)") | $(med 2 smq 5) | $(med 2 klite 5) |"
echo "| 2a. the same, StrataMQ flush=async (not durable at the ack; klite: its durable row) | $(cell 2a smq) | $(cell 2 klite) | $(ratio "$(med 2a smq 1)" "$(med 2 klite 1)") | $(med 2a smq 5) | $(med 2 klite 5) |"
echo "| 3. hot consume from the start, right after row 2: payload MB/s | $(rcell 3 smq) | $(rcell 3 klite) | $(ratio "$(med 3 smq 1)" "$(med 3 klite 1)") | $(med 3 smq 5) | $(med 3 klite 5) |"
echo "| 4. cold read after a restart, page cache dropped$CACHE_NOTE, local disk | $(rcell 4 smq) | $(rcell 4 klite) | $(ratio "$(med 4 smq 1)" "$(med 4 klite 1)") | $(med 4 smq 5) | $(med 4 klite 5) |"
echo "| 4b. cold read, StrataMQ's data only in its local-directory bucket (LOCAL_RETENTION=0) | $(rcell 4b smq) | n/a (no bucket in this setup) | | $(med 4b smq 5) | |"
echo "| 5. cold start$CACHE_NOTE: server start → a new consumer's first message (lower is better; ratio of times) | $(scell 5 smq) | $(scell 5 klite) | $(ratio "$(med 5 smq 1)" "$(med 5 klite 1)") | | |"
echo "| 5b. cold start, StrataMQ's data only in the bucket | $(scell 5b smq) | n/a | | | |"
echo
echo "Errors (all rounds): StrataMQ rows 1/2/2a/3/4/4b: $(errs 1 smq)/$(errs 2 smq)/$(errs 2a smq)/$(errs 3 smq)/$(errs 4 smq)/$(errs 4b smq); klite rows 1/2/3/4: $(errs 1 klite)/$(errs 2 klite)/$(errs 3 klite)/$(errs 4 klite) (-1: the tool printed no result). MB = 10^6 bytes of payload. Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
