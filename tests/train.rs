//! `kfaws train` and `kfaws endpoint` end to end, the path `make demo`
//! walks: apply the vanilla profile (with the training operator's CRD) on
//! the local AWS emulator and its API server, build and push the trainer
//! image, train on real Fashion-MNIST as a PyTorchJob (the harness runs the
//! replicas) and as a SageMaker training job (the emulator runs the
//! instances), deploy the SageMaker model to an endpoint, classify a test
//! image, destroy, and find nothing left. Also: the local runtime, and bad
//! input refused before any job is created.
//!
//! Run under `tests/emulator/with_emulator.sh` with `KFAWS_TESTENV_BIN`
//! (`make test` does both).

mod common;

use std::path::{Path, PathBuf};

use common::aws::{control, Deployment};

/// Stacks 0.15 s, the cluster 3 s, a node group 0.9 s (0.005 × real).
const FAST: &str = r#"{"scale": 0.005}"#;
const FASHION_MNIST: &str = "/usr/share/datasets/fashion-mnist";
const USER_NS: &str = "kubeflow-user-example-com";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeflow")
}

fn kubeflow_config(with_operator: bool) -> String {
    let mut c = format!(
        "[kubeflow]\nmanifests = {:?}\n",
        fixtures().join("platform.yaml").display().to_string()
    );
    if with_operator {
        c.push_str(&format!(
            "training_operator = {:?}\n",
            fixtures()
                .join("training-operator.yaml")
                .display()
                .to_string()
        ));
    }
    c
}

fn bin(name: &str) -> PathBuf {
    assert_cmd::cargo::cargo_bin(name)
}

/// The value of `key=` in a metric line (`... test_acc=0.8634; ...`).
fn metric(text: &str, key: &str) -> Option<f64> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains(&format!("{key}=")))?;
    let start = line.find(&format!("{key}="))? + key.len() + 1;
    line[start..]
        .split(|c: char| c == ';' || c.is_whitespace())
        .next()?
        .parse()
        .ok()
}

/// The trainer's metrics in the order every runtime's `Final metrics:` line
/// prints them (README, "Training").
const FINAL_METRICS: [&str; 6] = [
    "epoch",
    "train_loss",
    "train_acc",
    "test_loss",
    "test_acc",
    "images_per_sec",
];

/// The names of the `name=value` pairs on the `Final metrics:` line of a
/// `kfaws train` output, in order; every value must be a number.
fn final_metric_names(text: &str) -> Vec<String> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Final metrics: "))
        .unwrap_or_else(|| panic!("no final metrics: {text}"));
    line.split(' ')
        .map(|pair| {
            let (name, value) = pair
                .split_once('=')
                .unwrap_or_else(|| panic!("{pair:?} is not name=value: {line}"));
            assert!(value.parse::<f64>().is_ok(), "{pair:?} in {line}");
            name.to_string()
        })
        .collect()
}

/// Copies the dataset onto the deployment's EFS file system as the
/// emulator keeps it locally (the part a DataSync task or a pod would do
/// on AWS).
fn stage_on_efs(file_system_id: &str, path: &str) {
    let root: serde_json::Value =
        serde_json::from_str(&control("efs/local-root", "GET", "")).unwrap();
    let dir = Path::new(root["root"].as_str().unwrap())
        .join(file_system_id)
        .join(path.trim_start_matches('/'));
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(FASHION_MNIST).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
}

/// Fashion-MNIST with `train-images-idx3-ubyte` cut to its header and 1000 images, while the
/// header still declares 60000: 16 + 1000 × 784 = 784016 bytes of 16 + 60000 × 784.
fn truncated_fashion_mnist() -> tempfile::TempDir {
    use std::io::Read as _;
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(FASHION_MNIST).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    let gz = dir.path().join("train-images-idx3-ubyte.gz");
    let mut images = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap())
        .take(16 + 1000 * 784)
        .read_to_end(&mut images)
        .unwrap();
    std::fs::remove_file(&gz).unwrap();
    std::fs::write(dir.path().join("train-images-idx3-ubyte"), images).unwrap();
    dir
}

/// The start of a shell script that stands in for the trainer: it answers `--version` and
/// `check-data` as kfaws-trainer does for Fashion-MNIST; what follows is its `train`.
const FAKE_TRAINER: &str =
    "#!/bin/sh\nif [ \"$1\" = --version ]; then\n  echo 'kfaws-trainer 0.1.0 \
     (backends: gloo)'\n  exit 0\nfi\nif [ \"$1\" = check-data ]; then\n  echo \
     'dataset=fashion-mnist train=60000 test=10000 shape=1x28x28'\n  exit 0\nfi\n";

/// Writes the executable script `text` as `dir/name`; returns its path.
fn script(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `kfaws train --runtime local --data FASHION_MNIST --job-name JOB` in `dir`, then `extra`.
fn local_train(dir: &Path, job: &str, extra: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(bin("kfaws"));
    c.current_dir(dir)
        .args(["train", "--runtime", "local", "--data", FASHION_MNIST])
        .args(["--job-name", job])
        .args(extra);
    c
}

/// kfaws sorts the trainer's variables (passed to local ranks, set by kfaws itself, or the
/// serving container's) from the list the trainer's own help gives: none is missed, none is
/// made up.
#[test]
fn every_trainer_variable_is_known_to_the_local_runner() {
    use kfaws::train::local::{OTHER_TRAINER_VARS, TUNING_VARS};
    let mut read: Vec<String> = ["train", "serve"]
        .iter()
        .flat_map(|command| {
            let help = std::process::Command::new(bin("kfaws-trainer"))
                .args([command, "--help"])
                .output()
                .unwrap();
            // Wrapped lines may split "[env:" from the name.
            let help = String::from_utf8(help.stdout)
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            help.split("[env: ")
                .skip(1)
                .map(|rest| rest.split(['=', ']']).next().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    read.sort();
    read.dedup();
    let mut known: Vec<String> = TUNING_VARS
        .iter()
        .map(|(name, _)| name.to_string())
        .chain(OTHER_TRAINER_VARS.iter().map(ToString::to_string))
        .collect();
    known.sort();
    assert_eq!(known, read);
}

/// Also: the trainer's tuning variables set for kfaws reach every rank, a bad one is refused
/// before the job exists, and the launch contract's are not passed (with a warning).
#[test]
fn local_runtime_trains_two_ranks_and_writes_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--workers",
        "2",
        "--epochs",
        "1",
        "--hp",
        "max-train-samples=3000",
    ];
    let refused = local_train(dir.path(), "local-two-ranks", &args)
        .env("TRAINER_COLLECTIVE_TIMEOUT", "10m")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "TRAINER_COLLECTIVE_TIMEOUT=\"10m\" in the environment: must be whole seconds"
        ),
        "{err}"
    );
    assert!(!dir.path().join("kfaws-jobs/local-two-ranks").exists());
    // 3 threads with 1 replica each: not what the runner picks on any machine (its threads
    // are the CPUs shared out, and the replicas follow the threads).
    let out = local_train(dir.path(), "local-two-ranks", &args)
        .env("TRAINER_THREADS", "3")
        .env("TRAINER_REPLICAS", "1")
        .env("TRAINER_ALL_REDUCE", "ring")
        .env("TRAINER_DATA_DIR", "/nowhere")
        .env("TRAINER_THREAD", "2")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("[rank 1]"), "both ranks ran: {stdout}");
    assert!(stdout.contains("world_size=2"), "{stdout}");
    assert!(
        stdout.contains(
            "Passed to every rank: TRAINER_ALL_REDUCE=ring TRAINER_REPLICAS=1 TRAINER_THREADS=3"
        ),
        "{stdout}"
    );
    let logged = |rank: u32, needle: &str| {
        stdout
            .lines()
            .any(|l| l.starts_with(&format!("[rank {rank}]")) && l.contains(needle))
    };
    for rank in 0..2 {
        assert!(
            logged(rank, "threads=3 replicas=1") && logged(rank, "all_reduce=\"ring\""),
            "{stdout}"
        );
    }
    assert!(
        stderr.contains("Warning: not passed to the ranks: TRAINER_DATA_DIR (kfaws train sets")
            && stderr.contains(
                "Warning: TRAINER_THREAD is not a variable kfaws-trainer reads (did you mean \
                 TRAINER_THREADS?)"
            ),
        "{stderr}"
    );
    let model = dir.path().join("kfaws-jobs/local-two-ranks/model");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(model.join("model.json")).unwrap()).unwrap();
    assert_eq!(json["dataset"], "fashion-mnist", "{json}");
    assert!(metric(&stdout, "test_acc").is_some(), "{stdout}");
    assert_eq!(final_metric_names(&stdout), FINAL_METRICS, "{stdout}");

    // The same name again would resume its checkpoints and overwrite its model.
    let again = local_train(dir.path(), "local-two-ranks", &[])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{err}");
    assert!(
        err.contains("ran before") && err.contains("--resume"),
        "{err}"
    );
}

