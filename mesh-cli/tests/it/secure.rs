//! The secure profile as `mesh secure` generates it, run for real (`mesh broker` with the
//! generated files, and again Mosquitto with its generated config; `mesh agent` and
//! `mesh gateway` with their generated account files): anonymous clients and wrong passwords
//! are refused, each agent account is limited to its own topics, the forgeries an open bus
//! allowed fail (a forged reply to the gateway, another agent forging a peer call's answer, a
//! forged retained card), and the mesh works, peer calls included, over HTTPS for clients with
//! the profile's API key, each card checked against the profile's trust store and served
//! signed by the gateway's key.

use mesh_core::bus::{Bus, BusConfig, BusError, QoS};
use mesh_core::dialect::Method;
use mesh_core::model::{Message, Role, send_params};
use mesh_core::requester::{Requester, RequesterKind, SendOptions};
use mesh_core::topic::Topics;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const MESH: &str = env!("CARGO_BIN_EXE_mesh");
const WAIT: Duration = Duration::from_secs(20);

/// Runs `mesh` with `args` and returns it with the first line it printed that contains
/// `says`.
async fn run_until(args: &[&str], says: &str) -> (Child, String) {
    let mut child = Command::new(MESH)
        .args(args)
        .env_remove("MESH_CONFIG")
        .env_remove("MESH_BROKER_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("mesh starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains(says) {
                return line;
            }
        }
        panic!("mesh {args:?} ended without saying {says:?}");
    })
    .await
    .unwrap_or_else(|_| panic!("mesh {args:?} did not say {says:?} in time"));
    (child, line)
}

