//! Flow control of a reply stream: the requester's credit, the budget its streams share, and
//! the one reader and writer of its message on the bus.
//!
//! A streaming request carries `_mesh.window` (W). The agent publishes the event at position
//! `seq` only once the requester has credited a position `c` with `seq < c + W`: the first W
//! events go at once, and then the agent waits for the requester, instead of filling the
//! broker's queue for it (where a broker drops what passes its limit) or the requester's
//! buffer. The requester credits as its consumer takes events, with a notification on the
//! task's cancel topic (every instance of the agent hears it; the one running the task acts):
//!
//! ```json
//! {"jsonrpc":"2.0","method":"mesh/credit","params":{"id":"<task id>","seq":1024}}
//! ```
//!
//! `seq` is at least the position after the last event taken (the count of events taken, for
//! a stream read from its start), and may run ahead of it: what runs ahead widens the stream's
//! window beyond W. A credit never lowers an earlier one. An agent that does not know the
//! method ignores it, as it ignores any notification it does not know on that topic. The
//! request's deadline bounds every wait: past it the agent publishes without credit (its task
//! fails at the deadline anyway). docs/protocol.md, section 3.4.
//!
//! A window bounds one stream; the streams of one requester share a budget. Each asks for a
//! small window ([`BASE_WINDOW`]) and widens it, up to [`MAX_WINDOW`], with events borrowed
//! from its requester's [`FlowBudget`] (credited ahead of its reader) while it is fast or
//! widening makes it faster, giving them back when it ends ([`StreamCredit`]). So the events
//! a requester's streams may be sent before their readers take them are at most
//! `BASE_WINDOW` a stream plus the budget, however many of them are fast, where a window of
//! `MAX_WINDOW` each would let every fast stream hold that many.

use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The window a streaming request asks for (`_mesh.window`): what every stream has, however
/// many its requester runs.
pub const BASE_WINDOW: u32 = 16;

/// The widest a stream's window grows: what the requester's buffer for one stream holds.
pub const MAX_WINDOW: u64 = 256;

/// The events beyond their base windows that one requester's streams may be lent between
/// them (a gateway instance's, or a calling agent's).
pub const SHARED_BUDGET: u64 = 512;

/// The JSON-RPC method of a credit.
pub const CREDIT_METHOD: &str = "mesh/credit";

/// A credit as the agent reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credit {
    /// The task whose stream it credits.
    pub task_id: String,
    /// The position credited: at least the one after the last event the requester took.
    pub seq: u64,
}

/// The payload of a credit for `task_id`, up to position `seq`.
pub fn encode_credit(task_id: &str, seq: u64) -> Vec<u8> {
    let notification = serde_json::json!({
        "jsonrpc": "2.0",
        "method": CREDIT_METHOD,
        "params": {"id": task_id, "seq": seq},
    });
    notification.to_string().into_bytes()
}

/// Reads a credit; `None` for anything else (a cancel request, another method, a credit
/// without a task id or a position).
pub fn decode_credit(payload: &[u8]) -> Option<Credit> {
    #[derive(Deserialize)]
    struct Notification<'a> {
        #[serde(borrow)]
        method: std::borrow::Cow<'a, str>,
        params: Params,
    }
    #[derive(Deserialize)]
    struct Params {
        id: String,
        seq: u64,
    }
    let notification: Notification = serde_json::from_slice(payload).ok()?;
    (notification.method == CREDIT_METHOD).then_some(Credit {
        task_id: notification.params.id,
        seq: notification.params.seq,
    })
}

/// The events beyond their base windows that one requester's streams share (see the module
/// docs): lent to a stream whose window sets its pace, given back when it ends.
#[derive(Debug)]
pub struct FlowBudget {
    size: u64,
    free: AtomicU64,
}

impl FlowBudget {
    /// A budget of `events`.
    pub fn new(events: u64) -> FlowBudget {
        FlowBudget {
            size: events,
            free: AtomicU64::new(events),
        }
    }

    /// The events not lent to any stream now.
    pub fn free(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }

    /// The events lent to streams now.
    pub fn lent(&self) -> u64 {
        self.size.saturating_sub(self.free())
    }

    /// Lends up to `want` events: what it lent (all of them, fewer, or none).
    fn lend(&self, want: u64) -> u64 {
        let mut lent = 0;
        // `fetch_update` retries on a race; the closure never refuses.
        let _ = self
            .free
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |free| {
                lent = want.min(free);
                Some(free - lent)
            });
        lent
    }

    fn give_back(&self, events: u64) {
        if events > 0 {
            self.free.fetch_add(events, Ordering::Relaxed);
        }
    }
}

