//! The MCP server the gateway runs: its tools are the agents online on the mesh (listed from
//! the registry as it stands), a call runs a task through the A2A service, and a
//! `subscriptions/listen` stream hears `notifications/tools/list_changed` when agents come, go
//! or change their cards.

use std::sync::Arc;

use mesh_core::dialect::Dialect;
use mesh_core::error::A2aError;
use mesh_core::model::{
    CancelTaskRequest, GetTaskRequest, SendMessageRequest, SubscribeToTaskRequest, Task,
    is_final_state, send_params,
};
use mesh_core::rpc::Reply;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, InputRequest, InputRequests, InputRequiredResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerConfig, SubscriptionFilter,
};
use rmcp::service::{RequestContext as McpContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData as McpError, ServerHandler};
use tokio::sync::{Semaphore, broadcast};

use super::tools::{self, Asked};
use crate::auth::Authenticated;
use crate::bridge::view;
use crate::service::{A2aService, RequestContext, SendOutcome, TaskEvents};
use crate::task_events::is_interrupted;

/// How many `subscriptions/listen` streams may be open at once.
pub(crate) const MAX_LISTENS: usize = 256;

/// The longest progress message sent (longer ones are cut).
const MAX_PROGRESS_TEXT: usize = 1_000;

/// The gateway's MCP server (cheap to clone: one per request, as the transport asks).
#[derive(Clone)]
pub(crate) struct McpTools {
    pub(crate) service: Arc<A2aService>,
    /// Permits for the open listen streams.
    pub(crate) listens: Arc<Semaphore>,
}

impl McpTools {
    /// The tools: the agents online, by name.
    fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.service
            .registry
            .agents()
            .into_iter()
            .filter(|a| !a.instances.is_empty())
            .map(|a| tools::tool(&a.name, a.card.as_ref()))
            .collect()
    }

    /// What the tool list depends on: each online agent and its card.
    fn listed(&self) -> Vec<(String, Option<String>)> {
        self.service
            .registry
            .agents()
            .into_iter()
            .filter(|a| !a.instances.is_empty())
            .map(|a| {
                let card = a
                    .card
                    .map(|c| format!("{}{:?}", c.description, c.skills.len()));
                (a.name, card)
            })
            .collect()
    }

    /// Runs the task a call asks for, to its end (or its cancellation by the client).
    async fn run(
        &self,
        cx: &RequestContext,
        asked: Asked,
        progress: Option<ProgressToken>,
        mcp: &McpContext<RoleServer>,
    ) -> Result<Answer, A2aError> {
        let params = send_params(asked.message);
        let streaming = self
            .service
            .registry
            .agent(&cx.agent)
            .and_then(|a| a.card)
            .is_none_or(|c| c.capabilities.streaming != Some(false));
        let mut events = if streaming {
            self.service.stream_message(cx, params).await?
        } else {
            match self.send(cx, params).await? {
                Ok(answer) => return Ok(answer),
                Err(events) => events,
            }
        };
        let mut task_id = asked.task_id;
        let mut step = 0.0;
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = mcp.ct.cancelled() => {
                    if let Some(id) = task_id {
                        let cancel = CancelTaskRequest { id, metadata: None, tenant: None };
                        if let Err(error) = self.service.cancel_task(cx, cancel).await {
                            tracing::info!(%error, "the canceled MCP call's task was not canceled");
                        }
                    }
                    return Err(A2aError::internal("the MCP call was canceled"));
                }
            };
            let Some((_, event)) = event else { break };
            match view(&event) {
                Err(error) => return Err(error.clone()),
                Ok(Reply::Message(message)) => {
                    return Ok(Answer::Result(tools::message_result(message)));
                }
                Ok(Reply::Task(task)) => task_id = Some(task.id.clone()),
                Ok(Reply::StatusUpdate(update)) => {
                    task_id = Some(update.task_id.clone());
                    let text = update.status.message.as_ref().map(tools::message_text);
                    if let (Some(token), Some(text)) = (&progress, text) {
                        step += 1.0;
                        notify(mcp, token, step, text).await;
                    }
                }
                Ok(Reply::ArtifactUpdate(update)) => {
                    task_id = Some(update.task_id.clone());
                    if let Some(token) = &progress {
                        step += 1.0;
                        let name = update.artifact.name.as_deref().unwrap_or("an artifact");
                        notify(mcp, token, step, format!("{name}: a chunk")).await;
                    }
                }
                Ok(_) => {}
            }
        }
        let Some(id) = task_id else {
            return Err(A2aError::internal(
                "the task's stream ended before it began",
            ));
        };
        let get = GetTaskRequest {
            id,
            history_length: Some(0),
            tenant: None,
        };
        let record = self.service.get_task(cx, &get).await?;
        Ok(Answer::of(&record.task))
    }

    /// A blocking send to an agent that does not stream: its result, or the events to follow
    /// when it is not over when the send's wait is.
    async fn send(
        &self,
        cx: &RequestContext,
        params: SendMessageRequest,
    ) -> Result<Result<Answer, TaskEvents>, A2aError> {
        match self.service.send_message(cx, params).await? {
            SendOutcome::Message(message) => {
                Ok(Ok(Answer::Result(tools::message_result(&message))))
            }
            SendOutcome::Task(record) if is_final_state(&record.task.status.state) => {
                Ok(Ok(Answer::of(&record.task)))
            }
            SendOutcome::Task(record) => {
                let follow = SubscribeToTaskRequest {
                    id: record.task.id.clone(),
                    tenant: None,
                };
                let (_, events) = self.service.subscribe(cx, follow, None).await?;
                Ok(Err(events))
            }
        }
    }
}

