#!/usr/bin/env bash
# Trace compression (FORMAT.md §5.3): bytes per event on disk and recording time for
# `foresight record --compress never|lz4|auto|always` (and zstd levels and chunk sizes
# besides the default), then decompression and decoding speed.
#
# Workloads (bench/*.c):
#   sqlite  SQLite driven by 4 threads (sqlite_threads.c, each thread inserting into and
#           querying its own in-memory database on the serialized library): lock-heavy and
#           repetitive. Needs Debian's libsqlite3-dev: installed with apt-get when missing and
#           run as root, else this workload is skipped. Its traces are of two kinds: when
#           the threads mostly take turns (one free core) zstd shrinks them ~500x; when they run
#           in parallel, some acquisitions wait and the key deltas vary, ~40x (docs/perf/compression.md,
#           "Folded acquisitions"). The median of REPS runs says which kind was more common.
#   random  the random-order lock benchmark (random_locks.c: 4 threads, two of 64 locks picked
#           at random per step, at one of 8 sites): the hard case for compression.
# Variants (env VARIANTS, default "never lz4 auto always"): a `--compress` value, optionally
# followed by @LEVEL (FORESIGHT_ZSTD_LEVEL) and @CHUNK_BYTES (FORESIGHT_CHUNK_BYTES), e.g.
# "always@3" or "always@1@131072"; the defaults are the recorder's own.
# For each workload the variants take turns, REPS times; each figure is the median of its
# REPS runs. B/event is the trace file's size (unsymbolised: `--no-symbolize`, so that the time
# is the recording's) over its events; "time" is the wall time of `foresight record`, and
# "vs never" the ratio of the medians. Then `examples/decompress.rs` reads the last run's
# traces on one core: decompression alone, and decompression plus decoding through the
# reader (`TraceFile::for_each_chunk`), in millions of events per second.
#
# Usage: recorder/bench/compress.sh [SQLITE_ROWS] [RANDOM_N] (defaults 60000 and 250000 per
# thread); env REPS (5), VARIANTS, CARGO_TARGET_DIR (default <workspace>/target). The runtime
# is the one just built (FORESIGHT_RUNTIME), not one cached by an earlier `foresight`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
ROWS="${1:-60000}"
RN="${2:-250000}"
REPS="${REPS:-5}"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$root" && cargo build --release -p foresight-cli -p foresight-recorder \
  --target-dir "$target" >&2)
(cd "$root" && cargo build --release -p foresight-trace --example decompress \
  --target-dir "$target" >&2)
fs="$target/release/foresight"
export FORESIGHT_RUNTIME="$target/release/libforesight_rt.so"

workloads=()
if [ ! -e /usr/include/sqlite3.h ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -q libsqlite3-dev >&2 || true
fi
if [ -e /usr/include/sqlite3.h ]; then
  cc -O2 -g -pthread -o "$work/sqlite" "$here/sqlite_threads.c" -lsqlite3
  workloads+=(sqlite)
else
  echo "compress.sh: no sqlite3.h (libsqlite3-dev): the sqlite workload is skipped" >&2
fi
cc -O2 -g -pthread -o "$work/random" "$here/random_locks.c"
workloads+=(random)

args_of() {
  case "$1" in
    sqlite) echo "$ROWS" ;;
    random) echo "$RN 4" ;;
  esac
}

median() {
  sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

read -r -a modes <<<"${VARIANTS:-never lz4 auto always}"
for w in "${workloads[@]}"; do
  for ((r = 0; r < REPS; r++)); do
    for m in "${modes[@]}"; do
      t="$work/$w.$m.trace"
      rm -f "$t"*
      IFS=@ read -r mode level chunk <<<"$m"
      # shellcheck disable=SC2046
      s=$(date +%s.%N)
      env ${level:+FORESIGHT_ZSTD_LEVEL=$level} ${chunk:+FORESIGHT_CHUNK_BYTES=$chunk} \
        "$fs" record --no-symbolize --compress "$mode" -o "$t" -- "$work/$w" $(args_of "$w") \
        >/dev/null 2>&1
      e=$(date +%s.%N)
      events=$("$fs" stats "$t" | awk '$1 == "events" {print $2; exit}')
      size=$(stat -c %s "$t")
      echo "$e - $s" | bc -l >>"$work/$w.$m.time"
      echo "$size / $events" | bc -l >>"$work/$w.$m.bpe"
      echo "$events" >>"$work/$w.$m.events"
    done
  done
done

printf "%-8s %-16s %12s %10s %10s %9s\n" workload mode events B/event time "vs never"
for w in "${workloads[@]}"; do
  never=$(median <"$work/$w.never.time")
  for m in "${modes[@]}"; do
    tm=$(median <"$work/$w.$m.time")
    printf "%-8s %-16s %12s %10.3f %9.3fs %9.2f\n" "$w" "$m" \
      "$(median <"$work/$w.$m.events")" "$(median <"$work/$w.$m.bpe")" "$tm" \
      "$(echo "$tm / $never" | bc -l)"
  done
done
echo
traces=()
for w in "${workloads[@]}"; do
  for m in "${modes[@]}"; do traces+=("$work/$w.$m.trace"); done
done
"$target/release/examples/decompress" --reps "$REPS" "${traces[@]}"
