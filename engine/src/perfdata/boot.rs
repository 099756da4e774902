//! A perf.data file of what boot-time probes recorded
//! ([`BootRecording`]).
//!
//! Their records come from ftrace's buffer, not from perf rings, but a
//! kprobe event's ftrace record is exactly the `PERF_SAMPLE_RAW` perf
//! delivers for it when it is opened as a tracepoint: so each becomes
//! the sample a recording of the same probe through tracefs would have
//! written (`PERF_TYPE_TRACEPOINT` attr of the event's id, the sample
//! layout of its plan), and `script -i` and perf read the file as they
//! read `record -o`'s.

use std::io::{Seek, Write};

use kprobe_perf_arch::Arch;
use kprobe_perf_symbols::KernelSymbols;
use perf_event_open_sys::bindings::PERF_TYPE_TRACEPOINT;

use super::{
    symbol_subset, tracing_data, Metadata, PerfDataError, StoredProbe, Writer, MISC_KERNEL,
};
use crate::decode::records::RECORD_SAMPLE;
use crate::plan::Backend;
use crate::session::boot::BootRecording;

/// Writes `rec` as a perf.data file to `out`, naming kernel addresses
/// with `symbols`; returns the output.
pub fn write_boot_recording<W: Write + Seek>(
    rec: &BootRecording,
    arch: Arch,
    symbols: &KernelSymbols,
    out: W,
) -> Result<W, PerfDataError> {
    let mut probes = Vec::new();
    let mut attrs = Vec::new();
    let mut regs = Vec::new();
    for (i, (spec, layout)) in rec.probes.iter().zip(&rec.layouts).enumerate() {
        let stored = StoredProbe {
            event: spec.event_name(),
            backend: Backend::Tracefs,
            user_offset: None,
            field_offsets: layout.args.iter().map(|(f, _)| f.offset).collect(),
            spec: spec.to_string(),
            filter: None,
        };
        let plan = stored
            .plan(arch, symbols)
            .map_err(|reason| header(i, reason))?;
        let mut attr = crate::attach::attr::sample_layout(&plan);
        attr.type_ = PERF_TYPE_TRACEPOINT;
        attr.config = u64::from(layout.id);
        attrs.push(crate::attach::sys::attr_bytes(&attr));
        regs.push(plan.regs_mask.count_ones() as usize);
        probes.push(stored);
    }
    let mut writer = Writer::new(out)?;
    let mut addresses = Vec::new();
    for (e, record) in rec.events.iter().zip(&rec.records) {
        let ip = ip_of(rec, e.probe, record, arch);
        addresses.push(ip);
        let body = sample(e, ip, record, regs[e.probe]);
        writer
            .ring_bytes((&body, &[]))
            .map_err(|source| PerfDataError::Io {
                what: "writing a boot-time event".into(),
                offset: 0,
                source,
            })?;
    }
    let meta = Metadata {
        arch,
        ids: (1..=probes.len() as u64).map(|id| vec![id]).collect(),
        probes,
        attrs,
        hidden: 0,
        symbols: symbol_subset(symbols, addresses),
        hostname: read("/proc/sys/kernel/hostname"),
        osrelease: read("/proc/sys/kernel/osrelease"),
        nr_cpus: (
            count(crate::attach::cpus::possible_cpus()),
            count(crate::attach::cpus::online_cpus()),
        ),
        cmdline: std::env::args().collect(),
        notes: vec![(
            "boot".into(),
            "kprobe_event= probes of /proc/cmdline".into(),
        )],
        tracing_data: Some(tracing_data_of(rec)),
        build_ids: Vec::new(),
    };
    writer.finish(&meta)
}

fn header(probe: usize, reason: String) -> PerfDataError {
    PerfDataError::Header {
        offset: 0,
        reason: format!("boot-time probe {probe} cannot be planned again: {reason}"),
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn count<E>(cpus: Result<Vec<u32>, E>) -> u32 {
    cpus.map_or(0, |c| u32::try_from(c.len()).unwrap_or(u32::MAX))
}

/// The ip perf's sample of this record would carry: the probe's address
/// (plus one on x86_64, where the kernel reports the address after the
/// breakpoint), or a return probe's return address.
fn ip_of(rec: &BootRecording, probe: usize, record: &[u8], arch: Arch) -> u64 {
    let Some(at) = rec.ip_fields.get(probe).copied().flatten() else {
        return 0;
    };
    let ip = record
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_ne_bytes);
    let is_return = rec.probes.get(probe).is_some_and(|p| p.is_return());
    if !is_return && arch == Arch::X86_64 {
        ip + 1
    } else {
        ip
    }
}

/// The whole `PERF_RECORD_SAMPLE` (header included) of one event, laid
/// out for `sample_layout`'s `sample_type`: IDENTIFIER, IP, TID, TIME,
/// CPU, RAW (padded as the kernel pads it), and, when the plan asks for
/// registers, an empty register set (`PERF_SAMPLE_REGS_ABI_NONE`).
fn sample(e: &crate::decode::ftrace::FtraceEvent, ip: u64, record: &[u8], regs: usize) -> Vec<u8> {
    let mut raw = record.to_vec();
    while !(4 + raw.len()).is_multiple_of(8) {
        raw.push(0);
    }
    let mut b = Vec::with_capacity(56 + raw.len());
    b.extend_from_slice(&RECORD_SAMPLE.to_ne_bytes());
    b.extend_from_slice(&MISC_KERNEL.to_ne_bytes());
    b.extend_from_slice(&0u16.to_ne_bytes()); // size, below
    b.extend_from_slice(&(e.probe as u64 + 1).to_ne_bytes());
    b.extend_from_slice(&ip.to_ne_bytes());
    b.extend_from_slice(&e.tid.to_ne_bytes()); // pid: the record has the thread's only
    b.extend_from_slice(&e.tid.to_ne_bytes());
    b.extend_from_slice(&e.time_ns.to_ne_bytes());
    b.extend_from_slice(&e.cpu.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
    b.extend_from_slice(&raw);
    if regs > 0 {
        b.extend_from_slice(&0u64.to_ne_bytes());
    }
    let size = u16::try_from(b.len()).unwrap_or(u16::MAX);
    b[6..8].copy_from_slice(&size.to_ne_bytes());
    b
}

/// perf's tracing data for the probes' events: the page and event
/// headers of tracefs, and each event's format.
fn tracing_data_of(rec: &BootRecording) -> Vec<u8> {
    let events: Vec<(String, String)> = rec
        .probes
        .iter()
        .zip(&rec.formats)
        .map(|(p, f)| (p.group_name().to_string(), f.clone()))
        .collect();
    let page = u32::try_from(crate::attach::sys::page_size()).unwrap_or(4096);
    tracing_data(page, &rec.headers.0, &rec.headers.1, &events)
}
