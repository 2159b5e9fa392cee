//! The live view of the mesh: which agents exist, their cards, their running instances.
//!
//! A [`Registry`] subscribes to the retained card topics and presence topics of a namespace
//! (docs/protocol.md, section 7). A newcomer sees every live agent at once from the retained
//! messages, without waiting for a heartbeat; [`Registry::wait_loaded`] returns once the
//! retained state has arrived (a marker the registry publishes to itself after subscribing,
//! on `<ns>/a2a/v1/discovery/presence/_registry/<owner>`, which the broker delivers after the
//! retained messages; the owner is the gateway's or agent's name, so that a broker ACL can
//! let each account write its own marker topic only). Instances whose presence says
//! `offline` (a graceful shutdown, or the last will the broker publishes for a crashed one) are
//! removed at once, and an instance whose heartbeat stays silent for three intervals expires.
//! Every change is also a [`RegistryEvent`] on a broadcast stream. A retained "offline" that
//! arrives when the registry subscribes is the last will of an instance that crashed earlier:
//! the registry clears it, so that crashes leave no retained messages behind.
//!
//! **Signed cards.** A registry started with a trust store ([`Registry::start_with`]) keeps
//! only the cards that verify ([`card_signing::verify_card`]) and name the agent of their
//! topic, and reads each from its signed members only. Any other card is refused: the agent
//! keeps no card ([`CardTrust::Refused`] says why), the refusal is logged once per card
//! version (the reason and the key id, never a key) and counted
//! ([`Registry::cards_refused`]). Without a trust store every readable card is kept, signed
//! or not ([`CardTrust::Unchecked`]).

use crate::bus::{Bus, BusError, BusMessage, QoS};
use crate::card_signing::{self, TrustedKeys, VerifyError};
use crate::codec::card;
use crate::model::AgentCard;
use crate::sync::RwLockExt;
use crate::topic::{REGISTRY_MARKER_AGENT, TopicKind, Topics};
use foldhash::HashMap;
use serde::{Deserialize, Serialize};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

/// How often the registry looks for silent instances.
const SWEEP: Duration = Duration::from_millis(500);

/// How many heartbeat intervals of silence expire an instance.
const EXPIRY_HEARTBEATS: u32 = 3;

/// The presence message an instance publishes (retained) about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Presence {
    /// `"online"` or `"offline"`.
    pub status: PresenceStatus,
    /// The agent's name.
    pub agent: String,
    /// The instance's id.
    pub instance: String,
    /// How often the instance republishes its presence, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_ms: Option<u64>,
    /// When the instance started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Why it went offline, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Online or offline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PresenceStatus {
    /// The instance runs.
    Online,
    /// The instance stopped, or the broker published its last will.
    Offline,
}

/// A change in the mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryEvent {
    /// An agent's card arrived or changed.
    CardChanged {
        /// The agent.
        agent: String,
    },
    /// An instance announced itself online.
    InstanceOnline {
        /// The agent.
        agent: String,
        /// The instance.
        instance: String,
    },
    /// An instance went offline (announced, last will, or heartbeat expiry).
    InstanceOffline {
        /// The agent.
        agent: String,
        /// The instance.
        instance: String,
    },
}

/// What a registry with a trust store made of an agent's card.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CardTrust {
    /// No trust store, or no card yet: nothing was checked.
    #[default]
    Unchecked,
    /// The card verified with the trusted key `kid`.
    Verified {
        /// The key that signed it.
        kid: String,
    },
    /// The card was refused: the agent has no card.
    Refused {
        /// One of [`CARD_REFUSALS`].
        reason: &'static str,
        /// The key id the card's signature named, when it named one.
        kid: Option<String>,
    },
}

/// Why a registry with a trust store refuses a card, as [`Registry::cards_refused`] counts
/// them: the [`VerifyError`] reasons, and `wrong_name` (a card whose `name` is not the agent
/// of its topic).
pub const CARD_REFUSALS: [&str; 5] = [
    "unsigned",
    "unknown_kid",
    "bad_signature",
    "malformed",
    "wrong_name",
];

