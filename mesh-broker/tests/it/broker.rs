//! The broker's requirements, each measured end to end with rumqttc clients over
//! loopback TCP. Every test starts its own broker on an ephemeral port.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::{broker, connect, connect_with_will, within};
use mesh_broker::{Broker, BrokerConfig, BrokerError};
use rumqttc::{LastWill, Packet, QoS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// 1. A QoS 1 request/reply through the broker takes well under the 40 ms that a
///    Nagle/delayed-ACK stall would add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos1_request_reply_has_no_nagle_stall() {
    let broker = broker().await;
    let addr = broker.local_addr();

    let mut responder = connect(addr, "responder").await;
    responder.subscribe("rr/request", QoS::AtLeastOnce).await;
    let mut requester = connect(addr, "requester").await;
    requester.subscribe("rr/reply", QoS::AtLeastOnce).await;

    // The responder answers every request with its payload.
    let replier = responder.client.clone();
    let responder_task = tokio::spawn(async move {
        while let Some(request) = responder.try_next_publish().await {
            replier
                .publish(
                    "rr/reply",
                    QoS::AtLeastOnce,
                    false,
                    request.payload.to_vec(),
                )
                .await
                .expect("reply queued");
        }
    });

    let payload = vec![b'x'; 300];
    let mut rtts = Vec::with_capacity(50);
    for i in 0..50u8 {
        let mut request = payload.clone();
        request[0] = i;
        let sent = Instant::now();
        requester
            .client
            .publish("rr/request", QoS::AtLeastOnce, false, request.clone())
            .await
            .expect("request queued");
        let reply = requester.next_publish().await;
        rtts.push(sent.elapsed());
        assert_eq!(reply.payload.as_ref(), request.as_slice());
    }
    rtts.sort();
    let median = rtts[rtts.len() / 2];
    eprintln!(
        "QoS 1 request/reply RTT: p50 {median:?}, max {:?}",
        rtts[rtts.len() - 1]
    );
    assert!(
        median < Duration::from_millis(10),
        "median RTT {median:?}: Nagle stall?"
    );

    responder_task.abort();
    broker.stop().await;
}

/// 2a. A port someone already listens on is reported, naming the address.
#[tokio::test]
async fn taken_port_is_an_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let addr = taken.local_addr().expect("bound address");
    match Broker::start(addr).await {
        Err(BrokerError::AddrInUse { addr: reported }) => assert_eq!(reported, addr),
        other => panic!("expected AddrInUse, got {other:?}"),
    }
    drop(taken);
}

/// 2b. Started on port 0, the broker says which port it really bound, and listens there.
#[tokio::test]
async fn port_zero_reports_the_bound_port() {
    let broker = broker().await;
    let addr = broker.local_addr();
    assert_ne!(addr.port(), 0);
    assert_eq!(addr.ip(), std::net::Ipv4Addr::LOCALHOST);
    let mut client = connect(addr, "port-zero").await;
    client.subscribe("hello", QoS::AtMostOnce).await;
    broker.stop().await;
}

/// 3. Stop closes the port and every connection; the same port can be bound again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_frees_the_port_and_drops_sessions() {
    let first = broker().await;
    let addr = first.local_addr();
    let mut client = connect(addr, "stopped").await;
    client.subscribe("stop/#", QoS::AtLeastOnce).await;

    within("stop", first.stop()).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "port still open after stop"
    );
    client.wait_disconnected().await;

    // Start and stop again, repeatedly, on the same port.
    for round in 0..3 {
        let again = Broker::start(addr).await.expect("restart on the same port");
        assert_eq!(again.local_addr(), addr);
        let mut client = connect(addr, &format!("again-{round}")).await;
        client.subscribe("stop/#", QoS::AtLeastOnce).await;
        client
            .client
            .publish("stop/x", QoS::AtLeastOnce, false, "hi")
            .await
            .expect("queued");
        assert_eq!(client.next_publish().await.payload.as_ref(), b"hi");
        within("stop", again.stop()).await;
        client.wait_disconnected().await;
    }
}

