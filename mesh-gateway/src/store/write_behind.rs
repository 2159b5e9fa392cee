//! The write-behind queue of the durable stores: the changes the gateway made in memory and
//! a writer has not written yet, taken by that writer in batches.
//!
//! A change is queued under a short mutex, with no I/O: a task's record to write whole (its
//! snapshot, as it is in memory when the writer gets to it) or to delete, one event of its
//! log, a pending webhook delivery to keep or forget. The writer ([`Queue::take`]) takes
//! everything at once and writes it in one transaction; a flusher waits for the queue to be
//! empty ([`Queue::wait_empty`]). The events of a batch stay readable while it is being
//! written ([`Queue::queued_events`]), so a reader sees every event either committed or
//! queued.
//!
//! Only the change that makes the queue non-empty wakes the writer (a system call): the
//! others are queued while it writes, and it takes them along with its next batch.
//!
//! The queue holds events up to [`MAX_QUEUED_EVENT_BYTES`] (estimated); past that (a
//! database that fell far behind) an event is not queued, its task's snapshot is instead (the
//! task loses nothing, its log has a gap) until the queue drains.

use super::PendingDelivery;
use super::memory::LoggedEvent;
use mesh_core::sync::MutexExt;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The most bytes of events the queue holds (see the module docs).
pub(super) const MAX_QUEUED_EVENT_BYTES: usize = 64 << 20;

/// What the writer has not taken yet, and what it is writing now.
pub(super) struct Queue {
    pub(super) state: Mutex<QueueState>,
    /// Wakes the writer.
    pub(super) wake: Condvar,
    /// Wakes flushers when a batch is committed.
    pub(super) done: Condvar,
    /// Wakes the async waiters for a task's writes ([`Queue::written`]) when a batch is
    /// committed.
    pub(super) committed: tokio::sync::Notify,
}

/// What to write of a task's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RecordWork {
    /// Its snapshot, as the record is in memory when the writer gets to it; `fresh`: first
    /// delete what the disk holds of an earlier task of the same id.
    Snapshot { fresh: bool },
    /// Delete its rows.
    Delete,
}

#[derive(Default)]
pub(super) struct QueueState {
    /// Task id → what to write of its record.
    pub(super) records: HashMap<String, RecordWork>,
    /// Task id → its events not written yet, in order (encoded by the writer).
    pub(super) events: HashMap<String, Vec<LoggedEvent>>,
    /// The bytes of the events in `events` (estimated).
    pub(super) event_bytes: usize,
    /// How many events are in `events`.
    pub(super) event_count: usize,
    /// Delivery id → the delivery as it is now, or `None` to delete it.
    pub(super) deliveries: HashMap<u64, Option<Arc<PendingDelivery>>>,
    /// How many changes the writer is committing now.
    pub(super) in_flight: usize,
    /// The events the writer is committing now (readable until they are committed).
    pub(super) in_flight_events: Arc<HashMap<String, Vec<LoggedEvent>>>,
    /// The tasks whose records the writer is committing now.
    pub(super) in_flight_records: Vec<String>,
    /// How many batches the writer took, and how many it is done with.
    pub(super) batches_taken: u64,
    pub(super) batches_done: u64,
    pub(super) closed: bool,
    /// The writer thread has ended.
    pub(super) stopped: bool,
    /// Something was queued since the writer last took the queue (it was woken for it).
    pub(super) woken: bool,
}

