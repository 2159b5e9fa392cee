//! The messages the codec benchmarks parse and write: a `SendMessage` request and a completed
//! task with one artifact (the echo agent's answer), each written in every dialect (0.1, 0.3,
//! 1.0), and the topics of a request and of its reply, for the codec rows of `mesh-bench`;
//! and signed agent cards, for the criterion bench `benches/cards.rs`.

use mesh_core::codec;
use mesh_core::dialect::Dialect;
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::rpc::{Reply, Request};

/// Every dialect, oldest first.
pub const DIALECTS: [Dialect; 3] = [Dialect::V0_1, Dialect::V0_3, Dialect::V1_0];

/// The text of the sample message (about the size of the benchmark payload's).
const TEXT: &str = "bench xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";

/// A send request in `dialect`, as a client writes it.
pub fn send_request(dialect: Dialect) -> Vec<u8> {
    let text = TEXT;
    match dialect {
        Dialect::V0_1 => format!(
            r#"{{"jsonrpc":"2.0","id":"0000000001","method":"tasks/send","params":{{"id":"0190f3a4-7d2e-7c61-9a43-1f2b3c4d5e6f","sessionId":"ctx-1","message":{{"role":"user","parts":[{{"type":"text","text":"{text}"}}]}}}}}}"#
        ),
        Dialect::V0_3 => crate::payload::send(1),
        Dialect::V1_0 => format!(
            r#"{{"jsonrpc":"2.0","id":"0000000001","method":"SendMessage","params":{{"message":{{"role":"ROLE_USER","messageId":"bench-0000000001","parts":[{{"text":"{text}"}}]}},"configuration":{{"returnImmediately":false}}}}}}"#
        ),
    }
    .into_bytes()
}

/// The decoded send request of `dialect`.
pub fn decoded_request(dialect: Dialect) -> Request {
    codec::decode_request(&send_request(dialect)).expect("the sample request decodes")
}

/// The echo agent's answer: a completed task with one text artifact.
pub fn task_reply() -> Reply {
    let task = serde_json::json!({
        "kind": "task",
        "id": "0190f3a4-7d2e-7c61-9a43-1f2b3c4d5e6f",
        "contextId": "0190f3a4-7d2e-7c61-9a43-aaaaaaaaaaaa",
        "status": {"state": "completed", "timestamp": "2026-11-22T10:00:00Z"},
        "artifacts": [{
            "artifactId": "0190f3a4-7d2e-7c61-9a43-bbbbbbbbbbbb",
            "name": "echo",
            "parts": [{"kind": "text", "text": TEXT}]
        }],
        "history": [{
            "kind": "message", "role": "user", "messageId": "bench-0000000001",
            "parts": [{"kind": "text", "text": TEXT}]
        }]
    });
    Reply::Task(codec::read_task(task).expect("the sample task reads"))
}

/// The JSON-RPC id of the samples.
pub fn id() -> JsonRpcId {
    JsonRpcId::String("0000000001".into())
}

/// The task reply as a JSON-RPC response in `dialect`.
pub fn reply_bytes(dialect: Dialect) -> Vec<u8> {
    codec::encode_reply(dialect, &id(), &task_reply())
}

/// A request topic (what an agent parses) and a reply topic (what a gateway parses).
pub const TOPICS: [&str; 2] = [
    "mesh/a2a/v1/agent/request/echo/0190f3a4-7d2e-7c61-9a43-1f2b3c4d5e6f",
    "mesh/a2a/v1/gateway/response/gateway/gw-5b1f0c7e9a3d4e2f8c6b1a0d9e8f7a6b/echo/0190f3a4-7d2e-7c61-9a43-1f2b3c4d5e6f",
];

/// `count` agent cards as agents publish them (the combined 1.0 + 0.3 shape of a card with a
/// provider, two skills and the gateway's security schemes), each different and signed by
/// one of eight agent keys, and the trust store of those keys. For `benches/cards.rs`.
pub fn signed_cards(
    count: usize,
) -> (mesh_core::card_signing::TrustedKeys, Vec<serde_json::Value>) {
    use mesh_core::card_signing::{SigningKey, TrustedKeys, sign_card};
    let keys: Vec<SigningKey> = (0..8)
        .map(|_| SigningKey::generate().expect("a key"))
        .collect();
    let cards = (0..count)
        .map(|i| {
            let mut card = serde_json::json!({
                "name": format!("agent-{i}"),
                "description": "Writes a short piece on any topic, streamed paragraph by paragraph",
                "version": "0.1.0",
                "supportedInterfaces": [
                    {"url": format!("http://127.0.0.1:8080/agents/agent-{i}"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                    {"url": format!("http://127.0.0.1:8080/agents/agent-{i}"), "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}
                ],
                "provider": {"url": "https://example.com", "organization": "Example"},
                "capabilities": {"streaming": true, "pushNotifications": true, "extendedAgentCard": true},
                "securitySchemes": {
                    "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}},
                    "apiKey": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}}
                },
                "securityRequirements": [{"schemes": {"bearer": {"list": []}}}, {"schemes": {"apiKey": {"list": []}}}],
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [
                    {"id": "write", "name": "Write", "description": "Streams a text artifact in chunks", "tags": ["writing"]},
                    {"id": "outline", "name": "Outline", "description": "Answers with an outline", "tags": ["writing", "plan"],
                     "examples": ["an outline of message brokers"]}
                ],
                "url": format!("http://127.0.0.1:8080/agents/agent-{i}"),
                "preferredTransport": "JSONRPC",
                "protocolVersion": "0.3.0"
            });
            sign_card(&keys[i % keys.len()], &mut card, None).expect("a card signs");
            card
        })
        .collect();
    let refs: Vec<&SigningKey> = keys.iter().collect();
    (TrustedKeys::of(&refs), cards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_round_trips() {
        for d in DIALECTS {
            let req = decoded_request(d);
            assert_eq!(req.dialect, d);
            codec::decode_request(&codec::encode_request(&req)).unwrap();
            let (_, reply) = codec::decode_reply(&reply_bytes(d), d).unwrap();
            reply.unwrap();
        }
        for t in TOPICS {
            assert!(mesh_core::topic::Topics::parse(t).is_some(), "{t}");
        }
    }
}
