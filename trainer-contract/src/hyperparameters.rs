//! Training hyperparameters, from flags or SageMaker's `hyperparameters.json`.
//!
//! SageMaker writes every value as a string; the SageMaker Python SDK JSON-encodes them first,
//! so `64` arrives as `"64"` and `"gloo"` as `"\"gloo\""` (sagemaker-python-sdk,
//! `EstimatorBase.set_hyperparameters` → `json.dumps`). Values that parse as JSON are decoded,
//! others are taken verbatim. Keys accept `-` or `_` (`batch-size` = `batch_size`); keys
//! starting with `sagemaker_` belong to the SDK and are ignored, and so is
//! `_tuning_objective_metric`, which a `HyperparameterTuner` adds to every trial's
//! hyperparameters (sagemaker-python-sdk, `tuner.py`: `HyperparameterTuner.TUNING_OBJECTIVE`,
//! one of its reserved keys).

use std::collections::BTreeMap;

use crate::DatasetKind;

/// A hyperparameter the trainer would refuse. Every variant names the key and where it came
/// from (`--hp`, a `hyperparameters.json` path, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HyperparameterError {
    /// A value breaks its key's rule.
    #[error(
        "hyperparameter \"{key}\" = {} (from {origin}) must be {rule}",
        quoted(value)
    )]
    Invalid {
        /// The key as given.
        key: String,
        /// The value as given, before any JSON decoding.
        value: String,
        /// Where it came from: `--hp`, a `hyperparameters.json` path, ...
        origin: String,
        /// What the value must be, e.g. `a positive integer`.
        rule: String,
    },
    /// A name the trainer does not know.
    #[error(
        "unknown hyperparameter {} (from {origin}); known: {known}",
        quoted(key)
    )]
    Unknown {
        /// The key as given.
        key: String,
        /// Where it came from.
        origin: String,
        /// The known keys, comma-separated.
        known: String,
    },
    /// Two keys name the same hyperparameter (`batch-size` and `batch_size`, or one key
    /// twice): which value was meant cannot be known.
    #[error(
        "hyperparameter {} (from {origin}) is given twice{}; keep one",
        quoted(second),
        also_as(first, second)
    )]
    Duplicate {
        /// The key seen first.
        first: String,
        /// The key seen second, naming the same hyperparameter.
        second: String,
        /// Where they came from.
        origin: String,
    },
    /// `hyperparameters.json` is not a JSON object.
    #[error("{origin}: {detail}")]
    Json {
        /// The file's path.
        origin: String,
        /// The JSON parser's message.
        detail: String,
    },
}

/// ` (also as "batch-size")` where the two keys of a [`HyperparameterError::Duplicate`] are
/// spelled differently; nothing where it is one key twice.
fn also_as(first: &str, second: &str) -> String {
    match first == second {
        true => String::new(),
        false => format!(" (also as {})", quoted(first)),
    }
}

/// The longest value an error quotes whole, in characters.
const QUOTED_MAX: usize = 64;

/// `value` as an error quotes it: whole (Rust's `{:?}`) up to 64 characters, else its start
/// and its length, so one long key or value does not fill the screen.
pub fn quoted(value: &str) -> String {
    let n = value.chars().count();
    match n > QUOTED_MAX {
        false => format!("{value:?}"),
        true => {
            let start: String = value.chars().take(QUOTED_MAX).collect();
            format!("{start:?}… ({n} characters)")
        }
    }
}

