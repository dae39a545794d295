//! The EKS cluster (`aws_eks_cluster`).
//!
//! Calls and states follow the Amazon EKS API Reference:
//! - create passes the idempotency token as `clientRequestToken`: repeated
//!   after an interrupted apply, CreateCluster returns the cluster of the
//!   first call; a `ResourceInUseException` for a cluster of our name is
//!   re-attached to only if it carries our deployment and lineage tags;
//! - the cluster runs in the private subnets of `stack.network` with the
//!   role `ClusterRoleArn` of `stack.iam`, with both the public and the
//!   private API endpoint (nodes in private subnets reach the API server
//!   through the private endpoint, users through the public one: EKS User
//!   Guide, "Cluster API server endpoint"), and Kubernetes secrets
//!   envelope-encrypted with the KMS key `SecretsKeyArn` of `stack.iam`
//!   (EKS User Guide, "Encrypt Kubernetes secrets with KMS");
//! - waits poll `DescribeCluster` until `ACTIVE` (create, update) or
//!   `ResourceNotFoundException` (delete), and an update's own
//!   `DescribeUpdate` until `Successful`;
//! - the Kubernetes version is upgraded in place one minor version at a
//!   time (`UpdateClusterVersion`; EKS cannot skip minor versions nor
//!   downgrade: EKS User Guide, "Update existing cluster to new Kubernetes
//!   version"); endpoint access changes in place (`UpdateClusterConfig`);
//!   the name, the role and the secrets encryption only by replacement;
//! - the authentication mode is `API_AND_CONFIG_MAP` by default, with the
//!   creator's admin access entry (`bootstrapClusterCreatorAdminPermissions`),
//!   so that EKS access entries ([`super::access_entry`]) admit other
//!   principals while `aws-auth` keeps working (EKS User Guide, "Change
//!   authentication mode to use access entries"); a cluster in `CONFIG_MAP`
//!   mode is moved to it in place (`UpdateClusterConfig` `accessConfig`,
//!   one-way), one in `API` mode (stricter, set outside kfaws) is left as it
//!   is. With `options.authentication_mode = "api"` the mode is `API` (access
//!   entries alone, `aws-auth` ignored): created so, or reached in place one
//!   step at a time ([`mode_steps`]).

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_eks::operation::update_cluster_config::builders::UpdateClusterConfigFluentBuilder;
use aws_sdk_eks::types::{
    AuthenticationMode, Cluster, ClusterStatus, CreateAccessConfigRequest, EncryptionConfig,
    Provider as KmsProvider, UpdateAccessConfigRequest, VpcConfigRequest,
};
use aws_sdk_eks::Client;
use serde_json::{json, Value};

use super::{
    code, describe_issues, foreign, is_not_found, minor, owned, tags, wait_for_update, Tolerance,
};
use crate::address::Address;
use crate::aws::error_message;
use crate::aws::wait::{wait_until, Backoff, Poll};
use crate::config::AuthenticationMode as Configured;
use crate::plan::Action;
use crate::resource::{
    unless_interrupted, Applied, Check, Detail, Inputs, Observed, Outputs, Resource, ResourceError,
};
use crate::state::ResourceState;

/// The `stack.network` output with the private subnet ids, comma-separated.
pub const SUBNETS_OUTPUT: &str = "PrivateSubnetIds";
/// The `stack.iam` output with the cluster role's ARN.
pub const ROLE_OUTPUT: &str = "ClusterRoleArn";
/// The `stack.iam` output with the ARN of the KMS key for secrets.
pub const KEY_OUTPUT: &str = "SecretsKeyArn";

/// Whether a cluster's authentication mode admits EKS access entries:
/// `API` or `API_AND_CONFIG_MAP`, not `CONFIG_MAP` (EKS API Reference,
/// `AccessConfigResponse.authenticationMode`; a cluster that reports no
/// access config predates access entries and is `CONFIG_MAP`).
pub fn admits_access_entries(cluster: &Cluster) -> bool {
    cluster
        .access_config()
        .and_then(|a| a.authentication_mode())
        .is_some_and(|m| *m != AuthenticationMode::ConfigMap)
}

/// The spec field recording the authentication mode, present only while it
/// is `API` (`options.authentication_mode = "api"`): a deployment applied
/// with the default has no such field, and plans no change for it.
pub const MODE_FIELD: &str = "authentication_mode";

/// The EKS authentication mode `configured` asks for.
fn wanted_mode(configured: Configured) -> AuthenticationMode {
    match configured {
        Configured::ApiAndConfigMap => AuthenticationMode::ApiAndConfigMap,
        Configured::Api => AuthenticationMode::Api,
    }
}

/// The authentication modes a cluster in `live` mode (`None`: it reports no
/// access config, so it predates access entries and is `CONFIG_MAP`) is
/// switched through for `configured`, one `UpdateClusterConfig` each, in
/// order. EKS moves a cluster one way only, one step at a time: `CONFIG_MAP`
/// -> `API_AND_CONFIG_MAP` -> `API` (EKS User Guide, "Change authentication
/// mode to use access entries"; UpdateClusterConfig refuses `CONFIG_MAP` ->
/// `API` and every step back). So the default leaves an `API` cluster as it
/// is, and a mode this SDK does not know is left alone. Pure.
pub fn mode_steps(
    live: Option<&AuthenticationMode>,
    configured: Configured,
) -> Vec<AuthenticationMode> {
    let api = configured == Configured::Api;
    match live {
        None | Some(AuthenticationMode::ConfigMap) => {
            let mut steps = vec![AuthenticationMode::ApiAndConfigMap];
            if api {
                steps.push(AuthenticationMode::Api);
            }
            steps
        }
        Some(AuthenticationMode::ApiAndConfigMap) if api => vec![AuthenticationMode::Api],
        _ => Vec::new(),
    }
}

/// The plan's line for the step from `from` to `to` ([`mode_steps`]).
fn mode_detail(from: &AuthenticationMode, to: &AuthenticationMode) -> Detail {
    let note = match to {
        AuthenticationMode::Api => {
            "access entries alone admit principals; the aws-auth ConfigMap stops admitting \
             anyone. One-way: EKS cannot switch back"
        }
        _ => {
            "admits EKS access entries; aws-auth keeps working. One-way: EKS cannot switch \
             back to CONFIG_MAP"
        }
    };
    Detail {
        action: "Modify".into(),
        name: format!("authentication mode {} -> {}", from.as_str(), to.as_str()),
        kind: "UpdateClusterConfig".into(),
        replacement: None,
        condition: None,
        note: Some(note.into()),
    }
}

