//! A task's events as data: how one event of a reply stream changes a task ([`apply`]), which
//! events end a stream ([`ends_task`]), and the one encoding the task store reads its log
//! back in and writes its rows in ([`encode`], [`decode`]: the codec's 1.0 JSON of the
//! event).
//!
//! The bridge applies each event to the store through [`TaskStore::append`]; the stores apply
//! it with [`apply`] and replay the event log on a snapshot with the same function, so a task
//! rebuilt from the log is the task that was served. Nothing here knows about the bus, HTTP
//! or a store.
//!
//! [`TaskStore::append`]: crate::store::TaskStore::append

use mesh_core::codec;
use mesh_core::dialect::Dialect;
use mesh_core::error::A2aError;
use mesh_core::model::{
    Message, Part, Role, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent, is_final_state,
};
use mesh_core::rpc::Reply;

/// The event as the store's log is read and written: the codec's 1.0 JSON of the reply (a wrapper object:
/// `{"task": …}`, `{"statusUpdate": …}`, `{"artifactUpdate": …}` or `{"message": …}`),
/// written straight from the model.
pub fn encode(event: &Reply) -> bytes::Bytes {
    bytes::Bytes::from(codec::write_reply_json(Dialect::V1_0, event))
}

/// Reads an event written by [`encode`] (the codec's typed reader reads what its writer
/// wrote without a `Value` in between).
pub fn decode(json: &[u8]) -> Result<Reply, A2aError> {
    codec::read_reply_json(json, Dialect::V1_0)
}

/// True for the event after which a task's stream ends: a task or status in a final state
/// (terminal, or waiting for input or authentication), or a direct message.
pub fn ends_task(reply: &Reply) -> bool {
    match reply {
        Reply::Task(task) => is_final_state(&task.status.state),
        Reply::StatusUpdate(event) => is_final_state(&event.status.state),
        Reply::ArtifactUpdate(_) => false,
        _ => true,
    }
}

/// True for the states in which a task waits for its client (input or authentication): the
/// stream of the turn ended, the task did not.
pub fn is_interrupted(state: &TaskState) -> bool {
    matches!(state, TaskState::InputRequired | TaskState::AuthRequired)
}

/// Sets a task's status, moving the previous status message into the history.
pub fn set_status(task: &mut Task, mut status: TaskStatus) {
    move_status(task, &mut status);
}

/// [`set_status`] with the status moved out of `status`, which gets the one it replaced (its
/// message taken out, into the history).
pub fn move_status(task: &mut Task, status: &mut TaskStatus) {
    std::mem::swap(&mut task.status, status);
    if let Some(previous) = status.message.take() {
        task.history.get_or_insert_with(Vec::new).push(previous);
    }
}

/// True for a reply after which the task never changes again: a terminal state, or a direct
/// message (which completes the task the gateway opened for it).
pub fn ends_for_good(reply: &Reply) -> bool {
    match reply {
        Reply::Task(task) => task.status.state.is_terminal(),
        Reply::StatusUpdate(update) => update.status.state.is_terminal(),
        Reply::ArtifactUpdate(_) => false,
        _ => true,
    }
}

/// Applies one event to a task. Costs what the event carries, never what the task holds
/// already (an appended artifact chunk extends its artifact's parts in place).
pub fn apply(task: &mut Task, reply: &Reply) {
    match reply {
        Reply::Task(new) => *task = new.clone(),
        Reply::StatusUpdate(event) => set_status(task, event.status.clone()),
        Reply::ArtifactUpdate(event) => apply_artifact(task, event),
        // A direct answer with no task: the task the gateway opened for it is done.
        Reply::Message(message) if !task.status.state.is_terminal() => set_status(
            task,
            TaskStatus {
                state: TaskState::Completed,
                message: Some(message.clone()),
                timestamp: Some(chrono::Utc::now()),
            },
        ),
        _ => {}
    }
}

/// Adds an artifact, replaces it (same id), or appends its parts (`append: true`).
pub fn apply_artifact(task: &mut Task, event: &TaskArtifactUpdateEvent) {
    let artifacts = task.artifacts.get_or_insert_with(Vec::new);
    let existing = artifacts
        .iter_mut()
        .find(|a| a.artifact_id == event.artifact.artifact_id);
    match existing {
        Some(artifact) if event.append == Some(true) => {
            artifact.parts.extend(event.artifact.parts.iter().cloned());
            if event.artifact.metadata.is_some() {
                artifact.metadata.clone_from(&event.artifact.metadata);
            }
        }
        Some(artifact) => *artifact = event.artifact.clone(),
        None => artifacts.push(event.artifact.clone()),
    }
}

/// A status update for `task`, now, with an optional agent text message.
pub(crate) fn status_event(
    task: &Task,
    state: TaskState,
    text: Option<&str>,
) -> TaskStatusUpdateEvent {
    let message = text.map(|text| {
        let mut message = Message::new(Role::Agent, vec![Part::text(text)]);
        message.task_id = Some(task.id.clone());
        message.context_id = Some(task.context_id.clone());
        message
    });
    TaskStatusUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: TaskStatus {
            state,
            message,
            timestamp: Some(chrono::Utc::now()),
        },
        metadata: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::model::{Artifact, Message, Part, Role, TaskStatusUpdateEvent};

    fn task() -> Task {
        Task {
            id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: None,
            },
            artifacts: None,
            history: None,
            metadata: None,
        }
    }

    fn chunk(text: &str, append: bool) -> Reply {
        Reply::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            artifact: Artifact {
                artifact_id: "a".into(),
                name: Some("draft.txt".into()),
                description: None,
                parts: vec![Part::text(text)],
                metadata: None,
                extensions: None,
            },
            append: Some(append),
            last_chunk: Some(false),
            metadata: None,
        })
    }

    #[test]
    fn every_event_kind_survives_its_encoding() {
        let mut message = Message::new(Role::Agent, vec![Part::text("hello")]);
        message.task_id = Some("t".into());
        message.context_id = Some("c".into());
        let events = [
            Reply::Task(task()),
            Reply::StatusUpdate(TaskStatusUpdateEvent {
                task_id: "t".into(),
                context_id: "c".into(),
                status: TaskStatus {
                    state: TaskState::InputRequired,
                    message: Some(message.clone()),
                    timestamp: Some(chrono::Utc::now()),
                },
                metadata: None,
            }),
            chunk("one", false),
            chunk("two", true),
            Reply::Message(message),
        ];
        for event in &events {
            let json = encode(event);
            assert!(json.starts_with(b"{\""), "{json:?}");
            assert_eq!(&decode(&json).unwrap(), event);
        }
        assert!(decode(b"{").is_err());
        assert!(decode(b"{\"nonsense\": 1}").is_err());
    }

    #[test]
    fn chunks_append_to_their_artifact() {
        let mut t = task();
        for (text, append) in [("a", false), ("b", true), ("c", true)] {
            apply(&mut t, &chunk(text, append));
        }
        let artifacts = t.artifacts.as_ref().unwrap();
        assert_eq!(artifacts.len(), 1);
        assert_eq!(artifacts[0].parts.len(), 3);
        apply(&mut t, &chunk("d", false));
        assert_eq!(t.artifacts.as_ref().unwrap()[0].parts.len(), 1);
    }
}
