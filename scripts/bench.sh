#!/usr/bin/env bash
# One table of foresight's costs: recording overhead of the benchmark programs and the bytes
# per event of their traces; then, on a synthetic STD trace with planted races and deadlocks
# (`foresight synth`), the events per second and peak memory of import, export and each
# analysis; and, when a RAPID jar is given, RAPID's engines on the same STD file beside ours,
# with the ratio.
#
# Every timed command runs pinned to one core (taskset -c $CORE) under /usr/bin/time; the
# figures are medians of REPS runs (RAPID_REPS for RAPID, whose SyncPreserving takes minutes),
# the configurations taking turns. Seconds are CPU seconds (user + system) of the process,
# which a machine shared with other work inflates less than wall time; the wall-clock median
# is printed too. Ratios are of medians measured in this run. CPU seconds come from GNU time,
# in hundredths: at the default length our happens-before pass takes about 0.09 s, so its
# ratio to RAPID is good to about 10%; `--events 10000000` gives a sharper one (and shows
# RAPID's per-event cost without its start-up: its JVM start and JIT warm-up come to about
# 2 CPU seconds here).
#
# Usage: scripts/bench.sh [--rapid RAPID.jar] [--events N] [--no-record]
#   --rapid JAR   RAPID's jar (built from its sources with javac); its dependencies are
#                 looked for in lib/ beside the jar, or given in RAPID_CLASSPATH
#   --events N    length of the synthetic trace (default 2000000: 4 threads, 16 locks)
#   --no-record   leave out the recording-overhead rows (they need a C compiler)
# env: REPS (5), RAPID_REPS (3), RAPID_ENGINES ("HBEpoch SyncPreserving"), CORE (0),
#      LOCK_PAIRS (1000000), CARGO_TARGET_DIR (default <workspace>/target).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
RAPID=""
EVENTS=2000000
RECORD=1
while [[ $# -gt 0 ]]; do
  case "$1" in
  --rapid) RAPID="$2"; shift 2 ;;
  --events) EVENTS="$2"; shift 2 ;;
  --no-record) RECORD=0; shift ;;
  *) echo "usage: $0 [--rapid RAPID.jar] [--events N] [--no-record]" >&2; exit 2 ;;
  esac
done
REPS="${REPS:-5}"
RAPID_REPS="${RAPID_REPS:-3}"
RAPID_ENGINES="${RAPID_ENGINES:-HBEpoch SyncPreserving}"
CORE="${CORE:-0}"
LOCK_PAIRS="${LOCK_PAIRS:-1000000}"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$root" && cargo build --release -p foresight-cli -p foresight-recorder \
  --target-dir "$target" >&2)
foresight="$target/release/foresight"
so="$target/release/libforesight_rt.so"

median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }

# run NAME CMD...: one pinned run; appends "cpu wall rss_kb" to $work/NAME.
run() {
  local name="$1"; shift
  /usr/bin/time -f "%U %S %e %M" -o "$work/time.$$" taskset -c "$CORE" "$@" \
    >"$work/out.$name" 2>"$work/err.$name" || {
    echo "error: $name failed: $*" >&2; cat "$work/err.$name" >&2; exit 1
  }
  awk '{ printf "%.3f %.3f %d\n", $1 + $2, $3, $4 }' "$work/time.$$" >>"$work/$name"
}
col() { awk -v c="$2" '{ print $c }' "$work/$1" | median; }

rows=()
# row LABEL EVENTS NAME NOTE: a table row from the medians of NAME's runs.
row() {
  local cpu wall rss
  cpu=$(col "$3" 1); wall=$(col "$3" 2); rss=$(col "$3" 3)
  rows+=("$(printf "%-38s %12s %9.3f %9.3f %12s %9.1f  %s" "$1" "$2" "$cpu" "$wall" \
    "$(awk -v e="$2" -v s="$cpu" 'BEGIN { if (e ~ /^[0-9]+$/ && s > 0) printf "%.3gM", e / s / 1e6; else print "-" }')" \
    "$(echo "$rss / 1024" | bc -l)" "$4")")
}

