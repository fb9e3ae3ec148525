# Sourced by the measuring scripts: a free loopback port, and a throwaway
# redis-server on one (no persistence), for a run that owns its Redis.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_redis PORT DIR: starts redis-server in the background; its pid is
# in $redis_pid.
start_redis() {
  redis-server --port "$1" --bind 127.0.0.1 --dir "$2" --save '' --appendonly no >/dev/null 2>&1 &
  redis_pid=$!
}
