#!/bin/sh
# The per-call cost of a probe on do_sys_openat2, run inside the VM by
# `cargo xtask bench opens`: a workload opens a tmpfs file OPENS times,
# bare, under `kprobe-perf record` (text to /dev/null, -q, -o FILE, and
# -q --backend tracefs: one kernel probe for every CPU, as perf has),
# under `kprobe-perf stat` (counting only), under
# `perf record` and under `perf stat` (the probe defined with `perf
# probe`), ROUNDS rounds each,
# for a bare entry probe, an entry with register arguments, a return and
# a string probe. Prints a table of
# microseconds per open (min-max over the rounds), the added cost per
# call against the bare run of the same round, and the events written and
# lost per round. kprobe-perf's losses are its summary's (the kernel's
# count minus the events read); perf's are the hits kprobe-perf counted in
# the same round (events + lost) minus the samples perf wrote.
#
# usage: bench-opens.sh KPROBE_PERF OPEN_LOOP [OPENS] [ROUNDS] [PROBE]
# (PROBE: only the probe of that name, e.g. plain)
set -eu
KP=$1
LOOP=$2
N=${3:-100000}
R=${4:-3}
ONLY=${5:-}
PERF=${PERF:-/usr/bin/perf}
export HOME=/tmp
W=/tmp/kpf-bench
mkdir -p "$W"
F=$W/file
echo x >"$F"
REP=$W/report

# probe name | kprobe-perf spec | perf probe definition
PROBES="plain|p:do_sys_openat2|kpfb_plain=do_sys_openat2
entry|p:do_sys_openat2 dfd=%di:s32 flags=%dx:x32|kpfb_entry=do_sys_openat2 dfd=%di:s32 flags=%dx:x32
return|r:do_sys_openat2 ret=\$retval:s64|kpfb_return=do_sys_openat2%return ret=\$retval:s64
string|p:do_sys_openat2 path=+0(%si):ustring|kpfb_string=do_sys_openat2 path=+0(%si):ustring"

per_open() { sed -n 's/.* \([0-9.]*\) us per open$/\1/p' "$REP" | tail -1; }

# min-max of the numbers on stdin
range() { sort -n | awk 'NR==1{a=$1} {b=$1} END{printf "%s-%s", a, b}'; }

# one round of "$@" (stdout to /dev/null, stderr to the file $1) with
# the workload's report reset; echoes its us per open
timed() {
    errf=$1
    shift
    : >"$REP"
    if ! "$@" </dev/null >/dev/null 2>"$errf"; then
        echo "bench-opens: failed: $*" >&2
        cat "$errf" >&2
        exit 1
    fi
    per_open
}

# "+a to +b": the range over rounds of (file $1's round i) - (bare round i)
added() {
    paste "$1" "$W/bare" | awk '{d=$1-$2} NR==1{a=d; z=d} {if (d<a) a=d; if (d>z) z=d} END{printf "%+.1f to %+.1f", a, z}'
}

