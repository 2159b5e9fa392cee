# The `mesh` binary in a small image: build stage with the Rust toolchain, runtime stage with
# only the binary, running as a non-root user. Every service of docker-compose.yml uses it.
#
# Build argument MESH_PREBUILT: the path, inside the build context, of a `mesh` binary built
# elsewhere for Debian 12 (glibc 2.36 or older), taken instead of compiling one here;
# scripts/compose-check hands in the one CI built. Empty (the default): compiled from source.
# Build argument MESH_FEATURES: cargo features of mesh-cli to compile in, e.g. `cluster` (the
# broker as a cluster node, deploy/cluster/), which needs protoc: installed here then.
FROM rust:1.95-slim-bookworm AS build
ARG MESH_PREBUILT=""
ARG MESH_FEATURES=""
WORKDIR /src
COPY . .
# hadolint ignore=DL3008
RUN if [ -z "$MESH_PREBUILT" ] && [ -n "$MESH_FEATURES" ]; then \
        apt-get update && apt-get install -y --no-install-recommends protobuf-compiler \
        && rm -rf /var/lib/apt/lists/*; \
    fi
RUN if [ -n "$MESH_PREBUILT" ]; then \
        install -D -m 0755 "$MESH_PREBUILT" /out/mesh; \
    else \
        cargo build --release --locked -p mesh-cli --features "$MESH_FEATURES" \
        && strip target/release/mesh \
        && install -D -m 0755 target/release/mesh /out/mesh; \
    fi

FROM debian:bookworm-slim
# The system's CA roots: mqtts:// brokers and https:// webhooks are verified against them.
# Unpinned on purpose: CA roots should be the distribution's current ones.
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin mesh \
    && mkdir -p /var/lib/mesh && chown 10001:10001 /var/lib/mesh
COPY --from=build /out/mesh /usr/local/bin/mesh
# MESH_DATA_DIR: the gateway's durable task store (the user has no home directory for the
# default one). Not a VOLUME, which would give every container of the image (each agent too)
# an anonymous volume that outlives it: mount a named volume here where tasks must outlive the
# container, as docker-compose.yml does for the gateway.
# MESH_PUBLIC_URL: what the default command's cards advertise (the address it binds, 0.0.0.0,
# is no address for a client): right for `docker run -p 8080:8080`, else set it.
ENV MESH_DATA_DIR=/var/lib/mesh \
    MESH_PUBLIC_URL=http://localhost:8080
USER 10001:10001
EXPOSE 8080 1884
ENTRYPOINT ["mesh"]
CMD ["up", "--broker-addr", "0.0.0.0:1884", "--http-addr", "0.0.0.0:8080"]
