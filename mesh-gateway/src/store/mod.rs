//! The task store: every task the gateway bridges (status, history, artifacts), with the agent
//! that runs it and the dialect that created it, so that get, list, cancel and resubscribe
//! answer from one place, and each task's event log (every event of its reply streams, in
//! order).
//!
//! [`TaskStore`]'s hot path is synchronous on purpose: the gateway appends to the store once
//! per event and must never hold a lock across an await. A durable store keeps the same
//! contract by serving the tasks the gateway bridges now (its working set) from memory and
//! writing behind (a queue drained by its own thread); the other tasks are read from its
//! database by the trait's asynchronous methods. Records are shared as `Arc<TaskRecord>`:
//! reading a task is a reference-count increment, not a copy of its history, and appending
//! an event changes the record in place (no store keeps a second reference to a record it is
//! changing).
//!
//! Three stores: [`MemoryStore`] (tests, benchmarks, `--memory-store`), [`SqliteStore`] (one
//! gateway's, durable: SQLite in WAL mode) and [`PostgresStore`] (shared by several
//! gateways). The two durable ones keep only their working set in memory
//! ([`working_set`]) and write behind by a thread of their own in batched transactions
//! ([`write_behind`]): one row per event, and a snapshot of the task now and then.
//!
//! The store also keeps the webhook deliveries not made yet ([`PendingDelivery`]): the
//! durable store writes them behind like tasks and hands them back after a restart, so a
//! notification pending at a crash is still delivered (at-least-once); the memory store
//! keeps none (the delivery queue in memory is all there is).
//!
//! # The contract every store keeps
//!
//! **Events.** [`TaskStore::append`] applies one event of a task's reply stream with
//! [`task_events::apply`](crate::task_events::apply) and logs it with the next sequence
//! number of that task ([`TaskRecord::seq`]: assigned by the store, 1 for a task's first event,
//! continuing across every turn of a multi-turn task) and the time. The event is shared
//! (`Arc<Reply>`, the same allocation the bridge hands to its subscribers): the store keeps
//! it as it is and encodes nothing on the caller's path. Its cost depends on the event,
//! never on the task's length: no copy of the record, no encoding. [`TaskStore::events_after`]
//! reads the log back in one canonical encoding
//! ([`task_events::encode`](crate::task_events::encode): the codec's 1.0 JSON), made when it
//! is read (the memory store) or by the writer's thread (the durable store's rows). Changes
//! that are not events ([`TaskStore::insert`] of a follow-up turn, [`TaskStore::update`]:
//! push configs, a cancel answered by the gateway) keep the sequence and are recorded whole.
//!
//! **Bounds.** A store holds at most `max_tasks` tasks and `max_bytes` bytes
//! ([`StoreLimits`]); a task's bytes are its record's estimated size plus its event log's. Both
//! are estimates of their size as JSON made from their structure, never by encoding: the
//! lengths of the strings there (texts, ids, names, URLs; file bytes as base64) and a fixed
//! allowance per task, status, message, artifact and part (the rare free-form values, `data`
//! parts and metadata, are measured by serialising them into a counter). A record is
//! estimated when it is inserted or loaded, an event when it is appended (it adds its
//! estimate to its record and to the log), so an estimate stays within a small factor of the
//! encoded size and costs what it measures. To stay within them it evicts finished tasks
//! (terminal states) only, the oldest first, and finished tasks also go `max_age` after their
//! last change. A task that is not finished (submitted, working, waiting for input or
//! authentication) is never evicted. When evicting every finished task would not make room,
//! a new task is refused ([`StoreError::Full`], answered to its request as
//! [`A2aError`](mesh_core::error::A2aError) `-32603` naming the limit) and everything else
//! carries on: running tasks keep appending (a store may go over `max_bytes` by what they add
//! meanwhile, each at most `max_task_bytes`), reads, lists and follow-up turns of tasks it
//! holds are served.
//!
//! **One task.** A task may not grow past `max_task_bytes`: an event that would take it past
//! is refused ([`StoreError::TaskTooLarge`]) unless it ends the task's stream (so that the
//! gateway can still fail it), and so is a record that is already larger (a new task or a
//! follow-up turn). The gateway then fails the task with a status message that names the
//! limit and asks its agent to cancel it.

