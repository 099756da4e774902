//! `kprobe-perf`: dynamic probes (kprobes, uprobes, USDT) through
//! perf_event_open.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

/// `eprintln!` that never panics: stderr may be a pipe whose reader has
/// gone (`record ... 2>&1 | head`), and a message that cannot be written
/// must not stop the program before its files are finished.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that never panics (see [`say!`]).
macro_rules! say_more {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

mod aggregate;
mod binaries;
mod boot;
mod calls;
mod calls_file;
mod calls_json;
mod calls_render;
mod calls_timeline;
mod doctor;
mod drain_log;
mod eprobe;
mod examples;
mod fields;
mod filters;
mod generate;
mod hints;
mod image_args;
mod inspect;
mod json;
mod latency;
mod libraries;
mod output;
mod perf_names;
mod probe;
mod profile;
mod rotate;
mod run_loop;
mod script;
mod source;
mod stacks;
mod stat;
#[cfg(test)]
mod test_support;
mod text;
mod validate;

use std::io::{self, IsTerminal, Write};
use std::ops::ControlFlow;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use kprobe_perf_engine::cli::records::RingRecord;
use kprobe_perf_engine::{
    cli::tracefs, BackendChoice, CommandScope, Event, EventSink, KernelSymbols, RecordTarget,
    Session, SessionOptions,
};

#[derive(Parser)]
#[command(
    name = "kprobe-perf",
    version = env!("KPROBE_PERF_VERSION"),
    about = "Dynamic probes of the kernel and of programs (kprobes, uprobes, USDT) through perf_event_open",
    after_help = examples::TOP
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Attach probes and print one line per hit, in ftrace's layout:
    /// `comm-tid [cpu] seconds.micros: event: (sym+off/size) name=value ...`.
    ///
    /// With `-- CMD`, records CMD and its children and stops when CMD exits,
    /// then exits with CMD's status (128+N for signal N; 1 for an error of
    /// the recording). CMD starts with default signal actions and no
    /// blocked signals. Without it (or with -a) records every CPU until
    /// Ctrl-C or --duration. SIGTERM, SIGINT and SIGHUP each end it as
    /// Ctrl-C does (an -o file finished, the summary printed, exit 0), as a
    /// service manager stops it (docs/record.md has a systemd unit). A
    /// summary with per-probe counts and lost events goes to stderr.
    #[command(after_help = examples::RECORD)]
    Record(Box<RecordArgs>),
    /// Measure how long each call of a function takes: an entry and a
    /// return probe of FUNC (a kernel function or `BINARY:func`), paired
    /// per thread (recursion and nesting give each call its own duration),
    /// printed as a log2 histogram with count, average, p50, p90, p99,
    /// p99.9 and max. Returns whose entry was not seen, entries given up
    /// and calls still running at the end are counted on stderr.
    Latency(latency::LatencyArgs),
    /// Rebuild the call trees of a set of functions: entry and return
    /// probes on the roots (-e GLOB) and the functions traced inside them
    /// (--allow GLOB, less --deny GLOB), paired per thread into the tree
    /// of each root call. By default, the root calls that returned an
    /// error, each with its path down to the function where the error
    /// first arose (-ENOENT, NULL, ERR_PTR); --graph prints every tree,
    /// indented, with durations, return values and self times; --json one
    /// object per tree. A tree missing events (lost, a missed return, a
    /// call begun before the start) is printed as incomplete, with what
    /// it lacks.
    #[command(after_help = examples::CALLS)]
    Calls(Box<calls::CallsArgs>),
    /// Count each probe's hits with counting-only perf events (no ring
    /// buffer, no sample: the kernel adds one per hit, read at the end or
    /// every -I MS) and print a table of counts in the order given (or
    /// JSON). With `-- CMD`, counts CMD and its children and stops when CMD
    /// exits, then exits with CMD's status; without it (or with -a) counts
    /// every CPU until Ctrl-C or --duration.
    Stat(stat::StatArgs),
    /// Remove the tracefs events (kprobes, uprobes, eprobes) and the tracing
    /// instances left by kprobe-perf
    /// processes. They are normally removed at exit; when a recording is
    /// killed, its guardian process removes them at once, and any later
    /// start removes those of processes that are gone.
    #[command(after_help = examples::CLEANUP)]
    Cleanup,
    /// Print the events of a perf.data file written by `record -o`, exactly
    /// as the recording printed them (text, or JSON Lines with --json).
    /// The closing summary of the recording goes to stderr.
    Script(script::ScriptArgs),
    /// Check probe definitions, show where a probe may go in a function,
    /// or resolve source lines and variables from DWARF (--definition,
    /// --vars, --source), without opening a probe.
    Probe(probe::ProbeArgs),
    /// Print the kernel command-line parameters that define kprobes and
    /// kretprobes at boot (kprobe_event=, and a tracing buffer to keep
    /// their events: ftrace=nop trace_buf_size=), after checking them as
    /// probe --parse does and as the command line can carry them; after
    /// that boot, --collect reads and prints what they recorded, as
    /// record prints events (text, --json, or -o FILE, a perf.data file).
    Boot(boot::BootArgs),
    /// List the functions that globs select for probing (`tcp_v4_*`,
    /// `ext4:*`, `*:*_open`, `vmlinux:do_sys_open*`), leaving out what the
    /// kernel would refuse (blacklist, entry/noinstr/kprobes text, padding,
    /// notrace) and, by default, families fragile under bulk probing.
    /// Names shared by several functions are shown as NAME@0xADDR.
    /// `usdt:BINARY[:PROVIDER:NAME]` (or a binary's path) lists its SDT
    /// probes instead; with `-p PID`, those of every file the process
    /// maps, PATTERN then being `PROVIDER:NAME` globs.
    #[command(after_help = examples::LIST)]
    List {
        /// Shell-style globs; `MOD:GLOB` limits to modules matching MOD.
        #[arg(value_name = "PATTERN", required_unless_present = "pid")]
        patterns: Vec<String>,
        /// List the SDT probes of every file this process maps.
        #[arg(short = 'p', long = "pid", value_name = "PID")]
        pid: Option<u32>,
        /// Show every candidate, `kept` or `excluded` with the reason.
        #[arg(long)]
        why: bool,
        /// Keep the fragile families (tracing, locking, RCU, scheduler ...).
        #[arg(long)]
        include_fragile: bool,
        #[command(flatten)]
        image: image_args::ImageArgs,
    },
    /// Check that this kernel and this process can probe: kprobe and
    /// uprobe PMUs, fprobe events, tracefs, BTF, kptr_restrict,
    /// perf_event_paranoid, lockdown, capabilities, each `ok` or `missing`
    /// with its fix. Then show what kprobe-perf knows of the running
    /// kernel: its symbols, the vmlinux and System.map matched to it (build
    /// ID, KASLR slide), where kernel text comes from, BTF and the kprobe
    /// blacklist.
    #[command(after_help = examples::INFO)]
    Info {
        #[command(flatten)]
        image: image_args::ImageArgs,
    },
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("files").args(["output", "stacks_folded", "flamegraph", "profile"]).multiple(true)))]
struct RecordArgs {
    /// A probe definition (repeatable): a uprobe `p:BINARY:FUNC [ARGS]`
    /// (`r:` at its return; BINARY a path, `./prog` from here as perf's
    /// -x takes it, or a name on PATH; bpftrace's `uprobe:`/`uretprobe:`
    /// heads too), a USDT probe `usdt:BINARY:PROVIDER:NAME` (`usdt:*:...`
    /// with -p or `-- CMD`), or a kprobe `p:FUNC[+OFFS] [ARGS]`, in the
    /// kprobe_events language (docs/probes.md).
    #[arg(short = 'e', long = "event", value_name = "SPEC", required = true)]
    events: Vec<String>,
    /// Keep only the events of the probe given (-e) before it that pass
    /// EXPR, in the kernel's ftrace filter grammar: `==`, `!=`, `<`, `<=`,
    /// `>`, `>=`, `&` on numbers, `==`, `!=`, `~` (glob) on quoted
    /// strings, `&&`, `||`, `!` and parentheses, over the probe's named
    /// arguments and `comm`, `pid`, `tid`, `cpu` (e.g. `--filter 'count >
    /// 4096 && comm ~ "post*"'`). At most one per probe. It runs in the
    /// kernel (PERF_EVENT_IOC_SET_FILTER) when the event's record has the
    /// fields: tracefs-defined probes, which `--backend auto` then picks,
    /// or `comm`, `tid`, `cpu` alone on any probe; otherwise (`pid`,
    /// arguments of a PMU probe) in user space, before any output. A bad
    /// filter is refused before anything is attached; the summary says
    /// where each filter ran and what the user-space ones dropped.
    #[arg(long = "filter", value_name = "EXPR", allow_hyphen_values = true)]
    filters: Vec<String>,
    /// Record every task on every CPU, even when a command is given.
    #[arg(short = 'a', long)]
    all_cpus: bool,
    /// Leave out kprobe-perf's own hits (its reads of /proc, its waits,
    /// its allocations), as perf record's --exclude-perf does: each
    /// probe's filter in the kernel also drops the threads kprobe-perf
    /// has when the probes open, so they are neither recorded nor lost.
    #[arg(long)]
    exclude_perf: bool,
    /// Ring buffer size per CPU, in pages: a power of two from 1 to 1 GiB
    /// of pages (262144 with 4 KiB pages), or as perf takes it, a size
    /// with a unit, B, K, M or G (`512K`, `1M`), of a power of two of pages. Default: 128 (512 KiB with 4
    /// KiB pages, as perf's); with `--call-graph dwarf` and CAP_IPC_LOCK (root has it), 512 (2
    /// MiB): each sample then carries up to 8 KiB of stack, so 512 KiB
    /// hold about 60 samples, under a millisecond of a busy function,
    /// less than the reader's wakeup may take.
    #[arg(short = 'm', long, value_name = "PAGES", value_parser = validate::mmap_pages, allow_negative_numbers = true)]
    mmap_pages: Option<usize>,
    /// Record only on these CPUs (a list such as 0-3,6, of online CPUs;
    /// a CPU listed twice counts once).
    #[arg(short = 'C', long = "cpu", value_name = "LIST", conflicts_with_all = ["pid", "tid"], value_parser = validate::cpu_list, allow_negative_numbers = true)]
    cpus: Option<validate::CpuList>,
    /// Record these processes (comma-separated pids of running processes,
    /// repeats merged): every thread of each, and the threads and child
    /// processes they start later; the recording ends when all of them
    /// have exited.
    #[arg(short = 'p', long, value_name = "PIDS", value_delimiter = ',', conflicts_with_all = ["tid", "command"], value_parser = validate::pid, allow_negative_numbers = true)]
    pid: Vec<i32>,
    /// Record these threads only (comma-separated tids of running threads,
    /// repeats merged).
    #[arg(
        short = 't',
        long,
        value_name = "TIDS",
        value_delimiter = ',',
        conflicts_with = "command",
        value_parser = validate::tid,
        allow_negative_numbers = true
    )]
    tid: Vec<i32>,
    /// Record only tasks in this cgroup (v2), on every CPU: a path, or a
    /// name relative to /sys/fs/cgroup (e.g. system.slice/ssh.service).
    #[arg(
        short = 'G',
        long,
        value_name = "CGROUP",
        conflicts_with_all = ["pid", "tid", "cpus"],
        value_parser = validate::cgroup
    )]
    cgroup: Option<std::path::PathBuf>,
    /// Stop after this many seconds (more than 0, at most 31536000: 365
    /// days; fractions allowed).
    #[arg(short = 'd', long, value_name = "SECS", value_parser = validate::duration, allow_negative_numbers = true)]
    duration: Option<f64>,
    /// How probes reach the kernel: `pmu` (perf_event_open on the kprobe
    /// PMU), `tracefs` (a dynamic_events definition opened as a tracepoint;
    /// the kernel fetches memory arguments and honours maxactive), or
    /// `auto` (the PMU unless the probe needs tracefs; all kernel probes go
    /// through tracefs when there are 64 or more, which shares one kernel
    /// kprobe between CPUs and detaches much faster; on a kernel with
    /// fprobe events, a glob becomes one fprobe event, or the fewest
    /// narrower ones that leave out what it must not arm, instead of one
    /// kprobe per function; kernel probes of a recorded command or of
    /// processes go through tracefs where it can be written, since every
    /// inherited PMU event is a kprobe of its own). Uprobes of a recorded
    /// command (`-- CMD`) or of processes (`-p`), and with `tracefs` every
    /// uprobe, are defined in uprobe_events, so that they follow forks and
    /// new threads.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// Probe every function of a name several functions share (each by
    /// its address, as NAME@0xADDR), instead of refusing the name.
    #[arg(long)]
    all_instances: bool,
    /// For a source point (`-e 'p:FUNC@+N var'`): probe the function's
    /// out-of-line body only, not each copy inlined into other functions
    /// (perf probe's --no-inlines).
    #[arg(long)]
    no_inlines: bool,
    /// Print JSON Lines instead of text: one object per event (typed
    /// fields), then one summary object with counts, losses and misses.
    #[arg(long)]
    json: bool,
    /// Also write the records to FILE in perf.data format (as `perf record`
    /// writes it): Debian's `perf script -i FILE` reads it, and
    /// `kprobe-perf script -i FILE` prints it as this run printed it.
    /// An existing FILE is first renamed to FILE.old (replacing an older
    /// FILE.old); a symbolic link is renamed itself, never followed. FILE
    /// is then created new (O_EXCL|O_NOFOLLOW: if anything appears at FILE
    /// meanwhile, the run stops), mode 0600. stderr says what was done
    /// with an existing FILE. A directory, device, FIFO or socket at FILE
    /// is refused.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// With -o (and --stacks-folded, --flamegraph): remove an existing
    /// FILE instead of renaming it to FILE.old (a symbolic link is removed,
    /// its target untouched), then create FILE new as without --force.
    #[arg(long, requires = "files")]
    force: bool,
    /// With -o: write the records zstd-compressed, as `perf record -z`
    /// does (PERF_RECORD_COMPRESSED records, which `perf script` and
    /// `kprobe-perf script -i` read), at level N from 1 (the default, the
    /// fastest, as perf's) to 22 (the smallest); `-z` alone, `-z5` or
    /// `--compression-level 5`. Samples are counted as each drain reads
    /// them, not from the file at the end. E.g. `kprobe-perf record -q -z
    /// -o run.data -e 'p:/bin/bash:readline'`.
    #[arg(
        short = 'z',
        long = "compression-level",
        value_name = "N",
        num_args = 0..=1,
        default_missing_value = "1",
        requires = "output",
        value_parser = validate::compression_level
    )]
    compression_level: Option<u32>,
    /// Debugging: write a line per drain of the rings to FILE (when the
    /// wait began and ended, the bytes pending per ring, the bytes read,
    /// the drain's time and the file's share of it, the losses so far).
    #[arg(long, value_name = "FILE", hide = true)]
    drain_log: Option<std::path::PathBuf>,
    /// Print no events (only the summary); useful with -o, where the
    /// rings' bytes then go to the file as they are and the samples are
    /// counted once, at the end, as perf record writes them.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Flight-recorder mode: keep only the newest events in each CPU's ring
    /// (written backward, mapped read-only; the kernel overwrites the
    /// oldest) and print nothing while recording. On SIGUSR2 and at exit
    /// the rings are paused and their events printed in time order; the
    /// summary says how many the window held and how many older ones were
    /// overwritten, and counts those as "not kept" rather than "lost"
    /// (`not_kept` in the --json summary).
    /// The window per CPU is -m pages or --overwrite-size.
    #[arg(long, conflicts_with = "output")]
    overwrite: bool,
    /// With --overwrite: the window per CPU ring, in MiB from 1 to 1024
    /// (rounded down to a power of two pages); replaces -m.
    #[arg(long, value_name = "MIB", requires = "overwrite", value_parser = validate::overwrite_mib)]
    overwrite_size: Option<usize>,
    #[command(flatten)]
    rotation: rotate::RotationArgs,
    #[command(flatten)]
    image: image_args::ImageArgs,
    #[command(flatten)]
    aggregate: aggregate::AggregateArgs,
    #[command(flatten)]
    stacks: stacks::CallGraphArgs,
    #[command(flatten)]
    verbose: binaries::VerboseArg,
    /// The command to run and record.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BackendArg {
    Auto,
    Pmu,
    Tracefs,
}

