//! The durable task store: SQLite (compiled in, WAL mode) under a data directory, so that
//! `tasks/get` and `tasks/list` still answer after a restart, with every task's event log.
//!
//! Reads never touch the database: every task is loaded into a [`MemoryStore`] at start and
//! served from it. Writes go behind: each change is queued (a short mutex, no I/O), and a
//! dedicated writer thread takes the whole queue and writes it in one transaction, so a send
//! never waits for the disk. A crash (even SIGKILL) loses at most the changes of the last few
//! milliseconds that were not committed yet; `synchronous = NORMAL` in WAL mode keeps every
//! committed transaction through a process crash (an OS crash may lose the last ones).
//!
//! Two tables hold a task. `task_events` has one row per event (task id, sequence, time in
//! milliseconds, the event as the codec's 1.0 JSON), appended as events come: what an event
//! costs the writer is that event, however long its task is. The queue holds the event
//! itself (shared with the bridge's subscribers); the writer's thread encodes it, so the
//! async workers never do. `tasks` has one row per task, a
//! snapshot of its record and the sequence it covers, written when the task is created or
//! replaced (a follow-up turn), when [`TaskStore::update`] changes it, when its stream ends
//! (finished, or waiting for input or authentication), and as it grows, each time its events
//! since the last snapshot add as many bytes as the task had then (at least 256 KiB): a
//! growing task's snapshots are written at doubling sizes, so they cost about twice what its
//! events do, not the square of it. At start every snapshot is loaded and the events after
//! its sequence are applied to it, so nothing committed is lost. A task's rows go with it.
//! The queue holds events up to 64 MiB (estimated); past that (a disk that fell far behind) events are
//! no longer logged, only the snapshots of their tasks are written (the tasks lose nothing,
//! their logs have a gap) until it drains.
//!
//! The bounds are the memory store's (see the [`store`](super) module docs): the bytes of a
//! task are its record plus its log on disk (estimated as events come; a log read back at
//! start counts its rows' lengths), so `max_bytes` bounds the disk (about that) and
//! the memory (the records, less). What the memory store evicts is deleted from the database
//! by the writer; finished tasks past `max_age` are looked for every minute and at start.
//!
//! Tasks that were running (submitted or working) when the previous gateway stopped are
//! failed at start: their reply streams went with that process.
//!
//! Pending webhook deliveries ([`PendingDelivery`]) go the same way: kept, updated and
//! forgotten through the same write-behind queue (a send never waits for them either), in a
//! table of their own, and handed back once after a restart so that they are delivered then;
//! one older than a day is dropped at start. The database is opened in SQLite's exclusive
//! locking mode: a second gateway on the same directory is refused at start rather than
//! corrupting the first one's view.

use super::memory::{LogMode, LoggedEvent};
use super::write_behind::{Batch, Queue, RecordWork};
use super::{
    MemoryStore, Origin, PendingDelivery, StoreError, StoreLimits, StoredEvent, TaskPage,
    TaskQuery, TaskRecord, TaskStore,
};
use crate::task_events;
use mesh_core::dialect::Dialect;
use mesh_core::model::{Message, Part, Role, TaskState, TaskStatus, is_final_state};
use mesh_core::rpc::Reply;
use mesh_core::sync::MutexExt;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The database file in the data directory.
pub const DB_FILE: &str = "gateway-tasks.sqlite3";

