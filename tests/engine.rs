//! The engine end to end with in-process resources: plan, apply, resume,
//! drift, destroy, parallelism, failures and timeouts.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{layered, Faults, TestResource, World};
use kfaws::address::Address;
use kfaws::engine::progress::Progress;
use kfaws::engine::{ApplyReport, Outcome, SharedStore};
use kfaws::plan::{Action, Handles, Plan, Step};
use kfaws::resource::Resource;
use kfaws::state::store::StateStore;
use kfaws::state::Status;
use tokio_util::sync::CancellationToken;

fn a(s: &str) -> Address {
    Address::new(s).unwrap()
}

struct Env {
    _dir: tempfile::TempDir,
    world: World,
    store: SharedStore,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(&dir.path().join("world"));
        let store = StateStore::open(&dir.path().join("state"), "ml").unwrap();
        Self {
            _dir: dir,
            world,
            store: SharedStore::new(store),
        }
    }

    async fn plan(
        &self,
        desired: &[Arc<dyn Resource>],
        destroy: bool,
        targets: &[Address],
    ) -> (Plan, Handles) {
        let state = self.store.read(Clone::clone);
        common::plan(&self.world, desired, &state, destroy, targets).await
    }

    async fn run(
        &self,
        desired: &[Arc<dyn Resource>],
        destroy: bool,
        parallelism: usize,
    ) -> ApplyReport {
        self.run_with(
            desired,
            destroy,
            parallelism,
            Arc::new(kfaws::engine::progress::Silent),
        )
        .await
    }

    async fn run_with(
        &self,
        desired: &[Arc<dyn Resource>],
        destroy: bool,
        parallelism: usize,
        progress: Arc<dyn Progress>,
    ) -> ApplyReport {
        common::plan_and_apply(
            &self.world,
            desired,
            &self.store,
            destroy,
            parallelism,
            progress,
            CancellationToken::new(),
        )
        .await
    }

    fn status(&self, address: &str) -> Option<Status> {
        self.store
            .read(|s| s.resources.get(&a(address)).map(|r| r.status))
    }
}

fn actions(plan: &Plan) -> Vec<(String, Action)> {
    plan.changes
        .iter()
        .map(|c| (c.address.to_string(), c.action))
        .collect()
}

#[derive(Default)]
struct Concurrency {
    now: AtomicUsize,
    peak: AtomicUsize,
    order: Mutex<Vec<String>>,
    done: Mutex<Vec<String>>,
}

impl Progress for Concurrency {
    fn started(&self, address: &Address, _: Step) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(n, Ordering::SeqCst);
        self.order.lock().unwrap().push(address.to_string());
    }
    fn finished(&self, address: &Address, _: Step, _: &Outcome, _: Duration) {
        self.now.fetch_sub(1, Ordering::SeqCst);
        self.done.lock().unwrap().push(address.to_string());
    }
}

#[tokio::test]
async fn apply_creates_in_dependency_order_and_a_second_plan_is_all_noop() {
    let env = Env::new();
    let desired = layered(&env.world, 3, 3, Duration::from_millis(5));
    let progress = Arc::new(Concurrency::default());
    let report = env.run_with(&desired, false, 10, progress.clone()).await;
    assert!(report.succeeded(), "{report:?}");
    let order = progress.order.lock().unwrap().clone();
    for r in &desired {
        let pos = order
            .iter()
            .position(|x| x == r.address().as_str())
            .unwrap();
        for d in r.dependencies() {
            let dp = order.iter().position(|x| x == d.as_str()).unwrap();
            assert!(dp < pos, "{d} must start before {}", r.address());
        }
        assert_eq!(env.world.ever_created(r.address()), 1);
        assert_eq!(env.status(r.address().as_str()), Some(Status::Created));
    }
    let (plan, _) = env.plan(&desired, false, &[]).await;
    assert!(!plan.has_changes(), "{:?}", actions(&plan));
    assert!(plan.changes.iter().all(|c| c.action == Action::NoOp));
}

