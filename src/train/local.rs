//! `kfaws train --runtime local`: N trainer processes on this machine under
//! the Kubeflow PyTorchJob environment contract (`MASTER_ADDR`,
//! `MASTER_PORT`, `WORLD_SIZE`, `RANK`; see the training operator's
//! [PyTorchJob guide](https://www.kubeflow.org/docs/components/trainer/legacy-v1/user-guides/pytorch/)),
//! the quickest way to try a change to the trainer or its hyperparameters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

/// Variables of the launch contracts the trainer reads. Inherited values
/// would override or confuse what this runner sets (flags and `TRAINER_*`
/// come first in the trainer's resolution order), so children start
/// without them.
const CONTRACT_PREFIXES: [&str; 3] = ["TRAINER_", "PET_", "SM_"];
const CONTRACT_VARS: [&str; 4] = ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"];

/// The trainer's tuning variables (`kfaws-trainer train --help`) that a
/// local run passes from kfaws' environment to every rank: they change how
/// the ranks wait, reduce and use threads, not where they read, write or
/// meet, which this runner sets. Each is checked by [`Tuning::from_env`].
pub const TUNING_VARS: [(&str, Rule); 7] = [
    ("TRAINER_CONNECT_TIMEOUT", Rule::Seconds),
    ("TRAINER_COLLECTIVE_TIMEOUT", Rule::Seconds),
    ("TRAINER_STOP_GRACE", Rule::Seconds),
    ("TRAINER_ALL_REDUCE", Rule::AllReduce),
    ("TRAINER_THREADS", Rule::Count),
    ("TRAINER_REPLICAS", Rule::Count),
    ("TRAINER_METRICS_PORT", Rule::Port),
];

/// What a [`TUNING_VARS`] value must be: the trainer's own parse of it
/// (`trainer/src/contract`), so a bad value is refused once, naming the
/// variable, before any rank starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Whole seconds, at most [`kfaws_trainer_contract::MAX_TIMEOUT_SECS`].
    Seconds,
    /// `star` or `ring` (the trainer's `--all-reduce`).
    AllReduce,
    /// A count from 1 to [`kfaws_trainer_contract::MAX_THREADS`].
    Count,
    /// A TCP port, 1..=65535 (rank 0 serves `/metrics` there).
    Port,
}

impl Rule {
    /// `None` when `value` obeys the rule; else what it must be.
    fn broken_by(self, value: &str) -> Option<String> {
        let ok = match self {
            Self::Seconds => value
                .parse::<u64>()
                .is_ok_and(|n| n <= kfaws_trainer_contract::MAX_TIMEOUT_SECS),
            Self::AllReduce => matches!(value, "star" | "ring"),
            Self::Count => value
                .parse::<usize>()
                .is_ok_and(|n| (1..=kfaws_trainer_contract::MAX_THREADS).contains(&n)),
            Self::Port => value.parse::<u16>().is_ok_and(|n| n >= 1),
        };
        (!ok).then(|| match self {
            Self::Seconds => format!(
                "whole seconds, 0 to {} (28 days)",
                kfaws_trainer_contract::MAX_TIMEOUT_SECS
            ),
            Self::AllReduce => "star or ring".into(),
            Self::Count => format!(
                "a whole number from 1 to {}",
                kfaws_trainer_contract::MAX_THREADS
            ),
            Self::Port => "a TCP port, 1 to 65535".into(),
        })
    }
}

/// The trainer's variables that are not [`TUNING_VARS`] (`kfaws-trainer train --help`
/// and `serve --help`): where it reads, writes and meets, which this runner sets itself,
/// and the serving container's, which `train` does not read.
pub const OTHER_TRAINER_VARS: [&str; 19] = [
    "TRAINER_BIND_ADDR",
    "TRAINER_CHANNEL",
    "TRAINER_CHECKPOINT_DIR",
    "TRAINER_DATA_DIR",
    "TRAINER_HYPERPARAMETERS",
    "TRAINER_MASTER_ADDR",
    "TRAINER_MASTER_PORT",
    "TRAINER_MODEL_DIR",
    "TRAINER_PARENT_PID",
    "TRAINER_RANK",
    "TRAINER_REQUIRE_CHECKPOINT",
    "TRAINER_SAGEMAKER_ROOT",
    "TRAINER_WORLD_SIZE",
    "TRAINER_BODY_TIMEOUT",
    "TRAINER_MAX_BODY_BYTES",
    "TRAINER_MAX_IMAGE_PIXELS",
    "TRAINER_SERVE_BIND_ADDR",
    "TRAINER_SERVE_PORT",
    "TRAINER_SERVE_WORKERS",
];

/// The trainer variables of kfaws' own environment, sorted out for a local
/// run: the [`TUNING_VARS`] each rank gets, and the other launch-contract
/// variables ([`CONTRACT_PREFIXES`], [`CONTRACT_VARS`]) it does not, since
/// `kfaws train` sets the contract itself (`--workers`, `--data`, `--hp`,
/// `--output-dir`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuning {
    /// Passed to every rank, by name.
    pub passed: BTreeMap<String, String>,
    /// Not passed, by name (for a warning).
    pub dropped: Vec<String>,
    /// `TRAINER_*` names the trainer does not read at all (a typo?), not passed, each with
    /// the tuning variable it is nearest to, if one is near (for a warning).
    pub unknown: Vec<(String, Option<&'static str>)>,
}

impl Tuning {
    /// Sorts `vars` (an environment's `(name, value)` pairs). Pure.
    ///
    /// # Errors
    /// A message naming the first [`TUNING_VARS`] variable whose value
    /// breaks its [`Rule`], and the rule.
    pub fn from_env(vars: impl IntoIterator<Item = (String, String)>) -> Result<Self, String> {
        let mut tuning = Self::default();
        for (k, v) in vars {
            if let Some((_, rule)) = TUNING_VARS.iter().find(|(name, _)| *name == k) {
                if let Some(must) = rule.broken_by(&v) {
                    return Err(format!(
                        "{k}={v:?} in the environment: must be {must} (the trainer's {k}, \
                         passed to every local rank); fix or unset it"
                    ));
                }
                tuning.passed.insert(k, v);
            } else if k.starts_with("TRAINER_") && !OTHER_TRAINER_VARS.contains(&k.as_str()) {
                let near = TUNING_VARS
                    .iter()
                    .map(|(name, _)| (strsim::jaro_winkler(name, &k), *name))
                    .filter(|(score, _)| *score > 0.9)
                    .max_by(|a, b| a.0.total_cmp(&b.0))
                    .map(|(_, name)| name);
                tuning.unknown.push((k, near));
            } else if CONTRACT_PREFIXES.iter().any(|p| k.starts_with(p))
                || CONTRACT_VARS.contains(&k.as_str())
            {
                tuning.dropped.push(k);
            }
        }
        tuning.dropped.sort();
        tuning.unknown.sort();
        Ok(tuning)
    }

