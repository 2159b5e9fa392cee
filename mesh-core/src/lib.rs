//! # mesh-core
//!
//! The ground every part of the mesh stands on:
//!
//! - [`model`]: the one internal A2A model (the protocol's v1.0 types), whatever dialect a
//!   peer speaks;
//! - [`dialect`] and [`codec`]: which protocol generation a request speaks (0.1, 0.3, 1.0),
//!   and how each one is read into the model and written back out of it;
//! - [`jsonrpc`] and [`error`]: the JSON-RPC 2.0 envelope and the A2A error table;
//! - [`rpc`]: a decoded request (method and typed params) and a decoded reply;
//! - [`topic`]: the MQTT topic scheme, and the refusal of hostile topic segments;
//! - [`bus`]: the MQTT connection shared by agents and gateways (reconnects, re-subscribes,
//!   routes incoming messages to subscriptions);
//! - [`meta`]: the reserved metadata key `_mesh` that carries routing on the bus;
//! - [`registry`]: the live view of the mesh's agents, cards and instances;
//! - [`requester`]: sending a request to an agent and receiving its replies;
//! - [`sse`]: server-sent events read from a gateway's stream;
//! - [`tls`]: TLS for every client (the bus, webhooks, HTTP clients): one crypto provider,
//!   one way to load trusted roots;
//! - [`card_signing`]: signed agent cards (A2A §8.4): ES256 keys, the canonical form, sign
//!   and verify;
//! - [`sched`]: the CPU scheduling policy a process runs in (an agent's wake-ups).

pub mod bus;
pub mod card_signing;
pub mod codec;
pub mod dialect;
pub mod error;
pub mod flow;
pub mod grants;
pub mod jsonrpc;
pub mod meta;
pub mod model;
pub mod registry;
pub mod requester;
pub mod rpc;
pub mod sched;
pub mod seq_window;
pub mod sse;
pub mod sync;
pub mod tls;
pub mod topic;
