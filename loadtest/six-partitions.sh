# Sourced by the region benchmarks (not run alone): starts SeaweedFS and a
# region of three origins with six partitions on it (release build, `weed`
# on PATH), two partitions each once settled. Sets `work` (a temporary
# folder, removed at exit with everything started), `bin`, `addrs` (the
# three origins' addresses), `pids` (append what else you start) and the
# helpers `metric ADDR NAME` and `addr_of LOG`. The bucket's prefix is
# `$1`; more origin flags may come in `REGION_ORIGIN_ARGS`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
pids=()
trap 'kill ${pids[*]:-} 2>/dev/null || true; wait ${pids[*]:-} 2>/dev/null || true; kill -9 ${wpid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
. loadtest/bucket.sh
bucket_start
addr_of() {
  for _ in $(seq 1 300); do
    a=$(grep -Eo 'addr=[0-9.:]+' "$1" | head -1 | cut -d= -f2 || true)
    [ -n "$a" ] && { echo "$a"; return; }
    sleep 0.1
  done
}

addrs=()
for n in a b c; do
  "$bin/origin" --listen 127.0.0.1:0 --data "$work/$n" --object-store "s3://bench/$1" \
    --durability object --node-id "$n" --region-partitions 6 ${REGION_ORIGIN_ARGS:-} >"$work/$n.log" 2>&1 &
  pids+=($!)
  addrs+=("$(addr_of "$work/$n.log")")
done
for _ in $(seq 1 600); do
  settled=1
  for a in "${addrs[@]}"; do
    [ "$(metric "$a" ds_origin_region_serving)" = 2 ] && [ "$(metric "$a" ds_origin_region_following)" = 4 ] || settled=0
  done
  [ $settled = 1 ] && break
  sleep 0.1
done
[ $settled = 1 ] || { echo "the partitions did not settle"; exit 1; }
