//! Training checkpoints: the flat parameters, the optimiser's momentum and the position in
//! training, written atomically by rank 0 and read back by rank 0 on start, which then
//! broadcasts them so every rank resumes from identical state.
//!
//! File `checkpoint-EEEEEE-SSSSSSSS.bin` (epoch, steps done in it), little-endian:
//! magic `KFAWSCKP`, format version `u32`, epoch `u64`, step `u64`, dataset name length `u8`
//! and the name (UTF-8, [`DatasetKind::name`]), batch size `u64`, world size `u64`, seed
//! `u64`, training examples `u64` ([`Sampling`]), parameter count `u64`, parameters `f32 × count`, momentum length
//! `u64` (0 or count), momentum `f32 × length`, then (version 4) the SHA-256 of every byte
//! before it (FIPS 180-4), 32 bytes: a file changed after it was written past its format
//! version — a flipped bit, a zeroed block, not only one cut short — does not decode, so the resume skips it for the one
//! before it instead of training on from damaged parameters. Version 3 files, written before
//! the checksum, are read without it; version 2 files, written before the sampling settings
//! were recorded, are read without them (and written so again); version 1 files, written before
//! the dataset was too, also with an unknown dataset.
//!
//! [`DatasetKind::name`]: kfaws_trainer_contract::DatasetKind::name

use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"KFAWSCKP";
const VERSION: u32 = 4;
/// The format with the sampling settings but without the checksum, still read.
const VERSION_WITHOUT_CHECKSUM: u32 = 3;
/// Bytes of the SHA-256 trailer of a [`VERSION`] file.
const CHECKSUM_LEN: usize = 32;
/// The format without the sampling settings, still read.
const VERSION_WITHOUT_SAMPLING: u32 = 2;
/// The format without the dataset name nor the sampling settings, still read.
const VERSION_WITHOUT_DATASET: u32 = 1;
/// Checkpoints kept before the one just written, so a crash while writing never leaves none,
/// and a newest one that does not decode has older ones to fall back to.
const KEEP: usize = 2;

/// The settings that decide which training examples step `s` of epoch `e` covers, following
/// PyTorch's `torch.utils.data.DistributedSampler` (shuffle on, `drop_last=False`), as
/// [`crate::data::DistributedSampler`] does: the training split (`train_examples` long) is
/// shuffled from `seed + e`, padded and dealt out to `world_size` ranks, and each rank's share
/// is cut into steps of `batch_size` examples. A position in the middle of an epoch stands for
/// the same examples only under the same four settings; an epoch boundary (step 0) is the
/// same under any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampling {
    /// Training examples per step on each rank (the `batch-size` hyperparameter).
    pub batch_size: u64,
    /// Ranks (processes) training together.
    pub world_size: u64,
    /// The `seed` hyperparameter, from which each epoch's shuffle is drawn.
    pub seed: u64,
    /// Examples in the training split, after `max-train-samples`: what is shuffled and dealt.
    pub train_examples: u64,
}

impl Sampling {
    /// The settings of `self` that differ from `other`'s, as `batch-size 64`, `world size 2`,
    /// `seed 7`, `600 training examples (max-train-samples)` joined with "and".
    fn differences(&self, other: &Sampling) -> String {
        let mut said = Vec::new();
        if self.batch_size != other.batch_size {
            said.push(format!("batch-size {}", self.batch_size));
        }
        if self.world_size != other.world_size {
            said.push(format!("world size {}", self.world_size));
        }
        if self.seed != other.seed {
            said.push(format!("seed {}", self.seed));
        }
        if self.train_examples != other.train_examples {
            said.push(format!(
                "{} training examples (max-train-samples)",
                self.train_examples
            ));
        }
        said.join(" and ")
    }
}

/// Where training stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Epoch in progress, counted from 1.
    pub epoch: u64,
    /// Steps of `epoch` already done (0: the epoch starts afresh).
    pub step: u64,
    /// The dataset trained on (`mnist`, `fashion-mnist`, `cifar10`); empty when a version 1
    /// file did not record it. MNIST and Fashion-MNIST models have the same parameter count,
    /// so only this tells their checkpoints apart.
    pub dataset: String,
    /// The settings `step` counts in; `None` when a version 1 or 2 file did not record them
    /// (such a checkpoint is also written in version 2, without them).
    pub sampling: Option<Sampling>,
    /// Flat model parameters.
    pub params: Vec<f32>,
    /// Flat momentum buffer, empty before the first step.
    pub velocity: Vec<f32>,
}

