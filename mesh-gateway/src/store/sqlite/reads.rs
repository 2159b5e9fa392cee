//! Reading the SQLite store: a few connections of their own (WAL: they never wait for the
//! writer), made as needed and reused, and the queries that read a task, its log, and a
//! listing. Every function here blocks: the store calls them off the async workers.

use crate::store::columns::{from_millis, page_offset, sql_int};
use crate::store::{StoreError, StoredEvent, TaskPage, TaskQuery, TaskRecord};
use crate::task_events;
use mesh_core::dialect::Dialect;
use mesh_core::sync::MutexExt;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The most reading connections.
const MAX_READERS: usize = 4;

/// The columns a record is read from, in this order (see [`record_from_row`]).
pub(super) const RECORD_COLUMNS: &str =
    "id, agent, dialect, owner, created, updated, task, push, seq, log_bytes";

/// The reading connections (see the module docs).
pub(super) struct Readers {
    path: PathBuf,
    idle: Mutex<Idle>,
    returned: Condvar,
}

#[derive(Default)]
struct Idle {
    connections: Vec<Connection>,
    made: usize,
}

impl Readers {
    pub(super) fn new(path: PathBuf) -> Readers {
        Readers {
            path,
            idle: Mutex::default(),
            returned: Condvar::new(),
        }
    }

    /// Runs `read` on an idle connection (made when none is idle and fewer than
    /// [`MAX_READERS`] exist; else waits for one).
    fn with<T>(
        &self,
        what: &str,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let failed = |e: &dyn std::fmt::Display| StoreError::Storage(format!("{what}: {e}"));
        let conn = {
            let mut idle = self.idle.locked();
            loop {
                if let Some(conn) = idle.connections.pop() {
                    break Some(conn);
                }
                if idle.made < MAX_READERS {
                    idle.made += 1;
                    break None;
                }
                idle = self.returned.wait(idle).unwrap_or_else(|p| p.into_inner());
            }
        };
        let conn = match conn {
            Some(conn) => conn,
            None => match self.connect() {
                Ok(conn) => conn,
                Err(e) => {
                    self.idle.locked().made -= 1;
                    self.returned.notify_one();
                    return Err(failed(&e));
                }
            },
        };
        let result = read(&conn).map_err(|e| failed(&e));
        self.idle.locked().connections.push(conn);
        self.returned.notify_one();
        result
    }

    fn connect(&self) -> rusqlite::Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(5))?;
        Ok(conn)
    }

    /// Task `id` as the database has it: its row with the events logged after it applied.
    pub(super) fn record(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let read = self.with(&format!("cannot read task {id}"), |conn| {
            let row = conn
                .prepare_cached(&format!("SELECT {RECORD_COLUMNS} FROM tasks WHERE id = ?1"))?
                .query_row(params![id], record_from_row)
                .optional()?;
            let Some(Ok((mut record, _))) = row else {
                return Ok(row.map(|r| r.map(|(record, _)| record)));
            };
            apply_logged(conn, &mut record)?;
            Ok(Some(Ok(record)))
        })?;
        read.transpose().map_err(StoreError::Storage)
    }

    /// True when the database has task `id`.
    pub(super) fn exists(&self, id: &str) -> Result<bool, StoreError> {
        self.with(&format!("cannot read task {id}"), |conn| {
            conn.prepare_cached("SELECT 1 FROM tasks WHERE id = ?1")?
                .exists(params![id])
        })
    }

    /// The events of `id` after `after` (at most `limit`), from the database.
    pub(super) fn events(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.with(&format!("cannot read the events of {id}"), |conn| {
            let mut statement = conn.prepare_cached(
                "SELECT seq, time, event FROM task_events WHERE task_id = ?1 AND seq > ?2
                 ORDER BY seq LIMIT ?3",
            )?;
            let mut rows = statement.query(params![id, sql_int(after), sql_int(limit as u64)])?;
            let mut events = Vec::new();
            while let Some(row) = rows.next()? {
                let json = row.get_ref(2)?.as_bytes().unwrap_or_default();
                events.push(StoredEvent {
                    seq: u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
                    time: from_millis(row.get(1)?),
                    json: bytes::Bytes::copy_from_slice(json),
                });
            }
            Ok(events)
        })
    }

    /// The tasks matching `query`, most recently updated first; `newest_here` gives the
    /// working set's record of a task when it is newer than its row.
    pub(super) fn list(
        &self,
        query: &TaskQuery,
        newest_here: &dyn Fn(&str) -> Option<Arc<TaskRecord>>,
    ) -> Result<TaskPage, StoreError> {
        let offset = sql_int(page_offset(query.page_token.as_deref())? as u64);
        let page_size = sql_int(query.page_size.max(1) as u64);
        let state = query.state.as_ref().map(mesh_core::model::state_name);
        let filters = "(?1 IS NULL OR agent = ?1) AND (?2 IS NULL OR context_id = ?2)
             AND (?3 IS NULL OR state = ?3) AND (?4 IS NULL OR owner = ?4)";
        let (total, rows) = self.with("cannot list tasks", |conn| {
            let filter = params![query.agent, query.context_id, state, query.owner];
            let total: i64 = conn
                .prepare_cached(&format!("SELECT count(*) FROM tasks WHERE {filters}"))?
                .query_row(filter, |row| row.get(0))?;
            if offset > total {
                return Ok((total, Vec::new()));
            }
            let mut statement = conn.prepare_cached(&format!(
                "SELECT {RECORD_COLUMNS}, final FROM tasks WHERE {filters}
                 ORDER BY updated DESC, id LIMIT ?5 OFFSET ?6"
            ))?;
            let mut rows = statement.query(params![
                query.agent,
                query.context_id,
                state,
                query.owner,
                page_size,
                offset
            ])?;
            let mut records = Vec::new();
            while let Some(row) = rows.next()? {
                let id: String = row.get(0)?;
                if let Some(record) = newest_here(&id) {
                    records.push(Ok(record));
                    continue;
                }
                let finished: bool = row.get(10)?;
                records.push(match record_from_row(row)? {
                    Ok((mut record, _)) => {
                        if !finished {
                            apply_logged(conn, &mut record)?;
                        }
                        Ok(Arc::new(record))
                    }
                    Err(message) => Err(message),
                });
            }
            Ok((total, records))
        })?;
        if offset > total {
            return Err(StoreError::InvalidPageToken(offset.to_string()));
        }
        let end = offset + rows.len() as i64;
        let records = rows
            .into_iter()
            .collect::<Result<Vec<_>, String>>()
            .map_err(StoreError::Storage)?;
        Ok(TaskPage {
            records,
            next_page_token: (end < total).then(|| end.to_string()),
            total_size: usize::try_from(total).unwrap_or(0),
        })
    }
}

