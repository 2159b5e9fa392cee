//! A task's events as a binding streams them ([`TaskEvents`]): the events already known (the
//! first event of a send, a subscriber's snapshot), then the live ones, in order, and the end.
//!
//! A send's stream ends after the event that ends the turn (a terminal or interrupted state,
//! a direct message, an error); a subscription's after a terminal state only (an interrupted
//! task's subscriber gets the events of its next message, whoever sends it: spec 1.0
//! §3.1.6). A subscriber that stopped reading long enough to miss events is resynchronised
//! with the task as the store has it. Every stream ends when the gateway shuts down. The
//! bindings only encode: server-sent events in a dialect, gRPC server streaming.
//!
//! Each event comes with its sequence number in the task ([`Seq`]: the store's, across every
//! turn), which the SSE bindings send as the event's `id`: a client that lost its stream
//! subscribes again with `Last-Event-ID` and gets the events after it, then the live ones
//! ([`A2aService::subscribe`](super::A2aService::subscribe)).

use super::A2aService;
use crate::bridge::{Live, LiveEvent, Seq, Subscription, ends_task, task_event, view};
use crate::metrics::StreamGuard;
use crate::store::TaskStore;
use mesh_core::error::A2aError;
use mesh_core::rpc::Reply;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// One task's events for one client (see the module docs).
pub(crate) struct TaskEvents {
    /// Events already known, not yet handed out.
    first: VecDeque<(Seq, LiveEvent)>,
    /// The live events after them; `None` when the stream is only `first`.
    live: Option<Subscription>,
    /// Where to resynchronise a subscriber that fell behind.
    store: Arc<dyn TaskStore>,
    task_id: String,
    shutdown: CancellationToken,
    /// Ends at a terminal state only, not at an interrupted one.
    until_terminal: bool,
    /// Continues a stream the client had (`Last-Event-ID`): a task handed out is the rest
    /// of that stream, not its opening.
    pub(crate) resumed: bool,
    done: bool,
    /// Counts the stream in `mesh_gateway_sse_streams_open` while it lives.
    _open: StreamGuard,
}

impl A2aService {
    /// The events of `task_id` for one client: `first`, then those of `live`; a subscription
    /// (`until_terminal`) ends at a terminal state only.
    pub(crate) fn events(
        &self,
        task_id: String,
        first: Vec<(Seq, LiveEvent)>,
        live: Option<Subscription>,
        until_terminal: bool,
    ) -> TaskEvents {
        TaskEvents {
            first: first.into(),
            live,
            store: self.store().clone(),
            task_id,
            shutdown: self.shutdown.clone(),
            until_terminal,
            resumed: false,
            done: false,
            _open: self.metrics.stream_opened(),
        }
    }
}

impl TaskEvents {
    /// The next event and its sequence number; `None` once the stream is over.
    pub(crate) async fn next(&mut self) -> Option<(Seq, LiveEvent)> {
        if self.done {
            return None;
        }
        if let Some((seq, event)) = self.first.pop_front() {
            let event = self.handing_out(event);
            return Some((seq, self.settled(event).await));
        }
        let live = self.live.as_mut()?;
        let received = tokio::select! {
            _ = self.shutdown.cancelled() => return None,
            received = live.recv() => received,
        };
        match received {
            Some(Live::Event(seq, event)) => {
                let event = self.handing_out(event);
                Some((seq, self.settled(event).await))
            }
            // Not sent to a reader of content; read as the task it ended with all the same.
            Some(Live::Ended(seq, record)) => {
                let event = self.handing_out(task_event(&record));
                Some((seq, self.settled(event).await))
            }
            Some(Live::Lagged) => {
                tracing::debug!(task = %self.task_id, "slow subscriber resynchronised");
                let Some(record) = self.record().await else {
                    self.done = true;
                    return None;
                };
                Some((record.seq, self.handing_out(task_event(&record))))
            }
            None => {
                // The pump ended without a final event (stopped): close with the task as it
                // stands when that ends it.
                self.done = true;
                let record = self.record().await?;
                let task = Reply::Task(record.task.clone());
                ends_task(&task).then(|| (record.seq, Ok(Arc::new(task))))
            }
        }
    }

    /// The task as it is now: in the working set while its turn runs, else in the store.
    async fn record(&self) -> Option<Arc<crate::store::TaskRecord>> {
        match self.store.get(&self.task_id) {
            Some(record) => Some(record),
            None => self.store.load(&self.task_id).await.ok().flatten(),
        }
    }

    /// `event`, once the store has it where every gateway sharing it reads it when it ends
    /// the stream (at once with a store of one gateway): a client that hears a task ended
    /// finds it ended through any replica.
    async fn settled(&self, event: LiveEvent) -> LiveEvent {
        if self.done && self.store.shared() {
            self.store.written(&self.task_id).await;
        }
        event
    }

    /// Notes whether `event` ends the stream, and hands it out.
    fn handing_out(&mut self, event: LiveEvent) -> LiveEvent {
        let reply = view(&event);
        let ends_turn = match reply {
            Ok(reply) => ends_task(reply),
            Err(_) => true,
        };
        self.done = ends_turn && (!self.until_terminal || ends_for_good(reply));
        event
    }
}