/// Ctrl-C in a terminal signals the whole process group: kfaws and every rank
/// get SIGINT. The ranks stop after the same step, rank 0 checkpoints, kfaws
/// names the checkpoint, and `--resume` continues the job from it. A job that
/// fails before writing anything leaves no directory, so its name is free.
#[test]
fn local_runtime_ctrl_c_checkpoints_and_resume_continues() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;

    let dir = tempfile::tempdir().unwrap();
    let train = |extra: &[&str]| {
        // The whole epoch, so the interrupt lands mid-epoch however fast the
        // machine trains.
        let mut c = local_train(
            dir.path(),
            "interrupted",
            &[
                "--workers",
                "2",
                "--epochs",
                "1",
                "--hp",
                "max-train-samples=60000",
            ],
        );
        c.args(["--hp", "log-interval=10"]).args(extra);
        c
    };
    // Starts the job, waits until its output so far is `ready`, sends `signal` to the
    // process group (as a terminal's Ctrl-C does) or to one rank only, and
    // returns kfaws's exit code and output.
    let interrupt = |mut command: std::process::Command,
                     signal: &str,
                     one_rank: bool,
                     ready: &dyn Fn(&str) -> bool| {
        let mut child = command
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = String::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if ready(&seen) {
                break;
            }
        }
        let target = if one_rank {
            // The ranks are kfaws's children; either one will do (the stop is
            // agreed in the all-reduce whichever rank wished it).
            let children = std::process::Command::new("pgrep")
                .args(["-P", &child.id().to_string()])
                .output()
                .unwrap();
            let pids = String::from_utf8(children.stdout).unwrap();
            let mut pids: Vec<u32> = pids.lines().map(|p| p.parse().unwrap()).collect();
            pids.sort_unstable();
            assert_eq!(pids.len(), 2, "{pids:?}");
            pids[1].to_string()
        } else {
            format!("-{}", child.id())
        };
        assert!(std::process::Command::new("kill")
            .args([&format!("-{signal}"), "--", &target])
            .status()
            .unwrap()
            .success());
        seen.extend(lines.map(|l| l.unwrap() + "\n"));
        (child.wait().unwrap().code(), seen)
    };
    // Ctrl-C in the terminal: SIGINT to the whole process group.
    let training = |seen: &str| seen.contains("step=20");
    let (code, seen) = interrupt(train(&[]), "INT", false, &training);
    assert_eq!(code, Some(130), "{seen}");
    assert!(
        seen.contains("stopped by a signal (rank 0: 143, rank 1: 143)")
            && seen.contains("checkpoint-000001-"),
        "{seen}"
    );
    assert!(local_checkpoint_count(dir.path()) >= 1, "{seen}");
    // SIGTERM to one rank only, on a resumed run: the same stop, reported the same way.
    // (Resumed after step 20, the line it waits for is step=200.) The resume gives only
    // --resume (and the log interval): the workers, epochs and max-train-samples are the
    // job's recorded ones, not the flags' defaults (which would be refused or said changed),
    // and so is the data (no --data).
    let mut resume_only = std::process::Command::new(bin("kfaws"));
    resume_only.current_dir(dir.path()).args([
        "train",
        "--runtime",
        "local",
        "--job-name",
        "interrupted",
        "--resume",
        "--hp",
        "log-interval=10",
    ]);
    let (code, seen) = interrupt(resume_only, "TERM", true, &training);
    assert_eq!(code, Some(130), "{seen}");
    assert!(
        seen.contains("Resuming from")
            && seen.contains(&format!(
                "2 process(es) on this machine, data {FASHION_MNIST}"
            ))
            && !seen.contains("Changed since the last run")
            && seen.contains("stopped by a signal (rank 0: 143, rank 1: 143)"),
        "{seen}"
    );

    // Resumed with another learning rate, from the same data moved elsewhere (compared by
    // what the trainer finds there, not by path): allowed, and said.
    let moved = dir.path().join("moved-data");
    std::os::unix::fs::symlink(FASHION_MNIST, &moved).unwrap();
    let resumed = std::process::Command::new(bin("kfaws"))
        .current_dir(dir.path())
        .args(["train", "--runtime", "local", "--data"])
        .arg(&moved)
        .args(["--job-name", "interrupted", "--resume", "--lr", "0.01"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(
        resumed.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(
        stdout.contains("resuming from checkpoint") && stdout.contains("completed"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "Changed since the last run: data {FASHION_MNIST} → {}, lr 0.02 → 0.01",
            moved.display()
        )),
        "{stdout}"
    );
    // Resuming with another batch size would put the checkpoint's step elsewhere in the data.
    let mismatch = train(&["--resume", "--batch-size", "64"]).output().unwrap();
    let err = String::from_utf8_lossy(&mismatch.stderr);
    assert_eq!(mismatch.status.code(), Some(1), "{err}");
    assert!(err.contains("the job ran with batch-size 32"), "{err}");
    // Finished: resumed with no more epochs it would train nothing.
    let done = train(&["--resume"]).output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(1), "{err}");
    assert!(
        err.contains("past --epochs 1: the job would train nothing; pass --epochs 2 or more"),
        "{err}"
    );

    // Ranks that fail before writing anything (a trainer that reads the data,
    // then exits 1 at start) leave no directory: the name is free again.
    let failing = script(
        dir.path(),
        "failing-trainer",
        &format!("{FAKE_TRAINER}echo 'cannot start' >&2\nexit 1\n"),
    );
    let failed = local_train(dir.path(), "failing", &["--workers", "2", "--trainer"])
        .arg(&failing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{err}");
    assert!(err.contains("its directory was removed"), "{err}");
    assert!(!dir.path().join("kfaws-jobs/failing").exists());

    // A rank that fails before its peers join: the others are stopped at once, and rank 0,
    // still waiting for it to connect, exits then instead of at its 5-minute connect timeout.
    let half = script(
        dir.path(),
        "half-trainer",
        &format!(
            "#!/bin/sh\nif [ \"$RANK\" = 1 ] && [ \"$1\" = train ]; then\n  sleep 1\n  echo 'rank 1 \
             fails' >&2\n  exit 3\nfi\nexec {} \"$@\"\n",
            bin("kfaws-trainer").display()
        ),
    );
    let failed = local_train(
        dir.path(),
        "peer-failed",
        &[
            "--workers",
            "2",
            "--hp",
            "max-train-samples=500",
            "--trainer",
        ],
    )
    .arg(&half)
    .output()
    .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&failed.stdout),
        String::from_utf8_lossy(&failed.stderr),
    );
    assert_eq!(failed.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains(
            "signalled to stop before training started (loading data, or waiting for the \
                 other ranks to join)"
        ) && err.contains("(rank 0: 143, rank 1: 3)"),
        "{out}{err}"
    );

    // A wrapper that runs the trainer as its child (no `exec`, as `nice` or a setup script
    // would): the ranks' parent is the wrapper, not kfaws, and they train to the end.
    let wrapper = script(
        dir.path(),
        "wrapping-trainer",
        &format!("#!/bin/sh\n{} \"$@\"\n", bin("kfaws-trainer").display()),
    );
    let wrapped = local_train(
        dir.path(),
        "wrapped",
        &[
            "--workers",
            "2",
            "--epochs",
            "1",
            "--hp",
            "max-train-samples=300",
            "--trainer",
        ],
    )
    .arg(&wrapper)
    .output()
    .unwrap();
    let out = String::from_utf8_lossy(&wrapped.stdout);
    assert!(
        wrapped.status.success() && out.contains("Training job wrapped completed"),
        "{out}{}",
        String::from_utf8_lossy(&wrapped.stderr)
    );

    // Ctrl-C before any checkpoint (ranks that stop at once, as the trainer does while it
    // still loads the data): nothing to resume, so the name is free again too.
    let slow = script(
        dir.path(),
        "slow-trainer",
        &format!(
            "{FAKE_TRAINER}trap 'kill $!; exit 143' INT TERM\necho started\nsleep 30 &\nwait\n"
        ),
    );
    let mut early = local_train(
        dir.path(),
        "stopped-early",
        &["--workers", "2", "--trainer"],
    );
    early.arg(&slow);
    let (code, seen) = interrupt(early, "INT", false, &|seen: &str| {
        seen.matches("started").count() == 2
    });
    assert_eq!(code, Some(130), "{seen}");
    assert!(
        seen.contains(
            "stopped by a signal before any checkpoint was written (rank 0: 143, rank 1: 143); it \
             wrote nothing, and its directory was removed"
        ),
        "{seen}"
    );
    assert!(!dir.path().join("kfaws-jobs/stopped-early").exists());
}

/// `kfaws train … | head`: when the reader of the output goes away, kfaws
/// stops the ranks as Ctrl-C would (they checkpoint) instead of training to
/// the end with nowhere to write, says so on stderr with the generated job
/// name to resume, and exits 141 as a process killed by SIGPIPE would.
#[test]
fn local_runtime_stops_the_job_when_its_output_is_closed() {
    use std::io::{BufRead, BufReader};

    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(bin("kfaws"))
        .current_dir(dir.path())
        .args(["train", "--runtime", "local", "--data", FASHION_MNIST])
        .args(["--workers", "2", "--epochs", "1", "--hp", "log-interval=10"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("Training job kfaws-train-"), "{first}");
    // As `head` does: read some lines (here until training has begun, so a
    // checkpoint is due), then close the pipe.
    assert!(lines.by_ref().any(|l| l.unwrap().contains("step=10")));
    drop(lines);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    let job = first
        .split_whitespace()
        .nth(2)
        .expect("the job name is the third word");
    assert!(
        err.contains("Standard output was closed")
            && err.contains("(rank 0: 143, rank 1: 143)")
            && err.contains(&format!("--job-name {job} --resume")),
        "{err}"
    );
    let job_dir = dir.path().join("kfaws-jobs").join(job);
    let checkpoints = std::fs::read_dir(job_dir.join("checkpoints"))
        .unwrap()
        .count();
    assert!(checkpoints >= 1, "{err}");
    assert!(
        !job_dir.join("model/model.bpk").exists(),
        "stopped before the end of the epoch: {err}"
    );
}

/// `kfaws train … 2>&1 | grep -m1 step=10`: stderr is the closed pipe too, so
/// the notice about the stopped job cannot be written; kfaws still stops the
/// job with a checkpoint and exits 141, without a panic (exit 101) on the
/// failed write.
#[test]
fn local_runtime_with_stderr_on_the_closed_pipe_exits_141() {
    let dir = tempfile::tempdir().unwrap();
    let kfaws = bin("kfaws");
    let out = std::process::Command::new("bash")
        .current_dir(dir.path())
        .arg("-c")
        .arg(format!(
            "'{}' train --runtime local --data {FASHION_MNIST} --workers 1 --epochs 1 \
             --hp log-interval=10 2>&1 | grep -m1 step=10; exit \"${{PIPESTATUS[0]}}\"",
            kfaws.display()
        ))
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("step=10"), "{shown}");
    assert_eq!(out.status.code(), Some(141), "{shown}");
    let jobs: Vec<_> = std::fs::read_dir(dir.path().join("kfaws-jobs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let checkpoints = std::fs::read_dir(jobs[0].join("checkpoints"))
        .unwrap()
        .count();
    assert!(checkpoints >= 1, "no checkpoint in {}", jobs[0].display());
}

/// Runs `cmd`, reads the first line of its output and closes the pipe, as
/// `cmd | head -1` would; returns that line, the exit code and stderr.
fn first_line_then_close(mut cmd: std::process::Command) -> (String, Option<i32>, String) {
    use std::io::BufRead as _;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (first, out.status.code(), err)
}

/// A process started with its output piped, its standard output read line by line.
struct Watched {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    /// The lines read so far, each with its newline.
    seen: String,
}

impl Watched {
    fn spawn(mut cmd: std::process::Command) -> Self {
        use std::io::BufRead as _;
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let seen = String::new();
        Self { child, lines, seen }
    }

    /// Reads up to and including the first line for which `until` holds (or to the end).
    fn read_until(&mut self, until: impl Fn(&str) -> bool) {
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            self.seen.push_str(&line);
            self.seen.push('\n');
            if until(&line) {
                break;
            }
        }
    }

    /// SIGINT to the process (a Ctrl-C), then its remaining output: the exit code, all of
    /// standard output and standard error.
    fn interrupt(mut self) -> (Option<i32>, String, String) {
        let sent = std::process::Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        self.read_until(|_| false);
        let out = self.child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), self.seen, stderr)
    }
}

