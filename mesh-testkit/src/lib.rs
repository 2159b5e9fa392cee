//! # mesh-testkit
//!
//! What the tests of every crate share: a real broker per test (the embedded one, or a
//! Mosquitto process on a free port with `set_tcp_nodelay true`) and a fresh namespace, so
//! that parallel tests never see each other's traffic.
//!
//! ```no_run
//! # async fn demo() {
//! let mut broker = mesh_testkit::TestBroker::mosquitto().await;
//! let ns = mesh_testkit::fresh_namespace();
//! // connect to broker.url(), use topics under `ns` ...
//! broker.stop().await;
//! broker.restart().await; // same port
//! # let _ = ns;
//! # }
//! ```
//!
//! ## Brokers
//!
//! - [`TestBroker::mosquitto`]: a `mosquitto` process (from `/usr/sbin/mosquitto` or the
//!   `PATH`; `scripts/test` installs it with apt-get) with a generated configuration in a
//!   temporary directory, listening on `127.0.0.1` on a free port. It can be stopped and
//!   started again on the same port in the middle of a test, and is killed when the
//!   `TestBroker` is dropped.
//! - [`TestBroker::embedded`]: the embedded broker (`mesh_broker::Broker`) in the test's
//!   process, with the same `url`, `port`, `stop` and `restart`.
//! - [`TestBroker::mosquitto_with_packet_limit`] and
//!   [`TestBroker::embedded_with_packet_limit`]: either with a lower `max_packet_size`, for
//!   the tests of what a client does when the broker refuses a message.
//! - [`both_brokers!`]: one scenario as two tests, one per broker.
//!
//! ## Waits and clients
//!
//! - [`within`]: awaits a future for at most [`WAIT`], failing the test with what it waited
//!   for (no test hangs).
//! - [`TestBroker::bus_config`]: a bus configuration for the broker, with a short keep-alive.
//! - [`bus_mesh::BusMesh`]: a mesh seen from the bus (a requester and a registry playing the
//!   gateway) to run agents on and send them messages.
//!
//! - [`model_server::ModelServer`]: llama.cpp's server with a model file, for the LLM agent.
//!
//! ## Databases
//!
//! - [`TestDatabase`]: a fresh PostgreSQL database per test (on `MESH_TEST_POSTGRES`, by
//!   default the machine's server at 127.0.0.1:5432), dropped with the value.
//!
//! ## Certificates
//!
//! - [`TestCertificates`]: a CA and a server certificate for `localhost` / `127.0.0.1`,
//!   made in process (rcgen), for the tests of TLS servers.
//! - [`make_certificates`]: the same with the `openssl` command, for Mosquitto.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

pub mod bus_mesh;
mod certs;
pub mod model_server;
mod postgres;

pub use certs::TestCertificates;
pub use postgres::TestDatabase;

/// How long a broker may take to accept connections after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The bound on a test's single wait: [`within`] fails the test after it.
pub const WAIT: Duration = Duration::from_secs(10);

/// Awaits `fut`, failing the test with `what` if it takes longer than [`WAIT`].
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// A unique namespace for one test: `t` followed by a simple UUID (a safe topic segment).
pub fn fresh_namespace() -> String {
    format!("t{}", uuid::Uuid::new_v4().simple())
}

