//! HTTPS on the gateway's listener ([`GatewayConfig::tls`]): JSON-RPC and SSE over TLS with a
//! client that trusts the test CA, over HTTP/2 and HTTP/1.1 (ALPN), cards whose URL is
//! `https://`, connections that fail their handshake (plain HTTP, garbage, a silent client)
//! closed without touching the others, and a certificate or key that cannot be used stopping
//! the start with an error naming the file.

use crate::support::*;
use mesh_core::bus::Bus;
use mesh_gateway::{Gateway, GatewayConfig, GatewayError, TlsFiles};
use mesh_testkit::{TestBroker, TestCertificates, fresh_namespace};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn certificates() -> TestCertificates {
    TestCertificates::generate().expect("rcgen makes the test certificates")
}

fn files(certs: &TestCertificates) -> TlsFiles {
    TlsFiles {
        cert_file: certs.cert.clone(),
        key_file: certs.key.clone(),
    }
}

/// A client that trusts only the test CA; HTTP/1.1 only when asked, else it offers h2 too.
fn https_client(certs: &TestCertificates, http1_only: bool) -> reqwest::Client {
    mesh_core::tls::install_crypto_provider();
    let ca = reqwest::Certificate::from_pem(certs.ca_pem.as_bytes()).unwrap();
    let builder = reqwest::Client::builder()
        .timeout(WAIT)
        .tls_certs_only([ca]);
    let builder = if http1_only {
        builder.http1_only()
    } else {
        builder
    };
    builder.build().unwrap()
}