fn local_checkpoint_count(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("kfaws-jobs/interrupted/checkpoints")).map_or(0, |d| d.count())
}

#[tokio::test]
async fn bad_input_is_refused_before_any_job_is_created() {
    let d = Deployment::new("");
    let data = FASHION_MNIST;
    // One byte over InvokeEndpoint's 6 MiB (a sparse file).
    let big = tempfile::NamedTempFile::new().unwrap();
    big.as_file().set_len(6_291_457).unwrap();
    let big = big.path().to_str().unwrap().to_string();
    // Directories the trainer would refuse: no dataset at all; a Fashion-MNIST copy whose
    // training images are cut short (the IDX header still says 60000).
    let stray = tempfile::tempdir().unwrap();
    std::fs::write(stray.path().join("notes.txt"), "not a dataset").unwrap();
    let stray = stray.path().to_str().unwrap().to_string();
    let truncated_dir = truncated_fashion_mnist();
    let truncated = truncated_dir.path().to_str().unwrap().to_string();
    // Bodies the serving container would answer with 400: no endpoint is asked ("demo" does
    // not exist, so a call would fail differently).
    let text = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(text.path(), "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    let text = text.path().to_str().unwrap().to_string();
    for (args, expected) in [
        (
            vec!["endpoint", "invoke", "demo", "--region", "us-east-1", "--image", &big],
            "is 6291457 bytes; InvokeEndpoint takes at most 6291456 bytes",
        ),
        (
            vec!["endpoint", "invoke", "demo", "--region", "us-east-1", "--image", &text],
            "is invalid: not a PNG or JPEG file",
        ),
        (
            vec!["endpoint", "invoke", "demo", "--region", "us-east-1", "--json", &text],
            "is invalid: not JSON: expected value at line 1 column 1",
        ),
        (
            vec!["train", "--runtime", "docker", "--data", data],
            "invalid value 'docker'",
        ),
        // A resume of a job that never ran: the job is what is missing, not --data.
        (
            vec!["train", "--runtime", "local", "--job-name", "nosuch", "--resume"],
            "--resume: no local job named nosuch under kfaws-jobs (no directory \
             kfaws-jobs/nosuch); start it without --resume, with --data",
        ),
        // Another program as the trainer is named as such, not blamed on the data.
        (
            vec![
                "train",
                "--runtime",
                "local",
                "--data",
                data,
                "--trainer",
                "/bin/true",
            ],
            "the trainer binary /bin/true is not a kfaws-trainer: `/bin/true --version` printed",
        ),
        (
            vec!["train", "--runtime", "local", "--data", data, "--epochs", "-1"],
            "--epochs -1: must be at least 1",
        ),
        // Past u64 too: the same rule, not the parser's "too large".
        (
            vec![
                "train",
                "--runtime",
                "local",
                "--data",
                data,
                "--epochs",
                "18446744073709551616",
            ],
            "--epochs 18446744073709551616: must be from 1 to 4294967295",
        ),
        // Out-of-range counts and a bad name are told with the other problems, in one run.
        (
            vec![
                "train",
                "--runtime",
                "kubernetes",
                "--data",
                "efs:/datasets",
                "--workers",
                "1000",
                "--batch-size",
                "0",
                "--job-name",
                "My_job",
                "--hp",
                "momentum=1.5",
            ],
            "4 problems in the arguments; nothing was created:\n  - --job-name: job name \"My_job\" \
             contains 'M', '_'",
        ),
        (
            vec![
                "train", "--runtime", "local", "--data", data, "--workers", "0",
            ],
            "--workers 0: must be from 1 to 999 (one rank per replica)",
        ),
        (
            vec![
                "train",
                "--runtime",
                "local",
                "--data",
                data,
                "--job-name",
                "my_job",
            ],
            "contains '_'",
        ),
        (
            vec![
                "train",
                "--runtime",
                "sagemaker",
                "--data",
                data,
                "--job-name",
                &"a".repeat(70),
            ],
            "70 characters long",
        ),
        (
            vec![
                "train",
                "--runtime",
                "sagemaker",
                "--data",
                data,
                "--hp",
                &format!("note={}", "x".repeat(300)),
            ],
            "256",
        ),
        (
            vec![
                "train",
                "--runtime",
                "sagemaker",
                "--data",
                data,
                "--hp",
                "learning-rate=0.1",
            ],
            "unknown hyperparameter \"learning-rate\"",
        ),
        (
            vec![
                "train",
                "--runtime",
                "kubernetes",
                "--data",
                "efs:/datasets",
                "--hp",
                "momentum=1.5",
            ],
            "must be a number in [0, 1)",
        ),
        (
            vec![
                "train",
                "--runtime",
                "sagemaker",
                "--data",
                data,
                "--backend",
                "nccl",
            ],
            "--instance-type ml.m5.xlarge has no NVIDIA GPU",
        ),
        (
            vec!["train", "--runtime", "sagemaker", "--data", data],
            "run `kfaws apply` first",
        ),
        (
            vec![
                "train",
                "--runtime",
                "sagemaker",
                "--data",
                data,
                "--image",
                "ghcr.io/example/kfaws-trainer:1",
            ],
            "image \"ghcr.io/example/kfaws-trainer:1\" is invalid: SageMaker pulls images from \
             Amazon ECR",
        ),
        (
            vec!["train", "--runtime", "kubernetes", "--data", data],
            "efs:/path",
        ),
        (
            vec!["endpoint", "deploy", "--job", "no_such_job"],
            "no_such_job",
        ),
        (
            vec![
                "train",
                "--runtime",
                "local",
                "--data",
                data,
                "--hp",
                "epochs=3",
            ],
            "--hp epochs=… is not accepted: kfaws passes epochs to the trainer from its --epochs flag",
        ),
        (
            vec!["train", "--runtime", "local", "--data", data, "--no-wait"],
            "--no-wait applies to the kubernetes and sagemaker runtimes, not --runtime local",
        ),
        (
            vec!["train", "--runtime", "sagemaker", "--data", data, "--no-wait", "--follow"],
            "the argument '--no-wait' cannot be used with '--follow'",
        ),
        (
            vec!["train", "--runtime", "local", "--data", data, "--cpu", "2"],
            "--cpu applies to the kubernetes runtime, not --runtime local",
        ),
        // A negative number is a value out of range, not an unknown flag.
        (
            vec!["train", "--runtime", "kubernetes", "--data", "efs:/datasets", "--cpu", "-1"],
            "--cpu \"-1\" is negative",
        ),
        (
            vec!["train", "--runtime", "kubernetes", "--data", "efs:/datasets", "--memory", "-1Gi"],
            "--memory \"-1Gi\" is negative",
        ),
        (
            vec![
                "train",
                "--runtime",
                "local",
                "--data",
                data,
                "--max-runtime",
                "60",
            ],
            "--max-runtime applies to the kubernetes and sagemaker runtimes, not --runtime local",
        ),
        (
            vec![
                "train",
                "--runtime",
                "kubernetes",
                "--data",
                "efs:/datasets",
                "--max-runtime",
                "0",
            ],
            "--max-runtime 0: must be from 1 to 2419200 seconds",
        ),
        (
            vec![
                "train",
                "--runtime",
                "kubernetes",
                "--data",
                "efs:/datasets",
                "--output-dir",
                "/nonexistent/x",
            ],
            "--output-dir applies to the local runtime, not --runtime kubernetes",
        ),
        (
            vec![
                "train",
                "--runtime",
                "kubernetes",
                "--data",
                "efs:/datasets",
                "--instance-type",
                "ml.m5.large",
            ],
            "--instance-type applies to the sagemaker runtime, not --runtime kubernetes",
        ),
        (
            vec![
                "train",
                "--runtime",
                "kubernetes",
                "--data",
                "efs:/datasets",
                "--memory",
                "2GB",
            ],
            "--memory \"2GB\" is not a Kubernetes quantity",
        ),
        (
            vec![
                "train",
                "--runtime",
                "kubernetes",
                "--data",
                "efs:/datasets",
                "--memory",
                "2",
            ],
            "--memory \"2\" is 2 bytes, below the 128Mi a trainer replica needs",
        ),
        (
            vec![
                "train",
                "--runtime",
                "kubernetes",
                "--data",
                "efs:/datasets",
                "--cpu",
                "abc",
            ],
            "--cpu \"abc\" is not a Kubernetes quantity",
        ),
        (
            vec![
                "train",
                "--runtime",
                "local",
                "--data",
                data,
                "--backend",
                "nccl",
            ],
            "--backend nccl is not in this trainer build",
        ),
        // The trainer's own reading of the directory, before any rank starts.
        (
            vec!["train", "--runtime", "local", "--data", &stray],
            "no dataset found in",
        ),
        (
            vec!["train", "--runtime", "local", "--data", &truncated],
            "train-images-idx3-ubyte: 784016 bytes, expected 47040016",
        ),
        (
            vec![
                "train",
                "--runtime",
                "local",
                "--data",
                data,
                "--hp",
                "dataset=cifar10",
            ],
            "the dataset hyperparameter says cifar10, but",
        ),
    ] {
        let err = d.fails(&args);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    // As many local ranks as the machine's memory holds at 128 MiB each.
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    if system.available_memory() / (128 * 1024 * 1024) < 999 {
        let err = d.fails(&[
            "train",
            "--runtime",
            "local",
            "--data",
            data,
            "--workers",
            "999",
        ]);
        assert!(
            err.contains("--workers 999: 999 local ranks need about 127872 MiB"),
            "{err}"
        );
    }
    let err = d.fails(&["train", "--runtime", "local", "--data", &truncated]);
    assert!(
        err.starts_with(&format!("Error: --data {truncated}: ")),
        "{err}"
    );
    // Several problems are reported together, one per line.
    let err = d.fails(&[
        "train",
        "--runtime",
        "local",
        "--data",
        data,
        "--lr",
        "-1",
        "--hp",
        "epochs=3",
        "--hp",
        "batch_size=8",
        "--hp",
        "seed=abc",
        "--max-runtime",
        "3600",
    ]);
    assert!(
        err.starts_with("Error: 5 problems in the arguments; nothing was created:\n  - ")
            && err.contains("\n  - hyperparameter \"seed\" = \"abc\" (from --hp) must be")
            && err
                .contains("\n  - hyperparameter \"lr\" = \"-1\" (from --lr) must be a number > 0")
            && err.contains("\n  - --hp epochs=… is not accepted")
            && err.contains("\n  - --hp batch_size=… is not accepted")
            && err.contains("\n  - --max-runtime applies to the kubernetes and sagemaker runtimes"),
        "{err}"
    );
    // SageMaker's MaxRuntimeInSeconds bound (28 days) holds for both runtimes that take it,
    // checked with the other arguments.
    let err = d.fails(&[
        "train",
        "--runtime",
        "kubernetes",
        "--data",
        "efs:/datasets",
        "--max-runtime",
        "2419201",
    ]);
    assert!(
        err.contains(
            "--max-runtime 2419201: must be from 1 to 2419200 seconds (28 days: SageMaker's \
             limit for StoppingCondition.MaxRuntimeInSeconds)"
        ),
        "{err}"
    );
    // The runtime from kfaws.toml is checked when the file is parsed (case C18).
    d.write_config("training_runtime = \"k8s\"\n");
    let err = d.fails(&["train", "--data", data]);
    assert!(
        err.contains("k8s") && err.contains("kubernetes") && err.contains("sagemaker"),
        "{err}"
    );
    d.write_config("");
    assert_eq!(d.calls("CreateTrainingJob"), 0);
    assert_eq!(d.calls("InvokeEndpoint"), 0);
    assert!(
        !d.dir.path().join("kfaws-jobs").exists(),
        "no local job started"
    );

    // A cluster without the training operator: the PyTorchJob kind is not served.
    d.write_config(&kubeflow_config(false));
    d.lifecycle(FAST);
    d.kfaws(&["apply", "--auto-approve"]).assert().success();
    let submit = || {
        d.fails(&[
            "train",
            "--runtime",
            "kubernetes",
            "--data",
            "efs:/datasets/x",
            "--image",
            "1.dkr.ecr.us-east-1.amazonaws.com/x@sha256:00",
        ])
    };
    let err = submit();
    assert!(
        err.contains("does not serve kubeflow.org/v1 PyTorchJob")
            && err.contains("training_operator"),
        "{err}"
    );
    // The image that is not in ECR is the second problem, told in the same run.
    assert!(
        err.contains("2 problems with the job; nothing was created:\n  - ")
            && err.contains("no such image in ECR"),
        "{err}"
    );
    // The config asks for the operator, but its CRD is not in the cluster (not applied yet,
    // or deleted by hand): kfaws says to plan and apply, not to set what is set.
    d.write_config(&kubeflow_config(true));
    let err = submit();
    assert!(
        err.contains("although kubeflow.training_operator is set in kfaws.toml")
            && err.contains("`kfaws apply` puts it back"),
        "{err}"
    );
    d.write_config(&kubeflow_config(false));
    d.kfaws(&["destroy", "--auto-approve"]).assert().success();
}

#[tokio::test]
async fn demo_path_trains_on_both_runtimes_serves_the_model_and_destroys_everything() {
    // The default CPU group, and an empty GPU group a --backend nccl replica fits on.
    let d = Deployment::new(&format!(
        "{}[node_groups.cpu]\ninstance_type = \"m5.xlarge\"\nmin_size = 1\ndesired_size = 2\n\
         max_size = 4\n[node_groups.gpu]\ninstance_type = \"g5.xlarge\"\nmin_size = 0\n\
         desired_size = 0\nmax_size = 1\n",
        kubeflow_config(true)
    ));
    d.lifecycle(FAST);
    d.kfaws(&["apply", "--auto-approve"]).assert().success();

    // The image, pushed to the account's ECR (the emulator's registry).
    d.kfaws(&[
        "image",
        "build",
        "--trainer",
        bin("kfaws-trainer").to_str().unwrap(),
    ])
    .assert()
    .success();
    let pushed = d.stdout(&["image", "push"]);
    let image = pushed.lines().last().unwrap().trim().to_string();
    assert!(image.contains("@sha256:"), "{pushed}");

    // What would only fail once the job ran is checked before it is created.
    let bucket = d.output("stack.storage", "BucketName");
    let (repo, _) = image.split_once('@').unwrap();
    let truncated = truncated_fashion_mnist();
    let built_without_nccl = format!(
        "--backend nccl: the trainer in image {image} was built without it (backends: gloo)"
    );
    for (args, expected) in [
        // The image's label says its trainer is a CPU build.
        (
            vec![
                "--data".to_string(),
                FASHION_MNIST.into(),
                "--image".into(),
                image.clone(),
                "--backend".into(),
                "nccl".into(),
                "--instance-type".into(),
                "ml.g5.xlarge".into(),
            ],
            built_without_nccl.as_str(),
        ),
        // A local directory is read by the trainer before anything is uploaded.
        (
            vec![
                "--data".to_string(),
                truncated.path().to_str().unwrap().into(),
                "--image".into(),
                image.clone(),
            ],
            "train-images-idx3-ubyte: 784016 bytes, expected 47040016",
        ),
        (
            vec![
                "--data".to_string(),
                format!("s3://{bucket}/nothing-here/"),
                "--image".into(),
                image.clone(),
            ],
            "no object under this prefix",
        ),
        (
            vec![
                "--data".to_string(),
                FASHION_MNIST.into(),
                "--image".into(),
                format!("{repo}:no-such-tag"),
            ],
            "no such image",
        ),
        (
            vec![
                "--data".to_string(),
                FASHION_MNIST.into(),
                "--image".into(),
                image.clone(),
                "--instance-type".into(),
                "ml.m5.huge".into(),
            ],
            "instance type \"ml.m5.huge\"",
        ),
    ] {
        let mut all = vec!["train", "--runtime", "sagemaker"];
        all.extend(args.iter().map(String::as_str));
        let err = d.fails(&all);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    // Every check runs before the job is refused: two problems, one run.
    let err = d.fails(&[
        "train",
        "--runtime",
        "sagemaker",
        "--data",
        &format!("s3://{bucket}/nothing-here/"),
        "--image",
        &format!("{repo}:no-such-tag"),
    ]);
    assert!(
        err.contains("2 problems with the job; nothing was created:\n  - ")
            && err.contains("no object under this prefix")
            && err.contains("no such image"),
        "{err}"
    );
    // An unknown instance type is named unknown, not one without a GPU.
    let err = d.fails(&[
        "train",
        "--runtime",
        "sagemaker",
        "--data",
        FASHION_MNIST,
        "--backend",
        "nccl",
        "--instance-type",
        "ml.m5.huge",
    ]);
    assert!(
        err.contains("an unknown SageMaker training instance type") && !err.contains("GPU"),
        "{err}"
    );
    assert_eq!(d.calls("CreateTrainingJob"), 0);
    assert_eq!(d.calls("InvokeEndpoint"), 0);
    assert_eq!(
        d.calls("PutObject"),
        0,
        "a refused job uploads nothing of its local --data"
    );

    // Kubernetes: a PyTorchJob of 2 replicas reading the dataset from EFS.
    let fs = d.output("stack.efs", "FileSystemId");
    stage_on_efs(&fs, "/datasets/fashion-mnist");
    let k8s = d.stdout(&[
        "train",
        "--runtime",
        "kubernetes",
        "--workers",
        "2",
        "--epochs",
        "1",
        "--data",
        "efs:/datasets/fashion-mnist",
        "--job-name",
        "demo-k8s",
    ]);
    assert!(k8s.contains("Training job demo-k8s succeeded"), "{k8s}");
    // Every condition the job went through, as it turned True, in order (watched, not polled).
    let at = |c: &str| k8s.find(&format!("\n  {c}: PyTorchJob demo-k8s "));
    assert!(
        matches!((at("Created"), at("Running"), at("Succeeded")), (Some(c), Some(r), Some(s)) if c < r && r < s),
        "{k8s}"
    );
    // The master's last metric line, printed as the other runtimes print theirs.
    assert_eq!(final_metric_names(&k8s), FINAL_METRICS, "{k8s}");
    assert!(k8s.contains("Final metrics: epoch=1 "), "{k8s}");
    let root: serde_json::Value =
        serde_json::from_str(&control("efs/local-root", "GET", "")).unwrap();
    let model_json = Path::new(root["root"].as_str().unwrap())
        .join(&fs)
        .join("models/demo-k8s/model.json");
    let model: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&model_json).unwrap()).unwrap();
    let k8s_acc = model["test_accuracy"]
        .as_f64()
        .or_else(|| model["accuracy"].as_f64())
        .unwrap_or_else(|| panic!("no accuracy in {model}"));
    assert!(k8s_acc >= 0.80, "PyTorchJob accuracy {k8s_acc}: {model}");
    let master_log = d.cluster().replica_log(USER_NS, "demo-k8s-master-0");
    assert!(master_log.contains("world_size=2"), "{master_log}");
    // The job deleted (as kfaws's "already exists" error suggests) and submitted again under
    // its name with other settings: it trains afresh in a checkpoint directory of its own,
    // instead of resuming the deleted job's finished epochs and reporting its figures.
    let checkpoints = Path::new(root["root"].as_str().unwrap())
        .join(&fs)
        .join("checkpoints/demo-k8s");
    let pytorchjobs_api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        d.cluster().client().await,
        USER_NS,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "kubeflow.org",
            "v1",
            "PyTorchJob",
        )),
    );
    pytorchjobs_api
        .delete("demo-k8s", &Default::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pytorchjobs_api.get_opt("demo-k8s").await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "demo-k8s not deleted");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let again = d.stdout(&[
        "train",
        "--runtime",
        "kubernetes",
        "--workers",
        "1",
        "--epochs",
        "1",
        "--hp",
        "max-train-samples=2000",
        "--data",
        "efs:/datasets/fashion-mnist",
        "--job-name",
        "demo-k8s",
    ]);
    assert!(again.contains("Training job demo-k8s succeeded"), "{again}");
    let master_log = d.cluster().replica_log(USER_NS, "demo-k8s-master-0");
    assert!(
        master_log.contains("world_size=1") && !master_log.contains("resuming from checkpoint"),
        "{master_log}"
    );
    let runs = std::fs::read_dir(&checkpoints).unwrap().count();
    assert_eq!(runs, 2, "one checkpoint directory per submission");

    // --resume-from: a new PyTorchJob continues demo-k8s's checkpoints. Every reason it cannot
    // is told before a job is created; settings left out are demo-k8s's (1 replica,
    // max-train-samples 2000), and so is its data.
    let resume = |extra: &[&'static str]| {
        [
            &["train", "--runtime", "kubernetes", "--resume-from"][..],
            extra,
        ]
        .concat()
    };
    let err = d.fails(&resume(&["demo-k8s", "--epochs", "1"]));
    assert!(
        err.contains("--resume-from demo-k8s: it completed its 1 epoch(s), so its newest checkpoint starts epoch 2; --epochs 1 would train nothing: pass --epochs 2 or more"),
        "{err}"
    );
    let err = d.fails(&resume(&[
        "demo-k8s",
        "--epochs",
        "2",
        "--workers",
        "2",
        "--batch-size",
        "64",
        "--job-name",
        "demo-k8s",
    ]));
    assert!(
        err.contains("3 problems with the job; nothing was created")
            && err.contains("the new job needs a name of its own")
            && err.contains("it ran 1 replica(s), --workers is 2")
            && err.contains("it ran with batch-size 32, this job asks for 64"),
        "{err}"
    );
    let err = d.fails(&resume(&["demo-nothing", "--epochs", "2"]));
    assert!(
        err.contains(&format!(
            "--resume-from demo-nothing: no PyTorchJob demo-nothing in namespace {USER_NS}"
        )),
        "{err}"
    );
    let more = d.stdout(&resume(&[
        "demo-k8s",
        "--epochs",
        "2",
        "--job-name",
        "demo-k8s-more",
    ]));
    // demo-k8s's run directory: the newer of the two (run ids sort by time).
    let run_dir = std::fs::read_dir(&checkpoints)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
        .unwrap();
    let run_name = run_dir.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        more.contains("--data efs:/datasets/fashion-mnist: the data PyTorchJob demo-k8s read")
            && more.contains(&format!(
                "resumes PyTorchJob demo-k8s (Succeeded) from the newest checkpoint in \
                 efs:/checkpoints/demo-k8s/{run_name}; changed: epochs 1 -> 2"
            ))
            && more.contains("Training job demo-k8s-more succeeded")
            && more.contains("Final metrics: epoch=2 "),
        "{more}"
    );
    let master_log = d.cluster().replica_log(USER_NS, "demo-k8s-more-master-0");
    assert!(
        master_log.contains("resuming from checkpoint") && master_log.contains("world_size=1"),
        "{master_log}"
    );
    // Its checkpoints went on in demo-k8s's directory; its model is its own.
    assert!(run_dir.join("checkpoint-000003-00000000.bin").exists());
    // Resumed again from demo-k8s, a job would start where demo-k8s-more left off: the epochs
    // to pass are counted from there.
    let err = d.fails(&resume(&["demo-k8s", "--epochs", "2"]));
    assert!(
        err.contains(
            "--resume-from demo-k8s: PyTorchJob demo-k8s-more, which continued the same \
             checkpoints, completed 2 epoch(s), so the newest checkpoint there starts epoch 3 or \
             later"
        ) && err.contains("pass --epochs 3 or more"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&checkpoints).unwrap().count(), 2);
    assert!(!checkpoints.with_file_name("demo-k8s-more").exists());
    let efs = Path::new(root["root"].as_str().unwrap()).join(&fs);
    assert!(efs.join("models/demo-k8s-more/model.json").exists());
    // Nothing left there to resume from: the resumed job fails at once (exit 1, not retried)
    // rather than training from the first epoch, and kfaws says how to go on.
    for f in std::fs::read_dir(&run_dir).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let err = d.fails(&resume(&[
        "demo-k8s-more",
        "--epochs",
        "3",
        "--job-name",
        "demo-k8s-empty",
    ]));
    assert!(
        err.contains("PyTorchJob demo-k8s-empty failed")
            && err.contains("no checkpoint to resume from in ")
            && err.contains(&format!(
                "checkpoints/demo-k8s/{run_name}, and this run requires one"
            ))
            && err.contains("--resume-from demo-k8s-empty and another --job-name"),
        "{err}"
    );
    // A job deleted while kfaws waits for it: kfaws says so (it printed the API server's 404
    // Status).
    let waiting = d
        .process(&[
            "train",
            "--runtime",
            "kubernetes",
            "--workers",
            "1",
            "--epochs",
            "50",
            "--data",
            "efs:/datasets/fashion-mnist",
            "--job-name",
            "demo-gone",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pytorchjobs_api
        .get_opt("demo-gone")
        .await
        .unwrap()
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "demo-gone not created"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    pytorchjobs_api
        .delete("demo-gone", &Default::default())
        .await
        .unwrap();
    let out = waiting.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("PyTorchJob demo-gone was deleted from namespace")
            && !err.contains("Status {"),
        "{err}"
    );

    // `kfaws train … | head -1`: the waiting stops, the PyTorchJob is left to run.
    let (first, code, err) = first_line_then_close(d.process(&[
        "train",
        "--runtime",
        "kubernetes",
        "--workers",
        "1",
        "--epochs",
        "1",
        "--hp",
        "max-train-samples=2000",
        "--data",
        "efs:/datasets/fashion-mnist",
        "--job-name",
        "demo-piped",
    ]));
    assert!(first.contains("PyTorchJob"), "{first}");
    assert_eq!(code, Some(141), "{err}");
    assert!(
        err.contains("The job keeps running") && err.contains("delete pytorchjob demo-piped"),
        "{err}"
    );

    // Ctrl-C while the job is still being checked (DescribeInstanceTypes held 30 s): no
    // PyTorchJob is created after the interrupt, and kfaws says so at once.
    let described = d.calls("DescribeInstanceTypes");
    control(
        "faults",
        "POST",
        &format!(
            r#"{{"service":"ec2","operation":"DescribeInstanceTypes","kind":"latency","latency_ms":30000,"count":1,"account_id":"{}"}}"#,
            d.account
        ),
    );
    let run = Watched::spawn(d.process(&[
        "train",
        "--runtime",
        "kubernetes",
        "--workers",
        "1",
        "--data",
        "efs:/datasets/fashion-mnist",
        "--job-name",
        "demo-precheck",
    ]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while d.calls("DescribeInstanceTypes") == described {
        assert!(
            std::time::Instant::now() < deadline,
            "DescribeInstanceTypes not called"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let t0 = std::time::Instant::now();
    let (code, seen, stderr) = run.interrupt();
    assert_eq!(code, Some(130), "{seen}{stderr}");
    assert!(
        seen.contains("Interrupted: training job demo-precheck was not created.")
            && !seen.contains("PyTorchJob"),
        "{seen}{stderr}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(20),
        "the checks were waited out: {:?}",
        t0.elapsed()
    );
    assert!(
        pytorchjobs_api
            .get_opt("demo-precheck")
            .await
            .unwrap()
            .is_none(),
        "{seen}"
    );

    // Jobs whose replicas fail: the job fails, and kfaws names the replica,
    // its exit code and the end of its log.
    let failing_job = |name: &str, extra: &[&str]| {
        let mut args = vec![
            "train",
            "--runtime",
            "kubernetes",
            "--workers",
            "2",
            "--data",
            "efs:/datasets/fashion-mnist",
            "--job-name",
            name,
        ];
        args.extend_from_slice(extra);
        let err = d.fails(&args);
        assert!(
            err.contains(&format!("PyTorchJob {name} failed")) && err.contains("-0 exited 1"),
            "{err}"
        );
        err
    };
    // The trainer finds IDX files where the dataset hyperparameter says
    // CIFAR-10: exit 1, not retried under restartPolicy ExitCode.
    let err = failing_job("demo-bad", &["--hp", "dataset=cifar10"]);
    assert!(
        err.contains("the dataset hyperparameter says cifar10"),
        "{err}"
    );
    // A replica larger than a whole node of every group (EC2's sizes of
    // m5.xlarge and g5.xlarge): its pods would stay Pending. Refused.
    for (extra, asks) in [
        (&["--cpu", "1000000"][..], "--cpu 1000000 and --memory 2Gi,"),
        (
            &["--memory", "100Gi", "--backend", "nccl"][..],
            "--cpu 1, --memory 100Gi and 1 NVIDIA GPU (--backend nccl),",
        ),
    ] {
        let mut args = vec![
            "train",
            "--runtime",
            "kubernetes",
            "--data",
            "efs:/datasets/fashion-mnist",
            "--job-name",
            "demo-huge",
        ];
        args.extend_from_slice(extra);
        let err = d.fails(&args);
        assert!(
            err.contains(&format!(
                "one replica asks for {asks} more than a whole node"
            )) && err.contains("cpu (m5.xlarge: 4 vCPUs, 16384 MiB, no NVIDIA GPU)")
                && err.contains("gpu (g5.xlarge: 4 vCPUs, 16384 MiB, 1 NVIDIA GPU(s))"),
            "{err}"
        );
        // With NCCL, the CPU-only image is the second problem, told in the same run.
        if extra.contains(&"nccl") {
            assert!(
                err.contains("2 problems with the job; nothing was created:\n  - ")
                    && err.contains(&built_without_nccl),
                "{err}"
            );
        }
    }
    // More replicas than every node at max_size holds (cpu: 4 of 1 vCPU on each of 4
    // m5.xlarge; gpu: 4 on its one g5.xlarge): the ranks beyond would stay Pending.
    let err = d.fails(&[
        "train",
        "--runtime",
        "kubernetes",
        "--data",
        "efs:/datasets/fashion-mnist",
        "--workers",
        "21",
        "--job-name",
        "demo-wide",
    ]);
    assert!(
        err.contains("--workers 21: the node groups hold at most 20 replica(s) of --cpu 1")
            && err.contains("cpu (m5.xlarge): 4 per node × max_size 4")
            && err.contains("gpu (g5.xlarge): 4 per node × max_size 1"),
        "{err}"
    );
    // backend=nccl with the image of this CPU build: its label says so, and
    // the job is refused before it is created (every replica would ask for a
    // GPU, then refuse the backend at start).
    let err = d.fails(&[
        "train",
        "--runtime",
        "kubernetes",
        "--data",
        "efs:/datasets/fashion-mnist",
        "--backend",
        "nccl",
        "--job-name",
        "demo-nccl",
    ]);
    assert!(err.contains(&built_without_nccl), "{err}");
    let pytorchjobs: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        d.cluster().client().await,
        USER_NS,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "kubeflow.org",
            "v1",
            "PyTorchJob",
        )),
    );
    for refused in ["demo-nccl", "demo-huge"] {
        assert!(pytorchjobs.get_opt(refused).await.unwrap().is_none());
    }
    let job = pytorchjobs.get("demo-bad").await.unwrap();
    for replica in ["Master", "Worker"] {
        // Case C17: no Istio sidecar, by label and by annotation, as the
        // API server stored the template.
        let metadata = &job.data["spec"]["pytorchReplicaSpecs"][replica]["template"]["metadata"];
        for key in ["labels", "annotations"] {
            assert_eq!(
                metadata[key]["sidecar.istio.io/inject"], "false",
                "{replica}: {metadata}"
            );
        }
    }

    // SageMaker: 2 instances, the local directory uploaded to the bucket.
    let sm = d.stdout(&[
        "train",
        "--runtime",
        "sagemaker",
        "--workers",
        "2",
        "--epochs",
        "1",
        "--data",
        FASHION_MNIST,
        "--hp",
        "dataset=fashion-mnist",
        "--job-name",
        "demo-sm",
        "--image",
        &image,
        "--instance-type",
        "ml.m5.2xlarge",
        "--follow",
    ]);
    assert!(sm.contains("Training job demo-sm completed"), "{sm}");
    assert!(
        sm.contains(&format!(
            "Dataset in {FASHION_MNIST}: fashion-mnist (60000 training and 10000 test images of \
             1x28x28)"
        )),
        "{sm}"
    );
    let s3_calls: Vec<_> = d
        .aws()
        .await
        .calls()
        .into_iter()
        .filter(|(service, _, _)| service == "s3")
        .collect();
    assert!(
        d.calls("PutObject") > 0,
        "the local --data was uploaded: {s3_calls:?}"
    );
    // The same name again with another directory: refused before anything is uploaded to the
    // prefix the completed job's channel reads (SageMaker never frees a job's name).
    let puts = d.calls("PutObject");
    let other = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(FASHION_MNIST).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), other.path().join(e.file_name())).unwrap();
    }
    // The dataset line says what max-train-samples takes of the directory.
    let err = d.fails_with_output(&[
        "train",
        "--runtime",
        "sagemaker",
        "--data",
        other.path().to_str().unwrap(),
        "--hp",
        "dataset=fashion-mnist",
        "--hp",
        "max-train-samples=600",
        "--job-name",
        "demo-sm",
        "--image",
        &image,
    ]);
    assert!(
        err.contains("training job \"demo-sm\" already exists (status Completed)")
            && err.contains("use another name")
            && err.contains(&format!(
                "Dataset in {}: fashion-mnist (600 of 60000 training images (max-train-samples) \
                 and 10000 test images of 1x28x28)",
                other.path().display()
            )),
        "{err}"
    );
    assert_eq!(d.calls("PutObject"), puts, "nothing uploaded: {err}");
    // --follow: the instances' log, then the final status after its last line.
    let last_log = sm
        .rfind("[algo-1] epoch=1")
        .unwrap_or_else(|| panic!("no log: {sm}"));
    let completed = sm
        .find("] Completed / ")
        .unwrap_or_else(|| panic!("no status: {sm}"));
    assert!(last_log < completed, "{sm}");
    let sm_acc = metric(&sm, "test_acc").unwrap_or_else(|| panic!("no test_acc: {sm}"));
    assert!(sm_acc >= 0.80, "SageMaker accuracy {sm_acc}: {sm}");
    assert!(sm.contains("model.tar.gz"), "{sm}");
    // SageMaker's FinalMetricDataList, printed as the other runtimes print theirs.
    assert_eq!(final_metric_names(&sm), FINAL_METRICS, "{sm}");

    // --resume-from: a new job continues from demo-sm's checkpoints. A local --data with other
    // content than the channel demo-sm read (one byte changed: the same names and sizes), and
    // another world size, are refused together, before anything is uploaded or created.
    let bucket = d.output("stack.storage", "BucketName");
    let mut names: Vec<_> = std::fs::read_dir(other.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    let changed = other.path().join(&names[0]);
    let mut bytes = std::fs::read(&changed).unwrap();
    // The gzip header's modification time (RFC 1952, bytes 4-7), outside its checksum: the file
    // still reads (the trainer's check of --data passes), its bytes differ.
    assert_eq!(bytes[..2], [0x1f, 0x8b], "{changed:?} is gzip");
    assert_eq!(bytes[3] & 0x02, 0, "{changed:?} has no header CRC (FHCRC)");
    bytes[4] ^= 0xff;
    std::fs::write(&changed, &bytes).unwrap();
    // That file's object uploaded again, the same bytes, as another tool would: with the SDK's
    // default CRC32 checksum instead of kfaws' SHA-256, which kfaws then compares.
    let original = std::path::Path::new(FASHION_MNIST).join(&names[0]);
    d.aws()
        .await
        .s3()
        .put_object()
        .bucket(&bucket)
        .key(format!(
            "kfaws/datasets/demo-sm/{}",
            names[0].to_string_lossy()
        ))
        .body(std::fs::read(&original).unwrap().into())
        .send()
        .await
        .unwrap();
    let puts = d.calls("PutObject");
    let creates = d.calls("CreateTrainingJob");
    let err = d.fails(&[
        "train",
        "--runtime",
        "sagemaker",
        "--workers",
        "1",
        "--epochs",
        "1",
        "--data",
        other.path().to_str().unwrap(),
        "--hp",
        "dataset=fashion-mnist",
        "--job-name",
        "demo-sm-2",
        "--image",
        &image,
        "--resume-from",
        "demo-sm",
    ]);
    assert!(
        err.contains("3 problems with the job; nothing was created")
            && err.contains("ran on 2 instance(s), --workers is 1")
            && err.contains(&format!(
                "the newest checkpoint under s3://{bucket}/kfaws/checkpoints/demo-sm \
                 (checkpoint-000002-00000000.bin) starts epoch 2 at step 0, past --epochs 1: the \
                 job would train nothing; pass --epochs 2 or more"
            ))
            && err.contains(&format!(
                "holds other data than s3://{bucket}/kfaws/datasets/demo-sm/, the channel demo-sm \
                 read: {} has the same size but other content here (CRC32 ",
                names[0].to_string_lossy(),
            )),
        "{err}"
    );
    assert_eq!(d.calls("PutObject"), puts, "nothing uploaded: {err}");
    assert_eq!(d.calls("CreateTrainingJob"), creates, "{err}");
    // The same directory, the same settings (the dataset it detected need not be named, and
    // --workers and --instance-type left out are demo-sm's, not the defaults): its files are
    // not uploaded again, and the new job trains a second epoch from demo-sm's last checkpoint.
    let resumed = d.stdout(&[
        "train",
        "--runtime",
        "sagemaker",
        "--epochs",
        "2",
        "--data",
        FASHION_MNIST,
        "--job-name",
        "demo-sm-2",
        "--image",
        &image,
        "--resume-from",
        "demo-sm",
        "--follow",
    ]);
    assert!(
        resumed.contains(&format!(
            "--data {FASHION_MNIST}: the same files as s3://{bucket}/kfaws/datasets/demo-sm/, \
             which training job demo-sm read: not uploaded again"
        )) && resumed.contains(&format!(
            "resumes training job demo-sm (Completed) from the newest checkpoint in \
             s3://{bucket}/kfaws/checkpoints/demo-sm: epoch 2, step 0; changed: epochs 1 -> 2\n"
        )) && resumed.contains("Training job demo-sm-2 (sagemaker): 2 × ml.m5.2xlarge, ")
            && resumed.contains("resuming from checkpoint")
            && resumed.contains("Training job demo-sm-2 completed")
            && resumed.contains("Final metrics: epoch=2 "),
        "{resumed}"
    );
    assert_eq!(d.calls("PutObject"), puts, "nothing uploaded: {resumed}");
    // --data left out too: the channel demo-sm read, said. With --epochs 1 the newest
    // checkpoint leaves nothing to train, so the job is refused before anything is created.
    let creates = d.calls("CreateTrainingJob");
    let out = d.fails_with_output(&[
        "train",
        "--runtime",
        "sagemaker",
        "--epochs",
        "1",
        "--job-name",
        "demo-sm-4",
        "--image",
        &image,
        "--resume-from",
        "demo-sm",
    ]);
    assert!(
        out.contains(&format!(
            "--data s3://{bucket}/kfaws/datasets/demo-sm/: the channel training job demo-sm read"
        )) && out.contains("past --epochs 1: the job would train nothing")
            && !out.contains("--workers is")
            && !out.contains("holds other data"),
        "{out}"
    );
    assert_eq!(d.calls("CreateTrainingJob"), creates, "{out}");

    // The bucket emptied since (a destroy and apply make it again): both the data demo-sm read
    // and its checkpoints are gone, and the errors say so rather than "other data".
    {
        let account = d.aws().await;
        let s3 = account.s3();
        let mut moved = Vec::new();
        for prefix in ["kfaws/datasets/demo-sm/", "kfaws/checkpoints/demo-sm/"] {
            let listed = s3
                .list_objects_v2()
                .bucket(&bucket)
                .prefix(prefix)
                .send()
                .await
                .unwrap();
            for key in listed.contents().iter().filter_map(|o| o.key()) {
                let kept = format!("kept/{key}");
                account.move_object(&bucket, key, &kept).await;
                moved.push((key.to_string(), kept));
            }
        }
        assert!(!moved.is_empty());
        let err = d.fails(&[
            "train",
            "--runtime",
            "sagemaker",
            "--workers",
            "2",
            "--epochs",
            "3",
            "--data",
            FASHION_MNIST,
            "--job-name",
            "demo-sm-3",
            "--image",
            &image,
            "--resume-from",
            "demo-sm",
        ]);
        assert!(
            err.contains(&format!(
                "nothing is left under s3://{bucket}/kfaws/datasets/demo-sm/, the data it read \
                 (the artifact bucket was emptied or made again since it ran)"
            )) && err.contains(&format!(
                "no checkpoint under s3://{bucket}/kfaws/checkpoints/demo-sm (the job ended \
                 before writing one, or the artifact bucket was emptied or made again since it \
                 ran)"
            )) && !err.contains("holds other data"),
            "{err}"
        );
        for (key, kept) in moved {
            account.move_object(&bucket, &kept, &key).await;
        }
    }

    // Ctrl-C during the upload of a local --data: the upload stops before its next file, and no
    // job is created. 2,000 small files beside the dataset make the upload outlast the signal.
    {
        let many = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(FASHION_MNIST).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), many.path().join(e.file_name())).unwrap();
        }
        std::fs::create_dir(many.path().join("notes")).unwrap();
        for i in 0..2000 {
            let note = many.path().join(format!("notes/{i:04}.txt"));
            std::fs::write(note, format!("note {i}\n")).unwrap();
        }
        let creates = d.calls("CreateTrainingJob");
        let mut run = Watched::spawn(d.process(&[
            "train",
            "--runtime",
            "sagemaker",
            "--data",
            many.path().to_str().unwrap(),
            "--hp",
            "dataset=fashion-mnist",
            "--job-name",
            "demo-cut",
            "--image",
            &image,
        ]));
        run.read_until(|line| line.starts_with("Uploading "));
        let seen = &run.seen;
        let prefix = format!("s3://{bucket}/kfaws/datasets/demo-cut/");
        assert!(
            seen.contains("Uploading 2004 file(s), ")
                && seen.contains(&format!(
                    " MiB, from {} to {prefix} (Ctrl-C stops before the next file; no job is \
                     created)",
                    many.path().display()
                )),
            "{seen}"
        );
        let (code, seen, stderr) = run.interrupt();
        assert_eq!(code, Some(130), "{seen}{stderr}");
        let uploaded: usize = seen
            .split("Uploaded ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{seen}{stderr}"));
        assert!(
            uploaded < 2004
                && seen.contains(&format!(
                    "Uploaded {uploaded} of 2004 file(s) from {} to {prefix}",
                    many.path().display()
                ))
                && seen.contains(&format!(
                    "What was uploaded for it stays under {prefix} until the next run of job \
                     name demo-cut clears it."
                ))
                && seen.contains("Interrupted: training job demo-cut was not created."),
            "{seen}{stderr}"
        );
        assert_eq!(d.calls("CreateTrainingJob"), creates, "{seen}");
        let keys: usize = d
            .aws()
            .await
            .s3()
            .list_objects_v2()
            .bucket(&bucket)
            .prefix("kfaws/datasets/demo-cut/")
            .into_paginator()
            .send()
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .map(|page| page.unwrap().contents().len())
            .sum();
        assert_eq!(
            keys, uploaded,
            "the objects are the files it said it uploaded"
        );
    }

    // The endpoint classifies a test image it never trained on.
    d.stdout(&["endpoint", "deploy", "--job", "demo-sm"]);
    let png = d.dir.path().join("sample.png");
    let sample = std::process::Command::new(bin("kfaws-trainer"))
        .args([
            "sample",
            "--data-dir",
            FASHION_MNIST,
            "--index",
            "0",
            "--output",
        ])
        .arg(&png)
        .output()
        .unwrap();
    assert!(sample.status.success());
    let truth = String::from_utf8(sample.stdout).unwrap();
    let label = truth
        .trim()
        .strip_prefix("label=")
        .and_then(|l| l.rsplit_once(" index="))
        .map(|(l, _)| l.to_string())
        .unwrap();
    let answer = d.stdout(&[
        "endpoint",
        "invoke",
        "demo-sm",
        "--image",
        png.to_str().unwrap(),
    ]);
    assert!(
        answer.contains(&format!(": {label} (class")),
        "truth {truth}: {answer}"
    );
    // JSON instances: every one is classified and printed.
    let instances = d.dir.path().join("instances.json");
    std::fs::write(
        &instances,
        serde_json::json!({ "instances": [vec![0; 784], vec![255; 784]] }).to_string(),
    )
    .unwrap();
    let answer = d.stdout(&[
        "endpoint",
        "invoke",
        "demo-sm",
        "--json",
        instances.to_str().unwrap(),
    ]);
    assert_eq!(answer.matches("scores: [").count(), 2, "{answer}");
    assert!(
        answer.contains("instances.json[0]: ") && answer.contains("instances.json[1]: "),
        "{answer}"
    );
    // Invoking needs only the region: from a directory without kfaws.toml, with --region.
    let elsewhere = tempfile::tempdir().unwrap();
    let invoke_elsewhere = |region: Option<&str>| {
        let mut cmd = d.process(&["endpoint", "invoke", "demo-sm", "--json"]);
        cmd.arg(&instances).current_dir(elsewhere.path());
        if let Some(region) = region {
            cmd.args(["--region", region]);
        }
        cmd.env_remove("AWS_REGION")
            .env_remove("AWS_DEFAULT_REGION")
            .output()
            .unwrap()
    };
    let out = invoke_elsewhere(Some("us-east-1"));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches("scores: [")
            .count(),
        2
    );
    let out = invoke_elsewhere(None);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("region is not set: pass --region"),
        "{out:?}"
    );
    assert!(
        d.state()["endpoints"]["demo-sm"].is_object(),
        "recorded in state"
    );
    // kfaws does not resize an endpoint in place.
    let err = d.fails(&[
        "endpoint",
        "deploy",
        "--job",
        "demo-sm",
        "--instance-count",
        "2",
    ]);
    assert!(err.contains("already deployed"), "{err}");
    // A second endpoint of the same model, named apart from the deployment's
    // own --name, deleted by name.
    d.stdout(&[
        "endpoint",
        "deploy",
        "--job",
        "demo-sm",
        "--endpoint-name",
        "demo-sm-2",
    ]);
    assert!(d
        .stdout(&["state", "list"])
        .contains("SageMaker endpoint demo-sm-2"));
    // A targeted destroy deletes the endpoints only when it deletes what they use.
    let endpoints_go =
        "SageMaker endpoint(s) deployed with `kfaws endpoint deploy` will be deleted";
    let elsewhere = d.stdout(&["plan", "--destroy", "--target", "k8s.efs-storage"]);
    assert!(
        elsewhere.contains("k8s.efs-storage") && !elsewhere.contains(endpoints_go),
        "{elsewhere}"
    );
    let role = d.stdout(&["plan", "--destroy", "--target", "stack.iam"]);
    assert!(
        role.contains(&format!("2 {endpoints_go}")) && role.contains("demo-sm, demo-sm-2"),
        "{role}"
    );
    let deleted = d.stdout(&["endpoint", "delete", "demo-sm-2"]);
    assert!(
        deleted.contains("Deleted endpoint demo-sm-2: endpoint, endpoint configuration, model."),
        "{deleted}"
    );
    assert!(d.state()["endpoints"].get("demo-sm-2").is_none());
    // A model artifact gone from S3 is refused before anything is created or recorded.
    {
        let account = d.aws().await;
        let s3 = account.s3();
        let artifact = d.state()["endpoints"]["demo-sm"]["model_data_url"]
            .as_str()
            .unwrap()
            .to_string();
        let (bucket, key) = artifact
            .strip_prefix("s3://")
            .and_then(|r| r.split_once('/'))
            .unwrap();
        let kept = format!("{key}.kept");
        account.move_object(bucket, key, &kept).await;
        let models = d.calls("CreateModel");
        let err = d.fails(&[
            "endpoint",
            "deploy",
            "--job",
            "demo-sm",
            "--endpoint-name",
            "demo-sm-3",
        ]);
        assert!(
            err.contains(&format!(
                "the model artifact {artifact} of training job demo-sm is gone"
            )),
            "{err}"
        );
        assert_eq!(d.calls("CreateModel"), models);
        assert!(d.state()["endpoints"].get("demo-sm-3").is_none());
        // An artifact that is there but is no model.tar.gz: the endpoint's
        // container never passes its health check, the endpoint is Failed,
        // and what was created stays recorded as failed until deleted.
        s3.put_object()
            .bucket(bucket)
            .key(key)
            .body(b"not a tarball".to_vec().into())
            .send()
            .await
            .unwrap();
        let err = d.fails(&[
            "endpoint",
            "deploy",
            "--job",
            "demo-sm",
            "--endpoint-name",
            "demo-sm-3",
        ]);
        assert!(
            err.contains("deploying endpoint demo-sm-3 (recorded as failed"),
            "{err}"
        );
        assert_eq!(d.state()["endpoints"]["demo-sm-3"]["status"], "failed");
        let deleted = d.stdout(&["endpoint", "delete", "demo-sm-3"]);
        assert!(deleted.contains("Deleted endpoint demo-sm-3"), "{deleted}");
        assert!(d.state()["endpoints"].get("demo-sm-3").is_none());
        account.move_object(bucket, &kept, key).await;
    }
    // A model of the same spec made outside kfaws (no kfaws:deployment tag)
    // is neither adopted nor recorded: a destroy would delete it.
    let sm_client = d.aws().await.sagemaker();
    let job = sm_client
        .describe_training_job()
        .training_job_name("demo-sm")
        .send()
        .await
        .unwrap();
    // A model made outside kfaws through the SDK: the job's role and image,
    // the given model data, and the given kfaws:deployment tag if any.
    let foreign_model = |name: &str, data: &str, deployment: Option<&str>| {
        let image = job
            .algorithm_specification()
            .and_then(|a| a.training_image())
            .unwrap()
            .to_string();
        sm_client
            .create_model()
            .model_name(name)
            .execution_role_arn(job.role_arn().unwrap())
            .primary_container(
                aws_sdk_sagemaker::types::ContainerDefinition::builder()
                    .image(image)
                    .model_data_url(data)
                    .build(),
            )
            .set_tags(deployment.map(|value| {
                vec![aws_sdk_sagemaker::types::Tag::builder()
                    .key("kfaws:deployment")
                    .value(value)
                    .build()]
            }))
            .send()
    };
    let artifact = job.model_artifacts().unwrap().s3_model_artifacts().unwrap();
    foreign_model("someone-elses", artifact, None)
        .await
        .unwrap();
    let err = d.fails(&[
        "endpoint",
        "deploy",
        "--job",
        "demo-sm",
        "--endpoint-name",
        "someone-elses",
    ]);
    assert!(
        err.contains("model \"someone-elses\" exists")
            && err.contains("kfaws:deployment tag: none"),
        "{err}"
    );
    assert!(d.state()["endpoints"].get("someone-elses").is_none());
    assert!(sm_client
        .describe_model()
        .model_name("someone-elses")
        .send()
        .await
        .is_ok());
    // Nor one that carries this deployment's name but not its lineage (another
    // state of the same name, or a hand-made tag) and other model data.
    foreign_model(
        "same-name-tag",
        "s3://elsewhere/model.tar.gz",
        Some(&d.name),
    )
    .await
    .unwrap();
    let err = d.fails(&[
        "endpoint",
        "deploy",
        "--job",
        "demo-sm",
        "--endpoint-name",
        "same-name-tag",
    ]);
    assert!(
        err.contains("model \"same-name-tag\" exists") && err.contains("did not make it"),
        "{err}"
    );
    assert!(d.state()["endpoints"].get("same-name-tag").is_none());
    sm_client
        .delete_model()
        .model_name("same-name-tag")
        .send()
        .await
        .unwrap();

    // A plan saved before the next job starts, renaming the execution role.
    d.write_config(&format!(
        "{}[options]\nsagemaker_role_name = \"{}-renamed\"\n",
        kubeflow_config(true),
        d.name
    ));
    d.stdout(&["plan", "--out", "rename.plan"]);
    d.write_config(&kubeflow_config(true));

    // `kfaws train … | head -1`: the reader going away stops the waiting,
    // not the job (only a signal to kfaws stops a SageMaker job).
    let (first, code, err) = first_line_then_close(d.process(&[
        "train",
        "--runtime",
        "sagemaker",
        "--workers",
        "1",
        "--epochs",
        "50",
        "--data",
        "efs:/datasets/fashion-mnist",
        "--job-name",
        "demo-long",
        "--image",
        &image,
    ]));
    assert!(
        first.starts_with("Training job demo-long (sagemaker)"),
        "{first}"
    );
    assert_eq!(code, Some(141), "{err}");
    assert!(
        err.contains("Training job demo-long keeps running") && err.contains("stop-training-job"),
        "{err}"
    );
    // A training job still running holds destroy back, and a rename of the
    // execution role it runs as (CloudFormation would delete the old role).
    let err = d.fails(&["destroy", "--auto-approve", "--force-destroy-buckets"]);
    assert!(
        err.contains("demo-long") && err.contains("still running"),
        "{err}"
    );
    // Nor can a job resume from it while it runs: both would write its checkpoints.
    let resume_long = |job: &'static str, from: &'static str, epochs: &'static str| {
        vec![
            "train",
            "--runtime",
            "sagemaker",
            "--workers",
            "1",
            "--epochs",
            epochs,
            "--data",
            "efs:/datasets/fashion-mnist",
            "--job-name",
            job,
            "--resume-from",
            from,
            "--follow",
            "--image",
            image.as_str(),
        ]
    };
    let err = d.fails(&resume_long("demo-long-2", "demo-long", "2"));
    assert!(
        err.contains("--resume-from demo-long: training job demo-long is InProgress")
            && err.contains("stop-training-job --training-job-name demo-long"),
        "{err}"
    );
    d.write_config(&format!(
        "{}[options]\nsagemaker_role_name = \"{}-renamed\"\n",
        kubeflow_config(true),
        d.name
    ));
    let err = d.fails(&["plan"]);
    assert!(
        err.contains("demo-long")
            && err.contains("still running")
            && err.contains("rename options.sagemaker_role_name"),
        "{err}"
    );
    d.write_config(&kubeflow_config(true));
    // Applied later, the saved plan is checked again: the job started since.
    let err = d.fails(&["apply", "rename.plan"]);
    assert!(
        err.contains("demo-long")
            && err.contains("still running")
            && err.contains("rename options.sagemaker_role_name"),
        "{err}"
    );
    sm_client
        .stop_training_job()
        .training_job_name("demo-long")
        .send()
        .await
        .unwrap();
    for _ in 0..300 {
        let status = sm_client
            .describe_training_job()
            .training_job_name("demo-long")
            .send()
            .await
            .unwrap()
            .training_job_status()
            .map(|s| s.as_str().to_string());
        if status.as_deref() == Some("Stopped") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // SageMaker uploads a stopped job's model too; only a completed job's is deployed.
    let err = d.fails(&["endpoint", "deploy", "--job", "demo-long"]);
    assert!(
        err.contains(
            "training job demo-long is Stopped, not Completed: only a completed job's model is \
             deployed (its model artifact is from a run that did not finish)"
        ),
        "{err}"
    );
    // Stopped (its trainer checkpointed on SIGTERM), it is resumed by a new job. Ctrl-C on
    // kfaws stops that one (StopTrainingJob), and kfaws says how to continue it.
    {
        let mut run = Watched::spawn(d.process(&resume_long("demo-long-2", "demo-long", "50")));
        run.read_until(|line| line.contains("resuming from checkpoint"));
        let seen = &run.seen;
        assert!(
            seen.contains(&format!(
                "resumes training job demo-long (Stopped) from the newest checkpoint in \
                 s3://{bucket}/kfaws/checkpoints/demo-long: epoch "
            )),
            "{seen}"
        );
        // While it runs, no other job may resume from the same checkpoints.
        let err = d.fails(&resume_long("demo-long-x", "demo-long", "50"));
        assert!(
            err.contains(
                "training job demo-long-2 (resumed from the same checkpoints) is InProgress"
            ),
            "{err}"
        );
        let (code, seen, stderr) = run.interrupt();
        assert_eq!(code, Some(130), "{seen}{stderr}");
        assert!(
            seen.contains("Interrupted: stopping training job demo-long-2")
                && seen.contains(
                    "Training job demo-long-2 stopped. To continue it from its checkpoints, run \
                     the same `kfaws train` with --resume-from demo-long-2 and another --job-name."
                ),
            "{seen}"
        );
    }
    // Resumed in turn, by a job that finishes the epoch the newest checkpoint is in (however far
    // the two jobs before it got): the checkpoints stay where the first job wrote them.
    let prefix = "kfaws/checkpoints/demo-long/";
    let listed = d
        .aws()
        .await
        .s3()
        .list_objects_v2()
        .bucket(&bucket)
        .prefix(prefix)
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = listed
        .contents()
        .iter()
        .filter_map(|o| o.key()?.strip_prefix(prefix))
        .collect();
    let (epoch, step, _) = kfaws::sagemaker::resume::newest_checkpoint(keys.iter().copied())
        .unwrap_or_else(|| panic!("no checkpoint: {keys:?}"));
    let epochs: &'static str = Box::leak(epoch.to_string().into_boxed_str());
    let resumed = d.stdout(&resume_long("demo-long-3", "demo-long-2", epochs));
    assert!(
        resumed.contains(&format!(
            "resumes training job demo-long-2 (Stopped) from the newest checkpoint in \
             s3://{bucket}/kfaws/checkpoints/demo-long: epoch {epoch}, step {step}; changed: \
             epochs 50 -> {epoch}\n"
        )) && resumed.contains("resuming from checkpoint")
            && resumed.contains("Training job demo-long-3 completed"),
        "{resumed}"
    );

    // Destroy removes the endpoint first, then everything else.
    // The bucket holds the training data, checkpoints and model artifacts.
    let err = d.fails(&["destroy", "--auto-approve"]);
    assert!(err.contains("--force-destroy-buckets"), "{err}");
    assert!(
        d.state()["endpoints"]["demo-sm"].is_object(),
        "nothing deleted"
    );
    let destroyed = d.stdout(&["destroy", "--auto-approve", "--force-destroy-buckets"]);
    assert!(
        destroyed.contains("sagemaker endpoint demo-sm: deleting"),
        "{destroyed}"
    );
    // Someone else's model of the refused deploy is theirs to delete.
    assert!(!destroyed.contains("someone-elses"), "{destroyed}");
    let left = d.aws().await.leftovers().await;
    assert_eq!(
        left,
        ["sagemaker model someone-elses"],
        "left behind: {left:?}"
    );
    sm_client
        .delete_model()
        .model_name("someone-elses")
        .send()
        .await
        .unwrap();
    let left = d.aws().await.leftovers().await;
    assert!(left.is_empty(), "left behind: {left:?}");
}
