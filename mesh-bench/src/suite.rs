//! One broker's run, in order: the broker process; the raw MQTT limit through it; a gateway
//! process (its idle RSS); `mesh agent echo` spawned and timed until the gateway lists it
//! (then its idle RSS); `mesh agent writer`; `SendMessage` at concurrency 1 through each
//! binding, one after the other (JSON-RPC and HTTP+JSON by wrk, gRPC by [`grpc_load`]); the
//! interleaved rounds of raw MQTT and JSON-RPC at concurrency 1 that the ratio is taken
//! from; the three bindings again at concurrency 64; JSON-RPC at concurrency 64 (also
//! through a second gateway that keeps its tasks in SQLite, then one long SSE stream through
//! that one: its CPU and wall time); one SSE stream; wrk again until the gateway holds 100,000 tasks (its RSS); SIGKILL of the echo
//! agent, timed until the gateway lists it offline. Every case is bounded in time; a case that
//! cannot run says why instead of giving a figure.

use crate::e2e::{self, CaseCpu, Load, LoadResult};
use crate::memory::{self, Rss};
use crate::paired::{self, Paired, PairedRates, Setup};
use crate::procs::{self, BrokerKind, BrokerProc};
use crate::raw_mqtt::{self, RawResult};
use crate::sse::{self, SseResult};
use crate::{discovery, grpc_load, log};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How the run is sized.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The length of each timed case.
    pub case: Duration,
    /// How many tasks the gateway should hold for its loaded RSS.
    pub stored_tasks: u64,
    /// How many chunks the SSE stream carries.
    pub sse_chunks: usize,
    /// How many chunks the long stream through the gateway with the SQLite store carries.
    pub durable_sse_chunks: usize,
    /// The `mesh` binary.
    pub mesh: PathBuf,
    /// wrk, if installed.
    pub wrk: Option<PathBuf>,
    /// A `postgres://` URL of a database on the server the PostgreSQL store's case creates its
    /// own database on (and drops it after).
    pub postgres: String,
    /// The directory for configs, scripts and logs.
    pub dir: PathBuf,
}

impl Plan {
    /// The interleaved comparisons' setup (see [`crate::paired`]) against the broker on
    /// `port` and the gateway at `base`'s echo agent: rounds of a third of a case, a second
    /// at least.
    pub fn rounds_against<'a>(&'a self, wrk: &'a Path, port: u16, base: &'a str) -> Setup<'a> {
        Setup {
            wrk,
            dir: &self.dir,
            port,
            base,
            agent: "echo",
            round: Duration::from_secs((self.case.as_secs() / 3).max(1)),
        }
    }
}

/// The figure of a case, or why there is none.
pub type Figure<T> = Result<T, String>;

/// Everything one broker's run measured.
#[derive(Debug, Clone)]
pub struct Figures {
    pub broker: BrokerKind,
    pub raw: Figure<RawResult>,
    /// JSON-RPC `message/send` at concurrency 1.
    pub c1: Figure<LoadResult>,
    /// The HTTP+JSON binding's `message:send` at concurrency 1.
    pub c1_rest: Figure<LoadResult>,
    /// gRPC `SendMessage` at concurrency 1.
    pub c1_grpc: Figure<LoadResult>,
    /// Concurrency 1 and raw MQTT QoS 1, in interleaved rounds (the ratio's source).
    pub paired: Figure<Paired>,
    /// JSON-RPC `message/send` at concurrency 64.
    pub c64: Figure<LoadResult>,
    /// Concurrency 64 and raw MQTT QoS 1 pipelined, in interleaved rounds (the share's
    /// source).
    pub paired64: Figure<PairedRates>,
    /// The HTTP+JSON binding's `message:send` at concurrency 64.
    pub c64_rest: Figure<LoadResult>,
    /// gRPC `SendMessage` at concurrency 64.
    pub c64_grpc: Figure<LoadResult>,
    /// Concurrency 64 through a second gateway that keeps its tasks in SQLite.
    pub c64_durable: Figure<LoadResult>,
    pub sse: Figure<SseResult>,
    /// One long stream through the gateway with the SQLite store.
    pub sse_durable: Figure<DurableStream>,
    pub discovery: Figure<Duration>,
    pub offline: Figure<Duration>,
    pub agent_idle: Figure<Rss>,
    pub gateway_idle: Figure<Rss>,
    /// The gateway's RSS and how many tasks it then held.
    pub gateway_full: Figure<(Rss, u64)>,
}

/// A stream through the gateway with the SQLite store, and what it cost the gateway.
#[derive(Debug, Clone)]
pub struct DurableStream {
    pub sse: SseResult,
    /// The gateway's CPU time (user + system) from the request to the stream's end.
    pub gateway_cpu: f64,
    /// From the request to the stream's end.
    pub wall: Duration,
}

