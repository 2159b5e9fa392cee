//! The one table: a Markdown table (readable in a terminal, pasted as is into
//! `docs/benchmarks.md`), one column per broker, each ratio taken against the raw MQTT
//! figure of the same broker in the same run (the concurrency-1 and concurrency-64 ones from
//! interleaved rounds, see [`crate::paired`]), each target marked met or MISSED.

use crate::cluster::ClusterSetup;
use crate::codecs::CodecCost;
use crate::e2e::LoadResult;
use crate::paired::PairedRates;
use crate::stores::{StoreFigures, StoreKind, StoresRun};
use crate::suite::{Figure, Figures};
use std::fmt::Write as _;
use std::time::Duration;

/// The Python a2a-sdk's figure at concurrency 32 (requests/s), from the baseline.
pub const PYTHON_SDK_PER_S: f64 = 400.0;
/// The MQTT keep-alive of the mesh's bus connections (mesh-core's `BusConfig` default).
pub const KEEP_ALIVE: Duration = Duration::from_secs(30);

/// The separate processes' targets: the concurrency-1 p50 over the raw QoS 1 round trip
/// (median of interleaved rounds), and concurrency 64 as a share of raw QoS 1 pipelined.
pub const C1_RATIO_TARGET: f64 = 1.5;
pub const C64_SHARE_TARGET: f64 = 75.0;

/// A figure as shown.
/// A duration as the tables print it.
pub fn dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1.0 {
        format!("{:.0} ns", d.as_secs_f64() * 1e9)
    } else if us < 10.0 {
        format!("{us:.2} µs")
    } else if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// A count or rate, rounded, with thousands separators.
pub fn rate(r: f64) -> String {
    let r = r.round() as u64;
    let s = r.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The concurrency-64 share against raw pipelined: the median of the interleaved rounds,
/// marked against `target` (percent), then every round's (smallest first).
pub fn share_cell(p: &PairedRates, target: f64) -> String {
    let share = p.median();
    let all: Vec<String> = p.sorted().iter().map(|s| format!("{s:.0}")).collect();
    format!(
        "{share:.0} %{} ({})",
        verdict(share >= target),
        all.join(", ")
    )
}

/// Whether a target was met, as a cell says it.
pub fn verdict(met: bool) -> &'static str {
    if met { " (met)" } else { " (MISSED)" }
}

/// One cell: the figure, or `—` with the reason kept for the notes.
fn cell<T>(f: &Figure<T>, notes: &mut Vec<String>, show: impl Fn(&T) -> String) -> String {
    match f {
        Ok(v) => show(v),
        Err(e) => {
            if !notes.contains(e) {
                notes.push(e.clone());
            }
            format!(
                "— (note {})",
                notes.iter().position(|n| n == e).unwrap_or(0) + 1
            )
        }
    }
}

