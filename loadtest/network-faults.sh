#!/usr/bin/env bash
# Takeover time under each network fault, over RUNS runs (default 10):
# runs origin/tests/region/network.rs's scenarios one at a time and reads
# what each printed. Needs root, ip, iptables and SeaweedFS (scripts/setup).
#   loadtest/network-faults.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
export PATH="${DS_TOOLS_DIR:-$HOME/.cache/ds-tools}/bin:$PATH"
cargo test -q -p origin --test region --no-run 2>/dev/null
out=$(mktemp)
for t in the_owner_cut_from_the_bucket the_owners_packets_to_the_bucket the_buckets_answers_to_the_owner the_owner_cut_from_its_peers a_bucket_that_answers; do
  for _ in $(seq "$runs"); do
    cargo test -q -p origin --test region "network::$t" -- --nocapture 2>&1 | grep -E '^(BucketCut|BucketOutbound|BucketInbound|PeersCut|SlowBucket):' >>"$out" || echo "FAILED $t" >>"$out"
  done
done
python3 - "$out" <<'PY'
import re, sys, statistics
rows = {}
failed = 0
for line in open(sys.argv[1]):
    if line.startswith("FAILED"):
        failed += 1
        continue
    fault = line.split(":")[0]
    r = rows.setdefault(fault, {"takeover": [], "settled": [], "acked": 0, "lost": 0, "dup": 0, "runs": 0})
    r["runs"] += 1
    m = re.search(r"taken over in Some\(([\d.]+)(ms|s)\)", line)
    if m:
        r["takeover"].append(float(m.group(1)) / (1000 if m.group(2) == "ms" else 1))
    m = re.search(r"one owner again \(\w\) ([\d.]+)(ms|s|µs)", line)
    if m:
        scale = {"ms": 1000, "s": 1, "µs": 1e6}[m.group(2)]
        r["settled"].append(float(m.group(1)) / scale)
    m = re.search(r"(\d+) acknowledged in all, lost (\d+), duplicated (\d+)", line)
    r["acked"] += int(m.group(1)); r["lost"] += int(m.group(2)); r["dup"] += int(m.group(3))
def pct(v, p):
    if not v: return "-"
    v = sorted(v); return f"{v[min(len(v)-1, int(round(p*(len(v)-1))))]:.2f} s"
print("| fault | runs | takeover p50 | takeover p99 | one owner after the heal, p50 | acknowledged | lost | duplicated |")
print("|---|---|---|---|---|---|---|---|")
for f, r in rows.items():
    print(f"| {f} | {r['runs']} | {pct(r['takeover'], .5)} | {pct(r['takeover'], .99)} | {pct(r['settled'], .5)} | {r['acked']:,} | {r['lost']} | {r['dup']} |")
print(f"failed runs: {failed}")
PY
