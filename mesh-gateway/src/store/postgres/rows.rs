//! Reading the database: rows into records, events and deliveries, the counts, and the
//! notifications a transaction sends at commit.

use super::*;

/// A record from a row of [`RECORD_COLUMNS`], as its snapshot has it.
pub(super) fn record_from_row(row: &Row) -> Result<TaskRecord, StoreError> {
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
pub(super) async fn apply_logged(
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
pub(super) async fn read_record(
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
pub(super) async fn read_events(
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
pub(super) async fn notify(
    client: &impl deadpool_postgres::GenericClient,
    ids: &[&str],
) -> Result<(), tokio_postgres::Error> {
    notify_on(client, CHANNEL, ids).await
}

/// Notifies `channel` (at commit) with these task ids.
pub(super) async fn notify_on(
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

/// The gateways other than `me` with running tasks in the database.
pub(super) async fn gateways_with_running_tasks(
    pool: &Pool,
    me: &str,
) -> Result<Vec<String>, StoreError> {
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
pub(super) async fn count(
    client: &deadpool_postgres::Object,
) -> Result<Totals, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT state, count(*), coalesce(sum(bytes), 0)::BIGINT, bool_and(final)
             FROM mesh_tasks GROUP BY state",
            &[],
        )
        .await?;
    let mut totals = Totals::default();
    for row in rows {
        totals.add(
            row.get(0),
            usize::try_from(row.get::<_, i64>(1)).unwrap_or(0),
            usize::try_from(row.get::<_, i64>(2)).unwrap_or(0),
        );
    }
    Ok(totals)
}

/// A delivery from a row of (id, task_id, config, payload, attempts, next_attempt); `None`
/// when its config does not parse.
pub(super) fn delivery_from_row(row: &Row) -> Option<PendingDelivery> {
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
pub(super) async fn load_deliveries(
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
