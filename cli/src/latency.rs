//! `kprobe-perf latency FUNC`: each call's duration, from an entry probe
//! and a return probe of FUNC paired per thread by the engine's
//! [`LatencyPairer`]; a log2 (or linear) histogram with its figures, per
//! key with `--by`, per interval with `-I`, or each slow call with
//! `--min` (funcslower).

use std::io::{self, Write};
use std::ops::ControlFlow;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use kprobe_perf_engine::analysis::{
    parse_duration, parse_linear, render, Call, FunctionProbes, HistShape, Key, LatencyOptions,
    LatencyPairer, LatencySnapshot, TimeUnit,
};
use kprobe_perf_engine::cli::records::RingRecord;

use crate::run_loop::RunLoop;
use kprobe_perf_engine::{
    cli::records, BackendChoice, CommandScope, Event, EventSink, RecordTarget, Session,
    SessionOptions,
};

/// The arguments of `latency`.
#[derive(clap::Args)]
#[command(after_help = crate::examples::LATENCY)]
pub(crate) struct LatencyArgs {
    /// The function: a user-space one (`BINARY:func`, BINARY a path,
    /// `./prog` from here as perf's -x takes it, or a name on PATH) or a
    /// kernel function (`vfs_read`, `MOD:NAME`).
    #[arg(value_name = "FUNC")]
    func: String,
    /// The histogram's unit: ns, us or ms (durations are rounded down).
    #[arg(long, value_name = "UNIT", default_value = "ns")]
    unit: String,
    /// Linear buckets instead of log2: MIN,MAX,STEP in --unit (plus one
    /// bucket below MIN and one at or above MAX).
    #[arg(long, value_name = "MIN,MAX,STEP", allow_hyphen_values = true)]
    linear: Option<String>,
    /// One histogram per value of KEY besides the total: comm, pid, tid,
    /// cpu, or ret (the return value).
    #[arg(long, value_name = "KEY")]
    by: Option<String>,
    /// Print (and reset) the histograms every MS milliseconds.
    #[arg(short = 'I', long = "interval", value_name = "MS", value_parser = crate::validate::interval_ms, allow_negative_numbers = true)]
    interval: Option<u64>,
    /// Instead of histograms, print each call that took at least DURATION
    /// (250ns, 500us, 1.5ms, 2s; 0ns prints every call) with its first
    /// arguments (--args) and its return value.
    #[arg(long, value_name = "DURATION")]
    min: Option<String>,
    /// Time from each hit of FUNC, then a probe definition of its own (as
    /// `-e` takes one: `usdt:/usr/bin/python3.11:python:function__entry`),
    /// to a hit of PROBE in the same thread, nested as calls nest (each
    /// hit of PROBE ends the latest start not yet ended): a program's
    /// statically defined pairs, or any two points. `--by ret` is not
    /// available then, and --min shows FUNC's own arguments.
    #[arg(long, value_name = "PROBE")]
    end: Option<String>,
    /// With --min: how many arguments of the call to show (0 to 6).
    #[arg(long = "args", value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..=6))]
    nargs: u8,
    /// Print JSON instead of text: one object per histogram snapshot (per
    /// interval with -I) with the buckets, or one per call with --min.
    #[arg(long)]
    json: bool,
    /// Measure these processes only (comma-separated pids), and their
    /// threads and children.
    #[arg(short = 'p', long, value_name = "PIDS", value_delimiter = ',', conflicts_with = "command", value_parser = crate::validate::pid, allow_negative_numbers = true)]
    pid: Vec<i32>,
    /// Measure every task on every CPU, even when a command is given.
    #[arg(short = 'a', long)]
    all_cpus: bool,
    /// Stop after this many seconds (fractions allowed).
    #[arg(short = 'd', long, value_name = "SECS", value_parser = crate::validate::duration, allow_negative_numbers = true)]
    duration: Option<f64>,
    #[command(flatten)]
    image: crate::image_args::ImageArgs,
    #[command(flatten)]
    verbose: crate::binaries::VerboseArg,
    /// The command to run and measure.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// FUNC's binary (`./prog:walk`, `bash:readline`) and --end's made
/// absolute, as `record -e` resolves them (see binaries.rs). With
/// --end, FUNC is a definition of its own.
pub(crate) fn resolve_binaries(args: &mut LatencyArgs) -> Result<()> {
    let verbose = args.verbose.verbose;
    match args.end.as_mut() {
        Some(end) => {
            let mut both = [args.func.clone(), end.clone()];
            crate::binaries::all(&mut both, &args.command, &args.pid, verbose)?;
            [args.func, *end] = both;
        }
        None => args.func = crate::binaries::function(&args.func, &args.pid, verbose)?,
    }
    Ok(())
}

/// The two probe definitions of `func`: its entry (with `nargs`
/// arguments) and its return (with the return value when `ret`: the
/// register is then sampled at every return, which costs the kernel and
/// the reader a little per call, so only `--by ret` and `--min` ask).
fn specs(func: &str, nargs: u8, ret: bool) -> [String; 2] {
    let mut entry = format!("p:{func}");
    for i in 1..=nargs {
        entry.push_str(&format!(" arg{i}=$arg{i}"));
    }
    let ret = if ret { " ret=$retval:s64" } else { "" };
    [entry, format!("r:{func}{ret}")]
}

/// What `latency` planned: the two probes and their pairer.
struct Planned {
    plans: Vec<kprobe_perf_engine::ProbePlan>,
    pairer: LatencyPairer,
    unit: TimeUnit,
    /// The entry's arguments shown with --min.
    nargs: u8,
    /// --min, in ns.
    min_ns: Option<u64>,
}

/// Checks the options and plans the entry and return probes of FUNC.
fn plan(args: &LatencyArgs) -> Result<Planned> {
    let unit = TimeUnit::parse(&args.unit)?;
    let shape = match &args.linear {
        Some(spec) => HistShape::Linear(parse_linear(spec)?),
        None => HistShape::Log2,
    };
    let by = args.by.as_deref().map(Key::parse).transpose()?;
    let min_ns = args.min.as_deref().map(parse_duration).transpose()?;
    if min_ns.is_some() && (by.is_some() || args.linear.is_some() || args.interval.is_some()) {
        anyhow::bail!(
            "--min prints each slow call instead of histograms: it does not combine with --by, \
             --linear or -I; run without --min for histograms"
        );
    }
    if args.end.is_some() && by == Some(Key::Ret) {
        anyhow::bail!(
            "--by ret needs FUNC's return value, and --end {} has none: choose another key",
            args.end.as_deref().unwrap_or_default()
        );
    }
    let kernel = crate::inspect::record_kernel(&args.image);
    let mut nargs = if min_ns.is_some() { args.nargs } else { 0 };
    let with_ret = args.end.is_none() && (min_ns.is_some() || by == Some(Key::Ret));
    let plans = match &args.end {
        Some(end) => kernel
            .plan(&[args.func.clone(), end.clone()], BackendChoice::Auto)
            .with_context(|| format!("cannot probe {} and {end}", args.func))?,
        None => kernel
            .plan(&specs(&args.func, nargs, with_ret), BackendChoice::Auto)
            .with_context(|| format!("cannot probe the entry and return of {}", args.func))?,
    };
    if args.end.is_some() {
        let own = plans.first().map_or(0, |p| p.args.len());
        nargs = nargs.min(u8::try_from(own).unwrap_or(u8::MAX));
    }
    crate::inspect::check_plans(&kernel, &plans)?;
    let mut options = LatencyOptions::default();
    options.by = by;
    options.shape = shape;
    options.unit = unit;
    options.calls_from_ns = min_ns;
    let function = FunctionProbes::new(0, 1);
    let function = if with_ret {
        function.with_return_value(0)
    } else {
        function
    };
    let pairer = LatencyPairer::new(&[function], options)?;
    Ok(Planned {
        plans,
        pairer,
        unit,
        nargs,
        min_ns,
    })
}

/// Whose calls `latency` measures.
fn target(args: &LatencyArgs) -> RecordTarget {
    if !args.pid.is_empty() {
        RecordTarget::Processes(args.pid.clone())
    } else if args.command.is_empty() {
        RecordTarget::AllCpus
    } else {
        RecordTarget::Command {
            argv: args.command.clone(),
            scope: if args.all_cpus {
                CommandScope::AllCpus
            } else {
                CommandScope::Descendants
            },
        }
    }
}

/// Runs `latency`.
pub(crate) fn run(args: &LatencyArgs) -> Result<ExitCode> {
    let Planned {
        plans,
        pairer,
        unit,
        nargs,
        min_ns,
    } = plan(args)?;
    let interval = args.interval.map(Duration::from_millis);
    let mut run = RunLoop::new(args.duration, interval)?;
    let mut session = Session::open(plans, SessionOptions::default().with_target(target(args)))?;
    session.enable()?;
    run.armed();
    crate::inspect::report_armed(session.plans());
    let mut out = Output {
        w: io::BufWriter::new(io::stdout().lock()),
        json: args.json,
        func: args.func.clone(),
        unit: (args.unit != "ns").then_some(unit),
        nargs,
        arg_names: [0, 1].map(|i| {
            session
                .plans()
                .get(i)
                .map(|p| p.args.iter().map(|a| a.name.clone()).collect())
                .unwrap_or_default()
        }),
    };
    let mut m = Measure {
        pairer,
        lost_seen: 0,
        lost_total: 0,
        result: Ok(()),
        totals: Totals::default(),
    };
    loop {
        m.poll(
            &mut session,
            run.timeout(Duration::from_millis(100)),
            &mut out,
        )?;
        if run.tick() {
            let snap = m.pairer.take();
            m.totals.add(&snap);
            out.snapshot(&snap, Some(run.elapsed()))?;
        }
        if m.result.is_err() || run.over(&mut session)? {
            break;
        }
    }
    session.disable()?;
    if m.result.is_ok() {
        m.poll(&mut session, Duration::ZERO, &mut out)?;
    }
    match std::mem::replace(&mut m.result, Ok(())) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        Err(e) => return Err(e).context("writing the output"),
        Ok(()) => {}
    }
    let last = interval.map(|_| run.elapsed());
    m.report(args, min_ns.is_none(), last, &mut out)?;
    for line in crate::text::summary_lines(&session.summary(), session.plans()) {
        say!("{line}");
    }
    run.exit(&mut session)
}

