//! The task store several gateways share: PostgreSQL (`--store postgres://…`), so that any
//! number of gateways on one database serve every task, whichever of them started it.
//!
//! **The working set.** A gateway keeps in memory only the tasks it bridges now (those whose
//! turn it pumps: [`TaskStore::get`] and the other synchronous methods), so its memory grows
//! with its load, not with the store. Changes go behind, as in the SQLite store: each is queued
//! (a short mutex, no I/O) and a writer thread writes the whole queue in one transaction: one
//! row per event (`mesh_task_events`), the task's row (`mesh_tasks`) when it is created,
//! replaced (a follow-up turn), changed by [`TaskStore::update`], when its turn ends and at
//! doubling sizes as it grows; its state, sequence and time with every batch that has its
//! events. When a turn's stream ends ([`TaskStore::release`]) the task leaves the working set
//! once all of it is written.
//!
//! **Every task.** The asynchronous methods read the database (a bounded pool of
//! connections): [`TaskStore::load`] gives a task of the working set from memory, any other as
//! its row with the events logged after it applied; [`TaskStore::list`] selects rows (a
//! running task's events applied the same way); [`TaskStore::events_after`] reads the log and
//! adds what this gateway has queued and not written yet; [`TaskStore::modify`] changes a
//! task outside the working set in a transaction that locks its row.
//!
//! **Changes between gateways.** Each batch's transaction notifies the channel
//! `mesh_task_changes` with the ids of the tasks it wrote (PostgreSQL's `NOTIFY`, delivered
//! at commit); every gateway listens on a connection of its own and hands the ids to
//! [`TaskStore::changes`], so that a subscriber on one gateway follows a task another one
//! bridges, event by event, as soon as it is committed. When the listening connection drops,
//! a `*` tells every follower to read again, and the gateway listens again after a pause
//! (doubling from one second up to thirty).
//!
//! **Bounds.** The store's bounds apply to the database: the writer deletes finished tasks
//! past `max_age`, then the oldest finished ones while there are more than `max_tasks` tasks
//! or `max_bytes` bytes (a task's bytes are its estimate, as in the other stores), every ten
//! seconds; it counts the tasks in each state at the same time, and a new task is refused
//! ([`StoreError::Full`]) while those counts say the store is full of tasks that are not
//! finished. Running tasks are never deleted.
//!
//! **Schema.** Created at start when missing, under an advisory lock so that gateways
//! starting together do not race; every table's name starts with `mesh_`.
//!
//! **Webhook deliveries** go through the same queue to `mesh_webhook_deliveries`, each
//! marked with the gateway that queued it (its [`GatewayConfig::gateway_id`]
//! (crate::GatewayConfig::gateway_id)): a gateway that restarts with the same id delivers
//! those it left pending.

use super::memory::{LogMode, LoggedEvent};
use super::write_behind::{Batch, Queue, RecordWork};
use super::{
    MemoryStore, Origin, Orphan, PendingDelivery, STATES, StoreError, StoreLimits, StoredEvent,
    TaskPage, TaskQuery, TaskRecord, TaskStore,
};
use crate::task_events;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use futures_util::StreamExt;
use mesh_core::bus::redact_url;
use mesh_core::dialect::Dialect;
use mesh_core::model::{Task, TaskState};
use mesh_core::rpc::Reply;
use mesh_core::sync::{MutexExt, RwLockExt};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, NoTls, Row};
use tokio_util::sync::CancellationToken;

/// The channel the writers notify and every gateway listens on.
const CHANNEL: &str = "mesh_task_changes";

/// The channel [`TaskStore::modify`] also notifies: a task's record changed outside the
/// gateway that bridges it (its push configs), which reads them again.
const RECORDS_CHANNEL: &str = "mesh_task_records";

/// What [`TaskStore::changes`] hands out when the listening connection dropped: any task
/// may have changed.
pub const ANY_TASK: &str = "*";

/// The most connections of the pool the asynchronous methods read with.
const POOL_SIZE: usize = 8;

/// How long a read waits for a connection of the pool, or for one to be made.
const POOL_WAIT: Duration = Duration::from_secs(5);

/// The longest [`TaskStore::written`] waits.
const WRITTEN_WAIT: Duration = Duration::from_secs(5);

/// How often the writer applies the bounds and counts the tasks.
const RETENTION_EVERY: Duration = Duration::from_secs(10);

/// How many task ids [`TaskStore::changes`] buffers per receiver; a receiver that falls
/// further behind reads again.
const CHANGES_CAPACITY: usize = 4096;

/// The longest task id a notification carries (PostgreSQL's limit is 8,000 bytes); the
/// followers of longer ones see their changes when they read again.
const MAX_NOTIFIED_ID: usize = 1024;

/// The class of the advisory locks that say a gateway is alive (the other key is the hash
/// of its id).
const PRESENCE_CLASS: i32 = 0x6d65_7368; // "mesh"

/// The advisory lock the schema is created under.
const SCHEMA_LOCK: i64 = 0x6d65_7368_5f73_746f; // "mesh_sto"

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS mesh_tasks (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    dialect TEXT NOT NULL,
    owner TEXT,
    context_id TEXT NOT NULL,
    state TEXT NOT NULL,
    final BOOLEAN NOT NULL,
    created BIGINT NOT NULL,
    updated BIGINT NOT NULL,
    task TEXT NOT NULL,
    push TEXT,
    seq BIGINT NOT NULL,
    last_seq BIGINT NOT NULL,
    bytes BIGINT NOT NULL,
    gateway TEXT NOT NULL,
    turn_request TEXT,
    turn_start BIGINT
);
CREATE INDEX IF NOT EXISTS mesh_tasks_listing ON mesh_tasks (agent, updated DESC, id);
CREATE INDEX IF NOT EXISTS mesh_tasks_retention ON mesh_tasks (final, updated);
CREATE INDEX IF NOT EXISTS mesh_tasks_running ON mesh_tasks (gateway) WHERE NOT final;
CREATE TABLE IF NOT EXISTS mesh_task_events (
    task_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    time BIGINT NOT NULL,
    event TEXT NOT NULL,
    position BIGINT,
    PRIMARY KEY (task_id, seq)
);
CREATE TABLE IF NOT EXISTS mesh_webhook_deliveries (
    id BIGINT NOT NULL,
    gateway TEXT NOT NULL,
    task_id TEXT NOT NULL,
    config TEXT NOT NULL,
    payload BYTEA NOT NULL,
    attempts INTEGER NOT NULL,
    next_attempt BIGINT NOT NULL,
    PRIMARY KEY (gateway, id)
);
";

/// The columns a record is read from, in this order (see [`record_from_row`]).
const RECORD_COLUMNS: &str = "id, agent, dialect, owner, created, updated, task, push, seq";

/// Task id → the request of its current turn and the task's sequence before it.
type Turns = Arc<Mutex<HashMap<String, (String, u64)>>>;

/// See [`PostgresStore::push_dirty`].
type PushDirty = Arc<Mutex<std::collections::HashSet<String>>>;

/// What the last count of the database found.
#[derive(Debug, Clone, Default)]
struct Totals {
    tasks: usize,
    finished: usize,
    bytes: usize,
    states: Vec<(TaskState, usize)>,
}

