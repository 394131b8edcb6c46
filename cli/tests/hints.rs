//! The analysis's hints and lock names, as a user sees them in `analyze`, `stats` and `graph`:
//! a program built without `-g` is told so (not asked whether a function is a lock wrapper); a
//! thread's start routine that takes its own lock is no wrapper; a wrapper's counts are the
//! trace's, however the trace is read; the elements of an array of locks keep their index.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use foresight_fixtures::harness;

/// Two threads, each locking its own `L[i]` in its start routine; two accounts locked in
/// opposite orders by `transfer`.
const BANK: &str = r#"
#include <pthread.h>
#include <stdio.h>
struct account { pthread_mutex_t m; int balance; };
struct account accounts[2] = {{PTHREAD_MUTEX_INITIALIZER, 100}, {PTHREAD_MUTEX_INITIALIZER, 100}};
pthread_mutex_t L[2] = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};
void transfer(struct account *a, struct account *b, int n) {
  pthread_mutex_lock(&a->m);
  pthread_mutex_lock(&b->m);
  a->balance -= n; b->balance += n;
  pthread_mutex_unlock(&b->m);
  pthread_mutex_unlock(&a->m);
}
void *worker(void *arg) {
  long i = (long)arg;
  for (int k = 0; k < 3; k++) {
    pthread_mutex_lock(&L[i]);
    pthread_mutex_unlock(&L[i]);
  }
  if (i == 0) transfer(&accounts[0], &accounts[1], 1);
  return 0;
}
int main(void) {
  pthread_t t[2];
  for (long i = 0; i < 2; i++) pthread_create(&t[i], 0, worker, (void *)i);
  for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
  transfer(&accounts[1], &accounts[0], 1);
  printf("%d %d\n", accounts[0].balance, accounts[1].balance);
  return 0;
}
"#;

/// Every lock is taken through `lk`, by one thread two locks at a time.
const WRAPPED: &str = r#"
#include <pthread.h>
pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
__attribute__((noinline)) void lk(pthread_mutex_t *m) { pthread_mutex_lock(m); }
__attribute__((noinline)) void ul(pthread_mutex_t *m) { pthread_mutex_unlock(m); }
void *w1(void *x) { lk(&a); lk(&b); ul(&b); ul(&a); return 0; }
void *w2(void *x) { lk(&b); lk(&a); ul(&a); ul(&b); return 0; }
int main(void) {
  pthread_t t1, t2;
  pthread_create(&t1, 0, w1, 0); pthread_join(t1, 0);
  pthread_create(&t2, 0, w2, 0); pthread_join(t2, 0);
  return 0;
}
"#;

fn foresight(dir: &Path) -> Command {
    harness::foresight_in(harness::foresight(), dir)
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `source` compiled with `flags` and recorded; the trace's path. `None` (said, or a failure
/// in CI) without a C compiler.
fn recorded(dir: &Path, name: &str, source: &str, flags: &[&str]) -> Option<PathBuf> {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let exe = dir.join(name);
    match Command::new("cc")
        .args(flags)
        .args(["-O0", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
    {
        Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            let why = format!("no C compiler `cc`: {e}");
            assert!(!harness::tools_required(), "{why}");
            eprintln!("SKIPPED: {why}");
            return None;
        }
    }
    let trace = dir.join(format!("{name}.trace"));
    ok(foresight(dir)
        .args(["record", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap());
    Some(trace)
}

fn hints(report: &str) -> Vec<&str> {
    report.lines().filter(|l| l.starts_with("hint:")).collect()
}

#[test]
fn without_debug_information_the_hint_says_to_compile_with_g() {
    let dir = harness::fresh_dir("hints-nog");
    let Some(trace) = recorded(&dir, "bank", BANK, &[]) else {
        return;
    };
    let report = ok(foresight(&dir).arg("analyze").arg(&trace).output().unwrap());
    let h = hints(&report);
    assert_eq!(h.len(), 1, "{report}");
    assert!(
        h[0].contains("no line information: 10 of 10 lock acquisitions")
            && h[0].contains("`worker`")
            && h[0].contains("`transfer`")
            && h[0].contains("compile with -g"),
        "{report}"
    );
    assert!(!report.contains("lock wrapper"), "{report}");
}

#[test]
fn a_start_routine_is_no_wrapper_and_array_elements_keep_their_index() {
    let dir = harness::fresh_dir("hints-g");
    let Some(trace) = recorded(&dir, "bank", BANK, &["-g"]) else {
        return;
    };
    // `worker` takes 6 of the 10 acquisitions at one line, of two locks, one per thread.
    let report = ok(foresight(&dir).arg("analyze").arg(&trace).output().unwrap());
    assert!(hints(&report).is_empty(), "{report}");
    assert!(
        report.contains("accounts[0] → accounts[1] → accounts[0]"),
        "{report}"
    );
    let stats = ok(foresight(&dir).arg("stats").arg(&trace).output().unwrap());
    for name in ["L[0]", "L[1]", "accounts[0]", "accounts[1]"] {
        assert!(
            stats.lines().any(|l| l.trim_start().starts_with(name)),
            "{name}: {stats}"
        );
    }
    let dot = ok(foresight(&dir).arg("graph").arg(&trace).output().unwrap());
    for name in ["\"L[0]\"", "\"L[1]\"", "\"accounts[0]\"", "\"accounts[1]\""] {
        assert!(dot.contains(name), "{name}: {dot}");
    }
}

#[test]
fn a_wrappers_counts_are_its_traces_whole_or_in_segments() {
    let dir = harness::fresh_dir("hints-wrapper");
    let Some(trace) = recorded(&dir, "wrapped", WRAPPED, &["-g"]) else {
        return;
    };
    let want = "most lock acquisitions (4 of 4) are at one line of `lk` (wrapped.c:4), for 2 \
                locks: is it a lock wrapper?";
    // Whole, and in segments so short that a thread's two calls are in different ones.
    for segment in ["0", "3", "5", "1000"] {
        let report = ok(foresight(&dir)
            .args(["analyze", "--segment-events", segment])
            .arg(&trace)
            .output()
            .unwrap());
        let h = hints(&report);
        assert!(
            h.len() == 1 && h[0].contains(want),
            "--segment-events {segment}: {report}"
        );
    }
    // Two runs (a copy of the trace): each trace's hint has its own counts, said once.
    let copy = dir.join("again.trace");
    std::fs::copy(&trace, &copy).unwrap();
    let report = ok(foresight(&dir)
        .arg("analyze")
        .arg(&trace)
        .arg(&copy)
        .output()
        .unwrap());
    let h = hints(&report);
    assert!(h.len() == 1 && h[0].contains(want), "{report}");
}
