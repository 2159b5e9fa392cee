//! What the agent kinds cost (`--only tools`), each against its own floor in the same run:
//!
//! - **The MCP bridge**: a tool call through the mesh (JSON-RPC `message/send` to the gateway,
//!   the bus, `mesh agent mcp`, the MCP server over stdio, and back), against the same call
//!   made straight to the same server by the same MCP client (mesh-mcp's); the server is the
//!   test server's `shout` (scripts/mcp/test_server.py, the official Python SDK). Sequential
//!   calls, after a warm-up.
//! - **The LLM agent**: the time to the first streamed token through the gateway (a JSON-RPC
//!   `message/stream` to `mesh agent llm`, until the first artifact chunk), against the model
//!   server's own (a streamed chat completion until its first content delta); llama.cpp's
//!   server with the toy model (mesh-llm/tests/fixtures), no tools on offer.
//!
//! They need `MESH_MCP_PYTHON` and `MESH_LLM_SERVER` (scripts/bench installs both, as
//! scripts/test does); a row without its server says why.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mesh_core::sse::SseParser;
use mesh_llm::chat::{ChatClient, ChatMessage};
use mesh_mcp::{Backoff, McpConnection, McpServer};
use serde_json::json;

use crate::log;
use crate::procs::{self, BrokerKind, BrokerProc, Proc, Store};
use crate::stats::Latencies;
use crate::suite::{Figure, Plan};

/// Calls (and first tokens) measured per row, after the warm-up.
const SAMPLES: usize = 200;

/// Unmeasured calls first.
const WARM_UP: usize = 20;

/// First tokens measured per LLM row (each one a model request).
const TTFT_SAMPLES: usize = 30;

/// The figures of the agent kinds' rows.
#[derive(Debug, Clone)]
pub struct ToolRows {
    pub mcp_direct: Figure<Latencies>,
    pub mcp_mesh: Figure<Latencies>,
    pub llm_direct: Figure<Latencies>,
    pub llm_mesh: Figure<Latencies>,
}

/// Runs the rows through Mosquitto.
pub async fn run(plan: &Plan) -> ToolRows {
    let broker = match BrokerProc::start(BrokerKind::Mosquitto, &plan.dir, &plan.mesh) {
        Ok(broker) => broker,
        Err(e) => {
            return ToolRows {
                mcp_direct: Err(e.clone()),
                mcp_mesh: Err(e.clone()),
                llm_direct: Err(e.clone()),
                llm_mesh: Err(e),
            };
        }
    };
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client");
    let gateway = procs::start_gateway(
        &plan.dir,
        &plan.mesh,
        &broker.url(),
        "tools",
        Store::Memory,
        &http,
    )
    .await;
    let (mcp_direct, mcp_mesh) = match (&gateway, mcp_server()) {
        (Ok((_, base)), Ok(server)) => {
            log("[tools] the MCP bridge");
            mcp_rows(plan, &broker.url(), base, server, &http).await
        }
        (Err(e), _) => (Err(e.clone()), Err(e.clone())),
        (_, Err(e)) => (Err(e.clone()), Err(e)),
    };
    let (llm_direct, llm_mesh) = match (&gateway, std::env::var_os("MESH_LLM_SERVER")) {
        (Ok((_, base)), Some(binary)) => {
            log("[tools] the LLM agent's first token");
            llm_rows(plan, &broker.url(), base, &binary, &http).await
        }
        (Err(e), _) => (Err(e.clone()), Err(e.clone())),
        (_, None) => {
            let why = "MESH_LLM_SERVER is unset (scripts/bench sets it)".to_owned();
            (Err(why.clone()), Err(why))
        }
    };
    ToolRows {
        mcp_direct,
        mcp_mesh,
        llm_direct,
        llm_mesh,
    }
}

/// The test server with `shout` alone.
fn mcp_server() -> Result<McpServer, String> {
    let python = std::env::var("MESH_MCP_PYTHON")
        .map_err(|_| "MESH_MCP_PYTHON is unset (scripts/bench sets it)".to_owned())?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/mcp/test_server.py");
    Ok(McpServer::Command {
        program: python,
        args: vec![script.to_owned(), "--one-tool".to_owned()],
    })
}

