//! End to end: an HTTP `SendMessage` through gateway → bus → echo agent → bus → gateway,
//! driven by wrk (a real load generator, not this process; a thread a core) with a Lua
//! script that POSTs the payload with a fresh `messageId` per request, and counts as an error
//! any answer that is not HTTP 200 with a completed task. The script is generated for a
//! [`Load`]: JSON-RPC `message/send` (the 306-byte payload, with a fresh JSON-RPC id too) or
//! the HTTP+JSON binding's `message:send` (the same text in a 1.0 `SendMessageRequest`). The
//! percentiles come from wrk's own histogram, printed by the script's `done` hook in
//! microseconds. (gRPC, which wrk cannot speak, is [`crate::grpc_load`]'s, with the same
//! [`LoadResult`].)

use crate::payload;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// What one load run measured (wrk's, or the gRPC load's).
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Answers received (HTTP responses, gRPC calls answered).
    pub responses: u64,
    /// Answers that were not a completed task (or not HTTP 200), plus socket errors and
    /// time-outs.
    pub errors: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Latency percentiles (p50, p99).
    pub p50: Duration,
    pub p99: Duration,
    /// The CPU time the run took, when measured (the suite does at concurrency 64).
    pub cpu: Option<CaseCpu>,
}

/// CPU time spent during a run, user plus system, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CaseCpu {
    /// The gateway's.
    pub gateway: f64,
    /// The load generator's (wrk, or the gRPC load's thread).
    pub load: f64,
}

