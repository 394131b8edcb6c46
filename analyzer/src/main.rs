//! The `foresight` command-line tool.

use std::process::ExitCode;

fn main() -> ExitCode {
    foresight_analyzer::cli::main()
}
