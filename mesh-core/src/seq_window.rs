//! Which events of one reply stream a requester has seen, by their position `_mesh.seq`:
//! pure state, no I/O, used by [`ReplyStream`](crate::requester::ReplyStream) to drop
//! duplicate deliveries (QoS 1 may deliver twice) and events that cannot be the agent's, and
//! to know when events were lost for good.
//!
//! The agent numbers a request's events 0, 1, 2, … and the broker delivers them in order, so
//! a genuine event is either the next one or a little ahead of it (when the broker dropped
//! some: a QoS 0 subscription, or a client's queue at the broker's limit). The window
//! remembers every position from the oldest one not yet seen ([`SPAN`] positions ahead of
//! it): a position behind it or seen already is a duplicate, one beyond it is out of the
//! window and dropped. So an event with a forged position far ahead (the bus is open to
//! whoever can publish on the reply topic) is dropped, and a forged position inside the
//! window never hides a genuine event with another position. When genuine events stream on
//! past a lost one, the window fills up; once it is at least half full it slides forward
//! past the gap rather than stall. When more events were lost in a row than the window
//! spans (a broker that dropped a backlog), nothing after the gap lands in the window: once
//! [`RESYNC_RUN`] consecutive positions have come beyond it, the stream is taken to go on
//! from there rather than wait for its deadline. Random forged positions never form such a
//! run.
//!
//! Every position the window gives up unseen (sliding or resynchronising past it) is counted
//! as lost ([`SeqWindow::lost`]), and so is every position before the final event that was
//! never seen ([`SeqWindow::unseen_before`]): the stream's reader learns that the task's
//! events are incomplete instead of showing a task with holes as whole.

/// How many positions ahead of the oldest unseen one the window admits.
pub const SPAN: u64 = 1024;

/// How many consecutive positions beyond the window make the window move to them.
pub const RESYNC_RUN: u64 = SPAN / 2;

const WORDS: usize = (SPAN / 64) as usize;

/// The positions seen, relative to the oldest unseen one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqWindow {
    /// The oldest position not seen yet: every one before it was seen (or given up).
    base: u64,
    /// Bit `i` set: position `base + i` was seen. Bit 0 is never set.
    seen: Bits,
    /// The position after the last one that came beyond the window, and how many came in a
    /// row up to it.
    ahead_next: u64,
    ahead_run: u64,
    /// Positions given up unseen so far.
    lost: u64,
}

/// What [`SeqWindow::admit`] makes of a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Not seen before: deliver it.
    New,
    /// Seen already: drop it quietly.
    Duplicate,
    /// Too far ahead to be the agent's: drop it and count it.
    OutOfWindow,
}

impl Default for SeqWindow {
    fn default() -> SeqWindow {
        SeqWindow {
            base: 0,
            seen: Bits(None),
            ahead_next: 0,
            ahead_run: 0,
            lost: 0,
        }
    }
}

impl SeqWindow {
    /// A window that takes every position before `next` as seen (a stream taken over after
    /// its first `next` events were handled).
    pub fn starting_at(next: u64) -> SeqWindow {
        SeqWindow {
            base: next,
            ..SeqWindow::default()
        }
    }

    /// Records `seq` and says whether to deliver the event that carries it.
    pub fn admit(&mut self, seq: u64) -> Admit {
        if seq < self.base {
            return Admit::Duplicate;
        }
        if seq - self.base >= SPAN {
            let seen: u32 = self.seen.words().iter().map(|w| w.count_ones()).sum();
            if u64::from(seen) < SPAN / 2 {
                self.ahead_run = if seq == self.ahead_next && self.ahead_run > 0 {
                    self.ahead_run + 1
                } else {
                    1
                };
                self.ahead_next = seq.saturating_add(1);
                if self.ahead_run < RESYNC_RUN {
                    return Admit::OutOfWindow;
                }
                // More was lost in a row than the window spans: go on from here.
                self.lost += (seq - self.base) - u64::from(seen);
                self.base = seq;
                self.seen.clear();
            } else {
                // Genuine events stream on past a gap: forget it.
                self.shift(seq - self.base - SPAN + 1);
            }
        }
        self.ahead_run = 0;
        let offset = seq - self.base;
        if offset == 0 && self.seen.is_clear() {
            // The next position, nothing seen beyond it (events in order): no bits at all.
            self.base += 1;
            return Admit::New;
        }
        let (word, bit) = ((offset / 64) as usize, offset % 64);
        if self.seen.words()[word] & (1 << bit) != 0 {
            return Admit::Duplicate;
        }
        self.seen.words_mut()[word] |= 1 << bit;
        // Move the base past every position seen in a row.
        let mut run = 0u64;
        for &word in self.seen.words() {
            let ones = u64::from(word.trailing_ones());
            run += ones;
            if ones < 64 {
                break;
            }
        }
        self.shift(run);
        Admit::New
    }

