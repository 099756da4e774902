//! The usual `--json` object: a kprobe hit of a thread and place seen
//! before, whose arguments are plain integers. It is written from pieces
//! worked out once per thread (its name, pid and tid) and once per place
//! (its argument keys, event name, location and address), with no
//! hashing and no scan of strings that are the same from event to event.

use std::sync::Arc;

use kprobe_perf_engine::spec::BaseType;
use kprobe_perf_engine::{Event, IntEvent, KernelSymbols, ProbePlan, Value};

use super::{put_str, sorted_args};
use crate::text::{location, put_int, Piece};

/// Arguments the usual object has room for.
const ARGS: usize = 6;
/// Room for an argument's key: `,"name":`.
const KEY: usize = 32;
/// Room for `},"comm":"NAME","cpu":` (a 16-byte name needs 35).
const COMM: usize = 48;
/// Room for `,"event":"EVENT","location":"PLACE","pid":`. The pieces are
/// copied whole, so they are kept no larger than the usual members need;
/// a longer one takes the general path.
const PLACE: usize = 128;
/// Room for `,"probe_addr":N,"tid":` (at most 41).
const ADDRESS: usize = 48;
/// Room for a pid or tid.
const ID: usize = 16;
/// `,"time_ns":`.
const TIME_KEY: &[u8; 11] = b",\"time_ns\":";
/// The object's end.
const TAIL: &[u8; 16] = b",\"type\":\"event\"}";

/// Room [`Usual::put`] needs: `{"args":{`, the arguments' keys and
/// values, the pieces, the CPU, the time and the end.
pub(crate) const USUAL_OBJECT_ROOM: usize =
    9 + ARGS * (KEY + 21) + COMM + 11 + PLACE + ADDRESS + 2 * ID + TIME_KEY.len() + 21 + TAIL.len();

/// Threads remembered (a power of two).
const THREADS: usize = 256;
/// Places remembered.
const PLACES: usize = 64;

/// The fields of an [`Event`] or an [`IntEvent`] the usual object shows
/// besides its arguments.
struct Fields<'a> {
    probe: usize,
    cpu: u32,
    pid: i32,
    tid: i32,
    comm: &'a Arc<str>,
    time_ns: u64,
    probe_addr: u64,
}

/// What the usual object is made of, per thread and per place.
#[derive(Default)]
pub(super) struct Usual {
    /// Direct-mapped by thread id.
    threads: Vec<Option<Thread>>,
    places: Vec<Place>,
    /// Index in `places` of the last place found.
    last_place: usize,
}

/// One thread, and its pieces when they fit (a name that does not is
/// remembered too, so that it is not tried again at every event).
struct Thread {
    tid: i32,
    pid: i32,
    /// The name the pieces were made with (compared by pointer).
    comm: Arc<str>,
    pieces: Option<ThreadPieces>,
}

/// The pieces of one thread.
struct ThreadPieces {
    /// `},"comm":"NAME","cpu":`.
    comm: Piece<COMM>,
    pid: Piece<ID>,
    tid: Piece<ID>,
}

impl Thread {
    fn new(e: &Fields<'_>) -> Thread {
        Thread {
            tid: e.tid,
            pid: e.pid,
            comm: e.comm.clone(),
            pieces: ThreadPieces::new(e),
        }
    }
}

impl ThreadPieces {
    fn new(e: &Fields<'_>) -> Option<ThreadPieces> {
        let mut comm = b"},\"comm\":".to_vec();
        put_str(&mut comm, e.comm);
        comm.extend_from_slice(b",\"cpu\":");
        let mut digits = [0u8; 12];
        let n = put_int(&mut digits, e.pid);
        let pid = Piece::new(&[&digits[..n]])?;
        let n = put_int(&mut digits, e.tid);
        Some(ThreadPieces {
            comm: Piece::new(&[&comm])?,
            pid,
            tid: Piece::new(&[&digits[..n]])?,
        })
    }
}

/// One probe at one address (a kprobe's place is the same at every hit),
/// and its pieces when they fit (remembered either way).
struct Place {
    probe: usize,
    addr: u64,
    pieces: Option<PlacePieces>,
}

/// The pieces of one place.
struct PlacePieces {
    /// Per argument printed, in key order: its index in the event's
    /// arguments and its key (`"name":`, then `,"name":`).
    keys: Vec<(usize, Piece<KEY>)>,
    /// `,"event":"EVENT","location":"PLACE","pid":`.
    event: Piece<PLACE>,
    /// `,"probe_addr":N,"tid":`.
    address: Piece<ADDRESS>,
}

impl PlacePieces {
    fn new(e: &Fields<'_>, plan: &ProbePlan, symbols: &KernelSymbols) -> Option<PlacePieces> {
        let mut keys = Vec::new();
        for (n, i) in sorted_args(plan).into_iter().enumerate() {
            let mut key = if n == 0 { Vec::new() } else { vec![b','] };
            put_str(&mut key, &plan.args.get(i)?.name);
            key.push(b':');
            keys.push((i, Piece::new(&[&key])?));
        }
        let mut event = b",\"event\":".to_vec();
        put_str(&mut event, &plan.event);
        event.extend_from_slice(b",\"location\":");
        put_str(&mut event, &location(symbols, e.probe_addr));
        event.extend_from_slice(b",\"pid\":");
        let mut digits = [0u8; 20];
        let n = put_int(&mut digits, e.probe_addr);
        Some(PlacePieces {
            keys,
            event: Piece::new(&[&event])?,
            address: Piece::new(&[b",\"probe_addr\":", &digits[..n], b",\"tid\":"])?,
        })
    }
}

