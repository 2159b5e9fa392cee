//! # mesh-gateway
//!
//! The HTTP face of the mesh: every A2A client, of every protocol generation, reaches every
//! agent on the bus through JSON-RPC over HTTP and SSE.
