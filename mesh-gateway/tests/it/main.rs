//! The integration tests of mesh-gateway: every method through real HTTP, the web console's routes, authentication, the HTTP+JSON binding, push notifications, signed cards, faults, the durable store, HTTPS on the listener and the official a2a-sdk clients (1.x and 0.3.x), against real brokers.
//!
//! One test binary for the crate (each module was a binary of its own): the heavy
//! dependencies are linked once. Run one module with `cargo test -p mesh-gateway --test it <module>::`.

mod auth;
mod bindings;
mod console;
mod failover;
mod faults;
mod http;
mod interop;
mod interop_03;
mod interop_auth;
mod mcp;
mod methods;
mod push;
mod replicas;
mod rest;
mod resume;
mod signed_cards;
mod store;
mod support;
mod tls;
