//! Source lines: the line table, probe points by line (perf's rules), the
//! lines of a function, and lazy patterns.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use crate::debuginfo::{At, DebugInfo};
use crate::dies::{self, Attrs as _, Row, Unit};
use crate::error::{Error, Result};
use crate::sites::{Frame, Site};

/// The lines of a function that carry code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionLines {
    /// The line the function is declared on (`FUNC:N` is N lines after it).
    pub decl_line: u64,
    /// The file it is declared in.
    pub file: String,
    /// The compilation directory of its unit (`DW_AT_comp_dir`), which a
    /// relative `file` is relative to.
    pub comp_dir: Option<String>,
    /// Absolute line numbers with code, ascending.
    pub lines: Vec<u64>,
}

/// An inlined copy below a function: its ranges, call file, call line and
/// entry PC.
type Nested = (Vec<gimli::Range>, Option<String>, Option<u64>, Option<u64>);

/// The declaration of a function whose lines are listed: its line, its
/// file (the path, compared by name across units), and its entry.
struct DeclOf {
    line: u64,
    file: Option<String>,
    global: Option<gimli::DebugInfoOffset<usize>>,
}

/// File paths of a unit's line table, looked up once each.
#[derive(Debug, Default)]
pub(crate) struct Paths(HashMap<u64, Option<String>>);

impl Paths {
    fn get<'a>(&mut self, di: &DebugInfo<'a>, unit: &Unit<'a>, n: u64) -> Option<String> {
        self.0
            .entry(n)
            .or_insert_with(|| dies::file_name(di.dw(unit), unit, n))
            .clone()
    }
}

