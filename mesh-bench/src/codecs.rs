//! The per-message cost of the codecs, the project's one codec timing harness (rows 7 of
//! every `mesh-bench` run): parse and write of a send request and of its task reply in each
//! dialect, the floors they stand on (the same request parsed by `serde_json` into a `Value`
//! and into typed structs), and topic parsing. Each operation runs in a tight loop for a
//! bounded time; the figure is the mean time per message.

use crate::samples::{self, DIALECTS};
use mesh_core::codec;
use mesh_core::topic::Topics;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// One operation's mean cost.
#[derive(Debug, Clone)]
pub struct CodecCost {
    pub name: String,
    pub per_message: Duration,
}

/// Measures every operation, each for about `each`.
pub fn run(each: Duration) -> Vec<CodecCost> {
    let mut out = Vec::new();
    for d in DIALECTS {
        let v = d.version();
        let req_bytes = samples::send_request(d);
        let req = samples::decoded_request(d);
        let reply = samples::task_reply();
        let reply_bytes = samples::reply_bytes(d);
        let id = samples::id();
        out.push(time(format!("parse send request {v}"), each, || {
            black_box(codec::decode_request(black_box(&req_bytes)).is_ok());
        }));
        out.push(time(format!("write send request {v}"), each, || {
            black_box(codec::encode_request(black_box(&req)));
        }));
        out.push(time(format!("parse task reply {v}"), each, || {
            black_box(codec::decode_reply(black_box(&reply_bytes), d).is_ok());
        }));
        out.push(time(format!("write task reply {v}"), each, || {
            black_box(codec::encode_reply(d, &id, black_box(&reply)));
        }));
    }
    // The floors the codecs stand on: the same 0.3 request parsed into a `Value` only, and
    // into typed structs (what a serde-derive codec would do).
    let req_bytes = samples::send_request(mesh_core::dialect::Dialect::V0_3);
    out.push(time(
        "reference: serde_json → Value only (0.3 request)".into(),
        each,
        || {
            black_box(serde_json::from_slice::<serde_json::Value>(black_box(&req_bytes)).is_ok());
        },
    ));
    out.push(time(
        "reference: serde_json → typed structs (0.3 request)".into(),
        each,
        || {
            black_box(serde_json::from_slice::<typed::Envelope>(black_box(&req_bytes)).is_ok());
        },
    ));
    out.push(time("parse topics (request + reply)".into(), each, || {
        for t in samples::TOPICS {
            black_box(Topics::parse(black_box(t)));
        }
    }));
    out
}

fn time(name: String, each: Duration, mut op: impl FnMut()) -> CodecCost {
    for _ in 0..1000 {
        op();
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < each {
        for _ in 0..256 {
            op();
        }
        n += 256;
    }
    CodecCost {
        name,
        per_message: start.elapsed() / n.max(1) as u32,
    }
}

/// A typed reading of the 0.3 send request, for the reference row.
mod typed {
    #![allow(dead_code)]
    use serde::Deserialize;

    #[derive(Deserialize)]
    pub struct Envelope {
        jsonrpc: String,
        id: String,
        method: String,
        params: Params,
    }

    #[derive(Deserialize)]
    struct Params {
        message: Message,
        configuration: Option<Configuration>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Configuration {
        blocking: Option<bool>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Message {
        kind: String,
        role: String,
        message_id: String,
        parts: Vec<Part>,
    }

    #[derive(Deserialize)]
    struct Part {
        kind: String,
        text: String,
    }
}
