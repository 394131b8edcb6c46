#!/usr/bin/env bash
# Bounded recording: a lock-heavy program (bench/flight_bound.c: 4 threads taking nested pairs
# of 16 mutexes as fast as they can) recorded for a few seconds at full rate, in flight-recorder
# mode (--keep-last SIZE), with --max-size SIZE, and without a bound, to show that the bounded
# traces stay within SIZE however long the run (a one-hour run at the same rate only drops more
# of its beginning). For each duration: the pairs taken, the unbounded trace's size, the window's
# size and its fraction of the bound (before and after `record` symbolised it: symbolising
# appends the names of the sites, which the bound does not cover), the events the window kept
# and dropped; then the same for --max-size.
#
# Usage: recorder/bench/flight_bound.sh [SIZE] [SECS...] (default 8M, 2 4 8); env
# CARGO_TARGET_DIR (default <workspace>/target), THREADS (4).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
SIZE="${1:-8M}"
shift || true
SECS=("$@")
[ ${#SECS[@]} -eq 0 ] && SECS=(2 4 8)
THREADS="${THREADS:-4}"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$root" && cargo build --release -p foresight-recorder -p foresight-cli \
  --target-dir "$target" >&2)
fs="$target/release/foresight"
export FORESIGHT_RUNTIME="$target/release/libforesight_rt.so"
cc -O2 -g -pthread -o "$work/flight_bound" "$here/flight_bound.c"

bytes() {
  case "$1" in
    *K) echo $(( ${1%K} << 10 )) ;;
    *M) echo $(( ${1%M} << 20 )) ;;
    *G) echo $(( ${1%G} << 30 )) ;;
    *) echo "$1" ;;
  esac
}
bound=$(bytes "$SIZE")
size() { stat -c %s "$1"; }
# events in a trace, and the events its window dropped (from `foresight stats`; read to the
# end, so that `stats` never writes into a closed pipe, which `pipefail` would count)
events() { "$fs" stats "$1" | awk '$1 == "events" && !n {print $2; n = 1}'; }
dropped() { "$fs" stats "$1" | awk '/^window/ && !n {for (i = 1; i < NF; i++) if ($(i + 1) == "earlier") {print $i; n = 1}}'; }

printf "%-5s %-10s %12s %12s %12s %8s %8s %12s %12s\n" \
  secs mode pairs full_MB file_bytes of_bound symb_of events dropped
for s in "${SECS[@]}"; do
  full="$work/full-$s.trace"
  pairs_full=$("$fs" record --no-symbolize -o "$full" -- "$work/flight_bound" "$s" "$THREADS" 2>/dev/null)
  full_mb=$(echo "scale=1; $(size "$full") / 1048576" | bc)
  rm -f "$full"
  for mode in keep-last max-size; do
    t="$work/$mode-$s.trace"
    pairs=$("$fs" record --no-symbolize "--$mode" "$SIZE" -o "$t" -- "$work/flight_bound" "$s" "$THREADS" 2>/dev/null)
    raw=$(size "$t")
    ev=$(events "$t")
    dr=$(dropped "$t"); dr=${dr:-0}
    # The same trace symbolised, as `record` leaves it by default.
    "$fs" record "--$mode" "$SIZE" -o "$t.sym" -- "$work/flight_bound" "$s" "$THREADS" >/dev/null 2>&1
    sym=$(size "$t.sym")
    printf "%-5s %-10s %12s %12s %12s %8.3f %8.3f %12s %12s\n" "$s" "$mode" "${pairs% pairs}" \
      "$full_mb" "$raw" "$(echo "$raw / $bound" | bc -l)" "$(echo "$sym / $bound" | bc -l)" "$ev" "$dr"
    rm -f "$t" "$t.sym"
  done
  echo "      (unbounded: ${pairs_full% pairs} pairs)"
done
