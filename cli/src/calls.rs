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
    #[arg(short = 'e', long = "root", value_name = "GLOB", required = true)]
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
/// entry and a return probe for each glob when the globs select each
/// function once and nothing is denied (fprobe events cover a glob),
/// else for each function by name.
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
    // Each function once: two probes on one function would give each
    // of its calls twice.
    let each_once = root_sets
        .iter()
        .chain(&allow_sets)
        .map(BTreeSet::len)
        .sum::<usize>()
        == functions.len();
    let entry_args: String = if args.args {
        (1..=ARGS).map(|i| format!(" arg{i}=$arg{i}")).collect()
    } else {
        String::new()
    };
    // The whole return register (`:x64`: untyped, a kernel with BTF
    // types it by the function, which a glob's one layout cannot follow);
    // the engine cuts it to the function's type. A void function has no
    // return value to fetch (a kernel with BTF refuses $retval there):
    // the functions are then named one by one.
    let void = |f: &TracedFunction| f.returns == ReturnKind::Void;
    let mut specs: Vec<String>;
    if each_once && args.deny.is_empty() && !functions.iter().any(void) {
        let globs: Vec<&String> = args.roots.iter().chain(&args.allow).collect();
        specs = globs.iter().map(|t| format!("p:{t}{entry_args}")).collect();
        specs.extend(globs.iter().map(|t| format!("r:{t} ret=$retval:x64")));
    } else {
        specs = functions
            .iter()
            .map(|f| format!("p:{}{entry_args}", f.name))
            .collect();
        specs.extend(functions.iter().map(|f| match void(f) {
            true => format!("r:{}", f.name),
            false => format!("r:{} ret=$retval:x64", f.name),
        }));
    }
    Ok((functions, specs))
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

/// Runs `calls`.
pub(crate) fn run(args: &CallsArgs) -> Result<ExitCode> {
    let min_ns = args.min.as_deref().map(parse_duration).transpose()?;
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
    let probes = CallProbes::new(&plans, &functions);
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
    let mut run = RunLoop::new(args.duration, None)?;
    let mut session = Session::open(plans, SessionOptions::default().with_target(target(args)))?;
    session.enable()?;
    run.armed();
    crate::inspect::report_armed(session.plans());
    let mut t = Tracing {
        builder: CallTreeBuilder::new(functions, CallTreeOptions::default()),
        probes,
        symbols: &symbols,
        held: Vec::new(),
        lost_seen: 0,
        out: io::BufWriter::new(io::stdout().lock()),
        renderer,
        shown: 0,
        timeline,
    };
    loop {
        t.poll(&mut session, run.timeout(Duration::from_millis(100)))?;
        if !t.print_held()? || run.over(&mut session)? {
            break;
        }
    }
    session.disable()?;
    t.poll(&mut session, Duration::ZERO)?;
    t.finish()?;
    for line in crate::text::summary_lines(&session.summary(), session.plans()) {
        say!("{line}");
    }
    run.exit(&mut session)
}

/// One run's trees, from the events to the output.
struct Tracing<'a, W: Write> {
    builder: CallTreeBuilder,
    probes: CallProbes,
    symbols: &'a KernelSymbols,
    /// Trees closed by the previous poll: printed after the next one,
    /// which may still tell of a loss during them (the decoder hands
    /// events over up to a round late).
    held: Vec<CallTree>,
    lost_seen: u64,
    out: W,
    renderer: Renderer,
    /// Trees printed.
    shown: u64,
    /// Every tree, as a timeline (--timeline).
    timeline: Option<Timeline>,
}

impl<W: Write> Tracing<'_, W> {
    /// Drains the rings into the builder; a loss marks the trees it may
    /// have broken.
    fn poll(&mut self, session: &mut Session, timeout: Duration) -> Result<()> {
        session.poll(Some(timeout), &mut Feed(self))?;
        let lost = session.stats().lost;
        if lost > self.lost_seen {
            self.lost_seen = lost;
            self.builder.events_lost();
            for t in &mut self.held {
                if !t.missing.contains(&Missing::EventsLost) {
                    t.missing.push(Missing::EventsLost);
                }
            }
        }
        Ok(())
    }

    /// Prints the trees held, holds the ones just closed. False when
    /// stdout's reader has gone.
    fn print_held(&mut self) -> Result<bool> {
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
        crate::written(self.out.flush())
    }

    /// The last trees: those held, then every one still open.
    fn finish(&mut self) -> Result<()> {
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
/// each thread exit in time order.
struct Feed<'x, 'a, W: Write>(&'x mut Tracing<'a, W>);

impl<W: Write> EventSink for Feed<'_, '_, W> {
    type Error = kprobe_perf_engine::Error;

    fn event(&mut self, e: &Event) -> std::result::Result<ControlFlow<()>, Self::Error> {
        let t = &mut *self.0;
        if let Some(call) = t.probes.call_event(e, t.symbols) {
            t.builder.record(call);
        }
        Ok(ControlFlow::Continue(()))
    }

    fn record(
        &mut self,
        record: RingRecord<'_>,
    ) -> std::result::Result<ControlFlow<()>, Self::Error> {
        if let Some((tid, time)) = records::thread_exit(record) {
            self.0.builder.thread_exits(tid, time);
        }
        Ok(ControlFlow::Continue(()))
    }
}
