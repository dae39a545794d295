//! `kfaws` end to end against the local AWS emulator: plan, apply, drift,
//! saved plans, locking, identity checks, outputs, state commands and
//! destroy. Run under `tests/emulator/with_emulator.sh` (`make test` does);
//! each test works in an account of its own.

use aws_sdk_cloudformation::config::Credentials;
use predicates::prelude::*;

mod common;

use common::aws::{endpoint, Deployment};

#[tokio::test]
async fn plan_apply_noop_plan_outputs_and_destroy() {
    let d = Deployment::new("");
    let plan = d.planned_changes();
    for (a, kind) in [
        ("stack.network", "aws_cloudformation_stack"),
        ("stack.iam", "aws_cloudformation_stack"),
        ("stack.storage", "aws_cloudformation_stack"),
        ("stack.efs", "aws_cloudformation_stack"),
        ("stack.irsa", "aws_cloudformation_stack"),
        ("eks.cluster", "aws_eks_cluster"),
        ("eks.nodegroup.cpu", "aws_eks_nodegroup"),
        ("iam.oidc", "aws_iam_oidc_provider"),
        ("k8s.efs-csi", "kubernetes_manifests"),
        ("k8s.efs-storage", "kubernetes_manifests"),
        ("k8s.user-namespace", "kubernetes_manifests"),
    ] {
        assert!(plan.contains(&format!("  + {a} ({kind})")), "{plan}");
    }
    assert!(
        plan.contains("Plan: 11 to add, 0 to change, 0 to destroy."),
        "{plan}"
    );
    // A stack's create lists what its template adds.
    assert!(
        plan.contains("      resource changes:\n")
            && plan.contains("\n        + Vpc (AWS::EC2::VPC)\n"),
        "{plan}"
    );

    // Before the apply, a named output is not known yet, and says why.
    let err = d.fails(&["output", "vpc_id"]);
    assert!(
        err.contains("output \"vpc_id\"")
            && err.contains("comes from stack.network")
            && err.contains("run `kfaws apply` first"),
        "{err}"
    );

    let applied = d.stdout(&["apply", "--auto-approve"]);
    assert!(
        applied.contains("Apply complete! Resources: 11 added, 0 changed, 0 destroyed."),
        "{applied}"
    );
    let n = &d.name;
    assert_eq!(
        d.live_stack_names().await,
        [
            format!("kfaws-{n}-efs"),
            format!("kfaws-{n}-iam"),
            format!("kfaws-{n}-irsa"),
            format!("kfaws-{n}-network"),
            format!("kfaws-{n}-storage")
        ]
    );

    d.kfaws(&["plan", "--detailed-exitcode"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("No changes."));

    let vpc = d.stdout(&["output", "stack.network.VpcId"]);
    assert!(vpc.trim().starts_with("vpc-"), "{vpc}");

    // A stack's delete lists what the live stack holds; --force-destroy-buckets warns only of
    // a plan that deletes a bucket.
    let destroying = d.stdout(&["plan", "--destroy", "--force-destroy-buckets"]);
    assert!(
        destroying.contains("\n        - Vpc (AWS::EC2::VPC)\n")
            && destroying.contains("\n        - ArtifactBucket (AWS::S3::Bucket)\n")
            && destroying.contains("--force-destroy-buckets: every S3 bucket this plan deletes"),
        "{destroying}"
    );
    let iam = d.stdout(&[
        "plan",
        "--destroy",
        "--force-destroy-buckets",
        "--target",
        "stack.iam",
    ]);
    assert!(
        iam.contains("\n        - NodeRole (AWS::IAM::Role)\n")
            && !iam.contains("AWS::S3::Bucket")
            && !iam.contains("--force-destroy-buckets"),
        "{iam}"
    );
    let all: serde_json::Value = serde_json::from_str(&d.stdout(&["output", "--json"])).unwrap();
    assert_eq!(all["bucket_name"], format!("kfaws-{n}-us-east-1-artifacts"));
    assert!(all["sagemaker_role_arn"]
        .as_str()
        .unwrap()
        .ends_with(":role/sagemakerrole"));
    assert_eq!(all["vpc_id"].as_str(), Some(vpc.trim()));
    assert!(all["efs_file_system_id"]
        .as_str()
        .unwrap()
        .starts_with("fs-"));
    let listed = d.stdout(&["output"]);
    assert!(listed.starts_with("vpc_id = \"vpc-"), "{listed}");
    assert_eq!(
        d.stdout(&["output", "bucket_name"]).trim(),
        format!("kfaws-{n}-us-east-1-artifacts")
    );
    let err = d.fails(&["output", "stack.network.NoSuchKey"]);
    assert!(
        err.contains("no output \"stack.network.NoSuchKey\"")
            && err.contains("`kfaws state show ADDRESS` a resource's outputs"),
        "{err}"
    );

    let list = d.stdout(&["state", "list"]);
    assert!(
        list.contains("stack.storage") && list.contains("created"),
        "{list}"
    );
    let shown: serde_json::Value =
        serde_json::from_str(&d.stdout(&["state", "show", "stack.iam"])).unwrap();
    assert_eq!(shown["status"], "created");
    assert!(shown["idempotency_token"].is_string());

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.state_file())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let destroyed = d.stdout(&["destroy", "--auto-approve"]);
    assert!(
        destroyed.contains("Destroy complete! Resources: 0 added, 0 changed, 11 destroyed."),
        "{destroyed}"
    );
    assert!(d.live_stack_names().await.is_empty());
    d.kfaws(&["destroy", "--auto-approve"])
        .assert()
        .success()
        .stdout(predicate::str::contains("No resources to destroy"));
    d.kfaws(&["output"])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            "Deployment {:?} has no outputs: its state records none.",
            d.name
        )));
}

#[tokio::test]
async fn a_stack_deleted_out_of_band_is_drift_and_apply_repairs_it() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve"]);
    let cfn = d.aws().await.cloudformation();
    // The efs stack: only Kubernetes bundles depend on it (a new IAM stack
    // would bring a new secrets key, which an EKS cluster cannot take).
    cfn.delete_stack()
        .stack_name(format!("kfaws-{}-efs", d.name))
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("reason: drift: deleted outside kfaws"),
        "{plan}"
    );
    // The storage bundle names the file system: it is re-applied only if
    // the new stack's outputs differ (they will: a new file system).
    assert!(
        plan.contains(
            "Plan: 1 to add, 0 to change, 0 to destroy; 2 more to re-apply if a dependency's \
             outputs change."
        ),
        "{plan}"
    );
    let applied = d.stdout(&["apply", "--auto-approve"]);
    assert!(
        applied.contains("Apply complete! Resources: 1 added, 2 changed, 0 destroyed."),
        "{applied}"
    );
    // The new file system is in the StorageClass and the PersistentVolume,
    // whose fields for it are immutable: both were replaced, and the claim
    // bound to the old volume was deleted and created again.
    let fs = d.output("stack.efs", "FileSystemId");
    let client = d.cluster().client().await;
    let pv = kube::Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(client.clone())
        .get("efs-pv")
        .await
        .unwrap();
    assert_eq!(pv.spec.unwrap().csi.unwrap().volume_handle, fs);
    let sc = kube::Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .get("efs-sc")
        .await
        .unwrap();
    assert_eq!(sc.parameters.unwrap()["fileSystemId"], fs);
    let claim = kube::Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        client,
        "kubeflow-user-example-com",
    )
    .get("efs-claim")
    .await
    .unwrap();
    assert!(claim.metadata.deletion_timestamp.is_none());
    assert_eq!(claim.spec.unwrap().volume_name.as_deref(), Some("efs-pv"));
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    // Deleted out of band again, then destroyed: the stack is only removed
    // from the state, and counted so, not as destroyed.
    cfn.delete_stack()
        .stack_name(format!("kfaws-{}-efs", d.name))
        .send()
        .await
        .unwrap();
    // Terraform's one-dash spelling of the flags is read too.
    let plan = d.stdout(&["plan", "-destroy"]);
    assert!(
        plan.contains("# stack.efs will be removed from the state (already gone)")
            && plan.contains(
                "Plan: 0 to add, 0 to change, 10 to destroy, 1 to remove from the state \
                 (already gone)."
            ),
        "{plan}"
    );
    let destroyed = d.stdout(&["destroy", "-auto-approve"]);
    assert!(
        destroyed.contains("stack.efs: Removed from the state (already gone) after")
            && destroyed.contains(
                "Destroy complete! Resources: 0 added, 0 changed, 10 destroyed, 1 removed from \
                 the state (already gone)."
            ),
        "{destroyed}"
    );
    assert!(d.live_stack_names().await.is_empty());
}

#[tokio::test]
async fn a_saved_plan_applies_exactly_once_and_is_then_stale() {
    let d = Deployment::new("");
    d.kfaws(&["plan", "-out", "tf.plan"])
        .assert()
        .success()
        .stdout(predicate::str::contains("kfaws apply tf.plan"));
    d.kfaws(&["apply", "tf.plan"])
        .assert()
        .success()
        .stdout(predicate::str::contains("11 added"));
    d.kfaws(&["apply", "tf.plan"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("the saved plan is stale"));
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(d.live_stack_names().await.is_empty());
}

#[tokio::test]
async fn the_wrong_region_or_account_is_refused_before_planning() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve"]);
    d.kfaws(&["plan", "--region", "eu-west-1"])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("region us-east-1").and(predicate::str::contains("eu-west-1")),
        );
    d.kfaws(&["plan"])
        .env("AWS_ACCESS_KEY_ID", "111111111111")
        .assert()
        .failure()
        .stderr(predicate::str::contains(format!("account {}", d.account)));
    // --aws-profile wins over keys in the environment, as the AWS CLI's
    // --profile does; AWS_PROFILE does not (the SDK's chain reads the
    // environment's keys first) and a warning says so.
    let credentials = d.dir.path().join("credentials");
    std::fs::write(
        &credentials,
        "[other]\naws_access_key_id = 111111111111\naws_secret_access_key = test\n",
    )
    .unwrap();
    d.kfaws(&["--aws-profile", "other", "plan"])
        .env("AWS_SHARED_CREDENTIALS_FILE", &credentials)
        .env("AWS_CONFIG_FILE", d.dir.path().join("no-config"))
        .assert()
        .failure()
        .stderr(predicate::str::contains(format!("account {}", d.account)));
    d.kfaws(&["plan"])
        .env("AWS_SHARED_CREDENTIALS_FILE", &credentials)
        .env("AWS_CONFIG_FILE", d.dir.path().join("no-config"))
        .env("AWS_PROFILE", "other")
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "AWS_PROFILE=other is not used: AWS_ACCESS_KEY_ID in the environment comes first",
        ));
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(d.live_stack_names().await.is_empty());
}