/// The next message of `subscription` (bounded).
async fn next(subscription: &mut mesh_core::bus::Subscription) -> mesh_core::bus::BusMessage {
    tokio::time::timeout(WAIT, subscription.recv())
        .await
        .expect("a message in time")
        .expect("the subscription is open")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The broker URL (with its password) of `account`, from its generated config file.
fn account_url(dir: &Path, account: &str) -> String {
    let text =
        std::fs::read_to_string(dir.join("accounts").join(format!("{account}.toml"))).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    table["broker_url"].as_str().unwrap().to_owned()
}

async fn connect(url: &str) -> Result<Bus, BusError> {
    let config =
        BusConfig::new(url)?.with_client_id(format!("test-{}", uuid::Uuid::new_v4().simple()));
    Bus::connect(config).await
}

async fn connect_as(dir: &Path, account: &str) -> Bus {
    connect(&account_url(dir, account))
        .await
        .unwrap_or_else(|e| panic!("{account} connects: {e}"))
}

enum Broker {
    Embedded,
    Mosquitto,
}

/// Starts the broker of the profile in `dir` on `port`.
async fn start_broker(kind: Broker, dir: &Path, port: u16) -> Child {
    match kind {
        Broker::Embedded => {
            let config = dir.join("broker.toml");
            let addr = format!("127.0.0.1:{port}");
            run_until(
                &[
                    "broker",
                    "--config",
                    config.to_str().unwrap(),
                    "--broker-addr",
                    &addr,
                ],
                "broker listening",
            )
            .await
            .0
        }
        Broker::Mosquitto => {
            let binary = mesh_testkit::mosquitto_binary().expect("mosquitto is installed");
            let child = Command::new(binary)
                .arg("-c")
                .arg(dir.join("broker").join("mosquitto.conf"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("mosquitto starts");
            tokio::time::timeout(WAIT, async {
                while tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_err()
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("mosquitto listens");
            child
        }
    }
}

fn profile_dir() -> PathBuf {
    std::env::temp_dir().join(format!("mesh-secure-{}", uuid::Uuid::new_v4().simple()))
}

async fn the_generated_profile_holds(kind: Broker) {
    let dir = profile_dir();
    let port = free_port();
    let namespace = mesh_testkit::fresh_namespace();
    let broker_url = format!("mqtt://127.0.0.1:{port}");
    let generated = Command::new(MESH)
        .args([
            "secure",
            dir.to_str().unwrap(),
            "--namespace",
            &namespace,
            "--broker-url",
            &broker_url,
            "--operator",
            "ops",
        ])
        .env_remove("MESH_CONFIG")
        .output()
        .await
        .unwrap();
    assert!(generated.status.success(), "{generated:?}");
    let _broker = start_broker(kind, &dir, port).await;
    let topics = Topics::new(namespace.clone()).unwrap();

    // Anonymous clients and wrong passwords are refused.
    assert!(matches!(
        connect(&broker_url).await,
        Err(BusError::Connect { .. })
    ));
    let echo_url = account_url(&dir, "echo");
    let wrong = echo_url.replacen("echo:", "echo:x", 1);
    assert!(matches!(
        connect(&wrong).await,
        Err(BusError::Connect { .. })
    ));
    let writer_as_echo = echo_url.replacen("echo:", "writer:", 1);
    assert!(matches!(
        connect(&writer_as_echo).await,
        Err(BusError::Connect { .. })
    ));

    // The mesh, each part with its own account.
    let config = |account: &str| dir.join("accounts").join(format!("{account}.toml"));
    let mut agents = Vec::new();
    for name in ["echo", "writer", "orchestrator"] {
        let file = config(name);
        agents.push(
            run_until(
                &["agent", name, "--config", file.to_str().unwrap()],
                "online",
            )
            .await
            .0,
        );
    }
    let gateway_config = config("gateway");
    let (_gateway, line) = run_until(
        &[
            "gateway",
            "--config",
            gateway_config.to_str().unwrap(),
            "--http-addr",
            "127.0.0.1:0",
            "--memory-store",
        ],
        "gateway listening",
    )
    .await;
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http"))
        .unwrap()
        .to_owned();
    // The gateway serves HTTPS only, with the certificate the profile made for it.
    assert!(url.starts_with("https://"), "{line}");
    mesh_core::tls::install_crypto_provider();
    let ca = std::fs::read(dir.join("tls").join("ca.pem")).unwrap();
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .build()
        .unwrap();
    // Only clients with the profile's API key get in.
    let key = std::fs::read_to_string(dir.join("clients").join("client.key")).unwrap();
    let unauthenticated = http
        .post(format!("{url}/agents/echo"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    let answer: Value = http
        .post(format!("{url}/agents/orchestrator"))
        .bearer_auth(key.trim())
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
            "kind": "message", "role": "user", "messageId": "m-1",
            "parts": [{"kind": "text", "text": "please write about brokers"}]}}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["result"]["status"]["state"], "completed", "{answer}");
    assert!(
        answer.to_string().contains("[writer]"),
        "the peer call went through: {answer}"
    );

    // The CLI reaches the HTTPS gateway with the profile's CA and API key.
    let ca_file = dir.join("tls").join("ca.pem");
    let cli = Command::new(MESH)
        .args([
            "send",
            "echo",
            "hello over https",
            "--gateway-url",
            &url,
            "--gateway-ca",
        ])
        .arg(&ca_file)
        .arg(format!("--gateway-key={}", key.trim()))
        .args(["--broker-url", "mqtt://127.0.0.1:1"])
        .env_remove("MESH_CONFIG")
        .output()
        .await
        .unwrap();
    assert!(cli.status.success(), "{cli:?}");
    assert_eq!(
        String::from_utf8_lossy(&cli.stdout).trim(),
        "hello over https"
    );

    // Each agent account is limited to its own topics: echo cannot read another agent's
    // requests, the gateway's replies or another agent's peer-call replies. The embedded
    // broker refuses such a subscription outright; Mosquitto accepts a wildcard subscription
    // and then delivers only what the account may read. Either way, of a topic it may not
    // read and one it may, published in that order, only the second reaches it.
    let echo = connect_as(&dir, "echo").await;
    let gateway = connect_as(&dir, "gateway").await;
    let writer = connect_as(&dir, "writer").await;
    let cases = [
        (
            format!("{namespace}/a2a/v1/agent/request/+/+"),
            vec![
                topics.agent_request("writer", "spied").unwrap(),
                topics.agent_request("echo", "own").unwrap(),
            ],
            &gateway,
        ),
        (
            format!("{namespace}/a2a/v1/+/response/#"),
            vec![
                topics
                    .gateway_response("gateway", "g1", "writer", "spied")
                    .unwrap(),
                topics
                    .agent_response("orchestrator", "o1", "writer", "spied")
                    .unwrap(),
                topics
                    .agent_response("echo", "e1", "writer", "own")
                    .unwrap(),
            ],
            &writer,
        ),
    ];
    for (filter, publishes, publisher) in cases {
        match echo.subscribe(&filter, QoS::AtLeastOnce).await {
            Err(BusError::SubscribeRejected { .. }) => {}
            Ok(mut subscription) => {
                for topic in &publishes {
                    publisher
                        .publish(topic, b"x".to_vec(), QoS::AtLeastOnce, false)
                        .await
                        .unwrap();
                }
                let first = next(&mut subscription).await;
                assert_eq!(
                    Some(&first.topic),
                    publishes.last(),
                    "echo reads only its own topics through {filter}"
                );
            }
            Err(other) => panic!("{filter}: {other}"),
        }
    }
    // …nor publish a request to writer, a reply in the writer's name to the orchestrator's
    // peer call, or writer's card: each is acknowledged and dropped. Those who may read
    // each topic see the marker published after it first.
    let writer_requests = connect_as(&dir, "writer").await;
    let mut requests = writer_requests
        .subscribe(
            &topics.agent_request_filter("writer").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    let orchestrator = connect_as(&dir, "orchestrator").await;
    let mut peer_replies = orchestrator
        .subscribe(
            &format!("{namespace}/a2a/v1/agent/response/orchestrator/#"),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    let forged_reply = topics
        .agent_response("orchestrator", "o1", "writer", "t-1")
        .unwrap();
    for topic in [
        topics.agent_request("writer", "forged").unwrap(),
        forged_reply.clone(),
    ] {
        echo.publish(&topic, b"FORGED".to_vec(), QoS::AtLeastOnce, false)
            .await
            .unwrap();
    }
    echo.publish(
        &topics.agent_card("writer").unwrap(),
        br#"{"name":"writer","description":"FORGED BY ECHO"}"#.to_vec(),
        QoS::AtLeastOnce,
        true,
    )
    .await
    .unwrap();
    let gateway = connect_as(&dir, "gateway").await;
    gateway
        .publish(
            &topics.agent_request("writer", "marker").unwrap(),
            b"marker".to_vec(),
            QoS::AtLeastOnce,
            false,
        )
        .await
        .unwrap();
    let first = next(&mut requests).await;
    assert!(
        first.topic.ends_with("/marker"),
        "echo's forged request was dropped: {}",
        first.topic
    );
    let writer_bus = connect_as(&dir, "writer").await;
    let marker_reply = topics
        .agent_response("orchestrator", "o1", "writer", "marker")
        .unwrap();
    writer_bus
        .publish(&marker_reply, b"marker".to_vec(), QoS::AtLeastOnce, false)
        .await
        .unwrap();
    let first = next(&mut peer_replies).await;
    assert_eq!(
        first.topic, marker_reply,
        "echo's forged peer-call answer was dropped"
    );
    // The retained card is still writer's own (the one a new subscriber gets first).
    let mut cards = gateway
        .subscribe(&topics.agent_card("writer").unwrap(), QoS::AtLeastOnce)
        .await
        .unwrap();
    let card = next(&mut cards).await;
    assert!(
        !String::from_utf8_lossy(&card.payload).contains("FORGED"),
        "the forged card was not retained"
    );
    let served: Value = http
        .get(format!("{url}/agents/writer/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(!served.to_string().contains("FORGED"), "{served}");
    assert!(
        served["url"].as_str().unwrap().starts_with("https://"),
        "{served}"
    );
    // Signed by the gateway with the key the profile made for it, which a client can pin; the
    // agent's own signature was checked against the profile's trust store first.
    let pinned =
        mesh_core::card_signing::TrustedKeys::load(&dir.join("keys").join("gateway.jwks.json"))
            .unwrap();
    mesh_core::card_signing::verify_card(&pinned, &served).expect("the served card verifies");
    let listed: Value = http
        .get(format!("{url}/agents"))
        .bearer_auth(key.trim())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let writer_view = listed["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "writer")
        .unwrap();
    assert_eq!(writer_view["trusted"], true, "{writer_view}");

    // An operator's account reads the whole namespace (what `mesh tail` needs).
    let ops = connect_as(&dir, "ops").await;
    let mut everything = ops
        .subscribe(&topics.namespace_filter(), QoS::AtLeastOnce)
        .await
        .expect("an operator may read the namespace");
    gateway
        .publish(
            &topics.agent_request("writer", "watched").unwrap(),
            b"watched".to_vec(),
            QoS::AtLeastOnce,
            false,
        )
        .await
        .unwrap();
    loop {
        let message = next(&mut everything).await;
        if message.topic.ends_with("/watched") {
            break;
        }
    }

    // A forged final event to the gateway fails, even from an account that learned the
    // request (here flight-booker's own account plays the agent, to hold the request open):
    // in the real agent's name the broker drops it; in echo's name the gateway's requester
    // drops it.
    let requester = Requester::start(
        gateway.clone(),
        topics.clone(),
        RequesterKind::Gateway,
        "gateway",
        "g-test",
    )
    .await
    .unwrap();
    let booker = connect_as(&dir, "flight-booker").await;
    let mut booker_requests = booker
        .subscribe(
            &topics.agent_request_filter("flight-booker").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    let mut stream = requester
        .send(
            "flight-booker",
            send_params(Message::new(
                Role::User,
                vec![mesh_core::model::Part::text("book")],
            )),
            SendOptions {
                method: Method::SendStreamingMessage,
                task_id: "t-forged".into(),
                snapshot: None,
                timeout: WAIT,
                principal: None,
                depth: 0,
                traceparent: None,
                keeps_history: false,
                stream_after_progress: false,
            },
        )
        .await
        .unwrap();
    let request = next(&mut booker_requests).await;
    let request: Value = serde_json::from_slice(&request.payload).unwrap();
    let reply_to = request["params"]["metadata"]["_mesh"]["replyTo"]
        .as_str()
        .unwrap()
        .to_owned();
    let final_event = |text: &str| {
        json!({"jsonrpc": "2.0", "id": request["id"], "result": {
            "kind": "status-update", "taskId": "t-forged", "contextId": "c", "final": true,
            "status": {"state": "completed", "message": {"kind": "message", "role": "agent",
                "messageId": uuid::Uuid::new_v4().to_string(), "parts": [{"kind": "text", "text": text}]}},
            "metadata": {"_mesh": {"instance": "i-1", "seq": 0}}}})
        .to_string()
        .into_bytes()
    };
    let in_echos_name = reply_to.replacen("/flight-booker/", "/echo/", 1);
    assert_ne!(in_echos_name, reply_to);
    echo.publish(&reply_to, final_event("FORGED"), QoS::AtLeastOnce, false)
        .await
        .unwrap();
    echo.publish(
        &in_echos_name,
        final_event("FORGED"),
        QoS::AtLeastOnce,
        false,
    )
    .await
    .unwrap();
    // The one in echo's name reaches the requester, which drops it; then the real answer.
    tokio::time::timeout(WAIT, async {
        while requester.unexpected_events() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the forgery in echo's name reached the requester");
    booker
        .publish(
            &reply_to,
            final_event("the real answer"),
            QoS::AtLeastOnce,
            false,
        )
        .await
        .unwrap();
    let delivery = tokio::time::timeout(WAIT, stream.next())
        .await
        .unwrap()
        .expect("an event");
    let reply = format!("{:?}", delivery.reply);
    assert!(
        reply.contains("the real answer") && !reply.contains("FORGED"),
        "{reply}"
    );
    assert_eq!(requester.unexpected_events(), 1);

    for mut agent in agents {
        let _ = agent.kill().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_profile_holds_on_the_embedded_broker() {
    the_generated_profile_holds(Broker::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_profile_holds_on_mosquitto() {
    the_generated_profile_holds(Broker::Mosquitto).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_broker_off_loopback_warns_loudly() {
    let mut broker = Command::new(MESH)
        .args(["broker", "--broker-addr", "0.0.0.0:0"])
        .env_remove("MESH_CONFIG")
        .env_remove("MESH_BROKER_PASSWORD_FILE")
        .env_remove("MESH_BROKER_ACL_FILE")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(broker.stderr.take().unwrap()).lines();
    let warning = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("WITHOUT AUTHENTICATION") {
                return line;
            }
        }
        panic!("the broker ended without the warning");
    })
    .await
    .expect("the warning in time");
    assert!(
        warning.contains("mesh secure"),
        "it says what to do: {warning}"
    );
    let _ = broker.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_up_secure_generates_and_runs_the_whole_profile() {
    let dir = profile_dir();
    let namespace = mesh_testkit::fresh_namespace();
    let mut up = Command::new(MESH)
        .args(["up", "--secure", dir.to_str().unwrap()])
        .args(["--broker-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--memory-store", "--namespace", &namespace])
        .env_remove("MESH_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(up.stdout.take().unwrap()).lines();
    let mut url = None;
    let mut broker = None;
    while url.is_none() || broker.is_none() {
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("mesh up says where its parts are");
        if line.trim_start().starts_with("gateway") {
            url = line.split_whitespace().nth(1).map(str::to_owned);
        }
        if line.trim_start().starts_with("broker") {
            broker = Some(line);
        }
    }
    let (url, broker) = (url.unwrap(), broker.unwrap());
    assert!(url.starts_with("https://"), "{url}");
    assert!(broker.contains("authenticated, with ACLs"), "{broker}");
    let key = std::fs::read_to_string(dir.join("clients").join("client.key")).unwrap();
    let sent = Command::new(MESH)
        .args([
            "send",
            "echo",
            "hello, secure mesh",
            "--gateway-url",
            &url,
            "--gateway-ca",
        ])
        .arg(dir.join("tls").join("ca.pem"))
        .arg(format!("--gateway-key={}", key.trim()))
        .args(["--broker-url", "mqtt://127.0.0.1:1"])
        .env_remove("MESH_CONFIG")
        .output()
        .await
        .unwrap();
    assert!(sent.status.success(), "{sent:?}");
    assert_eq!(
        String::from_utf8_lossy(&sent.stdout).trim(),
        "hello, secure mesh"
    );
    let _ = up.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}
