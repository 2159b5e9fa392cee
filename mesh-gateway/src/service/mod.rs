//! The A2A operations, free of any transport: one method per operation of spec 1.0 §3
//! (send, stream, get, list, cancel, subscribe, the push-notification configs, the extended
//! card), typed requests in, model types or an [`A2aError`] out. The bindings (JSON-RPC in
//! every dialect, HTTP+JSON, gRPC) are adapters that decode a request into the model, call
//! one method here and encode its answer; nothing here knows HTTP, JSON-RPC ids or protobuf.
//!
//! Every call carries a [`RequestContext`]: the agent it is for, the authenticated caller,
//! the trace context and the protocol generation the client speaks (which decides a few
//! protocol rules: a 0.1 client names a new task's id, a 0.x push config is named after its
//! task). With API keys, the caller's principal owns the tasks it creates (another principal
//! gets "task not found") and is forwarded to the agent.
//!
//! Sending starts a task on the bus and hands its reply stream to the
//! [`bridge`](crate::bridge); everything else answers from the task store. The parts:
//! [`send`] (send and stream), [`tasks`] (get, list, cancel, subscribe), [`push_configs`],
//! and [`events`] (a task's events as a binding streams them).

pub(crate) mod events;
mod follow;
pub(crate) mod push_configs;
pub(crate) mod send;
pub(crate) mod tasks;

use crate::auth::Authenticated;
use crate::bridge::Bridge;
use crate::cards::Cards;
use crate::metrics::Metrics;
use crate::push::Pusher;
use crate::store::{TaskRecord, TaskStore};
use mesh_core::bus::Bus;
use mesh_core::dialect::Dialect;
use mesh_core::error::A2aError;
use mesh_core::model::AgentCard;
use mesh_core::registry::Registry;
use mesh_core::requester::Requester;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub(crate) use events::TaskEvents;
pub(crate) use send::SendOutcome;
pub(crate) use tasks::TaskList;

/// The settings the operations use.
#[derive(Debug, Clone)]
pub(crate) struct ServiceSettings {
    /// How long an agent has to finish a task.
    pub task_timeout: Duration,
    /// How long a blocking send waits for the task to end before answering with it as it stands.
    pub blocking_wait: Duration,
    /// How long a cancel waits for the agent's answer.
    pub cancel_wait: Duration,
    /// Whether tasks belong to the principal that created them (the gateway has API keys).
    pub owned_tasks: bool,
}

/// One request's context, as every binding fills it in.
#[derive(Debug, Clone)]
pub(crate) struct RequestContext {
    /// The agent the request is for.
    pub agent: String,
    /// The authenticated caller (absent without API keys).
    pub caller: Option<Authenticated>,
    /// The W3C trace context the client sent, forwarded to the agent.
    pub traceparent: Option<String>,
    /// The protocol generation the client speaks (1.0 for HTTP+JSON and gRPC).
    pub dialect: Dialect,
}

impl RequestContext {
    /// The caller's principal, when there is one.
    pub(crate) fn principal(&self) -> Option<&str> {
        self.caller.as_ref().map(|c| c.principal.as_str())
    }
}

/// The A2A operations over the bus and the task store (see the module docs).
pub(crate) struct A2aService {
    pub(crate) settings: ServiceSettings,
    pub(crate) bus: Bus,
    pub(crate) registry: Registry,
    pub(crate) requester: Requester,
    pub(crate) bridge: Arc<Bridge>,
    /// The webhook delivery queue; `None` when push notifications are off.
    pub(crate) pusher: Option<Arc<Pusher>>,
    /// The cards the gateway serves (the extended card is an operation).
    pub(crate) cards: Arc<Cards>,
    /// Counts open streams.
    pub(crate) metrics: Arc<Metrics>,
    /// Ends open event streams when the gateway shuts down.
    pub(crate) shutdown: CancellationToken,
}

impl A2aService {
    /// The task store.
    pub(crate) fn store(&self) -> &Arc<dyn TaskStore> {
        self.bridge.store()
    }

    /// The names of the agents on the mesh, as the errors that list them say it ("a, b", or
    /// "none").
    pub(crate) fn agents_on_the_mesh(&self) -> String {
        listed(&self.agent_names())
    }

    fn agent_names(&self) -> Vec<String> {
        self.registry.agents().into_iter().map(|a| a.name).collect()
    }

    /// A request for the default agent on a gateway that has none; `how` says how to name
    /// an agent in the request's binding.
    pub(crate) fn no_default_agent(&self, how: &str) -> A2aError {
        let agents = self.agent_names();
        A2aError::invalid_request(format!(
            "this gateway has no default agent: {how} (agents on the mesh: {})",
            listed(&agents)
        ))
        .with_data(serde_json::json!({ "agents": agents }))
    }

    /// `GetExtendedAgentCard`: the agent's card for an authenticated caller. Without API keys
    /// the cards claim no extended card, so a 1.0 client gets UnsupportedOperation (spec 1.0
    /// §3.3.4) and a 0.x one its generation's `-32007` (0.3's "not configured").
    pub(crate) fn extended_card(&self, cx: &RequestContext) -> Result<AgentCard, A2aError> {
        if !self.cards.api_keys && cx.dialect == Dialect::V1_0 {
            return Err(A2aError::unsupported_operation(
                "this gateway serves no extended agent card (it has no API keys; the card says capabilities.extendedAgentCard is not set)",
            ));
        }
        let card = crate::cards::extended_card(&self.cards, &cx.agent, cx.caller.as_ref())?;
        Ok(crate::cards::signed_for(&self.cards, card, cx.dialect))
    }

    /// The stored task of the context's agent, when the caller may see it.
    pub(crate) async fn find(
        &self,
        cx: &RequestContext,
        task_id: &str,
    ) -> Result<Arc<TaskRecord>, A2aError> {
        match self.store().load(task_id).await? {
            Some(record) if record.agent == cx.agent && self.owns(cx, &record) => Ok(record),
            _ => Err(A2aError::task_not_found(task_id)),
        }
    }

    /// True when the caller may see the task: always without API keys; with them, only the
    /// principal that created it.
    fn owns(&self, cx: &RequestContext, record: &TaskRecord) -> bool {
        self.may_see(cx.principal(), record.owner.as_deref())
    }

    /// True when `principal` may see a task created by `owner`: always without API keys;
    /// with them, only the principal that created it.
    pub(crate) fn may_see(&self, principal: Option<&str>, owner: Option<&str>) -> bool {
        !self.settings.owned_tasks || owner == principal
    }

    /// The owner a listing for `principal` is limited to (with API keys: that principal).
    pub(crate) fn owner_filter(&self, principal: Option<&str>) -> Option<String> {
        if !self.settings.owned_tasks {
            return None;
        }
        // Without a caller (cannot happen behind the auth layer) nothing matches.
        Some(principal.unwrap_or("\u{0}").to_owned())
    }

    /// Whether webhooks may point at private addresses.
    fn allow_private(&self) -> bool {
        self.pusher.as_ref().is_some_and(|p| p.allow_private())
    }
}

/// Names as the errors that list them say them: "a, b", or "none".
fn listed(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