/// Renders the table.
pub fn render(all: &[Figures], codecs: &[CodecCost], header: &str) -> String {
    let mut notes = Vec::new();
    let mut rows: Vec<(String, Vec<String>, String)> = Vec::new();
    let mut row =
        |name: &str, target: &str, f: &mut dyn FnMut(&Figures, &mut Vec<String>) -> String| {
            let cells = all.iter().map(|fig| f(fig, &mut notes)).collect();
            rows.push((name.to_string(), cells, target.to_string()));
        };

    row(
        "1. raw MQTT RTT, QoS 1, sequential: p50 / p99",
        "the limit",
        &mut |f, n| {
            cell(&f.raw, n, |r| {
                format!(
                    "{} / {}",
                    dur(r.qos1.rtt.percentile(50.0)),
                    dur(r.qos1.rtt.percentile(99.0))
                )
            })
        },
    );
    row(
        "1. raw MQTT RTT, QoS 0, sequential: p50 / p99",
        "reference",
        &mut |f, n| {
            cell(&f.raw, n, |r| {
                format!(
                    "{} / {}",
                    dur(r.qos0.rtt.percentile(50.0)),
                    dur(r.qos0.rtt.percentile(99.0))
                )
            })
        },
    );
    row(
        "1. raw MQTT pipelined (64 in flight), QoS 1: replies/s",
        "the limit",
        &mut |f, n| cell(&f.raw, n, |r| rate(r.qos1.pipelined_per_s)),
    );
    row(
        "1. raw MQTT pipelined (64 in flight), QoS 0: replies/s",
        "reference",
        &mut |f, n| cell(&f.raw, n, |r| rate(r.qos0.pipelined_per_s)),
    );
    row(
        "2. JSON-RPC message/send → echo, concurrency 1: p50 / p99",
        "",
        &mut |f, n| {
            cell(&f.c1, n, |r| {
                format!("{} / {}{}", dur(r.p50), dur(r.p99), errors(r.errors))
            })
        },
    );
    row(
        "2. … p50 / raw QoS 1 p50, median of interleaved rounds (smallest to largest)",
        "≤ 1.5×",
        &mut |f, n| {
            cell(&f.paired, n, |p| {
                let ratio = p.median();
                let all: Vec<String> = p.sorted().iter().map(|r| format!("{r:.2}")).collect();
                format!(
                    "{ratio:.2}×{} ({})",
                    verdict(ratio <= C1_RATIO_TARGET),
                    all.join(", ")
                )
            })
        },
    );
    row(
        "2. … p50 / raw QoS 1 p50 of row 1 (measured minutes apart)",
        "reference",
        &mut |f, n| {
            let pair = both(&f.c1, &f.raw);
            cell(&pair, n, |(c1, raw)| {
                let ratio = c1.p50.as_secs_f64() / raw.qos1.rtt.percentile(50.0).as_secs_f64();
                format!("{ratio:.2}×")
            })
        },
    );
    row(
        "2. HTTP+JSON message:send → echo, concurrency 1: p50 / p99",
        "",
        &mut |f, n| cell(&f.c1_rest, n, |r| latency_against(r, &f.c1)),
    );
    row(
        "2. gRPC SendMessage → echo, concurrency 1: p50 / p99",
        "",
        &mut |f, n| cell(&f.c1_grpc, n, |r| latency_against(r, &f.c1)),
    );
    row(
        "3. JSON-RPC message/send → echo, concurrency 64: requests/s",
        "≥ 20× Python SDK (≥ 8,000/s)",
        &mut |f, n| {
            cell(&f.c64, n, |r| {
                let x = r.per_s() / PYTHON_SDK_PER_S;
                format!(
                    "{} = {x:.0}× Python{}{}",
                    rate(r.per_s()),
                    verdict(x >= 20.0),
                    errors(r.errors)
                )
            })
        },
    );
    row("3. … p50 / p99", "", &mut |f, n| {
        cell(&f.c64, n, |r| format!("{} / {}", dur(r.p50), dur(r.p99)))
    });
    row(
        "3. … through a gateway with the durable SQLite store: requests/s",
        "the store's cost",
        &mut |f, n| {
            let pair = both(&f.c64_durable, &f.c64);
            cell(&pair, n, |(durable, memory)| {
                format!(
                    "{} ({:+.0} % against the memory store){}",
                    rate(durable.per_s()),
                    100.0 * (durable.per_s() / memory.per_s() - 1.0),
                    errors(durable.errors)
                )
            })
        },
    );
    row(
        "3. … / raw QoS 1 pipelined, median of interleaved rounds (smallest to largest)",
        "≥ 75 %",
        &mut |f, n| cell(&f.paired64, n, |p| share_cell(p, C64_SHARE_TARGET)),
    );
    row(
        "3. … / raw QoS 1 pipelined of row 1 (measured minutes apart)",
        "reference",
        &mut |f, n| {
            let pair = both(&f.c64, &f.raw);
            cell(&pair, n, |(c64, raw)| {
                let pct = 100.0 * c64.per_s() / raw.qos1.pipelined_per_s;
                format!("{pct:.0} %")
            })
        },
    );
    row(
        "3. HTTP+JSON message:send → echo, concurrency 64: requests/s; p50 / p99",
        "",
        &mut |f, n| cell(&f.c64_rest, n, |r| throughput_against(r, &f.c64)),
    );
    row(
        "3. gRPC SendMessage → echo, concurrency 64: requests/s; p50 / p99",
        "",
        &mut |f, n| cell(&f.c64_grpc, n, |r| throughput_against(r, &f.c64)),
    );
    row(
        "3. CPU per request at concurrency 64, gateway / load generator: JSON-RPC; HTTP+JSON; gRPC",
        "",
        &mut |f, n| {
            let all = [&f.c64, &f.c64_rest, &f.c64_grpc];
            let each: Vec<String> = all.iter().map(|r| cpu_per_request(r)).collect();
            cell(&f.c64, n, |_| each.join("; "))
        },
    );
    row("4. SSE, one stream: events/s", "", &mut |f, n| {
        cell(&f.sse, n, |s| {
            let cut = if s.complete {
                ""
            } else {
                " (cut at the time bound)"
            };
            format!(
                "{} ({} events for {} chunks){cut}",
                rate(s.per_s),
                rate(s.events as f64),
                rate(s.chunks as f64)
            )
        })
    });
    row(
        "4. SSE, one long stream through a gateway with the SQLite store: gateway CPU / wall",
        "CPU linear in the chunks",
        &mut |f, n| {
            cell(&f.sse_durable, n, |d| {
                let ended = match &d.sse.last_state {
                    Some((state, _)) if state == "completed" => String::new(),
                    Some((state, text)) => format!("; ended {state}: {text}"),
                    None => "; no final state".to_owned(),
                };
                format!(
                    "{:.2} s / {} ({} chunks, {} events{ended})",
                    d.gateway_cpu,
                    dur(d.wall),
                    rate(d.sse.chunks as f64),
                    rate(d.sse.events as f64)
                )
            })
        },
    );
    row("4. SSE: time to first event", "", &mut |f, n| {
        cell(&f.sse, n, |s| dur(s.first_event))
    });
    row("4. SSE: largest gap between events", "", &mut |f, n| {
        cell(&f.sse, n, |s| dur(s.largest_gap))
    });
    row(
        "5. discovery: agent start → listed at the gateway",
        "< 100 ms",
        &mut |f, n| {
            cell(&f.discovery, n, |d| {
                format!("{}{}", dur(*d), verdict(*d < Duration::from_millis(100)))
            })
        },
    );
    let offline_target = format!("≤ 1.5 × keep-alive ({} s)", KEEP_ALIVE.as_secs());
    row(
        "5. discovery: kill -9 of last instance → offline",
        &offline_target,
        &mut |f, n| {
            cell(&f.offline, n, |d| {
                format!(
                    "{}{}",
                    dur(*d),
                    verdict(d.as_secs_f64() <= 1.5 * KEEP_ALIVE.as_secs_f64())
                )
            })
        },
    );
    row("6. RSS: idle echo agent", "< 15 MB", &mut |f, n| {
        cell(&f.agent_idle, n, |r| {
            format!("{r}{}", verdict((r.kib * 1024) < 15_000_000))
        })
    });
    row("6. RSS: idle gateway", "", &mut |f, n| {
        cell(&f.gateway_idle, n, |r| r.to_string())
    });
    row(
        "6. RSS: gateway holding the stored tasks",
        "",
        &mut |f, n| {
            cell(&f.gateway_full, n, |(r, tasks)| {
                format!("{r} ({} tasks)", rate(*tasks as f64))
            })
        },
    );

    let mut out = String::new();
    let _ = writeln!(out, "{header}\n");
    let _ = write!(out, "| case | ");
    for f in all {
        let _ = write!(out, "{} | ", f.broker.label());
    }
    let _ = writeln!(out, "target |");
    let _ = write!(out, "| --- | ");
    for _ in all {
        let _ = write!(out, "--- | ");
    }
    let _ = writeln!(out, "--- |");
    for (name, cells, target) in &rows {
        let _ = writeln!(out, "| {name} | {} | {target} |", cells.join(" | "));
    }
    let span = |first: String| {
        let mut cells = vec![first];
        cells.resize(all.len().max(1), "″".to_string());
        cells.join(" | ")
    };
    for c in codecs {
        let cells = span(format!("{} per message", dur(c.per_message)));
        let _ = writeln!(
            out,
            "| 7. codec: {} | {cells} | no broker involved |",
            c.name
        );
    }
    let python = span("420/s, p50 2.2 ms at c=1; 400/s, p50 70 ms at c=32".into());
    let _ = writeln!(
        out,
        "| Python a2a-sdk 1.3 over HTTP, no broker (issue baseline, not run here) | {python} | reference |"
    );
    for (i, n) in notes.iter().enumerate() {
        let _ = writeln!(out, "\nnote {}: {n}", i + 1);
    }
    out
}

