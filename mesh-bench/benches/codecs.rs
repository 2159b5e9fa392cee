//! Criterion micro-benchmarks of the codecs (parse and write of a send request and of its
//! task reply, in each dialect) and of topic parsing: `cargo bench -p mesh-bench --bench
//! codecs`. Under `cargo test` each runs once.

use criterion::{Criterion, criterion_group, criterion_main};
use mesh_bench::samples::{self, DIALECTS};
use mesh_core::codec;
use mesh_core::topic::Topics;
use std::hint::black_box;

fn codecs(c: &mut Criterion) {
    for d in DIALECTS {
        let v = d.version();
        let req_bytes = samples::send_request(d);
        let req = samples::decoded_request(d);
        let reply = samples::task_reply();
        let reply_bytes = samples::reply_bytes(d);
        let id = samples::id();
        c.bench_function(&format!("parse send request {v}"), |b| {
            b.iter(|| codec::decode_request(black_box(&req_bytes)).is_ok())
        });
        c.bench_function(&format!("write send request {v}"), |b| {
            b.iter(|| codec::encode_request(black_box(&req)))
        });
        c.bench_function(&format!("parse task reply {v}"), |b| {
            b.iter(|| codec::decode_reply(black_box(&reply_bytes), d).is_ok())
        });
        c.bench_function(&format!("write task reply {v}"), |b| {
            b.iter(|| codec::encode_reply(d, &id, black_box(&reply)))
        });
    }
    c.bench_function("parse topics (request + reply)", |b| {
        b.iter(|| {
            for t in samples::TOPICS {
                black_box(Topics::parse(black_box(t)));
            }
        })
    });
}

criterion_group!(benches, codecs);
criterion_main!(benches);
