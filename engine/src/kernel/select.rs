//! Which functions a glob such as `tcp_v4_*` or `ext4:*` selects for
//! probing, and why each candidate is kept or left out: what the kernel
//! would refuse (its blacklist and protected sections, padding, `notrace`),
//! and by default the families that are fragile under many probes at once.

use std::fmt;

use kprobe_perf_symbols::{Exclusion, KernelSymbols, Symbol};

use crate::kernel::preflight::{FunctionRefusal, Preflight};

/// Name fragments of functions kept out of globs by default: the
/// machinery a probe hit runs through (kprobes, ftrace, perf, tracing,
/// RCU, locking, preemption and interrupt accounting, the scheduler,
/// unwinding), low-level arch code, and console output. Probing hundreds
/// of these at once recurses into the probe handler or slows every CPU to
/// a crawl; a user who means it asks with `--include-fragile`.
pub const FRAGILE_FAMILIES: &[&str] = &[
    "kprobe",
    "ftrace",
    "trace",
    "perf_",
    "rcu",
    "lock",
    "spin",
    "mutex",
    "sched",
    "preempt",
    "irq",
    "nmi",
    "idle",
    "entry",
    "exit_to",
    "syscall_enter",
    "arch_",
    "native_",
    "x86_",
    "text_poke",
    "ring_buffer",
    "bpf",
    "stack",
    "unwind",
    "kallsyms",
    "mcount",
    "fentry",
    "do_int3",
    "debug",
    "printk",
    "console",
    "hrtimer",
    "tick",
    "clock",
    "cpuidle",
    "smp_",
    "page_fault",
    "switch",
    "context",
    "kasan",
    "kcsan",
    "kmsan",
];

/// Why a candidate of a glob is left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Excluded {
    /// The kernel would refuse it.
    Kernel(FunctionRefusal),
    /// A `.cold` fragment: not a function entry (the kernel takes it, but
    /// it is never what a glob means).
    Fragment,
    /// Not in `available_filter_functions`, the kernel's list of traceable
    /// functions: `notrace`.
    NotInFilterList,
    /// In a family fragile under bulk probing ([`FRAGILE_FAMILIES`]).
    Fragile {
        /// The name fragment that matched.
        family: &'static str,
    },
}

impl fmt::Display for Excluded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Excluded::Kernel(r) => write!(f, "{r}"),
            Excluded::Fragment => f.write_str(
                "a .cold fragment split off a function, not a function entry",
            ),
            Excluded::NotInFilterList => f.write_str(
                "notrace (not in available_filter_functions), which kprobe events refuse",
            ),
            Excluded::Fragile { family } => write!(
                f,
                "fragile under bulk probing (the \"{family}\" family runs on the probe path or everywhere); include the fragile families to keep it"
            ),
        }
    }
}

/// How candidates are judged.
#[derive(Default)]
pub struct SelectOptions<'a> {
    /// Bytes-based checks (notrace, when kernel text is readable).
    pub preflight: Option<&'a Preflight<'a>>,
    /// The names in `available_filter_functions`, when readable: the
    /// kernel's own list of traceable functions, used for `notrace` when
    /// there is no `preflight`.
    pub traceable: Option<&'a std::collections::HashSet<String>>,
    /// Keep [`FRAGILE_FAMILIES`].
    pub include_fragile: bool,
    /// In [`expand_globs`], also expand a plain name shared by several
    /// functions into one probe per instance.
    pub all_instances: bool,
}

/// One function a glob matched.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    /// The symbol.
    pub symbol: &'a Symbol,
    /// Why it is left out; `None` when kept.
    pub excluded: Option<Excluded>,
    /// True when other text symbols share its name (it is then probed by
    /// address).
    pub duplicate: bool,
}

/// Every text symbol `pattern` matches, in address order, each kept or
/// excluded with its reason.
pub fn candidates<'a>(
    symbols: &'a KernelSymbols,
    pattern: &str,
    opts: &SelectOptions<'_>,
) -> Vec<Candidate<'a>> {
    symbols
        .matches(pattern)
        .into_iter()
        .map(|symbol| Candidate {
            symbol,
            excluded: judge(symbols, symbol, opts),
            duplicate: symbols
                .lookup(&symbol.name)
                .iter()
                .filter(|s| s.is_text())
                .count()
                > 1,
        })
        .collect()
}

