//! Discovery as a client sees it: `GET /agents` at the gateway, polled every millisecond
//! (over one kept-alive HTTP connection) until the agent is listed online, or offline.
//! Measured from spawning `mesh agent echo` (process start, connection, card and presence
//! included) and from SIGKILL of its only instance (`std::process::Child::kill`, what
//! `kill -9` does).

use serde_json::Value;
use std::time::{Duration, Instant};

/// Polls until `agent` is listed with `online == want` (a missing agent counts as
/// offline), for at most `bound`. Returns when it was seen, or `None` on time-out.
pub async fn wait_listed(
    http: &reqwest::Client,
    gateway: &str,
    agent: &str,
    want: bool,
    bound: Duration,
) -> Option<Instant> {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if is_online(http, gateway, agent).await == Some(want) {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

/// Whether `GET /agents` lists `agent` online; `None` when the gateway does not answer.
async fn is_online(http: &reqwest::Client, gateway: &str, agent: &str) -> Option<bool> {
    let online = listed(http, gateway)
        .await?
        .any(|(name, online)| name == agent && online);
    Some(online)
}

/// The agents `GET /agents` lists, each with whether it is online; `None` when the gateway
/// does not answer (or not with a listing).
pub async fn listed(
    http: &reqwest::Client,
    gateway: &str,
) -> Option<impl Iterator<Item = (String, bool)>> {
    let body = http
        .get(format!("{gateway}/agents"))
        .send()
        .await
        .ok()?
        .bytes()
        .await
        .ok()?;
    let mut listing: Value = serde_json::from_slice(&body).ok()?;
    let Value::Array(agents) = listing["agents"].take() else {
        return None;
    };
    Some(agents.into_iter().filter_map(|agent| {
        let name = agent["name"].as_str()?.to_owned();
        Some((name, agent["online"] == true))
    }))
}
