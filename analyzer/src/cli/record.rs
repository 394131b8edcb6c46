//! `foresight record`: run a command under the recorder runtime (`LD_PRELOAD`), wait for it,
//! symbolise every trace the run produced, and exit with the command's status.
//!
//! The contract with the runtime is a handful of environment variables (`FORESIGHT_OUTPUT`,
//! `FORESIGHT_STACK_DEPTH`, `FORESIGHT_NO_FOLLOW`, `FORESIGHT_ALLOCATIONS`, `FORESIGHT_COMPRESS`,
//! `LD_PRELOAD`). The root process writes
//! exactly `PATH` (the runtime opens it with `O_CREAT|O_EXCL`), so `record` clears `PATH` and its
//! stale `PATH.<pid>[.<n>]` siblings first; forked children and exec'd images that find `PATH`
//! taken write those siblings.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use foresight_symbols::{symbolize_in_place, SymbolizeOptions};
use foresight_trace::frame::FILE_MAGIC;
use foresight_trace::tables::{StopCause, ThreadEndState};
use foresight_trace::{Trace, TraceFile};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM};

/// The runtime's file name (the `cdylib` of `foresight-recorder`).
const RUNTIME_NAME: &str = "libforesight_rt.so";

#[derive(clap::Args)]
#[command(override_usage = "foresight record [OPTIONS] [--] <CMD> [ARGS]...")]
#[command(after_help = "\
The runtime libforesight_rt.so is looked up next to the foresight executable (and in its \
parent directory, ../lib/foresight and ../lib), or taken from FORESIGHT_RUNTIME=/path/to/lib.so.

Forked children and programs the command executes are recorded too (unless --no-follow), each \
into PATH.<pid> or PATH.<pid>.<n>. An existing PATH and its PATH.<pid>[.<n>] siblings are \
removed first (only if they are foresight traces or empty). After the run every trace is \
symbolised (function, file, line) so it can be analysed without the binaries.

Ctrl-C reaches the command (it is in the same process group); foresight waits for it, and the \
trace is completed as the command ends. SIGINT, SIGQUIT, SIGTERM and SIGHUP sent to foresight by \
another process are passed on to the command. If foresight is killed, the command is killed \
with it.

With --hang-timeout SECS, a run in which no process records an event for SECS seconds is \
stopped: each process completes its trace, with what every thread was doing (where it waits), \
and is killed.

