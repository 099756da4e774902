//! `kprobe-perf calls -e ROOT`: entry and return probes on a set of
//! functions, each call of a root rebuilt per thread into its call tree
//! by the engine's [`CallTreeBuilder`]; printed as error paths (the
//! default), as function_graph-like trees (`--graph`), or as JSON Lines.
//! This module plans, runs the session and renders; the trees are the
//! engine's.

use std::collections::{BTreeSet, HashSet};
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use kprobe_perf_engine::analysis::{parse_duration, CallProbes, Missing};
use kprobe_perf_engine::cli::kernel::{GlobOptions, Selection};
use kprobe_perf_engine::cli::plan::running_kernel_features;
use kprobe_perf_engine::cli::records::{self, RingRecord};
use kprobe_perf_engine::BackendChoice;
use kprobe_perf_engine::Kernel;
use kprobe_perf_engine::{
    CallEvent, CallSite, CallTree, CallTreeBuilder, CallTreeOptions, Event, EventSink,
    KernelSymbols, ReturnKind, Session, SessionOptions, TracedFunction,
};
use kprobe_perf_symbols::{cover_globs, glob_match, is_glob};

use crate::calls_render::{Mode, Renderer};
use crate::calls_timeline::Timeline;
use crate::run_loop::RunLoop;

/// The arguments of `calls`.
#[derive(clap::Args)]
pub(crate) struct CallsArgs {
    /// A root function or glob (`do_sys_openat2`, `tcp_v4_*`, `MOD:GLOB`;
    /// repeatable): a tree starts at each of its calls made outside
    /// another tree.
    #[arg(
        short = 'e',
        long = "root",
        value_name = "GLOB",
        required_unless_present = "input"
    )]
    roots: Vec<String>,
    /// Functions traced inside a root's call (globs, repeatable), as
    /// `list` selects them (fragile families and what the kernel refuses
    /// left out).
    #[arg(long, value_name = "GLOB")]
    allow: Vec<String>,
    /// Functions left out of --allow (globs, repeatable).
    #[arg(long, value_name = "GLOB")]
    deny: Vec<String>,
    /// Print successful root calls too (errors mode).
    #[arg(long, conflicts_with = "graph")]
    success: bool,
    /// Print each root call as an indented tree (function_graph-like)
    /// with durations and return values, ending with each function's
    /// self time.
    #[arg(long)]
    graph: bool,
    /// Print only root calls that took at least DURATION (250ns, 500us,
    /// 1.5ms, 2s).
    #[arg(long, value_name = "DURATION")]
    min: Option<String>,
    /// Fetch and print each call's first arguments (up to 4), named from
    /// BTF.
    #[arg(long)]
    args: bool,
    /// Print JSON Lines: one object per tree.
    #[arg(long)]
    json: bool,
    /// Also write every tree to FILE as a timeline (Chrome trace-event
    /// JSON, which Perfetto UI and chrome://tracing open): each call a
    /// slice on its thread, errors marked. FILE is created new (an
    /// existing one is refused).
    #[arg(long, value_name = "FILE")]
    timeline: Option<std::path::PathBuf>,
    /// Also write the recording to FILE as perf.data (an existing FILE
    /// is moved to FILE.old), from which `calls -i FILE` rebuilds the
    /// same trees: `kprobe-perf calls -o open.data -e do_sys_openat2
    /// --allow do_filp_open -- cat /nonexistent`.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// Rebuild the trees from FILE, a perf.data file `calls -o` wrote,
    /// instead of tracing (the same functions and output options):
    /// `kprobe-perf calls -i open.data --graph`.
    #[arg(short = 'i', long = "input", value_name = "FILE", conflicts_with_all = ["roots", "allow", "deny", "output", "filter", "pid", "all_cpus", "cpus", "cgroup", "duration", "command"])]
    input: Option<std::path::PathBuf>,
    /// Keep only the events that pass EXPR (the kernel's ftrace filter
    /// grammar), given to every probe: test `comm`, `pid`, `tid` or
    /// `cpu`, which every probe has.
    #[arg(long = "filter", value_name = "EXPR", allow_hyphen_values = true)]
    filter: Option<String>,
    /// Trace these processes only (comma-separated pids), and their
    /// threads and children.
    #[arg(short = 'p', long, value_name = "PIDS", value_delimiter = ',', conflicts_with = "command", value_parser = crate::validate::pid, allow_negative_numbers = true)]
    pid: Vec<i32>,
    /// Trace every task on every CPU, even when a command is given.
    #[arg(short = 'a', long)]
    all_cpus: bool,
    /// Trace only on these CPUs (a list such as 0-3,6).
    #[arg(short = 'C', long = "cpu", value_name = "LIST", conflicts_with = "pid", value_parser = crate::validate::cpu_list, allow_negative_numbers = true)]
    cpus: Option<crate::validate::CpuList>,
    /// Trace only tasks in this cgroup (v2).
    #[arg(short = 'G', long, value_name = "CGROUP", conflicts_with_all = ["pid", "cpus"], value_parser = crate::validate::cgroup)]
    cgroup: Option<std::path::PathBuf>,
    /// Stop after this many seconds (fractions allowed).
    #[arg(short = 'd', long, value_name = "SECS", value_parser = crate::validate::duration, allow_negative_numbers = true)]
    duration: Option<f64>,
    #[command(flatten)]
    image: crate::image_args::ImageArgs,
    /// The command to run and trace.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Arguments fetched at each entry with --args.
