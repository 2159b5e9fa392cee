//! The writer thread: the write-behind queue's batches into the database, one transaction
//! each, on a runtime of its own; the bounds; the working set's tasks let go once written.

use super::*;
use crate::store::memory::StateColumns;

/// The writer thread: takes the queue's batches, writes each in one transaction, lets
/// released tasks go, and applies the bounds.
pub(super) struct Writer {
    pub(super) pool: Pool,
    pub(super) set: Arc<WorkingSet>,
    pub(super) push_dirty: PushDirty,
    pub(super) totals: Arc<RwLock<Totals>>,
    pub(super) limits: StoreLimits,
    pub(super) gateway: String,
}

impl Writer {
    /// The writer's loop, on a runtime of its own (one thread, driven only while it writes):
    /// it never waits for the gateway's runtime, so a store closed from one of its workers
    /// (at shutdown, on a one-worker runtime) still writes what is pending.
    pub(super) fn run(&self) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::error!(%error, "the task store's writer cannot start: nothing is written");
                self.set.queue.stopped();
                return;
            }
        };
        let mut last_retention = Instant::now();
        loop {
            let left = RETENTION_EVERY.saturating_sub(last_retention.elapsed());
            if !self.set.queue.wait_for_work(left) {
                break;
            }
            if last_retention.elapsed() >= RETENTION_EVERY {
                last_retention = Instant::now();
                if let Err(error) = runtime.block_on(self.retain()) {
                    tracing::warn!(%error, "could not apply the task store's bounds");
                }
            }
            let batch = self.set.queue.take();
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
            self.set.queue.committed(|| self.set.let_go());
        }
        self.set.queue.stopped();
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
        let turns = self
            .set
            .turns_of(batch.records.keys().chain(batch.events.keys()));
        let mut snapshots = Snapshots::default();
        for (id, work) in &batch.records {
            if *work == RecordWork::Delete {
                continue;
            }
            // Gone meanwhile (removed: its deletion is queued).
            let Some((record, log_bytes)) = self.set.memory.snapshot_of(id) else {
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
                if let Some(now) = self.set.memory.state_of(id) {
                    states.add(now, turns.get(id.as_str()));
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
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| storage_error("no connection to the task database", e))?;
        let totals = apply_bounds(&client, self.limits).await?;
        *self.totals.write_locked() = totals;
        Ok(())
    }
}

/// Applies `limits` to the database (see the module docs of the store) and counts its tasks
/// after.
pub(super) async fn apply_bounds(
    client: &deadpool_postgres::Object,
    limits: StoreLimits,
) -> Result<Totals, StoreError> {
    let failed = |e: tokio_postgres::Error| storage_error("cannot apply the bounds", e);
    let expired_before = millis(SystemTime::now()) - limits.max_age.as_millis() as i64;
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
            "WITH excess AS (SELECT count(*) - $1::BIGINT AS n FROM mesh_tasks),
             victims AS (SELECT id FROM mesh_tasks WHERE final ORDER BY updated, id
                         LIMIT GREATEST((SELECT n FROM excess), 0)),
             gone AS (DELETE FROM mesh_tasks WHERE id IN (SELECT id FROM victims) RETURNING id)
             DELETE FROM mesh_task_events AS e USING gone WHERE e.task_id = gone.id",
            &[&sql_int(limits.max_tasks as u64)],
        )
        .await
        .map_err(failed)?;
    // sum() of BIGINT is NUMERIC: cast back, so that the bound binds as a BIGINT.
    client
        .execute(
            "WITH excess AS (SELECT coalesce(sum(bytes), 0)::BIGINT - $1::BIGINT AS n FROM mesh_tasks),
             running AS (SELECT id, (sum(bytes) OVER (ORDER BY updated, id))::BIGINT - bytes AS before
                         FROM mesh_tasks WHERE final),
             gone AS (DELETE FROM mesh_tasks WHERE id IN
                         (SELECT id FROM running WHERE before < (SELECT n FROM excess))
                      RETURNING id)
             DELETE FROM mesh_task_events AS e USING gone WHERE e.task_id = gone.id",
            &[&sql_int(limits.max_bytes as u64)],
        )
        .await
        .map_err(failed)?;
    count(client).await.map_err(failed)
}

/// Task rows to upsert, as columns.
#[derive(Default)]
pub(super) struct Snapshots {
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
pub(super) struct EventRows<'a> {
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
pub(super) struct States {
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
    fn add(&mut self, now: StateColumns, turn: Option<&(String, u64)>) {
        self.turn_requests.push(turn.map(|t| t.0.clone()));
        self.turn_starts.push(turn.map(|t| sql_int(t.1)));
        self.states.push(mesh_core::model::state_name(&now.state));
        self.finals.push(now.state.is_terminal());
        self.updated.push(millis(now.updated));
        self.last_seqs.push(sql_int(now.seq));
        self.bytes.push(sql_int(now.bytes as u64));
        self.ids.push(now.id);
    }
}
