//! The fast decode path: a sample of the exact layout sessions use, in
//! one piece, read at fixed offsets rather than through the general
//! record parser.

use super::{account, RecordDecoder, COMM_AT_HANDOVER, RECENT_IDS};
use kprobe_perf_arch::boundary::ProbeSite;

use crate::decode::{decode_head, decode_into, DecodeError, EventHead, SampleParts, Value};
use crate::plan::{ArgSource, ProbePlan};
use kprobe_perf_spec::BaseType;

/// Where a probe's sampled registers lie in its samples.
#[derive(Debug)]
pub(super) struct FastLayout {
    /// How many registers are sampled (`sample_regs_intr`'s bits).
    regs: usize,
    /// Per perf_regs index, its slot among the sampled registers
    /// ([`u8::MAX`]: not sampled).
    slot: [u8; 64],
    /// When every argument is a sampled register: per argument, its slot,
    /// type and name.
    registers_only: Option<Vec<(usize, BaseType, &'static str)>>,
    /// `registers_only` as [`RegisterInt`]s, when every type is one.
    register_ints: Option<Vec<RegisterInt>>,
}

/// How an argument of an integer type other than a bitfield is read from
/// the sampled registers: [`Value::typed`] as two shifts.
#[derive(Debug, Clone, Copy)]
struct RegisterInt {
    /// Its slot among the sampled registers.
    slot: usize,
    /// 64 less its width in bits (0 for 64 bits).
    shift: u32,
    /// Sign-extended (a signed type narrower than 64 bits).
    signed: bool,
}

impl RegisterInt {
    /// The reading of a register of type `ty`; `None` for a bitfield.
    fn new(slot: usize, ty: BaseType) -> Option<RegisterInt> {
        let (bits, signed) = match ty {
            BaseType::Unsigned(b) | BaseType::Hex(b) => (u32::from(b), false),
            BaseType::Char => (8, false),
            BaseType::Signed(b) => (u32::from(b), true),
            BaseType::Bitfield { .. } => return None,
            _ => (64, false),
        };
        if bits == 0 {
            return None;
        }
        Some(RegisterInt {
            slot,
            shift: 64 - bits.min(64),
            signed,
        })
    }

    /// `reg` typed, as [`Value::typed`] gives it.
    #[inline(always)]
    fn typed(self, reg: u64) -> u64 {
        let s = self.shift;
        if self.signed {
            (((reg << s) as i64) >> s) as u64
        } else {
            (reg << s) >> s
        }
    }
}

impl FastLayout {
    pub(super) fn new(mask: u64) -> FastLayout {
        let mut slot = [u8::MAX; 64];
        let mut n = 0u8;
        for (i, s) in slot.iter_mut().enumerate() {
            if mask & (1u64 << i) != 0 {
                *s = n;
                n += 1;
            }
        }
        FastLayout {
            regs: usize::from(n),
            slot,
            registers_only: None,
            register_ints: None,
        }
    }

    /// Notes the plan's arguments, if all are sampled registers.
    pub(super) fn with_plan(mut self, plan: &ProbePlan) -> FastLayout {
        self.registers_only = plan
            .args
            .iter()
            .map(|a| match a.source {
                ArgSource::Register(r) => self
                    .slot
                    .get(r.perf_index as usize)
                    .filter(|&&s| s != u8::MAX)
                    .map(|&s| (usize::from(s), a.ty.base, r.name)),
                _ => None,
            })
            .collect();
        self.register_ints = self.registers_only.as_ref().and_then(|program| {
            program
                .iter()
                .map(|&(slot, ty, _)| RegisterInt::new(slot, ty))
                .collect()
        });
        self
    }
}

impl RecordDecoder {
    /// [`RecordDecoder::probe_of_id`] through a direct-mapped cache of
    /// recent ids (`(id, probe)`; no event has id 0).
    #[inline]
    fn probe_of_fast(&mut self, id: u64) -> Option<usize> {
        let slot = id as usize & (RECENT_IDS - 1);
        if let Some(&(cached, probe)) = self.recent_ids.get(slot) {
            if cached == id && id != 0 {
                return Some(probe);
            }
        }
        let probe = self.probe_of_id(id)?;
        if let Some(r) = self.recent_ids.get_mut(slot) {
            *r = (id, probe);
        }
        Some(probe)
    }

