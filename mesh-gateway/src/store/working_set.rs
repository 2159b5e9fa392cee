//! The working set of a store whose tasks live in a database (SQLite, PostgreSQL): the
//! tasks the gateway bridges now, in memory, with what it changed of them queued for the
//! writer; every other task is read from the database when asked for.
//!
//! A task joins the working set when its record is inserted (a new task, a follow-up turn)
//! and stays while its pump changes it event by event. When the turn's stream ends
//! ([`WorkingSet::release`]) it is noted; once nothing of it is queued or being written, it
//! leaves ([`WorkingSet::let_go`], run by the writer after each commit), unless it changed
//! since (a new turn began): so the gateway's memory grows with its load, not with the store.
//!
//! The working set also keeps the request and the starting sequence of each task's current
//! turn ([`WorkingSet::begin_turn`]), which the writer stores with the task so that the
//! turn's replies can be followed after a crash.

use super::memory::{LogMode, LoggedEvent};
use super::write_behind::Queue;
use super::{
    MemoryStore, Origin, STATES, StoreError, StoreLimits, StoredEvent, TaskRecord, TaskStore,
};
use mesh_core::model::TaskState;
use mesh_core::rpc::Reply;
use mesh_core::sync::MutexExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// See the module docs.
pub(super) struct WorkingSet {
    /// The records (their logs are the database's).
    pub(super) memory: MemoryStore,
    /// What the writer has not written yet.
    pub(super) queue: Queue,
    /// Tasks whose turn ended, to leave once written: the record as it was then (any later
    /// change makes a new one, and keeps the task).
    released: Mutex<HashMap<String, Arc<TaskRecord>>>,
    /// Task id → the request of its current turn and the task's sequence before it.
    turns: Mutex<HashMap<String, (String, u64)>>,
    /// New tasks admitted and not counted by the writer yet: how many, and their bytes
    /// (estimated). A store checks its room with them, so that the tasks admitted within
    /// one batch cannot take it past its bounds.
    admitted: Mutex<(usize, usize)>,
}

impl WorkingSet {
    /// A working set for a store of `limits`: those of one task apply here; those of the
    /// store apply to the database (a task the working set evicted before it is written
    /// would be lost).
    pub(super) fn new(limits: StoreLimits) -> WorkingSet {
        let unbounded = StoreLimits {
            max_tasks: usize::MAX,
            max_bytes: usize::MAX,
            max_age: std::time::Duration::MAX,
            ..limits
        };
        WorkingSet {
            memory: MemoryStore::with_log(unbounded, LogMode::Elsewhere),
            queue: Queue::new(),
            released: Mutex::default(),
            turns: Mutex::default(),
            admitted: Mutex::default(),
        }
    }

    /// A new task of `bytes` is admitted (see [`WorkingSet::admitted`]).
    pub(super) fn admit(&self, bytes: usize) {
        let mut admitted = self.admitted.locked();
        admitted.0 += 1;
        admitted.1 += bytes;
    }

    /// The new tasks admitted and not counted by the writer yet, and their bytes.
    pub(super) fn admitted(&self) -> (usize, usize) {
        *self.admitted.locked()
    }

    /// The writer counted a new task of `bytes` (its first row).
    pub(super) fn counted(&self, bytes: usize) {
        let mut admitted = self.admitted.locked();
        admitted.0 = admitted.0.saturating_sub(1);
        admitted.1 = admitted.1.saturating_sub(bytes);
    }

    /// Nothing is queued: every task admitted is counted (estimates that drifted go).
    pub(super) fn all_counted(&self) {
        *self.admitted.locked() = (0, 0);
    }

    /// [`TaskStore::insert`](super::TaskStore::insert) into the working set (the caller
    /// checks the database's room first).
    pub(super) fn insert(&self, record: TaskRecord) -> Result<(), StoreError> {
        let id = record.task.id.clone();
        // The working set evicts nothing the database needs: what it lets go is written.
        self.memory.insert_record(record, &mut Vec::new())?;
        // A new turn here: bridged again.
        self.released.locked().remove(&id);
        self.queue.snapshot(&id);
        Ok(())
    }

    /// [`TaskStore::append`](super::TaskStore::append).
    pub(super) fn append(
        &self,
        id: &str,
        event: Arc<Reply>,
        origin: Origin,
    ) -> Result<Arc<TaskRecord>, StoreError> {
        let appended = self
            .memory
            .append_event(id, event, origin, &mut Vec::new())?;
        // A working set logs elsewhere: the event is always there.
        if let Some(event) = appended.event {
            self.queue.event(id, event, appended.snapshot, &[]);
        }
        Ok(appended.record)
    }

    /// [`TaskStore::update`](super::TaskStore::update).
    pub(super) fn update(
        &self,
        id: &str,
        apply: &mut dyn FnMut(&mut TaskRecord),
    ) -> Option<Arc<TaskRecord>> {
        let record = self.memory.update_record(id, apply)?;
        self.queue.snapshot(id);
        Some(record)
    }

    /// [`TaskStore::remove`](super::TaskStore::remove): nothing of it is left to write or
    /// to let go; its rows are deleted.
    pub(super) fn remove(&self, id: &str) {
        self.memory.remove_record(id);
        self.turns.locked().remove(id);
        self.released.locked().remove(id);
        self.queue.delete(&[id.to_owned()]);
    }

    /// [`TaskStore::begin_turn`](super::TaskStore::begin_turn).
    pub(super) fn begin_turn(&self, id: &str, request_id: &str, start: u64) {
        self.turns
            .locked()
            .insert(id.to_owned(), (request_id.to_owned(), start));
    }

