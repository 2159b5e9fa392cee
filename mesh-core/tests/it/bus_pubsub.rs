//! The bus against a real Mosquitto process: publish and subscribe, overlapping
//! subscriptions, retained messages, the last will, shared subscriptions, large payloads,
//! refused topics and a dead broker. Every test has its own broker and namespace.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::support::{WAIT, config, connect, next, next_distinct, within};
use bytes::Bytes;
use mesh_core::bus::{Bus, BusError, ConnectionState, LastWill, QoS};
use mesh_core::topic::{SegmentKind, Topics};
use mesh_testkit::{TestBroker, fresh_namespace};

mesh_testkit::both_brokers!(publish_and_subscribe_in_order_with_overlapping_subscriptions);
async fn publish_and_subscribe_in_order_with_overlapping_subscriptions(broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let gateway = connect(&broker.url()).await;
    let agent = connect(&broker.url()).await;
    assert!(gateway.is_connected());

    let mut events = gateway
        .subscribe(
            &topics.gateway_response_filter("gw1", "i1").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    // An overlapping subscription on the same bus gets its own copy.
    let everything = format!("{}/#", topics.namespace());
    let mut all = gateway
        .subscribe(&everything, QoS::AtLeastOnce)
        .await
        .unwrap();

    let topic = topics
        .gateway_response("gw1", "i1", "echo", "task.abc/1#x")
        .unwrap();
    for i in 0..20u32 {
        agent
            .send(&topic, i.to_string().into_bytes())
            .await
            .unwrap();
    }
    // MQTT 3.1.1 (section 3.3.5) lets a broker send one copy per overlapping subscription
    // (the embedded broker does, Mosquitto sends one): each subscription sees every message,
    // in order, possibly twice in a row.
    let (mut last_event, mut last_all) = (None, None);
    for i in 0..20u32 {
        let m = next_distinct(&mut events, &mut last_event).await;
        assert_eq!(m.topic, topic);
        assert_eq!(m.payload, Bytes::from(i.to_string()));
        assert!(!m.retain);
        let kind = Topics::parse(&m.topic).unwrap();
        assert_eq!(kind.task().unwrap().task_id(), "task.abc/1#x");
        assert_eq!(
            next_distinct(&mut all, &mut last_all).await.payload,
            m.payload
        );
    }
    // A message for another gateway reaches only the wildcard subscription.
    let other = topics.gateway_response("gw2", "i1", "echo", "t").unwrap();
    agent.send(&other, "x").await.unwrap();
    assert_eq!(next_distinct(&mut all, &mut last_all).await.topic, other);
    while let Some(m) = events.try_recv() {
        assert_eq!(
            Some(m.payload),
            last_event,
            "only a repeat of the last message"
        );
    }

    agent.disconnect().await.unwrap();
    gateway.disconnect().await.unwrap();
}

mesh_testkit::both_brokers!(qos1_round_trip_latency);
async fn qos1_round_trip_latency(broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let a = connect(&broker.url()).await;
    let b = connect(&broker.url()).await;
    let ping = topics.agent_request("echo", "ping").unwrap();
    let pong = topics
        .agent_response("caller", "i1", "echo", "pong")
        .unwrap();
    let mut at_b = b.subscribe(&ping, QoS::AtLeastOnce).await.unwrap();
    let mut at_a = a.subscribe(&pong, QoS::AtLeastOnce).await.unwrap();
    let echo = tokio::spawn(async move {
        while let Some(m) = at_b.recv().await {
            if b.send(&pong, m.payload).await.is_err() {
                break;
            }
        }
    });
    let rounds = 200u32;
    let start = Instant::now();
    for i in 0..rounds {
        a.send(&ping, i.to_be_bytes().to_vec()).await.unwrap();
        let m = next(&mut at_a).await;
        assert_eq!(m.payload.as_ref(), i.to_be_bytes());
    }
    let per_round = start.elapsed() / rounds;
    eprintln!("QoS 1 request/response round trip over Mosquitto: {per_round:?} (mean of {rounds})");
    // Nagle on anywhere would make this tens of milliseconds.
    assert!(per_round < Duration::from_millis(20), "{per_round:?}");
    echo.abort();
    a.disconnect().await.unwrap();
}

mesh_testkit::both_brokers!(retained_card_reaches_a_late_subscriber_and_is_cleared);
async fn retained_card_reaches_a_late_subscriber_and_is_cleared(broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let agent = connect(&broker.url()).await;
    let card = topics.agent_card("echo").unwrap();
    agent
        .publish(&card, r#"{"name":"echo"}"#, QoS::AtLeastOnce, true)
        .await
        .unwrap();
    // The retained message is stored once the publisher's own round trip is through.
    let mut own = agent.subscribe(&card, QoS::AtLeastOnce).await.unwrap();
    assert!(next(&mut own).await.retain);

    let late = connect(&broker.url()).await;
    let mut cards = late
        .subscribe(&topics.agent_cards_filter(), QoS::AtLeastOnce)
        .await
        .unwrap();
    let m = next(&mut cards).await;
    assert_eq!(m.topic, card);
    assert!(m.retain);
    assert_eq!(m.payload, Bytes::from_static(br#"{"name":"echo"}"#));

    // Clear it: an empty retained payload.
    agent
        .publish(&card, Bytes::new(), QoS::AtLeastOnce, true)
        .await
        .unwrap();
    let cleared = next(&mut cards).await;
    assert!(cleared.payload.is_empty());

    // A new subscriber gets no retained card: the first thing it sees is a later marker.
    let mut fresh = late
        .subscribe(&topics.agent_card("echo").unwrap(), QoS::AtLeastOnce)
        .await
        .unwrap();
    agent.send(&card, "marker").await.unwrap();
    let first = next(&mut fresh).await;
    assert_eq!(first.payload, Bytes::from_static(b"marker"));
    assert!(!first.retain);
    agent.disconnect().await.unwrap();
    late.disconnect().await.unwrap();
}

/// A bus whose last will publishes `offline` on `topic`.
async fn connect_with_will(broker: &TestBroker, topic: &str) -> Bus {
    Bus::connect(config(&broker.url()).with_last_will(LastWill {
        topic: topic.to_owned(),
        payload: Bytes::from_static(b"offline"),
        qos: QoS::AtLeastOnce,
        retain: false,
    }))
    .await
    .unwrap()
}

/// A fresh namespace's topics, a connected watcher and its subscription to presence.
async fn watch_presence(broker: &TestBroker) -> (Topics, Bus, mesh_core::bus::Subscription) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let watcher = connect(&broker.url()).await;
    let presence = watcher
        .subscribe(&topics.presence_filter(), QoS::AtLeastOnce)
        .await
        .unwrap();
    (topics, watcher, presence)
}

mesh_testkit::both_brokers!(last_will_is_published_when_a_client_dies_but_not_on_disconnect);
async fn last_will_is_published_when_a_client_dies_but_not_on_disconnect(broker: TestBroker) {
    let (topics, watcher, mut presence) = watch_presence(&broker).await;

    let will_topic = topics.presence("echo", "i1").unwrap();
    let dying = connect_with_will(&broker, &will_topic).await;
    // Dropping every handle without disconnecting closes the socket abruptly.
    drop(dying);
    let m = next(&mut presence).await;
    assert_eq!(m.topic, will_topic);
    assert_eq!(m.payload, Bytes::from_static(b"offline"));

    // A clean DISCONNECT: no will. The first message after it is our marker.
    let polite_topic = topics.presence("echo", "i2").unwrap();
    let polite = connect_with_will(&broker, &polite_topic).await;
    polite.disconnect().await.unwrap();
    assert!(!polite.is_connected());
    assert!(matches!(
        polite.send(&polite_topic, "x").await,
        Err(BusError::Closed)
    ));
    watcher.send(&polite_topic, "marker").await.unwrap();
    assert_eq!(
        next(&mut presence).await.payload,
        Bytes::from_static(b"marker")
    );
    watcher.disconnect().await.unwrap();
}

mesh_testkit::both_brokers!(an_aborted_bus_sends_nothing_more_and_its_will_is_published);
async fn an_aborted_bus_sends_nothing_more_and_its_will_is_published(broker: TestBroker) {
    let (topics, watcher, mut presence) = watch_presence(&broker).await;
    let will_topic = topics.presence("echo", "i1").unwrap();
    let crashing = connect_with_will(&broker, &will_topic).await;
    // As a crash: from the moment of the abort, nothing more leaves, even what is published
    // before its driver task has actually stopped (a task ending on the abort must not get
    // its last word out).
    crashing.abort();
    assert!(matches!(
        crashing.send(&will_topic, "too late").await,
        Err(BusError::Closed)
    ));
    let m = next(&mut presence).await;
    assert_eq!(m.payload, Bytes::from_static(b"offline"));
    watcher.send(&will_topic, "marker").await.unwrap();
    assert_eq!(
        next(&mut presence).await.payload,
        Bytes::from_static(b"marker"),
        "nothing from the aborted bus between its will and the marker"
    );
    watcher.disconnect().await.unwrap();
}

mesh_testkit::both_brokers!(shared_subscription_spreads_load_and_groups_stay_apart);
async fn shared_subscription_spreads_load_and_groups_stay_apart(broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let echo_filter = topics.agent_request_shared_filter("echo").unwrap();
    let other_filter = topics.agent_request_shared_filter("other").unwrap();
    let i1 = connect(&broker.url()).await;
    let i2 = connect(&broker.url()).await;
    let o1 = connect(&broker.url()).await;
    let mut s1 = i1.subscribe(&echo_filter, QoS::AtLeastOnce).await.unwrap();
    let mut s2 = i2.subscribe(&echo_filter, QoS::AtLeastOnce).await.unwrap();
    let mut so = o1.subscribe(&other_filter, QoS::AtLeastOnce).await.unwrap();

    let client = connect(&broker.url()).await;
    let n = 40;
    for i in 0..n {
        let topic = topics.agent_request("echo", &format!("t{i}")).unwrap();
        client.send(&topic, "req").await.unwrap();
    }
    let other_topic = topics.agent_request("other", "o1").unwrap();
    client.send(&other_topic, "other").await.unwrap();

    // Each echo request reaches exactly one instance; both instances get some.
    let mut seen = HashSet::new();
    let (mut c1, mut c2) = (0, 0);
    while seen.len() < n {
        tokio::select! {
            m = s1.recv() => { c1 += 1; assert!(seen.insert(m.unwrap().topic)); }
            m = s2.recv() => { c2 += 1; assert!(seen.insert(m.unwrap().topic)); }
            _ = tokio::time::sleep(WAIT) => panic!("only {} of {n} requests arrived", seen.len()),
        }
    }
    eprintln!("shared subscription: instance 1 got {c1}, instance 2 got {c2} of {n}");
    assert!(c1 > 0 && c2 > 0, "load not spread: {c1} / {c2}");
    assert_eq!(c1 + c2, n);
    // The other agent's group got its own request and none of echo's.
    let m = next(&mut so).await;
    assert_eq!(m.topic, other_topic);
    assert!(so.try_recv().is_none());
    assert!(s1.try_recv().is_none() && s2.try_recv().is_none());
    for bus in [i1, i2, o1, client] {
        bus.disconnect().await.unwrap();
    }
}

mesh_testkit::both_brokers!(one_mebibyte_payload_round_trips);
async fn one_mebibyte_payload_round_trips(broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let a = connect(&broker.url()).await;
    let b = connect(&broker.url()).await;
    let topic = topics.agent_request("echo", "big").unwrap();
    let mut sub = b.subscribe(&topic, QoS::AtLeastOnce).await.unwrap();
    let payload: Bytes = (0..1024 * 1024)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    let start = Instant::now();
    a.send(&topic, payload.clone()).await.unwrap();
    let m = next(&mut sub).await;
    eprintln!("1 MiB payload delivered in {:?}", start.elapsed());
    assert_eq!(m.payload.len(), payload.len());
    assert_eq!(m.payload, payload);

    // Above the configured maximum: a typed error, and the connection is unharmed.
    let mut small = config(&broker.url());
    small.max_packet_size = mesh_core::bus::MIN_MAX_PACKET_SIZE;
    let c = Bus::connect(small).await.unwrap();
    let err = c.send(&topic, vec![0u8; 8192]).await.unwrap_err();
    assert!(matches!(err, BusError::PayloadTooLarge { .. }), "{err}");
    c.send(&topic, "small").await.unwrap();
    assert_eq!(next(&mut sub).await.payload, Bytes::from_static(b"small"));
    for bus in [a, b, c] {
        bus.disconnect().await.unwrap();
    }
}

mesh_testkit::both_brokers!(hostile_segments_and_topics_are_refused);
async fn hostile_segments_and_topics_are_refused(broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    for agent in ["+", "#", "a/b", "$SYS", "", "a.b", "a b", "a\0b"] {
        let err = topics.agent_request(agent, "t").unwrap_err();
        assert_eq!(err.kind, SegmentKind::Agent, "{agent:?}");
        assert!(topics.agent_request_shared_filter(agent).is_err());
    }
    assert!(Topics::new("a/b").is_err());
    let bus = connect(&broker.url()).await;
    assert!(matches!(
        bus.send("a/+/c", "x").await,
        Err(BusError::InvalidTopic { .. })
    ));
    assert!(matches!(
        bus.subscribe("a/#/c", QoS::AtLeastOnce).await,
        Err(BusError::InvalidFilter { .. })
    ));
    // A hostile task id stays inside its agent's topic.
    let topic = topics.agent_request("echo", "../../#").unwrap();
    let mut sub = bus
        .subscribe(
            &topics.agent_request_filter("echo").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    bus.send(&topic, "x").await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(
        Topics::parse(&m.topic).unwrap().task().unwrap().task_id(),
        "../../#"
    );
    bus.disconnect().await.unwrap();
}

#[tokio::test]
async fn connecting_to_a_dead_port_fails_fast_with_a_typed_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let start = Instant::now();
    let err = within(
        "connect to a dead port",
        Bus::connect(config(&format!("mqtt://127.0.0.1:{port}"))),
    )
    .await
    .unwrap_err();
    let took = start.elapsed();
    eprintln!("dead port refused in {took:?}: {err}");
    assert!(matches!(err, BusError::Connect { .. }), "{err:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(err.to_string().contains(&port.to_string()));

    let err = mesh_core::bus::BusConfig::new("http://127.0.0.1:1").unwrap_err();
    assert!(matches!(err, BusError::InvalidUrl { .. }), "{err}");
    let err = mesh_core::bus::BusConfig::new("mqtt://h:notaport").unwrap_err();
    assert!(matches!(err, BusError::InvalidUrl { .. }));
}

mesh_testkit::both_brokers!(dropping_a_subscription_stops_routing_and_keeps_the_others);
async fn dropping_a_subscription_stops_routing_and_keeps_the_others(broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let bus = connect(&broker.url()).await;
    let filter = topics.agent_cancel_filter("echo").unwrap();
    let a = bus.subscribe(&filter, QoS::AtLeastOnce).await.unwrap();
    let mut b = bus.subscribe(&filter, QoS::AtLeastOnce).await.unwrap();
    bus.unsubscribe(a);
    let topic = topics.agent_cancel("echo", "t1").unwrap();
    bus.send(&topic, "cancel").await.unwrap();
    assert_eq!(next(&mut b).await.topic, topic);
    drop(b);
    // Subscribing again after the broker was told to unsubscribe works.
    let mut c = bus.subscribe(&filter, QoS::AtLeastOnce).await.unwrap();
    bus.send(&topic, "again").await.unwrap();
    assert_eq!(next(&mut c).await.payload, Bytes::from_static(b"again"));
    bus.disconnect().await.unwrap();
    // The bus is closed: the subscription ends.
    assert!(within("end of subscription", c.recv()).await.is_none());
}

#[tokio::test]
async fn tls_to_a_plain_listener_fails_with_a_typed_error_not_a_panic() {
    // The rustls (ring) path runs: the handshake against a plain MQTT listener fails.
    let broker = TestBroker::mosquitto().await;
    let url = format!("mqtts://127.0.0.1:{}", broker.port());
    let start = Instant::now();
    let result = within("TLS connect", Bus::connect(config(&url))).await;
    let err = result.unwrap_err();
    eprintln!(
        "TLS against a plain listener: {err} after {:?}",
        start.elapsed()
    );
    assert!(
        matches!(err, BusError::Connect { .. } | BusError::Tls(_)),
        "{err:?}"
    );
}

// A message larger than a client's `max_packet_size` (a 1 MiB retained card to a client
// that takes 64 KiB) is dropped and counted by that client, which stays connected: no
// reconnect loop on a retained message the broker sends again at every re-subscription.
mesh_testkit::both_brokers!(an_oversized_incoming_message_is_skipped_without_a_reconnect);
async fn an_oversized_incoming_message_is_skipped_without_a_reconnect(broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let publisher = connect(&broker.url()).await;
    let mut small = config(&broker.url());
    small.max_packet_size = 64 * 1024;
    let reader = within("connect", Bus::connect(small)).await.unwrap();
    let mut state = reader.state();
    state.mark_unchanged();

    let card = topics.agent_card("huge").unwrap();
    let big = vec![b'x'; 1024 * 1024];
    publisher
        .publish(&card, big.clone(), QoS::AtLeastOnce, true)
        .await
        .unwrap();
    let filter = topics.agent_cards_filter();
    // The retained message comes first, then the live ones, in order.
    let mut sub = reader.subscribe(&filter, QoS::AtLeastOnce).await.unwrap();
    let small_card = topics.agent_card("small").unwrap();
    publisher.send(&card, big.clone()).await.unwrap();
    publisher.send(&small_card, "fits").await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(
        (m.topic.as_str(), m.payload.as_ref()),
        (small_card.as_str(), b"fits".as_ref())
    );
    assert_eq!(
        reader.stats().oversized_dropped,
        2,
        "the retained and the live one"
    );

    // A new subscription gets the retained message again: dropped again, still connected.
    drop(sub);
    let mut sub = reader.subscribe(&filter, QoS::AtLeastOnce).await.unwrap();
    publisher.send(&small_card, "again").await.unwrap();
    assert_eq!(next(&mut sub).await.payload, Bytes::from_static(b"again"));
    assert_eq!(reader.stats().oversized_dropped, 3);
    assert!(
        !state.has_changed().unwrap(),
        "the connection never dropped: {:?}",
        *state.borrow()
    );

    publisher
        .publish(&card, Vec::new(), QoS::AtLeastOnce, true)
        .await
        .unwrap();
    for bus in [publisher, reader] {
        bus.disconnect().await.unwrap();
    }
}

/// A publish the broker closes the connection on (over the broker's packet limit, under the
/// client's) is given up after a bounded number of reconnects, and the client goes on
/// serving: no reconnect loop, and what it publishes next is delivered.
async fn a_publish_the_broker_refuses_is_given_up(broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let reader = connect(&broker.url()).await;
    let topic = topics.agent_request("echo", "t").unwrap();
    let mut sub = reader.subscribe(&topic, QoS::AtLeastOnce).await.unwrap();
    let writer = connect(&broker.url()).await;
    let mut state = writer.state();
    let drops = tokio::spawn(async move {
        let mut drops = 0;
        while state.changed().await.is_ok() {
            let now = state.borrow_and_update().clone();
            match now {
                ConnectionState::Disconnected { .. } => drops += 1,
                ConnectionState::Closed => break,
                _ => {}
            }
        }
        drops
    });
    // Over the broker's 64 KiB, under the client's 16 MiB.
    writer.send(&topic, vec![b'x'; 128 * 1024]).await.unwrap();
    crate::support::wait_until("the publish is given up", || {
        writer.stats().publishes_given_up == 1
    })
    .await;
    writer.send(&topic, "after").await.unwrap();
    assert_eq!(next(&mut sub).await.payload, Bytes::from_static(b"after"));
    writer.disconnect().await.unwrap();
    let drops = within("the state watcher", drops).await.unwrap();
    assert_eq!(
        drops,
        mesh_core::bus::RESEND_LIMIT,
        "one dropped connection per attempt"
    );
    reader.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_mosquitto_refuses_is_given_up() {
    a_publish_the_broker_refuses_is_given_up(
        TestBroker::mosquitto_with_packet_limit(64 * 1024).await,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_the_embedded_broker_refuses_is_given_up() {
    a_publish_the_broker_refuses_is_given_up(
        TestBroker::embedded_with_packet_limit(64 * 1024).await,
    )
    .await
}

/// On a persistent session a dropped connection does not end the requests in flight (the
/// broker keeps their replies), so a request the bus gives up ends its stream itself, at
/// once and saying why, instead of waiting for its deadline.
async fn a_request_the_bus_gives_up_ends_its_stream(broker: TestBroker) {
    use mesh_core::dialect::Method;
    use mesh_core::model::{Message, Part, Role, send_params};
    use mesh_core::requester::{Ended, Requester, RequesterKind};
    let topics = Topics::new(fresh_namespace()).unwrap();
    let mut persistent = config(&broker.url()).with_client_id(format!("gw-{}", fresh_namespace()));
    persistent.clean_session = false;
    let bus = within("connect", Bus::connect(persistent)).await.unwrap();
    let requester = Requester::start(bus.clone(), topics, RequesterKind::Gateway, "gw", "i1")
        .await
        .unwrap();
    let message = Message::new(Role::User, vec![Part::text("x".repeat(128 * 1024))]);
    let options = send_options(Method::SendMessage);
    let mut stream = requester
        .send("echo", send_params(message), options)
        .await
        .unwrap();
    let delivery = within("the given-up request's stream", stream.next())
        .await
        .unwrap();
    assert_eq!(delivery.ended, Some(Ended::GivenUp), "{delivery:?}");
    assert!(
        delivery
            .reply
            .unwrap_err()
            .message
            .contains("refused the request")
    );
    bus.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_mosquitto_refuses_ends_its_stream() {
    a_request_the_bus_gives_up_ends_its_stream(
        TestBroker::mosquitto_with_packet_limit(64 * 1024).await,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_embedded_broker_refuses_ends_its_stream() {
    a_request_the_bus_gives_up_ends_its_stream(
        TestBroker::embedded_with_packet_limit(64 * 1024).await,
    )
    .await
}

mesh_testkit::both_brokers!(a_stream_with_a_lost_event_ends_saying_so);

/// The broker drops events of a stream (a QoS 0 subscription, a full queue): the requester
/// delivers what came, and where a position is missing before the final event, it ends the
/// stream with an error that says events were lost, in place of a final event that would
/// pass an incomplete task off as whole. The "agent" here is a plain bus client that
/// answers with positions 0, 2 and 3 (as if the broker had dropped 1).
async fn a_stream_with_a_lost_event_ends_saying_so(broker: TestBroker) {
    use mesh_core::requester::Ended;
    use serde_json::json;
    let FakeAgent {
        bus,
        agent_bus,
        mut stream,
        request,
        reply_to,
        _requester,
    } = stream_to_fake_agent(&broker, "lossy").await;
    let event = |seq: u64, state: &str, last: bool| {
        json!({"jsonrpc": "2.0", "id": request["id"], "result": {
            "kind": "status-update", "taskId": "t", "contextId": "c", "final": last,
            "status": {"state": state},
            "metadata": {"_mesh": {"instance": "a1", "seq": seq}},
        }})
        .to_string()
    };
    for (seq, state, last) in [
        (0, "working", false),
        (2, "working", false),
        (3, "completed", true),
    ] {
        agent_bus
            .send(&reply_to, event(seq, state, last))
            .await
            .unwrap();
    }
    for seq in [0, 2] {
        let delivery = within("an event", stream.next()).await.unwrap();
        assert!(delivery.reply.is_ok(), "event {seq}: {delivery:?}");
        assert_eq!(delivery.ended, None);
    }
    let end = within("the stream's end", stream.next()).await.unwrap();
    assert_eq!(end.ended, Some(Ended::EventsLost), "{end:?}");
    let error = end.reply.unwrap_err();
    assert!(
        error
            .message
            .starts_with("1 of the task's events were lost"),
        "{error:?}"
    );
    assert!(within("after the end", stream.next()).await.is_none());
    bus.disconnect().await.unwrap();
    agent_bus.disconnect().await.unwrap();
}

mesh_testkit::both_brokers!(
    an_answers_mesh_reaches_the_requester_apart_and_a_0x_final_ends_its_stream
);

/// What an agent puts in an event's `_mesh` comes out of the reply into `Delivery::meta`
/// (its instance apart, its position read there), and a 0.3 event whose `final` says the
/// stream ends ends it, whatever its state: the requester reads that from the `_mesh` it
/// took out. The "agent" is a plain bus client.
async fn an_answers_mesh_reaches_the_requester_apart_and_a_0x_final_ends_its_stream(
    broker: TestBroker,
) {
    use mesh_core::model::TaskState;
    use mesh_core::rpc::Reply;
    use serde_json::json;
    let FakeAgent {
        bus,
        agent_bus,
        mut stream,
        request,
        reply_to,
        _requester,
    } = stream_to_fake_agent(&broker, "early").await;
    // Still working, yet the last event of the stream.
    let event = json!({"jsonrpc": "2.0", "id": request["id"], "result": {
        "kind": "status-update", "taskId": "t", "contextId": "c", "final": true,
        "status": {"state": "working"},
        "metadata": {"k": 1, "_mesh": {"instance": "a1", "seq": 0}},
    }});
    agent_bus.send(&reply_to, event.to_string()).await.unwrap();
    let delivery = within("the event", stream.next()).await.unwrap();
    assert_eq!(delivery.instance.as_deref(), Some("a1"));
    assert_eq!(delivery.meta.seq, Some(0));
    let Ok(Reply::StatusUpdate(update)) = &delivery.reply else {
        panic!("a status update: {delivery:?}")
    };
    assert_eq!(update.status.state, TaskState::Working);
    assert_eq!(
        update
            .metadata
            .as_ref()
            .map(|m| m.keys().collect::<Vec<_>>()),
        Some(vec![&"k".to_owned()]),
        "the reply keeps the agent's own metadata, not its _mesh"
    );
    assert!(
        within("after the final event", stream.next())
            .await
            .is_none(),
        "the stream ends at the event that says it is final"
    );
    bus.disconnect().await.unwrap();
    agent_bus.disconnect().await.unwrap();
}

/// A streaming request sent to an "agent" that is a plain bus client: the test answers on
/// `reply_to` with whatever events it needs.
struct FakeAgent {
    /// The requester's connection.
    bus: Bus,
    /// The fake agent's connection.
    agent_bus: Bus,
    stream: mesh_core::requester::ReplyStream,
    /// The request as the agent received it.
    request: serde_json::Value,
    /// Where the agent answers (`_mesh.replyTo`).
    reply_to: String,
    /// Held so that the stream's routes stay up.
    _requester: mesh_core::requester::Requester,
}

/// Sends a streaming "hello" for task `t` to agent `agent` in a fresh namespace and takes the
/// request as that agent.
async fn stream_to_fake_agent(broker: &TestBroker, agent: &str) -> FakeAgent {
    use mesh_core::dialect::Method;
    use mesh_core::model::{Message, Part, Role, send_params};
    use mesh_core::requester::{Requester, RequesterKind};
    let topics = Topics::new(fresh_namespace()).unwrap();
    let bus = connect(&broker.url()).await;
    let agent_bus = connect(&broker.url()).await;
    let mut requests = agent_bus
        .subscribe(
            &topics.agent_request_filter(agent).unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    let requester = Requester::start(bus.clone(), topics, RequesterKind::Gateway, "gw", "i1")
        .await
        .unwrap();
    let message = Message::new(Role::User, vec![Part::text("hello")]);
    let stream = requester
        .send(
            agent,
            send_params(message),
            send_options(Method::SendStreamingMessage),
        )
        .await
        .unwrap();
    let request: serde_json::Value =
        serde_json::from_slice(&next(&mut requests).await.payload).unwrap();
    let reply_to = request
        .pointer("/params/metadata/_mesh/replyTo")
        .and_then(serde_json::Value::as_str)
        .expect("replyTo")
        .to_owned();
    FakeAgent {
        bus,
        agent_bus,
        stream,
        request,
        reply_to,
        _requester: requester,
    }
}

/// A request's options for task `t`, with a deadline no test reaches.
fn send_options(method: mesh_core::dialect::Method) -> mesh_core::requester::SendOptions {
    mesh_core::requester::SendOptions {
        method,
        task_id: "t".into(),
        snapshot: None,
        timeout: Duration::from_secs(60),
        principal: None,
        depth: 0,
        traceparent: None,
        keeps_history: false,
        stream_after_progress: false,
    }
}

// The bus's keep-alive: an idle connection pings the broker, which closes a connection
// after one and a half keep-alive intervals without a packet from it.
mesh_testkit::both_brokers!(an_idle_bus_pings_and_stays_connected_past_its_keep_alive);
async fn an_idle_bus_pings_and_stays_connected_past_its_keep_alive(broker: TestBroker) {
    let topics = Topics::new(fresh_namespace()).unwrap();
    let mut idle = config(&broker.url());
    idle.keep_alive = Duration::from_secs(1);
    let bus = within("connect", Bus::connect(idle)).await.unwrap();
    let topic = topics.agent_request("echo", "t").unwrap();
    let mut sub = bus.subscribe(&topic, QoS::AtLeastOnce).await.unwrap();
    let mut state = bus.state();
    state.borrow_and_update();
    // Idle for seven intervals: both brokers closed a client that never pinged within five
    // (they check the keep-alive on a coarser clock than its 1.5 intervals).
    let changed = tokio::time::timeout(Duration::from_secs(7), state.changed()).await;
    assert!(
        changed.is_err(),
        "the idle connection changed state: {:?}",
        *state.borrow()
    );
    assert_eq!(bus.sessions_lost(), 0);
    bus.send(&topic, "after").await.unwrap();
    assert_eq!(next(&mut sub).await.payload, Bytes::from_static(b"after"));
    bus.disconnect().await.unwrap();
}
