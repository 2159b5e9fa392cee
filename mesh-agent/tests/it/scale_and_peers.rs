//! Scale-out, presence and peer calls, against a real Mosquitto: instances sharing load, an
//! instance crashing mid-task, the last instance crashing, delegation and its cancellation.

use crate::support::*;
use mesh_agent::{Agent, Outcome, PeerError, TaskContext, handler_fn};
use mesh_core::dialect::Method;
use mesh_core::model::TaskState;
use mesh_core::requester::strip_reply_meta;
use mesh_core::rpc::Reply;
use mesh_testkit::TestBroker;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An agent whose handler answers with the instance-independent text, after `delay`.
fn slow_echo(name: &str, delay: Duration) -> Agent {
    Agent::new(
        name,
        handler_fn(move |ctx: TaskContext| async move {
            ctx.working("on it").await?;
            tokio::select! {
                _ = tokio::time::sleep(delay) => Ok(Outcome::completed_with(ctx.text())),
                _ = ctx.cancelled() => Ok(Outcome::completed()),
            }
        }),
    )
}

mesh_testkit::both_brokers!(two_instances_share_the_load_each_request_handled_once);
async fn two_instances_share_the_load_each_request_handled_once(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let a = mesh.run(slow_echo("pair", Duration::ZERO)).await;
    let b = mesh.run(slow_echo("pair", Duration::ZERO)).await;
    assert!(
        mesh.registry.wait_for_instances("pair", 2, WAIT).await,
        "both instances are registered"
    );
    let mut streams = Vec::new();
    for i in 0..40 {
        streams.push(
            mesh.send("pair", &format!("n{i}"), Method::SendStreamingMessage)
                .await,
        );
    }
    let mut per_instance: HashMap<String, usize> = HashMap::new();
    for (_, stream) in streams {
        let deliveries = collect(stream).await;
        let last = deliveries.last().unwrap();
        let mut instances: Vec<String> = deliveries
            .iter()
            .filter_map(|d| d.instance.clone())
            .collect();
        instances.dedup();
        assert_eq!(instances.len(), 1, "one instance handled the whole task");
        *per_instance.entry(instances[0].clone()).or_default() += 1;
        let Ok(Reply::StatusUpdate(end)) = &last.reply else {
            panic!("ends with a status: {last:?}")
        };
        assert_eq!(end.status.state, TaskState::Completed);
    }
    assert_eq!(per_instance.values().sum::<usize>(), 40);
    assert_eq!(
        per_instance.len(),
        2,
        "both instances served: {per_instance:?}"
    );
    a.shutdown().await;
    b.shutdown().await;
}

mesh_testkit::both_brokers!(a_crashed_instance_fails_its_task_at_once_and_the_survivor_serves);
async fn a_crashed_instance_fails_its_task_at_once_and_the_survivor_serves(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let first = mesh.run(slow_echo("crashy", Duration::from_secs(30))).await;
    let second = mesh.run(slow_echo("crashy", Duration::from_secs(30))).await;
    assert!(mesh.registry.wait_for_instances("crashy", 2, WAIT).await);

    // Start tasks until one runs on the instance we are going to kill.
    let victim = first.instance_id().to_owned();
    let mut doomed = None;
    for i in 0..20 {
        let (_, mut stream) = mesh
            .send("crashy", &format!("t{i}"), Method::SendStreamingMessage)
            .await;
        let announced = stream.next().await.unwrap();
        if announced.instance.as_deref() == Some(victim.as_str()) {
            doomed = Some(stream);
            break;
        }
    }
    let mut doomed = doomed.expect("a task landed on the first instance");
    let killed_at = Instant::now();
    first.abort();

    // The task fails at once (the broker publishes the will; the requester watches presence),
    // not at its deadline, and says which instance went away.
    let error = loop {
        let delivery = doomed.next().await.expect("the stream ends with an error");
        if let Err(error) = delivery.reply {
            break error;
        }
    };
    assert!(
        killed_at.elapsed() < Duration::from_secs(4),
        "{:?}",
        killed_at.elapsed()
    );
    assert!(
        error.message.contains(&victim) && error.message.contains("offline"),
        "{error}"
    );

    // The agent stays online through its other instance, which takes new requests.
    assert!(mesh.registry.wait_for_instances("crashy", 1, WAIT).await);
    assert!(mesh.registry.is_online("crashy"));
    let (_, mut stream) = mesh
        .send("crashy", "still there?", Method::SendStreamingMessage)
        .await;
    let first_event = stream.next().await.unwrap();
    assert_eq!(first_event.instance.as_deref(), Some(second.instance_id()));
    second.abort();
}

