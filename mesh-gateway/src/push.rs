//! Push notifications: webhook configs per task, checked at registration, and a delivery
//! queue that POSTs the task (in the dialect that created it) to every config of a task on
//! each change of its status.
//!
//! **Registration** ([`check_url`]): `http://` and `https://` URLs; the host is resolved and
//! every address must be public unless the gateway allows private webhooks: loopback,
//! private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local (169.254/16, fe80::/10),
//! unspecified, multicast and broadcast addresses are refused with `-32602` naming the field
//! (SSRF).
//!
//! **TLS** ([`webhook_tls`]): rustls with the ring provider (see [`mesh_core::tls`]), trusting
//! the system's roots and, when the gateway is given one (`--webhook-ca`), a PEM file of
//! private CAs. A certificate that does not verify fails the attempt like a refused
//! connection (retried, then given up, counted and logged).
//!
//! **Delivery** ([`Pusher`]): [`Pusher::notify`] never blocks and never awaits; it hands the
//! notification to the task's worker (one tokio task per task with deliveries pending, so a
//! task's notifications arrive in order), and drops it (counted) when the queue is full.
//! A worker POSTs with a timeout, retries a connection error, a TLS failure, a timeout, a
//! 408, a 429 or a 5xx with exponential backoff, and gives up on any other answer or after
//! the last attempt. Each delivery is also kept in the task store
//! ([`TaskStore::keep_delivery`], written behind: a send does not wait for it) from when it
//! is queued until it succeeds or is given up, with its attempt count; at start the pusher
//! takes back what the store kept ([`TaskStore::take_pending_deliveries`]) and delivers it.
//! With the durable store that makes delivery at-least-once across a crash or a restart
//! (a notification in flight at a crash may arrive twice); with the memory store it is
//! at-least-once while the gateway runs. Each attempt resolves the host again through the
//! client's own resolver, which refuses the name when any address is not public (no DNS
//! rebinding: the addresses checked are the addresses connected to). Headers:
//! `X-A2A-Notification-Token` when the config has a token (0.3),
//! `Authorization: <scheme> <credentials>` when it has authentication (1.0). Redirects are
//! not followed, and proxies (`HTTP_PROXY`) are not used.

use crate::metrics::Metrics;
use crate::store::{PendingDelivery, TaskStore};
use axum::http::{HeaderValue, header};
use mesh_core::bus::redact_url;
use mesh_core::error::A2aError;
use mesh_core::model::TaskPushNotificationConfig;
use mesh_core::sync::MutexExt;
use mesh_core::tls::TlsRoots;
use reqwest::Url;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

/// How many push configs one task may have.
pub const MAX_PUSH_CONFIGS: usize = 10;

/// The token header of A2A 0.3.
pub const TOKEN_HEADER: &str = "x-a2a-notification-token";

/// How many webhook POSTs may be in flight at once (over all tasks).
const CONCURRENT_POSTS: usize = 32;

/// How long a task's worker waits for more notifications before it ends.
const WORKER_IDLE: Duration = Duration::from_secs(30);

/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How long resolving a webhook's host may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Checks a push config at registration: the URL (see the module docs) and the header
/// values. `field` names the config in the request (`params.pushNotificationConfig`, …).
pub(crate) async fn check_config(
    config: &TaskPushNotificationConfig,
    allow_private: bool,
    field: &str,
) -> Result<(), A2aError> {
    check_url(&config.url, allow_private)
        .await
        .map_err(|reason| A2aError::invalid_params_at(&format!("{field}.url"), reason))?;
    if let Some(token) = &config.token
        && (HeaderValue::from_str(token).is_err() || token.len() > 4096)
    {
        return Err(A2aError::invalid_params_at(
            &format!("{field}.token"),
            "must be at most 4096 visible ASCII characters (it is sent as a header)",
        ));
    }
    if let Some(auth) = &config.authentication {
        let value = authorization(&auth.scheme, auth.credentials.as_deref());
        if auth.scheme.trim().is_empty()
            || auth.scheme.contains(char::is_whitespace)
            || HeaderValue::from_str(&value).is_err()
            || value.len() > 8192
        {
            return Err(A2aError::invalid_params_at(
                &format!("{field}.authentication"),
                "the scheme must be one word and the credentials visible ASCII (they are sent as an Authorization header)",
            ));
        }
    }
    if config.id.as_deref().is_some_and(|id| id.len() > 256) {
        return Err(A2aError::invalid_params_at(
            &format!("{field}.id"),
            "must be at most 256 bytes",
        ));
    }
    Ok(())
}

