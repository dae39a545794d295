//! The Kubernetes half of the vanilla profile end to end: `kfaws apply`
//! against the local AWS emulator, whose EKS cluster is a real
//! kube-apiserver (`tests/apiserver`) reached exactly as EKS is — endpoint
//! and CA from DescribeCluster, an EKS token (what `kfaws eks get-token`
//! prints, made in process) checked by the harness's webhook against the
//! emulator's STS. Checks every object the
//! profile installs, field by field, against the AWS outputs it is built
//! from; drift repair; and that destroy removes every object kfaws applied.
//!
//! Run under `tests/emulator/with_emulator.sh` with `KFAWS_TESTENV_BIN`
//! (`make test` does both).

mod common;

use std::path::Path;

use common::aws::Deployment;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment as K8sDeployment};
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolume, PersistentVolumeClaim, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kfaws::k8s::applyset;
use kfaws::k8s::discovery::Served;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::Client;

/// Stacks 0.15 s, the cluster 3 s, a node group 0.9 s (0.005 × real).
const FAST: &str = r#"{"scale": 0.005}"#;

const USER_NS: &str = "kubeflow-user-example-com";

fn kubeflow_config() -> String {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeflow");
    format!(
        "[kubeflow]\nmanifests = {:?}\ntraining_operator = {:?}\n",
        fixtures.join("platform.yaml").display().to_string(),
        fixtures
            .join("training-operator.yaml")
            .display()
            .to_string()
    )
}

/// Every object of any kind carrying an ApplySet label of this deployment's
/// bundles, as `Kind namespace/name`.
async fn labelled(client: &Client, ids: &[String]) -> Vec<String> {
    let served = Served::fetch(client).await.unwrap();
    let mut out = Vec::new();
    for id in ids {
        let lp = ListParams::default().labels(&format!("{}={id}", applyset::PART_OF));
        for (ar, _) in served.listable() {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
            for o in api.list(&lp).await.unwrap().items {
                out.push(format!(
                    "{} {}/{}",
                    ar.kind,
                    o.metadata.namespace.unwrap_or_default(),
                    o.metadata.name.unwrap_or_default()
                ));
            }
        }
    }
    out.sort();
    out
}

/// `kubeflow.org/v1 PyTorchJob`.
fn job_type() -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: "kubeflow.org".into(),
        version: "v1".into(),
        api_version: "kubeflow.org/v1".into(),
        kind: "PyTorchJob".into(),
        plural: "pytorchjobs".into(),
    }
}

/// Creates the PyTorchJob `someones-job` in the user namespace, as a user
/// of the cluster would; returns the API of its kind there.
async fn someones_job(client: &Client) -> Api<DynamicObject> {
    someones_job_in(client, USER_NS).await
}

/// [`someones_job`] in namespace `ns`.
async fn someones_job_in(client: &Client, ns: &str) -> Api<DynamicObject> {
    let job_type = job_type();
    let jobs = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &job_type);
    let mut job = DynamicObject::new("someones-job", &job_type);
    job.data = serde_json::json!({"spec": {"pytorchReplicaSpecs": {}}});
    jobs.create(&Default::default(), &job).await.unwrap();
    jobs
}

/// Sets job `name`'s conditions as the training operator would, `(type,
/// status)` each (a merge patch replaces the whole list).
async fn set_conditions(jobs: &Api<DynamicObject>, name: &str, conditions: &[(&str, &str)]) {
    let conditions: Vec<serde_json::Value> = conditions
        .iter()
        .map(|(t, s)| serde_json::json!({"type": t, "status": s}))
        .collect();
    let status = serde_json::json!({"status": {"conditions": conditions}});
    jobs.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .unwrap();
}

