//! Variables at a site: DWARF locations and types turned into kprobe fetch arguments.

use crate::dies::Attrs as _;

use std::rc::Rc;

use crate::debuginfo::{At, DebugInfo, Options};
use crate::dies::{self, Unit};
use crate::error::{Error, Result};
use crate::point::{Access, ProbeArg, ProbePoint};
use crate::sites::Site;
use crate::types;

/// The x86-64 DWARF register numbers, as kprobe fetch arguments name them.
const X86_64_REGS: [&str; 17] = [
    "%ax", "%dx", "%cx", "%bx", "%si", "%di", "%bp", "%sp", "%r8", "%r9", "%r10", "%r11", "%r12",
    "%r13", "%r14", "%r15", "%ip",
];

/// One argument of a kprobe_events definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchArg {
    /// The argument's name.
    pub name: String,
    /// The fetch expression (`%si`, `+8(%sp)`, `+0(+16(%di))`, `@jiffies+0`).
    pub fetch: String,
    /// The kprobe type (`s32`, `x64`, `string`), or None for the kernel's default.
    pub kind: Option<String>,
}

impl std::fmt::Display for FetchArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.name, self.fetch)?;
        match &self.kind {
            Some(k) => write!(f, ":{k}"),
            None => Ok(()),
        }
    }
}

/// A site with its arguments: one kprobe.
#[derive(Debug, Clone)]
pub struct ProbeSite {
    /// Where.
    pub site: Site,
    /// What to fetch there.
    pub args: Vec<FetchArg>,
}

impl ProbeSite {
    /// The kprobe_events line, as `perf probe -D` prints it:
    /// `p:GROUP/EVENT SYMBOL+OFFSET ARGS...`.
    pub fn definition(&self, group: &str, event: &str) -> String {
        let mut s = format!("p:{group}/{event} {}", self.site.location);
        for a in &self.args {
            s.push(' ');
            s.push_str(&a.to_string());
        }
        s
    }
}

/// The kprobes of a probe point, and the sites refused.
#[derive(Debug)]
pub struct Resolved {
    /// One kprobe per site where every argument could be fetched.
    pub probes: Vec<ProbeSite>,
    /// The sites refused, each with why (e.g. a variable optimized out there).
    pub refused: Vec<(Site, Error)>,
}

/// A variable visible at a site (perf -V).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable {
    /// Its name.
    pub name: String,
    /// Its C type, as perf spells it (`char*`, `struct open_how*`).
    pub type_name: String,
    /// Whether it is a parameter.
    pub parameter: bool,
    /// Its entry, to fetch it without looking it up again.
    pub(crate) die: gimli::UnitOffset,
}

/// Where a fetch starts.
#[derive(Debug, Clone)]
enum Base {
    Reg(u16),
    Symbol(String),
    Immediate(i64),
}

#[derive(Debug, Clone)]
struct Fetch {
    base: Base,
    /// Dereference offsets, innermost first.
    refs: Vec<i64>,
}

impl Fetch {
    fn render(&self) -> Option<String> {
        let (mut s, rest) = match &self.base {
            Base::Reg(r) => (X86_64_REGS.get(*r as usize)?.to_string(), &self.refs[..]),
            Base::Symbol(name) => {
                let (first, rest) = self.refs.split_first()?;
                (format!("@{name}{first:+}"), rest)
            }
            Base::Immediate(v) => return self.refs.is_empty().then(|| format!("\\{v}")),
        };
        for off in rest {
            s = format!("{off:+}({s})");
        }
        Some(s)
    }
}

/// A fetch being walked through fields and indexes, with the type reached.
struct Walk<'f, 'a> {
    fetch: &'f mut Fetch,
    ty: Option<At<'a>>,
    bits: Option<(u64, u64)>,
}

/// Why a location cannot be fetched (before it is given its site and name).
type Why = String;