impl Queue {
    pub(super) fn new() -> Queue {
        Queue {
            state: Mutex::default(),
            wake: Condvar::new(),
            done: Condvar::new(),
            committed: tokio::sync::Notify::new(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.locked()
    }

    /// After a change: wakes the writer when the change is the first since it last took
    /// the queue (it takes the others along).
    pub(super) fn changed(&self, mut state: MutexGuard<'_, QueueState>) {
        let first = !state.woken;
        state.woken = true;
        drop(state);
        if first {
            self.wake.notify_one();
        }
    }

    pub(super) fn snapshot(&self, id: &str) {
        let mut state = self.lock();
        state.snapshot(id);
        self.changed(state);
    }

    pub(super) fn delete(&self, ids: &[String]) {
        if ids.is_empty() {
            return;
        }
        let mut state = self.lock();
        for id in ids {
            state.delete(id);
        }
        self.changed(state);
    }

    pub(super) fn event(&self, id: &str, event: LoggedEvent, snapshot: bool, evicted: &[String]) {
        let mut state = self.lock();
        if state.event_bytes + event.bytes > MAX_QUEUED_EVENT_BYTES {
            // The disk fell far behind: the task's snapshot stands in for the event.
            state.snapshot(id);
        } else {
            state.event_bytes += event.bytes;
            state.event_count += 1;
            match state.events.get_mut(id) {
                Some(events) => events.push(event),
                None => {
                    state.events.insert(id.to_owned(), vec![event]);
                }
            }
            if snapshot {
                state.snapshot(id);
            }
        }
        for id in evicted {
            state.delete(id);
        }
        self.changed(state);
    }

    pub(super) fn push_delivery(&self, id: u64, delivery: Option<Arc<PendingDelivery>>) {
        let mut state = self.lock();
        state.deliveries.insert(id, delivery);
        self.changed(state);
    }
}

impl QueueState {
    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty() && self.events.is_empty() && self.deliveries.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.records.len() + self.event_count + self.deliveries.len()
    }

    pub(super) fn snapshot(&mut self, id: &str) {
        match self.records.get_mut(id) {
            Some(work @ RecordWork::Delete) => *work = RecordWork::Snapshot { fresh: true },
            Some(RecordWork::Snapshot { .. }) => {}
            None => {
                self.records
                    .insert(id.to_owned(), RecordWork::Snapshot { fresh: false });
            }
        }
    }

    pub(super) fn delete(&mut self, id: &str) {
        if let Some(events) = self.events.remove(id) {
            self.event_count -= events.len();
            self.event_bytes -= events.iter().map(|e| e.bytes).sum::<usize>();
        }
        self.records.insert(id.to_owned(), RecordWork::Delete);
    }
}

/// What the writer takes from the queue at once.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) records: HashMap<String, RecordWork>,
    pub(super) events: Arc<HashMap<String, Vec<LoggedEvent>>>,
    pub(super) event_count: usize,
    pub(super) deliveries: HashMap<u64, Option<Arc<PendingDelivery>>>,
}

impl Batch {
    pub(super) fn len(&self) -> usize {
        self.records.len() + self.event_count + self.deliveries.len()
    }
}

impl Queue {
    /// Waits until there is something to write, the queue is closed, or `at_most` passed.
    /// False when the queue is closed and empty: the writer is done.
    pub(super) fn wait_for_work(&self, at_most: Duration) -> bool {
        let deadline = Instant::now() + at_most;
        let mut state = self.lock();
        while state.is_empty() && !state.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .wake
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        !(state.is_empty() && state.closed)
    }

    /// Takes everything queued, as one batch the writer commits ([`Queue::committed`]
    /// when it is done with it).
    pub(super) fn take(&self) -> Batch {
        let mut state = self.lock();
        let events = Arc::new(std::mem::take(&mut state.events));
        let batch = Batch {
            records: std::mem::take(&mut state.records),
            events: events.clone(),
            event_count: std::mem::take(&mut state.event_count),
            deliveries: std::mem::take(&mut state.deliveries),
        };
        state.event_bytes = 0;
        state.woken = false;
        state.batches_taken += 1;
        state.in_flight = batch.len();
        state.in_flight_events = events;
        state.in_flight_records = batch.records.keys().cloned().collect();
        batch
    }

    /// The writer is done with its batch (committed, or given up).
    /// `then` runs once the batch is out of the queue's view and before any waiter is told:
    /// what a writer does after a commit (letting written tasks go) is done by the time
    /// [`Queue::written`] returns.
    pub(super) fn committed(&self, then: impl FnOnce()) {
        let mut state = self.lock();
        state.batches_done += 1;
        state.in_flight = 0;
        state.in_flight_events = Arc::default();
        state.in_flight_records.clear();
        drop(state);
        then();
        self.done.notify_all();
        self.committed.notify_waiters();
    }

