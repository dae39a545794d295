//! Where a training run's configuration comes from. Resolved in this order, first wins:
//!
//! 1. flags, or the `TRAINER_*` variable named in each flag's help;
//! 2. SageMaker: `<root>/input/config/resourceconfig.json` and `hyperparameters.json`
//!    ([`sagemaker`]), root `/opt/ml` unless `--sagemaker-root` says otherwise;
//! 3. Kubeflow PyTorchJob (`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`) or Trainer v2
//!    (`PET_NNODES`, `PET_NODE_RANK`, `PET_MASTER_ADDR`, `PET_MASTER_PORT`) ([`env`](mod@env));
//! 4. otherwise a single process.

pub mod env;
pub mod sagemaker;

use std::path::PathBuf;
use std::time::Duration;

pub use kfaws_trainer_contract::{HyperparameterError, Hyperparameters};
use sagemaker::SageMakerLayout;

use crate::dist::{AllReduce, Rendezvous};
use crate::replicas::Parallelism;
use kfaws_trainer_contract::MAX_TIMEOUT_SECS;

/// A configuration that cannot work; never retryable (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A hyperparameter is unknown or its value breaks its rule.
    #[error(transparent)]
    Hyperparameter(#[from] HyperparameterError),
    /// A configuration file is not the JSON expected.
    #[error("{path}: {detail}")]
    Json {
        /// The file: SageMaker's `resourceconfig.json` or `hyperparameters.json`.
        path: String,
        /// Why it could not be used: the I/O error reading it, or serde_json's parse error.
        detail: String,
    },
    /// A runtime contract is inconsistent.
    #[error("{source_name}: {detail}")]
    Contract {
        /// Where the inconsistent settings came from: a file or directory path, a launcher's
        /// environment variables (e.g. `PyTorchJob environment`), or flags with their
        /// `TRAINER_*` variables.
        source_name: String,
        /// What is inconsistent, with the values found.
        detail: String,
    },
    /// A required setting was given by no source.
    #[error("{0}")]
    Missing(String),
    /// The compute device the `backend` asks for is not on this machine (no NVIDIA driver, or
    /// no CUDA device): not retryable on the same node.
    #[error("backend={backend}: {detail}")]
    Device {
        /// The `backend` hyperparameter's value that asked for the device (`nccl`).
        backend: String,
        /// What is missing: the driver library, a driver that does not start, or a device.
        detail: String,
    },
}

