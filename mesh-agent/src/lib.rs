//! # mesh-agent
//!
//! Turns user code into an A2A agent on the bus: task lifecycle, streaming, cancellation,
//! discovery and presence, scale-out over shared subscriptions, calls to peer agents.
