//! What a probe becomes once planned ([`ProbePlan`]), and why planning
//! refuses one ([`PlanError`]): the types every stage after the plan reads.

use kprobe_perf_arch::{Arch, Register};
use kprobe_perf_symbols::KernelSymbols;

use kprobe_perf_spec::{ArgType, FetchBase, ProbeKind, ProbeSpec, Target};

/// Why a probe cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The probe definition is malformed.
    #[error(transparent)]
    Spec(#[from] kprobe_perf_spec::SpecError),
    /// The symbol is not in the kernel's symbol table.
    #[error("unknown symbol {name}{}: it is not in /proc/kallsyms{}", module_suffix(.module), hint(.suggestion))]
    UnknownSymbol {
        /// The symbol as written.
        name: String,
        /// The module it was looked for in.
        module: Option<String>,
        /// A close name that does exist.
        suggestion: Option<String>,
    },
    /// The probe needs something only a tracefs-defined event provides.
    #[error(
        "{what} needs a dynamic_events definition, which the PMU backend rules out; {instead}"
    )]
    NeedsTracefs {
        /// The feature asked for.
        what: String,
        /// What to write instead.
        instead: String,
    },
    /// A feature this build does not have yet.
    #[error("{what} is not supported yet; {instead}")]
    Unsupported {
        /// The feature asked for.
        what: String,
        /// What to write instead.
        instead: String,
    },
    /// The name matches several functions (the kernel would answer
    /// EADDRNOTAVAIL, or older kernels would silently pick one).
    #[error("{name} names {} functions ({}); pick one as written there ({name}@0xADDR) or as MOD:{name} for a module's, or probe them all", instances.len(), instances.join(", "))]
    Ambiguous {
        /// The name.
        name: String,
        /// Each instance's address (and module).
        instances: Vec<String>,
    },
    /// Every function a glob matches is left out (blacklisted, notrace,
    /// fragile ...): [`crate::kernel::select`] tells why for each.
    #[error("{pattern}: matches no function that can be probed ({matched} matched, all excluded); list them with the reason each is left out")]
    AllExcluded {
        /// The glob.
        pattern: String,
        /// How many functions it matched.
        matched: usize,
    },
    /// A probe at an offset past a function's last instruction, in its
    /// alignment padding, which never runs.
    #[error("{function}+{offset} is past the last instruction of {function} (its code is {code} bytes by the vmlinux symbol table): the alignment padding there never runs, so the probe would never fire; pick an offset among its instructions")]
    PastLastInstruction {
        /// The function.
        function: String,
        /// The offset asked for.
        offset: u64,
        /// The size of its code.
        code: u64,
    },
    /// A glob of functions that cannot be expanded as written.
    #[error("{pattern}: {reason}")]
    Glob {
        /// The glob.
        pattern: String,
        /// Why, and what to do.
        reason: String,
    },
    /// Two arguments would show under the same name (the kernel refuses
    /// such a definition).
    #[error("two arguments are named {name}; give one another name with NAME=")]
    DuplicateArgName {
        /// The name.
        name: String,
    },
    /// An argument name could not be resolved from BTF.
    #[error("{function}: {reason}")]
    Btf {
        /// The probed function.
        function: String,
        /// Why, and what to do.
        reason: String,
    },
    /// `NAME@0xADDR` names no function called NAME.
    #[error("no function {name} starts at 0x{address:x}; the functions of that name are {}", instances.join(", "))]
    NoSuchInstance {
        /// The name.
        name: String,
        /// The address given.
        address: u64,
        /// The instances that exist.
        instances: Vec<String>,
    },
    /// A uprobe target could not be resolved in its binary.
    #[error("{0}")]
    User(String),
    /// The kernel would refuse the probe: predicted from its symbols and
    /// the function's bytes ([`crate::kernel::preflight`]).
    #[error("{probe} {reason}")]
    Preflight {
        /// `SYM+OFF`.
        probe: String,
        /// Why, and what the kernel would answer.
        reason: String,
    },
    /// The running kernel lacks a form of the probe language, as its
    /// tracefs `README` shows.
    #[error("this kernel's tracefs README has no {what}; needs {needs}")]
    KernelLacks {
        /// The form, as the user wrote it.
        what: String,
        /// The kernel configuration and version that have it.
        needs: String,
    },
    /// The running kernel's release no longer takes a form its README
    /// still lists (the README did not change with the parser).
    #[error("this kernel ({release}) refuses {what}; that needs {needs}")]
    KernelRefuses {
        /// The release, `MAJOR.MINOR`.
        release: String,
        /// The form, as the user wrote it.
        what: String,
        /// The kernels that take it.
        needs: String,
    },
    /// The symbol exists but is not code.
    #[error("{name} is a data symbol (kallsyms type {kind}); kprobes go on functions")]
    NotText {
        /// The symbol.
        name: String,
        /// Its kallsyms type letter.
        kind: char,
    },
    /// A probe's filter is malformed or tests what the probe lacks (the
    /// message has the filter and a caret under the token).
    #[error("the filter of {probe} is refused: {error}")]
    Filter {
        /// The probe, as given.
        probe: String,
        /// What is wrong, where.
        error: crate::plan::filter::FilterError,
    },
    /// This machine's architecture has no register table.
    #[error("choosing the register table: kprobe-perf supports x86_64 and aarch64")]
    UnsupportedArch,
}

