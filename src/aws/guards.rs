//! Guards of the vanilla profile's stacks ([`Guard`]): plan-time checks of
//! what a stack's create or delete would run into, and the work that must
//! precede a stack's delete.
//!
//! - [`RolesGuard`] (`stack.iam`, case C21): IAM role names are global to
//!   the account, and the SageMaker execution role's default name
//!   `sagemakerrole` is what every guide uses; a role of that name that
//!   this deployment did not make would fail CreateStack half way with
//!   `EntityAlreadyExists`. Checked with GetRole before the plan is
//!   accepted.
//! - [`PoliciesGuard`] (`stack.iam`): a managed policy of
//!   `options.node_role_policies` that does not exist would fail the node
//!   role, and so CreateStack or the update, half way; checked with GetPolicy.
//! - [`BucketGuard`] (`stack.storage`): the bucket name is global across
//!   accounts (HeadBucket: 403 is another account's); a bucket that holds
//!   object versions stops a destroy before anything is deleted, unless
//!   `--force-destroy-buckets`, and then is emptied right before the stack
//!   delete.
//! - [`FileSystemGuard`] (`stack.efs`): the EFS file system deleted
//!   outside kfaws is drift that replaces the stack; a plan that deletes
//!   the file system names it with its metered size (its files go too).
//! - [`VpcGuard`] (`stack.network`, case C4): what other actors left in the
//!   VPC ([`super::vpc`]).
//! - [`InUseGuard`] (`stack.iam`): the cluster role and the secrets key
//!   are not deleted under a live cluster that left the state.
//!
//! "Ours" is decided by the tags every kfaws stack writes
//! ([`super::stack::DEPLOYMENT_TAG`], [`super::stack::LINEAGE_TAG`]): the
//! templates put the deployment tag on the roles and the bucket, and the
//! lineage tag, where CloudFormation propagates the stack's tags, must
//! match too.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_cloudformation::error::ProvideErrorMetadata as _;

use super::bucket::{self, Holder};
use super::stack::{DEPLOYMENT_TAG, LINEAGE_TAG};
use super::{error_message, vpc};
use crate::plan::Action;
use crate::resource::{Check, DeleteOptions, Detail, Guard, ResourceError};
use crate::state::ResourceState;

/// The deployment and lineage whose tags mark what kfaws made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The deployment name.
    pub deployment: String,
    /// The state lineage.
    pub lineage: String,
}

impl Owner {
    fn owns<'a>(&self, tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
        let tags: BTreeMap<&str, &str> = tags.into_iter().collect();
        // The templates tag the deployment; the lineage tag is there where
        // CloudFormation propagates the stack's tags, and must match then.
        tags.get(DEPLOYMENT_TAG) == Some(&self.deployment.as_str())
            && tags
                .get(LINEAGE_TAG)
                .is_none_or(|l| *l == self.lineage.as_str())
    }

    fn describe_tags<'a>(&self, tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
        let tags: BTreeMap<&str, &str> = tags.into_iter().collect();
        match (tags.get(DEPLOYMENT_TAG), tags.get(LINEAGE_TAG)) {
            (Some(d), Some(l)) if *d == self.deployment => format!(
                "its tags say it belongs to another kfaws state of deployment {d:?} (lineage {l}), \
                 not this one (lineage {})",
                self.lineage
            ),
            (Some(d), _) => format!("its tags say it belongs to kfaws deployment {d:?}"),
            _ => "it was not created by kfaws".into(),
        }
    }
}

fn creates(action: Action) -> bool {
    matches!(action, Action::Create | Action::Replace)
}

fn deletes(action: Action) -> bool {
    matches!(action, Action::Delete | Action::Replace)
}

/// An IAM role of a fixed name that a stack creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedRole {
    /// The role name.
    pub name: String,
    /// The stack parameter holding it.
    pub parameter: &'static str,
    /// The config field it comes from.
    pub field: String,
    /// What to do when it is taken.
    pub remedy: String,
}

/// Refuses a plan that would create roles whose names are taken (C21).
pub struct RolesGuard {
    /// The IAM client.
    pub iam: aws_sdk_iam::Client,
    /// The roles the stack creates.
    pub roles: Vec<FixedRole>,
    /// Whose tags mark a role as ours.
    pub owner: Owner,
}

impl RolesGuard {
    async fn taken(&self, role: &FixedRole) -> Result<Option<String>, String> {
        let found = match self.iam.get_role().role_name(&role.name).send().await {
            Ok(out) => out.role,
            Err(e) if e.code() == Some("NoSuchEntity") => return Ok(None),
            Err(e) => return Err(format!("GetRole {}: {}", role.name, error_message(&e))),
        };
        let Some(found) = found else { return Ok(None) };
        let mut tags: Vec<(String, String)> = found
            .tags()
            .iter()
            .map(|t| (t.key().to_string(), t.value().to_string()))
            .collect();
        if tags.is_empty() {
            let listed = self
                .iam
                .list_role_tags()
                .role_name(&role.name)
                .send()
                .await
                .map_err(|e| format!("ListRoleTags {}: {}", role.name, error_message(&e)))?;
            tags = listed
                .tags()
                .iter()
                .map(|t| (t.key().to_string(), t.value().to_string()))
                .collect();
        }
        let pairs = || tags.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        if self.owner.owns(pairs()) {
            return Ok(None);
        }
        Ok(Some(format!(
            "IAM role {:?} ({}) already exists in this account and {}; creating it in the stack \
             would fail with EntityAlreadyExists. {}",
            role.name,
            role.field,
            self.owner.describe_tags(pairs()),
            role.remedy
        )))
    }
}

#[async_trait]
impl Guard for RolesGuard {
    /// A create checks every role; an update the roles it renames (the
    /// role of the new name is created by the update, then the old one
    /// deleted: AWS::IAM::Role's `RoleName` requires replacement).
    async fn check(&self, check: &Check<'_>) -> Result<(), ResourceError> {
        let recorded_name = |role: &FixedRole| {
            check.recorded.and_then(|r| {
                r.spec
                    .get("parameters")
                    .and_then(|p| p.get(role.parameter))
                    .and_then(serde_json::Value::as_str)
            })
        };
        let checked: Vec<&FixedRole> = match check.action {
            a if creates(a) => self.roles.iter().collect(),
            Action::Update => self
                .roles
                .iter()
                .filter(|r| recorded_name(r) != Some(r.name.as_str()))
                .collect(),
            _ => return Ok(()),
        };
        let mut problems = Vec::new();
        // A role of the stack a create re-attaches to is the stack's, whatever its tags say.
        for role in checked
            .into_iter()
            .filter(|r| !check.held.contains(&r.name))
        {
            match self.taken(role).await {
                Ok(None) => {}
                Ok(Some(problem)) | Err(problem) => problems.push(problem),
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ResourceError::msg(problems.join("\n")))
        }
    }
}

