//! Curve 5, fan-out through peers: a `fanout` agent that calls N `sleeper` peers at once
//! (over the bus, with the runtime's delegation), every one sleeping 20 ms but the last,
//! which sleeps 100 ms; sequential requests through the gateway, each timed to its answer.
//! What the mesh adds is the completion less the slowest peer's 100 ms.

use std::time::{Duration, Instant};

use serde_json::json;

use super::chart::{Line, Panel};
use super::{Curve, Row, Scale, Setup, call, ms, send_body};
use crate::fleet::Kind;
use crate::report::dur;
use crate::stats::Latencies;

const PEERS: [u64; 7] = [1, 2, 4, 8, 16, 32, 64];

/// What every peer sleeps, and the slowest.
const DELAY_MS: u64 = 20;
const SLOWEST_MS: u64 = 100;

/// Requests per point.
const SAMPLES: usize = 20;

pub async fn run(setup: &Setup, scale: Scale) -> Curve {
    let mut curve = Curve::new(
        "Fan-out through peers",
        "fan-out",
        "peers called at once",
        &["completion p50", "p99", "over the slowest peer (p50)"],
    );
    let peers = scale.points(&PEERS);
    let most = *peers.last().unwrap_or(&1);
    let mesh = match setup.mesh().await {
        Ok(mesh) => mesh,
        Err(e) => return curve.failed(e),
    };
    let fleets = async {
        let sleepers = setup
            .fleet(&mesh, Kind::Sleeper, "sleeper", most.max(2), 256)
            .await?;
        let fanout = setup.fleet(&mesh, Kind::Fanout, "fanout", 1, 16).await?;
        super::wait_all_listed(
            &setup.http,
            &mesh.base,
            "sleeper-",
            most.max(2) as usize,
            Duration::from_secs(60),
        )
        .await?;
        super::wait_all_listed(
            &setup.http,
            &mesh.base,
            "fanout",
            1,
            Duration::from_secs(30),
        )
        .await?;
        Ok::<_, String>((sleepers, fanout))
    };
    let _fleets = match fleets.await {
        Ok(fleets) => fleets,
        Err(e) => return curve.failed(e),
    };
    let mut p50_line = Vec::new();
    let mut over_line = Vec::new();
    for n in peers {
        let text = format!("peers: {n} delay: {DELAY_MS} slowest: {SLOWEST_MS}");
        let mut latencies = Latencies::default();
        let mut failed = None;
        for i in 0..SAMPLES as u64 + 2 {
            let body = send_body(i, json!([{"kind": "text", "text": text}]), None);
            let began = Instant::now();
            match call(&setup.http, &mesh.base, "fanout", &body).await {
                Ok(answer) if answer["result"]["status"]["state"] == "completed" => {
                    if i >= 2 {
                        latencies.push(began.elapsed());
                    }
                }
                Ok(answer) => {
                    failed = Some(format!("not completed: {answer}"));
                    break;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(why) = failed {
            curve.notes.push(format!("{n} peers: not measured: {why}"));
            break;
        }
        let p50 = latencies.percentile(50.0);
        let over = p50.saturating_sub(Duration::from_millis(SLOWEST_MS));
        p50_line.push((n as f64, ms(p50)));
        over_line.push((n as f64, ms(over)));
        curve.rows.push(Row {
            x: n,
            cells: vec![dur(p50), dur(latencies.percentile(99.0)), dur(over)],
        });
    }
    curve.panels = vec![Panel::new(
        "ms",
        vec![
            Line::new("completion p50", p50_line),
            Line::new("over the slowest peer", over_line),
        ],
    )];
    curve
}
