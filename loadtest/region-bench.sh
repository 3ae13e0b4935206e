#!/usr/bin/env bash
# Object durability against sync, measured by ds-load in one run: 500
# streams with one closed-loop writer each, 256 B appends, against an origin
# in --durability sync, then in --durability object on SeaweedFS (loopback,
# ~2 ms puts) and with 10 ms and 50 ms waits before each put (S3
# Express-like, S3 Standard-like). Prints ds-load's line for each and the
# origin's WAL puts per second and per append (the PUT bill). Last, a region
# of two: the same load against the owner and through the follower (every
# append forwarded), for the cost of the extra hop. Also one origin serving
# six partitions (six WALs), for what per-partition WALs cost in puts.
#
#   loadtest/region-bench.sh [SECONDS]     (default 10; needs `weed` on PATH
#                                           and a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
bin=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
trap 'kill ${opid:-} 2>/dev/null || true; kill -9 ${wpid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
. loadtest/bucket.sh
bucket_start

# start_origin LABEL ARGS...: starts an origin, sets $addr and $opid once
# it is ready (sync: listening; a region origin: owning or following).
start_origin() {
  local label=$1
  shift
  local data="$work/data-$label" log="$work/$label.log"
  "$bin/origin" --listen 127.0.0.1:0 --data "$data" "$@" >"$log" 2>&1 &
  opid=$!
  addr=""
  for _ in $(seq 1 300); do
    addr=$(grep -Eo 'addr=[0-9.:]+' "$log" | head -1 | cut -d= -f2 || true)
    [ -n "$addr" ] && curl -sf "http://$addr/metrics" 2>/dev/null |
      awk '$1 ~ /^ds_origin_region_(serving|following)$/ {seen=1; held+=$2} $1 == "ds_origin_region_partitions" {p=$2}
           END {exit !(!seen || (p > 0 && held == p))}' && break
    sleep 0.1
  done
}

load() {
  local label=$1
  "$bin/ds-load" append --addr "$addr" --streams 500 --body 256 --seconds "$seconds" --warmup 2 \
    --create --label "$label" | tee "$work/$label.out"
}

run() {
  local label=$1
  shift
  start_origin "$label" "$@"
  load "$label"
  puts=$(metric "$addr" ds_origin_object_wal_puts_total)
  commands=$(metric "$addr" ds_origin_wal_commands_total)
  echo "  $label: WAL puts ${puts:-0}, log commands ${commands:-0} (creates and appends, warm-up included)"
  kill -TERM $opid
  wait $opid || true
}

# Through a follower: a second origin of the region forwards every request
# to the owner (one more loopback hop), against the owner itself.
follower_runs() {
  start_origin owner --object-store s3://bench/follow --durability object --node-id owner
  local owner_pid=$opid owner_addr=$addr
  start_origin follower --object-store s3://bench/follow --durability object --node-id follower
  local follower_pid=$opid follower_addr=$addr
  addr=$owner_addr
  load object-owner
  addr=$follower_addr
  load object-via-follower
  echo "  forwarded by the follower: $(metric "$follower_addr" ds_origin_region_forwarded_total)"
  kill -TERM "$follower_pid" "$owner_pid"
  wait "$follower_pid" "$owner_pid" || true
  opid=""
}

run sync --durability sync
run object --object-store s3://bench/object --durability object
run object-10ms --object-store s3://bench/object-10 --durability object --object-put-delay 10ms
run object-50ms --object-store s3://bench/object-50 --durability object --object-put-delay 50ms
# One origin serving six partitions: a WAL (and a group commit) each, so
# the same load makes more, smaller puts (the cost of per-partition WALs).
run object-6-partitions --object-store s3://bench/object-6 --durability object --region-partitions 6
follower_runs
