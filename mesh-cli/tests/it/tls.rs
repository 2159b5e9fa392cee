//! `mesh gateway` over HTTPS: `--tls-cert` and `--tls-key` (or `MESH_TLS_CERT` and
//! `MESH_TLS_KEY`) make it serve HTTPS only and say so; one without the other, or a key that
//! does not match the certificate, is a usage error naming what is wrong.

use crate::support::*;
use mesh_testkit::{TestBroker, TestCertificates, fresh_namespace};

fn https_client(certs: &TestCertificates) -> reqwest::Client {
    mesh_core::tls::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(WAIT)
        .tls_certs_only([reqwest::Certificate::from_pem(certs.ca_pem.as_bytes()).unwrap()])
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_gateway_with_a_certificate_answers_https_only() {
    let certs = TestCertificates::generate().unwrap();
    let broker = TestBroker::from_env().await;
    let namespace = fresh_namespace();
    let (cert, key) = (certs.cert.to_str().unwrap(), certs.key.to_str().unwrap());
    let common = [
        "gateway",
        "--broker-url",
        &broker.url(),
        "--namespace",
        &namespace,
        "--http-addr",
        "127.0.0.1:0",
        "--memory-store",
    ]
    .map(str::to_owned);
    let common: Vec<&str> = common.iter().map(String::as_str).collect();
    let flags = [&common[..], &["--tls-cert", cert, "--tls-key", key]].concat();
    let env = [("MESH_TLS_CERT", cert), ("MESH_TLS_KEY", key)];
    for (args, env) in [(&flags[..], &[][..]), (&common[..], &env[..])] {
        let mut gateway = Watched::spawn(args, env);
        let line = gateway.line_with("gateway listening").await;
        let url = line
            .split_whitespace()
            .nth(3)
            .unwrap_or_else(|| panic!("{line}"));
        let port = url
            .strip_prefix("https://127.0.0.1:")
            .unwrap_or_else(|| panic!("an https URL: {line}"));
        let health = https_client(&certs)
            .get(format!("https://localhost:{port}/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        let plain = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .timeout(WAIT)
            .send()
            .await;
        assert!(plain.is_err(), "no plain HTTP: {plain:?}");
        let (status, output) = gateway.interrupt().await;
        assert!(status.success(), "{output}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flags_go_together_and_a_mismatched_key_is_named() {
    let certs = TestCertificates::generate().unwrap();
    let (cert, key, other) = (
        certs.cert.to_str().unwrap(),
        certs.key.to_str().unwrap(),
        certs.other_key.to_str().unwrap(),
    );
    let gateway = ["gateway", "--memory-store", "--http-addr", "127.0.0.1:0"];
    let (code, output) = run(&[&gateway[..], &["--tls-cert", cert]].concat(), &[]).await;
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("--tls-key"), "{output}");
    let (code, output) = run(&gateway, &[("MESH_TLS_KEY", key)]).await;
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("--tls-cert"), "{output}");

    let broker = TestBroker::from_env().await;
    let url = broker.url();
    let (code, output) = run(
        &[
            &gateway[..],
            &["--broker-url", &url, "--tls-cert", cert, "--tls-key", other],
        ]
        .concat(),
        &[],
    )
    .await;
    assert_eq!(code, 2, "{output}");
    assert!(
        output.contains("does not match") && output.contains(other),
        "{output}"
    );
}
