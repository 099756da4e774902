//! `calls -o FILE` and `calls -i FILE`: the traced functions stored in
//! the perf.data file beside the records, and the trees rebuilt from it
//! as the recording built them.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kprobe_perf_engine::analysis::{
    functions_from_note, functions_note, CallProbes, FUNCTIONS_NOTE, LOST_NOTE,
};
use kprobe_perf_engine::{Handed, TracedFunction};

use crate::calls::Tracing;
use crate::output::NOTE_SUMMARY;

/// Events handed to the builder between two prints of the trees closed.
const PRINT_EVERY: u32 = 4096;

/// The notes of a `calls -o` file: the functions (`root` or `inside`,
/// the return kind, the name, the parameters comma-separated, by spaces),
/// the events lost and the summary lines.
pub(crate) fn notes(
    functions: &[TracedFunction],
    lost: u64,
    summary: &[String],
) -> Vec<(String, String)> {
    vec![
        (FUNCTIONS_NOTE.into(), functions_note(functions)),
        (LOST_NOTE.into(), lost.to_string()),
        (NOTE_SUMMARY.into(), summary.join("\n")),
    ]
}

/// `calls -i FILE`: every event of the file to the builder of `make`,
/// in the recording's order, and every tree printed. A file that says
/// it lost no event has its trees printed as they close; any other (one
/// that lost events, or one an earlier version wrote) has them held to
/// the end, where a loss marks every one.
pub(crate) fn replay(
    path: &Path,
    make: impl FnOnce(Vec<TracedFunction>) -> Result<Tracing>,
) -> Result<ExitCode> {
    let mut replay = crate::script::open_replay(path)?;
    let Some(note) = replay.metadata().note(FUNCTIONS_NOTE) else {
        anyhow::bail!(
            "{} holds no traced functions: it was not written by `kprobe-perf calls -o` (print its events with `kprobe-perf script -i {}`)",
            path.display(),
            path.display()
        );
    };
    let functions = functions_from_note(note).with_context(|| {
        format!(
            "{}: the traced functions it stores cannot be read (written by another version of kprobe-perf?)",
            path.display()
        )
    })?;
    let streamed = replay
        .metadata()
        .note(LOST_NOTE)
        .and_then(|n| n.parse::<u64>().ok())
        == Some(0);
    let mut probes = CallProbes::new(replay.decoder().plans(), &functions);
    let mut tracing = make(functions)?;
    let mut printed: Result<bool> = Ok(true);
    let mut since = 0;
    replay
        .run_handed(|h, _, symbols, _| {
            let call = match h {
                Handed::Ints(e) => probes.call_ints(e, symbols),
                Handed::Event(e) => probes.call_event(e, symbols),
            };
            if let Some(call) = call {
                tracing.record(call);
            }
            since += 1;
            if streamed && since >= PRINT_EVERY {
                since = 0;
                if matches!(printed, Ok(true)) {
                    printed = tracing.print_finished();
                }
            }
            true
        })
        .with_context(|| format!("reading {}", path.display()))?;
    printed?;
    let lost = replay.decoder().stats().lost;
    if streamed && lost > 0 {
        say!(
            "kprobe-perf: calls: {} says its recording lost no event, yet {lost} were lost: the trees printed before its end are not marked incomplete",
            path.display()
        );
    }
    tracing.replayed(lost)?;
    if let Some(s) = replay.metadata().note(NOTE_SUMMARY) {
        say!("{s}");
    }
    Ok(ExitCode::SUCCESS)
}
