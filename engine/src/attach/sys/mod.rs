//! Every system call the engine makes that needs `unsafe`: perf_event_open,
//! its ioctls, mmap of ring buffers, and starting a command held before exec.
//! One function per call, returning `io::Result`, so the rest of the engine
//! stays safe and testable with recorded data.
//!
//! The perf calls (perf_event_open, its ioctls, reading a counter, mmap and
//! munmap of a ring, the open-files limit) all go through one crate-private
//! entry point, [`syscall`], which takes a [`Syscall`]: the engine's unit
//! tests replace it on their thread with a fake (`sys::fake`), so the code
//! around each call (argument building, error paths, retries) runs without a
//! kernel. Closing a descriptor is left to `OwnedFd`; fork/exec, pipes,
//! sockets and pidfds are not faked.

use std::ffi::{CStr, CString};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

pub(crate) use perf_event_open_sys::bindings::perf_event_attr;
use perf_event_open_sys::bindings::{PERF_ATTR_SIZE_VER5, PERF_FLAG_FD_CLOEXEC};

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;

/// The size we declare in `attr.size`: it covers `config2` and
/// `sample_regs_intr`, and every kernel since 4.1 knows it.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) const ATTR_SIZE: u32 = PERF_ATTR_SIZE_VER5;

/// Where the kernel lists its PMUs (`kprobe`, `uprobe` ...).
pub(crate) const SYSFS_PMUS: &str = "/sys/bus/event_source/devices";

/// One system call of the perf layer, with its arguments, as [`syscall`]
/// takes it. Everything it carries is a borrow the call may use, so making
/// one is safe; the one call that could hurt memory, munmap, carries an
/// [`Unmap`], which only `unsafe` code can make.
pub(crate) enum Syscall<'a> {
    /// perf_event_open(2); returns the new descriptor.
    PerfEventOpen {
        /// The attr, as the kernel will read it (`size` set).
        attr: &'a mut perf_event_attr,
        /// `pid` argument.
        pid: i32,
        /// `cpu` argument.
        cpu: i32,
        /// `group_fd` argument (-1: no group).
        group_fd: i32,
        /// `flags` argument, `PERF_FLAG_FD_CLOEXEC` included.
        flags: u64,
    },
    /// An ioctl on a perf event descriptor; returns its result (0).
    PerfIoctl {
        /// The perf event.
        fd: BorrowedFd<'a>,
        /// Which ioctl, with its argument.
        request: PerfIoctl<'a>,
    },
    /// read(2) of a counter; returns the number of bytes read.
    Read {
        /// The perf event.
        fd: BorrowedFd<'a>,
        /// Where the bytes go.
        buf: &'a mut [u8],
    },
    /// mmap(2) of a perf event's ring, shared, at offset 0; returns the
    /// address of the mapping.
    Mmap {
        /// The perf event.
        fd: BorrowedFd<'a>,
        /// Bytes to map (1 + 2^n pages).
        len: usize,
        /// `PROT_READ`, with `PROT_WRITE` for a ring the reader frees.
        prot: libc::c_int,
    },
    /// munmap(2) of a ring mapped by [`Syscall::Mmap`]; returns 0.
    Munmap(Unmap),
    /// getrlimit(2) of `RLIMIT_NOFILE`; returns 0.
    GetFileLimit(&'a mut libc::rlimit),
    /// setrlimit(2) of `RLIMIT_NOFILE`; returns 0.
    SetFileLimit(&'a libc::rlimit),
}

/// The perf event ioctls the engine uses.
pub(crate) enum PerfIoctl<'a> {
    /// `PERF_EVENT_IOC_ENABLE`.
    Enable,
    /// `PERF_EVENT_IOC_DISABLE`.
    Disable,
    /// `PERF_EVENT_IOC_PAUSE_OUTPUT`, pause (true) or resume (false).
    PauseOutput(bool),
    /// `PERF_EVENT_IOC_SET_OUTPUT` to this event's ring.
    SetOutput(BorrowedFd<'a>),
    /// `PERF_EVENT_IOC_ID`, which writes the event's id here.
    Id(&'a mut u64),
    /// `PERF_EVENT_IOC_SET_FILTER` with this ftrace filter.
    SetFilter(&'a CStr),
}

/// A mapping to remove: made only by `unsafe` code that promises it is a
/// ring mapped by [`Syscall::Mmap`] that nothing refers to any more.
pub(crate) struct Unmap {
    addr: *mut u8,
    len: usize,
}

impl Unmap {
    /// # Safety
    ///
    /// `addr`/`len` must be exactly a mapping returned by [`Syscall::Mmap`],
    /// not yet unmapped, that nothing reads or writes after this call.
    unsafe fn new(addr: *mut u8, len: usize) -> Unmap {
        Unmap { addr, len }
    }

    /// Start of the mapping.
    #[cfg(test)]
    pub(crate) fn addr(&self) -> *mut u8 {
        self.addr
    }

    /// Its length in bytes.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl fmt::Debug for Syscall<'_> {
    /// One line per call, as the tests log and compare them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Syscall::PerfEventOpen {
                attr,
                pid,
                cpu,
                group_fd,
                flags,
            } => write!(
                f,
                "perf_event_open(type={}, size={}, config={:#x}, pid={pid}, cpu={cpu}, group_fd={group_fd}, flags={flags:#x})",
                attr.type_,
                attr.size,
                attr.config
            ),
            Syscall::PerfIoctl { fd, request } => {
                let fd = fd.as_raw_fd();
                match request {
                    PerfIoctl::Enable => write!(f, "ioctl({fd}, ENABLE)"),
                    PerfIoctl::Disable => write!(f, "ioctl({fd}, DISABLE)"),
                    PerfIoctl::PauseOutput(p) => write!(f, "ioctl({fd}, PAUSE_OUTPUT, {})", u32::from(*p)),
                    PerfIoctl::SetOutput(t) => write!(f, "ioctl({fd}, SET_OUTPUT, {})", t.as_raw_fd()),
                    PerfIoctl::Id(_) => write!(f, "ioctl({fd}, ID)"),
                    PerfIoctl::SetFilter(s) => write!(f, "ioctl({fd}, SET_FILTER, {s:?})"),
                }
            }
            Syscall::Read { fd, buf } => write!(f, "read({}, {})", fd.as_raw_fd(), buf.len()),
            Syscall::Mmap { fd, len, prot } => {
                write!(f, "mmap({}, {len}, prot={prot:#x})", fd.as_raw_fd())
            }
            Syscall::Munmap(u) => write!(f, "munmap({:p}, {})", u.addr, u.len),
            Syscall::GetFileLimit(_) => write!(f, "getrlimit(NOFILE)"),
            Syscall::SetFileLimit(l) => {
                write!(f, "setrlimit(NOFILE, cur={}, max={})", l.rlim_cur, l.rlim_max)
            }
        }
    }
}

