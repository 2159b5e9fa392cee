//! What the gateway's tests share: a real broker, a namespace of their own, agents started
//! with mesh-agent, a gateway on 127.0.0.1:0, and an HTTP client that speaks JSON-RPC and
//! reads SSE streams. Every wait is bounded.

#![allow(dead_code)]

use mesh_agent::model::Part;
use mesh_agent::{Agent, AgentConfig, Outcome, RunningAgent, TaskContext, handler_fn};
use mesh_core::bus::{Bus, BusConfig};
use mesh_gateway::{Gateway, GatewayConfig, RunningGateway};
use mesh_testkit::{TestBroker, fresh_namespace};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Every wait in these tests is bounded by this.
pub const WAIT: Duration = Duration::from_secs(15);

/// A mesh behind a gateway: a broker, a namespace, a gateway on its own bus, the agents
/// started on it, and an HTTP client for the gateway.
pub struct GatewayMesh {
    pub broker: TestBroker,
    pub namespace: String,
    pub gateway: RunningGateway,
    pub gateway_bus: Bus,
    pub http: reqwest::Client,
    pub base: String,
    pub agents: Vec<RunningAgent>,
}

impl GatewayMesh {
    pub async fn start() -> GatewayMesh {
        GatewayMesh::start_with(|_| {}).await
    }

    pub async fn start_with(configure: impl FnOnce(&mut GatewayConfig)) -> GatewayMesh {
        GatewayMesh::start_on(TestBroker::from_env().await, |_| {}, configure).await
    }

    /// A gateway on `broker`, its bus and its settings changed by the two closures.
    pub async fn start_on(
        broker: TestBroker,
        configure_bus: impl FnOnce(&mut BusConfig),
        configure: impl FnOnce(&mut GatewayConfig),
    ) -> GatewayMesh {
        let namespace = fresh_namespace();
        let mut config = GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            namespace: namespace.clone(),
            gateway_id: Some("gw".into()),
            task_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(2),
            ..GatewayConfig::default()
        };
        configure(&mut config);
        let mut gateway_bus_config = broker.bus_config();
        configure_bus(&mut gateway_bus_config);
        let gateway_bus = Bus::connect(gateway_bus_config).await.unwrap();
        let gateway = Gateway::start(config, gateway_bus.clone()).await.unwrap();
        let base = format!("http://{}", gateway.local_addr());
        mesh_core::tls::install_crypto_provider();
        let http = reqwest::Client::builder().timeout(WAIT).build().unwrap();
        GatewayMesh {
            broker,
            namespace,
            gateway,
            gateway_bus,
            http,
            base,
            agents: Vec::new(),
        }
    }

    pub fn agent_config(&self) -> AgentConfig {
        AgentConfig {
            namespace: self.namespace.clone(),
            heartbeat: Duration::from_secs(1),
            shutdown_grace: Duration::from_millis(300),
            ..AgentConfig::default()
        }
    }

    /// Starts an agent and waits until the gateway sees it online.
    pub async fn run(&mut self, agent: Agent) {
        let running = self.start_agent(agent).await;
        self.agents.push(running);
    }

    pub async fn start_agent(&self, agent: Agent) -> RunningAgent {
        self.start_agent_with(agent, self.agent_config()).await
    }

    /// Starts an agent with `config` and waits until the gateway sees it online.
    pub async fn start_agent_with(&self, agent: Agent, config: AgentConfig) -> RunningAgent {
        let running = agent
            .config(config)
            .start(self.broker.bus_config())
            .await
            .expect("agent starts");
        let name = running.name().to_owned();
        assert!(
            self.gateway.registry().wait_online(&name, WAIT).await,
            "{name} shows up in the gateway's registry"
        );
        running
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// POSTs a JSON-RPC body; the status and the parsed body (Null for an empty one).
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, "application/json", &[], body.to_string().into_bytes())
            .await
    }

    pub async fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        // A streaming method that failed before its first event answers an event stream of
        // one event: its error.
        let json = match text.strip_prefix("data:") {
            Some(event) if text.trim_end().lines().count() == 1 => event.trim(),
            _ => text.as_str(),
        };
        let value = if json.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
        };
        (status, value)
    }

    /// GETs a path; the status and the parsed body (Null when it is not JSON).
    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let response = self.http.get(self.url(path)).send().await.expect("request");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A JSON-RPC call to `agent` with extra headers; the status and the body.
    pub async fn call_with(
        &self,
        agent: &str,
        method: &str,
        params: Value,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        self.post_raw(
            &format!("/agents/{agent}"),
            "application/json",
            headers,
            rpc(method, params).to_string().into_bytes(),
        )
        .await
    }

    /// A JSON-RPC call to `agent`; the whole response.
    pub async fn call(&self, agent: &str, method: &str, params: Value) -> Value {
        let (status, body) = self
            .post(&format!("/agents/{agent}"), &rpc(method, params))
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Opens an SSE request and returns the response (to read with [`read_sse`]).
    pub async fn open_sse(&self, agent: &str, method: &str, params: Value) -> reqwest::Response {
        self.http
            .post(self.url(&format!("/agents/{agent}")))
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(rpc(method, params).to_string())
            .send()
            .await
            .expect("request")
    }

    /// A streaming call: every `data:` event as JSON, read until the server closes the stream.
    pub async fn stream(&self, agent: &str, method: &str, params: Value) -> Vec<Value> {
        let response = self.open_sse(agent, method, params).await;
        read_sse(response).await
    }
}