#[test]
fn apply_without_a_terminal_needs_auto_approve() {
    let d = Deployment::new("");
    d.kfaws(&["apply"])
        .write_stdin("yes\n")
        .assert()
        .failure()
        .stderr(predicate::str::contains("pass --auto-approve"));
    assert!(
        !d.state_file().exists()
            || !std::fs::read_to_string(d.state_file())
                .unwrap()
                .contains("stack.")
    );
}

#[test]
fn a_held_lock_refuses_apply_and_unlock_breaks_it() {
    let d = Deployment::new("");
    let state_dir = d.dir.path().join(".kfaws");
    let held = kfaws::state::lock::StateLock::acquire(&state_dir, &d.name, "apply").unwrap();
    let id = held.info().id.to_string();
    std::mem::forget(held); // never released; its holder is this test's process
    for args in [&["apply", "--auto-approve"][..], &["graph", "--plan"]] {
        d.kfaws(args).assert().failure().stderr(
            predicate::str::contains("the state is locked by")
                .and(predicate::str::contains(id.as_str())),
        );
    }
    // Without a plan, the graph reads only the config: no lock.
    d.kfaws(&["graph"]).assert().success();
    // The holder's pid runs on this host: unlock refuses unless forced.
    d.kfaws(&["state", "unlock", &id])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("which is still running `apply`"));
    d.kfaws(&["state", "unlock", &id, "--force"])
        .assert()
        .success();
    d.kfaws(&["plan"]).assert().success();
}

#[test]
fn state_commands_read_name_and_state_dir_from_a_config_that_plan_refuses() {
    let d = Deployment::new("state_dir = \"elsewhere\"\nnode_group = 3");
    // plan refuses the unknown key, naming it.
    d.kfaws(&["plan"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("unknown field `node_group`"));
    // So does destroy, which needs the whole config, without the state commands' warning.
    d.kfaws(&["destroy", "--auto-approve"])
        .assert()
        .code(1)
        .stderr(
            predicate::str::contains("unknown field `node_group`")
                .and(predicate::str::contains("reading only").not()),
        );
    // The state commands find the deployment and its state directory anyway, and warn.
    let state_dir = d.dir.path().join("elsewhere");
    let held = kfaws::state::lock::StateLock::acquire(&state_dir, &d.name, "apply").unwrap();
    let id = held.info().id.to_string();
    std::mem::forget(held); // released below by `state unlock --force`
    d.kfaws(&["state", "list"])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            "Deployment {:?} has no resources",
            d.name
        )))
        .stderr(
            predicate::str::contains("reading only `name` and `state_dir`")
                .and(predicate::str::contains("unknown field `node_group`")),
        );
    // `state unlock` finds the lock in that directory.
    d.kfaws(&["state", "unlock", &id, "--force"])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!("Removed the lock {id}")));
    // A file that is not TOML at all, or a name that is not a string, is still an error.
    d.write_config("name = [");
    d.kfaws(&["state", "list"]).assert().code(1);
    // Unless --name and --state-dir both say what the file would.
    d.kfaws(&[
        "--name",
        &d.name,
        "--state-dir",
        "elsewhere",
        "state",
        "list",
    ])
    .assert()
    .success()
    .stdout(predicate::str::contains(format!(
        "Deployment {:?} has no resources",
        d.name
    )))
    .stderr(predicate::str::contains(
        "ignoring the config, which cannot be read",
    ));
    std::fs::write(d.dir.path().join("kfaws.toml"), "name = 3\n").unwrap();
    d.kfaws(&["state", "list"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("invalid type"));
}

/// A destroy of a deployment never applied from here says so and calls no
/// API (an endpoint where nothing listens would fail any call).
#[test]
fn a_destroy_of_a_never_applied_deployment_says_so_without_api_calls() {
    let d = Deployment::new("");
    d.kfaws(&["destroy", "--auto-approve"])
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            "No resources to destroy: the state of deployment {:?} in",
            d.name
        )))
        .stdout(predicate::str::contains(
            "records nothing (never applied from here).",
        ));
}

/// Without a kfaws.toml (and without --name), the error says the file is
/// missing, not only that the name is.
#[test]
fn a_missing_config_file_is_named_when_the_name_is_not_set() {
    let d = Deployment::new("");
    std::fs::remove_file(d.dir.path().join("kfaws.toml")).unwrap();
    for args in [&["state", "list"][..], &["validate"], &["output"]] {
        d.kfaws(args)
            .env_remove("KFAWS_NAME")
            .assert()
            .code(1)
            .stderr(
                predicate::str::contains("name is not set")
                    .and(predicate::str::contains("(there is no kfaws.toml in")),
            );
    }
}

#[test]
fn invalid_names_fail_before_any_api_call() {
    // An endpoint where nothing listens: any API call would fail with a
    // connection error, so a name error proves no call was made.
    for (name, region, rule) in [
        ("test-k8_cluster01", "us-east-1", "[a-zA-Z][-a-zA-Z0-9]*"),
        ("tf-vanilla-uwiqgwfqu3", "ap-southeast-1", "may be at most"),
        ("MLTeam", "us-east-1", "S3 bucket name"),
    ] {
        let d = Deployment::new("");
        d.kfaws(&["plan", "--name", name, "--region", region])
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .assert()
            .code(1)
            .stderr(predicate::str::contains(rule))
            .stderr(predicate::str::contains("connect").not());
    }
    let d = Deployment::new("");
    d.kfaws(&["plan", "--region", "us-east1"])
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("region \"us-east1\" is invalid"));
}

/// A mistyped `--target` or a `--replace` the plan would refuse needs no
/// call to be found: it fails before the credentials are looked up (with
/// nothing listening at the endpoint, a call would fail with a connection
/// error or hang in retries first).
#[test]
fn a_mistyped_target_or_replace_fails_before_any_api_call() {
    let d = Deployment::new("");
    for (args, message) in [
        (
            &["plan", "--target", "stack.netwrok"][..],
            "--target stack.netwrok: not a resource of this deployment; did you mean \
             stack.network? (`kfaws graph` lists the resources)",
        ),
        (
            &["apply", "--auto-approve", "--target", "eks.nodegroup.gpu"],
            "--target eks.nodegroup.gpu: not a resource of this deployment: kfaws.toml has no \
             [node_groups.gpu]; did you mean eks.nodegroup.cpu?",
        ),
        (
            &["plan", "--target", "k8s.kubeflow"],
            "--target k8s.kubeflow: not a resource of this deployment: kubeflow.manifests is not \
             set in kfaws.toml",
        ),
        // Also on a state that records nothing yet.
        (
            &["destroy", "--auto-approve", "--target", "stack.netwrok"],
            "--target stack.netwrok: not a resource of this deployment; did you mean \
             stack.network? (`kfaws state list` lists what the state holds)",
        ),
        (
            &["plan", "--replace", "eks.cluster"],
            "--replace eks.cluster: not in the state",
        ),
        (
            &["apply", "--auto-approve", "--replace", "k8s.nothing"],
            "--replace k8s.nothing: not a resource of this deployment (`kfaws graph` lists the \
             resources)",
        ),
    ] {
        d.kfaws(args)
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .assert()
            .code(1)
            .stderr(predicate::str::contains(message))
            .stderr(predicate::str::contains("cannot reach").not());
    }
}

#[test]
fn broken_manifests_and_an_unavailable_profile_fail_before_any_api_call_naming_each_problem() {
    let d =
        Deployment::new("[kubeflow]\nmanifests = \"kf.yaml\"\ntraining_operator = \"operator\"\n");
    std::fs::write(
        d.dir.path().join("kf.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n",
    )
    .unwrap();
    std::fs::create_dir(d.dir.path().join("operator")).unwrap();
    for args in [&["plan"][..], &["apply", "--auto-approve"]] {
        d.kfaws(args)
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .assert()
            .code(1)
            .stderr(predicate::str::contains(
                "kubeflow.manifests: Namespace default (",
            ))
            .stderr(predicate::str::contains(
                "kubeflow.training_operator: operator holds no *.yaml",
            ))
            .stderr(predicate::str::contains("connect").not());
    }
    // A profile not yet available is named with the config's other errors.
    let d = Deployment::new("profile = \"rds-s3\"\nkubernetes_version = \"1\"\n");
    d.kfaws(&["plan"])
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("2 problems in the config"))
        .stderr(predicate::str::contains(
            "profile \"rds-s3\" is invalid: is not yet available",
        ))
        .stderr(predicate::str::contains(
            "kubernetes_version \"1\" is invalid",
        ));
    // So is a value outside a field's fixed choices: not a parse error that hides the rest.
    let d = Deployment::new(
        "profile = \"vanila\"\nkubernetes_version = \"1\"\n[options]\n\
         sagemaker_role_policy = \"fulll\"\n",
    );
    for args in [&["plan"][..], &["validate"]] {
        d.kfaws(args)
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .assert()
            .code(1)
            .stderr(predicate::str::contains("3 problems in the config"))
            .stderr(predicate::str::contains(
                "profile \"vanila\" is invalid: unknown variant `vanila`, expected one of \
                 `vanilla`, `rds-s3`",
            ))
            .stderr(predicate::str::contains(
                "options.sagemaker_role_policy \"fulll\" is invalid: unknown variant `fulll`, \
                 expected `full` or `scoped`",
            ))
            .stderr(predicate::str::contains(
                "kubernetes_version \"1\" is invalid",
            ))
            .stderr(predicate::str::contains("connect").not());
    }
}

/// `cmd` with no credentials anywhere the AWS SDK's default chain looks:
/// none in the environment, no profile selected, `home` (with no `.aws`
/// unless the test writes one) as the home directory, and no instance
/// metadata service.
fn without_credentials<'c>(
    cmd: &'c mut assert_cmd::Command,
    home: &std::path::Path,
) -> &'c mut assert_cmd::Command {
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_PROFILE",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("HOME", home)
        .env("AWS_EC2_METADATA_DISABLED", "true")
}