/// Tasks in PostgreSQL, shared by every gateway on the same database. See the module docs.
pub struct PostgresStore {
    memory: Arc<MemoryStore>,
    queue: Arc<Queue>,
    pool: Pool,
    limits: StoreLimits,
    totals: Arc<RwLock<Totals>>,
    /// Tasks whose turn ended, to leave the working set once written: the record as it was
    /// then (any later change makes a new one, and keeps the task).
    released: Arc<Mutex<HashMap<String, Arc<TaskRecord>>>>,
    changes: broadcast::Sender<Arc<str>>,
    /// The request and the starting sequence of the current turn of each task of the
    /// working set ([`TaskStore::begin_turn`]), written with its row.
    turns: Turns,
    /// This gateway's id (the `gateway` of the rows it writes).
    gateway: String,
    /// Tasks whose push configs the next snapshot writes (a record inserted whole); the
    /// other snapshots leave the column to [`TaskStore::modify`].
    push_dirty: PushDirty,
    /// The gateways seen gone, and since when (see [`TaskStore::claim_orphans`]).
    gone_since: Mutex<HashMap<String, Instant>>,
    /// Whether the tasks of this gateway's earlier run were claimed already.
    own_claimed: std::sync::atomic::AtomicBool,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Stops the listener.
    stop: CancellationToken,
    pending_deliveries: Mutex<Vec<PendingDelivery>>,
}

impl PostgresStore {
    /// Connects to the database at `url`, creates the schema when missing, takes back the
    /// webhook deliveries gateway `gateway` left pending, and starts the writer and the
    /// listener. Must be called within a tokio runtime (the writer and the listener use it).
    pub async fn open(
        url: &str,
        limits: StoreLimits,
        gateway: &str,
    ) -> Result<PostgresStore, StoreError> {
        let shown = redact_url(url);
        let storage = move |what: &str, e: &dyn std::fmt::Display| {
            StoreError::Storage(format!("{what} {shown}: {e}"))
        };
        let config = tokio_postgres::Config::from_str(url)
            .map_err(|e| storage("not a PostgreSQL URL:", &e))?;
        let pool = make_pool(&config, POOL_SIZE)
            .map_err(|e| storage("cannot make a connection pool for", &e))?;
        // The writer's own: its connections live on its own runtime (see `Writer::run`).
        let writer_pool =
            make_pool(&config, 1).map_err(|e| storage("cannot make a connection pool for", &e))?;
        let mut client = pool
            .get()
            .await
            .map_err(|e| storage("cannot connect to", &e))?;
        {
            let tx = client
                .transaction()
                .await
                .map_err(|e| storage("cannot create the schema in", &e))?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
                .await
                .and(Ok(()))
                .map_err(|e| storage("cannot create the schema in", &e))?;
            tx.batch_execute(SCHEMA)
                .await
                .map_err(|e| storage("cannot create the schema in", &e))?;
            tx.commit()
                .await
                .map_err(|e| storage("cannot create the schema in", &e))?;
        }
        let pending_deliveries = load_deliveries(&client, gateway)
            .await
            .map_err(|e| storage("cannot read the pending webhook deliveries in", &e))?;
        let totals = Arc::new(RwLock::new(
            count(&client)
                .await
                .map_err(|e| storage("cannot count the tasks in", &e))?,
        ));
        drop(client);
        let tasks = totals.read_locked().tasks;
        tracing::info!(
            database = %redact_url(url),
            tasks,
            webhook_deliveries = pending_deliveries.len(),
            "task store opened (PostgreSQL, shared)"
        );

        let memory = Arc::new(MemoryStore::with_log(limits, LogMode::Elsewhere));
        let queue = Arc::new(Queue::new());
        let released = Arc::new(Mutex::new(HashMap::new()));
        let turns: Turns = Arc::default();
        let push_dirty: PushDirty = Arc::default();
        let (changes, _) = broadcast::channel(CHANGES_CAPACITY);
        let (records, _) = broadcast::channel(CHANGES_CAPACITY);
        let listened = Changes {
            events: changes.clone(),
            records: records.clone(),
        };
        let first = match connect_listener(&config, &listened, gateway).await {
            Ok(first) => first,
            Err(ListenError::Database(e)) => {
                return Err(storage("cannot listen for changes on", &e));
            }
            Err(ListenError::IdInUse) => {
                return Err(StoreError::Storage(format!(
                    "another gateway with the id {gateway:?} is running on the task database: give each gateway its own id (its own --data-dir)"
                )));
            }
        };
        let stop = CancellationToken::new();
        tokio::spawn(listen(
            config,
            listened,
            stop.clone(),
            gateway.to_owned(),
            first,
        ));
        tokio::spawn(refresh_push_configs(
            pool.clone(),
            memory.clone(),
            push_dirty.clone(),
            records.subscribe(),
            stop.clone(),
        ));
        let writer = {
            let writer = Writer {
                pool: writer_pool,
                queue: queue.clone(),
                memory: memory.clone(),
                released: released.clone(),
                turns: turns.clone(),
                push_dirty: push_dirty.clone(),
                totals: totals.clone(),
                limits,
                gateway: gateway.to_owned(),
            };
            std::thread::Builder::new()
                .name("mesh-task-store".into())
                .spawn(move || writer.run())
                .map_err(|e| {
                    StoreError::Storage(format!("cannot start the task store's writer: {e}"))
                })?
        };
        Ok(PostgresStore {
            memory,
            queue,
            pool,
            limits,
            totals,
            released,
            changes,
            turns,
            gateway: gateway.to_owned(),
            push_dirty,
            gone_since: Mutex::default(),
            own_claimed: std::sync::atomic::AtomicBool::new(false),
            writer: Mutex::new(Some(writer)),
            stop,
            pending_deliveries: Mutex::new(pending_deliveries),
        })
    }

