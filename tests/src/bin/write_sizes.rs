//! A workload for aggregation tests: writes of known sizes by threads of
//! known names.
//!
//! `write_sizes` starts three threads one after the other, each writing to
//! /dev/null: `kpw_small` 3 writes of 1 byte, `kpw_medium` 5 writes of 100
//! bytes, `kpw_large` 7 writes of 5000 bytes. Each write is one write(2),
//! so one call of vfs_write with that count. Nothing else is written.

use std::io::Write;

fn main() -> anyhow::Result<()> {
    for (name, times, size) in [
        ("kpw_small", 3, 1usize),
        ("kpw_medium", 5, 100),
        ("kpw_large", 7, 5000),
    ] {
        let worker = std::thread::Builder::new().name(name.to_string()).spawn(
            move || -> std::io::Result<()> {
                let mut null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
                let buf = vec![0u8; size];
                for _ in 0..times {
                    // One write(2) each: File has no user-space buffer.
                    let n = null.write(&buf)?;
                    assert_eq!(n, size, "a short write to /dev/null");
                }
                Ok(())
            },
        )?;
        worker
            .join()
            .map_err(|_| anyhow::anyhow!("thread {name} panicked"))?
            .map_err(|e| anyhow::anyhow!("thread {name}: {e}"))?;
    }
    Ok(())
}
