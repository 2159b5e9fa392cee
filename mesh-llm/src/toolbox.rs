//! What the model may call, and the calls run: peer agents over the bus (through the task's
//! [`Peers`], so the runtime's delegation, depth limit and cancel cascade apply), the tools of
//! MCP servers (through supervised [`McpConnection`]s), and `ask_user`, which makes the task
//! wait for the user's answer.
//!
//! A tool's name is what the API allows (`[A-Za-z0-9_-]`, at most 64): a peer agent's name with
//! other characters as `_`; an MCP tool as `<server>__<tool>`. A peer tool takes `{"text": …}`
//! and answers the text of the agent's answer; an MCP tool takes its own input schema and
//! answers its content as text. What a tool answers is cut at [`MAX_RESULT`] bytes.

use std::collections::HashMap;

use mesh_agent::model::{Part, PartContent, TaskState};
use mesh_agent::{PeerAnswer, Peers};
use mesh_mcp::McpConnection;
use serde_json::{Map, Value, json};

use crate::chat::ToolSpec;
use crate::config::ToolsConfig;

/// The most bytes of a tool's answer given back to the model.
pub const MAX_RESULT: usize = 32 * 1024;

/// The tool that asks the user.
pub const ASK_USER: &str = "ask_user";

/// What a tool name stands for.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A peer agent.
    Peer(String),
    /// A tool of the MCP server at this index of the toolbox.
    Mcp(usize, String),
    /// A question to the user.
    AskUser,
}

/// The tools of one agent.
pub struct Toolbox {
    config: ToolsConfig,
    /// This agent's own name (never a tool of its own).
    own: String,
    /// The MCP servers, by name.
    mcp: Vec<(String, McpConnection)>,
}

/// The tools on offer for one answer, and what each name stands for.
pub struct Offer {
    pub specs: Vec<ToolSpec>,
    pub targets: HashMap<String, Target>,
}

impl Toolbox {
    /// The tools `config` names, for the agent `own`, with the MCP servers' connections.
    pub fn new(config: ToolsConfig, own: String, mcp: Vec<(String, McpConnection)>) -> Toolbox {
        Toolbox { config, own, mcp }
    }

    /// Stops the MCP servers.
    pub fn stop(&self) {
        for (_, connection) in &self.mcp {
            connection.stop();
        }
    }

    /// The tools on offer now: the peers online that the config names, the live MCP servers'
    /// tools, and `ask_user` when allowed.
    pub async fn offer(&self, peers: &Peers) -> Offer {
        let mut specs = Vec::new();
        let mut targets = HashMap::new();
        // An agent with no peer among its tools never subscribes to the mesh's cards.
        let online = if self.config.all_agents || !self.config.agents.is_empty() {
            peers.online().await.unwrap_or_else(|error| {
                tracing::warn!(%error, "the mesh's agents are unknown: no peer on offer");
                Vec::new()
            })
        } else {
            Vec::new()
        };
        for (agent, card) in online {
            let named = self.config.all_agents || self.config.agents.contains(&agent);
            if agent == self.own || !named {
                continue;
            }
            let name = tool_name(&agent);
            let mut description = card
                .as_ref()
                .map(|c| c.description.clone())
                .unwrap_or_default();
            for skill in card.iter().flat_map(|c| &c.skills) {
                description.push_str(&format!("\n- {}: {}", skill.name, skill.description));
            }
            if description.trim().is_empty() {
                description = format!("The agent {agent}");
            }
            specs.push(ToolSpec {
                name: name.clone(),
                description: description.chars().take(2_000).collect(),
                parameters: json!({
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "The message to the agent"}},
                    "required": ["text"]
                }),
            });
            targets.insert(name, Target::Peer(agent));
        }
        for (index, (server, connection)) in self.mcp.iter().enumerate() {
            let Ok(live) = connection.live() else {
                continue;
            };
            for tool in live.tools.iter() {
                let name = tool_name(&format!("{server}__{}", tool.name));
                specs.push(ToolSpec {
                    name: name.clone(),
                    description: tool
                        .description
                        .as_deref()
                        .unwrap_or_default()
                        .chars()
                        .take(2_000)
                        .collect(),
                    parameters: Value::Object((*tool.input_schema).clone()),
                });
                targets.insert(name, Target::Mcp(index, tool.name.to_string()));
            }
        }
        if self.config.ask_user {
            specs.push(ToolSpec {
                name: ASK_USER.into(),
                description: "Ask the user a question; the answer comes as their next message"
                    .into(),
                parameters: json!({
                    "type": "object",
                    "properties": {"question": {"type": "string"}},
                    "required": ["question"]
                }),
            });
            targets.insert(ASK_USER.into(), Target::AskUser);
        }
        Offer { specs, targets }
    }

    /// Runs a call of a peer or an MCP tool with the model's `arguments` (JSON text): what it
    /// answers, as text for the model (a failure is an answer too: the model reads it).
    pub async fn run(&self, target: &Target, arguments: &str, peers: &Peers) -> String {
        let answer = match target {
            Target::Peer(agent) => ask_peer(peers, agent, arguments).await,
            Target::Mcp(index, tool) => match self.mcp.get(*index) {
                Some((_, connection)) => call_mcp(connection, tool, arguments).await,
                None => "error: no such MCP server".into(),
            },
            Target::AskUser => String::new(),
        };
        cut(answer)
    }
}

