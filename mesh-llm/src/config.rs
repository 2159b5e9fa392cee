//! The config file of an LLM agent (TOML), read and checked: every value bounded, every
//! mistake named by its key.
//!
//! ```toml
//! name = "assistant"
//! description = "Answers questions, with the mesh's agents as tools"
//!
//! [[skills]]
//! id = "chat"
//! name = "Chat"
//! description = "Answers in plain words"
//!
//! [model]
//! url = "http://127.0.0.1:8081/v1"    # any OpenAI-compatible chat-completions server
//! name = "qwen2.5-7b-instruct"
//! api_key_env = "OPENAI_API_KEY"      # optional: the variable that holds the key
//! system_prompt = "You are a helpful assistant."
//! temperature = 0.7                   # optional, as are top_p and seed
//! max_tokens = 1024
//!
//! [tools]
//! agents = ["clock", "echo"]          # peer agents by name; ["*"]: every agent online
//! ask_user = true                     # the model may ask the user (the task waits for input)
//!
//! [[tools.mcp]]
//! name = "time"
//! command = ["mcp-server-time"]       # or url = "https://…/mcp" (and bearer_env)
//!
//! [limits]
//! max_tool_rounds = 8                 # model turns that call tools, per message
//! deadline_secs = 300                 # the whole answer to one message
//! request_timeout_secs = 120          # one model request, to its last chunk
//! ```

use std::path::Path;
use std::time::Duration;

use mesh_mcp::McpServer;
use serde::Deserialize;

/// The most skills, peer agents and MCP servers a config may name.
const MAX_ITEMS: usize = 64;

/// The longest text a config value may hold (a system prompt, a description).
const MAX_TEXT: usize = 64 * 1024;

/// The largest config file read.
const MAX_FILE: u64 = 1024 * 1024;

/// An LLM agent's config, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmConfig {
    /// The agent's name on the mesh.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its card's skills: (id, name, description).
    pub skills: Vec<(String, String, String)>,
    /// The model.
    pub model: ModelConfig,
    /// Its tools.
    pub tools: ToolsConfig,
    /// Its limits.
    pub limits: Limits,
}

/// The model and how it is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The chat-completions server's base URL (`…/v1`; `/chat/completions` is added).
    pub url: String,
    /// The model's name.
    pub name: String,
    /// The API key (from the environment variable the file names).
    pub api_key: Option<String>,
    /// The system prompt.
    pub system_prompt: Option<String>,
    /// Sampling: temperature (0 to 2).
    pub temperature: Option<f64>,
    /// Sampling: nucleus probability (0 to 1).
    pub top_p: Option<f64>,
    /// Sampling: a seed.
    pub seed: Option<i64>,
    /// The most tokens one model turn may generate.
    pub max_tokens: u32,
}

/// What the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolsConfig {
    /// Peer agents by name (empty: none).
    pub agents: Vec<String>,
    /// Every agent online (but this one) is a tool.
    pub all_agents: bool,
    /// The model may ask the user a question.
    pub ask_user: bool,
    /// MCP servers whose tools the model may call: (name, server).
    pub mcp: Vec<(String, McpServer)>,
}

/// The bounds of one answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Model turns that call tools, per message.
    pub max_tool_rounds: u32,
    /// The whole answer to one message.
    pub deadline: Duration,
    /// One model request, to its last chunk.
    pub request_timeout: Duration,
}

