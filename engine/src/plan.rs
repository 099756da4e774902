//! From a parsed probe to what the kernel is asked for: where the probe goes,
//! which registers a sample must carry, and how each argument is decoded.
//! Every mistake a user can make is reported here, before any fd is opened.

use kprobe_perf_arch::{Arch, Register};

use kprobe_perf_symbols::prototypes::{BtfError, KernelBtf, Shape};
use kprobe_perf_symbols::KernelSymbols;

use crate::spec::{ArgType, FetchBase, ProbeKind, ProbeSpec, Target};

/// Why a probe cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
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
    #[error("{what} needs a dynamic_events definition, which --backend pmu rules out; {instead}")]
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
    #[error("{name} names {} functions ({}); pick one as written there ({name}@0xADDR) or as MOD:{name} for a module's, or probe them all with --all-instances", instances.len(), instances.join(", "))]
    Ambiguous {
        /// The name.
        name: String,
        /// Each instance's address (and module).
        instances: Vec<String>,
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
    /// the function's bytes ([`crate::preflight`]).
    #[error("{probe} {reason}")]
    Preflight {
        /// `SYM+OFF`.
        probe: String,
        /// Why, and what the kernel would answer.
        reason: String,
    },
    /// The symbol exists but is not code.
    #[error("{name} is a data symbol (kallsyms type {kind}); kprobes go on functions")]
    NotText {
        /// The symbol.
        name: String,
        /// Its kallsyms type letter.
        kind: char,
    },
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

/// What the user asked for with `--backend`.
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
    /// True for a kretprobe.
    pub fn is_return(&self) -> bool {
        matches!(self.spec.kind, ProbeKind::Return { .. })
    }

    /// The same uprobe defined through `uprobe_events` and opened as a
    /// tracepoint, whose perf events the kernel re-creates at each fork
    /// (an inherited uprobe PMU event cannot be: the kernel would re-read
    /// its path, a pointer of ours, in the forking process). Arguments the
    /// PMU read from sampled registers become fields the kernel fetches
    /// from the same registers (`uprobe_events` knows no `$argN`), each
    /// named as before. Other plans are returned unchanged.
    pub fn through_uprobe_events(mut self) -> ProbePlan {
        if !matches!(self.attach, AttachPoint::User { .. }) || self.backend == Backend::Tracefs {
            return self;
        }
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
        self
    }

    /// The kprobe_events (or, for a uprobe, uprobe_events) line that
    /// defines this probe in `group`.
    pub fn tracefs_definition(&self, group: &str) -> String {
        let target = match (&self.spec.target, &self.attach) {
            // kprobe_events knows no NAME@ADDR: give it the address.
            (
                Target::Symbol {
                    instance: Some(_), ..
                },
                AttachPoint::Address(a),
            ) => Target::Address(*a),
            // uprobe_events knows no symbols: give it the file offset.
            (Target::User { .. }, AttachPoint::User { path, offset }) => Target::User {
                path: path.clone(),
                location: crate::spec::UserLocation::Offset(*offset),
            },
            (t, _) => t.clone(),
        };
        ProbeSpec {
            group: Some(group.to_string()),
            event: Some(self.event.clone()),
            target,
            ..self.spec.clone()
        }
        .to_string()
    }
}

/// Why a probe cannot go through the PMU, if it cannot.
pub fn tracefs_reason(spec: &ProbeSpec, arch: Arch) -> Option<String> {
    if let ProbeKind::Return { maxactive: Some(n) } = spec.kind {
        return Some(format!("maxactive (r{n}:)"));
    }
    spec.args.iter().find_map(|a| {
        let ty = a.effective_type();
        let memory = a.fetch.reads_memory()
            || ty.array.is_some()
            || ty.base.is_string() && a.fetch.base != FetchBase::Comm
            || match &a.fetch.base {
                FetchBase::Arg(n) => arch.arg_register(*n).is_none(),
                FetchBase::StackEntry(_) | FetchBase::Immediate(_) => true,
                _ => false,
            };
        memory.then(|| format!("{a} (the kernel must fetch it at hit time)"))
    })
}

