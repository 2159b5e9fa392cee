//! The gateway's listening connection: it holds the gateway's presence lock and hands the
//! notifications of the other gateways' writes to the store's followers, and the push configs
//! they set to the working set.

use super::*;

/// Where the listener hands the notifications: the tasks whose events were written, and
/// those whose record another gateway changed ([`RECORDS_CHANNEL`]).
#[derive(Clone)]
pub(super) struct Changes {
    pub(super) events: broadcast::Sender<Arc<str>>,
    pub(super) records: broadcast::Sender<Arc<str>>,
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
pub(super) type Listening =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// Why [`connect_listener`] did not listen.
pub(super) enum ListenError {
    Database(tokio_postgres::Error),
    /// Another live session holds the gateway's presence lock.
    IdInUse,
}

/// How the server watches the presence connection's socket: a keepalive probe after 2 s of
/// silence, every second, 3 unanswered ones drop it; data unacknowledged for 5 s drops it
/// too (ignored on a Unix socket).
const PRESENCE_SOCKET: &str = "SET tcp_keepalives_idle = 2; SET tcp_keepalives_interval = 1; \
     SET tcp_keepalives_count = 3; SET tcp_user_timeout = 5000";

/// Connects, takes gateway `gateway`'s presence lock (see the module docs) and listens on
/// [`CHANNEL`]; the notifications go to `changes` until the returned future ends (the
/// connection dropped).
pub(super) async fn connect_listener(
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
        // The server lets the lock go once it sees this connection dead: within seconds
        // when the gateway's host or container vanishes without closing it (the kernel's
        // defaults would take hours of silence, or minutes of retransmissions).
        client
            .batch_execute(PRESENCE_SOCKET)
            .await
            .map_err(ListenError::Database)?;
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
pub(super) async fn listen(
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
pub(super) async fn refresh_push_configs(
    pool: Pool,
    set: Arc<WorkingSet>,
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
                if set.memory.get(&id).is_none() {
                    continue;
                }
                vec![id.to_string()]
            }
            // Missed some, or the listener was away: every task of the working set.
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => set.memory.ids(),
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
            adopt_push_configs(&set.memory, &push_dirty, row.get(0), &configs);
        }
    }
}

/// Gives the working set's record of `id` (if there is one) these push configs, the
/// database's, unless its own are newer (inserted and not written yet: `dirty`).
pub(super) fn adopt_push_configs(
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
