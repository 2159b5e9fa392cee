//! The MCP client of one agent instance, kept up: a supervisor task connects (starts the child
//! process, or opens the HTTP session), initializes, lists the tools, and watches the
//! connection. When it ends (the child exited, the HTTP server went away) the connection is
//! down with the reason, and the supervisor tries again after a [`Backoff`] delay; a server that
//! announces `notifications/tools/list_changed` has its tools listed again. A connection also
//! counts as ended when the server stops answering: a `ping` every [`HEARTBEAT`] unanswered
//! within [`PING_TIMEOUT`], or a call that could not reach it ([`Live::report_broken`]; an
//! HTTP server that went away leaves no other trace).
//!
//! Progress notifications are routed by their token to the call that asked for them (a bounded
//! channel each: a server that floods progress loses the surplus, never blocks the client).
//! What a child writes on stderr goes to the log, a bounded line at a time.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, ProgressNotificationParam,
    ProgressToken, Tool,
};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::restart::Backoff;
use crate::server::McpServer;

/// The most tools a server may list (more are left out, with a warning).
pub const MAX_TOOLS: usize = 512;

/// The most pages of a tool list read (a server paging forever is cut off there).
const MAX_TOOL_PAGES: usize = 64;

/// How often a live server is pinged.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// How long a ping may go unanswered before the connection counts as ended.
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// How many progress notifications may wait for one call.
const PROGRESS_QUEUE: usize = 16;

/// The longest line of a child's stderr logged (longer ones are cut).
const MAX_LOG_LINE: usize = 2_000;

/// A connection that is up: the client's handle and the server's tools.
#[derive(Clone)]
pub struct Live {
    /// The client side of the session, to send requests on.
    pub peer: Peer<RoleClient>,
    /// The server's tools, as it last listed them.
    pub tools: Arc<Vec<Tool>>,
    /// The server's name and version, as it said at initialization.
    pub server: String,
    /// Told that this connection is broken (by a call that could not reach the server).
    broken: Arc<Notify>,
}

impl Live {
    /// Says that a request could not reach the server: this connection is ended and a new
    /// one made (after the backoff delay).
    pub fn report_broken(&self) {
        self.broken.notify_one();
    }
}

/// A progress notification for a call.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// How far (the server's unit).
    pub progress: f64,
    /// Out of how much, when known.
    pub total: Option<f64>,
    /// What the server says it is doing.
    pub message: Option<String>,
}

/// What the connection is now.
#[derive(Clone)]
enum State {
    /// Not up yet: the first attempt is under way.
    Starting,
    Up(Live),
    /// Down, and why (with when it is tried again).
    Down(String),
    /// Stopped for good (the agent shuts down).
    Stopped,
}

/// Routes of progress notifications, by token.
type ProgressRoutes = Arc<Mutex<HashMap<ProgressToken, mpsc::Sender<Progress>>>>;

/// The supervised client. Cheap to clone; the supervisor stops when [`McpConnection::stop`] is
/// called or the last clone is dropped.
#[derive(Clone)]
pub struct McpConnection {
    state: watch::Receiver<State>,
    progress: ProgressRoutes,
    stop: Arc<StopOnDrop>,
}

