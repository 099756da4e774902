//! What a perf.data file holds besides records: the probes (as
//! definitions that plan again without the recording machine), their
//! attrs and ids, the kernel symbols the output used, the host, and notes
//! the front end stores (its closing summary, say).

use kprobe_perf_arch::Arch;
use kprobe_perf_symbols::KernelSymbols;

use crate::plan::{self, AttachPoint, Backend, BackendChoice, ProbePlan};
use kprobe_perf_spec::{ProbeSpec, Target, UserLocation};

/// First line of the private section.
const MAGIC_LINE: &str = "kprobe-perf-data 1";

/// One probe as stored: enough to plan it again, identically, on any
/// machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredProbe {
    /// The event name shown in output.
    pub event: String,
    /// The backend it was recorded with.
    pub backend: Backend,
    /// For a uprobe, the file offset the symbol resolved to.
    pub user_offset: Option<u64>,
    /// Where each argument lies in the raw record (tracefs probes).
    pub field_offsets: Vec<usize>,
    /// The definition (kprobe_events syntax).
    pub spec: String,
    /// A filter the recording ran in user space: the file holds every
    /// sample the kernel wrote, and a replay runs the filter again. (A
    /// filter the kernel ran is not stored: its samples are the file's.)
    pub filter: Option<String>,
}

impl StoredProbe {
    /// The stored form of a plan.
    pub fn from_plan(plan: &ProbePlan, field_offsets: &[usize]) -> StoredProbe {
        StoredProbe {
            event: plan.event.clone(),
            backend: plan.backend,
            user_offset: match plan.attach {
                AttachPoint::User { offset, .. } => Some(offset),
                _ => None,
            },
            field_offsets: field_offsets.to_vec(),
            spec: plan.spec.to_string(),
            filter: plan
                .filter
                .as_ref()
                .filter(|f| !f.in_kernel())
                .map(|f| f.text().to_string()),
        }
    }

    /// Plans the probe again for `arch`, without symbols or binaries: the
    /// decoding of its arguments is that of the recording.
    /// `symbols` are the file's stored symbols: they name the kernel's
    /// return trampoline, when the recording used it.
    pub fn plan(&self, arch: Arch, symbols: &KernelSymbols) -> Result<ProbePlan, String> {
        let mut spec = ProbeSpec::parse(&self.spec, arch).map_err(|e| e.to_string())?;
        if let (Target::User { location, .. }, Some(off)) = (&mut spec.target, self.user_offset) {
            *location = UserLocation::Offset(off);
        }
        let choice = match self.backend {
            Backend::Pmu => BackendChoice::Pmu,
            Backend::Tracefs => BackendChoice::Tracefs,
        };
        let mut p = plan::resolve(spec, &KernelSymbols::default(), arch, choice)
            .map_err(|e| e.to_string())?;
        p.event = self.event.clone();
        if p.is_return() && !matches!(p.attach, plan::AttachPoint::User { .. }) {
            p.return_trampoline = plan::return_trampoline(symbols);
        }
        if let Some(text) = &self.filter {
            p = p.with_filter(text).map_err(|e| e.to_string())?;
            if let Some(f) = p.filter.as_mut() {
                f.run_in_user_space("the recording ran it in user space");
            }
        }
        Ok(p)
    }
}

/// Everything a perf.data file holds besides its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// Architecture of the recording machine.
    pub arch: Arch,
    /// The probes, in attr order.
    pub probes: Vec<StoredProbe>,
    /// The perf_event_attr bytes of each probe.
    pub attrs: Vec<Vec<u8>>,
    /// The event ids of each probe.
    pub ids: Vec<Vec<u64>>,
    /// How many of the last probes are hidden from perf
    /// (`super::FEAT_HIDDEN`): their attrs are not among perf's, and
    /// their samples went to the writer's hidden region
    /// ([`super::Writer::hide`]).
    pub hidden: usize,
    /// kallsyms-format lines for the symbols the output used
    /// ([`symbol_subset`]).
    pub symbols: String,
    /// `uname -n`.
    pub hostname: String,
    /// `uname -r`.
    pub osrelease: String,
    /// Possible and online CPUs.
    pub nr_cpus: (u32, u32),
    /// The recording command line.
    pub cmdline: Vec<String>,
    /// Free-form notes of the front end (key, one-line value).
    pub notes: Vec<(String, String)>,
    /// perf's tracing data ([`super::tracing_data`]), needed by perf for
    /// tracefs-defined probes (tracepoint attrs); written only.
    pub tracing_data: Option<Vec<u8>>,
    /// The build IDs of the files the probes are in (perf's
    /// `HEADER_BUILD_ID`), so that `perf buildid-list` names them and
    /// `perf report` elsewhere finds the right binaries; written only.
    pub build_ids: Vec<FileBuildId>,
}

/// A file's GNU build ID, as perf's `HEADER_BUILD_ID` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBuildId {
    /// The kernel (`[kernel.kallsyms]`) rather than a user file.
    pub kernel: bool,
    /// The ID's bytes (20 for the usual SHA-1 ones, at most 20 kept).
    pub id: Vec<u8>,
    /// The file's path, or `[kernel.kallsyms]`.
    pub path: String,
}

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Pmu => "pmu",
        Backend::Tracefs => "tracefs",
    }
}

