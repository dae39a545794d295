//! The generic graph walker: runs one async job per node, a node as soon as
//! all its dependencies succeeded, at most `parallelism` at once.
//!
//! It knows nothing of resources (Terraform's `dag.Walker` is the model). A
//! failure skips exactly the failed node's transitive dependants, recorded
//! once as "upstream failed" with the root cause; independent branches run
//! to the end. Cancellation stops new starts and waits for running jobs.
//! Among ready nodes the one with the largest priority starts first.

use std::collections::{BTreeMap, BinaryHeap};
use std::future::Future;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::address::Address;
use crate::graph::Dag;

/// How one node ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The job returned `Ok`.
    Succeeded,
    /// The job returned this error (or panicked).
    Failed(String),
    /// Not run: this dependency (transitively) failed.
    UpstreamFailed(Address),
    /// Not run: the walk was cancelled first.
    NotStarted,
    /// Sent but not seen through: the first interrupt stopped the job's wait
    /// ([`crate::resource::ErrorKind::Interrupted`]), with its message. The
    /// walk itself never yields it (a job's error is [`Outcome::Failed`]); the
    /// executor ([`super::exec`]) tells the two apart.
    Interrupted(String),
}

/// Every node's outcome and whether the walk was cancelled.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WalkResult {
    /// By address; every node of the graph is present.
    pub outcomes: BTreeMap<Address, Outcome>,
    /// Whether cancellation left nodes not started.
    pub cancelled: bool,
}

impl WalkResult {
    /// Whether every node succeeded.
    pub fn all_succeeded(&self) -> bool {
        self.outcomes.values().all(|o| *o == Outcome::Succeeded)
    }
}

/// Walks `dag`, calling `job(address)` for each node.
///
/// `priority` orders ready nodes (largest first; ties by address). The walk
/// returns when every node has an outcome.
pub async fn walk<F, Fut>(
    dag: &Dag,
    parallelism: usize,
    cancel: &CancellationToken,
    priority: impl Fn(&Address) -> Duration,
    job: F,
) -> WalkResult
where
    F: Fn(Address) -> Fut,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let parallelism = parallelism.max(1);
    let mut waiting: BTreeMap<&Address, usize> = dag
        .nodes()
        .map(|n| (n, dag.dependencies(n).len()))
        .collect();
    let mut ready: BinaryHeap<(Duration, std::cmp::Reverse<&Address>)> = BinaryHeap::new();
    for (n, d) in &waiting {
        if *d == 0 {
            ready.push((priority(n), std::cmp::Reverse(*n)));
        }
    }
    let mut result = WalkResult::default();
    let mut saw_cancel = false;
    let mut running: JoinSet<(Address, Result<(), String>)> = JoinSet::new();
    let mut tasks: BTreeMap<tokio::task::Id, Address> = BTreeMap::new();
    loop {
        while running.len() < parallelism && !cancel.is_cancelled() {
            let Some((_, std::cmp::Reverse(node))) = ready.pop() else {
                break;
            };
            let address = node.clone();
            let fut = job(address.clone());
            let handle = running.spawn(async move { (address, fut.await) });
            tasks.insert(handle.id(), node.clone());
        }
        if running.is_empty() {
            break;
        }
        let joined = tokio::select! {
            joined = running.join_next_with_id() => joined,
            () = cancel.cancelled(), if !saw_cancel => {
                saw_cancel = true;
                continue;
            }
        };
        let (address, outcome) = match joined.expect("the set is not empty") {
            Ok((_, (address, Ok(())))) => (address, Outcome::Succeeded),
            Ok((_, (address, Err(e)))) => (address, Outcome::Failed(e)),
            Err(e) => {
                let address = tasks[&e.id()].clone();
                (address, Outcome::Failed(format!("the job panicked: {e}")))
            }
        };
        if outcome == Outcome::Succeeded {
            for dependant in dag.dependants(&address) {
                let w = waiting.get_mut(dependant).expect("every node is counted");
                *w -= 1;
                if *w == 0 && !result.outcomes.contains_key(dependant) {
                    ready.push((priority(dependant), std::cmp::Reverse(dependant)));
                }
            }
        } else {
            skip_dependants(dag, &address, &mut result.outcomes);
        }
        result.outcomes.insert(address, outcome);
    }
    for node in dag.nodes() {
        result
            .outcomes
            .entry(node.clone())
            .or_insert(Outcome::NotStarted);
    }
    result.cancelled =
        cancel.is_cancelled() && result.outcomes.values().any(|o| *o == Outcome::NotStarted);
    result
}

