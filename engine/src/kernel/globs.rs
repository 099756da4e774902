//! What globs select on this kernel, and how a glob definition reaches it:
//! one kprobe per kept function, or fprobe events over the glob.

use std::collections::HashSet;
use std::sync::OnceLock;

use kprobe_perf_symbols::{cover_globs, glob_match, is_glob};

use super::Kernel;
use crate::kernel::error::KernelError;
use crate::kernel::preflight::Preflight;
use crate::kernel::select::{self, Candidate, SelectOptions};
use crate::plan::{BackendChoice, KernelFeatures};
use kprobe_perf_arch::Arch;
use kprobe_perf_spec::{Definition, FetchBase, ProbeKind, ProbeSpec, Target};
use kprobe_perf_symbols::KernelSymbols;

/// Most narrower fprobe events one glob is split into before the engine
/// falls back to one kprobe per function.
pub const MAX_FPROBE_SPLIT: usize = 32;

/// How globs are expanded and candidates judged.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct GlobOptions {
    /// Keep the functions a glob leaves out as fragile under bulk probing
    /// (RCU, locking, preemption, interrupts, the scheduler, unwinding,
    /// low-level arch code, console output).
    pub include_fragile: bool,
    /// Also expand a plain name shared by several functions into one
    /// probe per instance.
    pub all_instances: bool,
    /// The backend asked for: under [`BackendChoice::Auto`], on a kernel
    /// with fprobe events, a glob becomes fprobe events.
    pub backend: BackendChoice,
    /// The processes recorded, whose mapped files `usdt:*:PROVIDER:NAME`
    /// stands for.
    pub processes: Vec<u32>,
}

impl GlobOptions {
    /// Keeps (or not) the fragile families.
    pub fn include_fragile(mut self, yes: bool) -> Self {
        self.include_fragile = yes;
        self
    }

    /// Expands (or not) a name shared by several functions.
    pub fn all_instances(mut self, yes: bool) -> Self {
        self.all_instances = yes;
        self
    }

    /// The backend asked for.
    pub fn backend(mut self, choice: BackendChoice) -> Self {
        self.backend = choice;
        self
    }

    /// The processes recorded (for `usdt:*:PROVIDER:NAME`).
    pub fn processes(mut self, pids: Vec<u32>) -> Self {
        self.processes = pids;
        self
    }
}

/// fprobe events for a glob: one for the glob itself, or narrower ones
/// that leave out what a kprobe expansion would exclude.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FprobeRoute {
    /// The glob asked for.
    pub pattern: String,
    /// The globs of the events: `[pattern]`, or the narrower ones.
    pub globs: Vec<String>,
    /// The `f:` definitions, one per glob.
    pub definitions: Vec<String>,
    /// How many functions the glob keeps.
    pub kept: usize,
    /// How many functions the kernel's wildcard would arm that are left
    /// out (0 when the glob is not split).
    pub left_out: usize,
}

/// How a glob definition reaches the kernel under [`BackendChoice::Auto`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GlobRoute {
    /// fprobe events.
    Fprobe(FprobeRoute),
    /// One kprobe per kept function, and why not an fprobe event.
    Kprobes(String),
}

/// Whether a glob definition can be fprobe events on this kernel, and
/// which. The kernel's wildcard arms every function of
/// `available_filter_functions` it matches (`traceable`), and an fprobe
/// definition takes one glob with no exclusion (trace_fprobe.c: no symbol
/// list); so when it would also arm a function the selection leaves out,
/// the glob is replaced by the fewest disjoint globs that arm exactly the
/// kept functions ([`cover_globs`]), or, past [`MAX_FPROBE_SPLIT`], left
/// to kprobes.
pub fn glob_route(
    spec: &ProbeSpec,
    symbols: &KernelSymbols,
    opts: &SelectOptions<'_>,
    traceable: Option<&HashSet<String>>,
    features: Option<&KernelFeatures>,
) -> GlobRoute {
    match fprobe_route(spec, symbols, opts, traceable, features) {
        Ok(route) => GlobRoute::Fprobe(route),
        Err(why) => GlobRoute::Kprobes(why),
    }
}

