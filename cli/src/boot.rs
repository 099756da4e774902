//! `boot`: the kernel command-line parameters that define kprobe events
//! at boot, and (`--collect`) what they recorded, read after the boot.

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kprobe_perf_engine::perfdata::write_boot_recording;
use kprobe_perf_engine::spec::boot::{kprobe_event_param, COMMAND_LINE_SIZE, KPROBE_EVENT};
use kprobe_perf_engine::spec::{Definition, ProbeSpec, Span, SpecError};
use kprobe_perf_engine::{read_boot_probes, Arch, BootRecording, KernelSymbols};

use crate::eprobe;

/// The kernel's default per-CPU buffer size (`TRACE_BUF_SIZE_DEFAULT`,
/// 1441792 bytes, kernel/trace/trace.c), in KiB.
const DEFAULT_BUFFER_KB: u64 = 1408;

/// `boot`'s arguments.
#[derive(clap::Args)]
#[command(after_help = crate::examples::BOOT)]
pub(crate) struct BootArgs {
    /// The kprobes and kretprobes to define at boot (p:, r: on kernel
    /// functions, MOD:SYM included), checked as probe --parse checks
    /// them and as the kernel's command line can carry them.
    #[arg(value_name = "SPEC", required_unless_present = "collect")]
    specs: Vec<String>,
    /// After a boot with the printed parameters: read and print what the
    /// probes of /proc/cmdline's kprobe_event= recorded (the top-level
    /// tracing buffer; reading empties it), as record prints events.
    #[arg(long, conflicts_with_all = ["specs", "buffer_kb"])]
    collect: bool,
    /// With --collect: one JSON object per event, then a summary object.
    #[arg(long, requires = "collect", conflicts_with = "output")]
    json: bool,
    /// With --collect: write the events to a perf.data file (as record -o
    /// does; read it with script -i, or perf script) instead of printing
    /// them. An existing FILE is renamed to FILE.old first.
    #[arg(short = 'o', long, value_name = "FILE", requires = "collect")]
    output: Option<std::path::PathBuf>,
    /// The tracing buffer the boot keeps, per CPU, in KiB
    /// (trace_buf_size=; the kernel's default is 1408).
    #[arg(long, value_name = "KIB", default_value_t = DEFAULT_BUFFER_KB,
          value_parser = clap::value_parser!(u64).range(4..=4_194_304))]
    buffer_kb: u64,
}

/// Runs `boot`.
pub(crate) fn run(args: &BootArgs) -> Result<ExitCode> {
    let arch = Arch::host().context("kprobe-perf supports x86_64 and aarch64 only")?;
    if args.collect {
        return collect(args, arch);
    }
    let mut probes = Vec::with_capacity(args.specs.len());
    for s in &args.specs {
        probes.push(kprobe_of(s, arch)?);
    }
    let others = other_params(args.buffer_kb);
    let budget = COMMAND_LINE_SIZE - 1 - others.len() - 1;
    let param = kprobe_event_param(&probes, budget)?;
    let line = format!("{others} {param}");
    let mut out = io::stdout().lock();
    if !crate::written(writeln!(out, "{line}").and_then(|()| out.flush()))? {
        return Ok(ExitCode::SUCCESS);
    }
    say!(
        "kprobe-perf: {} probe(s) in {} of the {} bytes of the kernel's command line; add these parameters to it (quoted as your boot loader needs: ';' and '$' are special to GRUB and to shells), boot, then read the events with: kprobe-perf boot --collect",
        probes.len(),
        line.len(),
        COMMAND_LINE_SIZE - 1
    );
    warn_if_running_line_is_long(line.len());
    Ok(ExitCode::SUCCESS)
}

/// The parameters beside `kprobe_event=`: the kernel defines and enables
/// boot-time kprobe events in the top-level tracing instance, whose
/// buffer stays at its boot minimum (one page per CPU, `7 (expanded:
/// 1408)` in buffer_size_kb) unless a tracer or event is asked for on
/// the command line (`ftrace=` sets `ring_buffer_expanded`, trace.c);
/// `ftrace=nop` asks for the tracer that is there anyway.
fn other_params(buffer_kb: u64) -> String {
    format!("ftrace=nop trace_buf_size={buffer_kb}K")
}

