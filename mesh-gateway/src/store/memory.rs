//! The in-memory task store: the records, the last events of each running task, and the
//! bounds of the store's contract (see the [`store`](super) module docs).
//!
//! Eviction: finished tasks (terminal states) are queued in the order they finished; the
//! front of that queue goes when the store is over `max_tasks` or `max_bytes`, or when its
//! last change is older than `max_age`. Nothing else is ever evicted.
//!
//! The event log: a running task keeps its last [`EVENT_LOG_EVENTS`] events (at most
//! [`EVENT_LOG_BYTES`] of them), enough for a client that missed a few to catch up; older
//! ones are dropped as new ones come, and a task's log is dropped when it finishes (the task
//! itself then says everything the log did). Keeping every event of every task in memory would
//! double what a long stream costs, for a log nothing reads after the stream ends; the durable
//! store keeps the whole log on disk. The bytes of the events kept count against `max_bytes`
//! (estimated, see the [`store`](super) module docs). An event is kept as it came (shared with
//! the bridge's subscribers, not copied) and encoded only when the log is read.
//!
//! The last event may be held as the record it made (a mark), so that a task waiting in
//! flight holds what it last said once, not twice:
//! - a whole Task: the log makes the event of it only when the log is read. When no one else
//!   holds that event (no subscriber reads it), its task moves into the record instead of
//!   being copied. When the record changes, the mark goes and the log starts after it
//!   (compaction): the task as it stands says all that the whole Task and the events before
//!   it did, so a reader from before the mark is told the events are forgotten and takes the
//!   task as it stands (as a resumed stream does), and a running task holds no copy of an
//!   older self;
//! - a status update no one else holds (with no metadata of its own): its status moves into
//!   the record, and when the record changes the event is made again from it, as it came,
//!   so the log loses nothing of it.
//!
//! The same store holds the working set of the durable stores
//! ([`working_set`](super::working_set)); there it keeps no event in memory but counts the
//! bytes of the log written to the database, and evicts nothing (the database's bounds are
//! the store's).

use super::task_table::{SlotKey, TaskTable};
use super::{
    Limit, Origin, StoreError, StoreLimits, StoredEvent, TaskPage, TaskQuery, TaskRecord,
    TaskStore, size,
};
use crate::task_events;
use mesh_core::model::{TaskState, TaskStatusUpdateEvent};
use mesh_core::requester::{restore_history, restore_history_from};
use mesh_core::rpc::Reply;
use mesh_core::sync::RwLockExt;
use std::collections::VecDeque;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::SystemTime;

/// The most events a running task's log keeps in memory.
pub const EVENT_LOG_EVENTS: usize = 1024;

/// The most bytes of events a running task's log keeps in memory.
pub const EVENT_LOG_BYTES: usize = 1 << 20;

/// A snapshot is due when the events since the last one add at least this many bytes, or as
/// many as the task had then, whichever is more: snapshots of a growing task are written at
/// sizes that double, so what they write in all stays within about twice what its events do.
pub(crate) const SNAPSHOT_MIN_BYTES: usize = 256 * 1024;

/// Tasks in memory. See the module docs.
pub struct MemoryStore {
    inner: RwLock<Inner>,
    limits: StoreLimits,
    log: LogMode,
}

/// Where a task's event log lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogMode {
    /// Here, the last events of each running task.
    Tail,
    /// Elsewhere (the durable store's disk): counted, not kept.
    Elsewhere,
}

/// See [`MemoryStore::state_of`].
pub(crate) struct StateColumns {
    pub(crate) id: String,
    pub(crate) state: TaskState,
    pub(crate) updated: SystemTime,
    pub(crate) seq: u64,
    /// The record's estimated size and its log's.
    pub(crate) bytes: usize,
}

struct Entry {
    record: Arc<TaskRecord>,
    /// The record's estimated size.
    record_bytes: usize,
    /// The bytes of its event log (kept here or elsewhere).
    log_bytes: usize,
    /// The last events ([`LogMode::Tail`]), but for the last when it is held as the record.
    log: VecDeque<LoggedEvent>,
    /// The last event, held as the record it made until the record changes
    /// ([`LogMode::Tail`]; see the module docs).
    last_is_record: Option<RecordMark>,
    /// `record_bytes` when the last snapshot was due.
    snapshot_bytes: usize,
    /// Its stamp in [`Inner::finished`] while it is queued there, else 0.
    queued: u64,
}

impl Entry {
    fn new(record: TaskRecord, record_bytes: usize, log_bytes: usize) -> Entry {
        Entry {
            record: Arc::new(record),
            record_bytes,
            log_bytes,
            log: VecDeque::new(),
            last_is_record: None,
            snapshot_bytes: record_bytes,
            queued: 0,
        }
    }

    fn bytes(&self) -> usize {
        self.record_bytes + self.log_bytes
    }

    /// Before the record changes, the event held as the record (see the module docs): a
    /// status update is made of the record and logged; a whole Task goes, with every event
    /// before it (compaction: the record says what they did).
    fn before_change(&mut self) {
        let Some(mark) = self.last_is_record.take() else {
            return;
        };
        match mark.marked {
            Marked::Status => {
                let event = mark.event(&self.record);
                self.push_logged(event);
            }
            Marked::Task => {
                self.log_bytes -= mark.bytes;
                for event in self.log.drain(..) {
                    self.log_bytes -= event.bytes;
                }
            }
        }
    }

    /// Logs an event (its bytes counted already), then [`trim`](Self::trim)s.
    fn push_logged(&mut self, event: LoggedEvent) {
        // Room for one at first (a task in flight that said where it is keeps one event),
        // not the four a first push makes room for.
        if self.log.capacity() == 0 {
            self.log.reserve_exact(1);
        }
        self.log.push_back(event);
        self.trim();
    }

    /// Forgets the oldest events past the log's bounds.
    fn trim(&mut self) {
        while self.log.len() > EVENT_LOG_EVENTS || self.log_bytes > EVENT_LOG_BYTES {
            let Some(old) = self.log.pop_front() else {
                break;
            };
            self.log_bytes -= old.bytes;
        }
    }

