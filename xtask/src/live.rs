//! `cargo xtask bench live`: the live path of kprobe-perf against perf
//! record and bpftrace, on the same probes and the same workload.
//!
//! A workload (this binary's hidden `live-workload` subcommand) makes N
//! calls, tmpfs opens (one `do_sys_openat2` each) or calls of a function of
//! its own (`kpf_live_target`, for uprobes), on one thread or one per CPU,
//! paced at a rate per thread or as fast as it can. It reports the time
//! spent in its calls (pauses of the pacing excluded) and its own CPU time
//! and voluntary context switches. Each tool records it (`-- CMD`), under
//! `/usr/bin/time`, whose getrusage figures cover the tool and the
//! workload it forked: the workload's own share is subtracted, which
//! leaves the consumer's. Every tool runs once per round, in turn, and
//! the best round counts.
//!
//! In the VM (`cargo xtask bench live`) every probe kind runs; natively
//! (`--native`) only the uprobe workload, since the host has no kprobes.

use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The function the uprobe workload calls: a symbol of this binary.
#[no_mangle]
#[inline(never)]
pub(crate) extern "C" fn kpf_live_target(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// What `live-workload` calls.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CallKind {
    /// `open()` and `close()` of a file: one `do_sys_openat2` per call.
    Open,
    /// `kpf_live_target()`: one uprobe hit per call.
    Call,
}

impl CallKind {
    fn name(self) -> &'static str {
        match self {
            CallKind::Open => "open",
            CallKind::Call => "call",
        }
    }

    pub(crate) fn parse(s: &str) -> Result<Self> {
        match s {
            "open" => Ok(CallKind::Open),
            "call" => Ok(CallKind::Call),
            _ => bail!("a workload is `open` or `call`, not {s:?}"),
        }
    }
}

/// A per-thread rate of calls: a number per second, or as fast as it goes.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Rate {
    PerSecond(u64),
    Max,
}

impl Rate {
    pub(crate) fn parse(s: &str) -> Result<Self> {
        if s == "max" {
            return Ok(Rate::Max);
        }
        match s.parse::<u64>() {
            Ok(n) if (1..=100_000_000).contains(&n) => Ok(Rate::PerSecond(n)),
            _ => {
                bail!("a rate is calls per second per thread (1 to 100000000) or `max`, not {s:?}")
            }
        }
    }

    fn label(self) -> String {
        match self {
            Rate::PerSecond(n) => format!("{n}/s"),
            Rate::Max => "max".into(),
        }
    }
}

/// Parses `--rates 20000,max`.
pub(crate) fn parse_rates(s: &str) -> Result<Vec<Rate>> {
    let rates = s
        .split(',')
        .filter(|p| !p.is_empty())
        .map(Rate::parse)
        .collect::<Result<Vec<_>>>()?;
    if rates.is_empty() {
        bail!("--rates needs at least one rate (e.g. 20000,max)");
    }
    Ok(rates)
}

/// The CPU time (ns) and voluntary context switches of the calling thread.
fn thread_usage() -> (u64, u64) {
    let cpu = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let vol = std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0);
    (cpu, vol)
}

/// CPU time (ns) of every live thread of process `pid` so far.
fn process_cpu_ns(pid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Set for a consumer that is a pipeline (`perf record -o - | perf
/// script`): the workload counts the CPU time of its parent's siblings
/// (the pipeline's other commands) with its parent's.
const CONSUMER_SIBLINGS: &str = "KPF_LIVE_CONSUMER_SIBLINGS";

/// The parent of process `pid`, from `/proc/PID/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's `)`: state, then the parent's pid.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The processes whose CPU time is the consumer's: `parent`, and with
/// [`CONSUMER_SIBLINGS`] the other children of its parent.
fn consumer_pids(parent: u32) -> Vec<u32> {
    let mut pids = vec![parent];
    if std::env::var_os(CONSUMER_SIBLINGS).is_none() {
        return pids;
    }
    let Some(grandparent) = parent_of(parent) else {
        return pids;
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return pids;
    };
    let me = std::process::id();
    pids.extend(
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&p| p != parent && p != me && parent_of(p) == Some(grandparent)),
    );
    pids
}

/// What one workload thread did.
#[derive(Default)]
struct ThreadReport {
    busy: Duration,
    /// CPU time of the calls.
    cpu_ns: u64,
    /// CPU time and voluntary switches of the thread's whole life.
    total_ns: u64,
    voluntary: u64,
}

