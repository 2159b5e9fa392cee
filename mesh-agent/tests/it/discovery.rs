//! Discovery, presence and admission: what a newcomer sees at once, card updates, the expiry
//! of a silent instance, the bound on concurrent tasks, and the start-up probe against a
//! broker (NATS's MQTT bridge) that accepts shared subscriptions and then delivers nothing.

use crate::support::*;
use mesh_agent::{Agent, AgentConfig, AgentError, Outcome, TaskContext, handler_fn};
use mesh_core::bus::{Bus, QoS};
use mesh_core::dialect::Method;
use mesh_core::model::TaskState;
use mesh_core::registry::{Registry, RegistryEvent};
use mesh_core::rpc::Reply;
use mesh_testkit::TestBroker;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mesh_testkit::both_brokers!(a_newcomer_sees_every_live_agent_at_once_from_retained_messages);
async fn a_newcomer_sees_every_live_agent_at_once_from_retained_messages(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let mut running = Vec::new();
    for name in ["echo", "writer", "files"] {
        running.push(mesh.run(mesh_example_agents::by_name(name).unwrap()).await);
    }
    // A registry that starts now knows all three as soon as the retained state arrived,
    // without waiting for a heartbeat.
    let started = Instant::now();
    let bus = Bus::connect(mesh.broker.bus_config()).await.unwrap();
    let newcomer = Registry::start(&bus, &mesh.topics, "gateway")
        .await
        .unwrap();
    assert!(newcomer.wait_loaded(WAIT).await);
    let took = started.elapsed();
    let names: Vec<String> = newcomer
        .agents()
        .into_iter()
        .filter(|a| a.online())
        .map(|a| a.name)
        .collect();
    assert_eq!(names, ["echo", "files", "writer"]);
    assert!(took < Duration::from_secs(1), "loaded in {took:?}");
    let echo = newcomer.agent("echo").unwrap();
    assert_eq!(echo.card.unwrap().skills[0].id, "echo");
    for agent in running {
        agent.shutdown().await;
    }
}