/// One agent as the registry sees it.
#[derive(Debug, Clone)]
pub struct AgentView {
    /// The agent's name (its topic segment).
    pub name: String,
    /// Its card, once one was published (and, with a trust store, verified).
    pub card: Option<AgentCard>,
    /// What the trust store made of its card.
    pub trust: CardTrust,
    /// The ids of its live instances.
    pub instances: Vec<String>,
    /// When any instance of it was last heard from.
    pub last_seen: Option<SystemTime>,
}

impl AgentView {
    /// An agent is online while any of its instances is.
    pub fn online(&self) -> bool {
        !self.instances.is_empty()
    }
}

#[derive(Default)]
struct AgentEntry {
    card: Option<AgentCard>,
    trust: CardTrust,
    /// A digest of the last card refused, so that each version is logged and counted once.
    refused: Option<u64>,
    instances: HashMap<String, InstanceEntry>,
    last_seen: Option<SystemTime>,
}

struct InstanceEntry {
    heard: Instant,
    heartbeat: Option<Duration>,
}

struct RegistryState {
    agents: RwLock<HashMap<String, AgentEntry>>,
    events: broadcast::Sender<RegistryEvent>,
    loaded: watch::Sender<bool>,
    /// The keys cards must be signed with; `None`: cards are not checked.
    trusted: Option<TrustedKeys>,
    /// Refused card versions, by [`CARD_REFUSALS`] index.
    refused: [AtomicU64; CARD_REFUSALS.len()],
}

/// The live view of the agents of one namespace. Cheap to clone.
#[derive(Clone)]
pub struct Registry {
    shared: Arc<RegistryState>,
}

impl Registry {
    /// Subscribes to the namespace's cards and presence and starts keeping the view. `owner`
    /// (the gateway's or agent's name) names the topic of its load marker.
    pub async fn start(bus: &Bus, topics: &Topics, owner: &str) -> Result<Registry, BusError> {
        Registry::start_with(bus, topics, owner, None).await
    }

    /// [`Registry::start`], keeping only the cards signed by a key of `trusted` when it is
    /// given (see the module docs).
    pub async fn start_with(
        bus: &Bus,
        topics: &Topics,
        owner: &str,
        trusted: Option<TrustedKeys>,
    ) -> Result<Registry, BusError> {
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(RegistryState {
            agents: RwLock::default(),
            events,
            loaded: watch::channel(false).0,
            trusted,
            refused: Default::default(),
        });
        // One subscription for cards and presence: their retained messages and the load
        // marker then arrive on one channel in the broker's order, and a newcomer among
        // more retained messages than a subscription buffers cannot stall on a second
        // SUBACK. A broker sends the retained messages of a subscription before anything
        // published after its SUBACK, so the marker published now arrives after them.
        let mut discovery = bus
            .subscribe(&topics.discovery_filter(), QoS::AtLeastOnce)
            .await?;
        // Other registries of the same owner publish their markers on the same topic: each
        // knows its own by the random payload.
        let marker = format!("sync-{}", uuid::Uuid::new_v4().simple());
        let marker_topic = topics
            .registry_marker(owner)
            .map_err(|e| BusError::InvalidConfig(e.to_string()))?;
        bus.publish(
            &marker_topic,
            marker.clone().into_bytes(),
            QoS::AtLeastOnce,
            false,
        )
        .await?;

        let registry = Registry { shared };
        let worker = registry.clone();
        let topics = topics.clone();
        let janitor = bus.clone();
        tokio::spawn(async move {
            let mut sweep = tokio::time::interval(SWEEP);
            sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_sweep = Instant::now();
            let handle = |message: BusMessage| {
                if message.topic == marker_topic && message.payload == marker.as_bytes() {
                    worker.shared.loaded.send_replace(true);
                    return;
                }
                let stale = match topics.parse_own(&message.topic) {
                    Some(TopicKind::AgentCard { agent, .. }) => {
                        worker.on_card(agent, &message.payload);
                        false
                    }
                    Some(TopicKind::Presence {
                        agent, instance, ..
                    }) => worker.on_presence(agent, instance, &message),
                    _ => false,
                };
                if stale {
                    clear_stale_presence(&janitor, message.topic);
                }
            };
            loop {
                tokio::select! {
                    message = discovery.recv() => match message {
                        Some(message) => handle(message),
                        None => break,
                    },
                    _ = sweep.tick() => {
                        // Heartbeats that wait in the buffer are heard before anyone expires.
                        while let Some(message) = discovery.try_recv() {
                            handle(message);
                        }
                        let now = Instant::now();
                        let stalled = now.duration_since(last_sweep).saturating_sub(SWEEP);
                        last_sweep = now;
                        worker.expire_silent(now, stalled);
                    }
                }
            }
        });
        Ok(registry)
    }

