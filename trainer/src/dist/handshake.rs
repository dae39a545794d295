//! The rendezvous: rank 0 admits every other rank after checking its handshake (protocol
//! version, world size, parameter count, hash of the training configuration, all-reduce
//! algorithm), workers connect with retries; for the ring, the welcome tells each worker where
//! its successor listens (`link` module).

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::wire::{read_frame, write_frame, Tag};
use super::PROTOCOL_VERSION;
use super::{abort_peers, link, ring, Agreement, AllReduce, CommError, Rendezvous, Role};

const MAGIC: &[u8; 8] = b"KFAWS-AR";
/// How long rank 0 waits for a new connection's handshake.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Length of a version-3 handshake before its configuration (the rest of the payload).
const HELLO_FIXED: usize = 8 + 4 + 4 + 4 + 8 + 32 + 1 + 2;

/// At most this many differing fields are named in a mismatch.
const DIFFERENCES_SHOWN: usize = 6;

/// What a handshake announces beyond what must match.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hello {
    pub(super) rank: usize,
    /// Port of the rank's ring listener (0: none).
    pub(super) ring_port: u16,
}

/// The handshake a worker sends to rank 0, and a ring predecessor to its successor: magic,
/// protocol version, rank, world size, parameter count, SHA-256 of the training
/// configuration (compared), all-reduce algorithm, ring listener port (0: none), then the
/// configuration itself (UTF-8 JSON, the rest of the payload: read only to name what differs).
pub(super) fn hello(
    rank: usize,
    world_size: usize,
    agreement: &Agreement,
    all_reduce: AllReduce,
    ring_port: u16,
) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend(PROTOCOL_VERSION.to_le_bytes());
    out.extend((rank as u32).to_le_bytes());
    out.extend((world_size as u32).to_le_bytes());
    out.extend(agreement.param_count.to_le_bytes());
    out.extend(config_hash(&agreement.config));
    out.push(all_reduce.code());
    out.extend(ring_port.to_le_bytes());
    out.extend(agreement.config.as_bytes());
    out
}

/// SHA-256 of a training configuration, the handshake's check.
fn config_hash(config: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(config.as_bytes()).into()
}

/// The fields in which configuration `theirs` (rank `rank`'s) differs from `ours` (rank 0's),
/// as `hyperparameters.lr "0.01" on rank 1, "0.02" on rank 0`, one level into objects, at
/// most [`DIFFERENCES_SHOWN`] of them; both are JSON objects (else the texts are said to
/// differ).
fn differences(rank: usize, theirs: &str, ours: &str) -> String {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) = (
        serde_json::from_str::<serde_json::Value>(theirs),
        serde_json::from_str::<serde_json::Value>(ours),
    ) else {
        return format!("rank {rank} sent a configuration rank 0 cannot read");
    };
    let mut found = Vec::new();
    let mut compare = |path: String,
                       x: Option<&serde_json::Value>,
                       y: Option<&serde_json::Value>| {
        if x != y {
            let shown =
                |v: Option<&serde_json::Value>| v.map_or("unset".to_string(), ToString::to_string);
            found.push(format!(
                "{path} {} on rank {rank}, {} on rank 0",
                shown(x),
                shown(y)
            ));
        }
    };
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for k in keys {
        match (a.get(k), b.get(k)) {
            (Some(serde_json::Value::Object(x)), Some(serde_json::Value::Object(y))) => {
                let inner: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for i in inner {
                    compare(format!("{k}.{i}"), x.get(i), y.get(i));
                }
            }
            (x, y) => compare(k.clone(), x, y),
        }
    }
    let more = found.len().saturating_sub(DIFFERENCES_SHOWN);
    found.truncate(DIFFERENCES_SHOWN);
    if more > 0 {
        found.push(format!("and {more} more"));
    }
    found.join("; ")
}

