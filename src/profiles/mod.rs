//! Deployment profiles: which resources a deployment consists of, wired to
//! which dependencies. One file per profile.

pub mod vanilla;

use std::sync::Arc;

use aws_config::SdkConfig;

use crate::address::Address;
use crate::config::{Config, ProfileName};
use crate::resource::{Provider, Resource};
use crate::state::{ResourceState, State};

/// A profile's resources and the provider for recorded ones.
pub struct Built {
    /// The desired resources.
    pub resources: Vec<Arc<dyn Resource>>,
    /// Handles for recorded resources that left the config.
    pub provider: Arc<dyn Provider>,
}

/// Why a profile cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The profile is known but this build cannot deploy it.
    #[error(
        "profile {0} is not yet available in this kfaws; available: vanilla \
         (rds-s3, cognito and cognito-rds-s3 are planned)"
    )]
    NotAvailable(ProfileName),
    /// Manifests named in config cannot be used.
    #[error(transparent)]
    Manifests(#[from] crate::k8s::resource::SourceError),
}

pub use vanilla::Sources;

/// Reads and checks the manifests the config names for its profile (the
/// `[kubeflow]` files, [`vanilla::read_sources`]): no AWS or Kubernetes
/// call. Read once per command; every graph built from them shares them.
///
/// # Errors
/// [`ProfileError::NotAvailable`] for profiles this build cannot deploy;
/// [`ProfileError::Manifests`] for manifests that cannot be read or used.
pub fn read_sources(config: &Config) -> Result<Sources, ProfileError> {
    match config.profile {
        ProfileName::Vanilla => Ok(vanilla::read_sources(config)?),
        other => Err(ProfileError::NotAvailable(other)),
    }
}

/// Builds the resources of the config's profile for the state of lineage
/// `lineage` (resources tag what they create with it); Kubernetes
/// resources authenticate to the cluster with EKS tokens signed with
/// `aws`'s credentials ([`crate::k8s::auth`]); the manifests named in config are `sources`
/// ([`read_sources`] of this config; [`Sources::default`] for a destroy,
/// whose [`prepare`] drops them).
///
/// # Errors
/// [`ProfileError::NotAvailable`] for profiles this build cannot deploy;
/// [`ProfileError::Manifests`] when two bundles hold the same object.
pub fn build(
    config: &Config,
    aws: &SdkConfig,
    lineage: uuid::Uuid,
    sources: &Sources,
) -> Result<Built, ProfileError> {
    match config.profile {
        ProfileName::Vanilla => Ok(vanilla::build(config, aws, lineage, sources)?),
        other => Err(ProfileError::NotAvailable(other)),
    }
}

/// The config with what the profile leaves to AWS filled in, before any
/// plan (the vanilla network's Availability Zones, [`vanilla::prepare`]).
/// Read-only calls; a destroy makes none.
///
/// # Errors
/// [`crate::aws::zones::ZoneError`] when no fitting zones exist.
pub async fn prepare(
    config: &Config,
    aws: &SdkConfig,
    state: &State,
    destroy: bool,
) -> Result<Config, crate::aws::zones::ZoneError> {
    match config.profile {
        ProfileName::Vanilla => vanilla::prepare(config, aws, state, destroy).await,
        _ => Ok(config.clone()),
    }
}

/// What the deployment left outside every resource its state records (a bucket kept when its
/// stack was deleted outside kfaws, [`vanilla::left_behind`]), as `(what, note)`: a destroy
/// names them, since nothing else will.
///
/// # Errors
/// A message from the lookups.
pub async fn left_behind(
    config: &Config,
    aws: &SdkConfig,
    state: &State,
) -> Result<Vec<(String, String)>, crate::resource::ResourceError> {
    match config.profile {
        ProfileName::Vanilla => vanilla::left_behind(config, aws, state).await,
        _ => Ok(vec![]),
    }
}

/// The Kubernetes bundles the deployment applied that `state` does not hold
/// (`vanilla::bundles_outside_state`), as `(address, ApplySet id)`; none for
/// other profiles.
///
/// # Errors
/// [`crate::resource::ResourceError`] when the cluster cannot be read.
pub async fn bundles_outside_state(
    config: &Config,
    aws: &SdkConfig,
    state: &State,
) -> Result<Vec<(Address, String)>, crate::resource::ResourceError> {
    match config.profile {
        ProfileName::Vanilla => vanilla::bundles_outside_state(config, aws, state).await,
        _ => Ok(vec![]),
    }
}

/// A named output: what `kfaws output NAME` prints, and which resource
/// output it is (Terraform's `output` blocks).
#[derive(Debug, Clone, Copy)]
pub struct NamedOutput {
    /// The name users ask for.
    pub name: &'static str,
    /// The resource that produces it.
    pub address: &'static str,
    /// The resource's output key.
    pub key: &'static str,
}

/// The named outputs of a profile, in display order.
pub fn named_outputs(profile: ProfileName) -> &'static [NamedOutput] {
    match profile {
        ProfileName::Vanilla => vanilla::OUTPUTS,
        _ => &[],
    }
}

/// Recreates handles for recorded AWS resources by kind.
pub struct AwsProvider {
    config: Config,
    aws: SdkConfig,
    lineage: uuid::Uuid,
}

impl Provider for AwsProvider {
    fn handle_for(&self, address: &Address, recorded: &ResourceState) -> Option<Arc<dyn Resource>> {
        match recorded.kind.as_str() {
            "aws_cloudformation_stack" => {
                vanilla::stack_from_state(&self.config, &self.aws, self.lineage, address, recorded)
            }
            "aws_eks_cluster"
            | "aws_eks_nodegroup"
            | "aws_eks_access_entry"
            | "aws_iam_oidc_provider" => {
                vanilla::eks_from_state(&self.config, &self.aws, self.lineage, address, recorded)
            }
            crate::k8s::resource::KIND => {
                vanilla::bundle_from_state(&self.config, &self.aws, self.lineage, address, recorded)
            }
            _ => None,
        }
    }

    fn why_absent(&self, address: &Address) -> Option<String> {
        match self.config.profile {
            ProfileName::Vanilla => vanilla::why_absent(&self.config, address),
            _ => None,
        }
    }
}
