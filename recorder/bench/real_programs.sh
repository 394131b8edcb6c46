#!/usr/bin/env bash
# Real programs: zstd's multithreaded compressor and SQLite, plain, under ThreadSanitizer and
# under foresight, then foresight's analysis of their traces.
#
# Fetches the programs' sources at run time into a scratch directory (never into the
# repository):
#   zstd    the `zstandard` 0.25.0 sdist from PyPI (`pip download --no-binary :all:`), whose
#           zstd/zstd.c is zstd's single-file library, multithreaded (ZSTD_MULTITHREAD);
#           driven by bench/zstd_mt.c: 32 MiB (MIB) of generated text-like data compressed
#           at level 3 with 2 workers, and again with 4 workers.
#   sqlite  SQLite 3.46's amalgamation from the crates.io package `libsqlite3-sys` 0.30.1
#           (fetched by `cargo fetch` in a throwaway project); driven by bench/sqlite_threads.c:
#           4 threads x 20,000 rows (ROWS) on the serialized library.
# Each is built three ways with $CC (default gcc) -O2 -g: plain; ThreadSanitizer
# (-fsanitize=thread, the compiler's runtime); foresight (`foresight config --cflags --libs`).
# Then, taking turns REPS times (default 3), each program runs as:
#   plain       the plain build
#   tsan        the ThreadSanitizer build (its report on stderr is kept: races counted)
#   fs-norec    the foresight build, not recorded (the cost of the instrumentation alone)
#   fs-callers  (only when RUNS names it) the same built with `foresight config --callers`
#               (function entries and exits instrumented, as before they were left out),
#               not recorded
#   fs-base     (only when RUNS names it) the same objects linked with the stub of another
#               foresight, BASE_FORESIGHT (e.g. main's), not recorded: a change to the stub
#               measured against it in the same turns
#   record      `foresight record --no-symbolize -o T -- PROG` end to end (with SYMBOLIZE=1,
#               symbolised as by default)
#   record-base (only when RUNS names it) the same with the runtime BASE_RUNTIME (another
#               build's libforesight_rt.so, e.g. main's): a change to the runtime measured
#               against it in the same turns
# and prints, per program, the medians of wall time, CPU time (user + system, all threads)
# and peak RSS (as wait4(2) reports them, by bench/rusage.c: GNU time's %e, %U + %S and %M
# in microseconds, where GNU time rounds CPU times to hundredths; for `record`, the largest
# of foresight's and the program's), the ratios to plain and to ThreadSanitizer, then `foresight analyze` of the last recorded trace of each program:
# its events (`foresight stats`), wall time, events per second, peak RSS, races reported
# (and ThreadSanitizer's). Every run's output must be the plain build's (else it stops).
# The load of the machine (/proc/loadavg) is printed before and after.
#
# Usage: recorder/bench/real_programs.sh
# env: REPS (3), MIB (32), ROWS (20000), PROGRAMS ("zstd2 zstd4 sqlite"), CC (gcc),
#      RUNS (the runs to take turns at, default "plain tsan fs-norec record"; the ratios need
#      plain and tsan),
#      BASE_RUNTIME (for record-base), BASE_FORESIGHT (for fs-base), ANALYZE (1; 0 skips the analysis), SYMBOLIZE (0), CARGO_TARGET_DIR (default
#      <workspace>/target), WORK (a directory to keep the sources and builds in between runs;
#      default a temporary one, removed at exit).
# Needs python3 (to fetch zstd's sources). Takes 20 minutes to well over an hour on
# 2 busy cores, most of it the analyses of the zstd traces (ANALYZE=0 skips them); not run
# in CI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
REPS="${REPS:-3}"
MIB="${MIB:-32}"
ROWS="${ROWS:-20000}"
PROGRAMS="${PROGRAMS:-zstd2 zstd4 sqlite}"
CC="${CC:-gcc}"
ANALYZE="${ANALYZE:-1}"
SYMBOLIZE="${SYMBOLIZE:-0}"
target="${CARGO_TARGET_DIR:-$root/target}"
if [ -n "${WORK:-}" ]; then
  work="$WORK"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
log() { echo "real_programs: $*" >&2; }


(cd "$root" && cargo build --release -p foresight-recorder -p foresight-cli \
  --target-dir "$target" >&2)
