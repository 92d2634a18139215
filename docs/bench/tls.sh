#!/usr/bin/env bash
# What TLS and the ACL cost the send path: in one run, on this
# machine, `stratamq bench produce` against
#   plain  `stratamq serve` (STRATAMQ_TLS_MODE unset: plain TCP), and
#   acl    `stratamq serve` with STRATAMQ_ACL_FILE (every request signed and
#          checked: HMAC-SHA1 over the fields and the body, the account's
#          topic permissions), and `bench produce --access-key --secret-key`,
#   tls    `stratamq serve` with STRATAMQ_TLS_MODE=enforcing (name server
#          and broker ports TLS only; the broker registers over TLS too),
#          and `bench produce --tls`,
#   acltls both,
# real binaries, loopback, fresh temp data dirs, a throwaway ECDSA P-256
# certificate from openssl. Rounds alternate the setups; prints every run,
# then the medians side by side.
#
#   docs/bench/tls.sh                      # 3 rounds of each case
#   ROUNDS=5 CASES="4x16" docs/bench/tls.sh
#   STRATAMQ_BIN=/path/to/stratamq docs/bench/tls.sh   # a prebuilt binary
#
# Cases (connections x requests in flight per connection, 1 KiB single
# sends unless BATCH): 1x1 (one send at a time: 20 k), 1x64 and 4x16
# (64 in flight, 100 k). SIZE, BATCH, MSGS_1x1 and MSGS (the others)
# override.
set -euo pipefail
ROUNDS=${ROUNDS:-3}
CASES=${CASES:-"1x1 1x64 4x16"}
SETUPS=${SETUPS:-"plain acl tls acltls"}
SIZE=${SIZE:-1024}
BATCH=${BATCH:-1}
NS_PORT=${NS_PORT:-18876}
BROKER_PORT=${BROKER_PORT:-18911}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/stratamq-tls.XXXXXX")
PIDS=()
say() { echo "tls: $*" >&2; }
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

if [[ -n ${STRATAMQ_BIN:-} ]]; then # a prebuilt binary (another revision, for before/after)
	BIN=$STRATAMQ_BIN
else
	say "building"
	(cd "$ROOT" && go build -o "$WORK/stratamq" ./cmd/stratamq)
	BIN=$WORK/stratamq
fi

say "ACL file"
# An admin (bench creates its topics) held to the topics it lists, so the
# sends pay for the resource check as well as the signature.
cat >"$WORK/plain_acl.yml" <<'ACL'
accounts:
  - accessKey: bench-admin
    secretKey: bench-admin-secret
    admin: true
    topicPerms:
      - Warm=PUB|SUB
      - Tls=PUB|SUB
ACL

say "certificates"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=127.0.0.1 \
	-addext "subjectAltName=IP:127.0.0.1" -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>>"$WORK/log"

wait_port() {
	for _ in $(seq 300); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	say "nothing listens on 127.0.0.1:$1 (log: $WORK/log)"
	return 1
}

# setup_env and bench_args give each setup's serve environment and bench flags.
TLS_ENV="STRATAMQ_TLS_CERT=$WORK/cert.pem STRATAMQ_TLS_KEY=$WORK/key.pem STRATAMQ_TLS_MODE=enforcing STRATAMQ_TLS_CA=$WORK/cert.pem"
ACL_ENV="STRATAMQ_ACL_FILE=$WORK/plain_acl.yml"
setup_env() {
	case $1 in
	tls) echo "$TLS_ENV" ;;
	acl) echo "$ACL_ENV" ;;
	acltls) echo "$TLS_ENV $ACL_ENV" ;;
	*) echo "" ;;
	esac
}
TLS_ARGS="--tls --tls-ca $WORK/cert.pem"
ACL_ARGS="--access-key bench-admin --secret-key bench-admin-secret"
bench_args() {
	case $1 in
	tls) echo "$TLS_ARGS" ;;
	acl) echo "$ACL_ARGS" ;;
	acltls) echo "$TLS_ARGS $ACL_ARGS" ;;
	*) echo "" ;;
	esac
}

run_case() { # setup case -> "msgs/s p50 p99 p999 errors"
	local conns=${2%x*} inflight=${2#*x} msgs
	case $2 in
	1x1) msgs=${MSGS_1x1:-20000} ;;
	*) msgs=${MSGS:-100000} ;;
	esac
	local d=$WORK/d-$RANDOM
	# shellcheck disable=SC2046
	env $(setup_env "$1") "$BIN" serve --data-dir "$d" --namesrv-listen "127.0.0.1:$NS_PORT" --listen "127.0.0.1:$BROKER_PORT" \
		--http-listen "" --log-level "${LOG_LEVEL:-warn}" >>"$WORK/log" 2>&1 &
	PIDS+=($!)
	wait_port "$BROKER_PORT"
	wait_port "$NS_PORT"
	# shellcheck disable=SC2046
	local common=(--namesrv "127.0.0.1:$NS_PORT" --broker "127.0.0.1:$BROKER_PORT" --size "$SIZE" --progress 0 --batch "$BATCH" $(bench_args "$1"))
	"$BIN" bench produce "${common[@]}" --topic Warm --messages 2000 --conns 1 --inflight 16 >/dev/null 2>>"$WORK/log"
	"$BIN" bench produce "${common[@]}" --topic Tls --messages "$msgs" --conns "$conns" --inflight "$inflight" 2>>"$WORK/log" |
		tail -1 | jq -r '"\(.msgs_per_sec|floor) \(.p50_ms) \(.p99_ms) \(.p999_ms) \(.errors)"'
	stop_all
}

median() { sort -g | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }

say "$(nproc) cores, ${SIZE} B messages, batch $BATCH, $ROUNDS rounds; log in $WORK/log"
for c in $CASES; do
	for setup in $SETUPS; do : >"$WORK/$c.$setup"; done
	for r in $(seq "$ROUNDS"); do
		for setup in $SETUPS; do
			run_case "$setup" "$c" >"$WORK/run" # the broker must be gone before the next run
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
	for setup in $SETUPS; do
		f=$WORK/$c.$setup
		echo "| $c | $setup | $(col "$f" 1) | $(col "$f" 2) | $(col "$f" 3) | $(col "$f" 4) | $(cut -d' ' -f5 "$f" | paste -sd+ | bc) |"
	done
done
