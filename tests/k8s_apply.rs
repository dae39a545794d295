//! Applying manifest bundles against a real kube-apiserver with etcd and
//! kube-controller-manager's namespace, garbage-collector and PVC/PV
//! protection controllers (tests/apiserver): phases, ApplySet prune and
//! destroy, webhooks, removed APIs, strict YAML and finalizers (cases C6, C7,
//! C8, C9, C10, C22).
//!
//! One API server serves every test of this binary; each test uses its own
//! fixture under tests/fixtures/manifests/ with its own namespaces, CRD
//! groups and bundle name.

#[path = "common/apiserver.rs"]
mod apiserver;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kfaws::k8s::applyset::{self, ApplySet};
use kfaws::k8s::bundle::BundleError;
use kfaws::k8s::delete::{DeleteError, Remaining};
use kfaws::k8s::discovery::Served;
use kfaws::k8s::{Applier, ApplyError, ApplyOptions, Bundle, ObjectRef, Outcome};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/manifests")
        .join(name)
}

fn bundle(name: &str, file: &str) -> Bundle {
    Bundle::from_path(name, &fixture(file)).unwrap_or_else(|e| panic!("{e}"))
}

async fn client() -> Client {
    apiserver::env().client().await
}

fn applier(client: &Client, timeout: Duration) -> Applier {
    Applier::with_options(
        client.clone(),
        ApplyOptions {
            timeout,
            ..ApplyOptions::default()
        },
    )
}

/// The live object, read through its kind's preferred version.
async fn live(client: &Client, served: &Served, o: &ObjectRef) -> Option<DynamicObject> {
    let (ar, _) = served
        .preferred(&o.gk)
        .unwrap_or_else(|| panic!("{} is not served", o.gk));
    let api: Api<DynamicObject> = match &o.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    api.get_opt(&o.name).await.unwrap()
}

async fn resource_versions(client: &Client, objects: &[ObjectRef]) -> BTreeMap<ObjectRef, String> {
    let served = Served::fetch(client).await.unwrap();
    let mut out = BTreeMap::new();
    for o in objects {
        let obj = live(client, &served, o)
            .await
            .unwrap_or_else(|| panic!("{o} is missing"));
        out.insert(o.clone(), obj.metadata.resource_version.unwrap());
    }
    out
}

/// Every object in the cluster carrying the ApplySet label `id`, of any
/// kind, with its kind (list items carry none).
async fn labelled(client: &Client, id: &str) -> Vec<(String, DynamicObject)> {
    let served = Served::fetch(client).await.unwrap();
    let lp = ListParams::default().labels(&format!("{}={id}", applyset::PART_OF));
    let mut out = Vec::new();
    for (ar, _) in served.listable() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
        out.extend(
            api.list(&lp)
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|o| (ar.kind.clone(), o)),
        );
    }
    out
}

#[tokio::test]
async fn c8_a_crd_and_its_instance_in_one_stream_apply_in_one_run() {
    let client = client().await;
    let b = bundle("c8", "c8-crd-and-instance.yaml");
    assert_eq!(
        b.objects[0].kind, "Gadget",
        "the instance comes before its CRD in the stream"
    );
    let report = applier(&client, Duration::from_secs(120))
        .apply(&b)
        .await
        .unwrap();
    assert_eq!(report.objects.len(), 4);
    assert!(
        report.objects.iter().all(|(_, o)| *o == Outcome::Created),
        "{report:?}"
    );

    let served = Served::fetch(&client).await.unwrap();
    let gadget = report
        .objects
        .iter()
        .find(|(o, _)| o.gk.kind == "Gadget")
        .unwrap();
    let obj = live(&client, &served, &gadget.0)
        .await
        .expect("the Gadget exists");
    assert_eq!(obj.data["spec"]["size"], 3);
    assert_eq!(
        obj.metadata.labels.unwrap()[applyset::PART_OF],
        report.applyset_id
    );
    let fm = obj.metadata.managed_fields.unwrap();
    assert!(fm
        .iter()
        .any(|e| e.manager.as_deref() == Some("kfaws") && e.operation.as_deref() == Some("Apply")));
}

