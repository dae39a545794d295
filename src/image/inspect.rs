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
/// (`ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPOSITORY[:TAG][@DIGEST]`, ECR
/// User Guide, "Pushing an image"; the tag defaults to `latest`, and a
/// digest, when given, is the reference).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcrImage {
    /// The registry host, `ACCOUNT.dkr.ecr.REGION.amazonaws.com`.
    pub host: String,
    /// The 12-digit account (the registry id).
    pub account: String,
    /// The region, e.g. `us-east-1`.
    pub region: String,
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
        let (Some(account), Some("dkr"), Some("ecr"), Some(region)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let (repository, reference) = match path.split_once('@') {
            // `NAME:TAG@DIGEST` is valid too (distribution/reference
            // grammar); the digest names the image, the tag is dropped.
            Some((repo, digest)) => (repo.split_once(':').map_or(repo, |(r, _)| r), digest),
            None => match path.rsplit_once(':') {
                Some((repo, tag)) => (repo, tag),
                None => (path, "latest"),
            },
        };
        Some(Self {
            host: host.to_string(),
            account: account.to_string(),
            region: region.to_string(),
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

/// The registry endpoint to read `image` from, given the `endpoint`
/// (`proxyEndpoint`) of the caller's default registry that
/// `GetAuthorizationToken` answered: the image's own registry host, in the
/// same scheme, when it is in the same region (the token is good for every
/// registry of its region the caller may access), or why it cannot be
/// read: ECR tokens are per region, and the default registry is the SDK
/// region's. An endpoint that is not an ECR registry host
/// (`ACCOUNT.dkr.ecr.REGION.amazonaws.com`: a local emulator's loopback
/// registry, which serves every account's repositories) is used as it is.
fn registry_endpoint(endpoint: &str, image: &EcrImage) -> Result<String, String> {
    let Ok(url) = url::Url::parse(endpoint) else {
        return Ok(endpoint.to_string());
    };
    let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
    let token_region = match host.split('.').collect::<Vec<_>>()[..] {
        [_, "dkr", ecr, region, ..] if ecr.starts_with("ecr") => region.to_string(),
        _ => return Ok(endpoint.to_string()),
    };
    if image.region.eq_ignore_ascii_case(&token_region) {
        Ok(format!(
            "{}://{}",
            url.scheme(),
            image.host.to_ascii_lowercase()
        ))
    } else {
        Err(format!(
            "it is in region {}, and ECR's token is for this session's region {token_region} \
             (registry {host}), ECR tokens being per region",
            image.region
        ))
    }
}

/// The collective backends of the trainer in image `uri`, from its config's
/// [`BACKENDS_LABEL`], read from the registry `uri` names (its account's,
/// with the caller's token: [`registry_endpoint`]). `Ok(None)` when that
/// cannot be known: the image is not in ECR, is in another region than the
/// SDK's (with a warning saying so: the token is that region's), is not
/// found (its existence is checked elsewhere), or has no such label (built
/// by an older kfaws, or not by `kfaws image build`).
///
/// # Errors
/// [`PushError`] when ECR's token cannot be had, or the registry refuses
/// (an image in another account's registry that the caller may not pull is
/// refused there) or answers bytes of another digest.
pub async fn trainer_backends(
    sdk: &SdkConfig,
    uri: &str,
) -> Result<Option<Vec<String>>, PushError> {
    let Some(image) = EcrImage::parse(uri) else {
        return Ok(None);
    };
    let ecr = crate::aws::client::<aws_sdk_ecr::Client>(sdk);
    let auth = authorization(&ecr).await?;
    let auth = match registry_endpoint(&auth.endpoint, &image) {
        Ok(endpoint) => auth.at(endpoint),
        Err(why) => {
            tracing::warn!("image {uri}: {why}; its trainer backends are not read");
            return Ok(None);
        }
    };
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
        let img = |region: &str, a: &str, r: &str, f: &str| EcrImage {
            host: format!("{a}.dkr.ecr.{region}.amazonaws.com"),
            account: a.into(),
            region: region.into(),
            repository: r.into(),
            reference: f.into(),
        };
        assert_eq!(
            EcrImage::parse("123456789012.dkr.ecr.us-east-1.amazonaws.com/kfaws-trainer@sha256:ab"),
            Some(img(
                "us-east-1",
                "123456789012",
                "kfaws-trainer",
                "sha256:ab"
            ))
        );
        // Tag and digest: the digest is the reference, the tag not part of the repository.
        assert_eq!(
            EcrImage::parse(
                "123456789012.dkr.ecr.us-east-1.amazonaws.com/kfaws-trainer:0.1.0@sha256:ab"
            ),
            Some(img(
                "us-east-1",
                "123456789012",
                "kfaws-trainer",
                "sha256:ab"
            ))
        );
        assert_eq!(
            EcrImage::parse("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/trainer:1.2"),
            Some(img("eu-west-1", "123456789012", "team/trainer", "1.2"))
        );
        assert_eq!(
            EcrImage::parse("123456789012.dkr.ecr.eu-west-1.amazonaws.com/trainer"),
            Some(img("eu-west-1", "123456789012", "trainer", "latest"))
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
    fn the_image_is_read_from_its_own_registry_in_the_tokens_region() {
        let image = EcrImage::parse("123456789012.dkr.ecr.eu-west-1.amazonaws.com/kfaws-trainer:1")
            .unwrap();
        let own = Ok("https://123456789012.dkr.ecr.eu-west-1.amazonaws.com".to_string());
        // The image's own registry is the caller's default registry.
        assert_eq!(
            registry_endpoint(
                "https://123456789012.dkr.ecr.eu-west-1.amazonaws.com",
                &image
            ),
            own
        );
        // Another account's registry in the same region: the image's, not the caller's.
        assert_eq!(
            registry_endpoint(
                "https://210987654321.dkr.ecr.eu-west-1.amazonaws.com",
                &image
            ),
            own
        );
        // The token is for another region's registries: not read, and why.
        assert_eq!(
            registry_endpoint(
                "https://123456789012.dkr.ecr.us-east-1.amazonaws.com",
                &image
            ),
            Err(
                "it is in region eu-west-1, and ECR's token is for this session's region \
                 us-east-1 (registry 123456789012.dkr.ecr.us-east-1.amazonaws.com), ECR tokens \
                 being per region"
                    .to_string()
            )
        );
        // A local emulator's registry, not an ECR host: used as it is.
        assert_eq!(
            registry_endpoint("http://127.0.0.1:5000", &image),
            Ok("http://127.0.0.1:5000".to_string())
        );
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
