//! The ring all-reduce: each rank `r` sends to its successor `(r + 1) mod N` and receives from
//! its predecessor `(r − 1) mod N`. The vector is cut into N chunks, chunk `c` being
//! `[c·L/N, (c+1)·L/N)` of a length-L vector (so some are empty when L < N).
//!
//! 1. Reduce-scatter, N − 1 steps: at step `k` rank `r` sends chunk `(r − k) mod N` and adds
//!    the chunk `(r − k − 1) mod N` it receives into its own. Chunk `c` thus starts as rank
//!    `c`'s values and is summed around the ring in the order
//!    `((x_c + x_{c+1}) + x_{c+2}) + … + x_{c−1}`, finishing on rank `c − 1`.
//! 2. All-gather, N − 1 steps: at step `k` rank `r` sends chunk `(r + 1 − k) mod N` and
//!    overwrites chunk `(r − k) mod N` with the one it receives.
//!
//! Each chunk's sum is computed by one rank only and copied bit for bit to the others, so all
//! ranks end with identical values. Sends run on a scoped thread while this thread receives,
//! so a chunk larger than the sockets' buffers cannot deadlock the ring.
//!
//! Failure: the first receive of a call waits `timeout` — every live rank sends its own chunk
//! at once, so only the successor of a dead or hung rank is still waiting then, and it names
//! it. Later receives wait twice as long, since a delay there may be further up the ring. A
//! rank that fails sends an `Abort` (origin rank and reason) to its successor, which forwards
//! it, so the diagnosis travels round the ring ahead of anyone else's longer deadline.

use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::ops::Range;
use std::sync::mpsc;
use std::time::Duration;

use super::wire::{abort_payload, add_floats, decode_floats, floats_frame, frame, read_frame, Tag};
use super::CommError;

/// This rank's two links of the ring.
pub(super) struct Ring {
    rank: usize,
    world_size: usize,
    /// From the predecessor, `(rank − 1) mod N`.
    prev: TcpStream,
    /// To the successor, `(rank + 1) mod N` (another handle on `prev`'s socket when N = 2).
    next: TcpStream,
    timeout: Duration,
    /// `prev`'s read timeout outside ring calls (it may be a star link), restored after each.
    prev_idle_timeout: Option<Duration>,
}

/// Chunk `c` of `n` of a vector of `len` values.
pub(super) fn chunk(c: usize, len: usize, n: usize) -> Range<usize> {
    c * len / n..(c + 1) * len / n
}

impl Ring {
    /// A ring over connected links; `timeout` as the collective timeout.
    pub(super) fn new(
        rank: usize,
        world_size: usize,
        prev: TcpStream,
        next: TcpStream,
        timeout: Duration,
    ) -> io::Result<Self> {
        let prev_idle_timeout = prev.read_timeout()?;
        Ok(Self {
            rank,
            world_size,
            prev,
            next,
            timeout,
            prev_idle_timeout,
        })
    }

    fn prev_rank(&self) -> usize {
        (self.rank + self.world_size - 1) % self.world_size
    }

    fn next_rank(&self) -> usize {
        (self.rank + 1) % self.world_size
    }

