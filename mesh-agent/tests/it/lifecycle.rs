//! The task lifecycle of a bus agent, against a real Mosquitto: events and their order, direct
//! messages, multi-turn, cancellation, deadlines, panics, duplicates, hostile names.

use crate::support::*;
use mesh_agent::{Agent, AgentError, Outcome, TaskContext, handler_fn, new_artifact};
use mesh_core::bus::QoS;
use mesh_core::codec;
use mesh_core::dialect::{Dialect, Method};
use mesh_core::jsonrpc::JsonRpcId;
use mesh_core::meta::MeshMeta;
use mesh_core::model::{Part, SendMessageRequest, Task, TaskState};
use mesh_core::requester::strip_reply_meta;
use mesh_core::rpc::{Call, Reply, Request};
use mesh_core::topic::Topics;
use mesh_testkit::TestBroker;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn state_of(reply: &Reply) -> Option<TaskState> {
    match reply {
        Reply::Task(task) => Some(task.status.state.clone()),
        Reply::StatusUpdate(event) => Some(event.status.state.clone()),
        _ => None,
    }
}

fn replies(deliveries: Vec<mesh_core::requester::Delivery>) -> Vec<Reply> {
    deliveries
        .into_iter()
        .map(|d| {
            let mut reply = d.reply.expect("no error");
            strip_reply_meta(&mut reply);
            reply
        })
        .collect()
}

mesh_testkit::both_brokers!(a_stream_is_task_then_working_then_artifact_then_final);
async fn a_stream_is_task_then_working_then_artifact_then_final(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let echo = mesh.run(mesh_example_agents::echo::agent()).await;
    let (task_id, stream) = mesh
        .send("echo", "hello", Method::SendStreamingMessage)
        .await;
    let events = replies(collect(stream).await);
    assert_eq!(events.len(), 4, "{events:#?}");
    let Reply::Task(task) = &events[0] else {
        panic!("first event is the task: {:?}", events[0])
    };
    assert_eq!(task.id, task_id);
    assert_eq!(task.status.state, TaskState::Submitted);
    assert_eq!(task.history.as_ref().unwrap().len(), 1);
    assert_eq!(state_of(&events[1]), Some(TaskState::Working));
    let Reply::ArtifactUpdate(update) = &events[2] else {
        panic!("third event is the artifact: {:?}", events[2])
    };
    assert_eq!(update.artifact.parts[0].as_text(), Some("hello"));
    assert_eq!(state_of(&events[3]), Some(TaskState::Completed));
    echo.shutdown().await;
}

mesh_testkit::both_brokers!(a_blocking_send_gets_only_the_finished_task);
async fn a_blocking_send_gets_only_the_finished_task(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let echo = mesh.run(mesh_example_agents::echo::agent()).await;
    let (task_id, stream) = mesh.send("echo", "hi", Method::SendMessage).await;
    let events = replies(collect(stream).await);
    assert_eq!(events.len(), 1, "{events:#?}");
    let Reply::Task(task) = &events[0] else {
        panic!("a task: {:?}", events[0])
    };
    assert_eq!(task.id, task_id);
    assert_eq!(task.status.state, TaskState::Completed);
    let artifacts = task.artifacts.as_ref().unwrap();
    assert_eq!(artifacts[0].parts[0].as_text(), Some("hi"));
    echo.shutdown().await;
}

/// The next reply of `stream`, without its `_mesh` (failing the test past [`WAIT`]).
async fn next_reply(stream: &mut mesh_core::requester::ReplyStream) -> Reply {
    let delivery = tokio::time::timeout(WAIT, stream.next()).await;
    let mut reply = delivery
        .expect("a reply in time")
        .expect("a reply")
        .reply
        .unwrap();
    strip_reply_meta(&mut reply);
    reply
}

/// An agent that writes the chunks `before` of one artifact, waits for `gate`, writes the
/// chunks `after` (the last one ends the artifact) and completes.
fn gated_writer(
    name: &str,
    gate: Arc<tokio::sync::Notify>,
    before: &'static [&'static str],
    after: &'static [&'static str],
) -> Agent {
    Agent::new(
        name,
        handler_fn(move |ctx: TaskContext| {
            let gate = gate.clone();
            async move {
                let mut writer = ctx.artifact_writer("out");
                for chunk in before {
                    writer.append(vec![Part::text(*chunk)]).await?;
                }
                gate.notified().await;
                let (last, rest) = after.split_last().expect("a chunk after the gate");
                for chunk in rest {
                    writer.append(vec![Part::text(*chunk)]).await?;
                }
                writer.finish(vec![Part::text(*last)]).await?;
                Ok(Outcome::completed())
            }
        }),
    )
}

mesh_testkit::both_brokers!(a_long_blocking_send_that_asks_goes_on_as_a_stream_after_its_progress);
async fn a_long_blocking_send_that_asks_goes_on_as_a_stream_after_its_progress(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let stepper = mesh
        .run(gated_writer(
            "stepper",
            gate.clone(),
            &["first"],
            &["second"],
        ))
        .await;
    let send = |task_id: &str, stream_after_progress: bool| {
        mesh.requester.send(
            "stepper",
            SendMessageRequest {
                message: user("go"),
                configuration: None,
                metadata: None,
                tenant: None,
            },
            mesh_core::requester::SendOptions {
                stream_after_progress,
                ..mesh_core::requester::SendOptions::new(Method::SendMessage, task_id, WAIT)
            },
        )
    };

    // Asked: the progress response (the task with the first chunk), then each event as the
    // handler makes it, and a final status update instead of the whole task.
    let mut stream = send("followed", true).await.unwrap();
    let Reply::Task(progress) = next_reply(&mut stream).await else {
        panic!("the progress response first")
    };
    assert_eq!(progress.status.state, TaskState::Working);
    let chunks = &progress.artifacts.as_ref().expect("the first chunk")[0].parts;
    assert_eq!(chunks[0].as_text(), Some("first"));
    gate.notify_one();
    let Reply::ArtifactUpdate(update) = next_reply(&mut stream).await else {
        panic!("the second chunk as an event of its own")
    };
    assert_eq!(update.artifact.parts[0].as_text(), Some("second"));
    assert_eq!(update.append, Some(true));
    assert_eq!(update.last_chunk, Some(true));
    let end = next_reply(&mut stream).await;
    assert!(
        matches!(&end, Reply::StatusUpdate(e) if e.status.state == TaskState::Completed),
        "{end:?}"
    );
    assert!(
        stream.next().await.is_none(),
        "nothing after the final event"
    );

    // Not asked: the progress response, then only the finished task.
    let mut stream = send("outcome", false).await.unwrap();
    assert!(
        matches!(next_reply(&mut stream).await, Reply::Task(t) if t.status.state == TaskState::Working)
    );
    gate.notify_one();
    let Reply::Task(task) = next_reply(&mut stream).await else {
        panic!("the whole task at the end")
    };
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(task.artifacts.as_ref().unwrap()[0].parts.len(), 2);
    assert!(stream.next().await.is_none());
    stepper.shutdown().await;
}