/// Why a checkpoint could not be written or used.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// File system failure.
    #[error("checkpoint {path}: {source}")]
    Io {
        /// The checkpoint file being written or read (when saving, the final file's path even if
        /// creating the directory, the temporary file or deleting an older checkpoint failed);
        /// the checkpoint directory when listing it failed.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The run requires a checkpoint to resume from (`--require-checkpoint`) and the directory
    /// holds none that can be read.
    #[error(
        "no checkpoint to resume from in {}, and this run requires one (--require-checkpoint, \
         TRAINER_REQUIRE_CHECKPOINT): the run it continues wrote none, or they were removed; \
         start a new run instead",
        .dir.display()
    )]
    Missing {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// Written by a newer trainer, in a format this one cannot read: not corrupt, so not
    /// trained over (that would replace the newer trainer's progress).
    #[error(
        "checkpoint {path} is in format version {version}, written by a newer kfaws-trainer; \
         this one reads versions {VERSION_WITHOUT_DATASET} to {VERSION}: run the newer trainer, \
         or choose another checkpoint directory"
    )]
    NewerFormat {
        /// The file.
        path: PathBuf,
        /// Its format version.
        version: u32,
    },
    /// Written for another model.
    #[error(
        "checkpoint {path} holds {found} parameters but this model has {expected}: it belongs \
         to another dataset or model; remove it or choose another checkpoint directory"
    )]
    WrongModel {
        /// The newest checkpoint file, the one read.
        path: PathBuf,
        /// Parameters (`f32` elements) of the model this run builds.
        expected: usize,
        /// Parameters (`f32` elements) the checkpoint holds.
        found: usize,
    },
    /// Written while training on another dataset of the same shape.
    #[error(
        "checkpoint {path} was written while training on {found}, but this run trains on \
         {expected}: resuming would carry on from the other dataset's model; remove it or \
         choose another checkpoint directory"
    )]
    WrongDataset {
        /// The newest checkpoint file, the one read.
        path: PathBuf,
        /// The dataset this run trains on, as [`DatasetKind::name`] spells it.
        ///
        /// [`DatasetKind::name`]: kfaws_trainer_contract::DatasetKind::name
        expected: String,
        /// The dataset name the checkpoint records.
        found: String,
    },
    /// Written in the middle of an epoch under another batch size, world size, seed or training
    /// split length: its
    /// step would stand for other examples of the epoch ([`Sampling`]).
    #[error(
        "checkpoint {path} was written {step} step(s) into epoch {epoch} with {}, but this run \
         has {}: its steps cover other examples of the epoch (each epoch is shuffled from the \
         seed, dealt out to the ranks and cut into batch-size steps), so resuming it would \
         re-train or skip part of the epoch; train with {} to resume it, or remove it or choose \
         another checkpoint directory to start afresh",
        .written.differences(.this_run),
        .this_run.differences(.written),
        .written.differences(.this_run)
    )]
    OtherSampling {
        /// The newest checkpoint file, the one read.
        path: PathBuf,
        /// The epoch it stops in, counted from 1.
        epoch: u64,
        /// Steps of that epoch it has done (more than 0).
        step: u64,
        /// The settings it was written with.
        written: Sampling,
        /// This run's settings.
        this_run: Sampling,
    },
}

impl Checkpoint {
    fn file_name(&self) -> String {
        kfaws_trainer_contract::checkpoint::file_name(self.epoch, self.step)
    }