    /// How many positions the window gave up unseen so far (events lost on the way).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// How many positions before `seq` (one just admitted: the final event's) were never
    /// seen and are still in the window: events that will not come any more once `seq` is
    /// the stream's last.
    pub fn unseen_before(&self, seq: u64) -> u64 {
        let Some(offset) = seq.checked_sub(self.base) else {
            return 0;
        };
        let offset = offset.min(SPAN);
        offset - self.seen_in_first(offset)
    }

    /// How many of the window's first `n` positions (at most [`SPAN`]) were seen.
    fn seen_in_first(&self, n: u64) -> u64 {
        let n = n.min(SPAN);
        let (words, bits) = ((n / 64) as usize, n % 64);
        let all = self.seen.words();
        let mut seen: u64 = all[..words].iter().map(|w| u64::from(w.count_ones())).sum();
        if bits > 0 {
            seen += u64::from((all[words] & ((1u64 << bits) - 1)).count_ones());
        }
        seen
    }

    /// Moves the base `by` positions forward, counting the positions it passes unseen.
    fn shift(&mut self, by: u64) {
        if by == 0 {
            return;
        }
        self.base = self.base.saturating_add(by);
        self.lost += by - self.seen_in_first(by);
        let Some(seen) = self.seen.0.as_deref_mut().filter(|_| by < SPAN) else {
            self.seen.clear();
            return;
        };
        let (words, bits) = ((by / 64) as usize, (by % 64) as u32);
        for i in 0..WORDS {
            let lo = seen.get(i + words).copied().unwrap_or(0);
            let hi = seen.get(i + words + 1).copied().unwrap_or(0);
            seen[i] = if bits == 0 {
                lo
            } else {
                (lo >> bits) | (hi << (64 - bits))
            };
        }
        if self.seen.words().iter().all(|&w| w == 0) {
            self.seen.clear();
        }
    }
}

/// The window's bits, allocated only while some position beyond the base was seen (events
/// out of order, or a gap): a stream in order, the common case, holds none, so a request in
/// flight carries 8 bytes here instead of the window's 128.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bits(Option<Box<[u64; WORDS]>>);

/// The bits of a window with none set.
static NONE_SEEN: [u64; WORDS] = [0; WORDS];

impl Bits {
    fn words(&self) -> &[u64; WORDS] {
        self.0.as_deref().unwrap_or(&NONE_SEEN)
    }

    fn words_mut(&mut self) -> &mut [u64; WORDS] {
        self.0.get_or_insert_with(|| Box::new([0; WORDS]))
    }

    fn is_clear(&self) -> bool {
        self.0.is_none()
    }

