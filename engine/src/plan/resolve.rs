//! Planning one probe: [`resolve`] and [`resolve_with`] check a parsed
//! probe against the kernel's symbols, BTF and features and choose its
//! backend; a return probe whose entry values the kernel cannot fetch goes
//! to [`crate::plan::entry_join`].

use kprobe_perf_arch::Arch;
use kprobe_perf_symbols::prototypes::{BtfError, KernelBtf, Param, Prototype, Shape};
use kprobe_perf_symbols::KernelSymbols;

use crate::plan::entry_join;
use crate::plan::probe_plan::{
    return_trampoline, tracefs_reason, ArgPlan, ArgSource, AttachPoint, Backend, BackendChoice,
    PlanError, ProbePlan,
};
use crate::plan::uprobe;
use kprobe_perf_spec::{ArgType, FetchBase, KernelFeatures, ProbeSpec, Target};

/// Where tracefs is mounted, the first that holds it: its own mount
/// point, and debugfs's `tracing` directory on older systems.
pub const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The running kernel's features, from tracefs's `README` (or the
/// debugfs mount) and its release; `None` when no README can be read.
/// Read once.
pub fn running_kernel_features() -> Option<&'static KernelFeatures> {
    static FEATURES: std::sync::OnceLock<Option<KernelFeatures>> = std::sync::OnceLock::new();
    FEATURES
        .get_or_init(|| {
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
            TRACEFS_ROOTS
                .iter()
                .find_map(|root| std::fs::read_to_string(format!("{root}/README")).ok())
                .map(|t| KernelFeatures::from_readme(&t).with_release(release.trim()))
        })
        .as_ref()
}

/// Refuses the form of a probe its kernel lacks or refuses, if any,
/// naming the feature or the release.
fn refuse_lack(lack: Option<kprobe_perf_spec::Lacking>) -> Result<(), PlanError> {
    match lack {
        Some(lack) => match lack.release {
            Some((major, minor)) => Err(PlanError::KernelRefuses {
                release: format!("{major}.{minor}"),
                what: lack.what,
                needs: lack.needs.to_string(),
            }),
            None => Err(PlanError::KernelLacks {
                what: lack.what,
                needs: lack.needs.to_string(),
            }),
        },
        None => Ok(()),
    }
}

/// Plans a parsed probe against the kernel's symbols. When `symbols` is
/// empty (kallsyms unreadable), names are left for the kernel to check.
pub fn resolve(
    spec: ProbeSpec,
    symbols: &KernelSymbols,
    arch: Arch,
    choice: BackendChoice,
) -> Result<ProbePlan, PlanError> {
    resolve_with(spec, symbols, arch, choice, running_kernel_features())
}

/// The kernel reads `$argN` only at a function's entry; the parse leaves
/// that to the plan (`kprobe_on_func_entry` also takes +4 after an ENDBR,
/// which is not told apart here).
fn args_at_entry(spec: &ProbeSpec) -> Result<(), PlanError> {
    if let Target::Symbol { name, offset, .. } = &spec.target {
        let arg = spec
            .args
            .iter()
            .find(|a| matches!(a.fetch.base, FetchBase::Arg(_)));
        if let (true, Some(a)) = (*offset != 0, arg) {
            return Err(PlanError::Preflight {
                probe: format!("{name}+{offset}"),
                reason: format!("is not the function entry, where {} holds a parameter; fetch registers here instead (the kernel would answer EINVAL)", a.fetch),
            });
        }
    }
    Ok(())
}