/// `kfaws-trainer train` flags. Each also reads the `TRAINER_*` variable shown in `--help`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TrainArgs {
    /// Directory holding the dataset: CIFAR-10 binary (`data_batch_1.bin`…) or python batches
    /// (`data_batch_1`…), or (Fashion-)MNIST IDX files, gzipped or not.
    #[arg(long, env = "TRAINER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// SageMaker input channel to read the dataset from (default: `training`, or the only one).
    #[arg(long, env = "TRAINER_CHANNEL")]
    pub channel: Option<String>,
    /// Where rank 0 writes the trained model (burn record) and `model.json`.
    #[arg(long, env = "TRAINER_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,
    /// Where rank 0 writes a checkpoint every epoch, and every rank resumes from.
    #[arg(long, env = "TRAINER_CHECKPOINT_DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Refuse to train without a checkpoint to resume from in the checkpoint directory (exit
    /// 1, before the first step): for a run that continues another's checkpoints (`kfaws
    /// train --runtime kubernetes --resume-from`), where starting again from the first epoch
    /// would pass for a resume.
    #[arg(
        long,
        env = "TRAINER_REQUIRE_CHECKPOINT",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub require_checkpoint: bool,
    /// Root of the SageMaker layout.
    #[arg(long, env = "TRAINER_SAGEMAKER_ROOT", default_value = sagemaker::ROOT)]
    pub sagemaker_root: PathBuf,
    /// This process's rank, `0..world-size`.
    #[arg(long, env = "TRAINER_RANK")]
    pub rank: Option<usize>,
    /// Number of training processes.
    #[arg(long, env = "TRAINER_WORLD_SIZE")]
    pub world_size: Option<usize>,
    /// Host name or address of rank 0.
    #[arg(long, env = "TRAINER_MASTER_ADDR")]
    pub master_addr: Option<String>,
    /// Port rank 0 listens on; not 0 when the world size is above 1 (the other ranks must
    /// know it).
    #[arg(long, env = "TRAINER_MASTER_PORT")]
    pub master_port: Option<u16>,
    /// Address rank 0's listener binds.
    #[arg(long, env = "TRAINER_BIND_ADDR", default_value = "0.0.0.0")]
    pub bind_addr: String,
    /// Seconds to wait for all ranks to connect.
    #[arg(
        long,
        env = "TRAINER_CONNECT_TIMEOUT",
        default_value_t = 300,
        value_parser = clap::value_parser!(u64).range(..=MAX_TIMEOUT_SECS)
    )]
    pub connect_timeout_secs: u64,
    /// Seconds any collective waits for a peer before failing the job.
    #[arg(
        long,
        env = "TRAINER_COLLECTIVE_TIMEOUT",
        default_value_t = 120,
        value_parser = clap::value_parser!(u64).range(..=MAX_TIMEOUT_SECS)
    )]
    pub collective_timeout_secs: u64,
    /// All-reduce algorithm for the gradients (every rank must use the same; the handshake
    /// checks): `star` (reduce to rank 0, broadcast) or `ring` (reduce-scatter, all-gather).
    #[arg(long, env = "TRAINER_ALL_REDUCE", value_enum, default_value_t)]
    pub all_reduce: AllReduce,
    /// Seconds after SIGTERM before a rank still blocked waiting for peers exits with 143
    /// (SageMaker's StopTrainingJob sends SIGKILL 120 s after SIGTERM).
    #[arg(
        long,
        env = "TRAINER_STOP_GRACE",
        default_value_t = kfaws_trainer_contract::STOP_GRACE_SECS,
        value_parser = clap::value_parser!(u64).range(..=MAX_TIMEOUT_SECS)
    )]
    pub stop_grace_secs: u64,
    /// Stop as after SIGTERM (checkpoint, exit 143) once the process of this pid (the launcher
    /// of a local job) is gone, or this process's parent changed: the launcher died (SIGKILL
    /// cannot be caught), and its ranks must not train on unwatched beside the next run of the
    /// same job. Checked every 500 ms.
    #[arg(long, env = "TRAINER_PARENT_PID")]
    pub parent_pid: Option<u32>,
    /// Serve Prometheus metrics on this port (rank 0 only; `/metrics`).
    #[arg(long, env = "TRAINER_METRICS_PORT")]
    pub metrics_port: Option<u16>,
    /// Threads this process uses in all (default: `RAYON_NUM_THREADS`, else the CPUs available,
    /// within a container's CPU limit).
    #[arg(long, env = "TRAINER_THREADS")]
    pub threads: Option<usize>,
    /// Model replicas each batch is split across, run as tasks of the threads' pool (default:
    /// one per thread, at most one per 16 images of the batch; 1 on a GPU).
    #[arg(long, env = "TRAINER_REPLICAS")]
    pub replicas: Option<usize>,
    /// Hyperparameters as `key=value` (same names as SageMaker's: batch-size, epochs, lr, …).
    #[arg(
        long = "hp",
        value_name = "KEY=VALUE",
        env = "TRAINER_HYPERPARAMETERS",
        value_delimiter = ','
    )]
    pub hyperparameters: Vec<String>,
}

/// Where the run's topology came from, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// Flags or `TRAINER_*`.
    Flags,
    /// SageMaker resource config.
    SageMaker,
    /// PyTorchJob environment.
    PyTorchJob,
    /// Trainer v2 `PET_*` environment.
    TrainerV2,
    /// Nothing: one process.
    Single,
}

/// Everything a training run needs, resolved and validated.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Dataset directory.
    pub data_dir: PathBuf,
    /// Model output directory.
    pub model_dir: PathBuf,
    /// Checkpoint directory.
    pub checkpoint_dir: PathBuf,
    /// Whether rank 0 refuses to start without a checkpoint to resume from
    /// ([`TrainArgs::require_checkpoint`]).
    pub require_checkpoint: bool,
    /// Where to write the failure reason (SageMaker), if anywhere.
    pub failure_file: Option<PathBuf>,
    /// Hyperparameters.
    pub hp: Hyperparameters,
    /// Rendezvous of the ranks.
    pub rendezvous: Rendezvous,
    /// Which contract gave the topology.
    pub launcher: Launcher,
    /// Prometheus port.
    pub metrics_port: Option<u16>,
    /// Threads and model replicas of this process.
    pub parallelism: Parallelism,
}

