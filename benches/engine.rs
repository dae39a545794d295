//! `make bench`: the engine's figures, each a ratio measured side by side in
//! one run (DESIGN.md §5).
//!
//! 1. Plan time for synthetic graphs of 100, 1,000 and 10,000 resources,
//!    on an empty state (graph + diff) and on a fully recorded one (graph +
//!    refresh of every resource + diff).
//! 2. Apply wall time divided by the graph's critical path (target ≤ 1.05)
//!    and by the same apply at parallelism 1, for the vanilla profile's
//!    graph shape with its create times scaled down 100×, and for a wide
//!    synthetic graph with random delays.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{layered, TestResource, World};
use kfaws::engine::progress::Silent;
use kfaws::engine::SharedStore;
use kfaws::graph::Dag;
use kfaws::resource::{Inputs, Resource};
use kfaws::state::store::StateStore;
use kfaws::state::{spec_hash, ResourceState, State, Status};
use tokio_util::sync::CancellationToken;

async fn time_plan(world: &World, desired: &[Arc<dyn Resource>], state: &State) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        let (plan, _) = common::plan(world, desired, state, false, &[]).await;
        best = best.min(t0.elapsed());
        assert_eq!(plan.changes.len(), desired.len());
    }
    best
}

/// A state recording every resource as created, with its object in the world.
async fn recorded(desired: &[Arc<dyn Resource>]) -> State {
    let mut state = State::new("bench");
    state.serial = 1;
    let mut outputs = BTreeMap::new();
    for r in desired {
        let token = uuid::Uuid::new_v4().to_string();
        let inputs = Inputs(
            r.dependencies()
                .into_iter()
                .map(|d| {
                    let o = outputs.get(&d).cloned().unwrap_or_default();
                    (d, o)
                })
                .collect(),
        );
        let applied = r.create(&token, &inputs).await.unwrap();
        outputs.insert(r.address().clone(), applied.outputs.clone());
        let spec = r.spec();
        state.resources.insert(
            r.address().clone(),
            ResourceState {
                kind: r.kind().into(),
                status: Status::Created,
                physical_id: Some(applied.physical_id),
                idempotency_token: Some(token),
                spec_hash: spec_hash(&spec),
                spec,
                outputs: applied.outputs,
                dependencies: r.dependencies(),
                updating: None,
                inputs_hash: None,
                updated_at: chrono::Utc::now(),
            },
        );
    }
    state
}

async fn plan_bench() {
    println!("Plan time (best of 3), synthetic layered graphs, 20 resources per layer:");
    println!(
        "{:>10}  {:>14}  {:>18}  {:>14}",
        "resources", "empty state", "recorded+refresh", "per resource"
    );
    for n in [100usize, 1_000, 10_000] {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path());
        let desired = layered(&world, n / 20, 20, Duration::ZERO);
        let empty = time_plan(&world, &desired, &State::new("bench")).await;
        let state = recorded(&desired).await;
        let full = time_plan(&world, &desired, &state).await;
        println!(
            "{n:>10}  {:>12.1}ms  {:>16.1}ms  {:>12.1}µs",
            empty.as_secs_f64() * 1e3,
            full.as_secs_f64() * 1e3,
            full.as_secs_f64() * 1e6 / n as f64
        );
    }
}

/// The vanilla profile's graph (DESIGN.md §3) with typical create times in
/// seconds (EKS control plane ~10 min, managed node group ~5 min, NAT
/// gateway in the network stack ~4 min, ...).
const VANILLA: &[(&str, &[&str], u64)] = &[
    ("stack.network", &[], 240),
    ("stack.iam", &[], 60),
    ("eks.cluster", &["stack.network", "stack.iam"], 600),
    ("eks.nodegroup.cpu", &["eks.cluster"], 300),
    ("iam.oidc", &["eks.cluster"], 10),
    ("stack.irsa", &["iam.oidc"], 60),
    ("stack.storage", &[], 30),
    ("stack.efs", &["stack.network"], 120),
    ("k8s.efs-csi", &["eks.nodegroup.cpu", "stack.irsa"], 60),
    ("k8s.efs-storage", &["k8s.efs-csi", "stack.efs"], 10),
    ("k8s.kubeflow", &["eks.nodegroup.cpu"], 300),
    ("k8s.training-operator", &["k8s.kubeflow"], 60),
    ("k8s.user-namespace", &["k8s.kubeflow", "stack.irsa"], 30),
];