/// Refuses a plan whose stack would attach managed policies that do not exist (IAM
/// `AttachRolePolicy` answers `NoSuchEntity`, and CloudFormation fails the
/// `AWS::IAM::Role` whose `ManagedPolicyArns` names one, half way through an apply).
/// Rule: IAM API Reference, AttachRolePolicy (`NoSuchEntity`: "a resource entity that does
/// not exist"); CloudFormation Template Reference, AWS::IAM::Role `ManagedPolicyArns`.
pub struct PoliciesGuard {
    /// The IAM client (GetPolicy).
    pub iam: aws_sdk_iam::Client,
    /// The STS client: the caller's account, asked only for a policy not AWS managed.
    pub sts: aws_sdk_sts::Client,
    /// The stack parameter holding the ARNs, comma-separated (a `CommaDelimitedList`).
    pub parameter: &'static str,
    /// The config field the checked ARNs come from.
    pub field: &'static str,
    /// The ARNs of [`PoliciesGuard::field`], as the config lists them.
    pub policies: Vec<String>,
}

/// The account of a managed policy's ARN (`arn:PARTITION:iam::ACCOUNT:policy/...`):
/// `aws` for an AWS managed policy; `None` for anything else.
fn policy_account(arn: &str) -> Option<&str> {
    let mut fields = arn.splitn(6, ':');
    let (Some("arn"), Some(_), Some("iam"), Some(""), Some(account), Some(resource)) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return None;
    };
    resource.starts_with("policy/").then_some(account)
}

/// What [`PoliciesGuard`] asks about: every one of `policies` for a create or replacement, and
/// for an update those the stack's `recorded` list (comma-separated) does not hold (the update
/// attaches only those); none otherwise.
fn added<'a>(policies: &'a [String], action: Action, recorded: Option<&str>) -> Vec<&'a str> {
    let recorded: BTreeSet<&str> = match action {
        a if creates(a) => BTreeSet::new(),
        Action::Update => recorded
            .map(|list| list.split(',').map(str::trim).collect())
            .unwrap_or_default(),
        _ => return Vec::new(),
    };
    policies
        .iter()
        .map(String::as_str)
        .filter(|arn| !recorded.contains(arn))
        .collect()
}

impl PoliciesGuard {
    /// The caller's account (STS GetCallerIdentity), or `None` with a warning.
    async fn caller_account(&self) -> Option<String> {
        match self.sts.get_caller_identity().send().await {
            Ok(out) => out.account().map(str::to_string),
            Err(e) => {
                tracing::warn!(
                    "could not check {}: STS GetCallerIdentity: {}",
                    self.field,
                    error_message(&e)
                );
                None
            }
        }
    }
}