mesh_testkit::both_brokers!(a_handler_may_answer_with_a_direct_message_and_no_task);
async fn a_handler_may_answer_with_a_direct_message_and_no_task(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let agent = Agent::new(
        "direct",
        handler_fn(|ctx: TaskContext| async move {
            Ok(Outcome::reply(format!("you said {}", ctx.text())))
        }),
    );
    let running = mesh.run(agent).await;
    for method in [Method::SendStreamingMessage, Method::SendMessage] {
        let (_, stream) = mesh.send("direct", "x", method).await;
        let events = replies(collect(stream).await);
        assert_eq!(events.len(), 1, "{method:?}: {events:#?}");
        let Reply::Message(message) = &events[0] else {
            panic!("a message: {:?}", events[0])
        };
        assert_eq!(message.parts[0].as_text(), Some("you said x"));
    }
    running.shutdown().await;
}

mesh_testkit::both_brokers!(an_answer_sent_the_moment_the_question_arrives_continues_the_task);
/// The requester may read a task's `input-required` event and send its answer before the run
/// that asked has left the agent's running tasks (a thread preempted between the two on a busy
/// machine): the answer starts the next run all the same instead of being refused as "still
/// running". Many turns in several conversations, each answer sent the moment it may be.
async fn an_answer_sent_the_moment_the_question_arrives_continues_the_task(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let agent = Agent::new(
        "asker",
        handler_fn(|_ctx: TaskContext| async move { Ok(Outcome::input_required("and then?")) }),
    );
    let running = mesh.run(agent).await;
    let mesh = Arc::new(mesh);
    // Several conversations at once, so that the agent's runtime is busy while it ends a run.
    let conversations = (0..8).map(|conversation| {
        let mesh = mesh.clone();
        tokio::spawn(async move {
            let (task_id, stream) = mesh.send("asker", "hello", Method::SendMessage).await;
            let Some(Reply::Task(mut task)) = replies(collect(stream).await).pop() else {
                panic!("a task")
            };
            for turn in 0..25 {
                assert_eq!(task.status.state, TaskState::InputRequired);
                let mut answer = user("more");
                answer.task_id = Some(task_id.clone());
                let (_, stream) = mesh
                    .send_message("asker", answer, Method::SendMessage, Some(task))
                    .await;
                let deliveries = collect(stream).await;
                task = match deliveries.last().map(|d| d.reply.clone()) {
                    Some(Ok(Reply::Task(next))) => next,
                    _ => panic!("conversation {conversation}, turn {turn}: {deliveries:#?}"),
                };
            }
        })
    });
    for conversation in conversations.collect::<Vec<_>>() {
        conversation.await.unwrap();
    }
    running.shutdown().await;
}

mesh_testkit::both_brokers!(
    a_multi_turn_task_resumes_from_its_snapshot_and_a_terminal_task_refuses_more
);
async fn a_multi_turn_task_resumes_from_its_snapshot_and_a_terminal_task_refuses_more(
    broker: TestBroker,
) {
    let mesh = BusMesh::on(broker).await;
    let booker = mesh.run(mesh_example_agents::flight_booker::agent()).await;

    let (task_id, stream) = mesh
        .send(
            "flight-booker",
            "I'd like to book a flight.",
            Method::SendMessage,
        )
        .await;
    let events = replies(collect(stream).await);
    let Reply::Task(task) = events.last().unwrap().clone() else {
        panic!("a task")
    };
    assert_eq!(task.status.state, TaskState::InputRequired);
    assert!(
        task.status.message.is_some(),
        "the question is in the status"
    );

    let mut follow_up = user("From JFK to LHR on 2026-10-10");
    follow_up.task_id = Some(task_id.clone());
    follow_up.context_id = Some(task.context_id.clone());
    let (_, stream) = mesh
        .send_message(
            "flight-booker",
            follow_up,
            Method::SendMessage,
            Some(task.clone()),
        )
        .await;
    let events = replies(collect(stream).await);
    let Reply::Task(done) = events.last().unwrap().clone() else {
        panic!("a task")
    };
    assert_eq!(done.id, task_id);
    assert_eq!(done.status.state, TaskState::Completed);
    assert_eq!(
        done.history.as_ref().unwrap().len(),
        4,
        "user, agent, user, agent"
    );
    let itinerary = &done.artifacts.as_ref().unwrap()[0];
    assert_eq!(itinerary.name.as_deref(), Some("FlightItinerary.json"));

    // The same task once more: it is completed, so the agent refuses.
    let mut again = user("and a hotel");
    again.task_id = Some(task_id.clone());
    let (_, stream) = mesh
        .send_message("flight-booker", again, Method::SendMessage, Some(done))
        .await;
    let deliveries = collect(stream).await;
    let error = deliveries[0].reply.clone().unwrap_err();
    assert_eq!(error.code(), -32004, "{error:?}");
    booker.shutdown().await;
}

