# The README's two commands: `make run` and `make test`.
.PHONY: run test lint ci bench

# The service against a local redis-server that it starts itself.
run:
	scripts/run-local.sh

# The whole suite: unit, property and integration tests on real Redis.
test:
	scripts/ensure-redis.sh
	cargo test --locked

# What CI checks besides the tests.
lint:
	cargo fmt --check
	cargo clippy --locked --all-targets -- -D warnings

ci: lint test

# The service against its transport and storage floors, on its own Redis;
# prints a markdown table (bench/README.md explains it).
bench:
	scripts/ensure-redis.sh
	cargo build --release --locked
	target/release/sticky-bench
