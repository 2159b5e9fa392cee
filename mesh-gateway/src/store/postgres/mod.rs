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

use super::columns::{from_millis, millis, page_offset, push_json, sql_int};
use super::memory::{LoggedEvent, MemoryStore};
use super::working_set::{Totals, WorkingSet, merge_logged};
use super::write_behind::{Batch, RecordWork};
use super::{
    Origin, Orphan, PendingDelivery, StoreError, StoreLimits, StoredEvent, TaskPage, TaskQuery,
    TaskRecord, TaskStore,
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
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::broadcast;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, NoTls, Row};
use tokio_util::sync::CancellationToken;

mod claim;
mod listen;
mod rows;
mod writer;

use listen::{
    Changes, ListenError, adopt_push_configs, connect_listener, listen, refresh_push_configs,
};
use rows::*;
use writer::Writer;

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
CREATE TABLE IF NOT EXISTS mesh_gateway_nodes (
    gateway TEXT PRIMARY KEY,
    node TEXT NOT NULL
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

/// See [`PostgresStore::push_dirty`].
type PushDirty = Arc<Mutex<std::collections::HashSet<String>>>;

/// Tasks in PostgreSQL, shared by every gateway on the same database. See the module docs.
pub struct PostgresStore {
    set: Arc<WorkingSet>,
    pool: Pool,
    limits: StoreLimits,
    totals: Arc<RwLock<Totals>>,
    changes: broadcast::Sender<Arc<str>>,
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
            // `CREATE … IF NOT EXISTS` of what is there already is not news for the log.
            tx.batch_execute("SET LOCAL client_min_messages = warning")
                .await
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

        let set = Arc::new(WorkingSet::new(limits));
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
            set.clone(),
            push_dirty.clone(),
            records.subscribe(),
            stop.clone(),
        ));
        let writer = {
            let writer = Writer {
                pool: writer_pool,
                set: set.clone(),
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
            set,
            pool,
            limits,
            totals,
            changes,
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
        self.set.queue.close();
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

    /// Refuses a new task while the last count says the database is full of tasks that are
    /// not finished (see the module docs).
    fn check_room(&self) -> Result<(), StoreError> {
        // Counted every ten seconds (see the module docs): no admissions are tracked.
        self.totals.read_locked().check_room(self.limits, (0, 0))
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
        let new = self.set.memory.get(&id).is_none() && record.seq == 0;
        if new {
            self.check_room()?;
        }
        // Noted before the writer can see the record.
        self.push_dirty.locked().insert(id.clone());
        self.set.insert(record)
    }

    fn get(&self, id: &str) -> Option<Arc<TaskRecord>> {
        self.set.memory.get(id)
    }

    async fn load(&self, id: &str) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        // A task this gateway bridges, or whose writes it has not committed yet, is newest
        // here; one whose turn ended here and is written may have been continued by another
        // gateway since.
        let client = self.client().await?;
        if let Some(record) = self.set.newest_here(id) {
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
            adopt_push_configs(&self.set.memory, &self.push_dirty, id, &configs);
            return Ok(self.set.memory.get(id).or(Some(record)));
        }
        read_record(&client, id)
            .await
            .map(|r| r.map(Arc::new))
            .map_err(|e| storage_error(&format!("cannot read task {id}"), e))
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
        // What this gateway has not written yet first: a batch committed meanwhile is then
        // read from the database (the two are merged by sequence).
        let queued = self.set.queue.queued_events(id, after, limit);
        let client = self.client().await?;
        let committed = read_events(&client, id, after, limit)
            .await
            .map_err(|e| storage_error(&format!("cannot read the events of {id}"), e))?;
        let events = merge_logged(id, after, limit, committed, &queued)?;
        if events.is_empty() {
            let known = self.set.memory.get(id).is_some()
                || client
                    .query_opt("SELECT 1 FROM mesh_tasks WHERE id = $1", &[&id])
                    .await
                    .map_err(|e| storage_error(&format!("cannot read task {id}"), e))?
                    .is_some();
            if !known {
                return Err(StoreError::TaskNotFound(id.to_owned()));
            }
        }
        Ok(events)
    }

    fn update(&self, id: &str, apply: &mut dyn FnMut(&mut TaskRecord)) -> Option<Arc<TaskRecord>> {
        self.set.update(id, apply)
    }

    async fn modify(
        &self,
        id: &str,
        apply: &mut (dyn for<'r> FnMut(&'r mut TaskRecord) + Send),
    ) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        // Through the database, whoever bridges the task: push configs are read by the
        // gateway that delivers its notifications, which may be another one (it is told).
        // A task of the working set is written first, so that its row is there.
        if self.set.memory.get(id).is_some() {
            self.set.queue.written(id, WRITTEN_WAIT).await;
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
        adopt_push_configs(&self.set.memory, &self.push_dirty, id, &record.push_configs);
        Ok(Some(Arc::new(record)))
    }

    async fn written(&self, id: &str) {
        self.set.queue.written(id, WRITTEN_WAIT).await;
    }

    fn begin_turn(&self, id: &str, request_id: &str, start: u64) {
        self.set.begin_turn(id, request_id, start);
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

    async fn note_broker_node(&self, node: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO mesh_gateway_nodes (gateway, node) VALUES ($1, $2)
                 ON CONFLICT (gateway) DO UPDATE SET node = EXCLUDED.node",
                &[&self.gateway, &node],
            )
            .await
            .map_err(|e| storage_error("cannot note the broker node", e))?;
        Ok(())
    }

    fn remove(&self, id: &str) {
        self.push_dirty.locked().remove(id);
        self.set.remove(id);
    }

    fn release(&self, id: &str) {
        self.set.release(id);
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        let offset = sql_int(page_offset(query.page_token.as_deref())? as u64);
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
            if let Some(record) = self.set.newest_here(id) {
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

    fn shared(&self) -> bool {
        true
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

#[cfg(test)]
mod tests {
    //! The store on a real PostgreSQL (a fresh database per test, see mesh-testkit).
    use super::*;

    fn finished(id: &str) -> TaskRecord {
        crate::store::memory::tests::task(id, "ctx", TaskState::Completed)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_working_set_keeps_only_what_the_gateway_bridges() {
        let db = mesh_testkit::TestDatabase::create().await;
        let store = PostgresStore::open(db.url(), StoreLimits::default(), "gw-working-set")
            .await
            .unwrap();
        let done = |id: &str| {
            let task = finished(id).task;
            Arc::new(Reply::StatusUpdate(task_events::status_event(
                &task,
                TaskState::Completed,
                None,
            )))
        };
        for i in 0..50 {
            let id = format!("t{i}");
            let mut running = finished(&id);
            running.task.status.state = TaskState::Working;
            store.insert(running).unwrap();
            store.append(&id, done(&id), Origin::default()).unwrap();
            // The turn's stream ended: the bridge lets the task go.
            store.release(&id);
        }
        for i in 0..50 {
            store.written(&format!("t{i}")).await;
        }
        assert_eq!(
            store.set.memory.len(),
            0,
            "the finished tasks left memory once written"
        );
        // Every one is still served, from the database.
        let t7 = store
            .load("t7")
            .await
            .unwrap()
            .expect("t7 is in the database");
        assert_eq!(t7.task.status.state, TaskState::Completed);
        assert_eq!(t7.seq, 1);
        store.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_bounds_apply_to_the_database_oldest_finished_tasks_first() {
        let db = mesh_testkit::TestDatabase::create().await;
        let limits = StoreLimits {
            max_tasks: 3,
            ..StoreLimits::default()
        };
        let store = PostgresStore::open(db.url(), limits, "gw-bounds")
            .await
            .unwrap();
        for i in 0..5 {
            store.insert(finished(&format!("t{i}"))).unwrap();
            // Written one by one: each a little later than the one before.
            store.written(&format!("t{i}")).await;
        }
        let client = store.client().await.unwrap();
        let totals = writer::apply_bounds(&client, limits).await.unwrap();
        assert_eq!(totals.tasks, 3, "{totals:?}");
        assert_eq!(totals.finished, 3);
        for (id, kept) in [("t0", false), ("t1", false), ("t2", true), ("t4", true)] {
            let row = client
                .query_opt("SELECT 1 FROM mesh_tasks WHERE id = $1", &[&id])
                .await
                .unwrap();
            assert_eq!(row.is_some(), kept, "{id}");
        }
        // The byte budget: every finished task goes when one byte is the limit.
        let tight = StoreLimits {
            max_bytes: 1,
            ..limits
        };
        let totals = writer::apply_bounds(&client, tight).await.unwrap();
        assert_eq!(totals.tasks, 0, "{totals:?}");
        drop(client);
        store.close();
    }
}