/// A gateway serving HTTPS with the test certificate, its client trusting the test CA and
/// its base URL `https://localhost:<port>` (the certificate's name).
async fn tls_mesh(certs: &TestCertificates) -> GatewayMesh {
    let mut mesh = GatewayMesh::start_with(|c| {
        c.tls = Some(files(certs));
        c.default_agent = Some("echo".into());
    })
    .await;
    mesh.base = format!("https://localhost:{}", mesh.gateway.local_addr().port());
    mesh.http = https_client(certs, false);
    mesh
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_send_over_https_on_h2_and_http1_and_the_card_says_https() {
    let certs = certificates();
    let mut mesh = tls_mesh(&certs).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let port = mesh.gateway.local_addr().port();
    assert_eq!(mesh.gateway.url(), format!("https://127.0.0.1:{port}"));

    for (http1_only, version) in [
        (false, reqwest::Version::HTTP_2),
        (true, reqwest::Version::HTTP_11),
    ] {
        let client = https_client(&certs, http1_only);
        let response = client
            .post(mesh.url("/agents/echo"))
            .header("content-type", "application/json")
            .body(rpc("message/send", msg03("hello over tls")).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.version(), version, "ALPN chose the protocol");
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        let task = result(&body);
        assert_eq!(task_state(task), "completed", "{body}");
        assert_eq!(
            task.pointer("/artifacts/0/parts/0/text")
                .and_then(Value::as_str),
            Some("hello over tls")
        );
    }

    for (path, url) in [
        ("/agents/echo/.well-known/agent-card.json", "/agents/echo"),
        ("/.well-known/agent-card.json", "/"),
    ] {
        let (status, card) = mesh.get_json(path).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(
            card["url"],
            format!("https://127.0.0.1:{port}{url}"),
            "{card}"
        );
        assert!(
            card["supportedInterfaces"]
                .as_array()
                .unwrap()
                .iter()
                .all(|i| i["url"].as_str().unwrap().starts_with("https://")),
            "{card}"
        );
    }
    mesh.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_stream_over_https_delivers_every_event() {
    let certs = certificates();
    let mut mesh = tls_mesh(&certs).await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    for http1_only in [false, true] {
        mesh.http = https_client(&certs, http1_only);
        let events = mesh
            .stream("writer", "message/stream", msg03("tls, chunks: 5"))
            .await;
        let results: Vec<&Value> = events.iter().map(result).collect();
        assert_eq!(results[0]["kind"], "task");
        let chunks = results
            .iter()
            .filter(|r| r["kind"] == "artifact-update")
            .count();
        assert_eq!(chunks, 5, "{events:?}");
        let last = results.last().unwrap();
        assert_eq!(
            (&last["final"], task_state(last).as_str()),
            (&Value::Bool(true), "completed")
        );
    }
    mesh.gateway.shutdown().await;
}

/// While an https stream is open: a plain-HTTP request, garbage, and a client that never
/// says anything reach the TLS port; each fails alone, and the stream and a new https
/// request carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_handshakes_close_only_their_own_connection() {
    let certs = certificates();
    let mut mesh = tls_mesh(&certs).await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let gate = Gate::default();
    mesh.run(slow_agent("slow", gate.clone())).await;
    let addr = mesh.gateway.local_addr();

    let open = mesh
        .open_sse("slow", "message/stream", msg03("wait for the gate"))
        .await;
    assert_eq!(open.status(), 200);

    // A client that connects and never starts its handshake holds no one up.
    let silent = tokio::net::TcpStream::connect(addr).await.unwrap();

    let plain = reqwest::Client::builder()
        .timeout(WAIT)
        .build()
        .unwrap()
        .post(format!("http://{addr}/agents/echo"))
        .header("content-type", "application/json")
        .body(rpc("message/send", msg03("in clear")).to_string())
        .send()
        .await;
    assert!(
        plain.is_err(),
        "a plain-HTTP request to the TLS port gets no HTTP answer: {plain:?}"
    );

    let mut garbage = tokio::net::TcpStream::connect(addr).await.unwrap();
    garbage
        .write_all(b"\x16\x03\x01\x00\x10not a client hello at all\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(WAIT, garbage.read_to_end(&mut rest))
        .await
        .expect("the server closes a garbage handshake");
    assert!(
        closed.is_err() || rest.len() < 64,
        "at most a TLS alert comes back: {rest:?}"
    );

    let body = mesh
        .call("echo", "message/send", msg03("still served"))
        .await;
    assert_eq!(task_state(result(&body)), "completed");

    gate.open();
    let events = read_sse(open).await;
    let last = result(events.last().expect("events"));
    assert_eq!(task_state(last), "completed", "{events:?}");
    drop(silent);
    mesh.gateway.shutdown().await;
}

/// A gateway start with `tls`; the error it fails with.
async fn start_error(tls: TlsFiles) -> String {
    let broker = TestBroker::from_env().await;
    let bus = Bus::connect(broker.bus_config()).await.unwrap();
    let config = GatewayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        namespace: fresh_namespace(),
        tls: Some(tls),
        ..GatewayConfig::default()
    };
    match Gateway::start(config, bus).await {
        Ok(_) => panic!("the gateway started"),
        Err(error @ GatewayError::Tls(_)) => error.to_string(),
        Err(other) => panic!("not a TLS error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_or_key_that_cannot_be_used_stops_the_start_naming_the_file() {
    let certs = certificates();
    let key_body: Vec<String> = std::fs::read_to_string(&certs.other_key)
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .map(str::to_owned)
        .collect();
    let never_quoted = |error: &str| {
        for line in &key_body {
            assert!(!error.contains(line.as_str()), "key material in {error}");
        }
    };

    let mismatched = start_error(TlsFiles {
        cert_file: certs.cert.clone(),
        key_file: certs.other_key.clone(),
    })
    .await;
    assert!(
        mismatched.contains("does not match")
            && mismatched.contains(&certs.other_key.display().to_string())
            && mismatched.contains(&certs.cert.display().to_string()),
        "{mismatched}"
    );
    never_quoted(&mismatched);

    let missing = certs.dir.join("missing.key");
    let unreadable = start_error(TlsFiles {
        cert_file: certs.cert.clone(),
        key_file: missing.clone(),
    })
    .await;
    assert!(
        unreadable.contains(&missing.display().to_string()),
        "{unreadable}"
    );

    // A key file where the certificate should be, and the other way round.
    let swapped = start_error(TlsFiles {
        cert_file: certs.other_key.clone(),
        key_file: certs.cert.clone(),
    })
    .await;
    assert!(
        swapped.contains(&certs.other_key.display().to_string())
            && swapped.contains("no certificate"),
        "{swapped}"
    );
    never_quoted(&swapped);

    let garbled = certs.dir.join("garbled.key");
    std::fs::write(
        &garbled,
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}!!\n-----END PRIVATE KEY-----\n",
            key_body[0]
        ),
    )
    .unwrap();
    let error = start_error(TlsFiles {
        cert_file: certs.cert.clone(),
        key_file: garbled.clone(),
    })
    .await;
    assert!(error.contains(&garbled.display().to_string()), "{error}");
    never_quoted(&error);
}