    /// Waits until the retained state has arrived; false if `timeout` passes first.
    pub async fn wait_loaded(&self, timeout: Duration) -> bool {
        let mut loaded = self.shared.loaded.subscribe();
        tokio::time::timeout(timeout, loaded.wait_for(|loaded| *loaded))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// True once the retained state has arrived.
    pub fn is_loaded(&self) -> bool {
        *self.shared.loaded.borrow()
    }

    /// Every known agent (with a card, a refused card, or a live instance), sorted by name.
    pub fn agents(&self) -> Vec<AgentView> {
        let agents = self.read();
        let mut views: Vec<AgentView> = agents
            .iter()
            .filter(|(_, entry)| {
                entry.card.is_some()
                    || !entry.instances.is_empty()
                    || matches!(entry.trust, CardTrust::Refused { .. })
            })
            .map(|(name, entry)| view(name, entry))
            .collect();
        views.sort_by(|a, b| a.name.cmp(&b.name));
        views
    }

    /// One agent, if the registry knows it.
    pub fn agent(&self, name: &str) -> Option<AgentView> {
        self.read().get(name).map(|entry| view(name, entry))
    }

    /// True while any instance of the agent is online.
    pub fn is_online(&self, name: &str) -> bool {
        self.read()
            .get(name)
            .is_some_and(|entry| !entry.instances.is_empty())
    }

    /// The stream of changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<RegistryEvent> {
        self.shared.events.subscribe()
    }

    /// True when cards are checked against a trust store.
    pub fn verifies_cards(&self) -> bool {
        self.shared.trusted.is_some()
    }

