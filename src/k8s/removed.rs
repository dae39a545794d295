//! API versions Kubernetes no longer serves, by the release that removed
//! them: the check of the user's manifests against the config's
//! `kubernetes_version` when they are read (`validate`, `plan`), which
//! needs no API server (a fresh deployment: case C10 before the cluster
//! exists) and sees the version an upgrade in the same apply moves to,
//! which discovery on the running cluster cannot.
//!
//! The table is the Kubernetes "Deprecated API Migration Guide"
//! (<https://kubernetes.io/docs/reference/using-api/deprecation-guide/>),
//! "Removed APIs by release", v1.16 to v1.32 (no API version was removed
//! after v1.32 as of Kubernetes 1.34). An object's kind that is not in the
//! table is left to discovery ([`super::discovery`]) once the cluster
//! exists.

use std::fmt;

use super::bundle::{Bundle, Origin};

/// One API version of some kinds, removed in one release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovedApi {
    /// `group/version` (`apiVersion`) no longer served.
    pub api_version: &'static str,
    /// The kinds it no longer serves.
    pub kinds: &'static [&'static str],
    /// The minor version of the Kubernetes 1.x release that stopped serving it.
    pub removed_in: u32,
    /// The `apiVersion` to use instead; `None` where the kind itself went
    /// (PodSecurityPolicy: replaced by Pod Security Admission).
    pub replacement: Option<&'static str>,
}

const fn api(
    api_version: &'static str,
    kinds: &'static [&'static str],
    removed_in: u32,
    replacement: Option<&'static str>,
) -> RemovedApi {
    RemovedApi {
        api_version,
        kinds,
        removed_in,
        replacement,
    }
}