/// The content type of a notification: a 1.0 body is a StreamResponse (`{"task": …}`, spec
/// §4.3.3), `application/a2a+json`; 0.3 and 0.1 bodies are their task, `application/json`.
fn content_type(body: &[u8]) -> &'static str {
    if body.starts_with(br#"{"task":"#) {
        "application/a2a+json"
    } else {
        "application/json"
    }
}

fn authorization(scheme: &str, credentials: Option<&str>) -> String {
    match credentials {
        Some(c) if !c.is_empty() => format!("{} {c}", scheme.trim()),
        _ => scheme.trim().to_owned(),
    }
}

/// Checks a webhook URL; the reason it is refused.
pub(crate) async fn check_url(url: &str, allow_private: bool) -> Result<(), String> {
    resolve_checked(url, allow_private).await.map(|_| ())
}

/// Parses, resolves and checks a webhook URL: the URL and the address to connect to.
async fn resolve_checked(url: &str, allow_private: bool) -> Result<(Url, SocketAddr), String> {
    if url.len() > 2048 {
        return Err("the URL is longer than 2048 bytes".into());
    }
    let parsed = Url::parse(url).map_err(|e| format!("not a valid URL ({e})"))?;
    match parsed.scheme() {
        "http" | "https" => {}
        other => {
            return Err(format!(
                "the scheme {other:?} is not allowed: use https:// or http://"
            ));
        }
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("credentials in the URL are not allowed: use authentication or token".into());
    }
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or("the URL has no host")?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = parsed.port_or_known_default().unwrap_or(443);
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::time::timeout(
            RESOLVE_TIMEOUT,
            tokio::net::lookup_host((host.as_str(), port)),
        )
        .await
        .map_err(|_| format!("resolving {host:?} timed out"))?
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .collect(),
    };
    let Some(first) = addrs.first().copied() else {
        return Err(format!("{host:?} resolves to no address"));
    };
    if !allow_private && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
        return Err(format!(
            "{host:?} is (or resolves to) {}, a loopback, private, link-local or otherwise non-public address; this gateway does not send webhooks there (--allow-private-webhooks allows it)",
            bad.ip()
        ));
    }
    Ok((parsed, first))
}

/// True for an address a webhook may go to without `allow_private`.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64)) // 100.64/10, carrier-grade NAT
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // fc00::/7, unique local
                || (s[0] & 0xffc0) == 0xfe80) // fe80::/10, link-local
        }
    }
}