/// The pairing of one run, with what it counted.
struct Measure {
    pairer: LatencyPairer,
    lost_seen: u64,
    lost_total: u64,
    /// The first error writing the output (the run then ends).
    result: io::Result<()>,
    totals: Totals,
}

impl Measure {
    /// Drains the rings (waiting up to `timeout`) into the pairer; a loss
    /// since the last poll ends the pairs it may have broken.
    fn poll(
        &mut self,
        session: &mut Session,
        timeout: Duration,
        out: &mut Output<impl Write>,
    ) -> Result<()> {
        session.poll(
            Some(timeout),
            &mut PairingSink {
                pairer: &mut self.pairer,
                out,
                result: &mut self.result,
            },
        )?;
        let lost = session.stats().lost;
        if lost > self.lost_seen {
            self.lost_total += lost - self.lost_seen;
            self.lost_seen = lost;
            self.pairer.events_lost();
        }
        Ok(())
    }

    /// The last histograms (unless `--min` printed calls instead: not
    /// `histograms`), then the line that accounts for every call.
    /// `elapsed` is the time with -I.
    fn report(
        &mut self,
        args: &LatencyArgs,
        histograms: bool,
        elapsed: Option<Duration>,
        out: &mut Output<impl Write>,
    ) -> Result<()> {
        // Every event is in: threads that exited with calls pending never
        // return from them (their entries are dropped, not unreturned).
        self.pairer.apply_exits();
        let snap = self.pairer.take();
        self.totals.add(&snap);
        if histograms && (elapsed.is_none() || snap.functions.iter().any(|f| f.paired > 0)) {
            out.snapshot(&snap, elapsed)?;
        }
        out.w.flush().context("writing the output")?;
        // Every call accounted for: paired, returns without their entry,
        // entries given up, calls still running at the end.
        let t = &self.totals;
        say!(
            "{}: {} paired calls, {} unpaired returns, {} dropped entries, {} unreturned calls, {} events lost",
            args.func,
            t.paired,
            t.unpaired,
            t.dropped,
            snap.functions.first().map_or(0, |f| f.unreturned),
            self.lost_total
        );
        Ok(())
    }
}

