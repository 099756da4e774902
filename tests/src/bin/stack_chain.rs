//! A workload whose user stack is known, for callchain tests.
//!
//! `stack_chain N` calls `kpf_stack_outer` N times; it calls
//! `kpf_stack_middle`, which calls `kpf_stack_inner`, which calls
//! `kpf_stack_leaf`. The four are written in assembly, each keeping a
//! frame pointer (`push %rbp; mov %rsp,%rbp`, 4 bytes), so that a
//! frame-pointer walk finds the chain whatever the compiler does with
//! frame pointers in Rust code. A probe at `kpf_stack_leaf+4` (after the
//! prologue) sees the stack leaf+0x4, inner+0x9, middle+0x9, outer+0x9
//! (each call returns 9 bytes into its caller).

#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".text",
    ".globl kpf_stack_outer",
    ".type kpf_stack_outer,@function",
    "kpf_stack_outer:",
    "push rbp",
    "mov rbp, rsp",
    "call kpf_stack_middle",
    "pop rbp",
    "ret",
    ".size kpf_stack_outer, .-kpf_stack_outer",
    ".globl kpf_stack_middle",
    ".type kpf_stack_middle,@function",
    "kpf_stack_middle:",
    "push rbp",
    "mov rbp, rsp",
    "call kpf_stack_inner",
    "pop rbp",
    "ret",
    ".size kpf_stack_middle, .-kpf_stack_middle",
    ".globl kpf_stack_inner",
    ".type kpf_stack_inner,@function",
    "kpf_stack_inner:",
    "push rbp",
    "mov rbp, rsp",
    "call kpf_stack_leaf",
    "pop rbp",
    "ret",
    ".size kpf_stack_inner, .-kpf_stack_inner",
    ".globl kpf_stack_leaf",
    ".type kpf_stack_leaf,@function",
    "kpf_stack_leaf:",
    "push rbp",
    "mov rbp, rsp",
    "nop",
    "pop rbp",
    "ret",
    ".size kpf_stack_leaf, .-kpf_stack_leaf",
);

#[cfg(target_arch = "x86_64")]
extern "C" {
    fn kpf_stack_outer();
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    for _ in 0..n {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the four assembly functions above take no arguments,
        // touch only %rbp (saved and restored) and the stack, and return
        // to their caller.
        unsafe {
            kpf_stack_outer();
        }
    }
    println!("called the chain {n} times");
}