#[async_trait]
impl Guard for PoliciesGuard {
    /// An AWS managed policy, or one of the caller's account, that IAM GetPolicy does not
    /// find (`NoSuchEntity`) is refused, all of them in one message. Another account's
    /// policy is not checked (these credentials may not read it), and any other error of
    /// GetPolicy is a warning: CloudFormation will say.
    async fn check(&self, check: &Check<'_>) -> Result<(), ResourceError> {
        let recorded = check.recorded.and_then(|r| {
            r.spec
                .get("parameters")
                .and_then(|p| p.get(self.parameter))
                .and_then(serde_json::Value::as_str)
        });
        let added = added(&self.policies, check.action, recorded);
        let mut caller = None;
        let mut missing = Vec::new();
        for arn in added {
            let Some(account) = policy_account(arn) else {
                continue;
            };
            if account != "aws" {
                if caller.is_none() {
                    caller = Some(self.caller_account().await);
                }
                if caller.as_ref().and_then(Option::as_deref) != Some(account) {
                    tracing::debug!(policy = %arn, "policy of another account: not checked");
                    continue;
                }
            }
            match self.iam.get_policy().policy_arn(arn).send().await {
                Ok(_) => {}
                Err(e) if e.code() == Some("NoSuchEntity") => missing.push(arn),
                Err(e) => tracing::warn!(
                    policy = %arn,
                    "could not check that the policy exists (IAM GetPolicy: {}); CloudFormation will say if it does not",
                    error_message(&e)
                ),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let (what, verb) = match missing.len() {
            1 => ("managed policy", "does"),
            _ => ("managed policies", "do"),
        };
        Err(ResourceError::refused(format!(
            "{}: IAM {what} {} {verb} not exist (IAM GetPolicy: NoSuchEntity), and a policy must \
             exist to be attached to a role (IAM AttachRolePolicy; CloudFormation \
             AWS::IAM::Role ManagedPolicyArns): correct the ARN, or create the policy first",
            self.field,
            missing.join(", "),
        )))
    }
}

/// Guards the artifact bucket: its name before a create, its contents
/// before a delete, and its protective settings (encryption, public access
/// block, versioning) against changes made outside kfaws, which it reports
/// as drift under [`BUCKET_FIELD`] and puts back on apply.
pub struct BucketGuard {
    /// The S3 client ([`bucket::client`]).
    pub s3: aws_sdk_s3::Client,
    /// The bucket name the stack creates.
    pub bucket: String,
    /// Whose tags mark the bucket as ours.
    pub owner: Owner,
    /// The CloudFormation client, to tell a bucket of an interrupted create of the stack from
    /// one its stack left behind.
    pub cloudformation: aws_sdk_cloudformation::Client,
    /// The name of the stack that holds the bucket.
    pub stack_name: String,
}

/// The spec field holding the artifact bucket's settings
/// ([`bucket::desired_settings`]), or [`BUCKET_DELETED`].
pub const BUCKET_FIELD: &str = "artifact_bucket";

/// What [`BUCKET_FIELD`] observes when the bucket was deleted outside kfaws
/// (CloudFormation does not recreate it in an update; the repair does).
pub const BUCKET_DELETED: &str = "deleted outside kfaws";

impl BucketGuard {
    /// The recorded stack's bucket: its output, else the desired name.
    fn recorded_bucket(&self, recorded: Option<&ResourceState>) -> String {
        recorded
            .and_then(|r| {
                r.outputs
                    .get("BucketName")
                    .or_else(|| r.spec.get("parameters").and_then(|p| p.get("BucketName")))
            })
            .and_then(|v| v.as_str())
            .unwrap_or(&self.bucket)
            .to_string()
    }

    /// The refusal of `action` (a delete or a replacement) of the stack of
    /// bucket `name`, which holds `contents`, with the command that goes on.
    fn not_empty(name: &str, contents: bucket::Contents, action: Action) -> ResourceError {
        let on = if action == Action::Replace {
            "so the replacement would stop half way; nothing was deleted. Run the apply again \
             with --force-destroy-buckets (`kfaws apply --replace stack.storage \
             --force-destroy-buckets`) to delete every object version and delete marker first \
             (they cannot be recovered; the new bucket starts empty), or empty the bucket \
             yourself; `kfaws plan` with the same flags shows that plan without deleting anything"
        } else {
            "so the delete would stop half way; nothing was deleted. Run `kfaws destroy \
             --force-destroy-buckets` (or, for an apply that deletes it, `kfaws apply \
             --force-destroy-buckets`) to delete every object version and delete marker first \
             (they cannot be recovered), or empty the bucket yourself; `kfaws plan --destroy \
             --force-destroy-buckets` shows that plan without deleting anything"
        };
        ResourceError::msg(format!(
            "bucket {name} is not empty: it holds {contents}. Amazon S3 deletes only empty \
             buckets, {on}"
        ))
    }
}

impl BucketGuard {
    /// Bucket `name` when its stack left it behind: the stack of [`Self::stack_name`] is gone
    /// (deleted outside kfaws; CloudFormation keeps a bucket that is not empty when the delete
    /// is retried with `RetainResources`) and the bucket carries [`Self::owner`]'s tags. Says so
    /// as `kept when stack S was deleted outside kfaws; it holds N object versions …` (or `is
    /// empty`); `None` while the stack exists or when the bucket is gone or not ours.
    ///
    /// # Errors
    /// A message from DescribeStacks, HeadBucket, GetBucketTagging or ListObjectVersions.
    pub async fn left_behind(&self, name: &str) -> Result<Option<String>, ResourceError> {
        if self.stack_exists().await? {
            return Ok(None);
        }
        let tags = match bucket::holder(&self.s3, name)
            .await
            .map_err(ResourceError::msg)?
        {
            Holder::Visible(tags) => tags,
            Holder::Nobody | Holder::OtherAccount => return Ok(None),
        };
        if !self
            .owner
            .owns(tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        {
            return Ok(None);
        }
        let contents = match bucket::contents(&self.s3, name)
            .await
            .map_err(ResourceError::msg)?
        {
            Some(c) if c.count() > 0 => format!("holds {c}"),
            _ => "is empty".to_string(),
        };
        Ok(Some(format!(
            "kept when stack {} was deleted outside kfaws; it {contents}",
            self.stack_name
        )))
    }

    /// How to delete bucket `name` by hand, for a note about a bucket [`Self::left_behind`].
    pub fn removal(name: &str) -> String {
        empty_and_delete(name)
    }

    /// Whether the stack of [`Self::stack_name`] exists (in any state but `DELETE_COMPLETE`).
    async fn stack_exists(&self) -> Result<bool, ResourceError> {
        match self
            .cloudformation
            .describe_stacks()
            .stack_name(&self.stack_name)
            .send()
            .await
        {
            Ok(out) => Ok(out.stacks().iter().any(|s| {
                s.stack_status()
                    != Some(&aws_sdk_cloudformation::types::StackStatus::DeleteComplete)
            })),
            Err(e) if e.message().is_some_and(|m| m.contains("does not exist")) => Ok(false),
            Err(e) => Err(ResourceError::msg(format!(
                "DescribeStacks {}: {}",
                self.stack_name,
                error_message(&e)
            ))),
        }
    }
}

/// How to delete a versioned bucket by hand: `aws s3 rb --force` deletes only current object
/// versions, so the noncurrent ones and the delete markers keep the bucket from being deleted
/// (Amazon S3 User Guide, "Emptying a bucket": the console's Empty deletes every version).
fn empty_and_delete(bucket: &str) -> String {
    format!(
        "empty it (the S3 console's Empty deletes every object version; `aws s3 rb --force` does \
         not, the bucket is versioned) and delete it: `aws s3 rb s3://{bucket}`"
    )
}

#[async_trait]
impl Guard for BucketGuard {
    async fn check(&self, check: &Check<'_>) -> Result<(), ResourceError> {
        // A stack already gone (deleted outside kfaws, the bucket kept) deletes no bucket.
        if deletes(check.action)
            && !check.options.force_destroy_buckets
            && self.stack_exists().await?
        {
            let name = self.recorded_bucket(check.recorded);
            match bucket::contents(&self.s3, &name).await {
                Ok(Some(c)) if c.count() > 0 => {
                    return Err(Self::not_empty(&name, c, check.action))
                }
                Ok(_) => {}
                Err(e) => return Err(ResourceError::msg(e)),
            }
        }
        // A create, or an update that renames the bucket (AWS::S3::Bucket
        // `BucketName` requires replacement: a new bucket of the new name).
        let renamed = check.action == Action::Update
            && check.recorded.is_some()
            && self.recorded_bucket(check.recorded) != self.bucket;
        if renamed {
            // CloudFormation makes the new bucket, then cannot delete the old
            // one while it holds objects: the update ends with the old bucket
            // in no stack and no state.
            let old = self.recorded_bucket(check.recorded);
            match bucket::contents(&self.s3, &old).await {
                Ok(Some(c)) if c.count() > 0 => {
                    return Err(ResourceError::msg(format!(
                        "options.artifact_bucket changes the bucket from {old:?} to {:?}: \
                         CloudFormation replaces a renamed bucket and Amazon S3 deletes only \
                         empty buckets, so {old:?}, which holds {c}, would be left in no stack and \
                         no state. Copy what you need to keep, empty {old:?}, then apply again; \
                         or keep the old name",
                        self.bucket
                    )))
                }
                Ok(_) => {}
                Err(e) => return Err(ResourceError::msg(e)),
            }
        }
        if check.action == Action::Create || renamed {
            let problem = match bucket::holder(&self.s3, &self.bucket).await {
                Ok(Holder::Nobody) => None,
                // The bucket of the stack a create re-attaches to, whatever its tags say.
                Ok(Holder::Visible(_)) if check.held.contains(&self.bucket) => None,
                Ok(Holder::Visible(tags)) => {
                    let pairs = || tags.iter().map(|(k, v)| (k.as_str(), v.as_str()));
                    if !self.owner.owns(pairs()) {
                        Some(format!(
                            "already exists and {}",
                            self.owner.describe_tags(pairs())
                        ))
                    } else if check.action == Action::Create && !self.stack_exists().await? {
                        // Ours, but its stack is gone (deleted outside kfaws with the
                        // bucket retained, as a stack delete does when the bucket is not
                        // empty): CreateStack would fail on the name, again at every apply.
                        return Err(ResourceError::refused(format!(
                            "S3 bucket {:?} (options.artifact_bucket) exists with this \
                             deployment's tags but in no stack: stack {} was deleted outside \
                             kfaws and the bucket kept. CloudFormation cannot create the stack \
                             over it, and kfaws does not delete it for you: copy what you need \
                             from it, then {}; or set options.artifact_bucket = \"<another \
                             name>\" in kfaws.toml",
                            self.bucket,
                            self.stack_name,
                            empty_and_delete(&self.bucket)
                        )));
                    } else {
                        None
                    }
                }
                Ok(Holder::OtherAccount) => Some(
                    "already exists in another AWS account (HeadBucket: 403 Forbidden); bucket \
                     names are global"
                        .to_string(),
                ),
                Err(e) => return Err(ResourceError::msg(e)),
            };
            if let Some(problem) = problem {
                return Err(ResourceError::msg(format!(
                    "S3 bucket {:?} (options.artifact_bucket) {problem}; creating the stack would \
                     fail. Set options.artifact_bucket = \"<another name>\" in kfaws.toml",
                    self.bucket
                )));
            }
        }
        Ok(())
    }

    fn desired(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::from_iter([(BUCKET_FIELD.to_string(), bucket::desired_settings())])
    }

    async fn observe(
        &self,
        recorded: &ResourceState,
        _parameters: &BTreeMap<String, String>,
    ) -> Result<serde_json::Map<String, serde_json::Value>, ResourceError> {
        let name = self.recorded_bucket(Some(recorded));
        let live = bucket::settings(&self.s3, &name)
            .await
            .map_err(ResourceError::msg)?
            .unwrap_or_else(|| serde_json::Value::from(BUCKET_DELETED));
        Ok(serde_json::Map::from_iter([(
            BUCKET_FIELD.to_string(),
            live,
        )]))
    }

    async fn repair(&self, parameters: &BTreeMap<String, String>) -> Result<(), ResourceError> {
        let name = parameters.get("BucketName").unwrap_or(&self.bucket);
        let live = match bucket::settings(&self.s3, name)
            .await
            .map_err(ResourceError::msg)?
        {
            Some(live) => live,
            None => {
                let region = self
                    .s3
                    .config()
                    .region()
                    .map_or("us-east-1", |r| r.as_ref());
                let tags = [
                    (DEPLOYMENT_TAG.to_string(), self.owner.deployment.clone()),
                    (LINEAGE_TAG.to_string(), self.owner.lineage.clone()),
                ];
                bucket::recreate(&self.s3, name, region, &tags)
                    .await
                    .map_err(ResourceError::msg)?;
                tracing::info!(bucket = %name, "recreated the bucket deleted outside kfaws");
                serde_json::Value::Null
            }
        };
        bucket::put_settings(&self.s3, name, &live)
            .await
            .map_err(ResourceError::msg)
    }

    /// A bucket its stack left behind (the stack deleted outside kfaws, the bucket kept): the
    /// destroy does not delete it, and nothing records it afterwards, so the plan says so by
    /// name. Nothing otherwise (the stack's own delete deletes the bucket).
    async fn preview_delete(&self, recorded: &ResourceState) -> Result<Vec<Detail>, ResourceError> {
        let name = self.recorded_bucket(Some(recorded));
        let Some(kept) = self.left_behind(&name).await? else {
            // The stack deletes the bucket: one that holds objects got past
            // `check` only with --force-destroy-buckets, so they go first.
            return match bucket::contents(&self.s3, &name).await {
                Ok(Some(c)) if c.count() > 0 => Ok(vec![Detail {
                    action: "Remove".into(),
                    name: name.clone(),
                    kind: "AWS::S3::Bucket".into(),
                    replacement: None,
                    condition: None,
                    note: Some(format!(
                        "emptied first (--force-destroy-buckets), deleting for good what it \
                         holds: {c}"
                    )),
                }]),
                Ok(_) => Ok(vec![]),
                Err(e) => Err(ResourceError::msg(e)),
            };
        };
        Ok(vec![Detail {
            action: "Keep".into(),
            name: name.clone(),
            kind: "AWS::S3::Bucket".into(),
            replacement: None,
            condition: None,
            note: Some(format!(
                "{kept}. Not deleted by this destroy (not even with --force-destroy-buckets) and \
                 not tracked after it: once you have what you need from it, {}",
                empty_and_delete(&name)
            )),
        }])
    }

    async fn before_delete(
        &self,
        recorded: &ResourceState,
        options: &DeleteOptions,
    ) -> Result<(), ResourceError> {
        let name = self.recorded_bucket(Some(recorded));
        if !self.stack_exists().await? {
            // Deleted outside kfaws with the bucket kept: the bucket is in no stack, the
            // delete removes only the state entry, and nothing empties it (not even
            // `--force-destroy-buckets`, which is about buckets a plan deletes).
            tracing::warn!(
                "S3 bucket {name} is left as it is: stack {} was deleted outside kfaws and kept \
                 it, and kfaws no longer tracks it; delete it yourself once you have what you need \
                 from it",
                self.stack_name
            );
            return Ok(());
        }
        if options.force_destroy_buckets {
            let deleted = bucket::empty(&self.s3, &name)
                .await
                .map_err(ResourceError::msg)?;
            // Shown at the default level: objects that cannot be recovered went.
            tracing::warn!(
                "emptied S3 bucket {name} before deleting it (--force-destroy-buckets): deleted \
                 {deleted}"
            );
            return Ok(());
        }
        // A saved plan may be applied after objects were written.
        match bucket::contents(&self.s3, &name).await {
            // Delete wording: the hook is not told whether a replacement follows.
            Ok(Some(c)) if c.count() > 0 => Err(Self::not_empty(&name, c, Action::Delete)),
            Ok(_) => Ok(()),
            Err(e) => Err(ResourceError::msg(e)),
        }
    }
}

/// Guards the EFS file system of `stack.efs` (its `FileSystemId` output): one deleted
/// outside kfaws is drift, reported as the stack's `health`, so the plan replaces the stack
/// (CloudFormation does not recreate a resource deleted behind its back, and a stack update
/// leaves it gone) instead of saying the infrastructure matches while every job on `efs:` data
/// would fail. The stack holds only the file system and its mount targets (the artifact bucket
/// is in `stack.storage`), so the replacement touches nothing else; `k8s.efs-storage` follows
/// the new `FileSystemId`.
pub struct FileSystemGuard {
    /// The EFS client.
    pub efs: aws_sdk_efs::Client,
}

/// The stack output naming the file system (`stacks/efs.yaml`).
pub const FILE_SYSTEM_OUTPUT: &str = "FileSystemId";

/// The plan detail of a file system that a delete of `stack.efs` deletes
/// with everything on it, from `DescribeFileSystems`' `SizeInBytes`: the
/// last metered size and when it was metered (EFS meters "at intervals,
/// not in real time": Amazon EFS User Guide, "Metering: how Amazon EFS
/// reports file system and object sizes"). Pure.
fn file_system_removed(id: &str, size: Option<&aws_sdk_efs::types::FileSystemSize>) -> Detail {
    let metered = size.map_or_else(String::new, |s| {
        let at = s
            .timestamp()
            .and_then(|t| chrono::DateTime::from_timestamp(t.secs(), 0))
            .map_or_else(String::new, |t| {
                format!(" at {}", t.format("%Y-%m-%d %H:%M UTC"))
            });
        format!(
            " (metered size {}{at}; EFS meters at intervals, so recent writes may not show)",
            indicatif::HumanBytes(u64::try_from(s.value()).unwrap_or(0))
        )
    });
    Detail {
        action: "Remove".into(),
        name: id.to_string(),
        kind: "EFS file system".into(),
        replacement: None,
        condition: None,
        note: Some(format!(
            "deleted with every file on it{metered}, training data and checkpoints included; \
             kfaws takes no backup: copy what you need first (AWS Backup, or from a pod that \
             mounts efs-claim)"
        )),
    }
}

#[async_trait]
impl Guard for FileSystemGuard {
    /// The file system the delete takes with it, with its metered size, so
    /// that a destroy or replacement plan shows the data it deletes (EFS
    /// keeps no copy of a deleted file system). Nothing when it is gone.
    async fn preview_delete(&self, recorded: &ResourceState) -> Result<Vec<Detail>, ResourceError> {
        let Some(id) = recorded
            .outputs
            .get(FILE_SYSTEM_OUTPUT)
            .and_then(serde_json::Value::as_str)
        else {
            return Ok(Vec::new());
        };
        match self
            .efs
            .describe_file_systems()
            .file_system_id(id)
            .send()
            .await
        {
            Ok(out) => Ok(out
                .file_systems()
                .iter()
                .filter(|f| {
                    !matches!(
                        f.life_cycle_state(),
                        aws_sdk_efs::types::LifeCycleState::Deleting
                            | aws_sdk_efs::types::LifeCycleState::Deleted
                    )
                })
                .map(|f| file_system_removed(id, f.size_in_bytes()))
                .collect()),
            Err(e) if e.code() == Some("FileSystemNotFound") => Ok(Vec::new()),
            Err(e) => Err(ResourceError::msg(format!(
                "DescribeFileSystems {id}: {}",
                error_message(&e)
            ))),
        }
    }

    async fn observe(
        &self,
        recorded: &ResourceState,
        _parameters: &BTreeMap<String, String>,
    ) -> Result<serde_json::Map<String, serde_json::Value>, ResourceError> {
        let Some(id) = recorded
            .outputs
            .get(FILE_SYSTEM_OUTPUT)
            .and_then(serde_json::Value::as_str)
        else {
            return Ok(serde_json::Map::new());
        };
        let gone = match self
            .efs
            .describe_file_systems()
            .file_system_id(id)
            .send()
            .await
        {
            // DescribeFileSystems lists a file system being deleted until it is gone.
            Ok(out) => out.file_systems().iter().all(|f| {
                matches!(
                    f.life_cycle_state(),
                    aws_sdk_efs::types::LifeCycleState::Deleting
                        | aws_sdk_efs::types::LifeCycleState::Deleted
                )
            }),
            Err(e) if e.code() == Some("FileSystemNotFound") => true,
            Err(e) => {
                return Err(ResourceError::msg(format!(
                    "DescribeFileSystems {id}: {}",
                    error_message(&e)
                )))
            }
        };
        Ok(if gone {
            serde_json::Map::from_iter([(
                "health".to_string(),
                serde_json::json!(format!("EFS file system {id} deleted outside kfaws")),
            )])
        } else {
            serde_json::Map::new()
        })
    }
}

/// Removes what other actors left in the network stack's VPC before its
/// delete, and refuses a plan when something there may not be removed (C4).
pub struct VpcGuard {
    /// The EC2 client.
    pub ec2: aws_sdk_ec2::Client,
    /// The CloudFormation client, to list what the stacks made.
    pub cloudformation: aws_sdk_cloudformation::Client,
    /// Every stack name of the deployment (what they made is theirs to delete).
    pub stacks: Vec<String>,
    /// The EKS cluster name (the `kubernetes.io/cluster/<name>` tag).
    pub cluster: String,
    /// The EKS client, to see whether the cluster still runs.
    pub eks: aws_sdk_eks::Client,
    /// The cluster's address: a cluster the state holds is deleted before
    /// the network in the same plan.
    pub cluster_address: crate::address::Address,
    /// The network's own address (named in the way out of a refusal).
    pub address: crate::address::Address,
    /// How long to wait for the cluster's network interfaces to go.
    pub deadline: Duration,
    /// What the cluster keeps for its lifetime, as [`Kept`] values.
    pub kept: Vec<Kept>,
    /// The EFS stack's address: its recorded `FileSystemId` is the file
    /// system whose mount targets go before the network.
    pub efs_address: crate::address::Address,
}

/// A network stack parameter that cannot change once the network exists:
/// a new VPC CIDR replaces the VPC and a subnet's new CIDR or zone the
/// subnet (AWS::EC2::VPC `CidrBlock`, AWS::EC2::Subnet `CidrBlock` and
/// `AvailabilityZone`: "Update requires: Replacement", CloudFormation
/// resource reference), and an EKS cluster can move neither to another VPC
/// nor to subnets in other zones (EKS User Guide, "View Amazon EKS
/// networking requirements for VPC and subnets").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// The stack parameter, e.g. `VpcCidr`.
    pub parameter: &'static str,
    /// The config field it comes from, e.g. `options.vpc_cidr`.
    pub field: &'static str,
    /// The value the config asks for.
    pub value: String,
}

/// The [`Kept`] parameters whose desired value differs from the one the
/// network was created with (`recorded`, the stack's recorded
/// parameters), as one message per config field; empty when none. Pure.
pub fn moved(kept: &[Kept], recorded: &serde_json::Value) -> Vec<String> {
    let mut by_field: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for k in kept {
        let Some(was) = recorded
            .get(k.parameter)
            .and_then(serde_json::Value::as_str)
        else {
            continue;
        };
        if was != k.value {
            by_field
                .entry(k.field)
                .or_default()
                .push(format!("{} {was} -> {}", k.parameter, k.value));
        }
    }
    by_field
        .into_iter()
        .map(|(field, changes)| {
            format!(
                "{field} cannot change once the network exists ({}): it would replace the \
                 VPC or its subnets, and an EKS cluster can move to neither. Set {field} back \
                 to the values above, or `kfaws destroy` the deployment and apply it again",
                changes.join(", ")
            )
        })
        .collect()
}

impl VpcGuard {
    fn vpc_id(recorded: Option<&ResourceState>) -> Option<String> {
        recorded?.outputs.get("VpcId")?.as_str().map(str::to_string)
    }

    /// An error when the EKS cluster still exists: the network goes only
    /// after it, and what [`vpc::clean`] removes (security groups and
    /// network interfaces tagged for the cluster) is then in use by it.
    /// Happens when the cluster left the state (`kfaws state rm`) but not
    /// AWS.
    /// `why` says why nothing deletes the cluster first ([`NOT_IN_STATE`]
    /// at plan; at the delete itself the state is not at hand).
    async fn refuse_while_the_cluster_runs(
        &self,
        vpc_id: &str,
        why: &str,
    ) -> Result<(), ResourceError> {
        let Some(cluster) = super::eks::describe_cluster(&self.eks, &self.cluster).await? else {
            return Ok(());
        };
        let status = cluster.status().map_or("unknown", |s| s.as_str());
        Err(ResourceError::msg(format!(
            "EKS cluster {} still exists (status {status}) and uses VPC {vpc_id}, but {why}; \
             the network is deleted only once the cluster is gone",
            self.cluster
        )))
    }

    /// Refuses a replacement of the network while EFS mount targets are in
    /// its VPC: a replacement deletes the network alone, so its delete would
    /// wait for them until its deadline. The way out depends on whether the
    /// file system is the EFS stack's (`state` records it at
    /// `efs_address`): `kfaws destroy --target` the network takes the EFS
    /// stack first; another file system's mount targets are the user's to
    /// delete.
    fn refuse_replacement_under_mount_targets(
        &self,
        vpc_id: &str,
        survey: &vpc::Survey,
        state: &crate::state::State,
    ) -> Result<(), ResourceError> {
        let recorded = self.recorded_file_system(state);
        let held = mount_targets(survey, |_| true);
        if held.is_empty() {
            return Ok(());
        }
        let way_out = if held.keys().all(|fs| Some(*fs) == recorded) {
            format!(
                "`kfaws destroy --target {}` deletes {} (the file system and the files on it) \
                 first, then the network; then `kfaws apply`",
                self.address, self.efs_address
            )
        } else {
            format!(
                "delete the mount targets this deployment does not record yourself ({} records \
                 {}), then plan again",
                self.efs_address,
                recorded.unwrap_or("no file system")
            )
        };
        Err(ResourceError::msg(format!(
            "the network must be replaced, which deletes VPC {vpc_id}, but EFS mount targets of \
             file system(s) {} are in its subnets and the replacement does not delete them (its \
             delete would wait for them until its deadline); nothing was changed. To rebuild the \
             network, {way_out}",
            listed(&held)
        )))
    }

    /// The file system the EFS stack's entry in `state` records, if any.
    fn recorded_file_system<'s>(&self, state: &'s crate::state::State) -> Option<&'s str> {
        state
            .resources
            .get(&self.efs_address)
            .and_then(|r| r.outputs.get("FileSystemId"))
            .and_then(serde_json::Value::as_str)
    }

