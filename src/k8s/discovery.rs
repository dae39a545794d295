//! What the cluster serves, and the plan-time check that every object of a
//! bundle uses a served API.
//!
//! An object's `apiVersion`/`kind` must be served by the API server
//! ([API discovery](https://kubernetes.io/docs/concepts/overview/kubernetes-api/#discovery-api)),
//! or be defined by a CustomResourceDefinition in the same bundle (which is
//! applied first). A removed API version (case C10: `autoscaling/v2beta2`
//! HorizontalPodAutoscaler, removed in Kubernetes 1.26 per the
//! [deprecation guide](https://kubernetes.io/docs/reference/using-api/deprecation-guide/))
//! is an error before anything is applied, naming the object and the
//! versions the cluster serves for that kind.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use kube::core::ApiResource;
use kube::discovery::{Discovery, Scope};
use kube::Client;
use serde_json::Value;

use super::bundle::{Bundle, Manifest, Origin};
use super::object::{GroupKind, ObjectRef};

/// The kinds the cluster serves, indexed by group, version and kind.
#[derive(Debug, Clone, Default)]
pub struct Served {
    by_gvk: HashMap<(String, String, String), (ApiResource, bool)>,
    /// Served API versions per group and kind, the group's preferred version first.
    versions: BTreeMap<GroupKind, Vec<String>>,
    /// Resources that support `list`, at their group's preferred version.
    listable: Vec<(ApiResource, bool)>,
}

impl Served {
    /// Runs discovery: the aggregated discovery API (2 requests, Kubernetes
    /// ≥ 1.30 GA), falling back to one request per group on older servers.
    ///
    /// # Errors
    /// The client's error when the server cannot be reached or answers neither.
    pub async fn fetch(client: &Client) -> Result<Self, kube::Error> {
        let discovery = match Discovery::new(client.clone()).run_aggregated().await {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!("aggregated discovery failed ({e}); querying each group");
                Discovery::new(client.clone()).run().await?
            }
        };
        let mut served = Self::default();
        for group in discovery.groups() {
            let preferred = group.preferred_version_or_latest().to_string();
            for (ar, caps) in group.recommended_resources() {
                if caps.supports_operation(kube::discovery::verbs::LIST) {
                    served.listable.push((ar, caps.scope == Scope::Namespaced));
                }
            }
            let mut versions: Vec<String> = group.versions().map(str::to_string).collect();
            versions.sort_by_key(|v| *v != preferred);
            for version in &versions {
                for (ar, caps) in group.versioned_resources(version) {
                    served.insert(ar, caps.scope == Scope::Namespaced);
                }
            }
        }
        Ok(served)
    }

    /// Records a served kind (discovery results, and tests).
    pub fn insert(&mut self, ar: ApiResource, namespaced: bool) {
        let gk = GroupKind::new(&ar.group, &ar.kind);
        let list = self.versions.entry(gk).or_default();
        if !list.contains(&ar.api_version) {
            list.push(ar.api_version.clone());
        }
        self.by_gvk.insert(
            (ar.group.clone(), ar.version.clone(), ar.kind.clone()),
            (ar, namespaced),
        );
    }

    /// The resource serving `group`/`version` `kind`, and whether it is namespaced.
    pub fn get(&self, group: &str, version: &str, kind: &str) -> Option<&(ApiResource, bool)> {
        self.by_gvk
            .get(&(group.to_string(), version.to_string(), kind.to_string()))
    }

    /// The API versions serving a group and kind, the preferred one first.
    pub fn versions_of(&self, gk: &GroupKind) -> &[String] {
        self.versions.get(gk).map(Vec::as_slice).unwrap_or_default()
    }

    /// Every served resource that supports `list`, at its group's preferred
    /// version, and whether it is namespaced.
    pub fn listable(&self) -> &[(ApiResource, bool)] {
        &self.listable
    }

    /// The resource serving a group and kind at its preferred version.
    pub fn preferred(&self, gk: &GroupKind) -> Option<&(ApiResource, bool)> {
        let api_version = self.versions_of(gk).first()?;
        let version = api_version.rsplit('/').next().unwrap_or(api_version);
        self.get(&gk.group, version, &gk.kind)
    }
}

/// A bundle object resolved against the cluster: the resource to send it to.
#[derive(Debug, Clone)]
pub struct Target {
    /// Index of the object in [`Bundle::objects`].
    pub index: usize,
    /// Group, version, kind and plural resource name.
    pub resource: ApiResource,
    /// The object's key, with its namespace resolved: `default` for a
    /// namespaced object written without one (as kubectl does with the
    /// default context), none for a cluster-scoped object.
    pub object: ObjectRef,
    /// The kind is defined by a CRD of this bundle and not served yet.
    pub from_bundle_crd: bool,
}