async fn apply_wall(desired: &[Arc<dyn Resource>], parallelism: usize) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let world = World::new(&dir.path().join("world"));
    let store = SharedStore::new(StateStore::open(&dir.path().join("state"), "ml").unwrap());
    let t0 = Instant::now();
    let report = common::plan_and_apply(
        &world,
        desired,
        &store,
        false,
        parallelism,
        Arc::new(Silent),
        CancellationToken::new(),
    )
    .await;
    assert!(report.succeeded());
    t0.elapsed()
}

async fn apply_bench(label: &str, desired: Vec<Arc<dyn Resource>>) {
    let dag = Dag::new(
        desired
            .iter()
            .map(|r| (r.address().clone(), r.dependencies())),
    )
    .unwrap();
    let estimates: BTreeMap<_, _> = desired
        .iter()
        .map(|r| (r.address().clone(), r.estimate()))
        .collect();
    let critical = dag.critical_path(|a| estimates[a]);
    let serial: Duration = estimates.values().sum();
    let wall = apply_wall(&desired, 10).await;
    let wall_unbounded = apply_wall(&desired, desired.len()).await;
    let wall_p1 = apply_wall(&desired, 1).await;
    println!(
        "{label}: {} resources, critical path {:.2}s ({} steps), sum of delays {:.2}s",
        desired.len(),
        critical.total.as_secs_f64(),
        critical.path.len(),
        serial.as_secs_f64()
    );
    println!(
        "  parallelism 10: wall {:.2}s, wall / critical path = {:.3} (target <= 1.05)",
        wall.as_secs_f64(),
        wall.as_secs_f64() / critical.total.as_secs_f64()
    );
    println!(
        "  parallelism {} (unbounded): wall {:.2}s, wall / critical path = {:.3} (the engine's own overhead)",
        desired.len(),
        wall_unbounded.as_secs_f64(),
        wall_unbounded.as_secs_f64() / critical.total.as_secs_f64()
    );
    println!(
        "  parallelism 1:  wall {:.2}s, wall(p=10) / wall(p=1) = {:.3}",
        wall_p1.as_secs_f64(),
        wall.as_secs_f64() / wall_p1.as_secs_f64()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is a filter we do not support.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        plan_bench().await;
        println!();
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(dir.path());
        let vanilla: Vec<Arc<dyn Resource>> = VANILLA
            .iter()
            .map(|(a, deps, secs)| {
                Arc::new(TestResource::new(
                    &world,
                    a,
                    deps,
                    Duration::from_millis(secs * 10),
                )) as Arc<dyn Resource>
            })
            .collect();
        apply_bench("vanilla graph, create times scaled 1/100", vanilla).await;
        let mut rng = fastrand::Rng::with_seed(7);
        let wide: Vec<Arc<dyn Resource>> = layered(&world, 8, 10, Duration::ZERO)
            .into_iter()
            .map(|r| {
                let deps: Vec<String> = r.dependencies().iter().map(ToString::to_string).collect();
                let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
                let delay = Duration::from_millis(rng.u64(100..600));
                Arc::new(TestResource::new(
                    &world,
                    r.address().as_str(),
                    &deps,
                    delay,
                )) as Arc<dyn Resource>
            })
            .collect();
        apply_bench("synthetic 8 layers x 10, delays 100-600 ms", wide).await;
    });
}