mod columns;
mod memory;
mod postgres;
mod size;
mod sqlite;
mod task_table;
mod working_set;
mod write_behind;

/// Records and events for the tests of the modules that use a store.
#[cfg(test)]
pub(crate) use memory::tests as test_records;
pub use memory::{EVENT_LOG_BYTES, EVENT_LOG_EVENTS, MemoryStore};
pub use postgres::{ANY_TASK, PostgresStore};
pub use sqlite::SqliteStore;

use mesh_core::bus::redact_url;
use mesh_core::dialect::Dialect;
use mesh_core::error::{A2aError, ErrorKind};
use mesh_core::model::{Task, TaskPushNotificationConfig, TaskState};
use mesh_core::rpc::Reply;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// One stored task and what the gateway needs to know about it. `Debug` hides the push
/// configs' tokens and credentials.
#[derive(Clone)]
pub struct TaskRecord {
    /// The task, `_mesh` metadata stripped.
    pub task: Task,
    /// The agent that runs it.
    pub agent: String,
    /// The dialect of the request that created it (answers to `tasks/get` and the other
    /// methods 0.1 and 0.3 share are written in it).
    pub dialect: Dialect,
    /// When the gateway created the record.
    pub created: SystemTime,
    /// When the record last changed.
    pub updated: SystemTime,
    /// The authenticated principal that created the task (`None` when the gateway runs
    /// without API keys). With keys, only this principal sees the task.
    pub owner: Option<String>,
    /// The task's push-notification configs (at most
    /// [`MAX_PUSH_CONFIGS`](crate::push::MAX_PUSH_CONFIGS)).
    pub push_configs: Vec<TaskPushNotificationConfig>,
    /// The sequence number of the last event applied to the task (0: none yet). The store
    /// assigns it ([`TaskStore::append`]); a follow-up turn carries it on.
    pub seq: u64,
}

impl std::fmt::Debug for TaskRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskRecord")
            .field("task", &self.task)
            .field("agent", &self.agent)
            .field("dialect", &self.dialect)
            .field("created", &self.created)
            .field("updated", &self.updated)
            .field("owner", &self.owner)
            .field("push_configs", &RedactedConfigs(&self.push_configs))
            .field("seq", &self.seq)
            .finish()
    }
}

impl std::fmt::Debug for PendingDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingDelivery")
            .field("id", &self.id)
            .field("task_id", &self.task_id)
            .field(
                "config",
                &RedactedConfigs(std::slice::from_ref(&self.config)),
            )
            .field("body_bytes", &self.body.len())
            .field("attempts", &self.attempts)
            .field("next_attempt", &self.next_attempt)
            .finish()
    }
}

impl TaskRecord {
    /// A new record, created and updated now.
    pub fn new(task: Task, agent: impl Into<String>, dialect: Dialect) -> TaskRecord {
        let now = SystemTime::now();
        TaskRecord {
            task,
            agent: agent.into(),
            dialect,
            created: now,
            updated: now,
            owner: None,
            push_configs: Vec::new(),
            seq: 0,
        }
    }

    /// The record's estimated size in bytes: its task's estimated size as JSON (from its
    /// structure, as the module docs say: nothing is encoded) plus a fixed allowance for the
    /// rest. Costs
    /// a walk over the task's messages, artifacts and parts: the stores call it when a record
    /// is inserted or loaded, never per event.
    pub fn estimated_bytes(&self) -> usize {
        let push = if self.push_configs.is_empty() {
            0
        } else {
            size::json_len(&self.push_configs)
        };
        RECORD_OVERHEAD
            + size::task(&self.task)
            + push
            + self.agent.len()
            + self.owner.as_ref().map_or(0, String::len)
    }
}

/// What a record costs besides its task's JSON (ids, times, the store's own entry).
const RECORD_OVERHEAD: usize = 256;