    /// Writes the checkpoint into `dir` (temporary file, fsync, rename) and deletes the
    /// checkpoints positioned before it but the newest `KEEP`; those positioned after it are
    /// kept. Returns the path written.
    ///
    /// # Errors
    /// [`CheckpointError::Io`].
    pub fn save(&self, dir: &Path) -> Result<PathBuf, CheckpointError> {
        let path = dir.join(self.file_name());
        let io = |source| CheckpointError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut bytes = MAGIC.to_vec();
        let version = match self.sampling {
            Some(_) => VERSION,
            None => VERSION_WITHOUT_SAMPLING,
        };
        bytes.extend(version.to_le_bytes());
        bytes.extend(self.epoch.to_le_bytes());
        bytes.extend(self.step.to_le_bytes());
        let dataset = self.dataset.as_bytes();
        let len = u8::try_from(dataset.len()).expect("dataset names are short");
        bytes.push(len);
        bytes.extend(dataset);
        if let Some(s) = self.sampling {
            for value in [s.batch_size, s.world_size, s.seed, s.train_examples] {
                bytes.extend(value.to_le_bytes());
            }
        }
        for part in [&self.params, &self.velocity] {
            bytes.extend((part.len() as u64).to_le_bytes());
            bytes.extend(part.iter().flat_map(|v| v.to_le_bytes()));
        }
        if version == VERSION {
            let checksum = checksum(&bytes);
            bytes.extend(checksum);
        }
        let tmp = dir.join(format!(".{}.tmp", self.file_name()));
        let mut file = std::fs::File::create(&tmp).map_err(io)?;
        file.write_all(&bytes)
            .and_then(|_| file.sync_all())
            .map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)?;
        // The rename is durable before the older checkpoints go (rename(2) is atomic, but
        // only an fsync of the directory makes the new name survive a power loss).
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        // Only checkpoints positioned before this one go, the newest KEEP of them kept. One
        // positioned after it (a partial copy that does not decode, which the resume skipped,
        // or another run's) is left alone: pruning by position alone would delete the
        // checkpoint just written, and every good one, in its favour.
        let here = (self.epoch, self.step);
        let earlier: Vec<PathBuf> = list(dir)
            .map_err(io)?
            .into_iter()
            .filter(|p| position(p).is_some_and(|at| at < here))
            .collect();
        for old in earlier.iter().rev().skip(KEEP) {
            std::fs::remove_file(old).map_err(io)?;
        }
        Ok(path)
    }

    /// The newest checkpoint in `dir` that decodes (none if the directory is absent or empty),
    /// checked against the model's parameter count and the dataset's name (a version 1 file,
    /// which does not record it, is taken on its parameter count alone). A corrupt newest file
    /// (cut short by a crash or a copy, e.g. a checkpoint sync to S3) is skipped with a warning
    /// for the one before it: the older ones are kept for that ([`Checkpoint::save`]). When
    /// none decodes, there is nothing to resume: a warning names them and says training starts
    /// from the beginning, and `None` is returned, as for an empty directory (the new run's
    /// checkpoints then replace them by name, or prune them as older ones); a run that failed
    /// on the same files at every restart (exit 1) could never finish.
    ///
    /// # Errors
    /// [`CheckpointError::NewerFormat`] for a file a newer trainer wrote (met before one that
    /// decodes); [`CheckpointError`] when a file cannot be read, or the first that decodes is
    /// for another model or dataset.
    pub fn load_newest(
        dir: &Path,
        param_count: usize,
        dataset: &str,
    ) -> Result<Option<(Self, PathBuf)>, CheckpointError> {
        let files = list(dir).map_err(|source| CheckpointError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut corrupt = Vec::new();
        let mut found = None;
        for (i, path) in files.iter().enumerate().rev() {
            let bytes = std::fs::read(path).map_err(|source| CheckpointError::Io {
                path: path.clone(),
                source,
            })?;
            match Self::decode(&bytes) {
                Ok(checkpoint) => {
                    found = Some((checkpoint, path));
                    break;
                }
                Err(_) if newer_format(&bytes).is_some() => {
                    return Err(CheckpointError::NewerFormat {
                        path: path.clone(),
                        version: newer_format(&bytes).expect("checked"),
                    });
                }
                Err(detail) => {
                    let next = if i > 0 {
                        "trying the one before it"
                    } else {
                        "it is the oldest"
                    };
                    tracing::warn!(
                        "checkpoint {} is corrupt ({detail}); {next}",
                        path.display()
                    );
                    corrupt.push(path.display().to_string());
                }
            }
        }
        let Some((checkpoint, path)) = found else {
            if !corrupt.is_empty() {
                tracing::warn!(
                    "no checkpoint in {} reads back (corrupt: {}); training starts from the \
                     beginning (its own saves replace a file of the same name and prune those \
                     positioned before them, as always)",
                    dir.display(),
                    corrupt.join(", ")
                );
            }
            return Ok(None);
        };
        if checkpoint.params.len() != param_count {
            return Err(CheckpointError::WrongModel {
                path: path.clone(),
                expected: param_count,
                found: checkpoint.params.len(),
            });
        }
        if !checkpoint.dataset.is_empty() && checkpoint.dataset != dataset {
            return Err(CheckpointError::WrongDataset {
                path: path.clone(),
                expected: dataset.to_string(),
                found: checkpoint.dataset,
            });
        }
        Ok(Some((checkpoint, path.clone())))
    }

    /// Checks that a run under `this_run` may resume this checkpoint, read from `path`: one at
    /// an epoch boundary (step 0) always may; one in the middle of an epoch only with the
    /// [`Sampling`] it was written with, since otherwise its step stands for other examples.
    /// A version 1 or 2 file, which does not record them, passes (the trainer then only
    /// checks that its step is within this run's epoch).
    ///
    /// # Errors
    /// [`CheckpointError::OtherSampling`] naming each differing setting with both values.
    pub fn check_sampling(&self, path: &Path, this_run: Sampling) -> Result<(), CheckpointError> {
        match self.sampling {
            Some(written) if self.step > 0 && written != this_run => {
                Err(CheckpointError::OtherSampling {
                    path: path.to_path_buf(),
                    epoch: self.epoch,
                    step: self.step,
                    written,
                    this_run,
                })
            }
            _ => Ok(()),
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        let version = bytes
            .get(8..12)
            .map(|v| u32::from_le_bytes(v.try_into().expect("4")));
        let bytes = match version {
            Some(VERSION) if bytes.starts_with(MAGIC) => {
                let Some(split) = bytes.len().checked_sub(CHECKSUM_LEN).filter(|&n| n >= 12) else {
                    return Err(format!(
                        "ends at byte {} of at least {}",
                        bytes.len(),
                        12 + CHECKSUM_LEN
                    ));
                };
                let (body, written) = bytes.split_at(split);
                if checksum(body) != written {
                    return Err(
                        "its SHA-256 checksum does not match its contents: the file was \
                         changed or damaged after it was written"
                            .into(),
                    );
                }
                body
            }
            _ => bytes,
        };
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8], String> {
            let end = at.checked_add(n).ok_or("length overflow")?;
            let part = bytes
                .get(at..end)
                .ok_or_else(|| format!("ends at byte {} of at least {end}", bytes.len()))?;
            at = end;
            Ok(part)
        };
        if take(8)? != MAGIC {
            return Err("not a kfaws-trainer checkpoint (bad magic)".into());
        }
        let version = u32::from_le_bytes(take(4)?.try_into().expect("4"));
        if !(VERSION_WITHOUT_DATASET..=VERSION).contains(&version) {
            return Err(format!(
                "format version {version}, this trainer reads {VERSION_WITHOUT_DATASET} to \
                 {VERSION}"
            ));
        }
        let mut u64_ =
            || -> Result<u64, String> { Ok(u64::from_le_bytes(take(8)?.try_into().expect("8"))) };
        let (epoch, step) = (u64_()?, u64_()?);
        let dataset = if version == VERSION_WITHOUT_DATASET {
            String::new()
        } else {
            let len = usize::from(take(1)?[0]);
            String::from_utf8(take(len)?.to_vec()).map_err(|_| "dataset name is not UTF-8")?
        };
        let sampling = if version >= VERSION_WITHOUT_CHECKSUM {
            let mut u64_ = || -> Result<u64, String> {
                Ok(u64::from_le_bytes(take(8)?.try_into().expect("8")))
            };
            Some(Sampling {
                batch_size: u64_()?,
                world_size: u64_()?,
                seed: u64_()?,
                train_examples: u64_()?,
            })
        } else {
            None
        };
        let mut floats = || -> Result<Vec<f32>, String> {
            let n = u64::from_le_bytes(take(8)?.try_into().expect("8")) as usize;
            let raw = take(n.checked_mul(4).ok_or("length overflow")?)?;
            Ok(raw
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect())
        };
        let params = floats()?;
        let velocity = floats()?;
        if !velocity.is_empty() && velocity.len() != params.len() {
            return Err(format!(
                "its momentum holds {} values for {} parameters",
                velocity.len(),
                params.len()
            ));
        }
        if at != bytes.len() {
            return Err(format!(
                "{} bytes follow the end of its data",
                bytes.len() - at
            ));
        }
        Ok(Self {
            epoch,
            step,
            dataset,
            sampling,
            params,
            velocity,
        })
    }
}

