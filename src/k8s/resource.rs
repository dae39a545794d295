//! A bundle of Kubernetes objects as a node of the graph: the vanilla
//! profile's `k8s.*` resources (DESIGN.md §3).
//!
//! - `create` and `update` both run [`Applier::apply`]: phased server-side
//!   apply of the whole bundle, prune of what left it. Idempotent, so a
//!   create re-run after `kill -9` simply applies again.
//! - `read` lists the bundle's ApplySet members: no parent and no member
//!   left means the bundle is gone (a parent deleted outside kfaws while
//!   members remain is a difference); an object of the bundle missing from the cluster (deleted out
//!   of band), a member that left the bundle, or an object a field of which
//!   another field manager changed or removed ([`edited`], case C13) is a
//!   difference, repaired by the next apply. Fields other actors add
//!   (controllers' status and annotations, defaults) are not drift.
//! - `delete` runs [`Applier::destroy_named`]: exactly the members of the
//!   ApplySet, in dependency order, then the parent.
//! - `check` (plan time), when the cluster exists: every object's API is
//!   served or defined by a CRD of the bundle (case C10), and no object of
//!   the bundle exists outside its ApplySet (kfaws never takes over, and so
//!   never deletes, what it did not apply); the apply checks that again.
//!   Undeletable namespaces, the EFS CSI driver's rules (C15, C16) and
//!   objects in two bundles are refused when the graph is built.
//! - Plans list the objects an update adds and removes, and every object a
//!   delete removes, saying what goes with a namespace or a CRD.
//!
//! The cluster is found by name through EKS `DescribeCluster` on every
//! call, and reached like any EKS cluster: its endpoint and CA, and the EKS
//! token `kfaws eks get-token` prints for kubectl, made in this process
//! ([`super::auth`]). A cluster that does not
//! exist holds no objects: `read` reports them gone and `delete` succeeds.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_eks::types::ClusterStatus;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::client::ClientBuilder;
use kube::config::KubeConfigOptions;
use kube::Client;
use regex_lite::Regex;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::apply::{Applier, ApplyOptions};
use super::auth::{EksAuthLayer, EksTokens};
use super::bundle::Bundle;
use super::discovery::Served;
use super::efs;
use super::kubeconfig::{self, ClusterAccess};
use super::object::GroupKind;
use crate::address::Address;
use crate::aws::eks::describe_cluster;
use crate::resource::{Applied, Check, Detail, Inputs, Observed, Resource, ResourceError};
use crate::state::ResourceState;

/// The kind recorded in state.
pub const KIND: &str = "kubernetes_manifests";

/// The value a placeholder filled from a dependency's output has while the
/// output is not known (plan time): objects' names never depend on one.
const UNKNOWN: &str = "known-after-apply";

static PLACEHOLDER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$\{([a-z_]+)\}").expect("a valid pattern"));

/// How graph resources reach the deployment's EKS cluster.
#[derive(Debug, Clone)]
pub struct ClusterConnector {
    /// The EKS cluster name.
    pub cluster_name: String,
    /// Its region (signs the tokens).
    pub region: String,
    /// EKS client for `DescribeCluster`.
    pub eks: aws_sdk_eks::Client,
    /// The tokens its clients send, one cache for every client of this
    /// connector and its clones ([`EksTokens::new`] for the cluster and region above).
    pub tokens: EksTokens,
    /// `(deployment, lineage)`: the `kfaws:deployment` and `kfaws:lineage` tags the cluster
    /// must carry to be this state's ([`crate::aws::eks::owned`]); a cluster of the name
    /// without them is refused, so that nothing is applied to or deleted from a cluster that
    /// another state (or no kfaws) made under the same name. `None`: not checked.
    pub owner: Option<(String, String)>,
}

impl ClusterConnector {
    /// A client for the cluster, or `None` when the cluster does not exist
    /// (or is being deleted).
    ///
    /// # Errors
    /// [`ResourceError`] when `DescribeCluster` fails or answers a cluster
    /// without endpoint or CA (still creating).
    pub async fn connect(&self) -> Result<Option<Client>, ResourceError> {
        match describe_cluster(&self.eks, &self.cluster_name).await? {
            Some(cluster) if cluster.status() != Some(&ClusterStatus::Deleting) => {
                self.client_for(&cluster).await.map(Some)
            }
            _ => Ok(None),
        }
    }

    /// A client for the cluster only when it is ACTIVE or UPDATING (one
    /// `DescribeCluster` call): `None` when it does not exist, is creating (no
    /// endpoint yet), failed or is being deleted. For lookups that must not
    /// fail on a cluster on its way.
    ///
    /// # Errors
    /// As [`ClusterConnector::connect`].
    pub async fn connect_if_ready(&self) -> Result<Option<Client>, ResourceError> {
        match describe_cluster(&self.eks, &self.cluster_name).await? {
            Some(cluster)
                if matches!(
                    cluster.status(),
                    Some(ClusterStatus::Active | ClusterStatus::Updating)
                ) =>
            {
                self.client_for(&cluster).await.map(Some)
            }
            _ => Ok(None),
        }
    }

    /// A client for `cluster` (as `DescribeCluster` answered it), once it is
    /// checked to carry [`ClusterConnector::owner`]'s tags.
    async fn client_for(
        &self,
        cluster: &aws_sdk_eks::types::Cluster,
    ) -> Result<Client, ResourceError> {
        if let Some((deployment, lineage)) = &self.owner {
            if !crate::aws::eks::owned(cluster.tags(), deployment, lineage) {
                let tag = |key: &str| {
                    cluster
                        .tags()
                        .and_then(|t| t.get(key))
                        .map_or("(none)".to_string(), |v| format!("{v:?}"))
                };
                let live_deployment = tag(crate::aws::stack::DEPLOYMENT_TAG);
                // The same deployment name, another lineage: another state
                // file of this deployment made the cluster (a second copy of
                // kfaws.toml with its own .kfaws).
                let way_on = match live_deployment == format!("{deployment:?}") {
                    true => "Another state of this deployment (another lineage: a copy of \
                             kfaws.toml with its own state directory) made it, or its tag was \
                             changed: run kfaws with that state's directory (--state-dir or \
                             state_dir), or put the tag back if this state made it"
                        .to_string(),
                    false => "Put the tags back if it is this deployment's, or `kfaws state rm` \
                              the k8s.* entries this state records to let go of them"
                        .to_string(),
                };
                return Err(ResourceError::refused(format!(
                    "EKS cluster {} ({}) does not carry this deployment's tags: kfaws:deployment \
                     is {live_deployment} and kfaws:lineage is {} (this state's: {deployment:?}, \
                     {lineage:?}); kfaws neither applies nor deletes Kubernetes objects in a \
                     cluster that is not this deployment's, and nothing was changed. {way_on}",
                    self.cluster_name,
                    cluster.arn().unwrap_or_default(),
                    tag(crate::aws::stack::LINEAGE_TAG),
                )));
            }
        }
        let missing = |what: &str| {
            ResourceError::msg(format!(
                "EKS cluster {} has no {what} yet (status {:?})",
                self.cluster_name,
                cluster
                    .status()
                    .map(ClusterStatus::as_str)
                    .unwrap_or("unknown")
            ))
        };
        let access = ClusterAccess {
            name: self.cluster_name.clone(),
            arn: cluster.arn().ok_or_else(|| missing("ARN"))?.to_string(),
            endpoint: cluster
                .endpoint()
                .ok_or_else(|| missing("endpoint"))?
                .to_string(),
            certificate_authority_data: cluster
                .certificate_authority()
                .and_then(|c| c.data())
                .ok_or_else(|| missing("certificate authority"))?
                .to_string(),
            region: self.region.clone(),
        };
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig::without_user(&access),
            &KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| {
            ResourceError::msg(format!(
                "cannot configure a client for EKS cluster {} at {}: {e}",
                self.cluster_name, access.endpoint
            ))
        })?;
        let builder = ClientBuilder::try_from(config).map_err(|e| {
            ResourceError::msg(format!(
                "cannot make a client for EKS cluster {} at {}: {e}",
                self.cluster_name, access.endpoint
            ))
        })?;
        Ok(builder
            .with_layer(&EksAuthLayer::new(self.tokens.clone()))
            .build())
    }
}

/// Where a bundle's objects come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// YAML embedded in this binary (`manifests/`), with `${name}`
    /// placeholders filled from [`ManifestsResource::values`] and
    /// [`ManifestsResource::inputs`].
    Template {
        /// The file it was embedded from, e.g. `manifests/efs-csi.yaml`.
        file: &'static str,
        /// Its text.
        text: &'static str,
    },
    /// Manifests named in config (a `kustomize build` output or a directory
    /// of YAML), read and checked when the graph is built, applied as written.
    Loaded {
        /// The config field that names them, e.g. `kubeflow.manifests`.
        field: String,
        /// The file or directory.
        path: PathBuf,
        /// The parsed objects, shared by every graph built from them
        /// (a plan builds one before and one after its read-only calls).
        bundle: Arc<Bundle>,
        /// Hex SHA-256 over the objects (canonical JSON, in order).
        sha256: String,
    },
}

/// A placeholder filled from a dependency's output at apply time.
#[derive(Debug, Clone)]
pub struct InputValue {
    /// The placeholder's name, `efs_file_system_id` for `${efs_file_system_id}`.
    pub placeholder: &'static str,
    /// The dependency.
    pub from: Address,
    /// Its output.
    pub output: &'static str,
}