Exit status: the command's (128+N if a signal N killed it) whenever it ran, whatever happened to \
the trace; 2 if foresight could not start it (runtime not found or not the runtime, command not \
found, bad arguments).")]
pub struct Args {
    /// Where to write the trace [default: foresight-<command name>.trace in the working
    /// directory].
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
    /// Frames recorded per call site, from the program's own: 1 records the return address of
    /// the call only, more record its callers too (slower). A call made inside locking
    /// machinery (the C and C++ libraries, `--wrapper`s) is recorded through it to the
    /// program's frame in any case. In code built with `foresight config` the callers of a
    /// memory access come from a shadow call stack the instrumentation keeps; elsewhere from
    /// unwinding.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(1..=32))]
    stack_depth: u8,
    /// Record only the command's own process: not its forked children, not the programs it
    /// executes.
    #[arg(long)]
    no_follow: bool,
    /// Leave the traces unsymbolised (addresses only; `foresight` needs the binaries later).
    #[arg(long)]
    no_symbolize: bool,
    /// Stop the run when no process of it records an event for SECS seconds (a hang, such as
    /// a deadlock): every process completes its trace, saying where each thread waits, and is
    /// killed (SIGKILL). Processes the runtime does not record count as idle.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u32).range(1..=86400))]
    hang_timeout: Option<u32>,
    /// Do not record heap allocations (malloc, free, new, delete): a program that allocates
    /// millions of blocks a second records faster and smaller without them. A program built
    /// with `foresight config` records them anyway (its memory accesses need them).
    #[arg(long)]
    no_allocations: bool,
    /// A function of the program's that wraps locking (glob; see `foresight analyze
    /// --wrapper`): calls made inside it are recorded with the callers up to the first frame
    /// outside every wrapper, so that the analysis can name them. Repeatable; the suppressions
    /// file's `wrappers = [...]` in the working directory adds more.
    #[arg(long = "wrapper", value_name = "GLOB")]
    wrappers: Vec<String>,
    /// Compress the trace's event chunks as they are written (LZ4): `auto` compresses, and
    /// writes plain for a while after chunks that shrank less than 4x (a workload that does
    /// not compress costs little); `always` compresses every chunk; `never` writes an
    /// uncompressed trace (format 1.x, which older foresight releases read).
    #[arg(long, value_name = "WHEN", default_value = "auto",
          value_parser = ["auto", "always", "never"])]
    compress: String,
    /// The command to record and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = find_runtime()?;
    let program = &args.command[0];
    let shown = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(default_output_name(program)));
    let output = absolute(&shown)?;
    let stale_kept = prepare_output(&output)?;

    let mut cmd = Command::new(program);
    cmd.args(&args.command[1..])
        // Absolute, because processes of the run may change directory before they open it.
        .env("FORESIGHT_OUTPUT", &output)
        .env("FORESIGHT_STACK_DEPTH", args.stack_depth.to_string())
        .env("FORESIGHT_COMPRESS", &args.compress)
        .env("LD_PRELOAD", ld_preload(&runtime)?);
    // A value inherited from the caller's environment must not change what was asked for.
    if args.no_follow {
        cmd.env("FORESIGHT_NO_FOLLOW", "1");
    } else {
        cmd.env_remove("FORESIGHT_NO_FOLLOW");
    }
    if args.no_allocations {
        cmd.env("FORESIGHT_ALLOCATIONS", "0");
    } else {
        cmd.env_remove("FORESIGHT_ALLOCATIONS");
    }
    let config = crate::suppressions::Suppressions::discover(None)?;
    let mut wrappers = crate::sites::Wrappers::new(args.wrappers.iter().cloned());
    if let Some(c) = &config {
        wrappers.extend(&c.wrappers);
    }
    if wrappers.patterns().is_empty() {
        cmd.env_remove("FORESIGHT_WRAPPERS");
    } else {
        // One pattern a line: C++ names hold commas and spaces, never a newline.
        cmd.env("FORESIGHT_WRAPPERS", wrappers.patterns().join("\n"));
    }

    let hang = args.hang_timeout.map(|secs| HangWatch::new(&output, secs));
    if let Some(h) = &hang {
        h.prepare()?;
        cmd.env("FORESIGHT_STOP_FILE", &h.stop_file).env(
            "FORESIGHT_HANG_TIMEOUT_MS",
            (u64::from(h.secs) * 1000).to_string(),
        );
    } else {
        cmd.env_remove("FORESIGHT_STOP_FILE")
            .env_remove("FORESIGHT_HANG_TIMEOUT_MS");
    }

    let (child_pid, status) = run_and_wait(cmd, program, hang.as_ref())?;
    // Symbolising appends to the traces: past a file size limit (`ulimit -f`) the write must
    // fail with EFBIG (a warning) instead of killing foresight with SIGXFSZ. Only now: the
    // command, already gone, must not have inherited an ignored SIGXFSZ.
    // SAFETY: setting a signal's disposition to SIG_IGN has no memory-safety preconditions.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    if let Some(h) = &hang {
        h.clean_up();
    }
    let code = exit_code(status);

    let traces = traces_of_run(&output, &stale_kept);
    if traces.is_empty() {
        eprintln!(
            "foresight: warning: no trace was written to {}: the runtime {} did not record {} \
             (a statically linked or set-user-ID program ignores LD_PRELOAD, and so does one that \
             clears its environment)",
            shown.display(),
            runtime.display(),
            Path::new(program).display()
        );
        return Ok(ExitCode::from(code));
    }
    for (suffix, path) in &traces {
        let mut name = shown.clone().into_os_string();
        name.push(suffix);
        report_trace(Path::new(&name), path, child_pid, &args);
    }
    Ok(ExitCode::from(code))
}

