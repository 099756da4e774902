//! How long deciding every offset of a 4 KiB x86-64 function takes: one
//! decode into a sorted table, then one binary search per offset.
//!
//! ```text
//! cargo run --release -p kprobe-perf-arch --example boundary_speed
//! ```

use std::time::{Duration, Instant};

use kprobe_perf_arch::boundary::{FunctionLayout, FunctionText, ProbeSite};
use kprobe_perf_arch::Arch;

/// Real instruction encodings found in kernel functions.
const PROLOGUE: &[u8] = &[
    0x0f, 0x1f, 0x44, 0x00, 0x00, // nopl 0x0(%rax,%rax,1)
    0x55, // push %rbp
    0x48, 0x89, 0xe5, // mov %rsp,%rbp
    0x41, 0x57, // push %r15
    0x41, 0x56, // push %r14
    0x53, // push %rbx
    0x48, 0x83, 0xec, 0x18, // sub $0x18,%rsp
];
const BODY: &[&[u8]] = &[
    &[0x48, 0x8b, 0x47, 0x08],                   // mov 0x8(%rdi),%rax
    &[0x48, 0x85, 0xc0],                         // test %rax,%rax
    &[0x74, 0x10],                               // je
    &[0x48, 0x8b, 0x1d, 0x40, 0x67, 0x00, 0x00], // mov 0x6740(%rip),%rbx
    &[0x65, 0x48, 0x8b, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00], // mov %gs:0x28,%rax
    &[0xe8, 0x00, 0x10, 0x00, 0x00],             // call
    &[0x89, 0xc3],                               // mov %eax,%ebx
    &[0x0f, 0x0b],                               // ud2
    &[0x41, 0x89, 0xd4],                         // mov %edx,%r12d
    &[0xc7, 0x45, 0xfc, 0x00, 0x00, 0x00, 0x00], // movl $0x0,-0x4(%rbp)
];

fn function(size: usize) -> Vec<u8> {
    let mut out = PROLOGUE.to_vec();
    for insn in BODY.iter().cycle() {
        if out.len() >= size {
            break;
        }
        out.extend_from_slice(insn);
    }
    out.truncate(size);
    out
}

fn main() {
    let bytes = function(4096);
    let text = FunctionText {
        start: 0xffff_ffff_8120_5c20,
        bytes: &bytes,
    };
    let rounds: u32 = 500;
    let mut decode = Duration::ZERO;
    let mut decide = Duration::ZERO;
    let mut accepted = 0usize;
    for _ in 0..rounds {
        let t0 = Instant::now();
        let layout = FunctionLayout::new(Arch::X86_64, &text);
        let t1 = Instant::now();
        for offset in 0..bytes.len() as u64 {
            accepted += usize::from(layout.verdict(offset, ProbeSite::Entry).is_accepted());
        }
        decode += t1 - t0;
        decide += t1.elapsed();
    }
    let decode = decode / rounds;
    let decide = decide / rounds;
    println!(
        "4 KiB function, {} offsets ({} accepted): decode {:?}, all verdicts {:?}, total {:?}",
        bytes.len(),
        accepted / rounds as usize,
        decode,
        decide,
        decode + decide
    );
}
