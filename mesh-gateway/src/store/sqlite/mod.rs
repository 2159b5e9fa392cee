//! The durable task store of one gateway: SQLite (compiled in, WAL mode) under a data
//! directory, so that `tasks/get` and `tasks/list` still answer after a restart, with every
//! task's event log.
//!
//! **The working set.** The gateway keeps in memory only the tasks it bridges now (see
//! [`working_set`](super::working_set)); every other task is read from the database when it
//! is asked for, so the gateway's memory grows with its load, not with the store. Changes go
//! behind: each is queued (a short mutex, no I/O), and a dedicated writer thread takes the
//! whole queue and writes it in one transaction, so a send never waits for the disk. A crash
//! (even SIGKILL) loses at most the changes of the last few milliseconds that were not
//! committed yet; `synchronous = NORMAL` in WAL mode keeps every committed transaction through
//! a process crash (an OS crash may lose the last ones).
//!
//! **Reads.** [`TaskStore::load`], [`TaskStore::list`] and [`TaskStore::events_after`] read
//! the database on connections of their own (WAL: readers and the writer do not wait for each
//! other), off the async workers: a task of the working set is served from memory, any other
//! as its row with the events logged after it applied. A listing first waits until what was
//! queued before it is committed, so that it sees every task the gateway answered for.
//!
//! **Two tables hold a task.** `task_events` has one row per event (task id, sequence, time
//! in milliseconds, the event as the codec's 1.0 JSON), appended as events come: what an
//! event costs the writer is that event, however long its task is. The queue holds the event
//! itself (shared with the bridge's subscribers); the writer's thread encodes it, so the async
//! workers never do. `tasks` has one row per task: a snapshot of its record and the sequence
//! it covers, written when the task is created or replaced (a follow-up turn), when
//! [`TaskStore::update`] changes it, when its stream ends (finished, or waiting for input or
//! authentication), and as it grows, each time its events since the last snapshot add as
//! many bytes as the task had then (at least 256 KiB): a growing task's snapshots are written
//! at doubling sizes, so they cost about twice what its events do, not the square of it. Its
//! state, context and bytes are kept current with every batch that has its events (listings
//! filter on them). A task's rows go with it. The queue holds events up to 64 MiB
//! (estimated); past that (a disk that fell far behind) events are no longer logged, only the
//! snapshots of their tasks are written (the tasks lose nothing, their logs have a gap) until
//! it drains.
//!
//! **Bounds.** The store's bounds (see the [`store`](super) module docs) apply to the
//! database: the bytes of a task are its record plus its log (estimated as events come). The
//! writer counts the tasks by state as it writes them; when a batch leaves the store past
//! `max_tasks` or `max_bytes` it deletes the oldest finished tasks at once, and finished
//! tasks past `max_age` every minute and at start. A new task is refused
//! ([`StoreError::Full`]) while the store is full of tasks that are not finished; running
//! tasks are never deleted.
//!
//! **A restart.** Each task's current turn (the request it was sent as, the sequence it
//! began at) is kept with its row, and each reply's place in its turn's stream with its
//! event. The tasks that were running (submitted or working) when the previous gateway
//! stopped are handed to the next one ([`TaskStore::claim_orphans`]), which follows their
//! replies on its persistent bus session from the first one not logged (see
//! [`takeover`](crate::takeover)), or fails them when it cannot.
//!
//! Pending webhook deliveries ([`PendingDelivery`]) go the same way: kept, updated and
//! forgotten through the same write-behind queue (a send never waits for them either), in a
//! table of their own, and handed back once after a restart so that they are delivered then;
//! one older than a day is dropped at start. A lock on `gateway-tasks.lock` in the data
//! directory (held while the store is open, released by the OS when the process dies) refuses
//! a second gateway on the same directory at start rather than letting two write one file.

use super::working_set::{Totals, WorkingSet, merge_logged};
use super::{
    Origin, Orphan, PendingDelivery, StoreError, StoreLimits, StoredEvent, TaskPage, TaskQuery,
    TaskRecord, TaskStore,
};
use mesh_core::model::TaskState;
use mesh_core::rpc::Reply;
use mesh_core::sync::{MutexExt, RwLockExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

mod open;
mod reads;
mod writer;

use reads::Readers;

/// The database file in the data directory.
pub const DB_FILE: &str = "gateway-tasks.sqlite3";

/// The file whose lock says a gateway has the data directory.
const LOCK_FILE: &str = "gateway-tasks.lock";

/// How long a listing waits for the writer to commit what was queued before it.
const CATCH_UP_WAIT: Duration = Duration::from_secs(5);

/// Tasks in SQLite, the working set in memory. See the module docs.
pub struct SqliteStore {
    set: Arc<WorkingSet>,
    readers: Arc<Readers>,
    totals: Arc<RwLock<Totals>>,
    limits: StoreLimits,
    writer: Mutex<Option<JoinHandle<()>>>,
    path: PathBuf,
    /// The deliveries pending at open, until the pusher takes them.
    pending_deliveries: Mutex<Vec<PendingDelivery>>,
    stats: Arc<Counters>,
    /// The tasks the previous gateway left running, until the gateway claims them.
    running: Mutex<Vec<Orphan>>,
    /// The data directory's lock, held while the store is open.
    _lock: std::fs::File,
}

/// What the writer has written since the store was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Event rows.
    pub events: u64,
    /// Their bytes (the events' JSON).
    pub event_bytes: u64,
    /// Snapshot rows (a task's record written whole).
    pub snapshots: u64,
    /// Their bytes (the tasks' JSON).
    pub snapshot_bytes: u64,
}