#[test]
fn without_credentials_one_error_says_where_the_sdk_looked() {
    let d = Deployment::new("");
    without_credentials(&mut d.kfaws(&["plan"]), d.dir.path())
        .assert()
        .code(1)
        .stderr(predicate::str::starts_with(
            "Error: cannot determine the AWS identity (sts:GetCallerIdentity): no usable AWS \
             credentials; the AWS SDK's default chain reads AWS_ACCESS_KEY_ID",
        ))
        .stderr(predicate::str::contains("--aws-profile"))
        // The chain's own WARN lines (one per failing provider) are not shown.
        .stderr(predicate::str::contains("WARN").not());
}

/// A selected profile that no profile file defines, and an access key id
/// without its secret, are named in the no-credentials error.
#[test]
fn without_credentials_what_is_half_set_up_is_named() {
    let d = Deployment::new("");
    let bare = |cmd: &mut assert_cmd::Command| {
        without_credentials(cmd, d.dir.path());
    };
    std::fs::create_dir(d.dir.path().join(".aws")).unwrap();
    std::fs::write(
        d.dir.path().join(".aws/config"),
        "[profile dev]\nregion = us-east-1\n",
    )
    .unwrap();
    let mut cmd = d.kfaws(&["plan"]);
    bare(&mut cmd);
    cmd.env("AWS_PROFILE", "prod").assert().code(1).stderr(
        predicate::str::contains(
            "no usable AWS credentials: profile \"prod\" (from AWS_PROFILE) is defined in neither",
        )
        .and(predicate::str::contains("profiles defined: dev;")),
    );
    let mut cmd = d.kfaws(&["--aws-profile", "staging", "plan"]);
    bare(&mut cmd);
    cmd.assert().code(1).stderr(predicate::str::contains(
        "profile \"staging\" (from --aws-profile) is defined in neither",
    ));
    let mut cmd = d.kfaws(&["plan"]);
    bare(&mut cmd);
    cmd.env("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "no usable AWS credentials: AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not",
        ));
}

/// With nothing listening at the endpoint, the SDK retries the first call
/// for up to a minute; kfaws says so at the first refused attempt instead of
/// staying silent until the error.
#[test]
fn an_unreachable_endpoint_is_reported_while_the_first_call_is_retried() {
    use std::io::BufRead as _;
    let d = Deployment::new("");
    let mut child = d
        .process(&["plan"])
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        first.contains("cannot reach http://127.0.0.1:9")
            && first.contains("Connection refused")
            && first.contains("retrying, up to 8 attempts"),
        "{first}"
    );
}

#[test]
fn unknown_and_unavailable_profiles_are_refused() {
    let d = Deployment::new("");
    // Usage errors exit 1: 2 means "changes present" for --detailed-exitcode.
    d.kfaws(&["plan", "--profile", "k8s", "--detailed-exitcode"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("vanilla").and(predicate::str::contains("rds-s3")));
    d.kfaws(&["plan", "--profile", "rds-s3"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("not yet available"));
}

#[test]
fn a_bad_value_from_an_environment_variable_names_the_variable() {
    let d = Deployment::new("");
    d.kfaws(&["train", "--data", "efs:/datasets/fashion-mnist"])
        .env("KFAWS_TRAINING_RUNTIME", "k8s")
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "invalid value 'k8s' for '--runtime",
        ))
        .stderr(predicate::str::contains(
            "the value came from the environment variable KFAWS_TRAINING_RUNTIME",
        ));
    // Typed on the command line, the flag is the culprit and the variable is not named.
    d.kfaws(&[
        "train",
        "--runtime",
        "k8s",
        "--data",
        "efs:/datasets/fashion-mnist",
    ])
    .env("KFAWS_TRAINING_RUNTIME", "local")
    .assert()
    .code(1)
    .stderr(predicate::str::contains("invalid value 'k8s'"))
    .stderr(predicate::str::contains("environment variable").not());
}

/// `kfaws train --runtime local` needs nothing from kfaws.toml, but a
/// `--config` it cannot read, or a file with errors, is refused as by every
/// other command, before anything runs.
#[test]
fn a_local_train_reads_the_config_it_is_given() {
    let d = Deployment::new("");
    let local = ["train", "--runtime", "local", "--data", "/nonexistent"];
    let mut args = local.to_vec();
    args.extend(["--config", "/nonexistent.toml"]);
    d.kfaws(&args)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("cannot read /nonexistent.toml"));
    d.write_config("bogus_key = 1\n");
    d.kfaws(&local)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("bogus_key"));
}

/// An error reported to a closed stderr (`kfaws … 2>&1 | head` after
/// `head` exited) keeps its exit status: 1, not a panic's 101. At -vv the
/// log lines go to the closed pipe too.
#[test]
fn an_error_on_a_closed_stderr_still_exits_1() {
    let d = Deployment::new("");
    for verbose in [None, Some("-vv")] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut args = vec!["validate", "--name", "test-k8_cluster01"];
        args.extend(verbose);
        let status = d
            .process(&args)
            .stdout(std::process::Stdio::null())
            .stderr(writer)
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(1), "{verbose:?}");
    }
}

/// `validate` names the Kubernetes bundles the config makes, and says what
/// leaving out each optional `[kubeflow]` file means.
#[test]
fn validate_lists_the_bundles_and_notes_a_missing_kubeflow_part() {
    let d = Deployment::new("");
    let out = d.stdout(&["validate"]);
    assert!(out.contains("The configuration is valid"), "{out}");
    assert!(
        out.contains("Kubernetes bundles: k8s.efs-csi, k8s.efs-storage, k8s.user-namespace.\n"),
        "{out}"
    );
    assert!(out.contains("Note: kubeflow.manifests is not set"), "{out}");
    assert!(
        out.contains("Note: kubeflow.training_operator is not set")
            && out.contains("`kfaws train --runtime kubernetes` has no PyTorchJob kind"),
        "{out}"
    );
    let with =
        Deployment::new("[kubeflow]\nmanifests = \"kf.yaml\"\ntraining_operator = \"op.yaml\"\n");
    for (file, namespace) in [("kf.yaml", "kubeflow"), ("op.yaml", "kubeflow-system")] {
        std::fs::write(
            with.dir.path().join(file),
            format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n"),
        )
        .unwrap();
    }
    let out = with.stdout(&["validate"]);
    assert!(
        out.contains("k8s.kubeflow") && out.contains("k8s.training-operator"),
        "{out}"
    );
    assert!(!out.contains("Note:"), "{out}");
}

#[test]
fn graph_prints_dot_with_every_resource() {
    let d = Deployment::new("");
    let dot = d.stdout(&["graph"]);
    assert!(dot.starts_with("digraph {"), "{dot}");
    for a in [
        "stack.network",
        "stack.iam",
        "stack.storage",
        "stack.efs",
        "stack.irsa",
        "eks.cluster",
        "eks.nodegroup.cpu",
        "iam.oidc",
        "k8s.efs-csi",
        "k8s.efs-storage",
        "k8s.user-namespace",
    ] {
        assert!(dot.contains(a), "{dot}");
    }
    // storage, irsa and iam.oidc one edge each, the cluster two, the node
    // group three; efs-csi three, efs-storage and the user namespace two each.
    assert_eq!(dot.matches("->").count(), 15, "{dot}");
}

/// Tag-policy tooling replaces whole tag sets (PutBucketTagging, or roles retagged by hand):
/// a stack's bucket and roles without kfaws' tags are still the stack's. After `kfaws state
/// rm`, the plan imports the stacks rather than refusing their names as someone else's.
#[tokio::test]
async fn stacks_whose_bucket_and_roles_lost_their_tags_are_imported_again() {
    use aws_sdk_s3::types::{Tag, Tagging};
    let d = Deployment::new("");
    let targets = ["--target", "stack.iam", "--target", "stack.storage"];
    d.stdout(&[&["apply", "--auto-approve"][..], &targets].concat());
    let bucket = d.output("stack.storage", "BucketName");
    let aws = d.aws().await;
    let team = Tag::builder().key("team").value("ml").build().unwrap();
    aws.s3()
        .put_bucket_tagging()
        .bucket(&bucket)
        .tagging(Tagging::builder().tag_set(team).build().unwrap())
        .send()
        .await
        .unwrap();
    let iam = aws.iam();
    let mut untagged = 0;
    for role in iam.list_roles().send().await.unwrap().roles() {
        let tags = iam
            .list_role_tags()
            .role_name(role.role_name())
            .send()
            .await
            .unwrap();
        let ours: Vec<String> = tags
            .tags()
            .iter()
            .map(|t| t.key().to_string())
            .filter(|k| k.starts_with("kfaws:"))
            .collect();
        if !ours.is_empty() {
            iam.untag_role()
                .role_name(role.role_name())
                .set_tag_keys(Some(ours))
                .send()
                .await
                .unwrap();
            untagged += 1;
        }
    }
    assert_eq!(untagged, 3, "the cluster, node and SageMaker roles");
    d.stdout(&["state", "rm", "stack.iam"]);
    d.stdout(&["state", "rm", "stack.storage"]);
    let plan = d.stdout(&[&["plan"][..], &targets].concat());
    assert!(
        plan.contains("# stack.iam will be imported")
            && plan.contains("# stack.storage will be imported")
            && plan.contains("Plan: 2 to import, 0 to add, 0 to change, 0 to destroy."),
        "{plan}"
    );
    let created = stacks_created(&d);
    let out = d.stdout(&[&["apply", "--auto-approve"][..], &targets].concat());
    assert!(
        out.contains("Resources: 2 imported, 0 added, 0 changed, 0 destroyed."),
        "{out}"
    );
    assert_eq!(stacks_created(&d), created, "no CreateStack reached AWS");
}

