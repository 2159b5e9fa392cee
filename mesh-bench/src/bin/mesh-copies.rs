//! `mesh-copies`: counts the copies of a payload on its way through the gateway and the echo
//! agent (see `mesh_bench::copies`) and prints them as a Markdown table; `--where` also lists
//! where each copy of one request is made.

use clap::Parser;
use mesh_bench::copies::{self, CountingAllocator, Part, Tally};
use mesh_bench::procs::{BrokerKind, BrokerProc};
use mesh_core::bus::BusConfig;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::oneshot;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Counts the copies of payloads of each --bytes size, as text and as file bytes.
#[derive(Parser, Debug)]
#[command(name = "mesh-copies")]
struct Args {
    /// The broker (default: a Mosquitto of its own on a free port).
    #[arg(long)]
    broker_url: Option<String>,
    /// Payload sizes in bytes (a text's characters, a file's bytes before base64).
    #[arg(long = "bytes", default_values_t = [262_144u64, 1_048_576], value_parser = clap::value_parser!(u64).range(4096..=4_000_000))]
    sizes: Vec<u64>,
    /// Requests counted per size and shape.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
    requests: u64,
    /// Also list where the copies of one request (of the first size) are made.
    #[arg(long = "where")]
    trace: bool,
}

#[derive(Clone, Copy)]
enum Shape {
    Text,
    File,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    if let Err(e) = run(args).await {
        eprintln!("mesh-copies: {e}");
        std::process::exit(1);
    }
    // The parts' threads are not shut down: the process ends with them.
    std::process::exit(0);
}

async fn run(args: Args) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("mesh-copies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let broker = match &args.broker_url {
        Some(_) => None,
        None => Some(BrokerProc::start(
            BrokerKind::Mosquitto,
            &dir,
            std::path::Path::new("mesh"),
        )?),
    };
    let url = match (&args.broker_url, &broker) {
        (Some(url), _) => url.clone(),
        (None, Some(broker)) => broker.url(),
        (None, None) => unreachable!("a broker was started"),
    };
    let namespace = format!("copies-{}", uuid::Uuid::new_v4().simple());
    let (gateway_tx, gateway_rx) = oneshot::channel();
    let config = mesh_gateway::GatewayConfig {
        listen: "127.0.0.1:0".parse().expect("an address"),
        namespace: namespace.clone(),
        default_agent: Some("echo".into()),
        ..mesh_gateway::GatewayConfig::default()
    };
    let bus = BusConfig::new(&url).map_err(|e| e.to_string())?;
    on_own_thread(Part::Gateway, move || async move {
        match mesh_gateway::Gateway::connect(config, bus).await {
            Ok(gateway) => {
                let _ = gateway_tx.send(Ok(gateway.url().to_owned()));
                std::future::pending::<()>().await;
            }
            Err(e) => {
                let _ = gateway_tx.send(Err(format!("the gateway did not start: {e}")));
            }
        }
    });
    let base = gateway_rx
        .await
        .map_err(|_| "the gateway's thread ended")??;
    let (agent_tx, agent_rx) = oneshot::channel();
    let bus = BusConfig::new(&url).map_err(|e| e.to_string())?;
    let agent_config = mesh_agent::AgentConfig {
        namespace: namespace.clone(),
        ..mesh_agent::AgentConfig::default()
    };
    on_own_thread(Part::Agent, move || async move {
        let echo = mesh_example_agents::by_name("echo").expect("the echo agent");
        match echo.config(agent_config).start(bus).await {
            Ok(_agent) => {
                let _ = agent_tx.send(Ok(()));
                std::future::pending::<()>().await;
            }
            Err(e) => {
                let _ = agent_tx.send(Err(format!("the echo agent did not start: {e}")));
            }
        }
    });
    agent_rx.await.map_err(|_| "the agent's thread ended")??;
    let http = reqwest::Client::new();
    wait_listed(&http, &base).await?;

    println!(
        "Copies of a payload per `message/send` to echo (JSON-RPC 0.3, memory store): \
         allocations of at least the payload's size, per request"
    );
    println!();
    println!(
        "| payload | shape | gateway: copies | agent: copies | gateway: bytes allocated | agent: bytes allocated |"
    );
    println!("| ---: | --- | ---: | ---: | ---: | ---: |");
    for &size in &args.sizes {
        for shape in [Shape::Text, Shape::File] {
            let body = request(shape, size);
            send(&http, &base, &body).await?;
            let (sent, tally) = copies::count(size as usize, false, async {
                for _ in 0..args.requests {
                    send(&http, &base, &body).await?;
                }
                Ok::<_, String>(())
            })
            .await;
            sent?;
            let per = |t: &Tally| {
                (
                    t.allocations as f64 / args.requests as f64,
                    t.bytes as f64 / args.requests as f64 / size as f64,
                )
            };
            let (gateway, agent) = (per(&tally[0]), per(&tally[1]));
            println!(
                "| {size} | {} | {:.1} | {:.1} | {:.1}× the payload | {:.1}× the payload |",
                label(shape),
                gateway.0,
                agent.0,
                gateway.1,
                agent.1
            );
        }
    }
    if args.trace {
        let size = args.sizes[0];
        for shape in [Shape::Text, Shape::File] {
            let body = request(shape, size);
            let (sent, _) = copies::count(size as usize, true, send(&http, &base, &body)).await;
            sent?;
            println!();
            println!(
                "Where the copies of one {size}-byte {} request are made:",
                label(shape)
            );
            println!();
            for (part, bytes, frames) in copies::take_traces() {
                println!("- {} ({bytes} bytes):", part.label());
                for frame in frames {
                    println!("  - {frame}");
                }
            }
        }
    }
    Ok(())
}