#[derive(Default)]
struct Counters {
    events: AtomicU64,
    event_bytes: AtomicU64,
    snapshots: AtomicU64,
    snapshot_bytes: AtomicU64,
}

impl Counters {
    fn add(&self, written: &WriteStats) {
        self.events.fetch_add(written.events, Ordering::Relaxed);
        self.event_bytes
            .fetch_add(written.event_bytes, Ordering::Relaxed);
        self.snapshots
            .fetch_add(written.snapshots, Ordering::Relaxed);
        self.snapshot_bytes
            .fetch_add(written.snapshot_bytes, Ordering::Relaxed);
    }
}

impl SqliteStore {
    /// Opens (or creates) the store in `dir` (created if missing): finds the tasks the
    /// previous gateway left running (for [`TaskStore::claim_orphans`]), applies the bounds,
    /// counts the tasks, and starts the writer thread. Loads no other task.
    pub fn open(dir: &Path, limits: StoreLimits) -> Result<SqliteStore, StoreError> {
        let opened = open::open(dir, limits)?;
        tracing::info!(
            path = %opened.path.display(),
            tasks = opened.totals.tasks,
            webhook_deliveries = opened.deliveries.len(),
            left_running = opened.running.len(),
            "task store opened"
        );
        let set = Arc::new(WorkingSet::new(limits));
        let totals = Arc::new(RwLock::new(opened.totals));
        let stats = Arc::new(Counters::default());
        let writer = {
            let writer = writer::Writer {
                conn: opened.conn,
                set: set.clone(),
                totals: totals.clone(),
                limits,
                stats: stats.clone(),
                rows: writer::Rows::default(),
            };
            std::thread::Builder::new()
                .name("mesh-task-store".into())
                .spawn(move || writer.run())
                .map_err(|e| {
                    StoreError::Storage(format!("cannot start the task store's writer: {e}"))
                })?
        };
        Ok(SqliteStore {
            set,
            readers: Arc::new(Readers::new(opened.path.clone())),
            totals,
            limits,
            writer: Mutex::new(Some(writer)),
            path: opened.path,
            pending_deliveries: Mutex::new(opened.deliveries),
            stats,
            running: Mutex::new(opened.running),
            _lock: opened.lock,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the writer has written since the store was opened.
    pub fn write_stats(&self) -> WriteStats {
        let s = &self.stats;
        WriteStats {
            events: s.events.load(Ordering::Relaxed),
            event_bytes: s.event_bytes.load(Ordering::Relaxed),
            snapshots: s.snapshots.load(Ordering::Relaxed),
            snapshot_bytes: s.snapshot_bytes.load(Ordering::Relaxed),
        }
    }

    /// Writes what is pending and stops the writer (also done on drop).
    pub fn close(&self) {
        self.set.queue.close();
        let writer = self.writer.locked().take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }

    /// Task `id` as it is now ([`TaskStore::load`], here blocking on the database).
    pub fn read(&self, id: &str) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        if let Some(record) = self.set.newest_here(id) {
            return Ok(Some(record));
        }
        self.readers.record(id).map(|r| r.map(Arc::new))
    }

    /// The task's logged events after `after` ([`TaskStore::events_after`], here blocking on
    /// the database).
    pub fn events_after(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        logged_events(&self.set, &self.readers, id, after, limit)
    }

    /// The tasks matching `query` ([`TaskStore::list`], here blocking on the database, and
    /// not waiting for the writer).
    pub fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        self.readers.list(query, &|id| self.set.newest_here(id))
    }

    /// Runs `read` on a reading thread (the database is never read on the async workers).
    async fn off_workers<T: Send + 'static>(
        &self,
        read: impl FnOnce(&WorkingSet, &Readers) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (set, readers) = (self.set.clone(), self.readers.clone());
        tokio::task::spawn_blocking(move || read(&set, &readers))
            .await
            .map_err(|e| StoreError::Storage(format!("reading the task database: {e}")))?
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.close();
    }
}

