//! Robustness of the probe parser: feeds N mutated definitions (default one
//! million) and reports how many parsed, how many were refused, and any
//! panic. `cargo xtask fuzz spec [N]` runs this in release mode.

use std::panic;
use std::time::Instant;

use kprobe_perf_arch::Arch;
use kprobe_perf_engine::spec::Definition;

const CORPUS: &[&str] = &[
    "p:myprobe do_sys_open dfd=%ax filename=%dx flags=%cx mode=+4($stack)",
    "r:myretprobe do_sys_open $retval",
    "r100:grp/ev do_sys_openat2 ret=$retval:s64",
    "-:myprobe",
    "p:e f +8(+0(-16(%di))):x16[4] b=@jiffies-8:b3@2/8 $comm \\\"hi\" \\-5 +u0(%si):ustring",
    "p:/usr/bin/bash:readline+4 %di @+0x10",
    "SyS_openat(int dfd, string path, x32 flags, x16 mode)",
    "p ext4:ext4_file_open%return $retval:symbol",
    "p 0xffffffff81000000 $stack3 $arg2:u8",
];

#[path = "common/rng.rs"]
mod rng;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        rng::xorshift(&mut self.0)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const ALPHABET: &[u8] = b"pr-:/%$@+()[]=\\\" ,.*0123456789abcdefxsuibtgmlvnNULL_\t";

fn mutate(rng: &mut Rng, base: &str) -> Vec<u8> {
    let mut b = base.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len() + 1);
        match rng.below(5) {
            0 if !b.is_empty() => {
                let end = (at + 1 + rng.below(6)).min(b.len());
                b.drain(at.min(end)..end);
            }
            1 => b.insert(at, ALPHABET[rng.below(ALPHABET.len())]),
            2 if at < b.len() => b[at] = ALPHABET[rng.below(ALPHABET.len())],
            3 => b.insert(at, rng.next() as u8),
            _ => {
                let other = CORPUS[rng.below(CORPUS.len())].as_bytes();
                let from = rng.below(other.len());
                let to = (from + rng.below(12)).min(other.len());
                b.splice(at..at, other[from..to].iter().copied());
            }
        }
    }
    b
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let seed: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6b70_7266);
    let mut rng = Rng(seed | 1);
    let (mut parsed, mut refused) = (0u64, 0u64);
    let start = Instant::now();
    for i in 0..n {
        let base = CORPUS[rng.below(CORPUS.len())];
        let bytes = mutate(&mut rng, base);
        let text = String::from_utf8_lossy(&bytes);
        match panic::catch_unwind(|| Definition::parse(&text, Arch::X86_64)) {
            Ok(Ok(_)) => parsed += 1,
            Ok(Err(_)) => refused += 1,
            Err(_) => {
                eprintln!("PANIC on input #{i} (seed {seed}): {text:?}");
                std::process::exit(1);
            }
        }
    }
    println!(
        "spec fuzz: {n} inputs (seed {seed}) in {:.2} s: {parsed} parsed, {refused} refused, 0 panics",
        start.elapsed().as_secs_f64()
    );
}