/// One event of a task's log.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Its sequence number in the task (1, 2, … across every turn).
    pub seq: u64,
    /// When the store appended it.
    pub time: SystemTime,
    /// The event as [`task_events::encode`](crate::task_events::encode) writes it (the codec's
    /// 1.0 JSON of the reply), encoded when the log was read or by the durable store's writer.
    pub json: bytes::Bytes,
}

impl StoredEvent {
    /// The event.
    pub fn reply(&self) -> Result<Reply, A2aError> {
        crate::task_events::decode(&self.json)
    }
}

/// How much a store keeps (see the module docs for what happens at each limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// A finished task is forgotten this long after its last change.
    pub max_age: Duration,
    /// The most tasks kept.
    pub max_tasks: usize,
    /// The most bytes kept: records plus their event logs (estimated).
    pub max_bytes: usize,
    /// The most bytes one task (its record plus its event log) may take.
    pub max_task_bytes: usize,
}

impl Default for StoreLimits {
    /// The gateway's defaults: an hour, 100,000 tasks, 1 GiB, 128 MiB per task.
    fn default() -> Self {
        StoreLimits {
            max_age: Duration::from_secs(3600),
            max_tasks: 100_000,
            max_bytes: 1 << 30,
            max_task_bytes: 128 << 20,
        }
    }
}

/// A webhook delivery not made yet: one notification (the task as JSON) for one config. The
/// durable store keeps it from when it is queued until it succeeds or is given up, so that
/// it survives a restart. `Debug` hides the config's token and credentials.
#[derive(Clone)]
pub struct PendingDelivery {
    /// Names the delivery; a task's deliveries are made in the order of their ids.
    pub id: u64,
    /// The task it is about.
    pub task_id: String,
    /// Where it goes, with its token and authentication, as the config was when the task
    /// changed.
    pub config: TaskPushNotificationConfig,
    /// What is POSTed: the task as JSON, in the dialect that created it.
    pub body: bytes::Bytes,
    /// How many attempts were made already.
    pub attempts: u32,
    /// The next attempt is not made before this time.
    pub next_attempt: SystemTime,
}

/// Where an event of a task's reply stream came from ([`TaskStore::append`]): for the
/// stores shared by several gateways, and what of it the agent left for the store to put back.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// Its place in its turn's reply stream (the agent's `_mesh.seq`): logged, so that a
    /// gateway taking the turn over knows where to go on from ([`Orphan::next_position`]).
    pub position: Option<u64>,
    /// Its acknowledgement to the broker, when the bus leaves it to the gateway: a durable
    /// store drops it once the event is committed (a gateway that dies before has the
    /// broker deliver it again to whoever opens its session next); the memory store drops
    /// it at once.
    pub ack: Option<mesh_core::bus::Ack>,
    /// A whole task whose agent left out the history before entry `from`
    /// (`_mesh.historyFrom`), in an event no one else holds: the store puts back the
    /// entries its record has (moving them when the event's task replaces the record's).
    /// An event shared with subscribers comes whole, with `None`.
    pub history_from: Option<u64>,
}

/// A running task of a gateway that is gone, taken over ([`TaskStore::claim_orphans`]).
#[derive(Debug, Clone)]
pub struct Orphan {
    /// The gateway that bridged it.
    pub gateway: String,
    /// The task as the store has it.
    pub record: TaskRecord,
    /// The request its current turn was sent as, when known.
    pub request_id: Option<String>,
    /// The position (`_mesh.seq`) of the turn's first reply not logged yet.
    pub next_position: u64,
    /// The task's sequence number before the turn's first event.
    pub turn_start: u64,
    /// The broker node the gateway that bridged it was connected to last
    /// ([`TaskStore::note_broker_node`]): where its persistent session, and the replies kept
    /// for it, are in a cluster of brokers that keeps each session on one node.
    pub broker_node: Option<String>,
}

/// What [`TaskStore::list`] selects.
#[derive(Debug, Clone, Default)]
pub struct TaskQuery {
    /// Only tasks of this agent.
    pub agent: Option<String>,
    /// Only tasks of this context.
    pub context_id: Option<String>,
    /// Only tasks in this state.
    pub state: Option<TaskState>,
    /// Only tasks of this owner (see [`TaskRecord::owner`]).
    pub owner: Option<String>,
    /// At most this many tasks (the store may cap it).
    pub page_size: usize,
    /// Where the page starts: a token from an earlier page.
    pub page_token: Option<String>,
}