/// Makes job `name` look running (`Created` and `Running` true). The
/// harness's PyTorchJob runner, standing in for the training operator,
/// fails `someones-job` at once (it has no replicas) and never looks at a
/// job again: the test waits for that (at most 30 s), then overwrites it.
async fn running(d: &Deployment, jobs: &Api<DynamicObject>, name: &str) {
    if d.cluster().ready.pytorchjob_runner {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while jobs.get(name).await.unwrap().data["status"]["conditions"].is_null() {
            assert!(
                std::time::Instant::now() < deadline,
                "the runner did not see {name}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    set_conditions(jobs, name, &[("Created", "True"), ("Running", "True")]).await;
}

/// Marks job `name` as the training operator does once it succeeded.
async fn finish(jobs: &Api<DynamicObject>, name: &str) {
    set_conditions(jobs, name, &[("Running", "False"), ("Succeeded", "True")]).await;
}

fn applyset_ids(d: &Deployment) -> Vec<String> {
    let state = d.state();
    state["resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(a, _)| a.starts_with("k8s."))
        .map(|(_, r)| r["outputs"]["applyset_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_installs_the_kubernetes_half_from_the_aws_outputs_and_destroy_removes_it() {
    let d = Deployment::new(&kubeflow_config());
    d.lifecycle(FAST);
    let planned = d.stdout(&["plan"]);
    for address in [
        "k8s.efs-csi",
        "k8s.efs-storage",
        "k8s.kubeflow",
        "k8s.training-operator",
        "k8s.user-namespace",
    ] {
        assert!(planned.contains(address), "{address} planned:\n{planned}");
    }
    let applied = d.stdout(&["apply", "--auto-approve"]);
    assert!(
        applied.contains("Resources: 13 added, 0 changed, 0 destroyed."),
        "{applied}"
    );
    let client = d.cluster().client().await;

    // Storage: the file system stack.efs created.
    let fs = d.output("stack.efs", "FileSystemId");
    let sc = Api::<StorageClass>::all(client.clone())
        .get("efs-sc")
        .await
        .unwrap();
    assert_eq!(sc.provisioner, "efs.csi.aws.com");
    let parameters = sc.parameters.unwrap();
    assert_eq!(parameters["fileSystemId"], fs);
    assert_eq!(parameters["provisioningMode"], "efs-ap");
    assert_eq!(parameters["directoryPerms"], "700");
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get("efs-pv")
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(pv.csi.as_ref().unwrap().volume_handle, fs);
    assert_eq!(pv.csi.as_ref().unwrap().driver, "efs.csi.aws.com");
    assert_eq!(pv.capacity.unwrap()["storage"].0, "5Gi");
    assert_eq!(pv.access_modes.unwrap(), ["ReadWriteMany"]);
    assert_eq!(
        pv.persistent_volume_reclaim_policy.as_deref(),
        Some("Retain")
    );

    // The driver, its controller assuming the IRSA role of stack.irsa.
    let role = d.output("stack.irsa", "EfsCsiControllerRoleArn");
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), "kube-system")
        .get("efs-csi-controller-sa")
        .await
        .unwrap();
    assert_eq!(
        sa.metadata.annotations.unwrap()["eks.amazonaws.com/role-arn"],
        role
    );
    Api::<CSIDriver>::all(client.clone())
        .get("efs.csi.aws.com")
        .await
        .unwrap();
    Api::<DaemonSet>::namespaced(client.clone(), "kube-system")
        .get("efs-csi-node")
        .await
        .unwrap();
    let controller = Api::<K8sDeployment>::namespaced(client.clone(), "kube-system")
        .get("efs-csi-controller")
        .await
        .unwrap();
    let managers: Vec<(String, String)> = controller
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("kfaws".into(), "Apply".into())),
        "server-side applied by field manager kfaws: {managers:?}"
    );

    // The user namespace: pipelines role, the binding Kubeflow's edit role,
    // the claim on efs-pv.
    Api::<Namespace>::all(client.clone())
        .get(USER_NS)
        .await
        .unwrap();
    let editor = Api::<ServiceAccount>::namespaced(client.clone(), USER_NS)
        .get("default-editor")
        .await
        .unwrap();
    assert_eq!(
        editor.metadata.annotations.unwrap()["eks.amazonaws.com/role-arn"],
        d.output("stack.irsa", "PipelinesRoleArn")
    );
    let binding = Api::<RoleBinding>::namespaced(client.clone(), USER_NS)
        .get("default-editor")
        .await
        .unwrap();
    assert_eq!(binding.role_ref.name, "kubeflow-edit");
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), USER_NS)
        .get("efs-claim")
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(claim.volume_name.as_deref(), Some("efs-pv"));
    assert_eq!(claim.storage_class_name.as_deref(), Some("efs-sc"));

    // Kubeflow and the training operator: PyTorchJob is served.
    Api::<CustomResourceDefinition>::all(client.clone())
        .get("pytorchjobs.kubeflow.org")
        .await
        .unwrap();
    let served = Served::fetch(&client).await.unwrap();
    assert!(served.get("kubeflow.org", "v1", "PyTorchJob").is_some());

    // Nothing to do on a second plan.
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // Drift: the claim deleted out of band is planned as an update of its
    // bundle and restored by apply, also while a finalizer still holds it
    // (Terminating, as a claim in use is held by kubernetes.io/pvc-protection):
    // the plan counts it as gone, and apply waits until it is, then
    // creates it again (before, both said "No changes" meanwhile).
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), USER_NS);
    let hold = "kfaws.test/hold";
    let mut finalizers = claims
        .get("efs-claim")
        .await
        .unwrap()
        .metadata
        .finalizers
        .unwrap_or_default();
    finalizers.push(hold.to_string());
    let set_finalizers = {
        let claims = claims.clone();
        move |finalizers: Vec<String>| {
            let claims = claims.clone();
            async move {
                claims
                    .patch(
                        "efs-claim",
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(
                            serde_json::json!({"metadata": {"finalizers": finalizers}}),
                        ),
                    )
                    .await
                    .unwrap();
            }
        }
    };
    set_finalizers(finalizers.clone()).await;
    claims
        .delete("efs-claim", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = claims.get("efs-claim").await.unwrap().metadata;
    assert!(terminating.deletion_timestamp.is_some());
    let drift = d.planned_changes();
    assert!(drift.contains("~ k8s.user-namespace"), "{drift}");
    assert!(
        drift.contains("/efs-claim\"  # removed outside kfaws\n"),
        "{drift}"
    );
    // The finalizer's "controller" lets go while the apply waits.
    let release = tokio::spawn({
        let (claims, set_finalizers) = (claims.clone(), set_finalizers.clone());
        async move {
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            let now = claims.get("efs-claim").await.unwrap().metadata.finalizers;
            set_finalizers(now.into_iter().flatten().filter(|f| f != hold).collect()).await;
        }
    });
    d.stdout(&["apply", "--auto-approve"]);
    release.await.unwrap();
    let restored = claims
        .get("efs-claim")
        .await
        .expect("apply restored the claim")
        .metadata;
    assert!(restored.deletion_timestamp.is_none());
    assert_ne!(restored.uid, terminating.uid, "made again");
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // An edit inside an object (C13): the IRSA annotation removed by
    // another field manager is drift, and apply puts it back.
    let sas = Api::<ServiceAccount>::namespaced(client.clone(), "kube-system");
    sas.patch(
        "efs-csi-controller-sa",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({
            "metadata": {"annotations": {"eks.amazonaws.com/role-arn": null}}
        })),
    )
    .await
    .unwrap();
    let edited = d.planned_changes();
    assert!(
        edited.contains("~ k8s.efs-csi")
            && edited.contains(
                "- \"ServiceAccount kube-system/efs-csi-controller-sa: \
                 metadata.annotations[eks.amazonaws.com/role-arn] (removed)\"  # apply undoes \
                 this edit\n"
            ),
        "{edited}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    let sa = sas.get("efs-csi-controller-sa").await.unwrap();
    assert_eq!(
        sa.metadata.annotations.unwrap()["eks.amazonaws.com/role-arn"],
        role,
        "apply restored the annotation"
    );
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // A Secret written with stringData: a value changed by someone else is
    // drift too (kfaws applies it as the data it becomes).
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), "kubeflow");
    let password = |s: k8s_openapi::api::core::v1::Secret| s.data.unwrap()["password"].0.clone();
    secrets
        .patch(
            "mysql-secret",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"stringData": {"password": "by-hand"}})),
        )
        .await
        .unwrap();
    let edited = d.planned_changes();
    assert!(
        edited.contains("- \"Secret kubeflow/mysql-secret: data.password\""),
        "{edited}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    assert_eq!(
        password(secrets.get("mysql-secret").await.unwrap()),
        b"demo-only",
        "apply restored the password"
    );
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // `kubectl set image` on the controller: a field inside a container (an
    // entry of a keyed list) moved to another manager is drift too.
    let deployments = Api::<K8sDeployment>::namespaced(client.clone(), "kube-system");
    let image = |d: &K8sDeployment| {
        d.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .image
            .clone()
            .unwrap()
    };
    let declared = image(&deployments.get("efs-csi-controller").await.unwrap());
    deployments
        .patch(
            "efs-csi-controller",
            &kube::api::PatchParams {
                field_manager: Some("kubectl-set".into()),
                ..Default::default()
            },
            &kube::api::Patch::Strategic(serde_json::json!({
                "spec": {"template": {"spec": {"containers": [
                    {"name": "efs-plugin", "image": "evil/image:1"}
                ]}}}
            })),
        )
        .await
        .unwrap();
    let edited = d.planned_changes();
    assert!(
        edited.contains(
            "- \"Deployment.apps kube-system/efs-csi-controller: \
             spec.template.spec.containers[efs-plugin].image\""
        ),
        "{edited}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    assert_eq!(
        image(&deployments.get("efs-csi-controller").await.unwrap()),
        declared,
        "apply restored the image"
    );
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // A pod that mounts the claim (a training job's) would hold it: the
    // destroy is refused at plan, naming the pod and its owner.
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), USER_NS);
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "trainer-0"},
        "spec": {
            "containers": [{"name": "t", "image": "kfaws-trainer", "volumeMounts": [{"name": "efs", "mountPath": "/mnt/efs"}]}],
            "volumes": [{"name": "efs", "persistentVolumeClaim": {"claimName": "efs-claim"}}]
        }
    }))
    .unwrap();
    pods.create(&Default::default(), &pod).await.unwrap();
    for args in [&["plan", "--destroy"][..], &["destroy", "--auto-approve"]] {
        let err = d.fails(args);
        assert!(
            err.contains("pods still mount a PersistentVolumeClaim this change deletes")
                && err.contains(&format!("{USER_NS}/trainer-0 (claim efs-claim)")),
            "{args:?}: {err}"
        );
    }
    // Moving the users' namespace prunes the claim with the old namespace:
    // refused the same way while the pod mounts it.
    d.write_config(&format!(
        "{}[options]\nuser_namespace = \"team-ml\"\n",
        kubeflow_config()
    ));
    let err = d.fails(&["plan"]);
    assert!(
        err.contains("pods still mount a PersistentVolumeClaim this change deletes")
            && err.contains(&format!("{USER_NS}/trainer-0 (claim efs-claim)")),
        "{err}"
    );
    pods.delete("trainer-0", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    // A plan saved while no pod mounts it is checked again when applied: a
    // pod that started since holds the claim.
    d.stdout(&["plan", "--out", "ns.plan"]);
    let mut later = pod.clone();
    later.metadata.name = Some("trainer-1".into());
    pods.create(&Default::default(), &later).await.unwrap();
    let err = d.fails(&["apply", "ns.plan"]);
    assert!(
        err.contains("pods still mount a PersistentVolumeClaim this change deletes")
            && err.contains(&format!("{USER_NS}/trainer-1 (claim efs-claim)")),
        "{err}"
    );
    pods.delete("trainer-1", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    // Without it the plan goes through and says what the prune takes with
    // it, by name: a user's (finished) PyTorchJob too.
    let jobs = someones_job(&client).await;
    running(&d, &jobs, "someones-job").await;
    finish(&jobs, "someones-job").await;
    let moved = d.planned_changes();
    assert!(
        moved.contains(&format!(
            "- {USER_NS} (Namespace)  # deletes everything in the namespace, whoever created it"
        )) && moved.contains("+ team-ml (Namespace)")
            && moved.contains(&format!(
                "- {USER_NS}/someones-job (PyTorchJob.kubeflow.org)  # not applied by `kfaws \
                 apply`; deleted with namespace {USER_NS}"
            )),
        "{moved}"
    );
    d.write_config(&kubeflow_config());

    // A Profile someone made by hand: the destroy deletes it with its CRD,
    // and the plan says so, by name.
    let served = Served::fetch(&client).await.unwrap();
    let (profile_ar, _) = served.get("kubeflow.org", "v1", "Profile").unwrap();
    let profiles: Api<DynamicObject> = Api::all_with(client.clone(), profile_ar);
    let mine: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "Profile",
        "metadata": {"name": "mine"},
        "spec": {"owner": {"kind": "User", "name": "me@example.com"}},
    }))
    .unwrap();
    profiles.create(&Default::default(), &mine).await.unwrap();
    let plan = d.stdout(&["plan", "--destroy"]);
    assert!(
        plan.contains(
            "- mine (Profile.kubeflow.org)  # not applied by `kfaws apply`; deleted with CRD \
             profiles.kubeflow.org"
        ),
        "{plan}"
    );
    assert!(!plan.contains("- kubeflow-user-example-com (Profile.kubeflow.org)  # not applied"));

    let ids = applyset_ids(&d);
    assert_eq!(ids.len(), 5, "one ApplySet per bundle");
    assert!(!labelled(&client, &ids).await.is_empty());
    d.stdout(&["destroy", "--auto-approve"]);
    // With its CRD (so the Profile's API is not served any more).
    assert!(Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt("profiles.kubeflow.org")
        .await
        .unwrap()
        .is_none());
    assert_eq!(labelled(&client, &ids).await, Vec::<String>::new());
    assert!(
        d.aws().await.leftovers().await.is_empty(),
        "nothing of the AWS half is left"
    );
}