    /// Writes what is pending and stops the writer and the listener (also done on drop).
    pub fn close(&self) {
        self.stop.cancel();
        self.queue.close();
        let writer = self.writer.locked().take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::Storage(format!("no connection to the task database: {e}")))
    }

    /// The record of `id` in the working set when it is newer than (or as new as) the
    /// database's: the task is bridged here, or what this gateway changed of it is not all
    /// written yet. A task whose turn ended here and is written may have been continued by
    /// another gateway since: the database has it.
    fn newest_here(&self, id: &str) -> Option<Arc<TaskRecord>> {
        let record = self.memory.get(id)?;
        (!self.released.locked().contains_key(id) || !self.queue.holds_nothing_of(id))
            .then_some(record)
    }

    /// Claims the running tasks of `gateway` when it has been gone for `grace` (its presence
    /// lock is free: see the module docs).
    async fn claim_if_gone(
        &self,
        gateway: &str,
        grace: Duration,
    ) -> Result<Vec<Orphan>, StoreError> {
        let now = Instant::now();
        let first_seen = *self
            .gone_since
            .locked()
            .entry(gateway.to_owned())
            .or_insert(now);
        if now.duration_since(first_seen) < grace {
            // Gone only if it still is at the next look (a restart takes its tasks back).
            let client = self.client().await?;
            let free: bool = client
                .query_one(
                    "SELECT pg_try_advisory_xact_lock($1, hashtext($2))",
                    &[&PRESENCE_CLASS, &gateway],
                )
                .await
                .map_err(|e| storage_error("cannot look for gateways that are gone", e))?
                .get(0);
            if !free {
                self.gone_since.locked().remove(gateway);
            }
            return Ok(Vec::new());
        }
        self.claim(gateway, false).await
    }

    /// Marks the running tasks of `gateway` as this gateway's, in one transaction that holds
    /// `gateway`'s presence lock (unless `gone`: this gateway's own earlier run), and returns
    /// them. A gateway that holds its lock (alive) is left alone.
    async fn claim(&self, gateway: &str, gone: bool) -> Result<Vec<Orphan>, StoreError> {
        let failed = |e: tokio_postgres::Error| storage_error("cannot take over running tasks", e);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(failed)?;
        if !gone {
            let free: bool = tx
                .query_one(
                    "SELECT pg_try_advisory_xact_lock($1, hashtext($2))",
                    &[&PRESENCE_CLASS, &gateway],
                )
                .await
                .map_err(failed)?
                .get(0);
            if !free {
                self.gone_since.locked().remove(gateway);
                return Ok(Vec::new());
            }
        }
        let rows = tx
            .query(
                &format!(
                    "UPDATE mesh_tasks SET gateway = $2
                     WHERE gateway = $1 AND NOT final AND state IN ('submitted', 'working')
                     RETURNING {RECORD_COLUMNS}, turn_request, turn_start"
                ),
                &[&gateway, &self.gateway],
            )
            .await
            .map_err(failed)?;
        let mut orphans = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut record = match record_from_row(row) {
                Ok(record) => record,
                Err(error) => {
                    tracing::warn!(%error, "a running task that does not parse is left as it is");
                    continue;
                }
            };
            apply_logged(&tx, &mut record).await.map_err(failed)?;
            let request_id: Option<String> = row.get(9);
            let turn_start = row
                .get::<_, Option<i64>>(10)
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(record.seq);
            // The turn's last event from the agent that is logged: the next one follows it.
            let last: Option<i64> = tx
                .query_one(
                    "SELECT max(position) FROM mesh_task_events WHERE task_id = $1 AND seq > $2",
                    &[&record.task.id, &sql_int(turn_start)],
                )
                .await
                .map_err(failed)?
                .get(0);
            orphans.push(Orphan {
                gateway: gateway.to_owned(),
                next_position: last.map_or(0, |p| u64::try_from(p).unwrap_or(0) + 1),
                turn_start,
                request_id,
                record,
            });
        }
        if !gone {
            // Its pending webhook deliveries are this gateway's to make now.
            let rows = tx
                .query(
                    "UPDATE mesh_webhook_deliveries SET gateway = $2 WHERE gateway = $1
                     RETURNING id, task_id, config, payload, attempts, next_attempt",
                    &[&gateway, &self.gateway],
                )
                .await
                .map_err(failed)?;
            let mut taken: Vec<PendingDelivery> =
                rows.iter().filter_map(delivery_from_row).collect();
            taken.sort_by_key(|d| d.id);
            if !taken.is_empty() {
                tracing::warn!(gateway = %gateway, deliveries = taken.len(), "took over the pending webhook deliveries of a gateway that is gone");
            }
            self.pending_deliveries.locked().extend(taken);
        }
        tx.commit().await.map_err(failed)?;
        self.gone_since.locked().remove(gateway);
        if !orphans.is_empty() {
            tracing::warn!(gateway = %gateway, tasks = orphans.len(), "took over the running tasks of a gateway that is gone");
        }
        Ok(orphans)
    }

    /// Refuses a new task while the last count says the database is full of tasks that are
    /// not finished (see the module docs).
    fn check_room(&self) -> Result<(), StoreError> {
        let totals = self.totals.read_locked();
        let limits = self.limits;
        if totals.tasks >= limits.max_tasks && totals.finished == 0 {
            return Err(StoreError::Full(super::Limit::Tasks(limits.max_tasks)));
        }
        if totals.bytes >= limits.max_bytes && totals.finished == 0 {
            return Err(StoreError::Full(super::Limit::Bytes(limits.max_bytes)));
        }
        Ok(())
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.close();
    }
}

fn storage_error(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Storage(format!("{what}: {e}"))
}

#[async_trait::async_trait]
impl TaskStore for PostgresStore {
    fn insert(&self, record: TaskRecord) -> Result<(), StoreError> {
        let id = record.task.id.clone();
        let new = self.memory.get(&id).is_none() && record.seq == 0;
        if new {
            self.check_room()?;
        }
        // The working set evicts nothing the database needs: what it lets go is written.
        self.memory.insert_record(record, &mut Vec::new())?;
        // A new turn here: bridged again.
        self.released.locked().remove(&id);
        self.push_dirty.locked().insert(id.clone());
        self.queue.snapshot(&id);
        Ok(())
    }

    fn get(&self, id: &str) -> Option<Arc<TaskRecord>> {
        self.memory.get(id)
    }

