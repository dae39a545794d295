//! The trainer's failures and the exit code each maps to.
//!
//! Kubeflow's PyTorchJob `restartPolicy: ExitCode` treats exit codes 1–127 as permanent and
//! 128–255 as retryable (training-operator docs, "Restart policy"); SageMaker reports any
//! non-zero exit as a failed job with the text of `/opt/ml/output/failure`.

use crate::checkpoint::CheckpointError;
use crate::contract::ConfigError;
use crate::data::DataError;
use crate::dist::CommError;

/// Exit code of a configuration error: retrying cannot help.
pub const EXIT_CONFIG: i32 = 1;
/// Exit code of a transient failure (a peer died or hung, I/O failed): retrying may help.
pub const EXIT_TRANSIENT: i32 = 130;
/// Exit code after SIGTERM or SIGINT (128 + 15, SIGTERM's), once the checkpoint is written:
/// retryable.
pub const EXIT_TERMINATED: i32 = 143;

/// Why training stopped early.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// Bad flags, hyperparameters or contract files.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The dataset is missing or malformed.
    #[error(transparent)]
    Data(#[from] DataError),
    /// A collective failed.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// Checkpoint I/O.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Writing the model failed.
    #[error("writing the model to {path}: {detail}")]
    ModelOutput {
        /// The model directory written to (the run configuration's `model_dir`).
        path: String,
        /// The error creating it, or writing the model record or `model.json` into it.
        detail: String,
        /// Whether retrying cannot help ([`io_is_permanent`]): the directory is a file, or
        /// may not be written.
        permanent: bool,
    },
    /// Rank 0 cannot write into its checkpoint or model directory, found before the first step
    /// (the trainer creates and removes a file in each).
    #[error("cannot write into the {what} directory {}: {source}", .path.display())]
    OutputDir {
        /// `checkpoint` or `model`.
        what: &'static str,
        /// The directory (the run configuration's `checkpoint_dir` or `model_dir`).
        path: std::path::PathBuf,
        /// The error creating the directory or the file in it.
        source: std::io::Error,
    },
    /// The newest checkpoint resumes `epoch` at `step`, past the `steps` this configuration has
    /// per epoch: it was written with another training split (dataset, `max-train-samples`),
    /// or, in a format before the batch size and world size were recorded (which
    /// [`CheckpointError::OtherSampling`] names), with another of those.
    #[error(
        "the newest checkpoint resumes epoch {epoch} at step {step}, but this configuration has {steps} steps per epoch: batch-size, world size or the dataset changed since it was written; train with the settings it was written with, or start from an empty checkpoint directory"
    )]
    CheckpointMismatch {
        /// The epoch the checkpoint resumes, counted from 1.
        epoch: u64,
        /// Steps of that epoch the checkpoint has done.
        step: u64,
        /// Steps per epoch of this configuration: this rank's share of the training split
        /// divided by the batch size, rounded up.
        steps: u64,
    },
    /// The epoch's mean training loss is not finite: the parameters are NaN or infinite, and
    /// nothing after this point would be worth keeping. Nothing is checkpointed or written.
    #[error(
        "training diverged in epoch {epoch}: mean training loss {loss}; lower the learning rate (lr) or raise batch-size"
    )]
    Diverged {
        /// The epoch, counted from 1.
        epoch: u64,
        /// Mean cross-entropy per training example over all ranks (NaN or infinite).
        loss: f64,
    },
    /// SIGTERM or SIGINT arrived (on any rank); all ranks stopped before the same step and
    /// rank 0 writes the checkpoint of `epoch`/`step`.
    #[error(
        "stopped by SIGTERM or SIGINT before epoch {epoch} step {step}; {}",
        match written {
            true => "rank 0 wrote the checkpoint, the job can resume from it",
            false => "rank 0 is writing the checkpoint, which the job can resume from",
        }
    )]
    Terminated {
        /// The epoch stopped in, counted from 1.
        epoch: u64,
        /// Steps of that epoch done: the checkpoint's, and the one training resumes at.
        step: u64,
        /// Whether this rank wrote the checkpoint: rank 0, once it is saved. A worker stops
        /// without waiting for rank 0's save, which may still be under way (or fail).
        written: bool,
    },
}

/// Whether an I/O error of the checkpoint or model directory is one a retry meets again: a
/// path that is a file where a directory is wanted (or the reverse), or that may not be
/// written (permissions, a read-only file system), i.e. a misconfigured directory. A full
/// disk, a network file system's hiccup and the rest may pass.
pub fn io_is_permanent(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        kind,
        K::NotADirectory
            | K::IsADirectory
            | K::AlreadyExists
            | K::PermissionDenied
            | K::ReadOnlyFilesystem
            | K::InvalidFilename
            | K::InvalidInput
    )
}

