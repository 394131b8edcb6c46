//! Builds the recorder runtime (`libforesight_rt.so`, the `cdylib` of `foresight-recorder`) so
//! that the `foresight` binary carries it (`include_bytes!` in `src/runtime.rs`): copying
//! that one binary to a host is the whole installation.
//!
//! The runtime is built by a nested `cargo build -p foresight-recorder` with a target directory
//! of its own (`<target>/<profile>/foresight-runtime`): the outer build holds the lock of its
//! own target directory for as long as it runs, so sharing it would wait for ever. Cargo's
//! freshness check makes the nested build a no-op when the runtime is current, and this script
//! reruns only when the recorder's or the format's sources change.
//!
//! `FORESIGHT_EMBED_RUNTIME=0` at build time embeds nothing (a quick build, or a package that
//! installs the runtime beside the binary); so does a target the runtime does not support
//! (anything but Linux with glibc). Such a binary finds the runtime as before.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().expect("the workspace root").to_path_buf();
    for p in [
        "recorder/src",
        "recorder/Cargo.toml",
        "trace-format/src",
        "trace-format/Cargo.toml",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    println!("cargo:rerun-if-env-changed=FORESIGHT_EMBED_RUNTIME");

    let out = PathBuf::from(env("OUT_DIR"));
    let embedded = out.join("libforesight_rt.so");
    let os = env("CARGO_CFG_TARGET_OS");
    let target_env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let skip = if std::env::var("FORESIGHT_EMBED_RUNTIME").is_ok_and(|v| v == "0") {
        Some("built with FORESIGHT_EMBED_RUNTIME=0")
    } else if os != "linux" || target_env != "gnu" {
        Some("the runtime needs Linux with glibc (LD_PRELOAD of a glibc shared library)")
    } else {
        None
    };
    if let Some(why) = skip {
        std::fs::write(&embedded, b"").expect("write the empty runtime placeholder");
        println!("cargo:rustc-env=FORESIGHT_RUNTIME_HASH=none");
        println!("cargo:rustc-env=FORESIGHT_RUNTIME_NOT_EMBEDDED={why}");
        return;
    }

    let profile = env("PROFILE");
    let target = env("TARGET");
    let host = env("HOST");
    let nested = nested_target_dir(&out);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "-p", "foresight-recorder", "--lib", "--target-dir"])
        .arg(&nested);
    if profile == "release" {
        cmd.arg("--release");
    }
    if target != host {
        cmd.args(["--target", &target]);
    }
    // The outer build's variables describe the analyzer's build (its package, its features,
    // its profile overrides, clippy as the compiler wrapper); the nested build must see only
    // the user's configuration. Kept: where cargo keeps its files, offline mode, the job
    // server (so that both builds share the machine's cores).
    let kept = ["CARGO_HOME", "CARGO_NET_OFFLINE", "CARGO_MAKEFLAGS"];
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let leaked = (k.starts_with("CARGO_") && !kept.contains(&k))
            || matches!(
                k,
                "RUSTC_WORKSPACE_WRAPPER" | "CLIPPY_ARGS" | "CLIPPY_CONF_DIR" | "OUT_DIR"
            )
            || k.starts_with("__CARGO");
        if leaked {
            cmd.env_remove(k);
        }
    }
    // The embedded copy needs no debug information (nothing symbolises the runtime's own
    // frames: they are dropped from every stack); its symbols stay.
    let profile_var = if profile == "release" {
        "CARGO_PROFILE_RELEASE_STRIP"
    } else {
        "CARGO_PROFILE_DEV_STRIP"
    };
    cmd.env(profile_var, "debuginfo");
    let output = cmd
        .output()
        .expect("run cargo to build the runtime (foresight-recorder)");
    if !output.status.success() {
        panic!(
            "building the runtime (cargo build -p foresight-recorder --target-dir {}) failed:\n{}",
            nested.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut built = nested.clone();
    if target != host {
        built.push(&target);
    }
    built.push(&profile);
    built.push("libforesight_rt.so");
    let bytes = std::fs::read(&built)
        .unwrap_or_else(|e| panic!("cannot read the built runtime {}: {e}", built.display()));
    // Written only when it changed: the binary is relinked only for a new runtime.
    if std::fs::read(&embedded).ok().as_deref() != Some(&bytes[..]) {
        std::fs::write(&embedded, &bytes).expect("copy the runtime into OUT_DIR");
    }
    println!(
        "cargo:rustc-env=FORESIGHT_RUNTIME_HASH={:016x}",
        fnv1a(&bytes)
    );
    println!("cargo:rustc-env=FORESIGHT_RUNTIME_NOT_EMBEDDED=");
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name} for build scripts"))
}

/// `<target>/<profile>/foresight-runtime`, from `OUT_DIR` =
/// `<target>/<profile>/build/<package>-<hash>/out`; `OUT_DIR/foresight-runtime` otherwise.
fn nested_target_dir(out: &Path) -> PathBuf {
    let mut up = out.ancestors();
    let build = up.nth(2);
    match (build, up.next()) {
        (Some(b), Some(profile)) if b.file_name().is_some_and(|n| n == "build") => {
            profile.join("foresight-runtime")
        }
        _ => out.join("foresight-runtime"),
    }
}

/// FNV-1a, 64 bits: names the runtime's cache directory (the bytes themselves are compared
/// before a cached copy is used).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