#[tokio::test]
async fn dependants_receive_their_dependencies_outputs() {
    let env = Env::new();
    let desired: Vec<Arc<dyn Resource>> = vec![
        Arc::new(TestResource::new(&env.world, "net", &[], Duration::ZERO)),
        Arc::new(TestResource::new(
            &env.world,
            "cluster",
            &["net"],
            Duration::ZERO,
        )),
    ];
    assert!(env.run(&desired, false, 2).await.succeeded());
    let net_id = env.world.live(&a("net"))[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches("net--")
        .trim_end_matches(".json")
        .to_string();
    let obj: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&env.world.live(&a("cluster"))[0]).unwrap()).unwrap();
    assert_eq!(obj["inputs"]["net"], serde_json::json!(net_id));
}

#[derive(Default)]
struct Finished(Mutex<Vec<(String, Step)>>);

impl Progress for Finished {
    fn started(&self, _: &Address, _: Step) {}
    fn finished(&self, address: &Address, step: Step, _: &Outcome, _: Duration) {
        self.0.lock().unwrap().push((address.to_string(), step));
    }
}

#[tokio::test]
async fn a_dependant_is_re_applied_only_when_its_dependencies_outputs_change() {
    let env = Env::new();
    let net = |label: &str, size: u64| {
        let mut r = TestResource::new(&env.world, "net", &[], Duration::ZERO);
        r.spec = serde_json::json!({"size": size, "label": label});
        Arc::new(r) as Arc<dyn Resource>
    };
    let cluster: Arc<dyn Resource> = Arc::new(TestResource::new(
        &env.world,
        "cluster",
        &["net"],
        Duration::ZERO,
    ));
    assert!(env
        .run(&[net("a", 1), cluster.clone()], false, 2)
        .await
        .succeeded());

    // An in-place update of net keeps its outputs: the cluster's update is
    // planned as conditional and skipped.
    let desired = [net("b", 1), cluster.clone()];
    let (plan, _) = env.plan(&desired, false, &[]).await;
    let c = plan
        .changes
        .iter()
        .find(|c| c.address == a("cluster"))
        .unwrap();
    assert_eq!((c.action, c.conditional), (Action::Update, true));
    assert_eq!((plan.summary().change, plan.summary().conditional), (1, 1));
    let seen = Arc::new(Finished::default());
    let report = env.run_with(&desired, false, 2, seen.clone()).await;
    assert!(report.succeeded(), "{report:?}");
    let by: BTreeMap<String, Action> = report
        .results
        .iter()
        .map(|r| (r.address.to_string(), r.action))
        .collect();
    assert_eq!(by["net"], Action::Update);
    assert_eq!(
        by["cluster"],
        Action::NoOp,
        "skipped: net's outputs are unchanged"
    );
    assert!(seen
        .0
        .lock()
        .unwrap()
        .contains(&("cluster".into(), Step::NoOp)));

    // Replacing net gives it a new id: the cluster is re-applied with it.
    let desired = [net("b", 2), cluster.clone()];
    let report = env.run(&desired, false, 2).await;
    let by: BTreeMap<String, Action> = report
        .results
        .iter()
        .map(|r| (r.address.to_string(), r.action))
        .collect();
    assert_eq!(by["net"], Action::Replace);
    assert_eq!(by["cluster"], Action::Update);
    let (plan, _) = env.plan(&desired, false, &[]).await;
    assert!(!plan.has_changes(), "{:?}", actions(&plan));
}

#[tokio::test]
async fn parallelism_is_bounded_and_used() {
    let env = Env::new();
    let (n, p, delay) = (20usize, 5usize, Duration::from_millis(200));
    let desired: Vec<Arc<dyn Resource>> = (0..n)
        .map(|i| {
            Arc::new(TestResource::new(&env.world, &format!("r{i}"), &[], delay))
                as Arc<dyn Resource>
        })
        .collect();
    let progress = Arc::new(Concurrency::default());
    let t0 = Instant::now();
    let report = env.run_with(&desired, false, p, progress.clone()).await;
    let took = t0.elapsed();
    assert!(report.succeeded());
    assert_eq!(progress.peak.load(Ordering::SeqCst), p, "peak concurrency");
    let waves = n.div_ceil(p) as u32;
    assert!(took >= delay * waves, "{took:?} < {waves} delays");
    // Generous upper bound: state writes (fsync) and a loaded machine add
    // time, but a serial run would take 20 delays.
    assert!(
        took < delay * (waves + 4),
        "{took:?} is far above {waves} delays"
    );
}

