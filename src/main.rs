//! The `kfaws` command line: parse, call the library, print.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    // Terraform spells the plan file flag `-out FILE` / `-out=FILE`; clap
    // reads a single dash as short flags, so accept that spelling here.
    let args = std::env::args_os().map(|a| match a.to_str() {
        Some("-out") => "--out".into(),
        Some(s) if s.starts_with("-out=") => format!("-{s}").into(),
        _ => a,
    });
    cli::main(args)
}
