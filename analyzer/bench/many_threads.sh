#!/usr/bin/env bash
# Analysis memory and time against the number of threads a program creates over its life
# (issue 31, item 4): fixtures/threads/thread_per_request.c — a thread per request, at most 8
# alive, every request counted under a lock, the last two racing, two late ones taking two
# locks in opposite orders — built with `foresight config` (gcc -O1), recorded once per
# request count, and analysed by `foresight analyze --format json` under `/usr/bin/time -v`
# (pinned to one CPU with taskset when it is there), ROUNDS times each, the counts alternated.
# Prints per run: requests, events, CPU seconds (user + system), peak RSS, what was found;
# then the medians, and the median peak of the largest count against the smallest's (issue 31
# asks at most 2x for 10^5 requests against 10^3). The traces are kept in BENCH_DIR between runs (never in git).
#
# Usage: analyzer/bench/many_threads.sh; env COUNTS ("1000 100000"), ROUNDS (5),
# BENCH_DIR (<target>/many-threads), FORESIGHT (<target>/release/foresight, built if unset),
# CARGO_TARGET_DIR.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
COUNTS="${COUNTS:-1000 100000}"
ROUNDS="${ROUNDS:-5}"
target="${CARGO_TARGET_DIR:-$root/target}"
dir="${BENCH_DIR:-$target/many-threads}"
mkdir -p "$dir"
if [ -z "${FORESIGHT:-}" ]; then
  (cd "$root" && cargo build --release -p foresight-cli -p foresight-recorder \
    --target-dir "$target" >&2)
  FORESIGHT="$target/release/foresight"
fi
command -v gcc >/dev/null || { echo "many_threads.sh: gcc is needed" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "many_threads.sh: /usr/bin/time (GNU time) is needed" >&2; exit 2; }
pin=()
command -v taskset >/dev/null && pin=(taskset -c 1)

program="$dir/thread_per_request"
export XDG_CACHE_HOME="$dir/cache"
gcc -O1 -g -pthread $("$FORESIGHT" config --cc gcc --cflags) -o "$program" \
  "$root/fixtures/threads/thread_per_request.c" $("$FORESIGHT" config --cc gcc --libs)
# Recorded as a user records them, symbolised when `record` ends: a trace recorded with
# --no-symbolize is symbolised again from the binary by every `analyze`, and that step's memory
# (freed before the walk, kept by the allocator) would be counted as the analysis's.
for n in $COUNTS; do
  [ -s "$dir/recorded-$n.trace" ] ||
    "$FORESIGHT" record -o "$dir/recorded-$n.trace" -- "$program" "$n" >/dev/null
done

echo "load: $(uptime)"
printf '%-9s %10s %9s %10s  %s\n' requests events 'CPU s' 'peak MiB' found
results="$dir/results.txt"
: >"$results"
for ((r = 0; r < ROUNDS; r++)); do
  for n in $COUNTS; do
    trace="$dir/recorded-$n.trace"
    "${pin[@]}" /usr/bin/time -v -o "$dir/time.txt" "$FORESIGHT" analyze --format json "$trace" \
      >"$dir/report.json" || [ $? -eq 1 ]
    cpu="$(awk -F': ' '/User time/ { u = $2 } /System time/ { s = $2 } END { printf "%.2f", u + s }' "$dir/time.txt")"
    kb="$(awk -F': ' '/Maximum resident/ { print $2 }' "$dir/time.txt")"
    summary="$(python3 - "$dir/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["traces"][0]
kinds = {}
for f in r["findings"]:
    key = f"{f['kind']} {f['verdict']}"
    kinds[key] = kinds.get(key, 0) + 1
found = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())) or "nothing"
warn = "; ".join(t["warnings"])
print(t["events"], found + (f" (warnings: {warn})" if warn else ""))
PY
)"
    events="${summary%% *}"
    printf '%-9s %10s %9s %10.1f  %s\n' "$n" "$events" "$cpu" "$(awk -v k="$kb" 'BEGIN { print k / 1024 }')" "${summary#* }"
    echo "$n $events $cpu $kb" >>"$results"
  done
done
echo "medians:"
for n in $COUNTS; do
  awk -v n="$n" '$1 == n { print $2, $3, $4 }' "$results" | sort -k2 -n | awk -v n="$n" '
    { e = $1; cpu[NR] = $2; kb[NR] = $3 }
    END {
      m = int((NR + 1) / 2)
      # peak memory median: sort separately
      printf "%-9s %10s events  CPU %s s", n, e, cpu[m]; if (cpu[m] > 0) printf " (%.2f M events per CPU s)", e / cpu[m] / 1e6
    }'
  awk -v n="$n" '$1 == n { print $4 }' "$results" | sort -n | awk '
    { kb[NR] = $1 } END { printf "  peak %.1f MiB\n", kb[int((NR + 1) / 2)] / 1024 }'
done
median_kb() {
  awk -v n="$1" '$1 == n { print $4 }' "$results" | sort -n | awk '{ kb[NR] = $1 } END { print kb[int((NR + 1) / 2)] }'
}
set -- $COUNTS
if [ $# -gt 1 ]; then
  first="$1"
  last="${!#}"
  awk -v a="$(median_kb "$last")" -v b="$(median_kb "$first")" -v la="$last" -v lb="$first" \
    'BEGIN { printf "peak at %s requests against %s: %.2fx\n", la, lb, a / b }'
fi
