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
const BANK_C: &str = include_str!("../../fixtures/demo/bank.c");

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
    // The default directory is a new private one (`mkdtemp`, mode 0700): a name planted in
    // the temporary directory beforehand can never be it. A directory the user names is the
    // user's choice; what the demo writes in it is still never written through a link.
    let (temporary, dir) = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .with_context(|| format!("cannot create the demo directory {}", d.display()))?;
            (None, d.clone())
        }
        None => {
            let parent = std::env::temp_dir();
            let t =
                super::safe_fs::private_dir_in(&parent, "foresight-demo-").with_context(|| {
                    format!(
                        "cannot create a private demo directory in {} (set TMPDIR, or give \
                         --dir)",
                        parent.display()
                    )
                })?;
            let path = t.path().to_path_buf();
            (Some(t), path)
        }
    };
    let result = demo_in(&dir, &args);
    match temporary {
        Some(t) if !args.keep => drop(t),
        Some(t) => {
            let kept = t.keep();
            say!("foresight demo: files are in {}", kept.display());
        }
        None => say!("foresight demo: files are in {}", dir.display()),
    }
    result
}

/// Makes room for a file the demo writes (or has a tool write) at `path`: a file of the
/// user's from an earlier demo is removed; anything else there (a link, a FIFO, a directory,
/// another user's file) is refused, never written through.
fn clear_for_writing(path: &Path) -> anyhow::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => bail!("cannot look at {}: {e}", path.display()),
    };
    if let Some(why) = super::safe_fs::untrusted_file(&meta, &[]) {
        bail!(
            "{} exists and {why}; the demo does not write through it (remove it, or give \
             another --dir)",
            path.display()
        );
    }
    std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))
}

fn demo_in(dir: &Path, args: &Args) -> anyhow::Result<ExitCode> {
    let source = dir.join("bank.c");
    let binary = dir.join("bank");
    let trace = dir.join("bank.trace");
    for p in [&source, &binary, &trace] {
        clear_for_writing(p)?;
    }
    super::safe_fs::create_new(&source, 0o644)
        .and_then(|mut f| std::io::Write::write_all(&mut f, BANK_C.as_bytes()))
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
    say!("foresight demo: {what}");
}
