//! The vanilla profile (DESIGN.md §3): the AWS half of Kubeflow on AWS.
//!
//! ```text
//! stack.network, stack.iam
//! eks.cluster          ← stack.network, stack.iam
//! eks.nodegroup.<g>    ← eks.cluster (and the subnets and node role it runs with)
//! eks.access-entry.<e> ← eks.cluster                      (config [access_entries.<e>])
//! iam.oidc             ← eks.cluster
//! stack.irsa           ← iam.oidc
//! stack.storage        (the artifact bucket)
//! stack.efs            ← stack.network                    (the EFS file system, mount targets)
//! k8s.efs-csi          ← eks.nodegroup.*, eks.access-entry.*, stack.irsa (manifests/efs-csi.yaml)
//! k8s.efs-storage      ← k8s.efs-csi, stack.efs           (manifests/efs-storage.yaml)
//! k8s.kubeflow         ← eks.nodegroup.*, eks.access-entry.* (config kubeflow.manifests)
//! k8s.training-operator ← k8s.kubeflow                    (config kubeflow.training_operator)
//! k8s.user-namespace   ← k8s.kubeflow, k8s.training-operator, k8s.efs-storage, stack.irsa
//!                                                         (manifests/user-namespace.yaml)
//! ```
//!
//! `k8s.kubeflow` and `k8s.training-operator` are in the graph when their
//! config field names manifests; every `k8s.*` node also follows
//! `eks.cluster`, whose API server it is applied to
//! ([`crate::k8s::resource`]).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;

use super::{AwsProvider, Built};
use crate::address::Address;
use crate::aws::eks::access_entry::AccessEntryResource;
use crate::aws::eks::cluster::{ClusterResource, MODE_FIELD};
use crate::aws::eks::nodegroup::NodegroupResource;
use crate::aws::guards::{
    BucketGuard, FileSystemGuard, FixedRole, InUseGuard, Kept, Owner, PoliciesGuard, RolesGuard,
    VpcGuard,
};
use crate::aws::ingress::IngressGuard;
use crate::aws::oidc::OidcProviderResource;
use crate::aws::stack::{InputParameter, StackResource};
use crate::aws::trust::{aws_managed_policy, TrustGuard, TrustedRole, Trustee};
use crate::aws::zones::{self, Source, Wanted, ZoneError};
use crate::config::{
    AccessEntry, AuthenticationMode, Config, NodeGroup, SageMakerRolePolicy, EKS_NODE_POLICIES,
};
use crate::k8s::auth::EksTokens;
use crate::k8s::resource::{
    ClusterConnector, InputValue, ManifestsResource, ServedKind, Source as ManifestSource,
    SourceError,
};
use crate::resource::{Guard, Resource};
use crate::state::{ResourceState, State};

const NETWORK: &str = include_str!("../../stacks/network.yaml");
const IAM: &str = include_str!("../../stacks/iam.yaml");
const STORAGE: &str = include_str!("../../stacks/storage.yaml");
const EFS: &str = include_str!("../../stacks/efs.yaml");
const IRSA: &str = include_str!("../../stacks/irsa.yaml");
const EFS_CSI: &str = include_str!("../../manifests/efs-csi.yaml");
const EFS_STORAGE: &str = include_str!("../../manifests/efs-storage.yaml");
const USER_NAMESPACE: &str = include_str!("../../manifests/user-namespace.yaml");

/// The Kubernetes bundles' addresses.
pub const EFS_CSI_ADDRESS: &str = "k8s.efs-csi";
/// StorageClass `efs-sc` and PersistentVolume `efs-pv`.
pub const EFS_STORAGE_ADDRESS: &str = "k8s.efs-storage";
/// The Kubeflow manifests of config `kubeflow.manifests`.
pub const KUBEFLOW_ADDRESS: &str = "k8s.kubeflow";
/// The training operator of config `kubeflow.training_operator`.
pub const TRAINING_OPERATOR_ADDRESS: &str = "k8s.training-operator";
/// The user namespace, its pipelines access and EFS claim.
pub const USER_NAMESPACE_ADDRESS: &str = "k8s.user-namespace";
/// Every Kubernetes bundle of the profile.
const BUNDLE_ADDRESSES: [&str; 5] = [
    EFS_CSI_ADDRESS,
    EFS_STORAGE_ADDRESS,
    KUBEFLOW_ADDRESS,
    TRAINING_OPERATOR_ADDRESS,
    USER_NAMESPACE_ADDRESS,
];

/// The EKS cluster's address.
pub const CLUSTER: &str = "eks.cluster";
/// The IAM OIDC provider's address.
pub const OIDC: &str = "iam.oidc";
/// The prefix of the node groups' addresses, `eks.nodegroup.<group>`.
pub const NODEGROUP_PREFIX: &str = "eks.nodegroup.";
/// The prefix of the access entries' addresses, `eks.access-entry.<name>`.
pub const ACCESS_ENTRY_PREFIX: &str = "eks.access-entry.";

/// The address of the config's `[access_entries.<name>]`, `eks.access-entry.<name>`.
fn access_entry_address(name: &str) -> Address {
    addr(&format!("{ACCESS_ENTRY_PREFIX}{name}"))
}

/// Why this config has no resource at `address` that the profile makes
/// under another config ([`crate::resource::Provider::why_absent`]): a node
/// group without its `[node_groups.<group>]` table (the default group
/// [`crate::config::DEFAULT_NODE_GROUP`] is made only while kfaws.toml has
/// no `[node_groups]` table, so adding one without it removes the default
/// group), `k8s.kubeflow` or `k8s.training-operator` without its
/// `[kubeflow]` setting. `None` for addresses this config has and for
/// addresses the profile never makes.
pub fn why_absent(config: &Config, address: &Address) -> Option<String> {
    match address.as_str() {
        KUBEFLOW_ADDRESS if config.kubeflow.manifests.is_none() => {
            return Some("kubeflow.manifests is not set in kfaws.toml".into())
        }
        TRAINING_OPERATOR_ADDRESS if config.kubeflow.training_operator.is_none() => {
            return Some("kubeflow.training_operator is not set in kfaws.toml".into())
        }
        _ => {}
    }
    if let Some(entry) = address.as_str().strip_prefix(ACCESS_ENTRY_PREFIX) {
        return (!config.access_entries.contains_key(entry))
            .then(|| format!("kfaws.toml has no [access_entries.{entry}]"));
    }
    let group = address.as_str().strip_prefix(NODEGROUP_PREFIX)?;
    if config.node_groups.contains_key(group) {
        return None;
    }
    let mut why = format!("kfaws.toml has no [node_groups.{group}]");
    if group == crate::config::DEFAULT_NODE_GROUP {
        why.push_str(&format!(
            " (the default group {group} is made only while there is no [node_groups] table; \
             add [node_groups.{group}] to keep it)"
        ));
    }
    Some(why)
}

/// The deployment's outputs (`kfaws output`), from the stacks' outputs.
pub const OUTPUTS: &[super::NamedOutput] = &[
    out("vpc_id", "stack.network", "VpcId"),
    out("private_subnet_ids", "stack.network", "PrivateSubnetIds"),
    out("public_subnet_ids", "stack.network", "PublicSubnetIds"),
    out(
        "nfs_security_group_id",
        "stack.network",
        "NfsSecurityGroupId",
    ),
    out(
        "s3_gateway_endpoint_id",
        "stack.network",
        "S3GatewayEndpointId",
    ),
    out("efs_file_system_id", "stack.efs", "FileSystemId"),
    out("bucket_name", "stack.storage", "BucketName"),
    out("sagemaker_role_arn", "stack.iam", "SageMakerRoleArn"),
    out("cluster_role_arn", "stack.iam", "ClusterRoleArn"),
    out("node_role_arn", "stack.iam", "NodeRoleArn"),
    out("cluster_name", CLUSTER, "name"),
    out("cluster_endpoint", CLUSTER, "endpoint"),
    out(
        "cluster_certificate_authority",
        CLUSTER,
        "certificate_authority_data",
    ),
    out("oidc_issuer", CLUSTER, "oidc_issuer"),
    out(
        "cluster_security_group_id",
        CLUSTER,
        "cluster_security_group_id",
    ),
    out("efs_csi_role_arn", "stack.irsa", "EfsCsiControllerRoleArn"),
    out("pipelines_role_arn", "stack.irsa", "PipelinesRoleArn"),
];

