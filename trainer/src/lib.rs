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

/// Why a `model.json` cannot describe the model beside it: each variant names `model.json`,
/// the field and the rule it breaks.
#[derive(Debug, thiserror::Error)]
pub enum ModelInfoError {
    /// The file is not JSON of [`ModelInfo`]'s shape (a field missing or of the wrong type).
    #[error("model.json does not parse: {0}")]
    Json(#[from] serde_json::Error),
    /// A field breaks a rule, on its own, against another field, or against `model.bpk`.
    #[error("model.json: `{field}` {rule}")]
    Field {
        /// The field of `model.json`: `classes`, `input_shape`, `mean` or `std`.
        field: &'static str,
        /// What it holds and the rule it breaks.
        rule: String,
    },
}

/// The most channels a `model.json`'s `input_shape` may have ([`ModelInfo::check`]).
pub const MAX_INPUT_CHANNELS: usize = 4;
/// The largest height and width a `model.json`'s `input_shape` may have
/// ([`ModelInfo::check`]): a first linear layer of 16 × 61 × 61 inputs (7 M weights, 28 MB).
pub const MAX_INPUT_SIDE: usize = 256;

fn field_error(field: &'static str, rule: String) -> ModelInfoError {
    ModelInfoError::Field { field, rule }
}

impl ModelInfo {
    /// The description of a model of `parameters` parameters for `dataset`: its classes, input
    /// shape and normalisation, which the dataset fixes; no test figures, 0 epochs (set them
    /// once trained).
    pub fn for_dataset(dataset: data::DatasetKind, parameters: usize) -> Self {
        let (mean, std) = dataset.normalisation();
        Self {
            dataset,
            classes: dataset.classes().iter().map(|c| c.to_string()).collect(),
            input_shape: dataset.shape(),
            mean,
            std,
            test_accuracy: None,
            test_loss: None,
            epochs: 0,
            parameters,
        }
    }

    /// Parses `model.json` and checks it against itself ([`ModelInfo::check`]).
    ///
    /// # Errors
    /// [`ModelInfoError::Json`] when it does not parse, [`ModelInfoError::Field`] as
    /// [`ModelInfo::check`].
    pub fn from_json(text: &str) -> Result<Self, ModelInfoError> {
        let info: Self = serde_json::from_str(text)?;
        info.check()?;
        Ok(info)
    }

    /// Checks the fields against each other and against the network of [`model::Net`]:
    /// `classes` is not empty; `input_shape` is `[C, H, W]` with at least one channel and a
    /// size the network takes (at least 16×16 pixels, two 5×5 convolutions and two 2×2 pools:
    /// [`model::flat_features`]); `mean` and `std` hold one value per channel, every mean is
    /// finite and every standard deviation finite and above 0 (pixels are divided by it).
    ///
    /// # Errors
    /// [`ModelInfoError::Field`] naming the first field that breaks its rule.
    pub fn check(&self) -> Result<(), ModelInfoError> {
        if self.classes.is_empty() {
            return Err(field_error(
                "classes",
                "is empty; it must name one class per output of the model".into(),
            ));
        }
        let [channels, height, width] = self.input_shape;
        if channels == 0 {
            return Err(field_error(
                "input_shape",
                format!("{:?} has 0 channels; it is [channels, height, width] with at least one channel", self.input_shape),
            ));
        }
        if model::flat_features(self.input_shape).is_none() {
            return Err(field_error(
                "input_shape",
                format!(
                    "{:?} is {height}×{width} pixels; the network takes at least 16×16 \
                     (two 5×5 convolutions and two 2×2 pools)",
                    self.input_shape
                ),
            ));
        }
        // Checked before the network is built for it: a typo such as [3, 3200, 3200] would
        // first allocate a first linear layer of about 1.2 G weights.
        if channels > MAX_INPUT_CHANNELS || height > MAX_INPUT_SIDE || width > MAX_INPUT_SIDE {
            return Err(field_error(
                "input_shape",
                format!(
                    "{:?} is larger than any model this trainer writes (at most \
                     {MAX_INPUT_CHANNELS} channels of {MAX_INPUT_SIDE}×{MAX_INPUT_SIDE}; its \
                     datasets are 1×28×28 and 3×32×32)",
                    self.input_shape
                ),
            ));
        }
        for (field, values) in [("mean", &self.mean), ("std", &self.std)] {
            if values.len() != channels {
                return Err(field_error(
                    field,
                    format!(
                        "has {} values; it must have one per channel of `input_shape` {:?} ({channels})",
                        values.len(),
                        self.input_shape
                    ),
                ));
            }
        }
        if let Some(m) = self.mean.iter().find(|m| !m.is_finite()) {
            return Err(field_error(
                "mean",
                format!("holds {m}; every mean must be finite"),
            ));
        }
        if let Some(s) = self.std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(field_error(
                "std",
                format!("holds {s}; every standard deviation must be finite and above 0"),
            ));
        }
        Ok(())
    }

    /// Checks the fields against the loaded network `net` (from `model.bpk`): as many
    /// `classes` as the network has outputs. (`input_shape` is checked by loading the record
    /// into a network built for it: burn refuses tensors of other shapes.)
    ///
    /// # Errors
    /// [`ModelInfoError::Field`] naming `classes`.
    pub fn check_against(&self, net: &model::Net) -> Result<(), ModelInfoError> {
        let outputs = net.outputs();
        if self.classes.len() != outputs {
            return Err(field_error(
                "classes",
                format!(
                    "has {} entries; the model (model.bpk) has {outputs} outputs, one class each",
                    self.classes.len()
                ),
            ));
        }
        Ok(())
    }
}
