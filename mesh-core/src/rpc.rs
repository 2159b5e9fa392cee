//! Decoded requests and replies: what the agent runtime and the gateway work with.
//!
//! A [`Request`] is a JSON-RPC request whose method is known and whose params were read
//! into the model ([`Call`]); a [`Reply`] is a result (or stream event) in the model.
//! [`crate::codec`] turns bytes of any dialect into these and back.

use crate::dialect::{Dialect, Method};
use crate::error::A2aError;
use crate::jsonrpc::JsonRpcId;
use crate::meta::MeshMeta;
use crate::model::{
    AgentCard, CancelTaskRequest, DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse, ListTasksRequest, ListTasksResponse, MESH_KEY,
    Message, SendMessageRequest, SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task,
    TaskArtifactUpdateEvent, TaskPushNotificationConfig, TaskStatusUpdateEvent, is_final_state,
};

/// A decoded A2A request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The JSON-RPC id; `None` for a notification (no `id` member).
    pub id: Option<JsonRpcId>,
    /// The operation.
    pub method: Method,
    /// The dialect the request was written in (or is to be written in, for
    /// [`crate::codec::encode_request`]).
    pub dialect: Dialect,
    /// True when the method name is shared by 0.1 and 0.3 (`tasks/get`, `tasks/cancel`,
    /// `tasks/resubscribe`, `tasks/list`): `dialect` is then V0_3, and the answer should be
    /// written in the dialect that created the task.
    pub shared_method: bool,
    /// The typed params.
    pub call: Call,
    /// The bus envelope, `params.metadata._mesh` on the wire (reply topic, request id,
    /// deadline, caller, …). The readers lift it out of the params' metadata (so a handler or
    /// a client never sees it there) and the writers write it back; a `_mesh` entry left in
    /// the params' metadata map is not written. Empty (the default) over HTTP.
    pub mesh: MeshMeta,
}

/// The typed params of a request.
// The variants hold the model types unboxed: that is the agreed API, and a request is
// built once per message, so the size difference does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// SendMessage and SendStreamingMessage ([`Request::method`] tells which).
    Send(SendMessageRequest),
    /// GetTask.
    GetTask(GetTaskRequest),
    /// ListTasks.
    ListTasks(ListTasksRequest),
    /// CancelTask.
    CancelTask(CancelTaskRequest),
    /// SubscribeToTask (0.x `tasks/resubscribe`).
    Subscribe(SubscribeToTaskRequest),
    /// Set/create a push-notification config.
    SetPushConfig(TaskPushNotificationConfig),
    /// Get a push-notification config (`id` is empty when a 0.x client named none).
    GetPushConfig(GetTaskPushNotificationConfigRequest),
    /// List a task's push-notification configs.
    ListPushConfigs(ListTaskPushNotificationConfigsRequest),
    /// Delete a push-notification config.
    DeletePushConfig(DeleteTaskPushNotificationConfigRequest),
    /// Get the extended agent card.
    GetExtendedCard,
}

impl Call {
    /// Removes `_mesh` from the params' metadata (the calls that carry metadata: send and
    /// cancel) and reads it (see [`MeshMeta::take`]).
    pub(crate) fn take_mesh(&mut self) -> MeshMeta {
        match self {
            Call::Send(params) => MeshMeta::take(&mut params.metadata),
            Call::CancelTask(params) => MeshMeta::take(&mut params.metadata),
            _ => MeshMeta::default(),
        }
    }

    /// The method this call belongs to (SendMessage for [`Call::Send`]; the request's
    /// `method` tells streaming apart).
    pub fn default_method(&self) -> Method {
        match self {
            Call::Send(_) => Method::SendMessage,
            Call::GetTask(_) => Method::GetTask,
            Call::ListTasks(_) => Method::ListTasks,
            Call::CancelTask(_) => Method::CancelTask,
            Call::Subscribe(_) => Method::SubscribeToTask,
            Call::SetPushConfig(_) => Method::SetPushConfig,
            Call::GetPushConfig(_) => Method::GetPushConfig,
            Call::ListPushConfigs(_) => Method::ListPushConfigs,
            Call::DeletePushConfig(_) => Method::DeletePushConfig,
            Call::GetExtendedCard => Method::GetExtendedCard,
        }
    }
}