/// A kind the cluster must serve once the bundle is applied, e.g.
/// `kubeflow.org/v1 PyTorchJob` after the training operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedKind {
    /// `group/version`.
    pub api_version: &'static str,
    /// The kind.
    pub kind: &'static str,
}

/// One bundle of Kubernetes objects in the graph (see the module docs).
#[derive(Debug, Clone)]
pub struct ManifestsResource {
    /// Its address, e.g. `k8s.efs-csi`.
    pub address: Address,
    /// The bundle name: the name of its ApplySet parent (a DNS-1123 subdomain).
    pub bundle: String,
    /// The objects.
    pub source: Source,
    /// Placeholder values from config.
    pub values: BTreeMap<String, String>,
    /// Placeholder values from dependencies' outputs.
    pub inputs: Vec<InputValue>,
    /// Dependencies besides those of `inputs` whose change re-applies the
    /// bundle (the cluster the objects live in, the bundles whose kinds they
    /// use).
    pub after: Vec<Address>,
    /// Dependencies that only order the bundle ([`Resource::input_dependencies`]
    /// leaves them out): the node groups its pods run on and the access
    /// entries that admit whoever runs kfaws, which must be there before the
    /// bundle and stay until it is deleted; one added (a node group, a
    /// teammate's entry) does not re-apply the bundle.
    pub ordered_after: Vec<Address>,
    /// Kinds that must be served after the apply.
    pub serves: Vec<ServedKind>,
    /// How the cluster is reached.
    pub connector: ClusterConnector,
    /// The address of the EKS cluster the objects live in: a plan that also
    /// deletes it takes them with it, so what would stop only the bundle's
    /// delete (training jobs that have not finished) does not stop that plan.
    pub cluster: Address,
    /// Expected apply time.
    pub estimate: Duration,
    /// Deadline of one apply or destroy, retries and waits included.
    pub timeout: Duration,
    /// Namespaces the configuration's other bundles declare or have
    /// objects in, each with one such object (`k8s.x (Kind ns/name)`): an
    /// update of this bundle that prunes one of its Namespace objects would
    /// delete them too (Kubernetes docs, "Namespaces"), so the plan refuses
    /// it. Empty for a bundle known only from state.
    pub used_elsewhere: BTreeMap<String, String>,
    /// Whether `--replace` may replace the bundle while bundles that depend
    /// on it exist ([`Resource::replaceable_under_dependants`]): `true` only
    /// where those hold no object of the kinds it serves and none in its
    /// namespaces, so they keep working across its delete and create.
    pub replaceable_under_dependants: bool,
}

/// Why a bundle's source cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The manifests cannot be read or parsed.
    #[error("{field}: {source}")]
    Bundle {
        /// The config field.
        field: String,
        /// The parse error (file, line).
        #[source]
        source: Box<super::BundleError>,
    },
    /// The manifests hold a namespace the API server never deletes.
    #[error("{field}: {} cannot be part of a bundle: the API server refuses to delete it, so the bundle could never be destroyed (Kubernetes docs, \"Namespaces\"); remove the Namespace object from the manifests (objects in it may stay)", .objects.join(", "))]
    Undeletable {
        /// The config field.
        field: String,
        /// Each such namespace and where it is written.
        objects: Vec<String>,
    },
    /// Two bundles hold the same object.
    #[error("{object} is in both {first} and {second}: each object may belong to one bundle; remove it from one of them")]
    Overlap {
        /// `Kind.group namespace/name`.
        object: String,
        /// The first bundle's source.
        first: String,
        /// The second bundle's source.
        second: String,
    },
    /// An object uses an API version the cluster's Kubernetes version no
    /// longer serves (case C10).
    #[error("{field}: {source}")]
    Removed {
        /// The config field.
        field: String,
        /// Every such object.
        #[source]
        source: super::removed::RemovedApis,
    },
    /// More than one source cannot be used: each error, one after the other.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Several(Vec<SourceError>),
    /// An object breaks a rule of the EFS CSI driver.
    #[error("{field}: {}", one_per_line(.errors))]
    Efs {
        /// The config field.
        field: String,
        /// Every broken rule.
        errors: Vec<efs::EfsError>,
    },
}

/// One error as is; several counted, one per line (as the config's errors).
fn one_per_line(errors: &[efs::EfsError]) -> String {
    match errors {
        [one] => one.to_string(),
        _ => {
            let lines: String = errors.iter().map(|e| format!("\n  - {e}")).collect();
            format!("{} problems:{lines}", errors.len())
        }
    }
}

impl Source {
    /// Reads manifests named by config `field`, checking the EFS CSI
    /// driver's rules (cases C15, C16) and, against Kubernetes
    /// `kubernetes_version` (`1.N`), the API versions removed by then (case
    /// C10, [`super::removed`]) before any call.
    ///
    /// # Errors
    /// [`SourceError`] naming the field, file and line.
    pub fn load(
        field: &str,
        bundle: &str,
        path: PathBuf,
        kubernetes_version: &str,
    ) -> Result<Self, SourceError> {
        let parsed = Bundle::from_path(bundle, &path).map_err(|source| SourceError::Bundle {
            field: field.into(),
            source: Box::new(source),
        })?;
        super::removed::check(&parsed, kubernetes_version).map_err(|source| {
            SourceError::Removed {
                field: field.into(),
                source,
            }
        })?;
        let errors = efs::check_bundle(&parsed);
        if !errors.is_empty() {
            return Err(SourceError::Efs {
                field: field.into(),
                errors,
            });
        }
        let undeletable = undeletable(&parsed);
        if !undeletable.is_empty() {
            return Err(SourceError::Undeletable {
                field: field.into(),
                objects: undeletable,
            });
        }
        Ok(Self::Loaded {
            field: field.into(),
            path,
            sha256: content_hash(&parsed),
            bundle: Arc::new(parsed),
        })
    }
}

/// Replaces every `${name}` of `text` by `values[name]`.
///
/// # Errors
/// The first placeholder without a value.
pub fn render(text: &str, values: &BTreeMap<String, String>) -> Result<String, String> {
    let mut missing = None;
    let out = PLACEHOLDER.replace_all(text, |c: &regex_lite::Captures<'_>| {
        match values.get(&c[1]) {
            Some(v) => v.clone(),
            None => {
                missing.get_or_insert_with(|| c[1].to_string());
                String::new()
            }
        }
    });
    match missing {
        Some(name) => Err(format!("no value for placeholder ${{{name}}}")),
        None => Ok(out.into_owned()),
    }
}

/// A bundle's spec fields that hash its Secret values ([`Resource::sensitive_fields`]).
pub const SENSITIVE_FIELDS: &[&str] = &["sha256"];

/// A bundle's outputs that hash its Secret values, never printed either (`kfaws state show`).
pub const SENSITIVE_OUTPUTS: &[&str] = &["manifest_sha256"];

/// `entry` (a state entry) as `kfaws state show` prints it: for a bundle, `shown` in place of
/// every value that hashes its Secret values: the [`SENSITIVE_FIELDS`] of its spec and of an
/// unfinished update's (`updating`), its [`SENSITIVE_OUTPUTS`], and the hashes over them
/// (`spec_hash`; `inputs_hash`, over inputs that may be another bundle's outputs). Another
/// kind is left as it is.
pub fn hide_sensitive(entry: &mut ResourceState, shown: &str) {
    if entry.kind != KIND {
        return;
    }
    let hidden = Value::String(shown.to_string());
    for spec in std::iter::once(&mut entry.spec).chain(entry.updating.as_mut()) {
        for field in SENSITIVE_FIELDS {
            if let Some(v) = spec.get_mut(*field) {
                *v = hidden.clone();
            }
        }
    }
    for output in SENSITIVE_OUTPUTS {
        if let Some(v) = entry.outputs.get_mut(*output) {
            *v = hidden.clone();
        }
    }
    entry.spec_hash = shown.to_string();
    if entry.inputs_hash.is_some() {
        entry.inputs_hash = Some(shown.to_string());
    }
}

/// Hex SHA-256 over the objects of `bundle` (canonical JSON, in order).
fn content_hash(bundle: &Bundle) -> String {
    let mut hash = Sha256::new();
    for m in &bundle.objects {
        hash.update(m.object.to_string().as_bytes());
        hash.update(b"\n");
    }
    hex::encode(hash.finalize())
}

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

impl ManifestsResource {
    /// Where the objects come from: the embedded file or the configured path.
    pub fn source_label(&self) -> String {
        match &self.source {
            Source::Template { file, .. } => (*file).to_string(),
            Source::Loaded { path, .. } => path.display().to_string(),
        }
    }

    /// The bundle with `inputs` filled in; `None` inputs: plan time, every
    /// input placeholder is [`UNKNOWN`].
    /// Borrowed for configured manifests (a Kubeflow release holds
    /// hundreds of objects; `spec` asks for them on every plan step).
    fn bundle(&self, inputs: Option<&Inputs>) -> Result<Cow<'_, Bundle>, ResourceError> {
        let (file, text) = match &self.source {
            Source::Loaded { bundle, .. } => return Ok(Cow::Borrowed(bundle.as_ref())),
            Source::Template { file, text } => (file, text),
        };
        let mut values = self.values.clone();
        for input in &self.inputs {
            let value = match inputs {
                None => UNKNOWN.to_string(),
                Some(i) => match i.get(&input.from, input.output)? {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
            };
            values.insert(input.placeholder.to_string(), value);
        }
        let rendered =
            render(text, &values).map_err(|e| ResourceError::msg(format!("{file}: {e}")))?;
        let bundle = Bundle::from_sources(&self.bundle, [(PathBuf::from(*file), rendered)])
            .map_err(|e| ResourceError::msg(e.to_string()))?;
        if inputs.is_some() {
            let errors = efs::check_bundle(&bundle);
            if !errors.is_empty() {
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                return Err(ResourceError::msg(text.join("; ")));
            }
        }
        Ok(Cow::Owned(bundle))
    }