/// How often the writer looks for finished tasks past their age.
const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// A pending webhook delivery whose next attempt is older than this is dropped at start.
const DELIVERY_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// Tasks in SQLite, served from memory. See the module docs.
pub struct SqliteStore {
    memory: Arc<MemoryStore>,
    queue: Arc<Queue>,
    /// The connection: the writer's, and [`TaskStore::events_after`]'s between batches.
    conn: Arc<Mutex<Connection>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    path: PathBuf,
    /// The deliveries pending at open, until the pusher takes them.
    pending_deliveries: Mutex<Vec<PendingDelivery>>,
    stats: Arc<Counters>,
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

impl SqliteStore {
    /// Opens (or creates) the store in `dir` (created if missing), loads every task (and
    /// applies the events logged after its snapshot), and starts the writer thread.
    pub fn open(dir: &Path, limits: StoreLimits) -> Result<SqliteStore, StoreError> {
        let storage = |what: &str, e: &dyn std::fmt::Display| {
            StoreError::Storage(format!("{what} {}: {e}", dir.display()))
        };
        let in_use = |what: &str, e: rusqlite::Error| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                StoreError::Storage(format!(
                    "the task database in {} is in use by another gateway (one gateway per data directory)",
                    dir.display()
                ))
            }
            _ => storage(what, &e),
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| storage("cannot create the data directory", &e))?;
        let path = dir.join(DB_FILE);
        let conn =
            Connection::open(&path).map_err(|e| storage("cannot open the task database in", &e))?;
        conn.busy_timeout(Duration::from_millis(500))
            .map_err(|e| storage("cannot configure the task database in", &e))?;
        // Exclusive: one gateway per data directory. The lock is taken by the first write
        // below and held until the connection closes (or the process dies).
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
            .and_then(|_| conn.pragma_update(None, "journal_mode", "WAL"))
            .and_then(|_| conn.pragma_update(None, "synchronous", "NORMAL"))
            .map_err(|e| in_use("cannot configure the task database in", e))?;
        conn.execute_batch(
            "BEGIN EXCLUSIVE;
             CREATE TABLE IF NOT EXISTS tasks (
                 id TEXT PRIMARY KEY NOT NULL,
                 agent TEXT NOT NULL,
                 dialect TEXT NOT NULL,
                 owner TEXT,
                 created INTEGER NOT NULL,
                 updated INTEGER NOT NULL,
                 final INTEGER NOT NULL,
                 task TEXT NOT NULL,
                 push TEXT
             );
             CREATE INDEX IF NOT EXISTS tasks_created ON tasks (created);
             CREATE TABLE IF NOT EXISTS task_events (
                 task_id TEXT NOT NULL,
                 seq INTEGER NOT NULL,
                 time INTEGER NOT NULL,
                 event TEXT NOT NULL,
                 PRIMARY KEY (task_id, seq)
             ) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS webhook_deliveries (
                 id INTEGER PRIMARY KEY NOT NULL,
                 task_id TEXT NOT NULL,
                 config_id TEXT,
                 url TEXT NOT NULL,
                 config TEXT NOT NULL,
                 payload BLOB NOT NULL,
                 attempts INTEGER NOT NULL,
                 next_attempt INTEGER NOT NULL
             );
             COMMIT;",
        )
        .map_err(|e| in_use("cannot create the task table in", e))?;
        add_snapshot_columns(&conn).map_err(|e| storage("cannot upgrade the task table in", &e))?;
        let memory = Arc::new(MemoryStore::with_log(limits, LogMode::Elsewhere));
        let mut evicted = Vec::new();
        let loaded = load(&conn, &memory, &mut evicted)
            .map_err(|e| storage("cannot read the task database in", &e))?;
        memory.expire(&mut evicted);
        let pending_deliveries = load_deliveries(&conn)
            .map_err(|e| storage("cannot read the pending webhook deliveries in", &e))?;
        tracing::info!(
            path = %path.display(),
            tasks = memory.len(),
            webhook_deliveries = pending_deliveries.len(),
            "task store opened"
        );
        let queue = Arc::new(Queue::new());
        {
            let mut state = queue.lock();
            for id in &evicted {
                state.delete(id);
            }
            for id in &loaded.changed {
                if memory.get(id).is_some() {
                    state.snapshot(id);
                }
            }
        }
        let stats = Arc::new(Counters::default());
        // The writer's first batch writes what loading changed.
        let conn = Arc::new(Mutex::new(conn));
        let writer = {
            let (queue, conn, memory, stats) =
                (queue.clone(), conn.clone(), memory.clone(), stats.clone());
            std::thread::Builder::new()
                .name("mesh-task-store".into())
                .spawn(move || write_loop(&conn, &queue, &memory, &stats))
                .map_err(|e| storage("cannot start the task store's writer for", &e))?
        };
        Ok(SqliteStore {
            memory,
            queue,
            conn,
            writer: Mutex::new(Some(writer)),
            path,
            pending_deliveries: Mutex::new(pending_deliveries),
            stats,
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
        self.queue.close();
        let writer = self.writer.locked().take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }

    /// The task's logged events after `after` ([`TaskStore::events_after`]), read here:
    /// blocks on the database.
    pub fn events_after(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        logged_events(&self.memory, &self.queue, &self.conn, id, after, limit)
    }

    /// The tasks matching `query` ([`TaskStore::list`], here without waiting: they are in
    /// memory).
    pub fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        self.memory.list(query)
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
        let id = record.task.id.clone();
        let mut evicted = Vec::new();
        let inserted = self.memory.insert_record(record, &mut evicted);
        self.queue.delete(&evicted);
        inserted?;
        self.queue.snapshot(&id);
        Ok(())
    }

    fn get(&self, id: &str) -> Option<Arc<TaskRecord>> {
        self.memory.get(id)
    }

