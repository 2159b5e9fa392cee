//! End to end: HTTP JSON-RPC `message/send` through gateway → bus → echo agent → bus →
//! gateway, driven by wrk (a real load generator, not this process) with a Lua script that
//! POSTs the 306-byte payload, a fresh id and `messageId` per request, and counts as an
//! error any answer that is not HTTP 200 with a completed task. The percentiles come from
//! wrk's own histogram, printed by the script's `done` hook in microseconds.

use crate::payload;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// What one wrk run measured.
#[derive(Debug, Clone)]
pub struct WrkResult {
    /// Answers received (HTTP responses).
    pub responses: u64,
    /// Answers that were not HTTP 200 with a completed task, plus socket errors.
    pub errors: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Latency percentiles (p50, p99).
    pub p50: Duration,
    pub p99: Duration,
}

impl WrkResult {
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

/// Runs wrk against `url` with `connections` connections on one thread for at most
/// `duration`, stopping after `limit` answers when given. Request numbers start after
/// `first`, so ids stay unique across runs. It waits for wrk in place: called from the
/// bench's multi-thread runtime, whose other worker goes on meanwhile.
pub fn run(
    wrk: &Path,
    dir: &Path,
    url: &str,
    connections: usize,
    duration: Duration,
    limit: Option<u64>,
    first: u64,
) -> Result<WrkResult, String> {
    tokio::task::block_in_place(|| run_wrk(wrk, dir, url, connections, duration, limit, first))
}

fn run_wrk(
    wrk: &Path,
    dir: &Path,
    url: &str,
    connections: usize,
    duration: Duration,
    limit: Option<u64>,
    first: u64,
) -> Result<WrkResult, String> {
    let script = dir.join(format!("send-{first}.lua"));
    std::fs::write(&script, lua_script(first, limit.unwrap_or(0))).map_err(|e| e.to_string())?;
    let secs = duration.as_secs().max(1);
    let output = Command::new(wrk)
        .args([
            "-t1".to_string(),
            format!("-c{connections}"),
            format!("-d{secs}s"),
            "--timeout=10s".to_string(),
            "-s".to_string(),
            script.display().to_string(),
            url.to_string(),
        ])
        .stdin(Stdio::null())
        .output()
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

fn parse(stdout: &str) -> Result<WrkResult, String> {
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
        (Some(responses), Some(elapsed), Some(p50), Some(p99)) => Ok(WrkResult {
            responses,
            errors,
            elapsed,
            p50,
            p99,
        }),
        _ => Err(format!("cannot read wrk's output:\n{stdout}")),
    }
}

/// The Lua script: the payload with a fresh id per request, the answer checked, the
/// summary printed as `BENCH_*` lines.
fn lua_script(first: u64, limit: u64) -> String {
    let template = payload::send_lua_template();
    format!(
        r#"-- generated by mesh-bench
local template = [==[{template}]==]
local counter = {first}
local limit = {limit}
local threads = {{}}
function setup(thread) table.insert(threads, thread) end
function init(args) responses = 0; errors = 0 end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
function request()
  counter = counter + 1
  return wrk.format("POST", nil, nil, string.format(template, counter, counter))
end
function response(status, headers, body)
  responses = responses + 1
  if status ~= 200 or not string.find(body, '"completed"', 1, true) then errors = errors + 1 end
  if limit > 0 and responses >= limit then wrk.thread:stop() end
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
"#
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
    fn the_script_embeds_the_template() {
        let s = lua_script(7, 0);
        assert!(s.contains("bench-%010d"));
        assert!(s.contains("local counter = 7"));
    }
}