    /// The logged events after `after`, at most `limit` of them (the log must hold event
    /// `after + 1`, or it is the record's own).
    fn events_after(&self, after: u64, limit: usize) -> Vec<LoggedEvent> {
        let first = self.log.front().map_or(u64::MAX, |e| e.seq);
        let skip = usize::try_from((after + 1).saturating_sub(first)).unwrap_or(usize::MAX);
        let mut events: Vec<LoggedEvent> =
            self.log.iter().skip(skip).take(limit).cloned().collect();
        if let Some(mark) = &self.last_is_record
            && mark.seq > after
            && events.len() < limit
        {
            events.push(mark.event(&self.record));
        }
        events
    }

    /// The oldest event the log holds.
    fn first_logged(&self) -> Option<u64> {
        self.log
            .front()
            .map(|e| e.seq)
            .or(self.last_is_record.as_ref().map(|m| m.seq))
    }
}

/// An event of the log held as the record it made (see the module docs): all but the event.
#[derive(Debug, Clone, Copy)]
struct RecordMark {
    marked: Marked,
    seq: u64,
    time: SystemTime,
    bytes: usize,
    position: Option<u64>,
}

/// Which event a mark holds as the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marked {
    /// A whole Task: the record's task.
    Task,
    /// A status update with no metadata: the record's status.
    Status,
}

impl RecordMark {
    /// The event itself, made of `record` (which it made).
    fn event(&self, record: &TaskRecord) -> LoggedEvent {
        let task = &record.task;
        let event = match self.marked {
            Marked::Task => Reply::Task(task.clone()),
            Marked::Status => Reply::StatusUpdate(TaskStatusUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                status: task.status.clone(),
                metadata: None,
            }),
        };
        LoggedEvent {
            seq: self.seq,
            time: self.time,
            event: Arc::new(event),
            bytes: self.bytes,
            position: self.position,
            _ack: None,
        }
    }
}

#[derive(Default)]
struct Inner {
    tasks: TaskTable<Entry>,
    /// Finished tasks in the order they finished, for eviction (those no longer there, or
    /// no longer finished, are skipped).
    finished: VecDeque<Queued>,
    /// The last stamp given in `finished`.
    last_stamp: u64,
    /// The sum of the entries' bytes.
    bytes: usize,
}

/// A finished task in the eviction queue: its slot, and its stamp, which tells it from a
/// task that took the slot since.
#[derive(Debug, Clone, Copy)]
struct Queued {
    slot: SlotKey,
    stamp: u64,
}

/// One event of a task's log as a store holds it until it is read or written: the event
/// itself, shared with whoever else holds it (the bridge's subscribers), neither copied nor
/// encoded. [`LoggedEvent::stored`] encodes it.
#[derive(Debug, Clone)]
pub(crate) struct LoggedEvent {
    /// Its sequence number in the task.
    pub seq: u64,
    /// When the store appended it.
    pub time: SystemTime,
    /// The event.
    pub event: Arc<Reply>,
    /// Its estimated size (what it counts against the store's bounds).
    pub bytes: usize,
    /// Its place in its turn's reply stream, when it came from the agent (see
    /// [`Origin`](super::Origin)).
    pub position: Option<u64>,
    /// Its acknowledgement to the broker, held (never read) until the event is written and
    /// dropped with it (see [`Origin`](super::Origin)).
    pub _ack: Option<mesh_core::bus::Ack>,
}

impl LoggedEvent {
    /// The event as [`StoredEvent`]: encoded now.
    pub(crate) fn stored(&self) -> StoredEvent {
        StoredEvent {
            seq: self.seq,
            time: self.time,
            json: task_events::encode(&self.event),
        }
    }
}

/// What [`MemoryStore::append_event`] did, for the durable store.
pub(crate) struct Appended {
    /// The record as it is now.
    pub record: Arc<TaskRecord>,
    /// The event as logged, for the writer of a log kept elsewhere ([`LogMode::Elsewhere`]:
    /// always there); `None` in memory, whose log keeps what it needs.
    pub event: Option<LoggedEvent>,
    /// A snapshot of the task is due (see [`SNAPSHOT_MIN_BYTES`]; also when the task
    /// finished or waits for its client).
    pub snapshot: bool,
}

impl MemoryStore {
    /// A store within `limits`, keeping the last events of each running task.
    pub fn new(limits: StoreLimits) -> MemoryStore {
        MemoryStore::with_log(limits, LogMode::Tail)
    }

    pub(crate) fn with_log(limits: StoreLimits, log: LogMode) -> MemoryStore {
        MemoryStore {
            inner: RwLock::default(),
            limits: StoreLimits {
                max_tasks: limits.max_tasks.max(1),
                ..limits
            },
            log,
        }
    }

    /// The limits it keeps.
    pub fn limits(&self) -> StoreLimits {
        self.limits
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read_locked()
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write_locked()
    }

    /// Adds or replaces a record (see [`TaskStore::insert`]); the ids it evicted to make room
    /// are added to `evicted`.
    pub(crate) fn insert_record(
        &self,
        record: TaskRecord,
        evicted: &mut Vec<String>,
    ) -> Result<(), StoreError> {
        let bytes = record.estimated_bytes();
        if bytes > self.limits.max_task_bytes {
            return Err(StoreError::TaskTooLarge {
                task: record.task.id.clone(),
                limit: self.limits.max_task_bytes,
            });
        }
        let mut inner = self.write();
        let now = SystemTime::now();
        if let Some((slot, entry)) = inner.tasks.get_mut_with_slot(&record.task.id) {
            let old = entry.record_bytes;
            entry.before_change();
            entry.record = Arc::new(record);
            entry.record_bytes = bytes;
            entry.snapshot_bytes = bytes;
            let finished = entry.queued == 0 && entry.record.task.status.state.is_terminal();
            inner.bytes = inner.bytes - old + bytes;
            if finished {
                inner.finish(slot);
            }
            inner.evict(&self.limits, (0, 0), now, evicted);
            return Ok(());
        }
        inner.evict(&self.limits, (1, bytes), now, evicted);
        if inner.tasks.len() >= self.limits.max_tasks {
            return Err(StoreError::Full(Limit::Tasks(self.limits.max_tasks)));
        }
        if inner.bytes + bytes > self.limits.max_bytes {
            return Err(StoreError::Full(Limit::Bytes(self.limits.max_bytes)));
        }
        inner.add(Entry::new(record, bytes, 0));
        Ok(())
    }

