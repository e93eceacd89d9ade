//! The `tfshard` binary: parses the command line, runs one command, maps the outcome to
//! an exit code. The only place that exits.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => ExitCode::from(err.report()),
    }
}
