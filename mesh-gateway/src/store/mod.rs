//! The task store: every task the gateway bridges (status, history, artifacts), with the agent
//! that runs it and the dialect that created it, so that get, list, cancel and resubscribe
//! answer from one place.
//!
//! [`TaskStore`] is synchronous on purpose: the gateway's hot path updates the store once per
//! event and must never hold a lock across an await. A durable store keeps the same contract
//! by serving from memory and writing behind (a queue drained by its own task), so the trait
//! needs no async methods. Records are shared as `Arc<TaskRecord>`: reading a task is a
//! reference-count increment, not a copy of its history.
//!
//! Two stores: [`MemoryStore`] (tests, benchmarks, `--memory-store`) and [`SqliteStore`]
//! (durable: SQLite in WAL mode, loaded into memory at start, written behind by a thread of
//! its own in batched transactions).
//!
//! The store also keeps the webhook deliveries not made yet ([`PendingDelivery`]): the
//! durable store writes them behind like tasks and hands them back after a restart, so a
//! notification pending at a crash is still delivered (at-least-once); the memory store
//! keeps none (the delivery queue in memory is all there is).

mod memory;
mod sqlite;

pub use memory::MemoryStore;
pub use sqlite::SqliteStore;

use mesh_core::dialect::Dialect;
use mesh_core::model::{Task, TaskPushNotificationConfig, TaskState};
use std::sync::Arc;
use std::time::SystemTime;

/// One stored task and what the gateway needs to know about it.
#[derive(Debug, Clone)]
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
        }
    }
}

/// A webhook delivery not made yet: one notification (the task as JSON) for one config. The
/// durable store keeps it from when it is queued until it succeeds or is given up, so that
/// it survives a restart.
#[derive(Debug, Clone)]
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

/// Why a listing failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The page token was not made by this store.
    #[error("invalid page token {0:?}")]
    InvalidPageToken(String),
    /// The durable store could not be opened or read.
    #[error("task store: {0}")]
    Storage(String),
}

/// Where the gateway keeps its tasks. Implementations must be cheap to call from async code:
/// no method blocks for long, none awaits.
pub trait TaskStore: Send + Sync + 'static {
    /// Adds a task, or replaces the record of the same id.
    fn insert(&self, record: TaskRecord);
    /// The record of a task.
    fn get(&self, id: &str) -> Option<Arc<TaskRecord>>;
    /// Changes a record in place (its `updated` time is set) and returns it as it is now;
    /// `None` if there is no such task.
    fn update(&self, id: &str, apply: &mut dyn FnMut(&mut TaskRecord)) -> Option<Arc<TaskRecord>>;
    /// Forgets a task.
    fn remove(&self, id: &str);
    /// The tasks matching `query`, most recently updated first.
    fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError>;
    /// How many tasks the store holds.
    fn len(&self) -> usize;
    /// True when the store holds no task.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// How many tasks are in each state (for `/metrics`). The default lists once per state.
    fn state_counts(&self) -> Vec<(TaskState, usize)> {
        STATES
            .iter()
            .map(|state| {
                let query = TaskQuery {
                    state: Some(state.clone()),
                    page_size: 1,
                    ..TaskQuery::default()
                };
                (
                    state.clone(),
                    self.list(&query).map(|p| p.total_size).unwrap_or(0),
                )
            })
            .collect()
    }
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
    /// ids; handed out once (later calls return none).
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