    /// Applies and logs one event (see [`TaskStore::append`]).
    pub(crate) fn append_event(
        &self,
        id: &str,
        event: Arc<Reply>,
        origin: Origin,
        evicted: &mut Vec<String>,
    ) -> Result<Appended, StoreError> {
        // Estimated outside the lock, from the event's structure (nothing is encoded).
        let len = size::reply(&event);
        let now = SystemTime::now();
        let mut inner = self.write();
        let Some((slot, entry)) = inner.tasks.get_mut_with_slot(id) else {
            return Err(StoreError::TaskNotFound(id.to_owned()));
        };
        // The event adds itself to the record and to the log.
        if entry.bytes() + 2 * len > self.limits.max_task_bytes && !task_events::ends_task(&event) {
            return Err(StoreError::TaskTooLarge {
                task: id.to_owned(),
                limit: self.limits.max_task_bytes,
            });
        }
        let bytes_before = entry.bytes();
        let whole_task = matches!(*event, Reply::Task(_));
        // A log that ends with this event (the task's last) needs no event of the mark.
        if self.log == LogMode::Tail && !task_events::ends_for_good(&event) {
            entry.before_change();
        }
        // In place: no one else holds the record unless a reader is still looking at it.
        let record = Arc::make_mut(&mut entry.record);
        let before = state_of(&record.task.status.state);
        // A whole task or a status update (with no metadata) that no one else holds moves
        // into the record (a log in memory keeps it as the record, see the module docs); the
        // event keeps what it replaced, freed with it after the lock. Any other event is
        // applied. The history its agent left out (`Origin::history_from`) is put back
        // first: moved out of the task it replaces, or copied from the record into an event
        // the log keeps.
        let mut event = event;
        let mut put_back = 0;
        let moved = match Arc::get_mut(&mut event) {
            _ if self.log != LogMode::Tail => None,
            Some(Reply::Task(task)) => {
                std::mem::swap(&mut record.task, task);
                if let Some(from) = origin.history_from {
                    let known = task.history.take().unwrap_or_default();
                    put_back = restore_history_from(&mut record.task, from, known);
                }
                Some(Marked::Task)
            }
            Some(Reply::StatusUpdate(update)) if update.metadata.is_none() => {
                task_events::move_status(&mut record.task, &mut update.status);
                Some(Marked::Status)
            }
            _ => None,
        };
        if moved.is_none() {
            if let (Some(from), Some(Reply::Task(task))) =
                (origin.history_from, Arc::get_mut(&mut event))
            {
                let known = record.task.history.as_deref().unwrap_or_default();
                put_back = restore_history(task, from, known);
            }
            task_events::apply(&mut record.task, &event);
        }
        if let Some(from) = origin.history_from
            && (put_back as u64) < from
        {
            tracing::warn!(task = %id, from, put_back,
                "the agent left out more of the task's history than the gateway has");
        }
        // The event weighs what it would have with its history.
        let history = record.task.history.as_deref().unwrap_or_default();
        let len = len
            + history
                .iter()
                .take(put_back)
                .map(size::message)
                .sum::<usize>();
        record.seq += 1;
        record.updated = now;
        let seq = record.seq;
        let state = &record.task.status.state;
        let terminal = state.is_terminal();
        let changed = before != state_of(state);
        let interrupted = task_events::is_interrupted(state);
        let mut elsewhere = None;
        entry.record_bytes += len;
        match self.log {
            LogMode::Elsewhere => {
                entry.log_bytes += len;
                elsewhere = Some(LoggedEvent {
                    seq,
                    time: now,
                    event,
                    bytes: len,
                    position: origin.position,
                    // Kept with the event while the durable store's writer has it to write.
                    _ack: origin.ack,
                });
            }
            // A finished task's log goes with its stream.
            LogMode::Tail if terminal => {
                entry.log_bytes = 0;
                entry.log = VecDeque::new();
                entry.last_is_record = None;
            }
            LogMode::Tail => {
                entry.log_bytes += len;
                // A whole Task is held as the record even when shared (the record copied it).
                match moved.or(whole_task.then_some(Marked::Task)) {
                    Some(marked) => {
                        entry.last_is_record = Some(RecordMark {
                            marked,
                            seq,
                            time: now,
                            bytes: len,
                            position: origin.position,
                        });
                        entry.trim();
                    }
                    None => entry.push_logged(LoggedEvent {
                        seq,
                        time: now,
                        event,
                        bytes: len,
                        position: origin.position,
                        // A log in memory lets the acknowledgement go at once.
                        _ack: None,
                    }),
                }
            }
        }
        let grown = entry.record_bytes - entry.snapshot_bytes;
        let snapshot = (changed && (terminal || interrupted))
            || grown >= entry.snapshot_bytes.max(SNAPSHOT_MIN_BYTES);
        if snapshot {
            entry.snapshot_bytes = entry.record_bytes;
        }
        let finish = terminal && entry.queued == 0;
        let record = entry.record.clone();
        let bytes_after = entry.bytes();
        inner.bytes = inner.bytes - bytes_before + bytes_after;
        if finish {
            inner.finish(slot);
        }
        if inner.bytes > self.limits.max_bytes {
            inner.evict(&self.limits, (0, 0), now, evicted);
        }
        // What is left of the event (a replaced task) is freed after the lock.
        drop(inner);
        Ok(Appended {
            record,
            event: elsewhere,
            snapshot,
        })
    }

