//! The kernel stage's error: the kernel's symbols, images or text that
//! cannot be used, or a probe that cannot be planned against them
//! ([`Kernel::plan`](crate::kernel::Kernel::plan) and the globs). The
//! crate's root error wraps it as it is.

use std::path::PathBuf;

use kprobe_perf_symbols::image::ImageError;
use kprobe_perf_symbols::SymbolsError;

use crate::plan::PlanError;

/// Why the kernel's symbols, images or text cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// `/proc/kallsyms` could not be read.
    #[error(transparent)]
    Kallsyms(#[from] SymbolsError),
    /// A vmlinux or System.map cannot be read, or is not the running
    /// kernel's.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The System.map and the vmlinux give different KASLR slides.
    #[error("{} (KASLR slide 0x{map_slide:x}) and the vmlinux (0x{vmlinux_slide:x}) are of different builds", system_map.display())]
    ImagesDisagree {
        /// The System.map.
        system_map: PathBuf,
        /// The slide the System.map gives.
        map_slide: u64,
        /// The slide the vmlinux gives.
        vmlinux_slide: u64,
    },
    /// Text was asked of `/proc/kcore` ([`TextFrom::Kcore`](crate::kernel::TextFrom::Kcore)), which cannot
    /// be read.
    #[error("/proc/kcore cannot be read (run as root on a kernel with CONFIG_PROC_KCORE)")]
    Kcore {
        /// The OS error.
        source: std::io::Error,
    },
    /// Text was asked of the vmlinux ([`TextFrom::Vmlinux`](crate::kernel::TextFrom::Vmlinux)), which has
    /// no symbols to compute the KASLR slide from.
    #[error("{} cannot be placed at the running kernel's addresses (no symbols to compute the KASLR slide from: give the System.map too, and run as root so kallsyms shows addresses)", path.display())]
    Unplaced {
        /// The vmlinux.
        path: PathBuf,
    },
    /// Text was asked of the vmlinux ([`TextFrom::Vmlinux`](crate::kernel::TextFrom::Vmlinux)), and none was
    /// given or found.
    #[error("no vmlinux for {release} (looked in {}); give the vmlinux path (Debian: the linux-image-VERSION-dbg package)", looked_in(candidates))]
    NoVmlinux {
        /// `uname -r`.
        release: String,
        /// Where it was looked for.
        candidates: Vec<PathBuf>,
    },
    /// The kernel's debug info cannot be found, read or used for a
    /// source point.
    #[error(transparent)]
    DebugInfo(#[from] kprobe_perf_debuginfo::Error),
    /// A source point or variable that cannot be read, with a caret.
    #[error("{reason}\n  {text}\n  {}{}", " ".repeat(*.at), "^".repeat(*.len))]
    Source {
        /// The definition.
        text: String,
        /// Where in it the mistake starts (bytes).
        at: usize,
        /// How long it is.
        len: usize,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A probe cannot be planned (its definition, its symbol, its
    /// filter).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A kernel value stored a moment ago is missing (a bug: please
    /// report it).
    #[error("{what} (a bug: please report it)")]
    Internal {
        /// What was being read.
        what: String,
    },
}

/// The paths, joined for a message.
pub fn looked_in(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A malformed definition is a probe that cannot be planned.
impl From<kprobe_perf_spec::SpecError> for KernelError {
    fn from(e: kprobe_perf_spec::SpecError) -> KernelError {
        KernelError::Plan(PlanError::Spec(e))
    }
}
