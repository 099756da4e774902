#!/bin/sh
# Compression bench: the same uprobe workload recorded by perf record and
# kprobe-perf record, -q -o with and without -z; file sizes, ratio, and the
# CPU (user+sys of recorder and workload) -z adds per event.
set -e
K=${KPROBE_PERF:-kprobe-perf}; N=${N:-200000}; RUNS=${RUNS:-3}
dir=$(mktemp -d); cd "$dir"
cc -O1 -g -fno-omit-frame-pointer -o habits "$1"
perf probe -q -x ./habits 'walk n=%di:s32'
cpu() { /usr/bin/time -f '%U %S' "$@" 2>&1 >/dev/null | tail -1 | awk '{print $1+$2}'; }
for run in $(seq $RUNS); do
  for z in "" -z; do
    p=$(cpu perf record -q $z -o perf$z.data -e probe_habits:walk -- ./habits $N)
    k=$(cpu $K record -q $z -o kp$z.data --force -e 'p:./habits:walk n=%di:s32' -- ./habits $N)
    echo "run $run ${z:-plain}: perf ${p}s $(stat -c %s perf$z.data) B, kprobe-perf ${k}s $(stat -c %s kp$z.data) B"
  done
done
perf probe -q -d probe_habits:walk
rm -rf "$dir"