    /// The probe and fields of a sample of the exact layout sessions use
    /// (in one piece), read at their fixed offsets; `None` for another
    /// layout or a short record.
    #[inline(always)]
    fn fast_parts<'b>(&mut self, b: &'b [u8]) -> Option<(usize, SampleParts<'b>)> {
        // The fixed fields, read from one array (no check per field).
        let fixed = b.first_chunk::<44>()?;
        let probe = self.probe_of_fast(u64::from_ne_bytes(*fixed.first_chunk::<8>()?))?;
        self.probes.get(probe)?.fast.as_ref()?;
        let size = u32::from_ne_bytes(fixed.get(40..44)?.try_into().ok()?) as usize;
        let raw = b.get(44..44usize.checked_add(size)?)?;
        Some((probe, head_fields(fixed.first_chunk::<40>()?, raw)))
    }

    /// As [`RecordDecoder::fast_parts`], for any sample that begins with
    /// the session's fixed fields: a callchain, if any, is passed over
    /// (its kernel frames noted in `counted_addresses`, for the symbol
    /// table), and what follows the raw record (registers, a user stack)
    /// is not read.
    #[inline]
    fn head_parts<'b>(&mut self, b: &'b [u8]) -> Option<(usize, SampleParts<'b>)> {
        let fixed = b.first_chunk::<40>()?;
        let probe = self.probe_of_fast(u64::from_ne_bytes(*fixed.first_chunk::<8>()?))?;
        let layout = self.probes.get(probe)?;
        if !layout.head {
            return None;
        }
        let raw_at = match layout.chain_at {
            None => 40,
            Some(40) => {
                let n = usize::try_from(u64_at(b, 40)?).ok()?;
                let ips = b.get(48..48usize.checked_add(n.checked_mul(8)?)?)?;
                if self.counted_chain.as_slice() != ips {
                    self.counted_chain.clear();
                    self.counted_chain.extend_from_slice(ips);
                    let mut kernel = true;
                    for ip in ips.chunks_exact(8).filter_map(|w| w.try_into().ok()) {
                        let ip = u64::from_ne_bytes(ip);
                        if ip >= crate::decode::frames::PERF_CONTEXT_MAX {
                            kernel = ip == crate::decode::frames::PERF_CONTEXT_KERNEL;
                        } else if kernel {
                            self.counted_addresses.insert(ip);
                        }
                    }
                }
                48 + ips.len()
            }
            Some(_) => return None,
        };
        let size = u32::from_ne_bytes(b.get(raw_at..raw_at + 4)?.try_into().ok()?) as usize;
        let raw = b.get(raw_at + 4..(raw_at + 4).checked_add(size)?)?;
        Some((probe, head_fields(fixed, raw)))
    }

    /// The usual sample: of the exact layout sessions use, in one piece,
    /// of a kprobe (not a return) whose arguments are all sampled
    /// registers, which it has. Queued in one pass, every check made before
    /// anything is written; `None` (nothing done) for any other sample,
    /// which [`RecordDecoder::fast_sample`] or the general path then reads
    /// (and reports the errors of).
    #[inline(always)]
    pub(super) fn register_sample(&mut self, b: &[u8]) -> Option<()> {
        let fixed = b.first_chunk::<44>()?;
        let word = |at: usize| fixed.get(at..at + 8).and_then(|w| w.try_into().ok());
        let half = |at: usize| fixed.get(at..at + 4).and_then(|w| w.try_into().ok());
        let probe = self.probe_of_fast(u64::from_ne_bytes(word(0)?))?;
        let probe_layout = self.probes.get(probe)?;
        let layout = probe_layout.fast.as_ref()?;
        let program = layout.register_ints.as_deref()?;
        if probe_layout.shape.site != ProbeSite::Entry {
            return None;
        }
        let size = u32::from_ne_bytes(half(40)?) as usize;
        let raw_end = 44usize.checked_add(size)?;
        let probe_addr = u64_at(b.get(44..raw_end)?, 8)?;
        let regs: &[u8] = match (layout.regs, program.is_empty()) {
            (0, _) => &[],
            (n, empty) => match u64_at(b, raw_end)? {
                // No registers (ABI 0): an error unless none is read.
                0 if empty => &[],
                0 => return None,
                _ => b.get(raw_end + 8..raw_end + 8 + 8 * n)?,
            },
        };
        let head = EventHead {
            time_ns: u64::from_ne_bytes(word(24)?),
            ip: u64::from_ne_bytes(word(8)?),
            probe_addr,
            probe: u32::try_from(probe).ok()?,
            cpu: u32::from_ne_bytes(half(32)?),
            pid: i32::from_ne_bytes(half(16)?),
            tid: i32::from_ne_bytes(half(20)?),
        };
        self.comms.see(head.pid, head.tid);
        let args = self.queue.begin_with(head);
        // Every slot lies among the `layout.regs` registers read above.
        args.ints.reserve(program.len());
        for &op in program {
            args.ints
                .push(op.typed(u64_at(regs, op.slot * 8).unwrap_or(0)));
        }
        if let Some(h) = self.stats.hits.get_mut(probe) {
            *h += 1;
        }
        self.queue.commit();
        Some(())
    }

    /// A sample of the exact layout sessions use, in one piece, parsed
    /// directly; `None` sends it down the general path (which also reports
    /// any error).
    #[inline]
    pub(super) fn fast_sample(&mut self, b: &[u8]) -> Option<Result<(), DecodeError>> {
        let (probe, parts) = self.fast_parts(b)?;
        let probe_layout = self.probes.get(probe)?;
        let layout = probe_layout.fast.as_ref()?;
        let plan = self.plans.get(probe)?;
        let regs: &[u8] = if layout.regs == 0 {
            &[]
        } else {
            let at = 44 + parts.raw.len();
            match u64_at(b, at)? {
                0 => &[],
                _ => b.get(at + 8..at + 8 + 8 * layout.regs)?,
            }
        };
        self.comms
            .see(parts.pid.unwrap_or(-1), parts.tid.unwrap_or(-1));
        let offsets = probe_layout.field_offsets.as_slice();
        let reg = |i: u64| {
            let slot = *layout.slot.get(i as usize).filter(|&&s| s != u8::MAX)?;
            u64_at(regs, usize::from(slot) * 8)
        };
        let (head, args) = self.queue.begin();
        let decoded = match &layout.registers_only {
            // The usual PMU probe: its registers straight from their slots.
            Some(program) => decode_head(probe, plan.site(), plan.return_trampoline, &parts, head)
                .and_then(|()| {
                    for &(slot, ty, name) in program {
                        // None when the sample has no registers (ABI 0).
                        let v = u64_at(regs, slot * 8).ok_or(DecodeError::MissingRegister(name))?;
                        args.ints.push(Value::typed(v, ty));
                    }
                    Ok(())
                }),
            None => decode_into(
                probe,
                plan,
                &parts,
                reg,
                COMM_AT_HANDOVER,
                offsets,
                head,
                args,
            ),
        }
        .map(|()| probe);
        Some(account(&mut self.stats, &mut self.queue, decoded))
    }

    /// [`RecordDecoder::count`]'s sample of the session layout: counted,
    /// its thread named and its addresses noted, nothing decoded past the
    /// head; `None` sends it down [`RecordDecoder::record`]. Its repeats
    /// are only counted ([`CountRepeat`], [`RecordDecoder::count`]).
    #[inline]
    pub(super) fn count_sample(&mut self, b: &[u8]) -> Option<Result<(), DecodeError>> {
        self.count_repeat = None;
        let (probe, parts) = self.head_parts(b)?;
        let plan = self.plans.get(probe)?;
        let mut head = EventHead::default();
        let site = plan.site();
        if let Err(e) = decode_head(probe, site, plan.return_trampoline, &parts, &mut head) {
            self.stats.undecodable += 1;
            return Some(Err(e));
        }
        self.comms.see(head.pid, head.tid);
        // Named from /proc: dated at the round's end, at the thread's
        // earliest sample (RecordDecoder::try_round).
        if self.comms.at(head.tid, head.time_ns).1 {
            self.counted_unnamed
                .entry(head.tid)
                .and_modify(|h| {
                    if head.time_ns < h.time_ns {
                        *h = head;
                    }
                })
                .or_insert(head);
        }
        // What a decoded event's probe_addr and ret_addr would be.
        self.counted_addresses.note_site(
            head.probe_addr,
            (site == ProbeSite::Return).then_some(head.ip),
        );
        if let Some(h) = self.stats.hits.get_mut(probe) {
            *h += 1;
        }
        let chained = self.probes.get(probe).is_none_or(|l| l.chain_at.is_some());
        let trampoline = site == ProbeSite::Return && plan.return_trampoline == parts.ip;
        if !chained && !trampoline {
            self.count_repeat = CountRepeat::after(b, probe, site == ProbeSite::Return);
        }
        Some(Ok(()))
    }
}