/// `foresight-<basename>.trace`, with characters that are awkward in a file name replaced.
fn default_output_name(program: &OsStr) -> String {
    let base = Path::new(program)
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_else(|| "command".into());
    let clean: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("foresight-{clean}.trace")
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    Ok(cwd.join(p))
}

/// The runtime: `FORESIGHT_RUNTIME`, or next to this executable.
fn find_runtime() -> anyhow::Result<PathBuf> {
    if let Some(v) = std::env::var_os("FORESIGHT_RUNTIME").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(&v);
        if !p.is_file() {
            bail!(
                "FORESIGHT_RUNTIME={}: no such file; it must name the foresight runtime {RUNTIME_NAME}",
                p.display()
            );
        }
        // Absolute: LD_PRELOAD is resolved again by every process of the run, wherever it is.
        let p = p
            .canonicalize()
            .with_context(|| format!("FORESIGHT_RUNTIME={}", p.display()))?;
        check_runtime(&p).with_context(|| format!("FORESIGHT_RUNTIME={}", p.display()))?;
        return Ok(p);
    }
    let exe = std::env::current_exe().context("cannot locate the foresight executable")?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let mut candidates = vec![dir.join(RUNTIME_NAME)];
    if let Some(up) = dir.parent() {
        // target/debug/deps/… (tests) and an installed bin/ next to lib/.
        candidates.push(up.join(RUNTIME_NAME));
        candidates.push(up.join("lib/foresight").join(RUNTIME_NAME));
        candidates.push(up.join("lib").join(RUNTIME_NAME));
    }
    if let Some(found) = candidates.iter().find(|c| c.is_file()) {
        let found = found
            .canonicalize()
            .with_context(|| format!("{}", found.display()))?;
        check_runtime(&found).with_context(|| format!("{}", found.display()))?;
        return Ok(found);
    }
    let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    Err(anyhow!(
        "cannot find the foresight runtime {RUNTIME_NAME}; looked in: {}. Build it with \
         `cargo build -p foresight-recorder`, or set FORESIGHT_RUNTIME=/path/to/{RUNTIME_NAME}",
        looked.join(", ")
    ))
}

/// The library is the foresight runtime: a shared object that defines the runtime's table and
/// interposes `pthread_mutex_lock`. Anything else would let the command run unrecorded (or not
/// at all, when the loader cannot preload it).
fn check_runtime(path: &Path) -> anyhow::Result<()> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(path).context("cannot read it")?;
    let obj = object::File::parse(&*data)
        .map_err(|_| anyhow!("it is not a shared library ({RUNTIME_NAME} expected)"))?;
    let defines = |name: &str| {
        obj.dynamic_symbols()
            .any(|s| s.is_definition() && s.name() == Ok(name))
    };
    if obj.kind() != object::ObjectKind::Dynamic
        || !defines("__foresight_tsan_runtime_v1")
        || !defines("pthread_mutex_lock")
    {
        bail!("it is not the foresight runtime {RUNTIME_NAME}");
    }
    Ok(())
}

/// The runtime first, then whatever the caller preloads already.
fn ld_preload(runtime: &Path) -> anyhow::Result<OsString> {
    let bytes = runtime.as_os_str().as_encoded_bytes();
    if bytes
        .iter()
        .any(|b| matches!(b, b':' | b' ' | b'\t' | b'\n'))
    {
        bail!(
            "the runtime's path {} contains a space or a colon, which LD_PRELOAD cannot express; \
             move it, or point FORESIGHT_RUNTIME at a copy elsewhere",
            runtime.display()
        );
    }
    let mut v = runtime.as_os_str().to_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|e| !e.is_empty()) {
        v.push(":");
        v.push(existing);
    }
    Ok(v)
}

