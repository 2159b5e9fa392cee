//! Opening the SQLite store: the data directory's lock, the schema (and its upgrades from
//! earlier versions), the tasks the previous gateway left running, the bounds, the counts,
//! and the webhook deliveries left pending. Nothing here loads the tasks the gateway does
//! not bridge.

use super::writer::{apply_bounds, count, upsert_task};
use super::{DB_FILE, LOCK_FILE};
use crate::store::working_set::Totals;
use crate::store::{Orphan, PendingDelivery, StoreError, StoreLimits};
use rusqlite::{Connection, params};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::reads::{RECORD_COLUMNS, apply_logged, record_from_row};
use crate::store::columns::{from_millis, millis};

/// A pending webhook delivery whose next attempt is older than this is dropped at start.
const DELIVERY_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

const SCHEMA: &str = "
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
CREATE TABLE IF NOT EXISTS task_events (
    task_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time INTEGER NOT NULL,
    event TEXT NOT NULL,
    position INTEGER
);
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
";

/// The columns added since the first version of `tasks`, with their definitions.
const ADDED_COLUMNS: [(&str, &str, &str); 8] = [
    ("tasks", "seq", "INTEGER NOT NULL DEFAULT 0"),
    ("tasks", "log_bytes", "INTEGER NOT NULL DEFAULT 0"),
    ("tasks", "bytes", "INTEGER NOT NULL DEFAULT 0"),
    ("tasks", "context_id", "TEXT"),
    ("tasks", "state", "TEXT"),
    ("tasks", "turn_request", "TEXT"),
    ("tasks", "turn_start", "INTEGER"),
    ("task_events", "position", "INTEGER"),
];

/// Made once the columns are there. A task's events are found through `task_events_order`:
/// the table itself is written in the order events come (by rowid), so that logging an
/// event appends to its last page instead of inserting its whole row among those of
/// tasks of random ids, which read a page from disk for nearly every event once the
/// table outgrew the writer's cache.
const INDEXES: &str = "
DROP INDEX IF EXISTS tasks_created;
CREATE INDEX IF NOT EXISTS tasks_listing ON tasks (updated DESC, id);
CREATE INDEX IF NOT EXISTS tasks_retention ON tasks (final, updated, created);
CREATE UNIQUE INDEX IF NOT EXISTS task_events_order ON task_events (task_id, seq);
";

/// The table of events of earlier versions, keyed by its primary key (`WITHOUT ROWID`),
/// rewritten as this version's (see [`INDEXES`]).
const EVENTS_BY_ROWID: &str = "
CREATE TABLE task_events_by_rowid (
    task_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time INTEGER NOT NULL,
    event TEXT NOT NULL,
    position INTEGER
);
INSERT INTO task_events_by_rowid (task_id, seq, time, event, position)
    SELECT task_id, seq, time, event, position FROM task_events ORDER BY task_id, seq;
DROP TABLE task_events;
ALTER TABLE task_events_by_rowid RENAME TO task_events;
";

/// The writer's page cache, in KiB (SQLite's default is 2 MiB): room for the pages of
/// the indexes that every new task and event inserts into at a random place (about 60
/// bytes an entry: 6 MiB for 100,000 events), so that writing them reads nothing from
/// disk. The readers keep the default.
const WRITER_CACHE_KIB: i64 = 16 * 1024;

/// What [`open`] hands the store.
pub(super) struct Opened {
    pub(super) conn: Connection,
    pub(super) path: PathBuf,
    pub(super) lock: std::fs::File,
    pub(super) totals: Totals,
    pub(super) deliveries: Vec<PendingDelivery>,
    /// The tasks left running.
    pub(super) running: Vec<Orphan>,
}

/// See the module docs.
pub(super) fn open(dir: &Path, limits: StoreLimits) -> Result<Opened, StoreError> {
    let storage = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::Storage(format!("{what} {}: {e}", dir.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| storage("cannot create the data directory", &e))?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))
        .map_err(|e| storage("cannot open the lock file in", &e))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(StoreError::Storage(format!(
                "the task database in {} is in use by another gateway (one gateway per data directory)",
                dir.display()
            )));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(storage("cannot lock the data directory", &e));
        }
    }
    let path = dir.join(DB_FILE);
    let mut conn =
        Connection::open(&path).map_err(|e| storage("cannot open the task database in", &e))?;
    conn.busy_timeout(Duration::from_secs(5))
        .and_then(|_| conn.pragma_update(None, "journal_mode", "WAL"))
        .and_then(|_| conn.pragma_update(None, "synchronous", "NORMAL"))
        .and_then(|_| conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB))
        .map_err(|e| storage("cannot configure the task database in", &e))?;
    conn.execute_batch(SCHEMA)
        .map_err(|e| storage("cannot create the task table in", &e))?;
    upgrade(&mut conn).map_err(|e| storage("cannot upgrade the task table in", &e))?;
    let running = running(&conn).map_err(|e| storage("cannot read the task database in", &e))?;
    let mut totals = count(&conn).map_err(|e| storage("cannot count the tasks in", &e))?;
    apply_bounds(&mut conn, limits, &mut totals, &mut Default::default())
        .map_err(|e| storage("cannot apply the bounds to the task database in", &e))?;
    let deliveries = load_deliveries(&conn)
        .map_err(|e| storage("cannot read the pending webhook deliveries in", &e))?;
    Ok(Opened {
        conn,
        path,
        lock,
        totals,
        deliveries,
        running,
    })
}

