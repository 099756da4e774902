//! Recording event probes (`e:`) through a tracing instance's buffers.
//!
//! perf cannot deliver an eprobe's records: the kernel's
//! `eprobe_register` (kernel/trace/trace_eprobe.c) answers every
//! `TRACE_REG_PERF_*` request with 0 and registers nothing, so a perf
//! event opened on the eprobe's id stays silent. The one route is
//! ftrace's ring buffer: each probe is defined in the session's private
//! group, enabled in a tracing instance of the session's own (named as
//! the group, so the [`Guardian`](crate::Guardian) removes both), and its
//! records are read as binary pages from `per_cpu/cpuN/trace_pipe_raw`,
//! polled like the perf rings. The instance's clock is the one perf
//! stamps samples with (see `attach::instance`).

use std::os::fd::AsRawFd;
use std::process::ExitStatus;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::attach::command::HeldCommand;
use crate::attach::instance::{self, BufferLoss, CpuBuffer, Instance};
use crate::attach::tracefs::{ProbeKind, Tracefs, TracefsProbes};
use crate::decode::ftrace::{self, PageLayout, RecordLayout};
use crate::error::Error;
use kprobe_perf_spec::{EventProbe, KernelFeatures};

pub use crate::decode::ftrace::FtraceEvent;

/// What an [`EventProbeSession`] counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventProbeSummary {
    /// Events read, per probe (in definition order).
    pub events: Vec<u64>,
    /// Events overwritten in the buffers before they were read (the
    /// instance's `per_cpu/cpuN/stats` `overrun`, summed).
    pub overrun: u64,
    /// Events the kernel could not write to the buffers (`dropped
    /// events`, summed).
    pub dropped: u64,
    /// Events the pages themselves say were lost (a page's missed-events
    /// note; 0 where a page said so without a count).
    pub missed: u64,
    /// Pages or records that could not be decoded (each counted, none
    /// read past).
    pub undecodable: u64,
}

impl EventProbeSummary {
    /// Every event lost or unreadable, whatever the cause.
    pub fn lost(&self) -> u64 {
        self.overrun + self.dropped + self.missed + self.undecodable
    }
}

/// One eprobe of the session: its definition as the kernel got it, and
/// how to read its records.
#[derive(Debug)]
struct Defined {
    /// `e:GROUP/EVENT SYSTEM.EVENT ARGS`, as written to the kernel.
    definition: EventProbe,
    /// The event's name in the group.
    event: String,
    layout: RecordLayout,
}

/// Event probes recorded through a private tracing instance: defined and
/// enabled by [`EventProbeSession::open`], read by
/// [`EventProbeSession::poll`], removed (instance and definitions) on
/// drop.
pub struct EventProbeSession {
    // Drop order matters: the buffers' files close first, then the
    // instance is removed (which disables its events), then the
    // definitions, which the kernel keeps while an instance uses them.
    buffers: Vec<CpuBuffer>,
    instance: Instance,
    command: Option<HeldCommand>,
    probes: Vec<Defined>,
    page_layout: PageLayout,
    poll: Poll,
    events: Events,
    page: Vec<u8>,
    summary: EventProbeSummary,
    definitions: TracefsProbes,
}

impl std::fmt::Debug for EventProbeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventProbeSession")
            .field("instance", &self.instance)
            .field("probes", &self.probes)
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

/// The kernel's eprobe support, from its tracefs README.
fn require_eprobes(fs: &Tracefs) -> Result<(), Error> {
    let readme = std::fs::read_to_string(fs.root().join("README")).unwrap_or_default();
    if KernelFeatures::from_readme(&readme).eprobe {
        return Ok(());
    }
    Err(Error::NoEventProbes {
        readme: fs.root().join("README").display().to_string(),
    })
}

impl EventProbeSession {
    /// Defines `probes` in a private group, makes the instance, and
    /// enables them there; with `command`, forks it held (it runs at
    /// [`EventProbeSession::enable`]) and limits the instance to it and
    /// its descendants. System-wide without a command.
    pub fn open(probes: &[EventProbe], command: Option<&[String]>) -> Result<Self, Error> {
        let fs = Tracefs::find_or_mount()?;
        require_eprobes(&fs)?;
        crate::attach::tracefs::remove_stale(&fs);
        let page_layout = PageLayout::from_fields(&instance::header_page(&fs)?)
            .unwrap_or(PageLayout::SIXTY_FOUR_BIT);
        let mut definitions = TracefsProbes::new(fs.clone());
        let group = definitions.group().to_string();
        let mut defined = Vec::with_capacity(probes.len());
        for (i, p) in probes.iter().enumerate() {
            defined.push(define(&mut definitions, &fs, &group, i, p)?);
        }
        let instance = Instance::create(&fs, &group)?;
        let command = command.map(HeldCommand::spawn).transpose()?;
        if let Some(c) = &command {
            instance.follow(c.pid())?;
        }
        for d in &defined {
            instance.set_enabled(&group, &d.event, true)?;
        }
        let cpus = crate::attach::cpus::online_cpus()?;
        let buffers = instance.open_buffers(&cpus)?;
        let poll = Poll::new().map_err(|e| Error::io("creating the poller", e))?;
        for (i, b) in buffers.iter().enumerate() {
            poll.registry()
                .register(
                    &mut SourceFd(&b.file.as_raw_fd()),
                    Token(i),
                    Interest::READABLE,
                )
                .map_err(|e| Error::io("polling a trace_pipe_raw", e))?;
        }
        Ok(EventProbeSession {
            summary: EventProbeSummary {
                events: vec![0; defined.len()],
                ..EventProbeSummary::default()
            },
            buffers,
            instance,
            command,
            probes: defined,
            page_layout,
            poll,
            events: Events::with_capacity(64),
            page: vec![0; crate::attach::sys::page_size()],
            definitions,
        })
    }

