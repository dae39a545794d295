//! Plan-time checks and destroy guards against the local AWS emulator:
//! Availability Zones from the instance type offerings (chosen once, then
//! kept), names held by others (C21), a bucket that is not empty, what
//! other actors leave in the VPC (C4), mount targets before the file system
//! and subnets (C5), and a destroy that leaves nothing. Run under
//! `tests/emulator/with_emulator.sh` (`make test` does); each test works in
//! an account of its own.

mod common;

use aws_sdk_ec2::types::{IpPermission, ResourceType, Tag, TagSpecification, UserIdGroupPair};
use common::aws::{control, fresh_account, Account, Deployment};
use predicates::prelude::*;

const SAGEMAKER_TRUST: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"sagemaker.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

fn no_stack_calls(aws: &Account) -> bool {
    !aws.mutating_calls()
        .iter()
        .any(|c| c.starts_with("cloudformation:"))
}

#[tokio::test]
async fn an_instance_type_offered_in_one_zone_fails_the_plan_before_any_mutating_call() {
    // hpc7g.4xlarge is offered only in us-east-1c (the emulator serves
    // EC2's published offerings).
    let d = Deployment::new("[node_groups.cpu]\ninstance_type = \"hpc7g.4xlarge\"\n");
    let expected = "node_groups.cpu.instance_type = \"hpc7g.4xlarge\": the instance type is \
                    offered in 1 Availability Zone of region us-east-1 (us-east-1c); the network \
                    needs 2 Availability Zones that offer it";
    for args in [&["plan"][..], &["apply", "--auto-approve"]] {
        let err = d.fails(args);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let aws = d.aws().await;
    assert_eq!(aws.mutating_calls(), Vec::<String>::new());
    let reads: Vec<String> = aws.calls().into_iter().map(|(_, op, _)| op).collect();
    assert!(
        reads.contains(&"DescribeInstanceTypeOfferings".to_string()),
        "{reads:?}"
    );
    assert!(
        !d.state_file().parent().unwrap().exists(),
        "a refused plan leaves no state directory"
    );
}

/// us-east-1e is zone ID use1-az3 in the emulator, in which EKS refuses
/// cluster subnets: a configured zone there fails the plan before any call
/// that changes anything.
#[tokio::test]
async fn a_configured_zone_eks_does_not_support_fails_the_plan() {
    let d = Deployment::new("[options]\navailability_zones = [\"us-east-1a\", \"us-east-1e\"]\n");
    let err = d.fails(&["plan"]);
    assert!(
        err.contains(
            "options.availability_zones: us-east-1e is zone ID use1-az3 in this account, in which \
             EKS refuses cluster subnets"
        ),
        "{err}"
    );
    assert_eq!(d.aws().await.mutating_calls(), Vec::<String>::new());
}

#[tokio::test]
async fn zones_are_the_first_two_offering_the_type_and_stay_once_recorded() {
    let fresh = Deployment::new("");
    let plan: serde_json::Value = serde_json::from_str(&fresh.stdout(&["plan", "--json"])).unwrap();
    assert_eq!(
        plan["account_id"],
        fresh.account.as_str(),
        "the plan names its account"
    );
    assert_eq!(
        plan["config"]["options"]["availability_zones"],
        serde_json::json!(["us-east-1a", "us-east-1b"]),
        "m5.xlarge is offered in us-east-1a, b, c, d and f"
    );

    let d = Deployment::new("[options]\navailability_zones = [\"us-east-1d\", \"us-east-1c\"]\n");
    d.stdout(&["apply", "--auto-approve"]);
    let aws = d.aws().await;
    let subnets = d.output("stack.network", "PrivateSubnetIds");
    let described = aws
        .ec2()
        .describe_subnets()
        .set_subnet_ids(Some(subnets.split(',').map(str::to_string).collect()))
        .send()
        .await
        .unwrap();
    let mut zones: Vec<&str> = described
        .subnets()
        .iter()
        .filter_map(|s| s.availability_zone())
        .collect();
    zones.sort_unstable();
    assert_eq!(zones, ["us-east-1c", "us-east-1d"]);

    // Without the option a fresh choice would be us-east-1a and b; the
    // recorded zones stay, so nothing changes.
    d.write_config("");
    d.kfaws(&["plan", "--detailed-exitcode"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("No changes."));
    let parameters = &d.state()["resources"]["stack.network"]["spec"]["parameters"];
    assert_eq!(parameters["AvailabilityZone1"], "us-east-1d");
    assert_eq!(parameters["AvailabilityZone2"], "us-east-1c");

    // Moving the network under the cluster is refused at plan, naming the
    // field: other zones, or another CIDR.
    d.write_config("[options]\navailability_zones = [\"us-east-1a\", \"us-east-1c\"]\n");
    let err = d.fails(&["plan"]);
    assert!(
        err.contains(
            "stack.network: options.availability_zones cannot change once the network exists \
             (AvailabilityZone1 us-east-1d -> us-east-1a)"
        ),
        "{err}"
    );
    d.write_config("[options]\nvpc_cidr = \"10.1.0.0/16\"\n");
    let err = d.fails(&["plan"]);
    assert!(
        err.contains(
            "stack.network: options.vpc_cidr cannot change once the network exists (VpcCidr \
             10.0.0.0/16 -> 10.1.0.0/16, PublicSubnet1Cidr 10.0.0.0/18 -> 10.1.0.0/18"
        ),
        "{err}"
    );
    assert!(err.contains("kfaws destroy"), "{err}");

    // A node group whose type the recorded zones lack is refused.
    d.write_config("[node_groups.hpc]\ninstance_type = \"hpc7g.4xlarge\"\nmin_size = 0\ndesired_size = 0\nmax_size = 1\n");
    let err = d.fails(&["plan"]);
    assert!(err.contains("hpc7g.4xlarge"), "{err}");
    d.write_config("");
    d.stdout(&["destroy", "--auto-approve"]);
}

#[tokio::test]
async fn a_foreign_sagemakerrole_fails_the_plan_and_nothing_is_created() {
    let d = Deployment::new("");
    let aws = d.aws().await;
    aws.iam()
        .create_role()
        .role_name("sagemakerrole")
        .assume_role_policy_document(SAGEMAKER_TRUST)
        .send()
        .await
        .unwrap();
    let err = d.fails(&["apply", "--auto-approve"]);
    assert!(
        err.contains(
            "stack.iam: IAM role \"sagemakerrole\" (options.sagemaker_role_name) already exists \
             in this account and it was not created by kfaws; creating it in the stack would fail \
             with EntityAlreadyExists."
        ),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "Set options.sagemaker_role_name = \"{}-sagemaker\"",
            d.name
        )),
        "{err}"
    );
    assert!(no_stack_calls(&aws), "{:?}", aws.mutating_calls());
    assert!(d.live_stacks().await.is_empty());
    assert!(!d.state_file().exists());

    // The remedy the error names works.
    d.write_config(&format!(
        "[options]\nsagemaker_role_name = \"{}-sagemaker\"\n",
        d.name
    ));
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(2);
}

