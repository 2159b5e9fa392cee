//! The task store: every task the gateway bridges (status, history, artifacts), with the agent
//! that runs it and the dialect that created it, so that get, list, cancel and resubscribe
//! answer from one place.
//!
//! [`TaskStore`] is synchronous on purpose: the gateway's hot path updates the store once per
//! event and must never hold a lock across an await. A durable store keeps the same contract
//! by serving from memory and writing behind (a queue drained by its own task), so the trait
//! needs no async methods. Records are shared as `Arc<TaskRecord>`: reading a task is a
//! reference-count increment, not a copy of its history.

mod memory;

pub use memory::MemoryStore;

use mesh_core::dialect::Dialect;
use mesh_core::model::{Task, TaskState};
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
        }
    }
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
}
