//! The runtime contracts end to end through the binary: SageMaker layout, failure reason,
//! exit codes, checkpoint resume, SIGTERM.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

/// A SageMaker root for one host whose `training` channel links to the real Fashion-MNIST.
fn sagemaker_root(dir: &Path, hyperparameters: &str) -> std::path::PathBuf {
    let root = dir.join("opt-ml");
    let config = root.join("input/config");
    let channel = root.join("input/data/training");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::create_dir_all(&channel).unwrap();
    for entry in std::fs::read_dir(fashion_mnist()).unwrap() {
        let entry = entry.unwrap();
        std::os::unix::fs::symlink(entry.path(), channel.join(entry.file_name())).unwrap();
    }
    std::fs::write(
        config.join("resourceconfig.json"),
        r#"{"current_host": "algo-1", "hosts": ["algo-1"]}"#,
    )
    .unwrap();
    std::fs::write(config.join("hyperparameters.json"), hyperparameters).unwrap();
    root
}

#[test]
fn sagemaker_layout_trains_and_writes_model_and_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    // As the SageMaker Python SDK writes them: every value a JSON-encoded string.
    let root = sagemaker_root(
        dir.path(),
        r#"{"backend": "\"gloo\"", "batch-size": "64", "epochs": "1", "lr": "0.05", "model-type": "\"custom\"",
            "max-train-samples": "6400", "dataset": "\"fashion-mnist\"", "sagemaker_program": "\"train.py\""}"#,
    );
    let mut p = spawn_train(
        dir.path(),
        "sm",
        &[],
        &[("TRAINER_SAGEMAKER_ROOT", root.display().to_string())],
    );
    assert_eq!(p.wait(Duration::from_secs(600)), 0, "{}", p.stderr());
    assert!(p.stderr().contains("SageMaker"), "{}", p.stderr());
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("model/model.json")).unwrap()).unwrap();
    assert_eq!(info["dataset"], "fashion-mnist");
    assert_eq!(info["classes"][9], "Ankle boot");
    assert!(info["test_accuracy"].as_f64().unwrap() > 0.6, "{info}");
    assert!(root.join("model/model.bpk").is_file());
    assert!(root
        .join("checkpoints/checkpoint-000002-00000000.bin")
        .is_file());
    assert!(!root.join("output/failure").exists());
}

#[test]
fn sagemaker_configuration_error_exits_1_and_writes_the_failure_reason() {
    let dir = tempfile::tempdir().unwrap();
    let root = sagemaker_root(dir.path(), r#"{"batch-size": "\"lots\""}"#);
    let mut p = spawn_train(
        dir.path(),
        "sm",
        &[],
        &[("TRAINER_SAGEMAKER_ROOT", root.display().to_string())],
    );
    assert_eq!(p.wait(Duration::from_secs(60)), 1, "{}", p.stderr());
    let reason = std::fs::read_to_string(root.join("output/failure")).unwrap();
    assert!(
        reason.contains("\"batch-size\"") && reason.contains("positive integer"),
        "{reason}"
    );
}

#[test]
fn missing_dataset_exits_1_naming_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let mut p = spawn_train(
        dir.path(),
        "p",
        &[format!("--data-dir={}", empty.display())],
        &[],
    );
    assert_eq!(p.wait(Duration::from_secs(60)), 1);
    assert!(
        p.stderr().contains("no dataset found in") && p.stderr().contains("empty"),
        "{}",
        p.stderr()
    );
}

/// SIGTERM mid-epoch writes a checkpoint at the current step and exits 143; the next run
/// resumes from that step, then a later run with more epochs resumes at the epoch boundary.
#[test]
fn sigterm_checkpoints_and_the_next_run_resumes() {
    let data = fashion_mnist();
    let dir = tempfile::tempdir().unwrap();
    let args = |epochs: u64| {
        vec![
            format!("--data-dir={}", data.display()),
            format!("--model-dir={}", dir.path().join("model").display()),
            format!("--checkpoint-dir={}", dir.path().join("ckpt").display()),
            format!("--hp=epochs={epochs}"),
            "--hp=max-train-samples=12800".into(),
            "--hp=log-interval=10".into(),
        ]
    };
    let mut first = spawn_train(dir.path(), "first", &args(1), &[]);
    first.wait_for_log("step=30", Duration::from_secs(300));
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &first.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert_eq!(
        first.wait(Duration::from_secs(30)),
        143,
        "{}",
        first.stderr()
    );
    assert!(
        first.stderr().contains("checkpoint written"),
        "{}",
        first.stderr()
    );
    let saved: Vec<String> = std::fs::read_dir(dir.path().join("ckpt"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        saved
            .iter()
            .any(|n| n.starts_with("checkpoint-000001-") && !n.ends_with("-00000000.bin")),
        "{saved:?}"
    );

    let mut second = spawn_train(dir.path(), "second", &args(1), &[]);
    assert_eq!(
        second.wait(Duration::from_secs(300)),
        0,
        "{}",
        second.stderr()
    );
    assert!(
        second.stderr().contains("resuming from checkpoint"),
        "{}",
        second.stderr()
    );
    assert_eq!(second.test_accuracies().len(), 1);

    let mut third = spawn_train(dir.path(), "third", &args(2), &[]);
    assert_eq!(
        third.wait(Duration::from_secs(300)),
        0,
        "{}",
        third.stderr()
    );
    assert!(
        third.stdout().starts_with("epoch=2 "),
        "only epoch 2 runs:\n{}",
        third.stdout()
    );
}
