//! `mesh-bench`: starts what it needs (brokers, gateway and agents as separate processes, wrk
//! as the HTTP load, its own tonic client as the gRPC load), runs each case for a bounded
//! time, and prints one table, then the table of the task stores (memory, SQLite,
//! PostgreSQL) side by side.
//!
//! ```text
//! cargo build --release -p mesh-cli -p mesh-bench
//! target/release/mesh-bench [--broker embedded|mosquitto|both] [--seconds N] [--quick]
//!                           [--only stores|cluster|tools|up] [--postgres URL]
//! target/release/mesh-bench --curves [--quick] [--charts DIR]
//! ```

use clap::{Parser, ValueEnum};
use mesh_bench::procs::{self, BrokerKind};
use mesh_bench::suite::{self, Plan};
use mesh_bench::{cluster, codecs, curves, e2e, log, machine, mesh_up, report, stores, tools};
use std::path::PathBuf;
use std::time::Duration;

/// Benchmarks of the mesh against raw MQTT through the same broker, in one run.
#[derive(Parser, Debug)]
#[command(name = "mesh-bench", version, about)]
struct Args {
    /// The broker(s) under test.
    #[arg(long, value_enum, default_value = "both")]
    broker: Which,
    /// Seconds per timed case.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// A short run: 1 s per case, 10,000 stored tasks, 2,000 SSE chunks (10,000 through the
    /// gateway with the SQLite store).
    #[arg(long)]
    quick: bool,
    /// The `mesh` binary [default: next to this executable].
    #[arg(long, value_name = "PATH")]
    mesh_bin: Option<PathBuf>,
    /// Run only these rows.
    #[arg(long, value_enum)]
    only: Option<Only>,
    /// A database on the PostgreSQL server the PostgreSQL store's rows create a database of
    /// their own on (dropped after the run).
    #[arg(
        long,
        env = "MESH_BENCH_POSTGRES",
        value_name = "URL",
        default_value = "postgres://root@127.0.0.1:5432/postgres"
    )]
    postgres: String,
    /// Run the cost curves instead (agents, tasks in flight, streams, payloads, fan-out):
    /// tables on stdout, one SVG chart per curve into --charts.
    #[arg(long)]
    curves: bool,
    /// With --curves: only this curve (repeatable).
    #[arg(long, value_enum, requires = "curves")]
    curve: Vec<curves::Which>,
    /// Where --curves writes its charts.
    #[arg(long, value_name = "DIR", default_value = "docs/curves")]
    charts: PathBuf,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Only {
    /// The task stores' rows (memory, SQLite, PostgreSQL), through one broker: Mosquitto
    /// unless `--broker embedded`.
    Stores,
    /// The broker cluster's rows: one `mesh broker` against a three-node cluster (the `mesh`
    /// binary built with the `cluster` feature).
    Cluster,
    /// The agent kinds' rows: the MCP bridge per tool call, and the LLM agent's first token.
    Tools,
    /// The `mesh up` rows: raw MQTT through its embedded broker, then JSON-RPC.
    Up,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum Which {
    Embedded,
    Mosquitto,
    Both,
}

fn main() {
    // Before any HTTP client is built (reqwest's rustls has no provider of its own).
    mesh_core::tls::install_crypto_provider();
    let args = Args::parse();
    let mesh = match procs::mesh_binary(args.mesh_bin.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("mesh-bench: {e}");
            std::process::exit(2);
        }
    };
    let wrk = e2e::wrk_binary();
    if wrk.is_none() {
        log(e2e::WRK_MISSING);
    }
    let dir = std::env::temp_dir().join(format!("mesh-bench-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("mesh-bench: cannot create {}: {e}", dir.display());
        std::process::exit(2);
    }
    let plan = Plan {
        case: Duration::from_secs(if args.quick { 1 } else { args.seconds.max(1) }),
        stored_tasks: if args.quick { 10_000 } else { 100_000 },
        sse_chunks: if args.quick { 2_000 } else { 20_000 },
        durable_sse_chunks: if args.quick { 10_000 } else { 100_000 },
        mesh,
        wrk,
        postgres: args.postgres.clone(),
        dir: dir.clone(),
    };
    let brokers: &[BrokerKind] = match args.broker {
        Which::Embedded => &[BrokerKind::Embedded],
        Which::Mosquitto => &[BrokerKind::Mosquitto],
        Which::Both => &[BrokerKind::Embedded, BrokerKind::Mosquitto],
    };
    log(&format!("logs and scripts in {}", dir.display()));
    // Before anything is started: what a system call and a wake-up cost here.
    let machine = match machine::measure(10, 5_000) {
        Ok(costs) => costs.describe(),
        Err(e) => format!("the machine's costs not measured ({e})"),
    };
    log(&format!("machine: {machine}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let began = std::time::Instant::now();
    if args.curves {
        let curves = runtime.block_on(curves::run(&plan, args.quick, &args.curve, &args.charts));
        println!(
            "mesh-bench --curves: {} cores, {}; {machine}; Mosquitto, a `mesh gateway`, agents in `mesh-fleet` processes\n",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model(),
        );
        for (curve, chart) in &curves {
            println!("{}", curve.markdown(chart.as_deref()));
        }
        log(&format!(
            "the run took {:.0} s",
            began.elapsed().as_secs_f64()
        ));
        return;
    }
    let mut all = Vec::new();
    if args.only.is_none() {
        for &kind in brokers {
            all.push(runtime.block_on(suite::run(kind, &plan)));
        }
    }
    // The stores' rows go through one broker: Mosquitto (the latest table's) when it is run.
    let stores_broker = *brokers.last().unwrap_or(&BrokerKind::Mosquitto);
    let runs = |only: Only| args.only.is_none() || args.only == Some(only);
    let stores = runs(Only::Stores).then(|| runtime.block_on(stores::run(stores_broker, &plan)));
    let cluster = runs(Only::Cluster).then(|| runtime.block_on(cluster::run(&plan)));
    let tools = runs(Only::Tools).then(|| runtime.block_on(tools::run(&plan)));
    let up = runs(Only::Up).then(|| runtime.block_on(mesh_up::run(&plan)));
    let codec_costs = if args.only.is_none() {
        log("codecs");
        codecs::run(if args.quick {
            Duration::from_millis(100)
        } else {
            Duration::from_millis(500)
        })
    } else {
        Vec::new()
    };
    let header = format!(
        "mesh-bench: {} s per case, {} cores, {}; {machine}; HTTP load: wrk (a thread a core, at most one a connection); gRPC load: tonic (1 thread, a connection per caller); payload {} bytes",
        plan.case.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        mesh_bench::payload::PAYLOAD_LEN,
    );
    // The header goes before the first table printed.
    let mut header = Some(header.as_str());
    if args.only.is_none() {
        println!(
            "{}",
            report::render(&all, &codec_costs, header.take().unwrap_or(""))
        );
    }
    if let Some(stores) = &stores {
        println!(
            "{}",
            report::render_stores(stores, plan.stored_tasks, header.take())
        );
    }
    if let Some(cluster) = &cluster {
        println!("{}", report::render_cluster(cluster, header.take()));
    }
    if let Some(tools) = &tools {
        if let Some(header) = header.take() {
            println!("{header}\n");
        }
        println!("{}", tools::table(tools));
    }
    if let Some(up) = &up {
        if let Some(header) = header.take() {
            println!("{header}\n");
        }
        println!("{}", mesh_up::table(up));
    }
    log(&format!(
        "the run took {:.0} s",
        began.elapsed().as_secs_f64()
    ));
}

/// The CPU model from /proc/cpuinfo.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
