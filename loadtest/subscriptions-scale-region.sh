#!/usr/bin/env bash
# Subscriptions at scale in a region (the region half of the scale test): `ds-load
# subscriptions-scale` against an origin in object durability on SeaweedFS,
# serving a region of six partitions alone, so the engine runs as in any
# region (its journal a hidden stream in the bucket, the catalog over every
# partition, each declaration settled against the replicas' ends). One
# fresh region per link count.
#
#   loadtest/subscriptions-scale-region.sh [SUBSCRIPTIONS] [LINKS]
#                      (defaults 100000 and 1,10; `weed` on PATH, release build)
set -euo pipefail
cd "$(dirname "$0")/.."
subs=${1:-100000}
links=${2:-1,10}
bin=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
trap 'kill -9 ${wpid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
. loadtest/bucket.sh
bucket_start
"$bin/ds-load" subscriptions-scale --origin "$bin/origin" --subscriptions "$subs" --links "$links" \
  --origin-arg=--object-store --origin-arg='s3://bench/scale-{run}' \
  --origin-arg=--durability --origin-arg=object --origin-arg=--node-id --origin-arg=scale \
  --origin-arg=--region-partitions --origin-arg=6
