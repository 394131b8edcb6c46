//! `cargo foresight test`: builds a crate's tests, records each test in a trace of its own
//! under `foresight record`, and checks all the traces together with `foresight check`, so
//! that a lock-order inversion between two tests is found although neither hangs.
//!
//! Exit status: the tests' own when a test failed (the first failure's), else `check`'s (0,
//! or 1 for findings not in the baseline); 2 for bad usage or when a tool cannot be run.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{anyhow, bail, Context, Result};

const USAGE: &str = "\
Records each test of a crate under foresight, one trace per test, then checks them together.

Usage: cargo foresight test [OPTIONS] [CARGO TEST OPTIONS] [-- TEST BINARY OPTIONS]

Options:
      --traces DIR          where the traces go (default: TARGET/foresight/traces); a directory
                            cargo foresight made is emptied first, any other must be empty
      --hang-timeout SECS   stop a test whose threads record nothing for SECS seconds (a
                            deadlock then reads as observed in its trace)
      --baseline FILE       passed to `foresight check` (default: foresight-baseline.txt)
      --update-baseline     passed to `foresight check`: write the baseline
      --suppressions FILE   passed to `foresight check`
      --foresight PATH      the foresight binary (default: beside this one, else on PATH)
  -h, --help                this text

Other options before `--` go to `cargo test --no-run` (-p, --workspace, --features, --release,
--test NAME, --lib, …); after `--`, filters and options go to the test binaries' listing
(`--list`), and --ignored, --include-ignored, --nocapture and --show-output also to each run.

Exit status: the tests' own when a test failed, else foresight check's (1: new findings).";

/// The marker that says a traces directory is cargo foresight's to empty.
const MARKER: &str = ".cargo-foresight";

#[derive(Default, Debug)]
struct Args {
    traces: Option<PathBuf>,
    hang_timeout: Option<OsString>,
    check: Vec<OsString>,
    foresight: Option<PathBuf>,
    cargo: Vec<OsString>,
    tests: Vec<OsString>,
    help: bool,
}

fn parse(raw: Vec<OsString>) -> Result<Args> {
    let mut it = raw.into_iter().peekable();
    // `cargo foresight …` runs `cargo-foresight foresight …`.
    if it.peek().is_some_and(|a| a == "foresight") {
        it.next();
    }
    let mut args = Args::default();
    match it.next() {
        Some(a) if a == "test" => {}
        Some(a) if a == "-h" || a == "--help" => {
            args.help = true;
            return Ok(args);
        }
        Some(a) => bail!(
            "unknown command `{}`: cargo foresight has `test`",
            a.to_string_lossy()
        ),
        None => bail!("a command is needed: cargo foresight test"),
    }
    let value =
        |name: &str, inline: Option<&str>, it: &mut dyn Iterator<Item = OsString>| match inline {
            Some(v) => Ok(OsString::from(v)),
            None => it.next().ok_or_else(|| anyhow!("{name} needs a value")),
        };
    while let Some(a) = it.next() {
        if a == "--" {
            args.tests.extend(it.by_ref());
            break;
        }
        let text = a.to_string_lossy().into_owned();
        let (name, inline) = match text.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v)),
            _ => (text.clone(), None),
        };
        match name.as_str() {
            "-h" | "--help" => args.help = true,
            "--traces" => args.traces = Some(value(&name, inline, &mut it)?.into()),
            "--hang-timeout" => args.hang_timeout = Some(value(&name, inline, &mut it)?),
            "--foresight" => args.foresight = Some(value(&name, inline, &mut it)?.into()),
            "--baseline" | "--suppressions" => {
                let v = value(&name, inline, &mut it)?;
                args.check.push(name.into());
                args.check.push(v);
            }
            "--update-baseline" => args.check.push(name.into()),
            "--no-run" | "--message-format" => {
                bail!("{name} is cargo foresight's to give to cargo test")
            }
            _ => args.cargo.push(a),
        }
    }
    Ok(args)
}

/// A test binary cargo built.
#[derive(Debug)]
struct TestBinary {
    /// The target's name and kind (`lib`, `test`, `bin`, …).
    target: String,
    kind: String,
    executable: PathBuf,
    /// The package's directory, where cargo runs its tests.
    package_dir: PathBuf,
}

fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// `cargo test --no-run --message-format=json`: the test binaries, in cargo's order.
fn build(args: &Args) -> Result<std::result::Result<Vec<TestBinary>, i32>> {
    let mut child = Command::new(cargo())
        .args([
            "test",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(&args.cargo)
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run cargo")?;
    let mut binaries = Vec::new();
    let stdout = child.stdout.take().expect("piped");
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading cargo's messages")?;
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        let manifest = msg["manifest_path"].as_str().unwrap_or_default();
        binaries.push(TestBinary {
            target: msg["target"]["name"].as_str().unwrap_or("test").to_string(),
            kind: msg["target"]["kind"][0]
                .as_str()
                .unwrap_or("test")
                .to_string(),
            executable: exe.into(),
            package_dir: Path::new(manifest)
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
        });
    }
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        return Ok(Err(status.code().unwrap_or(101)));
    }
    Ok(Ok(binaries))
}

/// The options of the test binaries that each single-test run takes too.
fn run_flags(tests: &[OsString]) -> Vec<OsString> {
    tests
        .iter()
        .filter(|a| {
            [
                "--ignored",
                "--include-ignored",
                "--nocapture",
                "--show-output",
            ]
            .iter()
            .any(|f| a.as_os_str() == OsStr::new(f))
        })
        .cloned()
        .collect()
}

/// The tests of one binary, as `--list --format terse` names them (with the user's filters).
fn list(bin: &TestBinary, tests: &[OsString]) -> Result<Vec<String>> {
    let out = Command::new(&bin.executable)
        .args(["--list", "--format", "terse"])
        .args(tests)
        .current_dir(&bin.package_dir)
        .env("CARGO_MANIFEST_DIR", &bin.package_dir)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", bin.executable.display()))?;
    if !out.status.success() {
        bail!(
            "{} --list failed ({})",
            bin.executable.display(),
            out.status
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_string)
        .collect())
}

/// A name usable as a file name: the test's path with anything but letters, digits, `_`, `-`
/// and `.` as `_`.
fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `BASE.trace`, or `BASE-N.trace` when BASE was given out before in the same directory.
fn unique_trace_name(used: &mut BTreeMap<String, usize>, base: &str) -> String {
    loop {
        let n = used.entry(base.to_string()).or_default();
        let name = if *n == 0 {
            base.to_string()
        } else {
            format!("{base}-{n}")
        };
        *n += 1;
        // `a-1` may itself be a test's name: take it only if nobody holds it yet.
        if *n == 1 || !used.contains_key(&name) {
            used.entry(name.clone()).or_insert(1);
            return format!("{name}.trace");
        }
    }
}

/// The traces directory, made ready: created, or emptied if cargo foresight made it.
fn prepare(dir: &Path) -> Result<()> {
    if dir.join(MARKER).is_file() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot empty {}", dir.display()))?;
    } else if dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "{} is not empty and was not made by cargo foresight: give another --traces",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(
        dir.join(MARKER),
        "traces of `cargo foresight test`, emptied by its next run\n",
    )
    .with_context(|| format!("cannot write in {}", dir.display()))?;
    Ok(())
}

/// The `foresight` binary: `--foresight`, else the one beside this program, else `PATH`'s.
fn foresight(args: &Args) -> PathBuf {
    if let Some(p) = &args.foresight {
        return p.clone();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("foresight")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("foresight"))
}

