//! Applying, pruning and destroying a bundle: the [`Applier`].
//!
//! Every object goes to the API server as a server-side apply
//! (`PATCH application/apply-patch+yaml`, field manager `kfaws`, `force=true`
//! because a bundle's objects are ours to own, `fieldValidation=Strict` so a
//! misspelt field is an error rather than silently dropped); never a
//! client-side apply. Phases: see [`super::phases`]. Objects within a phase
//! are applied concurrently (at most [`ApplyOptions::concurrency`] at a
//! time): that, and skipping unchanged objects, is what makes a bundle apply
//! several times faster than `kubectl apply --server-side`, which sends one
//! object after the other.
//!
//! Skipping unchanged objects (on by default, [`ApplyOptions::skip_unchanged`]):
//! each object carries annotation [`MANIFEST_HASH`], the SHA-256 of the
//! manifest kfaws applied. Before applying, kfaws lists the bundle's members
//! (one metadata-only list per group-kind) and does not send an object whose
//! recorded hash equals the new manifest's, whose `kfaws` apply entry in
//! `metadata.managedFields` exists, and which no other field manager has
//! written since (no other entry of the main resource with a time at or
//! after kfaws's). Any edit by anyone else leaves such an entry, so drift is
//! still re-applied; an unchanged, untouched object is what a server-side
//! apply would leave as it is anyway.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::Client;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::applyset::{self, ApplySet, Inventory, InventoryError, Member};
use super::bundle::{Bundle, Origin};
use super::delete::{self, DeleteError, DeleteReport};
use super::discovery::{self, resolve, SameObject, Served, Target, Unserved};
use super::object::ObjectRef;
use super::phases::{self, Gate, Phases};
use super::retry::{self, RetryError};
use super::wait;

/// Whether the API server refused a change because it touches an
/// immutable field (422 Invalid, "field is immutable" or "... is immutable
/// after creation", e.g. a StorageClass's `parameters` or a
/// PersistentVolume's source).
fn is_immutable(status: &kube::core::Status) -> bool {
    status.code == 422 && status.message.contains("immutable")
}

/// What deleting a live object of kind `gk` would lose beyond the object itself, for the
/// kinds whose immutable fields an apply does not change by deleting and re-creating them
/// (what it does for any other kind): a PersistentVolumeClaim's dynamically provisioned
/// volume goes with it under the usual `Delete` reclaim policy, and a
/// CustomResourceDefinition takes every custom resource of its kind with it.
fn not_replaced(gk: &super::object::GroupKind) -> Option<&'static str> {
    use super::object::GroupKind;
    if *gk == GroupKind::new("", "PersistentVolumeClaim") {
        Some(
            "its volume and the data on it may be deleted with it (a dynamically provisioned \
             volume's reclaim policy is Delete)",
        )
    } else if *gk == GroupKind::new("apiextensions.k8s.io", "CustomResourceDefinition") {
        Some("every custom resource of its kind would be deleted with it")
    } else {
        None
    }
}

/// Annotation on every applied object: hex SHA-256 of the manifest applied
/// (with the ApplySet label, without this annotation).
pub const MANIFEST_HASH: &str = "kfaws/manifest-sha256";

/// How to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyOptions {
    /// Server-side apply field manager. Default `kfaws`.
    pub field_manager: String,
    /// Namespace of the ApplySet parents, created if missing and never
    /// deleted (it may hold other bundles' parents). Default `kfaws-system`.
    pub inventory_namespace: String,
    /// Most API calls in flight at once. Default 16.
    pub concurrency: usize,
    /// Deadline for the whole apply (or destroy) of one bundle, retries and
    /// waits included. Default 10 minutes.
    pub timeout: Duration,
    /// Skip objects proven unchanged (see the module docs). Default true.
    pub skip_unchanged: bool,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        Self {
            field_manager: "kfaws".into(),
            inventory_namespace: "kfaws-system".into(),
            concurrency: 16,
            timeout: Duration::from_secs(600),
            skip_unchanged: true,
        }
    }
}

/// What happened to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It was not a member of the set before (created, or adopted).
    Created,
    /// Applied, and the server changed it (new resourceVersion).
    Updated,
    /// Applied, and the server left it as it was.
    Unchanged,
    /// Not sent: proven unchanged (see the module docs).
    Skipped,
    /// Deleted and created again: the change touches a field the API server
    /// does not let change (`kubectl apply --force` does the same).
    Replaced,
}

/// The result of a successful apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// The ApplySet id labelling every object.
    pub applyset_id: String,
    /// Every object of the bundle, in bundle order, with what happened to it.
    pub objects: Vec<(ObjectRef, Outcome)>,
    /// Members that left the bundle and were deleted.
    pub pruned: DeleteReport,
}

impl ApplyReport {
    /// The objects with a given outcome.
    pub fn with(&self, outcome: Outcome) -> Vec<&ObjectRef> {
        self.objects
            .iter()
            .filter(|(_, o)| *o == outcome)
            .map(|(r, _)| r)
            .collect()
    }
}

