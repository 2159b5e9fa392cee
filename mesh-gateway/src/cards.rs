//! Agent cards over HTTP: each agent's card as its instances published it on the bus, with
//! the gateway's URL in it. `supportedInterfaces` lists a JSONRPC entry for 1.0 and one for
//! 0.3 at the same URL. A request with `A2A-Version: 1.x` gets the 1.0 card (only the members
//! 1.0's schema allows); any other gets the combined shape both generations read (plus the
//! 0.3 members `url`, `preferredTransport`, `protocolVersion`), as spec 1.0 §3.6 treats a
//! request without the header as 0.3; the answer says `Vary: A2A-Version`. Cards carry an `ETag`,
//! `Last-Modified` (when the gateway first served this version) and `Cache-Control`; a
//! matching `If-None-Match` gets 304.
//!
//! The gateway adds what it serves itself: `capabilities.pushNotifications: true` when push
//! notifications are on, and, when API keys are configured, the `securitySchemes` (an HTTP
//! bearer scheme and an `X-API-Key` header scheme), a requirement of either, and
//! `capabilities.extendedAgentCard: true` (`supportsAuthenticatedExtendedCard` in 0.3). The
//! extended card ([`extended_card`], `GET /agents/{name}/extendedAgentCard` and the
//! JSON-RPC methods) is that card plus an extension naming the caller's principal; it is
//! served to authenticated callers only.
//!
//! Signatures: the agent's own signature does not cover the card the gateway rewrote, so it
//! is never served. With a signing key every served card (public and extended; over
//! JSON-RPC, the 1.0 answer) carries the gateway's signature ([`card_signer`]). With a trust
//! store, an agent whose card was refused has no card to serve: 404 saying why.
//!
//! [`card_signer`]: crate::card_signer

use crate::auth::{API_KEY_SCHEME, Authenticated, BEARER_SCHEME};
use crate::card_signer::CardSigner;
use crate::http::json_status;
use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mesh_core::codec;
use mesh_core::dialect::Dialect;
use mesh_core::error::A2aError;
use mesh_core::model::{
    AgentCard, AgentExtension, AgentInterface, TRANSPORT_PROTOCOL_GRPC,
    TRANSPORT_PROTOCOL_HTTP_JSON, TRANSPORT_PROTOCOL_JSONRPC,
};
use mesh_core::registry::{CardTrust, Registry};
use mesh_core::sync::MutexExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// How long clients may cache a card.
const CACHE_CONTROL: &str = "public, max-age=30";

/// A served card: its agent, its URL and whether it is the 1.0 shape.
type CardKey = (String, String, bool);

/// When each served card version was first seen: `(agent, url, shape) → (etag, time)`.
#[derive(Default)]
pub(crate) struct CardCache {
    seen: Mutex<HashMap<CardKey, (String, SystemTime)>>,
}

impl CardCache {
    fn last_modified(&self, agent: &str, url: &str, shape: CardShape, etag: &str) -> SystemTime {
        let mut seen = self.seen.locked();
        let entry = seen
            .entry((agent.to_owned(), url.to_owned(), shape == CardShape::V1))
            .or_insert_with(|| (etag.to_owned(), SystemTime::now()));
        if entry.0 != etag {
            *entry = (etag.to_owned(), SystemTime::now());
        }
        entry.1
    }
}

/// What the cards are made of: the agents' own cards (the registry) and what the gateway
/// serves itself.
pub(crate) struct Cards {
    pub registry: Registry,
    /// The gateway's public base URL, without a trailing slash.
    pub base_url: String,
    /// The agent served at the root, when there is one.
    pub default_agent: Option<String>,
    /// Push notifications are on.
    pub push_notifications: bool,
    /// API keys are configured: cards declare them, and an extended card exists.
    pub api_keys: bool,
    /// The signer of served cards; `None` without a signing key.
    pub signer: Option<CardSigner>,
    pub cache: CardCache,
}

/// `GET /.well-known/agent-card.json` (and the older paths): the default agent's card.
pub(crate) async fn default_card(State(gw): State<Arc<Cards>>, headers: HeaderMap) -> Response {
    let Some(agent) = gw.default_agent.clone() else {
        let agents: Vec<String> = gw.registry.agents().into_iter().map(|a| a.name).collect();
        return json_status(
            StatusCode::NOT_FOUND,
            json!({
                "error": "this gateway has no default agent; ask for /agents/{name}/.well-known/agent-card.json",
                "agents": agents,
            }),
        );
    };
    let url = format!("{}/", gw.base_url);
    serve_card(&gw, &agent, &url, &headers)
}

/// `GET /agents/{name}/.well-known/agent-card.json` (and the older paths).
pub(crate) async fn agent_card(
    State(gw): State<Arc<Cards>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let url = format!("{}/agents/{name}", gw.base_url);
    serve_card(&gw, &name, &url, &headers)
}

