#!/usr/bin/env bash
# Cost of the hand-off hooks (pipes, socketpairs, eventfds) on an I/O-heavy loop: N 1-byte
# writes and reads through a pipe the program made (every call recorded as a hand-off), and on
# descriptors it did not make that way (/dev/null, /dev/zero: one table lookup a call), each
# run plain, under `foresight record` with another binary's runtime (OTHER, e.g. main's
# `foresight`) and with this one, in turns, on CPU 1. Prints user+system CPU seconds per run and
# the medians.
#
# Usage: recorder/bench/handoff_overhead.sh [N] (default 1000000); env REPS (5), OTHER (a
# `foresight` binary to compare with; default: none), CARGO_TARGET_DIR.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
N="${1:-1000000}"
REPS="${REPS:-5}"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$root" && cargo build --release -p foresight-cli --target-dir "$target" >&2)
this="$target/release/foresight"
cc -O2 -g -o "$work/loop" "$here/handoff_overhead.c"

cpu() { # prints user+system seconds of the command
  /usr/bin/time -f "%U %S" -o "$work/t" taskset -c 1 "$@" >/dev/null 2>&1
  awk '{printf "%.3f\n", $1 + $2}' "$work/t"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for mode in other pipe; do
  : >"$work/plain"; : >"$work/other"; : >"$work/this"
  for _ in $(seq "$REPS"); do
    cpu "$work/loop" "$mode" "$N" >>"$work/plain"
    if [ -n "${OTHER:-}" ]; then
      cpu "$OTHER" record --no-symbolize -o "$work/o.trace" -- "$work/loop" "$mode" "$N" >>"$work/other"
    fi
    cpu "$this" record --no-symbolize -o "$work/t.trace" -- "$work/loop" "$mode" "$N" >>"$work/this"
  done
  echo "$mode: plain $(median <"$work/plain" | tr '\n' ' ')[$(tr '\n' ' ' <"$work/plain")]"
  [ -n "${OTHER:-}" ] && echo "$mode: other $(median <"$work/other" | tr '\n' ' ')[$(tr '\n' ' ' <"$work/other")]"
  echo "$mode: this  $(median <"$work/this" | tr '\n' ' ')[$(tr '\n' ' ' <"$work/this")]"
done
