# The `mesh` binary in a small image: build stage with the Rust toolchain, runtime stage with
# only the binary, running as a non-root user. `docker compose up` uses it for every service.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p mesh-cli \
    && strip target/release/mesh

FROM debian:bookworm-slim
# The system's CA roots: mqtts:// brokers and https:// webhooks are verified against them.
# Unpinned on purpose: CA roots should be the distribution's current ones.
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin mesh \
    && mkdir -p /var/lib/mesh && chown 10001:10001 /var/lib/mesh
COPY --from=build /src/target/release/mesh /usr/local/bin/mesh
# The gateway's durable task store (the user has no home directory for the default one).
ENV MESH_DATA_DIR=/var/lib/mesh
VOLUME /var/lib/mesh
USER 10001:10001
EXPOSE 8080 1884
ENTRYPOINT ["mesh"]
CMD ["up", "--broker-addr", "0.0.0.0:1884", "--http-addr", "0.0.0.0:8080"]