const ARGS: usize = 4;

/// The functions each of `globs` selects, as `list` keeps them.
fn selected(selection: &Selection<'_>, globs: &[String]) -> Result<Vec<BTreeSet<String>>> {
    let mut out = Vec::new();
    for g in globs {
        let kept: BTreeSet<String> = selection
            .candidates(g)
            .into_iter()
            .filter(|c| c.excluded.is_none() && !c.duplicate)
            .map(|c| c.symbol.name.clone())
            .collect();
        if kept.is_empty() {
            anyhow::bail!(
                "{g} selects no function that can be traced (kprobe-perf list --why {g} says why)"
            );
        }
        out.push(kept);
    }
    Ok(out)
}

/// The traced functions (roots first) and the probe definitions (see
/// [`specs`]). A denied function is never probed.
fn functions_and_specs(
    kernel: &Kernel,
    args: &CallsArgs,
) -> Result<(Vec<TracedFunction>, Vec<String>)> {
    let selection = crate::inspect::selection(kernel, &GlobOptions::default())?;
    let root_sets = selected(&selection, &args.roots)?;
    let allow_sets = selected(&selection, &args.allow)?;
    let denied: BTreeSet<String> = selected(&selection, &args.deny)?
        .into_iter()
        .flatten()
        .collect();
    let roots: BTreeSet<&String> = root_sets.iter().flatten().collect();
    let allowed: BTreeSet<&String> = allow_sets.iter().flatten().collect();
    let inside: Vec<&String> = allowed
        .into_iter()
        .filter(|n| !roots.contains(n) && !denied.contains(*n))
        .collect();
    let mut functions: Vec<TracedFunction> = roots
        .iter()
        .map(|n| TracedFunction::from_kernel_btf(n, true))
        .collect();
    functions.extend(
        inside
            .iter()
            .map(|n| TracedFunction::from_kernel_btf(n, false)),
    );
    let fprobe = running_kernel_features().is_some_and(|f| f.fprobe);
    let traceable = selection.traceable().filter(|_| fprobe);
    let specs = specs(&functions, traceable, args.args);
    Ok((functions, specs))
}

/// A glob of the cover that keeps fewer functions than this is probed
/// function by function instead: in the 6.12 VM (TCG) the kernel took
/// 0.33 s to define one fprobe event (each registers an ftrace_ops of
/// its own, whatever the glob) and about 0.03 s per kprobe by name, so
/// an entry and a return event pay for themselves from about a dozen
/// functions.
const MIN_GLOB_FUNCTIONS: usize = 12;

/// The probe definitions of `functions`: an entry and a return probe
/// for each glob of the fewest that select exactly the traced functions
/// among every function the kernel can trace (`traceable`, given on a
/// kernel with fprobe events: one fprobe event per glob, so a glob
/// never arms a denied function, a name several functions share, or
/// any other function not traced), and one of each by name for the
/// functions no glob of [`MIN_GLOB_FUNCTIONS`] or more covers.
///
/// The return probes of globs fetch `$retval` (the whole register,
/// `:x64`: a glob's one layout cannot follow each function's type; the
/// engine cuts it to the function's type, and a `void` function's value
/// is dropped): the kernel checks `$retval` against BTF only for a
/// single function (6.12 refuses it on a `void` one), so a glob may
/// hold `void` functions.
fn specs(
    functions: &[TracedFunction],
    traceable: Option<&HashSet<String>>,
    with_args: bool,
) -> Vec<String> {
    let entry_args: String = if with_args {
        (1..=ARGS).map(|i| format!(" arg{i}=$arg{i}")).collect()
    } else {
        String::new()
    };
    let (globs, by_name) = probe_groups(functions, traceable);
    let mut specs: Vec<String> = globs
        .iter()
        .map(String::as_str)
        .chain(by_name.iter().map(|f| f.name.as_str()))
        .map(|t| format!("p:{t}{entry_args}"))
        .collect();
    specs.extend(globs.iter().map(|g| format!("r:{g} ret=$retval:x64")));
    specs.extend(by_name.iter().map(|f| match f.returns {
        // A kernel with BTF refuses $retval on a void function.
        ReturnKind::Void => format!("r:{}", f.name),
        _ => format!("r:{} ret=$retval:x64", f.name),
    }));
    specs
}