/// Checks a peer's handshake against ours; returns what it announces or why it is refused.
pub(super) fn check_hello(
    payload: &[u8],
    world_size: usize,
    agreement: &Agreement,
    all_reduce: AllReduce,
) -> Result<Hello, String> {
    if payload.len() < 12 || &payload[..8] != MAGIC {
        return Err("the peer is not a kfaws-trainer of this protocol".into());
    }
    let u32_at = |at: usize| u32::from_le_bytes(payload[at..at + 4].try_into().expect("4 bytes"));
    let version = u32_at(8);
    if version != PROTOCOL_VERSION || payload.len() < HELLO_FIXED {
        let rank = payload
            .get(12..16)
            .map_or("?".into(), |_| u32_at(12).to_string());
        return Err(format!(
            "rank {rank} speaks protocol version {version}, rank 0 speaks {PROTOCOL_VERSION}"
        ));
    }
    let rank = u32_at(12) as usize;
    let peer_world = u32_at(16) as usize;
    let params = u64::from_le_bytes(payload[20..28].try_into().expect("8 bytes"));
    let hash: [u8; 32] = payload[28..60].try_into().expect("32 bytes");
    let peer_all_reduce = AllReduce::from_code(payload[60]);
    let ring_port = u16::from_le_bytes([payload[61], payload[62]]);
    if peer_world != world_size {
        return Err(format!(
            "rank {rank} has world size {peer_world}, rank 0 has {world_size}"
        ));
    }
    if rank == 0 || rank >= world_size {
        return Err(format!(
            "rank {rank} is not from 1 to {} (world size {world_size})",
            world_size - 1
        ));
    }
    if params != agreement.param_count {
        return Err(format!(
            "rank {rank} has {params} model parameters, rank 0 has {} (different dataset or model?)",
            agreement.param_count
        ));
    }
    if hash != config_hash(&agreement.config) {
        let config = String::from_utf8_lossy(&payload[HELLO_FIXED..]);
        return Err(format!(
            "rank {rank}'s training configuration differs from rank 0's: {}",
            differences(rank, &config, &agreement.config)
        ));
    }
    if peer_all_reduce != Some(all_reduce) {
        return Err(format!(
            "rank {rank} uses the {} all-reduce, rank 0 the {} (--all-reduce / \
             TRAINER_ALL_REDUCE must match)",
            peer_all_reduce.map_or("unknown", AllReduce::name),
            all_reduce.name()
        ));
    }
    Ok(Hello { rank, ring_port })
}

/// The star's links, and the ring's where the all-reduce is [`AllReduce::Ring`].
pub(super) type Links = (Role, Option<ring::Ring>);