/// [`glob_route`]'s fprobe events, or why the glob stays on kprobes.
fn fprobe_route(
    spec: &ProbeSpec,
    symbols: &KernelSymbols,
    opts: &SelectOptions<'_>,
    traceable: Option<&HashSet<String>>,
    features: Option<&KernelFeatures>,
) -> Result<FprobeRoute, String> {
    let (pattern, kind) = fprobe_shape(spec, features)?;
    let Some(traceable) = traceable else {
        return Err("available_filter_functions is unreadable, so what the kernel's wildcard arms is unknown".into());
    };
    let found = select::candidates(symbols, pattern, opts);
    let kept: HashSet<&str> = found
        .iter()
        .filter(|c| c.excluded.is_none())
        .map(|c| c.symbol.name.as_str())
        .collect();
    if kept.is_empty() {
        return Err("it keeps no function".into());
    }
    // What the kernel's wildcard would arm and the selection leaves out:
    // every traceable name the pattern matches that is not kept.
    let mut avoid: Vec<&str> = traceable
        .iter()
        .map(String::as_str)
        .filter(|n| !kept.contains(n) && glob_match(pattern, n))
        .collect();
    avoid.sort_unstable();
    let globs = covering_globs(pattern, &kept, &avoid, traceable)?;
    let definitions = fprobe_definitions(spec, kind, &globs)?;
    Ok(FprobeRoute {
        pattern: pattern.clone(),
        globs,
        definitions,
        kept: kept.len(),
        left_out: avoid.len(),
    })
}

/// The glob and probe kind an fprobe event would take from `spec`, when
/// the kernel has fprobe events and the spec has a shape they take.
fn fprobe_shape<'s>(
    spec: &'s ProbeSpec,
    features: Option<&KernelFeatures>,
) -> Result<(&'s String, ProbeKind), String> {
    if !features.is_some_and(|f| f.fprobe) {
        return Err("this kernel's tracefs README has no fprobe events (f:; CONFIG_FPROBE_EVENTS, Linux 6.5+)".into());
    }
    let Target::Symbol {
        module: None,
        name: pattern,
        instance: None,
        offset: 0,
    } = &spec.target
    else {
        return Err("an fprobe event takes a function glob with no module and no offset".into());
    };
    let kind = match spec.kind {
        ProbeKind::Entry => ProbeKind::Entry,
        ProbeKind::Return { maxactive: None } => ProbeKind::Return { maxactive: None },
        ProbeKind::Return { .. } => return Err("maxactive is kept on kprobes".into()),
    };
    if let Some(a) = spec
        .args
        .iter()
        .find(|a| matches!(a.fetch.base, FetchBase::Register(_)))
    {
        return Err(format!(
            "{a}: fprobe events cannot fetch registers (use $argN)"
        ));
    }
    Ok((pattern, kind))
}

/// The globs that arm the kept functions and none of `avoid`: `pattern`
/// itself when nothing is to be avoided, else the fewest narrower ones,
/// up to [`MAX_FPROBE_SPLIT`].
fn covering_globs(
    pattern: &str,
    kept: &HashSet<&str>,
    avoid: &[&str],
    traceable: &HashSet<String>,
) -> Result<Vec<String>, String> {
    let Some(first) = avoid.first() else {
        return Ok(vec![pattern.to_string()]);
    };
    match fewest_globs(pattern, kept, avoid, traceable) {
        Some(g) if g.len() <= MAX_FPROBE_SPLIT => Ok(g),
        Some(g) => Err(format!(
            "leaving out {} functions the kernel's wildcard would arm (e.g. {first}) takes {} narrower fprobe events, more than {MAX_FPROBE_SPLIT}",
            avoid.len(),
            g.len()
        )),
        None => Err(format!(
            "the kernel's wildcard would arm {} functions left out (e.g. {first}), and {pattern} cannot be split into narrower globs",
            avoid.len()
        )),
    }
}

/// One fprobe definition per glob, each checked against the fprobe
/// grammar, which is stricter (no BTF names on a glob): what it refuses
/// stays on kprobes.
fn fprobe_definitions(
    spec: &ProbeSpec,
    kind: ProbeKind,
    globs: &[String],
) -> Result<Vec<String>, String> {
    globs
        .iter()
        .map(|g| {
            let text = ProbeSpec {
                kind,
                target: Target::Fprobe { name: g.clone() },
                ..spec.clone()
            }
            .to_string();
            match Definition::parse(&text, Arch::host().unwrap_or(Arch::X86_64)) {
                Ok(_) => Ok(text),
                Err(e) => Err(format!("as an fprobe event: {}", e.message)),
            }
        })
        .collect()
}

