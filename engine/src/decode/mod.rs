//! Turning a perf sample into an [`Event`]: which probe, where, and the
//! argument values, from the sampled registers (PMU probes) or from the
//! fields the kernel fetched into the record (tracefs probes).

mod filter;
pub(crate) mod frames;
pub(crate) mod ftrace;
pub(crate) mod joiner;
pub(crate) mod pairing;
pub mod records;
pub(crate) mod stats;
mod user_stacks;

use std::fmt;
use std::sync::Arc;

use kprobe_perf_arch::boundary::ProbeSite;
use linux_perf_event_reader::SampleRecord;

use crate::plan::{ArgSource, ProbePlan};
use kprobe_perf_spec::{ArgType, BaseType};

/// Size of `struct trace_entry` at the start of a kprobe's raw data.
pub(crate) const TRACE_ENTRY_SIZE: usize = 8;

/// One probe hit, decoded. `Default` gives an empty event (probe 0,
/// comm `""`, no arguments) to fill in, e.g. for tests of a sink.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// Index of the probe in the session's plan list.
    pub probe: usize,
    /// CPU the probe fired on.
    pub cpu: u32,
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Command name of the thread when the probe fired (`<...>` when
    /// unknown).
    pub comm: Arc<str>,
    /// perf clock timestamp in nanoseconds.
    pub time_ns: u64,
    /// Sampled instruction pointer (probe address + 1 on x86 kprobes,
    /// the return address at a kretprobe).
    pub ip: u64,
    /// The probed address (kprobe) or the function entered (kretprobe),
    /// from the kernel's raw record.
    pub probe_addr: u64,
    /// For a kretprobe, the address the function returned to.
    pub ret_addr: Option<u64>,
    /// Argument values in plan order, typed for printing.
    pub args: Vec<Value>,
    /// The callchain, innermost frame first, when the session records
    /// them ([`crate::stack::CallGraph`]); empty otherwise.
    pub callchain: Vec<frames::StackFrame>,
}

/// A kprobe hit whose arguments are all integers, with no callchain or
/// user stack, handed over as it waits in the ordering queue rather than
/// copied into an [`Event`]: the same fields, its arguments bare.
#[derive(Debug, Clone, Copy)]
pub struct IntEvent<'a> {
    /// As [`Event::probe`].
    pub probe: usize,
    /// As [`Event::cpu`].
    pub cpu: u32,
    /// As [`Event::pid`].
    pub pid: i32,
    /// As [`Event::tid`].
    pub tid: i32,
    /// As [`Event::comm`].
    pub comm: &'a Arc<str>,
    /// As [`Event::time_ns`].
    pub time_ns: u64,
    /// As [`Event::ip`].
    pub ip: u64,
    /// As [`Event::probe_addr`].
    pub probe_addr: u64,
    /// The arguments in plan order: what [`Value::Int`]'s `raw` would
    /// hold, of the type at the same place in `kinds`.
    pub ints: &'a [u64],
    /// The arguments' types (as many as `ints`).
    pub kinds: &'a [BaseType],
}

/// An event handed over in time order: decoded into an [`Event`], or, for
/// a caller that takes them, an [`IntEvent`] (which it may decline, to be
/// given the same event as an [`Event`]).
#[derive(Debug, Clone, Copy)]
pub enum Handed<'a> {
    /// Any event.
    Event(&'a Event),
    /// A kprobe hit with integer arguments only.
    Ints(&'a IntEvent<'a>),
}

/// Kernel addresses events name, kept for a symbol table (a perf.data
/// file's): each event's probe address and return address, noted cheaply
/// when an event repeats the previous one's (most do), and any other
/// address inserted.
#[derive(Debug, Clone, Default)]
pub struct AddressSet {
    set: std::collections::HashSet<u64>,
    /// The last `(probe, return)` pair noted.
    last: (u64, Option<u64>),
}

impl AddressSet {
    /// Starts with `set` (e.g. the return trampolines).
    pub fn new(set: std::collections::HashSet<u64>) -> AddressSet {
        AddressSet {
            set,
            last: (0, None),
        }
    }

