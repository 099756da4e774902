//! The few operating-system facts an embedder or a test needs from the
//! engine's private syscall layer: the page size (ring sizes are pages),
//! the calling thread's id (to target it), the effective capabilities,
//! and raising the open-file limit before opening many probes.

pub use crate::attach::sys::{
    effective_capabilities, gettid, page_size, raise_fd_limit, FdLimitError, CAP_IPC_LOCK,
    CAP_PERFMON, CAP_SYS_ADMIN,
};
