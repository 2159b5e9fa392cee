//! # mesh-example-agents
//!
//! Example agents, linked into the `mesh` binary so that `mesh agent <name>` runs any of them,
//! and used by the tests of the runtime, the gateway and the CLI:
//!
//! - [`echo`]: answers every message with a completed task whose artifact repeats the parts;
//! - [`writer`]: streams a text artifact in several chunks before completing;
//! - [`flight_booker`]: multi-turn: asks for the details, then books;
//! - [`files`]: file parts in, file parts out, by bytes and by URI;
//! - [`orchestrator`]: delegates to the others and streams their progress.

pub mod echo;
pub mod files;
pub mod flight_booker;
pub mod orchestrator;
pub mod writer;

use mesh_agent::Agent;

/// The README's Rust examples, compiled as doctests so that they cannot rot, with only this
/// crate's dependencies (mesh-agent and tokio) in reach.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The names of the example agents, in the order `mesh up` starts them.
pub const NAMES: &[&str] = &["echo", "writer", "flight-booker", "files", "orchestrator"];

/// The example agent called `name`, if there is one.
pub fn by_name(name: &str) -> Option<Agent> {
    Some(match name {
        "echo" => echo::agent(),
        "writer" => writer::agent(),
        "flight-booker" => flight_booker::agent(),
        "files" => files::agent(),
        "orchestrator" => orchestrator::agent(),
        _ => return None,
    })
}