/// The URI of the extension the extended card carries.
pub const CALLER_EXTENSION: &str = "urn:agent-mesh:gateway:caller";

/// An agent's card as the gateway serves it at `url` (see the module docs); the message of
/// a 404 when there is none.
pub(crate) fn gateway_card(gw: &Cards, agent: &str, url: &str) -> Result<AgentCard, String> {
    let Some(view) = gw.registry.agent(agent) else {
        return Err(format!("no agent named {agent:?} on the mesh"));
    };
    if let CardTrust::Refused { reason, .. } = view.trust {
        return Err(format!(
            "agent {agent:?} has no trusted card: the card on the bus was refused ({reason})"
        ));
    }
    let Some(mut card) = view.card else {
        return Err(format!("agent {agent:?} has not published a card yet"));
    };
    card.signatures = None;
    // JSON-RPC (the combined card adds its 0.3 entry) and HTTP+JSON at the same base URL;
    // gRPC at the gateway's address, the agent named by the tenant (none at the root: the
    // default agent).
    let mut grpc = AgentInterface::new(grpc_url(&gw.base_url), TRANSPORT_PROTOCOL_GRPC);
    if url.trim_end_matches('/') != gw.base_url {
        grpc.tenant = Some(agent.to_owned());
    }
    card.supported_interfaces = vec![
        AgentInterface::new(url.to_owned(), TRANSPORT_PROTOCOL_JSONRPC),
        AgentInterface::new(url.trim_end_matches('/'), TRANSPORT_PROTOCOL_HTTP_JSON),
        grpc,
    ];
    if gw.push_notifications {
        card.capabilities.push_notifications = Some(true);
    }
    if gw.api_keys {
        card.security_schemes = Some(crate::auth::security_schemes());
        card.security_requirements = Some(
            [BEARER_SCHEME, API_KEY_SCHEME]
                .iter()
                .map(|name| std::iter::once(((*name).to_owned(), Vec::new())).collect())
                .collect(),
        );
        card.capabilities.extended_agent_card = Some(true);
    } else {
        card.capabilities.extended_agent_card = None;
    }
    Ok(card)
}

/// The gRPC interface's URL: the scheme and authority of the base URL (gRPC has no path
/// prefix; a plain `http://` one is written as `host:port`, as gRPC clients take it).
fn grpc_url(base_url: &str) -> String {
    let (scheme, rest) = base_url.split_once("://").unwrap_or(("http", base_url));
    let authority = rest.split('/').next().unwrap_or(rest);
    if scheme == "http" {
        authority.to_owned()
    } else {
        format!("{scheme}://{authority}")
    }
}

/// A card as served to a request with `headers`: the 1.0 shape for a 1.x client, else the
/// combined one; signed when the gateway signs.
pub(crate) fn card_body(gw: &Cards, card: &AgentCard, headers: &HeaderMap) -> Value {
    served_json(gw, card, CardShape::of(headers))
}

/// A card as served over HTTP: the combined shape, signed when the gateway signs.
fn served_json(gw: &Cards, card: &AgentCard, shape: CardShape) -> Value {
    let mut value = codec::card::write_card_combined(card);
    if let (CardShape::V1, Value::Object(members)) = (shape, &mut value) {
        // The 1.0 card: the 0.3 members go; `supportedInterfaces` keeps its 0.3 entry (an
        // AgentInterface like any), which a 1.0 client with a 0.3 mode looks for.
        for member in LEGACY_MEMBERS {
            members.remove(member);
        }
    }
    if let Some(signer) = &gw.signer {
        signer.sign(&mut value);
    }
    value
}

/// The members of the combined card that 0.3 has and the 1.0 card does not.
const LEGACY_MEMBERS: [&str; 4] = [
    "url",
    "preferredTransport",
    "protocolVersion",
    "supportsAuthenticatedExtendedCard",
];

/// Which shape of card a request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CardShape {
    /// The 1.0 card alone (it validates against 1.0's schema, which allows no other member):
    /// for a client that says `A2A-Version: 1.x`.
    V1,
    /// The 1.0 card plus the 0.3 members: for a request without `A2A-Version` (spec 1.0
    /// §3.6 treats it as 0.3), which clients of either generation read (a2a-sdk 1.x's own
    /// server serves this shape to everyone).
    Combined,
}

impl CardShape {
    fn of(headers: &HeaderMap) -> CardShape {
        let version = headers
            .get("a2a-version")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .unwrap_or("");
        if version == "1" || version.starts_with("1.") {
            CardShape::V1
        } else {
            CardShape::Combined
        }
    }
}

/// Tells caches that the card depends on `A2A-Version`.
fn vary_on_version(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("A2A-Version"));
}