impl<'a> DebugInfo<'a> {
    /// Resolves a probe point and its arguments into kprobes: one per site.
    ///
    /// A site where an argument cannot be fetched (e.g. optimized out in one
    /// inlined copy) is refused, with its reason, and the other sites kept;
    /// when every site is refused, the first refusal is the error.
    pub fn resolve(
        &self,
        point: &ProbePoint,
        args: &[ProbeArg],
        opts: &Options,
    ) -> Result<Resolved> {
        let sites = self.sites(point, opts)?;
        let mut out = Resolved {
            probes: Vec::with_capacity(sites.len()),
            refused: Vec::new(),
        };
        for site in sites {
            match self.site_args(&site, args) {
                Ok(fetched) => out.probes.push(ProbeSite {
                    site,
                    args: fetched,
                }),
                Err(e) => out.refused.push((site, e)),
            }
        }
        if out.probes.is_empty() && !out.refused.is_empty() {
            let (_, e) = out.refused.swap_remove(0);
            return Err(e);
        }
        Ok(out)
    }

    /// The kprobe at one site: every argument fetched there, or why not.
    pub fn probe_at(&self, site: &Site, args: &[ProbeArg]) -> Result<ProbeSite> {
        Ok(ProbeSite {
            site: site.clone(),
            args: self.site_args(site, args)?,
        })
    }

    fn site_args(&self, site: &Site, args: &[ProbeArg]) -> Result<Vec<FetchArg>> {
        let unit = self.unit(site.scope.unit)?;
        let mut fetched = Vec::new();
        for arg in args {
            match arg {
                ProbeArg::Vars | ProbeArg::Params => {
                    let only_params = matches!(arg, ProbeArg::Params);
                    for v in self.scope_vars(site)? {
                        if only_params && !v.parameter {
                            continue;
                        }
                        let a = ProbeArg::Var {
                            name: None,
                            var: v.name.clone(),
                            path: vec![],
                            cast: None,
                        };
                        if let Ok(f) = self.fetch_die(site, &unit, v.die, &a) {
                            fetched.push(f);
                        }
                    }
                }
                ProbeArg::Var { .. } => fetched.push(self.fetch_arg(site, arg)?),
            }
        }
        Ok(fetched)
    }

    /// The variables that have a value at `site` (perf -V), in DWARF order.
    pub fn variables(&self, site: &Site) -> Result<Vec<Variable>> {
        let unit = self.unit(site.scope.unit)?;
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for v in self.scope_vars(site)? {
            // A name means the first variable of that name in the scope
            // walk, as it does for a fetch (`find_var`): a later one of
            // the same name (a callee's, inlined here) is not what the
            // name would fetch, so it is not listed either.
            if !seen.insert(v.name.clone()) {
                continue;
            }
            let a = ProbeArg::Var {
                name: None,
                var: v.name.clone(),
                path: vec![],
                cast: None,
            };
            if self.fetch_die(site, &unit, v.die, &a).is_ok() {
                out.push(v);
            }
        }
        Ok(out)
    }

    /// Every named variable and parameter in the scope of `site` that has a
    /// place (locations unchecked at the site's address).
    fn scope_vars(&self, site: &Site) -> Result<Vec<Variable>> {
        let unit = self.unit(site.scope.unit)?;
        let mut offs = Vec::new();
        self.collect_vars(&unit, site.scope.die, site.address, &mut offs)?;
        let mut out = Vec::new();
        for off in offs {
            let Ok(e) = unit.entry(off) else { continue };
            if e.has(gimli::DW_AT_external) || !has_place(&e) {
                continue;
            }
            let at = self.at(&unit, off);
            let Some(name) = self.name_at(&at) else {
                continue;
            };
            let ty = self.var_type(&at, &e);
            out.push(Variable {
                name: String::from_utf8_lossy(name).into_owned(),
                type_name: types::type_name(self, ty.as_ref()),
                parameter: e.tag() == gimli::DW_TAG_formal_parameter,
                die: off,
            });
        }
        Ok(out)
    }

    /// Variables under `die`, descending into children that hold `pc` (perf's scope walk).
    fn collect_vars(
        &self,
        unit: &Unit<'a>,
        die: gimli::UnitOffset,
        pc: u64,
        out: &mut Vec<gimli::UnitOffset>,
    ) -> Result<()> {
        let err = |e| self.dwarf_error("the variables of a scope".into(), e);
        let mut tree = unit.entries_tree(Some(die)).map_err(err)?;
        let root = tree.root().map_err(err)?;
        let mut stack = Vec::new();
        walk(self, unit, root, pc, out, &mut stack).map_err(err)
    }

