//! Deleting ApplySet members in dependency order, for prune and destroy.
//!
//! Order, each step waited for (bounded by the deadline) before the next:
//! 1. custom resources, while the controllers that finalize them still run
//!    (case C6: a finalizer whose controller is gone would hold its
//!    namespace forever), including those of a CRD being deleted that
//!    kfaws did not create (a user's PyTorchJob): deleting the CRD would
//!    delete them anyway (Kubernetes docs, "Custom Resources"), but later,
//!    after their controller is gone, and those in a namespace being deleted
//!    (a user's PyTorchJob in the user namespace, whose pods would keep the
//!    namespace's PersistentVolumeClaim from going in step 3);
//! 2. webhook configurations, before their backends go (a `failurePolicy:
//!    Fail` webhook without a backend blocks every object it intercepts);
//! 3. everything else but CRDs and namespaces (Deployments, Services, RBAC…);
//! 4. CustomResourceDefinitions;
//! 5. namespaces.
//!
//! A step that does not finish by the deadline fails naming every object
//! still present and its `metadata.finalizers`, and for a namespace or CRD
//! also the objects that keep it (those in the namespace that carry
//! finalizers; the CRD's custom resources left). Namespaces are finalized by
//! kube-controller-manager's namespace controller: kfaws waits for them only
//! when that controller runs (its leader lease `kube-system/kube-controller-manager`
//! is held); otherwise it reports them as left terminating instead of
//! waiting for something that cannot happen.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::Client;
use tokio::time::Instant;

use super::applyset::Member;
use super::discovery::Served;
use super::object::{GroupKind, ObjectRef};
use super::retry::{self, RetryError};
use super::wait;

/// An object still present when a deletion step's deadline passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remaining {
    /// The object.
    pub object: ObjectRef,
    /// Its `metadata.finalizers` (for a namespace also `spec.finalizers`):
    /// what holds it.
    pub finalizers: Vec<String>,
    /// For a namespace, what the namespace controller reports still holds
    /// it: the messages of its `NamespaceContentRemaining` and
    /// `NamespaceFinalizersRemaining` conditions (Kubernetes API reference,
    /// NamespaceCondition), e.g. "Some content in the namespace has
    /// finalizers remaining: x.test/cleanup in 1 resource instances".
    pub conditions: Vec<String>,
    /// What keeps a namespace or a CRD: the objects in the namespace that
    /// carry finalizers, or the CRD's custom resources still present, each
    /// with its own finalizers (case C6: "the error names the object and
    /// its finalizer"). Empty for other objects.
    pub holders: Vec<Remaining>,
}

/// The most holders an error lists for one object; the rest are counted.
pub const MAX_HOLDERS: usize = 20;

impl fmt::Display for Remaining {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.finalizers.is_empty() {
            write!(f, "{} (no finalizers", self.object)?;
        } else {
            write!(
                f,
                "{} (finalizers: {}",
                self.object,
                self.finalizers.join(", ")
            )?;
        }
        for c in &self.conditions {
            write!(f, "; {c}")?;
        }
        f.write_str(")")?;
        for h in self.holders.iter().take(MAX_HOLDERS) {
            write!(f, "\n    held by {h}")?;
        }
        if self.holders.len() > MAX_HOLDERS {
            write!(
                f,
                "\n    and {} more with finalizers",
                self.holders.len() - MAX_HOLDERS
            )?;
        }
        Ok(())
    }
}

/// What holds a namespace being deleted: its finalizers (metadata and
/// spec) and the namespace controller's conditions naming what remains.
async fn namespace_holders(client: &Client, name: &str) -> Option<(Vec<String>, Vec<String>)> {
    use k8s_openapi::api::core::v1::Namespace;
    let ns = Api::<Namespace>::all(client.clone())
        .get_opt(name)
        .await
        .ok()??;
    let mut finalizers = ns.metadata.finalizers.unwrap_or_default();
    finalizers.extend(ns.spec.and_then(|s| s.finalizers).unwrap_or_default());
    let conditions = ns
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| {
            c.status == "True"
                && matches!(
                    c.type_.as_str(),
                    "NamespaceContentRemaining" | "NamespaceFinalizersRemaining"
                )
        })
        .filter_map(|c| c.message)
        .collect();
    Some((finalizers, conditions))
}