#[tokio::test]
async fn a_failure_skips_exactly_its_dependants_and_taints_itself_then_reapply_recovers() {
    let env = Env::new();
    let desired: Vec<Arc<dyn Resource>> = vec![
        Arc::new(TestResource::new(&env.world, "a", &[], Duration::ZERO)),
        Arc::new(TestResource::new(&env.world, "b", &["a"], Duration::ZERO)),
        Arc::new(TestResource::new(&env.world, "c", &["b"], Duration::ZERO)),
        Arc::new(TestResource::new(
            &env.world,
            "x",
            &[],
            Duration::from_millis(50),
        )),
        Arc::new(TestResource::new(&env.world, "y", &["x"], Duration::ZERO)),
    ];
    env.world.set_faults(&Faults {
        fail_create: ["a".to_string()].into(),
        ..Faults::default()
    });
    let report = env.run(&desired, false, 4).await;
    assert!(!report.succeeded());
    let outcome = |s: &str| {
        report
            .results
            .iter()
            .find(|r| r.address.as_str() == s)
            .unwrap()
            .outcome
            .clone()
    };
    assert!(matches!(outcome("a"), Outcome::Failed(m) if m.contains("injected failure")));
    assert_eq!(outcome("b"), Outcome::UpstreamFailed(a("a")));
    assert_eq!(outcome("c"), Outcome::UpstreamFailed(a("a")));
    assert_eq!(outcome("x"), Outcome::Succeeded);
    assert_eq!(outcome("y"), Outcome::Succeeded);
    assert_eq!(env.status("a"), Some(Status::Tainted));
    assert_eq!(env.status("b"), None);
    let table = kfaws::engine::progress::report_table(&report);
    assert_eq!(
        table.matches("upstream failed: b, c not attempted").count(),
        1,
        "{table}"
    );

    env.world.set_faults(&Faults::default());
    let (plan, _) = env.plan(&desired, false, &[]).await;
    assert_eq!(
        actions(&plan),
        [
            ("a".into(), Action::Create),
            ("b".into(), Action::Create),
            ("c".into(), Action::Create),
            ("x".into(), Action::NoOp),
            ("y".into(), Action::NoOp)
        ],
        "a failed before creating anything, so it is gone and simply created"
    );
    assert!(env.run(&desired, false, 4).await.succeeded());
    for r in ["a", "b", "c", "x", "y"] {
        assert_eq!(env.world.ever_created(&a(r)), 1, "{r}");
    }
}

#[tokio::test]
async fn a_create_that_times_out_is_tainted_and_replaced_on_the_next_apply() {
    // Case C1: a component never becomes ready; destroy removes all that
    // started; apply again resumes from the failed node.
    let env = Env::new();
    let mut stuck = TestResource::new(
        &env.world,
        "k8s.kubeflow",
        &["eks.cluster"],
        Duration::from_millis(10),
    );
    stuck.timeout = Duration::from_millis(300);
    let desired: Vec<Arc<dyn Resource>> = vec![
        Arc::new(TestResource::new(
            &env.world,
            "eks.cluster",
            &[],
            Duration::ZERO,
        )),
        Arc::new(stuck),
        Arc::new(TestResource::new(
            &env.world,
            "k8s.training-operator",
            &["k8s.kubeflow"],
            Duration::ZERO,
        )),
    ];
    env.world.set_faults(&Faults {
        hang_create: ["k8s.kubeflow".to_string()].into(),
        ..Faults::default()
    });
    let report = env.run(&desired, false, 4).await;
    let failed = report
        .results
        .iter()
        .find(|r| r.address.as_str() == "k8s.kubeflow")
        .unwrap();
    assert!(
        matches!(&failed.outcome, Outcome::Failed(m) if m.contains("timed out")),
        "{failed:?}"
    );
    assert_eq!(env.status("k8s.kubeflow"), Some(Status::Tainted));
    assert_eq!(env.world.live(&a("k8s.kubeflow")).len(), 0);

    // Resume: the stuck one is replaced, its dependant created.
    env.world.set_faults(&Faults::default());
    let (plan, _) = env.plan(&desired, false, &[]).await;
    assert_eq!(
        plan.changes
            .iter()
            .find(|c| c.address.as_str() == "k8s.kubeflow")
            .unwrap()
            .action,
        Action::Create
    );
    assert!(env.run(&desired, false, 4).await.succeeded());

    // Destroy removes everything.
    let report = env.run(&desired, true, 4).await;
    assert!(report.succeeded(), "{report:?}");
    assert!(env.store.read(|s| s.resources.is_empty()));
    for r in &desired {
        assert!(env.world.live(r.address()).is_empty());
    }
}

