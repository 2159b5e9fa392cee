//! Following the running tasks of a gateway that stopped: its own, when it restarts on its
//! durable store, and those of another one that is gone, when several gateways share the
//! task store. The replies their agents still send are followed here, logged with the task's
//! next sequence numbers, and reach every subscriber of the task on any gateway.
//!
//! A gateway on a durable store has a persistent bus session named after it
//! ([`session_client_id`]): while a gateway is down, the broker keeps the replies addressed
//! to it. A gateway that restarts with the same id follows its own earlier run's tasks on its
//! own session (the replies kept meanwhile come first); a gateway that finds another one gone
//! for [`GatewayConfig::takeover_grace`](crate::GatewayConfig::takeover_grace)
//! ([`TaskStore::claim_orphans`]: the store tells by the gone gateway's presence lock) opens
//! that gateway's session under its name, follows the claimed tasks' replies from the
//! position the store logged last ([`Requester::start_on`]), and closes the session when they
//! end. A task whose turn the store does not know (written before it began), or whose replies
//! cannot be followed (no bus settings to open the session with, a broker that refuses it), is
//! failed with a status that says why.
//!
//! Nothing a gateway received is lost with it: each reply is acknowledged to the broker only
//! once the store committed it ([`Origin::ack`](crate::store::Origin::ack)), so the replies
//! a gateway had received but not written when it died are delivered again on its session,
//! and logged under the numbers it had given them. The pending webhook deliveries of a
//! gateway that is gone are taken over too, and made by the gateway that took them.

use crate::bridge::{Bridge, Reads, SEND_CAPACITY, Undo, status_event};
use crate::store::{Origin, Orphan, TaskStore};
use futures_util::future::join_all;
use mesh_core::bus::{AckMode, Bus, BusConfig, ConnectionState, QoS};
use mesh_core::model::TaskState;
use mesh_core::requester::{ReplyStream, Requester, RequesterKind, Resumed};
use mesh_core::rpc::Reply;
use mesh_core::topic::Topics;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often a gateway looks for gateways that are gone.
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(2);

/// Closes a session opened under another gateway's name as soon as its connection drops,
/// with no reconnect: the broker drops it when that gateway comes back and takes its session
/// (a reconnect would take it back in turn, and the two would never stop), and its broker
/// node may have died with the replies it kept. Resolves true when the session was lost,
/// false when it was closed.
fn give_back_on_loss(bus: &Bus) -> tokio::task::JoinHandle<bool> {
    let mut state = bus.state();
    let bus = bus.clone();
    tokio::spawn(async move {
        while state.changed().await.is_ok() {
            let now = state.borrow_and_update().clone();
            match now {
                ConnectionState::Disconnected { reason } => {
                    tracing::warn!(%reason, "a session taken over was lost (its broker node died, or its gateway is back): its tasks fail");
                    bus.abort();
                    return true;
                }
                ConnectionState::Closed => return false,
                _ => {}
            }
        }
        false
    })
}

/// The client id of gateway `id` of deployment `name` on the bus: its persistent session.
pub fn session_client_id(name: &str, id: &str) -> String {
    format!("mesh-gateway-{name}-{id}")
}

/// What taking over needs.
pub(crate) struct Takeover {
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) bridge: Arc<Bridge>,
    /// How this gateway connects to the bus (another gateway's session is opened the same
    /// way, under its name); `None`: replies cannot be followed, tasks are failed.
    pub(crate) bus_config: Option<BusConfig>,
    pub(crate) topics: Topics,
    /// The deployment's name.
    pub(crate) name: String,
    /// How long a task taken over still has.
    pub(crate) task_timeout: Duration,
    pub(crate) grace: Duration,
    /// Delivers the webhook notifications taken over (none without push notifications).
    pub(crate) pusher: Option<Arc<crate::push::Pusher>>,
}

