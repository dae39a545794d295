//! Amazon EKS resources: the cluster (`aws_eks_cluster`) and its managed
//! node groups (`aws_eks_nodegroup`), and what they share: ownership tags,
//! error codes, and waits on EKS update objects.
//!
//! Ownership follows the CloudFormation stacks ([`crate::aws::stack`]):
//! everything kfaws creates carries the [`DEPLOYMENT_TAG`] and
//! [`LINEAGE_TAG`]; an existing cluster or node group of our name is
//! re-attached to only when both match, so kfaws never adopts (or deletes)
//! what another tool or another copy of the state made.

pub mod access_entry;
pub mod cluster;
pub mod nodegroup;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_eks::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_eks::types::{Cluster, Update, UpdateStatus};

use super::stack::{DEPLOYMENT_TAG, LINEAGE_TAG};
use super::wait::{wait_until, Backoff, Poll};
use crate::address::Address;
use crate::resource::{Detail, ResourceError};

/// The tag naming the graph address that made a resource.
pub const ADDRESS_TAG: &str = "kfaws:address";

/// The tags every EKS resource kfaws creates carries.
pub fn tags(deployment: &str, lineage: &str, address: &Address) -> HashMap<String, String> {
    HashMap::from([
        (DEPLOYMENT_TAG.to_string(), deployment.to_string()),
        (LINEAGE_TAG.to_string(), lineage.to_string()),
        (ADDRESS_TAG.to_string(), address.to_string()),
    ])
}

/// Whether `tags` say the resource was made by this deployment's state:
/// deployment and lineage tags both match.
pub fn owned(tags: Option<&HashMap<String, String>>, deployment: &str, lineage: &str) -> bool {
    tags.is_some_and(|t| {
        t.get(DEPLOYMENT_TAG).map(String::as_str) == Some(deployment)
            && t.get(LINEAGE_TAG).map(String::as_str) == Some(lineage)
    })
}

/// Why an existing resource of our name may not be adopted, in the words
/// [`crate::aws::stack`] uses for stacks.
pub fn foreign(
    what: &str,
    tags: Option<&HashMap<String, String>>,
    deployment: &str,
) -> ResourceError {
    let why = match tags.and_then(|t| Some((t.get(DEPLOYMENT_TAG)?, t.get(LINEAGE_TAG)?))) {
        Some((d, l)) if d == deployment => format!(
            "its tags say it belongs to another kfaws state of deployment {d:?} (lineage {l}): \
             another copy of this deployment's state is in use elsewhere (or the tags were edited \
             by hand): use that state, or destroy from it first"
        ),
        _ => "it was not created by kfaws for this deployment; delete or rename it".into(),
    };
    ResourceError::refused(format!("{what} already exists: {why}"))
}

/// The refusal for a resource the state records that still exists at its recorded ARN but no
/// longer carries this deployment's ownership tags: they were changed outside kfaws (or the
/// resource was replaced by another of the same name, which EKS cluster and IAM OIDC provider
/// ARNs do not tell apart). Reading it as gone would plan a create that fails on the name and
/// taints the entry, and once the tags were put back the tainted entry would replace the live
/// resource; adopting it would take over what the new tags claim for someone else. So the read
/// fails, the plan stops before any change, and the message says both ways on.
///
/// `what` names the resource (`EKS cluster demo`); `tags` are its live tags.
pub fn retagged<'a>(
    what: &str,
    arn: &str,
    address: &Address,
    tags: impl IntoIterator<Item = (&'a str, &'a str)>,
    deployment: &str,
    lineage: &str,
) -> ResourceError {
    let tags: HashMap<&str, &str> = tags.into_iter().collect();
    let live = |key: &str| {
        tags.get(key)
            .map_or("(none)".to_string(), |v| format!("{v:?}"))
    };
    ResourceError::refused(format!(
        "{what} ({arn}), recorded in the state as {address}, no longer carries this \
         deployment's tags: {DEPLOYMENT_TAG} is {} and {LINEAGE_TAG} is {} (this state's: \
         {deployment:?}, {lineage:?}). They were changed outside kfaws; nothing was changed. \
         Put them back (tag the resource {DEPLOYMENT_TAG}={deployment} \
         {LINEAGE_TAG}={lineage}), or run `kfaws state rm {address}` to stop managing it \
         (it keeps its name, so plans then refuse to create {address} until it is deleted or \
         renamed)",
        live(DEPLOYMENT_TAG),
        live(LINEAGE_TAG),
    ))
}