fn run(args: Args) -> Result<u8> {
    let binaries = match build(&args)? {
        Ok(b) => b,
        Err(code) => return Ok(code.clamp(1, 255) as u8),
    };
    let foresight = foresight(&args);
    let traces_dir = match &args.traces {
        Some(d) => d.clone(),
        None => {
            let Some(exe) = binaries.first().map(|b| &b.executable) else {
                eprintln!("cargo foresight: no test binary was built");
                return Ok(0);
            };
            // TARGET/PROFILE/deps/NAME
            exe.ancestors()
                .nth(3)
                .unwrap_or(Path::new("target"))
                .join("foresight")
                .join("traces")
        }
    };
    prepare(&traces_dir)?;
    let flags = run_flags(&args.tests);
    let mut traces = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut first_failure: Option<u8> = None;
    let mut per_binary: BTreeMap<String, usize> = BTreeMap::new();
    for bin in &binaries {
        let names = list(bin, &args.tests)?;
        if names.is_empty() {
            continue;
        }
        let sub = format!("{}-{}", file_name(&bin.target), file_name(&bin.kind));
        let n = per_binary.entry(sub.clone()).or_default();
        let dir = traces_dir.join(if *n == 0 {
            sub.clone()
        } else {
            format!("{sub}-{n}")
        });
        *n += 1;
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        println!(
            "\nrunning {} test{} of {} under foresight",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            bin.executable.display()
        );
        // Test paths that differ only in the characters a file name cannot keep (`a::b`, `a__b`)
        // must not share a trace: the later one gets a numbered name.
        let mut used: BTreeMap<String, usize> = BTreeMap::new();
        for name in names {
            let trace = dir.join(unique_trace_name(&mut used, &file_name(&name)));
            let mut cmd = Command::new(&foresight);
            cmd.arg("record").arg("-o").arg(&trace);
            if let Some(t) = &args.hang_timeout {
                cmd.arg("--hang-timeout").arg(t);
            }
            cmd.arg("--")
                .arg(&bin.executable)
                .args(["--exact", &name, "--test-threads", "1", "--quiet"])
                .args(&flags)
                .current_dir(&bin.package_dir)
                .env("CARGO_MANIFEST_DIR", &bin.package_dir);
            let out = cmd
                .output()
                .with_context(|| format!("cannot run {}", foresight.display()))?;
            let ok = out.status.success();
            println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
            if !ok
                || flags
                    .iter()
                    .any(|f| f == "--nocapture" || f == "--show-output")
            {
                std::io::stdout().write_all(&out.stdout)?;
                std::io::stderr().write_all(&out.stderr)?;
            }
            if trace.is_file() {
                traces.push(trace);
            }
            if !ok {
                failed.push(name);
                first_failure.get_or_insert(out.status.code().unwrap_or(101).clamp(1, 255) as u8);
            }
        }
    }
    println!(
        "\ncargo foresight: {} test{} recorded in {}, {} failed",
        traces.len(),
        if traces.len() == 1 { "" } else { "s" },
        traces_dir.display(),
        failed.len()
    );
    for name in &failed {
        println!("    {name}");
    }
    if traces.is_empty() {
        return Ok(first_failure.unwrap_or(0));
    }
    std::io::stdout().flush()?;
    let status = Command::new(&foresight)
        .arg("check")
        .args(&args.check)
        .args(&traces)
        .status()
        .with_context(|| format!("cannot run {}", foresight.display()))?;
    let checked = status.code().unwrap_or(2).clamp(0, 255) as u8;
    Ok(first_failure.unwrap_or(checked))
}

fn main() -> ExitCode {
    let args = match parse(std::env::args_os().skip(1).collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cargo foresight: error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match run(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("cargo foresight: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Result<Args> {
        parse(words.iter().map(OsString::from).collect())
    }

    #[test]
    fn options_are_split_between_cargo_check_and_the_tests() {
        let a = args(&[
            "foresight",
            "test",
            "-p",
            "bank",
            "--traces=out",
            "--baseline",
            "b.txt",
            "--release",
            "--",
            "transfer",
            "--ignored",
        ])
        .unwrap();
        assert_eq!(a.cargo, ["-p", "bank", "--release"]);
        assert_eq!(a.traces, Some(PathBuf::from("out")));
        assert_eq!(a.check, ["--baseline", "b.txt"]);
        assert_eq!(a.tests, ["transfer", "--ignored"]);
        assert_eq!(run_flags(&a.tests), ["--ignored"]);
    }

    #[test]
    fn bad_usage_is_an_error() {
        assert!(args(&["foresight", "bench"]).is_err());
        assert!(args(&["foresight", "test", "--traces"]).is_err());
        assert!(args(&["foresight", "test", "--no-run"]).is_err());
        assert!(args(&["foresight"]).is_err());
    }

    #[test]
    fn test_names_that_sanitise_alike_get_traces_of_their_own() {
        let mut used = BTreeMap::new();
        let names: Vec<String> = ["a::b", "a__b", "a<>b", "a__b-1"]
            .iter()
            .map(|t| unique_trace_name(&mut used, &file_name(t)))
            .collect();
        assert_eq!(
            names,
            [
                "a__b.trace",
                "a__b-1.trace",
                "a__b-2.trace",
                "a__b-1-1.trace"
            ]
        );
    }

    #[test]
    fn test_names_become_file_names() {
        assert_eq!(file_name("bank::transfer <2>"), "bank__transfer__2_");
    }
}
