//! An EKS managed node group (`aws_eks_nodegroup`) and its launch template.
//!
//! Calls and states follow the Amazon EKS API Reference (CreateNodegroup,
//! DescribeNodegroup, UpdateNodegroupConfig, UpdateNodegroupVersion,
//! DeleteNodegroup) and the Amazon EC2 API Reference (CreateLaunchTemplate):
//! - nodes run in the private subnets of `stack.network` with the node role
//!   `NodeRoleArn` of `stack.iam`;
//! - every node boots from a launch template that requires IMDSv2
//!   (`HttpTokens=required`) with a hop limit of 2, and gives it an
//!   encrypted gp3 root volume of `disk_size_gib`. IMDSv2 defeats the SSRF
//!   class of credential theft; the hop limit of 2 keeps the metadata
//!   service reachable from pods that do not use the host network (the
//!   container adds a hop), which the AWS SDKs in those pods need for the
//!   node's region and, without IRSA, credentials (EKS User Guide,
//!   "Customize managed nodes with launch templates"; EC2 User Guide, "Use
//!   IMDSv2": "in a container environment, we recommend setting the hop
//!   limit to 2"). The root device of the EKS-optimized Amazon Linux AMIs
//!   is `/dev/xvda`. The template tags the nodes and their volumes with
//!   the deployment's tags and `Name` = the node group's name (EKS tags
//!   neither with the node group's own tags: EKS User Guide, "Customize
//!   managed nodes with launch templates"), for cost allocation and for
//!   telling the nodes apart in the EC2 console (a node group made by an
//!   earlier kfaws keeps its untagged template until it is replaced);
//! - the launch template is created by this resource with EC2
//!   CreateLaunchTemplate rather than in a CloudFormation stack: it belongs
//!   to exactly one node group, is made just before it and deleted just
//!   after it, and a template cannot loop over the config's node groups, so
//!   a stack would add a graph node (and a stack's latency) per group for
//!   one object;
//! - create passes the idempotency token as `clientRequestToken` (and as
//!   the launch template's `ClientToken`); waits poll until `ACTIVE` or
//!   gone; scaling changes in place (UpdateNodegroupConfig), the instance
//!   type, the disk and the metadata options by replacement;
//! - the nodes run the cluster's Kubernetes version: the node group is
//!   created on it and, after the control plane's upgrade (the cluster is
//!   this resource's dependency, so it goes first), upgraded to it in
//!   place with UpdateNodegroupVersion (a rolling replacement of the nodes
//!   on the version's EKS-optimized AMI; the launch template keeps its
//!   version). EKS upgrades the control plane only while its node groups
//!   run its version (EKS User Guide, "Update existing cluster to new
//!   Kubernetes version"), so this is what lets the next upgrade proceed.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_ec2::types::{
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateTagSpecificationRequest,
    RequestLaunchTemplateData, ResourceType, Tag as Ec2Tag, TagSpecification, VolumeType,
};
use aws_sdk_eks::types::{
    LaunchTemplateSpecification, Nodegroup, NodegroupScalingConfig, NodegroupStatus,
};
use serde_json::{json, Value};

use super::{
    code, describe_issues, foreign, is_not_found, minor, owned, tags, wait_for_update, Tolerance,
};
use crate::address::Address;
use crate::aws::error_message;
use crate::aws::stack::{DEPLOYMENT_TAG, LINEAGE_TAG};
use crate::aws::wait::{wait_until, Backoff, Poll};
use crate::config::NodeGroup;
use crate::plan::Action;
use crate::resource::{
    unless_interrupted, Applied, Check, Detail, Inputs, Observed, Outputs, Resource, ResourceError,
};
use crate::state::ResourceState;

/// The `stack.iam` output with the node role's ARN.
pub const ROLE_OUTPUT: &str = "NodeRoleArn";
/// The root device of the EKS-optimized Amazon Linux AMIs.
pub const ROOT_DEVICE: &str = "/dev/xvda";
/// IMDS `HttpPutResponseHopLimit`: 2, so pods reach the metadata service.
pub const HOP_LIMIT: i32 = 2;
/// The tag carrying the idempotency token of the create that made a
/// launch template: a template left by an earlier create of another
/// token is stale and made anew.
pub const TOKEN_TAG: &str = "kfaws:token";

const HEALTHY: &str = "healthy";

