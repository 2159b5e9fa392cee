//! `mesh-chaos`: the chaos run's client (see `mesh_bench::chaos`). Prints the counts, and
//! exits 1 when a request hung, a task or a stream chunk was lost, or a chunk came twice.

use clap::Parser;
use mesh_bench::chaos::{Plan, run};
use std::time::Duration;

/// A steady load through URL while the --kill commands run at their times; then the counts.
#[derive(Parser, Debug)]
#[command(name = "mesh-chaos")]
struct Args {
    /// Where the requests go (the load balancer in front of the gateways).
    #[arg(long)]
    url: String,
    /// Seconds of load.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// `message/send` requests started per second (1 to 1000).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rate: u32,
    /// Streams kept open at once (at most 100).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=100))]
    streams: u64,
    /// Chunks per stream (1 to 1000), one every --pace milliseconds.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1000))]
    chunks: u64,
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pace: u64,
    /// Seconds a client waits for an answer before the request counts as hung.
    #[arg(long, default_value_t = 30)]
    deadline: u64,
    /// SECONDS=COMMAND: run COMMAND (with sh -c) that many seconds into the load; repeatable.
    #[arg(long = "kill", value_name = "SECONDS=COMMAND")]
    kills: Vec<String>,
}

#[tokio::main]
async fn main() {
    mesh_core::tls::install_crypto_provider();
    let args = Args::parse();
    let mut kills = Vec::new();
    for kill in &args.kills {
        let Some((at, command)) = kill.split_once('=') else {
            eprintln!("mesh-chaos: --kill {kill:?}: expected SECONDS=COMMAND");
            std::process::exit(2);
        };
        let Ok(at) = at.trim().parse::<u64>() else {
            eprintln!("mesh-chaos: --kill {kill:?}: {at:?} is not a number of seconds");
            std::process::exit(2);
        };
        kills.push((Duration::from_secs(at), command.to_owned()));
    }
    kills.sort_by_key(|(at, _)| *at);
    let plan = Plan {
        url: args.url.trim_end_matches('/').to_owned(),
        duration: Duration::from_secs(args.seconds),
        rate: args.rate,
        streams: args.streams as usize,
        chunks: args.chunks as usize,
        pace_ms: args.pace,
        deadline: Duration::from_secs(args.deadline.max(1)),
        kills,
    };
    let report = run(&plan).await;
    for line in report.lines() {
        println!("{line}");
    }
    if report.passed() {
        println!("chaos run passed: nothing hung, nothing lost, nothing duplicated");
    } else {
        println!("chaos run FAILED");
        if !report.tasks_lost.is_empty() {
            println!("lost tasks: {:?}", report.tasks_lost);
        }
        std::process::exit(1);
    }
}
