//! What an agent card's signature covers (A2A v1.0 §8.4.1): the members of the 1.0
//! `AgentCard` message, with protocol-buffer field presence applied, in RFC 8785 form.
//!
//! The card is walked along the message types of `a2a.proto` (the table below):
//!
//! - **Members that are not fields of the message are left out**: the 0.3 members of the
//!   combined card (`url`, `preferredTransport`, `protocolVersion`,
//!   `supportsAuthenticatedExtendedCard`), and anything unknown at any depth. A reader of the
//!   1.0 card ignores them too; [`signed_members`] gives the card a verifier may trust.
//! - **`signatures` is left out** (§8.4.1 rule 3).
//! - **`null` is absence**, for every field.
//! - **Default values are removed** from fields without explicit presence: `""`, `false`,
//!   `[]`, `{}` (an empty map, or a message or `Struct` with nothing set).
//! - **Kept even when default**: the REQUIRED fields (`name`, `description`,
//!   `supportedInterfaces`, `version`, `capabilities`, `defaultInputModes`,
//!   `defaultOutputModes`, `skills`; an interface's `url`, `protocolBinding`,
//!   `protocolVersion`; a provider's `url`, `organization`; a skill's `id`, `name`,
//!   `description`, `tags`; each security scheme's and OAuth flow's REQUIRED members), the
//!   `optional` fields (`documentationUrl`, `iconUrl`, the capabilities' `streaming`,
//!   `pushNotifications`, `extendedAgentCard`), the members of a `oneof` (a security
//!   scheme's kind, an OAuth flow), the entries of maps and the elements of lists.
//! - The contents of a `google.protobuf.Struct` (an extension's `params`) are data, kept as
//!   they are.
//! - A value of an unexpected JSON type is kept as it is (the signer's and the verifier's
//!   walks agree on it; a reader of the card refuses it).

use super::jcs::{self, TooDeep};
use serde_json::{Map, Value};

/// When a field is written although it holds its default value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Presence {
    /// REQUIRED: always written.
    Required,
    /// `optional`, or a member of a `oneof`: written when set, whatever its value.
    Explicit,
    /// Neither: left out when it holds its default value.
    Implicit,
}

