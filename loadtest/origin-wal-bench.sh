#!/usr/bin/env bash
# One WAL per origin against a WAL per partition, at the WAL itself
# (decision 0028; `ds-load wal-batching`): 500 closed-loop writers of 256 B
# appends spread over 1, 6 and 64 partitions, on SeaweedFS (loopback), at
# the default 10 ms commit delay. Prints appends/s, p50/p99, appends per put
# and the puts' cost per million appends on S3 Standard for each.
#
#   loadtest/origin-wal-bench.sh [SECONDS] [PARTITIONS]
#                                (defaults 10 and 1,6,64; needs `weed` on
#                                 PATH and a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
partitions=${2:-1,6,64}
bin=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
trap 'kill -9 ${wpid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
. loadtest/bucket.sh
bucket_start
"$bin/ds-load" wal-batching --object-store s3://bench/origin-wal --partitions "$partitions" \
  --writers 500 --body 256 --seconds "$seconds" --warmup 2
