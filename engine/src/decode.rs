//! Turning a perf sample into an [`Event`]: which probe, where, and the
//! argument values fetched from the sampled registers.

use std::fmt;
use std::sync::Arc;

use linux_perf_event_reader::SampleRecord;

use crate::plan::ProbePlan;
use crate::spec::BaseType;

/// Size of `struct trace_entry` at the start of a kprobe's raw data.
const TRACE_ENTRY_SIZE: usize = 8;

/// One probe hit, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Index of the probe in the session's plan list.
    pub probe: usize,
    /// CPU the probe fired on.
    pub cpu: u32,
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Command name of the thread (`<...>` when unknown).
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
}

/// A fetched value and how to print it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value {
    /// The value, truncated to the type's width (sign-extended for sN).
    pub raw: u64,
    /// Its type (a type that fits in a register).
    pub ty: BaseType,
}

impl Value {
    /// Applies a type to a 64-bit register: truncation to the width (with
    /// sign extension for sN), or extraction of a bitfield.
    pub fn new(reg: u64, ty: BaseType) -> Value {
        let low_bits = |v: u64, bits: u32| {
            if bits >= 64 {
                v
            } else {
                v & ((1u64 << bits) - 1)
            }
        };
        let raw = match ty {
            BaseType::Unsigned(b) | BaseType::Hex(b) => low_bits(reg, u32::from(b)),
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
        };
        Value { raw, ty }
    }

    /// The value as a signed integer (meaningful for sN).
    pub fn as_i64(self) -> i64 {
        self.raw as i64
    }
}

impl fmt::Display for Value {
    /// As ftrace prints it: decimal for uN/sN and bitfields, `0x`-prefixed
    /// hex for xN (and for `symbol`, which a caller with the kernel's
    /// symbols prints as `sym+off/size` instead).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ty {
            BaseType::Unsigned(_) | BaseType::Bitfield { .. } => write!(f, "{}", self.raw),
            BaseType::Signed(_) => write!(f, "{}", self.raw as i64),
            _ => write!(f, "0x{:x}", self.raw),
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
}

fn read_u64(raw: &[u8], at: usize) -> Option<u64> {
    raw.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_ne_bytes)
}

/// Decodes a sample of probe `probe` (whose plan is `plan`).
pub fn decode_sample(
    probe: usize,
    plan: &ProbePlan,
    sample: &SampleRecord<'_>,
    comm: Arc<str>,
) -> Result<Event, DecodeError> {
    let raw = sample.raw.ok_or(DecodeError::Missing("raw data"))?;
    let raw = raw.as_slice();
    let probe_addr = read_u64(&raw, TRACE_ENTRY_SIZE).ok_or(DecodeError::ShortRaw(raw.len()))?;
    let ip = sample.ip.ok_or(DecodeError::Missing("ip"))?;
    // The raw record of a kretprobe also holds a return address, but seen on
    // Debian 6.1 and 6.12: when a kprobe sits on the same function it holds
    // arch_rethook_trampoline instead of the caller. The sampled ip is the
    // caller in both cases, so that is what we report.
    let ret_addr = if plan.is_return() {
        if raw.len() < TRACE_ENTRY_SIZE + 16 {
            return Err(DecodeError::ShortRaw(raw.len()));
        }
        Some(ip)
    } else {
        None
    };
    let mut args = Vec::with_capacity(plan.args.len());
    for a in &plan.args {
        let v = sample
            .intr_regs
            .as_ref()
            .and_then(|r| r.get(u64::from(a.register.perf_index)))
            .ok_or(DecodeError::MissingRegister(a.register.name))?;
        args.push(Value::new(v, a.ty));
    }
    Ok(Event {
        probe,
        cpu: sample.cpu.ok_or(DecodeError::Missing("cpu"))?,
        pid: sample.pid.ok_or(DecodeError::Missing("pid"))?,
        tid: sample.tid.ok_or(DecodeError::Missing("tid"))?,
        comm,
        time_ns: sample.timestamp.ok_or(DecodeError::Missing("time"))?,
        ip,
        probe_addr,
        ret_addr,
        args,
    })
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
        assert_eq!(Value::new(u64::MAX - 1, BaseType::Signed(64)).as_i64(), -2);
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
}
