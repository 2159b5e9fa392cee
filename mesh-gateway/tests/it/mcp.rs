//! The gateway's `/mcp`: the agents of the mesh as MCP tools, driven by the official MCP Python
//! SDK (scripts/mcp/gateway_client.py: tools, calls, progress, a question continued by its
//! task id, a canceled call, the tool list's changes); and the API keys in front of it. The SDK
//! part runs when `MESH_MCP_PYTHON` names a Python with the `mcp` package (`scripts/test` sets
//! it).

use crate::support::*;
use mesh_agent::{Agent, Outcome, TaskContext, handler_fn};
use mesh_gateway::ApiKey;
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_python_sdk_sees_the_agents_as_tools_and_calls_them() {
    let Some(python) = std::env::var_os("MESH_MCP_PYTHON") else {
        println!("SKIPPED: MESH_MCP_PYTHON is unset (scripts/test sets it)");
        return;
    };
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/mcp/gateway_client.py"
    );
    let mut client = tokio::process::Command::new(python)
        .args([script, &mesh.url("/mcp")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the MCP client runs");
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut said = Vec::new();
    let mut late = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = tokio::time::timeout(left, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the client hangs after: {said:#?}"))
            .unwrap();
        let Some(line) = line else { break };
        println!("{line}");
        if line.starts_with("CANCELED") {
            // The canceled call's task is canceled at the agent, not left running.
            wait_for_a_canceled_writer_task(&mesh).await;
        }
        if line == "LISTENING" {
            let agent = Agent::new(
                "late",
                handler_fn(|_ctx: TaskContext| async { Ok(Outcome::completed_with("here")) }),
            );
            late = Some(mesh.start_agent(agent).await);
        }
        said.push(line);
    }
    let status = tokio::time::timeout(WAIT, client.wait())
        .await
        .unwrap()
        .unwrap();
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(client.stderr.as_mut().unwrap(), &mut stderr)
        .await
        .unwrap();
    assert!(status.success(), "the client failed: {said:#?}\n{stderr}");
    assert_eq!(
        said.last().map(String::as_str),
        Some("ALL PASSED"),
        "{said:#?}"
    );
    assert!(late.is_some(), "the client listened");
}

/// Waits until a task of the writer agent is canceled (the MCP call that was canceled).
async fn wait_for_a_canceled_writer_task(mesh: &GatewayMesh) {
    let since = Instant::now();
    loop {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks",
                          "params": {"status": "TASK_STATE_CANCELED"}});
        let answer: Value = mesh
            .http
            .post(mesh.url("/agents/writer"))
            .header("a2a-version", "1.0")
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let tasks = answer["result"]["tasks"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !tasks.is_empty() {
            return;
        }
        assert!(
            since.elapsed() < WAIT,
            "no writer task was canceled: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_endpoint_needs_a_key_when_the_gateway_has_keys() {
    let mut mesh = GatewayMesh::start_with(|config| {
        config.api_keys = vec![ApiKey::parse("alice=alice-secret", 1).unwrap()];
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let post = |key: Option<&str>| {
        let mut request = mesh
            .http
            .post(mesh.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };
    let refused = post(None).await.unwrap();
    assert_eq!(refused.status(), 401);
    assert!(refused.headers().contains_key("www-authenticate"));
    assert_eq!(post(Some("wrong")).await.unwrap().status(), 401);
    let accepted = post(Some("alice-secret")).await.unwrap();
    assert_eq!(accepted.status(), 200);
    let body = accepted.text().await.unwrap();
    assert!(body.contains("agent-mesh-gateway"), "{body}");
}
