//! `probe`: check definitions, list where a probe may go, and resolve
//! source lines and variables from DWARF, touching no probe.

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use kprobe_perf_engine::{spec::Definition, Arch};

use crate::image_args::ImageArgs;
use crate::{inspect, source};

/// `probe`'s arguments.
#[derive(clap::Args)]
#[command(
    after_help = crate::examples::PROBE,
    group(clap::ArgGroup::new("what").args(["parse", "definition", "vars", "source", "lines"])),
    mut_arg("vmlinux", |a| a.short('k')),
    mut_arg("source_dir", |a| a.short('s')),
)]
pub(crate) struct ProbeArgs {
    /// Print each definition's canonical form, or its error with a caret
    /// under the mistake; exit 0 only if all parse. Touches nothing.
    #[arg(long, requires = "specs")]
    parse: bool,
    /// Print the kprobe_events definition each site of a source-level
    /// probe resolves to, from the kernel's DWARF (perf probe -D),
    /// touching nothing. SPEC is perf probe's event syntax
    /// (`'do_sys_openat2:8 fd dfd how->flags'`, `'fs/open.c:1200 fd'`,
    /// `'FUNC@FILE:N'`, `'EVENT=FUNC var'`) or kprobe-perf's
    /// (`'p:do_sys_openat2@+8 fd'`, see docs/probes.md). One line per
    /// site (each inlined copy and the out-of-line body); sites where
    /// a variable cannot be fetched are said on stderr, with where it
    /// lives. Debug info: --vmlinux, else the vmlinux paths `info`
    /// lists, else /usr/lib/debug/.build-id/NN/REST.debug by the
    /// running kernel's build ID, else the debuginfod servers of
    /// DEBUGINFOD_URLS (docs/probes.md).
    #[arg(short = 'D', long, requires = "specs")]
    definition: bool,
    /// List the variables that have a value at each site of POINT
    /// (`FUNC`, `FUNC:RLINE`, `FILE:LINE`, or `FUNC@+N`), with their C
    /// types, from the kernel's DWARF (perf probe -V). Touches nothing.
    #[arg(short = 'V', long, value_name = "POINT")]
    vars: Option<String>,
    /// Show the source lines of FUNC (`NAME` or `NAME@FILE`) from the
    /// kernel's DWARF, numbered from its declaration where a probe can
    /// go (`FUNC@+N`, perf's `FUNC:N`), as perf probe -L does: with
    /// the source text when --source-dir holds the tree (or the file is
    /// at the path DWARF gives), else each line's `file:line` and the
    /// offset of its first instruction. Touches nothing. `-L` and
    /// `--line` are perf probe's spellings (not --lines, below).
    #[arg(short = 'L', long, visible_alias = "line", value_name = "FUNC")]
    source: Option<String>,
    /// With --definition or --vars: the function's out-of-line body
    /// only, not its inlined copies (perf's --no-inlines).
    #[arg(long)]
    no_inlines: bool,
    /// With --definition, --vars or --source: the --vmlinux given is of another
    /// kernel than the running one; answer for that kernel (the
    /// definitions are for use there) instead of refusing its build ID.
    #[arg(long, requires = "vmlinux")]
    other_kernel: bool,
    /// With --definition, --vars or --source: the points are in this
    /// user binary (uprobes, perf probe's -x), its DWARF its own or its debug file
    /// (/usr/lib/debug/.build-id/NN/REST.debug, its .gnu_debuglink,
    /// or the debuginfod servers of DEBUGINFOD_URLS).
    #[arg(short = 'x', long = "exec", value_name = "BINARY")]
    exec: Option<std::path::PathBuf>,
    /// With --definition, --vars or --source: the points are in this
    /// kernel module (perf probe's -m): its name (`9p`), its debug
    /// file found as for --module-debug, or the path of its `.ko` with
    /// DWARF, used as --module-debug PATH would be. The definitions
    /// name `MOD:FUNC+OFFS`.
    #[arg(short = 'm', long = "module", value_name = "MODULE", conflicts_with_all = ["exec"])]
    module: Option<String>,
    /// List every instruction of FUNC (`NAME` or `MOD:NAME`) in AT&T
    /// syntax (x86_64 kernels) or arm64 syntax (arm64 kernels) with the
    /// kernel's predicted answer at its offset: `p` a kprobe is
    /// accepted, `r` a kretprobe too, `-` refused with the errno and
    /// the reason (ftrace site, mid-instruction, INT/UD, BUG site, jump
    /// label, notrace, blacklist; on arm64 also misaligned, instructions
    /// arm64 kprobes refuse, exclusive sequences). Reads /proc/kcore
    /// (root).
    #[arg(long, value_name = "FUNC")]
    lines: Option<String>,
    /// With --lines: before the instructions of each source line, that
    /// line (`file:line`, and the function inlined there), from the
    /// kernel's DWARF (as crash's `dis -l`); needs a vmlinux with debug
    /// info (--vmlinux, or where `info` looks).
    #[arg(long, requires = "lines")]
    srcline: bool,
    /// The definitions; a deletion (`-:EVENT`) after `--`, as any
    /// argument that starts with a hyphen (`--parse -- -:myprobe`).
    #[arg(value_name = "SPEC", conflicts_with_all = ["vars", "source", "lines"])]
    specs: Vec<String>,
    #[command(flatten)]
    image: ImageArgs,
    #[command(flatten)]
    verbose: crate::binaries::VerboseArg,
}

