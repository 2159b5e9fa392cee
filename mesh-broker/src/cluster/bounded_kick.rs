//! The cluster's session registry with a bound on the wait for a peer's `Kick` answer.
//!
//! Every CONNECT asks the peers to drop a session of the same client id (rmqtt's broadcast
//! `Kick`) and waits, holding the lock of that client id, for the first answer, up to 15 s
//! (a constant of the plugin). While the breaker of a dead peer is not open yet, or when
//! the kick is the call that probes it, the client waits those 15 s for its CONNACK, and
//! every reconnect of the same client id in the meantime is refused (`ServiceUnavailable`):
//! a client that gives up after 5 s could not connect at all.
//!
//! [`BoundedKick`] wraps the plugin's registry and lets each kick wait until every peer
//! that has not answered is known to be down (its breaker open: see `watch`), and at most
//! [`ClusterConfig::CALL_TIMEOUT`](super::ClusterConfig::CALL_TIMEOUT); then the
//! connection goes on as the plugin does when every peer failed (as if no other node had a
//! session of that id). The kick itself still runs to its end in the plugin's task, so a
//! slow peer still drops its session when the kick reaches it. Everything else is handed to
//! the plugin's registry unchanged.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmqtt::Result;
use rmqtt::grpc::GrpcClients;
use rmqtt::session::Session;
use rmqtt::shared::{Entry, MessageLoadCallback, RetainLoadCallback, Shared};
use rmqtt::types::{
    ForwardedCount, ForwardedRecipients, From, HealthInfo, Id, IsAdmin, MsgID, NodeHealthStatus,
    NodeId, OfflineSession, Publish, Reason, Retain, SessionStatus, SharedGroup, SubRelations,
    SubRelationsMap, SubsSearchParams, SubsSearchResult, Subscribe, SubscribeReturn, To,
    TopicFilter, TopicName, Tx, Unsubscribe,
};

/// How often a kick that waits looks whether every peer is down.
const DOWN_CHECK: Duration = Duration::from_millis(20);

/// The plugin's registry, with each kick bounded by `limit` and by its peers being down.
pub(crate) struct BoundedKick {
    inner: Box<dyn Shared>,
    peers: GrpcClients,
    limit: Duration,
}

impl BoundedKick {
    pub(crate) fn new(inner: Box<dyn Shared>, peers: GrpcClients, limit: Duration) -> Self {
        Self {
            inner,
            peers,
            limit,
        }
    }

    fn wrap(&self, entry: Box<dyn Entry>) -> Box<dyn Entry> {
        Box::new(BoundedEntry {
            inner: entry,
            peers: self.peers.clone(),
            limit: self.limit,
        })
    }
}

/// Whether every peer's breaker is open: no peer can answer a kick.
fn all_down(peers: &GrpcClients) -> bool {
    peers
        .values()
        .all(|(_, client)| client.circuit_breaker_is_open())
}

/// One client id's entry of the registry, with its kick bounded.
struct BoundedEntry {
    inner: Box<dyn Entry>,
    peers: GrpcClients,
    limit: Duration,
}

#[async_trait]
impl Entry for BoundedEntry {
    async fn try_lock(&self) -> Result<Box<dyn Entry>> {
        Ok(Box::new(BoundedEntry {
            inner: self.inner.try_lock().await?,
            peers: self.peers.clone(),
            limit: self.limit,
        }))
    }

    async fn kick(
        &mut self,
        clean_start: bool,
        clear_subscriptions: bool,
        is_admin: IsAdmin,
    ) -> Result<OfflineSession> {
        let id = self.inner.id();
        let peers = self.peers.clone();
        let peers_down = async move {
            let mut check = tokio::time::interval(DOWN_CHECK);
            while !all_down(&peers) {
                check.tick().await;
            }
        };
        tokio::select! {
            kicked = self.inner.kick(clean_start, clear_subscriptions, is_admin) => kicked,
            _ = peers_down => {
                tracing::debug!(client = %id.client_id, "every cluster peer is down: no kick");
                Ok(OfflineSession::NotExist)
            }
            _ = tokio::time::sleep(self.limit) => {
                tracing::debug!(client = %id.client_id, limit = ?self.limit,
                    "no cluster peer answered the kick in time: going on");
                Ok(OfflineSession::NotExist)
            }
        }
    }

    fn id(&self) -> Id {
        self.inner.id()
    }

    fn id_same(&self) -> Option<bool> {
        self.inner.id_same()
    }

    async fn set(&mut self, session: Session, tx: Tx) -> Result<()> {
        self.inner.set(session, tx).await
    }

    async fn remove(&mut self) -> Result<Option<(Session, Tx)>> {
        self.inner.remove().await
    }

    async fn remove_with(&mut self, id: &Id) -> Result<Option<(Session, Tx)>> {
        self.inner.remove_with(id).await
    }

    async fn online(&self) -> bool {
        self.inner.online().await
    }

    async fn is_connected(&self) -> bool {
        self.inner.is_connected().await
    }