    /// The type of the variable `e` at `at`, from it or its abstract
    /// origin (which dwz may have moved to another unit).
    fn var_type(&self, at: &At<'a>, e: &dies::Entry<'a, '_>) -> Option<At<'a>> {
        types::type_of(self, at, e).or_else(|| {
            let origin = self.follow(at, e.val(gimli::DW_AT_abstract_origin)?)?;
            let o = origin.unit.entry(origin.off).ok()?;
            types::type_of(self, &origin, &o)
        })
    }

    /// Finds variable `name` in the scope of `site` (then among the unit's globals).
    fn find_var(
        &self,
        unit: &Rc<Unit<'a>>,
        site: &Site,
        name: &str,
    ) -> Result<Option<gimli::UnitOffset>> {
        let mut offs = Vec::new();
        self.collect_vars(unit, site.scope.die, site.address, &mut offs)?;
        // The first of that name with a place; else the first of that
        // name, whose refusal then says it has no location.
        let mut placeless = None;
        for off in offs {
            let Ok(e) = unit.entry(off) else { continue };
            if self.name_at(&self.at(unit, off)) == Some(name.as_bytes()) {
                if has_place(&e) {
                    return Ok(Some(off));
                }
                placeless = placeless.or(Some(off));
            }
        }
        if placeless.is_some() {
            return Ok(placeless);
        }
        // Globals of the unit.
        let err = |e| self.dwarf_error("the unit's variables".into(), e);
        let mut tree = unit.entries_tree(None).map_err(err)?;
        let root = tree.root().map_err(err)?;
        let mut children = root.children();
        while let Some(child) = children.next().map_err(err)? {
            let e = child.entry();
            if e.tag() == gimli::DW_TAG_variable
                && dies::name_of(self.dw(unit), unit, e).ok().flatten() == Some(name.as_bytes())
            {
                return Ok(Some(e.offset()));
            }
        }
        Ok(None)
    }

    /// One argument at one site.
    pub(crate) fn fetch_arg(&self, site: &Site, arg: &ProbeArg) -> Result<FetchArg> {
        let ProbeArg::Var { var, .. } = arg else {
            return Err(Error::Syntax {
                input: arg.event_name(),
                reason: "expected a variable".into(),
            });
        };
        let unit = self.unit(site.scope.unit)?;
        let Some(off) = self.find_var(&unit, site, var)? else {
            let available = self
                .variables(site)
                .map(|v| {
                    v.iter()
                        .map(|v| v.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            return Err(Error::NoVariable {
                name: var.clone(),
                site: site.location.clone(),
                available,
            });
        };
        self.fetch_die(site, &unit, off, arg)
    }

    /// One argument at one site, its variable's entry known.
    fn fetch_die(
        &self,
        site: &Site,
        unit: &Rc<Unit<'a>>,
        off: gimli::UnitOffset,
        arg: &ProbeArg,
    ) -> Result<FetchArg> {
        let ProbeArg::Var {
            var, path, cast, ..
        } = arg
        else {
            return Err(Error::Syntax {
                input: arg.event_name(),
                reason: "expected a variable".into(),
            });
        };
        let e = unit
            .entry(off)
            .map_err(|e| self.dwarf_error(format!("variable {var}"), e))?;
        let mut fetch = self.locate(unit, site, &e, var)?;
        let ty = self.var_type(&self.at(unit, off), &e);
        let type_err = |reason: String| Error::Type {
            expr: arg.event_name(),
            site: site.location.clone(),
            reason,
        };
        let mut state = Walk {
            fetch: &mut fetch,
            ty,
            bits: None,
        };
        for step in path {
            self.step(&mut state, step, var).map_err(type_err)?;
        }
        let (ty, bits) = (state.ty, state.bits);
        let ty = ty.as_ref();
        let kind = self
            .kind(ty, bits, cast.as_deref(), &mut fetch)
            .map_err(type_err)?;
        let rendered = fetch.render().ok_or_else(|| Error::Unsupported {
            name: var.clone(),
            site: site.location.clone(),
            reason: "a DWARF register with no x86-64 name".into(),
        })?;
        Ok(FetchArg {
            name: arg.event_name(),
            fetch: rendered,
            kind,
        })
    }

    /// Applies one `->field`, `.field` or `[N]` to a fetch, or says why it does not fit.
    fn step(
        &self,
        st: &mut Walk<'_, 'a>,
        step: &Access,
        var: &str,
    ) -> std::result::Result<(), Why> {
        let shape = st
            .ty
            .as_ref()
            .and_then(|t| types::shape(self, t))
            .ok_or_else(|| format!("{var} has no type information"))?;
        if matches!(st.fetch.base, Base::Immediate(_)) {
            return Err(format!("{var} is a constant, with no memory behind it"));
        }
        match step {
            Access::Arrow(f) | Access::Dot(f) => {
                self.member_step(st, shape, f, matches!(step, Access::Arrow(_)))
            }
            Access::Index(n) => {
                let elem = shape
                    .inner
                    .ok_or_else(|| "the element type is unknown".to_string())?;
                let size = types::shape(self, &elem).and_then(|s| s.size).unwrap_or(0) as i64;
                let by = size.saturating_mul(*n as i64);
                match shape.tag {
                    gimli::DW_TAG_pointer_type => st.fetch.refs.push(by),
                    gimli::DW_TAG_array_type => match st.fetch.refs.last_mut() {
                        Some(last) => *last += by,
                        None => return Err("the array is in a register".into()),
                    },
                    _ => return Err(format!("[{n}] needs an array or a pointer")),
                }
                st.ty = Some(elem);
                st.bits = None;
                Ok(())
            }
        }
    }

    /// Applies `->f` (`arrow`) or `.f` to a fetch of a value of `shape`.
    fn member_step(
        &self,
        st: &mut Walk<'_, 'a>,
        shape: types::Shape<'a>,
        f: &str,
        arrow: bool,
    ) -> std::result::Result<(), Why> {
        let is_ptr = shape.tag == gimli::DW_TAG_pointer_type;
        if arrow != is_ptr {
            return Err(if arrow {
                format!("'->{f}' needs a pointer; this is a structure, use '.{f}'")
            } else {
                format!("'.{f}' needs a structure; this is a pointer, use '->{f}'")
            });
        }
        let agg = if arrow { shape.inner } else { st.ty.clone() };
        let agg = agg
            .and_then(|t| types::real_type(self, t))
            .ok_or_else(|| format!("the type holding {f} is unknown"))?;
        let m = types::find_member(self, &agg, f.as_bytes(), 0)
            .ok_or_else(|| format!("{} has no member {f}", types::type_name(self, Some(&agg))))?;
        if arrow {
            st.fetch.refs.push(m.offset as i64);
        } else {
            let last = st.fetch.refs.last_mut().ok_or_else(|| {
                format!("the structure is in a register; kprobes cannot take its member .{f}")
            })?;
            *last += m.offset as i64;
        }
        st.ty = m.ty;
        st.bits = m.bits;
        Ok(())
    }

    /// The kprobe type of the fetched value.
    fn kind(
        &self,
        ty: Option<&At<'a>>,
        bits: Option<(u64, u64)>,
        cast: Option<&str>,
        fetch: &mut Fetch,
    ) -> std::result::Result<Option<String>, String> {
        let shape = ty.and_then(|t| types::shape(self, t));
        if let Some(c @ ("string" | "ustring")) = cast {
            let shape = shape.ok_or("no type information to cast into a string")?;
            match shape.tag {
                gimli::DW_TAG_pointer_type => fetch.refs.push(0),
                gimli::DW_TAG_array_type if !fetch.refs.is_empty() => {}
                _ => return Err("only a char pointer or array can be read as a string".into()),
            }
            if !types::is_char(self, shape.inner.as_ref()) {
                return Err("only (unsigned) char * can be read as a string".into());
            }
            return Ok(Some(c.to_string()));
        }
        if let Some((size, off)) = bits {
            let container = shape.as_ref().and_then(|s| s.size).unwrap_or(4) * 8;
            return Ok(Some(format!("b{size}@{off}/{container}")));
        }
        let prefix = match cast {
            Some("u") => 'u',
            Some("s") => 's',
            Some("x") => 'x',
            Some(other) => return Ok(Some(other.to_string())),
            None if shape.as_ref().is_some_and(|s| s.signed) => 's',
            None => 'x',
        };
        Ok(shape
            .and_then(|s| s.size)
            .filter(|&b| b > 0)
            .map(|b| format!("{prefix}{}", (b * 8).min(64))))
    }

    /// Where variable `e` is at the site, as a fetch.
    fn locate(
        &self,
        unit: &Unit<'a>,
        site: &Site,
        e: &dies::Entry<'a, '_>,
        var: &str,
    ) -> Result<Fetch> {
        let unsupported = |reason: String| Error::Unsupported {
            name: var.to_string(),
            site: site.location.clone(),
            reason,
        };
        if let Some(v) = e.val(gimli::DW_AT_const_value) {
            if let Some(n) = v
                .sdata_value()
                .or_else(|| v.udata_value().map(|u| u as i64))
            {
                return Ok(Fetch {
                    base: Base::Immediate(n),
                    refs: vec![],
                });
            }
            return Err(unsupported(
                "its value is a constant block the compiler kept no memory for".into(),
            ));
        }
        let Some(loc) = e.val(gimli::DW_AT_location) else {
            return Err(Error::NotLiveHere {
                name: var.to_string(),
                site: site.location.clone(),
                ranges: Vec::new(),
            });
        };
        let pc = site.address;
        let expr = match loc {
            gimli::AttributeValue::Exprloc(x) => x,
            _ => {
                let entries = self
                    .loclist(unit, loc)
                    .map_err(|e| self.dwarf_error(format!("the location list of {var}"), e))?;
                let here = entries.iter().find(|(b, end, _)| *b <= pc && pc < *end);
                let is_param = e.tag() == gimli::DW_TAG_formal_parameter;
                let func_entry = self.func_entry(unit, site.scope.func);
                let later = || {
                    // perf's rule: a parameter at the function's entry with no
                    // location yet takes its first location in the function.
                    let func_end = self.func_end(unit, site.scope.func)?;
                    entries
                        .iter()
                        .filter(|(b, _, _)| *b > pc && *b < func_end)
                        .min_by_key(|(b, _, _)| *b)
                };
                match here.or_else(|| {
                    if is_param && func_entry == Some(pc) {
                        later()
                    } else {
                        None
                    }
                }) {
                    Some((_, _, x)) => *x,
                    None => {
                        let ranges = entries
                            .iter()
                            .map(|(b, end, _)| {
                                format!("{}..{}", self.sym_off(*b), self.sym_off(*end))
                            })
                            .collect::<Vec<_>>();
                        return Err(Error::NotLiveHere {
                            name: var.to_string(),
                            site: site.location.clone(),
                            ranges,
                        });
                    }
                }
            }
        };
        self.expression(unit, site, expr, var).map_err(unsupported)
    }

    fn func_entry(&self, unit: &Unit<'a>, func: gimli::UnitOffset) -> Option<u64> {
        let e = unit.entry(func).ok()?;
        let r = dies::ranges(self.dw(unit), unit, &e).ok()?;
        dies::entry_pc(self.dw(unit), unit, &e, &r).ok()?
    }

    fn func_end(&self, unit: &Unit<'a>, func: gimli::UnitOffset) -> Option<u64> {
        let e = unit.entry(func).ok()?;
        dies::ranges(self.dw(unit), unit, &e)
            .ok()?
            .iter()
            .map(|r| r.end)
            .max()
    }

    fn loclist(
        &self,
        unit: &Unit<'a>,
        loc: gimli::AttributeValue<crate::file::R<'a>>,
    ) -> gimli::Result<Vec<(u64, u64, gimli::Expression<crate::file::R<'a>>)>> {
        let mut out = Vec::new();
        if let Some(mut it) = self.dw(unit).attr_locations(unit, loc)? {
            while let Some(entry) = it.next()? {
                out.push((entry.range.begin, entry.range.end, entry.data));
            }
        }
        Ok(out)
    }

    /// Turns a location expression into a fetch, or says why it cannot be one.
    fn expression(
        &self,
        unit: &Unit<'a>,
        site: &Site,
        expr: gimli::Expression<crate::file::R<'a>>,
        var: &str,
    ) -> std::result::Result<Fetch, Why> {
        let ops = operations(unit, expr)?;
        use gimli::Operation as Op;
        let stack_value = matches!(ops.last(), Some(Op::StackValue));
        let pieces = ops.iter().filter(|o| matches!(o, Op::Piece { .. })).count();
        if pieces > 1 {
            return Err(
                "the value is split over several places (DW_OP_piece); kprobes cannot join them"
                    .into(),
            );
        }
        if ops.iter().any(|o| matches!(o, Op::EntryValue { .. })) {
            return Err("its location is DW_OP_entry_value (the value the caller passed, kept nowhere at this address); DW_OP_entry_value is not supported".into());
        }
        let core: Vec<&Op<_>> = ops
            .iter()
            .filter(|o| !matches!(o, Op::Piece { .. } | Op::StackValue))
            .collect();
        match (core.as_slice(), stack_value) {
            ([Op::Register { register }], false) => Ok(Fetch {
                base: Base::Reg(register.0),
                refs: vec![],
            }),
            (
                [Op::RegisterOffset {
                    register, offset, ..
                }],
                false,
            ) => Ok(Fetch {
                base: Base::Reg(register.0),
                refs: vec![*offset],
            }),
            (
                [Op::RegisterOffset {
                    register,
                    offset: 0,
                    ..
                }],
                true,
            ) => Ok(Fetch {
                base: Base::Reg(register.0),
                refs: vec![],
            }),
            ([Op::FrameOffset { offset }], false) => {
                let (reg, base) = self.frame_base(unit, site)?;
                Ok(Fetch {
                    base: Base::Reg(reg),
                    refs: vec![base + offset],
                })
            }
            ([Op::Address { address }], false) => {
                let name = match self.symbols.symbolize(*address) {
                    Some((s, 0)) => s.name.to_string(),
                    _ => var.to_string(),
                };
                Ok(Fetch {
                    base: Base::Symbol(name),
                    refs: vec![0],
                })
            }
            ([Op::UnsignedConstant { value }], true) => Ok(Fetch {
                base: Base::Immediate(*value as i64),
                refs: vec![],
            }),
            ([Op::SignedConstant { value }], true) => Ok(Fetch {
                base: Base::Immediate(*value),
                refs: vec![],
            }),
            _ => self.load_chain(unit, site, &core, stack_value),
        }
    }

    /// An expression of loads from a register: `DW_OP_bregN K` (or
    /// `DW_OP_fbreg K`), then any number of `DW_OP_deref` and
    /// `DW_OP_plus_uconst` (or a constant and `DW_OP_plus`/`DW_OP_minus`), which kprobes
    /// fetch as nested dereferences: `DW_OP_breg5 0; DW_OP_deref;
    /// DW_OP_plus_uconst 8; DW_OP_deref` locates the variable at
    /// `*(*(%di) + 8)`, so its value is `+0(+8(+0(%di)))`. With
    /// `DW_OP_stack_value` the expression is the value itself, which a
    /// fetch can give only when nothing is added after the last load.
    fn load_chain(
        &self,
        unit: &Unit<'a>,
        site: &Site,
        ops: &[&gimli::Operation<crate::file::R<'a>>],
        stack_value: bool,
    ) -> std::result::Result<Fetch, Why> {
        use gimli::Operation as Op;
        let computed = || -> Why {
            "its value is computed (DW_OP_stack_value over an expression) and kprobe fetch arguments cannot compute".into()
        };
        let unsupported =
            || -> Why { format!("its location expression {ops:?} has no kprobe fetch equivalent") };
        let (mut fetch, mut pending) = match ops.first() {
            Some(Op::RegisterOffset {
                register, offset, ..
            }) => (
                Fetch {
                    base: Base::Reg(register.0),
                    refs: vec![],
                },
                *offset,
            ),
            Some(Op::FrameOffset { offset }) => {
                let (reg, base) = self.frame_base(unit, site)?;
                (
                    Fetch {
                        base: Base::Reg(reg),
                        refs: vec![],
                    },
                    base + offset,
                )
            }
            _ => {
                return Err(if stack_value {
                    computed()
                } else {
                    unsupported()
                })
            }
        };
        let mut rest = &ops[1..];
        while let Some((op, tail)) = rest.split_first() {
            rest = tail;
            match op {
                Op::Deref {
                    size, space: false, ..
                } if *size == unit.encoding().address_size => {
                    fetch.refs.push(pending);
                    pending = 0;
                }
                Op::PlusConstant { value } => {
                    pending = pending.wrapping_add(*value as i64);
                }
                Op::UnsignedConstant { value } if matches!(tail.first(), Some(Op::Plus)) => {
                    pending = pending.wrapping_add(*value as i64);
                    rest = &tail[1..];
                }
                Op::SignedConstant { value } if matches!(tail.first(), Some(Op::Plus)) => {
                    pending = pending.wrapping_add(*value);
                    rest = &tail[1..];
                }
                Op::UnsignedConstant { value } if matches!(tail.first(), Some(Op::Minus)) => {
                    pending = pending.wrapping_sub(*value as i64);
                    rest = &tail[1..];
                }
                _ => {
                    return Err(if stack_value {
                        computed()
                    } else {
                        unsupported()
                    })
                }
            }
        }
        match (stack_value, pending) {
            (false, k) => fetch.refs.push(k),
            (true, 0) => {}
            (true, _) => return Err(computed()),
        }
        Ok(fetch)
    }

    /// The frame base of the site's function at its address: (register, offset).
    fn frame_base(&self, unit: &Unit<'a>, site: &Site) -> std::result::Result<(u16, i64), Why> {
        let func = unit.entry(site.scope.func).map_err(|e| e.to_string())?;
        let expr = match func.val(gimli::DW_AT_frame_base) {
            Some(gimli::AttributeValue::Exprloc(x)) => x,
            Some(other) => {
                let entries = self.loclist(unit, other).map_err(|e| e.to_string())?;
                entries
                    .into_iter()
                    .find(|(b, e, _)| *b <= site.address && site.address < *e)
                    .map(|(_, _, x)| x)
                    .ok_or("the function has no frame base at this address")?
            }
            None => return Err("the function has no frame base (DW_AT_frame_base)".into()),
        };
        let ops = operations(unit, expr)?;
        match ops.as_slice() {
            [gimli::Operation::CallFrameCFA] => self.cfa(site.address).ok_or_else(|| {
                "the frame base is the CFA, and no call frame information covers this address"
                    .into()
            }),
            [gimli::Operation::Register { register }] => Ok((register.0, 0)),
            [gimli::Operation::RegisterOffset {
                register, offset, ..
            }] => Ok((register.0, *offset)),
            other => Err(format!(
                "the frame base {other:?} is not a register or the CFA"
            )),
        }
    }
}

/// Whether a variable's entry says where it is: a location (list), a
/// constant value, or an external definition. A name means the first
/// variable of that name in the scope walk that has one (an entry without
/// one, such as an inlined copy's parameter the compiler dropped, is
/// passed over), as perf's lookup does.
fn has_place(e: &dies::Entry<'_, '_>) -> bool {
    e.has(gimli::DW_AT_location) || e.has(gimli::DW_AT_const_value) || e.has(gimli::DW_AT_external)
}

fn operations<'a>(
    unit: &Unit<'a>,
    expr: gimli::Expression<crate::file::R<'a>>,
) -> std::result::Result<Vec<gimli::Operation<crate::file::R<'a>>>, Why> {
    let mut ops = Vec::new();
    let mut it = expr.operations(unit.encoding());
    while let Some(op) = it
        .next()
        .map_err(|e| format!("unreadable location expression: {e}"))?
    {
        ops.push(op);
    }
    if ops.is_empty() {
        return Err("the location is empty (optimized out)".into());
    }
    Ok(ops)
}

/// DFS for perf's scope walk: record variables, descend into children holding `pc`.
fn walk<'a>(
    di: &DebugInfo<'a>,
    unit: &Unit<'a>,
    node: gimli::EntriesTreeNode<'_, '_, '_, crate::file::R<'a>>,
    pc: u64,
    out: &mut Vec<gimli::UnitOffset>,
    depth: &mut Vec<()>,
) -> gimli::Result<()> {
    if depth.len() > 64 {
        return Ok(());
    }
    let mut children = node.children();
    while let Some(child) = children.next()? {
        let e = child.entry();
        match e.tag() {
            gimli::DW_TAG_formal_parameter | gimli::DW_TAG_variable
                if !e.has(gimli::DW_AT_declaration) =>
            {
                out.push(e.offset());
            }
            gimli::DW_TAG_lexical_block | gimli::DW_TAG_inlined_subroutine => {
                let ranges = dies::ranges(di.dw(unit), unit, e)?;
                if dies::holds(&ranges, pc) {
                    depth.push(());
                    walk(di, unit, child, pc, out, depth)?;
                    depth.pop();
                }
            }
            _ => {}
        }
    }
    Ok(())
}
