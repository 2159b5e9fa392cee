//! The reply stream of one request: every event of a task, in order, on its reply topic.
//!
//! An [`Emitter`] keeps the task as it evolves (status, history, artifacts) and publishes each
//! change as an event in the request's dialect, numbered by `_mesh.seq` and tagged with the
//! instance id. The task itself is announced lazily, at the first event or when the handler
//! has run for a moment without one, so that a handler that answers at once with a direct
//! message never creates one. For `message/send` requests (non-streaming) only the final
//! answer is published, preceded by one progress snapshot when the task runs long
//! (docs/protocol.md, section 3.1); a request that asked for it (`_mesh.streamAfterProgress`)
//! then goes on as a stream, every later event published as it is made. Either way the
//! requester hears from the instance within that moment, which tells it the request was
//! taken up. Publishing holds an async lock, so events leave in the order they were made
//! even when a handler emits from several tasks. A request that asked for flow control has
//! each event wait for the requester's credit before it is published ([`FlowGate`]).

use crate::flow_gate::FlowGate;
use mesh_core::bus::{Bus, BusError, QoS};
use mesh_core::codec;
use mesh_core::dialect::{Dialect, Method};
use mesh_core::error::A2aError;
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::meta::MeshMeta;
use mesh_core::model::{
    Artifact, Message, Part, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent, is_final_state,
};
use mesh_core::rpc::Reply;
use mesh_core::sync::MutexExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Why an event could not be emitted.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    /// The task already ended; nothing more can be said about it.
    #[error("the task has already ended")]
    Closed,
    /// The bus refused the publish.
    #[error("publishing on the bus failed: {0}")]
    Bus(#[from] BusError),
    /// An event was too large for the bus: the task failed in its place (with a status
    /// message that says so).
    #[error(
        "an event of {size} bytes is larger than the bus carries ({max} bytes): the task failed"
    )]
    TooLarge {
        /// The event's packet size.
        size: usize,
        /// The bus's limit.
        max: usize,
    },
}

struct State {
    /// The task as it evolves: shared with the handler's snapshot of it until the first
    /// change, which copies it only while the handler still holds that snapshot (a handler
    /// that answers and returns has dropped it, so its task is never copied), and then
    /// without the history its requester keeps ([`State::task_mut`]).
    task: Arc<Task>,
    /// The task as the turn began, once `task` was copied without the history the requester
    /// keeps: its history goes before the copy's, which holds what this turn added.
    turn_start: Option<Arc<Task>>,
    next_seq: u64,
    announced: bool,
    closed: bool,
    /// Every event is published as it is made (a streaming request, or a `message/send`
    /// whose progress response asked to go on as a stream); otherwise only the outcome.
    streams: bool,
    /// Flow control, when the request asked for it.
    flow: Option<FlowGate>,
}

impl State {
    /// The state of a task nothing was said of yet.
    fn new(task: Arc<Task>, streams: bool) -> State {
        State {
            task,
            turn_start: None,
            next_seq: 0,
            announced: false,
            closed: false,
            streams,
            flow: None,
        }
    }

    /// The task, to change. While the handler's snapshot still shares it, it is copied first:
    /// without its history when the requester keeps that (`keeps_history`), since no event
    /// writes it again and the snapshot holds it (see [`State::turn_start`]).
    fn task_mut(&mut self, keeps_history: bool) -> &mut Task {
        if keeps_history && self.turn_start.is_none() && Arc::get_mut(&mut self.task).is_none() {
            let start = &self.task;
            let copy = Task {
                id: start.id.clone(),
                context_id: start.context_id.clone(),
                status: start.status.clone(),
                artifacts: start.artifacts.clone(),
                history: None,
                metadata: start.metadata.clone(),
            };
            self.turn_start = Some(std::mem::replace(&mut self.task, Arc::new(copy)));
        }
        Arc::make_mut(&mut self.task)
    }

    /// How many entries of the task's history this turn added, of which the requester keeps
    /// the first `kept`.
    fn added_history(&self, kept: usize) -> usize {
        let len = self.task.history.as_ref().map_or(0, Vec::len);
        match self.turn_start {
            Some(_) => len,
            None => len.saturating_sub(kept),
        }
    }