mesh_testkit::both_brokers!(
    the_last_instance_crashing_takes_the_agent_offline_within_the_keep_alive
);
async fn the_last_instance_crashing_takes_the_agent_offline_within_the_keep_alive(
    broker: TestBroker,
) {
    let mesh = BusMesh::on(broker).await;
    let only = mesh.run(slow_echo("lonely", Duration::ZERO)).await;
    assert!(mesh.registry.is_online("lonely"));
    let killed_at = Instant::now();
    only.abort();
    // Keep-alive is 2 s in these tests; the broker sees the socket close at once.
    assert!(
        mesh.registry
            .wait_offline("lonely", Duration::from_secs(3))
            .await
    );
    let took = killed_at.elapsed();
    assert!(took <= Duration::from_secs(3), "offline after {took:?}");
    // The card stays: the agent is known, and offline.
    let view = mesh.registry.agent("lonely").unwrap();
    assert!(view.card.is_some() && !view.online());
    clear_retained(&mesh, "lonely").await;
}

mesh_testkit::both_brokers!(a_graceful_shutdown_announces_offline_and_clears_presence);
async fn a_graceful_shutdown_announces_offline_and_clears_presence(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let agent = mesh.run(slow_echo("polite", Duration::ZERO)).await;
    agent.shutdown().await;
    assert!(mesh.registry.wait_offline("polite", WAIT).await);
    clear_retained(&mesh, "polite").await;
}