const fn out(name: &'static str, address: &'static str, key: &'static str) -> super::NamedOutput {
    super::NamedOutput { name, address, key }
}

fn addr(s: &str) -> Address {
    Address::new(s).expect("profile addresses are valid")
}

/// Splits the VPC CIDR into four equal subnets (two more prefix bits):
/// public 1, public 2, private 1, private 2.
///
/// # Panics
/// On a CIDR that [`Config::validate`] would have refused.
pub fn subnet_cidrs(vpc_cidr: &str) -> [String; 4] {
    let (base, prefix) = vpc_cidr.split_once('/').expect("validated CIDR");
    let base = u32::from(base.parse::<Ipv4Addr>().expect("validated CIDR"));
    let prefix: u32 = prefix.parse().expect("validated CIDR");
    let step = 1u32 << (32 - (prefix + 2));
    std::array::from_fn(|i| format!("{}/{}", Ipv4Addr::from(base + step * i as u32), prefix + 2))
}

/// The network stack's subnet parameters, in [`subnet_cidrs`]' order.
const SUBNET_PARAMETERS: [&str; 4] = [
    "PublicSubnet1Cidr",
    "PublicSubnet2Cidr",
    "PrivateSubnet1Cidr",
    "PrivateSubnet2Cidr",
];
/// The network stack's parameters that hold its Availability Zones.
const ZONE_PARAMETERS: [&str; zones::ZONE_COUNT] = ["AvailabilityZone1", "AvailabilityZone2"];

/// The stacks of the deployment, by part (their names in every stack's
/// [`VpcGuard`]: what any of them made in the VPC is theirs to delete).
const PARTS: [&str; 5] = ["network", "iam", "irsa", "storage", "efs"];

/// How long the network stack's delete waits for the cluster's network
/// interfaces (nodes, control plane, mount targets) to be released: EKS
/// releases them asynchronously after the cluster is deleted.
const RELEASE_WAIT: Duration = Duration::from_secs(15 * 60);

/// The zones recorded for the network in `state`, if it was created.
fn recorded_zones(state: &State) -> Option<Vec<String>> {
    let network = state.resources.get(&addr("stack.network"))?;
    let parameters = network.spec.get("parameters")?;
    ZONE_PARAMETERS
        .iter()
        .map(|p| parameters.get(*p)?.as_str().map(str::to_string))
        .collect()
}

/// The SageMaker role policy `stack.iam` was applied with (its `SageMakerRolePolicy`
/// parameter), if the state records one.
fn recorded_role_policy(state: &State) -> Option<SageMakerRolePolicy> {
    let iam = state.resources.get(&addr("stack.iam"))?;
    match iam
        .spec
        .get("parameters")?
        .get("SageMakerRolePolicy")?
        .as_str()?
    {
        "full" => Some(SageMakerRolePolicy::Full),
        "scoped" => Some(SageMakerRolePolicy::Scoped),
        _ => None,
    }
}

/// Whether the state records the cluster applied with
/// `options.authentication_mode = "api"` (its spec's [`MODE_FIELD`]), or an
/// update to it that did not finish (its `updating` spec: the switch may
/// have been sent).
fn recorded_api_mode(state: &State) -> bool {
    let api = |spec: &serde_json::Value| {
        spec.get(MODE_FIELD).and_then(serde_json::Value::as_str)
            == Some(aws_sdk_eks::types::AuthenticationMode::Api.as_str())
    };
    state
        .resources
        .get(&addr(CLUSTER))
        .is_some_and(|c| api(&c.spec) || c.updating.as_ref().is_some_and(api))
}

/// Fills in what the config leaves to the deployment's history: an unset
/// `options.sagemaker_role_policy` is the recorded one, else the default
/// (`scoped`), so a deployment applied while `full` was the default keeps
/// its role's policies; `options.authentication_mode` is `api` once the
/// cluster was applied with it, whatever the config now says (EKS cannot
/// switch a cluster back from `API`: the plan shows no change). Then what it
/// leaves to AWS: the network's
/// Availability Zones ([`zones`]: the configured ones, else the recorded
/// ones, else the first two that offer every node group's instance type),
/// checked against the instance type offerings. A destroy needs no choice
/// and makes no call, and reads no `kubeflow.*` manifests (their bundles
/// are deleted by ApplySet, as bundles that left the config).
///
/// # Errors
/// [`ZoneError`] naming the field, instance type, region and zones.
pub async fn prepare(
    config: &Config,
    aws: &SdkConfig,
    state: &State,
    destroy: bool,
) -> Result<Config, ZoneError> {
    let mut config = config.clone();
    if config.options.sagemaker_role_policy.is_none() {
        config.options.sagemaker_role_policy =
            Some(recorded_role_policy(state).unwrap_or_default());
    }
    if recorded_api_mode(state) {
        config.options.authentication_mode = AuthenticationMode::Api;
    }
    let recorded = recorded_zones(state);
    if destroy {
        // What was applied is found through the ApplySet parents: a destroy
        // reads no manifests, so one whose files are gone still runs.
        config.kubeflow = Default::default();
        if config.options.availability_zones.is_none() {
            config.options.availability_zones = recorded;
        }
        return Ok(config);
    }
    let wanted: Vec<Wanted> = config
        .node_groups
        .iter()
        .map(|(group, ng)| Wanted {
            field: format!("node_groups.{group}.instance_type"),
            instance_type: ng.instance_type.clone(),
        })
        .collect();
    let types = wanted.iter().map(|w| w.instance_type.clone()).collect();
    let offerings = zones::offerings(aws, &config.region, &types).await?;
    let fixed = match (&config.options.availability_zones, &recorded) {
        (Some(z), _) => Some((z.as_slice(), Source::Config)),
        (None, Some(r)) => Some((r.as_slice(), Source::State)),
        (None, None) => None,
    };
    config.options.availability_zones = Some(zones::choose(&wanted, &offerings, fixed)?);
    Ok(config)
}

/// The network parameters the cluster keeps ([`Kept`]), from the config.
fn kept(config: &Config) -> Vec<Kept> {
    let cidrs = subnet_cidrs(&config.options.vpc_cidr);
    let mut kept = vec![Kept {
        parameter: "VpcCidr",
        field: "options.vpc_cidr",
        value: config.options.vpc_cidr.clone(),
    }];
    for (parameter, value) in SUBNET_PARAMETERS.into_iter().zip(cidrs) {
        kept.push(Kept {
            parameter,
            field: "options.vpc_cidr",
            value,
        });
    }
    // Filled in by `prepare` (the recorded zones unless the config names others).
    for (parameter, zone) in ZONE_PARAMETERS
        .into_iter()
        .zip(config.options.availability_zones.iter().flatten())
    {
        kept.push(Kept {
            parameter,
            field: "options.availability_zones",
            value: zone.clone(),
        });
    }
    kept
}

/// The roles of `stacks/iam.yaml` with the service each trusts and the
/// policies the template gives it (the SageMaker role's depend on
/// `options.sagemaker_role_policy`).
/// The node role's managed policy ARNs: EKS's three, then
/// `options.node_role_policies` (the template attaches this list, the
/// [`TrustGuard`] holds the role to it).
fn node_role_policies(config: &Config) -> Vec<String> {
    let partition = crate::aws::partition(&config.region);
    EKS_NODE_POLICIES
        .iter()
        .map(|n| aws_managed_policy(partition, n))
        .chain(config.options.node_role_policies.iter().cloned())
        .collect()
}

fn service_roles(config: &Config) -> Vec<TrustedRole> {
    let partition = crate::aws::partition(&config.region);
    let managed = |names: &[&str]| -> Vec<String> {
        names
            .iter()
            .map(|n| aws_managed_policy(partition, n))
            .collect()
    };
    let (sagemaker_inline, sagemaker_managed) =
        match config.options.sagemaker_role_policy.unwrap_or_default() {
            SageMakerRolePolicy::Scoped => (vec!["kfaws-scoped"], vec![]),
            SageMakerRolePolicy::Full => (
                vec![],
                managed(&["AmazonSageMakerFullAccess", "AmazonS3FullAccess"]),
            ),
        };
    vec![
        TrustedRole {
            resource: "ClusterRole",
            parameter: "ClusterRoleName",
            name: config.role_name("eks-cluster"),
            trustee: Trustee::Service("eks.amazonaws.com"),
            inline: vec![],
            managed: managed(&["AmazonEKSClusterPolicy"]),
        },
        TrustedRole {
            resource: "NodeRole",
            parameter: "NodeRoleName",
            name: config.role_name("eks-node"),
            trustee: Trustee::Service("ec2.amazonaws.com"),
            inline: vec![],
            managed: node_role_policies(config),
        },
        TrustedRole {
            resource: "SageMakerRole",
            parameter: "SageMakerRoleName",
            name: config.options.sagemaker_role_name.clone(),
            trustee: Trustee::Service("sagemaker.amazonaws.com"),
            inline: sagemaker_inline,
            managed: sagemaker_managed,
        },
    ]
}

