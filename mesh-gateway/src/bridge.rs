//! The pump between the bus and HTTP: a task's [`ReplyStream`] feeds the task store and every
//! live subscriber (the client that started the task, resubscribers).
//!
//! Each running task has one [`LiveTask`]: its subscribers and a small gate (a mutex held
//! only while one event is applied to the store and handed out, never across an await), so
//! that a subscriber that takes a snapshot and subscribes under the same gate sees every event
//! exactly once after its snapshot. The pump hands each event straight into every
//! subscriber's own buffer without waiting (a burst of thousands of chunks reaches an SSE
//! client event by event however its socket keeps up); a subscriber whose buffer is full (a
//! client that stopped reading) misses events and is told so, to resynchronise from the
//! store. The pump runs in its own tokio task, independent of any HTTP connection: a client
//! that goes away does not cancel the task. `_mesh` metadata is stripped before an event
//! reaches the store or a subscriber.
//!
//! Every change of a task's status is also handed to the [`Pusher`] (when the task has push
//! configs): a non-blocking enqueue, so a slow webhook never slows the task.
//!
//! Each event goes into the store with [`TaskStore::append`] (applied and logged; see
//! [`task_events`](crate::task_events)). An event the store refuses because the task would
//! grow past its byte limit ends the task: the gateway fails it with a status message naming
//! the limit (sent to the subscribers and webhooks like any status), stops pumping, and asks
//! the agent to cancel it on the bus (without waiting for the answer).

use crate::push::Pusher;
use crate::store::{Origin, StoreError, TaskRecord, TaskStore};
pub(crate) use crate::task_events::{ends_task, set_status, status_event};
use flume::TrySendError;
use foldhash::HashMap;
use mesh_core::bus::ConnectionState;
use mesh_core::error::A2aError;
use mesh_core::model::{Artifact, Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent};
use mesh_core::requester::{Ended, ReplyStream, Requester, restore_history};
use mesh_core::rpc::Reply;
use mesh_core::sync::MutexExt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

/// How many times the gateway asks an agent to cancel a task it failed, at most (each try
/// waits the gateway's `cancel_wait` for an answer).
const CANCEL_TRIES: usize = 4;

/// How long the gateway keeps trying to cancel at the agent a task it failed, at most
/// (the broker may be away for a while).
const CANCEL_GIVE_UP: Duration = Duration::from_secs(120);

/// How many events a subscriber of a streaming task may have waiting before it misses some
/// and is resynchronised from the store. The buffer grows in blocks as events wait, so a
/// subscriber that keeps up costs little.
pub(crate) const STREAM_CAPACITY: usize = 65_536;

/// The same for the client of a blocking send: the bus carries at most a progress Task and
/// the final answer, so a small buffer does.
pub(crate) const SEND_CAPACITY: usize = 8;

/// One event of a live task: a (stripped) reply, or the error that rejected the request. The
/// reply is the allocation the store keeps in its log: one per event, shared by the store and
/// every subscriber.
pub(crate) type LiveEvent = Result<Arc<Reply>, Arc<A2aError>>;

/// A live event as references.
pub(crate) fn view(event: &LiveEvent) -> Result<&Reply, &A2aError> {
    match event {
        Ok(reply) => Ok(reply),
        Err(error) => Err(error),
    }
}

/// The whole task of `record` as an event.
pub(crate) fn task_event(record: &TaskRecord) -> LiveEvent {
    Ok(Arc::new(Reply::Task(record.task.clone())))
}

/// An event's sequence number in its task (the store's, 1, 2, … across every turn; 0 for
/// an event the store did not log: an error, or a task it no longer holds).
pub(crate) type Seq = u64;

/// What a live task's subscriber receives, in order.
pub(crate) enum Live {
    /// The next event, and its sequence number.
    Event(Seq, LiveEvent),
    /// For a subscriber that reads outcomes only ([`Reads::Outcome`]): a whole-task event
    /// that ended the turn, as the record it made (the store took the task from the event
    /// instead of copying it, since no subscriber reads the event itself).
    Ended(Seq, Arc<TaskRecord>),
    /// The subscriber's buffer was full and it missed events: resynchronise from the store.
    Lagged,
}

/// A subscriber's end of a live task: every event after its snapshot, then `None` once the
/// pump ended. Its buffer takes room only for the events waiting in it: an idle subscriber
/// costs a few hundred bytes (flume's channel; tokio's costs about 1.3 KiB before its first
/// event), one per open SSE stream.
pub(crate) struct Subscription(flume::Receiver<Live>);