/// The rule a `backend` of `nccl` breaks in a build without the `cuda` feature.
pub const NCCL_NEEDS_CUDA: &str =
    "gloo: this build has no CUDA support (nccl needs kfaws-trainer built with --features cuda, \
     on an NVIDIA GPU)";

/// Where errors say a `--hp` value came from: the flags, or `TRAINER_HYPERPARAMETERS` when no
/// `--hp` flag is given (clap reads the variable then); which of the two is not known here.
pub const HP_ORIGIN: &str = "--hp / TRAINER_HYPERPARAMETERS";

/// Default `MASTER_PORT` where no contract gives one: the port SageMaker's PyTorch toolkit uses.
pub const DEFAULT_MASTER_PORT: u16 = 7777;

/// A value of `hyperparameters.json` refused, shown as the user gave it to the estimator:
/// SageMaker's Python SDK JSON-encodes each hyperparameter (`json.dumps`), so `lr="abc"` arrives
/// as `"\"abc\""`, and the error would quote the quotes. A value that is no JSON string (a
/// number, or text written into the file by hand) is shown as it stands.
fn as_in_the_estimator(error: HyperparameterError) -> HyperparameterError {
    match error {
        HyperparameterError::Invalid {
            key,
            value,
            origin,
            rule,
        } => HyperparameterError::Invalid {
            key,
            value: match serde_json::from_str::<serde_json::Value>(&value) {
                Ok(serde_json::Value::String(decoded)) => decoded,
                _ => value,
            },
            origin,
            rule,
        },
        other => other,
    }
}

