//! The reply stream of one request: every event of a task, in order, on its reply topic.
//!
//! An [`Emitter`] keeps the task as it evolves (status, history, artifacts) and publishes each
//! change as an event in the request's dialect, numbered by `_mesh.seq` and tagged with the
//! instance id. The task itself is announced lazily, at the first event, so that a handler
//! that answers with a direct message never creates one. For `message/send` requests
//! (non-streaming) only the final answer is published, preceded by one progress snapshot when
//! the task runs long (docs/protocol.md, section 3.1). Publishing holds an async lock, so
//! events leave in the order they were made even when a handler emits from several tasks.

use mesh_core::bus::{Bus, QoS};
use mesh_core::codec;
use mesh_core::dialect::Dialect;
use mesh_core::error::A2aError;
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::meta::MeshMeta;
use mesh_core::model::{
    Artifact, Message, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent,
    is_final_state,
};
use mesh_core::rpc::Reply;

/// Why an event could not be emitted.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    /// The task already ended; nothing more can be said about it.
    #[error("the task has already ended")]
    Closed,
    /// The bus refused the publish.
    #[error("publishing on the bus failed: {0}")]
    Bus(#[from] mesh_core::bus::BusError),
}

struct State {
    task: Task,
    next_seq: u64,
    announced: bool,
    closed: bool,
}

/// Publishes the events of one task to its requester.
pub(crate) struct Emitter {
    bus: Bus,
    reply_to: String,
    dialect: Dialect,
    rpc_id: JsonRpcId,
    instance: String,
    streaming: bool,
    state: tokio::sync::Mutex<State>,
}

impl Emitter {
    pub(crate) fn new(
        bus: Bus,
        reply_to: String,
        dialect: Dialect,
        rpc_id: JsonRpcId,
        instance: String,
        streaming: bool,
        task: Task,
    ) -> Emitter {
        Emitter {
            bus,
            reply_to,
            dialect,
            rpc_id,
            instance,
            streaming,
            state: tokio::sync::Mutex::new(State {
                task,
                next_seq: 0,
                announced: false,
                closed: false,
            }),
        }
    }

    /// The task as it stands.
    pub(crate) async fn task(&self) -> Task {
        self.state.lock().await.task.clone()
    }

    /// A status change, with an optional agent message.
    pub(crate) async fn status(
        &self,
        state: TaskState,
        message: Option<Message>,
    ) -> Result<(), EmitError> {
        let mut guard = self.state.lock().await;
        if guard.closed {
            return Err(EmitError::Closed);
        }
        self.announce(&mut guard).await?;
        let message = message.map(|m| self.bind(&guard.task, m));
        // As the A2A SDKs do: the status message being replaced becomes history.
        if let Some(previous) = guard.task.status.message.take() {
            guard
                .task
                .history
                .get_or_insert_with(Vec::new)
                .push(previous);
        }
        let status = TaskStatus {
            state,
            message,
            timestamp: Some(chrono::Utc::now()),
        };
        guard.task.status = status.clone();
        let is_final = is_final_state(&status.state);
        if is_final {
            guard.closed = true;
        }
        if self.streaming {
            let event = TaskStatusUpdateEvent {
                task_id: guard.task.id.clone(),
                context_id: guard.task.context_id.clone(),
                status,
                metadata: None,
            };
            self.publish(&mut guard, Reply::StatusUpdate(event)).await?;
        } else if is_final {
            let task = guard.task.clone();
            self.publish(&mut guard, Reply::Task(task)).await?;
        }
        Ok(())
    }

    /// An artifact or a chunk of one.
    pub(crate) async fn artifact(
        &self,
        artifact: Artifact,
        append: bool,
        last_chunk: bool,
    ) -> Result<(), EmitError> {
        let mut guard = self.state.lock().await;
        if guard.closed {
            return Err(EmitError::Closed);
        }
        self.announce(&mut guard).await?;
        merge_artifact(&mut guard.task, &artifact, append);
        if self.streaming {
            let event = TaskArtifactUpdateEvent {
                task_id: guard.task.id.clone(),
                context_id: guard.task.context_id.clone(),
                artifact,
                append: Some(append),
                last_chunk: Some(last_chunk),
                metadata: None,
            };
            self.publish(&mut guard, Reply::ArtifactUpdate(event))
                .await?;
        }
        Ok(())
    }