/// Why deleting failed.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    /// A step did not finish by the deadline.
    #[error("deleting {step}: {} object(s) still present after {}s, held by their finalizers (the controller that removes a finalizer must be running; remove it by hand only if that controller is gone for good):\n  {}",
        .remaining.len(), .after.as_secs(), .remaining.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    StillPresent {
        /// The step, e.g. "custom resources".
        step: &'static str,
        /// The time allowed.
        after: Duration,
        /// What is left.
        remaining: Vec<Remaining>,
    },
    /// The first interrupt stopped the wait of a step
    /// ([`super::wait::STOPPED`]); the next run deletes and waits again.
    #[error("deleting {step}: {}; {}", super::wait::STOPPED, left_when_interrupted(.remaining, *.after))]
    Interrupted {
        /// The step, e.g. "namespaces".
        step: &'static str,
        /// How long it had waited.
        after: Duration,
        /// What is left.
        remaining: Vec<Remaining>,
    },
    /// The API server refused a delete.
    #[error("deleting {object}: {message}")]
    Refused {
        /// The object.
        object: ObjectRef,
        /// The server's message.
        message: String,
    },
    /// A call needed to plan the deletion failed.
    #[error("{what}: {message}")]
    Api {
        /// What was being done.
        what: String,
        /// The message.
        message: String,
    },
}

/// What [`DeleteError::Interrupted`] says was left: the objects its wait last saw present
/// (none means that no check had finished: the wait ends as soon as one finds none).
fn left_when_interrupted(remaining: &[Remaining], after: Duration) -> String {
    match remaining.is_empty() {
        true => format!(
            "after {}s, before it had checked which of them are gone",
            after.as_secs()
        ),
        false => format!(
            "{} object(s) still present after {}s:\n  {}",
            remaining.len(),
            after.as_secs(),
            remaining
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n  ")
        ),
    }
}

/// What a deletion did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// Objects deleted and confirmed gone (namespaces: see `terminating`).
    pub deleted: Vec<ObjectRef>,
    /// Of `deleted`, the custom resources that were not members: those
    /// others created of a CRD or in a namespace being deleted (see the
    /// module docs).
    pub unlisted: Vec<ObjectRef>,
    /// Namespaces deleted but not waited for, because no namespace
    /// controller runs (no kube-controller-manager holds its lease); the
    /// API server keeps them `Terminating` until one does.
    pub terminating: Vec<String>,
}

const STEPS: [&str; 5] = [
    "custom resources",
    "webhook configurations",
    "workloads and other objects",
    "CustomResourceDefinitions",
    "namespaces",
];

fn step_of(gk: &GroupKind, custom: &BTreeSet<GroupKind>) -> usize {
    match (gk.group.as_str(), gk.kind.as_str()) {
        _ if custom.contains(gk) => 0,
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration",
        ) => 1,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => 3,
        ("", "Namespace") => 4,
        _ => 2,
    }
}

/// Splits members into the deletion steps (see the module docs); `custom`
/// holds the group-kinds served by CustomResourceDefinitions.
pub fn steps(members: Vec<Member>, custom: &BTreeSet<GroupKind>) -> [Vec<Member>; 5] {
    let mut out: [Vec<Member>; 5] = Default::default();
    for m in members {
        out[step_of(&m.object.gk, custom)].push(m);
    }
    out
}

/// The group-kinds the cluster's CRDs define.
///
/// # Errors
/// [`DeleteError::Api`] when CRDs cannot be listed.
pub async fn custom_kinds(client: &Client) -> Result<BTreeSet<GroupKind>, DeleteError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let list = api
        .list(&Default::default())
        .await
        .map_err(|e| DeleteError::Api {
            what: "listing CustomResourceDefinitions".into(),
            message: retry::message(&e),
        })?;
    Ok(list
        .items
        .iter()
        .map(|c| GroupKind::new(&c.spec.group, &c.spec.names.kind))
        .collect())
}

/// Whether a namespace controller runs: kube-controller-manager's leader
/// lease is held. Unreadable counts as running, so kfaws waits rather than
/// skips a wait it cannot rule out.
pub async fn namespace_controller_runs(client: &Client) -> bool {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    match api.get_opt("kube-controller-manager").await {
        Ok(Some(lease)) => wait::lease_held(&lease),
        Ok(None) => false,
        Err(_) => true,
    }
}

