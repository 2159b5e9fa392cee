//! The LLM agent: [`LlmAgent`] starts the MCP servers its config names, then the agent on the
//! bus; each message is answered by a conversation with the model.
//!
//! One answer: the task's history (the system prompt first; the user's messages as `user`,
//! the agent's as `assistant`) goes to the model with the tools on offer; its tokens stream
//! into the artifact `answer` as they come (artifact chunks with `append` and `lastChunk`); a
//! turn that calls tools runs them (peer agents over the bus, MCP tools), gives their answers
//! back and asks again, at most `max_tool_rounds` times; the turn without tool calls ends the
//! task (completed, its text also the final status message). A call of `ask_user` makes the
//! task wait for input with the model's question; the user's answer continues the task with
//! its history. Canceling the task drops the model's stream (closing its connection stops the
//! server generating) and every tool call in flight; the runtime cancels the peer sub-tasks.
//! A server error, a timeout, a malformed chunk or a call of a tool not on offer fails the
//! task saying which; the whole answer is bounded by `deadline_secs`.

use std::sync::Arc;
use std::time::Duration;

use mesh_agent::model::{Message, Part, PartContent, Role, Task};
use mesh_agent::{
    Agent, AgentConfig, AgentError, ArtifactWriter, BusConfig, HandlerError, Outcome, RunningAgent,
    TaskContext, handler_fn,
};
use mesh_mcp::{Backoff, McpConnection};

use crate::chat::{ChatClient, ChatEvent, ChatMessage, FunctionOut, ToolCallOut};
use crate::config::LlmConfig;
use crate::toolbox::{self, Target, Toolbox};

/// The metadata key of a question the model asked with `ask_user` (the tool call's id), so
/// that the user's answer is given back to the model as that call's result.
const ASKED_KEY: &str = "meshLlmAskUser";

/// How long an MCP server of the config may take to start.
const MCP_START: Duration = Duration::from_secs(30);

/// Why an LLM agent did not start.
#[derive(Debug, thiserror::Error)]
pub enum LlmAgentError {
    /// An MCP server of the config did not start.
    #[error("the MCP server {name} did not start: {why}")]
    Mcp {
        /// Its name in the config.
        name: String,
        /// Why.
        why: String,
    },
    /// The agent did not start on the bus.
    #[error(transparent)]
    Agent(#[from] AgentError),
}

/// An LLM agent, as its config defines it.
pub struct LlmAgent {
    config: LlmConfig,
    agent_config: AgentConfig,
}

/// What every answer of the agent uses.
struct Llm {
    config: LlmConfig,
    chat: ChatClient,
    toolbox: Toolbox,
}

impl LlmAgent {
    /// The agent `config` defines.
    pub fn new(config: LlmConfig) -> LlmAgent {
        LlmAgent {
            config,
            agent_config: AgentConfig::default(),
        }
    }

    /// The instance settings.
    pub fn config(mut self, config: AgentConfig) -> LlmAgent {
        self.agent_config = config;
        self
    }

    /// Starts the MCP servers (each must come up), then the agent on the bus.
    pub async fn start(self, bus: BusConfig) -> Result<RunningLlmAgent, LlmAgentError> {
        let mut mcp = Vec::new();
        for (name, server) in &self.config.tools.mcp {
            let connection = McpConnection::start(server.clone(), Backoff::default(), MCP_START);
            if let Err(why) = connection.wait_started(MCP_START).await {
                connection.stop();
                for (_, started) in &mcp {
                    McpConnection::stop(started);
                }
                return Err(LlmAgentError::Mcp {
                    name: name.clone(),
                    why,
                });
            }
            mcp.push((name.clone(), connection));
        }
        let llm = Arc::new(Llm {
            chat: ChatClient::new(self.config.model.clone()),
            toolbox: Toolbox::new(self.config.tools.clone(), self.config.name.clone(), mcp),
            config: self.config,
        });
        let handler_llm = llm.clone();
        let mut agent = Agent::new(
            llm.config.name.clone(),
            handler_fn(move |ctx: TaskContext| answer(ctx, handler_llm.clone())),
        )
        .description(llm.config.description.clone())
        .config(self.agent_config);
        if llm.config.skills.is_empty() {
            agent = agent.skill("chat", "Chat", "Answers in words, using its tools");
        }
        for (id, name, description) in &llm.config.skills {
            agent = agent.skill(id.clone(), name.clone(), description.clone());
        }
        let running = match agent.start(bus).await {
            Ok(running) => running,
            Err(error) => {
                llm.toolbox.stop();
                return Err(error.into());
            }
        };
        Ok(RunningLlmAgent { running, llm })
    }
}

/// A running LLM agent.
pub struct RunningLlmAgent {
    running: RunningAgent,
    llm: Arc<Llm>,
}

impl RunningLlmAgent {
    /// The agent on the bus.
    pub fn agent(&self) -> &RunningAgent {
        &self.running
    }