impl TrainError {
    /// The process exit code for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Config(_) | Self::Data(_) => EXIT_CONFIG,
            Self::CheckpointMismatch { .. } | Self::Diverged { .. } => EXIT_CONFIG,
            Self::Checkpoint(CheckpointError::Io { source, .. })
                if io_is_permanent(source.kind()) =>
            {
                EXIT_CONFIG
            }
            Self::ModelOutput {
                permanent: true, ..
            } => EXIT_CONFIG,
            // Before any training: a directory that cannot even be made (NotFound, where its
            // parents are made first: a file system that refuses it, such as /proc) is as
            // permanent as one that may not be written.
            Self::OutputDir { source, .. }
                if io_is_permanent(source.kind())
                    || source.kind() == std::io::ErrorKind::NotFound =>
            {
                EXIT_CONFIG
            }
            Self::Checkpoint(
                CheckpointError::WrongModel { .. }
                | CheckpointError::WrongDataset { .. }
                | CheckpointError::OtherSampling { .. }
                | CheckpointError::NewerFormat { .. }
                | CheckpointError::Missing { .. },
            ) => EXIT_CONFIG,
            Self::Comm(e) if !e.is_transient() => EXIT_CONFIG,
            Self::Comm(_)
            | Self::Checkpoint(_)
            | Self::ModelOutput { .. }
            | Self::OutputDir { .. } => EXIT_TRANSIENT,
            Self::Terminated { .. } => EXIT_TERMINATED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_or_model_directory_that_cannot_be_one_exits_1_other_io_130() {
        let io = |kind: std::io::ErrorKind| {
            TrainError::from(CheckpointError::Io {
                path: "ckpt".into(),
                source: std::io::Error::from(kind),
            })
        };
        assert_eq!(io(std::io::ErrorKind::NotADirectory).exit_code(), 1);
        assert_eq!(io(std::io::ErrorKind::PermissionDenied).exit_code(), 1);
        assert_eq!(io(std::io::ErrorKind::StorageFull).exit_code(), 130);
        let model = |permanent| TrainError::ModelOutput {
            path: "model".into(),
            detail: "File exists".into(),
            permanent,
        };
        assert_eq!(model(true).exit_code(), 1);
        assert_eq!(model(false).exit_code(), 130);
        // Found before training: one that cannot be made is permanent too.
        let unwritable = |kind: std::io::ErrorKind| TrainError::OutputDir {
            what: "checkpoint",
            path: "ckpt".into(),
            source: std::io::Error::from(kind),
        };
        assert_eq!(unwritable(std::io::ErrorKind::NotFound).exit_code(), 1);
        assert_eq!(
            unwritable(std::io::ErrorKind::ReadOnlyFilesystem).exit_code(),
            1
        );
        assert_eq!(unwritable(std::io::ErrorKind::StorageFull).exit_code(), 130);
    }

    #[test]
    fn configuration_errors_exit_1_and_transient_ones_130_plus() {
        let config = TrainError::from(ConfigError::Missing("x".into()));
        assert_eq!(config.exit_code(), 1);
        let mismatch = TrainError::from(CommError::Mismatch("hash".into()));
        assert_eq!(mismatch.exit_code(), 1);
        let dead = TrainError::from(CommError::PeerClosed { rank: 1 });
        assert!(dead.exit_code() >= 130);
        for written in [true, false] {
            let stopped = TrainError::Terminated {
                epoch: 1,
                step: 2,
                written,
            };
            assert_eq!(stopped.exit_code(), 143);
        }
        let diverged = TrainError::Diverged {
            epoch: 1,
            loss: f64::NAN,
        };
        assert_eq!(diverged.exit_code(), 1);
    }

    /// Only the rank that saved the checkpoint says it was written: a worker stops while rank
    /// 0 may still be writing it.
    #[test]
    fn a_worker_stopped_does_not_claim_the_checkpoint_is_written() {
        let stopped = |written| {
            TrainError::Terminated {
                epoch: 2,
                step: 7,
                written,
            }
            .to_string()
        };
        assert_eq!(
            stopped(true),
            "stopped by SIGTERM or SIGINT before epoch 2 step 7; rank 0 wrote the checkpoint, \
             the job can resume from it"
        );
        let worker = stopped(false);
        assert!(
            worker.contains("rank 0 is writing the checkpoint") && !worker.contains("wrote"),
            "{worker}"
        );
    }
}