/// The hyperparameters of a training run. Serialised (for the ranks' handshake, which names a
/// differing field) under the names users give them: `batch-size`, `test-batch-size`, ….
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Hyperparameters {
    /// Per-rank training batch size (PyTorch DDP semantics: the global batch is this × world size).
    pub batch_size: usize,
    /// Per-rank evaluation batch size.
    pub test_batch_size: usize,
    /// Number of passes over the training set.
    pub epochs: u64,
    /// SGD learning rate.
    pub lr: f32,
    /// SGD momentum (dampening 0, as PyTorch).
    pub momentum: f32,
    /// Seed of parameter initialisation, shuffling and augmentation.
    pub seed: u64,
    /// Log a training line every this many steps (0: only per epoch).
    pub log_interval: u64,
    /// Collective backend of the reference job: `gloo` (CPU) or `nccl` (GPU, `cuda` feature).
    pub backend: String,
    /// Network architecture; only the reference `custom` network is implemented.
    pub model_type: String,
    /// Dataset kind, when the files do not say (IDX files are MNIST or Fashion-MNIST).
    pub dataset: Option<DatasetKind>,
    /// Use only the first this many training examples (quick runs and tests).
    pub max_train_samples: Option<usize>,
}

impl Default for Hyperparameters {
    /// Defaults chosen for Fashion-MNIST with 2 ranks (global batch 64). Measured after
    /// epochs 1 and 2 (1 rank × batch 64, seed 1): lr 0.02 / momentum 0.9 → 0.852, 0.871;
    /// lr 0.01 / 0.9 → 0.829, 0.856; lr 0.1 / 0.5 → 0.837, 0.851; lr 0.05 / 0.9 (2 × 32) →
    /// 0.834, 0.844; the blog's lr 0.01 / 0.5 → 0.75, 0.81.
    fn default() -> Self {
        Self {
            batch_size: 32,
            test_batch_size: 1000,
            epochs: 2,
            lr: 0.02,
            momentum: 0.9,
            seed: 1,
            log_interval: 100,
            backend: "gloo".into(),
            model_type: "custom".into(),
            dataset: None,
            max_train_samples: None,
        }
    }
}

/// The key a SageMaker `HyperparameterTuner` adds to every trial's `hyperparameters.json`
/// (the objective metric's name); reserved by the SDK (sagemaker-python-sdk, `tuner.py`,
/// `HyperparameterTuner.TUNING_OBJECTIVE`), not the trainer's, so it is ignored.
pub const TUNING_OBJECTIVE_KEY: &str = "_tuning_objective_metric";

/// Whether `key` of SageMaker's `hyperparameters.json` belongs to SageMaker rather than the
/// trainer: `sagemaker_*` (the SDK's own settings) or [`TUNING_OBJECTIVE_KEY`].
pub fn is_sagemaker_reserved(key: &str) -> bool {
    key.starts_with("sagemaker_") || key == TUNING_OBJECTIVE_KEY
}

/// Names accepted, in their canonical `-` form.
pub const KNOWN: [&str; 11] = [
    "batch-size",
    "test-batch-size",
    "epochs",
    "lr",
    "momentum",
    "seed",
    "log-interval",
    "backend",
    "model-type",
    "dataset",
    "max-train-samples",
];

/// The hyperparameters for `kfaws-trainer train --help`: one line each,
/// with its default (from [`Hyperparameters::default`]) and meaning, in
/// [`KNOWN`]'s order.
pub fn help() -> String {
    let d = Hyperparameters::default();
    let rows = [
        (
            "batch-size",
            d.batch_size.to_string(),
            "images per rank per step (also batch_size)",
        ),
        (
            "test-batch-size",
            d.test_batch_size.to_string(),
            "images per evaluation batch",
        ),
        (
            "epochs",
            d.epochs.to_string(),
            "passes over the training set",
        ),
        ("lr", d.lr.to_string(), "SGD learning rate, > 0"),
        (
            "momentum",
            d.momentum.to_string(),
            "SGD momentum in [0, 1), dampening 0 as PyTorch's",
        ),
        (
            "seed",
            d.seed.to_string(),
            "initialisation, shuffling (seed + epoch) and augmentation",
        ),
        (
            "log-interval",
            d.log_interval.to_string(),
            "a training line every N steps (0: per epoch)",
        ),
        (
            "backend",
            d.backend.clone(),
            "gloo (CPU) or nccl (a build with --features cuda)",
        ),
        (
            "model-type",
            d.model_type.clone(),
            "the reference network (the only one)",
        ),
        (
            "dataset",
            "from the files".into(),
            "mnist, fashion-mnist or cifar10, where IDX files do not say",
        ),
        (
            "max-train-samples",
            "all".into(),
            "train on the first N examples only",
        ),
    ];
    let mut text = String::from(
        "Hyperparameters (--hp KEY=VALUE, repeatable, or SageMaker's hyperparameters.json):\n",
    );
    for (key, default, meaning) in rows {
        text.push_str(&format!("  {key:<18} {meaning} [default: {default}]\n"));
    }
    text
}

