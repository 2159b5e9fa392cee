//! # mesh-testkit
//!
//! What the tests of every crate share: a real broker per test (the embedded one, or a
//! Mosquitto process on a free port with `set_tcp_nodelay true`) and a fresh namespace, so
//! that parallel tests never see each other's traffic.