/// 4. A new subscriber gets every retained message (1,000 on distinct topics), each
///    once, all before any message published after its SUBACK; a new shared
///    subscription gets none (MQTT 5, 4.8.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_subscriber_gets_all_retained_messages_before_later_ones() {
    const N: usize = 1_000;
    let broker = broker().await;
    let addr = broker.local_addr();

    let mut publisher = connect(addr, "card-publisher").await;
    for i in 0..N {
        let card = format!("{{\"name\":\"agent-{i}\",\"skills\":[\"echo\"]}}");
        publisher
            .client
            .publish(format!("cards/agent-{i}"), QoS::AtLeastOnce, true, card)
            .await
            .expect("queued");
    }
    publisher.wait_pubacks(N).await;

    // The subscriber publishes a marker to itself as soon as it has its SUBACK: the
    // marker must come after every retained message.
    let mut subscriber = connect(addr, "card-reader").await;
    subscriber
        .client
        .subscribe("cards/+", QoS::AtLeastOnce)
        .await
        .expect("queued");
    let mut topics = BTreeSet::new();
    let started = Instant::now();
    loop {
        match subscriber.next_packet().await {
            Packet::SubAck(_) => subscriber
                .client
                .publish("cards/marker", QoS::AtLeastOnce, false, "m")
                .await
                .expect("queued"),
            Packet::Publish(p) if p.topic == "cards/marker" => break,
            Packet::Publish(p) => {
                assert!(p.retain, "message on {} not flagged retained", p.topic);
                assert!(
                    topics.insert(p.topic.clone()),
                    "{} delivered twice",
                    p.topic
                );
            }
            _ => {}
        }
    }
    assert_eq!(topics.len(), N, "retained messages before the marker");
    eprintln!(
        "{} retained messages delivered in {:?}",
        topics.len(),
        started.elapsed()
    );

    let mut member = connect(addr, "group-member").await;
    member.subscribe("$share/g/cards/+", QoS::AtLeastOnce).await;
    publisher
        .client
        .publish("cards/marker", QoS::AtLeastOnce, false, "m")
        .await
        .expect("queued");
    assert_eq!(
        member.next_publish().await.topic,
        "cards/marker",
        "a shared subscription got a retained message"
    );
    broker.stop().await;
}

/// 4b. MQTT 5 retain handling: 0 sends the retained messages at every subscription, 1 only
///     when the subscription is new, 2 never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt5_retain_handling_is_honoured() {
    use rumqttc::v5::mqttbytes::QoS as QoS5;
    use rumqttc::v5::mqttbytes::v5::{Filter, Packet as Packet5, RetainForwardRule};

    let broker = broker().await;
    let addr = broker.local_addr();
    let mut publisher = connect(addr, "retainer").await;
    publisher
        .client
        .publish("r/kept", QoS::AtLeastOnce, true, "kept")
        .await
        .expect("queued");
    publisher.wait_pubacks(1).await;

    let options = rumqttc::v5::MqttOptions::new("v5-reader", addr.ip().to_string(), addr.port());
    let (client, mut eventloop) = rumqttc::v5::AsyncClient::new(options, 64);
    let (tx, mut packets) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        while let Ok(event) = eventloop.poll().await {
            if let rumqttc::v5::Event::Incoming(packet) = event
                && tx.send(packet).is_err()
            {
                return;
            }
        }
    });
    // Subscribes with `rule`, publishes a marker once subscribed, and returns the topics
    // received up to the marker.
    let mut subscribe = async |rule: RetainForwardRule| {
        let mut filter = Filter::new("r/#", QoS5::AtLeastOnce);
        filter.retain_forward_rule = rule;
        client.subscribe_many([filter]).await.expect("queued");
        let mut topics = Vec::new();
        loop {
            match within("a packet", packets.recv()).await.expect("connected") {
                Packet5::SubAck(_) => client
                    .publish("r/marker", QoS5::AtLeastOnce, false, "m")
                    .await
                    .expect("queued"),
                Packet5::Publish(p) if p.topic.as_ref() == b"r/marker" => return topics,
                Packet5::Publish(p) => topics.push(String::from_utf8_lossy(&p.topic).into_owned()),
                _ => {}
            }
        }
    };
    assert_eq!(
        subscribe(RetainForwardRule::OnEverySubscribe).await,
        ["r/kept"]
    );
    assert!(
        subscribe(RetainForwardRule::OnNewSubscribe)
            .await
            .is_empty(),
        "not new"
    );
    assert!(
        subscribe(RetainForwardRule::Never).await.is_empty(),
        "never"
    );
    assert_eq!(
        subscribe(RetainForwardRule::OnEverySubscribe).await,
        ["r/kept"]
    );
    client.unsubscribe("r/#").await.expect("queued");
    assert_eq!(
        subscribe(RetainForwardRule::OnNewSubscribe).await,
        ["r/kept"],
        "new"
    );
    driver.abort();
    broker.stop().await;
}

