//! `foresight config --cflags --libs`: the flags that build a program whose memory accesses
//! foresight records. `-fsanitize=thread` makes the compiler call the ThreadSanitizer ABI on
//! every access; the flags link foresight's stub (`recorder/stub/tsan_stub.c`) to answer those
//! calls instead of ThreadSanitizer's runtime.
//!
//! The stub's C source is part of this binary. On first use it is compiled with the compiler
//! the flags are for, into a one-member `libtsan.a` in a private cache directory named by a
//! hash of the source and of the compiler's identity (its predefined macros, which include
//! its version and target), written under a temporary name and renamed into place, so that
//! parallel builds share it and a half-written archive is never used. Nothing has to be
//! installed next to `foresight`, and the archive always matches the compiler.
//!
//! How the archive gets linked (verified with gcc 12 and clang 14):
//! - gcc: `-fsanitize=thread` at link time adds `libtsan_preinit.o` and `-ltsan`, searched
//!   after the user's `-L` directories: `-L<cache dir>` makes that `-ltsan` our archive. The
//!   archive is also named explicitly with `-u __tsan_init`, which pulls its one member in
//!   wherever it sits on the command line (a shared library, a link step without
//!   `-fsanitize=thread`, CMake's linker flags before the objects). Archive semantics make
//!   the two references one copy.
//! - clang: `-fno-sanitize-link-runtime` keeps its own runtime out (gcc rejects that flag);
//!   the archive as above.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{anyhow, bail, Context};

use super::cache::{cache_root, create_private_dir, fnv1a};
use super::EXIT_BAD_INPUT;

/// The stub every instrumented program links.
const STUB_C: &str = include_str!("../../recorder/stub/tsan_stub.c");

#[derive(clap::Args)]
#[command(after_help = "\
Builds a program whose memory accesses `foresight record` records (with everything it records \
of any program). In a Makefile:

  cc  $(foresight config --cflags) prog.c  -o prog $(foresight config --libs)
  c++ $(foresight config --cflags) prog.cc -o prog $(foresight config --libs)

Separate compile and link steps take --cflags and --libs respectively. With CMake, give \
--cflags to CMAKE_C_FLAGS/CMAKE_CXX_FLAGS and --libs to CMAKE_EXE_LINKER_FLAGS and \
CMAKE_SHARED_LINKER_FLAGS.

The flags compile with -fsanitize=thread and link foresight's small stub instead of \
ThreadSanitizer's runtime: the program loads no sanitizer library and runs normally (same \
output, same exit status) when it is not recorded, on any machine, with or without foresight. \
Not recorded, each memory access is still a call that returns at once: the compiler's \
instrumentation, about 2x the plain program's CPU time on zstd and 4x on SQLite. Add -g for \
file and line numbers.

To record memory accesses with their callers (`foresight record --stack-depth N`), compile \
with `foresight config --callers --cflags`: every function then also calls foresight on entry \
and exit, to keep a shadow call stack (the program is slower, recorded or not). Without it \
`--stack-depth` unwinds the stack of each recorded access: the same callers, but recording is \
tens of times slower (60x on recorder/bench/access_overhead.c).

The compiler is --cc, else $CC, else cc; gcc and clang are told apart by asking the compiler \
itself. Verified with gcc 12 and clang 14 (Debian's `clang` package), C and C++. The stub is \
compiled for that compiler on first use into $FORESIGHT_CACHE_DIR (else \
$XDG_CACHE_HOME/foresight, else ~/.cache/foresight, else a private directory under the \
temporary directory).")]
pub struct Args {
    /// Print the flags for compiling (-fsanitize=thread and what goes with it).
    #[arg(long)]
    cflags: bool,
    /// Print the flags for linking (foresight's stub instead of ThreadSanitizer's runtime).
    #[arg(long)]
    libs: bool,
    /// The compiler the flags are for (a command, as in $CC: "ccache gcc" works).
    #[arg(long, value_name = "COMPILER")]
    cc: Option<String>,
    /// Keep the calls on every function's entry and exit that keep a shadow call stack, from
    /// which `foresight record --stack-depth N` (N > 1) takes a memory access's callers.
    /// Without them (the default) the program runs faster, recorded or not, and `--stack-depth`
    /// unwinds the stack of each recorded access instead: the same callers, but recording
    /// tens of times slower. Give it to record deep stacks.
    #[arg(long)]
    callers: bool,
}

/// What the compiler is, as far as the flags care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Gcc,
    Clang,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.cflags && !args.libs {
        say!("foresight config: nothing to print: give --cflags, --libs or both");
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    }
    let cc = compiler_command(args.cc.as_deref())?;
    let (family, identity) = identify(&cc)?;
    let dir = stub_dir(&cc, &identity)?;
    let flags = flags(family, &dir, args.cflags, args.libs, args.callers);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", flags.join(" ")).context("cannot write to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// The flags for compiling and for linking a program with `cc` (`$CC` or `cc` when `None`), as
/// `foresight config --cflags` and `--libs` print them (the stub built first if need be).
pub fn build_flags(cc: Option<&str>) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let cc = compiler_command(cc)?;
    let (family, identity) = identify(&cc)?;
    let dir = stub_dir(&cc, &identity)?;
    Ok((
        flags(family, &dir, true, false, false),
        flags(family, &dir, false, true, false),
    ))
}

