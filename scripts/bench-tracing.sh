#!/usr/bin/env bash
# `make bench-tracing`: what tracing costs per call. Runs `sticky-bench
# --quick` (no-op floor and service, RecordOutcome and GetPin) ROUNDS times
# for each of three services, interleaved so that drift hits all three alike:
#   off   no OTLP endpoint;
#   0     an endpoint (the bench's in-process span sink) and
#         OTEL_TRACES_SAMPLER=traceidratio with argument 0: nothing sampled;
#   0.1   the same, one trace in ten kept.
# Prints, per call, the median service CPU µs per call (`/proc` utime+stime
# over the run ÷ calls) and its ratio to `off`, plus the same ratio taken on
# service ÷ no-op (each run's own floor cancels machine drift).
#
# ROUNDS (3), DURATION (5s), SERVICE_BIN (a service binary to measure
# instead of this checkout's release build; A/B two builds with it) change
# the run; BENCH_BUILT=1 skips building the bench kit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
scripts/ensure-redis.sh
if [ -z "${SERVICE_BIN:-}" ]; then cargo build --release --locked >/dev/null; fi
if [ -z "${BENCH_BUILT:-}" ]; then cargo build --release --locked -p sticky-bench >/dev/null; fi
bin=${SERVICE_BIN:-target/release/sticky-routing}
out=target/bench/tracing
mkdir -p "$out"
for round in $(seq 1 "$ROUNDS"); do
  for config in off 0 0.1; do
    echo "round $round: tracing $config" >&2
    trace=()
    [ "$config" = off ] || trace=(--trace-sample "$config")
    target/release/sticky-bench --quick -z "$DURATION" --warmup 1s --service-bin "$bin" \
      "${trace[@]}" --out "$out/$config-$round" >"$out/$config-$round.md"
  done
done
python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(config, r):
    runs = json.load(open(f"{out}/{config}-{r}/report.json"))["runs"]
    return {report["name"]: report for report, _ in runs}
print("| call | tracing | service CPU µs/call (median) | × off | service ÷ no-op CPU (median) | × off |")
print("|---|---|---:|---:|---:|---:|")
for call in ["RecordOutcome", "GetPin"]:
    base = None
    for config in ["off", "0", "0.1"]:
        cpu, rel = [], []
        for r in range(1, rounds + 1):
            named = rows(config, r)
            service = named[f"service {call}"]["cpu_us_per_call"]
            noop = named[f"no-op {call}"]["cpu_us_per_call"]
            cpu.append(service)
            rel.append(service / noop)
        m, q = statistics.median(cpu), statistics.median(rel)
        if base is None:
            base = (m, q)
        label = {"off": "no endpoint", "0": "endpoint, ratio 0", "0.1": "endpoint, ratio 0.1"}[config]
        print(f"| {call} | {label} | {m:.1f} | {m / base[0]:.3f} | {q:.2f} | {q / base[1]:.3f} |")
PY
