//! Decoding a perf.data file kprobe-perf wrote, as the live session
//! decoded it: the same plans, the same thread names, the same symbols and
//! the same time ordering round by round.

use std::collections::HashMap;
use std::io::{Read, Seek};

use kprobe_perf_symbols::KernelSymbols;

use super::{
    Metadata, PerfDataError, Reader, FEAT_KPROBE_PERF, RECORD_FINISHED_ROUND, RECORD_LOST,
};
use crate::decode::records::{Handover, RecordDecoder, ThreadNames, RECORD_COMM, RECORD_SAMPLE};
use crate::decode::records::{OpenedProbe, RingRecord};
use crate::decode::records::{RECORD_EXIT, RECORD_FORK, RECORD_MMAP, RECORD_MMAP2};
use crate::decode::{Event, Handed};
use crate::plan::ProbePlan;
use crate::stack::ProcessMaps;

/// A perf.data file being replayed.
pub struct Replay<R> {
    reader: Reader<R>,
    meta: Metadata,
    decoder: RecordDecoder,
    symbols: KernelSymbols,
    /// Executable mappings from the file's MMAP records.
    maps: ProcessMaps,
    /// The mark of the hidden region read but whose round has not ended
    /// yet ([`super::FEAT_HIDDEN`]).
    hidden_mark: Option<u64>,
}

impl<R: Read + Seek> Replay<R> {
    /// Plans the file's probes again from its kprobe-perf section.
    pub fn new(reader: Reader<R>) -> Result<Self, PerfDataError> {
        let meta = reader.metadata()?;
        let at = reader
            .feature(FEAT_KPROBE_PERF)
            .map_or(0, |(s, _)| s.offset);
        let bad = |reason: String| PerfDataError::Feature {
            feature: FEAT_KPROBE_PERF,
            offset: at,
            reason,
        };
        if meta.probes.len() != reader.attrs().len() {
            return Err(bad(format!(
                "{} probes for {} attrs",
                meta.probes.len(),
                reader.attrs().len()
            )));
        }
        let symbols = KernelSymbols::parse(&meta.symbols)
            .map_err(|e| bad(format!("the stored symbols: {e}")))?;
        let plans = meta
            .probes
            .iter()
            .map(|p| {
                p.plan(meta.arch, &symbols)
                    .map_err(|e| bad(format!("probe {}: {e}", p.event)))
            })
            .collect::<Result<Vec<ProbePlan>, _>>()?;
        let mut probe_of_id = HashMap::new();
        for (i, a) in reader.attrs().iter().enumerate() {
            for &id in &a.ids {
                probe_of_id.insert(id, i);
            }
        }
        // Return probes joined to hidden entry probes ([`crate::plan::entry_join`])
        // are joined again, so the replay prints what the run printed.
        let reopened =
            crate::plan::entry_join::expand(crate::plan::entry_join::rejoin(&plans, meta.arch));
        let joiner = crate::decode::joiner::Joiner::new(&reopened);
        let probes = plans
            .into_iter()
            .zip(reader.attrs())
            .zip(&meta.probes)
            .map(|((plan, a), p)| OpenedProbe {
                plan,
                attr: a.attr.clone(),
                field_offsets: p.field_offsets.clone(),
            })
            .collect();
        let mut decoder = RecordDecoder::new(probes, probe_of_id, ThreadNames::RecordsOnly)
            .map_err(|e| bad(e.to_string()))?;
        if let Some(j) = joiner.filter(|_| reopened.opened.len() == decoder.plans().len()) {
            decoder.join_entries(j);
        }
        Ok(Replay {
            reader,
            meta,
            decoder,
            symbols,
            maps: ProcessMaps::default(),
            hidden_mark: None,
        })
    }

    /// Whether the file was never finished, and where its whole records
    /// end once the replay has run ([`Reader::unfinished`]).
    pub fn unfinished(&self) -> Option<super::Unfinished> {
        self.reader.unfinished()
    }

    /// What the file holds besides records.
    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// The decoder, with its plans and counters.
    pub fn decoder(&self) -> &RecordDecoder {
        &self.decoder
    }

    /// The kernel symbols the live run's output used.
    pub fn symbols(&self) -> &KernelSymbols {
        &self.symbols
    }

    /// Hands every event to `f` in the order the live run printed them,
    /// with the plans and symbols to print them with, and the processes'
    /// executable mappings the file's MMAP records gave so far (to name
    /// user frames). A record that cannot
    /// be decoded ends the replay with an error naming it.
    pub fn run(
        &mut self,
        mut f: impl FnMut(&Event, &[ProbePlan], &KernelSymbols, &ProcessMaps),
    ) -> Result<u64, PerfDataError> {
        self.run_handed(|h, plans, symbols, maps| match h {
            Handed::Event(e) => {
                f(e, plans, symbols, maps);
                true
            }
            Handed::Ints(_) => false,
        })
    }