    async fn load(&self, id: &str) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        // A task this gateway bridges, or whose writes it has not committed yet, is newest
        // here; one whose turn ended here and is written may have been continued by another
        // gateway since.
        let client = self.client().await?;
        if let Some(record) = self.newest_here(id) {
            // Its push configs are the database's (another gateway may have set them).
            let row = client
                .query_opt("SELECT push FROM mesh_tasks WHERE id = $1", &[&id])
                .await
                .map_err(|e| storage_error(&format!("cannot read task {id}"), e))?;
            let Some(row) = row else {
                return Ok(Some(record));
            };
            let push: Option<&str> = row.get(0);
            let configs: Vec<mesh_core::model::TaskPushNotificationConfig> = push
                .and_then(|p| serde_json::from_str(p).ok())
                .unwrap_or_default();
            if configs == record.push_configs {
                return Ok(Some(record));
            }
            adopt_push_configs(&self.memory, &self.push_dirty, id, &configs);
            return Ok(self.memory.get(id).or(Some(record)));
        }
        read_record(&client, id)
            .await
            .map(|r| r.map(Arc::new))
            .map_err(|e| storage_error(&format!("cannot read task {id}"), e))
    }

    fn append(
        &self,
        id: &str,
        event: &Arc<Reply>,
        origin: Origin,
    ) -> Result<Arc<TaskRecord>, StoreError> {
        let appended = self
            .memory
            .append_event(id, event, origin, &mut Vec::new())?;
        self.queue.event(id, appended.event, appended.snapshot, &[]);
        Ok(appended.record)
    }

    async fn events_after(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        // What this gateway has not written yet first: a batch committed meanwhile is then
        // read from the database (the two are merged by sequence).
        let queued = self.queue.queued_events(id, after, limit);
        let client = self.client().await?;
        let mut events = read_events(&client, id, after, limit)
            .await
            .map_err(|e| storage_error(&format!("cannot read the events of {id}"), e))?;
        let last = events.last().map_or(after, |e| e.seq);
        events.extend(
            queued
                .iter()
                .filter(|e| e.seq > last)
                .map(LoggedEvent::stored),
        );
        events.truncate(limit);
        if events.is_empty() {
            let known = self.memory.get(id).is_some()
                || client
                    .query_opt("SELECT 1 FROM mesh_tasks WHERE id = $1", &[&id])
                    .await
                    .map_err(|e| storage_error(&format!("cannot read task {id}"), e))?
                    .is_some();
            if !known {
                return Err(StoreError::TaskNotFound(id.to_owned()));
            }
        }
        match events.first() {
            Some(first) if first.seq != after + 1 => Err(StoreError::EventsForgotten {
                task: id.to_owned(),
                first: first.seq,
            }),
            _ => Ok(events),
        }
    }

    fn update(&self, id: &str, apply: &mut dyn FnMut(&mut TaskRecord)) -> Option<Arc<TaskRecord>> {
        let record = self.memory.update_record(id, apply)?;
        self.queue.snapshot(id);
        Some(record)
    }

    async fn modify(
        &self,
        id: &str,
        apply: &mut (dyn for<'r> FnMut(&'r mut TaskRecord) + Send),
    ) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        // Through the database, whoever bridges the task: push configs are read by the
        // gateway that delivers its notifications, which may be another one (it is told).
        // A task of the working set is written first, so that its row is there.
        if self.memory.get(id).is_some() {
            self.queue.written(id, WRITTEN_WAIT).await;
        }
        let failed =
            |e: tokio_postgres::Error| storage_error(&format!("cannot change task {id}"), e);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(failed)?;
        let row = tx
            .query_opt(
                &format!("SELECT {RECORD_COLUMNS} FROM mesh_tasks WHERE id = $1 FOR UPDATE"),
                &[&id],
            )
            .await
            .map_err(failed)?;
        let Some(row) = row else { return Ok(None) };
        let mut record = record_from_row(&row)?;
        apply_logged(&tx, &mut record).await.map_err(failed)?;
        apply(&mut record);
        record.updated = SystemTime::now();
        let task = serde_json::to_string(&record.task).unwrap_or_default();
        let push = push_json(&record);
        let seq = sql_int(record.seq);
        tx.execute(
            "UPDATE mesh_tasks SET task = $2, push = $3, seq = $4, last_seq = GREATEST(last_seq, $4),
                 state = $5, final = $6, updated = $7, bytes = $8 WHERE id = $1",
            &[
                &id,
                &task,
                &push,
                &seq,
                &mesh_core::model::state_name(&record.task.status.state),
                &record.task.status.state.is_terminal(),
                &millis(record.updated),
                &sql_int(record.estimated_bytes() as u64),
            ],
        )
        .await
        .map_err(failed)?;
        notify(&tx, &[id]).await.map_err(failed)?;
        notify_on(&tx, RECORDS_CHANNEL, &[id])
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        // The working set's copy takes the configs (its snapshots leave them to this path).
        adopt_push_configs(&self.memory, &self.push_dirty, id, &record.push_configs);
        Ok(Some(Arc::new(record)))
    }

    async fn written(&self, id: &str) {
        self.queue.written(id, WRITTEN_WAIT).await;
    }

    fn begin_turn(&self, id: &str, request_id: &str, start: u64) {
        self.turns
            .locked()
            .insert(id.to_owned(), (request_id.to_owned(), start));
    }

    async fn claim_orphans(&self, grace: Duration) -> Result<Vec<Orphan>, StoreError> {
        let mut claimed = Vec::new();
        if !self
            .own_claimed
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            // This gateway's earlier run: gone for sure (this one holds its presence lock).
            claimed.extend(self.claim(&self.gateway, true).await?);
        }
        let gone: Vec<String> = gateways_with_running_tasks(&self.pool, &self.gateway).await?;
        {
            // Forget the gateways that have no running task any more.
            let mut since = self.gone_since.locked();
            since.retain(|g, _| gone.contains(g));
        }
        for gateway in gone {
            claimed.extend(self.claim_if_gone(&gateway, grace).await?);
        }
        Ok(claimed)
    }

    fn remove(&self, id: &str) {
        self.memory.remove_record(id);
        self.queue.delete(&[id.to_owned()]);
    }

    fn release(&self, id: &str) {
        if let Some(record) = self.memory.get(id) {
            self.released.locked().insert(id.to_owned(), record);
            // The writer lets it go after its next batch.
            self.queue.wake.notify_one();
        }
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        let offset = match &query.page_token {
            None => 0,
            Some(token) if token.is_empty() => 0,
            Some(token) => token
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| StoreError::InvalidPageToken(token.clone()))?,
        };
        let page_size = sql_int(query.page_size.max(1) as u64);
        let state = query.state.as_ref().map(mesh_core::model::state_name);
        let failed = |e: tokio_postgres::Error| storage_error("cannot list tasks", e);
        let client = self.client().await?;
        let filters = "($1::TEXT IS NULL OR agent = $1) AND ($2::TEXT IS NULL OR context_id = $2)
             AND ($3::TEXT IS NULL OR state = $3) AND ($4::TEXT IS NULL OR owner = $4)";
        let params: [&(dyn ToSql + Sync); 4] =
            [&query.agent, &query.context_id, &state, &query.owner];
        let total: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM mesh_tasks WHERE {filters}"),
                &params,
            )
            .await
            .map_err(failed)?
            .get(0);
        if offset > total {
            return Err(StoreError::InvalidPageToken(offset.to_string()));
        }
        let rows = client
            .query(
                &format!(
                    "SELECT {RECORD_COLUMNS} FROM mesh_tasks WHERE {filters}
                     ORDER BY updated DESC, id LIMIT $5 OFFSET $6"
                ),
                &[
                    params[0], params[1], params[2], params[3], &page_size, &offset,
                ],
            )
            .await
            .map_err(failed)?;
        let mut records = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: &str = row.get(0);
            if let Some(record) = self.newest_here(id) {
                records.push(record);
                continue;
            }
            let mut record = record_from_row(row)?;
            if !record.task.status.state.is_terminal() {
                apply_logged(&client, &mut record).await.map_err(failed)?;
            }
            records.push(Arc::new(record));
        }
        let end = offset + rows.len() as i64;
        Ok(TaskPage {
            records,
            next_page_token: (end < total).then(|| end.to_string()),
            total_size: usize::try_from(total).unwrap_or(0),
        })
    }

    fn changes(&self) -> Option<broadcast::Receiver<Arc<str>>> {
        Some(self.changes.subscribe())
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

fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn from_millis(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

/// A count as PostgreSQL's BIGINT (saturating).
fn sql_int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn push_json(record: &TaskRecord) -> Option<String> {
    (!record.push_configs.is_empty())
        .then(|| serde_json::to_string(&record.push_configs).unwrap_or_default())
}

/// A record from a row of [`RECORD_COLUMNS`], as its snapshot has it.
fn record_from_row(row: &Row) -> Result<TaskRecord, StoreError> {
    let id: String = row.get(0);
    let task: Task = serde_json::from_str(row.get::<_, &str>(6)).map_err(|e| {
        StoreError::Storage(format!("task {id} in the database does not parse: {e}"))
    })?;
    let push: Option<&str> = row.get(7);
    let dialect: &str = row.get(2);
    Ok(TaskRecord {
        task,
        agent: row.get(1),
        dialect: Dialect::from_version(dialect).unwrap_or(Dialect::V0_3),
        owner: row.get(3),
        created: from_millis(row.get(4)),
        updated: from_millis(row.get(5)),
        push_configs: push
            .and_then(|p| serde_json::from_str(p).ok())
            .unwrap_or_default(),
        seq: u64::try_from(row.get::<_, i64>(8)).unwrap_or(0),
    })
}

/// Applies to `record` the events logged after its snapshot (events that do not parse are
/// skipped and logged).
async fn apply_logged(
    client: &impl deadpool_postgres::GenericClient,
    record: &mut TaskRecord,
) -> Result<(), tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT seq, event FROM mesh_task_events WHERE task_id = $1 AND seq > $2 ORDER BY seq",
            &[&record.task.id, &sql_int(record.seq)],
        )
        .await?;
    for row in rows {
        let seq: i64 = row.get(0);
        match task_events::decode(row.get::<_, &str>(1).as_bytes()) {
            Ok(reply) => task_events::apply(&mut record.task, &reply),
            Err(error) => {
                tracing::warn!(task = %record.task.id, seq, error = %error.message, "skipping a stored event that does not parse");
            }
        }
        record.seq = u64::try_from(seq).unwrap_or(record.seq);
    }
    Ok(())
}