/// The globs that cover the traced functions with nothing else among
/// `traceable`, and the functions probed by name (see [`specs`]).
fn probe_groups<'f>(
    functions: &'f [TracedFunction],
    traceable: Option<&HashSet<String>>,
) -> (Vec<String>, Vec<&'f TracedFunction>) {
    let all: Vec<&TracedFunction> = functions.iter().collect();
    let Some(traceable) = traceable else {
        return (Vec::new(), all);
    };
    let traced: HashSet<&str> = functions.iter().map(|f| f.name.as_str()).collect();
    let keep: Vec<&str> = traced
        .iter()
        .copied()
        .filter(|n| traceable.contains(*n))
        .collect();
    let avoid: Vec<&str> = traceable
        .iter()
        .map(String::as_str)
        .filter(|n| !traced.contains(n))
        .collect();
    let Some(cover) = cover_globs("*", &keep, &avoid) else {
        return (Vec::new(), all);
    };
    let globs: Vec<String> = cover
        .into_iter()
        .filter(|g| g.kept >= MIN_GLOB_FUNCTIONS)
        .map(|g| g.pattern)
        .collect();
    let by_name = all
        .into_iter()
        .filter(|f| !traceable.contains(&f.name) || !globs.iter().any(|g| glob_match(g, &f.name)))
        .collect();
    (globs, by_name)
}

/// Whose calls are traced (as `record` takes it).
fn target(args: &CallsArgs) -> kprobe_perf_engine::RecordTarget {
    crate::target_of(&crate::Targets {
        tid: &[],
        pid: &args.pid,
        cgroup: args.cgroup.as_deref(),
        cpus: args.cpus.as_ref(),
        all_cpus: args.all_cpus,
        command: &args.command,
    })
}

/// The renderer and timeline `args` ask for.
fn outputs(args: &CallsArgs) -> Result<(Renderer, Option<Timeline>)> {
    let min_ns = args.min.as_deref().map(parse_duration).transpose()?;
    let mode = match (args.json, args.graph) {
        (true, _) => Mode::Json,
        (false, true) => Mode::Graph,
        (false, false) => Mode::Errors,
    };
    let renderer = Renderer::new(mode, args.success || args.graph, min_ns, args.args);
    let timeline = match args.timeline.as_deref() {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)
                .and_then(Timeline::create)
                .with_context(|| {
                    format!(
                        "cannot create the timeline {}: give a new file",
                        p.display()
                    )
                })?,
        ),
        None => None,
    };
    Ok((renderer, timeline))
}