/// Whether a node group in `status` works: `healthy`, or the status for
/// the states only deletion resolves or that mean it is going away
/// (`CREATE_FAILED`, `DELETE_FAILED`, `DELETING`; EKS API Reference,
/// `Nodegroup.status`). `DEGRADED` nodes still run and are reported by
/// EKS's own health issues, not replaced by kfaws.
pub fn health(status: &str) -> &str {
    match status {
        "CREATE_FAILED" | "DELETE_FAILED" | "DELETING" => status,
        _ => HEALTHY,
    }
}

/// The health issues EKS reports for `group`, as [`describe_issues`] words
/// them.
fn issues(group: &Nodegroup) -> String {
    describe_issues(
        group
            .health()
            .map(|h| h.issues())
            .unwrap_or_default()
            .iter()
            .map(|i| (i.code().map(|c| c.as_str()), i.message())),
    )
}

/// Whether a node group in `status` has an operation in progress that a
/// DeleteNodegroup may not interrupt (EKS API Reference, `Nodegroup.status`;
/// DeleteNodegroup answers `ResourceInUseException` meanwhile).
fn busy(status: &NodegroupStatus) -> bool {
    matches!(
        status,
        NodegroupStatus::Creating | NodegroupStatus::Updating
    )
}

/// The launch template name of node group `nodegroup_name`.
pub fn launch_template_name(nodegroup_name: &str) -> String {
    format!("kfaws-{nodegroup_name}")
}

/// One managed node group.
pub struct NodegroupResource {
    /// Graph address, `eks.nodegroup.<group>`.
    pub address: Address,
    /// The cluster's name.
    pub cluster_name: String,
    /// The node group's name ([`crate::config::Config::nodegroup_name`]).
    pub nodegroup_name: String,
    /// Instance type, sizes and disk from the config.
    pub group: NodeGroup,
    /// The Kubernetes version the nodes run, `1.N`: the cluster's
    /// ([`crate::config::Config::kubernetes_version`]).
    pub kubernetes_version: String,
    /// The deployment, written as the deployment tag.
    pub deployment: String,
    /// The lineage of the state, written as the lineage tag.
    pub lineage: String,
    /// The cluster (its ACTIVE state is this resource's precondition).
    pub cluster: Address,
    /// The network stack, for the private subnets.
    pub network: Address,
    /// The IAM stack, for [`ROLE_OUTPUT`].
    pub iam: Address,
    /// EKS client.
    pub eks: aws_sdk_eks::Client,
    /// EC2 client, for the launch template.
    pub ec2: aws_sdk_ec2::Client,
}

fn output_str(inputs: &Inputs, from: &Address, name: &str) -> Result<String, ResourceError> {
    let v = inputs.get(from, name)?;
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| ResourceError::msg(format!("output {name} of {from} is not a string: {v}")))
}

/// The desired size recorded when the node group was last applied.
fn recorded_desired(recorded: Option<&ResourceState>) -> Option<i64> {
    recorded?.spec.get("scaling")?.get("desired_size")?.as_i64()
}

fn scaling_json(min: i64, desired: i64, max: i64) -> Value {
    json!({"min_size": min, "desired_size": desired, "max_size": max})
}