mesh_testkit::both_brokers!(a_message_for_an_unknown_task_is_task_not_found);
async fn a_message_for_an_unknown_task_is_task_not_found(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let echo = mesh.run(mesh_example_agents::echo::agent()).await;
    // No snapshot, no assigned id, a taskId the agent cannot know: -32001.
    let reply_topic = mesh
        .topics
        .gateway_response("probe", "i1", "echo", "t")
        .unwrap();
    let request = Request {
        id: Some(JsonRpcId::String("r1".into())),
        method: Method::SendMessage,
        dialect: Dialect::V0_3,
        shared_method: false,
        call: Call::Send(SendMessageRequest {
            message: {
                let mut m = user("hello?");
                m.task_id = Some("nobody-knows".into());
                m
            },
            configuration: None,
            metadata: None,
            tenant: None,
        }),
        mesh: MeshMeta {
            reply_to: Some(reply_topic.clone()),
            request_id: Some("rq-1".into()),
            ..Default::default()
        },
    };
    let mut replies_sub = mesh
        .bus
        .subscribe(&reply_topic, QoS::AtLeastOnce)
        .await
        .unwrap();
    mesh.bus
        .publish(
            &mesh.topics.agent_request("echo", "t").unwrap(),
            codec::encode_request(&request),
            QoS::AtLeastOnce,
            false,
        )
        .await
        .unwrap();
    let answer = tokio::time::timeout(WAIT, replies_sub.recv())
        .await
        .unwrap()
        .unwrap();
    let (id, reply) = codec::decode_reply(&answer.payload, Dialect::V0_3).unwrap();
    assert_eq!(id, JsonRpcId::String("r1".into()));
    assert_eq!(reply.unwrap_err().code(), -32001);
    echo.shutdown().await;
}

mesh_testkit::both_brokers!(a_method_agents_do_not_serve_is_answered_on_its_reply_topic);
async fn a_method_agents_do_not_serve_is_answered_on_its_reply_topic(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let echo = mesh.run(mesh_example_agents::echo::agent()).await;
    // tasks/get on an agent's request topic (the gateway answers it, not agents): the
    // agent says so on the reply topic of the request's envelope.
    let (reply_topic, mut replies) = probe_replies(&mesh, "echo", "g").await;
    let request = serde_json::json!({
        "jsonrpc": "2.0", "id": "g1", "method": "tasks/get",
        "params": {"id": "t", "metadata": {"_mesh": {"replyTo": reply_topic, "requestId": "rq-g"}}},
    });
    mesh.bus
        .publish(
            &mesh.topics.agent_request("echo", "g").unwrap(),
            request.to_string().into_bytes(),
            QoS::AtLeastOnce,
            false,
        )
        .await
        .unwrap();
    let answer = tokio::time::timeout(WAIT, replies.recv())
        .await
        .unwrap()
        .unwrap();
    let (id, reply) = codec::decode_reply(&answer.payload, Dialect::V0_3).unwrap();
    assert_eq!(id, JsonRpcId::String("g1".into()));
    let error = reply.unwrap_err();
    assert_eq!(error.code(), -32004, "{error}");
    echo.shutdown().await;
}

mesh_testkit::both_brokers!(cancel_reaches_the_handler_and_the_task_ends_canceled);
async fn cancel_reaches_the_handler_and_the_task_ends_canceled(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let (saw_cancel_tx, saw_cancel_rx) = tokio::sync::oneshot::channel::<()>();
    let saw_cancel_tx = Arc::new(std::sync::Mutex::new(Some(saw_cancel_tx)));
    let agent = Agent::new(
        "slow",
        handler_fn(move |ctx: TaskContext| {
            let saw_cancel_tx = saw_cancel_tx.clone();
            async move {
                ctx.working("waiting for a cancel").await?;
                ctx.cancelled().await;
                if let Some(tx) = saw_cancel_tx.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                // Whatever a canceled handler returns, the task ends canceled.
                Ok(Outcome::completed())
            }
        }),
    );
    let running = mesh.run(agent).await;
    let (answer, stream) = mesh.start_then_cancel("slow").await;
    assert_eq!(answer.status.state, TaskState::Canceled);
    let last = collect(stream).await.pop().unwrap().reply.unwrap();
    assert_eq!(state_of(&last), Some(TaskState::Canceled));
    tokio::time::timeout(WAIT, saw_cancel_rx)
        .await
        .unwrap()
        .unwrap();

    // A task nobody runs: silence, the requester decides.
    let nobody = mesh
        .requester
        .cancel("slow", "not-running", Duration::from_millis(300))
        .await
        .unwrap();
    assert!(nobody.is_none());
    running.shutdown().await;
}

/// How many panics said "resumed after completion": a finished handler polled again. The hook
/// is chained to the previous one and shared by every test of this binary, which is fine: no
/// test panics that way on purpose.
static POLLED_AFTER_COMPLETION: AtomicUsize = AtomicUsize::new(0);