    fn append(
        &self,
        id: &str,
        event: &Arc<Reply>,
        origin: Origin,
    ) -> Result<Arc<TaskRecord>, StoreError> {
        let mut evicted = Vec::new();
        let appended = self.memory.append_event(id, event, origin, &mut evicted);
        let appended = match appended {
            Ok(appended) => appended,
            Err(error) => {
                self.queue.delete(&evicted);
                return Err(error);
            }
        };
        self.queue
            .event(id, appended.event, appended.snapshot, &evicted);
        Ok(appended.record)
    }

    async fn events_after(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let (memory, queue, conn) = (self.memory.clone(), self.queue.clone(), self.conn.clone());
        let id = id.to_owned();
        // The database is read off the async workers.
        tokio::task::spawn_blocking(move || {
            logged_events(&memory, &queue, &conn, &id, after, limit)
        })
        .await
        .map_err(|e| StoreError::Storage(format!("reading a task's events: {e}")))?
    }

    fn update(&self, id: &str, apply: &mut dyn FnMut(&mut TaskRecord)) -> Option<Arc<TaskRecord>> {
        let record = self.memory.update_record(id, apply)?;
        self.queue.snapshot(id);
        Some(record)
    }

    fn remove(&self, id: &str) {
        self.memory.remove_record(id);
        self.queue.delete(&[id.to_owned()]);
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        self.memory.list(query)
    }

    fn len(&self) -> usize {
        self.memory.len()
    }

    fn bytes(&self) -> usize {
        self.memory.bytes()
    }

    fn state_counts(&self) -> Vec<(TaskState, usize)> {
        self.memory.state_counts()
    }

    fn pending_writes(&self) -> usize {
        self.queue.pending()
    }

    fn flush(&self, timeout: Duration) -> bool {
        self.queue.wait_empty(timeout)
    }

    fn keep_delivery(&self, delivery: Arc<PendingDelivery>) {
        self.queue.push_delivery(delivery.id, Some(delivery));
    }

    fn forget_delivery(&self, id: u64) {
        self.queue.push_delivery(id, None);
    }

    fn take_pending_deliveries(&self) -> Vec<PendingDelivery> {
        std::mem::take(&mut *self.pending_deliveries.locked())
    }
}

/// The events of `id` after `after` (at most `limit`): those committed, then those still
/// queued. Blocks on the database.
fn logged_events(
    memory: &MemoryStore,
    queue: &Queue,
    conn: &Mutex<Connection>,
    id: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<StoredEvent>, StoreError> {
    if memory.get(id).is_none() {
        return Err(StoreError::TaskNotFound(id.to_owned()));
    }
    // With the connection held the writer is between batches: every event is either
    // committed or still queued.
    let conn = conn.locked();
    let queued = queue.queued_events(id, after, limit);
    let mut events = read_events(&conn, id, after, limit)
        .map_err(|e| StoreError::Storage(format!("cannot read the events of {id}: {e}")))?;
    drop(conn);
    let last = events.last().map_or(after, |e| e.seq);
    events.extend(
        queued
            .iter()
            .filter(|e| e.seq > last)
            .map(LoggedEvent::stored),
    );
    events.truncate(limit);
    match events.first() {
        Some(first) if first.seq != after + 1 => Err(StoreError::EventsForgotten {
            task: id.to_owned(),
            first: first.seq,
        }),
        _ => Ok(events),
    }
}

fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn from_millis(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

fn dialect_of(text: &str) -> Dialect {
    Dialect::from_version(text).unwrap_or(Dialect::V0_3)
}

/// JSON bytes bound as TEXT without a copy (they are UTF-8: the codec wrote them).
struct JsonText<'a>(&'a [u8]);

impl rusqlite::ToSql for JsonText<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Text(self.0)))
    }
}

/// Adds the snapshot's columns to a `tasks` table made before there was an event log.
fn add_snapshot_columns(conn: &Connection) -> rusqlite::Result<()> {
    let mut columns = Vec::new();
    {
        let mut statement = conn.prepare("PRAGMA table_info(tasks)")?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            columns.push(row.get::<_, String>(1)?);
        }
    }
    for column in ["seq", "log_bytes"] {
        if !columns.iter().any(|c| c == column) {
            conn.execute_batch(&format!(
                "ALTER TABLE tasks ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0"
            ))?;
        }
    }
    Ok(())
}

/// What loading found.
struct Loaded {
    /// Tasks that differ from their snapshot (events applied, or failed at start).
    changed: Vec<String>,
}

