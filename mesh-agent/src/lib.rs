//! # mesh-agent
//!
//! Turns user code into an A2A agent on the bus: task lifecycle, streaming, cancellation,
//! deadlines, discovery and presence, scale-out over shared subscriptions, calls to peer
//! agents. The wire protocol it speaks is docs/protocol.md.
//!
//! An echo agent:
//!
//! ```no_run
//! use mesh_agent::{Agent, BusConfig, Outcome, TaskContext, handler_fn, new_artifact};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let echo = Agent::new("echo", handler_fn(|ctx: TaskContext| async move {
//!     let parts = ctx.message().parts.clone();
//!     ctx.artifact(new_artifact(Some("echo".into()), parts)).await?;
//!     Ok(Outcome::completed())
//! }))
//! .description("Repeats every message it receives")
//! .skill("echo", "Echo", "Answers with the parts it was sent");
//!
//! let running = echo.start(BusConfig::new("mqtt://127.0.0.1:1884")?).await?;
//! tokio::signal::ctrl_c().await?;
//! running.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! A handler streams with [`TaskContext::working`], [`TaskContext::artifact`] and an
//! [`ArtifactWriter`] ([`TaskContext::artifact_writer`]: `append`, then `finish`); it asks
//! for more input by returning [`Outcome::input_required`], and the next message of the same
//! task resumes it with the history in [`TaskContext::task`]; it watches
//! [`TaskContext::cancelled`] to stop early; and it calls other agents through
//! [`TaskContext::peers`], whose [`PeerStream`] yields the model's stream events.
//!
//! On Linux, `mesh agent` runs its agents in the `SCHED_BATCH` CPU scheduling policy while the
//! machine's cores are busy, so that a request the broker writes does not preempt the broker
//! (about half an agent's CPU a request at high load: docs/benchmarks.md). A binary of your
//! own gets the same by spawning [`follow_load`] on its runtime
//! (`tokio::spawn(mesh_agent::follow_load())`; it returns an error only when it cannot read
//! the load or set the policy). It is the process's policy, every thread of it, so it is
//! the binary's `main` that chooses it, not an [`Agent`]: a process that also runs a gateway
//! or a broker keeps the default policy.

mod agent;
mod context;
mod dedup;
mod directory;
mod emitter;
mod flow_gate;
mod guard;
mod handler;
mod peer;
mod runner;

pub use agent::{Agent, AgentConfig, AgentError, RunningAgent};
pub use context::{ArtifactWriter, TaskContext, new_artifact};
pub use emitter::EmitError;
pub use handler::{FnHandler, Handler, HandlerError, Outcome, agent_text, handler_fn};
/// How an instance reaches the broker: all an agent needs of the bus.
pub use mesh_core::bus::BusConfig;
/// The A2A model a handler reads and writes (messages, parts, artifacts, tasks, states).
pub use mesh_core::model;
/// Moves the whole process between the default and `SCHED_BATCH` CPU scheduling policies
/// as the machine's cores get busy and idle again (Linux; elsewhere it does nothing).
pub use mesh_core::sched::follow_load;
pub use peer::{PeerAnswer, PeerError, PeerStream, Peers};
/// The JSON of data parts and metadata (`serde_json::Value`, `json!`).
pub use serde_json;
