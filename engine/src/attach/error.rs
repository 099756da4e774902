//! The attach stage's errors: a PMU or a privilege the kernel lacks, a
//! probe perf_event_open or the kernel's filter refuses, a process, CPU or
//! command to record that cannot be used, a kernel file of its that cannot
//! be parsed, a system call that failed; and what each errno of
//! perf_event_open means for the probe it refused. The crate's root error
//! wraps them as they are.

use std::io;

use crate::attach::tracefs::TracefsError;
use crate::plan::PlanError;

/// Why the attach stage could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttachError {
    /// A process to record does not exist.
    #[error("no process {pid} (/proc/{pid} does not exist): give the pid of a running process")]
    NoSuchProcess {
        /// The pid given.
        pid: i32,
    },
    /// A number given as a process id cannot be one (0 or negative).
    #[error("{pid} is not a process id: give a positive pid")]
    NotAProcessId {
        /// The number given.
        pid: i32,
    },
    /// A thread was given as a process to record.
    #[error("{tid} is a thread of process {process}, not a process: record process {process}, or thread {tid} alone as a thread target")]
    NotAProcess {
        /// The thread given.
        tid: i32,
        /// The process it belongs to.
        process: i32,
    },
    /// A CPU to record on is not online.
    #[error(
        "CPU {cpu} is not online (online: {})",
        crate::attach::cpu_list::format_cpu_list(online)
    )]
    CpuNotOnline {
        /// The CPU asked for.
        cpu: u32,
        /// The online CPUs.
        online: Vec<u32>,
    },
    /// The command to record was found neither as a file nor in `PATH`.
    #[error("command not found: {}", match (program.as_str(), path) {
        ("", _) => "the command name is empty".to_string(),
        (p, None) => format!("{p} (no such file)"),
        (p, Some(path)) => format!("{p} (in no directory of PATH={path})"),
    })]
    CommandNotFound {
        /// The program as given.
        program: String,
        /// The `PATH` searched (`None`: the program names a file).
        path: Option<String>,
    },
    /// The command to record names a file that cannot be executed.
    #[error("cannot run {program}: {reason}")]
    CommandNotExecutable {
        /// The program as given.
        program: String,
        /// Why (not a regular file, no execute permission).
        reason: String,
    },
    /// The command line of the command to record holds a NUL byte, which
    /// exec cannot pass.
    #[error("cannot start {program}: a NUL byte in the command line")]
    CommandHasNul {
        /// The program as given.
        program: String,
    },
    /// A kernel file the engine reads is not in the format it expects.
    #[error("parsing {path}: {reason}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The running kernel offers no kprobe PMU.
    #[error("this kernel has no kprobe PMU ({dir} is missing): it was built without CONFIG_KPROBE_EVENTS or is older than 4.17, so kernel functions cannot be probed here; uprobes and USDT probes can (p:/PATH:FUNC, usdt:/PATH:PROVIDER:NAME)")]
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
    /// The uprobe PMU cannot take a reference counter (a USDT semaphore).
    #[error("{probe} has a semaphore, and this kernel's uprobe PMU takes no reference counter ({dir}/format/ref_ctr_offset is missing: Linux 4.20+ has it); choose the tracefs backend (uprobe_events takes PATH:OFFS(CTR))")]
    NoRefCtrOffset {
        /// The probe.
        probe: String,
        /// The PMU's sysfs directory.
        dir: String,
    },
    /// The process has neither CAP_PERFMON nor CAP_SYS_ADMIN, which every
    /// probe needs.
    #[error("{}", not_permitted(exe))]
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
        /// What the errno means for this kind of probe, and what to do.
        reason: String,
        /// The OS error.
        source: io::Error,
    },
    /// A processes target with no pid in it.
    #[error("no process to record: give at least one pid")]
    NoProcesses,
    /// Following a command's or processes' children needs a kernel
    /// symbol's address, which `/proc/kallsyms` hides from this process.
    #[error("following a command's children with {probe}: this needs the symbol's address, which /proc/kallsyms hides from this process (kernel.kptr_restrict=2 hides it even from root): lower kernel.kptr_restrict, or record system-wide")]
    InheritNeedsAddress {
        /// The probe, in canonical syntax.
        probe: String,
    },
    /// The PMU backend chosen for a uprobe of a target that inherits (a command
    /// and its children, processes and their new threads).
    #[error("the PMU backend cannot follow forks with the uprobe {probe}: the kernel re-creates an inherited uprobe PMU event at each fork and re-reads its binary's path there, from an address in kprobe-perf's memory, not the forking process's; choose the automatic or tracefs backend (a uprobe_events probe, which every fork inherits), or record system-wide with the PMU")]
    UprobePmuCannotInherit {
        /// The probe, in canonical syntax.
        probe: String,
    },
    /// More file descriptors are needed than the hard RLIMIT_NOFILE allows.
    #[error("{probes} probes on {slots} CPUs/threads need {needed} file descriptors, and the hard limit on open files is {hard_limit}: raise it (ulimit -Hn, as root) or record fewer probes or CPUs")]
    TooManyFds {
        /// Probes in the session.
        probes: usize,
        /// CPUs or threads each probe is opened on.
        slots: usize,
        /// Descriptors needed.
        needed: usize,
        /// The hard limit.
        hard_limit: u64,
    },
    /// A ring's size is not a power of two pages.
    #[error(
        "a ring of {pages} pages: the kernel maps rings of a power of two pages (1, 2, 4 ... )"
    )]
    RingPages {
        /// The pages asked for.
        pages: usize,
    },
    /// The kernel refused a filter that the engine accepted.
    #[error("the kernel refused the filter `{filter}` of {probe}: {reason}")]
    FilterRefused {
        /// The probe, as given.
        probe: String,
        /// The string given to PERF_EVENT_IOC_SET_FILTER.
        filter: String,
        /// The kernel's `error_log` message (with a caret), or the errno.
        reason: String,
    },
    /// A counting session was given a filter only user space can run.
    #[error("cannot count {probe} with the filter `{filter}`: counting happens in the kernel, which cannot run it ({why}); recording with the filter runs it in user space and counts what passes")]
    FilterNeedsUserSpace {
        /// The probe, as given.
        probe: String,
        /// The filter as written.
        filter: String,
        /// Why the kernel cannot run it.
        why: String,
    },
    /// A probe cannot be opened as planned (its filter, once the kernel
    /// named its fields).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The tracefs control path failed.
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    /// The engine broke one of its own rules (a bug: please report it).
    #[error("{what} (a bug: please report it)")]
    Internal {
        /// What went wrong.
        what: String,
    },
    /// A system call failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: io::Error,
    },
}