/// Loads every row into `memory`, oldest first, each with the events logged after its
/// snapshot applied; rows and events that do not parse are skipped (and logged), never fatal.
/// A task that was running is failed (its stream went with the previous gateway).
fn load(
    conn: &Connection,
    memory: &MemoryStore,
    evicted: &mut Vec<String>,
) -> rusqlite::Result<Loaded> {
    let mut statement = conn.prepare(
        "SELECT id, agent, dialect, owner, created, updated, task, push, seq, log_bytes
         FROM tasks ORDER BY created, rowid",
    )?;
    let mut later = conn.prepare(
        "SELECT seq, event, length(event) FROM task_events WHERE task_id = ?1 AND seq > ?2 ORDER BY seq",
    )?;
    let mut rows = statement.query([])?;
    let mut changed = Vec::new();
    while let Some(row) = rows.next()? {
        let id: String = row.get(0)?;
        let task_json: String = row.get(6)?;
        let task = match serde_json::from_str(&task_json) {
            Ok(task) => task,
            Err(error) => {
                tracing::warn!(task = %id, %error, "skipping a stored task that does not parse");
                continue;
            }
        };
        let push: Option<String> = row.get(7)?;
        let push_configs = push
            .and_then(|p| serde_json::from_str(&p).ok())
            .unwrap_or_default();
        let dialect: String = row.get(2)?;
        let seq: i64 = row.get(8)?;
        let log_bytes: i64 = row.get(9)?;
        let mut record = TaskRecord {
            task,
            agent: row.get(1)?,
            dialect: dialect_of(&dialect),
            owner: row.get(3)?,
            created: from_millis(row.get(4)?),
            updated: from_millis(row.get(5)?),
            push_configs,
            seq: u64::try_from(seq).unwrap_or(0),
        };
        let mut log_bytes = usize::try_from(log_bytes).unwrap_or(0);
        let mut replayed = false;
        let mut events = later.query(params![id, seq])?;
        while let Some(event) = events.next()? {
            let event_seq: i64 = event.get(0)?;
            let len: i64 = event.get(2)?;
            log_bytes += usize::try_from(len).unwrap_or(0);
            let json = event.get_ref(1)?.as_bytes().unwrap_or_default();
            match task_events::decode(json) {
                Ok(reply) => task_events::apply(&mut record.task, &reply),
                Err(error) => {
                    tracing::warn!(task = %id, seq = event_seq, %error, "skipping a stored event that does not parse");
                }
            }
            record.seq = u64::try_from(event_seq).unwrap_or(record.seq);
            replayed = true;
        }
        if !is_final_state(&record.task.status.state) {
            let mut message = Message::new(
                Role::Agent,
                vec![Part::text(
                    "the gateway stopped while the task was running: its reply stream is lost",
                )],
            );
            message.task_id = Some(record.task.id.clone());
            message.context_id = Some(record.task.context_id.clone());
            task_events::set_status(
                &mut record.task,
                TaskStatus {
                    state: TaskState::Failed,
                    message: Some(message),
                    timestamp: Some(chrono::Utc::now()),
                },
            );
            record.updated = SystemTime::now();
            replayed = true;
        }
        if replayed {
            changed.push(id);
        }
        memory.load(record, log_bytes, evicted);
    }
    Ok(Loaded { changed })
}

/// The events of `id` after `after`, from the database.
fn read_events(
    conn: &Connection,
    id: &str,
    after: u64,
    limit: usize,
) -> rusqlite::Result<Vec<StoredEvent>> {
    let mut statement = conn.prepare_cached(
        "SELECT seq, time, event FROM task_events WHERE task_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
    )?;
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut rows = statement.query(params![id, after, limit])?;
    let mut events = Vec::new();
    while let Some(row) = rows.next()? {
        let seq: i64 = row.get(0)?;
        let json = row.get_ref(2)?.as_bytes().unwrap_or_default();
        events.push(StoredEvent {
            seq: u64::try_from(seq).unwrap_or(0),
            time: from_millis(row.get(1)?),
            json: bytes::Bytes::copy_from_slice(json),
        });
    }
    Ok(events)
}