/// Makes one [`Syscall`]: the only place the perf layer enters the kernel.
/// A negative return becomes the thread's errno as an `io::Error`. In the
/// engine's unit tests, a fake installed on the calling thread
/// (`sys::fake::install`) answers instead.
pub(crate) fn syscall(call: Syscall<'_>) -> io::Result<i64> {
    #[cfg(test)]
    let call = match fake::answer(call) {
        Ok(answer) => return answer,
        Err(call) => call,
    };
    let rc: i64 = match call {
        Syscall::PerfEventOpen {
            attr,
            pid,
            cpu,
            group_fd,
            flags,
        } => {
            // SAFETY: `attr` is a fully initialised perf_event_attr we hold
            // exclusively; the kernel reads at most `attr.size` bytes of it.
            // Pointers inside it (`config1`, a probe's name) are the
            // caller's to keep alive, which `perf_event_open` below does.
            let fd = unsafe {
                perf_event_open_sys::perf_event_open(attr, pid, cpu, group_fd, flags as _)
            };
            i64::from(fd)
        }
        Syscall::PerfIoctl { fd, request } => i64::from(perf_ioctl(fd.as_raw_fd(), request)),
        Syscall::Read { fd, buf } => {
            // SAFETY: read(2) writes at most `buf.len()` bytes into `buf`,
            // which we borrow mutably for the call.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            n as i64
        }
        Syscall::Mmap { fd, len, prot } => {
            // SAFETY: a fresh shared mapping of a perf fd at an address the
            // kernel picks, so no existing memory is affected; the kernel
            // validates the length (1 + 2^n pages).
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            return Ok(ptr as i64);
        }
        Syscall::Munmap(u) => {
            // SAFETY: an `Unmap` is made only for a mapping returned by mmap
            // that nothing uses any more (see `Unmap::new`).
            let rc = unsafe { libc::munmap(u.addr.cast(), u.len) };
            i64::from(rc)
        }
        Syscall::GetFileLimit(lim) => {
            // SAFETY: getrlimit writes one rlimit into the struct we borrow.
            i64::from(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, lim) })
        }
        Syscall::SetFileLimit(lim) => {
            // SAFETY: setrlimit reads one rlimit from the struct we borrow.
            i64::from(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, lim) })
        }
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// One perf ioctl on `fd`, a descriptor [`syscall`] borrows for the call;
/// the kernel's return code.
fn perf_ioctl(fd: RawFd, request: PerfIoctl<'_>) -> i32 {
    // SAFETY: `fd` is a live descriptor (borrowed for the call).
    // ENABLE, DISABLE and PAUSE_OUTPUT take an integer, SET_OUTPUT
    // another live descriptor, ID a pointer to a u64 that we
    // borrow mutably for the call, and SET_FILTER a NUL-terminated
    // string we borrow for the call (the kernel copies it with
    // strndup_user and never writes through the pointer, so the
    // `*mut` cast of a shared borrow is not used to mutate).
    unsafe {
        use perf_event_open_sys::ioctls;
        match request {
            PerfIoctl::Enable => ioctls::ENABLE(fd, 0),
            PerfIoctl::Disable => ioctls::DISABLE(fd, 0),
            PerfIoctl::PauseOutput(pause) => ioctls::PAUSE_OUTPUT(fd, u32::from(pause)),
            PerfIoctl::SetOutput(target) => ioctls::SET_OUTPUT(fd, target.as_raw_fd()),
            PerfIoctl::Id(id) => ioctls::ID(fd, id),
            PerfIoctl::SetFilter(s) => ioctls::SET_FILTER(fd, s.as_ptr().cast_mut()),
        }
    }
}

