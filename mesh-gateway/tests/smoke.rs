mod support;
use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_over_0_3() {
    let mut mesh = Mesh::start().await;
    mesh.run(mesh_examples::echo::agent()).await;
    let body = mesh.call("echo", "message/send", msg03("hello")).await;
    println!("{body:#}");
    let events = mesh.stream("echo", "message/stream", msg03("hi")).await;
    println!("{:#}", json!(events));
    let body = mesh.call("echo", "SendMessage", msg10("hello")).await;
    println!("{body:#}");
}