impl Subscription {
    /// The next event; `None` once every sender went away and nothing is left.
    pub(crate) async fn recv(&mut self) -> Option<Live> {
        self.0.recv_async().await.ok()
    }
}

/// A subscription's two ends, with room for `capacity` events waiting.
pub(crate) fn subscription(capacity: usize) -> (flume::Sender<Live>, Subscription) {
    let (tx, rx) = flume::bounded(capacity);
    (tx, Subscription(rx))
}

/// What a subscriber reads of a live task's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reads {
    /// Every event as it came (a stream written to its client).
    Content,
    /// Only how the turn ends (a blocking send, which answers with the task as the store
    /// holds it): a whole-task or status event reaches it as [`Live::Ended`] when it ends
    /// the turn, and not at all before.
    Outcome,
}

struct Subscriber {
    tx: flume::Sender<Live>,
    reads: Reads,
    /// Missed an event; is told so before its next one.
    lagged: bool,
    /// Follows the task to its terminal state (`SubscribeToTask`, `tasks/resubscribe`):
    /// across an interrupted state it waits for the pump of the next message instead of
    /// ending with this one.
    until_terminal: bool,
}

/// How many subscribers may wait at once for the next message of one interrupted task; past
/// it a new subscription to it is refused.
pub(crate) const MAX_WAITING_SUBSCRIBERS: usize = 64;

/// How many subscribers may wait for the next message of interrupted tasks, all tasks
/// together; past it a new subscription to an interrupted task is refused.
pub(crate) const MAX_WAITING_TOTAL: usize = 10_000;

/// A task whose reply stream is being pumped.
pub(crate) struct LiveTask {
    subscribers: Mutex<Vec<Subscriber>>,
    gate: Mutex<()>,
    stop: Stop,
}

/// A live task's stop: set once (the gateway ended the task itself), awaited by its pump.
/// Inline in the task, where a `CancellationToken` would be an allocation of its own for
/// every task in flight.
#[derive(Default)]
struct Stop {
    set: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Stop {
    fn set(&self) {
        self.set.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Returns once the stop is set.
    async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        // Waiting before the check: a stop set in between still wakes it.
        notified.as_mut().enable();
        if self.is_set() {
            return;
        }
        notified.await;
    }
}

impl LiveTask {
    fn subscribe(&self, capacity: usize, until_terminal: bool, reads: Reads) -> Subscription {
        let (tx, rx) = subscription(capacity);
        self.subscribers.locked().push(Subscriber {
            tx,
            reads,
            lagged: false,
            until_terminal,
        });
        rx
    }

    /// True when a subscriber reads the events themselves, not only the turn's outcome.
    /// Forgets those that went away (as [`send`](Self::send) does): a task in flight whose
    /// events reach no one holds no channel of a client long gone (one that sent it and did
    /// not wait).
    fn read_for_content(&self) -> bool {
        let mut subscribers = self.subscribers.locked();
        subscribers.retain(|s| !s.tx.is_disconnected());
        subscribers.iter().any(|s| s.reads == Reads::Content)
    }

