//! `kprobe-perf stat`: how many times each probe fired, counted by the
//! kernel (counting-only perf events, no ring buffer, no sample), printed
//! as a table (or JSON) at the end or every `-I MS`.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use crate::run_loop::RunLoop;
use anyhow::{Context, Result};
use kprobe_perf_engine::cli::counting::{CountSnapshot, CountingSession};
use kprobe_perf_engine::{BackendChoice, ProbePlan, RecordTarget};

use crate::{image_args, inspect, validate, BackendArg};

#[derive(clap::Args)]
#[command(after_help = crate::examples::STAT)]
pub(crate) struct StatArgs {
    /// A probe definition (repeatable), as `record -e` takes one
    /// (`p:BINARY:FUNC`, `usdt:BINARY:PROVIDER:NAME`, `p:FUNC`); the table lists the probes in
    /// this order.
    #[arg(short = 'e', long = "event", value_name = "SPEC", required = true)]
    pub(crate) events: Vec<String>,
    /// Count only the hits of the probe given (-e) before it that pass
    /// EXPR, in the kernel's ftrace filter grammar (as `record --filter`).
    /// The kernel must run it, since nothing reaches user space: the
    /// probe's arguments through tracefs (`--backend auto` picks it),
    /// `comm`, `tid`, `cpu` on any probe; a filter on `pid` is refused
    /// (`record -q --filter` runs it in user space).
    #[arg(long = "filter", value_name = "EXPR", allow_hyphen_values = true)]
    filters: Vec<String>,
    /// Count on every CPU (every task), even when a command is given.
    #[arg(short = 'a', long)]
    all_cpus: bool,
    /// Count only on these CPUs (a list such as 0-3,6, of online CPUs;
    /// a CPU listed twice counts once).
    #[arg(short = 'C', long = "cpu", value_name = "LIST", conflicts_with_all = ["pid", "tid"], value_parser = validate::cpu_list, allow_negative_numbers = true)]
    cpus: Option<validate::CpuList>,
    /// Count these processes (comma-separated pids of running processes,
    /// repeats merged): every thread each has at the start, and the
    /// threads and child processes they start later; counting ends when
    /// all of them have exited.
    #[arg(short = 'p', long, value_name = "PIDS", value_delimiter = ',', conflicts_with_all = ["tid", "command"], value_parser = validate::pid, allow_negative_numbers = true)]
    pub(crate) pid: Vec<i32>,
    /// Count these threads only (comma-separated tids of running
    /// threads, repeats merged).
    #[arg(short = 't', long, value_name = "TIDS", value_delimiter = ',', conflicts_with = "command", value_parser = validate::tid, allow_negative_numbers = true)]
    tid: Vec<i32>,
    /// Count only tasks in this cgroup (v2), on every CPU: a path, or a
    /// name relative to /sys/fs/cgroup (e.g. system.slice/ssh.service).
    #[arg(short = 'G', long, value_name = "CGROUP", conflicts_with_all = ["pid", "tid", "cpus"], value_parser = validate::cgroup)]
    cgroup: Option<std::path::PathBuf>,
    /// Stop after this many seconds (more than 0, at most 31536000: 365
    /// days; fractions allowed).
    #[arg(short = 'd', long, value_name = "SECS", value_parser = validate::duration, allow_negative_numbers = true)]
    duration: Option<f64>,
    /// Print the hits of each interval of MS milliseconds (10 to
    /// 3600000), each row headed by the seconds since counting started;
    /// the last interval is printed when counting stops, however short.
    #[arg(short = 'I', long = "interval", value_name = "MS", value_parser = validate::interval_ms, allow_negative_numbers = true)]
    interval: Option<u64>,
    /// Also give each probe's hits per CPU (a column per CPU; `any` for
    /// the events of threads, -t, which follow them on any CPU).
    #[arg(long)]
    per_cpu: bool,
    /// Print JSON instead of the table: one object with the `elapsed`
    /// seconds and `probes`: per probe its `event` name, `definition`
    /// (kprobe_events form) and `count` (and `per_cpu`, with --per-cpu);
    /// with -I, one such object per line and interval, with its `time`.
    #[arg(long)]
    json: bool,
    /// How probes reach the kernel: `pmu`, `tracefs` or `auto`, as for
    /// `record --backend`.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// Probe every function of a name several functions share (each by
    /// its address, as NAME@0xADDR), instead of refusing the name.
    #[arg(long)]
    all_instances: bool,
    #[command(flatten)]
    image: image_args::ImageArgs,
    #[command(flatten)]
    pub(crate) verbose: crate::binaries::VerboseArg,
    /// The command to run and count (with its children).
    #[arg(last = true, value_name = "CMD")]
    pub(crate) command: Vec<String>,
}

