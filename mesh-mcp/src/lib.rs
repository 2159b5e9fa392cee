//! # mesh-mcp
//!
//! An MCP (Model Context Protocol) server as a mesh agent: `mesh agent mcp --name clock --
//! mcp-server-time` runs the server, reads its tools, and serves them on the bus as the agent
//! `clock`, with the runtime's lifecycle, presence, scale-out and cancel.
//!
//! - [`McpServer`]: what to reach: a command run as a child process (MCP over stdio), or the URL
//!   of a Streamable HTTP server.
//! - [`McpConnection`]: the client, kept up: a stdio server that dies is started again with
//!   backoff, an HTTP server reconnected; meanwhile [`McpConnection::live`] says why it is down,
//!   and requests fail at once with that.
//! - [`McpAgent`]: the agent: its card has one skill per tool (updated when the server announces
//!   a change of its tool list), a message calls a tool ([`call`] says how a message names the
//!   tool and its arguments, and how a result becomes artifacts), MCP progress notifications
//!   become `working` updates, and a canceled task sends MCP's cancellation.

mod agent;
pub mod call;
pub mod card;
mod connection;
mod invoke;
mod restart;
mod server;

pub use agent::{McpAgent, McpAgentError, RunningMcpAgent};
pub use connection::{Live, McpConnection, Progress};
pub use invoke::{CallEvent, Invocation};
pub use restart::Backoff;
pub use server::{McpServer, ServerSpecError};