fn main() -> ExitCode {
    if let Some(code) = generate::intercept::<Cli>() {
        return code;
    }
    let matches = match <Cli as clap::CommandFactory>::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return validate::usage_error(e),
    };
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return validate::usage_error(e),
    };
    // Before any thread: the guardian removes the tracefs definitions of
    // a recording that dies without removing them (SIGKILL). Without it
    // (it could not start), the next start or `cleanup` removes them.
    if matches!(
        cli.command,
        Cmd::Record(_) | Cmd::Latency(_) | Cmd::Calls(_) | Cmd::Stat(_)
    ) {
        let _ = kprobe_perf_engine::Guardian::start();
    }
    let result = match cli.command {
        Cmd::Record(mut args) => {
            validate::merge_duplicates(&mut args.pid);
            validate::merge_duplicates(&mut args.tid);
            binaries::all(
                &mut args.events,
                &args.command,
                &args.pid,
                args.verbose.verbose,
            )
            .and_then(|()| filters::pair(matches.subcommand_matches("record"), &args.events))
            .and_then(|filters| record(&args, &filters))
        }
        Cmd::Latency(mut args) => {
            latency::resolve_binaries(&mut args).and_then(|()| latency::run(&args))
        }
        Cmd::Calls(args) => calls::run(&args),
        Cmd::Stat(mut args) => {
            let resolved = binaries::all(
                &mut args.events,
                &args.command,
                &args.pid,
                args.verbose.verbose,
            );
            match resolved
                .and_then(|()| filters::pair(matches.subcommand_matches("stat"), &args.events))
            {
                Ok(filters) => stat::run(&mut args, &filters),
                Err(e) => Err(e),
            }
        }
        Cmd::Cleanup => cleanup(),
        Cmd::Script(args) => script::run(&args),
        Cmd::Probe(args) => probe::run(&args),
        Cmd::Boot(args) => boot::run(&args),
        Cmd::List {
            patterns,
            pid: Some(pid),
            ..
        } => inspect::list_sdt_of_process(pid, &patterns),
        Cmd::List {
            patterns,
            why,
            include_fragile,
            image,
            pid: None,
        } => inspect::list(&patterns, why, include_fragile, &image),
        Cmd::Info { image } => inspect::info(&image),
    };
    say_if_tracefs_was_mounted();
    match result {
        Ok(code) => code,
        // stdout's reader has gone (`probe --vars X | head -2`): the end,
        // as for perf, grep or ls, not an error.
        Err(e) if stdout_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            say!("kprobe-perf: {}", hints::render(&e));
            ExitCode::FAILURE
        }
    }
}