/// Reads an SSE response to its end; each `data:` line parsed as JSON.
/// Also checks that the response tells caches and buffering proxies not to hold it back.
pub async fn read_sse(response: reqwest::Response) -> Vec<Value> {
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let content_type = header("content-type");
    if content_type.starts_with("text/event-stream") {
        assert_eq!(header("cache-control"), "no-cache");
        assert_eq!(header("x-accel-buffering"), "no");
    }
    let text = tokio::time::timeout(WAIT, response.text())
        .await
        .expect("the stream closes")
        .expect("body");
    assert!(
        content_type.starts_with("text/event-stream"),
        "not an event stream ({content_type}): {text}"
    );
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str(data.trim()).expect("JSON event"))
        .collect()
}

/// A JSON-RPC request with a fresh string id.
pub fn rpc(method: &str, params: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": format!("req-{}", uuid::Uuid::new_v4().simple()),
        "method": method,
        "params": params,
    })
}

/// 0.3 `message/send` params with one text part.
pub fn msg03(text: &str) -> Value {
    json!({"message": {"kind": "message", "role": "user", "messageId": uuid::Uuid::new_v4().to_string(),
        "parts": [{"kind": "text", "text": text}]}})
}

/// 1.0 `SendMessage` params with one text part.
pub fn msg10(text: &str) -> Value {
    json!({"message": {"role": "ROLE_USER", "messageId": uuid::Uuid::new_v4().to_string(),
        "parts": [{"text": text}]}})
}

/// 0.1 `tasks/send` params with one text part.
pub fn msg01(task_id: &str, text: &str) -> Value {
    json!({"id": task_id, "sessionId": "session-1",
        "message": {"role": "user", "parts": [{"type": "text", "text": text}]}})
}

/// A gate a test opens to let the `slow` agent finish.
#[derive(Clone, Default)]
pub struct Gate(Arc<Notify>);

impl Gate {
    /// Waits until the gate is opened (at once when it was opened before).
    pub async fn wait(&self) {
        self.0.notified().await;
    }

    pub fn open(&self) {
        self.0.notify_waiters();
        self.0.notify_one();
    }
}

/// An agent that says `working`, then waits for the gate (or its cancellation, or 10 s), then
/// completes with an artifact.
pub fn slow_agent(name: &str, gate: Gate) -> Agent {
    Agent::new(
        name,
        handler_fn(move |ctx: TaskContext| {
            let gate = gate.clone();
            async move {
                ctx.working("thinking").await?;
                tokio::select! {
                    _ = gate.0.notified() => {}
                    // The runtime ends a canceled task itself.
                    _ = ctx.cancelled() => std::future::pending::<()>().await,
                    _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                }
                ctx.text_artifact("answer", "done").await?;
                Ok(Outcome::completed_with("finished"))
            }
        }),
    )
}

/// The result of a JSON-RPC response, panicking on an error.
pub fn result(body: &Value) -> &Value {
    body.get("result")
        .unwrap_or_else(|| panic!("a result: {body}"))
}

/// The error code of a JSON-RPC response, panicking on a result.
pub fn code(body: &Value) -> i64 {
    body.pointer("/error/code")
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("an error: {body}"))
}

/// One request a test webhook received, and what it answered.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: axum::http::HeaderMap,
    pub body: Value,
    pub answered: u16,
}