    /// An error when the VPC holds EFS mount targets of a file system that
    /// the state's EFS stack does not record: nothing in the plan deletes
    /// them (the stack left the state, or the file system is someone
    /// else's), and the network's delete would wait for their interfaces
    /// until its deadline.
    fn refuse_stray_mount_targets(
        &self,
        vpc_id: &str,
        survey: &vpc::Survey,
        state: &crate::state::State,
    ) -> Result<(), ResourceError> {
        let recorded = self.recorded_file_system(state);
        let stray = mount_targets(survey, |fs| Some(fs) != recorded);
        if stray.is_empty() {
            return Ok(());
        }
        Err(ResourceError::msg(format!(
            "VPC {vpc_id} holds EFS mount targets of file system(s) {} that this deployment's \
             state does not record ({} is not in it, or records another), so nothing deletes \
             them before the network and its delete would wait for them until its deadline; \
             nothing was deleted. If the EFS stack left the state (`kfaws state rm {}`) and \
             still carries this deployment's tags, `kfaws apply --target {}` imports it and \
             destroy then deletes it; otherwise delete the file system's mount targets \
             yourself, then run destroy again",
            listed(&stray),
            self.efs_address,
            self.efs_address,
            self.efs_address
        )))
    }

    /// Physical ids of every resource of the deployment's live stacks.
    async fn ours(&self) -> Result<BTreeSet<String>, ResourceError> {
        let mut ours = BTreeSet::new();
        for name in &self.stacks {
            match self
                .cloudformation
                .describe_stack_resources()
                .stack_name(name)
                .send()
                .await
            {
                Ok(out) => ours.extend(
                    out.stack_resources()
                        .iter()
                        .filter_map(|r| r.physical_resource_id().map(str::to_string)),
                ),
                Err(e) if e.message().is_some_and(|m| m.contains("does not exist")) => {}
                Err(e) => {
                    return Err(ResourceError::msg(format!(
                        "DescribeStackResources {name}: {}",
                        error_message(&e)
                    )))
                }
            }
        }
        Ok(ours)
    }
}

