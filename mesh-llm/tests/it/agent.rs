//! `mesh agent llm` against llama.cpp's server: a peer agent and an MCP tool called by the
//! model, the answer streamed as artifact chunks, a question to the user continued in the same
//! task, a cancel that stops the stream, and the model server's failures.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mesh_agent::model::{Part, TaskState};
use mesh_agent::{Agent, Outcome, TaskContext, handler_fn};
use mesh_core::dialect::Method;
use mesh_core::rpc::Reply;
use mesh_testkit::WAIT;
use mesh_testkit::bus_mesh::{BusMesh, collect, user};

use crate::support::*;

/// Every event of the answer to `text`.
async fn ask(mesh: &BusMesh, text: &str) -> (String, Vec<Reply>) {
    let (task_id, stream) = mesh
        .send("assistant", text, Method::SendStreamingMessage)
        .await;
    let events = collect(stream)
        .await
        .into_iter()
        .map(|d| d.reply.expect("an event"))
        .collect();
    (task_id, events)
}

/// The state the events end in, and the final status's text.
fn ending(events: &[Reply]) -> (TaskState, String) {
    let status = match events.last().expect("events") {
        Reply::StatusUpdate(update) => update.status.clone(),
        Reply::Task(task) => task.status.clone(),
        other => panic!("not an ending: {other:?}"),
    };
    let text = status
        .message
        .iter()
        .flat_map(|m| &m.parts)
        .filter_map(Part::as_text)
        .collect::<Vec<_>>()
        .join("");
    (status.state, text)
}

