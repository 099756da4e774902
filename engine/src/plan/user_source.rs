//! Source points in user binaries (uprobes): `p:/PATH:FUNC@+N var`,
//! `p:EV /PATH:@FILE:LINE var`. The binary's DWARF (its own, or a debug
//! file found by build ID or `.gnu_debuglink`) gives the sites and the
//! variables, as for the kernel; each site becomes `/PATH:0xOFFSET`, the
//! file offset the uprobe PMU takes.

use std::path::Path;

use kprobe_perf_symbols::elf::UserBinary;

/// Splits a uprobe target that names a source point into the binary's
/// path and the point (`/usr/bin/prog:main@+3` into `/usr/bin/prog` and
/// `main@+3`). The path holds a `/` (as a uprobe's does; a kernel
/// module's `MOD:SYM` does not), and may itself hold `:`: the first `:`
/// after which a source point follows is the split.
pub(crate) fn split_target(word: &str, is_point: impl Fn(&str) -> bool) -> Option<(&str, &str)> {
    word.match_indices(':').find_map(|(i, _)| {
        let (path, point) = (&word[..i], &word[i + 1..]);
        (path.contains('/') && is_point(point)).then_some((path, point))
    })
}

/// The loadable segments of a binary, to turn its link-time addresses into
/// file offsets.
#[derive(Debug)]
pub(crate) struct Segments {
    path: String,
    /// (file offset, size in the file, virtual address) each.
    segments: Vec<(u64, u64, u64)>,
}

impl Segments {
    /// Reads the program headers of the binary at `path`.
    pub(crate) fn of(path: &str) -> Result<Segments, String> {
        let bin = UserBinary::open(Path::new(path)).map_err(|e| e.to_string())?;
        Ok(Segments {
            path: path.to_string(),
            segments: bin.segments(),
        })
    }

    /// `PATH:0xOFFSET` for the link-time `address`, or why there is none.
    pub(crate) fn target(&self, address: u64) -> Result<String, String> {
        self.segments
            .iter()
            .find(|(_, size, vaddr)| *vaddr <= address && address < vaddr.saturating_add(*size))
            .map(|(off, _, vaddr)| format!("{}:0x{:x}", self.path, address - vaddr + off))
            .ok_or_else(|| {
                format!(
                    "address 0x{address:x} is in no loadable segment of {} (the debug file does not belong to it?)",
                    self.path
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_ends_at_the_first_colon_before_a_point() {
        let point = |s: &str| !s.contains('/') && s.contains('@');
        assert_eq!(
            split_target("/usr/bin/prog:main@+3", point),
            Some(("/usr/bin/prog", "main@+3"))
        );
        assert_eq!(
            split_target("/tmp/a:b/prog:@prog.c:12", point),
            Some(("/tmp/a:b/prog", "@prog.c:12"))
        );
        assert_eq!(split_target("ext4:ext4_file_open@+3", point), None);
        assert_eq!(split_target("/usr/bin/prog:main", point), None);
    }

    #[test]
    fn addresses_become_file_offsets() {
        let s = Segments {
            path: "/p".into(),
            segments: vec![
                (0, 0x600, 0),
                (0x1000, 0x200, 0x1000),
                (0x2db8, 0x260, 0x3db8),
            ],
        };
        assert_eq!(s.target(0x1139).unwrap(), "/p:0x1139");
        assert_eq!(s.target(0x3dc0).unwrap(), "/p:0x2dc0");
        assert!(s.target(0x9000).is_err());
    }
}
