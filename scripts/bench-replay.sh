#!/usr/bin/env bash
# `make bench-replay`: the release binary's `sticky-routing replay` on
# generated CSV histories (bench/replay/gen_history.py); no Redis. Prints a
# markdown table of medians (bench/README.md, "Replay"):
# - attempts per second of CPU (user + sys: the replay runs on one thread,
#   so this is the rate on one core) and of wall clock, start-up included;
# - bytes per customer with habits: the peak RSS of a large history minus
#   that of a small one, over the difference in customers with habits at the
#   end (so the binary, the reader's buffers and the allocator's base cancel
#   out), without and with an attempt_id on every row.
#
# ROWS (3000000), CUSTOMERS (1000000), RUNS (5), BIN change the run.
set -euo pipefail
ROWS=${ROWS:-3000000}
CUSTOMERS=${CUSTOMERS:-1000000}
RUNS=${RUNS:-5}
BIN=${BIN:-target/release/sticky-routing}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gen=bench/replay/gen_history.py

# The settings are the defaults, whatever this shell has.
for name in $(env | sed -n 's/^\(STICKY_ROUTING_[A-Z0-9_]*\)=.*/\1/p'); do unset "$name"; done

echo "generating histories in $work ..." >&2
python3 "$gen" "$ROWS" --customers "$CUSTOMERS" >"$work/large.csv"
python3 "$gen" $((ROWS / 20)) --customers $((CUSTOMERS / 20)) >"$work/small.csv"
python3 "$gen" "$ROWS" --customers "$CUSTOMERS" --attempt-ids 1 >"$work/large-ids.csv"
python3 "$gen" $((ROWS / 20)) --customers $((CUSTOMERS / 20)) --attempt-ids 1 >"$work/small-ids.csv"

# One run: "cpu_seconds wall_seconds peak_rss_bytes customers" of
# `replay FILE`, from the kernel's accounting of the finished child.
run() {
  python3 - "$BIN" "$1" <<'EOF'
import re, resource, subprocess, sys, time
start = time.monotonic()
done = subprocess.run([sys.argv[1], "replay", sys.argv[2]], capture_output=True, text=True)
wall = time.monotonic() - start
if done.returncode != 0:
    sys.exit(f"replay exited {done.returncode}: {done.stderr}")
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
customers = re.search(r"(\d+) customers with habits", done.stdout).group(1)
print(f"{usage.ru_utime + usage.ru_stime:.3f} {wall:.3f} {usage.ru_maxrss * 1024} {customers}")
EOF
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A cpu wall rss customers
for history in large small large-ids small-ids; do
  runs=$(for _ in $(seq "$RUNS"); do run "$work/$history.csv"; done)
  echo "$history (cpu s, wall s, peak rss, customers): $(echo "$runs" | paste -sd';')" >&2
  cpu[$history]=$(echo "$runs" | awk '{print $1}' | median)
  wall[$history]=$(echo "$runs" | awk '{print $2}' | median)
  rss[$history]=$(echo "$runs" | awk '{print $3}' | median)
  customers[$history]=$(echo "$runs" | awk 'NR == 1 {print $4}')
done

per_customer() {
  awk -v a="${rss[$1]}" -v b="${rss[$2]}" -v ca="${customers[$1]}" -v cb="${customers[$2]}" \
    'BEGIN {printf "%.0f", (a - b) / (ca - cb)}'
}
rate() { awk -v n="$ROWS" -v s="$1" 'BEGIN {printf "%.0f", n / s}'; }

echo
echo "| history | attempts | customers with habits | attempts/s (CPU) | attempts/s (wall) | peak RSS | bytes per customer |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for pair in "large small" "large-ids small-ids"; do
  set -- $pair
  label="CSV, RFC 3339 at"
  [ "$1" = large-ids ] && label="$label, attempt_id on every row"
  printf '| %s | %s | %s | %s | %s | %s MB | %s |\n' "$label" "$ROWS" "${customers[$1]}" \
    "$(rate "${cpu[$1]}")" "$(rate "${wall[$1]}")" \
    "$(awk -v r="${rss[$1]}" 'BEGIN {printf "%.0f", r / 1e6}')" "$(per_customer "$1" "$2")"
done
