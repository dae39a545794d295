//! Where a training job reads its dataset: `--data`.
//!
//! - `s3://bucket/prefix`: an S3 prefix (SageMaker's `S3DataSource`, type
//!   `S3Prefix`);
//! - `efs:/path`: a directory in the deployment's EFS file system (mounted
//!   through the `efs-claim` claim in Kubernetes, SageMaker's
//!   `FileSystemDataSource`);
//! - anything else: a local directory (the local runtime reads it in place;
//!   SageMaker jobs get it uploaded to the artifact bucket first).

use std::fmt;
use std::path::{Component, Path, PathBuf};

use super::Runtime;

/// A parsed `--data` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    /// `s3://bucket/prefix` (the prefix may be empty).
    S3 {
        /// The bucket.
        bucket: String,
        /// The key prefix, without a leading `/`.
        prefix: String,
    },
    /// An absolute, normalised path inside the deployment's file system.
    Efs(String),
    /// A local directory.
    Local(PathBuf),
}

/// A `--data` value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    /// The value is malformed.
    #[error("--data {value:?}: {rule}")]
    Malformed {
        /// The value given.
        value: String,
        /// What is wrong.
        rule: String,
    },
    /// The runtime cannot read this kind of source.
    #[error("--data {value}: the {runtime} runtime {why}")]
    Unsupported {
        /// The value given.
        value: String,
        /// The runtime.
        runtime: Runtime,
        /// Why, and what to do instead.
        why: &'static str,
    },
    /// The trainer would refuse the directory's contents (`kfaws-trainer check-data`).
    #[error("--data {value}: {reason}")]
    Unreadable {
        /// The value given.
        value: String,
        /// The trainer's reason: the file missing, truncated or with the wrong magic number.
        reason: String,
    },
}

/// What `kfaws-trainer check-data` found in a local directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDataset {
    /// The dataset's name (`fashion-mnist`, `mnist`, `cifar10`).
    pub name: String,
    /// Training examples.
    pub train: usize,
    /// Test examples.
    pub test: usize,
    /// `CxHxW`, as the trainer prints it.
    pub shape: String,
}

impl LocalDataset {
    /// Parses the trainer's line `dataset=NAME train=N test=N shape=CxHxW`; `None` for anything
    /// else.
    pub fn parse(line: &str) -> Option<Self> {
        let mut fields = std::collections::HashMap::new();
        for pair in line.split_whitespace() {
            let (k, v) = pair.split_once('=')?;
            fields.insert(k, v);
        }
        Some(Self {
            name: fields.get("dataset")?.to_string(),
            train: fields.get("train")?.parse().ok()?,
            test: fields.get("test")?.parse().ok()?,
            shape: fields.get("shape")?.to_string(),
        })
    }
}

impl LocalDataset {
    /// What a run with `max-train-samples` = `max` trains on: the first `max` training
    /// examples (the trainer's truncation), said as "600 of 60000 training images"; a `max`
    /// past the training split's size takes all of it, and says so.
    pub fn describe(&self, max: Option<usize>) -> String {
        match max {
            Some(n) if n < self.train => format!(
                "{} ({n} of {} training images (max-train-samples) and {} test images of {})",
                self.name, self.train, self.test, self.shape
            ),
            Some(n) if n > self.train => format!(
                "{} (all {} training images: max-train-samples {n} is more than there are; and \
                 {} test images of {})",
                self.name, self.train, self.test, self.shape
            ),
            _ => self.to_string(),
        }
    }
}

impl fmt::Display for LocalDataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} training and {} test images of {})",
            self.name, self.train, self.test, self.shape
        )
    }
}