fs="$target/release/foresight"
export FORESIGHT_RUNTIME="$target/release/libforesight_rt.so"
# The stub is compiled into a cache of this run's own: a stub changed in the tree is the one
# measured.
export FORESIGHT_CACHE_DIR="$work/cache"

# --- sources -------------------------------------------------------------------------------
src="$work/src"
mkdir -p "$src"
if [ ! -e "$src/zstd/zstd.c" ]; then
  log "fetching zstandard 0.25.0 (zstd's sources) from PyPI"
  rm -rf "$src/pypi" && mkdir -p "$src/pypi"
  python3 -m pip download --quiet --no-deps --no-binary :all: zstandard==0.25.0 -d "$src/pypi" >&2
  tar -xzf "$src/pypi/zstandard-0.25.0.tar.gz" -C "$src/pypi"
  rm -rf "$src/zstd" && cp -r "$src/pypi/zstandard-0.25.0/zstd" "$src/zstd"
fi
if [ ! -e "$src/sqlite/sqlite3.c" ]; then
  log "fetching libsqlite3-sys 0.30.1 (SQLite 3.46's amalgamation) from crates.io"
  p="$src/fetch-sqlite"
  rm -rf "$p" && mkdir -p "$p/src"
  cat >"$p/Cargo.toml" <<'EOF'
[package]
name = "fetch-sqlite"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
libsqlite3-sys = { version = "=0.30.1", default-features = false }

[workspace]
EOF
  echo 'fn main() {}' >"$p/src/main.rs"
  (cd "$p" && cargo fetch -q >&2)
  manifest="$(cd "$p" && cargo metadata -q --format-version 1 |
    python3 -c 'import json, sys
print(next(q["manifest_path"] for q in json.load(sys.stdin)["packages"] if q["name"] == "libsqlite3-sys"))')"
  rm -rf "$src/sqlite" && mkdir -p "$src/sqlite"
  cp "$(dirname "$manifest")"/sqlite3/sqlite3.[ch] "$src/sqlite/"
fi

# --- builds --------------------------------------------------------------------------------
# The timer of every run (what GNU time's -f '%e %M %U %S' prints, in microseconds).
"$CC" -O2 -o "$work/rusage" "$here/rusage.c"
timed=("$work/rusage")
# Each library is compiled once per set of flags (kept in $WORK between runs, named by a hash
# of the flags, the compiler and the source), each driver linked per build.
fs_cflags="$("$fs" config --cc "$CC" --cflags)"
fs_libs="$("$fs" config --cc "$CC" --libs)"
fsc_cflags="$("$fs" config --cc "$CC" --callers --cflags)"
declare -A cflags=([plain]="" [tsan]="-fsanitize=thread" [fs]="$fs_cflags" [fsc]="$fsc_cflags")
declare -A libs=([plain]="" [tsan]="-fsanitize=thread" [fs]="$fs_libs" [fsc]="$fs_libs")
RUNS="${RUNS:-plain tsan fs-norec record}"
builds="plain tsan fs"
case " $RUNS " in *" fs-callers "*) builds+=" fsc" ;; esac
case " $RUNS " in *" fs-base "*)
  builds+=" fsb"
  # A stub directory of its own (one per compiler, which each foresight rewrites as its own);
  # both flags, since -L in the compile flags names the directory gcc's -ltsan is taken from.
  base() { FORESIGHT_CACHE_DIR="$work/cache-base" \
    "${BASE_FORESIGHT:?fs-base needs BASE_FORESIGHT}" config --cc "$CC" "$@"; }
  cflags[fsb]="$(base --cflags)"
  libs[fsb]="$(base --libs)"
  ;;
