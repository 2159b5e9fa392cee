//! An instance keeps its agent's retained card and its own retained presence as it published
//! them: when either is replaced by something else while the instance runs, it publishes its
//! own again.
//!
//! The instance subscribes to its card topic and its own presence topic (those two alone: its
//! registry of the mesh starts only when a handler looks at its peers). What it sees is
//! judged:
//!
//! - **the card** is fine when it is the instance's own publish (byte for byte), or, for an
//!   agent with a signing key, any card of the agent's name signed by that key (another
//!   instance's signature, or a newer version of the card), or, for an unsigned agent, a card
//!   with the same content (another instance of the same agent). It is *not* fine when it is
//!   erased (an empty retained payload), unreadable, names another agent, is not signed by
//!   the agent's key, or (unsigned) says something else;
//! - **the presence** is fine when it says this instance is online; not when it says offline,
//!   is erased or is anything else.
//!
//! Re-assertion is rate-limited per topic: at most once per heartbeat (the first one may
//! come at once). A verdict that is not fine while the limit holds waits for the end of the
//! interval, and is dropped when a fine message arrives meanwhile.
//! Its own re-publish comes back fine, so an instance never reacts to itself, and two
//! instances of one agent with the same card (or key) never trigger each other.

use mesh_core::bus::{Bus, BusError, QoS, Subscription};
use mesh_core::card_signing::{self, SigningKey, TrustedKeys};
use mesh_core::registry::{Presence, PresenceStatus};
use mesh_core::sync::MutexExt;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The card this instance publishes: the bytes, and their JSON for comparisons.
pub(crate) struct OwnCard {
    pub(crate) payload: Vec<u8>,
    value: Value,
}

impl OwnCard {
    /// The card to publish: the combined card, signed when there is a key.
    pub(crate) fn new(card: Value, key: Option<&SigningKey>) -> OwnCard {
        let mut value = card;
        if let Some(key) = key
            && let Err(error) = card_signing::sign_card(key, &mut value, None)
        {
            tracing::error!(%error, "the agent card could not be signed: published unsigned");
        }
        let payload = serde_json::to_vec(&value).unwrap_or_default();
        OwnCard { payload, value }
    }
}

/// What one instance guards.
pub(crate) struct Guarded {
    pub(crate) name: String,
    pub(crate) instance: String,
    pub(crate) card_topic: String,
    pub(crate) presence_topic: String,
    pub(crate) card: Arc<Mutex<OwnCard>>,
    pub(crate) online: Vec<u8>,
    /// The agent's own key as a trust store: cards signed by it are the agent's.
    pub(crate) own_key: Option<TrustedKeys>,
    /// The rate limit: at most one re-assertion per topic per interval.
    pub(crate) interval: Duration,
}

/// The watches, taken before the instance first publishes (so that every later message on
/// its topics is seen).
pub(crate) struct Watches {
    card: Subscription,
    presence: Subscription,
}

impl Watches {
    /// Subscribes to the two topics (their retained messages come first).
    pub(crate) async fn subscribe(
        bus: &Bus,
        card_topic: &str,
        presence_topic: &str,
    ) -> Result<Watches, BusError> {
        Ok(Watches {
            card: bus.subscribe(card_topic, QoS::AtLeastOnce).await?,
            presence: bus.subscribe(presence_topic, QoS::AtLeastOnce).await?,
        })
    }
}

/// One topic's state: whether what it holds needs re-asserting, and when that is allowed.
struct Topic {
    pending: Option<&'static str>,
    last_assert: Instant,
}

impl Topic {
    fn observe(&mut self, verdict: Result<(), &'static str>) {
        self.pending = verdict.err();
    }

    fn due(&self, interval: Duration) -> Option<Instant> {
        self.pending.map(|_| self.last_assert + interval)
    }
}

