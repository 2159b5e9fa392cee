//! Criterion benchmarks of signed agent cards: verifying 1,000 different signed cards (what a
//! gateway with a trust store does when it meets a mesh of 1,000 agents), verifying one, and
//! signing one: `cargo bench -p mesh-bench --bench cards`. Under `cargo test` each runs once.

use criterion::{Criterion, criterion_group, criterion_main};
use mesh_bench::samples;
use mesh_core::card_signing::{SigningKey, sign_card, verify_card};
use std::hint::black_box;

fn cards(c: &mut Criterion) {
    let (trusted, cards) = samples::signed_cards(1_000);
    let mut group = c.benchmark_group("cards");
    group.sample_size(20);
    group.bench_function("verify 1,000 signed cards", |b| {
        b.iter(|| {
            for card in &cards {
                assert!(verify_card(&trusted, black_box(card)).is_ok());
            }
        })
    });
    group.finish();
    c.bench_function("verify one signed card", |b| {
        b.iter(|| verify_card(&trusted, black_box(&cards[0])).is_ok())
    });
    let key = SigningKey::generate().expect("a key");
    let mut card = cards[0].clone();
    c.bench_function("sign one card", |b| {
        b.iter(|| sign_card(&key, black_box(&mut card), None).is_ok())
    });
}

criterion_group!(benches, cards);
criterion_main!(benches);