    /// Changes a record (see [`TaskStore::update`]).
    pub(crate) fn update_record(
        &self,
        id: &str,
        apply: &mut dyn FnMut(&mut TaskRecord),
    ) -> Option<Arc<TaskRecord>> {
        let mut inner = self.write();
        let (slot, entry) = inner.tasks.get_mut_with_slot(id)?;
        entry.before_change();
        let record = Arc::make_mut(&mut entry.record);
        apply(record);
        let now = SystemTime::now();
        record.updated = now;
        let finish = entry.queued == 0 && record.task.status.state.is_terminal();
        let record = entry.record.clone();
        if finish {
            inner.finish(slot);
        }
        Some(record)
    }

    /// The record and the bytes of its event log up to its sequence, read together (what a
    /// snapshot of it records).
    pub(crate) fn snapshot_of(&self, id: &str) -> Option<(Arc<TaskRecord>, usize)> {
        let inner = self.read();
        inner.tasks.get(id).map(|e| (e.record.clone(), e.log_bytes))
    }

    /// What a durable store keeps current of task `id` between its snapshots, read under
    /// the lock: no reference to the record is kept, so an append meanwhile still changes
    /// it in place.
    pub(crate) fn state_of(&self, id: &str) -> Option<StateColumns> {
        let inner = self.read();
        inner.tasks.get(id).map(|e| StateColumns {
            id: e.record.task.id.clone(),
            state: e.record.task.status.state.clone(),
            updated: e.record.updated,
            seq: e.record.seq,
            bytes: e.record_bytes + e.log_bytes,
        })
    }

    /// The ids of the tasks it holds.
    pub(crate) fn ids(&self) -> Vec<String> {
        self.read()
            .tasks
            .iter()
            .map(|(id, _)| id.to_owned())
            .collect()
    }

    /// Forgets a task when its record is still `record` (unchanged since it was read: any
    /// change makes a new record while `record` is held); true when it did.
    pub(crate) fn remove_if_unchanged(&self, id: &str, record: &Arc<TaskRecord>) -> bool {
        let mut inner = self.write();
        if !inner
            .tasks
            .get(id)
            .is_some_and(|e| Arc::ptr_eq(&e.record, record))
        {
            return false;
        }
        if let Some((_, entry)) = inner.tasks.remove(id) {
            inner.bytes -= entry.bytes();
        }
        true
    }

    /// Forgets a task; false when there was none.
    pub(crate) fn remove_record(&self, id: &str) -> bool {
        let mut inner = self.write();
        match inner.tasks.remove(id) {
            Some((_, entry)) => {
                inner.bytes -= entry.bytes();
                true
            }
            None => false,
        }
    }
}

/// A state's discriminant, to tell whether an event changed it.
fn state_of(state: &TaskState) -> std::mem::Discriminant<TaskState> {
    std::mem::discriminant(state)
}

impl Inner {
    /// Adds the entry of a task the store does not hold.
    fn add(&mut self, mut entry: Entry) {
        self.bytes += entry.bytes();
        let finished = entry.record.task.status.state.is_terminal();
        entry.queued = 0;
        let id = entry.record.task.id.as_str().into();
        let slot = self.tasks.insert_new(id, entry);
        if finished {
            self.finish(slot);
        }
    }

    /// Queues the task in `slot`, which just finished, for eviction.
    fn finish(&mut self, slot: SlotKey) {
        if let Some(entry) = self.tasks.at_mut(slot) {
            self.last_stamp += 1;
            entry.queued = self.last_stamp;
            self.finished.push_back(Queued {
                slot,
                stamp: self.last_stamp,
            });
        }
    }

    /// Evicts finished tasks, oldest first, until `room` (tasks, bytes) more fit within the
    /// limits and no finished task is older than `max_age`.
    fn evict(
        &mut self,
        limits: &StoreLimits,
        room: (usize, usize),
        now: SystemTime,
        evicted: &mut Vec<String>,
    ) {
        let expired = |entry: &Entry| {
            now.duration_since(entry.record.updated).unwrap_or_default() > limits.max_age
        };
        while let Some(&front) = self.finished.front() {
            let over = self.tasks.len() + room.0 > limits.max_tasks
                || self.bytes + room.1 > limits.max_bytes;
            // The queued task, unless it went or left the queue (its slot may hold another).
            let Some(entry) = self
                .tasks
                .at_mut(front.slot)
                .filter(|entry| entry.queued == front.stamp)
            else {
                self.finished.pop_front();
                continue;
            };
            if !entry.record.task.status.state.is_terminal() {
                entry.queued = 0; // replaced by a record that is not finished
                self.finished.pop_front();
                continue;
            }
            // Under the bounds only its age can evict the front.
            if !over && !expired(entry) {
                break;
            }
            self.finished.pop_front();
            if let Some((id, entry)) = self.tasks.remove_at(front.slot) {
                self.bytes -= entry.bytes();
                evicted.push(id.into_string());
            }
        }
        // Tasks removed out of order pile up only until they reach the front; bound them
        // anyway so that remove-heavy use cannot grow the queue without limit.
        if self.finished.len() > 2 * self.tasks.len() + 1024 {
            let tasks = &self.tasks;
            self.finished.retain(|queued| {
                tasks
                    .at(queued.slot)
                    .is_some_and(|e| e.queued == queued.stamp)
            });
        }
    }
}

impl MemoryStore {
    /// The task's logged events after `after` ([`TaskStore::events_after`], here without
    /// waiting: the log is in memory).
    pub fn events_after(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        // The events are taken under the lock (shared, not copied) and encoded after it.
        let events: Vec<LoggedEvent> = {
            let inner = self.read();
            let entry = inner
                .tasks
                .get(id)
                .ok_or_else(|| StoreError::TaskNotFound(id.to_owned()))?;
            let last = entry.record.seq;
            let first = entry.first_logged().unwrap_or(last + 1);
            if after >= last {
                return Ok(Vec::new());
            }
            if after + 1 < first {
                return Err(StoreError::EventsForgotten {
                    task: id.to_owned(),
                    first,
                });
            }
            entry.events_after(after, limit)
        };
        Ok(events.iter().map(LoggedEvent::stored).collect())
    }

