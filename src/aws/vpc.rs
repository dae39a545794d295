//! What other actors leave in the deployment's VPC, and removing it before
//! the network stack is deleted (case C4).
//!
//! A VPC can be deleted only once nothing uses it (EC2 API Reference,
//! DeleteVpc: "You must detach or delete all gateways and resources that
//! are associated with the VPC before you can delete it"; DeleteSubnet
//! likewise for network interfaces). Kubernetes controllers create such
//! things outside kfaws' stacks: the in-tree service controller makes
//! security groups tagged `kubernetes.io/cluster/<name>: owned`, the AWS Load
//! Balancer Controller ones tagged `elbv2.k8s.aws/cluster: <name>`, the VPC
//! CNI leaves detached (`available`) network interfaces carrying the
//! cluster's security groups. A resource tagged
//! `kubernetes.io/cluster/<name>: shared` is someone else's that the cluster
//! may use: a blocker, never removed. The stack
//! delete would fail on them after an hour of retries, with the cluster
//! already gone.
//!
//! [`survey`] reads the VPC (read-only) and [`classify`] sorts what it finds:
//! - the network stack's own resources: left to CloudFormation;
//! - removable: `available` network interfaces tagged for the cluster or
//!   carrying one of its security groups (the stack's, or one tagged for
//!   the cluster), and security groups tagged for the cluster that no stack
//!   made;
//! - waiting: network interfaces in use by something of the cluster (nodes,
//!   control plane, EFS mount targets in our security group) and the
//!   instances of its managed node groups: they go when the resources
//!   deleted before the network stack go;
//! - blockers: everything else that would stop DeleteVpc (network
//!   interfaces, instances — including nodes of the cluster outside its
//!   managed node groups, such as Karpenter's —, security groups, endpoints, subnets, NAT and
//!   internet gateways, route tables that no stack of the deployment made).
//!
//! The network stack checks at plan time that there are no blockers (so
//! nothing is deleted when one exists), and removes the removable ones
//! right before its delete (after every resource that depended on it is
//! gone), revoking rules of other groups that reference them first
//! (a referenced security group cannot be deleted).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{Filter, IpPermission, UserIdGroupPair};
use aws_sdk_ec2::Client;

use super::error_message;
use super::wait::{wait_until, Backoff, Poll};

/// The tag EKS puts on the instances of a managed node group (Amazon EKS
/// User Guide, "Managed node groups": `eks:cluster-name` and
/// `eks:nodegroup-name` on the node group's resources).
pub const NODEGROUP_TAG: &str = "eks:nodegroup-name";

/// The tag the AWS Load Balancer Controller puts on the security groups it
/// makes, valued with the cluster's name (AWS Load Balancer Controller
/// documentation, "Security Groups for Load Balancers": `elbv2.k8s.aws/cluster`).
pub const LBC_CLUSTER_TAG: &str = "elbv2.k8s.aws/cluster";

/// A network interface, as far as the classification needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eni {
    /// `eni-...`.
    pub id: String,
    /// `available`, `in-use`, ...
    pub status: String,
    /// Its security groups.
    pub groups: Vec<String>,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
    /// Its description (who made it, for the report).
    pub description: String,
    /// The instance it is attached to, if any (`Attachment.InstanceId`).
    pub instance: Option<String>,
}

/// A rule of one security group that names another group.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    /// The group whose rule it is.
    pub from: String,
    /// The referenced group.
    pub to: String,
    /// Egress (true) or ingress rule.
    pub egress: bool,
    /// The permission, narrowed to that one group pair (what a revoke sends).
    pub permission: IpPermission,
}

/// A security group.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// `sg-...`.
    pub id: String,
    /// Its name (`default` for the VPC's default group).
    pub name: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// An instance that is not terminated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// `i-...`.
    pub id: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// What a VPC holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Survey {
    /// The VPC.
    pub vpc_id: String,
    /// Network interfaces.
    pub enis: Vec<Eni>,
    /// Security groups, the default one included.
    pub groups: Vec<Group>,
    /// Rules between security groups of the VPC.
    pub references: Vec<Reference>,
    /// Instances not terminated.
    pub instances: Vec<Instance>,
    /// VPC endpoints not deleted.
    pub endpoints: Vec<String>,
    /// Subnets.
    pub subnets: Vec<String>,
    /// NAT gateways not deleted, with their network interfaces.
    pub nat_gateways: Vec<(String, Vec<String>)>,
    /// Attached internet gateways.
    pub internet_gateways: Vec<String>,
    /// Route tables that are not the main one.
    pub route_tables: Vec<String>,
}

