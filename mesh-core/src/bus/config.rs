//! How to reach the broker: the broker URL, credentials, session and size limits, the last
//! will, TLS roots, timeouts and reconnect backoff of a [`Bus`](super::Bus).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rumqttc::QoS;

use super::BusError;

/// The default maximum MQTT packet size, both directions: 16 MiB (rumqttc's own default is
/// 10 KiB, far too small for A2A messages with file parts). The embedded broker takes the
/// same limit, so that nothing a client may publish is refused by the broker.
pub const DEFAULT_MAX_PACKET_SIZE: usize = 16 * 1024 * 1024;

/// The largest packet MQTT can frame: a remaining length of 268,435,455 bytes (four bytes of
/// variable-length integer) plus the five bytes of the fixed header.
pub const MQTT_MAX_PACKET_SIZE: usize = 268_435_455 + 5;

/// The smallest [`BusConfig::max_packet_size`] accepted: room for a card, a presence and an
/// error reply.
pub const MIN_MAX_PACKET_SIZE: usize = 4 * 1024;

/// Why a broker URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// No `scheme://` at the start.
    #[error("missing scheme (expected mqtt:// or mqtts://)")]
    MissingScheme,
    /// A scheme other than `mqtt` or `mqtts`.
    #[error("unsupported scheme {0:?} (expected mqtt or mqtts)")]
    UnsupportedScheme(String),
    /// No host after the scheme.
    #[error("missing host")]
    MissingHost,
    /// A port that is not a number in 1..=65535.
    #[error("invalid port {0:?}")]
    InvalidPort(String),
    /// Something after the authority (a path, query or fragment).
    #[error("unexpected {0:?} after host and port")]
    UnexpectedSuffix(String),
    /// A bad `%xx` escape, or user info that is not UTF-8 once decoded.
    #[error("invalid percent-encoding in user info")]
    BadPercentEncoding,
}

/// A parsed broker URL: `mqtt://[user[:password]@]host[:port]` (port 1883 by default) or
/// `mqtts://...` (TLS, port 8883 by default). IPv6 hosts go in brackets: `mqtt://[::1]:1883`.
#[derive(Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    /// Whether the connection uses TLS (`mqtts`).
    pub tls: bool,
    /// The host name or IP address (without brackets).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The user name from the URL's user info, percent-decoded.
    pub username: Option<String>,
    /// The password from the URL's user info, percent-decoded.
    pub password: Option<String>,
}

impl fmt::Debug for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the password.
        f.debug_struct("BrokerUrl")
            .field("tls", &self.tls)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl fmt::Display for BrokerUrl {
    /// The URL without user info.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "mqtts" } else { "mqtt" };
        if self.host.contains(':') {
            write!(f, "{scheme}://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{scheme}://{}:{}", self.host, self.port)
        }
    }
}

impl std::str::FromStr for BrokerUrl {
    type Err = UrlError;

    fn from_str(url: &str) -> Result<Self, UrlError> {
        BrokerUrl::parse(url)
    }
}

impl BrokerUrl {
    /// Parses `mqtt://` and `mqtts://` URLs.
    pub fn parse(url: &str) -> Result<Self, UrlError> {
        let (scheme, rest) = url.split_once("://").ok_or(UrlError::MissingScheme)?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "mqtt" | "tcp" => false,
            "mqtts" | "ssl" => true,
            _ => return Err(UrlError::UnsupportedScheme(scheme.to_owned())),
        };
        // A broker URL has no path: the last `@` ends the user info, so that a password
        // holding `/`, `?` or `#` is read whole (and never shown in an error).
        let (userinfo, after) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let end = after.find(['/', '?', '#']).unwrap_or(after.len());
        let (hostport, suffix) = after.split_at(end);
        if !suffix.is_empty() && suffix != "/" {
            return Err(UrlError::UnexpectedSuffix(suffix.to_owned()));
        }
        let (username, password) = match userinfo {
            None => (None, None),
            Some(u) => match u.split_once(':') {
                Some((user, pass)) => (Some(percent_decode(user)?), Some(percent_decode(pass)?)),
                None => (Some(percent_decode(u)?), None),
            },
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or(UrlError::MissingHost)?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| UrlError::InvalidPort(p.to_owned()))?,
                ),
            };
            (host, port)
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(UrlError::MissingHost);
        }
        let port = match port {
            None => {
                if tls {
                    8883
                } else {
                    1883
                }
            }
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n != 0 => n,
                _ => return Err(UrlError::InvalidPort(p.to_owned())),
            },
        };
        Ok(BrokerUrl {
            tls,
            host: host.to_owned(),
            port,
            username,
            password,
        })
    }
}