/// A record and its log's bytes from a row of [`RECORD_COLUMNS`], as its snapshot has it;
/// the inner error when its task does not parse.
pub(super) fn record_from_row(row: &Row) -> rusqlite::Result<Result<(TaskRecord, usize), String>> {
    let id: String = row.get(0)?;
    let task = match serde_json::from_str(row.get_ref(6)?.as_str().unwrap_or_default()) {
        Ok(task) => task,
        Err(e) => {
            return Ok(Err(format!(
                "task {id} in the database does not parse: {e}"
            )));
        }
    };
    let push: Option<String> = row.get(7)?;
    let dialect: String = row.get(2)?;
    let record = TaskRecord {
        task,
        agent: row.get(1)?,
        dialect: Dialect::from_version(&dialect).unwrap_or(Dialect::V0_3),
        owner: row.get(3)?,
        created: from_millis(row.get(4)?),
        updated: from_millis(row.get(5)?),
        push_configs: push
            .and_then(|p| serde_json::from_str(&p).ok())
            .unwrap_or_default(),
        seq: u64::try_from(row.get::<_, i64>(8)?).unwrap_or(0),
    };
    let log_bytes = usize::try_from(row.get::<_, i64>(9)?).unwrap_or(0);
    Ok(Ok((record, log_bytes)))
}

/// Applies to `record` the events logged after its snapshot (events that do not parse are
/// skipped and logged); returns their bytes.
pub(super) fn apply_logged(conn: &Connection, record: &mut TaskRecord) -> rusqlite::Result<usize> {
    let mut statement = conn.prepare_cached(
        "SELECT seq, event FROM task_events WHERE task_id = ?1 AND seq > ?2 ORDER BY seq",
    )?;
    let mut rows = statement.query(params![record.task.id, sql_int(record.seq)])?;
    let mut bytes = 0;
    while let Some(row) = rows.next()? {
        let seq: i64 = row.get(0)?;
        let json = row.get_ref(1)?.as_bytes().unwrap_or_default();
        bytes += json.len();
        match task_events::decode(json) {
            Ok(reply) => task_events::apply(&mut record.task, &reply),
            Err(error) => {
                tracing::warn!(task = %record.task.id, seq, error = %error.message, "skipping a stored event that does not parse");
            }
        }
        record.seq = u64::try_from(seq).unwrap_or(record.seq);
    }
    Ok(bytes)
}
