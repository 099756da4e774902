//! Statically defined tracepoints (SDT, USDT) of a user binary, as
//! `<sys/sdt.h>` records them in its `.note.stapsdt` notes: where each
//! probe is (the file offset a uprobe takes), its semaphore (the file
//! offset of the reference counter the kernel increments while a probe
//! is armed), and its arguments' operands (`8@%rbx`, `-4@112(%rsp)`).

use object::{Object, ObjectSection, ObjectSegment};

use crate::elf::{ElfError, UserBinary};

/// The note type of an SDT probe descriptor (`NT_STAPSDT`).
const NT_STAPSDT: u32 = 3;

/// One SDT probe site of a binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdtProbe {
    /// The provider (`python`).
    pub provider: String,
    /// The probe's name (`function__entry`).
    pub name: String,
    /// The probe's virtual address, adjusted for a prelinked base.
    pub address: u64,
    /// The file offset of the probed instruction (what a uprobe takes).
    pub file_offset: u64,
    /// The semaphore's virtual address, if the probe has one.
    pub semaphore: Option<u64>,
    /// The semaphore's file offset (the uprobe's reference counter).
    pub semaphore_offset: Option<u64>,
    /// The operands as the note writes them (`8@%rbp 8@%r12 -4@%eax`).
    pub args_text: String,
    /// The operands, parsed.
    pub args: Vec<SdtArg>,
}

/// One argument of an SDT probe: `[-]SIZE@OPERAND`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdtArg {
    /// Its size in bytes (1, 2, 4 or 8).
    pub size: u8,
    /// True when the size is written negative: a signed value.
    pub signed: bool,
    /// Where the value is.
    pub operand: SdtOperand,
}

/// Where an SDT argument's value is, as the assembler wrote the operand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdtOperand {
    /// A register (`%rbx`, `%eax`; `x0`, `w1` on arm64), without `%`.
    Register(String),
    /// Memory at a register plus an offset (`112(%rsp)`, `(%rdi)`,
    /// `[sp, 8]`).
    Memory {
        /// The offset.
        offset: i64,
        /// The base register, without `%`.
        base: String,
    },
    /// A constant (`$5`).
    Immediate(i64),
    /// Memory at a symbol of the binary plus an offset, addressed
    /// relative to the instruction pointer (`kpf_global(%rip)`,
    /// `table+8(%rip)`): a global variable.
    Symbol {
        /// The symbol.
        name: String,
        /// The offset from it.
        offset: i64,
    },
    /// A form this reader does not take apart (an index register, a
    /// symbol): kept as written.
    Other(String),
}

impl std::fmt::Display for SdtArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.signed { "-" } else { "" };
        write!(f, "{sign}{}@", self.size)?;
        match &self.operand {
            SdtOperand::Register(r) => write!(f, "%{r}"),
            SdtOperand::Memory { offset: 0, base } => write!(f, "(%{base})"),
            SdtOperand::Memory { offset, base } => write!(f, "{offset}(%{base})"),
            SdtOperand::Immediate(v) => write!(f, "${v}"),
            SdtOperand::Symbol { name, offset: 0 } => write!(f, "{name}(%rip)"),
            SdtOperand::Symbol { name, offset } => write!(f, "{name}{offset:+}(%rip)"),
            SdtOperand::Other(t) => f.write_str(t),
        }
    }
}

/// Parses one operand spec (`-4@112(%rsp)`). An operand without `SIZE@`
/// (old notes) is 8 bytes, unsigned.
pub fn parse_arg(text: &str) -> SdtArg {
    let (size, signed, operand) = match text.split_once('@') {
        Some((n, op)) => match n.parse::<i8>() {
            Ok(v) if matches!(v.unsigned_abs(), 1 | 2 | 4 | 8) => (v.unsigned_abs(), v < 0, op),
            _ => (8, false, text),
        },
        None => (8, false, text),
    };
    SdtArg {
        size,
        signed,
        operand: parse_operand(operand),
    }
}