/// Plans a parsed probe against the kernel's symbols. When `symbols` is
/// empty (kallsyms unreadable), names are left for the kernel to check.
pub fn resolve(
    spec: ProbeSpec,
    symbols: &KernelSymbols,
    arch: Arch,
    choice: BackendChoice,
) -> Result<ProbePlan, PlanError> {
    let spec = short_form_with_names(spec, symbols);
    let mut resolved_address = None;
    let attach = match &spec.target {
        Target::Symbol {
            module,
            name,
            instance: Some(addr),
            offset,
        } => {
            // One of several functions sharing the name: the kernel cannot
            // tell them apart by name, so the probe goes by address.
            if !symbols.is_empty() {
                check_instance(symbols, module.as_deref(), name, *addr)?;
            }
            resolved_address = Some(*addr);
            AttachPoint::Address(addr.wrapping_add(*offset))
        }
        Target::Symbol {
            module,
            name,
            offset,
            ..
        } => {
            if !symbols.is_empty() {
                resolved_address = check_symbol(symbols, module.as_deref(), name)?;
            }
            let kernel_name = match module {
                Some(m) => format!("{m}:{name}"),
                None => name.clone(),
            };
            AttachPoint::Symbol {
                name: kernel_name,
                offset: *offset,
            }
        }
        Target::Address(a) => AttachPoint::Address(*a),
        Target::User { path, location } => {
            // Checked on the binary's bytes before anything is opened.
            let site = if spec.is_return() {
                kprobe_perf_arch::boundary::ProbeSite::Return
            } else {
                kprobe_perf_arch::boundary::ProbeSite::Entry
            };
            let offset = crate::preflight::check_uprobe(path, location, site, arch)?;
            AttachPoint::User {
                path: path.clone(),
                offset,
            }
        }
    };
    if matches!(attach, AttachPoint::User { .. }) {
        if let Some(what) = tracefs_reason(&spec, arch) {
            return Err(PlanError::Unsupported {
                what: format!("{what} in a uprobe"),
                instead: "fetch registers in uprobes for now".into(),
            });
        }
        if choice == BackendChoice::Tracefs {
            // Planned for registers, then given to uprobe_events with them.
            return resolve(spec, symbols, arch, BackendChoice::Pmu)
                .map(ProbePlan::through_uprobe_events);
        }
    }
    let spec = resolve_names(spec, arch, KernelBtf::running_kernel)?;
    let mut names = std::collections::HashSet::new();
    for i in 0..spec.args.len() {
        let n = spec.arg_name(i);
        if !names.insert(n.clone()) {
            return Err(PlanError::DuplicateArgName { name: n });
        }
    }
    let reason = tracefs_reason(&spec, arch);
    let backend = match (choice, reason) {
        (BackendChoice::Tracefs, _) | (BackendChoice::Auto, Some(_)) => Backend::Tracefs,
        (BackendChoice::Pmu, Some(what)) => {
            return Err(PlanError::NeedsTracefs {
                what,
                instead: "drop --backend pmu (auto defines such probes through tracefs)".into(),
            })
        }
        (_, None) => Backend::Pmu,
    };
    let mut args = Vec::with_capacity(spec.args.len());
    let mut regs_mask = 0u64;
    for (i, a) in spec.args.iter().enumerate() {
        let source = match backend {
            Backend::Tracefs => ArgSource::Field,
            Backend::Pmu => match &a.fetch.base {
                FetchBase::Comm => ArgSource::Comm,
                FetchBase::Register(r) => {
                    ArgSource::Register(arch.register(r).ok_or_else(|| bad_register(r, arch))?)
                }
                FetchBase::Arg(n) => ArgSource::Register(
                    arch.arg_register(*n)
                        .ok_or_else(|| bad_register(&format!("arg{n}"), arch))?,
                ),
                FetchBase::Retval => ArgSource::Register(arch.retval_register()),
                _ => ArgSource::Register(arch.stack_register()),
            },
        };
        if let ArgSource::Register(r) = source {
            regs_mask |= 1u64 << r.perf_index;
        }
        args.push(ArgPlan {
            name: spec.arg_name(i),
            source,
            ty: a.effective_type(),
        });
    }
    let return_trampoline = (spec.is_return() && !matches!(spec.target, Target::User { .. }))
        .then(|| return_trampoline(symbols))
        .flatten();
    Ok(ProbePlan {
        event: spec.event_name(),
        spec,
        attach,
        backend,
        resolved_address,
        args,
        regs_mask,
        return_trampoline,
    })
}

