#!/usr/bin/env bash
# Race analysis speed and memory on traces of about 10^8 events (issue 13's targets), each
# measurement in a process of its own (`analyzer/examples/race_bench.rs`):
#   stream      the merged stream read from the file and converted, nothing else: the floor
#               under every pass, measured in the same run as the passes it is compared with
#   races       the happens-before race pass alone (shadow memory, clocks, locksets)
#   analyze     what `foresight analyze` does: one walk with the deadlock model (clocks with
#               reads-from, critical sections) and the race pass, then every analysis, the
#               sync-preserving race prediction included
# on two traces:
#   synthetic   written by `race_bench synth` (4 workers; private heap, a shared table, the
#               stack; a locked histogram; token hand-offs whose only order is lock hand-offs
#               between disjoint locksets: candidates the predictor confirms)
#   recorded    recorder/bench/access_overhead.c built with `foresight config` and recorded
#               (needs gcc; skipped, saying so, without it)
# and a synthetic trace a tenth as long, whose peak memory shows what grows with the trace.
# Prints events per second of wall time and of CPU time (all the process's threads: on a
# machine other work shares, the CPU figure says what the pass costs, the wall figure also
# what else ran), peak RSS (VmHWM) and the ratio of wall throughputs: pass / stream floor.
#
# Usage: analyzer/bench/race_speed.sh; env EVENTS (100000000), ROUNDS (3000000: the recorded
# program's rounds, 1.035 * 10^8 events), BENCH_DIR (default <target>/race-bench: the traces,
# kept between runs and regenerated when missing; never in git), CARGO_TARGET_DIR.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
EVENTS="${EVENTS:-100000000}"
ROUNDS="${ROUNDS:-3000000}"
target="${CARGO_TARGET_DIR:-$root/target}"
dir="${BENCH_DIR:-$target/race-bench}"
mkdir -p "$dir"

(cd "$root" && cargo build --release -p foresight-analyzer -p foresight-cli -p foresight-recorder \
  --example race_bench --bin foresight --target-dir "$target" >&2)
bench="$target/release/examples/race_bench"
foresight="$target/release/foresight"

traces=()
synth() {
  local file="$dir/synthetic-$1.trace"
  [ -s "$file" ] || "$bench" synth "$file" "$1" >&2
  traces+=("$file")
}
synth "$EVENTS"
synth "$((EVENTS / 10))"
if command -v gcc >/dev/null; then
  rec="$dir/recorded-$ROUNDS.trace"
  if [ ! -s "$rec" ]; then
    export XDG_CACHE_HOME="$dir/cache"
    gcc -O1 -g -pthread $("$foresight" config --cc gcc --cflags) -o "$dir/access_overhead" \
      "$root/recorder/bench/access_overhead.c" $("$foresight" config --cc gcc --libs)
    "$foresight" record --no-symbolize -o "$rec" -- "$dir/access_overhead" "$ROUNDS" >&2
  fi
  traces+=("$rec")
else
  echo "note: gcc not found: the recorded trace is skipped" >&2
fi

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
printf '%-34s %-10s %12s %8s %10s %10s %9s  %s\n' trace pass events 'M ev/s' 'M ev/CPU s' \
  'peak RSS' 'vs floor' found
for t in "${traces[@]}"; do
  floor=""
  for run in stream races analyze; do
    pass="$run"
    out="$("$bench" "$pass" "$t")"
    meps="$(field meps "$out")"
    [ "$pass" = stream ] && floor="$meps"
    found=""
    case "$pass" in
      races) found="race pairs $(field race_pairs "$out"), candidate pairs $(field candidate_pairs "$out")" ;;
      analyze) found="$(field races "$out") races ($(field candidates_checked "$out") candidates checked; walk $(field walk_secs "$out") s, analyses $(field analysis_secs "$out") s)" ;;
    esac
    printf '%-34s %-10s %12s %8s %10s %7s MB %8.2fx  %s\n' "$(basename "$t")" "$run" \
      "$(field events "$out")" "$meps" "$(field cpu_meps "$out")" "$(( $(field rss_kb "$out") / 1024 ))" \
      "$(awk -v a="$meps" -v b="$floor" 'BEGIN { print a / b }')" "$found"
  done
done
