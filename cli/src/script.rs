//! `kprobe-perf script -i FILE`: a perf.data file written by `record -o`,
//! printed as the recording printed it.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kprobe_perf_engine::perfdata::{Reader, Replay};

use crate::output::{NOTE_JSON_SUMMARY, NOTE_SUMMARY};
use crate::{json, text};

/// Arguments of `script`.
#[derive(clap::Args)]
pub struct ScriptArgs {
    /// The perf.data file (from `kprobe-perf record -o FILE`).
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "perf.data"
    )]
    input: PathBuf,
    /// Print JSON Lines, as `record --json` does, instead of text.
    #[arg(long)]
    json: bool,
}

/// Prints every event of the file, then the recording's summary.
pub fn run(args: &ScriptArgs) -> Result<ExitCode> {
    let path = &args.input;
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let reader = Reader::new(file).with_context(|| format!("reading {}", path.display()))?;
    let mut replay = Replay::new(reader).with_context(|| format!("reading {}", path.display()))?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut result = Ok(());
    let json = args.json;
    // Lines are gathered in one buffer and written in large pieces.
    let mut buf = Vec::with_capacity(1 << 20);
    let mut places = text::Places::default();
    let replayed = replay.run(|e, plans, symbols| {
        let Some(plan) = plans.get(e.probe) else {
            return;
        };
        if result.is_err() {
            return;
        }
        if json {
            buf.extend_from_slice(json::event(e, plan, symbols).as_bytes());
        } else {
            text::write_line(&mut buf, e, plan, symbols, &mut places);
        }
        buf.push(b'\n');
        if buf.len() >= (1 << 20) - 4096 {
            result = out.write_all(&buf);
            buf.clear();
        }
    });
    let finished = result.and_then(|()| {
        out.write_all(&buf)?;
        if json {
            if let Some(s) = replay.metadata().note(NOTE_JSON_SUMMARY) {
                writeln!(out, "{s}")?;
            }
        }
        out.flush()
    });
    match finished {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        other => other.context("writing events")?,
    }
    replayed.with_context(|| format!("reading {}", path.display()))?;
    if let Some(s) = replay.metadata().note(NOTE_SUMMARY) {
        eprintln!("{s}");
    }
    Ok(ExitCode::SUCCESS)
}