/// Resolves the run configuration from `args`, the SageMaker layout and the environment
/// (`env` looks a variable up; `std::env::var(..).ok()` outside tests).
///
/// # Errors
/// [`ConfigError`] naming the setting, its source and the rule it breaks.
pub fn resolve(
    args: &TrainArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RunConfig, ConfigError> {
    let sm = SageMakerLayout {
        root: args.sagemaker_root.clone(),
    };
    let on_sagemaker = sm.is_present();

    let mut hp = Hyperparameters::default();
    if on_sagemaker && sm.hyperparameters().is_file() {
        let text =
            std::fs::read_to_string(sm.hyperparameters()).map_err(|e| ConfigError::Json {
                path: sm.hyperparameters().display().to_string(),
                detail: e.to_string(),
            })?;
        hp.apply_sagemaker_json(&text, &sm.hyperparameters().display().to_string())
            .map_err(as_in_the_estimator)?;
    }
    let keys = args.hyperparameters.iter().map(|pair| {
        pair.split_once('=')
            .map_or(pair.as_str(), |(k, _)| k.trim())
    });
    if let Some((first, second)) = kfaws_trainer_contract::find_duplicate(keys) {
        return Err(HyperparameterError::Duplicate {
            first: first.to_string(),
            second: second.to_string(),
            origin: HP_ORIGIN.into(),
        }
        .into());
    }
    for pair in &args.hyperparameters {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| HyperparameterError::Invalid {
                key: pair.clone(),
                value: String::new(),
                origin: HP_ORIGIN.into(),
                rule: "written key=value".into(),
            })?;
        hp.set(key.trim(), value.trim(), HP_ORIGIN)?;
    }
    if hp.backend == "nccl" && !cfg!(feature = "cuda") {
        // Refused before anything is read or connected, naming where the value came from.
        let from_flags = args.hyperparameters.iter().any(|pair| {
            pair.split_once('=')
                .is_some_and(|(k, _)| k.trim().replace('_', "-") == "backend")
        });
        return Err(HyperparameterError::Invalid {
            key: "backend".into(),
            value: hp.backend.clone(),
            origin: if from_flags {
                HP_ORIGIN.into()
            } else {
                sm.hyperparameters().display().to_string()
            },
            rule: NCCL_NEEDS_CUDA.into(),
        }
        .into());
    }

    let (placement, launcher) = if on_sagemaker {
        let p = sm.placement()?;
        (
            env::Topology {
                rank: p.rank,
                world_size: p.world_size,
                master_addr: p.master,
                master_port: None,
            },
            Launcher::SageMaker,
        )
    } else if let Some((t, launcher)) = env::from_env(env)? {
        (t, launcher)
    } else {
        (
            env::Topology {
                rank: 0,
                world_size: 1,
                master_addr: "127.0.0.1".into(),
                master_port: None,
            },
            Launcher::Single,
        )
    };
    let flags_set = args.rank.is_some() || args.world_size.is_some();
    let rank = args.rank.unwrap_or(placement.rank);
    let world_size = args.world_size.unwrap_or(placement.world_size);
    if world_size == 0 || rank >= world_size {
        let source_name = if flags_set {
            "--rank/--world-size (TRAINER_RANK/TRAINER_WORLD_SIZE)".to_string()
        } else {
            format!("{launcher:?} topology")
        };
        let detail = if world_size == 0 {
            "the world size must be at least 1".to_string()
        } else {
            format!(
                "rank {rank} is not from 0 to {} (ranks count from 0; world size {world_size})",
                world_size - 1
            )
        };
        return Err(ConfigError::Contract {
            source_name,
            detail,
        });
    }
    let master_port = args
        .master_port
        .or(placement.master_port)
        .unwrap_or(DEFAULT_MASTER_PORT);
    // Port 0 binds whatever port the operating system picks, which the other ranks cannot
    // know: they would retry until `--connect-timeout-secs`, and rank 0 wait for them, a
    // transient failure (exit 130) that no retry mends. One process never listens.
    if master_port == 0 && world_size > 1 {
        let source_name = match (args.master_port, launcher) {
            (Some(_), _) => "--master-port (TRAINER_MASTER_PORT)",
            (None, Launcher::TrainerV2) => "PET_MASTER_PORT",
            (None, _) => "MASTER_PORT",
        };
        return Err(ConfigError::Contract {
            source_name: source_name.into(),
            detail: format!(
                "port 0 with world size {world_size}: rank 0 would listen on a port the \
                 operating system picks, which the other ranks cannot know; give the port \
                 rank 0 listens on (1 to 65535), the same on every rank"
            ),
        });
    }
    let rendezvous = Rendezvous {
        master_addr: args.master_addr.clone().unwrap_or(placement.master_addr),
        master_port,
        bind_addr: args.bind_addr.clone(),
        rank,
        world_size,
        connect_timeout: Duration::from_secs(args.connect_timeout_secs),
        collective_timeout: Duration::from_secs(args.collective_timeout_secs.max(1)),
        all_reduce: args.all_reduce,
    };

    let data_dir = match (&args.data_dir, on_sagemaker) {
        (Some(dir), _) => dir.clone(),
        (None, true) => sm.channel_dir(args.channel.as_deref())?,
        (None, false) => {
            return Err(ConfigError::Missing(
                "no dataset: pass --data-dir (TRAINER_DATA_DIR) or run under SageMaker".into(),
            ))
        }
    };
    let model_dir = args.model_dir.clone().unwrap_or_else(|| {
        if on_sagemaker {
            sm.model_dir()
        } else {
            PathBuf::from("model")
        }
    });
    let checkpoint_dir = args.checkpoint_dir.clone().unwrap_or_else(|| {
        if on_sagemaker {
            sm.checkpoint_dir()
        } else {
            model_dir.join("checkpoints")
        }
    });
    let parallelism = Parallelism::from_settings(
        args.threads,
        args.replicas,
        hp.batch_size,
        hp.backend == "gloo",
        env,
    )?;
    Ok(RunConfig {
        data_dir,
        model_dir,
        checkpoint_dir,
        require_checkpoint: args.require_checkpoint,
        failure_file: on_sagemaker.then(|| sm.failure_file()),
        hp,
        rendezvous,
        launcher: if flags_set { Launcher::Flags } else { launcher },
        metrics_port: args.metrics_port,
        parallelism,
    })
}

#[cfg(test)]
mod tests;
