//! The integration tests of mesh-agent: the task lifecycle, discovery and presence, signed cards and their re-assertion, scale-out and peer calls, against real brokers.
//!
//! One test binary for the crate (each module was a binary of its own): the heavy
//! dependencies are linked once. Run one module with `cargo test -p mesh-agent --test it <module>::`.

mod discovery;
mod lifecycle;
mod reassert;
mod scale_and_peers;
mod support;