/// Where the `mosquitto` binary is: `/usr/sbin/mosquitto`, or the first on the `PATH`.
pub fn mosquitto_binary() -> Option<PathBuf> {
    let default = Path::new("/usr/sbin/mosquitto");
    if default.is_file() {
        return Some(default.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("mosquitto"))
        .find(|p| p.is_file())
}

/// A broker for one test, killed when dropped.
#[derive(Debug)]
pub struct TestBroker {
    kind: Kind,
}

/// The kinds of broker.
#[derive(Debug)]
enum Kind {
    Mosquitto(Box<Mosquitto>),
    /// The embedded broker; `None` while stopped. The port stays the same across restarts.
    Embedded {
        broker: Option<mesh_broker::Broker>,
        port: u16,
        /// Its packet size limit (kept for restarts).
        max_packet_size: u32,
    },
}

impl TestBroker {
    /// A bus configuration for this broker, with a keep-alive of 2 s (a dead connection is
    /// noticed within seconds).
    pub fn bus_config(&self) -> mesh_core::bus::BusConfig {
        let mut config =
            mesh_core::bus::BusConfig::new(&self.url()).expect("a test broker's URL is valid");
        config.keep_alive = Duration::from_secs(2);
        config
    }

    /// Starts a Mosquitto process on a free port and waits until it accepts connections.
    ///
    /// # Panics
    ///
    /// With a clear message if `mosquitto` is not installed or does not start: this is a test
    /// helper, and a test cannot go on without its broker. [`TestBroker::try_mosquitto`]
    /// returns the error instead.
    pub async fn mosquitto() -> TestBroker {
        match Self::try_mosquitto().await {
            Ok(broker) => broker,
            Err(e) => panic!("mesh-testkit: cannot start a Mosquitto test broker: {e}"),
        }
    }

    /// Starts a Mosquitto process on a free port and waits until it accepts connections.
    pub async fn try_mosquitto() -> io::Result<TestBroker> {
        Ok(TestBroker {
            kind: Kind::Mosquitto(Box::new(Mosquitto::start().await?)),
        })
    }

    /// A Mosquitto process like [`TestBroker::mosquitto`] whose `max_packet_size` is `limit`:
    /// it closes the connection of a client that publishes a larger packet.
    pub async fn mosquitto_with_packet_limit(limit: u32) -> TestBroker {
        match Mosquitto::start_with(false, limit).await {
            Ok(m) => TestBroker {
                kind: Kind::Mosquitto(Box::new(m)),
            },
            Err(e) => panic!("mesh-testkit: cannot start a Mosquitto test broker: {e}"),
        }
    }

    /// A Mosquitto process like [`TestBroker::mosquitto`] that queues at most `limit` QoS 1
    /// messages for a client (`max_queued_messages`, past its 20 in flight) and drops the
    /// rest, as a broker under a slow subscriber does.
    pub async fn mosquitto_with_queue_limit(limit: u32) -> TestBroker {
        match Mosquitto::start_with_limits(false, MOSQUITTO_MAX_PACKET_SIZE, limit).await {
            Ok(m) => TestBroker {
                kind: Kind::Mosquitto(Box::new(m)),
            },
            Err(e) => panic!("mesh-testkit: cannot start a Mosquitto test broker: {e}"),
        }
    }

    /// The embedded broker like [`TestBroker::embedded`] with `limit` as its
    /// `max_packet_size`.
    pub async fn embedded_with_packet_limit(limit: u32) -> TestBroker {
        let mut config = mesh_broker::BrokerConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
        config.max_packet_size = limit;
        match mesh_broker::Broker::start_with(config).await {
            Ok(broker) => TestBroker {
                kind: Kind::Embedded {
                    port: broker.local_addr().port(),
                    broker: Some(broker),
                    max_packet_size: limit,
                },
            },
            Err(e) => panic!("mesh-testkit: cannot start the embedded broker: {e}"),
        }
    }

    /// Starts the embedded broker (`mesh-broker`) in this process on a free port.
    ///
    /// # Panics
    ///
    /// If it cannot start.
    pub async fn embedded() -> TestBroker {
        let default = mesh_broker::BrokerConfig::default().max_packet_size;
        Self::embedded_with_packet_limit(default).await
    }

    /// The broker named by `MESH_TEST_BROKER` (`mosquitto`, the default, or `embedded`), so
    /// that one test suite runs against either.
    pub async fn from_env() -> TestBroker {
        match std::env::var("MESH_TEST_BROKER").as_deref() {
            Ok("embedded") => Self::embedded().await,
            _ => Self::mosquitto().await,
        }
    }

    /// The broker's URL: `mqtt://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        match &self.kind {
            Kind::Mosquitto(m) if m.tls => format!("mqtts://localhost:{}", self.port()),
            _ => format!("mqtt://127.0.0.1:{}", self.port()),
        }
    }

    /// Starts a Mosquitto process whose listener speaks TLS only, with a server certificate
    /// for `localhost` and `127.0.0.1` signed by a throwaway CA ([`TestBroker::ca_file`]).
    /// [`TestBroker::url`] is then `mqtts://localhost:<port>`. Needs the `openssl` command.
    ///
    /// # Panics
    ///
    /// If Mosquitto or openssl is missing or does not start.
    pub async fn mosquitto_tls() -> TestBroker {
        match Mosquitto::start_with(true, MOSQUITTO_MAX_PACKET_SIZE).await {
            Ok(m) => TestBroker {
                kind: Kind::Mosquitto(Box::new(m)),
            },
            Err(e) => panic!("mesh-testkit: cannot start a TLS Mosquitto test broker: {e}"),
        }
    }

    /// The PEM file of the CA that signed a TLS broker's certificate.
    pub fn ca_file(&self) -> Option<PathBuf> {
        match &self.kind {
            Kind::Mosquitto(m) if m.tls => Some(m.dir.join("ca.pem")),
            _ => None,
        }
    }

    /// The port the broker listens on (the same across [`TestBroker::restart`]).
    pub fn port(&self) -> u16 {
        match &self.kind {
            Kind::Mosquitto(m) => m.port,
            Kind::Embedded { port, .. } => *port,
        }
    }

    /// The broker's socket address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port()))
    }

    /// Whether the broker is running (not stopped).
    pub fn is_running(&self) -> bool {
        match &self.kind {
            Kind::Mosquitto(m) => m.child.is_some(),
            Kind::Embedded { broker, .. } => broker.is_some(),
        }
    }

    /// Stops the broker (kills the process and waits for it): every client connection drops.
    pub async fn stop(&mut self) {
        match &mut self.kind {
            Kind::Mosquitto(m) => m.stop().await,
            Kind::Embedded { broker, .. } => {
                if let Some(broker) = broker.take() {
                    broker.stop().await;
                }
            }
        }
    }

    /// Starts the broker again on the same port (stopping it first if it runs) and waits
    /// until it accepts connections.
    ///
    /// # Panics
    ///
    /// If the broker does not come back within the start timeout.
    pub async fn restart(&mut self) {
        match &mut self.kind {
            Kind::Mosquitto(m) => {
                m.stop().await;
                if let Err(e) = m.spawn_and_wait(Port::WaitUntilFree).await {
                    panic!(
                        "mesh-testkit: cannot restart Mosquitto on port {}: {e}",
                        m.port
                    );
                }
            }
            Kind::Embedded {
                broker,
                port,
                max_packet_size,
            } => {
                if let Some(running) = broker.take() {
                    running.stop().await;
                }
                let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, *port));
                let mut config = mesh_broker::BrokerConfig::new(addr);
                config.max_packet_size = *max_packet_size;
                match mesh_broker::Broker::start_with(config).await {
                    Ok(started) => *broker = Some(started),
                    Err(e) => {
                        panic!("mesh-testkit: cannot restart the embedded broker on {addr}: {e}")
                    }
                }
            }
        }
    }
}