#[tokio::test]
async fn state_rm_forgets_without_deleting_and_apply_adopts_it_again() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    d.kfaws(&["state", "rm", "stack.iam"])
        .assert()
        .success()
        .stdout(predicate::str::contains("it still exists"));
    assert!(d.stdout(&["state", "list"]).contains("has no resources"));
    // Applying again adopts the stack kfaws made (it carries the deployment
    // tag) instead of failing with AlreadyExists, and the plan says so.
    let plan = d.stdout(&["plan", "--target", "stack.iam"]);
    assert!(
        plan.contains("# stack.iam will be imported")
            && plan.contains("this state's deployment and lineage tags")
            && plan.contains("Plan: 1 to import, 0 to add, 0 to change, 0 to destroy."),
        "{plan}"
    );
    assert!(
        !plan.contains("AWS::IAM::Role"),
        "an import lists no template resources to add: {plan}"
    );
    let created = stacks_created(&d);
    let out = d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert!(
        out.contains("Resources: 1 imported, 0 added, 0 changed, 0 destroyed."),
        "{out}"
    );
    assert_eq!(stacks_created(&d), created, "no CreateStack reached AWS");
    d.kfaws(&["plan", "--target", "stack.iam", "--detailed-exitcode"])
        .assert()
        .code(0);
    // The state records a stack id that no longer exists (edited by hand,
    // or the stack made again outside kfaws): the one of our name and tags
    // is imported too, and the plan and the summary say so.
    let mut state = d.state();
    let live_id = state["resources"]["stack.iam"]["physical_id"].clone();
    let stale = format!(
        "{}/00000000-0000-0000-0000-000000000000",
        live_id.as_str().unwrap().rsplit_once('/').unwrap().0
    );
    state["resources"]["stack.iam"]["physical_id"] = stale.clone().into();
    std::fs::write(d.state_file(), serde_json::to_vec_pretty(&state).unwrap()).unwrap();
    let plan = d.stdout(&["plan", "--target", "stack.iam"]);
    assert!(
        plan.contains("# stack.iam will be imported")
            && plan.contains(&format!(
                "reason: drift: deleted outside kfaws; {} exists with this state's deployment \
                 and lineage tags",
                live_id.as_str().unwrap()
            ))
            && plan.contains("Plan: 1 to import, 0 to add, 0 to change, 0 to destroy."),
        "{plan}"
    );
    let out = d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert!(
        out.contains("Resources: 1 imported, 0 added, 0 changed, 0 destroyed."),
        "{out}"
    );
    assert_eq!(d.state()["resources"]["stack.iam"]["physical_id"], live_id);
    assert_eq!(stacks_created(&d), created, "no CreateStack reached AWS");

    // A destroy deletes only what the state holds, and names what it leaves:
    // the forgotten stack, found by its tags.
    d.stdout(&["apply", "--auto-approve", "--target", "stack.network"]);
    d.kfaws(&["state", "rm", "stack.iam"]).assert().success();
    for command in [&["plan", "--destroy"][..], &["destroy", "--auto-approve"]] {
        let out = d.stdout(command);
        assert!(
            out.contains(&format!(
                "Warning: not destroyed: 1 resource(s) carry this deployment's tags but are not \
                 in its state (removed with `kfaws state rm`, or left by an interrupted apply): \
                 stack.iam ({})",
                live_id.as_str().unwrap()
            )),
            "{command:?}: {out}"
        );
    }
    // With nothing left in the state, a destroy still looks for them.
    let out = d.stdout(&["destroy", "--auto-approve"]);
    assert!(
        out.contains("No resources to destroy")
            && out.contains(&format!(
                "Warning: not destroyed: 1 resource(s) carry this deployment's tags but are not \
                 in its state (removed with `kfaws state rm`, or left by an interrupted apply): \
                 stack.iam ({})",
                live_id.as_str().unwrap()
            )),
        "{out}"
    );
    // A target the state does not hold is named so, with the way back.
    let err = d.fails(&["destroy", "--auto-approve", "--target", "stack.iam"]);
    assert!(
        err.contains("--target stack.iam: not in the state, so there is nothing of it to destroy")
            && err.contains("`kfaws apply --target stack.iam` imports it"),
        "{err}"
    );
    assert_eq!(
        d.live_stack_names().await,
        [format!("kfaws-{}-iam", d.name)],
        "the network went, the forgotten stack stayed"
    );
    // The remedy the warning names: imported, then destroyed.
    let out = d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert!(out.contains("1 imported"), "{out}");
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(d.live_stack_names().await.is_empty());
}

/// A cluster removed from the state (but not from AWS) sits in the network
/// destroy would delete and uses the roles and key of `stack.iam`: both
/// deletes are refused at plan, before anything is deleted, and never its
/// security groups taken for leftovers.
#[tokio::test]
async fn destroy_refuses_to_delete_the_network_or_the_roles_under_a_cluster_the_state_forgot() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "eks.cluster"]);
    d.stdout(&["state", "rm", "eks.cluster"]);
    let stacks = d.live_stack_names().await;
    let serial = d.state()["serial"].clone();
    let err = d.fails(&["destroy", "--auto-approve"]);
    assert!(
        err.contains(&format!("EKS cluster {} still exists", d.name))
            && err.contains("nothing was deleted")
            && err.contains("`kfaws apply` adopts it again"),
        "{err}"
    );
    assert_eq!(d.live_stack_names().await, stacks);
    assert_eq!(d.state()["serial"], serial);
    assert_eq!(calls(&d, "DeleteSecurityGroup"), 0);
    // The roles alone: the cluster's role and its secrets key are in use.
    let err = d.fails(&["destroy", "--auto-approve", "--target", "stack.iam"]);
    assert!(
        err.contains(&format!(
            "EKS cluster {} (status ACTIVE) still uses its cluster role",
            d.name
        )) && err.contains("and its secrets encryption key arn:aws:kms:")
            && err.contains("nothing was deleted"),
        "{err}"
    );
    assert_eq!(d.live_stack_names().await, stacks);
    assert_eq!(d.state()["serial"], serial);
    // The way out the message gives: adopt it, then destroy.
    d.stdout(&["apply", "--auto-approve", "--target", "eks.cluster"]);
    // A replacement of the roles' stack (a tainted entry) under the cluster
    // in the state is refused too: it would delete the role and key it uses.
    let mut state = d.state();
    state["resources"]["stack.iam"]["status"] = "tainted".into();
    std::fs::write(d.state_file(), serde_json::to_vec_pretty(&state).unwrap()).unwrap();
    let err = d.fails(&["apply", "--auto-approve", "--target", "eks.cluster"]);
    assert!(
        err.contains("the stack must be replaced, which deletes them")
            && err.contains("nothing was changed")
            && err.contains("`kfaws destroy --target stack.iam`"),
        "{err}"
    );
    assert_eq!(d.live_stack_names().await, stacks);
    // `kfaws taint` points at --replace; `kfaws untaint` clears the taint, once.
    let err = d.fails(&["taint", "stack.iam"]);
    assert!(
        err.contains("kfaws has no taint: run `kfaws apply --replace stack.iam`"),
        "{err}"
    );
    let out = d.stdout(&["untaint", "stack.iam"]);
    assert!(
        out.contains(&format!(
            "stack.iam ({}) is no longer tainted",
            state["resources"]["stack.iam"]["physical_id"]
                .as_str()
                .unwrap()
        )),
        "{out}"
    );
    assert_eq!(d.state()["resources"]["stack.iam"]["status"], "created");
    let err = d.fails(&["untaint", "stack.iam"]);
    assert!(
        err.contains("stack.iam is not tainted (its status is created)"),
        "{err}"
    );
    d.stdout(&["apply", "--auto-approve", "--target", "eks.cluster"]);
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(d.live_stack_names().await.is_empty());
}

/// A state edited by hand so that two addresses record one stack: every
/// plan is refused (the extra address would delete the other's stack), and
/// `state rm` of the wrong one is the way out.
#[tokio::test]
async fn two_addresses_recording_one_resource_are_refused_until_one_is_removed() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    let mut state = d.state();
    let iam = state["resources"]["stack.iam"].clone();
    state["resources"]["stack.copy"] = iam.clone();
    std::fs::write(d.state_file(), serde_json::to_vec_pretty(&state).unwrap()).unwrap();
    let stacks = d.live_stack_names().await;
    for args in [
        &["plan"][..],
        &["apply", "--auto-approve"],
        &["destroy", "--auto-approve"],
    ] {
        let err = d.fails(args);
        assert!(
            err.contains(&format!(
                "stack.copy and stack.iam record the same resource {}",
                iam["physical_id"].as_str().unwrap()
            )) && err.contains("`kfaws state rm ADDRESS`"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(d.live_stack_names().await, stacks, "nothing was deleted");
    d.stdout(&["state", "rm", "stack.copy"]);
    d.kfaws(&["plan", "--target", "stack.iam", "--detailed-exitcode"])
        .assert()
        .code(0);
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(d.live_stack_names().await.is_empty());
}

/// A network stack someone tried to delete under the cluster (left
/// DELETE_FAILED) must be replaced, which the cluster cannot survive:
/// refused at plan with the way out, instead of deleting the VPC's
/// contents and failing at the cluster.
#[tokio::test]
async fn a_broken_network_under_a_cluster_is_not_replaced_and_the_plan_says_how_to_rebuild() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "eks.cluster"]);
    let cfn = d.aws().await.cloudformation();
    let network = format!("kfaws-{}-network", d.name);
    let status = delete_stack_by_hand(&cfn, &network).await;
    assert_eq!(status, "DELETE_FAILED", "the cluster holds the VPC");
    let serial = d.state()["serial"].clone();
    let deletes = calls(&d, "DeleteStack");
    for args in [&["plan"][..], &["apply", "--auto-approve"]] {
        let err = d.fails(args);
        assert!(
            err.contains("the network must be replaced, which deletes VPC vpc-")
                && err.contains(&format!("EKS cluster {} (eks.cluster) runs in it", d.name))
                && err.contains("nothing was changed")
                && err.contains("`kfaws destroy --target stack.network`"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(d.state()["serial"], serial);
    assert_eq!(calls(&d, "DeleteStack"), deletes);
    // The way out the message gives.
    d.stdout(&["destroy", "--auto-approve", "--target", "stack.network"]);
    assert!(!d.live_stack_names().await.contains(&network));
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(d.live_stack_names().await.is_empty());
}

#[tokio::test]
async fn a_second_state_of_the_same_deployment_does_not_adopt_the_first_ones_stacks() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    // Another folder, same account, same deployment name: another state lineage.
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(
        d.dir.path().join("kfaws.toml"),
        other.path().join("kfaws.toml"),
    )
    .unwrap();
    // Refused by the plan, before anything is created or any state written.
    for command in [&["plan"][..], &["apply", "--auto-approve"]] {
        d.kfaws(command)
            .current_dir(other.path())
            .assert()
            .code(1)
            .stderr(predicate::str::contains(
                "stack.iam: stack kfaws-".to_string(),
            ))
            .stderr(predicate::str::contains("belongs to another kfaws state"));
    }
    assert!(
        !other
            .path()
            .join(".kfaws")
            .join(&d.name)
            .join("state.json")
            .exists(),
        "the refused plan wrote no state"
    );
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(d.live_stack_names().await.is_empty());
}

#[tokio::test]
async fn a_foreign_stack_that_took_our_stacks_name_is_never_adopted_nor_deleted() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    let cfn = d.aws().await.cloudformation();
    let name = format!("kfaws-{}-iam", d.name);
    cfn.delete_stack().stack_name(&name).send().await.unwrap();
    let template = format!(
        "Resources:\n  Bucket:\n    Type: AWS::S3::Bucket\n    Properties:\n      BucketName: foreign-{}\n",
        d.name
    );
    cfn.create_stack()
        .stack_name(&name)
        .template_body(template)
        .send()
        .await
        .unwrap();
    // The recorded stack is gone and the plan would create it again, but the name is taken:
    // the plan is refused rather than the apply failing at CreateStack.
    for command in [&["plan"][..], &["apply", "--auto-approve"]] {
        d.kfaws(command)
            .arg("--target")
            .arg("stack.iam")
            .assert()
            .code(1)
            .stderr(predicate::str::contains("was not created by kfaws"));
    }
    d.kfaws(&["destroy", "--auto-approve"]).assert().success();
    assert_eq!(
        d.live_stack_names().await,
        [name],
        "the foreign stack survives destroy"
    );
}

