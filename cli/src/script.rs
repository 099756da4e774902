//! `kprobe-perf script -i FILE`: a perf.data file written by `record -o`,
//! printed as the recording printed it.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kprobe_perf_engine::perfdata::{Reader, Replay};
use kprobe_perf_engine::{Handed, IntEvent, KernelSymbols, ProbePlan};

use crate::output::{NOTE_JSON_SUMMARY, NOTE_SUMMARY};
use crate::{json, text};

/// Arguments of `script`.
#[derive(clap::Args)]
#[command(after_help = crate::examples::SCRIPT)]
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
    /// Print these fields of each event, as perf script -F prints them:
    /// a list of comm, pid, tid, cpu, time, event, ip, sym, symoff, dso,
    /// trace (the probe's place and arguments as kprobe-perf's line
    /// prints them, ftrace's way: `(0x55d0c0a3e149) n=0` where perf's
    /// libtraceevent prints `(55d0c0a3e149) n=0`), or changes to perf's
    /// default list comm,tid,cpu,time,event,trace (`+ip,+sym,-cpu`). A
    /// uprobe's sym and dso are named from the mapped binary
    /// (`-F ip,sym,dso`: `55d0c0a3e149 walk (/tmp/prog)`). The event is
    /// kprobe-perf's name of it (`p_prog_walk_0`, where perf names the
    /// event perf probe made `probe_prog:walk`).
    #[arg(short = 'F', long = "fields", value_name = "FIELDS", value_parser = crate::fields::Fields::parse, conflicts_with = "json")]
    fields: Option<crate::fields::Fields>,
    #[command(flatten)]
    stacks: crate::stacks::StackOutputArgs,
}

