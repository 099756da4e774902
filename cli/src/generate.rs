//! `kprobe-perf __generate man|completions DIR`: man pages and shell
//! completions written from the clap definitions, for packaging
//! (`cargo xtask dist`, `cargo xtask deb`). Not a clap subcommand, so it
//! is in no `--help` and no completion.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

/// The first argument that selects this hidden command.
const VERB: &str = "__generate";

/// When the command line is `__generate ...`, does it and returns the exit
/// code; otherwise returns `None` and the normal parser takes over.
pub(crate) fn intercept<C: CommandFactory>() -> Option<ExitCode> {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_none_or(|a| a != VERB) {
        return None;
    }
    let cmd = C::command().version(env!("KPROBE_PERF_VERSION"));
    Some(match run(cmd, &args[1..]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say!("kprobe-perf: {e:#}");
            ExitCode::FAILURE
        }
    })
}

fn run(cmd: clap::Command, args: &[OsString]) -> Result<()> {
    let usage = "usage: kprobe-perf __generate man|completions DIR";
    let [what, dir] = args else { bail!("{usage}") };
    let dir = Path::new(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    match what.to_str() {
        Some("man") => man_pages(cmd, dir),
        Some("completions") => completions(cmd, dir),
        _ => bail!("{usage}"),
    }
}

/// One page per command: `kprobe-perf.1`, `kprobe-perf-record.1`, ...
fn man_pages(cmd: clap::Command, dir: &Path) -> Result<()> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let source = format!("kprobe-perf {}", env!("CARGO_PKG_VERSION"));
    let mut pending = vec![cmd];
    while let Some(c) = pending.pop() {
        pending.extend(c.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let page = clap_mangen::Man::new(c)
            .source(source.clone())
            .manual("kprobe-perf manual");
        let path = page
            .generate_to(dir)
            .with_context(|| format!("writing a man page in {}", dir.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

/// `kprobe-perf.bash`, `_kprobe-perf` (zsh) and `kprobe-perf.fish`.
fn completions(mut cmd: clap::Command, dir: &Path) -> Result<()> {
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(shell, &mut cmd, "kprobe-perf", dir)
            .with_context(|| format!("writing {shell} completions in {}", dir.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}