    /// Notes an event's probe address and, for a return, the address it
    /// returned to: a hash only when the pair differs from the last one.
    #[inline]
    pub(crate) fn note_site(&mut self, probe_addr: u64, ret_addr: Option<u64>) {
        if (probe_addr, ret_addr) != self.last {
            self.last = (probe_addr, ret_addr);
            self.set.insert(probe_addr);
            if let Some(r) = ret_addr {
                self.set.insert(r);
            }
        }
    }

    /// Notes one more address.
    pub fn insert(&mut self, address: u64) {
        self.set.insert(address);
    }

    /// Every address noted.
    pub(crate) fn as_set(&self) -> &std::collections::HashSet<u64> {
        &self.set
    }

    /// Every address noted, taken.
    pub fn into_set(self) -> std::collections::HashSet<u64> {
        self.set
    }
}

impl Extend<u64> for AddressSet {
    fn extend<I: IntoIterator<Item = u64>>(&mut self, iter: I) {
        self.set.extend(iter);
    }
}

impl Default for Event {
    fn default() -> Self {
        Event {
            probe: 0,
            cpu: 0,
            pid: 0,
            tid: 0,
            comm: Arc::from(""),
            time_ns: 0,
            ip: 0,
            probe_addr: 0,
            ret_addr: None,
            callchain: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// A fetched value and how to print it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An integer-like value (u/s/x, symbol, bitfield).
    Int {
        /// The value, truncated to the type's width (sign-extended for sN).
        raw: u64,
        /// Its type.
        ty: BaseType,
    },
    /// A string; `None` when the kernel could not read it (a fault).
    Str(Option<String>),
    /// An array of values.
    Array(Vec<Value>),
    /// A value that could not be known: an entry value of a return probe
    /// joined to its entry in user space whose entry was not seen
    /// (the planner's entry joins). Printed `(unknown)`.
    Unknown,
}

fn low_bits(v: u64, bits: u32) -> u64 {
    if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}

impl Value {
    /// Applies a type to a 64-bit register: truncation to the width (with
    /// sign extension for sN), or extraction of a bitfield.
    pub fn new(reg: u64, ty: BaseType) -> Value {
        Value::Int {
            raw: Value::typed(reg, ty),
            ty,
        }
    }

    /// The integer of [`Value::new`].
    #[inline(always)]
    pub(crate) fn typed(reg: u64, ty: BaseType) -> u64 {
        match ty {
            BaseType::Unsigned(b) | BaseType::Hex(b) => low_bits(reg, u32::from(b)),
            BaseType::Char => low_bits(reg, 8),
            BaseType::Signed(b) if b < 64 => {
                let shift = 64 - u32::from(b);
                (((reg << shift) as i64) >> shift) as u64
            }
            BaseType::Bitfield {
                width,
                offset,
                container,
            } => {
                let in_container = low_bits(reg, u32::from(container));
                low_bits(in_container >> offset, u32::from(width))
            }
            _ => reg,
        }
    }

    /// The value as a signed integer, for integer values.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int { raw, .. } => Some(*raw as i64),
            _ => None,
        }
    }

    /// The value as an unsigned integer, for integer values (a signed
    /// value's two's complement bits).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int { raw, .. } => Some(*raw),
            _ => None,
        }
    }

    /// The string, for string values that were read.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// The items, for array values.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    #[cfg(test)]
    /// Whether the value could not be known ([`Value::Unknown`]).
    pub(crate) fn is_unknown(&self) -> bool {
        matches!(self, Value::Unknown)
    }
}

impl serde::Serialize for Value {
    /// As the CLI's JSON prints an argument without the kernel's symbols:
    /// integers as numbers (signed for sN), strings as strings, arrays as
    /// arrays, an unreadable string or an unknown value as `null`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Int {
                raw,
                ty: BaseType::Signed(_),
            } => s.serialize_i64(*raw as i64),
            Value::Int { raw, .. } => s.serialize_u64(*raw),
            Value::Str(Some(v)) => s.serialize_str(v),
            Value::Str(None) | Value::Unknown => s.serialize_none(),
            Value::Array(items) => s.collect_seq(items),
        }
    }
}

