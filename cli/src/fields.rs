//! `script -F FIELDS`: perf script's field list, each field printed as
//! perf script prints it, so that a line of the one reads as a line of
//! the other (`-F ip,sym` names a uprobe's function, where the usual
//! line shows its address only).

use kprobe_perf_engine::stack::{ProcessMaps, StackFrame, StackSymbolizer};
use kprobe_perf_engine::{Event, KernelSymbols, ProbePlan};

use crate::text;

/// The fields, in the order perf script prints them.
const NAMES: [&str; 11] = [
    "comm", "pid", "tid", "cpu", "time", "event", "ip", "sym", "symoff", "dso", "trace",
];

/// perf script's fields for probe events when no -F is given.
const DEFAULT: [&str; 6] = ["comm", "tid", "cpu", "time", "event", "trace"];

/// A set of fields (bit i: `NAMES[i]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fields(u16);

impl Fields {
    fn bit(name: &str) -> Option<u16> {
        NAMES.iter().position(|n| *n == name).map(|i| 1 << i)
    }

    fn has(self, name: &str) -> bool {
        Self::bit(name).is_some_and(|b| self.0 & b != 0)
    }

    /// `-F`'s argument: `comm,tid,ip,sym`, or changes to perf's default
    /// (`+ip,+sym`, `-cpu`), as perf script reads it.
    pub(crate) fn parse(text: &str) -> Result<Fields, String> {
        let changes = text.starts_with(['+', '-']);
        let mut set = if changes {
            DEFAULT
                .iter()
                .filter_map(|n| Self::bit(n))
                .fold(0, |a, b| a | b)
        } else {
            0
        };
        for item in text.split(',') {
            let (sign, name) = match item.split_at_checked(1) {
                Some(("+", n)) if changes => ('+', n),
                Some(("-", n)) if changes => ('-', n),
                _ => ('=', item),
            };
            let bit = Self::bit(name).ok_or_else(|| {
                format!(
                    "`{name}` is not a field kprobe-perf prints; the fields are {} (perf script's names), or +FIELD and -FIELD to change its default ({})",
                    NAMES.join(","),
                    DEFAULT.join(",")
                )
            })?;
            match sign {
                '-' => set &= !bit,
                _ => set |= bit,
            }
        }
        Ok(Fields(set))
    }
}

/// Writes events as `-F` asks.
pub(crate) struct FieldWriter {
    fields: Fields,
    symbolizer: StackSymbolizer,
    /// perf's event column: as wide as the longest event name.
    name_width: usize,
    cache: text::LineCache,
    line: Vec<u8>,
}

impl FieldWriter {
    pub(crate) fn new(fields: Fields, plans: &[ProbePlan]) -> FieldWriter {
        FieldWriter {
            fields,
            symbolizer: StackSymbolizer::new(),
            name_width: plans.iter().map(|p| p.event.len()).max().unwrap_or(0),
            cache: text::LineCache::default(),
            line: Vec::new(),
        }
    }

    /// `e`'s line (without its newline) into `out`.
    pub(crate) fn write(
        &mut self,
        out: &mut Vec<u8>,
        e: &Event,
        plan: &ProbePlan,
        symbols: &KernelSymbols,
        maps: &ProcessMaps,
    ) {
        use std::io::Write as _;
        let f = self.fields;
        // Writing to a Vec cannot fail.
        if f.has("comm") {
            let _ = write!(out, "{:>16} ", e.comm);
        }
        match (f.has("pid"), f.has("tid")) {
            (true, true) => {
                let _ = write!(out, "{:5}/{:<5} ", e.pid, e.tid);
            }
            (true, false) => {
                let _ = write!(out, "{:5} ", e.pid);
            }
            (false, true) => {
                let _ = write!(out, "{:5} ", e.tid);
            }
            (false, false) => {}
        }
        if f.has("cpu") {
            let _ = write!(out, "[{:03}] ", e.cpu);
        }
        if f.has("time") {
            let t = e.time_ns;
            let _ = write!(
                out,
                "{:5}.{:06}: ",
                t / 1_000_000_000,
                t % 1_000_000_000 / 1_000
            );
        }
        if f.has("event") {
            let _ = write!(out, "{:>w$}: ", plan.event, w = self.name_width);
        }
        // The trace before the ip, as perf puts them; trailing spaces
        // kept, as perf keeps them.
        if f.has("trace") {
            out.extend_from_slice(self.trace(e, plan, symbols));
        }
        if f.has("ip") {
            let _ = write!(out, " {:16x}", e.ip);
            self.write_place(out, e, symbols, maps);
        }
    }

    /// ` sym[+0xOFF] (dso)` after the ip, as asked; a user address is
    /// named from the mapped binary, as a callchain's frame is.
    fn write_place(
        &mut self,
        out: &mut Vec<u8>,
        e: &Event,
        symbols: &KernelSymbols,
        maps: &ProcessMaps,
    ) {
        use std::io::Write as _;
        let f = self.fields;
        if !(f.has("sym") || f.has("dso")) {
            return;
        }
        let mut one = Event::default();
        one.pid = e.pid;
        one.tid = e.tid;
        one.callchain = vec![StackFrame {
            address: e.ip,
            user: e.ip < 1 << 63,
        }];
        let frames = self.symbolizer.frames(&one, symbols, maps);
        // The outermost of an address's frames is its function (the
        // others are inlined into it).
        let Some(frame) = frames.last() else { return };
        if f.has("sym") {
            let name = frame.symbol.as_deref().unwrap_or("[unknown]");
            let _ = write!(out, " {name}");
            if f.has("symoff") && frame.symbol.is_some() {
                let _ = write!(out, "+0x{:x}", frame.offset);
            }
        }
        if f.has("dso") {
            let _ = write!(out, " ({})", frame.object);
        }
    }

    /// The probe's place and arguments, as the usual line prints them
    /// after its event name.
    fn trace(&mut self, e: &Event, plan: &ProbePlan, symbols: &KernelSymbols) -> &[u8] {
        self.line.clear();
        text::write_line(&mut self.line, e, plan, symbols, &mut self.cache);
        let head = format!(": {}: ", plan.event);
        let line = &self.line[..];
        match line.windows(head.len()).position(|w| w == head.as_bytes()) {
            Some(at) => &line[at + head.len()..],
            None => line,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_as_perf_script_reads_them() {
        let f = Fields::parse("ip,sym").unwrap();
        assert!(f.has("ip") && f.has("sym") && !f.has("comm"));
        let f = Fields::parse("+ip,-cpu").unwrap();
        assert!(f.has("ip") && f.has("comm") && f.has("trace") && !f.has("cpu"));
        assert_eq!(
            Fields::parse("ip,period").unwrap_err(),
            "`period` is not a field kprobe-perf prints; the fields are \
             comm,pid,tid,cpu,time,event,ip,sym,symoff,dso,trace (perf script's names), or \
             +FIELD and -FIELD to change its default (comm,tid,cpu,time,event,trace)"
        );
    }
}
