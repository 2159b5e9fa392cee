//! The one internal A2A model: the protocol's v1.0 types from the official `a2a-lf` crate,
//! re-exported.
//!
//! Every dialect is read into these types and written out of them by [`crate::codec`];
//! there is no second model. Fields an older dialect has no place for travel in the
//! object's `metadata` under [`MESH_KEY`] (see [`crate::codec`]).

pub use a2a::{
    AgentCapabilities, AgentCard, AgentCardSignature, AgentExtension, AgentInterface,
    AgentProvider, AgentSkill, ApiKeySecurityScheme, Artifact, AuthenticationInfo,
    AuthorizationCodeOAuthFlow, CancelTaskRequest, ClientCredentialsOAuthFlow,
    DeleteTaskPushNotificationConfigRequest, DeviceCodeOAuthFlow, GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, HttpAuthSecurityScheme,
    ImplicitOAuthFlow, ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse, ListTasksRequest, ListTasksResponse, Message,
    MutualTlsSecurityScheme, OAuth2SecurityScheme, OAuthFlows, OpenIdConnectSecurityScheme, Part,
    PartContent, PasswordOAuthFlow, Role, SecurityRequirement, SecurityScheme,
    SendMessageConfiguration, SendMessageRequest, SendMessageResponse, StreamResponse,
    SubscribeToTaskRequest, TRANSPORT_PROTOCOL_GRPC, TRANSPORT_PROTOCOL_HTTP_JSON,
    TRANSPORT_PROTOCOL_JSONRPC, Task, TaskArtifactUpdateEvent, TaskPushNotificationConfig,
    TaskState, TaskStatus, TaskStatusUpdateEvent,
};

pub use a2a::{new_artifact_id, new_context_id, new_message_id, new_task_id};

/// Free-form metadata map, as the model types carry it.
pub type Metadata = std::collections::HashMap<String, serde_json::Value>;

/// The reserved metadata key under which the codecs keep what an older dialect has no
/// field for (e.g. `{"_mesh": {"artifactId": "…"}}` on a 0.1 artifact). Other modules also
/// use it in `params.metadata` for bus routing; the codecs carry that verbatim.
pub const MESH_KEY: &str = "_mesh";

/// A state's name as people and the 0.x dialects spell it: `input-required`, `completed`, …
/// (`unknown` for unspecified).
pub fn state_name(state: &TaskState) -> &'static str {
    match state {
        TaskState::Unspecified => "unknown",
        TaskState::Submitted => "submitted",
        TaskState::Working => "working",
        TaskState::Completed => "completed",
        TaskState::Failed => "failed",
        TaskState::Canceled => "canceled",
        TaskState::InputRequired => "input-required",
        TaskState::Rejected => "rejected",
        TaskState::AuthRequired => "auth-required",
    }
}

/// The params of a send with only a message (no configuration, metadata or tenant).
pub fn send_params(message: Message) -> SendMessageRequest {
    SendMessageRequest {
        message,
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

/// Whether a status update ends its stream, as 0.1/0.3 `final` expresses it: terminal
/// states and the interrupted states (input-required, auth-required).
pub fn is_final_state(state: &TaskState) -> bool {
    state.is_terminal() || matches!(state, TaskState::InputRequired | TaskState::AuthRequired)
}