/// One line when this run mounted tracefs, as perf mounts it.
fn say_if_tracefs_was_mounted() {
    if let Some(at) = tracefs::mounted_here() {
        say!(
            "kprobe-perf: tracefs was not mounted; mounted it at {} for the probes that need it, and left it mounted, as perf does",
            at.display()
        );
    }
}

fn cleanup() -> Result<ExitCode> {
    let fs = tracefs::Tracefs::find()?;
    let (removed, busy) = tracefs::remove_all(&fs);
    println!("kprobe-perf: removed {removed} tracefs events");
    if !busy.is_empty() {
        say!(
            "kprobe-perf: {} events are in use by running kprobe-perf processes and were kept: {}",
            busy.len(),
            busy.join(", ")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn record(args: &RecordArgs, filters: &[Option<String>]) -> Result<ExitCode> {
    if let Some(probes) = eprobe::event_probes(args, filters)? {
        return eprobe::record(args, &probes);
    }
    args.stacks.out.check()?;
    // kallsyms may be unreadable or hide addresses; probes then go by name
    // and output shows raw addresses.
    let kernel = inspect::record_kernel(&args.image);
    let choice = match args.backend {
        BackendArg::Auto => BackendChoice::Auto,
        BackendArg::Pmu => BackendChoice::Pmu,
        BackendArg::Tracefs => BackendChoice::Tracefs,
    };
    let plans = filters::plan(
        &kernel,
        &args.events,
        filters,
        args.all_instances,
        choice,
        !args.no_inlines,
        &args.pid,
    )?;
    inspect::check_plans(&kernel, &plans)?;
    let call_graph = args.stacks.graph_for(&plans);
    let agg = aggregate::Aggregation::new(&args.aggregate, &plans, args.json)?;
    let kernel_dwarf = stacks::kernel_dwarf(&kernel, &args.image, call_graph.is_some());
    // The symbolizer's table; the kernel's text and images are let go.
    let symbols = kernel.into_symbols();
    if let Some(p) = args.output.as_deref() {
        output::check(p)?;
    }
    let mut run = run_loop::RunLoop::new(args.duration, None)?;
    let mmap_pages = match (args.overwrite_size, args.mmap_pages) {
        (Some(mib), _) => overwrite_pages(mib)?,
        (None, Some(pages)) => pages,
        (None, None) => default_mmap_pages(call_graph),
    };
    let dump_now = Arc::new(AtomicBool::new(false));
    if args.overwrite {
        signal_hook::flag::register(signal_hook::consts::SIGUSR2, Arc::clone(&dump_now))
            .context("installing a signal handler")?;
    }
    let mut session = Session::open(
        plans,
        SessionOptions::default()
            .with_target(record_target(args))
            .with_mmap_pages(mmap_pages)
            .with_overwrite(args.overwrite)
            .with_exclude_self(args.exclude_perf)
            .with_call_graph(call_graph),
    )?;
    // The file is made (an existing one moved aside, or removed with
    // --force) only once the probes are open and the command is ready, so
    // a run refused before that leaves an existing FILE as it was.
    let file = match args.output.as_deref() {
        Some(p) => {
            let f = output::create(p, args.force)?;
            Some(output::FileOutput::start(
                f,
                &mut session,
                &symbols,
                args.compression_level,
            )?)
        }
        None => None,
    };
    // Everything the loop needs is made before the probes are enabled
    // and the command released: its first records wait in the rings
    // until the first drain, which a late start lets overflow.
    let rotation = rotate::Rotation::new(
        args.output.as_deref(),
        &args.rotation,
        &symbols,
        args.compression_level,
    )?;
    let mut printer = Printer::new(args, &session, &symbols, agg, file.is_some());
    if let (Some(s), Some((path, slide))) = (printer.stacks.as_mut(), kernel_dwarf) {
        s.name_kernel_frames_from(path, slide);
    }
    let stdout = io::stdout();
    let mut live = LiveOutput {
        printer,
        // Lines are flushed after each drain anyway; a large buffer
        // makes one write(2) of many lines (a JSON line is ~200 bytes:
        // 8 KiB took a system call per 40 events).
        out: io::BufWriter::with_capacity(LIVE_OUT_BUFFER, stdout.lock()),
        file,
        rotation,
        reader_gone: false,
    };
    session.enable()?;
    run.armed();
    inspect::report_armed(session.plans());
    record_until_the_end(args, &mut run, &mut session, &mut live, &dump_now)?;
    finish_record(args, &mut session, live, &symbols)?;
    // The recording stopped first (Ctrl-C, -d, stdout closed): the
    // command may have ended meanwhile (Ctrl-C reaches it too).
    run.exit(&mut session)
}

/// Drains the rings into `live` until the run is over (or stdout's
/// reader has gone), then disables the probes and drains what is left.
fn record_until_the_end<W: Write>(
    args: &RecordArgs,
    run: &mut run_loop::RunLoop,
    session: &mut Session,
    live: &mut LiveOutput<'_, W>,
    dump_now: &AtomicBool,
) -> Result<()> {
    // The live count: stderr a terminal, and events not printed to the
    // same screen (their lines would be torn by the rewritten one).
    let mut count = (io::stderr().is_terminal()
        && !args.overwrite
        && (args.quiet || !io::stdout().is_terminal()))
    .then(LiveCount::new);
    let mut log = args
        .drain_log
        .as_deref()
        .map(drain_log::DrainLog::create)
        .transpose()?;
    if let (Some(_), Some(f)) = (&log, live.file.as_mut()) {
        f.time_writes();
    }
    loop {
        if let Some(l) = count.as_mut() {
            l.tick(session);
        }
        if args.overwrite && dump_now.swap(false, Ordering::Relaxed) {
            session.dump_overwrite(&mut Dumped(live))?;
            if !live.flush()? {
                break;
            }
        }
        poll(
            log.as_mut(),
            run.timeout(Duration::from_millis(100)),
            session,
            live,
        )?;
        if !live.flush()? {
            break;
        }
        if let Some(a) = live.printer.agg.as_mut() {
            a.tick(&mut live.out).context("writing the maps")?;
        }
        if !rotate_if_due(session, live)? {
            break;
        }
        // -p: every process has exited (a pidfd's readiness ends the
        // wait above at once).
        if run.over(session)? {
            break;
        }
    }
    if let Some(l) = count.as_mut() {
        l.clear();
    }
    session.disable()?;
    if !live.reader_gone {
        poll(log.as_mut(), Duration::ZERO, session, live)?;
        live.flush()?;
    }
    if let Some(log) = log {
        log.finish()?;
    }
    if args.overwrite && !live.reader_gone {
        session.dump_overwrite(&mut Dumped(live))?;
        live.flush()?;
    }
    Ok(())
}

/// After a drain: switches `live`'s file when --switch-output says it is
/// due. False when the recording is to end (--max-size reached).
fn rotate_if_due<W: Write>(session: &mut Session, live: &mut LiveOutput<'_, W>) -> Result<bool> {
    let (Some(r), Some(_)) = (live.rotation.as_mut(), live.file.as_ref()) else {
        return Ok(true);
    };
    match r.due() {
        rotate::Due::Nothing => Ok(true),
        rotate::Due::Stop => {
            r.say_stopping();
            Ok(false)
        }
        rotate::Due::Switch => {
            let addresses = live
                .printer
                .addresses
                .as_ref()
                .map(output::Addresses::to_set)
                .unwrap_or_default()
                .into_iter()
                .chain(session.counted_addresses().iter().copied())
                .collect();
            if let Some(file) = live.file.take() {
                live.file = Some(r.switch(file, session, addresses)?);
            }
            Ok(true)
        }
    }
}

/// The rings' size when `-m` is not given: perf's 512 KiB, or 2 MiB for
/// `--call-graph dwarf` with CAP_IPC_LOCK (root has it; without it a
/// user may lock only `perf_event_mlock_kb`, 516 KiB, per CPU and
/// RLIMIT_MEMLOCK beyond). At full rate on this project's bench (`cargo
/// xtask bench live --native --probes dwarf`), a 512 KiB ring fills in
/// under a millisecond, and the reader's wakeup took up to 3 ms in
/// `--drain-log` timelines.
fn default_mmap_pages(call_graph: Option<kprobe_perf_engine::stack::CallGraph>) -> usize {
    use kprobe_perf_engine::cli::os;
    let may_lock =
        os::effective_capabilities().is_ok_and(|caps| caps & (1 << os::CAP_IPC_LOCK) != 0);
    match call_graph {
        Some(kprobe_perf_engine::stack::CallGraph::Dwarf { .. }) if may_lock => {
            (2 << 20) / os::page_size().max(1)
        }
        _ => kprobe_perf_engine::DEFAULT_MMAP_PAGES,
    }
}

/// [`Session::poll`] up to `timeout` into `live`; with `log`, timed and
/// written to the drain log.
fn poll<W: Write>(
    log: Option<&mut drain_log::DrainLog>,
    timeout: Duration,
    session: &mut Session,
    live: &mut LiveOutput<'_, W>,
) -> Result<()> {
    let Some(log) = log else {
        session.poll(Some(timeout), live)?;
        return Ok(());
    };
    let wait_from = Instant::now();
    let woke = session.wait(Some(timeout))?;
    let pending = session.ring_pending();
    let read_before = session.stats().ring_bytes;
    let start = Instant::now();
    session.drain(live)?;
    let pass = drain_log::Pass {
        wait_from,
        woke,
        pending,
        drain: (start, Instant::now()),
        read: session.stats().ring_bytes - read_before,
        writing: live
            .file
            .as_mut()
            .map(output::FileOutput::take_write_time)
            .unwrap_or_default(),
    };
    log.line(&pass, session)
}

/// The end of a recording: the maps, the JSON summary, the stack files,
/// the perf.data file, then the summary lines on stderr.
fn finish_record<W: Write>(
    args: &RecordArgs,
    session: &mut Session,
    mut live: LiveOutput<'_, W>,
    symbols: &KernelSymbols,
) -> Result<()> {
    if let (Some(a), false) = (live.printer.agg.as_mut(), live.reader_gone) {
        a.finish(&mut live.out).context("writing the maps")?;
    }
    if let Some(f) = live.file.as_mut() {
        // Counting reads the file back: say so when that takes a while
        // (a file of GiBs).
        let big = session.counts_pending() && session.stats().ring_bytes >= 1 << 30;
        if big && io::stderr().is_terminal() {
            say!(
                "kprobe-perf: counting the {:.1} GiB of samples recorded",
                session.stats().ring_bytes as f64 / f64::from(1u32 << 30)
            );
        }
        if let Err(e) = f.count_taken(session) {
            // The file is still finished: its records are all there.
            say!(
                "kprobe-perf: warning: {e:#}; the summary's counts miss the samples not read back"
            );
        }
    }
    let summary = session.summary();
    // Computed once: a file stores the very text printed.
    let json_summary = json::summary(&summary);
    if !live.reader_gone && args.json && !args.quiet {
        writeln!(live.out, "{json_summary}")
            .and_then(|()| live.out.flush())
            .context("writing the summary")?;
    }
    let lines = text::summary_lines(&summary, session.plans());
    // The files first: a summary that cannot be printed (stderr a pipe
    // whose reader has gone) must not leave them unfinished.
    if let Some(s) = live.printer.stacks.as_ref() {
        s.finish(
            &args.stacks.out,
            args.force,
            &stacks::title(session.plans()),
        )?;
    }
    if let Some(file) = live.file.take() {
        let addresses = live
            .printer
            .addresses
            .take()
            .map(output::Addresses::into_set)
            .unwrap_or_default()
            .into_iter()
            .chain(session.counted_addresses().iter().copied())
            .collect();
        match live.rotation.as_mut() {
            // The file holds the counts of its own span.
            Some(r) => r.finish(file, session, addresses)?,
            None => file.finish(session, symbols, addresses, &json_summary, &lines)?,
        }
    }
    for line in &lines {
        say!("{line}");
    }
    Ok(())
}

/// Whose hits `args` record (see [`target_of`]).
fn record_target(args: &RecordArgs) -> RecordTarget {
    target_of(&Targets {
        tid: &args.tid,
        pid: &args.pid,
        cgroup: args.cgroup.as_deref(),
        cpus: args.cpus.as_ref(),
        all_cpus: args.all_cpus,
        command: &args.command,
    })
}

/// The target flags `record` and `stat` share.
pub(crate) struct Targets<'a> {
    pub(crate) tid: &'a [i32],
    pub(crate) pid: &'a [i32],
    pub(crate) cgroup: Option<&'a std::path::Path>,
    pub(crate) cpus: Option<&'a validate::CpuList>,
    pub(crate) all_cpus: bool,
    pub(crate) command: &'a [String],
}

/// Whose hits to take: `-t`, `-p`, `-G`, `-C` or every CPU; with
/// `-- CMD`, the command (started, released and reaped by the session)
/// and its descendants, or with `-a`, `-C` or `-G` that scope while it runs.
pub(crate) fn target_of(t: &Targets<'_>) -> RecordTarget {
    let scope = if !t.tid.is_empty() {
        return RecordTarget::Threads(t.tid.to_vec());
    } else if !t.pid.is_empty() {
        return RecordTarget::Processes(t.pid.to_vec());
    } else if let Some(cg) = t.cgroup {
        CommandScope::Cgroup(validate::cgroup_path(cg))
    } else if let Some(list) = t.cpus {
        CommandScope::Cpus(list.0.clone())
    } else if t.all_cpus || t.command.is_empty() {
        CommandScope::AllCpus
    } else {
        CommandScope::Descendants
    };
    match (scope, t.command.is_empty()) {
        (scope, false) => RecordTarget::Command {
            argv: t.command.to_vec(),
            scope,
        },
        (CommandScope::Cgroup(path), true) => RecordTarget::Cgroup(path),
        (CommandScope::Cpus(list), true) => RecordTarget::Cpus(list),
        (_, true) => RecordTarget::AllCpus,
    }
}

/// The exit of a run over a command: its status if it already ended,
/// else what `wait` gives within half a second after Ctrl-C (the command
/// got the signal too) or at once; then `kprobe-perf` exits as the
/// command did (a signal as 128+N), saying so when it failed.
pub(crate) fn command_exit(
    status: Option<std::process::ExitStatus>,
    interrupted: bool,
    wait: impl FnOnce(Duration) -> Result<Option<std::process::ExitStatus>, kprobe_perf_engine::Error>,
) -> Result<ExitCode> {
    let status = match status {
        Some(s) => Some(s),
        None => wait(if interrupted {
            Duration::from_millis(500)
        } else {
            Duration::ZERO
        })?,
    };
    Ok(match status {
        Some(status) => {
            if !status.success() {
                say!("kprobe-perf: the command exited with {status}");
            }
            ExitCode::from(exit_code(status))
        }
        None => ExitCode::SUCCESS,
    })
}

/// The exit status a shell gives for `status`: the command's code, or
/// 128 + N when signal N killed it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(sig)) => (128 + (sig & 0x7f)) as u8,
        (None, None) => 1,
    }
}

