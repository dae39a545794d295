//! Data-parallel training as separate processes on loopback, on real Fashion-MNIST.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kfaws_trainer::checkpoint::Checkpoint;

/// 2 ranks × batch 32 for 2 epochs with the default hyperparameters (lr 0.02, momentum 0.9),
/// launched as Kubeflow Trainer v2 launches nodes: topology from `PET_*` only.
#[test]
fn two_ranks_reach_85_percent_on_fashion_mnist_in_two_epochs() {
    let data = fashion_mnist();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut ranks: Vec<Proc> = (0..2)
        .map(|r| {
            let args = [
                format!("--data-dir={}", data.display()),
                format!(
                    "--model-dir={}",
                    dir.path().join(format!("model-{r}")).display()
                ),
                format!(
                    "--checkpoint-dir={}",
                    dir.path().join(format!("ckpt-{r}")).display()
                ),
                "--bind-addr=127.0.0.1".to_string(),
                "--hp=epochs=2".to_string(),
            ];
            let env = [
                ("PET_MASTER_ADDR", "127.0.0.1".to_string()),
                ("PET_MASTER_PORT", port.to_string()),
                ("PET_NNODES", "2".to_string()),
                ("PET_NODE_RANK", r.to_string()),
            ];
            spawn_train(dir.path(), &format!("rank{r}"), &args, &env)
        })
        .collect();
    for (r, p) in ranks.iter_mut().enumerate() {
        assert_eq!(
            p.wait(Duration::from_secs(900)),
            0,
            "rank {r} failed:\n{}",
            p.stderr()
        );
    }
    assert!(
        ranks[1].stderr().contains("launcher=TrainerV2"),
        "{}",
        ranks[1].stderr()
    );
    let accuracies = ranks[0].test_accuracies();
    eprintln!("{}", ranks[0].stdout());
    assert_eq!(
        accuracies.len(),
        2,
        "two epoch lines:\n{}",
        ranks[0].stdout()
    );
    assert!(
        accuracies[1] >= 0.85,
        "test accuracy after 2 epochs: {accuracies:?}"
    );
    assert!(ranks[1].stdout().is_empty(), "only rank 0 prints metrics");
    let model = dir.path().join("model-0");
    assert!(model.join("model.bpk").is_file() && model.join("model.json").is_file());
    assert!(
        !dir.path().join("model-1").exists(),
        "only rank 0 writes the model"
    );
}

/// Final parameters of a Fashion-MNIST run, from the checkpoint rank 0 wrote after the last
/// epoch.
fn final_params(dir: &std::path::Path, param_count: usize) -> Vec<f32> {
    Checkpoint::load_newest(&dir.join("ckpt-0"), param_count, "fashion-mnist")
        .unwrap()
        .unwrap()
        .0
        .params
}

