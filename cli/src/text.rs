//! The text output: one line per event in ftrace's layout, and the summary.

use std::io::Write as _;
use std::sync::Arc;

use kprobe_perf_engine::spec::BaseType;
use kprobe_perf_engine::{Event, IntEvent, KernelSymbols, ProbePlan, Summary, Value};

/// `sym+0xoff/0xsize`, or the bare address when no symbol holds it.
pub(crate) fn location(symbols: &KernelSymbols, addr: u64) -> String {
    match symbols.symbolize(addr) {
        Some(l) => format!("{}+0x{:x}/0x{:x}", l.symbol.name, l.offset, l.size),
        None => format!("0x{addr:x}"),
    }
}

/// The name of the function holding `addr` (ftrace's `%ps`: no offset,
/// so an entry moved past ENDBR64 still prints as the function), or the
/// bare address.
pub(crate) fn function(symbols: &KernelSymbols, addr: u64) -> String {
    match symbols.symbolize(addr) {
        Some(l) => l.symbol.name.clone(),
        None => format!("0x{addr:x}"),
    }
}

/// Two-digit decimal pairs, `00` to `99`.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Writes `v` in decimal, at least `width` digits (zero-padded, at most
/// 20), at the start of `out`; returns how many bytes. `out` must hold 20.
fn put_dec(out: &mut [u8], mut v: u64, width: usize) -> usize {
    let digits = v
        .checked_ilog10()
        .map_or(1, |l| l as usize + 1)
        .max(width)
        .min(20);
    let Some(out) = out.get_mut(..digits) else {
        return 0;
    };
    let mut i = digits;
    while i >= 2 {
        let p = (v % 100) as usize * 2;
        out[i - 1] = PAIRS[p + 1];
        out[i - 2] = PAIRS[p];
        i -= 2;
        v /= 100;
    }
    if i == 1 {
        out[0] = b'0' + (v % 10) as u8;
    }
    digits
}

/// Writes `v` (below 1000) as 3 digits at the start of `out`.
fn put_dec3(out: &mut [u8], v: u32) -> usize {
    let Some(out) = out.get_mut(..3) else {
        return 0;
    };
    let p = (v % 100) as usize * 2;
    out[0] = b'0' + (v / 100 % 10) as u8;
    out[1] = PAIRS[p];
    out[2] = PAIRS[p + 1];
    3
}

/// Writes `v` (below 1,000,000) as 6 digits at the start of `out`.
fn put_dec6(out: &mut [u8], v: u64) -> usize {
    let Some(out) = out.get_mut(..6) else {
        return 0;
    };
    let (hi, mid, lo) = (
        (v / 10_000 % 100) as usize * 2,
        (v / 100 % 100) as usize * 2,
        (v % 100) as usize * 2,
    );
    out[0] = PAIRS[hi];
    out[1] = PAIRS[hi + 1];
    out[2] = PAIRS[mid];
    out[3] = PAIRS[mid + 1];
    out[4] = PAIRS[lo];
    out[5] = PAIRS[lo + 1];
    6
}

/// Makes room for `N` bytes at the end of `s` (a fixed-size copy, which
/// the compiler turns into a few stores rather than a call), lets `fill`
/// write into it and keeps the first bytes it says it wrote. Writing in
/// place, rather than into a stack buffer copied afterwards, spares the
/// stall of reading back many narrow stores as one wide load.
fn push_with<const N: usize>(s: &mut Vec<u8>, fill: impl FnOnce(&mut [u8]) -> usize) {
    let len = s.len();
    s.extend_from_slice(&[b' '; N]);
    let n = s.get_mut(len..).map_or(0, fill);
    s.truncate(len + n.min(N));
}

/// Appends `v` in decimal, at least `width` digits (zero-padded).
fn push_dec(s: &mut Vec<u8>, v: u64, width: usize) {
    push_with::<20>(s, |out| put_dec(out, v, width));
}

/// Writes the integer `v` in decimal (through `itoa`) at the start of
/// `out` (room for 20 digits and a sign); returns how many bytes.
#[inline]
pub(crate) fn put_int(out: &mut [u8], v: impl itoa::Integer) -> usize {
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(v).as_bytes();
    copy_short(out, digits)
}

/// Copies `src` (at most 40 bytes) to the start of `out` with a few
/// overlapping word copies, cheaper than a call to memcpy for the short
/// strings of digits copied per line; returns how many bytes.
#[inline]
fn copy_short(out: &mut [u8], src: &[u8]) -> usize {
    let n = src.len();
    let Some(dst) = out.get_mut(..n) else {
        return 0;
    };
    match (src.first_chunk::<8>(), src.last_chunk::<8>()) {
        (Some(first), Some(last)) if n <= 16 => {
            dst[..8].copy_from_slice(first);
            dst[n - 8..].copy_from_slice(last);
        }
        _ => match (src.first_chunk::<4>(), src.last_chunk::<4>()) {
            (Some(first), Some(last)) if n <= 8 => {
                dst[..4].copy_from_slice(first);
                dst[n - 4..].copy_from_slice(last);
            }
            _ => dst.copy_from_slice(src),
        },
    }
    n
}

/// Writes `v` in decimal with a sign at the start of `out` (room for 21);
/// returns how many bytes.
#[inline]
fn put_signed(out: &mut [u8], v: i64) -> usize {
    put_int(out, v)
}

