# Sourced by the measuring scripts (measure-instructions.sh,
# measure-syscalls.sh, measure-breaker-commands.sh), from the repository's
# root: the bench kit built and its load generator in $load; a throwaway
# Redis on $redis_port (pid $redis_pid) working in a fresh $dir; free ports
# for the server under test in $grpc_port and $metrics_port, and in
# $service_env the service's settings for them; wait_serving, which waits
# for that server to answer; and, when the script ends, the server (its pid
# in $service_pid, once started) and Redis stopped and $dir removed.
scripts/ensure-redis.sh
cargo build --release --locked -p sticky-bench >/dev/null 2>&1
load=target/release/sticky-load

. scripts/lib/local-redis.sh
redis_port=$(free_port); grpc_port=$(free_port); metrics_port=$(free_port)
dir=$(mktemp -d)
# Every step may fail without stopping the rest: `set -e` holds in the trap
# too, and the no-op floor, which has no SIGTERM handler, makes `wait`
# answer 143 (which left Redis running after every `noop` measure).
trap 'if [ -n "${service_pid:-}" ]; then
    kill -TERM "$service_pid" 2>/dev/null || true; wait "$service_pid" 2>/dev/null || true
  fi
  kill "${redis_pid:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT
start_redis "$redis_port" "$dir"

# For `env "${service_env[@]}" SERVICE`: the service on these ports, with
# no health listener, against the throwaway Redis.
service_env=(STICKY_ROUTING_LISTEN_ADDR="127.0.0.1:$grpc_port" STICKY_ROUTING_METRICS_ADDR="127.0.0.1:$metrics_port"
  STICKY_ROUTING_HEALTH_LISTEN_ADDR=off STICKY_ROUTING_REDIS_URL="redis://127.0.0.1:$redis_port")

# wait_serving ARGS...: until one sticky-load call with ARGS succeeds, for up
# to two minutes (a service under valgrind starts slowly).
wait_serving() {
  for _ in $(seq 1 480); do
    "$load" "$@" -n 1 >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  echo "the server did not answer within two minutes" >&2
  return 1
}