#[test]
fn a_saved_plan_is_refused_in_another_account() {
    let d = Deployment::new("");
    d.kfaws(&["plan", "-out", "tf.plan"]).assert().success();
    d.kfaws(&["apply", "tf.plan"])
        .env("AWS_ACCESS_KEY_ID", "111111111112")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("made in AWS account"));
    assert!(!d.state_file().exists(), "a refused plan writes no state");
    d.kfaws(&["apply", "tf.plan", "--region", "eu-west-1"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("differs from the saved plan"));
}

/// A manifests file edited after `plan -out`: the saved plan is refused,
/// naming the bundle and that the files it names changed.
#[test]
fn a_saved_plan_is_refused_once_a_manifests_file_changed() {
    let d = Deployment::new("");
    let manifests = d.dir.path().join("platform.yaml");
    let objects = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n---\napiVersion: v1\n\
                   kind: ConfigMap\nmetadata:\n  name: a\n  namespace: team\n";
    std::fs::write(&manifests, objects).unwrap();
    d.write_config(&format!("[kubeflow]\nmanifests = {manifests:?}\n"));
    d.kfaws(&["plan", "-out", "tf.plan"]).assert().success();
    std::fs::write(
        &manifests,
        format!("{objects}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: team\n"),
    )
    .unwrap();
    d.kfaws(&["apply", "tf.plan"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "the saved plan's spec for k8s.kubeflow differs from what this kfaws computes now",
        ))
        .stderr(predicate::str::contains(
            "a [kubeflow] manifests file edited",
        ));
    assert!(!d.state_file().exists(), "a refused plan writes no state");
}

#[test]
fn an_interrupt_while_planning_exits_128_plus_the_signal_and_leaves_no_lock() {
    let d = Deployment::new("");
    let control = std::env::var("KFAWS_EMULATOR_CONTROL").expect("run under with_emulator.sh");
    // The shell convention: 128 + SIGINT (2), 128 + SIGTERM (15).
    // The first line names a signal the user did not type (SIGTERM from a
    // supervisor); Ctrl-C is an "Interrupt".
    for (signal, status, said) in [
        (
            "INT",
            130,
            "Interrupt received: stopping; nothing was changed.",
        ),
        (
            "TERM",
            143,
            "SIGTERM received: stopping; nothing was changed.",
        ),
    ] {
        let rule = format!(
            r#"{{"service":"sts","operation":"GetCallerIdentity","kind":"latency","latency_ms":4000,"count":1,"account_id":"{}"}}"#,
            d.account
        );
        let added = std::process::Command::new("curl")
            .args([
                "-fsS",
                "-XPOST",
                &format!("{control}/faults"),
                "-H",
                "content-type: application/json",
                "-d",
                &rule,
            ])
            .output()
            .unwrap();
        assert!(added.status.success(), "{added:?}");
        let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("kfaws"))
            .arg("plan")
            .current_dir(d.dir.path())
            .env("AWS_ACCESS_KEY_ID", &d.account)
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let lock = d.dir.path().join(".kfaws").join(&d.name).join("state.lock");
        assert!(lock.exists(), "plan holds the lock while it waits for STS");
        common::signal(child.id(), signal);
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(status),
            "SIG{signal}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A plan changes nothing: not the apply's words about calls in flight.
        assert!(
            stderr.contains(said) && !stderr.contains("Nothing new will start"),
            "SIG{signal}: {stderr}"
        );
        assert!(!lock.exists(), "the lock is released");
    }
}

/// A call the SDK retried until its attempts ran out (8, the standard retry mode's budget
/// as kfaws sets it) says so in its error: the user sees it was not one unlucky answer.
#[test]
fn a_call_whose_every_attempt_failed_says_how_many_it_made() {
    let d = Deployment::new("");
    common::aws::control(
        "faults",
        "POST",
        &format!(
            r#"{{"service":"sts","operation":"GetCallerIdentity","kind":"server_error","count":8,"account_id":"{}"}}"#,
            d.account
        ),
    );
    let err = d.fails(&["plan"]);
    assert!(
        err.contains("cannot determine the AWS identity (sts:GetCallerIdentity): InternalFailure")
            && err.contains(", after 8 attempts)"),
        "{err}"
    );
}

#[tokio::test]
async fn a_template_edited_outside_kfaws_is_drift_and_apply_restores_it() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    let cfn = d.aws().await.cloudformation();
    let name = format!("kfaws-{}-iam", d.name);
    update_template_by_hand(&cfn, &name, |ours| {
        format!("{ours}\n  Extra:\n    Value: added by hand\n")
    })
    .await;
    let plan = d.stdout(&["plan", "--target", "stack.iam"]);
    assert!(
        plan.contains("drift: changed outside kfaws: template_sha256"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    d.kfaws(&["plan", "--target", "stack.iam", "--detailed-exitcode"])
        .assert()
        .code(0);
    d.stdout(&["destroy", "--auto-approve"]);
}

/// The artifact bucket's settings weakened outside kfaws (public access
/// block deleted, versioning suspended, default encryption deleted), and
/// then the bucket deleted: each is drift in the plan, and apply puts the
/// template's settings back (and the bucket, with its tags).
#[tokio::test]
async fn artifact_bucket_settings_changed_outside_kfaws_are_drift_and_apply_restores_them() {
    use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};

    let d = Deployment::new("");
    let target = ["--target", "stack.storage"];
    d.stdout(&[&["apply", "--auto-approve"][..], &target].concat());
    let bucket = format!("kfaws-{}-us-east-1-artifacts", d.name);
    let s3 = d.aws().await.s3();
    s3.delete_public_access_block()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    s3.put_bucket_versioning()
        .bucket(&bucket)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Suspended)
                .build(),
        )
        .send()
        .await
        .unwrap();
    s3.delete_bucket_encryption()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&[&["plan"][..], &target].concat());
    assert!(
        plan.contains("drift: changed outside kfaws: artifact_bucket"),
        "{plan}"
    );
    assert!(
        plan.contains("Suspended") && plan.contains("BlockPublicAcls"),
        "{plan}"
    );
    d.stdout(&[&["apply", "--auto-approve"][..], &target].concat());
    let block = s3
        .get_public_access_block()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    let block = block.public_access_block_configuration().unwrap();
    assert_eq!(
        [
            block.block_public_acls(),
            block.ignore_public_acls(),
            block.block_public_policy(),
            block.restrict_public_buckets()
        ],
        [Some(true); 4]
    );
    let versioning = s3
        .get_bucket_versioning()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    assert_eq!(versioning.status(), Some(&BucketVersioningStatus::Enabled));
    let encryption = s3
        .get_bucket_encryption()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    let rule = &encryption
        .server_side_encryption_configuration()
        .unwrap()
        .rules()[0];
    assert_eq!(
        rule.apply_server_side_encryption_by_default()
            .unwrap()
            .sse_algorithm()
            .as_str(),
        "AES256"
    );
    d.kfaws(&[&["plan", "--detailed-exitcode"][..], &target].concat())
        .assert()
        .code(0);

    // Deleted outside kfaws: CloudFormation would not make it again.
    s3.delete_bucket().bucket(&bucket).send().await.unwrap();
    let plan = d.stdout(&[&["plan"][..], &target].concat());
    assert!(plan.contains("deleted outside kfaws"), "{plan}");
    d.stdout(&[&["apply", "--auto-approve"][..], &target].concat());
    let tags = s3
        .get_bucket_tagging()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    assert!(
        tags.tag_set()
            .iter()
            .any(|t| t.key() == "kfaws:deployment" && t.value() == d.name),
        "{tags:?}"
    );
    d.kfaws(&[&["plan", "--detailed-exitcode"][..], &target].concat())
        .assert()
        .code(0);

    // The EFS file system deleted outside kfaws (its mount targets first, as EFS requires):
    // drift that replaces its stack, not "No changes". The artifact bucket is in another
    // stack, so the repair neither waits for it to be emptied nor touches what it holds.
    s3.put_object()
        .bucket(&bucket)
        .key("models/kept.txt")
        .body(b"a model".to_vec().into())
        .send()
        .await
        .unwrap();
    let target = ["--target", "stack.efs"];
    d.stdout(&[&["apply", "--auto-approve"][..], &target].concat());
    let efs = aws_sdk_efs::Client::new(&d.sdk().await);
    let fs = d.output("stack.efs", "FileSystemId");
    delete_mount_targets(&efs, &fs).await;
    efs.delete_file_system()
        .file_system_id(&fs)
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&[&["plan"][..], &target].concat());
    assert!(
        plan.contains("-/+ stack.efs")
            && plan.contains(&format!("EFS file system {fs} deleted outside kfaws"))
            && !plan.contains("stack.storage")
            // Already gone: the replacement deletes no files.
            && !plan.contains("(EFS file system)"),
        "{plan}"
    );
    d.stdout(&[&["apply", "--auto-approve"][..], &target].concat());
    let new = d.output("stack.efs", "FileSystemId");
    assert_ne!(new, fs);
    efs.describe_file_systems()
        .file_system_id(&new)
        .send()
        .await
        .unwrap();
    s3.head_object()
        .bucket(&bucket)
        .key("models/kept.txt")
        .send()
        .await
        .expect("the bucket's objects are untouched by the repair");
    for target in [["--target", "stack.efs"], ["--target", "stack.storage"]] {
        d.kfaws(&[&["plan", "--detailed-exitcode"][..], &target].concat())
            .assert()
            .code(0);
    }
    d.stdout(&["destroy", "--auto-approve", "--force-destroy-buckets"]);
    assert!(d.aws().await.leftovers().await.is_empty());
}