    /// Hands `event` to every subscriber without waiting: one whose buffer is full misses it
    /// (and is told so before its next event); one that went away is forgotten.
    fn send(&self, seq: Seq, event: LiveEvent) {
        self.subscribers.locked().retain_mut(|subscriber| {
            if subscriber.lagged {
                match subscriber.tx.try_send(Live::Lagged) {
                    Ok(()) => subscriber.lagged = false,
                    Err(TrySendError::Full(_)) => return true,
                    Err(TrySendError::Disconnected(_)) => return false,
                }
            }
            match subscriber.tx.try_send(Live::Event(seq, event.clone())) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    subscriber.lagged = true;
                    true
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }

    /// Tells every subscriber (all of them read outcomes only) that a whole-task or status
    /// event ended the turn, with the record it made. One whose buffer is full misses it and
    /// reads the task from the store when the pump ends, as after any missed event.
    fn send_ended(&self, seq: Seq, record: &Arc<TaskRecord>) {
        self.subscribers.locked().retain(|subscriber| {
            !matches!(
                subscriber.tx.try_send(Live::Ended(seq, record.clone())),
                Err(TrySendError::Disconnected(_))
            )
        });
    }
}

/// A subscription to a task: the task as it stood, and the receiver of every event after it
/// (`None`: nothing more will come).
pub(crate) type Attached = (Arc<TaskRecord>, Option<Subscription>);

/// What the pump needs to undo when the agent rejects the request before the task started.
pub(crate) enum Undo {
    /// A new task: forget it.
    Remove,
    /// A follow-up message: put the task back as it was.
    Restore(Arc<TaskRecord>),
}

/// A task's pump: feeds the store and the subscribers until the task's stream ends.
///
/// Polled in place by the request that started the task, it costs no task of its own and no
/// wake-up between tasks; whatever is left of it when it is dropped unfinished (the client
/// went away, or the answer did not wait for the end) goes on in a task of its own, so a task
/// never depends on its HTTP connection.
pub(crate) struct Pump(Option<Pin<Box<dyn Future<Output = ()> + Send>>>);

impl Pump {
    /// Lets the pump run on in a task of its own.
    pub(crate) fn detach(mut self) {
        self.spawn_rest();
    }

    /// True once the stream ended (polling it again would be a bug: [`Pump::finished`] guards
    /// it in a `select!`).
    pub(crate) fn finished(&self) -> bool {
        self.0.is_none()
    }

    fn spawn_rest(&mut self) {
        if let Some(rest) = self.0.take() {
            // Outside a runtime (the process is ending) there is nothing left to run it on.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(rest);
            }
        }
    }
}

impl Future for Pump {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(pump) = self.0.as_mut() else {
            return Poll::Ready(());
        };
        let done = pump.as_mut().poll(cx);
        if done.is_ready() {
            self.0 = None;
        }
        done
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        self.spawn_rest();
    }
}

/// The live tasks and the store they update.
pub(crate) struct Bridge {
    store: Arc<dyn TaskStore>,
    live: Mutex<HashMap<String, Arc<LiveTask>>>,
    /// The subscribers of interrupted tasks, waiting for the pump of their next message
    /// (at most [`MAX_WAITING_SUBSCRIBERS`] a task; a task leaves when it is live again, and
    /// its closed subscribers whenever it is touched). Locked after `live`.
    waiting: Mutex<HashMap<String, Vec<Subscriber>>>,
    pusher: Option<Arc<Pusher>>,
    /// Asks agents to cancel the tasks the gateway fails (how long it waits for an answer).
    canceler: Option<(Requester, std::time::Duration)>,
}

impl Bridge {
    pub(crate) fn new(
        store: Arc<dyn TaskStore>,
        pusher: Option<Arc<Pusher>>,
        canceler: Option<(Requester, std::time::Duration)>,
    ) -> Bridge {
        Bridge {
            store,
            live: Mutex::default(),
            waiting: Mutex::default(),
            pusher,
            canceler,
        }
    }

    /// Queues a push notification of `record` (as it is now) to its configs.
    pub(crate) fn notify_push(&self, record: &TaskRecord) {
        let Some(pusher) = &self.pusher else { return };
        if record.push_configs.is_empty() {
            return;
        }
        // 1.0 (§4.3.3): a StreamResponse, `{"task": …}`; 0.3 and 0.1: the bare task.
        let body = mesh_core::codec::write_stream_task_json(&record.task, record.dialect);
        pusher.notify(&record.task.id, body, record.push_configs.clone());
    }

    pub(crate) fn store(&self) -> &Arc<dyn TaskStore> {
        &self.store
    }

    fn live_map(&self) -> MutexGuard<'_, HashMap<String, Arc<LiveTask>>> {
        self.live.locked()
    }

    /// True while a pump runs for the task.
    pub(crate) fn is_live(&self, id: &str) -> bool {
        self.live_map().contains_key(id)
    }

    /// The live task, if a pump runs for it.
    pub(crate) fn live(&self, id: &str) -> Option<Arc<LiveTask>> {
        self.live_map().get(id).cloned()
    }

    /// Marks a task live and subscribes its originator, who `reads` its events (with room
    /// for `capacity` of them waiting); `None` when it already is (a second message to a
    /// running task).
    pub(crate) fn begin(
        &self,
        id: &str,
        capacity: usize,
        reads: Reads,
    ) -> Option<(Arc<LiveTask>, Subscription)> {
        let mut live = self.live_map();
        if live.contains_key(id) {
            return None;
        }
        // The subscribers that waited for this message of an interrupted task follow it.
        let adopted = self.waiting.locked().remove(id).unwrap_or_default();
        let task = Arc::new(LiveTask {
            subscribers: Mutex::new(adopted),
            gate: Mutex::new(()),
            stop: Stop::default(),
        });
        let receiver = task.subscribe(capacity, false, reads);
        live.insert(id.to_owned(), task.clone());
        Some((task, receiver))
    }