fn label(shape: Shape) -> &'static str {
    match shape {
        Shape::Text => "text",
        Shape::File => "file",
    }
}

/// A 0.3 `message/send` of one part of `size` bytes.
fn request(shape: Shape, size: u64) -> Vec<u8> {
    let part = match shape {
        Shape::Text => json!({"kind": "text", "text": "x".repeat(size as usize)}),
        // "abc" is "YWJj" in base64: the bytes need no encoder.
        Shape::File => json!({"kind": "file", "file": {"name": "blob.bin",
            "mimeType": "application/octet-stream",
            "bytes": "YWJj".repeat(size.div_ceil(3) as usize)}}),
    };
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
        "message": {"kind": "message", "role": "user", "messageId": uuid::Uuid::new_v4().to_string(),
                    "parts": [part]}}});
    body.to_string().into_bytes()
}

/// Sends one request and checks that the task completed.
async fn send(http: &reqwest::Client, base: &str, body: &[u8]) -> Result<(), String> {
    let answer = http
        .post(format!("{base}/agents/echo"))
        .header("content-type", "application/json")
        .body(body.to_vec())
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .bytes()
        .await
        .map_err(|e| e.to_string())?;
    let answer: Value = serde_json::from_slice(&answer).map_err(|e| e.to_string())?;
    match answer
        .pointer("/result/status/state")
        .and_then(Value::as_str)
    {
        Some("completed") => Ok(()),
        _ => Err(format!(
            "not completed: {}",
            answer.to_string().chars().take(200).collect::<String>()
        )),
    }
}

/// Waits until the gateway lists echo.
async fn wait_listed(http: &reqwest::Client, base: &str) -> Result<(), String> {
    for _ in 0..500 {
        if let Ok(answer) = http.get(format!("{base}/agents")).send().await
            && let Ok(text) = answer.text().await
            && text.contains("\"echo\"")
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("the gateway did not list echo within 5 s".into())
}

/// Runs `work` on a new thread with a current-thread runtime whose threads count for `part`.
fn on_own_thread<F: std::future::Future<Output = ()>>(
    part: Part,
    work: impl FnOnce() -> F + Send + 'static,
) {
    std::thread::spawn(move || {
        copies::set_part(part);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_start(move || copies::set_part(part))
            .build()
            .expect("a runtime");
        runtime.block_on(work());
    });
}
