//! `kfaws train`: the bundled trainer, run at the user's choice locally, as
//! a Kubeflow PyTorchJob on the deployment's cluster, or as a SageMaker
//! training job. Everything is checked before the first job is created.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use kfaws::k8s::auth::EksTokens;
use kfaws::k8s::resource::ClusterConnector;
use kfaws::state::store::StateStore;
use kfaws::state::State;
use kfaws::train::capacity::{NodeGroupSize, ReplicaRequest};
use kfaws::train::data::DataSource;
use kfaws::train::name::{JobName, MAX_REPLICAS};
use kfaws::train::pytorchjob::resume::PreviousPyTorchJob;
use kfaws::train::pytorchjob::{self, PyTorchJobSpec};
use kfaws::train::{hyperparameters, local, parse_hyperparameter, Runtime};
use tokio_util::sync::CancellationToken;

use super::context::{self, Loaded};
use super::progress::Progress;
use super::Global;

/// `kfaws train` flags.
#[derive(Debug, Args, Clone)]
pub struct TrainArgs {
    /// Where the job runs [default: `training_runtime` in kfaws.toml].
    #[arg(long, value_enum, env = "KFAWS_TRAINING_RUNTIME")]
    pub runtime: Option<Runtime>,
    /// Total replicas (processes, pods or instances), each one rank: 1 to 999.
    // The ranges of --workers, --epochs and --batch-size are checked with the
    // other arguments (`request`), so that every problem is told in one run;
    // allow_negative_numbers: `--workers -1` is a value out of range, not an
    // unknown flag `-1`; i128, so that a value past u64 (`--epochs
    // 18446744073709551616`) gets the same range message, not clap's "too large".
    #[arg(long, default_value_t = 2, allow_negative_numbers = true)]
    pub workers: i128,
    /// Epochs (at least 1).
    #[arg(long, default_value_t = 2, allow_negative_numbers = true)]
    pub epochs: i128,
    /// Batch size per rank, at least 1 (the trainer's default for Fashion-MNIST).
    #[arg(long, default_value_t = 32, allow_negative_numbers = true)]
    pub batch_size: i128,
    /// Learning rate (SGD with momentum 0.9 unless --hp momentum=…).
    #[arg(long, default_value_t = 0.02, allow_negative_numbers = true)]
    pub lr: f64,
    /// Collective backend: gloo (CPU) or nccl (CUDA: a trainer image built with --features
    /// cuda; one nvidia.com/gpu per PyTorchJob replica, a P or G SageMaker instance type).
    #[arg(long, default_value = "gloo", value_parser = ["gloo", "nccl"])]
    pub backend: String,
    /// Any other hyperparameter as KEY=VALUE (momentum, seed, max-train-samples, …); repeatable.
    /// Names and values are checked with the bundled trainer's rules before a job is created.
    #[arg(long = "hp", value_name = "KEY=VALUE", value_parser = parse_hyperparameter)]
    pub hp: Vec<(String, String)>,
    /// The dataset: s3://bucket/prefix, efs:/path (in the deployment's file system) or a local
    /// directory. A local --resume without it uses the job's recorded data, a --resume-from
    /// the data the job resumed read (a SageMaker job's channel, a PyTorchJob's EFS directory).
    #[arg(long, value_name = "SOURCE", required_unless_present_any = ["resume", "resume_from"])]
    pub data: Option<String>,
    /// The job name [default: kfaws-train-<UTC time>-<random>].
    #[arg(long, value_name = "NAME")]
    pub job_name: Option<String>,
    /// The trainer image (kubernetes, sagemaker) [default: kfaws-trainer:<this version> in ECR, as `kfaws image push` pushes it].
    #[arg(long, value_name = "URI")]
    pub image: Option<String>,
    /// SageMaker instance type (sagemaker) [default: ml.m5.xlarge; with --resume-from, the
    /// resumed job's].
    #[arg(long)]
    pub instance_type: Option<String>,
    /// CPU request and limit of each replica, a Kubernetes quantity (kubernetes) [default: 1].
    #[arg(long, allow_hyphen_values = true)]
    pub cpu: Option<String>,
    /// Memory request and limit of each replica, a Kubernetes quantity of at least 128Mi (kubernetes) [default: 2Gi].
    // allow_hyphen_values: `-1Gi` is a negative quantity to refuse, not an unknown flag.
    #[arg(long, allow_hyphen_values = true)]
    pub memory: Option<String>,
    /// Longest run in seconds, at most 2419200 (28 days, SageMaker's limit for
    /// StoppingCondition.MaxRuntimeInSeconds) (sagemaker: its MaxRuntimeInSeconds; kubernetes:
    /// how long kfaws waits) [default: 86400].
    #[arg(long, allow_negative_numbers = true)]
    pub max_runtime: Option<i128>,
    /// SageMaker: run the containers without network access (VpcConfig still applies).
    #[arg(long)]
    pub network_isolation: bool,
    /// SageMaker: do not encrypt traffic between the instances (on by default).
    #[arg(long)]
    pub no_inter_container_encryption: bool,
    /// Wait for the job to finish (the default).
    #[arg(long, overrides_with = "no_wait")]
    pub wait: bool,
    /// Return once the job is created.
    #[arg(long, overrides_with = "wait")]
    pub no_wait: bool,
    /// Print the job's log while waiting.
    #[arg(long, conflicts_with = "no_wait")]
    pub follow: bool,
    /// The kfaws-trainer binary (local) [default: beside this kfaws].
    #[arg(long, value_name = "PATH")]
    pub trainer: Option<PathBuf>,
    /// Where local jobs write their model and checkpoints (local) [default: kfaws-jobs].
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Run a local job that ran before again, in its directory: the trainer resumes from its
    /// newest checkpoint (same --workers, --batch-size, data, seed and max-train-samples: they
    /// fix each epoch's shards; epochs, lr and momentum may change) and overwrites its model;
    /// flags and --hp keys left out keep the job's recorded values, not their defaults (local).
    #[arg(long, requires = "job_name")]
    pub resume: bool,
    /// Start the new job from the checkpoints of job JOB, so the trainer resumes from the
    /// newest one: a SageMaker training job (Stopped, Failed or Completed, started by this
    /// deployment) gives its CheckpointConfig S3 URI (and its instance type, unless
    /// --instance-type is given); a PyTorchJob in the user namespace
    /// (Succeeded or Failed, created by kfaws) its checkpoint directory on EFS, which the new
    /// job must find a checkpoint in. Same --workers, --batch-size, --data, seed and
    /// max-train-samples (they fix each epoch's shards); epochs and lr may change; --data,
    /// --workers, hyperparameter flags and --hp keys (and a PyTorchJob's --cpu and --memory)
    /// left out keep JOB's values, not their defaults (kubernetes, sagemaker).
    #[arg(long, value_name = "JOB")]
    pub resume_from: Option<String>,
    /// The hyperparameter flags given on the command line or by their
    /// environment variable, not left to their defaults, as the keys they set
    /// (`workers`, `epochs`, `batch-size`, `lr`, `backend`): a local
    /// `--resume` takes the others from the job's record, a `--resume-from`
    /// from the job resumed ([`TrainArgs::note_given`]).
    #[arg(skip)]
    pub given: std::collections::BTreeSet<String>,
}