#[tokio::test]
async fn reapplying_an_unchanged_bundle_changes_no_resource_version() {
    let client = client().await;
    let b = bundle("reapply", "reapply");
    assert_eq!(
        b.objects[0].kind, "Namespace",
        "files are read in name order"
    );
    let first = applier(&client, Duration::from_secs(120))
        .apply(&b)
        .await
        .unwrap();
    let objects: Vec<ObjectRef> = first.objects.iter().map(|(o, _)| o.clone()).collect();
    let before = resource_versions(&client, &objects).await;
    let parent: Api<ConfigMap> = Api::namespaced(client.clone(), "kfaws-system");
    let parent_rv = parent
        .get("reapply")
        .await
        .unwrap()
        .metadata
        .resource_version;

    // Every object sent again: the server itself finds nothing to change.
    let resend = Applier::with_options(
        client.clone(),
        ApplyOptions {
            skip_unchanged: false,
            ..ApplyOptions::default()
        },
    );
    let second = resend.apply(&b).await.unwrap();
    assert!(
        second.objects.iter().all(|(_, o)| *o == Outcome::Unchanged),
        "{second:?}"
    );
    assert_eq!(resource_versions(&client, &objects).await, before);

    // The default skips what it proves unchanged, with the same end state.
    let third = applier(&client, Duration::from_secs(120))
        .apply(&b)
        .await
        .unwrap();
    assert!(
        third.objects.iter().all(|(_, o)| *o == Outcome::Skipped),
        "{third:?}"
    );
    assert_eq!(resource_versions(&client, &objects).await, before);
    assert_eq!(
        parent
            .get("reapply")
            .await
            .unwrap()
            .metadata
            .resource_version,
        parent_rv
    );
    assert!(second.pruned.deleted.is_empty() && third.pruned.deleted.is_empty());
}

#[tokio::test]
async fn an_object_edited_by_someone_else_is_reapplied_not_skipped() {
    let client = client().await;
    let b = Bundle::from_sources(
        "drift",
        [(
            PathBuf::from("drift.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: drift, namespace: default}\ndata: {mode: fast}\n"
                .to_string(),
        )],
    )
    .unwrap();
    let a = applier(&client, Duration::from_secs(60));
    a.apply(&b).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.patch(
        "drift",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"mode": "slow"}})),
    )
    .await
    .unwrap();
    let report = a.apply(&b).await.unwrap();
    assert_eq!(report.objects[0].1, Outcome::Updated);
    assert_eq!(
        api.get("drift").await.unwrap().data.unwrap()["mode"],
        "fast"
    );
}

