//! The integration tests of mesh-broker: the broker's requirements, each measured end to end with rumqttc clients over loopback TCP.
//!
//! One test binary for the crate (each module was a binary of its own): the heavy
//! dependencies are linked once. Run one module with `cargo test -p mesh-broker --test it <module>::`.

mod access;
mod broker;
#[cfg(feature = "cluster")]
mod cluster;
mod support;