/// A webhook receiver on 127.0.0.1:0 that answers 500 to its first `fail_first` requests
/// (more with [`Hook::fail_next`]) and 200 afterwards; every request is reported in order.
pub struct Hook {
    pub url: String,
    received: tokio::sync::mpsc::UnboundedReceiver<Received>,
    /// How many requests are still answered 500.
    fail_left: Arc<std::sync::atomic::AtomicUsize>,
    /// TLS handshakes that failed (an https hook whose certificate a client refused).
    pub failed_handshakes: Arc<std::sync::atomic::AtomicUsize>,
    _server: tokio::task::JoinHandle<()>,
}

impl Hook {
    /// An http receiver.
    pub async fn start(fail_first: usize) -> Hook {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let (app, hook) = Hook::app(url, fail_first);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        hook(server)
    }

    /// An https receiver at `https://localhost:<port>/hook`, serving the certificate and key
    /// that [`mesh_testkit::make_certificates`] made in `certs`.
    pub async fn start_tls(fail_first: usize, certs: &std::path::Path) -> Hook {
        let listener = TlsListener::bind(certs).await;
        let url = format!(
            "https://localhost:{}/hook",
            listener.tcp.local_addr().unwrap().port()
        );
        let failed = listener.failed_handshakes.clone();
        let (app, hook) = Hook::app(url, fail_first);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let mut hook = hook(server);
        hook.failed_handshakes = failed;
        hook
    }

    /// The receiver's router, and what makes the [`Hook`] once it is served.
    fn app(
        url: String,
        fail_first: usize,
    ) -> (
        axum::Router,
        impl FnOnce(tokio::task::JoinHandle<()>) -> Hook,
    ) {
        use axum::http::StatusCode;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (tx, received) = tokio::sync::mpsc::unbounded_channel();
        let fail_left = Arc::new(AtomicUsize::new(fail_first));
        let left = fail_left.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let tx = tx.clone();
                    let left = left.clone();
                    async move {
                        let fail = left
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok();
                        let status = if fail {
                            StatusCode::INTERNAL_SERVER_ERROR
                        } else {
                            StatusCode::OK
                        };
                        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let _ = tx.send(Received {
                            headers,
                            body,
                            answered: status.as_u16(),
                        });
                        status
                    }
                },
            ),
        );
        let make = move |server| Hook {
            url,
            received,
            fail_left,
            failed_handshakes: Arc::default(),
            _server: server,
        };
        (app, make)
    }

    /// Answers 500 to the next `n` requests.
    pub fn fail_next(&self, n: usize) {
        self.fail_left.store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// A request received already, if any (no wait).
    pub fn try_next(&mut self) -> Option<Received> {
        self.received.try_recv().ok()
    }

    /// The next request the webhook received (bounded wait).
    pub async fn next(&mut self) -> Received {
        tokio::time::timeout(WAIT, self.received.recv())
            .await
            .expect("a webhook request in time")
            .expect("the receiver runs")
    }

    /// Requests until (and including) the first accepted one whose task is in `state`.
    pub async fn until_accepted(&mut self, state: &str) -> Vec<Received> {
        let mut all = Vec::new();
        loop {
            let Ok(Some(r)) = tokio::time::timeout(WAIT, self.received.recv()).await else {
                let seen: Vec<(u16, String)> = all
                    .iter()
                    .map(|r: &Received| (r.answered, task_state(&r.body)))
                    .collect();
                panic!("no accepted {state:?} notification in time; received {seen:?}");
            };
            let done = r.answered == 200 && task_state(&r.body) == state;
            all.push(r);
            if done {
                return all;
            }
        }
    }
}

/// A task's state in any dialect (`completed`, `TASK_STATE_COMPLETED` → `completed`), also
/// inside a 1.0 StreamResponse (`{"task": …}`).
pub fn task_state(task: &Value) -> String {
    let task = task.get("task").unwrap_or(task);
    let state = task
        .pointer("/status/state")
        .and_then(Value::as_str)
        .unwrap_or("");
    state
        .strip_prefix("TASK_STATE_")
        .map(|s| s.to_ascii_lowercase().replace('_', "-"))
        .unwrap_or_else(|| state.to_owned())
}

/// A TLS listener for axum on 127.0.0.1:0: each connection's handshake is made (bounded)
/// before it is handed to axum; one that fails is counted and dropped.
pub struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    failed_handshakes: Arc<std::sync::atomic::AtomicUsize>,
}