fn workload_thread(kind: CallKind, path: &Path, calls: u64, rate: Rate) -> ThreadReport {
    let one = |i: u64| match kind {
        CallKind::Open => {
            let _ = std::fs::File::open(path);
        }
        CallKind::Call => {
            std::hint::black_box(kpf_live_target(std::hint::black_box(i)));
        }
    };
    let (cpu_before, _) = thread_usage();
    let mut busy = Duration::ZERO;
    match rate {
        Rate::Max => {
            let t = Instant::now();
            for i in 0..calls {
                one(i);
            }
            busy = t.elapsed();
        }
        Rate::PerSecond(r) => {
            // Calls due by now: catch up in one burst, then sleep a little.
            let start = Instant::now();
            let mut done = 0;
            while done < calls {
                let due = ((start.elapsed().as_secs_f64() * r as f64) as u64 + 1).min(calls);
                if due > done {
                    let t = Instant::now();
                    for i in done..due {
                        one(i);
                    }
                    busy += t.elapsed();
                    done = due;
                } else {
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
        }
    }
    // Only the calls: the process's start (exec, loading) is left out.
    let (cpu_after, vol_after) = thread_usage();
    ThreadReport {
        busy,
        cpu_ns: cpu_after.saturating_sub(cpu_before),
        total_ns: cpu_after,
        voluntary: vol_after,
    }
}

/// The hidden `live-workload` subcommand: `threads` threads make `calls`
/// calls in all, then one line goes to `report`:
/// `calls=N busy_ns=B wall_ns=W cpu_ns=C total_cpu_ns=T voluntary=V
/// parent_start_ns=S parent_end_ns=E` (C: the CPU time of the calls; T and
/// V: of the whole process; S and E: the parent's CPU time when the calls
/// began and ended).
pub(crate) fn workload(
    kind: CallKind,
    path: &Path,
    calls: u64,
    threads: usize,
    rate: Rate,
    report: &Path,
) -> Result<()> {
    let threads = threads.max(1);
    // The recorder is the parent: its CPU time before and after the calls
    // (with its siblings', when the consumer is a pipeline).
    let parent = std::os::unix::process::parent_id();
    let consumers = consumer_pids(parent);
    let consumers_cpu = || consumers.iter().map(|&p| process_cpu_ns(p)).sum::<u64>();
    let parent_start = consumers_cpu();
    let start = Instant::now();
    let per = calls / threads as u64;
    let reports: Vec<ThreadReport> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let n = if t == 0 {
                    calls - per * (threads as u64 - 1)
                } else {
                    per
                };
                s.spawn(move || workload_thread(kind, path, n, rate))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let wall = start.elapsed();
    let parent_end = consumers_cpu();
    let (main_cpu, main_vol) = thread_usage();
    let busy: Duration = reports.iter().map(|r| r.busy).sum();
    // During the calls, and the whole process (for the subtraction from
    // the recorder's getrusage figures, which include it).
    let cpu: u64 = reports.iter().map(|r| r.cpu_ns).sum::<u64>();
    let total_cpu = main_cpu + reports.iter().map(|r| r.total_ns).sum::<u64>();
    let vol: u64 = main_vol + reports.iter().map(|r| r.voluntary).sum::<u64>();
    let line = format!(
        "calls={calls} busy_ns={} wall_ns={} cpu_ns={cpu} total_cpu_ns={total_cpu} voluntary={vol} parent_start_ns={parent_start} parent_end_ns={parent_end}\n",
        busy.as_nanos(),
        wall.as_nanos()
    );
    std::fs::write(report, line).with_context(|| format!("writing {}", report.display()))
}

/// Options of one `bench live` measurement (VM guest or native).
#[derive(Clone, Debug)]
pub(crate) struct LiveOptions {
    pub kprobe_perf: PathBuf,
    /// An earlier kprobe-perf binary whose rows run beside the current
    /// one's in the same rounds (`--baseline`); native runs only.
    pub baseline: Option<PathBuf>,
    pub rounds: u32,
    pub calls: u64,
    pub rates: Vec<Rate>,
    pub workloads: Vec<CallKind>,
    /// Profile the consumers (perf stat counters, a call graph) instead
    /// of the tables.
    pub profile: bool,
    /// Only these probe kinds (entry, return, string, stack); empty: all.
    pub probes: Vec<String>,
}

/// The probe kinds `--probes` selects from.
pub(crate) const PROBE_KINDS: [&str; 5] = ["entry", "return", "string", "stack", "dwarf"];

/// The callchain a stack probe records.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Chain {
    /// The kernel stack (kprobes).
    Kernel,
    /// The user stack, walked by frame pointer (uprobes).
    User,
    /// The user registers and 8 KiB of the user stack copied into each
    /// sample, for unwinding from DWARF (uprobes; bpftrace has no such
    /// mode and sits this one out).
    Dwarf,
}

impl Chain {
    /// What each tool records and prints, for the table's header.
    fn describe(self) -> &'static str {
        match self {
            Chain::Kernel => "stacks: the kernel stack only, in all three tools (kprobe-perf --call-graph kernel and perf --kernel-callchains: up to kernel.perf_event_max_stack frames; bpftrace kstack: its default depth); kprobe-perf and bpftrace print each frame as function+offset, perf record writes the addresses to its file",
            Chain::Dwarf => "stacks: the user registers and stack (8 KiB a sample) copied into each sample, for unwinding from DWARF, in both tools (kprobe-perf --call-graph dwarf, which also records the kernel stack, and perf --call-graph dwarf); kprobe-perf's text unwinds each stack as it prints it, its -q -o and perf record write the bytes to their files; bpftrace has no DWARF unwinding and is left out",
            Chain::User => "stacks: the user stack only, walked by frame pointer, in all three tools (kprobe-perf --call-graph user and perf --user-callchains: up to kernel.perf_event_max_stack frames; bpftrace ustack: its default depth); kprobe-perf and bpftrace print each frame as function+offset (bpftrace: an address once the workload has exited), perf record writes the addresses to its file",
        }
    }
}

/// What bpftrace's stack programs print before each stack, so that an
/// event is one line of its output however many frames follow.
const BPFTRACE_STACK_MARK: &str = "stack";

/// One probe on one workload, as each tool spells it.
struct ProbeCase {
    workload: CallKind,
    kind: &'static str,
    /// kprobe-perf's `-e`.
    kp: String,
    /// `perf probe` definition: (binary for -x, definition).
    perf: (Option<String>, String),
    /// bpftrace's program (`cpid` filters the workload).
    bpftrace: String,
    /// The callchain recorded with each event (stack probes).
    stack: Option<Chain>,
}

impl ProbeCase {
    /// kprobe-perf record's options for this case, before `-e`.
    fn kp_opts(&self) -> &'static [&'static str] {
        match self.stack {
            None => &[],
            Some(Chain::Kernel) => &["--call-graph", "kernel"],
            Some(Chain::User) => &["--call-graph", "user"],
            Some(Chain::Dwarf) => &["--call-graph", "dwarf"],
        }
    }

    /// perf record's options for this case, before `-e`: the same
    /// callchain as kprobe-perf's, and only that one.
    fn perf_opts(&self) -> &'static [&'static str] {
        match self.stack {
            None => &[],
            Some(Chain::Kernel) => &["-g", "--kernel-callchains"],
            Some(Chain::User) => &["-g", "--user-callchains"],
            Some(Chain::Dwarf) => &["--call-graph", "dwarf"],
        }
    }

    /// How bpftrace's output lines are counted as events: every line, or
    /// (stack probes) the lines that start with this mark.
    fn bpftrace_mark(&self) -> Option<&'static str> {
        self.stack.map(|_| BPFTRACE_STACK_MARK)
    }
}

