//! `--filter EXPR`: each filter applies to the `-e` before it on the
//! command line, as in `perf record`.

use anyhow::{bail, Result};
use clap::ArgMatches;
use kprobe_perf_engine::{BackendChoice, Kernel, ProbePlan};

use crate::inspect;

/// Plans the definitions `specs`, each with its filter (`filters`, as
/// [`pair`] gives them), globs expanded: a glob's functions each take its
/// filter. `inlines`: a source point's inlined copies too. `processes`
/// are the `-p` pids (the files of `usdt:*:...`).
pub(crate) fn plan(
    kernel: &Kernel,
    specs: &[String],
    filters: &[Option<String>],
    all_instances: bool,
    choice: BackendChoice,
    inlines: bool,
    processes: &[i32],
) -> Result<Vec<ProbePlan>> {
    let (specs, filters) = &expand_sources(kernel, specs, filters, choice, inlines)?;
    if filters.iter().all(Option::is_none) {
        let specs = inspect::expand_globs(kernel, specs, all_instances, choice, processes)?;
        return Ok(kernel.plan(&specs, choice)?);
    }
    // Each definition on its own, so that its filter follows what a glob
    // expands it to.
    let mut filtered: Vec<(String, Option<String>)> = Vec::new();
    for (spec, filter) in specs.iter().zip(filters) {
        let one = std::slice::from_ref(spec);
        for s in inspect::expand_globs(kernel, one, all_instances, choice, processes)? {
            filtered.push((s, filter.clone()));
        }
    }
    Ok(kernel.plan_filtered(&filtered, choice)?)
}

/// Replaces each definition whose probe point is a source point
/// (`p:do_sys_openat2@+8 fd`) by one definition per site, from the
/// kernel's DWARF (`inlines`: also each inlined copy), each with the
/// filter of the definition. A site DWARF
/// cannot fetch the variables at, or that the kernel would refuse (an
/// out-of-line body that is notrace, say), is left out and said on
/// stderr; when every site is, the first refusal is the error. The
/// other definitions stay as written.
fn expand_sources(
    kernel: &Kernel,
    specs: &[String],
    filters: &[Option<String>],
    choice: BackendChoice,
    inlines: bool,
) -> Result<(Vec<String>, Vec<Option<String>>)> {
    let mut out = (Vec::new(), Vec::new());
    for (spec, filter) in specs.iter().zip(filters) {
        let Some(expansion) = kernel.expand_source(spec, inlines)? else {
            out.0.push(spec.clone());
            out.1.push(filter.clone());
            continue;
        };
        crate::source::report_refused(&expansion);
        let mut first_refusal = None;
        let before = out.0.len();
        for p in expansion.probes {
            let checked = kernel
                .plan(std::slice::from_ref(&p.definition), choice)
                .map_err(anyhow::Error::from)
                .and_then(|plans| inspect::check_plans(kernel, &plans));
            match checked {
                Ok(()) => {
                    out.0.push(p.definition);
                    out.1.push(filter.clone());
                }
                Err(e) => {
                    let skipped = &p.definition;
                    say!(
                        "kprobe-perf: skipped {skipped}: {}",
                        crate::hints::render(&e)
                    );
                    first_refusal.get_or_insert(e);
                }
            }
        }
        if out.0.len() == before {
            if let Some(e) = first_refusal {
                return Err(e);
            }
        }
    }
    Ok(out)
}

/// Pairs each `-e` (`events`, in order) with the `--filter` given after
/// it and before the next `-e`, from the positions clap saw them at.
/// Refuses a `--filter` before any `-e`, and two for one `-e`.
pub(crate) fn pair(matches: Option<&ArgMatches>, events: &[String]) -> Result<Vec<Option<String>>> {
    let mut out = vec![None; events.len()];
    let Some(m) = matches else {
        return Ok(out);
    };
    let event_at: Vec<usize> = m
        .indices_of("events")
        .map(Iterator::collect)
        .unwrap_or_default();
    let filters: Vec<(usize, &String)> =
        match (m.indices_of("filters"), m.get_many::<String>("filters")) {
            (Some(i), Some(f)) => i.zip(f).collect(),
            _ => return Ok(out),
        };
    pair_at(&event_at, &filters, events, &mut out)?;
    Ok(out)
}

/// [`pair`] over the positions of the `-e`s and of each filter.
fn pair_at(
    event_at: &[usize],
    filters: &[(usize, &String)],
    events: &[String],
    out: &mut [Option<String>],
) -> Result<()> {
    for &(at, filter) in filters {
        let Some(k) = event_at.iter().rposition(|&e| e < at) else {
            bail!(
                "--filter {filter:?} comes before any -e: a filter applies to the probe (-e) given before it, as in perf record; write -e SPEC --filter EXPR"
            );
        };
        let Some(slot) = out.get_mut(k) else {
            bail!("--filter {filter:?}: no probe at position {k} (a bug: please report it)");
        };
        if let Some(first) = slot {
            bail!(
                "two filters for -e {:?} ({first:?} and {filter:?}): give one --filter per probe, joining the conditions with && or ||",
                events.get(k).map_or("?", String::as_str)
            );
        }
        *slot = Some(filter.clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction, Command};

    fn cmd() -> Command {
        Command::new("record")
            .arg(Arg::new("events").short('e').action(ArgAction::Append))
            .arg(Arg::new("filters").long("filter").action(ArgAction::Append))
            .arg(Arg::new("quiet").short('q').action(ArgAction::SetTrue))
    }

    fn parse(argv: &[&str]) -> Result<Vec<Option<String>>> {
        let m = cmd().try_get_matches_from(argv).unwrap();
        let events: Vec<String> = m
            .get_many::<String>("events")
            .map(|v| v.cloned().collect())
            .unwrap_or_default();
        pair(Some(&m), &events)
    }

    #[test]
    fn each_filter_goes_to_the_event_before_it() {
        let got = parse(&[
            "record",
            "-e",
            "a",
            "--filter",
            "x == 1",
            "-e",
            "b",
            "-q",
            "-e",
            "c",
            "--filter",
            "comm == \"sh\"",
        ])
        .unwrap();
        assert_eq!(
            got,
            vec![Some("x == 1".into()), None, Some("comm == \"sh\"".into())]
        );
        assert_eq!(
            parse(&["record", "-e", "a", "-e", "b"]).unwrap(),
            vec![None, None]
        );
        // Other flags between -e and --filter do not matter.
        assert_eq!(
            parse(&["record", "-e", "a", "-q", "--filter", "pid > 1"]).unwrap(),
            vec![Some("pid > 1".into())]
        );
    }

    #[test]
    fn a_filter_before_any_event_or_twice_is_refused() {
        let e = parse(&["record", "--filter", "x == 1", "-e", "a"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--filter \"x == 1\" comes before any -e: a filter applies to the probe (-e) given before it, as in perf record; write -e SPEC --filter EXPR"
        );
        let e = parse(&[
            "record", "-e", "a", "--filter", "x == 1", "--filter", "y == 2",
        ])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "two filters for -e \"a\" (\"x == 1\" and \"y == 2\"): give one --filter per probe, joining the conditions with && or ||"
        );
    }
}
