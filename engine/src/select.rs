//! Which functions a glob such as `tcp_v4_*` or `ext4:*` selects for
//! probing, and why each candidate is kept or left out: what the kernel
//! would refuse (its blacklist and protected sections, padding, `notrace`),
//! and by default the families that are fragile under many probes at once.

use std::fmt;

use kprobe_perf_symbols::{Exclusion, KernelSymbols, Symbol};

use crate::preflight::{FunctionRefusal, Preflight};

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
                "fragile under bulk probing (the \"{family}\" family runs on the probe path or everywhere); add --include-fragile to keep it"
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
            duplicate: symbols.lookup(&symbol.name).iter().filter(|s| s.is_text()).count() > 1,
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

/// Reads `available_filter_functions` from tracefs: the names the kernel
/// can trace (modules' as `name [module]`, kept by name).
pub fn traceable_functions(
) -> Result<std::collections::HashSet<String>, crate::tracefs::TracefsError> {
    let fs = crate::tracefs::Tracefs::find()?;
    let path = fs.root().join("available_filter_functions");
    let text = std::fs::read_to_string(&path).map_err(|source| crate::tracefs::TracefsError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

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
                    Some(Excluded::Kernel(FunctionRefusal::Excluded(Exclusion::Padding)))
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