/// 1 rank with batch 64 and 2 ranks with batch 32 take the same steps: each step the two ranks
/// together see the single rank's 64 examples, and the averaged gradient of two 32-example
/// means is the 64-example mean. Only floating-point summation order differs: after 32 steps
/// the parameters agree to within 1e-5 absolute (measured: 1e-7 at lr 0.05). Rounding
/// differences are amplified by unstable early training, so the bound is for a short run:
/// measured at lr 0.05 / momentum 0.9, 16 steps → 2e-8, 32 → 1e-7, 48 → 3e-2 (a ReLU or
/// max-pool switch flips); at lr 0.01, 48 steps → 8e-7.
#[test]
fn one_rank_batch_64_equals_two_ranks_batch_32() {
    let data = fashion_mnist();
    let hp = [
        "epochs=1",
        "max-train-samples=2048",
        "test-batch-size=2000",
        "lr=0.05",
    ];
    let single = tempfile::tempdir().unwrap();
    let mut hp64 = hp.to_vec();
    hp64.push("batch-size=64");
    let mut one = spawn_train(
        single.path(),
        "single",
        &rank_args(single.path(), &data, 0, 1, free_port(), &hp64),
        &[],
    );
    let pair = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut hp32 = hp.to_vec();
    hp32.push("batch-size=32");
    // The pair is launched as a Kubeflow PyTorchJob launches replicas: topology from
    // MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK, no topology flags.
    let mut two: Vec<Proc> = (0..2)
        .map(|r| {
            let mut args = vec![
                format!("--data-dir={}", data.display()),
                format!(
                    "--model-dir={}",
                    pair.path().join(format!("model-{r}")).display()
                ),
                format!(
                    "--checkpoint-dir={}",
                    pair.path().join(format!("ckpt-{r}")).display()
                ),
                "--bind-addr=127.0.0.1".to_string(),
            ];
            args.extend(hp32.iter().map(|h| format!("--hp={h}")));
            let env = [
                ("MASTER_ADDR", "127.0.0.1".to_string()),
                ("MASTER_PORT", port.to_string()),
                ("WORLD_SIZE", "2".to_string()),
                ("RANK", r.to_string()),
            ];
            spawn_train(pair.path(), &format!("rank{r}"), &args, &env)
        })
        .collect();
    assert_eq!(one.wait(Duration::from_secs(600)), 0, "{}", one.stderr());
    for p in two.iter_mut() {
        assert_eq!(p.wait(Duration::from_secs(600)), 0, "{}", p.stderr());
        assert!(p.stderr().contains("launcher=PyTorchJob"), "{}", p.stderr());
    }
    let a = final_params(single.path(), 44_426);
    let b = final_params(pair.path(), 44_426);
    let max_diff = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    eprintln!("max |Δparam| between 1×64 and 2×32: {max_diff:e}");
    assert!(max_diff <= 1e-5, "max |Δparam| = {max_diff:e}");
    // Both runs really trained (agreeing parameters are not untouched ones).
    for accuracy in [one.test_accuracies(), two[0].test_accuracies()] {
        // Chance is 0.1; 32 steps reach about 0.43.
        assert!(
            accuracy[0] > 0.3,
            "test accuracy after 32 steps: {accuracy:?}"
        );
    }
}

/// Killing one rank fails the other within the collective timeout, naming the dead rank;
/// stopping one (SIGSTOP: hung) does the same. Configured through `TRAINER_*` variables.
#[test]
fn dead_or_hung_rank_fails_the_other_within_the_timeout() {
    let data = fashion_mnist();
    for signal in ["KILL", "STOP"] {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let env = |rank: usize| {
            vec![
                ("TRAINER_DATA_DIR", data.display().to_string()),
                (
                    "TRAINER_MODEL_DIR",
                    dir.path().join(format!("m{rank}")).display().to_string(),
                ),
                ("TRAINER_RANK", rank.to_string()),
                ("TRAINER_WORLD_SIZE", "2".to_string()),
                ("TRAINER_MASTER_ADDR", "127.0.0.1".to_string()),
                ("TRAINER_MASTER_PORT", port.to_string()),
                ("TRAINER_BIND_ADDR", "127.0.0.1".to_string()),
                ("TRAINER_COLLECTIVE_TIMEOUT", "3".to_string()),
                (
                    "TRAINER_HYPERPARAMETERS",
                    "epochs=5,log-interval=20".to_string(),
                ),
            ]
        };
        let mut rank0 = spawn_train(dir.path(), "rank0", &[], &env(0));
        let mut rank1 = spawn_train(dir.path(), "rank1", &[], &env(1));
        rank0.wait_for_log("step=20", Duration::from_secs(300));
        let pid = rank1.child.id().to_string();
        assert!(std::process::Command::new("kill")
            .args([format!("-{signal}"), pid])
            .status()
            .unwrap()
            .success());
        let killed_at = Instant::now();
        let code = rank0.wait(Duration::from_secs(60));
        let took = killed_at.elapsed();
        let _ = rank1.child.kill();
        let stderr = rank0.stderr();
        assert_eq!(code, 130, "SIG{signal}: exit code\n{stderr}");
        assert!(
            stderr.contains("rank 1"),
            "SIG{signal}: names rank 1\n{stderr}"
        );
        // Dead: noticed at once. Hung: after the 3 s timeout (plus the step in flight).
        assert!(
            took < Duration::from_secs(10),
            "SIG{signal}: rank 0 took {took:?} to fail"
        );
    }
}

