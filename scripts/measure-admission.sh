#!/usr/bin/env bash
# How much of one Redis shard the admission counter takes at the design's
# peak. The counter is one key per merchant (sticky_adm_{merchant}), so its
# whole rate lands on one shard; it is called once per *new* customer, so at
# worst (every payment from a new customer) at the full 5,000 TPS.
#
# Starts its own redis-server on a free port, runs the service's admit.lua on
# one key with redis-benchmark (50 clients, as many parallel callers as a
# busy fleet), and reports: the rate one Redis thread sustains for it, the
# Redis CPU per call (INFO commandstats usec_per_call), and from each the
# share of one shard at $TPS admissions per second: $TPS ÷ that rate (with
# network and parsing: the conservative figure), and $TPS × usec_per_call
# (script execution only). ROUNDS runs; the medians are printed last.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
TPS=${TPS:-5000}
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-200000}
. scripts/lib/local-redis.sh
port=$(free_port)
dir=$(mktemp -d)
trap 'kill ${redis_pid:-} 2>/dev/null; rm -rf "$dir"' EXIT
start_redis "$port" "$dir"
cli() { redis-cli -p "$port" "$@"; }

sha=$(cli SCRIPT LOAD "$(cat src/storage/scripts/admit.lua)")
window_ms=$((90 * 86400 * 1000))
budget=1000000000 # never refuses: every call writes, the costly path

echo "| round | admit calls/s (one key, 50 clients) | share at $TPS/s by rate | usec_per_call | share by script time |"
echo "|---:|---:|---:|---:|---:|"
shares=()
cpu_shares=()
for round in $(seq 1 "$ROUNDS"); do
  cli CONFIG RESETSTAT >/dev/null
  now_ms=$(($(date +%s) * 1000))
  rps=$(redis-benchmark -p "$port" -c 50 -n "$REQUESTS" -q \
    EVALSHA "$sha" 1 sticky_adm_big_merchant "$now_ms" "$window_ms" "$budget" |
    tr '\r' '\n' | grep -Eo '[0-9.]+ requests per second' | tail -1 | cut -d' ' -f1)
  usec=$(cli INFO commandstats | tr -d '\r' | grep '^cmdstat_evalsha:' |
    sed -E 's/.*usec_per_call=([0-9.]+).*/\1/')
  share=$(python3 -c "print(f'{$TPS / $rps * 100:.1f}%')")
  cpu_share=$(python3 -c "print(f'{$TPS * $usec / 1e6 * 100:.1f}%')")
  shares+=("$share")
  cpu_shares+=("$cpu_share")
  echo "| $round | $rps | $share | $usec | $cpu_share |"
done
median() { printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"; }
echo
echo "median share of one shard at $TPS new customers/s: $(median "${shares[@]}") by rate, $(median "${cpu_shares[@]}") by script time"
echo "redis-server $(redis-server --version | sed -E 's/.*v=([^ ]+).*/\1/'), $(nproc) CPUs"