/// 5. Shared subscriptions: groups of different filters stay apart, members of one
///    group share the load, and another group on the same filter gets its own copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_groups_are_kept_apart() {
    const N: usize = 20;
    let broker = broker().await;
    let addr = broker.local_addr();

    // (consumer, shared filter): g1 has two members on a/+; g2 is on b/+; g3 is a
    // second group on a/+.
    let consumers = [
        ("g1-m1", "$share/g1/a/+"),
        ("g1-m2", "$share/g1/a/+"),
        ("g2-m1", "$share/g2/b/+"),
        ("g3-m1", "$share/g3/a/+"),
    ];
    let (tx, mut rx) = mpsc::unbounded_channel::<(&str, String, Vec<u8>)>();
    let mut tasks = Vec::new();
    for (name, filter) in consumers {
        let mut peer = connect(addr, name).await;
        peer.subscribe(filter, QoS::AtLeastOnce).await;
        peer.subscribe(&format!("sync/{name}"), QoS::AtLeastOnce)
            .await;
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(p) = peer.try_next_publish().await {
                if tx.send((name, p.topic, p.payload.to_vec())).is_err() {
                    return;
                }
            }
        }));
    }

    let publisher = connect(addr, "share-publisher").await;
    for i in 0..N {
        for prefix in ["a", "b"] {
            let topic = format!("{prefix}/{i}");
            publisher
                .client
                .publish(topic.clone(), QoS::AtLeastOnce, false, topic)
                .await
                .expect("queued");
        }
    }
    for (name, _) in consumers {
        publisher
            .client
            .publish(format!("sync/{name}"), QoS::AtLeastOnce, false, "sync")
            .await
            .expect("queued");
    }

    // Collect until every expected message and every consumer's sync marker arrived.
    let mut got: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut synced = BTreeSet::new();
    let count = |got: &BTreeMap<&str, Vec<String>>, names: &[&str]| -> usize {
        names.iter().map(|n| got.get(n).map_or(0, Vec::len)).sum()
    };
    while synced.len() < consumers.len()
        || count(&got, &["g1-m1", "g1-m2"]) < N
        || count(&got, &["g2-m1"]) < N
        || count(&got, &["g3-m1"]) < N
    {
        let (name, topic, payload) = within("shared deliveries", rx.recv()).await.expect("open");
        if topic.starts_with("sync/") {
            synced.insert(name);
        } else {
            assert_eq!(payload, topic.as_bytes());
            got.entry(name).or_default().push(topic);
        }
    }

    let expected =
        |prefix: &str| -> Vec<String> { (0..N).map(|i| format!("{prefix}/{i}")).collect() };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let mut g1: Vec<String> = got.get("g1-m1").cloned().unwrap_or_default();
    g1.extend(got.get("g1-m2").cloned().unwrap_or_default());
    assert_eq!(
        sorted(g1),
        sorted(expected("a")),
        "g1 must get each a/ message exactly once"
    );
    assert!(
        !got.get("g1-m1").is_none_or(Vec::is_empty),
        "g1-m1 got no share"
    );
    assert!(
        !got.get("g1-m2").is_none_or(Vec::is_empty),
        "g1-m2 got no share"
    );
    assert_eq!(
        sorted(got["g2-m1"].clone()),
        sorted(expected("b")),
        "g2 gets b/ only"
    );
    assert_eq!(
        sorted(got["g3-m1"].clone()),
        sorted(expected("a")),
        "g3 gets its own copy"
    );

    for task in tasks {
        task.abort();
    }
    broker.stop().await;
}

