# Build:  docker build -t sticky-routing:0.1.0 .
# Run:    docker run --rm -p 50051:50051 -p 9464:9464 \
#           -e STICKY_ROUTING_REDIS_URL=redis://host.docker.internal:6379 sticky-routing:0.1.0

# ---- build stage ------------------------------------------------------------
# Edition 2024 / rust-version 1.88 needs a recent toolchain; `1-bookworm` tracks
# the latest stable 1.x on the same Debian release (same glibc) as the runtime.
FROM rust:1-bookworm AS builder
WORKDIR /src

# Plain and predictable: copy the context (.dockerignore keeps target/ and .git
# out) and build. protox compiles proto/ in build.rs, so no protoc is needed.
# The workspace's default member is the service alone, so the benchmark kit
# is neither built nor allowed to add features to the shipped binary.
COPY . .
RUN cargo build --release --locked

# ---- runtime stage ----------------------------------------------------------
FROM debian:bookworm-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 sticky \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin sticky

COPY --from=builder /src/target/release/sticky-routing /usr/local/bin/sticky-routing

# Numeric so Kubernetes `runAsNonRoot` can verify it without reading /etc/passwd.
USER 10001:10001

# 50051: gRPC (+ grpc.health.v1.Health)   9464: Prometheus /metrics
EXPOSE 50051 9464

# Exec form: the binary is PID 1 and receives SIGTERM directly.
ENTRYPOINT ["/usr/local/bin/sticky-routing"]