impl Default for FlowBudget {
    fn default() -> FlowBudget {
        FlowBudget::new(SHARED_BUDGET)
    }
}

/// Where a stream's window stands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Growth {
    /// The first round: its rate counts the events that were on their way at once, not the
    /// pace the window sets, and is not compared.
    FirstRound,
    /// At the window the round began with, nothing tried yet.
    Unprobed,
    /// Just doubled: the round before it took events at `rate_before` (events a second). The
    /// first round after it is still paced by the credits given before (`took_effect` false)
    /// and is not compared.
    Doubled {
        rate_before: f32,
        borrowed_before: u16,
        took_effect: bool,
    },
    /// Widened for its rate (at least [`FAST_RATE`]): halved every round it takes less than
    /// half of that.
    Fast,
    /// A doubling did not pay, `rounds` rounds ago: the window stays, until
    /// [`REPROBE_AFTER`] rounds have passed (the stream's pace may have changed).
    Settled { rounds: u32 },
    /// A stream taken over: the window it asked for is not known, and it never grows.
    Fixed,
}

/// How much faster a round must take its events after the window doubled for the doubling
/// to be kept: the window set the pace if the rate about doubled with it.
const PAID_OFF: f32 = 1.5;

/// How many rounds a stream's window stays as it settled before a doubling is tried again.
const REPROBE_AFTER: u32 = 32;

/// The rate (events a second) from which a stream's window doubles every round, whether or
/// not that makes it faster: a window costs a credit (a bus message both ways) every quarter
/// of it, and a stream this fast would spend more on its credits than a wider window costs.
const FAST_RATE: f32 = 4_000.0;

/// One stream's credit (pure state, no I/O, the time given): when to credit its agent, and
/// how far. Every round of a window's events taken, its window doubles (borrowing from the
/// budget, up to [`MAX_WINDOW`]) while the stream is fast ([`FAST_RATE`]), or while
/// doubling pays: the last doubling made the events come about as much faster, which is what
/// a window that sets the pace does (the agent waits a round trip for credit each round). A
/// stream whose agent or reader sets a slower pace gains nothing from it, gives the doubling
/// back and stays (trying again every [`REPROBE_AFTER`] rounds). What it holds of the budget
/// goes back when it is dropped.
#[derive(Debug)]
pub struct StreamCredit {
    budget: Arc<FlowBudget>,
    /// The events of the budget the window counts beyond [`BASE_WINDOW`].
    borrowed: u16,
    /// The events of the budget held: `borrowed`, or more while credits given before the
    /// window narrowed still let the agent send that far.
    held: u16,
    growth: Growth,
    /// The position the reader had taken at the last credit.
    from: u64,
    /// The last position credited: the agent may publish positions before
    /// `credited + BASE_WINDOW`.
    credited: u64,
    /// The round of the window under way: the position it began at, and the time (read at
    /// the end of the first round: nothing is compared before).
    round_from: u64,
    round_began: Option<Instant>,
}

impl StreamCredit {
    /// The credit of a stream that asked for [`BASE_WINDOW`], read from position `next` on;
    /// its window grows out of `budget`.
    pub fn new(budget: Arc<FlowBudget>, next: u64) -> StreamCredit {
        StreamCredit {
            budget,
            borrowed: 0,
            held: 0,
            growth: Growth::FirstRound,
            from: next,
            credited: next,
            round_from: next,
            round_began: None,
        }
    }

    /// The credit of a stream taken over from position `next` on (a requester that is gone
    /// made the request): the window it asked for is not known, so the stream is credited as
    /// often as the smallest window needs and never widened (a request that asked for more,
    /// [`MAX_WINDOW`] at most, still fits the stream's buffer).
    pub fn taken_over(budget: Arc<FlowBudget>, next: u64) -> StreamCredit {
        let mut credit = StreamCredit::new(budget, next);
        credit.growth = Growth::Fixed;
        credit
    }

    /// The window the stream has now: what a credit lets the agent send beyond what the
    /// reader took.
    pub fn window(&self) -> u64 {
        u64::from(BASE_WINDOW) + u64::from(self.borrowed)
    }

