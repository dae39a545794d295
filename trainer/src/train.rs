//! The data-parallel training loop: per step, forward and backward on this rank's batch,
//! average the flat gradients across ranks, take an SGD step; per epoch, evaluate, report,
//! checkpoint.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::checkpoint::{Checkpoint, CheckpointError, Sampling};
use crate::contract::{ConfigError, HyperparameterError, RunConfig};
use crate::data::{self, Dataset, DistributedSampler, Split};
use crate::dist::{Agreement, Communicator};
use crate::error::TrainError;
use crate::metrics::{EpochMetrics, Tally};
use crate::model::Net;
use crate::optim::Sgd;
use crate::params::{flatten_grads, flatten_params, load_flat_params};
use crate::replicas::split_sizes;
use rayon::prelude::*;

/// What a finished run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Metrics of every epoch run by this process.
    pub epochs: Vec<EpochMetrics>,
    /// Final flat parameters (identical on every rank).
    pub params: Vec<f32>,
    /// Set when no epoch was left to run (resumed from the checkpoint written after the last
    /// one): the checkpointed model's test figures, as written to `model.json`.
    pub evaluated: Option<ModelSummary>,
}

/// What [`train`] reports while it runs, to its `on_progress`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Progress {
    /// Resumed from a checkpoint, reported once before any step: `completed_epoch` is the last
    /// epoch the checkpoint had finished (the one before the epoch it resumes in; 0 for a
    /// checkpoint written in epoch 1). A checkpoint records no metrics, so none come with it.
    Resumed {
        /// Last completed epoch, counted from 1.
        completed_epoch: u64,
    },
    /// An epoch ended: its figures, all-reduced (the same on every rank).
    Epoch(EpochMetrics),
}

/// The compute device for the `backend` hyperparameter: `gloo` → burn's flex CPU backend,
/// `nccl` → CUDA device 0 (only with the `cuda` feature).
///
/// # Errors
/// [`ConfigError::Hyperparameter`] for `nccl` in a build without CUDA.
pub fn device_for(backend: &str) -> Result<Device, ConfigError> {
    match backend {
        #[cfg(feature = "cuda")]
        "nccl" => cuda_device(),
        "gloo" => Ok(Device::flex()),
        other => Err(ConfigError::Hyperparameter(HyperparameterError::Invalid {
            key: "backend".into(),
            value: other.into(),
            origin: "the run configuration".into(),
            rule: crate::contract::NCCL_NEEDS_CUDA.into(),
        })),
    }
}

/// CUDA device 0, once the NVIDIA driver library (`libcuda.so.1`, from the driver, not the
/// toolkit) loads and `cuDeviceGetCount` sees a device. Without this check burn's CUDA runtime
/// panics in its own thread on a machine without either, and the trainer exits 101 with a
/// backtrace instead of a configuration error (exit 1, not retried by the `ExitCode` policy).
///
/// # Errors
/// [`ConfigError::Device`] naming what is missing.
#[cfg(feature = "cuda")]
fn cuda_device() -> Result<Device, ConfigError> {
    let error = |detail: String| ConfigError::Device {
        backend: "nccl".into(),
        detail,
    };
    // SAFETY: only dlopen()s the driver library by its usual names and closes it again.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(error(
            "the NVIDIA driver library libcuda.so.1 is not on this machine (a GPU node has it; \
             in a container the NVIDIA container runtime mounts it: on Kubernetes request \
             nvidia.com/gpu, on SageMaker use a GPU instance type)"
                .into(),
        ));
    }
    let count = cudarc::driver::result::init()
        .and_then(|()| cudarc::driver::result::device::get_count())
        .map_err(|e| error(format!("the NVIDIA driver does not start: {e:?}")))?;
    if count < 1 {
        return Err(error("the NVIDIA driver sees no CUDA device".into()));
    }
    Ok(Device::cuda(0))
}

/// Loads the dataset of `config`, trimmed to `max-train-samples`.
///
/// # Errors
/// [`TrainError::Data`].
pub fn load_dataset(config: &RunConfig) -> Result<Dataset, TrainError> {
    let mut dataset = data::load_dir(&config.data_dir, config.hp.dataset)?;
    if let Some(n) = config.hp.max_train_samples {
        if n > dataset.train.len() {
            tracing::warn!(
                max_train_samples = n,
                train = dataset.train.len(),
                "max-train-samples is more than the training split holds: all of it is used"
            );
        }
        dataset.train.truncate(n);
    }
    Ok(dataset)
}

/// Set once every rank has joined ([`Communicator::connect`] returned): before that a stop
/// signal has nothing to wait for (no step to finish, no checkpoint to write), so the
/// binary's stop watchdog exits at once instead of after its grace.
pub static RENDEZVOUS_DONE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Everything the ranks must share, as the JSON object the handshake compares
/// ([`crate::dist::Agreement::config`]): hyperparameters, dataset kind and sizes, world size.
pub fn shared_config(config: &RunConfig, dataset: &Dataset) -> String {
    // Through text, not `json!`: a `serde_json::Value` widens an f32 to f64 (lr 0.01 becomes
    // 0.009999999776482582, which a handshake mismatch would then show), while the text writer
    // prints the shortest form that reads back as the same f32, and that text reads back into
    // a Value as the f64 that prints the same.
    let hyperparameters: serde_json::Value = serde_json::to_string(&config.hp)
        .and_then(|text| serde_json::from_str(&text))
        .expect("hyperparameters (numbers and strings) always serialise");
    serde_json::json!({
        "hyperparameters": hyperparameters,
        "dataset": dataset.kind,
        "train_examples": dataset.train.len(),
        "test_examples": dataset.test.len(),
        "world_size": config.rendezvous.world_size,
    })
    .to_string()
}