fn count_polls_after_completion() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("");
            if message.contains("resumed after completion") {
                POLLED_AFTER_COMPLETION.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

mesh_testkit::both_brokers!(a_handler_that_returns_on_cancel_is_not_polled_again);
async fn a_handler_that_returns_on_cancel_is_not_polled_again(broker: TestBroker) {
    // The runner polls the handler before its cancel branch, so a handler that returns once
    // it sees the cancel has finished when the runner learns of the cancel; it must not be
    // handed to the grace period (which would poll it again) as an unfinished one would.
    count_polls_after_completion();
    let before = POLLED_AFTER_COMPLETION.load(Ordering::SeqCst);
    let mesh = BusMesh::on(broker).await;
    let agent = Agent::new(
        "polite",
        handler_fn(|ctx: TaskContext| async move {
            ctx.working("waiting for a cancel").await?;
            ctx.cancelled().await;
            Ok(Outcome::completed())
        }),
    );
    let running = mesh.run(agent).await;
    let (answer, stream) = mesh.start_then_cancel("polite").await;
    assert_eq!(answer.status.state, TaskState::Canceled);
    let last = collect(stream).await.pop().unwrap().reply.unwrap();
    assert_eq!(state_of(&last), Some(TaskState::Canceled));
    assert_eq!(running.running_tasks(), 0);
    running.shutdown().await;
    // A grace period would have started (and polled the handler) before the final event
    // left, so the answer above comes after any such poll.
    assert_eq!(POLLED_AFTER_COMPLETION.load(Ordering::SeqCst), before);
}

mesh_testkit::both_brokers!(a_canceled_handler_may_clean_up_then_is_aborted);
async fn a_canceled_handler_may_clean_up_then_is_aborted(broker: TestBroker) {
    /// Says "aborted" when the handler's future is dropped unfinished.
    struct Guard(tokio::sync::mpsc::UnboundedSender<&'static str>);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = self.0.send("aborted");
        }
    }
    let mesh = BusMesh::on(broker).await;
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let agent = Agent::new(
        "stubborn",
        handler_fn(move |ctx: TaskContext| {
            let events = events_tx.clone();
            async move {
                let _guard = Guard(events.clone());
                ctx.working("waiting for a cancel").await?;
                ctx.cancelled().await;
                // Clean-up work that takes a moment, well within the grace (2 s)...
                tokio::time::sleep(Duration::from_millis(200)).await;
                let _ = events.send("cleaned up");
                // ...then a handler that never returns.
                std::future::pending::<()>().await;
                Ok(Outcome::completed())
            }
        }),
    );
    let running = mesh.run(agent).await;
    let (answer, _stream) = mesh.start_then_cancel("stubborn").await;
    // The task ends canceled at once, without waiting for the handler.
    assert_eq!(answer.status.state, TaskState::Canceled);
    assert_eq!(running.running_tasks(), 0);
    for expected in ["cleaned up", "aborted"] {
        let event = tokio::time::timeout(WAIT, events.recv()).await;
        assert_eq!(event, Ok(Some(expected)));
    }
    running.shutdown().await;
}

mesh_testkit::both_brokers!(a_handler_past_its_deadline_is_canceled_and_its_task_fails_saying_so);
async fn a_handler_past_its_deadline_is_canceled_and_its_task_fails_saying_so(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let agent = Agent::new(
        "sleepy",
        handler_fn(|_ctx: TaskContext| async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(Outcome::completed())
        }),
    );
    let config = mesh_agent::AgentConfig {
        default_timeout: Duration::from_millis(300),
        max_timeout: Duration::from_millis(300),
        ..mesh.config()
    };
    let running = mesh.run_with(agent, config).await;
    let (_, stream) = mesh.send("sleepy", "zzz", Method::SendMessage).await;
    let events = replies(collect(stream).await);
    let Reply::Task(task) = events.last().unwrap() else {
        panic!("a task: {events:?}")
    };
    assert_eq!(task.status.state, TaskState::Failed);
    let why = task.status.message.as_ref().unwrap().parts[0]
        .as_text()
        .unwrap();
    assert!(why.contains("deadline"), "{why}");
    running.shutdown().await;
}

mesh_testkit::both_brokers!(a_panicking_handler_fails_its_task_and_the_agent_keeps_serving);
async fn a_panicking_handler_fails_its_task_and_the_agent_keeps_serving(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let agent = Agent::new(
        "fragile",
        handler_fn(|ctx: TaskContext| async move {
            if ctx.text() == "boom" {
                panic!("kaboom");
            }
            Ok(Outcome::completed_with("fine"))
        }),
    );
    let running = mesh.run(agent).await;
    let (_, stream) = mesh.send("fragile", "boom", Method::SendMessage).await;
    let Reply::Task(task) = replies(collect(stream).await).pop().unwrap() else {
        panic!("a task")
    };
    assert_eq!(task.status.state, TaskState::Failed);
    let why = task.status.message.as_ref().unwrap().parts[0]
        .as_text()
        .unwrap()
        .to_owned();
    assert!(why.contains("panicked") && why.contains("kaboom"), "{why}");

    let (_, stream) = mesh.send("fragile", "calm", Method::SendMessage).await;
    let Reply::Task(task) = replies(collect(stream).await).pop().unwrap() else {
        panic!("a task")
    };
    assert_eq!(task.status.state, TaskState::Completed);
    running.shutdown().await;
}

/// An agent that counts how often its handler ran.
fn counting_agent(name: &str, runs: Arc<AtomicUsize>) -> Agent {
    Agent::new(
        name,
        handler_fn(move |ctx: TaskContext| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                ctx.artifact(new_artifact(None, vec![Part::text("ok")]))
                    .await?;
                Ok(Outcome::completed())
            }
        }),
    )
}

