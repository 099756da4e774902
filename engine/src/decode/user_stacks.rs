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

/// A change to the processes' mappings, applied in time order.
#[derive(Debug)]
enum Change {
    Mapped(u32, Mapping),
    Forked { parent: u32, child: u32 },
    Exec(u32),
}

/// The unwinder and what it knows of each process.
pub(crate) struct UserStacks {
    unwinder: Unwinder,
    regs: RegNumbers,
    /// A live session: a process no record mapped is read from
    /// `/proc/PID/maps` at its first sample.
    live: bool,
    addresses: Vec<u64>,
    /// Changes read but not applied yet, with their times: each CPU's
    /// ring is read in turn, so an exec read from one ring may be older
    /// than the new image's mappings read just before it from another.
    /// Applied, oldest first, up to each unwound sample's time.
    changes: Vec<(u64, Change)>,
    /// `changes` is sorted by time.
    sorted: bool,
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
            changes: Vec::new(),
            sorted: true,
        }
    }

    fn push(&mut self, time: u64, change: Change) {
        if self.changes.last().is_some_and(|(t, _)| *t > time) {
            self.sorted = false;
        }
        self.changes.push((time, change));
    }

    /// Applies every change up to `time` (inclusive), oldest first (of
    /// equal times, in the order read). Called with a sample's time
    /// before unwinding it, and with the time up to which every record
    /// has been read at the end of a round.
    pub(crate) fn advance(&mut self, time: u64) {
        if !self.sorted {
            self.changes.sort_by_key(|(t, _)| *t);
            self.sorted = true;
        }
        let n = self.changes.partition_point(|(t, _)| *t <= time);
        if n == 0 {
            return;
        }
        let UserStacks {
            unwinder,
            changes,
            live,
            ..
        } = self;
        for (_, change) in changes.drain(..n) {
            match change {
                Change::Mapped(pid, m) => {
                    unwinder.add_mapping(pid, &m);
                }
                Change::Forked { parent, child } => {
                    if !unwinder.knows(parent) && *live {
                        unwinder.add_proc_maps(parent);
                    }
                    // A pid used again starts over.
                    unwinder.forget(child);
                    unwinder.fork(parent, child);
                }
                Change::Exec(pid) => unwinder.forget(pid),
            }
        }
    }

    /// An executable mapping of `pid` (MMAP or MMAP2 record) made at
    /// `time` (0 when the record has none: a mapping read from /proc).
    pub(crate) fn mapped(
        &mut self,
        time: u64,
        pid: i32,
        start: u64,
        len: u64,
        pgoff: u64,
        path: &[u8],
    ) {
        let Ok(pid) = u32::try_from(pid) else {
            return;
        };
        let path = String::from_utf8_lossy(path);
        let m = Mapping {
            start,
            end: start.saturating_add(len),
            pgoff,
            path: path.as_ref().into(),
        };
        self.push(time, Change::Mapped(pid, m));
    }

    /// Follows the processes a record of `time` says something of: a new
    /// process (FORK of a process, not a thread) starts with its parent's
    /// mappings; an exec (COMM) drops them, the new image's follow. An
    /// exited process keeps its mappings: its last samples are unwound
    /// at handover, after its EXIT record has been read (a pid used again
    /// starts over at its FORK).
    pub(crate) fn follow(&mut self, time: u64, record: &EventRecord<'_>) {
        let pid = |p: i32| u32::try_from(p).ok();
        match record {
            EventRecord::Fork(f) if f.pid != f.ppid => {
                if let (Some(parent), Some(child)) = (pid(f.ppid), pid(f.pid)) {
                    self.push(time, Change::Forked { parent, child });
                }
            }
            EventRecord::Comm(c) if c.is_execve => {
                if let Some(p) = pid(c.pid) {
                    self.push(time, Change::Exec(p));
                }
            }
            _ => {}
        }
    }

    /// What the unwinder starts from in a sample's user registers: pc,
    /// sp, fp and lr.
    pub(crate) fn registers(&self, regs: &Regs<'_>) -> [u64; 4] {
        let n = self.regs;
        let get = |r: u64| regs.get(r).unwrap_or(0);
        [get(n.pc), get(n.sp), get(n.fp), n.lr.map_or(0, get)]
    }

    /// Appends the user frames of one sample of `pid` at `time` (the
    /// changes up to it applied first) to `out`, innermost
    /// first: the sampled pc, then each caller's call, one byte before its
    /// return address (as `perf script` prints DWARF-unwound frames: the
    /// address that names the calling function and line even when the
    /// call is a function's last instruction). `regs` as
    /// [`UserStacks::registers`] gives them.
    pub(crate) fn unwind(
        &mut self,
        pid: i32,
        time: u64,
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
        self.advance(time);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn exe_mapping(s: &mut UserStacks, time: u64, pid: i32) {
        let exe = std::env::current_exe().unwrap();
        s.mapped(
            time,
            pid,
            0x1000,
            0x1000,
            0,
            exe.as_os_str().as_encoded_bytes(),
        );
    }

    #[test]
    fn an_exec_read_after_the_new_images_mappings_applies_before_them() {
        // CPU 1's ring (read second) holds the exec at t=10; CPU 0's ring
        // (read first) the new image's mapping at t=20.
        let mut s = UserStacks::new(false);
        exe_mapping(&mut s, 20, 7);
        s.push(10, Change::Exec(7));
        s.advance(15);
        assert!(
            !s.unwinder.knows(7),
            "the mapping at t=20 is not applied at t=15"
        );
        s.advance(25);
        assert!(
            s.unwinder.knows(7),
            "the exec at t=10 must not drop the mapping at t=20"
        );
    }

    #[test]
    fn a_fork_copies_the_parents_mappings_of_its_time_and_a_reused_pid_starts_over() {
        let mut s = UserStacks::new(false);
        exe_mapping(&mut s, 5, 1);
        exe_mapping(&mut s, 6, 9); // an earlier process 9
        s.push(8, Change::Exec(9)); // which exec'd, then exited
        s.push(
            30,
            Change::Forked {
                parent: 1,
                child: 9,
            },
        );
        s.advance(29);
        assert!(!s.unwinder.knows(9));
        s.advance(30);
        assert!(s.unwinder.knows(9), "pid 9 forked from 1 has 1's mappings");
        assert!(s.changes.is_empty());
    }
}
