//! `mesh agent mcp` against real MCP servers: tools as skills, calls and their results, progress,
//! cancellation, a server that dies, a tool list that changes, and a server over HTTP.

use std::time::{Duration, Instant};

use mesh_agent::model::{Message, Part, PartContent, Role, TaskState};
use mesh_core::dialect::Method;
use mesh_core::registry::RegistryEvent;
use mesh_core::rpc::Reply;
use mesh_mcp::card::TOOLS_EXTENSION;
use mesh_mcp::{Backoff, McpServer};
use mesh_testkit::WAIT;
use serde_json::json;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_servers_tools_are_skills_and_a_call_answers_with_its_result() {
    let Some(python) = python() else { return };
    let mesh = mesh().await;
    let clock = start(&mesh, "clock", time_server(&python), Backoff::default()).await;
    let card = mesh
        .registry
        .agent("clock")
        .and_then(|a| a.card)
        .expect("a card");
    let skills: Vec<&str> = card.skills.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(skills, ["get_current_time", "convert_time"]);
    let extension = card
        .capabilities
        .extensions
        .iter()
        .flatten()
        .find(|e| e.uri == TOOLS_EXTENSION)
        .expect("the tools' schemas");
    let schemas = &extension.params.as_ref().unwrap()["tools"];
    assert_eq!(schemas["get_current_time"]["required"], json!(["timezone"]));

    let events = ask(
        &mesh,
        "clock",
        tool_call("get_current_time", json!({"timezone": "Etc/UTC"})),
    )
    .await;
    assert_eq!(ending(&events).0, TaskState::Completed, "{events:#?}");
    let parts = artifact_parts(&events);
    assert!(parts[0].as_text().unwrap().contains("Etc/UTC"), "{parts:?}");
    let structured = parts.iter().find_map(|p| match &p.content {
        PartContent::Data(data) => Some(data.clone()),
        _ => None,
    });
    assert_eq!(
        structured.expect("structured content")["timezone"],
        "Etc/UTC"
    );

    // The tool's error fails the task with the tool's words.
    let events = ask(
        &mesh,
        "clock",
        tool_call("get_current_time", json!({"timezone": "Mars/Base"})),
    )
    .await;
    let (state, text) = ending(&events);
    assert_eq!(state, TaskState::Failed);
    assert!(text.contains("Mars/Base"), "{text}");
    // A message that names no tool fails saying how to name one.
    let events = ask(
        &mesh,
        "clock",
        Message::new(Role::User, vec![Part::text("what time is it?")]),
    )
    .await;
    let (state, text) = ending(&events);
    assert_eq!(state, TaskState::Failed);
    assert!(
        text.contains("tools: get_current_time, convert_time"),
        "{text}"
    );
    clock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_calls_a_servers_only_tool_that_takes_one_string() {
    let Some(python) = python() else { return };
    let mesh = mesh().await;
    let shouter = start(
        &mesh,
        "shouter",
        test_server(&python, &["--one-tool"]),
        Backoff::default(),
    )
    .await;
    let events = ask(
        &mesh,
        "shouter",
        Message::new(Role::User, vec![Part::text("hello, mesh")]),
    )
    .await;
    assert_eq!(ending(&events).0, TaskState::Completed, "{events:#?}");
    assert_eq!(artifact_parts(&events)[0].as_text(), Some("HELLO, MESH"));
    shouter.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_structured_content_and_resources_become_parts_and_progress_working_updates() {
    let Some(server) = everything() else { return };
    let mesh = mesh().await;
    let everything = start(&mesh, "everything", server, Backoff::default()).await;

    let events = ask(&mesh, "everything", tool_call("get-tiny-image", json!({}))).await;
    let parts = artifact_parts(&events);
    let image = parts
        .iter()
        .find(|p| p.media_type.as_deref() == Some("image/png"))
        .unwrap_or_else(|| panic!("an image part: {parts:?}"));
    let PartContent::Raw(bytes) = &image.content else {
        panic!("the image's bytes: {image:?}")
    };
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG");

    let events = ask(
        &mesh,
        "everything",
        tool_call("get-structured-content", json!({"location": "Chicago"})),
    )
    .await;
    let data = artifact_parts(&events)
        .into_iter()
        .find_map(|p| match p.content {
            PartContent::Data(data) => Some(data),
            _ => None,
        })
        .expect("a data part");
    assert!(data.get("temperature").is_some(), "{data}");

    let events = ask(
        &mesh,
        "everything",
        tool_call(
            "get-resource-reference",
            json!({"resourceType": "Text", "resourceId": 1}),
        ),
    )
    .await;
    let file = artifact_parts(&events)
        .into_iter()
        .find(|p| matches!(p.content, PartContent::Raw(_)) && p.filename.is_some())
        .unwrap_or_else(|| panic!("an embedded resource as a file: {events:#?}"));
    assert!(file.media_type.is_some(), "{file:?}");

    let events = ask(
        &mesh,
        "everything",
        tool_call(
            "trigger-long-running-operation",
            json!({"duration": 1, "steps": 4}),
        ),
    )
    .await;
    let progress: Vec<String> = events
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
        .filter(|text| text.contains(" of 4"))
        .collect();
    assert!(
        progress.len() >= 2,
        "progress as working updates: {events:#?}"
    );
    assert_eq!(ending(&events).0, TaskState::Completed);
    everything.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceling_the_task_cancels_the_tool_call() {
    let Some(python) = python() else { return };
    let marks = std::env::temp_dir().join(format!(
        "mesh-mcp-marks-{}",
        mesh_testkit::fresh_namespace()
    ));
    std::fs::create_dir_all(&marks).unwrap();
    let mesh = mesh().await;
    let server = test_server(&python, &["--marks", marks.to_str().unwrap()]);
    let agent = start(&mesh, "sleeper", server, Backoff::default()).await;
    let (task_id, mut stream) = send(
        &mesh,
        "sleeper",
        tool_call("slow", json!({"seconds": 30})),
        Method::SendStreamingMessage,
    )
    .await;
    // Wait for the first progress update: the call runs on the server.
    loop {
        let delivery = tokio::time::timeout(WAIT, stream.next())
            .await
            .unwrap()
            .expect("events");
        if let Ok(Reply::StatusUpdate(u)) = &delivery.reply
            && u.status
                .message
                .iter()
                .flat_map(|m| &m.parts)
                .any(|p| p.as_text().is_some_and(|t| t.contains("slow: ")))
        {
            break;
        }
    }
    let canceled = mesh
        .requester
        .cancel("sleeper", &task_id, WAIT)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    let mark = marks.join("canceled");
    let since = Instant::now();
    while !mark.exists() {
        assert!(
            since.elapsed() < WAIT,
            "the server never saw the cancellation"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    agent.shutdown().await;
    let _ = std::fs::remove_dir_all(&marks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_fails_requests_at_once_and_is_started_again() {
    let Some(python) = python() else { return };
    let mesh = mesh().await;
    let backoff = Backoff::new(
        Duration::from_secs(2),
        Duration::from_secs(2),
        Duration::from_secs(60),
    );
    let agent = start(&mesh, "fragile", test_server(&python, &[]), backoff).await;
    let events = ask(&mesh, "fragile", tool_call("crash", json!({}))).await;
    let (state, text) = ending(&events);
    assert_eq!(state, TaskState::Failed, "{text}");
    // Down now: the next request fails at once, saying why and when it is tried again.
    let started = Instant::now();
    let events = ask(&mesh, "fragile", tool_call("fail", json!({"reason": "x"}))).await;
    let (state, text) = ending(&events);
    assert_eq!(state, TaskState::Failed);
    assert!(
        text.contains("not available") && text.contains("tried again"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "failed fast: {:?}",
        started.elapsed()
    );
    // Started again after the backoff: calls are answered.
    agent
        .connection()
        .wait_live(WAIT)
        .await
        .expect("the server is started again");
    let events = ask(
        &mesh,
        "fragile",
        tool_call("fail", json!({"reason": "on purpose"})),
    )
    .await;
    let (state, text) = ending(&events);
    assert_eq!(state, TaskState::Failed);
    assert!(
        text.contains("on purpose"),
        "the restarted server answered: {text}"
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_tool_list_changes_the_card() {
    let Some(python) = python() else { return };
    let mesh = mesh().await;
    let agent = start(
        &mesh,
        "grower",
        test_server(&python, &[]),
        Backoff::default(),
    )
    .await;
    let mut events = mesh.registry.subscribe();
    let answer = ask(&mesh, "grower", tool_call("grow", json!({"name": "extra"}))).await;
    assert_eq!(ending(&answer).0, TaskState::Completed);
    let has_extra = || {
        mesh.registry
            .agent("grower")
            .and_then(|a| a.card)
            .is_some_and(|c| c.skills.iter().any(|s| s.id == "extra"))
    };
    let since = Instant::now();
    while !has_extra() {
        let left = WAIT.saturating_sub(since.elapsed());
        match tokio::time::timeout(left, events.recv()).await {
            Ok(Ok(RegistryEvent::CardChanged { .. }) | Err(_)) => {}
            Ok(Ok(_)) => {}
            Err(_) => panic!("the card never listed the new tool"),
        }
    }
    // And the new tool answers.
    let answer = ask(&mesh, "grower", tool_call("extra", json!({}))).await;
    assert_eq!(ending(&answer).0, TaskState::Completed);
    assert_eq!(artifact_parts(&answer)[0].as_text(), Some("I am extra"));
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_over_streamable_http_is_served_and_reconnected() {
    let Some(python) = python() else { return };
    let port = free_port();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/mcp/test_server.py");
    let spawn = || {
        tokio::process::Command::new(&python)
            .args([script, "--one-tool", "--http", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the HTTP test server starts")
    };
    let mut http_server = spawn();
    let url = format!("http://127.0.0.1:{port}/mcp");
    wait_for_port(port).await;
    let mesh = mesh().await;
    let backoff = Backoff::new(
        Duration::from_millis(200),
        Duration::from_millis(500),
        Duration::from_secs(60),
    );
    let server = McpServer::Url { url, bearer: None };
    let agent = start(&mesh, "remote", server, backoff).await;
    let events = ask(
        &mesh,
        "remote",
        Message::new(Role::User, vec![Part::text("over http")]),
    )
    .await;
    assert_eq!(
        artifact_parts(&events)[0].as_text(),
        Some("OVER HTTP"),
        "{events:#?}"
    );
    // The server goes away and comes back on the same port: the agent reconnects.
    http_server.kill().await.unwrap();
    let since = Instant::now();
    while agent.connection().live().is_ok() {
        // The next call notices the session is gone (it fails at once then).
        let _ = ask(
            &mesh,
            "remote",
            Message::new(Role::User, vec![Part::text("anyone?")]),
        )
        .await;
        assert!(
            since.elapsed() < WAIT,
            "the agent never noticed the server went away"
        );
    }
    let _http_server = spawn();
    wait_for_port(port).await;
    agent
        .connection()
        .wait_live(WAIT)
        .await
        .expect("reconnected");
    let events = ask(
        &mesh,
        "remote",
        Message::new(Role::User, vec![Part::text("again")]),
    )
    .await;
    assert_eq!(
        artifact_parts(&events)[0].as_text(),
        Some("AGAIN"),
        "{events:#?}"
    );
    agent.shutdown().await;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn wait_for_port(port: u16) {
    let since = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(since.elapsed() < WAIT, "nothing listens on {port}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
