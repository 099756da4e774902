//! A stand-in for the kernel in the engine's unit tests: while a fake is
//! installed on a thread, every [`Syscall`] that thread makes goes to the
//! fake instead of the kernel. Other threads (other tests) still reach the
//! real kernel.
//!
//! ```ignore
//! let log = Rc::new(RefCell::new(Vec::new()));
//! let _fake = fake::install({
//!     let log = log.clone();
//!     move |call| {
//!         log.borrow_mut().push(format!("{call:?}"));
//!         Err(fake::errno(libc::ENOENT))
//!     }
//! });
//! ```
//!
//! A fake that answers `PerfEventOpen` must return a descriptor the test
//! owns and gives away ([`new_fd`]): the engine wraps it in an `OwnedFd`,
//! which closes it. A fake that
//! answers `Mmap` returns the address of memory that outlives the mapping
//! (see the ring tests); `Munmap` then reaches the fake, never the kernel.

use std::cell::RefCell;
use std::io;

use super::Syscall;

/// What a fake does with one call: answer it as the kernel would (the
/// call's return value, or an errno).
pub(crate) type Fake = Box<dyn FnMut(Syscall<'_>) -> io::Result<i64>>;

thread_local! {
    static FAKE: RefCell<Option<Fake>> = const { RefCell::new(None) };
}

/// Puts the previous fake (usually none) back when dropped.
#[must_use = "the fake is removed when this guard is dropped"]
pub(crate) struct Installed {
    previous: Option<Fake>,
}

/// Answers this thread's system calls with `fake` until the guard returned
/// is dropped. Declare the guard before anything that holds a faked
/// resource (a ring), so that it is dropped after it.
pub(crate) fn install(fake: impl FnMut(Syscall<'_>) -> io::Result<i64> + 'static) -> Installed {
    let previous = FAKE.with(|f| f.borrow_mut().replace(Box::new(fake)));
    Installed { previous }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.previous.take();
        FAKE.with(|f| *f.borrow_mut() = previous);
    }
}

/// True while a fake answers this thread's calls.
pub(crate) fn installed() -> bool {
    FAKE.with(|f| f.borrow().is_some())
}

/// The fake's answer to `call`, or the call back when no fake is
/// installed. A fake must not make system calls through the layer itself.
pub(super) fn answer(call: Syscall<'_>) -> Result<io::Result<i64>, Syscall<'_>> {
    FAKE.with(|f| match f.borrow_mut().as_mut() {
        Some(fake) => Ok(fake(call)),
        None => Err(call),
    })
}

/// A fresh descriptor (of `/dev/null`) for a fake to return from
/// `PerfEventOpen`: the engine takes it as its own and closes it.
pub(crate) fn new_fd() -> i64 {
    use std::os::fd::IntoRawFd;
    let file = std::fs::File::open("/dev/null").expect("/dev/null opens");
    i64::from(file.into_raw_fd())
}

/// The error a system call failing with `errno` returns.
pub(crate) fn errno(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}
