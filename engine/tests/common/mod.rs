//! What the tests that read the engine's sources share.

use std::fs;
use std::path::{Path, PathBuf};

/// The source files below `dir`, test files left out.
pub(crate) fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("reading src/").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && !path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().contains("test"))
        {
            out.push(path);
        }
    }
}
