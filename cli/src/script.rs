//! `kprobe-perf script -i FILE`: a perf.data file written by `record -o`,
//! printed as the recording printed it.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kprobe_perf_engine::perfdata::{Reader, Replay};

use crate::output::{NOTE_JSON_SUMMARY, NOTE_SUMMARY};
use crate::{json, text};

/// Arguments of `script`.
#[derive(clap::Args)]
pub(crate) struct ScriptArgs {
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
    #[command(flatten)]
    stacks: crate::stacks::StackOutputArgs,
}

/// Prints every event of the file, then the recording's summary.
pub(crate) fn run(args: &ScriptArgs) -> Result<ExitCode> {
    let path = &args.input;
    // A regular file only: a FIFO would block, /dev/zero never end.
    let (file, _) = kprobe_perf_engine::kernel::open_regular(path)
        .with_context(|| format!("cannot read {} (give a perf.data file)", path.display()))?;
    args.stacks.check()?;
    let reader = Reader::new(file).with_context(|| format!("reading {}", path.display()))?;
    let mut replay = Replay::new(reader).with_context(|| format!("reading {}", path.display()))?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut result = Ok(());
    let json = args.json;
    // Lines are gathered in one buffer and written in large pieces; the
    // usual line is formatted straight into it.
    const BUF: usize = 1 << 20;
    let mut buf = vec![0u8; BUF];
    let mut used = 0;
    let mut line = Vec::with_capacity(256);
    let mut cache = text::LineCache::default();
    let folded = args.stacks.stacks_folded.is_some()
        || args.stacks.flamegraph.is_some()
        || args.stacks.profile.is_some();
    let mut stacks = crate::stacks::Stacks::new(false, &args.stacks);
    // A file recorded with -g prints each event's frames (none for an
    // event whose chain is empty), as the recording did.
    let with_chains = replay.decoder().has_callchains();
    if folded && !with_chains {
        anyhow::bail!(
            "{} has no callchains to count: record it with -g (or --call-graph)",
            path.display()
        );
    }
    let mut plans_seen = Vec::new();
    let mut json_writer = json::EventWriter::default();
    let replayed = replay.run(|e, plans, symbols, maps| {
        let Some(plan) = plans.get(e.probe) else {
            return;
        };
        if result.is_err() {
            return;
        }
        let chain = with_chains;
        if chain {
            stacks.see(e, plan, symbols, Some(maps));
            if plans_seen.is_empty() {
                plans_seen = plans.to_vec();
            }
        }
        let room = &mut buf[used..];
        let usual = if json || chain {
            None
        } else {
            text::put_usual_line(room, e, &mut cache)
        };
        let n = match usual {
            Some(n) => n,
            None => {
                line.clear();
                if json {
                    json_writer.event(&mut line, e, plan, symbols);
                    if chain {
                        stacks.write_json(&mut line);
                    }
                } else {
                    text::write_line(&mut line, e, plan, symbols, &mut cache);
                    if chain {
                        stacks.write_text(&mut line);
                    }
                }
                if line.len() + 1 > room.len() {
                    // A line longer than what is left: written on its own.
                    result = out
                        .write_all(&buf[..used])
                        .and_then(|()| out.write_all(&line))
                        .and_then(|()| out.write_all(b"\n"));
                    used = 0;
                    return;
                }
                room[..line.len()].copy_from_slice(&line);
                line.len()
            }
        };
        buf[used + n] = b'\n';
        used += n + 1;
        if BUF - used < text::USUAL_LINE_ROOM + 1 {
            result = out.write_all(&buf[..used]);
            used = 0;
        }
    });
    let finished = result.and_then(|()| {
        out.write_all(&buf[..used])?;
        if json {
            if let Some(s) = replay.metadata().note(NOTE_JSON_SUMMARY) {
                writeln!(out, "{s}")?;
            }
        }
        out.flush()
    });
    if !crate::written(finished)? {
        return Ok(ExitCode::SUCCESS);
    }
    replayed.with_context(|| format!("reading {}", path.display()))?;
    if folded {
        stacks.finish(&args.stacks, false, &crate::stacks::title(&plans_seen))?;
    }
    if let Some(s) = replay.metadata().note(NOTE_SUMMARY) {
        say!("{s}");
    }
    Ok(ExitCode::SUCCESS)
}
