//! `--json`: one JSON object per event (JSON Lines), typed: numbers as
//! numbers, strings as strings, an unreadable string as null, arrays as
//! arrays; then one closing summary object.

use kprobe_perf_engine::spec::BaseType;
use kprobe_perf_engine::{Event, KernelSymbols, ProbePlan, Summary, Value};
use serde_json::{json, Map, Value as Json};

use crate::text::{function, location};

fn value(v: &Value, symbols: &KernelSymbols) -> Json {
    match v {
        Value::Int {
            raw,
            ty: BaseType::Signed(_),
        } => json!(*raw as i64),
        Value::Int {
            raw,
            ty: BaseType::Symbol,
        } => json!(location(symbols, *raw)),
        Value::Int { raw, .. } => json!(raw),
        Value::Str(s) => json!(s),
        Value::Array(items) => Json::Array(items.iter().map(|i| value(i, symbols)).collect()),
    }
}

/// One event as a JSON object on one line.
pub fn event(e: &Event, plan: &ProbePlan, symbols: &KernelSymbols) -> String {
    let mut args = Map::new();
    for (a, v) in plan.args.iter().zip(&e.args) {
        args.insert(a.name.clone(), value(v, symbols));
    }
    let mut obj = json!({
        "type": "event",
        "event": plan.event,
        "comm": e.comm.as_ref(),
        "pid": e.pid,
        "tid": e.tid,
        "cpu": e.cpu,
        "time_ns": e.time_ns,
        "probe_addr": e.probe_addr,
        "args": args,
    });
    if let Json::Object(m) = &mut obj {
        match e.ret_addr {
            Some(r) => {
                m.insert("function".into(), json!(function(symbols, e.probe_addr)));
                m.insert("ret_addr".into(), json!(r));
                m.insert("ret_location".into(), json!(location(symbols, r)));
            }
            None => {
                m.insert("location".into(), json!(location(symbols, e.probe_addr)));
            }
        }
    }
    obj.to_string()
}

/// The closing object: counts per probe, losses, and misses (the
/// [`Summary`], keys sorted, with `"type": "summary"`). In flight-recorder
/// mode the kernel's hits not printed are `not_kept` (overwritten by
/// design, or dropped while a dump paused the rings), as the text summary
/// says, and there is no `lost`; the window is `overwrite`.
pub fn summary(summary: &Summary) -> String {
    // Through a `Value`, whose map sorts the keys.
    let mut o = serde_json::to_value(summary).unwrap_or_else(|e| json!({ "error": e.to_string() }));
    if let Json::Object(m) = &mut o {
        m.insert("type".into(), json!("summary"));
    }
    o.to_string()
}
