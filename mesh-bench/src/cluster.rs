//! What a cluster of brokers costs: JSON-RPC `message/send` to the echo agent through one
//! `mesh broker`, against the same through a three-node cluster of `mesh broker` processes
//! (rmqtt's broadcast cluster; the `mesh` binary built with the `cluster` feature), with the
//! gateway and the agent on the same node, then on two different nodes (every request and
//! every reply crossing the nodes' gRPC link). Each setup: concurrency 1 (the latency) and
//! concurrency 64 (the throughput), driven by wrk like the main table's rows.

use crate::e2e::{self, Load, LoadResult};
use crate::procs::{self, BrokerKind, BrokerProc, Proc};
use crate::suite::{Figure, Plan};
use crate::{discovery, log};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// How many nodes the cluster has.
const NODES: usize = 3;

/// How long the cluster and the agent may take until requests are answered.
const READY: Duration = Duration::from_secs(30);

/// How many answered requests in a row make the setup ready (the nodes' links settle in
/// their first seconds).
const IN_A_ROW: usize = 20;

/// One setup's figures.
#[derive(Debug, Clone)]
pub struct ClusterSetup {
    /// What it is, for the table.
    pub label: &'static str,
    /// JSON-RPC `message/send` at concurrency 1.
    pub c1: Figure<LoadResult>,
    /// The same at concurrency 64.
    pub c64: Figure<LoadResult>,
    /// The CPU time per request at concurrency 64, in seconds: of the broker nodes (all of
    /// them), and of the gateway and the agent together.
    pub cpu_per_request: Option<(f64, f64)>,
}

impl ClusterSetup {
    fn failed(label: &'static str, why: String) -> ClusterSetup {
        ClusterSetup {
            label,
            c1: Err(why.clone()),
            c64: Err(why),
            cpu_per_request: None,
        }
    }
}

/// Runs the three setups: one node; the cluster with the gateway and echo on node 1; the
/// cluster with the gateway on node 1 and echo on node 2.
pub async fn run(plan: &Plan) -> Vec<ClusterSetup> {
    const ONE: &str = "one node (`mesh broker`)";
    const SAME: &str = "3-node cluster, gateway and echo on node 1";
    const ACROSS: &str = "3-node cluster, gateway on node 1, echo on node 2";
    let mut setups = Vec::with_capacity(3);
    log("[cluster] one node");
    setups.push(
        match BrokerProc::start(BrokerKind::Embedded, &plan.dir, &plan.mesh) {
            Ok(broker) => setup(plan, ONE, &[&broker.proc], &broker.url(), &broker.url()).await,
            Err(e) => ClusterSetup::failed(ONE, e),
        },
    );
    match start_cluster(plan) {
        Ok(nodes) => {
            let procs: Vec<&Proc> = nodes.iter().map(|(p, _)| p).collect();
            log("[cluster] three nodes, gateway and echo on node 1");
            setups.push(setup(plan, SAME, &procs, &nodes[0].1, &nodes[0].1).await);
            log("[cluster] three nodes, gateway on node 1, echo on node 2");
            setups.push(setup(plan, ACROSS, &procs, &nodes[0].1, &nodes[1].1).await);
        }
        Err(e) => {
            setups.push(ClusterSetup::failed(SAME, e.clone()));
            setups.push(ClusterSetup::failed(ACROSS, e));
        }
    }
    setups
}

/// Starts the cluster's nodes, each on free ports, and waits until each takes MQTT
/// connections. Returns each node's process and `mqtt://` URL.
fn start_cluster(plan: &Plan) -> Result<Vec<(Proc, String)>, String> {
    let port = || procs::free_port().map_err(|e| e.to_string());
    let mqtt: Vec<u16> = (0..NODES).map(|_| port()).collect::<Result<_, _>>()?;
    let grpc: Vec<u16> = (0..NODES).map(|_| port()).collect::<Result<_, _>>()?;
    let mut nodes = Vec::with_capacity(NODES);
    for i in 0..NODES {
        let mut args = vec![
            "broker".to_owned(),
            format!("--broker-addr=127.0.0.1:{}", mqtt[i]),
            format!("--cluster-node-id={}", i + 1),
            format!("--cluster-addr=127.0.0.1:{}", grpc[i]),
        ];
        args.extend(
            (0..NODES)
                .filter(|j| *j != i)
                .map(|j| format!("--cluster-peer={}@127.0.0.1:{}", j + 1, grpc[j])),
        );
        let name = format!("cluster-node-{}", i + 1);
        let mut node = Proc::spawn(&plan.dir, &name, &plan.mesh, &args)
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, mqtt[i]));
        if let Err(e) = procs::wait_for_port(addr, Duration::from_secs(10), &mut node) {
            let said =
                std::fs::read_to_string(plan.dir.join(format!("{name}.log"))).unwrap_or_default();
            return Err(if said.contains("cluster") && said.contains("feature") {
                "the `mesh` binary has no `cluster` feature: build it with \
                 `cargo build --release -p mesh-cli --features cluster` (scripts/bench does)"
                    .to_owned()
            } else {
                e
            });
        }
        nodes.push((node, format!("mqtt://127.0.0.1:{}", mqtt[i])));
    }
    Ok(nodes)
}