echo "kernel $(uname -r), $(nproc) CPUs, $N opens of a tmpfs file, $R rounds"
echo
echo "| probe | tool | command | us per open (min-max) | added us per call (min-max) | events written | lost |"
echo "|---|---|---|---|---|---|---|"
echo "$PROBES" | while IFS='|' read -r name spec pdef; do
    if [ -n "$ONLY" ] && [ "$name" != "$ONLY" ]; then
        continue
    fi
    for f in bare kp kpq kpo kpt kps perf perfs; do : >"$W/$f"; done
    "$PERF" probe -q -d "probe:kpfb_$name" </dev/null 2>/dev/null || true
    "$PERF" probe -q -a "$pdef" </dev/null
    # perf probe names a return probe's event EVENT__return.
    pev=$("$PERF" probe -l </dev/null 2>/dev/null | awk '{print $1}' | grep "^probe:kpfb_$name" | head -1)
    kp_events=""
    kp_lost=""
    kpq_lost=""
    kpo_events=""
    kpt_lost=""
    kpo_lost=""
    perf_samples=""
    perf_lost=""
    i=0
    while [ "$i" -lt "$R" ]; do
        timed "$W/bare.err" "$LOOP" "$F" "$N" "$REP" >>"$W/bare"
        timed "$W/kp.err" "$KP" record -e "$spec" -- "$LOOP" "$F" "$N" "$REP" >>"$W/kp"
        kp_events="$kp_events $(sed -n 's/^kprobe-perf: \([0-9]*\) events.*/\1/p' "$W/kp.err" | head -1)"
        kp_lost="$kp_lost $(sed -n 's/^kprobe-perf: .*, \([0-9]*\) lost.*/\1/p' "$W/kp.err" | head -1)"
        timed "$W/kpq.err" "$KP" record -q -e "$spec" -- "$LOOP" "$F" "$N" "$REP" >>"$W/kpq"
        kpq_lost="$kpq_lost $(sed -n 's/^kprobe-perf: .*, \([0-9]*\) lost.*/\1/p' "$W/kpq.err" | head -1)"
        timed "$W/kpt.err" "$KP" record -q --backend tracefs -e "$spec" -- "$LOOP" "$F" "$N" "$REP" >>"$W/kpt"
        timed "$W/kps.err" "$KP" stat -e "$spec" -- "$LOOP" "$F" "$N" "$REP" >>"$W/kps"
        kpt_lost="$kpt_lost $(sed -n 's/^kprobe-perf: .*, \([0-9]*\) lost.*/\1/p' "$W/kpt.err" | head -1)"
        rm -f "$W/kp.data"
        timed "$W/kpo.err" "$KP" record -o "$W/kp.data" -e "$spec" -- "$LOOP" "$F" "$N" "$REP" >>"$W/kpo"
        kpo_events="$kpo_events $(sed -n 's/^kprobe-perf: \([0-9]*\) events.*/\1/p' "$W/kpo.err" | head -1)"
        kpo_lost="$kpo_lost $(sed -n 's/^kprobe-perf: .*, \([0-9]*\) lost.*/\1/p' "$W/kpo.err" | head -1)"
        hits=$(sed -n 's/^kprobe-perf: \([0-9]*\) events.*, \([0-9]*\) lost.*/\1 \2/p' "$W/kpo.err" | head -1 | awk '{print $1 + $2}')
        timed "$W/perf.err" "$PERF" record -N -e "$pev" -o "$W/perf.data" -- "$LOOP" "$F" "$N" "$REP" >>"$W/perf"
        ps=$(sed -n 's/.*(\([0-9]*\) samples).*/\1/p' "$W/perf.err" | head -1)
        perf_samples="$perf_samples $ps"
        perf_lost="$perf_lost $((hits - ps))"
        timed "$W/perfs.err" "$PERF" stat -e "$pev" -- "$LOOP" "$F" "$N" "$REP" >>"$W/perfs"
        i=$((i + 1))
    done
    "$PERF" probe -q -d "$pev" </dev/null 2>/dev/null || true
    echo "| $name | bare | \`open_loop FILE $N\` | $(range <"$W/bare") | | | |"
    echo "| $name | kprobe-perf | \`kprobe-perf record -e '$spec' -- open_loop FILE $N > /dev/null\` | $(range <"$W/kp") | $(added "$W/kp") | $kp_events | $kp_lost |"
    echo "| $name | kprobe-perf -q | \`kprobe-perf record -q -e '$spec' -- open_loop FILE $N\` | $(range <"$W/kpq") | $(added "$W/kpq") | | $kpq_lost |"
    echo "| $name | kprobe-perf -o | \`kprobe-perf record -o kp.data -e '$spec' -- open_loop FILE $N\` | $(range <"$W/kpo") | $(added "$W/kpo") | $kpo_events | $kpo_lost |"
    echo "| $name | kprobe-perf -q tracefs | \`kprobe-perf record -q --backend tracefs -e '$spec' -- open_loop FILE $N\` | $(range <"$W/kpt") | $(added "$W/kpt") | | $kpt_lost |"
    echo "| $name | kprobe-perf stat | \`kprobe-perf stat -e '$spec' -- open_loop FILE $N\` | $(range <"$W/kps") | $(added "$W/kps") | | |"
    echo "| $name | perf | \`perf probe -a '$pdef'; perf record -N -e $pev -o perf.data -- open_loop FILE $N\` | $(range <"$W/perf") | $(added "$W/perf") | $perf_samples | $perf_lost |"
    echo "| $name | perf stat | \`perf probe -a '$pdef'; perf stat -e $pev -- open_loop FILE $N\` | $(range <"$W/perfs") | $(added "$W/perfs") | | |"
done