#[tokio::test]
async fn a_bundle_that_left_the_config_is_deleted_by_its_applyset() {
    let d = Deployment::new(&kubeflow_config());
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve"]);
    let client = d.cluster().client().await;
    Api::<CustomResourceDefinition>::all(client.clone())
        .get("pytorchjobs.kubeflow.org")
        .await
        .unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeflow");
    // Other platform manifests without the `kubeflow` Namespace, which the
    // training operator's objects live in: the plan refuses to prune it.
    let without_namespace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/manifests/c8-crd-and-instance.yaml");
    let operator = fixtures
        .join("training-operator.yaml")
        .display()
        .to_string();
    d.write_config(&format!(
        "[kubeflow]\nmanifests = {:?}\ntraining_operator = {operator:?}\n",
        without_namespace.display().to_string(),
    ));
    let err = d.fails(&["plan"]);
    assert!(
        err.contains("k8s.kubeflow: this change deletes Namespace kubeflow")
            && err.contains("but k8s.training-operator (")
            && err.contains(" kubeflow/"),
        "{err}"
    );
    // The platform manifests leave the config and the operator stays: deleting k8s.kubeflow
    // would delete the `kubeflow` Namespace and the operator's objects with it.
    d.write_config(&format!("[kubeflow]\ntraining_operator = {operator:?}\n"));
    let err = d.fails(&["plan"]);
    assert!(
        err.contains("k8s.training-operator: ")
            && err.contains(
                "training-operator.yaml: namespace kubeflow is deleted with k8s.kubeflow, which \
                 this plan destroys, and these objects would be deleted with it: "
            )
            && err.contains("keep k8s.kubeflow in the configuration"),
        "{err}"
    );

    // The training operator leaves the config: the plan deletes its bundle. A plan saved
    // before a user's PyTorchJob started is checked again when applied.
    d.write_config(&format!(
        "[kubeflow]\nmanifests = {:?}\n",
        fixtures.join("platform.yaml").display().to_string()
    ));
    d.stdout(&["plan", "-out", "gone.plan"]);
    let jobs = someones_job(&client).await;
    running(&d, &jobs, "someones-job").await;
    let unfinished = format!(
        "k8s.training-operator: bundle \"kfaws-{}-training-operator\": this change deletes CRD \
         pytorchjobs.kubeflow.org and with it training jobs that have not finished: PyTorchJob \
         {USER_NS}/someones-job.",
        d.name
    );
    // A destroy targeted at the operator leaves the cluster, so it is refused too.
    for refused in [
        d.fails(&["apply", "gone.plan"]),
        d.fails(&["plan"]),
        d.fails(&["plan", "--destroy", "--target", "k8s.training-operator"]),
    ] {
        assert!(
            refused.contains(&unfinished)
                && refused.contains(&format!(
                    "`kubectl delete pytorchjob.kubeflow.org someones-job -n {USER_NS}`"
                )),
            "{refused}"
        );
    }
    // So is an update whose manifests no longer hold the CRD.
    let operator = std::fs::read_to_string(fixtures.join("training-operator.yaml")).unwrap();
    let (_, without_crd) = operator.split_once("\n---\n").unwrap();
    std::fs::write(d.dir.path().join("operator.yaml"), without_crd).unwrap();
    d.write_config(&format!(
        "[kubeflow]\nmanifests = {:?}\ntraining_operator = \"operator.yaml\"\n",
        fixtures.join("platform.yaml").display().to_string()
    ));
    let refused = d.fails(&["plan"]);
    assert!(refused.contains(&unfinished), "{refused}");
    // And a destroy of the namespace the job runs in. A job already being deleted (held by
    // a finalizer) goes anyway and is not named.
    let mut leaving = DynamicObject::new("leaving", &job_type());
    leaving.metadata.finalizers = Some(vec!["kfaws.test/hold".into()]);
    leaving.data = serde_json::json!({"spec": {"pytorchReplicaSpecs": {}}});
    jobs.create(&Default::default(), &leaving).await.unwrap();
    running(&d, &jobs, "leaving").await;
    jobs.delete("leaving", &DeleteParams::default())
        .await
        .unwrap();
    let refused = d.fails(&["plan", "--destroy", "--target", "k8s.user-namespace"]);
    assert!(
        refused.contains(&format!(
            "k8s.user-namespace: bundle \"kfaws-{}-user-namespace\": this change deletes \
             namespace {USER_NS} and with it training jobs that have not finished: PyTorchJob \
             {USER_NS}/someones-job.",
            d.name
        )),
        "{refused}"
    );
    let _ = jobs
        .patch(
            "leaving",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    // A destroy of the cluster takes the jobs with it: its plan lists them.
    let destroying = d.stdout(&["plan", "--destroy", "--target", "eks.cluster"]);
    assert!(
        destroying.contains("- kubeflow-user-example-com/someones-job (PyTorchJob.kubeflow.org)"),
        "{destroying}"
    );
    jobs.get("someones-job").await.expect("nothing was deleted");
    // Once it has finished, the plan goes ahead and lists it.
    finish(&jobs, "someones-job").await;
    d.write_config(&format!(
        "[kubeflow]\nmanifests = {:?}\n",
        fixtures.join("platform.yaml").display().to_string()
    ));
    let planned = d.stdout(&["plan"]);
    assert!(
        planned.contains(
            "- kubeflow-user-example-com/someones-job (PyTorchJob.kubeflow.org)  # not applied \
             by `kfaws apply`; deleted with CRD pytorchjobs.kubeflow.org"
        ),
        "{planned}"
    );
    assert!(planned.contains("- k8s.training-operator"), "{planned}");
    assert!(
        planned.contains(
            "- pytorchjobs.kubeflow.org (CustomResourceDefinition.apiextensions.k8s.io)  # deletes \
             every custom resource of its kinds in the cluster, whoever created it"
        ),
        "the plan says what goes with the CRD:\n{planned}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    assert!(
        Api::<CustomResourceDefinition>::all(client.clone())
            .get_opt("pytorchjobs.kubeflow.org")
            .await
            .unwrap()
            .is_none(),
        "the training operator's CRD is gone"
    );
    Api::<CustomResourceDefinition>::all(client.clone())
        .get("profiles.kubeflow.org")
        .await
        .expect("the platform stays");

    // A namespace that exists already, with someone's data in it, is not
    // taken over: the plan fails naming it, and nothing is changed.
    let ns = Api::<Namespace>::all(client.clone());
    ns.create(
        &Default::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "monitoring"}})).unwrap(),
    )
    .await
    .unwrap();
    let extra = d.dir.path().join("extra.yaml");
    let platform = std::fs::read_to_string(fixtures.join("platform.yaml")).unwrap();
    std::fs::write(
        &extra,
        format!(
            "{platform}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: monitoring}}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: extra, namespace: kubeflow}}\n"
        ),
    )
    .unwrap();
    d.write_config("[kubeflow]\nmanifests = \"extra.yaml\"\n");
    let err = d.fails(&["plan"]);
    assert!(
        err.contains("already exist and were not applied by this bundle")
            && err.contains("Namespace monitoring (no ApplySet)"),
        "{err}"
    );
    // Without it, the extra ConfigMap is applied; going back to the
    // platform file plans its removal, and apply prunes it.
    std::fs::write(
        &extra,
        format!(
            "{platform}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: extra, namespace: kubeflow}}\n"
        ),
    )
    .unwrap();
    d.stdout(&["apply", "--auto-approve"]);
    // kfaws's own object with its ApplySet label taken off (`kubectl label … part-of-`)
    // is drift that apply repairs, not someone else's object to refuse.
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), "kubeflow");
    config_maps
        .patch(
            "extra",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                serde_json::json!({"metadata": {"labels": {applyset::PART_OF: null}}}),
            ),
        )
        .await
        .unwrap();
    let drift = d.planned_changes();
    assert!(
        drift.contains("~ k8s.kubeflow") && !drift.contains("not applied by this bundle"),
        "{drift}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    let labels = config_maps.get("extra").await.unwrap().metadata.labels;
    assert!(
        labels.is_some_and(|l| l.contains_key(applyset::PART_OF)),
        "the label is back"
    );
    d.write_config(&format!(
        "[kubeflow]\nmanifests = {:?}\n",
        fixtures.join("platform.yaml").display().to_string()
    ));
    let back = d.planned_changes();
    assert!(back.contains("- kubeflow/extra (ConfigMap)"), "{back}");
    d.stdout(&["apply", "--auto-approve"]);
    assert!(
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "kubeflow")
            .get_opt("extra")
            .await
            .unwrap()
            .is_none(),
        "pruned"
    );
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(
        ns.get_opt("monitoring").await.unwrap().is_some(),
        "the namespace kfaws did not create survives destroy"
    );
}

