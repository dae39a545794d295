//! Deleting ApplySet members in dependency order, for prune and destroy.
//!
//! Order, each step waited for (bounded by the deadline) before the next:
//! 1. custom resources, while the controllers that finalize them still run
//!    (case C6: a finalizer whose controller is gone would hold its
//!    namespace forever);
//! 2. webhook configurations, before their backends go (a `failurePolicy:
//!    Fail` webhook without a backend blocks every object it intercepts);
//! 3. everything else but CRDs and namespaces (Deployments, Services, RBAC…);
//! 4. CustomResourceDefinitions;
//! 5. namespaces.
//!
//! A step that does not finish by the deadline fails naming every object
//! still present and its `metadata.finalizers`. Namespaces are finalized by
//! kube-controller-manager's namespace controller: kfaws waits for them only
//! when that controller runs (its leader lease `kube-system/kube-controller-manager`
//! is held); otherwise it reports them as left terminating instead of
//! waiting for something that cannot happen.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::Client;
use tokio::time::Instant;

use super::applyset::Member;
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
}

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
        f.write_str(")")
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

/// What a deletion did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// Objects deleted and confirmed gone (namespaces: see `terminating`).
    pub deleted: Vec<ObjectRef>,
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
    members: Vec<Member>,
    custom: &BTreeSet<GroupKind>,
    deadline: Instant,
    concurrency: usize,
) -> Result<DeleteReport, DeleteError> {
    let started = Instant::now();
    let mut report = DeleteReport::default();
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
            *left.lock().unwrap_or_else(|p| p.into_inner()) = still;
            Ok(if n == 0 {
                Ok(())
            } else {
                Err(format!("{n} left"))
            })
        })
        .await;
        if gone.is_err() {
            return Err(DeleteError::StillPresent {
                step,
                after: deadline.saturating_duration_since(started),
                remaining: left.into_inner().unwrap_or_else(|p| p.into_inner()),
            });
        }
        report.deleted.extend(batch.into_iter().map(|m| m.object));
    }
    Ok(report)
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
                    })
                }
                Err(_) => Some(Remaining {
                    object: m.object.clone(),
                    finalizers: m.meta.finalizers.clone().unwrap_or_default(),
                    conditions: vec![],
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
        };
        assert_eq!(
            ns.to_string(),
            "Namespace c6 (finalizers: kubernetes; Some content in the namespace has finalizers \
             remaining: x.test/cleanup in 1 resource instances)"
        );
    }
}
