//! Following a task another gateway bridges, when several gateways share the store: its
//! events as that gateway writes them, read from the store each time the store says the task
//! changed ([`TaskStore::changes`]), each once and in order, until one ends it for good.
//!
//! The follower reads the task's log from a sequence number on
//! ([`TaskStore::events_after`]: what is committed, then what this gateway has queued), so a
//! resumed stream (`Last-Event-ID`) and a fresh one are the same thing: a log read from a
//! point, then kept reading. A change that was not announced (a notification lost while the
//! store's listener reconnected, a task id too long to announce) is read at the latest
//! [`POLL_EVERY`] later. A log that no longer holds the next event (the task was trimmed or
//! evicted meanwhile) is replaced by the task as it stands.

use crate::bridge::{Live, Seq, Subscription, subscription};
use crate::store::{ANY_TASK, StoreError, TaskRecord, TaskStore};
use mesh_core::rpc::Reply;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// How many events a follower reads at once.
const READ_BATCH: usize = 256;

/// How many events wait for a slow client before the follower waits for it (it reads the
/// store, so nothing is missed meanwhile).
const CAPACITY: usize = 256;

/// The longest a follower waits without an announced change before reading again.
pub(crate) const POLL_EVERY: Duration = Duration::from_secs(2);

/// The events of `task_id` after `after`, as the store logs them, until the task ends for
/// good, the client goes away or the gateway shuts down. `resumed`: `after` is a client's
/// `Last-Event-ID`, which the log may not hold (see [`Follower::ended_behind`]).
pub(crate) fn follow(
    store: Arc<dyn TaskStore>,
    changes: broadcast::Receiver<Arc<str>>,
    task_id: String,
    after: Seq,
    resumed: bool,
    shutdown: CancellationToken,
) -> Subscription {
    let (tx, rx) = subscription(CAPACITY);
    tokio::spawn(async move {
        let follower = Follower {
            store,
            changes,
            task_id,
            tx,
            shutdown,
            after_unlogged: resumed,
        };
        follower.run(after).await;
    });
    rx
}

struct Follower {
    store: Arc<dyn TaskStore>,
    changes: broadcast::Receiver<Arc<str>>,
    task_id: String,
    tx: flume::Sender<Live>,
    shutdown: CancellationToken,
    /// The position followed from is a client's, not yet matched by an event of the log.
    after_unlogged: bool,
}

/// What one reading of the log came to.
enum Read {
    /// Every event there was is handed out; the task goes on.
    UpToDate,
    /// The task ended for good, or the client went away: the follower is done.
    Done,
}

impl Follower {
    async fn run(mut self, mut after: Seq) {
        loop {
            match self.read(&mut after).await {
                Read::Done => return,
                Read::UpToDate => {}
            }
            if !self.wait_for_change().await {
                return;
            }
        }
    }

    /// Hands out every logged event after `after` (moved on as they go).
    async fn read(&mut self, after: &mut Seq) -> Read {
        loop {
            let read = self
                .store
                .events_after(&self.task_id, *after, READ_BATCH)
                .await;
            let events = match read {
                Ok(events) => events,
                Err(StoreError::EventsForgotten { .. }) => return self.resynchronise(after).await,
                Err(StoreError::TaskNotFound(_)) => return Read::Done,
                Err(error) => {
                    // The database is away: read again at the next change or poll.
                    tracing::warn!(task = %self.task_id, %error, "following a task: cannot read its events");
                    return Read::UpToDate;
                }
            };
            if events.is_empty() {
                return if self.after_unlogged {
                    self.ended_behind(after).await
                } else {
                    Read::UpToDate
                };
            }
            self.after_unlogged = false;
            let full = events.len() == READ_BATCH;
            for event in events {
                let reply = event.reply();
                let ends = super::events::ends_for_good(reply.as_ref());
                *after = event.seq;
                let live = Live::Event(event.seq, reply.map(Arc::new).map_err(Arc::new));
                if self.tx.send_async(live).await.is_err() || ends {
                    return Read::Done;
                }
            }
            if !full {
                return Read::UpToDate;
            }
        }
    }

    /// Nothing logged after `after`: the task goes on, unless it ended at or before `after`.
    /// That happens when the follower started after events the log does not hold: a
    /// gateway streamed them and died before writing them, and another ended the task
    /// (its session and those events lost with it). Its end is then behind the follower,
    /// which hands out the task as it stands rather than wait for events that never come.
    /// Only a follower resumed from a client's position can be there, and only until an
    /// event of the log comes after it.
    async fn ended_behind(&mut self, after: &mut Seq) -> Read {
        match self.store.load(&self.task_id).await {
            Ok(Some(record)) if record.task.status.state.is_terminal() && record.seq <= *after => {
                self.hand_out_task(&record, after).await
            }
            _ => Read::UpToDate,
        }
    }

    /// The log lost the next event: the task as it stands takes the place of what is gone.
    async fn resynchronise(&mut self, after: &mut Seq) -> Read {
        let Ok(Some(record)) = self.store.load(&self.task_id).await else {
            return Read::Done;
        };
        self.hand_out_task(&record, after).await
    }

    /// Hands out `record`'s task as one event, from which the follower goes on.
    async fn hand_out_task(&mut self, record: &TaskRecord, after: &mut Seq) -> Read {
        *after = record.seq;
        self.after_unlogged = false;
        let task = Reply::Task(record.task.clone());
        let ends = super::events::ends_for_good(Ok(&task));
        if self
            .tx
            .send_async(Live::Event(record.seq, Ok(Arc::new(task))))
            .await
            .is_err()
            || ends
        {
            return Read::Done;
        }
        Read::UpToDate
    }

    /// Waits until the store says the task (or any task) changed, or [`POLL_EVERY`]; false
    /// when the follower should stop (the gateway shuts down, or its client went away: seen
    /// here, so at most [`POLL_EVERY`] after it left).
    async fn wait_for_change(&mut self) -> bool {
        if self.tx.is_disconnected() {
            return false;
        }
        let poll = tokio::time::sleep(POLL_EVERY);
        tokio::pin!(poll);
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return false,
                () = &mut poll => return true,
                change = self.changes.recv() => match change {
                    Ok(id) if *id == *self.task_id || &*id == ANY_TASK => return true,
                    Ok(_) => {}
                    // Missed some: any of them may be this task's.
                    Err(broadcast::error::RecvError::Lagged(_)) => return true,
                    // The store closed: the poll alone then.
                    Err(broadcast::error::RecvError::Closed) => {
                        (&mut poll).await;
                        return true;
                    }
                },
            }
        }
    }
}