/// The bytes of printed events held before a write(2).
const LIVE_OUT_BUFFER: usize = 256 << 10;

/// How events are written: ftrace-style text or JSON Lines.
struct Printer<'a> {
    plans: Vec<kprobe_perf_engine::ProbePlan>,
    symbols: &'a KernelSymbols,
    json: bool,
    /// Print no events (`--quiet`).
    quiet: bool,
    /// With -o: the kernel addresses the output symbolizes, whose symbols
    /// the file stores.
    addresses: Option<output::Addresses>,
    /// What the text formatter remembers between lines.
    cache: text::LineCache,
    /// The line being written.
    line: Vec<u8>,
    /// What --json remembers between objects.
    json_writer: json::EventWriter,
    /// The maps of --count-by, --hist, --lhist.
    agg: Option<aggregate::Aggregation>,
    /// With -g: the frames of each event, and the stacks counted.
    stacks: Option<stacks::Stacks>,
}

impl Printer<'_> {
    /// Writes one event's line (text or JSON) to `out`.
    fn write(&mut self, out: &mut impl Write, e: &Event) -> io::Result<()> {
        let Some(plan) = self.plans.get(e.probe) else {
            return Ok(());
        };
        self.line.clear();
        if self.json {
            self.json_writer
                .event(&mut self.line, e, plan, self.symbols);
            if let Some(s) = self.stacks.as_ref() {
                s.write_json(&mut self.line);
            }
        } else {
            text::write_line(&mut self.line, e, plan, self.symbols, &mut self.cache);
            if let Some(s) = self.stacks.as_mut() {
                s.write_text(&mut self.line);
            }
        }
        self.line.push(b'\n');
        out.write_all(&self.line)
    }

    /// With -g: names `e`'s frames and counts its stack; nothing when
    /// the frames are neither printed nor counted (`-q -o` writes the raw
    /// chains).
    fn see_stack(&mut self, e: &Event) {
        if let (Some(s), Some(plan)) = (self.stacks.as_mut(), self.plans.get(e.probe)) {
            if self.quiet && !s.counts() {
                return;
            }
            s.see(e, plan, self.symbols, None);
        }
    }
}