impl serde::Serialize for Event {
    /// A map with the fields' names as keys (`probe`, `cpu`, `pid`, `tid`,
    /// `comm`, `time_ns`, `ip`, `probe_addr`, `ret_addr` when set, `args`
    /// as an array in plan order, and `callchain` when recorded), the
    /// names the CLI's JSON Lines use for the same fields.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("probe", &self.probe)?;
        m.serialize_entry("cpu", &self.cpu)?;
        m.serialize_entry("pid", &self.pid)?;
        m.serialize_entry("tid", &self.tid)?;
        m.serialize_entry("comm", &*self.comm)?;
        m.serialize_entry("time_ns", &self.time_ns)?;
        m.serialize_entry("ip", &self.ip)?;
        m.serialize_entry("probe_addr", &self.probe_addr)?;
        if let Some(r) = self.ret_addr {
            m.serialize_entry("ret_addr", &r)?;
        }
        m.serialize_entry("args", &self.args)?;
        if !self.callchain.is_empty() {
            m.serialize_entry("callchain", &self.callchain)?;
        }
        m.end()
    }
}

impl fmt::Display for Value {
    /// As ftrace prints it: decimal for uN/sN and bitfields, `0x`-prefixed
    /// hex for xN (and for `symbol`, which a caller with the kernel's
    /// symbols prints as `sym+off/size` instead), strings in double quotes,
    /// `(fault)` for an unreadable string, arrays as `{a,b,c}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int {
                raw,
                ty: BaseType::Unsigned(_) | BaseType::Bitfield { .. },
            } => write!(f, "{raw}"),
            Value::Int {
                raw,
                ty: BaseType::Signed(_),
            } => write!(f, "{}", *raw as i64),
            // `char` prints as ftrace's '%c' does: the byte itself.
            Value::Int {
                raw,
                ty: BaseType::Char,
            } => write!(f, "'{}'", char::from(*raw as u8)),
            Value::Int { raw, .. } => write!(f, "0x{raw:x}"),
            Value::Str(Some(s)) => write!(f, "\"{s}\""),
            Value::Str(None) => f.write_str("(fault)"),
            Value::Unknown => f.write_str("(unknown)"),
            Value::Array(items) => {
                f.write_str("{")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// Why a sample could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A field the attr asked for is missing.
    #[error("sample lacks {0}")]
    Missing(&'static str),
    /// The raw record is shorter than a kprobe record.
    #[error("raw data of {0} bytes is too short for a kprobe record")]
    ShortRaw(usize),
    /// A register the plan needs was not sampled.
    #[error("register {0} missing from the sample")]
    MissingRegister(&'static str),
    /// A tracefs field lies outside the record.
    #[error("field at byte {0} lies outside the {1}-byte record")]
    FieldOutOfRange(usize, usize),
}

fn read_le(raw: &[u8], at: usize, size: usize) -> Result<u64, DecodeError> {
    let bytes = at
        .checked_add(size)
        .and_then(|end| raw.get(at..end))
        .ok_or(DecodeError::FieldOutOfRange(at, raw.len()))?;
    let mut buf = [0u8; 8];
    buf[..size.min(8)].copy_from_slice(&bytes[..size.min(8)]);
    Ok(u64::from_le_bytes(buf))
}

/// A `__data_loc` string: a u32 of `(len << 16) | offset` from the record
/// start; `len` counts the NUL and is 0 when the kernel faulted.
fn read_data_loc(raw: &[u8], at: usize) -> Result<Value, DecodeError> {
    let loc = read_le(raw, at, 4)?;
    let (len, off) = ((loc >> 16) as usize, (loc & 0xffff) as usize);
    if len == 0 {
        return Ok(Value::Str(None));
    }
    let bytes = raw
        .get(off..off + len)
        .ok_or(DecodeError::FieldOutOfRange(off, raw.len()))?;
    let text = bytes.split(|&b| b == 0).next().unwrap_or(bytes);
    Ok(Value::Str(Some(String::from_utf8_lossy(text).into_owned())))
}

/// Size in the record of one element of a tracefs-fetched type.
fn element_size(ty: BaseType) -> usize {
    match ty {
        BaseType::Unsigned(b) | BaseType::Signed(b) | BaseType::Hex(b) => usize::from(b / 8),
        BaseType::Bitfield { container, .. } => usize::from(container / 8),
        BaseType::Symbol => 8,
        BaseType::Char => 1,
        // `string`, `ustring`, `symstr`, `%pd`, `%pD`: a u32 __data_loc.
        BaseType::String
        | BaseType::UString
        | BaseType::SymStr
        | BaseType::Dentry
        | BaseType::File => 4,
    }
}

fn decode_element(raw: &[u8], at: usize, ty: BaseType) -> Result<Value, DecodeError> {
    match ty {
        t if t.is_data_loc() => read_data_loc(raw, at),
        // The kernel has already extracted the bitfield into its container.
        BaseType::Bitfield { container, .. } => Ok(Value::Int {
            raw: read_le(raw, at, usize::from(container / 8))?,
            ty: BaseType::Unsigned(container),
        }),
        other => Ok(Value::new(read_le(raw, at, element_size(other))?, other)),
    }
}

/// Decodes one argument the kernel fetched into a tracefs event's record.
pub(crate) fn decode_field(raw: &[u8], at: usize, ty: ArgType) -> Result<Value, DecodeError> {
    match ty.array {
        None => decode_element(raw, at, ty.base),
        Some(n) => {
            let size = element_size(ty.base);
            (0..n as usize)
                .map(|i| decode_element(raw, at + i * size, ty.base))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
    }
}

fn read_u64(raw: &[u8], at: usize) -> Option<u64> {
    raw.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_ne_bytes)
}

/// Decodes a sample of probe `probe` (whose plan is `plan`). For a tracefs
/// probe, `field_offsets[i]` is where argument `i` lies in the record.
pub(crate) fn decode_sample(
    probe: usize,
    plan: &ProbePlan,
    sample: &SampleRecord<'_>,
    comm: Arc<str>,
    field_offsets: &[usize],
) -> Result<Event, DecodeError> {
    let raw = sample.raw.ok_or(DecodeError::Missing("raw data"))?;
    let raw = raw.as_slice();
    let regs = sample.intr_regs.as_ref();
    let mut e = decode_parts(
        probe,
        plan,
        &SampleParts::of(sample, &raw),
        |i| regs.and_then(|r| r.get(i)),
        comm,
        field_offsets,
    )?;
    if let Some(chain) = sample.callchain {
        frames::push_frames(
            (0..chain.len()).filter_map(|i| chain.get(i)),
            &mut e.callchain,
        );
    }
    Ok(e)
}

/// The fields of a sample that decoding reads, however the sample was
/// parsed (`None` for a field the sample lacks).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SampleParts<'a> {
    /// `PERF_SAMPLE_IP`.
    pub ip: Option<u64>,
    /// `PERF_SAMPLE_TID`: pid.
    pub pid: Option<i32>,
    /// `PERF_SAMPLE_TID`: tid.
    pub tid: Option<i32>,
    /// `PERF_SAMPLE_TIME`.
    pub time: Option<u64>,
    /// `PERF_SAMPLE_CPU`.
    pub cpu: Option<u32>,
    /// `PERF_SAMPLE_RAW`.
    pub raw: &'a [u8],
}

impl<'a> SampleParts<'a> {
    /// The parts of a sample parsed by linux-perf-event-reader, whose raw
    /// data is `raw`.
    pub(crate) fn of(sample: &SampleRecord<'_>, raw: &'a [u8]) -> SampleParts<'a> {
        SampleParts {
            ip: sample.ip,
            pid: sample.pid,
            tid: sample.tid,
            time: sample.timestamp,
            cpu: sample.cpu,
            raw,
        }
    }
}