impl Hyperparameters {
    /// Applies one `key = value` (raw text, JSON-decoded first when it parses as JSON), naming
    /// `origin` in errors.
    ///
    /// # Errors
    /// [`HyperparameterError::Unknown`] for an unknown key, [`HyperparameterError::Invalid`]
    /// for a value breaking its rule.
    pub fn set(&mut self, key: &str, value: &str, origin: &str) -> Result<(), HyperparameterError> {
        let canonical = key.replace('_', "-");
        let text = decode(value);
        let err = |rule: &str| HyperparameterError::Invalid {
            key: key.to_string(),
            value: value.to_string(),
            origin: origin.to_string(),
            rule: rule.to_string(),
        };
        let positive = |t: &str| {
            t.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| err("a positive integer"))
        };
        match canonical.as_str() {
            "batch-size" => self.batch_size = positive(&text)?,
            "test-batch-size" => self.test_batch_size = positive(&text)?,
            "epochs" => self.epochs = positive(&text)? as u64,
            "max-train-samples" => self.max_train_samples = Some(positive(&text)?),
            "lr" => {
                self.lr = text
                    .parse()
                    .ok()
                    .filter(|v: &f32| v.is_normal() && *v > 0.0)
                    .ok_or_else(|| {
                        err("a number > 0 that a 32-bit float holds (about 1.2e-38 to 3.4e38)")
                    })?
            }
            "momentum" => {
                self.momentum = text
                    .parse()
                    .ok()
                    .filter(|v: &f32| (0.0..1.0).contains(v))
                    .ok_or_else(|| err("a number in [0, 1)"))?
            }
            "seed" => {
                self.seed = text
                    .parse()
                    .map_err(|_| err("an integer from 0 to 18446744073709551615"))?
            }
            "log-interval" => {
                self.log_interval = text.parse().map_err(|_| err("an integer ≥ 0"))?
            }
            "backend" => match text.as_str() {
                "gloo" | "nccl" => self.backend = text,
                _ => return Err(err("gloo (CPU) or nccl (GPU)")),
            },
            "model-type" => match text.as_str() {
                "custom" => self.model_type = text,
                _ => {
                    return Err(err(
                        "custom (the reference network; no other architecture is built in)",
                    ))
                }
            },
            "dataset" => {
                self.dataset = Some(
                    DatasetKind::parse(&text)
                        .ok_or_else(|| err("mnist, fashion-mnist or cifar10"))?,
                )
            }
            _ => {
                return Err(HyperparameterError::Unknown {
                    key: key.to_string(),
                    origin: origin.to_string(),
                    known: KNOWN.join(", "),
                })
            }
        }
        Ok(())
    }

    /// Applies SageMaker's `hyperparameters.json` (an object of strings, or of JSON values
    /// written by hand), skipping SageMaker's reserved keys ([`is_sagemaker_reserved`]:
    /// `sagemaker_*` and a tuning job's `_tuning_objective_metric`).
    ///
    /// # Errors
    /// [`HyperparameterError::Json`] when it is not a JSON object;
    /// [`HyperparameterError::Duplicate`] when a key appears twice, in either spelling (JSON
    /// leaves duplicate names to the reader, RFC 8259 §4; a map would keep the last silently);
    /// as [`Self::set`] per key.
    pub fn apply_sagemaker_json(
        &mut self,
        json: &str,
        origin: &str,
    ) -> Result<(), HyperparameterError> {
        let Members(map) = serde_json::from_str(json).map_err(|e| HyperparameterError::Json {
            origin: origin.to_string(),
            detail: crate::json_error(json, &e),
        })?;
        if let Some((first, second)) = find_duplicate(map.iter().map(|(k, _)| k.as_str())) {
            return Err(HyperparameterError::Duplicate {
                first: first.to_string(),
                second: second.to_string(),
                origin: origin.to_string(),
            });
        }
        for (key, value) in map {
            if is_sagemaker_reserved(&key) {
                continue;
            }
            let raw = match value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            self.set(&key, &raw, origin)?;
        }
        Ok(())
    }
}