/// How a call's task ended, for the call's result.
enum Answer {
    /// The result, whole.
    Result(CallToolResult),
    /// The task waits for input: a question, as the client can take it.
    Interrupted(Box<Task>),
}

impl Answer {
    fn of(task: &Task) -> Answer {
        if is_interrupted(&task.status.state) {
            Answer::Interrupted(Box::new(task.clone()))
        } else {
            Answer::Result(tools::task_result(task))
        }
    }
}

/// The state a continuation carries: the task it continues.
const STATE_PREFIX: &str = "a2a-task:";

/// The key of the one input an interrupted task asks for.
const ANSWER: &str = "answer";

/// The task a call's `request_state` names, and the answer its input responses carry (`None`:
/// the user declined or canceled).
fn continuation(
    request: &CallToolRequestParams,
) -> Option<Result<(String, Option<String>), String>> {
    let state = request.request_state.as_deref()?;
    let Some(task_id) = state.strip_prefix(STATE_PREFIX).filter(|id| !id.is_empty()) else {
        return Some(Err("the request state is not one this gateway gave".into()));
    };
    let response = request.input_responses.as_ref().and_then(|r| r.get(ANSWER));
    let Some(response) = response else {
        return Some(Err(format!("the input response {ANSWER:?} is missing")));
    };
    let action = response.get("action").and_then(serde_json::Value::as_str);
    let answer = response
        .get("content")
        .and_then(|c| c.get(ANSWER))
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    Some(match (action, answer) {
        (Some("accept"), Some(answer)) => Ok((task_id.to_owned(), Some(answer))),
        (Some("accept"), None) => Err(format!("the accepted input has no {ANSWER:?}")),
        _ => Ok((task_id.to_owned(), None)),
    })
}

/// The elicitation of `task`'s question, for a client that takes elicitations.
fn elicitation(task: &Task) -> CallToolResponse {
    let question = task
        .status
        .message
        .as_ref()
        .map(tools::message_text)
        .filter(|q| !q.trim().is_empty())
        .unwrap_or_else(|| format!("The task {} waits for your input", task.id));
    let request = serde_json::json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": question,
            "requestedSchema": {
                "type": "object",
                "properties": {ANSWER: {"type": "string", "title": "Your answer"}},
                "required": [ANSWER]
            }
        }
    });
    match serde_json::from_value::<InputRequest>(request) {
        Ok(request) => CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(InputRequests::from([(ANSWER.to_owned(), request)])),
            Some(format!("{STATE_PREFIX}{}", task.id)),
        )),
        Err(_) => CallToolResponse::Complete(tools::task_result(task)),
    }
}

