//! The engine's errors: each says what failed, for which probe, why, and
//! what to do instead. The OS error, where there is one, is the error's
//! `source()`, so a caller printing the chain (anyhow's `{:#}`) shows it once.

use std::io;

use crate::plan::PlanError;
use crate::spec::SpecError;

/// Anything that can stop a session from starting or running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The probe definition is malformed.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The probe cannot go where it asks to.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The tracefs control path failed.
    #[error(transparent)]
    Tracefs(#[from] crate::tracefs::TracefsError),
    /// The running kernel offers no kprobe PMU.
    #[error("this kernel has no kprobe PMU ({dir} is missing): it was built without CONFIG_KPROBE_EVENTS or is older than 4.17; run `cargo xtask demo` to see kprobe-perf on a kernel that has one")]
    NoKprobePmu {
        /// The sysfs directory looked for.
        dir: String,
    },
    /// The running kernel offers no uprobe PMU.
    #[error("this kernel has no uprobe PMU ({dir} is missing): it was built without CONFIG_UPROBE_EVENTS or is older than 4.17")]
    NoUprobePmu {
        /// The sysfs directory looked for.
        dir: String,
    },
    /// The process lacks the capability to open kprobes.
    #[error("opening kprobes needs CAP_PERFMON (or CAP_SYS_ADMIN), which this process lacks: run as root, or grant it with `setcap cap_perfmon+ep {exe}`")]
    NotPermitted {
        /// This program's path, for the setcap hint.
        exe: String,
    },
    /// perf_event_open refused a probe.
    #[error("cannot attach {probe} on {where_}: {reason}")]
    Open {
        /// The probe, in canonical syntax.
        probe: String,
        /// `CPU n` or `pid n`.
        where_: String,
        /// What the errno means for a kprobe, and what to do.
        reason: String,
        /// The OS error.
        source: io::Error,
    },
    /// The recording target cannot be recorded (no such process, a thread
    /// given as a process): the message says what to give instead.
    #[error("{0}")]
    Target(String),
    /// Another system call failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// What an errno from perf_event_open on the kprobe PMU means, and what
/// to do about it (kernel-notes section 2).
pub fn explain_open_errno(errno: i32, target: &str) -> String {
    match errno {
        libc::ENOENT => format!("the kernel found no symbol or address {target} (or its module is not loaded)"),
        libc::EADDRNOTAVAIL => format!("{target} names several symbols; give the address of the one you mean"),
        libc::EILSEQ => format!("{target} is not on an instruction boundary, or that instruction cannot be probed"),
        libc::EINVAL => format!("the kernel refuses to probe {target}: it is blacklisted (NOKPROBE, noinstr, entry code), notrace, a jump-label/static-call site, or a return probe not at a function entry"),
        libc::EOPNOTSUPP => format!("kprobes cannot handle the instruction at {target}; pick another offset"),
        libc::E2BIG => "the symbol name is longer than the kernel's KSYM_NAME_LEN".to_string(),
        libc::EACCES | libc::EPERM => "permission denied: kprobes need CAP_PERFMON or CAP_SYS_ADMIN, and kernel lockdown or an LSM can forbid them".to_string(),
        libc::EMFILE => "out of file descriptors: each probe needs one per CPU; raise the limit with `ulimit -n`".to_string(),
        libc::ENODEV => "the kprobe PMU rejected the event type".to_string(),
        _ => "the kernel refused the probe".to_string(),
    }
}
