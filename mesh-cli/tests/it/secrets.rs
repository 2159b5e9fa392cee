//! No command prints a broker's or a task database's password: not in its status lines, not
//! in its errors (a broker or a database that does not answer, a URL that does not parse, a
//! config file that does not parse), not in its logs at debug level, not in `--help` (the
//! environment's values are hidden). The user name and `***` are shown instead.

use crate::support::*;
use mesh_testkit::{TestBroker, fresh_namespace};

const PASSWORD: &str = "s3cret-pass";

fn assert_hidden(output: &str) {
    assert!(
        !output.contains(PASSWORD),
        "the password is printed: {output}"
    );
    assert!(
        !output.contains("s3cret"),
        "part of the password is printed: {output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_does_not_answer_is_named_without_its_password() {
    let port = closed_port();
    let url = format!("mqtt://user:{PASSWORD}@127.0.0.1:{port}");
    let shown = format!("mqtt://user:***@127.0.0.1:{port}");
    let no_gateway = ["--gateway-url", "http://127.0.0.1:1"];
    for command in [
        &["gateway", "--memory-store", "--http-addr", "127.0.0.1:0"][..],
        &["agent", "echo"],
        &["agents"],
        &["send", "echo", "hello"],
        &["tail"],
        &["card", "echo"],
        &["health", "--agent", "echo"],
    ] {
        // The clients ask a gateway first: none answers here.
        let client = ["agents", "send", "card", "health"].contains(&command[0]);
        let gateway: &[&str] = if client { &no_gateway } else { &[] };
        let args = [command, &["--broker-url", url.as_str()][..], gateway].concat();
        let (code, output) = run(&args, &[("RUST_LOG", "debug")]).await;
        assert_eq!(code, 3, "{command:?}: {output}");
        assert!(
            output.contains(&shown),
            "{command:?} names the broker: {output}"
        );
        assert_hidden(&output);
    }

    // A password with `@` and `/` in it, from the environment.
    let odd = format!("mqtt://user:s3cret@pa/ss@127.0.0.1:{port}");
    let (code, output) = run(
        &[&["agents"][..], &no_gateway[..]].concat(),
        &[("MESH_BROKER_URL", odd.as_str())],
    )
    .await;
    assert_eq!(code, 3, "{output}");
    assert!(output.contains(&shown), "{output}");
    assert_hidden(&output);
    assert!(!output.contains("pa/ss"), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_database_that_does_not_answer_is_named_without_its_password() {
    let port = closed_port();
    let broker = TestBroker::from_env().await;
    let (code, output) = run(
        &[
            "gateway",
            "--http-addr",
            "127.0.0.1:0",
            "--broker-url",
            &broker.url(),
            "--store",
            &format!("postgres://root:{PASSWORD}@127.0.0.1:{port}/mesh"),
        ],
        &[("RUST_LOG", "debug")],
    )
    .await;
    assert_eq!(code, 2, "{output}");
    assert!(
        output.contains(&format!("postgres://root:***@127.0.0.1:{port}/mesh")),
        "names the database: {output}"
    );
    assert!(output.contains("(--store)"), "{output}");
    assert_hidden(&output);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_and_help_do_not_print_the_password() {
    let (code, output) = run(
        &[
            "agents",
            "--broker-url",
            &format!("mqtt://user:{PASSWORD}@h:notaport"),
        ],
        &[],
    )
    .await;
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("user:***@h"), "{output}");
    assert_hidden(&output);

    let env_url = format!("mqtt://user:{PASSWORD}@127.0.0.1:1");
    for command in [
        &["up", "--help"][..],
        &["gateway", "--help"],
        &["agents", "--help"],
    ] {
        let (code, output) = run(
            command,
            &[
                ("MESH_BROKER_URL", env_url.as_str()),
                ("MESH_GATEWAY_URL", "https://gw:s3cret-pass@127.0.0.1:1"),
                ("MESH_API_KEYS", "alice=s3cret-pass"),
                ("MESH_STORE", "postgres://root:s3cret-pass@127.0.0.1:1/mesh"),
            ],
        )
        .await;
        assert_eq!(code, 0, "{output}");
        assert!(output.contains("MESH_BROKER_URL"), "{output}");
        assert_hidden(&output);
    }

    let path = std::env::temp_dir().join(format!(
        "mesh-secret-{}-{}.toml",
        std::process::id(),
        fresh_namespace()
    ));
    std::fs::write(
        &path,
        format!(
            "broker_url = \"mqtt://user:{PASSWORD}@h\" oops\napi_keys = [\"alice=s3cret-key\"]\n"
        ),
    )
    .unwrap();
    let (code, output) = run(&["--config", path.to_str().unwrap(), "agents"], &[]).await;
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("line 1"), "{output}");
    assert_hidden(&output);
    std::fs::write(&path, "api_keys = [\"alice=s3cret-pass\", 7]\n").unwrap();
    let (code, output) = run(&["--config", path.to_str().unwrap(), "gateway"], &[]).await;
    std::fs::remove_file(&path).unwrap();
    assert_eq!(code, 2, "{output}");
    assert_hidden(&output);
}

/// With a broker that answers: the status lines of `mesh gateway`, `mesh agent echo` and
/// `mesh tail` name it as `user:***@…`, and nothing they log at debug level shows the
/// password while a message goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_processes_name_the_broker_without_its_password() {
    let broker = TestBroker::from_env().await;
    let port = broker.port();
    let url = format!("mqtt://user:{PASSWORD}@127.0.0.1:{port}");
    let shown = format!("mqtt://user:***@127.0.0.1:{port}");
    let namespace = fresh_namespace();
    let env = [("RUST_LOG", "debug")];
    let on_bus = [
        "--broker-url",
        url.as_str(),
        "--namespace",
        namespace.as_str(),
    ];

    let mut agent = Watched::spawn(&[&["agent", "echo"][..], &on_bus[..]].concat(), &env);
    let online = agent.line_with("agent echo online").await;
    assert!(online.contains(&shown), "{online}");
    let mut gateway = Watched::spawn(
        &[
            &["gateway", "--memory-store", "--http-addr", "127.0.0.1:0"][..],
            &on_bus[..],
        ]
        .concat(),
        &env,
    );
    let listening = gateway.line_with("gateway listening").await;
    assert!(listening.contains(&shown), "{listening}");
    let gateway_url = listening.split_whitespace().nth(3).unwrap().to_owned();
    let mut tail = Watched::spawn(&[&["tail"][..], &on_bus[..]].concat(), &env);
    tail.line_with("card").await;

    let (code, output) = run(
        &[
            &["send", "echo", "hello", "--gateway-url", &gateway_url][..],
            &on_bus[..],
        ]
        .concat(),
        &env,
    )
    .await;
    assert_eq!(code, 0, "{output}");
    assert_hidden(&output);
    // And straight over the bus when no gateway answers.
    let (code, output) = run(
        &[
            &[
                "send",
                "echo",
                "hello",
                "--gateway-url",
                "http://127.0.0.1:1",
            ][..],
            &on_bus[..],
        ]
        .concat(),
        &env,
    )
    .await;
    assert_eq!(code, 0, "{output}");
    assert_hidden(&output);

    let (status, output) = tail.interrupt().await;
    assert!(status.success(), "{output}");
    assert!(output.contains(&shown), "tail names the broker: {output}");
    assert_hidden(&output);
    for process in [gateway, agent] {
        let (status, output) = process.interrupt().await;
        assert!(status.success(), "{output}");
        assert_hidden(&output);
    }
}
