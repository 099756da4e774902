//! The compact table behind [`KernelSymbols`](crate::KernelSymbols): one
//! string holding every name, fixed-size entries pointing into it, and a
//! streaming parser that fills them from kallsyms text without a heap
//! allocation per symbol.

use std::collections::HashMap;
use std::io::Read;
use std::sync::mpsc;

/// One symbol as stored: 24 bytes, no heap data of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub address: u64,
    /// Byte offset of the name in [`Table::names`].
    pub name_start: u32,
    /// Index into [`Table::modules`] plus one; 0 for the core kernel.
    pub module: u32,
    pub name_len: u16,
    /// kallsyms type letter (ASCII).
    pub kind: u8,
}

/// Address bounds of the core kernel's text areas, read from kallsyms'
/// own marker symbols (`_stext`, `__entry_text_start`, ...).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sections {
    pub text: Bounds,
    pub init: Bounds,
    pub entry: Bounds,
    pub noinstr: Bounds,
    pub kprobes: Bounds,
}

/// A `[start, end)` range whose ends may be missing from kallsyms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub start: Option<u64>,
    pub end: Option<u64>,
}

impl Bounds {
    /// True when both ends are known and `address` lies between them.
    pub(crate) fn contains(&self, address: u64) -> bool {
        match (self.start, self.end) {
            (Some(s), Some(e)) => s <= address && address < e,
            _ => false,
        }
    }
}

impl Sections {
    /// Records `name` if it is one of the marker symbols.
    fn note(&mut self, name: &str, address: u64) {
        let slot = match name {
            "_stext" => &mut self.text.start,
            "_etext" => &mut self.text.end,
            "_sinittext" => &mut self.init.start,
            "_einittext" => &mut self.init.end,
            "__entry_text_start" => &mut self.entry.start,
            "__entry_text_end" => &mut self.entry.end,
            "__noinstr_text_start" => &mut self.noinstr.start,
            "__noinstr_text_end" => &mut self.noinstr.end,
            "__kprobes_text_start" => &mut self.kprobes.start,
            "__kprobes_text_end" => &mut self.kprobes.end,
            _ => return,
        };
        // The first one wins, as it does for the kernel's own lookup.
        slot.get_or_insert(address);
    }
}

/// Every symbol of one kallsyms text, sorted by address.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Table {
    pub entries: Vec<Entry>,
    pub names: String,
    pub modules: Vec<String>,
    pub sections: Sections,
    pub any_nonzero: bool,
}

impl Table {
    /// The name of entry `e`.
    pub(crate) fn name(&self, e: &Entry) -> &str {
        let start = e.name_start as usize;
        self.names
            .get(start..start + e.name_len as usize)
            .unwrap_or_default()
    }

    /// The name of entry `e`, as bytes.
    #[inline]
    pub(crate) fn name_bytes(&self, e: &Entry) -> &[u8] {
        let start = e.name_start as usize;
        self.names
            .as_bytes()
            .get(start..start + e.name_len as usize)
            .unwrap_or_default()
    }

    /// The module of entry `e`, `None` for the core kernel.
    pub(crate) fn module(&self, e: &Entry) -> Option<&str> {
        let m = e.module.checked_sub(1)?;
        self.modules.get(m as usize).map(String::as_str)
    }
}

/// Why a text could not be parsed: the 1-based line and its text.
#[derive(Debug)]
pub(crate) enum ParseError {
    Malformed { line: usize, text: String },
    TooLarge,
}

/// Fills a [`Table`] from kallsyms text given in pieces of whole lines.
pub(crate) struct Parser {
    table: Table,
    line: usize,
    /// Module name -> index + 1, for modules seen so far.
    module_ids: HashMap<Box<str>, u32>,
    /// The module of the previous module symbol.
    last_module: Option<u32>,
}

