//! Optional authentication: API keys or bearer tokens, each naming a principal.
//!
//! With no keys configured every route is open. With keys, every route needs
//! `Authorization: Bearer <key>` or `X-API-Key: <key>` but these: the agent cards, the key set
//! of their signatures, `/healthz` and `/readyz`, the web console's page and assets (`GET /`,
//! `/ui/`, `/ui/app.js`, `/ui/style.css`; its `/ui/api/` feeds need a key), and CORS
//! preflights (answered before this layer). Anything else gets `401` with
//! `WWW-Authenticate: Bearer` and a JSON-RPC error body SDK clients can read. The caller's
//! principal rides along in the request's extensions ([`Authenticated`]), is forwarded to agents
//! as `_mesh.caller.principal`, and owns the tasks it creates: another principal gets "task
//! not found" for them.

use crate::metrics::Metrics;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use mesh_core::model::{ApiKeySecurityScheme, HttpAuthSecurityScheme, SecurityScheme};
use std::collections::HashMap;
use std::sync::Arc;

/// The header an API key may come in.
pub const API_KEY_HEADER: &str = "x-api-key";

/// The security scheme names the card declares.
pub const BEARER_SCHEME: &str = "bearer";
/// See [`BEARER_SCHEME`].
pub const API_KEY_SCHEME: &str = "apiKey";

/// One accepted key and the principal it authenticates.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// Who the key belongs to (forwarded to agents, owns the tasks it creates).
    pub principal: String,
    /// The secret.
    pub secret: String,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("principal", &self.principal)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl ApiKey {
    /// Reads `principal=secret`, or a bare `secret` (its principal is then `key-<n>`, `n`
    /// its 1-based position among the keys).
    pub fn parse(text: &str, position: usize) -> Result<ApiKey, String> {
        let text = text.trim();
        let (principal, secret) = match text.split_once('=') {
            Some((p, s)) => (p.trim().to_owned(), s.trim().to_owned()),
            None => (format!("key-{position}"), text.to_owned()),
        };
        if secret.is_empty() {
            return Err(format!("API key #{position} is empty"));
        }
        if principal.is_empty() {
            return Err(format!(
                "API key #{position} has an empty principal before '='"
            ));
        }
        if secret.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(format!(
                "API key #{position} ({principal}) contains whitespace or control characters"
            ));
        }
        Ok(ApiKey { principal, secret })
    }
}

/// The authenticated caller of a request (absent when the gateway has no keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// The principal of the key used.
    pub principal: String,
}

/// What the authentication layer uses: the keys and the counter of refusals.
pub(crate) struct Guard {
    pub keys: Keys,
    pub metrics: Arc<Metrics>,
}

/// The keys, ready to check.
pub(crate) struct Keys {
    keys: Vec<ApiKey>,
}

impl Keys {
    pub(crate) fn new(keys: Vec<ApiKey>) -> Keys {
        Keys { keys }
    }

    pub(crate) fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The caller the headers authenticate, if any.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Option<Authenticated> {
        let presented = presented(headers)?;
        // Every key is compared (in constant time per key), so timing tells nothing about
        // which key came close.
        let mut found = None;
        for key in &self.keys {
            if constant_time_eq(key.secret.as_bytes(), presented.as_bytes()) && found.is_none() {
                found = Some(Authenticated {
                    principal: key.principal.clone(),
                });
            }
        }
        found
    }
}

/// The credential in the headers: a bearer token, else an `X-API-Key`.
fn presented(headers: &HeaderMap) -> Option<String> {
    for value in headers.get_all(header::AUTHORIZATION) {
        let Ok(text) = value.to_str() else { continue };
        let text = text.trim();
        if let Some((scheme, token)) = text.split_once(' ')
            && scheme.eq_ignore_ascii_case("bearer")
            && !token.trim().is_empty()
        {
            return Some(token.trim().to_owned());
        }
    }
    headers
        .get(API_KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The security schemes the cards declare when keys are configured.
pub(crate) fn security_schemes() -> HashMap<String, SecurityScheme> {
    let mut schemes = HashMap::new();
    schemes.insert(
        BEARER_SCHEME.to_owned(),
        SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
            scheme: "Bearer".into(),
            description: Some("An API key of this gateway as a bearer token".into()),
            bearer_format: None,
        }),
    );
    schemes.insert(
        API_KEY_SCHEME.to_owned(),
        SecurityScheme::ApiKey(ApiKeySecurityScheme {
            location: "header".into(),
            name: "X-API-Key".into(),
            description: Some("An API key of this gateway".into()),
        }),
    );
    schemes
}

/// Routes that stay public when keys are configured.
fn is_public(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    matches!(
        path,
        "/healthz"
            | "/readyz"
            | "/.well-known/agent-card.json"
            | "/.well-known/agent.json"
            | "/.well-known/jwks.json"
            | "/agentCard"
            | "/ui"
            | "/ui/app.js"
            | "/ui/style.css"
    ) || (path.starts_with("/agents/")
        && (path.ends_with("/.well-known/agent-card.json")
            || path.ends_with("/.well-known/agent.json")
            || path.ends_with("/agentCard")))
}

/// The binding a request speaks, which the refusal is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    /// A POST to `/` or `/agents/{name}`.
    JsonRpc,
    /// A gRPC call (`content-type: application/grpc…`).
    Grpc,
    /// Anything else: the HTTP+JSON binding and the gateway's other routes.
    Rest,
}

