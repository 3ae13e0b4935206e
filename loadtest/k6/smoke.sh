#!/usr/bin/env bash
# Runs every k6 script for a few seconds against BASE_URL (default: a running
# origin on 127.0.0.1:4437). A smoke test that the scripts work, not a
# benchmark: on a 2-core machine k6 mostly measures itself.
set -euo pipefail
cd "$(dirname "$0")"
base=${1:-http://127.0.0.1:4437}
for script in append.js catchup.js longpoll.js mixed.js; do
  echo "== k6 smoke: $script"
  BASE_URL="$base" DURATION=2s STREAMS=5 READERS=3 TAILERS=3 WRITERS=3 FILL_MIB=2 RATE=5 \
    k6 run --quiet --no-usage-report "$script"
done