/// Has the trainer binary read `dir` as its `train` would (`kfaws-trainer check-data`), so a
/// directory it would refuse is refused before any rank starts or any file is uploaded.
/// `dataset` is the job's `dataset` hyperparameter, if given.
///
/// `Ok(None)` when the trainer is a build without `check-data` (an older `--trainer`): its
/// ranks will report the data themselves.
///
/// # Errors
/// [`DataError::Unreadable`] with the trainer's reason (which names the file and the expected
/// size or magic number); an I/O error running the binary is reported the same way.
pub async fn check_local(
    trainer: &Path,
    dir: &Path,
    dataset: Option<&str>,
) -> Result<Option<LocalDataset>, DataError> {
    let unreadable = |reason: String| DataError::Unreadable {
        value: dir.display().to_string(),
        reason,
    };
    let mut command = tokio::process::Command::new(trainer);
    command.arg("check-data").arg("--data-dir").arg(dir);
    if let Some(d) = dataset {
        command.arg("--dataset").arg(d);
    }
    let out = command
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| unreadable(format!("cannot run {} check-data: {e}", trainer.display())))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    // On failure the last line is the reason; what comes before (or everything, on success)
    // are the trainer's warnings, such as how it told MNIST from Fashion-MNIST.
    let reason = match out.status.success() {
        true => None,
        false => lines.pop(),
    };
    for warning in &lines {
        tracing::warn!("kfaws-trainer check-data: {}", warning.trim());
    }
    if out.status.success() {
        return LocalDataset::parse(stdout.trim()).map(Some).ok_or_else(|| {
            unreadable(format!(
                "{} check-data printed {:?}, not dataset=… train=… test=… shape=…",
                trainer.display(),
                stdout.trim()
            ))
        });
    }
    // clap's answer to a subcommand this build does not have.
    if stderr.contains("unrecognized subcommand 'check-data'") {
        tracing::warn!(
            trainer = %trainer.display(),
            "this trainer build cannot check a dataset before training (no check-data); its \
             ranks will report any problem with the data"
        );
        return Ok(None);
    }
    Err(unreadable(match reason {
        Some(reason) => reason.trim().to_string(),
        None => format!("{} check-data failed ({})", trainer.display(), out.status),
    }))
}

impl DataSource {
    /// Parses `value`; a local path must name an existing directory.
    ///
    /// # Errors
    /// [`DataError::Malformed`].
    pub fn parse(value: &str) -> Result<Self, DataError> {
        let bad = |rule: &str| DataError::Malformed {
            value: value.to_string(),
            rule: rule.to_string(),
        };
        if let Some(rest) = value.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            // Bucket naming rules: 3-63 characters of a-z, 0-9, '.', '-'
            // (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html).
            if bucket.len() < 3
                || bucket.len() > 63
                || !bucket
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
            {
                return Err(bad(
                    "the bucket must be 3-63 characters of a-z, 0-9, '.' and '-' (S3 bucket \
                     naming rules)",
                ));
            }
            return Ok(Self::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.to_string(),
            });
        }
        if value.contains("://") {
            return Err(bad(
                "unknown scheme; use s3://bucket/prefix, efs:/path or a local directory",
            ));
        }
        if let Some(path) = value.strip_prefix("efs:") {
            if !path.starts_with('/') {
                return Err(bad("an EFS path is absolute: efs:/datasets/fashion-mnist"));
            }
            let mut parts = Vec::new();
            for c in Path::new(path).components() {
                match c {
                    Component::RootDir | Component::CurDir => {}
                    Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
                    Component::ParentDir | Component::Prefix(_) => {
                        return Err(bad("an EFS path may not contain '..'"))
                    }
                }
            }
            return Ok(Self::Efs(format!("/{}", parts.join("/"))));
        }
        let path = PathBuf::from(value);
        if path.is_file() {
            return Err(bad(
                "is a file; --data names the directory that holds the dataset's files",
            ));
        }
        if !path.is_dir() {
            return Err(bad("no such local directory"));
        }
        Ok(Self::Local(path))
    }

    /// Checks that `runtime` can read this source.
    ///
    /// # Errors
    /// [`DataError::Unsupported`] with what to use instead.
    pub fn check_runtime(&self, runtime: Runtime) -> Result<(), DataError> {
        let why = match (runtime, self) {
            (Runtime::Local, Self::Local(_))
            | (Runtime::Kubernetes, Self::Efs(_))
            | (Runtime::Sagemaker, _) => return Ok(()),
            (Runtime::Local, _) => "reads a local directory only",
            (Runtime::Kubernetes, Self::S3 { .. }) => {
                "reads the deployment's EFS file system (efs:/path) only: the trainer image \
                 has no S3 client; copy the data onto the file system, or use --runtime sagemaker"
            }
            (Runtime::Kubernetes, Self::Local(_)) => {
                "cannot see this machine's directories: put the data on the deployment's EFS \
                 file system and pass efs:/path, or use --runtime sagemaker (which uploads a \
                 local directory to the artifact bucket)"
            }
        };
        Err(DataError::Unsupported {
            value: self.to_string(),
            runtime,
            why,
        })
    }
}

