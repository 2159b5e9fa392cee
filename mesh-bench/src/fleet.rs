//! The agents the cost curves load, many in one process (`mesh-fleet`): real mesh agents on
//! the agent runtime, each with its own bus connection, card and presence, as `mesh agent`
//! runs them, so that the curves see the runtime's per-agent and per-task costs and the
//! process's RSS divided by its agents is what one agent costs.
//!
//! - `echo`: answers with the parts it was sent (the README's agent).
//! - `waiter`: holds its task `working` until it is canceled or its deadline passes.
//! - `ticker`: streams a chunk every `every:` milliseconds (`ticks:` of them), each chunk
//!   the Unix time in microseconds when it was sent, so a subscriber reads its delivery
//!   latency off the chunk.
//! - `sleeper`: answers after `delay:` milliseconds.
//! - `fanout`: calls `peers:` sleepers (`sleeper-0` …, a fleet of at least two) at once, each with `delay:`
//!   milliseconds except the last with `slowest:`, and completes when all have answered.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use mesh_agent::model::Part;
use mesh_agent::{Agent, AgentConfig, BusConfig, Outcome, RunningAgent, TaskContext, handler_fn};

/// What the agents of a fleet do.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Echo,
    Waiter,
    Ticker,
    Sleeper,
    Fanout,
}

/// The most ticks, peers and milliseconds one request may ask for.
const MAX_TICKS: u64 = 100_000;
const MAX_PEERS: u64 = 256;
const MAX_DELAY_MS: u64 = 60_000;

/// Agents started at once while a fleet comes up.
const STARTING_AT_ONCE: usize = 32;

/// The name of agent `index` of a fleet of `count` named `prefix`: the prefix alone for one.
pub fn agent_name(prefix: &str, count: usize, index: usize) -> String {
    if count == 1 {
        prefix.to_owned()
    } else {
        format!("{prefix}-{index}")
    }
}

/// Starts `count` agents of `kind` named after `prefix`, each taking `max_tasks` at once.
pub async fn start(
    kind: Kind,
    prefix: &str,
    count: usize,
    max_tasks: usize,
    bus: &BusConfig,
    namespace: &str,
) -> Result<Vec<RunningAgent>, String> {
    let config = AgentConfig {
        namespace: namespace.to_owned(),
        max_concurrent_tasks: max_tasks,
        ..AgentConfig::default()
    };
    let started = futures_util::stream::iter(0..count)
        .map(|index| {
            let name = agent_name(prefix, count, index);
            let agent = agent(kind, &name).config(config.clone());
            let bus = bus.clone();
            async move {
                agent
                    .start(bus)
                    .await
                    .map_err(|e| format!("agent {name}: {e}"))
            }
        })
        .buffer_unordered(STARTING_AT_ONCE)
        .collect::<Vec<_>>()
        .await;
    started.into_iter().collect()
}

/// One agent of `kind` named `name`.
pub fn agent(kind: Kind, name: &str) -> Agent {
    match kind {
        Kind::Echo => Agent::new(
            name,
            handler_fn(|ctx: TaskContext| async move {
                let parts = ctx.message().parts.clone();
                ctx.artifact(mesh_agent::new_artifact(Some("echo".into()), parts))
                    .await?;
                Ok(Outcome::completed())
            }),
        ),
        Kind::Waiter => Agent::new(
            name,
            handler_fn(|ctx: TaskContext| async move {
                ctx.working("waiting").await?;
                ctx.cancelled().await;
                Ok(Outcome::completed())
            }),
        ),
        Kind::Ticker => Agent::new(
            name,
            handler_fn(|ctx: TaskContext| async move {
                let text = ctx.text();
                let ticks = number(&text, "ticks:").unwrap_or(10).clamp(1, MAX_TICKS);
                let every = Duration::from_millis(
                    number(&text, "every:").unwrap_or(1000).min(MAX_DELAY_MS),
                );
                let mut chunks = ctx.artifact_writer("ticks");
                let mut clock = tokio::time::interval(every);
                for _ in 1..ticks {
                    tokio::select! {
                        _ = clock.tick() => {}
                        () = ctx.cancelled() => return Ok(Outcome::completed()),
                    }
                    chunks
                        .append(vec![Part::text(unix_micros().to_string())])
                        .await?;
                }
                chunks
                    .finish(vec![Part::text(unix_micros().to_string())])
                    .await?;
                Ok(Outcome::completed())
            }),
        )
        .streaming(true),
        Kind::Sleeper => Agent::new(
            name,
            handler_fn(|ctx: TaskContext| async move {
                let delay = number(&ctx.text(), "delay:").unwrap_or(0).min(MAX_DELAY_MS);
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(delay)) => {}
                    () = ctx.cancelled() => {}
                }
                Ok(Outcome::completed_with(format!("slept {delay} ms")))
            }),
        ),
        Kind::Fanout => Agent::new(
            name,
            handler_fn(|ctx: TaskContext| async move {
                let text = ctx.text();
                let peers = number(&text, "peers:").unwrap_or(1).clamp(1, MAX_PEERS) as usize;
                let delay = number(&text, "delay:").unwrap_or(0).min(MAX_DELAY_MS);
                let slowest = number(&text, "slowest:").unwrap_or(delay).min(MAX_DELAY_MS);
                let calls = (0..peers).map(|index| {
                    let name = format!("sleeper-{index}");
                    let wait = if index + 1 == peers { slowest } else { delay };
                    let peers = ctx.peers();
                    async move { peers.ask(&name, &format!("delay: {wait}")).await }
                });
                let answers = futures_util::future::join_all(calls).await;
                let failed = answers.iter().filter(|answer| answer.is_err()).count();
                if failed > 0 {
                    return Ok(Outcome::failed(format!("{failed} of {peers} peers failed")));
                }
                Ok(Outcome::completed_with(format!("{peers} peers answered")))
            }),
        ),
    }
}

/// The number after `key` in `text` (`"ticks: 10"`).
fn number(text: &str, key: &str) -> Option<u64> {
    let (_, rest) = text.split_once(key)?;
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Now, in microseconds since the Unix epoch.
pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_after_their_key() {
        assert_eq!(number("ticks: 10 every: 250", "ticks:"), Some(10));
        assert_eq!(number("ticks: 10 every: 250", "every:"), Some(250));
        assert_eq!(number("ticks:", "ticks:"), None);
        assert_eq!(number("nothing", "delay:"), None);
    }

    #[test]
    fn a_fleet_of_one_is_named_by_its_prefix() {
        assert_eq!(agent_name("echo", 1, 0), "echo");
        assert_eq!(agent_name("echo", 3, 2), "echo-2");
    }
}
