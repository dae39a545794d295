//! The vanilla profile (DESIGN.md §3): network, IAM and storage stacks.
//!
//! This build provisions the AWS foundation: `stack.network`, `stack.iam`
//! and `stack.storage`. The EKS cluster and node group, the OIDC provider,
//! the IRSA stack and the Kubernetes components join the graph as their
//! resources are implemented.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;

use super::{AwsProvider, Built};
use crate::address::Address;
use crate::aws::stack::{InputParameter, StackResource};
use crate::config::{Config, SageMakerRolePolicy};
use crate::resource::Resource;
use crate::state::ResourceState;

const NETWORK: &str = include_str!("../../stacks/network.yaml");
const IAM: &str = include_str!("../../stacks/iam.yaml");
const STORAGE: &str = include_str!("../../stacks/storage.yaml");

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
    out("efs_file_system_id", "stack.storage", "FileSystemId"),
    out("bucket_name", "stack.storage", "BucketName"),
    out("sagemaker_role_arn", "stack.iam", "SageMakerRoleArn"),
    out("cluster_role_arn", "stack.iam", "ClusterRoleArn"),
    out("node_role_arn", "stack.iam", "NodeRoleArn"),
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

fn stacks(config: &Config, aws: &SdkConfig, lineage: uuid::Uuid) -> Vec<StackResource> {
    let client = aws_sdk_cloudformation::Client::new(aws);
    let [pub1, pub2, priv1, priv2] = subnet_cidrs(&config.options.vpc_cidr);
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
        }
    };
    let params = |pairs: &[(&str, String)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    let network = addr("stack.network");
    let from_network = |parameter, output| InputParameter {
        parameter,
        from: network.clone(),
        output,
    };
    vec![
        // NAT gateways take minutes to become available.
        stack(
            "network",
            NETWORK,
            240,
            params(&[
                ("ClusterName", config.name.clone()),
                ("VpcCidr", config.options.vpc_cidr.clone()),
                ("PublicSubnet1Cidr", pub1),
                ("PublicSubnet2Cidr", pub2),
                ("PrivateSubnet1Cidr", priv1),
                ("PrivateSubnet2Cidr", priv2),
            ]),
            vec![],
        ),
        stack(
            "iam",
            IAM,
            60,
            params(&[
                ("ClusterRoleName", config.role_name("eks-cluster")),
                ("NodeRoleName", config.role_name("eks-node")),
                (
                    "SageMakerRoleName",
                    config.options.sagemaker_role_name.clone(),
                ),
                (
                    "SageMakerRolePolicy",
                    match config.options.sagemaker_role_policy {
                        SageMakerRolePolicy::Full => "full".into(),
                        SageMakerRolePolicy::Scoped => "scoped".into(),
                    },
                ),
                ("ArtifactBucket", config.bucket_name()),
            ]),
            vec![],
        ),
        stack(
            "storage",
            STORAGE,
            120,
            params(&[
                ("ClusterName", config.name.clone()),
                ("BucketName", config.bucket_name()),
            ]),
            vec![
                from_network("PrivateSubnet1", "PrivateSubnet1"),
                from_network("PrivateSubnet2", "PrivateSubnet2"),
                from_network("NfsSecurityGroupId", "NfsSecurityGroupId"),
            ],
        ),
    ]
}

/// The vanilla profile's resources, for the state of lineage `lineage`.
pub fn build(config: &Config, aws: &SdkConfig, lineage: uuid::Uuid) -> Built {
    let resources = stacks(config, aws, lineage)
        .into_iter()
        .map(|s| Arc::new(s) as Arc<dyn Resource>)
        .collect();
    Built {
        resources,
        provider: Arc::new(AwsProvider {
            config: config.clone(),
            aws: aws.clone(),
            lineage,
        }),
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
            client: aws_sdk_cloudformation::Client::new(aws),
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

    #[tokio::test]
    async fn graph_is_network_iam_then_storage_on_network() {
        let config = crate::config::ConfigFile::parse(
            std::path::Path::new("k"),
            "name = \"ml\"\nregion = \"us-east-1\"",
        )
        .unwrap()
        .resolve(&Default::default(), None)
        .unwrap();
        let aws = SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        let built = build(&config, &aws, uuid::Uuid::nil());
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
        assert_eq!(
            deps,
            [
                ("stack.network".to_string(), vec![]),
                ("stack.iam".to_string(), vec![]),
                (
                    "stack.storage".to_string(),
                    vec!["stack.network".to_string()]
                ),
            ]
        );
        let spec = built.resources[0].spec();
        assert_eq!(spec["stack_name"], "kfaws-ml-network");
        assert_eq!(spec["parameters"]["PrivateSubnet1Cidr"], "10.0.128.0/18");
    }
}