/// One stderr line, rewritten at most 4 times a second, with the events
/// and losses so far and their rates.
struct LiveCount {
    start: Instant,
    last: Instant,
    last_events: u64,
    last_lost: u64,
    shown: bool,
}

impl LiveCount {
    fn new() -> LiveCount {
        let now = Instant::now();
        LiveCount {
            start: now,
            last: now,
            last_events: 0,
            last_lost: 0,
            shown: false,
        }
    }

    fn tick(&mut self, session: &Session) {
        let now = Instant::now();
        let dt = now.duration_since(self.last).as_secs_f64();
        if dt < 0.25 {
            return;
        }
        let stats = session.stats();
        // Decoded, less what user-space filters dropped; while a file's
        // samples wait to be counted at the end, the hits the kernel
        // counted (lost ones included).
        let events: u64 = if session.counts_pending() {
            session.kernel_hits().map_or(0, |h| h.iter().sum())
        } else {
            stats
                .hits
                .iter()
                .sum::<u64>()
                .saturating_sub(stats.filtered.iter().sum::<u64>())
        };
        let lost = stats.lost;
        let rate = |now: u64, before: u64| (now.saturating_sub(before) as f64 / dt).round();
        say_more!(
            "\r\x1b[K{:.0}s: {events} events ({}/s), {lost} lost ({}/s)",
            now.duration_since(self.start).as_secs_f64(),
            rate(events, self.last_events),
            rate(lost, self.last_lost),
        );
        self.last = now;
        self.last_events = events;
        self.last_lost = lost;
        self.shown = true;
    }