#[tokio::test]
async fn a_tainted_resource_that_exists_is_replaced() {
    let env = Env::new();
    let desired: Vec<Arc<dyn Resource>> = vec![Arc::new(TestResource::new(
        &env.world,
        "a",
        &[],
        Duration::ZERO,
    ))];
    assert!(env.run(&desired, false, 1).await.succeeded());
    env.store
        .persist(|s| s.resources.get_mut(&a("a")).unwrap().status = Status::Tainted)
        .await
        .unwrap();
    let (plan, _) = env.plan(&desired, false, &[]).await;
    assert_eq!(actions(&plan), [("a".into(), Action::Replace)]);
    assert!(env.run(&desired, false, 1).await.succeeded());
    assert_eq!(env.world.live(&a("a")).len(), 1);
    assert_eq!(
        env.world.ever_created(&a("a")),
        2,
        "the old object was deleted, a new one made"
    );
}

/// A delete refused before anything was deleted (DeleteCluster with node
/// groups attached) leaves the entry as it was, not `deleting`: the next
/// plan must not take a live resource for a half-finished delete, which it
/// would replace.
#[tokio::test]
async fn a_delete_refused_before_anything_was_deleted_keeps_the_entry_as_it_was() {
    let env = Env::new();
    let desired: Vec<Arc<dyn Resource>> = vec![Arc::new(TestResource::new(
        &env.world,
        "a",
        &[],
        Duration::ZERO,
    ))];
    assert!(env.run(&desired, false, 2).await.succeeded());
    env.world.set_faults(&Faults {
        refuse_delete: ["a".to_string()].into(),
        ..Faults::default()
    });
    assert!(!env.run(&desired, true, 2).await.succeeded());
    assert_eq!(env.status("a"), Some(Status::Created));
    assert_eq!(env.world.live(&a("a")).len(), 1, "still there");
    let (plan, _) = env.plan(&desired, false, &[]).await;
    assert_eq!(actions(&plan), [("a".into(), Action::NoOp)]);
    env.world.set_faults(&Faults::default());
    assert!(env.run(&desired, true, 2).await.succeeded());
    assert_eq!(env.status("a"), None);
}

/// A create refused before anything was made (another holds the name)
/// records nothing: no tainted entry, which the next plan would replace by
/// deleting whatever holds the name by then. Refused in a replacement, the
/// old object is gone and so is its entry.
#[tokio::test]
async fn a_create_refused_before_anything_was_made_leaves_no_tainted_entry() {
    let env = Env::new();
    let desired: Vec<Arc<dyn Resource>> = vec![
        Arc::new(TestResource::new(&env.world, "a", &[], Duration::ZERO)),
        Arc::new(TestResource::new(&env.world, "b", &[], Duration::ZERO)),
    ];
    env.world.set_faults(&Faults {
        refuse_create: ["a".to_string()].into(),
        ..Faults::default()
    });
    let report = env.run(&desired, false, 2).await;
    assert!(!report.succeeded());
    assert_eq!(
        env.status("a"),
        None,
        "nothing recorded for the refused create"
    );
    assert_eq!(env.status("b"), Some(Status::Created));
    let (plan, _) = env.plan(&desired, false, &[]).await;
    assert_eq!(
        actions(&plan),
        [("a".into(), Action::Create), ("b".into(), Action::NoOp)]
    );

    env.world.set_faults(&Faults::default());
    assert!(env.run(&desired, false, 2).await.succeeded());
    env.store
        .persist(|s| s.resources.get_mut(&a("a")).unwrap().status = Status::Tainted)
        .await
        .unwrap();
    env.world.set_faults(&Faults {
        refuse_create: ["a".to_string()].into(),
        ..Faults::default()
    });
    assert!(!env.run(&desired, false, 2).await.succeeded());
    assert!(
        env.world.live(&a("a")).is_empty(),
        "the tainted object was deleted"
    );
    assert_eq!(
        env.status("a"),
        None,
        "and its entry with it; nothing new recorded"
    );
}

