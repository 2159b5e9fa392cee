//! The processes under test: the broker (`mesh broker` or a Mosquitto process), the gateway
//! (`mesh gateway`) and agents (`mesh agent <name>`), each a separate OS process so that its
//! RSS can be read from `/proc` and it can be killed with SIGKILL. Every process writes its
//! output to a log file in the run directory; every process is killed when dropped.

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which broker a run is against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerKind {
    /// `mesh broker` (rmqtt inside), as its own process.
    Embedded,
    /// A Mosquitto process with `set_tcp_nodelay true`.
    Mosquitto,
}

impl BrokerKind {
    /// The column heading.
    pub fn label(self) -> &'static str {
        match self {
            BrokerKind::Embedded => "embedded",
            BrokerKind::Mosquitto => "mosquitto",
        }
    }
}

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Where the `mesh` binary is: `--mesh-bin`, else next to this executable (the same target
/// directory, as `cargo build --release -p mesh-cli -p mesh-bench` leaves them).
pub fn mesh_binary(given: Option<&Path>) -> Result<PathBuf, String> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot locate this executable: {e}"))?
            .with_file_name("mesh"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "the `mesh` binary is missing at {}: build it first with \
             `cargo build --release -p mesh-cli` (scripts/bench does), or pass --mesh-bin",
            path.display()
        ))
    }
}

/// Where `mosquitto` is: `/usr/sbin/mosquitto` or the first on the `PATH`.
pub fn mosquitto_binary() -> Option<PathBuf> {
    let default = Path::new("/usr/sbin/mosquitto");
    if default.is_file() {
        return Some(default.to_path_buf());
    }
    find_on_path("mosquitto")
}

/// The first `name` on the `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A child process, killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Proc {
    pub name: String,
    child: Child,
}

impl Proc {
    /// Spawns `program args`, output to `<dir>/<name>.log`.
    pub fn spawn(dir: &Path, name: &str, program: &Path, args: &[String]) -> io::Result<Proc> {
        let log = File::create(dir.join(format!("{name}.log")))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(Proc {
            name: name.into(),
            child,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGKILL (what `kill -9` does) and reaps the process.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it has exited (and how), without waiting.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }

    /// CPU time used so far, user plus system, in seconds (`utime` and `stime` of
    /// `/proc/<pid>/stat`, in USER_HZ ticks: 100 per second on Linux).
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        let [utime, stime, _, _] = stat_cpu_ticks(&stat)?;
        Some((utime + stime) as f64 / 100.0)
    }

    /// Resident set size in KiB (`VmRSS` of `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> Option<u64> {
        self.status_kib("VmRSS:")
    }

    /// The largest resident set size so far, in KiB (`VmHWM`).
    pub fn peak_rss_kib(&self) -> Option<u64> {
        self.status_kib("VmHWM:")
    }