/// The suffix of a sibling trace's file name, `.<pid>` or `.<pid>.<n>`, if `name` is one.
fn sibling_suffix<'a>(base: &str, name: &'a str) -> Option<&'a str> {
    let suffix = name.strip_prefix(base)?;
    let rest = suffix.strip_prefix('.')?;
    let mut parts = rest.split('.');
    let pid = parts.next()?;
    let n = parts.next();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && n.is_none_or(digits) && parts.next().is_none()).then_some(suffix)
}

fn siblings(output: &Path) -> Vec<(String, PathBuf)> {
    let (Some(dir), Some(base)) = (output.parent(), output.file_name()) else {
        return Vec::new();
    };
    let base = base.to_string_lossy();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let suffix = sibling_suffix(&base, &name)?.to_string();
            Some((suffix, e.path()))
        })
        .collect();
    // By pid, then by exec count, numerically.
    found.sort_by_key(|(s, _)| {
        s.split('.')
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<u64>().unwrap_or(u64::MAX))
            .collect::<Vec<_>>()
    });
    found
}

/// What a file at an output path holds.
enum Existing {
    Absent,
    /// A foresight trace, or an empty file (a process that died before writing its header).
    Ours,
    Other(&'static str),
}

fn existing(p: &Path) -> Existing {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return Existing::Absent;
    };
    if !meta.is_file() {
        return Existing::Other("it is not a regular file");
    }
    let mut magic = [0u8; FILE_MAGIC.len()];
    let n = std::fs::File::open(p)
        .and_then(|f| f.take(magic.len() as u64).read(&mut magic))
        .unwrap_or(0);
    if meta.len() == 0 || (n == magic.len() && magic == FILE_MAGIC) {
        Existing::Ours
    } else {
        Existing::Other("it is not a foresight trace")
    }
}

/// Removes the previous run's traces so that the root process gets exactly `output`. Returns
/// the sibling-like files that were kept because they are not traces (they are not part of the
/// new run).
fn prepare_output(output: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let dir = output.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        bail!(
            "cannot write {}: the directory {} does not exist",
            output.display(),
            dir.display()
        );
    }
    match existing(output) {
        Existing::Absent => {}
        Existing::Ours => std::fs::remove_file(output)
            .with_context(|| format!("cannot remove the previous trace {}", output.display()))?,
        Existing::Other(why) => bail!(
            "{} exists and {why}; not overwriting it (choose another path with -o)",
            output.display()
        ),
    }
    let mut kept = Vec::new();
    for (_, p) in siblings(output) {
        match existing(&p) {
            Existing::Ours => std::fs::remove_file(&p)
                .with_context(|| format!("cannot remove the previous trace {}", p.display()))?,
            Existing::Absent => {}
            Existing::Other(_) => kept.push(p),
        }
    }
    Ok(kept)
}

/// `--hang-timeout`: the run is stopped when no trace of it grows for `secs` seconds. The
/// runtime writes a thread's events at the latest a second after it recorded them
/// (`recorder/src/flusher.rs`), so a trace that does not grow is a process that records
/// nothing. Stopping: the stop file appears, each process's runtime sees it, completes its
/// trace and ends the process.
struct HangWatch {
    secs: u32,
    stop_file: PathBuf,
    output: PathBuf,
}

impl HangWatch {
    fn new(output: &Path, secs: u32) -> Self {
        let mut name = std::ffi::OsString::from(".");
        name.push(output.file_name().unwrap_or(OsStr::new("trace")));
        name.push(".foresight-stop");
        Self {
            secs,
            stop_file: output.with_file_name(name),
            output: output.to_path_buf(),
        }
    }

