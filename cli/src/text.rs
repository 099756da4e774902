//! The text output: one line per event in ftrace's layout, and the summary.

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
    let place = match e.ret_addr {
        Some(ret) => format!(
            "{} <- {}",
            location(symbols, ret),
            function(symbols, e.probe_addr)
        ),
        None => location(symbols, e.probe_addr),
    };
    let mut s = format!(
        "{:>16}-{:<7} [{:03}] {}.{:06}: {}: ({})",
        e.comm,
        e.tid,
        e.cpu,
        e.time_ns / 1_000_000_000,
        (e.time_ns % 1_000_000_000) / 1_000,
        plan.event,
        place
    );
    for (a, v) in plan.args.iter().zip(&e.args) {
        match v {
            Value::Int {
                raw,
                ty: BaseType::Symbol,
            } => s.push_str(&format!(" {}={}", a.name, location(symbols, *raw))),
            _ => s.push_str(&format!(" {}={v}", a.name)),
        }
    }
    s
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
