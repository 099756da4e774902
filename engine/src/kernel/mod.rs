//! The running kernel as the engine sees it: its symbols (`/proc/kallsyms`)
//! with the kprobe blacklist, the vmlinux and System.map matched to it
//! (build ID, KASLR slide), and where the bytes of its text come from
//! (`/proc/kcore`, else the vmlinux). [`Kernel`] gathers them once and
//! offers what needs them: glob expansion ([`Kernel::expand_globs`]),
//! planning ([`Kernel::plan`]) and the checks made before anything is
//! opened ([`Kernel::check`], [`Kernel::preflight`]).
//!
//! ```no_run
//! use kprobe_perf_engine::{BackendChoice, GlobOptions, Kernel, KernelOptions};
//!
//! # fn main() -> Result<(), kprobe_perf_engine::Error> {
//! let kernel = Kernel::discover(KernelOptions::default())?;
//! if let Some(e) = kernel.blacklist_error() {
//!     eprintln!("the kprobe blacklist is not checked: {e}");
//! }
//! // One definition per function the glob keeps (or fprobe events).
//! let specs: Vec<String> = kernel
//!     .expand_globs(&["p:vfs_read*"], &GlobOptions::default())?
//!     .into_iter()
//!     .flat_map(|e| e.definitions)
//!     .collect();
//! let plans = kernel.plan(&specs, BackendChoice::Auto)?;
//! // Refuses what the kernel would refuse (a mid-instruction offset, a
//! // blacklisted or notrace function) before a probe is opened.
//! kernel.check(&plans)?;
//! # Ok(())
//! # }
//! ```

pub(crate) mod error;
mod globs;
pub(crate) mod kcore;
pub mod module_debug;
mod pending;
pub mod preflight;
pub mod select;
pub mod source;
mod text;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

pub use kprobe_perf_symbols::file::open_regular;
pub use kprobe_perf_symbols::image::{ImageError, ImageSymbol, KaslrSlide, KernelImage};
pub use kprobe_perf_symbols::prototypes::VMLINUX_BTF;
pub use kprobe_perf_symbols::{
    glob_match, is_glob, Blacklist, BlacklistError, Symbol, SymbolsError, BLACKLIST_PATH,
};

pub use error::{looked_in, KernelError};
pub use globs::{
    glob_route, Expanded, ExpandedAs, FprobeRoute, GlobOptions, GlobRoute, NotraceBy, Selection,
    MAX_FPROBE_SPLIT,
};
pub use text::{KernelImages, SkippedImage};

use crate::kernel::kcore::TextSources;
use crate::kernel::preflight::{KernelTextSource, Preflight};
use crate::plan::BackendChoice;
use crate::plan::{PlanError, ProbePlan};
use kprobe_perf_arch::Arch;
use kprobe_perf_symbols::KernelSymbols;

/// Where kernel text bytes come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TextFrom {
    /// `/proc/kcore` when readable, else a vmlinux.
    #[default]
    Auto,
    /// `/proc/kcore` only.
    Kcore,
    /// The vmlinux only (its link-time bytes, moved by the KASLR slide:
    /// runtime patching of jump labels, static calls and alternatives is
    /// not seen).
    Vmlinux,
}

/// Where exact function sizes come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SizesFrom {
    /// The distance to the next kallsyms symbol, unless a vmlinux is read
    /// for its bytes anyway (its ELF sizes are then used).
    #[default]
    Kallsyms,
    /// A vmlinux's symbol table whenever one is found, even when
    /// `/proc/kcore` gives the bytes (what a listing of a function wants:
    /// its alignment padding told apart from its code).
    Vmlinux,
}