    /// As [`Replay::run`], with kprobe hits of integer arguments only
    /// offered as [`Handed::Ints`] (as they wait in time order, without
    /// an [`Event`] made of each): `f` returns false to decline one, which
    /// it is then given as an [`Event`]. What `f` returns for an [`Event`]
    /// is ignored.
    pub fn run_handed(
        &mut self,
        mut f: impl FnMut(Handed<'_>, &[ProbePlan], &KernelSymbols, &ProcessMaps) -> bool,
    ) -> Result<u64, PerfDataError> {
        let Replay {
            reader,
            decoder,
            symbols,
            maps,
            hidden_mark,
            ..
        } = self;
        let mut n = 0u64;
        let mut round = 0u64;
        // A mapped file's user stacks wait for their turn where they are.
        if let Some(bytes) = reader.mapped_bytes() {
            decoder.read_in_place(bytes);
        }
        while let Some(rec) = reader.next_record()? {
            match rec.kind {
                RECORD_FINISHED_ROUND => {
                    feed_hidden(reader, decoder, hidden_mark, Some(round))?;
                    round += 1;
                    let bytes = reader.mapped_bytes().unwrap_or(&[]);
                    n += decoder.round_in_place(Handover::Ordered, bytes, |h, plans| {
                        f(h, plans, symbols, maps)
                    }) as u64;
                }
                RECORD_SAMPLE | RECORD_COMM | RECORD_LOST => {
                    decoder
                        .record(RingRecord::new(rec.kind, rec.misc, (rec.body, &[])))
                        .map_err(|e| PerfDataError::Record {
                            index: rec.index,
                            kind: rec.kind,
                            offset: rec.offset,
                            reason: e.to_string(),
                        })?;
                }
                RECORD_MMAP | RECORD_MMAP2 => {
                    let record = RingRecord::new(rec.kind, rec.misc, (rec.body, &[]));
                    maps.note_record(record);
                    // The DWARF unwinder follows mappings too (never an
                    // error: a mapping needs no probe).
                    let _ = decoder.record(record);
                }
                // A child is called what its parent was until a COMM
                // record names it, as perf names it (a file whose samples
                // were counted at its end holds no COMM record for it
                // before its samples); processes' mappings follow forks
                // and end at exit. A record of a probe this file lacks is
                // skipped.
                RECORD_FORK => {
                    let _ = decoder.record(RingRecord::new(rec.kind, rec.misc, (rec.body, &[])));
                }
                RECORD_EXIT if decoder.unwinds_user_stacks() => {
                    let _ = decoder.record(RingRecord::new(rec.kind, rec.misc, (rec.body, &[])));
                }
                // The kernel MMAP and records the session ignores too.
                _ => {}
            }
        }
        feed_hidden(reader, decoder, hidden_mark, None)?;
        let bytes = reader.mapped_bytes().unwrap_or(&[]);
        n += decoder.round_in_place(Handover::All, bytes, |h, plans| f(h, plans, symbols, maps))
            as u64;
        Ok(n)
    }
}

/// Gives `decoder` the hidden probes' samples ([`super::FEAT_HIDDEN`]) of
/// every round up to `round` (the index of the data section's
/// `FINISHED_ROUND` just read), or all that are left with `None`. `mark`
/// keeps a later round's mark read ahead.
fn feed_hidden<R: Read + Seek>(
    reader: &mut Reader<R>,
    decoder: &mut RecordDecoder,
    mark: &mut Option<u64>,
    round: Option<u64>,
) -> Result<(), PerfDataError> {
    let later = |m: u64| round.is_some_and(|r| m > r);
    if mark.is_some_and(later) {
        return Ok(());
    }
    *mark = None;
    while let Some(rec) = reader.next_hidden_record()? {
        let err = |reason: String| PerfDataError::Record {
            index: rec.index,
            kind: rec.kind,
            offset: rec.offset,
            reason,
        };
        match rec.kind {
            RECORD_FINISHED_ROUND => {
                let m = rec
                    .body
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes)
                    .ok_or_else(|| err("a hidden round mark without its round".into()))?;
                if later(m) {
                    *mark = Some(m);
                    return Ok(());
                }
            }
            RECORD_SAMPLE => decoder
                .record(RingRecord::new(rec.kind, rec.misc, (rec.body, &[])))
                .map_err(|e| err(format!("in the hidden probes' region: {e}")))?,
            _ => {
                return Err(err(
                    "a record other than a sample in the hidden probes' region".into(),
                ))
            }
        }
    }
    Ok(())
}
