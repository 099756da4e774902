//! Errors of this crate: each names what failed, where, why, and what to do.

use std::path::PathBuf;

/// Everything that can go wrong while finding, reading or querying debug info.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be opened or mapped.
    #[error("cannot read {path}: {source}; check the path and its permissions")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// The file is not an ELF file this crate can parse.
    #[error("{path} is not a readable ELF file ({reason}); give an ELF vmlinux or binary")]
    Elf {
        /// The file.
        path: PathBuf,
        /// What the ELF parser said.
        reason: String,
    },
    /// The file has no DWARF (.debug_info) at all.
    #[error("{path} has no DWARF debug info (.debug_info is missing); install the debug package (e.g. linux-image-*-dbg) or point at the debug file")]
    NoDwarf {
        /// The file.
        path: PathBuf,
    },
    /// The DWARF in a file is malformed.
    #[error("malformed DWARF in {path} at {context}: {reason}")]
    Dwarf {
        /// The file.
        path: PathBuf,
        /// Which unit or entry was being read.
        context: String,
        /// gimli's reason.
        reason: gimli::Error,
    },
    /// No debug file was found in any of the places searched.
    #[error("no debug info found for {what}; searched: {}{}. Install the debug package or give the file's path", .searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "), servers_asked(.asked))]
    NotFound {
        /// What the search was for (the kernel, or a binary's path).
        what: String,
        /// Every candidate path tried, in order.
        searched: Vec<PathBuf>,
        /// The debuginfod servers asked (`DEBUGINFOD_URLS`), with their
        /// answers; empty when none is set or the build ID is unknown.
        asked: Vec<Attempt>,
    },
    /// The debuginfod client could not run at all.
    #[error("cannot ask the debuginfod servers of DEBUGINFOD_URLS: {reason}")]
    Debuginfod {
        /// Why.
        reason: String,
    },
    /// The supplementary (dwz) file a debug file's DWARF refers to was not found.
    #[error("{path} keeps part of its DWARF in a supplementary file (dwz's .gnu_debugaltlink or DWARF 5's .debug_sup, build ID {build_id}), which is not at {}; install the package's debug files whole (Debian puts them under /usr/lib/debug/.dwz), or put the file at one of those paths", .tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" nor "))]
    NoAltFile {
        /// The debug file.
        path: PathBuf,
        /// The supplementary file's build ID, as the link gives it.
        build_id: String,
        /// The paths tried.
        tried: Vec<PathBuf>,
    },
    /// A debug file's build ID differs from the one of the code it should describe.
    #[error("{path} has build ID {found}, but {what} has {expected}: this debug info belongs to another build and would give wrong addresses; find the debug file of that exact build")]
    BuildIdMismatch {
        /// The debug file.
        path: PathBuf,
        /// The code it was meant for.
        what: String,
        /// The build ID of that code.
        expected: String,
        /// The build ID the debug file has.
        found: String,
    },
    /// A probe point or argument could not be parsed.
    #[error("cannot parse {input:?}: {reason}")]
    Syntax {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The function named in a probe point has no definition in the debug info.
    #[error("function {name} is not in the debug info{}; check the spelling, or list candidates with a glob in the symbol table", .file.as_ref().map(|f| format!(" (in a file matching {f})")).unwrap_or_default())]
    NoFunction {
        /// The function.
        name: String,
        /// The source file it was restricted to, if any.
        file: Option<String>,
    },
    /// A source line has no code that a probe can be put on.
    #[error("{place} has no code a probe can be put on (the compiler emitted none for that line); lines with code: {hint}")]
    NoCodeAtLine {
        /// The line asked for, as the user wrote it.
        place: String,
        /// Nearby lines that do carry code.
        hint: String,
    },
    /// A function the debug info describes with no code of its own.
    #[error("{name} has no code of its own in the debug info (the compiler merged it with an identical function, or dropped it): probe its symbol instead (`p:{name}`), if the kernel has one")]
    NoCodeOfItsOwn {
        /// The function.
        name: String,
    },
    /// A line's code starts at the address of another line, so a probe there
    /// would be reported (and behave) as that other line.
    #[error("{place} shares its address {at} with {other}: the code there starts with that line, so a probe there is that line's; probe {other} instead")]
    SharedLine {
        /// The line asked for (`FUNC:N` or `FILE:LINE`).
        place: String,
        /// The address, as SYMBOL+OFFSET.
        at: String,
        /// The line whose address it shares, spelled the same way.
        other: String,
    },
    /// The source file a lazy pattern (`FUNC;PATTERN`) is matched against
    /// was not found.
    #[error("{point} matches its pattern against the lines of {file}, which is not at {}; give the directory of the source tree its path is relative to", .tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" nor "))]
    NoSource {
        /// The point (`FUNC;PATTERN`).
        point: String,
        /// The source file, as DWARF names it.
        file: String,
        /// The paths tried.
        tried: Vec<PathBuf>,
    },
    /// A variable is not visible in the scope of a probe site.
    #[error("variable {name} is not visible at {site}; variables there: {available}")]
    NoVariable {
        /// The variable.
        name: String,
        /// The site, as SYMBOL+OFFSET.
        site: String,
        /// The variables that are visible there.
        available: String,
    },
    /// A variable exists but does not live at the site's address.
    #[error("variable {name} has no location at {site} (optimized out there); {}", live_advice(.ranges))]
    NotLiveHere {
        /// The variable.
        name: String,
        /// The site, as SYMBOL+OFFSET.
        site: String,
        /// The ranges (as SYMBOL+START..SYMBOL+END) where it has a location; empty when none.
        ranges: Vec<String>,
    },
    /// The location or type of a variable cannot be expressed as a kprobe fetch argument.
    #[error("cannot fetch {name} at {site}: {reason}")]
    Unsupported {
        /// The variable or expression.
        name: String,
        /// The site, as SYMBOL+OFFSET.
        site: String,
        /// Why (e.g. "DW_OP_entry_value is not supported: the value is the caller's, not kept").
        reason: String,
    },
    /// A field, index or cast does not fit the variable's type.
    #[error("{expr} at {site}: {reason}")]
    Type {
        /// The argument expression.
        expr: String,
        /// The site, as SYMBOL+OFFSET.
        site: String,
        /// What does not fit.
        reason: String,
    },
    /// The index cache could not be written (reading falls back to a rebuild).
    #[error("cannot write the index cache {path}: {source}; queries still work, but the next process rebuilds the index")]
    Cache {
        /// The cache file.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
}

fn live_advice(ranges: &[String]) -> String {
    if ranges.is_empty() {
        "it has no location anywhere in this copy of the function; fetch another variable, or probe another copy".into()
    } else {
        format!(
            "it lives at {}; put the probe inside one of those ranges",
            ranges.join(", ")
        )
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// What one debuginfod server answered when asked for a build ID (see
/// [`Error::NotFound`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The server's URL, as `DEBUGINFOD_URLS` gives it.
    pub url: String,
    /// Why it gave nothing: "not found", or curl's message.
    pub reason: String,
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `; and the debuginfod servers URL (answer), ...` for [`Error::NotFound`].
fn servers_asked(asked: &[Attempt]) -> String {
    if asked.is_empty() {
        return String::new();
    }
    let list: Vec<String> = asked
        .iter()
        .map(|a| format!("{} ({})", a.url, a.reason))
        .collect();
    format!("; and the debuginfod servers {}", list.join(", "))
}