/// What [`Kernel::discover`] reads besides kallsyms and the blacklist.
/// Build it from [`Default`] with the setters:
/// `KernelOptions::default().vmlinux(path).text_from(TextFrom::Kcore)`.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct KernelOptions {
    /// The running kernel's vmlinux; `None`: the first of
    /// [`Kernel::vmlinux_candidates`] that exists. A given one that cannot
    /// be read or does not match is an error; a found one is skipped
    /// ([`Kernel::take_skipped`]).
    pub vmlinux: Option<PathBuf>,
    /// The running kernel's System.map (symbols for a stripped vmlinux,
    /// and a check of the slide); `None`: the first of
    /// [`Kernel::system_map_candidates`] that exists.
    pub system_map: Option<PathBuf>,
    /// Where kernel text bytes come from.
    pub text_from: TextFrom,
    /// Where exact function sizes come from.
    pub sizes_from: SizesFrom,
    /// The given vmlinux describes another kernel than the running one:
    /// its debug info answers for that kernel (definitions to use there)
    /// instead of being refused for its build ID. Only source listings
    /// use it.
    pub other_kernel: bool,
    /// Where source files are looked for (perf probe's `-s`): the lines a
    /// source point's lazy pattern (`FUNC@;PATTERN`) is matched against.
    /// `None`: the compilation directory the DWARF names.
    pub source_dir: Option<PathBuf>,
    /// Debug files of kernel modules (`.ko` with DWARF), each for the
    /// module its file name names (`9p.ko`: `9p`): used for that
    /// module's source points instead of looking for one (see
    /// [`Kernel::module_debug_info`]).
    pub module_debug: Vec<PathBuf>,
}

impl KernelOptions {
    /// Looks source files up under `dir` (see [`source_dir`](Self::source_dir)).
    pub fn source_dir(mut self, dir: impl Into<Option<PathBuf>>) -> Self {
        self.source_dir = dir.into();
        self
    }

    /// Uses these debug files for the modules their names name (see
    /// [`module_debug`](Self::module_debug)).
    pub fn module_debug(mut self, paths: Vec<PathBuf>) -> Self {
        self.module_debug = paths;
        self
    }

    /// Uses this vmlinux (or, with `None`, looks for one).
    pub fn vmlinux(mut self, path: impl Into<Option<PathBuf>>) -> Self {
        self.vmlinux = path.into();
        self
    }

    /// Uses this System.map (or, with `None`, looks for one).
    pub fn system_map(mut self, path: impl Into<Option<PathBuf>>) -> Self {
        self.system_map = path.into();
        self
    }

    /// Takes kernel text bytes from `from`.
    pub fn text_from(mut self, from: TextFrom) -> Self {
        self.text_from = from;
        self
    }

    /// Lets a given vmlinux of another build answer source listings
    /// (see [`other_kernel`](Self::other_kernel)).
    pub fn other_kernel(mut self, yes: bool) -> Self {
        self.other_kernel = yes;
        self
    }

    /// Takes exact function sizes from `from`.
    pub fn sizes_from(mut self, from: SizesFrom) -> Self {
        self.sizes_from = from;
        self
    }
}