impl NodegroupResource {
    fn subnets(&self, inputs: &Inputs) -> Result<Vec<String>, ResourceError> {
        Ok(
            output_str(inputs, &self.network, super::cluster::SUBNETS_OUTPUT)?
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    fn metadata_spec() -> Value {
        json!({"http_tokens": "required", "http_put_response_hop_limit": HOP_LIMIT})
    }

    fn scaling(&self) -> NodegroupScalingConfig {
        let n = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        NodegroupScalingConfig::builder()
            .min_size(n(self.group.min_size))
            .desired_size(n(self.group.desired_size))
            .max_size(n(self.group.max_size))
            .build()
    }

    async fn describe(&self) -> Result<Option<Nodegroup>, ResourceError> {
        match self
            .eks
            .describe_nodegroup()
            .cluster_name(&self.cluster_name)
            .nodegroup_name(&self.nodegroup_name)
            .send()
            .await
        {
            Ok(out) => Ok(out.nodegroup().cloned()),
            // The cluster itself may be gone too.
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(ResourceError::msg(format!(
                "DescribeNodegroup {}/{}: {}",
                self.cluster_name,
                self.nodegroup_name,
                error_message(&e)
            ))),
        }
    }

    async fn ours(&self) -> Result<Option<Nodegroup>, ResourceError> {
        Ok(self
            .describe()
            .await?
            .filter(|n| owned(n.tags(), &self.deployment, &self.lineage)))
    }

    fn what(&self) -> String {
        format!("node group {}/{}", self.cluster_name, self.nodegroup_name)
    }

    async fn wait_active(&self) -> Result<Nodegroup, ResourceError> {
        let tolerance = Tolerance::default();
        wait_until(Backoff::with_deadline(self.timeout()), || async {
            let group = match self.describe().await {
                Ok(g) => {
                    tolerance.ok();
                    g
                }
                Err(e) => return tolerance.failed(e.to_string()),
            };
            let Some(group) = group else {
                return Poll::Failed(format!("{} disappeared", self.what()));
            };
            match group.status() {
                Some(NodegroupStatus::Active) => Poll::Ready(group),
                // Settled: its nodes run, EKS names what is wrong, and an
                // update (more nodes, another version) may be what mends it
                // (see `health`); waiting for ACTIVE would wait out the
                // deadline.
                Some(NodegroupStatus::Degraded) => {
                    tracing::warn!("{} is DEGRADED: {}", self.what(), issues(&group));
                    Poll::Ready(group)
                }
                Some(
                    s @ (NodegroupStatus::CreateFailed
                    | NodegroupStatus::DeleteFailed
                    | NodegroupStatus::Deleting),
                ) => Poll::Failed(format!(
                    "{} is {}: {}",
                    self.what(),
                    s.as_str(),
                    issues(&group)
                )),
                other => Poll::Pending(other.map_or("UNKNOWN", |s| s.as_str()).to_string()),
            }
        })
        .await
        .map_err(|e| ResourceError::msg(format!("{}: {e}", self.what())))
    }

    /// Waits while the group is `CREATING` or `UPDATING` ([`busy`]); returns
    /// it as it then is, or `None` once it is gone or no longer ours.
    async fn wait_settled(&self) -> Result<Option<Nodegroup>, ResourceError> {
        super::wait_settled(
            self.timeout(),
            &self.what(),
            || self.ours(),
            |g: &Nodegroup| {
                g.status()
                    .filter(|s| busy(s))
                    .map(|s| s.as_str().to_string())
            },
        )
        .await
    }

    async fn wait_gone(&self) -> Result<(), ResourceError> {
        let tolerance = Tolerance::default();
        wait_until(Backoff::with_deadline(self.timeout()), || async {
            match self.describe().await {
                Ok(None) => Poll::Ready(()),
                Ok(Some(g)) => {
                    tolerance.ok();
                    match g.status() {
                        Some(NodegroupStatus::DeleteFailed) => {
                            Poll::Failed(format!("{} is DELETE_FAILED", self.what()))
                        }
                        other => Poll::Pending(other.map_or("UNKNOWN", |s| s.as_str()).into()),
                    }
                }
                Err(e) => tolerance.failed(e.to_string()),
            }
        })
        .await
        .map_err(|e| ResourceError::msg(format!("{}: {e}", self.what())))
    }

    fn launch_template_data(&self) -> RequestLaunchTemplateData {
        RequestLaunchTemplateData::builder()
            .block_device_mappings(
                LaunchTemplateBlockDeviceMappingRequest::builder()
                    .device_name(ROOT_DEVICE)
                    .ebs(
                        LaunchTemplateEbsBlockDeviceRequest::builder()
                            .volume_size(
                                i32::try_from(self.group.disk_size_gib).unwrap_or(i32::MAX),
                            )
                            .volume_type(VolumeType::Gp3)
                            .encrypted(true)
                            .delete_on_termination(true)
                            .build(),
                    )
                    .build(),
            )
            .metadata_options(
                LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::Enabled)
                    .http_tokens(LaunchTemplateHttpTokensState::Required)
                    .http_put_response_hop_limit(HOP_LIMIT)
                    .build(),
            )
            .set_tag_specifications(Some(
                [ResourceType::Instance, ResourceType::Volume]
                    .into_iter()
                    .map(|kind| {
                        LaunchTemplateTagSpecificationRequest::builder()
                            .resource_type(kind)
                            .set_tags(Some(self.node_tags()))
                            .build()
                    })
                    .collect(),
            ))
            .build()
    }

    /// The tags of the nodes and their root volumes: the deployment's
    /// ([`tags`]) and `Name`, the node group's name.
    fn node_tags(&self) -> Vec<Ec2Tag> {
        self.ec2_tags_with("Name", &self.nodegroup_name)
    }

    /// The deployment's tags ([`tags`]) and `key` = `value`, sorted by key.
    fn ec2_tags_with(&self, key: &str, value: &str) -> Vec<Ec2Tag> {
        let mut t: Vec<Ec2Tag> = tags(&self.deployment, &self.lineage, &self.address)
            .into_iter()
            .map(|(k, v)| Ec2Tag::builder().key(k).value(v).build())
            .collect();
        t.push(Ec2Tag::builder().key(key).value(value).build());
        t.sort_by(|a, b| a.key().cmp(&b.key()));
        t
    }

    fn ec2_tags(&self, token: &str) -> Vec<Ec2Tag> {
        self.ec2_tags_with(TOKEN_TAG, token)
    }

    /// The launch template of this node group, if there is one:
    /// (id, its tags).
    async fn find_launch_template(&self) -> Result<Option<(String, Vec<Ec2Tag>)>, ResourceError> {
        let name = launch_template_name(&self.nodegroup_name);
        match self
            .ec2
            .describe_launch_templates()
            .launch_template_names(&name)
            .send()
            .await
        {
            Ok(out) => Ok(out.launch_templates().first().map(|t| {
                (
                    t.launch_template_id().unwrap_or_default().to_string(),
                    t.tags().to_vec(),
                )
            })),
            Err(e) if code(&e).is_some_and(|c| c.starts_with("InvalidLaunchTemplateName.")) => {
                Ok(None)
            }
            Err(e) => Err(ResourceError::msg(format!(
                "DescribeLaunchTemplates {name}: {}",
                error_message(&e)
            ))),
        }
    }

    /// Makes the launch template for the create of `token` and returns its
    /// id: one made by an earlier attempt of the same create is reused,
    /// one left by an earlier create of this deployment (another token) is
    /// replaced, anyone else's is refused.
    async fn ensure_launch_template(&self, token: &str) -> Result<String, ResourceError> {
        let name = launch_template_name(&self.nodegroup_name);
        if let Some((id, found)) = self.find_launch_template().await? {
            let tag = |k: &str| {
                found
                    .iter()
                    .find(|t| t.key() == Some(k))
                    .and_then(|t| t.value())
            };
            if tag(DEPLOYMENT_TAG) != Some(self.deployment.as_str())
                || tag(LINEAGE_TAG) != Some(self.lineage.as_str())
            {
                return Err(ResourceError::msg(format!(
                    "launch template {name} ({id}) already exists and was not created by kfaws \
                     for this deployment's state; delete or rename it"
                )));
            }
            if tag(TOKEN_TAG) == Some(token) {
                return Ok(id);
            }
            self.delete_launch_template(&id).await?;
        }
        let out = self
            .ec2
            .create_launch_template()
            .launch_template_name(&name)
            .version_description(format!("kfaws {}", self.address))
            .launch_template_data(self.launch_template_data())
            .client_token(token)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .set_tags(Some(self.ec2_tags(token)))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| {
                ResourceError::msg(format!(
                    "CreateLaunchTemplate {name}: {}",
                    error_message(&e)
                ))
            })?;
        out.launch_template()
            .and_then(|t| t.launch_template_id())
            .map(str::to_string)
            .ok_or_else(|| ResourceError::msg(format!("CreateLaunchTemplate {name}: no id")))
    }