/// The guard of the artifact bucket in `stack.storage`.
fn bucket_guard(config: &Config, aws: &SdkConfig, owner: Owner) -> BucketGuard {
    BucketGuard {
        s3: crate::aws::bucket::client(aws),
        bucket: config.bucket_name(),
        owner,
        cloudformation: crate::aws::client::<aws_sdk_cloudformation::Client>(aws),
        stack_name: config.stack_name("storage"),
    }
}

/// What the deployment left outside every resource the state records: the artifact bucket
/// when `stack.storage` is no longer in the state and its stack was deleted outside kfaws
/// with the bucket kept ([`BucketGuard::left_behind`]), as `(what, note)`: `S3 bucket NAME`
/// and the warning. While the state
/// records the stack, its destroy plan names the bucket instead.
///
/// # Errors
/// As [`BucketGuard::left_behind`].
pub async fn left_behind(
    config: &Config,
    aws: &SdkConfig,
    state: &State,
) -> Result<Vec<(String, String)>, crate::resource::ResourceError> {
    if state.resources.contains_key(&addr("stack.storage")) {
        return Ok(vec![]);
    }
    let owner = Owner {
        deployment: config.name.clone(),
        lineage: state.lineage.to_string(),
    };
    let name = config.bucket_name();
    let guard = bucket_guard(config, aws, owner);
    Ok(guard
        .left_behind(&name)
        .await?
        .map(|kept| {
            let note = format!(
                "S3 bucket {name}: {kept}; no state records it: once you have what you need \
                 from it, {}",
                BucketGuard::removal(&name)
            );
            (format!("S3 bucket {name}"), note)
        })
        .into_iter()
        .collect())
}

fn guards(
    config: &Config,
    aws: &SdkConfig,
    lineage: uuid::Uuid,
    part: &str,
) -> Vec<Arc<dyn Guard>> {
    let owner = Owner {
        deployment: config.name.clone(),
        lineage: lineage.to_string(),
    };
    let derived = |name: String, parameter| FixedRole {
        name,
        parameter,
        field: "name".into(),
        remedy: "Its name is derived from the deployment name and region: choose another \
                 name, or delete the role if it is left over from an earlier deployment."
            .into(),
    };
    match part {
        "network" => vec![
            Arc::new(VpcGuard {
                ec2: crate::aws::client::<aws_sdk_ec2::Client>(aws),
                cloudformation: crate::aws::client::<aws_sdk_cloudformation::Client>(aws),
                stacks: PARTS.iter().map(|p| config.stack_name(p)).collect(),
                cluster: config.name.clone(),
                eks: crate::aws::client::<aws_sdk_eks::Client>(aws),
                cluster_address: Address::new(CLUSTER).expect("a valid address"),
                address: Address::new(format!("stack.{part}")).expect("a valid address"),
                deadline: RELEASE_WAIT,
                kept: kept(config),
                efs_address: Address::new("stack.efs").expect("a valid address"),
            }),
            Arc::new(IngressGuard {
                ec2: crate::aws::client::<aws_sdk_ec2::Client>(aws),
                vpc_cidr: config.options.vpc_cidr.clone(),
                output: "NfsSecurityGroupId",
                cloudformation: crate::aws::client::<aws_sdk_cloudformation::Client>(aws),
                stack: config.stack_name("network"),
                logical_id: "NfsSecurityGroup",
            }),
        ],
        "iam" => vec![
            Arc::new(RolesGuard {
                iam: crate::aws::client::<aws_sdk_iam::Client>(aws),
                roles: vec![
                    derived(config.role_name("eks-cluster"), "ClusterRoleName"),
                    derived(config.role_name("eks-node"), "NodeRoleName"),
                    FixedRole {
                        name: config.options.sagemaker_role_name.clone(),
                        parameter: "SageMakerRoleName",
                        field: "options.sagemaker_role_name".into(),
                        remedy: format!(
                            "Set options.sagemaker_role_name = \"{}-sagemaker\" (or any unused \
                         name) in kfaws.toml, or delete the role if it is left over from an \
                         earlier run.",
                            config.name
                        ),
                    },
                ],
                owner,
            }),
            Arc::new(PoliciesGuard {
                iam: crate::aws::client::<aws_sdk_iam::Client>(aws),
                sts: crate::aws::client::<aws_sdk_sts::Client>(aws),
                parameter: "NodeRolePolicies",
                field: "options.node_role_policies",
                policies: config.options.node_role_policies.clone(),
            }),
            Arc::new(InUseGuard {
                eks: crate::aws::client::<aws_sdk_eks::Client>(aws),
                cluster: config.name.clone(),
                cluster_address: Address::new(CLUSTER).expect("a valid address"),
                address: Address::new(format!("stack.{part}")).expect("a valid address"),
            }),
            Arc::new(TrustGuard {
                iam: crate::aws::client::<aws_sdk_iam::Client>(aws),
                roles: service_roles(config),
                replace_when_gone: false,
                cfn: crate::aws::client::<aws_sdk_cloudformation::Client>(aws),
                stack_name: config.stack_name(part),
            }),
        ],
        "irsa" => vec![
            Arc::new(RolesGuard {
                iam: crate::aws::client::<aws_sdk_iam::Client>(aws),
                roles: vec![
                    derived(
                        config.role_name("irsa-efs-csi-controller"),
                        "EfsCsiRoleName",
                    ),
                    derived(config.role_name("irsa-pipelines"), "PipelinesRoleName"),
                ],
                owner,
            }),
            Arc::new(TrustGuard {
                iam: crate::aws::client::<aws_sdk_iam::Client>(aws),
                cfn: crate::aws::client::<aws_sdk_cloudformation::Client>(aws),
                stack_name: config.stack_name(part),
                roles: vec![
                    TrustedRole {
                        resource: "EfsCsiControllerRole",
                        parameter: "EfsCsiRoleName",
                        name: config.role_name("irsa-efs-csi-controller"),
                        trustee: Trustee::ServiceAccount(
                            "system:serviceaccount:kube-system:efs-csi-controller-sa".into(),
                        ),
                        inline: vec!["efs-csi-controller"],
                        managed: vec![],
                    },
                    TrustedRole {
                        resource: "PipelinesRole",
                        parameter: "PipelinesRoleName",
                        name: config.role_name("irsa-pipelines"),
                        trustee: Trustee::ServiceAccount(format!(
                            "system:serviceaccount:{}:default-editor",
                            config.options.user_namespace
                        )),
                        inline: vec!["sagemaker"],
                        managed: vec![],
                    },
                ],
                replace_when_gone: true,
            }),
        ],
        "storage" => vec![Arc::new(bucket_guard(config, aws, owner))],
        "efs" => vec![Arc::new(FileSystemGuard {
            efs: crate::aws::client::<aws_sdk_efs::Client>(aws),
        })],
        _ => vec![],
    }
}