/// The stores' table: one column per store, each row measured the same way on each store's
/// gateway in this run; `header`, when given, goes first (a run of these rows only).
pub fn render_stores(run: &StoresRun, stored_tasks: u64, header: Option<&str>) -> String {
    let mut notes = Vec::new();
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, f: &mut dyn FnMut(&StoreFigures, &mut Vec<String>) -> String| {
        let cells = run.stores.iter().map(|s| f(s, &mut notes)).collect();
        rows.push((name.to_string(), cells));
    };
    let memory = run.stores.iter().find(|s| s.kind == StoreKind::Memory);
    row(
        "S1. JSON-RPC message/send → echo, concurrency 64: requests/s; p50 / p99",
        &mut |s, n| {
            cell(&s.c64, n, |r| match memory.map(|m| &m.c64) {
                Some(m) if s.kind != StoreKind::Memory => throughput_against_store(r, m),
                _ => format!(
                    "{}; {} / {}{}",
                    rate(r.per_s()),
                    dur(r.p50),
                    dur(r.p99),
                    errors(r.errors)
                ),
            })
        },
    );
    row(
        "S1. … gateway CPU / load generator CPU per request",
        &mut |s, n| cell(&s.c64, n, |_| cpu_per_request(&s.c64)),
    );
    row(
        "S2. tasks/resubscribe replaying the events after the first of a finished 1,000-chunk stream: request → last event",
        &mut |s, n| {
            cell(&s.replay, n, |r| {
                let extra = if r.without_id > 0 {
                    format!(", {} without id", r.without_id)
                } else {
                    String::new()
                };
                let rounds: Vec<String> = r.elapsed.iter().map(|d| dur(*d)).collect();
                format!(
                    "{} (median of {}: {}; first event {}; {} events after id {}, each once and in order{extra})",
                    dur(r.median()),
                    rounds.len(),
                    rounds.join(", "),
                    dur(r.first_event),
                    rate(r.events as f64),
                    r.after
                )
            })
        },
    );
    let rss_name = format!(
        "S3. RSS of the gateway: ready → after {} message/send in all",
        rate(stored_tasks as f64)
    );
    row(&rss_name, &mut |s, n| {
        let pair = both(&s.idle, &s.full);
        cell(&pair, n, |(idle, (full, sent))| {
            format!("{idle} → {full} ({} tasks)", rate(*sent as f64))
        })
    });

    row(
        "S4. an event's delay to a subscriber on a second gateway (a 200-chunk stream, one chunk every 10 ms): median / p99 / max",
        &mut |s, n| {
            cell(&s.follow, n, |f| {
                format!(
                    "{} / {} / {} ({} events)",
                    dur(f.at(0.5)),
                    dur(f.at(0.99)),
                    dur(f.at(1.0)),
                    f.delays.len()
                )
            })
        },
    );
    row(
        "S5. RSS of a gateway restarted on that full store, once ready",
        &mut |s, n| cell(&s.restarted, n, |rss| rss.to_string()),
    );

    let mut out = String::new();
    if let Some(header) = header {
        let _ = writeln!(out, "{header}\n");
    }
    let _ = writeln!(
        out,
        "Task stores, a gateway each, through the {} broker:\n",
        run.broker.label()
    );
    let labels: Vec<&str> = run.stores.iter().map(|s| s.kind.label()).collect();
    let _ = writeln!(out, "| case | {} |", labels.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(labels.len() + 1));
    for (name, cells) in &rows {
        // Its own notes, apart from the main table's.
        let cells = cells.join(" | ").replace("(note ", "(stores note ");
        let _ = writeln!(out, "| {name} | {cells} |");
    }
    for (i, n) in notes.iter().enumerate() {
        let _ = writeln!(out, "\nstores note {}: {n}", i + 1);
    }
    out
}