/// Where local jobs go without `--output-dir`, relative to the working directory.
const DEFAULT_OUTPUT_DIR: &str = "kfaws-jobs";

/// The largest `--max-runtime`: 28 days in seconds, the upper bound of
/// `StoppingCondition.MaxRuntimeInSeconds` (SageMaker API Reference, `StoppingCondition`).
const MAX_RUNTIME_LIMIT: u64 = 28 * 24 * 3600;

/// `--max-runtime` without the flag: one day, in seconds.
const DEFAULT_MAX_RUNTIME: u64 = 86_400;

impl TrainArgs {
    /// Fills [`TrainArgs::given`] from the parsed `train` subcommand's
    /// matches (clap's `ValueSource`: a default is not "given").
    pub fn note_given(&mut self, matches: &clap::ArgMatches) {
        use clap::parser::ValueSource;
        for (id, key) in [
            ("workers", "workers"),
            ("epochs", "epochs"),
            ("batch_size", "batch-size"),
            ("lr", "lr"),
            ("backend", "backend"),
        ] {
            if matches!(
                matches.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            ) {
                self.given.insert(key.to_string());
            }
        }
    }

    /// The settings this command sets rather than leaves to their defaults: [`TrainArgs::given`]
    /// and the `--hp` keys (in their `-` spelling), as [`local::JobRecord::resumed_with`] takes
    /// them.
    pub fn given_keys(&self) -> std::collections::BTreeSet<String> {
        self.given
            .iter()
            .cloned()
            .chain(self.hp.iter().map(|(k, _)| k.replace('_', "-")))
            .collect()
    }

    /// `--instance-type`, or its default.
    pub fn instance_type(&self) -> &str {
        self.instance_type.as_deref().unwrap_or("ml.m5.xlarge")
    }

    /// The flags given that `runtime` does not use, each with the runtimes
    /// that do: refused rather than silently ignored.
    /// `--output-dir`, or its default.
    fn output_dir(&self) -> &Path {
        self.output_dir
            .as_deref()
            .unwrap_or(Path::new(DEFAULT_OUTPUT_DIR))
    }

    fn foreign_flags(&self, runtime: Runtime) -> Vec<(&'static str, &'static str)> {
        use Runtime::{Kubernetes, Local, Sagemaker};
        let given: [(&str, bool, &[Runtime]); 12] = [
            ("--image", self.image.is_some(), &[Kubernetes, Sagemaker]),
            (
                "--instance-type",
                self.instance_type.is_some(),
                &[Sagemaker],
            ),
            ("--network-isolation", self.network_isolation, &[Sagemaker]),
            (
                "--no-inter-container-encryption",
                self.no_inter_container_encryption,
                &[Sagemaker],
            ),
            ("--cpu", self.cpu.is_some(), &[Kubernetes]),
            ("--memory", self.memory.is_some(), &[Kubernetes]),
            ("--no-wait", self.no_wait, &[Kubernetes, Sagemaker]),
            ("--trainer", self.trainer.is_some(), &[Local]),
            ("--output-dir", self.output_dir.is_some(), &[Local]),
            (
                "--max-runtime",
                self.max_runtime.is_some(),
                &[Kubernetes, Sagemaker],
            ),
            ("--resume", self.resume, &[Local]),
            (
                "--resume-from",
                self.resume_from.is_some(),
                &[Kubernetes, Sagemaker],
            ),
        ];
        given
            .into_iter()
            .filter(|(_, set, runtimes)| *set && !runtimes.contains(&runtime))
            .map(|(flag, _, runtimes)| {
                let names = match runtimes {
                    [Kubernetes, Sagemaker] => "the kubernetes and sagemaker runtimes",
                    [Sagemaker] => "the sagemaker runtime",
                    [Kubernetes] => "the kubernetes runtime",
                    _ => "the local runtime",
                };
                (flag, names)
            })
            .collect()
    }
}

/// A validated request: what every runtime needs.
#[derive(Debug)]
pub struct Request {
    /// `--job-name`, or a generated name.
    pub job: JobName,
    /// `--data`.
    pub data: DataSource,
    /// `--workers`: 1 to [`MAX_REPLICAS`] − 1.
    pub workers: u32,
    /// `--max-runtime` in seconds (1 to [`MAX_RUNTIME_LIMIT`]), or its
    /// default, one day.
    pub max_runtime: u64,
    /// Every hyperparameter the job passes to the trainer.
    pub hyperparameters: BTreeMap<String, String>,
}

/// `value` of `flag` when it lies in `range` (ends included), else the
/// problem, naming the flag and the range.
fn in_range(
    flag: &str,
    value: i128,
    range: std::ops::RangeInclusive<i128>,
    why: &str,
) -> Result<u32, String> {
    match range.contains(&value) {
        true => Ok(u32::try_from(value).expect("the ranges lie in u32")),
        false if *range.end() == i128::from(u32::MAX) && value < *range.start() => Err(format!(
            "{flag} {value}: must be at least {}{why}",
            range.start()
        )),
        false => Err(format!(
            "{flag} {value}: must be from {} to {}{why}",
            range.start(),
            range.end()
        )),
    }
}

