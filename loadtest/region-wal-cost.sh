#!/usr/bin/env bash
# What a region's appends cost in PUTs, through the server: one origin in
# object durability on SeaweedFS serving 1, 6 and 64 partitions, with a
# WAL per partition (`--region-wal partition`) and with one WAL per origin
# (`--region-wal origin`, decision 0028), each loaded by the same 500
# closed-loop writers (one stream each, 256 B appends) at the default
# commit delay. Prints ds-load's line and the origin's appends per put
# (log commands over WAL puts, creates and warm-up included) for each; the
# dollars per million appends are $5 (S3 Standard's price of a million
# PUTs) over appends per put.
#
#   loadtest/region-wal-cost.sh [SECONDS] [PUT_DELAY]
#       (default 10 s and no delay; needs `weed` on PATH and a release build)
#   PARTITIONS="1 64" LAYOUTS=origin ORIGIN_ARGS="--commit-delay 1ms" loadtest/region-wal-cost.sh
#       (a subset of the rows, with extra flags for the origin)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
delay=${2:-0ms}
bin=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
trap 'kill ${opid:-} 2>/dev/null || true; kill -9 ${wpid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
. loadtest/bucket.sh
bucket_start

for partitions in ${PARTITIONS:-1 6 64}; do
  for layout in ${LAYOUTS:-partition origin}; do
    label="p${partitions}-${layout}"
    log="$work/$label.log"
    "$bin/origin" --listen 127.0.0.1:0 --data "$work/$label" --object-store "s3://bench/$label" \
      --durability object --node-id solo --region-partitions "$partitions" --region-wal "$layout" \
      --object-put-delay "$delay" ${ORIGIN_ARGS:-} >"$log" 2>&1 &
    opid=$!
    addr=""
    for _ in $(seq 1 600); do
      addr=$(grep -Eo 'addr=[0-9.:]+' "$log" | head -1 | cut -d= -f2 || true)
      [ -n "$addr" ] && [ "$(metric "$addr" ds_origin_region_serving)" = "$partitions" ] && break
      sleep 0.1
    done
    [ "$(metric "$addr" ds_origin_region_serving)" = "$partitions" ] || { cat "$log"; exit 1; }
    "$bin/ds-load" append --addr "$addr" --streams 500 --body 256 --seconds "$seconds" --warmup 2 \
      --create --label "$label"
    puts=$(metric "$addr" ds_origin_object_wal_puts_total)
    commands=$(metric "$addr" ds_origin_wal_commands_total)
    awk -v l="$label" -v p="${puts:-0}" -v c="${commands:-0}" 'BEGIN {
      per = (p > 0) ? c / p : 0
      printf "  %s: %d puts, %d log commands: %.1f appends per put, $%.3f per million appends (S3 Standard PUTs)\n", l, p, c, per, (per > 0) ? 5 / per : 0 }'
    kill -TERM $opid
    wait $opid || true
    opid=""
  done
done
