# Sourced by the measuring scripts (measure-instructions.sh,
# measure-syscalls.sh, measure-breaker-commands.sh), from the repository's
# root: the bench kit built and its load generator in $load; a throwaway
# Redis on $redis_port (pid $redis_pid) working in a fresh $dir; free ports
# for the server under test in $grpc_port and $metrics_port; and
# wait_serving, which waits for that server to answer.
scripts/ensure-redis.sh
cargo build --release --locked -p sticky-bench >/dev/null 2>&1
load=target/release/sticky-load

. scripts/lib/local-redis.sh
redis_port=$(free_port); grpc_port=$(free_port); metrics_port=$(free_port)
dir=$(mktemp -d)
start_redis "$redis_port" "$dir"

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