/// A store's requests/s and latencies at concurrency 64, against the memory store's.
fn throughput_against_store(r: &LoadResult, memory: &Figure<LoadResult>) -> String {
    let against = match memory {
        Ok(m) if m.per_s() > 0.0 => format!(
            " ({:+.0} % against memory)",
            100.0 * (r.per_s() / m.per_s() - 1.0)
        ),
        _ => String::new(),
    };
    format!(
        "{}{against}; {} / {}{}",
        rate(r.per_s()),
        dur(r.p50),
        dur(r.p99),
        errors(r.errors)
    )
}

/// Another binding's latencies at concurrency 1, its p50 against JSON-RPC's of the same run.
fn latency_against(r: &LoadResult, jsonrpc: &Figure<LoadResult>) -> String {
    let against = match jsonrpc {
        Ok(j) if !j.p50.is_zero() => format!(
            " (p50 {:+.0} % against JSON-RPC)",
            100.0 * (r.p50.as_secs_f64() / j.p50.as_secs_f64() - 1.0)
        ),
        _ => String::new(),
    };
    format!(
        "{} / {}{against}{}",
        dur(r.p50),
        dur(r.p99),
        errors(r.errors)
    )
}

/// Another binding's requests/s and latencies at concurrency 64, its requests/s against
/// JSON-RPC's of the same run.
fn throughput_against(r: &LoadResult, jsonrpc: &Figure<LoadResult>) -> String {
    let against = match jsonrpc {
        Ok(j) if j.per_s() > 0.0 => format!(
            " ({:+.0} % against JSON-RPC)",
            100.0 * (r.per_s() / j.per_s() - 1.0)
        ),
        _ => String::new(),
    };
    format!(
        "{}{against}; {} / {}{}",
        rate(r.per_s()),
        dur(r.p50),
        dur(r.p99),
        errors(r.errors)
    )
}

