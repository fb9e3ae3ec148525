#!/usr/bin/env bash
# What a gRPC client sees when its connection ages: ghz (grpc-go) sends a
# fixed number of RecordOutcome calls over ONE connection at a steady rate,
# while the service retires connections every AGE (default 2s) with a GRACE
# (default 1s). Prints ghz's status codes and the count Redis holds, and
# fails unless every call was answered OK and Redis counted each exactly
# once. A fixed count (-n), not a duration: at the end of a timed run ghz
# closes its connection under the calls still in flight, which reads as
# UNAVAILABLE whatever the server does. ghz may also list a few "the
# connection is draining" errors: grpc-go attempts that never left the
# client and that grpc-go retried by itself (ghz counts attempts), so the
# check is on the OK count and Redis's count, not on an empty error list.
#
# usage: scripts/check-connection-age.sh [SERVICE_BINARY]
#   default binary: target/release/sticky-routing (built if missing)
#   GHZ (default: ghz on PATH), AGE, GRACE, CALLS (default 16000), RPS (2000)
set -euo pipefail
cd "$(dirname "$0")/.."
service="${1:-target/release/sticky-routing}"
GHZ="${GHZ:-ghz}"
command -v "$GHZ" >/dev/null 2>&1 || { echo "needs ghz (set GHZ=/path/to/ghz)" >&2; exit 1; }
scripts/ensure-redis.sh
[ -x "$service" ] || cargo build --release --locked

. scripts/lib/local-redis.sh
redis_port=$(free_port); grpc_port=$(free_port); metrics_port=$(free_port)
dir=$(mktemp -d)
start_redis "$redis_port" "$dir"
env STICKY_ROUTING_LISTEN_ADDR="127.0.0.1:$grpc_port" STICKY_ROUTING_METRICS_ADDR="127.0.0.1:$metrics_port" \
  STICKY_ROUTING_HEALTH_LISTEN_ADDR=off STICKY_ROUTING_REDIS_URL="redis://127.0.0.1:$redis_port" \
  STICKY_ROUTING_MAX_CONNECTION_AGE="${AGE:-2s}" STICKY_ROUTING_MAX_CONNECTION_AGE_GRACE="${GRACE:-1s}" \
  "$service" >"$dir/service.log" 2>&1 &
service_pid=$!
trap 'kill $service_pid 2>/dev/null; wait $service_pid 2>/dev/null; kill $redis_pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$grpc_port") 2>/dev/null && break; sleep 0.1; done

calls="${CALLS:-16000}"
"$GHZ" --insecure --connections 1 -c 16 -n "$calls" --rps "${RPS:-2000}" \
  --call sticky_routing.v1.StickyRouting/RecordOutcome \
  -d '{"merchant_id":"m1","customer_id":"c1","payment_method":"card","payment_method_type":"credit","connector":"stripe","outcome":"OUTCOME_SUCCESS"}' \
  "127.0.0.1:$grpc_port" >"$dir/ghz.txt" 2>&1 || true
sed -n '/Status code distribution/,$p' "$dir/ghz.txt"
ok=$(awk '/\[OK\]/ {print $2}' "$dir/ghz.txt")
counted=$(redis-cli -p "$redis_port" hget sticky_gw_m1_c1 CARD:CREDIT:stripe)
echo "calls: $calls, answered OK: ${ok:-0}, counted by Redis: ${counted:-0}"
[ "${ok:-0}" = "$calls" ] && [ "${counted:-0}" = "$calls" ]