impl AttachError {
    /// The OS error number behind this error, if a system call failed.
    pub fn errno(&self) -> Option<i32> {
        match self {
            AttachError::Open { source, .. } | AttachError::Io { source, .. } => {
                source.raw_os_error()
            }
            AttachError::Tracefs(e) => std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<io::Error>())
                .and_then(io::Error::raw_os_error),
            _ => None,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> AttachError {
        AttachError::Io {
            what: what.into(),
            source,
        }
    }
}

/// How a probe was being opened, which decides what an errno means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenedAs {
    /// A kprobe or kretprobe through the kprobe PMU.
    Kprobe,
    /// A uprobe or uretprobe through the uprobe PMU.
    Uprobe,
    /// A tracefs-defined probe opened as its tracepoint event.
    Tracepoint,
}

/// What the process may do, as far as perf_event_open's permission checks
/// go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) struct Privilege {
    /// CAP_PERFMON is in the effective set.
    pub perfmon: bool,
    /// CAP_SYS_ADMIN is in the effective set.
    pub sys_admin: bool,
    /// `kernel.perf_event_paranoid`, when readable.
    pub paranoid: Option<i32>,
}

impl Privilege {
    /// This process's effective capabilities and the running kernel's
    /// `perf_event_paranoid` (unknown parts read as absent).
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    pub(crate) fn current() -> Privilege {
        let caps = crate::attach::sys::effective_capabilities().unwrap_or(0);
        let has = |cap: u32| caps & (1u64 << cap) != 0;
        Privilege {
            perfmon: has(crate::attach::sys::CAP_PERFMON),
            sys_admin: has(crate::attach::sys::CAP_SYS_ADMIN),
            paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
        }
    }
}

