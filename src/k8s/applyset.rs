//! ApplySet inventory ([KEP-3659](https://github.com/kubernetes/enhancements/tree/master/keps/sig-cli/3659-kubectl-apply-prune),
//! [well-known labels](https://kubernetes.io/docs/reference/labels-annotations-taints/#applyset-kubernetes-io-part-of)):
//! how kfaws knows exactly which objects a bundle created, for prune and destroy.
//!
//! Each bundle has a parent object, a ConfigMap named after the bundle in
//! the inventory namespace kfaws owns (`kfaws-system` by default). It carries
//! - label `applyset.kubernetes.io/id: applyset-<base64url(sha256(<name>.<namespace>.<kind>.<group>))>-v1`
//!   (unpadded URL-safe base64, as the KEP specifies; the core group is empty);
//! - annotation `applyset.kubernetes.io/tooling: kfaws/v<version>`;
//! - annotation `applyset.kubernetes.io/contains-group-kinds`: the sorted,
//!   comma-separated `Kind.group` of every member;
//! - annotation `applyset.kubernetes.io/additional-namespaces`: the sorted,
//!   comma-separated namespaces of members other than the parent's own.
//!
//! Every member carries label `applyset.kubernetes.io/part-of: <id>`. A
//! ConfigMap rather than a Secret: the inventory holds no secret, and reading
//! it then needs no permission on Secrets.

use std::collections::BTreeSet;

use base64::Engine as _;
use futures::stream::{self, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::Client;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::discovery::Served;
use super::object::{GroupKind, ObjectRef};

/// Label on every member: the id of its ApplySet.
pub const PART_OF: &str = "applyset.kubernetes.io/part-of";
/// Label on the parent: its ApplySet id.
pub const ID: &str = "applyset.kubernetes.io/id";
/// Annotation on the parent: the tool managing the set, `<tool>/<semver>`.
pub const TOOLING: &str = "applyset.kubernetes.io/tooling";
/// Annotation on the parent: the group-kinds of the members.
pub const CONTAINS_GROUP_KINDS: &str = "applyset.kubernetes.io/contains-group-kinds";
/// Annotation on the parent: member namespaces other than the parent's.
pub const ADDITIONAL_NAMESPACES: &str = "applyset.kubernetes.io/additional-namespaces";

/// `kfaws/v<crate version>`, the value of [`TOOLING`].
pub fn tooling() -> String {
    format!("kfaws/v{}", env!("CARGO_PKG_VERSION"))
}

/// The ApplySet id of a parent object, as KEP-3659 defines it:
/// `applyset-` + unpadded base64url of sha256(`<name>.<namespace>.<kind>.<group>`) + `-v1`.
pub fn applyset_id(name: &str, namespace: &str, kind: &str, group: &str) -> String {
    let digest = Sha256::digest(format!("{name}.{namespace}.{kind}.{group}").as_bytes());
    format!(
        "applyset-{}-v1",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
    )
}

/// The kinds and namespaces an ApplySet's members use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Group-kinds of the members.
    pub group_kinds: BTreeSet<GroupKind>,
    /// Namespaces of the namespaced members (all of them, including the parent's).
    pub namespaces: BTreeSet<String>,
}

impl Inventory {
    /// The inventory of a set of objects.
    pub fn of<'a>(objects: impl IntoIterator<Item = &'a ObjectRef>) -> Self {
        let mut inv = Self::default();
        for o in objects {
            inv.group_kinds.insert(o.gk.clone());
            if let Some(ns) = &o.namespace {
                inv.namespaces.insert(ns.clone());
            }
        }
        inv
    }

    /// Both inventories together.
    pub fn union(&self, other: &Self) -> Self {
        Self {
            group_kinds: self
                .group_kinds
                .union(&other.group_kinds)
                .cloned()
                .collect(),
            namespaces: self.namespaces.union(&other.namespaces).cloned().collect(),
        }
    }
}

