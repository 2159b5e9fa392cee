//! What a handler sees of its task, and how it speaks: the [`TaskContext`].
//!
//! The context gives the new message (with the bus's reserved metadata already stripped), the
//! task it belongs to (history and artifacts of earlier turns included), who asked, a
//! cancellation signal, and the calls that stream progress back: `working` status messages,
//! whole artifacts, and artifacts written in pieces through an [`ArtifactWriter`]. It also reaches other agents ([`TaskContext::peers`]); their
//! sub-tasks are tied to this one, so cancelling this task cancels them.

use crate::emitter::{EmitError, Emitter};
use crate::handler::agent_text;
use crate::peer::Peers;
use mesh_core::meta::Caller;
use mesh_core::model::{Artifact, Message, Part, PartContent, Task, TaskState};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The handler's view of one message and its task. Cheap to clone.
#[derive(Clone)]
pub struct TaskContext {
    /// The task as this turn began, the new message last in its history.
    pub(crate) snapshot: Arc<Task>,
    pub(crate) resumed: bool,
    pub(crate) caller: Option<Caller>,
    pub(crate) emitter: Arc<Emitter>,
    pub(crate) cancel: CancellationToken,
    pub(crate) peers: Peers,
}

impl TaskContext {
    /// The message this turn answers (`_mesh` metadata removed): the last of the task's
    /// history, where the runtime puts it.
    pub fn message(&self) -> &Message {
        static NONE: std::sync::OnceLock<Message> = std::sync::OnceLock::new();
        match self.snapshot.history.as_deref() {
            Some([.., last]) => last,
            _ => NONE.get_or_init(|| Message::new(mesh_core::model::Role::User, Vec::new())),
        }
    }

    /// The text of the message: its text parts, joined by newlines.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .message()
            .parts
            .iter()
            .filter_map(|part| match &part.content {
                PartContent::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }

    /// The task as it stood when this turn began: history (this message last) and artifacts.
    pub fn task(&self) -> &Task {
        &self.snapshot
    }

    /// The task's id.
    pub fn task_id(&self) -> &str {
        &self.snapshot.id
    }

    /// The task's context (conversation) id.
    pub fn context_id(&self) -> &str {
        &self.snapshot.context_id
    }

    /// True when this message continues a task that was waiting for input.
    pub fn is_resumed(&self) -> bool {
        self.resumed
    }

    /// Who sent the request: a gateway on behalf of a principal, or another agent.
    pub fn caller(&self) -> Option<&Caller> {
        self.caller.as_ref()
    }

    /// True once the task was canceled (by its requester, its parent, or its deadline).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when the task is canceled: `select!` on it around long work.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// A `working` status update with a text message.
    pub async fn working(&self, text: impl Into<String>) -> Result<(), EmitError> {
        self.emitter
            .status(TaskState::Working, Some(agent_text(text)))
            .await
    }

    /// A `working` status update carrying `message` whole (its parts may be more than text).
    /// Terminal and interrupted states are set by returning an [`Outcome`](crate::Outcome).
    pub async fn working_with(&self, message: Message) -> Result<(), EmitError> {
        self.emitter.status(TaskState::Working, Some(message)).await
    }

    /// A whole artifact.
    pub async fn artifact(&self, artifact: Artifact) -> Result<(), EmitError> {
        self.emitter.artifact(artifact, false, true).await
    }

    /// A text artifact named `name`, in one piece.
    pub async fn text_artifact(
        &self,
        name: impl Into<String>,
        text: impl Into<String>,
    ) -> Result<(), EmitError> {
        self.artifact(new_artifact(Some(name.into()), vec![Part::text(text)]))
            .await
    }

    /// A new artifact named `name` (with a fresh id), to stream in pieces.
    pub fn artifact_writer(&self, name: impl Into<String>) -> ArtifactWriter {
        self.artifact_writer_for(new_artifact(Some(name.into()), Vec::new()))
    }

    /// An artifact to stream in pieces that keeps `artifact`'s id, name, description,
    /// metadata and extensions (its parts are not sent: pass them to the writer), e.g. to
    /// relay a peer's artifact as it streams.
    pub fn artifact_writer_for(&self, mut artifact: Artifact) -> ArtifactWriter {
        artifact.parts = Vec::new();
        ArtifactWriter {
            emitter: self.emitter.clone(),
            head: artifact,
            started: false,
        }
    }

    /// Other agents of the mesh, to call from inside this task.
    pub fn peers(&self) -> &Peers {
        &self.peers
    }
}

/// An artifact streamed in pieces, chunk by chunk (A2A's artifact updates with `append` and
/// `lastChunk`): [`append`](ArtifactWriter::append) sends the next parts,
/// [`finish`](ArtifactWriter::finish) the last ones. A writer dropped unfinished leaves the
/// artifact as far as it got.
///
/// ```no_run
/// # use mesh_agent::{TaskContext, EmitError, model::Part};
/// # async fn write(ctx: TaskContext) -> Result<(), EmitError> {
/// let mut draft = ctx.artifact_writer("draft.txt");
/// draft.append(vec![Part::text("first paragraph\n")]).await?;
/// draft.finish(vec![Part::text("last paragraph\n")]).await?;
/// # Ok(()) }
/// ```
pub struct ArtifactWriter {
    emitter: Arc<Emitter>,
    /// The artifact without parts: what every chunk carries besides its own parts.
    head: Artifact,
    /// Whether a chunk was sent (the next one appends).
    started: bool,
}

impl ArtifactWriter {
    /// The artifact's id.
    pub fn id(&self) -> &str {
        &self.head.artifact_id
    }

    /// Sends `parts` as the artifact's next chunk (its first when none was sent).
    pub async fn append(&mut self, parts: Vec<Part>) -> Result<(), EmitError> {
        self.chunk(parts, false).await
    }

    /// Sends `parts` as the artifact's last chunk (the whole artifact when none was sent;
    /// `parts` may be empty).
    pub async fn finish(mut self, parts: Vec<Part>) -> Result<(), EmitError> {
        self.chunk(parts, true).await
    }

    async fn chunk(&mut self, parts: Vec<Part>, last: bool) -> Result<(), EmitError> {
        let chunk = Artifact {
            parts,
            ..self.head.clone()
        };
        let append = std::mem::replace(&mut self.started, true);
        self.emitter.artifact(chunk, append, last).await
    }
}

/// An artifact with a fresh id.
pub fn new_artifact(name: Option<String>, parts: Vec<Part>) -> Artifact {
    Artifact {
        artifact_id: uuid::Uuid::now_v7().to_string(),
        name,
        description: None,
        parts,
        metadata: None,
        extensions: None,
    }
}
