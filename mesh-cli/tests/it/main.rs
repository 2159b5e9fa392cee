//! The integration tests of mesh-cli: the command line as a user meets it (usage, exit codes, every command against a real mesh), crashes with real processes, the gateway over HTTPS, and secrets kept out of every output.
//!
//! One test binary for the crate (each module was a binary of its own): the heavy
//! dependencies are linked once. Run one module with `cargo test -p mesh-cli --test it <module>::`.

mod cli;
#[cfg(feature = "cluster")]
mod cluster;
mod llm;
mod mcp;
mod replicas;
mod restart;
mod secrets;
mod secure;
mod support;
mod tls;