    /// The reader took every event before position `next`: the position to credit now, when
    /// a credit is due (the reader took a quarter of the window since the last one). `now`
    /// reads the clock, once a round.
    pub fn taken(&mut self, next: u64, now: impl FnOnce() -> Instant) -> Option<u64> {
        if next >= self.round_from + self.window() {
            self.round_ended(next, now());
        }
        // What a credit given before no longer promises goes back.
        let promised = u16::try_from(self.credited.saturating_sub(next)).unwrap_or(u16::MAX);
        let held = self.borrowed.max(promised).min(self.held);
        self.budget.give_back(u64::from(self.held - held));
        self.held = held;
        (next >= self.from + (self.window() / 4).max(1)).then(|| self.credit_at(next))
    }

    /// A round of the window's events was taken: grow, keep or narrow the window.
    fn round_ended(&mut self, next: u64, now: Instant) {
        let events = (next - self.round_from) as f32;
        self.round_from = next;
        let Some(began) = self.round_began.replace(now) else {
            return;
        };
        let rate = events / now.saturating_duration_since(began).as_secs_f32().max(1e-9);
        let growth = self.growth;
        if rate >= FAST_RATE && !matches!(growth, Growth::FirstRound | Growth::Fixed) {
            self.double();
            self.growth = Growth::Fast;
            return;
        }
        self.growth = match growth {
            Growth::Fixed => Growth::Fixed,
            Growth::FirstRound => Growth::Unprobed,
            Growth::Fast if rate < FAST_RATE / 2.0 => {
                self.borrowed /= 2;
                match self.borrowed {
                    0 => Growth::Unprobed,
                    _ => Growth::Fast,
                }
            }
            Growth::Fast => Growth::Fast,
            Growth::Doubled {
                took_effect: false,
                rate_before,
                borrowed_before,
            } => Growth::Doubled {
                rate_before,
                borrowed_before,
                took_effect: true,
            },
            Growth::Doubled {
                rate_before,
                borrowed_before,
                ..
            } if rate < rate_before * PAID_OFF => {
                // Undone: credits from now on lend the window it had.
                self.borrowed = borrowed_before;
                Growth::Settled { rounds: 0 }
            }
            Growth::Settled { rounds } if rounds < REPROBE_AFTER => {
                Growth::Settled { rounds: rounds + 1 }
            }
            Growth::Unprobed | Growth::Doubled { .. } | Growth::Settled { .. } => {
                let borrowed_before = self.borrowed;
                match self.double() {
                    0 => Growth::Settled { rounds: 0 },
                    _ => Growth::Doubled {
                        rate_before: rate,
                        borrowed_before,
                        took_effect: false,
                    },
                }
            }
        };
    }

    /// Doubles the window, as far as [`MAX_WINDOW`] and the budget allow: the events lent.
    fn double(&mut self) -> u16 {
        let window = self.window();
        let lent = self.budget.lend((window * 2).min(MAX_WINDOW) - window);
        // At most MAX_WINDOW in all.
        let lent = lent as u16;
        self.borrowed += lent;
        self.held += lent;
        lent
    }

    fn credit_at(&mut self, next: u64) -> u64 {
        self.from = next;
        self.credited = self.credited.max(next + u64::from(self.borrowed));
        self.credited
    }
}

impl Drop for StreamCredit {
    fn drop(&mut self) {
        self.budget.give_back(u64::from(self.held));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credit_reads_back_as_written_and_nothing_else_reads_as_one() {
        let payload = encode_credit("t-1", 1024);
        assert_eq!(
            decode_credit(&payload),
            Some(Credit {
                task_id: "t-1".into(),
                seq: 1024
            })
        );
        for other in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":"t-1"}}"#,
            r#"{"jsonrpc":"2.0","method":"mesh/other","params":{"id":"t-1","seq":3}}"#,
            r#"{"jsonrpc":"2.0","method":"mesh/credit","params":{"id":"t-1"}}"#,
            r#"{"jsonrpc":"2.0","method":"mesh/credit","params":{"id":"t-1","seq":-1}}"#,
            "not json",
        ] {
            assert_eq!(decode_credit(other.as_bytes()), None, "{other}");
        }
    }

