//! A workload for the source-line tests: creates N files in DIR with the
//! modes given in turn (umask 0), keeping each open, and prints one line
//! per file, `FD PATH MODE` (mode in octal), after the last is open.
//!
//! `open_held [--creat] DIR N MODE...`: each create is one openat(2) with
//! O_CREAT, so one call of do_sys_openat2 whose `fd`, `tmp->name` and
//! `op.mode` the test knows exactly; with `--creat`, one creat(2), whose
//! syscall has build_open_how inlined into it.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let creat = args.first().is_some_and(|a| a == "--creat");
    if creat {
        args.remove(0);
    }
    let [dir, n, modes @ ..] = args.as_slice() else {
        anyhow::bail!("usage: open_held [--creat] DIR N MODE... (creates DIR/f0 .. DIR/fN-1 with the modes in turn, octal)");
    };
    let n: usize = n
        .parse()
        .map_err(|_| anyhow::anyhow!("N must be a whole number, not {n:?}"))?;
    let modes: Vec<u32> = modes
        .iter()
        .map(|m| u32::from_str_radix(m, 8))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("a MODE is octal: {e}"))?;
    anyhow::ensure!(!modes.is_empty(), "give at least one MODE");
    // SAFETY: umask only sets this process's file mode mask.
    unsafe { libc::umask(0) };
    let mut held = Vec::with_capacity(n);
    let mut lines = String::new();
    for i in 0..n {
        let path = format!("{dir}/f{i}");
        let mode = modes[i % modes.len()];
        let f = if creat {
            creat_file(&path, mode)
        } else {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&path)
        }
        .map_err(|e| anyhow::anyhow!("cannot create {path}: {e}"))?;
        lines.push_str(&format!("{} {path} {mode:o}\n", f.as_raw_fd()));
        held.push(f);
    }
    print!("{lines}");
    Ok(())
}

/// creat(2) itself (glibc's creat() may call openat instead).
#[cfg(target_arch = "x86_64")]
fn creat_file(path: &str, mode: u32) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    let c = std::ffi::CString::new(path).map_err(std::io::Error::other)?;
    // SAFETY: c is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::syscall(libc::SYS_creat, c.as_ptr(), mode as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by creat and is owned by nobody else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd as i32) })
}

/// arm64 has no creat(2) (its tests of creat skip there): an open with
/// the same flags.
#[cfg(not(target_arch = "x86_64"))]
fn creat_file(path: &str, mode: u32) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
}