fn parse_operand(op: &str) -> SdtOperand {
    let other = || SdtOperand::Other(op.to_string());
    if let Some(r) = op.strip_prefix('%') {
        return SdtOperand::Register(r.to_string());
    }
    if let Some(v) = op.strip_prefix('$') {
        return parse_int(v).map_or_else(other, SdtOperand::Immediate);
    }
    // arm64: `[sp, 8]`, `[x1]`, `[x29, #-4]`.
    if let Some(inner) = op.strip_prefix('[').and_then(|o| o.strip_suffix(']')) {
        let (base, off) = match inner.split_once(',') {
            Some((b, o)) => (b.trim(), o.trim().trim_start_matches('#')),
            None => (inner.trim(), "0"),
        };
        return match parse_int(off) {
            Some(offset) => SdtOperand::Memory {
                offset,
                base: base.to_string(),
            },
            None => other(),
        };
    }
    // x86: a global, `SYM[+-OFF](%rip)`.
    if let Some(sym) = op.strip_suffix("(%rip)") {
        if sym.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '.') {
            let (name, offset) = match sym.find(['+', '-']) {
                Some(i) => match parse_int(&sym[i..]) {
                    Some(o) => (&sym[..i], o),
                    None => return other(),
                },
                None => (sym, 0),
            };
            return SdtOperand::Symbol {
                name: name.to_string(),
                offset,
            };
        }
    }
    // x86: `OFF(%reg)`, `(%reg)`; an index register is left as written.
    if let Some((off, rest)) = op.split_once("(%") {
        let Some(base) = rest.strip_suffix(')').filter(|b| !b.contains(',')) else {
            return other();
        };
        let offset = if off.is_empty() {
            Some(0)
        } else {
            parse_int(off)
        };
        return match offset {
            Some(offset) => SdtOperand::Memory {
                offset,
                base: base.to_string(),
            },
            None => other(),
        };
    }
    // arm64 registers are written bare (`x0`, `w1`).
    if op.starts_with(['x', 'w']) && op[1..].bytes().all(|b| b.is_ascii_digit()) && op.len() > 1
        || op == "sp"
    {
        return SdtOperand::Register(op.to_string());
    }
    if let Some(v) = parse_int(op) {
        return SdtOperand::Immediate(v);
    }
    other()
}

fn parse_int(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = match digits.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        None => digits.parse::<u64>().ok()?,
    };
    if neg {
        0i64.checked_sub_unsigned(v)
    } else {
        i64::try_from(v).ok()
    }
}

impl UserBinary {
    /// The SDT probes of this binary, in the order of its notes (one per
    /// site: a probe written in several places, or inlined, has several).
    /// A binary without `.note.stapsdt` has none. Addresses are adjusted
    /// as for a prelinked file: by the distance between the
    /// `.stapsdt.base` section's address and the base the note recorded.
    pub fn sdt_probes(&self) -> Result<Vec<SdtProbe>, ElfError> {
        let file = self.parse_object()?;
        let Some(notes) = file.section_by_name(".note.stapsdt") else {
            return Ok(Vec::new());
        };
        let data = notes.data().map_err(|e| self.parse_error(e.to_string()))?;
        let base_section = file.section_by_name(".stapsdt.base").map(|s| s.address());
        let little = file.is_little_endian();
        let word = if file.is_64() { 8 } else { 4 };
        let mut out = Vec::new();
        for (kind, name, desc) in NoteIter::new(data, little) {
            if kind != NT_STAPSDT || name != b"stapsdt" {
                continue;
            }
            let Some(probe) = self.sdt_probe(&file, desc, little, word, base_section) else {
                return Err(self.parse_error("a .note.stapsdt note is truncated".into()));
            };
            out.push(probe);
        }
        Ok(out)
    }

    fn sdt_probe(
        &self,
        file: &object::File<'_>,
        desc: &[u8],
        little: bool,
        word: usize,
        base_section: Option<u64>,
    ) -> Option<SdtProbe> {
        let read = |i: usize| -> Option<u64> {
            let b = desc.get(i * word..(i + 1) * word)?;
            let mut v = [0u8; 8];
            if little {
                v[..word].copy_from_slice(b);
                Some(u64::from_le_bytes(v))
            } else {
                v[8 - word..].copy_from_slice(b);
                Some(u64::from_be_bytes(v))
            }
        };
        let (pc, base, sem) = (read(0)?, read(1)?, read(2)?);
        let mut strings = desc.get(3 * word..)?.split(|&b| b == 0);
        let text = |s: &[u8]| String::from_utf8_lossy(s).into_owned();
        let provider = text(strings.next()?);
        let name = text(strings.next()?);
        let args_text = strings.next().map(text).unwrap_or_default();
        // Prelink moved the file: the note's base no longer matches.
        let shift = match base_section {
            Some(actual) if base != 0 => actual.wrapping_sub(base),
            _ => 0,
        };
        let address = pc.wrapping_add(shift);
        let semaphore = (sem != 0).then(|| sem.wrapping_add(shift));
        Some(SdtProbe {
            file_offset: file_offset_in_memory(file, address).unwrap_or(address),
            semaphore_offset: semaphore.and_then(|s| file_offset_in_memory(file, s)),
            provider,
            name,
            address,
            semaphore,
            args: args_text.split_whitespace().map(parse_arg).collect(),
            args_text,
        })
    }
}

