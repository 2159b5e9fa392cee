//! Interoperability with the 0.3 line of the official A2A Python SDK (a2a-sdk 0.3.x, in a
//! venv of its own: scripts/interop/requirements-0.3.txt): its card resolver reads an agent's
//! combined card and the client it builds sends and gets the completed task (#24, defect 1),
//! its resubscribe to an unknown task raises the JSON-RPC "task not found" error the stream
//! carries as its one event (#24, defect 5), and a streaming send gets the task, the chunks
//! and the final status (tests/interop/a2a_sdk_03.py). Runs when `MESH_INTEROP_PYTHON_03`
//! names a Python with that SDK (scripts/test sets it); otherwise it says so and passes.

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_a2a_sdk_0_3_reads_cards_sends_streams_and_gets_task_not_found() {
    let Some(python) = std::env::var_os("MESH_INTEROP_PYTHON_03") else {
        eprintln!(
            "SKIPPED: MESH_INTEROP_PYTHON_03 is unset (scripts/test sets it after installing \
             scripts/interop/requirements-0.3.txt into .venv-0.3)"
        );
        return;
    };
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/a2a_sdk_03.py");
    run_interop_script(
        &python,
        script,
        &[&mesh.base],
        "interop 0.3: all checks passed",
    )
    .await;
}