/// Whether the live resource at `arn` with `tags` is this deployment's ([`owned`]): `Ok(false)`
/// for another's, which a read takes for gone, but the [`retagged`] refusal when the state
/// records this very ARN (`recorded`'s physical id): its tags were changed outside kfaws.
///
/// # Errors
/// [`retagged`].
pub fn ours_or_retagged(
    tags: Option<&HashMap<String, String>>,
    arn: &str,
    recorded: Option<&crate::state::ResourceState>,
    what: &str,
    address: &Address,
    deployment: &str,
    lineage: &str,
) -> Result<bool, ResourceError> {
    if owned(tags, deployment, lineage) {
        return Ok(true);
    }
    if recorded.and_then(|r| r.physical_id.as_deref()) == Some(arn) {
        let live = tags
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()));
        return Err(retagged(what, arn, address, live, deployment, lineage));
    }
    Ok(false)
}

/// The service's error code of a failed call, if the service answered.
pub fn code<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> Option<&str> {
    e.as_service_error().and_then(ProvideErrorMetadata::code)
}

/// EKS `ResourceNotFoundException`: the cluster or node group does not exist.
pub fn is_not_found<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    code(e) == Some("ResourceNotFoundException")
}

/// The cluster `name` as `DescribeCluster` answers it, or `None` when EKS
/// has no cluster of that name (`ResourceNotFoundException`).
///
/// # Errors
/// [`ResourceError`] naming the call and the cluster for any other failure.
pub async fn describe_cluster(
    client: &aws_sdk_eks::Client,
    name: &str,
) -> Result<Option<Cluster>, ResourceError> {
    match client.describe_cluster().name(name).send().await {
        Ok(out) => Ok(out.cluster().cloned()),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(ResourceError::msg(format!(
            "DescribeCluster {name}: {}",
            super::error_message(&e)
        ))),
    }
}

/// EKS health issues (`Cluster.health.issues`, `Nodegroup.health.issues`) as
/// `CODE: message; ...`, or a sentence saying EKS reports none.
pub fn describe_issues<'a>(
    issues: impl IntoIterator<Item = (Option<&'a str>, Option<&'a str>)>,
) -> String {
    let issues: Vec<String> = issues
        .into_iter()
        .map(|(code, message)| {
            format!(
                "{}: {}",
                code.unwrap_or("?"),
                message.unwrap_or("no message")
            )
        })
        .collect();
    if issues.is_empty() {
        "EKS reports no health issue".to_string()
    } else {
        issues.join("; ")
    }
}

pub use crate::aws::wait::Tolerance;

/// The minor of a `1.N` Kubernetes version (`"1.33"` → 33); `None` for
/// anything else. EKS versions are `major.minor` (EKS API Reference,
/// `Cluster.version`).
pub fn minor(version: &str) -> Option<u32> {
    version.strip_prefix("1.")?.parse().ok()
}