    /// The tasks matching `query` ([`TaskStore::list`], here without waiting).
    pub fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        let offset = super::columns::page_offset(query.page_token.as_deref())?;
        let mut matching: Vec<Arc<TaskRecord>> = {
            let inner = self.read();
            inner
                .tasks
                .values()
                .map(|e| &e.record)
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
}

#[async_trait::async_trait]
impl TaskStore for MemoryStore {
    async fn events_after(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        MemoryStore::events_after(self, id, after, limit)
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        MemoryStore::list(self, query)
    }

    fn insert(&self, record: TaskRecord) -> Result<(), StoreError> {
        self.insert_record(record, &mut Vec::new())
    }

    fn get(&self, id: &str) -> Option<Arc<TaskRecord>> {
        self.read().tasks.get(id).map(|e| e.record.clone())
    }

    fn append(
        &self,
        id: &str,
        event: Arc<Reply>,
        origin: Origin,
    ) -> Result<Arc<TaskRecord>, StoreError> {
        self.append_event(id, event, origin, &mut Vec::new())
            .map(|a| a.record)
    }

    fn update(&self, id: &str, apply: &mut dyn FnMut(&mut TaskRecord)) -> Option<Arc<TaskRecord>> {
        self.update_record(id, apply)
    }

    fn remove(&self, id: &str) {
        self.remove_record(id);
    }

    fn len(&self) -> usize {
        self.read().tasks.len()
    }

    fn bytes(&self) -> usize {
        self.read().bytes
    }

    fn state_counts(&self) -> Vec<(TaskState, usize)> {
        let mut counts: Vec<(TaskState, usize)> =
            super::STATES.iter().map(|s| (s.clone(), 0)).collect();
        for entry in self.read().tasks.values() {
            if let Some(count) = counts
                .iter_mut()
                .find(|(s, _)| *s == entry.record.task.status.state)
            {
                count.1 += 1;
            }
        }
        counts
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use mesh_core::dialect::Dialect;
    use mesh_core::model::{
        Artifact, Part, Task, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent,
    };
    use std::time::Duration;

    fn limits(max_tasks: usize) -> StoreLimits {
        StoreLimits {
            max_age: Duration::from_secs(60),
            max_tasks,
            ..StoreLimits::default()
        }
    }

    pub(crate) fn task(id: &str, context: &str, state: TaskState) -> TaskRecord {
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

    pub(crate) fn chunk(id: &str, text: &str) -> Arc<Reply> {
        Arc::new(Reply::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: id.into(),
            context_id: "c".into(),
            artifact: Artifact {
                artifact_id: "a".into(),
                name: None,
                description: None,
                parts: vec![Part::text(text)],
                metadata: None,
                extensions: None,
            },
            append: Some(true),
            last_chunk: Some(false),
            metadata: None,
        }))
    }

    /// The memory store's cost a task at its default bound of 100,000 tasks, where each new
    /// task evicts the oldest: an echo task (the user's message, then the agent's answer as a
    /// whole task with an artifact) inserted and finished, a lookup of it, and the eviction
    /// it makes. `cargo test --release -p mesh-gateway --lib -- --ignored --nocapture
    /// churn_cost`.
    #[test]
    #[ignore = "a measurement, not a test"]
    fn churn_cost() {
        use mesh_core::model::{Message, Role};
        let limits = StoreLimits::default();
        let store = MemoryStore::new(limits);
        let message = |role: Role, task: &str, context: &str| {
            let mut m = Message::new(role, vec![Part::text(format!("bench {}", "x".repeat(80)))]);
            m.task_id = Some(task.into());
            m.context_id = Some(context.into());
            m
        };
        let one = |store: &MemoryStore| {
            let id = mesh_core::model::new_task_id();
            let context = mesh_core::model::new_context_id();
            let mut record = task(&id, &context, TaskState::Submitted);
            record.task.history = Some(vec![message(Role::User, &id, &context)]);
            store.insert(record).unwrap();
            let mut done = task(&id, &context, TaskState::Completed).task;
            done.history = Some(vec![
                message(Role::User, &id, &context),
                message(Role::Agent, &id, &context),
            ]);
            done.artifacts = Some(vec![Artifact {
                artifact_id: mesh_core::model::new_artifact_id(),
                name: None,
                description: None,
                parts: vec![Part::text(format!("bench {}", "x".repeat(80)))],
                metadata: None,
                extensions: None,
            }]);
            store
                .append(&id, Arc::new(Reply::Task(done)), Origin::default())
                .unwrap();
            assert!(store.get(&id).is_some());
        };
        let began = std::time::Instant::now();
        for _ in 0..limits.max_tasks {
            one(&store);
        }
        let filled = began.elapsed();
        let n = 200_000;
        let began = std::time::Instant::now();
        for _ in 0..n {
            one(&store);
        }
        let churned = began.elapsed();
        println!(
            "{} tasks filled in {filled:.2?} ({:.2?} a task); then {n} more, each evicting one, in {churned:.2?} ({:.2?} a task); {} tasks, {} MiB estimated",
            limits.max_tasks,
            filled / limits.max_tasks as u32,
            churned / n,
            store.len(),
            store.bytes() >> 20,
        );
    }

    pub(crate) fn status(id: &str, state: TaskState) -> Arc<Reply> {
        Arc::new(Reply::StatusUpdate(TaskStatusUpdateEvent {
            task_id: id.into(),
            context_id: "c".into(),
            status: TaskStatus {
                state,
                message: None,
                timestamp: None,
            },
            metadata: None,
        }))
    }

