//! Health and discovery endpoints: `GET /healthz` (the process serves), `GET /readyz` (the
//! bus is connected and the registry has loaded the mesh's retained state: 200, else 503),
//! and `GET /agents` (every agent of the mesh, online or not, with its skills; with a trust
//! store, whether its card is trusted, and why not).

use crate::http::json_status;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use mesh_core::bus::Bus;
use mesh_core::registry::{CardTrust, Registry};
use serde_json::{Value, json};
use std::sync::Arc;

/// What the health endpoints read.
pub(crate) struct Health {
    pub bus: Bus,
    pub registry: Registry,
}

/// `GET /healthz`.
pub(crate) async fn healthz() -> Response {
    json_status(StatusCode::OK, json!({"status": "ok"}))
}

/// `GET /readyz`.
pub(crate) async fn readyz(State(gw): State<Arc<Health>>) -> Response {
    let bus = gw.bus.is_connected();
    let registry = gw.registry.is_loaded();
    let status = if bus && registry {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_status(
        status,
        json!({
            "status": if status == StatusCode::OK { "ready" } else { "not ready" },
            "bus": if bus { "connected" } else { "disconnected" },
            "registry": if registry { "loaded" } else { "loading" },
        }),
    )
}

/// `GET /agents`.
pub(crate) async fn agents(State(gw): State<Arc<Health>>) -> Response {
    json_status(StatusCode::OK, agents_json(&gw.registry))
}

/// The body of `GET /agents` (`{"agents": [...]}`), also the console's live feed of them.
pub(crate) fn agents_json(registry: &Registry) -> Value {
    let agents: Vec<Value> = registry
        .agents()
        .into_iter()
        .map(|agent| {
            let skills = agent
                .card
                .as_ref()
                .map(|card| serde_json::to_value(&card.skills).unwrap_or(Value::Null))
                .unwrap_or_else(|| json!([]));
            let last_seen = agent
                .last_seen
                .map(|t| chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339());
            let mut entry = json!({
                "name": agent.name,
                "online": agent.online(),
                "instances": agent.instances.len(),
                "description": agent.card.as_ref().map(|c| c.description.clone()),
                "skills": skills,
                "lastSeen": last_seen,
            });
            if registry.verifies_cards() {
                entry["trusted"] = json!(matches!(agent.trust, CardTrust::Verified { .. }));
                match &agent.trust {
                    CardTrust::Verified { kid } => entry["kid"] = json!(kid),
                    CardTrust::Refused { reason, kid } => {
                        entry["refused"] = json!({"reason": reason, "kid": kid});
                    }
                    CardTrust::Unchecked => {}
                }
            }
            entry
        })
        .collect();
    json!({ "agents": agents })
}