/// The parent of a bundle's ApplySet is not one kfaws may use.
#[derive(Debug, thiserror::Error)]
#[error(
    "ConfigMap {namespace}/{name} is not the ApplySet parent kfaws expects: {problem}; \
         remove it or choose another bundle name"
)]
pub struct ForeignParent {
    /// The parent's namespace.
    pub namespace: String,
    /// The parent's name.
    pub name: String,
    /// What is wrong.
    pub problem: String,
}

/// Errors reading or writing the inventory.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// The parent belongs to something else.
    #[error(transparent)]
    Foreign(#[from] ForeignParent),
    /// An API call failed.
    #[error("{what}: {}", super::retry::message(error))]
    Api {
        /// What was being done.
        what: String,
        /// The error, told in the message (not as a `source`: kube's
        /// `Status` would follow in the error chain as a debug dump).
        error: kube::Error,
    },
}

/// A bundle's ApplySet: its parent ConfigMap and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplySet {
    /// The parent's name (the bundle's name).
    pub name: String,
    /// The parent's namespace.
    pub namespace: String,
    /// The id, see [`applyset_id`].
    pub id: String,
}

impl ApplySet {
    /// The ApplySet of bundle `name`, its parent a ConfigMap in `namespace`.
    pub fn new(name: &str, namespace: &str) -> Self {
        Self {
            name: name.to_string(),
            namespace: namespace.to_string(),
            id: applyset_id(name, namespace, "ConfigMap", ""),
        }
    }

    /// The label selector matching the members.
    pub fn selector(&self) -> String {
        format!("{PART_OF}={}", self.id)
    }