fn percent_decode(s: &str) -> Result<String, UrlError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .ok_or(UrlError::BadPercentEncoding)?;
            let hex = std::str::from_utf8(hex).map_err(|_| UrlError::BadPercentEncoding)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| UrlError::BadPercentEncoding)?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| UrlError::BadPercentEncoding)
}

/// The message the broker publishes for a client that goes away without a clean
/// DISCONNECT (crash, network loss, keep-alive timeout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastWill {
    /// The topic of the will.
    pub topic: String,
    /// The payload of the will.
    pub payload: Bytes,
    /// The QoS of the will.
    pub qos: QoS,
    /// Whether the will is retained.
    pub retain: bool,
}

/// Where the certificate authorities that a `mqtts://` broker's certificate must chain to
/// come from (see [`crate::tls`]).
pub use crate::tls::TlsRoots;

/// The most nodes a broker URL may list.
pub const MAX_BROKER_NODES: usize = 16;

/// Exponential reconnect backoff: `min`, doubled after every failed attempt, capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub min: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            min: Duration::from_millis(50),
            max: Duration::from_secs(2),
        }
    }
}

impl Backoff {
    /// The delay before attempt number `attempt` (0 for the first retry).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.min.saturating_mul(factor).min(self.max)
    }
}

/// Everything [`Bus::connect`](super::Bus::connect) needs. Build it with [`BusConfig::new`]
/// and change the public fields.
#[derive(Clone)]
pub struct BusConfig {
    /// The broker (the first node of its cluster).
    pub url: BrokerUrl,
    /// The other nodes of the broker's cluster, in order: when the connection to a node
    /// fails (or cannot be made), the bus tries the next one, round the list, and
    /// re-subscribes there. Empty: one broker. [`BusConfig::new`] takes them from a
    /// comma-separated list of URLs; a node's URL without user info uses
    /// [`BusConfig::username`] and [`BusConfig::password`].
    pub failover: Vec<BrokerUrl>,
    /// The user name (taken from the URL's user info by [`BusConfig::new`]).
    pub username: Option<String>,
    /// The password (taken from the URL's user info by [`BusConfig::new`]).
    pub password: Option<String>,
    /// The MQTT client id; [`BusConfig::new`] makes a unique `mesh-<uuid>`.
    pub client_id: String,
    /// The MQTT keep-alive: zero (off) or at least one second. Default 30 s.
    pub keep_alive: Duration,
    /// Whether the broker forgets the session when the client goes. Default `true`.
    pub clean_session: bool,
    /// The QoS of [`Bus::send`](super::Bus::send). Default QoS 1.
    pub default_qos: QoS,
    /// The largest MQTT packet (fixed header included) this client publishes or takes in.
    /// Default [`DEFAULT_MAX_PACKET_SIZE`]; at least [`MIN_MAX_PACKET_SIZE`], at most
    /// [`MQTT_MAX_PACKET_SIZE`].
    ///
    /// A publish larger than this fails at once with
    /// [`BusError::PayloadTooLarge`](super::BusError::PayloadTooLarge) and never reaches the
    /// broker. An incoming message larger than this is read off the socket, discarded, counted
    /// ([`BusStats::oversized_dropped`](super::BusStats)) and logged: the connection stays up.
    /// The broker's own limit should be the same (Mosquitto: `max_packet_size`), so that it
    /// refuses such a message at its source.
    pub max_packet_size: usize,
    /// The will the broker publishes if this client dies without a clean DISCONNECT.
    pub last_will: Option<LastWill>,
    /// Capacity of the queue of requests (publish, subscribe) waiting for the connection.
    /// Default 1024.
    pub request_channel_capacity: usize,
    /// How many messages each [`Subscription`](super::Subscription) buffers before the
    /// dispatcher waits for room (backpressure). Default 256.
    pub subscription_capacity: usize,
    /// How long [`Bus::connect`](super::Bus::connect) waits for the first CONNACK.
    /// Default 5 s.
    pub connect_timeout: Duration,
    /// How long a publish waits for room in the request queue and a subscribe waits for its
    /// SUBACK. Default 10 s.
    pub request_timeout: Duration,
    /// Backoff between reconnect attempts. Default 50 ms doubling to 2 s.
    pub backoff: Backoff,
    /// The certificate authorities trusted for `mqtts://`.
    pub tls_roots: TlsRoots,
}

