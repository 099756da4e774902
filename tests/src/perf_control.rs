//! perf record's control FIFOs (`-D -1 --control fifo:CTL,ACK`): a
//! differential starts perf with its events disabled and enables them,
//! and waits for perf's acknowledgement, before the workload runs, so
//! that perf records the workload from its first call.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// Makes the two FIFOs `DIR/ctl.fifo` and `DIR/ack.fifo`; give them to
/// perf record as `--control fifo:CTL,ACK` ([`control_arg`]).
pub fn fifos(dir: &Path) -> (PathBuf, PathBuf) {
    let (ctl, ack) = (dir.join("ctl.fifo"), dir.join("ack.fifo"));
    fifo(&ctl);
    fifo(&ack);
    (ctl, ack)
}

/// perf record's `--control` argument for the two FIFOs.
pub fn control_arg(ctl: &Path, ack: &Path) -> String {
    format!("fifo:{},{}", ctl.display(), ack.display())
}

/// Sends `enable` to perf record's control FIFO and waits for its `ack`:
/// perf has opened every event (`-D -1` keeps them disabled till then)
/// and enabled them all.
pub fn enable(ctl: &Path, ack: &Path, perf_rec: &mut Child, err: &Path) {
    let started = Instant::now();
    let give_up = |what: &str, perf_rec: &mut Child| {
        let status = perf_rec.try_wait();
        assert!(
            matches!(status, Ok(None)) && started.elapsed() < Duration::from_secs(300),
            "perf record {what} ({status:?} after {:?}): {}",
            started.elapsed(),
            std::fs::read_to_string(err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Non-blocking: opening a FIFO for reading needs no writer.
    let mut acks = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(ack)
        .unwrap();
    // Opening for writing fails (ENXIO) until perf holds the FIFO.
    let mut control = loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(ctl)
        {
            Ok(f) => break f,
            Err(_) => give_up("did not open its control FIFO", perf_rec),
        }
    };
    control.write_all(b"enable\n").unwrap();
    let mut got = Vec::new();
    loop {
        let mut buf = [0u8; 16];
        match acks.read(&mut buf) {
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("reading perf's ack FIFO: {e}"),
        }
        if got.starts_with(b"ack") {
            return;
        }
        give_up("did not acknowledge enable", perf_rec);
    }
}

fn fifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a live NUL-terminated path.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(r, 0, "mkfifo {}", path.display());
}