/// One object whose API is not served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnservedObject {
    /// `Kind namespace/name` as written.
    pub object: String,
    /// Where it was written.
    pub origin: Origin,
    /// Its `apiVersion`.
    pub api_version: String,
    /// Its `kind`.
    pub kind: String,
    /// The API versions the cluster serves for the same group and kind,
    /// preferred first; empty when the kind is not served at all.
    pub served_as: Vec<String>,
}

impl fmt::Display for UnservedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (o, av, k) = (&self.object, &self.api_version, &self.kind);
        match self.served_as.first() {
            Some(replacement) => write!(
                f,
                "{o} ({}): {av} {k} is not served by this cluster (the API version was removed or is \
                 not enabled); the cluster serves {k} as {} -- change apiVersion to {replacement} \
                 (see https://kubernetes.io/docs/reference/using-api/deprecation-guide/)",
                self.origin,
                self.served_as.join(", ")
            ),
            None => {
                let group = av.split_once('/').map(|(g, _)| g).unwrap_or("");
                let component = match provider(group, k) {
                    Some(c) => c.to_string(),
                    None => format!("the component that provides {k} (its CRD)"),
                };
                write!(
                    f,
                    "{o} ({}): the kind {av} {k} is not served by this cluster and no \
                     CustomResourceDefinition in this bundle defines it -- install {component} first",
                    self.origin
                )
            }
        }
    }
}

/// The component that serves a well-known custom kind of the Kubeflow
/// ecosystem, as users know it (case C9), with how kfaws installs it.
pub fn provider(group: &str, kind: &str) -> Option<&'static str> {
    Some(match (group, kind) {
        (
            "kubeflow.org",
            "PyTorchJob" | "TFJob" | "MPIJob" | "XGBoostJob" | "PaddleJob" | "JAXJob",
        ) => {
            "the Kubeflow training operator (kfaws: set kubeflow.training_operator in kfaws.toml; \
             it is applied as k8s.training-operator, after k8s.kubeflow, so jobs belong in neither \
             bundle: submit them with `kfaws train` or kubectl once it is applied)"
        }
        ("trainer.kubeflow.org", _) => "the Kubeflow Trainer (v2) from your Kubeflow release",
        ("kubeflow.org", "Notebook") => "the Kubeflow notebook controller (kubeflow.manifests)",
        ("kubeflow.org", "Profile") => "the Kubeflow profile controller (kubeflow.manifests)",
        ("kubeflow.org", "Experiment" | "Suggestion" | "Trial") => {
            "Katib from your Kubeflow release (kubeflow.manifests)"
        }
        ("serving.kserve.io", _) => "KServe from your Kubeflow release (kubeflow.manifests)",
        ("argoproj.io", _) => "Argo Workflows, part of Kubeflow Pipelines (kubeflow.manifests)",
        _ => return None,
    })
}

/// Objects whose API the cluster does not serve; nothing was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} object(s) of bundle {bundle:?} use an API this cluster does not serve; nothing was applied:\n  {}", .objects.len(), .objects.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
pub struct Unserved {
    /// The bundle.
    pub bundle: String,
    /// Every such object, in bundle order.
    pub objects: Vec<UnservedObject>,
}

/// Two documents of a bundle that name the same object once their namespace
/// is resolved: a namespaced object written without `metadata.namespace`
/// goes to `default`, so it is the same object as one written with
/// `namespace: default` (the parse-time check compares namespaces as
/// written). Applying both would make each apply overwrite the other.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bundle {bundle:?}: {object} is written twice, at {first} and at {second} (a namespaced object \
     without metadata.namespace goes to \"default\"); keep one of them"
)]
pub struct SameObject {
    /// The bundle.
    pub bundle: String,
    /// `Kind namespace/name`, the namespace resolved.
    pub object: String,
    /// Where the first document is.
    pub first: Origin,
    /// Where the second is.
    pub second: Origin,
}

/// Refuses two `targets` of `bundle` with the same resolved [`ObjectRef`].
///
/// # Errors
/// [`SameObject`] for the first such pair, in bundle order (boxed: it
/// carries two origins).
pub fn distinct(bundle: &Bundle, targets: &[Target]) -> Result<(), Box<SameObject>> {
    let mut seen: BTreeMap<&ObjectRef, usize> = BTreeMap::new();
    for t in targets {
        if let Some(&first) = seen.get(&t.object) {
            let m = &bundle.objects[t.index];
            let object = match &t.object.namespace {
                Some(ns) => format!("{} {ns}/{}", m.kind, m.name),
                None => format!("{} {}", m.kind, m.name),
            };
            return Err(Box::new(SameObject {
                bundle: bundle.name.clone(),
                object,
                first: bundle.objects[first].origin.clone(),
                second: m.origin.clone(),
            }));
        }
        seen.insert(&t.object, t.index);
    }
    Ok(())
}

