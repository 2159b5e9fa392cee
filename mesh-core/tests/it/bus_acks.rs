//! Acknowledgements: the bus acknowledges every QoS 1 and QoS 2 delivery itself, after handing
//! it over (rumqttc's manual acks), so deliveries keep flowing past the broker's in-flight
//! window (100 in the test Mosquitto, 64 in the embedded broker) whether or not the subscriber
//! publishes in turn. Each scenario runs on one runtime worker (where the bus lets the consumer
//! answer before it acknowledges) and on two, against both brokers.

use crate::support::{connect, next, within};
use bytes::Bytes;
use mesh_core::bus::{Bus, QoS, Subscription};
use mesh_core::topic::Topics;
use mesh_testkit::{TestBroker, fresh_namespace};

/// Far more than either broker lets wait unacknowledged.
const MESSAGES: u32 = 1_000;

/// Runs `$scenario` on one worker and on two, against Mosquitto and the embedded broker.
macro_rules! every_runtime {
    ($scenario:ident) => {
        mod $scenario {
            use mesh_testkit::TestBroker;

            #[tokio::test(flavor = "current_thread")]
            async fn mosquitto_one_worker() {
                super::$scenario(TestBroker::mosquitto().await).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mosquitto_two_workers() {
                super::$scenario(TestBroker::mosquitto().await).await
            }

            #[tokio::test(flavor = "current_thread")]
            async fn embedded_one_worker() {
                super::$scenario(TestBroker::embedded().await).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded_two_workers() {
                super::$scenario(TestBroker::embedded().await).await
            }
        }
    };
}

/// A subscriber at `qos` on a fresh namespace, and a publisher to its topic.
struct Sink {
    topic: String,
    subscriber: Bus,
    publisher: Bus,
    sub: Subscription,
}

async fn sink(broker: &TestBroker, qos: QoS) -> Sink {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let subscriber = connect(&broker.url()).await;
    let sub = subscriber
        .subscribe(&topics.agent_request_filter("sink").unwrap(), qos)
        .await
        .unwrap();
    Sink {
        topic: topics.agent_request("sink", "t1").unwrap(),
        subscriber,
        publisher: connect(&broker.url()).await,
        sub,
    }
}

every_runtime!(a_subscriber_that_never_publishes_gets_every_delivery);
async fn a_subscriber_that_never_publishes_gets_every_delivery(broker: TestBroker) {
    let Sink {
        topic,
        subscriber,
        publisher,
        mut sub,
    } = sink(&broker, QoS::AtLeastOnce).await;
    let sending = tokio::spawn(async move {
        for i in 0..MESSAGES {
            publisher.send(&topic, i.to_string()).await.unwrap();
        }
        publisher
    });
    for i in 0..MESSAGES {
        // Without acknowledgements the broker stops after its in-flight window.
        assert_eq!(next(&mut sub).await.payload, Bytes::from(i.to_string()));
    }
    let publisher = within("the publisher", sending).await.unwrap();
    publisher.disconnect().await.unwrap();
    subscriber.disconnect().await.unwrap();
}

every_runtime!(a_responder_that_answers_each_request_keeps_flowing);
async fn a_responder_that_answers_each_request_keeps_flowing(broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let responder = connect(&broker.url()).await;
    let requester = connect(&broker.url()).await;
    let mut requests = responder
        .subscribe(
            &topics.agent_request_filter("echo").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    let reply_filter = topics.gateway_response_filter("gw", "i1").unwrap();
    let mut replies = requester
        .subscribe(&reply_filter, requester.inbox_qos())
        .await
        .unwrap();
    let reply_topic = topics.gateway_response("gw", "i1", "echo", "t1").unwrap();
    let answering = {
        let responder = responder.clone();
        tokio::spawn(async move {
            // Each reply is queued before the request's acknowledgement is written.
            while let Some(request) = requests.recv().await {
                responder.send(&reply_topic, request.payload).await.unwrap();
            }
        })
    };
    let request_topic = topics.agent_request("echo", "t1").unwrap();
    // Several requests in flight at once, as a gateway under load has.
    for window in 0..MESSAGES / 50 {
        for i in 0..50 {
            let n = window * 50 + i;
            requester.send(&request_topic, n.to_string()).await.unwrap();
        }
        for i in 0..50 {
            let n = window * 50 + i;
            assert_eq!(next(&mut replies).await.payload, Bytes::from(n.to_string()));
        }
    }
    answering.abort();
    requester.disconnect().await.unwrap();
    responder.disconnect().await.unwrap();
}

/// Mosquitto only: the embedded broker (rmqtt) delivers one QoS 2 message twice at the edge of
/// its in-flight window, with rumqttc's automatic acknowledgements too. The mesh itself uses
/// QoS 0 and 1; this checks that the bus completes QoS 2 handshakes of its own subscribers.
mod qos2_deliveries_arrive_once_each {
    use mesh_testkit::TestBroker;

    #[tokio::test(flavor = "current_thread")]
    async fn mosquitto_one_worker() {
        super::qos2_deliveries_arrive_once_each(TestBroker::mosquitto().await).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mosquitto_two_workers() {
        super::qos2_deliveries_arrive_once_each(TestBroker::mosquitto().await).await
    }
}

async fn qos2_deliveries_arrive_once_each(broker: TestBroker) {
    let Sink {
        topic,
        subscriber,
        publisher,
        mut sub,
    } = sink(&broker, QoS::ExactlyOnce).await;
    let n = 300u32;
    for i in 0..n {
        publisher
            .publish(&topic, i.to_string(), QoS::ExactlyOnce, false)
            .await
            .unwrap();
    }
    for i in 0..n {
        assert_eq!(next(&mut sub).await.payload, Bytes::from(i.to_string()));
    }
    // A second delivery of any of them would be here by the time a marker sent after them is.
    publisher
        .publish(&topic, "marker", QoS::ExactlyOnce, false)
        .await
        .unwrap();
    assert_eq!(next(&mut sub).await.payload, Bytes::from("marker"));
    assert!(sub.try_recv().is_none());
    publisher.disconnect().await.unwrap();
    subscriber.disconnect().await.unwrap();
}

#[tokio::test]
async fn replies_come_at_qos0_on_a_clean_session_and_qos1_on_a_persistent_one() {
    let broker = TestBroker::mosquitto().await;
    let clean = connect(&broker.url()).await;
    assert_eq!(clean.inbox_qos(), QoS::AtMostOnce);
    let mut config = crate::support::config(&broker.url());
    config.clean_session = false;
    config.client_id = format!("persistent-{}", fresh_namespace());
    let persistent = within("connect", Bus::connect(config)).await.unwrap();
    assert_eq!(persistent.inbox_qos(), QoS::AtLeastOnce);
    persistent.disconnect().await.unwrap();
    clean.disconnect().await.unwrap();
}

/// The consumer acknowledges (`AckMode::ByConsumer`) on a persistent session: a message whose
/// `Ack` it let go is not delivered again; one it still held when its process died is,
/// to whoever opens the session next (subscribed before it connects).
async fn a_message_the_consumer_did_not_acknowledge_comes_again_on_the_session(broker: TestBroker) {
    use mesh_core::bus::AckMode;
    let topics = Topics::new(fresh_namespace()).unwrap();
    let filter = topics.agent_request_filter("sink").unwrap();
    let topic = topics.agent_request("sink", "t1").unwrap();
    let marker_topic = topics.agent_request("marker", "t1").unwrap();
    let client_id = format!("acks-{}", uuid::Uuid::new_v4().simple());
    // The broker says when it saw the consumer's connection die (its will): the session is
    // then opened again on a broker that holds it, not taken over from a connection it still
    // thinks alive (Mosquitto loses or reorders in-flight messages on a takeover at times).
    let will_topic = topics.agent_request("will", "t1").unwrap();
    let session = || {
        let mut config = crate::support::config(&broker.url())
            .with_client_id(client_id.clone())
            .with_last_will(mesh_core::bus::LastWill {
                topic: will_topic.clone(),
                payload: Bytes::from_static(b"gone"),
                qos: QoS::AtLeastOnce,
                retain: false,
            });
        config.clean_session = false;
        config
    };
    let publisher = connect(&broker.url()).await;
    let mut wills = publisher
        .subscribe(
            &topics.agent_request_filter("will").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    let mut markers = publisher
        .subscribe(
            &topics.agent_request_filter("marker").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    let (consumer, mut subs) = within(
        "connect",
        Bus::connect_subscribed(
            session(),
            &[(&filter, QoS::AtLeastOnce, AckMode::ByConsumer)],
        ),
    )
    .await
    .unwrap();
    let mut sub = subs.remove(0);
    // Subscribed once the broker acknowledged the filters made before the connection.
    crate::support::wait_state(&consumer, "subscribed", |s| {
        *s == mesh_core::bus::ConnectionState::Connected
    })
    .await;
    publisher.send(&topic, "one").await.unwrap();
    publisher.send(&topic, "two").await.unwrap();
    let one = next(&mut sub).await;
    let two = next(&mut sub).await;
    assert_eq!(
        (&one.payload[..], &two.payload[..]),
        (&b"one"[..], &b"two"[..])
    );
    assert!(
        one.ack.is_some() && two.ack.is_some(),
        "each carries its ack"
    );
    // "one" is done with: its PUBACK goes before anything this bus publishes next, so once
    // the marker arrived, the broker had it.
    drop(one);
    consumer.send(&marker_topic, "after one").await.unwrap();
    next(&mut markers).await;
    // The process dies with "two" not acknowledged: its ack is let go only once the broker
    // saw the connection die (let go before, it could still reach the broker as the
    // connection closes).
    consumer.abort();
    assert_eq!(&next(&mut wills).await.payload[..], b"gone");
    drop(two);

    let (again, mut subs) = within(
        "connect again",
        Bus::connect_subscribed(
            session(),
            &[(&filter, QoS::AtLeastOnce, AckMode::ByConsumer)],
        ),
    )
    .await
    .unwrap();
    let mut sub = subs.remove(0);
    crate::support::wait_state(&again, "subscribed again", |s| {
        *s == mesh_core::bus::ConnectionState::Connected
    })
    .await;
    publisher.send(&topic, "three").await.unwrap();
    // The unacknowledged one comes again, the acknowledged one does not. Which of "two" and
    // "three" comes first is the broker's choice: the gateway orders replies by their `seq`,
    // not by arrival.
    let mut received = vec![next(&mut sub).await.payload, next(&mut sub).await.payload];
    received.sort();
    assert_eq!(
        received,
        [Bytes::from_static(b"three"), Bytes::from_static(b"two")],
        "the unacknowledged one again, and the new one"
    );
    again.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_redelivers_what_the_consumer_did_not_acknowledge() {
    a_message_the_consumer_did_not_acknowledge_comes_again_on_the_session(
        TestBroker::mosquitto().await,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_broker_redelivers_what_the_consumer_did_not_acknowledge() {
    a_message_the_consumer_did_not_acknowledge_comes_again_on_the_session(
        TestBroker::embedded().await,
    )
    .await
}