/// Trains on `dataset` as rank `config.rendezvous.rank`, calling `on_progress` with
/// [`Progress::Resumed`] after resuming from a checkpoint and with each epoch's metrics
/// ([`Progress::Epoch`]); rank 0 checkpoints every epoch into `config.checkpoint_dir` and
/// resumes from the newest checkpoint there. `stop` (set by SIGTERM or SIGINT) is this rank's wish to stop:
/// it is all-reduced with every step's gradients, and after the step where any rank wished it,
/// every rank stops (rank 0 checkpointing first), so no rank leaves a collective the others
/// are still in.
///
/// # Errors
/// [`TrainError`]: a peer failing, a checkpoint unusable, or [`TrainError::Terminated`].
pub fn train(
    config: &RunConfig,
    dataset: &Dataset,
    stop: &AtomicBool,
    on_progress: impl FnMut(Progress),
) -> Result<Outcome, TrainError> {
    let hp = &config.hp;
    let device = device_for(&hp.backend)?;
    let train_device = device.clone().autodiff();
    train_device.seed(hp.seed);
    let model = Net::new(dataset.kind.shape(), &train_device);
    let agreement = Agreement {
        param_count: model.num_params() as u64,
        config: shared_config(config, dataset),
    };
    let mut comm = Communicator::connect(&config.rendezvous, &agreement)?;
    RENDEZVOUS_DONE.store(true, std::sync::atomic::Ordering::SeqCst);
    let result = train_connected(
        config,
        dataset,
        stop,
        on_progress,
        &mut comm,
        model,
        &device,
    );
    if let Err(err) = &result {
        // A failure of rank 0's own (its checkpoint directory, or a checkpoint it read that this
        // run cannot resume): the workers, waiting in the next collective, learn why instead of
        // seeing a closed connection. After the last collective (the checkpoint after the last
        // epoch, the model) they are done and gone; the job fails on rank 0's exit code. Collective failures have told them already; a
        // stop and the whole-job verdicts (divergence, a resumed step past the epoch's end) are
        // reached by every rank alike.
        if matches!(
            err,
            TrainError::Checkpoint(_)
                | TrainError::ModelOutput { .. }
                | TrainError::OutputDir { .. }
        ) {
            comm.abort(
                &err.to_string(),
                err.exit_code() == crate::error::EXIT_CONFIG,
            );
        }
    }
    result
}

/// [`train`] once every rank has joined.
fn train_connected(
    config: &RunConfig,
    dataset: &Dataset,
    stop: &AtomicBool,
    mut on_progress: impl FnMut(Progress),
    comm: &mut Communicator,
    model: Net,
    device: &Device,
) -> Result<Outcome, TrainError> {
    let hp = &config.hp;
    let train_device = device.clone().autodiff();
    let rank = comm.rank();
    let world_size = comm.world_size();

    let sampling = Sampling {
        batch_size: hp.batch_size as u64,
        world_size: world_size as u64,
        seed: hp.seed,
        train_examples: dataset.train.len() as u64,
    };
    let (start, params, sgd) = initial_state(comm, &model, config, dataset.kind, sampling)?;
    if (start.epoch, start.step) != (1, 0) {
        on_progress(Progress::Resumed {
            completed_epoch: start.epoch.saturating_sub(1),
        });
    }
    let mut learner = Learner::new(
        model,
        params,
        sgd,
        &train_device,
        config.parallelism.replicas,
    );
    let sampler = DistributedSampler::new(dataset.train.len(), world_size, rank, hp.seed);
    if let Some(warning) = oversized_batch(hp.batch_size, dataset.train.len(), world_size) {
        tracing::warn!("{warning}");
    }
    let mut outcome = Outcome {
        epochs: Vec::new(),
        params: Vec::new(),
        evaluated: None,
    };

    let mut stopping = false;
    for epoch in start.epoch..=hp.epochs {
        let indices = sampler.indices(epoch);
        let batches: Vec<&[usize]> = indices.chunks(hp.batch_size).collect();
        let first_step = if epoch == start.epoch {
            start.step as usize
        } else {
            0
        };
        if first_step > 0 && first_step >= batches.len() {
            return Err(TrainError::CheckpointMismatch {
                epoch,
                step: start.step,
                steps: batches.len() as u64,
            });
        }
        let augment = dataset.kind.augments().then_some((hp.seed, epoch));
        let mut tally = Tally::default();
        let started = Instant::now();
        for (step, batch_indices) in batches.iter().enumerate().skip(first_step) {
            // Agreed in the previous step's all-reduce, so every rank stops here, at the same
            // step, and rank 0's checkpoint is not cut short by a peer that left first.
            if stopping {
                if rank == 0 {
                    let checkpoint = learner.checkpoint(epoch, step as u64, dataset.kind, sampling);
                    let path = checkpoint.save(&config.checkpoint_dir)?;
                    tracing::warn!(path = %path.display(), "stopping: checkpoint written");
                }
                // Workers do not wait for rank 0's save, which may still be under way.
                return Err(TrainError::Terminated {
                    epoch,
                    step: step as u64,
                    written: rank == 0,
                });
            }
            let batch = data::make_batch(&dataset.train, dataset.kind, batch_indices, augment);
            let n = batch.labels.len();
            let StepOutcome {
                loss,
                correct,
                stop: any_rank_stops,
            } = learner.step(batch, comm, stop.load(Ordering::SeqCst))?;
            stopping = any_rank_stops;
            tally.add(loss, correct, n);
            if rank == 0 && hp.log_interval > 0 && (step as u64 + 1).is_multiple_of(hp.log_interval)
            {
                tracing::info!(
                    epoch,
                    step = step + 1,
                    steps = batches.len(),
                    loss,
                    "training (rank 0's batch loss)"
                );
            }
        }
        let train_secs = started.elapsed().as_secs_f64();
        let mut train_sums = tally.to_vec();
        comm.all_reduce_sum(&mut train_sums)?;
        let train = Tally::from_slice(&train_sums);
        let test = evaluate_test_split(&learner.model, dataset, hp.test_batch_size, device, comm)?;
        let ((train_loss, train_acc), (test_loss, test_acc)) = (train.means(), test.means());
        // Every rank holds the same all-reduced loss, so all of them stop here together.
        if !train_loss.is_finite() {
            return Err(TrainError::Diverged {
                epoch,
                loss: train_loss,
            });
        }
        let metrics = EpochMetrics {
            epoch,
            train_loss,
            train_acc,
            test_loss,
            test_acc,
            images_per_sec: train.count / train_secs.max(1e-9),
        };
        on_progress(Progress::Epoch(metrics));
        outcome.epochs.push(metrics);
        if rank == 0 {
            learner
                .checkpoint(epoch + 1, 0, dataset.kind, sampling)
                .save(&config.checkpoint_dir)?;
        }
    }
    let summary = match outcome.epochs.last() {
        Some(last) => ModelSummary {
            epochs: last.epoch,
            test_loss: last.test_loss,
            test_acc: last.test_acc,
        },
        // Restarted after the last epoch (a retried SageMaker job, a restarted pod): nothing is
        // left to train, so model.json gets the checkpointed model's own test figures.
        None => {
            // A warning, not news: a run started in the directory of a finished one (with other
            // hyperparameters, say) trains nothing, which its user may not expect.
            if rank == 0 {
                tracing::warn!(
                    epochs = hp.epochs,
                    checkpoint_dir = %config.checkpoint_dir.display(),
                    "every epoch is already done according to the checkpoint: nothing is trained, the \
                     checkpointed model is evaluated and written again. To train afresh, give another \
                     model or checkpoint directory, or remove its checkpoints"
                );
            }
            let test =
                evaluate_test_split(&learner.model, dataset, hp.test_batch_size, device, comm)?;
            let (test_loss, test_acc) = test.means();
            let summary = ModelSummary {
                epochs: start.epoch.saturating_sub(1),
                test_loss,
                test_acc,
            };
            outcome.evaluated = Some(summary);
            summary
        }
    };
    if rank == 0 {
        write_model(&learner.model, dataset, Some(&summary), &config.model_dir)?;
    }
    outcome.params = learner.params;
    Ok(outcome)
}