    /// The whole task as it stands (the history as the turn began put back before this
    /// turn's when it was left out).
    fn whole_task(&self) -> Arc<Task> {
        let Some(start) = &self.turn_start else {
            return self.task.clone();
        };
        let mut task = Task::clone(&self.task);
        let mut history = start.history.clone().unwrap_or_default();
        history.extend(task.history.take().unwrap_or_default());
        task.history = (!history.is_empty()).then_some(history);
        Arc::new(task)
    }
}

/// Publishes the events of one task to its requester.
pub(crate) struct Emitter {
    bus: Bus,
    reply_to: String,
    dialect: Dialect,
    rpc_id: JsonRpcId,
    instance: String,
    /// The request asked that the task go on as a stream after its progress response
    /// (`_mesh.streamAfterProgress`, for a `message/send`).
    stream_after_progress: bool,
    /// The task's progress moment has passed (the runner called [`Emitter::progress`]).
    progress_due: AtomicBool,
    /// The flow control of the stream the task goes on as, handed over at the progress
    /// moment while another operation held the state ([`Emitter::opening`] takes it).
    flow_after_progress: std::sync::Mutex<Option<FlowGate>>,
    /// How many entries of the task's history its requester keeps (`_mesh.keepsHistory`: the
    /// history as this turn began), which whole-task events leave out.
    kept_history: Option<usize>,
    state: tokio::sync::Mutex<State>,
}

/// The payloads one operation publishes, in order (at most three: the task announcement, the
/// working status, the event itself). Built synchronously under the lock, so that the only
/// thing an operation awaits is the bus, and its future stays small.
type Outbox = Vec<Vec<u8>>;

impl Emitter {
    pub(crate) fn new(
        bus: Bus,
        reply_to: String,
        dialect: Dialect,
        rpc_id: JsonRpcId,
        instance: String,
        streaming: bool,
        task: Arc<Task>,
    ) -> Emitter {
        Emitter {
            bus,
            reply_to,
            dialect,
            rpc_id,
            instance,
            stream_after_progress: false,
            progress_due: AtomicBool::new(false),
            flow_after_progress: std::sync::Mutex::new(None),
            kept_history: None,
            state: tokio::sync::Mutex::new(State::new(task, streaming)),
        }
    }

    /// This emitter for a `message/send` that asked to go on as a stream once its progress
    /// response is out (`_mesh.streamAfterProgress`; the runner decides, for sends only).
    pub(crate) fn with_stream_after_progress(mut self, asked: bool) -> Emitter {
        self.stream_after_progress = asked;
        self
    }

    /// This emitter with its events held back by `flow` (the request asked for flow control).
    pub(crate) fn with_flow(mut self, flow: Option<FlowGate>) -> Emitter {
        self.state.get_mut().flow = flow;
        self
    }

    /// This emitter for a requester that keeps the first `kept` entries of the task's
    /// history (`None`: it keeps nothing).
    pub(crate) fn with_kept_history(mut self, kept: Option<usize>) -> Emitter {
        self.kept_history = kept;
        self
    }

    /// The task as it stands.
    pub(crate) async fn task(&self) -> Arc<Task> {
        self.state.lock().await.whole_task()
    }