    /// Stops as [`RunningAgent::shutdown`] does, then the MCP servers.
    pub async fn shutdown(self) {
        self.running.shutdown().await;
        self.llm.toolbox.stop();
    }
}

/// Answers one message, within the config's deadline.
async fn answer(ctx: TaskContext, llm: Arc<Llm>) -> Result<Outcome, HandlerError> {
    let deadline = llm.config.limits.deadline;
    match tokio::time::timeout(deadline, converse(&ctx, &llm)).await {
        Ok(outcome) => outcome,
        Err(_) => Ok(Outcome::failed(format!(
            "no answer within the deadline of {} s",
            deadline.as_secs()
        ))),
    }
}

/// Streams an answer's tokens into one artifact; the last token waits for the end, so the
/// last chunk carries text.
struct Answer {
    writer: Option<ArtifactWriter>,
    held: Option<String>,
    all: String,
}

impl Answer {
    async fn token(&mut self, ctx: &TaskContext, token: String) -> Result<(), HandlerError> {
        self.all.push_str(&token);
        if let Some(previous) = self.held.replace(token) {
            let writer = self
                .writer
                .get_or_insert_with(|| ctx.artifact_writer("answer"));
            writer.append(vec![Part::text(previous)]).await?;
        }
        Ok(())
    }

