//! Ctrl-C, SIGTERM and SIGHUP: the first stops new work and lets in-flight
//! calls finish and be recorded (before any change starts, commands stop at
//! once); the second exits at once with 130, releasing the state lock (the
//! state already records in-flight creates as `creating` with their tokens).

use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// The exit status after an interrupt (128 + SIGINT, the shell convention).
pub const EXIT_INTERRUPTED: i32 = 130;

/// What the first interrupt of a command that changes infrastructure says.
pub const STOPPING_CHANGES: &str =
    "Interrupt received: stopping. Nothing new will start; calls in \
    flight finish and are recorded. Interrupt again to exit at once (the state already records \
    in-flight creates and deletes).";

/// Returns a token cancelled by the first SIGINT, SIGTERM or SIGHUP, and
/// installs the second-signal exit. `first` is printed on the first signal:
/// what the command does when it stops (e.g. [`STOPPING_CHANGES`]). Call it
/// before taking the state lock, so no signal can leave the lock behind.
/// Must be called inside a tokio runtime.
///
/// # Panics
/// If the signal handlers cannot be installed (no tokio signal driver).
pub fn cancel_on_signals(first: &'static str) -> CancellationToken {
    let token = CancellationToken::new();
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler installs");
    let t = token.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = hup.recv() => {}
        }
        say(&format!("\n{first}"));
        t.cancel();
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = hup.recv() => {}
        }
        say("Second interrupt: exiting now.");
        crate::state::lock::release_held();
        std::process::exit(EXIT_INTERRUPTED);
    });
    token
}

/// Writes `line` to stderr, ignoring a failed write: a panic here (stderr a
/// closed pipe, or the terminal gone after SIGHUP) would end the task that
/// cancels the token and exits on the second signal.
fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