    /// Forgets a live task (its pump ended, or it never started). When the task is left
    /// interrupted (waiting for its next message), the subscribers that follow it to its
    /// terminal state wait for that message's pump; the others' streams end here.
    pub(crate) fn end(&self, id: &str, task: &Arc<LiveTask>) {
        let mut live = self.live_map();
        if !live.get(id).is_some_and(|t| Arc::ptr_eq(t, task)) {
            return;
        }
        live.remove(id);
        let interrupted = self
            .store
            .get(id)
            .is_some_and(|record| !record.task.status.state.is_terminal());
        if interrupted {
            let followers: Vec<Subscriber> = task
                .subscribers
                .locked()
                .drain(..)
                .filter(|s| s.until_terminal && !s.tx.is_disconnected())
                .collect();
            if !followers.is_empty() {
                self.waiting
                    .locked()
                    .entry(id.to_owned())
                    .or_default()
                    .extend(followers);
            }
        }
        self.store.release(id);
    }

    /// The task as it stands and a receiver of every event after that snapshot: while it is
    /// live, until its pump ends, or with `until_terminal`, until the task reaches a terminal
    /// state, across interrupted states (an interrupted task's subscriber waits for the next
    /// message). `stored`: the task as the store has it, for one that left the working set.
    /// `Err` when too many subscribers wait for the task already.
    pub(crate) fn attach(
        &self,
        id: &str,
        until_terminal: bool,
        stored: Option<&Arc<TaskRecord>>,
    ) -> Result<Option<Attached>, A2aError> {
        let live = self.live_map();
        if let Some(task) = live.get(id).cloned() {
            drop(live);
            let _gate = task.gate.locked();
            let Some(record) = self.store.get(id) else {
                return Ok(None);
            };
            return Ok(Some((
                record,
                Some(task.subscribe(STREAM_CAPACITY, until_terminal, Reads::Content)),
            )));
        }
        let Some(record) = self.store.get(id).or_else(|| stored.cloned()) else {
            return Ok(None);
        };
        if !until_terminal || record.task.status.state.is_terminal() {
            return Ok(Some((record, None)));
        }
        // Under the `live` lock, so that no pump begins between this check and the wait.
        let mut waiting = self.waiting.locked();
        // Subscribers that went away (and tasks left with none) are forgotten here: the map
        // holds open streams only.
        waiting.retain(|_, followers| {
            followers.retain(|s| !s.tx.is_disconnected());
            !followers.is_empty()
        });
        let total: usize = waiting.values().map(Vec::len).sum();
        if total >= MAX_WAITING_TOTAL {
            return Err(A2aError::internal(format!(
                "{MAX_WAITING_TOTAL} subscribers wait for interrupted tasks already: try later"
            )));
        }
        let followers = waiting.entry(id.to_owned()).or_default();
        if followers.len() >= MAX_WAITING_SUBSCRIBERS {
            return Err(A2aError::internal(format!(
                "task {id} has {MAX_WAITING_SUBSCRIBERS} subscribers waiting already: try later"
            )));
        }
        let (tx, rx) = subscription(STREAM_CAPACITY);
        followers.push(Subscriber {
            tx,
            reads: Reads::Content,
            lagged: false,
            until_terminal: true,
        });
        drop(live);
        Ok(Some((record, Some(rx))))
    }

    /// Hands the task as it now stands (changed without a pump: canceled at the gateway
    /// while it waited for input) to the subscribers waiting for its next message; a terminal
    /// task lets them go.
    pub(crate) fn release_waiting(&self, record: &TaskRecord) {
        let _live = self.live_map();
        let mut waiting = self.waiting.locked();
        let Some(followers) = waiting.get_mut(&record.task.id) else {
            return;
        };
        let event = task_event(record);
        followers.retain(|s| {
            s.tx.try_send(Live::Event(record.seq, event.clone()))
                .is_ok()
        });
        if followers.is_empty() || record.task.status.state.is_terminal() {
            waiting.remove(&record.task.id);
        }
    }

