//! What the MCP tests share: where the MCP servers are, an MCP agent started on a bus-side mesh,
//! and a tool call sent to it.

use std::path::{Path, PathBuf};

use mesh_agent::model::{Message, Part, Role};
use mesh_core::dialect::Method;
use mesh_core::requester::ReplyStream;
use mesh_core::rpc::Reply;
use mesh_mcp::{Backoff, McpAgent, McpServer, RunningMcpAgent};
use mesh_testkit::bus_mesh::{BusMesh, collect};
use mesh_testkit::{TestBroker, WAIT};
use serde_json::Value;

/// The Python with the MCP packages, or `None` (the test prints why it is skipped).
pub fn python() -> Option<PathBuf> {
    match std::env::var_os("MESH_MCP_PYTHON") {
        Some(python) => Some(PathBuf::from(python)),
        None => {
            println!("SKIPPED: MESH_MCP_PYTHON is unset (scripts/test sets it)");
            None
        }
    }
}

/// The everything server, or `None`.
pub fn everything() -> Option<McpServer> {
    match std::env::var_os("MESH_MCP_EVERYTHING") {
        Some(program) => Some(McpServer::Command {
            program: program.to_string_lossy().into_owned(),
            args: Vec::new(),
        }),
        None => {
            println!("SKIPPED: MESH_MCP_EVERYTHING is unset (scripts/test sets it)");
            None
        }
    }
}

/// `mcp-server-time`, next to `python`.
pub fn time_server(python: &Path) -> McpServer {
    let program = python.with_file_name("mcp-server-time");
    McpServer::Command {
        program: program.to_string_lossy().into_owned(),
        args: Vec::new(),
    }
}

/// The test server (scripts/mcp/test_server.py) over stdio, with `args`.
pub fn test_server(python: &Path, args: &[&str]) -> McpServer {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/mcp/test_server.py");
    let mut all = vec![script.to_owned()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    McpServer::Command {
        program: python.to_string_lossy().into_owned(),
        args: all,
    }
}

/// A bus-side mesh on Mosquitto.
pub async fn mesh() -> BusMesh {
    BusMesh::on(TestBroker::mosquitto().await).await
}

/// `server` served as the agent `name` on `mesh`, online.
pub async fn start(
    mesh: &BusMesh,
    name: &str,
    server: McpServer,
    backoff: Backoff,
) -> RunningMcpAgent {
    let running = McpAgent::new(name, server)
        .config(mesh.config())
        .backoff(backoff)
        .start(mesh.broker.bus_config())
        .await
        .expect("the MCP agent starts");
    assert!(
        mesh.registry.wait_online(name, WAIT).await,
        "{name} is online"
    );
    running
}

/// A message calling `tool` with `arguments`.
pub fn tool_call(tool: &str, arguments: Value) -> Message {
    Message::new(
        Role::User,
        vec![Part::data(
            serde_json::json!({"tool": tool, "arguments": arguments}),
        )],
    )
}

/// Sends `message` to `agent` and gives the reply stream.
pub async fn send(
    mesh: &BusMesh,
    agent: &str,
    message: Message,
    method: Method,
) -> (String, ReplyStream) {
    mesh.send_message(agent, message, method, None).await
}

/// Sends `message` to `agent` and gives every event of its answer.
pub async fn ask(mesh: &BusMesh, agent: &str, message: Message) -> Vec<Reply> {
    let (_, stream) = send(mesh, agent, message, Method::SendStreamingMessage).await;
    collect(stream)
        .await
        .into_iter()
        .map(|d| d.reply.expect("an event, not an error"))
        .collect()
}

/// The final task of `events` (a non-streaming answer or the last status), its state and
/// status text.
pub fn ending(events: &[Reply]) -> (mesh_agent::model::TaskState, String) {
    let status = match events.last().expect("an event") {
        Reply::Task(task) => task.status.clone(),
        Reply::StatusUpdate(update) => update.status.clone(),
        other => panic!("not an ending: {other:?}"),
    };
    let text = status
        .message
        .as_ref()
        .and_then(|m| m.parts.first())
        .and_then(Part::as_text)
        .unwrap_or_default()
        .to_owned();
    (status.state, text)
}

/// The parts of the artifacts `events` carry, in order.
pub fn artifact_parts(events: &[Reply]) -> Vec<Part> {
    events
        .iter()
        .filter_map(|e| match e {
            Reply::ArtifactUpdate(update) => Some(update.artifact.parts.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}
