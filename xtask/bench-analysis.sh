#!/bin/sh
# The per-call cost of the answers (issue: stat, latency, count-by) on
# do_sys_openat2, run inside the VM by `cargo xtask bench analysis`: a
# workload opens a tmpfs file OPENS times, bare and under each tool, the
# tools taken in turn, ROUNDS rounds; each tool's figure is its best
# round. Peers: perf stat and perf record (the probe defined with `perf
# probe`), and bpftrace's one-liners for a count, a latency histogram
# and a count by comm, when bpftrace runs here. "perf record, entry +
# return" samples what `latency` samples (each call's entry and return):
# the cost of two perf samples per call, whoever reads them.
#
# usage: bench-analysis.sh KPROBE_PERF OPEN_LOOP [OPENS] [ROUNDS]
set -eu
KP=$1
LOOP=$2
N=${3:-100000}
R=${4:-3}
PERF=${PERF:-/usr/bin/perf}
BT=${BPFTRACE:-/usr/bin/bpftrace}
export HOME=/tmp
W=/tmp/kpf-analysis
mkdir -p "$W"
F=$W/file
echo x >"$F"
REP=$W/report

per_open() { sed -n 's/.* \([0-9.]*\) us per open$/\1/p' "$REP" | tail -1; }

# one round of "$@" with the workload's report reset; echoes its us per
# open, or "failed"
timed() {
    : >"$REP"
    if ! "$@" </dev/null >/dev/null 2>"$W/err"; then
        echo failed
        return
    fi
    per_open
}

"$PERF" probe -q -d 'probe:kpf[ar]*' </dev/null 2>/dev/null || true
"$PERF" probe -q -a 'kpfa=do_sys_openat2' </dev/null
"$PERF" probe -q -a 'kpfr=do_sys_openat2%return' </dev/null
BT_OK=no
if [ -x "$BT" ] && "$BT" -e 'BEGIN { exit(); }' </dev/null >/dev/null 2>&1; then
    BT_OK=yes
fi

# tool name | command (the workload appended)
TOOLS="bare|
kprobe-perf stat|$KP stat -e p:do_sys_openat2 --
perf stat|$PERF stat -e probe:kpfa --
kprobe-perf latency|$KP latency do_sys_openat2 --
kprobe-perf record --count-by comm|$KP record -q --count-by comm -e p:do_sys_openat2 --
perf record|$PERF record -N -e probe:kpfa -o $W/perf.data --
perf record, entry + return|$PERF record -N -e probe:kpfa -e probe:kpfr__return -o $W/perf.data --"
if [ "$BT_OK" = yes ]; then
    # Programs in files: the commands are split on blanks.
    echo 'kprobe:do_sys_openat2 { @ = count(); }' >"$W/count.bt"
    echo 'kprobe:do_sys_openat2 { @s[tid] = nsecs; } kretprobe:do_sys_openat2 /@s[tid]/ { @ = hist(nsecs - @s[tid]); delete(@s[tid]); }' >"$W/latency.bt"
    echo 'kprobe:do_sys_openat2 { @[comm] = count(); }' >"$W/comm.bt"
    TOOLS="$TOOLS
bpftrace count()|$BT $W/count.bt -c
bpftrace latency hist()|$BT $W/latency.bt -c
bpftrace @[comm]=count()|$BT $W/comm.bt -c"
fi

i=0
while [ "$i" -lt "$R" ]; do
    echo "$TOOLS" | while IFS='|' read -r name cmd; do
        key=$(echo "$name" | tr -c 'a-z0-9\n' '_')
        case "$cmd" in
        *" -c") t=$(timed $cmd "$LOOP $F $N $REP") ;;
        "") t=$(timed "$LOOP" "$F" "$N" "$REP") ;;
        *) t=$(timed $cmd "$LOOP" "$F" "$N" "$REP") ;;
        esac
        echo "$t" >>"$W/$key.$i"
        echo "$t" >>"$W/$key"
    done
    i=$((i + 1))
done
"$PERF" probe -q -d 'probe:kpf[ar]*' </dev/null 2>/dev/null || true

best() { grep -v failed "$W/$1" 2>/dev/null | sort -n | head -1; }
bare=$(best bare)
echo "kernel $(uname -r), $(nproc) CPUs, $N opens of a tmpfs file, best of $R rounds each; bpftrace: $BT_OK"
echo
echo "| tool | us per open (best) | added us per call | rounds that failed |"
echo "|---|---|---|---|"
echo "$TOOLS" | while IFS='|' read -r name cmd; do
    key=$(echo "$name" | tr -c 'a-z0-9\n' '_')
    b=$(best "$key")
    failed=$(grep -c failed "$W/$key" || true)
    if [ -z "$b" ]; then
        echo "| $name | failed | | $failed |"
    elif [ "$name" = bare ]; then
        echo "| $name | $b | | $failed |"
    else
        echo "| $name | $b | $(echo "$b $bare" | awk '{printf "%+.2f", $1-$2}') | $failed |"
    fi
done
rm -f "$W"/*