fn stacks(config: &Config, aws: &SdkConfig, lineage: uuid::Uuid) -> Vec<StackResource> {
    let client = crate::aws::client::<aws_sdk_cloudformation::Client>(aws);
    let stack = |part: &str, template, estimate, parameters: BTreeMap<String, String>, inputs| {
        StackResource {
            address: addr(&format!("stack.{part}")),
            stack_name: config.stack_name(part),
            deployment: config.name.clone(),
            lineage: lineage.to_string(),
            template,
            parameters,
            inputs,
            estimate: Duration::from_secs(estimate),
            client: client.clone(),
            guards: guards(config, aws, lineage, part),
        }
    };
    let params = |pairs: &[(&str, String)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    // Not the lineage: a saved plan of a deployment whose state is not
    // written yet is applied under another (fresh) lineage.
    let owner = [("Deployment", config.name.clone())];
    let network = addr("stack.network");
    let from_network = |parameter, output| InputParameter {
        parameter,
        from: network.clone(),
        output,
    };
    let from_oidc = |parameter, output| InputParameter {
        parameter,
        from: addr(OIDC),
        output,
    };
    let mut network_parameters = params(&[
        ("ClusterName", config.name.clone()),
        ("VpcCidr", config.options.vpc_cidr.clone()),
    ]);
    for (parameter, cidr) in SUBNET_PARAMETERS
        .into_iter()
        .zip(subnet_cidrs(&config.options.vpc_cidr))
    {
        network_parameters.insert(parameter.to_string(), cidr);
    }
    // Filled in by `prepare` before any plan; absent only where no plan is
    // made (`kfaws graph`).
    if let Some(zones) = &config.options.availability_zones {
        for (parameter, zone) in ZONE_PARAMETERS.iter().zip(zones) {
            network_parameters.insert(parameter.to_string(), zone.clone());
        }
    }
    let mut iam_parameters = params(&[
        ("ClusterRoleName", config.role_name("eks-cluster")),
        ("NodeRoleName", config.role_name("eks-node")),
        ("NodeRolePolicies", node_role_policies(config).join(",")),
        (
            "SageMakerRoleName",
            config.options.sagemaker_role_name.clone(),
        ),
        (
            "SageMakerRolePolicy",
            match config.options.sagemaker_role_policy.unwrap_or_default() {
                SageMakerRolePolicy::Full => "full".into(),
                SageMakerRolePolicy::Scoped => "scoped".into(),
            },
        ),
        ("ArtifactBucket", config.bucket_name()),
    ]);
    iam_parameters.extend(params(&owner));
    let mut storage_parameters = params(&[("BucketName", config.bucket_name())]);
    storage_parameters.extend(params(&owner));
    vec![
        // NAT gateways take minutes to become available.
        stack("network", NETWORK, 240, network_parameters, vec![]),
        stack("iam", IAM, 60, iam_parameters, vec![]),
        stack("storage", STORAGE, 30, storage_parameters, vec![]),
        // Mount targets take a minute or two to become available.
        stack(
            "efs",
            EFS,
            120,
            params(&[("ClusterName", config.name.clone())]),
            vec![
                from_network("PrivateSubnet1", "PrivateSubnet1"),
                from_network("PrivateSubnet2", "PrivateSubnet2"),
                from_network("NfsSecurityGroupId", "NfsSecurityGroupId"),
            ],
        ),
        // IAM roles take seconds; the stack's own overhead dominates.
        stack(
            "irsa",
            IRSA,
            60,
            params(&[
                ("Deployment", config.name.clone()),
                (
                    "EfsCsiRoleName",
                    config.role_name("irsa-efs-csi-controller"),
                ),
                ("PipelinesRoleName", config.role_name("irsa-pipelines")),
                (
                    "SageMakerRoleName",
                    config.options.sagemaker_role_name.clone(),
                ),
                ("UserNamespace", config.options.user_namespace.clone()),
            ]),
            vec![
                from_oidc("OidcProviderArn", "arn"),
                from_oidc("OidcIssuerHostPath", "issuer_host_path"),
            ],
        ),
    ]
}

fn cluster(config: &Config, aws: &SdkConfig, lineage: uuid::Uuid) -> ClusterResource {
    ClusterResource {
        address: addr(CLUSTER),
        name: config.name.clone(),
        kubernetes_version: config.kubernetes_version.clone(),
        role_name: config.role_name("eks-cluster"),
        deployment: config.name.clone(),
        lineage: lineage.to_string(),
        network: addr("stack.network"),
        iam: addr("stack.iam"),
        authentication_mode: config.options.authentication_mode,
        entry_principals: config
            .access_entries
            .iter()
            .filter(|(_, e)| {
                e.policy == crate::config::AccessPolicy::ClusterAdmin && e.namespaces.is_none()
            })
            .map(|(name, e)| (access_entry_address(name), e.principal_arn.clone()))
            .collect(),
        client: crate::aws::client::<aws_sdk_eks::Client>(aws),
        sts: crate::aws::client::<aws_sdk_sts::Client>(aws),
    }
}

fn nodegroup(
    config: &Config,
    aws: &SdkConfig,
    lineage: uuid::Uuid,
    group: &str,
    settings: &NodeGroup,
) -> NodegroupResource {
    NodegroupResource {
        address: addr(&format!("{NODEGROUP_PREFIX}{group}")),
        cluster_name: config.name.clone(),
        nodegroup_name: config.nodegroup_name(group),
        group: settings.clone(),
        kubernetes_version: config.kubernetes_version.clone(),
        deployment: config.name.clone(),
        lineage: lineage.to_string(),
        cluster: addr(CLUSTER),
        network: addr("stack.network"),
        iam: addr("stack.iam"),
        eks: crate::aws::client::<aws_sdk_eks::Client>(aws),
        ec2: crate::aws::client::<aws_sdk_ec2::Client>(aws),
    }
}

fn access_entry(
    config: &Config,
    aws: &SdkConfig,
    lineage: uuid::Uuid,
    name: &str,
    entry: &AccessEntry,
) -> AccessEntryResource {
    let namespaces = entry.namespaces.as_ref().map(|ns| {
        let mut ns = ns.clone();
        ns.sort();
        ns.dedup();
        ns
    });
    AccessEntryResource {
        address: access_entry_address(name),
        cluster: addr(CLUSTER),
        cluster_name: config.name.clone(),
        principal_arn: entry.principal_arn.clone(),
        policy_arn: entry.policy.arn(crate::aws::partition(&config.region)),
        namespaces,
        deployment: config.name.clone(),
        lineage: lineage.to_string(),
        client: crate::aws::client::<aws_sdk_eks::Client>(aws),
        sts: crate::aws::client::<aws_sdk_sts::Client>(aws),
        iam: crate::aws::client::<aws_sdk_iam::Client>(aws),
    }
}

fn oidc(config: &Config, aws: &SdkConfig, lineage: uuid::Uuid) -> OidcProviderResource {
    OidcProviderResource {
        address: addr(OIDC),
        cluster: addr(CLUSTER),
        deployment: config.name.clone(),
        lineage: lineage.to_string(),
        client: crate::aws::client::<aws_sdk_iam::Client>(aws),
        eks: crate::aws::client::<aws_sdk_eks::Client>(aws),
        cluster_name: config.name.clone(),
    }
}

fn connector(config: &Config, aws: &SdkConfig, lineage: uuid::Uuid) -> ClusterConnector {
    ClusterConnector {
        cluster_name: config.name.clone(),
        region: config.region.clone(),
        eks: crate::aws::client::<aws_sdk_eks::Client>(aws),
        tokens: EksTokens::new(aws.clone(), config.name.clone(), config.region.clone()),
        owner: Some((config.name.clone(), lineage.to_string())),
    }
}

/// The manifests named in config (`[kubeflow]`), read and checked by
/// [`read_sources`]; every graph built from them shares their objects.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// `kubeflow.manifests`.
    kubeflow: Option<ManifestSource>,
    /// `kubeflow.training_operator`.
    training_operator: Option<ManifestSource>,
}

