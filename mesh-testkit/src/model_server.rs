//! llama.cpp's server for the tests of the LLM agent: `llama-server` with a model file, on a
//! free port of 127.0.0.1, ready (its `/health` answers 200), killed when dropped.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::WAIT;

/// A running model server.
pub struct ModelServer {
    _child: tokio::process::Child,
    /// Its OpenAI-compatible base URL (`http://127.0.0.1:<port>/v1`).
    pub url: String,
}

impl ModelServer {
    /// The server `MESH_LLM_SERVER` names, or `None` (the caller skips, saying why).
    pub fn binary() -> Option<std::ffi::OsString> {
        let binary = std::env::var_os("MESH_LLM_SERVER");
        if binary.is_none() {
            println!("SKIPPED: MESH_LLM_SERVER is unset (scripts/test sets it)");
        }
        binary
    }

    /// Starts `binary` with `model` and waits (at most [`WAIT`]) until it is ready.
    pub async fn start(binary: &OsStr, model: &Path) -> ModelServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = tokio::process::Command::new(binary)
            .arg("-m")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-c", "4096", "-t", "2", "--jinja", "--no-webui"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the model server starts");
        let since = Instant::now();
        while !healthy(port).await {
            assert!(
                since.elapsed() < WAIT,
                "the model server is not ready in time"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ModelServer {
            _child: child,
            url: format!("http://127.0.0.1:{port}/v1"),
        }
    }
}

/// Whether `GET /health` answers 200.
async fn healthy(port: u16) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut answer)).await;
    read.is_ok() && answer.starts_with(b"HTTP/1.1 200")
}
