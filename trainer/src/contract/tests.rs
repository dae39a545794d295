//! Each runtime contract, and the order in which they win.

use super::*;
use std::collections::HashMap;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

fn no_sagemaker() -> TrainArgs {
    TrainArgs {
        sagemaker_root: PathBuf::from("/nonexistent/opt/ml"),
        bind_addr: "0.0.0.0".into(),
        connect_timeout_secs: 300,
        collective_timeout_secs: 120,
        ..TrainArgs::default()
    }
}

/// A SageMaker root for host `current` of `hosts` with `hyperparameters` and a `training` channel.
fn sagemaker_root(current: &str, hosts: &[&str], hyperparameters: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("input/config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::create_dir_all(dir.path().join("input/data/training")).unwrap();
    let resource = serde_json::json!({"current_host": current, "hosts": hosts});
    std::fs::write(config.join("resourceconfig.json"), resource.to_string()).unwrap();
    std::fs::write(config.join("hyperparameters.json"), hyperparameters).unwrap();
    dir
}

#[test]
fn nothing_set_is_a_single_process_needing_a_data_dir() {
    let err = resolve(&no_sagemaker(), &env_of(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("--data-dir"), "{err}");
    let args = TrainArgs {
        data_dir: Some("/data".into()),
        ..no_sagemaker()
    };
    let config = resolve(&args, &env_of(&[])).unwrap();
    assert_eq!(config.launcher, Launcher::Single);
    assert_eq!(
        (config.rendezvous.rank, config.rendezvous.world_size),
        (0, 1)
    );
    assert_eq!(config.model_dir, PathBuf::from("model"));
    assert_eq!(config.checkpoint_dir, PathBuf::from("model/checkpoints"));
    assert_eq!(config.hp, Hyperparameters::default());
    assert!(config.failure_file.is_none());
}

#[test]
fn sagemaker_layout_gives_rank_paths_and_hyperparameters() {
    let root = sagemaker_root(
        "algo-2",
        &["algo-2", "algo-1"],
        r#"{"batch-size": "16", "epochs": "1", "sagemaker_program": "\"x\""}"#,
    );
    let args = TrainArgs {
        sagemaker_root: root.path().to_path_buf(),
        ..no_sagemaker()
    };
    let config = resolve(&args, &env_of(&[])).unwrap();
    assert_eq!(config.launcher, Launcher::SageMaker);
    assert_eq!(
        (config.rendezvous.rank, config.rendezvous.world_size),
        (1, 2)
    );
    assert_eq!(config.rendezvous.master_addr, "algo-1");
    assert_eq!(config.rendezvous.master_port, DEFAULT_MASTER_PORT);
    assert_eq!(config.data_dir, root.path().join("input/data/training"));
    assert_eq!(config.model_dir, root.path().join("model"));
    assert_eq!(config.checkpoint_dir, root.path().join("checkpoints"));
    assert_eq!(
        config.failure_file,
        Some(root.path().join("output/failure"))
    );
    assert_eq!((config.hp.batch_size, config.hp.epochs), (16, 1));
}

#[test]
fn sagemaker_wins_over_pytorchjob_environment() {
    let root = sagemaker_root("algo-1", &["algo-1"], "{}");
    let args = TrainArgs {
        sagemaker_root: root.path().to_path_buf(),
        ..no_sagemaker()
    };
    let env = env_of(&[
        ("MASTER_ADDR", "m"),
        ("MASTER_PORT", "1"),
        ("WORLD_SIZE", "4"),
        ("RANK", "3"),
    ]);
    let config = resolve(&args, &env).unwrap();
    assert_eq!(
        (config.launcher, config.rendezvous.world_size),
        (Launcher::SageMaker, 1)
    );
}

#[test]
fn flags_win_over_sagemaker() {
    let root = sagemaker_root("algo-1", &["algo-1", "algo-2"], r#"{"lr": "0.5"}"#);
    let args = TrainArgs {
        sagemaker_root: root.path().to_path_buf(),
        rank: Some(1),
        master_addr: Some("10.0.0.9".into()),
        master_port: Some(2345),
        data_dir: Some("/elsewhere".into()),
        hyperparameters: vec!["lr=0.25".into()],
        ..no_sagemaker()
    };
    let config = resolve(&args, &env_of(&[])).unwrap();
    assert_eq!(config.launcher, Launcher::Flags);
    assert_eq!(
        (config.rendezvous.rank, config.rendezvous.world_size),
        (1, 2)
    );
    assert_eq!(
        (
            config.rendezvous.master_addr.as_str(),
            config.rendezvous.master_port
        ),
        ("10.0.0.9", 2345)
    );
    assert_eq!(config.data_dir, PathBuf::from("/elsewhere"));
    assert_eq!(config.hp.lr, 0.25);
}

#[test]
fn pytorchjob_environment_gives_the_topology() {
    let env = env_of(&[
        ("MASTER_ADDR", "job-master-0"),
        ("MASTER_PORT", "23456"),
        ("WORLD_SIZE", "3"),
        ("RANK", "2"),
    ]);
    let args = TrainArgs {
        data_dir: Some("/d".into()),
        ..no_sagemaker()
    };
    let config = resolve(&args, &env).unwrap();
    assert_eq!(config.launcher, Launcher::PyTorchJob);
    let rv = &config.rendezvous;
    assert_eq!(
        (
            rv.master_addr.as_str(),
            rv.master_port,
            rv.world_size,
            rv.rank
        ),
        ("job-master-0", 23456, 3, 2)
    );
}

#[test]
fn a_pytorchjob_with_several_processes_per_pod_is_refused() {
    let args = TrainArgs {
        data_dir: Some("/d".into()),
        ..no_sagemaker()
    };
    // What the operator sets for 2 replicas with nprocPerNode: 4.
    let pytorchjob = |nproc: Option<&str>, world: &str| {
        let mut pairs = vec![
            ("MASTER_ADDR", "job-master-0".to_string()),
            ("MASTER_PORT", "23456".into()),
            ("WORLD_SIZE", world.into()),
            ("RANK", "0".into()),
        ];
        if let Some(n) = nproc {
            pairs.push(("PET_NPROC_PER_NODE", n.into()));
        }
        let map: HashMap<String, String> =
            pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        move |name: &str| map.get(name).cloned()
    };
    let err = resolve(&args, &pytorchjob(Some("4"), "8")).unwrap_err();
    assert!(matches!(err, ConfigError::Contract { .. }), "{err}");
    let err = err.to_string();
    assert!(
        err.contains("PET_NPROC_PER_NODE=\"4\"")
            && err.contains("nprocPerNode")
            && err.contains("WORLD_SIZE=8"),
        "{err}"
    );
    assert_eq!(
        crate::error::TrainError::from(resolve(&args, &pytorchjob(Some("0"), "2")).unwrap_err())
            .exit_code(),
        1
    );
    // Values torchrun does not take are refused too, saying so.
    for bad in ["-1", "2x"] {
        let err = resolve(&args, &pytorchjob(Some(bad), "2"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not a process count torchrun takes"),
            "{bad}: {err}"
        );
    }
    // torchrun's words, 1, and no variable at all are one process per pod.
    for nproc in [
        None,
        Some("auto"),
        Some("cpu"),
        Some("gpu"),
        Some("1"),
        Some(" 1"),
        Some(""),
    ] {
        let config = resolve(&args, &pytorchjob(nproc, "2")).unwrap();
        assert_eq!(config.rendezvous.world_size, 2, "{nproc:?}");
    }
}

#[test]
fn trainer_v2_pet_environment_gives_the_topology() {
    let env = env_of(&[
        ("PET_MASTER_ADDR", "node-0"),
        ("PET_MASTER_PORT", "29400"),
        ("PET_NNODES", "2"),
        ("PET_NODE_RANK", "1"),
    ]);
    let args = TrainArgs {
        data_dir: Some("/d".into()),
        ..no_sagemaker()
    };
    let config = resolve(&args, &env).unwrap();
    assert_eq!(config.launcher, Launcher::TrainerV2);
    let rv = &config.rendezvous;
    assert_eq!(
        (
            rv.master_addr.as_str(),
            rv.master_port,
            rv.world_size,
            rv.rank
        ),
        ("node-0", 29400, 2, 1)
    );
}

#[test]
fn partial_or_malformed_environment_names_the_variable() {
    let args = TrainArgs {
        data_dir: Some("/d".into()),
        ..no_sagemaker()
    };
    let err = resolve(&args, &env_of(&[("MASTER_ADDR", "m"), ("WORLD_SIZE", "2")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("MASTER_ADDR, WORLD_SIZE set but MASTER_PORT, RANK missing"),
        "{err}"
    );
    let env = env_of(&[
        ("MASTER_ADDR", "m"),
        ("MASTER_PORT", "x"),
        ("WORLD_SIZE", "2"),
        ("RANK", "0"),
    ]);
    assert!(resolve(&args, &env)
        .unwrap_err()
        .to_string()
        .contains("MASTER_PORT=\"x\""));
    let env = env_of(&[
        ("MASTER_ADDR", "m"),
        ("MASTER_PORT", "1"),
        ("WORLD_SIZE", "2"),
        ("RANK", "2"),
    ]);
    let error = resolve(&args, &env).unwrap_err().to_string();
    assert!(error.contains("PyTorchJob topology"), "{error}");
    assert!(
        error.contains("rank 2 is not from 0 to 1 (ranks count from 0; world size 2)"),
        "{error}"
    );
    // Given as flags, the error names the flags.
    let flags = TrainArgs {
        rank: Some(2),
        world_size: Some(2),
        ..args.clone()
    };
    let error = resolve(&flags, &|_| None).unwrap_err().to_string();
    assert!(error.contains("--rank/--world-size"), "{error}");
    assert!(
        error.contains("rank 2 is not from 0 to 1 (ranks count from 0; world size 2)"),
        "{error}"
    );
    let none = TrainArgs {
        world_size: Some(0),
        ..args
    };
    let error = resolve(&none, &|_| None).unwrap_err().to_string();
    assert!(error.contains("world size must be at least 1"), "{error}");
}

#[test]
fn hp_flag_must_be_key_equals_value() {
    let args = TrainArgs {
        data_dir: Some("/d".into()),
        hyperparameters: vec!["epochs".into()],
        ..no_sagemaker()
    };
    let err = resolve(&args, &env_of(&[])).unwrap_err().to_string();
    assert!(err.contains("key=value"), "{err}");
}

#[test]
fn threads_and_replicas_come_from_flags_then_rayon_num_threads() {
    let with = |threads, replicas, hp: &[&str]| TrainArgs {
        data_dir: Some(PathBuf::from("/data")),
        threads,
        replicas,
        hyperparameters: hp.iter().map(|s| s.to_string()).collect(),
        ..no_sagemaker()
    };
    let rayon = env_of(&[("RAYON_NUM_THREADS", "4")]);
    let p = resolve(&with(None, None, &["batch-size=64"]), &rayon)
        .unwrap()
        .parallelism;
    assert_eq!((p.threads, p.replicas), (4, 4));
    // Batch 32: two shares of 16 at most.
    let p = resolve(&with(None, None, &["batch-size=32"]), &rayon)
        .unwrap()
        .parallelism;
    assert_eq!((p.threads, p.replicas), (4, 2));
    let p = resolve(&with(Some(3), Some(1), &[]), &rayon)
        .unwrap()
        .parallelism;
    assert_eq!((p.threads, p.replicas), (3, 1));
    let err = resolve(&with(Some(2), Some(3), &[]), &rayon)
        .unwrap_err()
        .to_string();
    assert!(err.contains("3 replicas need at least 3 threads"), "{err}");
}

#[test]
fn a_hyperparameter_given_twice_in_flags_is_refused() {
    for pairs in [
        ["seed=1", "seed=2"],
        ["max-train-samples=10", "max_train_samples=20"],
    ] {
        let args = TrainArgs {
            data_dir: Some("/data".into()),
            hyperparameters: pairs.iter().map(|p| p.to_string()).collect(),
            ..no_sagemaker()
        };
        let err = resolve(&args, &env_of(&[])).unwrap_err().to_string();
        assert!(err.contains("is given twice"), "{pairs:?}: {err}");
        // Flags and TRAINER_HYPERPARAMETERS arrive alike; the error names both.
        assert!(
            err.contains("(from --hp / TRAINER_HYPERPARAMETERS)"),
            "{pairs:?}: {err}"
        );
    }
}

/// A CPU build refuses `backend=nccl` while resolving, naming where the value came from.
#[cfg(not(feature = "cuda"))]
#[test]
fn nccl_in_a_cpu_build_is_refused_naming_its_source() {
    let args = TrainArgs {
        data_dir: Some("/data".into()),
        hyperparameters: vec!["backend=nccl".into()],
        ..no_sagemaker()
    };
    let err = resolve(&args, &env_of(&[])).unwrap_err().to_string();
    assert!(
        err.contains("\"backend\" = \"nccl\" (from --hp / TRAINER_HYPERPARAMETERS)")
            && err.contains("--features cuda"),
        "{err}"
    );

    let root = sagemaker_root("algo-1", &["algo-1"], r#"{"backend": "\"nccl\""}"#);
    let args = TrainArgs {
        sagemaker_root: root.path().to_path_buf(),
        ..no_sagemaker()
    };
    let err = resolve(&args, &env_of(&[])).unwrap_err().to_string();
    assert!(
        err.contains("hyperparameters.json") && err.contains("--features cuda"),
        "{err}"
    );
}

/// The SDK writes the estimator's `lr="abc"` as `"\"abc\""`: the refusal quotes `abc` as the
/// user wrote it, not its JSON encoding; a hand-written unencoded value is quoted as it is.
#[test]
fn a_refused_sagemaker_value_is_shown_as_given_to_the_estimator() {
    for (file, shown) in [
        (
            r#"{"lr": "\"abc\""}"#,
            r#"hyperparameter "lr" = "abc" (from "#,
        ),
        (r#"{"lr": "abc"}"#, r#"hyperparameter "lr" = "abc" (from "#),
        (
            r#"{"epochs": "-2"}"#,
            r#"hyperparameter "epochs" = "-2" (from "#,
        ),
        (
            r#"{"backend": "\"mpi\""}"#,
            r#"hyperparameter "backend" = "mpi" (from "#,
        ),
    ] {
        let root = sagemaker_root("algo-1", &["algo-1"], file);
        let args = TrainArgs {
            sagemaker_root: root.path().to_path_buf(),
            ..no_sagemaker()
        };
        let err = resolve(&args, &env_of(&[])).unwrap_err().to_string();
        assert!(
            err.contains(shown) && err.contains("hyperparameters.json"),
            "{file}: {err}"
        );
    }
}

/// Port 0 with several ranks: rank 0 would listen on a port the operating system picks, and
/// the others could never find it (rank 0 then waited for them and exited 130, retryable).
/// Refused at resolution, naming the flag or variable; one process, which never listens,
/// keeps accepting it.
#[test]
fn master_port_0_with_several_ranks_is_refused_naming_its_source() {
    let rule = "port 0 with world size 2";
    let flags = TrainArgs {
        data_dir: Some("/d".into()),
        rank: Some(1),
        world_size: Some(2),
        master_port: Some(0),
        ..no_sagemaker()
    };
    let err = resolve(&flags, &env_of(&[])).unwrap_err();
    assert!(matches!(err, ConfigError::Contract { .. }), "{err}");
    let err = err.to_string();
    assert!(
        err.starts_with("--master-port (TRAINER_MASTER_PORT): ") && err.contains(rule),
        "{err}"
    );
    assert!(err.contains("the other ranks cannot know"), "{err}");
    let args = TrainArgs {
        data_dir: Some("/d".into()),
        ..no_sagemaker()
    };
    for (names, source) in [
        (
            ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"],
            "MASTER_PORT: ",
        ),
        (
            [
                "PET_MASTER_ADDR",
                "PET_MASTER_PORT",
                "PET_NNODES",
                "PET_NODE_RANK",
            ],
            "PET_MASTER_PORT: ",
        ),
    ] {
        let env = env_of(&[
            (names[0], "m"),
            (names[1], "0"),
            (names[2], "2"),
            (names[3], "0"),
        ]);
        let err = resolve(&args, &env).unwrap_err().to_string();
        assert!(err.starts_with(source) && err.contains(rule), "{err}");
    }
    // A flag naming a real port wins over the environment's 0.
    let env = env_of(&[
        ("MASTER_ADDR", "m"),
        ("MASTER_PORT", "0"),
        ("WORLD_SIZE", "2"),
        ("RANK", "0"),
    ]);
    let fixed = TrainArgs {
        master_port: Some(23456),
        ..args.clone()
    };
    assert_eq!(resolve(&fixed, &env).unwrap().rendezvous.master_port, 23456);
    // One process never listens: port 0 is harmless.
    let single = TrainArgs {
        master_port: Some(0),
        ..args
    };
    let config = resolve(&single, &env_of(&[])).unwrap();
    assert_eq!(
        (config.rendezvous.world_size, config.rendezvous.master_port),
        (1, 0)
    );
}