/// The running kernel: its symbols and blacklist, read at once; its
/// vmlinux, System.map and text source, found and matched on first use
/// and kept.
pub struct Kernel {
    symbols: KernelSymbols,
    blacklist_error: Option<BlacklistError>,
    options: KernelOptions,
    release: String,
    arch: Option<Arch>,
    running_build_id: Option<Vec<u8>>,
    images: OnceLock<KernelImages>,
    debug_info: OnceLock<Arc<source::DebugFile>>,
    module_debug: Mutex<std::collections::HashMap<String, Arc<source::DebugFile>>>,
    text: OnceLock<Option<TextSources>>,
    skipped: Mutex<Vec<SkippedImage>>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("release", &self.release)
            .field("arch", &self.arch)
            .field("symbols", &self.symbols.len())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Kernel {
    /// Reads `/proc/kallsyms` and the kprobe blacklist of the running
    /// kernel. A blacklist that cannot be read is not an error (see
    /// [`blacklist_error`](Self::blacklist_error)); kallsyms is. The
    /// vmlinux, System.map and text are looked for on first use.
    pub fn discover(options: KernelOptions) -> Result<Kernel, KernelError> {
        let symbols = KernelSymbols::load().map_err(KernelError::from)?;
        Ok(Self::with_symbols(symbols, options))
    }

    /// As [`discover`](Self::discover), over `symbols` instead of
    /// `/proc/kallsyms`: a captured table, or an empty one when kallsyms
    /// cannot be read (probes then go by name, for the kernel to resolve).
    pub fn with_symbols(mut symbols: KernelSymbols, options: KernelOptions) -> Kernel {
        let blacklist_error = match Blacklist::load() {
            Ok(b) => {
                symbols.set_blacklist(b);
                None
            }
            Err(e) => Some(e),
        };
        Kernel {
            symbols,
            blacklist_error,
            options,
            release: running_release(),
            arch: running_arch(),
            running_build_id: kprobe_perf_symbols::image::running_build_id(),
            images: OnceLock::new(),
            debug_info: OnceLock::new(),
            module_debug: Mutex::new(std::collections::HashMap::new()),
            text: OnceLock::new(),
            skipped: Mutex::new(Vec::new()),
        }
    }

    /// The symbols, with the blacklist when it was readable.
    pub fn symbols(&self) -> &KernelSymbols {
        &self.symbols
    }

    /// The symbols, keeping nothing else (the text source and images are
    /// closed): the table a recording symbolizes with.
    pub fn into_symbols(self) -> KernelSymbols {
        self.symbols
    }

    /// The options given.
    pub fn options(&self) -> &KernelOptions {
        &self.options
    }

    /// The kprobe blacklist, when it was readable.
    pub fn blacklist(&self) -> Option<&Blacklist> {
        self.symbols.blacklist()
    }

    /// Why the blacklist could not be read (debugfs not mounted, no
    /// privilege): blacklisted functions are then left for the kernel to
    /// refuse.
    pub fn blacklist_error(&self) -> Option<&BlacklistError> {
        self.blacklist_error.as_ref()
    }

    /// `uname -r` (empty when unknown).
    pub fn release(&self) -> &str {
        &self.release
    }

    /// The running kernel's architecture (`/proc/sys/kernel/arch`, else
    /// this build's), which decides how its text is decoded.
    pub fn arch(&self) -> Result<Arch, KernelError> {
        self.arch
            .ok_or(KernelError::Plan(PlanError::UnsupportedArch))
    }

    /// The running kernel's GNU build ID (`/sys/kernel/notes`), when it
    /// shows one.
    pub fn running_build_id(&self) -> Option<&[u8]> {
        self.running_build_id.as_deref()
    }

    /// Where a vmlinux is looked for when none is given, in order.
    pub fn vmlinux_candidates(&self) -> Vec<PathBuf> {
        kprobe_perf_symbols::image::vmlinux_candidates(&self.release)
    }

    /// Where the kernel's DWARF is looked for when no vmlinux is given, in
    /// order: [`vmlinux_candidates`](Self::vmlinux_candidates), then
    /// `/usr/lib/debug/.build-id/NN/REST.debug` by the running kernel's
    /// build ID.
    pub fn debug_info_candidates(&self) -> Vec<PathBuf> {
        source::candidates(self.vmlinux_candidates(), self.running_build_id())
    }

    /// The running kernel's debug file (a vmlinux with DWARF): the given
    /// vmlinux, else the first of
    /// [`debug_info_candidates`](Self::debug_info_candidates) with DWARF
    /// and the running kernel's build ID; found once, then kept. A given
    /// file of another build is refused (unless
    /// [`KernelOptions::other_kernel`]). Only source points and listings
    /// look for it.
    pub fn debug_info(&self) -> Result<&source::DebugFile, KernelError> {
        if let Some(f) = self.debug_info.get() {
            return Ok(f);
        }
        let found = source::find(
            self.options.vmlinux.as_deref(),
            self.debug_info_candidates(),
            self.running_build_id(),
            self.options.other_kernel,
            true,
        )?;
        let _ = self.debug_info.set(Arc::new(found));
        self.debug_info
            .get()
            .map(|f| &**f)
            .ok_or_else(|| unreachable_cell("the debug info"))
    }

    /// [`debug_info`](Self::debug_info) as far as local files go: the one
    /// found already, else the local candidates, without asking a
    /// debuginfod server (a report, as `info`'s, must not start a
    /// download of hundreds of megabytes).
    pub fn local_debug_info(&self) -> Result<Arc<source::DebugFile>, KernelError> {
        if let Some(f) = self.debug_info.get() {
            return Ok(Arc::clone(f));
        }
        Ok(Arc::new(source::find(
            self.options.vmlinux.as_deref(),
            self.debug_info_candidates(),
            self.running_build_id(),
            self.options.other_kernel,
            false,
        )?))
    }

    /// Where the debug file of module `name` is looked for when none is
    /// given for it, in order: Debian's -dbg layout
    /// (`/usr/lib/debug/lib/modules/RELEASE/` and the module's path from
    /// `modules.dep`, uncompressed), `/usr/lib/debug/.build-id/NN/REST.debug`
    /// by the loaded module's build ID, the installed module itself.
    pub(crate) fn module_debug_candidates(&self, name: &str) -> Vec<PathBuf> {
        let id = module_debug::loaded_build_id(name);
        module_debug::candidates(&self.release, name, id.as_deref())
    }

    /// The debug file of kernel module `name` (its `.ko` with DWARF): the
    /// one given for it ([`KernelOptions::module_debug`]); else the first
    /// file with DWARF and the loaded module's build ID (the installed
    /// module's when it is not loaded) among Debian's -dbg layout
    /// (`/usr/lib/debug/lib/modules/RELEASE/` and the module's path from
    /// `modules.dep`), `/usr/lib/debug/.build-id/NN/REST.debug` and the
    /// installed module itself; else the debuginfod servers' file of that
    /// build ID. A given file of another build is refused (unless
    /// [`KernelOptions::other_kernel`]). Found once, then kept.
    pub fn module_debug_info(&self, name: &str) -> Result<Arc<source::DebugFile>, KernelError> {
        self.find_module_debug(name, true)
    }

    /// [`module_debug_info`](Self::module_debug_info) as far as local
    /// files go (for a report: no debuginfod server is asked).
    pub fn local_module_debug_info(
        &self,
        name: &str,
    ) -> Result<Arc<source::DebugFile>, KernelError> {
        self.find_module_debug(name, false)
    }

    fn find_module_debug(
        &self,
        name: &str,
        ask_servers: bool,
    ) -> Result<Arc<source::DebugFile>, KernelError> {
        let key = module_debug::normalize(name);
        let mut cache = self
            .module_debug
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(f) = cache.get(&key) {
            return Ok(Arc::clone(f));
        }
        let want = module_debug::wanted_build_id(&self.release, name);
        let found = Arc::new(module_debug::find(
            name,
            &self.options.module_debug,
            self.module_debug_candidates(name),
            want.as_deref(),
            self.options.other_kernel,
            ask_servers,
        )?);
        cache.insert(key, Arc::clone(&found));
        Ok(found)
    }

    /// What names kernel frames from DWARF
    /// ([`StackSymbolizer::with_kernel_dwarf`](crate::StackSymbolizer::with_kernel_dwarf)):
    /// the running kernel's debug file ([`Kernel::debug_info`]) and its
    /// KASLR slide, from `_text` and checked on functions spread over the
    /// kernel (a file of another build is refused).
    pub fn kernel_dwarf(&self) -> Result<(PathBuf, u64), KernelError> {
        let path = self.debug_info()?.path().to_path_buf();
        let image = KernelImage::open_vmlinux(&path).map_err(KernelError::from)?;
        let slide = image
            .slide_against(&self.symbols, self.running_build_id())
            .map_err(KernelError::from)?;
        Ok((path, slide.slide))
    }

    /// One definition per site of a definition whose probe point is a
    /// source point (`p:do_sys_openat2@+8 fd`, or a user binary's
    /// `p:/usr/bin/prog:main@+3 argc`, from the binary's own DWARF or its
    /// debug file; see docs/probes.md); `None`
    /// for any other definition, which is left as written and costs no
    /// debug info. `inlines`: also the function's inlined copies.
    pub fn expand_source(
        &self,
        definition: &str,
        inlines: bool,
    ) -> Result<Option<source::SourceExpansion>, KernelError> {
        if !source::names_source_point(definition) {
            return Ok(None);
        }
        let dir = self.options.source_dir.as_deref();
        if let Some(binary) = source::user_binary(definition) {
            let file = source::find_user(binary)?;
            return Ok(Some(source::expand(&file, definition, inlines, dir)?));
        }
        if let Some(module) = source::module_name(definition) {
            let file = self.module_debug_info(module)?;
            return Ok(Some(source::expand(&file, definition, inlines, dir)?));
        }
        Ok(Some(source::expand(
            self.debug_info()?,
            definition,
            inlines,
            self.options.source_dir.as_deref(),
        )?))
    }

    /// The lines of function `name` a probe can go on, from the kernel's
    /// DWARF (perf probe -L's numbered lines; `in_file`: the one defined
    /// in a file ending so), with each line's first statement offset in
    /// the function when known.
    pub fn function_lines(
        &self,
        name: &str,
        in_file: Option<&str>,
    ) -> Result<(source::FunctionLines, Vec<Option<u64>>), KernelError> {
        let file = self.debug_info()?;
        let range = symbol_range(file.path(), name);
        source::function_lines(file, name, in_file, range)
    }

    /// [`function_lines`](Self::function_lines) of a function of the
    /// user binary `binary`, from its DWARF or its debug file (found as
    /// for its source points), the offsets from its symbol table.
    pub fn user_function_lines(
        &self,
        binary: &str,
        name: &str,
        in_file: Option<&str>,
    ) -> Result<(source::FunctionLines, Vec<Option<u64>>), KernelError> {
        let file = source::find_user(binary)?;
        let range = symbol_range(Path::new(binary), name);
        source::function_lines(&file, name, in_file, range)
    }

    /// [`function_lines`](Self::function_lines) of a function of kernel
    /// module `module`, from its debug file (found as for its source
    /// points). No offsets: the lines are numbered, each with its
    /// `file:line`.
    pub fn module_function_lines(
        &self,
        module: &str,
        name: &str,
        in_file: Option<&str>,
    ) -> Result<(source::FunctionLines, Vec<Option<u64>>), KernelError> {
        let file = self.module_debug_info(module)?;
        source::function_lines(&file, name, in_file, None)
    }

    /// The variables at each site of a point (`FUNC`, `FUNC:RLINE`,
    /// `FILE:LINE` as perf writes them, or `FUNC@+N`; a user binary's
    /// `/PATH:FUNC@+N`), with their types.
    pub fn source_variables(
        &self,
        point: &str,
        inlines: bool,
    ) -> Result<Vec<source::SiteVariables>, KernelError> {
        let as_definition = format!("p:{point}");
        if let Some(binary) = source::user_binary(&as_definition) {
            let file = source::find_user(binary)?;
            return source::variables(&file, point, inlines);
        }
        if let Some(module) = source::module_name(&as_definition) {
            let file = self.module_debug_info(module)?;
            return source::variables(&file, point, inlines);
        }
        source::variables(self.debug_info()?, point, inlines)
    }

    /// Where a System.map is looked for when none is given, in order.
    pub fn system_map_candidates(&self) -> Vec<PathBuf> {
        kprobe_perf_symbols::image::system_map_candidates(&self.release)
    }

    /// The vmlinux and System.map, found (or as given), read and matched
    /// to the running kernel; once, then kept. A given file that fails is
    /// an error; a found one that fails is left out, and said in
    /// [`take_skipped`](Self::take_skipped).
    pub fn images(&self) -> Result<&KernelImages, KernelError> {
        if let Some(m) = self.images.get() {
            return Ok(m);
        }
        let mut skipped = Vec::new();
        // Stored, or an error: what was skipped is said once.
        let stored = text::match_images(self, &mut skipped).map(|m| self.images.set(m).is_ok());
        if *stored.as_ref().unwrap_or(&true) {
            if let Ok(mut s) = self.skipped.lock() {
                s.extend(skipped);
            }
        }
        stored?;
        self.images
            .get()
            .ok_or_else(|| unreachable_cell("the kernel images"))
    }

    /// The images found but left out since the last call (another
    /// kernel's build, no matching slide, unreadable), for the caller to
    /// report.
    pub fn take_skipped(&self) -> Vec<SkippedImage> {
        self.skipped
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    }

    /// Where kernel text bytes come from, as the options ask: the live
    /// text, a matched vmlinux, or both (live bytes, vmlinux sizes);
    /// opened once, then kept. `None` when there is no source (not root
    /// and no vmlinux): the kernel then decides what it accepts.
    pub fn text(&self) -> Result<Option<&dyn KernelTextSource>, KernelError> {
        if self.text.get().is_none() {
            let opened = text::open_text(self)?;
            let _ = self.text.set(opened);
        }
        Ok(self
            .text
            .get()
            .and_then(Option::as_ref)
            .map(|t| t as &dyn KernelTextSource))
    }

    /// The checks over this kernel's symbols and text; `None` when there
    /// is no text to check against.
    pub fn preflight(&self) -> Result<Option<Preflight<'_>>, KernelError> {
        let Some(text) = self.text()? else {
            return Ok(None);
        };
        Ok(Some(
            Preflight::new(&self.symbols, text, self.arch()?).with_release(&self.release),
        ))
    }

