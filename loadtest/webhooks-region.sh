#!/usr/bin/env bash
# Webhook delivery in a region (decision 0024, "In a region"): three
# origins with six partitions on SeaweedFS, and `ds-load webhooks-region`
# against them: SUBSCRIPTIONS webhook subscriptions (one stream each, one
# append per stream every PERIOD), delivery latency over a 40 s window;
# then the same again in a fresh region with the origin running the
# subscriptions killed (kill -9, its disk deleted) 15 s into the window.
#
#   loadtest/webhooks-region.sh [SUBSCRIPTIONS] [PERIOD]   (default 10000
#                                   and 10s; `weed` on PATH, release build)
subs=${1:-10000}
period=${2:-10s}
for kill in no yes; do
  (
    # Every subscription is the default account's: its bound raised.
    export REGION_ORIGIN_ARGS="--webhook-allow-http true --webhook-allow 127.0.0.0/8 --max-subscriptions 20000 --max-subscriptions-per-account 20000"
    source "$(dirname "$0")/six-partitions.sh" "webhooks-$kill"
    # Kills the origin at $1 and deletes its disk.
    cat >"$work/kill-runner" <<KILL
#!/usr/bin/env bash
addrs=(${addrs[*]}); pids=(${pids[*]}); names=(a b c)
for i in 0 1 2; do
  if [ "\${addrs[\$i]}" = "\$1" ]; then kill -9 "\${pids[\$i]}"; rm -rf "$work/\${names[\$i]}"; fi
done
KILL
    chmod +x "$work/kill-runner"
    origins=$(IFS=,; echo "${addrs[*]}")
    if [ $kill = yes ]; then
      echo "== $subs subscriptions, the origin running them killed 15 s into the window"
      "$bin/ds-load" webhooks-region --origins "$origins" --subscriptions "$subs" --period "$period" \
        --seconds 40 --kill-after 15s --kill-command "$work/kill-runner"
    else
      echo "== $subs subscriptions"
      "$bin/ds-load" webhooks-region --origins "$origins" --subscriptions "$subs" --period "$period" --seconds 40
    fi
  )
done
