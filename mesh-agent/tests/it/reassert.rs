//! Signed cards and re-assertion: an instance signs the card it publishes, and puts its card
//! and its presence back when a plain MQTT client forges or erases them; instances of one
//! agent never set each other off.

use crate::support::*;
use mesh_agent::{AgentConfig, RunningAgent};
use mesh_core::bus::{Bus, BusMessage, QoS, Subscription};
use mesh_core::card_signing::{self, SigningKey, TrustedKeys};
use mesh_core::registry::{Presence, PresenceStatus};
use serde_json::{Value, json};

/// An echo instance signing with `key` (unsigned without one).
async fn echo(mesh: &BusMesh, key: Option<&SigningKey>) -> RunningAgent {
    let config = AgentConfig {
        signing_key: key.cloned(),
        ..mesh.config()
    };
    mesh.run_with(mesh_example_agents::echo::agent(), config)
        .await
}

/// The next message on `subscription`, within [`WAIT`].
async fn next(subscription: &mut Subscription) -> BusMessage {
    tokio::time::timeout(WAIT, subscription.recv())
        .await
        .expect("a message in time")
        .expect("the subscription is open")
}

/// Reads the card topic until a card that `check` accepts arrives (the agent's re-assertion),
/// skipping what the forger published itself.
async fn until_card(subscription: &mut Subscription, check: impl Fn(&Value) -> bool) -> Value {
    loop {
        let message = next(subscription).await;
        if let Ok(card) = serde_json::from_slice::<Value>(&message.payload)
            && check(&card)
        {
            return card;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_erased_card_is_put_back_signed() {
    let mesh = BusMesh::start().await;
    let key = SigningKey::generate().unwrap();
    let own_key = TrustedKeys::of(&[&key]);
    let agent = echo(&mesh, Some(&key)).await;
    let forger = Bus::connect(mesh.broker.bus_config()).await.unwrap();
    let topic = mesh.topics.agent_card("echo").unwrap();
    let mut cards = forger.subscribe(&topic, QoS::AtLeastOnce).await.unwrap();
    let signed = |card: &Value| card_signing::verify_card(&own_key, card).is_ok();
    let published = until_card(&mut cards, signed).await;
    assert_eq!(published["name"], "echo");
    assert_eq!(
        card_signing::verify_card(&own_key, &published),
        Ok(key.kid().to_owned()),
        "the published card carries the agent's signature"
    );

    let mut unsigned = published.clone();
    unsigned.as_object_mut().unwrap().remove("signatures");
    let mut untrusted = published.clone();
    untrusted["description"] = json!("forged");
    card_signing::sign_card(&SigningKey::generate().unwrap(), &mut untrusted, None).unwrap();
    let mut renamed = published.clone();
    renamed["name"] = json!("impostor");
    for forged in [
        serde_json::to_vec(&unsigned).unwrap(),
        serde_json::to_vec(&untrusted).unwrap(),
        serde_json::to_vec(&renamed).unwrap(),
        b"not a card".to_vec(),
        Vec::new(),
    ] {
        forger
            .publish(&topic, forged.clone(), QoS::AtLeastOnce, true)
            .await
            .unwrap();
        let back = until_card(&mut cards, signed).await;
        assert_eq!(back["description"], published["description"]);
    }
    agent.shutdown().await;
    forger
        .publish(&topic, Vec::new(), QoS::AtLeastOnce, true)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_offline_or_erased_presence_is_put_back() {
    let mesh = BusMesh::start().await;
    let agent = echo(&mesh, None).await;
    let forger = Bus::connect(mesh.broker.bus_config()).await.unwrap();
    let topic = mesh.topics.presence("echo", agent.instance_id()).unwrap();
    let mut presence = forger.subscribe(&topic, QoS::AtLeastOnce).await.unwrap();
    let offline = json!({"status": "offline", "agent": "echo", "instance": agent.instance_id(),
                         "reason": "forged"});
    for forged in [serde_json::to_vec(&offline).unwrap(), Vec::new()] {
        let mut events = mesh.registry.subscribe();
        forger
            .publish(&topic, forged, QoS::AtLeastOnce, true)
            .await
            .unwrap();
        // The registry believes it for a moment (the instance goes offline)...
        tokio::time::timeout(WAIT, async {
            while !matches!(events.recv().await,
                Ok(mesh_core::registry::RegistryEvent::InstanceOffline { ref instance, .. })
                    if instance == agent.instance_id())
            {}
        })
        .await
        .expect("the forged presence reaches the registry");
        // ...until the instance says it is online again.
        assert!(mesh.registry.wait_online("echo", WAIT).await);
        loop {
            let message = next(&mut presence).await;
            if let Ok(p) = serde_json::from_slice::<Presence>(&message.payload)
                && p.status == PresenceStatus::Online
            {
                break;
            }
        }
    }
    agent.shutdown().await;
}

/// Two instances with the same card (signed with one key, or unsigned) publish it at start
/// and then leave it alone: over three heartbeats of one of them, nobody republishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_of_one_agent_do_not_set_each_other_off() {
    let key = SigningKey::generate().unwrap();
    for signing in [Some(&key), None] {
        let mesh = BusMesh::start().await;
        let first = echo(&mesh, signing).await;
        let second = echo(&mesh, signing).await;
        let watcher = Bus::connect(mesh.broker.bus_config()).await.unwrap();
        let card_topic = mesh.topics.agent_card("echo").unwrap();
        let heartbeat_topic = mesh.topics.presence("echo", first.instance_id()).unwrap();
        let mut cards = watcher
            .subscribe(&card_topic, QoS::AtLeastOnce)
            .await
            .unwrap();
        let mut heartbeats = watcher
            .subscribe(&heartbeat_topic, QoS::AtLeastOnce)
            .await
            .unwrap();
        let retained = next(&mut cards).await;
        assert!(retained.retain, "the retained card comes first");
        let mut beats = 0;
        while beats < 3 {
            if !next(&mut heartbeats).await.retain {
                beats += 1;
            }
        }
        assert_eq!(
            cards.try_recv().map(|m| m.payload),
            None,
            "no card was republished ({signing:?})"
        );
        first.shutdown().await;
        second.shutdown().await;
        watcher
            .publish(&card_topic, Vec::new(), QoS::AtLeastOnce, true)
            .await
            .unwrap();
    }
}