    /// Waits until nothing of task `id` is queued or being written (at most `timeout`).
    pub(super) async fn written(&self, id: &str, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let committed = self.committed.notified();
            tokio::pin!(committed);
            committed.as_mut().enable();
            {
                let state = self.lock();
                if state.holds_nothing_of(id) || state.stopped {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, committed).await.is_err() {
                return;
            }
        }
    }

    /// Waits until everything queued so far is committed (at most `timeout`), however much
    /// is queued after: a reader of the database then sees every change made before.
    pub(super) async fn caught_up(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        let target = {
            let state = self.lock();
            state.batches_taken + u64::from(!state.is_empty())
        };
        loop {
            let committed = self.committed.notified();
            tokio::pin!(committed);
            committed.as_mut().enable();
            {
                let state = self.lock();
                if state.batches_done >= target || state.stopped {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, committed).await.is_err() {
                return;
            }
        }
    }

    /// The writer has ended: flushers stop waiting.
    pub(super) fn stopped(&self) {
        self.lock().stopped = true;
        self.done.notify_all();
        self.committed.notify_waiters();
    }

    /// Asks the writer to write what is queued and end.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }

    /// Waits until everything queued so far is committed (at most `timeout`); true when it
    /// is.
    pub(super) fn wait_empty(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        while !state.is_empty() || state.in_flight > 0 {
            if state.stopped {
                return false;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .done
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// How many changes are queued or being written.
    pub(super) fn pending(&self) -> usize {
        let state = self.lock();
        state.len() + state.in_flight
    }

    /// The events of `id` after `after` (at most `limit`) that are queued or being written,
    /// in order.
    pub(super) fn queued_events(&self, id: &str, after: u64, limit: usize) -> Vec<LoggedEvent> {
        let state = self.lock();
        state
            .in_flight_events
            .get(id)
            .into_iter()
            .chain(state.events.get(id))
            .flatten()
            .filter(|e| e.seq > after)
            .take(limit)
            .cloned()
            .collect()
    }

    /// True when nothing of task `id` is queued or being written.
    pub(super) fn holds_nothing_of(&self, id: &str) -> bool {
        self.lock().holds_nothing_of(id)
    }
}

impl QueueState {
    /// True when nothing of task `id` is queued or being written.
    fn holds_nothing_of(&self, id: &str) -> bool {
        !self.records.contains_key(id)
            && !self.events.contains_key(id)
            && !self.in_flight_events.contains_key(id)
            && !self.in_flight_records.iter().any(|r| r == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer's loop on its own thread until the queue is closed: the sizes of the
    /// batches it took.
    fn writer(queue: Arc<Queue>) -> std::thread::JoinHandle<Vec<usize>> {
        std::thread::spawn(move || {
            let mut batches = Vec::new();
            while queue.wait_for_work(Duration::from_secs(600)) {
                let batch = queue.take();
                if batch.len() > 0 {
                    batches.push(batch.len());
                }
                queue.committed(|| {});
            }
            queue.stopped();
            batches
        })
    }

    #[test]
    fn only_the_first_change_since_the_writer_took_the_queue_wakes_it() {
        let queue = Queue::new();
        queue.snapshot("a");
        assert!(queue.lock().woken);
        queue.snapshot("b");
        queue.delete(&["c".to_owned()]);
        assert_eq!(queue.take().len(), 3);
        assert!(!queue.lock().woken, "the next change wakes it again");
    }

    #[test]
    fn a_writer_woken_once_takes_every_change_queued_meanwhile() {
        let queue = Arc::new(Queue::new());
        let writer = writer(queue.clone());
        for round in 0..100 {
            for i in 0..10 {
                queue.snapshot(&format!("t{round}-{i}"));
            }
            assert!(queue.wait_empty(Duration::from_secs(30)), "round {round}");
        }
        queue.close();
        let batches = writer.join().unwrap();
        assert_eq!(batches.iter().sum::<usize>(), 1000, "{batches:?}");
    }
}
