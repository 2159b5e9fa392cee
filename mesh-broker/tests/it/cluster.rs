//! A cluster of three brokers in one process (feature `cluster`): what a client on one node
//! publishes reaches the subscribers of the other nodes, retained messages and wills
//! included, and a shared subscription with members on two nodes gets each message once.
//!
//! The nodes take a moment to reach each other: each test first publishes probes from one
//! node until a subscriber on the other node receives one (bounded by [`FORM`]): node 1
//! starts before its peers, and its gRPC clients retry their first connection every 3 s.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{
    Peer, account, accounts, connect, connect_with, connect_with_will, options, refused, within,
};
use mesh_broker::{Access, Broker, BrokerConfig, ClusterConfig};
use rumqttc::{ConnectReturnCode, ConnectionError, LastWill, QoS};

/// How long a cluster may take to form (the nodes come up in 0.7–3.6 s).
const FORM: Duration = Duration::from_secs(30);

/// How often a probe is published while the cluster forms.
const PROBE_EVERY: Duration = Duration::from_millis(50);

/// Free loopback ports for the nodes' gRPC servers: bound, read, then released.
fn free_grpc_addrs(n: usize) -> Vec<SocketAddr> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("bound address"))
        .collect()
}

/// Starts `n` brokers (node ids 1..=n) that form one cluster, each with MQTT on a free
/// loopback port, and waits until they have formed it.
async fn cluster(n: usize) -> Vec<Broker> {
    cluster_with(n, None).await
}

/// [`cluster`], every node with the same accounts and ACL when `access` is given.
async fn cluster_with(n: usize, access: Option<Arc<Access>>) -> Vec<Broker> {
    let grpc = free_grpc_addrs(n);
    let mut nodes = Vec::with_capacity(n);
    for (i, grpc_addr) in grpc.iter().enumerate() {
        let node_id = i as u64 + 1;
        let peers = grpc
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(j, addr)| (j as u64 + 1, addr.to_string()))
            .collect();
        let mut config = BrokerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
        config.access = access.clone();
        config.cluster = Some(ClusterConfig {
            node_id,
            grpc_addr: *grpc_addr,
            peers,
        });
        nodes.push(
            Broker::start_with(config)
                .await
                .unwrap_or_else(|e| panic!("node {node_id} starts: {e}")),
        );
    }
    formed(&nodes).await;
    nodes
}

/// Waits until every node sees every peer answering (bounded by [`FORM`]): before that, what
/// a node forwards to a peer it does not know to answer may be dropped.
async fn formed(nodes: &[Broker]) {
    let started = Instant::now();
    let all_answer = || {
        nodes
            .iter()
            .all(|n| n.cluster_peers().iter().all(|p| p.answering))
    };
    while !all_answer() {
        assert!(
            started.elapsed() < FORM,
            "the cluster did not form within {FORM:?}: {:?}",
            nodes.iter().map(Broker::cluster_peers).collect::<Vec<_>>()
        );
        tokio::time::sleep(PROBE_EVERY).await;
    }
    eprintln!(
        "cluster of {} formed in {:?}",
        nodes.len(),
        started.elapsed()
    );
}

/// Waits until a message published on `from` reaches a subscriber on `to`, publishing a
/// probe every [`PROBE_EVERY`] for at most [`FORM`].
async fn wait_route(from: &Broker, to: &Broker, name: &str) {
    let topic = format!("probe/{name}");
    let mut subscriber = connect(to.local_addr(), &format!("probe-sub-{name}")).await;
    subscriber.subscribe(&topic, QoS::AtMostOnce).await;
    let publisher = connect(from.local_addr(), &format!("probe-pub-{name}")).await;
    let started = Instant::now();
    let formed = tokio::time::timeout(FORM, async {
        let mut tick = tokio::time::interval(PROBE_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    publisher
                        .client
                        .publish(&topic, QoS::AtMostOnce, false, "probe")
                        .await
                        .expect("probe queued");
                }
                p = subscriber.try_next_publish() => {
                    assert!(p.is_some(), "probe subscriber lost its connection");
                    return;
                }
            }
        }
    })
    .await;
    assert!(formed.is_ok(), "route {name} not formed within {FORM:?}");
    eprintln!("route {name} formed in {:?}", started.elapsed());
    publisher.driver.abort();
    subscriber.driver.abort();
}

/// Stops every node.
async fn stop(nodes: Vec<Broker>) {
    for node in nodes {
        node.stop().await;
    }
}