/// The requests of `orphans` as a requester takes them over, each with `timeout` to run.
pub(crate) fn resumed(orphans: &[Orphan], timeout: Duration) -> Vec<Resumed> {
    orphans
        .iter()
        .filter_map(|o| {
            Some(Resumed {
                request_id: o.request_id.clone()?,
                agent: o.record.agent.clone(),
                task_id: o.record.task.id.clone(),
                next_seq: o.next_position,
                timeout,
            })
        })
        .collect()
}

impl Takeover {
    /// Follows each of `orphans` that has a stream in `streams` (the order of [`resumed`])
    /// and fails the others. Resolves when every followed task's
    /// turn ended.
    pub(crate) async fn follow(&self, orphans: Vec<Orphan>, streams: Vec<ReplyStream>) {
        let mut streams = streams.into_iter();
        let mut pumps = Vec::new();
        for orphan in orphans {
            if orphan.request_id.is_none() {
                self.fail(orphan, "its turn is not known to the task store");
                continue;
            }
            let Some(stream) = streams.next() else {
                self.fail(orphan, "its replies cannot be followed");
                continue;
            };
            let id = orphan.record.task.id.clone();
            let turn_start = orphan.turn_start;
            let record = Arc::new(orphan.record);
            if let Err(error) = self.store.insert(crate::store::TaskRecord::clone(&record)) {
                tracing::warn!(task = %id, %error, "cannot take over a task");
                continue;
            }
            let Some((live, _)) = self.bridge.begin(&id, SEND_CAPACITY, Reads::Outcome) else {
                continue;
            };
            tracing::info!(task = %id, from = %orphan.gateway, next_position = orphan.next_position,
                seq = record.seq, "following a task taken over");
            pumps.push(
                self.bridge
                    .pump(id, live, stream, Undo::Restore(record), turn_start),
            );
        }
        join_all(pumps).await;
    }

    /// Fails a task taken over whose replies cannot be followed: a final status event,
    /// logged like any, that says why.
    fn fail(&self, orphan: Orphan, why: &str) {
        let id = orphan.record.task.id.clone();
        let text = format!(
            "the gateway that bridged this task ({}) stopped while it ran, and {why}",
            orphan.gateway
        );
        let event = Arc::new(Reply::StatusUpdate(status_event(
            &orphan.record.task,
            TaskState::Failed,
            Some(&text),
        )));
        if self.store.insert(orphan.record).is_err() {
            return;
        }
        match self.store.append(&id, event, Origin::default()) {
            Ok(record) => self.bridge.notify_push(&record),
            Err(error) => tracing::warn!(task = %id, %error, "cannot fail a task taken over"),
        }
        self.store.release(&id);
    }