/// The fewest globs (see [`cover_globs`]) that arm exactly the `kept`
/// names: narrowed within `pattern` (which keeps its tail: `*_read` ->
/// `[ab]*_read`), or drawn afresh over every traceable name (`v?s_*` ->
/// `vfs_[o-w]*`), whichever takes fewer. `avoid` is what `pattern`
/// would arm and must not.
fn fewest_globs(
    pattern: &str,
    kept: &HashSet<&str>,
    avoid: &[&str],
    traceable: &HashSet<String>,
) -> Option<Vec<String>> {
    let mut keep: Vec<&str> = kept.iter().copied().collect();
    keep.sort_unstable();
    let within = cover_globs(pattern, &keep, avoid);
    let everything: Vec<&str> = traceable
        .iter()
        .map(String::as_str)
        .filter(|n| !kept.contains(n))
        .collect();
    let afresh = cover_globs("*", &keep, &everything);
    let best = match (within, afresh) {
        (Some(a), Some(b)) if b.len() < a.len() => b,
        (Some(a), _) => a,
        (None, b) => b?,
    };
    Some(best.into_iter().map(|g| g.pattern).collect())
}

/// How `notrace` functions are told apart in a [`Selection`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotraceBy {
    /// From the function bytes (no ftrace site); the text source named.
    Bytes(String),
    /// From `available_filter_functions`.
    FilterList,
    /// Not at all: neither the kernel text nor the filter list is
    /// readable.
    Unchecked,
}

/// The judge of glob candidates on one kernel: its symbols, the checks
/// over its text when readable, else its list of traceable functions.
pub struct Selection<'k> {
    symbols: &'k KernelSymbols,
    preflight: Option<Preflight<'k>>,
    traceable: OnceLock<Option<HashSet<String>>>,
    include_fragile: bool,
    all_instances: bool,
}

impl<'k> Selection<'k> {
    /// The functions the kernel can trace (`available_filter_functions`),
    /// read on first use; `None` when unreadable.
    pub fn traceable(&self) -> Option<&HashSet<String>> {
        self.traceable
            .get_or_init(select::traceable_functions)
            .as_ref()
    }

    /// The checks over the kernel's text, when readable.
    pub fn preflight(&self) -> Option<&Preflight<'k>> {
        self.preflight.as_ref()
    }

    /// The options [`select`] takes: the text checks, else the filter
    /// list.
    pub fn options(&self) -> SelectOptions<'_> {
        SelectOptions {
            preflight: self.preflight.as_ref(),
            traceable: match self.preflight {
                Some(_) => None,
                None => self.traceable(),
            },
            include_fragile: self.include_fragile,
            all_instances: self.all_instances,
        }
    }

    /// How notrace functions are told apart.
    pub fn notrace_by(&self) -> NotraceBy {
        match &self.preflight {
            Some(p) => NotraceBy::Bytes(p.text_source()),
            None if self.traceable().is_some() => NotraceBy::FilterList,
            None => NotraceBy::Unchecked,
        }
    }

    /// Every text symbol `pattern` matches, in address order, each kept or
    /// excluded with its reason.
    pub fn candidates(&self, pattern: &str) -> Vec<Candidate<'k>> {
        select::candidates(self.symbols, pattern, &self.options())
    }

    /// How the glob definition `spec` reaches the running kernel under
    /// [`BackendChoice::Auto`] (see [`glob_route`]).
    pub fn route(&self, spec: &ProbeSpec) -> GlobRoute {
        glob_route(
            spec,
            self.symbols,
            &self.options(),
            self.traceable(),
            crate::plan::running_kernel_features(),
        )
    }
}

/// `text` parsed, when it is an SDT probe (`usdt:PATH:PROVIDER:NAME`).
fn sdt_spec(text: &str, arch: Arch) -> Option<ProbeSpec> {
    let spec = ProbeSpec::parse(text, arch).ok()?;
    matches!(
        spec.target,
        Target::User {
            location: kprobe_perf_spec::UserLocation::Sdt { .. },
            ..
        }
    )
    .then_some(spec)
}