mesh_testkit::both_brokers!(a_duplicate_publish_runs_once_and_a_reused_message_id_runs_twice);
async fn a_duplicate_publish_runs_once_and_a_reused_message_id_runs_twice(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let running = mesh.run(counting_agent("counter", runs.clone())).await;

    let reply_topic = mesh
        .topics
        .gateway_response("dup", "i1", "counter", "t")
        .unwrap();
    let mut answers = mesh
        .bus
        .subscribe(&reply_topic, QoS::AtLeastOnce)
        .await
        .unwrap();
    let publish = |request_id: &str, task_id: &str| {
        let mut message = user("same message id");
        message.message_id = "the-same-message-id".into();
        let params = SendMessageRequest {
            message,
            configuration: None,
            metadata: None,
            tenant: None,
        };
        codec::encode_request(&Request {
            id: Some(JsonRpcId::String(request_id.into())),
            method: Method::SendMessage,
            dialect: Dialect::V0_3,
            shared_method: false,
            call: Call::Send(params),
            mesh: MeshMeta {
                reply_to: Some(reply_topic.clone()),
                request_id: Some(request_id.into()),
                task_id: Some(task_id.into()),
                ..Default::default()
            },
        })
    };
    let topic = mesh.topics.agent_request("counter", "t").unwrap();
    let first = publish("request-1", "task-1");
    // The same publish twice (a QoS 1 redelivery), then another task with the same messageId.
    for payload in [first.clone(), first, publish("request-2", "task-2")] {
        mesh.bus
            .publish(&topic, payload, QoS::AtLeastOnce, false)
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    while tasks.len() < 2 {
        let answer = tokio::time::timeout(WAIT, answers.recv())
            .await
            .unwrap()
            .unwrap();
        let (_, reply) = codec::decode_reply(&answer.payload, Dialect::V0_3).unwrap();
        if let Ok(Reply::Task(task)) = reply {
            tasks.push(task.id);
        }
    }
    tasks.sort();
    assert_eq!(tasks, vec!["task-1".to_owned(), "task-2".to_owned()]);
    // Nothing more arrives: the duplicate did not run.
    let extra = tokio::time::timeout(Duration::from_millis(300), answers.recv()).await;
    assert!(extra.is_err(), "no third answer");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    running.shutdown().await;
}

mesh_testkit::both_brokers!(a_thousand_streamed_chunks_arrive_in_order);
async fn a_thousand_streamed_chunks_arrive_in_order(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let writer = mesh.run(mesh_example_agents::writer::agent()).await;
    let (_, stream) = mesh
        .send("writer", "chunks: 1000", Method::SendStreamingMessage)
        .await;
    let events = replies(collect(stream).await);
    let chunks: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Reply::ArtifactUpdate(u) => Some(u.artifact.parts[0].as_text().unwrap().to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(chunks.len(), 1000);
    for (index, chunk) in chunks.iter().enumerate() {
        assert!(
            chunk.starts_with(&format!("[{index}]")),
            "chunk {index}: {chunk}"
        );
    }
    let last_update = events
        .iter()
        .rev()
        .find_map(|e| match e {
            Reply::ArtifactUpdate(u) => Some(u),
            _ => None,
        })
        .unwrap();
    assert_eq!(last_update.last_chunk, Some(true));
    assert_eq!(state_of(events.last().unwrap()), Some(TaskState::Completed));
    writer.shutdown().await;
}

mesh_testkit::both_brokers!(hostile_names_are_refused_and_hostile_task_ids_are_mapped);
async fn hostile_names_are_refused_and_hostile_task_ids_are_mapped(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    for bad in ["a/b", "+", "#", "$sys", "with space", "dot.ted", ""] {
        let result = mesh_example_agents::echo::agent()
            .card(mesh_example_agents::echo::agent().agent_card().clone())
            .config(mesh.config());
        let renamed = Agent::new(
            bad,
            handler_fn(|_c: TaskContext| async { Ok(Outcome::completed()) }),
        )
        .config(mesh.config());
        drop(result);
        let error = renamed.start(mesh.broker.bus_config()).await.err();
        assert!(
            matches!(error, Some(AgentError::Topic(_))),
            "{bad:?}: {error:?}"
        );
    }
    let echo = mesh.run(mesh_example_agents::echo::agent()).await;
    let mut message = user("odd id");
    message.task_id = None;
    let stream = mesh
        .requester
        .send(
            "echo",
            SendMessageRequest {
                message,
                configuration: None,
                metadata: None,
                tenant: None,
            },
            mesh_core::requester::SendOptions {
                method: Method::SendMessage,
                task_id: "a/b/#/+".into(),
                snapshot: None,
                timeout: WAIT,
                principal: None,
                depth: 0,
                traceparent: None,
                keeps_history: false,
                stream_after_progress: false,
            },
        )
        .await
        .unwrap();
    let Reply::Task(task) = replies(collect(stream).await).pop().unwrap() else {
        panic!("a task")
    };
    assert_eq!(
        task.id, "a/b/#/+",
        "the id is mapped on the topic, never changed"
    );
    // The requester cannot widen a subscription with an agent name either.
    let refused = mesh.send_message_err("ec/ho").await;
    assert!(refused, "an unsafe agent name is refused before publishing");
    echo.shutdown().await;
}

mesh_testkit::both_brokers!(a_requester_that_keeps_the_history_is_sent_what_the_turn_added);
async fn a_requester_that_keeps_the_history_is_sent_what_the_turn_added(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    // A handler that holds its snapshot while its task changes (as echo does), and checks
    // that the snapshot stays the task as the turn began.
    let keeper = mesh
        .run(Agent::new(
            "keeper",
            handler_fn(|ctx: TaskContext| async move {
                ctx.working("thinking").await?;
                ctx.text_artifact("notes", "x").await?;
                match ctx.task().history.as_deref() {
                    Some([message]) if message.parts[0].as_text() == Some("question") => {
                        Ok(Outcome::completed())
                    }
                    other => Err(format!("the snapshot changed: {other:?}").into()),
                }
            }),
        ))
        .await;
    let stream = mesh
        .requester
        .send(
            "keeper",
            SendMessageRequest {
                message: user("question"),
                configuration: None,
                metadata: None,
                tenant: None,
            },
            mesh_core::requester::SendOptions {
                method: Method::SendMessage,
                task_id: "kept".into(),
                snapshot: None,
                timeout: WAIT,
                principal: None,
                depth: 0,
                traceparent: None,
                keeps_history: true,
                stream_after_progress: false,
            },
        )
        .await
        .unwrap();
    let mut last = collect(stream).await.pop().expect("an answer");
    assert_eq!(
        last.meta.history_from,
        Some(1),
        "the requester keeps the question"
    );
    let Ok(Reply::Task(task)) = last.reply.as_mut() else {
        panic!("a task: {:?}", last.reply)
    };
    assert_eq!(task.status.state, TaskState::Completed, "{task:?}");
    let added: Vec<Option<&str>> = task
        .history
        .iter()
        .flatten()
        .map(|m| m.parts[0].as_text())
        .collect();
    assert_eq!(
        added,
        [Some("thinking")],
        "what the turn added, and only that"
    );
    assert_eq!(task.artifacts.as_ref().map(Vec::len), Some(1));
    keeper.shutdown().await;
}

trait SendErr {
    async fn send_message_err(&self, agent: &str) -> bool;
}

impl SendErr for BusMesh {
    async fn send_message_err(&self, agent: &str) -> bool {
        self.requester
            .send(
                agent,
                SendMessageRequest {
                    message: user("x"),
                    configuration: None,
                    metadata: None,
                    tenant: None,
                },
                mesh_core::requester::SendOptions {
                    method: Method::SendMessage,
                    task_id: "t".into(),
                    snapshot: None,
                    timeout: WAIT,
                    principal: None,
                    depth: 0,
                    traceparent: None,
                    keeps_history: false,
                    stream_after_progress: false,
                },
            )
            .await
            .is_err()
    }
}

#[allow(dead_code)]
fn _task_is_used(_: Task) {}

// ---- Bounds: what a hostile or oversized request or event does (one request fails, the
// ---- instance and the requester carry on).

/// A reply topic in `agent`'s name for task `task`, of a requester no test's requester is
/// (gateway `probe`), and a subscription to it.
async fn probe_replies(
    mesh: &BusMesh,
    agent: &str,
    task: &str,
) -> (String, mesh_core::bus::Subscription) {
    let topic = mesh
        .topics
        .gateway_response("probe", "i1", agent, task)
        .unwrap();
    let replies = mesh.bus.subscribe(&topic, QoS::AtLeastOnce).await.unwrap();
    (topic, replies)
}

/// Publishes a raw JSON request to `agent`'s request topic.
async fn publish_raw(mesh: &BusMesh, agent: &str, request: &serde_json::Value) {
    mesh.bus
        .publish(
            &mesh.topics.agent_request(agent, "t").unwrap(),
            request.to_string().into_bytes(),
            QoS::AtLeastOnce,
            false,
        )
        .await
        .unwrap();
}

/// A `message/send` with `_mesh` as given.
fn raw_send(id: &str, mesh_meta: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "jsonrpc": "2.0", "id": id, "method": "message/send",
        "params": {
            "message": {"kind": "message", "role": "user", "messageId": id, "parts": [{"kind": "text", "text": "x"}]},
            "metadata": {"_mesh": mesh_meta},
        },
    })
}