    /// The pump of `stream` (the replies to the message that started or resumed task `id`),
    /// not yet running: the caller either polls it in place (a blocking send waits for its
    /// answer anyway, so the events need no other task) or detaches it.
    ///
    /// `turn_start`: the task's sequence number before the turn's first event (the store
    /// keeps it with the turn's request: see [`TaskStore::begin_turn`]).
    pub(crate) fn pump(
        self: &Arc<Self>,
        id: String,
        live: Arc<LiveTask>,
        stream: ReplyStream,
        undo: Undo,
        turn_start: u64,
    ) -> Pump {
        self.store.begin_turn(&id, stream.request_id(), turn_start);
        let bridge = self.clone();
        // The future is boxed per task in flight and lives as long as the task: what it
        // holds is held once (by reference in `run_pump`, whose arguments by value the
        // future would keep a second copy of).
        let mut stream = stream;
        Pump(Some(Box::pin(async move {
            bridge.run_pump(&id, &live, &mut stream, &undo).await;
            bridge.end(&id, &live);
        })))
    }

    async fn run_pump(
        &self,
        id: &str,
        live: &Arc<LiveTask>,
        stream: &mut ReplyStream,
        undo: &Undo,
    ) {
        let mut started = false;
        loop {
            let delivery = tokio::select! {
                biased;
                () = live.stop.wait() => return,
                delivery = stream.next() => delivery,
            };
            let Some(delivery) = delivery else { return };
            // A request the requester gave up on while it may still run at its agent (after
            // a reconnect; an instance announced offline when only its connection dropped,
            // as when the broker restarts; one that took it late; one whose events the broker
            // dropped): the agent is asked to cancel it, so that a task the gateway failed
            // does not go on unseen.
            if matches!(
                delivery.ended,
                Some(
                    Ended::ConnectionLost
                        | Ended::InstanceOffline
                        | Ended::NotTakenUp
                        | Ended::EventsLost
                )
            ) && let Some(record) = self.store.get(id)
            {
                self.cancel_at_agent(id, &record.agent);
            }
            match delivery.reply {
                // Its `_mesh` taken out by the requester (`delivery.meta`).
                Ok(reply) => {
                    let meta = &delivery.meta;
                    let origin = Origin {
                        position: meta.seq,
                        ack: delivery.ack,
                        history_from: meta
                            .history_from
                            .filter(|_| matches!(reply, Reply::Task(_))),
                    };
                    started = true;
                    let ends = ends_task(&reply);
                    if !self.publish(id, live, reply, origin) || ends {
                        return;
                    }
                }
                Err(error)
                    if !started
                        && !matches!(delivery.ended, Some(Ended::Deadline | Ended::EventsLost)) =>
                {
                    // The agent refused the message (bad params, a task it cannot resume, …):
                    // the task did not change, the request failed.
                    let _gate = live.gate.locked();
                    match undo {
                        Undo::Remove => self.store.remove(id),
                        // Replacing a record the store holds is never refused for its bounds.
                        Undo::Restore(previous) => {
                            let _ = self.store.insert(TaskRecord::clone(previous));
                        }
                    }
                    live.send(0, Err(Arc::new(error)));
                    return;
                }
                Err(error) => {
                    tracing::warn!(task = %id, error = %error.message, "task failed on the bus");
                    let Some(record) = self.store.get(id) else {
                        return;
                    };
                    let event = status_event(&record.task, TaskState::Failed, Some(&error.message));
                    self.publish(id, live, Reply::StatusUpdate(event), Origin::default());
                    return;
                }
            }
        }
    }

    /// Puts back into a whole-task event of the agent the history it left out (the gateway
    /// asks for that: `_mesh.keepsHistory`): the entries the stored task has, the history as
    /// the turn began (a task the gateway bridges is in the store's working set). For an
    /// event that subscribers share; the store puts it back into one no one else holds.
    fn restore_history(&self, id: &str, task: &mut Task, from: u64) {
        let record = self.store.get(id);
        let known = record
            .as_ref()
            .and_then(|r| r.task.history.as_deref())
            .unwrap_or_default();
        if (restore_history(task, from, known) as u64) < from {
            tracing::warn!(task = %id, from, known = known.len(),
                "the agent left out more of the task's history than the gateway has");
        }
    }