/// A gateway on `gateway_broker`, the echo agent on `agent_broker` (each in a namespace of
/// its own), then the two loads once the agent answers.
async fn setup(
    plan: &Plan,
    label: &'static str,
    brokers: &[&Proc],
    gateway_broker: &str,
    agent_broker: &str,
) -> ClusterSetup {
    match measure(plan, brokers, gateway_broker, agent_broker).await {
        Ok((c1, c64, cpu_per_request)) => ClusterSetup {
            label,
            c1,
            c64,
            cpu_per_request,
        },
        Err(e) => ClusterSetup::failed(label, e),
    }
}

/// The CPU seconds used so far by `procs`, all together.
fn cpu_of(procs: &[&Proc]) -> Option<f64> {
    procs.iter().map(|p| p.cpu_seconds()).sum()
}

/// Concurrency 1, concurrency 64, and the CPU per request at 64 (see [`ClusterSetup`]).
type Measured = (Figure<LoadResult>, Figure<LoadResult>, Option<(f64, f64)>);

async fn measure(
    plan: &Plan,
    brokers: &[&Proc],
    gateway_broker: &str,
    agent_broker: &str,
) -> Result<Measured, String> {
    let Some(wrk) = &plan.wrk else {
        return Err(e2e::WRK_MISSING.to_owned());
    };
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let ns = format!("bench{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let (gateway, base) = procs::start_gateway(
        &plan.dir,
        &plan.mesh,
        gateway_broker,
        &ns,
        procs::Store::Memory,
        &http,
    )
    .await?;
    let echo = procs::spawn_agent(&plan.dir, &plan.mesh, "echo", agent_broker, &ns)?;
    if discovery::wait_listed(&http, &base, "echo", true, READY)
        .await
        .is_none()
    {
        return Err(format!("the echo agent was not listed within {READY:?}"));
    }
    answered_in_a_row(&http, &base).await?;
    let load = Load::jsonrpc("echo");
    // Request numbers: far apart per run, so message ids stay unique.
    let c1 = e2e::run(wrk, &plan.dir, &base, &load, 1, plan.case, None, 0);
    let before = cpu_of(brokers).zip(cpu_of(&[&gateway, &echo]));
    let c64 = e2e::run(wrk, &plan.dir, &base, &load, 64, plan.case, None, 1 << 40);
    let after = cpu_of(brokers).zip(cpu_of(&[&gateway, &echo]));
    let cpu_per_request = match (&c64, before, after) {
        (Ok(r), Some((b0, m0)), Some((b1, m1))) if r.responses > 0 => {
            let n = r.responses as f64;
            Some(((b1 - b0) / n, (m1 - m0) / n))
        }
        _ => None,
    };
    Ok((c1, c64, cpu_per_request))
}

/// Sends `message/send` to echo until [`IN_A_ROW`] answers in a row are completed tasks,
/// within [`READY`].
async fn answered_in_a_row(http: &reqwest::Client, base: &str) -> Result<(), String> {
    let deadline = Instant::now() + READY;
    let mut in_a_row = 0;
    while in_a_row < IN_A_ROW {
        if Instant::now() > deadline {
            return Err(format!(
                "echo did not answer {IN_A_ROW} requests in a row within {READY:?}"
            ));
        }
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {"message": {
                "kind": "message",
                "role": "user",
                "messageId": uuid::Uuid::new_v4().to_string(),
                "parts": [{"kind": "text", "text": "warm-up"}],
            }},
        });
        let answer = http
            .post(format!("{base}/agents/echo"))
            .timeout(Duration::from_secs(5))
            .json(&body)
            .send()
            .await;
        let completed = match answer {
            Ok(r) => r.text().await.is_ok_and(|t| t.contains("\"completed\"")),
            Err(_) => false,
        };
        in_a_row = if completed { in_a_row + 1 } else { 0 };
    }
    Ok(())
}