    fn clear(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_started_later_takes_the_earlier_positions_as_seen() {
        let mut w = SeqWindow::starting_at(5);
        assert_eq!(w.admit(4), Admit::Duplicate);
        assert_eq!(w.admit(0), Admit::Duplicate);
        assert_eq!(w.admit(5), Admit::New);
        assert_eq!(w.admit(5), Admit::Duplicate);
        assert_eq!(w.admit(6), Admit::New);
    }
    use proptest::prelude::*;

    #[test]
    fn in_order_events_pass_and_repeats_do_not() {
        let mut w = SeqWindow::default();
        for seq in 0..5000 {
            assert_eq!(w.admit(seq), Admit::New, "{seq}");
            assert_eq!(w.admit(seq), Admit::Duplicate, "{seq}");
        }
        assert_eq!(w.admit(10), Admit::Duplicate);
    }

    #[test]
    fn a_stream_in_order_holds_no_bits_and_a_gap_holds_them_only_until_filled() {
        let mut w = SeqWindow::default();
        for seq in 0..100 {
            assert_eq!(w.admit(seq), Admit::New);
            assert!(w.seen.is_clear(), "{seq}");
        }
        assert_eq!(w.admit(102), Admit::New);
        assert_eq!(w.admit(101), Admit::New);
        assert!(!w.seen.is_clear(), "position 100 is still missing");
        assert_eq!(w.admit(102), Admit::Duplicate);
        assert_eq!(w.admit(100), Admit::New);
        assert!(w.seen.is_clear(), "the gap is filled");
        assert_eq!(w.admit(101), Admit::Duplicate);
        assert_eq!(w.admit(103), Admit::New);
        assert_eq!(w.lost(), 0);
    }

    #[test]
    fn a_forged_position_far_ahead_hides_nothing() {
        let mut w = SeqWindow::default();
        assert_eq!(w.admit(0), Admit::New);
        assert_eq!(w.admit(1 << 62), Admit::OutOfWindow);
        assert_eq!(w.admit(u64::MAX), Admit::OutOfWindow);
        for seq in 1..3000 {
            assert_eq!(w.admit(seq), Admit::New, "{seq}");
        }
    }

    #[test]
    fn a_forged_position_inside_the_window_hides_only_itself() {
        let mut w = SeqWindow::default();
        assert_eq!(w.admit(500), Admit::New);
        for seq in (0..3000).filter(|s| *s != 500) {
            assert_eq!(w.admit(seq), Admit::New, "{seq}");
        }
    }

    #[test]
    fn a_stream_goes_on_past_a_lost_event() {
        let mut w = SeqWindow::default();
        assert_eq!(w.admit(0), Admit::New);
        // Position 1 is lost for good; the stream goes on.
        for seq in 2..10_000 {
            assert_eq!(w.admit(seq), Admit::New, "{seq}");
        }
        assert_eq!(w.lost(), 1, "the window slid past position 1 unseen");
    }

    #[test]
    fn nothing_is_lost_when_every_event_comes_even_twice() {
        let mut w = SeqWindow::default();
        for seq in 0..5000 {
            assert_eq!(w.admit(seq), Admit::New, "{seq}");
            assert_eq!(w.unseen_before(seq), 0, "{seq}");
            w.admit(seq);
        }
        assert_eq!(w.lost(), 0);
    }

    #[test]
    fn positions_missing_before_the_final_one_are_unseen() {
        let mut w = SeqWindow::default();
        for seq in [0, 1, 3, 4, 70, 71] {
            assert_eq!(w.admit(seq), Admit::New, "{seq}");
        }
        // 2 and 5..70 never came.
        assert_eq!(w.unseen_before(71), 1 + 65);
        assert_eq!(w.unseen_before(4), 1);
        assert_eq!(w.unseen_before(1), 0);
        assert_eq!(w.lost(), 0, "nothing given up yet: they may still come");
        assert_eq!(w.admit(2), Admit::New);
        assert_eq!(w.unseen_before(71), 65);
    }

    #[test]
    fn a_stream_goes_on_past_more_lost_events_than_the_window_spans() {
        let mut w = SeqWindow::default();
        for seq in 0..100 {
            assert_eq!(w.admit(seq), Admit::New, "{seq}");
        }
        // 5,000 events lost in a row: the next RESYNC_RUN - 1 are beyond the window, then the
        // stream goes on.
        let resumed = 5_100 + RESYNC_RUN - 1;
        for seq in 5_100..resumed {
            assert_eq!(w.admit(seq), Admit::OutOfWindow, "{seq}");
        }
        for seq in resumed..resumed + 3_000 {
            assert_eq!(w.admit(seq), Admit::New, "{seq}");
        }
        assert_eq!(w.admit(resumed), Admit::Duplicate);
        // Every position from 100 up to the resumed one: the 5,000 lost and the run's
        // earlier ones dropped beyond the window.
        assert_eq!(w.lost(), resumed - 100);
    }

    #[test]
    fn scattered_positions_beyond_the_window_never_move_it() {
        let mut w = SeqWindow::default();
        assert_eq!(w.admit(0), Admit::New);
        for i in 0..10 * RESYNC_RUN {
            // Never two consecutive positions in a row.
            assert_eq!(w.admit(10_000 + 3 * i), Admit::OutOfWindow, "{i}");
        }
        for seq in 1..2_000 {
            assert_eq!(w.admit(seq), Admit::New, "{seq}");
        }
    }

    proptest! {
        /// Whatever arrives (genuine events in order, duplicates, forgeries), every genuine
        /// position is delivered exactly once, provided forgeries are fewer than half the
        /// window's span.
        #[test]
        fn every_genuine_event_is_delivered_once(
            forged in proptest::collection::vec(any::<u64>(), 0..100),
            genuine in 1u64..5000,
            repeat_every in 1u64..50,
        ) {
            let mut w = SeqWindow::default();
            let mut forged = forged.into_iter();
            let mut delivered = std::collections::HashSet::new();
            for seq in 0..genuine {
                if let Some(f) = forged.next()
                    && w.admit(f) == Admit::New {
                        delivered.insert(f);
                    }
                let first = w.admit(seq);
                prop_assert!(first == Admit::New || delivered.contains(&seq), "{seq}: {first:?}");
                delivered.insert(seq);
                if seq % repeat_every == 0 {
                    prop_assert_eq!(w.admit(seq), Admit::Duplicate);
                }
            }
        }
    }
}