/// One object that was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectFailure {
    /// The object.
    pub object: ObjectRef,
    /// Where it was written.
    pub origin: Origin,
    /// Why: the server's message, or what it waited for.
    pub reason: String,
}

impl fmt::Display for ObjectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.object, self.origin, self.reason)
    }
}

/// Moves a core `Secret`'s `stringData` into `data`, base64-encoded, as the
/// API server does on write ("All keys and values are merged into the data
/// field on write, overwriting any existing values. The stringData field is
/// never output when reading from the API", Kubernetes API reference,
/// Secret v1). Applied as written, kfaws' field manager would own
/// `stringData` fields no read ever shows, so a value changed outside kfaws
/// would never be seen as drift; owning `data` fields, it is.
pub(crate) fn secret_string_data_to_data(object: &mut Value) {
    use base64::Engine as _;

    if object["apiVersion"] != "v1" || object["kind"] != "Secret" {
        return;
    }
    let Some(map) = object.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = map.remove("stringData") else {
        return;
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    for (key, value) in strings {
        // A value that is not a string is left for the API server to refuse.
        let encoded = match &value {
            Value::String(text) => json!(base64::engine::general_purpose::STANDARD.encode(text)),
            _ => value,
        };
        data[key] = encoded;
    }
}

/// [`resolve`] then [`discovery::distinct`]: every object served, none
/// written twice.
// ApplyError, as every Applier method returns (their futures are as large).
#[allow(clippy::result_large_err)]
fn resolved(bundle: &Bundle, served: &Served) -> Result<Vec<Target>, ApplyError> {
    let targets = resolve(bundle, served)?;
    discovery::distinct(bundle, &targets)?;
    Ok(targets)
}

/// Why an apply or destroy failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Objects use APIs the cluster does not serve (plan time, nothing applied).
    #[error(transparent)]
    Unserved(#[from] Unserved),
    /// Two documents name the same object (plan time, nothing applied).
    #[error(transparent)]
    SameObject(#[from] Box<SameObject>),
    /// Discovery failed.
    #[error("cannot discover the API server's resources: {}", retry::message(.0))]
    Discovery(kube::Error),
    /// The ApplySet parent could not be read or written.
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    /// Some objects were not applied; nothing was pruned.
    #[error("bundle {bundle:?}: {} object(s) not applied ({applied} applied{}); nothing was pruned:\n  {}",
        .failures.len(),
        if *.stopped { ", later phases not started" } else { "" },
        .failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Objects {
        /// The bundle.
        bundle: String,
        /// What failed.
        failures: Vec<ObjectFailure>,
        /// How many objects were applied.
        applied: usize,
        /// Whether later phases were skipped.
        stopped: bool,
    },
    /// Objects of the bundle already exist and belong to no ApplySet or to
    /// another one: applying would take them over, and destroying the
    /// bundle would delete them (and, for a namespace, all it holds).
    #[error("bundle {bundle:?}: {} object(s) already exist and were not applied by this bundle; kfaws would take them over and delete them with it (a namespace with everything in it). Remove them from the manifests, or delete them from the cluster first if they are yours to replace:\n  {}",
        .objects.len(),
        .objects.iter().map(|(o, owner)| match owner {
            Some(id) => format!("{o} (ApplySet {id})"),
            None => format!("{o} (no ApplySet)"),
        }).collect::<Vec<_>>().join("\n  "))]
    Foreign {
        /// The bundle.
        bundle: String,
        /// Each such object with the ApplySet it belongs to, if any.
        objects: Vec<(ObjectRef, Option<String>)>,
    },
    /// Pruning or destroying failed.
    #[error("bundle {bundle:?}: {source}")]
    Delete {
        /// The bundle.
        bundle: String,
        /// The failure.
        #[source]
        source: DeleteError,
    },
}

/// Applies, prunes and destroys bundles through one client. This is the
/// API a graph `Resource` uses: `check` at plan time, `apply` from
/// `create`/`update`, `destroy` from `delete`:
///
/// ```no_run
/// # async fn f(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use kfaws::k8s::{Applier, Bundle};
/// let bundle = Bundle::from_path("kubeflow", std::path::Path::new("kubeflow.yaml"))?;
/// let applier = Applier::new(client);
/// applier.check(&bundle).await?;              // plan time: every API served
/// let report = applier.apply(&bundle).await?; // phased server-side apply + prune
/// applier.destroy(&bundle).await?;            // exactly what carries the ApplySet label
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Applier {
    client: Client,
    options: ApplyOptions,
}

/// A bundle resolved against the cluster, ready to apply.
struct Resolved {
    targets: Vec<Target>,
    objects: Vec<Value>,
    hashes: Vec<String>,
}

impl Applier {
    /// An applier with [`ApplyOptions::default`].
    pub fn new(client: Client) -> Self {
        Self::with_options(client, ApplyOptions::default())
    }

    /// An applier with the given options.
    pub fn with_options(client: Client, options: ApplyOptions) -> Self {
        Self { client, options }
    }

    /// The options in use.
    pub fn options(&self) -> &ApplyOptions {
        &self.options
    }

