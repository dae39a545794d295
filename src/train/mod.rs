//! `kfaws train`: one training request, run at the user's choice on this
//! machine, as a Kubeflow PyTorchJob on the cluster, or as a SageMaker
//! training job. The job name and the hyperparameters are the same for all
//! three; each runtime module turns them into its contract.

pub mod capacity;
pub mod data;
pub mod local;
pub mod metrics;
pub mod name;
pub mod pytorchjob;
pub mod resume;

pub use metrics::{is_metrics_line, FinalMetrics};

use std::collections::BTreeMap;
use std::fmt;

use std::path::{Path, PathBuf};

/// Where a training job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// Trainer processes on this machine, under the PyTorchJob environment contract.
    Local,
    /// A Kubeflow `PyTorchJob` (kubeflow.org/v1) in the deployment's user namespace.
    Kubernetes,
    /// A SageMaker training job with the pushed trainer image.
    Sagemaker,
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Local => "local",
            Self::Kubernetes => "kubernetes",
            Self::Sagemaker => "sagemaker",
        })
    }
}

/// The hyperparameters every runtime passes to the trainer, with the
/// reference job's names (`batch-size`, `epochs`, `lr`, `backend`), as
/// strings (SageMaker's `HyperParameters` are a string map), with `extra`
/// pairs (`--hp KEY=VALUE`; `kfaws train` refuses those naming a flag's key).
pub fn hyperparameters(
    epochs: u32,
    batch_size: u32,
    lr: f64,
    backend: &str,
    extra: &[(String, String)],
) -> BTreeMap<String, String> {
    // f64's Display never uses an exponent: 1e300 would be 301 digits.
    let lr = if lr == 0.0 || (1e-4..1e6).contains(&lr.abs()) {
        lr.to_string()
    } else {
        format!("{lr:e}")
    };
    let mut h = BTreeMap::from([
        ("epochs".to_string(), epochs.to_string()),
        ("batch-size".to_string(), batch_size.to_string()),
        ("lr".to_string(), lr),
        ("backend".to_string(), backend.to_string()),
    ]);
    h.extend(extra.iter().cloned());
    h
}

/// The keys [`hyperparameters`] sets from `kfaws train`'s own flags (`--epochs`, ...).
pub const FLAG_KEYS: [&str; 4] = ["epochs", "batch-size", "lr", "backend"];