    /// The PersistentVolumeClaims of the bundle as `(namespace, name)`.
    fn claims(&self) -> Result<Vec<(String, String)>, ResourceError> {
        Ok(self
            .bundle(None)?
            .objects
            .iter()
            .filter(|m| m.kind == "PersistentVolumeClaim" && m.group().is_empty())
            .map(|m| {
                (
                    m.namespace.clone().unwrap_or_else(|| "default".into()),
                    m.name.clone(),
                )
            })
            .collect())
    }

    /// Refuses, at plan, a change that deletes PersistentVolumeClaims a pod
    /// still mounts (the bundle's delete, or an update that drops them,
    /// e.g. a changed `user_namespace`): Kubernetes keeps a claim in use
    /// until every pod using it is gone (the `kubernetes.io/pvc-protection`
    /// finalizer; Kubernetes docs, "Storage Object in Use Protection"), so
    /// the apply would wait out its deadline and fail. Such pods belong to
    /// others (a `kfaws train` PyTorchJob, a notebook), which kfaws does
    /// not delete. `claims` are `(namespace, name)`.
    async fn claims_in_use(&self, claims: &[(String, String)]) -> Result<(), ResourceError> {
        use k8s_openapi::api::core::v1::Pod;
        if claims.is_empty() {
            return Ok(());
        }
        let Some(client) = self.connector.connect().await? else {
            return Ok(());
        };
        let mut users = Vec::new();
        for (namespace, claim) in claims {
            let pods = kube::Api::<Pod>::namespaced(client.clone(), namespace)
                .list(&kube::api::ListParams::default())
                .await
                .map_err(|e| ResourceError::msg(format!("listing pods in {namespace}: {e}")))?;
            for pod in pods {
                let done = matches!(
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                );
                let mounts = pod.spec.as_ref().is_some_and(|spec| {
                    spec.volumes.iter().flatten().any(|v| {
                        v.persistent_volume_claim
                            .as_ref()
                            .is_some_and(|c| &c.claim_name == claim)
                    })
                });
                if done || !mounts {
                    continue;
                }
                let owner = pod
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|o| o.controller == Some(true))
                    .map(|o| format!(" of {} {}", o.kind, o.name))
                    .unwrap_or_default();
                users.push(format!(
                    "{namespace}/{}{owner} (claim {claim})",
                    pod.metadata.name.unwrap_or_default()
                ));
            }
        }
        if users.is_empty() {
            return Ok(());
        }
        Err(ResourceError::msg(format!(
            "bundle {:?}: pods still mount a PersistentVolumeClaim this change deletes: {}; \
             Kubernetes deletes a claim only once no pod uses it (Storage Object in Use \
             Protection), so kfaws would wait for it and fail. Stop them first (e.g. `kubectl delete pytorchjob NAME -n \
             NAMESPACE` for a kfaws train job), then run the command again",
            self.bundle,
            users.join(", ")
        )))
    }

    /// Refuses, at plan, a change that deletes CRDs or namespaces among
    /// `removed` (object keys) while training jobs of those CRDs or in those
    /// namespaces have not finished ([`super::jobs`]), other than those among
    /// `known` (applied by the bundle): the delete would take them and stop
    /// their pods mid-run. Without a cluster there are none.
    async fn refuse_unfinished_jobs(
        &self,
        removed: &[String],
        known: &[String],
    ) -> Result<(), ResourceError> {
        use super::jobs::{job_crds, unfinished_jobs, UnfinishedJob};
        let crds = removed_crds(removed);
        let namespaces = removed_namespaces(removed);
        if crds.is_empty() && namespaces.is_empty() {
            return Ok(());
        }
        let Some(client) = self.connector.connect().await? else {
            return Ok(());
        };
        let known: BTreeSet<&str> = known.iter().map(String::as_str).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let listing = |what: &str, e: super::retry::RetryError| {
            ResourceError::msg(format!("listing {what}: {e}"))
        };
        // Every job kind's CRD when a namespace goes: its jobs in it go too.
        let mut sources: BTreeSet<String> = crds.iter().map(|c| c.to_string()).collect();
        if !namespaces.is_empty() {
            sources.extend(
                job_crds(&client, deadline)
                    .await
                    .map_err(|e| listing("the CRDs", e))?,
            );
        }
        let mut running: Vec<UnfinishedJob> = Vec::new();
        for crd in &sources {
            let jobs = unfinished_jobs(&client, crd, deadline)
                .await
                .map_err(|e| listing(&format!("the custom resources of CRD {crd}"), e))?;
            running.extend(jobs.into_iter().filter(|j| {
                let goes = crds.contains(&crd.as_str())
                    || j.namespace
                        .as_deref()
                        .is_some_and(|ns| namespaces.contains(&ns));
                goes && !known.contains(key(&j.gk, j.namespace.as_deref(), &j.name).as_str())
            }));
        }
        let Some(first) = running.first() else {
            return Ok(());
        };
        let namespace = |j: &UnfinishedJob| match &j.namespace {
            Some(ns) => (format!("{ns}/"), format!(" -n {ns}")),
            None => (String::new(), String::new()),
        };
        let cap = super::delete::MAX_HOLDERS;
        let mut listed = running
            .iter()
            .take(cap)
            .map(|j| format!("{} {}{}", j.gk.kind, namespace(j).0, j.name))
            .collect::<Vec<_>>()
            .join(", ");
        if running.len() > cap {
            listed.push_str(&format!(" and {} more", running.len() - cap));
        }
        let plural = |n: usize, one: &'static str, many: &'static str| match n {
            1 => one,
            _ => many,
        };
        let mut deleted = Vec::new();
        if !crds.is_empty() {
            let what = plural(crds.len(), "CRD", "CRDs");
            deleted.push(format!("{what} {}", crds.join(", ")));
        }
        if !namespaces.is_empty() {
            let what = plural(namespaces.len(), "namespace", "namespaces");
            deleted.push(format!("{what} {}", namespaces.join(", ")));
        }
        Err(ResourceError::msg(format!(
            "bundle {:?}: this change deletes {} and with {} training jobs that have not \
             finished: {listed}. Deleting a CRD deletes every custom resource of it, deleting a \
             namespace everything in it, and a job's pods go with the job. Wait for them to \
             finish (Succeeded, Failed or Complete) or delete them (e.g. `kubectl delete {}.{} \
             {}{}`), then run the command again; finished jobs are deleted with the rest",
            self.bundle,
            deleted.join(" and "),
            plural(crds.len() + namespaces.len(), "it", "them"),
            first.gk.kind.to_lowercase(),
            first.gk.group,
            first.name,
            namespace(first).1
        )))
    }

    /// For the CRDs and Namespaces among `removed` (object keys), their
    /// custom resources (those in the namespaces) that are not among `known`
    /// (not applied by the bundle: a PyTorchJob of `kfaws train` or a
    /// user's), which the delete removes too ([`super::delete`]); each with
    /// its finalizers, whose controller must still run to remove them. At
    /// most [`super::delete::MAX_HOLDERS`] per CRD or namespace, the rest
    /// counted. Best effort for a plan: without a cluster, or when a list
    /// fails (logged), none.
    async fn unlisted_custom_resources(&self, removed: &[String], known: &[String]) -> Vec<Detail> {
        let crds = removed_crds(removed);
        let namespaces = removed_namespaces(removed);
        if crds.is_empty() && namespaces.is_empty() {
            return vec![];
        }
        let Ok(Some(client)) = self.connector.connect().await else {
            return vec![];
        };
        let mut known: BTreeSet<String> = known.iter().cloned().collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        // (what deletes them, the custom resources), in that order.
        let mut groups: Vec<(String, Vec<(GroupKind, ObjectMeta)>)> = Vec::new();
        for crd in crds {
            match super::delete::crd_instances(&client, crd, deadline).await {
                Ok(Some((resource, items))) => {
                    let gk = GroupKind::new(&resource.group, &resource.kind);
                    let items = items.into_iter().map(|m| (gk.clone(), m)).collect();
                    groups.push((format!("CRD {crd}"), items));
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(crd, error = %e, "cannot list the custom resources of a CRD the plan deletes");
                }
            }
        }
        match super::delete::namespace_instances(&client, &namespaces, deadline, 8).await {
            Ok(found) => {
                for ns in &namespaces {
                    let items = found
                        .iter()
                        .filter(|(_, m)| m.namespace.as_deref() == Some(*ns))
                        .map(|(r, m)| (GroupKind::new(&r.group, &r.kind), m.clone()))
                        .collect();
                    groups.push((format!("namespace {ns}"), items));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the custom resources in a namespace the plan deletes");
            }
        }
        // Jobs that have not finished: deleting one stops its training
        // (a plan that deletes the cluster too is not refused for them).
        let mut unfinished: BTreeSet<String> = BTreeSet::new();
        let jobs_listed = groups.iter().any(|(_, items)| {
            items
                .iter()
                .any(|(gk, _)| super::jobs::is_job_kind(&gk.kind))
        });
        if jobs_listed {
            match super::jobs::job_crds(&client, deadline).await {
                Ok(crds) => {
                    for crd in crds {
                        match super::jobs::unfinished_jobs(&client, &crd, deadline).await {
                            Ok(jobs) => unfinished.extend(
                                jobs.iter()
                                    .map(|j| key(&j.gk, j.namespace.as_deref(), &j.name)),
                            ),
                            Err(e) => {
                                tracing::warn!(crd, error = %e, "cannot list the jobs of a CRD");
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot list the CRDs of training jobs"),
            }
        }
        let mut details = Vec::new();
        for (by, items) in groups {
            let note = format!("not applied by `kfaws apply`; deleted with {by}");
            let mut others: Vec<Detail> = Vec::new();
            for (gk, meta) in &items {
                let Some(name) = meta.name.as_deref() else {
                    continue;
                };
                let k = key(gk, meta.namespace.as_deref(), name);
                // Once: a job of a CRD being deleted, in a namespace being deleted.
                if !known.insert(k.clone()) {
                    continue;
                }
                let finalizers = meta.finalizers.clone().unwrap_or_default();
                let mut note = note.clone();
                if unfinished.contains(&k) {
                    note.push_str("; has not finished: deleting it stops its training");
                }
                if !finalizers.is_empty() {
                    note.push_str(&format!(
                        "; finalizers {} (their controller must still run to remove them)",
                        finalizers.join(", ")
                    ));
                }
                let (kind, object) = k.split_once(' ').unwrap_or((&k, ""));
                others.push(Detail {
                    action: "Remove".into(),
                    name: object.to_string(),
                    kind: kind.to_string(),
                    replacement: None,
                    condition: None,
                    note: Some(note),
                });
            }
            let cap = super::delete::MAX_HOLDERS;
            if others.len() > cap {
                let more = others.len() - cap;
                details.extend(others.into_iter().take(cap));
                details.push(Detail {
                    action: "Remove".into(),
                    name: format!("{more} more"),
                    kind: "custom resources".to_string(),
                    replacement: None,
                    condition: None,
                    note: Some(note),
                });
            } else {
                details.extend(others);
            }
        }
        details
    }

    /// `Kind.group namespace/name` of every object, sorted: the spec's
    /// `objects` (names never depend on dependencies' outputs).
    pub fn objects(&self) -> Vec<String> {
        let bundle = match self.bundle(None) {
            Ok(b) => b,
            // An embedded template that does not parse is a bug caught by
            // the unit tests; show it in the plan rather than panic.
            Err(e) => return vec![format!("(invalid: {e})")],
        };
        let mut objects: Vec<String> = bundle.objects.iter().map(manifest_key).collect();
        objects.sort();
        objects
    }

    /// Each object's key (as [`Self::objects`]) with the first 12 hex digits
    /// of the SHA-256 of its manifest (canonical JSON, input placeholders
    /// unfilled): a plan names the objects whose manifest was edited since
    /// the last apply (`content.<key>`), not only that the bundle's hash
    /// changed. Each hash is compared only with the same object's earlier
    /// one, so 48 bits leave a missed edit at odds of 2^-48.
    ///
    /// A Secret's `data` and `stringData` values are left out (its keys
    /// stay): the plan is printed in CI logs, and an unsalted hash of a
    /// short value is a guessable record of it. An edited Secret value shows
    /// only as the bundle's `sha256` change.
    pub fn content(&self) -> BTreeMap<String, String> {
        let Ok(bundle) = self.bundle(None) else {
            return BTreeMap::new();
        };
        bundle
            .objects
            .iter()
            .map(|m| {
                let mut object = m.object.clone();
                if m.group().is_empty() && m.kind == "Secret" {
                    for field in ["data", "stringData"] {
                        if let Some(values) = object.get_mut(field).and_then(Value::as_object_mut) {
                            values.values_mut().for_each(|v| *v = Value::Null);
                        }
                    }
                }
                let digest = Sha256::digest(object.to_string().as_bytes());
                (manifest_key(m), hex::encode(&digest[..6]))
            })
            .collect()
    }

    /// The namespaces this bundle declares (its Namespace objects) or puts
    /// objects in, each with the object's key (`Kind.group ns/name`).
    pub fn namespaces(&self) -> Vec<(String, String)> {
        let Ok(bundle) = self.bundle(None) else {
            return vec![];
        };
        bundle
            .objects
            .iter()
            .filter_map(|m| {
                let ns = if m.group().is_empty() && m.kind == "Namespace" {
                    m.name.clone()
                } else {
                    m.namespace.clone()?
                };
                Some((ns, manifest_key(m)))
            })
            .collect()
    }

    /// The refusal of an update that prunes a Namespace object other
    /// bundles use ([`ManifestsResource::used_elsewhere`]); `pruned` as
    /// [`pruned`] returns it. Pure.
    fn prunes_used_namespaces(&self, pruned: &[String]) -> Result<(), ResourceError> {
        let problems: Vec<String> = pruned
            .iter()
            .filter_map(|k| k.strip_prefix("Namespace "))
            .filter_map(|ns| {
                let user = self.used_elsewhere.get(ns)?;
                Some(format!(
                    "this change deletes Namespace {ns} (it left {}), and with it everything in \
                     it, but {user} is there; keep the Namespace object in {}",
                    self.source_label(),
                    self.source_label()
                ))
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ResourceError::msg(problems.join("\n")))
        }
    }

    /// Refuses objects in a namespace that neither the cluster has nor any
    /// bundle of the configuration declares or uses (this bundle's Namespace
    /// objects, [`ManifestsResource::used_elsewhere`]): the apply would fail
    /// half way with `namespaces "…" not found`. One GET per such
    /// namespace. A namespace the cluster has is refused too when a bundle
    /// this plan deletes (`check.deletes`) recorded its Namespace object:
    /// deleting it deletes these objects with it, which the state would still
    /// record as applied.
    async fn refuse_missing_namespaces(
        &self,
        client: &Client,
        bundle: &Bundle,
        targets: &[super::discovery::Target],
        check: &Check<'_>,
    ) -> Result<(), ResourceError> {
        let declared: BTreeSet<&str> = bundle
            .objects
            .iter()
            .filter(|m| m.kind == "Namespace" && m.group().is_empty())
            .map(|m| m.name.as_str())
            .collect();
        let mut objects: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for t in targets {
            let Some(ns) = t.object.namespace.as_deref() else {
                continue;
            };
            if declared.contains(ns) || self.used_elsewhere.contains_key(ns) {
                continue;
            }
            let m = &bundle.objects[t.index];
            objects
                .entry(ns)
                .or_default()
                .push(format!("{} ({})", m.describe(), m.origin));
        }
        // Namespace → the bundle this plan deletes that recorded its Namespace object.
        let deleted_with: BTreeMap<String, &crate::address::Address> = check
            .deletes
            .iter()
            .filter_map(|a| Some((a, check.state.resources.get(a)?)))
            .filter(|(_, r)| r.kind == KIND)
            .flat_map(|(a, r)| {
                recorded_objects(r)
                    .into_iter()
                    .filter_map(move |o| Some((o.strip_prefix("Namespace ")?.to_string(), a)))
            })
            .collect();
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
        let mut problems = Vec::new();
        for (ns, objects) in objects {
            if let Some(owner) = deleted_with.get(ns) {
                problems.push(format!(
                    "{}: namespace {ns} is deleted with {owner}, which this plan destroys, and \
                     these objects would be deleted with it: {}; keep {owner} in the \
                     configuration, or add a Namespace object for {ns} to the manifests",
                    self.source_label(),
                    objects.join(", ")
                ));
                continue;
            }
            let found = api.get_metadata_opt(ns).await.map_err(|e| {
                ResourceError::msg(format!(
                    "reading Namespace {ns} from EKS cluster {}: {}",
                    self.connector.cluster_name,
                    super::retry::message(&e)
                ))
            })?;
            if found.is_none() {
                problems.push(format!(
                    "{}: namespace {ns} is not in the cluster and no bundle creates it, so the \
                     apply would fail there; add a Namespace object for it to the manifests or \
                     fix metadata.namespace: {}",
                    self.source_label(),
                    objects.join(", ")
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ResourceError::msg(problems.join("\n")))
        }
    }

    fn applier(&self, client: Client) -> Applier {
        Applier::with_options(
            client,
            ApplyOptions {
                timeout: self.timeout,
                ..ApplyOptions::default()
            },
        )
    }

    async fn client(&self) -> Result<Client, ResourceError> {
        self.connector.connect().await?.ok_or_else(|| {
            ResourceError::msg(format!(
                "EKS cluster {} does not exist: {} cannot be applied",
                self.connector.cluster_name, self.address
            ))
        })
    }

    async fn apply(&self, inputs: &Inputs) -> Result<Applied, ResourceError> {
        let bundle = self.bundle(Some(inputs))?;
        let client = self.client().await?;
        let applier = self.applier(client.clone());
        self.refuse_foreign(&applier, &bundle).await?;
        let report = boxed_apply(&applier, &bundle)
            .await
            .map_err(|e| failed(e.to_string()))?;
        for wanted in &self.serves {
            self.wait_served(&client, wanted).await?;
        }
        tracing::info!(
            address = %self.address,
            objects = report.objects.len(),
            pruned = report.pruned.deleted.len(),
            "bundle applied"
        );
        Ok(Applied {
            physical_id: report.applyset_id.clone(),
            outputs: BTreeMap::from([
                ("applyset_id".to_string(), json!(report.applyset_id)),
                ("bundle".to_string(), json!(self.bundle)),
                ("objects".to_string(), json!(report.objects.len())),
                // Changes whenever what was applied changes, so that
                // dependants (a claim on a replaced volume) are re-applied.
                ("manifest_sha256".to_string(), json!(content_hash(&bundle))),
            ]),
        })
    }

    /// Fails when objects of `bundle` exist outside its ApplySet (see
    /// [`super::ApplyError::Foreign`]).
    async fn refuse_foreign(
        &self,
        applier: &Applier,
        bundle: &Bundle,
    ) -> Result<(), ResourceError> {
        let foreign = boxed_foreign(applier, bundle)
            .await
            .map_err(|e| ResourceError::msg(e.to_string()))?;
        if foreign.is_empty() {
            return Ok(());
        }
        Err(ResourceError::msg(
            super::ApplyError::Foreign {
                bundle: bundle.name.clone(),
                objects: foreign,
            }
            .to_string(),
        ))
    }

    /// Polls discovery until `wanted` is served (a CRD's kind is served a
    /// moment after it is Established), within 60 s.
    async fn wait_served(&self, client: &Client, wanted: &ServedKind) -> Result<(), ResourceError> {
        let (group, version) = wanted
            .api_version
            .split_once('/')
            .unwrap_or(("", wanted.api_version));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let served = Served::fetch(client).await.map_err(|e| {
                ResourceError::msg(format!("API discovery: {}", super::retry::message(&e)))
            })?;
            if served.get(group, version, wanted.kind).is_some() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ResourceError::msg(format!(
                    "applied, but the cluster does not serve {} {} (served versions of the \
                     kind: {:?}); the bundle from {} must define it",
                    wanted.api_version,
                    wanted.kind,
                    served.versions_of(&GroupKind::new(group, wanted.kind)),
                    self.source_label()
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

// The applier's futures are `Send`, but inside `#[async_trait]` methods
// rustc cannot prove it for their higher-ranked closures
// (rust-lang/rust#102211); boxing them in plain functions, where the types
// are concrete, settles it.
fn boxed_apply<'a>(
    applier: &'a Applier,
    bundle: &'a Bundle,
) -> BoxFuture<'a, Result<super::ApplyReport, super::ApplyError>> {
    Box::pin(applier.apply(bundle))
}

/// Objects of a bundle found outside its ApplySet, with the set they carry.
type Foreign = Vec<(super::ObjectRef, Option<String>)>;

fn boxed_foreign<'a>(
    applier: &'a Applier,
    bundle: &'a Bundle,
) -> BoxFuture<'a, Result<Foreign, super::ApplyError>> {
    Box::pin(applier.foreign(bundle))
}

fn boxed_destroy<'a>(
    applier: &'a Applier,
    bundle: &'a str,
    kinds: super::applyset::Inventory,
) -> BoxFuture<'a, Result<super::delete::DeleteReport, super::ApplyError>> {
    Box::pin(applier.destroy_named(bundle, kinds))
}

fn boxed_check<'a>(
    applier: &'a Applier,
    bundle: &'a Bundle,
) -> BoxFuture<'a, Result<Vec<super::discovery::Target>, super::ApplyError>> {
    Box::pin(applier.check(bundle))
}

fn boxed_members<'a>(
    set: &'a super::applyset::ApplySet,
    client: &'a Client,
    served: &'a Served,
    inventory: &'a super::applyset::Inventory,
    concurrency: usize,
) -> BoxFuture<'a, Result<Vec<super::applyset::Member>, super::applyset::InventoryError>> {
    Box::pin(set.members(client, served, inventory, concurrency))
}

