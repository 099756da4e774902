//! DWARF unwinding of user stacks that perf sampled, for binaries built
//! without frame pointers (as Debian builds them).
//!
//! A sample taken with `PERF_SAMPLE_REGS_USER` and `PERF_SAMPLE_STACK_USER`
//! holds the user registers at the probe and a copy of the top of the user
//! stack. With the process's mappings (from MMAP2 records, or
//! `/proc/PID/maps`), [`Unwinder::unwind`] walks the copy with each
//! mapped file's `.eh_frame` / `.debug_frame` call frame information
//! (through the `framehop` crate, falling back to frame pointers where a
//! file has none) and gives the return addresses. [`Unwinder::source`]
//! then names an address's inlined frames and their `file:line` from the
//! file's DWARF (its own, or a build-ID or `.gnu_debuglink` debug file),
//! through the `addr2line` crate.
//!
//! Files are read once and shared by every process that maps them; a
//! process's modules are copied at fork and dropped at exec and exit.
//!
//! ```no_run
//! use kprobe_perf_unwind::{Mapping, UnwindArch, Unwinder, UserRegs};
//!
//! let mut unwinder = Unwinder::new(UnwindArch::X86_64);
//! unwinder.add_mapping(
//!     42,
//!     &Mapping {
//!         start: 0x7f00_0000_0000,
//!         end: 0x7f00_0016_0000,
//!         pgoff: 0x26000,
//!         path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
//!     },
//! );
//! let regs = UserRegs { pc: 0x7f00_0000_1234, sp: 0x7ffe_0000_0000, fp: 0, lr: 0 };
//! let stack = vec![0u8; 8192]; // the sample's stack bytes, from sp up
//! let mut frames = Vec::new();
//! unwinder.unwind(42, &regs, &stack, &mut frames);
//! for address in &frames {
//!     println!("{address:#x}");
//! }
//! ```
#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![deny(missing_docs)]

mod dwarf;
mod object;
mod source;

// Named for its feature only: flate2 with zlib-rs inflates compressed
// DWARF sections (see Cargo.toml).
use flate2 as _;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use framehop::aarch64::{CacheAarch64, UnwindRegsAarch64, UnwinderAarch64};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};

use crate::object::{Bytes, ElfFile, FileCache};
use crate::source::SourceCache;
pub use crate::source::{SourceFrame, SourceLookup};

/// Why a file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// The file is not an ELF object.
    #[error("{path} is not an ELF file: {why}")]
    NotElf {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        why: String,
    },
}

/// The architecture whose stacks are unwound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnwindArch {
    /// x86_64: `ip`, `sp` and `bp` are used.
    X86_64,
    /// aarch64: `pc`, `sp`, `x29` (fp) and `x30` (lr) are used.
    Aarch64,
}

/// The user registers the unwinder starts from, as sampled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserRegs {
    /// The instruction pointer (`ip` / `pc`).
    pub pc: u64,
    /// The stack pointer: the address of the first byte of the stack copy.
    pub sp: u64,
    /// The frame pointer (`bp` / `x29`).
    pub fp: u64,
    /// The link register (`x30`; unused on x86_64).
    pub lr: u64,
}

/// A file mapped executable into a process (an MMAP2 record, or a line
/// of `/proc/PID/maps`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The first address of the mapping.
    pub start: u64,
    /// One past its last address.
    pub end: u64,
    /// The file offset mapped at `start`.
    pub pgoff: u64,
    /// The file.
    pub path: PathBuf,
}

/// How an unwind ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The outermost frame was reached.
    Complete,
    /// The walk stopped early: the stack copy ended, or an address had no
    /// unwind information and no usable frame pointer.
    Truncated,
}

/// Where an address lies ([`Unwinder::locate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located<'a> {
    /// The mapped file.
    pub path: &'a Path,
    /// The address as the file states it (its SVMA): what DWARF and
    /// symbol tables use.
    pub svma: u64,
    /// Its offset in the file: what `perf script` prints for a user frame.
    pub file_offset: u64,
}

/// A module of one process, for symbolization: the file, and where it is.
#[derive(Clone)]
struct Placed {
    range: std::ops::Range<u64>,
    pgoff: u64,
    base: u64,
    file: Arc<ElfFile>,
}

#[derive(Clone)]
enum ArchUnwinder {
    X86(UnwinderX86_64<Bytes>),
    Arm(UnwinderAarch64<Bytes>),
}