    /// How long the ranks have to exit once one failed or all were told
    /// to stop: the stop grace they were given plus 5 s ([`STOP_AFTER`]
    /// for the trainer's default 30 s).
    pub fn stop_after(&self) -> Duration {
        self.passed
            .get("TRAINER_STOP_GRACE")
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(STOP_AFTER, |grace| {
                Duration::from_secs(grace.saturating_add(5))
            })
    }
}

/// Where each line a rank prints goes: `(rank, line)`.
pub type LineSink = Arc<dyn Fn(u32, &str) + Send + Sync>;

/// A local training run.
#[derive(Debug, Clone)]
pub struct LocalJob {
    /// The `kfaws-trainer` binary.
    pub trainer: PathBuf,
    /// Number of processes (world size), at least 1.
    pub workers: u32,
    /// The dataset directory.
    pub data_dir: PathBuf,
    /// The job's directory: `model/` and `checkpoints/` are written there.
    pub job_dir: PathBuf,
    /// Hyperparameters, passed as `--hp KEY=VALUE`.
    pub hyperparameters: BTreeMap<String, String>,
    /// The trainer's tuning variables from kfaws' environment, set in every
    /// rank's (over this runner's own `TRAINER_THREADS`).
    pub tuning: Tuning,
    /// What `kfaws-trainer check-data` found in `data_dir` (its summary line),
    /// when the trainer build can check data; recorded for a resume
    /// ([`JobRecord::data`]).
    pub dataset: Option<String>,
}

/// How a local run ended.
#[derive(Debug, Clone)]
pub struct LocalOutcome {
    /// How each rank exited (its code, or the signal that killed it), by rank
    /// ([`describe_exit`] says which).
    pub exits: Vec<ExitStatus>,
    /// Where rank 0 wrote the model.
    pub model_dir: PathBuf,
    /// The metrics of rank 0's last metric line (`epoch=… test_acc=…;`), if any.
    pub last_metrics: Option<super::FinalMetrics>,
    /// Whether the run was interrupted (SIGTERM sent to every rank).
    pub interrupted: bool,
    /// The newest checkpoint in the job's `checkpoints/` once every rank exited, if any.
    pub checkpoint: Option<PathBuf>,
}

impl LocalOutcome {
    /// Whether every rank exited 0 (an interrupt that came after the last
    /// step, while the ranks evaluated or wrote the model, did not stop them).
    pub fn succeeded(&self) -> bool {
        self.exits.iter().all(ExitStatus::success)
    }
}

/// How a rank exited, as `kfaws train` reports it: its exit code (`3`), or
/// the signal that killed it (`killed by SIGKILL`; `killed by signal N` for
/// one without a name on this platform).
pub fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => code.to_string(),
        (None, Some(sig)) => match nix::sys::signal::Signal::try_from(sig) {
            Ok(name) => format!("killed by {}", name.as_str()),
            Err(_) => format!("killed by signal {sig}"),
        },
        (None, None) => "stopped".to_string(),
    }
}

/// A local run that could not start.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// No free loopback port for rank 0.
    #[error("cannot find a free loopback port for rank 0: {0}")]
    Port(std::io::Error),
    /// The job directory cannot be made.
    #[error("cannot create {path}: {source}")]
    JobDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Another kfaws runs this job: its directory's lock is held.
    #[error(
        "local job {job} is running in another kfaws process (it holds {lock}); wait for it, or \
         stop it first"
    )]
    Busy {
        /// The job name.
        job: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// The job directory's record cannot be written or read.
    #[error("{path}: {detail}")]
    Record {
        /// The record file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// `--resume` with settings that move the checkpoint's position in the data.
    #[error(
        "--resume: the job ran with {}; a checkpoint's position (epoch, step) names the same \
         examples only with the same --workers, batch size, seed, max-train-samples and data. \
         Resume with {}, or start another --job-name",
        .mismatches.iter().map(|(s, was, now)| format!("{s} {was} (this run asks for {now})"))
            .collect::<Vec<_>>().join(", "),
        .mismatches.iter().map(|(s, was, _)| format!("{s} {was}")).collect::<Vec<_>>().join(", ")
    )]
    ResumeMismatch {
        /// Every setting that differs, as `(setting, recorded, requested)`: the flag or
        /// hyperparameter name, its value in the job's record, its value now
        /// ([`JobRecord::resume_mismatches`]).
        mismatches: Vec<(String, String, String)>,
    },
    /// `--resume` of a job whose newest checkpoint is past the epochs asked for: the
    /// trainer would train nothing (as a SageMaker `--resume-from`,
    /// [`crate::sagemaker::resume::checkpoint_problem`]).
    #[error(
        "--resume: the newest checkpoint ({name}) starts epoch {epoch} at step {step}, past \
         --epochs {epochs}: the job would train nothing; pass --epochs {epoch} or more"
    )]
    NothingToTrain {
        /// The checkpoint's file name.
        name: String,
        /// The epoch it starts (1-based).
        epoch: u64,
        /// The step of that epoch it starts at.
        step: u64,
        /// The epochs this run asks for.
        epochs: u64,
    },
    /// A trainer process cannot be started.
    #[error("cannot start {trainer} (rank {rank}): {source}")]
    Spawn {
        /// The binary.
        trainer: PathBuf,
        /// The rank.
        rank: u32,
        /// The cause.
        source: std::io::Error,
    },
}