/// `words` quoted for `sh -c`, separated by spaces.
fn shell_words(words: &[impl AsRef<str>]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.as_ref().replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `opts` followed by a space, or nothing.
fn with_space(opts: &[&str]) -> String {
    opts.iter().map(|o| format!("{o} ")).collect()
}

fn cases(xtask: &str) -> Vec<ProbeCase> {
    vec![
        ProbeCase {
            workload: CallKind::Open,
            kind: "entry",
            kp: "p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32".into(),
            perf: (None, "kpfb:entry=do_sys_openat2 dfd=%di:s32 flags=%dx:x32".into()),
            bpftrace: r#"kprobe:do_sys_openat2 /pid == cpid/ { printf("%d %x\n", arg0, arg2 & 0xffffffff); }"#.into(),
            stack: None,
        },
        ProbeCase {
            workload: CallKind::Open,
            kind: "return",
            kp: "r:do_sys_openat2 ret=$retval:s64".into(),
            perf: (None, "kpfb:ret=do_sys_openat2%return ret=$retval:s64".into()),
            bpftrace: r#"kretprobe:do_sys_openat2 /pid == cpid/ { printf("%d\n", retval); }"#.into(),
            stack: None,
        },
        ProbeCase {
            workload: CallKind::Open,
            kind: "string",
            kp: "p:do_sys_openat2 path=+0(%si):ustring".into(),
            perf: (None, "kpfb:string=do_sys_openat2 path=+0(%si):ustring".into()),
            bpftrace: r#"kprobe:do_sys_openat2 /pid == cpid/ { printf("%s\n", str(uptr(arg1))); }"#.into(),
            stack: None,
        },
        ProbeCase {
            workload: CallKind::Open,
            kind: "stack",
            kp: "p:do_sys_openat2".into(),
            perf: (None, "kpfb:stack=do_sys_openat2".into()),
            bpftrace: format!(
                r#"kprobe:do_sys_openat2 /pid == cpid/ {{ printf("{BPFTRACE_STACK_MARK}%s\n", kstack); }}"#
            ),
            stack: Some(Chain::Kernel),
        },
        ProbeCase {
            workload: CallKind::Call,
            kind: "entry",
            kp: format!("p:{xtask}:kpf_live_target x=%di:u64"),
            perf: (Some(xtask.into()), "kpfb:uentry=kpf_live_target x=%di:u64".into()),
            bpftrace: format!(r#"uprobe:{xtask}:kpf_live_target /pid == cpid/ {{ printf("%u\n", arg0); }}"#),
            stack: None,
        },
        ProbeCase {
            workload: CallKind::Call,
            kind: "return",
            kp: format!("r:{xtask}:kpf_live_target ret=$retval:u64"),
            perf: (Some(xtask.into()), "kpfb:uret=kpf_live_target%return ret=$retval:u64".into()),
            bpftrace: format!(r#"uretprobe:{xtask}:kpf_live_target /pid == cpid/ {{ printf("%u\n", retval); }}"#),
            stack: None,
        },
        ProbeCase {
            workload: CallKind::Call,
            kind: "stack",
            kp: format!("p:{xtask}:kpf_live_target"),
            perf: (Some(xtask.into()), "kpfb:ustack=kpf_live_target".into()),
            bpftrace: format!(
                r#"uprobe:{xtask}:kpf_live_target /pid == cpid/ {{ printf("{BPFTRACE_STACK_MARK}%s\n", ustack); }}"#
            ),
            stack: Some(Chain::User),
        },
        ProbeCase {
            workload: CallKind::Call,
            kind: "dwarf",
            kp: format!("p:{xtask}:kpf_live_target"),
            perf: (Some(xtask.into()), "kpfb:udwarf=kpf_live_target".into()),
            bpftrace: String::new(),
            stack: Some(Chain::Dwarf),
        },
    ]
}

/// A consumer of the events, or none.
#[derive(Clone, Debug, PartialEq)]
enum Tool {
    Bare,
    /// kprobe-perf record with these options before `-e`; label.
    Kp(&'static str, Vec<&'static str>),
    /// The same, run by the `--baseline` binary (an earlier build).
    KpBaseline(&'static str, Vec<&'static str>),
    /// perf record with these options before `-e`; label.
    Perf(&'static str, Vec<&'static str>),
    /// perf's live text: `perf record -o - | perf script -i -`, its text
    /// to a file (counted afterwards).
    PerfText,
    Bpftrace,
}

impl Tool {
    fn label(&self) -> String {
        match self {
            Tool::Bare => "bare".into(),
            Tool::Kp(l, _) => format!("kprobe-perf {l}"),
            Tool::KpBaseline(l, _) => format!("baseline {l}"),
            Tool::Perf(l, _) => format!("perf record{l}"),
            Tool::PerfText => "perf record -o - | perf script".into(),
            Tool::Bpftrace => "bpftrace".into(),
        }
    }
}

/// What one run of one tool gave.
#[derive(Clone, Debug, Default)]
struct RunResult {
    /// Microseconds per call, inside the calls (wall clock).
    us_per_call: f64,
    /// The workload's CPU microseconds per call (probe handlers included:
    /// they run in its context).
    cpu_us_per_call: f64,
    /// Events the tool delivered (None for bare).
    events: Option<u64>,
    /// Events the tool says it lost.
    lost: Option<u64>,
    /// The consumer's CPU seconds while the workload made its calls.
    consumer_cpu_calls: f64,
    /// The consumer's CPU seconds from the first call to its exit
    /// (getrusage of tool and workload, minus the workload's, minus the
    /// tool's CPU time before the first call).
    consumer_cpu_after_start: f64,
    /// The consumer's voluntary context switches.
    consumer_voluntary: i64,
}

/// Where the tools are.
struct Tools {
    time: PathBuf,
    perf: Option<PathBuf>,
    bpftrace: Option<PathBuf>,
    /// Why bpftrace is not used.
    no_bpftrace: Option<String>,
}

fn first_existing(paths: &[&str]) -> Option<PathBuf> {
    paths.iter().map(PathBuf::from).find(|p| p.exists())
}

fn find_tools(workdir: &Path) -> Result<Tools> {
    let time = first_existing(&["/usr/bin/time"]).ok_or_else(|| {
        anyhow!("/usr/bin/time is missing: it gives the consumers' getrusage figures (apt-get install time)")
    })?;
    let perf = first_existing(&["/usr/bin/perf", "/usr/sbin/perf"]);
    let (bpftrace, no_bpftrace) = match first_existing(&["/usr/bin/bpftrace"]) {
        None => (
            None,
            Some("bpftrace is not installed (apt-get install bpftrace)".into()),
        ),
        Some(b) => {
            // It must run here: a trivial program that exits at once.
            let out = Command::new(&b)
                .args(["-e", "BEGIN { exit(); }"])
                .current_dir(workdir)
                .stdin(Stdio::null())
                .output();
            match out {
                Ok(o) if o.status.success() => (Some(b), None),
                Ok(o) => (
                    None,
                    Some(format!(
                        "bpftrace does not run here: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    )),
                ),
                Err(e) => (None, Some(format!("bpftrace does not run here: {e}"))),
            }
        }
    };
    Ok(Tools {
        time,
        perf,
        bpftrace,
        no_bpftrace,
    })
}

/// The directory for files of the runs: a tmpfs.
fn work_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() && std::env::var_os("KPROBE_PERF_IN_VM").is_none() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!("kpf-live-{}", std::process::id()))
}

fn online_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// `key=value` fields of the workload's report line.
fn report_field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// `kprobe-perf: N events (...), L lost`.
fn kp_summary(stderr: &str) -> Option<(u64, u64)> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("kprobe-perf: ") && l.contains(" events ("))?;
    let rest = line.strip_prefix("kprobe-perf: ")?;
    let events = rest.split_whitespace().next()?.parse().ok()?;
    let tail = &rest[rest.rfind("), ")? + 3..];
    let lost = tail.split_whitespace().next()?.parse().ok()?;
    Some((events, lost))
}

/// Events and losses in `perf script --show-lost-events` text: the lines
/// naming `event` (`kpfb:NAME:`; a stack's frames follow on lines of
/// their own), and the samples the `PERF_RECORD_LOST_SAMPLES` lines say
/// were lost, else those of the `PERF_RECORD_LOST` lines (each line's
/// last number).
fn perf_script_output(text: &str, event: &str) -> (u64, u64) {
    let mark = format!("{event}:");
    let events = text.lines().filter(|l| l.contains(&mark)).count() as u64;
    let last_number = |l: &str| -> u64 {
        l.split(|c: char| !c.is_ascii_digit())
            .rfind(|w| !w.is_empty())
            .and_then(|w| w.parse().ok())
            .unwrap_or(0)
    };
    let sum = |kind: &str| -> Option<u64> {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(kind) && (kind.ends_with("SAMPLES") || !l.contains("SAMPLES")))
            .collect();
        (!lines.is_empty()).then(|| lines.iter().map(|l| last_number(l)).sum())
    };
    let lost = sum("PERF_RECORD_LOST_SAMPLES")
        .or_else(|| sum("PERF_RECORD_LOST"))
        .unwrap_or(0);
    (events, lost)
}