/// A config that cannot be used, and why (naming the key).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    skills: Vec<FileSkill>,
    model: FileModel,
    #[serde(default)]
    tools: FileTools,
    #[serde(default)]
    limits: FileLimits,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSkill {
    id: String,
    name: String,
    description: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileModel {
    url: String,
    name: String,
    #[serde(default)]
    api_key_env: Option<String>,
    #[serde(default)]
    system_prompt: Option<String>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    max_tokens: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileTools {
    #[serde(default)]
    agents: Vec<String>,
    #[serde(default)]
    ask_user: Option<bool>,
    #[serde(default)]
    mcp: Vec<FileMcp>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMcp {
    name: String,
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    bearer_env: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    #[serde(default)]
    max_tool_rounds: Option<u32>,
    #[serde(default)]
    deadline_secs: Option<u64>,
    #[serde(default)]
    request_timeout_secs: Option<u64>,
}

impl LlmConfig {
    /// Reads and checks the config file at `path`; `env` looks up the environment variables
    /// it names (the API key, MCP bearer tokens).
    pub fn load(
        path: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<LlmConfig, ConfigError> {
        let size = std::fs::metadata(path)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?
            .len();
        if size > MAX_FILE {
            return Err(ConfigError(format!(
                "{}: larger than {MAX_FILE} bytes",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        LlmConfig::parse(&text, env).map_err(|e| ConfigError(format!("{}: {e}", path.display())))
    }

    /// Reads and checks a config's text.
    pub fn parse(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<LlmConfig, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        let bad = |key: &str, why: &str| Err(ConfigError(format!("{key}: {why}")));
        let text_of = |key: &str, value: &str| -> Result<(), ConfigError> {
            if value.len() > MAX_TEXT {
                return Err(ConfigError(format!("{key}: longer than {MAX_TEXT} bytes")));
            }
            Ok(())
        };
        if file.name.trim().is_empty() {
            return bad("name", "must not be empty");
        }
        let description = file.description.unwrap_or_default();
        text_of("description", &description)?;
        if file.skills.len() > MAX_ITEMS {
            return bad("skills", "at most 64");
        }
        for skill in &file.skills {
            text_of("skills.description", &skill.description)?;
        }
        let model = file.model;
        if !(model.url.starts_with("http://") || model.url.starts_with("https://")) {
            return bad("model.url", "must start with http:// or https://");
        }
        if model.name.trim().is_empty() {
            return bad("model.name", "must not be empty");
        }
        if let Some(prompt) = &model.system_prompt {
            text_of("model.system_prompt", prompt)?;
        }
        if model.temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
            return bad("model.temperature", "must be between 0 and 2");
        }
        if model.top_p.is_some_and(|p| !(0.0..=1.0).contains(&p)) {
            return bad("model.top_p", "must be between 0 and 1");
        }
        let max_tokens = model.max_tokens.unwrap_or(1024);
        if !(1..=131_072).contains(&max_tokens) {
            return bad("model.max_tokens", "must be between 1 and 131072");
        }
        let api_key = match &model.api_key_env {
            None => None,
            Some(var) => Some(env(var).ok_or_else(|| {
                ConfigError(format!("model.api_key_env: the environment has no {var}"))
            })?),
        };
        let tools = file.tools;
        if tools.agents.len() > MAX_ITEMS || tools.mcp.len() > MAX_ITEMS {
            return bad("tools", "at most 64 agents and 64 MCP servers");
        }
        let all_agents = tools.agents.iter().any(|a| a == "*");
        let agents: Vec<String> = tools.agents.into_iter().filter(|a| a != "*").collect();
        if agents.iter().any(|a| a.trim().is_empty()) {
            return bad("tools.agents", "an agent's name must not be empty");
        }
        let mut mcp = Vec::new();
        for server in tools.mcp {
            if server.name.is_empty()
                || !server
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return bad("tools.mcp.name", "letters, digits, `_` and `-` only");
            }
            let bearer = match &server.bearer_env {
                None => None,
                Some(var) => Some(env(var).ok_or_else(|| {
                    ConfigError(format!(
                        "tools.mcp.bearer_env: the environment has no {var}"
                    ))
                })?),
            };
            let spec = McpServer::from_parts(server.command, server.url, bearer)
                .map_err(|e| ConfigError(format!("tools.mcp {:?}: {e}", server.name)))?;
            mcp.push((server.name, spec));
        }
        let limits = file.limits;
        let max_tool_rounds = limits.max_tool_rounds.unwrap_or(8);
        if max_tool_rounds > 64 {
            return bad("limits.max_tool_rounds", "at most 64");
        }
        let seconds = |key: &str, value: Option<u64>, default: u64| match value.unwrap_or(default) {
            0 => Err(ConfigError(format!("{key}: must be at least 1"))),
            s if s > 86_400 => Err(ConfigError(format!("{key}: at most 86400 (a day)"))),
            s => Ok(Duration::from_secs(s)),
        };
        Ok(LlmConfig {
            name: file.name,
            description,
            skills: file
                .skills
                .into_iter()
                .map(|s| (s.id, s.name, s.description))
                .collect(),
            model: ModelConfig {
                url: model.url.trim_end_matches('/').to_owned(),
                name: model.name,
                api_key,
                system_prompt: model.system_prompt,
                temperature: model.temperature,
                top_p: model.top_p,
                seed: model.seed,
                max_tokens,
            },
            tools: ToolsConfig {
                agents,
                all_agents,
                ask_user: tools.ask_user.unwrap_or(true),
                mcp,
            },
            limits: Limits {
                max_tool_rounds,
                deadline: seconds("limits.deadline_secs", limits.deadline_secs, 300)?,
                request_timeout: seconds(
                    "limits.request_timeout_secs",
                    limits.request_timeout_secs,
                    120,
                )?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
name = "assistant"
description = "Answers"
[[skills]]
id = "chat"
name = "Chat"
description = "Talks"
[model]
url = "http://127.0.0.1:8081/v1/"
name = "toy"
api_key_env = "KEY"
system_prompt = "Be brief."
temperature = 0.2
max_tokens = 64
[tools]
agents = ["clock", "*"]
[[tools.mcp]]
name = "time"
command = ["mcp-server-time", "--local-timezone", "UTC"]
[limits]
max_tool_rounds = 3
deadline_secs = 30
"#;

    fn env(var: &str) -> Option<String> {
        (var == "KEY").then(|| "sk-test".to_owned())
    }

    #[test]
    fn a_full_config_reads() {
        let config = LlmConfig::parse(FULL, env).unwrap();
        assert_eq!(config.name, "assistant");
        assert_eq!(config.model.url, "http://127.0.0.1:8081/v1");
        assert_eq!(config.model.api_key.as_deref(), Some("sk-test"));
        assert_eq!(config.tools.agents, ["clock"]);
        assert!(config.tools.all_agents && config.tools.ask_user);
        assert_eq!(config.tools.mcp[0].0, "time");
        assert_eq!(config.limits.max_tool_rounds, 3);
        assert_eq!(config.limits.deadline, Duration::from_secs(30));
        assert_eq!(config.limits.request_timeout, Duration::from_secs(120));
    }

    #[test]
    fn mistakes_are_named_by_their_key() {
        let cases = [
            (FULL.replace("http://127", "ftp://127"), "model.url"),
            (
                FULL.replace("temperature = 0.2", "temperature = 3.0"),
                "model.temperature",
            ),
            (
                FULL.replace("max_tokens = 64", "max_tokens = 0"),
                "model.max_tokens",
            ),
            (
                FULL.replace("api_key_env = \"KEY\"", "api_key_env = \"NOPE\""),
                "the environment has no NOPE",
            ),
            (
                FULL.replace("deadline_secs = 30", "deadline_secs = 0"),
                "limits.deadline_secs",
            ),
            (
                FULL.replace("name = \"time\"", "name = \"a b\""),
                "tools.mcp.name",
            ),
            (
                FULL.replace(
                    "command = [\"mcp-server-time\", \"--local-timezone\", \"UTC\"]",
                    "",
                ),
                "tools.mcp \"time\"",
            ),
            (FULL.replace("[limits]", "[limits]\nunknown = 1"), "unknown"),
            (
                FULL.replace("max_tool_rounds = 3", "max_tool_rounds = 65"),
                "limits.max_tool_rounds",
            ),
        ];
        for (text, said) in cases {
            let error = LlmConfig::parse(&text, env).unwrap_err().to_string();
            assert!(error.contains(said), "{said}: {error}");
        }
    }
}