    async fn delete_launch_template(&self, id: &str) -> Result<(), ResourceError> {
        match self
            .ec2
            .delete_launch_template()
            .launch_template_id(id)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if code(&e).is_some_and(|c| c.starts_with("InvalidLaunchTemplate")) => Ok(()),
            Err(e) => Err(ResourceError::msg(format!(
                "DeleteLaunchTemplate {id}: {}",
                error_message(&e)
            ))),
        }
    }

    /// The launch template settings the nodes boot with, keyed like the spec.
    async fn launch_template_spec(
        &self,
        group: &Nodegroup,
    ) -> Result<serde_json::Map<String, Value>, ResourceError> {
        let mut spec = serde_json::Map::new();
        let Some(lt) = group.launch_template() else {
            return Ok(spec);
        };
        let mut call = self.ec2.describe_launch_template_versions();
        call = match (lt.id(), lt.name()) {
            (Some(id), _) => call.launch_template_id(id),
            (None, Some(name)) => call.launch_template_name(name),
            (None, None) => return Ok(spec),
        };
        let out = match call
            .versions(lt.version().unwrap_or("$Default"))
            .send()
            .await
        {
            Ok(out) => out,
            // Deleted behind the node group's back: nothing to compare.
            Err(e) if code(&e).is_some_and(|c| c.starts_with("InvalidLaunchTemplate")) => {
                return Ok(spec)
            }
            Err(e) => {
                return Err(ResourceError::msg(format!(
                    "DescribeLaunchTemplateVersions {}: {}",
                    lt.id().or(lt.name()).unwrap_or("?"),
                    error_message(&e)
                )))
            }
        };
        let Some(data) = out
            .launch_template_versions()
            .first()
            .and_then(|v| v.launch_template_data())
        else {
            return Ok(spec);
        };
        let root = data
            .block_device_mappings()
            .iter()
            .find(|m| m.device_name() == Some(ROOT_DEVICE))
            .and_then(|m| m.ebs());
        spec.insert(
            "disk_size_gib".into(),
            json!(root.and_then(|e| e.volume_size())),
        );
        spec.insert(
            "root_volume_encrypted".into(),
            json!(root.and_then(|e| e.encrypted()).unwrap_or(false)),
        );
        let md = data.metadata_options();
        spec.insert(
            "metadata_options".into(),
            json!({
                "http_tokens": md.and_then(|m| m.http_tokens()).map_or("optional", |t| t.as_str()),
                "http_put_response_hop_limit": md.and_then(|m| m.http_put_response_hop_limit()),
            }),
        );
        Ok(spec)
    }

    /// Moves the nodes of `live` to [`Self::kubernetes_version`] with
    /// UpdateNodegroupVersion and waits for it: a version lower than the
    /// live one is refused (EKS cannot downgrade managed nodes on its own
    /// AMIs), before any call.
    async fn upgrade(&self, live: &Nodegroup) -> Result<Nodegroup, ResourceError> {
        let from = live.version().unwrap_or_default();
        if let (Some(have), Some(want)) = (minor(from), minor(&self.kubernetes_version)) {
            if want < have {
                return Err(ResourceError::msg(format!(
                    "{} runs Kubernetes {from}; EKS cannot downgrade it to {}",
                    self.what(),
                    self.kubernetes_version
                )));
            }
        }
        tracing::info!(
            nodegroup = %self.nodegroup_name,
            from,
            to = %self.kubernetes_version,
            "upgrading the nodes' Kubernetes version"
        );
        let out = self
            .eks
            .update_nodegroup_version()
            .cluster_name(&self.cluster_name)
            .nodegroup_name(&self.nodegroup_name)
            .version(&self.kubernetes_version)
            .client_request_token(uuid::Uuid::new_v4().to_string())
            .send()
            .await
            .map_err(|e| {
                ResourceError::msg(format!(
                    "UpdateNodegroupVersion {} to {}: {}",
                    self.what(),
                    self.kubernetes_version,
                    error_message(&e)
                ))
            })?;
        let what = format!("{} to finish updating", self.what());
        let upgraded = wait_for_update(
            &self.eks,
            &self.cluster_name,
            Some(&self.nodegroup_name),
            "UpdateNodegroupVersion",
            out.update(),
            self.timeout(),
        );
        unless_interrupted(&what, upgraded).await?;
        unless_interrupted(&what, self.wait_active()).await
    }

    /// The scaling an update sends for `live`: the config's, except that
    /// an unchanged `desired_size` leaves the live one (an autoscaler's)
    /// where it is, within the new bounds.
    fn wanted_scaling(&self, recorded: &ResourceState, live: &Nodegroup) -> NodegroupScalingConfig {
        let wanted = self.scaling();
        let live_desired = live.scaling_config().and_then(|s| s.desired_size());
        match live_desired {
            Some(live_desired)
                if recorded_desired(Some(recorded)) == Some(i64::from(self.group.desired_size)) =>
            {
                let kept = live_desired.clamp(
                    wanted.min_size().unwrap_or_default(),
                    wanted.max_size().unwrap_or(i32::MAX),
                );
                NodegroupScalingConfig::builder()
                    .set_min_size(wanted.min_size())
                    .desired_size(kept)
                    .set_max_size(wanted.max_size())
                    .build()
            }
            _ => wanted,
        }
    }

    fn outputs(group: &Nodegroup) -> Outputs {
        [
            ("nodegroup_name", group.nodegroup_name()),
            ("arn", group.nodegroup_arn()),
            (
                "launch_template_id",
                group.launch_template().and_then(|l| l.id()),
            ),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), json!(v?))))
        .collect()
    }

    fn applied(group: &Nodegroup) -> Applied {
        Applied {
            physical_id: group.nodegroup_arn().unwrap_or_default().to_string(),
            outputs: Self::outputs(group),
        }
    }
}