/// Task `id` as the database has it now: its row with the later events applied.
async fn read_record(
    client: &deadpool_postgres::Object,
    id: &str,
) -> Result<Option<TaskRecord>, StoreError> {
    let failed = |e: tokio_postgres::Error| storage_error(&format!("cannot read task {id}"), e);
    let row = client
        .query_opt(
            &format!("SELECT {RECORD_COLUMNS} FROM mesh_tasks WHERE id = $1"),
            &[&id],
        )
        .await
        .map_err(failed)?;
    let Some(row) = row else { return Ok(None) };
    let mut record = record_from_row(&row)?;
    apply_logged(client, &mut record).await.map_err(failed)?;
    Ok(Some(record))
}

/// The events of `id` after `after`, from the database.
async fn read_events(
    client: &deadpool_postgres::Object,
    id: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<StoredEvent>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT seq, time, event FROM mesh_task_events WHERE task_id = $1 AND seq > $2
             ORDER BY seq LIMIT $3",
            &[&id, &sql_int(after), &sql_int(limit as u64)],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| StoredEvent {
            seq: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
            time: from_millis(row.get(1)),
            json: bytes::Bytes::copy_from_slice(row.get::<_, &str>(2).as_bytes()),
        })
        .collect())
}

/// Notifies the other gateways (at commit) that these tasks changed.
async fn notify(
    client: &impl deadpool_postgres::GenericClient,
    ids: &[&str],
) -> Result<(), tokio_postgres::Error> {
    notify_on(client, CHANNEL, ids).await
}

/// Notifies `channel` (at commit) with these task ids.
async fn notify_on(
    client: &impl deadpool_postgres::GenericClient,
    channel: &str,
    ids: &[&str],
) -> Result<(), tokio_postgres::Error> {
    let ids: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| id.len() <= MAX_NOTIFIED_ID)
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    client
        .execute(
            "SELECT pg_notify($1, id) FROM unnest($2::TEXT[]) AS id",
            &[&channel, &ids],
        )
        .await
        .map(|_| ())
}

/// Gives the working set's record of `id` (if there is one) these push configs, the
/// database's, unless its own are newer (inserted and not written yet: `dirty`).
fn adopt_push_configs(
    memory: &MemoryStore,
    dirty: &PushDirty,
    id: &str,
    configs: &[mesh_core::model::TaskPushNotificationConfig],
) {
    if dirty.locked().contains(id) {
        return;
    }
    if memory.get(id).is_some_and(|r| r.push_configs != configs) {
        memory.update_record(id, &mut |r| r.push_configs = configs.to_vec());
    }
}

/// The gateways other than `me` with running tasks in the database.
async fn gateways_with_running_tasks(pool: &Pool, me: &str) -> Result<Vec<String>, StoreError> {
    let client = pool
        .get()
        .await
        .map_err(|e| storage_error("no connection to the task database", e))?;
    let rows = client
        .query(
            "SELECT gateway FROM mesh_tasks
             WHERE NOT final AND state IN ('submitted', 'working') AND gateway <> $1
             UNION SELECT gateway FROM mesh_webhook_deliveries WHERE gateway <> $1",
            &[&me],
        )
        .await
        .map_err(|e| storage_error("cannot read the running tasks", e))?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// The tasks in the database: in all, finished, their bytes, and per state.
async fn count(client: &deadpool_postgres::Object) -> Result<Totals, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT state, count(*), coalesce(sum(bytes), 0)::BIGINT, bool_and(final)
             FROM mesh_tasks GROUP BY state",
            &[],
        )
        .await?;
    let mut totals = Totals {
        states: STATES.iter().map(|s| (s.clone(), 0)).collect(),
        ..Totals::default()
    };
    for row in rows {
        let state: &str = row.get(0);
        let n = usize::try_from(row.get::<_, i64>(1)).unwrap_or(0);
        totals.tasks += n;
        totals.bytes += usize::try_from(row.get::<_, i64>(2)).unwrap_or(0);
        if row.get::<_, Option<bool>>(3).unwrap_or(false) {
            totals.finished += n;
        }
        if let Some(entry) = totals
            .states
            .iter_mut()
            .find(|(s, _)| mesh_core::model::state_name(s) == state)
        {
            entry.1 += n;
        }
    }
    Ok(totals)
}

/// A delivery from a row of (id, task_id, config, payload, attempts, next_attempt); `None`
/// when its config does not parse.
fn delivery_from_row(row: &Row) -> Option<PendingDelivery> {
    Some(PendingDelivery {
        id: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
        task_id: row.get(1),
        config: serde_json::from_str(row.get::<_, &str>(2)).ok()?,
        body: bytes::Bytes::from(row.get::<_, Vec<u8>>(3)),
        attempts: u32::try_from(row.get::<_, i32>(4).max(0)).unwrap_or(0),
        next_attempt: from_millis(row.get(5)),
    })
}

/// The deliveries gateway `gateway` left pending, in the order of their ids; rows that do
/// not parse are deleted (and logged).
async fn load_deliveries(
    client: &deadpool_postgres::Object,
    gateway: &str,
) -> Result<Vec<PendingDelivery>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT id, task_id, config, payload, attempts, next_attempt
             FROM mesh_webhook_deliveries WHERE gateway = $1 ORDER BY id",
            &[&gateway],
        )
        .await?;
    let mut deliveries = Vec::new();
    for row in rows {
        let id: i64 = row.get(0);
        let task_id: String = row.get(1);
        match delivery_from_row(&row) {
            Some(delivery) => deliveries.push(delivery),
            None => {
                tracing::warn!(task = %task_id, delivery = id, "dropping a stored webhook delivery that does not parse");
                client
                    .execute(
                        "DELETE FROM mesh_webhook_deliveries WHERE gateway = $1 AND id = $2",
                        &[&gateway, &id],
                    )
                    .await?;
            }
        }
    }
    Ok(deliveries)
}