fn judge(symbols: &KernelSymbols, sym: &Symbol, opts: &SelectOptions<'_>) -> Option<Excluded> {
    match symbols.exclusion(sym) {
        Some(Exclusion::ColdFragment) => return Some(Excluded::Fragment),
        Some(x) => return Some(Excluded::Kernel(FunctionRefusal::Excluded(x))),
        None => {}
    }
    if !opts.include_fragile {
        if let Some(family) = FRAGILE_FAMILIES.iter().find(|f| sym.name.contains(*f)) {
            return Some(Excluded::Fragile { family });
        }
    }
    if let Some(p) = opts.preflight {
        if let Ok(f) = p.function(sym) {
            return p.function_refusal(&f).map(Excluded::Kernel);
        }
    }
    if let Some(t) = opts.traceable {
        if !t.contains(&sym.name) {
            return Some(Excluded::NotInFilterList);
        }
    }
    None
}

/// Expands each definition whose target is a glob (`p:tcp_v4_* %di`,
/// `r:ext4:ext4_file_*`) into one definition per function the glob keeps
/// (see [`candidates`]), in address order; a function sharing its name
/// with others is written `NAME@0xADDR`. Other definitions pass through
/// unchanged. A glob with an event name or an offset, or one that keeps
/// nothing, is an error saying what to do.
pub fn expand_globs<S: AsRef<str>>(
    specs: &[S],
    symbols: &KernelSymbols,
    arch: kprobe_perf_arch::Arch,
    opts: &SelectOptions<'_>,
) -> Result<Vec<String>, crate::kernel::error::KernelError> {
    use crate::plan::PlanError;
    use kprobe_perf_spec::{Definition, ProbeSpec, Target};
    let mut out = Vec::with_capacity(specs.len());
    for text in specs {
        let text = text.as_ref();
        let spec = match Definition::parse(text, arch)? {
            Definition::Probe(spec) => spec,
            _ => {
                out.push(text.to_string());
                continue;
            }
        };
        let Target::Symbol { module, name, .. } = &spec.target else {
            out.push(text.to_string());
            continue;
        };
        let pattern = match module {
            Some(m) => format!("{m}:{name}"),
            None => name.clone(),
        };
        let shared = opts.all_instances
            && spec.target_module().is_none()
            && !matches!(
                spec.target,
                Target::Symbol {
                    instance: Some(_),
                    ..
                }
            )
            && symbols.lookup(name).iter().filter(|s| s.is_text()).count() > 1;
        if !kprobe_perf_symbols::is_glob(&pattern) && !shared {
            out.push(text.to_string());
            continue;
        }
        let glob_error = |reason: String| {
            crate::kernel::error::KernelError::from(PlanError::Glob {
                pattern: pattern.clone(),
                reason,
            })
        };
        if spec.event.is_some() {
            return Err(glob_error(
                "this makes one probe per function, each named after its function; leave out the event name".into(),
            ));
        }
        let found: Vec<Candidate<'_>> = if shared {
            // Every instance: the user named this function, so only what
            // the kernel refuses is left out.
            let keep_all = SelectOptions {
                include_fragile: true,
                ..*opts
            };
            candidates(symbols, &pattern, &keep_all)
        } else {
            candidates(symbols, &pattern, opts)
        };
        let kept: Vec<&Candidate<'_>> = found.iter().filter(|c| c.excluded.is_none()).collect();
        if kept.is_empty() {
            return Err(crate::kernel::error::KernelError::from(
                PlanError::AllExcluded {
                    pattern: pattern.clone(),
                    matched: found.len(),
                },
            ));
        }
        for c in kept {
            let one = ProbeSpec {
                target: Target::Symbol {
                    module: c.symbol.module.clone(),
                    name: c.symbol.name.clone(),
                    instance: c.duplicate.then_some(c.symbol.address),
                    offset: 0,
                },
                ..spec.clone()
            };
            out.push(one.to_string());
        }
    }
    Ok(out)
}