/// `[ perf record: Captured and wrote 1.2 MB FILE (12345 samples) ]`.
fn perf_samples(stderr: &str) -> Option<u64> {
    let line = stderr.lines().find(|l| l.contains(" samples) ]"))?;
    let open = line.rfind('(')?;
    line[open + 1..].split_whitespace().next()?.parse().ok()
}

/// perf record's losses in its file, from `perf report -D`: the
/// `PERF_RECORD_LOST_SAMPLES` records perf writes at the end from the
/// kernel's lost count of each event (`lost samples :N`, exact), or, when
/// there are none, the sum of the `PERF_RECORD_LOST` records (`lost:N`,
/// a floor: the kernel writes one only once a ring has room again).
fn perf_lost(perf: &Path, data: &Path) -> Option<u64> {
    let out = Command::new(perf)
        .args(["report", "-D", "-i"])
        .arg(data)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    Some(perf_lost_from_dump(&String::from_utf8_lossy(&out.stdout)))
}

fn perf_lost_from_dump(text: &str) -> u64 {
    let number_after = |l: &str, key: &str| -> Option<u64> {
        let i = l.find(key)? + key.len();
        l[i..]
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let samples: Vec<u64> = text
        .lines()
        .filter(|l| l.contains("PERF_RECORD_LOST_SAMPLES"))
        .filter_map(|l| number_after(l, "lost samples :"))
        .collect();
    if !samples.is_empty() {
        return samples.iter().sum();
    }
    text.lines()
        .filter(|l| l.contains("PERF_RECORD_LOST:"))
        .filter_map(|l| number_after(l, "lost:"))
        .sum()
}

/// Events and `Lost N events` of bpftrace's output file. Without `mark`
/// every line is an event (empty ones too: one printf each); with it, the
/// lines that start with `mark` are (a stack program prints the mark, then
/// the stack's frames, one an indented line, then empty lines).
fn bpftrace_output(file: &Path, mark: Option<&str>) -> (u64, u64) {
    let text = std::fs::read(file).unwrap_or_default();
    let mut events = 0;
    let mut lost = 0;
    for l in text.split_inclusive(|&b| b == b'\n') {
        let s = String::from_utf8_lossy(l);
        if let Some(rest) = s.strip_prefix("Lost ") {
            if let Some(n) = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
            {
                lost += n;
                continue;
            }
        }
        if s.starts_with("Attaching ") {
            continue;
        }
        if mark.is_none_or(|m| s.starts_with(m)) {
            events += 1;
        }
    }
    (events, lost)
}

/// `/usr/bin/time -f '%U %S %w'`: user and system seconds, voluntary
/// switches (of the tool and the children it waited for).
fn time_figures(file: &Path) -> Result<(f64, i64)> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with("KPFTIME "))
        .ok_or_else(|| anyhow!("no KPFTIME line in {}: {text}", file.display()))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| -> Result<f64> {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| anyhow!("bad /usr/bin/time line {line:?}"))
    };
    // KPFTIME elapsed user system voluntary involuntary
    Ok((num(2)? + num(3)?, num(4)? as i64))
}

struct Runner<'a> {
    opts: &'a LiveOptions,
    tools: &'a Tools,
    dir: PathBuf,
    xtask: String,
    file: PathBuf,
}