impl Parser {
    pub(crate) fn new(capacity_hint: usize) -> Self {
        // About 44 bytes a line and 24 of them name, on 6.x kernels.
        let lines = capacity_hint / 40;
        Parser {
            table: Table {
                entries: Vec::with_capacity(lines),
                names: String::with_capacity(lines * 26),
                ..Table::default()
            },
            line: 0,
            module_ids: HashMap::new(),
            last_module: None,
        }
    }

    /// Parses `text`, which must end at a line boundary (or at the end of
    /// the input).
    pub(crate) fn feed(&mut self, text: &str) -> Result<(), ParseError> {
        let bytes = text.as_bytes();
        let mut pos = 0;
        while pos < bytes.len() {
            self.line += 1;
            // The kernel's own layout, `ADDR TYPE NAME[\t[MODULE]]\n`, in one
            // pass; anything else goes to the general parser below.
            if let Some(next) = self.canonical_line(text, pos) {
                pos = next;
                continue;
            }
            let end = bytes[pos..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |i| pos + i);
            // `pos` and `end` sit next to ASCII bytes (or at the ends):
            // char boundaries.
            let line = text.get(pos..end).unwrap_or_default();
            let line = line.strip_suffix('\r').unwrap_or(line);
            pos = end + 1;
            if line.is_empty() {
                continue;
            }
            self.line_of(line).ok_or_else(|| ParseError::Malformed {
                line: self.line,
                text: line.to_string(),
            })??;
        }
        Ok(())
    }

    /// Parses the line at `pos` if it has exactly the 64-bit kernel's
    /// layout (16 hex digits, type, name, optional `\t[module]`), returning
    /// where the next line starts.
    #[inline]
    fn canonical_line(&mut self, text: &str, pos: usize) -> Option<usize> {
        let b = text.as_bytes();
        let head = <&[u8; 19]>::try_from(b.get(pos..pos + 19)?).ok()?;
        let kind = head[17];
        if head[16] != b' ' || head[18] != b' ' || !kind.is_ascii_graphic() {
            return None;
        }
        let address = parse_hex16(&head[..16])?;
        let name_start = pos + 19;
        let name_end = name_start + first_blank(&b[name_start..]);
        if name_end == name_start {
            return None;
        }
        let (module, next) = match b.get(name_end) {
            None => (None, name_end),
            Some(b'\n') => (None, name_end + 1),
            Some(b'\t') if b.get(name_end + 1) == Some(&b'[') => {
                let m_start = name_end + 2;
                let m_end = m_start + b[m_start..].iter().position(|&c| c == b']')?;
                match b.get(m_end + 1) {
                    None => (Some(m_start..m_end), m_end + 1),
                    Some(b'\n') => (Some(m_start..m_end), m_end + 2),
                    _ => return None,
                }
            }
            _ => return None,
        };
        // Slicing at ASCII delimiters of valid UTF-8 cannot fail.
        let name = text.get(name_start..name_end)?;
        let module = match module {
            Some(r) => Some(text.get(r)?),
            None => None,
        };
        self.push(address, kind, name, module).ok()?;
        Some(next)
    }