/// 6. A client whose connection drops without DISCONNECT has its will published,
///    retained when it asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_will_is_published_and_retained() {
    let broker = broker().await;
    let addr = broker.local_addr();

    let mut watcher = connect(addr, "will-watcher").await;
    watcher.subscribe("status/#", QoS::AtLeastOnce).await;

    let will = LastWill::new("status/agent-1", "offline", QoS::AtLeastOnce, true);
    let doomed = connect_with_will(addr, "agent-1", will).await;
    // Drop the socket without DISCONNECT, as a crashed process would.
    doomed.driver.abort();
    let dropped = Instant::now();
    drop(doomed);

    let will = watcher.next_publish().await;
    eprintln!(
        "will delivered {:?} after the connection dropped",
        dropped.elapsed()
    );
    assert_eq!(will.topic, "status/agent-1");
    assert_eq!(will.payload.as_ref(), b"offline");

    // A later subscriber gets it as a retained message.
    let mut late = connect(addr, "late-watcher").await;
    late.client
        .subscribe("status/#", QoS::AtLeastOnce)
        .await
        .expect("queued");
    let retained = late.next_publish().await;
    assert_eq!(retained.topic, "status/agent-1");
    assert!(retained.retain);
    assert_eq!(retained.payload.as_ref(), b"offline");

    // A clean DISCONNECT publishes no will. Raw bytes, so that DISCONNECT surely
    // reaches the broker before the socket closes. Once the broker has released the
    // session, a marker is published: the watcher's next message must be that marker.
    let mut polite = tokio::net::TcpStream::connect(addr).await.expect("connect");
    polite
        .write_all(&connect_with_will_packet(
            "agent-2",
            "status/agent-2",
            b"offline",
        ))
        .await
        .expect("CONNECT");
    let mut connack = [0u8; 4];
    within("CONNACK", polite.read_exact(&mut connack))
        .await
        .expect("CONNACK");
    assert_eq!(connack, [0x20, 2, 0, 0], "connection accepted");
    polite.write_all(&[0xe0, 0]).await.expect("DISCONNECT");
    drop(polite);
    // Left: the watcher's and the late watcher's sessions.
    crate::support::wait_sessions(&broker, 2).await;
    late.client
        .publish("status/marker", QoS::AtLeastOnce, false, "m")
        .await
        .expect("queued");
    assert_eq!(watcher.next_publish().await.topic, "status/marker");

    broker.stop().await;
}

/// An MQTT 3.1.1 CONNECT packet with a QoS 0, non-retained will.
fn connect_with_will_packet(client_id: &str, will_topic: &str, will: &[u8]) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(
            &u16::try_from(bytes.len())
                .expect("short field")
                .to_be_bytes(),
        );
        out.extend_from_slice(bytes);
    }
    // Protocol name and level, flags (clean session + will), keep-alive 30 s.
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0b0000_0110, 0, 30];
    field(&mut body, client_id.as_bytes());
    field(&mut body, will_topic.as_bytes());
    field(&mut body, will);
    let mut packet = vec![0x10, u8::try_from(body.len()).expect("short packet")];
    packet.extend(body);
    packet
}