impl Runner<'_> {
    fn workload_args(&self, kind: CallKind, threads: usize, rate: Rate) -> Vec<String> {
        vec![
            self.xtask.clone(),
            "live-workload".into(),
            kind.name().into(),
            self.file.to_string_lossy().into_owned(),
            self.opts.calls.to_string(),
            threads.to_string(),
            match rate {
                Rate::Max => "max".into(),
                Rate::PerSecond(n) => n.to_string(),
            },
            self.dir.join("report").to_string_lossy().into_owned(),
        ]
    }

    /// The command line of `tool` recording the workload `w` on `case`:
    /// its files are `data` (-o) and `bpf_out` (bpftrace's -o, or the
    /// text of perf's live pipeline).
    fn tool_argv(
        &self,
        tool: &Tool,
        case: &ProbeCase,
        perf_event: &str,
        w: &[String],
        data: &Path,
        bpf_out: &Path,
    ) -> Result<Vec<OsString>> {
        let mut argv: Vec<OsString> = Vec::new();
        match tool {
            Tool::Bare => {}
            Tool::Kp(_, extra) | Tool::KpBaseline(_, extra) => {
                let exe = match (tool, &self.opts.baseline) {
                    (Tool::KpBaseline(..), Some(b)) => b,
                    _ => &self.opts.kprobe_perf,
                };
                argv.push(exe.into());
                argv.push("record".into());
                for e in extra {
                    argv.push(if *e == "FILE" { data.into() } else { e.into() });
                }
                argv.extend(case.kp_opts().iter().map(OsString::from));
                argv.extend(["-e".into(), case.kp.clone().into(), "--".into()]);
            }
            Tool::Perf(_, extra) => {
                let perf = self.tools.perf.as_ref().ok_or_else(|| anyhow!("no perf"))?;
                argv.extend([perf.into(), "record".into(), "-N".into()]);
                argv.extend(extra.iter().chain(case.perf_opts()).map(OsString::from));
                argv.extend(["-e".into(), perf_event.into(), "-o".into()]);
                argv.extend([data.into(), "--".into()]);
            }
            Tool::PerfText => {
                let perf = self.tools.perf.as_ref().ok_or_else(|| anyhow!("no perf"))?;
                let perf = perf.to_string_lossy();
                let mut record: Vec<String> = vec![perf.to_string(), "record".into(), "-N".into()];
                record.extend(case.perf_opts().iter().map(|o| o.to_string()));
                record.extend(["-e".into(), perf_event.into(), "-o".into(), "-".into()]);
                record.push("--".into());
                record.extend(w.iter().cloned());
                let script = [&*perf, "script", "--show-lost-events", "-i", "-"];
                let text = bpf_out.to_string_lossy();
                let line = format!(
                    "{} | {} > {}",
                    shell_words(&record),
                    shell_words(&script),
                    shell_words(&[text])
                );
                argv.extend(["sh".into(), "-c".into(), line.into()]);
                return Ok(argv);
            }
            Tool::Bpftrace => {
                let b = self
                    .tools
                    .bpftrace
                    .as_ref()
                    .ok_or_else(|| anyhow!("no bpftrace"))?;
                argv.extend([b.into(), "-o".into(), bpf_out.into(), "-e".into()]);
                argv.extend([
                    case.bpftrace.clone().into(),
                    "-c".into(),
                    w.join(" ").into(),
                ]);
                return Ok(argv);
            }
        }
        argv.extend(w.iter().map(OsString::from));
        Ok(argv)
    }

    /// One run of `tool` on `case`.
    fn run(
        &self,
        tool: &Tool,
        case: &ProbeCase,
        perf_event: &str,
        threads: usize,
        rate: Rate,
    ) -> Result<RunResult> {
        let report = self.dir.join("report");
        let timef = self.dir.join("time");
        let data = self.dir.join("out.data");
        let bpf_out = self.dir.join("bpftrace.out");
        for f in [&report, &timef, &data, &bpf_out] {
            let _ = std::fs::remove_file(f);
        }
        let _ = std::fs::remove_file(self.dir.join("out.data.old"));
        let w = self.workload_args(case.workload, threads, rate);
        let mut cmd = Command::new(&self.tools.time);
        if *tool == Tool::PerfText {
            // perf script is the workload's parent's sibling: counted too.
            cmd.env(CONSUMER_SIBLINGS, "1");
        }
        cmd.args(["-f", "KPFTIME %e %U %S %w %c", "-o"])
            .arg(&timef)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .args(self.tool_argv(tool, case, perf_event, &w, &data, &bpf_out)?);
        let out = cmd
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("running {}", tool.label()))?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            bail!(
                "{} on {} {} failed ({}): {}",
                tool.label(),
                case.workload.name(),
                case.kind,
                out.status,
                stderr.trim()
            );
        }
        let line = std::fs::read_to_string(&report)
            .with_context(|| format!("the workload wrote no report under {}", tool.label()))?;
        let calls = report_field(&line, "calls").unwrap_or(0).max(1);
        let busy = report_field(&line, "busy_ns").unwrap_or(0) as f64;
        // Busy time summed over threads, per call: each call's latency.
        let us_per_call = busy / 1e3 / calls as f64;
        let calls_cpu = report_field(&line, "cpu_ns").unwrap_or(0) as f64 / 1e9;
        let cpu_us_per_call = calls_cpu * 1e6 / calls as f64;
        let w_cpu = report_field(&line, "total_cpu_ns").unwrap_or(0) as f64 / 1e9;
        let p_start = report_field(&line, "parent_start_ns").unwrap_or(0) as f64 / 1e9;
        let p_end = report_field(&line, "parent_end_ns").unwrap_or(0) as f64 / 1e9;
        let w_vol = report_field(&line, "voluntary").unwrap_or(0) as i64;
        let (cpu, vol) = time_figures(&timef)?;
        let (events, lost) = match tool {
            Tool::Bare => (None, None),
            Tool::Kp(..) | Tool::KpBaseline(..) => match kp_summary(&stderr) {
                Some((e, l)) => (Some(e), Some(l)),
                None => bail!("no summary line from kprobe-perf: {stderr}"),
            },
            Tool::Perf(..) => {
                let perf = self.tools.perf.as_ref().ok_or_else(|| anyhow!("no perf"))?;
                (perf_samples(&stderr), perf_lost(perf, &data))
            }
            Tool::PerfText => {
                let text = std::fs::read_to_string(&bpf_out).unwrap_or_default();
                let (e, l) = perf_script_output(&text, perf_event);
                (Some(e), Some(l))
            }
            Tool::Bpftrace => {
                let (e, l) = bpftrace_output(&bpf_out, case.bpftrace_mark());
                (Some(e), Some(l))
            }
        };
        Ok(RunResult {
            us_per_call,
            cpu_us_per_call,
            events,
            lost,
            consumer_cpu_calls: (p_end - p_start).max(0.0),
            consumer_cpu_after_start: (cpu - w_cpu - p_start).max(0.0),
            consumer_voluntary: vol - w_vol,
        })
    }
}

