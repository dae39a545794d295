//! Setting up a worker's two ring links after the star rendezvous. Rank 1's predecessor and
//! rank N−1's successor are rank 0, over the star link; every other link is a new connection
//! from rank `r` to the listener rank `r + 1` announced in its handshake, opened by the same
//! handshake frame rank 0 receives (checked the same way, plus the expected rank).

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::handshake::{accept_until, check_hello, hello, read_hello, try_connect};
use super::ring::Ring;
use super::wire::{write_frame, Tag};
use super::{Agreement, AllReduce};
use super::{CommError, Rendezvous};

/// A listener on an ephemeral port of the address `root` (the link to rank 0) leaves from: the
/// address rank 0 sees, and so tells the predecessor.
pub(super) fn listen_beside(root: &TcpStream) -> io::Result<TcpListener> {
    TcpListener::bind(SocketAddr::new(root.local_addr()?.ip(), 0))
}

/// Connects this worker's ring: to `successor` (`ip:port` from rank 0's welcome; empty for
/// rank N−1, whose successor is rank 0) and from its predecessor through `listener` (`None`
/// for rank 1, whose predecessor is rank 0).
///
/// # Errors
/// A [`CommError`] naming the successor that cannot be reached or the predecessor that does
/// not connect within the collective timeout.
pub(super) fn ring_links(
    root: &TcpStream,
    listener: Option<TcpListener>,
    successor: &str,
    rv: &Rendezvous,
    agreement: &Agreement,
) -> Result<Ring, CommError> {
    let (rank, timeout) = (rv.rank, rv.collective_timeout);
    let next = if successor.is_empty() {
        root.try_clone()
            .map_err(|e| CommError::from_io(0, timeout, e))?
    } else {
        let failed = |detail: String| CommError::PeerIo {
            rank: rank + 1,
            source: io::Error::other(format!("connecting to {successor}: {detail}")),
        };
        let mut next = try_connect(successor, timeout).map_err(failed)?;
        let payload = hello(rank, rv.world_size, agreement, AllReduce::Ring, 0);
        write_frame(&mut next, Tag::Hello, &payload)
            .map_err(|e| CommError::from_io(rank + 1, timeout, e))?;
        next
    };
    let prev = match listener {
        Some(listener) => accept_predecessor(&listener, rv, agreement)?,
        None => root
            .try_clone()
            .map_err(|e| CommError::from_io(0, timeout, e))?,
    };
    Ring::new(rank, rv.world_size, prev, next, timeout)
        .map_err(|e| CommError::from_io(rank - 1, timeout, e))
}

/// Waits up to the collective timeout for rank `rank − 1` to connect and say a matching
/// handshake; other connections are dropped, and so are failed accepts that concern only the
/// connection ([`super::handshake::accept_error_is_transient`]).
fn accept_predecessor(
    listener: &TcpListener,
    rv: &Rendezvous,
    agreement: &Agreement,
) -> Result<TcpStream, CommError> {
    let (expected, timeout) = (rv.rank - 1, rv.collective_timeout);
    let io = |e| CommError::from_io(expected, timeout, e);
    listener.set_nonblocking(true).map_err(io)?;
    let deadline = Instant::now() + timeout;
    loop {
        let waiting = || format!("ring rank {expected}");
        let accepted = accept_until(listener, deadline, Duration::from_millis(5), waiting);
        let (mut stream, from) = match accepted {
            Ok(Some(conn)) => conn,
            Ok(None) => {
                return Err(CommError::PeerTimeout {
                    rank: expected,
                    timeout,
                })
            }
            Err(e) => return Err(io(e)),
        };
        let verdict = read_hello(&mut stream, timeout).and_then(|payload| {
            let h = check_hello(&payload, rv.world_size, agreement, AllReduce::Ring)?;
            if h.rank == expected {
                Ok(())
            } else {
                Err(format!("rank {} is not rank {expected}", h.rank))
            }
        });
        match verdict {
            Ok(()) => return Ok(stream),
            Err(why) => tracing::warn!(%from, "ignored a ring connection: {why}"),
        }
    }
}