    fn session(&self) -> Option<Session> {
        self.inner.session()
    }

    fn exist(&self) -> bool {
        self.inner.exist()
    }

    fn tx(&self) -> Option<Tx> {
        self.inner.tx()
    }

    async fn subscribe(&self, subscribe: &Subscribe) -> Result<SubscribeReturn> {
        self.inner.subscribe(subscribe).await
    }

    async fn unsubscribe(&self, unsubscribe: &Unsubscribe) -> Result<bool> {
        self.inner.unsubscribe(unsubscribe).await
    }

    async fn publish(
        &self,
        from: From,
        p: Publish,
    ) -> std::result::Result<(), (From, Publish, Reason)> {
        self.inner.publish(from, p).await
    }

    async fn subscriptions(&self) -> Option<Vec<SubsSearchResult>> {
        self.inner.subscriptions().await
    }
}

/// What a forward returns when some deliveries were dropped.
type Dropped<T> = (T, Vec<(To, From, Publish, Reason)>);

#[async_trait]
impl Shared for BoundedKick {
    fn entry(&self, id: Id) -> Box<dyn Entry> {
        self.wrap(self.inner.entry(id))
    }

    fn iter(&self) -> Box<dyn Iterator<Item = Box<dyn Entry>> + Sync + Send + '_> {
        Box::new(self.inner.iter().map(|entry| self.wrap(entry)))
    }

    fn exist(&self, client_id: &str) -> bool {
        self.inner.exist(client_id)
    }

    async fn forwards(
        &self,
        msg_id: Option<MsgID>,
        from: From,
        publish: Publish,
    ) -> std::result::Result<ForwardedCount, Dropped<ForwardedCount>> {
        self.inner.forwards(msg_id, from, publish).await
    }

    async fn forwards_and_get_shareds(
        &self,
        from: From,
        publish: Publish,
    ) -> std::result::Result<(SubRelationsMap, ForwardedRecipients), Dropped<ForwardedRecipients>>
    {
        self.inner.forwards_and_get_shareds(from, publish).await
    }

    async fn forwards_to(
        &self,
        from: From,
        publish: &Publish,
        relations: SubRelations,
        msg_id: Option<MsgID>,
    ) -> std::result::Result<ForwardedRecipients, Dropped<ForwardedRecipients>> {
        self.inner
            .forwards_to(from, publish, relations, msg_id)
            .await
    }

    fn random_session(&self) -> Option<Session> {
        self.inner.random_session()
    }

    async fn session_status(&self, client_id: &str) -> Option<SessionStatus> {
        self.inner.session_status(client_id).await
    }

    async fn client_states_count(&self) -> usize {
        self.inner.client_states_count().await
    }

    fn sessions_count(&self) -> usize {
        self.inner.sessions_count()
    }

    async fn query_subscriptions(&self, q: &SubsSearchParams) -> Vec<SubsSearchResult> {
        self.inner.query_subscriptions(q).await
    }

    async fn subscriptions_count(&self) -> usize {
        self.inner.subscriptions_count().await
    }

    fn get_grpc_clients(&self) -> GrpcClients {
        self.inner.get_grpc_clients()
    }

    fn grpc_enable(&self) -> bool {
        self.inner.grpc_enable()
    }

    fn node_name(&self, id: NodeId) -> String {
        self.inner.node_name(id)
    }

    async fn check_health(&self) -> Result<HealthInfo> {
        self.inner.check_health().await
    }

    async fn health_status(&self) -> Result<NodeHealthStatus> {
        self.inner.health_status().await
    }

    fn operation_is_busy(&self) -> bool {
        self.inner.operation_is_busy()
    }

    async fn message_load(
        &self,
        client_id: &str,
        topic_filter: &str,
        group: Option<&SharedGroup>,
    ) -> Result<Vec<(MsgID, From, Publish)>> {
        self.inner
            .message_load(client_id, topic_filter, group)
            .await
    }

    async fn message_load_with(
        &self,
        client_id: &str,
        topic_filter: &str,
        group: Option<&SharedGroup>,
        cb: Arc<dyn MessageLoadCallback>,
    ) -> Result<()> {
        self.inner
            .message_load_with(client_id, topic_filter, group, cb)
            .await
    }

    async fn retain_load_with(
        &self,
        topic_filter: &TopicFilter,
        cb: Arc<dyn RetainLoadCallback>,
    ) -> Result<Vec<(NodeId, MsgID)>> {
        self.inner.retain_load_with(topic_filter, cb).await
    }

    async fn retain_set_broadcast(
        &self,
        topic: &TopicName,
        retain: &Retain,
        expiry_interval: Option<Duration>,
    ) -> Result<()> {
        self.inner
            .retain_set_broadcast(topic, retain, expiry_interval)
            .await
    }

    async fn message_mark_forwarded(
        &self,
        from_node_id: NodeId,
        msg_id: MsgID,
        recipients: ForwardedRecipients,
    ) -> Result<()> {
        self.inner
            .message_mark_forwarded(from_node_id, msg_id, recipients)
            .await
    }
}