/// Copies `bytes` to `out[at..]`; returns the new end.
#[inline]
fn put_bytes<const N: usize>(out: &mut [u8], at: usize, bytes: &[u8; N]) -> usize {
    if let Some(dst) = out.get_mut(at..at + N) {
        dst.copy_from_slice(bytes);
    }
    at + N
}

impl Usual {
    /// The pieces of `e`'s thread, made when new.
    #[inline]
    fn thread<'a>(
        threads: &'a mut Vec<Option<Thread>>,
        e: &Fields<'_>,
    ) -> Option<&'a ThreadPieces> {
        if threads.is_empty() {
            threads.resize_with(THREADS, || None);
        }
        let slot = threads.get_mut(e.tid as u32 as usize & (THREADS - 1))?;
        let hit = slot
            .as_ref()
            .is_some_and(|t| t.tid == e.tid && t.pid == e.pid && Arc::ptr_eq(&t.comm, e.comm));
        if !hit {
            *slot = Some(Thread::new(e));
        }
        slot.as_ref()?.pieces.as_ref()
    }

    /// The pieces of `e`'s place (the last one found is tried first), made
    /// when new and there is room.
    #[inline]
    fn place<'a>(
        places: &'a mut Vec<Place>,
        last: &mut usize,
        e: &Fields<'_>,
        plan: &ProbePlan,
        symbols: &KernelSymbols,
    ) -> Option<&'a PlacePieces> {
        let is = |p: &Place| p.probe == e.probe && p.addr == e.probe_addr;
        if !places.get(*last).is_some_and(is) {
            *last = match places.iter().position(is) {
                Some(i) => i,
                None if places.len() < PLACES => {
                    places.push(Place {
                        probe: e.probe,
                        addr: e.probe_addr,
                        pieces: PlacePieces::new(e, plan, symbols),
                    });
                    places.len() - 1
                }
                None => return None,
            };
        }
        places.get(*last)?.pieces.as_ref()
    }

    /// The usual object of `e` at the start of `out` (at least
    /// [`USUAL_OBJECT_ROOM`] bytes): its length, or `None` (with `out`
    /// scribbled on) for any other event.
    pub(super) fn put(
        &mut self,
        out: &mut [u8],
        e: &Event,
        plan: &ProbePlan,
        symbols: &KernelSymbols,
    ) -> Option<usize> {
        if e.ret_addr.is_some() || e.args.len() > ARGS {
            return None;
        }
        let fields = Fields {
            probe: e.probe,
            cpu: e.cpu,
            pid: e.pid,
            tid: e.tid,
            comm: &e.comm,
            time_ns: e.time_ns,
            probe_addr: e.probe_addr,
        };
        let arg = |i: usize| match e.args.get(i)? {
            Value::Int { raw, ty } => Some((*raw, *ty)),
            // A string, array or unknown value: the general path.
            _ => None,
        };
        self.put_fields(out, &fields, arg, plan, symbols)
    }

    /// [`Usual::put`] for a kprobe hit handed over as an [`IntEvent`].
    pub(super) fn put_ints(
        &mut self,
        out: &mut [u8],
        e: &IntEvent<'_>,
        plan: &ProbePlan,
        symbols: &KernelSymbols,
    ) -> Option<usize> {
        if e.ints.len() > ARGS {
            return None;
        }
        let fields = Fields {
            probe: e.probe,
            cpu: e.cpu,
            pid: e.pid,
            tid: e.tid,
            comm: e.comm,
            time_ns: e.time_ns,
            probe_addr: e.probe_addr,
        };
        let arg = |i: usize| Some((*e.ints.get(i)?, *e.kinds.get(i)?));
        self.put_fields(out, &fields, arg, plan, symbols)
    }

    /// The usual object of an event of fields `e` and integer arguments
    /// `arg(i)` (value and type; `None` for any other).
    #[inline(always)]
    fn put_fields(
        &mut self,
        out: &mut [u8],
        e: &Fields<'_>,
        arg: impl Fn(usize) -> Option<(u64, BaseType)>,
        plan: &ProbePlan,
        symbols: &KernelSymbols,
    ) -> Option<usize> {
        if out.len() < USUAL_OBJECT_ROOM {
            return None;
        }
        let place = Self::place(&mut self.places, &mut self.last_place, e, plan, symbols)?;
        let thread = Self::thread(&mut self.threads, e)?;
        let mut at = put_bytes(out, 0, b"{\"args\":{");
        for (i, key) in &place.keys {
            at = key.put(out, at);
            let dst = out.get_mut(at..)?;
            at += match arg(*i)? {
                (raw, BaseType::Signed(_)) => put_int(dst, raw as i64),
                (_, BaseType::Symbol) => return None,
                (raw, _) => put_int(dst, raw),
            };
        }
        at = thread.comm.put(out, at);
        at += put_int(out.get_mut(at..)?, e.cpu);
        at = place.event.put(out, at);
        at = thread.pid.put(out, at);
        at = place.address.put(out, at);
        at = thread.tid.put(out, at);
        at = put_bytes(out, at, TIME_KEY);
        at += put_int(out.get_mut(at..)?, e.time_ns);
        Some(put_bytes(out, at, TAIL))
    }
}