    /// Refuses, before anything is opened, a probe the kernel would refuse
    /// (a mid-instruction offset, a notrace or blacklisted function ...),
    /// when the kernel's text is readable; otherwise the kernel decides.
    /// A probe on a module that is not loaded
    /// ([`ProbePlan::pending_module`]) is checked against the module's
    /// `.ko` (given with [`KernelOptions::module_debug`], else found
    /// through `/lib/modules/RELEASE/modules.dep`).
    pub fn check(&self, plans: &[ProbePlan]) -> Result<(), KernelError> {
        for p in plans {
            if let Some(m) = &p.pending_module {
                pending::check(p, m, &self.release, &self.options.module_debug)?;
            }
        }
        let Some(pre) = self.preflight()? else {
            return Ok(());
        };
        for p in plans {
            pre.check(p)?;
        }
        Ok(())
    }

    /// Parses and plans probe definitions (kprobe_events syntax) against
    /// this kernel's symbols for this machine's architecture: the way to
    /// make [`ProbePlan`]s for a [`Session`](crate::Session). With
    /// [`Auto`](BackendChoice::Auto) and many kernel probes (64 or more),
    /// all kernel probes go through tracefs. Event names that repeat get
    /// a `_2`, `_3` ... suffix so each probe stays distinct. The plans are
    /// the given probes only, in order. Every error a user can make (bad
    /// syntax, unknown symbol, `$retval` on an entry probe ...) is
    /// reported here, before anything is opened; [`Kernel::check`] adds
    /// what the kernel's text shows.
    pub fn plan<S: AsRef<str>>(
        &self,
        specs: &[S],
        choice: BackendChoice,
    ) -> Result<Vec<ProbePlan>, KernelError> {
        Ok(crate::plan::probes::plan_probes_with(
            specs,
            &self.symbols,
            choice,
        )?)
    }