/// Makes a value fit on one line of the private section.
fn one_line(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn from_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Metadata {
    /// The text of the private feature section.
    pub(crate) fn encode(&self) -> String {
        let mut s = format!("{MAGIC_LINE}\narch {}\n", self.arch.name());
        for p in &self.probes {
            let offsets: Vec<String> = p.field_offsets.iter().map(usize::to_string).collect();
            // A filter run in user space is an eighth field, only then
            // (files without one read as before).
            let filter = p
                .filter
                .as_ref()
                .map_or(String::new(), |f| format!("\t{}", one_line(f)));
            s.push_str(&format!(
                "probe\t{}\t{}\t{}\t{}\t{}\t{}{filter}\n",
                one_line(&p.event),
                backend_name(p.backend),
                // A column kept for the layout's sake: builds before
                // entries were counted in the kernel stored here the
                // kretprobe a hidden entry probe counted for.
                "-",
                p.user_offset.map_or("-".into(), |o| o.to_string()),
                if offsets.is_empty() {
                    "-".into()
                } else {
                    offsets.join(",")
                },
                one_line(&p.spec)
            ));
        }
        for (k, v) in &self.notes {
            s.push_str(&format!("note\t{}\t{}\n", one_line(k), one_line(v)));
        }
        s.push_str("symbols\n");
        s.push_str(&self.symbols);
        s
    }

    /// Reads the private section back into `self` (probes, notes,
    /// symbols, arch); the other fields come from perf's own sections.
    pub(crate) fn decode_private(&mut self, text: &str) -> Result<(), String> {
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC_LINE) {
            return Err(format!("does not start with {MAGIC_LINE:?}"));
        }
        for (n, line) in (2..).zip(lines.by_ref()) {
            let bad = |what: &str| format!("line {n}: {what}: {line:?}");
            if line == "symbols" {
                break;
            }
            let mut f = line.split('\t');
            match f.next() {
                Some(l) if l.starts_with("arch ") => {
                    self.arch = match &l[5..] {
                        "x86_64" => Arch::X86_64,
                        "aarch64" => Arch::Aarch64,
                        _ => return Err(bad("unknown architecture")),
                    }
                }
                Some("probe") => {
                    let fields: Vec<&str> = f.collect();
                    // The third column is always "-" (see `encode`).
                    let (event, backend, user, offsets, spec, filter) = match fields[..] {
                        [event, backend, _, user, offsets, spec] => {
                            (event, backend, user, offsets, spec, None)
                        }
                        [event, backend, _, user, offsets, spec, filter] => {
                            (event, backend, user, offsets, spec, Some(from_line(filter)))
                        }
                        _ => return Err(bad("a probe line has 7 fields (8 with a filter)")),
                    };
                    let num = |s: &str| -> Result<Option<u64>, String> {
                        if s == "-" {
                            Ok(None)
                        } else {
                            s.parse().map(Some).map_err(|_| bad("not a number"))
                        }
                    };
                    self.probes.push(StoredProbe {
                        event: from_line(event),
                        backend: match backend {
                            "pmu" => Backend::Pmu,
                            "tracefs" => Backend::Tracefs,
                            _ => return Err(bad("unknown backend")),
                        },
                        user_offset: num(user)?,
                        field_offsets: if offsets == "-" {
                            Vec::new()
                        } else {
                            offsets
                                .split(',')
                                .map(|o| o.parse().map_err(|_| bad("not an offset")))
                                .collect::<Result<_, _>>()?
                        },
                        spec: from_line(spec),
                        filter,
                    });
                }
                Some("note") => {
                    let (Some(k), Some(v)) = (f.next(), f.next()) else {
                        return Err(bad("a note line has 3 fields"));
                    };
                    self.notes.push((from_line(k), from_line(v)));
                }
                _ => return Err(bad("unknown line")),
            }
        }
        self.symbols = lines.fold(String::new(), |mut s, l| {
            s.push_str(l);
            s.push('\n');
            s
        });
        Ok(())
    }

    /// The note stored under `key`.
    pub fn note(&self, key: &str) -> Option<&str> {
        self.notes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl Default for Metadata {
    fn default() -> Self {
        Metadata {
            arch: Arch::host().unwrap_or(Arch::X86_64),
            probes: Vec::new(),
            attrs: Vec::new(),
            ids: Vec::new(),
            hidden: 0,
            symbols: String::new(),
            hostname: String::new(),
            osrelease: String::new(),
            nr_cpus: (0, 0),
            cmdline: Vec::new(),
            notes: Vec::new(),
            tracing_data: None,
            build_ids: Vec::new(),
        }
    }
}

/// kallsyms-format text holding, for every address of `addrs` inside a
/// text symbol of `symbols`, that symbol and (as a data symbol) where it
/// ends: parsed back with [`KernelSymbols::parse`], it symbolizes those
/// addresses exactly as `symbols` does.
pub fn symbol_subset(symbols: &KernelSymbols, addrs: impl IntoIterator<Item = u64>) -> String {
    let mut found = std::collections::BTreeMap::<u64, (String, u64)>::new();
    for a in addrs {
        if let Some(l) = symbols.symbolize(a) {
            let s = l.symbol;
            let line = match &s.module {
                Some(m) => format!("{:016x} {} {}\t[{m}]", s.address, s.kind, s.name),
                None => format!("{:016x} {} {}", s.address, s.kind, s.name),
            };
            found.insert(s.address, (line, s.address.saturating_add(l.size)));
        }
    }
    let mut out = String::new();
    for (line, end) in found.values() {
        out.push_str(line);
        out.push('\n');
        if !found.contains_key(end) {
            out.push_str(&format!("{end:016x} d __kprobe_perf_end\n"));
        }
    }
    out
}