esac
cc_id="$("$CC" --version | head -1)"
obj() { # LIBRARY BUILD SOURCE EXTRA_FLAGS -> path of the object
  local key o
  # (-L is for linking: foresight's names the stub's cache, not how the object is compiled)
  key="$(echo "$cc_id $(echo "${cflags[$2]}" | sed 's/-L[^ ]*//g') $4" | cat - "$3" |
    md5sum | cut -c1-12)"
  o="$work/obj/$1-$2-$key.o"
  if [ ! -e "$o" ]; then
    mkdir -p "$work/obj"
    log "compiling $1 ($2)"
    # shellcheck disable=SC2086
    "$CC" -O2 -g -pthread ${cflags[$2]} $4 -c -o "$o.tmp" "$3"
    mv "$o.tmp" "$o"
  fi
  echo "$o"
}
bin="$work/bin"
mkdir -p "$bin"
sqlite_flags="-DSQLITE_THREADSAFE=1 -DSQLITE_OMIT_LOAD_EXTENSION"
for b in $builds; do
  ob="$b"
  [ "$b" = fsb ] && ob=fs # the same objects as fs, another stub
  zo="$(obj zstd "$ob" "$src/zstd/zstd.c" "")"
  so="$(obj sqlite "$ob" "$src/sqlite/sqlite3.c" "$sqlite_flags")"
  # shellcheck disable=SC2086
  "$CC" -O2 -g -pthread ${cflags[$b]} -I"$src/zstd" -o "$bin/zstd-$b" "$here/zstd_mt.c" "$zo" \
    ${libs[$b]}
  # shellcheck disable=SC2086
  "$CC" -O2 -g -pthread ${cflags[$b]} -I"$src/sqlite" -o "$bin/sqlite-$b" \
    "$here/sqlite_threads.c" "$so" ${libs[$b]} -lm
done
for p in zstd sqlite; do
  for b in plain fs; do
    if ldd "$bin/$p-$b" | awk '{ print $1 }' | grep -Eq 'tsan|foresight'; then
      echo "error: $p-$b loads a sanitizer or foresight library" >&2
      exit 1
    fi
  done
done

args_of() {
  case "$1" in
  zstd2) echo "$bin/zstd-B $MIB 2" ;;
  zstd4) echo "$bin/zstd-B $MIB 4" ;;
  sqlite) echo "$bin/sqlite-B $ROWS" ;;
  *)
    echo "error: unknown program $1 (zstd2, zstd4, sqlite)" >&2
    exit 2
    ;;
  esac
}

median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
load_before="$(loadavg)"
read -r -a configs <<<"$RUNS"
declare -A times rss cpu expected tsan_races
for p in $PROGRAMS; do
  read -r -a cmd <<<"$(args_of "$p")"
  cmd[0]="${cmd[0]/-B/-plain}"
  expected[$p]="$("${cmd[@]}")"
done
log "load before: $load_before; $REPS rounds of: $PROGRAMS x ${configs[*]}"
for rep in $(seq "$REPS"); do
  for p in $PROGRAMS; do
    read -r -a cmd <<<"$(args_of "$p")"
    for c in "${configs[@]}"; do
      run=("${cmd[@]}")
      case "$c" in
      plain) run[0]="${cmd[0]/-B/-plain}" ;;
      tsan) run[0]="${cmd[0]/-B/-tsan}" ;;
      fs-norec) run[0]="${cmd[0]/-B/-fs}" ;;
      fs-callers) run[0]="${cmd[0]/-B/-fsc}" ;;
      fs-base) run[0]="${cmd[0]/-B/-fsb}" ;;
      record | record-base)
        run[0]="${cmd[0]/-B/-fs}"
        rm -f "$work/$p.trace"*
        sym=(--no-symbolize)
        [ "$SYMBOLIZE" = 1 ] && sym=()
        run=("$fs" record "${sym[@]}" -o "$work/$p.trace" -- "${run[@]}")
        if [ "$c" = record-base ]; then
          run=(env FORESIGHT_RUNTIME="${BASE_RUNTIME:?record-base needs BASE_RUNTIME}" "${run[@]}")
        fi
        ;;
      esac
      # ThreadSanitizer's reports are counted, not fatal (it exits 66 after one by default).
      TSAN_OPTIONS="exitcode=0 ${TSAN_OPTIONS:-}" \
        "${timed[@]}" "$work/time" "${run[@]}" >"$work/out" 2>"$work/err" || {
        echo "error: $p/$c failed: ${run[*]}" >&2
        cat "$work/err" >&2
        exit 1
      }
      if [ "$(cat "$work/out")" != "${expected[$p]}" ]; then
        echo "error: $p/$c printed '$(cat "$work/out")', the plain build '${expected[$p]}'" >&2
        exit 1
      fi
      if [ "$c" = tsan ]; then
        tsan_races[$p]="$(grep -c '^WARNING: ThreadSanitizer: data race' "$work/err" || true)"
      fi
      read -r t m u s <"$work/time"
      times[$p/$c]+="$t "
      rss[$p/$c]+="$m "
      cpu[$p/$c]+="$(awk -v u="$u" -v s="$s" 'BEGIN { print u + s }') "
      log "round $rep: $p $c ${t}s (cpu $u + $s) $((m / 1024)) MiB"
    done
  done
