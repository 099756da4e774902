//! Parsing speed: 100,000 realistic probe definitions (N with an argument).
//! `cargo xtask bench spec` runs this in release mode.

use std::time::Instant;

use kprobe_perf_arch::Arch;
use kprobe_perf_spec::ProbeSpec;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let templates = [
        "p:myprobe{i} do_sys_open dfd=%ax filename=%dx flags=%cx mode=+4($stack)",
        "r:ret{i} do_sys_openat2 ret=$retval:s64",
        "p:kprobes/tcp{i} tcp_v4_connect+{i} sk=%di addr=+4(%si):x32 len=%dx:u32",
        "r64:vfs{i} vfs_read $retval",
        "p:ext4:ext4_file_open%return $retval:symbol",
        "p:e{i} do_sys_openat2 dfd=$arg1:s32 path=+0($arg2):ustring how=+8(+0($arg3)):x64[2]",
        "SyS_openat(int dfd, string path, x32 flags, x16 mode)",
    ];
    let specs: Vec<String> = (0..n)
        .map(|i| templates[i % templates.len()].replace("{i}", &(i % 997).to_string()))
        .collect();
    let bytes: usize = specs.iter().map(String::len).sum();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        let mut args = 0usize;
        for s in &specs {
            match ProbeSpec::parse(s, Arch::X86_64) {
                Ok(p) => args += p.args.len(),
                Err(e) => panic!("benchmark input refused: {e}"),
            }
        }
        std::hint::black_box(args);
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!(
        "spec parse: {n} specs ({:.1} MB) in {:.1} ms (best of 5): {:.0} specs/s",
        bytes as f64 / 1e6,
        best * 1e3,
        n as f64 / best
    );
}
