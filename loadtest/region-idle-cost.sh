#!/usr/bin/env bash
# What an idle region asks of its bucket: three origins with one WAL per
# origin (`--region-wal origin`) on SeaweedFS at PARTITIONS partitions,
# nothing written, every bucket request counted by `ds-load bucket-proxy`
# in front of SeaweedFS. After the partitions settled and a warm-up, the
# requests of SECONDS seconds are summed by kind and printed per second,
# with what S3 Standard would bill for them a day ($0.005 per thousand
# PUTs and LISTs, $0.0004 per thousand GETs and HEADs).
#
#   loadtest/region-idle-cost.sh [SECONDS] [PARTITIONS...]
#       (default 20 s, partitions 8 and 64; ORIGIN_BIN picks another origin
#       binary, e.g. an older build to compare; needs `weed` on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
shift || true
counts=${*:-8 64}
bin=${CARGO_TARGET_DIR:-target}/release
origin_bin=${ORIGIN_BIN:-$bin/origin}
work=$(mktemp -d)
pids=()
trap 'kill ${pids[@]:-} 2>/dev/null || true; kill -9 ${wpid:-} 2>/dev/null || true; [ -n "${KEEP_LOGS:-}" ] && cp "$work"/*.log "$KEEP_LOGS"/; rm -rf "$work"' EXIT
. loadtest/bucket.sh
bucket_start
"$bin/ds-load" bucket-proxy --to "$AWS_ENDPOINT_URL" --report-every 1 >"$work/proxy.log" &
pids+=($!)
for _ in $(seq 1 100); do grep -q listening "$work/proxy.log" && break; sleep 0.1; done
export AWS_ENDPOINT_URL="http://$(grep -Eo '[0-9.]+:[0-9]+' "$work/proxy.log" | head -1)"

for partitions in $counts; do
  addrs=()
  for n in a b c; do
    log="$work/p$partitions-$n.log"
    "$origin_bin" --listen 127.0.0.1:0 --data "$work/p$partitions-$n" \
      --object-store "s3://bench/idle-p$partitions" --durability object --node-id "$n" \
      --region-partitions "$partitions" --region-wal origin \
      >"$log" 2>&1 &
    pids+=($!)
  done
  for n in a b c; do
    log="$work/p$partitions-$n.log"
    addr=""
    for _ in $(seq 1 300); do
      addr=$(grep -Eo 'addr=[0-9.:]+' "$log" | head -1 | cut -d= -f2 || true)
      [ -n "$addr" ] && break
      sleep 0.1
    done
    [ -n "$addr" ] || { cat "$log"; exit 1; }
    addrs+=("$addr")
  done
  # Settled: every partition served, none by more than its share.
  share=$(( (partitions + 2) / 3 ))
  for _ in $(seq 1 3000); do
    total=0; most=0
    for a in "${addrs[@]}"; do
      s=$(metric "$a" ds_origin_region_serving); s=${s:-0}
      total=$((total + s)); [ "$s" -gt "$most" ] && most=$s
    done
    [ "$total" = "$partitions" ] && [ "$most" -le "$share" ] && break
    sleep 0.1
  done
  [ "$total" = "$partitions" ] || { echo "p$partitions did not settle ($total served)"; exit 1; }
  sleep 15 # warm-up: replicas laid out, first checkpoints built
  from=$(wc -l <"$work/proxy.log")
  sleep "$seconds"
  tail -n +"$((from + 1))" "$work/proxy.log" | head -n "$seconds" | python3 -c '
import json, sys
seconds, partitions = int(sys.argv[1]), sys.argv[2]
total = {}
for line in sys.stdin:
    for k, v in json.loads(line).items():
        total[k] = total.get(k, 0) + v
dollars = 0.0
for k in sorted(total):
    per = total[k] / seconds
    price = 0.005 if k.split()[0] in ("PUT", "LIST", "POST", "DELETE") else 0.0004
    if k.split()[0] == "DELETE": price = 0
    dollars += per * 86400 * price / 1000
    print(f"  p{partitions} {k}: {per:.1f}/s")
print(f"p{partitions}: {sum(total.values()) / seconds:.1f} requests/s, ${dollars:.2f} a day on S3 Standard")
' "$seconds" "$partitions"
  for p in "${pids[@]:1}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]:1}"; do wait "$p" 2>/dev/null || true; done
  pids=("${pids[0]}")
done