mesh_testkit::both_brokers!(
    agents_answer_only_on_response_topics_and_refuse_out_of_range_envelopes
);
async fn agents_answer_only_on_response_topics_and_refuse_out_of_range_envelopes(
    broker: TestBroker,
) {
    let mesh = BusMesh::on(broker).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = mesh.run(counting_agent("counter", runs.clone())).await;
    let other_ns = Topics::new(mesh_testkit::fresh_namespace()).unwrap();
    // Where a hostile replyTo points: another namespace's gateway, a response topic in another
    // agent's name (an ACL lets no account publish there but that agent), a discovery topic,
    // another agent's request topic, the broker's own $SYS tree.
    let hostile = [
        other_ns
            .gateway_response("gw", "i1", "counter", "t")
            .unwrap(),
        mesh.topics
            .gateway_response("gw", "i1", "victim", "t")
            .unwrap(),
        mesh.topics.presence("ghost", "i").unwrap(),
        mesh.topics.agent_request("victim", "t").unwrap(),
        "$SYS/broker/pwned".to_owned(),
    ];
    let mut watchers = Vec::new();
    for topic in &hostile {
        watchers.push(mesh.bus.subscribe(topic, QoS::AtLeastOnce).await.unwrap());
    }
    for (i, topic) in hostile.iter().enumerate() {
        let id = format!("hostile-{i}");
        let meta = serde_json::json!({"replyTo": topic, "requestId": id});
        publish_raw(&mesh, "counter", &raw_send(&id, meta)).await;
    }
    // Out of range: each refused with -32602 on a good reply topic, no handler run.
    let (reply_topic, mut replies) = probe_replies(&mesh, "counter", "r").await;
    let out_of_range = [
        ("depth", serde_json::json!(1_000_000_000_000u64)),
        ("depth", serde_json::json!(-1)),
        ("deadline", serde_json::json!(-5)),
        ("deadline", serde_json::json!(1000)),
    ];
    for (i, (field, value)) in out_of_range.iter().enumerate() {
        let id = format!("range-{i}");
        let mut meta = serde_json::json!({"replyTo": reply_topic, "requestId": id});
        meta[*field] = value.clone();
        publish_raw(&mesh, "counter", &raw_send(&id, meta)).await;
    }
    let mut refused = Vec::new();
    while refused.len() < out_of_range.len() {
        let answer = tokio::time::timeout(WAIT, replies.recv())
            .await
            .expect("an answer in time")
            .unwrap();
        let (id, reply) = codec::decode_reply(&answer.payload, Dialect::V0_3).unwrap();
        let error = reply.expect_err("refused");
        assert_eq!(error.code(), -32602, "{id}: {error}");
        refused.push((id.to_string(), error.message));
    }
    refused.sort();
    assert!(
        refused[0].1.contains("depth") && refused[3].1.contains("deadline"),
        "{refused:?}"
    );
    // A good request is served; nothing reached a hostile topic meanwhile.
    let (_, stream) = mesh.send("counter", "fine", Method::SendMessage).await;
    let last = collect(stream).await.pop().unwrap().reply.unwrap();
    assert_eq!(state_of(&last), Some(TaskState::Completed));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the good request ran");
    for watcher in &mut watchers {
        assert!(watcher.try_recv().is_none(), "{}", watcher.filter());
    }
    counter.shutdown().await;
}

/// The next event on a raw subscription to a reply topic: its `_mesh.seq`, and the event.
async fn next_event(replies: &mut mesh_core::bus::Subscription) -> (u64, Reply) {
    let message = tokio::time::timeout(WAIT, replies.recv())
        .await
        .expect("an event in time")
        .unwrap();
    let (_, reply) = codec::decode_reply(&message.payload, Dialect::V0_3).unwrap();
    let mut reply = reply.expect("no error");
    let seq = strip_reply_meta(&mut reply).seq.expect("a position");
    (seq, reply)
}