    /// Applies one event to the store and sends it to the subscribers, under the task's gate
    /// (the one allocation of the event serves the store's log and every subscriber; a whole
    /// task or a status update that no subscriber reads for its content may move into the
    /// store's record, and ends the turn of its outcome readers as that record).
    /// False when the task was stopped meanwhile (the event is dropped), or failed because
    /// the event would take it past the store's per-task limit. `origin`: where an event from
    /// the agent came from.
    fn publish(&self, id: &str, live: &LiveTask, mut reply: Reply, mut origin: Origin) -> bool {
        let _gate = live.gate.locked();
        if live.stop.is_set() {
            return false;
        }
        let status_changed = matches!(
            reply,
            Reply::Task(_) | Reply::StatusUpdate(_) | Reply::Message(_)
        );
        let ends = ends_task(&reply);
        let shared =
            !matches!(reply, Reply::Task(_) | Reply::StatusUpdate(_)) || live.read_for_content();
        if shared && let (Reply::Task(task), Some(from)) = (&mut reply, origin.history_from.take())
        {
            self.restore_history(id, task, from);
        }
        let reply = Arc::new(reply);
        let shared = shared.then(|| reply.clone());
        let record = match self.store.append(id, reply, origin) {
            Ok(record) => {
                if status_changed {
                    self.notify_push(&record);
                }
                Some(record)
            }
            Err(StoreError::TaskTooLarge { limit, .. }) => {
                self.fail_too_large(id, live, limit);
                return false;
            }
            // The task is gone from the store (removed, or never there): the event still
            // reaches the subscribers that read it (the others find the task gone).
            Err(_) => None,
        };
        match (shared, record) {
            (Some(event), record) => live.send(record.map_or(0, |r| r.seq), Ok(event)),
            (None, Some(record)) if ends => live.send_ended(record.seq, &record),
            (None, _) => {}
        }
        true
    }

    /// Fails a task that would grow past `limit` bytes (under its gate): the failed status
    /// goes to the store, the webhooks and the subscribers, the pump stops, and the agent is
    /// asked to cancel the task.
    fn fail_too_large(&self, id: &str, live: &LiveTask, limit: usize) {
        let Some(current) = self.store.get(id) else {
            return;
        };
        let text = format!(
            "the task grew past the gateway's limit of {limit} bytes per task (store_max_task_bytes); \
             the gateway failed it and asked its agent to cancel it"
        );
        tracing::warn!(task = %id, agent = %current.agent, limit, "task failed: too large");
        let event = status_event(&current.task, TaskState::Failed, Some(&text));
        let reply = Arc::new(Reply::StatusUpdate(event));
        let seq = match self.store.append(id, reply.clone(), Origin::default()) {
            Ok(record) => {
                self.notify_push(&record);
                record.seq
            }
            Err(_) => 0,
        };
        live.send(seq, Ok(reply));
        live.stop.set();
        self.cancel_at_agent(id, &current.agent);
    }

    /// Asks `agent` to cancel task `id` on the bus, in a task of its own, without the gateway
    /// waiting for it (it has already settled the task). A cancel that no instance answers is
    /// sent again a few times ([`CANCEL_TRIES`]): after a broker restart the agent may not be
    /// subscribed again yet when the gateway's first one goes out. Only tries made while the
    /// gateway's own connection was up count (one made while it was down only waits in the
    /// client's queue), and the whole is given up after [`CANCEL_GIVE_UP`].
    fn cancel_at_agent(&self, id: &str, agent: &str) {
        if let (Some((requester, wait)), Ok(runtime)) =
            (&self.canceler, tokio::runtime::Handle::try_current())
        {
            let (requester, wait) = (requester.clone(), *wait);
            let (agent, id) = (agent.to_owned(), id.to_owned());
            runtime.spawn(async move {
                let given_up = tokio::time::timeout(
                    CANCEL_GIVE_UP,
                    cancel_until_answered(&requester, &agent, &id, wait),
                );
                if given_up.await.is_err() {
                    tracing::debug!(task = %id, "gave up asking the agent to cancel");
                }
            });
        }
    }
    /// Ends a live task here, without its agent: the task is canceled in the store, the
    /// subscribers get the final canceled status, and the pump stops.
    pub(crate) fn cancel_locally(&self, id: &str, live: &LiveTask) -> Option<Arc<TaskRecord>> {
        let record = {
            let _gate = live.gate.locked();
            if live.stop.is_set() {
                return self.store.get(id);
            }
            let current = self.store.get(id)?;
            if current.task.status.state.is_terminal() {
                return Some(current);
            }
            let event = Arc::new(Reply::StatusUpdate(status_event(
                &current.task,
                TaskState::Canceled,
                None,
            )));
            let record = self.store.append(id, event.clone(), Origin::default()).ok();
            if let Some(record) = &record {
                self.notify_push(record);
            }
            live.send(record.as_ref().map_or(0, |r| r.seq), Ok(event));
            live.stop.set();
            record
        };
        // The pump sees `stop` at once and leaves the live map.
        record
    }
}