/// Whether [`Resource::read`] reports the live authentication mode, the
/// [`MODE_FIELD`] of `live` (the cluster's [`ClusterResource::live_spec`]):
/// where the `recorded` spec has the field (an `api` deployment, for which
/// a live mode other than `API` is drift), or the live mode is `API`
/// already. Otherwise it is left out and the record (without the field)
/// stands for it, so that a deployment set to `api` plans the switch as a
/// config change, not as one made outside kfaws; with the default neither
/// the spec nor the record has the field, so nothing is compared. Pure.
fn reports_mode(live: &serde_json::Map<String, Value>, recorded: Option<&ResourceState>) -> bool {
    recorded.is_some_and(|r| r.spec.get(MODE_FIELD).is_some())
        || live.get(MODE_FIELD).and_then(Value::as_str) == Some(AuthenticationMode::Api.as_str())
}

/// The IAM principal ARN to give an access entry when none of `entries` (principal ARNs)
/// admits `caller` (an STS GetCallerIdentity ARN); `None` when one does, or when no entry can
/// name the caller (the account root, a federated user). Pure.
pub fn lacks_entry(caller: &str, entries: &[String]) -> Option<String> {
    if entries
        .iter()
        .any(|p| super::access_entry::is_caller(p, caller))
    {
        return None;
    }
    let (account, kind, name) = super::access_entry::caller_principal(caller)?;
    let partition = caller.split(':').nth(1)?;
    let resource = match kind {
        // A user's, path included (the caller's own ARN, in the IAM namespace).
        "user" => caller.splitn(6, ':').nth(5)?.to_string(),
        // An assumed role's: STS drops the role's path, which EKS accepts left out (EKS
        // User Guide, "Create access entries").
        _ => format!("{kind}/{name}"),
    };
    Some(format!("arn:{partition}:iam::{account}:{resource}"))
}

/// What [`health`] says of a cluster that works or is on its way there.
const HEALTHY: &str = "healthy";

/// Whether a cluster in `status` works: `healthy` while it is (or is on
/// its way to being) usable, else the status itself: `FAILED` (only
/// deletion helps) and `DELETING` (it is going away). EKS API Reference,
/// `Cluster.status`.
pub fn health(status: &str) -> &str {
    match status {
        "FAILED" | "DELETING" => status,
        _ => HEALTHY,
    }
}

/// The versions an upgrade from `live` to `desired` passes through, one
/// minor version at a time, ending with `desired`.
///
/// # Errors
/// A message when `desired` is older than `live` (EKS cannot downgrade) or
/// either is not `1.NN`.
pub fn upgrade_path(live: &str, desired: &str) -> Result<Vec<String>, String> {
    let (Some(from), Some(to)) = (minor(live), minor(desired)) else {
        return Err(format!(
            "cannot compare Kubernetes versions {live:?} and {desired:?}"
        ));
    };
    if to < from {
        return Err(format!(
            "the cluster runs Kubernetes {live}; EKS cannot downgrade it to {desired} \
             (set kubernetes_version = \"{live}\" or newer)"
        ));
    }
    Ok((from + 1..=to).map(|m| format!("1.{m}")).collect())
}

/// Envelope encryption of Kubernetes secrets with the customer managed key
/// `key_arn`. Since Kubernetes 1.28 EKS envelope-encrypts all API data by
/// default with an AWS owned key, and `resources` no longer selects what
/// is encrypted (EKS API Reference, `EncryptionConfig`); naming our own key
/// keeps rotation, audit and revocation in the account. `resources` is
/// still sent as `["secrets"]`, the only value the API has ever accepted,
/// so the request is valid for every supported version.
#[allow(deprecated)]
fn secrets_encryption(key_arn: &str) -> EncryptionConfig {
    EncryptionConfig::builder()
        .resources("secrets")
        .provider(KmsProvider::builder().key_arn(key_arn).build())
        .build()
}

/// One EKS cluster.
pub struct ClusterResource {
    /// Graph address, `eks.cluster`.
    pub address: Address,
    /// The cluster name (the deployment name).
    pub name: String,
    /// Kubernetes version, `1.NN`.
    pub kubernetes_version: String,
    /// The cluster role's name; its ARN comes from `iam`'s outputs.
    pub role_name: String,
    /// The deployment, written as the deployment tag.
    pub deployment: String,
    /// The lineage of the state managing the cluster, written as the lineage tag.
    pub lineage: String,
    /// The network stack, for [`SUBNETS_OUTPUT`].
    pub network: Address,
    /// The IAM stack, for [`ROLE_OUTPUT`] and [`KEY_OUTPUT`].
    pub iam: Address,
    /// `options.authentication_mode`: `API` is created or reached in place
    /// ([`mode_steps`]); the default leaves an `API` cluster so.
    pub authentication_mode: Configured,
    /// The config's cluster-wide `cluster-admin` `[access_entries]`, as `(address, principal
    /// ARN)`: entries an apply creates after a switch to `API`, which keep their principals
    /// able to apply everything (the plan refuses a switch that would shut out the identity
    /// running kfaws; an entry counts only where the plan creates it, not where `--target`
    /// leaves it out).
    pub entry_principals: Vec<(Address, String)>,
    /// The client.
    pub client: Client,
    /// STS: the identity running kfaws, which a switch to `API` must keep admitted.
    pub sts: aws_sdk_sts::Client,
}

/// What the cluster is made from at apply time: dependencies' outputs.
struct Wiring {
    subnets: Vec<String>,
    role_arn: String,
    key_arn: String,
}

fn output_str(inputs: &Inputs, from: &Address, name: &str) -> Result<String, ResourceError> {
    let v = inputs.get(from, name)?;
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| ResourceError::msg(format!("output {name} of {from} is not a string: {v}")))
}

impl ClusterResource {
    fn wiring(&self, inputs: &Inputs) -> Result<Wiring, ResourceError> {
        let subnets = output_str(inputs, &self.network, SUBNETS_OUTPUT)?
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        Ok(Wiring {
            subnets,
            role_arn: output_str(inputs, &self.iam, ROLE_OUTPUT)?,
            key_arn: output_str(inputs, &self.iam, KEY_OUTPUT)?,
        })
    }

    /// The cluster, unless there is none of our name.
    async fn describe(&self) -> Result<Option<Cluster>, ResourceError> {
        super::describe_cluster(&self.client, &self.name).await
    }

