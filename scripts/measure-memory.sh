#!/usr/bin/env bash
# Measures MEMORY USAGE of one customer hash, as the service lays it out,
# for a 2-combo customer and one at the 30-combo cap. Starts its own
# redis-server on a free port (valkey-server with
# STICKY_TEST_REDIS_SERVER=valkey-server, scripts/lib/local-redis.sh);
# prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
. scripts/lib/local-redis.sh
port=$(free_port)
dir=$(mktemp -d)
trap 'kill ${redis_pid:-} 2>/dev/null; rm -rf "$dir"' EXIT
start_redis "$port" "$dir"
cli() { "$redis_cli_bin" -p "$port" "$@"; }

# merchant_123 / cus_0123456789abcdef, escaped as the service does.
key2='sticky_gw_merchant%5F123_cus_0123456789abcdef'
key30='sticky_gw_merchant%5F123_cus_fedcba9876543210'
cli HSET "$key2" INTERAC:RTP:GIGADAT 3 INTERAC:RTP:LOONIO 2 >/dev/null
cli EXPIRE "$key2" 7776000 >/dev/null
for n in $(seq -w 1 30); do cli HINCRBY "$key30" "INTERAC:RTP:CONNECTOR_$n" "$((10#$n))" >/dev/null; done
cli EXPIRE "$key30" 7776000 >/dev/null

echo "| customer | encoding | MEMORY USAGE | design (Redis 7.2.7) |"
echo "|---|---|---|---|"
echo "| 2 combos | $(cli OBJECT ENCODING "$key2") | $(cli MEMORY USAGE "$key2") B | 136 B |"
echo "| 30 combos | $(cli OBJECT ENCODING "$key30") | $(cli MEMORY USAGE "$key30") B | 952 B |"
echo
echo "$redis_server_bin $("$redis_server_bin" --version | sed -E 's/.*v=([^ ]+).*/\1/')"