/// Shared cases C1 and C3: a bundle whose apply failed half way (a Service
/// the API server refuses, after its CRD was applied) is tainted; once the
/// manifests are fixed, the next apply applies it again in place instead of
/// replacing it, so the CRD stays, and with it a custom resource someone
/// made meanwhile.
#[tokio::test]
async fn a_bundle_that_failed_half_way_is_applied_again_in_place() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeflow");
    let operator = std::fs::read_to_string(fixtures.join("training-operator.yaml")).unwrap();
    let d = Deployment::new(&kubeflow_config());
    d.lifecycle(FAST);
    let broken = d.dir.path().join("training-operator-broken.yaml");
    std::fs::write(
        &broken,
        format!(
            "{operator}---\napiVersion: v1\nkind: Service\nmetadata: {{name: broken, namespace: \
             kubeflow}}\nspec:\n  ports:\n    - port: 70000\n"
        ),
    )
    .unwrap();
    d.write_config(&format!(
        "[kubeflow]\nmanifests = {:?}\ntraining_operator = {:?}\n",
        fixtures.join("platform.yaml").display().to_string(),
        broken.display().to_string()
    ));
    let failed = d.kfaws(&["apply", "--auto-approve"]).output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&failed.stdout),
        String::from_utf8_lossy(&failed.stderr)
    );
    assert_eq!(failed.status.code(), Some(1), "{report}");
    assert!(
        report.contains("k8s.training-operator") && report.contains("70000"),
        "{report}"
    );
    assert_eq!(
        d.state()["resources"]["k8s.training-operator"]["status"],
        "tainted",
        "{report}"
    );
    // The failed bundle is in the state (tainted, without an id) and its ApplySet parent in the
    // cluster: a destroy deletes it and does not also name it as outside the state.
    let destroying = d.stdout(&["plan", "--destroy"]);
    assert!(
        destroying.contains("- k8s.training-operator") && !destroying.contains("one by one"),
        "{destroying}"
    );
    // The user namespace, applied after the operator, was not applied.
    assert!(d.state()["resources"]["k8s.user-namespace"].is_null());
    let client = d.cluster().client().await;
    let jobs = someones_job_in(&client, "default").await;

    d.write_config(&kubeflow_config());
    let planned = d.stdout(&["plan"]);
    assert!(
        planned.contains("~ k8s.training-operator")
            && !planned.contains("-/+ k8s.training-operator"),
        "{planned}"
    );
    assert!(planned.contains("applied again in place"), "{planned}");
    d.stdout(&["apply", "--auto-approve"]);
    assert_eq!(
        d.state()["resources"]["k8s.training-operator"]["status"],
        "created"
    );
    jobs.get("someones-job")
        .await
        .expect("the custom resource made meanwhile is still there");

    // Removed from the state, bundles are found in the cluster by their ApplySet parents: a
    // destroy names them all, the training operator too (it reads no [kubeflow] manifests, so
    // it finds that one by listing the parents), as objects that would go only with the
    // cluster, and a plan imports them all.
    let id = |address: &str| {
        d.state()["resources"][address]["physical_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (operator_id, storage_id) = (id("k8s.training-operator"), id("k8s.efs-storage"));
    d.stdout(&["state", "rm", "k8s.training-operator"]);
    d.stdout(&["state", "rm", "k8s.efs-storage"]);
    let destroying = d.stdout(&["plan", "--destroy"]);
    assert!(
        destroying.contains(&format!(
            "Warning: not destroyed one by one: 2 Kubernetes bundle(s) this deployment applied \
             are not in its state (removed with `kfaws state rm`): k8s.efs-storage \
             ({storage_id}), k8s.training-operator ({operator_id})."
        )) && !destroying.contains("resource(s) carry this deployment's tags"),
        "{destroying}"
    );
    let planned = d.stdout(&["plan"]);
    assert!(
        planned.contains("# k8s.training-operator will be imported")
            && planned.contains("# k8s.efs-storage will be imported"),
        "{planned}"
    );
    let applied = d.stdout(&["apply", "--auto-approve"]);
    assert!(applied.contains("2 imported"), "{applied}");
    assert_eq!(id("k8s.training-operator"), operator_id);
    assert_eq!(id("k8s.efs-storage"), storage_id);
    jobs.get("someones-job")
        .await
        .expect("the import applied the bundle in place");
    // A destroy reads no [kubeflow] manifests: it runs once their files are gone (a plan, which
    // reads them, is refused naming the field).
    d.write_config(
        "[kubeflow]\nmanifests = \"gone/platform.yaml\"\ntraining_operator = \"gone/op.yaml\"\n",
    );
    let err = d.fails(&["plan"]);
    assert!(
        err.contains("kubeflow.manifests") && err.contains("no such file or directory"),
        "{err}"
    );
    // A bundle outside the state is named by a targeted destroy too (its volume's file system
    // may be the target), and again after the summary.
    d.stdout(&["state", "rm", "k8s.efs-storage"]);
    let targeted = d.stdout(&["plan", "--destroy", "--target", "stack.efs"]);
    assert!(
        targeted.contains("Warning: not destroyed one by one: 1 Kubernetes bundle(s)")
            && targeted.contains("k8s.efs-storage ("),
        "{targeted}"
    );
    // The file system the stack's delete takes, with its files, is named with its metered size.
    let fs = d.output("stack.efs", "FileSystemId");
    assert!(
        targeted.contains(&format!(
            "- {fs} (EFS file system)  # deleted with every file on it (metered size 0 B at "
        )) && targeted.contains("kfaws takes no backup"),
        "{targeted}"
    );
    let destroyed = d.stdout(&["destroy", "--auto-approve"]);
    let summary = destroyed
        .find("Destroy complete!")
        .unwrap_or_else(|| panic!("{destroyed}"));
    assert!(
        destroyed[summary..].contains(
            "Not destroyed one by one (Kubernetes bundles not in the state; see the warning \
             above): k8s.efs-storage"
        ),
        "{destroyed}"
    );
    assert!(
        d.state()["resources"].as_object().unwrap().is_empty(),
        "{destroyed}"
    );
}

#[tokio::test]
async fn replace_recreates_a_bundle_and_a_node_group_and_refuses_what_others_depend_on() {
    let d = Deployment::new(&kubeflow_config());
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve"]);
    let before = d.state();

    // The network stack is under the cluster: refused before any change.
    let refused = d.fails(&["apply", "--auto-approve", "--replace", "stack.network"]);
    assert!(
        refused.contains("--replace stack.network")
            && refused.contains("eks.cluster")
            && refused.contains("kfaws destroy --target stack.network"),
        "{refused}"
    );
    let refused = d.fails(&["plan", "--replace", "k8s.nowhere"]);
    assert!(
        refused.contains("--replace k8s.nowhere: not a resource of this deployment"),
        "{refused}"
    );
    assert_eq!(d.state()["serial"], before["serial"], "nothing was written");

    // A bundle: its objects are deleted (the CRD with every PyTorchJob) and
    // applied again, where an apply without --replace would keep them.
    let client = d.cluster().client().await;
    let jobs = someones_job(&client).await;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let crd_uid = |crd: CustomResourceDefinition| crd.metadata.uid.unwrap();
    let old_uid = crd_uid(crds.get("pytorchjobs.kubeflow.org").await.unwrap());
    // Not while the job runs.
    running(&d, &jobs, "someones-job").await;
    let refused = d.fails(&["plan", "--replace", "k8s.training-operator"]);
    assert!(
        refused.contains(&format!(
            "training jobs that have not finished: PyTorchJob {USER_NS}/someones-job"
        )),
        "{refused}"
    );
    finish(&jobs, "someones-job").await;
    let planned = d.stdout(&["plan", "--replace", "k8s.training-operator"]);
    assert!(
        planned.contains("-/+ k8s.training-operator")
            && planned.contains("replacement requested with --replace"),
        "{planned}"
    );
    // The plan names what the delete half takes with it, as a destroy's does.
    assert!(
        planned.contains("- pytorchjobs.kubeflow.org (CustomResourceDefinition")
            && planned.contains(
                "someones-job (PyTorchJob.kubeflow.org)  # not applied by `kfaws apply`; deleted \
                 with CRD pytorchjobs.kubeflow.org"
            ),
        "{planned}"
    );
    let applied = d.stdout(&[
        "apply",
        "--auto-approve",
        "--replace",
        "k8s.training-operator",
    ]);
    assert!(
        applied.contains("Resources: 1 added, 0 changed, 1 destroyed."),
        "{applied}"
    );
    let new_uid = crd_uid(crds.get("pytorchjobs.kubeflow.org").await.unwrap());
    assert_ne!(new_uid, old_uid, "the CRD was deleted and created again");
    assert!(
        jobs.get_opt("someones-job").await.unwrap().is_none(),
        "the custom resource went with its CRD"
    );

    // A node group may be replaced under the bundles that run on it, also
    // through a saved plan, which a later --replace cannot change.
    let deletes = d.calls("DeleteNodegroup");
    let token =
        |s: &serde_json::Value| s["resources"]["eks.nodegroup.cpu"]["idempotency_token"].clone();
    let planned = d.stdout(&[
        "plan",
        "--replace",
        "eks.nodegroup.cpu",
        "-out",
        "nodes.plan",
    ]);
    // The plan says what the replacement interrupts.
    assert!(
        planned.contains("-/+ eks.nodegroup.cpu")
            && planned.contains("the old nodes are deleted before the new ones start"),
        "{planned}"
    );
    let refused = d.fails(&["apply", "nodes.plan", "--replace", "k8s.kubeflow"]);
    assert!(refused.contains("cannot change a saved plan"), "{refused}");
    d.stdout(&["apply", "nodes.plan"]);
    assert_eq!(d.calls("DeleteNodegroup"), deletes + 1);
    let after = d.state();
    assert_ne!(
        token(&after),
        token(&before),
        "created again with a new token"
    );
    assert_eq!(after["resources"]["eks.nodegroup.cpu"]["status"], "created");
    assert_eq!(after["resources"]["k8s.kubeflow"]["status"], "created");

    // A replacement whose create fails says that the old one is gone; the next apply
    // creates it.
    common::aws::control(
        "faults",
        "POST",
        &format!(
            r#"{{"service":"eks","operation":"CreateNodegroup","kind":"server_error","code":"ResourceLimitExceededException","status":400,"message":"quota","count":1,"account_id":"{}"}}"#,
            d.account
        ),
    );
    let failed =
        d.fails_with_output(&["apply", "--auto-approve", "--replace", "eks.nodegroup.cpu"]);
    assert!(
        failed.contains("eks.nodegroup.cpu: the old one was deleted, then create failed: ")
            && failed.contains("ResourceLimitExceededException"),
        "{failed}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    d.stdout(&["destroy", "--auto-approve"]);
}

/// An access entry added to an applied deployment is created alone: the bundles that run in
/// the cluster are not applied again (the entry only orders them, so that a destroy keeps it
/// until they are gone), and the apply records them after it in the state without a call.
#[tokio::test]
async fn an_access_entry_added_later_does_not_re_apply_the_bundles_but_orders_them() {
    let d = Deployment::new("");
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve"]);
    d.write_config(
        "[access_entries.viewer]\nprincipal_arn = \"arn:aws:iam::123456789012:user/alice\"\n\
         policy = \"view\"\n",
    );
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("+ eks.access-entry.viewer")
            && plan.contains("Plan: 1 to add, 0 to change, 0 to destroy."),
        "{plan}"
    );
    // Made alone (targeted), then a whole apply records the order it missed, without a call.
    let out = d.stdout(&[
        "apply",
        "--auto-approve",
        "--target",
        "eks.access-entry.viewer",
    ]);
    assert!(out.contains("1 added, 0 changed, 0 destroyed"), "{out}");
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains(
            "Resources that only order k8s.efs-csi (created before, deleted after; nothing of \
             theirs is an input) were added or removed: apply records the new order in the \
             state, without applying it again."
        ),
        "{plan}"
    );
    assert!(plan.contains("No changes."), "{plan}");
    d.stdout(&["apply", "--auto-approve"]);
    let state = d.state();
    let deps = &state["resources"]["k8s.efs-csi"]["dependencies"];
    assert!(
        deps.as_array()
            .unwrap()
            .contains(&serde_json::json!("eks.access-entry.viewer")),
        "{deps}"
    );
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    // Targeted, a destroy or a replacement of the entry touches the entry alone: the bundles
    // only follow it.
    let plan = d.stdout(&["plan", "--destroy", "--target", "eks.access-entry.viewer"]);
    assert!(
        plan.contains("Plan: 0 to add, 0 to change, 1 to destroy.") && !plan.contains("k8s."),
        "{plan}"
    );
    let plan = d.stdout(&["plan", "--replace", "eks.access-entry.viewer"]);
    assert!(
        plan.contains("-/+ eks.access-entry.viewer")
            && plan.contains("Plan: 1 to add, 0 to change, 1 to destroy."),
        "{plan}"
    );
    // The table renamed, the same principal: the plan would import the entry that the old
    // address's delete removes, so it refuses and says how to keep it; `state rm` then apply
    // imports it under the new name, deleting nothing.
    d.write_config(
        "[access_entries.alice]\nprincipal_arn = \"arn:aws:iam::123456789012:user/alice\"\n\
         policy = \"view\"\n",
    );
    let err = d.fails(&["plan"]);
    assert!(
        err.contains("eks.access-entry.alice would import arn:")
            && err.contains("which the delete of eks.access-entry.viewer removes")
            && err.contains("`kfaws state rm eks.access-entry.viewer`"),
        "{err}"
    );
    d.kfaws(&["state", "rm", "eks.access-entry.viewer"])
        .assert()
        .success();
    let deletes = d.calls("DeleteAccessEntry");
    let out = d.stdout(&["apply", "--auto-approve"]);
    assert!(out.contains("1 imported"), "{out}");
    assert_eq!(d.calls("DeleteAccessEntry"), deletes);
    // Removed again: deleted alone, the bundles not applied again either.
    d.write_config("");
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("- eks.access-entry.alice")
            && plan.contains("Plan: 0 to add, 0 to change, 1 to destroy."),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    let state = d.state();
    let deps = &state["resources"]["k8s.efs-csi"]["dependencies"];
    assert!(
        !deps.as_array().unwrap().iter().any(|d| d
            .as_str()
            .is_some_and(|d| d.starts_with("eks.access-entry."))),
        "{deps}"
    );
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    d.stdout(&["destroy", "--auto-approve"]);
}

