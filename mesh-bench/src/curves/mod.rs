//! How the cost grows (`mesh-bench --curves`): five series, each a run of points in one
//! process tree (a Mosquitto broker, a `mesh gateway`, agents in `mesh-fleet` processes),
//! printed as a table and drawn as an SVG chart:
//!
//! 1. [`agents`]: 1 … 1,000 agents online (one `mesh-fleet` process holds them all): how long
//!    a gateway started after them takes to list them all, its RSS, the broker's, the
//!    fleet's per agent, `GET /agents`, a request to one of them.
//! 2. [`in_flight`]: 1 … 10,000 tasks held `working` by one agent: gateway and agent RSS per
//!    task, a fresh echo request's p50/p99 meanwhile, the time to cancel them all.
//! 3. [`streams`]: 1 … 10,000 SSE subscribers, on one task and spread over as many tasks:
//!    gateway RSS per stream, event delivery p50/p99, events per second; and idle ones over
//!    HTTP/1.1 and HTTP/2: gateway RSS per stream.
//! 4. [`payloads`]: 1 KB … 8 MB text and file parts echoed: MB/s, p50, the gateway's peak
//!    RSS, and what a client gets past the limit.
//! 5. [`fan_out`]: an agent calling N peers at once (N = 1 … 64): completion against the
//!    slowest peer.

pub mod agents;
pub mod chart;
pub mod fan_out;
pub mod in_flight;
pub mod payloads;
pub mod streams;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use chart::Line;

use crate::fleet::Kind;
use crate::log;
use crate::procs::{self, BrokerKind, BrokerProc, Proc, Store};
use crate::stats::Latencies;
use crate::suite::Plan;

/// One curve: its table and its chart.
#[derive(Debug, Clone)]
pub struct Curve {
    /// The heading, and the chart's file stem.
    pub title: String,
    pub file: String,
    /// What the first column counts.
    pub x_label: String,
    /// The other columns' headings.
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
    /// What the chart draws.
    pub panels: Vec<chart::Panel>,
    /// Lines under the table: what was run, where the cost goes, what failed.
    pub notes: Vec<String>,
}

/// One point of a curve, as the table shows it.
#[derive(Debug, Clone)]
pub struct Row {
    pub x: u64,
    pub cells: Vec<String>,
}

impl Curve {
    fn new(title: &str, file: &str, x_label: &str, columns: &[&str]) -> Curve {
        Curve {
            title: title.to_owned(),
            file: file.to_owned(),
            x_label: x_label.to_owned(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: Vec::new(),
            panels: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// A curve that could not run, and why.
    fn failed(mut self, why: String) -> Curve {
        self.notes.push(format!("not measured: {why}"));
        self
    }

    /// The table (and the chart's file, when one was drawn) in Markdown.
    pub fn markdown(&self, chart: Option<&Path>) -> String {
        let mut out = format!("#### {}\n\n| {} |", self.title, self.x_label);
        for column in &self.columns {
            out.push_str(&format!(" {column} |"));
        }
        out.push_str("\n| ---: |");
        out.push_str(&" ---: |".repeat(self.columns.len()));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&format!("| {} |", crate::report::rate(row.x as f64)));
            for cell in &row.cells {
                out.push_str(&format!(" {cell} |"));
            }
            out.push('\n');
        }
        for note in &self.notes {
            out.push_str(&format!("\n{note}\n"));
        }
        if let Some(chart) = chart {
            out.push_str(&format!("\n![{}]({})\n", self.title, chart.display()));
        }
        out
    }
}

/// The curves, by name (`--curve`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    Agents,
    Tasks,
    Streams,
    Payloads,
    FanOut,
}

/// Runs the curves of `only` (every curve when empty), writing each chart into `charts`
/// (created if missing).
pub async fn run(
    plan: &Plan,
    quick: bool,
    only: &[Which],
    charts: &Path,
) -> Vec<(Curve, Option<PathBuf>)> {
    let setup = match Setup::new(plan) {
        Ok(setup) => setup,
        Err(e) => {
            return vec![(Curve::new("the curves", "curves", "-", &[]).failed(e), None)];
        }
    };
    let scale = if quick { Scale::Quick } else { Scale::Full };
    let runs = |which: Which| only.is_empty() || only.contains(&which);
    let mut curves = Vec::new();
    if runs(Which::Agents) {
        log("[curves] agents online");
        curves.push(agents::run(&setup, scale).await);
    }
    if runs(Which::Tasks) {
        log("[curves] tasks in flight");
        curves.push(in_flight::run(&setup, scale).await);
    }
    if runs(Which::Streams) {
        log("[curves] open streams");
        curves.push(streams::run(&setup, scale).await);
    }
    if runs(Which::Payloads) {
        log("[curves] payloads");
        curves.push(payloads::run(&setup, scale).await);
    }
    if runs(Which::FanOut) {
        log("[curves] fan-out through peers");
        curves.push(fan_out::run(&setup, scale).await);
    }
    if let Err(e) = std::fs::create_dir_all(charts) {
        log(&format!("cannot create {}: {e}", charts.display()));
    }
    curves
        .into_iter()
        .map(|curve| {
            let path = charts.join(format!("{}.svg", curve.file));
            let drawn = if curve.panels.is_empty() {
                None
            } else {
                match chart::draw(&curve.title, &curve.x_label, &curve.panels, &path) {
                    Ok(()) => Some(path),
                    Err(e) => {
                        log(&format!("cannot draw {}: {e}", path.display()));
                        None
                    }
                }
            };
            (curve, drawn)
        })
        .collect()
}

