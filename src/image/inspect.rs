//! Reading a pushed image back from ECR: the trainer's collective backends
//! that `kfaws image build` recorded in its config as the label
//! [`BACKENDS_LABEL`], so `kfaws train --backend nccl` with an image built
//! from a CPU-only trainer is refused before a job is created.
//!
//! Pulled the way a container runtime pulls (OCI Distribution
//! Specification, "Pull"): the manifest by tag or digest, then the config
//! blob it names, each checked against its digest.

use aws_config::SdkConfig;
use serde::Deserialize;

use super::manifest::BACKENDS_LABEL;
use super::push::{authorization, PushError, Registry};

/// An image reference in a private ECR registry
/// (`ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPOSITORY[:TAG|@DIGEST]`, ECR
/// User Guide, "Pushing an image"; the tag defaults to `latest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcrImage {
    /// The 12-digit account (the registry id).
    pub account: String,
    /// The repository, e.g. `kfaws-trainer`.
    pub repository: String,
    /// The tag or `sha256:` digest.
    pub reference: String,
}

impl EcrImage {
    /// Parses `uri`; `None` for an image in another registry.
    pub fn parse(uri: &str) -> Option<Self> {
        let (host, path) = uri.split_once('/')?;
        let mut parts = host.split('.');
        let (Some(account), Some("dkr"), Some("ecr")) = (parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let (repository, reference) = match path.split_once('@') {
            Some((repo, digest)) => (repo, digest),
            None => match path.rsplit_once(':') {
                Some((repo, tag)) => (repo, tag),
                None => (path, "latest"),
            },
        };
        Some(Self {
            account: account.to_string(),
            repository: repository.to_string(),
            reference: reference.to_string(),
        })
    }
}

/// The part of an image config read here (Docker image specification
/// v1.2 / OCI image config: `config.Labels`).
#[derive(Debug, Deserialize)]
struct Config {
    #[serde(default)]
    config: ContainerConfig,
}

#[derive(Debug, Default, Deserialize)]
struct ContainerConfig {
    #[serde(rename = "Labels", default)]
    labels: Option<std::collections::BTreeMap<String, String>>,
}

/// The manifest's `config` descriptor.
#[derive(Debug, Deserialize)]
struct Manifest {
    config: Descriptor,
}

#[derive(Debug, Deserialize)]
struct Descriptor {
    digest: String,
}

/// The trainer backends recorded in a config's [`BACKENDS_LABEL`], if any.
pub fn backends_of_config(config: &[u8]) -> Option<Vec<String>> {
    let config: Config = serde_json::from_slice(config).ok()?;
    let value = config.config.labels?.remove(BACKENDS_LABEL)?;
    Some(value.split_whitespace().map(str::to_string).collect())
}

/// The collective backends of the trainer in image `uri`, from its config's
/// [`BACKENDS_LABEL`]. `Ok(None)` when that cannot be known: the image is
/// not in ECR, not found (its existence is checked elsewhere), or has no
/// such label (built by an older kfaws, or not by `kfaws image build`).
///
/// # Errors
/// [`PushError`] when ECR's token cannot be had, or the registry (the
/// caller's default registry, as `GetAuthorizationToken` names it) refuses
/// or answers bytes of another digest: an image in another account's
/// registry is refused there.
pub async fn trainer_backends(
    sdk: &SdkConfig,
    uri: &str,
) -> Result<Option<Vec<String>>, PushError> {
    let Some(image) = EcrImage::parse(uri) else {
        return Ok(None);
    };
    let ecr = crate::aws::client::<aws_sdk_ecr::Client>(sdk);
    let auth = authorization(&ecr).await?;
    let registry = Registry::new(&auth, &image.repository)?;
    let Some(manifest) = registry.manifest(&image.reference).await? else {
        return Ok(None);
    };
    let Ok(manifest) = serde_json::from_slice::<Manifest>(&manifest) else {
        // A manifest list or another format: not what `kfaws image build` writes.
        return Ok(None);
    };
    let config = registry.blob(&manifest.config.digest).await?;
    Ok(backends_of_config(&config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecr_references_parse_and_others_do_not() {
        let img = |a: &str, r: &str, f: &str| EcrImage {
            account: a.into(),
            repository: r.into(),
            reference: f.into(),
        };
        assert_eq!(
            EcrImage::parse("123456789012.dkr.ecr.us-east-1.amazonaws.com/kfaws-trainer@sha256:ab"),
            Some(img("123456789012", "kfaws-trainer", "sha256:ab"))
        );
        assert_eq!(
            EcrImage::parse("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/trainer:1.2"),
            Some(img("123456789012", "team/trainer", "1.2"))
        );
        assert_eq!(
            EcrImage::parse("123456789012.dkr.ecr.eu-west-1.amazonaws.com/trainer"),
            Some(img("123456789012", "trainer", "latest"))
        );
        for other in [
            "docker.io/library/busybox:1",
            "busybox",
            "ghcr.io/x/y@sha256:ab",
        ] {
            assert_eq!(EcrImage::parse(other), None, "{other}");
        }
    }

    #[test]
    fn the_backends_label_is_read_from_the_config_kfaws_writes() {
        let gloo = super::super::manifest::config("sha256:00", Some(&["gloo".to_string()]));
        assert_eq!(backends_of_config(&gloo), Some(vec!["gloo".to_string()]));
        let both = ["gloo".to_string(), "nccl".to_string()];
        let cuda = super::super::manifest::config("sha256:00", Some(&both));
        assert_eq!(backends_of_config(&cuda), Some(both.to_vec()));
        let unknown = super::super::manifest::config("sha256:00", None);
        assert_eq!(backends_of_config(&unknown), None);
        assert_eq!(backends_of_config(br#"{"config": {}}"#), None);
        assert_eq!(backends_of_config(b"not json"), None);
    }
}