impl fmt::Debug for BusConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BusConfig")
            .field("url", &self.url)
            .field("failover", &self.failover)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("client_id", &self.client_id)
            .field("keep_alive", &self.keep_alive)
            .field("clean_session", &self.clean_session)
            .field("default_qos", &self.default_qos)
            .field("max_packet_size", &self.max_packet_size)
            .field("last_will", &self.last_will)
            .field("request_channel_capacity", &self.request_channel_capacity)
            .field("subscription_capacity", &self.subscription_capacity)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("backoff", &self.backoff)
            .field("tls_roots", &self.tls_roots)
            .finish()
    }
}

impl BusConfig {
    /// A configuration with the defaults for the broker at `url` (`mqtt://` or `mqtts://`);
    /// user name and password come from the URL's user info, if any.
    ///
    /// `url` may list the nodes of a broker cluster, separated by commas
    /// (`mqtt://a:1883,mqtt://b:1883`): the first is [`BusConfig::url`], the others
    /// [`BusConfig::failover`].
    pub fn new(url: &str) -> Result<Self, BusError> {
        let mut nodes = Vec::new();
        for node in url.split(',').map(str::trim) {
            nodes.push(
                BrokerUrl::parse(node).map_err(|reason| BusError::InvalidUrl {
                    url: redact_url(node),
                    reason,
                })?,
            );
        }
        if nodes.len() > MAX_BROKER_NODES {
            return Err(BusError::InvalidConfig(format!(
                "at most {MAX_BROKER_NODES} broker URLs, not {}",
                nodes.len()
            )));
        }
        let url = nodes.remove(0);
        Ok(BusConfig {
            username: url.username.clone(),
            password: url.password.clone(),
            url,
            failover: nodes,
            client_id: format!("mesh-{}", uuid::Uuid::new_v4().simple()),
            keep_alive: Duration::from_secs(30),
            clean_session: true,
            default_qos: QoS::AtLeastOnce,
            max_packet_size: DEFAULT_MAX_PACKET_SIZE,
            last_will: None,
            request_channel_capacity: 1024,
            subscription_capacity: 256,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            backoff: Backoff::default(),
            tls_roots: TlsRoots::default(),
        })
    }

    /// Sets the client id.
    pub fn with_client_id(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = client_id.into();
        self
    }

    /// The same nodes, starting at `node` (a URL without user info, as [`Bus::node`]
    /// shows it) and then in their order round the list; unchanged when `node` is not one
    /// of them. A session kept on one node of a cluster is found there only.
    ///
    /// [`Bus::node`]: super::Bus::node
    pub fn starting_at(mut self, node: &str) -> Self {
        let mut all = Vec::with_capacity(self.failover.len() + 1);
        all.push(self.url.clone());
        all.extend(self.failover.iter().cloned());
        let Some(at) = all.iter().position(|url| url.to_string() == node) else {
            return self;
        };
        // A node without credentials of its own used the config's: it keeps them as its
        // own, and the new first node's become the config's.
        for url in all.iter_mut().filter(|url| url.username.is_none()) {
            url.username.clone_from(&self.username);
            url.password.clone_from(&self.password);
        }
        all.rotate_left(at);
        let mut all = all.into_iter();
        if let Some(first) = all.next() {
            if first.username.is_some() {
                self.username.clone_from(&first.username);
                self.password.clone_from(&first.password);
            }
            self.url = first;
        }
        self.failover = all.collect();
        self
    }

