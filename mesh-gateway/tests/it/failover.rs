//! Broker failover: the gateway and its agent list two broker nodes; when the first one
//! dies, every client moves to the second, subscribes there again, the agent announces its
//! card and presence there, and requests are served again.

use crate::support::*;
use mesh_core::bus::{BrokerUrl, Bus, BusConfig, ConnectionState};
use mesh_testkit::TestBroker;
use std::time::Duration;

/// Waits until `bus` is connected again after losing its session `lost` times in all.
async fn reconnected(bus: &Bus, lost: u64, who: &str) {
    let mut state = bus.state();
    let moved = async {
        loop {
            if *state.borrow_and_update() == ConnectionState::Connected
                && bus.sessions_lost() >= lost
            {
                return;
            }
            if state.changed().await.is_err() {
                panic!("{who}'s bus closed");
            }
        }
    };
    tokio::time::timeout(WAIT, moved)
        .await
        .unwrap_or_else(|_| panic!("{who} did not reconnect to the next node in {WAIT:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_its_broker_node_dies_the_mesh_moves_to_the_next_one() {
    let second = TestBroker::from_env().await;
    let next = BrokerUrl::parse(&second.url()).unwrap();
    let mut mesh = GatewayMesh::start_on(
        TestBroker::from_env().await,
        |bus| bus.failover = vec![next.clone()],
        |_| {},
    )
    .await;
    let mut agent_bus = BusConfig::new(&format!("{},{}", mesh.broker.url(), second.url())).unwrap();
    agent_bus.keep_alive = Duration::from_secs(2);
    assert_eq!(agent_bus.failover, [next]);
    let echo = mesh_example_agents::echo::agent()
        .config(mesh.agent_config())
        .start(agent_bus)
        .await
        .unwrap();
    assert!(mesh.gateway.registry().wait_online("echo", WAIT).await);
    let body = mesh.call("echo", "message/send", msg03("before")).await;
    assert_eq!(task_state(result(&body)), "completed", "{body}");

    mesh.broker.stop().await;
    reconnected(&mesh.gateway_bus, 1, "the gateway").await;
    reconnected(echo.bus(), 1, "the agent").await;

    // The agent announced itself on the second node: a gateway that only knows that one
    // sees it online.
    let watcher = Bus::connect(second.bus_config()).await.unwrap();
    let registry = mesh_core::registry::Registry::start_with(
        &watcher,
        &mesh_core::topic::Topics::new(mesh.namespace.clone()).unwrap(),
        "watcher",
        None,
    )
    .await
    .unwrap();
    assert!(registry.wait_online("echo", WAIT).await);

    // And the mesh serves again, through the second node.
    let body = mesh.call("echo", "message/send", msg03("after")).await;
    assert_eq!(task_state(result(&body)), "completed", "{body}");
    echo.shutdown().await;
}