/// Opens one perf event.
///
/// `pid`/`cpu` follow perf_event_open(2): `(-1, N)` is system-wide on CPU N,
/// `(P, -1)` follows task P on every CPU, `(P, N)` follows P on CPU N.
/// `attr.size` must be [`ATTR_SIZE`]; the pointers in `config1` (if any)
/// must stay valid for the call, which the caller guarantees by keeping the
/// `CStr` alive: it is passed here for that reason.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn perf_event_open(
    attr: &perf_event_attr,
    name: Option<&CStr>,
    pid: i32,
    cpu: i32,
    flags: u64,
) -> io::Result<OwnedFd> {
    let mut attr = *attr;
    attr.size = ATTR_SIZE;
    if let Some(name) = name {
        attr.__bindgen_anon_3.config1 = name.as_ptr() as u64;
    }
    // `config1`, when set, points at `name`, a NUL-terminated string
    // borrowed for the whole call.
    let fd = syscall(Syscall::PerfEventOpen {
        attr: &mut attr,
        pid,
        cpu,
        group_fd: -1,
        flags: u64::from(PERF_FLAG_FD_CLOEXEC) | flags,
    })?;
    let fd = RawFd::try_from(fd).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("perf_event_open returned {fd}, which is no descriptor"),
        )
    })?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Why [`raise_fd_limit`] failed.
#[derive(Debug, thiserror::Error)]
pub enum FdLimitError {
    /// The hard limit is below what is needed (only root may raise it).
    #[error("the hard limit on open files is {hard}")]
    HardLimit {
        /// The hard RLIMIT_NOFILE.
        hard: u64,
    },
    /// getrlimit or setrlimit failed.
    #[error(transparent)]
    Os(#[from] io::Error),
}

impl FdLimitError {
    /// The OS error number, for [`FdLimitError::Os`].
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            FdLimitError::Os(e) => e.raw_os_error(),
            FdLimitError::HardLimit { .. } => None,
        }
    }
}

/// Raises the soft RLIMIT_NOFILE to at least `needed` (up to the hard
/// limit); fails when the hard limit is lower.
pub fn raise_fd_limit(needed: usize) -> Result<(), FdLimitError> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    syscall(Syscall::GetFileLimit(&mut lim))?;
    let needed = needed as libc::rlim_t;
    if lim.rlim_cur >= needed {
        return Ok(());
    }
    if lim.rlim_max < needed {
        return Err(FdLimitError::HardLimit { hard: lim.rlim_max });
    }
    lim.rlim_cur = needed;
    syscall(Syscall::SetFileLimit(&lim))?;
    Ok(())
}

fn ioctl(fd: &OwnedFd, request: PerfIoctl<'_>) -> io::Result<()> {
    syscall(Syscall::PerfIoctl {
        fd: fd.as_fd(),
        request,
    })
    .map(drop)
}

/// `PERF_EVENT_IOC_ENABLE`.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn enable(fd: &OwnedFd) -> io::Result<()> {
    ioctl(fd, PerfIoctl::Enable)
}

