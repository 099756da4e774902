//! What each fuzz target checks of one input, shared by the libFuzzer
//! targets (`fuzz/libfuzzer`, `cargo xtask fuzz`) and the seeds they start
//! from.

use std::sync::{Arc, OnceLock};

use kprobe_perf_arch::Arch;
use kprobe_perf_engine::cli::records::{Handover, RingRecord, RECORD_COMM, RECORD_SAMPLE};
use kprobe_perf_engine::perfdata::RECORD_LOST;
use kprobe_perf_engine::ProbePlan;
use kprobe_perf_spec::Definition;

use crate::fixtures;

/// Parses `text`; when accepted, its canonical form must parse to the
/// same definition and print again identically. Returns whether it was
/// accepted.
pub fn spec_round_trip(text: &str) -> Result<bool, String> {
    let Ok(first) = Definition::parse(text, Arch::X86_64) else {
        return Ok(false);
    };
    let canonical = first.to_string();
    let second = Definition::parse(&canonical, Arch::X86_64).map_err(|e| {
        format!("{text:?} parses, but its canonical form {canonical:?} does not: {e}")
    })?;
    if second != first {
        return Err(format!(
            "{text:?} prints as {canonical:?}, which parses to another definition:\n  first:  {first:?}\n  second: {second:?}"
        ));
    }
    let again = second.to_string();
    if again != canonical {
        return Err(format!(
            "{text:?} prints as {canonical:?}, which parses and prints as {again:?}"
        ));
    }
    Ok(true)
}

/// The record kinds an input of [`decode_records`] picks from.
const KINDS: [u32; 5] = [
    RECORD_SAMPLE,
    RECORD_COMM,
    RECORD_LOST,
    fixtures::RECORD_THROTTLE,
    fixtures::RECORD_UNTHROTTLE,
];

fn plans() -> &'static [ProbePlan] {
    static PLANS: OnceLock<Vec<ProbePlan>> = OnceLock::new();
    PLANS.get_or_init(fixtures::plans)
}

/// Encodes records as [`decode_records`] reads them: per record, a byte
/// (its kind's index in the kinds; its top bit: hand it over split in
/// two, as at a ring's wrap), its body's length (u16, little-endian),
/// then the body.
pub fn encode_records(records: &[(u32, Vec<u8>)], split: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for (kind, body) in records {
        let k = KINDS.iter().position(|k| k == kind).unwrap_or(0) as u8;
        out.push(k | if split { 0x80 } else { 0 });
        out.extend_from_slice(&(body.len().min(0xffff) as u16).to_le_bytes());
        out.extend_from_slice(&body[..body.len().min(0xffff)]);
    }
    out
}

/// Feeds the records `data` encodes (see [`encode_records`]) to a fresh
/// decoder of the fixture probes, then hands every event over. Errors
/// are the decoder's to report; a panic is the finding. Returns the
/// events handed over.
pub fn decode_records(data: &[u8]) -> usize {
    let plans = plans();
    let mut decoder = fixtures::decoder(plans);
    let comm: Arc<str> = Arc::from("cat");
    let mut rest = data;
    while let [k, l0, l1, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*l0, *l1])).min(tail.len());
        let (body, next) = tail.split_at(len);
        rest = next;
        let kind = KINDS[usize::from(k & 0x7f) % KINDS.len()];
        if kind == RECORD_SAMPLE {
            let _ = decoder.decode_sample_bytes(1, body, &comm);
        }
        let parts = if k & 0x80 != 0 {
            body.split_at(body.len() / 2)
        } else {
            (body, &[][..])
        };
        let _ = decoder.record(RingRecord::new(kind, 1, parts));
    }
    decoder.round(Handover::All, |_, _| {})
}

/// Reads `data` as a perf.data file and replays it; its errors are the
/// reader's to report. Returns the events replayed.
pub fn replay_file(data: &[u8]) -> Option<u64> {
    fixtures::replay(data).ok()
}

/// The fixture records, and the perf.data file of them: the seeds of the
/// record and perf.data targets.
pub fn record_seeds() -> (Vec<(u32, Vec<u8>)>, Vec<u8>) {
    let plans = plans();
    let records = fixtures::records(plans);
    let file = fixtures::file(plans, &records);
    (records, file)
}

/// The definitions of the parser's seed corpus written by hand (the
/// grammar oracle's corpus is added by `cargo xtask fuzz seed`).
pub const SPEC_SEEDS: &[&str] = &[
    "p:myprobe do_sys_open dfd=%ax filename=%dx flags=%cx mode=+4($stack)",
    "r:myretprobe do_sys_open $retval",
    "r100:grp/ev do_sys_openat2 ret=$retval:s64",
    "-:myprobe",
    "-:grp/ev",
    "p:e f +8(+0(-16(%di))):x16[4] b=@jiffies-8:b3@2/8 $comm \\\"hi\" \\-5 +u0(%si):ustring",
    "p:/usr/bin/bash:readline+4 %di @+0x10",
    "p:/lib/x86_64-linux-gnu/libc.so.6:0x9a0e0 a=$arg1 s=+0(%si):ustring",
    "p:u/ret /bin/true:main%return $retval:s32",
    "SyS_openat(int dfd, string path, x32 flags, x16 mode)",
    "p ext4:ext4_file_open%return $retval:symbol",
    "p 0xffffffff81000000 $stack3 $arg2:u8",
    "p:9pnet:p9_client_walk@0xffffffffc0123450 n=$arg3:u16 c=$comm",
    "p:e 9pnet:p9_client_walk+4 n=%dx:u16",
    "p:do_sys_openat2 path=+0(%si):string flags=+8(%dx):x64 mode=+16(%dx):u64",
    "r8:myret do_sys_openat2 r=$retval:x32 s=+0($retval):string",
    "f:fp/ev vfs_read%return $retval",
    "t:tp/ev sched_switch prev=$arg2",
    "e:ep/ev syscalls.sys_enter_openat f=$filename:ustring",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_pass_their_targets() {
        for s in SPEC_SEEDS {
            spec_round_trip(s).unwrap();
        }
        let (records, file) = record_seeds();
        let samples = records.iter().filter(|(k, _)| *k == RECORD_SAMPLE).count();
        assert_eq!(decode_records(&encode_records(&records, false)), samples);
        assert_eq!(decode_records(&encode_records(&records, true)), samples);
        assert_eq!(replay_file(&file), Some(samples as u64));
    }
}
