//! The few operating-system facts an embedder or a test needs from the
//! engine's private syscall layer: the page size (ring sizes are pages),
//! the calling thread's id (to target it), the effective capabilities,
//! raising the open-file limit before opening many probes, and the local
//! date and time (a rotated perf.data file is named by it).

pub use crate::attach::sys::{
    effective_capabilities, gettid, local_date_time, page_size, raise_fd_limit, FdLimitError,
    CAP_IPC_LOCK, CAP_PERFMON, CAP_SYS_ADMIN,
};