    /// A stream's agent, as its requester sees it: it sends up to the limit of the credits that
    /// reached it, a round trip of `rtt` after they were given, at most `rate` events a second.
    /// The reader takes each event as it comes. Runs `rounds` round trips from `t0` (seconds
    /// after `start`) and returns the events taken and the time reached.
    fn run(
        credit: &mut StreamCredit,
        rtt: f64,
        rate: f64,
        rounds: usize,
        (start, t0): (Instant, f64),
    ) -> (u64, f64) {
        let base = u64::from(BASE_WINDOW);
        let mut next = credit.from;
        let mut limit = credit.credited + base;
        let mut now = t0;
        // When the agent has its next event ready.
        let mut ready = t0 + 1.0 / rate;
        for _ in 0..rounds {
            // The credits given this round reach the agent at the end of it.
            let mut granted = limit;
            let round_end = now + rtt;
            while next < limit && ready <= round_end {
                next += 1;
                let at = start + std::time::Duration::from_secs_f64(ready);
                if let Some(c) = credit.taken(next, || at) {
                    granted = granted.max(c + base);
                }
                ready += 1.0 / rate;
            }
            now = round_end;
            // An agent that waited for credit sends its event as the credit comes.
            ready = ready.max(now);
            limit = granted;
        }
        (next, now)
    }

    #[test]
    fn a_window_that_sets_the_pace_doubles_out_of_the_budget_and_goes_back_at_the_end() {
        let budget = Arc::new(FlowBudget::new(512));
        let mut credit = StreamCredit::new(budget.clone(), 0);
        // A 10 ms round trip, an agent that could send a million events a second: the
        // window is all that holds it back.
        run(&mut credit, 0.010, 1e6, 40, (Instant::now(), 0.0));
        assert_eq!(credit.window(), MAX_WINDOW);
        assert_eq!(budget.free(), 512 - (MAX_WINDOW - 16));
        assert_eq!(budget.lent(), MAX_WINDOW - 16);
        drop(credit);
        assert_eq!(budget.free(), 512);
        assert_eq!(budget.lent(), 0);
    }

    #[test]
    fn a_slow_agent_keeps_the_base_window() {
        let budget = Arc::new(FlowBudget::new(512));
        let mut credit = StreamCredit::new(budget.clone(), 0);
        // 100 events a second (a model's tokens) over a 10 ms round trip: the window of 16
        // already lets the agent send as fast as it makes them; a doubling buys nothing.
        let (taken, _) = run(&mut credit, 0.010, 100.0, 500, (Instant::now(), 0.0));
        assert!(taken > 400, "{taken}");
        assert_eq!(credit.window(), 16);
        assert_eq!(budget.free(), 512);
    }

    #[test]
    fn a_fast_stream_widens_to_spare_credits_and_narrows_when_it_slows() {
        let budget = Arc::new(FlowBudget::new(512));
        let mut credit = StreamCredit::new(budget.clone(), 0);
        let start = Instant::now();
        // 50,000 events a second over a 0.1 ms round trip: a window of 16 keeps up (160,000
        // a second), but a credit every 4 events is a waste.
        let (_, now) = run(&mut credit, 0.0001, 50_000.0, 400, (start, 0.0));
        assert_eq!(credit.window(), MAX_WINDOW);
        // Then 100 events a second: the window halves every round back to its base.
        run(&mut credit, 0.0001, 100.0, 200_000, (start, now));
        assert_eq!(credit.window(), 16);
        assert_eq!(budget.free(), 512);
    }

    #[test]
    fn streams_borrow_no_more_than_the_budget_between_them() {
        let budget = Arc::new(FlowBudget::new(300));
        let mut streams: Vec<StreamCredit> = (0..4)
            .map(|_| StreamCredit::new(budget.clone(), 0))
            .collect();
        for stream in &mut streams {
            run(stream, 0.010, 1e6, 40, (Instant::now(), 0.0));
        }
        let windows: u64 = streams.iter().map(StreamCredit::window).sum();
        assert_eq!(budget.free(), 0);
        assert_eq!(windows, 4 * 16 + 300);
        assert!(streams.iter().all(|s| s.window() <= MAX_WINDOW));
        streams.truncate(1);
        assert_eq!(budget.free(), 300 - u64::from(streams[0].held));
    }

    #[test]
    fn a_stream_taken_over_is_credited_every_quarter_of_the_base_window_and_never_widens() {
        let budget = Arc::new(FlowBudget::new(512));
        let mut credit = StreamCredit::taken_over(budget.clone(), 100);
        let t0 = Instant::now();
        let credits: Vec<u64> = (101..=140).filter_map(|n| credit.taken(n, || t0)).collect();
        assert_eq!(credits, (1..=10).map(|i| 100 + 4 * i).collect::<Vec<_>>());
        run(&mut credit, 0.010, 1e6, 40, (t0, 0.0));
        run(&mut credit, 0.0001, 50_000.0, 400, (t0, 1.0));
        assert_eq!(credit.window(), 16);
        assert_eq!(budget.free(), 512);
    }
}
