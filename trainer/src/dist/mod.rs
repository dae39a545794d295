//! Our collective communication for data-parallel training over TCP, since burn has no
//! multi-process collectives for its CPU backend.
//!
//! Two all-reduce algorithms, chosen by [`Rendezvous::all_reduce`] (`--all-reduce`,
//! `TRAINER_ALL_REDUCE`; the handshake refuses ranks that disagree). Both start from the same
//! rendezvous: rank 0 listens on `MASTER_ADDR:MASTER_PORT` and every other rank connects to it.
//!
//! - [`AllReduce::Star`] (the default): a reduce to rank 0 — which adds the ranks' vectors in
//!   rank order 0, 1, …, N−1 — then a broadcast of the sum: 2 message hops, rank 0 moving
//!   2·(N−1) whole vectors.
//! - [`AllReduce::Ring`]: reduce-scatter then all-gather over N chunks (`ring` module):
//!   2·(N−1) hops, each rank moving 2·(N−1)/N of a vector; chunk `c` is summed from rank `c`
//!   round the ring, `((x_c + x_{c+1}) + …) + x_{c−1}`.
//!
//! Either way each sum is computed by one rank and copied bit for bit, so every rank ends with
//! identical values whatever the arrival order. Broadcasts always use the star.
//!
//! Why the star by default: measured with `kfaws-trainer-bench --all-reduce-only` (ranks as
//! threads of one process on loopback, release build, the 2-core development machine shared
//! with other builds, load average ≈ 4), p50 (p99) in ms of one all-reduce as seen by rank 0;
//! p50 as the range over two runs, p99 from the first:
//!
//! | floats | ranks | star | ring |
//! |---|---|---|---|
//! | 44,426 (Fashion-MNIST model) | 2 | 0.078 (0.13) | 0.33–0.39 (4.5) |
//! | | 3 | 0.17–0.20 (0.29) | 1.8–3.4 (4.6) |
//! | | 4 | 0.25–0.31 (0.62) | 1.1–1.2 (5.3) |
//! | 62,006 (CIFAR-10 model) | 2 | 0.13–0.16 (0.34) | 0.44–3.6 (4.4) |
//! | | 3 | 0.20–0.25 (0.54) | 3.1–3.2 (4.9) |
//! | | 4 | 0.40 (2.5) | 0.94–2.1 (5.5) |
//! | 620,060 (10×) | 2 | 3.7–5.1 (8.1) | 2.9–3.3 (5.7) |
//! | | 3 | 8.2–8.9 (13) | 4.4–5.4 (9.0) |
//! | | 4 | 9.0–13 (17) | 5.3–6.7 (13) |
//! | 6,200,600 (100×) | 2 | 72–74 (103) | 57–61 (99) |
//! | | 3 | 223–224 (254) | 103–120 (149) |
//! | | 4 | 314–353 (364) | 135–156 (160) |
//!
//! End to end, 2 processes × batch 32 training one epoch of Fashion-MNIST (release, one run
//! each): 8,672 images/s with the star, 7,329 with the ring (same losses and accuracy to the digit: with 2
//! ranks both orders are one commutative addition). At this model's size the collective is
//! bound by per-message latency, not bandwidth: the ring's 2·(N−1) dependent hops, each a
//! hand-off between its sending thread and its receiving one, cost more than the star's 2 —
//! 2 to 20 times the star's median here, and 4–5 ms at p99 (the look of a thread waiting out
//! a scheduler time slice for a busy core; not checked on an idle machine). The ring wins from
//! 10× the model's size on, where the star's rank 0, moving N − 1 vectors each way, becomes
//! the bottleneck (2.3× at 100× and 4 ranks): choose it for models of millions of parameters.
//!
//! Failure: every socket read and write has a deadline. A peer whose connection closes or who
//! does not answer within the collective timeout fails the call with an error naming its rank;
//! the rank that found it then tells the others why (an `Abort` frame naming itself and the
//! reason) before closing, so every process exits promptly with the same diagnosis; rank 0 does
//! the same when it fails on its own between collectives ([`Communicator::abort`]). Star:
//! rank 0 finds it and tells every worker; workers wait twice the timeout for rank 0, so its
//! verdict — which names the actual culprit — arrives before their own deadline. Ring: the
//! failed rank's successor finds it (see the `ring` module for why it is first) and the
//! `Abort` is relayed round the ring.