/// `PERF_EVENT_IOC_DISABLE`.
pub(crate) fn disable(fd: &OwnedFd) -> io::Result<()> {
    ioctl(fd, PerfIoctl::Disable)
}

/// `PERF_EVENT_IOC_PAUSE_OUTPUT`: stop (`true`) or resume (`false`) the
/// kernel writing into this event's ring. While paused, records that would
/// have been written are dropped and counted as lost by the kernel.
pub(crate) fn pause_output(fd: &OwnedFd, pause: bool) -> io::Result<()> {
    ioctl(fd, PerfIoctl::PauseOutput(pause))
}

/// `PERF_EVENT_IOC_SET_OUTPUT`: send `fd`'s records to `target`'s ring.
pub(crate) fn set_output(fd: &OwnedFd, target: &OwnedFd) -> io::Result<()> {
    ioctl(fd, PerfIoctl::SetOutput(target.as_fd()))
}

/// The event's count (read(2) with the default read_format). For a probe
/// with a sample period of 1 it is the number of hits, including the ones
/// whose samples were lost because the ring was full.
pub(crate) fn read_count(fd: &OwnedFd) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    let n = syscall(Syscall::Read {
        fd: fd.as_fd(),
        buf: &mut buf,
    })?;
    if n != 8 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("read {n} of 8 bytes"),
        ));
    }
    Ok(u64::from_ne_bytes(buf))
}

/// `PERF_EVENT_IOC_SET_FILTER`: the kernel runs this ftrace filter on
/// each record of the event before it is written (tracing events only:
/// kprobes, uprobes and tracepoints). Once per fd: a second call on the
/// same fd fails with EEXIST; a filter the kernel cannot parse fails with
/// EINVAL and writes nothing to tracefs's `error_log`.
pub(crate) fn set_filter(fd: &OwnedFd, filter: &CStr) -> io::Result<()> {
    ioctl(fd, PerfIoctl::SetFilter(filter))
}

/// `PERF_EVENT_IOC_ID`: the id samples of this event carry.
pub(crate) fn event_id(fd: &OwnedFd) -> io::Result<u64> {
    let mut id = 0u64;
    ioctl(fd, PerfIoctl::Id(&mut id))?;
    Ok(id)
}

/// The bytes of an attr as the kernel reads them (its first [`ATTR_SIZE`]
/// bytes), for parsers that describe records from an attr.
pub(crate) fn attr_bytes(attr: &perf_event_attr) -> Vec<u8> {
    let len = (ATTR_SIZE as usize).min(std::mem::size_of::<perf_event_attr>());
    // SAFETY: perf_event_attr is a plain-old-data C struct without padding
    // holes that could be uninitialised (bindgen pads explicitly), and `len`
    // does not exceed its size; the slice lives only for this copy.
    unsafe { std::slice::from_raw_parts((attr as *const perf_event_attr).cast::<u8>(), len) }
        .to_vec()
}

/// A shared, read-write mapping of a perf ring buffer.
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
    /// Made by a test's fake mmap: unmapped only through the fake.
    #[cfg(test)]
    faked: bool,
}

// SAFETY: the mapping is plain memory shared with the kernel; all access
// goes through `RingBuffer`, which is used from one thread at a time.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `1 + data_pages` pages of a perf event fd (metadata page first).
    pub(crate) fn new(fd: &OwnedFd, data_pages: usize) -> io::Result<Mapping> {
        Mapping::with_prot(fd, data_pages, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// Maps `1 + data_pages` pages of a perf event fd read-only: the kernel
    /// then treats the ring as an overwrite ring (it never waits for a
    /// reader's `data_tail` and overwrites the oldest records), which is the
    /// flight-recorder mode, paired with `write_backward` in the attr.
    pub(crate) fn new_read_only(fd: &OwnedFd, data_pages: usize) -> io::Result<Mapping> {
        Mapping::with_prot(fd, data_pages, libc::PROT_READ)
    }

    fn with_prot(fd: &OwnedFd, data_pages: usize, prot: libc::c_int) -> io::Result<Mapping> {
        let page = page_size();
        let len = page
            .checked_mul(data_pages + 1)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let addr = syscall(Syscall::Mmap {
            fd: fd.as_fd(),
            len,
            prot,
        })?;
        Ok(Mapping {
            ptr: addr as usize as *mut u8,
            len,
            #[cfg(test)]
            faked: fake::installed(),
        })
    }

    /// Start of the mapping.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // A test's fake mapping is heap memory: never hand it to the real
        // munmap, even if the fake is gone by now.
        #[cfg(test)]
        if self.faked && !fake::installed() {
            return;
        }
        // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing refers
        // to the mapping after drop (RingBuffer borrows end before).
        let unmap = unsafe { Unmap::new(self.ptr, self.len) };
        // Nothing to do about a failure here.
        let _ = syscall(Syscall::Munmap(unmap));
    }
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).unwrap_or(4096)
}