async fn mcp_rows(
    plan: &Plan,
    broker: &str,
    gateway: &str,
    server: McpServer,
    http: &reqwest::Client,
) -> (Figure<Latencies>, Figure<Latencies>) {
    // Straight to the server, with the client the agent uses.
    let connection =
        McpConnection::start(server.clone(), Backoff::default(), Duration::from_secs(30));
    let direct = match connection.wait_started(Duration::from_secs(30)).await {
        Err(why) => Err(why),
        Ok(_) => {
            let mut samples = Latencies::default();
            let mut failed = None;
            for i in 0..WARM_UP + SAMPLES {
                let arguments = json!({"text": "bench"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                let began = Instant::now();
                let result = match connection.invoke("shout", arguments).await {
                    Ok(invocation) => invocation.result().await,
                    Err(why) => Err(why),
                };
                match result {
                    Ok(_) if i >= WARM_UP => samples.push(began.elapsed()),
                    Ok(_) => {}
                    Err(why) => {
                        failed = Some(why);
                        break;
                    }
                }
            }
            failed.map_or(Ok(samples), Err)
        }
    };
    connection.stop();
    // Through the mesh.
    let McpServer::Command { program, args } = server else {
        return (direct, Err("not a command".into()));
    };
    let mut agent_args = vec![
        "agent".to_owned(),
        "mcp".to_owned(),
        "--name=shouter".to_owned(),
        format!("--broker-url={broker}"),
        "--namespace=tools".to_owned(),
        "--".to_owned(),
        program,
    ];
    agent_args.extend(args);
    let agent = Proc::spawn(&plan.dir, "agent-mcp-shouter", &plan.mesh, &agent_args);
    let mesh = match agent {
        Err(e) => Err(format!("cannot start mesh agent mcp: {e}")),
        Ok(_agent) => {
            let listed = crate::discovery::wait_listed(
                http,
                gateway,
                "shouter",
                true,
                Duration::from_secs(30),
            )
            .await;
            if listed.is_none() {
                Err("the MCP agent was not listed within 30 s".to_owned())
            } else {
                let mut samples = Latencies::default();
                let mut failed = None;
                for i in 0..WARM_UP + SAMPLES {
                    let body = json!({"jsonrpc": "2.0", "id": i, "method": "message/send",
                        "params": {"message": {"kind": "message", "role": "user",
                            "messageId": format!("bench-{i}"),
                            "parts": [{"kind": "data", "data": {"tool": "shout", "arguments": {"text": "bench"}}}]}}});
                    let began = Instant::now();
                    let answer = http
                        .post(format!("{gateway}/agents/shouter"))
                        .json(&body)
                        .send()
                        .await;
                    let text = match answer {
                        Ok(answer) => answer.text().await.unwrap_or_default(),
                        Err(e) => e.to_string(),
                    };
                    if !text.contains("\"completed\"") {
                        failed = Some(format!(
                            "not completed: {}",
                            text.chars().take(300).collect::<String>()
                        ));
                        break;
                    }
                    if i >= WARM_UP {
                        samples.push(began.elapsed());
                    }
                }
                failed.map_or(Ok(samples), Err)
            }
        }
    };
    (direct, mesh)
}

async fn llm_rows(
    plan: &Plan,
    broker: &str,
    gateway: &str,
    binary: &std::ffi::OsStr,
    http: &reqwest::Client,
) -> (Figure<Latencies>, Figure<Latencies>) {
    let model = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../mesh-llm/tests/fixtures/toy-agent.gguf"
    ));
    let server = mesh_testkit::model_server::ModelServer::start(binary, model).await;
    let text = format!(
        "name = \"ttft\"\n[model]\nurl = \"{}\"\nname = \"toy\"\nmax_tokens = 8\n[tools]\nask_user = false\n",
        server.url
    );
    let config = match mesh_llm::LlmConfig::parse(&text, |_| None) {
        Ok(config) => config,
        Err(e) => return (Err(e.to_string()), Err(e.to_string())),
    };
    // The model server's own first token.
    let chat = ChatClient::new(config.model.clone());
    let mut direct = Latencies::default();
    let mut direct_failed = None;
    for i in 0..TTFT_SAMPLES + 3 {
        let messages = [ChatMessage::text("user", format!("hello {i}"))];
        let began = Instant::now();
        let first = async {
            let mut stream = chat.stream(&messages, &[], Duration::from_secs(30)).await?;
            // The first content delta (or the end of a turn without any).
            stream.next().await?;
            Ok::<_, mesh_llm::chat::ChatError>(began.elapsed())
        };
        match first.await {
            Ok(elapsed) if i >= 3 => direct.push(elapsed),
            Ok(_) => {}
            Err(e) => {
                direct_failed = Some(e.to_string());
                break;
            }
        }
    }
    // Through the gateway and `mesh agent llm`.
    let file = plan.dir.join("ttft.toml");
    if let Err(e) = std::fs::write(&file, &text) {
        return (
            direct_failed.map_or(Ok(direct.clone()), Err),
            Err(e.to_string()),
        );
    }
    let args = vec![
        "agent".to_owned(),
        "llm".to_owned(),
        format!("--config={}", file.display()),
        format!("--broker-url={broker}"),
        "--namespace=tools".to_owned(),
    ];
    let mesh = match Proc::spawn(&plan.dir, "agent-llm-ttft", &plan.mesh, &args) {
        Err(e) => Err(format!("cannot start mesh agent llm: {e}")),
        Ok(_agent) => {
            if crate::discovery::wait_listed(http, gateway, "ttft", true, Duration::from_secs(30))
                .await
                .is_none()
            {
                Err("the LLM agent was not listed within 30 s".to_owned())
            } else {
                let mut samples = Latencies::default();
                let mut failed = None;
                for i in 0..TTFT_SAMPLES + 3 {
                    match first_chunk(http, gateway, i).await {
                        Ok(elapsed) if i >= 3 => samples.push(elapsed),
                        Ok(_) => {}
                        Err(why) => {
                            failed = Some(why);
                            break;
                        }
                    }
                }
                failed.map_or(Ok(samples), Err)
            }
        }
    };
    (direct_failed.map_or(Ok(direct), Err), mesh)
}