mod handshake;
mod link;
mod ring;
mod wire;

use std::io;
use std::net::TcpStream;
use std::time::Duration;

use handshake::{accept_peers, join};
use wire::{abort_payload, decode_floats, parse_abort, read_frame, write_floats, write_frame, Tag};

/// Version of the wire protocol; bumped on any incompatible change (2: the all-reduce topology
/// and ring port in the handshake, the aborting rank in `Abort`; 3: the training configuration
/// itself after its hash in the handshake, so a mismatch names what differs; 4: whether an
/// `Abort` is permanent, so every rank exits with the aborting rank's kind of exit code).
pub const PROTOCOL_VERSION: u32 = 4;

/// How an all-reduce moves the data (module doc: what each costs, as measured).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AllReduce {
    /// Reduce to rank 0 in rank order, then broadcast: 2 message hops, rank 0 moves N − 1
    /// vectors each way.
    #[default]
    Star,
    /// Reduce-scatter then all-gather around the ring: 2·(N − 1) hops of 1/N of the vector.
    Ring,
}

impl AllReduce {
    fn code(self) -> u8 {
        match self {
            Self::Star => 0,
            Self::Ring => 1,
        }
    }

    /// The name `--all-reduce` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Star => "star",
            Self::Ring => "ring",
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        [Self::Star, Self::Ring]
            .into_iter()
            .find(|t| t.code() == code)
    }
}

/// Where and how the ranks meet.
#[derive(Debug, Clone)]
pub struct Rendezvous {
    /// Host name or address of rank 0 (`MASTER_ADDR`).
    pub master_addr: String,
    /// Port rank 0 listens on (`MASTER_PORT`).
    pub master_port: u16,
    /// Address rank 0 binds (default `0.0.0.0`: peers reach it through `master_addr`).
    pub bind_addr: String,
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// Number of processes.
    pub world_size: usize,
    /// How long rank 0 waits for all peers, and a peer retries connecting to rank 0.
    pub connect_timeout: Duration,
    /// How long any one collective waits for a peer before failing the job.
    pub collective_timeout: Duration,
    /// The all-reduce algorithm; every rank must use the same (checked by the handshake).
    pub all_reduce: AllReduce,
}

/// What all ranks must agree on before training together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreement {
    /// Number of model parameters (length of every all-reduced gradient vector).
    pub param_count: u64,
    /// The training configuration that must match across ranks, as a JSON object (the
    /// trainer's is `crate::train::shared_config`: hyperparameters, dataset, example counts,
    /// world size). The handshake compares its SHA-256, and sends it whole beside (a few
    /// hundred bytes, nothing secret: the hyperparameters are in the job's own description)
    /// so that a mismatch names each differing field.
    pub config: String,
}