/// Something in the VPC, for a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// What it is (`network interface`, `security group`, ...).
    pub kind: &'static str,
    /// Its id.
    pub id: String,
    /// What is known of it.
    pub detail: String,
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.id)?;
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

/// The classification of a [`Survey`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Findings {
    /// Network interfaces to delete.
    pub remove_enis: Vec<String>,
    /// Security groups to delete.
    pub remove_groups: Vec<String>,
    /// Rules to revoke first: they reference a group to delete.
    pub revoke: Vec<Reference>,
    /// Things that go with resources deleted before the network stack.
    pub waiting: Vec<Item>,
    /// Things kfaws may not remove and that would stop DeleteVpc.
    pub blockers: Vec<Item>,
}

/// The tag Kubernetes' AWS integrations put on what they make for cluster
/// `name`, with the value `owned` (`shared` marks a resource made by someone
/// else that the cluster may use: EKS User Guide, "Subnet requirements").
pub fn cluster_tag(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}

fn tags_of(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_string(),
                t.value().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

fn describe(eni: &Eni) -> String {
    let mut parts = vec![eni.status.clone()];
    if let Some(instance) = &eni.instance {
        // Reported apart only when the instance is not in the survey
        // (terminated): EC2 deletes its primary interface with it.
        parts.push(format!(
            "attached to instance {instance}, terminated or outside the VPC; EC2 deletes a \
             terminated instance's primary interface"
        ));
    }
    if !eni.groups.is_empty() {
        parts.push(format!("security groups {}", eni.groups.join(", ")));
    }
    if !eni.description.is_empty() {
        parts.push(format!("{:?}", eni.description));
    }
    parts.join(", ")
}

/// The file system of an EFS mount target's network interface, read from
/// the description EFS gives it: `EFS mount target for fs-… (fsmt-…)`
/// (the interface is requester-managed, so the description is EFS's).
pub fn mount_target_file_system(eni: &Eni) -> Option<&str> {
    let rest = eni.description.strip_prefix("EFS mount target for ")?;
    let fs = rest.split_whitespace().next()?;
    fs.starts_with("fs-").then_some(fs)
}

/// Sorts a survey. `ours` holds the physical ids of every resource the
/// deployment's stacks made; `cluster` is the EKS cluster name.
pub fn classify(survey: &Survey, ours: &BTreeSet<String>, cluster: &str) -> Findings {
    let tag = cluster_tag(cluster);
    // `owned`, not `shared`: a resource tagged `shared` is someone else's that the cluster may
    // use (EKS User Guide, "Subnet requirements"), and is not ours to delete.
    let tagged = |tags: &BTreeMap<String, String>| {
        let is = |key: &str, value: &str| tags.get(key).map(String::as_str) == Some(value);
        is(&tag, "owned") || is("eks:cluster-name", cluster) || is(LBC_CLUSTER_TAG, cluster)
    };
    let mut f = Findings::default();
    let remove_groups: BTreeSet<String> = survey
        .groups
        .iter()
        .filter(|g| !ours.contains(&g.id) && g.name != "default" && tagged(&g.tags))
        .map(|g| g.id.clone())
        .collect();
    let cluster_groups: BTreeSet<&String> = survey
        .groups
        .iter()
        .filter(|g| ours.contains(&g.id) || remove_groups.contains(&g.id))
        .map(|g| &g.id)
        .collect();
    let stack_enis: BTreeSet<&String> = survey
        .nat_gateways
        .iter()
        .filter(|(id, _)| ours.contains(id))
        .flat_map(|(_, enis)| enis)
        .collect();
    let instances: BTreeSet<&String> = survey.instances.iter().map(|i| &i.id).collect();
    for eni in &survey.enis {
        // An instance's interfaces go with it; the instance is classified below.
        if stack_enis.contains(&eni.id)
            || eni.instance.as_ref().is_some_and(|i| instances.contains(i))
        {
            continue;
        }
        let of_cluster = tagged(&eni.tags) || eni.groups.iter().any(|g| cluster_groups.contains(g));
        // Every group of the interface is already gone. In use, a service
        // keeps it for a resource whose stack lost its group in a failed
        // delete (an EFS mount target of the efs stack): it goes with that
        // resource. Detached (`available`), nothing owns it any more (e.g. one
        // left with the cluster's security group, which went with the
        // cluster): nothing would ever remove it, so it is removed.
        let orphaned = !eni.groups.is_empty()
            && eni
                .groups
                .iter()
                .all(|g| !survey.groups.iter().any(|live| &live.id == g));
        let item = Item {
            kind: "network interface",
            id: eni.id.clone(),
            detail: describe(eni),
        };
        match (of_cluster, eni.status.as_str()) {
            (true, "available") => f.remove_enis.push(eni.id.clone()),
            (false, "available") if orphaned => f.remove_enis.push(eni.id.clone()),
            (true, _) => f.waiting.push(item),
            (false, _) if orphaned => f.waiting.push(item),
            (false, _) => f.blockers.push(item),
        }
    }
    for i in &survey.instances {
        let name = i.tags.get("Name").cloned().unwrap_or_default();
        // EKS refuses DeleteCluster while managed node groups remain, so every
        // node of one (tagged `eks:nodegroup-name` by EKS) is gone before the
        // network. A node tagged for the cluster but of no managed node group
        // (Karpenter, a self-managed group) is terminated by nobody once the
        // cluster is deleted: it blocks, and is named before anything is deleted.
        match (tagged(&i.tags), i.tags.contains_key(NODEGROUP_TAG)) {
            (true, true) => f.waiting.push(Item {
                kind: "instance",
                id: i.id.clone(),
                detail: name,
            }),
            (true, false) => f.blockers.push(Item {
                kind: "instance",
                id: i.id.clone(),
                detail: format!(
                    "{}a node of cluster {cluster} in no EKS managed node group, such as \
                     Karpenter's or a self-managed group's, which deleting the cluster does not \
                     terminate",
                    if name.is_empty() {
                        String::new()
                    } else {
                        format!("{name}: ")
                    }
                ),
            }),
            (false, _) => f.blockers.push(Item {
                kind: "instance",
                id: i.id.clone(),
                detail: name,
            }),
        }
    }
    for g in &survey.groups {
        if g.name == "default" || ours.contains(&g.id) || remove_groups.contains(&g.id) {
            continue;
        }
        f.blockers.push(Item {
            kind: "security group",
            id: g.id.clone(),
            detail: format!("{:?}", g.name),
        });
    }
    f.remove_groups = remove_groups.iter().cloned().collect();
    f.revoke = survey
        .references
        .iter()
        .filter(|r| remove_groups.contains(&r.to) && r.from != r.to)
        .cloned()
        .collect();
    let others = [
        ("VPC endpoint", &survey.endpoints),
        ("subnet", &survey.subnets),
        ("internet gateway", &survey.internet_gateways),
        ("route table", &survey.route_tables),
    ];
    for (kind, ids) in others {
        for id in ids.iter().filter(|id| !ours.contains(*id)) {
            f.blockers.push(Item {
                kind,
                id: id.clone(),
                detail: String::new(),
            });
        }
    }
    for (id, _) in survey
        .nat_gateways
        .iter()
        .filter(|(id, _)| !ours.contains(id))
    {
        f.blockers.push(Item {
            kind: "NAT gateway",
            id: id.clone(),
            detail: String::new(),
        });
    }
    f
}

fn vpc_filter(name: &str, vpc_id: &str) -> Filter {
    Filter::builder().name(name).values(vpc_id).build()
}

/// Reads what VPC `vpc_id` holds (read-only calls; a deleted VPC holds nothing): every page
/// of each listing, filtered by the VPC on the server (`vpc-id`, `attachment.vpc-id` for
/// internet gateways; EC2 API Reference, each Describe* call's filters); endpoints, NAT and
/// internet gateways are checked against the VPC again here.
///
/// # Errors
/// The SDK's message of the first failed call.
pub async fn survey(ec2: &Client, vpc_id: &str) -> Result<Survey, String> {
    let mut s = Survey {
        vpc_id: vpc_id.to_string(),
        ..Survey::default()
    };
    let mut pages = ec2
        .describe_network_interfaces()
        .filters(vpc_filter("vpc-id", vpc_id))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| format!("DescribeNetworkInterfaces: {}", error_message(&e)))?;
        for n in page.network_interfaces() {
            s.enis.push(Eni {
                id: n.network_interface_id().unwrap_or_default().to_string(),
                status: n
                    .status()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                groups: n
                    .groups()
                    .iter()
                    .filter_map(|g| g.group_id().map(str::to_string))
                    .collect(),
                tags: tags_of(n.tag_set()),
                description: n.description().unwrap_or_default().to_string(),
                instance: n
                    .attachment()
                    .and_then(|a| a.instance_id())
                    .map(str::to_string),
            });
        }
    }
    let groups = ec2
        .describe_security_groups()
        .filters(vpc_filter("vpc-id", vpc_id))
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| format!("DescribeSecurityGroups: {}", error_message(&e)))?;
    for g in &groups {
        let id = g.group_id().unwrap_or_default().to_string();
        for (egress, perms) in [
            (false, g.ip_permissions()),
            (true, g.ip_permissions_egress()),
        ] {
            for p in perms {
                for pair in p.user_id_group_pairs() {
                    let Some(to) = pair.group_id() else { continue };
                    s.references.push(Reference {
                        from: id.clone(),
                        to: to.to_string(),
                        egress,
                        permission: IpPermission::builder()
                            .set_ip_protocol(p.ip_protocol().map(str::to_string))
                            .set_from_port(p.from_port())
                            .set_to_port(p.to_port())
                            .user_id_group_pairs(UserIdGroupPair::builder().group_id(to).build())
                            .build(),
                    });
                }
            }
        }
        s.groups.push(Group {
            id,
            name: g.group_name().unwrap_or_default().to_string(),
            tags: tags_of(g.tags()),
        });
    }
    let reservations = ec2
        .describe_instances()
        .filters(vpc_filter("vpc-id", vpc_id))
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| format!("DescribeInstances: {}", error_message(&e)))?;
    for r in &reservations {
        for i in r.instances() {
            let state = i.state().and_then(|s| s.name()).map(|n| n.as_str());
            if state == Some("terminated") {
                continue;
            }
            s.instances.push(Instance {
                id: i.instance_id().unwrap_or_default().to_string(),
                tags: tags_of(i.tags()),
            });
        }
    }
    let endpoints = ec2
        .describe_vpc_endpoints()
        .filters(vpc_filter("vpc-id", vpc_id))
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| format!("DescribeVpcEndpoints: {}", error_message(&e)))?;
    s.endpoints = endpoints
        .iter()
        .filter(|e| e.vpc_id() == Some(vpc_id))
        .filter(|e| {
            !matches!(
                e.state()
                    .map(|s| s.as_str().to_ascii_lowercase())
                    .as_deref(),
                Some("deleted" | "deleting")
            )
        })
        .filter_map(|e| e.vpc_endpoint_id().map(str::to_string))
        .collect();
    let subnets = ec2
        .describe_subnets()
        .filters(vpc_filter("vpc-id", vpc_id))
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| format!("DescribeSubnets: {}", error_message(&e)))?;
    s.subnets = subnets
        .iter()
        .filter_map(|n| n.subnet_id().map(str::to_string))
        .collect();
    let nats = ec2
        .describe_nat_gateways()
        .filter(vpc_filter("vpc-id", vpc_id))
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| format!("DescribeNatGateways: {}", error_message(&e)))?;
    s.nat_gateways = nats
        .iter()
        .filter(|n| n.vpc_id() == Some(vpc_id))
        .filter(|n| n.state().map(|s| s.as_str()) != Some("deleted"))
        .map(|n| {
            (
                n.nat_gateway_id().unwrap_or_default().to_string(),
                n.nat_gateway_addresses()
                    .iter()
                    .filter_map(|a| a.network_interface_id().map(str::to_string))
                    .collect(),
            )
        })
        .collect();
    let igws = ec2
        .describe_internet_gateways()
        .filters(vpc_filter("attachment.vpc-id", vpc_id))
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| format!("DescribeInternetGateways: {}", error_message(&e)))?;
    s.internet_gateways = igws
        .iter()
        .filter(|g| g.attachments().iter().any(|a| a.vpc_id() == Some(vpc_id)))
        .filter_map(|g| g.internet_gateway_id().map(str::to_string))
        .collect();
    let tables = ec2
        .describe_route_tables()
        .filters(vpc_filter("vpc-id", vpc_id))
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| format!("DescribeRouteTables: {}", error_message(&e)))?;
    s.route_tables = tables
        .iter()
        .filter(|t| !t.associations().iter().any(|a| a.main() == Some(true)))
        .filter_map(|t| t.route_table_id().map(str::to_string))
        .collect();
    Ok(s)
}

