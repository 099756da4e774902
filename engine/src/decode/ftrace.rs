//! Pages of ftrace's ring buffer, as `per_cpu/cpuN/trace_pipe_raw` hands
//! them out, and the event records in them.
//!
//! The layout is the kernel's (Documentation/trace/ring-buffer-design.rst,
//! include/linux/ring_buffer.h, and the `events/header_page` and
//! `events/header_event` files of tracefs, which describe it for the
//! running kernel):
//!
//! - a page header: a 64-bit timestamp, then `commit` (a `local_t`: the
//!   length of the data that follows, its high bits flags saying events
//!   were lost before this page), then the data;
//! - events, each led by a 32-bit word: `type_len` in its low 5 bits,
//!   `time_delta` in the other 27. `type_len` 1..=28 is a data event of
//!   `type_len * 4` bytes; 0 a data event whose length is the next word;
//!   29 padding (to the end of the page when its delta is 0); 30 a time
//!   extend (the delta's high bits in the next word); 31 an absolute
//!   timestamp, likewise split.
//!
//! Nothing here touches the kernel: [`read_page`] takes bytes, so a
//! truncated or corrupt page is an error to count, never a panic.

use crate::attach::tracefs::Field;
use crate::decode::Value;
use kprobe_perf_spec::BaseType;

/// `type_len` of padding.
const PADDING: u32 = 29;
/// `type_len` of a time extend.
const TIME_EXTEND: u32 = 30;
/// `type_len` of an absolute timestamp.
const TIME_STAMP: u32 = 31;
/// The largest `type_len` of a data event.
const MAX_DATA_TYPE_LEN: u32 = 28;
/// Bits of `time_delta` in an event header (the kernel's `TS_SHIFT`).
const TS_SHIFT: u32 = 27;
/// Flag in `commit`: events were lost before this page
/// (ring_buffer.c `RB_MISSED_EVENTS`).
const MISSED_EVENTS: u64 = 1 << 31;
/// Flag in `commit`: the number lost is stored after the data
/// (ring_buffer.c `RB_MISSED_STORED`).
const MISSED_STORED: u64 = 1 << 30;
/// The bits of `commit` that are a length: below both flags.
const COMMIT_MASK: u64 = (1 << 30) - 1;
/// Bits an absolute timestamp holds; the ones above come from the page's
/// time (ring_buffer.c keeps 59).
const ABS_TS_BITS: u32 = 59;

/// Where the page header's fields are (from `events/header_page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageLayout {
    /// Offset of the 64-bit page timestamp.
    pub(crate) timestamp: usize,
    /// Offset of `commit`.
    pub(crate) commit: usize,
    /// Size of `commit` (4 or 8).
    pub(crate) commit_size: usize,
    /// Offset of the data.
    pub(crate) data: usize,
}

impl PageLayout {
    /// The layout of a 64-bit kernel (timestamp 0, commit 8 of 8 bytes,
    /// data 16), as `header_page` gives it on x86_64 and aarch64.
    pub(crate) const SIXTY_FOUR_BIT: PageLayout = PageLayout {
        timestamp: 0,
        commit: 8,
        commit_size: 8,
        data: 16,
    };

    /// The layout `header_page`'s fields describe, if they name
    /// `timestamp`, `commit` and `data`.
    pub(crate) fn from_fields(fields: &[Field]) -> Option<PageLayout> {
        let find = |n: &str| fields.iter().find(|f| f.name == n);
        let commit = find("commit")?;
        Some(PageLayout {
            timestamp: find("timestamp")?.offset,
            commit: commit.offset,
            commit_size: commit.size,
            data: find("data")?.offset,
        })
    }
}

/// Why a page could not be read to its end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum PageError {
    /// The page is shorter than its header.
    #[error("an ftrace buffer page of {len} bytes is shorter than its header ({need} bytes)")]
    ShortHeader {
        /// Bytes read.
        len: usize,
        /// Bytes the header needs.
        need: usize,
    },
    /// `commit` says more data than the page holds.
    #[error("an ftrace buffer page says it holds {commit} bytes of events, but only {room} bytes follow its header")]
    CommitPastEnd {
        /// The commit length.
        commit: usize,
        /// Bytes after the header.
        room: usize,
    },
    /// An event runs past the committed data.
    #[error("an ftrace buffer event at byte {at} of the page's data runs past its committed {commit} bytes")]
    EventPastCommit {
        /// Offset of the event in the data.
        at: usize,
        /// The commit length.
        commit: usize,
    },
}

/// One data event of a page: its time and its record bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageEvent<'a> {
    /// The buffer's clock at the event, in its units (ns for `mono`).
    pub(crate) time: u64,
    /// The record: `struct trace_entry` and the event's fields.
    pub(crate) record: &'a [u8],
}