/// The model, its flat parameters and the optimiser: one data-parallel step at a time, the
/// batch split across the process's model replicas ([`crate::replicas`]).
#[derive(Debug)]
pub struct Learner {
    /// The network, on an autodiff device, holding `params` (replica 0).
    pub model: Net,
    /// Flat parameters, identical on every rank.
    pub params: Vec<f32>,
    /// The optimiser and its momentum.
    pub sgd: Sgd,
    loss_fn: CrossEntropyLoss,
    device: Device,
    /// Networks of replicas 1.., holding `params` like `model`.
    replica_models: Vec<Net>,
}

/// One replica's share of a step: how many images it had, flat gradients of their mean loss,
/// that loss, and how many it classified correctly.
/// What [`Learner::step`] reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepOutcome {
    /// The batch's mean loss (this rank's batch, before the step).
    pub loss: f64,
    /// How many of this rank's batch it classified correctly (before the step).
    pub correct: usize,
    /// Whether any rank asked to stop: the same on every rank.
    pub stop: bool,
}

struct Share {
    images: usize,
    grads: Vec<f32>,
    loss: f64,
    correct: usize,
}

impl Learner {
    /// A learner for `model` (on the autodiff `device`) starting from `params`, splitting
    /// each batch across `replicas` model replicas (≥ 1) that run as tasks of the current rayon
    /// pool (the global one unless called inside another).
    pub fn new(model: Net, params: Vec<f32>, sgd: Sgd, device: &Device, replicas: usize) -> Self {
        let model = load_flat_params(model, &params);
        let loss_fn = CrossEntropyLossConfig::new().init(device);
        let replica_models = (1..replicas.max(1))
            .map(|_| load_flat_params(model.clone(), &params))
            .collect();
        Self {
            model,
            params,
            sgd,
            loss_fn,
            device: device.clone(),
            replica_models,
        }
    }

    /// Forward and backward on this rank's `batch` (split across the replicas), gradients
    /// averaged over `comm`, one SGD step. `stop` is this rank's wish to stop (a signal came);
    /// it rides on the gradient all-reduce as one extra value, so the returned
    /// [`StepOutcome::stop`] (whether any rank wished it) is the same on every rank and all
    /// of them stop after the same step.
    ///
    /// # Errors
    /// The all-reduce's failure, as [`TrainError::Comm`].
    pub fn step(
        &mut self,
        batch: data::Batch,
        comm: &mut Communicator,
        stop: bool,
    ) -> Result<StepOutcome, TrainError> {
        let n = batch.labels.len();
        let [_, c, h, w] = batch.shape;
        let image_len = c * h * w;
        let mut start = 0;
        let shares: Vec<(&Net, &[f32], &[i64])> = std::iter::once(&self.model)
            .chain(&self.replica_models)
            .zip(split_sizes(n, self.replica_models.len() + 1))
            .filter(|&(_, size)| size > 0)
            .map(|(model, size)| {
                let (from, to) = (start, start + size);
                start = to;
                (
                    model,
                    &batch.images[from * image_len..to * image_len],
                    &batch.labels[from..to],
                )
            })
            .collect();
        let (loss_fn, device) = (&self.loss_fn, &self.device);
        let run = |(model, images, labels): (&Net, &[f32], &[i64])| {
            replica_step(model, loss_fn, device, images, labels, [c, h, w])
        };
        // One rayon task per replica: each mostly runs its share's operations on one thread,
        // while the operations' own parallel loops let idle threads help (work stealing).
        let results: Vec<Share> = if shares.len() == 1 {
            shares.into_iter().map(run).collect()
        } else {
            shares.into_par_iter().map(run).collect()
        };
        // Σₖ (nₖ/n)·gₖ in replica order: the gradient of the whole batch's mean loss.
        // One more slot for the stop wish pushed below: no reallocation of ~62k floats per step.
        let mut grads = Vec::with_capacity(self.params.len() + 1);
        grads.resize(self.params.len(), 0.0f32);
        let (mut loss, mut correct) = (0.0f64, 0);
        for share in &results {
            let weight = share.images as f32 / n as f32;
            grads
                .iter_mut()
                .zip(&share.grads)
                .for_each(|(g, s)| *g += weight * s);
            loss += f64::from(weight) * share.loss;
            correct += share.correct;
        }
        grads.push(if stop { 1.0 } else { 0.0 });
        comm.all_reduce_mean(&mut grads)?;
        let stop = grads.pop().is_some_and(|wishes| wishes > 0.0);
        self.sgd.step(&mut self.params, &grads);
        self.model = load_flat_params(self.model.clone(), &self.params);
        for model in &mut self.replica_models {
            *model = load_flat_params(model.clone(), &self.params);
        }
        Ok(StepOutcome {
            loss,
            correct,
            stop,
        })
    }

    /// A checkpoint of the current state, positioned at `epoch`/`step` (steps counted under
    /// `sampling`), of training on `dataset`.
    pub fn checkpoint(
        &self,
        epoch: u64,
        step: u64,
        dataset: data::DatasetKind,
        sampling: Sampling,
    ) -> Checkpoint {
        Checkpoint {
            epoch,
            step,
            dataset: dataset.name().to_string(),
            sampling: Some(sampling),
            params: self.params.clone(),
            velocity: self.sgd.velocity.clone(),
        }
    }
}

