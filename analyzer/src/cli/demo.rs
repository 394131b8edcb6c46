//! `foresight demo`: the whole day of a user in one command, on a bundled C program. It
//! compiles the program with the system C compiler and `foresight config`'s flags, records one
//! run (which never hangs), and prints the analysis, which predicts the deadlock and the data
//! race another schedule would hit.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context};

/// The program the demo records: a bank whose transfers lock the source account first.
const BANK_C: &str = include_str!("../../../fixtures/demo/bank.c");

#[derive(clap::Args)]
#[command(after_help = "\
The demo writes bank.c, its binary and its trace into DIR (default: a new directory under the \
system's temporary directory, removed afterwards unless --keep is given). The C compiler is \
$CC, or cc.")]
pub struct Args {
    /// Where to put the program, its binary and its trace (kept afterwards).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Keep the temporary directory and say where it is.
    #[arg(long)]
    keep: bool,
    /// Report format of the analysis.
    #[arg(long, value_enum, default_value_t = super::analyze::Format::Text)]
    format: super::analyze::Format,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (dir, temporary) = match &args.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("foresight-demo-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the demo directory {}", dir.display()))?;
    let result = demo_in(&dir, &args);
    if temporary && !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("foresight demo: files are in {}", dir.display());
    }
    result
}

fn demo_in(dir: &Path, args: &Args) -> anyhow::Result<ExitCode> {
    let source = dir.join("bank.c");
    let binary = dir.join("bank");
    let trace = dir.join("bank.trace");
    std::fs::write(&source, BANK_C)
        .with_context(|| format!("cannot write {}", source.display()))?;

    let cc = std::env::var_os("CC").unwrap_or_else(|| OsString::from("cc"));
    step(&format!(
        "compiling the bundled example with {} and `foresight config`'s flags (its memory \
         accesses are recorded too)",
        cc.to_string_lossy()
    ));
    let (cflags, libs) = super::config::build_flags(Some(&cc.to_string_lossy()))?;
    let out = Command::new(&cc)
        .args(["-g", "-O0", "-pthread"])
        .args(&cflags)
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .args(&libs)
        .output()
        .with_context(|| {
            format!(
                "cannot run the C compiler `{}` (set CC to use another one)",
                cc.to_string_lossy()
            )
        })?;
    if !out.status.success() {
        bail!(
            "compiling {} failed:\n{}",
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let me = std::env::current_exe().context("cannot find the foresight executable")?;
    step("recording one run: foresight record -- ./bank");
    // The example's own output goes to stderr with ours, so that stdout is the report alone
    // (`--format json` pipes into other tools).
    let to_stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .context("cannot duplicate stderr")?;
    let status = Command::new(&me)
        .stdout(Stdio::from(to_stderr))
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&binary)
        .status()
        .context("cannot run foresight record")?;
    if !status.success() {
        bail!("recording the example failed ({status})");
    }

    step("analysing the trace: foresight analyze bank.trace");
    let format = clap::ValueEnum::to_possible_value(&args.format)
        .expect("every format has a name")
        .get_name()
        .to_string();
    let status = Command::new(&me)
        .args(["analyze", "--format", &format])
        .arg(&trace)
        .status()
        .context("cannot run foresight analyze")?;
    if !status.success() {
        bail!("analysing the example failed ({status})");
    }
    Ok(ExitCode::SUCCESS)
}

/// Progress goes to stderr, so that stdout holds only the program's and the report's output.
fn step(what: &str) {
    eprintln!("foresight demo: {what}");
}