const FLOW: &[&str] = &["FlowSchema", "PriorityLevelConfiguration"];
const WORKLOADS: &[&str] = &["DaemonSet", "Deployment", "ReplicaSet", "StatefulSet"];
const RBAC: &[&str] = &["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];
const WEBHOOKS: &[&str] = &[
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];
const ACCESS_REVIEWS: &[&str] = &[
    "LocalSubjectAccessReview",
    "SelfSubjectAccessReview",
    "SubjectAccessReview",
];
const STORAGE_V1: &[&str] = &["CSIDriver", "CSINode", "StorageClass", "VolumeAttachment"];

/// The removed API versions, newest removal first (Deprecated API
/// Migration Guide, "Removed APIs by release").
pub const REMOVED: &[RemovedApi] = &[
    api(
        "flowcontrol.apiserver.k8s.io/v1beta3",
        FLOW,
        32,
        Some("flowcontrol.apiserver.k8s.io/v1"),
    ),
    api(
        "flowcontrol.apiserver.k8s.io/v1beta2",
        FLOW,
        29,
        Some("flowcontrol.apiserver.k8s.io/v1"),
    ),
    api(
        "storage.k8s.io/v1beta1",
        &["CSIStorageCapacity"],
        27,
        Some("storage.k8s.io/v1"),
    ),
    api(
        "flowcontrol.apiserver.k8s.io/v1beta1",
        FLOW,
        26,
        Some("flowcontrol.apiserver.k8s.io/v1"),
    ),
    api(
        "autoscaling/v2beta2",
        &["HorizontalPodAutoscaler"],
        26,
        Some("autoscaling/v2"),
    ),
    api("batch/v1beta1", &["CronJob"], 25, Some("batch/v1")),
    api(
        "discovery.k8s.io/v1beta1",
        &["EndpointSlice"],
        25,
        Some("discovery.k8s.io/v1"),
    ),
    api(
        "events.k8s.io/v1beta1",
        &["Event"],
        25,
        Some("events.k8s.io/v1"),
    ),
    api(
        "autoscaling/v2beta1",
        &["HorizontalPodAutoscaler"],
        25,
        Some("autoscaling/v2"),
    ),
    api(
        "policy/v1beta1",
        &["PodDisruptionBudget"],
        25,
        Some("policy/v1"),
    ),
    api("policy/v1beta1", &["PodSecurityPolicy"], 25, None),
    api(
        "node.k8s.io/v1beta1",
        &["RuntimeClass"],
        25,
        Some("node.k8s.io/v1"),
    ),
    api(
        "admissionregistration.k8s.io/v1beta1",
        WEBHOOKS,
        22,
        Some("admissionregistration.k8s.io/v1"),
    ),
    api(
        "apiextensions.k8s.io/v1beta1",
        &["CustomResourceDefinition"],
        22,
        Some("apiextensions.k8s.io/v1"),
    ),
    api(
        "apiregistration.k8s.io/v1beta1",
        &["APIService"],
        22,
        Some("apiregistration.k8s.io/v1"),
    ),
    api(
        "authentication.k8s.io/v1beta1",
        &["TokenReview"],
        22,
        Some("authentication.k8s.io/v1"),
    ),
    api(
        "authorization.k8s.io/v1beta1",
        ACCESS_REVIEWS,
        22,
        Some("authorization.k8s.io/v1"),
    ),
    api(
        "certificates.k8s.io/v1beta1",
        &["CertificateSigningRequest"],
        22,
        Some("certificates.k8s.io/v1"),
    ),
    api(
        "coordination.k8s.io/v1beta1",
        &["Lease"],
        22,
        Some("coordination.k8s.io/v1"),
    ),
    api(
        "extensions/v1beta1",
        &["Ingress"],
        22,
        Some("networking.k8s.io/v1"),
    ),
    api(
        "networking.k8s.io/v1beta1",
        &["Ingress", "IngressClass"],
        22,
        Some("networking.k8s.io/v1"),
    ),
    api(
        "rbac.authorization.k8s.io/v1beta1",
        RBAC,
        22,
        Some("rbac.authorization.k8s.io/v1"),
    ),
    api(
        "scheduling.k8s.io/v1beta1",
        &["PriorityClass"],
        22,
        Some("scheduling.k8s.io/v1"),
    ),
    api(
        "storage.k8s.io/v1beta1",
        STORAGE_V1,
        22,
        Some("storage.k8s.io/v1"),
    ),
    api(
        "extensions/v1beta1",
        &["NetworkPolicy"],
        16,
        Some("networking.k8s.io/v1"),
    ),
    api(
        "extensions/v1beta1",
        &["DaemonSet", "Deployment", "ReplicaSet"],
        16,
        Some("apps/v1"),
    ),
    api("extensions/v1beta1", &["PodSecurityPolicy"], 16, None),
    api("apps/v1beta1", WORKLOADS, 16, Some("apps/v1")),
    api("apps/v1beta2", WORKLOADS, 16, Some("apps/v1")),
];

/// The table entry that says `api_version` `kind` is not served by
/// Kubernetes 1.`minor`, if any.
pub fn removed(api_version: &str, kind: &str, minor: u32) -> Option<&'static RemovedApi> {
    REMOVED
        .iter()
        .find(|r| r.api_version == api_version && r.kinds.contains(&kind) && minor >= r.removed_in)
}

/// One object of a bundle written with a removed API version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedObject {
    /// `Kind namespace/name` as written.
    pub object: String,
    /// Where it was written.
    pub origin: Origin,
    /// Its `kind`.
    pub kind: String,
    /// The entry that removed it.
    pub api: RemovedApi,
}

impl fmt::Display for RemovedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (o, av, k) = (&self.object, self.api.api_version, &self.kind);
        write!(
            f,
            "{o} ({}): {av} {k} is not served since Kubernetes 1.{}",
            self.origin, self.api.removed_in
        )?;
        match self.api.replacement {
            Some(r) => write!(f, " -- change apiVersion to {r}"),
            None => write!(f, " -- remove it (Pod Security Admission replaces it)"),
        }?;
        f.write_str(" (see https://kubernetes.io/docs/reference/using-api/deprecation-guide/)")
    }
}