#[tokio::test]
async fn drift_is_detected_and_repaired() {
    let env = Env::new();
    let desired: Vec<Arc<dyn Resource>> = vec![
        Arc::new(TestResource::new(&env.world, "a", &[], Duration::ZERO)),
        Arc::new(TestResource::new(&env.world, "b", &[], Duration::ZERO)),
        Arc::new(TestResource::new(&env.world, "c", &[], Duration::ZERO)),
    ];
    assert!(env.run(&desired, false, 3).await.succeeded());
    env.world
        .tamper(&a("a"), "label", serde_json::json!("edited by hand"));
    env.world.tamper(&a("b"), "size", serde_json::json!(9));
    env.world.remove_out_of_band(&a("c"));
    let (plan, _) = env.plan(&desired, false, &[]).await;
    assert_eq!(
        actions(&plan),
        [
            ("a".into(), Action::Update),
            ("b".into(), Action::Replace),
            ("c".into(), Action::Create)
        ]
    );
    assert!(plan.changes.iter().all(|c| c.drift));
    assert!(env.run(&desired, false, 3).await.succeeded());
    let (plan, _) = env.plan(&desired, false, &[]).await;
    assert!(!plan.has_changes(), "{:?}", actions(&plan));
}

#[tokio::test]
async fn a_field_changed_outside_kfaws_to_the_desired_value_is_recorded_without_a_call() {
    let env = Env::new();
    let labelled = |label: &str| -> Arc<dyn Resource> {
        let mut r = TestResource::new(&env.world, "a", &[], Duration::ZERO);
        r.spec["label"] = serde_json::json!(label);
        Arc::new(r)
    };
    assert!(env.run(&[labelled("a")], false, 1).await.succeeded());
    // Someone relabels the object by hand, and the config follows suit.
    env.world
        .tamper(&a("a"), "label", serde_json::json!("by hand"));
    let desired = vec![labelled("by hand")];
    let (plan, _) = env.plan(&desired, false, &[]).await;
    assert!(!plan.has_changes(), "{:?}", actions(&plan));
    let c = &plan.changes[0];
    assert_eq!((c.action, c.drift), (Action::NoOp, false));
    assert_eq!(c.refreshed.len(), 1, "{c:?}");
    assert_eq!(c.refreshed[0].field, "label");
    assert_eq!(c.refreshed[0].before, Some(serde_json::json!("a")));
    let live = env.world.live(&a("a"));
    let modified = std::fs::metadata(&live[0]).unwrap().modified().unwrap();

    let report = env.run(&desired, false, 1).await;
    assert!(
        report.succeeded() && report.results.is_empty(),
        "{report:?}"
    );
    assert_eq!(report.refreshed, [a("a")]);
    assert_eq!(
        std::fs::metadata(&live[0]).unwrap().modified().unwrap(),
        modified,
        "no call touched the object"
    );
    let recorded = env.store.read(|s| s.resources[&a("a")].clone());
    assert_eq!(recorded.spec["label"], "by hand");
    assert_eq!(
        recorded.spec_hash,
        kfaws::state::spec_hash(&desired[0].spec())
    );
    let (plan, _) = env.plan(&desired, false, &[]).await;
    assert!(plan.refreshes().next().is_none(), "{plan:?}");
    // The next edit of the field is the config's, not drift.
    let (plan, _) = env.plan(&[labelled("third")], false, &[]).await;
    assert_eq!(plan.changes[0].action, Action::Update);
    assert!(!plan.changes[0].drift, "{:?}", plan.changes[0]);
    assert_eq!(plan.changes[0].reason, "config changed: label");
}

#[tokio::test]
async fn a_resource_removed_from_the_config_is_deleted_after_its_dependants() {
    let env = Env::new();
    let full: Vec<Arc<dyn Resource>> = vec![
        Arc::new(TestResource::new(&env.world, "a", &[], Duration::ZERO)),
        Arc::new(TestResource::new(&env.world, "b", &["a"], Duration::ZERO)),
        Arc::new(TestResource::new(&env.world, "keep", &[], Duration::ZERO)),
    ];
    assert!(env.run(&full, false, 3).await.succeeded());
    let fewer = vec![full[2].clone()];
    let progress = Arc::new(Concurrency::default());
    let report = env.run_with(&fewer, false, 3, progress.clone()).await;
    assert!(report.succeeded());
    assert_eq!(*progress.order.lock().unwrap(), ["b", "a"]);
    assert!(env.world.live(&a("a")).is_empty() && env.world.live(&a("b")).is_empty());
    assert_eq!(env.world.live(&a("keep")).len(), 1);
}