#[async_trait::async_trait]
impl TaskStore for SqliteStore {
    fn insert(&self, record: TaskRecord) -> Result<(), StoreError> {
        if self.set.memory.get(&record.task.id).is_none() && record.seq == 0 {
            self.totals
                .read_locked()
                .check_room(self.limits, self.set.admitted())?;
            self.set.admit(record.estimated_bytes());
        }
        self.set.insert(record)
    }

    fn get(&self, id: &str) -> Option<Arc<TaskRecord>> {
        self.set.memory.get(id)
    }

    async fn load(&self, id: &str) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        if let Some(record) = self.set.newest_here(id) {
            return Ok(Some(record));
        }
        let id = id.to_owned();
        self.off_workers(move |set, readers| {
            // Written meanwhile: the database has it now.
            match set.newest_here(&id) {
                Some(record) => Ok(Some(record)),
                None => readers.record(&id).map(|r| r.map(Arc::new)),
            }
        })
        .await
    }

    fn append(
        &self,
        id: &str,
        event: Arc<Reply>,
        origin: Origin,
    ) -> Result<Arc<TaskRecord>, StoreError> {
        self.set.append(id, event, origin)
    }

    async fn events_after(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let id = id.to_owned();
        self.off_workers(move |set, readers| logged_events(set, readers, &id, after, limit))
            .await
    }

    fn update(&self, id: &str, apply: &mut dyn FnMut(&mut TaskRecord)) -> Option<Arc<TaskRecord>> {
        self.set.update(id, apply)
    }

    async fn modify(
        &self,
        id: &str,
        apply: &mut (dyn for<'r> FnMut(&'r mut TaskRecord) + Send),
    ) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        if let Some(record) = self.set.update(id, apply) {
            return Ok(Some(record));
        }
        // Not in the working set: it joins it until the change is written.
        let Some(record) = self.load(id).await? else {
            return Ok(None);
        };
        if self.set.memory.get(id).is_some() {
            // A turn began meanwhile: its record is the newest.
            return Ok(self.set.update(id, apply));
        }
        self.set.insert(TaskRecord::clone(&record))?;
        let changed = self.set.update(id, apply);
        self.set.release(id);
        Ok(changed)
    }

    fn begin_turn(&self, id: &str, request_id: &str, start: u64) {
        self.set.begin_turn(id, request_id, start);
    }

    async fn claim_orphans(&self, _grace: Duration) -> Result<Vec<Orphan>, StoreError> {
        Ok(std::mem::take(&mut *self.running.locked()))
    }

    fn resumable(&self) -> bool {
        true
    }

    fn remove(&self, id: &str) {
        self.set.remove(id);
    }

    fn release(&self, id: &str) {
        self.set.release(id);
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        // Every task the gateway answered for is in the database first.
        self.set.queue.caught_up(CATCH_UP_WAIT).await;
        let query = query.clone();
        self.off_workers(move |set, readers| readers.list(&query, &|id| set.newest_here(id)))
            .await
    }

    fn len(&self) -> usize {
        self.totals.read_locked().tasks
    }

    fn bytes(&self) -> usize {
        self.totals.read_locked().bytes
    }

    fn state_counts(&self) -> Vec<(TaskState, usize)> {
        self.totals.read_locked().states.clone()
    }

    fn pending_writes(&self) -> usize {
        self.set.queue.pending()
    }

    fn flush(&self, timeout: Duration) -> bool {
        self.set.queue.wait_empty(timeout)
    }

    fn keep_delivery(&self, delivery: Arc<PendingDelivery>) {
        self.set.queue.push_delivery(delivery.id, Some(delivery));
    }

    fn forget_delivery(&self, id: u64) {
        self.set.queue.push_delivery(id, None);
    }

    fn take_pending_deliveries(&self) -> Vec<PendingDelivery> {
        std::mem::take(&mut *self.pending_deliveries.locked())
    }
}

/// The events of `id` after `after` (at most `limit`): those committed, then those still
/// queued. Blocks on the database.
fn logged_events(
    set: &WorkingSet,
    readers: &Readers,
    id: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<StoredEvent>, StoreError> {
    // The queue first: a batch committed meanwhile is then read from the database.
    let queued = set.queue.queued_events(id, after, limit);
    let committed = readers.events(id, after, limit)?;
    let events = merge_logged(id, after, limit, committed, &queued)?;
    if events.is_empty() && set.memory.get(id).is_none() && !readers.exists(id)? {
        return Err(StoreError::TaskNotFound(id.to_owned()));
    }
    Ok(events)
}

#[cfg(test)]
mod tests;
