# Sourced by the scripts that run their own Redis (make run, the measuring
# and bench scripts): a free loopback port, and a throwaway redis-server on
# one (loopback only, no persistence). The Rust side's counterpart is the
# test-support crate (test-support/src/redis_server.rs).
#
# The server is the one the tests would start: $STICKY_TEST_REDIS_SERVER, or
# redis-server, and its CLI the server's sibling (valkey-server → valkey-cli)
# unless $STICKY_TEST_REDIS_CLI names one; the same rule as
# redis_server::server_binary and cli_binary, so a script measures Valkey
# with the variable CI's Valkey pass sets.
redis_server_bin=${STICKY_TEST_REDIS_SERVER:-redis-server}
if [ -n "${STICKY_TEST_REDIS_CLI:-}" ]; then
  redis_cli_bin=$STICKY_TEST_REDIS_CLI
elif [ "${redis_server_bin%-server}" != "$redis_server_bin" ]; then
  redis_cli_bin=${redis_server_bin%-server}-cli
else
  redis_cli_bin=redis-cli
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_redis PORT DIR [LOG]: starts redis-server in the background, working
# in DIR and logging to LOG (or nowhere), and waits until it answers; its
# pid is in $redis_pid.
start_redis() {
  "$redis_server_bin" --port "$1" --bind 127.0.0.1 --dir "$2" --save '' --appendonly no \
    --daemonize no >"${3:-/dev/null}" 2>&1 &
  redis_pid=$!
  wait_redis "$1"
}

# wait_redis PORT: until the Redis on PORT answers PING (up to 10 s).
wait_redis() {
  for _ in $(seq 200); do
    "$redis_cli_bin" -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "$redis_server_bin on 127.0.0.1:$1 never answered" >&2
  return 1
}