/// Runs `calls`: traces, or with -i rebuilds the trees of a file.
pub(crate) fn run(args: &CallsArgs) -> Result<ExitCode> {
    if let Some(path) = args.input.as_deref() {
        return crate::calls_file::replay(path, |functions| {
            let (renderer, timeline) = outputs(args)?;
            Ok(Tracing::new(functions, renderer, timeline))
        });
    }
    let (renderer, timeline) = outputs(args)?;
    let kernel = crate::inspect::record_kernel(&args.image);
    let (functions, specs) = functions_and_specs(&kernel, args)?;
    let entries: Vec<&str> = specs
        .iter()
        .filter_map(|s| s.strip_prefix("p:")?.split_whitespace().next())
        .collect();
    let globs = entries.iter().filter(|t| is_glob(t)).count();
    say!(
        "kprobe-perf: calls: {} root functions, {} traced inside (an entry and a return probe on {globs} globs and {} functions by name)",
        functions.iter().filter(|f| f.root).count(),
        functions.iter().filter(|f| !f.root).count(),
        entries.len() - globs
    );
    let filters = vec![args.filter.clone(); specs.len()];
    let plans = crate::filters::plan(
        &kernel,
        &specs,
        &filters,
        false,
        BackendChoice::Auto,
        true,
        &args.pid,
    )
    .context("cannot probe the entries and returns of the functions")?;
    crate::inspect::check_plans(&kernel, &plans)?;
    let symbols = kernel.into_symbols();
    if let Some(p) = args.output.as_deref() {
        crate::output::check(p)?;
    }
    let probes = CallProbes::new(&plans, &functions);
    let mut run = RunLoop::new(args.duration, None)?;
    let mut session = Session::open(plans, SessionOptions::default().with_target(target(args)))?;
    let file = match args.output.as_deref() {
        Some(p) => {
            let f = crate::output::create(p, false)?;
            Some(crate::output::FileOutput::start(
                f,
                &mut session,
                &symbols,
                None,
            )?)
        }
        None => None,
    };
    let mut feed = Feed {
        tracing: Tracing::new(functions, renderer, timeline),
        probes,
        symbols: &symbols,
        file,
        addresses: crate::output::Addresses::new(
            session
                .plans()
                .iter()
                .filter_map(|p| p.return_trampoline)
                .collect(),
        ),
    };
    session.enable()?;
    run.armed();
    crate::inspect::report_armed(session.plans());
    loop {
        feed.poll(&mut session, run.timeout(Duration::from_millis(100)))?;
        if !feed.tracing.print_held()? || run.over(&mut session)? {
            break;
        }
    }
    session.disable()?;
    feed.poll(&mut session, Duration::ZERO)?;
    feed.tracing.finish()?;
    let lines = crate::text::summary_lines(&session.summary(), session.plans());
    if let Some(file) = feed.file.take() {
        let functions = feed.tracing.builder.functions();
        let notes = crate::calls_file::notes(functions, session.stats().lost, &lines);
        file.finish_with_notes(&session, &symbols, feed.addresses.into_set(), notes)?;
    }
    for line in lines {
        say!("{line}");
    }
    run.exit(&mut session)
}

/// One run's trees, from the events to the output.
pub(crate) struct Tracing {
    pub(crate) builder: CallTreeBuilder,
    /// Trees closed by the previous poll: printed after the next one,
    /// which may still tell of a loss during them (the decoder hands
    /// events over up to a round late).
    held: Vec<CallTree>,
    lost_seen: u64,
    out: io::BufWriter<io::StdoutLock<'static>>,
    renderer: Renderer,
    /// Trees printed.
    shown: u64,
    /// Every tree, as a timeline (--timeline).
    timeline: Option<Timeline>,
}

impl Tracing {
    fn new(
        functions: Vec<TracedFunction>,
        renderer: Renderer,
        timeline: Option<Timeline>,
    ) -> Tracing {
        Tracing {
            builder: CallTreeBuilder::new(functions, CallTreeOptions::default()),
            held: Vec::new(),
            lost_seen: 0,
            out: io::BufWriter::new(io::stdout().lock()),
            renderer,
            shown: 0,
            timeline,
        }
    }

    /// One event of a traced function to the builder; a `void`
    /// function's return keeps no value (a glob's return probe fetches
    /// the register all the same).
    pub(crate) fn record(&mut self, mut call: CallEvent) {
        let void = self
            .builder
            .functions()
            .get(call.function)
            .is_some_and(|f| f.returns == ReturnKind::Void);
        if let (true, CallSite::Return { retval }) = (void, &mut call.site) {
            *retval = None;
        }
        self.builder.record(call);
    }

    /// A loss counted up to `lost` events: marks the trees it may have
    /// broken (those open, and those held).
    pub(crate) fn lost(&mut self, lost: u64) {
        if lost > self.lost_seen {
            self.lost_seen = lost;
            self.builder.events_lost();
            for t in &mut self.held {
                if !t.missing.contains(&Missing::EventsLost) {
                    t.missing.push(Missing::EventsLost);
                }
            }
        }
    }

    /// The end of a file's replay, which lost `lost` events where the
    /// file does not say: every tree is marked, then printed.
    pub(crate) fn replayed(&mut self, lost: u64) -> Result<()> {
        self.held = self.builder.take_finished();
        if lost > 0 {
            say!("kprobe-perf: calls: the recording lost {lost} events: every tree is marked incomplete");
            self.lost(lost);
        }
        self.finish()
    }

    /// Prints the trees closed since the last call (a replay of a file
    /// that lost nothing). False when stdout's reader has gone.
    pub(crate) fn print_finished(&mut self) -> Result<bool> {
        let trees = self.builder.take_finished();
        self.print(&trees)
    }

    /// Prints the trees held, holds the ones just closed. False when
    /// stdout's reader has gone.
    pub(crate) fn print_held(&mut self) -> Result<bool> {
        let held = std::mem::replace(&mut self.held, self.builder.take_finished());
        self.print(&held)
    }