/// A signal to one rank only (SIGINT to rank 1, as when one process of a local job is
/// interrupted) stops both after the same step: the wish rides on the gradient all-reduce, so
/// rank 0 checkpoints and both exit 143, rather than rank 1 leaving mid-collective and rank 0
/// failing without a checkpoint.
#[test]
fn a_signal_to_one_rank_stops_every_rank_at_the_same_step_with_a_checkpoint() {
    let data = fashion_mnist();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // The whole training set, so the signal lands mid-epoch however fast the machine is.
    let hp = ["epochs=1", "max-train-samples=60000", "log-interval=10"];
    let mut ranks = spawn_pair(dir.path(), &data, port, &hp);
    ranks[0].wait_for_log("step=20", Duration::from_secs(300));
    assert!(std::process::Command::new("kill")
        .args(["-INT", &ranks[1].child.id().to_string()])
        .status()
        .unwrap()
        .success());
    for (rank, p) in ranks.iter_mut().enumerate() {
        let code = p.wait(Duration::from_secs(60));
        assert_eq!(code, 143, "rank {rank}: exit code\n{}", p.stderr());
        assert!(
            p.stderr().contains("stopped by SIGTERM or SIGINT"),
            "rank {rank}\n{}",
            p.stderr()
        );
    }
    if let Err(saved) = has_mid_epoch_checkpoint(&dir.path().join("ckpt-0")) {
        panic!(
            "rank 0 did not checkpoint mid-epoch: {saved:?}\n{}",
            ranks[0].stderr()
        );
    }
}

/// Rank 0 failing on its own between collectives tells the other rank why: its checkpoint
/// directory is made a regular file during epoch 1, so the checkpoint after that epoch cannot
/// be written. Rank 1, already waiting in epoch 2's first all-reduce, reports rank 0's abort
/// with the checkpoint's path instead of "rank 0 closed its connection". Both exit 1: a
/// checkpoint directory that is a file is a configuration error a retry would meet again.
#[test]
fn rank_0_failing_to_write_its_checkpoint_tells_the_other_rank_why() {
    let data = fashion_mnist();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // The whole training set, so epoch 1 is still running when the file appears.
    let hp = ["epochs=2", "max-train-samples=60000", "log-interval=10"];
    let mut ranks = spawn_pair(dir.path(), &data, port, &hp);
    ranks[0].wait_for_log("step=10", Duration::from_secs(300));
    let checkpoints = dir.path().join("ckpt-0");
    // Made, and checked writable, at the start; nothing checkpointed before epoch 1 ends.
    std::fs::remove_dir(&checkpoints).expect("the checkpoint directory, empty");
    std::fs::write(&checkpoints, b"not a directory").unwrap();
    let codes: Vec<i32> = ranks
        .iter_mut()
        .map(|p| p.wait(Duration::from_secs(600)))
        .collect();
    let (rank0, rank1) = (ranks[0].stderr(), ranks[1].stderr());
    assert_eq!(
        codes,
        [1, 1],
        "exit codes\nrank 0:\n{rank0}\nrank 1:\n{rank1}"
    );
    assert!(
        ranks[0].stdout().contains("epoch=1 "),
        "epoch 1 ended before the checkpoint failed\n{rank0}"
    );
    for stderr in [&rank0, &rank1] {
        assert!(
            stderr.contains(&format!("checkpoint {}", checkpoints.display())),
            "names the checkpoint\n{stderr}"
        );
    }
    assert!(
        rank1.contains("rank 0 aborted the job"),
        "rank 1 says rank 0 aborted\n{rank1}"
    );
    assert!(!rank1.contains("closed its connection"), "{rank1}");
}

