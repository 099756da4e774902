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
        let path = dir.join(man_page(c, &source, dir)?);
        println!("{}", path.display());
    }
    Ok(())
}

/// The page of `cmd` in `dir`, as clap_mangen writes one, but with the
/// `after_help` text as sections of their own (`EXAMPLES`, `PROBE
/// DEFINITIONS`) where clap_mangen would put it under `EXTRA`. Returns
/// the file's name.
fn man_page(cmd: clap::Command, source: &str, dir: &Path) -> Result<String> {
    let extra = cmd.get_after_help().map(|t| t.to_string());
    let version = cmd.get_version().is_some();
    let page = clap_mangen::Man::new(cmd.clone().after_help(None::<&str>))
        .source(source)
        .manual("kprobe-perf manual");
    let mut roff = Vec::new();
    page.render_title(&mut roff)?;
    page.render_name_section(&mut roff)?;
    page.render_synopsis_section(&mut roff)?;
    page.render_description_section(&mut roff)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        page.render_options_section(&mut roff)?;
    }
    if cmd.has_subcommands() {
        page.render_subcommands_section(&mut roff)?;
    }
    if let Some(text) = extra {
        roff.extend_from_slice(roff_sections(&text).as_bytes());
    }
    if version {
        page.render_version_section(&mut roff)?;
    }
    let name = page.get_filename();
    let path = dir.join(&name);
    std::fs::write(&path, roff).with_context(|| format!("writing {}", path.display()))?;
    Ok(name)
}

/// `after_help` text as man sections: each unindented line ending with
/// `:` (`Examples:`) a section heading, the indented lines under it kept
/// as they are (no filling).
fn roff_sections(text: &str) -> String {
    let mut out = String::new();
    let mut open = false;
    for line in text.lines() {
        if let Some(heading) = line.strip_suffix(':').filter(|_| !line.starts_with(' ')) {
            if open {
                out.push_str(".fi\n");
            }
            out.push_str(&format!(".SH {}\n.nf\n", heading.to_uppercase()));
            open = true;
        } else if !line.is_empty() {
            out.push_str(&roff_line(line.trim_start()));
            out.push('\n');
        }
    }
    if open {
        out.push_str(".fi\n");
    }
    out
}

/// One line of text as roff prints it literally: backslashes escaped,
/// hyphens as hyphen-minus (so that an example pastes into a shell),
/// a leading `.` or `'` not taken for a request.
fn roff_line(line: &str) -> String {
    let mut out = String::from("\\&");
    for c in line.chars() {
        match c {
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            c => out.push(c),
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_help_becomes_man_sections() {
        let text = "Probe definitions:\n  'p:a\\b'   x\n\nExamples:\n  kprobe-perf record -e x\n";
        assert_eq!(
            roff_sections(text),
            ".SH PROBE DEFINITIONS\n.nf\n\\&'p:a\\eb'   x\n.fi\n.SH EXAMPLES\n.nf\n\\&kprobe\\-perf record \\-e x\n.fi\n"
        );
    }
}
