#!/usr/bin/env bash
# Takeover time in a region of three origins on SeaweedFS: for CYCLES
# cycles, kill -9 the partition's owner and delete its data directory, then
# time from the kill to the first acknowledged append (sent through the
# survivors in turn, retried while they answer 503), and bring the killed
# origin back empty. At the end the stream must hold every acknowledged
# append exactly once, in order. Prints each cycle and p50/p99/max.
#
#   loadtest/takeover-bench.sh [CYCLES] [ORIGIN FLAGS...]
#       (default 20 cycles and the default lease; needs `weed` on PATH and
#        a release build)
#   HISTORY_SECONDS=N: first, N seconds of ds-load (HISTORY_STREAMS
#       streams, default 500, one closed-loop writer each, HISTORY_BODY
#       bytes, default 256) against the owner, so each claim has that much
#       history behind it (checkpoints decide what it replays).
set -euo pipefail
cd "$(dirname "$0")/.."
cycles=${1:-20}
shift || true
bin=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
declare -A pid addr
trap 'for n in a b c; do kill -9 ${pid[$n]:-} 2>/dev/null || true; done; kill -9 ${wpid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
. loadtest/bucket.sh
bucket_start

start() {
  local n=$1 log="$work/$1.log"
  : >"$log"
  "$bin/origin" --listen 127.0.0.1:0 --data "$work/data-$n" --object-store s3://bench/takeover \
    --durability object --node-id "$n" "${@:2}" >"$log" 2>&1 &
  pid[$n]=$!
  addr[$n]=""
  for _ in $(seq 1 300); do
    addr[$n]=$(grep -Eo 'addr=[0-9.:]+' "$log" | head -1 | cut -d= -f2 || true)
    [ -n "${addr[$n]}" ] && curl -sf "http://${addr[$n]}/healthz" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "origin $n did not start"; cat "$log"; exit 1
}
serving() { curl -s --max-time 1 "http://$1/metrics" | awk '$1 == "ds_origin_region_serving" {print $2}'; }
owner() {
  for _ in $(seq 1 600); do
    for n in a b c; do
      [ "$(serving "${addr[$n]}")" = 1 ] && { echo "$n"; return 0; }
    done
    sleep 0.05
  done
  echo "no owner" >&2; exit 1
}
# append SEQ: through the origins other than $skip in turn until acknowledged.
append() {
  local seq=$1 i=0 code
  while :; do
    for n in a b c; do
      [ "$n" = "$skip" ] && continue
      code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X POST \
        -H 'content-type: application/octet-stream' -H 'producer-id: bench' \
        -H 'producer-epoch: 0' -H "producer-seq: $seq" --data-binary "[$seq]" \
        "http://${addr[$n]}/v1/stream/moved" || true)
      case $code in 200|204) return 0 ;; esac
      i=$((i + 1))
      [ $i -lt 3000 ] || { echo "append $seq never landed (last $code)"; exit 1; }
      sleep 0.01
    done
  done
}

for n in a b c; do start $n "$@"; done
# The stream, created once the region settled (origins that start together
# may claim in turn before one keeps the partition).
for _ in $(seq 1 300); do
  first=$(owner)
  code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H 'content-type: application/octet-stream' \
    "http://${addr[$first]}/v1/stream/moved" || true)
  case $code in 201|200|204) break ;; esac
  sleep 0.1
done
first=$(owner)
if [ "${HISTORY_SECONDS:-0}" -gt 0 ]; then
  "$bin/ds-load" append --addr "${addr[$first]}" --streams "${HISTORY_STREAMS:-500}" --body "${HISTORY_BODY:-256}" \
    --seconds "$HISTORY_SECONDS" --warmup 0 --create --label history
  curl -s "http://${addr[$first]}/metrics" |
    awk '$1 ~ /^ds_origin_object_wal_(puts|bytes)_total$|^ds_origin_region_checkpoint(s_total|_number|_bytes)$/ {print "  history: " $1 " " $2}'
fi
skip=""
seq=0
append $seq
times=()
for c in $(seq 1 "$cycles"); do
  o=$(owner)
  killed=$(date +%s%N)
  kill -9 "${pid[$o]}"
  wait "${pid[$o]}" 2>/dev/null || true
  rm -rf "$work/data-$o"
  skip=$o
  seq=$((seq + 1))
  append $seq
  ms=$(( ($(date +%s%N) - killed) / 1000000 ))
  times+=("$ms")
  echo "cycle $c: killed $o, first acknowledged append after $ms ms (new owner $(owner))"
  start "$o" "$@"
  skip=""
done
want=$(for i in $(seq 0 $seq); do printf '[%d]' "$i"; done)
got=$(curl -s "http://${addr[a]}/v1/stream/moved?offset=-1")
[ "$got" = "$want" ] || { echo "the stream is not every acknowledged append once, in order"; echo "got:  $got"; echo "want: $want"; exit 1; }
printf '%s\n' "${times[@]}" | sort -n | awk '{t[NR]=$1} END {
  p50=t[int((NR+1)*0.50)]; i=int(NR*0.99+0.999); if (i<1) i=1; if (i>NR) i=NR;
  printf "takeovers: %d; kill -9 to first acknowledged append: p50 %d ms, p99 %d ms, max %d ms\n", NR, p50, t[i], t[NR] }'
echo "appends acknowledged: $((seq + 1)), all present once and in order"