/// Several brokers run in one process at once, each with its own messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_run_side_by_side() {
    let a = broker().await;
    let b = broker().await;
    assert_ne!(a.local_addr(), b.local_addr());

    // Each broker retains its own message on the same topic, from a client of the
    // same id, before anyone subscribes.
    let mut on_a = connect(a.local_addr(), "same-id").await;
    let mut on_b = connect(b.local_addr(), "same-id").await;
    on_a.client
        .publish("x", QoS::AtLeastOnce, true, "from a")
        .await
        .expect("queued");
    on_b.client
        .publish("x", QoS::AtLeastOnce, true, "from b")
        .await
        .expect("queued");
    on_a.wait_pubacks(1).await;
    on_b.wait_pubacks(1).await;
    on_a.client
        .subscribe("x", QoS::AtLeastOnce)
        .await
        .expect("queued");
    on_b.client
        .subscribe("x", QoS::AtLeastOnce)
        .await
        .expect("queued");
    assert_eq!(on_a.next_publish().await.payload.as_ref(), b"from a");
    assert_eq!(on_b.next_publish().await.payload.as_ref(), b"from b");

    a.stop().await;
    on_a.wait_disconnected().await;
    // b is unaffected by a's stop.
    on_b.client
        .publish("x", QoS::AtLeastOnce, false, "still")
        .await
        .expect("queued");
    assert_eq!(on_b.next_publish().await.payload.as_ref(), b"still");
    b.stop().await;
}

/// Garbage and oversized packets from a client close that client only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_does_not_hurt_the_broker() {
    let mut config = BrokerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.max_packet_size = 1024;
    let broker = Broker::start_with(config).await.expect("start");
    let addr = broker.local_addr();

    let mut watcher = connect(addr, "watcher").await;
    watcher.subscribe("t", QoS::AtLeastOnce).await;

    // Not MQTT at all.
    let mut garbage = tokio::net::TcpStream::connect(addr).await.expect("connect");
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\xff\xff\xff\xff\xff")
        .await
        .ok();
    // A CONNECT whose remaining length is malformed (five continuation bytes).
    let mut malformed = tokio::net::TcpStream::connect(addr).await.expect("connect");
    malformed
        .write_all(&[0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00])
        .await
        .ok();
    // A publish larger than max_packet_size.
    let mut big = connect(addr, "big").await;
    big.client
        .publish("t", QoS::AtLeastOnce, false, vec![0u8; 4096])
        .await
        .expect("queued");
    big.wait_disconnected().await;

    let mut sender = connect(addr, "sender").await;
    sender
        .client
        .publish("t", QoS::AtLeastOnce, false, "fine")
        .await
        .expect("queued");
    assert_eq!(watcher.next_publish().await.payload.as_ref(), b"fine");
    sender.wait_pubacks(1).await;
    broker.stop().await;
}

/// Clients past `max_connections` are refused; a freed slot can be taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limit_is_enforced() {
    let mut config = BrokerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.max_connections = 2;
    let broker = Broker::start_with(config).await.expect("start");
    let addr = broker.local_addr();

    let first = connect(addr, "first").await;
    let _second = connect(addr, "second").await;
    crate::support::wait_until("two connections", || broker.connection_count() == 2).await;
    let (client, eventloop) = rumqttc::AsyncClient::new(crate::support::options(addr, "third"), 8);
    let mut third = crate::support::drive(client, eventloop);
    match within("CONNACK", third.incoming.recv()).await {
        Some(Err(rumqttc::ConnectionError::ConnectionRefused(code))) => {
            assert_eq!(code, rumqttc::ConnectReturnCode::ServiceUnavailable)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }

    first.driver.abort();
    crate::support::wait_sessions(&broker, 1).await;
    connect(addr, "fourth").await;
    broker.stop().await;
}

/// An invalid configuration is refused before anything is bound.
#[tokio::test]
async fn invalid_config_is_refused() {
    let mut config = BrokerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.max_inflight = 0;
    assert!(matches!(
        Broker::start_with(config).await,
        Err(BrokerError::Config(_))
    ));
}

