#!/usr/bin/env bash
# `make loadtest`: the ghz recipes in bench/ghz/ against a service that is
# already running (`make run`), each printing ghz's summary:
#   1. fill:          RecordOutcome, customers cus_0 .. cus_19999, once each
#   2. sequential:    GetPin for each filled customer once
#   3. steady state:  GetPin for random filled customers, closed loop
#   4. open loop:     GetPin at a fixed rate, whether or not answers keep up
#   5. mixed:         GetPin and RecordOutcome together, 9 reads to 1 write
# HOST (default 127.0.0.1:50051) is the service; DURATION (default 10s)
# replaces each timed recipe's own; GHZ is the ghz binary (default: ghz on
# PATH). Extra ghz flags go in GHZ_ARGS (for example `--cacert ca.crt`
# instead of the recipes' plaintext, with `--insecure=false`).
set -euo pipefail
cd "$(dirname "$0")/.."

GHZ="${GHZ:-ghz}"
HOST="${HOST:-127.0.0.1:50051}"
DURATION="${DURATION:-10s}"
if ! command -v "$GHZ" >/dev/null 2>&1; then
  echo "loadtest: no ghz (looked for '$GHZ'); install it from https://ghz.sh or set GHZ=/path/to/ghz" >&2
  exit 1
fi
read -r -a extra <<<"${GHZ_ARGS:-}"

run() {
  local recipe="$1"
  shift
  echo "== bench/ghz/$recipe"
  "$GHZ" --config "bench/ghz/$recipe" "$@" "${extra[@]}" "$HOST"
}

run record_outcome.json
run get_pin.json
run steady_get_pin.json --duration "$DURATION"
run open_loop_get_pin.json --duration "$DURATION"

# Two ghz processes at once, one per RPC (a ghz run calls one method); each
# prints its own summary when both are done, reads first.
reads="$(mktemp)" writes="$(mktemp)"
trap 'rm -f "$reads" "$writes"' EXIT
run mixed_get_pin.json --duration "$DURATION" >"$reads" 2>&1 &
read_pid=$!
run mixed_record_outcome.json --duration "$DURATION" >"$writes" 2>&1 &
write_pid=$!
status=0
wait "$read_pid" || status=$?
wait "$write_pid" || status=$?
cat "$reads" "$writes"
exit "$status"