/// One definition after glob expansion.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Expanded {
    /// The definition given.
    pub definition: String,
    /// What it became (itself when it has no glob).
    pub definitions: Vec<String>,
    /// How.
    pub how: ExpandedAs,
}

/// How a definition was expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExpandedAs {
    /// Not at all: it names no glob (or one function).
    Unchanged,
    /// Into fprobe events.
    Fprobe(FprobeRoute),
    /// Into one kprobe per kept function; `not_fprobe` says why not
    /// fprobe events, when that was considered.
    Kprobes {
        /// Why the glob is not fprobe events.
        not_fprobe: Option<String>,
    },
    /// An SDT probe (`usdt:PATH:PROVIDER:NAME`) into one uprobe per
    /// site of the probes it matches.
    SdtSites,
}

impl Kernel {
    /// The judge of glob candidates on this kernel (opens its text).
    pub fn selection(&self, opts: &GlobOptions) -> Result<Selection<'_>, KernelError> {
        Ok(Selection {
            symbols: &self.symbols,
            preflight: self.preflight()?,
            traceable: OnceLock::new(),
            include_fragile: opts.include_fragile,
            all_instances: opts.all_instances,
        })
    }

    /// Expands globs in the definitions (`p:tcp_v4_*`) into one definition
    /// per function the selection keeps, or, under
    /// [`BackendChoice::Auto`] on a kernel with fprobe events, into one
    /// fprobe event (or a few narrower ones, when the kernel's wildcard
    /// would also arm functions the selection leaves out). The kernel's
    /// text is read only when a definition has a glob.
    pub fn expand_globs<S: AsRef<str>>(
        &self,
        specs: &[S],
        opts: &GlobOptions,
    ) -> Result<Vec<Expanded>, KernelError> {
        let arch = self.arch()?;
        if specs.iter().any(|s| sdt_spec(s.as_ref(), arch).is_some()) {
            // Each on its own: SDT probes into their sites, the rest as below.
            let mut out = Vec::with_capacity(specs.len());
            for s in specs {
                let s = s.as_ref();
                match sdt_spec(s, arch) {
                    Some(spec) => out.push(Expanded {
                        definition: s.to_string(),
                        definitions: crate::plan::sdt::sites_in(&spec, arch, &opts.processes)?
                            .iter()
                            .map(ToString::to_string)
                            .collect(),
                        how: ExpandedAs::SdtSites,
                    }),
                    None => out.extend(self.expand_globs(&[s], opts)?),
                }
            }
            return Ok(out);
        }
        // The target is the first or second word (`p:tcp_*`, `p:ev tcp_*`).
        let has_glob = |s: &str| s.split_whitespace().take(2).any(is_glob);
        let unchanged = |s: &str| Expanded {
            definition: s.to_string(),
            definitions: vec![s.to_string()],
            how: ExpandedAs::Unchanged,
        };
        if !opts.all_instances && !specs.iter().any(|s| has_glob(s.as_ref())) {
            return Ok(specs.iter().map(|s| unchanged(s.as_ref())).collect());
        }
        let selection = self.selection(opts)?;
        let mut out = Vec::with_capacity(specs.len());
        for s in specs {
            let s = s.as_ref();
            let route = match (opts.backend, ProbeSpec::parse(s, arch)) {
                (BackendChoice::Auto, Ok(spec)) if has_glob(s) => Some(selection.route(&spec)),
                _ => None,
            };
            if let Some(GlobRoute::Fprobe(f)) = route {
                out.push(Expanded {
                    definition: s.to_string(),
                    definitions: f.definitions.clone(),
                    how: ExpandedAs::Fprobe(f),
                });
                continue;
            }
            let expanded = select::expand_globs(&[s], &self.symbols, arch, &selection.options())?;
            if expanded.len() == 1 && expanded[0] == s {
                out.push(unchanged(s));
                continue;
            }
            out.push(Expanded {
                definition: s.to_string(),
                definitions: expanded,
                how: ExpandedAs::Kprobes {
                    not_fprobe: match route {
                        Some(GlobRoute::Kprobes(why)) => Some(why),
                        _ => None,
                    },
                },
            });
        }
        Ok(out)
    }
}