impl Binding {
    fn of(request: &Request) -> Binding {
        let grpc = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"));
        let path = request.uri().path().trim_end_matches('/');
        if grpc {
            Binding::Grpc
        } else if request.method() == axum::http::Method::POST
            && (path.is_empty()
                || path
                    .strip_prefix("/agents/")
                    .is_some_and(|name| !name.contains('/')))
        {
            Binding::JsonRpc
        } else {
            Binding::Rest
        }
    }
}

/// The authentication layer (see the module docs).
pub(crate) async fn require(
    State(gw): State<Arc<Guard>>,
    mut request: Request,
    next: Next,
) -> Response {
    // `GET /` is the redirect to the console (a POST there is JSON-RPC and needs a key).
    let console_redirect =
        request.method() == axum::http::Method::GET && request.uri().path() == "/";
    if !gw.keys.enabled() || console_redirect || is_public(request.uri().path()) {
        return next.run(request).await;
    }
    match gw.keys.check(request.headers()) {
        Some(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        None => {
            gw.metrics.unauthenticated();
            let refused = unauthorized(
                request.headers().contains_key(header::AUTHORIZATION)
                    || request.headers().contains_key(API_KEY_HEADER),
                Binding::of(&request),
            );
            // The body is not read for a caller without a key.
            crate::http::closing(refused, request.version())
        }
    }
}

/// What a caller is told when the key it presented is not accepted.
pub(crate) const KEY_REFUSED: &str = "the API key or bearer token is not valid for this gateway";
/// What a caller is told when it presented no key.
pub(crate) const KEY_NEEDED: &str =
    "this gateway needs an API key: send Authorization: Bearer <key> or X-API-Key: <key>";
/// The `WWW-Authenticate` challenge for a refused key.
pub(crate) const CHALLENGE_REFUSED: &str = "Bearer error=\"invalid_token\"";
/// The `WWW-Authenticate` challenge when no key was presented.
pub(crate) const CHALLENGE_NEEDED: &str = "Bearer";

/// `401` with `WWW-Authenticate: Bearer` and a JSON-RPC error body.
fn unauthorized(presented: bool, binding: Binding) -> Response {
    let message = if presented { KEY_REFUSED } else { KEY_NEEDED };
    let body = match binding {
        Binding::JsonRpc => serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {
                "code": -32600,
                "message": message,
                "data": {"reason": "UNAUTHENTICATED", "httpStatus": 401},
            },
        }),
        // The HTTP+JSON binding's error (spec 1.0 §11.6), as google.rpc.Code names it.
        Binding::Rest => serde_json::json!({
            "error": {
                "code": 401,
                "status": "UNAUTHENTICATED",
                "message": message,
                "details": [{
                    "@type": mesh_core::error::ERROR_INFO_TYPE,
                    "reason": "UNAUTHENTICATED",
                    "domain": mesh_core::error::ERROR_DOMAIN,
                }],
            },
        }),
        // gRPC: a trailers-only answer, UNAUTHENTICATED with the challenge in the metadata.
        Binding::Grpc => {
            let challenge = if presented {
                CHALLENGE_REFUSED
            } else {
                CHALLENGE_NEEDED
            };
            let mut metadata = tonic::metadata::MetadataMap::new();
            metadata.insert(
                "www-authenticate",
                tonic::metadata::MetadataValue::from_static(challenge),
            );
            return tonic::Status::with_metadata(tonic::Code::Unauthenticated, message, metadata)
                .into_http::<Body>();
        }
    };
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(if presented {
            CHALLENGE_REFUSED
        } else {
            CHALLENGE_NEEDED
        }),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_with_and_without_principals() {
        let k = ApiKey::parse("alice=s3cret", 1).unwrap();
        assert_eq!(
            (k.principal.as_str(), k.secret.as_str()),
            ("alice", "s3cret")
        );
        let k = ApiKey::parse("s3cret", 2).unwrap();
        assert_eq!(k.principal, "key-2");
        assert!(ApiKey::parse("alice=", 1).is_err());
        assert!(ApiKey::parse("=x", 1).is_err());
        assert!(ApiKey::parse("a b", 1).is_err());
        assert!(!format!("{k:?}").contains("s3cret"));
    }

    #[test]
    fn checks_bearer_and_header_keys() {
        let keys = Keys::new(vec![ApiKey::parse("alice=a1", 1).unwrap()]);
        let mut h = HeaderMap::new();
        assert!(keys.check(&h).is_none());
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer a1"));
        assert_eq!(keys.check(&h).unwrap().principal, "alice");
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic a1"));
        assert!(keys.check(&h).is_none());
        h.insert(API_KEY_HEADER, HeaderValue::from_static("a1"));
        assert_eq!(keys.check(&h).unwrap().principal, "alice");
        h.insert(
            API_KEY_HEADER,
            HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        assert!(keys.check(&h).is_none());
    }

    #[test]
    fn public_routes() {
        for p in [
            "/healthz",
            "/readyz",
            "/.well-known/agent-card.json",
            "/agents/echo/.well-known/agent-card.json",
            "/agents/echo/agentCard",
            "/.well-known/jwks.json",
            "/ui",
            "/ui/",
            "/ui/app.js",
            "/ui/style.css",
        ] {
            assert!(is_public(p), "{p}");
        }
        for p in [
            "/",
            "/agents/echo",
            "/agents",
            "/metrics",
            "/agents/echo/extendedAgentCard",
            "/ui/api/tasks",
            "/ui/api/agents/events",
            "/ui/api/tasks/t/events",
        ] {
            assert!(!is_public(p), "{p}");
        }
    }
}