    fn prepare(&self) -> anyhow::Result<()> {
        match std::fs::remove_file(&self.stop_file) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(anyhow!("cannot remove {}: {e}", self.stop_file.display())),
        }
    }

    /// The sizes of the run's traces, to compare between looks.
    fn sizes(&self) -> Vec<(PathBuf, u64)> {
        let mut paths = vec![self.output.clone()];
        paths.extend(siblings(&self.output).into_iter().map(|(_, p)| p));
        paths
            .into_iter()
            .filter_map(|p| std::fs::metadata(&p).ok().map(|m| (p, m.len())))
            .collect()
    }

    fn stop(&self) {
        if let Err(e) = std::fs::write(&self.stop_file, b"") {
            eprintln!(
                "foresight: warning: cannot create {}: {e}",
                self.stop_file.display()
            );
        }
    }

    fn clean_up(&self) {
        let _ = std::fs::remove_file(&self.stop_file);
    }
}

/// How long a stopped run may take to end before its command is killed.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Starts the command and waits for it, passing termination requests on. `record` must not
/// die before the command: the traces are symbolised after it ends; and the command must not
/// outlive `record` (it is killed with it).
/// Returns the command's pid (reaped now) and its exit status.
fn run_and_wait(
    mut cmd: Command,
    program: &OsStr,
    hang: Option<&HangWatch>,
) -> anyhow::Result<(u32, ExitStatus)> {
    use signal_hook::iterator::exfiltrator::WithOrigin;
    use signal_hook::low_level::siginfo::Cause;
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    let shown = Path::new(program).display().to_string();
    // Registered before the command starts, so that its SIGCHLD cannot be missed. These are
    // handlers, not SIG_IGN: an ignored disposition would be inherited across exec, and the
    // command would ignore Ctrl-C too.
    let mut signals = signal_hook::iterator::SignalsInfo::<WithOrigin>::new([
        SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD,
    ])
    .context("cannot install signal handlers")?;
    // Once the command has ended, the termination signals act as usual again (they end the
    // symbolisation).
    let done = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] {
        signal_hook::flag::register_conditional_default(sig, Arc::clone(&done))
            .context("cannot install signal handlers")?;
    }
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only makes two system calls
    // (async-signal-safe): the command gets SIGKILL when `record` dies, and, if `record` died
    // before this, exits at once.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() as u32 != parent {
                libc::_exit(128 + libc::SIGKILL);
            }
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            done.store(true, Ordering::SeqCst);
            return Err(anyhow!("cannot run {shown}: {e}"));
        }
    };
    let mut sizes = hang.map(|h| h.sizes()).unwrap_or_default();
    let mut last_growth = Instant::now();
    let mut stopped_at: Option<Instant> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                done.store(true, Ordering::SeqCst);
                return Err(anyhow!("cannot wait for {shown}: {e}"));
            }
        }
        let arrived: Vec<_> = match hang {
            // Without a hang watch nothing is to be done between signals.
            None => signals.wait().collect(),
            Some(_) => {
                let now: Vec<_> = signals.pending().collect();
                if now.is_empty() {
                    std::thread::sleep(Duration::from_millis(100));
                }
                now
            }
        };
        for origin in arrived {
            match (origin.signal, origin.cause) {
                (SIGCHLD, _) => {}
                // The terminal sent these to the whole foreground process group, the command
                // included; sending them again would count twice (many servers treat a second
                // Ctrl-C as "quit now, without cleaning up").
                // (A hangup of the terminal reaches the foreground group the same way.)
                (_, Cause::Kernel) => {}
                // Sent to `record` by a process (`kill`, a supervisor, a closing terminal):
                // pass them on, so that the command ends and its trace is completed.
                (sig, _) => forward(child.id(), sig),
            }
        }
        if let Some(h) = hang {
            match stopped_at {
                None => {
                    let now = h.sizes();
                    if now != sizes {
                        sizes = now;
                        last_growth = Instant::now();
                    } else if last_growth.elapsed() >= Duration::from_secs(h.secs.into()) {
                        eprintln!(
                            "foresight: no process of the run recorded an event for {} s: \
                             stopping {shown} (its trace says where each thread waits)",
                            h.secs
                        );
                        h.stop();
                        stopped_at = Some(Instant::now());
                    }
                }
                Some(at) if at.elapsed() > STOP_GRACE => {
                    eprintln!(
                        "foresight: {shown} did not stop within {} s: killing it",
                        STOP_GRACE.as_secs()
                    );
                    forward(child.id(), libc::SIGKILL);
                    stopped_at = Some(Instant::now() + STOP_GRACE * 100);
                }
                Some(_) => {}
            }
        }
    };
    done.store(true, Ordering::SeqCst);
    signals.handle().close();
    Ok((child.id(), status))
}