    /// The cluster of our name if this deployment's state made it.
    async fn ours(&self) -> Result<Option<Cluster>, ResourceError> {
        Ok(self
            .describe()
            .await?
            .filter(|c| owned(c.tags(), &self.deployment, &self.lineage)))
    }

    fn schedule(&self) -> Backoff {
        Backoff::with_deadline(self.timeout())
    }

    /// Waits while the cluster is `CREATING`, `UPDATING` or `PENDING`: EKS
    /// refuses to delete it meanwhile (`ResourceInUseException`: "Cannot
    /// delete because cluster … currently has an update in progress"; a
    /// create interrupted by Ctrl-C leaves it `CREATING` for minutes).
    /// Returns it as it then is, or `None` once it is gone or no longer ours.
    async fn wait_settled(&self) -> Result<Option<Cluster>, ResourceError> {
        super::wait_settled(
            self.timeout(),
            &format!("cluster {}", self.name),
            || self.ours(),
            |c: &Cluster| {
                c.status()
                    .filter(|s| busy(s))
                    .map(|s| s.as_str().to_string())
            },
        )
        .await
    }

    /// Waits until the cluster is `ACTIVE`.
    async fn wait_active(&self) -> Result<Cluster, ResourceError> {
        let tolerance = Tolerance::default();
        wait_until(self.schedule(), || async {
            let cluster = match self.describe().await {
                Ok(c) => {
                    tolerance.ok();
                    c
                }
                Err(e) => return tolerance.failed(e.to_string()),
            };
            let Some(cluster) = cluster else {
                return Poll::Failed(format!("cluster {} disappeared", self.name));
            };
            match cluster.status() {
                Some(ClusterStatus::Active) => Poll::Ready(cluster),
                Some(ClusterStatus::Failed) => Poll::Failed(format!(
                    "cluster {} is FAILED: {}",
                    self.name,
                    describe_issues(
                        cluster
                            .health()
                            .map(|h| h.issues())
                            .unwrap_or_default()
                            .iter()
                            .map(|i| (i.code().map(|c| c.as_str()), i.message()))
                    )
                )),
                Some(ClusterStatus::Deleting) => {
                    Poll::Failed(format!("cluster {} is being deleted", self.name))
                }
                other => Poll::Pending(other.map_or("UNKNOWN", |s| s.as_str()).to_string()),
            }
        })
        .await
        .map_err(|e| ResourceError::msg(format!("cluster {}: {e}", self.name)))
    }

    /// Waits until DescribeCluster answers `ResourceNotFoundException`.
    async fn wait_gone(&self) -> Result<(), ResourceError> {
        let tolerance = Tolerance::default();
        wait_until(self.schedule(), || async {
            match self.describe().await {
                Ok(None) => Poll::Ready(()),
                Ok(Some(c)) => {
                    tolerance.ok();
                    match c.status() {
                        Some(ClusterStatus::Failed) => Poll::Failed(format!(
                            "cluster {} is FAILED while being deleted",
                            self.name
                        )),
                        other => Poll::Pending(other.map_or("UNKNOWN", |s| s.as_str()).into()),
                    }
                }
                Err(e) => tolerance.failed(e.to_string()),
            }
        })
        .await
        .map_err(|e| ResourceError::msg(format!("cluster {}: {e}", self.name)))
    }

    /// The names of the cluster's node groups, whoever made them (one
    /// page: at most 100, above EKS's default quota of 30 per cluster).
    async fn nodegroups(&self) -> Result<Vec<String>, ResourceError> {
        self.client
            .list_nodegroups()
            .cluster_name(&self.name)
            .send()
            .await
            .map(|o| o.nodegroups().to_vec())
            .map_err(|e| {
                ResourceError::msg(format!(
                    "ListNodegroups {}: {}",
                    self.name,
                    error_message(&e)
                ))
            })
    }

    /// Each node group of the cluster (as [`Self::nodegroups`]) with the
    /// Kubernetes version its nodes run (DescribeNodegroup `version`) and
    /// whether this deployment's state made it (its tags).
    async fn nodegroup_versions(
        &self,
    ) -> Result<Vec<(String, Option<String>, bool)>, ResourceError> {
        let mut out = Vec::new();
        for name in self.nodegroups().await? {
            let (version, ours) = match self
                .client
                .describe_nodegroup()
                .cluster_name(&self.name)
                .nodegroup_name(&name)
                .send()
                .await
            {
                Ok(o) => (
                    o.nodegroup().and_then(|g| g.version()).map(str::to_string),
                    owned(
                        o.nodegroup().and_then(|g| g.tags()),
                        &self.deployment,
                        &self.lineage,
                    ),
                ),
                // Deleted between the list and the describe.
                Err(e) if is_not_found(&e) => continue,
                Err(e) => {
                    return Err(ResourceError::msg(format!(
                        "DescribeNodegroup {}/{name}: {}",
                        self.name,
                        error_message(&e)
                    )))
                }
            };
            out.push((name, version, ours));
        }
        Ok(out)
    }

