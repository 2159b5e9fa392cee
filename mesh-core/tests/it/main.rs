//! The integration tests of mesh-core: the bus against real brokers, and the codecs.
//!
//! One test binary for the crate (each module was a binary of its own): the heavy
//! dependencies are linked once. Run one module with `cargo test -p mesh-core --test it <module>::`.

mod bus_acks;
mod bus_failover;
mod bus_pubsub;
mod bus_reconnect;
mod bus_tls;
mod codec_api;
mod codec_fixtures;
mod codec_no_panic;
mod codec_roundtrip;
mod codec_written;
mod support;