    /// Sets the last will.
    pub fn with_last_will(mut self, will: LastWill) -> Self {
        self.last_will = Some(will);
        self
    }

    /// Sets user name and password.
    pub fn with_credentials(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.username = Some(username.into());
        self.password = Some(password.into());
        self
    }

    /// The options of each node ([`BusConfig::url`], then [`BusConfig::failover`]), with the
    /// node as it may be shown.
    pub(crate) fn nodes(&self) -> Result<Vec<(String, rumqttc::MqttOptions)>, BusError> {
        let mut nodes = vec![(self.url.to_string(), self.mqtt_options()?)];
        for url in &self.failover {
            let mut node = self.clone();
            node.url = url.clone();
            if url.username.is_some() {
                node.username.clone_from(&url.username);
                node.password.clone_from(&url.password);
            }
            nodes.push((url.to_string(), node.mqtt_options()?));
        }
        Ok(nodes)
    }

    /// Checks the values rumqttc would otherwise panic on, and builds its options.
    pub(crate) fn mqtt_options(&self) -> Result<rumqttc::MqttOptions, BusError> {
        let invalid = |reason: &str| Err(BusError::InvalidConfig(reason.to_owned()));
        if !self.keep_alive.is_zero() && self.keep_alive < Duration::from_secs(1) {
            return invalid("keep_alive must be zero or at least one second");
        }
        if self.client_id.is_empty() && !self.clean_session {
            return invalid("a persistent session (clean_session = false) needs a client id");
        }
        if self.request_channel_capacity == 0 || self.subscription_capacity == 0 {
            return invalid("channel capacities must be at least 1");
        }
        if self.password.is_some() && self.username.is_none() {
            return invalid("MQTT 3.1.1 allows a password only with a user name");
        }
        if self.backoff.min.is_zero() || self.backoff.max < self.backoff.min {
            return invalid("backoff.min must be positive and at most backoff.max");
        }
        if !(MIN_MAX_PACKET_SIZE..=MQTT_MAX_PACKET_SIZE).contains(&self.max_packet_size) {
            return Err(BusError::InvalidConfig(format!(
                "max_packet_size must be between {MIN_MAX_PACKET_SIZE} and {MQTT_MAX_PACKET_SIZE} bytes, not {}",
                self.max_packet_size
            )));
        }
        let mut opts =
            rumqttc::MqttOptions::new(self.client_id.clone(), self.url.host.clone(), self.url.port);
        opts.set_keep_alive(self.keep_alive)
            .set_clean_session(self.clean_session)
            // rumqttc drops the connection on an incoming packet over its limit, and the
            // broker sends the same message again after the reconnect (a retained one on
            // every re-subscription): it frames every packet MQTT allows, and the driver
            // discards those over `max_packet_size`.
            .set_max_packet_size(MQTT_MAX_PACKET_SIZE, self.max_packet_size)
            .set_request_channel_capacity(self.request_channel_capacity)
            // The driver acknowledges (`Driver::acknowledge`).
            .set_manual_acks(true);
        if let Some(user) = &self.username {
            opts.set_credentials(user.clone(), self.password.clone().unwrap_or_default());
        }
        if let Some(will) = &self.last_will {
            opts.set_last_will(rumqttc::LastWill {
                topic: will.topic.clone(),
                message: will.payload.clone(),
                qos: will.qos,
                retain: will.retain,
            });
        }
        if self.url.tls {
            let tls = self.rustls_config()?;
            opts.set_transport(rumqttc::Transport::tls_with_config(
                rumqttc::TlsConfiguration::Rustls(tls),
            ));
        }
        Ok(opts)
    }