/// A Secret written with `stringData`, whose value someone else changed, is
/// applied again and gets its value back (the plan-level drift report of the
/// same edit is in tests/vanilla_k8s.rs).
#[tokio::test]
async fn a_secret_value_from_string_data_changed_by_someone_else_is_reapplied() {
    use k8s_openapi::api::core::v1::Secret;

    let client = client().await;
    let b = Bundle::from_sources(
        "secret-drift",
        [(
            PathBuf::from("secret.yaml"),
            "apiVersion: v1\nkind: Secret\nmetadata: {name: db-creds, namespace: default}\n\
             stringData: {password: first-value}\n"
                .to_string(),
        )],
    )
    .unwrap();
    let a = applier(&client, Duration::from_secs(60));
    a.apply(&b).await.unwrap();
    let api: Api<Secret> = Api::namespaced(client.clone(), "default");
    let value = |s: Secret| s.data.unwrap()["password"].0.clone();
    assert_eq!(value(api.get("db-creds").await.unwrap()), b"first-value");
    api.patch(
        "db-creds",
        &PatchParams::default(),
        &Patch::Merge(json!({"stringData": {"password": "changed-by-hand"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        value(api.get("db-creds").await.unwrap()),
        b"changed-by-hand"
    );
    let report = a.apply(&b).await.unwrap();
    assert_eq!(report.objects[0].1, Outcome::Updated);
    assert_eq!(value(api.get("db-creds").await.unwrap()), b"first-value");
}

/// An immutable field changed: a ConfigMap marked immutable is deleted and created again,
/// a PersistentVolumeClaim is not (its volume, and the data on it, could go with it): the
/// apply fails naming it, and the claim is the same object.
#[tokio::test]
async fn an_immutable_change_replaces_a_config_map_but_never_a_claim() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let client = client().await;
    let first = bundle("immutable", "immutable.yaml");
    let a = applier(&client, Duration::from_secs(60));
    a.apply(&first).await.unwrap();
    let changed = |kind: &str, pointer: &str, value: serde_json::Value| {
        let mut b = first.clone();
        for m in b.objects.iter_mut().filter(|m| m.kind == kind) {
            *m.object.pointer_mut(pointer).unwrap() = value.clone();
        }
        b
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "immutable");
    let before = config_maps.get("settings").await.unwrap().metadata.uid;
    let report = a
        .apply(&changed("ConfigMap", "/data/v", json!("2")))
        .await
        .unwrap();
    assert!(
        report
            .objects
            .iter()
            .any(|(o, outcome)| o.name == "settings" && *outcome == Outcome::Replaced),
        "{report:?}"
    );
    let after = config_maps.get("settings").await.unwrap();
    assert_ne!(after.metadata.uid, before);
    assert_eq!(after.data.unwrap()["v"], "2");

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "immutable");
    let uid = claims.get("data").await.unwrap().metadata.uid;
    let err = a
        .apply(&changed(
            "PersistentVolumeClaim",
            "/spec/storageClassName",
            json!("fast"),
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("PersistentVolumeClaim immutable/data")
            && err.contains(
                "kfaws does not delete and re-create a PersistentVolumeClaim to change it: its \
                 volume and the data on it may be deleted with it"
            ),
        "{err}"
    );
    let claim = claims.get("data").await.unwrap();
    assert_eq!(claim.metadata.uid, uid);
    assert!(claim.metadata.deletion_timestamp.is_none());
}

#[tokio::test]
async fn an_object_removed_from_the_bundle_is_pruned() {
    let client = client().await;
    let full = bundle("prune", "prune.yaml");
    let a = applier(&client, Duration::from_secs(120));
    a.apply(&full).await.unwrap();

    // Drop one ConfigMap, and the only Secret (its kind leaves the bundle too).
    let mut smaller = full.clone();
    smaller
        .objects
        .retain(|m| m.name != "leaving" && m.kind != "Secret");
    let report = a.apply(&smaller).await.unwrap();
    let mut pruned: Vec<String> = report
        .pruned
        .deleted
        .iter()
        .map(ToString::to_string)
        .collect();
    pruned.sort();
    assert_eq!(
        pruned,
        ["ConfigMap prune/leaving", "Secret prune/only-secret"]
    );

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "prune");
    assert!(cms.get_opt("leaving").await.unwrap().is_none());
    assert!(cms.get_opt("staying").await.unwrap().is_some());
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "prune");
    assert!(secrets.get_opt("only-secret").await.unwrap().is_none());
    let parent: Api<ConfigMap> = Api::namespaced(client.clone(), "kfaws-system");
    let annotations = parent
        .get("prune")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap();
    assert_eq!(
        annotations[applyset::CONTAINS_GROUP_KINDS],
        "ConfigMap,Namespace"
    );
}

/// The ApplySet parent deleted by hand, then an apply without one of the objects: the
/// members still carry the set's label, so the one that left is pruned all the same (not
/// left behind, labelled, where no later prune or destroy would look), and the rest are
/// not re-created.
#[tokio::test]
async fn an_object_removed_while_the_parent_is_gone_is_still_pruned() {
    let client = client().await;
    let full = bundle("orphan", "orphan.yaml");
    let a = applier(&client, Duration::from_secs(60));
    a.apply(&full).await.unwrap();
    let parents: Api<ConfigMap> = Api::namespaced(client.clone(), "kfaws-system");
    parents.delete("orphan", &Default::default()).await.unwrap();
    let mut smaller = full.clone();
    smaller.objects.retain(|m| m.name != "leaving");
    let report = a.apply(&smaller).await.unwrap();
    let pruned: Vec<String> = report
        .pruned
        .deleted
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(pruned, ["ConfigMap orphan/leaving"], "{report:?}");
    assert!(
        report
            .objects
            .iter()
            .all(|(_, outcome)| *outcome != Outcome::Created),
        "{report:?}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "orphan");
    assert!(cms.get_opt("leaving").await.unwrap().is_none());
    assert!(
        parents.get_opt("orphan").await.unwrap().is_some(),
        "repaired"
    );
}

#[tokio::test]
async fn destroy_leaves_no_object_with_the_applyset_label() {
    let client = client().await;
    let b = bundle("destroy", "destroy.yaml");
    let a = applier(&client, Duration::from_secs(120));
    let applied = a.apply(&b).await.unwrap();
    assert_eq!(
        labelled(&client, &applied.applyset_id).await.len(),
        b.objects.len()
    );

    let report = a.destroy(&b).await.unwrap();
    // The harness runs kube-controller-manager's namespace controller (its
    // lease is held), so the namespace is waited for like everything else.
    assert_eq!(report.deleted.len(), b.objects.len(), "{report:?}");
    assert!(report.terminating.is_empty(), "{report:?}");
    let left = labelled(&client, &applied.applyset_id).await;
    assert!(left.is_empty(), "{left:?}");
    let ns: Api<Namespace> = Api::all(client.clone());
    assert!(ns.get_opt("destroy").await.unwrap().is_none());
    // Nothing left to find: the ApplySet parent goes last.
    let set = ApplySet::new("destroy", "kfaws-system");
    assert!(set.read(&client).await.unwrap().is_none());
}

/// A CRD anywhere in the cluster that never becomes Established (its kind clashes with
/// another CRD's in the same group), whose custom resources the API server therefore does not
/// serve (a plain-text `404 page not found`), does not hold up the destroy of a bundle that
/// owns a namespace: listing what is left of it is answered "not served", not retried until
/// the destroy's deadline.
#[tokio::test]
async fn a_crd_that_is_never_established_does_not_hold_up_a_destroy() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let client = client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = |plural: &str| {
        serde_json::from_value::<CustomResourceDefinition>(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.clash.kfaws.test")},
            "spec": {
                "group": "clash.kfaws.test",
                "scope": "Namespaced",
                "names": {"plural": plural, "kind": "Clash"},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}
                }]
            }
        }))
        .unwrap()
    };
    crds.create(&PostParams::default(), &crd("alphas"))
        .await
        .unwrap();
    let established = |c: &CustomResourceDefinition| {
        c.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    };
    let until = Instant::now() + Duration::from_secs(30);
    while !established(&crds.get("alphas.clash.kfaws.test").await.unwrap()) {
        assert!(Instant::now() < until, "alphas never Established");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    crds.create(&PostParams::default(), &crd("betas"))
        .await
        .unwrap();
    let b = bundle("clash", "clash.yaml");
    let a = applier(&client, Duration::from_secs(20));
    a.apply(&b).await.unwrap();
    let betas = crds.get("betas.clash.kfaws.test").await.unwrap();
    assert!(
        !established(&betas),
        "the kind clash keeps betas from being Established"
    );

    // Retried, the list would end at the deadline with an error: the destroy would fail.
    let report = a.destroy(&b).await;
    for name in ["alphas.clash.kfaws.test", "betas.clash.kfaws.test"] {
        crds.delete(name, &Default::default()).await.unwrap();
    }
    let report = report.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.deleted.len(), b.objects.len(), "{report:?}");
}

