# syntax=docker/dockerfile:1
# QueenMQ broker image: `queen serve` as a non-root user with its data on a volume.
#
#   docker build -t queenmq/queen:dev .
#   docker run -p 6632:6632 -v queen-data:/var/lib/queen queenmq/queen:dev
#
# Configuration: QUEEN_* variables or a mounted queen.toml passed with
# --config (docs/configuration.md, docs/deploy.md).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# ---- build ------------------------------------------------------------------
# The full (non-slim) image: kafka-protocol's zstd/lz4 build C code with cc.
FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
WORKDIR /src
COPY . .
# Cache mounts keep the registry and target dir between builds; the binary is
# copied out because the target cache is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p queenmq-broker --bin queen \
    && install -D -m 0755 target/release/queen /out/queen

# ---- run --------------------------------------------------------------------
FROM debian:${DEBIAN_RELEASE}-slim
# curl serves the HEALTHCHECK; ca-certificates any outbound TLS (S3 later).
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
# A fixed numeric uid/gid so Kubernetes can check runAsNonRoot and the chart's
# fsGroup (10001) owns the volume.
RUN groupadd --system --gid 10001 queen \
    && useradd --system --uid 10001 --gid queen --home-dir /var/lib/queen \
        --no-create-home --shell /usr/sbin/nologin queen \
    && install -d -o queen -g queen -m 0750 /var/lib/queen
COPY --from=builder /out/queen /usr/local/bin/queen

# Only the data dir is set here: an image-level QUEEN_HTTP_ADDR would override
# the http_addr of a mounted queen.toml (environment beats the file).
ENV QUEEN_DATA_DIR=/var/lib/queen
VOLUME ["/var/lib/queen"]
EXPOSE 6632 9092
USER 10001:10001

# Liveness per the native API: /health answers while the process serves.
# Assumes the default port 6632; adjust when http_addr changes.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:6632/health"]

# The broker is PID 1 and handles SIGTERM itself (drain, checkpoint, exit 0).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/queen"]
CMD ["serve"]