/// As [`decode_sample`], from parts: `reg(i)` is the sampled register of
/// perf_regs index `i`, if sampled.
pub(crate) fn decode_parts(
    probe: usize,
    plan: &ProbePlan,
    sample: &SampleParts<'_>,
    reg_of: impl Fn(u64) -> Option<u64>,
    comm: Arc<str>,
    field_offsets: &[usize],
) -> Result<Event, DecodeError> {
    let mut head = EventHead::default();
    let (mut ints, mut others) = (Vec::new(), Vec::new());
    let args = ArgsOut {
        ints: &mut ints,
        others: &mut others,
    };
    decode_into(
        probe,
        plan,
        sample,
        reg_of,
        &comm,
        field_offsets,
        &mut head,
        args,
    )?;
    let kinds = arg_kinds(plan);
    let mut e = head.event(comm, Vec::new(), plan.site());
    set_args(&mut e.args, &kinds, &ints, &others);
    Ok(e)
}

/// The fields of an [`Event`] other than its name, arguments and return
/// address (the sampled ip for a kretprobe): what a decoder keeps per
/// event while it waits for time order, kept small.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EventHead {
    pub time_ns: u64,
    pub ip: u64,
    pub probe_addr: u64,
    pub probe: u32,
    pub cpu: u32,
    pub pid: i32,
    pub tid: i32,
}

