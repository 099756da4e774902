//! How long the kernel's BTF takes to load, and a prototype lookup after
//! it (min and median of N runs, default 10):
//!
//! `cargo run --release -p kprobe-perf-symbols --example btf_speed -- 10`

use std::time::Instant;

use kprobe_perf_symbols::prototypes::KernelBtf;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10)
        .max(1);
    let (mut load, mut first, mut later) = (Vec::new(), Vec::new(), Vec::new());
    let mut shown = None;
    for _ in 0..n {
        let t = Instant::now();
        let btf = KernelBtf::load().expect("reading /sys/kernel/btf/vmlinux");
        load.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let p = btf.function("do_sys_openat2").expect("do_sys_openat2");
        first.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let _ = btf.function("vfs_read");
        later.push(t.elapsed().as_secs_f64() * 1e3);
        shown = Some(p);
    }
    for v in [&mut load, &mut first, &mut later] {
        v.sort_by(f64::total_cmp);
    }
    let bytes = std::fs::metadata("/sys/kernel/btf/vmlinux").map_or(0, |m| m.len());
    println!(
        "load /sys/kernel/btf/vmlinux ({bytes} bytes): min {:.1} ms, median {:.1} ms over {n} runs",
        load[0],
        load[n / 2]
    );
    println!(
        "first lookup: min {:.3} ms, median {:.3} ms; a later one: min {:.3} ms",
        first[0],
        first[n / 2],
        later[0]
    );
    if let Some(p) = shown {
        let params: Vec<String> = p
            .params
            .iter()
            .map(|a| format!("{} {}", a.c_type, a.name))
            .collect();
        println!("{} {}({})", p.ret.c_type, p.name, params.join(", "));
    }
}
