//! `--json`: one JSON object per event (JSON Lines), typed: numbers as
//! numbers, strings as strings, an unreadable string as null, arrays as
//! arrays; then one closing summary object. An entry value a return
//! probe could not be given (its entry was not seen: see the engine's
//! `entry_join`) is null too, and its name is listed in the event's
//! `"unknown"` array, which only such events have: a null there is not a
//! fault.
//!
//! Events are written straight into the line's bytes, keys in sorted
//! order (as a `serde_json::Value` map would print them), with what is
//! the same from event to event (each probe's argument order, each
//! address's symbol) worked out once: a live session at full rate spends
//! its time here.

use std::collections::HashMap;

use kprobe_perf_engine::spec::BaseType;
use kprobe_perf_engine::{Event, IntEvent, KernelSymbols, ProbePlan, Summary, Value};
use serde_json::json;

use crate::text::{function, location};

mod usual;
pub(crate) use usual::USUAL_OBJECT_ROOM;

/// Addresses whose symbols are kept before the cache starts again.
const PLACES_KEPT: usize = 4096;

/// Writes events as JSON objects, remembering what repeats.
#[derive(Default)]
pub(crate) struct EventWriter {
    /// Per probe (by index): the `"args":{...}` key order, as indices
    /// into the plan's arguments sorted by name (the last of equal names).
    arg_order: Vec<Option<Vec<usize>>>,
    /// Per address: its `"location":"..."` (entry) or `"function":"..."`
    /// (return) member, quoted, with the leading key.
    places: HashMap<(u64, bool), Box<[u8]>>,
    /// Per symbol-typed value: its quoted location.
    symbols: HashMap<u64, Box<[u8]>>,
    /// The pieces of the usual object.
    usual: usual::Usual,
}

impl EventWriter {
    /// The usual object (a kprobe hit of a known thread and place, with
    /// plain integer arguments) at the start of `out` (at least
    /// [`USUAL_OBJECT_ROOM`] bytes): its length, or `None` (with `out`
    /// scribbled on) for any other event.
    pub(crate) fn put_usual(
        &mut self,
        out: &mut [u8],
        e: &Event,
        plan: &ProbePlan,
        symbols: &KernelSymbols,
    ) -> Option<usize> {
        self.usual.put(out, e, plan, symbols)
    }

    /// [`EventWriter::put_usual`] for a kprobe hit handed over as an
    /// [`IntEvent`]; `None` when it is not the usual object (the
    /// [`Event`] is then written by [`EventWriter::event`]).
    pub(crate) fn put_usual_ints(
        &mut self,
        out: &mut [u8],
        e: &IntEvent<'_>,
        plan: &ProbePlan,
        symbols: &KernelSymbols,
    ) -> Option<usize> {
        self.usual.put_ints(out, e, plan, symbols)
    }

    /// Appends `e` as one JSON object (no newline) to `out`.
    pub(crate) fn event(
        &mut self,
        out: &mut Vec<u8>,
        e: &Event,
        plan: &ProbePlan,
        symbols: &KernelSymbols,
    ) {
        if self.append_usual(out, e, plan, symbols) {
            return;
        }
        if self.arg_order.len() <= e.probe {
            self.arg_order.resize(e.probe + 1, None);
        }
        let order = self.arg_order[e.probe].get_or_insert_with(|| sorted_args(plan));
        out.extend_from_slice(b"{\"args\":{");
        put_args(out, order, plan, e, symbols, &mut self.symbols);
        out.extend_from_slice(b"},\"comm\":");
        put_str(out, &e.comm);
        out.extend_from_slice(b",\"cpu\":");
        put_int(out, e.cpu);
        out.extend_from_slice(b",\"event\":");
        put_str(out, &plan.event);
        out.push(b',');
        put_place(out, &mut self.places, e, symbols);
        out.extend_from_slice(b",\"pid\":");
        put_int(out, e.pid);
        out.extend_from_slice(b",\"probe_addr\":");
        put_int(out, e.probe_addr);
        if let Some(r) = e.ret_addr {
            out.extend_from_slice(b",\"ret_addr\":");
            put_int(out, r);
            out.extend_from_slice(b",\"ret_location\":");
            put_symbol(out, r, symbols, &mut self.symbols);
        }
        out.extend_from_slice(b",\"tid\":");
        put_int(out, e.tid);
        out.extend_from_slice(b",\"time_ns\":");
        put_int(out, e.time_ns);
        out.extend_from_slice(b",\"type\":\"event\"");
        put_unknowns(out, order, plan, e);
        out.push(b'}');
    }

    /// Appends `e` as the usual object when it is one; false (nothing
    /// appended) when not.
    fn append_usual(
        &mut self,
        out: &mut Vec<u8>,
        e: &Event,
        plan: &ProbePlan,
        symbols: &KernelSymbols,
    ) -> bool {
        let start = out.len();
        out.resize(start + USUAL_OBJECT_ROOM, 0);
        if let Some(n) = out
            .get_mut(start..)
            .and_then(|room| self.usual.put(room, e, plan, symbols))
        {
            out.truncate(start + n);
            return true;
        }
        out.truncate(start);
        false
    }
}

