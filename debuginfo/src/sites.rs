//! Finding the addresses a source-level probe point stands for.

use crate::dies::Attrs as _;
use std::rc::Rc;

use crate::debuginfo::{DebugInfo, Options};
use crate::dies::{self, FuncDie, Unit};
use crate::error::{Error, Result};
use crate::file;
use crate::index;
use crate::point::{FunctionPart, ProbePoint};

/// Which copy of the code a site is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instance {
    /// The function's own (out-of-line) body.
    OutOfLine,
    /// A copy of the function inlined into another function.
    Inlined {
        /// The out-of-line function the copy sits in.
        into: String,
        /// The call site (file:line) the copy stands for.
        call: String,
    },
}

/// Where in the DWARF a site's variables are looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scope {
    pub(crate) unit: gimli::DebugInfoOffset<usize>,
    /// The function or inlined instance whose variables are in scope.
    pub(crate) die: gimli::UnitOffset,
    /// The out-of-line function holding the address (for its frame base).
    pub(crate) func: gimli::UnitOffset,
    /// The entry PC of `die` (parameters without a location yet there are
    /// looked up a little later, as perf does).
    pub(crate) entry: u64,
}

/// One address a probe point stands for.
#[derive(Debug, Clone)]
pub struct Site {
    /// The address (as linked: for the kernel, the vmlinux address).
    pub address: u64,
    /// The address as SYMBOL+OFFSET of the containing out-of-line function.
    pub location: String,
    /// The function the probe point named (or, for FILE:LINE, the innermost one there).
    pub function: String,
    /// The source file and line at the address (`fs/open.c:1398`).
    pub source: String,
    /// Which copy of the function.
    pub instance: Instance,
    pub(crate) scope: Scope,
}

/// Where an abstract function is declared, to find its copies.
struct Decl {
    /// The function's entry, as a `.debug_info` offset.
    at: Option<gimli::DebugInfoOffset<usize>>,
    line: Option<u64>,
    file: Option<String>,
}

/// One function-like entry on the way from a unit to an address.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    pub(crate) die: gimli::UnitOffset,
    pub(crate) tag: gimli::DwTag,
    pub(crate) entry: u64,
}

impl<'a> DebugInfo<'a> {
    /// The sites of a probe point.
    pub fn sites(&self, point: &ProbePoint, opts: &Options) -> Result<Vec<Site>> {
        let mut sites = match point {
            ProbePoint::Function { name, file, at } => {
                let mut out = Vec::new();
                for unit in self.lookup(name.as_bytes())? {
                    self.function_sites(unit, name, file.as_deref(), at, opts, &mut out)?;
                }
                if out.is_empty() && !self.defines(name, file.as_deref())? {
                    if let Some(alias) = self.dwarf_alias(name) {
                        let point = ProbePoint::Function {
                            name: alias,
                            file: file.clone(),
                            at: at.clone(),
                        };
                        return self.sites(&point, opts);
                    }
                    return Err(Error::NoFunction {
                        name: name.clone(),
                        file: file.clone(),
                    });
                }
                out
            }
            ProbePoint::Line { file, line } => {
                let mut out = Vec::new();
                let units: Vec<_> = self
                    .names()?
                    .entries()
                    .filter(|(k, _)| {
                        k.first() == Some(&crate::index::FILE_KEY)
                            && dies::tail_matches(&String::from_utf8_lossy(&k[1..]), file)
                    })
                    .flat_map(|(_, u)| u)
                    .collect();
                for unit in units {
                    self.line_sites(unit, file, *line, None, true, &mut out)?;
                }
                out
            }
        };
        sites.sort_by_key(|s| s.address);
        sites.dedup_by_key(|s| s.address);
        if sites.is_empty() {
            let place = match point {
                ProbePoint::Function {
                    name,
                    at: FunctionPart::RelativeLine(n),
                    ..
                } => format!("{name}:{n}"),
                ProbePoint::Function {
                    name,
                    at: FunctionPart::Lazy(p),
                    ..
                } => format!("{name};{p}"),
                ProbePoint::Function { name, .. } => name.clone(),
                ProbePoint::Line { file, line } => format!("{file}:{line}"),
            };
            let hint = match point {
                ProbePoint::Function { name, file, .. } => self
                    .lines(name, file.as_deref())
                    .map(|l| {
                        let rel: Vec<String> = l
                            .lines
                            .iter()
                            .map(|n| format!("{name}:{}", n.saturating_sub(l.decl_line)))
                            .collect();
                        rel.join(" ")
                    })
                    .unwrap_or_default(),
                ProbePoint::Line { .. } => "see the function's line listing".into(),
            };
            if let (ProbePoint::Function { name, .. }, true) = (point, hint.is_empty()) {
                return Err(Error::NoCodeOfItsOwn { name: name.clone() });
            }
            return Err(Error::NoCodeAtLine { place, hint });
        }
        Ok(sites)
    }

