//! The A2A bindings answer alike (A2A 1.0 §5.1): one scenario suite, driven through the
//! official Python SDK (scripts/interop/a2a_sdk_bindings.py) over each binding in
//! [`BINDINGS`], prints a normalised document of what the SDK decoded; the first binding's
//! document must show the behaviour each scenario names, and every other binding's document
//! must equal it. Runs when `MESH_INTEROP_PYTHON` names a Python with a2a-sdk (scripts/test
//! sets it); otherwise it says so and passes.

use crate::support::*;
use serde_json::{Value, json};
use std::time::Duration;

/// The bindings the suite runs through, as the SDK and the cards' `protocolBinding` name
/// them; the first is the reference. A binding the gateway serves is added here, nothing else.
const BINDINGS: &[&str] = &["JSONRPC", "HTTP+JSON", "GRPC"];

/// How long one run of the script may take.
const RUN_LIMIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_binding_answers_the_sdk_scenarios_alike() {
    let Some(python) = std::env::var_os("MESH_INTEROP_PYTHON") else {
        eprintln!(
            "SKIPPED: MESH_INTEROP_PYTHON is unset (scripts/test sets it after installing \
             scripts/interop/requirements.txt into .venv)"
        );
        return;
    };
    let hook = Hook::start(0).await;
    let mut mesh = GatewayMesh::start_with(|c| {
        c.push_notifications = true;
        c.allow_private_webhooks = true;
    })
    .await;
    mesh.run(mesh_example_agents::echo::agent()).await;
    mesh.run(mesh_example_agents::writer::agent()).await;
    mesh.run(mesh_example_agents::flight_booker::agent()).await;
    // Its gate is never opened: its tasks work until they are canceled.
    mesh.run(slow_agent("slow", Gate::default())).await;

    let mut documents = Vec::new();
    for binding in BINDINGS {
        let began = std::time::Instant::now();
        let document = run_suite(&python, &mesh.base, binding, &hook.url).await;
        eprintln!(
            "{binding}: the suite ran in {:.1} s",
            began.elapsed().as_secs_f64()
        );
        documents.push((*binding, document));
    }
    let Some(((reference_binding, reference), others)) = documents.split_first() else {
        panic!("BINDINGS names at least one binding");
    };
    println!(
        "{reference_binding}:\n{}",
        serde_json::to_string_pretty(reference).unwrap_or_default()
    );
    // Both kinds of failure are gathered before the one assertion, so that a behaviour every
    // binding gets wrong does not hide a binding that answers otherwise.
    let mut failures = Vec::new();
    let wrong = expected_behaviour(reference);
    if !wrong.is_empty() {
        failures.push(format!(
            "{reference_binding} does not behave as the scenarios say:\n  {}",
            wrong.join("\n  ")
        ));
    }
    for (binding, document) in others {
        let mut differences = Vec::new();
        diff("", reference, document, &mut differences);
        if !differences.is_empty() {
            failures.push(format!(
                "{binding} answers otherwise than {reference_binding} (pointer: {reference_binding} ≠ {binding}):\n  {}",
                differences.join("\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Runs the script over `binding` (bounded) and parses the document it prints.
async fn run_suite(python: &std::ffi::OsStr, base: &str, binding: &str, webhook: &str) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/interop/a2a_sdk_bindings.py"
    );
    let mut child = tokio::process::Command::new(python);
    child
        .args([script, base, binding, webhook])
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_LIMIT, child.output())
        .await
        .unwrap_or_else(|_| panic!("the {binding} suite finishes within {RUN_LIMIT:?}"))
        .expect("the bindings script runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stderr}");
    assert!(
        output.status.success(),
        "the {binding} suite failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("the {binding} suite prints one JSON document ({e}):\n{stdout}"))
}

/// The behaviour each scenario names, checked on one document: every way it falls short.
fn expected_behaviour(doc: &Value) -> Vec<String> {
    let mut checks = Checks {
        doc,
        failures: Vec::new(),
    };
    let error = |class: &str, reason: &str| json!({"error": class, "a2a": reason});

    // a. A blocking send to echo completes with the message echoed; get reads the same task.
    checks.expect("/send/sent/state", json!("completed"));
    checks.expect(
        "/send/sent/artifacts/0/parts",
        json!([{"text": "hello over every binding"}]),
    );
    checks.expect("/send/got/state", json!("completed"));
    checks.expect("/send/sameTask", json!(true));

    // b. A stream opens with the task, says it is working (the handler's own status, with
    // no bare `working` of the runtime before it), carries five chunks of one artifact (the
    // first one not appended, the last one marked last) and ends with the completed status
    // (§3.1.2); the chunks make the whole text.
    let status = |state: &str, text: Option<&str>| {
        json!({"statusUpdate": state,
               "message": text.map(|t| json!({"role": "ROLE_AGENT", "parts": [{"text": t}]}))})
    };
    let paragraph = |i: usize| format!("[{i}] On bindings: paragraph {} of the draft.\n", i + 1);
    let mut stream = vec![
        json!({"task": "submitted"}),
        status("working", Some("writing 5 paragraphs about \"bindings\"")),
    ];
    stream.extend((0..5).map(|i| {
        json!({"artifactUpdate": "draft.txt", "parts": [{"text": paragraph(i)}],
               "append": i > 0, "lastChunk": i == 4})
    }));
    stream.push(status("completed", Some("wrote 5 paragraphs")));
    checks.expect("/stream/events", Value::Array(stream));
    checks.expect(
        "/stream/artifacts",
        json!([(0..5).map(paragraph).collect::<String>()]),
    );
    checks.expect("/stream/finalState", json!("completed"));

    // c. Multi-turn: input-required, then the follow-up completes the same task.
    checks.expect("/multi_turn/first/state", json!("input-required"));
    checks.expect("/multi_turn/followUp/state", json!("completed"));
    checks.expect("/multi_turn/sameTask", json!(true));
    checks.expect("/multi_turn/sameContext", json!(true));
    checks.expect(
        "/multi_turn/followUp/artifacts/0/name",
        json!("FlightItinerary.json"),
    );
    checks.expect(
        "/multi_turn/followUp/artifacts/0/parts/0/data",
        json!({"confirmationId": "<id>", "from": "SFO", "to": "JFK",
               "departure": "2026-12-01T18:00:00Z"}),
    );

    // d. Cancel: canceled; canceled again: not cancelable (§3.1.5).
    checks.expect("/cancel/sentActive", json!(true));
    checks.expect("/cancel/subscribedUntilWorking", json!({"ok": "working"}));
    checks.expect("/cancel/cancel/ok/state", json!("canceled"));
    checks.expect(
        "/cancel/cancelAgain",
        error("TaskNotCancelableError", "TASK_NOT_CANCELABLE"),
    );
    checks.expect("/cancel/getAfter", json!("canceled"));

    // e. historyLength 1 keeps the last message (§3.2.4); without it, all of them.
    let history = |p: &str| doc.pointer(p).and_then(Value::as_array).map_or(0, Vec::len);
    let trimmed = history("/get/historyLength1/history");
    let full = history("/get/unlimited/history");
    if trimmed != 1 {
        checks.fail(format!(
            "/get/historyLength1/history: one message, got {trimmed}"
        ));
    }
    if full < 2 {
        checks.fail(format!(
            "/get/unlimited/history: both user messages at least, got {full}"
        ));
    }
    checks.expect("/get/historyLength1/state", json!("completed"));
    checks.expect("/get/unlimited/state", json!("completed"));

    // f. List by context, two per page: 2 tasks and a token, then 1 and none; most recently
    // updated first; no artifacts unless asked for (§3.1.4).
    checks.expect("/list/sameContext", json!(true));
    checks.expect("/list/otherContext", json!(true));
    checks.expect("/list/eachSentTaskOnce", json!(true));
    checks.expect(
        "/list/page1",
        json!({"tasks": 2, "states": ["completed", "completed"], "sentOrder": [2, 1],
               "withArtifacts": 0, "hasNextToken": true, "pageSize": 2, "totalSize": 3}),
    );
    checks.expect(
        "/list/page2",
        json!({"tasks": 1, "states": ["completed"], "sentOrder": [0],
               "withArtifacts": 0, "hasNextToken": false, "pageSize": 2, "totalSize": 3}),
    );

    // g. Subscribe to an input-required task: the task, then every event of the follow-up
    // that another client streams (its opening task as a status update), the stream ending
    // at completed (§3.1.6); subscribe to a completed task: unsupported operation.
    let itinerary = json!({"artifactUpdate": "FlightItinerary.json",
        "parts": [{"data": {"confirmationId": "<id>", "from": "SFO", "to": "JFK",
                            "departure": "2026-12-01T18:00:00Z"},
                   "mediaType": "application/json"}],
        "append": false, "lastChunk": true});
    let steps = [
        status("working", Some("searching flights SFO → JFK on 2026-12-01")),
        itinerary,
        status(
            "completed",
            Some(
                "Booked: SFO to JFK on 2026-12-01, confirmation <id>. Details are in the artifact.",
            ),
        ),
    ];
    checks.expect("/subscribe/waiting", json!("input-required"));
    let mut follow_up = vec![json!({"task": "submitted"})];
    follow_up.extend(steps.iter().cloned());
    checks.expect("/subscribe/followUpEvents", Value::Array(follow_up));
    let mut subscribed = vec![json!({"task": "input-required"}), status("submitted", None)];
    subscribed.extend(steps.iter().cloned());
    checks.expect("/subscribe/events", Value::Array(subscribed));
    checks.expect("/subscribe/end", json!({"ok": "the stream ended"}));
    checks.expect(
        "/subscribe/subscribeCompleted",
        error("UnsupportedOperationError", "UNSUPPORTED_OPERATION"),
    );

    // h. Push-notification config CRUD; deleting twice is no error (§3.1.10).
    let config = json!({"hasId": true, "taskId": true, "url": true, "token": "tok-bindings"});
    checks.expect("/push/create/ok", config.clone());
    checks.expect("/push/get/ok", config.clone());
    checks.expect("/push/list/ok", json!([config]));
    checks.expect("/push/delete", json!({"ok": null}));
    checks.expect("/push/deleteAgain", json!({"ok": null}));
    checks.expect(
        "/push/getDeleted",
        error("TaskNotFoundError", "TASK_NOT_FOUND"),
    );
    checks.expect("/push/listAfter/ok", json!(0));

    // i. Errors a client can provoke.
    let not_found = error("TaskNotFoundError", "TASK_NOT_FOUND");
    checks.expect("/errors/getUnknown", not_found.clone());
    checks.expect("/errors/cancelUnknown", not_found.clone());
    checks.expect("/errors/sendUnknownTask", not_found.clone());
    checks.expect("/errors/subscribeUnknown", not_found);
    checks.expect(
        "/errors/listPageSize1000",
        error("InvalidParamsError", "INVALID_PARAMS"),
    );
    // The card claims no extended card: the SDK answers with the public card, and a client
    // that asks anyway is told the operation is unsupported (§3.3.4).
    checks.expect("/errors/cardClaimsExtended", json!(false));
    checks.expect("/errors/extendedCardUnclaimed", json!({"ok": "echo"}));
    checks.expect(
        "/errors/extendedCardAsked",
        error("UnsupportedOperationError", "UNSUPPORTED_OPERATION"),
    );
    checks.failures
}

/// The checks made on one document, and those that failed.
struct Checks<'a> {
    doc: &'a Value,
    failures: Vec<String>,
}

impl Checks<'_> {
    /// The value at `pointer` is `wanted`.
    fn expect(&mut self, pointer: &str, wanted: Value) {
        let got = self.doc.pointer(pointer).cloned().unwrap_or(Value::Null);
        if got != wanted {
            self.fail(format!("{pointer}: wanted {wanted}, got {got}"));
        }
    }

    fn fail(&mut self, failure: String) {
        self.failures.push(failure);
    }
}

/// Every place where `b` differs from `a`, as `pointer: a-value ≠ b-value`.
fn diff(at: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let here = format!("{at}/{key}");
                match (x.get(key), y.get(key)) {
                    (Some(p), Some(q)) => diff(&here, p, q, out),
                    (p, q) => out.push(format!("{here}: {} ≠ {}", shown(p), shown(q))),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(&format!("{at}/{i}"), p, q, out);
            }
        }
        _ if a != b => out.push(format!("{at}: {a} ≠ {b}")),
        _ => {}
    }
}

fn shown(value: Option<&Value>) -> String {
    value.map_or_else(|| "(absent)".to_owned(), Value::to_string)
}

#[test]
fn a_difference_is_named_by_its_pointer() {
    let a = json!({"x": {"state": "completed", "events": [1, 2]}, "same": true, "gone": 1});
    let b = json!({"x": {"state": "failed", "events": [1, 2, 3]}, "same": true, "new": 2});
    let mut out = Vec::new();
    diff("", &a, &b, &mut out);
    assert_eq!(
        out,
        [
            "/gone: 1 ≠ (absent)",
            "/new: (absent) ≠ 2",
            "/x/events: [1,2] ≠ [1,2,3]",
            "/x/state: \"completed\" ≠ \"failed\"",
        ]
    );
    diff("", &a, &a, &mut out);
    assert_eq!(out.len(), 4, "equal documents add nothing");
}
