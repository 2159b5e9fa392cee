//! # mesh-bench
//!
//! The mesh measured against the physical limit (raw MQTT request/reply through the same
//! broker, in the same run) and against its peers, through each of the gateway's bindings
//! (JSON-RPC, HTTP+JSON, gRPC), in one command:
//! `cargo run --release -p mesh-bench` (or `scripts/bench`, which installs wrk and builds the
//! `mesh` binary first). See `docs/benchmarks.md` for the table and what dominates each
//! figure. The codecs are timed by [`codecs`]; signed agent cards by the criterion bench
//! `benches/cards.rs`.
//!
//! `mesh-chaos` ([`chaos`]) is no benchmark: the client of the chaos run
//! (`scripts/compose-check --cluster`), a steady load through a load balancer while parts of
//! the mesh are killed, and a verdict on what hung or was lost.

pub mod chaos;
pub mod cluster;
pub mod codecs;
pub mod copies;
pub mod curves;
pub mod discovery;
pub mod e2e;
pub mod fleet;
pub mod follow;
pub mod grpc_load;
pub mod machine;
pub mod memory;
pub mod mesh_up;
pub mod paired;
pub mod payload;
pub mod procs;
pub mod raw_mqtt;
pub mod report;
pub mod resume;
pub mod samples;
pub mod sse;
pub mod stats;
pub mod stores;
pub mod suite;
pub mod tools;

/// A progress line on stderr (the table goes to stdout).
pub fn log(line: &str) {
    eprintln!("mesh-bench: {line}");
}
