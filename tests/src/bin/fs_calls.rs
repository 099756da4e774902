//! A workload for tests/perf_probe_values.rs: `fs_calls DIR ROUNDS`
//! makes, ROUNDS times, one fixed series of file, pipe, eventfd and
//! memory system calls in DIR (which must exist and be empty), with
//! arguments the test knows: modes, owners, sizes, offsets and names
//! that depend only on the round. Every call is made through libc
//! directly, so that each is the system call it names (std may pick
//! statx for a stat, or openat2 flags of its own). It fails on the
//! first call that does not do what it should. It stops itself
//! (SIGSTOP) before the first round: the test attaches its recorders to
//! the stopped process, then sends SIGCONT.

use std::ffi::CString;

/// `what` failed: the error, as the OS gave it.
fn check(ok: bool, what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(ok, "{what}: {}", std::io::Error::last_os_error());
    Ok(())
}

fn c(path: &str) -> CString {
    CString::new(path).expect("no NUL in a path")
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, rounds] = args.as_slice() else {
        anyhow::bail!("usage: fs_calls DIR ROUNDS");
    };
    let rounds: u32 = rounds.parse()?;
    // SAFETY: umask only sets this process's file mode mask; raise only
    // stops this process until a SIGCONT.
    unsafe {
        libc::umask(0);
        // Stopped before its first probed call, so that recorders
        // attached to its pid all see it from the same first call.
        check(libc::raise(libc::SIGSTOP) == 0, "raise SIGSTOP")?;
    }
    for r in 0..rounds {
        round(dir, r)?;
    }
    Ok(())
}

/// The paths of one round, all in the test's directory.
struct Names {
    dir: CString,
    file: CString,
    copy: CString,
    sub: CString,
    fifo: CString,
    link: CString,
    hard: CString,
    moved: CString,
    /// The symbolic link's target, relative to the directory.
    target: CString,
}

impl Names {
    fn of_round(dir: &str, r: u32) -> Names {
        Names {
            dir: c(dir),
            file: c(&format!("{dir}/file{r}")),
            copy: c(&format!("{dir}/copy{r}")),
            sub: c(&format!("{dir}/sub{r}")),
            fifo: c(&format!("{dir}/fifo{r}")),
            link: c(&format!("{dir}/link{r}")),
            hard: c(&format!("{dir}/hard{r}")),
            moved: c(&format!("{dir}/moved{r}")),
            target: c(&format!("file{r}")),
        }
    }
}

/// One round: `r` picks the names and some of the numbers. The calls
/// come in a fixed order, the test's.
fn round(dir: &str, r: u32) -> anyhow::Result<()> {
    let n = Names::of_round(dir, r);
    let data = vec![b'x'; 100 + r as usize];
    let mut buf = [0u8; 256];
    write_and_duplicate(&n, &data, r)?;
    read_and_copy(&n, &mut buf)?;
    change_attributes(&n, r)?;
    make_names(&n, &mut buf)?;
    remove_all(&n)?;
    pipe_eventfd_and_memory(&data, &mut buf, r)
}

/// A file created with mode 0640 (+ r), written, grown; its descriptor
/// flags changed and duplicated three ways.
fn write_and_duplicate(n: &Names, data: &[u8], r: u32) -> anyhow::Result<()> {
    // SAFETY: the path is a live NUL-terminated string, the buffer as
    // long as the length given with it; every fd is one opened here.
    unsafe {
        let fd = libc::open(
            n.file.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            0o640 + r,
        );
        check(fd >= 0, "open O_CREAT")?;
        check(
            libc::write(fd, data.as_ptr().cast(), data.len()) == data.len() as isize,
            "write",
        )?;
        check(libc::fallocate(fd, 0, 4096, 8192) == 0, "fallocate")?;
        // fcntl: F_GETFL, F_SETFL O_NONBLOCK, F_DUPFD_CLOEXEC from 10 + r.
        check(libc::fcntl(fd, libc::F_GETFL) >= 0, "F_GETFL")?;
        check(
            libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) == 0,
            "F_SETFL",
        )?;
        let dupfd = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10 + r as i32);
        check(dupfd >= 10, "F_DUPFD_CLOEXEC")?;
        // dup3 onto 20 + r with O_CLOEXEC, dup2 onto 30 + r.
        check(
            libc::dup3(fd, 20 + r as i32, libc::O_CLOEXEC) == 20 + r as i32,
            "dup3",
        )?;
        check(libc::dup2(fd, 30 + r as i32) == 30 + r as i32, "dup2")?;
        for f in [fd, dupfd, 20 + r as i32, 30 + r as i32] {
            libc::close(f);
        }
    }
    Ok(())
}