    /// The task, to change (see [`State::task_mut`]).
    fn task_mut<'a>(&self, guard: &'a mut State) -> &'a mut Task {
        guard.task_mut(self.kept_history.is_some())
    }

    /// A status change, with an optional agent message.
    pub(crate) async fn status(
        &self,
        state: TaskState,
        message: Option<Message>,
    ) -> Result<(), EmitError> {
        let mut guard = self.state.lock().await;
        let outbox = self.status_events(&mut guard, state, message)?;
        self.send(&mut guard, outbox).await
    }

    fn status_events(
        &self,
        guard: &mut State,
        state: TaskState,
        message: Option<Message>,
    ) -> Result<Outbox, EmitError> {
        if guard.closed {
            return Err(EmitError::Closed);
        }
        // A working status announces the task itself: no `working` update before it.
        let mut outbox = self.opening(guard, state == TaskState::Working);
        let task = self.task_mut(guard);
        let message = message.map(|m| bind(task, m));
        // As the A2A SDKs do: the status message being replaced becomes history.
        if let Some(previous) = task.status.message.take() {
            task.history.get_or_insert_with(Vec::new).push(previous);
        }
        let is_final = is_final_state(&state);
        task.status = TaskStatus {
            state,
            message,
            timestamp: Some(chrono::Utc::now()),
        };
        if is_final {
            guard.closed = true;
        }
        if guard.streams {
            let event = TaskStatusUpdateEvent {
                task_id: guard.task.id.clone(),
                context_id: guard.task.context_id.clone(),
                status: guard.task.status.clone(),
                metadata: None,
            };
            outbox.push(self.encode(guard, Reply::StatusUpdate(event)));
        } else if is_final {
            outbox.push(self.encode_task(guard));
        }
        Ok(outbox)
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
        let mut outbox = self.opening(&mut guard, false);
        // The event is written first, then its artifact moves into the task: no copy.
        let artifact = if guard.streams {
            let mut event = Reply::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: guard.task.id.clone(),
                context_id: guard.task.context_id.clone(),
                artifact,
                append: Some(append),
                last_chunk: Some(last_chunk),
                metadata: None,
            });
            outbox.push(self.encode_in_place(&mut guard, &mut event));
            match event {
                Reply::ArtifactUpdate(event) => event.artifact,
                _ => unreachable!("the event made above"),
            }
        } else {
            artifact
        };
        merge_artifact(self.task_mut(&mut guard), artifact, append);
        self.send(&mut guard, outbox).await
    }

    /// A direct message answer, with no task. Only valid before anything was announced;
    /// afterwards the message completes the task instead.
    pub(crate) async fn reply(&self, mut message: Message) -> Result<(), EmitError> {
        let mut guard = self.state.lock().await;
        let outbox = if guard.announced {
            self.status_events(&mut guard, TaskState::Completed, Some(message))?
        } else {
            if guard.closed {
                return Err(EmitError::Closed);
            }
            guard.closed = true;
            message.context_id = Some(guard.task.context_id.clone());
            vec![self.encode(&mut guard, Reply::Message(message))]
        };
        self.send(&mut guard, outbox).await
    }

    /// Tells the requester, once, that this instance runs the task: for a non-streaming
    /// request the task as it stands (after which a request that asked for it goes on as a
    /// stream); for a streaming one the task's announcement, if the handler has not said
    /// anything yet (a handler that answers later with a direct message then completes the
    /// announced task with it).
    ///
    /// Never waits for the lock: the runner calls this between polls of the handler, so a
    /// handler that holds the lock while its publish waits for room on the bus would never
    /// let it go; and whoever holds it is emitting, which tells the requester as much (the
    /// next event then goes as the progress response would have: [`Emitter::opening`]).
    /// `flow`: the flow control of the stream a `message/send` goes on as.
    pub(crate) async fn progress(&self, flow: Option<FlowGate>) -> Result<(), EmitError> {
        let Ok(mut guard) = self.state.try_lock() else {
            if flow.is_some() {
                *self.flow_after_progress.locked() = flow;
            }
            self.progress_due.store(true, Ordering::Release);
            return Ok(());
        };
        self.progress_due.store(true, Ordering::Release);
        if guard.closed || (guard.streams && guard.announced) {
            return Ok(());
        }
        let mut outbox = self.announce(&mut guard, false);
        if !guard.streams {
            outbox.push(self.encode_task(&mut guard));
            self.go_on_as_stream(&mut guard, flow);
        }
        self.send(&mut guard, outbox).await
    }

    /// After the progress response: a request that asked for it goes on as a stream.
    fn go_on_as_stream(&self, guard: &mut State, flow: Option<FlowGate>) {
        if self.stream_after_progress {
            guard.streams = true;
            guard.flow = flow;
        }
    }

    /// What goes before an event: the task's announcement ([`Emitter::announce`]), and for a
    /// request that asked to go on as a stream after its progress response, when the
    /// progress moment passed while this emitter was busy (so that the runner could not
    /// send it), that response: the task as it stands, after which this event and every
    /// later one are published as they are made.
    fn opening(&self, guard: &mut State, working_next: bool) -> Outbox {
        let mut outbox = self.announce(guard, working_next);
        if self.stream_after_progress && !guard.streams && self.progress_due.load(Ordering::Acquire)
        {
            outbox.push(self.encode_task(guard));
            let flow = self.flow_after_progress.locked().take();
            self.go_on_as_stream(guard, flow);
        }
        outbox
    }

    /// An error answer (the request could not be served); closes the stream.
    pub(crate) async fn error(&self, error: &A2aError) -> Result<(), EmitError> {
        let mut guard = self.state.lock().await;
        if guard.closed {
            return Err(EmitError::Closed);
        }
        guard.closed = true;
        let payload = codec::encode_error(self.dialect, Some(&self.rpc_id), error);
        self.send_payloads(&mut guard, vec![payload], false).await
    }

    /// Announces the task (state submitted, then working) before its first event: the
    /// payloads to publish first (none for a non-streaming request, which only moves to
    /// working). `working_next`: that event is a working status update, which says what
    /// the announcement's own would (one message less on the bus, one event less for every
    /// subscriber and log).
    fn announce(&self, guard: &mut State, working_next: bool) -> Outbox {
        let mut outbox = Outbox::new();
        if guard.announced {
            return outbox;
        }
        guard.announced = true;
        let working = TaskStatus {
            state: TaskState::Working,
            message: None,
            timestamp: Some(chrono::Utc::now()),
        };
        if !guard.streams {
            self.task_mut(guard).status = working;
            return outbox;
        }
        if self.dialect != Dialect::V0_1 {
            // 0.1 streams carry status and artifact updates only.
            outbox.push(self.encode_task(guard));
        }
        if working_next {
            self.task_mut(guard).status = working;
            return outbox;
        }
        self.task_mut(guard).status = working.clone();
        let event = TaskStatusUpdateEvent {
            task_id: guard.task.id.clone(),
            context_id: guard.task.context_id.clone(),
            status: working,
            metadata: None,
        };
        outbox.push(self.encode(guard, Reply::StatusUpdate(event)));
        outbox
    }

    /// The next event's `_mesh` (instance and position in the stream).
    fn next_meta(&self, guard: &mut State) -> MeshMeta {
        let meta = MeshMeta {
            instance: Some(self.instance.clone()),
            seq: Some(guard.next_seq),
            ..Default::default()
        };
        guard.next_seq += 1;
        meta
    }

    /// An event in the request's dialect, numbered.
    fn encode(&self, guard: &mut State, mut reply: Reply) -> Vec<u8> {
        self.encode_in_place(guard, &mut reply)
    }

    /// [`Emitter::encode`] of a reply the caller keeps (its metadata may then hold the
    /// `_mesh`). A stream event's `_mesh` is written from the fields where the codec can.
    fn encode_in_place(&self, guard: &mut State, reply: &mut Reply) -> Vec<u8> {
        let meta = self.next_meta(guard);
        if let Some(payload) =
            codec::encode_event_with_mesh(self.dialect, &self.rpc_id, reply, &meta)
        {
            return payload;
        }
        match reply {
            Reply::Task(task) => meta.put(&mut task.metadata),
            Reply::Message(message) => meta.put(&mut message.metadata),
            Reply::StatusUpdate(event) => meta.put(&mut event.metadata),
            Reply::ArtifactUpdate(event) => meta.put(&mut event.metadata),
            _ => {}
        }
        codec::encode_reply(self.dialect, &self.rpc_id, reply)
    }

    /// The task as it stands, as an event, written from the state without copying the task:
    /// its `_mesh` is put in for the write, and its metadata restored after. A requester that
    /// keeps the history gets only the entries after those it keeps.
    fn encode_task(&self, guard: &mut State) -> Vec<u8> {
        let mut meta = self.next_meta(guard);
        meta.history_from = self.kept_history.map(|kept| kept as u64);
        let view = |guard: &State| match self.kept_history {
            Some(kept) => codec::TaskView::history(Some(guard.added_history(kept))),
            None => codec::TaskView::WHOLE,
        };
        // SendMessage's answer is the task's shape in every dialect (wrapped in 1.0). The
        // common case: `_mesh` written straight from its fields.
        if let Some(payload) = codec::encode_task_with_mesh(
            Method::SendMessage,
            self.dialect,
            &self.rpc_id,
            &guard.task,
            view(guard),
            &meta,
        ) {
            return payload;
        }
        // The task's own `_mesh` (dialect-preservation fields) merged with this one, for the
        // write only.
        self.task_mut(guard);
        let view = view(guard);
        let task = Arc::make_mut(&mut guard.task);
        let metadata = task.metadata.clone();
        meta.put(&mut task.metadata);
        let payload =
            codec::encode_task(Method::SendMessage, self.dialect, &self.rpc_id, task, view);
        task.metadata = metadata;
        payload
    }

    /// Publishes the payloads in order, holding the lock, so that events leave in the order
    /// they were made. An event too large for the bus ends the task instead: see
    /// [`Emitter::fail_too_large`].
    ///
    /// Every payload of `outbox` is numbered (the last ones made), unless `numbered` is false
    /// (an error answer, which has no position): the failure then takes the position of the
    /// event it replaces, and the unsent events after it give theirs back, so that the
    /// requester sees no position missing before the end (which it would report as events
    /// lost on the way).
    async fn send(&self, guard: &mut State, outbox: Outbox) -> Result<(), EmitError> {
        self.send_payloads(guard, outbox, true).await
    }

    async fn send_payloads(
        &self,
        guard: &mut State,
        outbox: Outbox,
        numbered: bool,
    ) -> Result<(), EmitError> {
        let first_seq = guard.next_seq.saturating_sub(outbox.len() as u64);
        for (index, payload) in outbox.into_iter().enumerate() {
            if numbered && let Some(flow) = guard.flow.as_mut() {
                flow.admit(first_seq + index as u64).await;
            }
            let published = self
                .bus
                .publish(&self.reply_to, payload, QoS::AtLeastOnce, false)
                .await;
            if let Err(BusError::PayloadTooLarge { size, max }) = published {
                if numbered {
                    guard.next_seq = first_seq + index as u64;
                }
                return self.fail_too_large(guard, size, max).await;
            }
            published?;
        }
        Ok(())
    }

    /// An event of `size` bytes did not fit the bus (at most `max`): the task fails in its
    /// place, with a status message that says so, in an event that fits (a status update, or
    /// for a non-streaming request the task without its history and artifacts, which the
    /// requester already has or cannot get). Later events of the handler are refused
    /// ([`EmitError::Closed`]); the instance goes on serving other requests.
    async fn fail_too_large(
        &self,
        guard: &mut State,
        size: usize,
        max: usize,
    ) -> Result<(), EmitError> {
        tracing::warn!(task = %guard.task.id, size, max, "an event is too large for the bus: the task fails");
        guard.closed = true;
        guard.announced = true;
        let text = format!(
            "the agent's reply of {size} bytes is larger than the bus carries ({max} bytes, its \
             max_packet_size): the task failed"
        );
        let mut message = Message::new(mesh_core::model::Role::Agent, vec![Part::text(text)]);
        let task = self.task_mut(guard);
        message = bind(task, message);
        task.status = TaskStatus {
            state: TaskState::Failed,
            message: Some(message),
            timestamp: Some(chrono::Utc::now()),
        };
        let payload = if guard.streams {
            let event = TaskStatusUpdateEvent {
                task_id: guard.task.id.clone(),
                context_id: guard.task.context_id.clone(),
                status: guard.task.status.clone(),
                metadata: None,
            };
            self.encode(guard, Reply::StatusUpdate(event))
        } else {
            let task = self.task_mut(guard);
            task.history = None;
            task.artifacts = None;
            self.encode_task(guard)
        };
        self.bus
            .publish(&self.reply_to, payload, QoS::AtLeastOnce, false)
            .await?;
        Err(EmitError::TooLarge { size, max })
    }
}