/// A result or stream event, in the model.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A task (SendMessage, GetTask, CancelTask, first stream event, ...).
    Task(Task),
    /// A direct message answer.
    Message(Message),
    /// A status-update stream event.
    StatusUpdate(TaskStatusUpdateEvent),
    /// An artifact-update stream event.
    ArtifactUpdate(TaskArtifactUpdateEvent),
    /// A page of tasks.
    Tasks(ListTasksResponse),
    /// One push-notification config.
    PushConfig(TaskPushNotificationConfig),
    /// A list of push-notification configs.
    PushConfigs(ListTaskPushNotificationConfigsResponse),
    /// An agent card.
    Card(AgentCard),
    /// No content (DeletePushConfig): `null` in 0.x, `{}` in 1.0.
    Empty,
}

impl Reply {
    /// Whether this event ends an event stream: a message; a task or status update in a
    /// final state (terminal, input-required, auth-required; a status update's 0.x `final`
    /// read as `metadata._mesh.final` wins); any non-event reply.
    pub fn is_final(&self) -> bool {
        let stashed = match self {
            Reply::StatusUpdate(e) => e
                .metadata
                .as_ref()
                .and_then(|m| m.get(MESH_KEY))
                .and_then(|m| m.get("final")),
            _ => None,
        };
        self.ends_stream(stashed.and_then(serde_json::Value::as_bool))
    }

    /// [`Reply::is_final`] of a reply whose `_mesh` was taken out into `mesh` (a 0.x `final`
    /// is in its `other` entries).
    pub fn is_final_given(&self, mesh: &MeshMeta) -> bool {
        self.ends_stream(mesh.other.get("final").and_then(serde_json::Value::as_bool))
    }

    /// Whether this event ends a stream, `stashed` being a status update's 0.x `final`.
    fn ends_stream(&self, stashed: Option<bool>) -> bool {
        match self {
            Reply::Task(t) => is_final_state(&t.status.state),
            Reply::StatusUpdate(e) => stashed.unwrap_or_else(|| is_final_state(&e.status.state)),
            Reply::ArtifactUpdate(_) => false,
            _ => true,
        }
    }

    /// Takes the `_mesh` metadata out of a task, message or event (what a client never sees)
    /// and returns it: empty when there is none, or for the other replies.
    pub fn take_mesh(&mut self) -> MeshMeta {
        match self {
            Reply::Task(task) => MeshMeta::take(&mut task.metadata),
            Reply::Message(message) => MeshMeta::take(&mut message.metadata),
            Reply::StatusUpdate(event) => MeshMeta::take(&mut event.metadata),
            Reply::ArtifactUpdate(event) => MeshMeta::take(&mut event.metadata),
            _ => MeshMeta::default(),
        }
    }
}

impl From<StreamResponse> for Reply {
    fn from(r: StreamResponse) -> Self {
        match r {
            StreamResponse::Task(t) => Reply::Task(t),
            StreamResponse::Message(m) => Reply::Message(m),
            StreamResponse::StatusUpdate(e) => Reply::StatusUpdate(e),
            StreamResponse::ArtifactUpdate(e) => Reply::ArtifactUpdate(e),
        }
    }
}

impl From<SendMessageResponse> for Reply {
    fn from(r: SendMessageResponse) -> Self {
        match r {
            SendMessageResponse::Task(t) => Reply::Task(t),
            SendMessageResponse::Message(m) => Reply::Message(m),
        }
    }
}

/// Why a request could not be decoded, with what was readable so that the caller can
/// answer in the right dialect with the right id.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct RequestError {
    /// The request id, when it was readable (`None`: answer with `id: null`).
    pub id: Option<JsonRpcId>,
    /// True when the request had no `id` member (a notification). Its error is still worth
    /// answering, with `id: null`: the caller cannot learn otherwise why nothing happened.
    pub notification: bool,
    /// The dialect, when the method was known.
    pub dialect: Option<Dialect>,
    /// The method, when known.
    pub method: Option<Method>,
    /// True when the method name is shared by 0.1 and 0.3.
    pub shared_method: bool,
    /// The error to answer with.
    pub error: A2aError,
}