/// This program's path, for setcap advice.
fn this_exe() -> String {
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "kprobe-perf".into())
}

fn not_permitted(exe: &str) -> String {
    match Privilege::current().paranoid {
        Some(n) if n >= 3 => format!(
            "this process lacks CAP_SYS_ADMIN, which every probe needs while kernel.perf_event_paranoid is {n} (the default of Debian's kernels, from a Debian patch): run as root, or `setcap cap_sys_admin+ep {exe}`; after `sysctl kernel.perf_event_paranoid=2`, `setcap cap_perfmon+ep {exe}` is enough for kprobes"
        ),
        _ => format!(
            "this process has neither CAP_PERFMON nor CAP_SYS_ADMIN: run as root, or `setcap cap_perfmon+ep {exe}` for kprobes; uprobes need `setcap cap_sys_admin+ep {exe}` (CAP_SYS_ADMIN on Linux 6.16+ and on stable kernels updated since July 2025)"
        ),
    }
}

/// What EACCES or EPERM from perf_event_open means for a probe opened
/// `as_`, given what the process may do (kernel/events/core.c:
/// `perf_kprobe_event_init` wants `perfmon_capable()`, CAP_PERFMON or
/// CAP_SYS_ADMIN; `perf_uprobe_event_init` wants CAP_SYS_ADMIN since
/// "perf: Revert to requiring CAP_SYS_ADMIN for uprobes" (6.16, backported
/// to the 6.1, 6.6 and 6.12 stable series in July 2025); a tracepoint's
/// raw samples want `perfmon_capable()` (`perf_allow_tracepoint`); and
/// Debian's `perf_event_paranoid` level 3 makes every perf_event_open want
/// CAP_SYS_ADMIN. Checked on the host kernel (6.18) and Debian 6.1 and
/// 6.12 in the VM, as an unprivileged user given only the capability.
pub(crate) fn explain_permission(as_: OpenedAs, p: Privilege, exe: &str) -> String {
    let paranoid3 = p.paranoid.is_some_and(|n| n >= 3);
    let what = match as_ {
        OpenedAs::Kprobe => "kprobes",
        OpenedAs::Uprobe => "uprobes",
        OpenedAs::Tracepoint => "tracefs-defined probes",
    };
    if p.sys_admin {
        return format!(
            "the kernel refuses {what} although this process has CAP_SYS_ADMIN: kernel lockdown (/sys/kernel/security/lockdown) or a security module (SELinux, AppArmor) forbids them"
        );
    }
    if as_ == OpenedAs::Uprobe {
        let had = if p.perfmon {
            " (this process has CAP_PERFMON, which they no longer accept)"
        } else {
            ""
        };
        return format!(
            "uprobes need CAP_SYS_ADMIN on Linux 6.16+ and on stable kernels updated since July 2025{had}: run as root, or `setcap cap_sys_admin+ep {exe}`"
        );
    }
    if paranoid3 {
        return format!(
            "kernel.perf_event_paranoid is {} (a Debian kernel patch), which lets only CAP_SYS_ADMIN open perf events{}: run `sysctl kernel.perf_event_paranoid=2` (then CAP_PERFMON is enough for {what}), run as root, or `setcap cap_sys_admin+ep {exe}`",
            p.paranoid.unwrap_or(3),
            if p.perfmon { "; CAP_PERFMON is not enough" } else { "" }
        );
    }
    if p.perfmon {
        return format!(
            "the kernel refuses {what} although this process has CAP_PERFMON: kernel lockdown (/sys/kernel/security/lockdown) or a security module (SELinux, AppArmor) forbids them, or this kernel predates CAP_PERFMON (5.8) and wants CAP_SYS_ADMIN"
        );
    }
    format!(
        "{what} need CAP_PERFMON or CAP_SYS_ADMIN, which this process lacks: run as root, or `setcap cap_perfmon+ep {exe}`"
    )
}