/// `s` as a kprobe or kretprobe, or its refusal with a caret.
fn kprobe_of(s: &str, arch: Arch) -> Result<ProbeSpec> {
    match Definition::parse(s, arch)? {
        Definition::Probe(p) => Ok(p),
        other => {
            let input = other.to_string();
            let len = input.find(' ').unwrap_or(input.len());
            Err(SpecError {
                input,
                span: Span { start: 0, len },
                message: "kprobe_event= defines kprobe events only (p:, r: on a kernel function): a deletion or an event probe cannot be given at boot".into(),
            }
            .into())
        }
    }
}

/// Says when the running kernel's other parameters and the printed ones
/// together pass the command line's size (booting this machine with
/// them would cut the line short).
fn warn_if_running_line_is_long(ours: usize) {
    let Ok(running) = std::fs::read_to_string("/proc/cmdline") else {
        return;
    };
    let kept: Vec<&str> = running
        .split_whitespace()
        .filter(|w| {
            !w.starts_with(KPROBE_EVENT)
                && !w.starts_with("trace_buf_size=")
                && !w.starts_with("ftrace=")
        })
        .collect();
    let theirs = kept.join(" ").len();
    if theirs + 1 + ours > COMMAND_LINE_SIZE - 1 {
        say!(
            "kprobe-perf: warning: with the {theirs} bytes of this kernel's other parameters (/proc/cmdline), the command line would hold {} bytes, past its {}: the kernel would cut it short; define fewer probes at boot",
            theirs + 1 + ours,
            COMMAND_LINE_SIZE - 1
        );
    }
}

/// `--collect`: the boot-time probes' events, then the summary.
fn collect(args: &BootArgs, arch: Arch) -> Result<ExitCode> {
    let cmdline = std::fs::read_to_string("/proc/cmdline").context("reading /proc/cmdline")?;
    let rec = read_boot_probes(&cmdline, arch)?;
    for d in &rec.not_defined {
        say!("kprobe-perf: warning: the kernel did not define '{d}' at boot (dmesg says why: 'Failed to add event'); its events are not read");
    }
    let names: Vec<String> = rec.probes.iter().map(ProbeSpec::event_name).collect();
    if let Some(path) = &args.output {
        write_file(&rec, arch, path)?;
        for line in eprobe::summary_lines(&rec.summary, &names) {
            say!("{line}");
        }
        return check_some(&rec);
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    for e in &rec.events {
        let line = if args.json {
            eprobe::json_line(e, &names, &rec.arg_names)
        } else {
            eprobe::text_line(e, &names, &rec.arg_names)
        };
        if !crate::written(writeln!(out, "{line}"))? {
            return Ok(ExitCode::SUCCESS);
        }
    }
    if args.json {
        let summary = eprobe::json_summary(&rec.summary, &names);
        if !crate::written(writeln!(out, "{summary}"))? {
            return Ok(ExitCode::SUCCESS);
        }
    }
    if !crate::written(out.flush())? {
        return Ok(ExitCode::SUCCESS);
    }
    drop(out);
    for line in eprobe::summary_lines(&rec.summary, &names) {
        say!("{line}");
    }
    check_some(&rec)
}

/// `--collect -o FILE`: the events as a perf.data file.
fn write_file(rec: &BootRecording, arch: Arch, path: &std::path::Path) -> Result<()> {
    let file = crate::output::create(path, false)?;
    let symbols = KernelSymbols::load().unwrap_or_default();
    let Some(f) = file.into_file() else {
        bail!("{} could not be opened", path.display());
    };
    let out = io::BufWriter::new(f);
    let out = write_boot_recording(rec, arch, &symbols, out)
        .with_context(|| format!("writing {}", path.display()))?;
    out.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    say!(
        "kprobe-perf: wrote {} boot-time events to {} (read it with: kprobe-perf script -i {})",
        rec.events.len(),
        path.display(),
        path.display()
    );
    Ok(())
}

/// Exit 0 when the probes were read (events or not).
fn check_some(rec: &BootRecording) -> Result<ExitCode> {
    if rec.probes.is_empty() {
        bail!("no boot-time probe was defined");
    }
    Ok(ExitCode::SUCCESS)
}