impl UserBinary {
    /// The virtual address of the symbol `name` (a variable or a
    /// function, from `.symtab` or `.dynsym`), in the file's own address
    /// space.
    pub fn symbol_address(&self, name: &str) -> Option<u64> {
        use object::ObjectSymbol;
        let file = self.parse_object().ok()?;
        let address = file
            .symbols()
            .chain(file.dynamic_symbols())
            .find(|s| s.address() != 0 && s.name() == Ok(name))?
            .address();
        Some(address)
    }
}

/// The file offset of `address` through the loadable segment whose
/// memory holds it (a semaphore in `.bss` is past the file's part of its
/// segment, and the kernel takes the offset computed the same way).
fn file_offset_in_memory(file: &object::File<'_>, address: u64) -> Option<u64> {
    file.segments().find_map(|seg| {
        let (off, _) = seg.file_range();
        let start = seg.address();
        (address >= start && address - start < seg.size()).then(|| off + (address - start))
    })
}

/// The notes of a note section: (type, name without its NUL, descriptor).
struct NoteIter<'a> {
    data: &'a [u8],
    little: bool,
}

impl<'a> NoteIter<'a> {
    fn new(data: &'a [u8], little: bool) -> Self {
        NoteIter { data, little }
    }
}

impl<'a> Iterator for NoteIter<'a> {
    type Item = (u32, &'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let word = |i: usize| -> Option<u32> {
            let b: [u8; 4] = self.data.get(i..i + 4)?.try_into().ok()?;
            Some(if self.little {
                u32::from_le_bytes(b)
            } else {
                u32::from_be_bytes(b)
            })
        };
        let namesz = usize::try_from(word(0)?).ok()?;
        let descsz = usize::try_from(word(4)?).ok()?;
        let kind = word(8)?;
        let name_end = 12usize.checked_add(namesz)?;
        let desc_at = name_end.checked_add(3)? & !3;
        let desc_end = desc_at.checked_add(descsz)?;
        let name = self.data.get(12..name_end)?;
        let desc = self.data.get(desc_at..desc_end)?;
        let next = desc_end.checked_add(3)? & !3;
        self.data = self.data.get(next..).unwrap_or_default();
        let name = name.strip_suffix(&[0]).unwrap_or(name);
        Some((kind, name, desc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_of_each_form() {
        let a = parse_arg("8@%rbx");
        assert_eq!((a.size, a.signed), (8, false));
        assert_eq!(a.operand, SdtOperand::Register("rbx".into()));
        let a = parse_arg("-4@112(%rsp)");
        assert_eq!((a.size, a.signed), (4, true));
        assert_eq!(
            a.operand,
            SdtOperand::Memory {
                offset: 112,
                base: "rsp".into()
            }
        );
        assert_eq!(a.to_string(), "-4@112(%rsp)");
        let a = parse_arg("-8@-16(%rbp)");
        assert_eq!(
            a.operand,
            SdtOperand::Memory {
                offset: -16,
                base: "rbp".into()
            }
        );
        assert_eq!(
            parse_arg("2@(%rdi)").operand,
            SdtOperand::Memory {
                offset: 0,
                base: "rdi".into()
            }
        );
        assert_eq!(parse_arg("-4@$-5").operand, SdtOperand::Immediate(-5));
        assert_eq!(parse_arg("1@$0x10").operand, SdtOperand::Immediate(16));
        let a = parse_arg("-8@kpf_global(%rip)");
        assert_eq!(
            a.operand,
            SdtOperand::Symbol {
                name: "kpf_global".into(),
                offset: 0
            }
        );
        assert_eq!(a.to_string(), "-8@kpf_global(%rip)");
        let a = parse_arg("4@table+8(%rip)");
        assert_eq!(
            a.operand,
            SdtOperand::Symbol {
                name: "table".into(),
                offset: 8
            }
        );
        assert_eq!(a.to_string(), "4@table+8(%rip)");
        assert_eq!(
            parse_arg("4@16(%rip)").operand,
            SdtOperand::Memory {
                offset: 16,
                base: "rip".into()
            }
        );
        assert_eq!(
            parse_arg("8@8(%rax,%rbx,8)").operand,
            SdtOperand::Other("8(%rax,%rbx,8)".into())
        );
        assert_eq!(
            parse_arg("-4@[sp, 12]").operand,
            SdtOperand::Memory {
                offset: 12,
                base: "sp".into()
            }
        );
        assert_eq!(parse_arg("8@x3").operand, SdtOperand::Register("x3".into()));
        // No size: an old note, 8 bytes.
        let a = parse_arg("%rdi");
        assert_eq!((a.size, a.operand), (8, SdtOperand::Register("rdi".into())));
    }

    #[test]
    fn notes_are_walked_with_their_padding() {
        // Two notes, names padded to 4 bytes.
        let mut data = Vec::new();
        for (name, desc) in [(&b"stapsdt\0"[..], &[1u8, 2, 3][..]), (b"GNU\0", &[9u8; 4])] {
            data.extend((name.len() as u32).to_le_bytes());
            data.extend((desc.len() as u32).to_le_bytes());
            data.extend(3u32.to_le_bytes());
            data.extend(name);
            while data.len() % 4 != 0 {
                data.push(0);
            }
            data.extend(desc);
            while data.len() % 4 != 0 {
                data.push(0);
            }
        }
        let notes: Vec<_> = NoteIter::new(&data, true).collect();
        assert_eq!(
            notes,
            [
                (3, &b"stapsdt"[..], &[1u8, 2, 3][..]),
                (3, &b"GNU"[..], &[9u8; 4][..])
            ]
        );
    }

    /// A prelinked file: its `.stapsdt.base` moved by 0x1000 from the base
    /// the notes recorded, so each probe (and semaphore) moved as much.
    #[test]
    fn prelinked_base_moves_the_probes() {
        let path = std::path::Path::new("/usr/bin/python3.11");
        if !path.exists() {
            eprintln!("skipped: no {}", path.display());
            return;
        }
        let mut data = std::fs::read(path).unwrap();
        let notes_at = {
            let file = object::File::parse(&*data).unwrap();
            let notes = file.section_by_name(".note.stapsdt").unwrap();
            notes.file_range().unwrap().0 as usize
        };
        // The first note: 12-byte header, "stapsdt\0", then pc, base.
        let base_at = notes_at + 12 + 8 + 8;
        let base = u64::from_le_bytes(data[base_at..base_at + 8].try_into().unwrap());
        data[base_at..base_at + 8].copy_from_slice(&(base - 0x1000).to_le_bytes());
        let copy =
            std::env::temp_dir().join(format!("kprobe-perf-prelinked-{}", std::process::id()));
        std::fs::write(&copy, &data).unwrap();
        let moved = UserBinary::open(&copy).unwrap().sdt_probes().unwrap();
        let _ = std::fs::remove_file(&copy);
        let orig = UserBinary::open(path).unwrap().sdt_probes().unwrap();
        assert_eq!(moved[0].address, orig[0].address + 0x1000);
        assert_eq!(
            moved[0].semaphore.unwrap(),
            orig[0].semaphore.unwrap() + 0x1000
        );
        // The other notes kept their base, and their addresses.
        assert_eq!(moved[1], orig[1]);
    }

    /// Debian's python3.11: 8 probes, each with a semaphore (values from
    /// `readelf -n`).
    #[test]
    fn python_probes_and_semaphores() {
        let path = std::path::Path::new("/usr/bin/python3.11");
        if !path.exists() {
            eprintln!("skipped: no {}", path.display());
            return;
        }
        let bin = UserBinary::open(path).unwrap();
        let probes = bin.sdt_probes().unwrap();
        let names: Vec<_> = probes.iter().map(|p| p.name.as_str()).collect();
        // 8, not the 9 issue #30 counted: `readelf -n` lists 8 too.
        assert_eq!(probes.len(), 8, "{names:?}");
        assert!(probes
            .iter()
            .all(|p| p.provider == "python" && p.semaphore.is_some()));
        let entry = probes.iter().find(|p| p.name == "function__entry").unwrap();
        assert_eq!(entry.args_text, "8@%rbp 8@%r12 -4@%eax");
        assert_eq!(entry.args.len(), 3);
        assert_eq!(entry.args[2].to_string(), "-4@%eax");
        // The note's address, and the file offset through its segment.
        let file_offset = |a: u64| {
            bin.segments()
                .into_iter()
                .find(|&(_, size, va)| a >= va && a < va + size)
                .map(|(off, _, va)| off + a - va)
        };
        assert_eq!(Some(entry.file_offset), file_offset(entry.address));
        let sem = entry.semaphore.unwrap();
        let sem_off = entry.semaphore_offset.unwrap();
        assert_eq!(Some(sem_off), file_offset(sem));
        // Debian 12's build (readelf -n, readelf -S: .probes at 0x683260).
        if entry.address == 0x4f20a1 {
            assert_eq!(
                (entry.file_offset, sem, sem_off),
                (0xf20a1, 0xa84260, 0x683260)
            );
        }
    }
}
