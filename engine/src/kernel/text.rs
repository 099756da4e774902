//! Where kernel text bytes and function sizes come from: `/proc/kcore` (the
//! live text) first, a vmlinux matched to the running kernel when kcore
//! cannot be read or when asked.

use std::path::PathBuf;
use std::sync::Arc;

use kprobe_perf_symbols::image::{ImageError, KaslrSlide, KernelImage};

use super::{first_existing, Kernel, KernelError, SizesFrom, TextFrom};
use crate::kernel::kcore::{ImageText, Kcore, TextSources};

/// A vmlinux and System.map matched to the running kernel.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct KernelImages {
    /// The image with bytes (a vmlinux), if one was found and matches.
    pub vmlinux: Option<Arc<KernelImage>>,
    /// The System.map, if one was read.
    pub system_map: Option<KernelImage>,
    /// The slide, from the vmlinux's symbols or else the System.map's.
    pub slide: Option<KaslrSlide>,
}

/// A vmlinux or System.map found where distributions install them but
/// left out, and why.
#[derive(Debug)]
#[non_exhaustive]
pub struct SkippedImage {
    /// The file.
    pub path: PathBuf,
    /// Why it is not used.
    pub error: ImageError,
}

/// Finds, reads and checks the vmlinux and System.map. Given paths that
/// fail or do not match are errors; found ones that do not match are
/// added to `skipped` and left out.
pub(super) fn match_images(
    kernel: &Kernel,
    skipped: &mut Vec<SkippedImage>,
) -> Result<KernelImages, KernelError> {
    let options = &kernel.options;
    let symbols = &kernel.symbols;
    let running = kernel.running_build_id();
    let mut out = KernelImages::default();
    let explicit_map = options.system_map.is_some();
    let map_path = options
        .system_map
        .clone()
        .or_else(|| first_existing(kernel.system_map_candidates()));
    if let Some(path) = map_path {
        match KernelImage::open_system_map(&path) {
            Ok(m) => out.system_map = Some(m),
            Err(e) if explicit_map => return Err(KernelError::from(e)),
            Err(_) => {} // Debian's /boot placeholder: nothing to use.
        }
    }
    let explicit = options.vmlinux.is_some();
    let vmlinux_path = options
        .vmlinux
        .clone()
        .or_else(|| first_existing(kernel.vmlinux_candidates()));
    if let Some(path) = vmlinux_path {
        let checked = KernelImage::open_vmlinux(&path).and_then(|v| {
            check_build_id(&v, running)?;
            Ok(v)
        });
        match checked {
            Ok(v) => out.vmlinux = Some(Arc::new(v)),
            Err(e) if explicit => return Err(KernelError::from(e)),
            Err(error) => skipped.push(SkippedImage { path, error }),
        }
    }
    // The slide: from the vmlinux's symbol table, else the System.map's.
    let with_symbols = out
        .vmlinux
        .as_deref()
        .filter(|v| !v.symbols().is_empty())
        .or(out.system_map.as_ref());
    if let Some(img) = with_symbols {
        match img.slide_against(symbols, running) {
            Ok(s) => out.slide = Some(s),
            Err(e) if explicit || explicit_map => return Err(KernelError::from(e)),
            Err(error) => {
                skipped.push(SkippedImage {
                    path: img.path().to_path_buf(),
                    error,
                });
                out.vmlinux = None;
                out.system_map = None;
            }
        }
    }
    // A System.map that disagrees with the vmlinux's own slide.
    if let (Some(map), Some(slide)) = (&out.system_map, out.slide) {
        if let Some(own) = map.slide_against(symbols, None).ok().map(|s| s.slide) {
            if own != slide.slide {
                return Err(KernelError::ImagesDisagree {
                    system_map: map.path().to_path_buf(),
                    map_slide: own,
                    vmlinux_slide: slide.slide,
                });
            }
        }
    }
    Ok(out)
}

fn check_build_id(v: &KernelImage, running: Option<&[u8]>) -> Result<(), ImageError> {
    if let (Some(a), Some(b)) = (v.build_id(), running) {
        if a != b {
            let hex = |x: &[u8]| x.iter().map(|b| format!("{b:02x}")).collect::<String>();
            return Err(ImageError::BuildIdMismatch {
                path: v.path().to_path_buf(),
                image: hex(a),
                running: hex(b),
            });
        }
    }
    Ok(())
}

/// The kernel text for checks: kcore, a matched vmlinux, or both (live
/// bytes, vmlinux sizes). With [`SizesFrom::Vmlinux`] a vmlinux is read
/// even when kcore is readable; otherwise a found vmlinux is read only
/// when kcore is not. None when there is no source.
pub(super) fn open_text(kernel: &Kernel) -> Result<Option<TextSources>, KernelError> {
    let options = &kernel.options;
    let live = match options.text_from {
        TextFrom::Vmlinux => None,
        TextFrom::Auto => Kcore::open().ok(),
        TextFrom::Kcore => Some(Kcore::open().map_err(|source| KernelError::Kcore { source })?),
    };
    let want_image = options.vmlinux.is_some()
        || options.text_from == TextFrom::Vmlinux
        || (options.text_from == TextFrom::Auto
            && (live.is_none() || options.sizes_from == SizesFrom::Vmlinux));
    let mut image = None;
    if want_image {
        let m = kernel.images()?;
        match (&m.vmlinux, m.slide) {
            (Some(v), Some(slide)) => image = Some(ImageText::new(Arc::clone(v), slide)),
            (Some(v), None) if options.text_from == TextFrom::Vmlinux => {
                return Err(KernelError::Unplaced {
                    path: v.path().to_path_buf(),
                })
            }
            (None, _) if options.text_from == TextFrom::Vmlinux => {
                return Err(KernelError::NoVmlinux {
                    release: kernel.release().to_string(),
                    candidates: kernel.vmlinux_candidates(),
                })
            }
            _ => {}
        }
    }
    Ok(match (live, image) {
        (None, None) => None,
        (live, image) => Some(TextSources { live, image }),
    })
}