/// Runs `stat`: counts until the command exits, -d, Ctrl-C, or every
/// process of -p has exited; exits with the command's status.
pub(crate) fn run(args: &mut StatArgs, filters: &[Option<String>]) -> Result<ExitCode> {
    validate::merge_duplicates(&mut args.pid);
    validate::merge_duplicates(&mut args.tid);
    let plans = plan(args, filters)?;

    let interval = args.interval.map(Duration::from_millis);
    let mut run = RunLoop::new(args.duration, interval)?;
    // A command is started held by the session and released by enable,
    // its events armed at its exec, as `record` does.
    let mut session = CountingSession::open(plans, stat_target(args))?;
    run.armed();
    session.enable()?;
    inspect::report_armed(session.plans());
    let table = Table::new(session.plans(), args.per_cpu, args.json);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    if interval.is_some() && !args.json {
        write_out(&mut out, &table.header(true))?;
    }
    let mut last = CountSnapshot::default();
    loop {
        // Short naps: the command's exit, a signal or a deadline is seen
        // within 20 ms; the counts themselves need no reading until then.
        std::thread::sleep(run.timeout(Duration::from_millis(20)));
        if run.over(&mut session)? {
            break;
        }
        if run.tick() {
            let snap = session.read()?;
            let rows = table.rows(&snap.since(&last), Some(run.elapsed()));
            if !write_out(&mut out, &rows)? {
                break;
            }
            last = snap;
        }
    }
    session.disable()?;
    let elapsed = run.elapsed();
    let snap = session.read()?;
    let text = if interval.is_some() {
        table.rows(&snap.since(&last), Some(elapsed))
    } else if args.json {
        table.json_line(&snap, Some(("elapsed", elapsed)))
    } else {
        format!("{}{}", table.header(false), table.rows(&snap, None))
    };
    write_out(&mut out, &text)?;
    if !args.json {
        say!("kprobe-perf: counted for {:.3} s", elapsed.as_secs_f64());
    }
    // Counting stopped first (Ctrl-C, -d): the command may have ended
    // meanwhile (Ctrl-C reaches it too).
    run.exit(&mut session)
}

/// Writes `text` and flushes; false when stdout's reader has gone away.
fn write_out(out: &mut impl Write, text: &str) -> Result<bool> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("writing the counts"),
    }
}

/// The probes of `args`, planned as `record` plans them.
fn plan(args: &StatArgs, filters: &[Option<String>]) -> Result<Vec<ProbePlan>> {
    let kernel = inspect::record_kernel(&args.image);
    let choice = match args.backend {
        BackendArg::Auto => BackendChoice::Auto,
        BackendArg::Pmu => BackendChoice::Pmu,
        BackendArg::Tracefs => BackendChoice::Tracefs,
    };
    let plans = crate::filters::plan(
        &kernel,
        &args.events,
        filters,
        args.all_instances,
        choice,
        true,
        &args.pid,
    )?;
    inspect::check_plans(&kernel, &plans)?;
    Ok(plans)
}

/// Whose hits `args` count, as `record` chooses (see `target_of`).
fn stat_target(args: &StatArgs) -> RecordTarget {
    crate::target_of(&crate::Targets {
        tid: &args.tid,
        pid: &args.pid,
        cgroup: args.cgroup.as_deref(),
        cpus: args.cpus.as_ref(),
        all_cpus: args.all_cpus,
        command: &args.command,
    })
}

/// 1234567 as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut s = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            s.push(',');
        }
        s.push(c);
    }
    s
}

/// A CPU's column name and JSON key: its number, or `any`.
fn cpu_name(cpu: Option<u32>) -> String {
    cpu.map_or_else(|| "any".to_string(), |c| c.to_string())
}

/// How counts are printed: the probes, in the order given, in text or
/// JSON.
struct Table {
    /// Per probe: its event name and its definition (kprobe_events form).
    names: Vec<(String, String)>,
    per_cpu: bool,
    json: bool,
}

/// Width of the count column (and of each CPU's).
const COUNT_WIDTH: usize = 15;

impl Table {
    fn new(plans: &[ProbePlan], per_cpu: bool, json: bool) -> Table {
        Table {
            names: plans
                .iter()
                .map(|p| (p.event.clone(), p.spec.to_string()))
                .collect(),
            per_cpu,
            json,
        }
    }

    /// The header line of the text table (`time` first for -I), written
    /// once. With --per-cpu there is none here: the CPU columns are those
    /// of the counts, so [`Table::rows`] heads each table itself.
    fn header(&self, timed: bool) -> String {
        if self.json || self.per_cpu {
            return String::new();
        }
        let mut s = String::new();
        if timed {
            s.push_str(&format!("{:>10}", "time"));
        }
        s.push_str(&format!("{:>w$}  probe\n", "count", w = COUNT_WIDTH));
        s
    }

