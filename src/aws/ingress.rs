//! The NFS security group's inbound rules as drift: the network stack's
//! template allows only TCP 2049 from the VPC's CIDR into EFS
//! (`stacks/network.yaml`, `NfsSecurityGroup`), and a rule added outside
//! kfaws (all traffic from `0.0.0.0/0`) would never show in CloudFormation's
//! stack description, nor be undone by an update whose template did not
//! change. [`IngressGuard`] reads the rules (DescribeSecurityGroups), reports
//! a difference as drift, and on apply revokes what the template does not
//! declare and authorizes what it does (RevokeSecurityGroupIngress,
//! AuthorizeSecurityGroupIngress; Amazon EC2 API Reference).
//!
//! A rule is written as `PROTOCOL PORTS from SOURCE`: `tcp 2049 from
//! 10.0.0.0/16`, `all from 0.0.0.0/0` (protocol `-1`), `udp 100-200 from
//! sg-0123` (another security group), `tcp 22 from pl-0123` (a prefix list).

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_ec2::types::{IpPermission, IpRange, Ipv6Range, PrefixListId, UserIdGroupPair};
use serde_json::{json, Map, Value};

use super::error_message;
use crate::resource::{Guard, ResourceError};
use crate::state::ResourceState;

/// The spec field holding the NFS security group's inbound rules.
pub const FIELD: &str = "nfs_ingress";

/// The NFS port (RFC 7530 §3.1: NFSv4 over TCP on port 2049, as Amazon EFS
/// serves it).
pub const NFS_PORT: i32 = 2049;

/// Reports and repairs changes to the NFS security group's inbound rules.
pub struct IngressGuard {
    /// The EC2 client.
    pub ec2: aws_sdk_ec2::Client,
    /// The VPC CIDR the template allows NFS from (`options.vpc_cidr`).
    pub vpc_cidr: String,
    /// The stack output naming the group.
    pub output: &'static str,
    /// The CloudFormation client, to find the group of `stack` on repair.
    pub cloudformation: aws_sdk_cloudformation::Client,
    /// The network stack's name.
    pub stack: String,
    /// The group's logical id in the template.
    pub logical_id: &'static str,
}

/// One inbound rule, with a single source, as the API takes it.
fn rules(permission: &IpPermission) -> Vec<(String, IpPermission)> {
    let protocol = permission.ip_protocol().unwrap_or("-1");
    let ports = match (protocol, permission.from_port(), permission.to_port()) {
        ("-1", _, _) => String::new(),
        (_, Some(a), Some(b)) if a == b => format!(" {a}"),
        (_, Some(a), Some(b)) => format!(" {a}-{b}"),
        _ => String::new(),
    };
    let name = if protocol == "-1" { "all" } else { protocol };
    let base = || {
        IpPermission::builder()
            .ip_protocol(protocol)
            .set_from_port(permission.from_port())
            .set_to_port(permission.to_port())
    };
    // One entry per source, whichever kind: a CIDR, an IPv6 CIDR, a
    // security group or a prefix list.
    let cidrs = permission.ip_ranges().iter().filter_map(|r| {
        let cidr = r.cidr_ip()?;
        Some((
            cidr,
            base().ip_ranges(IpRange::builder().cidr_ip(cidr).build()),
        ))
    });
    let cidrs_v6 = permission.ipv6_ranges().iter().filter_map(|r| {
        let cidr = r.cidr_ipv6()?;
        Some((
            cidr,
            base().ipv6_ranges(Ipv6Range::builder().cidr_ipv6(cidr).build()),
        ))
    });
    let groups = permission.user_id_group_pairs().iter().filter_map(|g| {
        let id = g.group_id()?;
        Some((
            id,
            base().user_id_group_pairs(UserIdGroupPair::builder().group_id(id).build()),
        ))
    });
    let prefix_lists = permission.prefix_list_ids().iter().filter_map(|p| {
        let id = p.prefix_list_id()?;
        Some((
            id,
            base().prefix_list_ids(PrefixListId::builder().prefix_list_id(id).build()),
        ))
    });
    cidrs
        .chain(cidrs_v6)
        .chain(groups)
        .chain(prefix_lists)
        .map(|(source, one)| (format!("{name}{ports} from {source}"), one.build()))
        .collect()
}

