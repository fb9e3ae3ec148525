#!/usr/bin/env bash
# `make bench-import`: the release binary's `sticky-routing import` against a
# fresh local redis-server, and the floor: the same write script driven by
# redis-benchmark (EVALSHA, 64 pipelined, random customers). Prints a
# markdown table of medians (bench/README.md, "Import").
#
# ROWS (300000), RUNS (5), CUSTOMERS (50000) change the run.
set -euo pipefail
ROWS=${ROWS:-300000}
RUNS=${RUNS:-5}
CUSTOMERS=${CUSTOMERS:-50000}
BIN=${BIN:-target/release/sticky-routing}
work=$(mktemp -d)
. "$(dirname "$0")/lib/local-redis.sh"
port=$(free_port)
trap 'kill ${redis_pid:-} 2>/dev/null; rm -rf "$work"' EXIT
start_redis "$port" "$work" "$work/redis.log"

python3 bench/import/gen_rows.py "$ROWS" --customers "$CUSTOMERS" >"$work/rows.csv"
export STICKY_ROUTING_REDIS_URL="redis://127.0.0.1:$port"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

redis_cpu() {
  redis-cli -p "$port" info cpu | tr -d '\r' |
    awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.2f\n", s}'
}

# One import into an empty Redis; prints rows/s over the whole run (start-up
# and connection included). Where the time went is appended to
# $work/cpu.$mode: the importer's CPU seconds, redis-server's, and Redis's
# mean time per EVALSHA (the longest another client waits behind a call).
import_rate() {
  local mode=$1; shift
  redis-cli -p "$port" flushall >/dev/null
  redis-cli -p "$port" config resetstat >/dev/null
  local start end before
  before=$(redis_cpu)
  start=$(date +%s.%N)
  local TIMEFORMAT="%U %S"
  { time "$BIN" import "$@" "$work/rows.csv" >"$work/out" 2>"$work/err" ||
    { cat "$work/err" >&2; exit 1; }; } 2>"$work/time"
  end=$(date +%s.%N)
  local per_call
  per_call=$(redis-cli -p "$port" info commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p')
  awk -v t="$(cat "$work/time")" -v b="$before" -v a="$(redis_cpu)" -v p="$per_call" 'BEGIN {
    split(t, u, " "); printf "%.2f %.2f %s\n", u[1] + u[2], a - b, p }' >>"$work/cpu.$mode"
  awk -v n="$ROWS" -v s="$start" -v e="$end" 'BEGIN {printf "%.0f\n", n / (e - s)}'
}

declare -A result
for mode in admission no-admission; do
  flag=""; [ "$mode" = no-admission ] && flag=--no-admission
  rates=$(for _ in $(seq "$RUNS"); do import_rate "$mode" $flag; done)
  result[$mode]=$(echo "$rates" | median)
  echo "import ($mode): $(echo $rates)" >&2
  echo "  importer CPU s, redis-server CPU s, Redis µs per EVALSHA, per run:" \
    "$(paste -sd';' "$work/cpu.$mode")" >&2
done

# The floors, as fast as redis-benchmark can send them, creating and
# incrementing hashes of random customers: record_success.lua alone, one
# row per EVALSHA; and the import's batch script with 64 rows per EVALSHA,
# the shape the import sends (assembled as src/storage/scripts.rs does; the
# import has just loaded it, so SCRIPT EXISTS proves the two are the same).
floor_of() {
  local rates
  rates=$(for _ in $(seq "$RUNS"); do
    redis-cli -p "$port" flushall >/dev/null
    redis-benchmark -p "$port" -P "$1" -n "$2" -r "$CUSTOMERS" -q "${@:3}" \
      | tr '\r' '\n' | awk '/requests per second/ {for (i=1;i<=NF;i++) if ($(i+1) ~ /^requests/) print $i}' | tail -1
  done)
  echo "floor $3 $5 rows per call, calls/s: $(echo $rates)" >&2
  echo "$rates" | median
}
scripts=src/storage/scripts
sha=$(redis-cli -p "$port" script load "$(cat $scripts/attempts.lua $scripts/record_success.lua)")
floor=$(floor_of 64 "$ROWS" evalsha "$sha" 1 sticky_gw_m1_cus___rand_int__ \
  CARD:CREDIT:stripe 7776000 30 1 "" 3)
floor=$(printf '%.0f' "$floor")

{
  cat $scripts/attempts.lua
  printf 'local function record_success(KEYS, ARGV)\n'; cat $scripts/record_success.lua
  printf '\nend\nlocal function record_failure(KEYS, ARGV)\n'; cat $scripts/record_failure.lua
  printf '\nend\nlocal function admit(KEYS, ARGV)\n'; cat $scripts/admit.lua
  printf '\nend\n'; cat $scripts/batch.lua
} >"$work/batch.lua"
batch_sha=$(sha1sum "$work/batch.lua" | cut -d' ' -f1)
if [ "$(redis-cli -p "$port" script exists "$batch_sha")" != 1 ]; then
  echo "the batch script assembled here is not the one the import loaded:" \
    "update this script to match src/storage/scripts.rs" >&2
  exit 1
fi
calls=64 keys=() args=()
for _ in $(seq $calls); do
  keys+=(sticky_gw_m1_cus___rand_int__)
  args+=(s 6 CARD:CREDIT:stripe 7776000 30 1 "" 3)
done
batch_calls=$(floor_of 4 $((ROWS / calls)) evalsha "$batch_sha" $calls "${keys[@]}" "${args[@]}")
batch_floor=$(awk -v c="$batch_calls" -v n=$calls 'BEGIN {printf "%.0f", c * n}')

percent() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.0f %%", 100*a/b}'; }
echo "| ${ROWS} rows, ${CUSTOMERS} customers, median of ${RUNS} | rows/s | of floor 1 | of floor 2 |"
echo "|---|---:|---:|---:|"
echo "| floor 1: redis-benchmark -P 64, EVALSHA record_success, a row per call | $floor | 100 % | $(percent "$floor" "$batch_floor") |"
echo "| floor 2: redis-benchmark -P 4, EVALSHA of the batch script, $calls rows per call | $batch_floor | $(percent "$batch_floor" "$floor") | 100 % |"
for mode in admission no-admission; do
  label="import"; [ "$mode" = no-admission ] && label="import --no-admission"
  echo "| $label (cold start: every customer new) | ${result[$mode]} | $(percent "${result[$mode]}" "$floor") | $(percent "${result[$mode]}" "$batch_floor") |"
done