/// What a Mosquitto that exits at once (its port is taken) means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Port {
    /// A port probed free a moment ago: someone else took it since (another test's
    /// connection, say), so the caller tries another port.
    FreshProbe,
    /// The port of a stopped Mosquitto, which the kernel can take a moment to free:
    /// retry on it until the start deadline.
    WaitUntilFree,
}

/// A Mosquitto process and its temporary directory.
#[derive(Debug)]
struct Mosquitto {
    binary: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    /// TLS on the listener: the server certificate and key in `dir`, signed by `ca.pem`.
    tls: bool,
    /// Its `max_packet_size`.
    max_packet_size: u32,
    /// Its `max_queued_messages`.
    max_queued_messages: u32,
}

/// The `max_packet_size` of a test Mosquitto unless a test asks for another.
const MOSQUITTO_MAX_PACKET_SIZE: u32 = 64 * 1024 * 1024;

/// The `max_queued_messages` of a test Mosquitto unless a test asks for another.
const MOSQUITTO_MAX_QUEUED: u32 = 10_000;

impl Mosquitto {
    async fn start() -> io::Result<Mosquitto> {
        Self::start_with(false, MOSQUITTO_MAX_PACKET_SIZE).await
    }

    async fn start_with(tls: bool, max_packet_size: u32) -> io::Result<Mosquitto> {
        Self::start_with_limits(tls, max_packet_size, MOSQUITTO_MAX_QUEUED).await
    }

