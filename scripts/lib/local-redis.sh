# Sourced by the scripts that run their own Redis (make run, the measuring
# and bench scripts): a free loopback port, and a throwaway redis-server on
# one (loopback only, no persistence). The Rust side's counterpart is the
# test-support crate (test-support/src/redis_server.rs).

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_redis PORT DIR [LOG]: starts redis-server in the background, working
# in DIR and logging to LOG (or nowhere), and waits until it answers; its
# pid is in $redis_pid.
start_redis() {
  redis-server --port "$1" --bind 127.0.0.1 --dir "$2" --save '' --appendonly no \
    --daemonize no >"${3:-/dev/null}" 2>&1 &
  redis_pid=$!
  wait_redis "$1"
}

# wait_redis PORT: until the Redis on PORT answers PING (up to 10 s).
wait_redis() {
  for _ in $(seq 200); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "redis-server on 127.0.0.1:$1 never answered" >&2
  return 1
}
