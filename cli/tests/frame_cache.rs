//! `foresight record` keeps the frames it resolved per module build in its cache directory
//! (`frames-<stamp>/`), names the sites of a second recording of the same build the same way,
//! keeps nothing with `FORESIGHT_FRAME_CACHE=off`, and leaves no other executable's frames behind.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use foresight_fixtures::harness::{self, compile_hostile, fresh_dir};
use foresight_trace::Trace;

fn record(dir: &Path, cache: &Path, extra_env: &[(&str, &str)], trace: &str) -> Output {
    let exe = compile_hostile("lock_pairs");
    let mut c = harness::foresight_in(Path::new(env!("CARGO_BIN_EXE_foresight")), dir);
    c.env("FORESIGHT_CACHE_DIR", cache);
    for (k, v) in extra_env {
        c.env(k, v);
    }
    let o = c
        .args(["record", "-o", trace, "--"])
        .arg(&exe)
        .arg("200")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The files of every `frames-*` directory of `cache`, sorted.
fn frame_files(cache: &Path) -> Vec<PathBuf> {
    let Ok(dirs) = std::fs::read_dir(cache) else {
        return Vec::new();
    };
    dirs.flatten()
        .filter(|d| d.file_name().to_string_lossy().starts_with("frames-"))
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|f| f.path())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// How the trace names each of its sites.
fn site_names(path: &Path) -> BTreeSet<String> {
    let t = Trace::open(path).unwrap();
    t.tables
        .sites
        .keys()
        .map(|&s| t.tables.describe_site(s))
        .collect()
}

#[test]
fn a_second_recording_of_a_build_is_named_from_the_frame_cache_unless_turned_off() {
    let dir = fresh_dir("frame-cache");
    let cache = dir.join("cache");
    record(&dir, &cache, &[], "first.trace");
    let files = frame_files(&cache);
    assert!(
        files
            .iter()
            .any(|f| f.extension().is_some_and(|e| e == "frames")),
        "the frames of the run's modules are kept: {files:?}"
    );
    let first = site_names(&dir.join("first.trace"));
    assert!(
        first.iter().any(|n| n.contains("lock_pairs.c")),
        "the sites are named: {first:?}"
    );

    let modified = |files: &[PathBuf]| -> Vec<_> {
        files
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().modified().unwrap())
            .collect()
    };
    let before = modified(&files);
    record(&dir, &cache, &[], "second.trace");
    assert_eq!(site_names(&dir.join("second.trace")), first);
    assert_eq!(frame_files(&cache), files, "nothing new to keep");
    assert_eq!(modified(&files), before, "nor rewritten");

    let off = dir.join("cache-off");
    record(
        &dir,
        &off,
        &[("FORESIGHT_FRAME_CACHE", "off")],
        "third.trace",
    );
    assert_eq!(site_names(&dir.join("third.trace")), first);
    assert!(frame_files(&off).is_empty(), "{:?}", frame_files(&off));
}

#[test]
fn the_frame_cache_of_another_foresight_executable_is_removed() {
    let dir = fresh_dir("frame-cache-stale");
    let cache = dir.join("cache");
    // What an upgraded or rebuilt foresight finds of the one before it.
    let stale = cache.join("frames-00000000deadbeef");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("0-0.frames"), b"resolved by another build").unwrap();
    let unrelated = cache.join("notes");
    std::fs::write(&unrelated, b"not foresight's frames").unwrap();
    record(&dir, &cache, &[], "first.trace");
    assert!(!stale.exists(), "the other executable's frames are gone");
    assert!(
        unrelated.exists(),
        "nothing else in the cache directory is touched"
    );
    assert!(
        !frame_files(&cache).is_empty(),
        "this executable's frames are kept"
    );
}