/// The process's resident set size in kB (Linux), for the report.
fn rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Receives the next PUBLISH and returns its topic and payload.
async fn next(peer: &mut Peer) -> (String, Vec<u8>) {
    let p = peer.next_publish().await;
    (p.topic, p.payload.to_vec())
}

/// 1. A publish on node 1 reaches a subscriber on node 2 and one on node 3, once each
///    (prints the process's RSS with the three nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_on_one_node_reaches_subscribers_on_the_others() {
    let before = rss_kb();
    let nodes = cluster(3).await;
    wait_route(&nodes[0], &nodes[1], "pub-1-2").await;
    wait_route(&nodes[0], &nodes[2], "pub-1-3").await;
    if let (Some(before), Some(after)) = (before, rss_kb()) {
        eprintln!(
            "RSS: {before} kB before the cluster, {after} kB with 3 nodes formed (+{} kB)",
            after.saturating_sub(before)
        );
    }

    let mut on2 = connect(nodes[1].local_addr(), "sub-2").await;
    on2.subscribe("news/#", QoS::AtLeastOnce).await;
    let mut on3 = connect(nodes[2].local_addr(), "sub-3").await;
    on3.subscribe("news/#", QoS::AtLeastOnce).await;
    let mut publisher = connect(nodes[0].local_addr(), "pub-1").await;
    for payload in ["first", "second"] {
        publisher
            .client
            .publish("news/today", QoS::AtLeastOnce, false, payload)
            .await
            .expect("publish queued");
    }
    publisher.wait_pubacks(2).await;

    // Both arrive, each once. Their order is not kept across nodes: rmqtt forwards each
    // publish to the other nodes from a task of its own.
    for sub in [&mut on2, &mut on3] {
        let mut got = vec![next(sub).await, next(sub).await];
        got.sort();
        assert_eq!(
            got,
            [
                ("news/today".to_string(), b"first".to_vec()),
                ("news/today".to_string(), b"second".to_vec())
            ]
        );
    }
    stop(nodes).await;
}

/// 2. A message retained on node 1 is sent to a client that subscribes on node 3
///    afterwards. Node 3 gets its copy of the retained message asynchronously, so a
///    fresh subscriber tries until it arrives (within [`FORM`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_on_one_node_is_sent_to_a_later_subscriber_on_another() {
    let nodes = cluster(3).await;
    wait_route(&nodes[0], &nodes[2], "ret-1-3").await;

    let mut publisher = connect(nodes[0].local_addr(), "retainer").await;
    publisher
        .client
        .publish("state/lamp", QoS::AtLeastOnce, true, "on")
        .await
        .expect("publish queued");
    publisher.wait_pubacks(1).await;

    let started = Instant::now();
    let mut attempt = 0;
    let retained = loop {
        attempt += 1;
        let mut late = connect(nodes[2].local_addr(), &format!("late-{attempt}")).await;
        late.subscribe("state/#", QoS::AtLeastOnce).await;
        // Retained messages are queued before the SUBACK: one that is there is already
        // on its way.
        match tokio::time::timeout(Duration::from_millis(200), late.next_publish()).await {
            Ok(p) => break p,
            Err(_) => {
                assert!(
                    started.elapsed() < FORM,
                    "the retained message never reached node 3"
                );
                late.driver.abort();
            }
        }
    };
    eprintln!(
        "retained message on node 3 after {:?} ({attempt} subscriptions)",
        started.elapsed()
    );
    assert!(retained.retain, "sent as a retained message");
    assert_eq!(retained.topic, "state/lamp");
    assert_eq!(retained.payload.as_ref(), b"on");
    stop(nodes).await;
}

