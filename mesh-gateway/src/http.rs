//! What the HTTP bindings (JSON-RPC and HTTP+JSON) share before and after a request meets the
//! service: reading a body within the gateway's limit, the `A2A-Version` and content-type
//! checks, the trace context, and JSON responses.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mesh_core::dialect::Dialect;
use mesh_core::error::A2aError;

/// A JSON body with a status.
pub(crate) fn json_status(status: StatusCode, body: serde_json::Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// Encoded JSON with a status and `content_type`.
pub(crate) fn json_bytes(
    status: StatusCode,
    body: Vec<u8>,
    content_type: &'static str,
) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// `response` to a request whose body was not read (refused before it, or for its size):
/// over HTTP/1.x it says `Connection: close`, so that the client does not send its next
/// request on a connection the server may close before reading what is left of this one.
/// (HTTP/2 streams end on their own: nothing to say there.)
pub(crate) fn closing(mut response: Response, version: axum::http::Version) -> Response {
    if version < axum::http::Version::HTTP_2 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// The request headers the bindings read that `http` has no constant for: names already
/// parsed, so that a lookup only hashes them (a `&str` name is checked and lowercased first,
/// on every request).
static A2A_VERSION: HeaderName = HeaderName::from_static("a2a-version");
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// The `A2A-Version` a request asks for (the header, else the query parameter of that name).
pub(crate) fn version_asked<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> Option<&'a str> {
    if let Some(v) = headers.get(&A2A_VERSION).and_then(|v| v.to_str().ok()) {
        return Some(v.trim());
    }
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| k.eq_ignore_ascii_case("a2a-version"))
        .map(|(_, v)| v.trim())
}

/// The version asked for when it is one this gateway does not serve (absent, 0.3 and 1.0 are
/// served).
pub(crate) fn bad_version(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let version = version_asked(headers, query)?;
    if version.is_empty() {
        return None;
    }
    let served = matches!(version, "0.3" | "0.3.0" | "1.0" | "1.0.0" | "1")
        || matches!(Dialect::from_version(version), Some(Dialect::V1_0))
            && version.starts_with("1.0");
    (!served).then(|| version.to_owned())
}

/// The generation of the answers written before a JSON-RPC request is read: 1.0 when the
/// client asked for it, else 0.3.
pub(crate) fn fallback_dialect(headers: &HeaderMap, query: Option<&str>) -> Dialect {
    match version_asked(headers, query) {
        Some(v) if Dialect::from_version(v) == Some(Dialect::V1_0) => Dialect::V1_0,
        _ => Dialect::V0_3,
    }
}

/// The content type when it is not JSON (an absent header is accepted).
pub(crate) fn bad_content_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?;
    let text = value.to_str().unwrap_or("");
    let essence = text.split(';').next().unwrap_or("").trim();
    let is = |name: &str| essence.eq_ignore_ascii_case(name);
    let json = is("application/json")
        || is("application/json-rpc")
        || is("application/jsonrequest")
        || (starts_with_ignore_case(essence, "application/")
            && ends_with_ignore_case(essence, "+json"));
    (!json).then(|| text.to_owned())
}

fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.len() >= prefix.len()
        && text.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

fn ends_with_ignore_case(text: &str, suffix: &str) -> bool {
    text.len() >= suffix.len()
        && text.as_bytes()[text.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

/// The W3C trace context of a request, forwarded to the agent.
pub(crate) fn traceparent(headers: &HeaderMap) -> Option<String> {
    headers
        .get(&TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The `Last-Event-ID` a client resumes a stream from: the sequence number of the last event
/// it received (the SSE `id` the gateway wrote); absent or empty: none. Anything else than a
/// number is not an id this gateway wrote: invalid params, rather than a stream that starts
/// over while the client believes it resumed.
pub(crate) fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, A2aError> {
    let Some(value) = headers.get(&LAST_EVENT_ID) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("\u{fffd}").trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        A2aError::invalid_params(format!(
            "Last-Event-ID {text:?} is not an event id of this gateway (the number of an event it sent)"
        ))
    })
}

/// Why a body could not be read.
pub(crate) enum BodyError {
    /// It is longer than the limit (declared or as it came).
    TooLarge,
    /// The connection broke while it came.
    Broken(axum::Error),
}

/// Reads the whole body, refusing it at once when its declared length is over `limit` and
/// as soon as what arrives passes `limit` bytes.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<bytes::Bytes, BodyError> {
    use futures_util::StreamExt;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    let mut stream = body.into_data_stream();
    let mut first: Option<bytes::Bytes> = None;
    let mut rest: Vec<u8> = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(BodyError::Broken)?;
        total += chunk.len();
        if total > limit {
            return Err(BodyError::TooLarge);
        }
        match &first {
            // One chunk (the usual case) is returned as it is, without a copy.
            None if rest.is_empty() => first = Some(chunk),
            _ => {
                if let Some(first) = first.take() {
                    // Room for the whole body at once when its length was declared (within
                    // the limit, checked above): growing past a large body copies it again.
                    rest.reserve(declared.unwrap_or(0).max(first.len() + chunk.len()));
                    rest.extend_from_slice(&first);
                }
                rest.extend_from_slice(&chunk);
            }
        }
    }
    Ok(match first {
        Some(first) => first,
        None => bytes::Bytes::from(rest),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &'static str, value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn json_content_types_are_told_apart_in_any_case() {
        for json in [
            "application/json",
            "Application/JSON; charset=utf-8",
            " application/json-rpc ",
            "application/JsonRequest",
            "application/vnd.a2a+JSON",
        ] {
            assert_eq!(
                bad_content_type(&with("content-type", json)),
                None,
                "{json}"
            );
        }
        assert_eq!(bad_content_type(&HeaderMap::new()), None);
        for other in ["text/plain", "application/xml", "+json", "text/x+json"] {
            assert_eq!(
                bad_content_type(&with("content-type", other)).as_deref(),
                Some(other)
            );
        }
    }

    #[test]
    fn the_version_asked_is_the_header_else_the_query_parameter() {
        let headers = with("A2A-Version", " 1.0 ");
        assert_eq!(
            version_asked(&headers, Some("a2a-version=0.3")),
            Some("1.0")
        );
        let none = HeaderMap::new();
        assert_eq!(
            version_asked(&none, Some("x=1&A2A-Version=0.3")),
            Some("0.3")
        );
        assert_eq!(version_asked(&none, None), None);
        assert_eq!(
            bad_version(&with("a2a-version", "2.0"), None).as_deref(),
            Some("2.0")
        );
        assert_eq!(bad_version(&headers, None), None);
        assert_eq!(fallback_dialect(&headers, None), Dialect::V1_0);
        assert_eq!(fallback_dialect(&none, None), Dialect::V0_3);
    }

    #[test]
    fn the_trace_context_and_the_last_event_id_are_read_by_their_names() {
        let headers = with("traceparent", "00-abc-def-01");
        assert_eq!(traceparent(&headers).as_deref(), Some("00-abc-def-01"));
        assert_eq!(
            last_event_id(&with("Last-Event-ID", " 42 ")).unwrap(),
            Some(42)
        );
        assert!(last_event_id(&with("last-event-id", "x")).is_err());
        assert_eq!(last_event_id(&HeaderMap::new()).unwrap(), None);
    }
}