#[derive(Clone, Copy)]
enum Kind {
    /// A string, bool or number.
    Scalar,
    /// `repeated` of a scalar.
    Scalars,
    /// A message.
    Message(&'static [Field]),
    /// `repeated` of a message.
    Messages(&'static [Field]),
    /// `map<string, message>`.
    MessageMap(&'static [Field]),
    /// `map<string, string>`.
    ScalarMap,
    /// `google.protobuf.Struct`: free JSON.
    Struct,
}

struct Field {
    name: &'static str,
    kind: Kind,
    presence: Presence,
}

const fn field(name: &'static str, kind: Kind, presence: Presence) -> Field {
    Field {
        name,
        kind,
        presence,
    }
}

use Kind::*;
use Presence::*;

const AGENT_CARD: &[Field] = &[
    field("name", Scalar, Required),
    field("description", Scalar, Required),
    field("supportedInterfaces", Messages(AGENT_INTERFACE), Required),
    field("provider", Message(AGENT_PROVIDER), Implicit),
    field("version", Scalar, Required),
    field("documentationUrl", Scalar, Explicit),
    field("capabilities", Message(AGENT_CAPABILITIES), Required),
    field("securitySchemes", MessageMap(SECURITY_SCHEME), Implicit),
    field(
        "securityRequirements",
        Messages(SECURITY_REQUIREMENT),
        Implicit,
    ),
    field("defaultInputModes", Scalars, Required),
    field("defaultOutputModes", Scalars, Required),
    field("skills", Messages(AGENT_SKILL), Required),
    field("iconUrl", Scalar, Explicit),
];

const AGENT_INTERFACE: &[Field] = &[
    field("url", Scalar, Required),
    field("protocolBinding", Scalar, Required),
    field("tenant", Scalar, Implicit),
    field("protocolVersion", Scalar, Required),
];

const AGENT_PROVIDER: &[Field] = &[
    field("url", Scalar, Required),
    field("organization", Scalar, Required),
];

const AGENT_CAPABILITIES: &[Field] = &[
    field("streaming", Scalar, Explicit),
    field("pushNotifications", Scalar, Explicit),
    field("extensions", Messages(AGENT_EXTENSION), Implicit),
    field("extendedAgentCard", Scalar, Explicit),
];

const AGENT_EXTENSION: &[Field] = &[
    field("uri", Scalar, Implicit),
    field("description", Scalar, Implicit),
    field("required", Scalar, Implicit),
    field("params", Struct, Implicit),
];

const AGENT_SKILL: &[Field] = &[
    field("id", Scalar, Required),
    field("name", Scalar, Required),
    field("description", Scalar, Required),
    field("tags", Scalars, Required),
    field("examples", Scalars, Implicit),
    field("inputModes", Scalars, Implicit),
    field("outputModes", Scalars, Implicit),
    field(
        "securityRequirements",
        Messages(SECURITY_REQUIREMENT),
        Implicit,
    ),
];

const SECURITY_REQUIREMENT: &[Field] = &[field("schemes", MessageMap(STRING_LIST), Implicit)];

const STRING_LIST: &[Field] = &[field("list", Scalars, Implicit)];

const SECURITY_SCHEME: &[Field] = &[
    field("apiKeySecurityScheme", Message(API_KEY_SCHEME), Explicit),
    field(
        "httpAuthSecurityScheme",
        Message(HTTP_AUTH_SCHEME),
        Explicit,
    ),
    field("oauth2SecurityScheme", Message(OAUTH2_SCHEME), Explicit),
    field(
        "openIdConnectSecurityScheme",
        Message(OPEN_ID_SCHEME),
        Explicit,
    ),
    field("mtlsSecurityScheme", Message(MTLS_SCHEME), Explicit),
];

const API_KEY_SCHEME: &[Field] = &[
    field("description", Scalar, Implicit),
    field("location", Scalar, Required),
    field("name", Scalar, Required),
];

const HTTP_AUTH_SCHEME: &[Field] = &[
    field("description", Scalar, Implicit),
    field("scheme", Scalar, Required),
    field("bearerFormat", Scalar, Implicit),
];

const OAUTH2_SCHEME: &[Field] = &[
    field("description", Scalar, Implicit),
    field("flows", Message(OAUTH_FLOWS), Required),
    field("oauth2MetadataUrl", Scalar, Implicit),
];

const OPEN_ID_SCHEME: &[Field] = &[
    field("description", Scalar, Implicit),
    field("openIdConnectUrl", Scalar, Required),
];

const MTLS_SCHEME: &[Field] = &[field("description", Scalar, Implicit)];

const OAUTH_FLOWS: &[Field] = &[
    field(
        "authorizationCode",
        Message(AUTHORIZATION_CODE_FLOW),
        Explicit,
    ),
    field(
        "clientCredentials",
        Message(CLIENT_CREDENTIALS_FLOW),
        Explicit,
    ),
    field("implicit", Message(IMPLICIT_FLOW), Explicit),
    field("password", Message(PASSWORD_FLOW), Explicit),
    field("deviceCode", Message(DEVICE_CODE_FLOW), Explicit),
];

const AUTHORIZATION_CODE_FLOW: &[Field] = &[
    field("authorizationUrl", Scalar, Required),
    field("tokenUrl", Scalar, Required),
    field("refreshUrl", Scalar, Implicit),
    field("scopes", ScalarMap, Required),
    field("pkceRequired", Scalar, Implicit),
];

const CLIENT_CREDENTIALS_FLOW: &[Field] = &[
    field("tokenUrl", Scalar, Required),
    field("refreshUrl", Scalar, Implicit),
    field("scopes", ScalarMap, Required),
];

const IMPLICIT_FLOW: &[Field] = &[
    field("authorizationUrl", Scalar, Implicit),
    field("refreshUrl", Scalar, Implicit),
    field("scopes", ScalarMap, Implicit),
];

const PASSWORD_FLOW: &[Field] = &[
    field("tokenUrl", Scalar, Implicit),
    field("refreshUrl", Scalar, Implicit),
    field("scopes", ScalarMap, Implicit),
];

const DEVICE_CODE_FLOW: &[Field] = &[
    field("deviceAuthorizationUrl", Scalar, Required),
    field("tokenUrl", Scalar, Required),
    field("refreshUrl", Scalar, Implicit),
    field("scopes", ScalarMap, Required),
];

/// The bytes a card's signature covers: its signed members with default values removed, in
/// RFC 8785 form. A card that is not a JSON object has the empty object's form.
pub fn canonical_card(card: &Value) -> Result<Vec<u8>, TooDeep> {
    jcs::canonicalize(&walk_card(card, true))
}

/// The card a verifier may trust: only the members a signature covers (the 1.0 fields, no
/// `null`s, no `signatures`), with their values as they were (defaults not removed), so that
/// the card reads as it was written.
pub fn signed_members(card: &Value) -> Value {
    walk_card(card, false)
}

fn walk_card(card: &Value, remove_defaults: bool) -> Value {
    match card {
        Value::Object(members) => Value::Object(message(AGENT_CARD, members, remove_defaults)),
        _ => Value::Object(Map::new()),
    }
}

fn message(
    fields: &[Field],
    members: &Map<String, Value>,
    remove_defaults: bool,
) -> Map<String, Value> {
    let mut out = Map::new();
    for field in fields {
        let Some(value) = members.get(field.name).filter(|v| !v.is_null()) else {
            continue;
        };
        let value = walk(field.kind, value, remove_defaults);
        if remove_defaults && field.presence == Implicit && is_default(&value) {
            continue;
        }
        out.insert(field.name.to_owned(), value);
    }
    out
}

fn walk(kind: Kind, value: &Value, remove_defaults: bool) -> Value {
    match (kind, value) {
        (Message(fields), Value::Object(members)) => {
            Value::Object(message(fields, members, remove_defaults))
        }
        (Messages(fields), Value::Array(items)) => Value::Array(
            items
                .iter()
                .map(|item| walk(Message(fields), item, remove_defaults))
                .collect(),
        ),
        (MessageMap(fields), Value::Object(entries)) => Value::Object(
            entries
                .iter()
                .map(|(key, item)| (key.clone(), walk(Message(fields), item, remove_defaults)))
                .collect(),
        ),
        _ => value.clone(),
    }
}

/// The proto3 default of any field type: `""`, `false`, `0`, `[]`, `{}`.
fn is_default(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(members) => members.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canonical(card: Value) -> String {
        String::from_utf8(canonical_card(&card).unwrap()).unwrap()
    }

    /// The example of A2A v1.0 §8.4.1.
    #[test]
    fn the_specs_example_of_default_value_removal() {
        let card = json!({
            "name": "Example Agent",
            "description": "",
            "capabilities": {
                "streaming": false,
                "pushNotifications": false,
                "extensions": []
            },
            "skills": []
        });
        assert_eq!(
            canonical(card),
            r#"{"capabilities":{"pushNotifications":false,"streaming":false},"description":"","name":"Example Agent","skills":[]}"#
        );
    }

    #[test]
    fn members_outside_the_1_0_card_and_signatures_are_not_covered() {
        let card = json!({
            "name": "a", "description": "d", "version": "1",
            "url": "http://x/agents/a", "preferredTransport": "JSONRPC",
            "protocolVersion": "0.3.0", "supportsAuthenticatedExtendedCard": true,
            "signatures": [{"protected": "p", "signature": "s"}],
            "supportedInterfaces": [{"url": "http://x/agents/a", "protocolBinding": "JSONRPC",
                                     "protocolVersion": "1.0", "tenant": "", "extra": 1}],
            "capabilities": {"streaming": true, "future": {"x": 1}},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "s", "name": "S", "description": "D", "tags": [],
                        "examples": [], "unknown": "u"}],
            "documentationUrl": null, "iconUrl": "",
        });
        assert_eq!(
            canonical(card.clone()),
            concat!(
                r#"{"capabilities":{"streaming":true},"defaultInputModes":["text/plain"],"#,
                r#""defaultOutputModes":["text/plain"],"description":"d","iconUrl":"","name":"a","#,
                r#""skills":[{"description":"D","id":"s","name":"S","tags":[]}],"#,
                r#""supportedInterfaces":[{"protocolBinding":"JSONRPC","protocolVersion":"1.0","url":"http://x/agents/a"}],"#,
                r#""version":"1"}"#
            )
        );
        // The trusted view keeps the values as written, unknown members and nulls out.
        let trusted = signed_members(&card);
        assert_eq!(trusted["supportedInterfaces"][0]["tenant"], "");
        assert_eq!(trusted["skills"][0]["examples"], json!([]));
        assert!(trusted.get("url").is_none() && trusted.get("signatures").is_none());
        assert!(trusted.get("documentationUrl").is_none());
        assert!(trusted["capabilities"].get("future").is_none());
    }

    #[test]
    fn security_schemes_requirements_and_extensions() {
        let card = json!({
            "name": "a", "description": "d", "version": "1", "supportedInterfaces": [],
            "capabilities": {"extensions": [{"uri": "urn:x", "required": false,
                                             "params": {"k": "", "n": null}}]},
            "defaultInputModes": [], "defaultOutputModes": [], "skills": [],
            "securitySchemes": {
                "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": ""}},
                "mtls": {"mtlsSecurityScheme": {}},
            },
            "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        });
        assert_eq!(
            canonical(card),
            concat!(
                r#"{"capabilities":{"extensions":[{"params":{"k":"","n":null},"uri":"urn:x"}]},"#,
                r#""defaultInputModes":[],"defaultOutputModes":[],"description":"d","name":"a","#,
                r#""securityRequirements":[{"schemes":{"bearer":{}}}],"#,
                r#""securitySchemes":{"bearer":{"httpAuthSecurityScheme":{"scheme":"Bearer"}},"mtls":{"mtlsSecurityScheme":{}}},"#,
                r#""skills":[],"supportedInterfaces":[],"version":"1"}"#
            )
        );
    }

    #[test]
    fn a_card_that_is_not_an_object_covers_nothing() {
        assert_eq!(canonical(json!([1, 2])), "{}");
    }
}
