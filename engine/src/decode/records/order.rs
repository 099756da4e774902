//! Time order across CPUs, round by round, without building an owned
//! [`Event`] per sample: decoded samples wait as small fixed-size slots
//! (integer arguments as bare integers in one shared arena, other values
//! in another), and each is turned into a single reused [`Event`] only
//! when it is handed over.

use std::ops::ControlFlow;
use std::sync::Arc;

use kprobe_perf_arch::boundary::ProbeSite;

use crate::decode::frames::StackFrame;
use crate::decode::records::Handover;
use crate::decode::{refill_ints, set_args, ArgsOut, Event, EventHead, Handed, IntEvent, Value};

/// A decoded sample waiting for its turn.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    head: EventHead,
    /// Where its arguments start in [`EventQueue::ints`] and
    /// [`EventQueue::others`] (which never hold 2^32 values: a round's
    /// events are handed over by the next, and dropped a few rounds
    /// later).
    ints_at: u32,
    others_at: u32,
    /// Where its callchain's frames start in [`EventQueue::frames`], and
    /// how many.
    frames_at: u32,
    frames_len: u32,
    /// Where its user stack copy starts in [`EventQueue::user`] (or in
    /// the bytes read in place, `user_in_place`), and how many bytes, for
    /// DWARF unwinding at handover, once every ring's mappings up to its
    /// time have been read.
    user_at: u64,
    user_len: u32,
    /// Where its user registers (pc, sp, fp, lr: 32 bytes) start in
    /// [`EventQueue::user`], when it has them (`has_user`).
    regs_at: u32,
    has_user: bool,
    /// The user stack lies at `user_at` in the bytes handed to
    /// [`EventQueue::round`] (a mapped file), not in [`EventQueue::user`].
    user_in_place: bool,
}

/// How [`EventQueue::round`] unwinds user stacks: `unwind(pid, time,
/// regs, stack, frames)` appends a sample's user frames, and the stacks
/// kept in place ([`EventQueue::set_user_stack_in_place`]) are read from
/// `in_place`.
pub(crate) struct UserStacksAt<'a, U> {
    pub(crate) in_place: &'a [u8],
    pub(crate) unwind: U,
}

/// Puts the events of successive poll rounds in time order: an event is
/// handed over once a later round has passed its time (a CPU may still be
/// writing an older event when another's ring is read).
#[derive(Debug)]
pub(crate) struct EventQueue {
    /// Handed over (up to `done`), then read and not yet handed over: in
    /// time order up to `sorted`, then in the order they were read. A
    /// slot being filled sits at the back. Handed-over slots and their
    /// arguments are dropped together, once they far outnumber the waiting
    /// ones ([`EventQueue::compact`]), so that the waiting ones are not
    /// moved at every round.
    pending: Vec<Slot>,
    /// How many of `pending` (from the front) have been handed over.
    done: usize,
    /// How many of `pending` (from the front) are known to be in order.
    sorted: usize,
    /// Integer arguments of the pending slots.
    ints: Vec<u64>,
    /// Other argument values of the pending slots.
    others: Vec<Value>,
    /// Callchain frames of the pending slots.
    frames: Vec<StackFrame>,
    /// User registers (pc, sp, fp, lr: 32 bytes) and stack bytes of the
    /// pending slots that carry them.
    user: Vec<u8>,
    /// Every event up to this time has been read: the newest time of an
    /// earlier round.
    complete_before: u64,
    /// Every record up to this time has been read (as of the last
    /// ordered round).
    read_up_to: u64,
    /// The newest time of this round.
    round_max: Option<u64>,
    /// The events handed to callers, refilled for each slot: one per name
    /// (direct-mapped by name index), so that handing over an event of
    /// another thread does not touch a name's reference count.
    scratch: Vec<(u32, Event)>,
}

impl EventQueue {
    /// Events kept for reuse (a power of two).
    const SCRATCH: usize = 256;
    /// Bytes of a user stack read in place brought into the caches ahead
    /// of its unwinding: the frames of most stacks lie in them.
    const PREFETCH: usize = 2048;

    pub(crate) fn new() -> EventQueue {
        EventQueue {
            pending: Vec::new(),
            done: 0,
            sorted: 0,
            ints: Vec::new(),
            others: Vec::new(),
            frames: Vec::new(),
            user: Vec::new(),
            complete_before: 0,
            read_up_to: 0,
            round_max: None,
            scratch: Vec::new(),
        }
    }

