//! Calling other agents from inside a handler: [`Peers`].
//!
//! A call goes over the bus like any request (the calling instance's replies come back on
//! `<ns>/a2a/v1/agent/response/<caller>/<instance>/<peer>/<task>`). A peer that is not online is an immediate
//! [`PeerError::NotOnline`], not a hang; the call depth travels with the request and a call
//! past the limit is refused, which stops delegation loops; the sub-task inherits what is left
//! of its parent's deadline; and when the parent task is canceled, every sub-task it started
//! is canceled too.

use futures_core::Stream;
use mesh_core::dialect::Method;
use mesh_core::error::A2aError;
use mesh_core::model::{Message, Role, StreamResponse, Task, send_params};
use mesh_core::requester::{Delivery, ReplyStream, Requester, SendError, SendOptions};
use mesh_core::rpc::Reply;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::directory::PeerDirectory;

/// Why a call to a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// No instance of the agent is online.
    #[error("agent {0} is not online")]
    NotOnline(String),
    /// The call would exceed the mesh's call-depth limit (a delegation loop?).
    #[error("call depth {depth} exceeds the limit of {limit}")]
    DepthExceeded {
        /// The depth the call would have.
        depth: u32,
        /// The configured limit.
        limit: u32,
    },
    /// The parent task was canceled.
    #[error("the calling task was canceled")]
    Canceled,
    /// The request could not be sent.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The peer answered with an error.
    #[error("agent {agent} answered: {error}")]
    Remote {
        /// The agent called.
        agent: String,
        /// Its error.
        error: A2aError,
    },
}

/// Handles to the rest of the mesh, bound to the calling task.
#[derive(Clone)]
pub struct Peers {
    pub(crate) requester: Requester,
    pub(crate) directory: PeerDirectory,
    pub(crate) depth: u32,
    pub(crate) max_depth: u32,
    pub(crate) parent: CancellationToken,
    pub(crate) time_left: Duration,
    pub(crate) principal: Option<String>,
}

/// The final answer of a peer: a task (completed, failed, input required…) or a message.
#[derive(Debug, Clone, PartialEq)]
pub enum PeerAnswer {
    /// The peer ran a task; this is how it ended.
    Task(Task),
    /// The peer answered directly.
    Message(Message),
}

impl Peers {
    /// True if the agent has an online instance. The instance's first look at its peers
    /// subscribes to the mesh's cards and presence and waits until they are loaded.
    pub async fn is_online(&self, agent: &str) -> Result<bool, PeerError> {
        Ok(self
            .directory
            .registry()
            .await
            .map_err(SendError::from)?
            .is_online(agent))
    }

    /// The agents online now, this one included, each with its card when it published one.
    pub async fn online(
        &self,
    ) -> Result<Vec<(String, Option<mesh_core::model::AgentCard>)>, PeerError> {
        let registry = self.directory.registry().await.map_err(SendError::from)?;
        Ok(registry
            .agents()
            .into_iter()
            .filter(|agent| !agent.instances.is_empty())
            .map(|agent| (agent.name, agent.card))
            .collect())
    }

    /// Sends `message` to `agent` and waits for its final answer.
    pub async fn send(&self, agent: &str, message: Message) -> Result<PeerAnswer, PeerError> {
        let mut stream = self.open(agent, message, Method::SendMessage).await?;
        let mut last_task = None;
        while let Some(event) = stream.next().await {
            match event? {
                StreamResponse::Task(task) => last_task = Some(task),
                StreamResponse::Message(message) => return Ok(PeerAnswer::Message(message)),
                StreamResponse::StatusUpdate(_) | StreamResponse::ArtifactUpdate(_) => {}
            }
        }
        last_task
            .map(PeerAnswer::Task)
            .ok_or_else(|| PeerError::Remote {
                agent: agent.to_owned(),
                error: A2aError::invalid_agent_response("the stream ended without an answer"),
            })
    }

    /// Sends `message` to `agent` and streams every event of its task.
    pub async fn stream(&self, agent: &str, message: Message) -> Result<PeerStream, PeerError> {
        self.open(agent, message, Method::SendStreamingMessage)
            .await
    }

    /// Sends text to `agent` as a user message and waits for its final answer.
    pub async fn ask(&self, agent: &str, text: &str) -> Result<PeerAnswer, PeerError> {
        let message = Message::new(Role::User, vec![mesh_core::model::Part::text(text)]);
        self.send(agent, message).await
    }