/// Checkpoint files in `dir`, oldest first: those whose names
/// [`kfaws_trainer_contract::checkpoint::parse_file_name`] reads, ordered by its
/// `(epoch, step)` (then by name, for two spellings of one position). Any other file, even
/// one named like `checkpoint-best.bin`, is not ours: it is neither loaded nor pruned. An
/// absent directory has none.
///
/// # Errors
/// The operating system's error when `dir` exists but cannot be listed.
/// The (epoch, step) a checkpoint file's name gives; `None` for a name not of this trainer.
fn position(path: &Path) -> Option<(u64, u64)> {
    kfaws_trainer_contract::checkpoint::parse_file_name(path.file_name()?.to_str()?)
}

fn list(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files: Vec<((u64, u64), PathBuf)> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|path| Some((position(&path)?, path)))
        .collect();
    files.sort();
    Ok(files.into_iter().map(|(_, path)| path).collect())
}

/// The SHA-256 of `bytes`, the trailer of a [`VERSION`] file.
fn checksum(bytes: &[u8]) -> [u8; CHECKSUM_LEN] {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).into()
}

/// The format version of `bytes` when they start as a checkpoint of a version newer than
/// this trainer's ([`VERSION`]), whatever follows.
fn newer_format(bytes: &[u8]) -> Option<u32> {
    let version = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?);
    (bytes.starts_with(MAGIC) && version > VERSION).then_some(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLING: Sampling = Sampling {
        batch_size: 64,
        world_size: 2,
        seed: 1 << 40,
        train_examples: 60_000,
    };

    /// The names of the files in `dir`, sorted.
    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// `c` in format `version` (1 to 3, before the checksum), byte for byte as the trainers
    /// of those formats wrote it, independently of [`Checkpoint::save`]: version 1 without the
    /// dataset, 2 with it, 3 with `c`'s sampling settings too.
    fn written_by_hand(c: &Checkpoint, version: u32) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend(version.to_le_bytes());
        bytes.extend(c.epoch.to_le_bytes());
        bytes.extend(c.step.to_le_bytes());
        if version >= VERSION_WITHOUT_SAMPLING {
            bytes.push(c.dataset.len() as u8);
            bytes.extend(c.dataset.as_bytes());
        }
        if version == VERSION_WITHOUT_CHECKSUM {
            let s = c.sampling.expect("version 3 records the sampling settings");
            for value in [s.batch_size, s.world_size, s.seed, s.train_examples] {
                bytes.extend(value.to_le_bytes());
            }
        }
        for part in [&c.params, &c.velocity] {
            bytes.extend((part.len() as u64).to_le_bytes());
            bytes.extend(part.iter().flat_map(|v| v.to_le_bytes()));
        }
        bytes
    }

    fn sample(epoch: u64, step: u64) -> Checkpoint {
        Checkpoint {
            epoch,
            step,
            dataset: "fashion-mnist".into(),
            sampling: Some(SAMPLING),
            params: vec![1.5, -2.0, epoch as f32],
            velocity: vec![0.25, 0.0, -1.0],
        }
    }

    #[test]
    fn round_trips_and_picks_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
            .unwrap()
            .is_none());
        assert!(
            Checkpoint::load_newest(&dir.path().join("absent"), 3, "fashion-mnist")
                .unwrap()
                .is_none()
        );
        for (epoch, step) in [(2, 0), (3, 5), (10, 0), (10, 7)] {
            sample(epoch, step).save(dir.path()).unwrap();
        }
        let (newest, path) = Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
            .unwrap()
            .unwrap();
        assert_eq!(newest, sample(10, 7));
        assert!(path.ends_with("checkpoint-000010-00000007.bin"));
        // The newest and the KEEP before it are kept; no temporary file is left.
        let names = names_in(dir.path());
        assert_eq!(names.len(), KEEP + 1, "{names:?}");
    }

    /// A file named like a checkpoint but not written by [`Checkpoint::save`] is not read: it
    /// is neither the newest checkpoint nor a corrupt one.
    #[test]
    fn a_foreign_file_is_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("checkpoint-best.bin"), b"not ours").unwrap();
        assert!(Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
            .unwrap()
            .is_none());
        sample(1, 0).save(dir.path()).unwrap();
        let (read, _) = Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
            .unwrap()
            .unwrap();
        assert_eq!(read, sample(1, 0));
    }

    /// Foreign files named like checkpoints are neither pruned nor take a place among the
    /// KEEP + 1 kept, and positions order by number, not by name (epoch 1,000,000 has
    /// 7 digits).
    #[test]
    fn pruning_keeps_foreign_files_and_orders_positions_by_number() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["checkpoint-best.bin", "checkpoint-000001.bin"] {
            std::fs::write(dir.path().join(name), b"not ours").unwrap();
        }
        for (epoch, step) in [(1, 0), (2, 0), (3, 0), (999_999, 5), (1_000_000, 0)] {
            sample(epoch, step).save(dir.path()).unwrap();
        }
        assert_eq!(
            names_in(dir.path()),
            [
                "checkpoint-000001.bin",
                "checkpoint-000003-00000000.bin",
                "checkpoint-1000000-00000000.bin",
                "checkpoint-999999-00000005.bin",
                "checkpoint-best.bin",
            ],
            "the newest KEEP + 1 = {} of ours are kept, the foreign files untouched",
            KEEP + 1
        );
        let (newest, _) = Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
            .unwrap()
            .unwrap();
        assert_eq!(newest, sample(1_000_000, 0));
    }

    /// Files positioned after the checkpoint being written (here three that do not decode,
    /// as a partial copy leaves them) are not pruned in its favour: each save keeps itself
    /// and the newest KEEP before it, and the next start falls back past the bad files to
    /// the newest good one.
    #[test]
    fn later_files_that_do_not_decode_never_push_out_the_checkpoint_just_written() {
        let dir = tempfile::tempdir().unwrap();
        let bad = [
            "checkpoint-000007-00000000.bin",
            "checkpoint-000008-00000000.bin",
        ];
        for name in bad {
            std::fs::write(dir.path().join(name), b"cut short").unwrap();
        }
        for epoch in 3..=6 {
            sample(epoch, 0).save(dir.path()).unwrap();
        }
        assert_eq!(
            names_in(dir.path()),
            [
                "checkpoint-000004-00000000.bin",
                "checkpoint-000005-00000000.bin",
                "checkpoint-000006-00000000.bin",
                bad[0],
                bad[1],
            ]
        );
        let (newest, _) = Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
            .unwrap()
            .unwrap();
        assert_eq!(newest, sample(6, 0));
    }

    #[test]
    fn empty_velocity_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let c = Checkpoint {
            velocity: vec![],
            ..sample(1, 0)
        };
        c.save(dir.path()).unwrap();
        assert_eq!(
            Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
                .unwrap()
                .unwrap()
                .0,
            c
        );
    }

    #[test]
    fn foreign_checkpoints_are_errors_naming_the_file_and_corrupt_ones_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(1, 0).save(dir.path()).unwrap();
        let err = Checkpoint::load_newest(dir.path(), 4, "fashion-mnist")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("checkpoint-000001-00000000.bin holds 3 parameters but this model has 4"),
            "{err}"
        );
        // Cut short, bytes past the data (both fail the checksum), and a momentum of another
        // length are corrupt: the only file decoding to nothing, there is nothing to resume.
        let bytes = std::fs::read(&path).unwrap();
        let mut longer = bytes.clone();
        longer.push(0);
        let odd = {
            let odd = Checkpoint {
                velocity: vec![1.0],
                ..sample(1, 0)
            };
            odd.save(dir.path()).unwrap();
            std::fs::read(&path).unwrap()
        };
        for (corrupt, detail) in [
            (&bytes[..bytes.len() - 3], "checksum does not match"),
            (&longer[..], "checksum does not match"),
            (&bytes[..20], "ends at byte 20 of at least 44"),
            (&odd[..], "its momentum holds 1 values for 3 parameters"),
        ] {
            let err = Checkpoint::decode(corrupt).unwrap_err();
            assert!(err.contains(detail), "{err}");
            std::fs::write(&path, corrupt).unwrap();
            assert!(
                Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
                    .unwrap()
                    .is_none(),
                "{detail}"
            );
        }
        // A newer trainer's format is not corrupt: refused, never trained over.
        let mut newer = bytes.clone();
        newer[8..12].copy_from_slice(&(VERSION + 1).to_le_bytes());
        std::fs::write(&path, &newer).unwrap();
        let err = Checkpoint::load_newest(dir.path(), 3, "fashion-mnist").unwrap_err();
        assert!(
            matches!(&err, CheckpointError::NewerFormat { version, .. } if *version == VERSION + 1),
            "{err}"
        );
        assert!(
            err.to_string().contains("written by a newer kfaws-trainer"),
            "{err}"
        );
    }

    /// A newest file cut short (a crash, an interrupted copy) falls back to the one before it;
    /// when every file is corrupt (cut short, empty), there is nothing to resume: `None`, as
    /// for an empty directory, so training starts again rather than failing on every restart.
    #[test]
    fn a_corrupt_newest_checkpoint_falls_back_to_the_one_before_it() {
        let dir = tempfile::tempdir().unwrap();
        sample(1, 0).save(dir.path()).unwrap();
        let newest = sample(2, 0).save(dir.path()).unwrap();
        let bytes = std::fs::read(&newest).unwrap();
        std::fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
        let (read, path) = Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
            .unwrap()
            .unwrap();
        assert_eq!(read, sample(1, 0));
        assert!(path.ends_with("checkpoint-000001-00000000.bin"), "{path:?}");
        let older = dir.path().join(sample(1, 0).file_name());
        std::fs::write(&older, b"").unwrap();
        assert!(Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
            .unwrap()
            .is_none());
        // A checkpoint of another model behind the corrupt ones is still refused.
        let foreign = Checkpoint {
            params: vec![1.0; 4],
            velocity: vec![],
            ..sample(0, 5)
        };
        foreign.save(dir.path()).unwrap();
        assert!(matches!(
            Checkpoint::load_newest(dir.path(), 3, "fashion-mnist").unwrap_err(),
            CheckpointError::WrongModel { found: 4, .. }
        ));
    }

    #[test]
    fn a_checkpoint_of_another_dataset_of_the_same_shape_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        sample(2, 0).save(dir.path()).unwrap();
        let err = Checkpoint::load_newest(dir.path(), 3, "mnist").unwrap_err();
        assert!(
            matches!(&err, CheckpointError::WrongDataset { expected, found, .. }
                if expected == "mnist" && found == "fashion-mnist"),
            "{err}"
        );
        assert!(
            err.to_string().contains("checkpoint-000002-00000000.bin"),
            "{err}"
        );
    }

    #[test]
    fn a_version_1_file_is_read_without_a_dataset() {
        let dir = tempfile::tempdir().unwrap();
        let c = sample(3, 1);
        let bytes = written_by_hand(&c, VERSION_WITHOUT_DATASET);
        std::fs::write(dir.path().join(c.file_name()), bytes).unwrap();
        let (read, _) = Checkpoint::load_newest(dir.path(), 3, "mnist")
            .unwrap()
            .unwrap();
        assert_eq!(
            read,
            Checkpoint {
                dataset: String::new(),
                sampling: None,
                ..c
            }
        );
    }

    #[test]
    fn the_sampling_settings_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let written = Sampling {
            batch_size: 1 << 33,
            world_size: 3,
            seed: u64::MAX,
            train_examples: 1 << 35,
        };
        let c = Checkpoint {
            sampling: Some(written),
            ..sample(2, 9)
        };
        let path = c.save(dir.path()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes[8..12], VERSION.to_le_bytes());
        let (read, _) = Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
            .unwrap()
            .unwrap();
        assert_eq!(read.sampling, Some(written));
        assert_eq!(read, c);
    }

    /// A byte changed anywhere past the format version — the position, the parameters, the
    /// momentum, the checksum itself — fails the SHA-256 check (a changed version reads as
    /// another format, refused or corrupt, never trained on): the file is corrupt, and the resume
    /// falls back to the one before it rather than training on from damaged values (a flipped
    /// bit in a parameter decodes to a finite float that trains on to a broken model).
    #[test]
    fn a_byte_changed_past_the_version_fails_the_checksum_and_the_one_before_is_resumed() {
        let dir = tempfile::tempdir().unwrap();
        sample(1, 0).save(dir.path()).unwrap();
        let newest = sample(2, 0).save(dir.path()).unwrap();
        let bytes = std::fs::read(&newest).unwrap();
        assert_eq!(bytes[8..12], VERSION.to_le_bytes());
        for at in [
            12,
            20,
            bytes.len() / 2,
            bytes.len() - CHECKSUM_LEN - 1,
            bytes.len() - 1,
        ] {
            let mut changed = bytes.clone();
            changed[at] ^= 0x10;
            let err = Checkpoint::decode(&changed).unwrap_err();
            assert!(
                err.contains("SHA-256 checksum does not match"),
                "byte {at}: {err}"
            );
            std::fs::write(&newest, &changed).unwrap();
            let (read, path) = Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
                .unwrap()
                .unwrap();
            assert_eq!(
                (read, path.file_name()),
                (sample(1, 0), Some(sample(1, 0).file_name().as_ref())),
                "byte {at}"
            );
        }
    }

    /// A file of the format before the checksum, as the previous trainer wrote it (byte for
    /// byte), is read as before, sampling settings included.
    #[test]
    fn a_version_3_file_is_read_without_a_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let c = sample(3, 1);
        let bytes = written_by_hand(&c, VERSION_WITHOUT_CHECKSUM);
        std::fs::write(dir.path().join(c.file_name()), &bytes).unwrap();
        let (read, _) = Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
            .unwrap()
            .unwrap();
        assert_eq!(read, c);
    }

    /// A file of the format before the sampling settings, as the previous trainer wrote it
    /// (byte for byte, not through [`Checkpoint::save`]), is read without them.
    #[test]
    fn a_version_2_file_is_read_without_sampling_settings() {
        let dir = tempfile::tempdir().unwrap();
        let c = sample(3, 1);
        let bytes = written_by_hand(&c, VERSION_WITHOUT_SAMPLING);
        let path = dir.path().join(c.file_name());
        std::fs::write(&path, &bytes).unwrap();
        let (read, _) = Checkpoint::load_newest(dir.path(), 3, "fashion-mnist")
            .unwrap()
            .unwrap();
        let unrecorded = Checkpoint {
            sampling: None,
            ..c
        };
        assert_eq!(read, unrecorded);
        // Nothing to compare: resumed as before, whatever this run's settings.
        let other = Sampling {
            batch_size: 1,
            ..SAMPLING
        };
        read.check_sampling(&path, other).unwrap();
        // Saved without them, it is written in that format again.
        std::fs::remove_file(&path).unwrap();
        unrecorded.save(dir.path()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }

    /// Mid-epoch, a step counts in the batch size, world size, seed and training split length
    /// it was written with:
    /// other settings are refused, naming each that differs with both values. At an epoch
    /// boundary any settings resume it.
    #[test]
    fn a_mid_epoch_checkpoint_resumes_only_under_its_sampling_settings() {
        let path = Path::new("/ckpt/checkpoint-000002-00000005.bin");
        let mid_epoch = sample(2, 5);
        mid_epoch.check_sampling(path, SAMPLING).unwrap();
        let this_run = Sampling {
            batch_size: 32,
            world_size: 4,
            ..SAMPLING
        };
        let err = mid_epoch.check_sampling(path, this_run).unwrap_err();
        assert!(
            matches!(&err, CheckpointError::OtherSampling { written, this_run: run, .. }
                if *written == SAMPLING && *run == this_run),
            "{err}"
        );
        let text = err.to_string();
        for part in [
            "checkpoint /ckpt/checkpoint-000002-00000005.bin was written 5 step(s) into epoch 2 \
             with batch-size 64 and world size 2, but this run has batch-size 32 and world size 4",
            "train with batch-size 64 and world size 2 to resume it, or remove it or choose \
             another checkpoint directory",
        ] {
            assert!(text.contains(part), "{text}");
        }
        assert!(!text.contains("seed 1"), "the seed is the same: {text}");
        let reseeded = Sampling {
            seed: 7,
            ..SAMPLING
        };
        let text = mid_epoch
            .check_sampling(path, reseeded)
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("with seed 1099511627776, but this run has seed 7"),
            "{text}"
        );
        let truncated = Sampling {
            train_examples: 600,
            ..SAMPLING
        };
        let text = mid_epoch
            .check_sampling(path, truncated)
            .unwrap_err()
            .to_string();
        assert!(
            text.contains(
                "with 60000 training examples (max-train-samples), but this run has 600 \
                 training examples (max-train-samples)"
            ),
            "{text}"
        );
        sample(3, 0).check_sampling(path, this_run).unwrap();
    }
}