/// C21 for the IRSA roles, whose names derive from the deployment name and
/// region: one held by someone else fails the plan, naming it, before any
/// stack is created (the stack would fail with EntityAlreadyExists after
/// the cluster was made).
#[tokio::test]
async fn a_foreign_role_with_an_irsa_role_name_fails_the_plan() {
    let d = Deployment::new("");
    let aws = d.aws().await;
    let name = format!("kfaws-{}-us-east-1-irsa-pipelines", d.name);
    aws.iam()
        .create_role()
        .role_name(&name)
        .assume_role_policy_document(SAGEMAKER_TRUST)
        .send()
        .await
        .unwrap();
    let err = d.fails(&["plan"]);
    assert!(
        err.contains(&format!(
            "stack.irsa: IAM role \"{name}\" (name) already exists in this account and it was \
             not created by kfaws"
        )),
        "{err}"
    );
    assert!(no_stack_calls(&aws), "{:?}", aws.mutating_calls());
}

/// C21 on the update path: a role renamed in the config to a name someone
/// else holds would be taken over by the stack (and deleted by its
/// destroy); the plan refuses it as it refuses a create.
#[tokio::test]
async fn renaming_a_role_or_the_bucket_to_one_someone_else_holds_fails_the_plan() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve"]);
    let aws = d.aws().await;
    let foreign = format!("{}-preexisting", d.name);
    aws.iam()
        .create_role()
        .role_name(&foreign)
        .assume_role_policy_document(SAGEMAKER_TRUST)
        .send()
        .await
        .unwrap();
    d.write_config(&format!("[options]\nsagemaker_role_name = {foreign:?}\n"));
    // A plan's change sets are made and deleted again; they change nothing.
    let changes = || -> Vec<String> {
        aws.mutating_calls()
            .into_iter()
            .filter(|c| !c.contains("ChangeSet"))
            .collect()
    };
    let before = changes();
    let err = d.fails(&["apply", "--auto-approve"]);
    assert!(
        err.contains(&format!(
            "stack.iam: IAM role {foreign:?} (options.sagemaker_role_name) already exists in \
             this account and it was not created by kfaws"
        )),
        "{err}"
    );
    assert_eq!(changes(), before, "nothing changed");

    // The same for the artifact bucket, held in another account.
    let other = Account::new(&fresh_account()).await;
    let taken = format!("{}-taken-bucket", d.name);
    other
        .s3()
        .create_bucket()
        .bucket(&taken)
        .send()
        .await
        .unwrap();
    d.write_config(&format!("[options]\nartifact_bucket = {taken:?}\n"));
    let err = d.fails(&["apply", "--auto-approve"]);
    assert!(
        err.contains(&format!(
            "stack.storage: S3 bucket {taken:?} (options.artifact_bucket) already exists in \
             another AWS account (HeadBucket: 403 Forbidden)"
        )),
        "{err}"
    );
    assert_eq!(changes(), before, "nothing changed");

    // Renaming a bucket that holds objects would leave it in no stack
    // (CloudFormation cannot delete it): refused at plan, naming both.
    let ours = format!("kfaws-{}-us-east-1-artifacts", d.name);
    aws.put_object(&ours, "model.tar.gz", b"weights").await;
    let before = changes();
    let fresh = format!("{}-fresh-bucket", d.name);
    d.write_config(&format!("[options]\nartifact_bucket = {fresh:?}\n"));
    let err = d.fails(&["plan"]);
    assert!(
        err.contains(&format!("changes the bucket from {ours:?} to {fresh:?}"))
            && err.contains("would be left in no stack and no state"),
        "{err}"
    );
    assert_eq!(changes(), before, "nothing changed");

    // A rename to a free name replaces the role: CloudFormation makes it
    // under the new name with its policies, then deletes the old one.
    let renamed = format!("{}-renamed", d.name);
    d.write_config(&format!("[options]\nsagemaker_role_name = {renamed:?}\n"));
    // CloudFormation's change set says so (Replacement: True), and the plan shows it.
    let plan = d.planned_changes();
    assert!(
        plan.contains("-/+ SageMakerRole (AWS::IAM::Role)"),
        "{plan}"
    );
    d.stdout(&["apply", "--auto-approve"]);
    let gone = aws.iam().get_role().role_name("sagemakerrole").send().await;
    assert!(gone.is_err(), "{gone:?}");
    // With its policy: the default (scoped) role's inline one.
    let inline = aws
        .iam()
        .list_role_policies()
        .role_name(&renamed)
        .send()
        .await
        .unwrap();
    assert_eq!(inline.policy_names(), ["kfaws-scoped"], "{inline:?}");
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);

    // Back to the default name, and the destroy leaves the user's role alone.
    d.write_config("");
    d.stdout(&["apply", "--auto-approve"]);
    d.kfaws(&["plan", "--detailed-exitcode"]).assert().code(0);
    d.stdout(&["destroy", "--auto-approve", "--force-destroy-buckets"]);
    aws.iam()
        .get_role()
        .role_name(&foreign)
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_bucket_name_held_elsewhere_fails_the_plan() {
    let d = Deployment::new("");
    let other = Account::new(&fresh_account()).await;
    let bucket = format!("kfaws-{}-us-east-1-artifacts", d.name);
    other
        .s3()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    let err = d.fails(&["plan"]);
    assert!(
        err.contains(&format!(
            "stack.storage: S3 bucket {bucket:?} (options.artifact_bucket) already exists in \
             another AWS account (HeadBucket: 403 Forbidden)"
        )),
        "{err}"
    );
    assert!(err.contains("Set options.artifact_bucket"), "{err}");
    assert!(no_stack_calls(&d.aws().await));
}

