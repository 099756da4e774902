//! Record bodies made by the engine rather than read from a ring: the
//! COMM and MMAP records a perf.data writer adds, and made-up samples for
//! tests, benchmarks and fuzzers, all laid out as the kernel lays them out
//! for the engine's attrs.

use crate::plan::ProbePlan;

/// The body (after the 8-byte header) of a `PERF_RECORD_COMM` naming
/// `tid` of `pid`, with a sample_id trailer for the sample layout of the
/// engine's probes (`sample_id_all` with TID, TIME, CPU and IDENTIFIER):
/// `time`, `cpu` and `id` are those of the sample that needed the name.
pub fn comm_record_body(pid: i32, tid: i32, name: &str, time: u64, cpu: u32, id: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.extend_from_slice(&pid.to_ne_bytes());
    b.extend_from_slice(&tid.to_ne_bytes());
    // The kernel's comm is at most 15 bytes and a NUL.
    let bytes = name.as_bytes();
    b.extend_from_slice(&bytes[..bytes.len().min(15)]);
    b.push(0);
    while b.len() % 8 != 0 {
        b.push(0);
    }
    push_sample_id(&mut b, pid, tid, time, cpu, id);
    b
}

/// Appends the sample_id trailer of a non-sample record, as the kernel
/// writes it for the engine's attrs (`sample_id_all` with TID, TIME, CPU
/// and IDENTIFIER): pid, tid, time, cpu and a reserved u32, id.
pub(crate) fn push_sample_id(b: &mut Vec<u8>, pid: i32, tid: i32, time: u64, cpu: u32, id: u64) {
    b.extend_from_slice(&pid.to_ne_bytes());
    b.extend_from_slice(&tid.to_ne_bytes());
    b.extend_from_slice(&time.to_ne_bytes());
    b.extend_from_slice(&cpu.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&id.to_ne_bytes());
}

/// The bytes of a perf_event_attr with the sample layout a session uses
/// for `plan` (`sample_type`, `sample_regs_intr`, `sample_id_all`), for
/// decoding recorded or made-up records without a session.
pub fn sample_attr_bytes(plan: &ProbePlan) -> Vec<u8> {
    crate::attach::sys::attr_bytes(&crate::attach::attr::sample_layout(plan))
}

/// The fields of a made-up PMU probe sample (see [`sample_record_body`]).
#[derive(Debug, Clone, Default)]
#[cfg(any(test, feature = "test-util"))]
pub struct SampleFields<'a> {
    /// Event id.
    pub id: u64,
    /// Sampled ip.
    pub ip: u64,
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Timestamp.
    pub time: u64,
    /// CPU.
    pub cpu: u32,
    /// `PERF_SAMPLE_RAW` bytes (20 for a kprobe, 28 for a kretprobe).
    pub raw: &'a [u8],
    /// Values of the registers of the plan's `regs_mask`, in index order
    /// (no `PERF_SAMPLE_REGS_INTR` when the mask is 0).
    pub regs: &'a [u64],
}

/// The body (after the 8-byte header) of a `PERF_RECORD_SAMPLE` laid out
/// as the kernel lays it out for [`sample_type`](super::sample_type):
/// for tests, benchmarks and fuzzers.
#[cfg(any(test, feature = "test-util"))]
pub fn sample_record_body(f: &SampleFields<'_>, regs_mask: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(64 + f.raw.len() + 8 * f.regs.len());
    b.extend_from_slice(&f.id.to_ne_bytes());
    b.extend_from_slice(&f.ip.to_ne_bytes());
    b.extend_from_slice(&f.pid.to_ne_bytes());
    b.extend_from_slice(&f.tid.to_ne_bytes());
    b.extend_from_slice(&f.time.to_ne_bytes());
    b.extend_from_slice(&f.cpu.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&(f.raw.len() as u32).to_ne_bytes());
    b.extend_from_slice(f.raw);
    while b.len() % 8 != 0 {
        b.push(0);
    }
    if regs_mask != 0 {
        // PERF_SAMPLE_REGS_ABI_64
        b.extend_from_slice(&2u64.to_ne_bytes());
        for r in f.regs {
            b.extend_from_slice(&r.to_ne_bytes());
        }
    }
    b
}

/// `PERF_RECORD_MISC_USER`.
pub const MISC_USER: u16 = perf_event_open_sys::bindings::PERF_RECORD_MISC_USER as u16;

/// Bodies of `PERF_RECORD_MMAP` records for the mappings of `binaries`
/// (canonical paths) in process `pid`, from `/proc/PID/maps`, with the
/// sample_id trailer of [`comm_record_body`]: what perf needs to name the
/// functions of uprobe samples. Empty when the process is gone.
pub fn user_mmap_bodies(
    pid: i32,
    tid: i32,
    binaries: &[std::path::PathBuf],
    time: u64,
    cpu: u32,
    id: u64,
) -> Vec<Vec<u8>> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(off), _, _, Some(path)) =
            (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if !perms.contains('x') || !binaries.iter().any(|b| b.as_os_str() == path) {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(off)) = (
            u64::from_str_radix(start, 16),
            u64::from_str_radix(end, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        let mut b = Vec::with_capacity(64 + path.len());
        b.extend_from_slice(&pid.to_ne_bytes());
        b.extend_from_slice(&tid.to_ne_bytes());
        b.extend_from_slice(&start.to_ne_bytes());
        b.extend_from_slice(&end.saturating_sub(start).to_ne_bytes());
        b.extend_from_slice(&off.to_ne_bytes());
        b.extend_from_slice(path.as_bytes());
        b.push(0);
        while b.len() % 8 != 0 {
            b.push(0);
        }
        push_sample_id(&mut b, pid, tid, time, cpu, id);
        out.push(b);
    }
    out
}
