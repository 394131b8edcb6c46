#!/usr/bin/env bash
# Records a real, distribution-packaged multithreaded program and reports what recording costs.
#
# Installs the package if it is missing (apt-get; says so clearly when it cannot), generates the
# input, runs the program plainly and under `foresight record` RUNS times each, and prints the
# median wall time of both, the overhead ratio, the trace size, trace bytes per second of
# recorded run time, and the threads/locks/sites part of `foresight stats`.
#
# Usage: scripts/real-program.sh [PROGRAM] [RUNS]
#   PROGRAM: pigz (default; `pigz -p 2` on 64 MiB), pbzip2 (`pbzip2 -p2` on 16 MiB),
#            sysbench-threads, sysbench-mutex (2 threads each)
#   RUNS:    runs of each configuration (default 5); the median is reported
# Environment: CARGO_TARGET_DIR (default <workspace>/target), FORESIGHT (a `foresight` binary
# to use instead of building one; libforesight_rt.so must be next to it).
#
# Debian's binaries are stripped and their debug symbols (`*-dbgsym`) live in the debian-debug
# archive: with it configured (and the packages installed) sites get files and lines from
# /usr/lib/debug/.build-id; without it only functions the binary exports are named (sysbench
# exports its functions for LuaJIT, pigz and pbzip2 export none) and the rest stay
# `program+0xoffset`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
program="${1:-pigz}"
runs="${2:-5}"
target="${CARGO_TARGET_DIR:-$root/target}"

case "$program" in
pigz) package=pigz ;;
pbzip2) package=pbzip2 ;;
sysbench-threads | sysbench-mutex) package=sysbench ;;
*)
  echo "unknown program '$program' (pigz, pbzip2, sysbench-threads, sysbench-mutex)" >&2
  exit 2
  ;;
esac

if ! command -v "$package" >/dev/null 2>&1; then
  echo "$package is not installed; installing it with apt-get" >&2
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  if ! command -v apt-get >/dev/null 2>&1 ||
    ! { $sudo apt-get install -y "$package" >&2 ||
      { $sudo apt-get update >&2 && $sudo apt-get install -y "$package" >&2; }; }; then
    echo "error: cannot install $package (no apt-get, no root, or no network);" \
      "install it by hand and run this script again" >&2
    exit 1
  fi
fi
bin="$(command -v "$package")"

if [[ -n "${FORESIGHT:-}" ]]; then
  foresight="$FORESIGHT"
else
  (cd "$root" && cargo build --release -p foresight-cli -p foresight-recorder \
    --target-dir "$target" >&2)
  foresight="$target/release/foresight"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The input: compressible but not trivial text (a compressor's time on a file of zeros says
# nothing), the same bytes every run.
make_input() {
  # awk stops by itself: `| head -c` would kill the writer with SIGPIPE, which pipefail reports.
  awk -v max="$(($1 << 20))" 'BEGIN {
    for (i = 1; n < max; i++) { s = i " " (i * 7919 % 104729) " lorem ipsum dolor sit amet"; n += length(s) + 1; print s }
  }' >"$work/input"
}
case "$program" in
pigz)
  make_input 64
  cmd=("$bin" -p 2 -c "$work/input")
  ;;
pbzip2)
  make_input 16
  cmd=("$bin" -p2 -c "$work/input")
  ;;
sysbench-threads) cmd=("$bin" threads --threads=2 --events=2000 --time=0 run) ;;
sysbench-mutex) cmd=("$bin" mutex --threads=2 --mutex-locks=20000 run) ;;
esac

# Wall-clock seconds of one run of "$@" (stdout discarded), measured by /usr/bin/time when it
# is there (what anyone can reproduce), else by the shell's clock.
wall() {
  if [[ -x /usr/bin/time ]]; then
    /usr/bin/time -f %e -o "$work/time" "$@" >/dev/null 2>"$work/stderr" || {
      cat "$work/stderr" >&2
      return 1
    }
    cat "$work/time"
  else
    local s e
    s=$(date +%s.%N)
    "$@" >/dev/null 2>"$work/stderr" || {
      cat "$work/stderr" >&2
      return 1
    }
    e=$(date +%s.%N)
    echo "$e - $s" | bc -l
  fi
}

median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }

echo "program   ${cmd[*]}"
echo "runs      $runs of each"
plain=$(for _ in $(seq "$runs"); do wall "${cmd[@]}"; done | median)
trace="$work/run.trace"
recorded=$(for _ in $(seq "$runs"); do wall "$foresight" record -o "$trace" -- "${cmd[@]}"; done | median)
size=$(stat -c %s "$trace")

awk -v p="$plain" -v r="$recorded" -v s="$size" 'BEGIN {
  printf "plain     %.3f s (median)\n", p
  printf "recorded  %.3f s (median, including symbolisation)\n", r
  printf "overhead  %.2fx\n", (p > 0 ? r / p : 0)
  printf "trace     %d bytes (%.1f MiB)\n", s, s / 1048576
  printf "rate      %.1f MiB of trace per second of recorded run time\n", (r > 0 ? s / r / 1048576 : 0)
}'
echo
# The summary of the last recorded run: the header lines, then threads, locks and the busiest
# sites (stats prints them in that order).
"$foresight" stats "$trace" | awk '
  /^(command|ended|duration|size|events) / { print; next }
  /^threads / { show = 1 }
  /^sites / { show = 2; n = 0 }
  show == 1 { print }
  show == 2 { if (n++ < 13) print }
'