/// A JSON object's members in document order, duplicates kept.
struct Members(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MembersVisitor)
    }
}

struct MembersVisitor;

impl<'de> serde::de::Visitor<'de> for MembersVisitor {
    type Value = Members;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object of hyperparameters")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
        let mut members = Vec::new();
        while let Some(member) = map.next_entry()? {
            members.push(member);
        }
        Ok(Members(members))
    }
}

/// The first key of `keys` naming a hyperparameter an earlier key already named (keys are
/// compared in their canonical `-` form: `batch_size` names `batch-size`), with that earlier
/// key: `(first, second)`.
pub fn find_duplicate<'a>(keys: impl IntoIterator<Item = &'a str>) -> Option<(&'a str, &'a str)> {
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    for key in keys {
        if let Some(first) = seen.insert(key.replace('_', "-"), key) {
            return Some((first, key));
        }
    }
    None
}

/// `"\"gloo\""` → `gloo`, `"64"` → `64`, `gloo` → `gloo`.
fn decode(value: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(serde_json::Value::Number(n)) => n.to_string(),
        Ok(serde_json::Value::Bool(b)) => b.to_string(),
        _ => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn serialised_fields_are_named_as_users_spell_them() {
        let json = serde_json::to_value(super::Hyperparameters::default()).unwrap();
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        for key in &keys {
            assert!(super::KNOWN.contains(&key.as_str()), "{key} in {keys:?}");
        }
        assert!(json.get("batch-size").is_some() && json.get("batch_size").is_none());
    }

    #[test]
    fn help_lists_every_known_hyperparameter_in_order() {
        let help = super::help();
        let listed: Vec<&str> = help
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(listed, super::KNOWN);
        assert!(help.contains("[default: 0.02]"), "{help}");
    }

    use super::*;

    #[test]
    fn sagemaker_json_decodes_sdk_encoded_values_and_both_key_spellings() {
        let mut hp = Hyperparameters::default();
        let json = r#"{"backend": "\"gloo\"", "batch_size": "128", "epochs": "3", "lr": "0.01",
            "model-type": "\"custom\"", "test-batch-size": 500, "momentum": "0.5",
            "sagemaker_program": "\"train.py\"", "sagemaker_region": "\"us-west-2\""}"#;
        hp.apply_sagemaker_json(json, "hyperparameters.json")
            .unwrap();
        assert_eq!(hp.backend, "gloo");
        assert_eq!(hp.batch_size, 128);
        assert_eq!(hp.epochs, 3);
        assert_eq!(hp.lr, 0.01);
        assert_eq!(hp.momentum, 0.5);
        assert_eq!(hp.test_batch_size, 500);
        hp.set("batch-size", "64", "flag").unwrap();
        assert_eq!(hp.batch_size, 64);
    }

    #[test]
    fn bad_values_name_key_value_origin_and_rule() {
        let mut hp = Hyperparameters::default();
        let err = hp
            .set("batch-size", "\"0\"", "hyperparameters.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"batch-size\""), "{err}");
        assert!(err.contains("hyperparameters.json"), "{err}");
        assert!(err.contains("positive integer"), "{err}");
        let err = hp.set("lr", "fast", "flag").unwrap_err().to_string();
        assert!(err.contains("> 0"), "{err}");
        let err = hp.set("momentum", "1.5", "flag").unwrap_err().to_string();
        assert!(err.contains("[0, 1)"), "{err}");
        // A long value is quoted by its start and its length.
        let long = "9".repeat(300);
        let err = hp
            .set("lr", &format!("x{long}"), "flag")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "= \"x{}\"… (301 characters) (from flag)",
                &long[..63]
            )),
            "{err}"
        );
        assert!(!err.contains(&long[..100]), "{err}");
        let err = hp
            .set("model-type", "resnet", "flag")
            .unwrap_err()
            .to_string();
        assert!(err.contains("custom"), "{err}");
    }

    #[test]
    fn unknown_key_lists_the_known_ones() {
        let err = Hyperparameters::default()
            .set("learning-rate", "0.1", "x")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("learning-rate") && err.contains("batch-size, test-batch-size"),
            "{err}"
        );
    }

    #[test]
    fn both_spellings_of_a_key_are_refused_not_resolved_by_order() {
        let err = Hyperparameters::default()
            .apply_sagemaker_json(r#"{"batch-size": "32", "batch_size": "64"}"#, "hp.json")
            .unwrap_err();
        assert_eq!(
            err,
            HyperparameterError::Duplicate {
                first: "batch-size".into(),
                second: "batch_size".into(),
                origin: "hp.json".into()
            }
        );
        assert_eq!(
            find_duplicate(["seed", "lr", "seed"]),
            Some(("seed", "seed"))
        );
        assert_eq!(find_duplicate(["seed", "lr", "momentum"]), None);
        // The message names the other spelling only where there is one.
        assert_eq!(
            err.to_string(),
            "hyperparameter \"batch_size\" (from hp.json) is given twice (also as \
             \"batch-size\"); keep one"
        );
        let twice = HyperparameterError::Duplicate {
            first: "seed".into(),
            second: "seed".into(),
            origin: "--hp".into(),
        };
        assert_eq!(
            twice.to_string(),
            "hyperparameter \"seed\" (from --hp) is given twice; keep one"
        );
    }

    #[test]
    fn a_key_given_twice_in_the_same_spelling_is_refused() {
        let err = Hyperparameters::default()
            .apply_sagemaker_json(r#"{"seed": "1", "lr": "0.1", "seed": "2"}"#, "hp.json")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "hyperparameter \"seed\" (from hp.json) is given twice; keep one"
        );
        let mut hp = Hyperparameters::default();
        hp.apply_sagemaker_json(r#"{"seed": "7", "sagemaker_region": "\"x\""}"#, "hp.json")
            .unwrap();
        assert_eq!(hp.seed, 7);
    }

    #[test]
    fn a_tuning_jobs_objective_metric_key_is_ignored() {
        // What a HyperparameterTuner trial's hyperparameters.json holds (SDK-encoded).
        let json = r#"{"_tuning_objective_metric": "\"test_acc\"", "lr": "0.05",
            "sagemaker_estimator_module": "\"sagemaker.estimator\""}"#;
        let mut hp = Hyperparameters::default();
        hp.apply_sagemaker_json(json, "hp.json").unwrap();
        assert_eq!(hp.lr, 0.05);
        assert!(is_sagemaker_reserved("_tuning_objective_metric"));
        // Only that exact key: other names starting with `_` are still unknown.
        let err = Hyperparameters::default()
            .apply_sagemaker_json(r#"{"_tuning_other": "1"}"#, "hp.json")
            .unwrap_err();
        assert!(matches!(err, HyperparameterError::Unknown { .. }), "{err}");
    }

    #[test]
    fn not_an_object_is_a_json_error() {
        let err = Hyperparameters::default()
            .apply_sagemaker_json("[1]", "hp.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("hp.json"), "{err}");
    }
}