/// Why a collective failed.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    /// Rank 0 could not listen.
    #[error("rank 0 cannot listen on {addr}: {source}")]
    Bind {
        /// The address rank 0 listens on, `bind_addr:master_port`.
        addr: String,
        /// Why binding the listener, or accepting a connection on it, failed.
        #[source]
        source: io::Error,
    },
    /// A rank could not reach rank 0 before the connect timeout.
    #[error("rank {rank} could not connect to rank 0 at {addr} within {timeout:?}: {last_error}")]
    ConnectTimeout {
        /// This process's rank.
        rank: usize,
        /// Rank 0's address, `master_addr:master_port`.
        addr: String,
        /// How long this rank kept trying: the connect timeout.
        timeout: Duration,
        /// Why the last attempt failed (name resolution or connection).
        last_error: String,
    },
    /// Rank 0 did not hear from every rank before the connect timeout.
    #[error("rank 0 waited {timeout:?} for ranks {missing:?} to connect")]
    RendezvousTimeout {
        /// How long rank 0 waited: the connect timeout.
        timeout: Duration,
        /// The ranks that had not joined, in ascending order.
        missing: Vec<usize>,
    },
    /// The ranks disagree on something they must share: a configuration error, not transient.
    #[error("handshake refused: {0}")]
    Mismatch(String),
    /// A second connection said the handshake of a rank whose first connection is still open.
    /// Transient: after a node is lost without a word, its rank's connection can look open
    /// until TCP gives up on it while the rank's pod, started again elsewhere, reconnects; a
    /// retry of the job starts every rank afresh.
    #[error(
        "two processes claim rank {rank} (its first connection still looks open: a rank started \
         again after its node was lost?)"
    )]
    RankClaimed {
        /// The rank claimed twice.
        rank: usize,
    },
    /// A peer's connection closed: the process died or was killed.
    #[error("rank {rank} closed its connection (process died or was killed?)")]
    PeerClosed {
        /// The peer's rank.
        rank: usize,
    },
    /// A peer did not answer in time.
    #[error("rank {rank} did not respond within {timeout:?} (hung or overloaded?)")]
    PeerTimeout {
        /// The peer's rank.
        rank: usize,
        /// How long this rank waited for it: the collective timeout, or more where the peer may
        /// itself be waiting on another (twice it for a worker waiting on rank 0 and for a ring
        /// rank after its first frame; the connect timeout plus it in a worker's handshake).
        timeout: Duration,
    },
    /// Another I/O failure talking to a peer.
    #[error("talking to rank {rank}: {source}")]
    PeerIo {
        /// The peer's rank.
        rank: usize,
        /// The I/O error (connecting to a ring successor: its connect failure, as text).
        #[source]
        source: io::Error,
    },
    /// A peer sent something this protocol does not allow.
    #[error("rank {rank} broke the protocol: {detail}")]
    Protocol {
        /// The rank that sent it.
        rank: usize,
        /// What arrived instead of what was expected: a frame of another tag, or a payload of
        /// the wrong length.
        detail: String,
    },
    /// Another rank found a failure and aborted the job (rank 0 in the star; in the ring,
    /// the rank that found it, relayed by the others).
    #[error("rank {rank} aborted the job: {reason}")]
    Aborted {
        /// The rank that found the failure, kept as the `Abort` is relayed (0 when the frame
        /// is too short to name one).
        rank: usize,
        /// That rank's diagnosis: the text of its error.
        reason: String,
        /// Whether retrying cannot help (that rank's failure is a configuration error), so
        /// that this rank's exit code says so too (crate::error's exit codes).
        permanent: bool,
    },
}

impl CommError {
    /// Whether retrying the job may succeed (everything but a configuration mismatch).
    pub fn is_transient(&self) -> bool {
        !matches!(
            self,
            Self::Mismatch(_)
                | Self::Bind { .. }
                | Self::Aborted {
                    permanent: true,
                    ..
                }
        )
    }

    fn aborted(payload: &[u8]) -> Self {
        let (rank, permanent, reason) = parse_abort(payload);
        Self::Aborted {
            rank,
            reason,
            permanent,
        }
    }

    fn from_io(rank: usize, timeout: Duration, source: io::Error) -> Self {
        match source.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe => Self::PeerClosed { rank },
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                Self::PeerTimeout { rank, timeout }
            }
            _ => Self::PeerIo { rank, source },
        }
    }
}

enum Role {
    Single,
    /// Connections to ranks 1..N, in rank order.
    Root(Vec<TcpStream>),
    Worker(TcpStream),
}

/// A connected group of ranks. Every rank must make the same sequence of calls.
pub struct Communicator {
    rank: usize,
    world_size: usize,
    timeout: Duration,
    /// The star's links: the rendezvous, broadcasts, and star all-reduces.
    role: Role,
    /// Present when the all-reduce is [`AllReduce::Ring`] and there are at least 2 ranks.
    ring: Option<ring::Ring>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Communicator(rank {} of {})", self.rank, self.world_size)
    }
}