    fn rustls_config(&self) -> Result<Arc<rustls::ClientConfig>, BusError> {
        self.tls_roots.client_config().map_err(BusError::Tls)
    }
}

/// A URL as it may be shown (log lines, error messages, status output): the password of its
/// user info replaced by `***` (`mqtt://user:***@host:1883`; the user name stays), and its
/// query and fragment, which often carry tokens, by `?***`. The one function every crate uses
/// before a URL reaches a person or a log.
///
/// It errs on the side of hiding: the user info ends at the last `@` of the authority, so a
/// password with an `@` in it is hidden whole. For the schemes without a path (`mqtt`,
/// `mqtts`, `tcp`, `ssl`) the last `@` anywhere ends it, so a password holding a `/`, `?` or
/// `#` is hidden too; for the others, such a password is recognised when what precedes it is
/// `user:` followed by something other than a port number. A text with `@` but no `scheme://`
/// keeps only what follows its last `@`.
pub fn redact_url(url: &str) -> String {
    const HIDDEN: &str = "***";
    let Some((scheme, rest)) = url.split_once("://") else {
        return match url.rsplit_once('@') {
            Some((_, host)) => format!("{HIDDEN}@{}", redact_query(host)),
            None => url.to_owned(),
        };
    };
    let pathless = matches!(
        scheme.to_ascii_lowercase().as_str(),
        "mqtt" | "mqtts" | "tcp" | "ssl"
    );
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let userinfo_end = match rest[..authority_end].rfind('@') {
        _ if pathless => rest.rfind('@'),
        Some(at) => Some(at),
        // `user:pa/ss@host`: the text before the first `/` is `user:` and no port number.
        None => rest[..authority_end]
            .split_once(':')
            .filter(|(_, after)| !after.is_empty() && !after.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|_| rest.rfind('@')),
    };
    let (user, after) = match userinfo_end {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            (Some(user), &rest[at + 1..])
        }
        None => (None, rest),
    };
    let after = redact_query(after);
    match user {
        Some(user) => format!("{scheme}://{user}:{HIDDEN}@{after}"),
        None => format!("{scheme}://{after}"),
    }
}

