//! The traced functions as text, one a line, as `kprobe-perf calls -o`
//! stores them in a perf.data note ([`FUNCTIONS_NOTE`]) beside the
//! records, so that a replay rebuilds the same trees: each line is
//! `root` or `inside`, the return kind (`s4`, `u8`, `ptr`, `void`,
//! `unknown`), the name and the parameters comma-separated, by spaces.

use super::builder::TracedFunction;
use super::tree::ReturnKind;

/// The name of the perf.data note holding the traced functions.
pub const FUNCTIONS_NOTE: &str = "calls_functions";

/// The name of the perf.data note holding how many events the recording
/// lost, in decimal: a replay of a file that lost none can hand each
/// tree over as it closes, where one that lost any marks them all.
pub const LOST_NOTE: &str = "calls_lost";

/// A return kind as the note writes it.
fn kind_text(k: ReturnKind) -> String {
    match k {
        ReturnKind::Integer { size, signed } => format!("{}{size}", if signed { 's' } else { 'u' }),
        ReturnKind::Pointer => "ptr".into(),
        ReturnKind::Void => "void".into(),
        ReturnKind::Unknown => "unknown".into(),
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

/// `functions` as the note's text.
pub fn functions_note(functions: &[TracedFunction]) -> String {
    let lines: Vec<String> = functions
        .iter()
        .map(|f| {
            let place = if f.root { "root" } else { "inside" };
            let kind = kind_text(f.returns);
            format!("{place} {kind} {} {}", f.name, f.params.join(","))
        })
        .collect();
    lines.join("\n")
}

/// The functions a note's text lists; `None` when a line is not one
/// [`functions_note`] writes.
pub fn functions_from_note(note: &str) -> Option<Vec<TracedFunction>> {
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
        let note = functions_note(&given);
        assert_eq!(
            note,
            "root s8 do_sys_openat2 dfd,filename\ninside ptr do_filp_open \ninside void putname \ninside unknown link_path_walk.part.0 "
        );
        assert_eq!(functions_from_note(&note), Some(given));
        assert_eq!(functions_from_note("middle ptr f "), None);
    }
}