#[tokio::test]
async fn a_bucket_with_objects_stops_destroy_before_anything_is_deleted() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve"]);
    let aws = d.aws().await;
    let s3 = aws.s3();
    let bucket = d.output("stack.storage", "BucketName");
    for body in ["v1", "v2"] {
        aws.put_object(&bucket, "models/lenet.mpk", body.as_bytes())
            .await;
    }
    s3.delete_object()
        .bucket(&bucket)
        .key("models/lenet.mpk")
        .send()
        .await
        .unwrap();
    let before = d.live_stacks().await;

    let err = d.fails(&["destroy", "--auto-approve"]);
    assert!(
        err.contains(&format!(
            "stack.storage: bucket {bucket} is not empty: it holds 2 object versions and 1 delete \
             marker."
        )),
        "{err}"
    );
    assert!(
        err.contains("kfaws destroy --force-destroy-buckets")
            && err.contains("`kfaws plan --destroy --force-destroy-buckets` shows that plan"),
        "{err}"
    );
    assert_eq!(d.live_stacks().await, before);
    assert!(
        before.iter().all(|(_, s)| s == "CREATE_COMPLETE"),
        "{before:?}"
    );
    assert_eq!(
        before.len(),
        5,
        "network, iam, storage, efs and irsa stacks: {before:?}"
    );
    assert!(
        !aws.mutating_calls()
            .iter()
            .any(|c| c.contains("Delete") && !c.starts_with("s3:DeleteObject ")),
        "{:?}",
        aws.mutating_calls()
    );

    let out = d.stdout(&["destroy", "--auto-approve", "--force-destroy-buckets"]);
    assert!(out.contains("Destroy complete!"), "{out}");
    assert_eq!(aws.leftovers().await, Vec::<String>::new());
}