/// Checks every argument before anything is created, and reports every
/// problem found at once (one per line), as the config's validation does.
fn request(args: &TrainArgs, runtime: Runtime) -> anyhow::Result<Request> {
    let mut problems: Vec<String> = Vec::new();
    let job = match &args.job_name {
        Some(j) => JobName::parse(j)
            .map_err(|e| problems.push(format!("--job-name: {e}")))
            .ok(),
        None => Some(JobName::generate("kfaws-train", chrono::Utc::now())?),
    };
    let mut count = |flag: &str, value: i128, max: i128, why: &str| {
        in_range(flag, value, 1..=max, why)
            .map_err(|e| problems.push(e))
            .ok()
    };
    let workers = count(
        "--workers",
        args.workers,
        i128::from(MAX_REPLICAS) - 1,
        " (one rank per replica)",
    );
    let epochs = count("--epochs", args.epochs, i128::from(u32::MAX), "");
    let batch_size = count("--batch-size", args.batch_size, i128::from(u32::MAX), "");
    let max_runtime = match args.max_runtime {
        None => DEFAULT_MAX_RUNTIME,
        Some(secs) => in_range(
            "--max-runtime",
            secs,
            1..=i128::from(MAX_RUNTIME_LIMIT),
            " seconds (28 days: SageMaker's limit for StoppingCondition.MaxRuntimeInSeconds)",
        )
        .map_or_else(
            |e| {
                problems.push(e);
                DEFAULT_MAX_RUNTIME
            },
            u64::from,
        ),
    };
    let data = match DataSource::parse(args.data.as_deref().unwrap_or_default()) {
        Ok(data) => {
            if let Err(e) = data.check_runtime(runtime) {
                problems.push(e.to_string());
            }
            Some(data)
        }
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    for (k, _) in args
        .hp
        .iter()
        .filter(|(k, _)| kfaws::train::FLAG_KEYS.contains(&k.replace('_', "-").as_str()))
    {
        let flag = k.replace('_', "-");
        problems.push(format!(
            "--hp {k}=… is not accepted: kfaws passes {flag} to the trainer from its --{flag} \
             flag (which has a default); use --{flag} instead"
        ));
    }
    if runtime == Runtime::Sagemaker {
        // An unknown type is named so, not described as one without a GPU.
        match kfaws::sagemaker::training::validate_instance_type(args.instance_type()) {
            Err(e) => problems.push(format!("--instance-type: {e}")),
            // Resumed without --instance-type, the type is the resumed job's: checked then.
            Ok(())
                if args.backend == "nccl"
                    && !kfaws::train::has_nvidia_gpu(args.instance_type())
                    && (args.resume_from.is_none() || args.instance_type.is_some()) =>
            {
                problems.push(format!(
                    "--backend nccl trains on CUDA, but --instance-type {} has no NVIDIA GPU; \
                     pick a P or G instance (ml.g5.xlarge, ml.p3.2xlarge, ...) or --backend gloo",
                    args.instance_type()
                ));
            }
            Ok(()) => {}
        }
    }
    for (flag, runtimes) in args.foreign_flags(runtime) {
        let why = match flag {
            "--resume" if runtime == Runtime::Sagemaker => {
                " (a training job name cannot be reused); --resume-from JOB starts a new job from \
                 JOB's checkpoints"
            }
            "--resume" if runtime == Runtime::Kubernetes => {
                " (a PyTorchJob of the same name cannot be created again); --resume-from JOB \
                 starts a new job from JOB's checkpoints"
            }
            "--resume-from" => "; a local job continues with --job-name NAME --resume",
            "--resume" => "",
            "--no-wait" => "; a local job runs in this process",
            _ => "",
        };
        // The runtime may come from kfaws.toml, not from a flag the user passed.
        let chosen = match args.runtime {
            Some(_) => format!("--runtime {runtime}"),
            None => format!("the {runtime} runtime (training_runtime in kfaws.toml)"),
        };
        problems.push(format!("{flag} applies to {runtimes}, not {chosen}{why}"));
    }
    match (runtime, &args.resume_from) {
        (Runtime::Sagemaker, Some(old)) => {
            if let Err(e) =
                kfaws::sagemaker::validate_name(kfaws::sagemaker::Kind::TrainingJob, old)
            {
                problems.push(format!("--resume-from: {e}"));
            }
        }
        (Runtime::Kubernetes, Some(old)) => {
            if let Err(e) = JobName::parse(old) {
                problems.push(format!("--resume-from: {e}"));
            }
        }
        _ => {}
    }
    if let (Runtime::Sagemaker, Some(image)) = (runtime, &args.image) {
        if let Err(e) =
            kfaws::sagemaker::validate_image(image, "AlgorithmSpecification, TrainingImage")
        {
            problems.push(e.to_string());
        }
    }
    // On another runtime they are refused above as foreign; their values do not matter.
    if let (Runtime::Kubernetes, Some(v)) = (runtime, &args.cpu) {
        if let Err(e) = kfaws::train::parse_quantity(v) {
            problems.push(format!("--cpu {e}"));
        }
    }
    if let (Runtime::Kubernetes, Some(v)) = (runtime, &args.memory) {
        if let Err(e) = kfaws::train::parse_memory(v) {
            problems.push(format!("--memory {e}"));
        }
    }
    let hyperparameters = hyperparameters(
        epochs.unwrap_or(1),
        batch_size.unwrap_or(1),
        args.lr,
        &args.backend,
        &args.hp,
    );
    // CreateTrainingJob's limits bind only a SageMaker job.
    if runtime == Runtime::Sagemaker {
        if let Err(e) = kfaws::sagemaker::training::validate_hyperparameters(&hyperparameters) {
            problems.push(e.to_string());
        }
    }
    if let Err(all) = kfaws::train::check_hyperparameters(&hyperparameters, &args.hp) {
        problems.extend(all.iter().map(ToString::to_string));
    }
    match (data, job, workers, problems.as_slice()) {
        (Some(data), Some(job), Some(workers), []) => Ok(Request {
            job,
            data,
            workers,
            max_runtime,
            hyperparameters,
        }),
        (.., [one]) => bail!("{one}"),
        (.., many) => bail!(
            "{} problems in the arguments; nothing was created:\n  - {}",
            many.len(),
            many.join("\n  - ")
        ),
    }
}

/// The problems the checks before a job is created found, so that all are
/// reported in one run: one problem is the error itself; several are one
/// per line under "N problems with the job; nothing was created:".
#[derive(Debug, Default)]
pub struct Problems(Vec<anyhow::Error>);

impl Problems {
    /// Keeps `result`'s error, if any; returns its value.
    pub fn check<T>(&mut self, result: anyhow::Result<T>) -> Option<T> {
        result.map_err(|e| self.0.push(e)).ok()
    }

    /// Keeps `error`.
    pub fn add(&mut self, error: anyhow::Error) {
        self.0.push(error);
    }

    /// `Ok` when no check failed; else the one error, or all of them (each
    /// with its context chain).
    ///
    /// # Errors
    /// As above.
    pub fn finish(mut self) -> anyhow::Result<()> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.remove(0)),
            n => bail!(
                "{n} problems with the job; nothing was created:\n  - {}",
                self.0
                    .iter()
                    .map(|e| format!("{e:#}"))
                    .collect::<Vec<_>>()
                    .join("\n  - ")
            ),
        }
    }
}