#[tokio::test]
async fn an_unreachable_cluster_fails_the_refresh_naming_it_and_the_way_out() {
    let d = Deployment::new("");
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve"]);
    let server = d.cluster();
    // Nothing listens on port 9 (discard): the connection is refused.
    d.set_cluster_endpoint(server, "https://127.0.0.1:9");
    let err = d.fails(&["plan"]);
    assert!(
        // Every bundle's read fails, one per line.
        err.contains("refresh failed for 3 resources:\n  - k8s.efs-csi: ")
            && err.contains("\n  - k8s.user-namespace: ")
            && err.contains(&format!(
                "reading from the API server of EKS cluster {}",
                d.name
            ))
            && err.contains("kfaws state rm ADDRESS"),
        "{err}"
    );
    d.set_cluster_endpoint(server, &server.ready.endpoint);
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    d.stdout(&["destroy", "--auto-approve"]);
}

#[tokio::test]
async fn manifests_that_break_a_rule_fail_before_any_call() {
    let d = Deployment::new("");
    let bad = d.dir.path().join("kubeflow.yaml");
    std::fs::write(
        &bad,
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: efs-sc}\n\
         provisioner: efs.csi.aws.com\nparameters: {provisioningMode: efs-ap, \
         fileSystemId: fs-0123456789abcdef0}\n",
    )
    .unwrap();
    d.write_config("[kubeflow]\nmanifests = \"kubeflow.yaml\"\n");
    let err = d.fails(&["validate"]);
    assert!(
        err.contains("kubeflow.manifests: StorageClass efs-sc") && err.contains("directoryPerms"),
        "validate reads the manifests: {err}"
    );
    let err = d.fails(&["plan"]);
    assert!(
        err.contains("kubeflow.manifests: StorageClass efs-sc") && err.contains("directoryPerms"),
        "{err}"
    );
    // C10 on a fresh deployment: no cluster to ask yet, so the API
    // versions removed by kubernetes_version are checked offline.
    std::fs::write(
        &bad,
        "apiVersion: autoscaling/v2beta2\nkind: HorizontalPodAutoscaler\n\
         metadata: {name: trainer, namespace: kubeflow}\n\
         spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: t}, maxReplicas: 2}\n",
    )
    .unwrap();
    for args in [&["validate"][..], &["plan"]] {
        let err = d.fails(args);
        assert!(
            err.contains("kubeflow.manifests")
                && err.contains("HorizontalPodAutoscaler kubeflow/trainer")
                && err.contains("not served since Kubernetes 1.26")
                && err.contains("change apiVersion to autoscaling/v2"),
            "{args:?}: {err}"
        );
    }
    d.write_config("[kubeflow]\nmanifests = \"missing.yaml\"\n");
    let err = d.fails(&["validate"]);
    assert!(
        err.contains("kubeflow.manifests") && err.contains("no such file or directory"),
        "{err}"
    );
    let calls = d.aws().await.mutating_calls();
    assert!(calls.is_empty(), "no call changed anything: {calls:?}");
}

