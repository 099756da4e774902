//! What the harness needs from the host: Debian packages, installed when
//! missing and running as root, or named precisely otherwise.

use anyhow::{bail, Context, Result};
use std::process::Command;

/// Debian packages the VM harness uses, with a file that shows each is there.
const NEEDED: &[(&str, &str)] = &[
    ("qemu-system-x86", "/usr/bin/qemu-system-x86_64"),
    ("busybox-static", "/usr/share/doc/busybox-static"),
    ("kmod", "/usr/sbin/depmod"),
    ("xz-utils", "/usr/bin/xz"),
];

/// Installs whatever of [`NEEDED`] (plus `extra`) is missing.
pub fn ensure_packages(extra: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&str> = NEEDED
        .iter()
        .chain(extra)
        .filter(|(_, probe)| !std::path::Path::new(probe).exists())
        .map(|(pkg, _)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let root = effective_uid() == 0;
    if !root {
        bail!(
            "missing host packages; install them with: sudo apt-get install -y {}",
            missing.join(" ")
        );
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    let mut update = Command::new("apt-get");
    update.args(["update", "-qq"]);
    run_status(&mut update, "apt-get update")?;
    let mut install = Command::new("apt-get");
    install
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing);
    run_status(&mut install, "apt-get install")
}

fn effective_uid() -> u32 {
    // /proc/self/status has "Uid: real effective saved fs".
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|u| u.parse().ok())
        })
        .unwrap_or(u32::MAX)
}

/// Runs a command to completion, failing with its name if it fails.
pub fn run_status(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}