/// `p:do_sys_openat2 dfd filename` reads, in the kernel's grammar, as
/// event `do_sys_openat2` on a function `dfd`. When no function `dfd`
/// exists and `do_sys_openat2` does, the user meant the short form with
/// argument names: rewrite it so.
fn short_form_with_names(spec: ProbeSpec, symbols: &KernelSymbols) -> ProbeSpec {
    let (
        Some(event),
        None,
        Target::Symbol {
            module: None,
            name,
            instance: None,
            offset: 0,
        },
    ) = (&spec.event, &spec.group, &spec.target)
    else {
        return spec;
    };
    let is_function = |n: &str| symbols.lookup(n).iter().any(|s| s.is_text());
    if symbols.is_empty() || is_function(name) || !is_function(event) {
        return spec;
    }
    let first = crate::spec::FetchArg {
        name: None,
        fetch: crate::spec::Fetch {
            base: FetchBase::Name(name.clone()),
            derefs: Vec::new(),
        },
        ty: None,
    };
    ProbeSpec {
        event: None,
        target: Target::Symbol {
            module: None,
            name: event.clone(),
            instance: None,
            offset: 0,
        },
        args: std::iter::once(first)
            .chain(spec.args.iter().cloned())
            .collect(),
        ..spec
    }
}

/// Replaces bare argument names (`p:do_sys_openat2 dfd filename`) with
/// the `$argN` BTF gives them, typed from their C type when no `:TYPE` is
/// written (sized integers and enums by signedness, pointers as x64). The
/// BTF is loaded only when a name is used.
fn resolve_names<'b>(
    mut spec: ProbeSpec,
    arch: Arch,
    btf: impl FnOnce() -> Result<&'b KernelBtf, BtfError>,
) -> Result<ProbeSpec, PlanError> {
    if !spec
        .args
        .iter()
        .any(|a| matches!(a.fetch.base, FetchBase::Name(_)))
    {
        return Ok(spec);
    }
    let function = match &spec.target {
        Target::Symbol {
            module: None, name, ..
        } => name.clone(),
        Target::Symbol {
            module: Some(m), ..
        } => {
            return Err(PlanError::Unsupported {
                what: format!("argument names in module {m} (its split BTF)"),
                instead: "name the arguments with $argN, as in dfd=$arg1".into(),
            })
        }
        _ => return Err(PlanError::Unsupported {
            what:
                "argument names on an address or a uprobe (there is no function to look up in BTF)"
                    .into(),
            instead: "name the arguments with $argN or registers".into(),
        }),
    };
    let fail = |reason: String| PlanError::Btf {
        function: function.clone(),
        reason,
    };
    if let Target::Symbol { offset, .. } = &spec.target {
        if *offset != 0 {
            return Err(fail(format!(
                "argument names read parameter registers, which hold the parameters only at the function entry, not at +{offset}; fetch registers here instead"
            )));
        }
    }
    if spec.is_return() {
        return Err(fail(
            "argument names read parameters at the entry; at the return their registers hold other values: probe the entry (p:) for parameters and use $retval here".into(),
        ));
    }
    let proto = btf()
        .and_then(|b| b.function(&function))
        .map_err(|e| fail(e.to_string()))?;
    for a in &mut spec.args {
        let FetchBase::Name(n) = &a.fetch.base else {
            continue;
        };
        let n = n.clone();
        let Some(pos) = proto.position(&n) else {
            let names: Vec<&str> = proto.params.iter().map(|p| p.name.as_str()).collect();
            let close = names
                .iter()
                .filter(|c| kprobe_perf_arch::edit_distance(c, &n) <= 2)
                .min_by_key(|c| kprobe_perf_arch::edit_distance(c, &n));
            let hint = close
                .map(|c| format!("did you mean {c}? "))
                .unwrap_or_default();
            return Err(fail(format!(
                "it has no parameter {n}; {hint}its parameters are {}",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )));
        };
        let param = &proto.params[pos - 1];
        let n32 = u32::try_from(pos).unwrap_or(u32::MAX);
        if arch.arg_register(n32).is_none() {
            return Err(fail(format!(
                "{n} is parameter {pos}, passed on the stack on {} (only the first parameters are in registers); fetch it with +OFFS($stack)",
                arch.name()
            )));
        }
        let default = match param.shape {
            Shape::Int { size, signed } | Shape::Enum { size, signed } => {
                let bits = u8::try_from(size * 8).unwrap_or(64).clamp(8, 64);
                if signed {
                    crate::spec::BaseType::Signed(bits)
                } else {
                    crate::spec::BaseType::Unsigned(bits)
                }
            }
            Shape::Pointer => crate::spec::BaseType::Hex(64),
            Shape::Float { .. } | Shape::Aggregate { .. } | Shape::Void => {
                return Err(fail(format!(
                    "{n} is a {} passed by value, which does not fit a register fetch",
                    param.c_type
                )))
            }
        };
        // `filename` shows as filename=; `+0(filename)` keeps the
        // generated argN, as the kernel names an unnamed argument.
        if a.fetch.derefs.is_empty() {
            if a.name.is_none() {
                a.name = Some(n.clone());
            }
            if a.ty.is_none() {
                a.ty = Some(ArgType::scalar(default));
            }
        }
        a.fetch.base = FetchBase::Arg(n32);
    }
    Ok(spec)
}

