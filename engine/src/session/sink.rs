//! Where a session hands what it reads: [`EventSink`], given as an
//! argument to [`Session::poll`](crate::session::Session::poll),
//! [`Session::drain`](crate::session::Session::drain) and
//! [`Session::dump_overwrite`](crate::session::Session::dump_overwrite), never
//! stored in the session.

use std::ops::ControlFlow;

use crate::decode::records::RingRecord;
use crate::decode::Event;

/// What a sink says after each call: go on, or stop this drain.
pub type Flow = ControlFlow<()>;

/// The consumer of a drain: decoded events, the raw records they were
/// decoded from (for a perf.data file), and the end of each round.
///
/// Every method returns `Ok(ControlFlow::Continue(()))` to go on,
/// `Ok(ControlFlow::Break(()))` to end the drain cleanly, or an error,
/// which ends the drain and is returned by it. Session errors reach the
/// caller through the same type (hence `From<Error>`), so a sink's own
/// error type can also be [`crate::error::Error`] or `anyhow::Error`.
///
/// A closure that only takes events becomes a sink with [`sink_fn`]; a
/// `&mut` to a sink is a sink too, so one sink serves many drains.
pub trait EventSink {
    /// The sink's error; a session error converts into it.
    type Error: From<crate::error::Error>;

    /// One decoded event, in time order across CPUs. The event is lent
    /// for the call (its storage is reused): clone it to keep it.
    ///
    /// `Break` leaves the events not yet handed over queued for the next
    /// drain; the round still ends as usual (its names read from /proc go
    /// to [`EventSink::record`] and [`EventSink::round_end`] is called).
    fn event(&mut self, event: &Event) -> Result<Flow, Self::Error>;

    /// One raw record read from a ring, before it is decoded: `kind` and
    /// `misc` from its header, `body` the bytes after the header, in one
    /// or two parts (a record wrapping around the ring's end). Records
    /// the session makes itself come here too: COMM records of thread
    /// names read from /proc, just before the round's end, and the MMAP
    /// records of the binaries the session's uprobes name.
    ///
    /// The default ignores them. A sink that keeps records should not
    /// break: `Break` ends the drain once the current ring is read, and
    /// that ring's later records are decoded but not given to the sink.
    fn record(&mut self, record: RingRecord<'_>) -> Result<Flow, Self::Error> {
        let _ = record;
        Ok(ControlFlow::Continue(()))
    }

    /// Every ring has been read once since the previous round: no record
    /// still to come is older than those already given. The default does
    /// nothing.
    fn round_end(&mut self) -> Result<Flow, Self::Error> {
        Ok(ControlFlow::Continue(()))
    }

    /// False for a sink that keeps raw records and looks at no event (a
    /// perf.data file written without live output). A drain then counts
    /// the samples, names their threads and notes their addresses
    /// ([`Session::counted_addresses`](crate::session::Session::counted_addresses))
    /// without decoding their arguments or ordering them, which is most
    /// of a drain's work per event; [`EventSink::event`] is then called
    /// only for the few samples that could not be counted so (callchains,
    /// a record split at the ring's end). The counters are those of a
    /// decoding drain. Ignored (every sample decoded) when entry values
    /// are joined or a filter runs in user space. Asked at each drain; the
    /// default is true.
    fn wants_events(&self) -> bool {
        true
    }

    /// True for a sink that takes each ring's records as the bytes the
    /// kernel wrote ([`EventSink::ring_bytes`]) instead of one by one
    /// ([`EventSink::record`]): a file writer, which then copies a
    /// ring's records in one write as perf record does. Records the
    /// session makes itself still come to [`EventSink::record`]. Asked
    /// at each drain; the default is false.
    fn takes_ring_bytes(&self) -> bool {
        false
    }

    /// The records one ring held at a drain, as the kernel wrote them:
    /// whole records, headers included, in one or two parts (they wrap
    /// around the ring's end), in the order [`EventSink::record`] would
    /// have had them. Called only when [`EventSink::takes_ring_bytes`]
    /// is true, after the ring's records are decoded or counted (see
    /// [`EventSink::taken_bytes`] for those that are not). The default
    /// ignores them.
    fn ring_bytes(&mut self, bytes: (&[u8], &[u8])) -> Result<Flow, Self::Error> {
        let _ = bytes;
        Ok(ControlFlow::Continue(()))
    }

    /// True for a sink that takes ring bytes, wants no events and keeps
    /// the bytes where it can read them back (a file): a drain then only
    /// hands it each ring's pending bytes and frees them, looking at no
    /// record, as perf record reads its rings. The samples are counted,
    /// their threads named and their addresses noted once, at the end,
    /// when the sink gives every byte back to
    /// [`Session::count_taken`](crate::session::Session::count_taken) and
    /// calls [`Session::end_count`](crate::session::Session::end_count)
    /// ([`FileSink::count_taken`](crate::perfdata::FileSink::count_taken)
    /// does both); until then the session's counters leave those samples
    /// out. Asked at each drain, and only when
    /// [`EventSink::takes_ring_bytes`] is true and
    /// [`EventSink::wants_events`] false; the default is false.
    fn counts_later(&self) -> bool {
        false
    }