    /// Opens gone gateway `gateway`'s session and follows `orphans` on it; closes the
    /// session when they end.
    async fn adopt(self: Arc<Self>, gateway: String, orphans: Vec<Orphan>) {
        let Some(template) = self.bus_config.clone() else {
            self.follow(orphans, Vec::new()).await;
            return;
        };
        let mut config = template.with_client_id(session_client_id(&self.name, &gateway));
        config.clean_session = false;
        // In a cluster that keeps a session on its node, the gone gateway's session (and the
        // replies kept for it) is on the node it was connected to last.
        if let Some(node) = orphans.iter().find_map(|o| o.broker_node.as_deref()) {
            config = config.starting_at(node);
        }
        let filter = match Requester::response_filter(
            &self.topics,
            RequesterKind::Gateway,
            &self.name,
            &gateway,
        ) {
            Ok(filter) => filter,
            Err(_) => {
                self.follow(orphans, Vec::new()).await;
                return;
            }
        };
        let connected =
            Bus::connect_subscribed(config, &[(&filter, QoS::AtLeastOnce, AckMode::ByConsumer)])
                .await;
        let (bus, mut subscriptions) = match connected {
            Ok(connected) => connected,
            Err(error) => {
                tracing::warn!(%error, gateway = %gateway, "cannot open the session of a gateway that is gone");
                self.follow(orphans, Vec::new()).await;
                return;
            }
        };
        if !bus.session_present() {
            // The session died with its broker node (or expired): the replies kept in it for
            // these tasks are gone, and following them on would hide the loss.
            tracing::warn!(gateway = %gateway, node = %bus.node(),
                "the session of a gateway that is gone is not on the broker: its tasks fail");
            for orphan in orphans {
                self.fail(
                    orphan,
                    "its session, which kept the replies, is gone from the broker",
                );
            }
            // Left as a clean end leaves it, for the gateway if it comes back.
            let _ = bus.disconnect().await;
            return;
        }
        let mut lost = give_back_on_loss(&bus);
        let ids: Vec<String> = orphans.iter().map(|o| o.record.task.id.clone()).collect();
        let resumed = resumed(&orphans, self.task_timeout);
        let started = Requester::start_on(
            bus.clone(),
            subscriptions.remove(0),
            self.topics.clone(),
            RequesterKind::Gateway,
            &self.name,
            &gateway,
            resumed,
        );
        match started {
            Ok((requester, streams)) => {
                self.follow(orphans, streams).await;
                drop(requester);
            }
            Err(error) => {
                tracing::warn!(%error, gateway = %gateway, "cannot follow the replies of a gateway that is gone");
                self.follow(orphans, Vec::new()).await;
            }
        }
        // Every followed task ended, or the session was lost (and is aborted already).
        let was_lost = matches!(
            tokio::time::timeout(Duration::from_millis(100), &mut lost).await,
            Ok(Ok(true))
        );
        if was_lost {
            // Nobody can follow the tasks still running any more: they end here, failed.
            for id in ids {
                self.fail_unfinished(&id, &gateway);
            }
            return;
        }
        // A clean end: the broker keeps the session (the gateway may come back to it).
        let _ = bus.disconnect().await;
    }

    /// Fails task `id`, taken over from `gateway`, unless it has ended: its replies were
    /// being followed on `gateway`'s session, which was lost.
    fn fail_unfinished(&self, id: &str, gateway: &str) {
        let Some(record) = self.store.get(id) else {
            return;
        };
        if mesh_core::model::is_final_state(&record.task.status.state) {
            return;
        }
        let text = format!(
            "the gateway that bridged this task ({gateway}) stopped while it ran, and the \
             session its replies were followed on was lost"
        );
        let event = Arc::new(Reply::StatusUpdate(status_event(
            &record.task,
            TaskState::Failed,
            Some(&text),
        )));
        match self.store.append(id, event, Origin::default()) {
            Ok(record) => self.bridge.notify_push(&record),
            Err(error) => tracing::warn!(task = %id, %error, "cannot fail a task taken over"),
        }
        self.store.release(id);
    }

    /// Takes over `orphans` of other gateways: each gateway's in a task of its own.
    pub(crate) fn adopt_all(self: &Arc<Self>, orphans: Vec<Orphan>) {
        let mut by_gateway: Vec<(String, Vec<Orphan>)> = Vec::new();
        for orphan in orphans {
            match by_gateway.iter_mut().find(|(g, _)| *g == orphan.gateway) {
                Some((_, list)) => list.push(orphan),
                None => by_gateway.push((orphan.gateway.clone(), vec![orphan])),
            }
        }
        for (gateway, orphans) in by_gateway {
            tokio::spawn(self.clone().adopt(gateway, orphans));
        }
    }

    /// Looks for gateways that are gone every [`LOOK_EVERY`] until `shutdown`, and takes
    /// their tasks over.
    pub(crate) fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    () = tokio::time::sleep(LOOK_EVERY) => {}
                }
                match self.store.claim_orphans(self.grace).await {
                    Ok(orphans) => {
                        // The pending webhook deliveries of the gateways that are gone.
                        let deliveries = self.store.take_pending_deliveries();
                        if let Some(pusher) = &self.pusher {
                            pusher.resume(deliveries);
                        }
                        if !orphans.is_empty() {
                            self.adopt_all(orphans);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cannot look for gateways that are gone");
                    }
                }
            }
        });
    }
}
