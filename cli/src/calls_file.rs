//! `calls -o FILE` and `calls -i FILE`: the traced functions stored in
//! the perf.data file beside the records, and the trees rebuilt from it
//! as the recording built them.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kprobe_perf_engine::analysis::CallProbes;
use kprobe_perf_engine::{ReturnKind, TracedFunction};

use crate::calls::Tracing;
use crate::output::NOTE_SUMMARY;

/// The note holding the traced functions, one a line.
const NOTE_FUNCTIONS: &str = "calls_functions";

/// A return kind as the note writes it.
fn kind_text(k: ReturnKind) -> String {
    match k {
        ReturnKind::Integer { size, signed } => format!("{}{size}", if signed { 's' } else { 'u' }),
        ReturnKind::Pointer => "ptr".into(),
        ReturnKind::Void => "void".into(),
        _ => "unknown".into(),
    }
}

/// A return kind the note wrote.
fn kind_of(text: &str) -> Option<ReturnKind> {
    match text {
        "ptr" => Some(ReturnKind::Pointer),
        "void" => Some(ReturnKind::Void),
        "unknown" => Some(ReturnKind::Unknown),
        _ => {
            let signed = match text.as_bytes().first()? {
                b's' => true,
                b'u' => false,
                _ => return None,
            };
            let size = text.get(1..)?.parse().ok()?;
            Some(ReturnKind::Integer { size, signed })
        }
    }
}

/// The notes of a `calls -o` file: the functions (`root` or `inside`,
/// the return kind, the name, the parameters comma-separated, by spaces)
/// and the summary lines.
pub(crate) fn notes(functions: &[TracedFunction], summary: &[String]) -> Vec<(String, String)> {
    let lines: Vec<String> = functions
        .iter()
        .map(|f| {
            let place = if f.root { "root" } else { "inside" };
            let kind = kind_text(f.returns);
            format!("{place} {kind} {} {}", f.name, f.params.join(","))
        })
        .collect();
    vec![
        (NOTE_FUNCTIONS.into(), lines.join("\n")),
        (NOTE_SUMMARY.into(), summary.join("\n")),
    ]
}

/// The functions a note lists.
fn functions(note: &str) -> Option<Vec<TracedFunction>> {
    note.lines()
        .map(|line| {
            let mut f = line.split(' ');
            let root = match f.next()? {
                "root" => true,
                "inside" => false,
                _ => return None,
            };
            let kind = kind_of(f.next()?)?;
            let mut t = TracedFunction::new(f.next()?, kind, root);
            t.params = f
                .next()
                .unwrap_or_default()
                .split(',')
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect();
            Some(t)
        })
        .collect()
}

/// `calls -i FILE`: every event of the file to the builder of `make`,
/// in the recording's order, then every tree printed.
pub(crate) fn replay(
    path: &Path,
    make: impl FnOnce(Vec<TracedFunction>) -> Result<Tracing>,
) -> Result<ExitCode> {
    let mut replay = crate::script::open_replay(path)?;
    let Some(note) = replay.metadata().note(NOTE_FUNCTIONS) else {
        anyhow::bail!(
            "{} holds no traced functions: it was not written by `kprobe-perf calls -o` (print its events with `kprobe-perf script -i {}`)",
            path.display(),
            path.display()
        );
    };
    let functions = functions(note).with_context(|| {
        format!(
            "{}: the traced functions it stores cannot be read (written by another version of kprobe-perf?)",
            path.display()
        )
    })?;
    let mut probes = CallProbes::new(replay.decoder().plans(), &functions);
    let mut tracing = make(functions)?;
    replay
        .run(|e, _, symbols, _| {
            if let Some(call) = probes.call_event(e, symbols) {
                tracing.record(call);
            }
        })
        .with_context(|| format!("reading {}", path.display()))?;
    tracing.replayed(replay.decoder().stats().lost)?;
    if let Some(s) = replay.metadata().note(NOTE_SUMMARY) {
        say!("{s}");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_come_back_from_their_note() {
        let mut open = TracedFunction::new(
            "do_sys_openat2",
            ReturnKind::Integer {
                size: 8,
                signed: true,
            },
            true,
        );
        open.params = vec!["dfd".into(), "filename".into()];
        let given = vec![
            open,
            TracedFunction::new("do_filp_open", ReturnKind::Pointer, false),
            TracedFunction::new("putname", ReturnKind::Void, false),
            TracedFunction::new("link_path_walk.part.0", ReturnKind::Unknown, false),
        ];
        let notes = notes(&given, &["1 event".into()]);
        assert_eq!(notes[0].0, NOTE_FUNCTIONS);
        assert_eq!(
            notes[0].1,
            "root s8 do_sys_openat2 dfd,filename\ninside ptr do_filp_open \ninside void putname \ninside unknown link_path_walk.part.0 "
        );
        assert_eq!(functions(&notes[0].1), Some(given));
        assert_eq!(functions("middle ptr f "), None);
    }
}