/// Whether someone else changed or removed a field of `manifest` on the
/// live object `meta` describes: server-side apply tracks which field
/// manager owns each field (`metadata.managedFields`, Kubernetes docs,
/// "Server-Side Apply"); a field another manager changes moves to it, a
/// field someone removes leaves every set. So the object is untouched
/// exactly when every field the manifest sets is still owned by our apply.
/// Fields of lists are checked down to the list (its entries are keyed
/// differently), atomic maps down to the map; fields other managers add
/// (status, defaults, a controller's annotations) do not count.
pub fn edited(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    field_manager: &str,
    manifest: &Value,
) -> bool {
    !edited_fields(meta, field_manager, manifest).is_empty()
}

/// The fields [`edited`] finds: each field path of `manifest` that
/// `field_manager` no longer owns, dotted (`automountServiceAccountToken`),
/// with keys that hold a dot or a slash bracketed
/// (`metadata.annotations[eks.amazonaws.com/role-arn]`), in the
/// manifest's key order. Empty when nothing was edited, or when the object
/// was not applied by `field_manager` at all.
pub fn edited_fields(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    field_manager: &str,
    manifest: &Value,
) -> Vec<String> {
    let mut owned = serde_json::Map::new();
    for entry in meta.managed_fields.iter().flatten() {
        let ours = entry.manager.as_deref() == Some(field_manager)
            && entry.operation.as_deref() == Some("Apply")
            && entry.subresource.as_deref().unwrap_or("").is_empty();
        if let (true, Some(fields)) = (ours, &entry.fields_v1) {
            if let Value::Object(m) = &fields.0 {
                owned.extend(m.clone());
            }
        }
    }
    if owned.is_empty() {
        // Not applied by us at all (or managedFields dropped): nothing to compare.
        return Vec::new();
    }
    let Value::Object(top) = manifest else {
        return Vec::new();
    };
    let mut tracked = top.clone();
    for untracked in ["apiVersion", "kind", "status"] {
        tracked.remove(untracked);
    }
    if let Some(Value::Object(md)) = tracked.get_mut("metadata") {
        md.remove("name");
        md.remove("namespace");
        if md.is_empty() {
            tracked.remove("metadata");
        }
    }
    let mut out = Vec::new();
    uncovered(&Value::Object(tracked), &Value::Object(owned), "", &mut out);
    out
}