/// Runs the one thing `args` ask for.
pub(crate) fn run(args: &ProbeArgs) -> Result<ExitCode> {
    let target = || {
        source::Target::new(
            args.exec.as_deref(),
            args.module.as_deref(),
            &args.image,
            args.verbose.verbose,
        )
    };
    if let Some(func) = &args.lines {
        inspect::lines(func, &args.image, args.srcline)
    } else if args.definition {
        target()
            .and_then(|t| source::definitions(&args.specs, &t, !args.no_inlines, args.other_kernel))
    } else if let Some(func) = &args.source {
        target().and_then(|t| source::listing(func, &t, args.other_kernel))
    } else if let Some(point) = &args.vars {
        target().and_then(|t| source::variables(point, &t, !args.no_inlines, args.other_kernel))
    } else if args.parse {
        parse(&args.specs)
    } else {
        Err(anyhow::anyhow!("{NOTHING_ASKED}"))
    }
}

/// What `probe` says when none of its actions is given.
const NOTHING_ASKED: &str = "probe needs one of: --parse SPEC... (check definitions), \
-D/--definition SPEC... (their kprobe_events definitions from DWARF), \
-V/--vars POINT (the variables at a point), -L/--source FUNC (a function's \
source lines), --lines FUNC (its instructions and where a kprobe may go); \
with -x BINARY for a user binary, -m MODULE for a kernel module, as perf probe takes them";

/// `--parse`: each definition's canonical form on stdout, or its error
/// with a caret on stderr.
fn parse(specs: &[String]) -> Result<ExitCode> {
    let arch = Arch::host().context("kprobe-perf supports x86_64 and aarch64 only")?;
    let mut ok = true;
    let mut out = io::stdout().lock();
    for s in specs {
        let written = match Definition::parse(s, arch) {
            Ok(Definition::Probe(spec)) => writeln!(out, "{}", spec.qualified()),
            Ok(Definition::EventProbe(e)) => writeln!(out, "{}", e.qualified()),
            Ok(delete) => writeln!(out, "{delete}"),
            Err(e) => {
                ok = false;
                say!("kprobe-perf: {e}");
                Ok(())
            }
        };
        if !crate::written(written.and_then(|()| out.flush()))? {
            break;
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    fn said(argv: &[&str]) -> String {
        let argv = std::iter::once("kprobe-perf").chain(argv.iter().copied());
        match crate::Cli::command().try_get_matches_from(argv) {
            Ok(_) => String::from("accepted"),
            Err(e) => crate::validate::usage_line(&e),
        }
    }

    /// An option after the point or a SPEC is refused, not taken for a
    /// SPEC (and ignored); a deletion is a SPEC after `--`, and options
    /// may follow a SPEC.
    #[test]
    fn options_are_not_specs() {
        assert_eq!(
            said(&["probe", "--vars", "X", "--nonsense"]),
            "unexpected argument '--nonsense' found; tip: a similar argument exists: '--no-inlines' (see --help)"
        );
        assert_eq!(
            said(&["probe", "--parse", "p:/bin/sh:main", "--range"]),
            "unexpected argument '--range' found; tip: to pass '--range' as a value, use '-- --range' (see --help)"
        );
        assert_eq!(said(&["probe", "--parse", "--", "-:myprobe"]), "accepted");
        assert_eq!(said(&["probe", "-D", "walk:4", "-x", "./prog"]), "accepted");
        assert_eq!(
            said(&["probe", "--parse", "-:myprobe"]),
            "unexpected argument '-:': a deletion (-:EVENT) is a SPEC, given after `--` \
             as any SPEC that starts with a hyphen (probe --parse -- -:myprobe) (see --help)"
        );
    }

    fn args(argv: &[&str]) -> super::ProbeArgs {
        let argv = ["kprobe-perf", "probe"]
            .into_iter()
            .chain(argv.iter().copied());
        let m = crate::Cli::command().get_matches_from(argv);
        let m = m.subcommand_matches("probe").unwrap();
        <super::ProbeArgs as clap::FromArgMatches>::from_arg_matches(m).unwrap()
    }

    /// perf probe's short flags, with perf's meanings: -V the variables,
    /// -D the definitions, -L (and --line) the source lines, -x a user
    /// binary, -m a module, -k the vmlinux, -s the source tree.
    #[test]
    fn perfs_short_flags() {
        let a = args(&["-V", "walk:4", "-x", "./prog", "-s", "/src"]);
        assert_eq!(a.vars.as_deref(), Some("walk:4"));
        assert_eq!(a.exec.as_deref(), Some(std::path::Path::new("./prog")));
        assert_eq!(
            a.image.source_dir.as_deref(),
            Some(std::path::Path::new("/src"))
        );
        let a = args(&["-D", "walk:4 total", "-m", "9p", "-k", "/proc/self/status"]);
        assert!(a.definition);
        assert_eq!(a.specs, ["walk:4 total"]);
        assert_eq!(a.module.as_deref(), Some("9p"));
        assert_eq!(
            a.image.vmlinux.as_deref(),
            Some(std::path::Path::new("/proc/self/status"))
        );
        assert_eq!(args(&["-L", "walk"]).source.as_deref(), Some("walk"));
        assert_eq!(args(&["--line", "walk"]).source.as_deref(), Some("walk"));
        assert_eq!(
            said(&["probe", "-V", "x", "-L", "y"]),
            "the argument '--vars <POINT>' cannot be used with '--source <FUNC>' (see --help)"
        );
    }

    /// Nothing asked: the message names every action by the flags that
    /// give it, perf's short ones among them.
    #[test]
    fn nothing_asked_names_the_flags() {
        let e = super::run(&args(&[])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "probe needs one of: --parse SPEC... (check definitions), \
             -D/--definition SPEC... (their kprobe_events definitions from DWARF), \
             -V/--vars POINT (the variables at a point), -L/--source FUNC (a function's \
             source lines), --lines FUNC (its instructions and where a kprobe may go); \
             with -x BINARY for a user binary, -m MODULE for a kernel module, as perf probe takes them"
        );
    }
}
