//! What the LLM tests share: llama.cpp's server with the toy model on a free port, an LLM
//! agent on a bus-side mesh, and its config written for a test.

use mesh_llm::{LlmAgent, LlmConfig, RunningLlmAgent};
use mesh_testkit::WAIT;
use mesh_testkit::bus_mesh::BusMesh;

pub use mesh_testkit::model_server::ModelServer;

/// The model server binary, or `None` (the test prints why it is skipped).
pub fn server_binary() -> Option<std::ffi::OsString> {
    ModelServer::binary()
}

/// llama.cpp's server with the toy model, ready.
pub async fn model_server(binary: &std::ffi::OsStr) -> ModelServer {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/toy-agent.gguf");
    ModelServer::start(binary, std::path::Path::new(model)).await
}

/// The config of the agent `assistant` on `url`, with `tools` (a TOML `[tools]` body) and
/// `max_tokens`.
pub fn config(url: &str, tools: &str, max_tokens: u32) -> LlmConfig {
    let text = format!(
        "name = \"assistant\"\ndescription = \"A test assistant\"\n\
         [model]\nurl = \"{url}\"\nname = \"toy\"\nmax_tokens = {max_tokens}\ntemperature = 0.5\n\
         [tools]\n{tools}\n[limits]\ndeadline_secs = 60\n"
    );
    LlmConfig::parse(&text, |_| None).expect("a valid config")
}

/// The agent `config` defines, online on `mesh`.
pub async fn start(mesh: &BusMesh, config: LlmConfig) -> RunningLlmAgent {
    let name = config.name.clone();
    let running = LlmAgent::new(config)
        .config(mesh.config())
        .start(mesh.broker.bus_config())
        .await
        .expect("the LLM agent starts");
    assert!(mesh.registry.wait_online(&name, WAIT).await);
    running
}
