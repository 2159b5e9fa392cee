//! Interoperability with API keys: the official A2A Python SDK reads a card with security
//! schemes and, over each binding (JSON-RPC, HTTP+JSON and gRPC, protocol 1.0), is refused
//! without a key (401 / UNAUTHENTICATED) and, with the key as a bearer token or an X-API-Key
//! put there by its own AuthInterceptor, sends and reads the extended card naming the
//! caller; over JSON-RPC 0.3 it does the same with the bearer key
//! (tests/interop/a2a_sdk_auth.py). Runs when `MESH_INTEROP_PYTHON` names a Python with the
//! SDK (scripts/test sets it); otherwise it says so and passes.

use crate::support::*;
use mesh_gateway::ApiKey;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_a2a_sdk_authenticates_with_a_bearer_or_api_key_over_every_binding() {
    let Some(python) = std::env::var_os("MESH_INTEROP_PYTHON") else {
        eprintln!("SKIPPED: MESH_INTEROP_PYTHON is unset");
        return;
    };
    let mut mesh = GatewayMesh::start_with(|c| {
        c.api_keys = vec![ApiKey::parse("carol=carol-key-1", 1).unwrap()];
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/a2a_sdk_auth.py");
    run_interop_script(
        &python,
        script,
        &[&mesh.base, "carol-key-1", "carol"],
        "interop auth: all checks passed",
    )
    .await;
}
