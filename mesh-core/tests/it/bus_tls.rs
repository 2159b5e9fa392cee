//! `mqtts://` end to end: a Mosquitto listener that speaks only TLS, a certificate from a
//! throwaway CA, and the bus trusting that CA (and refusing a broker it does not trust).

use mesh_core::bus::{Bus, BusConfig, BusError, QoS};
use mesh_testkit::{TestBroker, fresh_namespace};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_and_subscribe_over_tls_with_a_configured_ca() {
    let broker = TestBroker::mosquitto_tls().await;
    assert!(broker.url().starts_with("mqtts://"));
    let mut config = BusConfig::new(&broker.url()).unwrap();
    config.tls_roots.ca_file = broker.ca_file();
    let bus = Bus::connect(config)
        .await
        .expect("a TLS connection to a trusted broker");
    let topic = format!("{}/a2a/v1/discovery/agentcards/tls", fresh_namespace());
    let mut messages = bus.subscribe(&topic, QoS::AtLeastOnce).await.unwrap();
    bus.publish(&topic, b"over tls".to_vec(), QoS::AtLeastOnce, false)
        .await
        .unwrap();
    let message = tokio::time::timeout(Duration::from_secs(10), messages.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&message.payload[..], b"over tls");
    bus.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_whose_certificate_is_not_trusted_is_refused() {
    let broker = TestBroker::mosquitto_tls().await;
    // The system roots do not include the test CA.
    let mut config = BusConfig::new(&broker.url()).unwrap();
    config.connect_timeout = Duration::from_secs(5);
    let Err(error) = Bus::connect(config).await else {
        panic!("an untrusted certificate is refused");
    };
    assert!(
        matches!(
            error,
            BusError::Connect { .. } | BusError::ConnectTimeout { .. }
        ),
        "{error}"
    );
}
