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
seconds=${1:-10}
source "$(dirname "$0")/six-partitions.sh" routing

forwarded() {
  local sum=0
  for a in "${addrs[@]}"; do sum=$((sum + $(metric "$a" ds_origin_region_forwarded_total))); done
  echo $sum
}

# through_edge LABEL ORIGINS
through_edge() {
  "$bin/edge" --listen 127.0.0.1:0 --origin "$2" --cache 256MiB >"$work/edge-$1.log" 2>&1 &
  epid=$!
  pids+=("$epid")
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
