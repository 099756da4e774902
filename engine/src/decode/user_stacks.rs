//! User stacks unwound from DWARF ([`crate::stack::CallGraph::Dwarf`]):
//! the processes' executable mappings, followed from the MMAP, FORK, COMM
//! (exec) and EXIT records of the session (or of a file read back), and
//! each sample's user registers and stack copy walked with them through
//! the `kprobe-perf-unwind` crate.

use kprobe_perf_unwind::{Mapping, UnwindArch, Unwinder, UserRegs};
use linux_perf_event_reader::{EventRecord, Regs};

/// perf's register numbers of what the unwinder starts from
/// (arch/*/include/uapi/asm/perf_regs.h).
#[derive(Debug, Clone, Copy)]
struct RegNumbers {
    pc: u64,
    sp: u64,
    fp: u64,
    lr: Option<u64>,
}

const X86_64: RegNumbers = RegNumbers {
    pc: 8,
    sp: 7,
    fp: 6,
    lr: None,
};
const AARCH64: RegNumbers = RegNumbers {
    pc: 32,
    sp: 31,
    fp: 29,
    lr: Some(30),
};

/// The unwinder and what it knows of each process.
pub(crate) struct UserStacks {
    unwinder: Unwinder,
    regs: RegNumbers,
    /// A live session: a process no record mapped is read from
    /// `/proc/PID/maps` at its first sample.
    live: bool,
    addresses: Vec<u64>,
}

impl UserStacks {
    pub(crate) fn new(live: bool) -> UserStacks {
        let (arch, regs) = if cfg!(target_arch = "aarch64") {
            (UnwindArch::Aarch64, AARCH64)
        } else {
            (UnwindArch::X86_64, X86_64)
        };
        UserStacks {
            unwinder: Unwinder::new(arch),
            regs,
            live,
            addresses: Vec::new(),
        }
    }

    /// An executable mapping of `pid` (MMAP or MMAP2 record).
    pub(crate) fn mapped(&mut self, pid: i32, start: u64, len: u64, pgoff: u64, path: &[u8]) {
        let Ok(pid) = u32::try_from(pid) else {
            return;
        };
        let path = String::from_utf8_lossy(path);
        self.unwinder.add_mapping(
            pid,
            &Mapping {
                start,
                end: start.saturating_add(len),
                pgoff,
                path: path.as_ref().into(),
            },
        );
    }

    /// Follows the processes a record says something of: a new process
    /// (FORK of a process, not a thread) starts with its parent's
    /// mappings; an exec (COMM) drops them, the new image's follow. An
    /// exited process keeps its mappings: its last samples are unwound
    /// at handover, after its EXIT record has been read (a pid used again
    /// starts over at its FORK).
    pub(crate) fn follow(&mut self, record: &EventRecord<'_>) {
        match record {
            EventRecord::Fork(f) if f.pid != f.ppid => self.forked(f.ppid, f.pid),
            EventRecord::Comm(c) if c.is_execve => self.gone(c.pid),
            _ => {}
        }
    }

    /// A new process `child` of `parent` (a FORK record of a process, not
    /// a thread).
    fn forked(&mut self, parent: i32, child: i32) {
        if let (Ok(p), Ok(c)) = (u32::try_from(parent), u32::try_from(child)) {
            if !self.unwinder.knows(p) && self.live {
                self.unwinder.add_proc_maps(p);
            }
            // The child's own mappings may have been read first, from
            // another CPU's ring: they are newer than its parent's.
            if !self.unwinder.knows(c) {
                self.unwinder.fork(p, c);
            }
        }
    }

    /// `pid` exec'd (its mappings follow).
    fn gone(&mut self, pid: i32) {
        if let Ok(pid) = u32::try_from(pid) {
            self.unwinder.forget(pid);
        }
    }

    /// What the unwinder starts from in a sample's user registers: pc,
    /// sp, fp and lr.
    pub(crate) fn registers(&self, regs: &Regs<'_>) -> [u64; 4] {
        let n = self.regs;
        let get = |r: u64| regs.get(r).unwrap_or(0);
        [get(n.pc), get(n.sp), get(n.fp), n.lr.map_or(0, get)]
    }

    /// Appends the user frames of one sample of `pid` to `out`, innermost
    /// first: the sampled pc, then each caller's call, one byte before its
    /// return address (as `perf script` prints DWARF-unwound frames: the
    /// address that names the calling function and line even when the
    /// call is a function's last instruction). `regs` as
    /// [`UserStacks::registers`] gives them.
    pub(crate) fn unwind(
        &mut self,
        pid: i32,
        regs: [u64; 4],
        stack: &[u8],
        out: &mut Vec<crate::decode::frames::StackFrame>,
    ) {
        let Ok(pid) = u32::try_from(pid) else {
            return;
        };
        let [pc, sp, fp, lr] = regs;
        if pc == 0 {
            return;
        }
        if self.live && !self.unwinder.knows(pid) {
            self.unwinder.add_proc_maps(pid);
        }
        let user = UserRegs { pc, sp, fp, lr };
        self.unwinder.unwind(pid, &user, stack, &mut self.addresses);
        for (i, &a) in self.addresses.iter().enumerate() {
            out.push(crate::decode::frames::StackFrame {
                address: if i == 0 { a } else { a.saturating_sub(1) },
                user: true,
            });
        }
    }
}