/// Sends `agent` the cancel of task `id` until an instance answers or [`CANCEL_TRIES`] tries
/// made on a live connection went unanswered; waits for the connection before each try.
async fn cancel_until_answered(requester: &Requester, agent: &str, id: &str, wait: Duration) {
    let bus = requester.bus();
    let mut state = bus.state();
    let mut unanswered = 0;
    while unanswered < CANCEL_TRIES {
        let up = state
            .wait_for(|s| matches!(s, ConnectionState::Connected | ConnectionState::Closed))
            .await
            .is_ok_and(|s| *s == ConnectionState::Connected);
        if !up {
            return; // the gateway is shutting down
        }
        match requester.cancel(agent, id, wait).await {
            Ok(Some(_)) => return,
            // No instance answered: it counts only if the connection stayed up meanwhile.
            Ok(None) if bus.is_connected() => unanswered += 1,
            Ok(None) => {}
            Err(error) => {
                tracing::debug!(task = %id, %error, "could not ask the agent to cancel");
                if bus.is_connected() {
                    return; // not a matter of the connection: trying again would not help
                }
            }
        }
    }
}

/// The artifact-update events that carry a task's artifacts whole (for 0.1 streams, which
/// have no Task event).
pub(crate) fn artifact_events(task: &Task) -> impl Iterator<Item = TaskArtifactUpdateEvent> + '_ {
    task.artifacts
        .iter()
        .flatten()
        .map(|artifact: &Artifact| TaskArtifactUpdateEvent {
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
            artifact: artifact.clone(),
            append: Some(false),
            last_chunk: Some(true),
            metadata: None,
        })
}

/// A task as stream events: its artifacts, then its status (a 0.1 stream, which has no Task
/// event, and a Task after a stream's first event).
pub(crate) fn task_as_updates(task: &Task) -> impl Iterator<Item = Reply> + '_ {
    let status = TaskStatusUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: task.status.clone(),
        metadata: None,
    };
    artifact_events(task)
        .map(Reply::ArtifactUpdate)
        .chain(std::iter::once(Reply::StatusUpdate(status)))
}

#[cfg(test)]
mod tests {
    //! The bridge's own logic without a broker: live tasks, their subscribers, and the
    //! subscribers that wait for an interrupted task's next message.
    use super::*;
    use crate::store::{MemoryStore, StoreLimits};
    use mesh_core::dialect::Dialect;

    fn task(id: &str, state: TaskState) -> Task {
        crate::store::test_records::task(id, "c", state).task
    }

    fn bridge_with(id: &str, state: TaskState) -> Bridge {
        let store = Arc::new(MemoryStore::new(StoreLimits::default()));
        store
            .insert(TaskRecord::new(task(id, state), "agent", Dialect::V1_0))
            .expect("the store takes the task");
        Bridge::new(store, None, None)
    }

    fn event(n: usize) -> LiveEvent {
        let mut t = task("t", TaskState::Working);
        t.context_id = n.to_string();
        Ok(Arc::new(Reply::Task(t)))
    }