/// A sample [`RecordDecoder::count`] counted in full, and what makes a
/// later one a repeat of it, which notes nothing new: the same probe
/// (identifier), process and thread, the same size (the same layout and
/// lengths) and raw record size, the same probe address in the raw record
/// (a uprobe's moves with its binary's base), no callchain, a time not
/// before it (a thread's earliest sample is what a name from /proc is
/// dated by), and for a return probe the same sampled return address (the
/// caller's, which a symbol table needs). Such a repeat is only counted.
/// Forgotten at each round's end, where names from /proc are settled.
#[derive(Debug, Clone, Copy)]
pub(super) struct CountRepeat {
    id: u64,
    pid_tid: u64,
    len: usize,
    /// The raw record's size (the u32 after the fixed fields).
    raw_size: u32,
    /// The probe address the raw record holds, after its common fields.
    probe_addr: u64,
    time: u64,
    /// The sampled ip, compared for a return probe only.
    ret_ip: Option<u64>,
    probe: usize,
}

impl CountRepeat {
    /// The repeat key of `b`, a sample of `probe` just counted in full.
    #[inline]
    fn after(b: &[u8], probe: usize, ret: bool) -> Option<CountRepeat> {
        let fixed = b.first_chunk::<40>()?;
        Some(CountRepeat {
            id: u64_at(fixed, 0)?,
            pid_tid: u64_at(fixed, 16)?,
            len: b.len(),
            raw_size: u32_at(b, RAW_SIZE_AT)?,
            probe_addr: u64_at(b, PROBE_ADDR_AT)?,
            time: u64_at(fixed, 24)?,
            ret_ip: if ret { Some(u64_at(fixed, 8)?) } else { None },
            probe,
        })
    }