/// A page of tasks, most recently updated first.
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    /// The tasks of this page.
    pub records: Vec<Arc<TaskRecord>>,
    /// The token of the next page; `None` on the last page.
    pub next_page_token: Option<String>,
    /// How many tasks match the query in all.
    pub total_size: usize,
}

/// Which bound refused a new task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`StoreLimits::max_tasks`].
    Tasks(usize),
    /// [`StoreLimits::max_bytes`].
    Bytes(usize),
}

/// Why the store refused or failed something.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The page token was not made by this store.
    #[error("invalid page token {0:?}")]
    InvalidPageToken(String),
    /// The durable store could not be opened or read.
    #[error("task store: {0}")]
    Storage(String),
    /// A new task was refused: the store is at a limit and holds no finished task to evict.
    #[error("{}", full_message(*.0))]
    Full(Limit),
    /// The task would grow past [`StoreLimits::max_task_bytes`].
    #[error(
        "task {task} would take more than the gateway's limit of {limit} bytes per task (store_max_task_bytes)"
    )]
    TaskTooLarge {
        /// The task.
        task: String,
        /// The limit.
        limit: usize,
    },
    /// No such task.
    #[error("task {0} is not in the store")]
    TaskNotFound(String),
    /// The events asked for are no longer in the task's log (the memory store keeps the
    /// last ones of a running task only).
    #[error("task {task}: the event log keeps events from {first} on")]
    EventsForgotten {
        /// The task.
        task: String,
        /// The first sequence number still kept (past the last one: none is kept).
        first: u64,
    },
}

fn full_message(limit: Limit) -> String {
    let what = match limit {
        Limit::Tasks(n) => format!("{n} tasks"),
        Limit::Bytes(n) => format!("{n} bytes of tasks and event logs (store_max_bytes)"),
    };
    format!(
        "the gateway's task store is full: it keeps at most {what} and every task it holds is \
         still running or waiting for input; retry when some finish"
    )
}

impl From<StoreError> for A2aError {
    /// A refusal as the protocol says it: a full store is `-32603` (internal error: the
    /// server cannot take the request now; the message names the limit, `data` says which);
    /// a task too large is `-32602`; an unknown task `-32001`.
    fn from(error: StoreError) -> A2aError {
        let message = error.to_string();
        match error {
            StoreError::Full(limit) => {
                let (name, value) = match limit {
                    Limit::Tasks(n) => ("max_tasks", n),
                    Limit::Bytes(n) => ("max_bytes", n),
                };
                A2aError::new(ErrorKind::Internal, message).with_data(serde_json::json!({
                    "reason": "TASK_STORE_FULL",
                    "limit": name,
                    "value": value,
                }))
            }
            StoreError::TaskTooLarge { limit, .. } => {
                A2aError::new(ErrorKind::InvalidParams, message)
                    .with_data(serde_json::json!({"reason": "TASK_TOO_LARGE", "limit": limit}))
            }
            StoreError::TaskNotFound(task) => A2aError::task_not_found(&task),
            _ => A2aError::internal(message),
        }
    }
}

