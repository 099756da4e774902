//! What a session is opened with ([`SessionOptions`]): whose hits, the
//! rings' size and mode, the callchains, and whether this process's own
//! hits are left out. Every one of them is a choice of how the probes are
//! opened.

use crate::attach::attr::CallGraph;
use crate::attach::target::RecordTarget;

/// Default ring size per CPU in data pages (512 KiB with 4 KiB pages).
pub const DEFAULT_MMAP_PAGES: usize = 128;

/// Session settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionOptions {
    /// Whose hits to record.
    pub target: RecordTarget,
    /// Data pages per CPU ring (a power of two).
    pub mmap_pages: usize,
    /// Flight-recorder mode: rings are written backward and mapped
    /// read-only, so the kernel keeps the newest records and overwrites
    /// the oldest; nothing is read until [`Session::dump_overwrite`](crate::session::Session::dump_overwrite).
    pub overwrite: bool,
    /// The callchains each sample carries (`None`: none).
    pub call_graph: Option<CallGraph>,
    /// Leave out this process's own hits, in the kernel: every probe's
    /// filter also drops the threads this process has when the session
    /// opens (`common_pid`, the only task field a filter has, is a thread
    /// id). A profiler of allocations or reads then neither records nor
    /// loses its own.
    pub exclude_self: bool,
}

impl SessionOptions {
    /// Records callchains with every sample (see
    /// [`SessionOptions::call_graph`]).
    pub fn with_call_graph(mut self, graph: Option<CallGraph>) -> Self {
        self.call_graph = graph;
        self
    }

    /// Records `target` (default: every CPU).
    pub fn with_target(mut self, target: RecordTarget) -> Self {
        self.target = target;
        self
    }

    /// `pages` data pages per ring, a power of two (default:
    /// [`DEFAULT_MMAP_PAGES`]).
    pub fn with_mmap_pages(mut self, pages: usize) -> Self {
        self.mmap_pages = pages;
        self
    }

    /// Flight-recorder mode (see [`SessionOptions::overwrite`]).
    pub fn with_overwrite(mut self, overwrite: bool) -> Self {
        self.overwrite = overwrite;
        self
    }

    /// Leaves out this process's own hits, in the kernel (see
    /// [`SessionOptions::exclude_self`]).
    pub fn with_exclude_self(mut self, exclude: bool) -> Self {
        self.exclude_self = exclude;
        self
    }
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            target: RecordTarget::AllCpus,
            mmap_pages: DEFAULT_MMAP_PAGES,
            overwrite: false,
            call_graph: None,
            exclude_self: false,
        }
    }
}