    /// Refuses a switch of `live` to `API` ([`mode_steps`]) that would shut the identity
    /// running kfaws out of the cluster: `API` admits only access entries, `aws-auth` no more
    /// (EKS User Guide, "Change authentication mode to use access entries"), so one admitted
    /// through `aws-auth` alone would get 401 from this apply's Kubernetes steps on. It needs
    /// an access entry already ([`lacks_entry`]; a `CONFIG_MAP` cluster has none to list), or
    /// a cluster-wide `cluster-admin` one in the config ([`ClusterResource::entry_principals`])
    /// that the plan `creates` (after the switch, before the Kubernetes bundles; one a
    /// `--target` leaves out is named in the refusal). An identity that no entry can name (the
    /// account root, a federated user) and an error reading the caller or the entries are
    /// warnings.
    async fn check_api_access(
        &self,
        live: &Cluster,
        creates: &BTreeSet<Address>,
    ) -> Result<(), ResourceError> {
        let from = live.access_config().and_then(|a| a.authentication_mode());
        if !mode_steps(from, self.authentication_mode).contains(&AuthenticationMode::Api) {
            return Ok(());
        }
        let warn = |what: &str, message: String| {
            tracing::warn!(
                cluster = %self.name,
                "could not check that the identity running kfaws keeps access after the switch \
                 to API ({what}: {message})"
            );
        };
        let caller = match self.sts.get_caller_identity().send().await {
            Ok(out) => out.arn().unwrap_or_default().to_string(),
            Err(e) => {
                warn("STS GetCallerIdentity", error_message(&e));
                return Ok(());
            }
        };
        let mut entries: Vec<String> = self
            .entry_principals
            .iter()
            .filter(|(address, _)| creates.contains(address))
            .map(|(_, principal)| principal.clone())
            .collect();
        // A CONFIG_MAP cluster has no access entries: EKS refuses to list them.
        if from.is_some_and(|m| *m != AuthenticationMode::ConfigMap) {
            let mut pages = self
                .client
                .list_access_entries()
                .cluster_name(&self.name)
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                match page {
                    Ok(page) => entries.extend(page.access_entries().iter().cloned()),
                    Err(e) => {
                        warn("EKS ListAccessEntries", error_message(&e));
                        return Ok(());
                    }
                }
            }
        }
        let Some(principal) = lacks_entry(&caller, &entries) else {
            return Ok(());
        };
        if let Some((address, _)) = self
            .entry_principals
            .iter()
            .find(|(_, p)| super::access_entry::is_caller(p, &caller))
        {
            return Err(ResourceError::refused(format!(
                "options.authentication_mode = \"api\" switches cluster {} to API, where only \
                 access entries admit principals, and the entry that admits the identity running \
                 kfaws ({caller}), {address}, is not in this plan (left out by --target): until \
                 an apply creates it, this identity could not reach the cluster's Kubernetes API \
                 (kubectl, `kfaws train --runtime kubernetes`, the Kubernetes steps of `kfaws \
                 destroy`). Add --target {address}, or apply without --target",
                self.name
            )));
        }
        Err(ResourceError::refused(format!(
            "options.authentication_mode = \"api\" switches cluster {} to API, where only \
             access entries admit principals, and the identity running kfaws ({caller}) has none \
             (aws-auth, which admits it now, is ignored in API mode): this apply's Kubernetes \
             steps, and every later one, would be refused. Add an entry for it and plan again: \
             [access_entries.<name>] principal_arn = \"{principal}\", policy = \"cluster-admin\" \
             (created in the same apply, right after the switch)",
            self.name
        )))
    }

    /// Refuses, at plan, a delete DeleteCluster would refuse half way
    /// through a destroy: EKS deletes a cluster only once it has no node
    /// groups (DeleteCluster: `ResourceInUseException`), and kfaws deletes
    /// only the node groups its state records, so one made outside this
    /// deployment's state (by eksctl, the console, another state), or one
    /// of its own that left the state (`kfaws state rm`), would stop the
    /// destroy after everything before the cluster was gone.
    async fn check_delete(&self, state: &crate::state::State) -> Result<(), ResourceError> {
        if self.ours().await?.is_none() {
            return Ok(());
        }
        // By the name in its spec, and in its ARN where one is recorded:
        // arn:aws:eks:REGION:ACCOUNT:nodegroup/CLUSTER/NAME/UUID (EKS API
        // Reference, Nodegroup.nodegroupArn).
        let recorded: BTreeSet<&str> = state
            .resources
            .values()
            .filter(|r| r.kind == "aws_eks_nodegroup")
            .flat_map(|r| {
                let by_arn = r.physical_id.as_deref().and_then(|a| a.split('/').nth(2));
                let by_spec = r.spec.get("nodegroup_name").and_then(Value::as_str);
                by_arn.into_iter().chain(by_spec)
            })
            .collect();
        let (mut foreign, mut forgotten) = (Vec::new(), Vec::new());
        for (name, _, ours) in self.nodegroup_versions().await? {
            match (ours, recorded.contains(name.as_str())) {
                (_, true) => {}
                (true, false) => forgotten.push(name),
                (false, false) => foreign.push(name),
            }
        }
        let mut problems = Vec::new();
        if !foreign.is_empty() {
            problems.push(format!(
                "node groups {} were not made by this deployment's kfaws state: delete them \
                 first (`aws eks delete-nodegroup --cluster-name {} --nodegroup-name NAME`)",
                foreign.join(", "),
                self.name
            ));
        }
        if !forgotten.is_empty() {
            problems.push(format!(
                "node groups {} carry this deployment's tags but are not in its state (removed \
                 with `kfaws state rm`?), so nothing deletes them first: `kfaws apply` imports \
                 them again (if they are still in the config), or delete them yourself",
                forgotten.join(", ")
            ));
        }
        if problems.is_empty() {
            return Ok(());
        }
        Err(ResourceError::msg(format!(
            "cluster {}: EKS deletes a cluster only once it has no node groups, and {}; nothing \
             was deleted. Then run the command again",
            self.name,
            problems.join("; and ")
        )))
    }

    /// The spec fields DescribeCluster reports, keyed like [`Resource::spec`].
    fn live_spec(cluster: &Cluster) -> serde_json::Map<String, Value> {
        let vpc = cluster.resources_vpc_config();
        let encrypted = cluster
            .encryption_config()
            .iter()
            .any(|e| e.provider().and_then(|p| p.key_arn()).is_some());
        let mut spec = serde_json::Map::new();
        spec.insert("name".into(), json!(cluster.name()));
        spec.insert("kubernetes_version".into(), json!(cluster.version()));
        if let Some(role) = cluster.role_arn() {
            // arn:aws:iam::123456789012:role[/path]/NAME
            spec.insert(
                "role_name".into(),
                json!(role.rsplit('/').next().unwrap_or(role)),
            );
        }
        if let Some(vpc) = vpc {
            spec.insert(
                "endpoint_public_access".into(),
                json!(vpc.endpoint_public_access()),
            );
            spec.insert(
                "endpoint_private_access".into(),
                json!(vpc.endpoint_private_access()),
            );
        }
        spec.insert(
            "secrets_encryption".into(),
            json!(if encrypted { "kms" } else { "none" }),
        );
        spec.insert(
            "access_entries".into(),
            json!(admits_access_entries(cluster)),
        );
        spec.insert(
            MODE_FIELD.into(),
            json!(cluster
                .access_config()
                .and_then(|a| a.authentication_mode())
                .map_or("CONFIG_MAP", AuthenticationMode::as_str)),
        );
        spec.insert(
            "health".into(),
            json!(health(cluster.status().map_or("UNKNOWN", |s| s.as_str()))),
        );
        spec
    }

    /// The outputs: identifiers and public endpoints, what `kfaws
    /// kubeconfig` and the dependants need.
    fn outputs(cluster: &Cluster) -> Outputs {
        let vpc = cluster.resources_vpc_config();
        [
            ("name", cluster.name()),
            ("arn", cluster.arn()),
            ("endpoint", cluster.endpoint()),
            (
                "certificate_authority_data",
                cluster.certificate_authority().and_then(|c| c.data()),
            ),
            (
                "oidc_issuer",
                cluster
                    .identity()
                    .and_then(|i| i.oidc())
                    .and_then(|o| o.issuer()),
            ),
            (
                "cluster_security_group_id",
                vpc.and_then(|v| v.cluster_security_group_id()),
            ),
            ("vpc_id", vpc.and_then(|v| v.vpc_id())),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), json!(v?))))
        .collect()
    }

    fn applied(cluster: &Cluster) -> Applied {
        Applied {
            physical_id: cluster.arn().unwrap_or_default().to_string(),
            outputs: Self::outputs(cluster),
        }
    }

    /// Sends `call`, an UpdateClusterConfig of one `part` (EKS takes one kind
    /// of change per call), with the cluster's name and a new request token,
    /// then waits for its update and for the cluster to be `ACTIVE` again, each
    /// wait stopped by the first interrupt (`what` says what was waited for).
    async fn update_config(
        &self,
        call: UpdateClusterConfigFluentBuilder,
        part: &str,
        what: &str,
    ) -> Result<Cluster, ResourceError> {
        let out = call
            .name(&self.name)
            .client_request_token(uuid::Uuid::new_v4().to_string())
            .send()
            .await
            .map_err(|e| {
                ResourceError::msg(format!(
                    "UpdateClusterConfig {} ({part}): {}",
                    self.name,
                    error_message(&e)
                ))
            })?;
        let updated = wait_for_update(
            &self.client,
            &self.name,
            None,
            "UpdateClusterConfig",
            out.update(),
            self.timeout(),
        );
        unless_interrupted(what, updated).await?;
        unless_interrupted(what, self.wait_active()).await
    }

    /// Refuses an update that would need a new cluster: EKS keeps a
    /// cluster's subnets' VPC, role and secrets key for its lifetime.
    fn check_immutable(&self, live: &Cluster, want: &Wiring) -> Result<(), ResourceError> {
        let mut changed = Vec::new();
        let live_subnets: BTreeSet<&str> = live
            .resources_vpc_config()
            .map(|v| v.subnet_ids().iter().map(String::as_str).collect())
            .unwrap_or_default();
        let want_subnets: BTreeSet<&str> = want.subnets.iter().map(String::as_str).collect();
        if live_subnets != want_subnets {
            changed.push(format!(
                "subnets {live_subnets:?} -> {want_subnets:?} (from {})",
                self.network
            ));
        }
        if live.role_arn() != Some(want.role_arn.as_str()) {
            changed.push(format!(
                "role {} -> {} (from {})",
                live.role_arn().unwrap_or("none"),
                want.role_arn,
                self.iam
            ));
        }
        let live_key = live
            .encryption_config()
            .iter()
            .find_map(|e| e.provider().and_then(|p| p.key_arn()));
        if live_key != Some(want.key_arn.as_str()) {
            changed.push(format!(
                "secrets key {} -> {} (from {})",
                live_key.unwrap_or("none"),
                want.key_arn,
                self.iam
            ));
        }
        if changed.is_empty() {
            return Ok(());
        }
        Err(ResourceError::msg(format!(
            "cluster {} cannot take its dependencies' new outputs in place: {}; EKS keeps these \
             for a cluster's lifetime. Destroy the cluster (kfaws destroy --target {}) and apply \
             again to create it anew",
            self.name,
            changed.join(", "),
            self.address
        )))
    }
}