/// A run's CPU time per answer, the gateway's and the load generator's.
fn cpu_per_request(r: &Figure<LoadResult>) -> String {
    match r {
        Ok(LoadResult {
            responses,
            cpu: Some(cpu),
            ..
        }) if *responses > 0 => {
            let per = |s: f64| dur(Duration::from_secs_f64(s.max(0.0) / *responses as f64));
            format!("{} / {}", per(cpu.gateway), per(cpu.load))
        }
        _ => "—".into(),
    }
}

/// The cluster's table: one row per setup, each load against the one node's.
pub fn render_cluster(setups: &[ClusterSetup], header: Option<&str>) -> String {
    let mut notes = Vec::new();
    let one = setups.first();
    let against = |r: &LoadResult,
                   base: Option<&Figure<LoadResult>>,
                   what: fn(&LoadResult) -> f64| {
        match base {
            Some(Ok(b)) if what(b) > 0.0 && !std::ptr::eq(r, b) => {
                format!(" ({:+.0} %)", 100.0 * (what(r) / what(b) - 1.0))
            }
            _ => String::new(),
        }
    };
    let mut out = String::new();
    if let Some(header) = header {
        let _ = writeln!(out, "{header}\n");
    }
    let _ = writeln!(
        out,
        "A cluster of brokers: JSON-RPC message/send → echo (in % against one node):\n"
    );
    let _ = writeln!(
        out,
        "| setup | concurrency 1: p50 / p99 | concurrency 64: requests/s; p50 / p99 | CPU per request at 64: broker nodes / gateway + agent |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- |");
    for s in setups {
        let c1 = cell(&s.c1, &mut notes, |r| {
            format!(
                "{}{} / {}{}",
                dur(r.p50),
                against(r, one.map(|o| &o.c1), |r| r.p50.as_secs_f64()),
                dur(r.p99),
                errors(r.errors)
            )
        });
        let c64 = cell(&s.c64, &mut notes, |r| {
            format!(
                "{}{}; {} / {}{}",
                rate(r.per_s()),
                against(r, one.map(|o| &o.c64), LoadResult::per_s),
                dur(r.p50),
                dur(r.p99),
                errors(r.errors)
            )
        });
        let c1 = c1.replace("(note ", "(cluster note ");
        let c64 = c64.replace("(note ", "(cluster note ");
        let cpu = s.cpu_per_request.map_or_else(
            || "—".to_owned(),
            |(brokers, mesh)| {
                format!(
                    "{} / {}",
                    dur(Duration::from_secs_f64(brokers)),
                    dur(Duration::from_secs_f64(mesh))
                )
            },
        );
        let _ = writeln!(out, "| {} | {c1} | {c64} | {cpu} |", s.label);
    }
    for (i, n) in notes.iter().enumerate() {
        let _ = writeln!(out, "\ncluster note {}: {n}", i + 1);
    }
    out
}

fn errors(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} errors)")
    }
}

