//! The kernel image options of `list`, `probe --lines`, `record` and
//! `info`, and the CLI's words for what the engine's [`Kernel`] reports.

use std::path::PathBuf;

use anyhow::{Context, Result};
use kprobe_perf_engine::cli::kernel::{
    self, Kernel, KernelError, KernelImage, KernelOptions, SizesFrom,
};
use kprobe_perf_engine::Error;

/// Where kernel text comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TextFrom {
    /// /proc/kcore when readable, else a vmlinux.
    Auto,
    /// /proc/kcore only.
    Kcore,
    /// The vmlinux only (its link-time bytes, moved by the KASLR slide).
    Vmlinux,
}

/// The kernel image options shared by `list`, `probe`, `record` and `info`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct ImageArgs {
    /// The running kernel's vmlinux (default: the first of
    /// /usr/lib/debug/boot/vmlinux-$(uname -r),
    /// /usr/lib/debug/lib/modules/$(uname -r)/vmlinux, /boot/vmlinux-$(uname -r),
    /// /lib/modules/$(uname -r)/build/vmlinux that exists). It gives exact
    /// function sizes and, when /proc/kcore is not readable, the bytes of
    /// kernel text. Its build ID and KASLR slide are checked against the
    /// running kernel; a mismatch is refused. In `record` with callchains,
    /// a given vmlinux with DWARF (Debian: linux-image-VERSION-dbg) also
    /// names kernel frames' inlined functions and, with --srcline, their
    /// source lines, as perf does with its vmlinux.
    #[arg(long, value_name = "PATH", value_parser = regular_file)]
    pub vmlinux: Option<PathBuf>,
    /// The running kernel's System.map (default: /usr/lib/debug/boot or
    /// /boot System.map-$(uname -r)): symbols for a stripped vmlinux, and a
    /// check of the KASLR slide.
    #[arg(long, value_name = "PATH", value_parser = regular_file)]
    pub system_map: Option<PathBuf>,
    /// Where kernel text bytes come from: `auto` (/proc/kcore, else the
    /// vmlinux), `kcore`, or `vmlinux` (link-time bytes: runtime patching
    /// of jump labels, static calls and alternatives is not seen).
    #[arg(long, value_enum, value_name = "SOURCE", default_value_t = TextFrom::Auto)]
    pub text_from: TextFrom,
    /// Where the source files of a source point's lazy pattern
    /// (`FUNC@;PATTERN`, perf's `FUNC;PATTERN`) and of `probe --source`
    /// are read (perf probe's -s): a file the debug info names `a/b/c.c` is DIR/a/b/c.c, else
    /// DIR/b/c.c, else DIR/c.c. Default: the compilation directory the
    /// debug info names.
    #[arg(long, value_name = "DIR")]
    pub source_dir: Option<PathBuf>,
    /// The debug file (a `.ko` with DWARF) of a kernel module, for that
    /// module's source points (`MOD:FUNC@+N`): the module is the one the
    /// file's name names (`9p.ko`: `9p`). Repeatable. Default: Debian's
    /// /usr/lib/debug/lib/modules/$(uname -r)/ and the module's path
    /// from modules.dep, else /usr/lib/debug/.build-id/NN/REST.debug by
    /// the loaded module's build ID. Its build ID is checked against the
    /// loaded module's; a mismatch is refused. Also the `.ko` (may be
    /// `.ko.xz`, `.ko.zst`, `.ko.gz`) a probe on a module that is not
    /// loaded is checked against (default: the module's path from
    /// /lib/modules/$(uname -r)/modules.dep), e.g.
    /// `record -e 'p:binfmt_misc:bm_status_write count=$arg3' --module-debug ./binfmt_misc.ko.xz -a`.
    #[arg(long, value_name = "PATH", value_parser = regular_file)]
    pub module_debug: Vec<PathBuf>,
}

impl ImageArgs {
    /// The engine's options; `sizes` says whether a vmlinux is read for
    /// exact function sizes even when /proc/kcore is readable.
    pub(crate) fn options(&self, sizes: SizesFrom) -> KernelOptions {
        KernelOptions::default()
            .vmlinux(self.vmlinux.clone())
            .system_map(self.system_map.clone())
            .text_from(match self.text_from {
                TextFrom::Auto => kernel::TextFrom::Auto,
                TextFrom::Kcore => kernel::TextFrom::Kcore,
                TextFrom::Vmlinux => kernel::TextFrom::Vmlinux,
            })
            .sizes_from(sizes)
            .source_dir(self.source_dir.clone())
            .module_debug(self.module_debug.clone())
    }
}

/// `--vmlinux` and `--system-map`: an existing regular file (a FIFO would
/// block the read, a device never end), checked before anything is read.
fn regular_file(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    kernel::open_regular(&path)
        .map(|_| path)
        .map_err(|e| format!("{e}; give the path of the file"))
}

/// The running kernel's symbols and blacklist, for `list`, `probe --lines`
/// and `info`: unreadable kallsyms is an error; hidden addresses and an
/// unreadable blacklist are said on stderr.
pub(crate) fn discover(args: &ImageArgs, sizes: SizesFrom) -> Result<Kernel> {
    let kernel = Kernel::discover(args.options(sizes)).context("reading the kernel's symbols")?;
    if kernel.symbols().addresses_hidden() {
        say!(
            "kprobe-perf: /proc/kallsyms hides addresses from this process (kernel.kptr_restrict, or no CAP_SYSLOG): run as root or lower kernel.kptr_restrict; section and address checks are skipped"
        );
    }
    if let Some(e) = kernel.blacklist_error() {
        say!("kprobe-perf: the kprobe blacklist is not checked: {e}");
    }
    Ok(kernel)
}

/// Says on stderr which found images the kernel left out, and why.
pub(crate) fn report_skipped(kernel: &Kernel) {
    for s in kernel.take_skipped() {
        say!(
            "kprobe-perf: not using {}: {:#}",
            s.path.display(),
            anyhow::Error::from(s.error)
        );
    }
}

/// The engine's error, in the CLI's words: the options to give where the
/// engine says what to give.
pub(crate) fn explain(e: impl Into<Error>) -> anyhow::Error {
    let e = e.into();
    let flagged = match &e {
        Error::Kernel(KernelError::Kcore { .. }) => "--text-from kcore",
        Error::Kernel(KernelError::Unplaced { path }) => {
            return anyhow::anyhow!(
                "--text-from vmlinux: {} cannot be placed at the running kernel's addresses (no symbols to compute the KASLR slide from: give --system-map, and run as root so kallsyms shows addresses)",
                path.display()
            )
        }
        Error::Kernel(KernelError::NoVmlinux {
            release,
            candidates,
        }) => {
            return anyhow::anyhow!(
                "--text-from vmlinux: no vmlinux for {release} (looked in {}); give --vmlinux PATH (Debian: the linux-image-VERSION-dbg package)",
                kernel::looked_in(candidates)
            )
        }
        _ => return e.into(),
    };
    anyhow::Error::from(e).context(flagged)
}

/// The kernel's text, with the images it left out said on stderr.
pub(crate) fn text(
    kernel: &Kernel,
) -> Result<Option<&dyn kprobe_perf_engine::cli::kernel::preflight::KernelTextSource>> {
    let text = kernel.text().map_err(explain);
    report_skipped(kernel);
    text
}

/// `path (N symbols)` for `info`.
pub(crate) fn describe_image(img: &KernelImage) -> String {
    let what = if img.has_text() && img.symbols().is_empty() {
        "stripped, no symbols".to_string()
    } else {
        format!("{} symbols", img.symbols().len())
    };
    format!("{} ({what})", img.path().display())
}
