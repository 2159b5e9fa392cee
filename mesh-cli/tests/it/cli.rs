//! The `mesh` command as a user runs it: real processes, real ports, real output.

use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const MESH: &str = env!("CARGO_BIN_EXE_mesh");
const WAIT: Duration = Duration::from_secs(20);

/// A data directory of its own for each gateway these tests start (one gateway per
/// directory), under the system's temporary directory.
fn fresh_data_dir() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("mesh-cli-test-{}-{n}", std::process::id()))
}

/// A `mesh` process that is killed when dropped.
struct Process {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Process {
    fn spawn(args: &[&str]) -> Process {
        let mut child = Command::new(MESH)
            .args(args)
            .env_remove("MESH_CONFIG")
            .env("MESH_DATA_DIR", fresh_data_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("mesh starts");
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Process { child, stdout }
    }

    /// Reads stdout until a line contains `needle`; returns that line.
    async fn line_with(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = tokio::time::timeout(left, self.stdout.next_line())
                .await
                .unwrap_or_else(|_| panic!("no line with {needle:?} in time"))
                .unwrap()
                .unwrap_or_else(|| panic!("stdout ended before a line with {needle:?}"));
            if line.contains(needle) {
                return line;
            }
        }
    }

    /// Sends SIGINT (Ctrl-C) and waits for the exit status.
    async fn interrupt(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().unwrap().to_string();
        let status = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .await
            .unwrap();
        assert!(status.success());
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .unwrap()
            .unwrap()
    }
}

/// Runs `mesh <args>` to completion: (exit code, stdout, stderr).
async fn run(args: &[&str]) -> (i32, String, String) {
    let output = tokio::time::timeout(
        WAIT,
        Command::new(MESH)
            .args(args)
            .env_remove("MESH_CONFIG")
            .env("MESH_DATA_DIR", fresh_data_dir())
            .output(),
    )
    .await
    .expect("mesh finishes in time")
    .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `mesh up` on free ports in a namespace of its own: (process, gateway URL, broker URL).
async fn mesh_up(namespace: &str) -> (Process, String, String) {
    let mut up = Process::spawn(&[
        "up",
        "--broker-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--namespace",
        namespace,
    ]);
    up.line_with("mesh is up").await;
    let gateway = up
        .line_with("gateway")
        .await
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_owned();
    let broker = up
        .line_with("broker")
        .await
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_owned();
    (up, gateway, broker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_up_serves_the_examples_and_send_prints_what_they_say() {
    let namespace = mesh_testkit::fresh_namespace();
    let (up, gateway, broker) = mesh_up(&namespace).await;
    let via = [
        "--gateway-url",
        gateway.as_str(),
        "--namespace",
        namespace.as_str(),
    ];

    let (code, out, err) = run(&[&["agents"][..], &via[..]].concat()).await;
    assert_eq!(code, 0, "{err}");
    for name in ["echo", "writer", "flight-booker", "files", "orchestrator"] {
        assert!(
            out.contains(name) && out.contains("online"),
            "{name} listed: {out}"
        );
    }

    let (code, out, err) =
        run(&[&["send", "echo", "hello from the cli"][..], &via[..]].concat()).await;
    assert_eq!((code, out.trim()), (0, "hello from the cli"), "{err}");

    let (code, out, err) = run(&[
        &["send", "writer", "brokers chunks: 3", "--stream"][..],
        &via[..],
    ]
    .concat())
    .await;
    assert_eq!(code, 0, "{err}");
    for index in 0..3 {
        assert!(
            out.contains(&format!("[{index}] On brokers")),
            "chunk {index}: {out}"
        );
    }
    assert!(out.contains("[completed] wrote 3 paragraphs"), "{out}");

    // Multi-turn: the question, then the answer on the same task.
    let (code, out, err) =
        run(&[&["send", "flight-booker", "book a flight"][..], &via[..]].concat()).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Where would you like to fly"), "{out}");
    let task = err
        .split("--task ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let (code, out, err) = run(&[
        &[
            "send",
            "flight-booker",
            "--task",
            &task,
            "JFK to LHR on 2026-10-10",
        ][..],
        &via[..],
    ]
    .concat())
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Booked: JFK to LHR"), "{out}");

    // A file by bytes comes back from the files agent.
    let file = std::env::temp_dir().join(format!("{namespace}.txt"));
    std::fs::write(&file, b"twelve bytes").unwrap();
    let (code, out, err) = run(&[
        &["send", "files", "here", "--file", file.to_str().unwrap()][..],
        &via[..],
    ]
    .concat())
    .await;
    std::fs::remove_file(&file).unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("12 bytes"), "{out}");

    // Straight over the bus when no gateway answers.
    let bus = [
        "--gateway-url",
        "http://127.0.0.1:1",
        "--broker-url",
        broker.as_str(),
        "--namespace",
        namespace.as_str(),
    ];
    let (code, out, err) = run(&[&["send", "echo", "over the bus"][..], &bus[..]].concat()).await;
    assert_eq!((code, out.trim()), (0, "over the bus"), "{err}");
    let (code, out, _) = run(&[&["card", "echo"][..], &bus[..]].concat()).await;
    assert_eq!(code, 0);
    assert!(out.contains("\"name\": \"echo\""), "{out}");

    // An unknown agent: exit code 4, one line that says which agents there are.
    let (code, _, err) = run(&[&["send", "nobody", "x"][..], &via[..]].concat()).await;
    assert_eq!(code, 4);
    assert!(err.contains("nobody") && err.contains("echo"), "{err}");

    assert!(
        up.interrupt().await.success(),
        "Ctrl-C stops mesh up cleanly"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_shows_one_line_per_bus_message() {
    let namespace = mesh_testkit::fresh_namespace();
    let (up, gateway, broker) = mesh_up(&namespace).await;
    let mut tail = Process::spawn(&[
        "tail",
        "--broker-url",
        &broker,
        "--namespace",
        &namespace,
        "--agent",
        "echo",
    ]);
    // The retained card and presence arrive first: the tail is live.
    tail.line_with("card").await;
    let (code, _, err) = run(&[
        "send",
        "echo",
        "watched",
        "--gateway-url",
        &gateway,
        "--namespace",
        &namespace,
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    let line = tail.line_with("request").await;
    assert!(line.contains("echo") && line.contains("watched"), "{line}");
    drop(tail);
    assert!(up.interrupt().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gives_a_clear_message_and_a_nonzero_exit() {
    // A bad flag: clap's usage error.
    let (code, _, err) = run(&["send", "--no-such-flag"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--no-such-flag"), "{err}");

    // A dead broker and no gateway: exit 3, one line.
    let (code, _, err) = run(&[
        "agents",
        "--broker-url",
        "mqtt://127.0.0.1:1",
        "--gateway-url",
        "http://127.0.0.1:1",
    ])
    .await;
    assert_eq!(code, 3, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("does not answer"), "{err}");

    // A port already taken names the flag that changes it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, _, err) = run(&["up", "--broker-addr", &addr, "--http-addr", "127.0.0.1:0"]).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("--broker-addr"), "{err}");

    // An unknown example agent.
    let (code, _, err) = run(&["agent", "nonesuch", "--broker-url", "mqtt://127.0.0.1:1"]).await;
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("echo, writer"), "{err}");

    // A duration without its unit, and no webhook attempts at all.
    let (code, _, err) = run(&["gateway", "--webhook-timeout", "10"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no unit"), "{err}");
    let (code, _, err) = run(&["gateway", "--memory-store", "--webhook-attempts", "0"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--webhook-attempts"), "{err}");

    // A scheduling policy that does not exist.
    let (code, _, err) = run(&["agent", "echo", "--sched-policy", "fastest"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--sched-policy") && err.contains("auto"),
        "{err}"
    );

    // A broken config file.
    let path = std::env::temp_dir().join(format!("mesh-bad-{}.toml", std::process::id()));
    std::fs::write(&path, "namespace = [").unwrap();
    let (code, _, err) = run(&["--config", path.to_str().unwrap(), "agents"]).await;
    std::fs::remove_file(&path).unwrap();
    assert_eq!(code, 2, "{err}");
}

/// `mesh broker`, `mesh gateway` and `mesh agent echo` with no flags at all find each other
/// (the only test on the default ports 1884 and 8080).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_with_default_settings_find_each_other() {
    let mut broker = Process::spawn(&["broker"]);
    broker.line_with("broker listening").await;
    let mut agent = Process::spawn(&["agent", "echo"]);
    agent.line_with("agent echo online").await;
    let mut gateway = Process::spawn(&["gateway"]);
    gateway.line_with("gateway listening").await;
    let (code, out, err) = run(&["send", "echo", "defaults work"]).await;
    assert_eq!((code, out.trim()), (0, "defaults work"), "{err}");
    assert!(gateway.interrupt().await.success());
    assert!(agent.interrupt().await.success());
    assert!(broker.interrupt().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mqtts_broker_is_reached_with_its_ca_and_refused_without() {
    let broker = mesh_testkit::TestBroker::mosquitto_tls().await;
    let ca = broker.ca_file().unwrap();
    let url = broker.url();
    let namespace = mesh_testkit::fresh_namespace();
    let no_gateway = [
        "--gateway-url",
        "http://127.0.0.1:1",
        "--namespace",
        namespace.as_str(),
    ];
    let (code, out, err) = run(&[
        &[
            "agents",
            "--broker-url",
            &url,
            "--broker-ca",
            ca.to_str().unwrap(),
        ][..],
        &no_gateway[..],
    ]
    .concat())
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no agents"), "{out}");

    let (code, _, err) =
        run(&[&["agents", "--broker-url", &url][..], &no_gateway[..]].concat()).await;
    assert_eq!(code, 3, "an untrusted certificate: {err}");
}

/// The threads of a running process (Linux: one entry per thread under /proc).
fn threads_of(process: &Process) -> usize {
    let pid = process.child.id().expect("running");
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("/proc is readable")
        .count()
}

/// `mesh broker` and `mesh gateway` run one runtime worker unless told otherwise
/// (`--worker-threads 0`: one per core); measured as the process's thread count. One worker is
/// the current-thread scheduler, on the main thread: one per core adds a thread per core.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_and_gateway_run_one_worker_by_default() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        eprintln!("one core: one worker is also the per-core default; nothing to tell apart");
        return;
    }
    let start_broker = |extra: &'static [&'static str]| async move {
        let mut args = vec!["broker", "--broker-addr", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut broker = Process::spawn(&args);
        let line = broker.line_with("broker listening on").await;
        let url = line.rsplit(' ').next().unwrap().to_owned();
        (broker, url)
    };
    let (default_broker, url) = start_broker(&[]).await;
    let (per_core_broker, _) = start_broker(&["--worker-threads", "0"]).await;
    assert_eq!(
        threads_of(&per_core_broker) - threads_of(&default_broker),
        cores,
        "the broker's default is one worker"
    );

    let namespace = format!("threads-{}", uuid::Uuid::new_v4().simple());
    let start_gateway = |extra: &'static [&'static str]| {
        let (url, namespace) = (url.clone(), namespace.clone());
        async move {
            let mut args = vec![
                "gateway",
                "--memory-store",
                "--http-addr",
                "127.0.0.1:0",
                "--broker-url",
                &url,
                "--namespace",
                &namespace,
            ];
            args.extend_from_slice(extra);
            let mut gateway = Process::spawn(&args);
            gateway.line_with("gateway listening on").await;
            gateway
        }
    };
    let default_gateway = start_gateway(&[]).await;
    let per_core_gateway = start_gateway(&["--worker-threads", "0"]).await;
    assert_eq!(
        threads_of(&per_core_gateway) - threads_of(&default_gateway),
        cores,
        "the gateway's default is one worker"
    );
}

/// The CPU scheduling policy of each thread of a running process (Linux: field 41 of each
/// thread's stat line; 0 is SCHED_OTHER, 3 SCHED_BATCH).
fn policies_of(process: &Process) -> Vec<u32> {
    let pid = process.child.id().expect("running");
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("/proc is readable")
        .map(|task| {
            let stat = std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap();
            // The fields after the command name, which ends with the line's last ')'; the
            // first of them is field 3.
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            after.split(' ').nth(41 - 3).unwrap().parse().unwrap()
        })
        .collect()
}

/// `mesh agent` follows the load by default: busy cores move every thread of it to
/// SCHED_BATCH; `mesh gateway` (and `mesh broker`) stay in Linux's default; `--sched-policy`
/// fixes either for any of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_moves_to_batch_when_the_cores_are_busy_and_the_gateway_stays() {
    const OTHER: u32 = 0;
    const BATCH: u32 = 3;
    let mut broker = Process::spawn(&["broker", "--broker-addr", "127.0.0.1:0"]);
    let line = broker.line_with("broker listening on").await;
    let url = line.rsplit(' ').next().unwrap().to_owned();
    assert!(policies_of(&broker).iter().all(|&p| p == OTHER));
    let namespace = format!("sched-{}", uuid::Uuid::new_v4().simple());
    let bus = [
        "--broker-url",
        url.as_str(),
        "--namespace",
        namespace.as_str(),
    ];
    let start =
        |command: &[&str], extra: &[&str]| Process::spawn(&[command, &bus[..], extra].concat());

    // Two workers: the runtime's threads started after the policy was set inherit it.
    let mut batch_agent = start(
        &["agent", "echo"],
        &["--sched-policy", "batch", "--worker-threads", "2"],
    );
    batch_agent.line_with("agent echo online").await;
    let policies = policies_of(&batch_agent);
    assert!(policies.len() > 2, "{policies:?}");
    assert!(policies.iter().all(|&p| p == BATCH), "{policies:?}");
    let mut normal_agent = start(&["agent", "echo"], &["--sched-policy", "normal"]);
    normal_agent.line_with("agent echo online").await;
    assert!(policies_of(&normal_agent).iter().all(|&p| p == OTHER));

    let gateway_args: &[&str] = &["--memory-store", "--http-addr", "127.0.0.1:0"];
    let mut gateway = start(&["gateway"], gateway_args);
    gateway.line_with("gateway listening on").await;
    let mut batch_gateway = start(&["gateway", "--sched-policy", "batch"], gateway_args);
    batch_gateway.line_with("gateway listening on").await;
    assert!(policies_of(&batch_gateway).iter().all(|&p| p == BATCH));

    // A thread spinning on every core leaves them no idle time: the agent, on `auto`, moves
    // to batch within a few of its 100 ms readings; the gateway does not follow the load.
    let mut agent = start(&["agent", "echo"], &[]);
    agent.line_with("agent echo online").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let spinners: Vec<_> = (0..cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let until = std::time::Instant::now() + WAIT;
                while !stop.load(std::sync::atomic::Ordering::Relaxed)
                    && std::time::Instant::now() < until
                {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let deadline = Instant::now() + WAIT;
    let moved = loop {
        let policies = policies_of(&agent);
        if policies.iter().all(|&p| p == BATCH) || Instant::now() > deadline {
            break policies;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let gateway_policies = policies_of(&gateway);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for spinner in spinners {
        spinner.join().unwrap();
    }
    assert!(
        moved.iter().all(|&p| p == BATCH),
        "the agent under load: {moved:?}"
    );
    assert!(
        gateway_policies.iter().all(|&p| p == OTHER),
        "{gateway_policies:?}"
    );
}

/// The help of `mesh <command>`, from a process without any `MESH_*` setting.
async fn help(command: &str) -> String {
    let output = Command::new(MESH)
        .args([command, "--help"])
        .env_remove("MESH_CONFIG")
        .output()
        .await
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_command_shows_and_reads_its_own_options() {
    // Each command's help lists its own options, under their headings, and no other's.
    let broker = help("broker").await;
    for own in [
        "Broker:",
        "--broker-addr",
        "--password-file",
        "--acl-file",
        "--max-packet-size",
        "--config",
    ] {
        assert!(broker.contains(own), "broker --help has {own}: {broker}");
    }
    for other in [
        "--http-addr",
        "--namespace",
        "--broker-url",
        "--api-key",
        "--data-dir",
        "--gateway-url",
        "--webhook-ca",
    ] {
        assert!(
            !broker.contains(other),
            "broker --help lacks {other}: {broker}"
        );
    }
    let gateway = help("gateway").await;
    for own in [
        "Gateway:",
        "Gateway: task store",
        "Gateway: authentication",
        "Gateway: CORS",
        "Gateway: webhooks",
        "Bus:",
        "--data-dir",
        "--tls-cert",
    ] {
        assert!(gateway.contains(own), "gateway --help has {own}");
    }
    for other in ["--broker-addr", "--gateway-url", "--password-file"] {
        assert!(!gateway.contains(other), "gateway --help lacks {other}");
    }
    let agents = help("agents").await;
    assert!(
        agents.contains("Client:") && agents.contains("--gateway-url"),
        "{agents}"
    );
    for other in [
        "--data-dir",
        "--http-addr",
        "--broker-addr",
        "--api-key",
        "--signing-key",
    ] {
        assert!(!agents.contains(other), "agents --help lacks {other}");
    }
    let agent = help("agent").await;
    assert!(
        agent.contains("--signing-key") && !agent.contains("--data-dir"),
        "{agent}"
    );

    // One config file serves every command: each reads its own keys and ignores the others'
    // (a client does not start the gateway, so it does not care that a store setting is
    // there); an unknown key is still an error.
    let dir = std::env::temp_dir().join(format!(
        "mesh-cli-options-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("mesh.toml");
    std::fs::write(
        &config,
        "namespace = \"shared\"\nbroker_addr = \"127.0.0.1:1\"\nhttp_addr = \"127.0.0.1:1\"\n\
         data_dir = \"/nonexistent/mesh\"\nmemory_store = false\nwebhook_attempts = 0\nstore_max_bytes = \"lots\"\n\
         broker_url = \"mqtt://127.0.0.1:1\"\ngateway_url = \"http://127.0.0.1:1\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let (code, _, err) = run(&["agents", "--config", config]).await;
    assert_eq!(code, 3, "the broker does not answer, nothing else: {err}");
    let unknown = dir.join("unknown.toml");
    std::fs::write(&unknown, "namespace = \"x\"\nno_such_key = 1\n").unwrap();
    let (code, _, err) = run(&["agents", "--config", unknown.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no_such_key"), "{err}");

    // The gateway's data directory is resolved only where a gateway starts: without HOME
    // and XDG_DATA_HOME, a client and the broker run; the gateway says what to give.
    let bare = |args: &[&str]| {
        let mut command = Command::new(MESH);
        command
            .args(args)
            .env_remove("MESH_CONFIG")
            .env_remove("MESH_DATA_DIR")
            .env_remove("HOME")
            .env_remove("XDG_DATA_HOME");
        command
    };
    let output = bare(&[
        "agents",
        "--broker-url",
        "mqtt://127.0.0.1:1",
        "--gateway-url",
        "http://127.0.0.1:1",
    ])
    .output()
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let output = bare(&["gateway", "--broker-url", "mqtt://127.0.0.1:1"])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--data-dir"),
        "{output:?}"
    );
    let mut broker = bare(&["broker", "--broker-addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(broker.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(line.contains("broker listening"), "{line}");
    let _ = broker.kill().await;

    // Shell completions, from clap's own generator.
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = run(&["completions", shell]).await;
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("mesh") && out.contains("broker-addr"),
            "{shell}: {out}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
