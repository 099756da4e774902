//! From a parsed probe to what the kernel is asked for: where the probe goes,
//! which registers a sample must carry, and how each argument is decoded.
//! Every mistake a user can make is reported here, before any fd is opened.

use kprobe_perf_arch::{Arch, Register};
use kprobe_perf_symbols::KernelSymbols;

use crate::spec::{BaseType, FetchBase, ProbeKind, ProbeSpec, Target};

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
    #[error(
        "{what} needs a dynamic_events definition, which this build cannot make yet; {instead}"
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
}

/// How one argument is fetched and shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgPlan {
    /// Display name (`NAME=` or `argN`).
    pub name: String,
    /// The sampled register holding the value.
    pub register: Register,
    /// Type used for printing (default x64).
    pub ty: BaseType,
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
    /// Arguments in order.
    pub args: Vec<ArgPlan>,
    /// `sample_regs_intr`: the registers the arguments need.
    pub regs_mask: u64,
}

impl ProbePlan {
    /// True for a kretprobe.
    pub fn is_return(&self) -> bool {
        matches!(self.spec.kind, ProbeKind::Return { .. })
    }
}

/// Plans a parsed probe against the kernel's symbols. When `symbols` is
/// empty (kallsyms unreadable), names are left for the kernel to check.
pub fn resolve(
    spec: ProbeSpec,
    symbols: &KernelSymbols,
    arch: Arch,
) -> Result<ProbePlan, PlanError> {
    if let ProbeKind::Return { maxactive: Some(n) } = spec.kind {
        return Err(PlanError::NeedsTracefs {
            what: format!("maxactive (r{n}:)"),
            instead: "write r: to get the kernel's default number of instances".into(),
        });
    }
    let attach = match &spec.target {
        Target::Symbol {
            module,
            name,
            offset,
        } => {
            if !symbols.is_empty() {
                check_symbol(symbols, module.as_deref(), name)?;
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
        Target::User { .. } => {
            return Err(PlanError::Unsupported {
                what: "uprobes (PATH:SYMBOL targets)".into(),
                instead: "probe a kernel function".into(),
            })
        }
    };
    let mut args = Vec::with_capacity(spec.args.len());
    let mut regs_mask = 0u64;
    for (i, a) in spec.args.iter().enumerate() {
        let register = register_of(&spec, i, arch)?;
        regs_mask |= 1u64 << register.perf_index;
        let ty = a.effective_type();
        if ty.array.is_some() || ty.base.is_string() {
            return Err(needs_kernel_fetch(&a.to_string()));
        }
        args.push(ArgPlan {
            name: spec.arg_name(i),
            register,
            ty: ty.base,
        });
    }
    Ok(ProbePlan {
        event: spec.event_name(),
        spec,
        attach,
        args,
        regs_mask,
    })
}

fn needs_kernel_fetch(arg: &str) -> PlanError {
    PlanError::NeedsTracefs {
        what: format!("{arg} (a fetch from kernel memory at hit time)"),
        instead: "fetch registers (%REG, $argN, $retval, $stack) for now".into(),
    }
}

/// The sampled register argument `i` of `spec` is read from.
fn register_of(spec: &ProbeSpec, i: usize, arch: Arch) -> Result<Register, PlanError> {
    let a = &spec.args[i];
    if a.fetch.reads_memory() {
        return Err(needs_kernel_fetch(&a.to_string()));
    }
    let found = match &a.fetch.base {
        FetchBase::Register(r) => arch.register(r),
        FetchBase::Arg(n) => match arch.arg_register(*n) {
            Some(r) => Some(r),
            None => {
                return Err(PlanError::NeedsTracefs {
                    what: format!("$arg{n} (passed on the stack on {})", arch.name()),
                    instead: "only the register arguments ($arg1..$arg6) can be read until kernel-side fetches are supported".to_string(),
                })
            }
        },
        FetchBase::Retval => Some(arch.retval_register()),
        FetchBase::Stack => Some(arch.stack_register()),
        FetchBase::Name(n) => {
            return Err(PlanError::Unsupported {
                what: format!("the argument name {n} (resolved from BTF)"),
                instead: "name the argument with $argN, as in dfd=$arg1".into(),
            })
        }
        FetchBase::Comm => {
            return Err(PlanError::Unsupported {
                what: "$comm as an argument".into(),
                instead: "every event line already starts with the command name".into(),
            })
        }
        FetchBase::StackEntry(_)
        | FetchBase::Immediate(_)
        | FetchBase::Address(_)
        | FetchBase::Symbol { .. }
        | FetchBase::FileOffset(_) => return Err(needs_kernel_fetch(&a.to_string())),
    };
    // The spec parser refused registers `arch` does not have.
    found.ok_or_else(|| needs_kernel_fetch(&a.to_string()))
}

fn check_symbol(
    symbols: &KernelSymbols,
    module: Option<&str>,
    name: &str,
) -> Result<(), PlanError> {
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
    Ok(())
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

    fn syms() -> KernelSymbols {
        KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff81234570 T do_sys_openat2\nffffffff81234660 T do_sys_open\nffffffff81300000 D jiffies\nffffffffc0001000 t ext4_file_open\t[ext4]\n",
        )
        .unwrap()
    }

    fn plan(text: &str) -> Result<ProbePlan, PlanError> {
        resolve(
            ProbeSpec::parse(text, Arch::X86_64).unwrap(),
            &syms(),
            Arch::X86_64,
        )
    }

    #[test]
    fn registers_and_mask() {
        let p = plan("p:do_sys_openat2 dfd=%di $arg2 sp=$stack").unwrap();
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
            .map(|a| (a.name.as_str(), a.register.name))
            .collect();
        assert_eq!(regs, vec![("dfd", "di"), ("arg2", "si"), ("sp", "sp")]);
        assert_eq!(p.regs_mask, (1 << 5) | (1 << 4) | (1 << 7));
        let r = plan("r:do_sys_openat2 ret=$retval:s32").unwrap();
        assert!(r.is_return());
        assert_eq!(r.args[0].register.name, "ax");
        assert_eq!(r.args[0].ty, BaseType::Signed(32));
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
        assert!(plan("p:ext4:ext4_file_open").is_ok());
        assert_eq!(
            plan("p:jiffies").unwrap_err(),
            PlanError::NotText {
                name: "jiffies".into(),
                kind: 'D'
            }
        );
    }
}
