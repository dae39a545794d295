//! The EKS half of the vanilla profile end to end against the local AWS
//! emulator: the cluster, its node groups, the IAM OIDC provider and the
//! IRSA roles — created, checked field by field through the AWS APIs,
//! repaired after drift, updated in place, re-attached after a killed
//! apply (case C2), and destroyed without leftovers. Run under
//! `tests/emulator/with_emulator.sh`; each test works in an account of
//! its own, with lifecycle latencies scaled down so that waits and
//! ordering are exercised in a few seconds.

mod common;

use std::time::{Duration, Instant};

use common::aws::Deployment;
use predicates::prelude::*;
use serde_json::Value;

/// Latencies: a cluster takes 3 s to create and 1.5 s to delete, a node
/// group 0.9 s each way, stacks 0.15 s (0.005 × the real durations).
const FAST: &str = r#"{"scale": 0.005}"#;

/// The private subnets kfaws' network stack made.
fn private_subnets(d: &Deployment) -> Vec<String> {
    let mut v: Vec<String> = d
        .stdout(&["output", "stack.network.PrivateSubnetIds"])
        .trim()
        .split(',')
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// IAM returns policy documents URL-encoded (IAM API Reference, `Role`).
fn url_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// The trust policy of role `name`, read back through IAM GetRole.
async fn trust_policy(iam: &aws_sdk_iam::Client, name: &str) -> Value {
    let role = iam.get_role().role_name(name).send().await.unwrap();
    let doc = role.role().unwrap().assume_role_policy_document().unwrap();
    let text = if doc.trim_start().starts_with('{') {
        doc.to_string()
    } else {
        url_decode(doc)
    };
    serde_json::from_str(&text).unwrap()
}

async fn role_exists(iam: &aws_sdk_iam::Client, name: &str) -> bool {
    match iam.get_role().role_name(name).send().await {
        Ok(_) => true,
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            false
        }
        Err(e) => panic!("GetRole {name}: {e:?}"),
    }
}

