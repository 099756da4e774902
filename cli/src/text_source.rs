//! Where `list`, `probe --lines`, `record` and `info` get kernel text bytes
//! and function sizes: `/proc/kcore` (the live text) first, a vmlinux
//! matched to the running kernel when kcore cannot be read or when asked.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kprobe_perf_engine::kcore::{ImageText, Kcore, TextSources};
use kprobe_perf_engine::preflight::KernelTextSource;
use kprobe_perf_engine::KernelSymbols;
use kprobe_perf_symbols::image::{self, KaslrSlide, KernelImage};

/// Where kernel text comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TextFrom {
    /// /proc/kcore when readable, else a vmlinux.
    Auto,
    /// /proc/kcore only.
    Kcore,
    /// The vmlinux only (its link-time bytes, moved by the KASLR slide).
    Vmlinux,
}

/// The kernel image options shared by `list`, `probe`, `record` and `info`.
#[derive(clap::Args, Clone, Debug)]
pub struct ImageArgs {
    /// The running kernel's vmlinux (default: the first of
    /// /usr/lib/debug/boot/vmlinux-$(uname -r),
    /// /usr/lib/debug/lib/modules/$(uname -r)/vmlinux, /boot/vmlinux-$(uname -r),
    /// /lib/modules/$(uname -r)/build/vmlinux that exists). It gives exact
    /// function sizes and, when /proc/kcore is not readable, the bytes of
    /// kernel text. Its build ID and KASLR slide are checked against the
    /// running kernel; a mismatch is refused.
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
}

/// `--vmlinux` and `--system-map`: an existing regular file (a FIFO would
/// block the read, a device never end), checked before anything is read.
fn regular_file(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    kprobe_perf_symbols::file::open_regular(&path)
        .map(|_| path)
        .map_err(|e| format!("{e}; give the path of the file"))
}

/// `uname -r`.
pub fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| r.trim().to_string())
        .unwrap_or_default()
}

fn first_existing(paths: Vec<PathBuf>) -> Option<PathBuf> {
    paths.into_iter().find(|p| p.is_file())
}

/// A vmlinux (or System.map) matched to the running kernel.
pub struct Matched {
    /// The image with bytes (a vmlinux), if one was found.
    pub vmlinux: Option<KernelImage>,
    /// The System.map, if one was read.
    pub system_map: Option<KernelImage>,
    /// The slide, from the vmlinux's symbols or else the System.map's.
    pub slide: Option<KaslrSlide>,
}

/// Finds, reads and checks the vmlinux and System.map. Explicit paths that
/// fail or do not match are errors; discovered ones that do not match are
/// reported on stderr and left out.
pub fn match_image(args: &ImageArgs, symbols: &KernelSymbols) -> Result<Matched> {
    let rel = release();
    let running = image::running_build_id();
    let mut out = Matched {
        vmlinux: None,
        system_map: None,
        slide: None,
    };
    let explicit_map = args.system_map.is_some();
    let map_path = args
        .system_map
        .clone()
        .or_else(|| first_existing(image::system_map_candidates(&rel)));
    if let Some(path) = map_path {
        match KernelImage::open_system_map(&path) {
            Ok(m) => out.system_map = Some(m),
            Err(e) if explicit_map => return Err(e.into()),
            Err(_) => {} // Debian's /boot placeholder: nothing to use.
        }
    }
    let explicit = args.vmlinux.is_some();
    let vmlinux_path = args
        .vmlinux
        .clone()
        .or_else(|| first_existing(image::vmlinux_candidates(&rel)));
    if let Some(path) = vmlinux_path {
        let checked = KernelImage::open_vmlinux(&path)
            .map_err(anyhow::Error::from)
            .and_then(|v| {
                check_build_id(&v, running.as_deref())?;
                Ok(v)
            });
        match checked {
            Ok(v) => out.vmlinux = Some(v),
            Err(e) if explicit => return Err(e),
            Err(e) => eprintln!("kprobe-perf: not using {}: {e:#}", path.display()),
        }
    }
    // The slide: from the vmlinux's symbol table, else the System.map's.
    let with_symbols = out
        .vmlinux
        .as_ref()
        .filter(|v| !v.symbols().is_empty())
        .or(out.system_map.as_ref());
    if let Some(img) = with_symbols {
        match img.slide_against(symbols, running.as_deref()) {
            Ok(s) => out.slide = Some(s),
            Err(e) if explicit || explicit_map => return Err(e.into()),
            Err(e) => {
                eprintln!("kprobe-perf: not using {}: {e}", img.path().display());
                out.vmlinux = None;
                out.system_map = None;
            }
        }
    }
    // A System.map that disagrees with the vmlinux's own slide.
    if let (Some(map), Some(slide)) = (&out.system_map, out.slide) {
        if let Some(own) = map.slide_against(symbols, None).ok().map(|s| s.slide) {
            if own != slide.slide {
                bail!(
                    "{} (KASLR slide 0x{own:x}) and the vmlinux (0x{:x}) are of different builds",
                    map.path().display(),
                    slide.slide
                );
            }
        }
    }
    Ok(out)
}