impl IngressGuard {
    fn desired_rule(&self) -> (String, IpPermission) {
        let rule = IpPermission::builder()
            .ip_protocol("tcp")
            .from_port(NFS_PORT)
            .to_port(NFS_PORT)
            .ip_ranges(IpRange::builder().cidr_ip(&self.vpc_cidr).build())
            .build();
        (format!("tcp {NFS_PORT} from {}", self.vpc_cidr), rule)
    }

    fn group_id(&self, outputs: &BTreeMap<String, Value>) -> Option<String> {
        outputs.get(self.output)?.as_str().map(str::to_string)
    }

    /// The group's inbound rules by name; `None` when the group is gone.
    async fn live(
        &self,
        group: &str,
    ) -> Result<Option<BTreeMap<String, IpPermission>>, ResourceError> {
        let out = match self
            .ec2
            .describe_security_groups()
            .group_ids(group)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                let message = error_message(&e);
                if message.contains("InvalidGroup.NotFound") {
                    return Ok(None);
                }
                return Err(ResourceError::msg(format!(
                    "DescribeSecurityGroups {group}: {message}"
                )));
            }
        };
        Ok(out
            .security_groups()
            .first()
            .map(|g| g.ip_permissions().iter().flat_map(rules).collect()))
    }
}

#[async_trait]
impl Guard for IngressGuard {
    fn desired(&self) -> Map<String, Value> {
        Map::from_iter([(FIELD.to_string(), json!([self.desired_rule().0]))])
    }

    async fn observe(
        &self,
        recorded: &ResourceState,
        _parameters: &BTreeMap<String, String>,
    ) -> Result<Map<String, Value>, ResourceError> {
        let Some(group) = self.group_id(&recorded.outputs) else {
            return Ok(Map::new());
        };
        // A group deleted outside kfaws is the stack's own drift to report;
        // here it has no rules.
        let names: Vec<String> = self
            .live(&group)
            .await?
            .map(|rules| rules.into_keys().collect())
            .unwrap_or_default();
        Ok(Map::from_iter([(FIELD.to_string(), json!(names))]))
    }

    async fn repair(&self, _parameters: &BTreeMap<String, String>) -> Result<(), ResourceError> {
        let found = self
            .cloudformation
            .describe_stack_resource()
            .stack_name(&self.stack)
            .logical_resource_id(self.logical_id)
            .send()
            .await
            .map_err(|e| {
                ResourceError::msg(format!(
                    "DescribeStackResource {} {}: {}",
                    self.stack,
                    self.logical_id,
                    error_message(&e)
                ))
            })?;
        let Some(group) = found
            .stack_resource_detail()
            .and_then(|d| d.physical_resource_id())
            .map(str::to_string)
        else {
            return Ok(());
        };
        let Some(mut live) = self.live(&group).await? else {
            return Ok(());
        };
        let (name, rule) = self.desired_rule();
        let missing = live.remove(&name).is_none();
        let extra: Vec<IpPermission> = live.into_values().collect();
        if !extra.is_empty() {
            self.ec2
                .revoke_security_group_ingress()
                .group_id(&group)
                .set_ip_permissions(Some(extra))
                .send()
                .await
                .map_err(|e| {
                    ResourceError::msg(format!(
                        "RevokeSecurityGroupIngress {group}: {}",
                        error_message(&e)
                    ))
                })?;
        }
        if missing {
            self.ec2
                .authorize_security_group_ingress()
                .group_id(&group)
                .ip_permissions(rule)
                .send()
                .await
                .map_err(|e| {
                    ResourceError::msg(format!(
                        "AuthorizeSecurityGroupIngress {group}: {}",
                        error_message(&e)
                    ))
                })?;
        }
        Ok(())
    }
}