    /// Erases the line before the summary.
    fn clear(&mut self) {
        if self.shown {
            say_more!("\r\x1b[K");
            self.shown = false;
        }
    }
}

/// Ring pages for a window of `mib` MiB: the largest power of two that fits.
fn overwrite_pages(mib: usize) -> Result<usize> {
    let page = kprobe_perf_engine::cli::os::page_size();
    let pages = mib
        .checked_mul(1 << 20)
        .map(|b| b / page)
        .filter(|&p| p > 0)
        .ok_or_else(|| anyhow::anyhow!("--overwrite-size {mib}: give 1 MiB or more"))?;
    Ok(1usize << pages.ilog2())
}

/// The record loop's sink: each event printed (text or JSON) to `out`,
/// and with -o every raw record written to the file.
struct LiveOutput<'a, W: Write> {
    printer: Printer<'a>,
    out: W,
    file: Option<output::FileOutput>,
    /// The switching of the file (--switch-output, --max-size).
    rotation: Option<rotate::Rotation<'a>>,
    /// stdout's reader has gone away (a closed pipe): nothing more is
    /// printed, and the recording ends quietly. The round goes on, so
    /// that the file has all of its records.
    reader_gone: bool,
}

impl<'a> Printer<'a> {
    /// The printer of `record`'s events for `session`; `file` when `-o`
    /// writes a perf.data file.
    fn new(
        args: &RecordArgs,
        session: &Session,
        symbols: &'a KernelSymbols,
        agg: Option<aggregate::Aggregation>,
        file: bool,
    ) -> Printer<'a> {
        Printer {
            plans: session.plans().to_vec(),
            symbols,
            json: args.json,
            quiet: args.quiet,
            // The file names the return trampoline too, so that its replay
            // decodes a kretprobe's caller as this run does.
            addresses: file.then(|| {
                output::Addresses::new(
                    session
                        .plans()
                        .iter()
                        .filter_map(|p| p.return_trampoline)
                        .collect(),
                )
            }),
            cache: text::LineCache::default(),
            line: Vec::with_capacity(256),
            json_writer: json::EventWriter::default(),
            agg,
            stacks: args
                .stacks
                .graph()
                .map(|_| stacks::Stacks::new(true, &args.stacks.out)),
        }
    }
}