# --- recording overhead ---------------------------------------------------------------------
if [[ "$RECORD" == 1 ]]; then
  cc -O2 -g -pthread -o "$work/lock_overhead" "$root/recorder/bench/lock_overhead.c"
  for layout in shared private; do
    for _ in $(seq "$REPS"); do
      run "plain-$layout" "$work/lock_overhead" "$LOCK_PAIRS" "$layout"
      rm -f "$work/rec.trace"
      run "rec-$layout" env LD_PRELOAD="$so" FORESIGHT_OUTPUT="$work/rec.trace" \
        "$work/lock_overhead" "$LOCK_PAIRS" "$layout"
    done
    "$foresight" stats "$work/rec.trace" >"$work/stats"
    ev=$(awk '$1 == "events" { print $2; exit }' "$work/stats")
    bpe=$(sed -n 's/.*, \([0-9.]*\) bytes\/event.*/\1/p' "$work/stats")
    plain=$(col "plain-$layout" 2); rec=$(col "rec-$layout" 2)
    row "record lock_overhead $layout: plain" "-" "plain-$layout" ""
    row "record lock_overhead $layout: recorded" "$ev" "rec-$layout" \
      "overhead $(echo "$rec / $plain" | bc -l | xargs printf %.2f)x (wall), $bpe bytes/event"
  done
fi

# --- the synthetic trace ----------------------------------------------------------------------
std="$work/synth.std"
"$foresight" synth --events "$EVENTS" --threads 4 --locks 16 --races 2 --predictable-races 2 \
  --deadlocks 2 --to std -o "$std" --truth "$work/truth.json" 2>/dev/null
"$foresight" import "$std" -o "$work/synth.trace" 2>/dev/null
lines=$(wc -l <"$std")
events=$("$foresight" stats "$work/synth.trace" | awk '$1 == "events" { print $2; exit }')
bpe=$("$foresight" stats "$work/synth.trace" | sed -n 's/.*, \([0-9.]*\) bytes\/event.*/\1/p')
for _ in $(seq "$REPS"); do
  run import "$foresight" import "$std" -o "$work/i.trace"
  run export "$foresight" export "$work/synth.trace" -o "$work/e.std"
  run analyze-trace "$foresight" analyze "$work/synth.trace"
  run analyze-std "$foresight" analyze "$std"
  run hb-std "$foresight" analyze --only hb-races "$std"
done
findings=$(tail -1 "$work/out.analyze-std")
hb_found=$(sed -n 's/^happens-before races: \(.*\)$/\1/p' "$work/out.hb-std")
row "import STD -> trace" "$lines" import "$bpe bytes/event in the trace"
row "export trace -> STD" "$lines" export ""
row "analyze trace (all analyses)" "$events" analyze-trace "$findings"
row "analyze STD (import + all analyses)" "$lines" analyze-std ""
row "analyze --only hb-races STD" "$lines" hb-std "$hb_found"

# --- RAPID ------------------------------------------------------------------------------------
if [[ -n "$RAPID" ]]; then
  cp="${RAPID_CLASSPATH:-}"
  if [[ -z "$cp" ]]; then
    cp="$RAPID"
    libdir="$(dirname "$RAPID")/lib"
    while IFS= read -r j; do cp="$cp:$j"; done < <(find "$libdir" -name '*.jar' 2>/dev/null | sort)
  fi
  for engine in $RAPID_ENGINES; do
    for _ in $(seq "$RAPID_REPS"); do
      run "rapid-$engine" java -cp "$cp" "$engine" -f std -p "$std"
    done
    said=$(grep -i "racy\|deadlock" "$work/out.rapid-$engine" | tr '\n' ' ' | sed 's/  */ /g')
    case "$engine" in
    HBEpoch) ours=hb-std ;;
    *) ours=analyze-std ;;
    esac
    ratio=$(echo "$(col "rapid-$engine" 1) / $(col "$ours" 1)" | bc -l | xargs printf %.1f)
    row "RAPID $engine on the same STD" "$lines" "rapid-$engine" "${ratio}x our $ours; $said"
  done
fi

printf "%-38s %12s %9s %9s %12s %9s  %s\n" "what" "events" "cpu s" "wall s" "events/cpu s" "peak MB" "notes"
printf '%s\n' "${rows[@]}"
echo "synthetic trace: $lines lines (4 threads, 16 locks, nesting 2; planted: 2 happens-before races," \
  "2 predictable races, 2 deadlocks); medians of $REPS runs ($RAPID_REPS for RAPID), pinned to core $CORE"