mesh_testkit::both_brokers!(a_send_gone_on_as_a_stream_waits_for_credit_past_its_window);
async fn a_send_gone_on_as_a_stream_waits_for_credit_past_its_window(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    // Six chunks once the gate opens.
    let gate = Arc::new(tokio::sync::Notify::new());
    const CHUNKS: [&str; 6] = ["0", "1", "2", "3", "4", "5"];
    let chunker = mesh
        .run(gated_writer("chunker", gate.clone(), &[], &CHUNKS))
        .await;
    let (reply_topic, mut replies) = probe_replies(&mesh, "chunker", "w1").await;
    // A requester of its own: a window of 3 events, credited by hand.
    let meta = serde_json::json!({
        "replyTo": reply_topic, "requestId": "w1", "taskId": "w1",
        "streamAfterProgress": true, "window": 3,
    });
    let publish = |topic: String, payload: Vec<u8>| {
        let bus = mesh.bus.clone();
        async move {
            bus.publish(&topic, payload, QoS::AtLeastOnce, false)
                .await
                .unwrap()
        }
    };
    let request = raw_send("w1", meta).to_string().into_bytes();
    publish(mesh.topics.agent_request("chunker", "w1").unwrap(), request).await;
    let credit = |seq| {
        let topic = mesh.topics.agent_cancel("chunker", "w1").unwrap();
        publish(topic, mesh_core::flow::encode_credit("w1", seq))
    };
    let (seq, progress) = next_event(&mut replies).await;
    assert!(
        matches!(progress, Reply::Task(_)) && seq == 0,
        "{seq}: {progress:?}"
    );
    gate.notify_one();
    // Positions 1 and 2 are inside the window; 3 waits for the requester's credit.
    for expected in 1..=2 {
        let (seq, event) = next_event(&mut replies).await;
        assert!(matches!(event, Reply::ArtifactUpdate(_)), "{event:?}");
        assert_eq!(seq, expected);
    }
    let early = tokio::time::timeout(Duration::from_millis(300), replies.recv()).await;
    assert!(early.is_err(), "an event past the window before any credit");
    credit(3).await;
    for expected in 3..=5 {
        assert_eq!(next_event(&mut replies).await.0, expected);
    }
    credit(100).await;
    assert_eq!(next_event(&mut replies).await.0, 6);
    let (seq, end) = next_event(&mut replies).await;
    assert_eq!(seq, 7);
    assert_eq!(state_of(&end), Some(TaskState::Completed), "{end:?}");
    chunker.shutdown().await;
}

// Flow control across streams: a streaming request asks for a window of 16 events
// (`BASE_WINDOW`), so a requester whose readers stopped is sent 16 events a stream, not the
// widest window each; readers that go on get every chunk, and what their windows borrowed
// from the requester's shared budget is back once the streams end.
mesh_testkit::both_brokers!(streams_ask_for_the_base_window_and_give_back_what_they_borrowed);
async fn streams_ask_for_the_base_window_and_give_back_what_they_borrowed(broker: TestBroker) {
    use mesh_core::flow::BASE_WINDOW;
    const STREAMS: usize = 3;
    const CHUNKS: usize = 2_000;
    let mesh = BusMesh::on(broker).await;
    let writer = mesh.run(mesh_example_agents::writer::agent()).await;
    // Every reply to the requester, as the broker delivers them.
    let filter = mesh.topics.gateway_response_filter("gw", "i1").unwrap();
    let mut published = mesh.bus.subscribe(&filter, QoS::AtLeastOnce).await.unwrap();
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let text = format!("flow chunks: {CHUNKS}");
        streams.push(
            mesh.send("writer", &text, Method::SendStreamingMessage)
                .await
                .1,
        );
    }
    // No reader has taken anything: each agent sends its window and waits for credit.
    let mut positions = std::collections::HashSet::new();
    while positions.len() < STREAMS * BASE_WINDOW as usize {
        let message = tokio::time::timeout(WAIT, published.recv())
            .await
            .expect("the windows' events in time")
            .unwrap();
        let (_, reply) = codec::decode_reply(&message.payload, Dialect::V0_3).unwrap();
        let seq = strip_reply_meta(&mut reply.unwrap())
            .seq
            .expect("a position");
        assert!(seq < u64::from(BASE_WINDOW), "{seq} is past the window");
        positions.insert((message.topic.clone(), seq));
    }
    let more = tokio::time::timeout(Duration::from_millis(300), published.recv()).await;
    assert!(more.is_err(), "an event past a window before any credit");
    // Unread, it would hold up the bus the requester shares.
    drop(published);
    // The readers go on: every chunk arrives, in order.
    let reads = streams.into_iter().map(|stream| async move {
        let deliveries = collect(stream).await;
        let chunks = deliveries
            .iter()
            .filter(|d| matches!(d.reply, Ok(Reply::ArtifactUpdate(_))))
            .count();
        let end = deliveries
            .last()
            .map(|d| format!("{:?} {:?}", d.ended, d.reply.as_ref().err()));
        let last = deliveries
            .last()
            .and_then(|d| d.reply.as_ref().ok().and_then(state_of));
        (chunks, last, end)
    });
    for (chunks, last, end) in futures_util::future::join_all(reads).await {
        assert_eq!(chunks, CHUNKS, "{end:?}");
        assert_eq!(last, Some(TaskState::Completed));
    }
    assert_eq!(mesh.requester.flow_window_lent(), 0);
    writer.shutdown().await;
}