/// 3. A shared group with one member on node 2 and one on node 3 gets each of 100
///    messages published on node 1 exactly once, spread over both members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_group_across_nodes_gets_each_message_once() {
    const N: usize = 100;
    let nodes = cluster(3).await;
    wait_route(&nodes[0], &nodes[1], "share-1-2").await;
    wait_route(&nodes[0], &nodes[2], "share-1-3").await;

    let mut members = [
        connect(nodes[1].local_addr(), "member-2").await,
        connect(nodes[2].local_addr(), "member-3").await,
    ];
    for member in &mut members {
        member.subscribe("$share/g/jobs/+", QoS::AtLeastOnce).await;
        // A plain subscription too, for the end marker below.
        member.subscribe("end/jobs", QoS::AtLeastOnce).await;
    }
    let mut publisher = connect(nodes[0].local_addr(), "dispatcher").await;
    for i in 0..N {
        publisher
            .client
            .publish("jobs/run", QoS::AtLeastOnce, false, i.to_string())
            .await
            .expect("publish queued");
    }
    publisher.wait_pubacks(N).await;
    publisher
        .client
        .publish("end/jobs", QoS::AtLeastOnce, false, "end")
        .await
        .expect("publish queued");
    publisher.wait_pubacks(1).await;

    // Every member reads until it has the end marker and all N jobs have arrived
    // between them; a job received twice, by one member or both, is counted twice.
    let mut received: BTreeMap<usize, usize> = BTreeMap::new();
    let mut per_member = [0usize; 2];
    let mut ended = [false; 2];
    let [member2, member3] = &mut members;
    within("all shared messages", async {
        while received.len() < N || !ended.iter().all(|e| *e) {
            tokio::select! {
                p = member2.next_publish(), if !ended[0] || received.len() < N => {
                    tally(0, p, &mut received, &mut per_member, &mut ended);
                }
                p = member3.next_publish(), if !ended[1] || received.len() < N => {
                    tally(1, p, &mut received, &mut per_member, &mut ended);
                }
            }
        }
    })
    .await;
    eprintln!(
        "shared group: member on node 2 got {}, on node 3 {}",
        per_member[0], per_member[1]
    );
    let twice: Vec<_> = received.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(
        received.keys().copied().collect::<Vec<_>>(),
        (0..N).collect::<Vec<_>>()
    );
    assert!(
        per_member.iter().all(|n| *n > 0),
        "both members get messages: {per_member:?}"
    );
    stop(nodes).await;
}

/// Counts one message received by member `m` of the shared group.
fn tally(
    m: usize,
    p: rumqttc::Publish,
    received: &mut BTreeMap<usize, usize>,
    per_member: &mut [usize; 2],
    ended: &mut [bool; 2],
) {
    if p.topic == "end/jobs" {
        ended[m] = true;
        return;
    }
    let i: usize = std::str::from_utf8(&p.payload)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unexpected payload {:?}", p.payload));
    *received.entry(i).or_default() += 1;
    per_member[m] += 1;
}

/// 4. The will of a client of node 2 that drops its connection reaches a subscriber on
///    node 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn will_on_one_node_reaches_a_subscriber_on_another() {
    let nodes = cluster(3).await;
    wait_route(&nodes[1], &nodes[2], "will-2-3").await;

    let mut watcher = connect(nodes[2].local_addr(), "watcher").await;
    watcher.subscribe("presence/+", QoS::AtLeastOnce).await;
    let will = LastWill::new("presence/agent", "gone", QoS::AtLeastOnce, false);
    let agent = connect_with_will(nodes[1].local_addr(), "agent", will).await;
    // Dropping the socket without DISCONNECT makes the broker publish the will.
    agent.driver.abort();
    drop(agent.client);

    let p = watcher.next_publish().await;
    assert_eq!(p.topic, "presence/agent");
    assert_eq!(p.payload.as_ref(), b"gone");
    stop(nodes).await;
}

/// 5. A node whose only peer is down takes new clients at once. rmqtt asks every peer to
///    drop a session of the same client id and waits up to 15 s for an answer; the node
///    sees that its peer's address refuses connections, opens the peer's breaker and stops
///    waiting. A client that gives up after 2 s retries until it gets its CONNACK; before
///    this, it never got one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_only_peer_is_down_takes_new_clients_within_seconds() {
    let grpc = free_grpc_addrs(2);
    let mut config = BrokerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
    // Node 2 is never started: its port refuses connections.
    config.cluster = Some(ClusterConfig {
        node_id: 1,
        grpc_addr: grpc[0],
        peers: vec![(2, grpc[1].to_string())],
    });
    let node = Broker::start_with(config).await.expect("node 1 starts");

    let started = Instant::now();
    let mut attempts = 0;
    let connected = tokio::time::timeout(FORM, async {
        loop {
            attempts += 1;
            let options = crate::support::options(node.local_addr(), &format!("lonely-{attempts}"));
            let (_client, mut eventloop) = rumqttc::AsyncClient::new(options, 10);
            let mut network = rumqttc::NetworkOptions::new();
            network.set_connection_timeout(2);
            eventloop.set_network_options(network);
            if let Ok(Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_)))) =
                tokio::time::timeout(Duration::from_secs(3), eventloop.poll()).await
            {
                return;
            }
        }
    })
    .await;
    eprintln!(
        "CONNACK after {:?} ({attempts} attempts) with the only peer down",
        started.elapsed()
    );
    assert!(connected.is_ok(), "no CONNACK within {FORM:?}");
    let peers = node.cluster_peers();
    assert_eq!(peers.len(), 1, "{peers:?}");
    assert_eq!((peers[0].id, peers[0].answering), (2, false), "{peers:?}");
    within("the node stops", node.stop()).await;
}

