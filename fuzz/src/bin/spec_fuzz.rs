//! The probe parser on mutated definitions (default one million): no
//! panic, no input slower than the deadline, allocations bounded by the
//! input's length, and for every accepted definition, its canonical form
//! (what `Display` prints) parses to the same definition and prints again
//! identically. `cargo xtask fuzz spec [N] [--seed S]` runs it in release
//! mode.

use kprobe_perf_arch::Arch;
use kprobe_perf_fuzz::{alloc, run, Options, Rng, Verdict};
use kprobe_perf_spec::Definition;

const CORPUS: &[&str] = &[
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
];

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
            1 => b.insert(at, *rng.pick(ALPHABET)),
            2 if at < b.len() => b[at] = *rng.pick(ALPHABET),
            3 => b.insert(at, rng.next_u64() as u8),
            _ => {
                let other = rng.pick(CORPUS).as_bytes();
                let from = rng.below(other.len());
                let to = (from + rng.below(12)).min(other.len());
                b.splice(at..at, other[from..to].iter().copied());
            }
        }
    }
    b
}

/// Most bytes one definition may have allocated at once: a few KiB of
/// AST per input byte is far more than parsing needs, and far less than a
/// count taken on trust.
fn ceiling(len: usize) -> usize {
    64 * 1024 + 256 * len
}

/// Parses `text`; when accepted, checks the canonical form's round trip.
fn check(text: &str) -> Result<Verdict, String> {
    let Ok(first) = Definition::parse(text, Arch::X86_64) else {
        return Ok(Verdict::Refused);
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
    Ok(Verdict::Accepted)
}

fn main() {
    let opts = Options::from_env("spec");
    // The corpus itself parses and round-trips.
    for base in CORPUS {
        match check(base) {
            Ok(Verdict::Accepted) => {}
            Ok(Verdict::Refused) => {
                eprintln!("spec fuzz: the corpus entry {base:?} does not parse");
                std::process::exit(1);
            }
            Err(e) => {
                eprintln!("spec fuzz: the corpus does not round-trip: {e}");
                std::process::exit(1);
            }
        }
    }
    let mut peak = 0usize;
    let s = run("spec", &opts, |_, rng| {
        let base = *rng.pick(CORPUS);
        let bytes = mutate(rng, base);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let limit = ceiling(text.len());
        let start = alloc::begin(limit);
        let verdict = check(&text);
        let used = alloc::end(start);
        peak = peak.max(used);
        if used > limit {
            return Err(format!(
                "{text:?}: {used} bytes allocated at once, past the bound of {limit} for {} bytes of input",
                text.len()
            ));
        }
        verdict
    });
    println!(
        "spec fuzz: {} inputs (seed {}) in {:.2} s: {} parsed and round-tripped, {} refused, 0 panics; slowest input {:.2} ms, most allocated at once {} bytes",
        s.inputs,
        opts.seed,
        s.secs,
        s.accepted,
        s.refused,
        s.slowest.as_secs_f64() * 1e3,
        peak
    );
}