// A parent that delegates to `child` and waits; the child records that it saw the cancel.
mesh_testkit::both_brokers!(canceling_a_parent_cancels_the_child_it_called);
async fn canceling_a_parent_cancels_the_child_it_called(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let (child_canceled_tx, child_canceled_rx) = tokio::sync::oneshot::channel::<()>();
    let child_canceled_tx = Arc::new(Mutex::new(Some(child_canceled_tx)));
    let child = Agent::new(
        "child",
        handler_fn(move |ctx: TaskContext| {
            let tx = child_canceled_tx.clone();
            async move {
                ctx.working("child working").await?;
                ctx.cancelled().await;
                if let Some(tx) = tx.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                Ok(Outcome::completed())
            }
        }),
    );
    let parent = Agent::new(
        "parent",
        handler_fn(|ctx: TaskContext| async move {
            ctx.working("asking the child").await?;
            let mut stream = ctx.peers().stream("child", user("work")).await?;
            while let Some(event) = stream.next().await {
                if let Err(PeerError::Canceled) = event {
                    break;
                }
                event?;
            }
            Ok(Outcome::completed())
        }),
    );
    let child = mesh.run(child).await;
    let parent = mesh.run(parent).await;
    let (task_id, mut stream) = mesh
        .send("parent", "go", Method::SendStreamingMessage)
        .await;
    for _ in 0..2 {
        stream.next().await.unwrap().reply.unwrap(); // task, working "asking"
    }
    // Give the child call a moment to start: wait until the child runs a task.
    let started = Instant::now();
    while child.running_tasks() == 0 {
        assert!(started.elapsed() < WAIT, "the child never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let canceled = mesh
        .requester
        .cancel("parent", &task_id, WAIT)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    tokio::time::timeout(WAIT, child_canceled_rx)
        .await
        .unwrap()
        .unwrap();
    parent.shutdown().await;
    child.shutdown().await;
}

mesh_testkit::both_brokers!(
    a_peer_that_is_not_online_is_an_immediate_error_and_loops_hit_the_depth_limit
);
async fn a_peer_that_is_not_online_is_an_immediate_error_and_loops_hit_the_depth_limit(
    broker: TestBroker,
) {
    let mesh = BusMesh::on(broker).await;
    let caller = Agent::new(
        "caller",
        handler_fn(|ctx: TaskContext| async move {
            let started = Instant::now();
            let result = ctx.peers().ask("nobody-home", "hello").await;
            let Err(PeerError::NotOnline(name)) = result else {
                return Ok(Outcome::failed(format!(
                    "expected NotOnline, got {result:?}"
                )));
            };
            assert!(started.elapsed() < Duration::from_millis(100));
            Ok(Outcome::completed_with(format!("{name} is offline")))
        }),
    );
    // An agent that calls itself: the depth limit ends the loop with a clear error.
    let looper = Agent::new(
        "looper",
        handler_fn(|ctx: TaskContext| async move {
            match ctx.peers().ask("looper", "again").await {
                Err(PeerError::DepthExceeded { depth, limit }) => Ok(Outcome::completed_with(
                    format!("stopped at depth {depth} (limit {limit})"),
                )),
                Ok(mesh_agent::PeerAnswer::Task(task)) => {
                    Ok(Outcome::Completed(task.status.message))
                }
                other => Ok(Outcome::failed(format!("{other:?}"))),
            }
        }),
    );
    let caller = mesh.run(caller).await;
    let looper = mesh.run(looper).await;

    let (_, stream) = mesh.send("caller", "x", Method::SendMessage).await;
    let Ok(Reply::Task(task)) = collect(stream).await.pop().unwrap().reply else {
        panic!("a task")
    };
    assert_eq!(task.status.state, TaskState::Completed, "{task:?}");

    let (_, stream) = mesh.send("looper", "x", Method::SendMessage).await;
    let Ok(Reply::Task(mut task)) = collect(stream).await.pop().unwrap().reply.map(|mut r| {
        strip_reply_meta(&mut r);
        r
    }) else {
        panic!("a task")
    };
    assert_eq!(task.status.state, TaskState::Completed);
    let text = task.status.message.take().unwrap().parts[0]
        .as_text()
        .unwrap()
        .to_owned();
    assert!(text.contains("stopped at depth 9 (limit 8)"), "{text}");
    caller.shutdown().await;
    looper.shutdown().await;
}

mesh_testkit::both_brokers!(the_orchestrator_streams_a_peers_progress_and_result);
async fn the_orchestrator_streams_a_peers_progress_and_result(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let writer = mesh.run(mesh_example_agents::writer::agent()).await;
    let orchestrator = mesh.run(mesh_example_agents::orchestrator::agent()).await;
    let (_, stream) = mesh
        .send(
            "orchestrator",
            "write about brokers chunks: 3",
            Method::SendStreamingMessage,
        )
        .await;
    let events: Vec<Reply> = collect(stream)
        .await
        .into_iter()
        .map(|d| d.reply.unwrap())
        .collect();
    let chunks = events
        .iter()
        .filter(|e| matches!(e, Reply::ArtifactUpdate(_)))
        .count();
    assert_eq!(chunks, 3, "the writer's chunks are relayed: {events:#?}");
    // Relayed as they were written: one artifact, appended to, its last chunk marked.
    let flags: Vec<(String, Option<bool>, Option<bool>)> = events
        .iter()
        .filter_map(|e| match e {
            Reply::ArtifactUpdate(u) => {
                Some((u.artifact.artifact_id.clone(), u.append, u.last_chunk))
            }
            _ => None,
        })
        .collect();
    let id = flags[0].0.clone();
    assert_eq!(
        flags,
        vec![
            (id.clone(), Some(false), Some(false)),
            (id.clone(), Some(true), Some(false)),
            (id, Some(true), Some(true)),
        ]
    );
    let Reply::StatusUpdate(end) = events.last().unwrap() else {
        panic!("ends with a status")
    };
    assert_eq!(end.status.state, TaskState::Completed);
    let text = end.status.message.as_ref().unwrap().parts[0]
        .as_text()
        .unwrap();
    assert!(text.starts_with("[writer]"), "{text}");
    writer.shutdown().await;
    orchestrator.shutdown().await;
}

/// Leaves no retained card behind.
async fn clear_retained(mesh: &BusMesh, agent: &str) {
    let topic = mesh.topics.agent_card(agent).unwrap();
    mesh.bus
        .publish(&topic, Vec::new(), mesh_core::bus::QoS::AtLeastOnce, true)
        .await
        .unwrap();
}

/// An agent named `name` whose handler reports `tag` once it has the request, then waits for
/// cancellation without saying anything.
fn silent_until_canceled(name: &str, tag: u8, started: tokio::sync::mpsc::Sender<u8>) -> Agent {
    Agent::new(
        name,
        handler_fn(move |ctx: TaskContext| {
            let started = started.clone();
            async move {
                let _ = started.send(tag).await;
                ctx.cancelled().await;
                Ok(Outcome::completed())
            }
        }),
    )
}

// A request delivered to an instance that dies before saying anything about it is not left
// to its deadline: it fails PICKUP_GRACE after that instance's will, saying so, and the
// other instance serves on.
mesh_testkit::both_brokers!(a_request_lost_with_a_dying_instance_fails_within_the_pickup_grace);
async fn a_request_lost_with_a_dying_instance_fails_within_the_pickup_grace(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let (started, mut which) = tokio::sync::mpsc::channel(4);
    let mut instances = vec![
        Some(
            mesh.run(silent_until_canceled("quiet", 0, started.clone()))
                .await,
        ),
        Some(mesh.run(silent_until_canceled("quiet", 1, started)).await),
    ];
    assert!(mesh.registry.wait_for_instances("quiet", 2, WAIT).await);
    let (_, mut lost) = mesh
        .send("quiet", "hello", Method::SendStreamingMessage)
        .await;
    let taken_by = tokio::time::timeout(WAIT, which.recv())
        .await
        .unwrap()
        .unwrap();
    // Killed before its first event (the runtime announces a task after 100 ms).
    let killed_at = Instant::now();
    instances[usize::from(taken_by)].take().unwrap().abort();
    let delivery = tokio::time::timeout(WAIT, lost.next())
        .await
        .expect("the request ends before its deadline")
        .expect("with an answer");
    let error = delivery.reply.expect_err("the request failed");
    let took = killed_at.elapsed();
    assert!(
        error.message.contains("no instance took the request up"),
        "{error}"
    );
    assert!(
        took >= mesh_core::requester::PICKUP_GRACE && took < Duration::from_secs(6),
        "{took:?}"
    );
    // The survivor serves: a new request is taken up (announced) by it.
    let (task_id, mut served) = mesh
        .send("quiet", "again", Method::SendStreamingMessage)
        .await;
    let announced = served.next().await.unwrap();
    assert!(announced.reply.is_ok(), "{announced:?}");
    mesh.requester
        .cancel("quiet", &task_id, WAIT)
        .await
        .unwrap();
    for survivor in instances.into_iter().flatten() {
        survivor.shutdown().await;
    }
}

mesh_testkit::both_brokers!(a_peer_stream_is_a_stream_of_the_models_events);
async fn a_peer_stream_is_a_stream_of_the_models_events(broker: TestBroker) {
    use futures_util::StreamExt;
    use mesh_agent::model::StreamResponse;
    let mesh = BusMesh::on(broker).await;
    let writer = mesh.run(mesh_example_agents::writer::agent()).await;
    let reader = Agent::new(
        "reader",
        handler_fn(|ctx: TaskContext| async move {
            let stream = ctx
                .peers()
                .stream("writer", user("brokers chunks: 2"))
                .await?;
            let events: Vec<_> = stream.collect().await;
            // What the reader saw, one letter per event: Task, Status, Artifact, Message.
            let mut seen = String::new();
            for event in events {
                seen.push(match event? {
                    StreamResponse::Task(_) => 'T',
                    StreamResponse::StatusUpdate(u) if u.status.state == TaskState::Completed => {
                        'C'
                    }
                    StreamResponse::StatusUpdate(_) => 'S',
                    StreamResponse::ArtifactUpdate(u) if u.last_chunk == Some(true) => 'L',
                    StreamResponse::ArtifactUpdate(_) => 'A',
                    StreamResponse::Message(_) => 'M',
                });
            }
            Ok(Outcome::completed_with(seen))
        }),
    );
    let reader = mesh.run(reader).await;
    let (_, stream) = mesh.send("reader", "go", Method::SendMessage).await;
    let last = collect(stream)
        .await
        .pop()
        .expect("an answer")
        .reply
        .unwrap();
    let Reply::Task(task) = last else {
        panic!("a task: {last:?}")
    };
    assert_eq!(task.status.state, TaskState::Completed, "{task:?}");
    let seen = task.status.message.as_ref().unwrap().parts[0]
        .as_text()
        .unwrap()
        .to_owned();
    // The task, the writer's `working` (the runtime sends none of its own before it), two
    // chunks (the last marked), the completion.
    assert_eq!(seen, "TSALC");
    writer.shutdown().await;
    reader.shutdown().await;
}

mesh_testkit::both_brokers!(an_instance_hears_the_mesh_only_once_a_handler_looks_at_its_peers);
async fn an_instance_hears_the_mesh_only_once_a_handler_looks_at_its_peers(broker: TestBroker) {
    // A retained card larger than the instance's bus takes in: an instance subscribed to
    // the mesh's cards has it delivered, reads it and counts it as dropped.
    const LIMIT: usize = 64 * 1024;
    let mesh = BusMesh::on(broker).await;
    let bulky = mesh.topics.agent_card("bulky").unwrap();
    mesh.bus
        .publish(
            &bulky,
            vec![b' '; 2 * LIMIT],
            mesh_core::bus::QoS::AtLeastOnce,
            true,
        )
        .await
        .unwrap();
    let looker = Agent::new(
        "looker",
        handler_fn(|ctx: TaskContext| async move {
            if ctx.text() == "look" {
                ctx.peers().is_online("bulky").await?;
            }
            Ok(Outcome::completed())
        }),
    );
    let mut bus = mesh.broker.bus_config();
    bus.max_packet_size = LIMIT;
    let running = looker.config(mesh.config()).start(bus).await.unwrap();
    assert!(mesh.registry.wait_online("looker", WAIT).await);
    let completed = |deliveries: Vec<mesh_core::requester::Delivery>| {
        deliveries.into_iter().any(
            |d| matches!(d.reply, Ok(Reply::Task(t)) if t.status.state == TaskState::Completed),
        )
    };

    // Started and serving, it has subscribed to no other agent's card or presence.
    let (_, stream) = mesh.send("looker", "work", Method::SendMessage).await;
    assert!(completed(collect(stream).await));
    assert_eq!(running.bus().stats().oversized_dropped, 0);

    // Its first look at its peers loads them all (the call returns once they are loaded).
    let (_, stream) = mesh.send("looker", "look", Method::SendMessage).await;
    assert!(completed(collect(stream).await));
    assert_eq!(running.bus().stats().oversized_dropped, 1);

    running.shutdown().await;
    clear_retained(&mesh, "bulky").await;
    clear_retained(&mesh, "looker").await;
}