fn bind(task: &Task, mut message: Message) -> Message {
    message.task_id = Some(task.id.clone());
    message.context_id = Some(task.context_id.clone());
    message
}

/// Folds an artifact event into the task: a new artifact, a replacement, or appended parts.
pub(crate) fn merge_artifact(task: &mut Task, artifact: Artifact, append: bool) {
    let artifacts = task.artifacts.get_or_insert_with(Vec::new);
    match artifacts
        .iter_mut()
        .find(|a| a.artifact_id == artifact.artifact_id)
    {
        Some(existing) if append => existing.parts.extend(artifact.parts),
        Some(existing) => *existing = artifact,
        None => artifacts.push(artifact),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::model::Role;

    fn said(role: Role, text: &str) -> Message {
        Message::new(role, vec![Part::text(text)])
    }

    fn texts(task: &Task) -> Vec<Option<&str>> {
        task.history
            .iter()
            .flatten()
            .map(|m| m.parts[0].as_text())
            .collect()
    }

    fn asked() -> Task {
        Task {
            id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: None,
            },
            artifacts: None,
            history: Some(vec![said(Role::User, "question")]),
            metadata: None,
        }
    }

    #[tokio::test]
    async fn a_progress_moment_that_finds_the_emitter_busy_switches_at_its_next_event() {
        let broker = mesh_testkit::TestBroker::embedded().await;
        let bus = Bus::connect(broker.bus_config()).await.unwrap();
        let reply_to = format!("{}/replies", mesh_testkit::fresh_namespace());
        let mut replies = bus.subscribe(&reply_to, QoS::AtLeastOnce).await.unwrap();
        let emitter = Emitter::new(
            bus.clone(),
            reply_to,
            Dialect::V0_3,
            JsonRpcId::String("r1".into()),
            "i1".into(),
            false,
            Arc::new(asked()),
        )
        .with_stream_after_progress(true);
        // Another operation holds the state at the progress moment: nothing goes out then.
        let busy = emitter.state.lock().await;
        emitter.progress(None).await.unwrap();
        drop(busy);
        // The next event brings the progress response first, then goes as a stream event.
        let artifact = crate::context::new_artifact(None, vec![Part::text("chunk")]);
        emitter.artifact(artifact, false, true).await.unwrap();
        emitter.status(TaskState::Completed, None).await.unwrap();
        let mut kinds = Vec::new();
        for expected_seq in 0..3 {
            let message = tokio::time::timeout(mesh_testkit::WAIT, replies.recv())
                .await
                .expect("an event in time")
                .unwrap();
            let (_, reply) = codec::decode_reply(&message.payload, Dialect::V0_3).unwrap();
            let mut reply = reply.unwrap();
            let meta = mesh_core::requester::strip_reply_meta(&mut reply);
            assert_eq!(meta.seq, Some(expected_seq));
            kinds.push(match reply {
                Reply::Task(task) => format!("task {:?}", task.status.state),
                Reply::ArtifactUpdate(update) => format!("artifact {:?}", update.last_chunk),
                Reply::StatusUpdate(update) => format!("status {:?}", update.status.state),
                other => format!("{other:?}"),
            });
        }
        assert_eq!(
            kinds,
            ["task Working", "artifact Some(true)", "status Completed"]
        );
    }

    #[test]
    fn a_change_under_the_handlers_snapshot_copies_the_task_without_the_kept_history() {
        let snapshot = Arc::new(asked());
        let mut kept = State::new(snapshot.clone(), false);
        let answer = said(Role::Agent, "answer");
        kept.task_mut(true)
            .history
            .get_or_insert_with(Vec::new)
            .push(answer);
        assert!(Arc::ptr_eq(kept.turn_start.as_ref().unwrap(), &snapshot));
        assert_eq!(
            texts(&kept.task),
            [Some("answer")],
            "the question is not copied"
        );
        assert_eq!(kept.added_history(1), 1);
        assert_eq!(
            texts(&kept.whole_task()),
            [Some("question"), Some("answer")]
        );
        assert_eq!(texts(&snapshot), [Some("question")], "the snapshot stays");

        // A requester that keeps nothing: the whole task is copied, as it must be written.
        let mut whole = State::new(snapshot.clone(), false);
        whole.task_mut(false).status.state = TaskState::Working;
        assert!(whole.turn_start.is_none());
        assert_eq!(texts(&whole.task), [Some("question")]);
        assert_eq!(whole.added_history(0), 1);

        // A handler that let go of its snapshot: the task changes in place.
        drop(snapshot);
        let mut alone = State::new(Arc::new(asked()), false);
        alone.task_mut(true).status.state = TaskState::Working;
        assert!(alone.turn_start.is_none());
        assert_eq!(alone.added_history(1), 0);
        assert_eq!(texts(&alone.whole_task()), [Some("question")]);
    }
}
