//! Time order across CPUs, round by round.

use std::collections::VecDeque;

use crate::decode::Event;

/// Puts the events of successive poll rounds in time order: an event is
/// handed over once a later round has passed its time (a CPU may still be
/// writing an older event when another's ring is read).
#[derive(Debug, Default)]
pub struct RoundOrder {
    /// Read, not yet handed over, in time order.
    pending: VecDeque<Event>,
    /// Every event up to this time has been read: the newest time of an
    /// earlier round.
    complete_before: u64,
}

impl RoundOrder {
    /// Adds one round's events (in the order they were read; `events` is
    /// left empty) and hands `f` those now known to be in order; `all`
    /// hands over everything (the last round). Returns how many.
    pub fn round(
        &mut self,
        events: &mut Vec<Event>,
        all: bool,
        mut f: impl FnMut(&Event),
    ) -> usize {
        let round_max = events.iter().map(|e| e.time_ns).max();
        let in_order = self.pending.back().map_or(0, |e| e.time_ns)
            <= events.first().map_or(u64::MAX, |e| e.time_ns)
            && events.is_sorted_by_key(|e| e.time_ns);
        self.pending.extend(events.drain(..));
        if !in_order {
            self.pending.make_contiguous().sort_by_key(|e| e.time_ns);
        }
        let ready = if all {
            self.pending.len()
        } else {
            self.pending
                .partition_point(|e| e.time_ns <= self.complete_before)
        };
        if let Some(m) = round_max {
            self.complete_before = self.complete_before.max(m);
        }
        for e in self.pending.drain(..ready) {
            f(&e);
        }
        ready
    }
}