/// The first interrupt stops a readiness wait instead of letting it run out
/// its deadline (minutes): here the gate of case C7, a validating webhook
/// whose Service never gets endpoints, before the object it intercepts. The
/// apply exits 130 at once, the bundle's create stays recorded as
/// `creating` (not tainted), and the next plan resumes it.
#[tokio::test]
async fn the_first_interrupt_stops_a_readiness_wait_and_the_next_apply_checks_again() {
    use std::time::Duration;

    let d = Deployment::new("");
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve"]);
    let webhook =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/manifests/c7-webhook.yaml");
    d.write_config(&format!(
        "[kubeflow]\nmanifests = {:?}\n",
        webhook.display().to_string()
    ));
    // Into the wait for the webhook's endpoints (the applier's deadline is
    // minutes away).
    let (status, took, stdout, stderr) = interrupt_after(
        &d,
        &["apply", "--auto-approve"],
        "k8s.kubeflow: Creating...",
        Duration::from_secs(3),
    );
    assert_eq!(status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(
        took < Duration::from_secs(60),
        "the interrupt stopped the wait: exited {took:?} after it\n{stdout}\n{stderr}"
    );
    assert!(
        format!("{stdout}{stderr}").contains("stopped waiting: interrupted"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(d.state()["resources"]["k8s.kubeflow"]["status"], "creating");
    let planned = d.stdout(&["plan"]);
    assert!(
        planned.contains("+ k8s.kubeflow")
            && planned.contains("an earlier create did not finish")
            && !planned.contains("changed outside kfaws"),
        "{planned}"
    );
    d.stdout(&["destroy", "--auto-approve"]);
}

/// The Kubernetes bundles touch a cluster only while it carries this
/// state's tags: with its `kfaws:lineage` tag changed by hand (another state
/// made a cluster of the same name, say), a targeted destroy of a bundle
/// refuses instead of deleting objects there, and nothing is deleted.
#[tokio::test]
async fn bundles_refuse_a_cluster_that_does_not_carry_this_states_tags() {
    let d = Deployment::new("");
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve"]);
    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    let arn = d.cluster_arn().await;
    let lineage = d.state()["lineage"].as_str().unwrap().to_string();
    eks.tag_resource()
        .resource_arn(&arn)
        .tags("kfaws:lineage", "someone-elses")
        .send()
        .await
        .unwrap();
    let err = d.fails(&[
        "destroy",
        "--auto-approve",
        "--target",
        "k8s.user-namespace",
    ]);
    assert!(
        err.contains("does not carry this deployment's tags")
            && err.contains("kfaws:lineage is \"someone-elses\"")
            && err.contains("nothing was changed")
            && err.contains("run kfaws with that state's directory"),
        "{err}"
    );
    let client = d.cluster().client().await;
    Api::<Namespace>::all(client)
        .get(USER_NS)
        .await
        .expect("the user namespace is still there");
    eks.tag_resource()
        .resource_arn(&arn)
        .tags("kfaws:lineage", &lineage)
        .send()
        .await
        .unwrap();
    d.stdout(&["destroy", "--auto-approve"]);
}

/// An ApplySet parent deleted outside kfaws while its members run (M1): the
/// bundle is not taken for gone (a destroy would then forget objects that
/// still exist); the plan names the parent, apply writes it again, and a
/// destroy without it still deletes every member.
#[tokio::test]
async fn an_applyset_parent_deleted_by_hand_is_repaired_and_its_members_are_still_destroyed() {
    let d = Deployment::new("");
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve"]);
    let client = d.cluster().client().await;
    let parents: Api<ConfigMap> = Api::namespaced(client.clone(), "kfaws-system");
    let parent = format!("kfaws-{}-user-namespace", d.name);
    let ids = applyset_ids(&d);
    let before = labelled(&client, &ids).await;
    assert!(
        before
            .iter()
            .any(|o| o.starts_with("PersistentVolumeClaim ")),
        "{before:?}"
    );

    parents
        .delete(&parent, &DeleteParams::default())
        .await
        .unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("~ k8s.user-namespace")
            && plan.contains(&format!(
                "ApplySet parent ConfigMap kfaws-system/{parent}: deleted outside kfaws"
            ))
            && !plan.contains("+ k8s.user-namespace")
            && !plan.contains("already gone"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    parents
        .get(&parent)
        .await
        .expect("apply wrote the parent again");
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    parents
        .delete(&parent, &DeleteParams::default())
        .await
        .unwrap();
    let plan = d.stdout(&["plan", "--destroy"]);
    assert!(
        plan.contains("- kubeflow-user-example-com/efs-claim (PersistentVolumeClaim)")
            && !plan.contains("only removed from state"),
        "{plan}"
    );
    d.stdout(&["destroy", "--auto-approve"]);
    assert_eq!(labelled(&client, &ids).await, Vec::<String>::new());
}

/// The first interrupt during a bundle delete's wait (a namespace held by
/// someone else's finalizer) stops it at once and says so, not that the
/// step's deadline passed; the next destroy deletes and waits again.
#[tokio::test]
async fn the_first_interrupt_stops_a_delete_wait_and_says_it_was_interrupted() {
    use std::time::Duration;

    let d = Deployment::new("");
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve"]);
    let client = d.cluster().client().await;
    let held = held_config_map(&client).await;

    // Into the wait for the namespace (the step's deadline is minutes away).
    let (status, took, stdout, stderr) = interrupt_after(
        &d,
        &[
            "destroy",
            "--auto-approve",
            "--target",
            "k8s.user-namespace",
        ],
        "k8s.user-namespace: Destroying...",
        Duration::from_secs(4),
    );
    assert_eq!(status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(
        took < Duration::from_secs(60),
        "{took:?}\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(
            "deleting namespaces: stopped waiting: interrupted; 1 object(s) still present"
        ) && stdout.contains("interrupted (resumes on the next run)")
            && !stdout.contains("held by their finalizers (the controller"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(
        d.state()["resources"]["k8s.user-namespace"]["status"],
        "deleting"
    );

    // Once the finalizer is gone, the next destroy finishes the delete.
    release(&held).await;
    d.stdout(&["destroy", "--auto-approve"]);
}

/// Case C6 in the vanilla profile: users' PyTorchJobs live in the user
/// namespace, so a destroy deletes it while the training operator still
/// runs, and a job held by a finalizer stops the destroy there; the operator
/// (whose CRD delete would wait for the same job again) is not started.
#[tokio::test]
async fn a_destroy_deletes_the_user_namespace_before_the_training_operator() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use std::time::Duration;

    let d = Deployment::new(&kubeflow_config());
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve"]);
    let client = d.cluster().client().await;
    let jobs = someones_job(&client).await;
    let hold = |finalizers: serde_json::Value| {
        let jobs = jobs.clone();
        async move {
            jobs.patch(
                "someones-job",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(
                    serde_json::json!({"metadata": {"finalizers": finalizers}}),
                ),
            )
            .await
            .unwrap();
        }
    };
    hold(serde_json::json!(["example.com/hold"])).await;
    // A job still running goes too (the cluster goes with this plan).
    let mut busy = DynamicObject::new("busy", &job_type());
    busy.data = serde_json::json!({"spec": {"pytorchReplicaSpecs": {}}});
    jobs.create(&Default::default(), &busy).await.unwrap();
    running(&d, &jobs, "busy").await;
    // The plan names them with the namespace that goes first, and says
    // which has not finished.
    let planned = d.stdout(&["plan", "--destroy"]);
    assert!(
        planned.contains(&format!(
            "- {USER_NS}/someones-job (PyTorchJob.kubeflow.org)  # not applied by `kfaws apply`; \
             deleted with namespace {USER_NS}; finalizers example.com/hold"
        )) && planned.contains(&format!(
            "- {USER_NS}/busy (PyTorchJob.kubeflow.org)  # not applied by `kfaws apply`; deleted \
             with namespace {USER_NS}; has not finished: deleting it stops its training"
        )),
        "{planned}"
    );
    // Once each, though the operator's CRD goes in the same plan.
    for job in ["someones-job", "busy"] {
        let listed = planned
            .matches(&format!("/{job} (PyTorchJob.kubeflow.org)"))
            .count();
        assert_eq!(listed, 1, "{planned}");
    }

    // Past the first progress line (10 s), which says what holds the job.
    let (status, _, stdout, stderr) = interrupt_after(
        &d,
        &["destroy", "--auto-approve"],
        "k8s.user-namespace: Destroying...",
        Duration::from_secs(13),
    );
    assert_eq!(status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains("k8s.training-operator: Destroying..."),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!(
            "(waiting for custom resources to go (1 left): PyTorchJob {USER_NS}/someones-job \
             (finalizers: example.com/hold))"
        )),
        "{stdout}\n{stderr}"
    );
    let state = d.state();
    assert_eq!(
        state["resources"]["k8s.user-namespace"]["status"],
        "deleting"
    );
    assert_eq!(
        state["resources"]["k8s.training-operator"]["status"],
        "created"
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(crds
        .get_opt("pytorchjobs.kubeflow.org")
        .await
        .unwrap()
        .is_some());

    // The job's finalizer goes (what its controller does): the destroy finishes.
    hold(serde_json::Value::Null).await;
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(crds
        .get_opt("pytorchjobs.kubeflow.org")
        .await
        .unwrap()
        .is_none());
}

/// An update interrupted half way (the user namespace moved: the new one
/// applied, the old one's delete held by a finalizer) leaves objects of both
/// in the cluster: with the config moved back, the next plan does not take
/// them for drift and prunes the new namespace, and a destroy plan names
/// both namespaces, which the destroy deletes.
#[tokio::test]
async fn objects_an_interrupted_update_applied_are_in_the_plans_that_follow() {
    use std::time::Duration;

    let d = Deployment::new("");
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve"]);
    let client = d.cluster().client().await;
    let held = held_config_map(&client).await;

    d.write_config("[options]\nuser_namespace = \"team-ml\"\n");
    let (status, _, stdout, stderr) = interrupt_after(
        &d,
        &["apply", "--auto-approve"],
        "k8s.user-namespace: Modifying...",
        Duration::from_secs(4),
    );
    assert_eq!(status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt("team-ml")
            .await
            .unwrap()
            .is_some(),
        "{stdout}"
    );

    d.write_config("");
    let planned = d.stdout(&["plan"]);
    assert!(
        planned.contains("an earlier update did not finish")
            && !planned.contains("changed outside kfaws")
            && planned.contains("- team-ml (Namespace)"),
        "{planned}"
    );
    let destroying = d.stdout(&["plan", "--destroy"]);
    assert!(
        destroying.contains("- team-ml (Namespace)")
            && destroying.contains(&format!("- {USER_NS} (Namespace)")),
        "{destroying}"
    );
    release(&held).await;
    d.stdout(&["destroy", "--auto-approve"]);
    let namespaces = Api::<Namespace>::all(client.clone());
    for ns in ["team-ml", USER_NS] {
        assert!(namespaces.get_opt(ns).await.unwrap().is_none(), "{ns}");
    }
}

/// Creates ConfigMap `held` in the user namespace, held by someone else's
/// finalizer (`example.com/hold`), so a delete of the namespace waits;
/// returns the API of ConfigMaps there.
async fn held_config_map(client: &Client) -> Api<ConfigMap> {
    let held: Api<ConfigMap> = Api::namespaced(client.clone(), USER_NS);
    let object: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "held", "finalizers": ["example.com/hold"]},
    }))
    .unwrap();
    held.create(&Default::default(), &object).await.unwrap();
    held
}

/// Removes the finalizers of [`held_config_map`]'s ConfigMap, as their
/// controller would.
async fn release(held: &Api<ConfigMap>) {
    held.patch(
        "held",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

/// Runs kfaws with `args` in a process group of its own, sends SIGINT to the
/// group `wait` after its stdout shows a line containing `marker` (a
/// terminal's Ctrl-C: kfaws and whatever it runs get it), and returns its exit
/// status, how long it took to exit after the signal, its stdout lines joined,
/// and its stderr.
fn interrupt_after(
    d: &Deployment,
    args: &[&str],
    marker: &str,
    wait: std::time::Duration,
) -> (
    std::process::ExitStatus,
    std::time::Duration,
    String,
    String,
) {
    use std::io::{BufRead, BufReader, Read};
    use std::os::unix::process::CommandExt as _;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let mut child = d
        .process(args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A test that fails before the group ends leaves none of it behind.
    struct KillGroup(u32);
    impl Drop for KillGroup {
        fn drop(&mut self) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.0)])
                .stderr(Stdio::null())
                .status();
        }
    }
    let _group = KillGroup(child.id());
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    while !lines.iter().any(|l: &String| l.contains(marker)) {
        lines.push(
            rx.recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("no {marker:?} line: {lines:#?}")),
        );
    }
    std::thread::sleep(wait);
    let interrupted = Instant::now();
    common::signal_group(child.id(), "INT");
    let status = child.wait().unwrap();
    let took = interrupted.elapsed();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    lines.extend(rx.iter());
    (status, took, lines.join("\n"), stderr)
}