    /// The context id the test events carry their number in.
    fn number(live: Option<Live>) -> Option<String> {
        match live {
            Some(Live::Event(_, Ok(reply))) => match &*reply {
                Reply::Task(t) => Some(t.context_id.clone()),
                _ => None,
            },
            Some(Live::Lagged) => Some("lagged".into()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_stop_wakes_the_pump_waiting_for_it_and_is_seen_at_once_once_set() {
        let stop = Arc::new(Stop::default());
        let waiting = tokio::spawn({
            let stop = stop.clone();
            async move { stop.wait().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished() && !stop.is_set());
        stop.set();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiting pump is woken")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), stop.wait())
            .await
            .expect("a stop set before the wait is seen at once");
    }

    #[tokio::test]
    async fn a_subscriber_that_stops_reading_misses_events_and_is_told_so() {
        let bridge = bridge_with("t", TaskState::Working);
        let (live, mut first) = bridge
            .begin("t", 1, Reads::Content)
            .expect("the task begins");
        for n in 1..=3 {
            live.send(n as u64, event(n));
        }
        assert_eq!(number(first.recv().await).as_deref(), Some("1"));
        live.send(4, event(4));
        assert_eq!(number(first.recv().await).as_deref(), Some("lagged"));
        // A second message to a running task is refused.
        assert!(bridge.begin("t", 1, Reads::Content).is_none());
    }

    #[tokio::test]
    async fn an_outcome_reader_gets_the_turns_end_as_its_record_unless_someone_reads_content() {
        let whole = |state| Reply::Task(task("t", state));
        let update =
            |state| Reply::StatusUpdate(status_event(&task("t", TaskState::Working), state, None));
        // A task begun by a sender that reads its outcome only.
        let begun = || {
            let bridge = bridge_with("t", TaskState::Submitted);
            let (live, outcome) = bridge
                .begin("t", SEND_CAPACITY, Reads::Outcome)
                .expect("the task begins");
            (bridge, live, outcome)
        };
        let turns = [
            (
                whole(TaskState::Working),
                whole(TaskState::Completed),
                TaskState::Completed,
            ),
            (
                update(TaskState::Working),
                update(TaskState::InputRequired),
                TaskState::InputRequired,
            ),
        ];
        for (progress, end, end_state) in turns {
            let (bridge, live, mut outcome) = begun();
            assert!(bridge.publish("t", &live, progress, Origin::default()));
            assert!(bridge.publish("t", &live, end, Origin::default()));
            match outcome.recv().await {
                Some(Live::Ended(2, record)) => {
                    assert_eq!(record.task.status.state, end_state);
                    assert!(Arc::ptr_eq(&record, &bridge.store.get("t").unwrap()));
                }
                _ => panic!("the turn's end as the record, and no progress event before it"),
            }
        }
        // A sender that did not wait is forgotten at the next event, though none reaches it.
        let (bridge, live, outcome) = begun();
        drop(outcome);
        assert!(bridge.publish("t", &live, update(TaskState::Working), Origin::default()));
        assert!(live.subscribers.locked().is_empty());

        // Someone reads its content: every event is shared, also with the outcome reader.
        let (bridge, live, mut outcome) = begun();
        let (_, content) = bridge.attach("t", false, None).unwrap().unwrap();
        let mut content = content.expect("a live subscription");
        assert!(bridge.publish("t", &live, whole(TaskState::Completed), Origin::default()));
        for subscription in [&mut outcome, &mut content] {
            match subscription.recv().await {
                Some(Live::Event(1, Ok(reply))) => {
                    assert!(
                        matches!(&*reply, Reply::Task(t) if t.status.state == TaskState::Completed)
                    )
                }
                _ => panic!("the event itself, shared"),
            }
        }
    }

    #[tokio::test]
    async fn a_subscriber_of_an_interrupted_task_gets_the_events_of_its_next_message() {
        let bridge = bridge_with("t", TaskState::InputRequired);
        let (_, follower) = bridge
            .attach("t", true, None)
            .expect("room to wait")
            .expect("the task exists");
        let mut follower = follower.expect("a subscription");
        // The next message's pump adopts the waiting subscriber.
        let (live, _sender) = bridge
            .begin("t", 8, Reads::Content)
            .expect("the next message begins");
        live.send(7, event(7));
        assert_eq!(number(follower.recv().await).as_deref(), Some("7"));

        // Its turn ends interrupted again: the follower waits for the message after.
        bridge.end("t", &live);
        let (live, _sender) = bridge
            .begin("t", 8, Reads::Content)
            .expect("the message after begins");
        live.send(8, event(8));
        assert_eq!(number(follower.recv().await).as_deref(), Some("8"));
    }

    #[tokio::test]
    async fn waiting_subscribers_are_bounded_and_let_go_when_the_task_ends_at_the_gateway() {
        let bridge = bridge_with("t", TaskState::InputRequired);
        let mut followers: Vec<Subscription> = (0..MAX_WAITING_SUBSCRIBERS)
            .map(|_| {
                bridge
                    .attach("t", true, None)
                    .expect("room to wait")
                    .and_then(|(_, rx)| rx)
                    .expect("a subscription")
            })
            .collect();
        assert!(
            bridge.attach("t", true, None).is_err(),
            "one more than the bound"
        );
        // A subscription that does not follow the task gets the snapshot alone.
        let (_, none) = bridge.attach("t", false, None).unwrap().unwrap();
        assert!(none.is_none());

        let canceled = TaskRecord::new(task("t", TaskState::Canceled), "agent", Dialect::V1_0);
        bridge.release_waiting(&canceled);
        for follower in &mut followers {
            match follower.recv().await {
                Some(Live::Event(_, Ok(reply))) => {
                    assert!(
                        matches!(&*reply, Reply::Task(t) if t.status.state == TaskState::Canceled)
                    )
                }
                _ => panic!("every waiting subscriber gets the canceled task"),
            }
            assert!(follower.recv().await.is_none(), "and is let go");
        }
        assert!(bridge.waiting.locked().is_empty());
    }
}