/// `--cc`, `$CC` or `cc`, split into words as make and the shell would.
fn compiler_command(arg: Option<&str>) -> anyhow::Result<Vec<String>> {
    let text = match arg {
        Some(c) => c.to_string(),
        None => std::env::var("CC")
            .ok()
            .filter(|c| !c.trim().is_empty())
            .unwrap_or_else(|| "cc".to_string()),
    };
    let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    if words.is_empty() {
        bail!("the compiler command is empty");
    }
    Ok(words)
}

fn command(cc: &[String]) -> Command {
    let mut c = Command::new(&cc[0]);
    c.args(&cc[1..]);
    c
}

/// The compiler's family and its predefined macros (which name its version and target).
fn identify(cc: &[String]) -> anyhow::Result<(Family, String)> {
    let shown = cc.join(" ");
    let out = command(cc)
        .args(["-dM", "-E", "-x", "c", "/dev/null"])
        .output()
        .map_err(|e| anyhow!("cannot run the compiler `{shown}`: {e}"))?;
    if !out.status.success() {
        bail!(
            "the compiler `{shown}` failed to list its predefined macros:\n{}",
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    let macros = String::from_utf8_lossy(&out.stdout).into_owned();
    Ok((family_of(&macros, &shown)?, macros))
}

fn family_of(macros: &str, shown: &str) -> anyhow::Result<Family> {
    let defines = |name: &str| {
        macros
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(name))
    };
    if defines("__clang__") {
        Ok(Family::Clang)
    } else if defines("__GNUC__") && !defines("__INTEL_COMPILER") {
        Ok(Family::Gcc)
    } else {
        bail!(
            "`{shown}` is neither gcc nor clang; foresight's flags are for those two \
             (-fsanitize=thread is theirs)"
        )
    }
}

fn flags(family: Family, dir: &Path, cflags: bool, libs: bool, callers: bool) -> Vec<String> {
    let dir = dir.display().to_string();
    let archive = format!("{dir}/libtsan.a");
    let mut out = Vec::new();
    if cflags {
        out.push("-fsanitize=thread".to_string());
        match family {
            // gcc's own `-ltsan` (added for -fsanitize=thread when it links) must find the
            // stub, whichever step links.
            Family::Gcc => out.push(format!("-L{dir}")),
            Family::Clang => out.push("-fno-sanitize-link-runtime".to_string()),
        }
        // Only the shadow call stack needs the calls on every function's entry and exit, and
        // they cost every call the program makes, recorded or not (5% of SQLite's
        // instructions, docs/perf/real_programs.md); `record --stack-depth` above 1 unwinds
        // each recorded access without it.
        if !callers {
            match family {
                Family::Gcc => out.push("--param=tsan-instrument-func-entry-exit=0".to_string()),
                // A driver flag, not `-mllvm`: a link step given --cflags takes it without
                // warning that it is unused.
                Family::Clang => out.push("-fno-sanitize-thread-func-entry-exit".to_string()),
            }
        }
    }
    if libs {
        match family {
            Family::Gcc => {
                if !cflags {
                    out.push(format!("-L{dir}"));
                }
            }
            Family::Clang => {
                if !cflags {
                    out.push("-fno-sanitize-link-runtime".to_string());
                }
            }
        }
        out.push("-Wl,-u,__tsan_init".to_string());
        out.push(archive);
    }
    out
}

/// The directory holding the stub's `libtsan.a` for this compiler, built if missing.
fn stub_dir(cc: &[String], identity: &str) -> anyhow::Result<PathBuf> {
    let root = cache_root()?;
    let cmd = cc.join(" ");
    let key = fnv1a(&[
        STUB_C.as_bytes(),
        cmd.as_bytes(),
        identity.as_bytes(),
        COMPILE_FLAGS.join(" ").as_bytes(),
    ]);
    let dir = root.join(format!("tsan-stub-{key:016x}"));
    if dir.to_str().is_none_or(|s| s.contains(char::is_whitespace)) {
        bail!(
            "the cache directory {} contains a space (or is not UTF-8), which compiler flags \
             cannot carry; set FORESIGHT_CACHE_DIR to another directory",
            dir.display()
        );
    }
    // The archive is linked into programs: reused only from a directory of the user's that
    // no one else can write, as a regular file of the user's that no one else can write.
    // Anything else by that name is refused (the user removes it; foresight builds anew).
    match std::fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => bail!("cannot look at {}: {e}", dir.display()),
        Ok(meta) => {
            let archive = dir.join("libtsan.a");
            let why = if !meta.is_dir() {
                Some(format!("it is {}", super::safe_fs::kind_name(&meta)))
            } else if let Some(why) = super::safe_fs::not_private(&meta) {
                Some(why)
            } else {
                match std::fs::symlink_metadata(&archive) {
                    Ok(m) => super::safe_fs::untrusted_file(&m, &[])
                        .or_else(|| super::safe_fs::not_private(&m))
                        .map(|why| format!("{}: {why}", archive.display())),
                    Err(_) => Some(format!("{} is missing", archive.display())),
                }
            };
            match why {
                None => return Ok(dir),
                Some(why) => bail!(
                    "the cached stub {} is not foresight's to use: {why}; remove it (foresight \
                     builds it anew) or set FORESIGHT_CACHE_DIR to a directory of your own",
                    dir.display()
                ),
            }
        }
    }
    let tmp = root.join(format!("tsan-stub-{key:016x}.tmp.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    create_private_dir(&tmp)?;
    let built = build_stub(cc, &tmp);
    if let Err(e) = built {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    // Another build may have won the race: its archive is as good as ours.
    if std::fs::rename(&tmp, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
        if !dir.join("libtsan.a").is_file() {
            bail!("cannot move the stub into {}", dir.display());
        }
    }
    Ok(dir)
}

/// Never instrumented (a `$CC` may carry -fsanitize or -flto), position-independent (PIE
/// executables and shared libraries), with debug information for debuggers.
const COMPILE_FLAGS: &[&str] = &[
    "-O2",
    "-g",
    "-fPIC",
    "-fno-sanitize=all",
    "-fno-lto",
    "-w",
    "-c",
    // C, whatever the driver (g++ and clang++ take a .c file for C++).
    "-x",
    "c",
];

fn build_stub(cc: &[String], dir: &Path) -> anyhow::Result<()> {
    let source = dir.join("foresight_tsan_stub.c");
    let object = dir.join("foresight_tsan_stub.o");
    std::fs::write(&source, STUB_C)
        .with_context(|| format!("cannot write {}", source.display()))?;
    let out = command(cc)
        .args(COMPILE_FLAGS)
        .arg(&source)
        .arg("-o")
        .arg(&object)
        .output()
        .map_err(|e| anyhow!("cannot run the compiler `{}`: {e}", cc.join(" ")))?;
    if !out.status.success() {
        bail!(
            "compiling foresight's stub with `{}` failed:\n{}",
            cc.join(" "),
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    let ar = std::env::var_os("AR")
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| OsString::from("ar"));
    let out = Command::new(&ar)
        .arg("rcs")
        .arg(dir.join("libtsan.a"))
        .arg(&object)
        .output()
        .map_err(|e| {
            anyhow!(
                "cannot run `{}` to archive the stub: {e}",
                ar.to_string_lossy()
            )
        })?;
    if !out.status.success() {
        bail!(
            "archiving foresight's stub with `{}` failed:\n{}",
            ar.to_string_lossy(),
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_told_apart_by_their_macros() {
        let gcc = "#define __GNUC__ 12\n#define __VERSION__ \"12.2.0\"\n";
        let clang = "#define __GNUC__ 4\n#define __clang__ 1\n#define __clang_major__ 14\n";
        assert_eq!(family_of(gcc, "gcc").unwrap(), Family::Gcc);
        assert_eq!(family_of(clang, "clang").unwrap(), Family::Clang);
        assert!(family_of("#define __TINYC__ 1\n", "tcc").is_err());
    }

    #[test]
    fn flags_per_family() {
        let d = Path::new("/c/tsan-stub-1");
        assert_eq!(
            flags(Family::Gcc, d, true, true, false).join(" "),
            "-fsanitize=thread -L/c/tsan-stub-1 --param=tsan-instrument-func-entry-exit=0 \
             -Wl,-u,__tsan_init /c/tsan-stub-1/libtsan.a"
        );
        assert_eq!(
            flags(Family::Gcc, d, false, true, false).join(" "),
            "-L/c/tsan-stub-1 -Wl,-u,__tsan_init /c/tsan-stub-1/libtsan.a"
        );
        assert_eq!(
            flags(Family::Clang, d, true, false, false).join(" "),
            "-fsanitize=thread -fno-sanitize-link-runtime -fno-sanitize-thread-func-entry-exit"
        );
        assert_eq!(
            flags(Family::Clang, d, false, true, false).join(" "),
            "-fno-sanitize-link-runtime -Wl,-u,__tsan_init /c/tsan-stub-1/libtsan.a"
        );
    }

    #[test]
    fn callers_keep_the_function_entry_and_exit_calls() {
        let d = Path::new("/c/tsan-stub-1");
        assert_eq!(
            flags(Family::Gcc, d, true, false, true).join(" "),
            "-fsanitize=thread -L/c/tsan-stub-1"
        );
        assert_eq!(
            flags(Family::Clang, d, true, false, true).join(" "),
            "-fsanitize=thread -fno-sanitize-link-runtime"
        );
        // Linking is the same either way.
        assert_eq!(
            flags(Family::Gcc, d, false, true, true),
            flags(Family::Gcc, d, false, true, false)
        );
    }

    #[test]
    fn the_cache_key_depends_on_every_part() {
        let a = fnv1a(&[b"ab", b"c"]);
        assert_ne!(a, fnv1a(&[b"a", b"bc"]));
        assert_ne!(a, fnv1a(&[b"ab", b"d"]));
        assert_eq!(a, fnv1a(&[b"ab", b"c"]));
    }
}