/// The local date and time of `unix_secs` (seconds since the epoch) as
/// (year, month 1-12, day 1-31, hour, minute, second), in the time zone
/// the C library reads from TZ and /etc/localtime, as perf names its
/// rotated files; `None` when the C library cannot convert it.
pub fn local_date_time(unix_secs: i64) -> Option<(i32, u32, u32, u32, u32, u32)> {
    let t: libc::time_t = unix_secs;
    // SAFETY: an all-zero `tm` is a valid value of the plain C struct,
    // which localtime_r fills.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals of the right types;
    // localtime_r is the reentrant form and keeps neither pointer.
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    if r.is_null() {
        return None;
    }
    let u = |v: libc::c_int| u32::try_from(v).ok();
    Some((
        tm.tm_year.checked_add(1900)?,
        u(tm.tm_mon)? + 1,
        u(tm.tm_mday)?,
        u(tm.tm_hour)?,
        u(tm.tm_min)?,
        u(tm.tm_sec)?,
    ))
}

/// A read-only map of a whole regular file (a perf.data file being read
/// back), so that its records are read in place, without a copy.
pub(crate) fn map_file(file: &std::fs::File) -> io::Result<memmap2::Mmap> {
    // SAFETY: the map is read-only and private, and only ever read as
    // bytes. Another process truncating the file while it is mapped would
    // make reads past the new end fault (SIGBUS), as for every reader that
    // maps its input (perf script maps perf.data too); a recording being
    // written is not truncated by kprobe-perf or perf.
    unsafe { memmap2::Mmap::map(file) }
}

/// Asks the CPU to bring `bytes` into its caches (a hint: the bytes of a
/// mapped file about to be read, so that their cache misses overlap).
/// Does nothing on other architectures than x86_64.
#[inline]
pub(crate) fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch reads nothing and faults on no address; SSE
        // is part of every x86_64 CPU. The pointer is of a live slice.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast::<i8>(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// The calling thread's id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// A connected pair of Unix stream sockets, both close-on-exec: used as
/// a pipe whose writer never gets SIGPIPE ([`send_all`]), and whose
/// reader sees end-of-file once every copy of the other end is closed.
pub(crate) fn socket_pair_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into the array we pass.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: socketpair succeeded, so both descriptors are new and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends all of `bytes` on a stream socket, without raising SIGPIPE when
/// the peer is gone (EPIPE is returned instead).
pub(crate) fn send_all(fd: &OwnedFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: send reads at most `bytes.len()` bytes from a live slice.
        let n = unsafe {
            libc::send(
                fd.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = bytes.get(n as usize..).unwrap_or_default();
    }
    Ok(())
}

/// The number of threads of this process (`/proc/self/task`).
pub(crate) fn thread_count() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// Starts `body(keep)` in a detached process named `name` (its comm, up
/// to 15 bytes) and returns once it runs.
///
/// The process is a grandchild (its parent exits at once), so it is
/// reparented to init and is never a child this process waits for or
/// reaps. It runs in a session of its own, with SIGINT, SIGTERM, SIGHUP,
/// SIGQUIT and SIGPIPE ignored (a Ctrl-C or a hang-up of the terminal does
/// not reach it), its working directory at `/`, stdin, stdout and stderr
/// on `/dev/null`, and every other descriptor closed but `keep`: it holds
/// no pipe or file of this process. It exits when `body` returns (or
/// panics). This process's copy of `keep` is closed.
///
/// Call only while this process has a single thread: the forked copy then
/// holds no lock another thread held, so `body` may allocate and use std.
/// Fails (and forks nothing) when there are more threads.
pub(crate) fn spawn_detached(name: &CStr, keep: OwnedFd, body: fn(OwnedFd)) -> io::Result<()> {
    let threads = thread_count()?;
    if threads != 1 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("this process already has {threads} threads; a detached process must be forked before any thread starts"),
        ));
    }
    let keep_raw = keep.as_raw_fd();
    // SAFETY: this process has one thread (checked above), so the child is
    // a complete copy in which any function may be called: no lock is held
    // by a thread that does not exist there. The intermediate child only
    // calls setsid, fork and _exit. The grandchild rearranges its
    // descriptors with plain syscalls on numbers it owns, runs `body` under
    // catch_unwind and ends in _exit, never returning into the caller's
    // code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above; the intermediate child ends in _exit.
        unsafe {
            if libc::setsid() < 0 {
                libc::_exit(1);
            }
            let grandchild = libc::fork();
            if grandchild != 0 {
                libc::_exit(if grandchild < 0 { 1 } else { 0 });
            }
        }
        // SAFETY: the grandchild of a single-threaded process: see
        // `become_detached`.
        unsafe { become_detached(name, keep_raw) };
        // SAFETY: descriptor 3 is `keep`'s copy, owned by nothing else in
        // this process (the original number was closed above or is 3).
        let kept = unsafe { OwnedFd::from_raw_fd(3) };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(kept)));
        // SAFETY: _exit ends this process without running the caller's
        // atexit handlers or destructors, which belong to the parent.
        unsafe { libc::_exit(0) }
    }
    drop(keep);
    reap_intermediate(pid)
}