/// Where the listener hands the notifications: the tasks whose events were written, and
/// those whose record another gateway changed ([`RECORDS_CHANNEL`]).
#[derive(Clone)]
struct Changes {
    events: broadcast::Sender<Arc<str>>,
    records: broadcast::Sender<Arc<str>>,
}

impl Changes {
    /// Anything may have changed (the listener was away).
    fn any(&self) {
        let _ = self.events.send(Arc::from(ANY_TASK));
        let _ = self.records.send(Arc::from(ANY_TASK));
    }
}

/// A connection that holds the gateway's presence lock and listens for task changes; ends
/// when the connection does.
type Listening =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// Why [`connect_listener`] did not listen.
enum ListenError {
    Database(tokio_postgres::Error),
    /// Another live session holds the gateway's presence lock.
    IdInUse,
}

/// Connects, takes gateway `gateway`'s presence lock (see the module docs) and listens on
/// [`CHANNEL`]; the notifications go to `changes` until the returned future ends (the
/// connection dropped).
async fn connect_listener(
    config: &tokio_postgres::Config,
    changes: &Changes,
    gateway: &str,
) -> Result<Listening, ListenError> {
    let (client, mut connection) = config.connect(NoTls).await.map_err(ListenError::Database)?;
    let (ended_tx, ended) = tokio::sync::oneshot::channel();
    let forward = {
        let changes = changes.clone();
        async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            let mut result = Ok(());
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        let to = if n.channel() == RECORDS_CHANNEL {
                            &changes.records
                        } else {
                            &changes.events
                        };
                        let _ = to.send(Arc::from(n.payload()));
                    }
                    Ok(_) => {}
                    Err(error) => {
                        result = Err(error);
                        break;
                    }
                }
            }
            let _ = ended_tx.send(result);
        }
    };
    let forwarding = tokio::spawn(forward);
    let setup = async {
        let locked: bool = client
            .query_one(
                "SELECT pg_try_advisory_lock($1, hashtext($2))",
                &[&PRESENCE_CLASS, &gateway],
            )
            .await
            .map_err(ListenError::Database)?
            .get(0);
        if !locked {
            return Err(ListenError::IdInUse);
        }
        client
            .batch_execute(&format!("LISTEN {CHANNEL}; LISTEN {RECORDS_CHANNEL}"))
            .await
            .map_err(ListenError::Database)
    };
    if let Err(error) = setup.await {
        forwarding.abort();
        return Err(error);
    }
    Ok(Box::pin(async move {
        // Held until the connection ends: dropping the client would close it (and let the
        // lock go).
        let result = ended.await.unwrap_or(Ok(()));
        drop(client);
        result
    }))
}

/// Keeps the gateway listening (and present) until `stop`: `first` until its connection
/// drops, then a new connection after a pause (doubling from one second up to thirty).
async fn listen(
    config: tokio_postgres::Config,
    changes: Changes,
    stop: CancellationToken,
    gateway: String,
    first: Listening,
) {
    let mut listening = Some(first);
    let mut pause = Duration::from_secs(1);
    loop {
        if let Some(connection) = listening.take() {
            let ended = tokio::select! {
                _ = stop.cancelled() => return,
                ended = connection => ended,
            };
            if let Err(error) = ended {
                tracing::warn!(%error, "the task store's change listener lost its connection");
            }
            pause = Duration::from_secs(1);
            // Followers read again: what changed while no one listened is not lost.
            changes.any();
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(30));
        match connect_listener(&config, &changes, &gateway).await {
            Ok(connection) => {
                changes.any();
                listening = Some(connection);
            }
            Err(ListenError::Database(error)) => {
                tracing::warn!(%error, retry_in_s = pause.as_secs(), "the task store's change listener cannot connect");
            }
            Err(ListenError::IdInUse) => {
                tracing::error!(gateway = %gateway, retry_in_s = pause.as_secs(),
                    "another session holds this gateway's presence lock (a gateway with the same id, or one that took this one for gone while the database was away)");
            }
        }
    }
}