    /// Starts a slot at the back, for a sample's decoding to fill in place;
    /// it must be ended by [`EventQueue::commit`] or [`EventQueue::abort`].
    #[inline(always)]
    pub(crate) fn begin(&mut self) -> (&mut EventHead, ArgsOut<'_>) {
        self.pending.push(Slot {
            ints_at: self.ints.len() as u32,
            others_at: self.others.len() as u32,
            frames_at: self.frames.len() as u32,
            regs_at: self.user.len() as u32,
            ..Slot::default()
        });
        let head = match self.pending.last_mut() {
            Some(slot) => &mut slot.head,
            // Not reached: a slot was just pushed.
            None => unreachable!("a slot was just pushed"),
        };
        let args = ArgsOut {
            ints: &mut self.ints,
            others: &mut self.others,
        };
        (head, args)
    }

    /// Queues a slot for `head`, whose arguments are then pushed to the
    /// arguments returned; it must be ended by [`EventQueue::commit`] or
    /// [`EventQueue::abort`].
    #[inline(always)]
    pub(crate) fn begin_with(&mut self, head: EventHead) -> ArgsOut<'_> {
        self.pending.push(Slot {
            head,
            ints_at: self.ints.len() as u32,
            others_at: self.others.len() as u32,
            frames_at: self.frames.len() as u32,
            regs_at: self.user.len() as u32,
            ..Slot::default()
        });
        ArgsOut {
            ints: &mut self.ints,
            others: &mut self.others,
        }
    }

    /// Gives the slot begun last the frames of a raw callchain (context
    /// markers read, see [`crate::stack`]).
    pub(crate) fn set_frames(&mut self, chain: impl Iterator<Item = u64>) {
        let at = self.frames.len();
        crate::decode::frames::push_frames(chain, &mut self.frames);
        if let Some(s) = self.pending.last_mut() {
            s.frames_at = at as u32;
            s.frames_len = (self.frames.len() - at) as u32;
        }
    }

    /// Keeps the user registers (pc, sp, fp, lr) and stack copy of the
    /// slot begun last, to be unwound at handover.
    pub(crate) fn set_user_stack(&mut self, regs: [u64; 4], stack: &[u8]) {
        if self.set_regs(regs) {
            let at = self.user.len();
            self.user.extend_from_slice(stack);
            if let Some(s) = self.pending.last_mut() {
                s.user_at = at as u64;
                s.user_len = stack.len() as u32;
            }
        }
    }

    /// As [`EventQueue::set_user_stack`], for a stack of `len` bytes that
    /// stays at `at` in the bytes [`EventQueue::round`] will be given (a
    /// mapped file): only the registers are copied.
    pub(crate) fn set_user_stack_in_place(&mut self, regs: [u64; 4], at: u64, len: usize) {
        if self.set_regs(regs) {
            if let Some(s) = self.pending.last_mut() {
                s.user_at = at;
                s.user_len = len as u32;
                s.user_in_place = true;
            }
        }
    }

    /// Keeps the user registers of the slot begun last; false if there
    /// is none.
    fn set_regs(&mut self, regs: [u64; 4]) -> bool {
        let at = self.user.len();
        let Some(s) = self.pending.last_mut() else {
            return false;
        };
        s.regs_at = at as u32;
        s.has_user = true;
        for r in regs {
            self.user.extend_from_slice(&r.to_ne_bytes());
        }
        true
    }

    /// The time up to which every record had been read when the last
    /// round began handing events over.
    pub(crate) fn read_up_to(&self) -> u64 {
        self.read_up_to
    }

    /// Queues the slot begun last.
    #[inline(always)]
    pub(crate) fn commit(&mut self) {
        let n = self.pending.len();
        let Some(t) = self.pending.last().map(|s| s.head.time_ns) else {
            return;
        };
        self.round_max = Some(self.round_max.map_or(t, |m| m.max(t)));
        if self.sorted + 1 == n
            && (n < self.done + 2 || self.pending.get(n - 2).is_some_and(|b| b.head.time_ns <= t))
        {
            self.sorted = n;
        }
    }

    /// Drops the slot begun last and its arguments (a sample not handed
    /// over).
    #[inline]
    pub(crate) fn abort(&mut self) {
        if let Some(s) = self.pending.pop() {
            self.ints.truncate(s.ints_at as usize);
            self.others.truncate(s.others_at as usize);
            self.frames.truncate(s.frames_at as usize);
            self.user.truncate(s.regs_at as usize);
        }
    }

    /// Number of events waiting.
    pub(crate) fn len(&self) -> usize {
        self.pending.len() - self.done
    }

    /// Ends a round: hands `f` the events now known to be in order (all of
    /// them with [`Handover::All`]), with the shapes of the probes in `probes`. The
    /// thread of an event is named `names[name_of(event)]` (the first
    /// entry names threads without a known name): asked in time order,
    /// once every record up to the event's time has been read. A `Break`
    /// from `f` keeps the events not yet handed over for the next round.
    /// Returns how many were handed over.
    pub(crate) fn round(
        &mut self,
        names: &[Arc<str>],
        mut name_of: impl FnMut(&EventHead) -> u32,
        probes: &[super::ProbeLayout],
        handover: Handover,
        user: UserStacksAt<'_, impl FnMut(i32, u64, [u64; 4], &[u8], &mut Vec<StackFrame>)>,
        mut f: impl FnMut(Handed<'_>) -> Option<ControlFlow<()>>,
    ) -> usize {
        let UserStacksAt {
            in_place,
            mut unwind,
        } = user;
        let ready = self.ready(handover);
        // Events after a `Break` stay queued, in order, for the next round.
        let mut handed = 0;
        let batch = self
            .pending
            .get(self.done..self.done + ready)
            .unwrap_or(&[]);
        for (k, slot) in batch.iter().enumerate() {
            // The stack of a slot a few ahead starts coming into the
            // caches while this one is unwound (a user stack read in
            // place is cold: the unwinder's reads would miss one by one).
            if let Some(ahead) = batch.get(k + 4).filter(|s| s.user_in_place) {
                let at = ahead.user_at as usize;
                let n = (ahead.user_len as usize).min(Self::PREFETCH);
                crate::attach::sys::prefetch(in_place.get(at..at + n).unwrap_or(&[]));
            }
            let comm = name_of(&slot.head);
            let shape = probes.get(slot.head.probe as usize).map(|p| &p.shape);
            // A kprobe hit with integer arguments only, offered as it is.
            if let Some(taken) = self.offer_ints(slot, shape, names, comm, &mut f) {
                handed += 1;
                if taken.is_break() {
                    break;
                }
                continue;
            }
            let Some((named, e)) = self.scratch.get_mut(comm as usize & (Self::SCRATCH - 1)) else {
                continue;
            };
            if *named != comm {
                if let Some(name) = names.get(comm as usize).or(names.first()) {
                    e.comm = name.clone();
                }
                *named = comm;
            }
            // The scratch event's arguments are of the same probe: their
            // integers are overwritten in place.
            let same_probe = e.probe == slot.head.probe as usize;
            slot.head
                .fill(e, shape.map_or(ProbeSite::Entry, |s| s.site));
            let kinds = shape.map_or(&[][..], |s| s.kinds.as_slice());
            let ints = self.ints.get(slot.ints_at as usize..).unwrap_or(&[]);
            if !(same_probe && refill_ints(&mut e.args, kinds, ints)) {
                set_args(
                    &mut e.args,
                    kinds,
                    ints,
                    self.others.get(slot.others_at as usize..).unwrap_or(&[]),
                );
            }
            e.callchain.clear();
            let (at, len) = (slot.frames_at as usize, slot.frames_len as usize);
            if let Some(frames) = self.frames.get(at..at + len) {
                e.callchain.extend_from_slice(frames);
            }
            if slot.has_user {
                let (regs, stack) = Self::user_regs_and_stack(&self.user, slot, in_place);
                unwind(
                    slot.head.pid,
                    slot.head.time_ns,
                    regs,
                    stack,
                    &mut e.callchain,
                );
            }
            for &i in shape.map_or(&[][..], |s| s.comm_args.as_slice()) {
                if let Some(v) = e.args.get_mut(i) {
                    *v = Value::Str(Some(e.comm.to_string()));
                }
            }
            handed += 1;
            if f(Handed::Event(e)).is_some_and(|c| c.is_break()) {
                break;
            }
        }
        self.done += handed;
        self.sorted = self.pending.len();
        self.compact();
        handed
    }

    /// Sorts the waiting events by time if they need it, and returns how
    /// many of them a round hands over ([`Handover::Ordered`]: those no
    /// record still to be read can precede); the scratch events are made
    /// on the first round.
    #[inline(always)]
    fn ready(&mut self, handover: Handover) -> usize {
        let round_max = self.round_max.take();
        let unsorted = self.sorted < self.pending.len();
        let waiting = self.pending.get_mut(self.done..).unwrap_or(&mut []);
        if unsorted {
            // Stable, as the events of one ring are already in order.
            waiting.sort_by_key(|s| s.head.time_ns);
        }
        let ready = match handover {
            Handover::All => waiting.len(),
            Handover::Ordered => {
                let before = self.complete_before;
                self.read_up_to = before;
                waiting.partition_point(|s| s.head.time_ns <= before)
            }
        };
        if let Some(m) = round_max {
            self.complete_before = self.complete_before.max(m);
        }
        if self.scratch.is_empty() {
            let blank = EventHead::default().event(Arc::from(""), Vec::new(), ProbeSite::Entry);
            self.scratch = vec![(u32::MAX, blank); Self::SCRATCH];
        }
        ready
    }

    /// The four user registers and the stack bytes `slot` holds: the
    /// registers in `user` (the queue's copy), the stack there or in
    /// place (`in_place`, the ring).
    #[inline(always)]
    fn user_regs_and_stack<'a>(
        user: &'a [u8],
        slot: &Slot,
        in_place: &'a [u8],
    ) -> ([u64; 4], &'a [u8]) {
        let regs_at = slot.regs_at as usize;
        let regs = user.get(regs_at..regs_at + 32).unwrap_or(&[]);
        let (at, len) = (slot.user_at as usize, slot.user_len as usize);
        let stack = if slot.user_in_place { in_place } else { user }
            .get(at..at.saturating_add(len))
            .unwrap_or(&[]);
        let mut r = [0u64; 4];
        for (v, c) in r.iter_mut().zip(regs.chunks_exact(8)) {
            *v = u64::from_ne_bytes(c.try_into().unwrap_or_default());
        }
        (r, stack)
    }

    /// Hands `slot` to `f` as an [`IntEvent`] when its probe's arguments
    /// are all integers and it has no callchain or user stack: what `f`
    /// returned, or `None` when it declined or the slot is not of that
    /// kind (to be handed over as an [`Event`]).
    #[inline(always)]
    fn offer_ints(
        &self,
        slot: &Slot,
        shape: Option<&super::ProbeShape>,
        names: &[Arc<str>],
        comm: u32,
        f: &mut impl FnMut(Handed<'_>) -> Option<ControlFlow<()>>,
    ) -> Option<ControlFlow<()>> {
        let kinds = shape?.int_kinds.as_deref()?;
        if slot.frames_len != 0 || slot.has_user {
            return None;
        }
        let at = slot.ints_at as usize;
        let ints = self.ints.get(at..at + kinds.len())?;
        let h = &slot.head;
        let event = IntEvent {
            probe: h.probe as usize,
            cpu: h.cpu,
            pid: h.pid,
            tid: h.tid,
            comm: names.get(comm as usize).or(names.first())?,
            time_ns: h.time_ns,
            ip: h.ip,
            probe_addr: h.probe_addr,
            ints,
            kinds,
        };
        f(Handed::Ints(&event))
    }

    /// Drops the handed-over slots and their arguments once they outnumber
    /// the waiting ones eight to one (or none wait), so that a waiting slot
    /// is moved about once every eight rounds rather than at each. User
    /// stacks (kilobytes each) are dropped at every round.
    fn compact(&mut self) {
        let waiting = self.pending.len() - self.done;
        if waiting == 0 {
            self.pending.clear();
            self.ints.clear();
            self.others.clear();
            self.frames.clear();
            self.user.clear();
            (self.done, self.sorted) = (0, 0);
            return;
        }
        if self.done < 8 * waiting.max(1024) && self.user.is_empty() {
            return;
        }
        self.pending.drain(..self.done);
        (self.done, self.sorted) = (0, self.pending.len());
        // The arguments of handed-over events are dead: keep only those of
        // the slots still waiting.
        let first = self.pending.iter().map(|s| (s.ints_at, s.others_at)).fold(
            (self.ints.len() as u32, self.others.len() as u32),
            |(i, o), (si, so)| (i.min(si), o.min(so)),
        );
        if first.0 > 0 {
            self.ints.drain(..first.0 as usize);
        }
        if first.1 > 0 {
            self.others.drain(..first.1 as usize);
        }
        let first_frame = self
            .pending
            .iter()
            .map(|s| s.frames_at)
            .fold(self.frames.len() as u32, u32::min);
        if first_frame > 0 {
            self.frames.drain(..first_frame as usize);
        }
        let first_user = self
            .pending
            .iter()
            .map(|s| s.regs_at)
            .fold(self.user.len() as u32, u32::min);
        // Stacks are large (kilobytes each): the dead ones are dropped
        // once they are most of the buffer, not at every round, so that
        // the waiting ones are moved a bounded number of times.
        let first_user = if first_user as usize * 2 >= self.user.len() {
            self.user.drain(..first_user as usize);
            first_user
        } else {
            0
        };
        for s in &mut self.pending {
            s.ints_at -= first.0;
            s.others_at -= first.1;
            s.frames_at -= first_frame;
            s.regs_at -= first_user;
            // Only a stack copied into `user` moves with it (a slot
            // without a stack has none to move).
            if s.has_user && !s.user_in_place {
                s.user_at -= u64::from(first_user);
            }
        }
    }
}
