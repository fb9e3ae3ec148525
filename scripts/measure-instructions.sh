#!/usr/bin/env bash
# Counts the CPU instructions the service spends on a fixed batch of calls,
# under callgrind. Unlike req/s, the count barely moves with what else the
# machine is doing, so it tells whether a change to a request's path does
# more work, where `make bench` on a shared machine can only say "within
# noise". Compare two builds by running it once with each binary.
#
# usage: scripts/measure-instructions.sh [record|pin] [SERVICE_BINARY|noop]
#   default: record, target/release/sticky-routing; `noop` measures the
#   transport floor, sticky-noop, the same way.
#   LOAD_ARGS="--attempt-ids" adds sticky-load flags to the measured calls.
#   KEEP_PROFILE=FILE keeps the callgrind profile, for callgrind_annotate.
#   TRACE_SAMPLE=R exports traces to a span sink (sticky-sink) with
#     OTEL_TRACES_SAMPLER=traceidratio and argument R: what tracing costs
#     (0: an endpoint, nothing sampled).
# Prints the instructions for 4,000 calls over 1,000 existing customers
# (5 merchants, 4 combos, after a fill), one worker thread, a pool of 1,
# and the heap allocations they made: calls to Rust's allocator entry points
# (`__rust_alloc`, `__rust_alloc_zeroed`, `__rust_realloc`) in the same
# profile, so background work over the same seconds (the breakers' and
# experiments' flushes) is in both figures.
set -euo pipefail
cd "$(dirname "$0")/.."
call="${1:-record}"
service="${2:-target/release/sticky-routing}"
calls=4000
command -v valgrind >/dev/null || { echo "needs valgrind: apt-get install valgrind" >&2; exit 1; }
. scripts/lib/measure.sh
tracing=()
if [ -n "${TRACE_SAMPLE:-}" ]; then
  # The sink reads its stdin until it closes: a pipe this shell holds open.
  mkfifo "$dir/sink.in"
  target/release/sticky-sink <"$dir/sink.in" >"$dir/sink.out" 2>"$dir/sink.err" &
  exec 3>"$dir/sink.in"
  for _ in $(seq 1 100); do [ -s "$dir/sink.out" ] && break; sleep 0.1; done
  tracing=(OTEL_EXPORTER_OTLP_ENDPOINT="$(head -1 "$dir/sink.out")" OTEL_TRACES_SAMPLER=traceidratio
    OTEL_TRACES_SAMPLER_ARG="$TRACE_SAMPLE" OTEL_BSP_SCHEDULE_DELAY=200)
fi
if [ "$service" = noop ]; then
  # The transport floor (sticky-noop): the same server, codec and settings,
  # handlers that answer at once; the service's figures over its figures
  # are the instruction-count twin of make bench's CPU ratio.
  service=target/release/sticky-noop
  valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" \
    "$service" --listen "127.0.0.1:$grpc_port" --worker-threads 1 >/dev/null 2>"$dir/valgrind.log" 3>&- &
else
  env "${tracing[@]}" "${service_env[@]}" STICKY_ROUTING_WORKER_THREADS=1 STICKY_ROUTING_REDIS_POOL_SIZE=1 \
    valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" "$service" 2>"$dir/valgrind.log" 3>&- &
fi
service_pid=$!

args=(--call "$call" -c 4 --customers 1000 --merchants 5 "127.0.0.1:$grpc_port")
read -r -a extra <<< "${LOAD_ARGS:-}"
wait_serving "${args[@]}"
"$load" "${args[@]}" -n 500 --fill >/dev/null
callgrind_control -z "$service_pid" >/dev/null 2>&1
"$load" "${args[@]}" "${extra[@]}" -n "$calls" | grep -E "errors|\[OK\]" || true
callgrind_control -d "$service_pid" >/dev/null 2>&1
total=$(grep -E '^summary:' "$dir/callgrind.out.1" | awk '{print $2}')
if [ -n "${KEEP_PROFILE:-}" ]; then cp "$dir/callgrind.out.1" "$KEEP_PROFILE"; fi
if [ -n "${TRACE_SAMPLE:-}" ]; then
  exec 3>&-
  for _ in $(seq 1 50); do [ -s "$dir/sink.err" ] && break; sleep 0.1; done
  echo "$call: traces sampled at ${TRACE_SAMPLE}; the sink's $(cat "$dir/sink.err")"
fi
echo "$call: $total instructions for $calls calls ($((total / calls)) per call) in $service"
allocations=$(python3 scripts/lib/callgrind_calls.py "$dir/callgrind.out.1" __rust_alloc __rust_alloc_zeroed __rust_realloc |
  awk '{ n += $2 } END { print n }')
echo "$call: $allocations heap allocations for $calls calls ($(awk -v a="$allocations" -v c="$calls" 'BEGIN { printf "%.1f", a / c }') per call)"
