//! A tracing instance of one session (`instances/kprobe_perf_<pid>_<n>`,
//! named as the session's tracefs group) and its per-CPU binary buffers.
//!
//! Used for the one kind of probe perf cannot deliver: event probes
//! (`e:`). The kernel defines them, but their `eprobe_register`
//! (kernel/trace/trace_eprobe.c) returns 0 for every `TRACE_REG_PERF_*`
//! request without registering anything, so a perf event opened on an
//! eprobe's id never has a sample. Their records go to ftrace ring
//! buffers only. An instance of our own keeps the global buffer, its
//! settings and other users' instances untouched; removing the
//! directory (rmdir) disables its events and frees its buffers.
//!
//! Only files are read and written here (`per_cpu/cpuN/trace_pipe_raw`
//! as whole pages, `per_cpu/cpuN/stats`, the instance's settings); what
//! the pages hold is decoded in `decode::ftrace`.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::attach::tracefs::{Field, Tracefs, TracefsError};

/// The instance's clock. perf stamps samples with `perf_clock()`, which
/// is `local_clock()` (kernel/events/core.c); ftrace's clock of that
/// name is `perf`, whose `trace_clock()` returns `local_clock()`
/// (kernel/trace/trace_clock.c, and the `trace_clocks` table of
/// kernel/trace/trace.c). With it the buffer's times and perf's compare.
const PERF_CLOCK: &str = "perf";

/// How long dropping the instance retries an rmdir the kernel refuses
/// (EBUSY while a reader's file is still being released).
const RMDIR_PATIENCE: Duration = Duration::from_secs(2);

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> TracefsError + '_ {
    move |source| TracefsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Losses of one CPU's buffer, from its `stats` file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BufferLoss {
    /// Events overwritten before they were read (`overrun`).
    pub(crate) overrun: u64,
    /// Events the kernel could not write (`dropped events`).
    pub(crate) dropped: u64,
}

/// Parses a `per_cpu/cpuN/stats` file.
pub(crate) fn parse_stats(text: &str) -> BufferLoss {
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or(0)
    };
    BufferLoss {
        overrun: value("overrun:"),
        dropped: value("dropped events:"),
    }
}

/// One CPU's `trace_pipe_raw`, opened non-blocking.
#[derive(Debug)]
pub(crate) struct CpuBuffer {
    /// The CPU.
    pub(crate) cpu: u32,
    /// The open file (poll it for readability).
    pub(crate) file: File,
}

/// A tracing instance of ours; removed on drop.
#[derive(Debug)]
pub(crate) struct Instance {
    dir: PathBuf,
}

impl Instance {
    /// Makes `instances/NAME` with the perf clock and wake-ups on every
    /// page (`buffer_percent` 0: a poll on `trace_pipe_raw` then returns as
    /// soon as there is data, where the default 50 waits for half the
    /// buffer).
    pub(crate) fn create(fs: &Tracefs, name: &str) -> Result<Instance, TracefsError> {
        let dir = fs.root().join("instances").join(name);
        std::fs::create_dir(&dir).map_err(io_err(&dir))?;
        let instance = Instance { dir };
        instance.write("trace_clock", PERF_CLOCK)?;
        // buffer_percent is 5.1+; older kernels wake readers at once.
        if instance.dir.join("buffer_percent").exists() {
            instance.write("buffer_percent", "0")?;
        }
        Ok(instance)
    }

    fn write(&self, file: &str, value: &str) -> Result<(), TracefsError> {
        let path = self.dir.join(file);
        OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .and_then(|mut f| f.write_all(value.as_bytes()))
            .map_err(io_err(&path))
    }

    /// Limits the instance's events to `pid` and the processes it forks
    /// from now on (`set_event_pid` and `options/event-fork`).
    pub(crate) fn follow(&self, pid: i32) -> Result<(), TracefsError> {
        self.write("options/event-fork", "1")?;
        self.write("set_event_pid", &pid.to_string())
    }

    /// Enables or disables `group/event` in this instance.
    pub(crate) fn set_enabled(
        &self,
        group: &str,
        event: &str,
        on: bool,
    ) -> Result<(), TracefsError> {
        let file = format!("events/{group}/{event}/enable");
        self.write(&file, if on { "1" } else { "0" })
    }

    /// Opens `per_cpu/cpuN/trace_pipe_raw` of each of `cpus`, non-blocking.
    pub(crate) fn open_buffers(&self, cpus: &[u32]) -> Result<Vec<CpuBuffer>, TracefsError> {
        open_buffers_in(&self.dir, cpus)
    }

    /// The losses of `cpu`'s buffer so far.
    pub(crate) fn loss(&self, cpu: u32) -> Result<BufferLoss, TracefsError> {
        loss_in(&self.dir, cpu)
    }
}

/// Opens `DIR/per_cpu/cpuN/trace_pipe_raw` of each of `cpus`,
/// non-blocking: an instance's, or with tracefs's root as `dir`, the
/// top-level buffers (where the kernel records boot-time events).
pub(crate) fn open_buffers_in(dir: &Path, cpus: &[u32]) -> Result<Vec<CpuBuffer>, TracefsError> {
    cpus.iter()
        .map(|&cpu| {
            let path = dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
                .map_err(io_err(&path))?;
            Ok(CpuBuffer { cpu, file })
        })
        .collect()
}

/// The losses so far of `cpu`'s buffer of `dir` (an instance, or
/// tracefs's root).
pub(crate) fn loss_in(dir: &Path, cpu: u32) -> Result<BufferLoss, TracefsError> {
    let path = dir.join(format!("per_cpu/cpu{cpu}/stats"));
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    Ok(parse_stats(&text))
}

/// Reads the next page of `buffer` into `page` (a page's size or more):
/// `Ok(None)` when there is none now.
pub(crate) fn read_page(buffer: &mut CpuBuffer, page: &mut [u8]) -> io::Result<Option<usize>> {
    match buffer.file.read(page) {
        Ok(0) => Ok(None),
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
        Err(e) => Err(e),
    }
}

/// The fields of `events/header_page` (the ring buffer's page header).
pub(crate) fn header_page(fs: &Tracefs) -> Result<Vec<Field>, TracefsError> {
    let path = fs.root().join("events/header_page");
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    Ok(crate::attach::tracefs::parse_format(&text))
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = crate::attach::tracefs::remove_instance_dir(&self.dir, RMDIR_PATIENCE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_a_cpu() {
        let text = "entries: 3\noverrun: 17\ncommit overrun: 0\nbytes: 1200\n\
                    oldest event ts:  1234.000001\nnow ts:  1240.000000\n\
                    dropped events: 5\nread events: 40\n";
        assert_eq!(
            parse_stats(text),
            BufferLoss {
                overrun: 17,
                dropped: 5
            }
        );
        assert_eq!(parse_stats(""), BufferLoss::default());
    }
}
