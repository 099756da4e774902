#!/bin/sh
# CPU of the recorder alone, with and without -z, perf record and
# kprobe-perf (path in $1), in a directory holding tests/data/habits.c
# built as habits. The recorder alone is timed (-a; the workload's uprobe traps are the workload's).
K=$1; N=${N:-200000}
perf probe -q -x ./habits 'walk n=%di:s32'
one() { # name cmd...
  out=$1; shift
  /usr/bin/time -o /tmp/zstd-cpu.$out -f '%U %S' "$@" >/dev/null 2>&1 &
  sleep 3; ./habits $N >/dev/null; sleep 1
  kill -INT $(pgrep -P $!) 2>/dev/null; wait
  tail -1 /tmp/zstd-cpu.$out | awk -v n=$N -v o=$out '{printf "%s %.3f s %.3f us/event\n", o, $1+$2, ($1+$2)*1e6/n}'
}
for r in 1 2 3; do
 for z in "" -z; do
  one perf$z perf record -a -q $z -o /tmp/zstd-cpu-perf.data -e probe_habits:walk
  one kp$z $K record -a -q $z -o /tmp/zstd-cpu-kp.data --force "-e" "p:$PWD/habits:walk n=%di:s32"
 done
done
perf probe -q -d probe_habits:walk