/// True for an event after which the task never changes again: a terminal state, a direct
/// message, an error.
pub(super) fn ends_for_good(event: Result<&Reply, &A2aError>) -> bool {
    match event {
        Ok(reply) => crate::task_events::ends_for_good(reply),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    //! The stream's rules without a broker: a live task is a channel, the store a memory one.
    use super::*;
    use crate::bridge::status_event;
    use crate::metrics::Metrics;
    use crate::store::{MemoryStore, StoreLimits, TaskRecord};
    use mesh_core::dialect::Dialect;
    use mesh_core::model::{Task, TaskState};

    fn task(state: TaskState) -> Task {
        crate::store::test_records::task("t1", "c1", state).task
    }

    fn status(state: TaskState) -> Live {
        Live::Event(
            0,
            Ok(Arc::new(Reply::StatusUpdate(status_event(
                &task(state.clone()),
                state,
                None,
            )))),
        )
    }

    struct Setup {
        events: TaskEvents,
        live: flume::Sender<Live>,
        store: Arc<MemoryStore>,
        shutdown: CancellationToken,
    }

    fn setup(first: TaskState, until_terminal: bool) -> Setup {
        let store = Arc::new(MemoryStore::new(StoreLimits::default()));
        store
            .insert(TaskRecord::new(task(first.clone()), "agent", Dialect::V1_0))
            .expect("the store takes the task");
        let (live, subscription) = crate::bridge::subscription(16);
        let shutdown = CancellationToken::new();
        let events = TaskEvents {
            first: VecDeque::from([(1, Ok(Arc::new(Reply::Task(task(first)))))]),
            live: Some(subscription),
            store: store.clone(),
            task_id: "t1".into(),
            shutdown: shutdown.clone(),
            until_terminal,
            resumed: false,
            done: false,
            _open: Arc::new(Metrics::new()).stream_opened(),
        };
        Setup {
            events,
            live,
            store,
            shutdown,
        }
    }

    /// The states of the events handed out until the stream ends (bounded).
    async fn states(events: &mut TaskEvents) -> Vec<TaskState> {
        let mut states = Vec::new();
        let drain = async {
            while let Some((_, event)) = events.next().await {
                states.push(match event.as_deref() {
                    Ok(Reply::Task(task)) => task.status.state.clone(),
                    Ok(Reply::StatusUpdate(update)) => update.status.state.clone(),
                    _ => TaskState::Unspecified,
                });
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), drain)
            .await
            .expect("the stream ends");
        states
    }

    #[tokio::test]
    async fn a_send_stream_ends_at_an_interrupted_state() {
        let mut s = setup(TaskState::Submitted, false);
        for state in [
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::Completed,
        ] {
            s.live.send_async(status(state)).await.unwrap();
        }
        assert_eq!(
            states(&mut s.events).await,
            [
                TaskState::Submitted,
                TaskState::Working,
                TaskState::InputRequired
            ]
        );
    }

    #[tokio::test]
    async fn a_subscription_follows_the_task_past_an_interrupted_state_to_its_end() {
        let mut s = setup(TaskState::InputRequired, true);
        for state in [
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::Working,
            TaskState::Completed,
            TaskState::Working,
        ] {
            s.live.send_async(status(state)).await.unwrap();
        }
        assert_eq!(
            states(&mut s.events).await,
            [
                TaskState::InputRequired,
                TaskState::Working,
                TaskState::InputRequired,
                TaskState::Working,
                TaskState::Completed
            ]
        );
    }

    #[tokio::test]
    async fn a_subscriber_that_fell_behind_is_resynchronised_from_the_store() {
        let mut s = setup(TaskState::Working, false);
        s.store
            .insert(TaskRecord::new(
                task(TaskState::Completed),
                "agent",
                Dialect::V1_0,
            ))
            .unwrap();
        s.live.send_async(Live::Lagged).await.unwrap();
        assert_eq!(
            states(&mut s.events).await,
            [TaskState::Working, TaskState::Completed]
        );
    }

    #[tokio::test]
    async fn a_pump_that_stops_closes_the_stream_with_the_task_when_that_ends_it() {
        let mut s = setup(TaskState::Working, false);
        s.store
            .insert(TaskRecord::new(
                task(TaskState::Failed),
                "agent",
                Dialect::V1_0,
            ))
            .unwrap();
        drop(s.live);
        assert_eq!(
            states(&mut s.events).await,
            [TaskState::Working, TaskState::Failed]
        );

        // A task that goes on (stopped at shutdown, say) ends the stream without an event.
        let mut s = setup(TaskState::Working, false);
        drop(s.live);
        assert_eq!(states(&mut s.events).await, [TaskState::Working]);
    }

    #[tokio::test]
    async fn an_error_ends_the_stream_and_so_does_shutdown() {
        let mut s = setup(TaskState::Working, true);
        s.live
            .send_async(Live::Event(0, Err(Arc::new(A2aError::internal("gone")))))
            .await
            .unwrap();
        s.live
            .send_async(status(TaskState::Completed))
            .await
            .unwrap();
        assert_eq!(
            states(&mut s.events).await,
            [TaskState::Working, TaskState::Unspecified]
        );

        let mut s = setup(TaskState::Working, true);
        s.shutdown.cancel();
        assert_eq!(states(&mut s.events).await, [TaskState::Working]);
    }
}