impl LoadResult {
    /// Answers per second.
    pub fn per_s(&self) -> f64 {
        self.responses as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Where wrk is, if installed.
pub fn wrk_binary() -> Option<PathBuf> {
    crate::procs::find_on_path("wrk")
}

/// What to say when wrk is missing.
pub const WRK_MISSING: &str = "wrk is not installed: `sudo apt-get install -y wrk` (scripts/bench does it); the HTTP rows are skipped";

/// What a wrk run sends, and what it takes for a completed answer.
#[derive(Debug, Clone)]
pub struct Load {
    /// A short name for the script's file (`jsonrpc`, `rest`).
    pub name: &'static str,
    /// The path every request is POSTed to.
    pub path: String,
    /// The body as a Lua `string.format` template: each `%010d` takes the request's number,
    /// and it has no other `%`.
    pub template: String,
    /// The request's `Content-Type`.
    pub content_type: &'static str,
    /// Further request headers.
    pub headers: Vec<(&'static str, &'static str)>,
    /// What the body of every completed answer contains.
    pub completed: &'static str,
}

impl Load {
    /// JSON-RPC `message/send` (A2A 0.3, the 306-byte payload) to `/agents/{agent}`.
    pub fn jsonrpc(agent: &str) -> Load {
        Load {
            name: "jsonrpc",
            path: format!("/agents/{agent}"),
            template: payload::send_lua_template(),
            content_type: "application/json",
            headers: Vec::new(),
            completed: "\"completed\"",
        }
    }

    /// The HTTP+JSON binding's `SendMessage` (A2A 1.0, the same text) to
    /// `/agents/{agent}/message:send`.
    pub fn rest(agent: &str) -> Load {
        Load {
            name: "rest",
            path: format!("/agents/{agent}/message:send"),
            template: payload::rest_send_lua_template(),
            content_type: "application/a2a+json",
            headers: vec![("A2A-Version", "1.0")],
            completed: "\"TASK_STATE_COMPLETED\"",
        }
    }
}

/// Runs wrk with `load` against the gateway at `base` (`http://host:port`) with
/// `connections` connections on [`threads`] threads for at most `duration`, or on one
/// thread until `limit` answers when given (it then stops and interrupts wrk, which
/// otherwise sleeps the whole `duration`; a few answers in flight may still count: a thread
/// cannot see another's count, so a run to a count has one). Request numbers start after
/// `first`, so ids stay unique across runs (each thread numbers in a lane of its own, a
/// billion apart).
/// It waits for wrk in place: called from the bench's multi-thread runtime, whose other
/// worker goes on meanwhile.
#[allow(clippy::too_many_arguments)]
pub fn run(
    wrk: &Path,
    dir: &Path,
    base: &str,
    load: &Load,
    connections: usize,
    duration: Duration,
    limit: Option<u64>,
    first: u64,
) -> Result<LoadResult, String> {
    let threads = if limit.is_some() {
        1
    } else {
        threads(connections)
    };
    let script = dir.join(format!("send-{}-{first}.lua", load.name));
    std::fs::write(&script, lua_script(load, first, limit.unwrap_or(0)))
        .map_err(|e| e.to_string())?;
    let url = format!("{base}{}", load.path);
    let secs = duration.as_secs().max(1);
    let mut command = Command::new(wrk);
    command
        .args([
            format!("-t{threads}"),
            format!("-c{connections}"),
            format!("-d{secs}s"),
            "--timeout=10s".to_string(),
            "-s".to_string(),
            script.display().to_string(),
            url,
        ])
        .stdin(Stdio::null());
    let output = tokio::task::block_in_place(|| command.output())
        .map_err(|e| format!("cannot run wrk: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "wrk failed ({}): {stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    parse(&stdout)
}

/// wrk's threads for `connections` connections: one a core, as wrk advises, and no more
/// than the connections. A single thread caps the rate on its own: while the scheduler
/// runs the processes under test on its core, no connection of the run sends, and the
/// gateway's queue runs dry (on a 2-core Intel VM at concurrency 64, one thread left the
/// cores 16 to 17 % idle, two threads 7 to 10 %, with 2 to 10 % more requests a second).
pub fn threads(connections: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.min(connections).max(1)
}

fn parse(stdout: &str) -> Result<LoadResult, String> {
    let mut responses = None;
    let mut errors = 0;
    let mut elapsed = None;
    let mut p50 = None;
    let mut p99 = None;
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("BENCH_RESPONSES") => responses = words.next().and_then(|w| w.parse().ok()),
            Some("BENCH_ERRORS") => {
                errors += words
                    .next()
                    .and_then(|w| w.parse::<u64>().ok())
                    .unwrap_or(0)
            }
            Some("BENCH_SOCKET_ERRORS") => {
                errors += words
                    .next()
                    .and_then(|w| w.parse::<u64>().ok())
                    .unwrap_or(0)
            }
            Some("BENCH_ELAPSED_US") => {
                elapsed = words
                    .next()
                    .and_then(|w| w.parse().ok())
                    .map(Duration::from_micros)
            }
            Some("BENCH_P") => {
                let p = words.next().unwrap_or_default();
                let us = words
                    .next()
                    .and_then(|w| w.parse().ok())
                    .map(Duration::from_micros);
                match p {
                    "50" => p50 = us,
                    "99" => p99 = us,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    match (responses, elapsed, p50, p99) {
        (Some(responses), Some(elapsed), Some(p50), Some(p99)) => Ok(LoadResult {
            responses,
            errors,
            elapsed,
            p50,
            p99,
            cpu: None,
        }),
        _ => Err(format!("cannot read wrk's output:\n{stdout}")),
    }
}

/// The Lua script: `load`'s body with a fresh number per request, the answer checked, the
/// summary printed as `BENCH_*` lines.
fn lua_script(load: &Load, first: u64, limit: u64) -> String {
    let template = &load.template;
    let path = &load.path;
    let completed = load.completed;
    let numbers = ", counter".repeat(template.matches("%010d").count());
    let mut headers = format!(
        "wrk.headers[\"Content-Type\"] = [==[{}]==]\n",
        load.content_type
    );
    for (name, value) in &load.headers {
        headers.push_str(&format!(
            "wrk.headers[ [==[{name}]==] ] = [==[{value}]==]\n"
        ));
    }
    format!(
        r#"-- generated by mesh-bench ({name})
local template = [==[{template}]==]
local path = [==[{path}]==]
local completed = [==[{completed}]==]
local counter = {first}
local limit = {limit}
local threads = {{}}
function setup(thread) table.insert(threads, thread); thread:set("lane", #threads - 1) end
function init(args) responses = 0; errors = 0; counter = counter + lane * 1000000000 end
wrk.method = "POST"
{headers}function request()
  counter = counter + 1
  return wrk.format("POST", path, nil, string.format(template{numbers}))
end
function response(status, headers, body)
  responses = responses + 1
  if status ~= 200 or not string.find(body, completed, 1, true) then errors = errors + 1 end
  if limit > 0 and responses == limit then
    wrk.thread:stop()
    -- wrk's main thread sleeps the whole -d unless interrupted: SIGINT to wrk ($PPID of the
    -- shell) ends the run now. From a background job, since system() ignores SIGINT meanwhile.
    os.execute("(sleep 0.05; kill -INT $PPID) &")
  end
end
function done(summary, latency, requests)
  local r, e = 0, 0
  for _, t in ipairs(threads) do r = r + t:get("responses"); e = e + t:get("errors") end
  local s = summary.errors
  io.write(string.format("BENCH_RESPONSES %d\nBENCH_ERRORS %d\n", r, e))
  io.write(string.format("BENCH_SOCKET_ERRORS %d\n", s.connect + s.read + s.write + s.timeout))
  io.write(string.format("BENCH_ELAPSED_US %d\n", summary.duration))
  for _, p in ipairs({{50, 99}}) do
    io.write(string.format("BENCH_P %d %d\n", p, latency:percentile(p)))
  end
end
"#,
        name = load.name,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_summary_lines_are_read() {
        let out = "Running 1s test\nBENCH_RESPONSES 100\nBENCH_ERRORS 1\nBENCH_SOCKET_ERRORS 2\n\
                   BENCH_ELAPSED_US 1000000\nBENCH_P 50 250\nBENCH_P 99 900\n";
        let r = parse(out).unwrap();
        assert_eq!(r.responses, 100);
        assert_eq!(r.errors, 3);
        assert_eq!(r.p50, Duration::from_micros(250));
        assert_eq!(r.p99, Duration::from_micros(900));
        assert!((r.per_s() - 100.0).abs() < 1e-6);
        assert!(parse("garbage").is_err());
    }

    #[test]
    fn wrk_runs_a_thread_a_core_and_no_more_than_the_connections() {
        assert_eq!(threads(1), 1);
        assert_eq!(
            threads(64),
            std::thread::available_parallelism().map_or(1, |n| n.get().min(64))
        );
    }

    #[test]
    fn the_script_embeds_the_template() {
        let s = lua_script(&Load::jsonrpc("echo"), 7, 0);
        assert!(s.contains("bench-%010d"));
        assert!(s.contains("local counter = 7"));
        assert!(
            s.contains("counter = counter + lane * 1000000000"),
            "each wrk thread numbers its requests in a lane of its own"
        );
        assert!(s.contains("local path = [==[/agents/echo]==]"));
        assert!(s.contains(r#"local completed = [==["completed"]==]"#));
        assert!(s.contains("string.format(template, counter, counter)"));
        assert!(s.contains(r#"wrk.headers["Content-Type"] = [==[application/json]==]"#));
    }

    #[test]
    fn the_rest_script_posts_to_message_send_and_wants_the_1_0_state() {
        let s = lua_script(&Load::rest("echo"), 0, 5);
        assert!(s.contains("local path = [==[/agents/echo/message:send]==]"));
        assert!(s.contains(r#"local completed = [==["TASK_STATE_COMPLETED"]==]"#));
        assert!(
            s.contains("string.format(template, counter))"),
            "one number: the messageId"
        );
        assert!(s.contains("local limit = 5"));
        assert!(s.contains(r#"os.execute("(sleep 0.05; kill -INT $PPID) &")"#));
        assert!(s.contains(r#"wrk.headers["Content-Type"] = [==[application/a2a+json]==]"#));
        assert!(s.contains("wrk.headers[ [==[A2A-Version]==] ] = [==[1.0]==]"));
        assert!(s.contains(r#""role":"ROLE_USER""#));
    }
}