    /// The ApplySet of a bundle name.
    pub fn applyset(&self, bundle: &str) -> ApplySet {
        ApplySet::new(bundle, &self.options.inventory_namespace)
    }

    /// Plan-time check: discovery, then every object's API must be served or
    /// defined by a CRD of the bundle. No write.
    ///
    /// # Errors
    /// [`ApplyError::Unserved`] naming each object and the served versions of
    /// its kind (case C10); [`ApplyError::Discovery`].
    pub async fn check(&self, bundle: &Bundle) -> Result<Vec<Target>, ApplyError> {
        let served = Served::fetch(&self.client)
            .await
            .map_err(ApplyError::Discovery)?;
        resolved(bundle, &served)
    }

    /// The objects of `bundle` that exist in the cluster without this
    /// bundle's ApplySet label, with the ApplySet they carry, if any; an
    /// object with no ApplySet label that kfaws's field manager applied
    /// ([`applied_by`]) is not one of them (its label was taken off). Kinds
    /// a CRD of the bundle defines and the cluster does not serve yet have
    /// no objects to find. Read-only.
    ///
    /// # Errors
    /// [`ApplyError::Unserved`], [`ApplyError::Discovery`]; a read that
    /// fails is reported as [`ApplyError::Objects`].
    pub async fn foreign(
        &self,
        bundle: &Bundle,
    ) -> Result<Vec<(ObjectRef, Option<String>)>, ApplyError> {
        let served = Served::fetch(&self.client)
            .await
            .map_err(ApplyError::Discovery)?;
        let targets = resolved(bundle, &served)?;
        let set = self.applyset(&bundle.name);
        let ours = set.id.as_str();
        let manager = self.options.field_manager.as_str();
        let reads: Vec<_> = targets
            .iter()
            .filter(|t| !t.from_bundle_crd)
            .map(|t| {
                let api: Api<DynamicObject> = match &t.object.namespace {
                    Some(ns) => Api::namespaced_with(self.client.clone(), ns, &t.resource),
                    None => Api::all_with(self.client.clone(), &t.resource),
                };
                async move {
                    let origin = bundle.objects[t.index].origin.clone();
                    let live = api
                        .get_metadata_opt(&t.object.name)
                        .await
                        .map_err(|e| (t.object.clone(), origin, retry::message(&e)))?;
                    let owner = live.and_then(|o| {
                        let id = o
                            .metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(applyset::PART_OF).cloned());
                        match id {
                            Some(id) if id == ours => None,
                            // kfaws applied it and someone took the label off: drift
                            // the next apply repairs (it puts the label back), not
                            // another's object.
                            None if applied_by(&o.metadata, manager) => None,
                            other => Some((t.object.clone(), other)),
                        }
                    });
                    Ok::<_, (ObjectRef, Origin, String)>(owner)
                }
            })
            .collect();
        let results: Vec<_> = stream::iter(reads)
            .buffer_unordered(self.options.concurrency.max(1))
            .collect()
            .await;
        let mut foreign = Vec::new();
        let mut failures = Vec::new();
        for r in results {
            match r {
                Ok(Some(f)) => foreign.push(f),
                Ok(None) => {}
                Err((object, origin, reason)) => failures.push(ObjectFailure {
                    object,
                    origin,
                    reason,
                }),
            }
        }
        if !failures.is_empty() {
            return Err(ApplyError::Objects {
                bundle: bundle.name.clone(),
                failures,
                applied: 0,
                stopped: true,
            });
        }
        foreign.sort();
        Ok(foreign)
    }

    /// Applies `bundle` in phases, then prunes the members that left it.
    ///
    /// # Errors
    /// [`ApplyError::Unserved`] before anything is applied; [`ApplyError::Objects`]
    /// listing every object not applied with the server's message or what it
    /// waited for (nothing is pruned then); [`ApplyError::Delete`] when
    /// pruning fails; [`ApplyError::Inventory`] for the ApplySet parent.
    pub async fn apply(&self, bundle: &Bundle) -> Result<ApplyReport, ApplyError> {
        let deadline = Instant::now() + self.options.timeout;
        let served = Served::fetch(&self.client)
            .await
            .map_err(ApplyError::Discovery)?;
        let targets = resolved(bundle, &served)?;
        let set = self.applyset(&bundle.name);
        let resolved = self.desired(bundle, targets, &set);
        let phases = phases::plan(bundle, &resolved.targets, &resolved.objects);
        let desired_inv = Inventory::of(resolved.targets.iter().map(|t| &t.object));

        self.ensure_inventory_namespace(deadline).await?;
        let recorded = set.read(&self.client).await?;
        let union = recorded
            .as_ref()
            .map(|r| r.union(&desired_inv))
            .unwrap_or_else(|| desired_inv.clone());
        // Listed also without a parent (deleted by hand): members of the bundle's kinds still
        // carry the set's label, and those that left the manifests are pruned all the same.
        let live: Vec<Member> = set
            .members(&self.client, &served, &union, self.options.concurrency)
            .await?;
        // Record the union before touching members, so that an interrupted
        // apply leaves every member findable for the next prune or destroy.
        if recorded.as_ref() != Some(&union) {
            set.write(&self.client, &union, &self.options.field_manager)
                .await?;
        }
        let live_by_ref: HashMap<&ObjectRef, &ObjectMeta> =
            live.iter().map(|m| (&m.object, &m.meta)).collect();

        let run = Run {
            applier: self,
            bundle,
            resolved: &resolved,
            live: &live_by_ref,
            deadline,
        };
        let outcomes = run
            .phases(&phases)
            .await
            .map_err(|(failures, applied, stopped)| ApplyError::Objects {
                bundle: bundle.name.clone(),
                failures,
                applied,
                stopped,
            })?;

        let keep: HashSet<&ObjectRef> = resolved.targets.iter().map(|t| &t.object).collect();
        let stale: Vec<Member> = live
            .iter()
            .filter(|m| !keep.contains(&m.object))
            .cloned()
            .collect();
        let pruned = if stale.is_empty() {
            DeleteReport::default()
        } else {
            let custom =
                delete::custom_kinds(&self.client)
                    .await
                    .map_err(|source| ApplyError::Delete {
                        bundle: bundle.name.clone(),
                        source,
                    })?;
            delete::delete_in_order(
                &self.client,
                stale,
                &custom,
                deadline,
                self.options.concurrency,
            )
            .await
            .map_err(|source| ApplyError::Delete {
                bundle: bundle.name.clone(),
                source,
            })?
        };
        // Pruned namespaces left terminating still carry the label: keep
        // recording their kind so a later destroy finds them.
        let mut exact = desired_inv.clone();
        if !pruned.terminating.is_empty() {
            exact
                .group_kinds
                .insert(super::object::GroupKind::new("", "Namespace"));
        }
        if union != exact {
            set.write(&self.client, &exact, &self.options.field_manager)
                .await?;
        }
        Ok(ApplyReport {
            applyset_id: set.id,
            objects: resolved
                .targets
                .iter()
                .zip(outcomes)
                .map(|(t, o)| (t.object.clone(), o))
                .collect(),
            pruned,
        })
    }

    /// Deletes every member of the bundle's ApplySet (found through the
    /// group-kinds the parent records and the bundle's own), in dependency
    /// order (see [`super::delete`]), then the parent.
    ///
    /// # Errors
    /// [`ApplyError::Delete`] naming what is left and its finalizers when a
    /// step runs out of time (case C6); [`ApplyError::Inventory`].
    pub async fn destroy(&self, bundle: &Bundle) -> Result<DeleteReport, ApplyError> {
        let served = Served::fetch(&self.client)
            .await
            .map_err(ApplyError::Discovery)?;
        let mut hint = Inventory::default();
        for m in &bundle.objects {
            hint.group_kinds
                .insert(super::object::GroupKind::new(m.group(), &m.kind));
        }
        self.destroy_with(&bundle.name, &served, hint).await
    }

    /// Like [`Applier::destroy`] for a bundle known by name: deletes the
    /// members of the group-kinds its ApplySet parent records and of those
    /// in `kinds` (where to look when the parent is gone).
    ///
    /// # Errors
    /// As [`Applier::destroy`].
    pub async fn destroy_named(
        &self,
        bundle: &str,
        kinds: Inventory,
    ) -> Result<DeleteReport, ApplyError> {
        let served = Served::fetch(&self.client)
            .await
            .map_err(ApplyError::Discovery)?;
        self.destroy_with(bundle, &served, kinds).await
    }

    async fn destroy_with(
        &self,
        bundle: &str,
        served: &Served,
        hint: Inventory,
    ) -> Result<DeleteReport, ApplyError> {
        let deadline = Instant::now() + self.options.timeout;
        let set = self.applyset(bundle);
        let recorded = set.read(&self.client).await?;
        let inventory = recorded.map(|r| r.union(&hint)).unwrap_or(hint);
        let members = set
            .members(&self.client, served, &inventory, self.options.concurrency)
            .await?;
        let to_error = |source| ApplyError::Delete {
            bundle: bundle.to_string(),
            source,
        };
        let custom = delete::custom_kinds(&self.client).await.map_err(to_error)?;
        let report = delete::delete_in_order(
            &self.client,
            members,
            &custom,
            deadline,
            self.options.concurrency,
        )
        .await
        .map_err(to_error)?;
        if report.terminating.is_empty() {
            set.delete(&self.client).await?;
        }
        Ok(report)
    }

    /// The objects as they will be applied: namespace resolved, ApplySet
    /// label and manifest hash added.
    fn desired(&self, bundle: &Bundle, targets: Vec<Target>, set: &ApplySet) -> Resolved {
        let mut objects = Vec::with_capacity(targets.len());
        let mut hashes = Vec::with_capacity(targets.len());
        for t in &targets {
            let mut o = bundle.objects[t.index].object.clone();
            if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                match &t.object.namespace {
                    Some(ns) => {
                        meta.insert("namespace".into(), json!(ns));
                    }
                    None => {
                        meta.remove("namespace");
                    }
                }
            }
            secret_string_data_to_data(&mut o);
            applyset::label(&mut o, &set.id);
            let hash = hex::encode(Sha256::digest(serde_json::to_vec(&o).unwrap_or_default()));
            if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
                if !annotations.is_object() {
                    *annotations = json!({});
                }
                annotations[MANIFEST_HASH] = json!(hash);
            }
            objects.push(o);
            hashes.push(hash);
        }
        Resolved {
            targets,
            objects,
            hashes,
        }
    }

    async fn ensure_inventory_namespace(&self, deadline: Instant) -> Result<(), ApplyError> {
        let ns = &self.options.inventory_namespace;
        let api: Api<Namespace> = Api::all(self.client.clone());
        let body = json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": ns,
                "labels": {"app.kubernetes.io/managed-by": "kfaws"},
            },
        });
        let pp = PatchParams::apply(&self.options.field_manager).force();
        retry::retry(deadline, || async {
            api.patch(ns, &pp, &Patch::Apply(&body)).await
        })
        .await
        .map_err(|e| {
            ApplyError::Inventory(InventoryError::Api {
                what: format!("applying the ApplySet inventory namespace {ns}"),
                error: match e {
                    RetryError::Failed(k) => k,
                    RetryError::DeadlineExceeded { last } => kube::Error::Api(Box::new(
                        kube::core::Status::failure(&last, "Timeout").with_code(504),
                    )),
                },
            })
        })?;
        Ok(())
    }
}