#[tokio::test]
async fn c7_a_webhook_without_endpoints_blocks_only_what_it_intercepts_and_is_named() {
    let client = client().await;
    let b = bundle("c7", "c7-webhook.yaml");
    let timeout = Duration::from_secs(6);
    let started = Instant::now();
    let err = applier(&client, timeout).apply(&b).await.unwrap_err();
    let waited = started.elapsed();
    assert!(
        waited >= timeout && waited < timeout * 5,
        "bounded wait, took {waited:?}"
    );
    let ApplyError::Objects { failures, .. } = &err else {
        panic!("expected object failures, got {err}");
    };
    let failed: Vec<String> = failures.iter().map(|f| f.object.to_string()).collect();
    assert_eq!(
        failed,
        [
            "ValidatingWebhookConfiguration c7-guard",
            "ConfigMap c7-guarded/blocked"
        ]
    );
    let blocked = &failures[1].reason;
    assert!(
        blocked.contains("webhook \"guard.c7.kfaws.test\" (ValidatingWebhookConfiguration c7-guard) intercepts it"),
        "{blocked}"
    );
    assert!(blocked.contains("Service c7-guarded/guard"), "{blocked}");

    let served = Served::fetch(&client).await.unwrap();
    for applied in [
        "ConfigMap c7-free/allowed",
        "Secret c7-guarded/not-intercepted",
        "Deployment c7-guarded/guard",
        "Service c7-guarded/guard",
    ] {
        let (kind, rest) = applied.split_once(' ').unwrap();
        let (ns, name) = rest.split_once('/').unwrap();
        let group = if kind == "Deployment" { "apps" } else { "" };
        let o = ObjectRef {
            gk: kfaws::k8s::GroupKind::new(group, kind),
            namespace: Some(ns.into()),
            name: name.into(),
        };
        assert!(
            live(&client, &served, &o).await.is_some(),
            "{applied} was applied"
        );
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "c7-guarded");
    assert!(cms.get_opt("blocked").await.unwrap().is_none());
}

