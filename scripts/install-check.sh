#!/usr/bin/env bash
# What a user does on a staging host: `cargo install --path cli` (release, a fresh target
# directory), then record a threaded program with the installed binary alone: no runtime
# beside it, no FORESIGHT_RUNTIME, a cache directory that does not exist yet. Prints the build
# time, the binary's size and the size of the runtime it carries.
#   scripts/install-check.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
start=$(date +%s)
cargo install --locked --path cli --root "$work/root" --target-dir "$work/target" >"$work/install.log" 2>&1 ||
    { tail -30 "$work/install.log"; exit 1; }
echo "cargo install: $(($(date +%s) - start)) s"
ls "$work/root/bin"
bin="$work/root/bin/foresight"
echo "binary: $(stat -c %s "$bin") bytes"
cat >"$work/t.c" <<'C'
#include <pthread.h>
#include <stdio.h>
static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static void *w(void *x) { (void)x; pthread_mutex_lock(&b); pthread_mutex_lock(&a);
  pthread_mutex_unlock(&a); pthread_mutex_unlock(&b); return 0; }
int main(void) { pthread_t t; pthread_create(&t, 0, w, 0); pthread_join(t, 0);
  pthread_mutex_lock(&a); pthread_mutex_lock(&b); pthread_mutex_unlock(&b);
  pthread_mutex_unlock(&a); puts("done"); return 0; }
C
cc -g -pthread "$work/t.c" -o "$work/t"
cd "$work"
env -u FORESIGHT_RUNTIME -u XDG_CACHE_HOME FORESIGHT_CACHE_DIR="$work/cache" \
    "$bin" record -o t.trace -- ./t
rt=$(ls "$work"/cache/runtime-*/libforesight_rt.so)
echo "runtime put in place: $rt ($(stat -c %s "$rt") bytes)"
"$bin" analyze t.trace | head -5