impl<'a> DebugInfo<'a> {
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
        crate::debuginfo::bounded_insert(&self.rows_cache, key, rows.clone());
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
    pub(crate) fn line_sites(
        &self,
        unit_off: gimli::DebugInfoOffset<usize>,
        file: &str,
        line: u64,
        function: Option<(&str, u64)>,
        check_shared: bool,
        out: &mut Vec<Site>,
    ) -> Result<()> {
        let unit = self.unit(unit_off)?;
        let rows = self.rows(&unit)?;
        let mut paths = Paths::default();
        let candidates = self.line_candidates(&unit, &rows, file, line, &mut paths)?;
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
            // perf checks line-table candidates only: the function and
            // inlined-copy entries it adds never fail the check.
            if from_row && check_shared {
                if let (Some(f), Some(l)) =
                    self.own_line(&unit, &rows, func, address, &mut paths)?
                {
                    if f == path && l != line {
                        return Err(Error::SharedLine {
                            place: spell(line),
                            at: self.sym_off(address),
                            other: spell(l),
                        });
                    }
                }
            }
            out.push(self.line_site(unit_off, &unit, &chain, address, file, line, &mut paths)?);
        }
        Ok(())
    }

    /// The site at `address` for `file:line`, its scope the best of
    /// `chain` (the functions and inlined copies holding the address,
    /// outermost first, not empty) for that line.
    #[allow(clippy::too_many_arguments)]
    fn line_site(
        &self,
        unit_off: gimli::DebugInfoOffset<usize>,
        unit: &Rc<Unit<'a>>,
        chain: &[Frame],
        address: u64,
        file: &str,
        line: u64,
        paths: &mut Paths,
    ) -> Result<Site> {
        let err = |e| self.dwarf_error(format!("the scopes of {file}:{line}"), e);
        let func = chain[0];
        let owner = self.best_scope(unit, chain, file, line).unwrap_or(func);
        let e = unit.entry(owner.die).map_err(err)?;
        let name = self
            .name_at(&self.at(unit, owner.die))
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
                .and_then(|n| paths.get(self, unit, n))
                .unwrap_or_default();
            format!("{}:{n}", self.short_path(unit, &f))
        });
        self.site(
            unit_off,
            unit,
            &name,
            address,
            owner.die,
            func.die,
            owner.entry,
            call,
        )
    }

    /// The addresses standing for `file:line` in a unit: (address, path of
    /// the file, whether from a line-table row), one per address, rows first.
    fn line_candidates(
        &self,
        unit: &Unit<'a>,
        rows: &[Row],
        file: &str,
        line: u64,
        paths: &mut Paths,
    ) -> Result<Vec<(u64, String, bool)>> {
        let mut candidates = Vec::new();
        for r in rows
            .iter()
            .filter(|r| r.is_stmt && !r.end && r.line == line)
        {
            if let Some(p) = paths
                .get(self, unit, r.file)
                .filter(|p| dies::tail_matches(p, file))
            {
                candidates.push((r.address, p, true));
            }
        }
        let err = |e| {
            self.dwarf_error(
                format!("the functions of the unit, looking for {file}:{line}"),
                e,
            )
        };
        for fd in self.func_dies(unit)?.iter() {
            let e = unit.entry(fd.off).map_err(err)?;
            let ranges = dies::ranges(self.dw(unit), unit, &e).map_err(err)?;
            let Some(entry) = dies::entry_pc(self.dw(unit), unit, &e, &ranges)
                .map_err(err)?
                .filter(|&a| a != 0)
            else {
                continue;
            };
            let mut places = vec![(
                dies::udata_integrated(unit, &e, gimli::DW_AT_decl_file),
                dies::udata_integrated(unit, &e, gimli::DW_AT_decl_line),
            )];
            if fd.tag == gimli::DW_TAG_inlined_subroutine {
                places.push((
                    e.val(gimli::DW_AT_call_file).and_then(dies::num),
                    e.val(gimli::DW_AT_call_line).and_then(dies::num),
                ));
            }
            for (f, l) in places {
                if l != Some(line) {
                    continue;
                }
                if let Some(p) = f
                    .and_then(|n| paths.get(self, unit, n))
                    .filter(|p| dies::tail_matches(p, file))
                {
                    candidates.push((entry, p, false));
                }
            }
        }
        candidates.sort_by_key(|c| (c.0, !c.2));
        candidates.dedup_by_key(|c| c.0);
        Ok(candidates)
    }

    /// The line an address stands for: the declaration of the out-of-line
    /// function at its entry, else the first statement row at the address
    /// (as perf's lookup answers it), else its first row, else the last one
    /// before it.
    fn own_line(
        &self,
        unit: &Unit<'a>,
        rows: &[Row],
        func: Frame,
        address: u64,
        paths: &mut Paths,
    ) -> Result<(Option<String>, Option<u64>)> {
        if func.entry == address {
            let e = unit
                .entry(func.die)
                .map_err(|e| self.dwarf_error("a function".into(), e))?;
            return Ok((
                dies::udata_integrated(unit, &e, gimli::DW_AT_decl_file)
                    .and_then(|n| paths.get(self, unit, n)),
                dies::udata_integrated(unit, &e, gimli::DW_AT_decl_line),
            ));
        }
        let i = rows.partition_point(|r| r.address < address);
        let here = || rows[i..].iter().take_while(|r| r.address == address);
        let at = here()
            .find(|r| !r.end && r.is_stmt)
            .or_else(|| here().find(|r| !r.end));
        Ok(
            match at.or_else(|| rows[..i].iter().rev().find(|r| !r.end)) {
                Some(r) => (paths.get(self, unit, r.file), Some(r.line)),
                None => (None, None),
            },
        )
    }

    /// Whether `address`, in out-of-line function `func`, has `want`
    /// (file, line) as its own line (see [`DebugInfo::listed_lines`]);
    /// true when the address has none.
    fn maps_back(
        &self,
        unit: &Unit<'a>,
        rows: &[Row],
        func: Frame,
        address: u64,
        want: (Option<String>, u64),
        paths: &mut Paths,
    ) -> Result<bool> {
        let (file, line) = want;
        // perf's cu_find_lineinfo: the function's declaration at its
        // entry, else the line table's line there.
        let own = self.own_line(unit, rows, func, address, paths)?;
        Ok(match own {
            (Some(f), Some(l)) => l == line && file == Some(f),
            _ => true,
        })
    }

    /// perf's best scope for a line: among the functions and inlined copies
    /// at the address, the one declared in that file closest before the line.
    fn best_scope(
        &self,
        unit: &Rc<Unit<'a>>,
        chain: &[Frame],
        file: &str,
        line: u64,
    ) -> Option<Frame> {
        let mut best: Option<(u64, Frame)> = None;
        for f in chain {
            let Some((decl_file, decl)) = self.declared_at(&self.at(unit, f.die)) else {
                continue;
            };
            let in_file = decl_file.is_some_and(|p| dies::tail_matches(&p, file));
            if in_file && decl < line && best.is_none_or(|(d, _)| line - decl < d) {
                best = Some((line - decl, *f));
            }
        }
        best.map(|(_, f)| f)
    }

    /// Where the entry at `at` is declared (file, line), following its
    /// abstract origin or specification, into other units as dwz leaves
    /// them; `None` without a declaration line.
    fn declared_at(&self, at: &At<'a>) -> Option<(Option<String>, u64)> {
        let mut at = at.clone();
        for _ in 0..3 {
            let e = at.unit.entry(at.off).ok()?;
            if let Some(line) = e.val(gimli::DW_AT_decl_line).and_then(dies::num) {
                let file = e
                    .val(gimli::DW_AT_decl_file)
                    .and_then(dies::num)
                    .and_then(|n| dies::file_name(self.dwarf_at(&at), &at.unit, n));
                return Some((file, line));
            }
            let next = e
                .val(gimli::DW_AT_abstract_origin)
                .or_else(|| e.val(gimli::DW_AT_specification))?;
            at = self.follow(&at, next)?;
        }
        None
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
        for unit_off in self.lookup(function.as_bytes())? {
            let unit = self.unit(unit_off)?;
            for r in self
                .rows(&unit)?
                .iter()
                .filter(|r| r.address >= from && r.address < to && !r.end)
            {
                let f = dies::file_name(self.dw(&unit), &unit, r.file).unwrap_or_default();
                out.push((r.address, f, r.line, r.is_stmt));
            }
        }
        Ok(out)
    }

    /// The inlined copies anywhere below `node`: (ranges, call file, call
    /// line, entry PC).
    fn inlined_below(
        &self,
        unit: &Unit<'a>,
        node: gimli::EntriesTreeNode<'_, '_, '_, crate::file::R<'a>>,
        out: &mut Vec<Nested>,
    ) -> gimli::Result<()> {
        let mut children = node.children();
        while let Some(child) = children.next()? {
            let e = child.entry();
            if e.tag() == gimli::DW_TAG_inlined_subroutine {
                let f = e
                    .val(gimli::DW_AT_call_file)
                    .and_then(dies::num)
                    .and_then(|n| dies::file_name(self.dw(unit), unit, n));
                let l = e.val(gimli::DW_AT_call_line).and_then(dies::num);
                let ranges = dies::ranges(self.dw(unit), unit, e)?;
                let entry = dies::entry_pc(self.dw(unit), unit, e, &ranges)?;
                out.push((ranges, f, l, entry));
            }
            self.inlined_below(unit, child, out)?;
        }
        Ok(())
    }

    /// The lines of a function that carry code (perf -L), absolute line numbers.
    pub fn lines(&self, name: &str, file: Option<&str>) -> Result<FunctionLines> {
        self.function_lines(name, file, false)
    }

    /// The lines `perf probe -L` numbers: those of [`DebugInfo::lines`]
    /// whose statement rows map back to them (perf 5.5's "reversible"
    /// check: the address's own line, its function's declaration at an
    /// entry, else the first statement row there, is the same line of
    /// the same file).
    pub fn listed_lines(&self, name: &str, file: Option<&str>) -> Result<FunctionLines> {
        self.function_lines(name, file, true)
    }

    fn function_lines(
        &self,
        name: &str,
        file: Option<&str>,
        reversible: bool,
    ) -> Result<FunctionLines> {
        for unit_off in self.lookup(name.as_bytes())? {
            let unit = self.unit(unit_off)?;
            let Some(def) = self.find_definition(&unit, name, file)? else {
                continue;
            };
            return self.lines_of_definition(&unit, def, name, reversible);
        }
        Err(Error::NoFunction {
            name: name.to_string(),
            file: file.map(str::to_string),
        })
    }

    /// The lines of the function defined at `def` of `unit`, from its
    /// copies there and, when dwz moved it to a partial unit, in the
    /// units importing that one.
    fn lines_of_definition(
        &self,
        unit: &Rc<Unit<'a>>,
        def: gimli::UnitOffset,
        name: &str,
        reversible: bool,
    ) -> Result<FunctionLines> {
        let err = |e| self.dwarf_error(format!("the lines of {name}"), e);
        let def_e = unit.entry(def).map_err(err)?;
        let decl_file = dies::udata_integrated(unit, &def_e, gimli::DW_AT_decl_file)
            .and_then(|f| dies::file_name(self.dw(unit), unit, f));
        let decl = DeclOf {
            line: dies::udata_integrated(unit, &def_e, gimli::DW_AT_decl_line).unwrap_or(0),
            file: decl_file,
            global: dies::global(unit, def),
        };
        let mut lines = Vec::new();
        // The body (or abstract entry) itself, with itself as its function.
        self.copy_lines(unit, (def, def), &decl, reversible, &mut lines)?;
        let unit_off = unit.header.offset().as_debug_info_offset();
        let importers = match unit_off {
            Some(o) => self.with_importers(o, unit)?,
            None => Vec::new(),
        };
        for u in importers {
            let u = self.unit(u)?;
            // Each copy: the out-of-line function it is in (itself, or
            // the function it is inlined into).
            let copies: Vec<_> = self
                .func_dies(&u)?
                .iter()
                .filter(|f| f.origin.is_some() && f.origin == decl.global)
                .map(|f| (f.off, f.top.unwrap_or(f.off)))
                .collect();
            for copy in copies {
                self.copy_lines(&u, copy, &decl, reversible, &mut lines)?;
            }
        }
        lines.sort_unstable();
        lines.dedup();
        Ok(FunctionLines {
            decl_line: decl.line,
            file: self.short_path(unit, decl.file.as_deref().unwrap_or_default()),
            comp_dir: unit
                .comp_dir
                .map(|d| String::from_utf8_lossy(d.slice()).into_owned()),
            lines,
        })
    }

    /// The lines of one copy (`copy`, in the out-of-line function `top`)
    /// of the function `decl`: its declaration line, the statement rows of
    /// its file in its ranges (not inside a function inlined there unless
    /// at that call's line), and the call lines of the functions inlined
    /// into it.
    fn copy_lines(
        &self,
        unit: &Unit<'a>,
        (copy, top): (gimli::UnitOffset, gimli::UnitOffset),
        decl: &DeclOf,
        reversible: bool,
        lines: &mut Vec<u64>,
    ) -> Result<()> {
        let err = |e| self.dwarf_error("the lines of a function".into(), e);
        let ce = unit.entry(copy).map_err(err)?;
        let ranges = dies::ranges(self.dw(unit), unit, &ce).map_err(err)?;
        if ranges.is_empty() {
            return Ok(());
        }
        let te = unit.entry(top).map_err(err)?;
        let top_ranges = dies::ranges(self.dw(unit), unit, &te).map_err(err)?;
        let func = Frame {
            die: top,
            tag: te.tag(),
            entry: dies::entry_pc(self.dw(unit), unit, &te, &top_ranges)
                .map_err(err)?
                .unwrap_or(0),
        };
        let mut nested: Vec<Nested> = Vec::new();
        let mut tree = unit.entries_tree(Some(copy)).map_err(err)?;
        let root = tree.root().map_err(err)?;
        self.inlined_below(unit, root, &mut nested).map_err(err)?;
        let rows = self.rows(unit)?;
        let mut paths = Paths::default();
        for (_, f, l, entry) in &nested {
            let (Some(l), true) = (*l, f.is_some() && *f == decl.file) else {
                continue;
            };
            // perf checks the call line at the copy's entry PC.
            let back = match *entry {
                Some(a) if reversible => {
                    self.maps_back(unit, &rows, func, a, (f.clone(), l), &mut paths)?
                }
                _ => true,
            };
            if back {
                lines.push(l);
            }
        }
        lines.push(decl.line);
        let mut same_file = HashMap::new();
        for r in rows.iter() {
            if !r.is_stmt || r.end || !dies::holds(&ranges, r.address) {
                continue;
            }
            let same = *same_file
                .entry(r.file)
                .or_insert_with(|| paths.get(self, unit, r.file) == decl.file);
            if !same {
                continue;
            }
            let inside = nested
                .iter()
                .filter(|(rg, _, _, _)| dies::holds(rg, r.address));
            let mut holders = inside.peekable();
            if holders.peek().is_some()
                && !holders.any(|(_, f, l, _)| *f == decl.file && *l == Some(r.line))
            {
                continue;
            }
            if reversible {
                let path = paths.get(self, unit, r.file);
                if !self.maps_back(unit, &rows, func, r.address, (path, r.line), &mut paths)? {
                    continue;
                }
            }
            lines.push(r.line);
        }
        Ok(())
    }

    /// The sites of `FUNC;PATTERN`, as perf finds them: the lines of the
    /// function's source file that match the glob, then, in each copy of
    /// the function (its body, and its inlined copies unless turned off),
    /// the addresses the line table gives those lines (statement rows in
    /// the copy's ranges, and not inside a function inlined there unless
    /// the row is that call's line), the copy's entry when its declaration
    /// line matches, and the entry of each function inlined there when its
    /// call line matches.
    pub(crate) fn lazy_sites(
        &self,
        unit_off: gimli::DebugInfoOffset<usize>,
        def: gimli::UnitOffset,
        name: &str,
        pattern: &str,
        opts: &crate::Options,
        out: &mut Vec<Site>,
    ) -> Result<()> {
        let unit = self.unit(unit_off)?;
        let err = |e| self.dwarf_error(format!("the definition of {name}"), e);
        let def_e = unit.entry(def).map_err(err)?;
        let decl_file = dies::udata_integrated(&unit, &def_e, gimli::DW_AT_decl_file)
            .and_then(|f| dies::file_name(self.dw(&unit), &unit, f))
            .unwrap_or_default();
        let comp_dir = unit
            .comp_dir
            .map(|d| String::from_utf8_lossy(d.slice()).into_owned());
        let tried = source_candidates(self.source_dir.as_deref(), comp_dir.as_deref(), &decl_file);
        let Some(text) = tried.iter().find_map(|p| std::fs::read_to_string(p).ok()) else {
            return Err(Error::NoSource {
                point: format!("{name};{pattern}"),
                file: decl_file,
                tried,
            });
        };
        let wanted: HashSet<u64> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| crate::glob::lazy_match(l, pattern))
            .map(|(i, _)| i as u64 + 1)
            .collect();
        let mut copies = Vec::new();
        let entry = crate::point::FunctionPart::Entry;
        self.function_sites(unit_off, name, None, &entry, opts, &mut copies)?;
        let mut addresses = Vec::new();
        for copy in &copies {
            self.lazy_addresses(copy, &decl_file, &wanted, &mut addresses)?;
        }
        addresses.sort_unstable();
        addresses.dedup_by_key(|a| a.0);
        let mut paths = Paths::default();
        for (address, line) in addresses {
            if self.symbols.symbolize(address).is_none() {
                continue;
            }
            let chain = self.chain(&unit, address)?;
            if chain.is_empty() {
                continue;
            }
            // The scope as for FILE:LINE; no "sharing the address" check
            // (perf takes every address of a matching line).
            out.push(self.line_site(
                unit_off, &unit, &chain, address, &decl_file, line, &mut paths,
            )?);
        }
        Ok(())
    }

    /// perf's walk of one copy of a function for lazy lines: (address,
    /// line) pairs (see [`lazy_sites`](Self::lazy_sites)).
    fn lazy_addresses(
        &self,
        copy: &Site,
        file: &str,
        wanted: &HashSet<u64>,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<()> {
        let unit = self.unit(copy.scope.unit)?;
        let err = |e| self.dwarf_error(format!("the lines of {}", copy.function), e);
        let e = unit.entry(copy.scope.die).map_err(err)?;
        let ranges = dies::ranges(self.dw(&unit), &unit, &e).map_err(err)?;
        let rows = self.rows(&unit)?;
        let mut paths = Paths::default();
        let same_file = |p: &str| dies::tail_matches(p, file) || dies::tail_matches(file, p);
        for r in rows.iter().filter(|r| {
            r.is_stmt && !r.end && wanted.contains(&r.line) && dies::holds(&ranges, r.address)
        }) {
            if !paths
                .get(self, &unit, r.file)
                .is_some_and(|p| same_file(&p))
            {
                continue;
            }
            let chain = self.chain(&unit, r.address)?;
            let inner = chain
                .iter()
                .position(|f| f.die == copy.scope.die)
                .and_then(|i| chain.get(i + 1..))
                .and_then(|rest| rest.last());
            if let Some(inner) = inner {
                let ie = unit.entry(inner.die).map_err(err)?;
                let mut at = |file_at, line_at| {
                    let f = ie.val(file_at).and_then(dies::num);
                    let l = ie.val(line_at).and_then(dies::num);
                    l == Some(r.line)
                        && f.and_then(|n| paths.get(self, &unit, n))
                            .is_some_and(|p| same_file(&p))
                };
                let decl = dies::udata_integrated(&unit, &ie, gimli::DW_AT_decl_line)
                    == Some(r.line)
                    && dies::udata_integrated(&unit, &ie, gimli::DW_AT_decl_file)
                        .and_then(|n| dies::file_name(self.dw(&unit), &unit, n))
                        .is_some_and(|p| same_file(&p));
                if !(at(gimli::DW_AT_call_file, gimli::DW_AT_call_line) || decl) {
                    continue;
                }
            }
            out.push((r.address, r.line));
        }
        // The copy's own declaration line, at its entry.
        if let Some(l) = dies::udata_integrated(&unit, &e, gimli::DW_AT_decl_line) {
            if wanted.contains(&l) {
                out.push((copy.address, l));
            }
        }
        // The call lines of the functions inlined into the copy (not those
        // inlined into them).
        let mut tree = unit.entries_tree(Some(copy.scope.die)).map_err(err)?;
        let root = tree.root().map_err(err)?;
        let mut calls = Vec::new();
        inlined_calls(self.dw(&unit), &unit, root, &mut calls).map_err(err)?;
        for (f, l, entry) in calls {
            if wanted.contains(&l) && paths.get(self, &unit, f).is_some_and(|p| same_file(&p)) {
                out.push((entry, l));
            }
        }
        Ok(())
    }
}