/// An edited field of [`edited_fields`] as the plan names it: an annotation or a label with
/// what it is now, `PATH (removed)` or `PATH (now "value")` (the members' metadata holds
/// them; a value over 64 characters is shortened), so a removed IRSA role annotation reads
/// apart from one pointing at another role; any other path as it is (members are read as
/// metadata only).
pub fn describe_edit(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    path: &str,
) -> String {
    for (prefix, map) in [
        ("metadata.annotations", &meta.annotations),
        ("metadata.labels", &meta.labels),
    ] {
        let key = path.strip_prefix(prefix).and_then(|rest| {
            rest.strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .or_else(|| rest.strip_prefix('.'))
        });
        if let Some(key) = key {
            return match map.as_ref().and_then(|m| m.get(key)) {
                None => format!("{path} (removed)"),
                Some(v) => format!("{path} (now {})", kfaws_trainer_contract::quoted(v)),
            };
        }
    }
    path.to_string()
}

/// Appends to `out` every field path of `manifest` that is not in `owned`
/// (a `fieldsV1` tree: keys `f:<name>` for fields, `k:<json>` for the entry
/// of a list of maps keyed by its merge keys, `v:<json>` for an entry of a
/// set), below `path`: through maps and into the entries of keyed lists
/// (a container's `image` that `kubectl set image` took is reported as
/// `spec.template.spec.containers[efs-plugin].image`).
fn uncovered(manifest: &Value, owned: &Value, path: &str, out: &mut Vec<String>) {
    let Value::Object(fields) = manifest else {
        return;
    };
    for (k, v) in fields {
        if v.is_null() {
            continue;
        }
        let here = match (path.is_empty(), k.contains(['.', '/'])) {
            (true, _) => k.clone(),
            (false, true) => format!("{path}[{k}]"),
            (false, false) => format!("{path}.{k}"),
        };
        match owned.get(format!("f:{k}")) {
            None => out.push(here),
            // A map or list owned as a whole (`x-kubernetes-map-type:
            // atomic`, e.g. a RoleBinding's roleRef, or an atomic list such
            // as a container's args) has no entries of its own in `fieldsV1`.
            Some(Value::Object(sub)) if sub.is_empty() => {}
            Some(sub) if v.is_object() => uncovered(v, sub, &here, out),
            Some(Value::Object(entries)) if v.is_array() => {
                list_uncovered(v.as_array().expect("an array"), entries, &here, out);
            }
            Some(_) => {}
        }
    }
}

