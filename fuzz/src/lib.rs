//! What the fuzzers share: seeding (random by default, printed, replayable
//! with `--seed S`, one input alone with `--input I`), a per-input deadline
//! watched by another thread, panics and broken invariants reported with
//! the seed and input index, and a counting global allocator that bounds
//! what one input may allocate.
//!
//! `cargo xtask fuzz spec|record [N] [--seed S] [--input I] [--deadline-ms D]`
//! runs the binaries of this crate in release mode.

pub mod alloc;

use std::hash::{BuildHasher, Hasher};
use std::panic;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// splitmix64: spreads any seed (0, or seeds one bit apart) over the whole
/// state space, so that nearby seeds give unrelated runs.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xorshift64*, seeded through [`splitmix64`] (never a zero state).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator for `seed`: every seed gives its own sequence.
    pub fn new(seed: u64) -> Rng {
        Rng(splitmix64(seed).max(1))
    }

    /// The generator of input `index` of the run of `seed`, so that one
    /// input is replayed alone.
    pub fn for_input(seed: u64, index: u64) -> Rng {
        Rng::new(seed ^ splitmix64(index ^ 0x6b70_7266_757a_7a21))
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        s.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The command line of a fuzzer: `[N] [--seed S] [--input I] [--deadline-ms D]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// How many inputs.
    pub inputs: u64,
    /// The run's seed.
    pub seed: u64,
    /// Whether the seed was given (else it was drawn at random).
    pub seed_given: bool,
    /// Only this input of the run.
    pub only: Option<u64>,
    /// The time one input may take.
    pub deadline: Duration,
}

impl Options {
    /// Parses `args` (without the program name).
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            inputs: 1_000_000,
            seed: 0,
            seed_given: false,
            only: None,
            deadline: Duration::from_secs(2),
        };
        // `--seed=S` as well as `--seed S`.
        let args: Vec<String> = args
            .iter()
            .flat_map(|a| match a.split_once('=') {
                Some((flag, v)) if flag.starts_with("--") => vec![flag.to_string(), v.to_string()],
                _ => vec![a.clone()],
            })
            .collect();
        let mut it = args.iter();
        let num = |flag: &str, v: Option<&String>| -> Result<u64, String> {
            let v = v.ok_or_else(|| format!("{flag} needs a number"))?;
            v.parse()
                .map_err(|_| format!("{flag} {v:?}: not a non-negative integer"))
        };
        while let Some(a) = it.next() {
            match a.as_str() {
                "--seed" => {
                    o.seed = num("--seed", it.next())?;
                    o.seed_given = true;
                }
                "--input" => o.only = Some(num("--input", it.next())?),
                "--deadline-ms" => {
                    o.deadline = Duration::from_millis(num("--deadline-ms", it.next())?.max(1))
                }
                n => o.inputs = num("the input count", Some(&n.to_string()))?,
            }
        }
        if let Some(i) = o.only {
            if i >= o.inputs {
                return Err(format!(
                    "--input {i} is not below the input count {}",
                    o.inputs
                ));
            }
        }
        if !o.seed_given {
            o.seed = random_seed();
        }
        Ok(o)
    }

    /// Parses the process's arguments, or exits with a message.
    pub fn from_env(target: &str) -> Options {
        let args: Vec<String> = std::env::args().skip(1).collect();
        Options::parse(&args).unwrap_or_else(|e| {
            eprintln!(
                "{target} fuzz: {e}; usage: cargo xtask fuzz {target} [N] [--seed S] [--input I] [--deadline-ms D]"
            );
            std::process::exit(2)
        })
    }
}

/// A seed from the process's random hasher keys (no file, no clock).
fn random_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(u64::from(std::process::id()));
    h.finish()
}

/// What one input did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted, and every invariant held.
    Accepted,
    /// Refused with an error, as bad input must be.
    Refused,
}

/// Counts of a finished run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Summary {
    /// Inputs run.
    pub inputs: u64,
    /// Accepted inputs.
    pub accepted: u64,
    /// Refused inputs.
    pub refused: u64,
    /// The longest an input took.
    pub slowest: Duration,
    /// Seconds for the whole run.
    pub secs: f64,
}

/// The input being run (index + 1; 0 between inputs) and when it started
/// (ns since the harness began), for the watchdog.
static CURRENT: AtomicU64 = AtomicU64::new(0);
static STARTED_NS: AtomicU64 = AtomicU64::new(0);

/// Runs `one` on each input of `opts` (or the one `--input` names), each
/// with its own generator ([`Rng::for_input`]). A panic, an `Err` (a
/// broken invariant; the message shows the input) or an input running past
/// the deadline ends the process with status 1 and a line naming the seed,
/// the input index and the command that replays it.
pub fn run(
    target: &str,
    opts: &Options,
    mut one: impl FnMut(u64, &mut Rng) -> Result<Verdict, String>,
) -> Summary {
    println!(
        "{target} fuzz: seed {}{} (replay: cargo xtask fuzz {target} {} --seed {})",
        opts.seed,
        if opts.seed_given {
            ""
        } else {
            ", drawn at random"
        },
        opts.inputs,
        opts.seed
    );
    let replay = |i: u64| {
        format!(
            "cargo xtask fuzz {target} {} --seed {} --input {i}",
            opts.inputs, opts.seed
        )
    };
    let epoch = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (done, deadline, target, seed) = (
            Arc::clone(&done),
            opts.deadline,
            target.to_string(),
            opts.seed,
        );
        let inputs = opts.inputs;
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
                let current = CURRENT.load(Ordering::Acquire);
                let started = Duration::from_nanos(STARTED_NS.load(Ordering::Acquire));
                let late = epoch.elapsed().saturating_sub(started) > deadline;
                // Still the same input (not one that began between the loads).
                if current != 0 && late && CURRENT.load(Ordering::Acquire) == current {
                    let i = current - 1;
                    eprintln!(
                        "FAIL {target} fuzz: input #{i} (seed {seed}) ran longer than the {} ms deadline; replay: cargo xtask fuzz {target} {inputs} --seed {seed} --input {i}",
                        deadline.as_millis()
                    );
                    std::process::exit(1);
                }
            }
        })
    };
    let message: Arc<Mutex<String>> = Arc::default();
    {
        let message = Arc::clone(&message);
        panic::set_hook(Box::new(move |info| {
            if let Ok(mut m) = message.lock() {
                *m = info.to_string();
            }
        }));
    }
    alloc::set_context(opts.seed, target, opts.inputs);
    let mut s = Summary::default();
    let range = match opts.only {
        Some(i) => i..i + 1,
        None => 0..opts.inputs,
    };
    for i in range {
        let mut rng = Rng::for_input(opts.seed, i);
        let t0 = Instant::now();
        STARTED_NS.store(epoch.elapsed().as_nanos() as u64, Ordering::Release);
        CURRENT.store(i + 1, Ordering::Release);
        alloc::set_input(i);
        let outcome = panic::catch_unwind(panic::AssertUnwindSafe(|| one(i, &mut rng)));
        CURRENT.store(0, Ordering::Release);
        s.slowest = s.slowest.max(t0.elapsed());
        match outcome {
            Ok(Ok(Verdict::Accepted)) => s.accepted += 1,
            Ok(Ok(Verdict::Refused)) => s.refused += 1,
            Ok(Err(why)) => {
                eprintln!(
                    "FAIL {target} fuzz: input #{i} (seed {}): {why}\n  replay: {}",
                    opts.seed,
                    replay(i)
                );
                std::process::exit(1);
            }
            Err(_) => {
                let m = message.lock().map(|m| m.clone()).unwrap_or_default();
                eprintln!(
                    "FAIL {target} fuzz: PANIC on input #{i} (seed {}): {m}\n  replay: {}",
                    opts.seed,
                    replay(i)
                );
                std::process::exit(1);
            }
        }
        s.inputs += 1;
    }
    done.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    let _ = panic::take_hook();
    s.secs = epoch.elapsed().as_secs_f64();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_one_bit_apart_give_different_runs() {
        for seed in [0u64, 2, 0x7265_636f, u64::MAX - 1] {
            let mut a = Rng::new(seed);
            let mut b = Rng::new(seed ^ 1);
            let (a, b): (Vec<u64>, Vec<u64>) = (0..4).map(|_| (a.next_u64(), b.next_u64())).unzip();
            assert_ne!(a, b, "seeds {seed} and {}", seed ^ 1);
        }
        let mut x = Rng::for_input(7, 3);
        let mut y = Rng::for_input(7, 3);
        assert_eq!(x.next_u64(), y.next_u64(), "an input replays alone");
        assert_ne!(
            Rng::for_input(7, 3).next_u64(),
            Rng::for_input(7, 2).next_u64()
        );
    }

    #[test]
    fn options_take_a_seed_an_input_and_a_deadline() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let o = Options::parse(&args("500 --seed 42 --input 7 --deadline-ms 300")).unwrap();
        assert_eq!(
            (o.inputs, o.seed, o.seed_given, o.only, o.deadline),
            (500, 42, true, Some(7), Duration::from_millis(300))
        );
        let o = Options::parse(&args("10 --seed=5 --deadline-ms=7")).unwrap();
        assert_eq!((o.seed, o.deadline), (5, Duration::from_millis(7)));
        let o = Options::parse(&args("10")).unwrap();
        assert!(!o.seed_given);
        assert_eq!(o.deadline, Duration::from_secs(2));
        assert_eq!(
            Options::parse(&args("10 --input 10")).unwrap_err(),
            "--input 10 is not below the input count 10"
        );
        assert!(Options::parse(&args("--seed x"))
            .unwrap_err()
            .contains("--seed"));
    }
}