/// A card as a JSON-RPC answer in `dialect` carries it: in 1.0 signed when the gateway
/// signs; the 0.x shape carries no signature (the 1.0 signing rules do not cover it).
pub(crate) fn signed_for(gw: &Cards, mut card: AgentCard, dialect: Dialect) -> AgentCard {
    card.signatures = None;
    if let (Some(signer), Dialect::V1_0) = (&gw.signer, dialect) {
        let mut value = codec::card::write_card_v1(&card);
        signer.sign(&mut value);
        card.signatures = value
            .get("signatures")
            .and_then(|s| serde_json::from_value(s.clone()).ok());
    }
    card
}

/// The URL of `agent` at this gateway.
pub(crate) fn agent_url(gw: &Cards, agent: &str) -> String {
    format!("{}/agents/{agent}", gw.base_url)
}

/// The extended card of `agent` for `caller`: `-32007` when the gateway has no API keys
/// (then there is nothing more to show than the public card).
pub(crate) fn extended_card(
    gw: &Cards,
    agent: &str,
    caller: Option<&Authenticated>,
) -> Result<AgentCard, A2aError> {
    let Some(caller) = caller.filter(|_| gw.api_keys) else {
        return Err(A2aError::extended_card_not_configured());
    };
    let mut card =
        gateway_card(gw, agent, &agent_url(gw, agent)).map_err(A2aError::invalid_params)?;
    let mut params = std::collections::HashMap::new();
    params.insert("principal".to_owned(), json!(caller.principal));
    card.capabilities
        .extensions
        .get_or_insert_with(Vec::new)
        .push(AgentExtension {
            uri: CALLER_EXTENSION.into(),
            description: Some(
                "The principal this extended card was served to, as the gateway authenticated it"
                    .into(),
            ),
            required: Some(false),
            params: Some(params),
        });
    Ok(card)
}

/// `GET /a2a/agent/authenticatedExtendedCard` (behind authentication; the path of 0.2-era
/// clients): the default agent's extended card.
pub(crate) async fn default_extended_card_http(
    State(gw): State<Arc<Cards>>,
    caller: Option<Extension<Authenticated>>,
    headers: HeaderMap,
) -> Response {
    let Some(agent) = gw.default_agent.clone() else {
        return json_status(
            StatusCode::NOT_FOUND,
            json!({"error": "this gateway has no default agent; ask for /agents/{name}/a2a/agent/authenticatedExtendedCard"}),
        );
    };
    extended_card_http(State(gw), Path(agent), caller, headers).await
}

/// `GET /agents/{name}/extendedAgentCard` (behind authentication).
pub(crate) async fn extended_card_http(
    State(gw): State<Arc<Cards>>,
    Path(name): Path<String>,
    caller: Option<Extension<Authenticated>>,
    headers: HeaderMap,
) -> Response {
    let mut response = match extended_card(&gw, &name, caller.as_ref().map(|c| &c.0)) {
        Ok(card) => json_status(
            StatusCode::OK,
            served_json(&gw, &card, CardShape::of(&headers)),
        ),
        Err(e) => json_status(
            StatusCode::NOT_FOUND,
            json!({"error": e.message, "code": e.code()}),
        ),
    };
    vary_on_version(&mut response);
    response
}

fn serve_card(gw: &Cards, agent: &str, url: &str, headers: &HeaderMap) -> Response {
    let card = match gateway_card(gw, agent, url) {
        Ok(card) => card,
        Err(message) => {
            let agents: Vec<String> = gw.registry.agents().into_iter().map(|a| a.name).collect();
            return json_status(
                StatusCode::NOT_FOUND,
                json!({"error": message, "agents": agents}),
            );
        }
    };
    let shape = CardShape::of(headers);
    let body = serde_json::to_vec(&served_json(gw, &card, shape)).unwrap_or_default();
    let etag = {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        body.hash(&mut hasher);
        format!("\"{:016x}\"", hasher.finish())
    };
    let modified = gw.cache.last_modified(agent, url, shape, &etag);
    let last_modified = chrono::DateTime::<chrono::Utc>::from(modified)
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let matches = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| {
            let tag = tag.trim();
            tag == "*" || tag.trim_start_matches("W/") == etag
        });
    let mut response = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut r = Response::new(Body::from(body));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(&last_modified) {
        h.insert(header::LAST_MODIFIED, v);
    }
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    vary_on_version(&mut response);
    response
}

/// `GET /.well-known/jwks.json`: the key set of the gateway's card signatures (public, like
/// the cards); 404 when the gateway does not sign.
pub(crate) async fn jwks(State(cards): State<Arc<Cards>>) -> Response {
    let Some(signer) = &cards.signer else {
        return json_status(
            StatusCode::NOT_FOUND,
            json!({"error": "this gateway does not sign agent cards (no --signing-key)"}),
        );
    };
    let mut response = (StatusCode::OK, axum::Json(signer.jwks())).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}