/// Only rank 0 reads the checkpoint; when it refuses one written mid-epoch with other
/// sampling settings (batch-size 32 where this run has 64), the other rank reports the same
/// diagnosis from rank 0's abort rather than a closed connection. Both exit 1: a
/// configuration error, which the abort says is permanent, so a restart policy on exit codes
/// (PyTorchJob `ExitCode`) restarts neither.
#[test]
fn a_mid_epoch_checkpoint_of_another_batch_size_stops_every_rank_with_the_same_diagnosis() {
    use kfaws_trainer::checkpoint::Sampling;
    let data = fashion_mnist();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = Checkpoint {
        epoch: 1,
        step: 5,
        dataset: "fashion-mnist".into(),
        sampling: Some(Sampling {
            batch_size: 32,
            world_size: 2,
            seed: 1,
            train_examples: 2048,
        }),
        params: vec![0.0; 44_426],
        velocity: Vec::new(),
    }
    .save(&dir.path().join("ckpt-0"))
    .unwrap();
    let hp = [
        "epochs=1",
        "max-train-samples=2048",
        "batch-size=64",
        "seed=1",
    ];
    let mut ranks = spawn_pair(dir.path(), &data, port, &hp);
    let codes: Vec<i32> = ranks
        .iter_mut()
        .map(|p| p.wait(Duration::from_secs(120)))
        .collect();
    let (rank0, rank1) = (ranks[0].stderr(), ranks[1].stderr());
    assert_eq!(
        codes,
        [1, 1],
        "exit codes\nrank 0:\n{rank0}\nrank 1:\n{rank1}"
    );
    let diagnosis = format!(
        "checkpoint {} was written 5 step(s) into epoch 1 with batch-size 32, but this run has \
         batch-size 64",
        path.display()
    );
    for stderr in [&rank0, &rank1] {
        assert!(stderr.contains(&diagnosis), "{stderr}");
    }
    assert!(rank1.contains("rank 0 aborted the job"), "{rank1}");
    assert!(ranks[0].stdout().is_empty(), "no epoch ran");
}

/// 3 ranks with the ring all-reduce (`--all-reduce=ring`: the rank 1 → rank 2 link is a
/// connection of its own) take the same steps as 3 ranks with the star: only the summation
/// order of the gradients differs (ring: each chunk from its own rank round the ring; star:
/// rank order), so after 22 steps the parameters agree within the 1e-5 of the test above
/// (measured: 1.5e-8).
#[test]
fn three_ranks_with_the_ring_match_three_with_the_star() {
    let data = fashion_mnist();
    let hp = [
        "epochs=1",
        "max-train-samples=2048",
        "test-batch-size=2000",
        "lr=0.05",
        "batch-size=32",
    ];
    let runs: Vec<(tempfile::TempDir, Vec<Proc>)> = ["star", "ring"]
        .into_iter()
        .map(|algorithm| {
            let dir = tempfile::tempdir().unwrap();
            let port = free_port();
            let procs = (0..3)
                .map(|r| {
                    let mut args = rank_args(dir.path(), &data, r, 3, port, &hp);
                    args.push(format!("--all-reduce={algorithm}"));
                    spawn_train(dir.path(), &format!("rank{r}"), &args, &[])
                })
                .collect();
            (dir, procs)
        })
        .collect();
    let mut params = Vec::new();
    for (dir, mut procs) in runs {
        for p in procs.iter_mut() {
            assert_eq!(p.wait(Duration::from_secs(600)), 0, "{}", p.stderr());
        }
        params.push(final_params(dir.path(), 44_426));
    }
    let max_diff = params[0]
        .iter()
        .zip(&params[1])
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    eprintln!("max |Δparam| between star and ring, 3 ranks: {max_diff:e}");
    assert!(max_diff <= 1e-5, "max |Δparam| = {max_diff:e}");
}

/// Ranks 0 and 1 of 2 on loopback `port`, training on `data` with hyperparameters `hp`, each
/// with its own model and checkpoint directory under `dir` ([`rank_args`]).
fn spawn_pair(dir: &std::path::Path, data: &std::path::Path, port: u16, hp: &[&str]) -> Vec<Proc> {
    (0..2)
        .map(|rank| {
            spawn_train(
                dir,
                &format!("rank{rank}"),
                &rank_args(dir, data, rank, 2, port, hp),
                &[],
            )
        })
        .collect()
}