    #[test]
    fn at_the_task_cap_finished_tasks_go_first_and_running_ones_never() {
        let store = MemoryStore::new(limits(3));
        store
            .insert(task("waiting", "c", TaskState::InputRequired))
            .unwrap();
        store
            .insert(task("done-1", "c", TaskState::Completed))
            .unwrap();
        store
            .insert(task("done-2", "c", TaskState::Failed))
            .unwrap();
        // Full: the oldest finished task makes room, then the next one.
        store
            .insert(task("new-1", "c", TaskState::Working))
            .unwrap();
        assert!(store.get("done-1").is_none() && store.get("done-2").is_some());
        store
            .insert(task("new-2", "c", TaskState::Working))
            .unwrap();
        assert!(store.get("done-2").is_none());
        // Only unfinished tasks left: refused, and nothing was evicted.
        let refused = store.insert(task("new-3", "c", TaskState::Submitted));
        assert_eq!(refused, Err(StoreError::Full(Limit::Tasks(3))));
        let error = mesh_core::error::A2aError::from(refused.unwrap_err());
        assert_eq!(error.code(), -32603);
        assert!(
            error.message.contains("at most 3 tasks"),
            "{}",
            error.message
        );
        for id in ["waiting", "new-1", "new-2"] {
            assert!(store.get(id).is_some(), "{id}");
        }
        // Replacing a record it holds is not new work; a task that finishes makes room.
        store
            .insert(task("waiting", "c", TaskState::Working))
            .unwrap();
        store
            .append(
                "new-1",
                status("new-1", TaskState::Completed),
                Origin::default(),
            )
            .unwrap();
        store
            .insert(task("new-3", "c", TaskState::Submitted))
            .unwrap();
        assert!(store.get("new-1").is_none());
        assert_eq!(store.len(), 3);
    }

    #[test]
    fn over_the_byte_budget_finished_tasks_go_then_new_ones_are_refused() {
        let one = task("x", "c", TaskState::Working).estimated_bytes();
        let store = MemoryStore::new(StoreLimits {
            max_bytes: 3 * one + one / 2,
            ..limits(100)
        });
        store
            .insert(task("done", "c", TaskState::Completed))
            .unwrap();
        store
            .insert(task("run-1", "c", TaskState::Working))
            .unwrap();
        store
            .insert(task("run-2", "c", TaskState::Working))
            .unwrap();
        assert!(store.bytes() <= 3 * one + 16);
        store
            .insert(task("run-3", "c", TaskState::Working))
            .unwrap();
        assert!(store.get("done").is_none(), "the finished task made room");
        let refused = store.insert(task("run-4", "c", TaskState::Working));
        assert!(matches!(refused, Err(StoreError::Full(Limit::Bytes(_)))));
        // A running task goes on growing past the budget; nothing running is evicted.
        for i in 0..100 {
            store
                .append(
                    "run-1",
                    chunk("run-1", &format!("chunk {i}")),
                    Origin::default(),
                )
                .unwrap();
        }
        assert_eq!(store.len(), 3);
        assert!(store.bytes() > 3 * one + one / 2);
    }

    #[test]
    fn a_task_may_not_grow_past_its_limit_but_may_still_end() {
        let store = MemoryStore::new(StoreLimits {
            max_task_bytes: 4096,
            ..limits(10)
        });
        store.insert(task("t", "c", TaskState::Working)).unwrap();
        let big = "x".repeat(1000);
        let mut refused = None;
        for i in 0..10 {
            if let Err(e) = store.append("t", chunk("t", &big), Origin::default()) {
                refused = Some((i, e));
                break;
            }
        }
        let (accepted, error) = refused.expect("refused before 10 KB");
        assert!(accepted >= 1);
        assert!(matches!(
            error,
            StoreError::TaskTooLarge { limit: 4096, .. }
        ));
        assert_eq!(
            store.get("t").unwrap().seq,
            accepted as u64,
            "nothing applied"
        );
        let failed = store
            .append("t", status("t", TaskState::Failed), Origin::default())
            .unwrap();
        assert_eq!(failed.task.status.state, TaskState::Failed);
        let mut huge = task("h", "c", TaskState::Submitted);
        huge.task.metadata = Some(std::collections::HashMap::from_iter([(
            "x".to_owned(),
            serde_json::Value::String("y".repeat(5000)),
        )]));
        assert!(matches!(
            store.insert(huge),
            Err(StoreError::TaskTooLarge { .. })
        ));
    }

    #[test]
    fn a_task_removed_out_of_order_leaves_no_place_in_the_eviction_queue_to_its_slot() {
        let store = MemoryStore::new(limits(3));
        for id in ["x", "a", "y"] {
            store.insert(task(id, "c", TaskState::Completed)).unwrap();
        }
        store.remove("a");
        // "b" takes the slot "a" left, and finishes after "y".
        store.insert(task("b", "c", TaskState::Completed)).unwrap();
        // Full twice over: the oldest finished tasks make room, "x" then "y", not "b" through
        // the place "a" had in the queue.
        store.insert(task("new", "c", TaskState::Working)).unwrap();
        assert!(store.get("x").is_none());
        store
            .insert(task("newer", "c", TaskState::Working))
            .unwrap();
        assert!(store.get("y").is_none(), "the oldest finished task went");
        assert!(
            store.get("b").is_some(),
            "not the newer one in the slot of a removed one"
        );
    }

    #[test]
    fn expires_finished_tasks_only() {
        let store = MemoryStore::new(StoreLimits {
            max_age: Duration::ZERO,
            ..limits(100)
        });
        store
            .insert(task("running", "c", TaskState::Working))
            .unwrap();
        store
            .insert(task("done", "c", TaskState::Completed))
            .unwrap();
        std::thread::sleep(Duration::from_millis(2));
        store.insert(task("new", "c", TaskState::Working)).unwrap();
        assert!(store.get("running").is_some());
        assert!(store.get("done").is_none());
        store.update("running", &mut |r| {
            r.task.status.state = TaskState::Completed
        });
        std::thread::sleep(Duration::from_millis(2));
        // Every insert forgets what is past its age.
        store
            .insert(task("newer", "c", TaskState::Working))
            .unwrap();
        assert!(store.get("running").is_none());
        assert!(store.get("new").is_some());
    }

