//! The store on real SQLite files (a fresh directory per test).
use super::*;
use crate::store::MemoryStore;
use crate::store::memory::tests::{chunk, status, task};
use mesh_core::dialect::Dialect;
use rusqlite::Connection;
use std::time::{Instant, UNIX_EPOCH};

fn record(id: &str, state: TaskState) -> TaskRecord {
    let mut record = task(id, "ctx", state);
    record.dialect = Dialect::V1_0;
    record
}

fn limits(max_tasks: usize) -> StoreLimits {
    StoreLimits {
        max_age: Duration::from_secs(60),
        max_tasks,
        ..StoreLimits::default()
    }
}

/// Inserts task `id`, working, and appends `n` artifact chunks to it (`"0 "`, `"1 "`, …).
fn working_with_chunks(store: &SqliteStore, id: &str, n: usize) {
    store.insert(record(id, TaskState::Working)).unwrap();
    for i in 0..n {
        store
            .append(id, chunk(id, &format!("{i} ")), Origin::default())
            .unwrap();
    }
}

/// How many rows of the events table task `id` has.
fn logged_events(conn: &Connection, id: &str) -> i64 {
    conn.query_row(
        "SELECT count(*) FROM task_events WHERE task_id = ?1",
        [id],
        |r| r.get(0),
    )
    .unwrap()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mesh-sqlite-{name}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn survives_a_reopen_with_owner_and_push_configs() {
    let dir = temp_dir("reopen");
    {
        let store = SqliteStore::open(&dir, limits(100)).unwrap();
        let mut r = record("t1", TaskState::Working);
        r.owner = Some("alice".into());
        r.push_configs
            .push(mesh_core::model::TaskPushNotificationConfig {
                url: "http://example.com/hook".into(),
                id: Some("c1".into()),
                task_id: "t1".into(),
                token: Some("tok".into()),
                authentication: None,
                tenant: None,
            });
        store.insert(r).unwrap();
        store.insert(record("t2", TaskState::Working)).unwrap();
        store.update("t1", &mut |r| r.task.status.state = TaskState::Completed);
        store.remove("t2");
        assert!(store.flush(Duration::from_secs(5)));
        assert_eq!(store.pending_writes(), 0);
    }
    let store = SqliteStore::open(&dir, limits(100)).unwrap();
    assert_eq!(store.len(), 1);
    assert!(store.get("t1").is_none(), "nothing is loaded at start");
    let t1 = store.read("t1").unwrap().expect("t1 is in the database");
    assert_eq!(t1.task.status.state, TaskState::Completed);
    assert_eq!(t1.owner.as_deref(), Some("alice"));
    assert_eq!(t1.push_configs[0].token.as_deref(), Some("tok"));
    assert_eq!(t1.dialect, Dialect::V1_0);
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}

fn delivery(id: u64, task: &str, attempts: u32) -> Arc<PendingDelivery> {
    Arc::new(PendingDelivery {
        id,
        task_id: task.into(),
        config: mesh_core::model::TaskPushNotificationConfig {
            url: "https://example.com/hook".into(),
            id: Some("c1".into()),
            task_id: task.into(),
            token: Some("tok".into()),
            authentication: None,
            tenant: None,
        },
        body: bytes::Bytes::from(format!("{{\"id\":\"{task}\",\"n\":{id}}}")),
        attempts,
        next_attempt: UNIX_EPOCH + Duration::from_secs(2_000_000_000),
    })
}

#[test]
fn pending_deliveries_survive_a_reopen_until_forgotten() {
    let dir = temp_dir("deliveries");
    {
        let store = SqliteStore::open(&dir, limits(100)).unwrap();
        assert!(store.take_pending_deliveries().is_empty());
        for id in [3, 1, 2, 4] {
            store.keep_delivery(delivery(id, "t", 0));
        }
        assert!(store.flush(Duration::from_secs(5)));
        // A retry updates the count; a success forgets; a delivery kept and forgotten
        // before the writer saw it never reaches the disk.
        store.keep_delivery(delivery(2, "t", 3));
        store.forget_delivery(3);
        store.keep_delivery(delivery(5, "u", 0));
        store.forget_delivery(5);
        assert!(store.flush(Duration::from_secs(5)));
        assert_eq!(store.pending_writes(), 0);
    }
    let store = SqliteStore::open(&dir, limits(100)).unwrap();
    let pending = store.take_pending_deliveries();
    let seen: Vec<(u64, u32)> = pending.iter().map(|d| (d.id, d.attempts)).collect();
    assert_eq!(seen, [(1, 0), (2, 3), (4, 0)], "in id order");
    let first = &pending[0];
    assert_eq!(first.task_id, "t");
    assert_eq!(first.config.token.as_deref(), Some("tok"));
    assert_eq!(&first.body[..], &delivery(1, "t", 0).body[..]);
    assert_eq!(first.next_attempt, delivery(1, "t", 0).next_attempt);
    assert!(
        store.take_pending_deliveries().is_empty(),
        "handed out once"
    );
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_second_store_on_the_same_directory_is_refused() {
    let dir = temp_dir("exclusive");
    let first = SqliteStore::open(&dir, limits(100)).unwrap();
    first.insert(record("t", TaskState::Working)).unwrap();
    assert!(first.flush(Duration::from_secs(5)));
    let second = SqliteStore::open(&dir, limits(100));
    let Err(StoreError::Storage(message)) = second else {
        panic!("a second store opened");
    };
    assert!(message.contains("another gateway"), "{message}");
    drop(first);
    assert!(SqliteStore::open(&dir, limits(100)).is_ok());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn retention_by_count_applies_on_reopen() {
    let dir = temp_dir("retention");
    {
        let store = SqliteStore::open(&dir, limits(100)).unwrap();
        for i in 0..10 {
            let mut r = record(&format!("t{i}"), TaskState::Completed);
            r.created = UNIX_EPOCH + Duration::from_secs(1_000 + i);
            // Within their age (a minute), the oldest first.
            r.updated = std::time::SystemTime::now() - Duration::from_secs(10 - i);
            store.insert(r).unwrap();
        }
        store.insert(record("running", TaskState::Working)).unwrap();
        assert!(store.flush(Duration::from_secs(5)));
    }
    // The oldest finished tasks go; a running one never does.
    let store = SqliteStore::open(&dir, limits(3)).unwrap();
    assert_eq!(store.len(), 3);
    for (id, kept) in [("t9", true), ("t8", true), ("running", true), ("t7", false)] {
        assert_eq!(store.read(id).unwrap().is_some(), kept, "{id}");
    }
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn events_are_logged_and_applied_after_the_snapshot_on_reopen() {
    let dir = temp_dir("events");
    let n = 20_000u64;
    {
        let store = SqliteStore::open(&dir, limits(100)).unwrap();
        store.insert(record("t", TaskState::Working)).unwrap();
        store.insert(record("done", TaskState::Working)).unwrap();
        store
            .append(
                "done",
                status("done", TaskState::Completed),
                Origin::default(),
            )
            .unwrap();
        for i in 0..n {
            let text = format!(
                "[{i}] a paragraph of about eighty bytes, as the writer agent streams them.\n"
            );
            store
                .append("t", chunk("t", &text), Origin::default())
                .unwrap();
        }
        assert!(store.flush(Duration::from_secs(30)));
        let stats = store.write_stats();
        assert_eq!(stats.events, n + 1, "{stats:?}");
        // Snapshots at the insert, at the end of "done", then at doubling sizes: few, and
        // all of them together within a small multiple of the events' bytes.
        assert!(stats.snapshots <= 12, "{stats:?}");
        assert!(stats.snapshot_bytes <= 3 * stats.event_bytes, "{stats:?}");
        assert_eq!(store.events_after("t", n - 2, 10).unwrap().len(), 2);
        // Events committed after the last snapshot are applied at the next start.
    }
    let store = SqliteStore::open(&dir, limits(100)).unwrap();
    let t = store.read("t").unwrap().unwrap();
    assert_eq!(t.seq, n);
    assert_eq!(
        t.task.artifacts.as_ref().unwrap()[0].parts.len(),
        n as usize
    );
    // It was running: the next gateway gets it to follow (or fail), once; the finished
    // one is not.
    assert_eq!(t.task.status.state, TaskState::Working);
    let claim = || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(store.claim_orphans(Duration::ZERO))
            .unwrap()
    };
    let running = claim();
    let ids: Vec<&str> = running.iter().map(|o| o.record.task.id.as_str()).collect();
    assert_eq!(ids, ["t"]);
    assert_eq!(running[0].record.seq, n, "with every event logged applied");
    assert!(claim().is_empty(), "handed out once");
    assert_eq!(
        store.read("done").unwrap().unwrap().task.status.state,
        TaskState::Completed
    );
    let first = store.events_after("t", 0, 3).unwrap();
    let seqs: Vec<u64> = first.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert!(matches!(
        first[0].reply().unwrap(),
        Reply::ArtifactUpdate(_)
    ));
    assert!(store.events_after("t", n, 3).unwrap().is_empty());
    assert!(matches!(
        store.events_after("nope", 0, 3),
        Err(StoreError::TaskNotFound(_))
    ));
    // A removed task takes its events along.
    store.remove("t");
    assert!(store.flush(Duration::from_secs(5)));
    drop(store);
    let conn = Connection::open(dir.join(DB_FILE)).unwrap();
    assert_eq!(logged_events(&conn, "t"), 0);
    drop(conn);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A database whose events table is the earlier versions' (keyed by task and sequence,
/// `WITHOUT ROWID`) is rewritten at start as this version's (in the order events come, found
/// through an index), with every event kept and still one row per task and sequence.
#[test]
fn an_events_table_of_an_earlier_version_is_rewritten_with_its_events() {
    let dir = temp_dir("upgrade-events");
    {
        let store = SqliteStore::open(&dir, limits(100)).unwrap();
        working_with_chunks(&store, "t", 5);
        assert!(store.flush(Duration::from_secs(5)));
    }
    // The table as the earlier versions made it.
    let conn = Connection::open(dir.join(DB_FILE)).unwrap();
    conn.execute_batch(
        "DROP INDEX task_events_order;
         CREATE TABLE old_events (task_id TEXT NOT NULL, seq INTEGER NOT NULL,
             time INTEGER NOT NULL, event TEXT NOT NULL, position INTEGER,
             PRIMARY KEY (task_id, seq)) WITHOUT ROWID;
         INSERT INTO old_events SELECT task_id, seq, time, event, position FROM task_events;
         DROP TABLE task_events;
         ALTER TABLE old_events RENAME TO task_events;",
    )
    .unwrap();
    drop(conn);

    let store = SqliteStore::open(&dir, limits(100)).unwrap();
    let t = store.read("t").unwrap().unwrap();
    assert_eq!(t.seq, 5);
    assert_eq!(t.task.artifacts.as_ref().unwrap()[0].parts.len(), 5);
    let seqs: Vec<u64> = store
        .events_after("t", 0, 10)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    drop(store);
    let conn = Connection::open(dir.join(DB_FILE)).unwrap();
    let table: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'task_events'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!table.contains("WITHOUT ROWID"), "{table}");
    assert_eq!(logged_events(&conn, "t"), 5);
    // One row per task and sequence, as the primary key kept it.
    let duplicate = conn.execute(
        "INSERT INTO task_events (task_id, seq, time, event) VALUES ('t', 1, 0, '{}')",
        [],
    );
    assert!(duplicate.is_err(), "{duplicate:?}");
    drop(conn);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn queued_events_are_read_with_the_committed_ones() {
    let dir = temp_dir("queued");
    let store = SqliteStore::open(&dir, limits(100)).unwrap();
    working_with_chunks(&store, "t", 50);
    // Whatever the writer has committed so far, the log reads whole and in order.
    let events = store.events_after("t", 10, 1000).unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (11..=50).collect::<Vec<u64>>());
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_append_does_not_copy_the_record() {
    use crate::store::memory::tests::id_address;
    let dir = temp_dir("in-place");
    let store = SqliteStore::open(&dir, limits(100)).unwrap();
    store.insert(record("t", TaskState::Working)).unwrap();
    // The insert's snapshot is written (the writer reads the record for it).
    assert!(store.flush(Duration::from_secs(5)));
    for i in 0..1000 {
        let before = id_address(&store, "t");
        store
            .append("t", chunk("t", &format!("{i}")), Origin::default())
            .unwrap();
        assert_eq!(
            id_address(&store, "t"),
            before,
            "append {i} copied the record"
        );
    }
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn evicted_tasks_leave_the_disk() {
    let dir = temp_dir("evicted");
    {
        let store = SqliteStore::open(&dir, limits(2)).unwrap();
        store.insert(record("a", TaskState::Working)).unwrap();
        store
            .append("a", chunk("a", "x"), Origin::default())
            .unwrap();
        store
            .append("a", status("a", TaskState::Completed), Origin::default())
            .unwrap();
        // Counted finished once written: it makes room for new tasks.
        assert!(store.flush(Duration::from_secs(5)));
        store.insert(record("b", TaskState::InputRequired)).unwrap();
        store.insert(record("c", TaskState::InputRequired)).unwrap();
        // Written, the store is past its bounds: the finished task goes at once.
        assert!(store.flush(Duration::from_secs(5)));
        assert_eq!(store.len(), 2);
        assert!(matches!(
            store.insert(record("d", TaskState::Working)),
            Err(StoreError::Full(_))
        ));
    }
    let conn = Connection::open(dir.join(DB_FILE)).unwrap();
    let events: i64 = conn
        .query_row("SELECT count(*) FROM task_events", [], |r| r.get(0))
        .unwrap();
    let tasks: Vec<String> = conn
        .prepare("SELECT id FROM tasks ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!((tasks, events), (vec!["b".to_owned(), "c".to_owned()], 0));
    drop(conn);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_working_set_keeps_only_what_the_gateway_bridges() {
    let dir = temp_dir("working-set");
    let store = SqliteStore::open(&dir, limits(1000)).unwrap();
    for i in 0..50 {
        let id = format!("t{i}");
        let mut running = record(&id, TaskState::Working);
        running.task.context_id = format!("ctx{}", i % 2);
        store.insert(running).unwrap();
        let end = if i < 40 {
            TaskState::Completed
        } else {
            TaskState::InputRequired
        };
        store
            .append(&id, status(&id, end), Origin::default())
            .unwrap();
        // The turn's stream ended: the bridge lets the task go.
        store.release(&id);
    }
    assert!(store.flush(Duration::from_secs(5)));
    assert_eq!(
        store.set.memory.len(),
        0,
        "the tasks left memory once written"
    );
    assert_eq!(store.len(), 50);
    let completed = store
        .state_counts()
        .into_iter()
        .find(|(s, _)| *s == TaskState::Completed);
    assert_eq!(completed, Some((TaskState::Completed, 40)));
    // Every one is still served, from the database.
    let t7 = store
        .load("t7")
        .await
        .unwrap()
        .expect("t7 is in the database");
    assert_eq!(
        (t7.task.status.state.clone(), t7.seq),
        (TaskState::Completed, 1)
    );
    let events = TaskStore::events_after(&store, "t7", 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    // Listed from the database: filtered, paged, most recently updated first.
    let query = TaskQuery {
        context_id: Some("ctx1".into()),
        state: Some(TaskState::InputRequired),
        page_size: 3,
        ..TaskQuery::default()
    };
    let first = TaskStore::list(&store, &query).await.unwrap();
    assert_eq!((first.records.len(), first.total_size), (3, 5));
    let second = TaskStore::list(
        &store,
        &TaskQuery {
            page_token: first.next_page_token.clone(),
            ..query
        },
    )
    .await
    .unwrap();
    assert_eq!(second.next_page_token, None);
    let listed: Vec<&TaskRecord> = first
        .records
        .iter()
        .chain(&second.records)
        .map(|r| &**r)
        .collect();
    let mut ids: Vec<&str> = listed.iter().map(|r| r.task.id.as_str()).collect();
    assert!(
        listed.windows(2).all(|w| w[0].updated >= w[1].updated),
        "most recently updated first: {ids:?}"
    );
    ids.sort_unstable();
    assert_eq!(ids, ["t41", "t43", "t45", "t47", "t49"]);
    // A change to a task outside the working set is written, and it leaves again.
    let changed = store
        .modify("t3", &mut |r| r.owner = Some("alice".into()))
        .await
        .unwrap()
        .expect("t3 is there");
    assert_eq!(changed.owner.as_deref(), Some("alice"));
    assert!(store.flush(Duration::from_secs(5)));
    assert_eq!(store.set.memory.len(), 0);
    assert_eq!(
        store.read("t3").unwrap().unwrap().owner.as_deref(),
        Some("alice")
    );
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The hot-path cost of write-behind and what the writer sustains:
/// `cargo test -p mesh-gateway --lib -- --ignored --nocapture write_behind_cost`.
#[test]
#[ignore = "a measurement, not a test"]
fn write_behind_cost() {
    let n = 50_000;
    let limits = StoreLimits {
        max_tasks: 1_000_000,
        ..StoreLimits::default()
    };
    let memory = MemoryStore::new(limits);
    let dir = temp_dir("cost");
    let sqlite = SqliteStore::open(&dir, limits).unwrap();
    let stores: [(&str, &dyn TaskStore); 2] = [("memory", &memory), ("sqlite", &sqlite)];
    for (name, store) in stores {
        let began = Instant::now();
        for i in 0..n {
            let id = format!("t{i}");
            store.insert(record(&id, TaskState::Submitted)).unwrap();
            store.update(&id, &mut |r| r.task.status.state = TaskState::Working);
            store.update(&id, &mut |r| r.task.status.state = TaskState::Completed);
        }
        let calls = began.elapsed();
        let flushing = Instant::now();
        assert!(store.flush(Duration::from_secs(120)));
        println!(
            "{name:>6}: {n} tasks x 3 changes: {:.2?} in the callers ({:.2?} per change), then {:.2?} until durable; {:.0} tasks/s end to end",
            calls,
            calls / (3 * n as u32),
            flushing.elapsed(),
            n as f64 / began.elapsed().as_secs_f64(),
        );
    }
    drop(sqlite);
    std::fs::remove_dir_all(dir).unwrap();
}