    async fn finish(&mut self, ctx: &TaskContext) -> Result<(), HandlerError> {
        let Some(last) = self.held.take() else {
            return Ok(());
        };
        let writer = self
            .writer
            .take()
            .unwrap_or_else(|| ctx.artifact_writer("answer"));
        writer.finish(vec![Part::text(last)]).await?;
        Ok(())
    }
}

async fn converse(ctx: &TaskContext, llm: &Llm) -> Result<Outcome, HandlerError> {
    let mut messages = conversation(&llm.config, ctx.task());
    let offer = llm.toolbox.offer(ctx.peers()).await;
    let mut answer = Answer {
        writer: None,
        held: None,
        all: String::new(),
    };
    let mut rounds = 0;
    loop {
        let started = tokio::select! {
            started = llm.chat.stream(&messages, &offer.specs, llm.config.limits.request_timeout) => started,
            () = ctx.cancelled() => return Ok(Outcome::failed("canceled")),
        };
        let mut stream = match started {
            Ok(stream) => stream,
            Err(error) => return Ok(Outcome::failed(error.to_string())),
        };
        let turn = loop {
            let event = tokio::select! {
                event = stream.next() => event,
                // Dropping the stream closes its connection: the server stops generating.
                () = ctx.cancelled() => return Ok(Outcome::failed("canceled")),
            };
            match event {
                Ok(ChatEvent::Content(token)) => answer.token(ctx, token).await?,
                Ok(ChatEvent::Done(turn)) => break turn,
                Err(error) => return Ok(Outcome::failed(error.to_string())),
            }
        };
        drop(stream);
        if turn.tool_calls.is_empty() {
            answer.finish(ctx).await?;
            let text = answer.all.trim().to_owned();
            return Ok(Outcome::Completed(Some(mesh_agent::agent_text(text))));
        }
        if turn.finish_reason.as_deref() == Some("length") {
            return Ok(Outcome::failed(format!(
                "the model's turn was cut at max_tokens ({}) in the middle of a tool call",
                llm.config.model.max_tokens
            )));
        }
        if let Some(call) = turn
            .tool_calls
            .iter()
            .find(|c| serde_json::from_str::<serde_json::Value>(&c.arguments).is_err())
        {
            return Ok(Outcome::failed(format!(
                "the model called {:?} with arguments that are not JSON: {}",
                call.name,
                call.arguments.chars().take(200).collect::<String>()
            )));
        }
        rounds += 1;
        if rounds > llm.config.limits.max_tool_rounds {
            return Ok(Outcome::failed(format!(
                "the model called tools in more than {} rounds",
                llm.config.limits.max_tool_rounds
            )));
        }
        messages.push(ChatMessage {
            role: "assistant",
            content: (!turn.content.is_empty()).then(|| turn.content.clone()),
            tool_calls: Some(
                turn.tool_calls
                    .iter()
                    .map(|call| ToolCallOut {
                        id: call.id.clone(),
                        kind: "function",
                        function: FunctionOut {
                            name: call.name.clone(),
                            arguments: call.arguments.clone(),
                        },
                    })
                    .collect(),
            ),
            tool_call_id: None,
        });
        for call in &turn.tool_calls {
            let Some(target) = offer.targets.get(&call.name) else {
                return Ok(Outcome::failed(format!(
                    "the model called a tool it was not offered: {:?}",
                    call.name
                )));
            };
            if *target == Target::AskUser {
                answer.finish(ctx).await?;
                let mut question = mesh_agent::agent_text(toolbox::question(&call.arguments));
                question.metadata = Some(std::collections::HashMap::from([(
                    ASKED_KEY.to_owned(),
                    serde_json::json!({"toolCallId": call.id}),
                )]));
                return Ok(Outcome::InputRequired(question));
            }
            ctx.working(format!("calling {}", call.name)).await?;
            let result = tokio::select! {
                result = llm.toolbox.run(target, &call.arguments, ctx.peers()) => result,
                () = ctx.cancelled() => return Ok(Outcome::failed("canceled")),
            };
            messages.push(ChatMessage {
                role: "tool",
                content: Some(result),
                tool_calls: None,
                tool_call_id: Some(call.id.clone()),
            });
        }
    }
}

/// The conversation so far: the system prompt, then the task's messages in order (a question
/// the task waits on, when it is not in the history yet, before the message that answers it).
/// A question the model asked with `ask_user` goes back as that tool call, and the user's
/// next message as its result.
fn conversation(config: &LlmConfig, task: &Task) -> Vec<ChatMessage> {
    let mut messages = Vec::new();
    if let Some(prompt) = &config.model.system_prompt {
        messages.push(ChatMessage::text("system", prompt.clone()));
    }
    let mut said_so_far: Vec<&Message> = task.history.iter().flatten().collect();
    if let Some(question) = &task.status.message
        && question.role == Role::Agent
        && !said_so_far
            .iter()
            .any(|m| m.message_id == question.message_id)
    {
        let at = said_so_far.len().saturating_sub(1);
        said_so_far.insert(at, question);
    }
    let mut pending_call: Option<String> = None;
    for message in said_so_far {
        if let Some(call_id) = pending_call.take()
            && message.role == Role::User
        {
            messages.push(ChatMessage {
                role: "tool",
                content: said(message).content,
                tool_calls: None,
                tool_call_id: Some(call_id),
            });
            continue;
        }
        let asked = message
            .metadata
            .as_ref()
            .and_then(|m| m.get(ASKED_KEY))
            .and_then(|a| a.get("toolCallId"))
            .and_then(serde_json::Value::as_str);
        match asked {
            Some(call_id) if message.role == Role::Agent => {
                let question = said(message).content.unwrap_or_default();
                messages.push(ChatMessage {
                    role: "assistant",
                    content: None,
                    tool_calls: Some(vec![ToolCallOut {
                        id: call_id.to_owned(),
                        kind: "function",
                        function: FunctionOut {
                            name: toolbox::ASK_USER.into(),
                            arguments: serde_json::json!({"question": question}).to_string(),
                        },
                    }]),
                    tool_call_id: None,
                });
                pending_call = Some(call_id.to_owned());
            }
            _ => messages.push(said(message)),
        }
    }
    messages
}

/// A message of the task as the model reads it.
fn said(message: &Message) -> ChatMessage {
    let role = if message.role == Role::Agent {
        "assistant"
    } else {
        "user"
    };
    let texts: Vec<String> = message
        .parts
        .iter()
        .map(|p| match &p.content {
            PartContent::Text(t) => t.clone(),
            PartContent::Data(d) => d.to_string(),
            PartContent::Raw(_) | PartContent::Url(_) => {
                format!("[file {}]", p.filename.as_deref().unwrap_or("unnamed"))
            }
        })
        .collect();
    ChatMessage::text(role, texts.join("\n"))
}
