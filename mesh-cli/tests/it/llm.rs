//! `mesh agent llm` as a user runs it: `mesh up`, llama.cpp's server with the toy model, and an
//! agent defined in a TOML file that calls `echo` as a tool, asked through the gateway with
//! `mesh send`; and what the command says about a missing or wrong file. The model's part runs
//! when `MESH_LLM_SERVER` names llama.cpp's server (`scripts/test` sets it).

use crate::support::{Watched, run};
use mesh_testkit::model_server::ModelServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_agent_from_a_file_answers_through_the_gateway_using_a_peer() {
    let Some(binary) = ModelServer::binary() else {
        return;
    };
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../mesh-llm/tests/fixtures/toy-agent.gguf"
    );
    let server = ModelServer::start(&binary, std::path::Path::new(model)).await;
    let namespace = mesh_testkit::fresh_namespace();
    let (_up, gateway, broker) = crate::mcp::mesh_up(&namespace).await;
    let file = std::env::temp_dir().join(format!("{namespace}-assistant.toml"));
    std::fs::write(
        &file,
        format!(
            "name = \"assistant\"\ndescription = \"Answers with echo's help\"\n\
             [model]\nurl = \"{}\"\nname = \"toy\"\nmax_tokens = 256\n\
             [tools]\nagents = [\"echo\"]\nask_user = false\n",
            server.url
        ),
    )
    .unwrap();
    let mut agent = Watched::spawn(
        &[
            "agent",
            "llm",
            "--config",
            file.to_str().unwrap(),
            "--broker-url",
            &broker,
            "--namespace",
            &namespace,
        ],
        &[],
    );
    agent.line_with("agent assistant online").await;
    let (code, output) = run(
        &[
            "send",
            "assistant",
            "what does echo say?",
            "--stream",
            "--gateway-url",
            &gateway,
            "--namespace",
            &namespace,
        ],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{output}");
    assert!(
        output.contains("calling echo"),
        "the model called echo: {output}"
    );
    assert!(output.contains("[completed] OK"), "{output}");
    let _ = std::fs::remove_file(&file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_agent_llm_says_what_is_wrong_with_its_file() {
    let (code, output) = run(&["agent", "llm"], &[]).await;
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("--config"), "{output}");
    let file = std::env::temp_dir().join(format!("{}-bad.toml", mesh_testkit::fresh_namespace()));
    std::fs::write(
        &file,
        "name = \"a\"\n[model]\nurl = \"ftp://x\"\nname = \"m\"\n",
    )
    .unwrap();
    let (code, output) = run(&["agent", "llm", "--config", file.to_str().unwrap()], &[]).await;
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("model.url"), "{output}");
    let (code, output) = run(
        &["agent", "llm", "--config", "/nonexistent/assistant.toml"],
        &[],
    )
    .await;
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("/nonexistent/assistant.toml"), "{output}");
    let _ = std::fs::remove_file(&file);
}
