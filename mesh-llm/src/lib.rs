//! # mesh-llm
//!
//! An LLM agent defined without code: `mesh agent llm --config assistant.toml` runs an agent
//! whose answers come from any OpenAI-compatible chat-completions server (llama.cpp's server,
//! vLLM, Ollama, OpenAI), streamed token by token, with the mesh's agents and MCP servers as
//! its tools.
//!
//! - [`config`]: the TOML file (the model, the system prompt, sampling, the tools, the limits),
//!   read and checked;
//! - [`chat`]: the chat-completions client (a small typed client over reqwest, the SSE parser
//!   of mesh-core);
//! - [`toolbox`]: the tools on offer and the calls run;
//! - [`LlmAgent`]: the agent.

mod agent;
pub mod chat;
pub mod config;
pub mod toolbox;

pub use agent::{LlmAgent, LlmAgentError, RunningLlmAgent};
pub use config::{ConfigError, LlmConfig};