/// `perf probe` defines the case's event; returns its name for `-e`.
fn perf_define(perf: &Path, case: &ProbeCase) -> Result<String> {
    let _ = Command::new(perf)
        .args(["probe", "-q", "-d", "kpfb:*"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let mut c = Command::new(perf);
    c.args(["probe", "-q"]);
    if let Some(x) = &case.perf.0 {
        c.args(["-x", x]);
    }
    let out = c
        .args(["-a", &case.perf.1])
        .stdin(Stdio::null())
        .output()
        .context("running perf probe")?;
    if !out.status.success() {
        bail!(
            "perf probe -a '{}' failed: {}",
            case.perf.1,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let list = Command::new(perf)
        .args(["probe", "-l"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .context("running perf probe -l")?;
    let text = String::from_utf8_lossy(&list.stdout);
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .find(|n| n.starts_with("kpfb:"))
        .map(String::from)
        .ok_or_else(|| anyhow!("perf probe -l does not list the kpfb event it defined: {text}"))
}

fn perf_undefine(perf: &Path) {
    let _ = Command::new(perf)
        .args(["probe", "-q", "-d", "kpfb:*"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Best (lowest) and all values of one tool over the rounds.
#[derive(Default)]
struct Series {
    runs: Vec<RunResult>,
}

impl Series {
    /// The round with the fewest microseconds per call.
    fn best(&self) -> Option<&RunResult> {
        self.runs
            .iter()
            .min_by(|a, b| a.us_per_call.total_cmp(&b.us_per_call))
    }

    /// The least of a figure over the rounds.
    fn min(&self, f: impl Fn(&RunResult) -> Option<f64>) -> Option<f64> {
        self.runs.iter().filter_map(f).min_by(f64::total_cmp)
    }
}

fn fmt_list(v: impl Iterator<Item = Option<u64>>) -> String {
    v.map(|x| x.map_or("?".into(), |n| n.to_string()))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The tools for one case, in the order they run in each round.
fn tools_for(case: &ProbeCase, tools: &Tools, baseline: bool) -> Vec<Tool> {
    let mut v = vec![
        Tool::Bare,
        Tool::Kp("text", vec![]),
        Tool::Kp("--json", vec!["--json"]),
        Tool::Kp("-q -o FILE", vec!["-q", "-o", "FILE"]),
    ];
    let kretprobe = case.kind == "return" && case.workload == CallKind::Open;
    if kretprobe {
        // auto takes tracefs for a command's kernel probes: the PMU's
        // figures are measured apart.
        v.push(Tool::Kp("--backend pmu text", vec!["--backend", "pmu"]));
        // Nothing read while the workload runs: the handlers' cost alone.
        v.push(Tool::Kp(
            "--overwrite -q --backend pmu",
            vec!["--overwrite", "-q", "--backend", "pmu"],
        ));
        v.push(Tool::Kp("--overwrite -q (auto)", vec!["--overwrite", "-q"]));
    }
    if baseline {
        // Each kprobe-perf row again, run by the earlier build, in the
        // same rounds: before and after side by side.
        let twins: Vec<Tool> = v
            .iter()
            .filter_map(|t| match t {
                Tool::Kp(l, extra) => Some(Tool::KpBaseline(l, extra.clone())),
                _ => None,
            })
            .collect();
        v.extend(twins);
    }
    if tools.perf.is_some() {
        v.push(Tool::Perf("", vec![]));
        if kretprobe {
            v.push(Tool::Perf(" --overwrite", vec!["--overwrite"]));
        }
        // The peer of kprobe-perf's text: perf's own live text.
        v.push(Tool::PerfText);
    }
    if tools.bpftrace.is_some() && case.stack != Some(Chain::Dwarf) {
        v.push(Tool::Bpftrace);
    }
    v
}

/// Runs every case (VM guest or native) and prints the tables.
pub(crate) fn measure(opts: &LiveOptions) -> Result<()> {
    let dir = work_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = measure_in(opts, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure_in(opts: &LiveOptions, dir: &Path) -> Result<()> {
    let tools = find_tools(dir)?;
    let xtask = std::env::current_exe()
        .context("finding this executable (the workload)")?
        .to_string_lossy()
        .into_owned();
    let file = dir.join("file");
    std::fs::write(&file, "x\n").with_context(|| format!("writing {}", file.display()))?;
    let runner = Runner {
        opts,
        tools: &tools,
        dir: dir.to_path_buf(),
        xtask: xtask.clone(),
        file,
    };
    let cpus = online_cpus();
    print_setup(opts, &tools, cpus);
    if opts.profile {
        return profile(&runner);
    }
    let mut threads_list = vec![1];
    if cpus > 1 {
        threads_list.push(cpus);
    }
    for case in cases(&xtask).iter().filter(|c| opts.selects(c)) {
        let perf_event = match &tools.perf {
            Some(p) => perf_define(p, case)?,
            None => String::new(),
        };
        print_case(case, &tools, &perf_event);
        let list = tools_for(case, &tools, opts.baseline.is_some());
        for &threads in &threads_list {
            for &rate in &opts.rates {
                let series = measure_series(&runner, case, &list, &perf_event, threads, rate);
                print_rows(&list, &series, threads, rate);
            }
        }
        if let Some(p) = &tools.perf {
            perf_undefine(p);
        }
    }
    Ok(())
}

impl LiveOptions {
    /// Whether the options ask for `case` (its workload and probe kind).
    fn selects(&self, case: &ProbeCase) -> bool {
        self.workloads.contains(&case.workload)
            && (self.probes.is_empty() || self.probes.iter().any(|p| p == case.kind))
    }
}

/// The run's kernel, CPUs, calls and tools.
fn print_setup(opts: &LiveOptions, tools: &Tools, cpus: usize) {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!(
        "bench live: kernel {}, {cpus} CPUs, {} calls per run, best of {} rounds (each tool once per round, in turn)",
        kernel.trim(),
        opts.calls,
        opts.rounds
    );
    println!(
        "tools: kprobe-perf {}; perf {}; bpftrace {}",
        opts.kprobe_perf.display(),
        tools
            .perf
            .as_ref()
            .map_or("absent".into(), |p| p.display().to_string()),
        match (&tools.bpftrace, &tools.no_bpftrace) {
            (Some(b), _) => b.display().to_string(),
            (None, Some(why)) => format!("not used: {why}"),
            (None, None) => "absent".into(),
        }
    );
    println!("uprobe string probes: not measured (kprobe-perf refuses memory fetches in uprobes)");
}

/// A case's heading, each tool's command, and the table's head.
fn print_case(case: &ProbeCase, tools: &Tools, perf_event: &str) {
    let what = match case.workload {
        CallKind::Open => "open() of a tmpfs file (kprobe on do_sys_openat2)",
        CallKind::Call => "calls of kpf_live_target (uprobe)",
    };
    println!();
    println!("## {} probe: {what}", case.kind);
    println!();
    println!(
        "kprobe-perf: {}-e '{}'",
        with_space(case.kp_opts()),
        case.kp
    );
    if tools.perf.is_some() {
        let x = case
            .perf
            .0
            .as_ref()
            .map_or(String::new(), |x| format!("-x {x} "));
        println!(
            "perf: perf probe {x}-a '{}'; perf record -N {}-e {perf_event} -o FILE -- WORKLOAD",
            case.perf.1,
            with_space(case.perf_opts())
        );
    }
    if tools.bpftrace.is_some() && !case.bpftrace.is_empty() {
        println!(
            "bpftrace: bpftrace -o FILE -e '{}' -c WORKLOAD",
            case.bpftrace
        );
    }
    if let Some(chain) = case.stack {
        println!("{}", chain.describe());
    }
    println!();
    println!("| threads | rate/thread | tool | us/call | added us/call | added CPU us/call | events | lost per round | consumer CPU us/event: calls / to exit | consumer voluntary switches per 1000 events |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
}

/// Every tool's runs at one thread count and rate, the tools in turn
/// each round; a failed run is reported and left out, not fatal.
fn measure_series(
    runner: &Runner,
    case: &ProbeCase,
    list: &[Tool],
    perf_event: &str,
    threads: usize,
    rate: Rate,
) -> BTreeMap<usize, Series> {
    let mut series: BTreeMap<usize, Series> = BTreeMap::new();
    for _ in 0..runner.opts.rounds {
        for (i, tool) in list.iter().enumerate() {
            match runner.run(tool, case, perf_event, threads, rate) {
                Ok(r) => series.entry(i).or_default().runs.push(r),
                Err(e) => println!("(a run failed: {e:#})"),
            }
        }
    }
    series
}

/// One table row per tool, against the bare workload (tool 0).
fn print_rows(list: &[Tool], series: &BTreeMap<usize, Series>, threads: usize, rate: Rate) {
    let bare = series
        .get(&0)
        .and_then(|s| s.best())
        .map_or(0.0, |b| b.us_per_call);
    let bare_cpu = series
        .get(&0)
        .and_then(|s| s.min(|r| Some(r.cpu_us_per_call)))
        .unwrap_or(0.0);
    for (i, tool) in list.iter().enumerate() {
        let Some(s) = series.get(&i) else { continue };
        let Some(best) = s.best() else { continue };
        let cpu_call = s.min(|r| Some(r.cpu_us_per_call)).unwrap_or(0.0);
        let mut row = format!(
            "| {threads} | {} | {} | {:.2} |",
            rate.label(),
            tool.label(),
            best.us_per_call
        );
        if *tool == Tool::Bare {
            let _ = write!(row, " | {cpu_call:.2} (CPU us/call) | | | | |");
        } else {
            let per_event =
                |r: &RunResult, v: f64| r.events.filter(|&e| e > 0).map(|e| v / e as f64);
            let f = |v: Option<f64>, scale: f64, digits: usize| {
                v.map_or("?".into(), |c| format!("{:.*}", digits, c * scale))
            };
            let calls = f(s.min(|r| per_event(r, r.consumer_cpu_calls)), 1e6, 2);
            let to_exit = f(s.min(|r| per_event(r, r.consumer_cpu_after_start)), 1e6, 2);
            let vol = f(s.min(|r| per_event(r, r.consumer_voluntary as f64)), 1e3, 1);
            let _ = write!(
                row,
                " {:+.2} | {:+.2} | {} | {} | {calls} / {to_exit} | {vol} |",
                best.us_per_call - bare,
                cpu_call - bare_cpu,
                best.events.map_or("?".into(), |e| e.to_string()),
                fmt_list(s.runs.iter().map(|r| r.lost)),
            );
        }
        println!("{row}");
    }
}

/// The consumers' own counters (perf stat with --no-inherit: the tool's
/// process only, not the workload it forks) and where their CPU time
/// goes (perf record -g of the tool's process), on one thread at full
/// rate.
fn profile(runner: &Runner) -> Result<()> {
    let Some(perf) = runner.tools.perf.clone() else {
        println!("profile: skipped (no perf)");
        return Ok(());
    };
    for case in cases(&runner.xtask)
        .iter()
        .filter(|c| runner.opts.selects(c))
    {
        let perf_event = perf_define(&perf, case)?;
        println!();
        println!(
            "## profile: {} {} probe, 1 thread, max rate",
            case.workload.name(),
            case.kind
        );
        let consumers = profiled_consumers(runner, case, &perf_event)?;
        for (tool, argv) in &consumers {
            stat_consumer(runner, &perf, tool, argv)?;
        }
        call_graph_of(runner, &perf, &consumers[0].1)?;
        perf_undefine(&perf);
    }
    Ok(())
}

/// The tools profiled on `case`, each with its command line (the text
/// recorder first).
fn profiled_consumers(
    runner: &Runner,
    case: &ProbeCase,
    perf_event: &str,
) -> Result<Vec<(Tool, Vec<std::ffi::OsString>)>> {
    let w = runner.workload_args(case.workload, 1, Rate::Max);
    let data = runner.dir.join("prof-out.data");
    let bpf_out = runner.dir.join("prof-bpftrace.out");
    let mut consumers = vec![
        Tool::Kp("text", vec![]),
        Tool::Kp("-q -o FILE", vec!["-q", "-o", "FILE"]),
        Tool::Perf("", vec![]),
    ];
    if case.kind == "return" && case.workload == CallKind::Open {
        consumers.insert(1, Tool::Kp("--backend pmu text", vec!["--backend", "pmu"]));
    }
    consumers
        .into_iter()
        .map(|t| {
            let argv = runner.tool_argv(&t, case, perf_event, &w, &data, &bpf_out)?;
            Ok((t, argv))
        })
        .collect()
}

/// One consumer under `perf stat --no-inherit`: its task clock, switches,
/// faults and system calls, per event.
fn stat_consumer(
    runner: &Runner,
    perf: &Path,
    tool: &Tool,
    argv: &[std::ffi::OsString],
) -> Result<()> {
    let data = runner.dir.join("prof-out.data");
    let _ = std::fs::remove_file(&data);
    let _ = std::fs::remove_file(runner.dir.join("prof-out.data.old"));
    let stat = runner.dir.join("stat.csv");
    let out = Command::new(perf)
        .args([
            "stat",
            "--no-inherit",
            "-x",
            ",",
            "-e",
            "task-clock,context-switches,page-faults,raw_syscalls:sys_enter",
            "-o",
        ])
        .arg(&stat)
        .arg("--")
        .args(argv)
        .current_dir(&runner.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("running perf stat")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let events = match tool {
        Tool::Perf(..) => perf_samples(&stderr),
        _ => kp_summary(&stderr).map(|(e, _)| e),
    };
    let csv = std::fs::read_to_string(&stat).unwrap_or_default();
    let mut parts = Vec::new();
    for l in csv.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let f: Vec<&str> = l.split(',').collect();
        let (Some(v), Some(name)) = (f.first(), f.get(2)) else {
            continue;
        };
        let Ok(v) = v.parse::<f64>() else { continue };
        // task-clock is in ms: per event in us; counts per 1000 events.
        let clock = *name == "task-clock";
        let per = events.filter(|&e| e > 0).map_or(String::new(), |e| {
            if clock {
                format!(" ({:.2} us/event)", v * 1e3 / e as f64)
            } else {
                format!(" ({:.1} per 1000 events)", v * 1e3 / e as f64)
            }
        });
        let unit = if clock { " ms" } else { "" };
        parts.push(format!("{name} {v:.0}{unit}{per}"));
    }
    println!(
        "{}: {} events; consumer only: {}",
        tool.label(),
        events.map_or("?".into(), |e| e.to_string()),
        parts.join(", ")
    );
    Ok(())
}

/// Where kprobe-perf's time goes: a call graph of its process
/// (`perf record -g -e cpu-clock --no-inherit`), symbols above 2%.
fn call_graph_of(runner: &Runner, perf: &Path, argv: &[std::ffi::OsString]) -> Result<()> {
    let prof = runner.dir.join("prof.data");
    let st = Command::new(perf)
        .args([
            "record",
            "-q",
            "--no-inherit",
            "-g",
            "-e",
            "cpu-clock",
            "-F",
            "2000",
            "-o",
        ])
        .arg(&prof)
        .arg("--")
        .args(argv)
        .current_dir(&runner.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running perf record -g")?;
    if !st.success() {
        println!("perf record -g of kprobe-perf failed ({st})");
        return Ok(());
    }
    let rep = Command::new(perf)
        .args([
            "report",
            "--stdio",
            "--no-children",
            "-g",
            "none",
            "--percent-limit",
            "2",
            "--sort",
            "dso,sym",
            "-i",
        ])
        .arg(&prof)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .context("running perf report")?;
    println!("kprobe-perf text, its own process (perf record -g -e cpu-clock --no-inherit), symbols above 2%:");
    for l in String::from_utf8_lossy(&rep.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        println!("    {l}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kprobe_perf_summaries() {
        assert_eq!(
            kp_summary("x\nkprobe-perf: 100012 events (p_do_sys_openat2_0: 100012), 0 lost\n"),
            Some((100012, 0))
        );
        assert_eq!(
            kp_summary(
                "kprobe-perf: 98446 events (r_do_sys_openat2_0: 98446, 1566 lost), 1566 lost\n"
            ),
            Some((98446, 1566))
        );
        assert_eq!(kp_summary("kprobe-perf: cannot open\n"), None);
    }

    #[test]
    fn reads_perf_record_sample_counts() {
        let s = "[ perf record: Woken up 3 times to write data ]\n[ perf record: Captured and wrote 6.123 MB /tmp/x/out.data (90809 samples) ]\n";
        assert_eq!(perf_samples(s), Some(90809));
        assert_eq!(perf_samples("nothing"), None);
    }

    #[test]
    fn reads_perf_losses_from_its_dump() {
        let dump = "0 0 0x748490 [0x28]: PERF_RECORD_LOST_SAMPLES: id:18446744073709551615: lost samples :4956\n\
            0 11207990009197 0x1218 [0x30]: PERF_RECORD_LOST: id:1053: lost:175\n\
            0 11208030038729 0x8b28 [0x30]: PERF_RECORD_LOST: id:1053: lost:68\n";
        assert_eq!(perf_lost_from_dump(dump), 4956);
        let records_only = "0 1 0x1218 [0x30]: PERF_RECORD_LOST: id:1053: lost:175\n\
            0 2 0x8b28 [0x30]: PERF_RECORD_LOST: id:1053: lost:68\n";
        assert_eq!(perf_lost_from_dump(records_only), 243);
        assert_eq!(perf_lost_from_dump("PERF_RECORD_SAMPLE\n"), 0);
    }

    #[test]
    fn parses_rates_and_reports() {
        assert_eq!(
            parse_rates("20000,max").unwrap(),
            vec![Rate::PerSecond(20000), Rate::Max]
        );
        assert!(parse_rates("0").is_err());
        assert!(parse_rates("fast").is_err());
        let line = "calls=100 busy_ns=5000 wall_ns=6000 cpu_ns=7000 voluntary=3";
        assert_eq!(report_field(line, "busy_ns"), Some(5000));
        assert_eq!(report_field(line, "voluntary"), Some(3));
        assert_eq!(report_field(line, "calls"), Some(100));
        assert_eq!(report_field(line, "missing"), None);
    }

    #[test]
    fn counts_bpftrace_lines_and_losses() {
        let dir = std::env::temp_dir().join(format!("kpf-live-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("out");
        std::fs::write(&f, "Attaching 1 probe...\n1\n\nLost 25 events\n3\n").unwrap();
        assert_eq!(bpftrace_output(&f, None), (3, 25));
        // A stack program's output: the mark, the frames, an empty line.
        std::fs::write(
            &f,
            "Attaching 1 probe...\nstack\n        do_sys_openat2+5\n        __x64_sys_openat+85\n\n\
             Lost 4 events\nstack\n        do_sys_openat2+5\n\nstack\n\n",
        )
        .unwrap();
        assert_eq!(bpftrace_output(&f, Some(BPFTRACE_STACK_MARK)), (3, 4));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_workload_counts_its_calls() {
        let dir = std::env::temp_dir().join(format!("kpf-live-wl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let report = dir.join("report");
        workload(CallKind::Call, &dir, 1001, 2, Rate::Max, &report).unwrap();
        let line = std::fs::read_to_string(&report).unwrap();
        assert_eq!(report_field(&line, "calls"), Some(1001));
        workload(
            CallKind::Open,
            &dir.join("missing"),
            50,
            1,
            Rate::PerSecond(10_000),
            &report,
        )
        .unwrap();
        let line = std::fs::read_to_string(&report).unwrap();
        assert_eq!(report_field(&line, "calls"), Some(50));
        // Paced at 10,000/s, 50 calls take at least 4.9 ms of wall time.
        assert!(
            report_field(&line, "wall_ns").unwrap() >= 4_900_000,
            "{line}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
