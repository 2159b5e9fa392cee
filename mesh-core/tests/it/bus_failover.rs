//! A bus that lists several broker nodes: it connects to the first that answers, and when
//! its node dies it moves to the next one and subscribes there again.

use crate::support::{config, next, within};
use bytes::Bytes;
use mesh_core::bus::{Bus, ConnectionState, QoS};
use mesh_testkit::{TestBroker, fresh_namespace};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_moves_to_the_next_node_when_its_node_dies_and_subscribes_there_again() {
    let mut first = TestBroker::from_env().await;
    let second = TestBroker::from_env().await;
    let topic = format!("{}/failover/x", fresh_namespace());
    let bus = within(
        "connect",
        Bus::connect(config(&format!("{},{}", first.url(), second.url()))),
    )
    .await
    .unwrap();
    let mut messages = bus.subscribe(&topic, QoS::AtLeastOnce).await.unwrap();
    let on_second = within("connect", Bus::connect(config(&second.url())))
        .await
        .unwrap();

    first.stop().await;
    let mut state = bus.state();
    within("connected to the second node", async {
        loop {
            if *state.borrow_and_update() == ConnectionState::Connected && bus.sessions_lost() == 1
            {
                return;
            }
            state.changed().await.unwrap();
        }
    })
    .await;
    on_second
        .publish(&topic, "on the second node", QoS::AtLeastOnce, false)
        .await
        .unwrap();
    assert_eq!(
        next(&mut messages).await.payload,
        Bytes::from_static(b"on the second node")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_whose_first_node_is_down_connects_to_the_next() {
    let mut first = TestBroker::from_env().await;
    let mut second = TestBroker::from_env().await;
    let nodes = format!("{},{}", first.url(), second.url());
    first.stop().await;
    let bus = within("connect", Bus::connect(config(&nodes)))
        .await
        .expect("the second node answers");
    assert!(bus.is_connected());
    // With every node down, the connection fails: it does not wait for ever.
    second.stop().await;
    let refused = within("connect", Bus::connect(config(&nodes))).await;
    assert!(refused.is_err());
}