impl Figures {
    fn failed(broker: BrokerKind, why: String) -> Figures {
        Figures {
            broker,
            raw: Err(why.clone()),
            c1: Err(why.clone()),
            c1_rest: Err(why.clone()),
            c1_grpc: Err(why.clone()),
            paired: Err(why.clone()),
            c64: Err(why.clone()),
            paired64: Err(why.clone()),
            c64_rest: Err(why.clone()),
            c64_grpc: Err(why.clone()),
            c64_durable: Err(why.clone()),
            sse: Err(why.clone()),
            sse_durable: Err(why.clone()),
            discovery: Err(why.clone()),
            offline: Err(why.clone()),
            agent_idle: Err(why.clone()),
            gateway_idle: Err(why.clone()),
            gateway_full: Err(why),
        }
    }
}

/// Runs every case against a broker of `kind`.
pub async fn run(kind: BrokerKind, plan: &Plan) -> Figures {
    let broker = match BrokerProc::start(kind, &plan.dir, &plan.mesh) {
        Ok(b) => b,
        Err(e) => return Figures::failed(kind, e),
    };
    log(&format!("[{}] broker on {}", kind.label(), broker.url()));

    log(&format!("[{}] raw MQTT", kind.label()));
    let raw = raw_mqtt::run(broker.port, plan.case).await;

    match mesh_cases(kind, &broker, plan, raw.clone()).await {
        Ok(f) => f,
        Err(e) => {
            let mut f = Figures::failed(kind, e);
            f.raw = raw;
            f
        }
    }
}