/// `kfaws train`.
pub async fn train(g: &Global, args: &TrainArgs, cancel: &CancellationToken) -> anyhow::Result<u8> {
    // Read also when --runtime is given: a --config that cannot be read, or
    // a kfaws.toml with errors, is refused as by every other command.
    let (file, _) = context::read_file(g)?;
    let runtime = match args.runtime {
        Some(r) => r,
        None => file.training_runtime.context(
            "no runtime: pass --runtime local|kubernetes|sagemaker, set KFAWS_TRAINING_RUNTIME, \
             or set training_runtime in kfaws.toml",
        )?,
    };
    // A local --resume without --data takes the job's recorded data directory; a
    // --resume-from, the data the job resumed read.
    let mut read_before = None;
    let mut cluster_before = None;
    let recorded_data = match (&args.data, &args.job_name, runtime) {
        (None, Some(name), Runtime::Local) if JobName::parse(name).is_ok() => {
            local::JobRecord::read(&local::job_dir(args.output_dir(), name))?
                .map(|r| r.data_dir.display().to_string())
        }
        (None, _, Runtime::Sagemaker) => match &args.resume_from {
            Some(old) => {
                let (data, read) = super::train_sagemaker::channel_of(g, old, cancel).await?;
                read_before = Some(read);
                Some(data)
            }
            None => None,
        },
        (None, _, Runtime::Kubernetes) => match &args.resume_from {
            Some(old) => {
                if let Err(e) = JobName::parse(old) {
                    bail!("--resume-from: {e}");
                }
                let cluster = match Cluster::connect(g, cancel).await {
                    Ok(cluster) => cluster,
                    // As in `train_kubernetes`: a connect the interrupt stopped.
                    Err(e) if e.is::<super::Interrupted>() => {
                        outln!("Interrupted: no training job was created.")?;
                        return Ok(kfaws::engine::interrupt::exit_status());
                    }
                    Err(e) => return Err(e),
                };
                let previous = cluster.previous_job(old).await?;
                let data = previous
                    .data_path
                    .as_ref()
                    .map(|path| format!("efs:{path}"))
                    .with_context(|| {
                        format!(
                            "--resume-from {old}: PyTorchJob {old} reads no data under {} (its \
                             TRAINER_DATA_DIR), so it was not started by `kfaws train` and \
                             cannot be continued by it",
                            pytorchjob::EFS_MOUNT
                        )
                    })?;
                // A job kfaws did not create is refused with the other problems, not described.
                if previous.by_kfaws {
                    outln!("--data {data}: the data PyTorchJob {old} read")?;
                }
                cluster_before = Some((cluster, previous));
                Some(data)
            }
            None => None,
        },
        _ => None,
    };
    let with_data;
    let args = match recorded_data {
        Some(data) => {
            with_data = TrainArgs {
                data: Some(data),
                ..args.clone()
            };
            &with_data
        }
        None if args.data.is_none() => {
            let dir = args
                .job_name
                .as_deref()
                .filter(|name| JobName::parse(name).is_ok())
                .map(|name| local::job_dir(args.output_dir(), name));
            match dir {
                // The job is missing, not its data: say that first.
                Some(dir) if runtime == Runtime::Local && !dir.exists() => bail!(
                    "--resume: no local job named {} under {} (no directory {}); start it \
                     without --resume, with --data",
                    args.job_name.as_deref().unwrap_or_default(),
                    args.output_dir().display(),
                    dir.display()
                ),
                _ => bail!(
                    "--data is required: only a local --resume of a job that ran (its job.json) \
                     and a --resume-from take the data of the job they continue"
                ),
            }
        }
        None => args,
    };
    let req = request(args, runtime)?;
    match runtime {
        Runtime::Local => train_local(args, req, cancel).await,
        Runtime::Kubernetes => train_kubernetes(g, args, req, cluster_before, cancel).await,
        Runtime::Sagemaker => {
            super::train_sagemaker::train(g, args, req, read_before, cancel).await
        }
    }
}

/// The `max-train-samples` hyperparameter in either spelling (checked by
/// `check_hyperparameters`), the number of training examples a run takes; `None` when absent.
pub(super) fn max_train_samples(hyperparameters: &BTreeMap<String, String>) -> Option<usize> {
    ["max-train-samples", "max_train_samples"]
        .iter()
        .find_map(|k| hyperparameters.get(*k)?.parse().ok())
}

/// Refuses a local world size whose ranks do not fit in the memory
/// available now ([`kfaws::train::local_room`]); a platform that does not
/// report it is not checked.
fn local_room(workers: u32) -> anyhow::Result<()> {
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    match system.available_memory() {
        0 => Ok(()),
        available => kfaws::train::local_room(workers, available).map_err(anyhow::Error::msg),
    }
}

/// What must hold before any local rank starts, asked of the trainer binary itself: it is a
/// kfaws-trainer ([`kfaws::train::trainer_version`]) whose build has `backend`, `workers`
/// ranks fit in the memory available, and it can read `data_dir` (its summary, when it can
/// check data).
///
/// # Errors
/// The first that does not hold, with what to do.
async fn preflight(
    trainer: &Path,
    backend: &str,
    workers: u32,
    data_dir: &Path,
    dataset: Option<&str>,
) -> anyhow::Result<Option<kfaws::train::data::LocalDataset>> {
    let out = tokio::process::Command::new(trainer)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run {} --version", trainer.display()))?;
    let version = kfaws::train::trainer_version(trainer, out.status.success(), &out.stdout)
        .map_err(anyhow::Error::msg)?;
    if backend != "gloo" {
        // A CPU build refuses the backend in every rank; say so once, before any starts.
        if let Some(backends) = kfaws::train::trainer_backends(&version) {
            if !backends.iter().any(|b| b == backend) {
                bail!(
                    "--backend {backend} is not in this trainer build ({}: {}); pass --trainer \
                     with a kfaws-trainer built with --features cuda, or --backend gloo",
                    trainer.display(),
                    version.trim()
                );
            }
        }
    }
    local_room(workers)?;
    Ok(kfaws::train::data::check_local(trainer, data_dir, dataset).await?)
}