impl Communicator {
    /// A world of one: every collective is the identity.
    pub fn single() -> Self {
        Self {
            rank: 0,
            world_size: 1,
            timeout: Duration::MAX,
            role: Role::Single,
            ring: None,
        }
    }

    /// Joins the group: rank 0 listens and admits `world_size − 1` peers after checking their
    /// handshake; other ranks connect with exponential backoff (100 ms doubling to 5 s) until
    /// `connect_timeout`, re-resolving the host name each attempt since pod and SageMaker host
    /// names may appear in DNS after the process starts. For the ring, ranks 2..N listen on an
    /// ephemeral port of the address they reached rank 0 from, announced in their handshake;
    /// rank 0's welcome tells ranks 1..N−1 their successor's address (as rank 0 saw it) and
    /// they connect to it; the links 0→1 and N−1→0 are the star's.
    ///
    /// # Errors
    /// [`CommError::Mismatch`] when protocol version, world size, parameter count,
    /// configuration hash or all-reduce algorithm differ (reported on both sides);
    /// [`CommError::RankClaimed`] when a second live connection claims a rank (transient);
    /// timeouts naming the missing ranks. A worker that rank 0 gives up on after admitting it
    /// returns rank 0's error as [`CommError::Aborted`], permanent as it was on rank 0.
    pub fn connect(rv: &Rendezvous, agreement: &Agreement) -> Result<Self, CommError> {
        if rv.world_size == 1 {
            return Ok(Self::single());
        }
        let (role, ring) = if rv.rank == 0 {
            accept_peers(rv, agreement)?
        } else {
            join(rv, agreement)?
        };
        Ok(Self {
            rank: rv.rank,
            world_size: rv.world_size,
            timeout: rv.collective_timeout,
            role,
            ring,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// Replaces `values` on every rank with rank 0's.
    ///
    /// # Errors
    /// A [`CommError`] naming the failed rank; rank 0, failing to send to one, aborts the
    /// others with its error, which they return as [`CommError::Aborted`].
    pub fn broadcast(&mut self, values: &mut [f32]) -> Result<(), CommError> {
        let timeout = self.timeout;
        match &mut self.role {
            Role::Single => Ok(()),
            Role::Root(peers) => {
                let result = peers.iter_mut().enumerate().try_for_each(|(i, peer)| {
                    write_floats(peer, values).map_err(|e| CommError::from_io(i + 1, timeout, e))
                });
                // The other workers are told why, rather than finding rank 0 gone.
                if let Err(err) = &result {
                    abort_peers(peers, !err.is_transient(), &err.to_string());
                }
                result
            }
            Role::Worker(root) => receive_floats(root, values, self.timeout),
        }
    }

    /// The all-reduce algorithm in use.
    pub fn algorithm(&self) -> AllReduce {
        if self.ring.is_some() {
            AllReduce::Ring
        } else {
            AllReduce::Star
        }
    }

    /// Replaces `values` on every rank with the element-wise sum over ranks, identical bits on
    /// all ranks. Star: added in rank order 0, 1, …, N−1. Ring: chunk `c` of N is added in
    /// ring order from rank `c` (the `ring` module's doc).
    ///
    /// # Errors
    /// A [`CommError`] naming the failed rank (ring: the predecessor or successor that failed);
    /// the rank that finds the failure first tells the others why.
    pub fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<(), CommError> {
        let timeout = self.timeout;
        if let Some(ring) = &mut self.ring {
            let result = ring.all_reduce_sum(values);
            if result.is_err() {
                ring.close();
            }
            return result;
        }
        match &mut self.role {
            Role::Single => Ok(()),
            Role::Root(peers) => {
                let result = reduce_at_root(peers, values, timeout);
                if let Err(err) = &result {
                    abort_peers(peers, !err.is_transient(), &err.to_string());
                }
                result
            }
            Role::Worker(root) => {
                if let Err(e) = write_floats(root, values) {
                    // Rank 0 may have given up on another rank and aborted while this one
                    // was still sending: its reason, if it came, says who hung.
                    return Err(pending_abort(root)
                        .unwrap_or_else(|| CommError::from_io(0, timeout * 2, e)));
                }
                receive_floats(root, values, timeout)
            }
        }
    }

    /// Ends the job for a failure of this rank's own, outside any collective (rank 0 could not
    /// read or write its checkpoint), so the other ranks report it rather than "rank 0 closed
    /// its connection": rank 0 sends every worker an `Abort` frame naming itself and `reason`,
    /// which the worker's next receive returns as [`CommError::Aborted`] (with the ring, rank 1
    /// reads it on the star link that is also its ring predecessor, and relays it round the
    /// ring). Then every link is shut down. A collective that fails has told the others already
    /// and needs no call. On a worker this only shuts down the ring's links: no worker fails on
    /// its own past the rendezvous except inside a collective. `permanent`: retrying cannot
    /// help (a configuration error), which the workers' exit codes then say too. Best effort: a
    /// peer that has already gone is skipped.
    pub fn abort(&mut self, reason: &str, permanent: bool) {
        if let Role::Root(peers) = &mut self.role {
            abort_peers(peers, permanent, reason);
        }
        if let Some(ring) = &self.ring {
            ring.close();
        }
    }

    /// [`Self::all_reduce_sum`] divided by the world size: the gradient average of PyTorch DDP.
    ///
    /// # Errors
    /// As [`Self::all_reduce_sum`].
    pub fn all_reduce_mean(&mut self, values: &mut [f32]) -> Result<(), CommError> {
        self.all_reduce_sum(values)?;
        let n = self.world_size as f32;
        values.iter_mut().for_each(|v| *v /= n);
        Ok(())
    }
}

fn reduce_at_root(
    peers: &mut [TcpStream],
    values: &mut [f32],
    timeout: Duration,
) -> Result<(), CommError> {
    let mut incoming = vec![0f32; values.len()];
    for (i, peer) in peers.iter_mut().enumerate() {
        let rank = i + 1;
        let (tag, payload) = read_frame(peer).map_err(|e| CommError::from_io(rank, timeout, e))?;
        if tag != Tag::Floats {
            return Err(CommError::Protocol {
                rank,
                detail: format!("expected floats, got {tag:?}"),
            });
        }
        decode_floats(&payload, &mut incoming)
            .map_err(|detail| CommError::Protocol { rank, detail })?;
        values.iter_mut().zip(&incoming).for_each(|(v, x)| *v += x);
    }
    for (i, peer) in peers.iter_mut().enumerate() {
        write_floats(peer, values).map_err(|e| CommError::from_io(i + 1, timeout, e))?;
    }
    Ok(())
}

/// Best effort: the job is failing anyway, a peer that cannot hear it will see the close.
fn abort_peers(peers: &mut [TcpStream], permanent: bool, reason: &str) {
    let payload = abort_payload(0, permanent, reason);
    for peer in peers.iter_mut() {
        let _ = write_frame(peer, Tag::Abort, &payload);
        let _ = peer.shutdown(std::net::Shutdown::Both);
    }
}

/// An `Abort` rank 0 sent before the connection failed, if it can be read within a second
/// (what the socket received before a reset is still read first).
fn pending_abort(root: &mut TcpStream) -> Option<CommError> {
    root.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    match read_frame(root) {
        Ok((Tag::Abort, payload)) => Some(CommError::aborted(&payload)),
        _ => None,
    }
}

fn receive_floats(
    root: &mut TcpStream,
    values: &mut [f32],
    timeout: Duration,
) -> Result<(), CommError> {
    let (tag, payload) = read_frame(root).map_err(|e| CommError::from_io(0, timeout * 2, e))?;
    match tag {
        Tag::Floats => decode_floats(&payload, values)
            .map_err(|detail| CommError::Protocol { rank: 0, detail }),
        Tag::Abort => Err(CommError::aborted(&payload)),
        other => Err(CommError::Protocol {
            rank: 0,
            detail: format!("expected floats, got {other:?}"),
        }),
    }
}

#[cfg(test)]
mod tests;
