//! The agent that serves an MCP server's tools: [`McpAgent`] starts the server's connection,
//! waits for its first tool list, publishes the card, and answers each message by calling the
//! tool it names; a task that runs the tool follows the call's progress and cancels it with
//! the task. While the server is down, a message fails at once saying why.

use std::sync::Arc;
use std::time::Duration;

use mesh_agent::model::AgentCard;
use mesh_agent::{
    Agent, AgentConfig, AgentError, BusConfig, HandlerError, Outcome, RunningAgent, TaskContext,
    handler_fn, new_artifact,
};

use crate::call::{self, Answer};
use crate::card;
use crate::connection::{McpConnection, Progress};
use crate::invoke::CallEvent;
use crate::restart::Backoff;
use crate::server::McpServer;

/// Why an MCP agent did not start.
#[derive(Debug, thiserror::Error)]
pub enum McpAgentError {
    /// The MCP server did not come up.
    #[error("the MCP server {server} did not start: {why}")]
    Server {
        /// The server, as it is shown (no secret).
        server: String,
        /// Why.
        why: String,
    },
    /// The agent did not start on the bus.
    #[error(transparent)]
    Agent(#[from] AgentError),
}

/// An MCP server served as an agent of the mesh.
pub struct McpAgent {
    name: String,
    description: Option<String>,
    server: McpServer,
    backoff: Backoff,
    start_timeout: Duration,
    config: AgentConfig,
}

impl McpAgent {
    /// The agent `name` serving `server`'s tools.
    pub fn new(name: impl Into<String>, server: McpServer) -> McpAgent {
        McpAgent {
            name: name.into(),
            description: None,
            server,
            backoff: Backoff::default(),
            start_timeout: Duration::from_secs(30),
            config: AgentConfig::default(),
        }
    }

    /// What the agent does (default: the server's name and its tools).
    pub fn description(mut self, description: impl Into<String>) -> McpAgent {
        self.description = Some(description.into());
        self
    }

    /// The instance settings.
    pub fn config(mut self, config: AgentConfig) -> McpAgent {
        self.config = config;
        self
    }

    /// The delays between restarts of a server that died.
    pub fn backoff(mut self, backoff: Backoff) -> McpAgent {
        self.backoff = backoff;
        self
    }

    /// How long the server may take to start, initialize and list its tools (default 30 s).
    pub fn start_timeout(mut self, timeout: Duration) -> McpAgent {
        self.start_timeout = timeout;
        self
    }

    /// Starts the server and, once it listed its tools, the agent on the bus. A server whose
    /// first start fails, or does not come up within the start timeout, is an error (nothing
    /// is announced).
    pub async fn start(self, bus: BusConfig) -> Result<RunningMcpAgent, McpAgentError> {
        let shown = self.server.to_string();
        let connection =
            McpConnection::start(self.server, self.backoff.clone(), self.start_timeout);
        let live = match connection.wait_started(self.start_timeout).await {
            Ok(live) => live,
            Err(why) => {
                connection.stop();
                return Err(McpAgentError::Server { server: shown, why });
            }
        };
        let description = self.description.unwrap_or_else(|| {
            let names: Vec<&str> = live.tools.iter().map(|t| &*t.name).collect();
            format!(
                "The MCP server {} (tools: {})",
                live.server,
                names.join(", ")
            )
        });
        let handler_connection = connection.clone();
        let agent = Agent::new(
            self.name,
            handler_fn(move |ctx: TaskContext| serve(ctx, handler_connection.clone())),
        )
        .description(description)
        .modes(&["text/plain", "application/json"], &["*/*"])
        .config(self.config);
        let base = agent.agent_card().clone();
        let agent = agent.card(card::with_tools(base.clone(), &live.tools));
        let running = Arc::new(agent.start(bus).await?);
        let updater = tokio::spawn(update_card(
            connection.clone(),
            running.clone(),
            base,
            live.tools.clone(),
        ));
        Ok(RunningMcpAgent {
            running,
            connection,
            updater,
        })
    }
}

/// A running MCP agent.
pub struct RunningMcpAgent {
    running: Arc<RunningAgent>,
    connection: McpConnection,
    updater: tokio::task::JoinHandle<()>,
}

impl RunningMcpAgent {
    /// The agent on the bus.
    pub fn agent(&self) -> &RunningAgent {
        &self.running
    }

    /// The MCP connection.
    pub fn connection(&self) -> &McpConnection {
        &self.connection
    }

    /// Stops as [`RunningAgent::shutdown`] does (running tasks end first), then the server.
    pub async fn shutdown(self) {
        self.updater.abort();
        let _ = self.updater.await;
        match Arc::try_unwrap(self.running) {
            Ok(running) => running.shutdown().await,
            Err(running) => tracing::warn!(agent = running.name(), "the agent was still shared"),
        }
        self.connection.stop();
    }
}

/// Publishes the card again each time the server's tool list changes.
async fn update_card(
    connection: McpConnection,
    running: Arc<RunningAgent>,
    base: AgentCard,
    tools: Arc<Vec<rmcp::model::Tool>>,
) {
    let mut seen = Some(tools);
    while let Some(tools) = connection.tools_changed(&mut seen).await {
        let card = card::with_tools(base.clone(), &tools);
        if let Err(error) = running.update_card(&card).await {
            tracing::warn!(agent = running.name(), %error, "could not publish the changed card");
        }
    }
}

/// Answers one message: the tool call it names, run to its end (or canceled with the task).
async fn serve(ctx: TaskContext, connection: McpConnection) -> Result<Outcome, HandlerError> {
    let live = match connection.live() {
        Ok(live) => live,
        Err(why) => return Ok(Outcome::failed(why)),
    };
    let call = match call::tool_call(ctx.message(), &live.tools) {
        Ok(call) => call,
        Err(why) => return Ok(Outcome::failed(why)),
    };
    let mut invocation = match connection.invoke(&call.tool, call.arguments).await {
        Ok(invocation) => invocation,
        Err(why) => return Ok(Outcome::failed(why)),
    };
    let result = loop {
        tokio::select! {
            event = invocation.next() => match event {
                CallEvent::Progress(update) => {
                    ctx.working(progress_text(&call.tool, &update)).await?;
                }
                CallEvent::Done(result) => break result,
            },
            () = ctx.cancelled() => {
                invocation.cancel("the A2A task was canceled").await;
                return Ok(Outcome::failed("canceled"));
            }
        }
    };
    let result = match result {
        Ok(result) => result,
        Err(why) => return Ok(Outcome::failed(why)),
    };
    match call::answer(result) {
        Answer::Failed(why) => Ok(Outcome::failed(why)),
        Answer::Parts(parts) => {
            ctx.artifact(new_artifact(Some(call.tool), parts)).await?;
            Ok(Outcome::completed())
        }
    }
}

/// A progress notification as a status text: "get-sum: 3 of 10: adding".
fn progress_text(tool: &str, progress: &Progress) -> String {
    let mut text = match progress.total {
        Some(total) => format!("{tool}: {} of {}", progress.progress, total),
        None => format!("{tool}: {}", progress.progress),
    };
    if let Some(message) = &progress.message {
        text.push_str(": ");
        text.extend(message.chars().take(500));
    }
    text
}
