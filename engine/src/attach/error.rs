//! The attach stage's errors: a process, CPU or command to record that
//! cannot be used, a kernel file of its that cannot be parsed, a system
//! call that failed. Wrapped by the crate's [`Error`](crate::error::Error)
//! (its `Attach` variant), which prints them as they are.

use std::io;

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
            AttachError::Io { source, .. } => source.raw_os_error(),
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