    /// As [`Kernel::plan`], each definition with its filter (`None`: no
    /// filter) in the kernel's ftrace grammar. A filter is checked against
    /// its probe's arguments before anything is opened (a refusal has a
    /// caret under the token). With [`Auto`](BackendChoice::Auto), a probe
    /// whose filter the kernel could run only on a tracefs-defined event
    /// (it tests an argument, which a PMU probe's record does not carry)
    /// goes through tracefs, so that the kernel drops what the filter
    /// rejects before it reaches the ring.
    pub fn plan_filtered<S: AsRef<str>, F: AsRef<str>>(
        &self,
        specs: &[(S, Option<F>)],
        choice: BackendChoice,
    ) -> Result<Vec<ProbePlan>, KernelError> {
        Ok(crate::plan::probes::plan_probes_filtered(
            specs,
            &self.symbols,
            choice,
        )?)
    }
}

fn unreachable_cell(what: &str) -> KernelError {
    KernelError::Internal {
        what: format!("{what}: a value just stored is missing"),
    }
}

/// `uname -r` of the running kernel (empty when unknown).
pub fn running_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| r.trim().to_string())
        .unwrap_or_default()
}

/// The running kernel's architecture (`/proc/sys/kernel/arch`, as
/// `uname -m` says it); the build's own when that file is missing.
fn running_arch() -> Option<Arch> {
    std::fs::read_to_string("/proc/sys/kernel/arch")
        .ok()
        .and_then(|m| Arch::from_machine(&m))
        .or_else(Arch::host)
}