/// Reads `available_filter_functions` from tracefs: the names the kernel
/// can trace (modules' as `name [module]`, kept by name); `None` where
/// tracefs is not mounted or not readable.
pub(crate) fn traceable_functions() -> Option<std::collections::HashSet<String>> {
    let text = crate::plan::TRACEFS_ROOTS.iter().find_map(|root| {
        std::fs::read_to_string(format!("{root}/available_filter_functions")).ok()
    })?;
    Some(
        text.lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_in_definitions_expand_to_each_kept_function() {
        let syms = KernelSymbols::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81000110 T tcp_v4_rcv\n\
             ffffffff81000200 t tcp_v4_spin\n\
             ffffffff81000300 t init_once\n\
             ffffffff81000400 t init_once\n\
             ffffffff81000500 T _etext\n",
        )
        .unwrap();
        let arch = kprobe_perf_arch::Arch::X86_64;
        let opts = SelectOptions::default();
        let out = expand_globs(
            &["r:tcp_v4_* ret=$retval", "p:init_onc? %di", "p:do_sys_open"],
            &syms,
            arch,
            &opts,
        )
        .unwrap();
        assert_eq!(
            out,
            [
                "r tcp_v4_rcv ret=$retval",
                "p init_once@0xffffffff81000300 %di",
                "p init_once@0xffffffff81000400 %di",
                "p:do_sys_open"
            ]
        );
        let e = expand_globs(&["p:x tcp_*"], &syms, arch, &opts).unwrap_err();
        assert_eq!(e.to_string(), "tcp_*: this makes one probe per function, each named after its function; leave out the event name");
        let all = SelectOptions {
            all_instances: true,
            ..SelectOptions::default()
        };
        assert_eq!(
            expand_globs(
                &["p:init_once", "p:init_once@0xffffffff81000300"],
                &syms,
                arch,
                &all
            )
            .unwrap(),
            [
                "p init_once@0xffffffff81000300",
                "p init_once@0xffffffff81000400",
                "p:init_once@0xffffffff81000300"
            ]
        );
        let e = expand_globs(&["p:*spin*"], &syms, arch, &opts).unwrap_err();
        assert!(
            matches!(&e, crate::kernel::error::KernelError::Plan(crate::plan::PlanError::AllExcluded { pattern, matched: 1 }) if pattern == "*spin*"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "*spin*: matches no function that can be probed (1 matched, all excluded); list them with the reason each is left out");
    }

    #[test]
    fn globs_keep_plain_functions_and_say_why_others_go() {
        let syms = KernelSymbols::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81000100 T __pfx_tcp_v4_rcv\n\
             ffffffff81000110 T tcp_v4_rcv\n\
             ffffffff81000200 t tcp_v4_fill_cb.cold\n\
             ffffffff81000300 t tcp_v4_lock_sock\n\
             ffffffff81000400 t tcp_v4_gso_segs\n\
             ffffffff81000500 T _etext\n",
        )
        .unwrap();
        let traceable: std::collections::HashSet<String> =
            ["tcp_v4_rcv", "tcp_v4_lock_sock"].map(String::from).into();
        let opts = SelectOptions {
            traceable: Some(&traceable),
            ..SelectOptions::default()
        };
        let got: Vec<(String, Option<Excluded>)> = candidates(&syms, "*tcp_v4_*", &opts)
            .into_iter()
            .map(|c| (c.symbol.name.clone(), c.excluded))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "__pfx_tcp_v4_rcv".into(),
                    Some(Excluded::Kernel(FunctionRefusal::Excluded(
                        Exclusion::Padding
                    )))
                ),
                ("tcp_v4_rcv".into(), None),
                ("tcp_v4_fill_cb.cold".into(), Some(Excluded::Fragment)),
                (
                    "tcp_v4_lock_sock".into(),
                    Some(Excluded::Fragile { family: "lock" })
                ),
                ("tcp_v4_gso_segs".into(), Some(Excluded::NotInFilterList)),
            ]
        );
    }
}
