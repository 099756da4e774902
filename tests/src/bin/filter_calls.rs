//! A workload for filter tests and the filter benchmark: calls one
//! function with known arguments.
//!
//! `filter_calls N` calls `kpf_filter_target(i, i % 7)` for i in 0..N,
//! in order, from its main thread, then exits. The function is not
//! inlined nor mangled, so a uprobe finds it by name:
//! `p:PATH:kpf_filter_target i=%di:u64 r=%si:u64`.

/// The probed function.
#[no_mangle]
#[inline(never)]
pub extern "C" fn kpf_filter_target(i: u64, r: u64) -> u64 {
    std::hint::black_box(i.wrapping_add(r))
}

fn main() -> anyhow::Result<()> {
    let Some(n) = std::env::args().nth(1) else {
        anyhow::bail!("usage: filter_calls N (calls kpf_filter_target(i, i % 7) for i in 0..N)");
    };
    let n: u64 = n
        .parse()
        .map_err(|_| anyhow::anyhow!("N must be a whole number, not {n:?}"))?;
    let mut sum = 0u64;
    for i in 0..n {
        sum = sum.wrapping_add(kpf_filter_target(std::hint::black_box(i), i % 7));
    }
    std::hint::black_box(sum);
    Ok(())
}
