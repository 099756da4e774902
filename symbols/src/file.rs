//! Opening the files a user names (a uprobe's binary, a vmlinux, a
//! System.map, a perf.data file) as regular files only: a FIFO would block
//! the open or the read forever, and `/dev/zero` would never end.

use std::fmt;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What a path names when it is not a regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotRegular {
    /// A directory.
    Directory,
    /// A FIFO (named pipe).
    Fifo,
    /// A character device (`/dev/zero`, a terminal).
    CharDevice,
    /// A block device (a disk).
    BlockDevice,
    /// A Unix socket.
    Socket,
    /// Anything else.
    Other,
}

impl fmt::Display for NotRegular {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotRegular::Directory => "it is a directory, not a regular file",
            NotRegular::Fifo => "it is a FIFO (named pipe), not a regular file",
            NotRegular::CharDevice => "it is a character device, not a regular file",
            NotRegular::BlockDevice => "it is a block device, not a regular file",
            NotRegular::Socket => "it is a socket, not a regular file",
            NotRegular::Other => "it is not a regular file",
        })
    }
}

impl std::error::Error for NotRegular {}

/// A regular file larger than a reader accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    /// The file's size in bytes.
    pub size: u64,
    /// The most the reader takes.
    pub max: u64,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let max = match self.max {
            m if m >= 1 << 30 && m % (1 << 30) == 0 => format!("{} GiB", m >> 30),
            m if m >= 1 << 20 && m % (1 << 20) == 0 => format!("{} MiB", m >> 20),
            m => format!("{m} bytes"),
        };
        write!(
            f,
            "it is {} bytes, more than the {max} read at most",
            self.size
        )
    }
}

impl std::error::Error for TooLarge {}

fn check(meta: &Metadata) -> io::Result<()> {
    let t = meta.file_type();
    if t.is_file() {
        return Ok(());
    }
    let what = if t.is_dir() {
        NotRegular::Directory
    } else if t.is_fifo() {
        NotRegular::Fifo
    } else if t.is_char_device() {
        NotRegular::CharDevice
    } else if t.is_block_device() {
        NotRegular::BlockDevice
    } else if t.is_socket() {
        NotRegular::Socket
    } else {
        NotRegular::Other
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, what))
}

/// Opens `path` (symbolic links followed) for reading if it is a regular
/// file, and returns it with its size. Anything else is an error of kind
/// `InvalidInput` whose inner error is a [`NotRegular`]. The type is
/// checked before the open, so no device is opened, and again on the open
/// file, which is opened `O_NONBLOCK` so that a FIFO swapped in between
/// cannot block (the flag changes nothing for a regular file).
pub fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    check(&std::fs::metadata(path)?)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    check(&meta)?;
    Ok((file, meta.len()))
}

/// Reads the regular file at `path` whole, refusing one of more than
/// `max` bytes (a [`TooLarge`] error, of kind `InvalidInput`). No more
/// than the size seen at the open is read, should the file grow.
pub fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let (file, size) = open_regular(path)?;
    if size > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            TooLarge { size, max },
        ));
    }
    // Memory short of the file's size is an error, not an abort.
    let mut data = Vec::new();
    usize::try_from(size)
        .ok()
        .and_then(|n| data.try_reserve_exact(n).ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("it is {size} bytes, more than the memory available to read it"),
            )
        })?;
    file.take(size).read_to_end(&mut data)?;
    Ok(data)
}

/// The bytes of a regular file: mapped, or read when it cannot be mapped
/// (an empty file).
pub enum FileBytes {
    /// Mapped read-only: only the pages used are read.
    Mapped(memmap2::Mmap),
    /// Read whole.
    Read(Vec<u8>),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Read(v) => v,
        }
    }
}

/// As [`read_regular`], the file mapped rather than copied into memory:
/// a binary of which a few tables are used (its symbols, its segments)
/// is not read whole, and the page cache's copy is shared.
pub fn map_regular(path: &Path, max: u64) -> io::Result<FileBytes> {
    let (file, size) = open_regular(path)?;
    if size > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            TooLarge { size, max },
        ));
    }
    if size == 0 {
        return Ok(FileBytes::Read(Vec::new()));
    }
    // SAFETY: the map is read-only and private, of a regular file (checked
    // on the open file), and only read as bytes. Another process
    // truncating the file while it is mapped would make reads past its
    // new end fault (SIGBUS); binaries are replaced by rename when a
    // package is upgraded, not rewritten in place, which is the accepted
    // risk of every debugger and profiler that maps them (perf does).
    let map = unsafe { memmap2::MmapOptions::new().len(size as usize).map(&file) }?;
    Ok(FileBytes::Mapped(map))
}

/// As [`read_regular`], for a text file.
pub fn read_regular_text(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read_regular(path, max)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(path: &str) -> String {
        open_regular(Path::new(path)).unwrap_err().to_string()
    }

    #[test]
    fn only_regular_files_open() {
        assert_eq!(kind("/"), "it is a directory, not a regular file");
        assert_eq!(
            kind("/dev/zero"),
            "it is a character device, not a regular file"
        );
        let dir = std::env::temp_dir().join(format!("kprobe-perf-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        // Returns at once, where a plain open would wait for a writer.
        let e = open_regular(&fifo).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it is a FIFO (named pipe), not a regular file"
        );
        let e = read_regular(&fifo, 1 << 20).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let file = dir.join("file");
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(read_regular(&file, 10).unwrap(), b"0123456789");
        assert_eq!(
            read_regular(&file, 9).unwrap_err().to_string(),
            "it is 10 bytes, more than the 9 bytes read at most"
        );
        let (_, size) = open_regular(&file).unwrap();
        assert_eq!(size, 10);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            open_regular(&file).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