fn working_texts(events: &[Reply]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Reply::StatusUpdate(u) if u.status.state == TaskState::Working => u
                .status
                .message
                .as_ref()
                .and_then(|m| m.parts.first())
                .and_then(Part::as_text)
                .map(str::to_owned),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_calls_a_peer_agent_and_its_answer_streams_as_artifact_chunks() {
    let Some(binary) = server_binary() else {
        return;
    };
    let server = model_server(&binary).await;
    let mesh = BusMesh::start().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let probe = Agent::new(
        "probe",
        handler_fn(move |_ctx: TaskContext| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(Outcome::completed_with("probe was here"))
            }
        }),
    )
    .description("Says it was here");
    let probe = mesh.run(probe).await;
    let agent = start(
        &mesh,
        config(&server.url, "agents = [\"probe\"]\nask_user = false", 256),
    )
    .await;

    let (_, events) = ask(&mesh, "ask the probe").await;
    let (state, text) = ending(&events);
    assert_eq!(state, TaskState::Completed, "{events:#?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the model called the peer once"
    );
    assert!(
        working_texts(&events).contains(&"calling probe".to_owned()),
        "{events:#?}"
    );
    // The answer came as artifact chunks, the last one marked, and is the final status too.
    let chunks: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Reply::ArtifactUpdate(u) => Some(u.clone()),
            _ => None,
        })
        .collect();
    assert!(!chunks.is_empty(), "{events:#?}");
    assert_eq!(chunks.last().unwrap().last_chunk, Some(true));
    assert!(
        chunks
            .iter()
            .all(|c| c.artifact.name.as_deref() == Some("answer"))
    );
    let streamed: String = chunks
        .iter()
        .flat_map(|c| &c.artifact.parts)
        .filter_map(Part::as_text)
        .collect();
    assert_eq!(
        streamed.trim(),
        text,
        "the status text is the streamed answer"
    );
    agent.shutdown().await;
    probe.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_calls_an_mcp_servers_tool() {
    let Some(binary) = server_binary() else {
        return;
    };
    let Some(python) = std::env::var_os("MESH_MCP_PYTHON") else {
        println!("SKIPPED: MESH_MCP_PYTHON is unset (scripts/test sets it)");
        return;
    };
    let server = model_server(&binary).await;
    let mesh = BusMesh::start().await;
    let marks = std::env::temp_dir().join(format!(
        "mesh-llm-marks-{}",
        mesh_testkit::fresh_namespace()
    ));
    std::fs::create_dir_all(&marks).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/mcp/test_server.py");
    let tools = format!(
        "ask_user = false\n[[tools.mcp]]\nname = \"loud\"\ncommand = [{:?}, {:?}, \"--one-tool\", \"--marks\", {:?}]",
        python.to_string_lossy(),
        script,
        marks.to_string_lossy()
    );
    let agent = start(&mesh, config(&server.url, &tools, 256)).await;
    let (_, events) = ask(&mesh, "shout something").await;
    assert_eq!(ending(&events).0, TaskState::Completed, "{events:#?}");
    assert!(
        working_texts(&events).contains(&"calling loud__shout".to_owned()),
        "{events:#?}"
    );
    assert!(marks.join("shouted").exists(), "the MCP server's tool ran");
    agent.shutdown().await;
    let _ = std::fs::remove_dir_all(&marks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_to_the_user_waits_for_input_and_the_answer_continues_the_task() {
    let Some(binary) = server_binary() else {
        return;
    };
    let server = model_server(&binary).await;
    let mesh = BusMesh::start().await;
    let agent = start(&mesh, config(&server.url, "ask_user = true", 256)).await;
    let (task_id, events) = ask(&mesh, "book me something").await;
    assert_eq!(ending(&events).0, TaskState::InputRequired, "{events:#?}");
    // The answer, on the same task: the model reads it as its question's result and answers.
    let Reply::Task(task) = events.first().unwrap() else {
        panic!("the task first")
    };
    let mut snapshot = task.clone();
    if let Some(Reply::StatusUpdate(last)) = events.last() {
        snapshot.status = last.status.clone();
    }
    let mut answer = user("tomorrow, please");
    answer.task_id = Some(task_id.clone());
    let (_, stream) = mesh
        .send_message(
            "assistant",
            answer,
            Method::SendStreamingMessage,
            Some(snapshot),
        )
        .await;
    let events: Vec<Reply> = collect(stream)
        .await
        .into_iter()
        .map(|d| d.reply.unwrap())
        .collect();
    let (state, text) = ending(&events);
    assert_eq!(state, TaskState::Completed, "{events:#?}");
    assert_eq!(text, "OK", "the model read its question's answer");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceling_the_task_stops_the_models_stream() {
    let Some(binary) = server_binary() else {
        return;
    };
    let server = model_server(&binary).await;
    let mesh = BusMesh::start().await;
    // No tools: the toy model writes word salad until max_tokens.
    let agent = start(&mesh, config(&server.url, "ask_user = false", 4000)).await;
    let (task_id, mut stream) = mesh
        .send("assistant", "talk", Method::SendStreamingMessage)
        .await;
    let mut chunks = 0;
    while chunks < 3 {
        let delivery = tokio::time::timeout(WAIT, stream.next())
            .await
            .unwrap()
            .unwrap();
        if let Ok(Reply::ArtifactUpdate(_)) = delivery.reply {
            chunks += 1;
        }
    }
    let started = Instant::now();
    let canceled = mesh
        .requester
        .cancel("assistant", &task_id, WAIT)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_servers_failures_fail_the_task_saying_which() {
    let Some(binary) = server_binary() else {
        return;
    };
    let server = model_server(&binary).await;
    let mesh = BusMesh::start().await;
    // Nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let agent = start(
        &mesh,
        config(
            &format!("http://127.0.0.1:{closed}/v1"),
            "ask_user = false",
            64,
        ),
    )
    .await;
    let (_, events) = ask(&mesh, "hello?").await;
    let (state, text) = ending(&events);
    assert_eq!(state, TaskState::Failed);
    assert!(text.contains("could not be reached"), "{text}");
    agent.shutdown().await;
    // A path the server does not serve: its HTTP error, quoted.
    let wrong = server.url.replace("/v1", "/nowhere");
    let agent = start(&mesh, config(&wrong, "ask_user = false", 64)).await;
    let (_, events) = ask(&mesh, "hello?").await;
    let (state, text) = ending(&events);
    assert_eq!(state, TaskState::Failed);
    assert!(text.contains("answered 404"), "{text}");
    agent.shutdown().await;
}