/// Checks `hyperparameters` (as [`hyperparameters`] builds them from the flags and the `--hp`
/// pairs `extra`) with the bundled trainer's own parser
/// ([`kfaws_trainer_contract::Hyperparameters::set`]), so that a misspelt name, a value out
/// of range or a key given twice is refused before a job exists instead of failing every
/// replica of it (or silently taking one of the values).
///
/// # Errors
/// Every key the trainer would refuse, in key order after a duplicate: a key given twice in
/// `extra` (in either spelling, `batch-size` or `batch_size`; the first such pair), unknown
/// (the message lists the known names) or a value breaking its rule (the message gives the
/// rule), each naming the flag it came from.
pub fn check_hyperparameters(
    hyperparameters: &BTreeMap<String, String>,
    extra: &[(String, String)],
) -> Result<(), Vec<kfaws_trainer_contract::HyperparameterError>> {
    let mut problems = Vec::new();
    if let Some((first, second)) =
        kfaws_trainer_contract::find_duplicate(extra.iter().map(|(k, _)| k.as_str()))
    {
        problems.push(kfaws_trainer_contract::HyperparameterError::Duplicate {
            first: first.to_string(),
            second: second.to_string(),
            origin: "--hp".into(),
        });
    }
    let mut parsed = kfaws_trainer_contract::Hyperparameters::default();
    for (key, value) in hyperparameters {
        let origin = if FLAG_KEYS.contains(&key.as_str()) {
            format!("--{key}")
        } else {
            "--hp".to_string()
        };
        match parsed.set(key, value, &origin) {
            Ok(()) => {}
            // The keys `--hp` accepts: those of the flags are refused there.
            Err(kfaws_trainer_contract::HyperparameterError::Unknown { key, origin, known }) => {
                let known: Vec<&str> = known
                    .split(", ")
                    .filter(|k| !FLAG_KEYS.contains(k))
                    .collect();
                let flags: Vec<String> = FLAG_KEYS.iter().map(|k| format!("--{k}")).collect();
                problems.push(kfaws_trainer_contract::HyperparameterError::Unknown {
                    known: format!(
                        "{}; and with their own flags: {}",
                        known.join(", "),
                        flags.join(", ")
                    ),
                    key,
                    origin,
                });
            }
            Err(e) => problems.push(e),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Whether a SageMaker instance type has NVIDIA GPUs, as `backend=nccl` (CUDA) needs: the P
/// and G families (`ml.p3.2xlarge`, `ml.g5.xlarge`, ...) except `g4ad`, whose GPUs are AMD's
/// (Amazon EC2 "Accelerated computing" instance types; Inf, Trn and DL1 carry AWS Inferentia,
/// Trainium and Habana accelerators).
pub fn has_nvidia_gpu(instance_type: &str) -> bool {
    let Some(family) = instance_type
        .strip_prefix("ml.")
        .and_then(|t| t.split('.').next())
    else {
        return false;
    };
    let mut chars = family.chars();
    matches!(chars.next(), Some('p' | 'g'))
        && chars.next().is_some_and(|c| c.is_ascii_digit())
        && family != "g4ad"
}

/// Checks a Kubernetes resource quantity for a CPU or memory request
/// (`--cpu`, `--memory`): a positive decimal number, then an optional
/// binary-SI (`Ki` … `Ei`), decimal-SI (`m`, `k`, `M` … `E`) or exponent
/// (`e3`, `E-2`) suffix — the grammar of `resource.Quantity`
/// (k8s.io/apimachinery `pkg/api/resource/quantity.go`), without a sign,
/// since a request is never negative, and not zero. `2GB` and `abc` are
/// refused here rather than by the API server after the job exists.
///
/// # Errors
/// A message stating the rule, with examples.
pub fn parse_quantity(s: &str) -> Result<String, String> {
    let grammar = regex_lite::Regex::new(
        r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$",
    )
    .expect("valid regex");
    let number = s
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()
        .unwrap_or_default();
    if s.strip_prefix('-')
        .is_some_and(|rest| grammar.is_match(rest))
    {
        return Err(format!(
            "{s:?} is negative; a request is a positive quantity, e.g. 500m, 2, 2Gi"
        ));
    }
    if !grammar.is_match(s) {
        return Err(format!(
            "{s:?} is not a Kubernetes quantity: a number with an optional suffix Ki, Mi, Gi, Ti, \
             Pi, Ei (powers of 1024), m, k, M, G, T, P, E (powers of 1000) or an exponent, e.g. \
             500m, 2, 2Gi, 512Mi"
        ));
    }
    if !number.chars().any(|c| matches!(c, '1'..='9')) {
        return Err(format!("{s:?} is zero; a replica needs some"));
    }
    Ok(s.to_string())
}

/// The smallest memory request (`--memory`) a replica is given: 128 MiB.
/// The trainer's peak resident set measured 100 MB training Fashion-MNIST
/// (`/usr/bin/time -v`, one rank, full epoch); below this the pod would be
/// OOM-killed (CIFAR-10 needs more: its training set alone is 150 MB).
pub const MIN_MEMORY_BYTES: f64 = 128.0 * 1024.0 * 1024.0;

/// The bytes a quantity `parse_quantity` accepted stands for (`2Gi` →
/// 2 147 483 648; `500m` → 0.5); `None` for anything else.
pub fn quantity_value(s: &str) -> Option<f64> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp => 10f64.powi(exp.get(1..)?.parse().ok()?),
    };
    Some(number * factor)
}

/// Checks a memory request: a quantity ([`parse_quantity`]) of at least
/// [`MIN_MEMORY_BYTES`]. A quantity without a suffix is bytes, so
/// `--memory 2` (meant as 2 GiB) is refused with the suffix it lacked.
///
/// # Errors
/// A message stating the rule and, for a plain number, the likely intent.
pub fn parse_memory(s: &str) -> Result<String, String> {
    let s = parse_quantity(s)?;
    let bytes = quantity_value(&s).unwrap_or_default();
    if bytes < MIN_MEMORY_BYTES {
        let hint = if s.chars().all(|c| c.is_ascii_digit() || c == '.') {
            format!(" (a quantity without a suffix is bytes: did you mean {s}Gi?)")
        } else {
            String::new()
        };
        return Err(format!(
            "{s:?} is {bytes} bytes, below the 128Mi a trainer replica needs (it measured 100 MB \
             on Fashion-MNIST){hint}"
        ));
    }
    Ok(s)
}

/// Checks that `workers` local ranks fit in `available` bytes of memory:
/// each is a process of up to [`MIN_MEMORY_BYTES`] (the trainer's measured
/// peak rounded up). Without it, `--workers 500` starts 500 processes and
/// the kernel's OOM killer picks among everything on the machine.
///
/// # Errors
/// A message with the memory needed, the memory available and how many
/// ranks fit.
pub fn local_room(workers: u32, available: u64) -> Result<(), String> {
    let fits = (available as f64 / MIN_MEMORY_BYTES).floor() as u64;
    if u64::from(workers) <= fits {
        return Ok(());
    }
    Err(format!(
        "--workers {workers}: {workers} local ranks need about {} MiB (128 MiB each, the \
         trainer's measured peak rounded up) and this machine has {} MiB available, room for \
         {fits}; use fewer, or --runtime kubernetes / sagemaker for a larger world size",
        u64::from(workers) * 128,
        available / (1024 * 1024)
    ))
}

/// The collective backends a `kfaws-trainer` build trains with, from its
/// `--version` line (`kfaws-trainer 0.1.0 (backends: gloo nccl)`, see
/// `kfaws_trainer::VERSION`); `None` for a trainer that does not say.
pub fn trainer_backends(version: &str) -> Option<Vec<String>> {
    let (_, rest) = version.split_once("(backends:")?;
    let (list, _) = rest.split_once(')')?;
    Some(list.split_whitespace().map(str::to_string).collect())
}

/// The version line of a `kfaws-trainer --version` run (`kfaws-trainer
/// 0.1.0 (backends: gloo)`), from whether it exited 0 and what it printed:
/// so that a `--trainer` that is some other program is refused as such,
/// not blamed on the data it is then asked to check. Pure.
///
/// # Errors
/// A message naming `trainer` and what it printed.
pub fn trainer_version(trainer: &Path, succeeded: bool, stdout: &[u8]) -> Result<String, String> {
    let printed = String::from_utf8_lossy(stdout);
    let line = printed.lines().next().unwrap_or("").trim();
    if succeeded && line.starts_with("kfaws-trainer ") {
        return Ok(line.to_string());
    }
    Err(format!(
        "the trainer binary {} is not a kfaws-trainer: `{} --version` {}; pass --trainer with \
         the kfaws-trainer built beside kfaws (`cargo build --workspace --bins`)",
        trainer.display(),
        trainer.display(),
        match (succeeded, line.is_empty()) {
            (_, true) => "printed nothing".to_string(),
            (true, false) => format!("printed {line:?}"),
            (false, false) => format!("failed, printing {line:?}"),
        }
    ))
}

/// Parses `KEY=VALUE` (a `--hp` flag).
///
/// # Errors
/// A message saying what is missing when `s` has no `=` or an empty key; it
/// does not repeat `s`, which clap's error already quotes.
pub fn parse_hyperparameter(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        Some(_) => Err("the key before '=' is empty; write KEY=VALUE, e.g. momentum=0.9".into()),
        None => Err("there is no '=' in it; write KEY=VALUE, e.g. momentum=0.9".into()),
    }
}

