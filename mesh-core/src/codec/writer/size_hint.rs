//! About how many bytes a document will take, from the bulk of what it carries (texts, file
//! bytes as base64, URLs), so that the writer's buffer is made once at about its size: a
//! buffer that grows past a large part copies everything written so far, and an exact
//! reservation for one large string made the next byte double the buffer (a 1 MiB text was
//! copied twice more that way, counted by `mesh-copies`). Small documents keep the writer's
//! usual first buffer.

use crate::codec::TaskView;
use crate::model::{Message, Part, PartContent, Task};
use crate::rpc::{Call, Reply, Request};

/// What a part's framing (kind, names, metadata) takes beyond its content, about.
const PER_PART: usize = 96;
/// What a message's or a task's own members take, about.
const PER_OBJECT: usize = 256;

/// The parts' bulk.
pub(crate) fn parts(parts: &[Part]) -> usize {
    parts
        .iter()
        .map(|part| {
            PER_PART
                + match &part.content {
                    PartContent::Text(text) => text.len(),
                    PartContent::Raw(bytes) => bytes.len().div_ceil(3) * 4,
                    PartContent::Url(url) => url.len(),
                    // Written through serde_json's value writer: left to grow.
                    PartContent::Data(_) => 0,
                }
        })
        .sum()
}

pub(crate) fn message(message: &Message) -> usize {
    PER_OBJECT + parts(&message.parts)
}

pub(crate) fn task(task: &Task, view: TaskView) -> usize {
    let status = task.status.message.as_ref().map_or(0, message);
    let artifacts = match &task.artifacts {
        Some(artifacts) if view.artifacts => {
            artifacts.iter().map(|a| PER_OBJECT + parts(&a.parts)).sum()
        }
        _ => 0,
    };
    let history = task.history.as_ref().map_or(0, |history| {
        let shown = view
            .history_tail
            .unwrap_or(history.len())
            .min(history.len());
        history[history.len() - shown..].iter().map(message).sum()
    });
    PER_OBJECT + status + artifacts + history
}

pub(crate) fn reply(reply: &Reply) -> usize {
    match reply {
        Reply::Task(t) => task(t, TaskView::WHOLE),
        Reply::Message(m) => message(m),
        Reply::StatusUpdate(event) => PER_OBJECT + event.status.message.as_ref().map_or(0, message),
        Reply::ArtifactUpdate(event) => PER_OBJECT + parts(&event.artifact.parts),
        _ => 0,
    }
}

pub(crate) fn request(request: &Request) -> usize {
    match &request.call {
        Call::Send(params) => PER_OBJECT + message(&params.message),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;

    #[test]
    fn the_bulk_of_texts_and_files_is_counted_and_base64_is_a_third_larger() {
        let m = Message::new(
            Role::User,
            vec![Part::text("x".repeat(3000)), Part::raw(vec![0; 3000])],
        );
        assert_eq!(message(&m), PER_OBJECT + 2 * PER_PART + 3000 + 4000);
    }
}
