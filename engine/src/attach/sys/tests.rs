use std::cell::RefCell;
use std::fs::File;
use std::rc::Rc;

use super::*;

/// A descriptor the test gives away, as a fake perf_event_open returns it
/// (the engine's `OwnedFd` closes it).
fn spare_fd() -> RawFd {
    RawFd::try_from(fake::new_fd()).unwrap()
}

/// The calls a fake saw, as their `Debug` lines.
type Log = Rc<RefCell<Vec<String>>>;

fn logging(
    mut answer: impl FnMut(Syscall<'_>) -> io::Result<i64> + 'static,
) -> (Log, fake::Installed) {
    let log = Log::default();
    let seen = log.clone();
    let guard = fake::install(move |call| {
        seen.borrow_mut().push(format!("{call:?}"));
        answer(call)
    });
    (log, guard)
}

#[test]
fn perf_event_open_passes_the_attr_name_and_flags_and_owns_the_fd() {
    let fd = spare_fd();
    let name = c"do_sys_openat2";
    let name_at = name.as_ptr() as u64;
    let seen_config1 = Rc::new(RefCell::new(0u64));
    let config1 = seen_config1.clone();
    let (log, _fake) = logging(move |call| match call {
        Syscall::PerfEventOpen { attr, .. } => {
            // SAFETY: reading a plain u64 out of the union bindgen made
            // for config1/kprobe_func/uprobe_path.
            *config1.borrow_mut() = unsafe { attr.__bindgen_anon_3.config1 };
            Ok(i64::from(fd))
        }
        _ => Err(fake::errno(libc::ENOSYS)),
    });
    let attr = perf_event_attr {
        type_: 6,
        config: 0x10,
        size: 0,
        ..Default::default()
    };
    let owned = perf_event_open(&attr, Some(name), -1, 3, 0).unwrap();
    assert_eq!(owned.as_raw_fd(), fd);
    assert_eq!(*seen_config1.borrow(), name_at);
    assert_eq!(
        *log.borrow(),
        ["perf_event_open(type=6, size=112, config=0x10, pid=-1, cpu=3, group_fd=-1, flags=0x8)"]
    );
    // Without a name config1 is left as the caller set it; a caller's
    // flags are added to CLOEXEC.
    let attr = perf_event_attr {
        type_: 7,
        __bindgen_anon_3: perf_event_open_sys::bindings::perf_event_attr__bindgen_ty_3 {
            config1: 0xabc,
        },
        ..Default::default()
    };
    let fd2 = spare_fd();
    drop(_fake);
    let (log, _fake) = logging(move |_| Ok(i64::from(fd2)));
    let owned2 = perf_event_open(&attr, None, 1234, -1, 0x4).unwrap();
    assert_eq!(owned2.as_raw_fd(), fd2);
    assert_eq!(
        *log.borrow(),
        ["perf_event_open(type=7, size=112, config=0x0, pid=1234, cpu=-1, group_fd=-1, flags=0xc)"]
    );
}

#[test]
fn errnos_come_back_as_os_errors() {
    let (log, _fake) = logging(|_| Err(fake::errno(libc::ENOENT)));
    let e = perf_event_open(&perf_event_attr::default(), None, -1, 0, 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    let fd = File::open("/dev/null").unwrap();
    let fd = OwnedFd::from(fd);
    assert_eq!(enable(&fd).unwrap_err().raw_os_error(), Some(libc::ENOENT));
    assert_eq!(
        read_count(&fd).unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
    assert_eq!(
        Mapping::new(&fd, 2).err().unwrap().raw_os_error(),
        Some(libc::ENOENT)
    );
    assert_eq!(log.borrow().len(), 4);
}

#[test]
fn ioctls_name_their_descriptor_and_argument() {
    let (log, _fake) = logging(|call| {
        if let Syscall::PerfIoctl {
            request: PerfIoctl::Id(id),
            ..
        } = call
        {
            *id = 0x5eed;
        }
        Ok(0)
    });
    let a = OwnedFd::from(File::open("/dev/null").unwrap());
    let b = OwnedFd::from(File::open("/dev/null").unwrap());
    let (ra, rb) = (a.as_raw_fd(), b.as_raw_fd());
    enable(&a).unwrap();
    disable(&a).unwrap();
    pause_output(&b, true).unwrap();
    pause_output(&b, false).unwrap();
    set_output(&a, &b).unwrap();
    assert_eq!(event_id(&b).unwrap(), 0x5eed);
    assert_eq!(
        *log.borrow(),
        [
            format!("ioctl({ra}, ENABLE)"),
            format!("ioctl({ra}, DISABLE)"),
            format!("ioctl({rb}, PAUSE_OUTPUT, 1)"),
            format!("ioctl({rb}, PAUSE_OUTPUT, 0)"),
            format!("ioctl({ra}, SET_OUTPUT, {rb})"),
            format!("ioctl({rb}, ID)"),
        ]
    );
}

#[test]
fn a_counter_is_eight_bytes_or_an_error() {
    let answers = Rc::new(RefCell::new(vec![(8usize, 41u64), (4, 7)]));
    let next = answers.clone();
    let (log, _fake) = logging(move |call| {
        let Syscall::Read { buf, .. } = call else {
            return Err(fake::errno(libc::ENOSYS));
        };
        let (n, value) = next.borrow_mut().remove(0);
        buf[..n].copy_from_slice(&value.to_ne_bytes()[..n]);
        Ok(n as i64)
    });
    let fd = OwnedFd::from(File::open("/dev/null").unwrap());
    assert_eq!(read_count(&fd).unwrap(), 41);
    let e = read_count(&fd).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    assert_eq!(e.to_string(), "read 4 of 8 bytes");
    let raw = fd.as_raw_fd();
    assert_eq!(
        *log.borrow(),
        [format!("read({raw}, 8)"), format!("read({raw}, 8)")]
    );
}

#[test]
fn a_mapping_is_one_metadata_page_plus_the_data_and_is_unmapped_once() {
    let page = page_size();
    let mut memory = vec![0u8; 5 * page];
    let at = memory.as_mut_ptr() as i64;
    let unmapped = Rc::new(RefCell::new(Vec::new()));
    let seen = unmapped.clone();
    let (log, _fake) = logging(move |call| match call {
        Syscall::Mmap { .. } => Ok(at),
        Syscall::Munmap(u) => {
            seen.borrow_mut().push((u.addr() as i64, u.len()));
            Ok(0)
        }
        _ => Err(fake::errno(libc::ENOSYS)),
    });
    let fd = OwnedFd::from(File::open("/dev/null").unwrap());
    let raw = fd.as_raw_fd();
    let rw = Mapping::new(&fd, 4).unwrap();
    assert_eq!((rw.as_ptr() as i64, rw.len()), (at, 5 * page));
    let ro = Mapping::new_read_only(&fd, 2).unwrap();
    assert_eq!(ro.len(), 3 * page);
    assert!(unmapped.borrow().is_empty());
    drop(rw);
    drop(ro);
    assert_eq!(*unmapped.borrow(), [(at, 5 * page), (at, 3 * page)]);
    let prot_rw = libc::PROT_READ | libc::PROT_WRITE;
    assert_eq!(
        *log.borrow(),
        [
            format!("mmap({raw}, {}, prot={prot_rw:#x})", 5 * page),
            format!("mmap({raw}, {}, prot={:#x})", 3 * page, libc::PROT_READ),
            format!("munmap({:p}, {})", at as *const u8, 5 * page),
            format!("munmap({:p}, {})", at as *const u8, 3 * page),
        ]
    );
    // Too many pages to count in bytes: refused before any call.
    assert_eq!(
        Mapping::new(&fd, usize::MAX / 2).err().unwrap().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(log.borrow().len(), 4);
    drop(memory);
}

#[test]
fn the_open_files_limit_is_raised_up_to_the_hard_limit_only() {
    let (log, _fake) = logging(|call| {
        if let Syscall::GetFileLimit(lim) = call {
            lim.rlim_cur = 1024;
            lim.rlim_max = 4096;
        }
        Ok(0)
    });
    raise_fd_limit(100).unwrap();
    raise_fd_limit(2000).unwrap();
    let e = raise_fd_limit(5000).unwrap_err();
    assert!(matches!(e, FdLimitError::HardLimit { hard: 4096 }), "{e:?}");
    assert_eq!(e.to_string(), "the hard limit on open files is 4096");
    assert_eq!(
        *log.borrow(),
        [
            "getrlimit(NOFILE)",
            "getrlimit(NOFILE)",
            "setrlimit(NOFILE, cur=2000, max=4096)",
            "getrlimit(NOFILE)",
        ]
    );
}

#[test]
fn a_fake_answers_only_its_own_thread_and_only_while_installed() {
    let (log, fake) = logging(|_| Err(fake::errno(libc::EMFILE)));
    assert_eq!(
        raise_fd_limit(1).unwrap_err().raw_os_error(),
        Some(libc::EMFILE)
    );
    // Another thread reaches the kernel: RLIMIT_NOFILE is at least 1.
    std::thread::spawn(|| raise_fd_limit(1).unwrap())
        .join()
        .unwrap();
    assert_eq!(*log.borrow(), ["getrlimit(NOFILE)"]);
    drop(fake);
    assert!(!fake::installed());
    raise_fd_limit(1).unwrap();
    assert_eq!(log.borrow().len(), 1);
}