/// The TLS settings of the webhook client: the system's roots, and the CAs in `ca_file`
/// when one is given (an error when it cannot be read or holds no certificate). Without a
/// CA file and without system roots, https webhooks fail (logged) and http ones work.
pub fn webhook_tls(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let roots = TlsRoots {
        ca_file: ca_file.map(Path::to_path_buf),
        native: true,
    };
    let roots = match roots.load() {
        Ok(roots) => roots,
        Err(error) if ca_file.is_none() => {
            tracing::warn!(%error, "no trusted roots for https webhooks: they will fail (--webhook-ca adds a CA)");
            rustls::RootCertStore::empty()
        }
        Err(error) => return Err(error),
    };
    let mut config = Arc::unwrap_or_clone(mesh_core::tls::client_config(roots)?);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// One notification: the same task JSON for each config of the task, in order.
type Notification = Vec<Arc<PendingDelivery>>;

/// Delivery settings.
#[derive(Clone)]
pub(crate) struct PushSettings {
    pub allow_private: bool,
    pub timeout: Duration,
    pub attempts: u32,
    pub backoff: Duration,
    pub queue: usize,
}

/// The delivery queue (see the module docs).
pub(crate) struct Pusher {
    settings: PushSettings,
    /// The webhook client (an error when it could not be built: every delivery then fails).
    client: Result<reqwest::Client, String>,
    workers: Mutex<HashMap<String, mpsc::UnboundedSender<Notification>>>,
    pending: Arc<AtomicUsize>,
    posts: Arc<Semaphore>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    /// Where pending deliveries are kept (written behind by a durable store). Weak: a
    /// worker still ending after a shutdown does not keep the store (and its database) open.
    store: Weak<dyn TaskStore>,
    /// The id of the next delivery.
    next_id: AtomicU64,
}

impl Pusher {
    /// Starts the queue, and delivers what `store` kept pending from an earlier run.
    pub(crate) fn start(
        settings: PushSettings,
        tls: rustls::ClientConfig,
        store: &Arc<dyn TaskStore>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Arc<Pusher> {
        // This client brings its own TLS settings; other reqwest clients of the process (a
        // library user's) need the default provider.
        mesh_core::tls::install_crypto_provider();
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("agent-mesh-gateway/", env!("CARGO_PKG_VERSION")))
            // A proxy would resolve names itself, around the check below.
            .no_proxy()
            .dns_resolver(Arc::new(CheckedResolver {
                allow_private: settings.allow_private,
            }))
            .build()
            .map_err(|error| {
                tracing::error!(error = %chain(&error), "cannot build the webhook client; webhooks will fail");
                format!("no webhook client: {}", chain(&error))
            });
        let resumed = store.take_pending_deliveries();
        // Ids unique across the gateways that share a store (one may take another's
        // deliveries over): the time in milliseconds, shifted, then counted up.
        let now_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let next_id = (resumed.iter().map(|d| d.id).max().unwrap_or(0) + 1).max(now_ms << 20);
        let pusher = Arc::new(Pusher {
            settings,
            client,
            workers: Mutex::default(),
            pending: Arc::new(AtomicUsize::new(0)),
            posts: Arc::new(Semaphore::new(CONCURRENT_POSTS)),
            metrics,
            shutdown,
            store: Arc::downgrade(store),
            next_id: AtomicU64::new(next_id),
        });
        if !resumed.is_empty() {
            tracing::info!(
                deliveries = resumed.len(),
                "delivering the webhook notifications pending at the last stop"
            );
        }
        pusher.resume(resumed);
        pusher
    }

    /// Delivers deliveries made before: pending at the last stop, or taken over from a
    /// gateway that is gone (they keep their ids).
    pub(crate) fn resume(self: &Arc<Self>, deliveries: Vec<PendingDelivery>) {
        for delivery in deliveries {
            self.pending.fetch_add(1, Ordering::AcqRel);
            let task_id = delivery.task_id.clone();
            self.enqueue(&task_id, vec![Arc::new(delivery)]);
        }
    }

    pub(crate) fn allow_private(&self) -> bool {
        self.settings.allow_private
    }

    /// Queues `body` (a task as JSON) for every config; never blocks.
    pub(crate) fn notify(
        self: &Arc<Self>,
        task_id: &str,
        body: Vec<u8>,
        configs: Vec<TaskPushNotificationConfig>,
    ) {
        if configs.is_empty() {
            return;
        }
        if self.pending.fetch_add(1, Ordering::AcqRel) >= self.settings.queue {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            for _ in &configs {
                self.metrics.webhook_dropped();
            }
            tracing::warn!(task = %task_id, "the webhook delivery queue is full; notification dropped");
            return;
        }
        let body = bytes::Bytes::from(body);
        let now = SystemTime::now();
        let notification: Notification = configs
            .into_iter()
            .map(|config| {
                let delivery = Arc::new(PendingDelivery {
                    id: self.next_id.fetch_add(1, Ordering::Relaxed),
                    task_id: task_id.to_owned(),
                    config,
                    body: body.clone(),
                    attempts: 0,
                    next_attempt: now,
                });
                self.keep(&delivery);
                delivery
            })
            .collect();
        self.enqueue(task_id, notification);
    }

    /// Hands a notification (counted in `pending` already) to its task's worker.
    fn enqueue(self: &Arc<Self>, task_id: &str, mut notification: Notification) {
        let mut workers = self.workers.locked();
        if let Some(sender) = workers.get(task_id) {
            match sender.send(notification) {
                Ok(()) => return,
                // That worker is ending: start a new one.
                Err(mpsc::error::SendError(back)) => notification = back,
            }
        }
        let (sender, receiver) = mpsc::unbounded_channel();
        let _ = sender.send(notification);
        workers.insert(task_id.to_owned(), sender.clone());
        drop(workers);
        let pusher = self.clone();
        let task_id = task_id.to_owned();
        tokio::spawn(async move {
            pusher.work(receiver).await;
            let mut workers = pusher.workers.locked();
            if workers
                .get(&task_id)
                .is_some_and(|s| s.same_channel(&sender))
            {
                workers.remove(&task_id);
            }
        });
    }

    /// Delivers one task's notifications in order until it is idle.
    async fn work(&self, mut receiver: mpsc::UnboundedReceiver<Notification>) {
        loop {
            // `None`: idle for a while, or shutting down.
            let next = tokio::select! {
                next = tokio::time::timeout(WORKER_IDLE, receiver.recv()) => next.ok(),
                _ = self.shutdown.cancelled() => None,
            };
            match next {
                Some(Some(notification)) => self.deliver_all(notification).await,
                Some(None) => return,
                None => {
                    // Refuse new sends, then finish what is queued (or leave it when shutting
                    // down: the store keeps it for the next start).
                    receiver.close();
                    while let Some(notification) = receiver.recv().await {
                        if self.shutdown.is_cancelled() {
                            self.pending.fetch_sub(1, Ordering::AcqRel);
                            continue;
                        }
                        self.deliver_all(notification).await;
                    }
                    return;
                }
            }
        }
    }

    async fn deliver_all(&self, notification: Notification) {
        for delivery in notification {
            self.deliver(delivery).await;
        }
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    /// Makes the attempts left of one delivery; forgets it in the store when it succeeded
    /// or is given up (not when the gateway shuts down first: it is delivered at the next
    /// start).
    async fn deliver(&self, mut delivery: Arc<PendingDelivery>) {
        let attempts = self.settings.attempts.max(1);
        let id = delivery.id;
        // A delivery resumed after a restart waits for the time its next attempt was due.
        if let Ok(wait) = delivery.next_attempt.duration_since(SystemTime::now()) {
            tokio::select! {
                _ = tokio::time::sleep(wait.min(MAX_BACKOFF)) => {}
                _ = self.shutdown.cancelled() => return,
            }
        }
        // With a store shared by several gateways, the task as notified is where every one
        // of them reads it before its receiver hears of it (at once otherwise).
        if let Some(store) = self.store.upgrade().filter(|s| s.shared()) {
            store.written(&delivery.task_id).await;
        }
        let mut backoff = self.settings.backoff.min(MAX_BACKOFF);
        for _ in 0..delivery.attempts.min(attempts) {
            backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
        }
        let mut made = delivery.attempts;
        // Why the last attempt failed, for the log line of a delivery given up.
        let mut failure = String::from("no attempt left");
        while made < attempts {
            made += 1;
            let (task_id, url) = (&delivery.task_id, redact_url(&delivery.config.url));
            match self.post(&delivery.config, &delivery.body).await {
                Ok(status) if (200..300).contains(&status) => {
                    self.forget(id);
                    self.metrics.webhook_delivered();
                    return;
                }
                Ok(status) if !(status == 408 || status == 429 || status >= 500) => {
                    tracing::warn!(task = %task_id, %url, status, "the webhook refused the notification; not retrying");
                    self.metrics.webhook_given_up();
                    self.forget(id);
                    return;
                }
                Ok(status) => {
                    tracing::debug!(task = %task_id, %url, status, attempt = made, "webhook failed");
                    failure = format!("HTTP status {status}");
                }
                Err(_) if self.shutdown.is_cancelled() => {
                    tracing::debug!(task = %task_id, "shutting down; the webhook delivery stays pending");
                    return;
                }
                Err(error) => {
                    tracing::debug!(task = %task_id, %url, %error, attempt = made, "webhook failed");
                    failure = error;
                }
            }
            if made == attempts {
                break;
            }
            self.metrics.webhook_retry();
            let next = Arc::new(PendingDelivery {
                attempts: made,
                next_attempt: SystemTime::now()
                    .checked_add(backoff)
                    .unwrap_or_else(SystemTime::now),
                ..PendingDelivery::clone(&delivery)
            });
            self.keep(&next);
            delivery = next;
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.shutdown.cancelled() => {
                    tracing::debug!(task = %delivery.task_id, "shutting down; the webhook delivery stays pending");
                    return;
                }
            }
            backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
        }
        tracing::warn!(
            task = %delivery.task_id,
            url = %redact_url(&delivery.config.url),
            attempts,
            error = %failure,
            "webhook delivery given up"
        );
        self.metrics.webhook_given_up();
        self.forget(id);
    }

    fn keep(&self, delivery: &Arc<PendingDelivery>) {
        if let Some(store) = self.store.upgrade() {
            store.keep_delivery(delivery.clone());
        }
    }

    fn forget(&self, id: u64) {
        if let Some(store) = self.store.upgrade() {
            store.forget_delivery(id);
        }
    }

    /// One POST: the HTTP status, or why there is none.
    ///
    /// (The content type follows from the body, which keeps pending deliveries as they
    /// were.)
    async fn post(
        &self,
        config: &TaskPushNotificationConfig,
        body: &bytes::Bytes,
    ) -> Result<u16, String> {
        let url = Url::parse(&config.url).map_err(|e| e.to_string())?;
        // A literal address is not resolved (the resolver below checks names): check it here.
        let literal = url
            .host_str()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
            .and_then(|h| h.parse::<IpAddr>().ok());
        if literal.is_some_and(|ip| !self.settings.allow_private && !is_public(ip)) {
            return Err(format!(
                "{} is not a public address",
                redact_url(&config.url)
            ));
        }
        let client = self.client.as_ref().map_err(Clone::clone)?;
        let mut request = client
            .post(url)
            .header(header::CONTENT_TYPE, content_type(body))
            .body(body.clone());
        if let Some(token) = &config.token {
            request = request.header(TOKEN_HEADER, token);
        }
        if let Some(auth) = &config.authentication {
            request = request.header(
                header::AUTHORIZATION,
                authorization(&auth.scheme, auth.credentials.as_deref()),
            );
        }
        let _permit = self
            .posts
            .acquire()
            .await
            .map_err(|_| "shutting down".to_owned())?;
        // A shutdown does not wait for a slow webhook: the delivery stays pending.
        let response = tokio::select! {
            // reqwest's message quotes the URL: it is logged redacted, beside this.
            response = request.send() => response.map_err(|e| chain(&e.without_url()))?,
            _ = self.shutdown.cancelled() => return Err("shutting down".to_owned()),
        };
        Ok(response.status().as_u16())
    }
}

/// An error with its sources (reqwest's own message rarely says why: a refused connection,
/// an unknown certificate issuer).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The webhook client's resolver: the system's, refusing a name any of whose addresses is
/// not public (unless private webhooks are allowed). The client connects only to the
/// addresses this returns.
struct CheckedResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host.as_str(), 0)))
                    .await
                    .map_err(|_| format!("resolving {host:?} timed out"))?
                    .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
                    .collect();
            if !allow_private && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
                return Err(
                    format!("{host:?} resolves to {}, not a public address", bad.ip()).into(),
                );
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_ranges_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::",
            "100.64.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "172.32.0.1", "2001:4860::8888", "93.184.216.34"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn urls_are_checked() {
        for (url, needle) in [
            ("ftp://example.com/x", "scheme"),
            ("not a url", "valid URL"),
            ("http://127.0.0.1:9/x", "non-public"),
            ("http://[::1]:9/x", "non-public"),
            ("http://localhost:9/x", "non-public"),
            ("http://10.0.0.1/x", "non-public"),
            ("http://169.254.169.254/latest", "non-public"),
            ("http://user:pw@example.com/", "credentials"),
            ("file:///etc/passwd", "scheme"),
        ] {
            let error = check_url(url, false).await.unwrap_err();
            assert!(error.contains(needle), "{url}: {error}");
        }
        assert!(check_url("http://127.0.0.1:9/x", true).await.is_ok());
        assert!(check_url("http://localhost:9/x", true).await.is_ok());
        assert!(check_url("http://8.8.8.8/x", false).await.is_ok());
        assert!(check_url("https://8.8.8.8/x", false).await.is_ok());
        for url in ["https://127.0.0.1/x", "https://localhost:8443/x"] {
            let error = check_url(url, false).await.unwrap_err();
            assert!(error.contains("non-public"), "{url}: {error}");
            assert!(check_url(url, true).await.is_ok(), "{url}");
        }
    }

    #[tokio::test]
    async fn the_client_resolver_refuses_private_names() {
        use reqwest::dns::Resolve;
        let strict = CheckedResolver {
            allow_private: false,
        };
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        let refused = strict.resolve(name).await.err().unwrap();
        assert!(
            refused.to_string().contains("not a public address"),
            "{refused}"
        );
        let lenient = CheckedResolver {
            allow_private: true,
        };
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        assert!(lenient.resolve(name).await.is_ok());
    }
}