    async fn open(
        &self,
        agent: &str,
        mut message: Message,
        method: Method,
    ) -> Result<PeerStream, PeerError> {
        if self.parent.is_cancelled() {
            return Err(PeerError::Canceled);
        }
        let depth = self.depth + 1;
        if depth > self.max_depth {
            return Err(PeerError::DepthExceeded {
                depth,
                limit: self.max_depth,
            });
        }
        if !self.is_online(agent).await? {
            return Err(PeerError::NotOnline(agent.to_owned()));
        }
        // A fresh sub-task, in a fresh context: the peer's task is its own.
        let task_id = uuid::Uuid::now_v7().to_string();
        message.task_id = None;
        let stream = self
            .requester
            .send(
                agent,
                send_params(message),
                SendOptions {
                    method,
                    task_id: task_id.clone(),
                    snapshot: None,
                    timeout: self.time_left,
                    principal: self.principal.clone(),
                    depth,
                    traceparent: None,
                    keeps_history: false,
                    stream_after_progress: false,
                },
            )
            .await?;
        // Cancel the sub-task when the parent is canceled, until the sub-task ends.
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let parent = self.parent.clone();
        let requester = self.requester.clone();
        let agent_name = agent.to_owned();
        let child_task = task_id.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = parent.cancelled() => {
                    let _ = requester.cancel(&agent_name, &child_task, Duration::from_secs(5)).await;
                }
                _ = done_rx => {}
            }
        });
        Ok(PeerStream {
            events: Box::pin(events(stream, Arc::from(agent), self.parent.clone())),
            task_id,
            _done: done_tx,
        })
    }
}

/// The events of a peer's task, in order, as the model has them (the task, status and
/// artifact updates, or a direct message); ends after the final one, or with
/// [`PeerError::Canceled`] when the calling task is canceled. Read it with
/// [`next`](PeerStream::next), or as a [`Stream`].
pub struct PeerStream {
    events: Pin<Box<dyn Stream<Item = Result<StreamResponse, PeerError>> + Send>>,
    task_id: String,
    /// Dropped with the stream: the sub-task's cancel cascade stops watching the parent.
    _done: oneshot::Sender<()>,
}

impl PeerStream {
    /// The id of the peer's task.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The next event (bus metadata removed); `None` after the final one.
    pub async fn next(&mut self) -> Option<Result<StreamResponse, PeerError>> {
        std::future::poll_fn(|cx| self.events.as_mut().poll_next(cx)).await
    }
}

impl Stream for PeerStream {
    type Item = Result<StreamResponse, PeerError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.as_mut().poll_next(cx)
    }
}

/// The replies of `agent` on `inner` as stream events, until the last one or until `parent`
/// is canceled.
fn events(
    inner: ReplyStream,
    agent: Arc<str>,
    parent: CancellationToken,
) -> impl Stream<Item = Result<StreamResponse, PeerError>> + Send {
    futures_util::stream::unfold(Some(inner), move |inner| {
        let (agent, parent) = (agent.clone(), parent.clone());
        async move {
            let mut inner = inner?;
            let delivery = tokio::select! {
                delivery = inner.next() => delivery?,
                _ = parent.cancelled() => return Some((Err(PeerError::Canceled), None)),
            };
            let Delivery { reply, .. } = delivery;
            let event = match reply {
                // Its `_mesh` taken out by the requester.
                Ok(reply) => stream_event(reply).map_err(|error| PeerError::Remote {
                    agent: agent.to_string(),
                    error,
                }),
                Err(error) => Err(PeerError::Remote {
                    agent: agent.to_string(),
                    error,
                }),
            };
            Some((event, Some(inner)))
        }
    })
}

/// A reply as the stream event it must be.
fn stream_event(reply: Reply) -> Result<StreamResponse, A2aError> {
    Ok(match reply {
        Reply::Task(task) => StreamResponse::Task(task),
        Reply::Message(message) => StreamResponse::Message(message),
        Reply::StatusUpdate(event) => StreamResponse::StatusUpdate(event),
        Reply::ArtifactUpdate(event) => StreamResponse::ArtifactUpdate(event),
        _ => {
            return Err(A2aError::invalid_agent_response(
                "the answer is not a task, a message or a task event",
            ));
        }
    })
}
