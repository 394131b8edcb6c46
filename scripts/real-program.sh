#!/usr/bin/env bash
# Records a real, distribution-packaged multithreaded program and reports what recording costs.
#
# Installs the package if it is missing (apt-get; says so clearly when it cannot), generates the
# input, runs the program plainly and under `foresight record` RUNS times each, taking turns,
# and prints the median wall and CPU time of both, the overhead ratios, the trace size, trace
# bytes per second of recorded run time, and the threads/locks/sites part of `foresight stats`.
#
# Usage: scripts/real-program.sh [PROGRAM] [RUNS]
#        scripts/real-program.sh -- COMMAND [ARGS...]   (any command; RUNS from the environment)
#   PROGRAM: pigz (default; `pigz -p 2` on 64 MiB), pbzip2 (`pbzip2 -p2` on 16 MiB),
#            sysbench-threads, sysbench-mutex (2 threads each)
#   RUNS:    runs of each configuration (default 5); the medians are reported
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
if [[ "$program" == "--" ]]; then
  shift
  if [[ $# -eq 0 ]]; then
    echo "usage: $0 -- COMMAND [ARGS...]" >&2
    exit 2
  fi
  cmd=("$@")
  runs="${RUNS:-5}"
else
  runs="${2:-5}"
fi
target="${CARGO_TARGET_DIR:-$root/target}"

case "$program" in
--) package="" ;;
pigz) package=pigz ;;
pbzip2) package=pbzip2 ;;
sysbench-threads | sysbench-mutex) package=sysbench ;;
*)
  echo "unknown program '$program' (pigz, pbzip2, sysbench-threads, sysbench-mutex)" >&2
  exit 2
  ;;
esac

if [[ -n "$package" ]] && ! command -v "$package" >/dev/null 2>&1; then
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
if [[ -n "$package" ]]; then
  bin="$(command -v "$package")"
fi

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

# One run of "$@" (stdout discarded): "wall cpu" in seconds, cpu being user + system time of
# the run and its children. perf stat's task-clock when perf can count (milliseconds of
# resolution: the runs of a short program are tens of them), else /usr/bin/time (10 ms), else
# the shell's clock and no CPU time ("-").
if perf stat -e task-clock true >/dev/null 2>&1; then
  timer=perf
elif [[ -x /usr/bin/time ]]; then
  timer=time
else
  timer=clock
fi
measure() {
  local s e
  case "$timer" in
  perf)
    # Its "time elapsed" runs from the command's start to its end, perf's own start excluded.
    LC_ALL=C perf stat -e task-clock -o "$work/time" "$@" >/dev/null 2>"$work/stderr" || {
      cat "$work/stderr" >&2
      return 1
    }
    awk '$2 == "msec" && $3 == "task-clock" { gsub(",", "", $1); c = $1 / 1000 }
      $2 == "seconds" && $3 == "time" && $4 == "elapsed" { w = $1 }
      END { printf "%.4f %.4f\n", w, c }' "$work/time"
    ;;
  time)
    /usr/bin/time -f "%e %U %S" -o "$work/time" "$@" >/dev/null 2>"$work/stderr" || {
      cat "$work/stderr" >&2
      return 1
    }
    awk '{ printf "%s %.2f\n", $1, $2 + $3 }' "$work/time"
    ;;
  clock)
    s=$(date +%s.%N)
    "$@" >/dev/null 2>"$work/stderr" || {
      cat "$work/stderr" >&2
      return 1
    }
    e=$(date +%s.%N)
    echo "$(echo "$e - $s" | bc -l) -"
    ;;
  esac
}

median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }

echo "program   ${cmd[*]}"
echo "runs      $runs of each, taking turns (plain, recorded, plain, ...); load $(cut -d' ' -f1-3 /proc/loadavg)"
trace="$work/run.trace"
: >"$work/plain"
: >"$work/recorded"
# Taking turns: a drift of the machine's speed (other work starting or ending) affects both
# configurations alike.
for _ in $(seq "$runs"); do
  measure "${cmd[@]}" >>"$work/plain"
  rm -f "$trace"
  measure "$foresight" record -o "$trace" -- "${cmd[@]}" >>"$work/recorded"
done
plain=$(cut -d' ' -f1 "$work/plain" | median)
recorded=$(cut -d' ' -f1 "$work/recorded" | median)
plain_cpu=$(cut -d' ' -f2 "$work/plain" | median)
recorded_cpu=$(cut -d' ' -f2 "$work/recorded" | median)
size=$(stat -c %s "$trace")

awk -v p="$plain" -v r="$recorded" -v pc="$plain_cpu" -v rc="$recorded_cpu" -v s="$size" -v timer="$timer" 'BEGIN {
  printf "plain     %.3f s wall, %s s CPU (medians)\n", p, pc
  printf "recorded  %.3f s wall, %s s CPU (medians; `foresight record` end to end, symbolisation included)\n", r, rc
  printf "overhead  %.2fx wall", (p > 0 ? r / p : 0)
  if (pc > 0) printf ", %.2fx CPU", rc / pc
  printf " (CPU time from %s)\n", timer
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