#[async_trait]
impl Resource for NodegroupResource {
    fn address(&self) -> &Address {
        &self.address
    }

    fn kind(&self) -> &'static str {
        "aws_eks_nodegroup"
    }

    async fn importable(&self) -> Result<Option<String>, ResourceError> {
        Ok(self.ours().await?.map(|n| {
            n.nodegroup_arn()
                .unwrap_or(&self.nodegroup_name)
                .to_string()
        }))
    }

    fn dependencies(&self) -> Vec<Address> {
        let mut deps = vec![self.cluster.clone(), self.network.clone(), self.iam.clone()];
        deps.sort();
        deps
    }

    fn spec(&self) -> Value {
        json!({
            "nodegroup_name": self.nodegroup_name,
            "kubernetes_version": self.kubernetes_version,
            "instance_type": self.group.instance_type,
            "scaling": scaling_json(
                self.group.min_size.into(),
                self.group.desired_size.into(),
                self.group.max_size.into(),
            ),
            "disk_size_gib": self.group.disk_size_gib,
            "root_volume_encrypted": true,
            "metadata_options": Self::metadata_spec(),
            "health": HEALTHY,
        })
    }

    /// The bundles that depend on a node group keep their objects in the
    /// cluster's API server, not on the nodes: their pods are pending while
    /// no node runs and are scheduled onto the new nodes.
    fn replaceable_under_dependants(&self) -> bool {
        true
    }

    /// The replacement deletes the group, then creates it again: its name
    /// is unique in the cluster (CreateNodegroup: ResourceInUseException),
    /// so the new group cannot run beside the old one under it.
    fn replace_note(&self) -> Option<&'static str> {
        Some(
            "the old nodes are deleted before the new ones start (a node group's name is unique \
             in its cluster), so pods on this group are pending for several minutes; to avoid \
             that, add a group with the new settings under another name, apply, then remove \
             this one",
        )
    }

    fn replace_fields(&self) -> &[&str] {
        &[
            "nodegroup_name",
            "instance_type",
            "disk_size_gib",
            "root_volume_encrypted",
            "metadata_options",
            "health",
        ]
    }

    /// EKS User Guide, "Create a managed node group": a few minutes.
    fn estimate(&self) -> Duration {
        Duration::from_secs(3 * 60)
    }

    /// Creating, resizing or deleting a node group takes minutes; draining
    /// pods on delete can take longer.
    fn timeout(&self) -> Duration {
        Duration::from_secs(30 * 60)
    }

    async fn read(&self, recorded: Option<&ResourceState>) -> Result<Observed, ResourceError> {
        let Some(group) = self.describe().await? else {
            return Ok(Observed::Gone);
        };
        if !super::ours_or_retagged(
            group.tags(),
            group.nodegroup_arn().unwrap_or_default(),
            recorded,
            &self.what(),
            &self.address,
            &self.deployment,
            &self.lineage,
        )? {
            return Ok(Observed::Gone);
        }
        let mut spec = self.launch_template_spec(&group).await?;
        spec.insert("nodegroup_name".into(), json!(group.nodegroup_name()));
        spec.insert("kubernetes_version".into(), json!(group.version()));
        if let Some(it) = group.instance_types().first() {
            spec.insert("instance_type".into(), json!(it));
        }
        if let Some(s) = group.scaling_config() {
            let (min, max) = (
                i64::from(s.min_size().unwrap_or_default()),
                i64::from(s.max_size().unwrap_or_default()),
            );
            let live = i64::from(s.desired_size().unwrap_or_default());
            // A desired size an autoscaler moved within min..=max is not
            // drift (Terraform users set ignore_changes on it for the same
            // reason): the recorded one stands for it.
            let desired = recorded_desired(recorded)
                .filter(|_| (min..=max).contains(&live))
                .unwrap_or(live);
            spec.insert("scaling".into(), scaling_json(min, desired, max));
        }
        spec.insert(
            "health".into(),
            json!(health(group.status().map_or("UNKNOWN", |s| s.as_str()))),
        );
        let applied = Self::applied(&group);
        Ok(Observed::Present {
            physical_id: Some(applied.physical_id),
            spec,
            outputs: applied.outputs,
        })
    }

    async fn create(&self, token: &str, inputs: &Inputs) -> Result<Applied, ResourceError> {
        let subnets = self.subnets(inputs)?;
        let role = output_str(inputs, &self.iam, ROLE_OUTPUT)?;
        // A node group of ours that exists already (an earlier attempt of
        // this create got that far) keeps the template it was made with.
        if self.ours().await?.is_none() {
            let template = self.ensure_launch_template(token).await?;
            let sent = self
                .eks
                .create_nodegroup()
                .cluster_name(&self.cluster_name)
                .nodegroup_name(&self.nodegroup_name)
                .set_subnets(Some(subnets))
                .node_role(&role)
                .scaling_config(self.scaling())
                .instance_types(&self.group.instance_type)
                .version(&self.kubernetes_version)
                .launch_template(
                    LaunchTemplateSpecification::builder()
                        .id(&template)
                        .version("1")
                        .build(),
                )
                .client_request_token(token)
                .set_tags(Some(tags(&self.deployment, &self.lineage, &self.address)))
                .send()
                .await;
            if let Err(e) = sent {
                if code(&e) != Some("ResourceInUseException") {
                    return Err(ResourceError::msg(format!(
                        "CreateNodegroup {}/{}: {}",
                        self.cluster_name,
                        self.nodegroup_name,
                        error_message(&e)
                    )));
                }
                let existing = self.describe().await?;
                let t = existing.as_ref().and_then(Nodegroup::tags);
                if !owned(t, &self.deployment, &self.lineage) {
                    return Err(foreign(&self.what(), t, &self.deployment));
                }
            }
        }
        let what = format!("{} to become ACTIVE", self.what());
        let group = unless_interrupted(&what, self.wait_active()).await?;
        Ok(Self::applied(&group))
    }

    async fn update(
        &self,
        recorded: &ResourceState,
        inputs: &Inputs,
    ) -> Result<Applied, ResourceError> {
        let Some(live) = self.ours().await? else {
            return Err(ResourceError::msg(format!(
                "{} is gone; plan again to create it",
                self.what()
            )));
        };
        let want: BTreeSet<String> = self.subnets(inputs)?.into_iter().collect();
        let have: BTreeSet<String> = live.subnets().iter().cloned().collect();
        let role = output_str(inputs, &self.iam, ROLE_OUTPUT)?;
        if want != have || live.node_role() != Some(role.as_str()) {
            return Err(ResourceError::msg(format!(
                "{} cannot move to other subnets ({have:?} -> {want:?}) or change its node role \
                 ({} -> {role}) in place; destroy it (kfaws destroy --target {}) and apply again",
                self.what(),
                live.node_role().unwrap_or("none"),
                self.address
            )));
        }
        // Every wait stops at the first interrupt; the next run resumes from
        // the live version and scaling.
        let what = format!("{} to finish updating", self.what());
        let mut live = unless_interrupted(&what, self.wait_active()).await?;
        if live.version() != Some(self.kubernetes_version.as_str()) {
            live = self.upgrade(&live).await?;
        }
        let s = live.scaling_config();
        let now = s.map(|s| (s.min_size(), s.desired_size(), s.max_size()));
        let wanted = self.wanted_scaling(recorded, &live);
        if now != Some((wanted.min_size(), wanted.desired_size(), wanted.max_size())) {
            let out = self
                .eks
                .update_nodegroup_config()
                .cluster_name(&self.cluster_name)
                .nodegroup_name(&self.nodegroup_name)
                .scaling_config(wanted)
                .client_request_token(uuid::Uuid::new_v4().to_string())
                .send()
                .await
                .map_err(|e| {
                    ResourceError::msg(format!(
                        "UpdateNodegroupConfig {}: {}",
                        self.what(),
                        error_message(&e)
                    ))
                })?;
            let scaled = wait_for_update(
                &self.eks,
                &self.cluster_name,
                Some(&self.nodegroup_name),
                "UpdateNodegroupConfig",
                out.update(),
                self.timeout(),
            );
            unless_interrupted(&what, scaled).await?;
        }
        let group = unless_interrupted(&what, self.wait_active()).await?;
        Ok(Self::applied(&group))
    }

    /// The UpdateNodegroupVersion an update makes, if the nodes run
    /// another version than the cluster's, and the node count it sets when
    /// that differs from the live one (an autoscaler's size outside the new
    /// min..max is clamped: nodes are added or removed).
    async fn preview_update(
        &self,
        recorded: &ResourceState,
        _inputs: &Inputs,
    ) -> Result<Vec<Detail>, ResourceError> {
        let Some(live) = self.ours().await? else {
            return Ok(vec![]);
        };
        let mut details: Vec<Detail> =
            super::waits_for_status("Nodegroup", live.status().map(NodegroupStatus::as_str))
                .into_iter()
                .collect();
        let live_desired = live.scaling_config().and_then(|s| s.desired_size());
        let desired = self.wanted_scaling(recorded, &live).desired_size();
        if let (Some(from), Some(to)) = (live_desired, desired) {
            if from != to {
                details.push(Detail {
                    action: "Modify".into(),
                    name: format!("desired size {from} -> {to}"),
                    kind: "UpdateNodegroupConfig".into(),
                    replacement: None,
                    condition: None,
                    note: Some(if to < from {
                        format!("{} node(s) removed", from - to)
                    } else {
                        format!("{} node(s) added", to - from)
                    }),
                });
            }
        }
        let from = live.version().unwrap_or_default();
        if from == self.kubernetes_version {
            return Ok(details);
        }
        details.push(Detail {
            action: "Modify".into(),
            name: format!("Kubernetes {}", self.kubernetes_version),
            kind: "UpdateNodegroupVersion".into(),
            replacement: None,
            condition: None,
            note: Some(format!(
                "nodes replaced in a rolling update from {from}, after the control plane"
            )),
        });
        Ok(details)
    }

    /// A create is refused at plan when a node group of our name exists in
    /// the cluster that this state did not make ([`foreign`]).
    async fn check(&self, check: &Check<'_>) -> Result<(), ResourceError> {
        if check.action != Action::Create {
            return Ok(());
        }
        match self.describe().await? {
            Some(n) if !owned(n.tags(), &self.deployment, &self.lineage) => {
                Err(foreign(&self.what(), n.tags(), &self.deployment))
            }
            _ => Ok(()),
        }
    }

    async fn delete(&self, _recorded: &ResourceState) -> Result<(), ResourceError> {
        let mut group = self.ours().await?;
        if group.as_ref().and_then(Nodegroup::status).is_some_and(busy) {
            let what = format!(
                "{} to finish its operation before it is deleted",
                self.what()
            );
            group = unless_interrupted(&what, self.wait_settled()).await?;
        }
        if let Some(group) = group {
            if group.status() != Some(&NodegroupStatus::Deleting) {
                match self
                    .eks
                    .delete_nodegroup()
                    .cluster_name(&self.cluster_name)
                    .nodegroup_name(&self.nodegroup_name)
                    .send()
                    .await
                {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => {
                        return Err(ResourceError::msg(format!(
                            "DeleteNodegroup {}: {}",
                            self.what(),
                            error_message(&e)
                        )))
                    }
                }
            }
            let what = format!("{} to be deleted", self.what());
            unless_interrupted(&what, self.wait_gone()).await?;
        }
        // The template goes after the nodes that boot from it; only ours.
        if let Some((id, found)) = self.find_launch_template().await? {
            let tag = |k: &str| {
                found
                    .iter()
                    .find(|t| t.key() == Some(k))
                    .and_then(|t| t.value())
            };
            if tag(DEPLOYMENT_TAG) == Some(self.deployment.as_str())
                && tag(LINEAGE_TAG) == Some(self.lineage.as_str())
            {
                self.delete_launch_template(&id).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_and_deleting_node_groups_are_unhealthy_degraded_ones_are_not() {
        for ok in ["ACTIVE", "CREATING", "UPDATING", "DEGRADED"] {
            assert_eq!(health(ok), "healthy", "{ok}");
        }
        for bad in ["CREATE_FAILED", "DELETE_FAILED", "DELETING"] {
            assert_eq!(health(bad), bad);
        }
    }

    #[test]
    fn a_delete_waits_out_creating_and_updating_only() {
        for s in ["CREATING", "UPDATING"] {
            assert!(busy(&NodegroupStatus::from(s)), "{s}");
        }
        for s in [
            "ACTIVE",
            "DEGRADED",
            "CREATE_FAILED",
            "DELETE_FAILED",
            "DELETING",
        ] {
            assert!(!busy(&NodegroupStatus::from(s)), "{s}");
        }
    }
}