/// Forward and backward of `model` on `images` (`labels.len() × shape` normalised pixels).
fn replica_step(
    model: &Net,
    loss_fn: &CrossEntropyLoss,
    device: &Device,
    images: &[f32],
    labels: &[i64],
    shape: [usize; 3],
) -> Share {
    let n = labels.len();
    let [c, h, w] = shape;
    let images = Tensor::<4>::from_data(TensorData::new(images.to_vec(), [n, c, h, w]), device);
    let targets = Tensor::<1, Int>::from_data(TensorData::new(labels.to_vec(), [n]), device);
    let logits = model.forward(images);
    let loss = loss_fn.forward(logits.clone(), targets);
    let grads = flatten_grads(model, &loss.backward());
    let loss = f64::from(
        loss.into_data()
            .convert::<f32>()
            .as_slice::<f32>()
            .expect("f32")[0],
    );
    Share {
        images: n,
        grads,
        loss,
        correct: count_correct(logits.detach(), labels),
    }
}

/// Where training starts.
struct Start {
    epoch: u64,
    step: u64,
}

/// Rank 0's starting point — its newest checkpoint, or the fresh model — broadcast to all
/// ranks: `[epoch, step, has momentum]`, the parameters, then the momentum if any. Only rank 0
/// reads the checkpoint, so only it finds one unusable; [`train`] then aborts the workers
/// with its error.
///
/// # Errors
/// On rank 0, [`TrainError::OutputDir`] when its checkpoint or model directory cannot be
/// written ([`check_writable`]), [`TrainError::Checkpoint`] when the newest checkpoint cannot be read, is of
/// another model or dataset, or stops mid-epoch under other `sampling` settings
/// ([`Checkpoint::check_sampling`]); on any rank, a failed broadcast.
fn initial_state(
    comm: &mut Communicator,
    model: &Net,
    config: &RunConfig,
    dataset: data::DatasetKind,
    sampling: Sampling,
) -> Result<(Start, Vec<f32>, Sgd), TrainError> {
    let n = model.num_params();
    let mut params = flatten_params(model);
    let mut sgd = Sgd::new(config.hp.lr, config.hp.momentum);
    let mut header = [1.0f32, 0.0, 0.0];
    if comm.rank() == 0 {
        check_writable(config)?;
        let newest = Checkpoint::load_newest(&config.checkpoint_dir, n, dataset.name())?;
        if newest.is_none() && config.require_checkpoint {
            return Err(CheckpointError::Missing {
                dir: config.checkpoint_dir.clone(),
            }
            .into());
        }
        if let Some((checkpoint, path)) = newest {
            checkpoint.check_sampling(&path, sampling)?;
            tracing::info!(path = %path.display(), epoch = checkpoint.epoch, step = checkpoint.step, "resuming from checkpoint");
            header = [
                checkpoint.epoch as f32,
                checkpoint.step as f32,
                f32::from(u8::from(!checkpoint.velocity.is_empty())),
            ];
            params = checkpoint.params;
            sgd.velocity = checkpoint.velocity;
        }
    }
    comm.broadcast(&mut header)?;
    comm.broadcast(&mut params)?;
    if header[2] == 1.0 {
        sgd.velocity.resize(n, 0.0);
        comm.broadcast(&mut sgd.velocity)?;
    }
    Ok((
        Start {
            epoch: header[0] as u64,
            step: header[1] as u64,
        },
        params,
        sgd,
    ))
}

/// Loss and accuracy sums over the whole test split: each rank evaluates its share
/// ([`evaluate`]) and the sums are all-reduced, so every rank returns the same figures.
fn evaluate_test_split(
    model: &Net,
    dataset: &Dataset,
    batch: usize,
    device: &Device,
    comm: &mut Communicator,
) -> Result<Tally, TrainError> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let mut sums = evaluate(
        model,
        &dataset.test,
        dataset.kind,
        rank,
        world,
        batch,
        device,
    )
    .to_vec();
    comm.all_reduce_sum(&mut sums)?;
    Ok(Tally::from_slice(&sums))
}

/// Loss and accuracy sums over this rank's share of `split` (examples `rank`, `rank + world`, …:
/// disjoint, no padding, so the all-reduced figures cover the test set exactly once).
fn evaluate(
    model: &Net,
    split: &Split,
    kind: data::DatasetKind,
    rank: usize,
    world: usize,
    batch: usize,
    device: &Device,
) -> Tally {
    let model = model.valid();
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let indices: Vec<usize> = (rank..split.len()).step_by(world).collect();
    let mut tally = Tally::default();
    for chunk in indices.chunks(batch) {
        let b = data::make_batch(split, kind, chunk, None);
        let n = b.labels.len();
        let logits = model.forward(Tensor::<4>::from_data(
            TensorData::new(b.images, b.shape),
            device,
        ));
        let targets = Tensor::<1, Int>::from_data(TensorData::new(b.labels.clone(), [n]), device);
        let loss = loss_fn
            .forward(logits.clone(), targets)
            .into_data()
            .convert::<f32>();
        tally.add(
            f64::from(loss.as_slice::<f32>().expect("f32")[0]),
            count_correct(logits, &b.labels),
            n,
        );
    }
    tally
}

/// Number of rows of `logits` `[n, classes]` whose largest entry is at the label.
pub fn count_correct(logits: Tensor<2>, labels: &[i64]) -> usize {
    let [_, classes] = logits.dims();
    let data = logits.into_data().convert::<f32>();
    let values = data.as_slice::<f32>().expect("f32");
    values
        .chunks_exact(classes)
        .zip(labels)
        .filter(|(row, &label)| argmax(row) == label as usize)
        .count()
}

/// Index of the largest value (the first on ties).
pub fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
            if v > best.1 {
                (i, v)
            } else {
                best
            }
        })
        .0
}

/// What `model.json` records of the training: epochs done and the last test figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelSummary {
    /// Epochs trained (1-based count).
    pub epochs: u64,
    /// Mean cross-entropy over the test set.
    pub test_loss: f64,
    /// Fraction of the test set classified correctly, 0–1.
    pub test_acc: f64,
}

impl ModelSummary {
    /// The metrics line of a model evaluated without training (no epoch was left to run): the
    /// test figures of [`EpochMetrics::line`] under the last trained epoch's number, e.g.
    /// `epoch=2 test_loss=0.3911; test_acc=0.8634;`, so the same SageMaker metric definitions
    /// match it.
    pub fn line(&self) -> String {
        format!(
            "epoch={} test_loss={:.4}; test_acc={:.4};",
            self.epochs, self.test_loss, self.test_acc
        )
    }
}

/// Renumbers a module's parameters 0, 1, 2, ... in visiting order. burn records each
/// parameter's `ParamId`, random per process, in the file; numbered this way the same weights
/// always give the same `model.bpk` bytes, so identical runs can be checked with a checksum.
/// Loading ignores the ids (the optimiser state they key is not saved with the model).
struct SequentialParamIds(u64);