/// `--replace stack.storage` deletes the bucket with the stack: one that
/// holds objects stops the apply before anything is deleted, naming the
/// flag for a replacement (not a whole destroy); with
/// `--force-destroy-buckets` the objects go and the new bucket is empty.
#[tokio::test]
async fn replacing_the_bucket_stack_with_objects_needs_force_destroy_buckets() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.storage"]);
    let aws = d.aws().await;
    let bucket = d.output("stack.storage", "BucketName");
    aws.put_object(&bucket, "models/lenet.mpk", b"weights")
        .await;
    let replace = ["--target", "stack.storage", "--replace", "stack.storage"];
    let err = d.fails(&[&["apply", "--auto-approve"][..], &replace].concat());
    assert!(
        err.contains(&format!(
            "stack.storage: bucket {bucket} is not empty: it holds 1 object version"
        )) && err.contains("so the replacement would stop half way; nothing was deleted")
            && err.contains("`kfaws apply --replace stack.storage --force-destroy-buckets`")
            && !err.contains("kfaws destroy"),
        "{err}"
    );
    assert_eq!(d.calls("DeleteStack"), 0);

    // A saved plan made without the flag is not changed by it at apply time.
    d.stdout(&["plan", "-out", "without.plan", "--target", "stack.storage"]);
    let err = d.fails(&["apply", "without.plan", "--force-destroy-buckets"]);
    assert!(
        err.contains("--force-destroy-buckets differs from the saved plan, made without it"),
        "{err}"
    );
    let plan = d.stdout(
        &[
            &["plan", "--force-destroy-buckets", "-out", "with.plan"][..],
            &replace,
        ]
        .concat(),
    );
    assert!(
        plan.contains("--force-destroy-buckets: every S3 bucket this plan deletes is emptied")
            && plan.contains(&format!(
                "- {bucket} (AWS::S3::Bucket)  # emptied first (--force-destroy-buckets), \
                 deleting for good what it holds: 1 object version"
            )),
        "{plan}"
    );
    assert_eq!(d.calls("DeleteStack"), 0);
    // Repeating the saved plan's choice is accepted.
    let out = d
        .kfaws(&["apply", "with.plan", "--force-destroy-buckets"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stdout.contains("Apply complete!"), "{stdout}{stderr}");
    // What cannot be recovered is said at the default level.
    assert!(
        stderr.contains(&format!(
            "emptied S3 bucket {bucket} before deleting it (--force-destroy-buckets): deleted 1 \
             object version\n"
        )),
        "{stderr}"
    );
    assert_eq!(d.calls("DeleteStack"), 1);
    assert_eq!(d.output("stack.storage", "BucketName"), bucket);
    let listed = aws
        .s3()
        .list_object_versions()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    assert!(
        listed.versions().is_empty() && listed.delete_markers().is_empty(),
        "the new bucket is empty: {listed:?}"
    );
    d.stdout(&["destroy", "--auto-approve"]);
}

