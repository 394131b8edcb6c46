#!/usr/bin/env bash
# What recording memory accesses costs, against ThreadSanitizer and the compiler's own cost.
#
# Builds bench/access_overhead.c (2 threads; per round about 100 loads and stores on a private
# heap array and reads of a shared read-only table; every 16th round a locked update of a
# shared histogram) with gcc -O1 -g, and times, in one run, taking turns:
#   plain        the program without instrumentation
#   tsan         -fsanitize=thread with ThreadSanitizer's own runtime (gcc's libtsan)
#   bare         the same instrumented object linked with bench/tsan_bare.c, whose __tsan_*
#                functions return at once: the compiler's cost of a call per access, the
#                floor under any runtime of this ABI
#   stub         the same object linked with `foresight config --libs`, run without recording
#   recorded     the stub build under the recorder (LD_PRELOAD of libforesight_rt.so and the
#                FORESIGHT_OUTPUT contract, what `foresight record` sets up, without its
#                symbolisation afterwards)
# and prints each median, the ratios the targets are stated in (recorded / tsan, stub / bare),
# the trace's bytes per recorded access and its recorded accesses per executed access.
#
# Usage: recorder/bench/access_overhead.sh [ROUNDS] (default 400000); env REPS (9),
# CARGO_TARGET_DIR (default <workspace>/target), CC (default gcc: ThreadSanitizer's runtime is
# gcc's libtsan here).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
ROUNDS="${1:-400000}"
REPS="${REPS:-9}"
CC="${CC:-gcc}"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$root" && cargo build --release -p foresight-recorder -p foresight-cli \
  --target-dir "$target" >&2)
# RT_SO: another runtime to measure (one built from another commit, to compare in one session).
so="${RT_SO:-$target/release/libforesight_rt.so}"
foresight="$target/release/foresight"
export XDG_CACHE_HOME="$work/cache"
src="$here/access_overhead.c"

"$CC" -O1 -g -pthread -o "$work/plain" "$src"
"$CC" -O1 -g -pthread -fsanitize=thread -o "$work/tsan" "$src"
# One instrumented object, three runtimes under it.
"$CC" -O1 -g -pthread $("$foresight" config --cc "$CC" --cflags) -c -o "$work/prog.o" "$src"
"$CC" -O2 -fPIC -c -o "$work/bare.o" "$here/tsan_bare.c"
"$CC" -pthread -o "$work/bare" "$work/prog.o" "$work/bare.o"
"$CC" -pthread -o "$work/stub" "$work/prog.o" $("$foresight" config --cc "$CC" --libs)

for b in plain tsan bare stub; do
  if ldd "$work/$b" | awk '{ print $1 }' | grep -q foresight; then
    echo "error: $b loads a foresight library" >&2
    exit 1
  fi
done
expected="$("$work/plain" "$ROUNDS")"

# wall time (seconds) of one run of "$@", whose output must be the plain build's
wall() {
  local s e out
  s=$(date +%s.%N)
  out="$("$@")"
  e=$(date +%s.%N)
  if [[ "$out" != "$expected" ]]; then
    echo "error: $* printed '$out', the plain build '$expected'" >&2
    exit 1
  fi
  echo "$e - $s" | bc -l
}

median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }

configs=(plain tsan bare stub recorded)
declare -A times
for _ in $(seq "$REPS"); do
  for c in "${configs[@]}"; do
    case "$c" in
    recorded)
      rm -f "$work/run.trace"
      t=$(wall env LD_PRELOAD="$so" FORESIGHT_OUTPUT="$work/run.trace" "$work/stub" "$ROUNDS")
      ;;
    *) t=$(wall "$work/$c" "$ROUNDS") ;;
    esac
    times[$c]+="$t "
  done
done

declare -A med
for c in "${configs[@]}"; do
  med[$c]=$(echo "${times[$c]}" | tr ' ' '\n' | grep -v '^$' | median)
done

stats="$("$foresight" stats "$work/run.trace")"
executed=$(awk '$1 == "executed" { print $2; exit }' <<<"$stats")
recorded=$(awk '$1 == "recorded" { print $2; exit }' <<<"$stats")
bytes=$(awk '$1 == "size" { for (i = 1; i <= NF; i++) if ($i == "take") { print $(i + 1); exit } }' <<<"$stats")
trace_size=$(stat -c %s "$work/run.trace")

echo "program   access_overhead $ROUNDS (2 threads, $CC -O1), $REPS runs of each, medians"
for c in "${configs[@]}"; do
  awk -v c="$c" -v t="${med[$c]}" -v p="${med[plain]}" \
    'BEGIN { printf "  %-10s %8.3f s  %6.2fx plain\n", c, t, t / p }'
done
awk -v r="${med[recorded]}" -v t="${med[tsan]}" -v s="${med[stub]}" -v b="${med[bare]}" \
  -v ex="$executed" -v rec="$recorded" -v by="$bytes" -v sz="$trace_size" 'BEGIN {
  printf "recorded / tsan     %.2f   (target <= 1, goal 0.5)\n", r / t
  printf "stub / bare         %.2f   (target <= 1.2: not recorded, the stub against the floor)\n", s / b
  printf "accesses            %d executed, %d recorded: %.3f recorded per executed\n", ex, rec, rec / ex
  printf "trace               %.1f MiB, %.2f bytes of events per recorded access\n", sz / 1048576, by / rec
}'
