#!/usr/bin/env bash
# An edge in front of a region of three origins with six partitions, two
# each: the same load (500 streams, one closed-loop writer each, 256 B
# appends, through the edge) with the edge given all three origins (it
# learns the partition map from answers and sends each stream's requests to
# its partition's owner) and given one (every request for the four
# partitions it does not serve is forwarded by it to their owners: a hop
# more). Prints ds-load's line for each and how many requests the origins
# forwarded.
#
#   loadtest/partition-routing-bench.sh [SECONDS]   (default 10; needs `weed`
#                                                    on PATH and a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
bin=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
pids=()
trap 'kill ${pids[*]:-} ${epid:-} 2>/dev/null || true; kill -9 ${wpid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
read -r endpoint wpid < <(scripts/weed-mini "$work/weed" bench | paste -sd' ')
export AWS_ENDPOINT_URL="$endpoint" AWS_ACCESS_KEY_ID=any AWS_SECRET_ACCESS_KEY=any \
  AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true

metric() { curl -s "http://$1/metrics" | awk -v n="$2" '$1 == n {print $2}'; }
addr_of() {
  for _ in $(seq 1 300); do
    a=$(grep -Eo 'addr=[0-9.:]+' "$1" | head -1 | cut -d= -f2 || true)
    [ -n "$a" ] && { echo "$a"; return; }
    sleep 0.1
  done
}

addrs=()
for n in a b c; do
  "$bin/origin" --listen 127.0.0.1:0 --data "$work/$n" --object-store s3://bench/routing \
    --durability object --node-id "$n" --region-partitions 6 >"$work/$n.log" 2>&1 &
  pids+=($!)
  addrs+=("$(addr_of "$work/$n.log")")
done
for _ in $(seq 1 600); do
  settled=1
  for a in "${addrs[@]}"; do
    [ "$(metric "$a" ds_region_serving)" = 2 ] && [ "$(metric "$a" ds_region_following)" = 4 ] || settled=0
  done
  [ $settled = 1 ] && break
  sleep 0.1
done
[ $settled = 1 ] || { echo "the partitions did not settle"; exit 1; }

forwarded() {
  local sum=0
  for a in "${addrs[@]}"; do sum=$((sum + $(metric "$a" ds_region_forwarded_total))); done
  echo $sum
}

# through_edge LABEL ORIGINS
through_edge() {
  "$bin/edge" --listen 127.0.0.1:0 --origin "$2" --cache 256MiB >"$work/edge-$1.log" 2>&1 &
  epid=$!
  local e
  e=$(addr_of "$work/edge-$1.log")
  local before
  before=$(forwarded)
  "$bin/ds-load" append --addr "$e" --streams 500 --body 256 --seconds "$seconds" --warmup 2 \
    --create --label "$1"
  echo "  $1: requests forwarded between origins: $(( $(forwarded) - before ))"
  kill -TERM $epid
  wait $epid || true
  epid=""
}

through_edge edge-all-origins "http://${addrs[0]},http://${addrs[1]},http://${addrs[2]}"
through_edge edge-one-origin "http://${addrs[0]}"
