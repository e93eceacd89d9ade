//! The `tfshard` binary: parses the command line, runs one command, maps the outcome to
//! an exit code. The only place that exits.

use tfshard::cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(cli::main(std::env::args_os().skip(1)))
}

/// glibc, or mimalloc for `bench` (see [`tfshard::alloc::Allocator`]). With the `python`
/// feature the library declares it, for the module.
#[cfg(not(feature = "python"))]
#[global_allocator]
static GLOBAL: tfshard::alloc::Allocator = tfshard::alloc::Allocator;