/// Counters summed over the intervals.
#[derive(Default)]
struct Totals {
    paired: u64,
    unpaired: u64,
    dropped: u64,
}

impl Totals {
    fn add(&mut self, s: &LatencySnapshot) {
        for f in &s.functions {
            self.paired += f.paired;
            self.unpaired += f.unpaired_returns;
            self.dropped += f.dropped_entries;
        }
    }
}

/// Gives the pairer each event, and each thread exit in time order;
/// prints the calls it completes that --min asks for.
struct PairingSink<'a, W: Write> {
    pairer: &'a mut LatencyPairer,
    out: &'a mut Output<W>,
    result: &'a mut io::Result<()>,
}

impl<W: Write> EventSink for PairingSink<'_, W> {
    type Error = kprobe_perf_engine::Error;

    fn event(&mut self, e: &Event) -> std::result::Result<ControlFlow<()>, Self::Error> {
        if let Some(call) = self.pairer.record(e) {
            if self.result.is_ok() {
                *self.result = self.out.call(&call);
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    fn record(
        &mut self,
        record: RingRecord<'_>,
    ) -> std::result::Result<ControlFlow<()>, Self::Error> {
        if let Some((tid, time)) = records::thread_exit(record) {
            self.pairer.thread_exits(tid, time);
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Where and how the results are written.
struct Output<W: Write> {
    w: W,
    json: bool,
    func: String,
    /// The unit of --min's durations (`None`: the best fitting one).
    unit: Option<TimeUnit>,
    /// Entry arguments fetched.
    nargs: u8,
    /// The argument names of the entry probe and the return probe.
    arg_names: [Vec<String>; 2],
}

/// A return value `$retval:s64` whose upper 32 bits are zero and whose
/// bit 31 is set, as the negative int it is for C's error returns (-1,
/// not 4294967295): the rule `--by ret` keys by (the engine's
/// analysis::latency), so that --min prints what --by ret shows.
fn int_return(v: &kprobe_perf_engine::Value) -> Option<i32> {
    match *v {
        kprobe_perf_engine::Value::Int {
            raw,
            ty: kprobe_perf_engine::spec::BaseType::Signed(64),
        } if raw >> 32 == 0 && raw & (1 << 31) != 0 => Some(raw as u32 as i32),
        _ => None,
    }
}

impl<W: Write> Output<W> {
    /// One slow call (--min).
    fn call(&mut self, c: &Call) -> io::Result<()> {
        let pairs =
            |names: &[String], values: &[kprobe_perf_engine::Value]| -> Vec<(String, String)> {
                names
                    .iter()
                    .zip(values)
                    .map(|(n, v)| (n.clone(), v.to_string()))
                    .collect()
            };
        let args = pairs(&self.arg_names[0], &c.entry_args);
        let mut rets = pairs(&self.arg_names[1], &c.return_args);
        for ((_, text), v) in rets.iter_mut().zip(&c.return_args) {
            if let Some(int) = int_return(v) {
                *text = int.to_string();
            }
        }
        if self.json {
            let mut m = serde_json::Map::new();
            m.insert("function".into(), self.func.clone().into());
            m.insert("comm".into(), c.comm.to_string().into());
            m.insert("pid".into(), c.pid.into());
            m.insert("tid".into(), c.tid.into());
            m.insert("cpu".into(), c.cpu.into());
            m.insert("entry_time_ns".into(), c.entry_time_ns.into());
            m.insert("duration_ns".into(), c.duration_ns.into());
            for (n, v) in args.iter().chain(&rets) {
                m.insert(n.clone(), v.clone().into());
            }
            writeln!(self.w, "{}", serde_json::Value::Object(m))
        } else {
            let t = c.entry_time_ns;
            write!(
                self.w,
                "{}-{} [{:03}] {}.{:06}: {} {}",
                c.comm,
                c.tid,
                c.cpu,
                t / 1_000_000_000,
                t % 1_000_000_000 / 1_000,
                self.func,
                render::format_duration(c.duration_ns, self.unit)
            )?;
            for (n, v) in args.iter().take(usize::from(self.nargs)).chain(&rets) {
                write!(self.w, " {n}={v}")?;
            }
            writeln!(self.w)
        }
    }

    /// The histograms (`at`: the time since the start, with -I).
    fn snapshot(&mut self, s: &LatencySnapshot, at: Option<Duration>) -> Result<()> {
        let r = if self.json {
            let mut v = serde_json::json!({ "function": self.func });
            if let (Some(at), serde_json::Value::Object(m)) = (at, &mut v) {
                m.insert("elapsed_ms".into(), (at.as_millis() as u64).into());
            }
            if let (Ok(serde_json::Value::Object(snap)), serde_json::Value::Object(m)) =
                (serde_json::to_value(s), &mut v)
            {
                m.extend(snap);
            }
            writeln!(self.w, "{v}")
        } else {
            let head = match at {
                Some(at) => writeln!(self.w, "@ {:.3}s", at.as_secs_f64()),
                None => Ok(()),
            };
            head.and_then(|()| {
                write!(
                    self.w,
                    "{}",
                    render::render_latency(s, &[self.func.as_str()])
                )
            })
            .and_then(|()| {
                if at.is_some() {
                    writeln!(self.w)
                } else {
                    Ok(())
                }
            })
        };
        r.and_then(|()| self.w.flush())
            .context("writing the histograms")
    }
}

#[cfg(test)]
mod tests {
    use super::specs;

    #[test]
    fn entry_and_return_specs() {
        assert_eq!(
            specs("vfs_read", 0, false),
            ["p:vfs_read".to_string(), "r:vfs_read".into()]
        );
        assert_eq!(
            specs("/bin/x:f", 2, true),
            [
                "p:/bin/x:f arg1=$arg1 arg2=$arg2".to_string(),
                "r:/bin/x:f ret=$retval:s64".into()
            ]
        );
    }
}