/// [`uncovered`] for the entries of a list: a map entry is found by the
/// `k:{...}` key whose merge-key values it has, and descended into; a
/// scalar entry by its `v:` key. An entry none of `entries` names was taken
/// out of our set (reported as the list's path with the entry's key).
fn list_uncovered(
    items: &[Value],
    entries: &serde_json::Map<String, Value>,
    path: &str,
    out: &mut Vec<String>,
) {
    let keyed: Vec<(serde_json::Map<String, Value>, &Value)> = entries
        .iter()
        .filter_map(|(k, sub)| {
            let json = k.strip_prefix("k:")?;
            match serde_json::from_str(json) {
                Ok(Value::Object(key)) => Some((key, sub)),
                _ => None,
            }
        })
        .collect();
    for item in items {
        match item {
            Value::Object(fields) => {
                // A merge key the manifest leaves out is defaulted by the
                // server (a port's `protocol: TCP`): it matches any value.
                let found = keyed.iter().find(|(key, _)| {
                    key.keys().any(|f| fields.contains_key(f))
                        && key
                            .iter()
                            .all(|(f, want)| fields.get(f).is_none_or(|have| have == want))
                });
                let label = |key: &serde_json::Map<String, Value>| {
                    key.iter()
                        .map(|(f, v)| match (key.len(), v.as_str()) {
                            (1, Some(s)) => s.to_string(),
                            (_, Some(s)) => format!("{f}={s}"),
                            _ => format!("{f}={v}"),
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                };
                match found {
                    Some((key, sub)) => {
                        uncovered(item, sub, &format!("{path}[{}]", label(key)), out)
                    }
                    // Lists of maps without merge keys are atomic: owned
                    // whole, their entries not listed.
                    None if keyed.is_empty() => {}
                    None => out.push(format!("{path}[{}]", item_label(fields))),
                }
            }
            scalar => {
                let listed = entries.contains_key(&format!("v:{scalar}"));
                if !listed && entries.keys().any(|k| k.starts_with("v:")) {
                    out.push(format!("{path}[{scalar}]"));
                }
            }
        }
    }
}

/// How a list entry that left our set is named: its `name` where it has
/// one, else its first field.
fn item_label(fields: &serde_json::Map<String, Value>) -> String {
    match fields.get("name").and_then(Value::as_str) {
        Some(name) => name.to_string(),
        None => fields
            .iter()
            .next()
            .map(|(k, v)| format!("{k}={v}"))
            .unwrap_or_default(),
    }
}

/// The object keys recorded in a state entry that `bundle` no longer
/// holds: what an update prunes.
fn pruned(recorded: &ResourceState, bundle: &Bundle) -> Vec<String> {
    let desired: BTreeSet<String> = bundle.objects.iter().map(manifest_key).collect();
    recorded_objects(recorded)
        .into_iter()
        .filter(|k| !desired.contains(k))
        .collect()
}

/// The PersistentVolumeClaims among `pruned` object keys, as
/// `(namespace, name)`.
fn dropped_claims(pruned: &[String]) -> Vec<(String, String)> {
    pruned
        .iter()
        .filter_map(|k| k.strip_prefix("PersistentVolumeClaim "))
        .filter_map(|nn| nn.split_once('/'))
        .map(|(ns, name)| (ns.to_string(), name.to_string()))
        .collect()
}

/// The objects recorded in a state entry's spec and, after an unfinished
/// update ([`ResourceState::updating`]), those it was applying: any of them
/// may be in the cluster (its ApplySet), so a delete or a prune may take
/// them. Sorted, once each.
fn recorded_objects(recorded: &ResourceState) -> Vec<String> {
    let objects = |spec: &Value| -> Vec<String> {
        spec.get("objects")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut all: BTreeSet<String> = objects(&recorded.spec).into_iter().collect();
    if let Some(updating) = &recorded.updating {
        all.extend(objects(updating));
    }
    all.into_iter().collect()
}

/// A plan line for an object key `Kind.group namespace/name`; removing a
/// namespace or a CRD says what goes with it (Kubernetes docs, "Namespaces":
/// deleting a namespace deletes everything in it; "Custom Resources":
/// deleting a CRD deletes its custom resources).
fn object_detail(action: &str, key: &str) -> Detail {
    let (kind, name) = key.split_once(' ').unwrap_or((key, ""));
    let note = match (action, kind) {
        ("Remove", "Namespace") => {
            Some("deletes everything in the namespace, whoever created it".to_string())
        }
        ("Remove", "CustomResourceDefinition.apiextensions.k8s.io") => Some(
            "deletes every custom resource of its kinds in the cluster, whoever created it"
                .to_string(),
        ),
        _ => None,
    };
    Detail {
        action: action.into(),
        name: name.into(),
        kind: kind.into(),
        replacement: None,
        condition: None,
        note,
    }
}

/// Namespaces the API server does not let anyone delete (Kubernetes docs,
/// "Namespaces": `default`, `kube-node-lease`, `kube-public`,
/// `kube-system`): a bundle holding one could never be destroyed.
pub const UNDELETABLE_NAMESPACES: &[&str] =
    &["default", "kube-node-lease", "kube-public", "kube-system"];

/// The objects of `bundle` that are undeletable namespaces, described.
pub fn undeletable(bundle: &Bundle) -> Vec<String> {
    bundle
        .objects
        .iter()
        .filter(|m| m.group().is_empty() && m.kind == "Namespace")
        .filter(|m| UNDELETABLE_NAMESPACES.contains(&m.name.as_str()))
        .map(|m| format!("{} ({})", m.describe(), m.origin))
        .collect()
}

/// [`key`] of an object as written.
fn manifest_key(m: &super::Manifest) -> String {
    key(
        &GroupKind::new(m.group(), &m.kind),
        m.namespace.as_deref(),
        &m.name,
    )
}

/// The spec field listing what was edited outside kfaws in the bundle's objects, one entry
/// per object and its lost fields (`ServiceAccount kube-system/sa:
/// metadata.annotations[eks.amazonaws.com/role-arn]`), or a deleted ApplySet parent
/// ([`PARENT_DELETED`]); empty in the desired spec, so any entry is drift. Its entries are
/// edits, not things that were added.
pub const EDITED: &str = "edited";

/// What [`ManifestsResource::read`] records for an ApplySet parent deleted outside kfaws
/// while members of the set remain, under `edited` (the next apply writes the parent again).
pub const PARENT_DELETED: &str = "deleted outside kfaws";

impl ManifestsResource {
    /// The group-kinds to look for members of this bundle's ApplySet in without its parent
    /// (which lists them): those of the bundle as configured now and as recorded at the last
    /// apply or by an unfinished update ([`recorded_objects`]), so a member whose kind left
    /// the manifests since is found too.
    fn member_kinds(
        &self,
        recorded: Option<&ResourceState>,
    ) -> Result<super::applyset::Inventory, ResourceError> {
        let mut kinds = super::applyset::Inventory::default();
        for m in &self.bundle(None)?.objects {
            kinds.group_kinds.insert(GroupKind::new(m.group(), &m.kind));
        }
        for object in recorded.map(recorded_objects).unwrap_or_default() {
            if let Some(gk) = object.split(' ').next().and_then(GroupKind::parse) {
                kinds.group_kinds.insert(gk);
            }
        }
        Ok(kinds)
    }

    /// [`Resource::read`] when the bundle's ApplySet parent is missing: gone when no member
    /// of the set is left either (never applied, or deleted whole); otherwise present, its
    /// members listed and the parent reported under `edited` as [`PARENT_DELETED`], so the
    /// plan repairs the parent instead of taking the bundle for gone (a destroy would then
    /// forget objects that still run).
    async fn read_without_parent(
        &self,
        client: &Client,
        applier: &Applier,
        recorded: Option<&ResourceState>,
    ) -> Result<Observed, Box<dyn std::error::Error + Send + Sync>> {
        if recorded.is_none() {
            return Ok(Observed::Gone);
        }
        let set = applier.applyset(&self.bundle);
        let served = Served::fetch(client).await?;
        let kinds = self.member_kinds(recorded)?;
        let members =
            boxed_members(&set, client, &served, &kinds, applier.options().concurrency).await?;
        let live = live_keys(&members);
        if live.is_empty() {
            return Ok(Observed::Gone);
        }
        let parent = format!(
            "ApplySet parent ConfigMap {}/{}: {PARENT_DELETED}",
            set.namespace, set.name
        );
        let mut spec = serde_json::Map::new();
        spec.insert("objects".into(), json!(live));
        spec.insert(EDITED.into(), json!([parent]));
        Ok(Observed::Present {
            physical_id: Some(set.id.clone()),
            spec,
            outputs: recorded.map(|r| r.outputs.clone()).unwrap_or_default(),
        })
    }
}

/// The [`key`]s of the members not being deleted (a member held only by
/// its finalizers counts as gone).
fn live_keys(members: &[super::applyset::Member]) -> BTreeSet<String> {
    members
        .iter()
        .filter(|m| m.meta.deletion_timestamp.is_none())
        .map(|m| key(&m.object.gk, m.object.namespace.as_deref(), &m.object.name))
        .collect()
}

/// A live object's [`key`] in the form its manifest is written: an object
/// in namespace `default` whose manifest names no namespace (the API server
/// put it there, as kubectl does) is keyed without one, so that it matches
/// the bundle's and the state's keys. `written` says whether a key is a
/// manifest's.
fn as_written(live: String, written: impl Fn(&str) -> bool) -> String {
    if written(&live) {
        return live;
    }
    match live.split_once(" default/") {
        Some((gk, name)) if !name.contains('/') => {
            let bare = format!("{gk} {name}");
            if written(&bare) {
                bare
            } else {
                live
            }
        }
        _ => live,
    }
}

/// The names of the CRDs among object keys ([`key`]).
fn removed_crds(keys: &[String]) -> Vec<&str> {
    const CRD_KIND: &str = "CustomResourceDefinition.apiextensions.k8s.io ";
    keys.iter()
        .filter_map(|k| k.strip_prefix(CRD_KIND))
        .collect()
}

/// The names of the namespaces among object keys ([`key`]).
fn removed_namespaces(keys: &[String]) -> Vec<&str> {
    keys.iter()
        .filter_map(|k| k.strip_prefix("Namespace "))
        .collect()
}

fn key(gk: &GroupKind, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{gk} {ns}/{name}"),
        None => format!("{gk} {name}"),
    }
}

#[async_trait]
impl Resource for ManifestsResource {
    fn address(&self) -> &Address {
        &self.address
    }

    fn kind(&self) -> &'static str {
        KIND
    }

    /// The bundle's ApplySet id when its parent ConfigMap exists in this deployment's
    /// cluster (one that carries this state's tags, [`ClusterConnector::owner`]): a bundle
    /// applied before and removed from the state with `kfaws state rm`. Its create is a
    /// server-side apply, which takes the objects back as they are. A cluster that does not
    /// exist, or is neither ACTIVE nor UPDATING (creating: no endpoint yet; failed; being
    /// deleted), is not asked.
    async fn importable(&self) -> Result<Option<String>, ResourceError> {
        let Some(client) = self.connector.connect_if_ready().await? else {
            return Ok(None);
        };
        let set = self.applier(client.clone()).applyset(&self.bundle);
        let parent = set.read(&client).await.map_err(|e| {
            ResourceError::msg(format!(
                "reading from the API server of EKS cluster {}: {e}",
                self.connector.cluster_name
            ))
        })?;
        Ok(parent.map(|_| set.id.clone()))
    }

    fn dependencies(&self) -> Vec<Address> {
        let mut deps: BTreeSet<Address> = self.input_dependencies().into_iter().collect();
        deps.extend(self.ordered_after.iter().cloned());
        deps.into_iter().collect()
    }

    fn input_dependencies(&self) -> Vec<Address> {
        let mut deps: BTreeSet<Address> = self.after.iter().cloned().collect();
        deps.extend(self.inputs.iter().map(|i| i.from.clone()));
        deps.into_iter().collect()
    }

    fn spec(&self) -> Value {
        let sha256 = match &self.source {
            Source::Template { text, .. } => sha256_hex(text),
            Source::Loaded { sha256, .. } => sha256.clone(),
        };
        json!({
            "bundle": self.bundle,
            "source": self.source_label(),
            "sha256": sha256,
            "values": self.values,
            "objects": self.objects(),
            "content": self.content(),
            EDITED: [],
        })
    }

    /// `sha256`, the hash of the whole bundle, covers Secret values (so that an edited one
    /// is applied) and is unsalted: with the rest of the manifests known (a public Kubeflow
    /// release), a weak password could be found from it by trying a dictionary.
    fn sensitive_fields(&self) -> &'static [&'static str] {
        SENSITIVE_FIELDS
    }

    fn estimate(&self) -> Duration {
        self.estimate
    }

    fn timeout(&self) -> Duration {
        // The applier's own deadline, plus connecting and discovery.
        self.timeout + Duration::from_secs(120)
    }

    async fn read(&self, recorded: Option<&ResourceState>) -> Result<Observed, ResourceError> {
        let Some(client) = self.connector.connect().await? else {
            return Ok(Observed::Gone);
        };
        let applier = self.applier(client.clone());
        let set = applier.applyset(&self.bundle);
        let err = |e: &dyn std::fmt::Display| {
            ResourceError::msg(format!(
                "reading from the API server of EKS cluster {}: {e}",
                self.connector.cluster_name
            ))
        };
        let Some(inventory) = set.read(&client).await.map_err(|e| err(&e))? else {
            return self
                .read_without_parent(&client, &applier, recorded)
                .await
                .map_err(|e| err(&e));
        };
        let served = Served::fetch(&client).await.map_err(|e| err(&e))?;
        let members = boxed_members(
            &set,
            &client,
            &served,
            &inventory,
            applier.options().concurrency,
        )
        .await
        .map_err(|e| err(&e))?;
        // Only what the cluster shows: every live member of the set. An
        // object of the bundle that is missing (deleted out of band, or
        // being deleted and only held by its finalizers) or a member that
        // left the bundle makes it differ from the spec.
        // Objects of the bundle whose fields someone else changed or removed
        // since kfaws applied them (C13): see [`edited`].
        let desired = self.bundle(None)?;
        // As applied: a Secret's stringData as the data it becomes.
        let manifests: std::collections::HashMap<String, Value> = desired
            .objects
            .iter()
            .map(|m| {
                let mut object = m.object.clone();
                super::apply::secret_string_data_to_data(&mut object);
                (manifest_key(m), object)
            })
            .collect();
        // The keys as written now, and as they were when last applied (an
        // object since taken out of the file).
        let applied: BTreeSet<String> = recorded
            .map(recorded_objects)
            .into_iter()
            .flatten()
            .collect();
        let written =
            |k: String| as_written(k, |w| manifests.contains_key(w) || applied.contains(w));
        let live: BTreeSet<String> = live_keys(&members).into_iter().map(written).collect();
        let field_manager = applier.options().field_manager.clone();
        // Each entry names the object and the fields it lost, e.g.
        // `ServiceAccount kube-system/sa: metadata.annotations[eks.amazonaws.com/role-arn]`.
        let edited: BTreeSet<String> = members
            .iter()
            .filter_map(|m| {
                let k = written(key(
                    &m.object.gk,
                    m.object.namespace.as_deref(),
                    &m.object.name,
                ));
                let manifest = manifests.get(&k)?;
                let fields: Vec<String> = edited_fields(&m.meta, &field_manager, manifest)
                    .iter()
                    .map(|f| describe_edit(&m.meta, f))
                    .collect();
                (!fields.is_empty()).then(|| format!("{k}: {}", fields.join(", ")))
            })
            .collect();
        let mut spec = serde_json::Map::new();
        spec.insert("objects".into(), json!(live));
        spec.insert(EDITED.into(), json!(edited));
        let outputs = recorded.map(|r| r.outputs.clone()).unwrap_or_default();
        Ok(Observed::Present {
            physical_id: Some(set.id.clone()),
            spec,
            outputs,
        })
    }

    async fn create(&self, _token: &str, inputs: &Inputs) -> Result<Applied, ResourceError> {
        self.apply(inputs).await
    }

    async fn update(
        &self,
        _recorded: &ResourceState,
        inputs: &Inputs,
    ) -> Result<Applied, ResourceError> {
        self.apply(inputs).await
    }

    async fn delete(&self, recorded: &ResourceState) -> Result<(), ResourceError> {
        let Some(client) = self.connector.connect().await? else {
            return Ok(());
        };
        let bundle = recorded
            .spec
            .get("bundle")
            .and_then(Value::as_str)
            .unwrap_or(&self.bundle);
        // Also the kinds of the bundle: a parent deleted outside kfaws lists none.
        let kinds = self.member_kinds(Some(recorded))?;
        boxed_destroy(&self.applier(client), bundle, kinds)
            .await
            .map(|_| ())
            .map_err(|e| failed(e.to_string()))
    }

    async fn check(&self, check: &Check<'_>) -> Result<(), ResourceError> {
        use crate::plan::Action;
        let recorded = check.recorded.map(recorded_objects).unwrap_or_default();
        // Jobs go with the cluster when the plan deletes it too (a destroy):
        // its plan lists them.
        let cluster_stays = !check.deletes.contains(&self.cluster);
        if matches!(check.action, Action::Delete) {
            self.claims_in_use(&self.claims()?).await?;
            if cluster_stays {
                self.refuse_unfinished_jobs(&recorded, &recorded).await?;
            }
            return Ok(());
        }
        if matches!(check.action, Action::Replace) && cluster_stays {
            self.refuse_unfinished_jobs(&recorded, &recorded).await?;
        }
        // Before the cluster exists there is nothing to check against (and
        // nothing applied that an update could prune); the API versions
        // removed by the config's Kubernetes version were checked when the
        // manifests were read (`Source::load`).
        let Some(client) = self.connector.connect().await? else {
            return Ok(());
        };
        let bundle = self.bundle(None)?;
        if let (Action::Update, Some(entry)) = (check.action, check.recorded) {
            let pruned = pruned(entry, &bundle);
            self.prunes_used_namespaces(&pruned)?;
            self.claims_in_use(&dropped_claims(&pruned)).await?;
            self.refuse_unfinished_jobs(&pruned, &recorded).await?;
        }
        let applier = self.applier(client.clone());
        let targets = boxed_check(&applier, &bundle)
            .await
            .map_err(|e| ResourceError::msg(e.to_string()))?;
        self.refuse_missing_namespaces(&client, &bundle, &targets, check)
            .await?;
        self.refuse_foreign(&applier, &bundle).await
    }

    /// The added and removed objects are known from names alone.
    fn preview_reads_inputs(&self) -> bool {
        false
    }

    /// Server-side apply converges from whatever a failed apply left; a
    /// replacement would delete the bundle's objects first (its CRDs with
    /// every custom resource of them: shared case C1, "apply again resumes
    /// from the failed node").
    fn repairs_taint_in_place(&self) -> bool {
        true
    }

    fn replaceable_under_dependants(&self) -> bool {
        self.replaceable_under_dependants
    }

    async fn preview_update(
        &self,
        recorded: &ResourceState,
        _inputs: &Inputs,
    ) -> Result<Vec<Detail>, ResourceError> {
        let before: BTreeSet<String> = recorded_objects(recorded).into_iter().collect();
        let after: BTreeSet<String> = self.objects().into_iter().collect();
        let mut details: Vec<Detail> = after
            .difference(&before)
            .map(|k| object_detail("Add", k))
            .collect();
        details.extend(
            before
                .difference(&after)
                .map(|k| object_detail("Remove", k)),
        );
        // Objects kept whose manifest was edited since the last apply (a state
        // recorded before `content` existed names none).
        if let Some(applied) = recorded.spec.get("content").and_then(Value::as_object) {
            let content = self.content();
            details.extend(
                before
                    .intersection(&after)
                    .filter(|k| {
                        let was = applied.get(*k).and_then(Value::as_str);
                        was.is_some() && was != content.get(*k).map(String::as_str)
                    })
                    .map(|k| object_detail("Modify", k)),
            );
        }
        let removed: Vec<String> = before.difference(&after).cloned().collect();
        let known: Vec<String> = before.into_iter().collect();
        details.extend(self.unlisted_custom_resources(&removed, &known).await);
        Ok(details)
    }

    async fn preview_delete(&self, recorded: &ResourceState) -> Result<Vec<Detail>, ResourceError> {
        let objects = recorded_objects(recorded);
        let mut details: Vec<Detail> = objects.iter().map(|k| object_detail("Remove", k)).collect();
        details.extend(self.unlisted_custom_resources(&objects, &objects).await);
        Ok(details)
    }
}