/// Gives the working set's tasks the push configs another gateway set on them
/// ([`RECORDS_CHANNEL`]), until `stop`.
async fn refresh_push_configs(
    pool: Pool,
    memory: Arc<MemoryStore>,
    push_dirty: PushDirty,
    mut records: broadcast::Receiver<Arc<str>>,
    stop: CancellationToken,
) {
    loop {
        let id = tokio::select! {
            _ = stop.cancelled() => return,
            id = records.recv() => id,
        };
        let ids: Vec<String> = match id {
            Ok(id) if &*id != ANY_TASK => {
                if memory.get(&id).is_none() {
                    continue;
                }
                vec![id.to_string()]
            }
            // Missed some, or the listener was away: every task of the working set.
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => memory.ids(),
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Ok(client) = pool.get().await else {
            continue;
        };
        let rows = client
            .query(
                "SELECT id, push FROM mesh_tasks WHERE id = ANY($1)",
                &[&ids],
            )
            .await;
        for row in rows.iter().flatten() {
            let push: Option<&str> = row.get(1);
            let configs: Vec<mesh_core::model::TaskPushNotificationConfig> = push
                .and_then(|p| serde_json::from_str(p).ok())
                .unwrap_or_default();
            adopt_push_configs(&memory, &push_dirty, row.get(0), &configs);
        }
    }
}

/// A bounded pool of connections to `config`'s database, made on the runtime that first
/// uses it.
fn make_pool(
    config: &tokio_postgres::Config,
    size: usize,
) -> Result<Pool, deadpool_postgres::BuildError> {
    let manager = Manager::from_config(
        config.clone(),
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .wait_timeout(Some(POOL_WAIT))
        .create_timeout(Some(POOL_WAIT))
        .recycle_timeout(Some(POOL_WAIT))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
}

/// The writer thread: takes the queue's batches, writes each in one transaction, lets
/// released tasks go, and applies the bounds.
struct Writer {
    pool: Pool,
    queue: Arc<Queue>,
    memory: Arc<MemoryStore>,
    released: Arc<Mutex<HashMap<String, Arc<TaskRecord>>>>,
    turns: Turns,
    push_dirty: PushDirty,
    totals: Arc<RwLock<Totals>>,
    limits: StoreLimits,
    gateway: String,
}

impl Writer {
    /// The writer's loop, on a runtime of its own (one thread, driven only while it writes):
    /// it never waits for the gateway's runtime, so a store closed from one of its workers
    /// (at shutdown, on a one-worker runtime) still writes what is pending.
    fn run(&self) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::error!(%error, "the task store's writer cannot start: nothing is written");
                self.queue.stopped();
                return;
            }
        };
        let mut last_retention = Instant::now();
        loop {
            let left = RETENTION_EVERY.saturating_sub(last_retention.elapsed());
            if !self.queue.wait_for_work(left) {
                break;
            }
            if last_retention.elapsed() >= RETENTION_EVERY {
                last_retention = Instant::now();
                if let Err(error) = runtime.block_on(self.retain()) {
                    tracing::warn!(%error, "could not apply the task store's bounds");
                }
            }
            let batch = self.queue.take();
            if batch.len() > 0 {
                // A failed batch is retried once, then dropped with an error in the log.
                let result = runtime
                    .block_on(self.write(&batch))
                    .or_else(|_| runtime.block_on(self.write(&batch)));
                if let Err(error) = result {
                    tracing::error!(%error, changes = batch.len(), "could not write tasks to the task store");
                }
            }
            drop(batch);
            self.queue.committed();
            self.let_go();
        }
        self.queue.stopped();
    }

    /// Lets the released tasks that are written leave the working set.
    fn let_go(&self) {
        let mut released = self.released.locked();
        if released.is_empty() {
            return;
        }
        released.retain(|id, record| {
            if !self.queue.holds_nothing_of(id) {
                return true;
            }
            // Changed since (a new turn here): it stays, until released again.
            if self.memory.remove_if_unchanged(id, record) {
                self.turns.locked().remove(id);
            }
            false
        });
    }

    /// Writes a batch in one transaction: deletions, snapshots, events, the state of the
    /// tasks with events, deliveries; then notifies.
    async fn write(&self, batch: &Batch) -> Result<(), StoreError> {
        let failed = |e: tokio_postgres::Error| storage_error("cannot write tasks", e);
        let mut client = self
            .pool
            .get()
            .await
            .map_err(|e| storage_error("no connection to the task database", e))?;
        let tx = client.transaction().await.map_err(failed)?;
        let mut touched: Vec<&str> = Vec::new();

        let deleted: Vec<&str> = batch
            .records
            .iter()
            .filter(|(_, work)| {
                matches!(
                    work,
                    RecordWork::Delete | RecordWork::Snapshot { fresh: true }
                )
            })
            .map(|(id, _)| id.as_str())
            .collect();
        if !deleted.is_empty() {
            tx.execute(
                "DELETE FROM mesh_task_events WHERE task_id = ANY($1)",
                &[&deleted],
            )
            .await
            .map_err(failed)?;
            tx.execute("DELETE FROM mesh_tasks WHERE id = ANY($1)", &[&deleted])
                .await
                .map_err(failed)?;
        }

        // The turns of the batch's tasks as they are now (a short lock).
        let turns: HashMap<&str, (String, u64)> = {
            let all = self.turns.locked();
            batch
                .records
                .keys()
                .chain(batch.events.keys())
                .filter_map(|id| all.get(id).map(|turn| (id.as_str(), turn.clone())))
                .collect()
        };
        let mut snapshots = Snapshots::default();
        for (id, work) in &batch.records {
            if *work == RecordWork::Delete {
                continue;
            }
            // Gone meanwhile (removed: its deletion is queued).
            let Some((record, log_bytes)) = self.memory.snapshot_of(id) else {
                continue;
            };
            snapshots.add(&record, log_bytes, turns.get(id.as_str()));
            touched.push(id);
        }
        if !snapshots.ids.is_empty() {
            snapshots.write(&tx, &self.gateway).await.map_err(failed)?;
            // A record inserted whole (a new task, a follow-up turn) brings its push configs;
            // the other snapshots leave them to `modify`.
            let dirty: Vec<(&str, Option<String>)> = {
                let mut dirty = self.push_dirty.locked();
                snapshots
                    .ids
                    .iter()
                    .zip(&snapshots.pushes)
                    .filter(|(id, _)| dirty.remove(id.as_str()))
                    .map(|(id, push)| (id.as_str(), push.clone()))
                    .collect()
            };
            if !dirty.is_empty() {
                let (ids, pushes): (Vec<&str>, Vec<Option<String>>) = dirty.into_iter().unzip();
                tx.execute(
                    "UPDATE mesh_tasks AS t SET push = u.push
                     FROM unnest($1::TEXT[], $2::TEXT[]) AS u(id, push) WHERE t.id = u.id",
                    &[&ids, &pushes],
                )
                .await
                .map_err(failed)?;
            }
        }

        let mut events = EventRows::default();
        for (id, logged) in batch.events.iter() {
            for event in logged {
                events.add(id, event);
            }
            touched.push(id);
        }
        if !events.ids.is_empty() {
            tx.execute(
                "INSERT INTO mesh_task_events (task_id, seq, time, event, position)
                 SELECT * FROM unnest($1::TEXT[], $2::INT8[], $3::INT8[], $4::TEXT[], $5::INT8[])
                 ON CONFLICT (task_id, seq) DO UPDATE SET time = excluded.time,
                     event = excluded.event, position = excluded.position",
                &[
                    &events.ids,
                    &events.seqs,
                    &events.times,
                    &events.jsons,
                    &events.positions,
                ],
            )
            .await
            .map_err(failed)?;
            // The state of each task with events (its row is written whole less often).
            let mut states = States::default();
            for id in batch.events.keys() {
                if batch.records.contains_key(id) {
                    continue;
                }
                if let Some((record, log_bytes)) = self.memory.snapshot_of(id) {
                    states.add(&record, log_bytes, turns.get(id.as_str()));
                }
            }
            if !states.ids.is_empty() {
                tx.execute(
                    "UPDATE mesh_tasks AS t SET state = u.state, final = u.final,
                         updated = u.updated, last_seq = u.last_seq, bytes = u.bytes,
                         gateway = $7, turn_request = COALESCE(u.turn_request, t.turn_request),
                         turn_start = COALESCE(u.turn_start, t.turn_start)
                     FROM unnest($1::TEXT[], $2::TEXT[], $3::BOOL[], $4::INT8[], $5::INT8[],
                         $6::INT8[], $8::TEXT[], $9::INT8[])
                         AS u(id, state, final, updated, last_seq, bytes, turn_request, turn_start)
                     WHERE t.id = u.id",
                    &[
                        &states.ids,
                        &states.states,
                        &states.finals,
                        &states.updated,
                        &states.last_seqs,
                        &states.bytes,
                        &self.gateway,
                        &states.turn_requests,
                        &states.turn_starts,
                    ],
                )
                .await
                .map_err(failed)?;
            }
        }

        for (id, delivery) in &batch.deliveries {
            let id = sql_int(*id);
            match delivery {
                Some(d) => {
                    let config = serde_json::to_string(&d.config).unwrap_or_default();
                    tx.execute(
                        "INSERT INTO mesh_webhook_deliveries
                             (id, gateway, task_id, config, payload, attempts, next_attempt)
                         VALUES ($1, $2, $3, $4, $5, $6, $7)
                         ON CONFLICT (gateway, id) DO UPDATE SET attempts = $6, next_attempt = $7",
                        &[
                            &id,
                            &self.gateway,
                            &d.task_id,
                            &config,
                            &&d.body[..],
                            &i32::try_from(d.attempts).unwrap_or(i32::MAX),
                            &millis(d.next_attempt),
                        ],
                    )
                    .await
                    .map_err(failed)?;
                }
                None => {
                    tx.execute(
                        "DELETE FROM mesh_webhook_deliveries WHERE gateway = $1 AND id = $2",
                        &[&self.gateway, &id],
                    )
                    .await
                    .map_err(failed)?;
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        notify(&tx, &touched).await.map_err(failed)?;
        tx.commit().await.map_err(failed)
    }

    /// Applies the bounds to the database and counts its tasks (see the module docs).
    async fn retain(&self) -> Result<(), StoreError> {
        let failed = |e: tokio_postgres::Error| storage_error("cannot apply the bounds", e);
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| storage_error("no connection to the task database", e))?;
        let expired_before = millis(SystemTime::now()) - self.limits.max_age.as_millis() as i64;
        client
            .execute(
                "WITH gone AS (DELETE FROM mesh_tasks WHERE final AND updated < $1 RETURNING id)
                 DELETE FROM mesh_task_events AS e USING gone WHERE e.task_id = gone.id",
                &[&expired_before],
            )
            .await
            .map_err(failed)?;
        client
            .execute(
                "WITH excess AS (SELECT count(*) - $1 AS n FROM mesh_tasks),
                 victims AS (SELECT id FROM mesh_tasks WHERE final ORDER BY updated, id
                             LIMIT GREATEST((SELECT n FROM excess), 0)),
                 gone AS (DELETE FROM mesh_tasks WHERE id IN (SELECT id FROM victims) RETURNING id)
                 DELETE FROM mesh_task_events AS e USING gone WHERE e.task_id = gone.id",
                &[&sql_int(self.limits.max_tasks as u64)],
            )
            .await
            .map_err(failed)?;
        client
            .execute(
                "WITH excess AS (SELECT coalesce(sum(bytes), 0) - $1 AS n FROM mesh_tasks),
                 running AS (SELECT id, sum(bytes) OVER (ORDER BY updated, id) - bytes AS before
                             FROM mesh_tasks WHERE final),
                 gone AS (DELETE FROM mesh_tasks WHERE id IN
                             (SELECT id FROM running WHERE before < (SELECT n FROM excess))
                          RETURNING id)
                 DELETE FROM mesh_task_events AS e USING gone WHERE e.task_id = gone.id",
                &[&sql_int(self.limits.max_bytes as u64)],
            )
            .await
            .map_err(failed)?;
        let totals = count(&client).await.map_err(failed)?;
        *self.totals.write_locked() = totals;
        Ok(())
    }
}

/// Task rows to upsert, as columns.
#[derive(Default)]
struct Snapshots {
    ids: Vec<String>,
    agents: Vec<String>,
    dialects: Vec<&'static str>,
    owners: Vec<Option<String>>,
    contexts: Vec<String>,
    states: Vec<&'static str>,
    finals: Vec<bool>,
    created: Vec<i64>,
    updated: Vec<i64>,
    tasks: Vec<String>,
    pushes: Vec<Option<String>>,
    seqs: Vec<i64>,
    bytes: Vec<i64>,
    turn_requests: Vec<Option<String>>,
    turn_starts: Vec<Option<i64>>,
}

impl Snapshots {
    fn add(&mut self, record: &TaskRecord, log_bytes: usize, turn: Option<&(String, u64)>) {
        self.turn_requests.push(turn.map(|t| t.0.clone()));
        self.turn_starts.push(turn.map(|t| sql_int(t.1)));
        self.ids.push(record.task.id.clone());
        self.agents.push(record.agent.clone());
        self.dialects.push(record.dialect.version());
        self.owners.push(record.owner.clone());
        self.contexts.push(record.task.context_id.clone());
        self.states
            .push(mesh_core::model::state_name(&record.task.status.state));
        self.finals.push(record.task.status.state.is_terminal());
        self.created.push(millis(record.created));
        self.updated.push(millis(record.updated));
        // Encoded here, on the writer's thread: never on the caller's path.
        self.tasks
            .push(serde_json::to_string(&record.task).unwrap_or_default());
        self.pushes.push(push_json(record));
        self.seqs.push(sql_int(record.seq));
        self.bytes
            .push(sql_int((record.estimated_bytes() + log_bytes) as u64));
    }

    async fn write(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        gateway: &str,
    ) -> Result<(), tokio_postgres::Error> {
        tx.execute(
            "INSERT INTO mesh_tasks (id, agent, dialect, owner, context_id, state, final,
                 created, updated, task, push, seq, last_seq, bytes, gateway, turn_request,
                 turn_start)
             SELECT id, agent, dialect, owner, context_id, state, final, created, updated, task,
                 push, seq, seq, bytes, $14, turn_request, turn_start
             FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[],
                 $7::BOOL[], $8::INT8[], $9::INT8[], $10::TEXT[], $11::TEXT[], $12::INT8[],
                 $13::INT8[], $15::TEXT[], $16::INT8[])
                 AS u(id, agent, dialect, owner, context_id, state, final, created, updated,
                      task, push, seq, bytes, turn_request, turn_start)
             ON CONFLICT (id) DO UPDATE SET agent = excluded.agent, dialect = excluded.dialect,
                 owner = excluded.owner, context_id = excluded.context_id,
                 state = excluded.state, final = excluded.final, created = excluded.created,
                 updated = excluded.updated, task = excluded.task,
                 seq = excluded.seq, last_seq = GREATEST(mesh_tasks.last_seq, excluded.seq),
                 bytes = excluded.bytes, gateway = excluded.gateway,
                 turn_request = COALESCE(excluded.turn_request, mesh_tasks.turn_request),
                 turn_start = COALESCE(excluded.turn_start, mesh_tasks.turn_start)",
            &[
                &self.ids,
                &self.agents,
                &self.dialects,
                &self.owners,
                &self.contexts,
                &self.states,
                &self.finals,
                &self.created,
                &self.updated,
                &self.tasks,
                &self.pushes,
                &self.seqs,
                &self.bytes,
                &gateway,
                &self.turn_requests,
                &self.turn_starts,
            ],
        )
        .await
        .map(|_| ())
    }
}

