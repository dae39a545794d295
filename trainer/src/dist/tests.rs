//! The all-reduce on 1–4 in-process ranks over loopback TCP, and its failure modes.

use super::*;
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Instant;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn rendezvous(port: u16, rank: usize, world_size: usize) -> Rendezvous {
    Rendezvous {
        master_addr: "127.0.0.1".into(),
        master_port: port,
        bind_addr: "127.0.0.1".into(),
        rank,
        world_size,
        connect_timeout: Duration::from_secs(10),
        collective_timeout: Duration::from_millis(500),
        all_reduce: AllReduce::Star,
    }
}

fn agreement(param_count: u64) -> Agreement {
    Agreement {
        param_count,
        config: "{}".to_string(),
    }
}

/// A raw connection to rank 0's port on loopback, retried for up to 5 s until it listens.
fn connect_once_listening(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Runs `body` on `world_size` ranks, each in its own thread, and returns their results by rank.
fn run_ranks<T: Send + 'static>(
    world_size: usize,
    setup: impl Fn(usize) -> (Rendezvous, Agreement),
    body: impl Fn(usize, Result<Communicator, CommError>) -> T + Send + Sync + Copy + 'static,
) -> Vec<T> {
    let handles: Vec<_> = (0..world_size)
        .map(|rank| {
            let (rv, ag) = setup(rank);
            thread::spawn(move || body(rank, Communicator::connect(&rv, &ag)))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn all_reduce_sums_and_averages_identically_on_1_to_4_ranks() {
    for world in 1..=4 {
        let port = free_port();
        let results = run_ranks(
            world,
            |r| (rendezvous(port, r, world), agreement(5)),
            move |rank, comm| {
                let mut comm = comm.unwrap();
                let mut sum: Vec<f32> = (0..5).map(|i| (rank * 10 + i) as f32 + 0.1).collect();
                comm.all_reduce_sum(&mut sum).unwrap();
                let mut mean = vec![rank as f32; 5];
                comm.all_reduce_mean(&mut mean).unwrap();
                (sum, mean)
            },
        );
        let expected_sum: Vec<f32> = (0..5)
            .map(|i| (0..world).fold(0f32, |acc, r| acc + ((r * 10 + i) as f32 + 0.1)))
            .collect();
        let expected_mean = (0..world).sum::<usize>() as f32 / world as f32;
        for (rank, (sum, mean)) in results.iter().enumerate() {
            assert_eq!(sum, &expected_sum, "world {world} rank {rank}");
            assert!(
                mean.iter().all(|m| (m - expected_mean).abs() < 1e-6),
                "world {world} rank {rank}"
            );
        }
        // Bit-identical on every rank, whatever the network did.
        assert!(results.iter().all(|r| r.0 == results[0].0));
    }
}

#[test]
fn broadcast_copies_rank_zero_values() {
    let port = free_port();
    let results = run_ranks(
        3,
        |r| (rendezvous(port, r, 3), agreement(3)),
        |rank, comm| {
            let mut values = vec![rank as f32; 3];
            comm.unwrap().broadcast(&mut values).unwrap();
            values
        },
    );
    assert!(results.iter().all(|v| v == &vec![0.0; 3]));
}

#[test]
fn worker_started_before_rank_zero_connects_after_retries() {
    let port = free_port();
    let worker = thread::spawn(move || {
        let mut comm = Communicator::connect(&rendezvous(port, 1, 2), &agreement(1)).unwrap();
        let mut v = [2.0];
        comm.all_reduce_sum(&mut v).unwrap();
        v[0]
    });
    thread::sleep(Duration::from_millis(600));
    let mut root = Communicator::connect(&rendezvous(port, 0, 2), &agreement(1)).unwrap();
    let mut v = [1.0];
    root.all_reduce_sum(&mut v).unwrap();
    assert_eq!((v[0], worker.join().unwrap()), (3.0, 3.0));
}

#[test]
fn handshake_mismatches_fail_both_sides_with_the_reason() {
    type Setup = Box<dyn Fn(usize) -> (Rendezvous, Agreement)>;
    let cases: [(&str, Setup); 3] = [
        (
            "model parameters",
            Box::new(|r| (rendezvous(0, r, 2), agreement(10 + r as u64))),
        ),
        (
            "training configuration differs from rank 0's: hyperparameters.lr \"0.02\" on rank 1, \
             \"0.01\" on rank 0",
            Box::new(|r| {
                (
                    rendezvous(0, r, 2),
                    Agreement {
                        param_count: 1,
                        config: format!(
                            r#"{{"hyperparameters":{{"lr":"0.0{}","seed":1}}}}"#,
                            r + 1
                        ),
                    },
                )
            }),
        ),
        (
            "world size",
            Box::new(|r| (rendezvous(0, r, 2 + r), agreement(1))),
        ),
    ];
    for (needle, setup) in cases {
        let port = free_port();
        let results = run_ranks(
            2,
            |r| {
                let (mut rv, ag) = setup(r);
                rv.master_port = port;
                (rv, ag)
            },
            |_, comm| comm.map(|_| ()).unwrap_err(),
        );
        for (rank, err) in results.iter().enumerate() {
            assert!(matches!(err, CommError::Mismatch(_)), "rank {rank}: {err}");
            assert!(err.to_string().contains(needle), "rank {rank}: {err}");
            assert!(!err.is_transient());
        }
    }
}

/// With three or more ranks, a worker admitted before another rank's handshake is refused
/// learns it from rank 0's abort: a configuration error for it too (not transient, so not
/// retried by a restart policy), with the reason.
#[test]
fn an_admitted_worker_fails_permanently_when_rank_zero_refuses_another() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let rank_zero = thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let (tag, _) = wire::read_frame(&mut stream).unwrap();
        assert_eq!(tag, wire::Tag::Hello);
        let reason = "rank 2 has 11 model parameters, rank 0 has 1";
        wire::write_frame(
            &mut stream,
            wire::Tag::Abort,
            &wire::abort_payload(0, true, reason),
        )
        .unwrap();
    });
    let Err(err) = Communicator::connect(&rendezvous(port, 1, 3), &agreement(1)) else {
        panic!("rank 0 refused the rendezvous");
    };
    rank_zero.join().unwrap();
    assert!(
        matches!(
            err,
            CommError::Aborted {
                rank: 0,
                permanent: true,
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.is_transient(), "{err}");
    assert!(
        err.to_string()
            .contains("rank 2 has 11 model parameters, rank 0 has 1"),
        "{err}"
    );
}

#[test]
fn dead_peer_fails_every_rank_naming_it() {
    let port = free_port();
    let results = run_ranks(
        3,
        |r| (rendezvous(port, r, 3), agreement(2)),
        |rank, comm| {
            let mut comm = comm.unwrap();
            let mut v = [1.0, 2.0];
            comm.all_reduce_sum(&mut v).unwrap();
            if rank == 2 {
                drop(comm); // the process "dies": its socket closes
                return None;
            }
            Some(comm.all_reduce_sum(&mut v).unwrap_err())
        },
    );
    let root = results[0].as_ref().unwrap();
    assert!(matches!(root, CommError::PeerClosed { rank: 2 }), "{root}");
    let worker = results[1].as_ref().unwrap();
    assert!(
        matches!(worker, CommError::Aborted { rank: 0, .. }),
        "{worker}"
    );
    assert!(
        worker.to_string().contains("rank 2 closed its connection"),
        "{worker}"
    );
    assert!(worker.is_transient());
}

#[test]
fn hung_peer_fails_within_the_timeout_naming_it() {
    let port = free_port();
    let results = run_ranks(
        3,
        |r| (rendezvous(port, r, 3), agreement(1)),
        |rank, comm| {
            let mut comm = comm.unwrap();
            let started = Instant::now();
            if rank == 1 {
                thread::sleep(Duration::from_secs(3)); // hung: never joins the collective
                return None;
            }
            let err = comm.all_reduce_sum(&mut [1.0]).unwrap_err();
            Some((err, started.elapsed()))
        },
    );
    let (root, root_took) = results[0].as_ref().unwrap();
    assert!(
        matches!(root, CommError::PeerTimeout { rank: 1, .. }),
        "{root}"
    );
    assert!(
        *root_took < Duration::from_millis(1500),
        "rank 0 took {root_took:?}"
    );
    let (worker, worker_took) = results[2].as_ref().unwrap();
    assert!(
        worker.to_string().contains("rank 1 did not respond"),
        "{worker}"
    );
    assert!(
        *worker_took < Duration::from_millis(1500),
        "rank 2 took {worker_took:?}"
    );
}

/// A gradient larger than the socket buffers (8 MB here) leaves a worker blocked writing to
/// rank 0 while rank 0 waits on the hung rank; the worker must still learn from rank 0's abort
/// which rank hung, not time out first and blame rank 0.
#[test]
fn a_worker_still_sending_a_large_gradient_names_the_hung_rank() {
    let port = free_port();
    let results = run_ranks(
        3,
        |r| (rendezvous(port, r, 3), agreement(1)),
        |rank, comm| {
            let mut comm = comm.unwrap();
            if rank == 1 {
                thread::sleep(Duration::from_secs(3)); // hung: never joins the collective
                return None;
            }
            let mut values = vec![1.0f32; 1 << 21];
            Some(comm.all_reduce_sum(&mut values).unwrap_err())
        },
    );
    let root = results[0].as_ref().unwrap();
    assert!(
        matches!(root, CommError::PeerTimeout { rank: 1, .. }),
        "{root}"
    );
    let worker = results[2].as_ref().unwrap();
    assert!(
        matches!(worker, CommError::Aborted { rank: 0, .. })
            && worker.to_string().contains("rank 1 did not respond"),
        "{worker}"
    );
}

#[test]
fn missing_rank_times_out_the_rendezvous_naming_it() {
    let port = free_port();
    let mut rv = rendezvous(port, 0, 3);
    rv.connect_timeout = Duration::from_millis(800);
    let worker = thread::spawn(move || {
        Communicator::connect(&rendezvous(port, 1, 3), &agreement(1)).map(|_| ())
    });
    let err = Communicator::connect(&rv, &agreement(1)).unwrap_err();
    assert!(
        matches!(&err, CommError::RendezvousTimeout { missing, .. } if missing == &vec![2]),
        "{err}"
    );
    assert!(worker.join().unwrap().is_err());
}

/// Rank 0, giving up on a rank that never started, tells the ranks it admitted why: they
/// report its reason (not "rank 0 closed its connection"), and as transient (exit 130), as a
/// timeout is on rank 0.
#[test]
fn admitted_workers_report_rank_zeros_rendezvous_timeout_as_transient() {
    let port = free_port();
    let setup = move |rank| {
        let mut rv = rendezvous(port, rank, 3);
        rv.connect_timeout = Duration::from_secs(1);
        rv
    };
    let root = {
        let rv = setup(0);
        thread::spawn(move || Communicator::connect(&rv, &agreement(1)).map(|_| ()))
    };
    // Rank 2 is never started.
    let worker = Communicator::connect(&setup(1), &agreement(1)).map(|_| ());
    let root = root.join().unwrap().unwrap_err();
    assert!(
        matches!(&root, CommError::RendezvousTimeout { missing, .. } if missing == &vec![2]),
        "{root}"
    );
    let worker = worker.unwrap_err();
    assert!(
        matches!(
            worker,
            CommError::Aborted {
                rank: 0,
                permanent: false,
                ..
            }
        ),
        "{worker}"
    );
    assert!(
        worker.to_string().contains("waited 1s for ranks [2]"),
        "{worker}"
    );
    assert!(worker.is_transient(), "{worker}");
}

#[test]
fn accept_errors_of_one_connection_or_a_passing_shortage_are_transient() {
    use std::io::{Error, ErrorKind};
    for kind in [
        ErrorKind::ConnectionAborted,
        ErrorKind::Interrupted,
        ErrorKind::NetworkDown,
        ErrorKind::NetworkUnreachable,
        ErrorKind::HostUnreachable,
        ErrorKind::PermissionDenied,
        ErrorKind::OutOfMemory,
        ErrorKind::WouldBlock,
    ] {
        assert!(
            handshake::accept_error_is_transient(&Error::from(kind)),
            "{kind:?}"
        );
    }
    // Linux errno values (asm-generic/errno.h) that std does not name: EPROTO, EMFILE,
    // ENFILE, ENOBUFS.
    #[cfg(target_os = "linux")]
    for errno in [71, 24, 23, 105] {
        let e = Error::from_raw_os_error(errno);
        assert!(handshake::accept_error_is_transient(&e), "{e}");
    }
    // EINVAL: the socket is not listening.
    assert!(!handshake::accept_error_is_transient(&Error::from(
        ErrorKind::InvalidInput
    )));
}

#[test]
fn connecting_to_nobody_times_out_naming_the_address() {
    let mut rv = rendezvous(free_port(), 1, 2);
    rv.connect_timeout = Duration::from_millis(400);
    let err = Communicator::connect(&rv, &agreement(1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rank 1 could not connect to rank 0 at 127.0.0.1:"),
        "{err}"
    );
}

#[test]
fn stray_connection_is_ignored_and_the_rendezvous_completes() {
    let port = free_port();
    let root = thread::spawn(move || {
        let mut comm = Communicator::connect(&rendezvous(port, 0, 2), &agreement(1)).unwrap();
        let mut v = [1.0];
        comm.all_reduce_sum(&mut v).unwrap();
        v[0]
    });
    // A health check or port scan: connects, says something that is not a handshake, leaves.
    let mut stray = connect_once_listening(port);
    std::io::Write::write_all(&mut stray, b"GET / HTTP/1.0\r\n\r\n").unwrap();
    drop(stray);
    let mut worker = Communicator::connect(&rendezvous(port, 1, 2), &agreement(1)).unwrap();
    let mut v = [2.0];
    worker.all_reduce_sum(&mut v).unwrap();
    assert_eq!((root.join().unwrap(), v[0]), (3.0, 3.0));
}

/// A worker that died after its handshake and was started again (a restarted pod) takes its
/// closed connection's place; a second live process claiming a rank is still refused.
#[test]
fn a_rank_restarted_during_the_rendezvous_takes_its_closed_connections_place() {
    let port = free_port();
    let root = thread::spawn(move || {
        let mut comm = Communicator::connect(&rendezvous(port, 0, 3), &agreement(1)).unwrap();
        let mut v = [1.0];
        comm.all_reduce_sum(&mut v).unwrap();
        v[0]
    });
    let mut first = connect_once_listening(port);
    let payload = handshake::hello(1, 3, &agreement(1), AllReduce::Star, 0);
    wire::write_frame(&mut first, wire::Tag::Hello, &payload).unwrap();
    drop(first);
    let ranks: Vec<_> = [1, 2]
        .into_iter()
        .map(|rank| {
            thread::spawn(move || {
                let mut comm =
                    Communicator::connect(&rendezvous(port, rank, 3), &agreement(1)).unwrap();
                let mut v = [rank as f32 + 1.0];
                comm.all_reduce_sum(&mut v).unwrap();
                v[0]
            })
        })
        .collect();
    let sums: Vec<f32> = ranks.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!((root.join().unwrap(), sums), (6.0, vec![6.0, 6.0]));

    // The first process still connected: the second claim of rank 1 is refused, as transient
    // on both sides (a node lost without a word leaves its rank's connection looking open
    // while the rank's pod starts again elsewhere; a retry of the job can succeed).
    let port = free_port();
    let root = thread::spawn(move || {
        Communicator::connect(&rendezvous(port, 0, 3), &agreement(1)).expect_err("rank 0 refuses")
    });
    let mut alive = connect_once_listening(port);
    let payload = handshake::hello(1, 3, &agreement(1), AllReduce::Star, 0);
    wire::write_frame(&mut alive, wire::Tag::Hello, &payload).unwrap();
    let Err(second) = Communicator::connect(&rendezvous(port, 1, 3), &agreement(1)) else {
        panic!("the second claim of rank 1 is refused");
    };
    let err = root.join().unwrap();
    assert!(matches!(err, CommError::RankClaimed { rank: 1 }), "{err}");
    assert!(
        err.to_string().contains("two processes claim rank 1"),
        "{err}"
    );
    assert!(err.is_transient(), "{err}");
    assert!(
        second.to_string().contains("two processes claim rank 1"),
        "{second}"
    );
    assert!(second.is_transient(), "{second}");
    // The first connection is told too, as transient.
    let (tag, abort) = wire::read_frame(&mut alive).unwrap();
    assert_eq!(tag, wire::Tag::Abort);
    assert!(!wire::parse_abort(&abort).1);
    drop(alive);
}

fn ring_rendezvous(port: u16, rank: usize, world_size: usize) -> Rendezvous {
    Rendezvous {
        all_reduce: AllReduce::Ring,
        ..rendezvous(port, rank, world_size)
    }
}

/// Rank `rank`'s value at index `i`: not exactly representable, so the order of additions
/// shows in the bits.
fn ring_input(rank: usize, i: usize) -> f32 {
    (rank * 10 + i) as f32 + 0.1
}

/// The documented ring order: element `i` lies in chunk `c` (`[c·L/N, (c+1)·L/N)`), summed
/// from rank `c` round the ring.
fn ring_order_sum(i: usize, len: usize, world: usize) -> f32 {
    let c = (0..world)
        .find(|c| c * len / world <= i && i < (c + 1) * len / world)
        .unwrap();
    (1..world).fold(ring_input(c, i), |acc, k| {
        acc + ring_input((c + k) % world, i)
    })
}

#[test]
fn ring_all_reduce_sums_identically_on_1_to_4_ranks_for_any_length() {
    // Lengths shorter than the world (empty chunks), not divisible by it, and divisible.
    let lengths = [0usize, 1, 2, 3, 5, 7, 12, 1001];
    for world in 1..=4 {
        let port = free_port();
        let results = run_ranks(
            world,
            |r| (ring_rendezvous(port, r, world), agreement(1)),
            move |rank, comm| {
                let mut comm = comm.unwrap();
                assert_eq!(
                    comm.algorithm(),
                    if world > 1 {
                        AllReduce::Ring
                    } else {
                        AllReduce::Star
                    }
                );
                let sums: Vec<Vec<f32>> = lengths
                    .iter()
                    .map(|&len| {
                        let mut v: Vec<f32> = (0..len).map(|i| ring_input(rank, i)).collect();
                        comm.all_reduce_sum(&mut v).unwrap();
                        v
                    })
                    .collect();
                let mut mean = vec![rank as f32; 3];
                comm.all_reduce_mean(&mut mean).unwrap();
                // The star's links still carry the broadcast.
                let mut from_root = vec![rank as f32 + 1.0; 4];
                comm.broadcast(&mut from_root).unwrap();
                (sums, mean, from_root)
            },
        );
        let expected_mean = (0..world).sum::<usize>() as f32 / world as f32;
        for (rank, (sums, mean, from_root)) in results.iter().enumerate() {
            for (sum, &len) in sums.iter().zip(&lengths) {
                let expected: Vec<f32> = (0..len).map(|i| ring_order_sum(i, len, world)).collect();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(sum),
                    bits(&expected),
                    "world {world} rank {rank} len {len}"
                );
                // Within rounding of the exact sum, whatever the order.
                for (i, s) in sum.iter().enumerate() {
                    let exact: f64 = (0..world).map(|r| ring_input(r, i) as f64).sum();
                    assert!(
                        (*s as f64 - exact).abs() < 1e-3,
                        "len {len} [{i}]: {s} vs {exact}"
                    );
                }
            }
            assert!(mean.iter().all(|m| (m - expected_mean).abs() < 1e-6));
            assert_eq!(from_root, &vec![1.0; 4]);
        }
        // Bit-identical on every rank.
        assert!(results.iter().all(|r| r.0 == results[0].0));
    }
}

#[test]
fn ring_carries_vectors_larger_than_the_socket_buffers() {
    // 4 MiB per rank: each ring step's chunk exceeds loopback's default socket buffers, so
    // sends that did not overlap receives would deadlock.
    let port = free_port();
    let len = 1 << 20;
    let results = run_ranks(
        3,
        |r| (ring_rendezvous(port, r, 3), agreement(1)),
        move |rank, comm| {
            let mut v: Vec<f32> = (0..len).map(|i| (rank + i % 7) as f32).collect();
            comm.unwrap().all_reduce_sum(&mut v).unwrap();
            v
        },
    );
    for v in &results {
        assert!(v
            .iter()
            .enumerate()
            .all(|(i, x)| *x == (3 + 3 * (i % 7)) as f32));
    }
}

#[test]
fn all_reduce_algorithms_must_match_at_the_handshake() {
    let port = free_port();
    let results = run_ranks(
        2,
        |r| {
            let rv = if r == 0 {
                rendezvous(port, 0, 2)
            } else {
                ring_rendezvous(port, 1, 2)
            };
            (rv, agreement(1))
        },
        |_, comm| comm.map(|_| ()).unwrap_err(),
    );
    for (rank, err) in results.iter().enumerate() {
        assert!(matches!(err, CommError::Mismatch(_)), "rank {rank}: {err}");
        assert!(
            err.to_string()
                .contains("rank 1 uses the ring all-reduce, rank 0 the star"),
            "rank {rank}: {err}"
        );
    }
}

#[test]
fn ring_dead_peer_fails_every_rank_naming_it() {
    let port = free_port();
    let results = run_ranks(
        4,
        |r| (ring_rendezvous(port, r, 4), agreement(2)),
        |rank, comm| {
            let mut comm = comm.unwrap();
            let mut v = [1.0, 2.0];
            comm.all_reduce_sum(&mut v).unwrap();
            if rank == 2 {
                drop(comm); // the process "dies": its sockets close
                return None;
            }
            Some(comm.all_reduce_sum(&mut v).unwrap_err())
        },
    );
    // Rank 3, its successor, sees the close; the others hear it from rank 3 round the ring.
    let successor = results[3].as_ref().unwrap();
    assert!(
        matches!(successor, CommError::PeerClosed { rank: 2 }),
        "{successor}"
    );
    for rank in [0, 1] {
        let err = results[rank].as_ref().unwrap();
        assert!(
            matches!(err, CommError::Aborted { rank: 3, .. }),
            "rank {rank}: {err}"
        );
        assert!(
            err.to_string().contains("rank 2 closed its connection"),
            "rank {rank}: {err}"
        );
        assert!(err.is_transient());
    }
}

#[test]
fn ring_hung_peer_fails_within_the_timeout_naming_it() {
    let port = free_port();
    let results = run_ranks(
        3,
        |r| (ring_rendezvous(port, r, 3), agreement(1)),
        |rank, comm| {
            let mut comm = comm.unwrap();
            let started = Instant::now();
            if rank == 1 {
                thread::sleep(Duration::from_secs(3)); // hung: never joins the collective
                return None;
            }
            let err = comm.all_reduce_sum(&mut [1.0, 2.0, 3.0]).unwrap_err();
            Some((err, started.elapsed()))
        },
    );
    let (successor, took) = results[2].as_ref().unwrap();
    assert!(
        matches!(successor, CommError::PeerTimeout { rank: 1, .. }),
        "{successor}"
    );
    assert!(*took < Duration::from_millis(1500), "rank 2 took {took:?}");
    let (other, took) = results[0].as_ref().unwrap();
    assert!(
        matches!(other, CommError::Aborted { rank: 2, .. }),
        "{other}"
    );
    assert!(
        other.to_string().contains("rank 1 did not respond"),
        "{other}"
    );
    assert!(*took < Duration::from_millis(1500), "rank 0 took {took:?}");
}

/// Rank 2 of 4 takes the first ring step (sends its own chunk, receives its predecessor's)
/// and then hangs, still connected. Its successor, rank 3, waits `step_wait(T, 1)` = 2.25T
/// for its second frame and names rank 2; its abort travels on to ranks 0 and 1, whose own
/// waits for that step's frames end T/4 and 2·T/4 later, so they relay the diagnosis naming
/// rank 2 rather than timing out on their live predecessor.
#[test]
fn ring_rank_hung_mid_all_reduce_is_named_by_every_other_rank() {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicUsize, Ordering};
    const T: Duration = Duration::from_secs(2);
    /// Live ranks that have failed; the hung rank holds its sockets open until all 3 have.
    static FAILED: AtomicUsize = AtomicUsize::new(0);
    let port = free_port();
    let results = run_ranks(
        4,
        |r| {
            let mut rv = ring_rendezvous(port, r, 4);
            rv.collective_timeout = T;
            (rv, agreement(4))
        },
        |rank, comm| {
            let mut comm = comm.unwrap();
            let mut values = [1.0f32, 2.0, 3.0, 4.0];
            let started = Instant::now();
            if rank == 2 {
                let (prev, next) = comm.ring.as_mut().unwrap().links();
                // Step 0 of the reduce-scatter: its own chunk out, rank 1's chunk in.
                next.write_all(&wire::floats_frame(&values[2..3])).unwrap();
                let (tag, _) = wire::read_frame(prev).unwrap();
                assert_eq!(tag, wire::Tag::Floats);
                // Hung: sends nothing more, yet stays connected until the others have failed.
                let deadline = Instant::now() + 6 * T;
                while FAILED.load(Ordering::SeqCst) < 3 && Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(20));
                }
                return None;
            }
            let err = comm.all_reduce_sum(&mut values).unwrap_err();
            let took = started.elapsed();
            FAILED.fetch_add(1, Ordering::SeqCst);
            Some((err, took))
        },
    );
    let (successor, took) = results[3].as_ref().unwrap();
    assert!(
        matches!(successor, CommError::PeerTimeout { rank: 2, .. }),
        "rank 3: {successor}"
    );
    for rank in [0, 1] {
        let (err, _) = results[rank].as_ref().unwrap();
        assert!(
            matches!(err, CommError::Aborted { rank: 3, .. }),
            "rank {rank}: {err}"
        );
        assert!(
            err.to_string().contains("rank 2 did not respond"),
            "rank {rank}: {err}"
        );
        assert!(err.is_transient(), "rank {rank}: {err}");
    }
    // Rank 3 gave up at its second receive, 2T + T/4 after the first frame came; the others
    // heard of it before rank 0's own wait for its third frame (2T + 2·T/4) would have ended.
    assert!(
        *took >= T * 2 + T / 4 - Duration::from_millis(100) && *took < T * 2 + T / 2,
        "rank 3 took {took:?}"
    );
    for rank in [0, 1] {
        let (_, took) = results[rank].as_ref().unwrap();
        assert!(*took < T * 2 + T / 2, "rank {rank} took {took:?}");
    }
}