/// As [`resolve`], against the given kernel features (`None`: unknown, so
/// the kernel is left to refuse what it lacks when the probe is defined).
pub fn resolve_with(
    spec: ProbeSpec,
    symbols: &KernelSymbols,
    arch: Arch,
    choice: BackendChoice,
    features: Option<&KernelFeatures>,
) -> Result<ProbePlan, PlanError> {
    let spec = short_form_with_names(spec, symbols);
    let spec = sdt_site(spec, arch)?;
    args_at_entry(&spec)?;
    if entry_join::needs_join(&spec, features) {
        return entry_join::plan_joined(spec, symbols, arch, choice, features, resolve_with);
    }
    if let Some(f) = features {
        // The README's forms matter where the kernel fetches; what the
        // release refuses, wherever the probe goes (a uprobe planned for
        // registers still goes to uprobe_events for a command or with
        // --backend tracefs).
        let lack = match tracefs_reason(&spec, arch) {
            Some(_) => f.lacking(&spec),
            None => f.refused_by_release(&spec),
        };
        refuse_lack(lack)?;
    }
    let (attach, resolved_address) = attach_point(&spec, symbols, arch)?;
    let pending_module = pending_module(&spec, symbols);
    let spec = if let Some(m) = &pending_module {
        pending_args(spec, m, arch)?
    } else if matches!(attach, AttachPoint::User { .. }) {
        if tracefs_reason(&spec, arch).is_none() && choice == BackendChoice::Tracefs {
            // Planned for registers, then given to uprobe_events with them.
            return resolve(spec, symbols, arch, BackendChoice::Pmu)
                .map(ProbePlan::through_uprobe_events);
        }
        // Memory, strings, `$stackN`: uprobe_events fetches them at hit
        // time; it knows no `$argN`, so those become their registers.
        user_args_as_registers(spec, arch)?
    } else {
        spec
    };
    let spec = resolve_names(spec, arch, KernelBtf::running_kernel)?;
    check_unique_names(&spec)?;
    let reason = tracefs_reason(&spec, arch).or_else(|| {
        pending_module.as_ref().map(|m| {
            format!("a probe on module {m}, which is not loaded (kprobe_events keeps it pending until {m} loads)")
        })
    });
    let backend = choose_backend(choice, reason)?;
    let (args, regs_mask) = arg_plans(&spec, backend, arch)?;
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
        entry_join: None,
        filter: None,
        auto_backend: choice == BackendChoice::Auto,
        pending_module,
    })
}

/// The module of a `MOD:SYM` kernel probe when kallsyms (readable) shows
/// no symbol of that module: it is not loaded.
fn pending_module(spec: &ProbeSpec, symbols: &KernelSymbols) -> Option<String> {
    match &spec.target {
        Target::Symbol {
            module: Some(m),
            instance: None,
            ..
        } if !symbols.is_empty() && !module_loaded(symbols, m) => Some(m.clone()),
        _ => None,
    }
}

/// True when kallsyms names a symbol of module `module`.
fn module_loaded(symbols: &KernelSymbols, module: &str) -> bool {
    symbols.iter().any(|s| s.module.as_deref() == Some(module))
}

/// A pending module probe's arguments as the kernel can take them before
/// the module is loaded: it cannot tell that the point is a function's
/// entry then, so `$argN` becomes its register (as perf probe writes it);
/// a return probe's entry values and argument names (the module's BTF)
/// need the loaded module.
fn pending_args(spec: ProbeSpec, module: &str, arch: Arch) -> Result<ProbeSpec, PlanError> {
    let by_name = spec
        .args
        .iter()
        .find(|a| matches!(a.fetch.base, FetchBase::Name(_) | FetchBase::AllArgs));
    let entry_value = spec.is_return()
        && spec
            .args
            .iter()
            .any(|a| matches!(a.fetch.base, FetchBase::Arg(_)));
    if let Some(a) = by_name {
        return Err(PlanError::User(format!(
            "{spec}: {a} needs the BTF of module {module}, which is not loaded; load it first, or fetch $argN or registers"
        )));
    }
    if entry_value {
        return Err(PlanError::User(format!(
            "{spec}: a return probe's entry values need module {module} loaded (the kernel places the entry probe then); load it first, or fetch $retval only"
        )));
    }
    user_args_as_registers(spec, arch)
}

