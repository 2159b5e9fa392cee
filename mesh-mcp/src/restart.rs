//! When to start a dead MCP server again: exponential backoff from a first delay to a cap, back
//! to the first delay once a connection stayed up long enough. Pure state: the connection's
//! supervisor asks it and sleeps.

use std::time::Duration;

/// The delays between attempts to (re)start an MCP server.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    /// A connection up this long counts as healthy: the next failure starts from `first`.
    healthy_after: Duration,
    next: Duration,
}

impl Default for Backoff {
    /// 250 ms doubling to 30 s; healthy after 30 s up.
    fn default() -> Backoff {
        Backoff::new(
            Duration::from_millis(250),
            Duration::from_secs(30),
            Duration::from_secs(30),
        )
    }
}

impl Backoff {
    /// Delays from `first` doubling up to `cap`; a connection up `healthy_after` resets them.
    pub fn new(first: Duration, cap: Duration, healthy_after: Duration) -> Backoff {
        let first = first.max(Duration::from_millis(1));
        Backoff {
            first,
            cap: cap.max(first),
            healthy_after,
            next: first,
        }
    }

    /// The delay before the next attempt, after a connection that lasted `up` (zero when it
    /// never came up), and the one after it doubled.
    pub fn after_failure(&mut self, up: Duration) -> Duration {
        if up >= self.healthy_after {
            self.next = self.first;
        }
        let delay = self.next;
        self.next = (self.next * 2).min(self.cap);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_resets_after_a_healthy_run() {
        let ms = Duration::from_millis;
        let mut backoff = Backoff::new(ms(100), ms(500), ms(1000));
        let delays: Vec<_> = (0..5).map(|_| backoff.after_failure(ms(0))).collect();
        assert_eq!(delays, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
        assert_eq!(backoff.after_failure(ms(999)), ms(500), "not healthy yet");
        assert_eq!(
            backoff.after_failure(ms(1000)),
            ms(100),
            "healthy: from the start"
        );
        assert_eq!(backoff.after_failure(ms(0)), ms(200));
    }
}
