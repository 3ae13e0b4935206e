#!/usr/bin/env bash
# Follower reads (decision 0018), measured by ds-load in one run: a region
# of two origins on SeaweedFS, one stream prefilled through the owner, then
# closed-loop catch-up readers against the owner, against the follower
# (answered from its replica), and against the follower restarted with
# --region-replicas false (every read forwarded to the owner). Prints
# ds-load's line for each and the follower's local and forwarded counts.
#
#   loadtest/follower-bench.sh [SECONDS] [READERS] [MIB]   (default 10 32 4;
#                                   needs `weed` on PATH and a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
readers=${2:-32}
mib=${3:-4}
bin=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
trap 'kill ${apid:-} ${bpid:-} 2>/dev/null || true; kill -9 ${wpid:-} 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
. loadtest/bucket.sh
bucket_start

# start NAME ROLE ARGS...: an origin of the region; sets $addr once it has ROLE.
start() {
  local name=$1 role=$2
  shift 2
  "$bin/origin" --listen 127.0.0.1:0 --data "$work/$name" --object-store s3://bench/followers \
    --durability object --node-id "$name" "$@" >"$work/$name.log" 2>&1 &
  pid=$!
  addr=""
  for _ in $(seq 1 600); do
    addr=$(grep -Eo 'addr=[0-9.:]+' "$work/$name.log" | head -1 | cut -d= -f2 || true)
    [ -n "$addr" ] && [ "$(metric "$addr" "ds_origin_region_$role")" = 1 ] && return 0
    sleep 0.05
  done
  cat "$work/$name.log"
  echo "origin $name never was $role"
  exit 1
}

start a serving
apid=$pid owner=$addr
start b following
bpid=$pid follower=$addr
path=/v1/stream/followed
"$bin/ds-load" catch-up --addr "$owner" --prefill "$owner" --path "$path" --mib "$mib"
# Until the follower's replica holds it all (a read answered there whole).
want=$((mib << 20))
for _ in $(seq 1 600); do
  before=$(metric "$follower" ds_origin_region_local_reads_total)
  got=$(curl -s "http://$follower$path?offset=-1" | wc -c)
  after=$(metric "$follower" ds_origin_region_local_reads_total)
  [ "$got" = "$want" ] && [ "$after" -gt "$before" ] && break
  sleep 0.1
done
[ "$got" = "$want" ] || { echo "the follower's replica never caught up"; exit 1; }

load() {
  "$bin/ds-load" catch-up --addr "$1" --path "$path" --mib "$mib" --readers "$readers" \
    --seconds "$seconds" --label "$2"
}
load "$owner" "owner"
local0=$(metric "$follower" ds_origin_region_local_reads_total)
fwd0=$(metric "$follower" ds_origin_region_forwarded_total)
load "$follower" "follower, from its replica"
echo "  the follower answered $(( $(metric "$follower" ds_origin_region_local_reads_total) - local0 )) reads itself and forwarded $(( $(metric "$follower" ds_origin_region_forwarded_total) - fwd0 ))"
kill -TERM $bpid
wait $bpid || true
start b following --region-replicas false
bpid=$pid follower=$addr
fwd0=$(metric "$follower" ds_origin_region_forwarded_total)
load "$follower" "follower, forwarded (--region-replicas false)"
echo "  the follower forwarded $(( $(metric "$follower" ds_origin_region_forwarded_total) - fwd0 )) reads"