/// A namespaced object written without a namespace goes to `default`, as
/// kubectl puts it: a second plan has nothing to change.
#[tokio::test]
async fn a_namespaced_object_without_a_namespace_is_applied_to_default_and_stays_in_sync() {
    let d = Deployment::new("");
    let manifests = d.dir.path().join("platform.yaml");
    std::fs::write(
        &manifests,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nons}\ndata: {a: \"1\"}\n",
    )
    .unwrap();
    d.write_config(&format!(
        "[kubeflow]\nmanifests = {:?}\n",
        manifests.display().to_string()
    ));
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve"]);
    let client = d.cluster().client().await;
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client, "default")
        .get("nons")
        .await
        .unwrap();
    let plan = d.kfaws(&["plan", "--detailed-exitcode"]).output().unwrap();
    assert_eq!(
        plan.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&plan.stdout),
        String::from_utf8_lossy(&plan.stderr)
    );
    // Its manifest edited: the plan names the object whose content changed.
    std::fs::write(
        &manifests,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nons}\ndata: {a: \"2\"}\n",
    )
    .unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("~ k8s.kubeflow")
            && plan
                .lines()
                .any(|l| l.trim_start().starts_with("~ content.ConfigMap nons: \""))
            && plan.contains("resource changes:\n        ~ nons (ConfigMap)")
            && !plan.contains("drift"),
        "{plan}"
    );
    // A Secret's value edited: applied again (the bundle's sha256 changes), but no per-object
    // hash of the value is printed (a short unsalted hash of a weak password is guessable).
    let secret = |password: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: nons}}\ndata: {{a: \"1\"}}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {{name: creds}}\nstringData: {{password: {password}}}\n"
        )
    };
    std::fs::write(&manifests, secret("hunter2")).unwrap();
    d.stdout(&["apply", "--auto-approve"]);
    std::fs::write(&manifests, secret("hunter3")).unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("~ k8s.kubeflow")
            && plan.contains("~ sha256: (sensitive value) -> (sensitive value)")
            && !plan.contains("content."),
        "{plan}"
    );
    // Nor the bundle's hashes, which cover the value (unsalted: a dictionary finds a weak
    // password from them once the rest of the manifests is known): not in the plan, its
    // JSON, nor `state show`; the state file keeps them.
    let entry = &d.state()["resources"]["k8s.kubeflow"];
    let hashes = [
        entry["spec"]["sha256"].as_str().unwrap().to_string(),
        entry["outputs"]["manifest_sha256"]
            .as_str()
            .unwrap()
            .to_string(),
    ];
    let shown = [
        plan,
        d.stdout(&["plan", "--json"]),
        d.stdout(&["state", "show", "k8s.kubeflow"]),
    ];
    for (out, hash) in shown
        .iter()
        .flat_map(|o| hashes.iter().map(move |h| (o, h)))
    {
        assert!(!out.contains(hash.as_str()), "{hash} in {out}");
    }
    assert!(
        shown[2].contains("\"sha256\": \"(sensitive value)\""),
        "{}",
        shown[2]
    );
    // Taken out of the file, it is a change of the config, not of the cluster.
    std::fs::write(
        &manifests,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\ndata: {a: \"1\"}\n",
    )
    .unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("~ k8s.kubeflow")
            && plan.contains("ConfigMap nons")
            && !plan.contains("drift"),
        "{plan}"
    );
    // An object in a namespace that neither the cluster has nor a bundle creates is refused by
    // the plan, before an apply would fail half way.
    std::fs::write(
        &manifests,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: orphan, namespace: no-such-ns}\n",
    )
    .unwrap();
    let err = d.fails(&["plan"]);
    assert!(
        err.contains("namespace no-such-ns is not in the cluster and no bundle creates it")
            && err.contains("ConfigMap no-such-ns/orphan ("),
        "{err}"
    );
    d.stdout(&["destroy", "--auto-approve"]);
}