impl<W: Write> LiveOutput<'_, W> {
    /// Prints one event, unless quiet or stdout's reader has gone.
    fn print(&mut self, e: &Event) -> Result<ControlFlow<()>> {
        if self.reader_gone || self.printer.quiet {
            return Ok(ControlFlow::Continue(()));
        }
        if !written(self.printer.write(&mut self.out, e))? {
            self.reader_gone = true;
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Flushes what was printed. Returns false when stdout's reader has
    /// gone away, which ends the recording quietly.
    fn flush(&mut self) -> Result<bool> {
        if self.reader_gone {
            return Ok(false);
        }
        let ok = written(self.out.flush())?;
        self.reader_gone = !ok;
        Ok(ok)
    }
}

/// The outcome of writing events to stdout: true when written, false when
/// stdout's reader has gone away (a closed pipe: EPIPE, which ends the
/// run quietly, as `head` expects), an error otherwise. The one place
/// this program tells a closed pipe from other write errors.
pub(crate) fn written(result: io::Result<()>) -> Result<bool> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("writing events"),
    }
}

/// Whether `e` is a write that found stdout's reader gone (EPIPE), where
/// a command writes its output with `?` rather than through [`written`]
/// (stderr's writes are never errors: see `say!`).
fn stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

impl<W: Write> EventSink for LiveOutput<'_, W> {
    type Error = anyhow::Error;

    fn event(&mut self, e: &Event) -> Result<ControlFlow<()>> {
        if let Some(a) = self.printer.addresses.as_mut() {
            a.note(e);
        }
        if let Some(a) = self.printer.agg.as_mut() {
            a.record(e);
        }
        self.printer.see_stack(e);
        self.print(e)
    }

    fn record(&mut self, record: RingRecord<'_>) -> Result<ControlFlow<()>> {
        if let Some(s) = self.printer.stacks.as_mut() {
            s.maps.note_record(record);
        }
        match self.file.as_mut() {
            Some(f) => f.record(record),
            None => Ok(ControlFlow::Continue(())),
        }
    }

    fn round_end(&mut self) -> Result<ControlFlow<()>> {
        match self.file.as_mut() {
            Some(f) => f.round_end(),
            None => Ok(ControlFlow::Continue(())),
        }
    }

    /// The file takes a ring's records in one write, unless the stacks
    /// printed need the mappings the records tell (nothing is printed
    /// when no event is wanted).
    fn takes_ring_bytes(&self) -> bool {
        self.file.as_ref().is_some_and(|f| f.takes_ring_bytes())
            && (self.printer.stacks.is_none() || !self.wants_events())
    }

    fn ring_bytes(&mut self, bytes: (&[u8], &[u8])) -> Result<ControlFlow<()>> {
        match self.file.as_mut() {
            Some(f) => f.ring_bytes(bytes),
            None => Ok(ControlFlow::Continue(())),
        }
    }

    /// The file counts its samples when it is read back at the end (the
    /// session asks only when no event is wanted).
    fn counts_later(&self) -> bool {
        self.file.as_ref().is_some_and(|f| f.counts_later())
    }

    fn taken_bytes(&mut self, bytes: (&[u8], &[u8])) -> Result<ControlFlow<()>> {
        match self.file.as_mut() {
            Some(f) => f.taken_bytes(bytes),
            None => Ok(ControlFlow::Continue(())),
        }
    }

    /// `-q -o` with nothing counted from the events (no aggregation, no
    /// folded stacks, flame graph or profile) and no argument the file's
    /// symbol table must name (`:symbol`): the file takes the rings'
    /// bytes, and the samples are counted without being decoded, at the
    /// end ([`LiveOutput::counts_later`]; callchains and user stacks stay
    /// as the kernel wrote them, as perf record keeps them). Their probe
    /// and return addresses, and their kernel frames, come from
    /// [`Session::counted_addresses`].
    fn wants_events(&self) -> bool {
        let p = &self.printer;
        !(p.quiet
            && self.file.is_some()
            && p.agg.is_none()
            && !p.stacks.as_ref().is_some_and(|s| s.counts())
            && !p
                .plans
                .iter()
                .flat_map(|plan| &plan.args)
                .any(|a| a.ty.base == kprobe_perf_engine::spec::BaseType::Symbol))
    }
}

/// Flight-recorder mode: the events a dump takes from the rings are
/// printed only (a dump reads no raw record for the file).
struct Dumped<'x, 'a, W: Write>(&'x mut LiveOutput<'a, W>);

impl<W: Write> EventSink for Dumped<'_, '_, W> {
    type Error = anyhow::Error;

    fn event(&mut self, e: &Event) -> Result<ControlFlow<()>> {
        self.0.printer.see_stack(e);
        self.0.print(e)
    }
}

#[cfg(test)]
mod tests {
    use super::exit_code;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    #[test]
    fn exit_codes_are_the_shells() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(255 << 8)), 255);
        // Killed by SIGTERM (15), by SIGKILL (9) with a core flag unset.
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
        // SIGSEGV with a core dump (bit 7 set).
        assert_eq!(exit_code(ExitStatus::from_raw(11 | 0x80)), 139);
    }
}