/// What one page held.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Page<'a> {
    /// The data events, in order.
    pub(crate) events: Vec<PageEvent<'a>>,
    /// Events the kernel says were lost before this page: `Some(0)` when
    /// it says some were but not how many.
    pub(crate) missed: Option<u64>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

fn uint_at(b: &[u8], at: usize, size: usize) -> Option<u64> {
    match size {
        1 => b.get(at).map(|&v| u64::from(v)),
        2 => {
            let s = b.get(at..at.checked_add(2)?)?;
            Some(u64::from(u16::from_le_bytes(s.try_into().ok()?)))
        }
        4 => u32_at(b, at).map(u64::from),
        8 => u64_at(b, at),
        _ => None,
    }
}

/// The page header: (timestamp, committed length, lost-events note).
fn header(page: &[u8], layout: PageLayout) -> Result<(u64, usize, Option<u64>), PageError> {
    let need = layout.data;
    let short = PageError::ShortHeader {
        len: page.len(),
        need,
    };
    if page.len() < need {
        return Err(short);
    }
    let ts = u64_at(page, layout.timestamp).ok_or(short.clone())?;
    let commit = uint_at(page, layout.commit, layout.commit_size).ok_or(short)?;
    let len = usize::try_from(commit & COMMIT_MASK).unwrap_or(usize::MAX);
    let room = page.len() - layout.data;
    if len > room {
        return Err(PageError::CommitPastEnd { commit: len, room });
    }
    let missed = (commit & MISSED_EVENTS != 0).then(|| {
        if commit & MISSED_STORED != 0 {
            // The count is a long stored right after the data.
            uint_at(page, layout.data + len, layout.commit_size).unwrap_or(0)
        } else {
            0
        }
    });
    Ok((ts, len, missed))
}

/// Reads one page of `trace_pipe_raw`: its data events with their times,
/// up to the committed length (the rest of the page is stale bytes).
pub(crate) fn read_page(page: &[u8], layout: PageLayout) -> Result<Page<'_>, PageError> {
    let (mut time, commit, missed) = header(page, layout)?;
    let data = &page[layout.data..layout.data + commit];
    let past = |at| PageError::EventPastCommit { at, commit };
    let mut out = Page {
        events: Vec::new(),
        missed,
    };
    let mut at = 0;
    while at < data.len() {
        let word = u32_at(data, at).ok_or(past(at))?;
        let type_len = word & 0x1f;
        let delta = u64::from(word >> 5);
        match type_len {
            PADDING if delta == 0 => break,
            PADDING => {
                let len = u32_at(data, at + 4).ok_or(past(at))?;
                at = at
                    .checked_add(4 + len as usize)
                    .filter(|&e| e <= data.len())
                    .ok_or(past(at))?;
            }
            TIME_EXTEND | TIME_STAMP => {
                let high = u64::from(u32_at(data, at + 4).ok_or(past(at))?);
                let value = delta | (high << TS_SHIFT);
                time = if type_len == TIME_EXTEND {
                    time.wrapping_add(value)
                } else {
                    (time & !((1u64 << ABS_TS_BITS) - 1)) | value
                };
                at += 8;
            }
            0 => {
                // The length word counts itself.
                let len = u32_at(data, at + 4).ok_or(past(at))? as usize;
                let start = at + 8;
                let end = (at + 4)
                    .checked_add(len)
                    .filter(|&e| e <= data.len() && len >= 4)
                    .ok_or(past(at))?;
                time = time.wrapping_add(delta);
                out.events.push(PageEvent {
                    time,
                    record: &data[start..end],
                });
                // Events are 4-byte aligned.
                at = end.next_multiple_of(4);
            }
            n => {
                debug_assert!(n <= MAX_DATA_TYPE_LEN);
                let end = at + 4 + n as usize * 4;
                if end > data.len() {
                    return Err(past(at));
                }
                time = time.wrapping_add(delta);
                out.events.push(PageEvent {
                    time,
                    record: &data[at + 4..end],
                });
                at = end;
            }
        }
    }
    Ok(out)
}

/// How to read one event's records: the fields of its `format` file.
#[derive(Debug, Clone)]
pub(crate) struct RecordLayout {
    /// The event's id (`common_type` of its records).
    pub(crate) id: u16,
    /// `common_pid`: (offset, size).
    pub(crate) pid: (usize, usize),
    /// The event's own fields, in order (the common ones and the eprobe's
    /// hidden `__probe_type`-like header left out), each with the type to
    /// show it as.
    pub(crate) args: Vec<(Field, BaseType)>,
}