fn first_existing(paths: Vec<PathBuf>) -> Option<PathBuf> {
    paths.into_iter().find(|p| p.is_file())
}

/// The address range of the first function named `name` in the symbol
/// table of the ELF file at `path`, if it has one.
fn symbol_range(path: &Path, name: &str) -> Option<(u64, u64)> {
    let image = KernelImage::open_vmlinux(path).ok()?;
    let found = image.lookup(name);
    let f = found.first()?;
    Some((f.address, f.address.saturating_add(f.size.max(1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbols() -> KernelSymbols {
        KernelSymbols::parse(
            "ffffffff81000000 T _text\n\
             ffffffff81100000 T vfs_read\n\
             ffffffff81100100 T vfs_readv\n\
             ffffffff81100200 T vfs_write\n",
        )
        .unwrap()
    }

    #[test]
    fn a_kernel_can_be_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Kernel>();
    }

    #[test]
    fn the_text_is_opened_only_when_a_glob_or_a_check_needs_it() {
        let missing = PathBuf::from("/nonexistent/vmlinux");
        let kernel = Kernel::with_symbols(
            symbols(),
            KernelOptions::default()
                .vmlinux(missing.clone())
                .text_from(TextFrom::Vmlinux),
        );
        // No glob: the definitions pass through, the vmlinux is not read.
        let expanded = kernel
            .expand_globs(&["p:vfs_read", "r:vfs_write"], &GlobOptions::default())
            .unwrap();
        assert_eq!(
            expanded
                .iter()
                .map(|e| (e.definitions.clone(), e.how.clone()))
                .collect::<Vec<_>>(),
            [
                (vec!["p:vfs_read".to_string()], ExpandedAs::Unchanged),
                (vec!["r:vfs_write".to_string()], ExpandedAs::Unchanged)
            ]
        );
        // A glob reads it: the given vmlinux that cannot be read is an
        // error naming it, and so is the check of a plan.
        let e = kernel
            .expand_globs(&["p:vfs_*"], &GlobOptions::default())
            .unwrap_err();
        match e {
            KernelError::Image(ImageError::Read { path, source }) => {
                assert_eq!(path, missing);
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
        let plans = kernel.plan(&["p:vfs_read"], BackendChoice::Pmu).unwrap();
        assert_eq!(plans.len(), 1);
        assert!(matches!(
            kernel.check(&plans),
            Err(KernelError::Image(ImageError::Read { .. }))
        ));
        assert!(kernel.take_skipped().is_empty());
    }

    #[test]
    fn messages_name_what_to_give_not_an_option() {
        let e = KernelError::NoVmlinux {
            release: "6.1.0-50-amd64".into(),
            candidates: vec!["/boot/vmlinux-6.1.0-50-amd64".into(), "/a/vmlinux".into()],
        };
        assert_eq!(
            e.to_string(),
            "no vmlinux for 6.1.0-50-amd64 (looked in /boot/vmlinux-6.1.0-50-amd64, /a/vmlinux); give the vmlinux path (Debian: the linux-image-VERSION-dbg package)"
        );
        let e = KernelError::Unplaced {
            path: "/boot/vmlinux".into(),
        };
        assert_eq!(
            e.to_string(),
            "/boot/vmlinux cannot be placed at the running kernel's addresses (no symbols to compute the KASLR slide from: give the System.map too, and run as root so kallsyms shows addresses)"
        );
    }
}
