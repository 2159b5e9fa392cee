//! Timing loop for the codec hot path (ignored by default; run in release):
//! `cargo test --release -p mesh-core --test it codec_timing -- --ignored --nocapture`.
//!
//! Rows: parse/write a ~306-byte 0.3 `message/send` request, and parse/write the echo
//! agent's answer (a completed task with one artifact and the user message in history).

use std::hint::black_box;
use std::time::Instant;

use mesh_core::codec::{decode_reply, decode_request, encode_reply, encode_request};
use mesh_core::dialect::Dialect;
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::model::*;
use mesh_core::rpc::{Reply, Request};

const SEND: &str = r#"{"jsonrpc":"2.0","id":"req-0001","method":"message/send","params":{"message":{"kind":"message","messageId":"0190e1a2-7c3b-7d4e-9f10-1a2b3c4d5e6f","contextId":"ctx-0190e1a2-7c3b","role":"user","parts":[{"kind":"text","text":"hello from the load generator, msg #000001"}]},"configuration":{"blocking":true}}}"#;

fn answer(req: &Request) -> Reply {
    let mesh_core::rpc::Call::Send(s) = &req.call else {
        panic!("send")
    };
    let text = s.message.parts[0].as_text().unwrap_or_default().to_string();
    Reply::Task(Task {
        id: "0190e1a2-7c3b-7d4e-9f10-aaaaaaaaaaaa".into(),
        context_id: s.message.context_id.clone().unwrap_or_default(),
        status: TaskStatus {
            state: TaskState::Completed,
            message: None,
            timestamp: Some(chrono::Utc::now()),
        },
        artifacts: Some(vec![Artifact {
            artifact_id: "0190e1a2-7c3b-7d4e-9f10-bbbbbbbbbbbb".into(),
            name: Some("echo".into()),
            description: None,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: None,
        }]),
        history: Some(vec![s.message.clone()]),
        metadata: None,
    })
}

/// Runs one row (all rows unless `CODEC_TIMING_ONLY` names part of the row, e.g. for perf).
fn time<F: FnMut()>(name: &str, bytes: usize, mut f: F) {
    if std::env::var("CODEC_TIMING_ONLY").is_ok_and(|only| !name.contains(&only)) {
        return;
    }
    for _ in 0..20_000 {
        f();
    }
    let n = 200_000;
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("{name:<40} {bytes:>5} B  {us:>7.3} µs/msg");
}

#[test]
#[ignore = "timing loop; run in release with --ignored --nocapture"]
fn codec_timing() {
    let req = decode_request(SEND.as_bytes()).expect("send");
    let reply = answer(&req);
    let id = JsonRpcId::from("req-0001");
    let out = encode_reply(Dialect::V0_3, &id, &reply);
    let req_bytes = encode_request(&req);
    time("parse 0.3 message/send request", SEND.len(), || {
        black_box(decode_request(black_box(SEND.as_bytes())).is_ok());
    });
    time("write 0.3 message/send request", req_bytes.len(), || {
        black_box(encode_request(black_box(&req)));
    });
    time("write 0.3 echo answer (task)", out.len(), || {
        black_box(encode_reply(Dialect::V0_3, &id, black_box(&reply)));
    });
    time("parse 0.3 echo answer (task)", out.len(), || {
        black_box(decode_reply(black_box(&out), Dialect::V0_3).is_ok());
    });
    time(
        "(reference) answer into serde_json::Value",
        out.len(),
        || {
            black_box(serde_json::from_slice::<serde_json::Value>(black_box(&out)).is_ok());
        },
    );
    let out10 = encode_reply(Dialect::V1_0, &id, &reply);
    time("write 1.0 echo answer (task)", out10.len(), || {
        black_box(encode_reply(Dialect::V1_0, &id, black_box(&reply)));
    });
    time("parse 1.0 echo answer (task)", out10.len(), || {
        black_box(decode_reply(black_box(&out10), Dialect::V1_0).is_ok());
    });
}
