//! Times reading a vmlinux's symbols and sections, and prints what a
//! probe of one function would get from it:
//! `cargo run --release -p kprobe-perf-symbols --example vmlinux_load -- VMLINUX [FUNC]`.

use std::path::PathBuf;
use std::time::Instant;

use kprobe_perf_symbols::image::KernelImage;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next().map(PathBuf::from) else {
        eprintln!("usage: vmlinux_load VMLINUX [FUNC]");
        std::process::exit(2);
    };
    let func = args.next().unwrap_or_else(|| "do_sys_openat2".into());
    let t = Instant::now();
    let image = match KernelImage::open_vmlinux(&path) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let load = t.elapsed();
    let id: String = image
        .build_id()
        .unwrap_or_default()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    println!(
        "{}: {} symbols, build ID {id}, loaded in {:.1} ms",
        path.display(),
        image.symbols().len(),
        load.as_secs_f64() * 1e3
    );
    for s in image.lookup(&func) {
        let bytes = image.read(s.address, s.size.min(16) as usize);
        println!(
            "{} at 0x{:x}, {} bytes; first bytes {:02x?}",
            s.name, s.address, s.size, bytes
        );
    }
}