fn api_for(client: &Client, m: &Member) -> Api<DynamicObject> {
    match &m.object.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &m.resource),
        None => Api::all_with(client.clone(), &m.resource),
    }
}

/// Deletes `members` step by step (see the module docs) and waits for each
/// step until `deadline`.
///
/// # Errors
/// [`DeleteError::Refused`] for a delete the server refuses (at once, or
/// after transient errors until the deadline); [`DeleteError::StillPresent`]
/// naming the objects and finalizers left when a step's wait runs out.
pub async fn delete_in_order(
    client: &Client,
    mut members: Vec<Member>,
    custom: &BTreeSet<GroupKind>,
    deadline: Instant,
    concurrency: usize,
) -> Result<DeleteReport, DeleteError> {
    let started = Instant::now();
    let mut report = DeleteReport::default();
    let mut unlisted = instances_of_deleted_crds(client, &members, deadline, concurrency).await?;
    let seen: HashSet<ObjectRef> = unlisted.iter().map(|m| m.object.clone()).collect();
    let in_namespaces =
        instances_in_deleted_namespaces(client, &members, deadline, concurrency).await?;
    unlisted.extend(
        in_namespaces
            .into_iter()
            .filter(|m| !seen.contains(&m.object)),
    );
    unlisted.sort_by(|a, b| a.object.cmp(&b.object));
    if !unlisted.is_empty() {
        tracing::info!(
            count = unlisted.len(),
            "deleting the custom resources kfaws did not create of CRDs or in namespaces being \
             deleted, while their controllers still run"
        );
        report.unlisted = unlisted.iter().map(|m| m.object.clone()).collect();
    }
    members.extend(unlisted);
    for (step, batch) in STEPS.iter().zip(steps(members, custom)) {
        if batch.is_empty() {
            continue;
        }
        let deletes: Vec<_> = batch
            .iter()
            .map(|m| async move {
                let api = api_for(client, m);
                let dp = DeleteParams::background();
                match retry::retry(deadline, || api.delete(&m.object.name, &dp)).await {
                    Ok(_) => Ok(()),
                    Err(RetryError::Failed(kube::Error::Api(s))) if s.code == 404 => Ok(()),
                    Err(e) => Err(DeleteError::Refused {
                        object: m.object.clone(),
                        message: e.to_string(),
                    }),
                }
            })
            .collect();
        let results: Vec<Result<(), DeleteError>> = stream::iter(deletes)
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
        if *step == "namespaces" && !namespace_controller_runs(client).await {
            report
                .terminating
                .extend(batch.iter().map(|m| m.object.name.clone()));
            continue;
        }
        let left = Mutex::new(Vec::<Remaining>::new());
        let gone = wait::until(deadline, || async {
            let still = present(client, &batch, concurrency).await;
            let n = still.len();
            // With what holds each, where known, so a stuck delete is
            // explained while it waits, not only at its deadline.
            let first: Vec<String> = still
                .iter()
                .take(3)
                .map(
                    |r| match r.finalizers.is_empty() && r.conditions.is_empty() {
                        true => r.object.to_string(),
                        false => r.to_string(),
                    },
                )
                .collect();
            *left.lock().unwrap_or_else(|p| p.into_inner()) = still;
            Ok(if n == 0 {
                Ok(())
            } else {
                let more = n.saturating_sub(first.len());
                Err(format!(
                    "waiting for {step} to go ({n} left): {}{}",
                    first.join(", "),
                    if more > 0 {
                        format!(", … {more} more")
                    } else {
                        String::new()
                    }
                ))
            })
        })
        .await;
        if let Err(why) = gone {
            let left = left.into_inner().unwrap_or_else(|p| p.into_inner());
            let remaining = with_holders(client, left, concurrency).await;
            if why.starts_with(wait::STOPPED) {
                return Err(DeleteError::Interrupted {
                    step,
                    after: started.elapsed(),
                    remaining,
                });
            }
            return Err(DeleteError::StillPresent {
                step,
                after: deadline.saturating_duration_since(started),
                remaining,
            });
        }
        report.deleted.extend(batch.into_iter().map(|m| m.object));
    }
    Ok(report)
}