mesh_testkit::both_brokers!(
    an_answer_too_large_for_the_bus_fails_its_task_and_the_instance_serves_on
);
async fn an_answer_too_large_for_the_bus_fails_its_task_and_the_instance_serves_on(
    broker: TestBroker,
) {
    let mesh = BusMesh::on(broker).await;
    // The agent's bus carries at most 64 KiB: a 40 KB echo fits as a request, and its answer
    // (the history and the artifact, 80 KB) does not.
    let mut small = mesh.broker.bus_config();
    small.max_packet_size = 64 * 1024;
    let big_artifact = Agent::new(
        "big",
        handler_fn(|ctx: TaskContext| async move {
            ctx.artifact(new_artifact(None, vec![Part::text("y".repeat(100_000))]))
                .await?;
            Ok(Outcome::completed())
        }),
    );
    let mut agents = Vec::new();
    for agent in [mesh_example_agents::echo::agent(), big_artifact] {
        let running = agent
            .config(mesh.config())
            .start(small.clone())
            .await
            .unwrap();
        assert!(mesh.registry.wait_online(running.name(), WAIT).await);
        agents.push(running);
    }
    let text = "x".repeat(40_000);
    let (_, stream) = mesh.send("echo", &text, Method::SendMessage).await;
    let last = collect(stream).await.pop().unwrap().reply.unwrap();
    let Reply::Task(task) = last else {
        panic!("a task: {last:?}")
    };
    assert_eq!(task.status.state, TaskState::Failed);
    let said = serde_json::to_string(&task.status.message).unwrap();
    assert!(said.contains("larger than the bus carries"), "{said}");
    // A streamed artifact too large: the stream ends with a failed status that says so.
    let (_, stream) = mesh.send("big", "go", Method::SendStreamingMessage).await;
    let last = collect(stream).await.pop().unwrap().reply.unwrap();
    let Reply::StatusUpdate(event) = last else {
        panic!("a final status: {last:?}")
    };
    assert_eq!(event.status.state, TaskState::Failed);
    // A request larger than the agent takes is dropped by its bus, and answered all the same.
    let (_, stream) = mesh
        .send("echo", &"z".repeat(100_000), Method::SendMessage)
        .await;
    let last = collect(stream).await.pop().unwrap().reply;
    let error = last.expect_err("refused");
    assert_eq!(error.code(), -32600, "{error}");
    assert!(
        error.message.contains("larger than agent echo takes"),
        "{error}"
    );
    // Both instances serve on.
    let (_, stream) = mesh.send("echo", "small", Method::SendMessage).await;
    let last = collect(stream).await.pop().unwrap().reply.unwrap();
    assert_eq!(state_of(&last), Some(TaskState::Completed));
    assert!(mesh.registry.is_online("big"));
    for agent in agents {
        agent.shutdown().await;
    }
}

mesh_testkit::both_brokers!(forged_events_are_dropped_and_never_hide_the_agents_own);
async fn forged_events_are_dropped_and_never_hide_the_agents_own(broker: TestBroker) {
    let mesh = BusMesh::on(broker).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let opened = gate.clone();
    let slow = mesh
        .run(Agent::new(
            "slow",
            handler_fn(move |ctx: TaskContext| {
                let gate = opened.clone();
                async move {
                    ctx.working("waiting").await?;
                    gate.notified().await;
                    for i in 0..5 {
                        ctx.artifact(new_artifact(
                            Some("a".into()),
                            vec![Part::text(format!("{i}"))],
                        ))
                        .await?;
                    }
                    Ok(Outcome::completed())
                }
            }),
        ))
        .await;
    // Whoever can read the reply topic learns the request's id, the instance and the position.
    let mut spy = mesh
        .bus
        .subscribe(
            &mesh.topics.gateway_response_filter("gw", "i1").unwrap(),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    let (_, mut stream) = mesh.send("slow", "go", Method::SendStreamingMessage).await;
    for _ in 0..2 {
        stream.next().await.unwrap().reply.unwrap(); // task, working with a message
    }
    let seen = tokio::time::timeout(WAIT, spy.recv())
        .await
        .unwrap()
        .unwrap();
    let mut forged: serde_json::Value = serde_json::from_slice(&seen.payload).unwrap();
    let instance = forged["result"]["metadata"]["_mesh"]["instance"].clone();
    assert!(instance.is_string(), "{forged}");
    let final_completed = |instance: &serde_json::Value, seq: u64| {
        serde_json::json!({"kind": "status-update", "taskId": forged["result"]["id"], "contextId": forged["result"]["contextId"],
            "final": true, "status": {"state": "completed"},
            "metadata": {"_mesh": {"instance": instance, "seq": seq}}})
    };
    let from_elsewhere = final_completed(&serde_json::json!("another-instance"), 3);
    let far_ahead = final_completed(&instance, 1 << 62);
    for result in [from_elsewhere, far_ahead] {
        forged["result"] = result;
        mesh.bus
            .publish(
                &seen.topic,
                forged.to_string().into_bytes(),
                QoS::AtLeastOnce,
                false,
            )
            .await
            .unwrap();
    }
    // A marker through the same topic: once the spy sees it, the requester has the forgeries.
    let marker = serde_json::json!({"jsonrpc": "2.0", "id": "nobody", "result": {}});
    mesh.bus
        .publish(
            &seen.topic,
            marker.to_string().into_bytes(),
            QoS::AtLeastOnce,
            false,
        )
        .await
        .unwrap();
    while tokio::time::timeout(WAIT, spy.recv())
        .await
        .unwrap()
        .unwrap()
        .payload
        != marker.to_string().as_bytes()
    {}
    gate.notify_one();
    let rest: Vec<Reply> = collect(stream)
        .await
        .into_iter()
        .map(|d| d.reply.unwrap())
        .collect();
    let artifacts = rest
        .iter()
        .filter(|r| matches!(r, Reply::ArtifactUpdate(_)))
        .count();
    assert_eq!(artifacts, 5, "every real event arrives: {rest:?}");
    assert_eq!(state_of(rest.last().unwrap()), Some(TaskState::Completed));
    assert_eq!(mesh.requester.unexpected_events(), 2);
    slow.shutdown().await;
}