    /// The probe of `b` when it repeats the sample this was made from
    /// (whose time becomes the one later repeats are compared with).
    #[inline(always)]
    pub(super) fn repeats(&mut self, b: &[u8]) -> Option<usize> {
        // Every field compared, from one array (no check per field).
        let fixed = b.first_chunk::<{ PROBE_ADDR_AT + 8 }>()?;
        let time = u64_at(fixed, 24)?;
        let same = b.len() == self.len
            && u64_at(fixed, 0)? == self.id
            && u64_at(fixed, 16)? == self.pid_tid
            && time >= self.time
            && u32_at(fixed, RAW_SIZE_AT)? == self.raw_size
            && u64_at(fixed, PROBE_ADDR_AT)? == self.probe_addr
            && self.ret_ip.is_none_or(|ip| u64_at(fixed, 8) == Some(ip));
        if !same {
            return None;
        }
        self.time = time;
        Some(self.probe)
    }
}

/// The fields at the start of a sample of the session's layout
/// (identifier, ip, pid and tid, time, cpu), with its raw record.
#[inline(always)]
fn head_fields<'b>(fixed: &[u8; 40], raw: &'b [u8]) -> SampleParts<'b> {
    let word = |at: usize| fixed.get(at..at + 8).and_then(|w| w.try_into().ok());
    let half = |at: usize| fixed.get(at..at + 4).and_then(|w| w.try_into().ok());
    SampleParts {
        ip: word(8).map(u64::from_ne_bytes),
        pid: half(16).map(i32::from_ne_bytes),
        tid: half(20).map(i32::from_ne_bytes),
        time: word(24).map(u64::from_ne_bytes),
        cpu: half(32).map(u32::from_ne_bytes),
        raw,
    }
}

/// Where a sample of the session layout without a callchain holds its
/// raw record's size (after the 40 bytes of fixed fields), and the probe
/// address the raw record holds (after its 8 bytes of common fields).
const RAW_SIZE_AT: usize = 40;
const PROBE_ADDR_AT: usize = RAW_SIZE_AT + 4 + crate::decode::TRACE_ENTRY_SIZE;

#[inline]
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at.checked_add(4)?)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_ne_bytes)
}

#[inline]
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at.checked_add(8)?)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_ne_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two shifts type a register as [`Value::typed`] does.
    #[test]
    fn register_ints_type_as_values_do() {
        let types = [
            BaseType::Unsigned(8),
            BaseType::Unsigned(16),
            BaseType::Unsigned(32),
            BaseType::Unsigned(64),
            BaseType::Signed(8),
            BaseType::Signed(16),
            BaseType::Signed(32),
            BaseType::Signed(64),
            BaseType::Hex(8),
            BaseType::Hex(32),
            BaseType::Hex(64),
            BaseType::Char,
            BaseType::Symbol,
        ];
        let regs = [
            0u64,
            1,
            0x7f,
            0x80,
            0xff,
            0x8000,
            0xffff_ff9c,
            0x8000_0000,
            u64::MAX,
            0x1234_5678_9abc_def0,
        ];
        for ty in types {
            let op = RegisterInt::new(3, ty).unwrap();
            for reg in regs {
                assert_eq!(op.typed(reg), Value::typed(reg, ty), "{ty:?} {reg:#x}");
            }
        }
        let bitfield = BaseType::Bitfield {
            width: 3,
            offset: 2,
            container: 8,
        };
        assert!(RegisterInt::new(0, bitfield).is_none());
        assert!(RegisterInt::new(0, BaseType::Unsigned(0)).is_none());
    }
}