/// Prints every event of the file, then the recording's summary.
pub(crate) fn run(args: &ScriptArgs) -> Result<ExitCode> {
    let path = &args.input;
    args.stacks.check()?;
    let mut replay = open_replay(path)?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut result = Ok(());
    let json = args.json;
    let mut lines = LineBuffer::new();
    let mut writers = Writers::default();
    let mut stacks = crate::stacks::Stacks::new(false, &args.stacks);
    // A file recorded with -g prints each event's frames (none for an
    // event whose chain is empty), as the recording did.
    let chain = replay.decoder().has_callchains();
    let folded = folded_stacks(args, chain)?;
    let mut plans_seen = Vec::new();
    let mut by_field: Option<crate::fields::FieldWriter> = None;
    let replayed = replay.run_handed(|h, plans, symbols, maps| {
        let probe = match h {
            Handed::Ints(i) => i.probe,
            Handed::Event(e) => e.probe,
        };
        let Some(plan) = plans.get(probe) else {
            return true;
        };
        if result.is_err() {
            return true;
        }
        // -F: every event as itself (never as its integers), its fields
        // as perf script prints them.
        if let Some(f) = args.fields {
            let Handed::Event(e) = h else { return false };
            let w = by_field.get_or_insert_with(|| crate::fields::FieldWriter::new(f, plans));
            result = lines.push_apart(&mut out, |line| w.write(line, e, plan, symbols, maps));
            return true;
        }
        let e = match h {
            // The usual line or object, straight from the event as it
            // waited in time order.
            Handed::Ints(i) if !chain => {
                let usual = (i, plan, symbols);
                return int_line(&mut lines, &mut out, usual, json, &mut writers, &mut result);
            }
            Handed::Ints(_) => return false,
            Handed::Event(e) => e,
        };
        if chain {
            stacks.see(e, plan, symbols, Some(maps));
            if plans_seen.is_empty() {
                plans_seen = plans.to_vec();
            }
        }
        result = lines.push(
            &mut out,
            &mut writers,
            |room, w| match (json, chain) {
                (_, true) => None,
                (true, false) => w.json.put_usual(room, e, plan, symbols),
                (false, false) => text::put_usual_line(room, e, &mut w.text),
            },
            |line, w| {
                if json {
                    w.json.event(line, e, plan, symbols);
                    if chain {
                        stacks.write_json(line);
                    }
                } else {
                    text::write_line(line, e, plan, symbols, &mut w.text);
                    if chain {
                        stacks.write_text(line);
                    }
                }
            },
        );
        true
    });
    let finished = result.and_then(|()| finish_output(&mut lines, &mut out, json, &replay));
    if !crate::written(finished)? {
        return Ok(ExitCode::SUCCESS);
    }
    replayed.with_context(|| format!("reading {}", path.display()))?;
    say_unfinished(path, replay.unfinished());
    if folded {
        stacks.finish(&args.stacks, false, &crate::stacks::title(&plans_seen))?;
    }
    if let Some(s) = replay.metadata().note(NOTE_SUMMARY) {
        say!("{s}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Ends the standard output: the lines still buffered, and with --json
/// the recording's summary object.
fn finish_output(
    lines: &mut LineBuffer,
    out: &mut impl Write,
    json: bool,
    replay: &Replay<std::fs::File>,
) -> io::Result<()> {
    lines.finish(out)?;
    if json {
        if let Some(s) = replay.metadata().note(NOTE_JSON_SUMMARY) {
            writeln!(out, "{s}")?;
        }
    }
    out.flush()
}

/// Says on stderr that the file at `path` was never finished, and where
/// its whole records end, when `u` says so.
fn say_unfinished(path: &std::path::Path, u: Option<kprobe_perf_engine::perfdata::Unfinished>) {
    let Some(u) = u else { return };
    say!(
        "kprobe-perf: {} was cut short: its recording never finished it (killed, \
         power lost or disk full); read its records up to byte {} of {}{}",
        path.display(),
        u.whole_to,
        u.len,
        match u.len - u.whole_to {
            0 => String::new(),
            n => format!(" (the last {n} bytes are not a whole record)"),
        }
    );
}

/// The perf.data file at `path`, ready to replay: a regular file only
/// (a FIFO would block, /dev/zero never end).
pub(crate) fn open_replay(path: &std::path::Path) -> Result<Replay<std::fs::File>> {
    let (file, _) = kprobe_perf_engine::cli::kernel::open_regular(path)
        .with_context(|| format!("cannot read {} (give a perf.data file)", path.display()))?;
    let reader = Reader::from_file(file).with_context(|| format!("reading {}", path.display()))?;
    Replay::new(reader).with_context(|| format!("reading {}", path.display()))
}

/// Whether stacks are counted (--stacks-folded, --flamegraph,
/// --profile): refused for a file without callchains (`chain`).
fn folded_stacks(args: &ScriptArgs, chain: bool) -> Result<bool> {
    let folded = args.stacks.stacks_folded.is_some()
        || args.stacks.flamegraph.is_some()
        || args.stacks.profile.is_some();
    if folded && !chain {
        anyhow::bail!(
            "{} has no callchains to count: record it with -g (or --call-graph)",
            args.input.display()
        );
    }
    Ok(folded)
}

/// The usual text line or JSON object of `e` (of the probe `plan`), added
/// to `lines` (its write's outcome in `result`): false when `e` is not the
/// usual one, to be printed from its [`kprobe_perf_engine::Event`].
#[inline]
fn int_line(
    lines: &mut LineBuffer,
    out: &mut impl Write,
    (e, plan, symbols): (&IntEvent<'_>, &ProbePlan, &KernelSymbols),
    json: bool,
    writers: &mut Writers,
    result: &mut io::Result<()>,
) -> bool {
    let pushed = lines.push_usual(out, |room| match json {
        true => writers.json.put_usual_ints(room, e, plan, symbols),
        false => text::put_int_line(room, e, &mut writers.text),
    });
    match pushed {
        Some(r) => {
            *result = r;
            true
        }
        None => false,
    }
}

/// What the text and JSON formatters remember between lines.
#[derive(Default)]
struct Writers {
    text: text::LineCache,
    json: json::EventWriter,
}

/// Room for the usual line, text or JSON.
const USUAL_ROOM: usize = if text::USUAL_LINE_ROOM > json::USUAL_OBJECT_ROOM {
    text::USUAL_LINE_ROOM
} else {
    json::USUAL_OBJECT_ROOM
};

/// Lines gathered in one buffer and written in large pieces; the usual
/// line is formatted straight into it.
struct LineBuffer {
    buf: Vec<u8>,
    used: usize,
    /// A line that is not the usual one, formatted apart.
    line: Vec<u8>,
}

impl LineBuffer {
    const SIZE: usize = 1 << 20;

    fn new() -> LineBuffer {
        LineBuffer {
            buf: vec![0u8; Self::SIZE],
            used: 0,
            line: Vec::with_capacity(256),
        }
    }

    /// Adds one line, formatted apart by `other` (see [`LineBuffer::push`]).
    fn push_apart(
        &mut self,
        out: &mut impl Write,
        other: impl FnOnce(&mut Vec<u8>),
    ) -> io::Result<()> {
        self.push(out, &mut (), |_, _| None, |line, _| other(line))
    }

    /// Adds one line (its newline added here): `usual` formats it into
    /// the buffer's room and returns its length, or gives `None`; `other`
    /// then formats it apart (both are given `context`). Writes to `out` when the buffer is nearly
    /// full.
    fn push<C>(
        &mut self,
        out: &mut impl Write,
        context: &mut C,
        usual: impl FnOnce(&mut [u8], &mut C) -> Option<usize>,
        other: impl FnOnce(&mut Vec<u8>, &mut C),
    ) -> io::Result<()> {
        let room = &mut self.buf[self.used..];
        let n = match usual(room, context) {
            Some(n) => n,
            None => {
                self.line.clear();
                other(&mut self.line, context);
                if self.line.len() + 1 > room.len() {
                    // A line longer than what is left: written on its own.
                    let used = std::mem::take(&mut self.used);
                    out.write_all(&self.buf[..used])?;
                    out.write_all(&self.line)?;
                    return out.write_all(b"\n");
                }
                room[..self.line.len()].copy_from_slice(&self.line);
                self.line.len()
            }
        };
        self.buf[self.used + n] = b'\n';
        self.used += n + 1;
        if Self::SIZE - self.used < USUAL_ROOM + 1 {
            out.write_all(&self.buf[..self.used])?;
            self.used = 0;
        }
        Ok(())
    }

    /// Adds the line `usual` formats into the buffer's room (returning
    /// its length), as [`LineBuffer::push`] does; `None` when it gives
    /// `None`, with nothing added.
    #[inline]
    fn push_usual(
        &mut self,
        out: &mut impl Write,
        usual: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> Option<io::Result<()>> {
        let n = usual(self.buf.get_mut(self.used..)?)?;
        self.end_line(out, n)
    }

    /// Ends the line of `n` bytes written at `used` with its newline, and
    /// writes the buffer to `out` when it is nearly full.
    #[inline]
    fn end_line(&mut self, out: &mut impl Write, n: usize) -> Option<io::Result<()>> {
        *self.buf.get_mut(self.used + n)? = b'\n';
        self.used += n + 1;
        if Self::SIZE - self.used < USUAL_ROOM + 1 {
            let used = std::mem::take(&mut self.used);
            return Some(out.write_all(&self.buf[..used]));
        }
        Some(Ok(()))
    }

    /// Writes what is left.
    fn finish(&mut self, out: &mut impl Write) -> io::Result<()> {
        let used = std::mem::take(&mut self.used);
        out.write_all(&self.buf[..used])
    }
}