/// `b` used `a`; the config drops `a` and `b`'s dependency on it. `b`'s update (slow) must
/// finish before `a` is deleted: until then `b` still uses `a`.
#[tokio::test]
async fn a_dependency_removed_from_the_config_is_deleted_after_its_dependants_update() {
    let env = Env::new();
    let first: Vec<Arc<dyn Resource>> = vec![
        Arc::new(TestResource::new(&env.world, "a", &[], Duration::ZERO)),
        Arc::new(TestResource::new(
            &env.world,
            "b",
            &["a"],
            Duration::from_millis(300),
        )),
    ];
    assert!(env.run(&first, false, 2).await.succeeded());
    let without_a: Vec<Arc<dyn Resource>> = vec![Arc::new(TestResource::new(
        &env.world,
        "b",
        &[],
        Duration::from_millis(300),
    ))];
    let (plan, _) = env.plan(&without_a, false, &[]).await;
    assert_eq!(
        actions(&plan),
        [
            ("a".to_string(), Action::Delete),
            ("b".to_string(), Action::Update)
        ]
    );
    assert_eq!(plan.changes[1].released, [a("a")]);
    let progress = Arc::new(Concurrency::default());
    let report = env.run_with(&without_a, false, 2, progress.clone()).await;
    assert!(report.succeeded(), "{report:?}");
    assert_eq!(*progress.done.lock().unwrap(), ["b", "a"]);
    assert_eq!(*progress.order.lock().unwrap(), ["b", "a"]);
    assert!(env.world.live(&a("a")).is_empty());
    assert_eq!(env.world.live(&a("b")).len(), 1);
}

/// `x` used `d`, which used `y`; the config drops `d` and makes `x` use `y` directly. With `y`
/// unchanged, `x`'s update goes before `d`'s delete. With `y` changed too, `d` must go before
/// `y`'s update (it used `y`) and `x`'s update after it (it uses `y`): `d` goes first, as
/// without the config's move, and the plan is no cycle.
#[tokio::test]
async fn a_dependency_moved_past_a_removed_one_orders_without_a_cycle() {
    for y_changes in [false, true] {
        let env = Env::new();
        let slow = Duration::from_millis(200);
        let first: Vec<Arc<dyn Resource>> = vec![
            Arc::new(TestResource::new(&env.world, "y", &[], Duration::ZERO)),
            Arc::new(TestResource::new(&env.world, "d", &["y"], Duration::ZERO)),
            Arc::new(TestResource::new(&env.world, "x", &["d"], slow)),
        ];
        assert!(env.run(&first, false, 3).await.succeeded());
        let mut y = TestResource::new(&env.world, "y", &[], slow);
        if y_changes {
            y.spec["label"] = serde_json::json!("changed");
        }
        let moved: Vec<Arc<dyn Resource>> = vec![
            Arc::new(y),
            Arc::new(TestResource::new(&env.world, "x", &["y"], slow)),
        ];
        let (plan, _) = env.plan(&moved, false, &[]).await;
        let y_action = if y_changes {
            Action::Update
        } else {
            Action::NoOp
        };
        assert_eq!(
            actions(&plan),
            [
                ("d".to_string(), Action::Delete),
                ("x".to_string(), Action::Update),
                ("y".to_string(), y_action)
            ]
        );
        plan.execution_graph().expect("no cycle");
        let progress = Arc::new(Concurrency::default());
        let report = env.run_with(&moved, false, 3, progress.clone()).await;
        assert!(report.succeeded(), "{report:?}");
        let done = progress.done.lock().unwrap().clone();
        match y_changes {
            false => assert_eq!(done, ["x", "d"]),
            true => assert_eq!(done, ["d", "y", "x"]),
        }
        assert!(env.world.live(&a("d")).is_empty());
    }
}