#[async_trait]
impl Resource for ClusterResource {
    fn address(&self) -> &Address {
        &self.address
    }

    fn kind(&self) -> &'static str {
        "aws_eks_cluster"
    }

    async fn importable(&self) -> Result<Option<String>, ResourceError> {
        Ok(self
            .ours()
            .await?
            .map(|c| c.arn().unwrap_or(&self.name).to_string()))
    }

    fn dependencies(&self) -> Vec<Address> {
        let mut deps = vec![self.network.clone(), self.iam.clone()];
        deps.sort();
        deps
    }

    /// [`MODE_FIELD`] only with `API` configured, so that the spec of a
    /// deployment applied before the option existed is unchanged.
    fn spec(&self) -> Value {
        let mut spec = json!({
            "name": self.name,
            "kubernetes_version": self.kubernetes_version,
            "role_name": self.role_name,
            "endpoint_public_access": true,
            "endpoint_private_access": true,
            "secrets_encryption": "kms",
            "access_entries": true,
            "health": HEALTHY,
        });
        if self.authentication_mode == Configured::Api {
            spec[MODE_FIELD] = json!(AuthenticationMode::Api.as_str());
        }
        spec
    }

    fn replace_fields(&self) -> &[&str] {
        &["name", "role_name", "secrets_encryption", "health"]
    }

    /// EKS User Guide, "Create an Amazon EKS cluster": about 10 minutes.
    fn estimate(&self) -> Duration {
        Duration::from_secs(10 * 60)
    }

    /// Creation, an upgrade and deletion each take 10 to 20 minutes.
    fn timeout(&self) -> Duration {
        Duration::from_secs(40 * 60)
    }

    async fn read(&self, recorded: Option<&ResourceState>) -> Result<Observed, ResourceError> {
        let Some(cluster) = self.describe().await? else {
            return Ok(Observed::Gone);
        };
        if !super::ours_or_retagged(
            cluster.tags(),
            cluster.arn().unwrap_or_default(),
            recorded,
            &format!("EKS cluster {}", self.name),
            &self.address,
            &self.deployment,
            &self.lineage,
        )? {
            return Ok(Observed::Gone);
        }
        let applied = Self::applied(&cluster);
        let mut spec = Self::live_spec(&cluster);
        if !reports_mode(&spec, recorded) {
            spec.remove(MODE_FIELD);
        }
        Ok(Observed::Present {
            physical_id: Some(applied.physical_id),
            spec,
            outputs: applied.outputs,
        })
    }

    async fn create(&self, token: &str, inputs: &Inputs) -> Result<Applied, ResourceError> {
        let wiring = self.wiring(inputs)?;
        let sent = self
            .client
            .create_cluster()
            .name(&self.name)
            .version(&self.kubernetes_version)
            .role_arn(&wiring.role_arn)
            .resources_vpc_config(
                VpcConfigRequest::builder()
                    .set_subnet_ids(Some(wiring.subnets.clone()))
                    .endpoint_public_access(true)
                    .endpoint_private_access(true)
                    .build(),
            )
            .encryption_config(secrets_encryption(&wiring.key_arn))
            .access_config(
                CreateAccessConfigRequest::builder()
                    .authentication_mode(wanted_mode(self.authentication_mode))
                    .bootstrap_cluster_creator_admin_permissions(true)
                    .build(),
            )
            .client_request_token(token)
            .set_tags(Some(tags(&self.deployment, &self.lineage, &self.address)))
            .send()
            .await;
        if let Err(e) = sent {
            if code(&e) != Some("ResourceInUseException") {
                return Err(ResourceError::msg(format!(
                    "CreateCluster {}: {}",
                    self.name,
                    error_message(&e)
                )));
            }
            // A cluster of our name exists and the token is not the one
            // that made it: ours from an earlier, unrecorded create
            // (re-attach), or someone else's (refuse).
            let existing = self.describe().await?;
            let tags = existing.as_ref().and_then(Cluster::tags);
            if !owned(tags, &self.deployment, &self.lineage) {
                return Err(foreign(
                    &format!("EKS cluster {}", self.name),
                    tags,
                    &self.deployment,
                ));
            }
        }
        let what = format!("EKS cluster {} to become ACTIVE", self.name);
        let cluster = unless_interrupted(&what, self.wait_active()).await?;
        Ok(Self::applied(&cluster))
    }

    async fn update(
        &self,
        _recorded: &ResourceState,
        inputs: &Inputs,
    ) -> Result<Applied, ResourceError> {
        let wiring = self.wiring(inputs)?;
        let Some(mut live) = self.ours().await? else {
            return Err(ResourceError::msg(format!(
                "cluster {} is gone; plan again to create it",
                self.name
            )));
        };
        self.check_immutable(&live, &wiring)?;
        // EKS runs one update at a time: each waits for the last. Every
        // wait stops at the first interrupt; the next run resumes from the
        // live version.
        let what = format!("EKS cluster {} to finish updating", self.name);
        live = unless_interrupted(&what, self.wait_active()).await?;
        let path = upgrade_path(live.version().unwrap_or_default(), &self.kubernetes_version)
            .map_err(|m| ResourceError::msg(format!("cluster {}: {m}", self.name)))?;
        for version in path {
            tracing::info!(cluster = %self.name, %version, "upgrading the Kubernetes version");
            let out = self
                .client
                .update_cluster_version()
                .name(&self.name)
                .version(&version)
                .client_request_token(uuid::Uuid::new_v4().to_string())
                .send()
                .await
                .map_err(|e| {
                    ResourceError::msg(format!(
                        "UpdateClusterVersion {} to {version}: {}",
                        self.name,
                        error_message(&e)
                    ))
                })?;
            let upgraded = wait_for_update(
                &self.client,
                &self.name,
                None,
                "UpdateClusterVersion",
                out.update(),
                self.timeout(),
            );
            unless_interrupted(&what, upgraded).await?;
            live = unless_interrupted(&what, self.wait_active()).await?;
        }
        let vpc = live.resources_vpc_config();
        let access = (
            vpc.is_some_and(|v| v.endpoint_public_access()),
            vpc.is_some_and(|v| v.endpoint_private_access()),
        );
        if access != (true, true) {
            let call = self.client.update_cluster_config().resources_vpc_config(
                VpcConfigRequest::builder()
                    .endpoint_public_access(true)
                    .endpoint_private_access(true)
                    .build(),
            );
            live = self
                .update_config(call, "resourcesVpcConfig", &what)
                .await?;
        }
        let from = live.access_config().and_then(|a| a.authentication_mode());
        for mode in mode_steps(from, self.authentication_mode) {
            tracing::info!(cluster = %self.name, mode = mode.as_str(), "switching the authentication mode");
            let call = self.client.update_cluster_config().access_config(
                UpdateAccessConfigRequest::builder()
                    .authentication_mode(mode)
                    .build(),
            );
            live = self.update_config(call, "accessConfig", &what).await?;
        }
        Ok(Self::applied(&live))
    }

    /// The Kubernetes versions an update passes through, one
    /// `UpdateClusterVersion` each ([`upgrade_path`]), then the
    /// authentication modes, one `UpdateClusterConfig` each ([`mode_steps`]).
    async fn preview_update(
        &self,
        _recorded: &ResourceState,
        _inputs: &Inputs,
    ) -> Result<Vec<Detail>, ResourceError> {
        let Some(live) = self.ours().await? else {
            return Ok(vec![]);
        };
        let path = upgrade_path(live.version().unwrap_or_default(), &self.kubernetes_version)
            .map_err(|m| ResourceError::msg(format!("cluster {}: {m}", self.name)))?;
        let steps = path.len();
        let waits = super::waits_for_status("Cluster", live.status().map(ClusterStatus::as_str));
        let mut from = live
            .access_config()
            .and_then(|a| a.authentication_mode())
            .cloned()
            .unwrap_or(AuthenticationMode::ConfigMap);
        let mut mode = Vec::new();
        for to in mode_steps(Some(&from), self.authentication_mode) {
            mode.push(mode_detail(&from, &to));
            from = to;
        }
        Ok(waits
            .into_iter()
            .chain(path.into_iter().enumerate().map(|(i, version)| Detail {
                action: "Modify".into(),
                name: format!("Kubernetes {version}"),
                kind: "UpdateClusterVersion".into(),
                replacement: None,
                condition: None,
                note: (steps > 1 && i == 0).then(|| {
                    format!(
                        "EKS upgrades one minor version at a time: {steps} upgrades, each waited \
                         for"
                    )
                }),
            }))
            .chain(mode)
            .collect())
    }

    /// An update to a Kubernetes version older than the live cluster's is
    /// refused at plan, as [`upgrade_path`] refuses it at apply; so is an
    /// upgrade EKS would refuse for the node groups: one while a node group
    /// runs another version than the control plane ("Nodegroups ... must be
    /// updated to match cluster version"), and one of more than a minor
    /// version with node groups, which need their own upgrade between the
    /// steps (EKS User Guide, "Update existing cluster to new Kubernetes
    /// version"). The node groups of kfaws follow the control plane in the
    /// same apply ([`super::nodegroup`]).
    ///
    /// A create is refused at plan when a cluster of our name exists that
    /// this state did not make (CreateCluster would fail on the name), as
    /// stacks, roles and the bucket are ([`super::foreign`]).
    async fn check(&self, check: &Check<'_>) -> Result<(), ResourceError> {
        if matches!(check.action, Action::Delete | Action::Replace) {
            return self.check_delete(check.state).await;
        }
        if check.action == Action::Create {
            return match self.describe().await? {
                Some(c) if !owned(c.tags(), &self.deployment, &self.lineage) => Err(foreign(
                    &format!("EKS cluster {}", self.name),
                    c.tags(),
                    &self.deployment,
                )),
                _ => Ok(()),
            };
        }
        if check.action != Action::Update {
            return Ok(());
        }
        let Some(live) = self.ours().await? else {
            return Ok(());
        };
        self.check_api_access(&live, check.creates).await?;
        let from = live.version().unwrap_or_default();
        let path = upgrade_path(from, &self.kubernetes_version)
            .map_err(|m| ResourceError::msg(format!("cluster {}: {m}", self.name)))?;
        let Some(next) = path.first() else {
            return Ok(());
        };
        let groups = self.nodegroup_versions().await?;
        let behind: Vec<String> = groups
            .iter()
            .filter(|(_, v, _)| v.as_deref() != Some(from))
            .map(|(n, v, _)| format!("{n} on {}", v.as_deref().unwrap_or("an unknown version")))
            .collect();
        if !behind.is_empty() {
            return Err(ResourceError::msg(format!(
                "cluster {}: EKS upgrades the control plane only while its node groups run its \
                 version ({from}), and node groups {} do not; apply with kubernetes_version = \
                 \"{from}\" first (kfaws upgrades its own node groups to it; upgrade others with \
                 `aws eks update-nodegroup-version`), then set {}",
                self.name,
                behind.join(", "),
                self.kubernetes_version
            )));
        }
        if path.len() > 1 && !groups.is_empty() {
            let names: Vec<&str> = groups.iter().map(|(n, _, _)| n.as_str()).collect();
            return Err(ResourceError::msg(format!(
                "cluster {}: kubernetes_version {from} -> {} is {} upgrades, and EKS upgrades \
                 the control plane one minor version at a time with its node groups ({}) on \
                 its version before the next; set kubernetes_version = \"{next}\" and apply \
                 (kfaws upgrades its node groups after the control plane), then the next \
                 version",
                self.name,
                self.kubernetes_version,
                path.len(),
                names.join(", "),
            )));
        }
        Ok(())
    }

    async fn delete(&self, _recorded: &ResourceState) -> Result<(), ResourceError> {
        // Only a cluster this deployment's state made: a foreign cluster
        // that took our name after ours was deleted is left alone.
        let Some(mut cluster) = self.ours().await? else {
            return Ok(());
        };
        if cluster.status().is_some_and(busy) {
            let what = format!(
                "EKS cluster {} to finish its operation before it is deleted",
                self.name
            );
            match unless_interrupted(&what, self.wait_settled()).await? {
                Some(settled) => cluster = settled,
                None => return Ok(()),
            }
        }
        if cluster.status() != Some(&ClusterStatus::Deleting) {
            match self.client.delete_cluster().name(&self.name).send().await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if code(&e) == Some("ResourceInUseException") => {
                    // Nothing was deleted: the entry stays as it was.
                    return Err(ResourceError::refused(in_use(
                        &self.name,
                        &error_message(&e),
                        &self.nodegroups().await.unwrap_or_default(),
                    )));
                }
                Err(e) => {
                    return Err(ResourceError::msg(format!(
                        "DeleteCluster {}: {}",
                        self.name,
                        error_message(&e)
                    )))
                }
            }
        }
        let what = format!("EKS cluster {} to be deleted", self.name);
        unless_interrupted(&what, self.wait_gone()).await
    }
}

