//! One message through the task lifecycle: resolve the task, run the handler, end the task.
//!
//! The runner resolves which task a message belongs to (a new one, or the snapshot of an
//! interrupted one that the requester carried), refuses what the spec refuses (a message to a
//! terminal task: UnsupportedOperation), runs the handler (in the request's own tokio task,
//! catching a panic so that it fails only this task), and races it against cancellation and
//! the request's deadline.
//! Whatever happens, the task ends with exactly one final event.

use crate::agent::InstanceState;
use crate::context::TaskContext;
use crate::emitter::Emitter;
use crate::flow_gate::{CreditSender, FlowGate};
use crate::handler::{Outcome, agent_text};
use crate::peer::Peers;
use mesh_core::codec;
use mesh_core::dialect::{Dialect, Method};
use mesh_core::error::A2aError;
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::meta::MeshMeta;
use mesh_core::model::{Message, SendMessageRequest, Task, TaskState, TaskStatus, state_name};
use mesh_core::sync::MutexExt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a request runs before the requester is told which instance has it (the task
/// snapshot of a non-streaming request, the announcement of a streaming one).
const PROGRESS_AFTER: Duration = Duration::from_millis(100);

/// How long a canceled handler may go on cleaning up before it is aborted.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// A task running on this instance, as the cancel listener sees it.
pub(crate) struct Running {
    pub(crate) cancel: CancellationToken,
    /// Cancel requests waiting for the canceled task: (reply topic, JSON-RPC id, dialect).
    pub(crate) cancel_waiters: std::sync::Mutex<Vec<(String, JsonRpcId, Dialect)>>,
    /// Where the requester's credits go, when the request asked for flow control: set as
    /// the task starts for a stream, and at its progress moment for a `message/send` that
    /// goes on as one then (a short task never makes its gate).
    pub(crate) credit: OnceLock<CreditSender>,
    /// Set once the task's end is decided, before its final event is published: a requester
    /// may read that event and send the task's next message (an answer to `input-required`)
    /// before this run has left the running tasks, and that message starts a new run.
    pub(crate) ending: AtomicBool,
}

/// A send request, decoded, with its `_mesh` metadata already taken out.
pub(crate) struct SendRequest {
    pub(crate) rpc_id: JsonRpcId,
    pub(crate) method: Method,
    pub(crate) dialect: Dialect,
    pub(crate) params: SendMessageRequest,
    pub(crate) meta: MeshMeta,
    pub(crate) reply_to: String,
}

/// A task whose handler is ready to run: what [`drive`] needs, and nothing more (the request
/// itself is consumed by [`start`], so the per-request future stays small).
pub(crate) struct Started {
    emitter: Arc<Emitter>,
    handle: CatchPanic<Box<HandlerResult>>,
    running: Arc<Running>,
    cancel: CancellationToken,
    task_id: String,
    time_left: Duration,
    /// The flow-control window of a `message/send` that goes on as a stream after its
    /// progress response: its gate is made then.
    window_after_progress: Option<u32>,
}

type HandlerResult = Result<Outcome, crate::handler::HandlerError>;

/// Starts a send request: resolves its task, registers it as running, and builds the
/// handler's future (not yet polled). A request refused before its task starts gives the
/// error to answer with, and the emitter to answer through.
pub(crate) fn start(
    shared: &Arc<InstanceState>,
    request: SendRequest,
) -> Result<Started, (Arc<Emitter>, A2aError)> {
    let streaming = request.method == Method::SendStreamingMessage;
    let SendRequest {
        rpc_id,
        dialect,
        params,
        mut meta,
        reply_to,
        ..
    } = request;
    let keeps_history = meta.keeps_history == Some(true);
    // A `message/send` may ask to go on as a stream once its progress response is out.
    let stream_after_progress = !streaming && meta.stream_after_progress == Some(true);
    // Called once, on whichever path the request takes: it keeps the reply topic and the id.
    let emitter = move |task: Arc<Task>, flow: Option<FlowGate>| {
        // The requester keeps the history as the turn begins: the resumed task's, the
        // question, this message.
        let kept = keeps_history.then(|| task.history.as_ref().map_or(0, Vec::len));
        Arc::new(
            Emitter::new(
                shared.bus.clone(),
                reply_to,
                dialect,
                rpc_id,
                shared.instance.clone(),
                streaming,
                task,
            )
            .with_flow(flow)
            .with_kept_history(kept)
            .with_stream_after_progress(stream_after_progress),
        )
    };

    if let Err(error) = check_envelope(&meta, shared.config.max_call_depth) {
        return Err((emitter(Arc::new(empty_task()), None), error));
    }
    let snapshot = meta.task.take();
    let (task, resumed) = match resolve_task(snapshot, &meta, dialect, params.message) {
        Ok(resolved) => resolved,
        Err(error) => return Err((emitter(Arc::new(empty_task()), None), error)),
    };
    let depth = meta.depth.unwrap_or(0);

    let task_id = task.id.clone();
    let cancel = CancellationToken::new();
    let time_left = meta
        .time_left()
        .unwrap_or(shared.config.default_timeout)
        .min(shared.config.max_timeout);
    let window = meta.window.filter(|w| *w > 0);
    let (flow, credit) = match window.filter(|_| streaming) {
        Some(window) => {
            let deadline = tokio::time::Instant::now() + time_left;
            let (gate, credit) = FlowGate::new(window, deadline, cancel.clone());
            (Some(gate), OnceLock::from(credit))
        }
        None => (None, OnceLock::new()),
    };
    let window_after_progress = window.filter(|_| stream_after_progress);
    let running = Arc::new(Running {
        cancel: cancel.clone(),
        cancel_waiters: Default::default(),
        credit,
        ending: AtomicBool::new(false),
    });
    let already_running = {
        let mut tasks = shared.lock_running();
        let busy = tasks
            .get(&task_id)
            .is_some_and(|run| !run.ending.load(Ordering::Acquire));
        if !busy {
            tasks.insert(task_id.clone(), running.clone());
        }
        busy
    };
    if already_running {
        let error = A2aError::unsupported_operation(format!(
            "task {task_id} is still running; wait for it to end or cancel it"
        ));
        return Err((emitter(Arc::new(task), None), error));
    }

    // The handler's snapshot and the emitter's task are one until the emitter's first change.
    let task = Arc::new(task);
    let emitter = emitter(task.clone(), flow);
    let principal = meta.caller.as_ref().and_then(|c| c.principal.clone());
    let ctx = TaskContext {
        snapshot: task,
        resumed,
        caller: meta.caller,
        emitter: emitter.clone(),
        cancel: cancel.clone(),
        peers: Peers {
            requester: shared.requester.clone(),
            directory: shared.directory.clone(),
            depth,
            max_depth: shared.config.max_call_depth,
            parent: cancel.clone(),
            time_left,
            principal,
        },
    };
    let handler = shared.handler.clone();
    Ok(Started {
        emitter,
        handle: CatchPanic(Box::pin(async move { Box::new(handler.handle(ctx).await) })),
        running,
        cancel,
        task_id,
        time_left,
        window_after_progress,
    })
}

/// Runs a started task to its end: the handler raced against cancellation and the deadline,
/// then exactly one final event, then the answers to cancel requests waiting for it.
///
/// Its future is held (boxed) by every task in flight for as long as the task runs, so what
/// it holds across the race is kept small: one timer for both the progress moment and the
/// deadline, the handler's result boxed, and what is awaited once (the progress event, the
/// end) boxed and made in statements of their own (a temporary lives to the end of its
/// statement, and one alive across an await takes room in the future even once moved).
pub(crate) async fn drive(shared: Arc<InstanceState>, started: Started) {
    let Started {
        emitter,
        mut handle,
        running,
        cancel,
        task_id,
        time_left,
        window_after_progress,
    } = started;
    // One reading of the clock for both moments (a year stands for a time past any
    // deadline, as `sleep` does for a duration it cannot add).
    let now = tokio::time::Instant::now();
    let at = |after| {
        now.checked_add(after)
            .unwrap_or_else(|| now + Duration::from_secs(365 * 86_400))
    };
    let deadline = at(time_left);
    let progress_at = at(PROGRESS_AFTER);
    // The progress moment first, then the deadline (which may come first).
    let timer = tokio::time::sleep_until(progress_at.min(deadline));
    tokio::pin!(timer);
    let mut progress_sent = progress_at >= deadline;

    let end = loop {
        tokio::select! {
            // The handler first: one that finishes on its first poll (most do) ends the task
            // before the timer is polled, and an unpolled timer costs nothing (a polled one
            // registers with the runtime's timer, which may wake its driver through a syscall).
            biased;
            joined = &mut handle => break End::Joined(joined),
            _ = cancel.cancelled() => break End::Canceled,
            _ = &mut timer => {
                if progress_sent {
                    break End::DeadlineExceeded;
                }
                progress_sent = true;
                timer.as_mut().reset(deadline);
                // A send that goes on as a stream: its gate, and where its credits go.
                let flow = window_after_progress.map(|window| {
                    let (gate, credit) = FlowGate::new(window, deadline, cancel.clone());
                    let _ = running.credit.set(credit);
                    gate
                });
                let progress = Box::pin(emitter.progress(flow));
                if let Err(e) = progress.await {
                    tracing::warn!(error = %e, "could not publish task progress");
                }
            }
        }
    };
    // A handler that did not finish is told to stop and given a grace period; one that has
    // finished must not be polled again.
    let unfinished = !matches!(end, End::Joined(_));
    // A handler that returns once it sees the cancel still ends a canceled task.
    let end = match end {
        End::Joined(_) if cancel.is_cancelled() => End::Canceled,
        end => end,
    };
    if unfinished {
        cancel.cancel(); // reaches the handler and the sub-tasks of its peer calls
        // The handler may see the cancel and clean up for a moment; then it is aborted.
        tokio::spawn(async move {
            // Dropped unfinished when the grace is over: that aborts it.
            let _ = tokio::time::timeout(CANCEL_GRACE, handle).await;
        });
    }
    let finish = Box::pin(finish(
        &shared, &emitter, &running, &task_id, end, time_left,
    ));
    finish.await;
}

/// The end of a task whose end is decided: its final event, leaving the running tasks, the
/// answers to the cancel requests waiting for it.
async fn finish(
    shared: &InstanceState,
    emitter: &Emitter,
    running: &Arc<Running>,
    task_id: &str,
    end: End,
    time_left: Duration,
) {
    let ending = match end {
        End::Joined(Ok(result)) => match *result {
            Ok(outcome) => Ending::from(outcome),
            Err(error) => Ending::Status(
                TaskState::Failed,
                Some(agent_text(format!("the agent failed: {error}"))),
            ),
        },
        End::Joined(Err(reason)) => {
            tracing::error!(agent = %shared.name, task = %task_id, %reason, "handler panicked");
            Ending::Status(
                TaskState::Failed,
                Some(agent_text(format!(
                    "the agent's handler panicked: {reason}"
                ))),
            )
        }
        End::Canceled => Ending::Status(TaskState::Canceled, None),
        End::DeadlineExceeded => Ending::Status(
            TaskState::Failed,
            Some(agent_text(format!(
                "the task did not finish before its deadline ({} ms) and was canceled",
                time_left.as_millis()
            ))),
        ),
    };
    running.ending.store(true, Ordering::Release);
    let result = match ending {
        Ending::Status(state, message) => emitter.status(state, message).await,
        Ending::Reply(message) => emitter.reply(message).await,
    };
    if let Err(error) = result {
        tracing::warn!(agent = %shared.name, task = %task_id, %error, "could not publish the end of a task");
    }

    shared.task_ended(task_id, running);
    let waiters = std::mem::take(&mut *running.cancel_waiters.locked());
    if !waiters.is_empty() {
        let task = emitter.task().await;
        for (topic, id, dialect) in waiters {
            let payload = codec::encode_reply(
                dialect,
                &id,
                &mesh_core::rpc::Reply::Task(Task::clone(&task)),
            );
            if let Err(error) = shared
                .bus
                .publish(&topic, payload, mesh_core::bus::QoS::AtLeastOnce, false)
                .await
            {
                tracing::warn!(%error, "could not answer a cancel request");
            }
        }
    }
}

/// How the race between handler, cancel and deadline ended (short-lived, on the stack).
enum End {
    /// The handler returned (its result boxed: see [`drive`]), or panicked (`Err`: the
    /// panic's message).
    Joined(Result<Box<HandlerResult>, String>),
    Canceled,
    DeadlineExceeded,
}

/// How a task ends: a final (or interrupted) state with its message, or a direct message
/// answer with no task state ([`Emitter::reply`]).
enum Ending {
    Status(TaskState, Option<Message>),
    Reply(Message),
}

impl From<Outcome> for Ending {
    fn from(outcome: Outcome) -> Ending {
        match outcome {
            Outcome::Completed(message) => Ending::Status(TaskState::Completed, message),
            Outcome::InputRequired(message) => {
                Ending::Status(TaskState::InputRequired, Some(message))
            }
            Outcome::AuthRequired(message) => {
                Ending::Status(TaskState::AuthRequired, Some(message))
            }
            Outcome::Rejected(message) => Ending::Status(TaskState::Rejected, message),
            Outcome::Failed(message) => Ending::Status(TaskState::Failed, Some(message)),
            Outcome::Reply(message) => Ending::Reply(message),
        }
    }
}

/// Refuses an envelope whose values are out of range: a `deadline` or `depth` that is not a
/// non-negative integer, a deadline already past, a depth over the limit.
fn check_envelope(meta: &MeshMeta, max_depth: u32) -> Result<(), A2aError> {
    if let Some((field, value)) = meta.out_of_range() {
        return Err(A2aError::invalid_params(format!(
            "params.metadata._mesh.{field} is {value}: it must be a non-negative integer{}",
            if field == "depth" {
                " below 2^32"
            } else {
                " (milliseconds since the Unix epoch)"
            }
        )));
    }
    if let Some(deadline) = meta.deadline {
        let now = mesh_core::meta::now_millis();
        if deadline <= now {
            return Err(A2aError::invalid_params(format!(
                "params.metadata._mesh.deadline {deadline} has passed ({} ms ago): the task is not started",
                now - deadline
            )));
        }
    }
    let depth = meta.depth.unwrap_or(0);
    if depth > max_depth {
        return Err(A2aError::internal(format!(
            "call depth {depth} exceeds the limit of {max_depth}"
        )));
    }
    Ok(())
}

/// Which task a message belongs to (the `snapshot` it resumes, carried with it, or a new one),
/// and whether it resumes one.
fn resolve_task(
    snapshot: Option<Box<Task>>,
    meta: &MeshMeta,
    dialect: Dialect,
    mut message: Message,
) -> Result<(Task, bool), A2aError> {
    if let Some(snapshot) = snapshot {
        let mut task = *snapshot;
        if let Some(id) = &message.task_id
            && *id != task.id
        {
            return Err(A2aError::invalid_params(format!(
                "message.taskId {id} does not match the task carried with it ({})",
                task.id
            )));
        }
        if let Some(context) = &message.context_id
            && *context != task.context_id
        {
            return Err(A2aError::invalid_params(format!(
                "message.contextId {context} differs from the task's contextId {}",
                task.context_id
            )));
        }
        if task.status.state.is_terminal() {
            return Err(A2aError::unsupported_operation(format!(
                "task {} is {}: a task in a terminal state accepts no more messages",
                task.id,
                state_name(&task.status.state)
            )));
        }
        message.task_id = Some(task.id.clone());
        message.context_id = Some(task.context_id.clone());
        let history = task.history.get_or_insert_with(Vec::new);
        // The question the task was waiting on becomes history, before the answer to it.
        if let Some(question) = task.status.message.take() {
            history.push(question);
        }
        history.push(message);
        task.status = TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: Some(chrono::Utc::now()),
        };
        return Ok((task, true));
    }
    let id = match (&meta.task_id, &message.task_id) {
        (Some(assigned), _) => assigned.clone(),
        (None, Some(id)) if dialect == Dialect::V0_1 => id.clone(),
        (None, Some(id)) => return Err(A2aError::task_not_found(id)),
        (None, None) => uuid::Uuid::now_v7().to_string(),
    };
    let context_id = message
        .context_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    message.task_id = Some(id.clone());
    message.context_id = Some(context_id.clone());
    let task = Task {
        id,
        context_id,
        status: TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: Some(chrono::Utc::now()),
        },
        artifacts: None,
        history: Some(vec![message]),
        metadata: None,
    };
    Ok((task, false))
}

fn empty_task() -> Task {
    Task {
        id: String::new(),
        context_id: String::new(),
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

/// The handler's future, polled in the runner's own task (no task and no wake-up of its
/// own): a panic while it is polled ends it with the panic's message instead of unwinding
/// through the runner, so it fails only its task.
struct CatchPanic<R>(Pin<Box<dyn Future<Output = R> + Send>>);

impl<R> Future for CatchPanic<R> {
    type Output = Result<R, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(payload) => Poll::Ready(Err(panic_message(payload))),
        }
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".to_owned())
}