#[tokio::test]
async fn destroy_walks_the_reverse_order_and_twice_is_a_noop() {
    let env = Env::new();
    let desired = layered(&env.world, 3, 2, Duration::ZERO);
    assert!(env.run(&desired, false, 4).await.succeeded());
    let progress = Arc::new(Concurrency::default());
    assert!(env
        .run_with(&desired, true, 4, progress.clone())
        .await
        .succeeded());
    let order = progress.order.lock().unwrap().clone();
    for r in &desired {
        let pos = order
            .iter()
            .position(|x| x == r.address().as_str())
            .unwrap();
        for d in r.dependencies() {
            let dp = order.iter().position(|x| x == d.as_str()).unwrap();
            assert!(dp > pos, "{d} must be destroyed after {}", r.address());
        }
        assert!(env.world.live(r.address()).is_empty());
    }
    let (plan, _) = env.plan(&desired, true, &[]).await;
    assert!(plan.changes.is_empty() && !plan.has_changes());
}

#[tokio::test]
async fn targets_select_dependencies_for_apply_and_dependants_for_destroy() {
    let env = Env::new();
    let desired: Vec<Arc<dyn Resource>> = vec![
        Arc::new(TestResource::new(&env.world, "net", &[], Duration::ZERO)),
        Arc::new(TestResource::new(&env.world, "iam", &[], Duration::ZERO)),
        Arc::new(TestResource::new(
            &env.world,
            "cluster",
            &["net", "iam"],
            Duration::ZERO,
        )),
        Arc::new(TestResource::new(
            &env.world,
            "storage",
            &["net"],
            Duration::ZERO,
        )),
    ];
    let (plan, _) = env.plan(&desired, false, &[a("cluster")]).await;
    let names: Vec<String> = plan.changes.iter().map(|c| c.address.to_string()).collect();
    assert_eq!(names, ["cluster", "iam", "net"]);
    assert!(env.run(&desired, false, 4).await.succeeded());
    let (plan, _) = env.plan(&desired, true, &[a("net")]).await;
    let names: Vec<String> = plan.changes.iter().map(|c| c.address.to_string()).collect();
    assert_eq!(names, ["cluster", "net", "storage"]);
}

#[tokio::test]
async fn a_saved_plan_is_refused_once_the_state_moved() {
    let env = Env::new();
    let desired: Vec<Arc<dyn Resource>> = vec![Arc::new(TestResource::new(
        &env.world,
        "a",
        &[],
        Duration::ZERO,
    ))];
    let (plan, handles) = env.plan(&desired, false, &[]).await;
    let file = env._dir.path().join("plan.json");
    kfaws::plan::file::save(&plan, &file).unwrap();
    let loaded = kfaws::plan::file::load(&file).unwrap();
    assert_eq!(loaded, plan);
    let state = env.store.read(Clone::clone);
    kfaws::plan::file::check(&loaded, "123456789012", &state, &handles).unwrap();
    assert!(env.run(&desired, false, 1).await.succeeded());
    let state = env.store.read(Clone::clone);
    let err = kfaws::plan::file::check(&loaded, "123456789012", &state, &handles).unwrap_err();
    assert!(err.to_string().contains("stale"), "{err}");
}

/// An interrupt while every job has already started: a job that then fails
/// makes the run interrupted (exit 130), one that succeeds leaves it
/// succeeded.
#[tokio::test]
async fn an_interrupt_after_every_job_started_is_reported_only_when_one_then_fails() {
    for fails in [true, false] {
        let env = Env::new();
        let desired: Vec<Arc<dyn Resource>> = vec![Arc::new(TestResource::new(
            &env.world,
            "slow",
            &[],
            Duration::from_millis(400),
        ))];
        if fails {
            env.world.set_faults(&Faults {
                fail_create: ["slow".to_string()].into(),
                ..Faults::default()
            });
        }
        let cancel = CancellationToken::new();
        let signal = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            signal.cancel();
        });
        let report = common::plan_and_apply(
            &env.world,
            &desired,
            &env.store,
            false,
            1,
            Arc::new(kfaws::engine::progress::Silent),
            cancel,
        )
        .await;
        assert_eq!(report.interrupted, fails, "fails: {fails}");
        assert_eq!(report.succeeded(), !fails, "fails: {fails}");
    }
}