    /// The rows of `snap` (text, or one JSON object with a newline),
    /// headed by `time` (seconds since the start) for -I.
    fn rows(&self, snap: &CountSnapshot, time: Option<Duration>) -> String {
        if self.json {
            return self.json_line(snap, time.map(|t| ("time", t)));
        }
        let cpus: Vec<Option<u32>> = {
            let mut all: Vec<Option<u32>> = snap
                .probes
                .iter()
                .flat_map(|p| p.per_cpu.keys().copied())
                .collect();
            all.sort_unstable();
            all.dedup();
            all
        };
        let mut s = String::new();
        if self.per_cpu {
            // With CPU columns the header names them: written with each
            // table (each interval's too).
            if time.is_some() {
                s.push_str(&format!("{:>10}", "time"));
            }
            s.push_str(&format!("{:>w$}", "count", w = COUNT_WIDTH));
            for c in &cpus {
                let name = c.map_or_else(|| "any".to_string(), |n| format!("CPU{n}"));
                s.push_str(&format!("{name:>w$}", w = COUNT_WIDTH));
            }
            s.push_str("  probe\n");
        }
        for (i, (event, _)) in self.names.iter().enumerate() {
            let count = snap.probes.get(i).cloned().unwrap_or_default();
            if let Some(t) = time {
                s.push_str(&format!("{:>10.3}", t.as_secs_f64()));
            }
            s.push_str(&format!("{:>w$}", thousands(count.total), w = COUNT_WIDTH));
            if self.per_cpu {
                for c in &cpus {
                    let n = count.per_cpu.get(c).copied().unwrap_or(0);
                    s.push_str(&format!("{:>w$}", thousands(n), w = COUNT_WIDTH));
                }
            }
            s.push_str(&format!("  {event}\n"));
        }
        s
    }

    /// One JSON object (and a newline), with `time` as (key, seconds).
    fn json_line(&self, snap: &CountSnapshot, time: Option<(&str, Duration)>) -> String {
        let probes: Vec<serde_json::Value> = self
            .names
            .iter()
            .enumerate()
            .map(|(i, (event, spec))| {
                let count = snap.probes.get(i).cloned().unwrap_or_default();
                let mut o = serde_json::json!({
                    "event": event,
                    "definition": spec,
                    "count": count.total,
                });
                if self.per_cpu {
                    let per: serde_json::Map<String, serde_json::Value> = count
                        .per_cpu
                        .iter()
                        .map(|(c, n)| (cpu_name(*c), serde_json::json!(n)))
                        .collect();
                    o["per_cpu"] = serde_json::Value::Object(per);
                }
                o
            })
            .collect();
        let mut obj = serde_json::Map::new();
        if let Some((key, t)) = time {
            obj.insert(key.into(), serde_json::json!(t.as_secs_f64()));
        }
        obj.insert("probes".into(), serde_json::Value::Array(probes));
        format!("{}\n", serde_json::Value::Object(obj))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kprobe_perf_engine::cli::counting::ProbeCount;

    fn table(per_cpu: bool, json: bool) -> Table {
        Table {
            names: vec![
                ("do_sys_openat2".into(), "p do_sys_openat2".into()),
                ("vfs_read".into(), "r vfs_read".into()),
            ],
            per_cpu,
            json,
        }
    }

    fn snap() -> CountSnapshot {
        CountSnapshot {
            probes: vec![
                ProbeCount {
                    total: 1_234_567,
                    per_cpu: [(Some(0), 1_000_000), (Some(1), 234_567)]
                        .into_iter()
                        .collect(),
                },
                ProbeCount {
                    total: 0,
                    per_cpu: [(Some(0), 0), (Some(1), 0)].into_iter().collect(),
                },
            ],
        }
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(100_000), "100,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn the_table_lists_probes_as_given() {
        let t = table(false, false);
        let text = format!("{}{}", t.header(false), t.rows(&snap(), None));
        assert_eq!(
            text,
            "          count  probe\n      1,234,567  do_sys_openat2\n              0  vfs_read\n"
        );
        let timed = t.rows(&snap(), Some(Duration::from_millis(1500)));
        assert_eq!(
            timed,
            "     1.500      1,234,567  do_sys_openat2\n     1.500              0  vfs_read\n"
        );
    }

    #[test]
    fn per_cpu_columns() {
        let t = table(true, false);
        assert_eq!(t.header(false), "");
        assert_eq!(
            t.rows(&snap(), None),
            "          count           CPU0           CPU1  probe\n      1,234,567      1,000,000        234,567  do_sys_openat2\n              0              0              0  vfs_read\n"
        );
    }

    #[test]
    fn json_objects() {
        let t = table(true, true);
        let line = t.rows(&snap(), Some(Duration::from_millis(250)));
        let v: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert!(line.ends_with("}\n") && line.matches('\n').count() == 1);
        assert_eq!(v["time"], 0.25);
        assert_eq!(v["probes"][0]["event"], "do_sys_openat2");
        assert_eq!(v["probes"][0]["definition"], "p do_sys_openat2");
        assert_eq!(v["probes"][0]["count"], 1_234_567);
        assert_eq!(v["probes"][0]["per_cpu"]["1"], 234_567);
        assert_eq!(v["probes"][1]["count"], 0);
        let plain =
            table(false, true).json_line(&snap(), Some(("elapsed", Duration::from_secs(2))));
        let v: serde_json::Value = serde_json::from_str(plain.trim_end()).unwrap();
        assert!(v.get("time").is_none());
        assert_eq!(v["elapsed"], 2.0);
        assert!(v["probes"][0].get("per_cpu").is_none());
    }
}