/// Objects of a bundle that Kubernetes `version` does not serve, found
/// when the manifests are read (validate, plan), before any call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} object(s) of bundle {bundle:?} use an API version Kubernetes {version} (kubernetes_version) no longer serves:\n  {}", .objects.len(), .objects.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
pub struct RemovedApis {
    /// The bundle.
    pub bundle: String,
    /// The Kubernetes version checked against, `1.N`.
    pub version: String,
    /// Every such object, in bundle order.
    pub objects: Vec<RemovedObject>,
}

/// Checks every object of `bundle` against the table for Kubernetes
/// `version` (`1.N`; any other form checks nothing: the config's
/// validation has refused it already). Pure.
///
/// # Errors
/// [`RemovedApis`] listing every object written with a removed version.
pub fn check(bundle: &Bundle, version: &str) -> Result<(), RemovedApis> {
    let Some(minor) = crate::aws::eks::minor(version) else {
        return Ok(());
    };
    let objects: Vec<RemovedObject> = bundle
        .objects
        .iter()
        .filter_map(|m| {
            removed(&m.api_version, &m.kind, minor).map(|api| RemovedObject {
                object: m.describe(),
                origin: m.origin.clone(),
                kind: m.kind.clone(),
                api: *api,
            })
        })
        .collect();
    if objects.is_empty() {
        return Ok(());
    }
    Err(RemovedApis {
        bundle: bundle.name.clone(),
        version: version.to_string(),
        objects,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn bundle(yaml: &str) -> Bundle {
        Bundle::from_sources("b", [(PathBuf::from("m.yaml"), yaml.to_string())]).unwrap()
    }

    const HPA: &str = "apiVersion: autoscaling/v2beta2\nkind: HorizontalPodAutoscaler\n\
                       metadata: {name: web, namespace: ml}\nspec: {}\n";

    #[test]
    fn an_hpa_of_autoscaling_v2beta2_is_refused_from_1_26_naming_object_and_replacement() {
        assert!(check(&bundle(HPA), "1.25").is_ok());
        let err = check(&bundle(HPA), "1.33").unwrap_err();
        assert_eq!(err.objects.len(), 1);
        let text = err.to_string();
        assert!(text.contains("Kubernetes 1.33"), "{text}");
        assert!(
            text.contains(
                "autoscaling/v2beta2 HorizontalPodAutoscaler is not served since Kubernetes 1.26"
            ),
            "{text}"
        );
        assert!(
            text.contains("change apiVersion to autoscaling/v2"),
            "{text}"
        );
        assert!(text.contains("web"), "{text}");
    }

    #[test]
    fn the_removal_release_is_the_first_refused() {
        let flow = "apiVersion: flowcontrol.apiserver.k8s.io/v1beta3\nkind: FlowSchema\n\
                    metadata: {name: f}\nspec: {}\n";
        assert!(check(&bundle(flow), "1.31").is_ok());
        assert!(check(&bundle(flow), "1.32").is_err());
    }

    #[test]
    fn current_versions_and_unknown_kinds_pass_and_a_kind_without_replacement_says_so() {
        let ok = "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: a}\n\
                  ---\napiVersion: example.com/v1beta1\nkind: Widget\nmetadata: {name: w}\n";
        assert!(check(&bundle(ok), "1.36").is_ok());
        let psp = "apiVersion: policy/v1beta1\nkind: PodSecurityPolicy\nmetadata: {name: p}\n";
        let text = check(&bundle(psp), "1.29").unwrap_err().to_string();
        assert!(
            text.contains("remove it (Pod Security Admission replaces it)"),
            "{text}"
        );
    }

    #[test]
    fn every_entry_names_a_group_version_and_a_replacement_of_another_version() {
        for r in REMOVED {
            assert!(r.api_version.contains('/'), "{r:?}");
            assert!(!r.kinds.is_empty(), "{r:?}");
            assert!((16..=32).contains(&r.removed_in), "{r:?}");
            assert_ne!(r.replacement, Some(r.api_version), "{r:?}");
        }
    }
}
