//! `kfaws-trainer`: a data-parallel burn image classifier — the workload kfaws deploys — that
//! runs the same under Kubeflow PyTorchJob, SageMaker and on a laptop.
//!
//! - [`data`]: CIFAR-10 binary and (Fashion-)MNIST IDX readers, normalisation, augmentation,
//!   the distributed sampler;
//! - [`model`]: the reference network, with [`conv`] (its convolutions and their gradients)
//!   and [`pool`] (its fused ReLU + max-pool kernel);
//! - [`dist`]: our all-reduce over TCP;
//! - [`contract`]: flags, `TRAINER_*`, SageMaker and PyTorchJob configuration;
//! - [`train`]: the training loop, with [`replicas`] (the batch split across threads),
//!   [`optim`], [`params`], [`checkpoint`], [`metrics`] and [`prometheus`];
//! - [`serve`]: the SageMaker inference contract.

pub mod checkpoint;
pub mod contract;
pub mod conv;
pub mod data;
pub mod dist;
pub mod error;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod params;
pub mod pool;
pub mod prometheus;
pub mod replicas;
pub mod serve;
pub mod train;

/// `kfaws-trainer --version`: the package version and the collective
/// backends this build trains with, e.g. `0.1.0 (backends: gloo)`, or
/// `0.1.0 (backends: gloo nccl)` for a build with the `cuda` feature. kfaws
/// reads it to refuse `--backend nccl` with a CPU build before starting
/// any rank.
pub const VERSION: &str = if cfg!(feature = "cuda") {
    concat!(env!("CARGO_PKG_VERSION"), " (backends: gloo nccl)")
} else {
    concat!(env!("CARGO_PKG_VERSION"), " (backends: gloo)")
};

/// File name of the trained model (burn's burnpack record) in the model directory.
pub const MODEL_FILE: &str = "model.bpk";
/// File name of the model's description in the model directory.
pub const MODEL_INFO_FILE: &str = "model.json";

/// `model.json`: what a server needs to use the model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelInfo {
    /// Dataset the model was trained on.
    pub dataset: data::DatasetKind,
    /// Class names in output order.
    pub classes: Vec<String>,
    /// Input `[C, H, W]`.
    pub input_shape: [usize; 3],
    /// Per-channel mean of the normalisation, pixels scaled to `[0, 1]`.
    pub mean: Vec<f32>,
    /// Per-channel standard deviation of the normalisation.
    pub std: Vec<f32>,
    /// Test accuracy after the last epoch.
    pub test_accuracy: Option<f64>,
    /// Test loss after the last epoch.
    pub test_loss: Option<f64>,
    /// Epochs trained.
    pub epochs: u64,
    /// Number of parameters.
    pub parameters: usize,
}
