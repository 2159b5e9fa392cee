//! Interoperability: the official A2A Python SDK (scripts/interop/a2a_sdk_client.py) drives
//! the gateway in protocol 1.0 and 0.3. `scripts/test` installs the SDK into .venv and sets
//! `MESH_INTEROP_PYTHON`; without it the test says so and passes.

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_a2a_sdk_drives_the_gateway_in_1_0_and_0_3() {
    let Some(python) = std::env::var_os("MESH_INTEROP_PYTHON") else {
        eprintln!(
            "SKIPPED: MESH_INTEROP_PYTHON is unset (scripts/test sets it after installing \
             scripts/interop/requirements.txt into .venv)"
        );
        return;
    };
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/interop/a2a_sdk_client.py"
    );
    run_interop_script(&python, script, &[&mesh.base], "interop: all checks passed").await;
}
