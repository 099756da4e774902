#!/bin/sh
# The scale and cost of `kprobe-perf calls`, run inside the VM by
# `cargo xtask bench calls`:
# 1. attach: the seconds from the start of `calls` to its command's
#    start, with FUNCS functions traced (do_sys_openat2 the root, the
#    first FUNCS-1 that `kprobe-perf list` keeps of some busy families
#    inside, each given by name: `calls` covers them with globs), ROUNDS
#    rounds;
# 2. cost per traced call: a workload opens a tmpfs file OPENS times,
#    bare, under `calls` (errors mode: nothing printed; --json to
#    /dev/null: every tree rendered) and under ftrace's function_graph
#    limited to the same functions (set_ftrace_filter) and the
#    workload's pid (set_ftrace_pid), ROUNDS rounds each; the added
#    microseconds per open divided by the traced calls per open;
# 3. rebuild: `calls -i FILE > /dev/null` of a file `calls -o FILE`
#    wrote in step 2: events per second of the whole replay (read,
#    decode, build, render), best of ROUNDS.
#
# usage: bench-calls.sh KPROBE_PERF OPEN_LOOP [OPENS] [ROUNDS] [FUNCS]
set -eu
trap 'echo "bench-calls: failed at line $LINENO" >&2' EXIT
KP=$1
LOOP=$2
N=${3:-100000}
R=${4:-3}
FUNCS=${5:-1000}
T=/sys/kernel/tracing
export HOME=/tmp
W=/tmp/kpf-bench-calls
rm -rf "$W"
mkdir -p "$W"
F=$W/file
echo x >"$F"
REP=$W/report
now() { date +%s.%N; }
per_open() { sed -n 's/.* \([0-9.]*\) us per open$/\1/p' "$REP" | tail -1; }
best() { sort -n | head -1; }

echo "kernel $(uname -r), $(nproc) CPUs, $N opens of a tmpfs file, $R rounds"

# 1. attach
"$KP" list 'vfs_*' 'ext4_*' 'security_*' 'kmem_cache_*' 'tcp_*' 'filemap_*' 'sock_*' 'inet_*' 'udp_*' 'ip_*' 2>/dev/null \
    | grep -v -e '[@:]' -e '^$' -e '^do_sys_openat2$' | head -n $((FUNCS - 1)) >"$W/funcs"
n=$(($(wc -l <"$W/funcs") + 1))
set -- 
while read -r f; do set -- "$@" --allow "$f"; done <"$W/funcs"
: >"$W/attach"
i=0
while [ $i -lt "$R" ]; do
    t0=$(now)
    "$KP" calls -e do_sys_openat2 "$@" -- /bin/sh -c "date +%s.%N >$W/started" \
        >/dev/null 2>"$W/attach.err" || { cat "$W/attach.err" >&2; exit 1; }
    t2=$(now)
    echo "$t0 $(cat "$W/started") $t2" | awk '{printf "%.3f %.3f\n", $2-$1, $3-$1}' >>"$W/attach"
    i=$((i + 1))
done
grep -o '^kprobe-perf: calls: .*' "$W/attach.err" | head -1
echo
echo "| functions | attached, to the command's start (s, min-max) | whole run with detach (s, min-max) | goal |"
echo "|---|---|---|---|"
awk -v n="$n" 'NR==1{a=$1;b=$1;c=$2;d=$2} {if($1<a)a=$1; if($1>b)b=$1; if($2<c)c=$2; if($2>d)d=$2}
    END{printf "| %d | %.2f-%.2f | %.2f-%.2f | <= 3 s |\n", n, a, b, c, d}' "$W/attach"

# 2. cost per traced call
GLOBS="do_sys_openat2 getname_flags* do_filp_open path_openat link_path_walk* walk_component lookup_fast do_open vfs_open do_dentry_open security_file_open fput"
: >"$W/set"
for g in $GLOBS; do "$KP" list "$g" 2>/dev/null | grep -v -e '[@:]' -e '^$' >>"$W/set" || true; done
set --
while read -r f; do
    [ "$f" = do_sys_openat2 ] || set -- "$@" --allow "$f"