/// Reaps the intermediate child `pid` of a double fork; an error when it
/// did not exit with 0 (its setsid or fork failed).
fn reap_intermediate(pid: i32) -> io::Result<()> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into our local integer; `pid`
        // is our unreaped child.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(io::Error::other(
            "the intermediate process failed to start the detached one (setsid or fork failed)",
        ));
    }
    Ok(())
}

/// In a freshly forked child: names it `name`, ignores the stop signals
/// (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE; ignored dispositions
/// survive an exec), moves to `/`, puts `keep_raw` at descriptor 3
/// (without close-on-exec) and `/dev/null` on stdio, and closes every
/// other descriptor.
///
/// # Safety
///
/// Only async-signal-safe functions are called (prctl, signal, chdir,
/// dup2, fcntl, open, close_range or close, sysconf), on C strings that
/// live in the caller's memory: callable in the child of a process with
/// threads, before an exec or `_exit`.
unsafe fn become_detached(name: &CStr, keep_raw: RawFd) {
    let devnull = c"/dev/null";
    let root = c"/";
    // SAFETY: see the function's contract.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::chdir(root.as_ptr());
        // `keep` to descriptor 3 first, so that stdio can be replaced
        // even if `keep` was one of them. dup2 clears close-on-exec on
        // the copy; a `keep` already at 3 has it cleared here.
        if keep_raw == 3 {
            libc::fcntl(3, libc::F_SETFD, 0);
        } else if libc::dup2(keep_raw, 3) < 0 {
            libc::_exit(1);
        }
        let null = libc::open(devnull.as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for std_fd in 0..3 {
                if null != std_fd {
                    libc::dup2(null, std_fd);
                }
            }
        }
        if libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) < 0 {
            // Kernels before 5.9: close one by one.
            let max = libc::sysconf(libc::_SC_OPEN_MAX).clamp(4, 1 << 20) as libc::c_int;
            for fd in 4..max {
                libc::close(fd);
            }
        }
    }
}

/// The environment variable that tells an exec'd copy of this program
/// (see [`spawn_detached_exec`]) it is the detached process, guarding
/// descriptor 3.
pub(crate) const DETACHED_VAR: &str = "KPROBE_PERF_DETACHED_FD";

