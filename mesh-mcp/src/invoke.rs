//! One tool call on a live connection, as its caller follows it: [`McpConnection::invoke`]
//! sends `tools/call`, and the [`Invocation`] yields the call's progress notifications and then
//! its result; [`Invocation::cancel`] sends MCP's `notifications/cancelled`. A call that cannot
//! reach the server reports the connection broken (see [`Live::report_broken`]).

use std::pin::Pin;
use std::time::Duration;

use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, RequestId, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Map, Value};

use crate::connection::{Live, McpConnection, Progress, ProgressRoute};

/// How long a call that could not reach the server waits for the connection to be marked
/// down, to say why and when it is tried again.
const DOWN_NOTICE: Duration = Duration::from_secs(1);

type Response = Pin<Box<dyn Future<Output = Result<ServerResult, ServiceError>> + Send>>;

/// A tool call under way.
pub struct Invocation {
    tool: String,
    live: Live,
    request_id: RequestId,
    progress: ProgressRoute,
    response: Response,
}

/// What a call says next.
pub enum CallEvent {
    /// A progress notification.
    Progress(Progress),
    /// The result (the tool's own result, its `isError` included), or why there is none.
    Done(Result<CallToolResult, String>),
}

impl McpConnection {
    /// Calls `tool` with `arguments` on the live connection; why not when it is down or the
    /// request cannot be sent.
    pub async fn invoke(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<Invocation, String> {
        let live = self.live()?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = match live
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(error) => {
                if unreachable(&error) {
                    live.report_broken();
                    // What a call made a moment later is told: not available, and when it is
                    // tried again.
                    if let Some(why) = self.why_down(&live, DOWN_NOTICE).await {
                        return Err(why);
                    }
                }
                return Err(format!(
                    "the MCP server did not take the call of {tool}: {error}"
                ));
            }
        };
        let progress = self.follow_progress(handle.progress_token.clone());
        let request_id = handle.id.clone();
        Ok(Invocation {
            tool: tool.to_owned(),
            live,
            request_id,
            progress,
            response: Box::pin(handle.await_response()),
        })
    }
}

impl Invocation {
    /// The next progress notification, or the result (after which nothing more comes).
    pub async fn next(&mut self) -> CallEvent {
        let result = tokio::select! {
            result = &mut self.response => result,
            Some(progress) = self.progress.receiver.recv() => return CallEvent::Progress(progress),
        };
        CallEvent::Done(match result {
            Ok(ServerResult::CallToolResult(result)) => Ok(result),
            Ok(_) => Err(format!(
                "the MCP server answered the call of {} with something other than a tool result \
                 (a request for input or a task, which is not served here)",
                self.tool
            )),
            Err(error) => {
                if unreachable(&error) {
                    self.live.report_broken();
                }
                Err(format!("the call of {} failed: {error}", self.tool))
            }
        })
    }

    /// The result, progress notifications dropped.
    pub async fn result(mut self) -> Result<CallToolResult, String> {
        loop {
            if let CallEvent::Done(result) = self.next().await {
                return result;
            }
        }
    }

    /// Sends MCP's cancellation of this call (the server stops the tool).
    pub async fn cancel(self, reason: &str) {
        let notice = CancelledNotificationParam::new(Some(self.request_id), Some(reason.into()));
        if let Err(error) = self.live.peer.notify_cancelled(notice).await {
            tracing::warn!(%error, "could not send the MCP cancellation");
        }
    }
}

/// Whether `error` says the server could not be reached (rather than that it answered with
/// an error).
fn unreachable(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportSend(_) | ServiceError::TransportClosed
    )
}