impl burn::module::ModuleMapper for SequentialParamIds {
    fn map_float<const D: usize>(
        &mut self,
        param: burn::module::Param<Tensor<D>>,
    ) -> burn::module::Param<Tensor<D>> {
        let (_, value, mapper) = param.consume();
        let id = burn::module::ParamId::from(self.0);
        self.0 += 1;
        burn::module::Param::from_mapped_value(id, value, mapper)
    }
}

/// Checks, before the first step, that rank 0 can write into its checkpoint and model
/// directories (creating them, as saving does), by creating and removing a file in each:
/// otherwise a directory that cannot be one (read-only, not permitted, on a file system that
/// refuses it) would fail only at the first checkpoint, an epoch — hours, on real data — later,
/// or at the model after the last one.
///
/// # Errors
/// [`TrainError::OutputDir`] naming the directory, with the operating system's error.
fn check_writable(config: &RunConfig) -> Result<(), TrainError> {
    let probe = |dir: &Path| -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!(".kfaws-trainer-write-check-{}", std::process::id()));
        std::fs::File::create(&path)?;
        std::fs::remove_file(&path)
    };
    for (what, dir) in [
        ("checkpoint", &config.checkpoint_dir),
        ("model", &config.model_dir),
    ] {
        probe(dir).map_err(|source| TrainError::OutputDir {
            what,
            path: dir.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Writes `model.bpk` (burn record, parameters numbered in order: byte-identical for identical
/// weights) and `model.json` into `dir`.
///
/// # Errors
/// [`TrainError::ModelOutput`] naming the directory.
pub fn write_model(
    model: &Net,
    dataset: &Dataset,
    summary: Option<&ModelSummary>,
    dir: &Path,
) -> Result<(), TrainError> {
    let fail = |detail: String| TrainError::ModelOutput {
        path: dir.display().to_string(),
        detail,
        permanent: false,
    };
    let io = |e: std::io::Error| TrainError::ModelOutput {
        path: dir.display().to_string(),
        detail: e.to_string(),
        permanent: crate::error::io_is_permanent(e.kind()),
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    model
        .clone()
        .valid()
        .map(&mut SequentialParamIds(0))
        .save_file(dir.join(crate::MODEL_FILE))
        .map_err(|e| fail(e.to_string()))?;
    let info = crate::ModelInfo {
        test_accuracy: summary.map(|s| s.test_acc),
        test_loss: summary.map(|s| s.test_loss),
        epochs: summary.map(|s| s.epochs).unwrap_or(0),
        ..crate::ModelInfo::for_dataset(dataset.kind, model.num_params())
    };
    let json = serde_json::to_string_pretty(&info).map_err(|e| fail(e.to_string()))?;
    std::fs::write(dir.join(crate::MODEL_INFO_FILE), json).map_err(io)
}

/// A warning when `batch_size` exceeds a rank's shard (`train_len` images over `world_size`
/// ranks, padded up as [`DistributedSampler`] does): every epoch is then one optimiser step,
/// and a few epochs leave the model near chance.
fn oversized_batch(batch_size: usize, train_len: usize, world_size: usize) -> Option<String> {
    let shard = train_len.div_ceil(world_size.max(1));
    (batch_size > shard).then(|| {
        format!(
            "batch-size {batch_size} is larger than each rank's shard of {shard} training \
             image(s) ({train_len} over {world_size} rank(s)): every epoch is one step; use a \
             batch size of at most {shard}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_larger_than_a_ranks_shard_is_warned_about() {
        // 60,000 images over 2 ranks: 30,000 each.
        assert_eq!(oversized_batch(30_000, 60_000, 2), None);
        let w = oversized_batch(30_001, 60_000, 2).unwrap();
        assert!(
            w.contains("each rank's shard of 30000 training image(s)"),
            "{w}"
        );
        // Padded up: 5 images over 2 ranks are 3 each.
        assert_eq!(oversized_batch(3, 5, 2), None);
        assert!(oversized_batch(4, 5, 2).is_some());
    }
    use crate::contract::{resolve, TrainArgs};
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// Synthetic CIFAR-10 binary batches whose label is readable from the image (class k is
    /// a uniform image of brightness 20 + 22·k, which random crops and flips preserve), so a
    /// few epochs must learn something.
    fn write_synthetic_cifar(dir: &Path, per_file: usize) {
        let names = [
            "data_batch_1.bin",
            "data_batch_2.bin",
            "data_batch_3.bin",
            "data_batch_4.bin",
            "data_batch_5.bin",
            "test_batch.bin",
        ];
        for (f, name) in names.iter().enumerate() {
            let mut bytes = Vec::new();
            for i in 0..per_file {
                let label = (i + f) % 10;
                bytes.push(label as u8);
                bytes.extend(std::iter::repeat_n(20 + 22 * label as u8, 3072));
            }
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }

    /// Steps `replicas` replicas through three batches of 7 random 1×28×28 images (shares of
    /// unequal sizes with 2 or 3 replicas) and returns the parameters, loss and correct count.
    /// `model` is the same for every call: burn's random generator is global to the process and
    /// shared with the tests running beside this one, so seeding it before each `Net::new` would
    /// not give each call the same start.
    fn steps_with_replicas(model: Net, replicas: usize) -> (Vec<f32>, Vec<f32>, Vec<(f64, usize)>) {
        let device = Device::flex().autodiff();
        let initial = flatten_params(&model);
        let mut learner = Learner::new(
            model,
            initial.clone(),
            Sgd::new(0.1, 0.9),
            &device,
            replicas,
        );
        let mut comm = Communicator::single();
        let mut rng = StdRng::seed_from_u64(3);
        let reports = (0..3)
            .map(|_| {
                let batch = data::Batch {
                    images: (0..7 * 784).map(|_| rng.random_range(-1.0..1.0)).collect(),
                    labels: (0..7).map(|_| rng.random_range(0..10)).collect(),
                    shape: [7, 1, 28, 28],
                };
                let step = learner.step(batch, &mut comm, false).unwrap();
                assert!(!step.stop);
                (step.loss, step.correct)
            })
            .collect();
        (initial, learner.params, reports)
    }

    #[test]
    fn replicas_take_the_same_step_as_one_model_on_the_whole_batch() {
        let model = Net::new([1, 28, 28], &Device::flex().autodiff());
        let (initial, one, one_reports) = steps_with_replicas(model.clone(), 1);
        assert_ne!(initial, one, "the steps moved the parameters");
        for replicas in [2, 3] {
            let (_, split, reports) = steps_with_replicas(model.clone(), replicas);
            // Only the summation order differs: measured max difference 1.5e-8 after 3 steps.
            let max_diff = one
                .iter()
                .zip(&split)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(max_diff < 1e-5, "{replicas} replicas: max |Δ| {max_diff}");
            for ((l1, c1), (l2, c2)) in one_reports.iter().zip(&reports) {
                assert!((l1 - l2).abs() < 1e-5, "loss {l1} vs {l2}");
                assert_eq!(c1, c2);
            }
        }
    }

    /// Flags of a single-process run on the data in `dir`, writing the model to `dir/model`.
    fn single_process_args(dir: &Path, hyperparameters: &[&str]) -> TrainArgs {
        TrainArgs {
            data_dir: Some(dir.to_path_buf()),
            model_dir: Some(dir.join("model")),
            sagemaker_root: dir.join("no-sagemaker"),
            bind_addr: "127.0.0.1".into(),
            connect_timeout_secs: 5,
            collective_timeout_secs: 5,
            hyperparameters: hyperparameters.iter().map(|h| h.to_string()).collect(),
            ..TrainArgs::default()
        }
    }

    /// Every checkpoint cut short or empty (a crash during the first save, a partial copy):
    /// nothing reads back, so training starts from the beginning, as with no checkpoint, and
    /// its own checkpoints replace the corrupt ones (a restart used to fail with exit 1 on
    /// them every time).
    #[test]
    fn corrupt_checkpoints_only_start_training_from_the_beginning() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("cifar-10-batches-bin");
        std::fs::create_dir(&data).unwrap();
        write_synthetic_cifar(&data, 20);
        let args = single_process_args(dir.path(), &["epochs=2", "batch-size=20"]);
        let config = resolve(&args, &|_| None).unwrap();
        std::fs::create_dir_all(&config.checkpoint_dir).unwrap();
        let empty = config.checkpoint_dir.join("checkpoint-000002-00000000.bin");
        let cut = config.checkpoint_dir.join("checkpoint-000003-00000000.bin");
        std::fs::write(&empty, b"").unwrap();
        std::fs::write(&cut, b"KFAWSCKP\x03\x00\x00\x00").unwrap();
        let dataset = load_dataset(&config).unwrap();
        let mut epochs = 0;
        let outcome = train(&config, &dataset, &AtomicBool::new(false), |p| {
            if let Progress::Epoch(_) = p {
                epochs += 1;
            }
        })
        .unwrap();
        assert_eq!((epochs, outcome.epochs.len()), (2, 2));
        let (checkpoint, path) =
            crate::checkpoint::Checkpoint::load_newest(&config.checkpoint_dir, 62_006, "cifar10")
                .unwrap()
                .unwrap();
        assert_eq!((checkpoint.epoch, checkpoint.step), (3, 0));
        assert_eq!(path, cut);
        assert!(std::fs::metadata(&empty).unwrap().len() > 0, "replaced");
    }

    #[test]
    fn trains_cifar10_shaped_data_end_to_end_in_process() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("cifar-10-batches-bin");
        std::fs::create_dir(&data).unwrap();
        write_synthetic_cifar(&data, 100);
        let args = single_process_args(dir.path(), &["epochs=5", "batch-size=20", "lr=0.02"]);
        let config = resolve(&args, &|_| None).unwrap();
        let dataset = load_dataset(&config).unwrap();
        assert_eq!(dataset.kind, data::DatasetKind::Cifar10);
        let mut lines = Vec::new();
        let outcome = train(&config, &dataset, &AtomicBool::new(false), |p| {
            if let Progress::Epoch(m) = p {
                lines.push(m.line());
            }
        })
        .unwrap();
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert_eq!(outcome.params.len(), 62_006);
        let last = outcome.epochs.last().unwrap();
        let first = outcome.epochs[0];
        // Measured: 2.19 → 1.20 over 5 epochs: the brightness classes are being learnt, the same
        // to 4 digits with burn's convolutions or ours. (At lr 0.05 this run is at the edge of
        // stability: rounding differences alone sent epoch 5 to 1.20 with one kernel and 26 with
        // the other, whose loss gradients agree within 1e-4: `kernels_give_burns_loss_gradients`.)
        assert!(
            last.train_loss < 0.8 * first.train_loss,
            "training loss falls: {lines:?}"
        );
        let info: crate::ModelInfo =
            serde_json::from_slice(&std::fs::read(dir.path().join("model/model.json")).unwrap())
                .unwrap();
        assert_eq!(
            (info.dataset, info.input_shape, info.parameters),
            (data::DatasetKind::Cifar10, [3, 32, 32], 62_006)
        );
        assert_eq!(info.classes[0], "airplane");
        // Checkpoint after each epoch, the newest pointing at epoch 6 step 0.
        assert!(dir
            .path()
            .join("model/checkpoints/checkpoint-000006-00000000.bin")
            .is_file());
        assert_eq!(
            (info.epochs, info.test_accuracy, info.test_loss),
            (5, Some(last.test_acc), Some(last.test_loss))
        );

        // Restarted after the last epoch (a retried job): nothing trains, and model.json keeps
        // the model's test figures (evaluated again: the same model on the same test set).
        let again = train(&config, &dataset, &AtomicBool::new(false), |_| {}).unwrap();
        assert!(again.epochs.is_empty());
        assert_eq!(again.params, outcome.params);
        let info: crate::ModelInfo =
            serde_json::from_slice(&std::fs::read(dir.path().join("model/model.json")).unwrap())
                .unwrap();
        assert_eq!(info.epochs, 5);
        let accuracy = info.test_accuracy.unwrap();
        assert!((accuracy - last.test_acc).abs() < 1e-9, "{accuracy}");

        // A checkpoint from a run with smaller batches resumes past this run's steps per
        // epoch: refused, naming the cause, instead of an epoch that trains nothing. (Written
        // without the sampling settings, as before they were recorded: those of this format are
        // refused sooner, `a_mid_epoch_checkpoint_of_another_batch_size_is_refused`.)
        let mut config = config;
        config.checkpoint_dir = dir.path().join("other-checkpoints");
        crate::checkpoint::Checkpoint {
            epoch: 1,
            step: 40,
            dataset: dataset.kind.name().to_string(),
            sampling: None,
            params: outcome.params.clone(),
            velocity: Vec::new(),
        }
        .save(&config.checkpoint_dir)
        .unwrap();
        let refused = train(&config, &dataset, &AtomicBool::new(false), |_| {}).unwrap_err();
        assert!(
            matches!(
                refused,
                TrainError::CheckpointMismatch {
                    epoch: 1,
                    step: 40,
                    steps: 25
                }
            ),
            "{refused}"
        );
        assert_eq!(refused.exit_code(), crate::error::EXIT_CONFIG);
    }

    /// A checkpoint written 3 steps into epoch 1 with batch-size 10 stands for 30 examples of
    /// each rank's shard; resumed with batch-size 20, step 3 would start 60 examples in. It is
    /// refused as a configuration error naming both batch sizes. One written at the end of
    /// epoch 1 with batch-size 10 is the same position under any batch size: it resumes.
    #[test]
    fn a_mid_epoch_checkpoint_of_another_batch_size_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_synthetic_cifar(dir.path(), 20);
        let args = single_process_args(dir.path(), &["epochs=2", "batch-size=20"]);
        let config = resolve(&args, &|_| None).unwrap();
        let dataset = load_dataset(&config).unwrap();
        let params = flatten_params(&Net::new(dataset.kind.shape(), &Device::flex()));
        let written = |epoch, step| Checkpoint {
            epoch,
            step,
            dataset: dataset.kind.name().to_string(),
            sampling: Some(Sampling {
                batch_size: 10,
                world_size: 1,
                seed: config.hp.seed,
                train_examples: dataset.train.len() as u64,
            }),
            params: params.clone(),
            velocity: Vec::new(),
        };

        let path = written(1, 3).save(&config.checkpoint_dir).unwrap();
        let Err(refused) = train(&config, &dataset, &AtomicBool::new(false), |_| {}) else {
            panic!("a checkpoint 3 steps of batch-size 10 into epoch 1 resumed with batch-size 20");
        };
        assert!(
            matches!(
                &refused,
                TrainError::Checkpoint(crate::checkpoint::CheckpointError::OtherSampling { .. })
            ),
            "{refused}"
        );
        assert_eq!(refused.exit_code(), crate::error::EXIT_CONFIG);
        let text = refused.to_string();
        for part in [
            format!(
                "checkpoint {} was written 3 step(s) into epoch 1",
                path.display()
            ),
            "with batch-size 10, but this run has batch-size 20".into(),
            "train with batch-size 10 to resume it, or remove it or choose another checkpoint \
             directory"
                .into(),
        ] {
            assert!(text.contains(&part), "{text}");
        }
        assert!(!dir.path().join("model/model.json").exists());

        std::fs::remove_file(&path).unwrap();
        written(2, 0).save(&config.checkpoint_dir).unwrap();
        let resumed = train(&config, &dataset, &AtomicBool::new(false), |_| {}).unwrap();
        let epochs: Vec<u64> = resumed.epochs.iter().map(|m| m.epoch).collect();
        assert_eq!(epochs, [2], "only epoch 2 is left");
    }

    /// Resumed from the checkpoint written after epoch 2 (named epoch 3, step 0), the run
    /// reports epoch 2 as done before it trains, so the metrics endpoint reads 2 rather than
    /// 0 until epoch 3 ends; a fresh run reports no resume.
    #[test]
    fn a_resumed_run_reports_the_checkpoint_epoch_before_training() {
        let dir = tempfile::tempdir().unwrap();
        write_synthetic_cifar(dir.path(), 20);
        let args = single_process_args(dir.path(), &["epochs=3", "batch-size=20"]);
        let mut config = resolve(&args, &|_| None).unwrap();
        let dataset = load_dataset(&config).unwrap();
        let params = flatten_params(&Net::new(dataset.kind.shape(), &Device::flex()));
        Checkpoint {
            epoch: 3,
            step: 0,
            dataset: dataset.kind.name().to_string(),
            sampling: None,
            params,
            velocity: Vec::new(),
        }
        .save(&config.checkpoint_dir)
        .unwrap();
        let latest = crate::prometheus::Latest::default();
        let mut seen = Vec::new();
        train(&config, &dataset, &AtomicBool::new(false), |p| {
            latest.lock().unwrap().record(p);
            seen.push((p, crate::prometheus::render(&latest.lock().unwrap())));
        })
        .unwrap();
        let (first, scraped) = &seen[0];
        assert_eq!(*first, Progress::Resumed { completed_epoch: 2 });
        assert!(scraped.contains("kfaws_trainer_epoch 2\n"), "{scraped}");
        assert!(!scraped.contains("loss"), "{scraped}");
        assert!(
            matches!(seen[1].0, Progress::Epoch(m) if m.epoch == 3),
            "{seen:?}"
        );
        assert_eq!(seen.len(), 2, "{seen:?}");

        config.checkpoint_dir = dir.path().join("fresh-checkpoints");
        config.hp.epochs = 1;
        let mut fresh = Vec::new();
        train(&config, &dataset, &AtomicBool::new(false), |p| {
            fresh.push(p)
        })
        .unwrap();
        assert!(
            matches!(fresh[..], [Progress::Epoch(m)] if m.epoch == 1),
            "{fresh:?}"
        );
    }

    /// A Fashion-MNIST dataset with no images: enough for what reads only its kind and shape.
    fn empty_fashion_mnist() -> Dataset {
        let empty = Split {
            images: Vec::new(),
            labels: Vec::new(),
            shape: [1, 28, 28],
        };
        Dataset {
            kind: data::DatasetKind::FashionMnist,
            train: empty.clone(),
            test: empty,
        }
    }

    /// Ranks whose learning rates differ are refused at the handshake, which names both
    /// values as the shared configuration holds them: in their shortest f32 form (`0.01`), not
    /// widened to f64 on the way into JSON (`0.009999999776482582`).
    #[test]
    fn a_learning_rate_mismatch_shows_the_rates_as_written() {
        use crate::dist::{Agreement, CommError, Communicator};
        let dataset = empty_fashion_mnist();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let ranks: Vec<_> = [(0, "lr=0.02"), (1, "lr=0.01")]
            .into_iter()
            .map(|(rank, lr)| {
                let mut config = resolve(
                    &single_process_args(dir.path(), &[lr, "momentum=0.3"]),
                    &|_| None,
                )
                .unwrap();
                config.rendezvous.master_port = port;
                config.rendezvous.rank = rank;
                config.rendezvous.world_size = 2;
                let agreement = Agreement {
                    param_count: 1,
                    config: shared_config(&config, &dataset),
                };
                std::thread::spawn(move || {
                    Communicator::connect(&config.rendezvous, &agreement).map(|_| ())
                })
            })
            .collect();
        for (rank, handle) in ranks.into_iter().enumerate() {
            let err = handle.join().unwrap().unwrap_err();
            assert!(matches!(err, CommError::Mismatch(_)), "rank {rank}: {err}");
            let text = err.to_string();
            assert!(
                text.contains("hyperparameters.lr 0.01 on rank 1, 0.02 on rank 0"),
                "rank {rank}: {text}"
            );
            // The one difference: momentum, the same on both, is not listed.
            assert!(!text.contains("momentum"), "rank {rank}: {text}");
        }
    }

    /// With `require_checkpoint`, an empty checkpoint directory fails before the first step
    /// (exit 1, naming the directory); with a checkpoint there, the run resumes from it.
    #[test]
    fn a_required_checkpoint_that_is_missing_fails_before_training() {
        let dir = tempfile::tempdir().unwrap();
        write_synthetic_cifar(dir.path(), 40);
        let args = single_process_args(dir.path(), &["epochs=2", "batch-size=20"]);
        let config = RunConfig {
            require_checkpoint: true,
            ..resolve(&args, &|_| None).unwrap()
        };
        let dataset = load_dataset(&config).unwrap();
        let mut epochs = 0;
        let error = train(&config, &dataset, &AtomicBool::new(false), |p| {
            epochs += usize::from(matches!(p, Progress::Epoch(_)));
        })
        .unwrap_err();
        assert_eq!(epochs, 0, "{error}");
        assert!(
            matches!(&error, TrainError::Checkpoint(CheckpointError::Missing { dir }) if *dir == config.checkpoint_dir),
            "{error}"
        );
        assert_eq!(error.exit_code(), crate::error::EXIT_CONFIG, "{error}");

        // One epoch written by a run that did not require it; the requiring run resumes it.
        let mut first = config.clone();
        first.require_checkpoint = false;
        first.hp.epochs = 1;
        train(&first, &dataset, &AtomicBool::new(false), |_| {}).unwrap();
        let mut progress = Vec::new();
        train(&config, &dataset, &AtomicBool::new(false), |p| {
            progress.push(p)
        })
        .unwrap();
        assert_eq!(progress[0], Progress::Resumed { completed_epoch: 1 });
    }

    /// A checkpoint or model directory that cannot be made (here under /proc, which refuses
    /// new directories: NotFound) fails before the first step, exit 1, not after an epoch.
    #[test]
    fn an_output_directory_that_cannot_be_made_fails_before_training() {
        let dir = tempfile::tempdir().unwrap();
        write_synthetic_cifar(dir.path(), 40);
        let args = single_process_args(dir.path(), &["epochs=1", "batch-size=20"]);
        let base = resolve(&args, &|_| None).unwrap();
        let dataset = load_dataset(&base).unwrap();
        let refused = std::path::PathBuf::from("/proc/kfaws-trainer-test/out");
        for (checkpoint_dir, model_dir) in [
            (refused.clone(), base.model_dir.clone()),
            (base.checkpoint_dir.clone(), refused.clone()),
        ] {
            let config = RunConfig {
                checkpoint_dir,
                model_dir,
                ..base.clone()
            };
            let mut epochs = 0;
            let error = train(&config, &dataset, &AtomicBool::new(false), |p| {
                epochs += usize::from(matches!(p, Progress::Epoch(_)));
            })
            .unwrap_err();
            assert_eq!(epochs, 0, "{error}");
            assert_eq!(error.exit_code(), crate::error::EXIT_CONFIG, "{error}");
            assert!(
                error.to_string().contains("/proc/kfaws-trainer-test/out"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_diverging_run_fails_without_writing_a_model() {
        let dir = tempfile::tempdir().unwrap();
        write_synthetic_cifar(dir.path(), 40);
        let args = single_process_args(dir.path(), &["epochs=2", "batch-size=20", "lr=1e10"]);
        let config = resolve(&args, &|_| None).unwrap();
        let dataset = load_dataset(&config).unwrap();
        let error = train(&config, &dataset, &AtomicBool::new(false), |_| {}).unwrap_err();
        assert!(
            matches!(error, TrainError::Diverged { epoch: 1, loss } if !loss.is_finite()),
            "{error}"
        );
        assert_eq!(error.exit_code(), crate::error::EXIT_CONFIG);
        assert!(!dir.path().join("model/model.json").exists());
        // (Made empty at the start, when rank 0 checks it can write there.)
        assert_eq!(
            std::fs::read_dir(dir.path().join("model/checkpoints"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn the_same_weights_give_the_same_model_file_bytes() {
        let dataset = empty_fashion_mnist();
        // Two models with the same weights but burn's random parameter ids, as two runs have.
        let device = Device::flex().autodiff();
        let mut files = Vec::new();
        let root = tempfile::tempdir().unwrap();
        let first = Net::new([1, 28, 28], &device);
        let weights = flatten_params(&first);
        for run in 0..2 {
            // burn's random generator is shared with the tests beside this one: a seed would not
            // give both the same weights, so the second takes the first's.
            let model = match run {
                0 => first.clone(),
                _ => load_flat_params(Net::new([1, 28, 28], &device), &weights),
            };
            let dir = root.path().join(run.to_string());
            write_model(&model, &dataset, None, &dir).unwrap();
            files.push(std::fs::read(dir.join(crate::MODEL_FILE)).unwrap());
            let loaded = Net::new([1, 28, 28], &Device::flex())
                .try_load_file(dir.join(crate::MODEL_FILE))
                .unwrap();
            assert_eq!(flatten_params(&loaded), flatten_params(&model));
        }
        assert_eq!(
            files[0], files[1],
            "model.bpk differs between identical models"
        );
    }

    #[test]
    fn argmax_takes_the_first_maximum() {
        assert_eq!(argmax(&[0.1, 0.9, 0.9, -1.0]), 1);
        assert_eq!(argmax(&[-3.0]), 0);
    }

    #[test]
    fn count_correct_compares_row_maxima_with_labels() {
        let logits = Tensor::<2>::from_data(
            TensorData::new(vec![1.0f32, 2.0, 5.0, 0.0, 0.0, 3.0], [3, 2]),
            &Device::flex(),
        );
        assert_eq!(count_correct(logits, &[1, 0, 0]), 2);
    }

    #[test]
    fn nccl_needs_the_cuda_feature() {
        if cfg!(feature = "cuda") {
            return;
        }
        let err = device_for("nccl").unwrap_err().to_string();
        assert!(err.contains("--features cuda"), "{err}");
    }
}
