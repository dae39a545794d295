//! The `kfaws` command line: parse, call the library, print.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    // Terraform spells its long flags with one dash (`-destroy`, `-out FILE`).
    cli::main(cli::terraform_spelling(std::env::args_os()))
}