/// A free TCP port on 127.0.0.1 (bound, read, released; the trainer binds
/// it again a moment later).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn command(job: &LocalJob, rank: u32, port: u16) -> Command {
    let mut cmd = Command::new(&job.trainer);
    cmd.arg("train");
    for (k, v) in &job.hyperparameters {
        cmd.arg("--hp").arg(format!("{k}={v}"));
    }
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if CONTRACT_PREFIXES.iter().any(|p| k.starts_with(p)) || CONTRACT_VARS.contains(&&*k) {
            cmd.env_remove(&*k);
        }
    }
    cmd.env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("WORLD_SIZE", job.workers.to_string())
        .env("RANK", rank.to_string())
        // Rank 0 listens on loopback only: nothing outside this machine joins.
        .env("TRAINER_BIND_ADDR", "127.0.0.1")
        .env("TRAINER_DATA_DIR", &job.data_dir)
        .env("TRAINER_MODEL_DIR", job.job_dir.join("model"))
        .env("TRAINER_CHECKPOINT_DIR", job.job_dir.join("checkpoints"))
        // A SageMaker layout left at /opt/ml on this machine would take
        // precedence over the PyTorchJob contract; point the trainer away.
        .env("TRAINER_SAGEMAKER_ROOT", job.job_dir.join("no-sagemaker"))
        // A rank whose kfaws is killed (SIGKILL: nothing can stop the ranks then)
        // checkpoints and exits instead of training on beside the next run of the job.
        .env("TRAINER_PARENT_PID", std::process::id().to_string())
        // The processes share this machine's cores: without this each would start a thread
        // per core (torchrun likewise sets OMP_NUM_THREADS=1 for several processes per node).
        .env(
            "TRAINER_THREADS",
            threads_per_worker(job.workers).to_string(),
        )
        .envs(&job.tuning.passed)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Each local process's share of this machine's CPUs (at least 1): the trainer's
/// `TRAINER_THREADS`.
fn threads_per_worker(workers: u32) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (cores / workers.max(1) as usize).max(1)
}

/// Copies `from`'s lines to `print(rank, line)` until it ends or fails to
/// read; returns the last metric line seen. Bytes that are not UTF-8 are
/// shown as U+FFFD (a line of them does not end the copy, whose pipe would
/// then fill and block the rank).
async fn pump(from: impl AsyncRead + Unpin, rank: u32, print: LineSink) -> Option<String> {
    let mut from = BufReader::new(from);
    let mut buf = Vec::new();
    let mut last = None;
    loop {
        buf.clear();
        match from.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let bytes = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let line = String::from_utf8_lossy(bytes);
        if super::is_metrics_line(&line) {
            last = Some(line.to_string());
        }
        print(rank, &line);
    }
    last
}

