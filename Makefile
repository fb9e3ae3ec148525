# The README's two commands: `make run` and `make test`.
.PHONY: run test test-valkey lint ci bench bench-platform bench-import bench-replay bench-tracing fuzz check-deploy deny loadtest

# The service against a local redis-server that it starts itself.
run:
	scripts/run-local.sh

# The whole suite: unit, property and integration tests on real Redis and
# the repository checks (tests/repo), then the benchmark kit's and the test
# harness's own tests (a separate build, so the service's tests run with
# exactly the service's features).
test:
	scripts/ensure-redis.sh
	cargo test --locked
	cargo test --locked -p sticky-bench -p test-support

# The tests that talk to Redis, again on Valkey (Debian's valkey-server, from
# bookworm-backports on bookworm): the integration suite (single node,
# Cluster, Sentinel, TLS) and the storage scripts' unit tests. The harness
# starts whatever STICKY_TEST_REDIS_SERVER names (test-support's
# redis_server::server_binary) and its sibling CLI. Nothing else differs
# between the two servers, so lint, deny and the other unit tests run once.
VALKEY_SERVER ?= valkey-server
test-valkey:
	scripts/ensure-valkey.sh
	STICKY_TEST_REDIS_SERVER=$(VALKEY_SERVER) cargo test --locked --lib storage::
	STICKY_TEST_REDIS_SERVER=$(VALKEY_SERVER) cargo test --locked --test api

# The long fuzz of the gRPC edge (src/transport/fuzz.rs): a million cases
# through decode, validation, key encoding and the answer, in release; no
# Redis. `make test` runs a short version. FUZZ_CASES and FUZZ_SEED change
# the run; FUZZ_CASE=n replays case n alone.
fuzz:
	cargo test --release --locked --lib transport::fuzz::tests::long_run -- --ignored --exact --nocapture

# What CI checks besides the tests.
lint:
	cargo fmt --check
	cargo clippy --locked --workspace --all-targets -- -D warnings

# deploy/ rendered with kustomize (base, and base with both components) and
# validated offline against the Kubernetes schemas; installs its pinned
# tools from PyPI into .tools/ on first use (scripts/check-deploy.sh).
check-deploy:
	scripts/check-deploy.sh

# The supply chain, without the advisory database: every dependency's licence is one deny.toml
# allows, no banned crate, every crate from crates.io. Installs cargo-deny
# on first use. The advisories check needs the RustSec database from the
# network: deploy/README.md ("Supply chain") has the networked step.
deny:
	scripts/ensure-cargo-deny.sh
	cargo deny --locked --workspace check --hide-inclusion-graph licenses bans sources

# The ghz recipes in bench/ghz/ against a running service (`make run` in
# another terminal), each printing ghz's summary. HOST, DURATION, GHZ and
# GHZ_ARGS change the run (scripts/loadtest.sh).
loadtest:
	scripts/loadtest.sh

ci: lint test test-valkey check-deploy deny

# The service against its transport and storage floors, on its own Redis;
# prints a markdown table (bench/README.md explains it): req/s, latency, and
# the CPU per call of the service, the no-op floor and Redis, from /proc. The service is built
# on its own first, exactly as shipped; the bench kit is a second build.
# Then the platform study (issue 41, `bench-platform` below). `make bench
# QUICK=1` runs the short version of both.
# `make bench OVERLOAD=1` runs the overload study instead: the service on
# CPU 0, the load and Redis on the other CPUs. BENCH_ARGS adds flags to the
# comparison, PLATFORM_ARGS to the platform study (`sticky-bench --help`).
BENCH_QUICK = $(if $(QUICK),--quick)
bench:
	scripts/ensure-redis.sh
	cargo build --release --locked
	cargo build --release --locked -p sticky-bench
ifdef OVERLOAD
	@if [ "$$(nproc)" -gt 1 ]; then \
	  set -x; taskset -c 1-$$(($$(nproc) - 1)) target/release/sticky-bench --overload --server-cpus 0 $(BENCH_ARGS); \
	else \
	  set -x; target/release/sticky-bench --overload $(BENCH_ARGS); \
	fi
else
	target/release/sticky-bench $(BENCH_QUICK) $(BENCH_ARGS)
	target/release/sticky-bench --platform $(BENCH_QUICK) $(PLATFORM_ARGS)
endif

# The platform study alone (bench/README.md, "Platform scale"): RecordOutcome
# at 10 and at 100,000 merchants over 10 tenants, breaker on and
# pin_connector sent, against 100,000 with the breaker off and no
# pin_connector; errors, p99, CPU per call, the service's Redis calls on the
# request path and in the background, its API health through each run, and
# issue 41's targets. QUICK=1 and PLATFORM_ARGS as for `bench`.
bench-platform:
	scripts/ensure-redis.sh
	cargo build --release --locked
	cargo build --release --locked -p sticky-bench
	target/release/sticky-bench --platform $(BENCH_QUICK) $(PLATFORM_ARGS)

# What tracing costs: service CPU per call with no OTLP endpoint, with one
# and nothing sampled, and with one in ten traces kept; `sticky-bench
# --quick` runs, interleaved (scripts/bench-tracing.sh; ROUNDS, DURATION).
bench-tracing:
	scripts/bench-tracing.sh

# `sticky-routing import` against a fresh local redis-server, and its floor
# (the same script driven by redis-benchmark); a markdown table of medians
# (bench/README.md, "Import"). ROWS, RUNS, CUSTOMERS change the run.
bench-import:
	scripts/ensure-redis.sh
	cargo build --release --locked
	scripts/bench-import.sh

# `sticky-routing replay` on generated CSV histories (no Redis): attempts
# per second on one core and bytes per customer with habits; a markdown
# table of medians (bench/README.md, "Replay"). ROWS, CUSTOMERS, RUNS
# change the run.
bench-replay:
	cargo build --release --locked
	scripts/bench-replay.sh
