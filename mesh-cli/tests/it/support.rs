//! What the TLS and secrets tests share: a `mesh` process whose stdout and stderr are both
//! kept, read line by line until a line shows up, then stopped with Ctrl-C. Every wait is
//! bounded.

#![allow(dead_code)]

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

pub const MESH: &str = env!("CARGO_BIN_EXE_mesh");
pub const WAIT: Duration = Duration::from_secs(20);

/// A `mesh` process (killed when dropped) whose output is kept: stdout's lines are also
/// handed to [`Watched::line_with`].
pub struct Watched {
    child: Child,
    stdout_lines: mpsc::UnboundedReceiver<String>,
    output: Arc<Mutex<String>>,
}

impl Watched {
    /// Spawns `mesh <args>` with `env` set (and no config file, no API keys from outside).
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Watched {
        let mut child = Command::new(MESH)
            .args(args)
            .env_remove("MESH_CONFIG")
            .env_remove("MESH_API_KEYS")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("mesh starts");
        let output = Arc::new(Mutex::new(String::new()));
        let (lines, stdout_lines) = mpsc::unbounded_channel();
        keep(child.stdout.take().unwrap(), output.clone(), Some(lines));
        keep(child.stderr.take().unwrap(), output.clone(), None);
        Watched {
            child,
            stdout_lines,
            output,
        }
    }

    /// Reads stdout until a line contains `needle`; returns that line.
    pub async fn line_with(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = tokio::time::timeout(left, self.stdout_lines.recv())
                .await
                .unwrap_or_else(|_| panic!("no line with {needle:?} in time: {}", self.output()))
                .unwrap_or_else(|| {
                    panic!(
                        "stdout ended before a line with {needle:?}: {}",
                        self.output()
                    )
                });
            if line.contains(needle) {
                return line;
            }
        }
    }

    /// Everything the process wrote so far, stdout and stderr.
    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Kills the process with SIGKILL, as a crash would, and waits until it is gone.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("the process is killed");
    }

    /// Sends SIGINT (Ctrl-C), waits for the exit and for the end of both outputs; the exit
    /// status and everything the process wrote.
    pub async fn interrupt(mut self) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().unwrap().to_string();
        let status = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .await
            .unwrap();
        assert!(status.success());
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("mesh stops in time")
            .unwrap();
        // stdout's reader ends (its channel closes) when the process's stdout closes.
        while tokio::time::timeout(WAIT, self.stdout_lines.recv())
            .await
            .expect("stdout closes")
            .is_some()
        {}
        (status, self.output())
    }
}

/// Copies `stream`'s lines into `output` (and to `lines`) until it ends.
fn keep(
    stream: impl AsyncRead + Unpin + Send + 'static,
    output: Arc<Mutex<String>>,
    lines: Option<mpsc::UnboundedSender<String>>,
) {
    tokio::spawn(async move {
        let mut reader = BufReader::new(stream).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            {
                let mut output = output.lock().unwrap();
                output.push_str(&line);
                output.push('\n');
            }
            if let Some(lines) = &lines {
                let _ = lines.send(line);
            }
        }
    });
}

/// Runs `mesh <args>` with `env` to completion: (exit code, stdout and stderr together).
pub async fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let output = tokio::time::timeout(
        WAIT,
        Command::new(MESH)
            .args(args)
            .env_remove("MESH_CONFIG")
            .env_remove("MESH_API_KEYS")
            .envs(env.iter().copied())
            .output(),
    )
    .await
    .expect("mesh finishes in time")
    .unwrap();
    (
        output.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// A TCP port nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