fn forward(pid: u32, sig: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions. The pid is our child's, which has not
    // been reaped yet (only this thread waits for it), so it cannot name another process.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The command's exit status as ours: its code, or 128 + the signal that killed it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        (None, None) => 1,
    }
}

/// `output` and its siblings written by this run: (suffix, path), the root first.
fn traces_of_run(output: &Path, stale_kept: &[PathBuf]) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    if output.is_file() {
        out.push((String::new(), output.to_path_buf()));
    }
    out.extend(
        siblings(output)
            .into_iter()
            .filter(|(_, p)| !stale_kept.contains(p)),
    );
    out
}

/// True when the process that wrote a trace without a trailer is still running (a child that
/// outlived the command): its file is still being written and must not be touched.
fn still_running(pid: u32, reaped: u32) -> bool {
    // The command itself (and the images it executed) ended: its pid may already be reused.
    if pid == reaped || pid == std::process::id() || pid == 0 {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) S …`: the state follows the last parenthesis (comm may contain spaces).
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
}

/// Symbolises one trace and prints its summary line.
fn report_trace(shown: &Path, path: &Path, reaped: u32, args: &Args) {
    let warn = |what: &dyn std::fmt::Display| {
        eprintln!("foresight: warning: {}: {what}", shown.display());
    };
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if len == 0 {
        warn(&"empty: the process ended before the runtime wrote anything");
        return;
    }
    // The reader's map is dropped before the file is symbolised (appended to).
    let running = match TraceFile::open(path) {
        Ok(f) => f.trailer().is_none() && still_running(f.header().pid, reaped),
        Err(e) => {
            eprintln!("foresight: warning: {e}");
            return;
        }
    };
    if running {
        warn(&"its process is still running; not symbolised (run `foresight record` again once it ended, or symbolise later)");
    } else if !args.no_symbolize {
        match symbolize_in_place(path, &SymbolizeOptions::default()) {
            Ok(s) => {
                for w in s.warnings() {
                    warn(&w);
                }
            }
            Err(e) => warn(&format_args!("not symbolised: {e}")),
        }
    }
    match Trace::open(path) {
        Ok(t) => {
            let threads = t.threads.len().max(t.tables.threads.len());
            let cut = if t.trailer.is_none() {
                ", cut short"
            } else {
                ""
            };
            eprintln!(
                "foresight: trace written to {} ({}, {} events, {} thread{}{cut})",
                shown.display(),
                human_size(std::fs::metadata(path).map(|m| m.len()).unwrap_or(len)),
                t.event_count(),
                threads,
                if threads == 1 { "" } else { "s" },
            );
            if let Some(stop) = t.tables.recording_stopped {
                warn(&stop_cause(stop.cause));
            }
            for line in waiting_threads(&t) {
                eprintln!("  {line}");
            }
        }
        Err(e) => eprintln!("foresight: warning: {e}"),
    }
}

/// What a recording-stopped record says, for the user.
fn stop_cause(cause: StopCause) -> String {
    match cause {
        StopCause::WriteFailed { errno } => format!(
            "recording stopped early, the program ran on: writing the trace failed ({}); the \
             trace holds what was written before",
            std::io::Error::from_raw_os_error(errno)
        ),
        StopCause::FileSizeLimit { limit } => format!(
            "recording stopped early, the program ran on: the trace reached the file size limit \
             ({limit} bytes, `ulimit -f`); it holds what was written before"
        ),
        StopCause::HangTimeout { ms } => format!(
            "the run was stopped after {} s without an event; where each thread was:",
            ms / 1000
        ),
    }
}

/// One line per thread that had not exited when the trace ended: what it waited in, where.
fn waiting_threads(t: &Trace) -> Vec<String> {
    let mut lines = Vec::new();
    for (&thread, state) in &t.tables.thread_ends {
        let name = t
            .tables
            .thread_name(thread)
            .map_or(format!("T{thread}"), |n| format!("T{thread} {n}"));
        let how = match state {
            ThreadEndState::Running => {
                lines.push(format!("{name}: running (not in a recorded wait)"));
                continue;
            }
            ThreadEndState::Blocked => "blocked",
            ThreadEndState::BlockedWithTimeout => "blocked (with a timeout)",
        };
        let last = t
            .thread(thread)
            .and_then(|e| e.events.iter().rev().find(|e| e.kind.site().is_some()));
        let what = match last {
            Some(e) => {
                let object = e
                    .kind
                    .object()
                    .map(|o| format!(" {}", t.tables.describe_object(o)))
                    .unwrap_or_default();
                let site = e
                    .kind
                    .site()
                    .map(|s| format!(" at {}", t.tables.describe_site(s)))
                    .unwrap_or_default();
                format!(" in {}{object}{site}", e.kind.name())
            }
            None => String::new(),
        };
        lines.push(format!("{name}: {how}{what}"));
    }
    lines
}

fn human_size(n: u64) -> String {
    const K: f64 = 1024.0;
    let f = n as f64;
    if n < 1024 {
        format!("{n} bytes")
    } else if f < K * K {
        format!("{:.1} KiB", f / K)
    } else if f < K * K * K {
        format!("{:.1} MiB", f / (K * K))
    } else {
        format!("{:.1} GiB", f / (K * K * K))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sibling_names() {
        assert_eq!(sibling_suffix("a.trace", "a.trace.123"), Some(".123"));
        assert_eq!(sibling_suffix("a.trace", "a.trace.123.4"), Some(".123.4"));
        for not in [
            "a.trace",
            "a.trace.",
            "a.trace.x",
            "a.trace.1.2.3",
            "a.trace.1.",
            "b.trace.1",
        ] {
            assert_eq!(sibling_suffix("a.trace", not), None, "{not}");
        }
    }

    #[test]
    fn default_names() {
        assert_eq!(
            default_output_name(OsStr::new("/usr/bin/true")),
            "foresight-true.trace"
        );
        assert_eq!(
            default_output_name(OsStr::new("./my server")),
            "foresight-my_server.trace"
        );
    }

    #[test]
    fn a_live_process_is_running_and_a_dead_or_zombie_one_is_not() {
        let mut sleeper = Command::new("sleep").arg("5").spawn().unwrap();
        assert!(still_running(sleeper.id(), 0));
        assert!(
            !still_running(sleeper.id(), sleeper.id()),
            "the reaped command"
        );
        sleeper.kill().unwrap();
        // Killed but not reaped yet: a zombie, whose trace nobody writes any more.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!still_running(sleeper.id(), 0));
        sleeper.wait().unwrap();
    }

    #[test]
    fn sizes() {
        assert_eq!(human_size(10), "10 bytes");
        assert_eq!(human_size(2048), "2.0 KiB");
        assert_eq!(human_size(3 << 20), "3.0 MiB");
    }
}
