//! The agent-card codec: read a card in 0.3 or 1.0 shape; write the 1.0 shape, the pure
//! 0.3 shape, or a combined card both generations of client can read.
//!
//! The combined card is the 1.0 card plus the 0.3 members `url`, `preferredTransport`,
//! `protocolVersion` (and `supportsAuthenticatedExtendedCard`), with `supportedInterfaces`
//! holding one JSONRPC entry per protocol version (1.0 and 0.3) at the same URL.

use serde_json::{Map, Value, json};

use crate::error::A2aError;
use crate::model::{
    AgentCapabilities, AgentCard, AgentInterface, SecurityScheme, TRANSPORT_PROTOCOL_JSONRPC,
};

/// Serializes a model value (infallible for these types; `null` defensively).
fn ser<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn bad(e: impl std::fmt::Display) -> A2aError {
    A2aError::invalid_agent_response(format!("agent card: {e}"))
}

/// Reads an agent card from bytes (`-32700` on invalid JSON), see [`read_card`].
pub fn decode_card(bytes: &[u8]) -> Result<AgentCard, A2aError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| A2aError::parse(format!("Invalid JSON payload: {e}")))?;
    read_card(v)
}

/// Reads an agent card in 1.0 shape (`supportedInterfaces`) or 0.3 shape (`url`,
/// `preferredTransport`, `additionalInterfaces`, OpenAPI-style `securitySchemes`, `security`).
/// Both shapes are accepted in either form where they overlap (a 1.0 card carrying the 0.3
/// `security` member, a combined card). Errors are `-32006`.
pub fn read_card(v: Value) -> Result<AgentCard, A2aError> {
    let Value::Object(mut o) = v else {
        return Err(bad("must be an object"));
    };
    let url = o.remove("url");
    let version = o.remove("protocolVersion");
    let transport = o.remove("preferredTransport");
    let extra = o.remove("additionalInterfaces");
    let ext = o.remove("supportsAuthenticatedExtendedCard");
    if !o.contains_key("supportedInterfaces") {
        let url = url
            .and_then(|u| u.as_str().map(String::from))
            .ok_or_else(|| bad("url: missing (and no supportedInterfaces)"))?;
        let version = version
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_else(|| "0.3.0".to_string());
        let transport = transport
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_else(|| TRANSPORT_PROTOCOL_JSONRPC.to_string());
        let mut interfaces =
            vec![json!({"url": url, "protocolBinding": transport, "protocolVersion": version})];
        if let Some(Value::Array(extra)) = extra {
            for i in extra {
                let u = i.get("url").and_then(Value::as_str).unwrap_or_default();
                let t = i
                    .get("transport")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if u == url && t == transport {
                    continue;
                }
                interfaces
                    .push(json!({"url": u, "protocolBinding": t, "protocolVersion": version}));
            }
        }
        o.insert("supportedInterfaces".into(), Value::Array(interfaces));
    }
    if let Some(Value::Object(caps)) = o.get_mut("capabilities") {
        caps.remove("stateTransitionHistory");
        if let Some(e) = ext {
            caps.entry("extendedAgentCard").or_insert(e);
        }
    }
    if let Some(Value::Object(schemes)) = o.remove("securitySchemes") {
        let conv: Map<String, Value> = schemes
            .into_iter()
            .map(|(k, s)| (k, scheme_v03_to_v1(s)))
            .collect();
        o.insert("securitySchemes".into(), Value::Object(conv));
    }
    if let Some(sec) = o.remove("security") {
        o.entry("securityRequirements").or_insert(sec);
    }
    if let Some(Value::Array(skills)) = o.get_mut("skills") {
        for s in skills {
            if let Some(obj) = s.as_object_mut()
                && let Some(sec) = obj.remove("security")
            {
                obj.entry("securityRequirements").or_insert(sec);
            }
        }
    }
    serde_json::from_value(Value::Object(o)).map_err(bad)
}

fn scheme_v03_to_v1(s: Value) -> Value {
    let Value::Object(mut o) = s else { return s };
    if !o.contains_key("type") {
        return Value::Object(o); // already 1.0 shape
    }
    let ty = o
        .remove("type")
        .and_then(|t| t.as_str().map(String::from))
        .unwrap_or_default();
    let key = match ty.as_str() {
        "apiKey" => {
            if let Some(l) = o.remove("in") {
                o.insert("location".into(), l);
            }
            "apiKeySecurityScheme"
        }
        "http" => "httpAuthSecurityScheme",
        "oauth2" => "oauth2SecurityScheme",
        "openIdConnect" => "openIdConnectSecurityScheme",
        "mutualTLS" => "mtlsSecurityScheme",
        _ => return Value::Object(o),
    };
    json!({ key: Value::Object(o) })
}

fn scheme_v1_to_v03(s: &SecurityScheme) -> Value {
    let (ty, mut v) = match s {
        SecurityScheme::ApiKey(x) => ("apiKey", ser(x)),
        SecurityScheme::HttpAuth(x) => ("http", ser(x)),
        SecurityScheme::OAuth2(x) => ("oauth2", ser(x)),
        SecurityScheme::OpenIdConnect(x) => ("openIdConnect", ser(x)),
        SecurityScheme::MutualTls(x) => ("mutualTLS", ser(x)),
    };
    if let Value::Object(o) = &mut v {
        if let Some(l) = o.remove("location") {
            o.insert("in".into(), l);
        }
        o.insert("type".into(), ty.into());
    }
    v
}