fn bad_register(name: &str, arch: Arch) -> PlanError {
    PlanError::Unsupported {
        what: format!("register {name} on {}", arch.name()),
        instead: "use a register of this architecture".into(),
    }
}

/// Checks that `name` is one function in scope and returns its address
/// (`None` when kallsyms hides addresses).
fn check_symbol(
    symbols: &KernelSymbols,
    module: Option<&str>,
    name: &str,
) -> Result<Option<u64>, PlanError> {
    let found = symbols.lookup(name);
    let in_scope: Vec<_> = found
        .iter()
        .filter(|s| module.is_none() || s.module.as_deref() == module)
        .collect();
    if let Some(s) = in_scope.iter().find(|s| !s.is_text()) {
        if in_scope.iter().all(|s| !s.is_text()) {
            return Err(PlanError::NotText {
                name: name.to_string(),
                kind: s.kind,
            });
        }
    }
    if in_scope.is_empty() {
        return Err(PlanError::UnknownSymbol {
            name: name.to_string(),
            module: module.map(str::to_string),
            suggestion: suggest(symbols, name),
        });
    }
    let text: Vec<_> = in_scope.iter().filter(|s| s.is_text()).collect();
    if text.len() > 1 {
        return Err(PlanError::Ambiguous {
            name: name.to_string(),
            instances: text.iter().map(|s| s.label()).collect(),
        });
    }
    Ok(text
        .first()
        .map(|s| s.address)
        .filter(|_| !symbols.addresses_hidden()))
}

/// Checks that `name@addr` is one of the functions called `name`.
fn check_instance(
    symbols: &KernelSymbols,
    module: Option<&str>,
    name: &str,
    addr: u64,
) -> Result<(), PlanError> {
    let text: Vec<_> = symbols
        .lookup(name)
        .into_iter()
        .filter(|s| s.is_text() && (module.is_none() || s.module.as_deref() == module))
        .collect();
    if symbols.addresses_hidden() || text.iter().any(|s| s.address == addr) {
        return Ok(());
    }
    if text.is_empty() {
        return Err(PlanError::UnknownSymbol {
            name: name.to_string(),
            module: module.map(str::to_string),
            suggestion: suggest(symbols, name),
        });
    }
    Err(PlanError::NoSuchInstance {
        name: name.to_string(),
        address: addr,
        instances: text.iter().map(|s| s.label()).collect(),
    })
}

