#!/usr/bin/env bash
# Lock overhead of the recorder against a plain run, helgrind and drd.
#
# Builds bench/lock_overhead.c (2 threads x N nested lock pairs), bench/interposer.c and the
# release runtime, then times, for both lock layouts (shared: contended; private: one pair per
# thread):
#   plain | interposer (forwards lock/unlock, records nothing: the floor under any LD_PRELOAD
#   recorder) | interposer-trylock (the same, trylock first) | interposer-raw-record (16 raw
#   bytes and a Lamport key per call into a buffer it discards: the least a recorder that
#   orders events can do; see interposer.c) | recorder (Lamport clocks, the default) | recorder
#   FORESIGHT_ORDERING=global | `foresight record` end to end (the runtime it carries, or
#   RT_SO; the summary and symbolisation after the program exits included; its ratio to the
#   raw-record floor is printed as "vs floor") | valgrind --tool=helgrind | valgrind --tool=drd
# Then the wrapped layout (private locks through lock wrappers of the program's own): plain |
# recorder (the wrappers' line is the site) | recorder with FORESIGHT_WRAPPERS='lk_*' (every
# call unwound to the wrapper's caller: the cost of naming the callers of a wrapper).
# Valgrind runs use N/VG_DIV iterations (it is 50-200x slower); their time is scaled by VG_DIV
# before the ratio is computed. Each figure is the median of REPS runs (VG_REPS for valgrind);
# the native runs take turns. Contended runs vary a lot between runs on a shared machine (the
# scheduler decides how often the lock changes hands): quote the medians. With perf, the floor's
# and `foresight record`'s CPU time (user + system) is measured too, and their ratio printed
# ("CPU vs floor"), and the runtime's alone (the "recorder" row's: the difference is `record`'s
# own start and end): steadier than wall time when other work shares the cores.
#
# Usage: recorder/bench/lock_overhead.sh [N] (default 1000000); env REPS (9), VG_REPS (3), VG_DIV (20),
# CARGO_TARGET_DIR (default <workspace>/target).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
N="${1:-1000000}"
REPS="${REPS:-9}"
VG_REPS="${VG_REPS:-3}"
VG_DIV="${VG_DIV:-20}"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$root" && cargo build --release -p foresight-recorder -p foresight-cli \
  --target-dir "$target" >&2)
foresight="$target/release/foresight"
# RT_SO: another runtime to measure (one built from another commit, to compare in one session).
so="${RT_SO:-$target/release/libforesight_rt.so}"
cc -O2 -g -pthread -o "$work/lock_overhead" "$here/lock_overhead.c"
cc -O2 -shared -fPIC -o "$work/interposer.so" "$here/interposer.c" -ldl
cc -O2 -shared -fPIC -DTRYLOCK_FIRST -o "$work/interposer-trylock.so" "$here/interposer.c" -ldl
cc -O2 -shared -fPIC -DRECORD_RAW -o "$work/interposer-raw.so" "$here/interposer.c" -ldl

# CPU time (user + system, the run and its children) of the native runs as well as their wall
# time: on a shared machine the wall time of a contended run is mostly the scheduler's.
# perf stat's task-clock when perf can count, else none ("-").
if perf stat -e task-clock true >/dev/null 2>&1; then cpu_timer=perf; else cpu_timer=none; fi

# wall time (seconds) of one run of "$@"; with CPU=FILE, its CPU seconds appended to FILE. With
# perf, the wall time is perf's, from the command's start to its end (perf's own start excluded).
wall() {
  local s e
  if [[ "$cpu_timer" == perf ]]; then
    LC_ALL=C perf stat -e task-clock -o "$work/perf" "$@" >/dev/null 2>&1
    awk '$2 == "msec" && $3 == "task-clock" { gsub(",", "", $1); print $1 / 1000 }' "$work/perf" >>"${CPU:-/dev/null}"
    awk '$2 == "seconds" && $3 == "time" && $4 == "elapsed" { print $1 }' "$work/perf"
    return
  fi
  s=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  e=$(date +%s.%N)
  echo "$e - $s" | bc -l
}