/// Whether a cluster in `status` has an operation in progress that EKS lets
/// no delete interrupt (EKS API Reference, `Cluster.status`; DeleteCluster
/// answers `ResourceInUseException`).
fn busy(status: &ClusterStatus) -> bool {
    matches!(
        status,
        ClusterStatus::Creating | ClusterStatus::Updating | ClusterStatus::Pending
    )
}

/// The refusal of a DeleteCluster that EKS answered `ResourceInUseException`
/// (`message`), by what still holds the cluster: its node groups (`groups`,
/// from ListNodegroups), else what else the API reference names for the
/// exception (a Fargate profile, an update in progress). Pure.
fn in_use(name: &str, message: &str, groups: &[String]) -> String {
    if groups.is_empty() {
        format!(
            "DeleteCluster {name}: {message}; it has no node groups left, so something else holds \
             it: an update still in progress, or Fargate profiles made outside kfaws (`aws eks \
             list-fargate-profiles --cluster-name {name}`); wait for the update or delete them, \
             then run the destroy again; nothing was deleted"
        )
    } else {
        format!(
            "DeleteCluster {name}: {message}; node groups still attached: [{}] (kfaws deletes \
             the node groups its state records first; delete others with `aws eks \
             delete-nodegroup`, or `kfaws apply` to import this deployment's own again); nothing \
             was deleted",
            groups.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delete_waits_out_creating_updating_and_pending_only() {
        for s in ["CREATING", "UPDATING", "PENDING"] {
            assert!(busy(&ClusterStatus::from(s)), "{s}");
        }
        for s in ["ACTIVE", "FAILED", "DELETING"] {
            assert!(!busy(&ClusterStatus::from(s)), "{s}");
        }
    }

    #[test]
    fn a_cluster_in_use_names_its_node_groups_or_else_what_else_holds_it() {
        let e = in_use("ml", "in use", &["gpu".to_string(), "cpu".to_string()]);
        assert!(e.contains("node groups still attached: [gpu, cpu]"), "{e}");
        let e = in_use("ml", "in use", &[]);
        assert!(
            e.contains("it has no node groups left")
                && e.contains("--cluster-name ml")
                && !e.contains("attached"),
            "{e}"
        );
    }

    #[test]
    fn upgrades_step_one_minor_version_at_a_time_and_never_down() {
        assert_eq!(upgrade_path("1.31", "1.33").unwrap(), ["1.32", "1.33"]);
        assert!(upgrade_path("1.33", "1.33").unwrap().is_empty());
        let e = upgrade_path("1.33", "1.31").unwrap_err();
        assert!(e.contains("cannot downgrade"), "{e}");
        assert!(upgrade_path("2.0", "1.31").is_err());
    }

    #[test]
    fn the_authentication_mode_moves_one_way_one_step_at_a_time() {
        use AuthenticationMode::{Api, ApiAndConfigMap, ConfigMap};
        let default = Configured::ApiAndConfigMap;
        assert_eq!(mode_steps(None, default), [ApiAndConfigMap]);
        assert_eq!(mode_steps(Some(&ConfigMap), default), [ApiAndConfigMap]);
        assert!(mode_steps(Some(&ApiAndConfigMap), default).is_empty());
        // The default means "at least access entries": an API cluster is left so.
        assert!(mode_steps(Some(&Api), default).is_empty());
        // EKS refuses CONFIG_MAP -> API: through API_AND_CONFIG_MAP.
        let api = Configured::Api;
        assert_eq!(mode_steps(None, api), [ApiAndConfigMap, Api]);
        assert_eq!(mode_steps(Some(&ConfigMap), api), [ApiAndConfigMap, Api]);
        assert_eq!(mode_steps(Some(&ApiAndConfigMap), api), [Api]);
        assert!(mode_steps(Some(&Api), api).is_empty());
        assert!(mode_steps(Some(&AuthenticationMode::from("NEW_MODE")), api).is_empty());
        let d = mode_detail(&ApiAndConfigMap, &Api);
        assert_eq!(d.name, "authentication mode API_AND_CONFIG_MAP -> API");
        assert_eq!(d.kind, "UpdateClusterConfig");
        let note = d.note.unwrap();
        assert!(
            note.contains("aws-auth ConfigMap stops admitting anyone")
                && note.contains("EKS cannot switch back"),
            "{note}"
        );
    }

    #[test]
    fn a_caller_without_an_access_entry_is_named_with_the_principal_to_add() {
        let caller = "arn:aws:sts::123456789012:assumed-role/Admins/alice@example.com";
        let role = "arn:aws:iam::123456789012:role/Admins".to_string();
        assert_eq!(lacks_entry(caller, &[]), Some(role.clone()));
        let other = "arn:aws:iam::123456789012:role/Others".to_string();
        assert_eq!(
            lacks_entry(caller, std::slice::from_ref(&other)),
            Some(role.clone())
        );
        // An entry for the role (with its path or without) admits every session of it.
        assert_eq!(lacks_entry(caller, &[other, role]), None);
        assert_eq!(
            lacks_entry(
                caller,
                &["arn:aws:iam::123456789012:role/teams/Admins".into()]
            ),
            None
        );
        let user = "arn:aws-cn:iam::123456789012:user/ops/bob";
        assert_eq!(
            lacks_entry(user, &[]),
            Some("arn:aws-cn:iam::123456789012:user/ops/bob".into())
        );
        // No entry can name the account root: not refused here.
        assert_eq!(lacks_entry("arn:aws:iam::123456789012:root", &[]), None);
    }

    #[test]
    fn the_live_mode_is_compared_only_for_an_api_record_or_an_api_cluster() {
        let live = |mode: &str| {
            let mut m = serde_json::Map::new();
            m.insert(MODE_FIELD.into(), json!(mode));
            m
        };
        let recorded =
            |spec: Value| crate::plan::diff::tests::recorded(crate::state::Status::Created, spec);
        let default = recorded(json!({"access_entries": true}));
        let api = recorded(json!({"access_entries": true, MODE_FIELD: "API"}));
        // A default deployment: left out, so a switch to `api` is a config change (the
        // record, without the field, stands for it), not drift.
        assert!(!reports_mode(&live("API_AND_CONFIG_MAP"), Some(&default)));
        assert!(!reports_mode(&live("CONFIG_MAP"), None));
        // Already API: reported, so `api` configured over it plans nothing.
        assert!(reports_mode(&live("API"), Some(&default)));
        // An `api` deployment: any live mode is compared (not API is drift).
        assert!(reports_mode(&live("API_AND_CONFIG_MAP"), Some(&api)));
        assert!(reports_mode(&live("API"), Some(&api)));
    }

    #[test]
    fn only_failed_and_deleting_clusters_are_unhealthy() {
        for ok in ["ACTIVE", "CREATING", "UPDATING", "PENDING"] {
            assert_eq!(health(ok), "healthy", "{ok}");
        }
        for bad in ["FAILED", "DELETING"] {
            assert_eq!(health(bad), bad);
        }
    }

    #[test]
    fn live_spec_and_outputs_come_from_describe_cluster() {
        use aws_sdk_eks::types::{Certificate, Identity, Oidc, VpcConfigResponse};
        let cluster = Cluster::builder()
            .name("ml")
            .arn("arn:aws:eks:us-east-1:123456789012:cluster/ml")
            .version("1.33")
            .role_arn("arn:aws:iam::123456789012:role/kfaws-ml-us-east-1-eks-cluster")
            .status(ClusterStatus::Active)
            .endpoint("https://ABC.gr7.us-east-1.eks.amazonaws.com")
            .certificate_authority(Certificate::builder().data("LS0tLS1CRUdJTg==").build())
            .identity(
                Identity::builder()
                    .oidc(
                        Oidc::builder()
                            .issuer("https://oidc.eks.us-east-1.amazonaws.com/id/ABC")
                            .build(),
                    )
                    .build(),
            )
            .resources_vpc_config(
                VpcConfigResponse::builder()
                    .vpc_id("vpc-1")
                    .cluster_security_group_id("sg-1")
                    .endpoint_public_access(true)
                    .endpoint_private_access(false)
                    .build(),
            )
            .encryption_config(secrets_encryption(
                "arn:aws:kms:us-east-1:123456789012:key/k",
            ))
            .build();
        let spec = ClusterResource::live_spec(&cluster);
        assert_eq!(spec["role_name"], "kfaws-ml-us-east-1-eks-cluster");
        assert_eq!(spec["endpoint_private_access"], false);
        assert_eq!(spec["secrets_encryption"], "kms");
        assert_eq!(spec["health"], "healthy");
        // No access config: a cluster older than access entries, CONFIG_MAP.
        assert_eq!(spec[MODE_FIELD], "CONFIG_MAP");
        assert_eq!(spec["access_entries"], false);
        let out = ClusterResource::outputs(&cluster);
        let keys: Vec<&str> = out.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "arn",
                "certificate_authority_data",
                "cluster_security_group_id",
                "endpoint",
                "name",
                "oidc_issuer",
                "vpc_id"
            ]
        );
        assert_eq!(out["certificate_authority_data"], "LS0tLS1CRUdJTg==");
    }
}