    /// The parent object recording `inventory`, as applied.
    pub fn parent(&self, inventory: &Inventory) -> Value {
        let mut gks: Vec<String> = inventory
            .group_kinds
            .iter()
            .map(ToString::to_string)
            .collect();
        gks.sort();
        let namespaces: Vec<&str> = inventory
            .namespaces
            .iter()
            .map(String::as_str)
            .filter(|ns| *ns != self.namespace)
            .collect();
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": { ID: self.id },
                "annotations": {
                    TOOLING: tooling(),
                    CONTAINS_GROUP_KINDS: gks.join(","),
                    ADDITIONAL_NAMESPACES: namespaces.join(","),
                },
            },
        })
    }

    /// Every ApplySet kfaws made with its parent in `namespace`: the ConfigMaps
    /// there whose [`ID`] label is the id of their own name and whose [`TOOLING`]
    /// is kfaws (one List call, selected by the label's presence), sorted by name.
    ///
    /// # Errors
    /// [`InventoryError::Api`] when the List call fails (a namespace that does
    /// not exist lists nothing).
    pub async fn list_in(client: &Client, namespace: &str) -> Result<Vec<Self>, InventoryError> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let listed = api
            .list_metadata(&ListParams::default().labels(ID))
            .await
            .map_err(|error| InventoryError::Api {
                what: format!("listing ApplySet parent ConfigMaps in namespace {namespace}"),
                error,
            })?;
        let mut sets: Vec<Self> = listed
            .items
            .iter()
            .filter_map(|cm| {
                let set = Self::new(cm.metadata.name.as_deref()?, namespace);
                set.inventory_of(&cm.metadata).ok().map(|_| set)
            })
            .collect();
        sets.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(sets)
    }

    /// Reads the recorded inventory; `None` when there is no parent.
    ///
    /// # Errors
    /// [`InventoryError::Foreign`] when a ConfigMap of that name exists with
    /// another ApplySet id or tooling; [`InventoryError::Api`] on API errors.
    pub async fn read(&self, client: &Client) -> Result<Option<Inventory>, InventoryError> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &self.namespace);
        let Some(cm) = api
            .get_opt(&self.name)
            .await
            .map_err(|error| InventoryError::Api {
                what: format!(
                    "reading ApplySet parent ConfigMap {}/{}",
                    self.namespace, self.name
                ),
                error,
            })?
        else {
            return Ok(None);
        };
        self.inventory_of(&cm.metadata).map(Some)
    }

    fn inventory_of(&self, meta: &ObjectMeta) -> Result<Inventory, InventoryError> {
        let foreign = |problem: String| ForeignParent {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            problem,
        };
        let id = meta.labels.as_ref().and_then(|l| l.get(ID));
        if id != Some(&self.id) {
            return Err(
                foreign(format!("its label {ID} is {id:?}, expected {:?}", self.id)).into(),
            );
        }
        let annotations = meta.annotations.clone().unwrap_or_default();
        let tool = annotations.get(TOOLING).map(String::as_str).unwrap_or("");
        if !tool.starts_with("kfaws/") {
            return Err(foreign(format!("it is managed by {tool:?} ({TOOLING})")).into());
        }
        let split = |key: &str| -> Vec<String> {
            annotations
                .get(key)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut namespaces: BTreeSet<String> = split(ADDITIONAL_NAMESPACES).into_iter().collect();
        namespaces.insert(self.namespace.clone());
        Ok(Inventory {
            group_kinds: split(CONTAINS_GROUP_KINDS)
                .iter()
                .filter_map(|s| GroupKind::parse(s))
                .collect(),
            namespaces,
        })
    }

    /// Server-side applies the parent recording `inventory`.
    ///
    /// # Errors
    /// [`InventoryError::Api`] when the apply fails.
    pub async fn write(
        &self,
        client: &Client,
        inventory: &Inventory,
        field_manager: &str,
    ) -> Result<(), InventoryError> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &self.namespace);
        api.patch(
            &self.name,
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(self.parent(inventory)),
        )
        .await
        .map_err(|error| InventoryError::Api {
            what: format!(
                "writing ApplySet parent ConfigMap {}/{}",
                self.namespace, self.name
            ),
            error,
        })?;
        Ok(())
    }

    /// Deletes the parent; already gone is success.
    ///
    /// # Errors
    /// [`InventoryError::Api`] when the delete fails.
    pub async fn delete(&self, client: &Client) -> Result<(), InventoryError> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &self.namespace);
        match api.delete(&self.name, &Default::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(error) => Err(InventoryError::Api {
                what: format!(
                    "deleting ApplySet parent ConfigMap {}/{}",
                    self.namespace, self.name
                ),
                error,
            }),
        }
    }

    /// Lists the live members: every object of the inventory's group-kinds
    /// carrying this set's [`PART_OF`] label, in any namespace (one list call
    /// per group-kind, metadata only). Group-kinds the cluster no longer
    /// serves (their CRD is gone, and with it their objects) are skipped.
    ///
    /// # Errors
    /// [`InventoryError::Api`] when a list fails.
    pub async fn members(
        &self,
        client: &Client,
        served: &Served,
        inventory: &Inventory,
        concurrency: usize,
    ) -> Result<Vec<Member>, InventoryError> {
        let selector = self.selector();
        let lists = inventory.group_kinds.iter().filter_map(|gk| {
            let (ar, namespaced) = served.preferred(gk)?.clone();
            let client = client.clone();
            let selector = selector.clone();
            let gk = gk.clone();
            Some(async move {
                let api: Api<DynamicObject> = Api::all_with(client, &ar);
                let list = api
                    .list_metadata(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|error| InventoryError::Api {
                        what: format!("listing {gk} objects labelled {selector}"),
                        error,
                    })?;
                Ok::<_, InventoryError>(
                    list.items
                        .into_iter()
                        .map(|o| Member {
                            object: ObjectRef {
                                gk: gk.clone(),
                                namespace: if namespaced {
                                    o.metadata.namespace.clone()
                                } else {
                                    None
                                },
                                name: o.metadata.name.clone().unwrap_or_default(),
                            },
                            resource: ar.clone(),
                            meta: o.metadata,
                        })
                        .collect::<Vec<_>>(),
                )
            })
        });
        // Collected first: a stream over the closure itself would make the
        // future's `Send` unprovable inside `#[async_trait]` methods
        // (rust-lang/rust#102211).
        let lists: Vec<_> = lists.collect();
        let nested: Vec<Vec<Member>> = stream::iter(lists)
            .buffer_unordered(concurrency.max(1))
            .try_collect()
            .await?;
        Ok(nested.into_iter().flatten().collect())
    }
}