done <"$W/set"
for f in bare calls json fg; do : >"$W/$f"; done
echo 0 >"$T/tracing_on"
echo nop >"$T/current_tracer"
i=0
while [ $i -lt "$R" ]; do
    : >"$REP"; "$LOOP" "$F" "$N" "$REP" >/dev/null; per_open >>"$W/bare"
    : >"$REP"; "$KP" calls -e do_sys_openat2 "$@" -- "$LOOP" "$F" "$N" "$REP" >/dev/null 2>"$W/calls.err" \
        || { cat "$W/calls.err" >&2; exit 1; }
    per_open >>"$W/calls"
    rm -f "$W/trees.data"
    : >"$REP"; "$KP" calls --json -o "$W/trees.data" -e do_sys_openat2 "$@" -- "$LOOP" "$F" "$N" "$REP" \
        >/dev/null 2>"$W/json.err" || { cat "$W/json.err" >&2; exit 1; }
    per_open >>"$W/json"
    # function_graph: the same functions, the workload's pid only.
    while read -r f; do echo "$f" >>"$T/set_ftrace_filter" 2>/dev/null || echo "function_graph: cannot filter $f" >&2; done <"$W/set"
    echo 1 >"$T/options/funcgraph-proc" 2>/dev/null || true
    echo function_graph >"$T/current_tracer"
    : >"$T/trace"
    : >"$REP"
    /bin/sh -c "echo \$\$ >$T/set_ftrace_pid; echo 1 >$T/tracing_on; exec $LOOP $F $N $REP" >/dev/null
    echo 0 >"$T/tracing_on"
    per_open >>"$W/fg"
    fg_entries=$(head -5 "$T/trace" | sed -n 's/.*entries-written: \([0-9]*\/[0-9]*\).*/\1/p')
    echo nop >"$T/current_tracer"
    echo >"$T/set_ftrace_pid"
    echo >"$T/set_ftrace_filter"
    i=$((i + 1))
done
events=$(sed -n 's/^kprobe-perf: \([0-9]*\) events.*/\1/p' "$W/calls.err" | head -1)
calls_per_open=$(echo "$events $N" | awk '{printf "%.2f", $1/2/$2}')
grep -e 'events' -e 'lost' "$W/calls.err" | head -3
echo "function_graph's last round: entries in its buffer/written: $fg_entries"
echo
echo "$(wc -l <"$W/set") functions traced, $calls_per_open traced calls per open (entries and returns / 2 / opens)"
echo
echo "| tool | us per open (best of $R) | added us per open | added ns per traced call |"
echo "|---|---|---|---|"
b=$(best <"$W/bare")
for t in bare calls json fg; do
    case $t in
        bare) name="bare";;
        calls) name="kprobe-perf calls (errors mode)";;
        json) name="kprobe-perf calls --json -o FILE";;
        fg) name="ftrace function_graph";;
    esac
    v=$(best <"$W/$t")
    echo "$name $v $b $calls_per_open" | awk -F' ' '{v=$(NF-2); b=$(NF-1); c=$NF; $(NF-2)=$(NF-1)=$NF=""; sub(/ +$/,""); printf "| %s | %.3f | %+.3f | %+.0f |\n", $0, v, v-b, (v-b)*1000/c}'
done
cg=$(best <"$W/calls"); fg=$(best <"$W/fg")
echo "$cg $fg $b" | awk '{printf "ratio: the added cost of calls is %.2fx function_graph'"'"'s (goal: <= 1)\n", ($1-$3)/($2-$3)}'

# 3. rebuild from the file
ls -l "$W/trees.data" | awk '{print "file: " $5 " bytes"}'
rev=$(sed -n 's/^kprobe-perf: \([0-9]*\) events.*/\1/p' "$W/json.err" | head -1)
: >"$W/replay"
i=0
while [ $i -lt "$R" ]; do
    t0=$(now)
    "$KP" calls --json -i "$W/trees.data" >/dev/null 2>"$W/replay.err" || { cat "$W/replay.err" >&2; exit 1; }
    t1=$(now)
    echo "$t0 $t1" | awk '{printf "%.4f\n", $2-$1}' >>"$W/replay"
    "$KP" calls -i "$W/trees.data" >/dev/null 2>/dev/null
    i=$((i + 1))
done
s=$(best <"$W/replay")
echo "$rev $s" | awk '{printf "rebuild: calls --json -i FILE > /dev/null: %d events in %.3f s (best of '"$R"'): %.2f M events/s (goal: >= 10)\n", $1, $2, $1/$2/1e6}'
trap - EXIT
