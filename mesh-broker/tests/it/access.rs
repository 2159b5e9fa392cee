//! Authentication and ACLs: anonymous clients and wrong passwords refused at CONNECT, and each
//! account limited to the topics its ACL grants, for publishes (acknowledged and dropped),
//! subscriptions (SUBACK failure, shared ones checked without their `$share/<group>/` prefix),
//! retained messages and last wills.

use crate::support::*;
use mesh_broker::{Access, Broker, BrokerConfig, hash_password};
use rumqttc::{ConnectReturnCode, ConnectionError, LastWill, Packet, QoS, SubscribeReasonCode};
use std::net::SocketAddr;

async fn secured_broker() -> Broker {
    let mut config = BrokerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.access = Some(accounts());
    Broker::start_with(config).await.unwrap()
}

#[tokio::test]
async fn anonymous_clients_and_wrong_passwords_are_refused() {
    let broker = secured_broker().await;
    let addr = broker.local_addr();
    assert!(matches!(
        refused(options(addr, "anonymous")).await,
        ConnectionError::ConnectionRefused(ConnectReturnCode::NotAuthorized)
    ));
    for (user, password) in [("echo", "spy-pw"), ("echo", ""), ("nobody", "echo-pw")] {
        let error = refused(account(addr, "guess", user, password)).await;
        assert!(
            matches!(
                error,
                ConnectionError::ConnectionRefused(ConnectReturnCode::BadUserNamePassword)
            ),
            "{user}/{password}: {error:?}"
        );
    }
    connect_with(account(addr, "echo-1", "echo", "echo-pw")).await;
    broker.stop().await;
}

#[tokio::test]
async fn an_account_subscribes_only_where_it_may_read() {
    let broker = secured_broker().await;
    let addr = broker.local_addr();
    let mut spy = connect_with(account(addr, "spy-1", "spy", "spy-pw")).await;
    for filter in ["t/echo/+", "t/+/+", "#", "$share/g/t/echo/+", "t/spy/#"] {
        spy.client
            .subscribe(filter, QoS::AtLeastOnce)
            .await
            .unwrap();
        let Packet::SubAck(ack) = spy.next_packet().await else {
            panic!("expected a SUBACK for {filter}");
        };
        assert_eq!(ack.return_codes, [SubscribeReasonCode::Failure], "{filter}");
    }
    spy.subscribe("t/spy/+", QoS::AtLeastOnce).await;
    spy.subscribe("$share/g/t/spy/+", QoS::AtLeastOnce).await;
    broker.stop().await;
}

#[tokio::test]
async fn a_publish_outside_the_acl_is_acknowledged_and_dropped() {
    let broker = secured_broker().await;
    let addr = broker.local_addr();
    let mut echo = connect_with(account(addr, "echo-1", "echo", "echo-pw")).await;
    echo.subscribe("t/echo/+", QoS::AtLeastOnce).await;
    let mut spy = connect_with(account(addr, "spy-1", "spy", "spy-pw")).await;
    let mut admin = connect_with(account(addr, "admin-1", "admin", "admin-pw")).await;

    // The spy forges a request to echo (and a retained card): acknowledged, never delivered.
    spy.client
        .publish("t/echo/forged", QoS::AtLeastOnce, false, "forged")
        .await
        .unwrap();
    spy.client
        .publish("cards/echo", QoS::AtLeastOnce, true, "forged card")
        .await
        .unwrap();
    spy.wait_pubacks(2).await;
    admin
        .client
        .publish("t/echo/real", QoS::AtLeastOnce, false, "real")
        .await
        .unwrap();
    let first = echo.next_publish().await;
    assert_eq!(first.topic, "t/echo/real", "the forged publish was dropped");

    // Nothing was retained: a new subscriber gets the marker published after its SUBACK first.
    admin.subscribe("cards/#", QoS::AtLeastOnce).await;
    admin
        .client
        .publish("cards/marker", QoS::AtLeastOnce, false, "marker")
        .await
        .unwrap();
    assert_eq!(admin.next_publish().await.topic, "cards/marker");
    // The spy is still connected: its own topics work.
    spy.subscribe("t/spy/+", QoS::AtLeastOnce).await;
    broker.stop().await;
}

#[tokio::test]
async fn a_last_will_on_a_topic_the_account_may_not_publish_is_refused() {
    let broker = secured_broker().await;
    let addr = broker.local_addr();
    let mut options = account(addr, "spy-1", "spy", "spy-pw");
    options.set_last_will(LastWill::new(
        "cards/echo",
        "planted",
        QoS::AtLeastOnce,
        true,
    ));
    assert!(matches!(
        refused(options).await,
        ConnectionError::ConnectionRefused(ConnectReturnCode::NotAuthorized)
    ));
    let mut options = account(addr, "echo-1", "echo", "echo-pw");
    options.set_last_will(LastWill::new("cards/echo", "gone", QoS::AtLeastOnce, true));
    connect_with(options).await;
    broker.stop().await;
}

#[tokio::test]
async fn unreadable_or_malformed_files_fail_the_start_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("mesh-access-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let passwords = dir.join("passwords");
    let acl = dir.join("acl");
    std::fs::write(&passwords, "echo:plaintext\n").unwrap();
    std::fs::write(&acl, ACL).unwrap();
    let error = Access::from_files(&passwords, &acl)
        .unwrap_err()
        .to_string();
    assert!(error.contains("passwords: line 1 (echo)"), "{error}");
    assert!(!error.contains("plaintext"), "{error}");
    std::fs::write(&passwords, format!("echo:{}\n", hash_password("x"))).unwrap();
    let missing = dir.join("missing-acl");
    let error = Access::from_files(&passwords, &missing)
        .unwrap_err()
        .to_string();
    assert!(error.contains("missing-acl"), "{error}");
    std::fs::write(&acl, "user echo\ntopic read a/#/b\n").unwrap();
    let error = Access::from_files(&passwords, &acl)
        .unwrap_err()
        .to_string();
    assert!(error.contains("acl: line 2"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}
