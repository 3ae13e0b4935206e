# Sourced by the region benchmarks (loadtest/*-bench.sh, six-partitions.sh):
# a SeaweedFS bucket of their own under $work, and a metric reader.
#
#   bucket_start: starts `scripts/weed-mini "$work/weed" bench`, sets $wpid
#                 (the caller's trap kills it) and exports the AWS_* settings
#                 the origins read.
#   metric ADDR NAME: the value of an unlabelled series on ADDR's /metrics.

bucket_start() {
  local endpoint
  read -r endpoint wpid < <(scripts/weed-mini "$work/weed" bench | paste -sd' ')
  export AWS_ENDPOINT_URL="$endpoint" AWS_ACCESS_KEY_ID=any AWS_SECRET_ACCESS_KEY=any \
    AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true
}

metric() { curl -s "http://$1/metrics" | awk -v n="$2" '$1 == n {print $2}'; }
