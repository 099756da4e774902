//! The engine's errors in terms of this program's flags. The engine names
//! no flag (it has embedders other than this CLI); where its advice is a
//! flag of ours, the message printed here says which.

use std::error::Error as StdError;

use kprobe_perf_engine::analysis::AnalysisError;
use kprobe_perf_engine::cli::kernel::select::Excluded;
use kprobe_perf_engine::cli::kernel::source::DebugInfoError;
use kprobe_perf_engine::cli::kernel::KernelError;
use kprobe_perf_engine::cli::plan::PlanError;
use kprobe_perf_engine::cli::tracefs::TracefsError;
use kprobe_perf_engine::{AttachError, Error};

/// The error and its causes as anyhow's `{:#}` prints them (joined by
/// ": "), each engine error whose advice is a flag in this CLI's words.
pub(crate) fn render(e: &anyhow::Error) -> String {
    e.chain()
        .map(|cause| with_flags(cause).unwrap_or_else(|| flags_in(&cause.to_string())))
        .collect::<Vec<_>>()
        .join(": ")
}

/// The engine's generic words for a backend, in any text of its (an
/// error, a summary's reason for a filter running in user space), as
/// this CLI's flags.
pub(crate) fn flags_in(text: &str) -> String {
    const WORDS: [(&str, &str); 2] = [
        (
            "(the automatic or tracefs backend)",
            "(--backend auto or tracefs)",
        ),
        ("(with the PMU backend, ", "(with --backend pmu, "),
    ];
    WORDS.iter().fold(text.to_string(), |t, (engine, ours)| {
        t.replace(engine, ours)
    })
}

/// `, or a debuginfod server in DEBUGINFOD_URLS` when none was asked.
fn or_debuginfod<T>(asked: &[T]) -> &'static str {
    if asked.is_empty() {
        ", or a debuginfod server in DEBUGINFOD_URLS, e.g. DEBUGINFOD_URLS=https://debuginfod.debian.net"
    } else {
        ""
    }
}

