//! What `kfaws` and `kfaws-trainer` agree on, in a crate with neither burn nor the AWS SDK so
//! both can depend on it: the trainer's hyperparameters (names, value rules, defaults) and the
//! datasets it knows by name, and the checkpoint file names ([`checkpoint`]).
//!
//! The trainer parses its hyperparameters with [`Hyperparameters`]; `kfaws train` runs the same
//! parser over the hyperparameters it is about to send, so a misspelt name or a value out of
//! range is refused before a job is created rather than minutes later inside it.

/// The longest timeout or grace the trainer takes, in seconds (28 days: SageMaker's longest
/// `MaxRuntimeInSeconds`, so no job can outlive it): `TRAINER_CONNECT_TIMEOUT`,
/// `TRAINER_COLLECTIVE_TIMEOUT` and `TRAINER_STOP_GRACE` are refused above it, which also
/// keeps the trainer's deadline arithmetic (`Instant + timeout`, `timeout * 2`) in range.
pub const MAX_TIMEOUT_SECS: u64 = 28 * 24 * 3600;

/// The trainer's default stop grace (`TRAINER_STOP_GRACE`), in seconds: how long after SIGTERM
/// a rank still blocked waiting for its peers has before it exits 143. kfaws gives its local
/// ranks and its PyTorchJob replicas more than this before SIGKILL.
pub const STOP_GRACE_SECS: u64 = 30;

/// The most threads (and so model replicas) one trainer process takes: 1,024, above the
/// vCPUs of any one instance SageMaker or EKS offers (448 for the largest `u7i`); a pool far
/// above the CPUs only thrashes (100,000 threads turned a one-second job into minutes).
pub const MAX_THREADS: usize = 1024;

pub mod checkpoint;
mod dataset;
mod hyperparameters;
mod json;

pub use dataset::DatasetKind;
pub use hyperparameters::{
    find_duplicate, help as hyperparameters_help, quoted, HyperparameterError, Hyperparameters,
    KNOWN,
};
pub use json::json_error;