/// What an errno from perf_event_open means for a probe opened `as_` at
/// `target`, and what to do about it (kernel-notes section 2 for kprobes;
/// kernel/events/uprobes.c `uprobe_register`, kernel/trace/trace_uprobe.c
/// `create_local_trace_uprobe` and trace_event_perf.c `perf_uprobe_init`
/// for uprobes).
pub(crate) fn explain_open_errno(errno: i32, target: &str, as_: OpenedAs) -> String {
    if matches!(errno, libc::EACCES | libc::EPERM) {
        return explain_permission(as_, Privilege::current(), &this_exe());
    }
    if as_ == OpenedAs::Uprobe {
        return explain_uprobe_errno(errno, target);
    }
    explain_kprobe_errno(errno, target)
}

/// [`explain_open_errno`] for the uprobe PMU, permission aside.
pub(crate) fn explain_uprobe_errno(errno: i32, target: &str) -> String {
    match errno {
        // ENOTSUPP is kernel-internal; libc names it "Unknown error 524".
        524 => format!("the uprobe layer refuses the instruction at {target} (ENOTSUPP): an int3, int n, hlt, in/out or far branch, a segment or lock prefix, a 66-prefixed branch, or a VEX instruction whose opcode byte the kernel's table refuses (arch_uprobe_analyze_insn); pick another instruction"),
        libc::ENOEXEC => format!("the kernel cannot decode an instruction at {target} (ENOEXEC): the offset is probably not an instruction start, or not code"),
        libc::EINVAL => format!("the kernel refuses the uprobe at {target}: the offset is beyond the end of the file, misaligned (arm64: 4 bytes), the path is not a regular file, or another uprobe at that offset uses a different reference-counter (USDT semaphore) offset"),
        libc::ENOENT => format!("no such file for the uprobe at {target}: the path must exist when the probe is opened"),
        libc::ENOTDIR => format!("a component of the path of {target} is not a directory"),
        libc::ELOOP => format!("too many symbolic links in the path of {target}"),
        libc::ENAMETOOLONG | libc::E2BIG => format!("the path of {target} is longer than the kernel's PATH_MAX (4096)"),
        libc::EIO => format!("the kernel could not read the instruction at {target} from the file (or its file system cannot hold uprobes)"),
        libc::EEXIST => format!("a uprobe event of the same name already exists for {target}; remove it or name this probe differently"),
        libc::ENOMEM => "the kernel is out of memory for the uprobe".to_string(),
        libc::EMFILE => "out of file descriptors: each probe needs one per CPU; raise the limit with `ulimit -n`".to_string(),
        libc::EOPNOTSUPP => "the uprobe PMU refused the event's attributes (branch-stack sampling or extended registers)".to_string(),
        libc::ENODEV => "the uprobe PMU rejected the event type".to_string(),
        _ => "the kernel refused the uprobe".to_string(),
    }
}

/// What an errno from perf_event_open on the kprobe PMU means, and what
/// to do about it (kernel-notes section 2), permission aside.
pub(crate) fn explain_kprobe_errno(errno: i32, target: &str) -> String {
    match errno {
        libc::ENOENT => format!("the kernel found no symbol or address {target} (or its module is not loaded)"),
        libc::EADDRNOTAVAIL => format!("{target} names several symbols; give the address of the one you mean"),
        libc::EILSEQ => format!("{target} is not on an instruction boundary, or that instruction cannot be probed"),
        libc::EINVAL => format!("the kernel refuses to probe {target}: it is blacklisted (NOKPROBE, noinstr, entry code), notrace, a jump-label/static-call site, or a return probe not at a function entry"),
        libc::EOPNOTSUPP => format!("kprobes cannot handle the instruction at {target}; pick another offset"),
        libc::E2BIG => "the symbol name is longer than the kernel's KSYM_NAME_LEN".to_string(),
        libc::EMFILE => "out of file descriptors: each probe needs one per CPU; raise the limit with `ulimit -n`".to_string(),
        libc::ENODEV => "the kprobe PMU rejected the event type".to_string(),
        _ => "the kernel refused the probe".to_string(),
    }
}

#[cfg(test)]
#[path = "explain_tests.rs"]
mod explain_tests;