/// The storage stack deleted outside kfaws with its bucket kept (Amazon S3
/// deletes only empty buckets): the plan
/// to make the stack again is refused, naming the bucket and the ways on,
/// instead of an apply whose CreateStack fails on the name at every run.
#[tokio::test]
async fn a_bucket_its_stack_left_behind_fails_the_plan_to_make_the_stack_again_and_destroys_name_it(
) {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.storage"]);
    let aws = d.aws().await;
    let bucket = d.output("stack.storage", "BucketName");
    aws.put_object(&bucket, "models/kept.mpk", b"weights").await;
    let stack = format!("kfaws-{}-storage", d.name);
    let cfn = aws.cloudformation();
    // AWS fails the delete on the bucket that is not empty (DELETE_FAILED)
    // and a second delete with `--retain-resources ArtifactBucket` completes;
    // the emulator completes the first and keeps the bucket.
    cfn.delete_stack().stack_name(&stack).send().await.unwrap();
    for _ in 0..300 {
        let gone = match cfn.describe_stacks().stack_name(&stack).send().await {
            Ok(out) => out.stacks()[0].stack_status().unwrap().as_str() == "DELETE_COMPLETE",
            Err(_) => true,
        };
        if gone {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    aws.s3()
        .head_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("the bucket was kept");
    let creates = d.calls("CreateStack");
    for command in [&["plan"][..], &["apply", "--auto-approve"]] {
        let err = d.fails(&[command, &["--target", "stack.storage"]].concat());
        assert!(
            err.contains(&format!(
                "stack.storage: S3 bucket {bucket:?} (options.artifact_bucket) exists with this \
                 deployment's tags but in no stack"
            )) && err.contains(&format!("and delete it: `aws s3 rb s3://{bucket}`")),
            "{command:?}: {err}"
        );
    }
    assert_eq!(d.calls("CreateStack"), creates, "no CreateStack");
    assert_eq!(d.state()["resources"]["stack.storage"]["status"], "created");

    // A destroy deletes no bucket here (the stack is gone): it is neither
    // refused for the bucket's objects nor empties it, even with
    // --force-destroy-buckets.
    // The plan names the bucket it leaves, untracked from then on.
    let plan = d.stdout(&["plan", "--destroy", "--target", "stack.storage"]);
    assert!(
        plan.contains(&format!("Keep {bucket} (AWS::S3::Bucket)"))
            && plan.contains(&format!(
                "kept when stack {stack} was deleted outside kfaws; it holds 1 object version"
            ))
            && plan.contains("not tracked after it"),
        "{plan}"
    );
    d.stdout(&["destroy", "--auto-approve", "--force-destroy-buckets"]);
    assert_eq!(d.calls("DeleteObjects"), 0);
    aws.s3()
        .head_object()
        .bucket(&bucket)
        .key("models/kept.mpk")
        .send()
        .await
        .expect("the kept bucket's objects are untouched");
    // A destroy run again, on the now empty state, names it again: nothing
    // else will.
    let again = d.stdout(&["destroy", "--auto-approve"]);
    assert!(
        again.contains("has nothing in its state")
            && again.contains(&format!(
                "Warning: not destroyed: S3 bucket {bucket}: kept when stack {stack} was \
                 deleted outside kfaws; it holds 1 object version"
            ))
            && again.contains(&format!("aws s3 rb s3://{bucket}")),
        "{again}"
    );
}

async fn cluster_tagged_group(aws: &Account, vpc: &str, name: &str, cluster: &str) -> String {
    let spec = TagSpecification::builder()
        .resource_type(ResourceType::SecurityGroup)
        .tags(
            Tag::builder()
                .key(format!("kubernetes.io/cluster/{cluster}"))
                .value("owned")
                .build(),
        )
        .build();
    aws.ec2()
        .create_security_group()
        .group_name(name)
        .description("load balancer")
        .vpc_id(vpc)
        .tag_specifications(spec)
        .send()
        .await
        .unwrap()
        .group_id()
        .unwrap()
        .to_string()
}

async fn eni(aws: &Account, subnet: &str, group: &str) -> String {
    aws.ec2()
        .create_network_interface()
        .subnet_id(subnet)
        .groups(group)
        .send()
        .await
        .unwrap()
        .network_interface()
        .and_then(|n| n.network_interface_id())
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn leftover_enis_and_load_balancer_groups_of_the_cluster_are_removed_before_the_vpc() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve"]);
    let aws = d.aws().await;
    let vpc = d.output("stack.network", "VpcId");
    let subnet = d.output("stack.network", "PrivateSubnet1");
    let nfs = d.output("stack.network", "NfsSecurityGroupId");
    // What the AWS Load Balancer Controller and the VPC CNI leave behind:
    // a load balancer group tagged for the cluster, referenced by a rule of
    // the NFS group, and detached interfaces carrying either group.
    let lb = cluster_tagged_group(&aws, &vpc, "k8s-elb-a1b2c3", &d.name).await;
    aws.ec2()
        .authorize_security_group_ingress()
        .group_id(&nfs)
        .ip_permissions(
            IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(2049)
                .to_port(2049)
                .user_id_group_pairs(UserIdGroupPair::builder().group_id(&lb).build())
                .build(),
        )
        .send()
        .await
        .unwrap();
    let cni = eni(&aws, &subnet, &nfs).await;
    let lb_eni = eni(&aws, &subnet, &lb).await;
    // One with the cluster's own security group, which goes with the cluster
    // before the network is destroyed (case C4).
    let cluster_sg = d.output("eks.cluster", "cluster_security_group_id");
    let cluster_eni = eni(&aws, &subnet, &cluster_sg).await;

    // The plan names what goes with the network although kfaws did not make it.
    let plan = d.stdout(&["plan", "--destroy"]);
    for (id, kind) in [
        (&cni, "network interface"),
        (&lb_eni, "network interface"),
        (&cluster_eni, "network interface"),
        (&lb, "security group"),
    ] {
        assert!(
            plan.contains(&format!("- {id} ({kind})  # made for cluster")),
            "{id} not in:\n{plan}"
        );
    }
    let done = d.kfaws(&["destroy", "--auto-approve"]).assert().success();
    let out = String::from_utf8_lossy(&done.get_output().stdout);
    assert!(out.contains("Destroy complete!"), "{out}");
    // What kfaws deletes on Kubernetes' behalf is named by id.
    let log = String::from_utf8_lossy(&done.get_output().stderr);
    for id in [&cni, &lb_eni, &lb] {
        assert!(log.contains(id.as_str()), "{id} not named in:\n{log}");
    }
    let left = aws.leftovers().await;
    assert_eq!(
        left,
        Vec::<String>::new(),
        "{cni} {lb_eni} {cluster_eni} {lb}"
    );
}

#[tokio::test]
async fn something_foreign_in_the_vpc_is_reported_by_id_before_anything_is_deleted() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve"]);
    let aws = d.aws().await;
    let vpc = d.output("stack.network", "VpcId");
    let subnet = d.output("stack.network", "PrivateSubnet1");
    let bastion = aws
        .ec2()
        .create_security_group()
        .group_name("bastion")
        .description("someone else's")
        .vpc_id(&vpc)
        .send()
        .await
        .unwrap()
        .group_id()
        .unwrap()
        .to_string();
    let foreign = eni(&aws, &subnet, &bastion).await;
    let before = d.live_stacks().await;

    let err = d.fails(&["destroy", "--auto-approve"]);
    assert!(
        err.contains(&format!("stack.network: VPC {vpc} holds 2 resources")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "network interface {foreign} (available, security groups {bastion})"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("security group {bastion} (\"bastion\")")),
        "{err}"
    );
    assert!(err.contains("nothing was deleted"), "{err}");
    assert_eq!(d.live_stacks().await, before);
    assert_eq!(
        before.len(),
        5,
        "network, iam, storage, efs and irsa stacks: {before:?}"
    );
    assert!(
        !aws.mutating_calls()
            .iter()
            .any(|c| c.starts_with("cloudformation:DeleteStack")),
        "{:?}",
        aws.mutating_calls()
    );

    // Once its owner removes it, destroy finishes.
    let ec2 = aws.ec2();
    ec2.delete_network_interface()
        .network_interface_id(&foreign)
        .send()
        .await
        .unwrap();
    ec2.delete_security_group()
        .group_id(&bastion)
        .send()
        .await
        .unwrap();
    d.stdout(&["destroy", "--auto-approve"]);
    assert_eq!(aws.leftovers().await, Vec::<String>::new());
}

/// A node of the cluster outside its managed node groups (Karpenter's, a
/// self-managed group's) outlives the cluster: deleting the cluster does
/// not terminate it. It is named at plan, before anything is deleted (its
/// primary network interface with it, not apart); before, destroy deleted
/// the cluster and then waited for it until the network's deadline.
#[tokio::test]
async fn a_node_outside_the_managed_node_groups_stops_destroy_before_anything_is_deleted() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve"]);
    let aws = d.aws().await;
    let vpc = d.output("stack.network", "VpcId");
    let subnet = d.output("stack.network", "PrivateSubnet1");
    let ec2 = aws.ec2();
    let ami = ec2.describe_images().send().await.unwrap().images()[0]
        .image_id()
        .unwrap()
        .to_string();
    let tags = TagSpecification::builder()
        .resource_type(ResourceType::Instance)
        .tags(
            Tag::builder()
                .key(format!("kubernetes.io/cluster/{}", d.name))
                .value("owned")
                .build(),
        )
        .tags(
            Tag::builder()
                .key("karpenter.sh/nodepool")
                .value("default")
                .build(),
        )
        .build();
    let node = ec2
        .run_instances()
        .image_id(ami)
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .subnet_id(&subnet)
        .min_count(1)
        .max_count(1)
        .tag_specifications(tags)
        .send()
        .await
        .unwrap()
        .instances()[0]
        .instance_id()
        .unwrap()
        .to_string();
    let before = d.live_stacks().await;

    for command in [&["plan", "--destroy"][..], &["destroy", "--auto-approve"]] {
        let err = d.fails(command);
        assert!(
            err.contains(&format!("stack.network: VPC {vpc} holds 1 resource"))
                && err.contains(&format!(
                    "instance {node} (a node of cluster {} in no EKS managed node group",
                    d.name
                ))
                && err.contains("nothing was deleted"),
            "{command:?}: {err}"
        );
    }
    assert_eq!(d.live_stacks().await, before);
    assert!(
        !aws.mutating_calls().iter().any(|c| c.contains(":Delete")),
        "{:?}",
        aws.mutating_calls()
    );

    // (Terminating it and destroying again is not replayed here: the
    // emulator keeps a terminated instance's primary network interface,
    // which EC2 deletes with the instance, DeleteOnTermination.)
}

