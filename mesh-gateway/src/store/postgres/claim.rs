//! Taking over the running tasks (and pending webhook deliveries) of gateways that are gone:
//! who is gone (the presence lock), and the claim, in one transaction.

use super::*;

impl PostgresStore {
    /// Claims the running tasks of `gateway` when it has been gone for `grace` (its presence
    /// lock is free: see the module docs).
    pub(super) async fn claim_if_gone(
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
    pub(super) async fn claim(&self, gateway: &str, gone: bool) -> Result<Vec<Orphan>, StoreError> {
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
        let broker_node: Option<String> = tx
            .query_opt(
                "SELECT node FROM mesh_gateway_nodes WHERE gateway = $1",
                &[&gateway],
            )
            .await
            .map_err(failed)?
            .map(|row| row.get(0));
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
                broker_node: broker_node.clone(),
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
}