/// Adds the columns and indexes of this version to a database made by an earlier one, and
/// fills the new columns of its rows.
fn upgrade(conn: &mut Connection) -> rusqlite::Result<()> {
    let mut columns = Vec::new();
    for table in ["tasks", "task_events"] {
        let mut statement = conn.prepare(&format!("PRAGMA table_info({table})"))?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            columns.push((table, row.get::<_, String>(1)?));
        }
    }
    for (table, column, definition) in ADDED_COLUMNS {
        if !columns.iter().any(|(t, c)| *t == table && c == column) {
            conn.execute_batch(&format!(
                "ALTER TABLE {table} ADD COLUMN {column} {definition}"
            ))?;
        }
    }
    let events_table: String = conn.query_row(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'task_events'",
        [],
        |row| row.get(0),
    )?;
    if events_table.to_ascii_uppercase().contains("WITHOUT ROWID") {
        let tx = conn.transaction()?;
        tx.execute_batch(EVENTS_BY_ROWID)?;
        tx.commit()?;
        tracing::info!("task database upgraded: its events are written in the order they come");
    }
    conn.execute_batch(INDEXES)?;
    // Rows of an earlier version: their state, context and bytes from their snapshot.
    let tx = conn.transaction()?;
    let mut filled = Vec::new();
    {
        let mut statement = tx.prepare(&format!(
            "SELECT {RECORD_COLUMNS} FROM tasks WHERE state IS NULL"
        ))?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            match record_from_row(row)? {
                Ok((record, log_bytes)) => filled.push((record, log_bytes)),
                Err(message) => tracing::warn!(%message, "a stored task does not parse"),
            }
        }
    }
    for (record, log_bytes) in &filled {
        upsert_task(&tx, record, *log_bytes, None)?;
    }
    // Those that do not parse cannot be served: they go.
    if tx.execute("DELETE FROM tasks WHERE state IS NULL", [])? > 0 {
        tx.execute(
            "DELETE FROM task_events WHERE task_id NOT IN (SELECT id FROM tasks)",
            [],
        )?;
    }
    if !filled.is_empty() {
        tracing::info!(tasks = filled.len(), "task database upgraded");
    }
    tx.commit()
}

/// The tasks that were running (submitted or working) when the previous gateway stopped,
/// each with what is known of its turn, for the gateway to follow their replies or fail
/// them ([`TaskStore::claim_orphans`](crate::store::TaskStore::claim_orphans)).
fn running(conn: &Connection) -> rusqlite::Result<Vec<Orphan>> {
    let mut statement = conn.prepare(&format!(
        "SELECT {RECORD_COLUMNS}, turn_request, turn_start FROM tasks
         WHERE final = 0 AND state IN ('submitted', 'working')"
    ))?;
    let mut last_position =
        conn.prepare("SELECT max(position) FROM task_events WHERE task_id = ?1 AND seq > ?2")?;
    let mut rows = statement.query([])?;
    let mut orphans = Vec::new();
    while let Some(row) = rows.next()? {
        let (mut record, _) = match record_from_row(row)? {
            Ok(read) => read,
            Err(message) => {
                tracing::warn!(%message, "a running task that does not parse is left as it is");
                continue;
            }
        };
        apply_logged(conn, &mut record)?;
        let request_id: Option<String> = row.get(10)?;
        let turn_start = row
            .get::<_, Option<i64>>(11)?
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(record.seq);
        // The turn's last event from the agent that is logged: the next one follows it.
        let last: Option<i64> = last_position.query_row(
            params![
                record.task.id,
                i64::try_from(turn_start).unwrap_or(i64::MAX)
            ],
            |row| row.get(0),
        )?;
        orphans.push(Orphan {
            gateway: String::new(),
            next_position: last.map_or(0, |p| u64::try_from(p).unwrap_or(0) + 1),
            turn_start,
            request_id,
            record,
            broker_node: None,
        });
    }
    Ok(orphans)
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