    /// Starts the command, if there is one (the probes are armed since
    /// [`EventProbeSession::open`]).
    pub fn enable(&mut self) -> Result<(), Error> {
        if let Some(c) = self.command.as_mut() {
            c.release()?;
        }
        Ok(())
    }

    /// The definitions as the kernel got them (`e:GROUP/EVENT ...`).
    pub fn definitions(&self) -> Vec<EventProbe> {
        self.probes.iter().map(|p| p.definition.clone()).collect()
    }

    /// The argument names of probe `i`, as the kernel named its fields.
    pub fn arg_names(&self, i: usize) -> Vec<String> {
        self.probes
            .get(i)
            .map(|p| p.layout.arg_names())
            .unwrap_or_default()
    }

    /// Waits up to `timeout` for records, then hands every record there
    /// is to `sink`, in time order.
    pub fn poll(
        &mut self,
        timeout: Option<Duration>,
        sink: &mut dyn FnMut(&FtraceEvent),
    ) -> Result<(), Error> {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("waiting for trace_pipe_raw", e)),
        }
        self.drain(sink)
    }

    /// Reads every page there is now from every CPU's buffer.
    fn drain(&mut self, sink: &mut dyn FnMut(&FtraceEvent)) -> Result<(), Error> {
        let mut got = Vec::new();
        for b in 0..self.buffers.len() {
            loop {
                let buffer = &mut self.buffers[b];
                let cpu = buffer.cpu;
                let n = instance::read_page(buffer, &mut self.page)
                    .map_err(|e| Error::io(format!("reading the trace buffer of CPU {cpu}"), e))?;
                let Some(n) = n else { break };
                self.read_page(cpu, n, &mut got);
            }
        }
        got.sort_by_key(|e: &FtraceEvent| e.time_ns);
        for e in &got {
            sink(e);
        }
        Ok(())
    }

    /// Decodes the first `len` bytes of the page buffer into `out`,
    /// counting what cannot be decoded.
    fn read_page(&mut self, cpu: u32, len: usize, out: &mut Vec<FtraceEvent>) {
        let page = match ftrace::read_page(&self.page[..len], self.page_layout) {
            Ok(p) => p,
            Err(_) => {
                self.summary.undecodable += 1;
                return;
            }
        };
        self.summary.missed += page.missed.unwrap_or(0);
        for e in page.events {
            let Some(id) = ftrace::record_type(e.record) else {
                self.summary.undecodable += 1;
                continue;
            };
            let Some(probe) = self.probes.iter().position(|p| p.layout.id == id) else {
                // Not one of ours (the instance enables nothing else).
                continue;
            };
            match ftrace::read_record(e.record, &self.probes[probe].layout) {
                Ok((tid, args)) => {
                    self.summary.events[probe] += 1;
                    out.push(FtraceEvent {
                        probe,
                        cpu,
                        tid,
                        time_ns: e.time,
                        args,
                    });
                }
                Err(_) => self.summary.undecodable += 1,
            }
        }
    }

    /// Disables the probes in the instance and reads what the buffers
    /// still hold.
    pub fn disable(&mut self, sink: &mut dyn FnMut(&FtraceEvent)) -> Result<(), Error> {
        let group = self.definitions.group().to_string();
        for p in &self.probes {
            self.instance.set_enabled(&group, &p.event, false)?;
        }
        self.drain(sink)
    }

    /// The counts so far, with the buffers' losses read now.
    pub fn summary(&self) -> Result<EventProbeSummary, Error> {
        let mut s = self.summary.clone();
        for b in &self.buffers {
            let BufferLoss { overrun, dropped } = self.instance.loss(b.cpu)?;
            s.overrun += overrun;
            s.dropped += dropped;
        }
        Ok(s)
    }

    /// The command's exit status once it has ended (not blocking).
    pub fn command_status(&mut self) -> Result<Option<ExitStatus>, Error> {
        match self.command.as_mut() {
            Some(c) => Ok(c.try_wait()?),
            None => Ok(None),
        }
    }

    /// As [`EventProbeSession::command_status`], waiting up to `grace`.
    pub fn wait_command(&mut self, grace: Duration) -> Result<Option<ExitStatus>, Error> {
        match self.command.as_mut() {
            Some(c) => Ok(c.wait(grace)?),
            None => Ok(None),
        }
    }
}

/// Defines probe `i` as `e:GROUP/eN_EVENT ...` and reads its format.
fn define(
    definitions: &mut TracefsProbes,
    fs: &Tracefs,
    group: &str,
    i: usize,
    p: &EventProbe,
) -> Result<Defined, Error> {
    let event = format!("e{i}_{}", p.attached);
    let event: String = event.chars().take(MAX_EVENT_NAME).collect();
    let definition = EventProbe {
        group: Some(group.to_string()),
        event: Some(event.clone()),
        ..p.clone()
    };
    definitions.define(ProbeKind::Kernel, &definition.to_string(), &event)?;
    let fields = fs.format(group, &event)?;
    let id = fs.event_id(group, &event)?;
    let types: Vec<_> = p.args.iter().map(|a| a.ty.map(|t| t.base)).collect();
    let layout = u16::try_from(id)
        .ok()
        .and_then(|id| RecordLayout::new(id, &fields, &types))
        .ok_or_else(|| Error::EventProbeFormat {
            probe: definition.to_string(),
            path: fs.format_path(group, &event).display().to_string(),
        })?;
    Ok(Defined {
        definition,
        event,
        layout,
    })
}

/// The kernel's longest event name less one (MAX_EVENT_NAME_LEN is 64
/// with the NUL).
const MAX_EVENT_NAME: usize = 63;