/// A kind defined by a CRD of the bundle.
#[derive(Debug, Clone)]
struct BundleKind {
    resource_plural: String,
    namespaced: bool,
    served_versions: Vec<String>,
}

/// Kinds defined by the bundle's CRDs, by group and kind.
fn bundle_kinds(bundle: &Bundle) -> BTreeMap<GroupKind, BundleKind> {
    let mut out = BTreeMap::new();
    for m in &bundle.objects {
        if !is_crd(m) {
            continue;
        }
        let spec = &m.object["spec"];
        let (Some(group), Some(kind), Some(plural)) = (
            spec["group"].as_str(),
            spec["names"]["kind"].as_str(),
            spec["names"]["plural"].as_str(),
        ) else {
            // The API server validates CRDs; an incomplete one fails there.
            continue;
        };
        let served_versions = spec["versions"]
            .as_array()
            .map(|vs| {
                vs.iter()
                    .filter(|v| v["served"].as_bool().unwrap_or(false))
                    .filter_map(|v| v["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        out.insert(
            GroupKind::new(group, kind),
            BundleKind {
                resource_plural: plural.to_string(),
                namespaced: spec["scope"].as_str() != Some("Cluster"),
                served_versions,
            },
        );
    }
    out
}

/// Whether a manifest is a CustomResourceDefinition.
pub fn is_crd(m: &Manifest) -> bool {
    m.group() == "apiextensions.k8s.io" && m.kind == "CustomResourceDefinition"
}

/// Resolves every object of `bundle` against `served` (plan time: no call).
///
/// # Errors
/// [`Unserved`] listing every object whose group/version/kind is neither
/// served nor defined by a CRD of the bundle.
pub fn resolve(bundle: &Bundle, served: &Served) -> Result<Vec<Target>, Unserved> {
    let from_crds = bundle_kinds(bundle);
    let mut targets = Vec::with_capacity(bundle.objects.len());
    let mut unserved = Vec::new();
    for (index, m) in bundle.objects.iter().enumerate() {
        let gk = GroupKind::new(m.group(), &m.kind);
        let (resource, namespaced, from_bundle_crd) =
            if let Some((ar, namespaced)) = served.get(m.group(), m.version(), &m.kind) {
                (ar.clone(), *namespaced, false)
            } else if let Some(bk) = from_crds
                .get(&gk)
                .filter(|bk| bk.served_versions.iter().any(|v| v == m.version()))
            {
                let ar = ApiResource {
                    group: m.group().to_string(),
                    version: m.version().to_string(),
                    api_version: m.api_version.clone(),
                    kind: m.kind.clone(),
                    plural: bk.resource_plural.clone(),
                };
                (ar, bk.namespaced, true)
            } else {
                let mut served_as = served.versions_of(&gk).to_vec();
                if let Some(bk) = from_crds.get(&gk) {
                    for v in &bk.served_versions {
                        let av = format!("{}/{v}", gk.group);
                        if !served_as.contains(&av) {
                            served_as.push(av);
                        }
                    }
                }
                unserved.push(UnservedObject {
                    object: m.describe(),
                    origin: m.origin.clone(),
                    api_version: m.api_version.clone(),
                    kind: m.kind.clone(),
                    served_as,
                });
                continue;
            };
        let namespace = namespaced.then(|| m.namespace.clone().unwrap_or_else(|| "default".into()));
        targets.push(Target {
            index,
            resource,
            object: ObjectRef {
                gk,
                namespace,
                name: m.name.clone(),
            },
            from_bundle_crd,
        });
    }
    if unserved.is_empty() {
        Ok(targets)
    } else {
        Err(Unserved {
            bundle: bundle.name.clone(),
            objects: unserved,
        })
    }
}

/// The group, version and kind of every served version a bundle CRD defines,
/// for the wait until discovery serves them.
pub fn crd_kinds(crd: &Value) -> Vec<(String, String, String)> {
    let spec = &crd["spec"];
    let (Some(group), Some(kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str()) else {
        return Vec::new();
    };
    spec["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| v["served"].as_bool().unwrap_or(false))
                .filter_map(|v| v["name"].as_str())
                .map(|v| (group.to_string(), v.to_string(), kind.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: if group.is_empty() {
                version.into()
            } else {
                format!("{group}/{version}")
            },
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    fn served() -> Served {
        let mut s = Served::default();
        s.insert(
            ar(
                "autoscaling",
                "v2",
                "HorizontalPodAutoscaler",
                "horizontalpodautoscalers",
            ),
            true,
        );
        s.insert(
            ar(
                "autoscaling",
                "v1",
                "HorizontalPodAutoscaler",
                "horizontalpodautoscalers",
            ),
            true,
        );
        s.insert(ar("", "v1", "ConfigMap", "configmaps"), true);
        s.insert(ar("", "v1", "Namespace", "namespaces"), false);
        s.insert(
            ar(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
            ),
            false,
        );
        s
    }

    fn bundle(text: &str) -> Bundle {
        Bundle::from_sources("t", [(PathBuf::from("t.yaml"), text.to_string())]).unwrap()
    }

    #[test]
    fn removed_version_names_the_object_and_the_served_replacement() {
        let b = bundle(
            "apiVersion: autoscaling/v2beta2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: web\n  namespace: shop\n",
        );
        let err = resolve(&b, &served()).unwrap_err();
        assert_eq!(err.objects.len(), 1);
        assert_eq!(
            err.objects[0].served_as,
            ["autoscaling/v2", "autoscaling/v1"]
        );
        let msg = err.to_string();
        assert!(msg.contains("HorizontalPodAutoscaler shop/web"), "{msg}");
        assert!(msg.contains("change apiVersion to autoscaling/v2"), "{msg}");
        assert!(msg.contains("nothing was applied"), "{msg}");
    }

    #[test]
    fn unknown_kind_says_to_install_its_crd() {
        let b = bundle("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: j\n  namespace: ns\n");
        let msg = resolve(&b, &served()).unwrap_err().to_string();
        assert!(
            msg.contains("the kind kubeflow.org/v1 PyTorchJob is not served"),
            "{msg}"
        );
        assert!(
            msg.contains(
                "install the Kubeflow training operator (kfaws: set kubeflow.training_operator"
            ),
            "{msg}"
        );
        let b = bundle("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n");
        let msg = resolve(&b, &served()).unwrap_err().to_string();
        assert!(
            msg.contains("install the component that provides Widget (its CRD) first"),
            "{msg}"
        );
    }

    #[test]
    fn kinds_from_a_bundle_crd_resolve_with_its_plural_and_scope() {
        let b = bundle(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.x.test\n\
             spec:\n  group: x.test\n  scope: Namespaced\n  names: {kind: Widget, plural: widgets}\n\
             \x20 versions:\n  - {name: v1, served: true, storage: true}\n  - {name: v0, served: false, storage: false}\n\
             ---\napiVersion: x.test/v1\nkind: Widget\nmetadata:\n  name: w\n\
             ---\napiVersion: x.test/v0\nkind: Widget\nmetadata:\n  name: old\n",
        );
        let err = resolve(&b, &served()).unwrap_err();
        assert_eq!(err.objects.len(), 1, "only the unserved v0 object fails");
        assert_eq!(err.objects[0].served_as, ["x.test/v1"]);
        let b = Bundle {
            objects: b.objects[..2].to_vec(),
            ..b
        };
        let targets = resolve(&b, &served()).unwrap();
        assert!(targets[1].from_bundle_crd);
        assert_eq!(targets[1].resource.plural, "widgets");
        assert_eq!(targets[1].object.to_string(), "Widget default/w");
        assert_eq!(targets[0].object.namespace, None);
    }

    #[test]
    fn cluster_scoped_objects_lose_a_written_namespace() {
        let b =
            bundle("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  namespace: ignored\n");
        let t = resolve(&b, &served()).unwrap();
        assert_eq!(t[0].object.namespace, None);
    }

    #[test]
    fn an_object_without_namespace_and_the_same_in_default_are_one_object() {
        let b = bundle(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns-a\n\
             ---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns-a\n  namespace: x\n",
        );
        // Parse time compares namespaces as written; resolved, both are the cluster-scoped ns-a.
        let t = resolve(&b, &served()).unwrap();
        let err = distinct(&b, &t).unwrap_err();
        assert_eq!(err.object, "Namespace ns-a");
        assert_eq!((err.first.document, err.second.document), (1, 2));
        let msg = err.to_string();
        assert!(msg.contains("is written twice, at t.yaml"), "{msg}");
        // A namespaced object without namespace goes to "default".
        let b = bundle(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata: {a: '1'}\n\
             ---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: default\ndata: {a: '2'}\n",
        );
        let t = resolve(&b, &served()).unwrap();
        assert_eq!(distinct(&b, &t).unwrap_err().object, "ConfigMap default/c");
        let b = bundle(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n\
             ---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: other\n",
        );
        let t = resolve(&b, &served()).unwrap();
        assert!(distinct(&b, &t).is_ok());
    }
}
