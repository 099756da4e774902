//! `record` of event probes (`e:`): the kernel gives them no perf handler,
//! so the engine reads them from ftrace's buffer in a tracing instance of
//! its own ([`EventProbeSession`]); this prints their events and summary.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kprobe_perf_engine::spec::{Definition, EventProbe};
use kprobe_perf_engine::{Arch, EventProbeSession, EventProbeSummary, FtraceEvent, Value};

use crate::{run_loop, RecordArgs};

/// The event probes of `args`, when every definition is one; `None` when
/// none is; an error when they are mixed with other probes or with
/// options this route does not offer.
pub(crate) fn event_probes(
    args: &RecordArgs,
    filters: &[Option<String>],
) -> Result<Option<Vec<EventProbe>>> {
    let Some(arch) = Arch::host() else {
        return Ok(None);
    };
    let mut probes = Vec::new();
    for s in &args.events {
        match Definition::parse(s, arch) {
            Ok(Definition::EventProbe(e)) => probes.push(e),
            // An eprobe the parser refuses: its own message, not the
            // kprobe grammar's.
            Err(e) if is_eprobe(s) => return Err(e.into()),
            _ => {}
        }
    }
    if probes.is_empty() {
        return Ok(None);
    }
    if probes.len() != args.events.len() {
        bail!("event probes (e:) are read from ftrace's buffer, not from perf rings, and cannot be recorded together with other probes in one run yet: record them in a run of their own");
    }
    let unsupported = [
        (filters.iter().any(Option::is_some), "--filter (give the kernel's filter in the definition: e:... SYSTEM.EVENT ARGS if FILTER)"),
        (!args.pid.is_empty() || !args.tid.is_empty(), "-p/-t"),
        (args.cpus.is_some() || args.cgroup.is_some(), "-C/-G"),
        (args.output.is_some(), "-o"),
        (args.overwrite, "--overwrite"),
        (args.stacks.graph().is_some(), "call graphs"),
    ];
    if let Some((_, what)) = unsupported.iter().find(|(set, _)| *set) {
        bail!("event probes (e:) are recorded from ftrace's buffer, where {what} is not offered: record them with a command (-- CMD) or system-wide (-a), with text or --json output");
    }
    Ok(Some(probes))
}

/// `e` or `e:...` as the first word: an eprobe definition.
fn is_eprobe(s: &str) -> bool {
    let head = s.split_whitespace().next().unwrap_or("");
    head == "e" || head.starts_with("e:")
}

/// Records `probes` until the command ends (or Ctrl-C, or `-d`).
pub(crate) fn record(args: &RecordArgs, probes: &[EventProbe]) -> Result<ExitCode> {
    let mut run = run_loop::RunLoop::new(args.duration, None)?;
    let command = (!args.command.is_empty()).then_some(args.command.as_slice());
    let mut session = EventProbeSession::open(probes, command)?;
    let names: Vec<String> = probes
        .iter()
        .map(|p| p.qualified().event.unwrap_or_default())
        .collect();
    let arg_names: Vec<Vec<String>> = (0..probes.len()).map(|i| session.arg_names(i)).collect();
    session.enable()?;
    run.armed();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut failed: Option<io::Error> = None;
    let mut print = |e: &FtraceEvent| {
        if failed.is_some() || args.quiet {
            return;
        }
        let line = if args.json {
            json_line(e, &names, &arg_names)
        } else {
            text_line(e, &names, &arg_names)
        };
        if let Err(err) = writeln!(out, "{line}") {
            failed = Some(err);
        }
    };
    loop {
        session.poll(Some(run.timeout(Duration::from_millis(100))), &mut print)?;
        if run.over(&mut session)? {
            break;
        }
    }
    session.disable(&mut print)?;
    if let Some(e) = failed {
        if e.kind() != io::ErrorKind::BrokenPipe {
            return Err(e).context("writing the events");
        }
    }
    let summary = session.summary()?;
    if args.json && !args.quiet {
        writeln!(out, "{}", json_summary(&summary, &names)).context("writing the summary")?;
    }
    out.flush().ok();
    drop(out);
    for line in summary_lines(&summary, &names) {
        say!("{line}");
    }
    run.exit(&mut session)
}

/// `<...>-TID [CPU] SECONDS.MICROS: EVENT: NAME=VALUE ...`, as ftrace
/// prints a thread whose name the record does not hold.
pub(crate) fn text_line(e: &FtraceEvent, names: &[String], arg_names: &[Vec<String>]) -> String {
    let mut s = format!(
        "{:>16}-{:<7} [{:03}] {}.{:06}: {}:",
        "<...>",
        e.tid,
        e.cpu,
        e.time_ns / 1_000_000_000,
        (e.time_ns % 1_000_000_000) / 1_000,
        names.get(e.probe).map_or("", String::as_str)
    );
    let arg_names = arg_names.get(e.probe).map_or(&[][..], Vec::as_slice);
    for (n, v) in arg_names.iter().zip(&e.args) {
        s.push_str(&format!(" {n}={v}"));
    }
    s
}

fn json_value(v: &Value) -> serde_json::Value {
    match v {
        Value::Int {
            raw,
            ty: kprobe_perf_engine::spec::BaseType::Signed(_),
        } => serde_json::json!(*raw as i64),
        Value::Int { raw, .. } => serde_json::json!(raw),
        Value::Str(Some(s)) => serde_json::json!(s),
        Value::Array(items) => items.iter().map(json_value).collect(),
        _ => serde_json::Value::Null,
    }
}

pub(crate) fn json_line(e: &FtraceEvent, names: &[String], arg_names: &[Vec<String>]) -> String {
    let args: serde_json::Map<String, serde_json::Value> = arg_names
        .get(e.probe)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .zip(&e.args)
        .map(|(n, v)| (n.clone(), json_value(v)))
        .collect();
    serde_json::json!({
        "args": args,
        "cpu": e.cpu,
        "event": names.get(e.probe),
        "tid": e.tid,
        "time_ns": e.time_ns,
        "type": "event",
    })
    .to_string()
}

pub(crate) fn json_summary(s: &EventProbeSummary, names: &[String]) -> String {
    let probes: Vec<_> = names
        .iter()
        .zip(&s.events)
        .map(|(n, c)| serde_json::json!({"event": n, "events": c}))
        .collect();
    serde_json::json!({
        "dropped": s.dropped,
        "events": s.events.iter().sum::<u64>(),
        "lost": s.lost(),
        "missed": s.missed,
        "overrun": s.overrun,
        "probes": probes,
        "type": "summary",
        "undecodable": s.undecodable,
    })
    .to_string()
}

/// The summary: events per probe, then each kind of loss, none silent.
pub(crate) fn summary_lines(s: &EventProbeSummary, names: &[String]) -> Vec<String> {
    let per: Vec<String> = names
        .iter()
        .zip(&s.events)
        .map(|(n, c)| format!("{n}: {c}"))
        .collect();
    let mut lines = vec![format!(
        "kprobe-perf: {} events ({}), {} lost",
        s.events.iter().sum::<u64>(),
        per.join("; "),
        s.lost()
    )];
    if s.lost() > 0 {
        lines.push(format!(
            "lost: {} overwritten in ftrace's buffer before they were read (overrun), {} dropped by the kernel, {} noted missing by buffer pages, {} undecodable",
            s.overrun, s.dropped, s.missed, s.undecodable
        ));
    }
    lines
}
