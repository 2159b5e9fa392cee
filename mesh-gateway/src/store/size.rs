//! What the task store counts against its byte bounds: an estimate of the size of a task, a
//! record or an event as JSON (the codec's 1.0 encoding), made from their structure without
//! encoding them.
//!
//! The estimate adds the lengths of the strings that are there (texts, ids, names, URLs,
//! media types; unescaped), file bytes as their base64, and a fixed allowance for each
//! task, status, message, artifact and part (their keys and punctuation). Free-form values
//! (a `data` part, a metadata map, an extension list) are rare and measured by serialising
//! them into a counter; the common path (text parts) never serialises anything. It stays
//! within a small factor of the encoded length (see the tests): good enough for bounds that
//! are themselves approximate, and cheap enough to make on every event.

use mesh_core::model::{Artifact, Message, Part, PartContent, Task, TaskStatus};
use mesh_core::rpc::Reply;
use serde::Serialize;
use std::collections::HashMap;

/// `{"id":"","contextId":"","status":}` and the object's braces.
const TASK: usize = 32;
/// `{"state":"TASK_STATE_…","timestamp":"…"}`.
const STATUS: usize = 48;
/// `{"messageId":"","contextId":"","taskId":"","role":"ROLE_AGENT","parts":[]}`.
const MESSAGE: usize = 80;
/// `{"artifactId":"","name":"","parts":[]}`.
const ARTIFACT: usize = 40;
/// `{"text":""},`.
const PART: usize = 12;
/// An update event's wrapper and its own fields: `{"artifactUpdate":{"taskId":"",
/// "contextId":"","append":false,"lastChunk":false,"artifact":}}`.
const EVENT: usize = 80;
/// The wrapper of a task or message event: `{"task":}`.
const WRAPPER: usize = 16;

/// A task's estimated size.
pub(crate) fn task(task: &Task) -> usize {
    TASK + task.id.len()
        + task.context_id.len()
        + status(&task.status)
        + task.artifacts.iter().flatten().map(artifact).sum::<usize>()
        + task.history.iter().flatten().map(message).sum::<usize>()
        + metadata(task.metadata.as_ref())
}

/// A status's estimated size.
pub(crate) fn status(status: &TaskStatus) -> usize {
    STATUS + status.message.as_ref().map_or(0, message)
}

/// A message's estimated size.
pub(crate) fn message(message: &Message) -> usize {
    MESSAGE
        + message.message_id.len()
        + message.context_id.as_ref().map_or(0, String::len)
        + message.task_id.as_ref().map_or(0, String::len)
        + message.parts.iter().map(part).sum::<usize>()
        + metadata(message.metadata.as_ref())
        + measured(message.extensions.as_ref())
        + measured(message.reference_task_ids.as_ref())
}

/// An artifact's estimated size.
pub(crate) fn artifact(artifact: &Artifact) -> usize {
    ARTIFACT
        + artifact.artifact_id.len()
        + artifact.name.as_ref().map_or(0, String::len)
        + artifact.description.as_ref().map_or(0, String::len)
        + artifact.parts.iter().map(part).sum::<usize>()
        + metadata(artifact.metadata.as_ref())
        + measured(artifact.extensions.as_ref())
}

/// A part's estimated size.
pub(crate) fn part(part: &Part) -> usize {
    let content = match &part.content {
        PartContent::Text(text) => text.len(),
        PartContent::Raw(bytes) => bytes.len().div_ceil(3) * 4,
        PartContent::Url(url) => url.len(),
        PartContent::Data(value) => json_len(value),
    };
    PART + content
        + part.filename.as_ref().map_or(0, |f| f.len() + 12)
        + part.media_type.as_ref().map_or(0, |m| m.len() + 14)
        + metadata(part.metadata.as_ref())
}

/// An event's estimated size (a reply that is not an event of a task is measured whole).
pub(crate) fn reply(reply: &Reply) -> usize {
    match reply {
        Reply::Task(t) => WRAPPER + task(t),
        Reply::Message(m) => WRAPPER + message(m),
        Reply::StatusUpdate(event) => {
            EVENT
                + event.task_id.len()
                + event.context_id.len()
                + status(&event.status)
                + metadata(event.metadata.as_ref())
        }
        Reply::ArtifactUpdate(event) => {
            EVENT
                + event.task_id.len()
                + event.context_id.len()
                + artifact(&event.artifact)
                + metadata(event.metadata.as_ref())
        }
        other => mesh_core::codec::write_reply_json(mesh_core::dialect::Dialect::V1_0, other).len(),
    }
}

/// A metadata map, measured (rare).
fn metadata(map: Option<&HashMap<String, serde_json::Value>>) -> usize {
    map.filter(|m| !m.is_empty())
        .map_or(0, |m| json_len(m) + 12)
}

/// A rare optional field, measured.
fn measured<T: Serialize>(value: Option<&T>) -> usize {
    value.map_or(0, |v| json_len(v) + 16)
}