# median of the numbers on stdin
median() {
  sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

printf "%-8s %-22s %10s %8s\n" layout config seconds ratio
for layout in shared private; do
  exe=("$work/lock_overhead" "$N" "$layout")
  vg=("$work/lock_overhead" "$((N / VG_DIV))" "$layout")
  # The native configurations take turns, so that a drift of the machine's speed affects them
  # alike; each figure is the median of its REPS runs.
  : >"$work/plain"; : >"$work/int"; : >"$work/inttry"; : >"$work/intraw"; : >"$work/rec"
  : >"$work/glob"; : >"$work/e2e"; : >"$work/intraw-cpu"; : >"$work/e2e-cpu"; : >"$work/rec-cpu"
  for _ in $(seq "$REPS"); do
    wall "${exe[@]}" >>"$work/plain"
    wall env LD_PRELOAD="$work/interposer.so" "${exe[@]}" >>"$work/int"
    wall env LD_PRELOAD="$work/interposer-trylock.so" "${exe[@]}" >>"$work/inttry"
    CPU="$work/intraw-cpu" wall env LD_PRELOAD="$work/interposer-raw.so" "${exe[@]}" >>"$work/intraw"
    CPU="$work/rec-cpu" wall env LD_PRELOAD="$so" FORESIGHT_OUTPUT="$work/t-$layout" "${exe[@]}" >>"$work/rec"
    rm -f "$work"/t-*
    wall env LD_PRELOAD="$so" FORESIGHT_ORDERING=global FORESIGHT_OUTPUT="$work/g-$layout" "${exe[@]}" >>"$work/glob"
    rm -f "$work"/g-*
    CPU="$work/e2e-cpu" wall env ${RT_SO:+FORESIGHT_RUNTIME="$so"} "$foresight" record -o "$work/e-$layout" -- "${exe[@]}" >>"$work/e2e"
    rm -f "$work"/e-*
  done
  plain=$(median <"$work/plain")
  int=$(median <"$work/int")
  inttry=$(median <"$work/inttry")
  intraw=$(median <"$work/intraw")
  rec=$(median <"$work/rec")
  glob=$(median <"$work/glob")
  e2e=$(median <"$work/e2e")
  hg=$(for _ in $(seq "$VG_REPS"); do wall valgrind --tool=helgrind -q "${vg[@]}"; done | median)
  drd=$(for _ in $(seq "$VG_REPS"); do wall valgrind --tool=drd -q "${vg[@]}"; done | median)
  hg=$(echo "$hg * $VG_DIV" | bc -l)
  drd=$(echo "$drd * $VG_DIV" | bc -l)
  for row in "plain:$plain" "interposer:$int" "interposer-trylock:$inttry" "interposer-raw-record:$intraw" "recorder:$rec" "recorder-global:$glob" "foresight-record:$e2e" "helgrind(scaled):$hg" "drd(scaled):$drd"; do
    name=${row%%:*}; t=${row#*:}
    printf "%-8s %-22s %10.3f %7.2fx\n" "$layout" "$name" "$t" "$(echo "$t / $plain" | bc -l)"
  done
  printf "%-8s %-22s %10s %7.2fx\n" "$layout" "foresight-record" "vs floor" "$(echo "$e2e / $intraw" | bc -l)"
  if [[ "$cpu_timer" == perf ]]; then
    floor_cpu=$(median <"$work/intraw-cpu")
    e2e_cpu=$(median <"$work/e2e-cpu")
    rec_cpu=$(median <"$work/rec-cpu")
    printf "%-8s %-22s %10s %7.2fx (CPU: %.3f s against %.3f s)\n" "$layout" "recorder" "CPU vs floor" \
      "$(echo "$rec_cpu / $floor_cpu" | bc -l)" "$rec_cpu" "$floor_cpu"
    printf "%-8s %-22s %10s %7.2fx (CPU: %.3f s against %.3f s)\n" "$layout" "foresight-record" "CPU vs floor" \
      "$(echo "$e2e_cpu / $floor_cpu" | bc -l)" "$e2e_cpu" "$floor_cpu"
  fi
done
exe=("$work/lock_overhead" "$N" wrapped)
: >"$work/plain"; : >"$work/rec"; : >"$work/deep"
for _ in $(seq "$REPS"); do
  wall "${exe[@]}" >>"$work/plain"
  wall env LD_PRELOAD="$so" FORESIGHT_OUTPUT="$work/t-wrapped" "${exe[@]}" >>"$work/rec"
  rm -f "$work"/t-*
  wall env LD_PRELOAD="$so" FORESIGHT_WRAPPERS='lk_*' FORESIGHT_OUTPUT="$work/w-wrapped" "${exe[@]}" >>"$work/deep"
  rm -f "$work"/w-*
done
plain=$(median <"$work/plain")
for row in "plain:$plain" "recorder:$(median <"$work/rec")" "recorder-wrappers:$(median <"$work/deep")"; do
  name=${row%%:*}; t=${row#*:}
  printf "%-8s %-22s %10.3f %7.2fx\n" wrapped "$name" "$t" "$(echo "$t / $plain" | bc -l)"
done
echo "N=$N lock pairs per thread (valgrind: N/$VG_DIV, time x$VG_DIV); medians of $REPS runs ($VG_REPS for valgrind)" 