/// Where the source file `file` (as DWARF names it) is looked for: under
/// `dir` (perf's `-s`) with its leading directories dropped one at a time
/// until one is found, as perf does; without `dir`, under the compilation
/// directory `comp_dir` (or as is, when absolute).
fn source_candidates(
    dir: Option<&std::path::Path>,
    comp_dir: Option<&str>,
    file: &str,
) -> Vec<std::path::PathBuf> {
    let Some(dir) = dir else {
        return vec![match (comp_dir, file.starts_with('/')) {
            (Some(d), false) => std::path::Path::new(d).join(file),
            _ => file.into(),
        }];
    };
    let mut rest = file.trim_start_matches('/');
    let mut out = vec![dir.join(rest)];
    while let Some((_, tail)) = rest.split_once('/') {
        rest = tail.trim_start_matches('/');
        out.push(dir.join(rest));
    }
    out
}

/// The functions inlined into a scope, not through another inlined one:
/// (call file, call line, entry address) each.
fn inlined_calls<'a>(
    dwarf: &crate::dies::Dwarf<'a>,
    unit: &Unit<'a>,
    node: gimli::EntriesTreeNode<'_, '_, '_, crate::file::R<'a>>,
    out: &mut Vec<(u64, u64, u64)>,
) -> gimli::Result<()> {
    let mut children = node.children();
    while let Some(child) = children.next()? {
        let e = child.entry();
        if e.tag() == gimli::DW_TAG_inlined_subroutine {
            let f = e.val(gimli::DW_AT_call_file).and_then(dies::num);
            let l = e.val(gimli::DW_AT_call_line).and_then(dies::num);
            let ranges = dies::ranges(dwarf, unit, e)?;
            let entry = dies::entry_pc(dwarf, unit, e, &ranges)?;
            if let (Some(f), Some(l), Some(entry)) = (f, l, entry.filter(|&a| a != 0)) {
                out.push((f, l, entry));
            }
            continue;
        }
        inlined_calls(dwarf, unit, child, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod source_tests {
    use std::path::{Path, PathBuf};

    #[test]
    fn sources_are_looked_for_as_perf_does() {
        assert_eq!(
            super::source_candidates(None, Some("/build/linux"), "fs/open.c"),
            [PathBuf::from("/build/linux/fs/open.c")]
        );
        assert_eq!(
            super::source_candidates(Some(Path::new("/src")), Some("/b"), "/b/fs/open.c"),
            ["/src/b/fs/open.c", "/src/fs/open.c", "/src/open.c"].map(PathBuf::from)
        );
    }
}
