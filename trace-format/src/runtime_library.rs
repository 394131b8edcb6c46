//! The C and C++ runtime libraries (and foresight's own runtime), known by file name: nothing
//! in them is the recorded program's code. The recorder looks through them for a lock call's
//! caller, the analyzer skips their frames when it names a site, and the symboliser reads no
//! line information for them (their frames are never a report's site, and a C library's
//! separate debug file costs more to read than the rest of a small program's symbolisation).

/// File-name prefixes of the runtime libraries.
const PREFIXES: &[&str] = &[
    "libc.so",
    "libc-",
    "libpthread.so",
    "libpthread-",
    "libstdc++.so",
    "libc++.so",
    "libc++abi.so",
    "libgcc_s.so",
    "ld-linux",
    "ld64.so",
    "libforesight_rt",
];

/// Whether the module at `path` (a path or a bare file name) is a runtime library.
pub fn is_runtime_library(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    PREFIXES.iter().any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::is_runtime_library;

    #[test]
    fn the_c_and_cxx_runtimes_are_known_by_file_name() {
        assert!(is_runtime_library("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_runtime_library("/lib/x86_64-linux-gnu/libstdc++.so.6"));
        assert!(is_runtime_library("/lib64/ld-linux-x86-64.so.2"));
        assert!(is_runtime_library("/opt/foresight/libforesight_rt.so"));
        assert!(is_runtime_library("libc-2.31.so"));
        assert!(!is_runtime_library("/usr/lib/libsqlite3.so.0"));
        assert!(!is_runtime_library("/home/u/libcrypto.so"));
        assert!(!is_runtime_library("/home/u/libc/server"));
    }
}