/// The length of `value` as JSON, counted without writing it anywhere.
pub(crate) fn json_len<T: Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::model::{
        Role, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent, new_artifact_id,
    };

    fn msg(role: Role, parts: Vec<Part>) -> Message {
        let mut m = Message::new(role, parts);
        m.task_id = Some(mesh_core::model::new_task_id());
        m.context_id = Some(mesh_core::model::new_context_id());
        m
    }

    fn art(name: &str, parts: Vec<Part>) -> Artifact {
        Artifact {
            artifact_id: new_artifact_id(),
            name: Some(name.into()),
            description: None,
            parts,
            metadata: None,
            extensions: None,
        }
    }

    fn new_task(
        state: TaskState,
        history: Vec<Message>,
        artifacts: Vec<Artifact>,
        status: Option<Message>,
    ) -> Task {
        Task {
            id: mesh_core::model::new_task_id(),
            context_id: mesh_core::model::new_context_id(),
            status: TaskStatus {
                state,
                message: status,
                timestamp: Some(chrono::Utc::now()),
            },
            artifacts: Some(artifacts).filter(|a| !a.is_empty()),
            history: Some(history).filter(|h| !h.is_empty()),
            metadata: None,
        }
    }

    /// Typical events: what the echo, writer and flight-booker agents answer, small and large.
    fn typical() -> Vec<(&'static str, Reply)> {
        let echo = |text: &str| {
            new_task(
                TaskState::Completed,
                vec![msg(Role::User, vec![Part::text(text)])],
                vec![art("echo", vec![Part::text(text)])],
                None,
            )
        };
        let mut data = Part::data(serde_json::json!({
            "from": "JFK", "to": "LHR", "date": "2026-10-10", "flight": "BA 178", "seats": [1, 2],
        }));
        data.media_type = Some("application/json".into());
        let booked = new_task(
            TaskState::Completed,
            vec![
                msg(Role::User, vec![Part::text("I'd like to book a flight")]),
                msg(
                    Role::Agent,
                    vec![Part::text("Where from, where to, and when?")],
                ),
                msg(
                    Role::User,
                    vec![Part::text("From JFK to LHR on 2026-10-10")],
                ),
            ],
            vec![art("FlightItinerary.json", vec![data])],
            Some(msg(Role::Agent, vec![Part::text("Booked.")])),
        );
        let files = new_task(
            TaskState::Completed,
            vec![msg(
                Role::User,
                vec![
                    Part::raw(vec![7; 3000]).with_filename("photo.png"),
                    Part::url("https://example.com/files/report.pdf")
                        .with_media_type("application/pdf"),
                ],
            )],
            Vec::new(),
            None,
        );
        let chunk = |text: &str| {
            Reply::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: mesh_core::model::new_task_id(),
                context_id: mesh_core::model::new_context_id(),
                artifact: art("draft.txt", vec![Part::text(text)]),
                append: Some(true),
                last_chunk: Some(false),
                metadata: None,
            })
        };
        let waiting = Reply::StatusUpdate(TaskStatusUpdateEvent {
            task_id: mesh_core::model::new_task_id(),
            context_id: mesh_core::model::new_context_id(),
            status: TaskStatus {
                state: TaskState::InputRequired,
                message: Some(msg(
                    Role::Agent,
                    vec![Part::text("Where from, where to, and when?")],
                )),
                timestamp: Some(chrono::Utc::now()),
            },
            metadata: None,
        });
        let submitted = new_task(
            TaskState::Submitted,
            vec![msg(Role::User, vec![Part::text("hi")])],
            Vec::new(),
            None,
        );
        vec![
            ("echo, short", Reply::Task(echo("hello"))),
            ("echo, 16 KB", Reply::Task(echo(&"x".repeat(16 * 1024)))),
            ("submitted", Reply::Task(submitted)),
            ("flight booked", Reply::Task(booked)),
            ("files", Reply::Task(files)),
            (
                "chunk",
                chunk("[1] a paragraph of about eighty bytes, as the writer agent streams them.\n"),
            ),
            ("tiny chunk", chunk("7")),
            ("waiting", waiting),
            (
                "message",
                Reply::Message(msg(Role::Agent, vec![Part::text("a direct answer")])),
            ),
        ]
    }

    #[test]
    fn estimates_stay_within_a_small_factor_of_the_encoding() {
        for (name, event) in typical() {
            let encoded = crate::task_events::encode(&event).len();
            let estimated = reply(&event);
            let ratio = estimated as f64 / encoded as f64;
            println!("{name:>14}: estimated {estimated:>6}, encoded {encoded:>6} ({ratio:.2})");
            assert!(
                (0.75..=1.5).contains(&ratio),
                "{name}: {estimated} for {encoded}"
            );
            if let Reply::Task(t) = &event {
                let encoded = serde_json::to_vec(t).unwrap().len();
                let ratio = task(t) as f64 / encoded as f64;
                assert!((0.75..=1.5).contains(&ratio), "{name}: task {ratio:.2}");
            }
        }
    }
}
