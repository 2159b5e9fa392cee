//! `mesh tail`: watch a namespace's bus traffic, one readable line per message (or raw JSON),
//! optionally only the traffic of one agent or one task.

use crate::exit::{Failure, Outcome};
use crate::serve::{bus_config, unreachable_broker};
use crate::settings::Settings;
use mesh_core::bus::{Bus, QoS, redact_url};
use mesh_core::topic::{TopicKind, Topics};
use serde_json::Value;
use std::io::Write;

/// Subscribes to `<ns>/a2a/v1/#` and prints every message until Ctrl-C.
pub async fn tail(
    settings: &Settings,
    agent: Option<String>,
    task: Option<String>,
    json: bool,
) -> Outcome {
    let url = settings.broker_url_or_default();
    let topics =
        Topics::new(settings.namespace.clone()).map_err(|e| Failure::Usage(e.to_string()))?;
    let bus = Bus::connect(
        bus_config(settings, &url)?
            .with_client_id(format!("mesh-tail-{}", uuid::Uuid::new_v4().simple())),
    )
    .await
    .map_err(|e| unreachable_broker(&url, e))?;
    let filter = format!("{}/a2a/v1/#", topics.namespace());
    let mut messages = bus
        .subscribe(&filter, QoS::AtLeastOnce)
        .await
        .map_err(|e| unreachable_broker(&url, e))?;
    let shown = redact_url(&url);
    eprintln!("watching {filter} on {shown} (Ctrl-C stops)");
    loop {
        let message = tokio::select! {
            message = messages.recv() => message,
            _ = tokio::signal::ctrl_c() => break,
        };
        let Some(message) = message else {
            return Err(Failure::Unreachable(format!("lost the broker at {shown}")));
        };
        let line = Line::of(&message.topic, &message.payload);
        if agent.as_ref().is_some_and(|a| {
            line.agent.as_deref() != Some(a.as_str()) && line.caller.as_deref() != Some(a.as_str())
        }) {
            continue;
        }
        if task
            .as_ref()
            .is_some_and(|t| line.task.as_deref() != Some(t.as_str()))
        {
            continue;
        }
        let mut out = std::io::stdout().lock();
        let written = if json {
            let payload = serde_json::from_slice::<Value>(&message.payload).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&message.payload).into_owned())
            });
            writeln!(
                out,
                "{}",
                serde_json::json!({"topic": message.topic, "retain": message.retain, "payload": payload})
            )
        } else {
            writeln!(out, "{}", line.render())
        };
        if written.is_err() {
            break; // stdout closed (a pipe into `head`)
        }
    }
    let _ = bus.disconnect().await;
    Ok(())
}

/// One message, as `mesh tail` shows it.
struct Line {
    kind: &'static str,
    agent: Option<String>,
    caller: Option<String>,
    task: Option<String>,
    summary: String,
}

impl Line {
    fn of(topic: &str, payload: &[u8]) -> Line {
        let value: Value = serde_json::from_slice(payload).unwrap_or(Value::Null);
        let (kind, agent, caller, task) = match Topics::parse(topic) {
            Some(TopicKind::AgentRequest { agent, task, .. }) => (
                "request",
                Some(agent),
                None,
                Some(task.task_id().into_owned()),
            ),
            Some(TopicKind::AgentCancel { agent, task, .. }) => (
                "cancel",
                Some(agent),
                None,
                Some(task.task_id().into_owned()),
            ),
            Some(TopicKind::GatewayResponse {
                gateway,
                agent,
                task,
                ..
            }) => (
                "reply",
                Some(agent),
                Some(gateway),
                Some(task.task_id().into_owned()),
            ),
            Some(TopicKind::AgentResponse {
                caller,
                agent,
                task,
                ..
            }) => (
                "reply",
                Some(agent),
                Some(caller),
                Some(task.task_id().into_owned()),
            ),
            Some(TopicKind::AgentCard { agent, .. }) => ("card", Some(agent), None, None),
            Some(TopicKind::Presence { agent, .. }) => ("presence", Some(agent), None, None),
            None => ("other", None, None, None),
        };
        Line {
            kind,
            agent: agent.map(str::to_owned),
            caller: caller.map(str::to_owned),
            task,
            summary: summarize(kind, payload, &value),
        }
    }

    fn render(&self) -> String {
        let now = chrono::Utc::now().format("%H:%M:%S%.3f");
        let who = self
            .agent
            .as_deref()
            .or(self.caller.as_deref())
            .unwrap_or("-");
        let task = self
            .task
            .as_deref()
            .map(|t| format!(" task={}", short(t, 12)))
            .unwrap_or_default();
        format!("{now} {:<8} {:<16}{task} {}", self.kind, who, self.summary)
    }
}

fn summarize(kind: &str, payload: &[u8], value: &Value) -> String {
    if payload.is_empty() {
        return "(cleared)".into();
    }
    match kind {
        "presence" => format!(
            "{} instance={}",
            value["status"].as_str().unwrap_or("?"),
            short(value["instance"].as_str().unwrap_or("?"), 12)
        ),
        "card" => format!(
            "card {:?} with {} skills",
            value["name"].as_str().unwrap_or("?"),
            value["skills"].as_array().map_or(0, Vec::len)
        ),
        _ => {
            if let Some(method) = value["method"].as_str() {
                let text = value
                    .pointer("/params/message/parts/0/text")
                    .and_then(Value::as_str)
                    .map(|t| format!(" {:?}", short(t, 60)))
                    .unwrap_or_default();
                format!("{method}{text}")
            } else if let Some(error) = value.get("error") {
                format!(
                    "error {} {}",
                    error["code"],
                    error["message"].as_str().unwrap_or("")
                )
            } else if let Some(result) = value.get("result") {
                let kind = result["kind"].as_str().unwrap_or("result");
                let state = result
                    .pointer("/status/state")
                    .and_then(Value::as_str)
                    .map(|s| format!(" {s}"))
                    .unwrap_or_default();
                let fin = if result["final"].as_bool() == Some(true) {
                    " (final)"
                } else {
                    ""
                };
                format!("{kind}{state}{fin}")
            } else {
                format!("{} bytes", payload.len())
            }
        }
    }
}

fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}