/// The NFS security group opened to the world outside kfaws (and its own
/// rule revoked) is drift in the plan; apply revokes what the template does
/// not declare and puts its rule back.
#[tokio::test]
async fn nfs_security_group_rules_changed_outside_kfaws_are_drift_and_apply_restores_them() {
    use aws_sdk_ec2::types::{IpPermission, IpRange};

    let d = Deployment::new("");
    let target = ["--target", "stack.network"];
    d.stdout(&[&["apply", "--auto-approve"][..], &target].concat());
    let group = d.output("stack.network", "NfsSecurityGroupId");
    let ec2 = d.aws().await.ec2();
    let rule = |protocol: &str, port: Option<i32>, cidr: &str| {
        IpPermission::builder()
            .ip_protocol(protocol)
            .set_from_port(port)
            .set_to_port(port)
            .ip_ranges(IpRange::builder().cidr_ip(cidr).build())
            .build()
    };
    ec2.authorize_security_group_ingress()
        .group_id(&group)
        .ip_permissions(rule("-1", None, "0.0.0.0/0"))
        .send()
        .await
        .unwrap();
    ec2.revoke_security_group_ingress()
        .group_id(&group)
        .ip_permissions(rule("tcp", Some(2049), "10.0.0.0/16"))
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&[&["plan"][..], &target].concat());
    assert!(
        plan.contains("drift: changed outside kfaws: nfs_ingress")
            && plan.contains("all from 0.0.0.0/0")
            && plan.contains("tcp 2049 from 10.0.0.0/16"),
        "{plan}"
    );
    d.stdout(&[&["apply", "--auto-approve"][..], &target].concat());
    let described = ec2
        .describe_security_groups()
        .group_ids(&group)
        .send()
        .await
        .unwrap();
    let permissions = described.security_groups()[0].ip_permissions();
    assert_eq!(permissions.len(), 1, "{permissions:?}");
    assert_eq!(permissions[0].ip_protocol(), Some("tcp"));
    assert_eq!(permissions[0].from_port(), Some(2049));
    assert_eq!(permissions[0].ip_ranges()[0].cidr_ip(), Some("10.0.0.0/16"));
    d.kfaws(&[&["plan", "--detailed-exitcode"][..], &target].concat())
        .assert()
        .code(0);
    d.stdout(&["destroy", "--auto-approve"]);
}

/// `plan -out` writes only regular files: through a symbolic link (the
/// link stays), never over a FIFO (or a device such as /dev/null), and not
/// into a directory that does not exist (Terraform refuses it too).
#[tokio::test]
async fn plan_out_follows_links_and_refuses_what_is_not_a_regular_file() {
    use std::os::unix::fs::FileTypeExt as _;

    let d = Deployment::new("");
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.plan");
    std::fs::write(&real, "old").unwrap();
    let link = dir.path().join("link.plan");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    d.stdout(&["plan", "-out", link.to_str().unwrap()]);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&real).unwrap()).unwrap();
    assert!(saved.is_object(), "{saved}");
    // The command it suggests runs as printed: a name the shell would split, or kfaws would
    // read as a flag, is written so that it is not. A name starting with a dash is the value
    // of -out, as Terraform's CLI takes it.
    for (name, word) in [("-x.plan", "./-x.plan"), ("my plan", "'my plan'")] {
        let out = d.stdout(&["plan", "-out", name]);
        assert!(
            out.contains(&format!(
                "To perform exactly these actions, run: kfaws apply {word}\n"
            )),
            "{out}"
        );
    }

    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // Refused before planning: nothing of a plan is printed.
    let refused = d
        .kfaws(&["plan", "-out", fifo.to_str().unwrap()])
        .assert()
        .code(1)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("is not a regular file"), "{err}");
    assert!(refused.stdout.is_empty(), "{:?}", refused.stdout);
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());

    let missing = dir.path().join("missing/p.plan");
    let err = d.fails(&["plan", "-out", missing.to_str().unwrap()]);
    assert!(
        err.contains(&format!(
            "{}: no such directory",
            dir.path().join("missing").display()
        )),
        "{err}"
    );
    assert!(!err.contains(".plan-"), "no temporary file's name: {err}");
    assert!(!dir.path().join("missing").exists());
}

fn control(path: &str, method: &str, body: &str) -> String {
    let url = format!(
        "{}/{path}",
        std::env::var("KFAWS_EMULATOR_CONTROL").expect("run under with_emulator.sh")
    );
    let out = std::process::Command::new("curl")
        .args([
            "-fsS",
            "-X",
            method,
            &url,
            "-H",
            "content-type: application/json",
        ])
        .args(if body.is_empty() {
            vec![]
        } else {
            vec!["-d", body]
        })
        .output()
        .unwrap();
    assert!(out.status.success(), "{url}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// CreateStack calls that reached moto (not faulted) in this account.
fn stacks_created(d: &Deployment) -> u64 {
    calls(d, "CreateStack")
}

/// Calls of `operation` in the deployment's account that reached moto (not faulted).
fn calls(d: &Deployment, operation: &str) -> u64 {
    let calls: serde_json::Value = serde_json::from_str(&control(
        &format!("calls?account_id={}", d.account),
        "GET",
        "",
    ))
    .unwrap();
    calls
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["operation"] == operation)
        .map(|c| c["calls"].as_u64().unwrap() - c["faulted"].as_u64().unwrap())
        .sum()
}

#[tokio::test]
async fn apply_and_destroy_finish_with_20_percent_of_calls_of_every_service_throttled_or_failing() {
    let d = Deployment::new("");
    for service in ["cloudformation", "sts", "eks", "iam", "ec2", "s3"] {
        for kind in ["throttle", "server_error"] {
            control(
                "faults",
                "POST",
                &format!(
                    r#"{{"service":"{service}","operation":"*","kind":"{kind}","probability":0.1,"count":null,"account_id":"{}"}}"#,
                    d.account
                ),
            );
        }
    }
    d.stdout(&["apply", "--auto-approve"]);
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    assert_eq!(stacks_created(&d), 5, "every stack created exactly once");
    for operation in [
        "CreateCluster",
        "CreateNodegroup",
        "CreateOpenIDConnectProvider",
    ] {
        assert_eq!(calls(&d, operation), 1, "{operation} reached AWS once");
    }
    d.stdout(&["destroy", "--auto-approve"]);
    let faults: serde_json::Value = serde_json::from_str(&control("faults", "GET", "")).unwrap();
    let fired: u64 = faults
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["account_id"] == d.account.as_str())
        .map(|r| r["fired"].as_u64().unwrap())
        .sum();
    assert!(fired > 0, "the faults were exercised");
    // The test's own check below goes without faults: its client retries
    // less than kfaws does, and would fail the test, not kfaws.
    control(&format!("faults?account_id={}", d.account), "DELETE", "");
    assert!(d.live_stack_names().await.is_empty());
}

#[tokio::test]
async fn apply_killed_at_random_moments_then_rerun_creates_each_stack_once() {
    let d = Deployment::new("");
    control(
        &format!("lifecycle?account_id={}", d.account),
        "PUT",
        r#"{"scale": 1, "durations": {"cloudformation.stack.create": 1, "cloudformation.stack.delete": 1, "eks.cluster.create": 1, "eks.cluster.delete": 1, "eks.nodegroup.create": 1, "eks.nodegroup.delete": 1}}"#,
    );
    let seed = fastrand::u64(..);
    let mut rng = fastrand::Rng::with_seed(seed);
    for trial in 0..10 {
        let mut child = d.spawn(&["apply", "--auto-approve"]);
        std::thread::sleep(std::time::Duration::from_millis(rng.u64(0..2500)));
        let _ = child.kill();
        let status = child.wait().unwrap();
        assert!(
            status.code().is_none() || status.success(),
            "trial {trial} (seed {seed}): {status:?}"
        );
        d.unlock_after_kill();
    }
    d.stdout(&["apply", "--auto-approve"]);
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    assert_eq!(stacks_created(&d), 5, "seed {seed}: no stack created twice");
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(d.live_stack_names().await.is_empty());
}

/// DeleteStack of `name` outside kfaws; the status it settles in
/// (`DELETE_COMPLETE`, or `DELETE_FAILED` when something holds its
/// resources), within 30 s.
async fn delete_stack_by_hand(cfn: &aws_sdk_cloudformation::Client, name: &str) -> String {
    cfn.delete_stack().stack_name(name).send().await.unwrap();
    settled_status(cfn, name).await
}

/// Deletes every mount target of EFS file system `fs` by hand, as EFS
/// requires before the file system itself goes.
async fn delete_mount_targets(efs: &aws_sdk_efs::Client, fs: &str) {
    let targets = efs
        .describe_mount_targets()
        .file_system_id(fs)
        .send()
        .await
        .unwrap();
    for t in targets.mount_targets() {
        efs.delete_mount_target()
            .mount_target_id(t.mount_target_id())
            .send()
            .await
            .unwrap();
    }
}

