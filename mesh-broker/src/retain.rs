//! In-memory store of retained messages, bounded in count.
//!
//! rmqtt's own in-memory store reports itself disabled (retained messages are left to
//! a plugin), so the broker installs this wrapper, which enables it.

use std::time::Duration;

use async_trait::async_trait;
use rmqtt::Result;
use rmqtt::retain::{DefaultRetainStorage, RetainStorage};
use rmqtt::types::{Retain, TopicFilter, TopicName};

/// Retained messages kept in memory, at most `max` of them.
pub(crate) struct MemoryRetainStorage {
    inner: DefaultRetainStorage,
    max: usize,
}

impl MemoryRetainStorage {
    /// An empty store that keeps at most `max` retained messages.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            inner: DefaultRetainStorage::new(),
            max,
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

    async fn get(&self, topic_filter: &TopicFilter) -> Result<Vec<(TopicName, Retain)>> {
        self.inner.get_message(topic_filter).await
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
