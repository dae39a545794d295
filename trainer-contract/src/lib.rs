//! What `kfaws` and `kfaws-trainer` agree on, in a crate with neither burn nor the AWS SDK so
//! both can depend on it: the trainer's hyperparameters (names, value rules, defaults) and the
//! datasets it knows by name, and the checkpoint file names ([`checkpoint`]).
//!
//! The trainer parses its hyperparameters with [`Hyperparameters`]; `kfaws train` runs the same
//! parser over the hyperparameters it is about to send, so a misspelt name or a value out of
//! range is refused before a job is created rather than minutes later inside it.

pub mod checkpoint;
mod dataset;
mod hyperparameters;

pub use dataset::DatasetKind;
pub use hyperparameters::{
    find_duplicate, help as hyperparameters_help, quoted, HyperparameterError, Hyperparameters,
    KNOWN,
};