/// A live member of an ApplySet.
#[derive(Debug, Clone)]
pub struct Member {
    /// Its key.
    pub object: ObjectRef,
    /// The resource it was listed through (its group-kind's preferred version).
    pub resource: ApiResource,
    /// Its metadata (labels, annotations, finalizers, managedFields, uid).
    pub meta: ObjectMeta,
}

/// Sets the [`PART_OF`] label on an object (a JSON object with `metadata`).
pub fn label(object: &mut Value, id: &str) {
    let metadata = object
        .as_object_mut()
        .map(|o| o.entry("metadata").or_insert_with(|| json!({})));
    if let Some(Value::Object(meta)) = metadata {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if !labels.is_object() {
            *labels = json!({});
        }
        labels[PART_OF] = json!(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_follows_the_kep_formula() {
        // sha256("kubeflow.kfaws-system.ConfigMap.") in unpadded base64url, computed independently:
        // printf 'kubeflow.kfaws-system.ConfigMap.' | openssl dgst -sha256 -binary | basenc --base64url | tr -d =
        let id = applyset_id("kubeflow", "kfaws-system", "ConfigMap", "");
        assert_eq!(
            id,
            "applyset-Tmw1L7O6t5iq-McYCg_-QkRRfXA01mnbJy9FDwIYvr4-v1"
        );
        assert_eq!(ApplySet::new("kubeflow", "kfaws-system").id, id);
        assert_ne!(applyset_id("kubeflow", "other", "ConfigMap", ""), id);
    }

    #[test]
    fn parent_records_group_kinds_and_other_namespaces_sorted() {
        let set = ApplySet::new("b", "kfaws-system");
        let objects = [
            ObjectRef {
                gk: GroupKind::new("apps", "Deployment"),
                namespace: Some("zeta".into()),
                name: "d".into(),
            },
            ObjectRef {
                gk: GroupKind::new("", "Namespace"),
                namespace: None,
                name: "zeta".into(),
            },
            ObjectRef {
                gk: GroupKind::new("", "ConfigMap"),
                namespace: Some("alpha".into()),
                name: "c".into(),
            },
            ObjectRef {
                gk: GroupKind::new("", "ConfigMap"),
                namespace: Some("kfaws-system".into()),
                name: "c".into(),
            },
        ];
        let parent = set.parent(&Inventory::of(&objects));
        let a = &parent["metadata"]["annotations"];
        assert_eq!(
            a[CONTAINS_GROUP_KINDS],
            "ConfigMap,Deployment.apps,Namespace"
        );
        assert_eq!(a[ADDITIONAL_NAMESPACES], "alpha,zeta");
        assert_eq!(a[TOOLING], tooling());
        assert_eq!(parent["metadata"]["labels"][ID], set.id.as_str());
    }

    #[test]
    fn inventory_reads_back_what_the_parent_records() {
        let set = ApplySet::new("b", "kfaws-system");
        let inv = Inventory {
            group_kinds: [
                GroupKind::new("apps", "Deployment"),
                GroupKind::new("", "Namespace"),
            ]
            .into(),
            namespaces: ["kfaws-system".to_string(), "x".to_string()].into(),
        };
        let meta: ObjectMeta =
            serde_json::from_value(set.parent(&inv)["metadata"].clone()).unwrap();
        assert_eq!(set.inventory_of(&meta).unwrap(), inv);
        let other = ApplySet::new("other", "kfaws-system");
        assert!(other
            .inventory_of(&meta)
            .unwrap_err()
            .to_string()
            .contains("expected"));
    }

    #[test]
    fn label_adds_part_of_and_keeps_other_labels() {
        let mut o = json!({"metadata": {"name": "a", "labels": {"app": "x"}}});
        label(&mut o, "applyset-abc-v1");
        assert_eq!(o["metadata"]["labels"]["app"], "x");
        assert_eq!(o["metadata"]["labels"][PART_OF], "applyset-abc-v1");
    }
}