async fn launch_templates(ec2: &aws_sdk_ec2::Client, d: &Deployment) -> Vec<String> {
    let out = ec2.describe_launch_templates().send().await.unwrap();
    out.launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name())
        .filter(|n| n.contains(&d.name))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn apply_makes_an_active_cluster_node_group_oidc_provider_and_irsa_roles_and_destroy_removes_them(
) {
    let d = Deployment::new("");
    d.lifecycle(FAST);
    let plan = d.stdout(&["plan"]);
    for line in [
        "+ eks.cluster (aws_eks_cluster)",
        "+ eks.nodegroup.cpu (aws_eks_nodegroup)",
        "+ iam.oidc (aws_iam_oidc_provider)",
        "+ stack.irsa (aws_cloudformation_stack)",
    ] {
        assert!(plan.contains(line), "{line} missing from:\n{plan}");
    }
    assert!(
        plan.contains("Plan: 11 to add, 0 to change, 0 to destroy."),
        "{plan}"
    );
    let applied = d.stdout(&["apply", "--auto-approve"]);
    assert!(applied.contains("Resources: 11 added"), "{applied}");

    let sdk = d.sdk().await;
    let (eks, iam, ec2) = (
        aws_sdk_eks::Client::new(&sdk),
        aws_sdk_iam::Client::new(&sdk),
        aws_sdk_ec2::Client::new(&sdk),
    );
    let n = d.name.as_str();

    // The cluster: ACTIVE, version, private subnets, both endpoints, our key, our tags.
    let cluster = eks.describe_cluster().name(n).send().await.unwrap();
    let cluster = cluster.cluster().unwrap();
    assert_eq!(cluster.status().unwrap().as_str(), "ACTIVE");
    assert_eq!(cluster.version(), Some("1.33"));
    let vpc = cluster.resources_vpc_config().unwrap();
    let mut subnets = vpc.subnet_ids().to_vec();
    subnets.sort();
    assert_eq!(subnets, private_subnets(&d));
    assert!(vpc.endpoint_public_access() && vpc.endpoint_private_access());
    let key = d.stdout(&["output", "stack.iam.SecretsKeyArn"]);
    assert_eq!(
        cluster.encryption_config()[0].provider().unwrap().key_arn(),
        Some(key.trim())
    );
    assert!(cluster
        .role_arn()
        .unwrap()
        .ends_with(&format!("role/kfaws-{n}-us-east-1-eks-cluster")));
    assert_eq!(cluster.tags().unwrap()["kfaws:deployment"], n);

    // The node group: ACTIVE, sized from the config, booting from a
    // launch template that requires IMDSv2 and encrypts the root volume.
    let group = eks
        .describe_nodegroup()
        .cluster_name(n)
        .nodegroup_name(format!("{n}-cpu"))
        .send()
        .await
        .unwrap();
    let group = group.nodegroup().unwrap();
    assert_eq!(group.status().unwrap().as_str(), "ACTIVE");
    assert_eq!(group.instance_types(), ["m5.xlarge"]);
    let s = group.scaling_config().unwrap();
    assert_eq!(
        (s.min_size(), s.desired_size(), s.max_size()),
        (Some(1), Some(2), Some(4))
    );
    let mut group_subnets = group.subnets().to_vec();
    group_subnets.sort();
    assert_eq!(group_subnets, private_subnets(&d));
    let lt = group.launch_template().unwrap();
    let versions = ec2
        .describe_launch_template_versions()
        .launch_template_id(lt.id().unwrap())
        .versions(lt.version().unwrap())
        .send()
        .await
        .unwrap();
    let data = versions.launch_template_versions()[0]
        .launch_template_data()
        .unwrap();
    let md = data.metadata_options().unwrap();
    assert_eq!(md.http_tokens().unwrap().as_str(), "required");
    assert_eq!(md.http_put_response_hop_limit(), Some(2));
    let root = &data.block_device_mappings()[0];
    assert_eq!(root.device_name(), Some("/dev/xvda"));
    let ebs = root.ebs().unwrap();
    assert_eq!((ebs.encrypted(), ebs.volume_size()), (Some(true), Some(50)));
    // Nodes and their volumes carry the deployment's tags and the group's name.
    let specs = data.tag_specifications();
    for kind in ["instance", "volume"] {
        let spec = specs
            .iter()
            .find(|t| t.resource_type().map(|r| r.as_str()) == Some(kind))
            .unwrap_or_else(|| panic!("no {kind} tags in {specs:?}"));
        let tag = |k: &str| {
            spec.tags()
                .iter()
                .find(|t| t.key() == Some(k))
                .and_then(|t| t.value())
        };
        assert_eq!(tag("Name"), Some(format!("{}-cpu", d.name).as_str()));
        assert_eq!(tag("kfaws:deployment"), Some(d.name.as_str()));
        assert_eq!(tag("kfaws:address"), Some("eks.nodegroup.cpu"));
    }

    // The OIDC provider of the cluster's issuer, for sts.amazonaws.com.
    let issuer = cluster
        .identity()
        .unwrap()
        .oidc()
        .unwrap()
        .issuer()
        .unwrap();
    let host_path = issuer.strip_prefix("https://").unwrap();
    let providers = iam.list_open_id_connect_providers().send().await.unwrap();
    let arns: Vec<&str> = providers
        .open_id_connect_provider_list()
        .iter()
        .filter_map(|p| p.arn())
        .collect();
    assert_eq!(arns.len(), 1, "{arns:?}");
    assert!(arns[0].ends_with(&format!(":oidc-provider/{host_path}")));
    let provider = iam
        .get_open_id_connect_provider()
        .open_id_connect_provider_arn(arns[0])
        .send()
        .await
        .unwrap();
    assert_eq!(provider.client_id_list(), ["sts.amazonaws.com"]);
    assert!(provider
        .tags()
        .iter()
        .any(|t| t.key() == "kfaws:deployment" && t.value() == n));

    // The IRSA roles trust exactly one service account each, for STS.
    for (purpose, subject) in [
        (
            "irsa-efs-csi-controller",
            "system:serviceaccount:kube-system:efs-csi-controller-sa",
        ),
        (
            "irsa-pipelines",
            "system:serviceaccount:kubeflow-user-example-com:default-editor",
        ),
    ] {
        let policy = trust_policy(&iam, &format!("kfaws-{n}-us-east-1-{purpose}")).await;
        let statements = policy["Statement"].as_array().unwrap();
        assert_eq!(statements.len(), 1, "{policy}");
        let st = &statements[0];
        assert_eq!(st["Effect"], "Allow");
        assert_eq!(st["Action"], "sts:AssumeRoleWithWebIdentity");
        assert_eq!(st["Principal"]["Federated"], arns[0]);
        assert_eq!(
            st["Condition"],
            serde_json::json!({"StringEquals": {
                format!("{host_path}:sub"): subject,
                format!("{host_path}:aud"): "sts.amazonaws.com",
            }}),
            "{purpose}"
        );
    }

    // The named outputs another engineer's kubeconfig reads.
    let all: Value = serde_json::from_str(&d.stdout(&["output", "--json"])).unwrap();
    assert_eq!(all["cluster_name"], n);
    assert_eq!(all["cluster_endpoint"], cluster.endpoint().unwrap());
    assert_eq!(
        all["cluster_certificate_authority"],
        cluster.certificate_authority().unwrap().data().unwrap()
    );
    assert_eq!(all["oidc_issuer"], issuer);
    assert_eq!(
        all["cluster_security_group_id"],
        vpc.cluster_security_group_id().unwrap()
    );
    assert!(all["efs_csi_role_arn"]
        .as_str()
        .unwrap()
        .ends_with("-irsa-efs-csi-controller"));
    assert!(all["pipelines_role_arn"]
        .as_str()
        .unwrap()
        .ends_with("-irsa-pipelines"));

    d.kfaws(&["plan", "--detailed-exitcode"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("No changes."));

    // C13: a trust policy edited outside kfaws to name another service
    // account is drift on stack.irsa, and apply writes the declared one back.
    let efs_role = format!("kfaws-{n}-us-east-1-irsa-efs-csi-controller");
    let declared = trust_policy(&iam, &efs_role).await;
    let mut edited = declared.clone();
    edited["Statement"][0]["Condition"]["StringEquals"][format!("{host_path}:sub")] =
        "system:serviceaccount:kube-system:some-other-sa".into();
    iam.update_assume_role_policy()
        .role_name(&efs_role)
        .policy_document(edited.to_string())
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("~ stack.irsa") && plan.contains("drift: changed outside kfaws: trust"),
        "{plan}"
    );
    assert!(
        plan.contains("system:serviceaccount:kube-system:some-other-sa"),
        "the plan shows the edited subject:\n{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    assert_eq!(
        trust_policy(&iam, &efs_role).await,
        declared,
        "apply restored the policy the template declares"
    );
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // Permissions added outside kfaws are drift too, and apply removes them.
    let admin = "arn:aws:iam::aws:policy/AdministratorAccess";
    iam.attach_role_policy()
        .role_name(&efs_role)
        .policy_arn(admin)
        .send()
        .await
        .unwrap();
    iam.put_role_policy()
        .role_name(&efs_role)
        .policy_name("extra")
        .policy_document(r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}"#)
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("drift: changed outside kfaws: policies") && plan.contains(admin),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    let inline = iam
        .list_role_policies()
        .role_name(&efs_role)
        .send()
        .await
        .unwrap();
    assert_eq!(inline.policy_names(), ["efs-csi-controller"]);
    let managed = iam
        .list_attached_role_policies()
        .role_name(&efs_role)
        .send()
        .await
        .unwrap();
    assert!(managed.attached_policies().is_empty(), "{managed:?}");
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // An edit inside the template's own inline policy keeps its name: it is
    // CloudFormation's drift detection that sees it, and apply writes back
    // the document the template declares.
    let inline_document = |iam: aws_sdk_iam::Client, role: String| async move {
        let out = iam
            .get_role_policy()
            .role_name(role)
            .policy_name("efs-csi-controller")
            .send()
            .await
            .unwrap();
        let text = url_decode(out.policy_document());
        serde_json::from_str::<serde_json::Value>(&text).unwrap()
    };
    let declared = inline_document(iam.clone(), efs_role.clone()).await;
    let mut widened = declared.clone();
    widened["Statement"][0]["Action"] = "*".into();
    iam.put_role_policy()
        .role_name(&efs_role)
        .policy_name("efs-csi-controller")
        .policy_document(widened.to_string())
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("~ stack.irsa")
            && plan.contains("drift: changed outside kfaws: policies")
            && plan.contains(
                "~ policies.EfsCsiControllerRole.edited: {\"efs-csi-controller\":\
                 {\"/Statement/0/Action\":{\"actual\":[\"*\"],\"expected\":[\""
            )
            && plan.contains("-> (unset)  # changed outside kfaws"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    assert_eq!(
        inline_document(iam.clone(), efs_role.clone()).await,
        declared
    );
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // A role deleted outside kfaws: the stack is made again, and its
    // deletion goes through although the role is already gone (as
    // CloudFormation counts a resource already deleted as deleted).
    iam.delete_role_policy()
        .role_name(&efs_role)
        .policy_name("efs-csi-controller")
        .send()
        .await
        .unwrap();
    iam.delete_role().role_name(&efs_role).send().await.unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("-/+ stack.irsa (aws_cloudformation_stack)")
            && plan.contains(&format!("\"IAM role(s) {efs_role} deleted outside kfaws\"")),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    assert_eq!(
        inline_document(iam.clone(), efs_role.clone()).await,
        declared
    );
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // The service roles of stack.iam are watched the same way: another
    // account let into the node role's trust, AdministratorAccess attached
    // to it, and the cluster policy detached from the cluster role are
    // drift, repaired in place (the stack, and the cluster on it, stay).
    let node_role = format!("kfaws-{n}-us-east-1-eks-node");
    let cluster_role = format!("kfaws-{n}-us-east-1-eks-cluster");
    let eks_policy = "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy";
    let attached = |iam: aws_sdk_iam::Client, role: String| async move {
        let out = iam
            .list_attached_role_policies()
            .role_name(role)
            .send()
            .await
            .unwrap();
        let mut arns: Vec<String> = out
            .attached_policies()
            .iter()
            .map(|p| p.policy_arn().unwrap().to_string())
            .collect();
        arns.sort();
        arns
    };
    let node_trust = trust_policy(&iam, &node_role).await;
    assert_eq!(
        node_trust["Statement"][0]["Principal"]["Service"],
        "ec2.amazonaws.com"
    );
    let node_policies = attached(iam.clone(), node_role.clone()).await;
    assert_eq!(node_policies.len(), 3, "{node_policies:?}");
    let mut opened = node_trust.clone();
    opened["Statement"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "Effect": "Allow",
            "Principal": {"AWS": "arn:aws:iam::999999999999:root"},
            "Action": "sts:AssumeRole"
        }));
    iam.update_assume_role_policy()
        .role_name(&node_role)
        .policy_document(opened.to_string())
        .send()
        .await
        .unwrap();
    iam.attach_role_policy()
        .role_name(&node_role)
        .policy_arn(admin)
        .send()
        .await
        .unwrap();
    iam.detach_role_policy()
        .role_name(&cluster_role)
        .policy_arn(eks_policy)
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("~ stack.iam")
            && plan.contains("drift: changed outside kfaws: policies, trust"),
        "{plan}"
    );
    assert!(
        !plan.contains("replaced") && plan.contains("0 to add, 1 to change, 0 to destroy"),
        "{plan}"
    );
    assert!(
        plan.contains("999999999999") && plan.contains(admin),
        "the plan shows the added principal and policy:\n{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    assert_eq!(trust_policy(&iam, &node_role).await, node_trust);
    assert_eq!(
        attached(iam.clone(), node_role.clone()).await,
        node_policies
    );
    assert_eq!(
        attached(iam.clone(), cluster_role.clone()).await,
        [eks_policy]
    );
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // A policy the nodes need (Session Manager's) is listed in the config:
    // the stack attaches it, and it is no drift.
    let ssm = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore";
    d.write_config(&format!("[options]\nnode_role_policies = [{ssm:?}]"));
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("~ stack.iam")
            && plan.contains("parameters.NodeRolePolicies")
            && plan.contains("0 to add, 1 to change, 0 to destroy"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    let mut with_ssm = node_policies.clone();
    with_ssm.push(ssm.to_string());
    with_ssm.sort();
    assert_eq!(attached(iam.clone(), node_role.clone()).await, with_ssm);
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // A service role deleted outside kfaws is recreated in place (same
    // name, so the same ARN): replacing stack.iam would take the cluster's
    // KMS key with it.
    let cluster_trust = trust_policy(&iam, &cluster_role).await;
    iam.detach_role_policy()
        .role_name(&cluster_role)
        .policy_arn(eks_policy)
        .send()
        .await
        .unwrap();
    iam.delete_role()
        .role_name(&cluster_role)
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("~ stack.iam")
            && !plan.contains("replaced")
            && plan.contains("0 to add, 1 to change, 0 to destroy"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    assert_eq!(trust_policy(&iam, &cluster_role).await, cluster_trust);
    assert_eq!(
        attached(iam.clone(), cluster_role.clone()).await,
        [eks_policy]
    );
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // A permissions boundary set outside kfaws caps the role (AWSDenyAll
    // stops EKS): drift, removed in place.
    let deny = "arn:aws:iam::aws:policy/AWSDenyAll";
    iam.put_role_permissions_boundary()
        .role_name(&cluster_role)
        .permissions_boundary(deny)
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains(&format!(
            "~ trust.ClusterRole.permissions_boundary: \"{deny}\" -> (unset)"
        )),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    let role = iam
        .get_role()
        .role_name(&cluster_role)
        .send()
        .await
        .unwrap();
    assert!(role.role().unwrap().permissions_boundary().is_none());
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // A node group made outside kfaws would stop the destroy at
    // DeleteCluster, after everything else was gone: refused at plan.
    let node_role_arn = iam
        .get_role()
        .role_name(&node_role)
        .send()
        .await
        .unwrap()
        .role()
        .unwrap()
        .arn()
        .to_string();
    eks.create_nodegroup()
        .cluster_name(n)
        .nodegroup_name("foreign")
        .node_role(&node_role_arn)
        .set_subnets(Some(private_subnets(&d)))
        .send()
        .await
        .unwrap();
    let deletes = (d.calls("DeleteNodegroup"), d.calls("DeleteStack"));
    for args in [&["plan", "--destroy"][..], &["destroy", "--auto-approve"]] {
        let err = d.fails(args);
        assert!(
            err.contains("node groups foreign were not made by this deployment's kfaws state")
                && err.contains("nothing was deleted"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(
        (d.calls("DeleteNodegroup"), d.calls("DeleteStack")),
        deletes,
        "nothing deleted"
    );
    eks.delete_nodegroup()
        .cluster_name(n)
        .nodegroup_name("foreign")
        .send()
        .await
        .unwrap();
    let mut polls = 0;
    while eks
        .describe_nodegroup()
        .cluster_name(n)
        .nodegroup_name("foreign")
        .send()
        .await
        .is_ok()
    {
        polls += 1;
        assert!(
            polls < 300,
            "the foreign node group is still there after 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    // Destroy: the emulator refuses DeleteCluster while a node group
    // exists, so success proves the order.
    let destroyed = d.stdout(&["destroy", "--auto-approve"]);
    assert!(destroyed.contains("11 destroyed"), "{destroyed}");
    assert!(eks
        .list_clusters()
        .send()
        .await
        .unwrap()
        .clusters()
        .is_empty());
    assert!(iam
        .list_open_id_connect_providers()
        .send()
        .await
        .unwrap()
        .open_id_connect_provider_list()
        .is_empty());
    for purpose in ["irsa-efs-csi-controller", "irsa-pipelines"] {
        assert!(!role_exists(&iam, &format!("kfaws-{n}-us-east-1-{purpose}")).await);
    }
    assert!(launch_templates(&ec2, &d).await.is_empty());
    assert_eq!(d.calls("DeleteCluster"), 1, "deleted once, never refused");
}

#[tokio::test]
async fn node_group_drift_is_repaired_scaling_changes_in_place_and_a_removed_group_is_deleted() {
    let groups = "[node_groups.cpu]\nmin_size = 1\ndesired_size = 1\nmax_size = 2\n\
                  [node_groups.gpu]\ninstance_type = \"g5.xlarge\"\nmin_size = 0\ndesired_size = 0\nmax_size = 1";
    let d = Deployment::new(groups);
    d.stdout(&["apply", "--auto-approve"]);
    let sdk = d.sdk().await;
    let (eks, ec2) = (
        aws_sdk_eks::Client::new(&sdk),
        aws_sdk_ec2::Client::new(&sdk),
    );
    let n = d.name.as_str();
    let cpu = format!("{n}-cpu");

    eks.delete_nodegroup()
        .cluster_name(n)
        .nodegroup_name(&cpu)
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("+ eks.nodegroup.cpu") && plan.contains("drift: deleted outside kfaws"),
        "{plan}"
    );
    // The Kubernetes bundles only follow the node groups: none of them is re-applied.
    assert!(
        plan.contains("Plan: 1 to add, 0 to change, 0 to destroy.\n") && !plan.contains("re-apply"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    // Forgotten with `state rm`, the group is imported again, not created.
    d.kfaws(&["state", "rm", "eks.nodegroup.cpu"])
        .assert()
        .success();
    // A destroy would not delete it, and DeleteCluster would refuse half way:
    // refused at plan, nothing deleted.
    let deletes = d.calls("DeleteStack");
    let err = d.fails(&["destroy", "--auto-approve"]);
    assert!(
        err.contains(&format!(
            "node groups {cpu} carry this deployment's tags but are not in its state"
        )) && err.contains("nothing was deleted"),
        "{err}"
    );
    assert_eq!(d.calls("DeleteStack"), deletes);
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("# eks.nodegroup.cpu will be imported")
            && plan.contains("Plan: 1 to import, 0 to add, 0 to change")
            && !plan.contains("re-apply"),
        "{plan}"
    );
    let creates = d.calls("CreateNodegroup");
    let out = d.stdout(&["apply", "--auto-approve"]);
    // The import's outputs are those its dependants were applied with: they
    // are not re-applied.
    assert!(
        out.contains("Resources: 1 imported, 0 added, 0 changed"),
        "{out}"
    );
    assert_eq!(d.calls("CreateNodegroup"), creates);
    let arn_before = eks
        .describe_nodegroup()
        .cluster_name(n)
        .nodegroup_name(&cpu)
        .send()
        .await
        .unwrap()
        .nodegroup()
        .unwrap()
        .nodegroup_arn()
        .unwrap()
        .to_string();
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // An autoscaler moving the desired size within min..=max is not drift.
    eks.update_nodegroup_config()
        .cluster_name(n)
        .nodegroup_name(&cpu)
        .scaling_config(
            aws_sdk_eks::types::NodegroupScalingConfig::builder()
                .min_size(1)
                .desired_size(2)
                .max_size(2)
                .build(),
        )
        .send()
        .await
        .unwrap();
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // Scale cpu up, drop gpu.
    d.write_config("[node_groups.cpu]\nmin_size = 1\ndesired_size = 2\nmax_size = 3");
    let plan = d.stdout(&["plan"]);
    assert!(plan.contains("~ eks.nodegroup.cpu"), "{plan}");
    assert!(
        plan.contains(
            "- eks.nodegroup.gpu (aws_eks_nodegroup)\n      reason: not in the configuration any \
             more: kfaws.toml has no [node_groups.gpu]\n"
        ),
        "{plan}"
    );
    // The plan's graph holds the delete, with its dependants before it.
    let dot = d.stdout(&["graph", "--plan"]);
    assert!(
        dot.contains(
            r#"label = "eks.nodegroup.gpu\ndelete" shape = box style = filled fillcolor = "salmon""#
        ),
        "{dot}"
    );
    // Targeted, it is named as what it is: recorded, no longer configured.
    let err = d.fails(&["plan", "--target", "eks.nodegroup.gpu"]);
    assert!(
        err.contains(
            "--target eks.nodegroup.gpu: in the state but not in the configuration any more: \
             kfaws.toml has no [node_groups.gpu]; a whole `kfaws apply` deletes it (`kfaws plan` \
             shows what that changes)"
        ),
        "{err}"
    );
    // The Kubernetes bundles only follow the node groups: dropping one re-applies none.
    assert!(
        plan.contains("Plan: 0 to add, 1 to change, 1 to destroy.\n") && !plan.contains("re-apply"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    let group = eks
        .describe_nodegroup()
        .cluster_name(n)
        .nodegroup_name(&cpu)
        .send()
        .await
        .unwrap();
    let group = group.nodegroup().unwrap();
    assert_eq!(
        group.nodegroup_arn(),
        Some(arn_before.as_str()),
        "updated in place, not replaced"
    );
    let s = group.scaling_config().unwrap();
    assert_eq!(
        (s.min_size(), s.desired_size(), s.max_size()),
        (Some(1), Some(2), Some(3))
    );
    let groups = eks.list_nodegroups().cluster_name(n).send().await.unwrap();
    assert_eq!(groups.nodegroups(), std::slice::from_ref(&cpu));
    assert_eq!(launch_templates(&ec2, &d).await, [format!("kfaws-{cpu}")]);
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // What takes stack.iam's outputs (the cluster, and what follows it) is re-applied only if
    // they change: such a conditional update says "Checking" until it knows, and here they
    // do not change.
    d.write_config(
        "[node_groups.cpu]\nmin_size = 1\ndesired_size = 2\nmax_size = 3\n\
         [options]\nsagemaker_role_policy = \"full\"",
    );
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("~ stack.iam")
            && plan.contains("more to re-apply if a dependency's outputs change"),
        "{plan}"
    );
    let applied = d.stdout(&["apply", "--auto-approve"]);
    let checked: Vec<&str> = applied
        .lines()
        .filter_map(|l| l.split_once(": Checked after").map(|(a, _)| a))
        .filter_map(|a| a.rsplit(' ').next())
        .collect();
    assert!(checked.contains(&"eks.cluster"), "{applied}");
    for a in checked {
        assert!(
            applied.contains(&format!("{a}: Checking..."))
                && !applied.contains(&format!("{a}: Modifying...")),
            "{a}: {applied}"
        );
    }
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // The next call of EKS `operation` answers 400 InvalidParameterException.
    let refuse_once = |operation: &str| {
        common::aws::control(
            "faults",
            "POST",
            &format!(
                r#"{{"service":"eks","operation":"{operation}","kind":"server_error","code":"InvalidParameterException","status":400,"message":"refused","count":1,"account_id":"{}"}}"#,
                d.account
            ),
        )
    };
    // An update EKS refuses: the next plan applies the config's change
    // again, and the size the update never reached is not taken for a
    // change made outside kfaws.
    refuse_once("UpdateNodegroupConfig");
    d.write_config("[node_groups.cpu]\nmin_size = 1\ndesired_size = 3\nmax_size = 3");
    let failed = d.fails_with_output(&["apply", "--auto-approve"]);
    assert!(failed.contains("InvalidParameterException"), "{failed}");
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains(
            "an earlier update did not finish (interrupted or failed); applied again; config \
             changed: scaling"
        ) && !plan.contains("changed outside kfaws"),
        "{plan}"
    );
    d.write_config("[node_groups.cpu]\nmin_size = 1\ndesired_size = 2\nmax_size = 3");
    d.stdout(&["apply", "--auto-approve"]);
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    // Two changes that each force a replacement: the reason names both (planned only).
    d.write_config(
        "[node_groups.cpu]\ninstance_type = \"m5.2xlarge\"\ndisk_size_gib = 120\nmin_size = 1\n\
         desired_size = 2\nmax_size = 3",
    );
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("reason: disk_size_gib and instance_type changed, which force replacement"),
        "{plan}"
    );
    d.write_config("[node_groups.cpu]\nmin_size = 1\ndesired_size = 2\nmax_size = 3");

    // Bounds widened outside kfaws and the size moved to 3 within them:
    // apply restores max 2 and so removes a node, which the plan says.
    eks.update_nodegroup_config()
        .cluster_name(n)
        .nodegroup_name(&cpu)
        .scaling_config(
            aws_sdk_eks::types::NodegroupScalingConfig::builder()
                .min_size(0)
                .desired_size(3)
                .max_size(10)
                .build(),
        )
        .send()
        .await
        .unwrap();
    d.write_config("[node_groups.cpu]\nmin_size = 1\ndesired_size = 2\nmax_size = 2");
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("~ desired size 3 -> 2 (UpdateNodegroupConfig)  # 1 node(s) removed"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    let group = eks
        .describe_nodegroup()
        .cluster_name(n)
        .nodegroup_name(&cpu)
        .send()
        .await
        .unwrap();
    let s = group.nodegroup().unwrap().scaling_config().unwrap();
    assert_eq!(
        (s.min_size(), s.desired_size(), s.max_size()),
        (Some(1), Some(2), Some(2))
    );

    // A delete EKS answers with an error (not one kfaws knows changed nothing): the entry
    // stays `deleting`, but the group is still ACTIVE and whole, so the next plan keeps it
    // instead of replacing a working group.
    refuse_once("DeleteNodegroup");
    d.fails(&["destroy", "--target", "eks.nodegroup.cpu", "--auto-approve"]);
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("# eks.nodegroup.cpu will be kept and recorded as created again")
            && plan.contains("an earlier delete did not take effect: it is still there and whole")
            && plan.contains("0 to change, 0 to destroy, 1 to keep (recorded as created again)")
            && !plan.contains("-/+ eks.nodegroup.cpu"),
        "{plan}"
    );
    // Nothing in the group differs, so apply only records it: no EKS update call.
    let updates =
        |d: &Deployment| d.calls("UpdateNodegroupConfig") + d.calls("UpdateNodegroupVersion");
    let before = updates(&d);
    let applied = d.stdout(&["apply", "--auto-approve"]);
    assert!(
        applied.contains("0 changed, 0 destroyed, 1 kept (recorded as created again)"),
        "{applied}"
    );
    assert_eq!(updates(&d), before);
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    // Refused again, then replaced on purpose: --replace wins over keeping it.
    refuse_once("DeleteNodegroup");
    d.fails(&["destroy", "--target", "eks.nodegroup.cpu", "--auto-approve"]);
    let deletes = d.calls("DeleteNodegroup");
    let replaced = d.stdout(&["apply", "--auto-approve", "--replace", "eks.nodegroup.cpu"]);
    // (The bundles on the group, which the targeted destroy took, are created too.)
    assert!(
        replaced.contains("# eks.nodegroup.cpu must be replaced")
            && replaced.contains("added, 0 changed, 1 destroyed."),
        "{replaced}"
    );
    assert_eq!(d.calls("DeleteNodegroup"), deletes + 1);
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // A delete the SDK retries (three slow 500s, then accepted): the progress lines say
    // which call is retried and why, not only "Still destroying".
    common::aws::control(
        "faults",
        "POST",
        &format!(
            r#"{{"service":"eks","operation":"DeleteNodegroup","kind":"server_error","latency_ms":6000,"count":3,"account_id":"{}"}}"#,
            d.account
        ),
    );
    let destroyed = d.stdout(&["destroy", "--target", "eks.nodegroup.cpu", "--auto-approve"]);
    assert!(
        destroyed
            .lines()
            .any(|l| l.contains("eks.nodegroup.cpu: Still destroying... [")
                && l.contains("(retrying EKS DeleteNodegroup, attempt ")
                && l.contains(" of 8, after: HTTP 500 InternalFailure)")),
        "{destroyed}"
    );
    assert!(destroyed.contains("Destroy complete!"), "{destroyed}");

    // DeleteCluster refused as in use with no node group left: the error says what else can
    // hold a cluster, not node groups, and the cluster, untouched, is no change to the plan.
    common::aws::control(
        "faults",
        "POST",
        &format!(
            r#"{{"service":"eks","operation":"DeleteCluster","kind":"server_error","code":"ResourceInUseException","status":409,"message":"Cluster has Fargate profiles attached","count":1,"account_id":"{}"}}"#,
            d.account
        ),
    );
    let err = d.fails_with_output(&["destroy", "--target", "eks.cluster", "--auto-approve"]);
    assert!(
        err.contains("it has no node groups left, so something else holds it")
            && err.contains("list-fargate-profiles")
            && !err.contains("node groups still attached")
            && err.contains("one refused before anything was deleted, such as a cluster still in use, keeps its status"),
        "{err}"
    );
    assert_eq!(d.state()["resources"]["eks.cluster"]["status"], "created");
    let plan = d.stdout(&["plan", "--target", "eks.cluster"]);
    assert!(!plan.contains("eks.cluster will"), "{plan}");

    d.stdout(&["destroy", "--auto-approve"]);
    assert!(eks
        .list_clusters()
        .send()
        .await
        .unwrap()
        .clusters()
        .is_empty());
    assert!(launch_templates(&ec2, &d).await.is_empty());
}

/// Case C2: `apply` killed after the network stack exists but before the
/// cluster is ACTIVE; the re-run re-attaches to the cluster with the token
/// recorded before the first CreateCluster, and nothing is created twice.
#[tokio::test]
async fn apply_killed_while_the_cluster_is_creating_reattaches_with_its_token() {
    let d = Deployment::new("");
    // A 6 s cluster; stacks 0.3 s.
    d.lifecycle(r#"{"scale": 0.01}"#);
    let sdk = d.sdk().await;
    let eks = aws_sdk_eks::Client::new(&sdk);
    let mut child = d.spawn(&["apply", "--auto-approve"]);
    let started = Instant::now();
    let created_at = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the cluster never reached CREATING"
        );
        if let Ok(out) = eks.describe_cluster().name(&d.name).send().await {
            let c = out.cluster().unwrap();
            assert_eq!(c.status().unwrap().as_str(), "CREATING");
            break *c.created_at().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    child.kill().unwrap();
    child.wait().unwrap();

    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(d.state_file()).unwrap()).unwrap();
    let entry = &state["resources"]["eks.cluster"];
    assert_eq!(entry["status"], "creating", "{entry}");
    let token = entry["idempotency_token"].as_str().unwrap().to_string();
    d.unlock_after_kill();

    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("re-attaching with its idempotency token"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    let out = eks.describe_cluster().name(&d.name).send().await.unwrap();
    let cluster = out.cluster().unwrap();
    assert_eq!(cluster.status().unwrap().as_str(), "ACTIVE");
    assert_eq!(cluster.created_at(), Some(&created_at), "the same cluster");
    assert_eq!(cluster.client_request_token(), Some(token.as_str()));
    assert_eq!(d.calls("CreateCluster"), 2, "one create, one re-attach");
    assert_eq!(
        d.calls("DeleteCluster"),
        0,
        "nothing deleted and made again"
    );
    assert_eq!(
        eks.list_clusters().send().await.unwrap().clusters(),
        std::slice::from_ref(&d.name)
    );
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    d.lifecycle(r#"{"scale": 0}"#);
    d.stdout(&["destroy", "--auto-approve"]);
}

/// The first Ctrl-C while the cluster is creating stops the wait at once
/// (the CreateCluster request was sent and its token recorded), exits 130,
/// leaves the entry `creating`, and the next apply re-attaches to the same
/// cluster instead of creating, tainting or replacing one.
#[tokio::test]
async fn the_first_interrupt_stops_the_wait_for_a_creating_cluster_and_the_next_apply_reattaches() {
    let d = Deployment::new("");
    // A 60 s cluster; stacks 3 s.
    d.lifecycle(r#"{"scale": 0.1}"#);
    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    let (out, took) = d
        .interrupt_when(&["apply", "--auto-approve"], "CREATING", || async {
            eks.describe_cluster().name(&d.name).send().await.is_ok()
        })
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        took < Duration::from_secs(30),
        "stopped {took:?} after the interrupt; the cluster takes 60 s: {stderr}"
    );
    // The summary says the cluster was interrupted, not that it failed, and
    // what waited on it was not started, not skipped for a failure.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = |address: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with('│') && l.split_whitespace().nth(1) == Some(address))
            .unwrap_or_else(|| panic!("no row for {address}: {stdout}"))
            .to_string()
    };
    assert!(
        row("eks.cluster").contains("interrupted (resumes on the next run)"),
        "{stdout}"
    );
    assert!(
        row("eks.nodegroup.cpu").contains("not started (interrupted)"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("FAILED") && !stdout.contains("upstream") && !stdout.contains("Error:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Interrupted: eks.cluster: create: stopped waiting for")
            && stdout.contains("eks.cluster: interrupted after ")
            && !stdout.contains("failed after"),
        "{stdout}"
    );
    let entry = &d.state()["resources"]["eks.cluster"];
    assert_eq!(entry["status"], "creating", "{entry}");
    assert_eq!(
        eks.describe_cluster()
            .name(&d.name)
            .send()
            .await
            .unwrap()
            .cluster()
            .unwrap()
            .status()
            .unwrap()
            .as_str(),
        "CREATING",
        "the interrupt came before the cluster was ready"
    );
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("re-attaching with its idempotency token"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    assert_eq!(d.calls("CreateCluster"), 2, "one create, one re-attach");
    assert_eq!(d.calls("DeleteCluster"), 0);
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    d.lifecycle(r#"{"scale": 0}"#);
    d.stdout(&["destroy", "--auto-approve"]);
}

/// A destroy after a create interrupted while the cluster is still
/// `CREATING` waits for the create to finish, since EKS refuses to delete a
/// cluster meanwhile (ResourceInUseException), then deletes it with one
/// DeleteCluster.
#[tokio::test]
async fn destroy_waits_out_a_creating_cluster_before_deleting_it() {
    let d = Deployment::new("");
    // A 6 s cluster; everything else at once.
    d.lifecycle(
        r#"{"scale": 1, "durations": {"eks.cluster.create": 6, "eks.cluster.delete": 0,
            "eks.cluster.update": 0, "eks.nodegroup.create": 0, "eks.nodegroup.delete": 0,
            "eks.nodegroup.update": 0, "efs.filesystem.create": 0, "efs.filesystem.delete": 0,
            "efs.mounttarget.create": 0, "efs.mounttarget.delete": 0,
            "ec2.natgateway.create": 0, "ec2.natgateway.delete": 0,
            "cloudformation.stack.create": 0, "cloudformation.stack.update": 0,
            "cloudformation.stack.delete": 0}}"#,
    );
    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    let apply = ["apply", "--auto-approve", "--target", "eks.cluster"];
    let (out, _) = d
        .interrupt_when(&apply, "CREATING", || async {
            eks.describe_cluster().name(&d.name).send().await.is_ok()
        })
        .await;
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = eks.describe_cluster().name(&d.name).send().await.unwrap();
    assert_eq!(
        status.cluster().unwrap().status().unwrap().as_str(),
        "CREATING",
        "the interrupt came before the cluster was ready"
    );
    d.stdout(&["destroy", "--auto-approve"]);
    assert_eq!(d.calls("DeleteCluster"), 1, "one delete, not refused first");
    assert!(eks.describe_cluster().name(&d.name).send().await.is_err());
    assert!(d.live_stack_names().await.is_empty());
}

/// The first Ctrl-C during a cluster upgrade stops the wait for it (EKS
/// carries on): exit 130, the entry keeps the unfinished update, and the
/// next apply waits for the upgrade and asks for none again.
#[tokio::test]
async fn the_first_interrupt_stops_the_wait_for_an_upgrading_cluster() {
    let d = Deployment::new("kubernetes_version = \"1.32\"");
    d.stdout(&["apply", "--auto-approve", "--target", "eks.cluster"]);
    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    // Cluster updates take 60 s.
    d.lifecycle(r#"{"scale": 0.1}"#);
    d.write_config("kubernetes_version = \"1.33\"");
    let apply = ["apply", "--auto-approve", "--target", "eks.cluster"];
    let (out, took) = d
        .interrupt_when(&apply, "UPDATING", || async {
            let out = eks.describe_cluster().name(&d.name).send().await.unwrap();
            out.cluster().unwrap().status().unwrap().as_str() == "UPDATING"
        })
        .await;
    // The upgrade takes 60 s.
    Deployment::assert_stopped(
        &out,
        took,
        Duration::from_secs(20),
        "Interrupted: eks.cluster: update: stopped waiting for EKS cluster",
    );
    let entry = d.state()["resources"]["eks.cluster"].clone();
    assert_eq!(entry["updating"]["kubernetes_version"], "1.33", "{entry}");
    d.resume_interrupted_update("eks.cluster", "UpdateClusterVersion");
    d.stdout(&["destroy", "--auto-approve"]);
}

/// The first Ctrl-C during a node group upgrade stops the wait for it, as
/// for the cluster's: exit 130, the entry keeps the unfinished update, and
/// the next apply waits for that upgrade and asks for none again.
#[tokio::test]
async fn the_first_interrupt_stops_the_wait_for_an_upgrading_node_group() {
    let d = Deployment::new("kubernetes_version = \"1.32\"");
    d.stdout(&["apply", "--auto-approve", "--target", "eks.nodegroup.cpu"]);
    // The control plane first, alone: the node group then lags one version.
    d.write_config("kubernetes_version = \"1.33\"");
    d.stdout(&["apply", "--auto-approve", "--target", "eks.cluster"]);
    assert_eq!(d.calls("UpdateNodegroupVersion"), 0);
    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    // Node group updates take 30 s.
    d.lifecycle(r#"{"scale": 0.05}"#);
    let group = format!("{}-cpu", d.name);
    let apply = ["apply", "--auto-approve", "--target", "eks.nodegroup.cpu"];
    let (out, took) = d
        .interrupt_when(&apply, "UPDATING", || async {
            let out = eks
                .describe_nodegroup()
                .cluster_name(&d.name)
                .nodegroup_name(&group)
                .send()
                .await
                .unwrap();
            out.nodegroup().unwrap().status().unwrap().as_str() == "UPDATING"
        })
        .await;
    // The upgrade takes 30 s.
    Deployment::assert_stopped(
        &out,
        took,
        Duration::from_secs(15),
        "Interrupted: eks.nodegroup.cpu: update: stopped waiting for",
    );
    let entry = d.state()["resources"]["eks.nodegroup.cpu"].clone();
    assert_eq!(entry["updating"]["kubernetes_version"], "1.33", "{entry}");
    d.resume_interrupted_update("eks.nodegroup.cpu", "UpdateNodegroupVersion");
    d.stdout(&["destroy", "--auto-approve"]);
}

#[tokio::test]
async fn an_upgrade_killed_midway_is_applied_again_not_taken_for_drift() {
    let d = Deployment::new("kubernetes_version = \"1.32\"");
    d.stdout(&["apply", "--auto-approve"]);
    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    let status = |eks: aws_sdk_eks::Client, name: String| async move {
        let out = eks.describe_cluster().name(name).send().await.unwrap();
        let c = out.cluster().unwrap();
        (
            c.status().unwrap().as_str().to_string(),
            c.version().unwrap().to_string(),
        )
    };
    // Cluster updates take 6 s; kfaws is killed while EKS runs the upgrade.
    d.lifecycle(r#"{"scale": 0.01}"#);
    d.write_config("kubernetes_version = \"1.33\"");
    let mut child = d.spawn(&["apply", "--auto-approve"]);
    let started = Instant::now();
    while status(eks.clone(), d.name.clone()).await.0 != "UPDATING" {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the cluster never reached UPDATING"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let entry = d.state()["resources"]["eks.cluster"].clone();
    assert_eq!(entry["spec"]["kubernetes_version"], "1.32", "{entry}");
    assert_eq!(entry["updating"]["kubernetes_version"], "1.33", "{entry}");
    d.unlock_after_kill();
    let listed = d.stdout(&["state", "list"]);
    assert!(
        listed
            .lines()
            .any(|l| l.contains("eks.cluster") && l.contains("created, update unfinished")),
        "{listed}"
    );
    // EKS finishes the upgrade on its own.
    d.lifecycle(r#"{"scale": 0}"#);
    while status(eks.clone(), d.name.clone()).await != ("ACTIVE".into(), "1.33".into()) {
        assert!(started.elapsed() < Duration::from_secs(120), "never ACTIVE");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The new version is the interrupted update's, not a change made
    // outside kfaws: the plan applies the update again.
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains(
            "~ eks.cluster (aws_eks_cluster)\n      reason: an earlier update did not finish \
             (interrupted or failed); applied again"
        ),
        "{plan}"
    );
    assert!(!plan.contains("changed outside kfaws"), "{plan}");
    assert!(plan.contains("~ eks.nodegroup.cpu"), "{plan}");
    d.stdout(&["apply", "--auto-approve"]);
    assert_eq!(
        d.calls("UpdateClusterVersion"),
        1,
        "the upgrade is not asked twice"
    );
    assert_eq!(d.calls("UpdateNodegroupVersion"), 1);
    let entry = d.state()["resources"]["eks.cluster"].clone();
    assert_eq!(entry["spec"]["kubernetes_version"], "1.33", "{entry}");
    assert!(entry.get("updating").is_none(), "{entry}");
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    d.stdout(&["destroy", "--auto-approve"]);
}

#[tokio::test]
async fn an_oidc_provider_for_the_issuer_made_by_someone_else_is_refused_and_survives_destroy() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "eks.cluster"]);
    let issuer = d.stdout(&["output", "eks.cluster.oidc_issuer"]);
    let iam = aws_sdk_iam::Client::new(&d.sdk().await);
    let foreign = iam
        .create_open_id_connect_provider()
        .url(issuer.trim())
        .client_id_list("sts.amazonaws.com")
        .send()
        .await
        .unwrap();
    let foreign = foreign.open_id_connect_provider_arn().unwrap().to_string();
    // Refused by the plan, before any change: the issuer is known once the
    // cluster is recorded.
    for command in [&["plan"][..], &["apply", "--auto-approve"]] {
        d.kfaws(&[command, &["--target", "iam.oidc"]].concat())
            .assert()
            .code(1)
            .stderr(
                predicate::str::contains("the plan cannot be carried out")
                    .and(predicate::str::contains(format!(
                        "already exists ({foreign})"
                    )))
                    .and(predicate::str::contains("not created by kfaws")),
            );
    }
    assert!(d.state()["resources"].get("iam.oidc").is_none());
    d.stdout(&["destroy", "--auto-approve"]);
    let left = iam.list_open_id_connect_providers().send().await.unwrap();
    let left: Vec<&str> = left
        .open_id_connect_provider_list()
        .iter()
        .filter_map(|p| p.arn())
        .collect();
    assert_eq!(
        left,
        [foreign.as_str()],
        "the foreign provider is untouched"
    );
}

#[tokio::test]
async fn a_version_upgrade_and_endpoint_access_drift_are_updated_in_place() {
    let d = Deployment::new("kubernetes_version = \"1.32\"");
    d.stdout(&["apply", "--auto-approve"]);
    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    let arn = |c: &aws_sdk_eks::types::Cluster| c.arn().unwrap().to_string();
    let before = eks.describe_cluster().name(&d.name).send().await.unwrap();
    let before = before.cluster().unwrap();
    assert_eq!(before.version(), Some("1.32"));

    // Someone turns the private endpoint off: drift, repaired in place.
    let update = eks
        .update_cluster_config()
        .name(&d.name)
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder()
                .endpoint_private_access(false)
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert!(update.update().is_some());
    // Two minor versions at once with node groups: refused at plan (each
    // step needs the node groups on the control plane's version first).
    d.write_config("kubernetes_version = \"1.34\"");
    let err = d.fails(&["plan"]);
    assert!(
        err.contains("kubernetes_version 1.32 -> 1.34 is 2 upgrades")
            && err.contains("set kubernetes_version = \"1.33\""),
        "{err}"
    );
    // The version upgrade joins the same update of the cluster, as the plan shows.
    d.write_config("kubernetes_version = \"1.33\"");
    let plan = d.stdout(&["plan"]);
    assert!(plan.contains("~ eks.cluster"), "{plan}");
    assert!(plan.contains("kubernetes_version"), "{plan}");
    assert!(plan.contains("endpoint_private_access"), "{plan}");
    assert!(
        plan.contains("~ Kubernetes 1.33 (UpdateClusterVersion)"),
        "{plan}"
    );

    d.stdout(&["apply", "--auto-approve"]);
    let after = eks.describe_cluster().name(&d.name).send().await.unwrap();
    let after = after.cluster().unwrap();
    assert_eq!(after.version(), Some("1.33"));
    assert!(after
        .resources_vpc_config()
        .unwrap()
        .endpoint_private_access());
    assert_eq!(arn(after), arn(before));
    assert_eq!(after.created_at(), before.created_at(), "not replaced");
    assert_eq!(d.calls("UpdateClusterVersion"), 1);
    // The node group follows the control plane in the same apply, in place.
    let cpu = format!("{}-cpu", d.name);
    let nodes = |eks: aws_sdk_eks::Client, cpu: String, name: String| async move {
        eks.describe_nodegroup()
            .cluster_name(name)
            .nodegroup_name(cpu)
            .send()
            .await
            .unwrap()
            .nodegroup()
            .cloned()
            .unwrap()
    };
    let group = nodes(eks.clone(), cpu.clone(), d.name.clone()).await;
    assert_eq!(group.version(), Some("1.33"));
    assert_eq!(d.calls("UpdateNodegroupVersion"), 1);
    assert_eq!(d.calls("CreateNodegroup"), 1, "not replaced");
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // The control plane upgraded behind kfaws's back (or an apply that
    // stopped after it): the plan upgrades only the node group, and EKS's
    // rule is checked at plan: no next upgrade while the nodes lag.
    let update = eks
        .update_cluster_version()
        .name(&d.name)
        .version("1.34")
        .send()
        .await
        .unwrap();
    assert!(update.update().is_some());
    d.write_config("kubernetes_version = \"1.35\"");
    let err = d.fails(&["plan"]);
    assert!(
        err.contains(&format!("node groups {cpu} on 1.33 do not"))
            && err.contains("apply with kubernetes_version = \"1.34\" first"),
        "{err}"
    );
    d.write_config("kubernetes_version = \"1.34\"");
    let plan = d.stdout(&["plan"]);
    assert!(!plan.contains("~ eks.cluster"), "{plan}");
    assert!(plan.contains("~ eks.nodegroup.cpu"), "{plan}");
    assert!(
        plan.contains("~ Kubernetes 1.34 (UpdateNodegroupVersion)"),
        "{plan}"
    );
    // The control plane already runs what the config says: nothing is
    // called for it, and the plan says the state will learn its version.
    assert!(
        plan.contains("Changed outside kfaws since the last apply")
            && plan.contains(
                "# eks.cluster (aws_eks_cluster)\n      \
                 ~ kubernetes_version: \"1.33\" -> \"1.34\"  # changed outside kfaws"
            ),
        "{plan}"
    );
    let recorded_version = |d: &Deployment| {
        d.state()["resources"]["eks.cluster"]["spec"]["kubernetes_version"].clone()
    };
    assert_eq!(recorded_version(&d), "1.33");
    let updates = d.calls("UpdateClusterVersion");
    let out = d.stdout(&["apply", "--auto-approve"]);
    assert!(
        out.contains("Recorded in the state the values changed outside kfaws of: eks.cluster"),
        "{out}"
    );
    assert_eq!(d.calls("UpdateClusterVersion"), updates);
    assert_eq!(recorded_version(&d), "1.34");
    let group = nodes(eks.clone(), cpu.clone(), d.name.clone()).await;
    assert_eq!(group.version(), Some("1.34"));
    assert_eq!(d.calls("UpdateNodegroupVersion"), 2);
    let plan = d.stdout(&["plan"]);
    assert!(!plan.contains("Changed outside kfaws"), "{plan}");
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    // The next upgrade is the config's change, not drift. Someone else's
    // cluster update is in progress (12 s: the lifecycle scale at their call;
    // later transitions are instant again): EKS runs one update at a time,
    // and the plan says the apply waits for it first.
    d.lifecycle(r#"{"scale": 0.02}"#);
    eks.update_cluster_config()
        .name(&d.name)
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder()
                .endpoint_private_access(true)
                .build(),
        )
        .send()
        .await
        .unwrap();
    d.lifecycle(r#"{"scale": 0}"#);
    d.write_config("kubernetes_version = \"1.35\"");
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("config changed: kubernetes_version")
            && plan.contains("~ kubernetes_version: \"1.34\" -> \"1.35\"\n"),
        "{plan}"
    );
    assert!(
        plan.contains("... status UPDATING (Cluster)  # an operation is in progress")
            && plan.contains("~ Kubernetes 1.35 (UpdateClusterVersion)"),
        "{plan}"
    );
    for _ in 0..300 {
        let status = eks.describe_cluster().name(&d.name).send().await.unwrap();
        if status.cluster().unwrap().status() == Some(&aws_sdk_eks::types::ClusterStatus::Active) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // EKS cannot downgrade: the plan refuses, naming the versions, and
    // nothing is called.
    d.write_config("kubernetes_version = \"1.33\"");
    let updates = d.calls("UpdateClusterVersion");
    for args in [&["plan"][..], &["apply", "--auto-approve"]] {
        let err = d.fails(args);
        assert!(
            err.contains("eks.cluster: cluster")
                && err
                    .contains("the cluster runs Kubernetes 1.34; EKS cannot downgrade it to 1.33"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(d.calls("UpdateClusterVersion"), updates);
    d.stdout(&["destroy", "--auto-approve"]);
}

/// C21's other side: a cluster and OIDC provider the state records, whose kfaws tags someone
/// changed by hand, are neither taken for gone (a create that fails on the name and taints the
/// entry, then a replacement of the live resource once the tags are back) nor adopted: the plan
/// stops, names the live and expected tags and both ways on, and the state is untouched.
#[tokio::test]
async fn a_recorded_cluster_or_oidc_provider_retagged_by_hand_stops_the_plan_and_is_kept() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "iam.oidc"]);
    let before = d.state();
    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    let iam = aws_sdk_iam::Client::new(&d.sdk().await);
    let cluster = eks.describe_cluster().name(&d.name).send().await.unwrap();
    let cluster = cluster.cluster().unwrap();
    let arn = cluster.arn().unwrap().to_string();
    let ours = cluster.tags().unwrap().clone();

    eks.tag_resource()
        .resource_arn(&arn)
        .tags("kfaws:deployment", "other")
        .tags("kfaws:lineage", "zzz")
        .send()
        .await
        .unwrap();
    d.each_fails(
        &[
            &["plan"],
            &["apply", "--auto-approve"],
            &["destroy", "--auto-approve"],
        ],
        &[
            &format!("EKS cluster {} ({arn})", d.name),
            "no longer carries this deployment's tags",
            "kfaws:deployment is \"other\"",
            "kfaws state rm eks.cluster",
        ],
        &["fix what stops the read"],
    );
    assert_eq!(
        d.state()["resources"]["eks.cluster"],
        before["resources"]["eks.cluster"],
        "the cluster's entry is untouched (not tainted)"
    );
    let live = eks.describe_cluster().name(&d.name).send().await.unwrap();
    assert_eq!(live.cluster().unwrap().arn(), Some(arn.as_str()));

    // Tags put back: the plan is clean again, nothing is replaced.
    eks.tag_resource()
        .resource_arn(&arn)
        .set_tags(Some(ours))
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&["plan", "--target", "iam.oidc"]);
    assert!(
        !plan.contains("eks.cluster") && !plan.contains("iam.oidc"),
        "{plan}"
    );

    // The OIDC provider's tags removed by hand: the same refusal.
    let provider = d.stdout(&["output", "iam.oidc.arn"]);
    let provider = provider.trim();
    iam.untag_open_id_connect_provider()
        .open_id_connect_provider_arn(provider)
        .tag_keys("kfaws:deployment")
        .tag_keys("kfaws:lineage")
        .send()
        .await
        .unwrap();
    let exists = || async {
        iam.get_open_id_connect_provider()
            .open_id_connect_provider_arn(provider)
            .send()
            .await
            .is_ok()
    };
    let err = d.fails(&["plan"]);
    assert!(
        err.contains(&format!("IAM OIDC provider ({provider})"))
            && err.contains("kfaws:deployment is (none)")
            && err.contains("kfaws state rm iam.oidc"),
        "{err}"
    );
    assert!(exists().await);
    // `state rm` lets go of it. It keeps the issuer's URL, so plan and apply
    // refuse to create another (IAM has one provider per URL) before any
    // call, and record nothing (no tainted entry that a later apply would
    // replace by deleting it); the destroy leaves it alone.
    d.stdout(&["state", "rm", "iam.oidc"]);
    let creates = d.calls("CreateOpenIDConnectProvider");
    for command in [&["plan"][..], &["apply", "--auto-approve"]] {
        let err = d.fails(command);
        assert!(
            err.contains("iam.oidc: an IAM OIDC provider for https://")
                && err.contains(&format!("already exists ({provider})")),
            "{command:?}: {err}"
        );
    }
    assert_eq!(d.calls("CreateOpenIDConnectProvider"), creates);
    assert!(d.state()["resources"].get("iam.oidc").is_none());

    // The same for the cluster: retagged, let go of with `state rm`, and the
    // plan refuses to create another of its name instead of planning a
    // create that fails on the name and taints the entry.
    eks.tag_resource()
        .resource_arn(&arn)
        .tags("kfaws:deployment", "other")
        .send()
        .await
        .unwrap();
    d.stdout(&["state", "rm", "eks.cluster"]);
    let creates = d.calls("CreateCluster");
    for command in [&["plan"][..], &["apply", "--auto-approve"]] {
        let err = d.fails(command);
        assert!(
            err.contains(&format!(
                "eks.cluster: EKS cluster {} already exists",
                d.name
            )) && err.contains("not created by kfaws for this deployment"),
            "{command:?}: {err}"
        );
    }
    assert_eq!(d.calls("CreateCluster"), creates);
    assert!(d.state()["resources"].get("eks.cluster").is_none());
    eks.delete_cluster().name(&d.name).send().await.unwrap();
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(exists().await);
}

/// A recorded node group whose ownership tags were changed by hand: the plan
/// stops naming the live and expected tags (as for the cluster), the entry is
/// untouched, nothing is deleted; with the tags back, nothing to do.
#[tokio::test]
async fn a_recorded_node_group_retagged_by_hand_stops_the_plan_and_is_kept() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "eks.nodegroup.cpu"]);
    let before = d.state();
    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    let group = eks
        .describe_nodegroup()
        .cluster_name(&d.name)
        .nodegroup_name(format!("{}-cpu", d.name))
        .send()
        .await
        .unwrap();
    let group = group.nodegroup().unwrap();
    let arn = group.nodegroup_arn().unwrap().to_string();
    let ours = group.tags().unwrap().clone();
    eks.untag_resource()
        .resource_arn(&arn)
        .tag_keys("kfaws:deployment")
        .tag_keys("kfaws:lineage")
        .send()
        .await
        .unwrap();
    d.each_fails(
        &[
            &["plan"],
            &["apply", "--auto-approve"],
            &["destroy", "--auto-approve"],
        ],
        &[
            &format!("({arn})"),
            "no longer carries this deployment's tags",
            "kfaws:deployment is (none)",
            "kfaws:lineage is (none)",
        ],
        &["fix what stops the read"],
    );
    assert_eq!(
        d.state()["resources"]["eks.nodegroup.cpu"],
        before["resources"]["eks.nodegroup.cpu"]
    );
    assert_eq!(d.calls("DeleteNodegroup"), 0);
    eks.tag_resource()
        .resource_arn(&arn)
        .set_tags(Some(ours))
        .send()
        .await
        .unwrap();
    d.kfaws(&[
        "plan",
        "--detailed-exitcode",
        "--target",
        "eks.nodegroup.cpu",
    ])
    .assert()
    .code(0);
    d.stdout(&["destroy", "--auto-approve"]);
}

/// An OIDC provider that left the state is imported only for the issuer of
/// the live cluster: after a destroy (which leaves it and says so) a new
/// cluster has a new issuer on AWS, so the next plan creates a provider
/// rather than claiming to import the old one.
#[tokio::test]
async fn an_oidc_provider_left_outside_the_state_is_imported_only_for_the_live_clusters_issuer() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "iam.oidc"]);
    d.stdout(&["state", "rm", "iam.oidc"]);
    let plan = d.stdout(&["plan", "--target", "iam.oidc"]);
    assert!(plan.contains("# iam.oidc will be imported"), "{plan}");
    let out = d.stdout(&["destroy", "--auto-approve"]);
    assert!(
        out.contains("Left (with this deployment's tags, not in its state")
            && out.contains("iam.oidc"),
        "{out}"
    );
    let plan = d.stdout(&["plan", "--target", "iam.oidc"]);
    assert!(
        plan.contains("# iam.oidc will be created") && !plan.contains("will be imported"),
        "{plan}"
    );
}

/// A cluster deleted outside kfaws comes back from the next apply with a new
/// OIDC issuer, as on AWS: the IAM OIDC provider of the old issuer goes, one
/// for the new issuer is made, and the IRSA roles trust the new one.
#[tokio::test]
async fn a_cluster_deleted_by_hand_comes_back_with_a_new_issuer_and_the_oidc_provider_and_irsa_trust_follow(
) {
    let d = Deployment::new("");
    d.lifecycle(FAST);
    d.stdout(&["apply", "--auto-approve", "--target", "stack.irsa"]);
    let sdk = d.sdk().await;
    let (eks, iam) = (
        aws_sdk_eks::Client::new(&sdk),
        aws_sdk_iam::Client::new(&sdk),
    );
    let n = d.name.clone();
    let issuer = || async {
        let out = eks.describe_cluster().name(&n).send().await.ok()?;
        let oidc = out.cluster()?.identity()?.oidc()?;
        oidc.issuer().map(str::to_string)
    };
    let providers = || async {
        let out = iam.list_open_id_connect_providers().send().await.unwrap();
        out.open_id_connect_provider_list()
            .iter()
            .filter_map(|p| p.arn().map(str::to_string))
            .collect::<Vec<_>>()
    };
    let before = issuer().await.unwrap();
    eks.delete_cluster().name(&n).send().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while issuer().await.is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the cluster never went"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    let plan = d.stdout(&["plan", "--target", "stack.irsa"]);
    assert!(
        plan.contains("+ eks.cluster") && plan.contains("deleted outside kfaws"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve", "--target", "stack.irsa"]);
    let after = issuer().await.unwrap();
    assert_ne!(before, after, "a new cluster has a new issuer");
    let host_path = after.strip_prefix("https://").unwrap();
    let arns = providers().await;
    assert_eq!(arns.len(), 1, "the old issuer's provider is gone: {arns:?}");
    assert!(
        arns[0].ends_with(&format!(":oidc-provider/{host_path}")),
        "{arns:?}"
    );
    let role = format!("kfaws-{n}-us-east-1-irsa-efs-csi-controller");
    let policy = trust_policy(&iam, &role).await;
    let st = &policy["Statement"][0];
    assert_eq!(st["Principal"]["Federated"], arns[0].as_str(), "{policy}");
    assert!(
        st["Condition"]["StringEquals"]
            .get(format!("{host_path}:sub"))
            .is_some(),
        "{policy}"
    );
    d.kfaws(&["plan", "--detailed-exitcode", "--target", "stack.irsa"])
        .assert()
        .code(0);
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(providers().await.is_empty());
}

/// `[access_entries]`: each is an EKS access entry with exactly its one policy and scope, on a
/// cluster created in `API_AND_CONFIG_MAP` mode. A policy associated by hand is drift that
/// apply disassociates; a scope change is applied in place; a removed table deletes its entry;
/// an entry for the same principal that the deployment did not make is refused at plan.
#[tokio::test]
async fn access_entries_hold_exactly_their_policy_follow_the_config_and_refuse_foreign_ones() {
    let admins = "arn:aws:iam::210987654321:role/teams/platform/Admins";
    let viewer = "arn:aws:iam::123456789012:user/alice";
    let entries = |viewer_namespaces: &str, with_admins: bool| {
        let mut toml = format!(
            "[access_entries.viewer]\nprincipal_arn = \"{viewer}\"\npolicy = \"view\"\n\
             namespaces = [{viewer_namespaces}]\n"
        );
        if with_admins {
            toml.push_str(&format!(
                "[access_entries.admins]\nprincipal_arn = \"{admins}\"\npolicy = \"cluster-admin\"\n"
            ));
        }
        toml
    };
    let d = Deployment::new(&entries("\"team-a\"", true));
    // An entry for the identity running kfaws, which creates the cluster, would collide with
    // the admin entry EKS gives the creator: refused at plan.
    let me = format!("arn:aws:iam::{}:user/moto", d.account);
    d.write_config(&format!(
        "{}[access_entries.me]\nprincipal_arn = \"{me}\"\npolicy = \"view\"\n",
        entries("\"team-a\"", true)
    ));
    let err = d.fails(&["plan", "--target", "eks.access-entry.me"]);
    assert!(
        err.contains(&format!(
            "[access_entries.me]: principal_arn {me} is the identity running kfaws"
        )) && err.contains("remove [access_entries.me] from kfaws.toml"),
        "{err}"
    );
    // A role of this account that does not exist (a typo, say) is refused at plan, not by
    // CreateAccessEntry after the cluster's create; once it exists, it is planned.
    let ops = format!("arn:aws:iam::{}:role/teams/Ops", d.account);
    d.write_config(&format!(
        "{}[access_entries.ops]\nprincipal_arn = \"{ops}\"\npolicy = \"view\"\n",
        entries("\"team-a\"", true)
    ));
    let err = d.fails(&["plan", "--target", "eks.access-entry.ops"]);
    assert!(
        err.contains(&format!(
            "[access_entries.ops]: principal_arn {ops}: IAM role Ops does not exist in account {} \
             (IAM GetRole)",
            d.account
        )),
        "{err}"
    );
    aws_sdk_iam::Client::new(&d.sdk().await)
        .create_role()
        .role_name("Ops")
        .path("/teams/")
        .assume_role_policy_document(r#"{"Version":"2012-10-17","Statement":[]}"#)
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&["plan", "--target", "eks.access-entry.ops"]);
    assert!(plan.contains("+ eks.access-entry.ops"), "{plan}");
    // The role's path given wrong is refused too (EKS takes it with its path or without).
    let wrong = format!("arn:aws:iam::{}:role/team/Ops", d.account);
    d.write_config(&format!(
        "{}[access_entries.ops]\nprincipal_arn = \"{wrong}\"\npolicy = \"view\"\n",
        entries("\"team-a\"", true)
    ));
    let err = d.fails(&["plan", "--target", "eks.access-entry.ops"]);
    assert!(
        err.contains(&format!("IAM role Ops of account {} is {ops}", d.account)),
        "{err}"
    );
    d.write_config(&entries("\"team-a\"", true));
    let targets = [
        "--target",
        "eks.access-entry.admins",
        "--target",
        "eks.access-entry.viewer",
    ];
    let plan = d.stdout(&[&["plan"][..], &targets].concat());
    assert!(
        plan.contains("+ eks.access-entry.admins") && plan.contains("+ eks.access-entry.viewer"),
        "{plan}"
    );
    // Whom each admits, and with what, before anything is made.
    assert!(
        plan.contains(&format!(
            "+ {admins} (EKS access entry)  # AmazonEKSClusterAdminPolicy cluster-wide"
        )) && plan.contains(&format!(
            "+ {viewer} (EKS access entry)  # AmazonEKSViewPolicy in namespaces team-a"
        )),
        "{plan}"
    );
    d.stdout(&[&["apply", "--auto-approve"][..], &targets].concat());

    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    let cluster = eks.describe_cluster().name(&d.name).send().await.unwrap();
    assert_eq!(
        cluster
            .cluster()
            .unwrap()
            .access_config()
            .and_then(|a| a.authentication_mode()),
        Some(&aws_sdk_eks::types::AuthenticationMode::ApiAndConfigMap)
    );
    let policies = |principal: &'static str| {
        let (eks, name) = (eks.clone(), d.name.clone());
        async move {
            let out = eks
                .list_associated_access_policies()
                .cluster_name(name)
                .principal_arn(principal)
                .send()
                .await
                .unwrap();
            out.associated_access_policies()
                .iter()
                .map(|p| {
                    let scope = p.access_scope().unwrap();
                    let policy = p.policy_arn().unwrap().rsplit('/').next().unwrap();
                    let mut namespaces = scope.namespaces().to_vec();
                    namespaces.sort();
                    format!(
                        "{policy} {} {}",
                        scope.r#type().unwrap().as_str(),
                        namespaces.join(",")
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    // The error code DescribeAccessEntry answers for `principal` (`None`: it exists).
    let describe_error = |principal: &'static str| {
        let (eks, name) = (eks.clone(), d.name.clone());
        async move {
            eks.describe_access_entry()
                .cluster_name(name)
                .principal_arn(principal)
                .send()
                .await
                .err()
                .and_then(|e| {
                    e.as_service_error()
                        .and_then(|e| e.meta().code())
                        .map(str::to_string)
                })
        }
    };
    assert_eq!(
        policies(admins).await,
        ["AmazonEKSClusterAdminPolicy cluster "]
    );
    assert_eq!(
        policies(viewer).await,
        ["AmazonEKSViewPolicy namespace team-a"]
    );
    let entry = eks
        .describe_access_entry()
        .cluster_name(&d.name)
        .principal_arn(viewer)
        .send()
        .await
        .unwrap();
    let entry = entry.access_entry().unwrap();
    assert_eq!(entry.r#type(), Some("STANDARD"));
    assert_eq!(
        entry
            .tags()
            .unwrap()
            .get("kfaws:address")
            .map(String::as_str),
        Some("eks.access-entry.viewer")
    );
    assert_eq!(
        d.state()["resources"]["eks.access-entry.viewer"]["physical_id"],
        entry.access_entry_arn().unwrap()
    );
    let no_changes = |d: &Deployment| {
        d.kfaws(&[&["plan", "--detailed-exitcode"][..], &targets].concat())
            .assert()
            .code(0);
    };
    no_changes(&d);

    // A policy associated by hand is drift: the plan shows it and apply
    // disassociates it, keeping the configured one.
    eks.associate_access_policy()
        .cluster_name(&d.name)
        .principal_arn(viewer)
        .policy_arn("arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy")
        .access_scope(
            aws_sdk_eks::types::AccessScope::builder()
                .r#type(aws_sdk_eks::types::AccessScopeType::Cluster)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&[&["plan"][..], &targets].concat());
    assert!(
        plan.contains("~ eks.access-entry.viewer")
            && plan.contains("AmazonEKSEditPolicy")
            && plan.contains("changed outside kfaws"),
        "{plan}"
    );
    d.stdout(&[&["apply", "--auto-approve"][..], &targets].concat());
    assert_eq!(
        policies(viewer).await,
        ["AmazonEKSViewPolicy namespace team-a"]
    );
    no_changes(&d);

    // A scope change is applied in place: the same entry, the policy re-associated.
    d.write_config(&entries("\"team-b\", \"team-a\"", true));
    let plan = d.stdout(&[&["plan"][..], &targets].concat());
    assert!(plan.contains("~ eks.access-entry.viewer"), "{plan}");
    assert!(!plan.contains("-/+ eks.access-entry.viewer"), "{plan}");
    d.stdout(&[&["apply", "--auto-approve"][..], &targets].concat());
    assert_eq!(
        policies(viewer).await,
        ["AmazonEKSViewPolicy namespace team-a,team-b"]
    );
    assert_eq!(d.calls("CreateAccessEntry"), 2, "not replaced");

    // A Kubernetes group added by hand (whatever RBAC binds it to) is drift, removed in place.
    eks.update_access_entry()
        .cluster_name(&d.name)
        .principal_arn(viewer)
        .kubernetes_groups("system:masters")
        .send()
        .await
        .unwrap();
    let plan = d.stdout(&[&["plan"][..], &targets].concat());
    assert!(
        plan.contains("~ eks.access-entry.viewer") && plan.contains("system:masters"),
        "{plan}"
    );
    d.stdout(&[&["apply", "--auto-approve"][..], &targets].concat());
    let groups = eks
        .describe_access_entry()
        .cluster_name(&d.name)
        .principal_arn(viewer)
        .send()
        .await
        .unwrap();
    assert!(groups
        .access_entry()
        .unwrap()
        .kubernetes_groups()
        .is_empty());
    no_changes(&d);

    // A new principal replaces the entry: the old principal's is deleted.
    let other_admins = "arn:aws:iam::210987654321:role/teams/platform/OtherAdmins";
    d.write_config(&entries("\"team-b\", \"team-a\"", true).replace(admins, other_admins));
    let plan = d.stdout(&[&["plan"][..], &targets].concat());
    assert!(
        plan.contains("-/+ eks.access-entry.admins") && plan.contains("principal_arn"),
        "{plan}"
    );
    d.stdout(&[&["apply", "--auto-approve"][..], &targets].concat());
    assert_eq!(
        describe_error(admins).await.as_deref(),
        Some("ResourceNotFoundException")
    );
    assert_eq!(
        policies(other_admins).await,
        ["AmazonEKSClusterAdminPolicy cluster "]
    );
    no_changes(&d);

    // A removed table deletes its entry (a whole apply: a target cannot name what left the
    // config).
    d.write_config(&entries("\"team-b\", \"team-a\"", false));
    let plan = d.stdout(&["plan"]);
    assert!(
        plan.contains("- eks.access-entry.admins")
            && plan.contains("kfaws.toml has no [access_entries.admins]"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    assert_eq!(
        describe_error(other_admins).await.as_deref(),
        Some("ResourceNotFoundException")
    );
    assert!(d.state()["resources"]["eks.access-entry.admins"].is_null());

    // An entry for a principal made outside this deployment is refused at
    // plan, with the way out; nothing is created or deleted.
    let foreign = "arn:aws:iam::123456789012:role/SomeoneElses";
    eks.create_access_entry()
        .cluster_name(&d.name)
        .principal_arn(foreign)
        .send()
        .await
        .unwrap();
    d.write_config(&format!(
        "{}[access_entries.other]\nprincipal_arn = \"{foreign}\"\npolicy = \"edit\"\n",
        entries("\"team-a\"", false)
    ));
    let err = d.fails(&["plan", "--target", "eks.access-entry.other"]);
    assert!(
        err.contains(&format!(
            "EKS access entry for {foreign} on cluster {}",
            d.name
        )) && err.contains("this deployment did not create it")
            && err.contains(&format!(
                "aws eks delete-access-entry --cluster-name {} --principal-arn {foreign}",
                d.name
            )),
        "{err}"
    );
    let creates = d.calls("CreateAccessEntry");
    d.fails(&[
        "apply",
        "--auto-approve",
        "--target",
        "eks.access-entry.other",
    ]);
    assert_eq!(d.calls("CreateAccessEntry"), creates);

    d.write_config(&entries("\"team-a\"", false));
    // An entry the state forgot goes with the cluster: the destroy does not call it left.
    d.stdout(&["state", "rm", "eks.access-entry.viewer"]);
    let out = d.kfaws(&["destroy", "--auto-approve"]).output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("eks.access-entry.viewer"), "{said}");
    assert!(eks.describe_cluster().name(&d.name).send().await.is_err());
}

/// The live authentication mode of the deployment's cluster.
async fn authentication_mode(
    eks: &aws_sdk_eks::Client,
    d: &Deployment,
) -> Option<aws_sdk_eks::types::AuthenticationMode> {
    eks.describe_cluster()
        .name(&d.name)
        .send()
        .await
        .unwrap()
        .cluster()
        .unwrap()
        .access_config()
        .and_then(|a| a.authentication_mode())
        .cloned()
}

/// Makes the deployment's cluster by hand in `CONFIG_MAP` mode (EKS's default through the API,
/// as a cluster made before kfaws set the mode) on the applied `stack.network` and `stack.iam`,
/// with the deployment's tags, so that kfaws imports it.
async fn config_map_cluster(d: &Deployment, eks: &aws_sdk_eks::Client) {
    let lineage = d.state()["lineage"].as_str().unwrap().to_string();
    #[allow(deprecated)]
    let encryption = aws_sdk_eks::types::EncryptionConfig::builder()
        .resources("secrets")
        .provider(
            aws_sdk_eks::types::Provider::builder()
                .key_arn(d.output("stack.iam", "SecretsKeyArn"))
                .build(),
        )
        .build();
    eks.create_cluster()
        .name(&d.name)
        .version("1.33")
        .role_arn(d.output("stack.iam", "ClusterRoleArn"))
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder()
                .set_subnet_ids(Some(private_subnets(d)))
                .endpoint_public_access(true)
                .endpoint_private_access(true)
                .build(),
        )
        .encryption_config(encryption)
        .tags("kfaws:deployment", &d.name)
        .tags("kfaws:lineage", &lineage)
        .tags("kfaws:address", "eks.cluster")
        .send()
        .await
        .unwrap();
    assert_eq!(
        authentication_mode(eks, d).await,
        Some(aws_sdk_eks::types::AuthenticationMode::ConfigMap)
    );
}

/// A cluster of the deployment in `CONFIG_MAP` mode (made before kfaws set the mode, here by
/// hand with the deployment's tags, so kfaws imports it) is switched to `API_AND_CONFIG_MAP` in
/// place, as the plan says, and then admits access entries. Then `options.authentication_mode
/// = "api"` takes the same cluster on to `API` in place (one-way), and taking the option out
/// again plans no change.
#[tokio::test]
async fn a_cluster_in_config_map_mode_is_switched_in_place_to_admit_access_entries() {
    let d = Deployment::new("");
    d.stdout(&[
        "apply",
        "--auto-approve",
        "--target",
        "stack.network",
        "--target",
        "stack.iam",
    ]);
    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    config_map_cluster(&d, &eks).await;
    let mode = || authentication_mode(&eks, &d);
    let created = || {
        let (eks, name) = (eks.clone(), d.name.clone());
        async move {
            let out = eks.describe_cluster().name(name).send().await.unwrap();
            let c = out.cluster().unwrap();
            (c.arn().unwrap().to_string(), *c.created_at().unwrap())
        }
    };
    let created_before = created().await;
    d.stdout(&["apply", "--auto-approve", "--target", "eks.cluster"]);
    let plan = d.stdout(&["plan", "--target", "eks.cluster"]);
    assert!(
        plan.contains("~ eks.cluster")
            && plan.contains("access_entries: false -> true")
            && plan.contains("authentication mode CONFIG_MAP -> API_AND_CONFIG_MAP")
            && plan.contains("EKS cannot switch back to CONFIG_MAP"),
        "{plan}"
    );
    let updates = d.calls("UpdateClusterConfig");
    let ops = "[access_entries.ops]\nprincipal_arn = \"arn:aws:iam::123456789012:role/Ops\"\n\
               policy = \"admin\"\n";
    d.write_config(ops);
    d.stdout(&[
        "apply",
        "--auto-approve",
        "--target",
        "eks.access-entry.ops",
    ]);
    assert_eq!(
        mode().await,
        Some(aws_sdk_eks::types::AuthenticationMode::ApiAndConfigMap)
    );
    assert_eq!(d.calls("UpdateClusterConfig"), updates + 1);
    assert_eq!(created().await, created_before, "not replaced");
    eks.describe_access_entry()
        .cluster_name(&d.name)
        .principal_arn("arn:aws:iam::123456789012:role/Ops")
        .send()
        .await
        .unwrap();
    d.kfaws(&[
        "plan",
        "--detailed-exitcode",
        "--target",
        "eks.access-entry.ops",
    ])
    .assert()
    .code(0);

    // This default deployment set to `api`: refused while the identity running kfaws has no
    // access entry (it made the cluster in CONFIG_MAP mode, so EKS gave it none, and API
    // ignores aws-auth): the plan names the entry to add.
    d.write_config(&format!("[options]\nauthentication_mode = \"api\"\n{ops}"));
    let me = format!("arn:aws:iam::{}:user/moto", d.account);
    let err = d.fails(&["plan", "--target", "eks.cluster"]);
    assert!(
        // (The emulator's caller ARN is `arn:aws:sts::ACCOUNT:user/moto`; the entry names
        // the IAM user.)
        err.contains(&format!(
            "switches cluster {} to API, where only access entries admit principals, and the \
             identity running kfaws (",
            d.name
        )) && err.contains(":user/moto) has none")
            && err.contains(&format!(
                "principal_arn = \"{me}\", policy = \"cluster-admin\""
            )),
        "{err}"
    );
    assert_eq!(d.calls("UpdateClusterConfig"), updates + 1);
    // With an entry for it in the config, but left out by --target (it would come only with a
    // later apply, and the Kubernetes steps before it would be refused): refused, naming it.
    let ops =
        format!("{ops}[access_entries.me]\nprincipal_arn = \"{me}\"\npolicy = \"cluster-admin\"\n");
    let ops = ops.as_str();
    d.write_config(&format!("[options]\nauthentication_mode = \"api\"\n{ops}"));
    let err = d.fails(&["plan", "--target", "eks.cluster"]);
    assert!(
        err.contains("the entry that admits the identity running kfaws (")
            && err.contains("eks.access-entry.me, is not in this plan (left out by --target)")
            && err.contains("Add --target eks.access-entry.me"),
        "{err}"
    );
    assert_eq!(d.calls("UpdateClusterConfig"), updates + 1);
    // In the plan (created in the same apply, after the switch): the cluster goes on to API
    // in place, a config change the plan shows with its one-way note. (The entry's plan-time
    // check asks IAM for the user; the emulator's caller has none until made.)
    create_caller_user(&d).await;
    let both = ["--target", "eks.cluster", "--target", "eks.access-entry.me"];
    let out = d
        .kfaws(&[&["plan", "--detailed-exitcode"][..], &both[..]].concat())
        .assert()
        .code(2);
    let plan = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(
        plan.contains("~ eks.cluster")
            && plan.contains("authentication mode API_AND_CONFIG_MAP -> API")
            && plan.contains("the aws-auth ConfigMap stops admitting anyone")
            && plan.contains("EKS cannot switch back")
            && plan.contains("1 to add, 1 to change, 0 to destroy")
            && plan.contains("config changed: authentication_mode")
            && !plan.contains("changed outside kfaws"),
        "{plan}"
    );
    d.stdout(&[&["apply", "--auto-approve"][..], &both[..]].concat());
    assert_eq!(
        mode().await,
        Some(aws_sdk_eks::types::AuthenticationMode::Api)
    );
    assert_eq!(d.calls("UpdateClusterConfig"), updates + 2);
    assert_eq!(created().await, created_before, "not replaced");
    let no_changes = |d: &Deployment| {
        d.kfaws(&["plan", "--detailed-exitcode", "--target", "eks.cluster"])
            .assert()
            .code(0)
            .stdout(predicate::str::contains("authentication").not());
    };
    no_changes(&d);
    // Taken out again: EKS cannot switch back, and nothing is planned.
    d.write_config(ops);
    no_changes(&d);
    d.stdout(&["destroy", "--auto-approve"]);
}

/// Creates the IAM user `moto` behind the emulator's caller ARN (`arn:aws:sts::ACCOUNT:user/moto`),
/// which an access entry's plan-time check looks up with IAM GetUser.
async fn create_caller_user(d: &Deployment) {
    aws_sdk_iam::Client::new(&d.sdk().await)
        .create_user()
        .user_name("moto")
        .send()
        .await
        .unwrap();
}

/// `options.authentication_mode = "api"`: a new cluster is created in `API` mode (with the
/// creator's admin entry) and plans no change after; a cluster of the deployment in
/// `CONFIG_MAP` mode goes to `API` in one apply through `API_AND_CONFIG_MAP`, one
/// UpdateClusterConfig each (EKS refuses `CONFIG_MAP` -> `API`).
#[tokio::test]
async fn authentication_mode_api_creates_an_api_cluster_and_takes_a_config_map_one_in_two_steps() {
    let d = Deployment::new("[options]\nauthentication_mode = \"api\"\n");
    d.stdout(&["apply", "--auto-approve", "--target", "eks.cluster"]);
    let eks = aws_sdk_eks::Client::new(&d.sdk().await);
    assert_eq!(
        authentication_mode(&eks, &d).await,
        Some(aws_sdk_eks::types::AuthenticationMode::Api)
    );
    let entries = eks
        .list_access_entries()
        .cluster_name(&d.name)
        .send()
        .await
        .unwrap();
    assert!(
        entries
            .access_entries()
            .iter()
            .any(|e| e.ends_with(&format!(":{}:user/moto", d.account))),
        "the creator's admin entry: {entries:?}"
    );
    let clean = |d: &Deployment| {
        d.kfaws(&["plan", "--detailed-exitcode", "--target", "eks.cluster"])
            .assert()
            .code(0);
    };
    clean(&d);
    assert_eq!(d.calls("UpdateClusterConfig"), 0);

    d.stdout(&["destroy", "--auto-approve", "--target", "eks.cluster"]);
    config_map_cluster(&d, &eks).await;
    d.stdout(&["apply", "--auto-approve", "--target", "eks.cluster"]);
    // Its maker (the identity running kfaws) has no access entry in CONFIG_MAP mode (none can
    // be listed there): the switch is refused, also with an entry that could not apply
    // everything (`view`); a cluster-wide `cluster-admin` one in the config keeps it admitted.
    let me = format!("arn:aws:iam::{}:user/moto", d.account);
    for entry in [
        "",
        "[access_entries.me]\nprincipal_arn = \"ME\"\npolicy = \"view\"\n",
    ] {
        d.write_config(&format!(
            "[options]\nauthentication_mode = \"api\"\n{}",
            entry.replace("ME", &me)
        ));
        let err = d.fails(&["plan", "--target", "eks.cluster"]);
        assert!(err.contains(":user/moto) has none"), "{entry}: {err}");
    }
    d.write_config(&format!(
        "[options]\nauthentication_mode = \"api\"\n[access_entries.me]\n\
         principal_arn = \"arn:aws:iam::{}:user/moto\"\npolicy = \"cluster-admin\"\n",
        d.account
    ));
    // Imported above (the create re-attaches); both steps planned and applied, and the
    // entry created after them.
    create_caller_user(&d).await;
    let both = ["--target", "eks.cluster", "--target", "eks.access-entry.me"];
    let plan = d.stdout(&[&["plan"][..], &both[..]].concat());
    let (first, second) = (
        plan.find("authentication mode CONFIG_MAP -> API_AND_CONFIG_MAP"),
        plan.find("authentication mode API_AND_CONFIG_MAP -> API"),
    );
    assert!(
        matches!((first, second), (Some(a), Some(b)) if a < b)
            && plan.contains("1 to add, 1 to change, 0 to destroy"),
        "{plan}"
    );
    d.stdout(&[&["apply", "--auto-approve"][..], &both[..]].concat());
    assert_eq!(
        authentication_mode(&eks, &d).await,
        Some(aws_sdk_eks::types::AuthenticationMode::Api)
    );
    assert_eq!(d.calls("UpdateClusterConfig"), 2);
    clean(&d);
    d.stdout(&["destroy", "--auto-approve"]);
}