/// The `metadata.managedFields` entries of the main resource (not of a
/// subresource such as `status`).
fn main_entries(live: &ObjectMeta) -> Vec<&ManagedFieldsEntry> {
    live.managed_fields
        .iter()
        .flatten()
        .filter(|e| e.subresource.as_deref().unwrap_or("").is_empty())
        .collect()
}

fn is_apply_of(entry: &ManagedFieldsEntry, field_manager: &str) -> bool {
    entry.manager.as_deref() == Some(field_manager) && entry.operation.as_deref() == Some("Apply")
}

/// Whether `field_manager` server-side applied the live object: its
/// `metadata.managedFields` has an `Apply` entry of that manager for the
/// main resource (Kubernetes "Server-Side Apply: field management").
pub fn applied_by(live: &ObjectMeta, field_manager: &str) -> bool {
    main_entries(live)
        .iter()
        .any(|e| is_apply_of(e, field_manager))
}

/// Whether a live object is proven unchanged (see the module docs).
pub fn unchanged(live: &ObjectMeta, hash: &str, field_manager: &str) -> bool {
    if live.deletion_timestamp.is_some() {
        return false;
    }
    let recorded = live.annotations.as_ref().and_then(|a| a.get(MANIFEST_HASH));
    if recorded.map(String::as_str) != Some(hash) {
        return false;
    }
    let main = main_entries(live);
    let Some(ours) = main.iter().position(|e| is_apply_of(e, field_manager)) else {
        return false;
    };
    let Some(since) = main[ours].time.as_ref() else {
        return false;
    };
    // Times have one-second resolution: a write in the same second as ours
    // may have come after it.
    !main
        .iter()
        .enumerate()
        .any(|(i, e)| i != ours && e.time.as_ref().is_none_or(|t| t.0 >= since.0))
}

