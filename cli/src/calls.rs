//! `kprobe-perf calls -e ROOT`: entry and return probes on a set of
//! functions, each call of a root rebuilt per thread into its call tree
//! by the engine's [`CallTreeBuilder`]; printed as error paths (the
//! default), as function_graph-like trees (`--graph`), or as JSON Lines.
//! This module plans, runs the session and renders; the trees are the
//! engine's.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use kprobe_perf_engine::analysis::{parse_duration, CallProbes, Missing};
use kprobe_perf_engine::cli::kernel::GlobOptions;
use kprobe_perf_engine::cli::records::{self, RingRecord};
use kprobe_perf_engine::BackendChoice;
use kprobe_perf_engine::Kernel;
use kprobe_perf_engine::{
    CallTree, CallTreeBuilder, CallTreeOptions, Event, EventSink, KernelSymbols, ReturnKind,
    Session, SessionOptions, TracedFunction,
};

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
fn selected(kernel: &Kernel, globs: &[String]) -> Result<Vec<BTreeSet<String>>> {
    if globs.is_empty() {
        return Ok(Vec::new());
    }
    let selection = crate::inspect::selection(kernel, &GlobOptions::default())?;
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

/// The traced functions (roots first) and the probe definitions: an
/// entry and a return probe for each glob that selects only functions
/// no other glob selects, none denied and none returning `void` (one
/// fprobe event covers a glob); for the functions of any other glob,
/// one of each per function by name. A denied function is never
/// probed.
fn functions_and_specs(
    kernel: &Kernel,
    args: &CallsArgs,
) -> Result<(Vec<TracedFunction>, Vec<String>)> {
    let root_sets = selected(kernel, &args.roots)?;
    let allow_sets = selected(kernel, &args.allow)?;
    let denied: BTreeSet<String> = selected(kernel, &args.deny)?
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
    let globs: Vec<(&String, &BTreeSet<String>)> = args
        .roots
        .iter()
        .zip(&root_sets)
        .chain(args.allow.iter().zip(&allow_sets))
        .collect();
    let specs = specs(&functions, &globs, &denied, args.args);
    Ok((functions, specs))
}

/// The probe definitions of `functions`, selected by `globs` (each with
/// its functions): see [`functions_and_specs`].
fn specs(
    functions: &[TracedFunction],
    globs: &[(&String, &BTreeSet<String>)],
    denied: &BTreeSet<String>,
    with_args: bool,
) -> Vec<String> {
    let entry_args: String = if with_args {
        (1..=ARGS).map(|i| format!(" arg{i}=$arg{i}")).collect()
    } else {
        String::new()
    };
    // The whole return register (`:x64`: untyped, a kernel with BTF
    // types it by the function, which a glob's one layout cannot follow);
    // the engine cuts it to the function's type. A void function has no
    // return value to fetch (a kernel with BTF refuses $retval there).
    let void: BTreeSet<&str> = functions
        .iter()
        .filter(|f| f.returns == ReturnKind::Void)
        .map(|f| f.name.as_str())
        .collect();
    let traced: BTreeSet<&str> = functions.iter().map(|f| f.name.as_str()).collect();
    let mut whole = Vec::new();
    let mut by_name = BTreeSet::new();
    for (i, (glob, set)) in globs.iter().enumerate() {
        // Two probes on one function would give each of its calls twice.
        let shared = globs
            .iter()
            .enumerate()
            .any(|(j, (_, other))| j != i && !other.is_disjoint(set));
        let mixed = set
            .iter()
            .any(|f| denied.contains(f) || void.contains(f.as_str()));
        match shared || mixed {
            false => whole.push(glob.as_str()),
            true => by_name.extend(
                set.iter()
                    .map(String::as_str)
                    .filter(|f| traced.contains(f)),
            ),
        }
    }
    let mut specs: Vec<String> = whole
        .iter()
        .chain(&by_name)
        .map(|t| format!("p:{t}{entry_args}"))
        .collect();
    specs.extend(
        whole
            .iter()
            .chain(&by_name)
            .map(|t| match void.contains(t) {
                true => format!("r:{t}"),
                false => format!("r:{t} ret=$retval:x64"),
            }),
    );
    specs
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
    say!(
        "kprobe-perf: calls: {} root functions, {} traced inside",
        functions.iter().filter(|f| f.root).count(),
        functions.iter().filter(|f| !f.root).count()
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
            Some(crate::output::FileOutput::start(f, &mut session, &symbols)?)
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
            self.tracing.builder.record(call);
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

    #[test]
    fn a_glob_with_a_denied_function_is_probed_by_name_and_the_others_whole() {
        let int = ReturnKind::Integer {
            size: 4,
            signed: true,
        };
        let functions = vec![
            TracedFunction::new("do_sys_openat2", int, true),
            TracedFunction::new("getname", ReturnKind::Pointer, false),
            TracedFunction::new("vfs_open", int, false),
            TracedFunction::new("vfs_read", int, false),
        ];
        let set =
            |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| n.to_string()).collect() };
        let (root, getname, vfs) = (
            set(&["do_sys_openat2"]),
            set(&["getname", "getname_flags"]),
            set(&["vfs_open", "vfs_read"]),
        );
        let globs = [
            "do_sys_openat2".to_string(),
            "getname*".into(),
            "vfs_*".into(),
        ];
        let given = [(&globs[0], &root), (&globs[1], &getname), (&globs[2], &vfs)];
        let specs = specs(&functions, &given, &set(&["getname_flags"]), false);
        assert_eq!(
            specs,
            [
                "p:do_sys_openat2",
                "p:vfs_*",
                "p:getname",
                "r:do_sys_openat2 ret=$retval:x64",
                "r:vfs_* ret=$retval:x64",
                "r:getname ret=$retval:x64",
            ]
        );
    }
}
