#!/usr/bin/env bash
# Instructions redis-server spends per merchant in the breaker's tick
# script (issue 41): bench/tick/tick_instructions.py drives
# breaker_flush.lua on a redis-server run under callgrind, once with the
# script doing nothing (the same calls, KEYS and arguments: the floor of
# running a script at all) and once as written; the difference over the
# merchants flushed is the script's own cost per merchant; the whole run's
# count over them is what a merchant costs in all (reading the arguments
# is part of it). Instruction counts, not seconds: the same on a busy
# machine.
#
#   scripts/measure-tick-instructions.sh          # the working tree's scripts
#   scripts/measure-tick-instructions.sh d529d74  # another commit's
#   scripts/measure-tick-instructions.sh --experiment [COMMIT]  # the
#       experiment counts, per outcome: the counts log's pushes and its
#       batch added (bench/tick/experiment_log_instructions.py), or, at a
#       commit before the log, the flush script per merchant-day
#       (bench/tick/experiment_instructions.py)
#   scripts/measure-tick-instructions.sh --floors # what a count costs at
#       the least: a HINCRBY per count in a script, or the counts appended
#       as bytes (bench/tick/floors.py)
#
# Needs valgrind, python3 and redis-server (REDIS_SERVER to change it).
set -euo pipefail
cd "$(dirname "$0")/.."
floors=false
experiment=false
if [ "${1:-}" = --floors ]; then floors=true; shift; fi
if [ "${1:-}" = --experiment ]; then experiment=true; shift; fi
rev="${1:-}"
server="${REDIS_SERVER:-redis-server}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

scripts=src/storage/scripts
# Each script as of $rev (or the tree); a script $rev does not have is
# left out (the experiment's before and after its counts log).
for name in breaker_common breaker_flush experiment_flush experiment_log_state \
    experiment_append experiment_compact; do
    if [ -n "$rev" ]; then
        git show "$rev:$scripts/$name.lua" > "$work/$name.lua" 2> /dev/null \
            || rm -f "$work/$name.lua"
    elif [ -f "$scripts/$name.lua" ]; then
        cp "$scripts/$name.lua" "$work/$name.lua"
    fi
done
port=$((20000 + RANDOM % 20000))
# run NAME COMMAND...: COMMAND against a callgrind redis-server on $port;
# prints the server's instructions.
run() {
    local out="$work/callgrind.$1"
    valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$server" --port "$port" --save '' --appendonly no > "$work/valgrind.$1.log" 2>&1 &
    local pid=$!
    for _ in $(seq 1 100); do
        redis-cli -p "$port" ping > /dev/null 2>&1 && break
        sleep 0.2
    done
    local name=$1
    shift
    "$@" > "$work/$name.txt"
    redis-cli -p "$port" shutdown nosave > /dev/null 2>&1 || true
    wait "$pid" || true
    grep -h '^summary:' "$out" | awk '{print $2}'
}
if $floors; then
    none=$(run none python3 bench/tick/floors.py "$port" none)
    entries=$(awk '{print $2}' "$work/none.txt")
    for way in hincrby blob; do
        got=$(run "$way" python3 bench/tick/floors.py "$port" "$way")
        echo "$way: $(( (got - none) / entries )) instructions per count over a call that does nothing"
    done
    exit 0
fi
if $experiment && [ -f "$work/experiment_append.lua" ]; then
    # The counts log: each tick pushed as bytes, the batch added once.
    cat "$work/experiment_log_state.lua" "$work/experiment_append.lua" > "$work/append.lua"
    cat "$work/experiment_log_state.lua" "$work/experiment_compact.lua" > "$work/compact.lua"
    full=$(run full python3 bench/tick/experiment_log_instructions.py "$port" \
        "$work/append.lua" "$work/compact.lua")
    outcomes=$(awk '{print $3}' "$work/full.txt")
    echo "experiment counts log${rev:+ at $rev}, per outcome counted ($outcomes):" \
         "$(( full / outcomes )) instructions in all (the server's start, the pushes" \
         "and the batch's adding included)"
    exit 0
fi
if $experiment; then
    sed -e 's/^local function flush(key, from, n)$/&\n  do return 1 end/' \
        "$work/experiment_flush.lua" > "$work/experiment_floor.lua"
    grep -q 'do return 1 end' "$work/experiment_floor.lua"
    floor=$(run floor python3 bench/tick/experiment_instructions.py "$port" "$work/experiment_floor.lua")
    full=$(run full python3 bench/tick/experiment_instructions.py "$port" "$work/experiment_flush.lua")
    flushes=$(awk '{print $3}' "$work/full.txt")
    echo "experiment_flush.lua${rev:+ at $rev}, per merchant-day flushed ($flushes):" \
         "$(( full / flushes )) instructions in all (the server's start included)," \
         "$(( (full - floor) / flushes )) in the merchant-day's own work"
    exit 0
fi
drive() {
    python3 bench/tick/tick_instructions.py "$port" "$work/breaker_common.lua" "$1"
}
# With the counts log, a merchant costs the script no work of its own (its
# counts are bytes appended and read back): there is no floor to take.
if grep -q 'the frames to append' "$work/breaker_flush.lua"; then
    full=$(run full drive "$work/breaker_flush.lua")
    flushes=$(awk '{print $3}' "$work/full.txt")
    echo "breaker_flush.lua${rev:+ at $rev} (counts log), per merchant's counts" \
         "($flushes): $(( full / flushes )) instructions in all (the server's" \
         "start, the appends, the reads and the index polls included)"
    exit 0
fi
# The floor: the same script with its merchants' work cut out (each merchant
# answered at once), so it reads its arguments and polls the index alike.
sed -e 's/^local function flush_merchant(key, tallies)$/&\n  do return 1 end/' \
    "$work/breaker_flush.lua" > "$work/floor.lua"
grep -q 'do return 1 end' "$work/floor.lua"
floor=$(run floor drive "$work/floor.lua")
full=$(run full drive "$work/breaker_flush.lua")
flushes=$(awk '{print $3}' "$work/full.txt")
echo "breaker_flush.lua${rev:+ at $rev}, per merchant flushed ($flushes):" \
     "$(( full / flushes )) instructions in all (the server's start included)," \
     "$(( (full - floor) / flushes )) in the merchant's own work" \
     "(the rest: reading the arguments, polling the index)"