/// `host/path?query#fragment` with the query and fragment replaced by `?***`.
fn redact_query(text: &str) -> String {
    match text.find(['?', '#']) {
        Some(at) => format!("{}?***", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starting_at_rotates_the_nodes_and_keeps_each_ones_credentials() {
        let config = BusConfig::new("mqtt://u:p@a:1883,mqtt://b:1883,mqtt://v:q@c:1883").unwrap();
        let nodes = |c: &BusConfig| {
            c.nodes()
                .unwrap()
                .into_iter()
                .map(|(url, options)| {
                    let login = options.credentials().map(|l| l.username.clone());
                    (url, login)
                })
                .collect::<Vec<_>>()
        };
        let before = nodes(&config);
        let at_c = config.clone().starting_at("mqtt://c:1883");
        let mut expected = before.clone();
        expected.rotate_left(2);
        assert_eq!(nodes(&at_c), expected);
        let at_b = config.clone().starting_at("mqtt://b:1883");
        let mut expected = before.clone();
        expected.rotate_left(1);
        assert_eq!(nodes(&at_b), expected);
        assert_eq!(nodes(&config.clone().starting_at("mqtt://z:1883")), before);
    }

    #[test]
    fn parses_urls() {
        let u = BrokerUrl::parse("mqtt://localhost:1884").unwrap();
        assert_eq!((u.tls, u.host.as_str(), u.port), (false, "localhost", 1884));
        assert_eq!(u.username, None);
        let u = BrokerUrl::parse("mqtts://broker.example").unwrap();
        assert_eq!((u.tls, u.port), (true, 8883));
        let u = BrokerUrl::parse("mqtt://host").unwrap();
        assert_eq!(u.port, 1883);
        let u = BrokerUrl::parse("mqtt://al%40ice:p%3Ass@h:1/").unwrap();
        assert_eq!(u.username.as_deref(), Some("al@ice"));
        assert_eq!(u.password.as_deref(), Some("p:ss"));
        let u = BrokerUrl::parse("mqtt://[::1]:1999").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 1999));
        assert_eq!(u.to_string(), "mqtt://[::1]:1999");
        let u = BrokerUrl::parse("mqtt://bob@h").unwrap();
        assert_eq!((u.username.as_deref(), u.password), (Some("bob"), None));
    }

    #[test]
    fn refuses_bad_urls() {
        assert_eq!(
            BrokerUrl::parse("localhost:1883"),
            Err(UrlError::MissingScheme)
        );
        assert!(matches!(
            BrokerUrl::parse("http://h"),
            Err(UrlError::UnsupportedScheme(_))
        ));
        assert_eq!(BrokerUrl::parse("mqtt://"), Err(UrlError::MissingHost));
        assert_eq!(BrokerUrl::parse("mqtt://:1883"), Err(UrlError::MissingHost));
        assert!(matches!(
            BrokerUrl::parse("mqtt://h:x"),
            Err(UrlError::InvalidPort(_))
        ));
        assert!(matches!(
            BrokerUrl::parse("mqtt://h:0"),
            Err(UrlError::InvalidPort(_))
        ));
        assert!(matches!(
            BrokerUrl::parse("mqtt://h:70000"),
            Err(UrlError::InvalidPort(_))
        ));
        assert!(matches!(
            BrokerUrl::parse("mqtt://h/path"),
            Err(UrlError::UnexpectedSuffix(_))
        ));
        assert_eq!(
            BrokerUrl::parse("mqtt://a%zz@h"),
            Err(UrlError::BadPercentEncoding)
        );
        let err = BusConfig::new("mqtt://u:secret@h:x").unwrap_err();
        assert!(matches!(err, BusError::InvalidUrl { .. }));
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn redact_url_hides_passwords_and_queries() {
        for (url, shown) in [
            ("mqtt://127.0.0.1:1884", "mqtt://127.0.0.1:1884"),
            ("mqtt://user:s3cret@h:1883", "mqtt://user:***@h:1883"),
            ("mqtt://user@h", "mqtt://user:***@h"),
            (
                "mqtts://gw:p@ss@broker.example:8883",
                "mqtts://gw:***@broker.example:8883",
            ),
            ("mqtt://user:pa/ss@h:1", "mqtt://user:***@h:1"),
            ("mqtt://user:p?a#s@h", "mqtt://user:***@h"),
            ("mqtt://user:s3@pa/ss@h:1", "mqtt://user:***@h:1"),
            ("ssl://u:x@h", "ssl://u:***@h"),
            ("ws://u:pw@h:8083/mqtt", "ws://u:***@h:8083/mqtt"),
            ("wss://u:p@w@h/mqtt", "wss://u:***@h/mqtt"),
            ("wss://u:pa/ss@h/mqtt", "wss://u:***@h/mqtt"),
            ("ws://h:8083/mqtt", "ws://h:8083/mqtt"),
            ("https://h:8443/users/@me", "https://h:8443/users/@me"),
            ("https://h/hook?token=abc#x", "https://h/hook?***"),
            ("https://u:pw@h/hook?sig=1", "https://u:***@h/hook?***"),
            ("user:pw@h:1883", "***@h:1883"),
            ("not a url", "not a url"),
            ("", ""),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
        for secret in ["s3cret", "p@ss", "pa/ss"] {
            let url = format!("mqtt://user:{secret}@h");
            assert!(!redact_url(&url).contains(secret), "{url}");
        }
    }

    #[test]
    fn a_password_with_slashes_or_at_signs_is_read_whole_and_never_shown() {
        let u = BrokerUrl::parse("mqtt://user:pa/s?s#@w@h:1884").unwrap();
        assert_eq!(u.password.as_deref(), Some("pa/s?s#@w"));
        assert_eq!((u.host.as_str(), u.port), ("h", 1884));
        for bad in [
            "mqtt://user:pa/ss@h:x",
            "mqtt://user:pa/ss@h/x",
            "http://u:pa/ss@h",
        ] {
            let err = BusConfig::new(bad).unwrap_err().to_string();
            assert!(!err.contains("pa/ss") && !err.contains("ss@"), "{err}");
        }
    }

    #[test]
    fn config_takes_credentials_from_url_and_hides_them() {
        let c = BusConfig::new("mqtt://u:secret@h").unwrap();
        assert_eq!(c.username.as_deref(), Some("u"));
        assert_eq!(c.password.as_deref(), Some("secret"));
        assert!(!format!("{c:?}").contains("secret"));
        assert_eq!(c.max_packet_size, 16 * 1024 * 1024);
        assert_eq!(c.default_qos, QoS::AtLeastOnce);
        assert!(c.mqtt_options().is_ok());
    }

    #[test]
    fn a_list_of_urls_is_the_nodes_of_a_cluster_each_with_the_credentials_it_names() {
        let c = BusConfig::new("mqtt://u:p@a:1, mqtt://b:2,mqtts://v:q@c").unwrap();
        assert_eq!((c.url.host.as_str(), c.url.port), ("a", 1));
        let hosts: Vec<&str> = c.failover.iter().map(|u| u.host.as_str()).collect();
        assert_eq!(hosts, ["b", "c"]);
        let nodes = c.nodes().unwrap();
        let shown: Vec<&str> = nodes.iter().map(|(url, _)| url.as_str()).collect();
        assert_eq!(shown, ["mqtt://a:1", "mqtt://b:2", "mqtts://c:8883"]);
        let credentials = |i: usize| nodes[i].1.credentials().map(|login| login.username);
        assert_eq!(
            (credentials(0), credentials(1), credentials(2)),
            (Some("u".into()), Some("u".into()), Some("v".into()))
        );
        assert!(!format!("{c:?}").contains(":q@") && !format!("{c:?}").contains("\"q\""));
        assert!(matches!(
            BusConfig::new("mqtt://a,http://b"),
            Err(BusError::InvalidUrl { .. })
        ));
        let many = vec!["mqtt://a"; MAX_BROKER_NODES + 1].join(",");
        assert!(matches!(
            BusConfig::new(&many),
            Err(BusError::InvalidConfig(_))
        ));
    }

    #[test]
    fn refuses_values_rumqttc_would_panic_on() {
        let mut c = BusConfig::new("mqtt://h").unwrap();
        c.keep_alive = Duration::from_millis(500);
        assert!(matches!(c.mqtt_options(), Err(BusError::InvalidConfig(_))));
        for size in [0, MIN_MAX_PACKET_SIZE - 1, MQTT_MAX_PACKET_SIZE + 1] {
            let mut c = BusConfig::new("mqtt://h").unwrap();
            c.max_packet_size = size;
            assert!(
                matches!(c.mqtt_options(), Err(BusError::InvalidConfig(_))),
                "{size}"
            );
        }
        let mut c = BusConfig::new("mqtt://h").unwrap().with_client_id("");
        c.clean_session = false;
        assert!(matches!(c.mqtt_options(), Err(BusError::InvalidConfig(_))));
    }

    #[test]
    fn tls_config_with_a_missing_ca_file_is_a_typed_error() {
        let mut c = BusConfig::new("mqtts://h").unwrap();
        c.tls_roots.ca_file = Some("/nonexistent/ca.pem".into());
        assert!(matches!(c.mqtt_options(), Err(BusError::Tls(_))));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let b = Backoff::default();
        assert_eq!(b.delay(0), Duration::from_millis(50));
        assert_eq!(b.delay(1), Duration::from_millis(100));
        assert_eq!(b.delay(5), Duration::from_millis(1600));
        assert_eq!(b.delay(6), Duration::from_secs(2));
        assert_eq!(b.delay(1000), Duration::from_secs(2));
    }
}
