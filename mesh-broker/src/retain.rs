//! Retained messages: an in-memory store bounded in count, and their delivery to a new
//! subscriber ahead of anything published after its SUBACK.
//!
//! rmqtt's own in-memory store reports itself disabled (retained messages are left to a
//! plugin), so the broker installs [`MemoryRetainStorage`], which enables it.
//!
//! rmqtt sends the retained messages of a new subscription from a task it spawns at
//! SUBSCRIBE, which may run only after the client got its SUBACK and published again.
//! A client that subscribes and then publishes a marker to itself, to learn when the
//! retained state has arrived (the mesh registry does), could then see the marker before
//! the retained messages, and a message retained in that instant could arrive twice. So
//! the broker delivers retained messages itself, from the `SessionSubscribed` hook, which
//! rmqtt awaits before it answers SUBACK: they are queued on the subscriber's session
//! ahead of anything published after the SUBACK, as Mosquitto does. The store's
//! [`RetainStorage::get`], which only that spawned task calls, answers none.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmqtt::Result;
use rmqtt::codec::v5::RetainHandling;
use rmqtt::hook::{Handler, HookResult, Parameter, ReturnType};
use rmqtt::retain::{DefaultRetainStorage, RetainStorage};
use rmqtt::session::Session;
use rmqtt::types::{Retain, Subscribe, TopicFilter, TopicName};

/// The session attribute that lists the filters a client subscribed to again with MQTT 5
/// "retain handling 1" (send retained messages only for a new subscription).
const RESUBSCRIBED_ATTR: &str = "mesh.retain.resubscribed";

/// Retained messages kept in memory, at most `max` of them.
pub(crate) struct MemoryRetainStorage {
    inner: Arc<DefaultRetainStorage>,
    max: usize,
}

impl MemoryRetainStorage {
    /// An empty store that keeps at most `max` retained messages.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            inner: Arc::new(DefaultRetainStorage::new()),
            max,
        }
    }

    /// The hook handler that delivers this store's messages to new subscriptions.
    pub(crate) fn delivery(&self) -> RetainedDelivery {
        RetainedDelivery {
            store: Arc::clone(&self.inner),
        }
    }

    /// Whether a retained message on `topic` may be stored without passing the limit.
    async fn has_room_for(&self, topic: &TopicName) -> Result<bool> {
        if self.count().await < self.max as isize {
            return Ok(true);
        }
        // Replacing an existing topic does not grow the store.
        if !self.inner.get_message(topic).await?.is_empty() {
            return Ok(true);
        }
        self.inner.remove_expired_messages().await;
        Ok(self.count().await < self.max as isize)
    }
}

#[async_trait]
impl RetainStorage for MemoryRetainStorage {
    fn enable(&self) -> bool {
        true
    }

    async fn set(&self, topic: &TopicName, retain: Retain, expiry: Option<Duration>) -> Result<()> {
        if !retain.publish.payload.is_empty() && !self.has_room_for(topic).await? {
            tracing::warn!(
                topic = %topic,
                max = self.max,
                "retained message store is full; message delivered but not retained"
            );
            return Ok(());
        }
        self.inner.set_with_timeout(topic, retain, expiry).await
    }

    /// None: [`RetainedDelivery`] sends retained messages to new subscriptions instead
    /// of the task rmqtt spawns, which is the only caller.
    async fn get(&self, _topic_filter: &TopicFilter) -> Result<Vec<(TopicName, Retain)>> {
        Ok(Vec::new())
    }

    async fn get_all_paginated(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<(Vec<(TopicName, Retain, Option<Duration>)>, bool)> {
        self.inner.get_all_paginated(offset, limit).await
    }

    async fn count(&self) -> isize {
        self.inner.count().await
    }

    async fn max(&self) -> isize {
        self.inner.max().await
    }
}

/// Hook handler (for `ClientSubscribe` and `SessionSubscribed`) that queues the
/// retained messages matching a new subscription on the subscriber's session before
/// rmqtt answers SUBACK.
pub(crate) struct RetainedDelivery {
    store: Arc<DefaultRetainStorage>,
}

impl RetainedDelivery {
    /// Before the subscription is made: notes a filter the session already holds when
    /// the client asked for retained messages on new subscriptions only.
    async fn before_subscribe(&self, session: &Session, sub: &Subscribe) {
        if sub.opts.retain_handling() != Some(RetainHandling::AtSubscribeNew) {
            return;
        }
        let existing = match session.subscriptions().await {
            Ok(subs) => subs.read().await.contains_key(&sub.topic_filter),
            Err(_) => false,
        };
        if !existing {
            return;
        }
        let mut attrs = session.extra_attrs.write().await;
        if let Some(filters) =
            attrs.get_default_mut(RESUBSCRIBED_ATTR.into(), HashSet::<TopicFilter>::new)
        {
            filters.insert(sub.topic_filter.clone());
        }
    }

    /// Once the subscription is made: queues the matching retained messages.
    async fn after_subscribe(&self, session: &Session, sub: &Subscribe) {
        let wanted = match sub.opts.retain_handling() {
            // MQTT 3.1.1 has no retain handling: always.
            None | Some(RetainHandling::AtSubscribe) => true,
            Some(RetainHandling::AtSubscribeNew) => !session
                .extra_attrs
                .write()
                .await
                .get_mut::<HashSet<TopicFilter>>(RESUBSCRIBED_ATTR)
                .is_some_and(|filters| filters.remove(&sub.topic_filter)),
            Some(RetainHandling::NoAtSubscribe) => false,
        };
        // MQTT 5, 4.8.2: a new shared subscription gets no retained messages.
        if !wanted || sub.opts.has_shared_group() {
            return;
        }
        let retained = match self.store.get_message(&sub.topic_filter).await {
            Ok(retained) => retained,
            Err(e) => {
                tracing::warn!(filter = %sub.topic_filter, error = %e, "retained messages not read");
                return;
            }
        };
        if retained.is_empty() {
            return;
        }
        let granted = sub.opts.qos();
        let entry = session.scx.extends.shared().await.entry(session.id.clone());
        for (topic, mut retain) in retained {
            let publish = &mut retain.publish;
            publish.dup = false;
            publish.retain = true;
            publish.qos = publish.qos.less_value(granted);
            publish.topic = topic;
            publish.packet_id = None;
            publish.create_time = Some(rmqtt::utils::timestamp_millis());
            if let Err((_, p, reason)) = entry.publish(retain.from, retain.publish).await {
                tracing::debug!(topic = %p.topic, %reason, "retained message not queued");
            }
        }
    }
}

#[async_trait]
impl Handler for RetainedDelivery {
    async fn hook(&self, param: &Parameter, acc: Option<HookResult>) -> ReturnType {
        match param {
            Parameter::ClientSubscribe(session, sub) => self.before_subscribe(session, sub).await,
            Parameter::SessionSubscribed(session, sub) => self.after_subscribe(session, sub).await,
            _ => {}
        }
        (true, acc)
    }
}
