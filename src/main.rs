//! The `kfaws` command line: parse, call the library, print.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main(std::env::args_os())
}
