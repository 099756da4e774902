//! The engine's root error, [`Error`]: what a session returns, wrapping
//! as they are the errors of the stages that make it (spec, plan, kernel,
//! attach), each of which owns its own and imports this one nowhere.
//! Each error says what failed, for which probe, why, and what to do
//! instead. The OS error, where there is one, is the error's `source()`,
//! so a caller printing the chain (anyhow's `{:#}`) shows it once.

use std::io;

use crate::attach::error::AttachError;
use crate::attach::tracefs::TracefsError;
use crate::kernel::error::KernelError;
use crate::plan::PlanError;
use kprobe_perf_spec::SpecError;

/// Anything that can stop a session from starting or running.
///
/// Its `Debug` prints the `Display` message, so that a `main` returning
/// `Result<(), Box<dyn std::error::Error>>` shows what to do rather than
/// the variant's fields; match on the variants for the details.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The probe definition is malformed.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The probe cannot go where it asks to.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The kernel's symbols, images or text cannot be used.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// A process, CPU or command to record cannot be used, or a system
    /// call of the attach stage failed.
    #[error(transparent)]
    Attach(#[from] AttachError),
    /// The running kernel cannot define event probes (`e:`).
    #[error("this kernel has no event probes (e:): its tracefs README ({readme}) does not list the e[:[<group>/][<event>]] form, which Linux 5.15+ built with CONFIG_EPROBE_EVENTS has; use such a kernel, or probe the function behind the trace event with a kprobe")]
    NoEventProbes {
        /// The README read.
        readme: String,
    },
    /// The kernel was booted without boot-time kprobe events.
    #[error("the kernel's command line (/proc/cmdline) has no kprobe_event= parameter, so no probe was defined at boot: boot with a kprobe_event= parameter defining them first")]
    NoBootProbes,
    /// None of the command line's boot-time probes is a kernel event.
    #[error("the kernel did not define the probes of its command line's kprobe_event= ({definitions}): it said why at boot (dmesg: 'Failed to add event'); check them against this kernel and boot again")]
    BootProbesNotDefined {
        /// The definitions, as the command line gives them.
        definitions: String,
    },
    /// An event probe's `format` file does not describe its arguments.
    #[error("{probe}: its format file {path} lacks common_pid or a field per argument, so its records cannot be read; report this with the file's contents")]
    EventProbeFormat {
        /// The definition, as written to the kernel.
        probe: String,
        /// The `format` file.
        path: String,
    },
    /// The engine broke one of its own rules (a bug: please report it).
    #[error("{what} (a bug: please report it)")]
    Internal {
        /// What went wrong.
        what: String,
    },
    /// Another system call failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: io::Error,
    },
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Error {
    /// The OS error number behind this error, if a system call failed
    /// (perf_event_open refusing a probe, a tracefs write, a read of
    /// `/proc` or sysfs ...); `None` for errors of input or of the engine.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::Attach(e) => e.errno(),
            _ => None,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// The tracefs control path is the attach stage's: its errors are
/// [`AttachError::Tracefs`].
impl From<TracefsError> for Error {
    fn from(e: TracefsError) -> Error {
        Error::Attach(AttachError::Tracefs(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_is_the_os_errors_and_only_theirs() {
        let io_err = Error::io("mapping", io::Error::from_raw_os_error(libc::ENOMEM));
        assert_eq!(io_err.errno(), Some(libc::ENOMEM));
        let open = Error::from(AttachError::Open {
            probe: "p:x do_x".into(),
            where_: "CPU 0".into(),
            reason: "no such symbol".into(),
            source: io::Error::from_raw_os_error(libc::ENOENT),
        });
        assert_eq!(open.errno(), Some(libc::ENOENT));
        let tracefs = Error::from(TracefsError::NotReadable {
            root: "/sys/kernel/tracing".into(),
            source: io::Error::from_raw_os_error(libc::EACCES),
        });
        assert_eq!(tracefs.errno(), Some(libc::EACCES));
        // A synthetic io::Error carries no errno.
        let synthetic = Error::io("x", io::Error::other("no errno"));
        assert_eq!(synthetic.errno(), None);
        // Errors of input or of the engine have none.
        assert_eq!(Error::from(AttachError::NoProcesses).errno(), None);
        assert_eq!(
            Error::from(AttachError::NotAProcess { tid: 2, process: 1 }).errno(),
            None
        );
        // An attach stage's system call keeps its errno through Error.
        let attach = Error::from(AttachError::io(
            "reading /proc/1/task",
            io::Error::from_raw_os_error(libc::ENOENT),
        ));
        assert_eq!(attach.errno(), Some(libc::ENOENT));
        assert_eq!(Error::from(PlanError::UnsupportedArch).errno(), None);
        assert_eq!(
            Error::from(AttachError::CommandNotFound {
                program: "x".into(),
                path: None
            })
            .errno(),
            None
        );
        assert_eq!(Error::from(TracefsError::NotMounted).errno(), None);
    }

    #[test]
    fn debug_prints_the_message() {
        let e = Error::from(AttachError::NoUprobePmu {
            dir: "/sys/bus/event_source/devices/uprobe".into(),
        });
        assert_eq!(format!("{e:?}"), e.to_string());
        assert!(format!("{e:?}").starts_with("this kernel has no uprobe PMU"));
    }
}
