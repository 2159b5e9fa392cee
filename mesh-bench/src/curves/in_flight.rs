//! Curve 2, tasks in flight: one gateway, one `waiter` agent (it holds each task `working`
//! until it is canceled) and one echo agent. For each count: that many non-blocking
//! `message/send` to the waiter (64 at a time), until the last is `working`; the gateway's
//! and the waiter's RSS growth per task; 100 sequential echo requests meanwhile (p50, p99);
//! then `tasks/cancel` of every one (64 at a time), timed until the last is answered.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

use super::FIRST_CHARTED_PER_ITEM;
use super::chart::Panel;
use super::{Curve, Row, Scale, Setup, bytes, call, echo_latencies, ms, rss, send_body};
use crate::fleet::Kind;
use crate::report::dur;

const COUNTS: [u64; 5] = [1, 10, 100, 1000, 10_000];

/// Requests open at once while the tasks are started and canceled.
const AT_ONCE: usize = 64;

struct Point {
    count: u64,
    gateway_per_task: f64,
    agent_per_task: f64,
    p50: Duration,
    p99: Duration,
    cancel_all: Duration,
}

pub async fn run(setup: &Setup, scale: Scale) -> Curve {
    let mut curve = Curve::new(
        "Tasks in flight",
        "tasks-in-flight",
        "tasks working",
        &[
            "gateway RSS per task",
            "agent RSS per task",
            "echo p50 meanwhile",
            "echo p99 meanwhile",
            "cancel all",
        ],
    );
    let mesh = match setup.mesh().await {
        Ok(mesh) => mesh,
        Err(e) => return curve.failed(e),
    };
    let fleets = async {
        let waiter = setup
            .listed_agent(&mesh, Kind::Waiter, "waiter", 20_000)
            .await?;
        let echo = setup.listed_agent(&mesh, Kind::Echo, "echo", 256).await?;
        Ok::<_, String>((waiter, echo))
    };
    let (waiter, _echo) = match fleets.await {
        Ok(fleets) => fleets,
        Err(e) => return curve.failed(e),
    };
    let mut points = Vec::new();
    for count in scale.points(&COUNTS) {
        match point(setup, &mesh, &waiter, count).await {
            Ok(point) => points.push(point),
            Err(e) => {
                curve
                    .notes
                    .push(format!("{count} tasks: not measured: {e}"));
                break;
            }
        }
    }
    for p in &points {
        curve.rows.push(Row {
            x: p.count,
            cells: vec![
                bytes(p.gateway_per_task),
                bytes(p.agent_per_task),
                dur(p.p50),
                dur(p.p99),
                dur(p.cancel_all),
            ],
        });
    }
    curve.panels = vec![
        Panel::new(
            "KiB per task",
            vec![
                super::line("gateway", &points, FIRST_CHARTED_PER_ITEM, |p| {
                    (p.count, p.gateway_per_task / 1024.0)
                }),
                super::line("agent", &points, FIRST_CHARTED_PER_ITEM, |p| {
                    (p.count, p.agent_per_task / 1024.0)
                }),
            ],
        ),
        Panel::new(
            "ms",
            vec![
                super::line("echo p50", &points, 1, |p| (p.count, ms(p.p50))),
                super::line("echo p99", &points, 1, |p| (p.count, ms(p.p99))),
                super::line("cancel all", &points, 1, |p| (p.count, ms(p.cancel_all))),
            ],
        ),
    ];
    curve.notes.push(
        "RSS per task is the growth of the process's RSS from before the tasks were sent to \
         when the last was working, divided by their count (small counts are within the \
         allocator's noise); the gateway keeps the tasks in its memory store."
            .to_owned(),
    );
    curve
}

async fn point(
    setup: &Setup,
    mesh: &super::Mesh,
    waiter: &crate::procs::Proc,
    count: u64,
) -> Result<Point, String> {
    let gateway_before = rss(&mesh.gateway);
    let agent_before = rss(waiter);
    let http = &setup.http;
    let base = mesh.base.as_str();
    let started = futures_util::stream::iter(0..count)
        .map(|i| async move {
            let body = send_body(
                i,
                json!([{"kind": "text", "text": "wait"}]),
                Some(json!({"blocking": false})),
            );
            let answer = call(http, base, "waiter", &body).await?;
            answer["result"]["id"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("no task: {answer}"))
        })
        .buffer_unordered(AT_ONCE)
        .collect::<Vec<_>>()
        .await;
    let ids = started.into_iter().collect::<Result<Vec<_>, _>>()?;
    // The agent takes them in order: once the last is working, all are.
    let last = ids.last().ok_or("no task started")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let get = json!({"jsonrpc": "2.0", "id": 0, "method": "tasks/get", "params": {"id": last}});
        let task = call(http, base, "waiter", &get).await?;
        if task["result"]["status"]["state"] == "working" {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("the last task is not working after 120 s: {task}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let every = ids.len() as f64;
    let gateway_per_task = (rss(&mesh.gateway) as f64 - gateway_before as f64) * 1024.0 / every;
    let agent_per_task = (rss(waiter) as f64 - agent_before as f64) * 1024.0 / every;
    let echo = echo_latencies(http, base, "echo", 100).await?;
    let began = Instant::now();
    let canceled = futures_util::stream::iter(ids.iter().enumerate())
        .map(|(i, id)| async move {
            let body = json!({"jsonrpc": "2.0", "id": i, "method": "tasks/cancel",
                "params": {"id": id}});
            let answer: Value = call(http, base, "waiter", &body).await?;
            match answer["result"]["status"]["state"].as_str() {
                Some("canceled") => Ok(()),
                _ => Err(format!("not canceled: {answer}")),
            }
        })
        .buffer_unordered(AT_ONCE)
        .collect::<Vec<_>>()
        .await;
    let cancel_all = began.elapsed();
    canceled.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(Point {
        count,
        gateway_per_task,
        agent_per_task,
        p50: echo.percentile(50.0),
        p99: echo.percentile(99.0),
        cancel_all,
    })
}