    /// A direct message answer, with no task. Only valid before anything was announced;
    /// afterwards the message completes the task instead.
    pub(crate) async fn reply(&self, message: Message) -> Result<(), EmitError> {
        let mut guard = self.state.lock().await;
        if guard.closed {
            return Err(EmitError::Closed);
        }
        if guard.announced {
            drop(guard);
            return self.status(TaskState::Completed, Some(message)).await;
        }
        guard.closed = true;
        let mut message = message;
        message.context_id = Some(guard.task.context_id.clone());
        self.publish(&mut guard, Reply::Message(message)).await
    }

    /// For a non-streaming request: publishes the task as it stands, once, so that the
    /// requester learns which instance runs it.
    pub(crate) async fn progress(&self) -> Result<(), EmitError> {
        let mut guard = self.state.lock().await;
        if guard.closed || self.streaming {
            return Ok(());
        }
        self.announce(&mut guard).await?;
        let task = guard.task.clone();
        self.publish(&mut guard, Reply::Task(task)).await
    }

    /// An error answer (the request could not be served); closes the stream.
    pub(crate) async fn error(&self, error: &A2aError) -> Result<(), EmitError> {
        let mut guard = self.state.lock().await;
        if guard.closed {
            return Err(EmitError::Closed);
        }
        guard.closed = true;
        let payload = codec::encode_error(self.dialect, Some(&self.rpc_id), error);
        self.bus
            .publish(&self.reply_to, payload, QoS::AtLeastOnce, false)
            .await?;
        Ok(())
    }

    /// Announces the task (state submitted, then working) before its first event.
    async fn announce(&self, guard: &mut State) -> Result<(), EmitError> {
        if guard.announced {
            return Ok(());
        }
        guard.announced = true;
        if !self.streaming {
            guard.task.status = TaskStatus {
                state: TaskState::Working,
                message: None,
                timestamp: Some(chrono::Utc::now()),
            };
            return Ok(());
        }
        if self.dialect != Dialect::V0_1 {
            // 0.1 streams carry status and artifact updates only.
            let task = guard.task.clone();
            self.publish(guard, Reply::Task(task)).await?;
        }
        let working = TaskStatus {
            state: TaskState::Working,
            message: None,
            timestamp: Some(chrono::Utc::now()),
        };
        guard.task.status = working.clone();
        let event = TaskStatusUpdateEvent {
            task_id: guard.task.id.clone(),
            context_id: guard.task.context_id.clone(),
            status: working,
            metadata: None,
        };
        self.publish(guard, Reply::StatusUpdate(event)).await
    }

    fn bind(&self, task: &Task, mut message: Message) -> Message {
        message.task_id = Some(task.id.clone());
        message.context_id = Some(task.context_id.clone());
        message
    }

    async fn publish(&self, guard: &mut State, mut reply: Reply) -> Result<(), EmitError> {
        let meta = MeshMeta {
            instance: Some(self.instance.clone()),
            seq: Some(guard.next_seq),
            ..Default::default()
        };
        guard.next_seq += 1;
        match &mut reply {
            Reply::Task(task) => meta.put(&mut task.metadata),
            Reply::Message(message) => meta.put(&mut message.metadata),
            Reply::StatusUpdate(event) => meta.put(&mut event.metadata),
            Reply::ArtifactUpdate(event) => meta.put(&mut event.metadata),
            _ => {}
        }
        let payload = codec::encode_reply(self.dialect, &self.rpc_id, &reply);
        self.bus
            .publish(&self.reply_to, payload, QoS::AtLeastOnce, false)
            .await?;
        Ok(())
    }
}

/// Folds an artifact event into the task: a new artifact, a replacement, or appended parts.
pub(crate) fn merge_artifact(task: &mut Task, artifact: &Artifact, append: bool) {
    let artifacts = task.artifacts.get_or_insert_with(Vec::new);
    match artifacts
        .iter_mut()
        .find(|a| a.artifact_id == artifact.artifact_id)
    {
        Some(existing) if append => existing.parts.extend(artifact.parts.iter().cloned()),
        Some(existing) => *existing = artifact.clone(),
        None => artifacts.push(artifact.clone()),
    }
}