    fn print(&mut self, trees: &[CallTree]) -> Result<bool> {
        let functions = self.builder.functions();
        if let Some(t) = self.timeline.as_mut() {
            for tree in trees {
                t.tree(tree, functions).context("writing the timeline")?;
            }
        }
        for tree in trees {
            let r = self.renderer.tree(&mut self.out, tree, functions);
            match crate::written(r.map(|shown| self.shown += u64::from(shown)))? {
                true => {}
                false => return Ok(false),
            }
        }
        match crate::written(self.renderer.flush(&mut self.out))? {
            true => crate::written(self.out.flush()),
            false => Ok(false),
        }
    }

    /// The last trees: those held, then every one still open.
    pub(crate) fn finish(&mut self) -> Result<()> {
        let mut rest = std::mem::take(&mut self.held);
        rest.extend(self.builder.finish());
        let printed = self.print(&rest)?;
        if let Some(t) = self.timeline.take() {
            t.finish().context("writing the timeline")?;
        }
        if printed {
            say!("kprobe-perf: calls: {} trees printed", self.shown);
        }
        Ok(())
    }
}

/// The session's sink: each event of a traced function to the builder,
/// each thread exit in time order; with -o every record to the file
/// (one by one: the exits are read from them).
struct Feed<'a> {
    tracing: Tracing,
    probes: CallProbes,
    symbols: &'a KernelSymbols,
    file: Option<crate::output::FileOutput>,
    /// The addresses the file's symbols must name (each event's probe
    /// address: its function).
    addresses: crate::output::Addresses,
}

impl Feed<'_> {
    /// Drains the rings into the builder; a loss marks the trees it may
    /// have broken.
    fn poll(&mut self, session: &mut Session, timeout: Duration) -> Result<()> {
        session.poll(Some(timeout), self)?;
        self.tracing.lost(session.stats().lost);
        Ok(())
    }
}

impl EventSink for Feed<'_> {
    type Error = anyhow::Error;

    fn event(&mut self, e: &Event) -> Result<ControlFlow<()>> {
        if self.file.is_some() {
            self.addresses.note(e);
        }
        if let Some(call) = self.probes.call_event(e, self.symbols) {
            self.tracing.record(call);
        }
        Ok(ControlFlow::Continue(()))
    }

    fn record(&mut self, record: RingRecord<'_>) -> Result<ControlFlow<()>> {
        if let Some((tid, time)) = records::thread_exit(record) {
            self.tracing.builder.thread_exits(tid, time);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int() -> ReturnKind {
        ReturnKind::Integer {
            size: 4,
            signed: true,
        }
    }

    #[test]
    fn the_traced_functions_are_covered_by_globs_that_arm_nothing_else() {
        // vfs_a .. vfs_o traced (vfs_c void), vfs_p denied (not traced),
        // getname/getname_flags traced, and 13 others the kernel traces.
        let mut functions = vec![TracedFunction::new("do_sys_openat2", int(), true)];
        let vfs: Vec<String> = ('a'..='o').map(|c| format!("vfs_{c}")).collect();
        for n in &vfs {
            let returns = if n == "vfs_c" {
                ReturnKind::Void
            } else {
                int()
            };
            functions.push(TracedFunction::new(n, returns, false));
        }
        functions.push(TracedFunction::new("getname", ReturnKind::Pointer, false));
        functions.push(TracedFunction::new("fput", ReturnKind::Void, false));
        let mut traceable: HashSet<String> = functions.iter().map(|f| f.name.clone()).collect();
        traceable.extend(["vfs_p", "getname_flags", "do_sys_open", "kfree"].map(String::from));
        let specs = specs(&functions, Some(&traceable), false);
        assert_eq!(
            specs,
            [
                "p:vfs_[a-o]*",
                "p:do_sys_openat2",
                "p:getname",
                "p:fput",
                "r:vfs_[a-o]* ret=$retval:x64",
                "r:do_sys_openat2 ret=$retval:x64",
                "r:getname ret=$retval:x64",
                "r:fput",
            ]
        );
        // Without fprobe events (or the kernel's list): every function by name.
        let by_name = super::specs(&functions[..2], None, true);
        assert_eq!(
            by_name,
            [
                "p:do_sys_openat2 arg1=$arg1 arg2=$arg2 arg3=$arg3 arg4=$arg4",
                "p:vfs_a arg1=$arg1 arg2=$arg2 arg3=$arg3 arg4=$arg4",
                "r:do_sys_openat2 ret=$retval:x64",
                "r:vfs_a ret=$retval:x64",
            ]
        );
    }
}