/// Appends `v` in decimal with a sign.
fn push_signed(s: &mut Vec<u8>, v: i64) {
    push_with::<21>(s, |out| put_signed(out, v));
}

/// Writes `0x` and `v` in lowercase hex at the start of `out` (room for
/// 18); returns how many bytes.
#[inline]
fn put_hex(out: &mut [u8], mut v: u64) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = ((64 - v.leading_zeros() as usize).div_ceil(4)).max(1);
    let Some(out) = out.get_mut(..2 + digits) else {
        return 0;
    };
    out[0] = b'0';
    out[1] = b'x';
    // Two digits per step, from the end.
    let mut i = out.len();
    while i >= 4 {
        let b = (v & 0xff) as usize;
        out[i - 1] = HEX[b & 0xf];
        out[i - 2] = HEX[b >> 4];
        v >>= 8;
        i -= 2;
    }
    if i == 3 {
        out[2] = HEX[(v & 0xf) as usize];
    }
    2 + digits
}

/// Appends `0x` and `v` in lowercase hex.
fn push_hex(s: &mut Vec<u8>, v: u64) {
    push_with::<18>(s, |out| put_hex(out, v));
}

/// Up to `N` bytes of text, padded, so that it is copied with a fixed-size
/// copy and cut at `len`.
#[derive(Clone, Copy)]
pub(crate) struct Piece<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Piece<N> {
    /// `parts` joined, if they fit.
    pub(crate) fn new(parts: &[&[u8]]) -> Option<Piece<N>> {
        let mut p = Piece {
            bytes: [b' '; N],
            len: 0,
        };
        for part in parts {
            p.bytes
                .get_mut(p.len..p.len + part.len())?
                .copy_from_slice(part);
            p.len += part.len();
        }
        Some(p)
    }

    /// Copies the piece to `out[at..]`; returns the new end.
    #[inline]
    pub(crate) fn put(&self, out: &mut [u8], at: usize) -> usize {
        if let Some(dst) = out.get_mut(at..at + N) {
            dst.copy_from_slice(&self.bytes);
        }
        at + self.len
    }
}

/// `sym+0xoff/0xsize` or the bare address, appended to `s`.
fn write_location(s: &mut Vec<u8>, symbols: &KernelSymbols, addr: u64) {
    match symbols.symbolize(addr) {
        Some(l) => {
            s.extend_from_slice(l.symbol.name.as_bytes());
            s.push(b'+');
            push_hex(s, l.offset);
            s.push(b'/');
            push_hex(s, l.size);
        }
        None => push_hex(s, addr),
    }
}

/// What [`write_line`] remembers between lines: the `: event: (place)` of
/// the kprobes seen so far (a kprobe's place is the same at every hit) and
/// the `comm-tid` column of recent threads.
#[derive(Default)]
pub(crate) struct LineCache {
    places: Vec<Place>,
    /// Index in `places` of the last place found.
    last_place: usize,
    /// The whole seconds of the last usual line, as written: `(seconds,
    /// digits and the point)`.
    seconds: Option<(u64, Piece<24>)>,
    /// Direct-mapped by thread id.
    threads: Vec<Option<Thread>>,
}

/// Where a kprobe hit, as printed, and what the usual line of its hits
/// is made of.
struct Place {
    probe: usize,
    addr: u64,
    /// `: event: (sym+off/size)`.
    text: Vec<u8>,
    /// For lines whose arguments are all plain integers: `text` and the
    /// first argument's ` name=`, then the ` name=` of each other
    /// argument; `None` when a piece does not fit.
    template: Option<(Piece<128>, Vec<Piece<32>>)>,
}

/// What a line's head is made of: an [`Event`]'s or an [`IntEvent`]'s
/// thread, CPU and time.
struct Head<'a> {
    comm: &'a Arc<str>,
    tid: i32,
    cpu: u32,
    time_ns: u64,
}

impl<'a> Head<'a> {
    #[inline(always)]
    fn of(e: &'a Event) -> Head<'a> {
        Head {
            comm: &e.comm,
            tid: e.tid,
            cpu: e.cpu,
            time_ns: e.time_ns,
        }
    }
}

/// `{comm:>16}-{tid:<7} [{cpu:03}] ` of one thread on its last CPU, when
/// it fits in [`Thread::text`].
struct Thread {
    tid: i32,
    /// The name it was made with: held, so that a pointer comparison
    /// tells whether an event's name is the same.
    comm: std::sync::Arc<str>,
    /// The CPU in `text`.
    cpu: u32,
    text: [u8; Thread::ROOM],
    len: usize,
}

impl Thread {
    /// Room for the columns: 16 name bytes, `-` and a 7-digit tid, with
    /// room to spare for a longer tid, then ` [cpu] `.
    const ROOM: usize = 40;

    /// The columns of `h`'s thread and CPU (below 1000).
    fn new(h: &Head<'_>) -> Option<Thread> {
        let comm = h.comm.as_bytes();
        // Padding counts characters, as fmt does; a non-ASCII name takes
        // the slow way.
        if !h.comm.is_ascii() || comm.len() > 16 {
            return None;
        }
        let mut text = [b' '; Thread::ROOM];
        text[16 - comm.len()..16].copy_from_slice(comm);
        text[16] = b'-';
        let at = 17 + put_int(&mut text[17..32], h.tid);
        let at = at.max(24);
        text[at + 1] = b'[';
        text[at + 5] = b']';
        let mut t = Thread {
            tid: h.tid,
            comm: h.comm.clone(),
            cpu: h.cpu,
            text,
            len: at + 7,
        };
        t.set_cpu(h.cpu);
        Some(t)
    }