    /// The name DWARF gives the function an ELF symbol `name` points at,
    /// when DWARF has no function of that name: glibc defines `malloc` as
    /// an alias of `__libc_malloc`, the only name its DWARF knows (perf
    /// takes the same way, through the symbol's address).
    fn dwarf_alias(&self, name: &str) -> Option<String> {
        let obj = self.file.object().ok()?;
        file::aliases(&obj, name)
            .into_iter()
            .find(|alias| self.lookup(alias.as_bytes()).is_ok_and(|u| !u.is_empty()))
    }

    fn defines(&self, name: &str, file: Option<&str>) -> Result<bool> {
        for unit in self.lookup(name.as_bytes())? {
            let u = self.unit(unit)?;
            if self.find_definition(&u, name, file)?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The first top-level definition of `name` in the unit (perf's choice).
    pub(crate) fn find_definition(
        &self,
        unit: &Unit<'a>,
        name: &str,
        file: Option<&str>,
    ) -> Result<Option<gimli::UnitOffset>> {
        let err = |e| {
            self.dwarf_error(
                format!("the top-level entries of a unit, looking for {name}"),
                e,
            )
        };
        let mut tree = unit.entries_tree(None).map_err(err)?;
        let root = tree.root().map_err(err)?;
        let mut children = root.children();
        while let Some(child) = children.next().map_err(err)? {
            let e = child.entry();
            if e.tag() != gimli::DW_TAG_subprogram || e.has(gimli::DW_AT_declaration) {
                continue;
            }
            if dies::name_of(self.dw(unit), unit, e).map_err(err)? != Some(name.as_bytes()) {
                continue;
            }
            if let Some(f) = file {
                let decl = dies::udata_integrated(unit, e, gimli::DW_AT_decl_file)
                    .and_then(|n| dies::file_name(self.dw(unit), unit, n));
                if !decl.is_some_and(|d| dies::tail_matches(&d, f)) {
                    continue;
                }
            }
            return Ok(Some(e.offset()));
        }
        Ok(None)
    }

    pub(crate) fn function_sites(
        &self,
        unit_off: gimli::DebugInfoOffset<usize>,
        name: &str,
        file: Option<&str>,
        at: &FunctionPart,
        opts: &Options,
        out: &mut Vec<Site>,
    ) -> Result<()> {
        let unit = self.unit(unit_off)?;
        let Some(def) = self.find_definition(&unit, name, file)? else {
            return Ok(());
        };
        let err = |e| self.dwarf_error(format!("the definition of {name}"), e);
        let def_e = unit.entry(def).map_err(err)?;
        match at {
            // perf reads FUNC:0 as FUNC, the entry of every copy.
            FunctionPart::RelativeLine(0) => {
                self.function_sites(unit_off, name, file, &FunctionPart::Entry, opts, out)
            }
            FunctionPart::RelativeLine(n) => {
                let decl_line =
                    dies::udata_integrated(&unit, &def_e, gimli::DW_AT_decl_line).unwrap_or(0);
                let decl_file = dies::udata_integrated(&unit, &def_e, gimli::DW_AT_decl_file)
                    .and_then(|f| dies::file_name(self.dw(&unit), &unit, f))
                    .unwrap_or_default();
                for u in self.with_importers(unit_off, &unit)? {
                    let point = Some((name, decl_line));
                    self.line_sites(u, &decl_file, decl_line + n, point, true, out)?;
                }
                Ok(())
            }
            FunctionPart::Lazy(pattern) => self.lazy_sites(unit_off, def, name, pattern, opts, out),
            FunctionPart::Entry => {
                let abstract_ = def_e.has(gimli::DW_AT_inline);
                let ranges = dies::ranges(self.dw(&unit), &unit, &def_e).map_err(err)?;
                if !abstract_ && !ranges.is_empty() {
                    let entry =
                        dies::entry_pc(self.dw(&unit), &unit, &def_e, &ranges).map_err(err)?;
                    if let Some(entry) = entry.filter(|&e| e != 0) {
                        out.push(self.site(unit_off, &unit, name, entry, def, def, entry, None)?);
                    }
                    return Ok(());
                }
                self.instances(unit_off, &unit, name, def, opts, out)
            }
        }
    }

    /// Every concrete copy of the abstract function `def`: in its unit,
    /// and, when dwz moved it to a partial unit, in the units importing
    /// that one.
    fn instances(
        &self,
        unit_off: gimli::DebugInfoOffset<usize>,
        unit: &Rc<Unit<'a>>,
        name: &str,
        def: gimli::UnitOffset,
        opts: &Options,
        out: &mut Vec<Site>,
    ) -> Result<()> {
        let err = |e| self.dwarf_error(format!("the copies of {name}"), e);
        let def_e = unit.entry(def).map_err(err)?;
        let decl = Decl {
            at: dies::global(unit, def),
            line: def_e
                .val(gimli::DW_AT_decl_line)
                .and_then(|v| v.udata_value()),
            file: def_e
                .val(gimli::DW_AT_decl_file)
                .and_then(dies::num)
                .and_then(|n| dies::file_name(self.dw(unit), unit, n)),
        };
        for u in self.with_importers(unit_off, unit)? {
            let u_rc = self.unit(u)?;
            self.copies_in(u, &u_rc, name, &decl, opts, out)?;
        }
        Ok(())
    }

    /// The unit at `unit_off` and, when it is a dwz partial unit, the
    /// units that import it (where the code of what it declares is).
    pub(crate) fn with_importers(
        &self,
        unit_off: gimli::DebugInfoOffset<usize>,
        unit: &Unit<'a>,
    ) -> Result<Vec<gimli::DebugInfoOffset<usize>>> {
        let mut units = vec![unit_off];
        // DW_AT_import names the partial unit's root entry.
        let root = dies::global(unit, gimli::UnitOffset(unit.header.header_size()));
        if let Some(root) = root {
            units.extend(self.lookup(&index::import_key(root))?);
        }
        Ok(units)
    }

    /// The copies of the abstract function `decl` in the unit at `unit_off`.
    fn copies_in(
        &self,
        unit_off: gimli::DebugInfoOffset<usize>,
        unit: &Rc<Unit<'a>>,
        name: &str,
        decl: &Decl,
        opts: &Options,
        out: &mut Vec<Site>,
    ) -> Result<()> {
        let err = |e| self.dwarf_error(format!("the copies of {name}"), e);
        let funcs = self.func_dies(unit)?;
        let start = out.len();
        // The last copy kept: its entry, call site and function.
        let mut last: Option<(u64, Option<String>, gimli::UnitOffset)> = None;
        for fd in funcs
            .iter()
            .filter(|f| f.origin.is_some() && f.origin == decl.at)
        {
            let e = unit.entry(fd.off).map_err(err)?;
            let e = &e;
            let call_line = e.val(gimli::DW_AT_call_line).and_then(|v| v.udata_value());
            let call_file = e
                .val(gimli::DW_AT_call_file)
                .and_then(dies::num)
                .and_then(|n| dies::file_name(self.dw(unit), unit, n));
            let inlined = fd.tag == gimli::DW_TAG_inlined_subroutine;
            if inlined && !opts.inlines {
                continue;
            }
            // A copy "called" from its own declaration: GCC nests one in a
            // copy of the same function at the same address, the outer one
            // with no locations for its variables. It is no probe point of
            // its own, but its variables are the ones that live there.
            let self_nested = inlined && call_line == decl.line && call_file == decl.file;
            let ranges = dies::ranges(self.dw(unit), unit, e).map_err(err)?;
            let Some(entry) = dies::entry_pc(self.dw(unit), unit, e, &ranges).map_err(err)? else {
                continue;
            };
            let Some(f) = fd.top.filter(|_| entry != 0) else {
                continue;
            };
            if self_nested {
                if let Some((at, call, outer_f)) = &last {
                    if *at == entry && out.len() > start {
                        let site = self.site(
                            unit_off,
                            unit,
                            name,
                            entry,
                            e.offset(),
                            *outer_f,
                            entry,
                            call.clone(),
                        )?;
                        if let Some(kept) = out.last_mut() {
                            *kept = site;
                        }
                    }
                }
                continue;
            }
            let call = inlined.then(|| {
                let file = call_file.clone().unwrap_or_default();
                format!(
                    "{}:{}",
                    self.short_path(unit, &file),
                    call_line.unwrap_or(0)
                )
            });
            out.push(self.site(
                unit_off,
                unit,
                name,
                entry,
                e.offset(),
                f,
                entry,
                call.clone(),
            )?);
            last = Some((entry, call, f));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn site(
        &self,
        unit_off: gimli::DebugInfoOffset<usize>,
        unit: &Unit<'a>,
        name: &str,
        address: u64,
        die: gimli::UnitOffset,
        func: gimli::UnitOffset,
        entry: u64,
        call: Option<String>,
    ) -> Result<Site> {
        let rows = self.rows(unit)?;
        let source = match rows.iter().rev().find(|r| r.address <= address && !r.end) {
            Some(r) => {
                let file = dies::file_name(self.dw(unit), unit, r.file).unwrap_or_default();
                format!("{}:{}", self.short_path(unit, &file), r.line)
            }
            None => "?".into(),
        };
        let instance = match call {
            None => Instance::OutOfLine,
            Some(call) => Instance::Inlined {
                into: self
                    .symbols
                    .symbolize(address)
                    .map(|(s, _)| s.name.to_string())
                    .unwrap_or_default(),
                call,
            },
        };
        Ok(Site {
            address,
            location: self.location(unit, func, address),
            function: name.to_string(),
            source,
            instance,
            scope: Scope {
                unit: unit_off,
                die,
                func,
                entry,
            },
        })
    }

    /// SYMBOL+OFFSET as perf prints it: the DWARF name of the out-of-line
    /// function and the offset from its entry when the function has one
    /// entry address (low_pc); else (code split in ranges, e.g. a `.cold`
    /// part) the ELF symbol holding the address.
    fn location(&self, unit: &Unit<'a>, func: gimli::UnitOffset, address: u64) -> String {
        let dwarf = unit.entry(func).ok().and_then(|e| {
            let name = dies::name_of(self.dw(unit), unit, &e).ok().flatten()?;
            let entry = match e
                .val(gimli::DW_AT_entry_pc)
                .or_else(|| e.val(gimli::DW_AT_low_pc))?
            {
                gimli::AttributeValue::Addr(a) => a,
                gimli::AttributeValue::DebugAddrIndex(i) => self.dw(unit).address(unit, i).ok()?,
                _ => return None,
            };
            let off = address.checked_sub(entry)?;
            Some(format!("{}+{off}", std::str::from_utf8(name).ok()?))
        });
        dwarf.unwrap_or_else(|| self.sym_off(address))
    }

    pub(crate) fn short_path(&self, unit: &Unit<'a>, path: &str) -> String {
        let comp_dir = unit
            .comp_dir
            .map(|d| String::from_utf8_lossy(d.slice()).into_owned());
        dies::relative(comp_dir.as_deref(), path).to_string()
    }

    /// Every function and inlined copy of the unit, in DWARF order (one
    /// walk of the unit per process, then kept).
    pub(crate) fn func_dies(&self, unit: &Unit<'a>) -> Result<Rc<Vec<FuncDie>>> {
        let key = unit
            .header
            .offset()
            .as_debug_info_offset()
            .map_or(usize::MAX, |o| o.0);
        if let Some(f) = self.funcs_cache.borrow().get(&key) {
            return Ok(f.clone());
        }
        let err = |e| self.dwarf_error("the functions of a unit".into(), e);
        let mut out = Vec::new();
        // Entries are read raw: the attributes of every other entry (most
        // of a unit) are skipped by their forms' sizes, not parsed.
        let mut raw = unit.entries_raw(None).map_err(err)?;
        let mut top: Option<(isize, gimli::UnitOffset)> = None;
        while !raw.is_empty() {
            let depth = raw.next_depth();
            let offset = raw.next_offset();
            let Some(abbrev) = raw.read_abbreviation().map_err(err)? else {
                continue;
            };
            if top.is_some_and(|(d, _)| depth <= d) {
                top = None;
            }
            let tag = abbrev.tag();
            if tag != gimli::DW_TAG_subprogram && tag != gimli::DW_TAG_inlined_subroutine {
                raw.skip_attributes(abbrev.attributes()).map_err(err)?;
                continue;
            }
            let (mut origin, mut declaration) = (None, false);
            for spec in abbrev.attributes() {
                let attr = raw.read_attribute(*spec).map_err(err)?;
                match (attr.name(), attr.value()) {
                    (gimli::DW_AT_abstract_origin, gimli::AttributeValue::UnitRef(o)) => {
                        origin = dies::global(unit, o);
                    }
                    (gimli::DW_AT_abstract_origin, gimli::AttributeValue::DebugInfoRef(o)) => {
                        origin = Some(o);
                    }
                    (gimli::DW_AT_declaration, _) => declaration = true,
                    _ => {}
                }
            }
            if tag == gimli::DW_TAG_subprogram {
                if declaration {
                    continue;
                }
                top = Some((depth, offset));
            }
            out.push(FuncDie {
                off: offset,
                tag,
                origin,
                top: top.map(|t| t.1),
            });
        }
        let out = Rc::new(out);
        crate::debuginfo::bounded_insert(&self.funcs_cache, key, out.clone());
        Ok(out)
    }

    /// The function-like entries holding `pc`, outermost (the out-of-line function) first.
    pub(crate) fn chain(&self, unit: &Unit<'a>, pc: u64) -> Result<Vec<Frame>> {
        let err = |e| self.dwarf_error(format!("the scopes at 0x{pc:x}"), e);
        let mut out = Vec::new();
        let mut tree = unit.entries_tree(None).map_err(err)?;
        let root = tree.root().map_err(err)?;
        self.descend(unit, root, pc, &mut out).map_err(err)?;
        Ok(out)
    }

    fn descend(
        &self,
        unit: &Unit<'a>,
        node: gimli::EntriesTreeNode<'_, '_, '_, crate::file::R<'a>>,
        pc: u64,
        out: &mut Vec<Frame>,
    ) -> gimli::Result<()> {
        let mut children = node.children();
        while let Some(child) = children.next()? {
            let e = child.entry();
            let tag = e.tag();
            if !matches!(
                tag,
                gimli::DW_TAG_subprogram
                    | gimli::DW_TAG_inlined_subroutine
                    | gimli::DW_TAG_lexical_block
            ) {
                continue;
            }
            let ranges = dies::ranges(self.dw(unit), unit, e)?;
            if !dies::holds(&ranges, pc) {
                continue;
            }
            if tag != gimli::DW_TAG_lexical_block {
                let entry = dies::entry_pc(self.dw(unit), unit, e, &ranges)?.unwrap_or(pc);
                out.push(Frame {
                    die: e.offset(),
                    tag,
                    entry,
                });
            }
            return self.descend(unit, child, pc, out);
        }
        Ok(())
    }
}