/// The error for blockers: every one by id, and what to do.
pub fn blocked(vpc_id: &str, blockers: &[Item]) -> String {
    let list: Vec<String> = blockers.iter().map(ToString::to_string).collect();
    format!(
        "VPC {vpc_id} holds {} that this deployment did not create and may not remove, which \
         would stop its deletion (EC2 DeleteVpc: DependencyViolation): {}; delete them or move \
         them out of the VPC, then run destroy again",
        if blockers.len() == 1 {
            "1 resource".to_string()
        } else {
            format!("{} resources", blockers.len())
        },
        list.join("; ")
    )
}

/// Removes what [`classify`] found removable, after waiting (bounded by
/// `deadline`) for the waiting ones to go: revokes references, deletes the
/// network interfaces, then the security groups. Gone already is success.
/// Returns what it removed, as `kind id`.
///
/// # Errors
/// Blockers (by id), a wait that ran out (naming what is still there), or
/// the SDK's message of a failed delete.
pub async fn clean(
    ec2: &Client,
    vpc_id: &str,
    ours: &BTreeSet<String>,
    cluster: &str,
    deadline: Duration,
) -> Result<Vec<String>, String> {
    let findings = wait_until(Backoff::with_deadline(deadline), || async {
        match survey(ec2, vpc_id).await {
            Err(e) => Poll::Failed(e),
            Ok(s) => {
                let f = classify(&s, ours, cluster);
                if !f.blockers.is_empty() {
                    Poll::Failed(blocked(vpc_id, &f.blockers))
                } else if let Some(first) = f.waiting.first() {
                    Poll::Pending(format!("waiting for {first} to go"))
                } else {
                    Poll::Ready(f)
                }
            }
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    let mut removed = Vec::new();
    for r in &findings.revoke {
        let failure = |code: Option<&str>, message: String| (code.map(str::to_string), message);
        let sent = if r.egress {
            ec2.revoke_security_group_egress()
                .group_id(&r.from)
                .ip_permissions(r.permission.clone())
                .send()
                .await
                .map(|_| ())
                .map_err(|e| failure(e.code(), error_message(&e)))
        } else {
            ec2.revoke_security_group_ingress()
                .group_id(&r.from)
                .ip_permissions(r.permission.clone())
                .send()
                .await
                .map(|_| ())
                .map_err(|e| failure(e.code(), error_message(&e)))
        };
        match sent {
            Ok(()) => {}
            Err((code, _)) if gone(code.as_deref()) => {}
            Err((_, message)) => {
                return Err(format!(
                    "revoking the rule of {} that references {}: {message}",
                    r.from, r.to
                ))
            }
        }
    }
    for id in &findings.remove_enis {
        match ec2
            .delete_network_interface()
            .network_interface_id(id)
            .send()
            .await
        {
            Ok(_) => removed.push(format!("network interface {id}")),
            Err(e) if gone(e.code()) => {}
            Err(e) => {
                return Err(format!(
                    "DeleteNetworkInterface {id}: {}",
                    error_message(&e)
                ))
            }
        }
    }
    for id in &findings.remove_groups {
        match ec2.delete_security_group().group_id(id).send().await {
            Ok(_) => removed.push(format!("security group {id}")),
            Err(e) if gone(e.code()) => {}
            Err(e) => return Err(format!("DeleteSecurityGroup {id}: {}", error_message(&e))),
        }
    }
    Ok(removed)
}

fn gone(code: Option<&str>) -> bool {
    matches!(
        code,
        Some(
            "InvalidNetworkInterfaceID.NotFound"
                | "InvalidGroup.NotFound"
                | "InvalidPermission.NotFound"
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn eni(id: &str, status: &str, groups: &[&str], t: &[(&str, &str)]) -> Eni {
        Eni {
            id: id.into(),
            status: status.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            tags: tags(t),
            description: String::new(),
            instance: None,
        }
    }

    fn group(id: &str, name: &str, t: &[(&str, &str)]) -> Group {
        Group {
            id: id.into(),
            name: name.into(),
            tags: tags(t),
        }
    }

    fn survey() -> Survey {
        Survey {
            vpc_id: "vpc-1".into(),
            enis: vec![
                eni("eni-nat", "in-use", &[], &[]),
                eni("eni-cni", "available", &["sg-nfs"], &[]),
                eni(
                    "eni-tagged",
                    "available",
                    &[],
                    &[("kubernetes.io/cluster/ml", "owned")],
                ),
                eni("eni-lb", "available", &["sg-lb"], &[]),
                eni("eni-node", "in-use", &["sg-lb"], &[]),
            ],
            groups: vec![
                group("sg-default", "default", &[]),
                group("sg-nfs", "kfaws-ml-nfs", &[]),
                group(
                    "sg-lb",
                    "k8s-elb-a1",
                    &[("kubernetes.io/cluster/ml", "owned")],
                ),
            ],
            references: vec![Reference {
                from: "sg-nfs".into(),
                to: "sg-lb".into(),
                egress: false,
                permission: IpPermission::builder().build(),
            }],
            instances: vec![],
            endpoints: vec!["vpce-s3".into()],
            subnets: vec!["subnet-1".into()],
            nat_gateways: vec![("nat-1".into(), vec!["eni-nat".into()])],
            internet_gateways: vec!["igw-1".into()],
            route_tables: vec!["rtb-1".into()],
        }
    }

    fn ours() -> BTreeSet<String> {
        ["sg-nfs", "vpce-s3", "subnet-1", "nat-1", "igw-1", "rtb-1"]
            .map(String::from)
            .into()
    }

    #[test]
    fn leftovers_of_the_cluster_are_removed_and_the_stack_s_own_left_to_it() {
        let f = classify(&survey(), &ours(), "ml");
        assert_eq!(f.remove_enis, ["eni-cni", "eni-tagged", "eni-lb"]);
        assert_eq!(f.remove_groups, ["sg-lb"]);
        assert_eq!(f.revoke.len(), 1);
        assert_eq!(f.revoke[0].from, "sg-nfs");
        assert_eq!(
            f.waiting.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["eni-node"]
        );
        assert!(f.blockers.is_empty(), "{:?}", f.blockers);
    }

    #[test]
    fn a_group_shared_with_the_cluster_is_a_blocker_and_one_of_the_load_balancer_controller_goes() {
        let mut s = survey();
        s.groups.push(group(
            "sg-shared",
            "team-ingress",
            &[("kubernetes.io/cluster/ml", "shared")],
        ));
        s.groups.push(group(
            "sg-alb",
            "k8s-traffic-ml-1a2b",
            &[(LBC_CLUSTER_TAG, "ml")],
        ));
        s.groups.push(group(
            "sg-alb-other",
            "k8s-traffic-other-3c4d",
            &[(LBC_CLUSTER_TAG, "other")],
        ));
        let f = classify(&s, &ours(), "ml");
        assert_eq!(f.remove_groups, ["sg-alb", "sg-lb"]);
        let blockers: Vec<&str> = f.blockers.iter().map(|b| b.id.as_str()).collect();
        assert_eq!(blockers, ["sg-shared", "sg-alb-other"]);
    }

    #[test]
    fn anything_else_is_a_blocker_by_id() {
        let mut s = survey();
        s.enis
            .push(eni("eni-foreign", "available", &["sg-other"], &[]));
        s.groups.push(group("sg-other", "someone-elses", &[]));
        s.groups.push(group(
            "sg-lb-other",
            "k8s-elb-b",
            &[("kubernetes.io/cluster/other", "owned")],
        ));
        s.instances.push(Instance {
            id: "i-1".into(),
            tags: tags(&[("Name", "bastion")]),
        });
        s.endpoints.push("vpce-foreign".into());
        s.nat_gateways.push(("nat-foreign".into(), vec![]));
        let f = classify(&s, &ours(), "ml");
        let ids: Vec<&str> = f.blockers.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "eni-foreign",
                "i-1",
                "sg-other",
                "sg-lb-other",
                "vpce-foreign",
                "nat-foreign"
            ]
        );
        let message = blocked("vpc-1", &f.blockers);
        assert!(
            message.contains("network interface eni-foreign (available, security groups sg-other)"),
            "{message}"
        );
        assert!(message.contains("instance i-1 (bastion)"), "{message}");
        assert!(
            message.starts_with("VPC vpc-1 holds 6 resources"),
            "{message}"
        );
    }

    #[test]
    fn nodes_of_a_managed_node_group_wait_other_nodes_of_the_cluster_block() {
        let mut s = survey();
        s.instances.push(Instance {
            id: "i-node".into(),
            tags: tags(&[("eks:cluster-name", "ml"), ("eks:nodegroup-name", "ml-cpu")]),
        });
        let f = classify(&s, &ours(), "ml");
        assert!(f.waiting.iter().any(|i| i.id == "i-node"));
        assert!(f.blockers.is_empty());
        // Karpenter's node: tagged for the cluster, in no managed node group. Its
        // primary interface (the default group, untagged) is part of it, not reported apart.
        s.enis.push(Eni {
            instance: Some("i-karpenter".into()),
            ..eni("eni-karpenter", "in-use", &["sg-default"], &[])
        });
        s.instances.push(Instance {
            id: "i-karpenter".into(),
            tags: tags(&[
                ("kubernetes.io/cluster/ml", "owned"),
                ("karpenter.sh/nodepool", "default"),
            ]),
        });
        let f = classify(&s, &ours(), "ml");
        let message = blocked("vpc-1", &f.blockers);
        assert!(
            message.contains(
                "instance i-karpenter (a node of cluster ml in no EKS managed node group, such \
                 as Karpenter's or a self-managed group's, which deleting the cluster does not \
                 terminate)"
            ),
            "{message}"
        );
        assert!(f.waiting.iter().all(|i| i.id != "i-karpenter"));
        assert_eq!(f.blockers.len(), 1, "{message}");
        // The interface of an instance no longer in the VPC (terminated) says whose it was.
        s.instances.clear();
        let f = classify(&s, &ours(), "ml");
        let message = blocked("vpc-1", &f.blockers);
        assert!(
            message.contains("eni-karpenter (in-use, attached to instance i-karpenter, terminated"),
            "{message}"
        );
    }

    #[test]
    fn a_detached_interface_whose_groups_are_all_gone_is_removed_an_attached_one_waits() {
        let mut s = survey();
        // Its group (the cluster's) went with the cluster.
        s.enis
            .push(eni("eni-left", "available", &["sg-cluster-gone"], &[]));
        s.enis
            .push(eni("eni-mount", "in-use", &["sg-stack-gone"], &[]));
        let f = classify(&s, &ours(), "ml");
        assert!(
            f.remove_enis.iter().any(|e| e == "eni-left"),
            "{:?}",
            f.remove_enis
        );
        assert!(f.waiting.iter().any(|i| i.id == "eni-mount"));
        assert!(f.blockers.is_empty());
    }

    #[test]
    fn an_efs_mount_target_interface_names_its_file_system() {
        let eni = |description: &str| Eni {
            id: "eni-1".into(),
            status: "in-use".into(),
            groups: vec![],
            tags: BTreeMap::new(),
            description: description.into(),
            instance: None,
        };
        assert_eq!(
            mount_target_file_system(&eni("EFS mount target for fs-0123abcd (fsmt-99)")),
            Some("fs-0123abcd")
        );
        assert_eq!(mount_target_file_system(&eni("Amazon EKS demo")), None);
        assert_eq!(
            mount_target_file_system(&eni("EFS mount target for x")),
            None
        );
    }
}
