//! The in-memory task store, with bounded retention: at most `max_tasks` records (the oldest
//! go first) and finished tasks forgotten `max_age` after their last change.

use super::{StoreError, TaskPage, TaskQuery, TaskRecord, TaskStore};
use foldhash::HashMap;
use mesh_core::model::{TaskState, is_final_state};
use std::collections::VecDeque;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime};

/// Tasks in memory. See the module docs for retention.
pub struct MemoryStore {
    inner: RwLock<Inner>,
    max_age: Duration,
    max_tasks: usize,
}

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, Arc<TaskRecord>>,
    /// Task ids in insertion order, for eviction (ids already removed are skipped).
    order: VecDeque<String>,
}

impl MemoryStore {
    /// A store keeping at most `max_tasks` tasks, finished ones for `max_age`.
    pub fn new(max_age: Duration, max_tasks: usize) -> MemoryStore {
        MemoryStore {
            inner: RwLock::default(),
            max_age,
            max_tasks: max_tasks.max(1),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    fn evict(&mut self, max_age: Duration, max_tasks: usize) {
        let now = SystemTime::now();
        while let Some(front) = self.order.front() {
            let Some(record) = self.tasks.get(front) else {
                self.order.pop_front(); // removed earlier
                continue;
            };
            let over_count = self.tasks.len() > max_tasks;
            let expired = is_final_state(&record.task.status.state)
                && now.duration_since(record.updated).unwrap_or_default() > max_age;
            if !(over_count || expired) {
                break;
            }
            if let Some(id) = self.order.pop_front() {
                self.tasks.remove(&id);
            }
        }
        // Ids of tasks removed out of order pile up only until they reach the front; bound
        // them anyway so that remove-heavy use cannot grow the queue without limit.
        if self.order.len() > 2 * max_tasks + 1024 {
            let tasks = &self.tasks;
            self.order.retain(|id| tasks.contains_key(id));
        }
    }
}

impl MemoryStore {
    /// Inserts a shared record (the durable store keeps the same `Arc` for its writer).
    pub(crate) fn insert_shared(&self, record: Arc<TaskRecord>) {
        let mut inner = self.write();
        let id = record.task.id.clone();
        if inner.tasks.insert(id.clone(), record).is_none() {
            inner.order.push_back(id);
        }
        inner.evict(self.max_age, self.max_tasks);
    }
}

impl TaskStore for MemoryStore {
    fn insert(&self, record: TaskRecord) {
        self.insert_shared(Arc::new(record));
    }

    fn get(&self, id: &str) -> Option<Arc<TaskRecord>> {
        self.read().tasks.get(id).cloned()
    }

    fn update(&self, id: &str, apply: &mut dyn FnMut(&mut TaskRecord)) -> Option<Arc<TaskRecord>> {
        let mut inner = self.write();
        let entry = inner.tasks.get_mut(id)?;
        // Copies the record only while a reader still holds the previous version.
        let record = Arc::make_mut(entry);
        apply(record);
        record.updated = SystemTime::now();
        Some(entry.clone())
    }

    fn remove(&self, id: &str) {
        self.write().tasks.remove(id);
    }

    fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        let offset = match &query.page_token {
            None => 0,
            Some(token) if token.is_empty() => 0,
            Some(token) => token
                .parse::<usize>()
                .map_err(|_| StoreError::InvalidPageToken(token.clone()))?,
        };
        let mut matching: Vec<Arc<TaskRecord>> = {
            let inner = self.read();
            inner
                .tasks
                .values()
                .filter(|r| query.agent.as_deref().is_none_or(|a| r.agent == a))
                .filter(|r| {
                    query
                        .context_id
                        .as_deref()
                        .is_none_or(|c| r.task.context_id == c)
                })
                .filter(|r| {
                    query
                        .state
                        .as_ref()
                        .is_none_or(|s| &r.task.status.state == s)
                })
                .filter(|r| {
                    query
                        .owner
                        .as_deref()
                        .is_none_or(|o| r.owner.as_deref() == Some(o))
                })
                .cloned()
                .collect()
        };
        matching.sort_by(|a, b| {
            b.updated
                .cmp(&a.updated)
                .then_with(|| a.task.id.cmp(&b.task.id))
        });
        let total_size = matching.len();
        if offset > total_size {
            return Err(StoreError::InvalidPageToken(offset.to_string()));
        }
        let page_size = query.page_size.max(1);
        let end = (offset + page_size).min(total_size);
        let next_page_token = (end < total_size).then(|| end.to_string());
        let records = matching.drain(offset..end).collect();
        Ok(TaskPage {
            records,
            next_page_token,
            total_size,
        })
    }

    fn len(&self) -> usize {
        self.read().tasks.len()
    }

    fn state_counts(&self) -> Vec<(TaskState, usize)> {
        let mut counts: Vec<(TaskState, usize)> =
            super::STATES.iter().map(|s| (s.clone(), 0)).collect();
        for record in self.read().tasks.values() {
            if let Some(entry) = counts
                .iter_mut()
                .find(|(s, _)| *s == record.task.status.state)
            {
                entry.1 += 1;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::dialect::Dialect;
    use mesh_core::model::{Task, TaskStatus};

    fn task(id: &str, context: &str, state: TaskState) -> TaskRecord {
        TaskRecord::new(
            Task {
                id: id.into(),
                context_id: context.into(),
                status: TaskStatus {
                    state,
                    message: None,
                    timestamp: None,
                },
                artifacts: None,
                history: None,
                metadata: None,
            },
            "echo",
            Dialect::V0_3,
        )
    }

    #[test]
    fn keeps_at_most_max_tasks() {
        let store = MemoryStore::new(Duration::from_secs(60), 3);
        for i in 0..5 {
            store.insert(task(&format!("t{i}"), "c", TaskState::Working));
        }
        assert_eq!(store.len(), 3);
        assert!(store.get("t0").is_none() && store.get("t1").is_none());
        assert!(store.get("t4").is_some());
    }

    #[test]
    fn expires_finished_tasks_only() {
        let store = MemoryStore::new(Duration::ZERO, 100);
        store.insert(task("running", "c", TaskState::Working));
        store.insert(task("done", "c", TaskState::Completed));
        std::thread::sleep(Duration::from_millis(2));
        store.insert(task("new", "c", TaskState::Working));
        assert!(store.get("running").is_some());
        // "done" sits behind "running" in insertion order; it goes once "running" does.
        store.update("running", &mut |r| {
            r.task.status.state = TaskState::Completed
        });
        std::thread::sleep(Duration::from_millis(2));
        store.insert(task("newer", "c", TaskState::Working));
        assert!(store.get("running").is_none());
        assert!(store.get("done").is_none());
        assert!(store.get("new").is_some());
    }

    #[test]
    fn lists_with_filters_and_pages() {
        let store = MemoryStore::new(Duration::from_secs(60), 100);
        for i in 0..5 {
            store.insert(task(&format!("a{i}"), "ctx-a", TaskState::Completed));
            std::thread::sleep(Duration::from_millis(1));
        }
        store.insert(task("b0", "ctx-b", TaskState::Working));
        let query = TaskQuery {
            context_id: Some("ctx-a".into()),
            page_size: 2,
            ..Default::default()
        };
        let first = store.list(&query).unwrap();
        assert_eq!(first.total_size, 5);
        let ids: Vec<&str> = first.records.iter().map(|r| r.task.id.as_str()).collect();
        assert_eq!(ids, ["a4", "a3"]);
        let mut seen = ids.len();
        let mut token = first.next_page_token;
        while let Some(t) = token {
            let page = store
                .list(&TaskQuery {
                    page_token: Some(t),
                    ..query.clone()
                })
                .unwrap();
            seen += page.records.len();
            token = page.next_page_token;
        }
        assert_eq!(seen, 5);
        let working = store
            .list(&TaskQuery {
                state: Some(TaskState::Working),
                page_size: 10,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(working.records.len(), 1);
        assert!(
            store
                .list(&TaskQuery {
                    page_token: Some("x".into()),
                    page_size: 1,
                    ..Default::default()
                })
                .is_err()
        );
    }

    #[test]
    fn update_does_not_disturb_readers() {
        let store = MemoryStore::new(Duration::from_secs(60), 10);
        store.insert(task("t", "c", TaskState::Submitted));
        let before = store.get("t").unwrap();
        let after = store
            .update("t", &mut |r| r.task.status.state = TaskState::Working)
            .unwrap();
        assert_eq!(before.task.status.state, TaskState::Submitted);
        assert_eq!(after.task.status.state, TaskState::Working);
    }
}