/// A bundle call's error: one that ends after the first interrupt is that
/// interrupt's ([`ResourceError::interrupted`]), since the bundle's waits stop
/// on it ([`super::wait::until`]); the entry is then kept as it was (a create
/// stays `creating` and is applied again by the next apply).
fn failed(message: String) -> ResourceError {
    if crate::engine::interrupt::stopping().is_cancelled() {
        ResourceError::interrupted(message)
    } else {
        ResourceError::msg(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_show_hides_every_hash_of_a_bundle_s_secrets_and_nothing_of_other_kinds() {
        let spec = json!({"bundle": "kubeflow", "sha256": "aaa-secret-hash"});
        let mut entry = crate::plan::diff::tests::recorded(crate::state::Status::Created, spec);
        entry.kind = KIND.into();
        entry.updating = Some(json!({"bundle": "kubeflow", "sha256": "bbb-secret-hash"}));
        entry
            .outputs
            .insert("manifest_sha256".into(), json!("ccc-secret-hash"));
        entry.outputs.insert("objects".into(), json!(3));
        entry.inputs_hash = Some("ddd-secret-hash".into());
        let other = {
            let mut other = entry.clone();
            other.kind = "aws_cloudformation_stack".into();
            other
        };
        let mut hidden = entry.clone();
        hide_sensitive(&mut hidden, "(sensitive value)");
        let shown = serde_json::to_string(&hidden).unwrap();
        assert!(!shown.contains("secret-hash"), "{shown}");
        assert_eq!(hidden.spec_hash, "(sensitive value)");
        assert_eq!(hidden.outputs["objects"], json!(3));
        assert_eq!(hidden.spec["bundle"], json!("kubeflow"));
        let mut kept = other.clone();
        hide_sensitive(&mut kept, "(sensitive value)");
        assert_eq!(
            serde_json::to_value(&kept).unwrap(),
            serde_json::to_value(&other).unwrap()
        );
    }

    #[test]
    fn a_live_object_in_default_takes_the_key_of_its_manifest_without_a_namespace() {
        let written = [
            "ConfigMap nons",
            "ConfigMap kubeflow/a",
            "Namespace default",
        ];
        let w = |k: &str| written.contains(&k);
        assert_eq!(
            as_written("ConfigMap default/nons".into(), w),
            "ConfigMap nons"
        );
        assert_eq!(
            as_written("ConfigMap kubeflow/a".into(), w),
            "ConfigMap kubeflow/a"
        );
        // Not in the bundle in either form: as the cluster shows it.
        assert_eq!(
            as_written("ConfigMap default/x".into(), w),
            "ConfigMap default/x"
        );
        assert_eq!(
            as_written("Namespace default".into(), w),
            "Namespace default"
        );
    }

    #[test]
    fn an_object_is_edited_when_a_field_it_sets_is_no_longer_owned_by_kfaws() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
            FieldsV1, ManagedFieldsEntry, ObjectMeta,
        };
        let manifest = json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "sa", "namespace": "ns", "annotations": {"role": "r"}},
            "automountServiceAccountToken": false,
        });
        let entry = |manager: &str, op: &str, fields: Value| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(op.into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        };
        let meta = |entries| ObjectMeta {
            managed_fields: Some(entries),
            ..Default::default()
        };
        let ours = json!({"f:metadata": {"f:annotations": {"f:role": {}}}, "f:automountServiceAccountToken": {}});
        assert!(!edited(
            &meta(vec![entry("kfaws", "Apply", ours)]),
            "kfaws",
            &manifest
        ));
        // Someone removed the annotation: it left our set (our other
        // annotations, such as the manifest hash kfaws adds, stay; a field
        // set with no entries at all is an atomic map, owned whole).
        let removed = json!({
            "f:metadata": {"f:annotations": {"f:kfaws/manifest-sha256": {}}},
            "f:automountServiceAccountToken": {},
        });
        assert_eq!(
            edited_fields(
                &meta(vec![entry("kfaws", "Apply", removed.clone())]),
                "kfaws",
                &manifest
            ),
            ["metadata.annotations.role"]
        );
        let dotted = json!({"metadata": {"annotations": {"eks.amazonaws.com/role-arn": "r"}}});
        assert_eq!(
            edited_fields(
                &meta(vec![entry("kfaws", "Apply", removed.clone())]),
                "kfaws",
                &dotted
            ),
            ["metadata.annotations[eks.amazonaws.com/role-arn]"]
        );
        assert!(edited(
            &meta(vec![entry("kfaws", "Apply", removed)]),
            "kfaws",
            &manifest
        ));
        // Someone changed the other field: it moved to their manager.
        let taken = json!({"f:metadata": {"f:annotations": {"f:role": {}}}});
        let theirs = json!({"f:automountServiceAccountToken": {}});
        assert!(edited(
            &meta(vec![
                entry("kfaws", "Apply", taken),
                entry("kubectl-patch", "Update", theirs)
            ]),
            "kfaws",
            &manifest
        ));
        // A controller adding its own annotation is not an edit of ours.
        let ours = json!({"f:metadata": {"f:annotations": {"f:role": {}}}, "f:automountServiceAccountToken": {}});
        let controller = json!({"f:metadata": {"f:annotations": {"f:other": {}}}});
        assert!(!edited(
            &meta(vec![
                entry("kfaws", "Apply", ours),
                entry("controller", "Update", controller)
            ]),
            "kfaws",
            &manifest
        ));
    }

    #[test]
    fn a_field_inside_a_keyed_list_entry_taken_by_another_manager_is_named() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
            FieldsV1, ManagedFieldsEntry, ObjectMeta,
        };
        let manifest = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "efs-plugin", "image": "amazon/efs:1", "args": ["--a"],
                 "ports": [{"containerPort": 9808}]},
                {"name": "sidecar", "image": "sidecar:1"}
            ]}}},
        });
        let owned = |plugin: Value| {
            let mut containers = serde_json::Map::new();
            containers.insert("k:{\"name\":\"efs-plugin\"}".into(), plugin);
            containers.insert(
                "k:{\"name\":\"sidecar\"}".into(),
                json!({".": {}, "f:name": {}, "f:image": {}}),
            );
            ObjectMeta {
                managed_fields: Some(vec![ManagedFieldsEntry {
                    manager: Some("kfaws".into()),
                    operation: Some("Apply".into()),
                    fields_v1: Some(FieldsV1(json!({"f:spec": {"f:template": {"f:spec": {
                        "f:containers": containers
                    }}}}))),
                    ..Default::default()
                }]),
                ..Default::default()
            }
        };
        let port = json!({"k:{\"containerPort\":9808,\"protocol\":\"TCP\"}":
            {".": {}, "f:containerPort": {}}});
        let whole = json!({".": {}, "f:name": {}, "f:image": {}, "f:args": {}, "f:ports": port});
        assert!(edited_fields(&owned(whole), "kfaws", &manifest).is_empty());
        // `kubectl set image` moved the image to its own manager.
        let taken = json!({".": {}, "f:name": {}, "f:args": {}, "f:ports": port});
        assert_eq!(
            edited_fields(&owned(taken), "kfaws", &manifest),
            ["spec.template.spec.containers[efs-plugin].image"]
        );
        // The port entry gone from our set.
        let no_port = json!({".": {}, "f:name": {}, "f:image": {}, "f:args": {},
            "f:ports": {"k:{\"containerPort\":1,\"protocol\":\"TCP\"}": {}}});
        assert_eq!(
            edited_fields(&owned(no_port), "kfaws", &manifest),
            ["spec.template.spec.containers[efs-plugin].ports[containerPort=9808]"]
        );
    }

    #[test]
    fn placeholders_are_filled_and_a_missing_value_is_an_error() {
        let values = BTreeMap::from([("a".to_string(), "x".to_string())]);
        assert_eq!(render("v: ${a}-${a}", &values).unwrap(), "v: x-x");
        assert_eq!(
            render("v: ${a} ${b_c}", &values).unwrap_err(),
            "no value for placeholder ${b_c}"
        );
        // Only lowercase names are placeholders: shell and kustomize
        // variables in other text are left alone.
        assert_eq!(render("$(X) ${HOME}", &values).unwrap(), "$(X) ${HOME}");
    }

    #[test]
    fn an_edited_annotation_or_label_says_what_it_is_now() {
        let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            annotations: Some(BTreeMap::from([(
                "eks.amazonaws.com/role-arn".to_string(),
                "arn:aws:iam::1:role/other".to_string(),
            )])),
            labels: Some(BTreeMap::new()),
            ..Default::default()
        };
        assert_eq!(
            describe_edit(&meta, "metadata.annotations[eks.amazonaws.com/role-arn]"),
            "metadata.annotations[eks.amazonaws.com/role-arn] (now \"arn:aws:iam::1:role/other\")"
        );
        assert_eq!(
            describe_edit(&meta, "metadata.labels.app"),
            "metadata.labels.app (removed)"
        );
        assert_eq!(
            describe_edit(&meta, "metadata.annotations[other/key]"),
            "metadata.annotations[other/key] (removed)"
        );
        // Other fields are not read: named as they are.
        assert_eq!(
            describe_edit(&meta, "spec.template.spec.containers[efs-plugin].image"),
            "spec.template.spec.containers[efs-plugin].image"
        );
    }
}
