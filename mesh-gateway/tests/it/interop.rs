//! Interoperability: the official A2A Python SDK (scripts/interop/a2a_sdk_client.py) drives
//! the gateway in protocol 1.0 and 0.3. `scripts/test` installs the SDK into .venv and sets
//! `MESH_INTEROP_PYTHON`; without it the test says so and passes.

use crate::support::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_a2a_sdk_drives_the_gateway_in_1_0_and_0_3() {
    let Some(python) = std::env::var_os("MESH_INTEROP_PYTHON") else {
        eprintln!(
            "SKIPPED: MESH_INTEROP_PYTHON is unset (scripts/test sets it after installing \
             scripts/interop/requirements.txt into .venv)"
        );
        return;
    };
    let mut mesh = Mesh::start().await;
    mesh.run(mesh_examples::echo::agent()).await;
    mesh.run(mesh_examples::writer::agent()).await;
    mesh.run(mesh_examples::flight_booker::agent()).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/interop/a2a_sdk_client.py"
    );
    let mut child = tokio::process::Command::new(python);
    child.arg(script).arg(&mesh.base).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), child.output())
        .await
        .expect("the interop script finishes within 120 s")
        .expect("the interop script runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the a2a-sdk client failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("interop: all checks passed"));
}