fn module_suffix(m: &Option<String>) -> String {
    m.as_ref()
        .map(|m| format!(" in module {m}"))
        .unwrap_or_default()
}

fn hint(s: &Option<String>) -> String {
    s.as_ref()
        .map(|s| format!("; did you mean {s}?"))
        .unwrap_or_else(|| "; list candidates with: grep NAME /proc/kallsyms".into())
}

/// Where the kernel is told to put the probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachPoint {
    /// By name (`kprobe_func` in config1) and offset (config2). The name
    /// may be `MOD:SYM`.
    Symbol {
        /// Name passed to the kernel.
        name: String,
        /// Offset from the symbol.
        offset: u64,
    },
    /// By absolute address (`kprobe_addr` in config2).
    Address(u64),
    /// A uprobe: binary path (`uprobe_path` in config1) and file offset
    /// (`probe_offset` in config2).
    User {
        /// The binary or library.
        path: String,
        /// The file offset of the probed instruction.
        offset: u64,
        /// The file offset of the reference counter (a USDT semaphore)
        /// the kernel increments while the probe is armed, if any.
        ref_ctr: Option<u64>,
    },
}

/// Which kernel interface carries a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// perf_event_open on the kprobe PMU: a private kprobe per fd,
    /// arguments read from sampled registers.
    Pmu,
    /// A `dynamic_events` definition opened as a tracepoint: the kernel
    /// fetches the arguments; needed for maxactive and memory fetches.
    Tracefs,
}

/// Which backend the embedder asks for (the CLI's `--backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// The PMU unless the probe needs tracefs.
    #[default]
    Auto,
    /// Only the PMU; a probe that needs tracefs is refused.
    Pmu,
    /// Every probe through tracefs.
    Tracefs,
}

/// Where an argument's value is found in a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgSource {
    /// A register of `PERF_SAMPLE_REGS_INTR` (PMU backend).
    Register(Register),
    /// The command name of the sampled thread, from the engine's own
    /// pid-to-comm table (PMU backend).
    Comm,
    /// A field of the tracefs event's record, found by name in its
    /// `format` file when the probe is attached (tracefs backend).
    Field,
}

/// How one argument is fetched and shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgPlan {
    /// Display name (`NAME=` or `argN`).
    pub name: String,
    /// Where the value comes from.
    pub source: ArgSource,
    /// Type used for decoding and printing.
    pub ty: ArgType,
}

