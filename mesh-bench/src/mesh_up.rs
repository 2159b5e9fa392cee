//! The configuration a user meets first: `mesh up`, the embedded broker, the gateway and the
//! example agents in one process (the README's first command), measured as the separate
//! processes are, in the same run: raw MQTT through its own embedded broker (the limit),
//! JSON-RPC `message/send` to its echo agent at concurrency 1, the interleaved rounds the
//! concurrency-1 ratio is taken from, and concurrency 64.

use std::time::Duration;

use crate::e2e::{self, Load, LoadResult};
use crate::paired::{self, Paired, PairedRates};
use crate::procs::{Proc, free_port, wait_for_port};
use crate::raw_mqtt::{self, RawResult};
use crate::report::{dur, rate, share_cell, verdict};
use crate::suite::{Figure, Plan};
use crate::{discovery, log};

/// What the `mesh up` rows measured.
#[derive(Debug, Clone)]
pub struct UpFigures {
    pub raw: Figure<RawResult>,
    pub c1: Figure<LoadResult>,
    pub paired: Figure<Paired>,
    pub c64: Figure<LoadResult>,
    /// Concurrency 64 and raw pipelined through its broker, in interleaved rounds.
    pub paired64: Figure<PairedRates>,
}

impl UpFigures {
    fn failed(why: String) -> UpFigures {
        UpFigures {
            raw: Err(why.clone()),
            c1: Err(why.clone()),
            paired: Err(why.clone()),
            c64: Err(why.clone()),
            paired64: Err(why),
        }
    }
}

/// The targets of `mesh up` (the concurrency-1 ratio is the separate processes' one).
pub const C1_RATIO_TARGET: f64 = crate::report::C1_RATIO_TARGET;
pub const C64_SHARE_TARGET: f64 = 60.0;

/// Starts `mesh up` on free ports and runs its rows.
pub async fn run(plan: &Plan) -> UpFigures {
    let Some(wrk) = plan.wrk.as_deref() else {
        return UpFigures::failed(e2e::WRK_MISSING.to_string());
    };
    let ports = free_port().and_then(|broker| Ok((broker, free_port()?)));
    let (broker_port, http_port) = match ports {
        Ok(ports) => ports,
        Err(e) => return UpFigures::failed(e.to_string()),
    };
    let data_dir = plan.dir.join("data-up");
    let args = [
        "up".to_owned(),
        format!("--broker-addr=127.0.0.1:{broker_port}"),
        format!("--http-addr=127.0.0.1:{http_port}"),
        format!("--data-dir={}", data_dir.display()),
        "--memory-store".to_owned(),
    ];
    let mut up = match Proc::spawn(&plan.dir, "mesh-up", &plan.mesh, &args) {
        Ok(up) => up,
        Err(e) => return UpFigures::failed(format!("cannot start mesh up: {e}")),
    };
    let broker = std::net::SocketAddr::from(([127, 0, 0, 1], broker_port));
    if let Err(e) = wait_for_port(broker, Duration::from_secs(15), &mut up) {
        return UpFigures::failed(e);
    }
    let http = match reqwest::Client::builder().no_proxy().build() {
        Ok(http) => http,
        Err(e) => return UpFigures::failed(e.to_string()),
    };
    let base = format!("http://127.0.0.1:{http_port}");
    if discovery::wait_listed(&http, &base, "echo", true, Duration::from_secs(15))
        .await
        .is_none()
    {
        return UpFigures::failed("mesh up's echo agent was not listed within 15 s".into());
    }
    log("[mesh up] raw MQTT through its embedded broker");
    let raw = raw_mqtt::run(broker_port, plan.case).await;
    let load = Load::jsonrpc("echo");
    // Every answer counts, so that the request ids of the wrk runs never repeat.
    let mut sent = 0u64;
    log("[mesh up] JSON-RPC message/send, concurrency 1");
    let c1 = e2e::run(wrk, &plan.dir, &base, &load, 1, plan.case, None, sent);
    sent += c1.as_ref().map_or(0, |r| r.responses);
    log(&format!(
        "[mesh up] concurrency 1 against raw MQTT QoS 1, {} interleaved rounds",
        paired::ROUNDS
    ));
    let setup = plan.rounds_against(wrk, broker_port, &base);
    let paired = paired::run(&setup, &mut sent).await;
    log("[mesh up] JSON-RPC message/send, concurrency 64");
    let c64 = e2e::run(wrk, &plan.dir, &base, &load, 64, plan.case, None, sent);
    sent += c64.as_ref().map_or(0, |r| r.responses);
    log(&format!(
        "[mesh up] concurrency 64 against raw MQTT QoS 1 pipelined, {} interleaved rounds",
        paired::RATE_ROUNDS
    ));
    let paired64 = paired::run_pipelined(&setup, &mut sent).await;
    drop(up);
    UpFigures {
        raw,
        c1,
        paired,
        c64,
        paired64,
    }
}