    /// Writes `cpu` (below 1000) into the column.
    #[inline]
    fn set_cpu(&mut self, cpu: u32) {
        self.cpu = cpu;
        let at = self.len - 5;
        if let Some(out) = self.text.get_mut(at..at + 3) {
            put_dec3(out, cpu);
        }
    }
}

impl LineCache {
    /// At most this many places are remembered.
    const MAX_PLACES: usize = 64;
    /// Threads remembered (a power of two).
    const THREADS: usize = 256;

    /// Appends `: event: (place)` of a kprobe hit.
    fn write_place(
        &mut self,
        s: &mut Vec<u8>,
        e: &Event,
        plan: &ProbePlan,
        symbols: &KernelSymbols,
    ) {
        if let Some(p) = self.place(e.probe, e.probe_addr) {
            s.extend_from_slice(&p.text);
            return;
        }
        let start = s.len();
        s.extend_from_slice(b": ");
        s.extend_from_slice(plan.event.as_bytes());
        s.extend_from_slice(b": (");
        write_location(s, symbols, e.probe_addr);
        s.push(b')');
        if self.places.len() < Self::MAX_PLACES {
            let text = s[start..].to_vec();
            let names: Vec<&[u8]> = plan.args.iter().map(|a| a.name.as_bytes()).collect();
            let template = match names.split_first() {
                None => Piece::new(&[&text]).map(|lead| (lead, Vec::new())),
                Some((first, rest)) => Piece::new(&[&text, b" ", first, b"="]).and_then(|lead| {
                    rest.iter()
                        .map(|n| Piece::new(&[b" ", n, b"="]))
                        .collect::<Option<Vec<_>>>()
                        .map(|rest| (lead, rest))
                }),
            };
            self.places.push(Place {
                probe: e.probe,
                addr: e.probe_addr,
                text,
                template,
            });
        }
    }

    /// The place of a kprobe hit, if seen before (the last one found is
    /// tried first).
    #[inline]
    fn place(&mut self, probe: usize, addr: u64) -> Option<&Place> {
        let is = |p: &Place| p.probe == probe && p.addr == addr;
        if !self.places.get(self.last_place).is_some_and(is) {
            self.last_place = self.places.iter().position(is)?;
        }
        self.places.get(self.last_place)
    }

    /// The `comm-tid [cpu] ` columns of `e`'s thread, if it has the usual
    /// shape (and its CPU is below 1000).
    #[inline(always)]
    fn thread(&mut self, h: &Head<'_>) -> Option<&Thread> {
        let at = h.tid as u32 as usize & (Self::THREADS - 1);
        match self.threads.get_mut(at) {
            Some(Some(t)) if t.tid == h.tid && Arc::ptr_eq(&t.comm, h.comm) => {
                if t.cpu != h.cpu {
                    t.set_cpu(h.cpu);
                }
            }
            _ => self.new_thread(at, h)?,
        }
        self.threads.get(at)?.as_ref()
    }

    /// Makes the columns of `h`'s thread, direct-mapped at `at`; `None`
    /// for a thread without the usual shape.
    #[cold]
    #[inline(never)]
    fn new_thread(&mut self, at: usize, h: &Head<'_>) -> Option<()> {
        if self.threads.is_empty() {
            self.threads.resize_with(Self::THREADS, || None);
        }
        *self.threads.get_mut(at)? = Some(Thread::new(h)?);
        Some(())
    }

    /// `seconds.` of a line, remembered for the next.
    #[cold]
    #[inline(never)]
    fn new_seconds(&mut self, secs: u64) -> Piece<24> {
        let mut p = Piece {
            bytes: [b'0'; 24],
            len: 0,
        };
        p.len = put_dec(&mut p.bytes, secs, 1);
        p.bytes[p.len] = b'.';
        p.len += 1;
        self.seconds = Some((secs, p));
        p
    }

