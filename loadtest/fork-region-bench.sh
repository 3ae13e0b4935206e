#!/usr/bin/env bash
# Forks within and across partitions (decision 0016): a region of three
# origins with six partitions on SeaweedFS, an edge given all three, and
# `ds-load fork-region` through the edge (sources of 1 KiB, 1 MiB and
# 16 MiB; forks of each kind interleaved).
#
#   loadtest/fork-region-bench.sh [FORKS]   (default 40; needs `weed` on
#                                            PATH and a release build)
forks=${1:-40}
source "$(dirname "$0")/six-partitions.sh" forks
"$bin/edge" --listen 127.0.0.1:0 --origin "http://${addrs[0]},http://${addrs[1]},http://${addrs[2]}" \
  --cache 256MiB >"$work/edge.log" 2>&1 &
pids+=($!)
e=$(addr_of "$work/edge.log")
"$bin/ds-load" fork-region --addr "$e" --partitions 6 --forks "$forks"
across=0
for a in "${addrs[@]}"; do across=$((across + $(metric "$a" ds_origin_region_forks_across_total))); done
echo "forks made across partitions (the origins' count): $across"