/// A network stack left DELETE_FAILED under the EFS stack's mount targets
/// (no cluster): the replacement is refused at plan naming them, since it
/// would delete the network alone and wait out its deadline for them. With
/// the mount targets gone, the replacement is planned.
#[tokio::test]
async fn a_stack_left_in_delete_failed_is_replaced_only_once_nothing_holds_it_and_destroy_cleans_up(
) {
    let d = Deployment::new("");
    // No cluster: a network under one is not replaced (see
    // a_broken_network_under_a_cluster_is_not_replaced_and_the_plan_says_how_to_rebuild).
    d.stdout(&["apply", "--auto-approve", "--target", "stack.efs"]);
    let cfn = d.aws().await.cloudformation();
    let network = format!("kfaws-{}-network", d.name);
    // The efs stack's mount targets are still in the network's subnets,
    // so deleting the network stack out of band fails (DependencyViolation).
    let status = delete_stack_by_hand(&cfn, &network).await;
    assert_eq!(status, "DELETE_FAILED");
    let fs = d.output("stack.efs", "FileSystemId");
    let stacks = d.live_stack_names().await;
    let deletes = calls(&d, "DeleteStack");
    for args in [&["plan"][..], &["apply", "--auto-approve"]] {
        let err = d.fails(args);
        assert!(
            err.contains("the network must be replaced, which deletes VPC vpc-")
                && err.contains(&format!("EFS mount targets of file system(s) {fs} (eni-"))
                && err.contains("nothing was changed")
                && err.contains(
                    "`kfaws destroy --target stack.network` deletes stack.efs (the file system \
                     and the files on it) first"
                ),
            "{args:?}: {err}"
        );
    }
    assert_eq!(d.live_stack_names().await, stacks);
    assert_eq!(calls(&d, "DeleteStack"), deletes);
    // The mount targets deleted by hand: nothing holds the subnets, and the
    // replacement is planned.
    let efs = aws_sdk_efs::Client::new(&d.sdk().await);
    delete_mount_targets(&efs, &fs).await;
    let plan = d.stdout(&["plan", "--target", "stack.efs"]);
    assert!(plan.contains("-/+ stack.network"), "{plan}");
    assert!(
        plan.contains("health changed outside kfaws, which forces replacement"),
        "{plan}"
    );
    assert!(
        plan.contains("~ health: \"DELETE_FAILED\" -> \"healthy\""),
        "{plan}"
    );
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(d.live_stack_names().await.is_empty());
}

#[tokio::test]
async fn a_stack_being_deleted_outside_kfaws_is_planned_for_replacement_and_apply_makes_it_again() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    let cfn = d.aws().await.cloudformation();
    let stack = format!("kfaws-{}-iam", d.name);
    // Deletes of this account's stacks take 20 s from now on; creates stay instant.
    control(
        &format!("lifecycle?account_id={}", d.account),
        "PUT",
        r#"{"scale": 1, "durations": {"cloudformation.stack.create": 0, "cloudformation.stack.delete": 20}}"#,
    );
    cfn.delete_stack().stack_name(&stack).send().await.unwrap();
    let plan = d.stdout(&["plan", "--target", "stack.iam"]);
    assert!(plan.contains("-/+ stack.iam"), "{plan}");
    assert!(
        plan.contains("~ health: \"DELETE_IN_PROGRESS\" -> \"healthy\""),
        "{plan}"
    );
    // The replacement waits for the delete someone else started, then creates.
    let out = d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert!(out.contains("1 added, 0 changed, 1 destroyed"), "{out}");
    let status = cfn
        .describe_stacks()
        .stack_name(&stack)
        .send()
        .await
        .unwrap();
    assert_eq!(
        status.stacks()[0].stack_status().unwrap().as_str(),
        "CREATE_COMPLETE"
    );
    d.kfaws(&["plan", "--target", "stack.iam", "--detailed-exitcode"])
        .assert()
        .code(0);
    control(
        &format!("lifecycle?account_id={}", d.account),
        "PUT",
        r#"{"scale": 0}"#,
    );
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(d.live_stack_names().await.is_empty());
}