#[tokio::test]
async fn c10_a_removed_api_version_fails_before_anything_is_applied() {
    let client = client().await;
    let b = bundle("c10", "c10-removed-api.yaml");
    let a = applier(&client, Duration::from_secs(60));
    let err = a.check(&b).await.unwrap_err();
    assert!(matches!(err, ApplyError::Unserved(_)), "{err}");
    let err = a.apply(&b).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("HorizontalPodAutoscaler c10/web"), "{msg}");
    assert!(msg.contains("c10-removed-api.yaml document 3"), "{msg}");
    assert!(
        msg.contains("autoscaling/v2beta2 HorizontalPodAutoscaler is not served"),
        "{msg}"
    );
    assert!(msg.contains("change apiVersion to autoscaling/v2"), "{msg}");
    let ns: Api<Namespace> = Api::all(client.clone());
    assert!(
        ns.get_opt("c10").await.unwrap().is_none(),
        "nothing applied"
    );
    let parent: Api<ConfigMap> = Api::namespaced(client.clone(), "kfaws-system");
    assert!(
        parent.get_opt("c10").await.unwrap().is_none(),
        "no inventory written"
    );
}

/// A ConfigMap written without a namespace and again with `namespace:
/// default` is one object: refused before anything is applied (applying
/// both would flip its data on every apply).
#[tokio::test]
async fn one_object_written_with_and_without_its_default_namespace_is_refused() {
    let client = client().await;
    let b = Bundle::from_sources(
        "twice",
        [(
            std::path::PathBuf::from("twice.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: twice-cm\ndata: {a: '1'}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: twice-cm\n  namespace: default\n\
             data: {a: '2'}\n"
                .to_string(),
        )],
    )
    .unwrap();
    let a = applier(&client, Duration::from_secs(60));
    let err = a.check(&b).await.unwrap_err();
    assert!(matches!(err, ApplyError::SameObject(_)), "{err}");
    let msg = a.apply(&b).await.unwrap_err().to_string();
    assert!(
        msg.contains("ConfigMap default/twice-cm is written twice, at twice.yaml document 1"),
        "{msg}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert!(cms.get_opt("twice-cm").await.unwrap().is_none());
}

#[tokio::test]
async fn c9_a_kind_no_crd_defines_is_an_error_naming_it() {
    let client = client().await;
    let b = bundle("c9", "c9-unserved-kind.yaml");
    let msg = applier(&client, Duration::from_secs(60))
        .check(&b)
        .await
        .unwrap_err()
        .to_string();
    assert!(msg.contains("PyTorchJob default/mnist"), "{msg}");
    assert!(
        msg.contains("the kind kubeflow.org/v1 PyTorchJob is not served"),
        "{msg}"
    );
}

#[test]
fn c22_a_duplicate_key_fails_with_its_line() {
    let err = Bundle::from_path("c22", &fixture("c22-duplicate-key.yaml")).unwrap_err();
    assert!(
        matches!(err, BundleError::DuplicateKey { line: 8, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("c22-duplicate-key.yaml:8:"), "{msg}");
    assert!(msg.contains("duplicate key \"apiVersion\""), "{msg}");
}

/// Creates a namespace outside any bundle (a user's), if it is not there.
async fn user_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

/// Creates a custom resource outside any bundle (a user's), with `finalizers`.
async fn user_object(api: &Api<DynamicObject>, kind: &str, name: &str, finalizers: &[&str]) {
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "c6.kfaws.test/v1",
        "kind": kind,
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {},
    }))
    .unwrap();
    api.create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"));
}

async fn drop_finalizers(api: &Api<DynamicObject>, name: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

/// Destroys `b` with a deadline of `after`, expecting it to run out: the
/// step that did not finish, what was left, and the error's text.
async fn destroy_times_out(
    client: &Client,
    b: &Bundle,
    after: Duration,
) -> (&'static str, Vec<Remaining>, String) {
    let err = applier(client, after).destroy(b).await.unwrap_err();
    let ApplyError::Delete {
        source: DeleteError::StillPresent {
            step, remaining, ..
        },
        ..
    } = &err
    else {
        panic!("expected a deletion timeout, got {err}");
    };
    (step, remaining.clone(), err.to_string())
}

#[tokio::test]
async fn c6_destroy_deletes_custom_resources_users_made_while_their_controller_runs() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let client = client().await;
    let b = bundle("c6-operator", "c6-operator.yaml");
    applier(&client, Duration::from_secs(120))
        .apply(&b)
        .await
        .unwrap();
    user_namespace(&client, "c6-gadgets").await;
    let served = Served::fetch(&client).await.unwrap();
    let (ar, _) = served.get("c6.kfaws.test", "v1", "Gadget").unwrap();
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "c6-gadgets", ar);
    user_object(&gadgets, "Gadget", "held", &["c6.kfaws.test/cleanup"]).await;
    user_object(&gadgets, "Gadget", "plain", &[]).await;

    let (step, remaining, _) = destroy_times_out(&client, &b, Duration::from_secs(5)).await;
    // The users' Gadgets went first, not with the CRD after the controller.
    assert_eq!(step, "custom resources");
    let left: Vec<String> = remaining.iter().map(ToString::to_string).collect();
    assert_eq!(
        left,
        ["Gadget c6-gadgets/held (finalizers: c6.kfaws.test/cleanup)"]
    );
    assert!(gadgets.get_opt("plain").await.unwrap().is_none());
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "c6-operator");
    assert!(deployments
        .get_opt("gadget-controller")
        .await
        .unwrap()
        .is_some());

    // What the controller would do: drop the finalizer. A Gadget made since
    // goes too, and the report names the users' objects it deleted.
    drop_finalizers(&gadgets, "held").await;
    user_object(&gadgets, "Gadget", "later", &[]).await;
    let report = applier(&client, Duration::from_secs(60))
        .destroy(&b)
        .await
        .unwrap();
    let unlisted: Vec<String> = report.unlisted.iter().map(ToString::to_string).collect();
    assert_eq!(unlisted, ["Gadget c6-gadgets/later"]);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(
        crds.get_opt("gadgets.c6.kfaws.test")
            .await
            .unwrap()
            .is_none(),
        "the CRD step waits until it is gone"
    );
    Api::<Namespace>::all(client.clone())
        .delete("c6-gadgets", &Default::default())
        .await
        .unwrap();
}