    fn status_kib(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// CPU time used so far by this process and by its children that have been waited for (wrk
/// runs, once each has ended), user plus system, in seconds (`utime`, `stime`, `cutime` and
/// `cstime` of `/proc/self/stat`).
pub fn own_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let ticks = stat_cpu_ticks(&stat)?;
    Some(ticks.iter().sum::<u64>() as f64 / 100.0)
}

/// `utime`, `stime`, `cutime` and `cstime` of a `/proc/<pid>/stat` line (fields 14 to 17, in
/// USER_HZ ticks: 100 per second on Linux).
fn stat_cpu_ticks(stat: &str) -> Option<[u64; 4]> {
    // The fields after the command name (which may hold spaces), from the state on: utime is
    // the 12th of them.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split(' ').skip(11);
    let mut next = || fields.next()?.parse::<u64>().ok();
    Some([next()?, next()?, next()?, next()?])
}

/// Waits until something accepts TCP connections on `addr`.
pub fn wait_for_port(addr: SocketAddr, timeout: Duration, proc: &mut Proc) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(status) = proc.exited() {
            return Err(format!("{} exited ({status}) before listening", proc.name));
        }
        if Instant::now() > deadline {
            return Err(format!("{} does not listen on {addr}", proc.name));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A broker process under test.
#[derive(Debug)]
pub struct BrokerProc {
    pub kind: BrokerKind,
    pub port: u16,
    pub proc: Proc,
}

impl BrokerProc {
    /// Starts the broker of `kind` on a free port and waits until it accepts connections.
    pub fn start(kind: BrokerKind, dir: &Path, mesh: &Path) -> Result<BrokerProc, String> {
        let port = free_port().map_err(|e| e.to_string())?;
        let mut proc = match kind {
            BrokerKind::Embedded => Proc::spawn(
                dir,
                "broker-embedded",
                mesh,
                &["broker".into(), format!("--broker-addr=127.0.0.1:{port}")],
            ),
            BrokerKind::Mosquitto => {
                let Some(bin) = mosquitto_binary() else {
                    return Err("mosquitto is not installed (apt-get install -y mosquitto)".into());
                };
                let conf = dir.join("mosquitto.conf");
                std::fs::write(
                    &conf,
                    format!(
                        "listener {port} 127.0.0.1\n\
                         allow_anonymous true\n\
                         set_tcp_nodelay true\n\
                         persistence false\n\
                         max_packet_size 67108864\n\
                         max_inflight_messages 100\n\
                         max_queued_messages 10000\n\
                         log_dest stderr\n\
                         log_type error\n\
                         log_type warning\n"
                    ),
                )
                .map_err(|e| e.to_string())?;
                Proc::spawn(
                    dir,
                    "broker-mosquitto",
                    &bin,
                    &["-c".into(), conf.display().to_string()],
                )
            }
        }
        .map_err(|e| format!("cannot start the {} broker: {e}", kind.label()))?;
        wait_for_port(
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            Duration::from_secs(10),
            &mut proc,
        )?;
        Ok(BrokerProc { kind, port, proc })
    }

    /// `mqtt://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }
}

/// Where a benchmarked gateway keeps its tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    /// `--memory-store`: the figures of the mesh itself.
    Memory,
    /// The durable SQLite store (written behind), in a fresh data directory under the
    /// bench's directory: what it costs.
    Durable,
    /// The PostgreSQL store several gateways share (`--store <url>`), its gateway id in a fresh
    /// data directory under the bench's directory.
    Shared { url: String },
    /// The store of a gateway that ran before (its data directory, and its `--store` URL if
    /// it had one): a restart.
    Again {
        data_dir: PathBuf,
        url: Option<String>,
    },
}

/// The data directory of the gateway [`start_gateway`] started at `base`.
pub fn data_dir(dir: &Path, base: &str) -> PathBuf {
    let port = base.rsplit(':').next().unwrap_or_default();
    dir.join(format!("data-{port}"))
}

/// The gateways' `--max-connections`: more than any case opens (the open files are the limit).
const BENCH_MAX_CONNECTIONS: usize = 100_000;

/// Starts `mesh gateway` on a free port, connected to `broker_url`, and waits for
/// `GET /readyz` to answer 200. Returns the process and its base URL.
pub async fn start_gateway(
    dir: &Path,
    mesh: &Path,
    broker_url: &str,
    namespace: &str,
    store: Store,
    http: &reqwest::Client,
) -> Result<(Proc, String), String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let data_dir = format!(
        "--data-dir={}",
        data_dir(dir, &format!("http://127.0.0.1:{port}")).display()
    );
    let store_args = match store {
        Store::Memory => vec!["--memory-store".to_owned()],
        Store::Durable => vec![data_dir],
        Store::Shared { url } => vec![format!("--store={url}"), data_dir],
        Store::Again { data_dir, url } => {
            let mut args = vec![format!("--data-dir={}", data_dir.display())];
            args.extend(url.map(|url| format!("--store={url}")));
            args
        }
    };
    let mut args = vec![
        "gateway".into(),
        format!("--broker-url={broker_url}"),
        format!("--http-addr=127.0.0.1:{port}"),
        format!("--namespace={namespace}"),
        // The curves hold 10,000 streams on connections of their own, past the default.
        format!("--max-connections={BENCH_MAX_CONNECTIONS}"),
    ];
    args.extend(store_args);
    let mut proc = Proc::spawn(dir, &format!("gateway-{namespace}-{port}"), mesh, &args)
        .map_err(|e| format!("cannot start the gateway: {e}"))?;
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ready = http.get(format!("{base}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return Ok((proc, base));
        }
        if let Some(status) = proc.exited() {
            return Err(format!("the gateway exited ({status}) before it was ready"));
        }
        if Instant::now() > deadline {
            return Err("the gateway is not ready after 15 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Spawns `mesh agent <name>` on `broker_url` in `namespace` (does not wait).
pub fn spawn_agent(
    dir: &Path,
    mesh: &Path,
    name: &str,
    broker_url: &str,
    namespace: &str,
) -> Result<Proc, String> {
    Proc::spawn(
        dir,
        &format!("agent-{name}-{namespace}"),
        mesh,
        &[
            "agent".into(),
            name.into(),
            format!("--broker-url={broker_url}"),
            format!("--namespace={namespace}"),
        ],
    )
    .map_err(|e| format!("cannot start agent {name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_the_command_name() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 30 7 3 20 0 1 0 5 0";
        assert_eq!(stat_cpu_ticks(stat), Some([250, 30, 7, 3]));
        assert_eq!(stat_cpu_ticks("4242 (cut"), None);
        assert_eq!(stat_cpu_ticks("4242 (x) S 1 2"), None);
        assert!(own_cpu_seconds().is_some_and(|s| s >= 0.0));
    }
}