/// What an EKS update's status means for a wait (EKS API Reference,
/// `Update.status`: `InProgress`, `Failed`, `Cancelled`, `Successful`).
pub fn update_poll(update: &Update) -> Poll<()> {
    match update.status() {
        Some(UpdateStatus::Successful) => Poll::Ready(()),
        Some(UpdateStatus::Failed | UpdateStatus::Cancelled) => {
            let errors: Vec<String> = update
                .errors()
                .iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        e.error_code().map_or("?", |c| c.as_str()),
                        e.error_message().unwrap_or("no message")
                    )
                })
                .collect();
            Poll::Failed(format!(
                "update {} is {}: {}",
                update.id().unwrap_or("?"),
                update.status().map_or("?", UpdateStatus::as_str),
                if errors.is_empty() {
                    "no error details".to_string()
                } else {
                    errors.join("; ")
                }
            ))
        }
        other => Poll::Pending(format!(
            "update {}",
            other.map_or("InProgress", UpdateStatus::as_str)
        )),
    }
}

/// The plan line for a cluster or node group whose live status is
/// `status` (EKS's `ClusterStatus`/`NodegroupStatus`, e.g. `UPDATING`):
/// `None` when `ACTIVE` or a node group's `DEGRADED` (settled: its nodes run
/// and EKS takes updates); otherwise it says the apply first waits for the
/// operation in progress, since EKS runs one update at a time and refuses
/// another meanwhile (`ResourceInUseException`; EKS API reference,
/// UpdateClusterVersion).
pub fn waits_for_status(kind: &str, status: Option<&str>) -> Option<Detail> {
    let status = status.filter(|s| !matches!(*s, "ACTIVE" | "DEGRADED"))?;
    Some(Detail {
        action: "Wait".into(),
        name: format!("status {status}"),
        kind: kind.into(),
        replacement: None,
        condition: None,
        note: Some(
            "an operation is in progress; apply waits until it is ACTIVE before making the \
             calls below"
                .into(),
        ),
    })
}

/// Waits while what `fetch` answers has an operation in progress that
/// blocks a delete (`busy` names its status then, e.g. `CREATING`), for at
/// most `deadline`; returns what it then answers, `None` once it is gone.
/// `what` names it in the error, e.g. `cluster ml`.
///
/// # Errors
/// [`ResourceError`] with the status history at the deadline, or when
/// `fetch` fails more than [`Tolerance::LIMIT`] times in a row.
pub(crate) async fn wait_settled<T, F, Fut>(
    deadline: Duration,
    what: &str,
    mut fetch: F,
    busy: impl Fn(&T) -> Option<String>,
) -> Result<Option<T>, ResourceError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, ResourceError>>,
{
    let tolerance = Tolerance::default();
    let (tolerance, busy) = (&tolerance, &busy);
    wait_until(Backoff::with_deadline(deadline), || {
        let fetched = fetch();
        async move {
            let found = match fetched.await {
                Ok(found) => {
                    tolerance.ok();
                    found
                }
                Err(e) => return tolerance.failed(e.to_string()),
            };
            match found.as_ref().and_then(busy) {
                Some(status) => Poll::Pending(status),
                None => Poll::Ready(found),
            }
        }
    })
    .await
    .map_err(|e| ResourceError::msg(format!("{what}: {e}")))
}

