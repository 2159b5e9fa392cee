//! The instance's view of the rest of the mesh (every agent's card and presence, a
//! [`Registry`]), started the first time a handler looks at its peers, not when the instance
//! starts.
//!
//! A registry subscribes to every card and every presence heartbeat of the namespace: an
//! instance that holds one pays for every other agent, so a mesh whose every agent held one
//! would cost the broker and the agents the square of its size (1,000 echo agents: a million
//! retained cards at start, 200,000 heartbeats a second). Most agents never call a peer;
//! those that do start theirs on their first call (which waits until the retained cards and
//! presences are loaded) and keep it for the instance's life.

use std::sync::Arc;
use std::time::Duration;

use mesh_core::bus::{Bus, BusError};
use mesh_core::card_signing::TrustedKeys;
use mesh_core::registry::Registry;
use mesh_core::requester::Requester;
use mesh_core::topic::Topics;
use tokio::sync::OnceCell;

/// The instance's registry of its peers, once one is asked for.
#[derive(Clone)]
pub(crate) struct PeerDirectory {
    inner: Arc<Inner>,
}

struct Inner {
    registry: OnceCell<Registry>,
    bus: Bus,
    topics: Topics,
    owner: String,
    trusted: Option<TrustedKeys>,
    requester: Requester,
    /// How long the first look waits for the retained cards and presences.
    load_wait: Duration,
}

impl PeerDirectory {
    /// A directory for the instance of `owner` on `bus`; nothing is subscribed yet.
    pub(crate) fn new(
        bus: Bus,
        topics: Topics,
        owner: &str,
        trusted: Option<TrustedKeys>,
        requester: Requester,
        load_wait: Duration,
    ) -> PeerDirectory {
        PeerDirectory {
            inner: Arc::new(Inner {
                registry: OnceCell::new(),
                bus,
                topics,
                owner: owner.to_owned(),
                trusted,
                requester,
                load_wait,
            }),
        }
    }

    /// The registry, started and loaded on the first call (concurrent first calls share one
    /// start; a failed start is tried again by the next call).
    pub(crate) async fn registry(&self) -> Result<&Registry, BusError> {
        let inner = &self.inner;
        inner
            .registry
            .get_or_try_init(|| async {
                let registry = Registry::start_with(
                    &inner.bus,
                    &inner.topics,
                    &inner.owner,
                    inner.trusted.clone(),
                )
                .await?;
                // A peer that goes offline fails the calls waiting for it.
                inner.requester.watch_registry(&registry);
                if !registry.wait_loaded(inner.load_wait).await {
                    tracing::warn!(agent = %inner.owner, wait = ?inner.load_wait,
                        "the mesh's cards were not all loaded in time: peers may look offline");
                }
                Ok(registry)
            })
            .await
    }
}
