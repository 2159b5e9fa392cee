//! The writer thread of the SQLite store: the write-behind queue's batches into the
//! database, one transaction each; the counts of the tasks, kept as rows change; the bounds;
//! the working set's tasks let go once written.

use super::{Counters, WriteStats};
use crate::store::columns::{millis, push_json, sql_int};
use crate::store::working_set::{Totals, WorkingSet};
use crate::store::write_behind::{Batch, RecordWork};
use crate::store::{StoreLimits, TaskRecord, TaskStore};
use crate::task_events;
use mesh_core::sync::RwLockExt;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// How often the writer deletes the finished tasks past their age.
const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// See the module docs.
pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) set: Arc<WorkingSet>,
    pub(super) totals: Arc<RwLock<Totals>>,
    pub(super) limits: StoreLimits,
    pub(super) stats: Arc<Counters>,
    /// See [`Rows`].
    pub(super) rows: Rows,
}

/// What the database holds of the tasks the writer wrote lately (state and bytes, for the
/// counts), so that writing a task's row again does not read it first. The writer is the
/// database's only writer: an entry stays true until the writer changes the row, and is
/// updated then. Entries of tasks that left the working set are dropped now and then; the
/// whole is cleared when a transaction fails.
pub(super) type Rows = HashMap<String, (&'static str, usize)>;

/// How many entries [`Rows`] keeps at least before it drops those of tasks that left the
/// working set.
const ROWS_KEPT: usize = 4096;

impl Writer {
    /// The writer's loop, until the queue is closed and written.
    pub(super) fn run(mut self) {
        let mut last_retention = Instant::now();
        loop {
            let left = RETENTION_EVERY.saturating_sub(last_retention.elapsed());
            if !self.set.queue.wait_for_work(left) {
                break;
            }
            let batch = self.set.queue.take();
            let mut totals = None;
            if batch.len() > 0 {
                // A failed batch is retried once (a transient lock or I/O error), then
                // dropped with an error in the log.
                let mut written = WriteStats::default();
                let result = self.write(&batch, &mut written).or_else(|_| {
                    self.rows.clear();
                    self.write(&batch, &mut written)
                });
                match result {
                    Ok(after) => {
                        totals = Some(after);
                        self.stats.add(&written);
                    }
                    Err(error) => {
                        self.rows.clear();
                        tracing::error!(%error, changes = batch.len(), "could not write tasks to the task store");
                    }
                }
            }
            drop(batch);
            if self.rows.len() > ROWS_KEPT.max(2 * self.set.memory.len()) {
                let memory = &self.set.memory;
                self.rows.retain(|id, _| memory.get(id).is_some());
            }
            // The counts are published with the bounds applied, and before the batch counts
            // as committed: no reader sees the store past its bounds once they are applied.
            let mut totals = totals.unwrap_or_else(|| self.totals.read_locked().clone());
            if totals.over(self.limits) || last_retention.elapsed() >= RETENTION_EVERY {
                last_retention = Instant::now();
                let before = totals.clone();
                if let Err(error) =
                    apply_bounds(&mut self.conn, self.limits, &mut totals, &mut self.rows)
                {
                    tracing::warn!(%error, "could not apply the task store's bounds");
                    self.rows.clear();
                    totals = before;
                }
            }
            *self.totals.write_locked() = totals;
            if self.set.queue.lock().is_empty() {
                self.set.all_counted();
            }
            self.set.queue.committed(|| self.set.let_go());
        }
        self.set.queue.stopped();
        tracing::debug!(tasks = self.totals.read_locked().tasks, "task store closed");
    }

    /// Writes a batch in one transaction: deletions, then events, then snapshots (of the
    /// records as they are in memory now), then the state of the tasks with events only,
    /// then webhook deliveries, then, at the bounds, the oldest finished tasks. Returns the
    /// counts as they are after it.
    fn write(&mut self, batch: &Batch, written: &mut WriteStats) -> rusqlite::Result<Totals> {
        *written = WriteStats::default();
        let mut totals = self.totals.read_locked().clone();
        let tx = self.conn.transaction()?;
        for (id, work) in &batch.records {
            if matches!(
                work,
                RecordWork::Delete | RecordWork::Snapshot { fresh: true }
            ) {
                delete_task(&tx, id, &mut totals, &mut self.rows)?;
            }
        }
        {
            let mut append = tx.prepare_cached(
                "INSERT OR REPLACE INTO task_events (task_id, seq, time, event, position)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for (id, events) in batch.events.iter() {
                for event in events {
                    // Encoded here, on the writer's thread: never on the caller's path.
                    let json = task_events::encode(&event.event);
                    append.execute(params![
                        id,
                        sql_int(event.seq),
                        millis(event.time),
                        JsonText(&json),
                        event.position.map(sql_int),
                    ])?;
                    written.events += 1;
                    written.event_bytes += json.len() as u64;
                }
            }
        }
        // The turns of the batch's tasks as they are now (a short lock).
        let turns = self
            .set
            .turns_of(batch.records.keys().chain(batch.events.keys()));
        let mut new_rows = Vec::new();
        for (id, work) in &batch.records {
            if *work == RecordWork::Delete {
                continue;
            }
            // Gone meanwhile: its deletion is queued.
            let Some((record, log_bytes)) = self.set.memory.snapshot_of(id) else {
                continue;
            };
            let existed = uncount(&tx, id, &mut totals, &mut self.rows)?;
            let (task_bytes, bytes) = upsert_task(&tx, &record, log_bytes, turns.get(id.as_str()))?;
            if !existed {
                new_rows.push(bytes);
            }
            let name = mesh_core::model::state_name(&record.task.status.state);
            totals.add(name, 1, bytes);
            self.rows.insert(id.clone(), (name, bytes));
            written.snapshots += 1;
            written.snapshot_bytes += task_bytes as u64;
        }
        {
            let mut state = tx.prepare_cached(
                "UPDATE tasks SET state = ?2, final = ?3, updated = ?4, bytes = ?5,
                     turn_request = coalesce(?6, turn_request), turn_start = coalesce(?7, turn_start)
                 WHERE id = ?1",
            )?;
            for id in batch.events.keys() {
                if batch.records.contains_key(id) {
                    continue;
                }
                let Some(now) = self.set.memory.state_of(id) else {
                    continue;
                };
                if uncount(&tx, id, &mut totals, &mut self.rows)? {
                    let name = mesh_core::model::state_name(&now.state);
                    let turn = turns.get(id.as_str());
                    state.execute(params![
                        id,
                        name,
                        now.state.is_terminal(),
                        millis(now.updated),
                        sql_int(now.bytes as u64),
                        turn.map(|t| &t.0),
                        turn.map(|t| sql_int(t.1)),
                    ])?;
                    totals.add(name, 1, now.bytes);
                    self.rows.insert(id.clone(), (name, now.bytes));
                }
            }
        }
        {
            let mut keep = tx.prepare_cached(
                "INSERT INTO webhook_deliveries (id, task_id, config_id, url, config, payload, attempts, next_attempt)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT(id) DO UPDATE SET attempts = ?7, next_attempt = ?8",
            )?;
            let mut forget = tx.prepare_cached("DELETE FROM webhook_deliveries WHERE id = ?1")?;
            for (id, delivery) in &batch.deliveries {
                let id = sql_int(*id);
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
        // At the bounds, the oldest finished tasks make room in the same transaction (a
        // store kept full evicts a task for every new one): the database never commits a
        // state past its bounds, and one commit does for both.
        if totals.over(self.limits) {
            evict_oldest(&tx, self.limits, &mut totals, &mut self.rows)?;
        }
        tx.commit()?;
        for bytes in new_rows {
            self.set.counted(bytes);
        }
        Ok(totals)
    }
}

/// Writes `record`'s row whole (its snapshot), with its current turn when known; returns
/// the bytes of its task's JSON and the bytes the row counts (the estimate of the record and
/// its log).
pub(super) fn upsert_task(
    conn: &Connection,
    record: &TaskRecord,
    log_bytes: usize,
    turn: Option<&(String, u64)>,
) -> rusqlite::Result<(usize, usize)> {
    let task = serde_json::to_string(&record.task).unwrap_or_default();
    let bytes = record.estimated_bytes() + log_bytes;
    let push = push_json(record);
    conn.prepare_cached(
        "INSERT INTO tasks (id, agent, dialect, owner, created, updated, final, task, push, seq,
             log_bytes, context_id, state, bytes, turn_request, turn_start)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
         ON CONFLICT(id) DO UPDATE SET agent = ?2, dialect = ?3, owner = ?4, created = ?5,
             updated = ?6, final = ?7, task = ?8, push = ?9, seq = ?10, log_bytes = ?11,
             context_id = ?12, state = ?13, bytes = ?14,
             turn_request = coalesce(?15, turn_request), turn_start = coalesce(?16, turn_start)",
    )?
    .execute(params![
        record.task.id,
        record.agent,
        record.dialect.version(),
        record.owner,
        millis(record.created),
        millis(record.updated),
        record.task.status.state.is_terminal(),
        task,
        push,
        sql_int(record.seq),
        sql_int(log_bytes as u64),
        record.task.context_id,
        mesh_core::model::state_name(&record.task.status.state),
        sql_int(bytes as u64),
        turn.map(|t| &t.0),
        turn.map(|t| sql_int(t.1)),
    ])?;
    Ok((task.len(), bytes))
}

/// No longer counts task `id`'s row in `totals` (about to be written or deleted); false
/// when there is no such row. What the writer wrote of it lately is in `rows`; else the
/// row is read.
fn uncount(
    conn: &Connection,
    id: &str,
    totals: &mut Totals,
    rows: &mut Rows,
) -> rusqlite::Result<bool> {
    if let Some((state, bytes)) = rows.remove(id) {
        totals.subtract(state, bytes);
        return Ok(true);
    }
    let row: Option<(Option<String>, i64)> = conn
        .prepare_cached("SELECT state, bytes FROM tasks WHERE id = ?1")?
        .query_row(params![id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let Some((state, bytes)) = row else {
        return Ok(false);
    };
    totals.subtract(
        state.as_deref().unwrap_or_default(),
        usize::try_from(bytes).unwrap_or(0),
    );
    Ok(true)
}

/// Deletes task `id`'s rows.
fn delete_task(
    conn: &Connection,
    id: &str,
    totals: &mut Totals,
    rows: &mut Rows,
) -> rusqlite::Result<()> {
    if uncount(conn, id, totals, rows)? {
        conn.prepare_cached("DELETE FROM tasks WHERE id = ?1")?
            .execute(params![id])?;
    }
    conn.prepare_cached("DELETE FROM task_events WHERE task_id = ?1")?
        .execute(params![id])?;
    Ok(())
}

/// Counts the database's tasks.
pub(super) fn count(conn: &Connection) -> rusqlite::Result<Totals> {
    let mut totals = Totals::default();
    let mut statement =
        conn.prepare("SELECT state, count(*), coalesce(sum(bytes), 0) FROM tasks GROUP BY state")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let state: Option<String> = row.get(0)?;
        totals.add(
            state.as_deref().unwrap_or_default(),
            usize::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
            usize::try_from(row.get::<_, i64>(2)?).unwrap_or(0),
        );
    }
    Ok(totals)
}

/// Applies `limits` to the database in one transaction: deletes the finished tasks past
/// `max_age`, then the oldest finished ones while there are more than `max_tasks` tasks or
/// `max_bytes` bytes; `totals` follows (left as it was if the transaction fails).
pub(super) fn apply_bounds(
    conn: &mut Connection,
    limits: StoreLimits,
    totals: &mut Totals,
    rows: &mut Rows,
) -> rusqlite::Result<()> {
    let mut after = totals.clone();
    let tx = conn.transaction()?;
    let expired_before =
        millis(SystemTime::now()).saturating_sub(limits.max_age.as_millis() as i64);
    let victims: Vec<String> = tx
        .prepare_cached("SELECT id FROM tasks WHERE final = 1 AND updated < ?1")?
        .query_map(params![expired_before], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in &victims {
        delete_task(&tx, id, &mut after, rows)?;
    }
    if after.over(limits) {
        evict_oldest(&tx, limits, &mut after, rows)?;
    }
    tx.commit()?;
    *totals = after;
    Ok(())
}

/// Deletes the oldest finished tasks while `totals` has more than `max_tasks` tasks or
/// `max_bytes` bytes (or until no finished task is left), in the caller's transaction;
/// `totals` follows.
fn evict_oldest(
    conn: &Connection,
    limits: StoreLimits,
    totals: &mut Totals,
    rows: &mut Rows,
) -> rusqlite::Result<()> {
    let mut victims = Vec::new();
    let (mut tasks, mut bytes) = (totals.tasks, totals.bytes);
    {
        let mut oldest = conn.prepare_cached(
            "SELECT id, bytes FROM tasks WHERE final = 1 ORDER BY updated, created, id",
        )?;
        let mut found = oldest.query([])?;
        while tasks > limits.max_tasks || bytes > limits.max_bytes {
            let Some(row) = found.next()? else { break };
            victims.push(row.get::<_, String>(0)?);
            tasks -= 1;
            bytes = bytes.saturating_sub(usize::try_from(row.get::<_, i64>(1)?).unwrap_or(0));
        }
    }
    for id in &victims {
        delete_task(conn, id, totals, rows)?;
    }
    Ok(())
}

/// JSON bytes bound as TEXT without a copy (they are UTF-8: the codec wrote them).
struct JsonText<'a>(&'a [u8]);

impl rusqlite::ToSql for JsonText<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Text(self.0)))
    }
}