fn both<'a, A, B>(a: &'a Figure<A>, b: &'a Figure<B>) -> Figure<(&'a A, &'a B)> {
    match (a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(e), _) | (_, Err(e)) => Err(e.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_formatted() {
        assert_eq!(rate(1234567.4), "1,234,567");
        assert_eq!(rate(999.0), "999");
        assert_eq!(dur(Duration::from_micros(90)), "90 µs");
        assert_eq!(dur(Duration::from_micros(2200)), "2.20 ms");
        assert_eq!(dur(Duration::from_nanos(450)), "450 ns");
    }

    fn load(responses: u64, errors: u64, p50_us: u64, p99_us: u64) -> LoadResult {
        LoadResult {
            responses,
            errors,
            elapsed: Duration::from_secs(1),
            p50: Duration::from_micros(p50_us),
            p99: Duration::from_micros(p99_us),
            cpu: None,
        }
    }

    #[test]
    fn cpu_is_per_answer() {
        let mut r = load(20_000, 0, 4000, 8000);
        r.cpu = Some(crate::e2e::CaseCpu {
            gateway: 1.0,
            load: 0.4,
        });
        assert_eq!(cpu_per_request(&Ok(r)), "50 µs / 20 µs");
        assert_eq!(cpu_per_request(&Ok(load(1, 0, 1, 1))), "—");
        assert_eq!(cpu_per_request(&Err("no wrk".into())), "—");
    }

    #[test]
    fn other_bindings_are_compared_with_json_rpc_of_the_same_run() {
        let jsonrpc = Ok(load(10_000, 0, 200, 1000));
        assert_eq!(
            latency_against(&load(4000, 0, 250, 900), &jsonrpc),
            "250 µs / 900 µs (p50 +25 % against JSON-RPC)"
        );
        assert_eq!(
            throughput_against(&load(9000, 3, 4000, 8000), &jsonrpc),
            "9,000 (-10 % against JSON-RPC); 4.00 ms / 8.00 ms (3 errors)"
        );
        let missing: Figure<LoadResult> = Err("wrk is not installed".into());
        assert_eq!(
            throughput_against(&load(9000, 0, 4000, 8000), &missing),
            "9,000; 4.00 ms / 8.00 ms"
        );
        assert_eq!(
            latency_against(&load(9000, 0, 180, 400), &missing),
            "180 µs / 400 µs"
        );
    }

    #[test]
    fn the_stores_table_has_a_column_per_store_and_its_own_notes() {
        use crate::memory::Rss;
        use crate::procs::BrokerKind;
        use crate::resume::Replay;
        let store = |kind, per_s: u64| StoreFigures {
            kind,
            c64: Ok(load(per_s, 0, 3000, 6000)),
            replay: Ok(Replay {
                after: 1,
                events: 1003,
                without_id: 0,
                elapsed: vec![
                    Duration::from_millis(11),
                    Duration::from_millis(12),
                    Duration::from_millis(15),
                ],
                first_event: Duration::from_millis(2),
            }),
            idle: Ok(Rss { kib: 10 * 1024 }),
            full: Ok((Rss { kib: 200 * 1024 }, 100_000)),
            restarted: Ok(Rss { kib: 20 * 1024 }),
            follow: Err("one gateway".into()),
        };
        let mut postgres = store(StoreKind::Postgres, 5_000);
        postgres.replay = Err("no database".into());
        let run = StoresRun {
            broker: BrokerKind::Mosquitto,
            stores: vec![
                store(StoreKind::Memory, 10_000),
                store(StoreKind::Sqlite, 8_000),
                postgres,
            ],
        };
        let table = render_stores(&run, 100_000, None);
        assert!(
            table.contains("| case | memory | SQLite | PostgreSQL |"),
            "{table}"
        );
        assert!(table.contains("8,000 (-20 % against memory); 3.00 ms / 6.00 ms"));
        assert!(table.contains(
            "12.00 ms (median of 3: 11.00 ms, 12.00 ms, 15.00 ms; first event 2.00 ms; 1,003 events after id 1"
        ));
        assert!(table.contains("| --- | --- | --- | --- |"));
        assert!(table.contains("10.0 MiB → 200.0 MiB (100,000 tasks)"));
        assert!(table.contains("— (stores note 1)"));
        assert!(table.contains("stores note 1: no database"));
    }
}