/// Rank 0's side of the rendezvous: admits every other rank, then welcomes them all.
///
/// # Errors
/// [`CommError::Bind`] when the port cannot be listened on; [`CommError::RendezvousTimeout`]
/// naming the ranks that did not join; [`CommError::Mismatch`] or
/// [`CommError::RankClaimed`] for a refused handshake; a peer's I/O error while welcoming.
/// Past the bind, the ranks already connected are sent an `Abort` with the error (permanent
/// as [`CommError::is_transient`] says), so that they report rank 0's reason rather than
/// "rank 0 closed its connection".
pub(super) fn accept_peers(rv: &Rendezvous, agreement: &Agreement) -> Result<Links, CommError> {
    let addr = format!("{}:{}", rv.bind_addr, rv.master_port);
    let listener = TcpListener::bind(&addr).map_err(|source| CommError::Bind {
        addr: addr.clone(),
        source,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| CommError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let mut peers: Vec<Option<(TcpStream, Hello)>> = (1..rv.world_size).map(|_| None).collect();
    if let Err(err) = admit_all(&listener, &addr, rv, agreement, &mut peers) {
        // The ranks admitted so far wait for a welcome that will not come.
        let mut admitted: Vec<TcpStream> = peers.into_iter().flatten().map(|(s, _)| s).collect();
        abort_peers(&mut admitted, !err.is_transient(), &err.to_string());
        return Err(err);
    }
    // Welcome only once everyone is in, so a worker's next wait (the initial broadcast) is
    // bounded by the collective timeout rather than by how late the last rank joins.
    let (mut peers, hellos): (Vec<TcpStream>, Vec<Hello>) =
        peers.into_iter().map(|p| p.expect("all admitted")).unzip();
    match welcome(&mut peers, &hellos, rv) {
        Ok(ring) => Ok((Role::Root(peers), ring)),
        Err(err) => {
            // Ranks welcomed already wait for the initial broadcast, the others for a welcome.
            abort_peers(&mut peers, !err.is_transient(), &err.to_string());
            Err(err)
        }
    }
}

/// Accepts connections on `listener` (bound to `addr`) until every rank `1..world_size` has
/// an open, admitted connection in `peers` (index `rank − 1`), or the connect timeout passes.
fn admit_all(
    listener: &TcpListener,
    addr: &str,
    rv: &Rendezvous,
    agreement: &Agreement,
    peers: &mut [Option<(TcpStream, Hello)>],
) -> Result<(), CommError> {
    let deadline = Instant::now() + rv.connect_timeout;
    // A rank whose process died after its handshake is waited for again: its restarted
    // process takes the closed connection's place ([`admit`]).
    let missing = |peers: &[Option<(TcpStream, Hello)>]| -> Vec<usize> {
        (1..rv.world_size)
            .filter(|r| peers[r - 1].as_ref().is_none_or(|(s, _)| closed(s)))
            .collect()
    };
    while !missing(peers).is_empty() {
        let waiting = || format!("the other ranks on {addr}");
        let accepted = accept_until(listener, deadline, Duration::from_millis(20), waiting);
        let (stream, from) = match accepted {
            Ok(Some(conn)) => conn,
            Ok(None) => {
                return Err(CommError::RendezvousTimeout {
                    timeout: rv.connect_timeout,
                    missing: missing(peers),
                })
            }
            Err(source) => {
                return Err(CommError::Bind {
                    addr: addr.to_string(),
                    source,
                })
            }
        };
        match admit(stream, rv, agreement, peers) {
            Ok((hello, stream)) => {
                tracing::info!(rank = hello.rank, "peer joined");
                peers[hello.rank - 1] = Some((stream, hello));
            }
            Err(Admission::Refused(err)) => return Err(err),
            // A stray connection (port scan, health check) that never says hello is dropped.
            Err(Admission::Ignored(why)) => tracing::warn!(%from, "ignored a connection: {why}"),
        }
    }
    Ok(())
}

/// Accepts the next connection on the non-blocking `listener`, polling every `poll`; `None`
/// once `deadline` passes. Accept errors of one connection or of a shortage that may pass
/// ([`accept_error_is_transient`]) are waited on, each distinct one logged once with
/// `waiting` (what is waited for); any other is returned.
pub(super) fn accept_until(
    listener: &TcpListener,
    deadline: Instant,
    poll: Duration,
    waiting: impl Fn() -> String,
) -> io::Result<Option<(TcpStream, std::net::SocketAddr)>> {
    // The last accept error logged, so that one repeating every poll is logged once.
    let mut last_error: Option<String> = None;
    loop {
        match listener.accept() {
            Ok(conn) => return Ok(Some(conn)),
            // Nothing to accept yet (`WouldBlock`), or a failure of one connection.
            Err(e) if accept_error_is_transient(&e) => {
                if e.kind() != io::ErrorKind::WouldBlock {
                    let text = e.to_string();
                    if last_error.as_ref() != Some(&text) {
                        tracing::warn!(
                            "accepting a connection failed, still waiting for {}: {text}",
                            waiting()
                        );
                        last_error = Some(text);
                    }
                }
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                std::thread::sleep(poll);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether an error of `accept(2)` on a listener that works concerns only the connection being
/// accepted, or a shortage that may pass, so that accepting should go on: everything but
/// `EINVAL` (the socket is not listening). accept(2), Linux: "Linux accept() passes
/// already-pending network errors on the new socket as an error code from accept() ... the
/// application should ... treat them like EAGAIN by retrying" (`ENETDOWN`, `EPROTO`,
/// `ENOPROTOOPT`, `EHOSTDOWN`, `ENONET`, `EHOSTUNREACH`, `EOPNOTSUPP`, `ENETUNREACH`), besides
/// `ECONNABORTED`, `EINTR`, `EPERM` (a firewall rule refused this connection) and the limits
/// `EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM` (and `EAGAIN`: nothing to accept yet on a
/// non-blocking listener). The errors of a broken listener (`EBADF`,
/// `ENOTSOCK`, `EFAULT`, `EOPNOTSUPP` for a socket that is not a stream) cannot arise from a
/// [`TcpListener`], which owns a valid stream socket and passes valid buffers.
pub(super) fn accept_error_is_transient(error: &io::Error) -> bool {
    error.kind() != io::ErrorKind::InvalidInput
}

/// Sends each admitted rank (`peers[i]` is rank `i + 1`, `hellos` their handshakes) its
/// welcome, with its ring successor's address where the all-reduce is the ring, and sets up
/// rank 0's ring links.
fn welcome(
    peers: &mut [TcpStream],
    hellos: &[Hello],
    rv: &Rendezvous,
) -> Result<Option<ring::Ring>, CommError> {
    let timeout = rv.collective_timeout;
    for i in 0..peers.len() {
        // Ring: ranks 1..N−1 connect to their successor's listener (rank N−1's is rank 0).
        let successor = match peers.get(i + 1) {
            Some(next) if rv.all_reduce == AllReduce::Ring => {
                let ip = next
                    .peer_addr()
                    .map_err(|e| CommError::from_io(i + 2, timeout, e))?
                    .ip();
                SocketAddr::new(ip, hellos[i + 1].ring_port).to_string()
            }
            _ => String::new(),
        };
        write_frame(&mut peers[i], Tag::Welcome, successor.as_bytes())
            .map_err(|e| CommError::from_io(i + 1, timeout, e))?;
    }
    Ok(match rv.all_reduce {
        AllReduce::Ring => {
            let last = peers.len() - 1;
            let clone = |i: usize| {
                peers[i]
                    .try_clone()
                    .map_err(|e| CommError::from_io(i + 1, timeout, e))
            };
            let ring = ring::Ring::new(0, rv.world_size, clone(last)?, clone(0)?, timeout)
                .map_err(|e| CommError::from_io(last + 1, timeout, e))?;
            Some(ring)
        }
        AllReduce::Star => None,
    })
}

enum Admission {
    /// The handshake is refused, which ends the rendezvous with this error.
    Refused(CommError),
    /// Not a handshake at all: the connection is dropped.
    Ignored(String),
}

fn admit(
    mut stream: TcpStream,
    rv: &Rendezvous,
    agreement: &Agreement,
    peers: &[Option<(TcpStream, Hello)>],
) -> Result<(Hello, TcpStream), Admission> {
    let payload = read_hello(&mut stream, rv.collective_timeout).map_err(Admission::Ignored)?;
    let verdict = match check_hello(&payload, rv.world_size, agreement, rv.all_reduce) {
        Err(reason) => Err(CommError::Mismatch(reason)),
        Ok(h) => match &peers[h.rank - 1] {
            // After a node is lost without a word its rank's connection can look open for
            // long, while the rank's pod is already started again elsewhere: transient.
            Some((earlier, _)) if !closed(earlier) => Err(CommError::RankClaimed { rank: h.rank }),
            // The rank's process died after its handshake and was started again (a pod or
            // container restarted): the new connection takes the closed one's place.
            Some(_) => {
                tracing::warn!(
                    rank = h.rank,
                    "rank reconnected; its earlier connection had closed"
                );
                Ok(h)
            }
            None => Ok(h),
        },
    };
    match verdict {
        Ok(hello) => Ok((hello, stream)),
        Err(err) => {
            // A `Reject` is a configuration error to its reader; a transient refusal is an
            // `Abort` that says it is transient, so that the refused rank is retried too.
            let _ = match &err {
                CommError::Mismatch(reason) => {
                    write_frame(&mut stream, Tag::Reject, reason.as_bytes())
                }
                other => write_frame(
                    &mut stream,
                    Tag::Abort,
                    &super::wire::abort_payload(0, !other.is_transient(), &other.to_string()),
                ),
            };
            Err(Admission::Refused(err))
        }
    }
}

/// Whether the peer of an admitted connection has gone: it closed (a read would see the end
/// of the stream) or the connection failed. An open connection with nothing to read is not.
fn closed(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let gone = match stream.peek(&mut [0u8; 1]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != io::ErrorKind::WouldBlock,
    };
    gone || stream.set_nonblocking(false).is_err()
}

/// Configures an accepted connection and reads its first frame, which must be a handshake
/// (returned); a stray connection that never speaks is given at most [`HELLO_TIMEOUT`].
pub(super) fn read_hello(stream: &mut TcpStream, timeout: Duration) -> Result<Vec<u8>, String> {
    let setup = |s: &TcpStream, read_timeout: Duration| -> io::Result<()> {
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(read_timeout))?;
        s.set_write_timeout(Some(timeout))
    };
    setup(stream, timeout.min(HELLO_TIMEOUT)).map_err(|e| e.to_string())?;
    let (tag, payload) = read_frame(stream).map_err(|e| e.to_string())?;
    setup(stream, timeout).map_err(|e| e.to_string())?;
    if tag != Tag::Hello {
        return Err(format!("first frame was {tag:?}, not a handshake"));
    }
    Ok(payload)
}

pub(super) fn join(rv: &Rendezvous, agreement: &Agreement) -> Result<Links, CommError> {
    let addr = format!("{}:{}", rv.master_addr, rv.master_port);
    let deadline = Instant::now() + rv.connect_timeout;
    let mut backoff = Duration::from_millis(100);
    loop {
        let last_error = match try_connect(&addr, rv.collective_timeout) {
            Ok(stream) => return handshake(stream, rv, agreement),
            Err(e) => e,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(CommError::ConnectTimeout {
                rank: rv.rank,
                addr,
                timeout: rv.connect_timeout,
                last_error,
            });
        }
        tracing::debug!(%addr, %last_error, "rank 0 not reachable yet, retrying in {backoff:?}");
        std::thread::sleep(backoff.min(deadline - now));
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

pub(super) fn try_connect(addr: &str, timeout: Duration) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| format!("resolving {addr}: {e}"))?
        .collect();
    let mut last = format!("{addr} resolved to no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
            Ok(s) => {
                let configure = s
                    .set_nodelay(true)
                    // Both 2T: rank 0 waits up to T for every other rank before it reads
                    // this one's gradients, which may not fit the socket buffers meanwhile.
                    .and_then(|_| s.set_read_timeout(Some(timeout * 2)))
                    .and_then(|_| s.set_write_timeout(Some(timeout * 2)));
                return configure.map(|_| s).map_err(|e| e.to_string());
            }
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(last)
}

fn handshake(
    mut stream: TcpStream,
    rv: &Rendezvous,
    agreement: &Agreement,
) -> Result<Links, CommError> {
    let wait = rv.connect_timeout + rv.collective_timeout;
    let io = |e| CommError::from_io(0, wait, e);
    // Ring: ranks 2..N accept their predecessor; listening before the handshake means the
    // predecessor, welcomed at the same time, finds the port open.
    let listener = if rv.all_reduce == AllReduce::Ring && rv.rank >= 2 {
        Some(link::listen_beside(&stream).map_err(io)?)
    } else {
        None
    };
    let ring_port = match &listener {
        Some(l) => l.local_addr().map_err(io)?.port(),
        None => 0,
    };
    write_frame(
        &mut stream,
        Tag::Hello,
        &hello(rv.rank, rv.world_size, agreement, rv.all_reduce, ring_port),
    )
    .map_err(io)?;
    // Rank 0 answers once every rank has joined: wait as long as it waits for them.
    stream.set_read_timeout(Some(wait)).map_err(io)?;
    let (tag, payload) = read_frame(&mut stream).map_err(io)?;
    stream
        .set_read_timeout(Some(rv.collective_timeout * 2))
        .map_err(io)?;
    match tag {
        Tag::Welcome => {
            let ring = match rv.all_reduce {
                AllReduce::Ring => Some(link::ring_links(
                    &stream,
                    listener,
                    &String::from_utf8_lossy(&payload),
                    rv,
                    agreement,
                )?),
                AllReduce::Star => None,
            };
            Ok((Role::Worker(stream), ring))
        }
        Tag::Reject => Err(CommError::Mismatch(
            String::from_utf8_lossy(&payload).into_owned(),
        )),
        // Rank 0 ended the rendezvous (it refused another rank's handshake, timed out waiting
        // for a rank, or lost one while welcoming): its reason, and whether retrying can help
        // (a refused handshake: no, exit 1; a timeout or a lost rank: yes, exit 130).
        Tag::Abort => Err(CommError::aborted(&payload)),
        other => Err(CommError::Protocol {
            rank: 0,
            detail: format!("answered the handshake with {other:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::differences;

    #[test]
    fn a_mismatch_names_each_differing_field_and_no_more_than_six() {
        let ours = r#"{"dataset":"FashionMnist","hyperparameters":{"lr":"0.02","seed":1},"train_examples":60000}"#;
        let theirs = r#"{"dataset":"FashionMnist","hyperparameters":{"lr":"0.02","seed":2},"train_examples":3000}"#;
        assert_eq!(
            differences(1, theirs, ours),
            "hyperparameters.seed 2 on rank 1, 1 on rank 0; train_examples 3000 on rank 1, 60000 \
             on rank 0"
        );
        let many: String = (0..8)
            .map(|i| format!(r#""k{i}":{i}"#))
            .collect::<Vec<_>>()
            .join(",");
        let listed = differences(2, &format!("{{{many}}}"), "{}");
        assert!(
            listed.starts_with("k0 0 on rank 2, unset on rank 0; ")
                && listed.ends_with("; and 2 more"),
            "{listed}"
        );
        assert_eq!(
            differences(3, "not json", "{}"),
            "rank 3 sent a configuration rank 0 cannot read"
        );
    }
}