async fn train_local(
    args: &TrainArgs,
    mut req: Request,
    cancel: &CancellationToken,
) -> anyhow::Result<u8> {
    let DataSource::Local(data_dir) = req.data else {
        unreachable!("checked by check_runtime")
    };
    let tuning = local::Tuning::from_env(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    )
    .map_err(anyhow::Error::msg)?;
    let exe = std::env::current_exe().context("cannot locate the kfaws executable")?;
    let trainer =
        kfaws::train::trainer_binary(args.trainer.as_deref(), &exe).map_err(anyhow::Error::msg)?;
    let job_dir = local::job_dir(args.output_dir(), req.job.as_str());
    // A resume continues with the job's recorded settings, but for the flags given now.
    if args.resume {
        if let Some(recorded) = local::JobRecord::read(&job_dir)? {
            let given = args.given_keys();
            let requested = local::JobRecord {
                workers: req.workers,
                data_dir: data_dir.clone(),
                hyperparameters: req.hyperparameters.clone(),
                data: None,
            };
            let resumed = recorded.resumed_with(&requested, &given);
            req.workers = resumed.workers;
            req.hyperparameters = resumed.hyperparameters;
        }
    }
    let hp = |k: &str| req.hyperparameters.get(k).map(String::as_str);
    let dataset = match preflight(
        &trainer,
        hp("backend").unwrap_or("gloo"),
        req.workers,
        &data_dir,
        hp("dataset"),
    )
    .await
    {
        Ok(dataset) => dataset,
        // A Ctrl-C from a terminal reaches the trainer checks too (one process group): what
        // failed then is the interrupt, not the trainer or the data.
        Err(_) if cancel.is_cancelled() => {
            outln!(
                "Training job {} stopped by a signal before it started; nothing was created.",
                req.job
            )?;
            return Ok(kfaws::engine::interrupt::exit_status());
        }
        Err(e) => return Err(e),
    };
    match (job_dir.exists(), args.resume) {
        (true, _) if local::is_running(&job_dir) => bail!(
            "a local job named {} is running now (another kfaws holds {}); wait for it to end, \
             or pick another --job-name",
            req.job,
            job_dir.join(local::LOCK_FILE).display()
        ),
        (true, false) => bail!(
            "{} exists: a local job named {} ran before; pass --resume to continue it from its \
             newest checkpoint (and overwrite its model), another --job-name, or remove the \
             directory",
            job_dir.display(),
            req.job
        ),
        (false, true) => bail!(
            "--resume: no local job named {} under {} (no directory {})",
            req.job,
            args.output_dir().display(),
            job_dir.display()
        ),
        _ => {}
    }
    let job = local::LocalJob {
        trainer,
        workers: req.workers,
        data_dir,
        job_dir,
        hyperparameters: req.hyperparameters,
        tuning,
        dataset: dataset.as_ref().map(ToString::to_string),
    };
    // Held until this function returns: a second kfaws on the same job is refused.
    let claim = match local::claim_job_dir(req.job.as_str(), &job, args.resume) {
        Ok(claim) => claim,
        Err(e) => {
            if !args.resume && !matches!(e, local::LocalError::Busy { .. }) {
                local::remove_if_empty(&job.job_dir);
            }
            return Err(e.into());
        }
    };
    let max_train = max_train_samples(&job.hyperparameters);
    if let Err(e) = outln!(
        "Training job {} (local): {} process(es) on this machine, data {}{}",
        req.job,
        job.workers,
        job.data_dir.display(),
        dataset.map_or(String::new(), |d| format!(": {}", d.describe(max_train)))
    ) {
        // Nobody reads the job's output: start nothing, keep the name free.
        local::remove_if_empty(&job.job_dir);
        return Err(e.into());
    }
    if !job.tuning.passed.is_empty() {
        let passed: Vec<String> = job
            .tuning
            .passed
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        outln!("Passed to every rank: {}", passed.join(" "))?;
    }
    for (name, near) in &job.tuning.unknown {
        errln!(
            "Warning: {name} is not a variable kfaws-trainer reads{}; not passed to the ranks \
             (`kfaws-trainer train --help` lists them)",
            near.map_or(String::new(), |n| format!(" (did you mean {n}?)"))
        );
    }
    if !job.tuning.dropped.is_empty() {
        errln!(
            "Warning: not passed to the ranks: {} (kfaws train sets the launch contract itself: \
             --workers, --data, --hp, --output-dir)",
            job.tuning.dropped.join(", ")
        );
    }
    if args.resume {
        match local::newest_checkpoint(&job.job_dir) {
            Some(path) => outln!("Resuming from {}", path.display())?,
            None => {
                outln!("No checkpoint in the job's directory: training starts from the beginning")?
            }
        }
        if !claim.changed.is_empty() {
            let changed: Vec<String> = claim
                .changed
                .iter()
                .map(|(k, was, now)| format!("{k} {was} → {now}"))
                .collect();
            outln!("Changed since the last run: {}", changed.join(", "))?;
        }
    }
    // The ranks stop (and checkpoint) on a signal to kfaws, or when the reader
    // of their output goes away (`| head`): their log would have nowhere to go.
    let stop = cancel.child_token();
    let progress = Progress::new(stop.clone());
    let print: local::LineSink = {
        let progress = progress.clone();
        Arc::new(move |rank, line| progress.line(&format!("[rank {rank}] {line}")))
    };
    if stop.is_cancelled() {
        // A signal before the first rank started: start none, and free the name.
        let removed = !args.resume && local::remove_if_empty(&job.job_dir);
        outln!(
            "Training job {} stopped by a signal before it started{}.",
            req.job,
            if removed {
                "; it wrote nothing, and its directory was removed"
            } else {
                ""
            }
        )?;
        return Ok(kfaws::engine::interrupt::exit_status());
    }
    let outcome = match local::run(&job, &stop, print).await {
        Ok(outcome) => outcome,
        Err(e) => {
            local::remove_if_empty(&job.job_dir);
            return Err(e.into());
        }
    };
    let codes = || {
        outcome
            .exits
            .iter()
            .enumerate()
            .map(|(r, e)| format!("rank {r}: {}", local::describe_exit(*e)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // The generated name is new on every run: the hint names it.
    let resume_flags = match args.job_name {
        Some(_) => "--resume".to_string(),
        None => format!("--job-name {} --resume", req.job),
    };
    let resume_hint = || {
        outcome.checkpoint.as_ref().map_or(String::new(), |path| {
            format!(
                "; the newest checkpoint is {}: continue with the same command and {resume_flags}",
                path.display()
            )
        })
    };
    if progress.is_closed() {
        if outcome.succeeded() {
            errln!(
                "Standard output was closed; training job {} completed. Model: {}",
                req.job,
                outcome.model_dir.display()
            );
        } else if outcome.checkpoint.is_some() {
            errln!(
                "Standard output was closed (its reader went away): training job {} was stopped \
                 as on Ctrl-C ({}){}.",
                req.job,
                codes(),
                resume_hint()
            );
        } else {
            let removed = local::remove_if_empty(&job.job_dir);
            errln!(
                "Standard output was closed (its reader went away): training job {} was stopped \
                 before any checkpoint was written ({}){}.",
                req.job,
                codes(),
                if removed {
                    "; it wrote nothing, and its directory was removed"
                } else {
                    ""
                }
            );
        }
        return Err(super::progress::closed());
    }
    // Every rank exited 143: stopped by a signal (Ctrl-C here, or a signal sent to a rank),
    // after agreeing on a step and checkpointing.
    let signalled = outcome.exits.iter().all(|e| e.code() == Some(143));
    if !outcome.succeeded() && (outcome.interrupted || signalled) {
        match &outcome.checkpoint {
            Some(_) => outln!(
                "Training job {} stopped by a signal ({}){}.",
                req.job,
                codes(),
                resume_hint()
            )?,
            None => {
                // Nothing to resume: a new job that wrote nothing frees its name.
                let removed = !args.resume && local::remove_if_empty(&job.job_dir);
                outln!(
                    "Training job {} stopped by a signal before any checkpoint was written \
                     ({}){}.",
                    req.job,
                    codes(),
                    if removed {
                        "; it wrote nothing, and its directory was removed"
                    } else {
                        ""
                    }
                )?;
            }
        }
        return Ok(kfaws::engine::interrupt::exit_status());
    }
    if !outcome.succeeded() {
        let removed = local::remove_if_empty(&job.job_dir);
        bail!(
            "training job {} failed ({}){}",
            req.job,
            codes(),
            if removed {
                "; it wrote nothing, and its directory was removed".to_string()
            } else {
                resume_hint()
            }
        );
    }
    outln!(
        "Training job {} completed. Model: {}",
        req.job,
        outcome.model_dir.display()
    )?;
    if let Some(m) = outcome.last_metrics {
        outln!("Final metrics: {m}")?;
    }
    Ok(0)
}

/// The recorded outputs of the deployment `train` and `endpoint` need.
pub struct Deployment {
    /// The loaded config.
    pub loaded: Loaded,
    /// Its state.
    pub state: State,
}

impl Deployment {
    /// Loads the config and the state.
    pub fn load(g: &Global) -> anyhow::Result<Self> {
        let loaded = context::load(g, None)?;
        let state = StateStore::open(&loaded.state_dir, &loaded.config.name)?
            .state()
            .clone();
        Ok(Self { loaded, state })
    }

    /// Changes the state under its lock (atomic write, as every state write).
    pub fn record(&self, operation: &str, change: impl FnOnce(&mut State)) -> anyhow::Result<()> {
        let (dir, name) = (&self.loaded.state_dir, &self.loaded.config.name);
        let _lock = kfaws::state::lock::StateLock::acquire(dir, name, operation)?;
        StateStore::open(dir, name)?.write(change)?;
        Ok(())
    }

    /// The SDK config for the deployment's region, once the caller's
    /// identity matches the account and region recorded in the state.
    pub async fn aws(
        &self,
        g: &Global,
        cancel: &CancellationToken,
    ) -> anyhow::Result<aws_config::SdkConfig> {
        let aws = context::aws(g, &self.loaded.config).await;
        super::interruptible(
            cancel,
            context::check_identity(g, &aws, &self.loaded.config, &self.state),
        )
        .await??;
        Ok(aws)
    }

    /// `--image`, else the image `kfaws image push` pushed by default;
    /// refused when its config says its trainer lacks `backend`
    /// ([`check_image_backend`]).
    pub async fn image(
        aws: &aws_config::SdkConfig,
        explicit: Option<&String>,
        backend: &str,
    ) -> anyhow::Result<String> {
        let image = match explicit {
            Some(i) => {
                super::train_sagemaker::check_image(aws, i).await?;
                i.clone()
            }
            None => super::train_sagemaker::default_image(aws).await?,
        };
        check_image_backend(aws, &image, backend).await?;
        Ok(image)
    }

    /// Refuses a PyTorchJob of `workers` replicas that the node groups the
    /// state records cannot hold: one replica larger than a whole node of
    /// every group, or more replicas than their nodes at `max_size` hold
    /// ([`kfaws::train::capacity::check_fits`]); the sizes come from EC2
    /// DescribeInstanceTypes. When that call fails nothing is refused (a
    /// warning says the check was skipped).
    pub async fn check_replica_fits(
        &self,
        aws: &aws_config::SdkConfig,
        replica: &ReplicaRequest,
        workers: u32,
    ) -> anyhow::Result<()> {
        let groups: Vec<(String, String, Option<u32>)> = self
            .state
            .resources
            .iter()
            .filter(|(_, r)| r.kind == "aws_eks_nodegroup")
            .filter_map(|(a, r)| {
                let group = a.as_str().rsplit('.').next()?.to_string();
                let max_size = r
                    .spec
                    .pointer("/scaling/max_size")
                    .and_then(serde_json::Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok());
                Some((
                    group,
                    r.spec.get("instance_type")?.as_str()?.to_string(),
                    max_size,
                ))
            })
            .collect();
        let types: Vec<String> = groups.iter().map(|(_, t, _)| t.clone()).collect();
        let sizes = match kfaws::aws::instance_types::sizes(aws, &types).await {
            Ok(sizes) => sizes,
            Err(e) => {
                tracing::warn!("{e}; not checked that a replica fits on a node");
                return Ok(());
            }
        };
        let groups: Vec<NodeGroupSize> = groups
            .into_iter()
            .map(|(group, instance_type, max_size)| NodeGroupSize {
                size: sizes.get(&instance_type).copied(),
                group,
                instance_type,
                max_size,
            })
            .collect();
        kfaws::train::capacity::check_fits(replica, workers, &groups).map_err(anyhow::Error::msg)
    }

    /// A recorded output (`stack.iam`, `SageMakerRoleArn`), or an error saying
    /// to apply first.
    pub fn output(&self, address: &str, key: &str, what: &str) -> anyhow::Result<String> {
        let v = self
            .state
            .resources
            .iter()
            .find(|(a, _)| a.as_str() == address)
            .and_then(|(_, r)| r.outputs.get(key));
        match v {
            Some(serde_json::Value::String(s)) => Ok(s.clone()),
            Some(serde_json::Value::Array(a)) => Ok(a
                .iter()
                .filter_map(|x| x.as_str())
                .collect::<Vec<_>>()
                .join(",")),
            _ => bail!(
                "deployment {:?} has no {what} ({address} output {key}) in its state: run \
                 `kfaws apply` first",
                self.loaded.config.name
            ),
        }
    }
}

/// Refuses `--backend` other than gloo (which every trainer build has) with
/// an image whose config label says its trainer was built without it
/// ([`kfaws::image::inspect::trainer_backends`]): the job would fail in
/// every replica after its pods or instances started. An image that does
/// not say, or whose config cannot be read, is let through with a warning.
pub(super) async fn check_image_backend(
    aws: &aws_config::SdkConfig,
    image: &str,
    backend: &str,
) -> anyhow::Result<()> {
    if backend == "gloo" {
        return Ok(());
    }
    match kfaws::image::inspect::trainer_backends(aws, image).await {
        Ok(Some(backends)) if !backends.iter().any(|b| b == backend) => bail!(
            "--backend {backend}: the trainer in image {image} was built without it (backends: \
             {}); build kfaws-trainer with --features cuda, then `kfaws image build --trainer \
             PATH` and `kfaws image push`, and pass that image, or use --backend gloo",
            backends.join(" ")
        ),
        Ok(Some(_)) => Ok(()),
        Ok(None) => {
            tracing::warn!(
                "image {image} does not say which collective backends its trainer has (no \
                 {} label: not built by this kfaws's `kfaws image build`); --backend {backend} \
                 is not checked against it",
                kfaws::image::manifest::BACKENDS_LABEL
            );
            Ok(())
        }
        Err(e) => {
            tracing::warn!(
                "cannot read the config of image {image} ({e}); --backend {backend} is not \
                 checked against it"
            );
            Ok(())
        }
    }
}

/// The deployment's cluster, connected, with the user namespace jobs run in.
struct Cluster {
    d: Deployment,
    aws: aws_config::SdkConfig,
    client: kube::Client,
    namespace: String,
}

impl Cluster {
    /// Loads the deployment, checks the caller's identity and connects to its EKS cluster.
    async fn connect(g: &Global, cancel: &CancellationToken) -> anyhow::Result<Self> {
        let d = Deployment::load(g)?;
        let cluster_name = d.output("eks.cluster", "name", "EKS cluster")?;
        let aws = d.aws(g, cancel).await?;
        let connector = ClusterConnector {
            cluster_name: cluster_name.clone(),
            region: d.loaded.config.region.clone(),
            eks: kfaws::aws::client::<aws_sdk_eks::Client>(&aws),
            tokens: EksTokens::new(
                aws.clone(),
                cluster_name.clone(),
                d.loaded.config.region.clone(),
            ),
            owner: Some((d.loaded.config.name.clone(), d.state.lineage.to_string())),
        };
        let client = connector
            .connect()
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .with_context(|| {
                format!("EKS cluster {cluster_name} does not exist: run `kfaws apply`")
            })?;
        let namespace = d.loaded.config.options.user_namespace.clone();
        Ok(Self {
            d,
            aws,
            client,
            namespace,
        })
    }

    /// PyTorchJob `old` of the user namespace, which `--resume-from` names.
    async fn previous_job(&self, old: &str) -> anyhow::Result<PreviousPyTorchJob> {
        let ns = &self.namespace;
        pytorchjob::resume::previous_job(&self.client, ns, old)
            .await
            .with_context(|| format!("--resume-from {old}"))?
            .with_context(|| {
                format!(
                    "--resume-from {old}: no PyTorchJob {old} in namespace {ns}: kfaws continues \
                     a job that still exists (a deleted job's checkpoints stay on the file \
                     system, but not the settings they were written with)"
                )
            })
    }
}

/// What `--resume-from` settled for a PyTorchJob: the job continued, the world size and
/// hyperparameters the new one runs with, and every reason it cannot run.
struct K8sResume {
    previous: PreviousPyTorchJob,
    workers: u32,
    hyperparameters: BTreeMap<String, String>,
    problems: Vec<anyhow::Error>,
}

/// `--resume-from OLD` on the kubernetes runtime: reads PyTorchJob `OLD` (unless read before,
/// `read`), settles the new job's world size and hyperparameters (the flags given, `OLD`'s for
/// the rest) and finds every reason it cannot continue `OLD`'s checkpoints
/// ([`pytorchjob::resume::problems`]), including replicas of `OLD` and other jobs that may
/// still write them.
///
/// # Errors
/// When `OLD` cannot be read.
async fn resume_pytorchjob(
    cluster: &Cluster,
    old: &str,
    read: Option<PreviousPyTorchJob>,
    args: &TrainArgs,
    req: &Request,
    data_path: &str,
) -> anyhow::Result<K8sResume> {
    let previous = match read {
        Some(p) => p,
        None => cluster.previous_job(old).await?,
    };
    let (workers, hyperparameters) = kfaws::train::resume::settings(
        (previous.workers, &previous.hyperparameters),
        (req.workers, &req.hyperparameters),
        &args.given_keys(),
    );
    let name = req.job.to_string();
    let requested = pytorchjob::resume::Requested {
        name: &name,
        namespace: &cluster.namespace,
        workers,
        hyperparameters: &hyperparameters,
        data_path,
    };
    let mut problems: Vec<anyhow::Error> = pytorchjob::resume::problems(&previous, &requested)
        .into_iter()
        .map(anyhow::Error::msg)
        .collect();
    let ns = &cluster.namespace;
    // Only an ended job's replicas are looked at: a running job is refused as such.
    if previous.ended() {
        match pytorchjob::resume::replicas_still_running(&cluster.client, ns, old).await {
            Ok(live) => problems.extend(live.into_iter().map(|(pod, what)| {
                anyhow::anyhow!(
                    "--resume-from {old}: PyTorchJob {old} has ended, but its replica {pod} is \
                     {what} and may still write a checkpoint: wait until it has stopped \
                     (`kubectl -n {ns} get pod {pod}`)"
                )
            })),
            Err(e) => problems.push(anyhow::Error::new(e).context(format!("--resume-from {old}"))),
        }
    }
    if let Some(checkpoints) = &previous.checkpoints {
        match pytorchjob::resume::jobs_sharing(&cluster.client, ns, checkpoints, old).await {
            Ok(jobs) => {
                problems.extend(
                    pytorchjob::resume::furthest_problem(&previous, &hyperparameters, &jobs)
                        .map(anyhow::Error::msg),
                );
                problems.extend(jobs.iter().filter(|j| !j.ended()).map(|j| {
                    anyhow::anyhow!(
                        "--resume-from {old}: PyTorchJob {} (resumed from the same checkpoints) \
                         is {} and writes to efs:{checkpoints}; two jobs would write the same \
                         checkpoints: wait for it to end",
                        j.name,
                        j.state
                    )
                }));
            }
            Err(e) => problems.push(anyhow::Error::new(e).context(format!("--resume-from {old}"))),
        }
    }
    Ok(K8sResume {
        previous,
        workers,
        hyperparameters,
        problems,
    })
}

async fn train_kubernetes(
    g: &Global,
    args: &TrainArgs,
    req: Request,
    before: Option<(Cluster, PreviousPyTorchJob)>,
    cancel: &CancellationToken,
) -> anyhow::Result<u8> {
    let DataSource::Efs(data_path) = req.data.clone() else {
        unreachable!("checked by check_runtime")
    };
    let interrupted = || -> anyhow::Result<u8> {
        outln!("Interrupted: training job {} was not created.", req.job)?;
        Ok(kfaws::engine::interrupt::exit_status())
    };
    let (cluster, read) = match before {
        Some((cluster, previous)) => (cluster, Some(previous)),
        None => match Cluster::connect(g, cancel).await {
            Ok(cluster) => (cluster, None),
            // A connect stopped by the interrupt (the identity check gives way to it); any
            // other failure is the connect's own, interrupt or not.
            Err(e) if e.is::<super::Interrupted>() => return interrupted(),
            Err(e) => return Err(e),
        },
    };
    let mut problems = Problems::default();
    // The settings a resumed job runs with decide the replicas checked below.
    let resumed = match &args.resume_from {
        Some(old) => {
            let resumed = super::interruptible(
                cancel,
                resume_pytorchjob(&cluster, old, read, args, &req, &data_path),
            );
            match resumed.await {
                Err(_) => return interrupted(),
                Ok(Ok(mut r)) => {
                    std::mem::take(&mut r.problems)
                        .into_iter()
                        .for_each(|e| problems.add(e));
                    Some(r)
                }
                Ok(Err(e)) => {
                    problems.add(e);
                    None
                }
            }
        }
        None => None,
    };
    let (workers, hyperparameters) = match &resumed {
        Some(r) => (r.workers, r.hyperparameters.clone()),
        None => (req.workers, req.hyperparameters.clone()),
    };
    let Cluster {
        d,
        aws,
        client,
        namespace,
    } = &cluster;
    let namespace = namespace.clone();
    let served = async {
        match pytorchjob::preflight(client, &namespace).await {
            // Case C9 where kfaws installs the operator: its CRD is missing although the
            // config asks for it, so it was removed outside kfaws (or never applied).
            Err(pytorchjob::PyTorchJobError::NotServed(_))
                if d.loaded.config.kubeflow.training_operator.is_some() =>
            {
                bail!(
                    "the cluster does not serve kubeflow.org/v1 PyTorchJob, although \
                     kubeflow.training_operator is set in kfaws.toml: the training operator's \
                     CRD was removed outside kfaws, or k8s.training-operator was never applied. \
                     `kfaws plan` shows what is missing and `kfaws apply` puts it back"
                )
            }
            other => Ok(other?),
        }
    };
    // A resumed job's backend may be the job's it continues.
    let backend = hyperparameters
        .get("backend")
        .cloned()
        .unwrap_or_else(|| args.backend.clone());
    // A resumed job keeps the resources of the job it continues, unless given.
    let (cpu, memory) = resumed
        .as_ref()
        .map(|r| r.previous.resources.clone())
        .unwrap_or_default();
    let replica = ReplicaRequest {
        cpu: args.cpu.clone().or(cpu).unwrap_or_else(|| "1".into()),
        memory: args
            .memory
            .clone()
            .or(memory)
            .unwrap_or_else(|| "2Gi".into()),
        gpus: u32::from(backend == "nccl"),
    };
    // Every check, so a job with several problems (no GPU node and a
    // CPU-only image, say) is told all at once.
    let checks = super::interruptible(cancel, async {
        tokio::join!(
            served,
            d.check_replica_fits(aws, &replica, workers),
            Deployment::image(aws, args.image.as_ref(), &backend)
        )
    });
    // A check cut short by the interrupt is no problem of the job's.
    let Ok((served, fits, image)) = checks.await else {
        return interrupted();
    };
    problems.check(served);
    problems.check(fits);
    let image = problems.check(image);
    problems.finish()?;
    let image = image.expect("checked");
    let spec = PyTorchJobSpec {
        name: req.job.to_string(),
        namespace,
        image,
        workers,
        hyperparameters,
        data_path,
        cpu: replica.cpu,
        memory: replica.memory,
        gpu: replica.gpus > 0,
        checkpoints: match &resumed {
            Some(r) => r.previous.checkpoints.clone().expect("checked"),
            None => pytorchjob::new_checkpoint_path(req.job.as_str()),
        },
        require_checkpoint: resumed.is_some(),
        max_runtime: Duration::from_secs(req.max_runtime),
    };
    if cancel.is_cancelled() {
        // No job is made after the interrupt.
        return interrupted();
    }
    pytorchjob::submit(client, &spec).await?;
    outln!(
        "Training job {} (kubernetes): PyTorchJob {}/{} created, 1 master + {} worker(s), image {}",
        spec.name,
        spec.namespace,
        spec.name,
        spec.workers - 1,
        spec.image
    )?;
    if let Some(r) = &resumed {
        let changed = kfaws::train::resume::describe_changed(&pytorchjob::resume::changed(
            &r.previous,
            &spec,
        ));
        outln!(
            "  resumes PyTorchJob {} ({}) from the newest checkpoint in efs:{}{changed}",
            r.previous.name,
            r.previous.state,
            spec.checkpoints
        )?;
    }
    if args.no_wait {
        outln!(
            "Not waiting (--no-wait). Watch it with: kubectl -n {} get pytorchjob {}",
            spec.namespace,
            spec.name
        )?;
        return Ok(0);
    }
    // Waiting stops on a signal, or when the reader of the output goes away.
    let stop = cancel.child_token();
    let progress = Progress::new(stop.clone());
    let following = args.follow.then(|| {
        let (client, ns, name) = (client.clone(), spec.namespace.clone(), spec.name.clone());
        let progress = progress.clone();
        tokio::spawn(async move {
            let print = |l: &str| progress.line(&format!("  [master-0] {l}"));
            if let Err(e) = pytorchjob::follow_master_log(&client, &ns, &name, print).await {
                errln!("Warning: --follow: {e}");
            }
        })
    });
    let waiting = pytorchjob::wait(
        client,
        &spec.namespace,
        &spec.name,
        Duration::from_secs(req.max_runtime),
        |e| progress.line(&format!("  {e}")),
    );
    let outcome = match super::interruptible(&stop, waiting).await {
        Ok(o) => o?,
        Err(_) if progress.is_closed() => {
            if let Some(f) = following {
                f.abort();
            }
            errln!(
                "Standard output was closed: stopped waiting. The job keeps running; watch it \
                 with: kubectl -n {ns} get pytorchjob {name}; delete it with: kubectl -n {ns} \
                 delete pytorchjob {name}",
                ns = spec.namespace,
                name = spec.name
            );
            return Err(super::progress::closed());
        }
        Err(_) => {
            outln!(
                "Stopped waiting. The job keeps running; delete it with: kubectl -n {} delete \
                 pytorchjob {} (a deleted job cannot be continued with --resume-from)",
                spec.namespace,
                spec.name
            )?;
            return Ok(kfaws::engine::interrupt::exit_status());
        }
    };
    if let Some(f) = following {
        // The log ends with the container; a little grace for its last lines.
        let _ = tokio::time::timeout(Duration::from_secs(5), f).await;
    }
    if outcome.succeeded {
        outln!(
            "Training job {} succeeded. Model: efs:{} (claim {} in {})",
            spec.name,
            spec.model_path(),
            pytorchjob::EFS_CLAIM,
            spec.namespace
        )?;
        if let Some(m) = pytorchjob::final_metrics(client, &spec.namespace, &spec.name).await {
            outln!("Final metrics: {m}")?;
        }
        return Ok(0);
    }
    let mut msg = format!("PyTorchJob {} failed: {}", spec.name, outcome.message);
    // After the log's tail, so that the way on is the last thing said.
    let resume_hint = format!(
        "\n  Its checkpoints, if it wrote any, stay in efs:{}: once the cause is fixed, continue \
         from the newest with the same `kfaws train` with --resume-from {} and another \
         --job-name (a cause in a setting the checkpoints fix, such as the dataset, needs a new \
         job instead).",
        spec.checkpoints, spec.name
    );
    if let Some(f) = outcome.failed_replica {
        msg.push_str(&format!(
            "\n  replica {} exited {} ({})",
            f.pod,
            f.exit_code.map_or("?".into(), |c| c.to_string()),
            f.reason
        ));
        if !f.message.trim().is_empty() {
            msg.push_str("; its log ends:\n");
            for l in f
                .message
                .trim_end()
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                msg.push_str(&format!("    {l}\n"));
            }
        }
    }
    let mut msg = msg.trim_end().to_string();
    msg.push_str(&resume_hint);
    bail!(msg)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::TrainArgs;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        train: TrainArgs,
    }

    /// The flags' defaults are the trainer's own (what it would use if the flag sent nothing),
    /// so `kfaws train` and `kfaws-trainer train` without flags train the same way.
    #[test]
    fn flag_defaults_are_the_trainers_defaults() {
        let args = Command::try_parse_from(["kfaws-train", "--data", "d"])
            .unwrap()
            .train;
        let trainer = kfaws_trainer_contract::Hyperparameters::default();
        assert_eq!(u64::try_from(args.epochs).unwrap(), trainer.epochs);
        assert_eq!(
            usize::try_from(args.batch_size).unwrap(),
            trainer.batch_size
        );
        assert_eq!(args.lr as f32, trainer.lr);
        assert_eq!(args.backend, trainer.backend);
    }

    /// Only flags given count as given: a default is not, an environment variable's value is.
    #[test]
    fn only_flags_given_are_noted_as_given() {
        use clap::{CommandFactory as _, FromArgMatches as _};
        let matches = Command::command()
            .try_get_matches_from(["kfaws-train", "--data", "d", "--epochs", "2", "--lr", "0.1"])
            .unwrap();
        let mut args = Command::from_arg_matches(&matches).unwrap().train;
        args.note_given(&matches);
        assert_eq!(
            args.given.iter().map(String::as_str).collect::<Vec<_>>(),
            ["epochs", "lr"]
        );
    }

    /// A flag of another runtime is one problem, whatever its value.
    #[test]
    fn a_foreign_memory_flag_is_refused_once_not_also_for_its_value() {
        let args = Command::try_parse_from(["kfaws-train", "--data", ".", "--memory", "2"])
            .unwrap()
            .train;
        let err = super::request(&args, super::Runtime::Local)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--memory applies to the kubernetes runtime")
                && err.contains("not the local runtime (training_runtime in kfaws.toml)"),
            "{err}"
        );
        assert_eq!(err.matches("--memory").count(), 1, "{err}");
        // On Kubernetes the value itself is checked.
        let args = Command::try_parse_from(["kfaws-train", "--data", "s3://b/p", "--memory", "2"])
            .unwrap()
            .train;
        let err = super::request(&args, super::Runtime::Kubernetes);
        assert!(err.is_err_and(|e| e.to_string().contains("--memory \"2\" is 2 bytes")));
    }
}