impl EventHead {
    pub(crate) fn event(self, comm: Arc<str>, args: Vec<Value>, site: ProbeSite) -> Event {
        let mut e = Event {
            probe: 0,
            cpu: 0,
            pid: 0,
            tid: 0,
            comm,
            time_ns: 0,
            ip: 0,
            probe_addr: 0,
            ret_addr: None,
            callchain: Vec::new(),
            args,
        };
        self.fill(&mut e, site);
        e
    }

    /// Sets every field of `e` but its name and arguments.
    pub(crate) fn fill(self, e: &mut Event, site: ProbeSite) {
        e.probe = self.probe as usize;
        e.cpu = self.cpu;
        e.pid = self.pid;
        e.tid = self.tid;
        e.time_ns = self.time_ns;
        e.ip = self.ip;
        e.probe_addr = self.probe_addr;
        e.ret_addr = (site == ProbeSite::Return).then_some(self.ip);
    }
}

/// Per argument of a plan: `Some(type)` when its value is always a
/// [`Value::Int`] of that type (kept as a bare integer while an event
/// waits), `None` for strings and arrays.
pub(crate) fn arg_kinds(plan: &ProbePlan) -> Vec<Option<BaseType>> {
    plan.args
        .iter()
        .map(|a| match (a.source, a.ty.array, a.ty.base) {
            (ArgSource::Register(_), _, base) => Some(base),
            (ArgSource::Comm, ..) | (ArgSource::Field, Some(_), _) => None,
            (ArgSource::Field, None, base) if base.is_data_loc() => None,
            // The kernel has already extracted the bitfield.
            (ArgSource::Field, None, BaseType::Bitfield { container, .. }) => {
                Some(BaseType::Unsigned(container))
            }
            (ArgSource::Field, None, base) => Some(base),
        })
        .collect()
}

/// Where [`decode_into`] puts argument values: the integers of arguments
/// whose kind is `Some` in [`arg_kinds`], then the other values.
pub(crate) struct ArgsOut<'a> {
    pub ints: &'a mut Vec<u64>,
    pub others: &'a mut Vec<Value>,
}

/// [`set_args`] for an event whose arguments were last set for the same
/// probe: its integers replaced in place (their types are already the
/// probe's). False, with `args` left for `set_args` to rewrite, when
/// some argument is not an integer or the counts differ.
#[inline]
pub(crate) fn refill_ints(args: &mut [Value], kinds: &[Option<BaseType>], ints: &[u64]) -> bool {
    if args.len() != kinds.len() || ints.len() < args.len() {
        return false;
    }
    for ((v, kind), &raw) in args.iter_mut().zip(kinds).zip(ints) {
        match (v, kind) {
            (Value::Int { raw: r, .. }, Some(_)) => *r = raw,
            _ => return false,
        }
    }
    true
}

/// Rebuilds argument values from what [`decode_into`] produced, reusing
/// the values already in `args` (no allocation for integers).
pub(crate) fn set_args(
    args: &mut Vec<Value>,
    kinds: &[Option<BaseType>],
    ints: &[u64],
    others: &[Value],
) {
    // The usual case: the same integer arguments as the last event.
    if args.len() == kinds.len()
        && ints.len() >= kinds.len()
        && args
            .iter_mut()
            .zip(kinds)
            .zip(ints)
            .all(|((v, kind), &raw)| match (v, kind) {
                (Value::Int { raw: r, ty: t }, Some(ty)) if t == ty => {
                    *r = raw;
                    true
                }
                _ => false,
            })
    {
        return;
    }
    args.truncate(kinds.len());
    let (mut ints, mut others) = (ints.iter(), others.iter());
    for (i, kind) in kinds.iter().enumerate() {
        let value = match kind {
            Some(ty) => {
                let raw = ints.next().copied().unwrap_or(0);
                if let Some(Value::Int { raw: r, ty: t }) = args.get_mut(i) {
                    *r = raw;
                    *t = *ty;
                    continue;
                }
                Value::Int { raw, ty: *ty }
            }
            None => others.next().cloned().unwrap_or(Value::Str(None)),
        };
        match args.get_mut(i) {
            Some(slot) => *slot = value,
            None => args.push(value),
        }
    }
}

