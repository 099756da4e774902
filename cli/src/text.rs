//! The text output: one line per event in ftrace's layout, and the summary.

use std::io::Write as _;

use kprobe_perf_engine::spec::BaseType;
use kprobe_perf_engine::{Event, KernelSymbols, ProbePlan, Session, Value};

/// `sym+0xoff/0xsize`, or the bare address when no symbol holds it.
pub fn location(symbols: &KernelSymbols, addr: u64) -> String {
    match symbols.symbolize(addr) {
        Some(l) => format!("{}+0x{:x}/0x{:x}", l.symbol.name, l.offset, l.size),
        None => format!("0x{addr:x}"),
    }
}

/// The name of the function holding `addr` (ftrace's `%ps`: no offset,
/// so an entry moved past ENDBR64 still prints as the function), or the
/// bare address.
pub fn function(symbols: &KernelSymbols, addr: u64) -> String {
    match symbols.symbolize(addr) {
        Some(l) => l.symbol.name.clone(),
        None => format!("0x{addr:x}"),
    }
}

/// One event as ftrace prints it:
/// `comm-tid [cpu] seconds.micros: event: (where) name=value ...`, where
/// `where` is `sym+off/size` for a kprobe and `caller+off/size <- func`
/// for a kretprobe.
pub fn line(e: &Event, plan: &ProbePlan, symbols: &KernelSymbols) -> String {
    let mut s = Vec::with_capacity(128);
    write_line(&mut s, e, plan, symbols, &mut Places::none());
    // Every piece written is a str or ASCII.
    String::from_utf8(s).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Two-digit decimal pairs, `00` to `99`.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Appends `v` in decimal, at least `width` digits (zero-padded): the
/// room is made once, then filled from the end two digits at a time.
fn push_dec(s: &mut Vec<u8>, mut v: u64, width: usize) {
    let digits = v.checked_ilog10().map_or(1, |l| l as usize + 1).max(width);
    let start = s.len();
    s.resize(start + digits, b'0');
    let out = &mut s[start..];
    let mut i = out.len();
    while v >= 10 && i >= 2 {
        let p = (v % 100) as usize * 2;
        out[i - 1] = PAIRS[p + 1];
        out[i - 2] = PAIRS[p];
        i -= 2;
        v /= 100;
    }
    if v > 0 && i >= 1 {
        out[i - 1] = b'0' + (v % 10) as u8;
    }
}

/// The start of a line, built on the stack.
struct Head {
    buf: [u8; 96],
    len: usize,
    /// Something did not fit: the line is formatted the slow way.
    overflow: bool,
}

impl Default for Head {
    fn default() -> Self {
        Head {
            buf: [0; 96],
            len: 0,
            overflow: false,
        }
    }
}

impl Head {
    fn push(&mut self, b: u8) {
        match self.buf.get_mut(self.len) {
            Some(slot) => {
                *slot = b;
                self.len += 1;
            }
            None => self.overflow = true,
        }
    }

    fn extend(&mut self, bytes: &[u8]) {
        match self.buf.get_mut(self.len..self.len + bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => self.overflow = true,
        }
    }

    /// `v` in decimal, at least `width` digits.
    fn dec(&mut self, mut v: u64, width: usize) {
        let mut tmp = [b'0'; 20];
        let mut i = tmp.len();
        while v >= 10 {
            let p = (v % 100) as usize * 2;
            tmp[i - 1] = PAIRS[p + 1];
            tmp[i - 2] = PAIRS[p];
            i -= 2;
            v /= 100;
        }
        if v > 0 || i == tmp.len() {
            i -= 1;
            tmp[i] = b'0' + v as u8;
        }
        let start = i.min(tmp.len().saturating_sub(width));
        self.extend(&tmp[start..]);
    }
}

/// Appends `v` in decimal with a sign.
fn push_signed(s: &mut Vec<u8>, v: i64) {
    if v < 0 {
        s.push(b'-');
    }
    push_dec(s, v.unsigned_abs(), 1);
}

/// Appends `0x` and `v` in lowercase hex.
fn push_hex(s: &mut Vec<u8>, mut v: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = ((64 - v.leading_zeros() as usize).div_ceil(4)).max(1);
    let start = s.len();
    s.resize(start + 2 + digits, b'0');
    let out = &mut s[start..];
    out[1] = b'x';
    for d in out[2..].iter_mut().rev() {
        *d = HEX[(v & 0xf) as usize];
        v >>= 4;
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

/// The `: event: (sym+off/size)` of the kprobes seen so far, by probe and
/// address: a kprobe's place is the same at every hit.
#[derive(Default)]
pub struct Places {
    known: Vec<(usize, u64, Vec<u8>)>,
    /// Remember nothing (a one-off line).
    off: bool,
}

impl Places {
    /// At most this many places are remembered.
    const MAX: usize = 64;

    /// A cache that remembers nothing, for a single line.
    pub fn none() -> Places {
        Places {
            known: Vec::new(),
            off: true,
        }
    }

    /// Appends `: event: (place)` of a kprobe hit.
    fn write(&mut self, s: &mut Vec<u8>, e: &Event, plan: &ProbePlan, symbols: &KernelSymbols) {
        let key = (e.probe, e.probe_addr);
        if let Some((_, _, text)) = self.known.iter().find(|(p, a, _)| (*p, *a) == key) {
            s.extend_from_slice(text);
            return;
        }
        let start = s.len();
        s.extend_from_slice(b": ");
        s.extend_from_slice(plan.event.as_bytes());
        s.extend_from_slice(b": (");
        write_location(s, symbols, e.probe_addr);
        s.push(b')');
        if !self.off && self.known.len() < Self::MAX {
            self.known.push((key.0, key.1, s[start..].to_vec()));
        }
    }
}

/// Appends [`line`]'s text to `s` (without a newline), allocating nothing
/// when `s` has room: the formatter of `script` and the benchmarks.
/// `places` remembers kprobe places across calls.
pub fn write_line(
    s: &mut Vec<u8>,
    e: &Event,
    plan: &ProbePlan,
    symbols: &KernelSymbols,
    places: &mut Places,
) {
    // `{:>16}-{:<7} [{:03}] {}.{:06}`, without the cost of fmt: built in
    // a stack buffer, then copied once.
    let mut head = Head::default();
    let comm_chars = if e.comm.is_ascii() {
        e.comm.len()
    } else {
        e.comm.chars().count()
    };
    for _ in comm_chars..16 {
        head.push(b' ');
    }
    head.extend(e.comm.as_bytes());
    head.push(b'-');
    let before = head.len;
    if e.tid < 0 {
        head.push(b'-');
    }
    head.dec(u64::from(e.tid.unsigned_abs()), 1);
    for _ in head.len - before..7 {
        head.push(b' ');
    }
    head.extend(b" [");
    head.dec(u64::from(e.cpu), 3);
    head.extend(b"] ");
    head.dec(e.time_ns / 1_000_000_000, 1);
    head.push(b'.');
    head.dec((e.time_ns % 1_000_000_000) / 1_000, 6);
    match head.overflow {
        false => s.extend_from_slice(&head.buf[..head.len]),
        // A name too long for the buffer (only in a crafted file).
        true => {
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
        None => places.write(s, e, plan, symbols),
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
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|t| {
            t.trim()
                .split(',')
                .map(|r| match r.split_once('-') {
                    Some((a, b)) => b
                        .parse::<u64>()
                        .ok()?
                        .checked_sub(a.parse().ok()?)
                        .map(|n| n + 1),
                    None => r.parse::<u64>().ok().map(|_| 1),
                })
                .sum::<Option<u64>>()
        })
        .unwrap_or(1);
    (2 * possible).max(10)
}

/// Lines about kernel-side misses: never silent, and for a kretprobe the
/// maxactive that would have caught every return.
pub fn misses(session: &Session) -> Vec<String> {
    let mut out = Vec::new();
    for (p, counts) in session.plans().iter().zip(session.kernel_counts()) {
        let Some(c) = counts else { continue };
        if c.misses == 0 {
            continue;
        }
        let mut line = format!(
            "kprobe-perf: {} missed {} of {} hits in the kernel",
            p.event,
            c.misses,
            c.hits + c.misses
        );
        if let kprobe_perf_engine::spec::ProbeKind::Return { maxactive } = p.spec.kind {
            let had = maxactive.map_or_else(default_maxactive, u64::from);
            let want = (had + c.misses).min(4096);
            line.push_str(&format!(
                ": more calls were in flight than its {had} kretprobe instance(s); use r{want}: (maxactive)"
            ));
        }
        out.push(line);
    }
    for (i, p) in session.plans().iter().enumerate() {
        if !p.is_return() || p.backend != kprobe_perf_engine::plan::Backend::Pmu {
            continue;
        }
        let n = session.stats().unreturned(i);
        if n == 0 {
            continue;
        }
        let had = default_maxactive();
        out.push(format!(
            "kprobe-perf: {}: {n} calls entered without a reported return: missed for lack of kretprobe instances (the kernel's default is {had}) or still running at the end; if missed, use r{}: (maxactive)",
            p.event,
            (had + n).min(4096)
        ));
    }
    out
}

/// The closing summary: events per probe and losses, never omitted. The
/// loss of each probe is exact: the kernel's hit count for it minus the
/// events decoded (`PERF_RECORD_LOST` records can stay unsent when a ring
/// is still full at the end, so they are only a floor).
pub fn summary(session: &Session) -> String {
    let stats = session.stats();
    let lost = session.lost_per_probe().ok();
    let mut total = 0;
    let mut total_lost = 0;
    let mut per_probe = Vec::new();
    for (i, p) in session.plans().iter().enumerate() {
        if p.companion_of.is_some() {
            continue;
        }
        let n = stats.hits.get(i).copied().unwrap_or(0);
        total += n;
        match lost.as_ref().and_then(|l| l.get(i)).copied() {
            Some(l) if l > 0 => {
                total_lost += l;
                per_probe.push(format!("{}: {n}, {l} lost", p.event));
            }
            _ => per_probe.push(format!("{}: {n}", p.event)),
        }
    }
    let total_lost = if lost.is_some() {
        total_lost
    } else {
        stats.lost
    };
    let mut s = format!(
        "kprobe-perf: {total} events ({}), {total_lost} lost",
        per_probe.join("; ")
    );
    if lost.is_none() {
        s.push_str(" (from PERF_RECORD_LOST; the kernel's counts could not be read)");
    }
    if stats.undecodable > 0 {
        s.push_str(&format!(", {} undecodable records", stats.undecodable));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_formatting_matches_fmt() {
        let text = |s: &Vec<u8>| String::from_utf8(s.clone()).unwrap();
        for v in [0u64, 1, 9, 10, 99, 1000, 123_456_789, u64::MAX] {
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
        for v in [0i64, -1, -100, i64::MIN, i64::MAX] {
            let mut s = Vec::new();
            push_signed(&mut s, v);
            assert_eq!(text(&s), v.to_string());
        }
    }
}