/// Stops the supervisor when the last handle goes.
struct StopOnDrop(CancellationToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// A route of progress notifications to one call, removed when dropped.
pub(crate) struct ProgressRoute {
    routes: ProgressRoutes,
    token: ProgressToken,
    /// The call's notifications.
    pub receiver: mpsc::Receiver<Progress>,
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        lock(&self.routes).remove(&self.token);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl McpConnection {
    /// Starts the supervisor of a connection to `server` (on the current runtime), trying again
    /// after failures as `backoff` says; `init_timeout` bounds each attempt's start (the
    /// process's start, initialization and the tool list).
    pub fn start(server: McpServer, backoff: Backoff, init_timeout: Duration) -> McpConnection {
        let (state_tx, state) = watch::channel(State::Starting);
        let progress: ProgressRoutes = Arc::default();
        let stop = CancellationToken::new();
        let supervisor = Supervisor {
            server,
            backoff,
            init_timeout,
            state: state_tx,
            progress: progress.clone(),
            stop: stop.clone(),
        };
        tokio::spawn(supervisor.run());
        McpConnection {
            state,
            progress,
            stop: Arc::new(StopOnDrop(stop)),
        }
    }

    /// The connection if it is up, else why not.
    pub fn live(&self) -> Result<Live, String> {
        match &*self.state.borrow() {
            State::Up(live) => Ok(live.clone()),
            State::Starting => Err("the MCP server is starting".into()),
            State::Down(why) => Err(why.clone()),
            State::Stopped => Err("the MCP connection is closed".into()),
        }
    }

    /// Waits for the outcome of the first attempt (at most `timeout`): the connection, or why
    /// it did not come up.
    pub async fn wait_started(&self, timeout: Duration) -> Result<Live, String> {
        let mut state = self.state.clone();
        let started = state.wait_for(|s| !matches!(s, State::Starting));
        match tokio::time::timeout(timeout, started).await {
            Ok(_) => self.live(),
            Err(_) => Err(format!(
                "it did not start within {} s",
                timeout.as_secs_f32()
            )),
        }
    }

    /// Waits until the connection is up (then its tools) or `timeout` passes (then why not).
    pub async fn wait_live(&self, timeout: Duration) -> Result<Live, String> {
        let mut state = self.state.clone();
        let up = state.wait_for(|s| matches!(s, State::Up(_) | State::Stopped));
        match tokio::time::timeout(timeout, up).await {
            Ok(Ok(_)) => self.live(),
            Ok(Err(_)) => Err("the MCP connection is closed".into()),
            Err(_) => self.live(),
        }
    }

    /// Why `live` is down, once the supervisor has seen it end (told by
    /// [`Live::report_broken`]); `None` if that takes longer than `timeout` or a newer
    /// connection is already up.
    pub async fn why_down(&self, live: &Live, timeout: Duration) -> Option<String> {
        let mut state = self.state.clone();
        let ended = state
            .wait_for(|s| !matches!(s, State::Up(now) if Arc::ptr_eq(&now.broken, &live.broken)));
        let _ = tokio::time::timeout(timeout, ended).await;
        self.live().err()
    }

    /// Resolves when the tool list may have changed (a new connection, or a new listing);
    /// `None` once the connection is stopped.
    pub async fn tools_changed(&self, seen: &mut Option<Arc<Vec<Tool>>>) -> Option<Arc<Vec<Tool>>> {
        let mut state = self.state.clone();
        loop {
            if let State::Up(live) = &*state.borrow_and_update() {
                let same = seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &live.tools));
                if !same {
                    *seen = Some(live.tools.clone());
                    return Some(live.tools.clone());
                }
            }
            if matches!(*state.borrow(), State::Stopped) {
                return None;
            }
            state.changed().await.ok()?;
        }
    }

    /// Routes the progress notifications of the request that carries `token` to the returned
    /// receiver, until it is dropped.
    pub(crate) fn follow_progress(&self, token: ProgressToken) -> ProgressRoute {
        let (sender, receiver) = mpsc::channel(PROGRESS_QUEUE);
        lock(&self.progress).insert(token.clone(), sender);
        ProgressRoute {
            routes: self.progress.clone(),
            token,
            receiver,
        }
    }

    /// Stops the supervisor and the server (a child process is killed).
    pub fn stop(&self) {
        self.stop.0.cancel();
    }
}

/// The client's handler of what the server sends: progress and tool-list changes.
struct Notifications {
    progress: ProgressRoutes,
    relist: Arc<Notify>,
    info: ClientConfig,
}