/// Decodes a sample as [`decode_parts`] does, into `head` and `args`
/// (with the kinds of [`arg_kinds`]). On error, `args` may hold part of
/// the values: the caller drops them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_into(
    probe: usize,
    plan: &ProbePlan,
    sample: &SampleParts<'_>,
    reg_of: impl Fn(u64) -> Option<u64>,
    comm: &str,
    field_offsets: &[usize],
    head: &mut EventHead,
    args: ArgsOut<'_>,
) -> Result<(), DecodeError> {
    decode_head(probe, plan.site(), plan.return_trampoline, sample, head)?;
    let raw = sample.raw;
    for (i, a) in plan.args.iter().enumerate() {
        match a.source {
            ArgSource::Register(reg) => match (reg_of)(u64::from(reg.perf_index)) {
                Some(v) => args.ints.push(Value::typed(v, a.ty.base)),
                None => return Err(DecodeError::MissingRegister(reg.name)),
            },
            ArgSource::Comm => args.others.push(Value::Str(Some(comm.to_string()))),
            ArgSource::Field => {
                let at = *field_offsets
                    .get(i)
                    .ok_or(DecodeError::Missing("a field offset for this argument"))?;
                match decode_field(raw, at, a.ty)? {
                    Value::Int { raw, .. } if a.ty.array.is_none() => args.ints.push(raw),
                    other => args.others.push(other),
                }
            }
        }
    }
    Ok(())
}