/// SIGTERM: the trainer checkpoints and exits non-zero, as under SageMaker's
/// StopTrainingJob or a Pod deletion.
fn terminate(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// Runs the job to the end: every rank exits, or `cancel` fires and every
/// rank is sent SIGTERM and waited for. A rank that fails makes its peers
/// fail within the trainer's collective timeout (the trainer's own rule),
/// so this never waits forever on a dead peer.
///
/// # Errors
/// [`LocalError`] when the run cannot start; a failed run is an `Ok` outcome
/// with its exit codes.
pub async fn run(
    job: &LocalJob,
    cancel: &CancellationToken,
    print: LineSink,
) -> Result<LocalOutcome, LocalError> {
    for dir in [job.job_dir.join("model"), job.job_dir.join("checkpoints")] {
        std::fs::create_dir_all(&dir).map_err(|source| LocalError::JobDir {
            path: dir.clone(),
            source,
        })?;
    }
    let port = free_port().map_err(LocalError::Port)?;
    let mut children = Vec::new();
    let mut pumps = Vec::new();
    for rank in 0..job.workers.max(1) {
        let mut child = command(job, rank, port)
            .spawn()
            .map_err(|source| LocalError::Spawn {
                trainer: job.trainer.clone(),
                rank,
                source,
            })?;
        let out = child.stdout.take().expect("stdout is piped");
        let err = child.stderr.take().expect("stderr is piped");
        pumps.push(tokio::spawn(pump(out, rank, print.clone())));
        pumps.push(tokio::spawn(pump(err, rank, print.clone())));
        children.push(child);
    }
    let (exits, interrupted) = wait_all(&mut children, cancel, job.tuning.stop_after()).await;
    let mut metrics = Vec::new();
    for p in pumps {
        metrics.push(p.await.ok().flatten());
    }
    Ok(LocalOutcome {
        exits,
        checkpoint: newest_checkpoint(&job.job_dir),
        model_dir: job.job_dir.join("model"),
        // Rank 0's stdout pump is the first.
        last_metrics: metrics
            .into_iter()
            .next()
            .flatten()
            .map(|l| super::FinalMetrics::from_line(&l)),
        interrupted,
    })
}

/// How long the other ranks have to exit once they were sent SIGTERM (one
/// rank failed, or kfaws was told to stop) before SIGKILL: the trainer's
/// stop grace (`TRAINER_STOP_GRACE`, [`kfaws_trainer_contract::STOP_GRACE_SECS`]) plus 5 s. A
/// rank stopped or stuck in uninterruptible I/O would otherwise hold the job forever, since
/// its collective timeout runs only while it runs.
pub const STOP_AFTER: Duration = Duration::from_secs(kfaws_trainer_contract::STOP_GRACE_SECS + 5);

/// Waits for every rank: how each one exited, and whether `cancel` fired. On `cancel` every rank is sent
/// SIGTERM (they checkpoint and exit). Once a rank has failed, the others are
/// sent SIGTERM at once, as torchrun's agent stops a failed group's workers
/// (a peer still waiting to rendezvous with the failed rank would otherwise
/// wait out its connect timeout, 5 minutes); either way those still running
/// `stop_after` ([`Tuning::stop_after`]) later get SIGKILL. So a hung rank
/// cannot hold the job.
async fn wait_all(
    children: &mut [Child],
    cancel: &CancellationToken,
    stop_after: Duration,
) -> (Vec<ExitStatus>, bool) {
    let pids: Vec<Option<u32>> = children.iter().map(Child::id).collect();
    let mut codes: Vec<Option<ExitStatus>> = vec![None; children.len()];
    let mut interrupted = false;
    // When the ranks still running are sent SIGTERM, then SIGKILL.
    let mut term_at: Option<tokio::time::Instant> = None;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let running = |codes: &[Option<ExitStatus>]| {
        pids.iter()
            .zip(codes)
            .filter(|(_, c)| c.is_none())
            .filter_map(|(p, _)| *p)
            .collect::<Vec<u32>>()
    };
    while codes.iter().any(Option::is_none) {
        for (i, child) in children.iter_mut().enumerate() {
            if codes[i].is_none() {
                if let Ok(Some(status)) = child.try_wait() {
                    codes[i] = Some(status);
                    let failed = !status.success();
                    if failed && kill_at.is_none() {
                        let now = tokio::time::Instant::now();
                        term_at = Some(now);
                        kill_at = Some(now + stop_after);
                    }
                }
            }
        }
        let now = tokio::time::Instant::now();
        if term_at.is_some_and(|t| now >= t) {
            term_at = None;
            running(&codes).into_iter().for_each(terminate);
        }
        if kill_at.is_some_and(|t| now >= t) {
            kill_at = None;
            for (i, child) in children.iter_mut().enumerate() {
                if codes[i].is_none() {
                    tracing::warn!(
                        "rank {i} was still running well after the job failed or was told to \
                         stop (hung?): killed"
                    );
                    let _ = child.start_kill();
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
            () = cancel.cancelled(), if !interrupted => {
                interrupted = true;
                // Every rank: all checkpoint and stop.
                running(&codes).into_iter().for_each(terminate);
                let now = tokio::time::Instant::now();
                term_at = None;
                kill_at = Some(now + stop_after);
            }
        }
    }
    (codes.into_iter().flatten().collect(), interrupted)
}

/// The model directory of a local job under `root` (`./kfaws-jobs/<job>`).
pub fn job_dir(root: &Path, job: &str) -> PathBuf {
    root.join(job)
}

/// The lock file in a job's directory, locked (an OS advisory lock, released
/// with the process however it ends: no stale lock) while a kfaws runs the job.
pub const LOCK_FILE: &str = "job.lock";
/// What the job was started with, in its directory: checked by `--resume`.
pub const RECORD_FILE: &str = "job.json";

/// The settings a resumed job must share with its first run: with another world
/// size, batch size, seed, sample count or data, the checkpoint's (epoch, step)
/// would name other examples, and the trainer can only tell when the step is past
/// the new epoch's end.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobRecord {
    /// `--workers`.
    pub workers: u32,
    /// The data directory.
    pub data_dir: PathBuf,
    /// The hyperparameters passed (canonical `-` keys as given).
    pub hyperparameters: BTreeMap<String, String>,
    /// What the trainer found in the data directory ([`super::data::LocalDataset`]'s
    /// line: dataset, example counts, shape), when it could say: a resume compares this,
    /// not the path, so moved data resumes and other data in the same place does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

impl JobRecord {
    /// The record of `job`.
    pub fn of(job: &LocalJob) -> Self {
        Self {
            workers: job.workers,
            data_dir: job.data_dir.clone(),
            hyperparameters: job.hyperparameters.clone(),
            data: job.dataset.clone(),
        }
    }

    /// The hyperparameters as the trainer reads them (defaults applied, `batch_size` =
    /// `batch-size`).
    pub fn parsed(&self) -> kfaws_trainer_contract::Hyperparameters {
        let mut p = kfaws_trainer_contract::Hyperparameters::default();
        for (k, v) in &self.hyperparameters {
            // Checked before the job started; a value the trainer refuses cannot be here.
            let _ = p.set(k, v, "job.json");
        }
        p
    }

    /// Every setting in which `requested` would resume at another position in the
    /// data than this record's run, as `(setting, recorded, requested)`: `--workers`,
    /// `--data` (what the trainer found there when both runs recorded it, else the
    /// path), then the hyperparameters `batch-size`, `seed`, `max-train-samples` and
    /// `dataset`, compared as the trainer reads them (defaults applied, `batch_size` =
    /// `batch-size`). A `dataset` set on one side only is no mismatch while the trainer
    /// finds that dataset in the files; one it reads the same files as another (`--hp
    /// dataset=mnist` on Fashion-MNIST) is named as `dataset`, not `--data`.
    pub fn resume_mismatches(&self, requested: &Self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        if self.workers != requested.workers {
            out.push((
                "--workers".into(),
                self.workers.to_string(),
                requested.workers.to_string(),
            ));
        }
        let (was, now) = (self.parsed(), requested.parsed());
        // `dataset (counts and shape)`, as the trainer's check of the data says it.
        let split = |found: &str| {
            let (name, rest) = found.split_once(' ').unwrap_or((found, ""));
            (name.to_string(), rest.to_string())
        };
        // The same files read as another dataset because `--hp dataset` says so now: the
        // dataset differs, not the data.
        let reread = |a: &str, b: &str| now.dataset.is_some() && split(a).1 == split(b).1;
        match (&self.data, &requested.data) {
            (Some(a), Some(b)) if a != b && reread(a, b) && was.dataset.is_none() => {
                out.push(("dataset".into(), split(a).0, split(b).0))
            }
            // Named below, with the dataset the job set.
            (Some(a), Some(b)) if a != b && reread(a, b) => {}
            // What the trainer reads decides, wherever it lies.
            (Some(a), Some(b)) if a != b => out.push((
                "--data".into(),
                format!("{} ({a})", self.data_dir.display()),
                format!("{} ({b})", requested.data_dir.display()),
            )),
            (Some(_), Some(_)) => {}
            _ if self.data_dir != requested.data_dir => out.push((
                "--data".into(),
                self.data_dir.display().to_string(),
                requested.data_dir.display().to_string(),
            )),
            _ => {}
        }
        let mut differs = |name: &str, a: String, b: String| {
            if a != b {
                out.push((name.to_string(), a, b));
            }
        };
        differs(
            "batch-size",
            was.batch_size.to_string(),
            now.batch_size.to_string(),
        );
        differs("seed", was.seed.to_string(), now.seed.to_string());
        let samples = |n: Option<usize>| n.map_or_else(|| "unset (all)".into(), |n| n.to_string());
        differs(
            "max-train-samples",
            samples(was.max_train_samples),
            samples(now.max_train_samples),
        );
        if let (Some(a), Some(b)) = (was.dataset, now.dataset) {
            differs("dataset", a.name().to_string(), b.name().to_string());
        }
        out
    }
}

impl JobRecord {
    /// The settings a resume runs with: this record's (the job's last
    /// run), except those `given` names, which `requested` sets: `workers`
    /// for `--workers`, a hyperparameter key (with `_` read as `-`) for its
    /// flag or `--hp`. So a resume with only `--resume` continues with the
    /// job's own settings, not the flags' defaults, as the hint after an
    /// interrupt ("the same command and --resume") implies. The data is
    /// always `requested`'s (`--data` is required). Pure.
    pub fn resumed_with(
        &self,
        requested: &Self,
        given: &std::collections::BTreeSet<String>,
    ) -> Self {
        let mut hyperparameters: BTreeMap<String, String> = self
            .hyperparameters
            .iter()
            .filter(|(k, _)| !given.contains(&k.replace('_', "-")))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        hyperparameters.extend(
            requested
                .hyperparameters
                .iter()
                .filter(|(k, _)| given.contains(&k.replace('_', "-")))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        Self {
            workers: match given.contains("workers") {
                true => requested.workers,
                false => self.workers,
            },
            data_dir: requested.data_dir.clone(),
            hyperparameters,
            data: requested.data.clone(),
        }
    }

    /// Reads the record of the job in `job_dir` ([`RECORD_FILE`]);
    /// `Ok(None)` when there is none (a job that never started).
    ///
    /// # Errors
    /// [`LocalError::Record`] for a record that cannot be read or parsed.
    pub fn read(job_dir: &Path) -> Result<Option<Self>, LocalError> {
        let path = job_dir.join(RECORD_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| LocalError::Record {
                    path,
                    detail: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(LocalError::Record {
                path,
                detail: e.to_string(),
            }),
        }
    }

    /// The hyperparameters `requested` sets to other values than this
    /// record's run, as `(name, recorded, requested)` sorted by name (keys
    /// compared with `_` read as `-`, as the trainer reads them; a key only
    /// one side sets shows `default` on the other). On a resume these are
    /// the settings that may differ ([`Self::resume_mismatches`] refuses the
    /// others), e.g. `epochs` or `lr`.
    pub fn changed(&self, requested: &Self) -> Vec<(String, String, String)> {
        let canonical = |h: &BTreeMap<String, String>| -> BTreeMap<String, String> {
            h.iter()
                .map(|(k, v)| (k.replace('_', "-"), v.clone()))
                .collect()
        };
        let (was, now) = (
            canonical(&self.hyperparameters),
            canonical(&requested.hyperparameters),
        );
        let keys: std::collections::BTreeSet<&String> = was.keys().chain(now.keys()).collect();
        let shown = |v: Option<&String>| v.map_or_else(|| "default".to_string(), Clone::clone);
        // The same data moved elsewhere ([`Self::resume_mismatches`] refuses other data).
        let moved = (self.data_dir != requested.data_dir).then(|| {
            (
                "data".to_string(),
                self.data_dir.display().to_string(),
                requested.data_dir.display().to_string(),
            )
        });
        // As the trainer reads them: `seed` unset and `seed=1` (its default) are the same.
        let effective = |r: &Self| serde_json::to_value(r.parsed()).unwrap_or_default();
        let (was_read, now_read) = (effective(self), effective(requested));
        let differs = |k: &String| {
            let field = k.replace('-', "_");
            match (was_read.get(&field), now_read.get(&field)) {
                (Some(a), Some(b)) => a != b,
                _ => was.get(k) != now.get(k),
            }
        };
        moved
            .into_iter()
            .chain(
                keys.into_iter()
                    .filter(|k| was.get(*k) != now.get(*k) && differs(k))
                    .map(|k| (k.clone(), shown(was.get(k)), shown(now.get(k)))),
            )
            .collect()
    }
}

/// A job directory held by this process ([`claim_job_dir`]).
#[derive(Debug)]
pub struct Claim {
    /// The locked [`LOCK_FILE`]; the claim ends when it is dropped.
    pub lock: std::fs::File,
    /// On a resume, the hyperparameters changed since the recorded run
    /// ([`JobRecord::changed`]); the record now holds the new values.
    pub changed: Vec<(String, String, String)>,
}

/// Whether a kfaws runs the job in `job_dir` now: it holds [`LOCK_FILE`]
/// (probed with a non-blocking lock, released at once).
pub fn is_running(job_dir: &Path) -> bool {
    std::fs::OpenOptions::new()
        .write(true)
        .open(job_dir.join(LOCK_FILE))
        .is_ok_and(|f| matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)))
}

/// Takes the job's directory for this process: creates it, locks
/// [`LOCK_FILE`], then writes the job's [`JobRecord`] (a new job) or checks
/// the recorded one against it (`resume`; a directory without a record, from
/// an older kfaws, is not checked) and records the settings of this run,
/// returning what changed. The lock is held until the returned claim is
/// dropped. The record is written whole to a temporary file, then renamed.
///
/// # Errors
/// [`LocalError::Busy`] when another process holds the lock,
/// [`LocalError::ResumeMismatch`] naming every setting that differs,
/// [`LocalError::NothingToTrain`] when the newest checkpoint is past the epochs asked for,
/// [`LocalError::JobDir`] / [`LocalError::Record`] for I/O.
pub fn claim_job_dir(name: &str, job: &LocalJob, resume: bool) -> Result<Claim, LocalError> {
    let dir_err = |source| LocalError::JobDir {
        path: job.job_dir.clone(),
        source,
    };
    std::fs::create_dir_all(&job.job_dir).map_err(dir_err)?;
    let lock_path = job.job_dir.join(LOCK_FILE);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(dir_err)?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(LocalError::Busy {
                job: name.to_string(),
                lock: lock_path,
            })
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(dir_err(e)),
    }
    let record_path = job.job_dir.join(RECORD_FILE);
    let record_err = |detail: String| LocalError::Record {
        path: record_path.clone(),
        detail,
    };
    let requested = JobRecord::of(job);
    let mut changed = Vec::new();
    if resume {
        let recorded = JobRecord::read(&job.job_dir)?;
        let mismatches = recorded
            .as_ref()
            .map(|r| r.resume_mismatches(&requested))
            .unwrap_or_default();
        if !mismatches.is_empty() {
            return Err(LocalError::ResumeMismatch { mismatches });
        }
        if let Some((name, (epoch, step))) = newest_checkpoint(&job.job_dir).and_then(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let position = kfaws_trainer_contract::checkpoint::parse_file_name(&name)?;
            Some((name, position))
        }) {
            let epochs = requested.parsed().epochs;
            if epoch > epochs {
                return Err(LocalError::NothingToTrain {
                    name,
                    epoch,
                    step,
                    epochs,
                });
            }
        }
        if let Some(recorded) = recorded {
            changed = recorded.changed(&requested);
        }
    }
    let json = serde_json::to_string_pretty(&requested).map_err(|e| record_err(e.to_string()))?;
    let partial = job.job_dir.join(format!("{RECORD_FILE}.partial"));
    std::fs::write(&partial, json)
        .and_then(|()| std::fs::rename(&partial, &record_path))
        .map_err(|e| record_err(e.to_string()))?;
    Ok(Claim { lock, changed })
}

/// The newest checkpoint of the job in `job_dir`: the last by name of
/// `checkpoints/checkpoint-EEEEEE-SSSSSSSS.bin` (epoch and step zero-padded by
/// the trainer, so name order is training order), if any.
pub fn newest_checkpoint(job_dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(job_dir.join("checkpoints"))
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("checkpoint-") && n.ends_with(".bin"))
        })
        .max()
}