/// Waits until the EKS update `update`, as the call named `call`
/// (`UpdateClusterVersion`, …) answered it, succeeds, polling
/// `DescribeUpdate` of the cluster (and node group, if any).
///
/// # Errors
/// [`ResourceError`] when the answer held no update, with the update's
/// errors when it fails or is cancelled, or the status history when
/// `deadline` passes.
pub async fn wait_for_update(
    client: &aws_sdk_eks::Client,
    cluster: &str,
    nodegroup: Option<&str>,
    call: &str,
    update: Option<&Update>,
    deadline: Duration,
) -> Result<(), ResourceError> {
    let Some(update) = update else {
        let target = nodegroup.map_or(cluster.to_string(), |n| format!("{cluster}/{n}"));
        return Err(ResourceError::msg(format!(
            "{call} {target}: EKS answered no update"
        )));
    };
    if let Poll::Ready(()) = update_poll(update) {
        return Ok(());
    }
    let Some(id) = update.id() else {
        return Err(ResourceError::msg(format!(
            "EKS returned an update without an id for cluster {cluster}"
        )));
    };
    let tolerance = Tolerance::default();
    wait_until(Backoff::with_deadline(deadline), || async {
        let sent = client
            .describe_update()
            .name(cluster)
            .set_nodegroup_name(nodegroup.map(str::to_string))
            .update_id(id)
            .send()
            .await;
        match sent {
            Ok(out) => {
                tolerance.ok();
                match out.update() {
                    Some(u) => update_poll(u),
                    None => Poll::Failed(format!("DescribeUpdate {id}: no update in the answer")),
                }
            }
            Err(e) => {
                tolerance.failed(format!("DescribeUpdate {id}: {}", super::error_message(&e)))
            }
        }
    })
    .await
    .map_err(|e| ResourceError::msg(format!("cluster {cluster}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_eks::types::{ErrorCode, ErrorDetail};

    #[test]
    fn the_plan_says_it_waits_for_an_operation_in_progress() {
        assert_eq!(waits_for_status("Nodegroup", Some("ACTIVE")), None);
        assert_eq!(waits_for_status("Nodegroup", Some("DEGRADED")), None);
        let d = waits_for_status("Nodegroup", Some("UPDATING")).unwrap();
        assert_eq!(
            (d.action.as_str(), d.name.as_str(), d.kind.as_str()),
            ("Wait", "status UPDATING", "Nodegroup")
        );
        assert!(d.note.unwrap().contains("waits until it is ACTIVE"));
    }

    #[test]
    fn retagged_names_the_live_and_expected_tags_and_both_ways_on() {
        let address: Address = "eks.cluster".parse().unwrap();
        let e = retagged(
            "EKS cluster demo",
            "arn:aws:eks:us-east-1:123456789012:cluster/demo",
            &address,
            [(DEPLOYMENT_TAG, "other")],
            "demo",
            "l1",
        )
        .to_string();
        assert!(e.contains("kfaws:deployment is \"other\""), "{e}");
        assert!(e.contains("kfaws:lineage is (none)"), "{e}");
        assert!(e.contains("kfaws:deployment=demo kfaws:lineage=l1"), "{e}");
        assert!(e.contains("kfaws state rm eks.cluster"), "{e}");
    }

    #[test]
    fn ownership_needs_both_deployment_and_lineage() {
        let a = Address::new("eks.cluster").unwrap();
        let ours = tags("ml", "l1", &a);
        assert!(owned(Some(&ours), "ml", "l1"));
        assert!(!owned(Some(&ours), "ml", "l2"));
        assert!(!owned(Some(&ours), "other", "l1"));
        assert!(!owned(None, "ml", "l1"));
        let e = foreign("cluster ml", Some(&ours), "ml").to_string();
        assert!(e.contains("another kfaws state"), "{e}");
        let e = foreign("cluster ml", None, "ml").to_string();
        assert!(e.contains("not created by kfaws"), "{e}");
    }

    #[test]
    fn an_update_is_done_when_successful_and_fails_with_its_errors() {
        let ok = Update::builder()
            .id("u1")
            .status(UpdateStatus::Successful)
            .build();
        assert!(matches!(update_poll(&ok), Poll::Ready(())));
        let running = Update::builder()
            .id("u1")
            .status(UpdateStatus::InProgress)
            .build();
        assert!(matches!(update_poll(&running), Poll::Pending(s) if s == "update InProgress"));
        let failed = Update::builder()
            .id("u1")
            .status(UpdateStatus::Failed)
            .errors(
                ErrorDetail::builder()
                    .error_code(ErrorCode::InsufficientFreeAddresses)
                    .error_message("subnet full")
                    .build(),
            )
            .build();
        let Poll::Failed(m) = update_poll(&failed) else {
            panic!("a failed update fails the wait")
        };
        assert_eq!(
            m,
            "update u1 is Failed: InsufficientFreeAddresses: subnet full"
        );
    }
}