/// One process's modules, in both forms.
#[derive(Clone)]
struct Process {
    unwinder: ArchUnwinder,
    placed: Vec<Placed>,
}

/// Unwinds sampled user stacks of many processes (see the crate's doc).
pub struct Unwinder {
    arch: UnwindArch,
    files: FileCache,
    processes: HashMap<u32, Process>,
    cache_x86: CacheX86_64,
    cache_arm: CacheAarch64,
    sources: SourceCache,
    debug_root: PathBuf,
}

impl Unwinder {
    /// An unwinder for `arch`, looking for debug files under
    /// `/usr/lib/debug`.
    pub fn new(arch: UnwindArch) -> Unwinder {
        Unwinder {
            arch,
            files: FileCache::default(),
            processes: HashMap::new(),
            cache_x86: CacheX86_64::new(),
            cache_arm: CacheAarch64::new(),
            sources: SourceCache::default(),
            debug_root: PathBuf::from("/usr/lib/debug"),
        }
    }

    /// Looks for build-ID and debug-link files under `root` instead of
    /// `/usr/lib/debug`.
    pub fn with_debug_root(mut self, root: impl Into<PathBuf>) -> Unwinder {
        self.debug_root = root.into();
        self
    }

    fn process(&mut self, pid: u32) -> &mut Process {
        let arch = self.arch;
        self.processes.entry(pid).or_insert_with(|| Process {
            unwinder: match arch {
                UnwindArch::X86_64 => ArchUnwinder::X86(UnwinderX86_64::new()),
                UnwindArch::Aarch64 => ArchUnwinder::Arm(UnwinderAarch64::new()),
            },
            placed: Vec::new(),
        })
    }

