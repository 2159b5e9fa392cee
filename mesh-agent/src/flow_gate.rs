//! The agent's side of flow control ([`mesh_core::flow`]): a streaming request that asked for
//! a window has its events wait, before they are published, until the requester has
//! credited their position; credits arrive on the task's cancel topic and move a watch value.
//! The wait ends early when the task is canceled, when the request's deadline passes, or when
//! the task leaves the instance's running set (its credit sender dropped): the events then
//! go without credit, so that the end of a task is never held up.

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where credits for one task arrive: kept with the running task.
pub(crate) type CreditSender = watch::Sender<u64>;

/// What an emitter waits on before publishing past its window.
pub(crate) struct FlowGate {
    window: u64,
    credit: watch::Receiver<u64>,
    deadline: Instant,
    cancel: CancellationToken,
}

impl FlowGate {
    /// A gate of `window` events, and the sender its credits go to.
    pub(crate) fn new(
        window: u32,
        deadline: Instant,
        cancel: CancellationToken,
    ) -> (FlowGate, CreditSender) {
        let (sender, credit) = watch::channel(0);
        let gate = FlowGate {
            window: u64::from(window),
            credit,
            deadline,
            cancel,
        };
        (gate, sender)
    }

    /// Returns once the event at position `seq` may be published.
    pub(crate) async fn admit(&mut self, seq: u64) {
        let window = self.window;
        let open = move |credited: &u64| seq < credited.saturating_add(window);
        if open(&self.credit.borrow()) {
            return;
        }
        tokio::select! {
            // `Err`: the sender is gone, the task no longer runs here.
            _ = self.credit.wait_for(open) => {}
            () = self.cancel.cancelled() => {}
            () = tokio::time::sleep_until(self.deadline) => {}
        }
    }
}

/// Takes a credit in: the position only ever moves forward.
pub(crate) fn credit(sender: &CreditSender, seq: u64) {
    sender.send_if_modified(|credited| {
        let moved = seq > *credited;
        if moved {
            *credited = seq;
        }
        moved
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn events_past_the_window_wait_for_credit_cancel_or_deadline() {
        let cancel = CancellationToken::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        let (mut gate, sender) = FlowGate::new(4, deadline, cancel.clone());
        // The window's events go at once.
        for seq in 0..4 {
            tokio::time::timeout(Duration::from_millis(1), gate.admit(seq))
                .await
                .expect("within the window");
        }
        // The next waits for a credit that covers it; an older credit does not move it back.
        let waiting = tokio::time::timeout(Duration::from_secs(1), gate.admit(4)).await;
        assert!(waiting.is_err(), "past the window without credit");
        credit(&sender, 1);
        credit(&sender, 0);
        assert_eq!(*sender.borrow(), 1);
        tokio::time::timeout(Duration::from_millis(1), gate.admit(4))
            .await
            .expect("credited");
        // A cancel ends the wait; so does the deadline; so does the sender's end.
        let (mut gate, _sender) = FlowGate::new(1, deadline, cancel.clone());
        cancel.cancel();
        tokio::time::timeout(Duration::from_millis(1), gate.admit(5))
            .await
            .expect("canceled");
        let started = Instant::now();
        let deadline = started + Duration::from_secs(60);
        let (mut gate, _sender) = FlowGate::new(1, deadline, CancellationToken::new());
        gate.admit(5).await;
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        let (mut gate, sender) = FlowGate::new(1, deadline, CancellationToken::new());
        drop(sender);
        tokio::time::timeout(Duration::from_millis(1), gate.admit(5))
            .await
            .expect("the task left");
    }
}