/// Event rows to insert, as columns.
#[derive(Default)]
struct EventRows<'a> {
    ids: Vec<&'a str>,
    seqs: Vec<i64>,
    times: Vec<i64>,
    jsons: Vec<String>,
    positions: Vec<Option<i64>>,
}

impl<'a> EventRows<'a> {
    fn add(&mut self, id: &'a str, event: &LoggedEvent) {
        self.ids.push(id);
        self.seqs.push(sql_int(event.seq));
        self.times.push(millis(event.time));
        self.positions.push(event.position.map(sql_int));
        // Encoded here, on the writer's thread: never on the caller's path. The codec writes
        // UTF-8 JSON.
        let json = task_events::encode(&event.event);
        self.jsons
            .push(String::from_utf8(json.to_vec()).unwrap_or_default());
    }
}

/// The state columns of tasks whose events a batch writes without their row.
#[derive(Default)]
struct States {
    ids: Vec<String>,
    states: Vec<&'static str>,
    finals: Vec<bool>,
    updated: Vec<i64>,
    last_seqs: Vec<i64>,
    bytes: Vec<i64>,
    turn_requests: Vec<Option<String>>,
    turn_starts: Vec<Option<i64>>,
}

impl States {
    fn add(&mut self, record: &TaskRecord, log_bytes: usize, turn: Option<&(String, u64)>) {
        self.turn_requests.push(turn.map(|t| t.0.clone()));
        self.turn_starts.push(turn.map(|t| sql_int(t.1)));
        self.ids.push(record.task.id.clone());
        self.states
            .push(mesh_core::model::state_name(&record.task.status.state));
        self.finals.push(record.task.status.state.is_terminal());
        self.updated.push(millis(record.updated));
        self.last_seqs.push(sql_int(record.seq));
        self.bytes
            .push(sql_int((record.estimated_bytes() + log_bytes) as u64));
    }
}