mesh_testkit::both_brokers!(a_newcomer_has_every_card_once_it_says_loaded);
async fn a_newcomer_has_every_card_once_it_says_loaded(broker: TestBroker) {
    // Enough retained cards and presences that a registry saying "loaded" too early, on
    // the marker it publishes to itself, would miss some.
    const AGENTS: usize = 300;
    let mesh = BusMesh::on(broker).await;
    let mut card = mesh_example_agents::echo::agent().agent_card().clone();
    let mut retained = Vec::new();
    for i in 0..AGENTS {
        let name = format!("agent-{i}");
        card.name = name.clone();
        let card_json = mesh_core::codec::card::write_card_combined(&card);
        let presence = serde_json::json!({"status": "online", "agent": name, "instance": "i1",
            "heartbeatMs": 60_000});
        for (topic, payload) in [
            (mesh.topics.agent_card(&name).unwrap(), card_json),
            (mesh.topics.presence(&name, "i1").unwrap(), presence),
        ] {
            let payload = payload.to_string().into_bytes();
            mesh.bus
                .publish(&topic, payload, QoS::AtLeastOnce, true)
                .await
                .unwrap();
            retained.push(topic);
        }
    }
    // The test's own registry has seen every one: the broker holds them all.
    tokio::time::timeout(WAIT, async {
        while mesh
            .registry
            .agents()
            .iter()
            .filter(|a| a.card.is_some())
            .count()
            < AGENTS
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the test's registry sees every card");

    let bus = Bus::connect(mesh.broker.bus_config()).await.unwrap();
    let newcomer = Registry::start(&bus, &mesh.topics, "gateway")
        .await
        .unwrap();
    assert!(newcomer.wait_loaded(WAIT).await);
    let agents = newcomer.agents();
    let with_card = agents.iter().filter(|a| a.card.is_some()).count();
    let online = agents.iter().filter(|a| a.online()).count();
    assert_eq!(
        (with_card, online),
        (AGENTS, AGENTS),
        "cards and online agents when loaded"
    );

    for topic in retained {
        mesh.bus
            .publish(&topic, Vec::new(), QoS::AtLeastOnce, true)
            .await
            .unwrap();
    }
}

mesh_testkit::both_brokers!(a_changed_card_reaches_the_registry);
async fn a_changed_card_reaches_the_registry(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let echo = mesh.run(mesh_example_agents::echo::agent()).await;
    let mut events = mesh.registry.subscribe();
    let mut card = mesh.registry.agent("echo").unwrap().card.unwrap();
    card.description = "a new description".into();
    echo.update_card(&card).await.unwrap();
    tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(RegistryEvent::CardChanged { agent }) = events.recv().await
                && agent == "echo"
            {
                break;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        mesh.registry
            .agent("echo")
            .unwrap()
            .card
            .unwrap()
            .description,
        "a new description"
    );
    echo.shutdown().await;
}

// An instance that announced itself and then fell silent (a hung process whose connection
// lingers) expires after three heartbeats.
mesh_testkit::both_brokers!(an_instance_whose_heartbeat_stops_expires);
async fn an_instance_whose_heartbeat_stops_expires(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let topic = mesh.topics.presence("hung", "instance-1").unwrap();
    let presence =
        br#"{"status":"online","agent":"hung","instance":"instance-1","heartbeatMs":100}"#;
    mesh.bus
        .publish(&topic, presence.to_vec(), QoS::AtLeastOnce, false)
        .await
        .unwrap();
    assert!(mesh.registry.wait_online("hung", WAIT).await);
    let silent_since = Instant::now();
    assert!(mesh.registry.wait_offline("hung", WAIT).await);
    let took = silent_since.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "not before three heartbeats: {took:?}"
    );
    assert!(took < Duration::from_secs(2), "soon after: {took:?}");
}

mesh_testkit::both_brokers!(concurrent_tasks_are_bounded_and_the_rest_wait);
async fn concurrent_tasks_are_bounded_and_the_rest_wait(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let now = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (now2, peak2) = (now.clone(), peak.clone());
    let agent = Agent::new(
        "narrow",
        handler_fn(move |_ctx: TaskContext| {
            let (now, peak) = (now2.clone(), peak2.clone());
            async move {
                let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(running, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok(Outcome::completed())
            }
        }),
    );
    let config = AgentConfig {
        max_concurrent_tasks: 2,
        ..mesh.config()
    };
    let running = mesh.run_with(agent, config).await;
    let mut streams = Vec::new();
    for i in 0..8 {
        streams.push(
            mesh.send("narrow", &format!("{i}"), Method::SendMessage)
                .await
                .1,
        );
    }
    for stream in streams {
        let Ok(Reply::Task(task)) = collect(stream).await.pop().unwrap().reply else {
            panic!("a task")
        };
        assert_eq!(task.status.state, TaskState::Completed);
    }
    assert_eq!(
        peak.load(Ordering::SeqCst),
        2,
        "never more than the bound at once"
    );
    running.shutdown().await;
}

/// nats-server with its MQTT listener on free ports, killed when dropped.
struct NatsMqtt {
    _child: tokio::process::Child,
    dir: std::path::PathBuf,
    port: u16,
}

impl NatsMqtt {
    async fn start() -> Option<NatsMqtt> {
        let binary = [
            "/usr/sbin/nats-server",
            "/usr/bin/nats-server",
            "/usr/local/bin/nats-server",
        ]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let dir = std::env::temp_dir().join(format!("mesh-nats-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let log_path = dir.join("nats.log");
        // A port probed free can be taken before nats-server binds it (another test's
        // connection, say): then nats-server exits, and another pair of ports is tried.
        for _attempt in 0..5 {
            let (client_port, mqtt_port) = (free(), free());
            let config = format!(
                "listen: 127.0.0.1:{client_port}\nserver_name: mesh_test\n\
                 jetstream {{ store_dir: \"{}\" }}\nmqtt {{ listen: 127.0.0.1:{mqtt_port} }}\n",
                dir.join("js").display()
            );
            std::fs::write(dir.join("nats.conf"), config).unwrap();
            let mut child = tokio::process::Command::new(binary)
                .arg("-c")
                .arg(dir.join("nats.conf"))
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&log_path).unwrap())
                .kill_on_drop(true)
                .spawn()
                .ok()?;
            let started = Instant::now();
            loop {
                if tokio::net::TcpStream::connect(("127.0.0.1", mqtt_port))
                    .await
                    .is_ok()
                {
                    return Some(NatsMqtt {
                        _child: child,
                        dir,
                        port: mqtt_port,
                    });
                }
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                assert!(
                    started.elapsed() < WAIT,
                    "nats-server's MQTT listener did not come up: {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!(
            "nats-server exited at every attempt: {}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    }
}

impl Drop for NatsMqtt {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_broker_that_drops_shared_subscriptions_the_probe_fails_loudly() {
    let Some(nats) = NatsMqtt::start().await else {
        eprintln!("SKIPPED: no nats-server on this machine");
        return;
    };
    let url = format!("mqtt://127.0.0.1:{}", nats.port);
    let namespace = mesh_testkit::fresh_namespace();
    let config = AgentConfig {
        namespace: namespace.clone(),
        probe_timeout: Duration::from_secs(2),
        ..AgentConfig::default()
    };
    let bus_config = || mesh_core::bus::BusConfig::new(&url).unwrap();

    // Shared subscriptions on: NATS accepts the $share filter and delivers nothing. The
    // instance notices at start instead of running as a silent dead agent.
    let error = mesh_example_agents::echo::agent()
        .config(config.clone())
        .start(bus_config())
        .await
        .err()
        .expect("the probe fails");
    assert!(matches!(error, AgentError::ProbeFailed { .. }), "{error}");
    assert!(
        error.to_string().contains("shared subscriptions"),
        "{error}"
    );

    // Off: one instance, and it serves.
    let echo = mesh_example_agents::echo::agent()
        .config(AgentConfig {
            shared_subscription: false,
            ..config
        })
        .start(bus_config())
        .await
        .expect("without shared subscriptions the agent starts");
    let bus = Bus::connect(bus_config()).await.unwrap();
    let topics = mesh_core::topic::Topics::new(namespace).unwrap();
    let requester = mesh_core::requester::Requester::start(
        bus,
        topics,
        mesh_core::requester::RequesterKind::Gateway,
        "gw",
        "i1",
    )
    .await
    .unwrap();
    let answered_by = requester.ping("echo", WAIT).await.unwrap();
    assert_eq!(answered_by.as_deref(), Some(echo.instance_id()));
    echo.shutdown().await;
}

mesh_testkit::both_brokers!(a_crashed_instances_retained_will_is_cleared_by_the_next_registry);
async fn a_crashed_instances_retained_will_is_cleared_by_the_next_registry(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let crashing = mesh.run(mesh_example_agents::echo::agent()).await;
    let presence_topic = mesh
        .topics
        .presence("echo", crashing.instance_id())
        .unwrap();
    crashing.abort();
    assert!(mesh.registry.wait_offline("echo", WAIT).await);

    // A registry that starts now receives the retained will and clears it.
    let bus = Bus::connect(mesh.broker.bus_config()).await.unwrap();
    let newcomer = Registry::start(&bus, &mesh.topics, "gateway")
        .await
        .unwrap();
    assert!(newcomer.wait_loaded(WAIT).await);
    assert!(!newcomer.is_online("echo"));

    // Afterwards the broker holds no retained presence for that instance: a fresh subscriber
    // gets nothing on the topic (the marker published after subscribing arrives first).
    let watcher = Bus::connect(mesh.broker.bus_config()).await.unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let mut retained = watcher
            .subscribe(&presence_topic, QoS::AtLeastOnce)
            .await
            .unwrap();
        let marker = mesh.topics.presence("echo", "marker").unwrap();
        let mut marker_sub = watcher.subscribe(&marker, QoS::AtLeastOnce).await.unwrap();
        watcher
            .publish(&marker, b"m".to_vec(), QoS::AtLeastOnce, false)
            .await
            .unwrap();
        tokio::time::timeout(WAIT, marker_sub.recv())
            .await
            .unwrap()
            .unwrap();
        match retained.try_recv() {
            None => break,
            Some(m) if m.payload.is_empty() => break,
            Some(_) => {
                assert!(
                    Instant::now() < deadline,
                    "the stale will is still retained"
                );
                drop(retained);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
