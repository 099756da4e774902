//! Unwinds the user stacks of a `perf record --call-graph dwarf` file
//! with this crate and compares each sample's frames with what
//! `perf script` prints for the same file:
//!
//! ```text
//! perf probe -x /lib/x86_64-linux-gnu/libc.so.6 opendir
//! perf record -e probe_libc:opendir --call-graph dwarf -o ls.data -- ls /
//! cargo run --release -p kprobe-perf-unwind --example perf_diff -- ls.data
//! ```
//!
//! A frame is compared by its address in its file (perf's printed
//! address) and, where both name it, its function. Prints every sample
//! that differs and the counts: samples, samples whose frames are equal,
//! and frames in all.

use std::collections::HashMap;
use std::io::BufReader;
use std::process::Command;

use kprobe_perf_unwind::{Mapping, UnwindArch, Unwinder, UserRegs};
use linux_perf_data::linux_perf_event_reader::EventRecord;
use linux_perf_data::{PerfFileReader, PerfFileRecord};

/// perf's x86_64 register numbers (arch/x86/include/uapi/asm/perf_regs.h).
const X86_BP: u64 = 6;
const X86_SP: u64 = 7;
const X86_IP: u64 = 8;
const PROT_EXEC: u32 = 4;

/// A sample: its thread and its time in microseconds (as perf prints it).
type Key = (u32, u64);

/// Each sample's frames, innermost first.
type Samples = Vec<(Key, Vec<Frame>)>;

/// One frame: its address in its file, and its function when named.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Frame {
    address: u64,
    function: Option<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: perf_diff PERF.DATA")?;
    let started = std::time::Instant::now();
    let ours: HashMap<Key, Vec<Frame>> = unwind_file(&path)?.into_iter().collect();
    let took = started.elapsed();
    let theirs = perf_script(&path)?;
    let (mut equal, mut frames, mut missing, mut perf_short) = (0usize, 0usize, 0usize, 0usize);
    for (key, b) in &theirs {
        frames += b.len();
        let Some(a) = ours.get(key) else {
            missing += 1;
            continue;
        };
        if same(a, b) {
            equal += 1;
        } else if perf_stopped_early(a, b) {
            perf_short += 1;
        } else {
            println!(
                "sample tid {} at {} us differs:\n  ours: {a:x?}\n  perf: {b:x?}",
                key.0, key.1
            );
        }
    }
    println!(
        "{} samples unwound in {:.3} s; perf script: {} samples ({frames} frames), {equal} with equal frames, {perf_short} where perf's frames stop early and ours go on from the same frames, {missing} not found",
        ours.len(),
        took.as_secs_f64(),
        theirs.len()
    );
    Ok(())
}

/// Equal addresses; names compared where both have one.
fn same(a: &[Frame], b: &[Frame]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.address == y.address
                && match (&x.function, &y.function) {
                    (Some(f), Some(g)) => f == g,
                    _ => true,
                }
        })
}

/// perf's frames are ours cut short (perf's unwinder gave up, or printed
/// an address of all ones where it lost the stack).
fn perf_stopped_early(a: &[Frame], b: &[Frame]) -> bool {
    let b: Vec<Frame> = b
        .iter()
        .take_while(|f| f.address != u64::MAX)
        .cloned()
        .collect();
    b.len() < a.len() && same(&a[..b.len()], &b)
}

fn unwind_file(path: &str) -> Result<Samples, Box<dyn std::error::Error>> {
    let file = std::fs::File::open(path)?;
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(BufReader::new(file))?;
    let mut unwinder = Unwinder::new(UnwindArch::X86_64);
    let mut out = Vec::new();
    let mut addrs = Vec::new();
    let mut pending: HashMap<u32, Vec<Mapping>> = HashMap::new();
    while let Some(record) = record_iter.next_record(&mut perf_file)? {
        let PerfFileRecord::EventRecord { record, .. } = record else {
            continue;
        };
        match record.parse()? {
            EventRecord::Mmap2(m) if m.protection & PROT_EXEC != 0 => {
                let path = String::from_utf8_lossy(&m.path.as_slice()).into_owned();
                let mapping = Mapping {
                    start: m.address,
                    end: m.address + m.length,
                    pgoff: m.page_offset,
                    path: path.into(),
                };
                unwinder.add_mapping(m.pid as u32, &mapping);
                pending.entry(m.pid as u32).or_default().push(mapping);
            }
            EventRecord::Fork(f) if f.pid != f.ppid => unwinder.fork(f.ppid as u32, f.pid as u32),
            EventRecord::Comm(c) if c.is_execve => unwinder.forget(c.pid as u32),
            EventRecord::Sample(s) => {
                let (Some(regs), Some((stack, _size)), Some(pid)) =
                    (s.user_regs, s.user_stack, s.pid)
                else {
                    continue;
                };
                let pid = pid as u32;
                let key = (s.tid.unwrap_or(0) as u32, s.timestamp.unwrap_or(0) / 1000);
                let regs = UserRegs {
                    pc: regs.get(X86_IP).unwrap_or(0),
                    sp: regs.get(X86_SP).unwrap_or(0),
                    fp: regs.get(X86_BP).unwrap_or(0),
                    lr: 0,
                };
                let stack = stack.as_slice();
                unwinder.unwind(pid, &regs, &stack, &mut addrs);
                let mut frames = Vec::new();
                for (i, &a) in addrs.iter().enumerate() {
                    // A caller's frame is named, and printed by perf, at
                    // the call: one byte before its return address.
                    let ret = i > 0;
                    let Some(at) = unwinder.locate(pid, a) else {
                        frames.push(Frame {
                            address: a,
                            function: None,
                        });
                        continue;
                    };
                    let address = at.file_offset - u64::from(ret);
                    let source = unwinder.source(pid, a, ret);
                    if source.is_empty() {
                        let function = unwinder.symbol(pid, a - u64::from(ret)).map(|(s, _)| s);
                        frames.push(Frame { address, function });
                    }
                    for f in source {
                        frames.push(Frame {
                            address,
                            function: f.function,
                        });
                    }
                }
                out.push((key, frames));
            }
            _ => {}
        }
    }
    Ok(out)
}

/// perf script's user frames of each sample: `\t ADDR SYM+OFF (DSO)`.
fn perf_script(path: &str) -> Result<Samples, Box<dyn std::error::Error>> {
    let out = Command::new("perf")
        .args(["script", "-F", "tid,time,ip,sym,symoff,dso", "-i", path])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut samples: Samples = Vec::new();
    for line in text.lines() {
        if !line.starts_with('\t') {
            // "TID TIME:" heads a sample.
            let mut w = line.split_whitespace();
            let tid = w.next().and_then(|t| t.parse().ok());
            let time = w.next().and_then(|t| t.strip_suffix(':')).and_then(|t| {
                let (s, us) = t.split_once('.')?;
                Some(s.parse::<u64>().ok()? * 1_000_000 + us.parse::<u64>().ok()?)
            });
            if let (Some(tid), Some(time)) = (tid, time) {
                samples.push(((tid, time), Vec::new()));
            }
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(addr), Some(sym)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(address) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        let function = (sym != "[unknown]")
            .then(|| sym.rsplit_once("+0x").map_or(sym, |(f, _)| f).to_string());
        if let Some((_, s)) = samples.last_mut() {
            s.push(Frame { address, function });
        }
    }
    // perf ends a stack it could not finish with an address of all
    // ones; the frames before it are what it unwound.
    for (_, frames) in &mut samples {
        while frames.last().is_some_and(|f| f.address == u64::MAX) {
            frames.pop();
        }
    }
    Ok(samples)
}