    #[test]
    fn events_are_numbered_per_task_and_the_log_keeps_the_last_ones() {
        let store = MemoryStore::new(limits(10));
        store.insert(task("t", "c", TaskState::Working)).unwrap();
        store.insert(task("u", "c", TaskState::Working)).unwrap();
        let n = EVENT_LOG_EVENTS as u64 + 10;
        for i in 0..n {
            store
                .append("t", chunk("t", &format!("{i}")), Origin::default())
                .unwrap();
        }
        store
            .append("u", chunk("u", "only"), Origin::default())
            .unwrap();
        assert_eq!(store.get("t").unwrap().seq, n);
        assert_eq!(store.get("u").unwrap().seq, 1);
        let tail = store.events_after("t", n - 3, 100).unwrap();
        let seqs: Vec<u64> = tail.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [n - 2, n - 1, n]);
        assert_eq!(tail[2].reply().unwrap(), *chunk("t", &format!("{}", n - 1)));
        assert_eq!(store.events_after("t", n - 100, 2).unwrap().len(), 2);
        assert_eq!(
            store.events_after("t", 0, 10),
            Err(StoreError::EventsForgotten {
                task: "t".into(),
                first: 11
            })
        );
        assert!(store.events_after("t", n, 10).unwrap().is_empty());
        assert!(matches!(
            store.events_after("nope", 0, 1),
            Err(StoreError::TaskNotFound(_))
        ));
        // A follow-up turn carries the sequence on.
        let mut next = TaskRecord::clone(&store.get("u").unwrap());
        next.task.status.state = TaskState::Submitted;
        store.insert(next).unwrap();
        assert_eq!(
            store
                .append("u", chunk("u", "again"), Origin::default())
                .unwrap()
                .seq,
            2
        );
        let before = store.bytes();
        // A finished task's log goes.
        store
            .append("t", status("t", TaskState::Completed), Origin::default())
            .unwrap();
        assert!(store.bytes() < before);
        assert!(matches!(
            store.events_after("t", n - 3, 10),
            Err(StoreError::EventsForgotten { .. })
        ));
    }

    #[test]
    fn a_whole_task_no_one_else_holds_moves_into_the_record_and_a_shared_one_is_copied() {
        use mesh_core::model::{Message, Role};
        let store = MemoryStore::new(limits(10));
        for id in ["alone", "shared"] {
            store.insert(task(id, "c", TaskState::Submitted)).unwrap();
        }
        let done = |id: &str| {
            let mut task = task(id, "c", TaskState::Completed).task;
            task.history = Some(vec![Message::new(Role::User, vec![Part::text("hi")])]);
            task
        };
        let history = |task: &Task| task.history.as_ref().map(|h| h.as_ptr());

        let alone = done("alone");
        let (expected, before) = (alone.clone(), history(&alone));
        let record = store
            .append("alone", Arc::new(Reply::Task(alone)), Origin::default())
            .unwrap();
        assert_eq!(record.task, expected);
        assert_eq!(history(&record.task), before, "moved, not copied");

        let shared = Arc::new(Reply::Task(done("shared")));
        let record = store
            .append("shared", shared.clone(), Origin::default())
            .unwrap();
        let Reply::Task(sent) = &*shared else {
            unreachable!()
        };
        assert_eq!(&record.task, sent, "the subscribers' event is left whole");
        assert_ne!(history(&record.task), history(sent), "copied");
    }

    #[test]
    fn the_history_an_agent_left_out_moves_back_from_the_task_it_replaces() {
        use mesh_core::model::{Message, Role};
        let store = MemoryStore::new(limits(10));
        let mut submitted = task("t", "c", TaskState::Submitted);
        let question = Message::new(Role::User, vec![Part::text("question")]);
        submitted.task.history = Some(vec![question.clone()]);
        let asked = submitted
            .task
            .history
            .as_ref()
            .map(|h| h[0].message_id.as_ptr());
        store.insert(submitted).unwrap();
        let mut done = task("t", "c", TaskState::Completed).task;
        let answer = Message::new(Role::Agent, vec![Part::text("answer")]);
        done.history = Some(vec![answer.clone()]);
        let origin = Origin {
            history_from: Some(1),
            ..Origin::default()
        };
        let record = store
            .append("t", Arc::new(Reply::Task(done)), origin)
            .unwrap();
        let history = record.task.history.as_deref().unwrap();
        assert_eq!(history, [question, answer]);
        assert_eq!(
            Some(history[0].message_id.as_ptr()),
            asked,
            "moved, not copied"
        );
    }