async fn mesh_cases(
    kind: BrokerKind,
    broker: &BrokerProc,
    plan: &Plan,
    raw: Figure<RawResult>,
) -> Result<Figures, String> {
    let label = kind.label();
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let ns = format!("bench{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let url = broker.url();
    let (gateway, base) = procs::start_gateway(
        &plan.dir,
        &plan.mesh,
        &url,
        &ns,
        procs::Store::Memory,
        &http,
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let gateway_idle = memory::of(&gateway);

    log(&format!("[{label}] discovery"));
    let spawned = Instant::now();
    let mut echo = procs::spawn_agent(&plan.dir, &plan.mesh, "echo", &url, &ns)?;
    let seen = discovery::wait_listed(&http, &base, "echo", true, Duration::from_secs(10)).await;
    let discovery = match seen {
        Some(t) => Ok(t.duration_since(spawned)),
        None => return Err("the echo agent was not listed within 10 s".into()),
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let agent_idle = memory::of(&echo);

    let _writer = procs::spawn_agent(&plan.dir, &plan.mesh, "writer", &url, &ns)?;
    if discovery::wait_listed(&http, &base, "writer", true, Duration::from_secs(10))
        .await
        .is_none()
    {
        return Err("the writer agent was not listed within 10 s".into());
    }

    let jsonrpc = Load::jsonrpc("echo");
    let rest = Load::rest("echo");
    let mut sent = 0u64;
    log(&format!("[{label}] JSON-RPC message/send, concurrency 1"));
    let c1 = wrk_case(plan, &base, &jsonrpc, &mut sent, 1, plan.case, None);
    log(&format!("[{label}] HTTP+JSON message:send, concurrency 1"));
    let c1_rest = wrk_case(plan, &base, &rest, &mut sent, 1, plan.case, None);
    log(&format!("[{label}] gRPC SendMessage, concurrency 1"));
    let c1_grpc = grpc_case(plan, &base, &mut sent, 1);
    log(&format!(
        "[{label}] concurrency 1 against raw MQTT QoS 1, {} interleaved rounds",
        paired::ROUNDS
    ));
    let paired = match &plan.wrk {
        None => Err(e2e::WRK_MISSING.to_string()),
        Some(wrk) => paired::run(&plan.rounds_against(wrk, broker.port, &base), &mut sent).await,
    };
    log(&format!("[{label}] JSON-RPC message/send, concurrency 64"));
    let c64 = with_cpu(&gateway, || {
        wrk_case(plan, &base, &jsonrpc, &mut sent, 64, plan.case, None)
    });
    log(&format!(
        "[{label}] concurrency 64 against raw MQTT QoS 1 pipelined, {} interleaved rounds",
        paired::RATE_ROUNDS
    ));
    let paired64 = match &plan.wrk {
        None => Err(e2e::WRK_MISSING.to_string()),
        Some(wrk) => {
            paired::run_pipelined(&plan.rounds_against(wrk, broker.port, &base), &mut sent).await
        }
    };
    log(&format!("[{label}] HTTP+JSON message:send, concurrency 64"));
    let c64_rest = with_cpu(&gateway, || {
        wrk_case(plan, &base, &rest, &mut sent, 64, plan.case, None)
    });
    log(&format!("[{label}] gRPC SendMessage, concurrency 64"));
    let c64_grpc = with_cpu(&gateway, || grpc_case(plan, &base, &mut sent, 64));
    log(&format!(
        "[{label}] JSON-RPC message/send, concurrency 64, through a gateway with the SQLite store"
    ));
    let c64_durable = match procs::start_gateway(
        &plan.dir,
        &plan.mesh,
        &url,
        &ns,
        procs::Store::Durable,
        &http,
    )
    .await
    {
        Ok((durable, durable_base)) => {
            let mut uncounted = 0u64;
            let figure = wrk_case(
                plan,
                &durable_base,
                &jsonrpc,
                &mut uncounted,
                64,
                plan.case,
                None,
            );
            log(&format!(
                "[{label}] SSE, {} chunks, through the gateway with the SQLite store",
                plan.durable_sse_chunks
            ));
            let stream = durable_stream(&http, &durable, &durable_base, plan).await;
            drop(durable);
            (figure, stream)
        }
        Err(e) => (Err(e.clone()), Err(e)),
    };
    let (c64_durable, sse_durable) = c64_durable;

    log(&format!("[{label}] SSE"));
    let sse = sse::run(
        &http,
        &base,
        plan.sse_chunks,
        plan.case.max(Duration::from_secs(30)),
    )
    .await;

    log(&format!(
        "[{label}] filling the gateway's store to {} tasks",
        plan.stored_tasks
    ));
    let missing = plan.stored_tasks.saturating_sub(sent);
    let fill = if missing > 0 {
        wrk_case(
            plan,
            &base,
            &jsonrpc,
            &mut sent,
            64,
            Duration::from_secs(120),
            Some(missing),
        )
        .map(|_| ())
    } else {
        Ok(())
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let gateway_full = fill
        .and_then(|()| memory::of(&gateway))
        .map(|rss| (rss, sent.min(100_000)));

    log(&format!("[{label}] kill -9 of the echo agent"));
    let killed = Instant::now();
    echo.kill9();
    let offline =
        match discovery::wait_listed(&http, &base, "echo", false, Duration::from_secs(50)).await {
            Some(t) => Ok(t.duration_since(killed)),
            None => Err("still listed online 50 s after SIGKILL".into()),
        };
    check_logs(&plan.dir);
    Ok(Figures {
        broker: kind,
        raw,
        c1,
        c1_rest,
        c1_grpc,
        paired,
        paired64,
        c64,
        c64_rest,
        c64_grpc,
        c64_durable,
        sse,
        sse_durable,
        discovery,
        offline,
        agent_idle,
        gateway_idle,
        gateway_full,
    })
}

/// One stream of `plan.durable_sse_chunks` chunks from the writer through `gateway` (the one
/// with the SQLite store): the gateway's CPU time and the wall time it took.
async fn durable_stream(
    http: &reqwest::Client,
    gateway: &procs::Proc,
    base: &str,
    plan: &Plan,
) -> Figure<DurableStream> {
    let cpu = || {
        gateway
            .cpu_seconds()
            .ok_or_else(|| format!("cannot read /proc/{}/stat", gateway.pid()))
    };
    let before = cpu()?;
    let began = Instant::now();
    let sse = sse::run(
        http,
        base,
        plan.durable_sse_chunks,
        Duration::from_secs(300),
    )
    .await?;
    let wall = began.elapsed();
    let gateway_cpu = cpu()? - before;
    if !sse.complete {
        return Err(format!(
            "the stream of {} chunks did not end within 300 s",
            plan.durable_sse_chunks
        ));
    }
    Ok(DurableStream {
        sse,
        gateway_cpu,
        wall,
    })
}

/// One wrk run of `load` against the gateway at `base`; `sent` counts the answers of every
/// run (the tasks stored).
fn wrk_case(
    plan: &Plan,
    base: &str,
    load: &Load,
    sent: &mut u64,
    connections: usize,
    bound: Duration,
    limit: Option<u64>,
) -> Figure<LoadResult> {
    let result = match &plan.wrk {
        None => Err(e2e::WRK_MISSING.to_string()),
        Some(wrk) => e2e::run(wrk, &plan.dir, base, load, connections, bound, limit, *sent),
    };
    if let Ok(r) = &result {
        *sent += r.responses;
    }
    result
}

/// `case` with the CPU time it took the gateway and the load generator (this process and
/// the children it waited for: wrk); without it when `/proc` cannot be read.
pub(crate) fn with_cpu(
    gateway: &procs::Proc,
    case: impl FnOnce() -> Figure<LoadResult>,
) -> Figure<LoadResult> {
    let before = gateway.cpu_seconds().zip(procs::own_cpu_seconds());
    let mut result = case();
    let after = gateway.cpu_seconds().zip(procs::own_cpu_seconds());
    if let (Ok(r), Some((gateway_0, load_0)), Some((gateway_1, load_1))) =
        (&mut result, before, after)
    {
        r.cpu = Some(CaseCpu {
            gateway: gateway_1 - gateway_0,
            load: load_1 - load_0,
        });
    }
    result
}

/// One gRPC load run of `callers` against the echo agent at the gateway at `base`, for the
/// case's length; `sent` counts its answers too.
fn grpc_case(plan: &Plan, base: &str, sent: &mut u64, callers: usize) -> Figure<LoadResult> {
    let result = grpc_load::run(base, "echo", callers, plan.case, *sent);
    if let Ok(r) = &result {
        // Numbers are drawn per call, answered or not: skip past every one that may be used.
        *sent += r.responses + r.errors;
    }
    result
}

/// Says how much the processes logged (per-request logging is a cost worth seeing).
fn check_logs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "log") {
            let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
            if len > 100_000 {
                log(&format!(
                    "note: {} logged {} KiB",
                    path.display(),
                    len / 1024
                ));
            }
        }
    }
}
