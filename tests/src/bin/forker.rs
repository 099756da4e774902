//! A command that forks, for the uprobe tests: the parent calls
//! `kprobe_perf_fork_target(1, 16)`, forks a child that calls it with
//! `(2, 32)` and exits, waits for it, then calls it with `(3, 48)`. The
//! pids of parent and child are written to the file named by the first
//! argument, as `PARENT CHILD`.

use std::io::Write;

/// The probed function: not inlined, not mangled, so the ELF symbol table
/// has it by this name.
#[no_mangle]
#[inline(never)]
pub extern "C" fn kprobe_perf_fork_target(a: u64, b: u64) -> u64 {
    std::hint::black_box(a * 1000 + b)
}

fn main() {
    let Some(out) = std::env::args().nth(1) else {
        eprintln!("usage: forker PIDFILE");
        std::process::exit(2);
    };
    let parent = std::process::id();
    kprobe_perf_fork_target(1, 16);
    // SAFETY: this program has one thread; the child calls the target and
    // _exit only.
    let child = unsafe { libc::fork() };
    if child < 0 {
        eprintln!("fork: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    if child == 0 {
        kprobe_perf_fork_target(2, 32);
        // SAFETY: ends the child without running the parent's exit code.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child, writing into a local integer.
    unsafe { libc::waitpid(child, &mut status, 0) };
    kprobe_perf_fork_target(3, 48);
    let written = std::fs::File::create(&out).and_then(|mut f| writeln!(f, "{parent} {child}"));
    if let Err(e) = written {
        eprintln!("{out}: {e}");
        std::process::exit(1);
    }
}