    #[test]
    fn a_whole_task_as_the_last_event_is_held_once_and_compacted_when_the_record_changes() {
        use mesh_core::model::{Message, Role};
        let store = MemoryStore::new(limits(10));
        store.insert(task("t", "c", TaskState::Submitted)).unwrap();
        let mut working = task("t", "c", TaskState::Working).task;
        working.history = Some(vec![Message::new(Role::User, vec![Part::text("hi")])]);
        let event = Arc::new(Reply::Task(working.clone()));
        store.append("t", event.clone(), Origin::default()).unwrap();
        assert_eq!(
            Arc::strong_count(&event),
            1,
            "the log holds no second copy of a task the record holds"
        );
        let read = |after| store.events_after("t", after, 10);
        let first = read(0).unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].seq, 1);
        assert_eq!(first[0].reply().unwrap(), Reply::Task(working.clone()));
        assert!(read(1).unwrap().is_empty());
        let logged = |store: &MemoryStore| store.read().tasks.get("t").unwrap().log_bytes;
        let with_mark = logged(&store);
        assert!(with_mark > 0);
        // The record changes: the whole Task goes from the log, which starts after it; a
        // reader from before it is told so (and takes the task as it stands).
        store
            .append("t", chunk("t", "x"), Origin::default())
            .unwrap();
        assert!(matches!(
            read(0),
            Err(StoreError::EventsForgotten { first: 2, .. })
        ));
        let after_mark = read(1).unwrap();
        assert_eq!(after_mark.iter().map(|e| e.seq).collect::<Vec<_>>(), [2]);
        assert_eq!(after_mark[0].reply().unwrap(), *chunk("t", "x"));
        assert_eq!(
            logged(&store),
            size::reply(&chunk("t", "x")),
            "the log counts only what it keeps"
        );
        // A change without an event leaves a log with no mark as it is.
        store.update("t", &mut |record| {
            record.task.metadata = Some(Default::default())
        });
        assert_eq!(read(1).unwrap().len(), 1);
        // A task that asks for input is the mark after the events before it; the next
        // message (a new record) compacts them all.
        let mut asking = working.clone();
        asking.status.state = TaskState::InputRequired;
        store
            .append(
                "t",
                Arc::new(Reply::Task(asking.clone())),
                Origin::default(),
            )
            .unwrap();
        let both = read(1).unwrap();
        assert_eq!(both.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(both[1].reply().unwrap(), Reply::Task(asking));
        let mut next = TaskRecord::clone(&store.get("t").unwrap());
        next.task.status.state = TaskState::Submitted;
        store.insert(next).unwrap();
        assert!(matches!(
            read(1),
            Err(StoreError::EventsForgotten { first: 4, .. })
        ));
        assert!(read(3).unwrap().is_empty());
        assert_eq!(logged(&store), 0);
        // Its end drops the log.
        store
            .append("t", status("t", TaskState::Completed), Origin::default())
            .unwrap();
        assert!(matches!(
            store.events_after("t", 0, 10),
            Err(StoreError::EventsForgotten { .. })
        ));
    }

    #[test]
    fn a_status_update_no_one_else_holds_moves_into_the_record_and_is_made_again_when_it_changes() {
        use mesh_core::model::{Message, Role};
        let store = MemoryStore::new(limits(10));
        store.insert(task("t", "c", TaskState::Submitted)).unwrap();
        let saying = |text: &str| {
            let mut update = status("t", TaskState::Working);
            let Some(Reply::StatusUpdate(u)) = Arc::get_mut(&mut update) else {
                unreachable!()
            };
            u.status.message = Some(Message::new(Role::Agent, vec![Part::text(text)]));
            update
        };
        let parts = |record: &TaskRecord| {
            record
                .task
                .status
                .message
                .as_ref()
                .map(|m| m.parts.as_ptr())
        };
        let read = |after| store.events_after("t", after, 10).unwrap();
        let replies = |events: Vec<StoredEvent>| -> Vec<(u64, Reply)> {
            events.iter().map(|e| (e.seq, e.reply().unwrap())).collect()
        };
        let logged = |store: &MemoryStore| store.read().tasks.get("t").unwrap().log.len();

        // Alone: its status moves into the record, and the log keeps no event of its own.
        let waiting = saying("waiting");
        let expected = (*waiting).clone();
        let Reply::StatusUpdate(update) = &*waiting else {
            unreachable!()
        };
        let sent = update.status.message.as_ref().map(|m| m.parts.as_ptr());
        let record = store.append("t", waiting, Origin::default()).unwrap();
        assert_eq!(parts(&record), sent, "moved, not copied");
        assert_eq!(logged(&store), 0);
        assert_eq!(replies(read(0)), [(1, expected.clone())]);

        // The record changes: the event is made of the status it had, as it came; the
        // status message it replaced goes into the history once.
        let next = saying("still waiting");
        let later = (*next).clone();
        store.append("t", next, Origin::default()).unwrap();
        assert_eq!(logged(&store), 1);
        assert_eq!(replies(read(0)), [(1, expected), (2, later.clone())]);
        let history = store.get("t").unwrap().task.history.clone().unwrap();
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].parts, [Part::text("waiting")]);
        store.update("t", &mut |record| {
            record.task.metadata = Some(Default::default())
        });
        assert_eq!(logged(&store), 2);
        assert_eq!(replies(read(1)), [(2, later)]);

        // Shared (a subscriber reads it) or with metadata of its own: logged as it came.
        let shared = saying("shared");
        store
            .append("t", shared.clone(), Origin::default())
            .unwrap();
        let with_metadata = {
            let mut update = saying("with metadata");
            let Some(Reply::StatusUpdate(u)) = Arc::get_mut(&mut update) else {
                unreachable!()
            };
            u.metadata = Some(Default::default());
            update
        };
        store
            .append("t", with_metadata.clone(), Origin::default())
            .unwrap();
        let inner = store.read();
        let log = &inner.tasks.get("t").unwrap().log;
        assert!(Arc::ptr_eq(&log[2].event, &shared));
        assert!(Arc::ptr_eq(&log[3].event, &with_metadata));
        assert!(inner.tasks.get("t").unwrap().last_is_record.is_none());
    }

    /// Where the record's task id lives: a copy of the record would move it, an update in
    /// place does not (no reference to the record is held meanwhile, so a copy would be
    /// made while the original is alive and cannot land at the same address).
    pub(crate) fn id_address(store: &dyn TaskStore, id: &str) -> usize {
        store.get(id).unwrap().task.id.as_ptr() as usize
    }

    #[test]
    fn an_append_changes_the_record_in_place() {
        let store = MemoryStore::new(limits(10));
        store.insert(task("t", "c", TaskState::Working)).unwrap();
        for i in 0..100 {
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
        let now = store.get("t").unwrap();
        assert_eq!(now.task.artifacts.as_ref().unwrap()[0].parts.len(), 100);
    }

    #[test]
    fn lists_with_filters_and_pages() {
        let store = MemoryStore::new(limits(100));
        for i in 0..5 {
            store
                .insert(task(&format!("a{i}"), "ctx-a", TaskState::Completed))
                .unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        store
            .insert(task("b0", "ctx-b", TaskState::Working))
            .unwrap();
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
        let store = MemoryStore::new(limits(10));
        store.insert(task("t", "c", TaskState::Submitted)).unwrap();
        let before = store.get("t").unwrap();
        let after = store
            .update("t", &mut |r| r.task.status.state = TaskState::Working)
            .unwrap();
        assert_eq!(before.task.status.state, TaskState::Submitted);
        assert_eq!(after.task.status.state, TaskState::Working);
    }
}