/// The EFS mount targets' network interfaces in `survey`, by file system,
/// for the file systems `keep` selects.
fn mount_targets(survey: &vpc::Survey, keep: impl Fn(&str) -> bool) -> BTreeMap<&str, Vec<&str>> {
    let mut by_fs: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for eni in &survey.enis {
        if let Some(fs) = vpc::mount_target_file_system(eni).filter(|fs| keep(fs)) {
            by_fs.entry(fs).or_default().push(&eni.id);
        }
    }
    by_fs
}

/// `fs-1 (eni-1, eni-2), fs-2 (eni-3)`.
fn listed(by_fs: &BTreeMap<&str, Vec<&str>>) -> String {
    by_fs
        .iter()
        .map(|(fs, enis)| format!("{fs} ({})", enis.join(", ")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a cluster that exists is not deleted before the network: it left
/// the state.
const NOT_IN_STATE: &str =
    "it is not in this deployment's state (removed with `kfaws state rm`?), \
     so nothing deletes it first. If it still carries this deployment's kfaws:deployment and \
     kfaws:lineage tags, `kfaws apply` adopts it again; otherwise (or if it is not to be kept) \
     delete it yourself; then run this again";

#[async_trait]
impl Guard for VpcGuard {
    async fn check(&self, check: &Check<'_>) -> Result<(), ResourceError> {
        if check.action == Action::Update {
            let recorded = check.recorded.and_then(|r| r.spec.get("parameters"));
            let problems = recorded.map(|p| moved(&self.kept, p)).unwrap_or_default();
            if !problems.is_empty() {
                return Err(ResourceError::msg(problems.join("\n")));
            }
        }
        let Some(vpc_id) = Self::vpc_id(check.recorded) else {
            return Ok(());
        };
        // A replacement (a network stack left broken, e.g. DELETE_FAILED)
        // deletes the VPC and makes another, which an EKS cluster cannot
        // follow: refused while one runs in it, or while EFS mount targets
        // (which the replacement does not delete) hold its subnets.
        if check.action == Action::Replace {
            if check.state.resources.contains_key(&self.cluster_address) {
                return Err(ResourceError::msg(format!(
                    "the network must be replaced, which deletes VPC {vpc_id}, but EKS cluster \
                     {} ({}) runs in it and an EKS cluster cannot move to another VPC; nothing \
                     was changed. To rebuild the network, delete what runs on it first: `kfaws \
                     destroy --target {}` deletes the cluster, its node groups and Kubernetes \
                     bundles, then the network; then `kfaws apply`",
                    self.cluster, self.cluster_address, self.address
                )));
            }
            self.refuse_while_the_cluster_runs(&vpc_id, NOT_IN_STATE)
                .await
                .map_err(|e| ResourceError::msg(format!("{e}; nothing was changed")))?;
            let survey = vpc::survey(&self.ec2, &vpc_id)
                .await
                .map_err(ResourceError::msg)?;
            return self.refuse_replacement_under_mount_targets(&vpc_id, &survey, check.state);
        }
        // A destroy is checked before anything is deleted.
        if check.action != Action::Delete {
            return Ok(());
        }
        // A cluster in the state is deleted before the network.
        if !check.state.resources.contains_key(&self.cluster_address) {
            self.refuse_while_the_cluster_runs(&vpc_id, NOT_IN_STATE)
                .await
                .map_err(|e| ResourceError::msg(format!("{e}; nothing was deleted")))?;
        }
        let ours = self.ours().await?;
        let survey = vpc::survey(&self.ec2, &vpc_id)
            .await
            .map_err(ResourceError::msg)?;
        self.refuse_stray_mount_targets(&vpc_id, &survey, check.state)?;
        let findings = vpc::classify(&survey, &ours, &self.cluster);
        if findings.blockers.is_empty() {
            Ok(())
        } else {
            Err(ResourceError::msg(format!(
                "{}; nothing was deleted",
                vpc::blocked(&vpc_id, &findings.blockers)
            )))
        }
    }

    /// The interfaces and security groups the cluster's controllers left
    /// that [`Guard::before_delete`] would delete now, by id.
    async fn preview_delete(&self, recorded: &ResourceState) -> Result<Vec<Detail>, ResourceError> {
        let Some(vpc_id) = Self::vpc_id(Some(recorded)) else {
            return Ok(vec![]);
        };
        let ours = self.ours().await?;
        let survey = vpc::survey(&self.ec2, &vpc_id)
            .await
            .map_err(ResourceError::msg)?;
        let findings = vpc::classify(&survey, &ours, &self.cluster);
        let left = |id: &String, kind: &str| Detail {
            action: "Remove".into(),
            name: id.clone(),
            kind: kind.into(),
            replacement: None,
            condition: None,
            note: Some(format!(
                "made for cluster {} outside kfaws' stacks (by EKS or a Kubernetes controller); \
                 deleted before the VPC if still there once the cluster is gone",
                self.cluster
            )),
        };
        Ok(findings
            .remove_enis
            .iter()
            .map(|id| left(id, "network interface"))
            .chain(
                findings
                    .remove_groups
                    .iter()
                    .map(|id| left(id, "security group")),
            )
            .collect())
    }

    async fn before_delete(
        &self,
        recorded: &ResourceState,
        _: &DeleteOptions,
    ) -> Result<(), ResourceError> {
        let Some(vpc_id) = Self::vpc_id(Some(recorded)) else {
            return Ok(());
        };
        self.refuse_while_the_cluster_runs(
            &vpc_id,
            "this run did not delete it first (its delete did not finish, or it left the state \
             since the plan); destroy it first: `kfaws destroy --target eks.cluster`, or plan again",
        )
        .await?;
        let ours = self.ours().await?;
        let removed = vpc::clean(&self.ec2, &vpc_id, &ours, &self.cluster, self.deadline)
            .await
            .map_err(ResourceError::msg)?;
        if !removed.is_empty() {
            // Not made by kfaws: said at the default log level, by id.
            tracing::warn!(
                "deleted what the cluster's controllers left in VPC {vpc_id} (tagged for cluster \
                 {} or in its security group, not created by kfaws): {}",
                self.cluster,
                removed.join(", ")
            );
        }
        Ok(())
    }
}

/// Refuses to delete `stack.iam` while an EKS cluster outside this state
/// still uses what the stack made: its cluster role (`ClusterRoleArn`; a
/// cluster whose role is gone cannot manage its network interfaces or
/// load balancers) or its secrets key (`SecretsKeyArn`; a KMS key scheduled
/// for deletion leaves the cluster's Secrets unreadable once it is deleted:
/// "Deleting a KMS key", AWS KMS Developer Guide). Happens when the cluster
/// left the state (`kfaws state rm eks.cluster`) but not AWS; a cluster in
/// the state is deleted before the stack in the same plan.
pub struct InUseGuard {
    /// The EKS client.
    pub eks: aws_sdk_eks::Client,
    /// The EKS cluster name.
    pub cluster: String,
    /// The cluster's address in the state.
    pub cluster_address: crate::address::Address,
    /// The stack's own address (named in the way out of a refusal).
    pub address: crate::address::Address,
}

impl InUseGuard {
    /// What of `recorded` (the stack's outputs) the live cluster uses, as
    /// phrases; empty when there is no such cluster or it uses none.
    async fn used(&self, recorded: &ResourceState) -> Result<Vec<String>, ResourceError> {
        let Some(cluster) = super::eks::describe_cluster(&self.eks, &self.cluster).await? else {
            return Ok(vec![]);
        };
        let output = |key: &str| {
            recorded
                .outputs
                .get(key)
                .and_then(serde_json::Value::as_str)
        };
        let mut used = Vec::new();
        if let Some(role) = output("ClusterRoleArn").filter(|r| cluster.role_arn() == Some(*r)) {
            used.push(format!("its cluster role {role}"));
        }
        let keys = cluster
            .encryption_config()
            .iter()
            .filter_map(|c| c.provider().and_then(|p| p.key_arn()));
        if let Some(key) =
            output(super::eks::cluster::KEY_OUTPUT).filter(|k| keys.clone().any(|used| used == *k))
        {
            used.push(format!("its secrets encryption key {key}"));
        }
        if used.is_empty() {
            return Ok(used);
        }
        let status = cluster.status().map_or("unknown", |s| s.as_str());
        used.insert(0, format!("EKS cluster {} (status {status})", self.cluster));
        Ok(used)
    }

    fn refusal(used: &[String], why: &str) -> ResourceError {
        let (cluster, what) = used.split_first().expect("a cluster and what it uses");
        ResourceError::msg(format!(
            "{cluster} still uses {} made by this stack, but {why}; the roles and the key are \
             deleted only once the cluster is gone",
            what.join(" and ")
        ))
    }
}

#[async_trait]
impl Guard for InUseGuard {
    async fn check(&self, check: &Check<'_>) -> Result<(), ResourceError> {
        let Some(recorded) = check.recorded else {
            return Ok(());
        };
        let in_state = check.state.resources.contains_key(&self.cluster_address);
        // A destroy deletes a cluster in the state first; a replacement (a
        // stack left broken) deletes the roles and key under it whatever
        // records it, and a cluster cannot take another key.
        let checked = match check.action {
            Action::Delete => !in_state,
            Action::Replace => true,
            _ => false,
        };
        if !checked {
            return Ok(());
        }
        let used = self.used(recorded).await?;
        if used.is_empty() {
            return Ok(());
        }
        if check.action == Action::Delete {
            return Err(ResourceError::msg(format!(
                "{}; nothing was deleted",
                Self::refusal(&used, NOT_IN_STATE)
            )));
        }
        Err(ResourceError::msg(format!(
            "{}; nothing was changed. To rebuild the stack, delete what runs on it first: `kfaws \
             destroy --target {}` deletes the cluster with everything on it and then the stack; \
             then `kfaws apply`",
            Self::refusal(
                &used,
                "the stack must be replaced, which deletes them (EKS cannot change a cluster's \
                 role or secrets key)"
            ),
            self.address
        )))
    }

    async fn before_delete(
        &self,
        recorded: &ResourceState,
        _: &DeleteOptions,
    ) -> Result<(), ResourceError> {
        let used = self.used(recorded).await?;
        if used.is_empty() {
            return Ok(());
        }
        Err(Self::refusal(
            &used,
            "this run did not delete it first (its delete did not finish, or it left the state \
             since the plan); destroy it first: `kfaws destroy --target eks.cluster`, or plan again",
        ))
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_efs::types::FileSystemSize;

    use super::{added, file_system_removed, policy_account};
    use crate::plan::Action;

    #[test]
    fn a_deleted_file_system_is_named_with_its_metered_size_and_time() {
        let size = FileSystemSize::builder()
            .value(3 * 1024 * 1024 * 1024)
            .timestamp(aws_smithy_types::DateTime::from_secs(1_796_000_000))
            .build();
        let d = file_system_removed("fs-0123", Some(&size));
        assert_eq!(
            (d.action.as_str(), d.name.as_str(), d.kind.as_str()),
            ("Remove", "fs-0123", "EFS file system")
        );
        let note = d.note.unwrap();
        assert!(
            note.starts_with(
                "deleted with every file on it (metered size 3.00 GiB at 2026-11-30 00:53 UTC; EFS meters at intervals, so recent writes may not show)"
            ) && note.contains("kfaws takes no backup"),
            "{note}"
        );
        // Without a size (not reported), the note still says what is lost.
        let note = file_system_removed("fs-0123", None).note.unwrap();
        assert!(
            note.starts_with("deleted with every file on it, "),
            "{note}"
        );
    }

    #[test]
    fn a_policy_arn_gives_its_account() {
        assert_eq!(
            policy_account("arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"),
            Some("aws")
        );
        assert_eq!(
            policy_account("arn:aws-cn:iam::123456789012:policy/team/Mine"),
            Some("123456789012")
        );
        assert_eq!(policy_account("arn:aws:iam::123456789012:role/Mine"), None);
        assert_eq!(policy_account("AmazonSSMManagedInstanceCore"), None);
    }

    #[test]
    fn a_create_checks_every_policy_an_update_only_those_it_adds() {
        let policies = vec![
            "arn:aws:iam::aws:policy/A".to_string(),
            "arn:aws:iam::aws:policy/B".to_string(),
        ];
        let all = ["arn:aws:iam::aws:policy/A", "arn:aws:iam::aws:policy/B"];
        let recorded = Some("arn:aws:iam::aws:policy/X,arn:aws:iam::aws:policy/A");
        assert_eq!(added(&policies, Action::Create, recorded), all);
        assert_eq!(added(&policies, Action::Replace, recorded), all);
        assert_eq!(
            added(&policies, Action::Update, recorded),
            ["arn:aws:iam::aws:policy/B"]
        );
        assert_eq!(added(&policies, Action::Update, None), all);
        assert!(added(
            &policies,
            Action::Update,
            Some("arn:aws:iam::aws:policy/B,arn:aws:iam::aws:policy/A")
        )
        .is_empty());
        assert!(added(&policies, Action::Delete, None).is_empty());
        assert!(added(&policies, Action::NoOp, None).is_empty());
    }
}
