//! What a new trace file starts with and where it goes: shared by the start-up of a process
//! (and of a forked child) and by the stub trace of a child started with `vfork` or
//! `posix_spawn`, which must not reach back into the start-up code that installs the hooks.

use foresight_trace::tables::{Header, Ordering as KeyOrdering};

use crate::config::Config;
use crate::state;

pub const PRODUCER: &str = concat!("foresight-recorder ", env!("CARGO_PKG_VERSION"));

fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn header(cfg: &Config, pid: u32, parent_pid: u32) -> Header {
    Header {
        producer: PRODUCER.to_string(),
        pid,
        parent_pid,
        command: command_line(),
        start_unix_ns: state::now_ns(),
        ordering: if cfg.global_sequence {
            KeyOrdering::GlobalSequence
        } else {
            KeyOrdering::Logical
        },
        pointer_width: std::mem::size_of::<usize>() as u8,
        stack_depth: cfg.stack_depth as u8,
    }
}

pub(crate) fn trace_path(cfg: &Config, pid: u32) -> Vec<u8> {
    cfg.output
        .clone()
        .unwrap_or_else(|| format!("foresight-{pid}.trace").into_bytes())
}
