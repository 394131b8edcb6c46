//! A run is one artifact: a shim script that runs a few tiny programs before exec'ing the real,
//! threaded one (as version-manager shims do) leaves the root's trace and the threaded
//! program's, not one file per process; `analyze`, `stats` and `check` given the run's path
//! read both; `pack` puts them in one file that they read directly, and a damaged pack is an
//! error naming the offset.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use foresight_fixtures::harness;

/// Two threads, two locks in opposite orders.
const INVERSION: &str = include_str!("inversion.c");

fn foresight(dir: &Path) -> Command {
    harness::foresight_in(Path::new(env!("CARGO_BIN_EXE_foresight")), dir)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn files(dir: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}

/// Records the shim; returns the run directory and the threaded program's trace name.
fn record_shim() -> (PathBuf, String) {
    let dir = harness::fresh_dir("artifact");
    let src = dir.join("inversion.c");
    std::fs::write(&src, INVERSION).unwrap();
    let prog = harness::compile_source(&src);
    let shim = dir.join("shim");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\nv=$(env | grep -c PATH)\nr=$(readlink -f /bin/sh)\nb=$(basename \"$r\")\n\
             /bin/true\nexec env {}\n",
            prog.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = foresight(&dir)
        .args(["record", "-o", "run.trace", "--", "./shim"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(stdout(&o), "done\n");
    // The shell's trace (the run's root) and the program's; env, readlink, basename, true and
    // the exec'd env recorded no thread and no synchronisation.
    let traces = files(&dir, "run.trace");
    assert_eq!(traces.len(), 2, "{traces:?}\n{err}");
    assert_eq!(traces[0], "run.trace");
    let program = traces[1].clone();
    assert!(
        err.contains("run written to run.trace: 2 processes recorded events")
            && err
                .contains("processes that recorded no thread and no synchronisation left no trace"),
        "{err}"
    );
    let listed: Vec<&str> = err
        .lines()
        .filter_map(|l| l.strip_prefix("foresight: trace written to "))
        .collect();
    assert_eq!(listed.len(), 2, "{err}");
    assert!(
        listed
            .iter()
            .any(|l| l.starts_with(&format!("{program} (")) && l.contains("2 threads")),
        "{err}"
    );
    (dir, program)
}

#[test]
fn a_shim_run_leaves_two_traces_that_analyze_and_stats_read_together() {
    let (dir, program) = record_shim();

    let o = foresight(&dir)
        .args(["analyze", "run.trace"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("potential deadlock") && text.contains(&format!("in {program}")),
        "the threaded process is analysed: {text}"
    );
    assert!(stderr(&o).contains("the run's 2 traces are read together"));

    let o = foresight(&dir)
        .args(["analyze", "--root-only", "run.trace"])
        .output()
        .unwrap();
    assert!(!stdout(&o).contains("potential deadlock"), "{}", stdout(&o));

    // Naming a sibling too reads it once.
    let o = foresight(&dir)
        .args(["analyze", "run.trace", &program])
        .output()
        .unwrap();
    assert_eq!(stdout(&o).matches("[1] potential deadlock").count(), 1);

    let o = foresight(&dir)
        .args(["stats", "run.trace"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(s.starts_with("run        2 traces, busiest first:"), "{s}");
    assert_eq!(
        s.lines().filter(|l| l.starts_with("trace      ")).count(),
        2,
        "{s}"
    );

    std::fs::write(dir.join("empty-baseline.txt"), "").unwrap();
    let o = foresight(&dir)
        .args(["check", "run.trace", "--baseline", "empty-baseline.txt"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "the cycle is new: {}", stderr(&o));
}

#[test]
fn a_pack_holds_the_run_and_is_read_directly() {
    let (dir, program) = record_shim();
    let o = foresight(&dir)
        .args(["pack", "run.trace", "-o", "bug.fspk"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("packed 2 traces into bug.fspk"),
        "{}",
        stderr(&o)
    );
    assert!(
        files(&dir, ".foresight-pack").is_empty(),
        "no working directory is left"
    );

    let direct = stdout(
        &foresight(&dir)
            .args(["analyze", "run.trace"])
            .output()
            .unwrap(),
    );
    let o = foresight(&dir)
        .args(["analyze", "bug.fspk"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let packed = stdout(&o);
    assert_eq!(
        packed, direct,
        "the same report, traces named as in the run"
    );
    assert!(packed.contains(&format!("in {program}")));

    let o = foresight(&dir)
        .args(["analyze", "--format", "json", "bug.fspk"])
        .output()
        .unwrap();
    let json = stdout(&o);
    assert!(!json.contains(".foresight-pack"), "{json}");
    // Traces are named as in the pack (the run's names), never by where they were unpacked.
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let names: Vec<&str> = report["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["path"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{json}");
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("run.trace") && !n.contains('/')),
        "{names:?}"
    );

    let o = foresight(&dir)
        .args(["stats", "bug.fspk"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(s.starts_with("pack       bug.fspk: 2 traces"), "{s}");
    assert!(s.contains("× smaller") && s.contains("packed     "), "{s}");

    // `dump` prints one trace of a pack: the one --member names, the same as the file's.
    let o = foresight(&dir).args(["dump", "bug.fspk"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "two traces: which one?");
    assert!(
        stderr(&o).contains("name one with --member (run.trace, run.trace."),
        "{}",
        stderr(&o)
    );
    let o = foresight(&dir)
        .args(["dump", "--member", "run.trace", "bug.fspk"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let from_file = foresight(&dir)
        .args(["dump", "run.trace"])
        .output()
        .unwrap();
    assert_eq!(stdout(&o), stdout(&from_file));
    let o = foresight(&dir)
        .args(["dump", "--member", "nope", "bug.fspk"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no trace named `nope`"),
        "{}",
        stderr(&o)
    );

    // Damage: a byte of the last trace's compressed data, the manifest, a cut-off tail.
    let bytes = std::fs::read(dir.join("bug.fspk")).unwrap();
    let manifest_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let mut flipped = bytes.clone();
    let at = bytes.len() - 10;
    flipped[at] ^= 0x55;
    std::fs::write(dir.join("flipped.fspk"), &flipped).unwrap();
    let mut manifest = bytes.clone();
    manifest[48 + manifest_len / 2] ^= 0x01;
    std::fs::write(dir.join("manifest.fspk"), &manifest).unwrap();
    std::fs::write(dir.join("cut.fspk"), &bytes[..bytes.len() - 100]).unwrap();
    std::fs::write(dir.join("short.fspk"), &bytes[..20]).unwrap();
    for (file, expect) in [
        ("flipped.fspk", "at offset"),
        ("manifest.fspk", "does not match its checksum at offset 16"),
        ("cut.fspk", "outside the pack's data"),
        ("short.fspk", "shorter than the 48-byte prefix (offset 20)"),
    ] {
        for cmd in ["analyze", "stats"] {
            let o = foresight(&dir).args([cmd, file]).output().unwrap();
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{cmd} {file}: {err}");
            assert!(
                err.contains(file) && err.contains(expect),
                "{cmd} {file}: {err}"
            );
        }
    }
}