/// In an exec'd copy made by [`spawn_detached_exec`]: the descriptor it
/// guards with. `None` in any other process.
pub(crate) fn detached_fd() -> Option<OwnedFd> {
    if std::env::var_os(DETACHED_VAR).is_none_or(|v| v != "3") {
        return None;
    }
    // The variable is only honoured once descriptor 3 is a socket, as
    // spawn_detached_exec leaves it (a stray variable in some other
    // process's environment must not make it take over descriptor 3).
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes one stat into the buffer we pass.
    if unsafe { libc::fstat(3, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so the buffer is initialized.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return None;
    }
    // SAFETY: descriptor 3 was put there for this process to own by
    // spawn_detached_exec, and nothing else in it claims it.
    Some(unsafe { OwnedFd::from_raw_fd(3) })
}

/// As [`spawn_detached`], for a process that already has threads: the
/// detached grandchild (set up by [`become_detached`], async-signal-safe
/// calls only) execs this program (`/proc/self/exe`) with its arguments
/// and [`DETACHED_VAR`]`=3` added to its environment, holding `keep` at
/// descriptor 3. The program must then call the function that checks
/// [`DETACHED_VAR`] before anything else with effects. Returns the
/// grandchild's pid.
pub(crate) fn spawn_detached_exec(name: &CStr, keep: OwnedFd) -> io::Result<i32> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let cstr = |b: &[u8]| CString::new(b).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    // Everything the children use is made now: they may not allocate.
    let exe = c"/proc/self/exe";
    let args = std::env::args_os()
        .map(|a| cstr(a.as_bytes()))
        .collect::<io::Result<Vec<_>>>()?;
    let mut env = std::env::vars_os()
        .filter(|(k, _)| k != DETACHED_VAR)
        .map(|(k, v)| cstr(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<io::Result<Vec<_>>>()?;
    env.push(cstr(format!("{DETACHED_VAR}=3").as_bytes())?);
    let ptrs = |v: &[CString]| {
        let mut p: Vec<*const libc::c_char> = v.iter().map(|c| c.as_ptr()).collect();
        p.push(std::ptr::null());
        p
    };
    let (argv, envp) = (ptrs(&args), ptrs(&env));
    // The grandchild's pid, from the intermediate child.
    let (pid_read, pid_write) = pipe_cloexec()?;
    let keep_raw = keep.as_raw_fd();
    let pid_write_raw = pid_write.as_raw_fd();
    // SAFETY: the children call only async-signal-safe functions (setsid,
    // fork, write, _exit, those of `become_detached`, execve) on memory
    // prepared above, which their copies of this process's memory hold;
    // neither returns into the caller's code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe {
            if libc::setsid() < 0 {
                libc::_exit(1);
            }
            let grandchild = libc::fork();
            if grandchild != 0 {
                let bytes = grandchild.to_ne_bytes();
                libc::write(pid_write_raw, bytes.as_ptr().cast(), bytes.len());
                libc::_exit(if grandchild < 0 { 1 } else { 0 });
            }
            become_detached(name, keep_raw);
            libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    drop((keep, pid_write));
    reap_intermediate(pid)?;
    let mut bytes = [0u8; 4];
    let mut file = std::fs::File::from(pid_read);
    std::io::Read::read_exact(&mut file, &mut bytes)?;
    match i32::from_ne_bytes(bytes) {
        grandchild if grandchild > 0 => Ok(grandchild),
        _ => Err(io::Error::other(
            "the intermediate process failed to start the detached one (fork failed)",
        )),
    }
}

/// `pidfd_open(2)`: a descriptor that refers to process `pid` (a thread
/// group leader) for as long as it is open, immune to pid reuse. It
/// becomes readable once every thread of the process has exited.
/// ENOSYS before Linux 5.3; EINVAL when `pid` is a thread that does not
/// lead its process; ESRCH when there is no such process.
pub(crate) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes two integers and returns a new descriptor
    // or -1; no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// True when the process of a pidfd has exited (the pidfd is readable),
/// without waiting.
pub(crate) fn pidfd_exited(pidfd: &OwnedFd) -> io::Result<bool> {
    readable_within(pidfd, Duration::ZERO)
}

/// True when `fd` is readable (or at end-of-file) within `timeout`.
pub(crate) fn readable_within(fd: &OwnedFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    loop {
        // SAFETY: poll reads and writes one pollfd, which lives on our stack.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n >= 0 {
            return Ok(n > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Names the calling thread `name` (its comm, up to 15 bytes; the main
/// thread's is the process's).
pub(crate) fn set_thread_name(name: &CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string that lives for
    // the call.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

/// SIGKILL to process `pid` (not a child: nothing to reap).
pub(crate) fn kill_process(pid: i32) {
    // SAFETY: kill takes two integers.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Mounts tracefs at `target` (`mount -t tracefs nodev TARGET`), as perf
/// does when it needs the tracing files and finds them absent.
pub(crate) fn mount_tracefs(target: &CStr) -> io::Result<()> {
    // SAFETY: the three strings are NUL-terminated and live for the call;
    // tracefs takes no mount data, so `data` is null.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Effective capabilities of this process (bit mask of `CAP_*`).
pub fn effective_capabilities() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no CapEff in /proc/self/status"))
}

/// `CAP_SYS_ADMIN`.
pub const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_PERFMON` (Linux 5.8+).
pub const CAP_PERFMON: u32 = 38;
/// `CAP_IPC_LOCK`: ring buffers past `perf_event_mlock_kb` (perf_mmap).
pub const CAP_IPC_LOCK: u32 = 14;

/// A child forked by [`fork_held`]: it waits before exec until a byte
/// arrives on `gate`, and writes exec's errno to `exec_error` if exec
/// fails (the pipe closes at a successful exec).
pub(crate) struct HeldFork {
    /// The child's pid.
    pub(crate) pid: i32,
    /// The write end of the gate pipe: one byte releases the child;
    /// closing it unwritten makes the child `_exit(127)`.
    pub(crate) gate: OwnedFd,
    /// The read end of the pipe the child reports exec's errno on.
    pub(crate) exec_error: OwnedFd,
}

fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array we pass.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both descriptors are new and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The highest signal number the kernel knows on the architectures we
/// support (x86_64, aarch64): `_NSIG` is 64 there.
const LAST_SIGNAL: libc::c_int = 64;

/// The kernel's `struct sigaction` for rt_sigaction(2) on x86_64 and
/// aarch64 (both have `sa_restorer`): all zeros is SIG_DFL, no flags, an
/// empty mask. The C library's sigaction() refuses the signals it keeps
/// for itself (32 and 33 in glibc), which an ancestor may still have set
/// to ignored; the system call resets them too.
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// Forks a child that waits for a byte on its gate pipe, then resets
/// every signal to its default action, unblocks all signals and execs
/// `path` with `argv` (`path` already resolved: the child does no PATH
/// search, which is not async-signal-safe). The command thus starts as it
/// would from a shell, whatever this process ignores, handles or blocks.
pub(crate) fn fork_held(path: &CStr, argv: &[CString]) -> io::Result<HeldFork> {
    let mut argv: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // What the child installs before exec, prepared here: after fork
    // only async-signal-safe calls are allowed.
    let default_action = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: sigemptyset initialises the set we own (zeroed first).
    let empty_set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        set
    };
    let (gate_r, gate_w) = pipe_cloexec()?;
    let (err_r, err_w) = pipe_cloexec()?;
    let (gr, gw, er, ew) = (
        gate_r.as_raw_fd(),
        gate_w.as_raw_fd(),
        err_r.as_raw_fd(),
        err_w.as_raw_fd(),
    );
    // SAFETY: after fork the child only calls async-signal-safe functions
    // (close, read, the rt_sigaction system call through syscall(),
    // sigprocmask, execv, write, _exit) on memory prepared before the
    // fork (`path`, `argv`, `default_action`, `empty_set`), and never
    // returns into Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above; this is the child and ends in exec or _exit.
        unsafe {
            libc::close(gw);
            libc::close(er);
            let mut byte = 0u8;
            loop {
                let n = libc::read(gr, (&mut byte as *mut u8).cast(), 1);
                if n == 1 {
                    break;
                }
                if n == 0 || *libc::__errno_location() != libc::EINTR {
                    // The parent gave up before releasing us.
                    libc::_exit(127);
                }
            }
            // Default action for every signal (SIGKILL and SIGSTOP
            // refuse, harmlessly), then an empty mask: exec keeps
            // ignored signals and the mask.
            for sig in 1..=LAST_SIGNAL {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &default_action as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    std::mem::size_of::<u64>(),
                );
            }
            libc::sigprocmask(libc::SIG_SETMASK, &empty_set, std::ptr::null_mut());
            libc::execv(path.as_ptr(), argv.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(
                ew,
                (&errno as *const i32).cast(),
                std::mem::size_of::<i32>(),
            );
            libc::_exit(127);
        }
    }
    drop(gate_r);
    drop(err_w);
    Ok(HeldFork {
        pid,
        gate: gate_w,
        exec_error: err_r,
    })
}

/// The exit status of our child `pid` if it has ended, reaping it
/// (waitpid with WNOHANG: does not block).
pub(crate) fn try_reap(pid: i32) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    // SAFETY: waitpid writes the status into our local integer.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((rc == pid).then(|| ExitStatus::from_raw(status)))
}

/// Sends SIGKILL to our unreaped child `pid` and reaps it (blocking).
pub(crate) fn kill_and_reap(pid: i32) -> Option<ExitStatus> {
    // SAFETY: kill has no memory-safety preconditions; the pid is our
    // unreaped child, so it cannot have been reused.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let mut status = 0;
    // SAFETY: waitpid writes the status into our local integer.
    (unsafe { libc::waitpid(pid, &mut status, 0) } == pid).then(|| ExitStatus::from_raw(status))
}

/// Registers `fd` with the current tokio runtime's reactor (readable
/// interest). Must be called within a runtime.
#[cfg(feature = "tokio")]
pub(crate) fn async_readiness(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: tokio requires the descriptor to stay open and the same for
    // as long as it is registered: an `OwnedFd` owns its descriptor, never
    // changes it, and closes it only when dropped, which the `AsyncFd`
    // does after deregistering it.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}