impl ClientHandler for Notifications {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let route = lock(&self.progress).get(&params.progress_token).cloned();
        if let Some(route) = route {
            // A full queue drops this one: the call goes on, the next update says more.
            let _ = route.try_send(Progress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relist.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}

/// Keeps the connection up, one attempt after another.
struct Supervisor {
    server: McpServer,
    backoff: Backoff,
    init_timeout: Duration,
    state: watch::Sender<State>,
    progress: ProgressRoutes,
    stop: CancellationToken,
}

impl Supervisor {
    async fn run(mut self) {
        loop {
            let started = Instant::now();
            // A panic inside an attempt (the SDK's, or ours) is one more failure, not the end
            // of the supervisor.
            let attempt = std::panic::AssertUnwindSafe(self.attempt()).catch_unwind();
            let why = tokio::select! {
                why = attempt => why.unwrap_or_else(|_| "the MCP client panicked".into()),
                () = self.stop.cancelled() => break,
            };
            if self.stop.is_cancelled() {
                break;
            }
            let delay = self.backoff.after_failure(started.elapsed());
            tracing::warn!(server = %self.server, %why, retry_in = ?delay, "MCP server down");
            self.state.send_replace(State::Down(format!(
                "the MCP server is not available ({why}); it is tried again in {} ms",
                delay.as_millis()
            )));
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.stop.cancelled() => break,
            }
        }
        self.state.send_replace(State::Stopped);
    }

    /// One connection, from its start to its end: why it ended.
    async fn attempt(&self) -> String {
        let relist = Arc::new(Notify::new());
        let broken = Arc::new(Notify::new());
        let handler = Notifications {
            progress: self.progress.clone(),
            relist: relist.clone(),
            info: client_info(),
        };
        let start = tokio::time::timeout(self.init_timeout, self.connect(handler));
        let running = match start.await {
            Ok(Ok(running)) => running,
            Ok(Err(why)) => return why,
            Err(_) => {
                return format!(
                    "it did not start within {} s",
                    self.init_timeout.as_secs_f32()
                );
            }
        };
        let peer = running.peer().clone();
        let server = peer
            .peer_info()
            .and_then(|info| {
                info.server_info
                    .as_ref()
                    .map(|s| format!("{} {}", s.name, s.version))
            })
            .unwrap_or_else(|| self.server.to_string());
        match tokio::time::timeout(self.init_timeout, list_tools(&peer)).await {
            Ok(Ok(tools)) => {
                tracing::info!(server = %server, tools = tools.len(), "MCP server up");
                self.state.send_replace(State::Up(Live {
                    peer: peer.clone(),
                    tools: Arc::new(tools),
                    server: server.clone(),
                    broken: broken.clone(),
                }));
            }
            Ok(Err(why)) => return format!("listing its tools failed: {why}"),
            Err(_) => return "it did not list its tools in time".into(),
        }
        let closed = running.cancellation_token();
        let mut ended = tokio::spawn(running.waiting());
        let mut heartbeat =
            tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
        let why = loop {
            tokio::select! {
                end = &mut ended => {
                    return match end {
                        Ok(Ok(reason)) => format!("the connection ended ({reason:?})"),
                        Ok(Err(e)) => format!("the connection failed: {e}"),
                        Err(e) => format!("the connection's task failed: {e}"),
                    };
                }
                () = broken.notified() => break "a call could not reach it".to_owned(),
                _ = heartbeat.tick() => {
                    let ping = peer.send_request(ClientRequest::PingRequest(Default::default()));
                    match tokio::time::timeout(PING_TIMEOUT, ping).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => break format!("it did not answer a ping: {e}"),
                        Err(_) => break format!(
                            "it did not answer a ping within {} s",
                            PING_TIMEOUT.as_secs()
                        ),
                    }
                }
                () = relist.notified() => match list_tools(&peer).await {
                    Ok(tools) => {
                        tracing::info!(server = %server, tools = tools.len(), "MCP tools changed");
                        self.state.send_replace(State::Up(Live {
                            peer: peer.clone(),
                            tools: Arc::new(tools),
                            server: server.clone(),
                            broken: broken.clone(),
                        }));
                    }
                    Err(why) => tracing::warn!(server = %server, %why, "listing the changed tools failed"),
                },
                () = self.stop.cancelled() => break "stopped".to_owned(),
            }
        };
        // Ends the session (a child process is killed) before the next attempt.
        closed.cancel();
        let _ = ended.await;
        why
    }

    /// Starts the server (or opens the HTTP session) and initializes it.
    async fn connect(
        &self,
        handler: Notifications,
    ) -> Result<RunningService<RoleClient, Notifications>, String> {
        match &self.server {
            McpServer::Command { program, args } => {
                let command = tokio::process::Command::new(program).configure(|c| {
                    c.args(args);
                });
                let (transport, stderr) = TokioChildProcess::builder(command)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("{program} could not be started: {e}"))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(log_stderr(stderr, program.clone()));
                }
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| format!("it did not initialize: {e}"))
            }
            McpServer::Url { url, bearer } => {
                use rmcp::transport::StreamableHttpClientTransport;
                // reqwest's rustls has no provider of its own: building a client panics
                // without one.
                mesh_core::tls::install_crypto_provider();
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(token) = bearer {
                    config = config.auth_header(token.clone());
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| format!("it did not initialize: {e}"))
            }
        }
    }
}

/// Every tool the server lists, page by page (bounded).
async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<Tool>, String> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_TOOL_PAGES {
        let page = peer
            .list_tools(Some(
                rmcp::model::PaginatedRequestParams::default().with_cursor(cursor),
            ))
            .await
            .map_err(|e| e.to_string())?;
        tools.extend(page.tools);
        if tools.len() >= MAX_TOOLS {
            tracing::warn!(
                limit = MAX_TOOLS,
                "the MCP server lists more tools than are served"
            );
            tools.truncate(MAX_TOOLS);
            break;
        }
        match page.next_cursor {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => break,
        }
    }
    Ok(tools)
}

/// Who this client is, to the server.
fn client_info() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("agent-mesh", env!("CARGO_PKG_VERSION")),
    )
}

/// Logs what a child writes on stderr, line by line: a line longer than [`MAX_LOG_LINE`] is
/// logged cut, and the rest of it skipped (memory stays bounded whatever the child writes).
async fn log_stderr(stderr: tokio::process::ChildStderr, program: String) {
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut line = Vec::with_capacity(256);
    let mut skipping = false;
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(chunk) => chunk,
        };
        let (part, newline) = match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => (&chunk[..at], true),
            None => (chunk, false),
        };
        if !skipping {
            let room = MAX_LOG_LINE - line.len();
            line.extend_from_slice(&part[..part.len().min(room)]);
        }
        let used = part.len() + usize::from(newline);
        reader.consume(used);
        if newline || (!skipping && line.len() == MAX_LOG_LINE) {
            if !skipping {
                let text = String::from_utf8_lossy(&line);
                tracing::info!(server = %program, "{}", text.trim_end());
                line.clear();
            }
            skipping = !newline;
        }
    }
}