/// A stack whose failed update CloudFormation could not roll back (UPDATE_ROLLBACK_FAILED)
/// takes no update and no change set; deleting and making it again would take the VPC, the
/// cluster or the file system in it. The plan shows an update in place that continues the
/// rollback, naming the resource and CloudFormation's reason; an apply whose continued
/// rollback fails again says how to skip the resource by hand and leaves the stack and its
/// state entry as they were; once the rollback goes through, the stack is ours again.
#[tokio::test]
async fn a_stack_whose_update_rollback_failed_is_rolled_back_in_place_never_replaced() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    let cfn = d.aws().await.cloudformation();
    let stack = format!("kfaws-{}-iam", d.name);
    let id = d.state()["resources"]["stack.iam"]["physical_id"].clone();
    // CloudFormation cannot roll back ClusterRole twice: after the failed update below, and
    // at the first ContinueUpdateRollback.
    let reason = "Role was modified outside CloudFormation";
    control(
        "cfn/rollback-failures",
        "POST",
        &format!(
            r#"{{"stack_name":"{stack}","logical_id":"ClusterRole","reason":"{reason}","count":2,"account_id":"{}"}}"#,
            d.account
        ),
    );
    // Someone updates our stack by hand with a role whose managed policy does not exist.
    update_template_by_hand(&cfn, &stack, |ours| {
        ours.replacen(
            "\nResources:\n",
            "\nResources:\n  HandMade:\n    Type: AWS::IAM::Role\n    Properties:\n      \
             AssumeRolePolicyDocument:\n        Version: '2012-10-17'\n        Statement: []\n      \
             ManagedPolicyArns:\n        - arn:aws:iam::aws:policy/NoSuchPolicyAnywhere\n",
            1,
        )
    })
    .await;
    assert_eq!(settled_status(&cfn, &stack).await, "UPDATE_ROLLBACK_FAILED");
    // Forgotten by the state, the stack is imported again as it is, not tainted and replaced.
    d.kfaws(&["state", "rm", "stack.iam"]).assert().success();
    let out = d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert!(out.contains("1 imported"), "{out}");
    assert_eq!(d.state()["resources"]["stack.iam"]["status"], "created");
    assert_eq!(d.state()["resources"]["stack.iam"]["physical_id"], id);

    let plan = d.stdout(&["plan", "--target", "stack.iam"]);
    assert!(plan.contains("~ stack.iam"), "{plan}");
    assert!(!plan.contains("-/+ stack.iam"), "{plan}");
    assert!(
        plan.contains("~ update_rollback_failed: true -> false"),
        "{plan}"
    );
    assert!(
        plan.contains(&format!(
            "Rollback ClusterRole (AWS::IAM::Role)  # its rollback failed ({reason}); apply \
             continues the rollback (ContinueUpdateRollback)"
        )),
        "{plan}"
    );

    // The continued rollback fails again: nothing is deleted, and the error says what to do.
    let out = d.fails_with_output(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert!(
        out.contains(&format!(
            "stack {stack} is still UPDATE_ROLLBACK_FAILED: CloudFormation could not roll back \
             ClusterRole (AWS::IAM::Role: {reason})"
        )) && out.contains(&format!(
            "aws cloudformation continue-update-rollback --stack-name {stack} \
             --resources-to-skip ClusterRole"
        )),
        "{out}"
    );
    assert_eq!(d.calls("ContinueUpdateRollback"), 1);
    assert_eq!(d.calls("DeleteStack"), 0);
    assert_eq!(d.state()["resources"]["stack.iam"]["physical_id"], id);
    assert_eq!(d.state()["resources"]["stack.iam"]["status"], "created");

    // The cause gone (the rule spent), the next apply rolls back and the stack is ours again.
    let out = d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert!(out.contains("0 added, 1 changed, 0 destroyed"), "{out}");
    assert_eq!(d.calls("ContinueUpdateRollback"), 2);
    assert_eq!(d.calls("DeleteStack"), 0);
    assert_eq!(
        settled_status(&cfn, &stack).await,
        "UPDATE_ROLLBACK_COMPLETE"
    );
    assert_eq!(d.state()["resources"]["stack.iam"]["physical_id"], id);
    d.kfaws(&["plan", "--target", "stack.iam", "--detailed-exitcode"])
        .assert()
        .code(0);

    // kfaws's own update fails (a managed policy that does not exist, of another account, which
    // the plan does not check), and so does its rollback: the error says both, and that the
    // next apply continues the rollback.
    control(
        "cfn/rollback-failures",
        "POST",
        &format!(
            r#"{{"stack_name":"{stack}","logical_id":"NodeRole","reason":"{reason}","account_id":"{}"}}"#,
            d.account
        ),
    );
    d.write_config(
        "[options]\nnode_role_policies = [\"arn:aws:iam::210987654321:policy/NoSuchPolicyAnywhere\"]\n",
    );
    let out = d.fails_with_output(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert!(
        out.contains(&format!(
            "stack {stack} is UPDATE_ROLLBACK_FAILED: the update failed"
        )) && out.contains("NoSuchPolicyAnywhere")
            && out.contains(&format!(
                "and CloudFormation could not roll it back: NodeRole (AWS::IAM::Role: {reason}); \
                 the next apply continues the rollback (ContinueUpdateRollback)"
            )),
        "{out}"
    );
    assert_eq!(settled_status(&cfn, &stack).await, "UPDATE_ROLLBACK_FAILED");
    // The policy corrected in the config, the next apply rolls back, then updates the stack
    // through a change set computed after the rollback.
    let executed = d.calls("ExecuteChangeSet");
    d.write_config(
        "[options]\nnode_role_policies = [\"arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore\"]\n",
    );
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert_eq!(d.calls("ContinueUpdateRollback"), 3);
    assert_eq!(d.calls("ExecuteChangeSet"), executed + 1);
    assert_eq!(settled_status(&cfn, &stack).await, "UPDATE_COMPLETE");
    assert_eq!(d.calls("DeleteStack"), 0);
    assert_eq!(d.state()["resources"]["stack.iam"]["physical_id"], id);
    d.kfaws(&["plan", "--target", "stack.iam", "--detailed-exitcode"])
        .assert()
        .code(0);
}

/// A managed policy of `options.node_role_policies` that does not exist (a typo) would fail
/// the node role, and so stack.iam, half way through an apply: the plan refuses it before any
/// stack is made, naming the field, every such ARN (AWS managed, or of this account) and the
/// rule, and leaves another account's policy unchecked. Corrected, the stack plans and applies;
/// an update that adds such a policy is refused too.
#[tokio::test]
async fn a_node_role_policy_that_does_not_exist_is_refused_by_the_plan() {
    let typo = "arn:aws:iam::aws:policy/NoSuchPolicyXYZ";
    let ssm = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore";
    let other = "arn:aws:iam::210987654321:policy/Theirs";
    let d = Deployment::new("");
    let mine = format!("arn:aws:iam::{}:policy/Mine", d.account);
    d.write_config(&format!(
        "[options]\nnode_role_policies = [{typo:?}, {ssm:?}, {mine:?}, {other:?}]\n"
    ));
    for command in [&["plan"][..], &["apply", "--auto-approve"]] {
        let err = d.fails(command);
        assert!(
            err.contains(&format!(
                "options.node_role_policies: IAM managed policies {typo}, {mine} do not exist \
                 (IAM GetPolicy: NoSuchEntity), and a policy must exist to be attached to a role \
                 (IAM AttachRolePolicy; CloudFormation AWS::IAM::Role ManagedPolicyArns)"
            )) && !err.contains(other),
            "{command:?}: {err}"
        );
    }
    assert_eq!(d.calls("CreateStack") + d.calls("CreateChangeSet"), 0);

    d.write_config(&format!("[options]\nnode_role_policies = [{ssm:?}]\n"));
    let out = d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert!(out.contains("1 added, 0 changed, 0 destroyed"), "{out}");
    d.kfaws(&["plan", "--target", "stack.iam", "--detailed-exitcode"])
        .assert()
        .code(0);

    d.write_config(&format!(
        "[options]\nnode_role_policies = [{ssm:?}, {typo:?}]\n"
    ));
    let err = d.fails(&["plan", "--target", "stack.iam"]);
    assert!(
        err.contains(&format!(
            "options.node_role_policies: IAM managed policy {typo} does not exist"
        )),
        "{err}"
    );
    d.stdout(&["destroy", "--auto-approve"]);
}

/// The status of `stack` once it is not `*_IN_PROGRESS` (30 s at most).
async fn settled_status(cfn: &aws_sdk_cloudformation::Client, stack: &str) -> String {
    for _ in 0..300 {
        let out = cfn
            .describe_stacks()
            .stack_name(stack)
            .send()
            .await
            .unwrap();
        let status = out.stacks()[0].stack_status().unwrap().as_str().to_string();
        if !status.ends_with("_IN_PROGRESS") {
            return status;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("stack {stack} still in progress after 30 s");
}

/// The first Ctrl-C while CloudFormation updates a stack stops the wait
/// (the update carries on): exit 130, the entry keeps the unfinished update,
/// and the next apply waits for it to end and executes no second change set.
#[tokio::test]
async fn the_first_interrupt_stops_the_wait_for_a_stack_update() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    let cfn = d.aws().await.cloudformation();
    let stack = format!("kfaws-{}-iam", d.name);
    // Stack updates take 30 s.
    d.lifecycle(r#"{"scale": 1}"#);
    d.write_config("[options]\nsagemaker_role_policy = \"full\"\n");
    let apply = ["apply", "--auto-approve", "--target", "stack.iam"];
    let (out, took) = d
        .interrupt_when(&apply, "UPDATE_IN_PROGRESS", || async {
            let out = cfn
                .describe_stacks()
                .stack_name(&stack)
                .send()
                .await
                .unwrap();
            out.stacks()[0].stack_status().map(|s| s.as_str()) == Some("UPDATE_IN_PROGRESS")
        })
        .await;
    // The update takes 30 s.
    Deployment::assert_stopped(
        &out,
        took,
        std::time::Duration::from_secs(15),
        &format!(
            "Interrupted: stack.iam: update: stopped waiting for stack {stack} to finish updating"
        ),
    );
    let entry = d.state()["resources"]["stack.iam"].clone();
    assert!(entry["updating"].is_object(), "{entry}");
    assert_eq!(d.calls("ExecuteChangeSet"), 1);
    // The update is not executed twice.
    d.resume_interrupted_update("stack.iam", "ExecuteChangeSet");
    d.kfaws(&["plan", "--target", "stack.iam", "--detailed-exitcode"])
        .assert()
        .code(0);
}

#[tokio::test]
async fn a_stack_update_is_planned_and_applied_through_a_change_set() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    let cfn = d.aws().await.cloudformation();
    let stack = format!("kfaws-{}-iam", d.name);
    // Someone adds a resource to our stack by hand.
    update_template_by_hand(&cfn, &stack, |ours| {
        ours.replacen(
            "\nResources:\n",
            "\nResources:\n  HandMade:\n    Type: AWS::SNS::Topic\n",
            1,
        )
    })
    .await;
    let plan = d.stdout(&["plan", "--target", "stack.iam"]);
    assert!(
        plan.contains("resource changes:\n        - HandMade (AWS::SNS::Topic)"),
        "{plan}"
    );
    let change_sets =
        |out: aws_sdk_cloudformation::operation::list_change_sets::ListChangeSetsOutput| {
            out.summaries()
                .iter()
                .map(|s| s.change_set_name().unwrap_or_default().to_string())
                .collect::<Vec<_>>()
        };
    let left = change_sets(
        cfn.list_change_sets()
            .stack_name(&stack)
            .send()
            .await
            .unwrap(),
    );
    assert!(left.is_empty(), "plan left change sets behind: {left:?}");

    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    let executed = change_sets(
        cfn.list_change_sets()
            .stack_name(&stack)
            .send()
            .await
            .unwrap(),
    );
    assert!(
        executed.len() == 1 && executed[0].starts_with("kfaws-apply-"),
        "{executed:?}"
    );
    let resources = cfn
        .list_stack_resources()
        .stack_name(&stack)
        .send()
        .await
        .unwrap();
    assert!(
        !resources
            .stack_resource_summaries()
            .iter()
            .any(|r| r.logical_resource_id() == Some("HandMade")),
        "{resources:?}"
    );

    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint())
        .credentials_provider(Credentials::new(&d.account, "test", None, None, "test"))
        .load()
        .await;
    let iam = aws_sdk_iam::Client::new(&config);
    let attached = |iam: aws_sdk_iam::Client| async move {
        let out = iam
            .list_attached_role_policies()
            .role_name("sagemakerrole")
            .send()
            .await
            .unwrap();
        let mut names: Vec<String> = out
            .attached_policies()
            .iter()
            .filter_map(|p| p.policy_name().map(str::to_string))
            .collect();
        names.sort();
        names
    };
    let inline = |iam: aws_sdk_iam::Client| async move {
        let out = iam
            .list_role_policies()
            .role_name("sagemakerrole")
            .send()
            .await
            .unwrap();
        out.policy_names().to_vec()
    };
    // The default SageMaker role is scoped: one inline policy, no managed ones.
    assert!(attached(iam.clone()).await.is_empty());
    assert_eq!(inline(iam.clone()).await, ["kfaws-scoped"]);

    // The inline policy deleted outside kfaws is put back in place with the
    // document CloudFormation expects (its drift detection resolves the
    // template's ${AWS::Partition} and bucket name).
    let document = |iam: aws_sdk_iam::Client| async move {
        let out = iam
            .get_role_policy()
            .role_name("sagemakerrole")
            .policy_name("kfaws-scoped")
            .send()
            .await
            .unwrap();
        let text = out.policy_document();
        let text = if text.starts_with('{') {
            text.to_string()
        } else {
            percent_encoding::percent_decode_str(text)
                .decode_utf8_lossy()
                .into_owned()
        };
        serde_json::from_str::<serde_json::Value>(&text).unwrap()
    };
    let declared = document(iam.clone()).await;
    let bucket =
        d.state()["resources"]["stack.iam"]["spec"]["parameters"]["ArtifactBucket"].clone();
    assert_eq!(
        declared["Statement"][0]["Resource"][0],
        format!("arn:aws:s3:::{}", bucket.as_str().unwrap())
    );
    iam.delete_role_policy()
        .role_name("sagemakerrole")
        .policy_name("kfaws-scoped")
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&["plan", "--target", "stack.iam"]);
    assert!(
        plan.contains("~ stack.iam") && plan.contains("0 to add, 1 to change, 0 to destroy"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert_eq!(document(iam.clone()).await, declared);
    d.kfaws(&["plan", "--target", "stack.iam", "--detailed-exitcode"])
        .assert()
        .code(0);

    // A parameter change goes through a change set too and reaches IAM: the
    // full SageMaker role has the two managed policies and no inline one.
    std::fs::write(
        d.dir.path().join("kfaws.toml"),
        format!(
            "name = \"{}\"\nregion = \"us-east-1\"\n[options]\nsagemaker_role_policy = \"full\"\n",
            d.name
        ),
    )
    .unwrap();
    // In place: a role's policies change without replacing it (replacing
    // stack.iam would take the cluster's KMS key).
    let plan = d.stdout(&["plan", "--target", "stack.iam"]);
    assert!(
        plan.contains("~ stack.iam") && !plan.contains("replaced"),
        "{plan}"
    );
    let applied = d.stdout(&["apply", "--auto-approve", "--target", "stack.iam"]);
    assert!(
        applied.contains("0 added, 1 changed, 0 destroyed"),
        "{applied}"
    );
    assert_eq!(
        attached(iam.clone()).await,
        ["AmazonS3FullAccess", "AmazonSageMakerFullAccess"]
    );
    assert!(inline(iam.clone()).await.is_empty());
    d.kfaws(&["plan", "--target", "stack.iam", "--detailed-exitcode"])
        .assert()
        .code(0);
    d.stdout(&["destroy", "--auto-approve"]);
}

/// Updates `stack` outside kfaws with its own template passed through
/// `edit`, keeping every parameter.
async fn update_template_by_hand(
    cfn: &aws_sdk_cloudformation::Client,
    stack: &str,
    edit: impl FnOnce(&str) -> String,
) {
    let ours = cfn
        .get_template()
        .stack_name(stack)
        .send()
        .await
        .unwrap()
        .template_body()
        .unwrap()
        .to_string();
    cfn.update_stack()
        .stack_name(stack)
        .template_body(edit(&ours))
        .set_parameters(Some(previous_parameters(cfn, stack).await))
        .capabilities(aws_sdk_cloudformation::types::Capability::CapabilityNamedIam)
        .send()
        .await
        .unwrap();
}

/// Every parameter of `stack` with `UsePreviousValue`.
async fn previous_parameters(
    cfn: &aws_sdk_cloudformation::Client,
    stack: &str,
) -> Vec<aws_sdk_cloudformation::types::Parameter> {
    cfn.describe_stacks()
        .stack_name(stack)
        .send()
        .await
        .unwrap()
        .stacks()[0]
        .parameters()
        .iter()
        .map(|p| {
            aws_sdk_cloudformation::types::Parameter::builder()
                .parameter_key(p.parameter_key().unwrap())
                .use_previous_value(true)
                .build()
        })
        .collect()
}