/// One apply in progress.
struct Run<'a> {
    applier: &'a Applier,
    bundle: &'a Bundle,
    resolved: &'a Resolved,
    live: &'a HashMap<&'a ObjectRef, &'a ObjectMeta>,
    deadline: Instant,
}

type PhaseFailure = (Vec<ObjectFailure>, usize, bool);

impl Run<'_> {
    fn failure(&self, pos: usize, reason: String) -> ObjectFailure {
        let t = &self.resolved.targets[pos];
        ObjectFailure {
            object: t.object.clone(),
            origin: self.bundle.objects[t.index].origin.clone(),
            reason,
        }
    }

    async fn phases(&self, phases: &Phases) -> Result<Vec<Outcome>, PhaseFailure> {
        let mut outcomes: BTreeMap<usize, Outcome> = BTreeMap::new();
        let mut failures = Vec::new();
        let stop = |failures: Vec<ObjectFailure>, outcomes: &BTreeMap<usize, Outcome>| {
            Err((failures, outcomes.len(), true))
        };

        self.batch(&phases.crds, &mut outcomes, &mut failures).await;
        if !failures.is_empty() {
            return stop(failures, &outcomes);
        }
        self.wait_crds(&phases.crds, &mut failures).await;
        if !failures.is_empty() {
            return stop(failures, &outcomes);
        }
        for batch in [&phases.namespaces, &phases.main] {
            self.batch(batch, &mut outcomes, &mut failures).await;
            if !failures.is_empty() {
                return stop(failures, &outcomes);
            }
        }

        // Webhook backends, then their configurations, then what they intercept.
        // Futures collected before streaming (rust-lang/rust#102211, see
        // `ApplySet::members`).
        let gates: Vec<_> = phases.gates.iter().map(|g| self.wait_gate(g)).collect();
        let ready: Vec<Result<(), String>> = stream::iter(gates)
            .buffered(self.applier.options.concurrency.max(1))
            .collect()
            .await;
        let mut open = Vec::new();
        for (gate, r) in phases.gates.iter().zip(&ready) {
            match r {
                Ok(()) => open.push(gate.configuration),
                Err(why) => failures.push(self.failure(
                    gate.configuration,
                    format!(
                        "not applied: the backend of its webhook(s) {} is not ready {}",
                        quoted(&gate.webhooks),
                        self.waited(why)
                    ),
                )),
            }
        }
        self.batch(&open, &mut outcomes, &mut failures).await;
        let mut admitted = Vec::new();
        for (pos, gates) in &phases.intercepted {
            let blocked: Vec<String> = gates
                .iter()
                .filter_map(|&g| ready[g].as_ref().err().map(|why| (g, why)))
                .map(|(g, why)| {
                    let gate = &phases.gates[g];
                    let config = &self.resolved.targets[gate.configuration].object;
                    format!(
                        "webhook {} ({config}) intercepts it and its backend is not ready {}",
                        quoted(&gate.webhooks),
                        self.waited(why)
                    )
                })
                .collect();
            if blocked.is_empty() {
                admitted.push(*pos);
            } else {
                failures.push(self.failure(*pos, format!("not applied: {}", blocked.join("; "))));
            }
        }
        self.batch(&admitted, &mut outcomes, &mut failures).await;
        if !failures.is_empty() {
            let applied = outcomes.len();
            return Err((failures, applied, false));
        }
        Ok(outcomes.into_values().collect())
    }

    /// Applies the objects at `positions` concurrently.
    async fn batch(
        &self,
        positions: &[usize],
        outcomes: &mut BTreeMap<usize, Outcome>,
        failures: &mut Vec<ObjectFailure>,
    ) {
        let applies: Vec<_> = positions
            .iter()
            .map(|&pos| async move { (pos, self.apply_one(pos).await) })
            .collect();
        let results: Vec<(usize, Result<Outcome, String>)> = stream::iter(applies)
            .buffer_unordered(self.applier.options.concurrency.max(1))
            .collect()
            .await;
        for (pos, r) in results {
            match r {
                Ok(o) => {
                    outcomes.insert(pos, o);
                }
                Err(reason) => failures.push(self.failure(pos, reason)),
            }
        }
        failures.sort_by_key(|f| (f.origin.file.clone(), f.origin.document));
    }

    async fn apply_one(&self, pos: usize) -> Result<Outcome, String> {
        let t = &self.resolved.targets[pos];
        let api: Api<DynamicObject> = match &t.object.namespace {
            Some(ns) => Api::namespaced_with(self.applier.client.clone(), ns, &t.resource),
            None => Api::all_with(self.applier.client.clone(), &t.resource),
        };
        let mut before = self.live.get(&t.object).copied();
        if let Some(meta) = before.filter(|m| m.deletion_timestamp.is_some()) {
            // Deleted by someone else and held by finalizers: applying now
            // would patch an object that then goes. Wait until it is gone
            // (its finalizers' controllers finish), then create it again.
            self.wait_gone(&api, &t.object.name, meta.uid.clone())
                .await
                .map_err(|e| {
                    format!("being deleted (outside kfaws); waited to create it again: {e}")
                })?;
            before = None;
        }
        if let Some(meta) = before {
            let options = &self.applier.options;
            // A field removed by someone else leaves no managedFields entry of
            // theirs, only a gap in ours: `edited` sees that.
            if options.skip_unchanged
                && unchanged(meta, &self.resolved.hashes[pos], &options.field_manager)
                && !super::resource::edited(
                    meta,
                    &options.field_manager,
                    &self.resolved.objects[pos],
                )
            {
                return Ok(Outcome::Skipped);
            }
        }
        let pp = PatchParams::apply(&self.applier.options.field_manager)
            .force()
            .validation_strict();
        let body = &self.resolved.objects[pos];
        let apply = || {
            retry::retry(self.deadline, || async {
                api.patch(&t.object.name, &pp, &Patch::Apply(body)).await
            })
        };
        let after = match apply().await {
            Ok(after) => after,
            Err(RetryError::Failed(kube::Error::Api(status)))
                if before.is_some() && is_immutable(&status) =>
            {
                let message = status.message.clone();
                if let Some(loses) = not_replaced(&t.object.gk) {
                    return Err(format!(
                        "{message}; kfaws does not delete and re-create a {} to change it: {loses}. \
                         Change the manifest back, or delete it yourself once that is acceptable \
                         and apply again",
                        t.object.gk.kind
                    ));
                }
                self.delete_for_replacement(&api, pos)
                    .await
                    .map_err(|e| format!("{message}; replacing it: {e}"))?;
                apply().await.map_err(|e| e.to_string())?;
                return Ok(Outcome::Replaced);
            }
            Err(e) => return Err(e.to_string()),
        };
        Ok(match before {
            None => Outcome::Created,
            Some(meta) if meta.resource_version == after.metadata.resource_version => {
                Outcome::Unchanged
            }
            Some(_) => Outcome::Updated,
        })
    }

    /// Deletes the live object at `pos` so that it can be created again
    /// with a changed immutable field, and waits (until the deadline) until
    /// it is gone. A PersistentVolume first loses the claim bound to it
    /// (`spec.claimRef`): a bound volume is held by the
    /// `kubernetes.io/pv-protection` finalizer until its claim is gone, and
    /// a claim cannot move to another volume (`spec.volumeName` is
    /// immutable); the claim's own bundle creates it again.
    async fn delete_for_replacement(
        &self,
        api: &Api<DynamicObject>,
        pos: usize,
    ) -> Result<(), String> {
        let t = &self.resolved.targets[pos];
        let name = &t.object.name;
        let live = api.get_opt(name).await.map_err(|e| retry::message(&e))?;
        let Some(live) = live else {
            return Ok(());
        };
        if t.object.gk == super::object::GroupKind::new("", "PersistentVolume") {
            let claim = live.data.pointer("/spec/claimRef").cloned();
            let ns = claim.as_ref().and_then(|c| c.get("namespace")?.as_str());
            let claim_name = claim.as_ref().and_then(|c| c.get("name")?.as_str());
            if let (Some(ns), Some(claim_name)) = (ns, claim_name) {
                let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
                    Api::namespaced(self.applier.client.clone(), ns);
                tracing::warn!(
                    volume = %name, claim = %format!("{ns}/{claim_name}"),
                    "replacing a bound PersistentVolume: deleting its claim first"
                );
                match claims.delete(claim_name, &DeleteParams::background()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(retry::message(&e)),
                }
            }
        }
        let uid = live.metadata.uid.clone();
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(retry::message(&e)),
        }
        self.wait_gone(api, name, uid).await
    }

    /// Waits (until the deadline) until the object `name` with `uid` is
    /// gone; the error says which finalizers still hold it.
    async fn wait_gone(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        uid: Option<String>,
    ) -> Result<(), String> {
        wait::until(self.deadline, || async {
            match api.get_opt(name).await {
                Ok(Some(o)) if o.metadata.uid == uid => Ok(Err(format!(
                    "{name} still present (finalizers: {})",
                    o.metadata.finalizers.unwrap_or_default().join(", ")
                ))),
                Ok(_) => Ok(Ok(())),
                Err(e) if retry::is_transient(&e) => Ok(Err(retry::message(&e))),
                Err(e) => Err(retry::message(&e)),
            }
        })
        .await
    }

    /// Waits until each applied CRD is Established and each of its served
    /// versions is served by discovery.
    async fn wait_crds(&self, positions: &[usize], failures: &mut Vec<ObjectFailure>) {
        let api: Api<CustomResourceDefinition> = Api::all(self.applier.client.clone());
        let waits: Vec<_> = positions
            .iter()
            .map(|&pos| {
                let api = api.clone();
                async move {
                    let name = &self.resolved.targets[pos].object.name;
                    let established = wait::until(self.deadline, || async {
                        match api.get(name).await {
                            Ok(crd) if wait::crd_established(&crd) => Ok(Ok(())),
                            Ok(_) => Ok(Err(format!("CRD {name} not Established yet"))),
                            Err(e) if retry::is_transient(&e) => Ok(Err(retry::message(&e))),
                            Err(e) => Err(retry::message(&e)),
                        }
                    })
                    .await;
                    if let Err(why) = established {
                        return (pos, Err(format!("not Established {}", self.waited(&why))));
                    }
                    for (group, version, kind) in discovery::crd_kinds(&self.resolved.objects[pos]) {
                        let gvk = GroupVersionKind::gvk(&group, &version, &kind);
                        let served = wait::until(self.deadline, || async {
                            match kube::discovery::pinned_kind(&self.applier.client, &gvk).await {
                                Ok(_) => Ok(Ok(())),
                                Err(e) => Ok(Err(e.to_string())),
                            }
                        })
                        .await;
                        if let Err(why) = served {
                            return (
                                pos,
                                Err(format!(
                                    "Established, but {group}/{version} {kind} is not served by discovery {}",
                                    self.waited(&why)
                                )),
                            );
                        }
                    }
                    (pos, Ok(()))
                }
            })
            .collect();
        let results: Vec<(usize, Result<(), String>)> = stream::iter(waits)
            .buffer_unordered(self.applier.options.concurrency.max(1))
            .collect()
            .await;
        for (pos, r) in results {
            if let Err(reason) = r {
                failures.push(self.failure(pos, reason));
            }
        }
    }

    /// Waits until a gate's Deployments are Available and its Services have
    /// a ready endpoint.
    /// How a wait that did not succeed ended: its deadline, or the interrupt
    /// ([`wait::STOPPED`]), which is not a deadline.
    fn waited(&self, why: &str) -> String {
        if why.starts_with(wait::STOPPED) {
            format!("yet: {why}")
        } else {
            format!("after {}s: {why}", self.applier.options.timeout.as_secs())
        }
    }

    async fn wait_gate(&self, gate: &Gate) -> Result<(), String> {
        let client = &self.applier.client;
        wait::until(self.deadline, || async {
            let mut missing = Vec::new();
            for d in &gate.deployments {
                let ns = d.namespace.as_deref().unwrap_or("default");
                let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
                match api.get_opt(&d.name).await {
                    Ok(Some(dep)) if wait::deployment_available(&dep) => {}
                    Ok(Some(dep))
                        if dep
                            .status
                            .as_ref()
                            .is_none_or(|s| s.observed_generation.is_none()) =>
                    {
                        missing.push(format!(
                            "{d} is not Available (its status has no observedGeneration: the \
                             deployment controller has not seen it yet)"
                        ))
                    }
                    Ok(Some(_)) => missing.push(format!("{d} is not Available")),
                    Ok(None) => missing.push(format!("{d} does not exist")),
                    Err(e) => missing.push(format!("reading {d}: {}", retry::message(&e))),
                }
            }
            for s in &gate.services {
                let ns = s.namespace.as_deref().unwrap_or("default");
                let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
                let lp =
                    ListParams::default().labels(&format!("kubernetes.io/service-name={}", s.name));
                match api.list(&lp).await {
                    Ok(list) if wait::has_ready_endpoint(&list.items) => {}
                    Ok(_) => missing.push(format!("{s} has no ready endpoint (EndpointSlices)")),
                    Err(e) => missing.push(format!(
                        "listing the EndpointSlices of {s}: {}",
                        retry::message(&e)
                    )),
                }
            }
            Ok(if missing.is_empty() {
                Ok(())
            } else {
                Err(missing.join("; "))
            })
        })
        .await
    }
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_string_data_becomes_base64_data_overriding_the_same_key() {
        let mut o = json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"user": "YWRtaW4=", "password": "b2xk"},
            "stringData": {"password": "new"},
        });
        secret_string_data_to_data(&mut o);
        assert_eq!(o["data"], json!({"user": "YWRtaW4=", "password": "bmV3"}));
        assert!(o.get("stringData").is_none());
        // Not a core Secret: left as written.
        let mut other =
            json!({"apiVersion": "x.test/v1", "kind": "Secret", "stringData": {"a": "b"}});
        let before = other.clone();
        secret_string_data_to_data(&mut other);
        assert_eq!(other, before);
    }
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

    fn entry(manager: &str, op: &str, secs: i64, sub: Option<&str>) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(op.into()),
            time: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(secs).unwrap(),
            )),
            subresource: sub.map(str::to_string),
            ..Default::default()
        }
    }

    fn meta(hash: &str, entries: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            annotations: Some([(MANIFEST_HASH.to_string(), hash.to_string())].into()),
            managed_fields: Some(entries),
            ..Default::default()
        }
    }

    #[test]
    fn applied_by_needs_an_apply_entry_of_the_manager_on_the_main_resource() {
        let applied = |entries| applied_by(&meta("h", entries), "kfaws");
        assert!(applied(vec![
            entry("kubectl-label", "Update", 200, None),
            entry("kfaws", "Apply", 100, None),
        ]));
        assert!(!applied(vec![entry("kfaws", "Update", 100, None)]));
        assert!(!applied(vec![entry("kfaws", "Apply", 100, Some("status"))]));
        assert!(!applied(vec![entry("helm", "Apply", 100, None)]));
        assert!(!applied(vec![]));
    }

    #[test]
    fn unchanged_needs_the_same_hash_our_apply_and_no_later_writer() {
        let ours = entry("kfaws", "Apply", 100, None);
        assert!(unchanged(&meta("h", vec![ours.clone()]), "h", "kfaws"));
        assert!(
            !unchanged(&meta("h", vec![ours.clone()]), "other", "kfaws"),
            "manifest changed"
        );
        assert!(
            !unchanged(&meta("h", vec![]), "h", "kfaws"),
            "no apply by kfaws"
        );
        assert!(
            !unchanged(
                &meta(
                    "h",
                    vec![ours.clone(), entry("kubectl-edit", "Update", 150, None)]
                ),
                "h",
                "kfaws"
            ),
            "edited after our apply"
        );
        assert!(
            !unchanged(
                &meta(
                    "h",
                    vec![ours.clone(), entry("kubectl-edit", "Update", 100, None)]
                ),
                "h",
                "kfaws"
            ),
            "edited in the same second: cannot tell, apply"
        );
        assert!(
            unchanged(
                &meta(
                    "h",
                    vec![entry("creator", "Update", 50, None), ours.clone()]
                ),
                "h",
                "kfaws"
            ),
            "written before our apply"
        );
        assert!(
            unchanged(
                &meta(
                    "h",
                    vec![
                        ours.clone(),
                        entry("controller", "Update", 200, Some("status"))
                    ]
                ),
                "h",
                "kfaws"
            ),
            "status writes are not drift of what we apply"
        );
        let mut deleting = meta("h", vec![ours]);
        deleting.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(!unchanged(&deleting, "h", "kfaws"));
    }
}