const CRD: (&str, &str) = ("apiextensions.k8s.io", "CustomResourceDefinition");

fn is_crd(gk: &GroupKind) -> bool {
    gk.group == CRD.0 && gk.kind == CRD.1
}

fn is_namespace(gk: &GroupKind) -> bool {
    gk.group.is_empty() && gk.kind == "Namespace"
}

/// The resource through which a CRD's custom resources are read: its
/// storage version (every stored object is readable through it), else its
/// first served one. `None` for a CRD serving no version.
fn crd_resource(crd: &CustomResourceDefinition) -> Option<ApiResource> {
    let spec = &crd.spec;
    let version = spec
        .versions
        .iter()
        .find(|v| v.storage)
        .or_else(|| spec.versions.iter().find(|v| v.served))?;
    Some(ApiResource {
        group: spec.group.clone(),
        version: version.name.clone(),
        api_version: format!("{}/{}", spec.group, version.name),
        kind: spec.names.kind.clone(),
        plural: spec.names.plural.clone(),
    })
}

/// The custom resources of CRD `name` in every namespace, with the
/// resource they were listed through; `None` when the CRD or its API is
/// gone. Transient errors are retried until `deadline`.
///
/// # Errors
/// [`RetryError`] when the CRD or its custom resources cannot be read.
pub async fn crd_instances(
    client: &Client,
    name: &str,
    deadline: Instant,
) -> Result<Option<(ApiResource, Vec<ObjectMeta>)>, RetryError> {
    let Some((resource, api)) = crd_api(client, name, deadline).await? else {
        return Ok(None);
    };
    let all = ListParams::default();
    match retry::retry_served(deadline, || api.list_metadata(&all)).await {
        Ok(list) => {
            let items = list.items.into_iter().map(|o| o.metadata).collect();
            Ok(Some((resource, items)))
        }
        // Not served (yet or any more): nothing can be stored through it.
        Err(RetryError::Failed(kube::Error::Api(s))) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// The API of CRD `name`'s custom resources in every namespace, through
/// `crd_resource`'s version, with that resource; `None` when the CRD is
/// gone or serves no version. Transient errors are retried until `deadline`.
///
/// # Errors
/// [`RetryError`] when the CRD cannot be read.
pub async fn crd_api(
    client: &Client,
    name: &str,
    deadline: Instant,
) -> Result<Option<(ApiResource, Api<DynamicObject>)>, RetryError> {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let Some(crd) = retry::retry(deadline, || crds.get_opt(name)).await? else {
        return Ok(None);
    };
    Ok(crd_resource(&crd).map(|resource| {
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        (resource, api)
    }))
}

fn object_ref(resource: &ApiResource, meta: &ObjectMeta) -> ObjectRef {
    ObjectRef {
        gk: GroupKind::new(&resource.group, &resource.kind),
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

/// The custom resources of the CRDs among `members` that are not members
/// themselves (a user's PyTorchJob, a controller's child objects): deleted
/// in the first step with the members' own custom resources, while their
/// controllers still run, instead of by the CRD's deletion after the
/// controllers are gone.
///
/// # Errors
/// [`DeleteError::Api`] when a CRD or its custom resources cannot be read.
async fn instances_of_deleted_crds(
    client: &Client,
    members: &[Member],
    deadline: Instant,
    concurrency: usize,
) -> Result<Vec<Member>, DeleteError> {
    let known: HashSet<&ObjectRef> = members.iter().map(|m| &m.object).collect();
    let crds: Vec<ObjectRef> = members
        .iter()
        .filter(|m| is_crd(&m.object.gk))
        .map(|m| m.object.clone())
        .collect();
    // Collected first: a future per CRD, owning what it reads.
    let reads: Vec<_> = crds
        .into_iter()
        .map(|crd| async move {
            crd_instances(client, &crd.name, deadline)
                .await
                .map_err(|e| DeleteError::Api {
                    what: format!("listing the custom resources of {crd}"),
                    message: e.to_string(),
                })
        })
        .collect();
    let found: Vec<_> = stream::iter(reads)
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut out = Vec::new();
    for (resource, items) in found
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
    {
        for meta in items {
            let object = object_ref(&resource, &meta);
            if !known.contains(&object) {
                out.push(Member {
                    object,
                    resource: resource.clone(),
                    meta,
                });
            }
        }
    }
    out.sort_by(|a, b| a.object.cmp(&b.object));
    Ok(out)
}

/// The custom resources in the Namespaces among `members` that are not
/// members themselves (a user's PyTorchJob in the user namespace): deleted
/// in the first step, while their controllers still run (case C6), instead
/// of by the namespace controller once the namespace goes. A job's pods go
/// with the job, and with them what they keep, such as a
/// PersistentVolumeClaim they mount (`kubernetes.io/pvc-protection`) that a
/// later step deletes.
///
/// # Errors
/// [`DeleteError::Api`] when the CRDs or their custom resources cannot be read.
async fn instances_in_deleted_namespaces(
    client: &Client,
    members: &[Member],
    deadline: Instant,
    concurrency: usize,
) -> Result<Vec<Member>, DeleteError> {
    let namespaces: Vec<&str> = members
        .iter()
        .filter(|m| is_namespace(&m.object.gk))
        .map(|m| m.object.name.as_str())
        .collect();
    let known: HashSet<&ObjectRef> = members.iter().map(|m| &m.object).collect();
    Ok(
        namespace_instances(client, &namespaces, deadline, concurrency)
            .await?
            .into_iter()
            .filter_map(|(resource, meta)| {
                let object = object_ref(&resource, &meta);
                (!known.contains(&object)).then_some(Member {
                    object,
                    resource,
                    meta,
                })
            })
            .collect(),
    )
}

/// Every custom resource in `namespaces` (of each namespaced CRD, read
/// through `crd_resource`'s version), with the resource it was listed
/// through. Transient errors are retried until `deadline`.
///
/// # Errors
/// [`DeleteError::Api`] when the CRDs or their custom resources cannot be read.
pub async fn namespace_instances(
    client: &Client,
    namespaces: &[&str],
    deadline: Instant,
    concurrency: usize,
) -> Result<Vec<(ApiResource, ObjectMeta)>, DeleteError> {
    if namespaces.is_empty() {
        return Ok(vec![]);
    }
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let all = ListParams::default();
    let list = retry::retry(deadline, || crds.list(&all))
        .await
        .map_err(|e| DeleteError::Api {
            what: "listing CustomResourceDefinitions".into(),
            message: e.to_string(),
        })?;
    let resources: Vec<ApiResource> = list
        .items
        .iter()
        .filter(|c| c.spec.scope == "Namespaced")
        .filter_map(crd_resource)
        .collect();
    let reads: Vec<_> = namespaces
        .iter()
        .flat_map(|ns| resources.iter().map(move |r| (*ns, r)))
        .map(|(ns, resource)| async move {
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, resource);
            let all = ListParams::default();
            match retry::retry_served(deadline, || api.list_metadata(&all)).await {
                Ok(list) => Ok(list
                    .items
                    .into_iter()
                    .map(|o| (resource.clone(), o.metadata))
                    .collect()),
                // Not served (any more): nothing of it is stored.
                Err(RetryError::Failed(kube::Error::Api(s))) if s.code == 404 => Ok(vec![]),
                Err(e) => Err(DeleteError::Api {
                    what: format!("listing the {} in namespace {ns}", resource.plural),
                    message: e.to_string(),
                }),
            }
        })
        .collect();
    let found: Vec<Result<Vec<(ApiResource, ObjectMeta)>, DeleteError>> = stream::iter(reads)
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut out: Vec<(ApiResource, ObjectMeta)> = found
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    out.sort_by_key(|(resource, meta)| object_ref(resource, meta));
    Ok(out)
}

/// The time allowed for finding what holds the objects left, after the
/// deletion deadline has passed.
const HOLDERS_TIMEOUT: Duration = Duration::from_secs(30);

/// Adds to each namespace and CRD left what keeps it ([`Remaining::holders`]).
/// Best effort: what cannot be read is left out, the error stays the
/// deadline's.
async fn with_holders(
    client: &Client,
    mut remaining: Vec<Remaining>,
    concurrency: usize,
) -> Vec<Remaining> {
    let deadline = Instant::now() + HOLDERS_TIMEOUT;
    let served = match remaining.iter().any(|r| is_namespace(&r.object.gk)) {
        true => Served::fetch(client).await.ok(),
        false => None,
    };
    for r in &mut remaining {
        let mut holders = if is_crd(&r.object.gk) {
            match crd_instances(client, &r.object.name, deadline).await {
                Ok(Some((resource, items))) => {
                    items.iter().map(|meta| held(&resource, meta)).collect()
                }
                _ => vec![],
            }
        } else if let (true, Some(served)) = (is_namespace(&r.object.gk), &served) {
            let listing = finalized_in(client, served, &r.object.name, concurrency);
            tokio::time::timeout_at(deadline, listing)
                .await
                .unwrap_or_default()
        } else {
            vec![]
        };
        holders.sort_by(|a, b| a.object.cmp(&b.object));
        r.holders = holders;
    }
    remaining
}

fn held(resource: &ApiResource, meta: &ObjectMeta) -> Remaining {
    Remaining {
        object: object_ref(resource, meta),
        finalizers: meta.finalizers.clone().unwrap_or_default(),
        conditions: vec![],
        holders: vec![],
    }
}

/// The objects in `namespace`, of every listable namespaced kind, that
/// carry finalizers: what the namespace controller waits for before it can
/// remove the namespace (Kubernetes docs, "Namespaces": "Terminating"
/// namespaces and finalizers).
async fn finalized_in(
    client: &Client,
    served: &Served,
    namespace: &str,
    concurrency: usize,
) -> Vec<Remaining> {
    let kinds: Vec<ApiResource> = served
        .listable()
        .iter()
        .filter(|(_, namespaced)| *namespaced)
        .map(|(resource, _)| resource.clone())
        .collect();
    let lists: Vec<_> = kinds
        .into_iter()
        .map(|resource| async move {
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource);
            let items = api
                .list_metadata(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            items
                .iter()
                .filter(|o| {
                    o.metadata
                        .finalizers
                        .as_ref()
                        .is_some_and(|f| !f.is_empty())
                })
                .map(|o| held(&resource, &o.metadata))
                .collect::<Vec<_>>()
        })
        .collect();
    stream::iter(lists)
        .buffer_unordered(concurrency.max(1))
        .flat_map(stream::iter)
        .collect()
        .await
}

/// The members still present (same uid), with their finalizers. An object
/// that cannot be read counts as present.
async fn present(client: &Client, batch: &[Member], concurrency: usize) -> Vec<Remaining> {
    let reads: Vec<_> = batch
        .iter()
        .map(|m| async move {
            match api_for(client, m).get_metadata_opt(&m.object.name).await {
                Ok(None) => None,
                Ok(Some(live)) if live.metadata.uid != m.meta.uid => None,
                Ok(Some(live)) => {
                    let namespace = m.object.gk == GroupKind::new("", "Namespace");
                    let (finalizers, conditions) = match namespace {
                        true => namespace_holders(client, &m.object.name).await,
                        false => None,
                    }
                    .unwrap_or_else(|| (live.metadata.finalizers.unwrap_or_default(), vec![]));
                    Some(Remaining {
                        object: m.object.clone(),
                        finalizers,
                        conditions,
                        holders: vec![],
                    })
                }
                Err(_) => Some(Remaining {
                    object: m.object.clone(),
                    finalizers: m.meta.finalizers.clone().unwrap_or_default(),
                    conditions: vec![],
                    holders: vec![],
                }),
            }
        })
        .collect();
    stream::iter(reads)
        .buffer_unordered(concurrency.max(1))
        .filter_map(|r| async move { r })
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ApiResource;

    fn member(group: &str, kind: &str, name: &str) -> Member {
        Member {
            object: ObjectRef {
                gk: GroupKind::new(group, kind),
                namespace: None,
                name: name.into(),
            },
            resource: ApiResource {
                group: group.into(),
                version: "v1".into(),
                api_version: "v1".into(),
                kind: kind.into(),
                plural: "x".into(),
            },
            meta: Default::default(),
        }
    }

    #[test]
    fn custom_resources_go_first_namespaces_last() {
        let custom: BTreeSet<GroupKind> = [GroupKind::new("x.test", "Widget")].into();
        let members = vec![
            member("", "Namespace", "ns"),
            member(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "widgets.x.test",
            ),
            member("apps", "Deployment", "controller"),
            member(
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration",
                "guard",
            ),
            member("x.test", "Widget", "w"),
        ];
        let names: Vec<Vec<String>> = steps(members, &custom)
            .iter()
            .map(|s| s.iter().map(|m| m.object.name.clone()).collect())
            .collect();
        assert_eq!(
            names,
            [
                vec!["w"],
                vec!["guard"],
                vec!["controller"],
                vec!["widgets.x.test"],
                vec!["ns"]
            ]
        );
    }

    #[test]
    fn remaining_objects_name_their_finalizers() {
        let r = Remaining {
            object: ObjectRef {
                gk: GroupKind::new("x.test", "Widget"),
                namespace: Some("c6".into()),
                name: "held".into(),
            },
            finalizers: vec!["x.test/cleanup".into()],
            conditions: vec![],
            holders: vec![],
        };
        assert_eq!(r.to_string(), "Widget c6/held (finalizers: x.test/cleanup)");
        let ns = Remaining {
            object: ObjectRef {
                gk: GroupKind::new("", "Namespace"),
                namespace: None,
                name: "c6".into(),
            },
            finalizers: vec!["kubernetes".into()],
            conditions: vec!["Some content in the namespace has finalizers remaining: \
                              x.test/cleanup in 1 resource instances"
                .into()],
            holders: vec![r.clone()],
        };
        assert_eq!(
            ns.to_string(),
            "Namespace c6 (finalizers: kubernetes; Some content in the namespace has finalizers \
             remaining: x.test/cleanup in 1 resource instances)\n    \
             held by Widget c6/held (finalizers: x.test/cleanup)"
        );
    }

    #[test]
    fn an_interrupted_wait_names_what_it_last_saw_or_that_it_saw_nothing_yet() {
        let interrupted = |remaining| DeleteError::Interrupted {
            step: "workloads and other objects",
            after: Duration::from_secs(3),
            remaining,
        };
        let early = interrupted(vec![]).to_string();
        assert_eq!(
            early,
            "deleting workloads and other objects: stopped waiting: interrupted; after 3s, before \
             it had checked which of them are gone"
        );
        let held = Remaining {
            object: ObjectRef {
                gk: GroupKind::new("", "ConfigMap"),
                namespace: Some("kubeflow".into()),
                name: "big-1".into(),
            },
            finalizers: vec![],
            conditions: vec![],
            holders: vec![],
        };
        let later = interrupted(vec![held]).to_string();
        assert!(
            later.ends_with(
                "1 object(s) still present after 3s:\n  ConfigMap kubeflow/big-1 (no finalizers)"
            ),
            "{later}"
        );
    }

    #[test]
    fn a_long_list_of_holders_is_cut_and_counted() {
        let holder = |i: usize| Remaining {
            object: ObjectRef {
                gk: GroupKind::new("x.test", "Widget"),
                namespace: Some("c6".into()),
                name: format!("w{i:02}"),
            },
            finalizers: vec!["x.test/cleanup".into()],
            conditions: vec![],
            holders: vec![],
        };
        let crd = Remaining {
            object: ObjectRef {
                gk: GroupKind::new(CRD.0, CRD.1),
                namespace: None,
                name: "widgets.x.test".into(),
            },
            finalizers: vec!["customresourcecleanup.apiextensions.k8s.io".into()],
            conditions: vec![],
            holders: (0..MAX_HOLDERS + 3).map(holder).collect(),
        };
        let text = crd.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + MAX_HOLDERS + 1, "{text}");
        assert_eq!(
            lines[1],
            "    held by Widget c6/w00 (finalizers: x.test/cleanup)"
        );
        assert_eq!(lines[MAX_HOLDERS + 1], "    and 3 more with finalizers");
    }

    #[test]
    fn custom_resources_are_read_through_the_storage_version() {
        let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.x.test"},
            "spec": {
                "group": "x.test",
                "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets"},
                "versions": [
                    {"name": "v1beta1", "served": true, "storage": false},
                    {"name": "v1", "served": true, "storage": true}
                ]
            }
        }))
        .unwrap();
        let ar = crd_resource(&crd).unwrap();
        assert_eq!(
            (
                ar.api_version.as_str(),
                ar.kind.as_str(),
                ar.plural.as_str()
            ),
            ("x.test/v1", "Widget", "widgets")
        );
    }
}
