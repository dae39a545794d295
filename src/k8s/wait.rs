//! Readiness: pure predicates on live objects, and a bounded poll.
//!
//! Each predicate reads one condition that Kubernetes documents; the poll
//! ([`until`]) repeats a check on the [`super::retry::schedule`] until it
//! passes or the deadline does. No wait in this module tree is unbounded.

use std::future::Future;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::wait::{conditions, Condition};
use tokio::time::Instant;

/// The CRD has condition `Established=True`: its API is being served
/// ([CRD docs](https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#create-a-customresourcedefinition)).
pub fn crd_established(crd: &CustomResourceDefinition) -> bool {
    conditions::is_crd_established().matches_object(Some(crd))
}

/// The Deployment has condition `Available=True` for its current generation
/// (`status.observedGeneration >= metadata.generation`): at least
/// `minReadySeconds`-ready replicas for the current spec
/// ([Deployment status](https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#deployment-status)).
pub fn deployment_available(d: &Deployment) -> bool {
    let Some(status) = &d.status else {
        return false;
    };
    let current = match (status.observed_generation, d.metadata.generation) {
        (Some(seen), Some(want)) => seen >= want,
        (_, None) => true,
        (None, Some(_)) => false,
    };
    current
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Available" && c.status == "True")
}

/// Some endpoint of the slices is ready: `conditions.ready` true, or unset,
/// which the EndpointSlice API says consumers must read as ready
/// ([EndpointSlice conditions](https://kubernetes.io/docs/concepts/services-networking/endpoint-slices/#conditions)).
pub fn has_ready_endpoint(slices: &[EndpointSlice]) -> bool {
    slices
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .any(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
}

/// The lease is held: renewed within its `leaseDurationSeconds`. The leader
/// of kube-controller-manager holds `kube-system/kube-controller-manager`
/// ([leader election](https://kubernetes.io/docs/concepts/architecture/leases/#leader-election)).
pub fn lease_held(lease: &Lease) -> bool {
    let Some(spec) = &lease.spec else {
        return false;
    };
    let (Some(renewed), Some(secs)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return false;
    };
    renewed
        .0
        .checked_add(SignedDuration::from_secs(i64::from(secs)))
        .is_ok_and(|until| until > Timestamp::now())
}

/// Repeats `check` until it returns `Ok(Ok(value))` or the deadline passes.
/// `Ok(Err(seen))` means "not yet", `seen` saying what was seen. The first
/// interrupt stops the wait too ([`crate::engine::interrupt::stopping`]).
///
/// # Errors
/// The last "not yet" description (or the check's own error) when the
/// deadline passes or the check fails; [`STOPPED`] and what was last seen
/// when interrupted.
pub async fn until<T, F, Fut>(deadline: Instant, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Result<T, String>, String>>,
{
    let stopping = crate::engine::interrupt::stopping();
    let stopped = |seen: &str| {
        if seen.is_empty() {
            STOPPED.to_string()
        } else {
            format!("{STOPPED} (last seen: {seen})")
        }
    };
    let mut delays = backon::BackoffBuilder::build(super::retry::schedule());
    let mut said = String::new();
    loop {
        let answer = tokio::select! {
            answer = tokio::time::timeout_at(deadline, check()) => answer,
            () = stopping.cancelled() => return Err(stopped(&said)),
        };
        let seen = match answer {
            Ok(Ok(Ok(v))) => return Ok(v),
            Ok(Ok(Err(seen))) => seen,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("no answer before the deadline".into()),
        };
        // What the wait sees goes to the resource's progress line, once per change.
        if seen != said {
            crate::engine::progress::report_status(&seen);
            said.clone_from(&seen);
        }
        let delay = delays.next().unwrap_or(std::time::Duration::from_secs(5));
        let last = Instant::now() + delay >= deadline;
        tokio::select! {
            () = tokio::time::sleep_until(if last { deadline } else { Instant::now() + delay }) => {}
            () = stopping.cancelled() => return Err(stopped(&seen)),
        }
        if last {
            return Err(seen);
        }
    }
}

/// What an interrupted [`until`] says.
pub const STOPPED: &str = "stopped waiting: interrupted";

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml<T: serde::de::DeserializeOwned>(s: &str) -> T {
        serde_saphyr::from_str(s).unwrap()
    }

    #[test]
    fn deployment_available_needs_the_condition_for_the_current_generation() {
        let available: Deployment = yaml(
            "metadata: {name: d, generation: 2}\nstatus:\n  observedGeneration: 2\n  conditions:\n  - {type: Available, status: \"True\"}\n",
        );
        assert!(deployment_available(&available));
        let stale: Deployment = yaml(
            "metadata: {name: d, generation: 3}\nstatus:\n  observedGeneration: 2\n  conditions:\n  - {type: Available, status: \"True\"}\n",
        );
        assert!(!deployment_available(&stale));
        let unavailable: Deployment = yaml(
            "metadata: {name: d, generation: 1}\nstatus:\n  observedGeneration: 1\n  conditions:\n  - {type: Available, status: \"False\"}\n",
        );
        assert!(!deployment_available(&unavailable));
        let no_status: Deployment = yaml("metadata: {name: d, generation: 1}\n");
        assert!(!deployment_available(&no_status));
    }

    #[test]
    fn endpoints_are_ready_unless_marked_not_ready() {
        let ready: EndpointSlice = yaml(
            "addressType: IPv4\nmetadata: {name: s}\nendpoints:\n- addresses: [10.1.0.4]\n  conditions: {ready: true}\n",
        );
        let unset: EndpointSlice =
            yaml("addressType: IPv4\nmetadata: {name: s}\nendpoints:\n- addresses: [10.1.0.4]\n");
        let not_ready: EndpointSlice = yaml(
            "addressType: IPv4\nmetadata: {name: s}\nendpoints:\n- addresses: [10.1.0.4]\n  conditions: {ready: false}\n",
        );
        let empty: EndpointSlice = yaml("addressType: IPv4\nmetadata: {name: s}\nendpoints: []\n");
        assert!(has_ready_endpoint(&[ready]));
        assert!(has_ready_endpoint(&[unset]));
        assert!(!has_ready_endpoint(&[not_ready, empty]));
        assert!(!has_ready_endpoint(&[]));
    }

    #[test]
    fn crds_are_established_by_their_condition() {
        let crd: CustomResourceDefinition = yaml(
            "metadata: {name: ws.x.test}\nspec:\n  group: x.test\n  scope: Namespaced\n  names: {kind: W, plural: ws}\n  versions: []\n\
             status:\n  conditions:\n  - {type: Established, status: \"True\"}\n",
        );
        assert!(crd_established(&crd));
        let pending: CustomResourceDefinition = yaml(
            "metadata: {name: ws.x.test}\nspec:\n  group: x.test\n  scope: Namespaced\n  names: {kind: W, plural: ws}\n  versions: []\n",
        );
        assert!(!crd_established(&pending));
    }

    #[test]
    fn leases_are_held_while_renewed_within_their_duration() {
        let now = Timestamp::now();
        let fresh: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-controller-manager"},
            "spec": {"renewTime": now.to_string(), "leaseDurationSeconds": 15}
        }))
        .unwrap();
        assert!(lease_held(&fresh));
        let stale: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-controller-manager"},
            "spec": {"renewTime": (now - SignedDuration::from_secs(60)).to_string(), "leaseDurationSeconds": 15}
        }))
        .unwrap();
        assert!(!lease_held(&stale));
    }

    #[tokio::test]
    async fn until_gives_up_at_the_deadline_with_what_it_saw() {
        let deadline = Instant::now() + std::time::Duration::from_secs(1);
        let mut n = 0;
        let r: Result<(), String> = until(deadline, || {
            n += 1;
            let seen = format!("poll {n}");
            async move { Ok(Err(seen)) }
        })
        .await;
        let seen = r.unwrap_err();
        assert!(seen.starts_with("poll "), "{seen}");
        assert!(Instant::now() >= deadline);
        let mut m = 0;
        let r = until(Instant::now() + std::time::Duration::from_secs(10), || {
            m += 1;
            let done = m == 3;
            async move { Ok(if done { Ok(m) } else { Err("no".into()) }) }
        })
        .await;
        assert_eq!(r, Ok(3));
    }
}
