//! Push notifications over real HTTP: configs set, read, listed and deleted in every
//! dialect; webhooks delivered to a real receiver (with retries, headers, bodies and the
//! order of states), over http and https (a receiver whose certificate is not trusted gets
//! nothing, and the failure is counted); deliveries pending at a shutdown delivered by the
//! next gateway on the same data directory; bad URLs and garbage refused without a panic.

use crate::support::*;
use serde_json::{Value, json};
use std::time::Duration;

fn allow_loopback(config: &mut mesh_gateway::GatewayConfig) {
    config.allow_private_webhooks = true;
    config.webhook_backoff = Duration::from_millis(20);
    // A stalled attempt is retried well within the tests' waits.
    config.webhook_timeout = Duration::from_secs(2);
}

fn rank(state: &str) -> usize {
    match state {
        "submitted" => 0,
        "working" => 1,
        _ => 2,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v03_webhook_retries_keeps_order_and_sends_the_token() {
    let mut hook = Hook::start(2).await;
    let gate = Gate::default();
    let mut mesh = GatewayMesh::start_with(allow_loopback).await;
    mesh.run(slow_agent("slow", gate.clone())).await;

    let mut params = msg03("go");
    params["configuration"] = json!({
        "blocking": false,
        "pushNotificationConfig": {"url": hook.url, "token": "tok-1"},
    });
    let body = mesh.call("slow", "message/send", params).await;
    let task_id = result(&body)["id"].as_str().unwrap().to_owned();

    // The receiver fails twice: the same notification comes again until it is accepted.
    let mut all = hook.until_accepted("working").await;
    gate.open();
    all.extend(hook.until_accepted("completed").await);
    assert!(
        all.len() >= 4,
        "two failures, then working and completed: {all:?}"
    );
    assert_eq!(all[0].answered, 500);
    assert_eq!(all[1].answered, 500);
    assert_eq!(
        all[0].body, all[2].body,
        "a retry carries the same notification"
    );
    let accepted: Vec<String> = all
        .iter()
        .filter(|r| r.answered == 200)
        .map(|r| task_state(&r.body))
        .collect();
    assert!(
        accepted.windows(2).all(|w| rank(&w[0]) <= rank(&w[1])),
        "states arrive in order: {accepted:?}"
    );
    assert_eq!(accepted.last().map(String::as_str), Some("completed"));
    for r in &all {
        assert_eq!(
            r.headers
                .get("x-a2a-notification-token")
                .and_then(|v| v.to_str().ok()),
            Some("tok-1")
        );
        assert_eq!(r.body["kind"], "task", "a 0.3 task: {}", r.body);
        assert_eq!(
            r.headers.get("content-type").and_then(|v| v.to_str().ok()),
            Some("application/json")
        );
        assert_eq!(r.body["id"], json!(task_id));
        assert!(r.body.pointer("/metadata/_mesh").is_none());
    }
    let last = &all.last().unwrap().body;
    assert_eq!(
        last.pointer("/artifacts/0/parts/0/text"),
        Some(&json!("done"))
    );

    // The config, read back in 0.3.
    let got = mesh
        .call(
            "slow",
            "tasks/pushNotificationConfig/get",
            json!({"id": task_id}),
        )
        .await;
    let got = result(&got);
    assert_eq!(got["taskId"], json!(task_id));
    assert_eq!(got["pushNotificationConfig"]["url"], json!(hook.url));
    assert_eq!(got["pushNotificationConfig"]["token"], "tok-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v10_send_with_config_posts_the_task_with_authorization() {
    let mut hook = Hook::start(0).await;
    let mut mesh = GatewayMesh::start_with(allow_loopback).await;
    mesh.run(mesh_example_agents::echo::agent()).await;

    let mut params = msg10("push me");
    params["configuration"] = json!({
        "taskPushNotificationConfig": {
            "url": hook.url,
            "authentication": {"scheme": "Bearer", "credentials": "cred-1"},
        },
    });
    let body = mesh.call("echo", "SendMessage", params).await;
    let task_id = result(&body)["task"]["id"].as_str().unwrap().to_owned();
    let all = hook.until_accepted("completed").await;
    for r in &all {
        assert_eq!(
            r.headers.get("authorization").and_then(|v| v.to_str().ok()),
            Some("Bearer cred-1")
        );
        assert!(r.headers.get("x-a2a-notification-token").is_none());
        // 1.0 (§4.3.3): a StreamResponse holding the task, as application/a2a+json.
        assert_eq!(
            r.headers.get("content-type").and_then(|v| v.to_str().ok()),
            Some("application/a2a+json")
        );
        assert_eq!(r.body["task"]["id"], json!(task_id), "{}", r.body);
        assert!(
            r.body["task"].get("kind").is_none(),
            "a 1.0 task: {}",
            r.body
        );
    }
    assert_eq!(
        all.last().unwrap().body.pointer("/task/status/state"),
        Some(&json!("TASK_STATE_COMPLETED"))
    );

    // 1.0 list, get, create a second, delete.
    let listed = mesh
        .call(
            "echo",
            "ListTaskPushNotificationConfigs",
            json!({"taskId": task_id}),
        )
        .await;
    let configs = result(&listed)["configs"].as_array().unwrap().clone();
    assert_eq!(configs.len(), 1, "{listed}");
    let config_id = configs[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(configs[0]["taskId"], json!(task_id));

    let got = mesh
        .call(
            "echo",
            "GetTaskPushNotificationConfig",
            json!({"taskId": task_id, "id": config_id}),
        )
        .await;
    assert_eq!(result(&got)["url"], json!(hook.url));

    let created = mesh
        .call(
            "echo",
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task_id, "id": "second", "url": hook.url, "token": "t2"}),
        )
        .await;
    assert_eq!(result(&created)["id"], "second");
    let listed = mesh
        .call(
            "echo",
            "ListTaskPushNotificationConfigs",
            json!({"taskId": task_id}),
        )
        .await;
    assert_eq!(result(&listed)["configs"].as_array().unwrap().len(), 2);

    let deleted = mesh
        .call(
            "echo",
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": task_id, "id": "second"}),
        )
        .await;
    assert!(deleted.get("result").is_some(), "{deleted}");
    // Deleting is idempotent (spec 1.0 §3.1.10): again, the same success.
    let deleted_again = mesh
        .call(
            "echo",
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": task_id, "id": "second"}),
        )
        .await;
    assert_eq!(
        deleted_again.get("result"),
        deleted.get("result"),
        "{deleted_again}"
    );
    assert!(deleted_again.get("error").is_none(), "{deleted_again}");
    let again = mesh
        .call(
            "echo",
            "GetTaskPushNotificationConfig",
            json!({"taskId": task_id, "id": "second"}),
        )
        .await;
    // A config that does not exist is TaskNotFound (spec 1.0 §3.1.8), naming the config.
    assert_eq!(code(&again), -32001);
    assert!(again.to_string().contains("second"), "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v03_and_v01_config_methods() {
    let mut hook = Hook::start(0).await;
    let gate = Gate::default();
    let mut mesh = GatewayMesh::start_with(allow_loopback).await;
    mesh.run(slow_agent("slow", gate.clone())).await;
    mesh.run(mesh_example_agents::echo::agent()).await;

    // 0.3: set on a running task, then list and delete.
    let mut params = msg03("later");
    params["configuration"] = json!({"blocking": false});
    let body = mesh.call("slow", "message/send", params).await;
    let task_id = result(&body)["id"].as_str().unwrap().to_owned();
    let set = mesh
        .call(
            "slow",
            "tasks/pushNotificationConfig/set",
            json!({"taskId": task_id, "pushNotificationConfig": {"url": hook.url, "token": "late"}}),
        )
        .await;
    let set = result(&set);
    assert_eq!(set["taskId"], json!(task_id));
    assert_eq!(
        set["pushNotificationConfig"]["id"],
        json!(task_id),
        "0.x configs are named by their task"
    );
    let listed = mesh
        .call(
            "slow",
            "tasks/pushNotificationConfig/list",
            json!({"id": task_id}),
        )
        .await;
    assert_eq!(result(&listed).as_array().unwrap().len(), 1, "{listed}");
    gate.open();
    let all = hook.until_accepted("completed").await;
    assert!(
        all.iter()
            .all(|r| r.headers["x-a2a-notification-token"] == "late")
    );
    let deleted = mesh
        .call(
            "slow",
            "tasks/pushNotificationConfig/delete",
            json!({"id": task_id, "pushNotificationConfigId": task_id}),
        )
        .await;
    assert_eq!(deleted["result"], Value::Null, "{deleted}");
    assert!(deleted.get("error").is_none(), "{deleted}");
    let listed = mesh
        .call(
            "slow",
            "tasks/pushNotificationConfig/list",
            json!({"id": task_id}),
        )
        .await;
    assert_eq!(result(&listed).as_array().unwrap().len(), 0);

    // 0.1: tasks/send with pushNotification, then tasks/pushNotification/get.
    let mut params = msg01("t01-push", "hello 0.1");
    params["pushNotification"] = json!({"url": hook.url, "token": "old"});
    let body = mesh.call("echo", "tasks/send", params).await;
    assert_eq!(task_state(result(&body)), "completed");
    let all = hook.until_accepted("completed").await;
    let last = all.last().unwrap();
    assert_eq!(last.body["id"], "t01-push");
    assert_eq!(last.headers["x-a2a-notification-token"], "old");
    let got = mesh
        .call(
            "echo",
            "tasks/pushNotification/get",
            json!({"id": "t01-push"}),
        )
        .await;
    assert_eq!(result(&got)["id"], "t01-push", "{got}");
    assert_eq!(
        result(&got)["pushNotificationConfig"]["url"],
        json!(hook.url)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_webhooks_and_garbage_are_refused_naming_the_field() {
    // Private webhooks are not allowed here (the default).
    let mut mesh = GatewayMesh::start().await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let body = mesh.call("echo", "message/send", msg03("x")).await;
    let task_id = result(&body)["id"].as_str().unwrap().to_owned();

    for (url, needle) in [
        ("http://127.0.0.1:9/hook", "non-public"),
        ("http://localhost:9/hook", "non-public"),
        ("http://[::1]:9/hook", "non-public"),
        ("http://10.1.2.3/hook", "non-public"),
        ("http://192.168.0.1/hook", "non-public"),
        ("http://169.254.169.254/latest/meta-data", "non-public"),
        ("http://[fe80::1]/hook", "non-public"),
        ("ftp://example.com/hook", "scheme"),
        ("https://127.0.0.1:9/hook", "non-public"),
        ("https://localhost/hook", "non-public"),
        ("not a url", "valid URL"),
    ] {
        let set = mesh
            .call(
                "echo",
                "tasks/pushNotificationConfig/set",
                json!({"taskId": task_id, "pushNotificationConfig": {"url": url}}),
            )
            .await;
        assert_eq!(code(&set), -32602, "{url}: {set}");
        let text = set.to_string();
        assert!(
            text.contains("params.pushNotificationConfig.url") && text.contains(needle),
            "{url}: {set}"
        );
    }
    // 1.0 names its own field; a send with a bad config starts no task.
    let created = mesh
        .call(
            "echo",
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task_id, "url": "http://127.0.0.1/x"}),
        )
        .await;
    assert_eq!(code(&created), -32602);
    assert!(created.to_string().contains("params.url"), "{created}");
    let mut params = msg10("x");
    params["configuration"] = json!({"taskPushNotificationConfig": {"url": "http://127.0.0.1/x"}});
    let sent = mesh.call("echo", "SendMessage", params).await;
    assert_eq!(code(&sent), -32602);
    assert!(
        sent.to_string()
            .contains("params.configuration.taskPushNotificationConfig.url"),
        "{sent}"
    );

    // Garbage params: never a panic, always a JSON-RPC error.
    for params in [
        json!({"taskId": task_id, "pushNotificationConfig": {"url": 5}}),
        json!({"taskId": task_id, "pushNotificationConfig": {}}),
        json!({"taskId": task_id, "pushNotificationConfig": "x"}),
        json!({"taskId": task_id, "pushNotificationConfig": {"url": "http://8.8.8.8/x", "token": "a\nb"}}),
        json!({"taskId": task_id, "pushNotificationConfig": {"url": "http://8.8.8.8/x",
            "authentication": {"schemes": ["Bearer x"], "credentials": "c"}}}),
        json!({"pushNotificationConfig": {"url": "http://8.8.8.8/x"}}),
        json!([1, 2]),
        json!({"taskId": "no-such-task", "pushNotificationConfig": {"url": "http://8.8.8.8/x"}}),
    ] {
        let set = mesh
            .call("echo", "tasks/pushNotificationConfig/set", params.clone())
            .await;
        let c = code(&set);
        assert!(c == -32602 || c == -32001, "{params}: {set}");
    }
    for (method, params) in [
        ("tasks/pushNotificationConfig/get", json!({"id": 7})),
        ("tasks/pushNotificationConfig/list", json!({})),
        (
            "tasks/pushNotificationConfig/delete",
            json!({"id": task_id}),
        ),
        ("GetTaskPushNotificationConfig", json!({"taskId": task_id})),
        (
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": task_id}),
        ),
        (
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": "no-such-task", "id": "nope"}),
        ),
    ] {
        let answer = mesh.call("echo", method, params.clone()).await;
        let c = code(&answer);
        assert!(c == -32602 || c == -32001, "{method} {params}: {answer}");
    }
    // The gateway still serves.
    let body = mesh.call("echo", "message/send", msg03("still here")).await;
    assert_eq!(task_state(result(&body)), "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_webhook_does_not_slow_the_task_and_push_shows_on_the_card() {
    // A receiver that never answers 2xx, and a short timeout.
    let hook = Hook::start(usize::MAX).await;
    let mut mesh = GatewayMesh::start_with(|c| {
        allow_loopback(c);
        c.webhook_attempts = 3;
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let (status, card) = mesh
        .get_json("/agents/echo/.well-known/agent-card.json")
        .await;
    assert_eq!(status, 200);
    assert_eq!(card["capabilities"]["pushNotifications"], true, "{card}");

    let mut params = msg03("fast anyway");
    params["configuration"] = json!({"pushNotificationConfig": {"url": hook.url}});
    let started = std::time::Instant::now();
    let body = mesh.call("echo", "message/send", params).await;
    assert_eq!(task_state(result(&body)), "completed");
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(hook);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_delivery_queue_drops_and_counts_without_slowing_sends() {
    // One delivery may wait; the receiver never accepts, so it stays queued (retrying).
    let mut hook = Hook::start(usize::MAX).await;
    let mut mesh = GatewayMesh::start_with(|c| {
        c.allow_private_webhooks = true;
        c.webhook_queue = 1;
        c.webhook_attempts = 100;
        c.webhook_backoff = Duration::from_millis(200);
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    let mut params = msg03("first");
    params["configuration"] = json!({"pushNotificationConfig": {"url": hook.url}});
    mesh.call("echo", "message/send", params).await;
    hook.next().await; // the first attempt arrived: that delivery now retries
    for i in 0..3 {
        let mut params = msg03(&format!("more {i}"));
        params["configuration"] = json!({"pushNotificationConfig": {"url": hook.url}});
        let body = mesh.call("echo", "message/send", params).await;
        assert_eq!(task_state(result(&body)), "completed");
    }
    let (_, text) = {
        let response = mesh.http.get(mesh.url("/metrics")).send().await.unwrap();
        (response.status(), response.text().await.unwrap())
    };
    let dropped: f64 = text
        .lines()
        .find(|l| l.starts_with("mesh_gateway_webhook_failures_total{reason=\"dropped\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(dropped >= 3.0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_webhook_with_a_trusted_private_ca_gets_the_task_and_its_token() {
    let certs = certificates();
    let mut hook = Hook::start_tls(1, &certs).await;
    assert!(hook.url.starts_with("https://localhost:"), "{}", hook.url);
    let mut mesh = GatewayMesh::start_with(|c| {
        allow_loopback(c);
        c.webhook_ca_file = Some(certs.join("ca.pem"));
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;

    let mut params = msg03("over tls");
    params["configuration"] = json!({
        "pushNotificationConfig": {"url": hook.url, "token": "tls-token"},
    });
    let body = mesh.call("echo", "message/send", params).await;
    let task_id = result(&body)["id"].as_str().unwrap().to_owned();
    let all = hook.until_accepted("completed").await;
    assert_eq!(
        all[0].answered, 500,
        "the first answer is a failure: {all:?}"
    );
    assert_eq!(all[0].body, all[1].body, "the retry carries the same task");
    for r in &all {
        assert_eq!(r.headers["x-a2a-notification-token"], "tls-token");
        assert_eq!(r.body["id"], json!(task_id));
        assert_eq!(r.body["kind"], "task");
    }
    assert_eq!(
        hook.failed_handshakes
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    wait_metric(&mesh, "mesh_gateway_webhook_deliveries_total", 1.0).await;
    let _ = std::fs::remove_dir_all(certs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_webhook_with_an_untrusted_certificate_gets_nothing_and_is_counted() {
    let certs = certificates();
    let mut hook = Hook::start_tls(0, &certs).await;
    // The gateway trusts the system's roots only: the throwaway CA is not one of them.
    let mut mesh = GatewayMesh::start_with(|c| {
        allow_loopback(c);
        c.webhook_attempts = 2;
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;

    let mut params = msg03("not to a stranger");
    params["configuration"] = json!({"pushNotificationConfig": {"url": hook.url, "token": "t"}});
    let body = mesh.call("echo", "message/send", params).await;
    assert_eq!(task_state(result(&body)), "completed");
    // Every notification of the task is given up after two refused handshakes.
    wait_metric(
        &mesh,
        "mesh_gateway_webhook_failures_total{reason=\"given_up\"}",
        1.0,
    )
    .await;
    assert!(
        hook.failed_handshakes
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 2
    );
    assert!(hook.try_next().is_none(), "no request got through");
    assert_eq!(
        metric(&mesh, "mesh_gateway_webhook_deliveries_total").await,
        0.0
    );
    // The gateway still serves.
    let body = mesh.call("echo", "message/send", msg03("still here")).await;
    assert_eq!(task_state(result(&body)), "completed");
    let _ = std::fs::remove_dir_all(certs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_ca_file_that_cannot_be_read_stops_the_start() {
    let broker = mesh_testkit::TestBroker::from_env().await;
    let config = mesh_gateway::GatewayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        namespace: mesh_testkit::fresh_namespace(),
        webhook_ca_file: Some("/nonexistent/webhook-ca.pem".into()),
        ..mesh_gateway::GatewayConfig::default()
    };
    let bus = mesh_core::bus::Bus::connect(broker.bus_config())
        .await
        .unwrap();
    let Err(error) = mesh_gateway::Gateway::start(config, bus.clone()).await else {
        panic!("a gateway started with a missing webhook CA file");
    };
    assert!(
        matches!(error, mesh_gateway::GatewayError::WebhookTls(_)),
        "{error}"
    );
    assert!(
        error.to_string().contains("/nonexistent/webhook-ca.pem"),
        "{error}"
    );
    let _ = bus.disconnect().await;
}