done
load_runs="$(loadavg)"

med() { echo "$1" | tr ' ' '\n' | grep -v '^$' | median | grep . || echo 0; }
echo "real programs, $CC -O2 -g, $(nproc) cores, $REPS rounds taking turns, medians; $(date -u +%Y-%m-%d)"
echo "load (1/5/15 min) before: $load_before; after the runs: $load_runs"
echo "wall: elapsed seconds; cpu: user + system seconds of all its threads (for record, of"
echo "foresight's and the program's); peak: the largest resident set of the run, MiB"
printf '%-7s %-11s %8s %8s %8s | %7s %7s | %7s %7s | %7s\n' program run wall cpu peak \
  "wall/pl" "wall/ts" "cpu/pl" "cpu/ts" "peak/pl"
for p in $PROGRAMS; do
  tp="$(med "${times[$p/plain]:-}")"
  tt="$(med "${times[$p/tsan]:-}")"
  cp="$(med "${cpu[$p/plain]:-}")"
  ct="$(med "${cpu[$p/tsan]:-}")"
  mp="$(med "${rss[$p/plain]:-}")"
  for c in "${configs[@]}"; do
    t="$(med "${times[$p/$c]:-}")"
    u="$(med "${cpu[$p/$c]:-}")"
    m="$(med "${rss[$p/$c]:-}")"
    awk -v p="$p" -v c="$c" -v t="$t" -v u="$u" -v m="$m" -v tp="$tp" -v tt="$tt" -v cp="$cp" \
      -v ct="$ct" -v mp="$mp" '
      # a ratio to a run not taken is "-"
      function r(a, b) { return b + 0 > 0 ? sprintf("%7.2f", a / b) : sprintf("%7s", "-") }
      BEGIN {
      printf "%-7s %-11s %8.3f %8.3f %8.0f | %s %s | %s %s | %s\n", p, c, t, u, m / 1024,
        r(t, tp), r(t, tt), r(u, cp), r(u, ct), r(m, mp) }'
  done
done

[ "$ANALYZE" = 1 ] && [[ " $RUNS " == *" record "* ]] || exit 0
echo
echo "foresight analyze of the last recorded trace of each (one run each); its first read"
echo "runs on every core, so wall and CPU differ: issue 34's target is events per CPU second"
printf '%-8s %12s %9s %12s %9s %12s %10s %7s %7s\n' program events "wall s" "M events/s" "cpu s" "M ev/cpu s" \
  "peak MiB" races tsan
for p in $PROGRAMS; do
  events="$("$fs" stats "$work/$p.trace" | awk '$1 == "events" { print $2; exit }')"
  "${timed[@]}" "$work/time" "$fs" analyze --format json "$work/$p.trace" \
    >"$work/$p.json" 2>"$work/$p.analyze.err" || true
  read -r t m u sy <"$work/time"
  # The races found, then what the report says it could not check.
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(sum(1 for f in d["findings"] if f["kind"] == "race"))
for t in d["traces"]:
    for w in t["warnings"]:
        print("warning:", w)
s = d["summary"]
for k in ("race_candidates", "race_candidates_checked", "race_budget_exhausted", "race_pairs_capped"):
    if k in s:
        print(k + ":", s[k])' "$work/$p.json" >"$work/$p.report" 2>/dev/null || echo "?" >"$work/$p.report"
  races="$(head -1 "$work/$p.report")"
  awk -v p="$p" -v e="$events" -v t="$t" -v c="$(awk -v u="$u" -v s="$sy" 'BEGIN { print u + s }')" \
    -v m="$m" -v r="$races" -v tr="${tsan_races[$p]:-}" 'BEGIN {
    printf "%-8s %12d %9.1f %12.2f %9.1f %12.2f %10.0f %7s %7s\n", p, e, t, e / t / 1e6, c, e / c / 1e6,
      m / 1024, r, tr }'
  tail -n +2 "$work/$p.report" | sed "s/^/  /"
  grep -iE 'dropped|budget|error' "$work/$p.analyze.err" | sed "s/^/  /" || true
done
echo "load after the analyses: $(loadavg)"