/// The pending webhook deliveries, in the order of their ids. Those older than
/// [`DELIVERY_MAX_AGE`] and rows that do not parse are deleted (and logged), never fatal.
fn load_deliveries(conn: &Connection) -> rusqlite::Result<Vec<PendingDelivery>> {
    let cutoff = millis(SystemTime::now()).saturating_sub(DELIVERY_MAX_AGE.as_millis() as i64);
    let dropped = conn.execute(
        "DELETE FROM webhook_deliveries WHERE next_attempt < ?1",
        params![cutoff],
    )?;
    if dropped > 0 {
        tracing::warn!(
            deliveries = dropped,
            "dropped webhook deliveries pending for more than a day"
        );
    }
    let mut statement = conn.prepare(
        "SELECT id, task_id, config, payload, attempts, next_attempt FROM webhook_deliveries ORDER BY id",
    )?;
    let mut rows = statement.query([])?;
    let mut deliveries = Vec::new();
    let mut unreadable = Vec::new();
    while let Some(row) = rows.next()? {
        let id: i64 = row.get(0)?;
        let task_id: String = row.get(1)?;
        let config: String = row.get(2)?;
        let parsed = u64::try_from(id).map_err(|e| e.to_string()).and_then(|id| {
            Ok((
                id,
                serde_json::from_str(&config).map_err(|e| e.to_string())?,
            ))
        });
        let (delivery_id, config) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => {
                tracing::warn!(task = %task_id, delivery = id, %error, "dropping a stored webhook delivery that does not parse");
                unreadable.push(id);
                continue;
            }
        };
        let payload: Vec<u8> = row.get(3)?;
        let attempts: i64 = row.get(4)?;
        deliveries.push(PendingDelivery {
            id: delivery_id,
            task_id,
            config,
            body: bytes::Bytes::from(payload),
            attempts: u32::try_from(attempts.max(0)).unwrap_or(u32::MAX),
            next_attempt: from_millis(row.get(5)?),
        });
    }
    drop(rows);
    for id in unreadable {
        conn.execute("DELETE FROM webhook_deliveries WHERE id = ?1", params![id])?;
    }
    Ok(deliveries)
}

/// Writes a batch in one transaction: deletions, then events, then snapshots (of the records
/// as they are in memory now), then webhook deliveries. Counts what it wrote in `written`.
fn write_batch(
    conn: &mut Connection,
    batch: &Batch,
    memory: &MemoryStore,
    written: &mut WriteStats,
) -> rusqlite::Result<()> {
    *written = WriteStats::default();
    let tx = conn.transaction()?;
    {
        let mut delete_task = tx.prepare_cached("DELETE FROM tasks WHERE id = ?1")?;
        let mut delete_events = tx.prepare_cached("DELETE FROM task_events WHERE task_id = ?1")?;
        for (id, work) in &batch.records {
            if matches!(
                work,
                RecordWork::Delete | RecordWork::Snapshot { fresh: true }
            ) {
                delete_task.execute(params![id])?;
                delete_events.execute(params![id])?;
            }
        }
        let mut append = tx.prepare_cached(
            "INSERT OR REPLACE INTO task_events (task_id, seq, time, event) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for (id, events) in batch.events.iter() {
            for event in events {
                // Encoded here, on the writer's thread: never on the caller's path.
                let json = task_events::encode(&event.event);
                append.execute(params![
                    id,
                    i64::try_from(event.seq).unwrap_or(i64::MAX),
                    millis(event.time),
                    JsonText(&json),
                ])?;
                written.events += 1;
                written.event_bytes += json.len() as u64;
            }
        }
        let mut upsert = tx.prepare_cached(
            "INSERT INTO tasks (id, agent, dialect, owner, created, updated, final, task, push, seq, log_bytes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT(id) DO UPDATE SET agent = ?2, dialect = ?3, owner = ?4, created = ?5,
                 updated = ?6, final = ?7, task = ?8, push = ?9, seq = ?10, log_bytes = ?11",
        )?;
        for (id, work) in &batch.records {
            if *work == RecordWork::Delete {
                continue;
            }
            // Gone meanwhile: its deletion is queued.
            let Some((r, log_bytes)) = memory.snapshot_of(id) else {
                continue;
            };
            let task = serde_json::to_string(&r.task).unwrap_or_default();
            let push = (!r.push_configs.is_empty())
                .then(|| serde_json::to_string(&r.push_configs).unwrap_or_default());
            upsert.execute(params![
                id,
                r.agent,
                r.dialect.version(),
                r.owner,
                millis(r.created),
                millis(r.updated),
                r.task.status.state.is_terminal(),
                task,
                push,
                i64::try_from(r.seq).unwrap_or(i64::MAX),
                i64::try_from(log_bytes).unwrap_or(i64::MAX),
            ])?;
            written.snapshots += 1;
            written.snapshot_bytes += task.len() as u64;
        }
        let mut keep = tx.prepare_cached(
            "INSERT INTO webhook_deliveries (id, task_id, config_id, url, config, payload, attempts, next_attempt)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT(id) DO UPDATE SET attempts = ?7, next_attempt = ?8",
        )?;
        let mut forget = tx.prepare_cached("DELETE FROM webhook_deliveries WHERE id = ?1")?;
        for (id, delivery) in &batch.deliveries {
            let id = i64::try_from(*id).unwrap_or(i64::MAX);
            match delivery {
                Some(d) => {
                    let config = serde_json::to_string(&d.config).unwrap_or_default();
                    keep.execute(params![
                        id,
                        d.task_id,
                        d.config.id,
                        d.config.url,
                        config,
                        &d.body[..],
                        d.attempts,
                        millis(d.next_attempt),
                    ])?;
                }
                None => {
                    forget.execute(params![id])?;
                }
            }
        }
    }
    tx.commit()
}