/// Removes the job's directory if the job wrote nothing in it (no model, no
/// checkpoint: it failed before writing any; only kfaws's own [`LOCK_FILE`]
/// and [`RECORD_FILE`] and the empty `model/` and `checkpoints/`), so its name
/// can be used again; anything written is kept. Returns whether it was removed.
pub fn remove_if_empty(job_dir: &Path) -> bool {
    let is_empty = |dir: &Path| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
    let subs = [job_dir.join("model"), job_dir.join("checkpoints")];
    let files = [job_dir.join(LOCK_FILE), job_dir.join(RECORD_FILE)];
    let nothing_written = std::fs::read_dir(job_dir).is_ok_and(|entries| {
        entries.filter_map(Result::ok).all(|e| {
            let path = e.path();
            files.contains(&path) || (subs.contains(&path) && is_empty(&path))
        })
    });
    // remove_dir refuses a directory that is not empty: nothing written is lost in a race.
    nothing_written
        && files
            .iter()
            .all(|f| !f.exists() || std::fs::remove_file(f).is_ok())
        && subs
            .iter()
            .all(|d| !d.exists() || std::fs::remove_dir(d).is_ok())
        && std::fs::remove_dir(job_dir).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held by the tests that take job locks and by those that start
    /// processes: a process forked while a lock file is open holds its lock
    /// (flock(2) locks belong to the open file description) until it execs,
    /// so a claim in another test could find the lock busy.
    static FORKS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn forks() -> std::sync::MutexGuard<'static, ()> {
        FORKS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    #[test]
    fn a_job_is_running_while_its_lock_is_held() {
        let _forks = forks();
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_running(dir.path()), "no lock file");
        let lock = std::fs::File::create(dir.path().join(LOCK_FILE)).unwrap();
        assert!(!is_running(dir.path()), "a lock file nobody holds");
        lock.lock().unwrap();
        assert!(is_running(dir.path()));
        drop(lock);
        assert!(!is_running(dir.path()));
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The trainer's tuning variables reach the ranks; the launch contract's do not (this
    /// runner sets it) and are listed for the warning; the rest of the environment is not
    /// the runner's business.
    #[test]
    fn tuning_variables_are_passed_and_contract_variables_listed_as_dropped() {
        let t = Tuning::from_env(vars(&[
            ("TRAINER_COLLECTIVE_TIMEOUT", "600"),
            ("TRAINER_DATA_DIR", "/elsewhere"),
            ("MASTER_PORT", "1"),
            ("TRAINER_ALL_REDUCE", "ring"),
            ("TRAINER_THREAD", "1"),
            ("TRAINER_FOO", "1"),
            ("PET_NNODES", "4"),
            ("HOME", "/root"),
            ("RAYON_NUM_THREADS", "2"),
        ]))
        .unwrap();
        assert_eq!(
            t.passed,
            BTreeMap::from([
                ("TRAINER_ALL_REDUCE".to_string(), "ring".to_string()),
                ("TRAINER_COLLECTIVE_TIMEOUT".to_string(), "600".to_string()),
            ])
        );
        assert_eq!(t.dropped, ["MASTER_PORT", "PET_NNODES", "TRAINER_DATA_DIR"]);
        assert_eq!(
            t.unknown,
            [
                ("TRAINER_FOO".to_string(), None),
                ("TRAINER_THREAD".to_string(), Some("TRAINER_THREADS"))
            ]
        );
        assert_eq!(t.stop_after(), STOP_AFTER);
    }

    #[test]
    fn a_bad_tuning_value_is_refused_naming_the_variable_and_its_rule() {
        for (k, v, must) in [
            ("TRAINER_COLLECTIVE_TIMEOUT", "10m", "whole seconds"),
            ("TRAINER_STOP_GRACE", "-1", "whole seconds"),
            (
                "TRAINER_CONNECT_TIMEOUT",
                "18446744073709551615",
                "0 to 2419200 (28 days)",
            ),
            ("TRAINER_ALL_REDUCE", "tree", "star or ring"),
            ("TRAINER_THREADS", "0", "from 1 to 1024"),
            ("TRAINER_THREADS", "100000", "from 1 to 1024"),
            ("TRAINER_METRICS_PORT", "70000", "1 to 65535"),
        ] {
            let e = Tuning::from_env(vars(&[(k, v)])).unwrap_err();
            assert!(
                e.starts_with(&format!("{k}={v:?} in the environment: must be "))
                    && e.contains(must),
                "{e}"
            );
        }
    }

    /// A key set to the trainer's default on one side and unset on the other is no change.
    #[test]
    fn a_default_given_or_left_out_is_no_change() {
        let record = |hp: &[(&str, &str)]| JobRecord {
            workers: 2,
            data_dir: "/data".into(),
            hyperparameters: hp
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            data: None,
        };
        assert!(record(&[]).changed(&record(&[("seed", "1")])).is_empty());
        assert!(record(&[("lr", "0.020")])
            .changed(&record(&[("lr", "0.02")]))
            .is_empty());
        assert_eq!(
            record(&[]).changed(&record(&[("seed", "2")])),
            [("seed".to_string(), "default".to_string(), "2".to_string())]
        );
    }

    /// A resume keeps the recorded settings but those given now, whichever spelling of a key.
    #[test]
    fn a_resume_takes_what_was_not_given_from_the_record() {
        let record = |workers: u32, hp: &[(&str, &str)]| JobRecord {
            workers,
            data_dir: "/data".into(),
            hyperparameters: hp
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            data: None,
        };
        let recorded = record(
            4,
            &[("epochs", "10"), ("lr", "0.05"), ("test_batch_size", "500")],
        );
        // The flags' defaults, with --epochs 12 and --hp test-batch-size=100 given.
        let requested = record(
            2,
            &[("epochs", "12"), ("lr", "0.02"), ("test-batch-size", "100")],
        );
        let given = ["epochs", "test-batch-size"].map(String::from).into();
        let resumed = recorded.resumed_with(&requested, &given);
        assert_eq!(resumed.workers, 4);
        assert_eq!(
            resumed.hyperparameters,
            record(
                0,
                &[("epochs", "12"), ("lr", "0.05"), ("test-batch-size", "100")]
            )
            .hyperparameters
        );
        // --workers given: the new world size (refused later as a mismatch, by name).
        let given = ["workers".to_string()].into();
        assert_eq!(recorded.resumed_with(&requested, &given).workers, 2);
    }

    /// With what the trainer found recorded on both sides, the data is compared by that, not
    /// by its path: moved data resumes (and the move is said), other data in its place does not.
    #[test]
    fn a_resume_compares_the_data_the_trainer_found_not_its_path() {
        let record = |dir: &str, data: Option<&str>| JobRecord {
            workers: 2,
            data_dir: dir.into(),
            hyperparameters: BTreeMap::new(),
            data: data.map(str::to_string),
        };
        let fashion = "fashion-mnist (60000 training and 10000 test images of 1x28x28)";
        let mnist = "mnist (60000 training and 10000 test images of 1x28x28)";
        let was = record("/data/a", Some(fashion));
        let moved = record("/data/b", Some(fashion));
        assert!(was.resume_mismatches(&moved).is_empty());
        assert_eq!(
            was.changed(&moved),
            [(
                "data".to_string(),
                "/data/a".to_string(),
                "/data/b".to_string()
            )]
        );
        let replaced = record("/data/a", Some(mnist));
        assert_eq!(
            was.resume_mismatches(&replaced),
            [(
                "--data".to_string(),
                format!("/data/a ({fashion})"),
                format!("/data/a ({mnist})")
            )]
        );
        // The same files read as another dataset by `--hp dataset`: the dataset is named.
        let mut as_mnist = record("/data/a", Some(mnist));
        as_mnist
            .hyperparameters
            .insert("dataset".into(), "mnist".into());
        assert_eq!(
            was.resume_mismatches(&as_mnist),
            [(
                "dataset".to_string(),
                "fashion-mnist".to_string(),
                "mnist".to_string()
            )]
        );
        let mut was_fashion = was.clone();
        was_fashion
            .hyperparameters
            .insert("dataset".into(), "fashion-mnist".into());
        assert_eq!(was_fashion.resume_mismatches(&as_mnist).len(), 1);
        // A record without it (an older kfaws, a trainer without check-data): the path.
        let old = record("/data/a", None);
        assert_eq!(old.resume_mismatches(&moved).len(), 1);
        assert!(old
            .resume_mismatches(&record("/data/a", Some(mnist)))
            .is_empty());
    }

    /// A longer stop grace gives the ranks longer before SIGTERM and SIGKILL: the
    /// runner must not kill a rank still inside the grace it was given.
    #[test]
    fn the_ranks_stop_grace_sets_how_long_they_have_to_exit() {
        let t = Tuning::from_env(vars(&[("TRAINER_STOP_GRACE", "100")])).unwrap();
        assert_eq!(t.stop_after(), Duration::from_secs(105));
    }

    /// A tuning variable set for kfaws wins over the runner's own default for it.
    #[test]
    fn a_passed_tuning_variable_overrides_the_runners_default() {
        let mut j = job(Path::new("/jobs"), 2, &[]);
        j.tuning = Tuning::from_env(vars(&[("TRAINER_THREADS", "7")])).unwrap();
        let cmd = command(&j, 0, 29500);
        let threads = cmd
            .as_std()
            .get_envs()
            .find(|(k, _)| *k == "TRAINER_THREADS")
            .and_then(|(_, v)| v);
        assert_eq!(threads.and_then(|v| v.to_str()), Some("7"));
    }

    /// Each rank is told this process's pid: a rank whose parent is no longer it (kfaws was
    /// killed) checkpoints and exits (the trainer's `--parent-pid`, tested with the trainer).
    #[test]
    fn each_rank_watches_this_process() {
        let job = LocalJob {
            trainer: PathBuf::from("kfaws-trainer"),
            workers: 2,
            data_dir: PathBuf::from("/data"),
            job_dir: PathBuf::from("/jobs/j"),
            hyperparameters: BTreeMap::new(),
            tuning: Tuning::default(),
            dataset: None,
        };
        let cmd = command(&job, 1, 29500);
        let parent = cmd
            .as_std()
            .get_envs()
            .find(|(k, _)| *k == "TRAINER_PARENT_PID")
            .and_then(|(_, v)| v);
        assert_eq!(
            parent.and_then(|v| v.to_str()),
            Some(std::process::id().to_string().as_str())
        );
    }

    /// `sh -c script`, killed when dropped.
    fn spawn(script: &str) -> Child {
        Command::new("sh")
            .args(["-c", script])
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    }

    /// A rank that neither exits after a peer failed nor heeds SIGTERM (stopped,
    /// hung) is killed; the job's wait ends.
    #[tokio::test]
    async fn a_hung_rank_is_killed_once_a_peer_failed() {
        let forks = forks();
        let mut children = vec![
            // It fails once the hung rank's shell has had time to ignore SIGTERM (a
            // SIGTERM before its `trap` would kill it as SIGTERM, not SIGKILL).
            spawn("sleep 1; exit 3"),
            spawn("trap '' TERM; sleep 30 & wait; sleep 30"),
            spawn("sleep 30"),
        ];
        drop(forks);
        let t0 = std::time::Instant::now();
        let (codes, interrupted) = wait_all(
            &mut children,
            &CancellationToken::new(),
            Duration::from_millis(300),
        )
        .await;
        let told: Vec<String> = codes.into_iter().map(describe_exit).collect();
        assert_eq!(
            told,
            ["3", "killed by SIGKILL", "killed by SIGTERM"],
            "the hung rank by SIGKILL, its peer by SIGTERM"
        );
        assert!(!interrupted);
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }

    /// A peer of a failed rank is sent SIGTERM at once, not after the grace (a rank waiting
    /// to rendezvous with the failed one would otherwise wait out its connect timeout).
    #[tokio::test]
    async fn the_peers_of_a_failed_rank_are_told_to_stop_at_once() {
        let forks = forks();
        let mut children = vec![spawn("exit 3"), spawn("exec sleep 30")];
        drop(forks);
        let t0 = std::time::Instant::now();
        let (codes, _) = wait_all(
            &mut children,
            &CancellationToken::new(),
            Duration::from_secs(60),
        )
        .await;
        let told: Vec<String> = codes.into_iter().map(describe_exit).collect();
        assert_eq!(
            told,
            ["3", "killed by SIGTERM"],
            "the sleeper ended by SIGTERM"
        );
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }

    /// A rank killed by a signal is told with the signal's name, not only "killed".
    #[test]
    fn an_exit_is_told_by_code_or_by_signal_name() {
        use std::os::unix::process::ExitStatusExt as _;
        // Wait statuses: the code in the second byte, a signal in the low 7 bits.
        assert_eq!(describe_exit(ExitStatus::from_raw(0)), "0");
        assert_eq!(describe_exit(ExitStatus::from_raw(143 << 8)), "143");
        assert_eq!(describe_exit(ExitStatus::from_raw(9)), "killed by SIGKILL");
        assert_eq!(describe_exit(ExitStatus::from_raw(15)), "killed by SIGTERM");
        assert_eq!(describe_exit(ExitStatus::from_raw(11)), "killed by SIGSEGV");
    }

    /// A line that is not UTF-8 is shown (lossily) and the copy goes on to the lines after
    /// it, the metric line among them.
    #[tokio::test]
    async fn the_output_pump_survives_bytes_that_are_not_utf8() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink: LineSink = {
            let seen = Arc::clone(&seen);
            Arc::new(move |rank, line| seen.lock().unwrap().push(format!("{rank}:{line}")))
        };
        let input: &[u8] =
            b"start\n\xff\xfe bad bytes\r\nepoch=1 train_loss=0.5; test_acc=0.9;\nlast";
        let last = pump(input, 2, sink).await;
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "2:start",
                "2:\u{fffd}\u{fffd} bad bytes",
                "2:epoch=1 train_loss=0.5; test_acc=0.9;",
                "2:last"
            ]
        );
        assert_eq!(
            last.as_deref(),
            Some("epoch=1 train_loss=0.5; test_acc=0.9;")
        );
    }

    #[test]
    fn local_processes_split_the_cores_between_them() {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        assert_eq!(threads_per_worker(1), cores);
        assert_eq!(threads_per_worker(2), (cores / 2).max(1));
        assert_eq!(threads_per_worker(cores as u32 * 2), 1);
    }

    #[test]
    fn the_newest_checkpoint_is_the_last_by_name_and_only_empty_job_dirs_go() {
        let root = tempfile::tempdir().unwrap();
        let job = root.path().join("j");
        std::fs::create_dir_all(job.join("model")).unwrap();
        std::fs::create_dir_all(job.join("checkpoints")).unwrap();
        assert_eq!(newest_checkpoint(&job), None);
        for name in [
            "checkpoint-000001-00000040.bin",
            "checkpoint-000002-00000000.bin",
            "checkpoint-000001-00000000.bin",
            "notes.txt",
        ] {
            std::fs::write(job.join("checkpoints").join(name), b"x").unwrap();
        }
        assert_eq!(
            newest_checkpoint(&job),
            Some(job.join("checkpoints/checkpoint-000002-00000000.bin"))
        );
        assert!(!remove_if_empty(&job), "checkpoints are kept");
        assert!(job.join("checkpoints").is_dir() && job.join("model").is_dir());
        let empty = root.path().join("e");
        std::fs::create_dir_all(empty.join("model")).unwrap();
        std::fs::create_dir_all(empty.join("checkpoints")).unwrap();
        std::fs::write(empty.join(LOCK_FILE), b"").unwrap();
        std::fs::write(empty.join(RECORD_FILE), b"{}").unwrap();
        assert!(remove_if_empty(&empty));
        assert!(!empty.exists());
    }

    fn job(root: &Path, workers: u32, hp: &[(&str, &str)]) -> LocalJob {
        LocalJob {
            trainer: "kfaws-trainer".into(),
            workers,
            data_dir: "/data".into(),
            job_dir: root.join("j"),
            hyperparameters: hp
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            tuning: Tuning::default(),
            dataset: None,
        }
    }

    /// A finished job's newest checkpoint starts the epoch after its last: resumed with no
    /// more epochs it would train nothing, and is refused as a SageMaker `--resume-from` is.
    #[test]
    fn a_resume_past_the_last_epoch_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let ran = job(root.path(), 1, &[("epochs", "2")]);
        drop(claim_job_dir("j", &ran, false).unwrap());
        let checkpoints = ran.job_dir.join("checkpoints");
        std::fs::create_dir_all(&checkpoints).unwrap();
        for (epoch, step) in [(2, 0), (3, 0)] {
            let name = kfaws_trainer_contract::checkpoint::file_name(epoch, step);
            std::fs::write(checkpoints.join(name), "").unwrap();
        }
        let err = claim_job_dir("j", &ran, true).unwrap_err().to_string();
        assert_eq!(
            err,
            "--resume: the newest checkpoint (checkpoint-000003-00000000.bin) starts epoch 3 at \
             step 0, past --epochs 2: the job would train nothing; pass --epochs 3 or more"
        );
        drop(claim_job_dir("j", &job(root.path(), 1, &[("epochs", "3")]), true).unwrap());
    }

    #[test]
    fn a_job_dir_is_held_by_one_process_and_resumed_only_with_the_same_data_position() {
        let _forks = forks();
        let root = tempfile::tempdir().unwrap();
        let first = job(root.path(), 2, &[("batch-size", "32"), ("lr", "0.02")]);
        let held = claim_job_dir("j", &first, false).unwrap();
        let busy = claim_job_dir("j", &first, true).unwrap_err();
        assert!(matches!(busy, LocalError::Busy { .. }), "{busy}");
        drop(held);
        // Another learning rate is fine, and said; the same batch size spelt differently too.
        let lr = job(root.path(), 2, &[("batch_size", "32"), ("lr", "0.5")]);
        let claim = claim_job_dir("j", &lr, true).unwrap();
        assert_eq!(
            claim.changed,
            [("lr".to_string(), "0.02".to_string(), "0.5".to_string())]
        );
        drop(claim);
        // The record now holds the resumed run's settings.
        let again = job(
            root.path(),
            2,
            &[("batch-size", "32"), ("lr", "0.5"), ("momentum", "0.8")],
        );
        let claim = claim_job_dir("j", &again, true).unwrap();
        assert_eq!(
            claim.changed,
            [(
                "momentum".to_string(),
                "default".to_string(),
                "0.8".to_string()
            )]
        );
        drop(claim);
        for (other, setting) in [
            (job(root.path(), 1, &[("batch-size", "32")]), "--workers"),
            (job(root.path(), 2, &[("batch-size", "64")]), "batch-size"),
            (
                job(root.path(), 2, &[("batch-size", "32"), ("seed", "9")]),
                "seed",
            ),
        ] {
            let err = claim_job_dir("j", &other, true).unwrap_err();
            assert!(
                matches!(&err, LocalError::ResumeMismatch { mismatches: m } if m.len() == 1 && m[0].0 == setting),
                "{err}"
            );
        }
        // Every setting that differs is named, in one error.
        let other = job(root.path(), 1, &[("batch-size", "64"), ("seed", "9")]);
        let err = claim_job_dir("j", &other, true).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "--resume: the job ran with --workers 2 (this run asks for 1), batch-size 32 \
                 (this run asks for 64), seed 1 (this run asks for 9);"
            ) && err.contains("Resume with --workers 2, batch-size 32, seed 1, or"),
            "{err}"
        );
    }
}