/// 6. When one node of three dies, the other two go on: a new client connects to node 1
///    at once (node 2 answers its CONNECT's broadcast), and QoS 1 messages published on
///    node 1 all reach a subscriber on node 2, the first ones after at most the call
///    timeout to the dead node, the later ones without waiting for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_one_node_dies_the_others_go_on() {
    const N: usize = 20;
    let mut nodes = cluster(3).await;
    wait_route(&nodes[0], &nodes[1], "die-1-2").await;
    wait_route(&nodes[0], &nodes[2], "die-1-3").await;
    let mut on2 = connect(nodes[1].local_addr(), "survivor-sub").await;
    on2.subscribe("work/#", QoS::AtLeastOnce).await;

    let dead = nodes.pop().expect("three nodes");
    within("node 3 stops", dead.stop()).await;

    let connecting = Instant::now();
    let mut publisher = within(
        "a CONNECT to node 1 with node 3 dead",
        connect(nodes[0].local_addr(), "survivor-pub"),
    )
    .await;
    eprintln!("CONNACK from node 1 after {:?}", connecting.elapsed());

    let started = Instant::now();
    let mut each = Vec::with_capacity(N);
    for i in 0..N {
        let sent = Instant::now();
        publisher
            .client
            .publish("work/item", QoS::AtLeastOnce, false, i.to_string())
            .await
            .expect("publish queued");
        let p = within("a message from node 1 on node 2", on2.next_publish()).await;
        assert_eq!(p.payload.as_ref(), i.to_string().as_bytes());
        within("the PUBACK", publisher.wait_pubacks(1)).await;
        each.push(sent.elapsed());
    }
    eprintln!(
        "{N} messages through in {:?} with node 3 dead; each: {each:?}",
        started.elapsed()
    );
    // The breaker is open by the end: the last messages do not wait for node 3.
    let last = each[N - 5..].iter().max().copied().unwrap_or_default();
    assert!(
        last < ClusterConfig::CALL_TIMEOUT,
        "the last messages still wait for the dead node: {each:?}"
    );
    let peers = nodes[0].cluster_peers();
    let answering = |id| peers.iter().find(|p| p.id == id).map(|p| p.answering);
    assert_eq!(answering(2), Some(true), "{peers:?}");
    assert_eq!(answering(3), Some(false), "{peers:?}");
    stop(nodes).await;
}

/// 7. Every node enforces the accounts and the ACL: each refuses an anonymous client, and a
///    publish outside its account's grant, made on node 1 or node 2, reaches no subscriber
///    on node 3, while one the account may make does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_enforces_the_accounts_and_the_acl() {
    let nodes = cluster_with(3, Some(accounts())).await;
    for node in &nodes {
        let error = refused(options(node.local_addr(), "anonymous")).await;
        assert!(
            matches!(
                error,
                ConnectionError::ConnectionRefused(ConnectReturnCode::NotAuthorized)
            ),
            "{error:?}"
        );
    }
    let mut echo = connect_with(account(nodes[2].local_addr(), "echo-3", "echo", "echo-pw")).await;
    echo.subscribe("t/echo/+", QoS::AtLeastOnce).await;
    for (i, node) in nodes[..2].iter().enumerate() {
        let addr = node.local_addr();
        let mut spy = connect_with(account(addr, &format!("spy-{i}"), "spy", "spy-pw")).await;
        let admin = connect_with(account(addr, &format!("admin-{i}"), "admin", "admin-pw")).await;
        // The forged request goes first, on the same node: were it forwarded, it would
        // arrive first.
        spy.client
            .publish("t/echo/forged", QoS::AtLeastOnce, false, "forged")
            .await
            .expect("publish queued");
        within("the forged publish's PUBACK", spy.wait_pubacks(1)).await;
        let real = format!("real-{i}");
        admin
            .client
            .publish(
                format!("t/echo/{real}"),
                QoS::AtLeastOnce,
                false,
                real.clone(),
            )
            .await
            .expect("publish queued");
        let (topic, _) = within("the granted publish on node 3", next(&mut echo)).await;
        assert_eq!(
            topic,
            format!("t/echo/{real}"),
            "a forged publish got through"
        );
    }
    stop(nodes).await;
}