/// Where the gateway keeps its tasks. Implementations must be cheap to call from async code:
/// no synchronous method blocks for long, none awaits. Every store keeps the contract of the
/// module docs (events, bounds, one task's size).
///
/// Two views of the tasks. The synchronous methods ([`get`](TaskStore::get),
/// [`insert`](TaskStore::insert), [`append`](TaskStore::append),
/// [`update`](TaskStore::update), [`remove`](TaskStore::remove)) work on the gateway's
/// *working set*: the tasks it bridges now, which its pumps change event by event and which
/// are always in memory. The asynchronous ones ([`load`](TaskStore::load),
/// [`modify`](TaskStore::modify), [`list`](TaskStore::list),
/// [`events_after`](TaskStore::events_after)) reach every task the store holds, wherever it
/// is: a durable store reads its database there. For the memory store both views are the
/// same tasks.
#[async_trait::async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Adds a task to the working set, or replaces the record of the same id (a follow-up
    /// turn, an undo).
    ///
    /// A new task is refused with [`StoreError::Full`] when the store is at `max_tasks` or
    /// `max_bytes` and evicting every finished task would not make room; a record larger than
    /// `max_task_bytes` is refused with [`StoreError::TaskTooLarge`]. Replacing a record is
    /// never refused for the store's bounds.
    fn insert(&self, record: TaskRecord) -> Result<(), StoreError>;
    /// The record of a task of the working set.
    fn get(&self, id: &str) -> Option<Arc<TaskRecord>>;
    /// The record of any task the store holds, as it is now. The default is
    /// [`get`](TaskStore::get).
    async fn load(&self, id: &str) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        Ok(self.get(id))
    }
    /// Applies one event of the task's reply stream, logs it with the task's next sequence
    /// number (see the module docs) and returns the record as it is now. The event is kept
    /// shared (a reference count, no copy) and is not encoded here; a whole task that no one
    /// else holds may move into the record (the memory store's log). `origin`: where an event
    /// from the agent came from (see [`Origin`]; the default for an event the gateway made).
    ///
    /// [`StoreError::TaskNotFound`] when there is no such task; [`StoreError::TaskTooLarge`]
    /// (and nothing changes) when the event would take the task past `max_task_bytes` and it
    /// does not end the stream.
    fn append(
        &self,
        id: &str,
        event: Arc<Reply>,
        origin: Origin,
    ) -> Result<Arc<TaskRecord>, StoreError>;
    /// The task's logged events with a sequence number above `after`, in order, at most
    /// `limit` of them. [`StoreError::EventsForgotten`] when the log no longer holds the
    /// first of them (event `after + 1`); [`StoreError::TaskNotFound`] for an unknown task.
    async fn events_after(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError>;
    /// Changes a record of the working set in place (its `updated` time is set) and returns
    /// it as it is now; `None` if there is no such task. Not an event: the sequence stays,
    /// and a durable store writes the whole record.
    fn update(&self, id: &str, apply: &mut dyn FnMut(&mut TaskRecord)) -> Option<Arc<TaskRecord>>;
    /// Changes any task the store holds, as [`update`](TaskStore::update) does the working
    /// set's. The default is [`update`](TaskStore::update).
    async fn modify(
        &self,
        id: &str,
        apply: &mut (dyn for<'r> FnMut(&'r mut TaskRecord) + Send),
    ) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        Ok(self.update(id, apply))
    }
    /// Waits until what the working set changed of task `id` so far is where every
    /// gateway sharing the store reads it (bounded: a database that is away does not hold
    /// the caller for long). The default returns at once: a store of one gateway serves
    /// its reads from the working set. Callers on a request's path ask only a
    /// [`shared`](TaskStore::shared) store, so that the others cost nothing there.
    async fn written(&self, id: &str) {
        let _ = id;
    }
    /// Says which request a turn of task `id` of the working set was sent as (its JSON-RPC
    /// id), and the task's sequence number before the turn's first event, as its pump begins:
    /// a store shared by several gateways keeps both, so that another gateway can take the
    /// turn's replies over should this one die ([`TaskStore::claim_orphans`]). The default
    /// keeps nothing.
    fn begin_turn(&self, id: &str, request_id: &str, start: u64) {
        let _ = (id, request_id, start);
    }
    /// A [`resumable`](TaskStore::resumable) store: the first time, the running tasks
    /// (submitted or working) this gateway's earlier run left; a store shared by several
    /// gateways also takes over those of the gateways that are gone (for `grace` at least).
    /// Each is marked as this gateway's and handed back with what is known of its turn, for
    /// the gateway to follow its replies or fail it. The default has none.
    async fn claim_orphans(&self, grace: Duration) -> Result<Vec<Orphan>, StoreError> {
        let _ = grace;
        Ok(Vec::new())
    }
    /// Notes the broker node this gateway is connected to (a URL without user info), each
    /// time it connects: a store shared by several gateways keeps it for the one that takes
    /// this gateway's tasks over ([`Orphan::broker_node`]). The default keeps nothing.
    async fn note_broker_node(&self, node: &str) -> Result<(), StoreError> {
        let _ = node;
        Ok(())
    }
    /// Forgets a task.
    fn remove(&self, id: &str);
    /// Says that the gateway bridges the task no more (its turn's stream ended): a durable
    /// store then lets it leave the working set, once written. The default keeps it.
    fn release(&self, id: &str) {
        let _ = id;
    }
    /// The tasks matching `query`, most recently updated first.
    async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError>;
    /// True for a store several gateways share (their tasks, reads and writes are each
    /// other's); false for a store of one gateway (the default).
    fn shared(&self) -> bool {
        false
    }
    /// True for a store that keeps each running task's turn ([`TaskStore::begin_turn`]) and
    /// each reply's place in it ([`Origin::position`]) across a restart, so that a gateway
    /// restarted on it follows the tasks it left running
    /// ([`TaskStore::claim_orphans`]) on a persistent bus session. The default is
    /// [`shared`](TaskStore::shared).
    fn resumable(&self) -> bool {
        self.shared()
    }
    /// A store shared by several gateways: the ids of the tasks whose events or records
    /// another gateway (or this one) wrote, as they are written, so that a subscriber here
    /// can follow a task another gateway bridges. `None` for a store of one gateway.
    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<Arc<str>>> {
        None
    }
    /// How many tasks the store holds.
    fn len(&self) -> usize;
    /// The bytes the store counts against `max_bytes` now (records and event logs, estimated).
    fn bytes(&self) -> usize;
    /// True when the store holds no task.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// How many tasks are in each state (for `/metrics`).
    fn state_counts(&self) -> Vec<(TaskState, usize)>;
    /// Changes not yet written to durable storage (0 for a store that has none).
    fn pending_writes(&self) -> usize {
        0
    }
    /// Blocks until every change made so far is durable (at most `timeout`); true when it
    /// is. A store without durable storage returns true at once.
    fn flush(&self, timeout: std::time::Duration) -> bool {
        let _ = timeout;
        true
    }
    /// Keeps a pending webhook delivery, or its new attempt count (same id), until
    /// [`TaskStore::forget_delivery`]. Must not block: a durable store writes it behind. The
    /// default keeps nothing (deliveries then live in memory only).
    fn keep_delivery(&self, delivery: Arc<PendingDelivery>) {
        let _ = delivery;
    }
    /// Forgets a delivery that succeeded or was given up.
    fn forget_delivery(&self, id: u64) {
        let _ = id;
    }
    /// The deliveries that were pending when the store was opened, in the order of their
    /// ids, and then those taken over since the last call from gateways that are gone (a
    /// store shared by several: see [`TaskStore::claim_orphans`]); each handed out once.
    fn take_pending_deliveries(&self) -> Vec<PendingDelivery> {
        Vec::new()
    }
}

/// The task states `/metrics` reports.
pub const STATES: [TaskState; 8] = [
    TaskState::Submitted,
    TaskState::Working,
    TaskState::InputRequired,
    TaskState::AuthRequired,
    TaskState::Completed,
    TaskState::Failed,
    TaskState::Canceled,
    TaskState::Rejected,
];

/// Push configs as `Debug` shows them (in [`TaskRecord`](crate::TaskRecord) and
/// [`PendingDelivery`]): the URL redacted, whether there is a token, the authentication
/// scheme without its credentials.
pub(crate) struct RedactedConfigs<'a>(pub &'a [TaskPushNotificationConfig]);

impl std::fmt::Debug for RedactedConfigs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|config| {
                format!(
                    "TaskPushNotificationConfig {{ id: {:?}, task_id: {:?}, url: {:?}, token: {}, authentication: {} }}",
                    config.id,
                    config.task_id,
                    redact_url(&config.url),
                    if config.token.is_some() { "\"***\"" } else { "None" },
                    match &config.authentication {
                        Some(auth) => format!("{{ scheme: {:?}, credentials: \"***\" }}", auth.scheme),
                        None => "None".to_owned(),
                    }
                )
            }))
            .finish()
    }
}