    /// One non-empty line; `None` when it is not `ADDR TYPE NAME [MODULE]`.
    fn line_of(&mut self, line: &str) -> Option<Result<(), ParseError>> {
        let (main, module) = match line.split_once('\t') {
            Some((m, rest)) => (
                m,
                Some(rest.trim().trim_start_matches('[').trim_end_matches(']')),
            ),
            None => (line, None),
        };
        let mut parts = main.split_ascii_whitespace();
        let (addr, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
        let address = u64::from_str_radix(addr, 16).ok()?;
        let kind = *kind.as_bytes().first().filter(|k| k.is_ascii())?;
        if u16::try_from(name.len()).is_err() {
            return None;
        }
        Some(self.push(address, kind, name, module))
    }

    /// Appends one symbol.
    #[inline]
    fn push(
        &mut self,
        address: u64,
        kind: u8,
        name: &str,
        module: Option<&str>,
    ) -> Result<(), ParseError> {
        let name_len = u16::try_from(name.len()).map_err(|_| ParseError::TooLarge)?;
        let module = match module {
            None => 0,
            Some(m) => self.module_id(m).ok_or(ParseError::TooLarge)?,
        };
        let name_start = u32::try_from(self.table.names.len()).map_err(|_| ParseError::TooLarge)?;
        if self.table.entries.len() >= u32::MAX as usize {
            return Err(ParseError::TooLarge);
        }
        // Every marker name starts with `_` and ends with `t` or `d`.
        if module == 0
            && name.starts_with('_')
            && matches!(name.as_bytes().last(), Some(b't' | b'd'))
        {
            self.table.sections.note(name, address);
        }
        self.table.any_nonzero |= address != 0;
        self.table.names.push_str(name);
        self.table.entries.push(Entry {
            address,
            name_start,
            module,
            name_len,
            kind,
        });
        Ok(())
    }

    /// The id of module `m`, interning it on first sight.
    fn module_id(&mut self, m: &str) -> Option<u32> {
        // Module symbols come grouped by module: the last one usually hits.
        if let Some(id) = self.last_module {
            if self.table.modules.get(id as usize - 1).map(String::as_str) == Some(m) {
                return Some(id);
            }
        }
        let id = match self.module_ids.get(m) {
            Some(&id) => id,
            None => {
                self.table.modules.push(m.to_string());
                let id = u32::try_from(self.table.modules.len()).ok()?;
                self.module_ids.insert(m.into(), id);
                id
            }
        };
        self.last_module = Some(id);
        Some(id)
    }

    /// The 1-based number of the last line fed.
    pub(crate) fn line(&self) -> usize {
        self.line
    }

    /// Sorts by address (keeping file order among equal addresses, as the
    /// kernel lists aliases) and returns the table.
    pub(crate) fn finish(mut self) -> Table {
        let entries = &mut self.table.entries;
        if !entries.is_sorted_by_key(|e| e.address) {
            entries.sort_by_key(|e| e.address);
        }
        self.table
    }
}

/// Hex digit values; 0xff for bytes that are not hex digits.
const HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Sixteen hex digits, branch-free.
#[inline]
fn parse_hex16(digits: &[u8]) -> Option<u64> {
    let mut value = 0u64;
    let mut bad = 0u8;
    for &c in digits {
        let d = HEX[usize::from(c)];
        bad |= d;
        value = (value << 4) | u64::from(d & 0xf);
    }
    // Only an invalid digit (0xff) sets the high bits.
    (bad & 0xf0 == 0).then_some(value)
}

/// Index of the first byte at or below b' ' (space, tab, newline, CR), or
/// `s.len()`: eight bytes per step.
#[inline]
fn first_blank(s: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while let Some(chunk) = s.get(i..i + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let x = u64::from_le_bytes(w);
        // High bit set in each byte below 0x21; exact for the lowest one.
        let found = x.wrapping_sub(ONES * 0x21) & !x & HIGH;
        if found != 0 {
            return i + (found.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + s[i..]
        .iter()
        .position(|&c| c <= b' ')
        .unwrap_or(s.len() - i)
}

/// Size of the pieces handed from the reading to the parsing side; procfs
/// itself hands out about 4 KiB per read.
const CHUNK: usize = 256 * 1024;

/// Why reading and parsing a stream failed.
#[derive(Debug)]
pub(crate) enum LoadError {
    Io(std::io::Error),
    Parse(ParseError),
}

/// Reads kallsyms text from `reader` and parses it. A second thread reads
/// (for /proc/kallsyms that is mostly the kernel formatting lines) while
/// this one parses what has arrived, so a load costs little more than the
/// read; without a thread both happen here in turn.
pub(crate) fn read_table<R: Read + Send>(
    mut reader: R,
    size_hint: usize,
) -> Result<Table, LoadError> {
    // procfs reports size 0: assume a 6.x kernel's ~5 MiB.
    let hint = if size_hint == 0 { 6 << 20 } else { size_hint };
    let threaded = std::thread::scope(|s| {
        let (full_tx, full_rx) = mpsc::sync_channel(8);
        let (free_tx, free_rx) = mpsc::channel();
        let reader = &mut reader;
        let spawned = std::thread::Builder::new()
            .name("kallsyms-read".into())
            .spawn_scoped(s, move || {
                for chunk in Chunks::new(reader, Some(free_rx)) {
                    if full_tx.send(chunk).is_err() {
                        break;
                    }
                }
            });
        let handle = spawned.ok()?;
        let table = parse_chunks(full_rx.iter(), |c| drop(free_tx.send(c)), hint);
        // Stops the reader early if parsing failed.
        drop(full_rx);
        // The reader does not panic; if it did, its error would show as a
        // short read, caught by the parser or the caller.
        let _ = handle.join();
        Some(table)
    });
    match threaded {
        Some(table) => table,
        None => parse_chunks(Chunks::new(&mut reader, None), drop, hint),
    }
}

/// The pieces of a reader, each about [`CHUNK`] bytes, the last one short.
struct Chunks<'r, R> {
    reader: &'r mut R,
    /// Buffers the parser is done with.
    free: Option<mpsc::Receiver<Vec<u8>>>,
    done: bool,
}

impl<'r, R: Read> Chunks<'r, R> {
    fn new(reader: &'r mut R, free: Option<mpsc::Receiver<Vec<u8>>>) -> Self {
        Chunks {
            reader,
            free,
            done: false,
        }
    }
}

impl<R: Read> Iterator for Chunks<'_, R> {
    type Item = std::io::Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut buf = self
            .free
            .as_ref()
            .and_then(|f| f.try_recv().ok())
            .unwrap_or_else(|| Vec::with_capacity(CHUNK));
        buf.clear();
        // `read_to_end` retries interrupted reads and stops at the limit.
        match self
            .reader
            .by_ref()
            .take(CHUNK as u64)
            .read_to_end(&mut buf)
        {
            Ok(n) => {
                self.done = n < CHUNK;
                (n > 0).then_some(Ok(buf))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Parses a stream of pieces that may split lines anywhere; `recycle`
/// gets each piece back once it is parsed.
fn parse_chunks(
    chunks: impl Iterator<Item = std::io::Result<Vec<u8>>>,
    mut recycle: impl FnMut(Vec<u8>),
    hint: usize,
) -> Result<Table, LoadError> {
    let mut parser = Parser::new(hint);
    // The start of a line that continues in the next piece.
    let mut pending: Vec<u8> = Vec::new();
    for chunk in chunks {
        let chunk = chunk.map_err(LoadError::Io)?;
        match chunk.iter().rposition(|&b| b == b'\n') {
            None => pending.extend_from_slice(&chunk),
            Some(last) => {
                let mut body = 0;
                if !pending.is_empty() {
                    let first = chunk.iter().position(|&b| b == b'\n').unwrap_or(last);
                    pending.extend_from_slice(&chunk[..=first]);
                    feed_bytes(&mut parser, &pending)?;
                    pending.clear();
                    body = first + 1;
                }
                feed_bytes(&mut parser, &chunk[body..=last])?;
                pending.extend_from_slice(&chunk[last + 1..]);
            }
        }
        recycle(chunk);
    }
    feed_bytes(&mut parser, &pending)?;
    Ok(parser.finish())
}

/// Checks that `bytes` (whole lines) are UTF-8 and parses them.
fn feed_bytes(parser: &mut Parser, bytes: &[u8]) -> Result<(), LoadError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line_start = bytes[..e.valid_up_to()]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let line_end = bytes[line_start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| line_start + i);
        let lines_before = bytes[..line_start].iter().filter(|&&b| b == b'\n').count();
        LoadError::Parse(ParseError::Malformed {
            line: parser.line() + lines_before + 1,
            text: String::from_utf8_lossy(&bytes[line_start..line_end]).into_owned(),
        })
    })?;
    parser.feed(text).map_err(LoadError::Parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = include_str!("../tests/fixtures/host-6.18-kallsyms.txt");

    fn whole(text: &str) -> Table {
        let mut p = Parser::new(text.len());
        p.feed(text).unwrap();
        p.finish()
    }

    #[test]
    fn pieces_split_anywhere_parse_like_the_whole() {
        let expected = whole(HOST);
        assert_eq!(expected.entries.len(), 643);
        for step in [1, 7, 44, 45, 97, 4096, HOST.len()] {
            let pieces = HOST
                .as_bytes()
                .chunks(step)
                .map(|c| Ok(c.to_vec()))
                .collect::<Vec<_>>();
            let got = parse_chunks(pieces.into_iter(), drop, 0).unwrap();
            assert!(got == expected, "pieces of {step} bytes");
        }
    }

    #[test]
    fn threaded_and_plain_reads_agree() {
        let expected = whole(HOST);
        // More than one CHUNK, so lines cross the reader's pieces.
        let big = HOST.repeat(CHUNK / HOST.len() + 3);
        let table = read_table(big.as_bytes(), 0).unwrap();
        assert_eq!(
            table.entries.len(),
            expected.entries.len() * (CHUNK / HOST.len() + 3)
        );
        let plain = parse_chunks(Chunks::new(&mut big.as_bytes(), None), drop, 0).unwrap();
        assert!(table == plain);
    }

    /// Fails after handing out some bytes.
    struct Broken<'a>(&'a [u8]);

    impl Read for Broken<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(std::io::Error::other("device gone"));
            }
            let n = self.0.len().min(buf.len()).min(1000);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn read_errors_and_bad_bytes_are_reported() {
        let e = read_table(Broken(HOST.as_bytes()), 0).unwrap_err();
        assert!(
            matches!(e, LoadError::Io(ref io) if io.to_string() == "device gone"),
            "{e:?}"
        );
        let mut bad = HOST.as_bytes().to_vec();
        // Line 3's name gets a byte that is not UTF-8.
        let third = HOST.lines().take(2).map(|l| l.len() + 1).sum::<usize>();
        bad[third + 20] = 0xff;
        let e = read_table(&bad[..], 0).unwrap_err();
        assert!(
            matches!(e, LoadError::Parse(ParseError::Malformed { line: 3, .. })),
            "{e:?}"
        );
    }

    #[test]
    fn odd_layouts_take_the_general_path() {
        let t = whole(
            "ffffffff81000000  T  spaced\r\nffffffff81000010 t tabbed\t [mod] \n81000020 T short\n\n",
        );
        let names: Vec<_> = t.entries.iter().map(|e| t.name(e)).collect();
        assert_eq!(names, ["short", "spaced", "tabbed"]);
        assert_eq!(t.module(&t.entries[2]), Some("mod"));
        let mut p = Parser::new(0);
        let e = p
            .feed("ffffffff81000000 T ok\nffffffff8100000g T bad\n")
            .unwrap_err();
        assert!(matches!(e, ParseError::Malformed { line: 2, .. }), "{e:?}");
        let long = format!("ffffffff81000000 T {}\n", "x".repeat(70_000));
        assert!(matches!(
            Parser::new(0).feed(&long),
            Err(ParseError::Malformed { line: 1, .. })
        ));
    }

    #[test]
    fn helpers() {
        assert_eq!(parse_hex16(b"ffffffff81000010"), Some(0xffffffff81000010));
        assert_eq!(parse_hex16(b"FFFFFFFF8100001A"), Some(0xffffffff8100001a));
        assert_eq!(parse_hex16(b"ffffffff8100001g"), None);
        assert_eq!(parse_hex16(b"ffffffff8100001 "), None);
        assert_eq!(first_blank(b"abcdefghijklmnop\tq"), 16);
        assert_eq!(first_blank(b"abc\n"), 3);
        assert_eq!(first_blank("ab\u{e9}cdefghij klm".as_bytes()), 12);
        assert_eq!(first_blank(b"abc"), 3);
        assert_eq!(first_blank(b""), 0);
    }
}
