//! `mesh agent mcp` as a user runs it: `mesh up`, then an MCP server (the reference time server,
//! installed with pip) put on the bus as the agent `clock`, called through the gateway; and the
//! usage errors of the command. The server's tests run when `MESH_MCP_PYTHON` names the Python
//! that has it (`scripts/test` sets it).

use crate::support::{WAIT, Watched, run};
use serde_json::{Value, json};

/// `mesh up` on free ports in `namespace`: the process and the gateway's and broker's URLs.
pub async fn mesh_up(namespace: &str) -> (Watched, String, String) {
    let data_dir = std::env::temp_dir().join(format!("mesh-cli-mcp-{namespace}"));
    let mut up = Watched::spawn(
        &[
            "up",
            "--broker-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--namespace",
            namespace,
        ],
        &[("MESH_DATA_DIR", data_dir.to_str().unwrap())],
    );
    up.line_with("mesh is up").await;
    let word = |line: String| line.split_whitespace().nth(1).unwrap().to_owned();
    let gateway = word(up.line_with("gateway").await);
    let broker = word(up.line_with("broker").await);
    (up, gateway, broker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_is_an_agent_of_the_mesh_up_and_answers_through_the_gateway() {
    let Some(python) = std::env::var_os("MESH_MCP_PYTHON") else {
        println!("SKIPPED: MESH_MCP_PYTHON is unset (scripts/test sets it)");
        return;
    };
    let time_server = std::path::Path::new(&python).with_file_name("mcp-server-time");
    let namespace = mesh_testkit::fresh_namespace();
    let (_up, gateway, broker) = mesh_up(&namespace).await;
    let mut clock = Watched::spawn(
        &[
            "agent",
            "mcp",
            "--name",
            "clock",
            "--broker-url",
            &broker,
            "--namespace",
            &namespace,
            "--",
            time_server.to_str().unwrap(),
        ],
        &[],
    );
    let online = clock.line_with("agent clock online").await;
    assert!(
        online.contains("tools get_current_time, convert_time"),
        "{online}"
    );

    mesh_core::tls::install_crypto_provider();
    let http = reqwest::Client::builder().timeout(WAIT).build().unwrap();
    let card: Value = http
        .get(format!(
            "{gateway}/agents/clock/.well-known/agent-card.json"
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(card["skills"][0]["id"], "get_current_time", "{card}");
    let call = json!({
        "jsonrpc": "2.0", "id": 1, "method": "message/send",
        "params": {"message": {"kind": "message", "role": "user", "messageId": "m-clock",
            "parts": [{"kind": "data", "data": {"tool": "convert_time",
                "arguments": {"source_timezone": "Etc/UTC", "time": "12:00",
                              "target_timezone": "Asia/Tokyo"}}}]}}
    });
    let answer: Value = http
        .post(format!("{gateway}/agents/clock"))
        .json(&call)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["result"]["status"]["state"], "completed", "{answer}");
    let text = answer["result"]["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(text.contains("21:00"), "noon UTC is 21:00 in Tokyo: {text}");

    // `mesh send` sends text: with two tools, the answer says how to name one.
    let (code, output) = run(
        &[
            "send",
            "clock",
            "what time is it?",
            "--gateway-url",
            &gateway,
            "--namespace",
            &namespace,
        ],
        &[],
    )
    .await;
    assert_ne!(code, 0, "{output}");
    assert!(
        output.contains("tools: get_current_time, convert_time"),
        "{output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_agent_mcp_says_what_is_missing_or_wrong() {
    let (code, output) = run(&["agent", "mcp", "--", "mcp-server-time"], &[]).await;
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("--name"), "{output}");

    let (code, output) = run(&["agent", "mcp", "--name", "clock"], &[]).await;
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("a command after `--`"), "{output}");

    let (code, output) = run(&["agent", "echo", "--url", "http://127.0.0.1:1/mcp"], &[]).await;
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("for `mesh agent mcp`"), "{output}");

    let (code, output) = run(
        &[
            "agent",
            "mcp",
            "--name",
            "clock",
            "--url",
            "ftp://tools.example/",
        ],
        &[],
    )
    .await;
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("http:// or https://"), "{output}");

    // A command that does not exist: the agent does not start, and says why.
    let (code, output) = run(
        &[
            "agent",
            "mcp",
            "--name",
            "clock",
            "--broker-url",
            "mqtt://127.0.0.1:1",
            "--",
            "/nonexistent/mcp-server",
        ],
        &[],
    )
    .await;
    assert_ne!(code, 0, "{output}");
    assert!(
        output.contains("/nonexistent/mcp-server could not be started"),
        "{output}"
    );
}