    /// The turns of tasks `ids` as they are now (a short lock).
    pub(super) fn turns_of<'a>(
        &self,
        ids: impl Iterator<Item = &'a String>,
    ) -> HashMap<&'a str, (String, u64)> {
        let all = self.turns.locked();
        ids.filter_map(|id| all.get(id).map(|turn| (id.as_str(), turn.clone())))
            .collect()
    }

    /// [`TaskStore::release`](super::TaskStore::release): the task leaves once written.
    pub(super) fn release(&self, id: &str) {
        let Some(record) = self.memory.get(id) else {
            return;
        };
        // Noted first: the writer lets it go after the batch that writes the rest of it.
        self.released.locked().insert(id.to_owned(), record.clone());
        // All of it written already: it goes now.
        if self.queue.holds_nothing_of(id) {
            self.released.locked().remove(id);
            if self.memory.remove_if_unchanged(id, &record) {
                self.turns.locked().remove(id);
            }
        }
    }

    /// Lets the released tasks that are written leave (the writer, after a commit).
    pub(super) fn let_go(&self) {
        let mut released = self.released.locked();
        if released.is_empty() {
            return;
        }
        released.retain(|id, record| {
            if !self.queue.holds_nothing_of(id) {
                return true;
            }
            // Changed since (a new turn here): it stays, until released again.
            if self.memory.remove_if_unchanged(id, record) {
                self.turns.locked().remove(id);
            }
            false
        });
    }

    /// The record of `id` here when it is newer than (or as new as) the database's: the
    /// task is bridged here, or what this gateway changed of it is not all written yet. A
    /// task whose turn ended here and is written may have been continued by another gateway
    /// since: the database has it.
    pub(super) fn newest_here(&self, id: &str) -> Option<Arc<TaskRecord>> {
        let record = self.memory.get(id)?;
        (!self.released.locked().contains_key(id) || !self.queue.holds_nothing_of(id))
            .then_some(record)
    }
}

/// What a store on a database counts of it: its tasks, how many are finished, their bytes
/// (estimated), how many are in each state.
#[derive(Debug, Clone)]
pub(super) struct Totals {
    pub(super) tasks: usize,
    pub(super) finished: usize,
    pub(super) bytes: usize,
    pub(super) states: Vec<(TaskState, usize)>,
}

impl Default for Totals {
    fn default() -> Totals {
        Totals {
            tasks: 0,
            finished: 0,
            bytes: 0,
            states: STATES.iter().map(|s| (s.clone(), 0)).collect(),
        }
    }
}

impl Totals {
    /// Counts `n` tasks in the state named `state` (as the database stores it), of `bytes`
    /// in all.
    pub(super) fn add(&mut self, state: &str, n: usize, bytes: usize) {
        self.tasks += n;
        self.bytes += bytes;
        if let Some(entry) = self
            .states
            .iter_mut()
            .find(|(s, _)| mesh_core::model::state_name(s) == state)
        {
            entry.1 += n;
            if entry.0.is_terminal() {
                self.finished += n;
            }
        }
    }

    /// No longer counts one task in the state named `state`, of `bytes`.
    pub(super) fn subtract(&mut self, state: &str, bytes: usize) {
        self.tasks = self.tasks.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
        if let Some(entry) = self
            .states
            .iter_mut()
            .find(|(s, _)| mesh_core::model::state_name(s) == state)
        {
            entry.1 = entry.1.saturating_sub(1);
            if entry.0.is_terminal() {
                self.finished = self.finished.saturating_sub(1);
            }
        }
    }

    /// Refuses a new task while the counts say the database is full of tasks that are not
    /// finished: the writer deletes the oldest finished ones to make room, never a running
    /// one.
    /// `admitted`: new tasks (and their bytes) not in the counts yet.
    pub(super) fn check_room(
        &self,
        limits: StoreLimits,
        admitted: (usize, usize),
    ) -> Result<(), StoreError> {
        if self.tasks + admitted.0 >= limits.max_tasks && self.finished == 0 {
            return Err(StoreError::Full(super::Limit::Tasks(limits.max_tasks)));
        }
        if self.bytes + admitted.1 >= limits.max_bytes && self.finished == 0 {
            return Err(StoreError::Full(super::Limit::Bytes(limits.max_bytes)));
        }
        Ok(())
    }

    /// True when the counts are past `limits` (the writer applies them then).
    pub(super) fn over(&self, limits: StoreLimits) -> bool {
        self.tasks > limits.max_tasks || self.bytes > limits.max_bytes
    }
}

/// The events of a task after `after` (at most `limit`): `committed`, read from the database
/// after `queued` was taken from the queue, then those of `queued` past them; a batch
/// committed between the two reads is in both, and counted once.
/// [`StoreError::EventsForgotten`] when the first is not event `after + 1`.
pub(super) fn merge_logged(
    id: &str,
    after: u64,
    limit: usize,
    mut committed: Vec<StoredEvent>,
    queued: &[LoggedEvent],
) -> Result<Vec<StoredEvent>, StoreError> {
    let last = committed.last().map_or(after, |e| e.seq);
    committed.extend(
        queued
            .iter()
            .filter(|e| e.seq > last)
            .map(LoggedEvent::stored),
    );
    committed.truncate(limit);
    match committed.first() {
        Some(first) if first.seq != after + 1 => Err(StoreError::EventsForgotten {
            task: id.to_owned(),
            first: first.seq,
        }),
        _ => Ok(committed),
    }
}
