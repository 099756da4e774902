#!/bin/sh
# What a filter saves, run inside the VM by `cargo xtask bench filter`: a
# uprobe on kpf_filter_target, which the workload calls CALLS times with
# i = 0..CALLS-1, recorded by the engine's filter_bytes example without a
# filter, with `i < CALLS/100` (1%: in the kernel, through uprobe_events),
# and with the same filter forced into user space by a `pid` test. Prints
# the events handed over and the bytes read from the ring buffers of each,
# and the ratio of the kernel-filtered bytes to the unfiltered ones.
#
# usage: bench-filter.sh FILTER_BYTES FILTER_CALLS [CALLS]
set -eu
EX=$1
CALLS_BIN=$(realpath "$2")
N=${3:-100000}
KEEP=$((N / 100))
SPEC="p:$CALLS_BIN:kpf_filter_target i=%di:u64 r=%si:u64"

row() {
    label=$1
    filter=$2
    out=$("$EX" "$SPEC" "$filter" "$CALLS_BIN" "$N")
    events=$(echo "$out" | sed -n 's/.*events=\([0-9]*\).*/\1/p')
    bytes=$(echo "$out" | sed -n 's/.*bytes=\([0-9]*\).*/\1/p')
    runs=$(echo "$out" | sed -n 's/.*filter=\([a-z]*\).*/\1/p')
    dropped=$(echo "$out" | sed -n 's/.*dropped=\([0-9]*\).*/\1/p')
    printf '%-34s %-7s %8s %8s %12s\n' "$label" "$runs" "$events" "$dropped" "$bytes"
    eval "$3=$bytes"
}

echo "bench filter: $N calls of kpf_filter_target(i, i % 7), i = 0..$((N - 1)); kernel $(uname -r)"
printf '%-34s %-7s %8s %8s %12s\n' "RUN" "FILTER" "EVENTS" "DROPPED" "RING BYTES"
row "no filter" - NONE
row "i < $KEEP" "i < $KEEP" KERNEL
row "i < $KEEP && pid > 0 (user space)" "i < $KEEP && pid > 0" USER
awk -v a="$KERNEL" -v b="$NONE" -v u="$USER" 'BEGIN {
    printf "kernel filter: %d of %d bytes (%.2f%%), %.2f%% fewer; user-space filter: %.2f%% fewer\n",
        a, b, 100 * a / b, 100 - 100 * a / b, 100 - 100 * u / b
    if (a * 20 > b) { print "FAIL: less than 95% fewer bytes"; exit 1 }
}'
