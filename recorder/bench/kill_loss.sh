#!/usr/bin/env bash
# What SIGKILL loses: a program with a thread that records steadily (a lock pair per ms), one
# that recorded a burst and then waits, and main waiting in a join, is killed with SIGKILL at
# a random moment between 2 and 4 s; then, per thread, the time between the end of its last
# written chunk and the kill (the events recorded in that window are lost), the steady
# thread's events lost (3 per lock pair it counted, in a shared mapping that survives the
# kill, plus its thread-start, less those in the trace), and whether the waiting threads'
# requests made it. Each line is one run; REPS runs (default 10), then the largest loss.
#
# Usage: recorder/bench/kill_loss.sh; env REPS, FORESIGHT_FLUSH_MS (the flusher's period, 100),
# CARGO_TARGET_DIR (default <workspace>/target).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
REPS="${REPS:-10}"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$root" && cargo build --release -p foresight-recorder --lib --target-dir "$target" >&2 &&
  cargo build --release -p foresight-trace --example thread_ends --target-dir "$target" >&2 &&
  cargo build --release -p foresight-cli --bin foresight --target-dir "$target" >&2)
so="$target/release/libforesight_rt.so"
ends="$target/release/examples/thread_ends"
cc -O2 -pthread -o "$work/kill_loss" "$here/kill_loss.c"

printf "%-4s %-42s %-30s %s\n" run "steady: events, lost, lost window (ms)" "burst: events, last event" "main: last event"
max_lost=0
max_window=0
for run in $(seq "$REPS"); do
  rm -f "$work/t"
  LD_PRELOAD="$so" FORESIGHT_OUTPUT="$work/t" "$work/kill_loss" "$work/pairs" >"$work/out" &
  pid=$!
  while ! grep -q started "$work/out" 2>/dev/null; do sleep 0.01; done
  sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.3f", 2 + 2 * r / 32767 }')"
  kill_ns=$(date +%s%N)
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  # thread events end_ns
  read -r _ s_events s_end < <("$ends" "$work/t" | awk '$1 == 1')
  read -r _ b_events _ < <("$ends" "$work/t" | awk '$1 == 2')
  window=$(awk -v k="$kill_ns" -v e="$s_end" 'BEGIN { printf "%.0f", (k - e) / 1e6 }')
  pairs=$(od -An -t d8 -N 8 "$work/pairs" | tr -d ' ')
  lost=$((3 * pairs + 1 - s_events))
  if [ "$lost" -gt "$max_lost" ]; then max_lost=$lost; fi
  if [ "$window" -gt "$max_window" ]; then max_window=$window; fi
  last2=$("$target/release/foresight" dump --thread 2 "$work/t" 2>/dev/null | tail -1 | awk '{ print $4 }')
  last0=$("$target/release/foresight" dump --thread 0 "$work/t" 2>/dev/null | tail -1 | awk '{ print $4 }')
  printf "%-4s %-42s %-30s %s\n" "$run" "$s_events, $lost, $window" "$b_events, $last2" "$last0"
done
echo "largest loss: $max_lost events of the steady thread, a window of $max_window ms"