/// Reads and checks the manifests named in config (`kubeflow.manifests`,
/// `kubeflow.training_operator`; [`ManifestSource::load`]). Both are read
/// before either error is returned, so that one run names what is wrong
/// with each. No `[kubeflow]` path: empty [`Sources`], nothing read.
///
/// # Errors
/// [`SourceError`] naming the field, file and line; [`SourceError::Several`]
/// when both are broken.
pub fn read_sources(config: &Config) -> Result<Sources, SourceError> {
    let load = |field: &str, suffix: &str, path: &Option<std::path::PathBuf>| {
        path.as_ref().map(|path| {
            ManifestSource::load(
                field,
                &format!("{}-{suffix}", config.applyset_name()),
                path.clone(),
                &config.kubernetes_version,
            )
        })
    };
    let kubeflow = load("kubeflow.manifests", "kubeflow", &config.kubeflow.manifests);
    let operator = load(
        "kubeflow.training_operator",
        "training-operator",
        &config.kubeflow.training_operator,
    );
    match (kubeflow.transpose(), operator.transpose()) {
        (Ok(kubeflow), Ok(training_operator)) => Ok(Sources {
            kubeflow,
            training_operator,
        }),
        (Err(a), Err(b)) => Err(SourceError::Several(vec![a, b])),
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}

/// The Kubernetes bundles (see the module docs), those of `[kubeflow]` from
/// `sources`.
///
/// # Errors
/// [`SourceError::Overlap`] when two bundles hold the same object.
fn bundles(
    config: &Config,
    aws: &SdkConfig,
    lineage: uuid::Uuid,
    sources: &Sources,
) -> Result<Vec<ManifestsResource>, SourceError> {
    let connector = connector(config, aws, lineage);
    // What every bundle follows: the cluster, its nodes, and its access entries, so that a
    // destroy deletes the entries only after every bundle (a teammate admitted by one would
    // otherwise lose the cluster half way through the destroy). The nodes and entries only
    // order the bundles: adding a node group or an entry re-applies none of them.
    let in_cluster: Vec<Address> = vec![addr(CLUSTER)];
    let ordering: Vec<Address> = config
        .node_groups
        .keys()
        .map(|g| addr(&format!("{NODEGROUP_PREFIX}{g}")))
        .chain(
            config
                .access_entries
                .keys()
                .map(|e| access_entry_address(e)),
        )
        .collect();
    let bundle = |address: &str,
                  source: ManifestSource,
                  values: &[(&str, String)],
                  inputs: Vec<InputValue>,
                  after: Vec<Address>,
                  estimate: u64,
                  timeout: u64| ManifestsResource {
        address: addr(address),
        bundle: format!(
            "{}-{}",
            config.applyset_name(),
            address.trim_start_matches("k8s.")
        ),
        source,
        values: values
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        inputs,
        after,
        ordered_after: Vec::new(),
        serves: vec![],
        connector: connector.clone(),
        cluster: addr(CLUSTER),
        estimate: Duration::from_secs(estimate),
        timeout: Duration::from_secs(timeout),
        used_elsewhere: BTreeMap::new(),
        replaceable_under_dependants: false,
    };
    // A bundle whose pods run on the nodes (efs-csi, Kubeflow, the training operator).
    let on_nodes = |b: ManifestsResource| ManifestsResource {
        ordered_after: ordering.clone(),
        ..b
    };
    let input = |placeholder, from: &str, output| InputValue {
        placeholder,
        from: addr(from),
        output,
    };
    let template = |file, text| ManifestSource::Template { file, text };
    let mut out = vec![
        on_nodes(bundle(
            EFS_CSI_ADDRESS,
            template("manifests/efs-csi.yaml", EFS_CSI),
            &[],
            vec![input(
                "efs_csi_role_arn",
                "stack.irsa",
                "EfsCsiControllerRoleArn",
            )],
            in_cluster.clone(),
            20,
            300,
        )),
        bundle(
            EFS_STORAGE_ADDRESS,
            template("manifests/efs-storage.yaml", EFS_STORAGE),
            &[],
            vec![input("efs_file_system_id", "stack.efs", "FileSystemId")],
            vec![addr(EFS_CSI_ADDRESS)],
            5,
            300,
        ),
    ];
    let Sources {
        kubeflow,
        training_operator: operator,
    } = sources.clone();
    let mut user_after = vec![addr(EFS_STORAGE_ADDRESS)];
    if let Some(source) = kubeflow {
        out.push(on_nodes(bundle(
            KUBEFLOW_ADDRESS,
            source,
            &[],
            vec![],
            in_cluster.clone(),
            120,
            900,
        )));
        user_after.push(addr(KUBEFLOW_ADDRESS));
    }
    if let Some(source) = operator {
        let mut after = in_cluster.clone();
        if sources.kubeflow.is_some() {
            after.push(addr(KUBEFLOW_ADDRESS));
        }
        let mut operator = on_nodes(bundle(
            TRAINING_OPERATOR_ADDRESS,
            source,
            &[],
            vec![],
            after,
            30,
            600,
        ));
        operator.serves = vec![ServedKind {
            api_version: "kubeflow.org/v1",
            kind: "PyTorchJob",
        }];
        // Its one dependant, the user namespace, applies no PyTorchJob and
        // nothing in the operator's namespaces: a replacement takes users'
        // jobs with the CRD (listed in the plan, refused while they run) and
        // leaves the namespace working.
        operator.replaceable_under_dependants = true;
        out.push(operator);
        // Users' PyTorchJobs live in the user namespace: a destroy deletes
        // them first with it ([`crate::k8s::delete`]) while their controller
        // still runs (case C6), and their pods with them, which keep the
        // namespace's EFS claim. A job held by a finalizer stops the destroy
        // there instead of a second wait for the same job when the
        // operator's CRD goes.
        user_after.push(addr(TRAINING_OPERATOR_ADDRESS));
    }
    let editor = if sources.kubeflow.is_some() {
        // The ClusterRole Kubeflow's profile controller binds default-editor to.
        "kubeflow-edit"
    } else {
        "edit"
    };
    out.push(bundle(
        USER_NAMESPACE_ADDRESS,
        template("manifests/user-namespace.yaml", USER_NAMESPACE),
        &[
            ("user_namespace", config.options.user_namespace.clone()),
            ("editor_cluster_role", editor.to_string()),
        ],
        vec![input(
            "pipelines_role_arn",
            "stack.irsa",
            "PipelinesRoleArn",
        )],
        user_after,
        5,
        300,
    ));
    // One owner per object: two bundles applying the same object would
    // overwrite each other, and destroying either would delete it.
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for b in &out {
        let source = b.source_label();
        for object in b.objects() {
            if let Some(first) = seen.insert(object.clone(), source.clone()) {
                return Err(SourceError::Overlap {
                    object,
                    first,
                    second: source,
                });
            }
        }
    }
    let namespaces: Vec<(Address, Vec<(String, String)>)> = out
        .iter()
        .map(|b| (b.address.clone(), b.namespaces()))
        .collect();
    for b in &mut out {
        b.used_elsewhere = namespaces
            .iter()
            .filter(|(address, _)| *address != b.address)
            .flat_map(|(address, list)| {
                list.iter()
                    .map(move |(ns, object)| (ns.clone(), format!("{address} ({object})")))
            })
            .collect();
    }
    Ok(out)
}

/// The vanilla profile's resources, for the state of lineage `lineage`;
/// the Kubernetes bundles authenticate with EKS tokens made from `aws`'s
/// credentials ([`crate::k8s::auth`]); the `[kubeflow]`
/// bundles are those of `sources` (read from this config by
/// [`read_sources`], or empty for a destroy, which reads none).
///
/// # Errors
/// [`SourceError::Overlap`] when two bundles hold the same object.
pub fn build(
    config: &Config,
    aws: &SdkConfig,
    lineage: uuid::Uuid,
    sources: &Sources,
) -> Result<Built, SourceError> {
    let mut resources: Vec<Arc<dyn Resource>> = stacks(config, aws, lineage)
        .into_iter()
        .map(|s| Arc::new(s) as Arc<dyn Resource>)
        .collect();
    resources.push(Arc::new(cluster(config, aws, lineage)));
    for (group, settings) in &config.node_groups {
        resources.push(Arc::new(nodegroup(config, aws, lineage, group, settings)));
    }
    for (name, entry) in &config.access_entries {
        resources.push(Arc::new(access_entry(config, aws, lineage, name, entry)));
    }
    resources.push(Arc::new(oidc(config, aws, lineage)));
    for b in bundles(config, aws, lineage, sources)? {
        resources.push(Arc::new(b));
    }
    Ok(Built {
        resources,
        provider: Arc::new(AwsProvider {
            config: config.clone(),
            aws: aws.clone(),
            lineage,
        }),
    })
}

/// The Kubernetes bundles this deployment applied that `state` does not
/// hold, as `(k8s.<bundle>, ApplySet id)` sorted by address: the ApplySet
/// parents kfaws made in the inventory namespace of the deployment's EKS
/// cluster named `<applyset name>-<bundle>`, for the bundles of this profile
/// (the namespace may hold other deployments' parents), whose address the
/// state does not hold in any status (a bundle whose create failed is in the
/// state without an id, its parent already written). Unlike each bundle's
/// import lookup this finds the bundles of any config, also `[kubeflow]`
/// ones, whose manifests a destroy does not read. No cluster, or one that is
/// not ACTIVE or UPDATING (as the import lookup): none.
///
/// # Errors
/// [`crate::resource::ResourceError`] when DescribeCluster fails, the
/// cluster is not this state's, or the List call fails.
pub async fn bundles_outside_state(
    config: &Config,
    aws: &SdkConfig,
    state: &State,
) -> Result<Vec<(Address, String)>, crate::resource::ResourceError> {
    let connector = connector(config, aws, state.lineage);
    let Some(client) = connector.connect_if_ready().await? else {
        return Ok(Vec::new());
    };
    let namespace = crate::k8s::apply::ApplyOptions::default().inventory_namespace;
    let sets = crate::k8s::applyset::ApplySet::list_in(&client, &namespace)
        .await
        .map_err(|e| {
            crate::resource::ResourceError::msg(format!(
                "reading from the API server of EKS cluster {}: {e}",
                connector.cluster_name
            ))
        })?;
    let recorded: std::collections::BTreeSet<&str> = state
        .resources
        .values()
        .filter(|r| r.kind == crate::k8s::resource::KIND)
        .filter_map(|r| r.physical_id.as_deref())
        .collect();
    let prefix = format!("{}-", config.applyset_name());
    let mut found: Vec<(Address, String)> = sets
        .into_iter()
        .filter(|set| !recorded.contains(set.id.as_str()))
        .filter_map(|set| {
            let bundle = set.name.strip_prefix(&prefix)?;
            let address = BUNDLE_ADDRESSES
                .into_iter()
                .find(|a| a.strip_prefix("k8s.") == Some(bundle))?;
            let address = addr(address);
            (!state.resources.contains_key(&address)).then_some((address, set.id))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// A handle for a recorded Kubernetes bundle that left the config (its
/// config field was removed): enough to delete its ApplySet.
pub fn bundle_from_state(
    config: &Config,
    aws: &SdkConfig,
    lineage: uuid::Uuid,
    address: &Address,
    recorded: &ResourceState,
) -> Option<Arc<dyn Resource>> {
    let bundle = recorded.spec.get("bundle")?.as_str()?.to_string();
    Some(Arc::new(ManifestsResource {
        address: address.clone(),
        bundle,
        source: ManifestSource::Template {
            file: "(recorded)",
            text: "",
        },
        values: BTreeMap::new(),
        inputs: vec![],
        after: recorded.dependencies.clone(),
        ordered_after: Vec::new(),
        serves: vec![],
        connector: connector(config, aws, lineage),
        cluster: addr(CLUSTER),
        estimate: Duration::from_secs(5),
        timeout: Duration::from_secs(600),
        used_elsewhere: BTreeMap::new(),
        replaceable_under_dependants: false,
    }))
}

/// A handle for a recorded EKS cluster, node group or OIDC provider: the
/// current definition, with the recorded names where they differ (a node
/// group that left the config, or a config renamed since).
pub fn eks_from_state(
    config: &Config,
    aws: &SdkConfig,
    lineage: uuid::Uuid,
    address: &Address,
    recorded: &ResourceState,
) -> Option<Arc<dyn Resource>> {
    let recorded_str = |k: &str| recorded.spec.get(k).and_then(|v| v.as_str());
    match recorded.kind.as_str() {
        "aws_eks_cluster" => {
            let mut c = cluster(config, aws, lineage);
            c.address = address.clone();
            if let Some(name) = recorded_str("name") {
                c.name = name.to_string();
            }
            Some(Arc::new(c))
        }
        "aws_eks_nodegroup" => {
            let group = address.as_str().strip_prefix(NODEGROUP_PREFIX)?;
            let settings = config.node_groups.get(group).cloned().unwrap_or_default();
            let mut n = nodegroup(config, aws, lineage, group, &settings);
            n.address = address.clone();
            if let Some(name) = recorded_str("nodegroup_name") {
                n.nodegroup_name = name.to_string();
            }
            Some(Arc::new(n))
        }
        "aws_eks_access_entry" => {
            let name = address.as_str().strip_prefix(ACCESS_ENTRY_PREFIX)?;
            let mut e = match config.access_entries.get(name) {
                Some(entry) => access_entry(config, aws, lineage, name, entry),
                // Left the config: only its delete is needed, by the recorded principal.
                None => access_entry(
                    config,
                    aws,
                    lineage,
                    name,
                    &AccessEntry {
                        principal_arn: recorded_str("principal_arn")?.to_string(),
                        policy: crate::config::AccessPolicy::View,
                        namespaces: None,
                    },
                ),
            };
            e.address = address.clone();
            if let Some(cluster) = recorded_str("cluster_name") {
                e.cluster_name = cluster.to_string();
            }
            if let Some(principal) = recorded_str("principal_arn") {
                e.principal_arn = principal.to_string();
            }
            Some(Arc::new(e))
        }
        "aws_iam_oidc_provider" => {
            let mut o = oidc(config, aws, lineage);
            o.address = address.clone();
            Some(Arc::new(o))
        }
        _ => None,
    }
}

/// A handle for a recorded stack: the current definition at that address,
/// or, for an address this build no longer defines, the recorded name.
pub fn stack_from_state(
    config: &Config,
    aws: &SdkConfig,
    lineage: uuid::Uuid,
    address: &Address,
    recorded: &ResourceState,
) -> Option<Arc<dyn Resource>> {
    let mut stack = stacks(config, aws, lineage)
        .into_iter()
        .find(|s| &s.address == address)
        .unwrap_or_else(|| StackResource {
            address: address.clone(),
            stack_name: String::new(),
            deployment: config.name.clone(),
            lineage: lineage.to_string(),
            template: "",
            parameters: BTreeMap::new(),
            inputs: vec![],
            estimate: Duration::from_secs(60),
            client: crate::aws::client::<aws_sdk_cloudformation::Client>(aws),
            guards: vec![],
        });
    if let Some(name) = recorded.spec.get("stack_name").and_then(|v| v.as_str()) {
        stack.stack_name = name.to_string();
    }
    Some(Arc::new(stack))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_output_is_declared_by_its_stack_template() {
        for o in OUTPUTS {
            let template = match o.address {
                "stack.network" => NETWORK,
                "stack.iam" => IAM,
                "stack.storage" => STORAGE,
                "stack.efs" => EFS,
                "stack.irsa" => IRSA,
                CLUSTER => continue,
                other => panic!("{other}"),
            };
            let outputs = &template[template.find("\nOutputs:").expect("has outputs")..];
            assert!(
                outputs.contains(&format!("\n  {}:", o.key)),
                "{} not in {}",
                o.key,
                o.address
            );
        }
    }

    #[test]
    fn subnets_are_four_equal_quarters_of_the_vpc() {
        assert_eq!(
            subnet_cidrs("10.0.0.0/16"),
            [
                "10.0.0.0/18",
                "10.0.64.0/18",
                "10.0.128.0/18",
                "10.0.192.0/18"
            ]
        );
        assert_eq!(
            subnet_cidrs("192.168.4.0/24"),
            [
                "192.168.4.0/26",
                "192.168.4.64/26",
                "192.168.4.128/26",
                "192.168.4.192/26"
            ]
        );
    }

    fn config(extra: &str) -> Config {
        crate::config::ConfigFile::parse(
            std::path::Path::new("k"),
            &format!("name = \"ml\"\nregion = \"us-east-1\"\n{extra}"),
        )
        .unwrap()
        .resolve(&Default::default(), None)
        .unwrap()
    }

    #[test]
    fn a_removed_node_group_names_its_table_and_the_default_group_says_why_it_went() {
        let a = |s: &str| Address::new(s).unwrap();
        let gpu_only = config("[node_groups.gpu]\ninstance_type = \"g5.xlarge\"");
        let why = why_absent(&gpu_only, &a("eks.nodegroup.cpu")).unwrap();
        assert!(
            why.starts_with("kfaws.toml has no [node_groups.cpu]")
                && why.contains("made only while there is no [node_groups] table")
                && why.contains("add [node_groups.cpu] to keep it"),
            "{why}"
        );
        let why = why_absent(&config(""), &a("eks.nodegroup.gpu")).unwrap();
        assert_eq!(why, "kfaws.toml has no [node_groups.gpu]");
        assert_eq!(why_absent(&gpu_only, &a("eks.nodegroup.gpu")), None);
        assert_eq!(why_absent(&config(""), &a("eks.nodegroup.cpu")), None);
        assert_eq!(why_absent(&gpu_only, &a("stack.iam")), None);
    }

    #[test]
    fn the_kubeflow_bundles_name_the_setting_that_adds_them() {
        let a = |s: &str| Address::new(s).unwrap();
        let none = config("");
        assert_eq!(
            why_absent(&none, &a(KUBEFLOW_ADDRESS)).as_deref(),
            Some("kubeflow.manifests is not set in kfaws.toml")
        );
        assert_eq!(
            why_absent(&none, &a(TRAINING_OPERATOR_ADDRESS)).as_deref(),
            Some("kubeflow.training_operator is not set in kfaws.toml")
        );
        let mut both = config("");
        both.kubeflow.manifests = Some("k.yaml".into());
        both.kubeflow.training_operator = Some("t.yaml".into());
        assert_eq!(why_absent(&both, &a(KUBEFLOW_ADDRESS)), None);
        assert_eq!(why_absent(&both, &a(TRAINING_OPERATOR_ADDRESS)), None);
    }

    /// The graph of `config`, its manifests read as a plan reads them.
    fn from_config(config: &Config) -> Result<Built, SourceError> {
        build(config, &aws(), uuid::Uuid::nil(), &read_sources(config)?)
    }

    fn aws() -> SdkConfig {
        SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build()
    }

    #[tokio::test]
    async fn graph_follows_design_section_3() {
        let built = from_config(&config("")).unwrap();
        let deps: Vec<(String, Vec<String>)> = built
            .resources
            .iter()
            .map(|r| {
                (
                    r.address().to_string(),
                    r.dependencies().iter().map(ToString::to_string).collect(),
                )
            })
            .collect();
        let own = |a: &str, d: &[&str]| (a.to_string(), d.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            deps,
            [
                own("stack.network", &[]),
                own("stack.iam", &[]),
                own("stack.storage", &[]),
                own("stack.efs", &["stack.network"]),
                own("stack.irsa", &["iam.oidc"]),
                own("eks.cluster", &["stack.iam", "stack.network"]),
                own(
                    "eks.nodegroup.cpu",
                    &["eks.cluster", "stack.iam", "stack.network"]
                ),
                own("iam.oidc", &["eks.cluster"]),
                own(
                    "k8s.efs-csi",
                    &["eks.cluster", "eks.nodegroup.cpu", "stack.irsa"]
                ),
                own("k8s.efs-storage", &["k8s.efs-csi", "stack.efs"]),
                own("k8s.user-namespace", &["k8s.efs-storage", "stack.irsa"]),
            ]
        );
        let spec = built.resources[0].spec();
        assert_eq!(spec["stack_name"], "kfaws-ml-network");
        assert_eq!(spec["parameters"]["PrivateSubnet1Cidr"], "10.0.128.0/18");
        let irsa = built.resources[4].spec();
        assert_eq!(
            irsa["parameters"]["EfsCsiRoleName"],
            "kfaws-ml-us-east-1-irsa-efs-csi-controller"
        );
        let cluster = built.resources[5].spec();
        assert_eq!(cluster["kubernetes_version"], "1.33");
        assert_eq!(cluster["role_name"], "kfaws-ml-us-east-1-eks-cluster");
        let group = built.resources[6].spec();
        assert_eq!(group["nodegroup_name"], "ml-cpu");
        assert_eq!(group["metadata_options"]["http_tokens"], "required");
        assert_eq!(group["disk_size_gib"], 50);
        let storage = built.resources[9].spec();
        assert_eq!(storage["bundle"], "kfaws-ml-efs-storage");
        assert_eq!(
            storage["objects"],
            serde_json::json!([
                "PersistentVolume efs-pv",
                "StorageClass.storage.k8s.io efs-sc"
            ])
        );
    }

    #[test]
    fn the_embedded_manifests_render_and_keep_the_efs_driver_rules() {
        use crate::k8s::resource::render;
        let values = BTreeMap::from([
            (
                "efs_csi_role_arn".to_string(),
                "arn:aws:iam::123456789012:role/r".to_string(),
            ),
            (
                "efs_file_system_id".to_string(),
                "fs-0123456789abcdef0".to_string(),
            ),
            (
                "pipelines_role_arn".to_string(),
                "arn:aws:iam::123456789012:role/p".to_string(),
            ),
            ("user_namespace".to_string(), "team-a".to_string()),
            ("editor_cluster_role".to_string(), "edit".to_string()),
        ]);
        for (file, text) in [
            ("efs-csi.yaml", EFS_CSI),
            ("efs-storage.yaml", EFS_STORAGE),
            ("user-namespace.yaml", USER_NAMESPACE),
        ] {
            let rendered = render(text, &values).unwrap();
            let bundle = crate::k8s::Bundle::from_sources("t", [(file.into(), rendered)])
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(crate::k8s::efs::check_bundle(&bundle).is_empty(), "{file}");
        }
        let sa = render(EFS_CSI, &values).unwrap();
        assert!(sa.contains("eks.amazonaws.com/role-arn: \"arn:aws:iam::123456789012:role/r\""));
    }

    #[tokio::test]
    async fn kubeflow_manifests_join_the_graph_when_configured_and_are_checked_when_built() {
        let dir = tempfile::tempdir().unwrap();
        let kf = dir.path().join("kubeflow.yaml");
        std::fs::write(
            &kf,
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: kubeflow}\n",
        )
        .unwrap();
        let op = dir.path().join("operator");
        std::fs::create_dir(&op).unwrap();
        std::fs::write(
            op.join("a.yaml"),
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: training}\n",
        )
        .unwrap();
        let extra = format!(
            "[kubeflow]\nmanifests = {:?}\ntraining_operator = {:?}\n",
            kf.display().to_string(),
            op.display().to_string()
        );
        let built = from_config(&config(&extra)).unwrap();
        let deps = |a: &str| {
            built
                .resources
                .iter()
                .find(|r| r.address().as_str() == a)
                .unwrap_or_else(|| panic!("{a} in the graph"))
                .dependencies()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(deps("k8s.kubeflow"), ["eks.cluster", "eks.nodegroup.cpu"]);
        assert_eq!(
            deps("k8s.training-operator"),
            ["eks.cluster", "eks.nodegroup.cpu", "k8s.kubeflow"]
        );
        assert_eq!(
            deps("k8s.user-namespace"),
            [
                "k8s.efs-storage",
                "k8s.kubeflow",
                "k8s.training-operator",
                "stack.irsa"
            ]
        );
        // C15 in the user's manifests fails the build, naming the field.
        std::fs::write(
            &kf,
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: efs-sc}\n\
             provisioner: efs.csi.aws.com\nparameters: {provisioningMode: efs-ap, \
             fileSystemId: fs-0123456789abcdef0}\n",
        )
        .unwrap();
        let err = from_config(&config(&extra))
            .err()
            .expect("C15 is an error")
            .to_string();
        assert!(
            err.starts_with("kubeflow.manifests: StorageClass efs-sc"),
            "{err}"
        );
        assert!(err.contains("directoryPerms"), "{err}");
        // Several broken rules: counted, one per line.
        let class = |name: &str| {
            format!(
                "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {name}}}\n\
                 provisioner: efs.csi.aws.com\nparameters: {{provisioningMode: efs-ap, \
                 fileSystemId: fs-0123456789abcdef0}}\n"
            )
        };
        std::fs::write(&kf, format!("{}---\n{}", class("a"), class("b"))).unwrap();
        let err = from_config(&config(&extra))
            .err()
            .expect("C15 is an error")
            .to_string();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines[0], "kubeflow.manifests: 2 problems:", "{err}");
        assert!(
            lines[1].starts_with("  - StorageClass a (")
                && lines[2].starts_with("  - StorageClass b ("),
            "{err}"
        );

        // A namespace the API server never deletes.
        std::fs::write(
            &kf,
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n",
        )
        .unwrap();
        let err = from_config(&config(&extra))
            .err()
            .expect("an undeletable namespace is an error")
            .to_string();
        assert!(
            err.starts_with("kubeflow.manifests: Namespace default (")
                && err.contains("could never be destroyed"),
            "{err}"
        );

        // An object of kfaws's own bundles (StorageClass efs-sc) in the user's.
        std::fs::write(
            &kf,
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: efs-sc}\n\
             provisioner: efs.csi.aws.com\nparameters: {provisioningMode: efs-ap, \
             fileSystemId: fs-0123456789abcdef0, directoryPerms: \"700\"}\n",
        )
        .unwrap();
        let err = from_config(&config(&extra))
            .err()
            .expect("an object in two bundles is an error")
            .to_string();
        assert!(
            err.starts_with(
                "StorageClass.storage.k8s.io efs-sc is in both manifests/efs-storage.yaml and"
            ),
            "{err}"
        );

        // Both sources broken: one run names each.
        std::fs::write(
            &kf,
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n",
        )
        .unwrap();
        std::fs::remove_file(op.join("a.yaml")).unwrap();
        let err = from_config(&config(&extra))
            .err()
            .expect("two broken sources are an error")
            .to_string();
        let lines: Vec<&str> = err.lines().collect();
        assert!(
            lines[0].starts_with("kubeflow.manifests: Namespace default (")
                && lines[1].starts_with("kubeflow.training_operator: ")
                && lines[1].contains(&op.display().to_string()),
            "{err}"
        );
    }

    #[tokio::test]
    async fn every_node_group_is_a_node_and_a_removed_one_can_still_be_deleted() {
        let groups = "[node_groups.cpu]\n[node_groups.gpu]\ninstance_type = \"g5.xlarge\"";
        let built = from_config(&config(groups)).unwrap();
        let addresses: Vec<String> = built
            .resources
            .iter()
            .map(|r| r.address().to_string())
            .filter(|a| a.starts_with(NODEGROUP_PREFIX))
            .collect();
        assert_eq!(addresses, ["eks.nodegroup.cpu", "eks.nodegroup.gpu"]);
        // The gpu group left the config; its state entry still names it.
        let gpu = built
            .resources
            .iter()
            .find(|r| r.address().as_str() == "eks.nodegroup.gpu")
            .unwrap();
        let recorded = ResourceState {
            kind: gpu.kind().to_string(),
            status: crate::state::Status::Created,
            physical_id: None,
            idempotency_token: None,
            spec_hash: String::new(),
            spec: gpu.spec(),
            outputs: Default::default(),
            dependencies: gpu.dependencies(),
            updating: None,
            inputs_hash: None,
            updated_at: chrono::Utc::now(),
        };
        let provider = from_config(&config("")).unwrap().provider;
        let handle = provider
            .handle_for(gpu.address(), &recorded)
            .expect("node groups are known to the provider");
        assert_eq!(handle.kind(), "aws_eks_nodegroup");
        assert_eq!(handle.spec()["nodegroup_name"], "ml-gpu");
    }

    #[tokio::test]
    async fn every_access_entry_is_a_node_after_the_cluster_and_a_removed_one_can_still_be_deleted()
    {
        let entries = "[access_entries.platform]\n\
                       principal_arn = \"arn:aws:iam::123456789012:role/Platform\"\n\
                       policy = \"view\"\nnamespaces = [\"team-b\", \"team-a\"]";
        let built = from_config(&config(entries)).unwrap();
        let entry = built
            .resources
            .iter()
            .find(|r| r.address().as_str() == "eks.access-entry.platform")
            .expect("the access entry is a node");
        assert_eq!(entry.kind(), "aws_eks_access_entry");
        assert_eq!(entry.dependencies(), [addr(CLUSTER)]);
        // Every bundle follows it, so a destroy deletes it only after them.
        let csi = built
            .resources
            .iter()
            .find(|r| r.address().as_str() == EFS_CSI_ADDRESS)
            .unwrap();
        assert!(
            csi.dependencies().contains(entry.address()),
            "{:?}",
            csi.dependencies()
        );
        assert_eq!(
            entry.spec()["access_policies"],
            serde_json::json!({
                "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy":
                    {"type": "namespace", "namespaces": ["team-a", "team-b"]}
            })
        );
        let recorded = ResourceState {
            kind: entry.kind().to_string(),
            status: crate::state::Status::Created,
            physical_id: None,
            idempotency_token: None,
            spec_hash: String::new(),
            spec: entry.spec(),
            outputs: Default::default(),
            dependencies: entry.dependencies(),
            updating: None,
            inputs_hash: None,
            updated_at: chrono::Utc::now(),
        };
        let provider = from_config(&config("")).unwrap().provider;
        assert_eq!(
            provider.why_absent(entry.address()).as_deref(),
            Some("kfaws.toml has no [access_entries.platform]")
        );
        let handle = provider
            .handle_for(entry.address(), &recorded)
            .expect("access entries are known to the provider");
        assert_eq!(handle.kind(), "aws_eks_access_entry");
        assert_eq!(
            handle.spec()["principal_arn"],
            "arn:aws:iam::123456789012:role/Platform"
        );
    }

    /// An unset `options.sagemaker_role_policy` keeps what `stack.iam` was applied with (a
    /// deployment applied while `full` was the default is not narrowed by an upgrade of
    /// kfaws), else is `scoped`; a set one wins.
    #[tokio::test]
    async fn an_unset_sagemaker_role_policy_keeps_the_recorded_one_else_is_scoped() {
        let mut state = State::new("ml");
        let fresh = prepare(&config(""), &aws(), &state, true).await.unwrap();
        assert_eq!(
            fresh.options.sagemaker_role_policy,
            Some(SageMakerRolePolicy::Scoped)
        );
        state.resources.insert(
            addr("stack.iam"),
            ResourceState {
                kind: "aws_cloudformation_stack".into(),
                status: crate::state::Status::Created,
                physical_id: None,
                idempotency_token: None,
                spec_hash: String::new(),
                spec: serde_json::json!({"parameters": {"SageMakerRolePolicy": "full"}}),
                outputs: Default::default(),
                dependencies: vec![],
                updating: None,
                inputs_hash: None,
                updated_at: chrono::Utc::now(),
            },
        );
        let kept = prepare(&config(""), &aws(), &state, true).await.unwrap();
        assert_eq!(
            kept.options.sagemaker_role_policy,
            Some(SageMakerRolePolicy::Full)
        );
        let set = prepare(
            &config("[options]\nsagemaker_role_policy = \"scoped\""),
            &aws(),
            &state,
            true,
        )
        .await
        .unwrap();
        assert_eq!(
            set.options.sagemaker_role_policy,
            Some(SageMakerRolePolicy::Scoped)
        );
    }

    /// `options.authentication_mode = "api"` adds the mode to the cluster's spec, the default
    /// adds nothing (a deployment applied before the option plans no change); once the state
    /// records the cluster applied with `api`, it stays `api` whatever the config says (EKS
    /// cannot switch back), so taking the option out plans no change either.
    #[tokio::test]
    async fn authentication_mode_api_is_in_the_cluster_spec_and_stays_once_applied() {
        let spec = |config: &Config| {
            let built = from_config(config).unwrap();
            let cluster = built
                .resources
                .iter()
                .find(|r| r.address().as_str() == CLUSTER)
                .unwrap()
                .spec();
            cluster.get(MODE_FIELD).cloned()
        };
        let api = config("[options]\nauthentication_mode = \"api\"");
        assert_eq!(spec(&api), Some(serde_json::json!("API")));
        assert_eq!(spec(&config("")), None);
        assert_eq!(
            spec(&config(
                "[options]\nauthentication_mode = \"api-and-config-map\""
            )),
            None
        );

        let mut state = State::new("ml");
        let fresh = prepare(&config(""), &aws(), &state, true).await.unwrap();
        assert_eq!(
            fresh.options.authentication_mode,
            AuthenticationMode::ApiAndConfigMap
        );
        let applied = from_config(&api).unwrap();
        let cluster = applied
            .resources
            .iter()
            .find(|r| r.address().as_str() == CLUSTER)
            .unwrap();
        state.resources.insert(
            addr(CLUSTER),
            ResourceState {
                kind: cluster.kind().into(),
                status: crate::state::Status::Created,
                physical_id: None,
                idempotency_token: None,
                spec_hash: String::new(),
                spec: cluster.spec(),
                outputs: Default::default(),
                dependencies: vec![],
                updating: None,
                inputs_hash: None,
                updated_at: chrono::Utc::now(),
            },
        );
        for left in [
            "",
            "[options]\nauthentication_mode = \"api-and-config-map\"",
        ] {
            let kept = prepare(&config(left), &aws(), &state, true).await.unwrap();
            assert_eq!(
                kept.options.authentication_mode,
                AuthenticationMode::Api,
                "{left}"
            );
            assert_eq!(spec(&kept), Some(serde_json::json!("API")), "{left}");
        }
        // An apply that sent the switch and stopped (interrupted, failed) records it only as
        // the unfinished update: kept all the same.
        let entry = state.resources.get_mut(&addr(CLUSTER)).unwrap();
        entry.updating = Some(entry.spec.clone());
        entry.spec.as_object_mut().unwrap().remove(MODE_FIELD);
        let kept = prepare(&config(""), &aws(), &state, true).await.unwrap();
        assert_eq!(kept.options.authentication_mode, AuthenticationMode::Api);
    }
}
