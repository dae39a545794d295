//! The lines a long-running command streams while it waits on a job (rank
//! output, followed logs, status changes), written so that the reader going
//! away (`kfaws train … | head`, a closed terminal) is noticed at once,
//! even while no line is due, instead of being ignored until the job ends.

use std::io::Write as _;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// Standard output for progress lines. When its reader goes away, the token
/// given to [`Progress::new`] is cancelled so the waiting command stops
/// early, and later lines are dropped. Noticed two ways: a write that fails
/// with `EPIPE`, and a watcher thread that `poll(2)`s standard output for
/// `POLLERR` (the write end of a pipe whose read end is closed) or `POLLHUP`
/// (a hung-up terminal or socket), which needs no write; a regular file or
/// `/dev/null` never reports either. Other write errors are ignored, as a
/// progress line is never the command's result.
#[derive(Clone, Debug)]
pub struct Progress {
    stop: CancellationToken,
    closed: Arc<AtomicBool>,
}

impl Progress {
    /// Progress lines that cancel `stop` when standard output's reader goes
    /// away (`stop` may also be cancelled by other causes, such as a child
    /// of the command's signal token).
    pub fn new(stop: CancellationToken) -> Self {
        let progress = Self {
            stop,
            closed: Arc::default(),
        };
        let watcher = progress.clone();
        // A plain thread, not the blocking pool: it may block until the
        // process exits, which would hold the tokio runtime's shutdown.
        let spawned = std::thread::Builder::new()
            .name("stdout-watch".into())
            .spawn(move || {
                if reader_went_away(std::io::stdout().as_fd()) {
                    watcher.set_closed();
                }
            });
        if let Err(e) = spawned {
            tracing::debug!("not watching standard output: {e}");
        }
        progress
    }

    fn set_closed(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.stop.cancel();
    }

    /// Writes `text` and a newline (one `write` under the stdout lock, so
    /// lines from several tasks never interleave).
    pub fn line(&self, text: &str) {
        if self.is_closed() {
            return;
        }
        if let Err(e) = writeln!(std::io::stdout().lock(), "{text}") {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                self.set_closed();
            }
        }
    }

    /// Whether standard output's reader went away (a write failed with
    /// `EPIPE`, or the watcher saw `POLLERR` or `POLLHUP`).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// The error `main` turns into exit status 141 (the shell's 128 + SIGPIPE),
/// after the command has said on stderr what became of the job.
pub fn closed() -> anyhow::Error {
    super::Output(std::io::ErrorKind::BrokenPipe.into()).into()
}

/// Blocks until `fd` reports `POLLERR` or `POLLHUP` (true), or cannot be
/// polled (false: `POLLNVAL` for a closed descriptor, or an error other than
/// `EINTR`). No event is requested, so only those two wake it (poll(2): they
/// are always reported).
fn reader_went_away(fd: BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

    let mut fds = [PollFd::new(fd, PollFlags::empty())];
    loop {
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {
                let revents = fds[0].revents().unwrap_or(PollFlags::empty());
                return revents.intersects(PollFlags::POLLERR | PollFlags::POLLHUP)
                    && !revents.contains(PollFlags::POLLNVAL);
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The write end of a pipe reports its reader's close with no write
    /// (the watcher that stops a quiet `kfaws train … | head`).
    #[test]
    fn a_pipe_whose_reader_closes_is_reported() {
        let (reader, writer) = std::io::pipe().unwrap();
        let watching = std::thread::spawn(move || reader_went_away(writer.as_fd()));
        // Still blocked while the reader is open (it can only return on an event).
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!watching.is_finished());
        drop(reader);
        assert!(watching.join().unwrap());
    }
}