/// The question of an `ask_user` call.
pub fn question(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(o)) => o
            .get("question")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| Value::Object(o).to_string()),
        _ => arguments.to_owned(),
    }
}

/// A name the API accepts for `name`.
fn tool_name(name: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() { "_".into() } else { name }
}

fn cut(mut text: String) -> String {
    if text.len() > MAX_RESULT {
        let mut end = MAX_RESULT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(" …(cut)");
    }
    text
}

/// Sends the call's `text` to a peer agent and gives back its answer's text.
async fn ask_peer(peers: &Peers, agent: &str, arguments: &str) -> String {
    let text = match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(o)) => match o.get("text") {
            Some(Value::String(text)) => text.clone(),
            _ => Value::Object(o).to_string(),
        },
        _ => arguments.to_owned(),
    };
    match peers.ask(agent, &text).await {
        Ok(PeerAnswer::Message(message)) => parts_text(&message.parts),
        Ok(PeerAnswer::Task(task)) => {
            let mut parts: Vec<&Part> = task
                .artifacts
                .iter()
                .flatten()
                .flat_map(|a| &a.parts)
                .collect();
            parts.extend(task.status.message.iter().flat_map(|m| &m.parts));
            let text = parts_text(&parts.into_iter().cloned().collect::<Vec<_>>());
            match task.status.state {
                TaskState::Completed => text,
                state => format!(
                    "the agent {agent} ended {}: {text}",
                    mesh_agent::model::state_name(&state)
                ),
            }
        }
        Err(error) => format!("error: {error}"),
    }
}

/// Calls an MCP tool and gives back its content as text.
async fn call_mcp(connection: &McpConnection, tool: &str, arguments: &str) -> String {
    let arguments = match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(o)) => o,
        Ok(Value::Null) | Err(_) if arguments.trim().is_empty() => Map::new(),
        _ => return format!("error: the arguments of {tool} must be a JSON object"),
    };
    let invocation = match connection.invoke(tool, arguments).await {
        Ok(invocation) => invocation,
        Err(why) => return format!("error: {why}"),
    };
    match invocation.result().await {
        Ok(result) => mesh_mcp::call::answer_text(result),
        Err(why) => format!("error: {why}"),
    }
}

/// The text of `parts`: text as it is, data as JSON, files by name.
fn parts_text(parts: &[Part]) -> String {
    let texts: Vec<String> = parts
        .iter()
        .map(|p| match &p.content {
            PartContent::Text(t) => t.clone(),
            PartContent::Data(d) => d.to_string(),
            PartContent::Raw(_) | PartContent::Url(_) => {
                format!("[file {}]", p.filename.as_deref().unwrap_or("unnamed"))
            }
        })
        .collect();
    texts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_api_takes() {
        assert_eq!(tool_name("flight-booker"), "flight-booker");
        assert_eq!(tool_name("a.b c"), "a_b_c");
        assert_eq!(tool_name(&"x".repeat(100)).len(), 64);
        assert_eq!(
            tool_name("time__get_current_time"),
            "time__get_current_time"
        );
    }

    #[test]
    fn a_question_and_answers_cut() {
        assert_eq!(question(r#"{"question": "Which date?"}"#), "Which date?");
        assert_eq!(question("plain"), "plain");
        let long = cut("é".repeat(MAX_RESULT));
        assert!(long.len() <= MAX_RESULT + 10 && long.ends_with("(cut)"));
    }
}