fn write_loop(conn: &Mutex<Connection>, queue: &Queue, memory: &MemoryStore, stats: &Counters) {
    let mut last_retention = Instant::now();
    loop {
        let left = RETENTION_EVERY.saturating_sub(last_retention.elapsed());
        if !queue.wait_for_work(left) {
            break;
        }
        if last_retention.elapsed() >= RETENTION_EVERY {
            last_retention = Instant::now();
            let mut evicted = Vec::new();
            memory.expire(&mut evicted);
            queue.delete(&evicted);
        }
        // The connection first, then the batch: a reader holding the connection sees every
        // event either committed or queued.
        let mut conn = conn.locked();
        let batch = queue.take();
        if batch.len() > 0 {
            // A failed batch is retried once (a transient lock or I/O error), then dropped
            // with an error in the log: the tasks stay served from memory.
            let mut written = WriteStats::default();
            let result = write_batch(&mut conn, &batch, memory, &mut written)
                .or_else(|_| write_batch(&mut conn, &batch, memory, &mut written));
            match result {
                Ok(()) => {
                    stats.events.fetch_add(written.events, Ordering::Relaxed);
                    stats
                        .event_bytes
                        .fetch_add(written.event_bytes, Ordering::Relaxed);
                    stats
                        .snapshots
                        .fetch_add(written.snapshots, Ordering::Relaxed);
                    stats
                        .snapshot_bytes
                        .fetch_add(written.snapshot_bytes, Ordering::Relaxed);
                }
                Err(error) => {
                    tracing::error!(%error, changes = batch.len(), "could not write tasks to the task store");
                }
            }
        }
        drop(conn);
        drop(batch);
        queue.committed(|| {});
    }
    queue.stopped();
    let conn = conn.locked();
    let count: Option<i64> = conn
        .query_row("SELECT count(*) FROM tasks", [], |r| r.get(0))
        .optional()
        .ok()
        .flatten();
    tracing::debug!(tasks = count, "task store closed");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::tests::{chunk, status};
    use mesh_core::model::{Task, TaskStatus};

    fn record(id: &str, state: TaskState) -> TaskRecord {
        TaskRecord::new(
            Task {
                id: id.into(),
                context_id: "ctx".into(),
                status: TaskStatus {
                    state,
                    message: None,
                    timestamp: None,
                },
                artifacts: None,
                history: None,
                metadata: None,
            },
            "echo",
            Dialect::V1_0,
        )
    }

    fn limits(max_tasks: usize) -> StoreLimits {
        StoreLimits {
            max_age: Duration::from_secs(60),
            max_tasks,
            ..StoreLimits::default()
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "mesh-sqlite-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn survives_a_reopen_with_owner_and_push_configs() {
        let dir = temp_dir("reopen");
        {
            let store = SqliteStore::open(&dir, limits(100)).unwrap();
            let mut r = record("t1", TaskState::Working);
            r.owner = Some("alice".into());
            r.push_configs
                .push(mesh_core::model::TaskPushNotificationConfig {
                    url: "http://example.com/hook".into(),
                    id: Some("c1".into()),
                    task_id: "t1".into(),
                    token: Some("tok".into()),
                    authentication: None,
                    tenant: None,
                });
            store.insert(r).unwrap();
            store.insert(record("t2", TaskState::Working)).unwrap();
            store.update("t1", &mut |r| r.task.status.state = TaskState::Completed);
            store.remove("t2");
            assert!(store.flush(Duration::from_secs(5)));
            assert_eq!(store.pending_writes(), 0);
        }
        let store = SqliteStore::open(&dir, limits(100)).unwrap();
        assert_eq!(store.len(), 1);
        let t1 = store.get("t1").unwrap();
        assert_eq!(t1.task.status.state, TaskState::Completed);
        assert_eq!(t1.owner.as_deref(), Some("alice"));
        assert_eq!(t1.push_configs[0].token.as_deref(), Some("tok"));
        assert_eq!(t1.dialect, Dialect::V1_0);
        drop(store);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn delivery(id: u64, task: &str, attempts: u32) -> Arc<PendingDelivery> {
        Arc::new(PendingDelivery {
            id,
            task_id: task.into(),
            config: mesh_core::model::TaskPushNotificationConfig {
                url: "https://example.com/hook".into(),
                id: Some("c1".into()),
                task_id: task.into(),
                token: Some("tok".into()),
                authentication: None,
                tenant: None,
            },
            body: bytes::Bytes::from(format!("{{\"id\":\"{task}\",\"n\":{id}}}")),
            attempts,
            next_attempt: UNIX_EPOCH + Duration::from_secs(2_000_000_000),
        })
    }

    #[test]
    fn pending_deliveries_survive_a_reopen_until_forgotten() {
        let dir = temp_dir("deliveries");
        {
            let store = SqliteStore::open(&dir, limits(100)).unwrap();
            assert!(store.take_pending_deliveries().is_empty());
            for id in [3, 1, 2, 4] {
                store.keep_delivery(delivery(id, "t", 0));
            }
            assert!(store.flush(Duration::from_secs(5)));
            // A retry updates the count; a success forgets; a delivery kept and forgotten
            // before the writer saw it never reaches the disk.
            store.keep_delivery(delivery(2, "t", 3));
            store.forget_delivery(3);
            store.keep_delivery(delivery(5, "u", 0));
            store.forget_delivery(5);
            assert!(store.flush(Duration::from_secs(5)));
            assert_eq!(store.pending_writes(), 0);
        }
        let store = SqliteStore::open(&dir, limits(100)).unwrap();
        let pending = store.take_pending_deliveries();
        let seen: Vec<(u64, u32)> = pending.iter().map(|d| (d.id, d.attempts)).collect();
        assert_eq!(seen, [(1, 0), (2, 3), (4, 0)], "in id order");
        let first = &pending[0];
        assert_eq!(first.task_id, "t");
        assert_eq!(first.config.token.as_deref(), Some("tok"));
        assert_eq!(&first.body[..], &delivery(1, "t", 0).body[..]);
        assert_eq!(first.next_attempt, delivery(1, "t", 0).next_attempt);
        assert!(
            store.take_pending_deliveries().is_empty(),
            "handed out once"
        );
        drop(store);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_second_store_on_the_same_directory_is_refused() {
        let dir = temp_dir("exclusive");
        let first = SqliteStore::open(&dir, limits(100)).unwrap();
        first.insert(record("t", TaskState::Working)).unwrap();
        assert!(first.flush(Duration::from_secs(5)));
        let second = SqliteStore::open(&dir, limits(100));
        let Err(StoreError::Storage(message)) = second else {
            panic!("a second store opened");
        };
        assert!(message.contains("another gateway"), "{message}");
        drop(first);
        assert!(SqliteStore::open(&dir, limits(100)).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn retention_by_count_applies_on_reopen() {
        let dir = temp_dir("retention");
        {
            let store = SqliteStore::open(&dir, limits(100)).unwrap();
            for i in 0..10 {
                let mut r = record(&format!("t{i}"), TaskState::Working);
                r.created = UNIX_EPOCH + Duration::from_secs(1_000 + i);
                store.insert(r).unwrap();
            }
            assert!(store.flush(Duration::from_secs(5)));
        }
        let store = SqliteStore::open(&dir, limits(3)).unwrap();
        assert_eq!(store.len(), 3);
        assert!(store.get("t9").is_some() && store.get("t0").is_none());
        drop(store);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn events_are_logged_and_applied_after_the_snapshot_on_reopen() {
        let dir = temp_dir("events");
        let n = 20_000u64;
        {
            let store = SqliteStore::open(&dir, limits(100)).unwrap();
            store.insert(record("t", TaskState::Working)).unwrap();
            store.insert(record("done", TaskState::Working)).unwrap();
            store
                .append(
                    "done",
                    &status("done", TaskState::Completed),
                    Origin::default(),
                )
                .unwrap();
            for i in 0..n {
                let text = format!(
                    "[{i}] a paragraph of about eighty bytes, as the writer agent streams them.\n"
                );
                store
                    .append("t", &chunk("t", &text), Origin::default())
                    .unwrap();
            }
            assert!(store.flush(Duration::from_secs(30)));
            let stats = store.write_stats();
            assert_eq!(stats.events, n + 1, "{stats:?}");
            // Snapshots at the insert, at the end of "done", then at doubling sizes: few, and
            // all of them together within a small multiple of the events' bytes.
            assert!(stats.snapshots <= 12, "{stats:?}");
            assert!(stats.snapshot_bytes <= 3 * stats.event_bytes, "{stats:?}");
            assert_eq!(store.events_after("t", n - 2, 10).unwrap().len(), 2);
            // Events committed after the last snapshot are applied at the next start.
        }
        let store = SqliteStore::open(&dir, limits(100)).unwrap();
        let t = store.get("t").unwrap();
        assert_eq!(t.seq, n);
        assert_eq!(
            t.task.artifacts.as_ref().unwrap()[0].parts.len(),
            n as usize
        );
        // It was running: the previous gateway took its stream along.
        assert_eq!(t.task.status.state, TaskState::Failed);
        assert_eq!(
            store.get("done").unwrap().task.status.state,
            TaskState::Completed
        );
        let first = store.events_after("t", 0, 3).unwrap();
        let seqs: Vec<u64> = first.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert!(matches!(
            first[0].reply().unwrap(),
            Reply::ArtifactUpdate(_)
        ));
        assert!(store.events_after("t", n, 3).unwrap().is_empty());
        assert!(matches!(
            store.events_after("nope", 0, 3),
            Err(StoreError::TaskNotFound(_))
        ));
        // A removed task takes its events along.
        store.remove("t");
        assert!(store.flush(Duration::from_secs(5)));
        drop(store);
        let conn = Connection::open(dir.join(DB_FILE)).unwrap();
        let left: i64 = conn
            .query_row(
                "SELECT count(*) FROM task_events WHERE task_id = 't'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0);
        drop(conn);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn queued_events_are_read_with_the_committed_ones() {
        let dir = temp_dir("queued");
        let store = SqliteStore::open(&dir, limits(100)).unwrap();
        store.insert(record("t", TaskState::Working)).unwrap();
        for i in 0..50 {
            store
                .append("t", &chunk("t", &format!("{i}")), Origin::default())
                .unwrap();
        }
        // Whatever the writer has committed so far, the log reads whole and in order.
        let events = store.events_after("t", 10, 1000).unwrap();
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (11..=50).collect::<Vec<u64>>());
        drop(store);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_append_does_not_copy_the_record() {
        use crate::store::memory::tests::id_address;
        let dir = temp_dir("in-place");
        let store = SqliteStore::open(&dir, limits(100)).unwrap();
        store.insert(record("t", TaskState::Working)).unwrap();
        // The insert's snapshot is written (the writer reads the record for it).
        assert!(store.flush(Duration::from_secs(5)));
        for i in 0..1000 {
            let before = id_address(&store, "t");
            store
                .append("t", &chunk("t", &format!("{i}")), Origin::default())
                .unwrap();
            assert_eq!(
                id_address(&store, "t"),
                before,
                "append {i} copied the record"
            );
        }
        drop(store);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn evicted_tasks_leave_the_disk() {
        let dir = temp_dir("evicted");
        {
            let store = SqliteStore::open(&dir, limits(2)).unwrap();
            store.insert(record("a", TaskState::Working)).unwrap();
            store
                .append("a", &chunk("a", "x"), Origin::default())
                .unwrap();
            store
                .append("a", &status("a", TaskState::Completed), Origin::default())
                .unwrap();
            store.insert(record("b", TaskState::InputRequired)).unwrap();
            store.insert(record("c", TaskState::InputRequired)).unwrap();
            assert!(store.get("a").is_none());
            assert!(matches!(
                store.insert(record("d", TaskState::Working)),
                Err(StoreError::Full(_))
            ));
            assert!(store.flush(Duration::from_secs(5)));
        }
        let conn = Connection::open(dir.join(DB_FILE)).unwrap();
        let events: i64 = conn
            .query_row("SELECT count(*) FROM task_events", [], |r| r.get(0))
            .unwrap();
        let tasks: i64 = conn
            .query_row("SELECT count(*) FROM tasks", [], |r| r.get(0))
            .unwrap();
        assert_eq!((tasks, events), (2, 0));
        drop(conn);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The hot-path cost of write-behind and what the writer sustains:
    /// `cargo test -p mesh-gateway --lib -- --ignored --nocapture write_behind_cost`.
    #[test]
    #[ignore = "a measurement, not a test"]
    fn write_behind_cost() {
        let n = 50_000;
        let limits = StoreLimits {
            max_tasks: 1_000_000,
            ..StoreLimits::default()
        };
        let memory = MemoryStore::new(limits);
        let dir = temp_dir("cost");
        let sqlite = SqliteStore::open(&dir, limits).unwrap();
        let stores: [(&str, &dyn TaskStore); 2] = [("memory", &memory), ("sqlite", &sqlite)];
        for (name, store) in stores {
            let began = Instant::now();
            for i in 0..n {
                let id = format!("t{i}");
                store.insert(record(&id, TaskState::Submitted)).unwrap();
                store.update(&id, &mut |r| r.task.status.state = TaskState::Working);
                store.update(&id, &mut |r| r.task.status.state = TaskState::Completed);
            }
            let calls = began.elapsed();
            let flushing = Instant::now();
            assert!(store.flush(Duration::from_secs(120)));
            println!(
                "{name:>6}: {n} tasks x 3 changes: {:.2?} in the callers ({:.2?} per change), then {:.2?} until durable; {:.0} tasks/s end to end",
                calls,
                calls / (3 * n as u32),
                flushing.elapsed(),
                n as f64 / began.elapsed().as_secs_f64(),
            );
        }
        drop(sqlite);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