/// The smallest count a per-item figure is charted at.
pub const FIRST_CHARTED_PER_ITEM: u64 = 10;

/// How far the curves go: `--quick` stops each a decade early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Full,
    Quick,
}

impl Scale {
    /// `points`, without the last one in a quick run.
    fn points(self, points: &[u64]) -> Vec<u64> {
        match self {
            Scale::Full => points.to_vec(),
            Scale::Quick => points[..points.len().saturating_sub(1).max(1)].to_vec(),
        }
    }
}

/// What every curve starts its processes with.
pub struct Setup {
    pub dir: PathBuf,
    pub mesh: PathBuf,
    pub fleet: PathBuf,
    pub http: reqwest::Client,
}

impl Setup {
    fn new(plan: &Plan) -> Result<Setup, String> {
        let fleet = plan.mesh.with_file_name("mesh-fleet");
        if !fleet.is_file() {
            return Err(format!(
                "{} is missing: build it with `cargo build --release -p mesh-bench`",
                fleet.display()
            ));
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(120))
            .pool_max_idle_per_host(20_000)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Setup {
            dir: plan.dir.clone(),
            mesh: plan.mesh.clone(),
            fleet,
            http,
        })
    }

    /// A fresh Mosquitto broker and namespace, and a gateway on them.
    pub async fn mesh(&self) -> Result<Mesh, String> {
        let broker = BrokerProc::start(BrokerKind::Mosquitto, &self.dir, &self.mesh)?;
        let namespace = format!("curve{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let (gateway, base) = self.gateway(&broker, &namespace).await?;
        Ok(Mesh {
            broker,
            namespace,
            gateway,
            base,
        })
    }

    /// A gateway (memory store) on `broker` in `namespace`.
    pub async fn gateway(
        &self,
        broker: &BrokerProc,
        namespace: &str,
    ) -> Result<(Proc, String), String> {
        procs::start_gateway(
            &self.dir,
            &self.mesh,
            &broker.url(),
            namespace,
            Store::Memory,
            &self.http,
        )
        .await
    }

    /// A `mesh-fleet` of `count` agents of `kind`, once it says they are all on the bus.
    pub async fn fleet(
        &self,
        mesh: &Mesh,
        kind: Kind,
        prefix: &str,
        count: u64,
        max_tasks: u64,
    ) -> Result<Proc, String> {
        let name = format!("fleet-{prefix}-{}", mesh.namespace);
        let mut proc = Proc::spawn(
            &self.dir,
            &name,
            &self.fleet,
            &[
                format!("--kind={}", format!("{kind:?}").to_lowercase()),
                format!("--prefix={prefix}"),
                format!("--count={count}"),
                format!("--max-tasks={max_tasks}"),
                format!("--broker-url={}", mesh.broker.url()),
                format!("--namespace={}", mesh.namespace),
            ],
        )
        .map_err(|e| format!("cannot start mesh-fleet: {e}"))?;
        let log_file = self.dir.join(format!("{name}.log"));
        let deadline =
            Instant::now() + Duration::from_secs(60) + Duration::from_millis(100) * count as u32;
        loop {
            let said = std::fs::read_to_string(&log_file).unwrap_or_default();
            if said.contains("ready ") {
                return Ok(proc);
            }
            if let Some(status) = proc.exited() {
                return Err(format!("mesh-fleet exited ({status}): {}", said.trim()));
            }
            if Instant::now() > deadline {
                return Err(format!("{count} {kind:?} agents were not up in time"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Setup {
    /// One agent of `kind` named `name` (a fleet of one), once the gateway lists it online.
    pub async fn listed_agent(
        &self,
        mesh: &Mesh,
        kind: Kind,
        name: &str,
        max_tasks: u64,
    ) -> Result<Proc, String> {
        let agent = self.fleet(mesh, kind, name, 1, max_tasks).await?;
        wait_all_listed(&self.http, &mesh.base, name, 1, Duration::from_secs(30)).await?;
        Ok(agent)
    }
}

/// A broker, a namespace and a gateway.
pub struct Mesh {
    pub broker: BrokerProc,
    pub namespace: String,
    pub gateway: Proc,
    pub base: String,
}

/// How many agents whose names start with `prefix` `GET /agents` lists online.
pub async fn listed_online(http: &reqwest::Client, base: &str, prefix: &str) -> Option<usize> {
    let listed = crate::discovery::listed(http, base).await?;
    Some(
        listed
            .filter(|(name, online)| *online && name.starts_with(prefix))
            .count(),
    )
}

/// A chart line through `points` from the count `from` on, each drawn at `xy(point)`.
pub fn line<P>(name: &str, points: &[P], from: u64, xy: impl Fn(&P) -> (u64, f64)) -> Line {
    Line::new(
        name,
        points
            .iter()
            .map(xy)
            .filter(|(count, _)| *count >= from)
            .map(|(count, y)| (count as f64, y))
            .collect(),
    )
}

/// Polls `GET /agents` until `count` agents named `prefix…` are online; when they were.
pub async fn wait_all_listed(
    http: &reqwest::Client,
    base: &str,
    prefix: &str,
    count: usize,
    bound: Duration,
) -> Result<Instant, String> {
    let deadline = Instant::now() + bound;
    let mut seen = 0;
    while Instant::now() < deadline {
        seen = listed_online(http, base, prefix).await.unwrap_or(0);
        if seen >= count {
            return Ok(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err(format!("{seen} of {count} agents listed after {bound:?}"))
}

/// A JSON-RPC `message/send` of `parts` (0.3 shapes), its `configuration` given.
pub fn send_body(id: u64, parts: Value, configuration: Option<Value>) -> Value {
    let mut params = json!({"message": {"kind": "message", "role": "user",
        "messageId": uuid::Uuid::new_v4().to_string(), "parts": parts}});
    if let Some(configuration) = configuration {
        params["configuration"] = configuration;
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "message/send", "params": params})
}

/// POSTs a JSON-RPC request to `agent` and returns the answer's JSON.
pub async fn call(
    http: &reqwest::Client,
    base: &str,
    agent: &str,
    body: &Value,
) -> Result<Value, String> {
    let answer = http
        .post(format!("{base}/agents/{agent}"))
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = answer.status();
    let bytes = answer.bytes().await.map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|_| {
        format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        )
    })
}

/// `samples` sequential `message/send` of a short text to `agent`, each answered
/// `completed`: their latencies.
pub async fn echo_latencies(
    http: &reqwest::Client,
    base: &str,
    agent: &str,
    samples: usize,
) -> Result<Latencies, String> {
    let mut latencies = Latencies::default();
    for i in 0..samples as u64 + 5 {
        let body = send_body(i, json!([{"kind": "text", "text": "ping"}]), None);
        let began = Instant::now();
        let answer = call(http, base, agent, &body).await?;
        if answer["result"]["status"]["state"] != "completed" {
            return Err(format!("not completed: {answer}"));
        }
        if i >= 5 {
            latencies.push(began.elapsed());
        }
    }
    Ok(latencies)
}

/// The RSS of `proc` in KiB, 0 when it cannot be read.
pub fn rss(proc: &Proc) -> u64 {
    proc.rss_kib().unwrap_or(0)
}

/// A duration in milliseconds, for the charts.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// KiB as MiB, one decimal.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Bytes per item of `grown` KiB over `count` items, as the tables show it.
pub fn per_item(grown_kib: i64, count: u64) -> String {
    bytes(grown_kib as f64 * 1024.0 / count.max(1) as f64)
}

/// A size in bytes, as the tables show it.
pub fn bytes(bytes: f64) -> String {
    if bytes.abs() >= 1024.0 {
        format!("{:.1} KiB", bytes / 1024.0)
    } else {
        format!("{bytes:.0} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_sizes_read_as_the_tables_print_them() {
        assert_eq!(per_item(4, 1), "4.0 KiB");
        assert_eq!(per_item(1, 4), "256 B");
        assert_eq!(Scale::Quick.points(&[1, 10, 100]), vec![1, 10]);
        assert_eq!(Scale::Full.points(&[1, 10]), vec![1, 10]);
        let drawn = line("per item", &[1u64, 10, 100], FIRST_CHARTED_PER_ITEM, |&n| {
            (n, n as f64 / 2.0)
        });
        assert_eq!(drawn.points, vec![(10.0, 5.0), (100.0, 50.0)]);
    }
}