/// The head of a sample of probe `probe` (a kretprobe at [`ProbeSite::Return`],
/// whose kernel's return trampoline is at `trampoline` when known), into
/// `head`.
#[inline(always)]
pub(crate) fn decode_head(
    probe: usize,
    site: ProbeSite,
    trampoline: Option<u64>,
    sample: &SampleParts<'_>,
    head: &mut EventHead,
) -> Result<(), DecodeError> {
    let raw = sample.raw;
    head.probe =
        u32::try_from(probe).map_err(|_| DecodeError::Missing("a probe index below 2^32"))?;
    head.probe_addr = read_u64(raw, TRACE_ENTRY_SIZE).ok_or(DecodeError::ShortRaw(raw.len()))?;
    head.ip = sample.ip.ok_or(DecodeError::Missing("ip"))?;
    // The raw record of a kretprobe also holds a return address, but seen on
    // Debian 6.1 and 6.12: when a kprobe sits on the same function it holds
    // arch_rethook_trampoline instead of the caller, while the sampled ip is
    // the caller; so the sampled ip is what we report (as `ret_addr`).
    // Older kernels (seen on 5.10) leave the sampled ip at the trampoline
    // (`kretprobe_trampoline`) and the raw record holds the caller: then
    // the raw record's is taken.
    if site == ProbeSite::Return {
        let raw_ret =
            read_u64(raw, TRACE_ENTRY_SIZE + 8).ok_or(DecodeError::ShortRaw(raw.len()))?;
        if trampoline == Some(head.ip) {
            head.ip = raw_ret;
        }
    }
    head.cpu = sample.cpu.ok_or(DecodeError::Missing("cpu"))?;
    head.pid = sample.pid.ok_or(DecodeError::Missing("pid"))?;
    head.tid = sample.tid.ok_or(DecodeError::Missing("tid"))?;
    head.time_ns = sample.time.ok_or(DecodeError::Missing("time"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_print_like_ftrace() {
        let at_fdcwd = 0xffff_ff9c_u64;
        assert_eq!(
            Value::new(at_fdcwd, BaseType::Hex(64)).to_string(),
            "0xffffff9c"
        );
        assert_eq!(
            Value::new(at_fdcwd, BaseType::Signed(32)).to_string(),
            "-100"
        );
        assert_eq!(
            Value::new(at_fdcwd, BaseType::Unsigned(32)).to_string(),
            "4294967196"
        );
        assert_eq!(
            Value::new(u64::MAX - 1, BaseType::Signed(64)).as_i64(),
            Some(-2)
        );
        assert_eq!(Value::new(0x1234, BaseType::Hex(8)).to_string(), "0x34");
        assert_eq!(Value::new(0x80, BaseType::Signed(8)).to_string(), "-128");
        let bf = BaseType::Bitfield {
            width: 4,
            offset: 2,
            container: 8,
        };
        assert_eq!(Value::new(0xff_b6, bf).to_string(), "13"); // 0xb6 = 1011_0110
        assert_eq!(Value::new(u64::MAX, BaseType::Signed(64)).to_string(), "-1");
    }

    /// `char` is one byte printed as '%c'; `symstr`, `%pd` and `%pD` are
    /// `__data_loc` strings, as the 6.12 VM's format files show
    /// (`u8 arg2`, `__data_loc char[] arg1`).
    #[test]
    fn char_and_string_like_types() {
        let mut raw = vec![0u8; 16];
        raw.extend_from_slice(&((12u32 << 16) | 25).to_le_bytes());
        raw.push(b'k');
        raw.extend_from_slice(b"abcd");
        raw.extend_from_slice(b"vfs_read+0\0\0");
        let ch = ArgType::scalar(BaseType::Char);
        assert_eq!(decode_field(&raw, 20, ch).unwrap().to_string(), "'k'");
        let arr = ArgType {
            base: BaseType::Char,
            array: Some(4),
        };
        assert_eq!(
            decode_field(&raw, 21, arr).unwrap().to_string(),
            "{'a','b','c','d'}"
        );
        for t in [BaseType::SymStr, BaseType::Dentry, BaseType::File] {
            assert_eq!(
                decode_field(&raw, 16, ArgType::scalar(t)).unwrap(),
                Value::Str(Some("vfs_read+0".into())),
                "{t}"
            );
        }
        assert_eq!(Value::new(0x4141, BaseType::Char).to_string(), "'A'");
    }

    #[test]
    fn tracefs_fields() {
        // 16-byte head, then: s32 -100, __data_loc "hi" (len 3 at 28),
        // u16[2] {1, 2}, a faulted string; then the string bytes.
        let mut raw = vec![0u8; 16];
        raw.extend_from_slice(&(-100i32).to_le_bytes());
        raw.extend_from_slice(&((3u32 << 16) | 32).to_le_bytes());
        raw.extend_from_slice(&1u16.to_le_bytes());
        raw.extend_from_slice(&2u16.to_le_bytes());
        raw.extend_from_slice(&0u32.to_le_bytes());
        raw.extend_from_slice(b"hi\0");
        let s32 = ArgType::scalar(BaseType::Signed(32));
        assert_eq!(decode_field(&raw, 16, s32).unwrap().to_string(), "-100");
        let st = ArgType::scalar(BaseType::String);
        assert_eq!(
            decode_field(&raw, 20, st).unwrap(),
            Value::Str(Some("hi".into()))
        );
        let arr = ArgType {
            base: BaseType::Unsigned(16),
            array: Some(2),
        };
        assert_eq!(decode_field(&raw, 24, arr).unwrap().to_string(), "{1,2}");
        assert_eq!(decode_field(&raw, 28, st).unwrap().to_string(), "(fault)");
        assert_eq!(
            decode_field(&raw, 33, s32),
            Err(DecodeError::FieldOutOfRange(33, 35))
        );
    }

    #[test]
    fn value_accessors_and_event_json() {
        let v = Value::new(u64::MAX, BaseType::Signed(32));
        assert_eq!(v.as_i64(), Some(-1));
        assert_eq!(Value::new(7, BaseType::Unsigned(8)).as_u64(), Some(7));
        assert!(Value::Unknown.is_unknown());
        let arr = Value::Array(vec![Value::Str(None)]);
        assert_eq!(arr.as_array().map(<[Value]>::len), Some(1));
        let e = Event {
            ret_addr: Some(2),
            args: vec![v, Value::Str(Some("a".into())), Value::Unknown],
            ..Event::default()
        };
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(
            json,
            r#"{"probe":0,"cpu":0,"pid":0,"tid":0,"comm":"","time_ns":0,"ip":0,"probe_addr":0,"ret_addr":2,"args":[-1,"a",null]}"#
        );
    }
}
