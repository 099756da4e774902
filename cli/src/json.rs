//! `--json`: one JSON object per event (JSON Lines), typed: numbers as
//! numbers, strings as strings, an unreadable string as null, arrays as
//! arrays; then one closing summary object.

use kprobe_perf_engine::plan::Backend;
use kprobe_perf_engine::spec::BaseType;
use kprobe_perf_engine::{Event, KernelSymbols, ProbePlan, Session, Value};
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
        Value::Unknown => Json::Null,
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

/// The closing object: counts per probe, losses, and misses. In
/// flight-recorder mode the kernel's hits not printed are `not_kept`
/// (overwritten by design, or dropped while a dump paused the rings), as
/// the text summary says, and there is no `lost`.
pub fn summary(session: &Session) -> String {
    let stats = session.stats();
    let kernel = session.kernel_counts();
    let lost = session.lost_per_probe().ok();
    let word = if session.is_overwrite() {
        "not_kept"
    } else {
        "lost"
    };
    let mut probes = Vec::new();
    let calls = session.call_counts().ok();
    let lost_per_cpu = session.lost_per_cpu().ok();
    for (i, p) in session.plans().iter().enumerate() {
        let mut o = json!({
            "event": p.event,
            "backend": match p.backend { Backend::Pmu => "pmu", Backend::Tracefs => "tracefs" },
            "events": stats.hits.get(i).copied().unwrap_or(0),
        });
        if let Json::Object(m) = &mut o {
            m.insert(
                word.into(),
                json!(lost.as_ref().and_then(|l| l.get(i)).copied()),
            );
            if let Some(Some(c)) = kernel.get(i) {
                m.insert("kernel_hits".into(), json!(c.hits));
                m.insert("kernel_misses".into(), json!(c.misses));
            }
            if let Some(Some(c)) = calls.as_ref().map(|c| c.get(i).copied().flatten()) {
                m.insert("entries".into(), json!(c.entries));
                m.insert("unreturned".into(), json!(c.unreturned()));
            }
            // Only for a return probe joined to a hidden entry probe.
            if let Some(u) = stats.entry_unknown.get(i) {
                m.insert("entry_unknown".into(), json!(u));
            }
            let t = stats.throttling_of(i);
            m.insert("throttled".into(), json!(t.throttled));
            m.insert("unthrottled".into(), json!(t.unthrottled));
        }
        probes.push(o);
    }
    let total: u64 = probes.iter().filter_map(|p| p["events"].as_u64()).sum();
    let total_lost: u64 = probes.iter().filter_map(|p| p[word].as_u64()).sum();
    let mut o = json!({
        "type": "summary",
        "events": total,
        "lost_records": stats.lost,
        "undecodable": stats.undecodable,
        "lost_per_cpu": lost_per_cpu
            .as_ref()
            .unwrap_or(&stats.lost_per_cpu)
            .iter()
            .map(|(cpu, n)| json!({ "cpu": cpu, "lost": n }))
            .collect::<Vec<_>>(),
        "throttling": stats
            .throttling
            .iter()
            .filter_map(|((cpu, probe), t)| {
                Some(json!({
                    "cpu": cpu,
                    "event": session.plans().get(*probe)?.event,
                    "throttled": t.throttled,
                    "unthrottled": t.unthrottled,
                }))
            })
            .collect::<Vec<_>>(),
        "probes": probes,
    });
    if let Json::Object(m) = &mut o {
        let n = if lost.is_some() {
            total_lost
        } else {
            stats.lost
        };
        m.insert(word.into(), json!(n));
    }
    o.to_string()
}