#[tokio::test]
async fn mount_targets_are_gone_before_the_file_system_and_before_the_subnets() {
    let d = Deployment::new("");
    // Stack transitions take real time, so event times order the stacks.
    control(
        &format!("lifecycle?account_id={}", d.account),
        "PUT",
        r#"{"scale": 0.02}"#,
    );
    d.stdout(&["apply", "--auto-approve"]);
    let state = d.state();
    let id = |a: &str| {
        state["resources"][a]["physical_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (storage, network) = (id("stack.efs"), id("stack.network"));
    d.stdout(&["destroy", "--auto-approve"]);

    let cfn = d.aws().await.cloudformation();
    // Oldest first: (logical id, status, time).
    let events = |stack: String| {
        let cfn = cfn.clone();
        async move {
            let out = cfn
                .describe_stack_events()
                .stack_name(stack)
                .send()
                .await
                .unwrap();
            let mut e: Vec<(String, String, aws_sdk_cloudformation::primitives::DateTime)> = out
                .stack_events()
                .iter()
                .map(|e| {
                    (
                        e.logical_resource_id().unwrap_or_default().to_string(),
                        e.resource_status()
                            .map(|s| s.as_str().to_string())
                            .unwrap_or_default(),
                        *e.timestamp().unwrap(),
                    )
                })
                .collect();
            e.reverse();
            e
        }
    };
    let storage_events = events(storage).await;
    let at = |events: &[(String, String, aws_sdk_cloudformation::primitives::DateTime)],
              id: &str,
              status: &str| {
        events
            .iter()
            .position(|(l, s, _)| l == id && s == status)
            .unwrap_or_else(|| panic!("no {status} event for {id}: {events:?}"))
    };
    let fs_delete = at(&storage_events, "FileSystem", "DELETE_IN_PROGRESS");
    for mt in ["MountTarget1", "MountTarget2"] {
        assert!(
            at(&storage_events, mt, "DELETE_COMPLETE") < fs_delete,
            "{mt} gone before the file system: {storage_events:?}"
        );
    }
    let storage_done = storage_events.last().unwrap().2;
    let network_events = events(network).await;
    for subnet in ["PrivateSubnet1", "PrivateSubnet2"] {
        let i = at(&network_events, subnet, "DELETE_IN_PROGRESS");
        assert!(
            network_events[i].2.as_nanos() >= storage_done.as_nanos(),
            "{subnet} deleted after the efs stack: {storage_events:?} {network_events:?}"
        );
    }
    assert_eq!(d.aws().await.efs_file_systems(), Vec::<String>::new());
}

/// The EFS stack removed from the state but not from AWS keeps its mount
/// targets in the VPC: the network's destroy is refused at plan (it would
/// wait for their interfaces until its deadline), and the remedy it names
/// works.
#[tokio::test]
async fn mount_targets_of_a_file_system_the_state_forgot_stop_the_network_destroy_at_plan() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve", "--target", "stack.efs"]);
    let fs = d.output("stack.efs", "FileSystemId");
    d.stdout(&["state", "rm", "stack.efs"]);
    let calls = d.aws().await.mutating_calls();
    let err = d.fails(&["destroy", "--auto-approve"]);
    assert!(
        err.contains(&format!(
            "holds EFS mount targets of file system(s) {fs} (eni-"
        )) && err.contains("nothing was deleted")
            && err.contains("`kfaws apply --target stack.efs` imports it"),
        "{err}"
    );
    assert_eq!(d.aws().await.mutating_calls(), calls, "nothing was deleted");
    // The remedy: import the stack, then destroy deletes it before the network.
    let out = d.stdout(&["apply", "--auto-approve", "--target", "stack.efs"]);
    assert!(out.contains("1 imported"), "{out}");
    d.stdout(&["destroy", "--auto-approve"]);
    assert!(d.live_stack_names().await.is_empty());
    assert_eq!(d.aws().await.efs_file_systems(), Vec::<String>::new());
}

#[tokio::test]
async fn destroy_leaves_nothing_and_twice_is_a_no_op() {
    let d = Deployment::new("");
    d.stdout(&["apply", "--auto-approve"]);
    let aws = d.aws().await;
    assert!(
        !aws.leftovers().await.is_empty(),
        "the inventory sees the deployment"
    );
    let out = d.stdout(&["destroy", "--auto-approve"]);
    assert!(out.contains("Destroy complete!"), "{out}");
    assert_eq!(aws.leftovers().await, Vec::<String>::new());

    let calls = aws.mutating_calls();
    d.kfaws(&["destroy", "--auto-approve"])
        .assert()
        .success()
        .stdout(predicate::str::contains("No resources to destroy"));
    assert_eq!(
        aws.mutating_calls(),
        calls,
        "a second destroy changes nothing"
    );
}