/// The time from a `message/stream` to the first artifact chunk of its answer.
async fn first_chunk(http: &reqwest::Client, gateway: &str, i: usize) -> Result<Duration, String> {
    let body = json!({"jsonrpc": "2.0", "id": i, "method": "message/stream",
        "params": {"message": {"kind": "message", "role": "user", "messageId": format!("ttft-{i}"),
            "parts": [{"kind": "text", "text": format!("hello {i}")}]}}});
    let began = Instant::now();
    let answer = http
        .post(format!("{gateway}/agents/ttft"))
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let mut bytes = answer.bytes_stream();
    let mut parser = SseParser::default();
    while let Some(chunk) = bytes.next().await {
        parser.feed(&chunk.map_err(|e| e.to_string())?);
        for event in parser.take_events() {
            if event.data.contains("\"artifact-update\"") {
                return Ok(began.elapsed());
            }
        }
    }
    Err("the stream ended without an artifact chunk".into())
}

/// The rows as a Markdown table.
pub fn table(rows: &ToolRows) -> String {
    let cell = |f: &Figure<Latencies>| match f {
        Ok(l) => format!(
            "{} / {}",
            crate::report::dur(l.percentile(50.0)),
            crate::report::dur(l.percentile(99.0))
        ),
        Err(e) => format!("not measured: {e}"),
    };
    let overhead = |through: &Figure<Latencies>, direct: &Figure<Latencies>| match (through, direct)
    {
        (Ok(t), Ok(d)) => {
            let (through, direct) = (t.percentile(50.0), d.percentile(50.0));
            match through.checked_sub(direct) {
                Some(extra) => format!("+{} at p50", crate::report::dur(extra)),
                None => format!("-{} at p50", crate::report::dur(direct - through)),
            }
        }
        _ => String::new(),
    };
    let mut out = String::from("| case | p50 / p99 | against its floor |\n| --- | --- | --- |\n");
    out.push_str(&format!(
        "| MCP tool call straight to the server (mesh-mcp's client, stdio) | {} | the floor |\n",
        cell(&rows.mcp_direct)
    ));
    out.push_str(&format!(
        "| MCP tool call through the mesh (gateway, bus, `mesh agent mcp`) | {} | {} |\n",
        cell(&rows.mcp_mesh),
        overhead(&rows.mcp_mesh, &rows.mcp_direct)
    ));
    out.push_str(&format!(
        "| LLM first token, from the model server (llama.cpp, toy model) | {} | the floor |\n",
        cell(&rows.llm_direct)
    ));
    out.push_str(&format!(
        "| LLM first token through the gateway (`mesh agent llm`, SSE) | {} | {} |\n",
        cell(&rows.llm_mesh),
        overhead(&rows.llm_mesh, &rows.llm_direct)
    ));
    out
}
