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
        ] {
            let e = DataSource::parse(value).unwrap_err().to_string();
            assert!(e.contains(rule), "{value}: {e}");
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