/// A probe ready to be attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePlan {
    /// The definition as parsed.
    pub spec: ProbeSpec,
    /// The event name shown in output.
    pub event: String,
    /// Where the probe goes.
    pub attach: AttachPoint,
    /// The kernel interface used.
    pub backend: Backend,
    /// The symbol's address from kallsyms, when known (used when a kernel
    /// refuses a `MOD:SYM` name over perf_event_open).
    pub resolved_address: Option<u64>,
    /// Arguments in order.
    pub args: Vec<ArgPlan>,
    /// `sample_regs_intr`: the registers the arguments need.
    pub regs_mask: u64,
    /// For a kernel return probe: the address of the kernel's kretprobe
    /// trampoline, when kallsyms names one. Kernels before the return
    /// address fix-up (seen on 5.10) leave the sampled ip there; the
    /// decoder then takes the caller from the raw record.
    pub return_trampoline: Option<u64>,
    /// A return probe with entry values on a kernel that cannot fetch them
    /// at the return: the entry and return probes opened instead, joined
    /// in user space (entry joins). This plan is then the user's
    /// view of the probe.
    pub entry_join: Option<Box<EntryJoin>>,
    /// The probe's event filter (`--filter`), if any.
    pub filter: Option<crate::plan::filter::ProbeFilter>,
    /// The backend was chosen by [`BackendChoice::Auto`], so a session
    /// may carry a kernel probe through `kprobe_events` instead where
    /// that costs less.
    pub auto_backend: bool,
    /// The module of a `MOD:SYM` probe whose module was not loaded when it
    /// was planned: kprobe_events keeps the definition pending and arms it
    /// each time the module loads ([`crate::Kernel::check`] checks it
    /// against the module's installed `.ko` first).
    pub pending_module: Option<String>,
}

/// The names the kernel's kretprobe return trampoline has had: 6.0 and
/// later (rethook), 5.15 to 5.19, and before.
const RETURN_TRAMPOLINES: [&str; 3] = [
    "arch_rethook_trampoline",
    "__kretprobe_trampoline",
    "kretprobe_trampoline",
];

/// The kernel's kretprobe trampoline, from `symbols`.
pub fn return_trampoline(symbols: &KernelSymbols) -> Option<u64> {
    RETURN_TRAMPOLINES
        .iter()
        .find_map(|n| symbols.lookup(n).first().map(|s| s.address))
        .filter(|&a| a != 0)
}

impl ProbePlan {
    /// This probe with a filter in the kernel's ftrace grammar
    /// (`dfd == -100 && comm ~ "cat*"`), checked against its arguments
    /// and `comm`, `pid`, `tid`, `cpu`: a refusal points at the token.
    /// Where it runs (kernel or user space) is decided now from the
    /// record the backend gives, and again when the session reads the
    /// event's format ([`crate::plan::filter::ProbeFilter::runs`]).
    pub(crate) fn with_filter(
        mut self,
        filter: &str,
    ) -> Result<ProbePlan, crate::plan::filter::FilterError> {
        self.filter = Some(crate::plan::filter::ProbeFilter::compile(filter, &self)?);
        Ok(self)
    }

    /// True for a kretprobe.
    pub fn is_return(&self) -> bool {
        matches!(self.spec.kind, ProbeKind::Return { .. })
    }

    /// True for a probe in a user binary (a uprobe).
    pub(crate) fn is_user(&self) -> bool {
        matches!(self.attach, AttachPoint::User { .. })
    }

    /// Where the probe fires: at its address, or when its function
    /// returns (a kretprobe).
    pub fn site(&self) -> kprobe_perf_arch::boundary::ProbeSite {
        if self.is_return() {
            kprobe_perf_arch::boundary::ProbeSite::Return
        } else {
            kprobe_perf_arch::boundary::ProbeSite::Entry
        }
    }

    /// The same uprobe defined through `uprobe_events` and opened as a
    /// tracepoint, whose perf events the kernel re-creates at each fork
    /// (an inherited uprobe PMU event cannot be: the kernel would re-read
    /// its path, a pointer of ours, in the forking process). Arguments the
    /// PMU read from sampled registers become fields the kernel fetches
    /// from the same registers (`uprobe_events` knows no `$argN`), each
    /// named as before. Other plans are returned unchanged.
    pub(crate) fn through_uprobe_events(self) -> ProbePlan {
        if !matches!(self.attach, AttachPoint::User { .. }) || self.backend == Backend::Tracefs {
            return self;
        }
        self.registers_as_fields()
    }

    /// The same kernel probe defined through `kprobe_events` and opened
    /// as a tracepoint, when [`BackendChoice::Auto`] chose the PMU. For a
    /// target that opens each probe more than once (per CPU, per thread,
    /// inherited by a command's children or processes' new threads): the
    /// kernel registers a kprobe for each PMU perf event, inherited
    /// copies included, and every hit runs all their handlers, where a
    /// tracefs probe is one kprobe that every event shares (as `perf
    /// probe` + `perf record` use it). Arguments become fields fetched from the
    /// same registers, named as before. Other plans are returned
    /// unchanged.
    pub(crate) fn through_kprobe_events(self) -> ProbePlan {
        if !self.may_go_through_kprobe_events() {
            return self;
        }
        self.registers_as_fields()
    }

