//! The bus across a broker restart: the broker process is stopped and started again on the
//! same port in the middle of the test; the state watch reports it, and every subscription
//! works again afterwards.

use std::time::Instant;

use crate::support::{connect, next, next_distinct, wait_state};
use bytes::Bytes;
use mesh_core::bus::{ConnectionState, QoS};
use mesh_core::topic::Topics;
use mesh_testkit::{TestBroker, fresh_namespace};

mesh_testkit::both_brokers!(every_subscription_works_again_after_the_broker_restarts);
async fn every_subscription_works_again_after_the_broker_restarts(mut broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let agent = connect(&broker.url()).await;
    let gateway = connect(&broker.url()).await;

    let mut requests = agent
        .subscribe(
            &topics.agent_request_shared_filter("echo").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    let mut cancels = agent
        .subscribe(
            &topics.agent_cancel_filter("echo").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    let mut responses = gateway
        .subscribe(
            &topics.gateway_response_filter("gw", "i1").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();

    let request = topics.agent_request("echo", "t1").unwrap();
    let cancel = topics.agent_cancel("echo", "t1").unwrap();
    let response = topics.gateway_response("gw", "i1", "echo", "t1").unwrap();
    gateway.send(&request, "before").await.unwrap();
    assert_eq!(
        next(&mut requests).await.payload,
        Bytes::from_static(b"before")
    );

    let mut state = agent.state();
    broker.stop().await;
    let stopped = Instant::now();
    wait_state(&agent, "agent disconnected", |s| {
        matches!(s, ConnectionState::Disconnected { .. })
    })
    .await;
    wait_state(&gateway, "gateway disconnected", |s| {
        matches!(s, ConnectionState::Disconnected { .. })
    })
    .await;
    assert!(!agent.is_connected());
    if let ConnectionState::Disconnected { reason } = &*state.borrow_and_update() {
        eprintln!("agent saw: {reason}");
    }

    broker.restart().await;
    wait_state(&agent, "agent connected again", |s| {
        *s == ConnectionState::Connected
    })
    .await;
    wait_state(&gateway, "gateway connected again", |s| {
        *s == ConnectionState::Connected
    })
    .await;
    eprintln!(
        "broker down and both buses re-subscribed in {:?}",
        stopped.elapsed()
    );
    assert!(agent.is_connected());
    // Clean sessions: the broker kept nothing for either, and each bus says so.
    assert_eq!((agent.sessions_lost(), gateway.sessions_lost()), (1, 1));

    // Every subscription works again (Connected means re-subscribed). "before" may arrive
    // once more first: when the broker died before its PUBACK reached the gateway, the bus
    // sends it again after the reconnect (QoS 1 is at least once).
    gateway.send(&request, "after").await.unwrap();
    let mut first = next(&mut requests).await.payload;
    if first == Bytes::from_static(b"before") {
        first = next(&mut requests).await.payload;
    }
    assert_eq!(first, Bytes::from_static(b"after"));
    gateway.send(&cancel, "cancel").await.unwrap();
    assert_eq!(next(&mut cancels).await.topic, cancel);
    agent.send(&response, "done").await.unwrap();
    assert_eq!(
        next(&mut responses).await.payload,
        Bytes::from_static(b"done")
    );

    // A new subscription after the restart works too.
    let mut cards = gateway
        .subscribe(&topics.agent_cards_filter(), QoS::AtLeastOnce)
        .await
        .unwrap();
    let card = topics.agent_card("echo").unwrap();
    agent.send(&card, "card").await.unwrap();
    assert_eq!(next(&mut cards).await.topic, card);

    agent.disconnect().await.unwrap();
    gateway.disconnect().await.unwrap();
    assert_eq!(*agent.state().borrow(), ConnectionState::Closed);
}

mesh_testkit::both_brokers!(
    messages_published_while_the_broker_is_down_are_sent_after_the_reconnect
);
async fn messages_published_while_the_broker_is_down_are_sent_after_the_reconnect(
    mut broker: TestBroker,
) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let publisher = connect(&broker.url()).await;
    let topic = topics.gateway_response("gw", "i1", "echo", "t1").unwrap();

    broker.stop().await;
    wait_state(&publisher, "publisher disconnected", |s| {
        matches!(s, ConnectionState::Disconnected { .. })
    })
    .await;
    // Retained, so that the subscriber below sees it whenever it arrives.
    publisher
        .publish(&topic, "queued", QoS::AtLeastOnce, true)
        .await
        .unwrap();
    broker.restart().await;
    wait_state(&publisher, "publisher connected again", |s| {
        *s == ConnectionState::Connected
    })
    .await;

    let subscriber = connect(&broker.url()).await;
    let mut sub = subscriber
        .subscribe(&topic, QoS::AtLeastOnce)
        .await
        .unwrap();
    let m = next(&mut sub).await;
    assert_eq!(m.payload, Bytes::from_static(b"queued"));
    // Leave no retained message behind.
    publisher
        .publish(&topic, Bytes::new(), QoS::AtLeastOnce, true)
        .await
        .unwrap();
    // A second copy of the queued message may come first: the subscription can race the
    // publish the bus sends again after the reconnect, and the broker then delivers both
    // the retained copy and the live one (QoS 1 is at least once).
    let mut last = Some(m.payload);
    assert!(next_distinct(&mut sub, &mut last).await.payload.is_empty());
    publisher.disconnect().await.unwrap();
    subscriber.disconnect().await.unwrap();
}