/// Dropping a broker without stop closes its listening socket.
#[tokio::test]
async fn dropping_a_broker_stops_listening() {
    let broker = broker().await;
    let addr = broker.local_addr();
    drop(broker);
    within("the port to close", async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// A client cannot publish to `$SYS/…` (or any topic reserved to the broker): the publish is
/// acknowledged and dropped, never delivered or retained, and the client stays connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_write_to_reserved_topics() {
    let broker = broker().await;
    let addr = broker.local_addr();
    let mut watcher = connect(addr, "watcher").await;
    watcher.subscribe("$SYS/#", QoS::AtLeastOnce).await;
    watcher.subscribe("after", QoS::AtLeastOnce).await;

    let mut writer = connect(addr, "writer").await;
    for (topic, retain) in [("$SYS/broker/pwned", true), ("$SYS/broker/x", false)] {
        writer
            .client
            .publish(topic, QoS::AtLeastOnce, retain, "pwned")
            .await
            .expect("queued");
    }
    writer
        .client
        .publish("after", QoS::AtLeastOnce, false, "marker")
        .await
        .expect("queued");
    writer.wait_pubacks(3).await;
    // Published after both, by the same client: arrives after them if they were delivered.
    let first = watcher.next_publish().await;
    assert_eq!(
        (first.topic.as_str(), first.payload.as_ref()),
        ("after", b"marker".as_ref())
    );

    // Nothing was retained either: a new subscriber gets no retained message, and the marker
    // published after its SUBACK comes first.
    let mut late = connect(addr, "late").await;
    late.subscribe("$SYS/#", QoS::AtLeastOnce).await;
    late.subscribe("after", QoS::AtLeastOnce).await;
    writer
        .client
        .publish("after", QoS::AtLeastOnce, false, "second")
        .await
        .expect("queued");
    let first = late.next_publish().await;
    assert_eq!(first.topic, "after");
    broker.stop().await;
}

/// A subscription deeper than the broker takes ([`mesh_broker::MAX_TOPIC_LEVELS`]) is
/// refused to its client alone, and a publish to a topic of any depth is matched without
/// the broker's matching going as deep as the topic: everyone else carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_topics_are_refused_or_matched_and_the_broker_carries_on() {
    let broker = broker().await;
    let addr = broker.local_addr();
    let mut watcher = connect(addr, "watcher").await;
    watcher.subscribe("deep/#", QoS::AtLeastOnce).await;
    let limit = mesh_broker::MAX_TOPIC_LEVELS;
    let at_limit = vec!["+"; limit].join("/");
    watcher.subscribe(&at_limit, QoS::AtLeastOnce).await;

    let mut deep = connect(addr, "deep").await;
    let too_deep = vec!["+"; limit + 1].join("/");
    deep.client
        .subscribe(&too_deep, QoS::AtLeastOnce)
        .await
        .expect("queued");
    let Packet::SubAck(ack) = deep.next_packet().await else {
        panic!("expected a SUBACK");
    };
    assert_eq!(ack.return_codes, [rumqttc::SubscribeReasonCode::Failure]);
    // A topic of 30,000 levels (60 kB, near the 64 kB MQTT allows), and one of exactly the
    // subscribed depth.
    let topic = format!("deep/{}", vec!["x"; 30_000].join("/"));
    deep.client
        .publish(&topic, QoS::AtLeastOnce, false, "down there")
        .await
        .expect("queued");
    deep.client
        .publish(
            vec!["y"; limit].join("/"),
            QoS::AtLeastOnce,
            false,
            "at the limit",
        )
        .await
        .expect("queued");
    deep.wait_pubacks(2).await;
    let first = watcher.next_publish().await;
    assert_eq!(first.topic.len(), topic.len());
    assert_eq!(first.payload.as_ref(), b"down there");
    assert_eq!(
        watcher.next_publish().await.payload.as_ref(),
        b"at the limit"
    );
    broker.stop().await;
}
