//! `mesh-fleet`: many agents of one kind in one process, for the cost curves (see
//! `mesh_bench::fleet`). Prints `ready <count>` once all of them are on the bus, then runs
//! until it is killed.

use clap::Parser;
use mesh_agent::BusConfig;
use mesh_bench::fleet::{self, Kind};

/// COUNT agents of KIND, named PREFIX (or PREFIX-0 … when more than one).
#[derive(Parser, Debug)]
#[command(name = "mesh-fleet")]
struct Args {
    #[arg(long, value_enum)]
    kind: Kind,
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    count: u64,
    /// The agents' name, or their names' stem when there are several [default: the kind].
    #[arg(long)]
    prefix: Option<String>,
    /// Tasks each agent runs at once.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_tasks: u64,
    #[arg(long)]
    broker_url: String,
    #[arg(long)]
    namespace: String,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    let args = Args::parse();
    let prefix = args
        .prefix
        .unwrap_or_else(|| format!("{:?}", args.kind).to_lowercase());
    let bus = match BusConfig::new(&args.broker_url) {
        Ok(bus) => bus,
        Err(e) => {
            eprintln!("mesh-fleet: --broker-url: {e}");
            std::process::exit(2);
        }
    };
    let count = args.count as usize;
    let running = match fleet::start(
        args.kind,
        &prefix,
        count,
        args.max_tasks as usize,
        &bus,
        &args.namespace,
    )
    .await
    {
        Ok(running) => running,
        Err(e) => {
            eprintln!("mesh-fleet: {e}");
            std::process::exit(1);
        }
    };
    println!("ready {}", running.len());
    std::future::pending::<()>().await;
}