/// The debug-info error `e` is, alone or inside the engine's errors.
fn debuginfo_error<'e>(e: &'e (dyn StdError + 'static)) -> Option<&'e DebugInfoError> {
    match (e.downcast_ref::<Error>(), e.downcast_ref::<KernelError>()) {
        (Some(Error::Kernel(KernelError::DebugInfo(d))), _) => Some(d),
        (_, Some(KernelError::DebugInfo(d))) => Some(d),
        _ => e.downcast_ref::<DebugInfoError>(),
    }
}

/// This CLI's wording of `e`, when the engine's advice is one of its
/// flags; `None` when the engine's message says it all.
fn with_flags(e: &(dyn StdError + 'static)) -> Option<String> {
    if let Some(d @ DebugInfoError::NoSource { .. }) = debuginfo_error(e) {
        return Some(format!("{d}, with --source-dir DIR (perf probe's -s)"));
    }
    if let Some(e) = e.downcast_ref::<Error>() {
        return match e {
            Error::Plan(p) => plan(p),
            Error::Kernel(k) => kernel(k),
            Error::Attach(a) => attach(a),
            _ => None,
        };
    }
    if let Some(p) = e.downcast_ref::<PlanError>() {
        return plan(p);
    }
    if let Some(k) = e.downcast_ref::<KernelError>() {
        return kernel(k);
    }
    if let Some(a) = e.downcast_ref::<AttachError>() {
        return attach(a);
    }
    if let Some(a) = e.downcast_ref::<AnalysisError>() {
        return analysis(a);
    }
    e.downcast_ref::<TracefsError>().and_then(tracefs)
}

fn kernel(e: &KernelError) -> Option<String> {
    match e {
        KernelError::Plan(p) => plan(p),
        KernelError::DebugInfo(DebugInfoError::NotFound { what, asked, .. })
            if what != "the running kernel" =>
        {
            Some(format!(
                "{e} (a user binary: rebuild it with -g, or install its debug package, e.g. Debian's PACKAGE-dbgsym{})",
                or_debuginfod(asked)
            ))
        }
        KernelError::DebugInfo(DebugInfoError::NotFound { asked, .. }) => Some(format!(
            "{e} (--vmlinux PATH; Debian: the linux-image-$(uname -r)-dbg package{})",
            or_debuginfod(asked)
        )),
        KernelError::DebugInfo(DebugInfoError::BuildIdMismatch { .. }) => {
            Some(format!("{e}; or, for definitions to use on the kernel that vmlinux is of (probe --definition, --vars), add --other-kernel"))
        }
        _ => None,
    }
}

fn plan(e: &PlanError) -> Option<String> {
    match e {
        PlanError::NeedsTracefs { what, .. } => Some(format!(
            "{what} needs a dynamic_events definition, which --backend pmu rules out; drop --backend pmu (auto defines such probes through tracefs)"
        )),
        PlanError::Ambiguous { .. } => Some(format!("{e} with --all-instances")),
        PlanError::AllExcluded { pattern, matched } => Some(format!(
            "{pattern}: matches no function that can be probed ({matched} matched, all excluded); see why with: kprobe-perf list --why '{pattern}'"
        )),
        PlanError::PastLastInstruction {
            function,
            offset,
            code,
        } => Some(format!(
            "{function}+{offset} is past the last instruction of {function} (its code is {code} bytes by the vmlinux symbol table): the alignment padding there never runs, so the probe would never fire; see kprobe-perf probe --lines {function}"
        )),
        _ => None,
    }
}

/// The analyses' errors with the options of `record` and `latency` that
/// gave what they refuse.
fn analysis(e: &AnalysisError) -> Option<String> {
    let flag = |option: &str| match option {
        "the count keys" => "--count-by".to_string(),
        "a log2 histogram" => "--hist".to_string(),
        "a linear histogram" => "--lhist".to_string(),
        other => other.to_string(),
    };
    Some(match e {
        AnalysisError::EmptyKeyList => {
            "--count-by needs at least one key: comm, pid, tid, cpu, probe or an argument name"
                .to_string()
        }
        AnalysisError::UnknownKey {
            option,
            key,
            builtins,
            arguments,
        } => format!(
            "unknown key {key:?} in {}: the keys are {builtins}, or an argument name ({arguments})",
            flag(option)
        ),
        AnalysisError::UnknownArgument {
            option,
            name,
            arguments,
        } => format!(
            "no probe has an argument named {name:?} for {}; the arguments are: {arguments}",
            flag(option)
        ),
        AnalysisError::NotNumeric {
            option,
            name,
            probe,
            kind,
        } => format!(
            "{} {name}: argument {name} of probe {probe} is a {kind}, not a number; a histogram needs an integer argument (use --count-by {name} to count its values)",
            flag(option)
        ),
        AnalysisError::BadLhist { spec, why } => format!(
            "--lhist {spec:?}: {why}; write ARG:MIN,MAX,STEP, e.g. --lhist size:0,4096,512"
        ),
        AnalysisError::UnknownByKey(key) => {
            format!("unknown key {key:?} for --by: use comm, pid, tid, cpu or ret")
        }
        AnalysisError::BadLinear { spec, why } => format!(
            "--linear {spec:?}: {why}; write MIN,MAX,STEP, e.g. --linear 0,1000,100"
        ),
        AnalysisError::NoReturnValue { function } => format!(
            "--by ret needs the return value: the return probe of function {function} fetches no argument chosen as its return value"
        ),
        _ => return None,
    })
}

fn attach(e: &AttachError) -> Option<String> {
    match e {
        AttachError::NotAProcess { tid, process } => Some(format!(
            "{tid} is a thread of process {process}, not a process: record the process with -p {process}, or this thread alone with -t {tid}"
        )),
        AttachError::InheritNeedsAddress { .. } => Some(format!("{e} with -a")),
        AttachError::NoKprobePmu { .. } => Some(format!("{e}, as `kprobe-perf info` shows")),
        AttachError::UprobePmuCannotInherit { probe } => Some(format!(
            "--backend pmu cannot follow forks with the uprobe {probe}: the kernel re-creates an inherited uprobe PMU event at each fork and re-reads its binary's path there, from an address in kprobe-perf's memory, not the forking process's; use --backend auto or tracefs (a uprobe_events probe, which every fork inherits), or record system-wide (-a) with the PMU"
        )),
        AttachError::FilterNeedsUserSpace { probe, filter, why } => Some(format!(
            "cannot count {probe} with the filter `{filter}`: counting happens in the kernel, which cannot run it ({}); `record -q --filter` runs it in user space and counts what passes",
            flags_in(why)
        )),
        AttachError::Plan(p) => plan(p),
        AttachError::Tracefs(t) => tracefs(t),
        _ => None,
    }
}

fn tracefs(e: &TracefsError) -> Option<String> {
    match e {
        TracefsError::NoUprobeEvents { .. } => Some(format!("{e} with -a")),
        TracefsError::NoKprobeEvents {
            kprobe_pmu: true, ..
        } => Some(format!("{e} (--backend pmu)")),
        _ => None,
    }
}

/// Why `list --why` leaves a function out, with the flag that keeps it.
pub(crate) fn excluded(x: &Excluded) -> String {
    match x {
        Excluded::Fragile { .. } => format!("{x} (--include-fragile)"),
        _ => x.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_tree_is_asked_for_with_our_flag() {
        let e = anyhow::Error::new(KernelError::DebugInfo(DebugInfoError::NoSource {
            point: "walk;sum*".into(),
            file: "fixture.c".into(),
            tried: vec!["/b/fixture.c".into()],
        }));
        assert_eq!(
            render(&e),
            "walk;sum* matches its pattern against the lines of fixture.c, which is not at /b/fixture.c; give the directory of the source tree its path is relative to, with --source-dir DIR (perf probe's -s)"
        );
    }

    #[test]
    fn flags_are_named_where_the_engine_gives_generic_advice() {
        let e = anyhow::Error::new(Error::from(AttachError::NotAProcess {
            tid: 12,
            process: 10,
        }));
        assert_eq!(
            render(&e),
            "12 is a thread of process 10, not a process: record the process with -p 10, or this thread alone with -t 12"
        );
        // In a context, the wording is replaced where the error sits.
        let e = anyhow::Error::new(PlanError::AllExcluded {
            pattern: "*spin*".into(),
            matched: 3,
        })
        .context("expanding globs");
        assert_eq!(
            render(&e),
            "expanding globs: *spin*: matches no function that can be probed (3 matched, all excluded); see why with: kprobe-perf list --why '*spin*'"
        );
        let e = anyhow::Error::new(Error::from(PlanError::NeedsTracefs {
            what: "an fprobe event (f:)".into(),
            instead: "choose the automatic backend".into(),
        }));
        assert_eq!(
            render(&e),
            "an fprobe event (f:) needs a dynamic_events definition, which --backend pmu rules out; drop --backend pmu (auto defines such probes through tracefs)"
        );
        let e = anyhow::Error::new(AttachError::InheritNeedsAddress {
            probe: "p:x do_x".into(),
        });
        assert!(render(&e).ends_with("or record system-wide with -a"), "{e}");
        let e = anyhow::Error::new(PlanError::PastLastInstruction {
            function: "f".into(),
            offset: 40,
            code: 38,
        });
        assert!(render(&e).ends_with("; see kprobe-perf probe --lines f"));
    }

    #[test]
    fn the_engines_backend_words_become_our_flags() {
        let e = anyhow::Error::new(AttachError::UprobePmuCannotInherit {
            probe: "p /bin/x:f".into(),
        });
        assert_eq!(
            render(&e),
            "--backend pmu cannot follow forks with the uprobe p /bin/x:f: the kernel re-creates an inherited uprobe PMU event at each fork and re-reads its binary's path there, from an address in kprobe-perf's memory, not the forking process's; use --backend auto or tracefs (a uprobe_events probe, which every fork inherits), or record system-wide (-a) with the PMU"
        );
        let e = anyhow::Error::new(AttachError::FilterNeedsUserSpace {
            probe: "p vfs_write".into(),
            filter: "count == 100".into(),
            why: "a PMU probe's record carries no argument (`count`); a tracefs-defined one's does (the automatic or tracefs backend)".into(),
        });
        assert_eq!(
            render(&e),
            "cannot count p vfs_write with the filter `count == 100`: counting happens in the kernel, which cannot run it (a PMU probe's record carries no argument (`count`); a tracefs-defined one's does (--backend auto or tracefs)); `record -q --filter` runs it in user space and counts what passes"
        );
        let e = anyhow::Error::new(AttachError::FilterRefused {
            probe: "p f".into(),
            filter: "x == 1".into(),
            reason: "Invalid argument (os error 22): the kernel could not apply it to the event's fields (with the PMU backend, kprobe-perf runs a filter on arguments in user space)".into(),
        });
        assert!(
            render(&e).ends_with(
                "(with --backend pmu, kprobe-perf runs a filter on arguments in user space)"
            ),
            "{e}"
        );
    }

    #[test]
    fn analysis_errors_name_the_options() {
        use kprobe_perf_engine::analysis::{parse_count_by, parse_hist, parse_lhist, parse_linear};
        use kprobe_perf_engine::analysis::{Key, ProbeFields};
        let p = [ProbeFields::new("openat", vec![])];
        let said = |e: AnalysisError| render(&anyhow::Error::new(e));
        assert_eq!(
            said(parse_count_by(" ", &p).unwrap_err()),
            "--count-by needs at least one key: comm, pid, tid, cpu, probe or an argument name"
        );
        assert!(said(parse_count_by("size", &p).unwrap_err())
            .starts_with("unknown key \"size\" in --count-by: the keys are"));
        assert!(said(parse_hist("len", &p).unwrap_err())
            .starts_with("no probe has an argument named \"len\" for --hist;"));
        assert_eq!(
            said(parse_lhist("count", &p).unwrap_err()),
            "--lhist \"count\": no ':' between the argument and its range; write ARG:MIN,MAX,STEP, e.g. --lhist size:0,4096,512"
        );
        assert_eq!(
            said(parse_linear("0,x,10").unwrap_err()),
            "--linear \"0,x,10\": \"x\" is not an integer; write MIN,MAX,STEP, e.g. --linear 0,1000,100"
        );
        assert_eq!(
            said(Key::parse("uid").unwrap_err()),
            "unknown key \"uid\" for --by: use comm, pid, tid, cpu or ret"
        );
        assert_eq!(
            said(AnalysisError::NoReturnValue { function: 0 }),
            "--by ret needs the return value: the return probe of function 0 fetches no argument chosen as its return value"
        );
    }

    #[test]
    fn other_errors_print_as_anyhow_prints_them() {
        let os = std::io::Error::from_raw_os_error(libc_enoent());
        let e = anyhow::Error::new(os).context("reading /x");
        assert_eq!(render(&e), format!("{e:#}"));
        let e = anyhow::Error::new(Error::from(AttachError::CpuNotOnline {
            cpu: 9,
            online: vec![0, 1],
        }));
        assert_eq!(render(&e), "CPU 9 is not online (online: 0-1)");
        assert_eq!(render(&e), format!("{e:#}"));
    }

    fn libc_enoent() -> i32 {
        2
    }
}