    /// Notes an executable mapping of `pid`. A file that cannot be read
    /// (gone since, not ELF, `[vdso]`-like names) is skipped: its frames
    /// unwind by frame pointer only, and its addresses stay unnamed.
    /// Returns whether the file was added.
    pub fn add_mapping(&mut self, pid: u32, m: &Mapping) -> bool {
        if !m.path.is_absolute() || m.end <= m.start {
            return false;
        }
        let Some(file) = self.files.get(&m.path) else {
            return false;
        };
        let base = file.base_avma(m.start, m.pgoff);
        let module = Module::new(
            m.path.display().to_string(),
            m.start..m.end,
            base,
            ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: file.text.as_ref().map(|s| s.svma.clone()),
                text: file.text.as_ref().map(|s| s.bytes.clone()),
                got_svma: file.got.clone(),
                eh_frame_svma: file.eh_frame.as_ref().map(|s| s.svma.clone()),
                eh_frame: file.eh_frame.as_ref().map(|s| s.bytes.clone()),
                eh_frame_hdr_svma: file.eh_frame_hdr.as_ref().map(|s| s.svma.clone()),
                eh_frame_hdr: file.eh_frame_hdr.as_ref().map(|s| s.bytes.clone()),
                debug_frame: file.debug_frame.as_ref().map(|s| s.bytes.clone()),
                ..Default::default()
            },
        );
        let process = self.process(pid);
        // A mapping over an old one replaces it.
        process
            .placed
            .retain(|p| p.range.end <= m.start || p.range.start >= m.end);
        match &mut process.unwinder {
            ArchUnwinder::X86(u) => {
                u.remove_module(m.start);
                u.add_module(module);
            }
            ArchUnwinder::Arm(u) => {
                u.remove_module(m.start);
                u.add_module(module);
            }
        }
        process.placed.push(Placed {
            range: m.start..m.end,
            pgoff: m.pgoff,
            base,
            file,
        });
        true
    }

    /// Reads `pid`'s executable file mappings from `/proc/PID/maps`
    /// (a process that was running before the recording started).
    /// Returns how many were added.
    pub fn add_proc_maps(&mut self, pid: u32) -> usize {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return 0;
        };
        parse_proc_maps(&text)
            .iter()
            .filter(|m| self.add_mapping(pid, m))
            .count()
    }

    /// Whether `pid` has any module.
    pub fn knows(&self, pid: u32) -> bool {
        self.processes.contains_key(&pid)
    }

    /// `child` starts with a copy of `parent`'s modules (a fork).
    pub fn fork(&mut self, parent: u32, child: u32) {
        if let Some(p) = self.processes.get(&parent).cloned() {
            self.processes.insert(child, p);
        }
    }

    /// Forgets `pid`'s modules (an exec, before the new image's mappings,
    /// or an exit).
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// Unwinds one sample of `pid`: `regs` as sampled, `stack` the copy
    /// of the stack from `regs.sp` up. Fills `out` with the instruction
    /// pointer, then each caller's return address, innermost first.
    pub fn unwind(
        &mut self,
        pid: u32,
        regs: &UserRegs,
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> Ending {
        out.clear();
        let sp = regs.sp;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let bytes = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            let mut word = [0u8; 8];
            word.copy_from_slice(bytes);
            Ok(u64::from_le_bytes(word))
        };
        let Some(process) = self.processes.get(&pid) else {
            out.push(regs.pc);
            return Ending::Truncated;
        };
        let ending = match &process.unwinder {
            ArchUnwinder::X86(u) => {
                let start = UnwindRegsX86_64::new(regs.pc, regs.sp, regs.fp);
                walk(u, regs.pc, start, &mut self.cache_x86, &mut read_stack, out)
            }
            ArchUnwinder::Arm(u) => {
                let start = UnwindRegsAarch64::new(regs.lr, regs.sp, regs.fp);
                walk(u, regs.pc, start, &mut self.cache_arm, &mut read_stack, out)
            }
        };
        if out.is_empty() {
            out.push(regs.pc);
        }
        ending
    }

    /// Where `address` of `pid` lies: its file, the address as the file
    /// states it, and its offset in the file.
    pub fn locate(&self, pid: u32, address: u64) -> Option<Located<'_>> {
        let p = self.processes.get(&pid)?;
        let m = p.placed.iter().find(|m| m.range.contains(&address))?;
        Some(Located {
            path: m.file.path.as_path(),
            svma: address.wrapping_sub(m.base),
            file_offset: address.wrapping_sub(m.range.start).wrapping_add(m.pgoff),
        })
    }

    /// The ELF symbol that holds `address` of `pid`, and the offset into
    /// it (from the debug file's symbol table when there is one, else the
    /// file's own `.symtab` or `.dynsym`).
    pub fn symbol(&mut self, pid: u32, address: u64) -> Option<(String, u64)> {
        let p = self.processes.get(&pid)?;
        let m = p.placed.iter().find(|m| m.range.contains(&address))?;
        let file = Arc::clone(&m.file);
        let svma = address.wrapping_sub(m.base);
        self.sources.symbol(&file, &self.debug_root, svma)
    }

    /// The source frames at `address` of `pid`, innermost (inlined) first,
    /// each with its function and `file:line` where the file's DWARF has
    /// them; empty when no DWARF covers it. `return_address`: the address
    /// is a caller's return address, so the call before it is looked up.
    pub fn source(&mut self, pid: u32, address: u64, return_address: bool) -> Vec<SourceFrame> {
        let Some(p) = self.processes.get(&pid) else {
            return Vec::new();
        };
        let Some(m) = p.placed.iter().find(|m| m.range.contains(&address)) else {
            return Vec::new();
        };
        let svma = address.wrapping_sub(m.base) - u64::from(return_address);
        let file = Arc::clone(&m.file);
        self.sources.frames(&file, &self.debug_root, svma)
    }
}

/// Walks the stack from `pc` with `u`, each frame's address into `out`.
fn walk<U: framehop::Unwinder>(
    u: &U,
    pc: u64,
    start: U::UnwindRegs,
    cache: &mut U::Cache,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
    out: &mut Vec<u64>,
) -> Ending {
    let mut it = u.iter_frames(pc, start, cache, read_stack);
    loop {
        match it.next() {
            Ok(Some(f)) => out.push(f.address()),
            Ok(None) => return Ending::Complete,
            Err(_) => return Ending::Truncated,
        }
    }
}

/// The executable file mappings in `/proc/PID/maps` text.
pub fn parse_proc_maps(text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(off), Some(_dev), Some(_inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path: String = f.collect::<Vec<_>>().join(" ");
        if !perms.contains('x') || !path.starts_with('/') {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(pgoff)) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        out.push(Mapping {
            start,
            end,
            pgoff,
            path: PathBuf::from(path.trim_end_matches(" (deleted)")),
        });
    }
    out
}

#[cfg(test)]
mod tests;