    /// `{comm:>16}-{tid:<7} [{cpu:03}] {seconds}.{micros:06}` at the start
    /// of `out` (at least [`HEAD_ROOM`] bytes), from the thread's cached
    /// columns and the `seconds.` of the last line when they are the same
    /// (as they are for lines a microsecond apart): its length, or `None`
    /// for a thread without cached columns or a CPU of 1000 or more.
    #[inline(always)]
    fn put_head(&mut self, out: &mut [u8], e: &Head<'_>) -> Option<usize> {
        if e.cpu >= 1000 || out.len() < HEAD_ROOM {
            return None;
        }
        let secs = e.time_ns / 1_000_000_000;
        let digits = match self.seconds {
            Some((s, digits)) if s == secs => digits,
            _ => self.new_seconds(secs),
        };
        let t = self.thread(e)?;
        out[..Thread::ROOM].copy_from_slice(&t.text);
        let at = digits.put(out, t.len);
        Some(at + put_dec6(&mut out[at..], (e.time_ns % 1_000_000_000) / 1_000))
    }
}

/// One event as ftrace prints it:
/// `comm-tid [cpu] seconds.micros: event: (where) name=value ...`, where
/// `where` is `sym+off/size` for a kprobe and `caller+off/size <- func`
/// for a kretprobe.
///
/// Appended to `s` (without a newline), allocating nothing when `s` has
/// room; `cache` remembers places and threads across calls.
pub(crate) fn write_line(
    s: &mut Vec<u8>,
    e: &Event,
    plan: &ProbePlan,
    symbols: &KernelSymbols,
    cache: &mut LineCache,
) {
    let start = s.len();
    s.resize(start + USUAL_LINE_ROOM, b' ');
    if let Some(n) = s
        .get_mut(start..)
        .and_then(|out| put_usual_line(out, e, cache))
    {
        s.truncate(start + n);
        return;
    }
    // `{:>16}-{:<7} [{:03}] {}.{:06}`, without the cost of fmt when the
    // thread and CPU allow.
    s.resize(start + HEAD_ROOM, b' ');
    match s
        .get_mut(start..)
        .and_then(|out| cache.put_head(out, &Head::of(e)))
    {
        Some(n) => s.truncate(start + n),
        None => {
            s.truncate(start);
            let _ = write!(
                s,
                "{:>16}-{:<7} [{:03}] {}.{:06}",
                e.comm,
                e.tid,
                e.cpu,
                e.time_ns / 1_000_000_000,
                (e.time_ns % 1_000_000_000) / 1_000
            );
        }
    }
    write_rest(s, e, plan, symbols, cache)
}

/// Arguments the window of [`put_usual_line`] has room for.
const USUAL_ARGS: usize = 6;

/// Room [`LineCache::put_head`] needs: the thread and CPU 40, `seconds.`
/// 24 and the micros 6, with room to spare.
const HEAD_ROOM: usize = Thread::ROOM + 24 + 9;

/// Room [`put_usual_line`] needs: the head, the lead 128, per argument its
/// ` name=` 32 and a value 21.
pub(crate) const USUAL_LINE_ROOM: usize = HEAD_ROOM + 128 + USUAL_ARGS * (32 + 21);

/// The usual line (a kprobe hit of a known thread and place, with plain
/// integer arguments only), written from cached pieces at the start of
/// `out` (at least [`USUAL_LINE_ROOM`] bytes): its length, or `None`
/// (with `out` scribbled on) for any other line.
pub(crate) fn put_usual_line(out: &mut [u8], e: &Event, cache: &mut LineCache) -> Option<usize> {
    if out.len() < USUAL_LINE_ROOM || e.ret_addr.is_some() || e.args.len() > USUAL_ARGS {
        return None;
    }
    let mut at = cache.put_head(out, &Head::of(e))?;
    let (lead, rest) = cache
        .place(e.probe, e.probe_addr)
        .and_then(|p| p.template.as_ref())?;
    if rest.len() + 1 != e.args.len().max(1) {
        return None;
    }
    at = lead.put(out, at);
    // Before each argument after the first, its ` name=`.
    let names = std::iter::once(None).chain(rest.iter().map(Some));
    for (v, name) in e.args.iter().zip(names) {
        if let Some(piece) = name {
            at = piece.put(out, at);
        }
        let Value::Int { raw, ty } = v else {
            // A string or array: the general path.
            return None;
        };
        at += put_int_arg(out.get_mut(at..)?, *raw, *ty)?;
    }
    Some(at)
}

/// An integer argument's value as the usual line prints it; `None` for
/// a symbol (the general path).
#[inline(always)]
fn put_int_arg(dst: &mut [u8], raw: u64, ty: BaseType) -> Option<usize> {
    Some(match ty {
        BaseType::Signed(_) => put_signed(dst, raw as i64),
        BaseType::Hex(_) => put_hex(dst, raw),
        BaseType::Unsigned(_) | BaseType::Bitfield { .. } => put_int(dst, raw),
        _ => return None,
    })
}

/// [`put_usual_line`] for a kprobe hit handed over as an [`IntEvent`]:
/// the same line, or `None` (with `out` scribbled on) when it is not the
/// usual one; the [`Event`] is then written by [`write_line`].
pub(crate) fn put_int_line(
    out: &mut [u8],
    e: &IntEvent<'_>,
    cache: &mut LineCache,
) -> Option<usize> {
    if out.len() < USUAL_LINE_ROOM || e.ints.len() > USUAL_ARGS {
        return None;
    }
    let head = Head {
        comm: e.comm,
        tid: e.tid,
        cpu: e.cpu,
        time_ns: e.time_ns,
    };
    let mut at = cache.put_head(out, &head)?;
    let (lead, rest) = cache
        .place(e.probe, e.probe_addr)
        .and_then(|p| p.template.as_ref())?;
    if rest.len() + 1 != e.ints.len().max(1) {
        return None;
    }
    at = lead.put(out, at);
    // Before each argument after the first, its ` name=`.
    let names = std::iter::once(None).chain(rest.iter().map(Some));
    for ((&raw, &ty), name) in e.ints.iter().zip(e.kinds).zip(names) {
        if let Some(piece) = name {
            at = piece.put(out, at);
        }
        at += put_int_arg(out.get_mut(at..)?, raw, ty)?;
    }
    Some(at)
}

/// The part of a line after the timestamp: where, then the arguments.
fn write_rest(
    s: &mut Vec<u8>,
    e: &Event,
    plan: &ProbePlan,
    symbols: &KernelSymbols,
    cache: &mut LineCache,
) {
    match e.ret_addr {
        Some(ret) => {
            s.extend_from_slice(b": ");
            s.extend_from_slice(plan.event.as_bytes());
            s.extend_from_slice(b": (");
            write_location(s, symbols, ret);
            s.extend_from_slice(b" <- ");
            match symbols.symbolize(e.probe_addr) {
                Some(l) => s.extend_from_slice(l.symbol.name.as_bytes()),
                None => push_hex(s, e.probe_addr),
            }
            s.push(b')');
        }
        None => cache.write_place(s, e, plan, symbols),
    }
    for (a, v) in plan.args.iter().zip(&e.args) {
        s.push(b' ');
        s.extend_from_slice(a.name.as_bytes());
        s.push(b'=');
        match v {
            Value::Int {
                raw,
                ty: BaseType::Symbol,
            } => write_location(s, symbols, *raw),
            Value::Int {
                raw,
                ty: BaseType::Unsigned(_) | BaseType::Bitfield { .. },
            } => push_dec(s, *raw, 1),
            Value::Int {
                raw,
                ty: BaseType::Signed(_),
            } => push_signed(s, *raw as i64),
            // As the kernel's print fmt for `char` ('%c' in quotes): the
            // byte itself, whatever it is.
            Value::Int {
                raw,
                ty: BaseType::Char,
            } => s.extend_from_slice(&[b'\'', *raw as u8, b'\'']),
            Value::Int { raw, .. } => push_hex(s, *raw),
            _ => {
                // Writing to a Vec cannot fail.
                let _ = write!(s, "{v}");
            }
        }
    }
}

/// The kernel's default kretprobe maxactive on 6.x:
/// `max(10, 2 * num_possible_cpus())`.
fn default_maxactive() -> u64 {
    let possible = kprobe_perf_engine::cli::cpus::possible_cpus().map_or(1, |c| c.len() as u64);
    (2 * possible).max(10)
}

/// Lines about kernel-side misses: never silent, and for a kretprobe the
/// maxactive that would have caught every return.
fn misses(summary: &Summary, plans: &[ProbePlan]) -> Vec<String> {
    let mut out = Vec::new();
    for (p, probe) in plans.iter().zip(&summary.probes) {
        let Some(c) = probe.kernel else { continue };
        if c.misses == 0 {
            continue;
        }
        let mut line = format!(
            "kprobe-perf: {} missed {} of {} hits in the kernel",
            p.event,
            c.misses,
            c.hits + c.misses
        );
        let kernel_return = !p.spec.target.is_user();
        if let (kprobe_perf_engine::spec::ProbeKind::Return { maxactive }, true) =
            (p.spec.kind, kernel_return)
        {
            let had = maxactive.map_or_else(default_maxactive, u64::from);
            let want = (had + c.misses).min(4096);
            line.push_str(&format!(
                ": more calls were in flight than its {had} kretprobe instance(s); use r{want}: (maxactive)"
            ));
        }
        out.push(line);
    }
    for (p, probe) in plans.iter().zip(&summary.probes) {
        let Some(c) = probe.calls else { continue };
        let n = c.unreturned();
        if n == 0 {
            continue;
        }
        out.push(unreturned_line(p, n, default_maxactive));
    }
    out
}

/// The line for `n` calls of the PMU kretprobe `p` whose entry the
/// kernel counted and whose return it did not report. Only a kernel
/// kretprobe has instances to raise (maxactive, `rN:`); a uretprobe's
/// returns are missed for other reasons.
fn unreturned_line(p: &ProbePlan, n: u64, default_maxactive: impl Fn() -> u64) -> String {
    // Uretprobes have no maxactive: the kernel allocates a return
    // instance per call, and stops hijacking returns only past
    // MAX_URETPROBE_DEPTH (64) nested calls in one thread.
    if p.spec.target.is_user() {
        return format!(
            "kprobe-perf: {}: {n} calls entered without a reported return: still running at the end, left by longjmp or an exception, or nested deeper than the kernel's 64 pending uretprobes per thread",
            p.event
        );
    }
    let had = match p.spec.kind {
        kprobe_perf_engine::spec::ProbeKind::Return { maxactive: Some(m) } => u64::from(m),
        _ => default_maxactive(),
    };
    format!(
        "kprobe-perf: {}: {n} calls entered without a reported return: missed for lack of kretprobe instances (it had {had}) or still running at the end; if missed, use r{}: (maxactive)",
        p.event,
        (had + n).min(4096)
    )
}

/// The closing summary's lines, for stderr (and the -o file's note):
/// the counts ([`summary`]), the kernel's misses, the losses per CPU and
/// throttling, and the flight recorder's window.
pub(crate) fn summary_lines(s: &Summary, plans: &[ProbePlan]) -> Vec<String> {
    let mut lines = vec![summary(s)];
    lines.extend(probe_table(s));
    lines.extend(misses(s, plans));
    lines.extend(filter_lines(s));
    lines.extend(loss_and_throttle_lines(s));
    if let Some(w) = &s.overwrite {
        let overwritten = w
            .overwritten
            .map_or_else(|| "?".to_string(), |n| n.to_string());
        lines.push(format!(
            "flight recorder: the window held {} events; {overwritten} older ones were overwritten",
            w.held
        ));
    }
    lines
}

/// One line per probe with a filter: where it ran and, in user space,
/// why and how many events it dropped. Nothing without filters.
fn filter_lines(s: &Summary) -> Vec<String> {
    s.probes
        .iter()
        .filter_map(|p| {
            let f = p.filter.as_ref()?;
            Some(match (&f.reason, f.dropped) {
                (Some(why), Some(n)) => format!(
                    "filter of {} ({}): ran in user space ({}), dropped {n} events",
                    p.event,
                    f.expr,
                    crate::hints::flags_in(why)
                ),
                _ => format!(
                    "filter of {} ({}): ran in the kernel (events it rejected never reached the ring; the kernel does not count them)",
                    p.event, f.expr
                ),
            })
        })
        .collect()
}

/// The closing summary: events per probe and losses, never omitted. The
/// loss of each probe is exact: the kernel's hit count for it minus the
/// events decoded (`PERF_RECORD_LOST` records can stay unsent when a ring
/// is still full at the end, so they are only a floor). In flight-recorder
/// mode the same count is of events not kept: overwritten by design, or
/// dropped while a dump paused the rings; it is not called a loss.
fn summary(s: &Summary) -> String {
    let not_kept = s.loss.is_not_kept();
    let word = if not_kept { "not kept" } else { "lost" };
    let per_probe: Vec<String> = if s.probes.len() > TABLE_FROM {
        vec![format!("{} probes, by events below", s.probes.len())]
    } else {
        s.probes
            .iter()
            .map(|p| {
                let mut s = match p.loss.count() {
                    Some(l) if l > 0 => format!("{}: {}, {l} {word}", p.event, p.events),
                    _ => format!("{}: {}", p.event, p.events),
                };
                // A return probe joined to a hidden entry probe: its returns
                // whose entry was not seen (lost, or before the start).
                if let Some(u) = p.entry_unknown.filter(|&u| u > 0) {
                    s.push_str(&format!(", {u} with entry values unknown"));
                }
                s
            })
            .collect()
    };
    let total_lost = s.loss.count().unwrap_or(s.lost_records);
    let mut line = format!(
        "kprobe-perf: {} events ({}), {total_lost} {word}",
        s.events,
        per_probe.join("; ")
    );
    if not_kept && total_lost > 0 {
        line.push_str(" (overwritten in the flight recorder's window, or dropped while a dump paused the rings)");
    }
    if !s.exact {
        line.push_str(" (from PERF_RECORD_LOST; the kernel's counts could not be read)");
    }
    if s.undecodable > 0 {
        line.push_str(&format!(", {} undecodable records", s.undecodable));
    }
    line
}

/// From this many probes on, the closing summary lists them in a table
/// (most events first, those with none folded into one line) instead of
/// on its first line.
const TABLE_FROM: usize = 8;

/// The table of probes for a summary of more than [`TABLE_FROM`] probes:
/// events, losses and the event name, most events first (ties in the
/// order given); probes with no event are one line with their count and
/// names.
fn probe_table(s: &Summary) -> Vec<String> {
    if s.probes.len() <= TABLE_FROM {
        return Vec::new();
    }
    let rows: Vec<(&str, u64, Option<u64>)> = s
        .probes
        .iter()
        .map(|p| (p.event.as_str(), p.events, p.loss.count()))
        .collect();
    table_rows(&rows, s.loss.is_not_kept())
}

/// [`probe_table`] over (event, events, loss) rows in the order given.
fn table_rows(rows: &[(&str, u64, Option<u64>)], not_kept: bool) -> Vec<String> {
    let word = if not_kept { "NOT KEPT" } else { "LOST" };
    let mut hit: Vec<&(&str, u64, Option<u64>)> = rows.iter().filter(|r| r.1 > 0).collect();
    hit.sort_by_key(|r| std::cmp::Reverse(r.1));
    let lost = |l: Option<u64>| l.map_or_else(|| "?".to_string(), |l| l.to_string());
    let width = hit
        .iter()
        .map(|r| r.1.to_string().len())
        .max()
        .unwrap_or(1)
        .max("EVENTS".len());
    let lost_width = hit
        .iter()
        .map(|r| lost(r.2).len())
        .max()
        .unwrap_or(1)
        .max(word.len());
    let mut lines = vec![format!(
        "  {:>width$}  {word:>lost_width$}  PROBE",
        "EVENTS"
    )];
    for (event, events, loss) in &hit {
        lines.push(format!(
            "  {events:>width$}  {:>lost_width$}  {event}",
            lost(*loss)
        ));
    }
    let idle: Vec<&str> = rows.iter().filter(|r| r.1 == 0).map(|r| r.0).collect();
    if !idle.is_empty() {
        const NAMED: usize = 6;
        let mut names = idle[..idle.len().min(NAMED)].join(", ");
        if idle.len() > NAMED {
            names.push_str(&format!(" and {} more", idle.len() - NAMED));
        }
        lines.push(format!(
            "  {:>width$}  {:>lost_width$}  {} probes with no event: {names}",
            0,
            "",
            idle.len()
        ));
    }
    lines
}

/// Lines for losses per CPU and throttling per CPU and probe (nothing
/// when there were none).
fn loss_and_throttle_lines(s: &Summary) -> Vec<String> {
    let cpu = |c: &Option<u32>| c.map_or_else(|| "CPU ?".to_string(), |c| format!("CPU {c}"));
    let mut lines = Vec::new();
    // Exact per ring (the kernel's counts minus the samples read), so the
    // figures sum to the summary's total; PERF_RECORD_LOST's when the
    // counts cannot be read.
    if !s.lost_per_cpu.is_empty() {
        let parts: Vec<String> = s
            .lost_per_cpu
            .iter()
            .map(|l| {
                format!(
                    "{}: {}",
                    l.cpu
                        .map_or_else(|| "threads".to_string(), |c| format!("CPU {c}")),
                    l.lost
                )
            })
            .collect();
        let what = if s.loss.is_not_kept() {
            "samples not kept per CPU"
        } else {
            "lost samples per CPU"
        };
        lines.push(format!("{what}: {}", parts.join(", ")));
    }
    for t in &s.throttling {
        lines.push(format!(
            "{}: throttled {} times on {} (unthrottled {}); raise kernel.perf_event_max_sample_rate",
            t.event,
            t.throttling.throttled,
            cpu(&t.cpu),
            t.throttling.unthrottled
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use kprobe_perf_engine::cli::plan::{self, BackendChoice};
    use kprobe_perf_engine::{Arch, ProbeSpec};
    use std::sync::Arc;

    /// The line as `format!` writes it: the layout the fast paths must
    /// reproduce byte for byte.
    fn reference(e: &Event, plan: &ProbePlan, symbols: &KernelSymbols) -> String {
        let mut s = format!(
            "{:>16}-{:<7} [{:03}] {}.{:06}: {}: (",
            e.comm,
            e.tid,
            e.cpu,
            e.time_ns / 1_000_000_000,
            (e.time_ns % 1_000_000_000) / 1_000,
            plan.event
        );
        match e.ret_addr {
            Some(r) => {
                s += &format!(
                    "{} <- {})",
                    location(symbols, r),
                    function(symbols, e.probe_addr)
                )
            }
            None => s += &format!("{})", location(symbols, e.probe_addr)),
        }
        for (a, v) in plan.args.iter().zip(&e.args) {
            match v {
                Value::Int {
                    raw,
                    ty: BaseType::Symbol,
                } => s += &format!(" {}={}", a.name, location(symbols, *raw)),
                _ => s += &format!(" {}={v}", a.name),
            }
        }
        s
    }

    #[test]
    fn lines_match_fmt_on_every_path() {
        let symbols = crate::test_support::open_symbols();
        let plan = |spec: &str| crate::test_support::planned(spec, &symbols, BackendChoice::Pmu);
        let plans = [
            plan("p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32 mode=%cx:u16 b=%si:b3@2/8"),
            plan("r:do_sys_open ret=$retval:s64 at=%di:symbol"),
            plan("p:do_sys_open"),
        ];
        let int = |raw: u64, ty| Value::Int { raw, ty };
        let event = |probe: usize, comm: &str, tid: i32, cpu: u32, args: Vec<Value>| {
            let mut e = Event::default();
            e.probe = probe;
            e.cpu = cpu;
            e.pid = tid;
            e.tid = tid;
            e.comm = Arc::from(comm);
            e.time_ns = 1_234_567_890_123;
            e.ip = 0xffff_ffff_8123_4691;
            e.probe_addr = if probe == 0 {
                0xffff_ffff_8123_45a0
            } else {
                0xffff_ffff_8123_4690
            };
            e.ret_addr = (probe == 1).then_some(0xffff_ffff_8123_45b7);
            e.args = args;
            e
        };
        let usual = vec![
            int(u64::MAX - 99, BaseType::Signed(32)),
            int(0x8000, BaseType::Hex(32)),
            int(420, BaseType::Unsigned(16)),
            int(
                5,
                BaseType::Bitfield {
                    width: 3,
                    offset: 2,
                    container: 8,
                },
            ),
        ];
        let events = [
            event(0, "cat", 77, 1, usual.clone()),
            event(0, "a-sixteen-byte-n", 1_234_567, 999, usual.clone()),
            event(0, "naïve", 5, 2, usual.clone()),
            event(0, "cat", -1, 1000, usual.clone()),
            event(0, "seventeen-bytes!!", 123_456_789, 3, usual.clone()),
            event(0, "", 0, 0, usual.clone()),
            event(
                1,
                "sh",
                9,
                1,
                vec![
                    int(u64::MAX, BaseType::Signed(64)),
                    int(0xffff_ffff_8123_45a5, BaseType::Symbol),
                ],
            ),
            event(2, "cat", 77, 1, vec![]),
        ];
        let mut cache = LineCache::default();
        let (mut usual_lines, mut int_lines) = (0, 0);
        // Twice: the first line of a place or thread is made the long way,
        // the next from what the cache keeps.
        for _ in 0..2 {
            for e in &events {
                let plan = &plans[e.probe];
                let mut s = Vec::new();
                write_line(&mut s, e, plan, &symbols, &mut cache);
                assert_eq!(String::from_utf8(s).unwrap(), reference(e, plan, &symbols));
                let mut room = vec![0u8; USUAL_LINE_ROOM];
                if let Some(n) = put_usual_line(&mut room, e, &mut cache) {
                    usual_lines += 1;
                    assert_eq!(
                        String::from_utf8(room[..n].to_vec()).unwrap(),
                        reference(e, plan, &symbols)
                    );
                }
                // The same event handed over as it waited in the queue.
                room.fill(0);
                if let Some(Some(n)) =
                    crate::test_support::as_int_event(e, |i| put_int_line(&mut room, i, &mut cache))
                {
                    int_lines += 1;
                    assert_eq!(
                        String::from_utf8(room[..n].to_vec()).unwrap(),
                        reference(e, plan, &symbols)
                    );
                }
            }
        }
        // Not for a non-ASCII or 17-byte name, CPU 1000 or a kretprobe.
        assert_eq!(usual_lines, 8);
        assert_eq!(int_lines, 8);
    }

    /// `:char` prints as the kernel's print fmt does, `'c'` (it printed
    /// `0x2f`), and the usual line, which has no char, leaves it to the
    /// general path.
    #[test]
    fn chars_print_quoted_as_the_kernel_prints_them() {
        let symbols = crate::test_support::open_symbols();
        let plan = crate::test_support::planned(
            "p:do_sys_open c=%di:char n=%si:s32",
            &symbols,
            BackendChoice::Pmu,
        );
        let mut e = Event::default();
        e.comm = Arc::from("ls");
        e.tid = 42;
        e.pid = 42;
        e.time_ns = 1_000_000_000;
        e.probe_addr = 0xffff_ffff_8123_4690;
        e.args = vec![
            Value::Int {
                raw: 0x2f,
                ty: BaseType::Char,
            },
            Value::Int {
                raw: 3,
                ty: BaseType::Signed(32),
            },
        ];
        let mut s = Vec::new();
        write_line(&mut s, &e, &plan, &symbols, &mut LineCache::default());
        assert_eq!(
            String::from_utf8(s).unwrap(),
            "              ls-42      [000] 1.000000: p_do_sys_open_0: (0xffffffff81234690) c='/' n=3"
        );
        let mut room = vec![0u8; USUAL_LINE_ROOM];
        assert_eq!(
            put_usual_line(&mut room, &e, &mut LineCache::default()),
            None
        );
    }

    #[test]
    fn hand_formatting_matches_fmt() {
        let text = |s: &Vec<u8>| String::from_utf8(s.clone()).unwrap();
        for v in [0u32, 7, 42, 100, 999] {
            let mut out = [0u8; 3];
            assert_eq!(put_dec3(&mut out, v), 3);
            assert_eq!(out, format!("{v:03}").as_bytes());
        }
        for v in [0u64, 5, 12_345, 100_000, 999_999] {
            let mut out = [0u8; 6];
            assert_eq!(put_dec6(&mut out, v), 6);
            assert_eq!(out, format!("{v:06}").as_bytes());
        }
        for v in [
            0u64,
            1,
            9,
            10,
            99,
            0x8000,
            0x98800,
            1000,
            123_456_789,
            u64::MAX,
        ] {
            let mut s = Vec::new();
            push_dec(&mut s, v, 1);
            assert_eq!(text(&s), v.to_string());
            s.clear();
            push_dec(&mut s, v, 6);
            assert_eq!(text(&s), format!("{v:06}"));
            s.clear();
            push_hex(&mut s, v);
            assert_eq!(text(&s), format!("0x{v:x}"));
        }
        // Every length from 1 to 20 characters (copy_short's cases).
        let mut values = vec![0i64, -1, -100, i64::MIN, i64::MAX];
        values.extend((1..19).map(|d| 10i64.pow(d)));
        values.extend((1..19).map(|d| -(10i64.pow(d)) + 1));
        for v in values {
            let mut s = Vec::new();
            push_signed(&mut s, v);
            assert_eq!(text(&s), v.to_string());
        }
    }

    /// Unreturned calls of a kernel kretprobe point at maxactive; those
    /// of a uretprobe (which has no maxactive) never do.
    #[test]
    fn many_probes_are_a_table_by_events_with_the_idle_ones_folded() {
        let names: Vec<String> = (0..10).map(|i| format!("p_vfs_f{i}_0")).collect();
        let events = [5, 0, 120, 0, 0, 7, 0, 0, 0, 0];
        let rows: Vec<(&str, u64, Option<u64>)> = names
            .iter()
            .zip(events)
            .map(|(n, e)| (n.as_str(), e, Some(if e == 120 { 3 } else { 0 })))
            .collect();
        assert_eq!(
            table_rows(&rows, false),
            [
                "  EVENTS  LOST  PROBE",
                "     120     3  p_vfs_f2_0",
                "       7     0  p_vfs_f5_0",
                "       5     0  p_vfs_f0_0",
                "       0        7 probes with no event: p_vfs_f1_0, p_vfs_f3_0, p_vfs_f4_0, p_vfs_f6_0, p_vfs_f7_0, p_vfs_f8_0 and 1 more",
            ]
        );
    }

    #[test]
    fn unreturned_advice_names_maxactive_only_for_kernel_kretprobes() {
        let symbols =
            KernelSymbols::parse("ffffffff81000000 T _text\nffffffff812345a0 T do_sys_openat2\n")
                .unwrap();
        let kernel = plan::resolve(
            ProbeSpec::parse("r:myret do_sys_openat2", Arch::X86_64).unwrap(),
            &symbols,
            Arch::X86_64,
            BackendChoice::Pmu,
        )
        .unwrap();
        assert_eq!(
            unreturned_line(&kernel, 3, || 8),
            "kprobe-perf: myret: 3 calls entered without a reported return: missed for lack of kretprobe instances (it had 8) or still running at the end; if missed, use r11: (maxactive)"
        );
        let mut user = kernel.clone();
        user.spec.target = kprobe_perf_engine::spec::Target::User {
            path: "/bin/true".into(),
            location: kprobe_perf_engine::spec::UserLocation::Offset(0x10),
        };
        let line = unreturned_line(&user, 3, || 8);
        assert_eq!(
            line,
            "kprobe-perf: myret: 3 calls entered without a reported return: still running at the end, left by longjmp or an exception, or nested deeper than the kernel's 64 pending uretprobes per thread"
        );
        assert!(!line.contains("maxactive") && !line.contains("r11:"));
    }
}