/// Watches until `stop`, re-asserting as the module docs say.
pub(crate) async fn run(guarded: Guarded, mut watches: Watches, bus: Bus, stop: CancellationToken) {
    // The first re-assertion may come at once (the instance's start is not counted).
    let now = Instant::now();
    let long_ago = now.checked_sub(guarded.interval).unwrap_or(now);
    let mut card = Topic {
        pending: None,
        last_assert: long_ago,
    };
    let mut presence = Topic {
        pending: None,
        last_assert: long_ago,
    };
    loop {
        let next_due = [card.due(guarded.interval), presence.due(guarded.interval)]
            .into_iter()
            .flatten()
            .min();
        tokio::select! {
            message = watches.card.recv() => {
                let Some(message) = message else { return };
                card.observe(guarded.judge_card(&message.payload));
            }
            message = watches.presence.recv() => {
                let Some(message) = message else { return };
                presence.observe(guarded.judge_presence(&message.payload));
            }
            _ = sleep_until(next_due) => {}
            _ = stop.cancelled() => return,
        }
        let now = Instant::now();
        if card.due(guarded.interval).is_some_and(|due| due <= now) {
            let payload = guarded.card.locked().payload.clone();
            guarded
                .reassert(&bus, &guarded.card_topic, "card", &mut card, payload)
                .await;
        }
        if presence.due(guarded.interval).is_some_and(|due| due <= now) {
            let payload = guarded.online.clone();
            guarded
                .reassert(
                    &bus,
                    &guarded.presence_topic,
                    "presence",
                    &mut presence,
                    payload,
                )
                .await;
        }
    }
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

impl Guarded {
    async fn reassert(
        &self,
        bus: &Bus,
        topic: &str,
        what: &str,
        state: &mut Topic,
        payload: Vec<u8>,
    ) {
        let why = state.pending.take().unwrap_or_default();
        state.last_assert = Instant::now();
        tracing::warn!(agent = %self.name, instance = %self.instance, %topic, why,
            "the retained {what} was replaced: publishing this instance's again");
        if let Err(error) = bus.publish(topic, payload, QoS::AtLeastOnce, true).await {
            tracing::warn!(agent = %self.name, %error, "could not re-assert the retained {what}");
        }
    }

    /// Whether the retained card is the agent's (see the module docs); why not, when not.
    fn judge_card(&self, payload: &[u8]) -> Result<(), &'static str> {
        let own = self.card.locked();
        if payload == own.payload.as_slice() {
            return Ok(());
        }
        if payload.is_empty() {
            return Err("erased");
        }
        let Ok(value) = serde_json::from_slice::<Value>(payload) else {
            return Err("unreadable");
        };
        if value.get("name").and_then(Value::as_str) != Some(self.name.as_str()) {
            return Err("names another agent");
        }
        match &self.own_key {
            Some(own_key) => card_signing::verify_card(own_key, &value)
                .map(drop)
                .map_err(|_| "not signed by this agent's key"),
            None if value == own.value => Ok(()),
            None => Err("differs from this instance's card"),
        }
    }

    /// Whether the retained presence says this instance is online.
    fn judge_presence(&self, payload: &[u8]) -> Result<(), &'static str> {
        if payload == self.online.as_slice() {
            return Ok(());
        }
        if payload.is_empty() {
            return Err("erased");
        }
        match serde_json::from_slice::<Presence>(payload) {
            Ok(p) if p.agent != self.name || p.instance != self.instance => {
                Err("names another instance")
            }
            Ok(p) if p.status == PresenceStatus::Online => Ok(()),
            Ok(_) => Err("says offline"),
            Err(_) => Err("unreadable"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn guarded(key: Option<&SigningKey>) -> Guarded {
        let card = json!({"name": "a", "description": "d", "version": "1",
                          "supportedInterfaces": [], "capabilities": {},
                          "defaultInputModes": [], "defaultOutputModes": [], "skills": []});
        let online =
            serde_json::to_vec(&json!({"status": "online", "agent": "a", "instance": "i"}))
                .unwrap();
        Guarded {
            name: "a".into(),
            instance: "i".into(),
            card_topic: "c".into(),
            presence_topic: "p".into(),
            card: Arc::new(Mutex::new(OwnCard::new(card, key))),
            online,
            own_key: key.map(|k| TrustedKeys::of(&[k])),
            interval: Duration::from_secs(1),
        }
    }

    #[test]
    fn an_unsigned_agent_accepts_its_own_card_in_any_member_order() {
        let g = guarded(None);
        let own = g.card.locked().payload.clone();
        assert_eq!(g.judge_card(&own), Ok(()));
        let value: Value = serde_json::from_slice(&own).unwrap();
        assert_eq!(
            g.judge_card(serde_json::to_string_pretty(&value).unwrap().as_bytes()),
            Ok(())
        );
        let mut other = value.clone();
        other["description"] = json!("forged");
        assert_eq!(
            g.judge_card(&serde_json::to_vec(&other).unwrap()),
            Err("differs from this instance's card")
        );
        other["name"] = json!("b");
        assert_eq!(
            g.judge_card(&serde_json::to_vec(&other).unwrap()),
            Err("names another agent")
        );
        assert_eq!(g.judge_card(b""), Err("erased"));
        assert_eq!(g.judge_card(b"{"), Err("unreadable"));
    }

    #[test]
    fn a_signed_agent_accepts_any_card_its_key_signed() {
        let key = SigningKey::generate().unwrap();
        let g = guarded(Some(&key));
        let own: Value = serde_json::from_slice(&g.card.locked().payload).unwrap();
        assert!(own.get("signatures").is_some());
        // Another instance: the same card, another signature.
        let mut again = own.clone();
        card_signing::sign_card(&key, &mut again, None).unwrap();
        assert_ne!(again, own);
        assert_eq!(g.judge_card(&serde_json::to_vec(&again).unwrap()), Ok(()));
        // A newer version signed by the key is the agent's too.
        again["version"] = json!("2");
        card_signing::sign_card(&key, &mut again, None).unwrap();
        assert_eq!(g.judge_card(&serde_json::to_vec(&again).unwrap()), Ok(()));
        // Unsigned, or signed by another key: forged.
        let mut forged = own.clone();
        forged.as_object_mut().unwrap().remove("signatures");
        assert_eq!(
            g.judge_card(&serde_json::to_vec(&forged).unwrap()),
            Err("not signed by this agent's key")
        );
        card_signing::sign_card(&SigningKey::generate().unwrap(), &mut forged, None).unwrap();
        assert_eq!(
            g.judge_card(&serde_json::to_vec(&forged).unwrap()),
            Err("not signed by this agent's key")
        );
    }

    #[test]
    fn the_presence_must_say_this_instance_is_online() {
        let g = guarded(None);
        assert_eq!(g.judge_presence(&g.online), Ok(()));
        let say = |v: Value| g.judge_presence(&serde_json::to_vec(&v).unwrap());
        assert_eq!(
            say(json!({"status": "online", "agent": "a", "instance": "i", "heartbeatMs": 5})),
            Ok(())
        );
        assert_eq!(
            say(json!({"status": "offline", "agent": "a", "instance": "i"})),
            Err("says offline")
        );
        assert_eq!(
            say(json!({"status": "online", "agent": "a", "instance": "j"})),
            Err("names another instance")
        );
        assert_eq!(g.judge_presence(b""), Err("erased"));
        assert_eq!(g.judge_presence(b"nope"), Err("unreadable"));
    }
}
