//! Training jobs that a change deleting their CRD or their namespace would
//! kill mid-run.
//!
//! Deleting a CustomResourceDefinition deletes every custom resource of it
//! (Kubernetes docs, "Delete a CustomResourceDefinition"), deleting a
//! namespace everything in it (Kubernetes docs, "Namespaces"), and with a
//! Kubeflow job its pods (they are owned by it). A plan that removes the
//! training operator from the config, replaces its bundle, or updates it to
//! manifests without one of its CRDs, a destroy targeted at it, or one that
//! deletes the user namespace (a targeted destroy, a changed
//! `user_namespace`) would so stop the cluster's users' running PyTorchJobs;
//! such a plan is refused while one has not finished ([`unfinished_jobs`]).
//! A plan that deletes the cluster too (a destroy) is not: the jobs go with
//! the cluster, and its plan lists them. A job whose delete was already
//! requested (`metadata.deletionTimestamp`) is going anyway and does not
//! count.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;
use serde_json::Value;
use tokio::time::Instant;

use super::delete::crd_api;
use super::object::GroupKind;
use super::retry::{self, RetryError};

/// Whether custom resources of `kind` are jobs that run to an end: the
/// Kubeflow training kinds all end in `Job` (`PyTorchJob`, `TFJob`,
/// `MPIJob`, `XGBoostJob`, `PaddleJob`, `JAXJob`; Trainer v2 `TrainJob`).
pub fn is_job_kind(kind: &str) -> bool {
    kind.ends_with("Job")
}

/// Whether the job's `status.conditions` say it ended: a condition
/// `Succeeded`, `Failed` (Kubeflow training operator's `JobConditionType`)
/// or `Complete` (Trainer v2 `TrainJob`, as batch/v1 Job) whose status is
/// `"True"`. A job without conditions (not yet seen by its operator) has
/// not ended.
pub fn finished(job: &DynamicObject) -> bool {
    job.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.get("status").and_then(Value::as_str) == Some("True")
                    && matches!(
                        c.get("type").and_then(Value::as_str),
                        Some("Succeeded" | "Failed" | "Complete")
                    )
            })
        })
}

/// A job that has not finished: its kind and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnfinishedJob {
    /// Its kind and group.
    pub gk: GroupKind,
    /// Its namespace (`None` for a cluster-scoped kind).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// The jobs ([`is_job_kind`]) of CRD `crd` that have not [`finished`] and
/// are not being deleted, in list order; empty when the CRD is gone, serves
/// no version, or its kind is not a job kind. Transient errors are retried
/// until `deadline`.
///
/// # Errors
/// [`RetryError`] when the CRD or its custom resources cannot be read.
pub async fn unfinished_jobs(
    client: &Client,
    crd: &str,
    deadline: Instant,
) -> Result<Vec<UnfinishedJob>, RetryError> {
    let Some((resource, api)) = crd_api(client, crd, deadline).await? else {
        return Ok(vec![]);
    };
    if !is_job_kind(&resource.kind) {
        return Ok(vec![]);
    }
    let all = ListParams::default();
    let list = match retry::retry_served(deadline, || api.list(&all)).await {
        Ok(list) => list,
        // Not served (yet or any more): nothing can be stored through it.
        Err(RetryError::Failed(kube::Error::Api(s))) if s.code == 404 => return Ok(vec![]),
        Err(e) => return Err(e),
    };
    let gk = GroupKind::new(&resource.group, &resource.kind);
    Ok(list
        .items
        .iter()
        .filter(|job| !finished(job) && job.metadata.deletion_timestamp.is_none())
        .map(|job| UnfinishedJob {
            gk: gk.clone(),
            namespace: job.metadata.namespace.clone(),
            name: job.metadata.name.clone().unwrap_or_default(),
        })
        .collect())
}

/// The names of the CRDs in the cluster whose kind is a job kind
/// ([`is_job_kind`]), sorted. Transient errors are retried until `deadline`.
///
/// # Errors
/// [`RetryError`] when the CRDs cannot be listed.
pub async fn job_crds(client: &Client, deadline: Instant) -> Result<Vec<String>, RetryError> {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let all = ListParams::default();
    let list = retry::retry(deadline, || crds.list(&all)).await?;
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter(|crd| is_job_kind(&crd.spec.names.kind))
        .filter_map(|crd| crd.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: Value) -> DynamicObject {
        let resource = kube::core::ApiResource {
            group: "kubeflow.org".into(),
            version: "v1".into(),
            api_version: "kubeflow.org/v1".into(),
            kind: "PyTorchJob".into(),
            plural: "pytorchjobs".into(),
        };
        let mut job = DynamicObject::new("j", &resource);
        job.data = serde_json::json!({ "status": status });
        job
    }

    #[test]
    fn a_job_has_finished_once_succeeded_failed_or_complete_is_true() {
        let conditions = |list: &[(&str, &str)]| {
            let list: Vec<Value> = list
                .iter()
                .map(|(t, s)| serde_json::json!({"type": t, "status": s}))
                .collect();
            serde_json::json!({ "conditions": list })
        };
        for (status, done) in [
            (Value::Null, false),
            (serde_json::json!({}), false),
            (conditions(&[("Created", "True")]), false),
            (
                conditions(&[("Created", "True"), ("Running", "True")]),
                false,
            ),
            (
                conditions(&[("Running", "False"), ("Succeeded", "False")]),
                false,
            ),
            (
                conditions(&[("Running", "False"), ("Succeeded", "True")]),
                true,
            ),
            (
                conditions(&[("Running", "False"), ("Failed", "True")]),
                true,
            ),
            (conditions(&[("Complete", "True")]), true),
        ] {
            assert_eq!(finished(&job(status.clone())), done, "{status}");
        }
    }

    #[test]
    fn job_kinds_are_the_kubeflow_training_kinds() {
        for kind in ["PyTorchJob", "TFJob", "MPIJob", "TrainJob", "XGBoostJob"] {
            assert!(is_job_kind(kind), "{kind}");
        }
        for kind in [
            "Profile",
            "Notebook",
            "Experiment",
            "ClusterTrainingRuntime",
        ] {
            assert!(!is_job_kind(kind), "{kind}");
        }
    }
}