impl fmt::Display for DataSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            Self::Efs(p) => write!(f, "efs:{p}"),
            Self::Local(p) => write!(f, "{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_and_normalise() {
        assert_eq!(
            DataSource::parse("s3://my-bucket/data/fmnist").unwrap(),
            DataSource::S3 {
                bucket: "my-bucket".into(),
                prefix: "data/fmnist".into()
            }
        );
        assert_eq!(
            DataSource::parse("efs:/datasets//fmnist/./").unwrap(),
            DataSource::Efs("/datasets/fmnist".into())
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            DataSource::parse(dir.path().to_str().unwrap()).unwrap(),
            DataSource::Local(dir.path().to_path_buf())
        );
    }

    #[test]
    fn malformed_sources_name_the_rule() {
        for (value, rule) in [
            ("s3://My_Bucket/x", "bucket must be"),
            ("gs://b/x", "unknown scheme"),
            ("efs:datasets", "absolute"),
            ("efs:/a/../../etc", "'..'"),
            ("/no/such/dir/kfaws", "no such local directory"),
            ("/etc/hostname", "is a file; --data names the directory"),
        ] {
            let e = DataSource::parse(value).unwrap_err().to_string();
            assert!(e.contains(rule), "{value}: {e}");
        }
    }

    #[test]
    fn the_trainers_dataset_line_parses_and_anything_else_does_not() {
        let d = LocalDataset::parse("dataset=fashion-mnist train=60000 test=10000 shape=1x28x28")
            .unwrap();
        assert_eq!(
            d,
            LocalDataset {
                name: "fashion-mnist".into(),
                train: 60000,
                test: 10000,
                shape: "1x28x28".into()
            }
        );
        assert_eq!(
            d.to_string(),
            "fashion-mnist (60000 training and 10000 test images of 1x28x28)"
        );
        assert_eq!(
            d.describe(Some(600)),
            "fashion-mnist (600 of 60000 training images (max-train-samples) and 10000 test \
             images of 1x28x28)"
        );
        assert_eq!(d.describe(Some(60000)), d.to_string(), "no limit in effect");
        assert_eq!(
            d.describe(Some(100000)),
            "fashion-mnist (all 60000 training images: max-train-samples 100000 is more than \
             there are; and 10000 test images of 1x28x28)"
        );
        assert_eq!(d.describe(None), d.to_string());
        for bad in [
            "",
            "dataset=mnist train=x test=1 shape=1x28x28",
            "dataset=mnist test=1 shape=1x28x28",
            "loaded fine",
        ] {
            assert_eq!(LocalDataset::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn each_runtime_reads_what_it_can() {
        let s3 = DataSource::parse("s3://bkt/x").unwrap();
        let efs = DataSource::parse("efs:/x").unwrap();
        let local = DataSource::Local("/tmp".into());
        for s in [&s3, &efs, &local] {
            s.check_runtime(Runtime::Sagemaker).unwrap();
        }
        local.check_runtime(Runtime::Local).unwrap();
        efs.check_runtime(Runtime::Kubernetes).unwrap();
        for (s, r) in [
            (&s3, Runtime::Local),
            (&efs, Runtime::Local),
            (&s3, Runtime::Kubernetes),
            (&local, Runtime::Kubernetes),
        ] {
            let e = s.check_runtime(r).unwrap_err().to_string();
            assert!(e.contains(&format!("the {r} runtime")), "{e}");
        }
    }
}
