#!/usr/bin/env bash
# `make run`: the service against a local Redis that this script starts
# (port 6379 unless STICKY_ROUTING_REDIS_URL says otherwise). If something
# already answers on that port, it is used as is. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh

port="${REDIS_PORT:-6379}"
export STICKY_ROUTING_REDIS_URL="${STICKY_ROUTING_REDIS_URL:-redis://127.0.0.1:${port}}"

cargo build --release --locked

redis_pid=""
if (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; then
  echo "using the Redis already listening on 127.0.0.1:${port}" >&2
else
  data_dir="$(mktemp -d)"
  . scripts/lib/local-redis.sh
  trap 'kill "${redis_pid:-}" 2>/dev/null || true; rm -rf "${data_dir}"' EXIT
  start_redis "${port}" "${data_dir}" "${data_dir}/redis.log"
  echo "started redis-server on 127.0.0.1:${port} (pid ${redis_pid})" >&2
fi

# Not exec: the trap must stop Redis after the service exits.
target/release/sticky-routing "$@"