fn skip_dependants(dag: &Dag, failed: &Address, outcomes: &mut BTreeMap<Address, Outcome>) {
    let mut stack: Vec<&Address> = dag.dependants(failed);
    while let Some(n) = stack.pop() {
        if outcomes.contains_key(n) {
            continue;
        }
        outcomes.insert(n.clone(), Outcome::UpstreamFailed(failed.clone()));
        stack.extend(dag.dependants(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    fn a(s: &str) -> Address {
        Address::new(s).unwrap()
    }

    fn dag(edges: &[(&str, &[&str])]) -> Dag {
        Dag::new(
            edges
                .iter()
                .map(|(n, d)| (a(n), d.iter().map(|x| a(x)).collect())),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn runs_dependencies_first() {
        let g = dag(&[("a", &[]), ("b", &["a"]), ("c", &["b"])]);
        let log = Arc::new(Mutex::new(Vec::new()));
        let r = walk(
            &g,
            4,
            &CancellationToken::new(),
            |_| Duration::ZERO,
            |n| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push(n.to_string());
                    Ok(())
                }
            },
        )
        .await;
        assert!(r.all_succeeded());
        assert_eq!(*log.lock().unwrap(), ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn failure_skips_exactly_the_dependants_and_independent_branches_finish() {
        let g = dag(&[
            ("a", &[]),
            ("b", &["a"]),
            ("c", &["b"]),
            ("d", &["a", "x"]),
            ("x", &[]),
            ("y", &["x"]),
        ]);
        let r = walk(
            &g,
            2,
            &CancellationToken::new(),
            |_| Duration::ZERO,
            |n| async move {
                if n.as_str() == "a" {
                    Err("boom".to_string())
                } else {
                    Ok(())
                }
            },
        )
        .await;
        assert_eq!(r.outcomes[&a("a")], Outcome::Failed("boom".into()));
        for n in ["b", "c", "d"] {
            assert_eq!(r.outcomes[&a(n)], Outcome::UpstreamFailed(a("a")), "{n}");
        }
        assert_eq!(r.outcomes[&a("x")], Outcome::Succeeded);
        assert_eq!(r.outcomes[&a("y")], Outcome::Succeeded);
        assert!(!r.cancelled);
    }

    #[tokio::test]
    async fn never_runs_more_than_parallelism_at_once() {
        let nodes: Vec<String> = (0..12).map(|i| format!("n{i}")).collect();
        let g = Dag::new(nodes.iter().map(|n| (a(n), vec![]))).unwrap();
        let now = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let r = walk(
            &g,
            3,
            &CancellationToken::new(),
            |_| Duration::ZERO,
            |_| {
                let (now, peak) = (now.clone(), peak.clone());
                async move {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }
            },
        )
        .await;
        assert!(r.all_succeeded());
        assert_eq!(peak.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn cancellation_lets_running_jobs_finish_and_starts_nothing_new() {
        let g = dag(&[("a", &[]), ("b", &["a"]), ("c", &[])]);
        let cancel = CancellationToken::new();
        let r = walk(
            &g,
            1,
            &cancel,
            |n| {
                // `a` first: highest priority.
                Duration::from_secs(if n.as_str() == "a" { 2 } else { 1 })
            },
            |n| {
                let cancel = cancel.clone();
                async move {
                    if n.as_str() == "a" {
                        cancel.cancel();
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Ok(())
                }
            },
        )
        .await;
        assert_eq!(r.outcomes[&a("a")], Outcome::Succeeded);
        assert_eq!(r.outcomes[&a("b")], Outcome::NotStarted);
        assert_eq!(r.outcomes[&a("c")], Outcome::NotStarted);
        assert!(r.cancelled);
    }

    #[tokio::test]
    async fn priority_decides_among_ready_nodes() {
        let g = dag(&[("a", &[]), ("b", &[]), ("c", &[])]);
        let log = Arc::new(Mutex::new(Vec::new()));
        walk(
            &g,
            1,
            &CancellationToken::new(),
            |n| match n.as_str() {
                "b" => Duration::from_secs(9),
                "c" => Duration::from_secs(5),
                _ => Duration::ZERO,
            },
            |n| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push(n.to_string());
                    Ok(())
                }
            },
        )
        .await;
        assert_eq!(*log.lock().unwrap(), ["b", "c", "a"]);
    }

    #[tokio::test]
    async fn a_panicking_job_is_a_failure_of_its_node() {
        let g = dag(&[("a", &[]), ("b", &["a"])]);
        let r = walk(
            &g,
            2,
            &CancellationToken::new(),
            |_| Duration::ZERO,
            |n| async move {
                assert_ne!(n.as_str(), "a", "job for a panics");
                Ok(())
            },
        )
        .await;
        assert!(matches!(&r.outcomes[&a("a")], Outcome::Failed(m) if m.contains("panicked")));
        assert_eq!(r.outcomes[&a("b")], Outcome::UpstreamFailed(a("a")));
    }
}
