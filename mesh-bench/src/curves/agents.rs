//! Curve 1, agents online: for each count, a fresh broker and `count` echo agents in one
//! `mesh-fleet` process; then a gateway started after them (what a gateway restart meets),
//! timed from its spawn until `GET /agents` lists them all online. Then, with all of them
//! listed: the gateway's and the broker's RSS, the fleet's RSS per agent, the p50 of
//! `GET /agents`, and the p50 of `message/send` to one of the agents.

use std::time::{Duration, Instant};

use super::chart::Panel;
use super::{Curve, Row, Scale, Setup, echo_latencies, mib, ms, rss};
use crate::fleet::{Kind, agent_name};
use crate::report::dur;
use crate::stats::Latencies;

const COUNTS: [u64; 4] = [1, 10, 100, 1000];

/// The figures of one point.
struct Point {
    count: u64,
    up: Duration,
    listed: Duration,
    gateway_kib: u64,
    broker_kib: u64,
    fleet_kib: u64,
    list: Duration,
    request: Duration,
}

pub async fn run(setup: &Setup, scale: Scale) -> Curve {
    let mut curve = Curve::new(
        "Agents online",
        "agents",
        "agents",
        &[
            "fleet up in",
            "listed after a gateway (re)start",
            "gateway RSS",
            "broker RSS",
            "fleet RSS per agent",
            "`GET /agents` p50",
            "`message/send` p50",
        ],
    );
    let mut points = Vec::new();
    for count in scale.points(&COUNTS) {
        match point(setup, count).await {
            Ok(point) => points.push(point),
            Err(e) => {
                curve
                    .notes
                    .push(format!("{count} agents: not measured: {e}"));
                break;
            }
        }
    }
    for p in &points {
        curve.rows.push(Row {
            x: p.count,
            cells: vec![
                dur(p.up),
                dur(p.listed),
                mib(p.gateway_kib),
                mib(p.broker_kib),
                super::per_item(p.fleet_kib as i64, p.count),
                dur(p.list),
                dur(p.request),
            ],
        });
    }
    curve.panels = vec![
        Panel::new(
            "ms",
            vec![
                super::line("listed after a gateway start", &points, 1, |p| {
                    (p.count, ms(p.listed))
                }),
                super::line("GET /agents", &points, 1, |p| (p.count, ms(p.list))),
                super::line("message/send", &points, 1, |p| (p.count, ms(p.request))),
            ],
        ),
        Panel::new(
            "MiB",
            vec![
                super::line("gateway RSS", &points, 1, |p| {
                    (p.count, p.gateway_kib as f64 / 1024.0)
                }),
                super::line("broker RSS", &points, 1, |p| {
                    (p.count, p.broker_kib as f64 / 1024.0)
                }),
                super::line("fleet RSS", &points, 1, |p| {
                    (p.count, p.fleet_kib as f64 / 1024.0)
                }),
            ],
        ),
    ];
    curve.notes.push(
        "The agents are echo agents on the agent runtime, all in one `mesh-fleet` process, each \
         with its own MQTT connection, card, presence and heartbeat (and no registry: an echo \
         agent never looks at its peers); the broker is Mosquitto."
            .to_owned(),
    );
    curve
}

async fn point(setup: &Setup, count: u64) -> Result<Point, String> {
    let mut mesh = setup.mesh().await?;
    let began = Instant::now();
    let fleet = setup.fleet(&mesh, Kind::Echo, "agent", count, 16).await?;
    let up = began.elapsed();
    let prefix = if count == 1 { "agent" } else { "agent-" };
    // The gateway that ran while the agents came up gives way to a fresh one: a restart.
    super::wait_all_listed(
        &setup.http,
        &mesh.base,
        prefix,
        count as usize,
        Duration::from_secs(60),
    )
    .await?;
    mesh.gateway.kill9();
    let spawned = Instant::now();
    let (gateway, base) = setup.gateway(&mesh.broker, &mesh.namespace).await?;
    let seen = super::wait_all_listed(
        &setup.http,
        &base,
        prefix,
        count as usize,
        Duration::from_secs(60),
    )
    .await?;
    let listed = seen.duration_since(spawned);
    let mut list = Latencies::default();
    for _ in 0..20 {
        let began = Instant::now();
        super::listed_online(&setup.http, &base, prefix)
            .await
            .ok_or("GET /agents failed")?;
        list.push(began.elapsed());
    }
    let target = agent_name("agent", count as usize, count as usize - 1);
    let request = echo_latencies(&setup.http, &base, &target, 100).await?;
    Ok(Point {
        count,
        up,
        listed,
        gateway_kib: rss(&gateway),
        broker_kib: rss(&mesh.broker.proc),
        fleet_kib: rss(&fleet),
        list: list.percentile(50.0),
        request: request.percentile(50.0),
    })
}