/// Case C6 for a namespace the bundle deletes: the custom resources users
/// made in it go in the first step, while their controllers still run, and
/// one held by a finalizer is named there; anything else that holds the
/// namespace is named as what keeps it.
#[tokio::test]
async fn c6_a_namespace_being_deleted_loses_users_custom_resources_first_or_names_its_holder() {
    let client = client().await;
    let crd = bundle("c6-widget-crd", "c6-widget-crd.yaml");
    let ns = bundle("c6-users", "c6-user-namespace.yaml");
    let long = applier(&client, Duration::from_secs(120));
    long.apply(&crd).await.unwrap();
    long.apply(&ns).await.unwrap();
    let served = Served::fetch(&client).await.unwrap();
    let (ar, _) = served.get("c6.kfaws.test", "v1", "Widget").unwrap();
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "c6-users", ar);
    user_object(&widgets, "Widget", "stuck", &["c6.kfaws.test/cleanup"]).await;
    user_object(&widgets, "Widget", "plain", &[]).await;

    let (step, remaining, err) = destroy_times_out(&client, &ns, Duration::from_secs(15)).await;
    assert_eq!(step, "custom resources", "{err}");
    let left: Vec<String> = remaining.iter().map(ToString::to_string).collect();
    assert_eq!(
        left,
        ["Widget c6-users/stuck (finalizers: c6.kfaws.test/cleanup)"]
    );
    assert!(
        err.contains("Widget c6-users/stuck (finalizers: c6.kfaws.test/cleanup)"),
        "{err}"
    );
    assert!(widgets.get_opt("plain").await.unwrap().is_none());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = namespaces.get("c6-users").await.unwrap();
    assert!(
        namespace.metadata.deletion_timestamp.is_none(),
        "the namespace waits for the step before"
    );

    // What the Widget's controller would do; then something that is not a
    // custom resource holds the namespace.
    drop_finalizers(&widgets, "stuck").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "c6-users");
    let held: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "held", "finalizers": ["example.com/hold"]},
    }))
    .unwrap();
    maps.create(&PostParams::default(), &held).await.unwrap();
    let (step, remaining, err) = destroy_times_out(&client, &ns, Duration::from_secs(15)).await;
    assert_eq!(step, "namespaces", "{err}");
    assert_eq!(remaining.len(), 1, "{err}");
    assert_eq!(remaining[0].object.to_string(), "Namespace c6-users");
    let holders: Vec<String> = remaining[0]
        .holders
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        holders,
        ["ConfigMap c6-users/held (finalizers: example.com/hold)"]
    );
    assert!(
        err.contains("held by ConfigMap c6-users/held (finalizers: example.com/hold)"),
        "{err}"
    );

    maps.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    long.destroy(&ns).await.unwrap();
    long.destroy(&crd).await.unwrap();
}