    async fn start_with_limits(
        tls: bool,
        max_packet_size: u32,
        max_queued_messages: u32,
    ) -> io::Result<Mosquitto> {
        let binary = mosquitto_binary().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no `mosquitto` binary at /usr/sbin/mosquitto nor on the PATH \
                 (install it: apt-get install mosquitto; scripts/test does)",
            )
        })?;
        let dir =
            std::env::temp_dir().join(format!("mesh-testkit-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let mut last_err = None;
        // A free port can be taken by someone else between our probe and Mosquitto's bind:
        // try a few.
        for _ in 0..5 {
            let port = free_port()?;
            if tls {
                make_certificates(&dir)?;
            }
            let mut m = Mosquitto {
                binary: binary.clone(),
                dir: dir.clone(),
                port,
                child: None,
                tls,
                max_packet_size,
                max_queued_messages,
            };
            match m.spawn_and_wait(Port::FreshProbe).await {
                Ok(()) => return Ok(m),
                Err(e) => {
                    // Keep the directory for the next attempt.
                    m.dir = PathBuf::new();
                    last_err = Some(e);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(last_err.unwrap_or_else(|| io::Error::other("could not start mosquitto")))
    }

    fn config_path(&self) -> PathBuf {
        self.dir.join("mosquitto.conf")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("mosquitto.log")
    }

    fn write_config(&self) -> io::Result<()> {
        let config = format!(
            "# Generated by mesh-testkit for one test.\n\
             listener {port} 127.0.0.1\n\
             allow_anonymous true\n\
             set_tcp_nodelay true\n\
             persistence false\n\
             max_packet_size {max_packet_size}\n\
             max_inflight_messages {max_inflight}\n\
             max_queued_messages {max_queued}\n\
             log_dest stderr\n\
             log_type error\n\
             log_type warning\n\
             log_type notice\n",
            port = self.port,
            max_packet_size = self.max_packet_size,
            max_queued = self.max_queued_messages,
            // A small queue comes with Mosquitto's default window, so that it is the queue
            // that holds what a slow subscriber has not taken.
            max_inflight = if self.max_queued_messages < MOSQUITTO_MAX_QUEUED {
                20
            } else {
                100
            },
        );
        let config = if self.tls {
            format!(
                "{config}cafile {dir}/ca.pem\ncertfile {dir}/server.pem\nkeyfile {dir}/server.key\n",
                dir = self.dir.display()
            )
        } else {
            config
        };
        std::fs::write(self.config_path(), config)
    }

    /// Spawns the process on `self.port` and waits until the port accepts connections.
    async fn spawn_and_wait(&mut self, port: Port) -> io::Result<()> {
        self.write_config()?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let log = std::fs::File::create(self.log_path())?;
            let mut child = Command::new(&self.binary)
                .arg("-c")
                .arg(self.config_path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| {
                    io::Error::new(e.kind(), format!("spawning {}: {e}", self.binary.display()))
                })?;
            loop {
                if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                    .await
                    .is_ok()
                {
                    self.child = Some(child);
                    return Ok(());
                }
                if let Some(status) = child.try_wait()? {
                    let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
                    if port == Port::FreshProbe || Instant::now() >= deadline {
                        return Err(io::Error::other(format!(
                            "mosquitto exited with {status} on port {}: {}",
                            self.port,
                            log.trim()
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    break;
                }
                if Instant::now() >= deadline {
                    let _ = child.kill().await;
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "mosquitto did not accept connections on port {} within {START_TIMEOUT:?}",
                            self.port
                        ),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
            // Reap it if it already went, so no zombie stays behind.
            let _ = child.try_wait();
        }
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Runs one scenario twice, as two tests: against a Mosquitto process and against the embedded
/// broker. The scenario is an `async fn name(broker: TestBroker)` next to the macro call;
/// the tests are `name::mosquitto` and `name::embedded`.
#[macro_export]
macro_rules! both_brokers {
    ($scenario:ident) => {
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mosquitto() {
                super::$scenario($crate::TestBroker::mosquitto().await).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                super::$scenario($crate::TestBroker::embedded().await).await
            }
        }
    };
}

/// A throwaway CA and a server certificate for `localhost` / `127.0.0.1` in `dir` (which
/// must exist), made with the `openssl` command, readable by a broker that drops its
/// privileges: `ca.pem` (the CA), `server.pem` and `server.key` (the server's certificate
/// and its key, PKCS#8 PEM). Valid for two days.
pub fn make_certificates(dir: &std::path::Path) -> io::Result<()> {
    let run = |args: &[&str]| -> io::Result<()> {
        let status = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| io::Error::new(e.kind(), format!("openssl: {e} (install openssl)")))?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("openssl {args:?} failed")))
        }
    };
    let days = ["-days", "2"];
    run(&[
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=mesh-testkit-ca",
        ][..],
        &days[..],
    ]
    .concat())?;
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ])?;
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )?;
    run(&[
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-extfile",
            "ext.cnf",
        ][..],
        &days[..],
    ]
    .concat())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        for file in ["ca.pem", "server.pem", "server.key"] {
            std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o644))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_unique_safe_segments() {
        let a = fresh_namespace();
        let b = fresh_namespace();
        assert_ne!(a, b);
        assert!(a.starts_with('t') && a.len() == 33);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
    }

    #[tokio::test]
    async fn mosquitto_starts_stops_and_restarts_on_the_same_port() {
        let mut broker = TestBroker::mosquitto().await;
        let port = broker.port();
        assert_eq!(broker.url(), format!("mqtt://127.0.0.1:{port}"));
        assert!(tokio::net::TcpStream::connect(broker.addr()).await.is_ok());
        broker.stop().await;
        assert!(!broker.is_running());
        assert!(tokio::net::TcpStream::connect(broker.addr()).await.is_err());
        broker.restart().await;
        assert_eq!(broker.port(), port);
        assert!(tokio::net::TcpStream::connect(broker.addr()).await.is_ok());
    }
}