/// The file reopened and read; 50 bytes of it sent into a new file.
fn read_and_copy(n: &Names, buf: &mut [u8; 256]) -> anyhow::Result<()> {
    // SAFETY: the paths are live NUL-terminated strings, the buffer
    // longer than the length read; every fd is one opened here.
    unsafe {
        let fd = libc::open(n.file.as_ptr(), libc::O_RDONLY);
        check(fd >= 0, "open O_RDONLY")?;
        check(libc::read(fd, buf.as_mut_ptr().cast(), 64) == 64, "read")?;
        let out = libc::open(n.copy.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o600);
        check(out >= 0, "open the copy")?;
        check(
            libc::sendfile(out, fd, std::ptr::null_mut(), 50) == 50,
            "sendfile",
        )?;
        libc::close(out);
        libc::close(fd);
    }
    Ok(())
}

/// stat (newfstatat), chmod to 0600, chown to 1000 + r:2000 + r, access
/// for writing.
fn change_attributes(n: &Names, r: u32) -> anyhow::Result<()> {
    // SAFETY: the path is a live NUL-terminated string; `st` is a
    // zeroed stat the call fills.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        check(libc::stat(n.file.as_ptr(), &mut st) == 0, "stat")?;
        check(libc::chmod(n.file.as_ptr(), 0o600) == 0, "chmod")?;
        check(
            libc::chown(n.file.as_ptr(), 1000 + r, 2000 + r) == 0,
            "chown",
        )?;
        check(libc::access(n.file.as_ptr(), libc::W_OK) == 0, "access")?;
    }
    Ok(())
}

/// mkdir 0750, a FIFO 0644, a symbolic link and its reading, a hard
/// link, a rename; then the directory's entries, read with getdents64.
fn make_names(n: &Names, buf: &mut [u8; 256]) -> anyhow::Result<()> {
    // SAFETY: the paths are live NUL-terminated strings, the buffer at
    // least as long as the lengths given with it; the fd is opened here.
    unsafe {
        check(libc::mkdir(n.sub.as_ptr(), 0o750) == 0, "mkdir")?;
        check(libc::mkfifo(n.fifo.as_ptr(), 0o644) == 0, "mkfifo")?;
        check(
            libc::symlink(n.target.as_ptr(), n.link.as_ptr()) == 0,
            "symlink",
        )?;
        let len = libc::readlink(n.link.as_ptr(), buf.as_mut_ptr().cast(), 200);
        check(len == n.target.as_bytes().len() as isize, "readlink")?;
        check(libc::link(n.file.as_ptr(), n.hard.as_ptr()) == 0, "link")?;
        check(
            libc::rename(n.hard.as_ptr(), n.moved.as_ptr()) == 0,
            "rename",
        )?;
        let d = libc::open(n.dir.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
        check(d >= 0, "open the directory")?;
        while libc::syscall(libc::SYS_getdents64, d, buf.as_mut_ptr(), buf.len()) > 0 {}
        libc::close(d);
    }
    Ok(())
}

/// Everything the round made, removed again.
fn remove_all(n: &Names) -> anyhow::Result<()> {
    // SAFETY: the paths are live NUL-terminated strings.
    unsafe {
        for p in [&n.moved, &n.link, &n.fifo, &n.copy, &n.file] {
            check(libc::unlink(p.as_ptr()) == 0, "unlink")?;
        }
        check(libc::rmdir(n.sub.as_ptr()) == 0, "rmdir")?;
    }
    Ok(())
}

/// A pipe (O_CLOEXEC) with 10 + r bytes through it, an eventfd with
/// count 7 + r, and 4 + r pages mapped, 2 of them advised away,
/// unmapped.
fn pipe_eventfd_and_memory(data: &[u8], buf: &mut [u8; 256], r: u32) -> anyhow::Result<()> {
    // SAFETY: the buffers are at least as long as the lengths given with
    // them; every fd and the mapping are made here.
    unsafe {
        let mut p = [0i32; 2];
        check(libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) == 0, "pipe2")?;
        let n = 10 + r as usize;
        check(
            libc::write(p[1], data.as_ptr().cast(), n) == n as isize,
            "write to the pipe",
        )?;
        check(
            libc::read(p[0], buf.as_mut_ptr().cast(), 256) == n as isize,
            "read the pipe",
        )?;
        libc::close(p[0]);
        libc::close(p[1]);
        let e = libc::eventfd(7 + r, libc::EFD_CLOEXEC);
        check(e >= 0, "eventfd")?;
        libc::close(e);
        let len = (4 + r as usize) * 4096;
        let m = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        check(m != libc::MAP_FAILED, "mmap")?;
        check(libc::madvise(m, 8192, libc::MADV_DONTNEED) == 0, "madvise")?;
        libc::munmap(m, len);
    }
    Ok(())
}
