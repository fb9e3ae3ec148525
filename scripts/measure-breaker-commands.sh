#!/usr/bin/env bash
# The circuit breaker's Redis cost under load: the commands each RPC sends
# on its own path (it must stay 1), and the breaker's background commands
# per second (its flushes and index polls), counted by the service itself
# on /metrics (`sticky_routing_redis_command_duration_seconds_count` by
# `command`), so Redis's own INFO counts cannot mix the two.
#
# usage: scripts/measure-breaker-commands.sh [SERVICE_BINARY]
#   default: target/release/sticky-routing. DURATION (10s), MERCHANTS (20),
#   CALL (mix) and LOAD_ARGS (more sticky-load flags) change the run.
set -euo pipefail
cd "$(dirname "$0")/.."
service="${1:-target/release/sticky-routing}"
duration="${DURATION:-10s}"
merchants="${MERCHANTS:-20}"
call="${CALL:-mix}"
. scripts/lib/measure.sh
env "${service_env[@]}" "$service" >"$dir/service.log" 2>&1 &
service_pid=$!

args=(--call "$call" -c 32 --merchants "$merchants" --failure-ratio 0.2 "127.0.0.1:$grpc_port")
read -r -a extra <<< "${LOAD_ARGS:-}"
wait_serving "${args[@]}"
"$load" "${args[@]}" -n 2000 --fill >/dev/null
counts() {
  curl -s "http://127.0.0.1:$metrics_port/metrics" |
    awk '/^sticky_routing_redis_command_duration_seconds_count/ {
           match($0, /command="[a-z_]+"/); c = substr($0, RSTART + 9, RLENGTH - 10); n[c] += $NF }
         /^sticky_routing_rpc_duration_seconds_count/ { r += $NF }
         END { for (c in n) print c, n[c]; print "rpcs", r }'
}
before=$(counts); start=$(date +%s.%N)
"$load" "${args[@]}" "${extra[@]}" -z "$duration" | grep -E "Requests/sec|\[OK\]|errors" || true
end=$(date +%s.%N); after=$(counts)
python3 - "$before" "$after" "$start" "$end" <<'PY'
import sys
def parse(text):
    return {k: float(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}
before, after = parse(sys.argv[1]), parse(sys.argv[2])
seconds = float(sys.argv[4]) - float(sys.argv[3])
delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
rpcs = delta.pop("rpcs", 0)
path = {k: v for k, v in delta.items() if k in ("read_combos", "record_success", "record_failure", "admit")}
background = {k: v for k, v in delta.items() if k.startswith("breaker_")}
print(f"RPCs: {rpcs:.0f} in {seconds:.1f} s")
print(f"request path: {sum(path.values()) / max(rpcs, 1):.4f} commands per RPC ({', '.join(f'{k} {v:.0f}' for k, v in sorted(path.items()))})")
print(f"breaker background: {sum(background.values()) / seconds:.1f} commands/s ({', '.join(f'{k} {v / seconds:.1f}/s' for k, v in sorted(background.items()))})")
PY