impl TlsListener {
    /// Serves `server.pem` with `server.key` from `certs`.
    pub async fn bind(certs: &std::path::Path) -> TlsListener {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(certs.join("server.pem"))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_file(certs.join("server.key")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        TlsListener {
            tcp: tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            failed_handshakes: Arc::default(),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.tcp.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            match tokio::time::timeout(WAIT, self.acceptor.accept(stream)).await {
                Ok(Ok(tls)) => return (tls, addr),
                _ => {
                    self.failed_handshakes
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A throwaway CA (`ca.pem`) and a certificate for localhost (`server.pem`, `server.key`)
/// in a fresh temporary directory (the caller removes it).
pub fn certificates() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mesh-gateway-certs-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    mesh_testkit::make_certificates(&dir).expect("openssl makes the test certificates");
    dir
}

/// A counter or gauge from `/metrics` (0 when it is not there).
pub async fn metric(mesh: &GatewayMesh, line_start: &str) -> f64 {
    metric_through(&mesh.http, mesh, line_start).await
}

/// [`metric`], asked through `http` (a client of its own, on a connection of its own).
pub async fn metric_through(http: &reqwest::Client, mesh: &GatewayMesh, line_start: &str) -> f64 {
    let text = http
        .get(mesh.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Polls `/metrics` until `line_start`'s value is at least `least` (bounded by [`WAIT`]).
pub async fn wait_metric(mesh: &GatewayMesh, line_start: &str, least: f64) -> f64 {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let value = metric(mesh, line_start).await;
        if value >= least {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{line_start} reaches {least} in time (it is {value})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs one of the interoperability scripts with `python` and `args` (bounded: 120 s),
/// prints what it printed, and asserts that it succeeded and printed `passed` (its last
/// word on success). Its standard output.
pub async fn run_interop_script(
    python: &std::ffi::OsStr,
    script: &str,
    args: &[&str],
    passed: &str,
) -> String {
    let mut child = tokio::process::Command::new(python);
    child.arg(script).args(args).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), child.output())
        .await
        .expect("the interop script finishes within 120 s")
        .expect("the interop script runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(passed),
        "{script}: no {passed:?} in\n{stdout}"
    );
    stdout
}

/// One server-sent event: its `id` (when it has one) and its data as JSON.
#[derive(Debug, Clone)]
pub struct Sse {
    pub id: Option<u64>,
    pub data: Value,
}

/// Reads events from `response` until `stop` says so or the stream ends (bounded by WAIT).
pub async fn read_until(
    response: &mut reqwest::Response,
    stop: impl Fn(&[Sse]) -> bool,
) -> Vec<Sse> {
    let mut events = Vec::new();
    let mut parser = mesh_core::sse::SseParser::default();
    let read = async {
        loop {
            for event in parser.take_events() {
                events.push(Sse {
                    id: event.id,
                    data: event.json(),
                });
                if stop(&events) {
                    return;
                }
            }
            match response.chunk().await.expect("the stream reads") {
                Some(bytes) => parser.feed(&bytes),
                None => {
                    parser.finish();
                    events.extend(parser.take_events().into_iter().map(|e| Sse {
                        id: e.id,
                        data: e.json(),
                    }));
                    return;
                }
            }
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the events come");
    events
}

/// The ids of `events`, in order.
pub fn ids(events: &[Sse]) -> Vec<u64> {
    events.iter().filter_map(|e| e.id).collect()
}

/// Whether `event` carries the chunk `text ` (as the paced test agents stream them).
pub fn is_chunk(event: &Sse, text: &str) -> bool {
    event.data.to_string().contains(&format!("\"{text} \""))
}

/// The agent `paced`: streams the artifact `out.txt` in six chunks (`"0 "` to `"5 "`), waiting
/// for `gate` after the third, then completes; canceled while it waits, it leaves the end of
/// the task to the runtime.
pub fn paced(gate: Gate) -> Agent {
    Agent::new(
        "paced",
        handler_fn(move |ctx: TaskContext| {
            let gate = gate.clone();
            async move {
                ctx.working("starting").await?;
                let mut out = ctx.artifact_writer("out.txt");
                for index in 0..6 {
                    if index == 3 {
                        tokio::select! {
                            () = gate.wait() => {}
                            _ = ctx.cancelled() => std::future::pending::<()>().await,
                        }
                    }
                    let parts = vec![Part::text(format!("{index} "))];
                    if index == 5 {
                        out.finish(parts).await?;
                        break;
                    }
                    out.append(parts).await?;
                }
                Ok(Outcome::completed_with("done"))
            }
        }),
    )
}