    /// As [`EventSink::ring_bytes`], for a ring's bytes the session has
    /// not counted (see [`EventSink::counts_later`]): they are to come
    /// back to [`Session::count_taken`](crate::session::Session::count_taken).
    /// The default hands them to [`EventSink::ring_bytes`].
    fn taken_bytes(&mut self, bytes: (&[u8], &[u8])) -> Result<Flow, Self::Error> {
        self.ring_bytes(bytes)
    }
}

impl<S: EventSink + ?Sized> EventSink for &mut S {
    type Error = S::Error;

    fn event(&mut self, event: &Event) -> Result<Flow, Self::Error> {
        (**self).event(event)
    }

    fn record(&mut self, record: RingRecord<'_>) -> Result<Flow, Self::Error> {
        (**self).record(record)
    }

    fn round_end(&mut self) -> Result<Flow, Self::Error> {
        (**self).round_end()
    }

    fn wants_events(&self) -> bool {
        (**self).wants_events()
    }

    fn takes_ring_bytes(&self) -> bool {
        (**self).takes_ring_bytes()
    }

    fn ring_bytes(&mut self, bytes: (&[u8], &[u8])) -> Result<Flow, Self::Error> {
        (**self).ring_bytes(bytes)
    }

    fn counts_later(&self) -> bool {
        (**self).counts_later()
    }

    fn taken_bytes(&mut self, bytes: (&[u8], &[u8])) -> Result<Flow, Self::Error> {
        (**self).taken_bytes(bytes)
    }
}

/// A sink made of a closure that takes every event and neither fails nor
/// stops (see [`sink_fn`]).
#[derive(Debug, Clone, Copy)]
pub struct FnSink<F>(pub F);

/// Makes a closure a sink:
/// `session.poll(timeout, &mut sink_fn(|e| println!("{}", e.tid)))`.
/// Its error type is [`crate::error::Error`], so the poll returns the same
/// `Result` as the session's other calls.
pub fn sink_fn<F: FnMut(&Event)>(f: F) -> FnSink<F> {
    FnSink(f)
}

impl<F: FnMut(&Event)> EventSink for FnSink<F> {
    type Error = crate::error::Error;

    #[inline]
    fn event(&mut self, event: &Event) -> Result<Flow, Self::Error> {
        (self.0)(event);
        Ok(ControlFlow::Continue(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts events, breaks at `stop_at`, fails on a tid of 0.
    struct Counter {
        events: u64,
        stop_at: u64,
    }

    impl EventSink for Counter {
        type Error = crate::error::Error;

        fn event(&mut self, e: &Event) -> Result<Flow, Self::Error> {
            if e.tid == 0 {
                return Err(crate::error::Error::Internal {
                    what: "tid 0".into(),
                });
            }
            self.events += 1;
            Ok(if self.events == self.stop_at {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        }
    }

    fn event(tid: i32) -> Event {
        crate::decode::EventHead {
            tid,
            ..Default::default()
        }
        .event(
            std::sync::Arc::from("t"),
            Vec::new(),
            kprobe_perf_arch::boundary::ProbeSite::Entry,
        )
    }

    /// Hands `events` to `sink` as a drain does: stops at a break or an
    /// error.
    fn feed<S: EventSink>(mut sink: S, tids: &[i32]) -> Result<usize, S::Error> {
        let mut n = 0;
        for &t in tids {
            n += 1;
            if sink.event(&event(t))?.is_break() {
                break;
            }
        }
        let _ = sink.round_end()?;
        Ok(n)
    }

    #[test]
    fn a_mut_sink_is_a_sink_and_keeps_its_state() {
        let mut c = Counter {
            events: 0,
            stop_at: 3,
        };
        assert_eq!(feed(&mut c, &[1, 2, 3, 4, 5]).unwrap(), 3);
        assert_eq!(c.events, 3);
        assert_eq!(feed(&mut c, &[1]).unwrap(), 1);
        assert_eq!(c.events, 4);
        let e = feed(&mut c, &[1, 0, 1]).unwrap_err();
        assert_eq!(e.to_string(), "tid 0 (a bug: please report it)");
        assert_eq!(c.events, 5);
    }

    #[test]
    fn a_closure_takes_every_event_and_records_are_ignored() {
        let mut tids = Vec::new();
        let mut sink = sink_fn(|e: &Event| tids.push(e.tid));
        assert_eq!(feed(&mut sink, &[4, 0, 9]).unwrap(), 3);
        assert_eq!(
            sink.record(RingRecord::new(9, 0, (&[1, 2], &[]))).unwrap(),
            ControlFlow::Continue(())
        );
        assert_eq!(tids, [4, 0, 9]);
    }
}