/// The `kfaws-trainer` binary: `explicit` if given, else the one beside
/// `kfaws` itself (how `cargo build` and releases lay them out).
///
/// # Errors
/// A message naming the paths looked at.
pub fn trainer_binary(explicit: Option<&Path>, kfaws_exe: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => kfaws_exe.with_file_name("kfaws-trainer"),
    };
    match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => Err(format!(
            "the trainer binary {} is a directory; pass --trainer with the path of the \
             kfaws-trainer binary itself",
            path.display()
        )),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Err(format!(
            "the trainer binary {} is not executable; `chmod +x {}`",
            path.display(),
            path.display()
        )),
        Ok(_) => Ok(path),
        // A bare name is a path relative to the working directory, not a command on PATH.
        Err(_) if explicit.is_some() && path.components().count() == 1 => Err(format!(
            "the trainer binary {} does not exist in the working directory; --trainer takes a \
             path, not a command name (`--trainer \"$(command -v {})\"` for one on PATH)",
            path.display(),
            path.display()
        )),
        Err(_) => Err(format!(
            "the trainer binary {} does not exist; build it (`cargo build --workspace --bins`) \
             or pass --trainer PATH",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_trainer_path_that_cannot_run_says_why() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let kfaws = dir.path().join("kfaws");
        let e = super::trainer_binary(Some(dir.path()), &kfaws).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let file = dir.path().join("kfaws-trainer");
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = super::trainer_binary(Some(&file), &kfaws).unwrap_err();
        assert!(e.contains("is not executable; `chmod +x "), "{e}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(super::trainer_binary(None, &kfaws).unwrap(), file);
        let e = super::trainer_binary(Some(std::path::Path::new("kfaws-trainer-x")), &kfaws)
            .unwrap_err();
        assert!(e.contains("takes a path, not a command name"), "{e}");
        let e = super::trainer_binary(None, &dir.path().join("sub/kfaws")).unwrap_err();
        assert!(e.contains("does not exist; build it"), "{e}");
    }

    #[test]
    fn only_a_kfaws_trainer_is_taken_for_the_trainer() {
        let path = std::path::Path::new("/usr/bin/python3");
        assert_eq!(
            super::trainer_version(path, true, b"kfaws-trainer 0.1.0 (backends: gloo)\n"),
            Ok("kfaws-trainer 0.1.0 (backends: gloo)".to_string())
        );
        let e = super::trainer_version(path, true, b"Python 3.13.5\n").unwrap_err();
        assert!(
            e.starts_with(
                "the trainer binary /usr/bin/python3 is not a kfaws-trainer: \
                 `/usr/bin/python3 --version` printed \"Python 3.13.5\""
            ),
            "{e}"
        );
        let e = super::trainer_version(path, false, b"").unwrap_err();
        assert!(e.contains("--version` printed nothing"), "{e}");
        let e = super::trainer_version(path, false, b"kfaws-trainer 0.1.0").unwrap_err();
        assert!(e.contains("failed, printing"), "{e}");
    }

    #[test]
    fn quantities_follow_the_kubernetes_grammar() {
        for ok in [
            "1", "500m", "0.5", ".5", "2Gi", "512Mi", "1e3", "2E-1", "1.5G", "4k",
        ] {
            assert_eq!(super::parse_quantity(ok).as_deref(), Ok(ok), "{ok}");
        }
        for bad in [
            "abc",
            "2GB",
            "+1",
            "1 Gi",
            "",
            "Gi",
            "2gi",
            "1.2.3",
            "1ki",
            "--workers",
            "-",
        ] {
            let e = super::parse_quantity(bad).unwrap_err();
            assert!(e.contains("is not a Kubernetes quantity"), "{bad}: {e}");
        }
        for negative in ["-1", "-5Gi"] {
            let e = super::parse_quantity(negative).unwrap_err();
            assert!(e.contains("is negative"), "{negative}: {e}");
        }
        for zero in ["0", "0Gi", "0.0", "0m", "0e3"] {
            assert!(
                super::parse_quantity(zero).unwrap_err().contains("is zero"),
                "{zero}"
            );
        }
    }

    #[test]
    fn memory_is_at_least_128_mebibytes_and_a_bare_number_is_bytes() {
        assert_eq!(super::quantity_value("2Gi"), Some(2.0 * 1024f64.powi(3)));
        assert_eq!(super::quantity_value("1.5G"), Some(1.5e9));
        assert_eq!(super::quantity_value("1e3"), Some(1000.0));
        assert_eq!(super::quantity_value("500m"), Some(0.5));
        for ok in ["128Mi", "2Gi", "1G", "134217728", "0.5Gi"] {
            assert_eq!(super::parse_memory(ok).as_deref(), Ok(ok), "{ok}");
        }
        let e = super::parse_memory("2").unwrap_err();
        assert!(
            e.contains("below the 128Mi") && e.contains("did you mean 2Gi?"),
            "{e}"
        );
        let e = super::parse_memory("64Mi").unwrap_err();
        assert!(
            e.contains("below the 128Mi") && !e.contains("did you mean"),
            "{e}"
        );
        assert!(super::parse_memory("2GB")
            .unwrap_err()
            .contains("not a Kubernetes quantity"));
    }

    #[test]
    fn local_ranks_must_fit_in_the_available_memory_at_128_mebibytes_each() {
        let gib = 1024 * 1024 * 1024;
        assert!(super::local_room(8, gib).is_ok());
        let e = super::local_room(9, gib).unwrap_err();
        assert!(
            e.contains("need about 1152 MiB") && e.contains("1024 MiB available, room for 8"),
            "{e}"
        );
        assert!(super::local_room(1, 100 * 1024 * 1024).is_err());
    }

    #[test]
    fn the_backends_of_a_trainer_build_come_from_its_version_line() {
        assert_eq!(
            super::trainer_backends("kfaws-trainer 0.1.0 (backends: gloo)\n"),
            Some(vec!["gloo".to_string()])
        );
        assert_eq!(
            super::trainer_backends("kfaws-trainer 0.1.0 (backends: gloo nccl)"),
            Some(vec!["gloo".to_string(), "nccl".to_string()])
        );
        assert_eq!(super::trainer_backends("kfaws-trainer 0.1.0"), None);
    }

    use super::*;

    #[test]
    fn hyperparameters_are_the_reference_names_and_extras_win() {
        let h = hyperparameters(
            2,
            64,
            0.05,
            "gloo",
            &[
                ("lr".into(), "0.1".into()),
                ("max-train-samples".into(), "600".into()),
            ],
        );
        assert_eq!(h["epochs"], "2");
        assert_eq!(h["batch-size"], "64");
        assert_eq!(h["lr"], "0.1");
        assert_eq!(h["backend"], "gloo");
        assert_eq!(h["max-train-samples"], "600");
        assert_eq!(
            parse_hyperparameter("seed=7").unwrap(),
            ("seed".into(), "7".into())
        );
        let empty_key = parse_hyperparameter("=7").unwrap_err();
        assert!(empty_key.contains("key before '=' is empty"), "{empty_key}");
        let no_equals = parse_hyperparameter("seed").unwrap_err();
        assert!(no_equals.contains("no '='"), "{no_equals}");
        assert!(
            !no_equals.contains("seed"),
            "clap quotes the value already: {no_equals}"
        );
    }

    #[test]
    fn nvidia_gpu_instances_are_the_p_and_g_families_but_g4ad() {
        for t in [
            "ml.p3.2xlarge",
            "ml.p4d.24xlarge",
            "ml.p5.48xlarge",
            "ml.g4dn.xlarge",
            "ml.g5.2xlarge",
            "ml.g6e.xlarge",
        ] {
            assert!(has_nvidia_gpu(t), "{t}");
        }
        for t in [
            "ml.m5.xlarge",
            "ml.c5.2xlarge",
            "ml.g4ad.xlarge",
            "ml.trn1.2xlarge",
            "ml.inf2.xlarge",
            "ml.dl1.24xlarge",
            "p3.2xlarge",
            "ml.gp.x",
        ] {
            assert!(!has_nvidia_gpu(t), "{t}");
        }
    }

    fn check(lr: f64, extra: &[(&str, &str)]) -> Result<(), String> {
        let extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        check_hyperparameters(&hyperparameters(2, 32, lr, "gloo", &extra), &extra).map_err(|e| {
            e.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    #[test]
    fn every_hyperparameter_problem_is_reported_not_only_the_first() {
        let err = check(
            -1.0,
            &[
                ("seed", "abc"),
                ("foo", "1"),
                ("test-batch-size", "8"),
                ("test_batch_size", "8"),
            ],
        )
        .unwrap_err();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 4, "{err}");
        assert!(
            lines[0].contains("\"test_batch_size\"") && lines[0].contains("given twice"),
            "{err}"
        );
        assert!(lines[1].contains("unknown hyperparameter \"foo\""), "{err}");
        assert!(lines[2].contains("\"lr\" = \"-1\" (from --lr)"), "{err}");
        assert!(lines[3].contains("\"seed\" = \"abc\""), "{err}");
    }

    #[test]
    fn a_learning_rate_is_written_without_an_exponent_in_the_usual_range_of_either_sign() {
        let lr = |v: f64| hyperparameters(1, 1, v, "gloo", &[])["lr"].clone();
        assert_eq!(lr(0.02), "0.02");
        assert_eq!(lr(-1.0), "-1");
        assert_eq!(lr(0.0), "0");
        assert_eq!(lr(1e-7), "1e-7");
        assert_eq!(lr(-1e300), "-1e300");
    }

    #[test]
    fn hyperparameters_are_checked_with_the_trainers_rules() {
        check(0.02, &[("momentum", "0.5")]).unwrap();
        let err = check(0.02, &[("learning-rate", "1")]).unwrap_err();
        assert!(
            err.contains("unknown hyperparameter \"learning-rate\"") && err.contains("momentum"),
            "{err}"
        );
        // The keys of kfaws' flags are named as flags, not as keys --hp would refuse.
        let (listed, flags) = err.split_once("; and with their own flags: ").unwrap();
        assert!(
            !listed.contains("epochs") && !listed.contains(" lr") && !listed.contains("backend"),
            "{err}"
        );
        assert!(
            flags.starts_with("--epochs, --batch-size, --lr, --backend"),
            "{err}"
        );
        let err = check(0.02, &[("momentum", "1.5")]).unwrap_err();
        assert!(
            err.contains("\"momentum\"") && err.contains("(from --hp)") && err.contains("[0, 1)"),
            "{err}"
        );
        // The flags' values are named by their flag; f32 cannot hold 1e-50 or 1e300.
        for lr in [1e-50, 1e300] {
            let err = check(lr, &[]).unwrap_err();
            assert!(
                err.contains(&format!(
                    "\"lr\" = \"{lr:e}\" (from --lr) must be a number > 0 that a 32-bit float holds"
                )),
                "{err}"
            );
        }
        // Either spelling twice, or one key twice: refused, not decided by order.
        for pairs in [
            [("seed", "1"), ("seed", "2")],
            [("max-train-samples", "10"), ("max_train_samples", "20")],
        ] {
            let err = check(0.02, &pairs).unwrap_err();
            assert!(err.contains("is given twice"), "{pairs:?}: {err}");
        }
    }
}
