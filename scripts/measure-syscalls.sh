#!/usr/bin/env bash
# What the kernel does for each call: syscalls by kind, context switches
# and CPU time of the server process over a fixed batch of calls, counted
# by perf's tracepoints (no ptrace, so the server runs at full speed and
# batches as it does in production). Where callgrind (measure-instructions.sh)
# counts the user-space instructions, this counts the other half of the CPU
# per call: each writev to Redis or to a client, each wakeup, each switch.
#
# usage: scripts/measure-syscalls.sh [record|pin] [SERVICE_BINARY|noop]
#   default: record, target/release/sticky-routing; `noop` measures the
#   transport floor (sticky-noop) the same way.
#   CALLS (200000), CONCURRENCY (128), CONNECTIONS (4) change the load;
#   the server keeps its defaults (one worker thread and one Redis
#   connection per CPU).
# Needs perf with tracepoint access (linux-perf; root or
# kernel.perf_event_paranoid <= 1).
set -euo pipefail
cd "$(dirname "$0")/.."
call="${1:-record}"
service="${2:-target/release/sticky-routing}"
calls=${CALLS:-200000}
command -v perf >/dev/null || { echo "needs perf: apt-get install linux-perf" >&2; exit 1; }
. scripts/lib/measure.sh
if [ "$service" = noop ]; then
  service=target/release/sticky-noop
  "$service" --listen "127.0.0.1:$grpc_port" >/dev/null &
else
  env "${service_env[@]}" "$service" 2>"$dir/service.log" &
fi
service_pid=$!

args=(--call "$call" -c "${CONCURRENCY:-128}" --connections "${CONNECTIONS:-4}" --customers 10000 --merchants 10 "127.0.0.1:$grpc_port")
wait_serving "${args[@]}"
"$load" "${args[@]}" -n 20000 --fill >/dev/null 2>&1
events=raw_syscalls:sys_enter,syscalls:sys_enter_writev,syscalls:sys_enter_write,syscalls:sys_enter_sendto,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,context-switches,task-clock
perf stat -x, -e "$events" -p "$service_pid" -o "$dir/perf.csv" &
perf_pid=$!
sleep 0.5
"$load" "${args[@]}" -n "$calls" | grep -E "errors|\[OK\]" || true
kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
echo "$call: per call over $calls calls, $service (perf stat -p)"
awk -F, -v calls="$calls" '
  /^#/ || NF < 3 { next }
  { name = $3; sub(/^(raw_)?syscalls:sys_enter_?/, "", name); if (name == "") name = "syscalls (all)"
    if ($3 == "task-clock") printf "  %-16s %8.2f µs\n", "CPU (task-clock)", $1 * 1000 / calls
    else printf "  %-16s %8.3f\n", name, $1 / calls }' "$dir/perf.csv"
