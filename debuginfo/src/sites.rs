//! Finding the addresses a source-level probe point stands for.

use crate::dies::Attrs as _;
use std::collections::HashMap;
use std::rc::Rc;

use crate::debuginfo::{DebugInfo, Options};
use crate::dies::{self, Unit};
use crate::error::{Error, Result};
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

/// The lines of a function that carry code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionLines {
    /// The line the function is declared on (`FUNC:N` is N lines after it).
    pub decl_line: u64,
    /// The file it is declared in.
    pub file: String,
    /// Absolute line numbers with code, ascending.
    pub lines: Vec<u64>,
}

/// One row of a unit's line table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    pub(crate) address: u64,
    pub(crate) file: u64,
    pub(crate) line: u64,
    pub(crate) is_stmt: bool,
    pub(crate) end: bool,
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
                for unit in self.index.lookup(name.as_bytes()) {
                    self.function_sites(unit, name, file.as_deref(), at, opts, &mut out)?;
                }
                if out.is_empty() && !self.defines(name, file.as_deref())? {
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
                    .index
                    .entries()
                    .filter(|(k, _)| {
                        k.first() == Some(&crate::index::FILE_KEY)
                            && dies::tail_matches(&String::from_utf8_lossy(&k[1..]), file)
                    })
                    .flat_map(|(_, u)| u)
                    .collect();
                for unit in units {
                    self.line_sites(unit, file, *line, None, &mut out)?;
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
            return Err(Error::NoCodeAtLine { place, hint });
        }
        Ok(sites)
    }

    fn defines(&self, name: &str, file: Option<&str>) -> Result<bool> {
        for unit in self.index.lookup(name.as_bytes()) {
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
            if dies::name_of(&self.dwarf, unit, e).map_err(err)? != Some(name.as_bytes()) {
                continue;
            }
            if let Some(f) = file {
                let decl = dies::udata_integrated(unit, e, gimli::DW_AT_decl_file)
                    .and_then(|n| dies::file_name(&self.dwarf, unit, n));
                if !decl.is_some_and(|d| dies::tail_matches(&d, f)) {
                    continue;
                }
            }
            return Ok(Some(e.offset()));
        }
        Ok(None)
    }

    fn function_sites(
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
                    .and_then(|f| dies::file_name(&self.dwarf, &unit, f))
                    .unwrap_or_default();
                self.line_sites(
                    unit_off,
                    &decl_file,
                    decl_line + n,
                    Some((name, decl_line)),
                    out,
                )
            }
            FunctionPart::Lazy(pattern) => self.lazy_sites(unit_off, def, name, pattern, out),
            FunctionPart::Entry => {
                let abstract_ = def_e.has(gimli::DW_AT_inline);
                let ranges = dies::ranges(&self.dwarf, &unit, &def_e).map_err(err)?;
                if !abstract_ && !ranges.is_empty() {
                    let entry = dies::entry_pc(&self.dwarf, &unit, &def_e, &ranges).map_err(err)?;
                    if let Some(entry) = entry.filter(|&e| e != 0) {
                        out.push(self.site(unit_off, &unit, name, entry, def, def, entry, None)?);
                    }
                    return Ok(());
                }
                self.instances(unit_off, &unit, name, def, opts, out)
            }
        }
    }

    /// Every concrete copy of the abstract function `def` in the unit.
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
        let decl_line = def_e
            .val(gimli::DW_AT_decl_line)
            .and_then(|v| v.udata_value());
        let decl_file = def_e.val(gimli::DW_AT_decl_file).and_then(|v| dies::num(v));
        let mut cursor = unit.entries();
        let mut depth = 0isize;
        // The innermost enclosing top-level subprogram: (depth, offset).
        let mut func: Option<(isize, gimli::UnitOffset)> = None;
        while let Some((delta, e)) = cursor.next_dfs().map_err(err)? {
            depth += delta;
            if func.is_some_and(|(d, _)| depth <= d) {
                func = None;
            }
            let tag = e.tag();
            if tag == gimli::DW_TAG_subprogram && !e.has(gimli::DW_AT_declaration) {
                func = Some((depth, e.offset()));
            }
            if tag != gimli::DW_TAG_subprogram && tag != gimli::DW_TAG_inlined_subroutine {
                continue;
            }
            if e.val(gimli::DW_AT_abstract_origin) != Some(gimli::AttributeValue::UnitRef(def)) {
                continue;
            }
            let call_line = e.val(gimli::DW_AT_call_line).and_then(|v| v.udata_value());
            let call_file = e.val(gimli::DW_AT_call_file).and_then(|v| dies::num(v));
            let inlined = tag == gimli::DW_TAG_inlined_subroutine;
            if inlined && (!opts.inlines || (call_line == decl_line && call_file == decl_file)) {
                continue;
            }
            let ranges = dies::ranges(&self.dwarf, unit, e).map_err(err)?;
            let Some(entry) = dies::entry_pc(&self.dwarf, unit, e, &ranges).map_err(err)? else {
                continue;
            };
            if entry == 0 {
                continue;
            }
            let Some((_, f)) = func else { continue };
            let call = inlined.then(|| {
                let file = call_file
                    .and_then(|n| dies::file_name(&self.dwarf, unit, n))
                    .unwrap_or_default();
                format!(
                    "{}:{}",
                    self.short_path(unit, &file),
                    call_line.unwrap_or(0)
                )
            });
            out.push(self.site(unit_off, unit, name, entry, e.offset(), f, entry, call)?);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn site(
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
                let file = dies::file_name(&self.dwarf, unit, r.file).unwrap_or_default();
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
            let name = dies::name_of(&self.dwarf, unit, &e).ok().flatten()?;
            let entry = match e
                .val(gimli::DW_AT_entry_pc)
                .or_else(|| e.val(gimli::DW_AT_low_pc))?
            {
                gimli::AttributeValue::Addr(a) => a,
                gimli::AttributeValue::DebugAddrIndex(i) => self.dwarf.address(unit, i).ok()?,
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

    /// The unit's line table, sorted by address (rows of a sequence stay in order).
    pub(crate) fn rows(&self, unit: &Unit<'a>) -> Result<Rc<Vec<Row>>> {
        let key = unit
            .header
            .offset()
            .as_debug_info_offset()
            .map_or(usize::MAX, |o| o.0);
        if let Some(rows) = self.rows_cache.borrow().get(&key) {
            return Ok(rows.clone());
        }
        let rows = Rc::new(self.read_rows(unit)?);
        self.rows_cache.borrow_mut().insert(key, rows.clone());
        Ok(rows)
    }

    fn read_rows(&self, unit: &Unit<'a>) -> Result<Vec<Row>> {
        let mut out = Vec::new();
        let Some(lp) = unit.line_program.clone() else {
            return Ok(out);
        };
        let mut rows = lp.rows();
        let err = |e| self.dwarf_error("a line table".into(), e);
        while let Some((_, row)) = rows.next_row().map_err(err)? {
            out.push(Row {
                address: row.address(),
                file: row.file_index(),
                line: row.line().map_or(0, |l| l.get()),
                is_stmt: row.is_stmt(),
                end: row.end_sequence(),
            });
        }
        out.sort_by_key(|r| (r.address, r.end as u8 ^ 1));
        Ok(out)
    }

    /// Sites of `file:line` in a unit, by perf's rules: every statement row
    /// of that line, plus the entries of functions declared there and of
    /// inlined copies called or declared there; an address whose own line
    /// (its function's declaration at an entry, else its last row) is
    /// another line of the same file makes the whole point ambiguous.
    fn line_sites(
        &self,
        unit_off: gimli::DebugInfoOffset<usize>,
        file: &str,
        line: u64,
        function: Option<(&str, u64)>,
        out: &mut Vec<Site>,
    ) -> Result<()> {
        let unit = self.unit(unit_off)?;
        let rows = self.rows(&unit)?;
        let mut paths: HashMap<u64, Option<String>> = HashMap::new();
        let mut path_of = |n: u64| {
            paths
                .entry(n)
                .or_insert_with(|| dies::file_name(&self.dwarf, &unit, n))
                .clone()
        };
        // (address, path of the file the candidate came from, from a line-table row)
        let mut candidates: Vec<(u64, String, bool)> = Vec::new();
        for r in rows
            .iter()
            .filter(|r| r.is_stmt && !r.end && r.line == line)
        {
            if let Some(p) = path_of(r.file).filter(|p| dies::tail_matches(p, file)) {
                candidates.push((r.address, p, true));
            }
        }
        let err = |e| {
            self.dwarf_error(
                format!("the functions of the unit, looking for {file}:{line}"),
                e,
            )
        };
        let mut cursor = unit.entries();
        while let Some((_, e)) = cursor.next_dfs().map_err(err)? {
            let tag = e.tag();
            if tag != gimli::DW_TAG_subprogram && tag != gimli::DW_TAG_inlined_subroutine {
                continue;
            }
            let ranges = dies::ranges(&self.dwarf, &unit, e).map_err(err)?;
            let Some(entry) = dies::entry_pc(&self.dwarf, &unit, e, &ranges)
                .map_err(err)?
                .filter(|&a| a != 0)
            else {
                continue;
            };
            let mut check = |f: Option<u64>, l: Option<u64>| {
                if l == Some(line) {
                    if let Some(p) = f
                        .and_then(&mut path_of)
                        .filter(|p| dies::tail_matches(p, file))
                    {
                        candidates.push((entry, p, false));
                    }
                }
            };
            if tag == gimli::DW_TAG_inlined_subroutine {
                check(
                    e.val(gimli::DW_AT_call_file).and_then(dies::num),
                    e.val(gimli::DW_AT_call_line).and_then(dies::num),
                );
            }
            check(
                dies::udata_integrated(&unit, e, gimli::DW_AT_decl_file),
                dies::udata_integrated(&unit, e, gimli::DW_AT_decl_line),
            );
        }
        // One candidate per address; a line-table row wins (it is verified).
        candidates.sort_by_key(|c| (c.0, !c.2));
        candidates.dedup_by_key(|c| c.0);
        let spell = |l: u64| match function {
            Some((f, decl)) => format!("{f}:{}", l as i64 - decl as i64),
            None => format!("{file}:{l}"),
        };
        for (address, path, from_row) in candidates {
            if self.symbols.symbolize(address).is_none() {
                continue;
            }
            let chain = self.chain(&unit, address)?;
            let Some(func) = chain.first().copied() else {
                continue;
            };
            // The line the address stands for: at the entry of the
            // out-of-line function its declaration, else the line table's.
            // (perf checks line-table candidates only: the function and
            // inlined-copy entries it adds never fail the check.)
            let own = if !from_row {
                (None, None)
            } else if func.entry == address {
                let e = unit.entry(func.die).map_err(err)?;
                (
                    dies::udata_integrated(&unit, &e, gimli::DW_AT_decl_file)
                        .and_then(&mut path_of),
                    dies::udata_integrated(&unit, &e, gimli::DW_AT_decl_line),
                )
            } else {
                // The first statement row at the address (as perf's lookup
                // answers it), else its first row, else the last one before it.
                let i = rows.partition_point(|r| r.address < address);
                let here = || rows[i..].iter().take_while(|r| r.address == address);
                let at = here()
                    .find(|r| !r.end && r.is_stmt)
                    .or_else(|| here().find(|r| !r.end));
                match at.or_else(|| rows[..i].iter().rev().find(|r| !r.end)) {
                    Some(r) => (path_of(r.file), Some(r.line)),
                    None => (None, None),
                }
            };
            if let (Some(f), Some(l)) = own {
                if f == path && l != line {
                    return Err(Error::SharedLine {
                        place: spell(line),
                        at: self.sym_off(address),
                        other: spell(l),
                    });
                }
            }
            let owner = self.best_scope(&unit, &chain, file, line).unwrap_or(func);
            let e = unit.entry(owner.die).map_err(err)?;
            let name = dies::name_of(&self.dwarf, &unit, &e)
                .ok()
                .flatten()
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .unwrap_or_default();
            let call = (owner.tag == gimli::DW_TAG_inlined_subroutine).then(|| {
                let n = e
                    .val(gimli::DW_AT_call_line)
                    .and_then(dies::num)
                    .unwrap_or(0);
                let f = e
                    .val(gimli::DW_AT_call_file)
                    .and_then(dies::num)
                    .and_then(&mut path_of)
                    .unwrap_or_default();
                format!("{}:{n}", self.short_path(&unit, &f))
            });
            out.push(self.site(
                unit_off,
                &unit,
                &name,
                address,
                owner.die,
                func.die,
                owner.entry,
                call,
            )?);
        }
        Ok(())
    }

    /// perf's best scope for a line: among the functions and inlined copies
    /// at the address, the one declared in that file closest before the line.
    fn best_scope(&self, unit: &Unit<'a>, chain: &[Frame], file: &str, line: u64) -> Option<Frame> {
        let mut best: Option<(u64, Frame)> = None;
        for f in chain {
            let Ok(e) = unit.entry(f.die) else { continue };
            let in_file = dies::udata_integrated(unit, &e, gimli::DW_AT_decl_file)
                .and_then(|n| dies::file_name(&self.dwarf, unit, n))
                .is_some_and(|p| dies::tail_matches(&p, file));
            let Some(decl) = dies::udata_integrated(unit, &e, gimli::DW_AT_decl_line) else {
                continue;
            };
            if in_file && decl < line && best.is_none_or(|(d, _)| line - decl < d) {
                best = Some((line - decl, *f));
            }
        }
        best.map(|(_, f)| f)
    }

    /// The line-table rows (address, file, line, is_stmt) at `from..to` in
    /// the unit holding `from`, for debugging line questions.
    #[doc(hidden)]
    pub fn rows_between(
        &self,
        function: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, String, u64, bool)>> {
        let mut out = Vec::new();
        for unit_off in self.index.lookup(function.as_bytes()) {
            let unit = self.unit(unit_off)?;
            for r in self
                .rows(&unit)?
                .iter()
                .filter(|r| r.address >= from && r.address < to && !r.end)
            {
                let f = dies::file_name(&self.dwarf, &unit, r.file).unwrap_or_default();
                out.push((r.address, f, r.line, r.is_stmt));
            }
        }
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
            let ranges = dies::ranges(&self.dwarf, unit, e)?;
            if !dies::holds(&ranges, pc) {
                continue;
            }
            if tag != gimli::DW_TAG_lexical_block {
                let entry = dies::entry_pc(&self.dwarf, unit, e, &ranges)?.unwrap_or(pc);
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

    /// The inlined copies anywhere below `node`: (ranges, call file, call line).
    fn inlined_below(
        &self,
        unit: &Unit<'a>,
        node: gimli::EntriesTreeNode<'_, '_, '_, crate::file::R<'a>>,
        out: &mut Vec<(Vec<gimli::Range>, Option<String>, Option<u64>)>,
    ) -> gimli::Result<()> {
        let mut children = node.children();
        while let Some(child) = children.next()? {
            let e = child.entry();
            if e.tag() == gimli::DW_TAG_inlined_subroutine {
                let f = e
                    .val(gimli::DW_AT_call_file)
                    .and_then(dies::num)
                    .and_then(|n| dies::file_name(&self.dwarf, unit, n));
                let l = e.val(gimli::DW_AT_call_line).and_then(dies::num);
                out.push((dies::ranges(&self.dwarf, unit, e)?, f, l));
            }
            self.inlined_below(unit, child, out)?;
        }
        Ok(())
    }

    /// The lines of a function that carry code (perf -L), absolute line numbers.
    pub fn lines(&self, name: &str, file: Option<&str>) -> Result<FunctionLines> {
        let mut lines = Vec::new();
        let mut found = false;
        let mut decl = (0, String::new());
        for unit_off in self.index.lookup(name.as_bytes()) {
            let unit = self.unit(unit_off)?;
            let Some(def) = self.find_definition(&unit, name, file)? else {
                continue;
            };
            found = true;
            let err = |e| self.dwarf_error(format!("the lines of {name}"), e);
            let def_e = unit.entry(def).map_err(err)?;
            let decl_file = dies::udata_integrated(&unit, &def_e, gimli::DW_AT_decl_file)
                .and_then(|f| dies::file_name(&self.dwarf, &unit, f));
            decl = (
                dies::udata_integrated(&unit, &def_e, gimli::DW_AT_decl_line).unwrap_or(0),
                self.short_path(&unit, decl_file.as_deref().unwrap_or_default()),
            );
            // Each copy of the function in this unit: its ranges, and the
            // ranges of the copies inlined into it (whose rows are other
            // functions' lines, except at their call line).
            let mut copies = vec![def];
            let mut cursor = unit.entries();
            while let Some((_, e)) = cursor.next_dfs().map_err(err)? {
                if e.val(gimli::DW_AT_abstract_origin) == Some(gimli::AttributeValue::UnitRef(def))
                {
                    copies.push(e.offset());
                }
            }
            let decl_fileno = dies::udata_integrated(&unit, &def_e, gimli::DW_AT_decl_file);
            let mut same_file = HashMap::new();
            let rows = self.rows(&unit)?;
            for copy in copies {
                let ce = unit.entry(copy).map_err(err)?;
                let ranges = dies::ranges(&self.dwarf, &unit, &ce).map_err(err)?;
                if ranges.is_empty() {
                    continue;
                }
                let mut nested: Vec<(Vec<gimli::Range>, Option<String>, Option<u64>)> = Vec::new();
                let mut tree = unit.entries_tree(Some(copy)).map_err(err)?;
                let root = tree.root().map_err(err)?;
                self.inlined_below(&unit, root, &mut nested).map_err(err)?;
                for (_, f, l) in &nested {
                    if f.is_some() && *f == decl_file {
                        lines.extend(*l);
                    }
                }
                lines.push(decl.0);
                for r in rows.iter() {
                    if !r.is_stmt || r.end || !dies::holds(&ranges, r.address) {
                        continue;
                    }
                    let same = *same_file.entry(r.file).or_insert_with(|| {
                        Some(r.file) == decl_fileno
                            || dies::file_name(&self.dwarf, &unit, r.file) == decl_file
                    });
                    if !same {
                        continue;
                    }
                    let inside = nested
                        .iter()
                        .filter(|(rg, _, _)| dies::holds(rg, r.address));
                    let mut holders = inside.peekable();
                    if holders.peek().is_some()
                        && !holders.any(|(_, f, l)| *f == decl_file && *l == Some(r.line))
                    {
                        continue;
                    }
                    lines.push(r.line);
                }
            }
            break;
        }
        if !found {
            return Err(Error::NoFunction {
                name: name.to_string(),
                file: file.map(str::to_string),
            });
        }
        lines.sort_unstable();
        lines.dedup();
        Ok(FunctionLines {
            decl_line: decl.0,
            file: decl.1,
            lines,
        })
    }

    fn lazy_sites(
        &self,
        unit_off: gimli::DebugInfoOffset<usize>,
        def: gimli::UnitOffset,
        name: &str,
        pattern: &str,
        out: &mut Vec<Site>,
    ) -> Result<()> {
        let unit = self.unit(unit_off)?;
        let err = |e| self.dwarf_error(format!("the definition of {name}"), e);
        let def_e = unit.entry(def).map_err(err)?;
        let decl_file = dies::udata_integrated(&unit, &def_e, gimli::DW_AT_decl_file)
            .and_then(|f| dies::file_name(&self.dwarf, &unit, f))
            .unwrap_or_default();
        let comp_dir = unit
            .comp_dir
            .map(|d| String::from_utf8_lossy(d.slice()).into_owned());
        let path = match (&comp_dir, decl_file.starts_with('/')) {
            (Some(d), false) => format!("{d}/{decl_file}"),
            _ => decl_file.clone(),
        };
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let wanted: Vec<u64> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| crate::glob::lazy_match(l, pattern))
            .map(|(i, _)| i as u64 + 1)
            .collect();
        let fl = self.lines(name, None)?;
        let own: std::collections::HashSet<u64> = fl.lines.iter().copied().collect();
        for line in wanted.into_iter().filter(|l| own.contains(l)) {
            match self.line_sites(unit_off, &decl_file, line, Some((name, fl.decl_line)), out) {
                Ok(()) | Err(Error::SharedLine { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