/// Sends one progress notification (a client gone is no error of the call's).
async fn notify(mcp: &McpContext<RoleServer>, token: &ProgressToken, step: f64, text: String) {
    let mut param = ProgressNotificationParam::new(token.clone(), step);
    param.message = Some(text.chars().take(MAX_PROGRESS_TEXT).collect());
    if let Err(error) = mcp.peer.notify_progress(param).await {
        tracing::debug!(%error, "a progress notification was not sent");
    }
}

impl ServerHandler for McpTools {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new(
                "agent-mesh-gateway",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Each tool is an agent of the mesh: a call sends `text` (and optional `data` and \
                 `files`) as a message and answers with the task's artifacts. A task that waits \
                 for input answers with its question and `taskId`; call the tool again with \
                 that `taskId` and the answer as `text`.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: McpContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: McpContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let agent = request.name.to_string();
        if !self.service.registry.is_online(&agent) {
            return Err(McpError::invalid_params(
                format!(
                    "no agent {agent:?} is online (agents on the mesh: {})",
                    self.service.agents_on_the_mesh()
                ),
                None,
            ));
        }
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let cx = RequestContext {
            agent,
            caller: parts.and_then(|p| p.extensions.get::<Authenticated>().cloned()),
            traceparent: parts
                .and_then(|p| p.headers.get("traceparent"))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            dialect: Dialect::V1_0,
        };
        let asked = match continuation(&request) {
            None => tools::asked(request.arguments.as_ref()),
            Some(Err(why)) => Err(why),
            // The user declined to answer: the task is canceled.
            Some(Ok((task_id, None))) => {
                let cancel = CancelTaskRequest {
                    id: task_id,
                    metadata: None,
                    tenant: None,
                };
                let text = match self.service.cancel_task(&cx, cancel).await {
                    Ok(_) => "the question was not answered: the task is canceled".to_owned(),
                    Err(error) => error.message,
                };
                return Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                    ContentBlock::text(text),
                ])));
            }
            Some(Ok((task_id, Some(answer)))) => Ok(tools::answer(task_id, answer)),
        }
        .map_err(|why| McpError::invalid_params(why, None))?;
        let elicits = context
            .meta
            .client_capabilities()
            .or_else(|| {
                context
                    .peer
                    .peer_info()
                    .map(|info| info.capabilities.clone())
            })
            .is_some_and(|c| c.elicitation.is_some());
        let progress = context.meta.get_progress_token();
        Ok(match self.run(&cx, asked, progress, &context).await {
            Ok(Answer::Result(result)) => CallToolResponse::Complete(result),
            Ok(Answer::Interrupted(task)) if elicits => elicitation(&task),
            Ok(Answer::Interrupted(task)) => CallToolResponse::Complete(tools::task_result(&task)),
            // The agent's or the gateway's refusal, as the tool's error: the client reads it.
            Err(error) => {
                CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(
                    error.message,
                )]))
            }
        })
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let Ok(_permit) = self.listens.clone().try_acquire_owned() else {
            return Err(McpError::internal_error(
                format!("at most {MAX_LISTENS} listen streams are open at once"),
                None,
            ));
        };
        let mut events = self.service.registry.subscribe();
        let mut listed = self.listed();
        loop {
            let event = tokio::select! {
                () = context.cancelled() => return Ok(()),
                () = self.service.shutdown.cancelled() => return Ok(()),
                event = events.recv() => event,
            };
            // Every change of the registry (a card, an instance online or offline; or so many
            // that some were missed) may change the list.
            if let Err(broadcast::error::RecvError::Closed) = event {
                return Ok(());
            }
            let now = self.listed();
            if now != listed {
                listed = now;
                if context.sink().notify_tool_list_changed().await.is_err() {
                    return Ok(());
                }
            }
        }
    }
}