    /// True for a kernel probe that [`ProbePlan::through_kprobe_events`]
    /// would move: put on the PMU by the automatic backend, its entry
    /// values not joined in user space.
    pub(crate) fn may_go_through_kprobe_events(&self) -> bool {
        !matches!(self.attach, AttachPoint::User { .. })
            && self.backend == Backend::Pmu
            && self.auto_backend
            && self.entry_join.is_none()
    }

    /// Arguments the PMU read from sampled registers become fields the
    /// kernel fetches from the same registers (`$argN` by its register,
    /// which `uprobe_events` does not know), each named as before.
    fn registers_as_fields(mut self) -> ProbePlan {
        for (spec_arg, arg) in self.spec.args.iter_mut().zip(&mut self.args) {
            if let (FetchBase::Arg(_), ArgSource::Register(r)) = (&spec_arg.fetch.base, arg.source)
            {
                spec_arg.fetch.base = FetchBase::Register(r.name.to_string());
            }
            spec_arg.name = Some(arg.name.clone());
            arg.source = ArgSource::Field;
        }
        self.backend = Backend::Tracefs;
        self.regs_mask = 0;
        // Planned for tracefs now, as `--backend tracefs` plans it.
        self.auto_backend = false;
        self
    }

    /// True when the kernel names and types the arguments itself (BTF
    /// names, member access, `$arg*`, fprobe and tracepoint probes, entry
    /// arguments of return probes): the session then takes them, in order,
    /// from the event's `format` file ([`ProbePlan::set_args_from_format`]).
    pub(crate) fn args_from_kernel(&self) -> bool {
        self.backend == Backend::Tracefs
            && (self.spec.target.is_dynamic_only()
                || self.spec.args.iter().any(|a| {
                    matches!(
                        a.fetch.base,
                        FetchBase::Name(_) | FetchBase::Member { .. } | FetchBase::AllArgs
                    ) || (self.is_return() && matches!(a.fetch.base, FetchBase::Arg(_)))
                }))
    }
}

/// Why a probe cannot go through the PMU, if it cannot.
pub fn tracefs_reason(spec: &ProbeSpec, arch: Arch) -> Option<String> {
    match &spec.target {
        Target::Fprobe { .. } => return Some("an fprobe event (f:)".into()),
        Target::Tracepoint { .. } => return Some("a tracepoint probe (t:)".into()),
        _ => {}
    }
    if let ProbeKind::Return { maxactive: Some(n) } = spec.kind {
        return Some(format!("maxactive (r{n}:)"));
    }
    spec.args.iter().find_map(|a| {
        let ty = a.effective_type();
        let memory = a.fetch.reads_memory()
            || ty.array.is_some()
            || ty.base.is_data_loc() && a.fetch.base != FetchBase::Comm
            || match &a.fetch.base {
                FetchBase::Arg(n) => arch.arg_register(*n).is_none() || spec.is_return(),
                FetchBase::Name(_) => spec.is_return(),
                FetchBase::StackEntry(_)
                | FetchBase::Immediate(_)
                | FetchBase::Member { .. }
                | FetchBase::AllArgs => true,
                _ => false,
            };
        memory.then(|| format!("{a} (the kernel must fetch it at hit time)"))
    })
}

/// Where one argument of a joined return probe comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinSource {
    /// Argument `n` of the hidden entry probe.
    Entry(usize),
    /// Argument `n` of the return probe.
    Return(usize),
}

/// How a return probe's entry values are fetched on a kernel that cannot
/// fetch them at the return: the two probes opened and the order of the
/// user's arguments. The [`ProbePlan`] holding it is the user's view
/// (its spec, event and arguments as written); these are what the
/// session opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryJoin {
    /// The return probe: the user's return-time arguments, then the stack
    /// pointer.
    pub ret: ProbePlan,
    /// The hidden entry probe: the user's entry-time arguments, then the
    /// stack pointer.
    pub entry: ProbePlan,
    /// For each of the user's arguments, in order, where it comes from.
    pub order: Vec<JoinSource>,
    /// The stack pointer at the return minus the one at the entry of the
    /// same call (their last arguments).
    pub frame_step: i64,
}