impl RecordLayout {
    /// The layout of the event `id` whose `format` lists `fields`, with
    /// one argument per entry of `types` (the type the definition gave,
    /// if any): an event's own fields come last in its format, in the
    /// definition's order, so the arguments are its last fields. `None`
    /// when the format lacks `common_pid` or has too few fields.
    pub(crate) fn new(
        id: u16,
        fields: &[Field],
        types: &[Option<BaseType>],
    ) -> Option<RecordLayout> {
        let pid = fields.iter().find(|f| f.name == "common_pid")?;
        let first = fields.len().checked_sub(types.len())?;
        let own = &fields[first..];
        if own.iter().any(|f| f.name.starts_with("common_")) {
            return None;
        }
        let args = own
            .iter()
            .zip(types)
            .map(|(f, ty)| (f.clone(), ty.unwrap_or_else(|| type_of_field(f))))
            .collect();
        Some(RecordLayout {
            id,
            pid: (pid.offset, pid.size),
            args,
        })
    }

    /// The arguments' names, as the kernel named the fields.
    pub(crate) fn arg_names(&self) -> Vec<String> {
        self.args.iter().map(|(f, _)| f.name.clone()).collect()
    }
}

/// The type a field shows as when the definition named none: strings for
/// `__data_loc char[]`, else an integer of the field's size and sign.
fn type_of_field(f: &Field) -> BaseType {
    if f.c_type.starts_with("__data_loc") {
        return BaseType::String;
    }
    let bits = u8::try_from(f.size.saturating_mul(8)).unwrap_or(64);
    if f.signed {
        BaseType::Signed(bits)
    } else {
        BaseType::Unsigned(bits)
    }
}

/// Why an ftrace record (an event probe's, read from a tracefs buffer)
/// could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum FtraceRecordError {
    /// The record is shorter than a field it should hold.
    #[error("an ftrace record of {len} bytes ends before its field {field} (offset {offset}, size {size}): the event's format does not describe this record")]
    Short {
        /// The record's length.
        len: usize,
        /// The field.
        field: String,
        /// Its offset.
        offset: usize,
        /// Its size.
        size: usize,
    },
}

/// One record of an event ftrace wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FtraceEvent {
    /// Index of the probe among the session's definitions.
    pub probe: usize,
    /// The CPU whose buffer held it.
    pub cpu: u32,
    /// The writing task's pid (`common_pid`: a thread id).
    pub tid: i32,
    /// The buffer clock's time, in ns.
    pub time_ns: u64,
    /// The argument values, in the definition's order.
    pub args: Vec<Value>,
}

/// `common_type` of a record, if it has one.
pub(crate) fn record_type(record: &[u8]) -> Option<u16> {
    uint_at(record, 0, 2).and_then(|v| u16::try_from(v).ok())
}

/// Decodes the record of `layout`'s event.
pub(crate) fn read_record(
    record: &[u8],
    layout: &RecordLayout,
) -> Result<(i32, Vec<Value>), FtraceRecordError> {
    let short = |f: &Field| FtraceRecordError::Short {
        len: record.len(),
        field: f.name.clone(),
        offset: f.offset,
        size: f.size,
    };
    let (at, size) = layout.pid;
    let tid = uint_at(record, at, size).ok_or(FtraceRecordError::Short {
        len: record.len(),
        field: "common_pid".into(),
        offset: at,
        size,
    })? as u32 as i32;
    let mut args = Vec::with_capacity(layout.args.len());
    for (f, ty) in &layout.args {
        if f.c_type.starts_with("__data_loc") {
            // u32: offset in the record (low 16 bits), length (high 16).
            let loc = u32_at(record, f.offset).ok_or_else(|| short(f))?;
            let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
            let bytes = record.get(off..off + len).ok_or_else(|| short(f))?;
            args.push(string_value(bytes));
        } else {
            let raw = uint_at(record, f.offset, f.size).ok_or_else(|| short(f))?;
            args.push(Value::new(sign_extend(raw, f), *ty));
        }
    }
    Ok((tid, args))
}

fn sign_extend(raw: u64, f: &Field) -> u64 {
    if !f.signed || f.size >= 8 || f.size == 0 {
        return raw;
    }
    let shift = 64 - f.size as u32 * 8;
    (((raw << shift) as i64) >> shift) as u64
}

/// A fetched string: up to its NUL. The kernel stores `(fault)` as an
/// empty `__data_loc` (length 0) when the read failed.
fn string_value(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Str(None);
    }
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Value::Str(Some(String::from_utf8_lossy(&bytes[..end]).into_owned()))
}

#[cfg(test)]
mod tests;