/// The one site an SDT probe (`usdt:PATH:PROVIDER:NAME`) stands for, as
/// a uprobe at its file offset with its semaphore and operands; other
/// probes unchanged. One that matches several sites is refused here:
/// [`crate::kernel::Kernel::expand_globs`] makes one probe of each.
fn sdt_site(spec: ProbeSpec, arch: Arch) -> Result<ProbeSpec, PlanError> {
    let Some(mut sites) = crate::plan::sdt::sites(&spec, arch)? else {
        return Ok(spec);
    };
    if sites.len() == 1 {
        return Ok(sites.remove(0));
    }
    Err(PlanError::User(format!(
        "{spec} stands for {} probe sites ({}); expand it into one probe per site first",
        sites.len(),
        sites
            .iter()
            .map(|s| s.target.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// A uprobe's `$argN` as the register holding it (named as before), for
/// uprobe_events, which knows no `$argN`.
fn user_args_as_registers(mut spec: ProbeSpec, arch: Arch) -> Result<ProbeSpec, PlanError> {
    for i in 0..spec.args.len() {
        let name = spec.arg_name(i);
        let a = &mut spec.args[i];
        if let FetchBase::Arg(n) = a.fetch.base {
            let reg = arch
                .arg_register(n)
                .ok_or_else(|| bad_register(&format!("arg{n}"), arch))?;
            a.fetch.base = FetchBase::Register(reg.name.to_string());
            a.name = Some(name);
        }
    }
    Ok(spec)
}

/// Where `spec` goes (checked against the symbols, and a uprobe against
/// its binary's bytes), and the function's address when known.
fn attach_point(
    spec: &ProbeSpec,
    symbols: &KernelSymbols,
    arch: Arch,
) -> Result<(AttachPoint, Option<u64>), PlanError> {
    let mut resolved_address = None;
    let attach = match &spec.target {
        Target::Fprobe { name } => {
            resolved_address = fprobe_address(symbols, name)?;
            AttachPoint::Symbol {
                name: name.clone(),
                offset: 0,
            }
        }
        Target::Tracepoint { name } => {
            if !symbols.is_empty() && symbols.lookup(&format!("__tracepoint_{name}")).is_empty() {
                return Err(PlanError::UnknownSymbol {
                    name: format!("tracepoint {name}"),
                    module: None,
                    suggestion: suggest(symbols, &format!("__tracepoint_{name}"))
                        .and_then(|s| s.strip_prefix("__tracepoint_").map(str::to_string)),
                });
            }
            AttachPoint::Symbol {
                name: name.clone(),
                offset: 0,
            }
        }
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
            // A module not loaded yet is checked against its .ko
            // (Kernel::check); kprobe_events arms the probe on its load.
            let loaded = module.as_deref().is_none_or(|m| module_loaded(symbols, m));
            if !symbols.is_empty() && loaded {
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
            let (offset, ref_ctr) = uprobe::check_uprobe(path, location, site, arch)?;
            AttachPoint::User {
                path: path.clone(),
                offset,
                ref_ctr,
            }
        }
    };
    Ok((attach, resolved_address))
}

/// Checks an fprobe's function (or glob) against the symbols; its
/// address when it names exactly one function whose address is shown.
fn fprobe_address(symbols: &KernelSymbols, name: &str) -> Result<Option<u64>, PlanError> {
    let mut resolved_address = None;
    if !symbols.is_empty() {
        if name.contains(['*', '?', '[']) {
            if !symbols.matches(name).iter().any(|s| s.is_text()) {
                return Err(PlanError::Glob {
                    pattern: name.to_string(),
                    reason: "matches no function in /proc/kallsyms".into(),
                });
            }
        } else {
            let text: Vec<_> = symbols
                .lookup(name)
                .into_iter()
                .filter(|s| s.is_text())
                .collect();
            if text.is_empty() {
                return Err(PlanError::UnknownSymbol {
                    name: name.to_string(),
                    module: None,
                    suggestion: suggest(symbols, name),
                });
            }
            resolved_address = text
                .first()
                .map(|s| s.address)
                .filter(|_| text.len() == 1 && !symbols.addresses_hidden());
        }
    }
    Ok(resolved_address)
}

/// Refuses two arguments of `spec` with one name.
fn check_unique_names(spec: &ProbeSpec) -> Result<(), PlanError> {
    let mut names = std::collections::HashSet::new();
    for i in 0..spec.args.len() {
        let n = spec.arg_name(i);
        if !names.insert(n.clone()) {
            return Err(PlanError::DuplicateArgName { name: n });
        }
    }
    Ok(())
}

/// The backend `choice` gives a probe that needs tracefs for `reason`
/// (`None`: it does not).
fn choose_backend(choice: BackendChoice, reason: Option<String>) -> Result<Backend, PlanError> {
    let backend = match (choice, reason) {
        (BackendChoice::Tracefs, _) | (BackendChoice::Auto, Some(_)) => Backend::Tracefs,
        (BackendChoice::Pmu, Some(what)) => {
            return Err(PlanError::NeedsTracefs {
                what,
                instead: "choose the automatic backend, which defines such probes through tracefs"
                    .into(),
            })
        }
        (_, None) => Backend::Pmu,
    };
    Ok(backend)
}

/// How each argument of `spec` is read on `backend`, and the registers
/// the PMU samples for them.
fn arg_plans(
    spec: &ProbeSpec,
    backend: Backend,
    arch: Arch,
) -> Result<(Vec<ArgPlan>, u64), PlanError> {
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
    Ok((args, regs_mask))
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
    let first = kprobe_perf_spec::FetchArg {
        name: None,
        fetch: kprobe_perf_spec::Fetch {
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
    // The tracepoint's arguments are checked by the kernel.
    let Some(function) = btf_function(&spec)? else {
        return Ok(spec);
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
    let proto = btf()
        .and_then(|b| b.function(&function))
        .map_err(|e| fail(e.to_string()))?;
    // Return probes and fprobes: the kernel saves or fetches the named
    // parameters itself; the names are only checked here.
    let kernel_resolves = spec.is_return() || spec.target.is_dynamic_only();
    for a in &mut spec.args {
        let FetchBase::Name(n) = &a.fetch.base else {
            continue;
        };
        let n = n.clone();
        let Some(pos) = proto.position(&n) else {
            return Err(fail(no_such_parameter(&proto, &n)));
        };
        if kernel_resolves {
            continue;
        }
        let param = &proto.params[pos - 1];
        let n32 = u32::try_from(pos).unwrap_or(u32::MAX);
        if arch.arg_register(n32).is_none() {
            return Err(fail(format!(
                "{n} is parameter {pos}, passed on the stack on {} (only the first parameters are in registers); fetch it with +OFFS($stack)",
                arch.name()
            )));
        }
        let default = register_type(param).ok_or_else(|| {
            fail(format!(
                "{n} is a {} passed by value, which does not fit a register fetch",
                param.c_type
            ))
        })?;
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

/// The function whose BTF names `spec`'s arguments (`None`: a tracepoint,
/// whose arguments the kernel checks).
fn btf_function(spec: &ProbeSpec) -> Result<Option<String>, PlanError> {
    Ok(Some(match &spec.target {
        Target::Tracepoint { .. } => return Ok(None),
        Target::Fprobe { name } => name.clone(),
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
    }))
}

/// Why `n` names no parameter of `proto`: the closest names, and all.
fn no_such_parameter(proto: &Prototype, n: &str) -> String {
    let names: Vec<&str> = proto.params.iter().map(|p| p.name.as_str()).collect();
    let close = names
        .iter()
        .filter(|c| kprobe_perf_arch::edit_distance(c, n) <= 2)
        .min_by_key(|c| kprobe_perf_arch::edit_distance(c, n));
    let hint = close
        .map(|c| format!("did you mean {c}? "))
        .unwrap_or_default();
    format!(
        "it has no parameter {n}; {hint}its parameters are {}",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    )
}

/// The type a register fetch of `param` shows as by default (`None`: it
/// is not passed in a register).
fn register_type(param: &Param) -> Option<kprobe_perf_spec::BaseType> {
    Some(match param.shape {
        Shape::Int { size, signed } | Shape::Enum { size, signed } => {
            let bits = u8::try_from(size * 8).unwrap_or(64).clamp(8, 64);
            if signed {
                kprobe_perf_spec::BaseType::Signed(bits)
            } else {
                kprobe_perf_spec::BaseType::Unsigned(bits)
            }
        }
        Shape::Pointer => kprobe_perf_spec::BaseType::Hex(64),
        Shape::Float { .. } | Shape::Aggregate { .. } | Shape::Void => return None,
    })
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
    use kprobe_perf_spec::BaseType;

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

    #[test]
    fn automatic_kernel_probes_through_kprobe_events_fetch_the_same_registers() {
        let p = plan("p:do_sys_openat2 dfd=$arg1:s32 %dx:x32 c=$comm")
            .unwrap()
            .through_kprobe_events();
        assert_eq!(p.backend, Backend::Tracefs);
        assert_eq!(p.regs_mask, 0);
        assert!(p.args.iter().all(|a| a.source == ArgSource::Field));
        assert_eq!(
            p.tracefs_definition("g"),
            "p:g/p_do_sys_openat2_0 do_sys_openat2 dfd=%di:s32 arg2=%dx:x32 c=$comm"
        );
        // As --backend tracefs plans it, with $arg1 by its register.
        let forced = plan_with(
            "p:do_sys_openat2 dfd=%di:s32 %dx:x32 c=$comm",
            BackendChoice::Tracefs,
        )
        .unwrap();
        // The same fields (the kernel names the second arg2 either way).
        assert_eq!(forced.args, p.args);
        let r = plan("r:do_sys_openat2 ret=$retval:s64")
            .unwrap()
            .through_kprobe_events();
        assert_eq!(
            r.tracefs_definition("g"),
            "r:g/r_do_sys_openat2_0 do_sys_openat2 ret=$retval:s64"
        );
        // A backend the user chose, and uprobes, are left as they are.
        let pmu = plan_with("p:do_sys_openat2 %di", BackendChoice::Pmu).unwrap();
        assert_eq!(pmu.clone().through_kprobe_events(), pmu);
        let user = plan("p:/bin/true:0x1000 %di").unwrap();
        assert_eq!(user.clone().through_kprobe_events(), user);
    }

    /// Plans against a kernel with none of the newer forms (as 6.1): the
    /// host's own README never decides a unit test.
    fn plan_with(text: &str, choice: BackendChoice) -> Result<ProbePlan, PlanError> {
        plan_on(text, choice, &KernelFeatures::default())
    }

    fn plan_on(
        text: &str,
        choice: BackendChoice,
        features: &KernelFeatures,
    ) -> Result<ProbePlan, PlanError> {
        resolve_with(
            ProbeSpec::parse(text, Arch::X86_64).unwrap(),
            &syms(),
            Arch::X86_64,
            choice,
            Some(features),
        )
    }

    fn plan(text: &str) -> Result<ProbePlan, PlanError> {
        plan_with(text, BackendChoice::Auto)
    }

    #[test]
    fn a_probe_on_a_module_not_loaded_is_pending_through_kprobe_events() {
        let p = plan("p:binfmt_misc:bm_status_write count=$arg3:u64").unwrap();
        assert_eq!(p.pending_module.as_deref(), Some("binfmt_misc"));
        assert_eq!(p.backend, Backend::Tracefs);
        assert_eq!(p.resolved_address, None);
        // The kernel takes $argN only where it knows the function's
        // entry, which it cannot before the load: the register instead.
        assert_eq!(
            p.tracefs_definition("g"),
            "p:g/p_binfmt_misc_bm_status_write_0 binfmt_misc:bm_status_write count=%dx:u64"
        );
        let r = plan("r:binfmt_misc:bm_status_write ret=$retval:s64").unwrap();
        assert_eq!(r.pending_module.as_deref(), Some("binfmt_misc"));
        // A loaded module's probe is not pending.
        assert_eq!(plan("p:ext4:ext4_file_open").unwrap().pending_module, None);
        let e = plan_with("p:binfmt_misc:bm_status_write", BackendChoice::Pmu).unwrap_err();
        assert!(
            e.to_string()
                .contains("module binfmt_misc, which is not loaded"),
            "{e}"
        );
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
                format!("{reason} needs a dynamic_events definition, which the PMU backend rules out; choose the automatic backend, which defines such probes through tracefs")
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
        assert_eq!(e.to_string(), "init_once names 2 functions (init_once@0xffffffff81000000, init_once@0xffffffffc0000000 [ext4]); pick one as written there (init_once@0xADDR) or as MOD:init_once for a module's, or probe them all");
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
        // At a return, on a kernel that can fetch neither names nor entry
        // values there: a hidden entry probe fetches it (entry_join).
        let r = plan("r:do_sys_openat2 dfd").unwrap();
        let j = r.entry_join.as_deref().unwrap();
        assert_eq!(
            (reg_name(&j.entry.args[0]), r.args[0].name.as_str()),
            ("di", "dfd")
        );
        assert_eq!(r.args[0].ty, ArgType::scalar(BaseType::Signed(32)));
    }

    const README_6_1: &str = include_str!("../../tests/fixtures/README-6.1");
    const README_6_12: &str = include_str!("../../tests/fixtures/README-6.12");

    #[test]
    fn forms_the_kernel_lacks_are_refused_by_name() {
        let old = KernelFeatures::from_readme(README_6_1);
        let refused = [
            (
                "f:kpf/ret do_sys_openat2%return $retval",
                "fprobe events (f:); needs CONFIG_FPROBE_EVENTS, Linux 6.5+",
            ),
            (
                "t:kpf/ss sched_switch",
                "tracepoint probes (t:); needs CONFIG_FPROBE_EVENTS, Linux 6.5+",
            ),
            (
                "p:do_sys_openat2 $arg*",
                "$arg* (every parameter by BTF); needs CONFIG_PROBE_EVENTS_BTF_ARGS, Linux 6.5+",
            ),
            (
                "p:do_sys_openat2 how->flags",
                "BTF member access (how->flags); needs CONFIG_PROBE_EVENTS_BTF_ARGS, Linux 6.7+",
            ),
            (
                "p:do_sys_openat2 +0(%si):char",
                "char type (+0(%si):char); needs Linux 6.7+",
            ),
            (
                "p:do_sys_openat2 %si:%pd",
                "%pd type (%si:%pd); needs CONFIG_PROBE_EVENTS_BTF_ARGS, Linux 6.9+",
            ),
        ];
        for (text, why) in refused {
            assert_eq!(
                plan_on(text, BackendChoice::Auto, &old)
                    .unwrap_err()
                    .to_string(),
                format!("this kernel's tracefs README has no {why}"),
                "{text}"
            );
        }
        // Entry arguments in return probes (Linux 6.10+) are no longer
        // refused: they are fetched by a hidden entry probe (entry_join).
        let r = plan_on("r:do_sys_openat2 $arg1", BackendChoice::Auto, &old).unwrap();
        assert!(r.entry_join.is_some());
        // A register shown as a char needs no kernel support: the PMU
        // samples the register and the engine prints it.
        let p = plan_on("p:do_sys_openat2 %di:char", BackendChoice::Auto, &old).unwrap();
        assert_eq!(p.backend, Backend::Pmu);
        // symstr is in 6.1's README.
        let p = plan_on("p:do_sys_openat2 %si:symstr", BackendChoice::Auto, &old).unwrap();
        assert_eq!(p.backend, Backend::Tracefs);
    }

    #[test]
    fn newer_forms_go_through_tracefs_with_the_kernel_naming_fields() {
        let new = KernelFeatures::from_readme(README_6_12);
        let p = plan_on(
            "f:kpf/ret do_sys_openat2%return $retval",
            BackendChoice::Auto,
            &new,
        )
        .unwrap();
        assert_eq!(p.backend, Backend::Tracefs);
        assert!(p.args_from_kernel());
        assert_eq!(
            p.tracefs_definition("kprobe_perf_7"),
            "f:kprobe_perf_7/ret do_sys_openat2%return $retval"
        );
        let p = plan_on("f:kpf/all do_sys_*", BackendChoice::Auto, &new).unwrap();
        assert_eq!(p.tracefs_definition("g"), "f:g/all do_sys_*");
        assert_eq!(
            plan_on("f:kpf/none nothing_*", BackendChoice::Auto, &new)
                .unwrap_err()
                .to_string(),
            "nothing_*: matches no function in /proc/kallsyms"
        );
        assert_eq!(
            plan_on("f:do_sys_openx", BackendChoice::Auto, &new)
                .unwrap_err()
                .to_string(),
            "unknown symbol do_sys_openx: it is not in /proc/kallsyms; did you mean do_sys_open?"
        );
        assert_eq!(
            plan_on("f:kpf/x do_sys_open", BackendChoice::Pmu, &new).unwrap_err().to_string(),
            "an fprobe event (f:) needs a dynamic_events definition, which the PMU backend rules out; choose the automatic backend, which defines such probes through tracefs"
        );
        let p = plan_on("r:do_sys_openat2 $arg1 $retval", BackendChoice::Auto, &new).unwrap();
        assert_eq!((p.backend, p.args_from_kernel()), (Backend::Tracefs, true));
        // A plain tracefs probe keeps its own names.
        let p = plan_on("p:do_sys_openat2 +0(%si):string", BackendChoice::Auto, &new).unwrap();
        assert!(!p.args_from_kernel());
    }

    /// The format of `f:kpf/ra vfs_read%return $arg1 count $retval` and of
    /// a `char` array as the 6.12 VM showed them.
    #[test]
    fn fields_from_the_format_file() {
        let new = KernelFeatures::from_readme(README_6_12);
        let mut p = plan_on(
            "f:kpf/ra do_sys_openat2%return $arg1 $retval",
            BackendChoice::Auto,
            &new,
        )
        .unwrap();
        let format = "name: ra\nID: 1\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:unsigned long __probe_func;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:unsigned long __probe_ret_ip;\toffset:16;\tsize:8;\tsigned:0;\n\tfield:u64 file;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:s64 arg2;\toffset:32;\tsize:8;\tsigned:1;\n\nprint fmt: \"(%lx <- %lx) file=0x%Lx arg2=%Ld\", REC->__probe_func, REC->__probe_ret_ip, REC->file, REC->arg2\n";
        p.set_args_from_format(format);
        let got: Vec<_> = p
            .args
            .iter()
            .map(|a| (a.name.as_str(), a.ty.to_string()))
            .collect();
        assert_eq!(
            got,
            vec![("file", "x64".to_string()), ("arg2", "s64".to_string())]
        );
        let mut p = plan_on(
            "p:kpf/t do_sys_openat2 %di:char +0(%si):char[4] $comm",
            BackendChoice::Tracefs,
            &new,
        )
        .unwrap();
        let format = "format:\n\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:u8 arg1;\toffset:16;\tsize:1;\tsigned:0;\n\tfield:u8 arg2[];\toffset:17;\tsize:4;\tsigned:0;\n\tfield:__data_loc char[] arg3;\toffset:21;\tsize:4;\tsigned:1;\n\nprint fmt: \"(%lx) arg1='%c' arg2={'%c','%c','%c','%c'} arg3=\\\"%s\\\"\", REC->__probe_ip\n";
        p.set_args_from_format(format);
        let got: Vec<_> = p
            .args
            .iter()
            .map(|a| (a.name.as_str(), a.ty.to_string()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("arg1", "char".into()),
                ("arg2", "char[4]".into()),
                ("arg3", "string".to_string())
            ]
        );
    }
}