/// A text symbol one or two edits away, tried only on the error path.
fn suggest(symbols: &KernelSymbols, name: &str) -> Option<String> {
    symbols
        .names()
        .filter(|n| n.len().abs_diff(name.len()) <= 2)
        .filter_map(|n| {
            let d = kprobe_perf_arch::edit_distance(n, name);
            (d <= 2).then_some((d, n))
        })
        .min()
        .map(|(_, n)| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::BaseType;

    fn syms() -> KernelSymbols {
        KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\nffffffff81234660 T do_sys_open\nffffffff81300000 D jiffies\nffffffffc0001000 t ext4_file_open\t[ext4]\n",
        )
        .unwrap()
    }

    #[test]
    fn uprobes_through_uprobe_events_fetch_the_same_registers() {
        let p = plan("p:/bin/true:0x1000 a=$arg1 %si:u32 $arg2 c=$comm")
            .unwrap()
            .through_uprobe_events();
        assert_eq!(p.backend, Backend::Tracefs);
        assert_eq!(p.regs_mask, 0);
        assert!(p.args.iter().all(|a| a.source == ArgSource::Field));
        assert_eq!(
            p.tracefs_definition("kprobe_perf_7_0"),
            "p:kprobe_perf_7_0/p_true_0x1000 /bin/true:0x1000 a=%di arg2=%si:u32 arg3=%si c=$comm"
        );
        let r = plan("r:/bin/true:0x1000 ret=$retval")
            .unwrap()
            .through_uprobe_events();
        assert_eq!(
            r.tracefs_definition("g"),
            "r:g/r_true_0x1000 /bin/true:0x1000 ret=$retval"
        );
        // --backend tracefs (and a perf.data file's replay) plans the same.
        let forced = plan_with(
            "p:/bin/true:0x1000 a=$arg1 %si:u32 $arg2 c=$comm",
            BackendChoice::Tracefs,
        )
        .unwrap();
        assert_eq!(forced, p);
        // Kernel probes are left as they are.
        let k = plan("p:do_sys_openat2 %di").unwrap();
        assert_eq!(k.clone().through_uprobe_events(), k);
    }

    fn plan_with(text: &str, choice: BackendChoice) -> Result<ProbePlan, PlanError> {
        resolve(
            ProbeSpec::parse(text, Arch::X86_64).unwrap(),
            &syms(),
            Arch::X86_64,
            choice,
        )
    }

    fn plan(text: &str) -> Result<ProbePlan, PlanError> {
        plan_with(text, BackendChoice::Auto)
    }

    fn reg_name(a: &ArgPlan) -> &'static str {
        match a.source {
            ArgSource::Register(r) => r.name,
            _ => "-",
        }
    }

    #[test]
    fn registers_and_mask() {
        let p = plan("p:do_sys_openat2 dfd=%di $arg2 sp=$stack c=$comm").unwrap();
        assert_eq!(p.backend, Backend::Pmu);
        assert_eq!(
            p.attach,
            AttachPoint::Symbol {
                name: "do_sys_openat2".into(),
                offset: 0
            }
        );
        let regs: Vec<_> = p
            .args
            .iter()
            .map(|a| (a.name.as_str(), reg_name(a)))
            .collect();
        assert_eq!(
            regs,
            vec![("dfd", "di"), ("arg2", "si"), ("sp", "sp"), ("c", "-")]
        );
        assert_eq!(p.args[3].source, ArgSource::Comm);
        assert_eq!(p.regs_mask, (1 << 5) | (1 << 4) | (1 << 7));
        let r = plan("r:do_sys_openat2 ret=$retval:s32").unwrap();
        assert!(r.is_return());
        assert_eq!(reg_name(&r.args[0]), "ax");
        assert_eq!(r.args[0].ty, ArgType::scalar(BaseType::Signed(32)));
    }

    #[test]
    fn backend_choice() {
        for (text, reason) in [
            ("r64:do_sys_openat2", "maxactive (r64:)"),
            (
                "p:do_sys_openat2 +0(%si):ustring",
                "+0(%si):ustring (the kernel must fetch it at hit time)",
            ),
            (
                "p:do_sys_openat2 $stack2",
                "$stack2 (the kernel must fetch it at hit time)",
            ),
            (
                "p:do_sys_openat2 $arg7",
                "$arg7 (the kernel must fetch it at hit time)",
            ),
            (
                "p:do_sys_openat2 @jiffies",
                "@jiffies (the kernel must fetch it at hit time)",
            ),
        ] {
            let p = plan(text).unwrap();
            assert_eq!(p.backend, Backend::Tracefs, "{text}");
            assert!(p.args.iter().all(|a| a.source == ArgSource::Field));
            assert_eq!(
                plan_with(text, BackendChoice::Pmu).unwrap_err().to_string(),
                format!("{reason} needs a dynamic_events definition, which --backend pmu rules out; drop --backend pmu (auto defines such probes through tracefs)")
            );
        }
        let forced = plan_with("p:do_sys_openat2 %di", BackendChoice::Tracefs).unwrap();
        assert_eq!(forced.backend, Backend::Tracefs);
        assert_eq!(
            forced.tracefs_definition("kprobe_perf_7"),
            "p:kprobe_perf_7/p_do_sys_openat2_0 do_sys_openat2 %di"
        );
    }

    #[test]
    fn unknown_symbol_is_named_with_a_suggestion() {
        let e = plan("p:do_sys_opnat2").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown symbol do_sys_opnat2: it is not in /proc/kallsyms; did you mean do_sys_openat2?"
        );
        let e = plan("p:ext4:do_sys_open").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("unknown symbol do_sys_open in module ext4"),
            "{e}"
        );
        assert_eq!(
            plan("p:ext4:ext4_file_open").unwrap().resolved_address,
            Some(0xffffffffc0001000)
        );
        let dup = KernelSymbols::parse("ffffffff81000000 t init_once\nffffffff81000100 T x\nffffffffc0000000 t init_once\t[ext4]\n").unwrap();
        let e = resolve(
            ProbeSpec::parse("p:init_once", Arch::X86_64).unwrap(),
            &dup,
            Arch::X86_64,
            BackendChoice::Auto,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "init_once names 2 functions (init_once@0xffffffff81000000, init_once@0xffffffffc0000000 [ext4]); pick one as written there (init_once@0xADDR) or as MOD:init_once for a module's, or probe them all with --all-instances");
        let picked = resolve(
            ProbeSpec::parse("p:init_once@0xffffffffc0000000+4 %di", Arch::X86_64).unwrap(),
            &dup,
            Arch::X86_64,
            BackendChoice::Auto,
        )
        .unwrap();
        assert_eq!(picked.attach, AttachPoint::Address(0xffffffffc0000004));
        assert_eq!(picked.resolved_address, Some(0xffffffffc0000000));
        assert_eq!(picked.event, "p_init_once_4");
        assert_eq!(
            picked.tracefs_definition("g"),
            "p:g/p_init_once_4 0xffffffffc0000004 %di"
        );
        let wrong = resolve(
            ProbeSpec::parse("p:init_once@0xffffffff81000004", Arch::X86_64).unwrap(),
            &dup,
            Arch::X86_64,
            BackendChoice::Auto,
        )
        .unwrap_err();
        assert_eq!(wrong.to_string(), "no function init_once starts at 0xffffffff81000004; the functions of that name are init_once@0xffffffff81000000, init_once@0xffffffffc0000000 [ext4]");
        let one = resolve(
            ProbeSpec::parse("p:ext4:init_once", Arch::X86_64).unwrap(),
            &dup,
            Arch::X86_64,
            BackendChoice::Auto,
        )
        .unwrap();
        assert_eq!(one.resolved_address, Some(0xffffffffc0000000));
        assert_eq!(
            plan("p:jiffies").unwrap_err(),
            PlanError::NotText {
                name: "jiffies".into(),
                kind: 'D'
            }
        );
    }

    /// Bare names from the host kernel's BTF (skipped without one).
    #[test]
    fn btf_names_become_typed_register_args() {
        if let Err(e) = KernelBtf::running_kernel() {
            println!("SKIP btf_names_become_typed_register_args: {e}");
            return;
        }
        let p = plan("p:do_sys_openat2 dfd filename +0(how):x64").unwrap();
        assert_eq!(
            p.spec.to_string(),
            "p do_sys_openat2 dfd=$arg1:s32 filename=$arg2:x64 +0($arg3):x64"
        );
        assert_eq!(p.backend, Backend::Tracefs, "+0(how) reads memory");
        let p = plan("p:do_sys_openat2 dfd filename").unwrap();
        assert_eq!(p.backend, Backend::Pmu);
        assert_eq!(
            (reg_name(&p.args[0]), p.args[0].name.as_str()),
            ("di", "dfd")
        );
        assert_eq!(p.args[1].ty, ArgType::scalar(BaseType::Hex(64)));
        assert_eq!(
            plan("p:do_sys_openat2 dfdd").unwrap_err().to_string(),
            "do_sys_openat2: it has no parameter dfdd; did you mean dfd? its parameters are dfd, filename, how"
        );
        assert_eq!(
            plan("r:do_sys_openat2 dfd").unwrap_err().to_string(),
            "do_sys_openat2: argument names read parameters at the entry; at the return their registers hold other values: probe the entry (p:) for parameters and use $retval here"
        );
    }
}