/// The rows as a Markdown table.
pub fn table(up: &UpFigures) -> String {
    let cell = |f: Result<String, &String>| f.unwrap_or_else(|e| format!("not measured: {e}"));
    let mut out = String::from(
        "| `mesh up` (broker, gateway and agents in one process) | figure | target |\n| --- | --- | --- |\n",
    );
    out.push_str(&format!(
        "| raw MQTT RTT through its embedded broker, QoS 1, sequential: p50 / p99 | {} | the limit |\n",
        cell(up.raw.as_ref().map(|r| format!(
            "{} / {}",
            dur(r.qos1.rtt.percentile(50.0)),
            dur(r.qos1.rtt.percentile(99.0))
        )))
    ));
    out.push_str(&format!(
        "| raw MQTT pipelined (64 in flight), QoS 1: replies/s | {} | the limit |\n",
        cell(up.raw.as_ref().map(|r| rate(r.qos1.pipelined_per_s)))
    ));
    out.push_str(&format!(
        "| JSON-RPC message/send → echo, concurrency 1: p50 / p99 | {} | |\n",
        cell(
            up.c1
                .as_ref()
                .map(|r| format!("{} / {}", dur(r.p50), dur(r.p99)))
        )
    ));
    out.push_str(&format!(
        "| … p50 / raw QoS 1 p50, median of interleaved rounds (smallest to largest) | {} | ≤ {C1_RATIO_TARGET}× |\n",
        cell(up.paired.as_ref().map(|p| {
            let ratio = p.median();
            let all: Vec<String> = p.sorted().iter().map(|r| format!("{r:.2}")).collect();
            format!("{ratio:.2}×{} ({})", verdict(ratio <= C1_RATIO_TARGET), all.join(", "))
        }))
    ));
    out.push_str(&format!(
        "| JSON-RPC message/send → echo, concurrency 64: requests/s; p50 / p99 | {} | |\n",
        cell(up.c64.as_ref().map(|r| format!(
            "{}; {} / {}",
            rate(r.per_s()),
            dur(r.p50),
            dur(r.p99)
        )))
    ));
    out.push_str(&format!(
        "| … / raw QoS 1 pipelined through its broker, median of interleaved rounds (smallest to largest) | {} | ≥ {C64_SHARE_TARGET:.0} % |\n",
        cell(up.paired64.as_ref().map(|p| share_cell(p, C64_SHARE_TARGET)))
    ));
    let share = match (&up.c64, &up.raw) {
        (Ok(c64), Ok(raw)) => {
            format!("{:.0} %", 100.0 * c64.per_s() / raw.qos1.pipelined_per_s)
        }
        (Err(e), _) | (_, Err(e)) => format!("not measured: {e}"),
    };
    out.push_str(&format!(
        "| … / raw QoS 1 pipelined through its broker of the first row (measured minutes apart) | {share} | reference |\n"
    ));
    out
}
