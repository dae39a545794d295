//! Ctrl-C, SIGTERM and SIGHUP: the first stops new work and lets in-flight
//! calls finish and be recorded (before any change starts, commands stop at
//! once); the second exits at once, releasing the state lock (the state
//! already records in-flight creates as `creating` with their tokens).
//! Either way the exit status is 128 + the first signal's number, the shell
//! convention (POSIX `sh`, "Exit Status"): 130 for SIGINT, 143 for SIGTERM,
//! 129 for SIGHUP.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::LazyLock;

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// The first signal received (SIGINT until one is).
static FIRST: AtomicI32 = AtomicI32::new(Signal::SIGINT as i32);

/// Cancelled by the first signal of any command ([`cancel_on_signals`]).
static STOPPING: LazyLock<CancellationToken> = LazyLock::new(CancellationToken::new);

/// A token cancelled once the first SIGINT, SIGTERM or SIGHUP is received:
/// for waits inside a call that would otherwise outlast the interrupt by
/// minutes (an EKS cluster takes 10–15 to become ACTIVE; a Kubernetes object
/// that never becomes ready waits out its deadline), so that they stop with
/// it ([`crate::resource::unless_interrupted`]). Only waits after a request
/// whose idempotency token is recorded stop: the next apply re-attaches.
/// Never cancelled without a signal.
pub fn stopping() -> CancellationToken {
    STOPPING.clone()
}

/// The exit status of a command stopped by a signal: 128 + the number of
/// the first SIGINT, SIGTERM or SIGHUP received (130 if none was: a command
/// that stops on its own for an interrupt stops as Ctrl-C would).
pub fn exit_status() -> u8 {
    // Signal numbers are below 32 on every platform nix supports.
    u8::try_from(128 + FIRST.load(Ordering::Relaxed)).unwrap_or(130)
}

/// What the first interrupt of a command that changes infrastructure says.
pub const STOPPING_CHANGES: &str = "stopping. Nothing new will start; calls in \
    flight finish and are recorded, and waits for what they started (a cluster, node group or \
    stack to be ready or gone, Kubernetes objects to be ready or gone) stop: the next apply or \
    destroy waits for them again. Interrupt again to exit at once (the state already records \
    in-flight creates and deletes).";

/// Returns a token cancelled by the first SIGINT, SIGTERM or SIGHUP, and
/// installs the second-signal exit. `first` is printed on the first signal,
/// after `<signal> received: `: what the command does when it stops (e.g.
/// [`STOPPING_CHANGES`]). Call it
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
        let got = tokio::select! {
            _ = int.recv() => Signal::SIGINT,
            _ = term.recv() => Signal::SIGTERM,
            _ = hup.recv() => Signal::SIGHUP,
        };
        FIRST.store(got as i32, Ordering::Relaxed);
        // Ctrl-C is an interrupt to its user; the other two are named, as a
        // user who never pressed a key needs to know what stopped the run.
        let what = match got {
            Signal::SIGTERM => "SIGTERM",
            Signal::SIGHUP => "SIGHUP (the terminal closed)",
            _ => "Interrupt",
        };
        say(&format!("\n{what} received: {first}"));
        t.cancel();
        STOPPING.cancel();
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = hup.recv() => {}
        }
        say("Second interrupt: exiting now.");
        crate::state::lock::release_held();
        std::process::exit(i32::from(exit_status()));
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