#[tokio::test]
async fn c6_destroy_names_the_object_and_the_finalizer_holding_it() {
    let client = client().await;
    let b = bundle("c6", "c6-finalizer.yaml");
    applier(&client, Duration::from_secs(120))
        .apply(&b)
        .await
        .unwrap();

    let (step, remaining, err) = destroy_times_out(&client, &b, Duration::from_secs(5)).await;
    assert_eq!(step, "custom resources");
    assert_eq!(remaining.len(), 1);
    assert_eq!(
        remaining[0].to_string(),
        "Sprocket c6/held (finalizers: c6.kfaws.test/cleanup)"
    );
    assert!(
        err.contains("Sprocket c6/held (finalizers: c6.kfaws.test/cleanup)"),
        "{err}"
    );
    // Custom resources go before their controllers: the controller is still there.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "c6");
    assert!(deployments
        .get_opt("sprocket-controller")
        .await
        .unwrap()
        .is_some());
    // The ApplySet parent stays, so a later destroy finds the rest.
    let set = ApplySet::new("c6", "kfaws-system");
    assert!(set.read(&client).await.unwrap().is_some());

    // With the finalizer removed (what its controller would do), destroy completes.
    let served = Served::fetch(&client).await.unwrap();
    let (ar, _) = served.get("c6.kfaws.test", "v1", "Sprocket").unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "c6", ar);
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let report = applier(&client, Duration::from_secs(60))
        .destroy(&b)
        .await
        .unwrap();
    // The namespace controller runs in the harness: the namespace is waited
    // for and gone, not left terminating.
    assert!(report.terminating.is_empty(), "{report:?}");
    assert!(
        report
            .deleted
            .iter()
            .any(|o| o.to_string() == "Namespace c6"),
        "{report:?}"
    );
    let ns: Api<Namespace> = Api::all(client.clone());
    assert!(ns.get_opt("c6").await.unwrap().is_none());
    assert!(set.read(&client).await.unwrap().is_none());
}
