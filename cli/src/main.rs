//! The `foresight` command-line tool.

use std::process::ExitCode;

/// Notes the signals `foresight` was started with ignored, before the Rust runtime sets
/// SIGPIPE to ignored (`record` gives its command the dispositions it inherited).
extern "C" fn note_inherited_signals() {
    foresight_cli::note_inherited_signals();
}

#[used]
#[link_section = ".init_array"]
static NOTE_INHERITED_SIGNALS: extern "C" fn() = note_inherited_signals;

fn main() -> ExitCode {
    foresight_cli::main()
}
