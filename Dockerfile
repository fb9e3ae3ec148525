# The service's image: the `sticky-routing` binary alone, on Debian slim, as
# a non-root user. BuildKit (the default builder since Docker 23) is needed
# for the cache mounts.
#
# Build:  docker build -t sticky-routing:0.1.0 \
#           --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" .
# Run:    docker run --rm -p 50051:50051 -p 9464:9464 \
#           -e STICKY_ROUTING_REDIS_URL=redis://host.docker.internal:6379 sticky-routing:0.1.0
#
# `make test` checks this file against the workspace (tests/repo/dockerfile.rs):
# the package and binary it builds, the paths it copies, the pinned digests,
# the labels and the user. No `# syntax=` line: it would pull a frontend image
# that is not pinned here; Docker's built-in frontend reads this file.
#
# Base images are pinned by digest, so a rebuild of the same commit uses the
# same bytes; the tag is there for people. To update one, pick the new tag,
# read its digest (the multi-platform index) with
#   docker buildx imagetools inspect rust:1.95.0-slim-bookworm
# (the `Digest:` line), or from docker-library/repo-info, and replace tag and
# digest together. Keep the builder's Debian release (bookworm) the
# runtime's: the binary links against the builder's glibc.
# The digests below were taken from published records of these tags (the
# debian one from docker-library/repo-info, the bookworm build of
# 2026-08-03), not pulled: check them with the command above before the
# first release build.

# ---- build stage ------------------------------------------------------------
# The toolchain CI tests with; Cargo.toml's rust-version is the floor.
FROM rust:1.95.0-slim-bookworm@sha256:d7482085ff5b415f84dba5647ae71606650bdef00db7aeb69f4b3d170c3e4082 AS builder
WORKDIR /src

# Only what the build reads. bench/ and test-support/ are workspace members,
# so cargo needs their manifests and sources to load the workspace, but
# nothing of them is built. protox compiles proto/ in build.rs, so no protoc
# is needed.
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
COPY src ./src
COPY bench ./bench
COPY test-support ./test-support

# The dependency cache: the registry and target/ live in BuildKit cache
# mounts, so a source change recompiles this crate, not its ~300
# dependencies (they are rebuilt only when Cargo.lock changes them). The
# binary is copied out because a cache mount is not part of the image.
# --package and --bin: the service alone, with exactly its own features
# (bench's fred and tokio features never reach it).
RUN --mount=type=cache,id=sticky-routing-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=sticky-routing-target,target=/src/target,sharing=locked \
    cargo build --release --locked --package sticky-routing --bin sticky-routing \
 && install -D target/release/sticky-routing /out/sticky-routing

# ---- runtime stage ----------------------------------------------------------
FROM debian:bookworm-slim@sha256:abd67ffcfa541b485a3dff59865ab629aa048a6c613e639d36e7456b0b229241

ARG VERSION=0.1.0
ARG REVISION=unknown
# OCI annotations, read by registries and scanners.
LABEL org.opencontainers.image.title="sticky-routing" \
      org.opencontainers.image.description="Sticky connector routing for payment orchestration: per-customer connector habits in Redis, served over gRPC." \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="docker.io/library/debian:bookworm-slim"

RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 sticky \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin sticky

COPY --from=builder /out/sticky-routing /usr/local/bin/sticky-routing

# Numeric so Kubernetes `runAsNonRoot` can verify it without reading /etc/passwd.
USER 10001:10001

# 50051: gRPC   50052: plaintext grpc.health.v1 (probes)   9464: Prometheus /metrics
EXPOSE 50051 50052 9464

# Exec form: the binary is PID 1 and receives SIGTERM directly.
ENTRYPOINT ["/usr/local/bin/sticky-routing"]
