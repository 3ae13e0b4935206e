#!/usr/bin/env bash
# Instructions per append, counted exactly: an origin binary under
# callgrind, closed-loop writers with producer headers, counters zeroed
# after a warm-up and dumped at the end of the measured window; the
# instructions of the whole process over the appends the load answered in
# that window. Deterministic to within a few instructions per append from
# one run to the next, where the A/B of appends/s is noisy by several
# percent on this machine (decision 0021, "Counted by instructions").
#
# usage: loadtest/append-instructions.sh ORIGIN_BINARY [SECONDS] [STREAMS]
# needs: valgrind (callgrind_control), a release ds-load in target/release.
set -euo pipefail
bin=$(realpath "$1")
secs=${2:-20}
streams=${3:-50}
# PLAIN=1: appends without producer headers.
producer=--producer
[ -n "${PLAIN:-}" ] && producer=
here=$(cd "$(dirname "$0")/.." && pwd)
load="$here/target/release/ds-load"
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
trap 'kill -KILL $vp 2>/dev/null || true; [ -n "${KEEP:-}" ] && cp "$work"/cg.out.1 "$KEEP" ; rm -rf "$work"' EXIT

valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
    "$bin" --listen "127.0.0.1:$port" --data "$work/data" >"$work/origin.log" 2>&1 &
vp=$!
for _ in $(seq 1 300); do
    curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break
    sleep 0.2
done
"$load" append --addr "127.0.0.1:$port" --streams "$streams" $producer --create \
    --seconds 5 --warmup 0 >/dev/null
callgrind_control -z "$vp" >/dev/null 2>&1
"$load" append --addr "127.0.0.1:$port" --streams "$streams" $producer \
    --seconds "$secs" --warmup 0 >"$work/load.txt"
callgrind_control -d "$vp" >/dev/null 2>&1
kill -TERM "$vp"
wait "$vp" || true
appends=$(grep -Eo '\(([0-9]+) requests' "$work/load.txt" | grep -Eo '[0-9]+')
# The dump after zeroing is the second file (cg.out.1); sum every thread's.
ir=0
for f in "$work"/cg.out.*; do
    [ -f "$f" ] || continue
    n=$(grep -E '^(summary|totals):' "$f" | head -1 | awk '{print $2}')
    ir=$((ir + n))
done
echo "$(basename "$bin"): appends=$appends instructions=$ir per_append=$((ir / appends))"