    /// How many card versions were refused, by reason ([`CARD_REFUSALS`]), since the start.
    pub fn cards_refused(&self) -> [(&'static str, u64); CARD_REFUSALS.len()] {
        std::array::from_fn(|i| (CARD_REFUSALS[i], self.shared.refused[i].load(Relaxed)))
    }

    /// Waits until the agent is online; false if `timeout` passes first.
    pub async fn wait_online(&self, name: &str, timeout: Duration) -> bool {
        self.wait_for(timeout, || self.is_online(name)).await
    }

    /// Waits until the agent has exactly `count` live instances; false if `timeout` passes.
    pub async fn wait_for_instances(&self, name: &str, count: usize, timeout: Duration) -> bool {
        self.wait_for(timeout, || {
            self.read()
                .get(name)
                .is_some_and(|entry| entry.instances.len() == count)
        })
        .await
    }

    /// Waits until the agent is offline (no live instance); false if `timeout` passes first.
    pub async fn wait_offline(&self, name: &str, timeout: Duration) -> bool {
        self.wait_for(timeout, || !self.is_online(name)).await
    }

    async fn wait_for(&self, timeout: Duration, condition: impl Fn() -> bool) -> bool {
        let mut events = self.subscribe();
        let deadline = Instant::now() + timeout;
        loop {
            if condition() {
                return true;
            }
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Err(_) => return condition(),
                Ok(Err(broadcast::error::RecvError::Closed)) => return condition(),
                Ok(_) => {}
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, AgentEntry>> {
        self.shared.agents.read_locked()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, AgentEntry>> {
        self.shared.agents.write_locked()
    }

    fn emit(&self, event: RegistryEvent) {
        let _ = self.shared.events.send(event);
    }

    /// Applies a card (or its clearing, an empty payload) published for `agent`.
    fn on_card(&self, agent: &str, payload: &[u8]) {
        let agent = agent.to_owned();
        if payload.is_empty() {
            // A cleared card: the agent is gone for good.
            if let Some(entry) = self.write().get_mut(&agent) {
                entry.card = None;
                entry.trust = CardTrust::Unchecked;
            }
            self.emit(RegistryEvent::CardChanged { agent });
            return;
        }
        let value: serde_json::Value = match serde_json::from_slice(payload) {
            Ok(value) => value,
            Err(error) if self.shared.trusted.is_some() => {
                let refusal = VerifyError::Malformed(format!("not JSON: {error}"));
                return self.refuse(agent, payload, refusal.reason(), None, &refusal);
            }
            Err(error) => {
                tracing::warn!(%agent, %error, "unreadable agent card ignored");
                return;
            }
        };
        let (value, trust) = match &self.shared.trusted {
            None => (value, CardTrust::Unchecked),
            Some(trusted) => match card_signing::verify_card(trusted, &value) {
                Ok(kid)
                    if value.get("name").and_then(serde_json::Value::as_str) != Some(&agent) =>
                {
                    let error = "the card's name is not the agent of its topic";
                    return self.refuse(agent, payload, "wrong_name", Some(kid), &error);
                }
                Ok(kid) => (
                    card_signing::signed_members(&value),
                    CardTrust::Verified { kid },
                ),
                Err(refusal) => {
                    let kid = refusal.kid().map(str::to_owned);
                    return self.refuse(agent, payload, refusal.reason(), kid, &refusal);
                }
            },
        };
        match card::read_card(value) {
            Ok(card) => {
                {
                    let mut agents = self.write();
                    let entry = agents.entry(agent.clone()).or_default();
                    entry.card = Some(card);
                    entry.trust = trust;
                    entry.refused = None;
                }
                self.emit(RegistryEvent::CardChanged { agent });
            }
            Err(error) if self.shared.trusted.is_some() => {
                let refusal =
                    VerifyError::Malformed(format!("not an agent card: {}", error.message));
                self.refuse(agent, payload, refusal.reason(), None, &refusal);
            }
            Err(error) => tracing::warn!(%agent, %error, "unreadable agent card ignored"),
        }
    }

    /// Refuses a card published for `agent`: the agent keeps no card; each version is
    /// logged and counted once.
    fn refuse(
        &self,
        agent: String,
        payload: &[u8],
        reason: &'static str,
        kid: Option<String>,
        why: &dyn std::fmt::Display,
    ) {
        let digest = {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            payload.hash(&mut hasher);
            hasher.finish()
        };
        let first_time = {
            let mut agents = self.write();
            let entry = agents.entry(agent.clone()).or_default();
            entry.card = None;
            entry.trust = CardTrust::Refused {
                reason,
                kid: kid.clone(),
            };
            entry.refused.replace(digest) != Some(digest)
        };
        if first_time {
            if let Some(slot) = CARD_REFUSALS.iter().position(|r| *r == reason) {
                self.shared.refused[slot].fetch_add(1, Relaxed);
            }
            tracing::warn!(%agent, reason, kid = ?kid, %why, "agent card refused: it is not served");
        }
        self.emit(RegistryEvent::CardChanged { agent });
    }

    /// Applies a presence message of `agent`'s `instance`; true when it is a stale
    /// retained "offline" to clear.
    fn on_presence(&self, agent: &str, instance: &str, message: &BusMessage) -> bool {
        if agent == REGISTRY_MARKER_AGENT {
            return false; // another registry's load marker
        }
        let (agent, instance) = (agent.to_owned(), instance.to_owned());
        let presence: Option<Presence> = if message.payload.is_empty() {
            None // a cleared presence: the instance stopped gracefully
        } else {
            match serde_json::from_slice(&message.payload) {
                Ok(presence) => Some(presence),
                Err(error) => {
                    tracing::warn!(%agent, %instance, %error, "unreadable presence ignored");
                    return false;
                }
            }
        };
        match presence {
            Some(Presence {
                status: PresenceStatus::Online,
                heartbeat_ms,
                ..
            }) => {
                let is_new = {
                    let mut agents = self.write();
                    let entry = agents.entry(agent.clone()).or_default();
                    entry.last_seen = Some(SystemTime::now());
                    entry
                        .instances
                        .insert(
                            instance.clone(),
                            InstanceEntry {
                                heard: Instant::now(),
                                heartbeat: heartbeat_ms.map(Duration::from_millis),
                            },
                        )
                        .is_none()
                };
                if is_new {
                    self.emit(RegistryEvent::InstanceOnline { agent, instance });
                }
                false
            }
            Some(Presence {
                status: PresenceStatus::Offline,
                ..
            }) => {
                if self.remove_instance(&agent, &instance) {
                    tracing::info!(%agent, %instance, retained = message.retain, "instance says offline");
                }
                message.retain
            }
            None => {
                if self.remove_instance(&agent, &instance) {
                    tracing::info!(%agent, %instance, "instance stopped (presence cleared)");
                }
                false
            }
        }
    }

    /// Takes `instance` of `agent` off; true if it was on.
    fn remove_instance(&self, agent: &str, instance: &str) -> bool {
        let removed = self
            .write()
            .get_mut(agent)
            .and_then(|entry| entry.instances.remove(instance))
            .is_some();
        if removed {
            self.emit(RegistryEvent::InstanceOffline {
                agent: agent.to_owned(),
                instance: instance.to_owned(),
            });
        }
        removed
    }

    /// Expires the instances silent for [`EXPIRY_HEARTBEATS`] heartbeats. `stalled` is how
    /// much later than due this sweep runs: time in which this process did not run (a busy
    /// or suspended process) is not the instances' silence, so it is credited to them first
    /// (their heartbeats of that time may still be on their way in).
    fn expire_silent(&self, now: Instant, stalled: Duration) {
        if stalled > SWEEP {
            tracing::warn!(
                ?stalled,
                "the registry did not run for a while: instances get that time back"
            );
            for entry in self.write().values_mut() {
                for instance in entry.instances.values_mut() {
                    instance.heard = (instance.heard + stalled).min(now);
                }
            }
        }
        let expired: Vec<(String, String)> = self
            .read()
            .iter()
            .flat_map(|(agent, entry)| {
                entry.instances.iter().filter_map(move |(id, instance)| {
                    let heartbeat = instance.heartbeat?;
                    (now.duration_since(instance.heard) > heartbeat * EXPIRY_HEARTBEATS)
                        .then(|| (agent.clone(), id.clone()))
                })
            })
            .collect();
        for (agent, instance) in expired {
            tracing::info!(%agent, %instance, "instance silent for {EXPIRY_HEARTBEATS} heartbeats: offline");
            self.remove_instance(&agent, &instance);
        }
    }
}

fn view(name: &str, entry: &AgentEntry) -> AgentView {
    let mut instances: Vec<String> = entry.instances.keys().cloned().collect();
    instances.sort();
    AgentView {
        name: name.to_owned(),
        card: entry.card.clone(),
        trust: entry.trust.clone(),
        instances,
        last_seen: entry.last_seen,
    }
}

/// Clears a retained "offline": the last will of an instance that crashed before this
/// registry started, history. Left alone, every crash would leave a retained message behind
/// forever. Sent from a task of its own: the registry's task must keep draining its
/// subscription while the publish waits for room in the bus's request queue.
fn clear_stale_presence(bus: &Bus, topic: String) {
    let bus = bus.clone();
    tokio::spawn(async move {
        if let Err(error) = bus
            .publish(&topic, Vec::new(), QoS::AtLeastOnce, true)
            .await
        {
            tracing::debug!(%error, "stale presence not cleared");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_with(heard: Instant) -> Registry {
        let registry = Registry {
            shared: Arc::new(RegistryState {
                agents: RwLock::default(),
                events: broadcast::channel(16).0,
                loaded: watch::channel(true).0,
                trusted: None,
                refused: Default::default(),
            }),
        };
        let mut entry = AgentEntry::default();
        entry.instances.insert(
            "i".into(),
            InstanceEntry {
                heard,
                heartbeat: Some(Duration::from_secs(1)),
            },
        );
        registry.write().insert("a".into(), entry);
        registry
    }

    #[test]
    fn time_the_registry_did_not_run_is_not_an_instances_silence() {
        let now = Instant::now();
        let Some(ten_seconds_ago) = now.checked_sub(Duration::from_secs(10)) else {
            return; // a clock too young to go back (just after boot)
        };
        // Silent for 10 s of which the registry did not run for 9.5 s: still online.
        let registry = registry_with(ten_seconds_ago);
        registry.expire_silent(now, Duration::from_millis(9_500));
        assert!(registry.is_online("a"));
        // Silent for 10 s while it ran: offline.
        let registry = registry_with(ten_seconds_ago);
        registry.expire_silent(now, Duration::ZERO);
        assert!(!registry.is_online("a"));
    }
}
