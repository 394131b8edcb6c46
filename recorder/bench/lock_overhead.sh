#!/usr/bin/env bash
# Lock overhead of the recorder against a plain run, helgrind and drd.
#
# Builds bench/lock_overhead.c (2 threads x N nested lock pairs) and the release runtime,
# then times, for both lock layouts (shared: contended; private: one pair per thread):
#   plain | recorder (global sequence, the default) | recorder FORESIGHT_ORDERING=logical
#   | valgrind --tool=helgrind | valgrind --tool=drd
# Valgrind runs use N/VG_DIV iterations (it is 50-200x slower); their time is scaled by VG_DIV
# before the ratio is computed. Each configuration takes the best of REPS runs.
#
# Usage: recorder/bench/lock_overhead.sh [N] (default 1000000); env REPS (3), VG_DIV (20),
# CARGO_TARGET_DIR (default <workspace>/target).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
N="${1:-1000000}"
REPS="${REPS:-3}"
VG_DIV="${VG_DIV:-20}"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$root" && cargo build --release -p foresight-recorder --lib --target-dir "$target" >&2)
so="$target/release/libforesight_rt.so"
cc -O2 -g -pthread -o "$work/lock_overhead" "$here/lock_overhead.c"

# best wall time (seconds) of REPS runs of "$@"
best() {
  local best=""
  for _ in $(seq "$REPS"); do
    local s e t
    s=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    e=$(date +%s.%N)
    t=$(echo "$e - $s" | bc -l)
    if [[ -z "$best" ]] || (( $(echo "$t < $best" | bc -l) )); then best=$t; fi
  done
  echo "$best"
}

printf "%-8s %-22s %10s %8s\n" layout config seconds ratio
for layout in shared private; do
  exe=("$work/lock_overhead" "$N" "$layout")
  vg=("$work/lock_overhead" "$((N / VG_DIV))" "$layout")
  plain=$(best "${exe[@]}")
  rec=$(best env LD_PRELOAD="$so" FORESIGHT_OUTPUT="$work/t-$layout" "${exe[@]}")
  rm -f "$work"/t-*
  glob=$(best env LD_PRELOAD="$so" FORESIGHT_ORDERING=logical FORESIGHT_OUTPUT="$work/g-$layout" "${exe[@]}")
  rm -f "$work"/g-*
  hg=$(best valgrind --tool=helgrind -q "${vg[@]}")
  drd=$(best valgrind --tool=drd -q "${vg[@]}")
  hg=$(echo "$hg * $VG_DIV" | bc -l)
  drd=$(echo "$drd * $VG_DIV" | bc -l)
  for row in "plain:$plain" "recorder:$rec" "recorder-logical:$glob" "helgrind(scaled):$hg" "drd(scaled):$drd"; do
    name=${row%%:*}; t=${row#*:}
    printf "%-8s %-22s %10.3f %7.2fx\n" "$layout" "$name" "$t" "$(echo "$t / $plain" | bc -l)"
  done
done
echo "N=$N lock pairs per thread (valgrind: N/$VG_DIV, time x$VG_DIV); best of $REPS runs" 
