//! `tfshard convert`.

use clap::Subcommand;

use super::CliResult;

/// `convert` subcommands.
#[derive(Subcommand, Debug)]
pub enum ConvertCommand {}

impl ConvertCommand {
    /// Runs the conversion.
    pub fn run(self) -> CliResult {
        match self {}
    }
}