fn check_build_id(v: &KernelImage, running: Option<&[u8]>) -> Result<()> {
    if let (Some(a), Some(b)) = (v.build_id(), running) {
        if a != b {
            let hex = |x: &[u8]| x.iter().map(|b| format!("{b:02x}")).collect::<String>();
            bail!(
                "{} was built for another kernel: its build ID is {}, the running kernel's (/sys/kernel/notes) is {}; give the vmlinux of `uname -r` with --vmlinux",
                v.path().display(),
                hex(a),
                hex(b)
            );
        }
    }
    Ok(())
}

/// The kernel text for preflight checks: kcore, a matched vmlinux, or both
/// (live bytes, vmlinux sizes). `with_sizes` reads a vmlinux even when kcore
/// is readable (`probe --lines`, `info`); otherwise a discovered vmlinux is
/// read only when kcore is not. None when there is no source (not root and
/// no vmlinux): the kernel decides.
pub fn open(
    args: &ImageArgs,
    symbols: &KernelSymbols,
    with_sizes: bool,
) -> Result<Option<Box<dyn KernelTextSource>>> {
    let live = match args.text_from {
        TextFrom::Vmlinux => None,
        TextFrom::Auto => Kcore::open().ok(),
        TextFrom::Kcore => Some(
            Kcore::open()
                .context("--text-from kcore: /proc/kcore cannot be read (run as root on a kernel with CONFIG_PROC_KCORE)")?,
        ),
    };
    let want_image = args.vmlinux.is_some()
        || args.text_from == TextFrom::Vmlinux
        || (args.text_from == TextFrom::Auto && (live.is_none() || with_sizes));
    let mut image = None;
    if want_image {
        let m = match_image(args, symbols)?;
        match (m.vmlinux, m.slide) {
            (Some(v), Some(slide)) => image = Some(ImageText::new(v, slide)),
            (Some(v), None) if args.text_from == TextFrom::Vmlinux => bail!(
                "--text-from vmlinux: {} cannot be placed at the running kernel's addresses (no symbols to compute the KASLR slide from: give --system-map, and run as root so kallsyms shows addresses)",
                v.path().display()
            ),
            (None, _) if args.text_from == TextFrom::Vmlinux => bail!(
                "--text-from vmlinux: no vmlinux for {} (looked in {}); give --vmlinux PATH (Debian: the linux-image-VERSION-dbg package)",
                release(),
                looked_in(&image::vmlinux_candidates(&release()))
            ),
            _ => {}
        }
    }
    Ok(TextSources { live, image }.into_source())
}

/// The candidate paths, joined for a message.
pub fn looked_in(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `path (N symbols)` for `info`.
pub fn describe_image(img: &KernelImage) -> String {
    let what = if img.has_text() && img.symbols().is_empty() {
        "stripped, no symbols".to_string()
    } else {
        format!("{} symbols", img.symbols().len())
    };
    format!("{} ({what})", display(img.path()))
}

fn display(p: &Path) -> String {
    p.display().to_string()
}
