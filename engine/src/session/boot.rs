//! Reading what boot-time kprobe events recorded.
//!
//! A `kprobe_event=` parameter makes the kernel define its probes at
//! boot (`setup_boot_kprobe_events`, kernel/trace/trace_kprobe.c, an
//! fs_initcall) and enable them in the top-level tracing instance
//! (`enable_boot_kprobe_events`): their records wait in that instance's
//! ring buffer, not in a perf ring. They are read here as `e:` probes
//! are read (see `session::eprobe`): whole binary pages of each CPU's
//! `per_cpu/cpuN/trace_pipe_raw` at tracefs's root, decoded with each
//! event's `format`. Reading consumes them.

use kprobe_perf_arch::Arch;
use kprobe_perf_spec::boot::{kprobe_event_definitions, kprobe_event_of_cmdline};
use kprobe_perf_spec::ProbeSpec;

use crate::attach::instance::{self, BufferLoss};
use crate::attach::tracefs::Tracefs;
use crate::decode::ftrace::{self, PageLayout, RecordLayout};
use crate::error::Error;
use crate::session::eprobe::{EventProbeSummary, FtraceEvent};

/// What the boot-time probes of a command line recorded.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct BootRecording {
    /// The probes the kernel defined, in the command line's order, each
    /// with its group and event spelled out.
    pub probes: Vec<ProbeSpec>,
    /// The argument names of each probe, as the kernel named its fields.
    pub arg_names: Vec<Vec<String>>,
    /// The definitions of the command line the kernel did not define
    /// (it said why on its console: `Failed to add event(ERRNO): ...`).
    pub not_defined: Vec<String>,
    /// The events, in time order (`probe` indexes `probes`).
    pub events: Vec<FtraceEvent>,
    /// Events per probe and what was lost, as for event probes.
    pub summary: EventProbeSummary,
    /// Each event's record, as the kernel wrote it (`events`' order).
    pub(crate) records: Vec<Vec<u8>>,
    /// Each probe's record layout (event id, fields).
    pub(crate) layouts: Vec<RecordLayout>,
    /// Each probe's `format` file, as tracefs gives it.
    pub(crate) formats: Vec<String>,
    /// Where each probe's records hold the address perf's samples carry
    /// as their ip (`__probe_ip`, or a return probe's `__probe_ret_ip`).
    pub(crate) ip_fields: Vec<Option<usize>>,
    /// tracefs's `events/header_page` and `events/header_event`.
    pub(crate) headers: (String, String),
}

/// Reads the records of the probes `cmdline`'s `kprobe_event=` defined
/// (the text of `/proc/cmdline`), from the top-level buffers of every
/// online CPU, and counts what the buffers lost.
pub fn read_boot_probes(cmdline: &str, arch: Arch) -> Result<BootRecording, Error> {
    let value = kprobe_event_of_cmdline(cmdline).ok_or(Error::NoBootProbes)?;
    let fs = Tracefs::find_or_mount()?;
    let mut out = BootRecording::default();
    let mut layouts = Vec::new();
    for text in kprobe_event_definitions(&value) {
        let spec = ProbeSpec::parse(&text, arch)?.qualified();
        match layout_of(&fs, &spec) {
            Some((layout, format, ip)) => {
                out.arg_names.push(layout.arg_names());
                layouts.push(layout);
                out.formats.push(format);
                out.ip_fields.push(ip);
                out.probes.push(spec);
            }
            None => out.not_defined.push(text),
        }
    }
    if out.probes.is_empty() {
        return Err(Error::BootProbesNotDefined {
            definitions: out.not_defined.join("; "),
        });
    }
    out.summary.events = vec![0; out.probes.len()];
    let header = |f: &str| std::fs::read_to_string(fs.root().join(f)).unwrap_or_default();
    out.headers = (header("events/header_page"), header("events/header_event"));
    let page_layout =
        PageLayout::from_fields(&instance::header_page(&fs)?).unwrap_or(PageLayout::SIXTY_FOUR_BIT);
    let mut page = vec![0; crate::attach::sys::page_size()];
    let cpus = crate::attach::cpus::online_cpus()?;
    for mut buffer in instance::open_buffers_in(fs.root(), &cpus)? {
        let cpu = buffer.cpu;
        while let Some(n) = instance::read_page(&mut buffer, &mut page)
            .map_err(|e| Error::io(format!("reading the trace buffer of CPU {cpu}"), e))?
        {
            read_page(&page[..n], page_layout, cpu, &layouts, &mut out);
        }
        let BufferLoss { overrun, dropped } = instance::loss_in(fs.root(), cpu)?;
        out.summary.overrun += overrun;
        out.summary.dropped += dropped;
    }
    let mut order: Vec<usize> = (0..out.events.len()).collect();
    order.sort_by_key(|&i| out.events[i].time_ns);
    out.events = order.iter().map(|&i| out.events[i].clone()).collect();
    out.records = order
        .iter()
        .map(|&i| std::mem::take(&mut out.records[i]))
        .collect();
    out.layouts = layouts;
    Ok(out)
}

/// The record layout of a probe the kernel defined, its `format` file,
/// and where its records hold the probe's address; `None` when it has
/// no such event. Its arguments take the definition's types when the
/// kernel made one field per argument (it may make more: `$arg*`).
fn layout_of(fs: &Tracefs, spec: &ProbeSpec) -> Option<(RecordLayout, String, Option<usize>)> {
    let (group, event) = (spec.group_name(), spec.event_name());
    let format = std::fs::read_to_string(fs.format_path(group, &event)).ok()?;
    let fields = crate::attach::tracefs::parse_format(&format);
    let ip_name = if spec.is_return() {
        "__probe_ret_ip"
    } else {
        "__probe_ip"
    };
    let ip = fields.iter().find(|f| f.name == ip_name).map(|f| f.offset);
    let id = u16::try_from(fs.event_id(group, &event).ok()?).ok()?;
    let own = fields
        .iter()
        .filter(|f| !f.name.starts_with("common_") && !f.name.starts_with("__probe_"))
        .count();
    let types: Vec<_> = if own == spec.args.len() {
        spec.args.iter().map(|a| a.ty.map(|t| t.base)).collect()
    } else {
        vec![None; own]
    };
    Some((RecordLayout::new(id, &fields, &types)?, format, ip))
}

/// Decodes one page into `out`, counting what cannot be decoded.
fn read_page(
    bytes: &[u8],
    layout: PageLayout,
    cpu: u32,
    layouts: &[RecordLayout],
    out: &mut BootRecording,
) {
    let Ok(page) = ftrace::read_page(bytes, layout) else {
        out.summary.undecodable += 1;
        return;
    };
    out.summary.missed += page.missed.unwrap_or(0);
    for e in page.events {
        let Some(id) = ftrace::record_type(e.record) else {
            out.summary.undecodable += 1;
            continue;
        };
        // Other events enabled in the top-level instance are not ours.
        let Some(probe) = layouts.iter().position(|l| l.id == id) else {
            continue;
        };
        match ftrace::read_record(e.record, &layouts[probe]) {
            Ok((tid, args)) => {
                out.summary.events[probe] += 1;
                out.records.push(e.record.to_vec());
                out.events.push(FtraceEvent {
                    probe,
                    cpu,
                    tid,
                    time_ns: e.time,
                    args,
                });
            }
            Err(_) => out.summary.undecodable += 1,
        }
    }
}