/// The JSONRPC interface URL of a card (first JSONRPC interface, else the first interface).
pub fn jsonrpc_url(card: &AgentCard) -> Option<&str> {
    card.supported_interfaces
        .iter()
        .find(|i| {
            i.protocol_binding
                .eq_ignore_ascii_case(TRANSPORT_PROTOCOL_JSONRPC)
        })
        .or_else(|| card.supported_interfaces.first())
        .map(|i| i.url.as_str())
}

/// Writes the pure 1.0 card.
pub fn write_card_v1(card: &AgentCard) -> Value {
    ser(card)
}

/// Writes the combined card: 1.0 shape, `supportedInterfaces` with a JSONRPC 1.0 and a
/// JSONRPC 0.3 entry at the card's JSONRPC URL (other bindings kept), plus the 0.3 members
/// `url`, `preferredTransport`, `protocolVersion`, `supportsAuthenticatedExtendedCard`.
pub fn write_card_combined(card: &AgentCard) -> Value {
    let url = jsonrpc_url(card).unwrap_or_default().to_string();
    let mut c = card.clone();
    c.supported_interfaces.retain(|i| {
        !i.protocol_binding
            .eq_ignore_ascii_case(TRANSPORT_PROTOCOL_JSONRPC)
    });
    for version in ["1.0", "0.3"] {
        let mut i = AgentInterface::new(url.clone(), TRANSPORT_PROTOCOL_JSONRPC);
        i.protocol_version = version.to_string();
        c.supported_interfaces
            .insert(if version == "1.0" { 0 } else { 1 }, i);
    }
    let mut v = ser(&c);
    if let Value::Object(o) = &mut v {
        o.insert("url".into(), url.into());
        o.insert(
            "preferredTransport".into(),
            TRANSPORT_PROTOCOL_JSONRPC.into(),
        );
        o.insert("protocolVersion".into(), "0.3.0".into());
        if let Some(e) = card.capabilities.extended_agent_card {
            o.insert("supportsAuthenticatedExtendedCard".into(), e.into());
        }
    }
    v
}

/// Writes the pure 0.3 card (`url`/`preferredTransport` from the JSONRPC interface, other
/// interfaces as `additionalInterfaces`, OpenAPI-style security schemes).
pub fn write_card_v03(card: &AgentCard) -> Value {
    let url = jsonrpc_url(card).unwrap_or_default().to_string();
    let version = card
        .supported_interfaces
        .iter()
        .find(|i| i.url == url && i.protocol_version.starts_with("0."))
        .map_or("0.3.0", |i| i.protocol_version.as_str());
    let mut o = Map::new();
    o.insert("protocolVersion".into(), version.into());
    o.insert("name".into(), card.name.clone().into());
    o.insert("description".into(), card.description.clone().into());
    o.insert("url".into(), url.clone().into());
    o.insert(
        "preferredTransport".into(),
        TRANSPORT_PROTOCOL_JSONRPC.into(),
    );
    let others: Vec<Value> = card
        .supported_interfaces
        .iter()
        .filter(|i| {
            !i.protocol_binding
                .eq_ignore_ascii_case(TRANSPORT_PROTOCOL_JSONRPC)
        })
        .map(|i| json!({"url": i.url, "transport": i.protocol_binding}))
        .collect();
    if !others.is_empty() {
        // 0.3 §5.6.2: the main URL and transport are listed first.
        let mut extra = vec![json!({"url": url, "transport": TRANSPORT_PROTOCOL_JSONRPC})];
        extra.extend(others);
        o.insert("additionalInterfaces".into(), Value::Array(extra));
    }
    o.insert("version".into(), card.version.clone().into());
    let AgentCapabilities {
        streaming,
        push_notifications,
        extensions,
        extended_agent_card,
    } = &card.capabilities;
    let mut caps = Map::new();
    if let Some(s) = streaming {
        caps.insert("streaming".into(), (*s).into());
    }
    if let Some(p) = push_notifications {
        caps.insert("pushNotifications".into(), (*p).into());
    }
    if let Some(e) = extensions {
        caps.insert("extensions".into(), ser(e));
    }
    o.insert("capabilities".into(), Value::Object(caps));
    if let Some(e) = extended_agent_card {
        o.insert("supportsAuthenticatedExtendedCard".into(), (*e).into());
    }
    o.insert("defaultInputModes".into(), ser(&card.default_input_modes));
    o.insert("defaultOutputModes".into(), ser(&card.default_output_modes));
    let skills: Vec<Value> = card
        .skills
        .iter()
        .map(|s| {
            let mut v = ser(s);
            if let Some(obj) = v.as_object_mut()
                && let Some(sec) = obj.remove("securityRequirements")
            {
                obj.insert("security".into(), sec);
            }
            v
        })
        .collect();
    o.insert("skills".into(), Value::Array(skills));
    if let Some(p) = &card.provider {
        o.insert("provider".into(), ser(p));
    }
    if let Some(u) = &card.documentation_url {
        o.insert("documentationUrl".into(), u.clone().into());
    }
    if let Some(u) = &card.icon_url {
        o.insert("iconUrl".into(), u.clone().into());
    }
    if let Some(s) = &card.security_schemes {
        let m: Map<String, Value> = s
            .iter()
            .map(|(k, v)| (k.clone(), scheme_v1_to_v03(v)))
            .collect();
        o.insert("securitySchemes".into(), Value::Object(m));
    }
    if let Some(r) = &card.security_requirements {
        o.insert("security".into(), ser(r));
    }
    if let Some(s) = &card.signatures {
        o.insert("signatures".into(), ser(s));
    }
    Value::Object(o)
}