/// The `args` object's members, in `order`.
fn put_args(
    out: &mut Vec<u8>,
    order: &[usize],
    plan: &ProbePlan,
    e: &Event,
    symbols: &KernelSymbols,
    names: &mut HashMap<u64, Box<[u8]>>,
) {
    for (n, &i) in order.iter().enumerate() {
        let (Some(a), Some(v)) = (plan.args.get(i), e.args.get(i)) else {
            continue;
        };
        if n > 0 {
            out.push(b',');
        }
        put_str(out, &a.name);
        out.push(b':');
        put_value(out, v, symbols, names);
    }
}

/// `"function":NAME` for a return, `"location":SYM+OFF` for an entry,
/// kept per probed address (at most [`PLACES_KEPT`] of them).
fn put_place(
    out: &mut Vec<u8>,
    places: &mut HashMap<(u64, bool), Box<[u8]>>,
    e: &Event,
    symbols: &KernelSymbols,
) {
    let ret = e.ret_addr.is_some();
    if places.len() >= PLACES_KEPT {
        places.clear();
    }
    let place = places.entry((e.probe_addr, ret)).or_insert_with(|| {
        let mut m = Vec::new();
        if ret {
            m.extend_from_slice(b"\"function\":");
            put_str(&mut m, &function(symbols, e.probe_addr));
        } else {
            m.extend_from_slice(b"\"location\":");
            put_str(&mut m, &location(symbols, e.probe_addr));
        }
        m.into_boxed_slice()
    });
    out.extend_from_slice(place);
}

/// `,"unknown":[NAMES]` when some arguments could not be fetched.
fn put_unknowns(out: &mut Vec<u8>, order: &[usize], plan: &ProbePlan, e: &Event) {
    let mut unknown = order
        .iter()
        .filter_map(|&i| match (plan.args.get(i), e.args.get(i)) {
            (Some(a), Some(Value::Unknown)) => Some(a),
            _ => None,
        })
        .peekable();
    if unknown.peek().is_none() {
        return;
    }
    out.extend_from_slice(b",\"unknown\":[");
    for (n, a) in unknown.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        put_str(out, &a.name);
    }
    out.push(b']');
}

/// The plan's argument indices in the order a sorted map prints their
/// names, each name once (its last argument, as a map insert keeps).
fn sorted_args(plan: &ProbePlan) -> Vec<usize> {
    let mut order: Vec<usize> = (0..plan.args.len()).collect();
    // Stable: equal names keep plan order, and the last of them is kept.
    order.sort_by(|&a, &b| plan.args[a].name.cmp(&plan.args[b].name));
    let mut kept: Vec<usize> = Vec::with_capacity(order.len());
    for i in order {
        match kept.last_mut() {
            Some(last) if plan.args[*last].name == plan.args[i].name => *last = i,
            _ => kept.push(i),
        }
    }
    kept
}

pub(crate) fn put_int(out: &mut Vec<u8>, v: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// `s` as a JSON string: quoted, with `"`, `\` and control characters
/// escaped as serde_json escapes them.
pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing to a Vec cannot fail, nor can serializing a str.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// The location of a symbol-typed value or a return address, quoted,
/// looked up once per address.
fn put_symbol(
    out: &mut Vec<u8>,
    addr: u64,
    symbols: &KernelSymbols,
    cache: &mut HashMap<u64, Box<[u8]>>,
) {
    if cache.len() >= PLACES_KEPT {
        cache.clear();
    }
    let quoted = cache.entry(addr).or_insert_with(|| {
        let mut m = Vec::new();
        put_str(&mut m, &location(symbols, addr));
        m.into_boxed_slice()
    });
    out.extend_from_slice(quoted);
}

fn put_value(
    out: &mut Vec<u8>,
    v: &Value,
    symbols: &KernelSymbols,
    cache: &mut HashMap<u64, Box<[u8]>>,
) {
    match v {
        Value::Int {
            raw,
            ty: BaseType::Signed(_),
        } => put_int(out, *raw as i64),
        Value::Int {
            raw,
            ty: BaseType::Symbol,
        } => put_symbol(out, *raw, symbols, cache),
        Value::Int { raw, .. } => put_int(out, *raw),
        Value::Str(Some(s)) => put_str(out, s),
        Value::Str(None) | Value::Unknown => out.extend_from_slice(b"null"),
        Value::Array(items) => {
            out.push(b'[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                put_value(out, item, symbols, cache);
            }
            out.push(b']');
        }
    }
}

/// The closing object: counts per probe, losses, and misses (the
/// [`Summary`], keys sorted, with `"type": "summary"`). In flight-recorder
/// mode the kernel's hits not printed are `not_kept` (overwritten by
/// design, or dropped while a dump paused the rings), as the text summary
/// says, and there is no `lost`; the window is `overwrite`.
pub(crate) fn summary(summary: &Summary) -> String {
    // Through a `Value`, whose map sorts the keys.
    let mut o = serde_json::to_value(summary).unwrap_or_else(|e| json!({ "error": e.to_string() }));
    if let serde_json::Value::Object(m) = &mut o {
        m.insert("type".into(), json!("summary"));
    }
    // A filter's reason for running in user space, in this CLI's flags.
    if let Some(probes) = o.get_mut("probes").and_then(|p| p.as_array_mut()) {
        for reason in probes
            .iter_mut()
            .filter_map(|p| p.pointer_mut("/filter/reason"))
        {
            if let Some(text) = reason.as_str() {
                *reason = json!(crate::hints::flags_in(text));
            }
        }
    }
    o.to_string()
}

#[cfg(test)]
mod tests;