    /// Replaces `values` with the element-wise sum over ranks (summation order in the module
    /// doc), identical on every rank.
    ///
    /// # Errors
    /// A [`CommError`] naming the predecessor or successor that failed, or
    /// [`CommError::Aborted`] relaying another rank's diagnosis.
    pub(super) fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<(), CommError> {
        let (prev_rank, next_rank, timeout) = (self.prev_rank(), self.next_rank(), self.timeout);
        let (rank, n, len) = (self.rank, self.world_size, values.len());
        let steps = 2 * (n - 1);
        let next = &mut self.next;
        let prev = &mut self.prev;
        let (received, sent) = std::thread::scope(|scope| {
            let (frames, outbox) = mpsc::channel::<Vec<u8>>();
            let sender = scope.spawn(move || -> io::Result<()> {
                for bytes in outbox {
                    next.write_all(&bytes)?;
                }
                Ok(())
            });
            // A send error means the sender has stopped; its own error is reported at join.
            let _ = frames.send(floats_frame(&values[chunk(rank, len, n)]));
            let received = receive_steps(prev, prev_rank, timeout, steps, |k, payload| {
                let reducing = k < n - 1;
                let c = if reducing {
                    (rank + 2 * n - k - 1) % n
                } else {
                    (rank + 2 * n - (k - (n - 1))) % n
                };
                let range = chunk(c, len, n);
                let applied = if reducing {
                    add_floats(payload, &mut values[range.clone()])
                } else {
                    decode_floats(payload, &mut values[range.clone()])
                };
                applied.map_err(|detail| CommError::Protocol {
                    rank: prev_rank,
                    detail,
                })?;
                if k + 1 < steps {
                    // What was just received is what goes on next.
                    let _ = frames.send(floats_frame(&values[range]));
                }
                Ok(())
            });
            if let Err(abort) = &received {
                let _ = frames.send(frame(Tag::Abort, &abort_frame_payload(rank, abort)));
            }
            drop(frames);
            (
                received,
                sender.join().expect("ring sender thread panicked"),
            )
        });
        let restored = self.prev.set_read_timeout(self.prev_idle_timeout);
        received?;
        sent.map_err(|e| CommError::from_io(next_rank, timeout, e))?;
        restored.map_err(|e| CommError::from_io(prev_rank, timeout, e))
    }

    /// Best effort, on the way out of a failed job: closes both links.
    pub(super) fn close(&self) {
        let _ = self.prev.shutdown(Shutdown::Both);
        let _ = self.next.shutdown(Shutdown::Both);
    }
}

#[cfg(test)]
impl Ring {
    /// The links to the predecessor and the successor, for tests that play a misbehaving
    /// rank by hand (one that hangs in the middle of an all-reduce).
    pub(super) fn links(&mut self) -> (&mut TcpStream, &mut TcpStream) {
        (&mut self.prev, &mut self.next)
    }
}

/// What a failing rank tells its successor: a relayed abort keeps its origin.
fn abort_frame_payload(rank: usize, err: &CommError) -> Vec<u8> {
    match err {
        CommError::Aborted {
            rank: origin,
            reason,
            permanent,
        } => abort_payload(*origin, *permanent, reason),
        other => abort_payload(rank, !other.is_transient(), &other.to_string()),
    }
}

/// How long step `k` of an all-reduce waits for its predecessor's frame, `timeout` being the
/// collective timeout T: T for the first (the predecessor sends it at once), then 2T plus
/// T/4 per step. A rank that hangs after step j stalls its successor at step j + 1, the next
/// rank at step j + 2, and so on; the successor gives up first and relays an abort naming the
/// hung rank, which must reach each rank further on before that rank's own, later wait ends
/// (else it would name its predecessor, which is alive). The T/4 per step is that margin.
fn step_wait(timeout: Duration, k: usize) -> Duration {
    if k == 0 {
        timeout
    } else {
        timeout * 2 + timeout / 4 * u32::try_from(k).unwrap_or(u32::MAX)
    }
}

/// Receives `steps` float frames from the predecessor, handing each to `apply(step, payload)`.
fn receive_steps(
    prev: &mut TcpStream,
    prev_rank: usize,
    timeout: Duration,
    steps: usize,
    mut apply: impl FnMut(usize, &[u8]) -> Result<(), CommError>,
) -> Result<(), CommError> {
    for k in 0..steps {
        let wait = step_wait(timeout, k);
        prev.set_read_timeout(Some(wait))
            .map_err(|e| CommError::from_io(prev_rank, wait, e))?;
        let (tag, payload) =
            read_frame(prev).map_err(|e| CommError::from_io(prev_rank, wait, e))?;
        match tag {
            Tag::Floats => apply(k, &payload)?,
            Tag::Abort => return Err(CommError::aborted(&payload)),
            other => {
                return Err(CommError::Protocol {
                    rank: prev_rank,
                    detail: format!("expected floats, got {other:?}"),
                })
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_later_step_waits_a_quarter_timeout_longer_than_the_one_before() {
        let t = Duration::from_secs(120);
        assert_eq!(step_wait(t, 0), t);
        assert_eq!(step_wait(t, 1), Duration::from_secs(270));
        for k in 1..10 {
            assert_eq!(step_wait(t, k + 1) - step_wait(t, k), t / 4, "step {k}");
        }
    }
}
