//! A CloudFormation stack as a graph resource (`aws_cloudformation_stack`).
//!
//! The template is embedded in the binary; parameters come from the config
//! (static, part of the spec) and from dependencies' outputs (resolved at
//! apply time). Calls and states follow the AWS CloudFormation API
//! Reference:
//! - create passes the idempotency token as `ClientRequestToken`; a stack of
//!   the same name that carries our deployment tag is re-attached to (the
//!   previous create was interrupted), one without it is refused;
//! - waits poll `DescribeStacks` until `CREATE_COMPLETE` / `UPDATE_COMPLETE`
//!   / gone, and a failure reports the first failing resource of the latest
//!   operation and its reason from `DescribeStackEvents`;
//! - `plan` shows an update's resource changes from a change set it creates
//!   and deletes again; `apply` updates through a change set it executes;
//!   a change set without changes ("No updates are to be performed") is
//!   success, and deleted (only an executed change set goes by itself);
//! - every delete is a DeleteStack request with a token of its own, so a
//!   stack an earlier delete left `DELETE_FAILED` is deleted again;
//! - a stack left in `ROLLBACK_COMPLETE` can only be deleted, so create
//!   deletes it first;
//! - a stack left in `UPDATE_ROLLBACK_FAILED` takes no change set: an update
//!   continues its rollback first (`ContinueUpdateRollback`, skipping no
//!   resource), and the plan lists the resources whose rollback failed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_cloudformation::error::ProvideErrorMetadata;
use aws_sdk_cloudformation::types::{
    Capability, ChangeSetType, OnFailure, Parameter, ResourceStatus, Stack, StackStatus, Tag,
};
use aws_sdk_cloudformation::Client;
use serde_json::{json, Value};

use super::wait::{wait_until, Backoff, Poll, Tolerance};
use crate::address::Address;
use crate::plan::Action;
use crate::resource::{
    unless_interrupted, Applied, Check, DeleteOptions, Detail, Guard, Inputs, Observed, Outputs,
    Resource, ResourceError,
};
use crate::state::ResourceState;

/// The tag every kfaws stack carries, naming its deployment.
pub const DEPLOYMENT_TAG: &str = "kfaws:deployment";

/// The tag naming the lineage of the state that created the stack: two
/// copies of a deployment's state (two folders, two machines) never adopt
/// each other's stacks.
pub const LINEAGE_TAG: &str = "kfaws:lineage";

/// Stack-level statuses that begin an operation (AWS CloudFormation User Guide, "Stack
/// status codes"); rollbacks and cleanups continue the operation before them.
const OPERATION_STARTS: [&str; 4] = [
    "CREATE_IN_PROGRESS",
    "UPDATE_IN_PROGRESS",
    "DELETE_IN_PROGRESS",
    "IMPORT_IN_PROGRESS",
];

/// Pages of stack events (100 events each) read for a failure's cause: more than any of our
/// templates' operations emit (5 to 40 resources, a handful of events each).
const MAX_EVENT_PAGES: usize = 10;

/// What [`health`] says of a stack that works.
const HEALTHY: &str = "healthy";

/// Whether a stack in `status` works: `healthy`, or the status itself for
/// the states a stack is left in after a failure that only deleting it
/// resolves (AWS CloudFormation User Guide, "Stack status codes":
/// `ROLLBACK_COMPLETE` and `ROLLBACK_FAILED` after a failed create,
/// `DELETE_FAILED`), and `DELETE_IN_PROGRESS`: a delete started outside kfaws
/// cannot be stopped, so the stack is as good as gone (as the cluster's and
/// node groups' `DELETING`). `UPDATE_ROLLBACK_COMPLETE` works: the previous
/// template and parameters are back in place. `UPDATE_ROLLBACK_FAILED` is
/// not resolved by deleting the stack (with the VPC, the cluster or the
/// file system in it) but by continuing the rollback
/// ([ContinueUpdateRollback](https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ContinueUpdateRollback.html)):
/// [`ROLLBACK_FAILED_FIELD`] says so, and an update repairs it in place.
pub fn health(status: &str) -> &str {
    match status {
        "ROLLBACK_COMPLETE" | "ROLLBACK_FAILED" | "DELETE_IN_PROGRESS" | "DELETE_FAILED"
        | "CREATE_FAILED" => status,
        _ => HEALTHY,
    }
}

/// The spec field that is `true` while the stack is `UPDATE_ROLLBACK_FAILED`: CloudFormation
/// could not roll back a failed update (a resource of the previous template changed or
/// deleted outside it is the usual cause), and the stack takes no update until the rollback
/// is continued. The desired value is `false`; the update that repairs it calls
/// ContinueUpdateRollback first (AWS CloudFormation User Guide, "Continue rolling back an
/// update").
pub const ROLLBACK_FAILED_FIELD: &str = "update_rollback_failed";

/// A parameter filled from a dependency's output at apply time.
#[derive(Debug, Clone)]
pub struct InputParameter {
    /// Template parameter name.
    pub parameter: &'static str,
    /// The dependency.
    pub from: Address,
    /// Its output.
    pub output: &'static str,
}

/// One CloudFormation stack.
pub struct StackResource {
    /// Graph address, e.g. `stack.network`.
    pub address: Address,
    /// The stack name (validated by [`crate::naming::CFN_STACK`]).
    pub stack_name: String,
    /// The deployment, written as the [`DEPLOYMENT_TAG`].
    pub deployment: String,
    /// The lineage of the state managing the stack, written as the [`LINEAGE_TAG`].
    pub lineage: String,
    /// The template body (YAML).
    pub template: &'static str,
    /// Parameters known from the config.
    pub parameters: BTreeMap<String, String>,
    /// Parameters filled from dependencies.
    pub inputs: Vec<InputParameter>,
    /// Expected create time.
    pub estimate: Duration,
    /// The client.
    pub client: Client,
    /// Checks and preparations for what the stack holds (roles, a bucket,
    /// a VPC), run in order by [`Resource::check`] and
    /// [`Resource::before_delete`].
    pub guards: Vec<std::sync::Arc<dyn Guard>>,
}

use super::error_message as sdk_message;

fn is_missing<E: ProvideErrorMetadata>(e: &aws_sdk_cloudformation::error::SdkError<E>) -> bool {
    e.as_service_error()
        .and_then(ProvideErrorMetadata::message)
        .is_some_and(|m| m.contains("does not exist"))
}

impl StackResource {
    fn template_hash(&self) -> String {
        crate::state::spec_hash(&Value::String(self.template.to_string()))
    }

    /// The stack named `id` (a stack name or a stack ID/ARN), unless it is
    /// gone. By ARN, a deleted stack is found in `DELETE_COMPLETE`, which
    /// counts as gone; by name, only a live stack is found.
    async fn describe(&self, id: &str) -> Result<Option<Stack>, ResourceError> {
        match self.client.describe_stacks().stack_name(id).send().await {
            Ok(out) => Ok(out
                .stacks()
                .first()
                .filter(|s| s.stack_status() != Some(&StackStatus::DeleteComplete))
                .cloned()),
            Err(e) if is_missing(&e) => Ok(None),
            Err(e) => Err(ResourceError::msg(format!(
                "DescribeStacks {id}: {}",
                sdk_message(&e)
            ))),
        }
    }

    /// The first resource that failed in stack `id`'s latest operation, from its events
    /// ([DescribeStackEvents](https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DescribeStackEvents.html)
    /// lists them newest first, a page at a time). The operation begins at the newest
    /// stack-level event in [`OPERATION_STARTS`]; failures of earlier operations are not its
    /// cause, so the walk stops there (or after [`MAX_EVENT_PAGES`] pages). Without a failed
    /// resource, the stack's own reason for rolling back or failing (a parameter, capability
    /// or hook that refused the operation); a page that cannot be read ends the walk and is
    /// said when nothing was found before it.
    async fn first_failure(&self, id: &str) -> String {
        let mut oldest_failure = None;
        // The stack's own reason for rolling back or failing, for an operation that failed
        // without a resource failing (a parameter, capability or hook refused it).
        let mut stack_reason = None;
        let (read, unread) = self
            .walk_events(id, |e| {
                let status = e.resource_status().map_or("", |s| s.as_str());
                if e.logical_resource_id() == Some(self.stack_name.as_str()) {
                    if OPERATION_STARTS.contains(&status) {
                        return false;
                    }
                    let failing = status.ends_with("_FAILED") || status.contains("ROLLBACK_IN");
                    if let (true, Some(reason)) = (failing, e.resource_status_reason()) {
                        stack_reason = Some(format!("stack {status}: {reason}"));
                    }
                } else if status.ends_with("_FAILED") {
                    oldest_failure = Some(format!(
                        "{} ({}): {status}: {}",
                        e.logical_resource_id().unwrap_or("?"),
                        e.resource_type().unwrap_or("?"),
                        e.resource_status_reason().unwrap_or("no reason given")
                    ));
                }
                true
            })
            .await;
        match (oldest_failure.or(stack_reason), unread) {
            (Some(failure), _) => failure,
            (None, Some(error)) => format!(
                "stack events unreadable after {read} page(s) (DescribeStackEvents: {error})"
            ),
            (None, None) => "no failed resource in the stack events".into(),
        }
    }

    fn all_parameters(&self, inputs: &Inputs) -> Result<Vec<Parameter>, ResourceError> {
        let mut params: Vec<Parameter> = self
            .parameters
            .iter()
            .map(|(k, v)| {
                Parameter::builder()
                    .parameter_key(k)
                    .parameter_value(v)
                    .build()
            })
            .collect();
        for p in &self.inputs {
            let value = inputs.get(&p.from, p.output)?;
            let value = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_string);
            params.push(
                Parameter::builder()
                    .parameter_key(p.parameter)
                    .parameter_value(value)
                    .build(),
            );
        }
        Ok(params)
    }

    fn tags(&self) -> Vec<Tag> {
        vec![
            Tag::builder()
                .key(DEPLOYMENT_TAG)
                .value(&self.deployment)
                .build(),
            Tag::builder().key(LINEAGE_TAG).value(&self.lineage).build(),
            Tag::builder()
                .key("kfaws:address")
                .value(self.address.as_str())
                .build(),
        ]
    }

    fn tag<'a>(stack: &'a Stack, key: &str) -> Option<&'a str> {
        stack
            .tags()
            .iter()
            .find(|t| t.key() == Some(key))
            .and_then(|t| t.value())
    }

    /// Whether the stack was made by this deployment's state: deployment
    /// and lineage tags both match.
    fn owned(&self, stack: &Stack) -> bool {
        Self::tag(stack, DEPLOYMENT_TAG) == Some(self.deployment.as_str())
            && Self::tag(stack, LINEAGE_TAG) == Some(self.lineage.as_str())
    }

    /// Why an existing stack of our name may not be adopted.
    fn foreign(&self, stack: &Stack) -> ResourceError {
        let why = match (
            Self::tag(stack, DEPLOYMENT_TAG),
            Self::tag(stack, LINEAGE_TAG),
        ) {
            (Some(d), Some(l)) if d == self.deployment => format!(
                "its tags say it belongs to another kfaws state of deployment {d:?} (lineage {l}): \
                 another copy of this deployment's state is in use elsewhere (or the tags were \
                 edited by hand): use that state, or destroy from it first"
            ),
            _ => "it was not created by kfaws for this deployment; delete or rename it".into(),
        };
        ResourceError::refused(format!("stack {} already exists: {why}", self.stack_name))
    }

    /// The resources stack `id` holds (ListStackResources), as its delete removes them:
    /// `(physical id, Remove detail)` by logical id, without those already deleted.
    async fn resources_of(&self, id: &str) -> Result<Vec<(Option<String>, Detail)>, ResourceError> {
        let mut pages = self
            .client
            .list_stack_resources()
            .stack_name(id)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                ResourceError::msg(format!("ListStackResources {id}: {}", sdk_message(&e)))
            })?;
            for r in page.stack_resource_summaries() {
                if r.resource_status() == Some(&ResourceStatus::DeleteComplete) {
                    continue;
                }
                out.push((
                    r.physical_resource_id().map(str::to_string),
                    Detail {
                        action: "Remove".into(),
                        name: r.logical_resource_id().unwrap_or_default().to_string(),
                        kind: r.resource_type().unwrap_or("unknown").to_string(),
                        replacement: None,
                        condition: None,
                        note: None,
                    },
                ));
            }
        }
        out.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        Ok(out)
    }

    /// The identifier to reach a recorded stack by: its stack ID when
    /// recorded (a later stack of the same name is another stack), else its
    /// name, if the stack of that name is ours.
    async fn recorded_stack(
        &self,
        recorded: Option<&ResourceState>,
    ) -> Result<Option<Stack>, ResourceError> {
        if let Some(id) = recorded.and_then(|r| r.physical_id.as_deref()) {
            return self.describe(id).await;
        }
        Ok(self
            .describe(&self.stack_name)
            .await?
            .filter(|s| self.owned(s)))
    }

    async fn wait_for(
        &self,
        id: &str,
        done: &[StackStatus],
        gone_ok: bool,
    ) -> Result<Option<Stack>, ResourceError> {
        let schedule = Backoff::with_deadline(self.timeout());
        // A poll that fails even after the SDK's retries (throttling, 5xx)
        // is tolerated a few times in a row before the wait gives up.
        let tolerance = Tolerance::default();
        wait_until(schedule, || async {
            let stack = match self.describe(id).await {
                Ok(s) => {
                    tolerance.ok();
                    s
                }
                Err(e) => return tolerance.failed(e.to_string()),
            };
            let Some(stack) = stack else {
                return if gone_ok {
                    Poll::Ready(None)
                } else {
                    Poll::Failed(format!("stack {} disappeared", self.stack_name))
                };
            };
            let status = stack
                .stack_status()
                .cloned()
                .unwrap_or(StackStatus::from("UNKNOWN"));
            if done.contains(&status) {
                return Poll::Ready(Some(stack));
            }
            let s = status.as_str();
            tracing::debug!(stack = %self.stack_name, status = s, "polled");
            if s.ends_with("_IN_PROGRESS") {
                return Poll::Pending(s.to_string());
            }
            let reason = self.first_failure(id).await;
            Poll::Failed(format!(
                "stack {} is {s}; first failure: {reason}",
                self.stack_name
            ))
        })
        .await
        .map_err(|e| ResourceError::msg(e.to_string()))
    }

    fn applied(stack: &Stack) -> Applied {
        let outputs: Outputs = stack
            .outputs()
            .iter()
            .filter_map(|o| Some((o.output_key()?.to_string(), json!(o.output_value()?))))
            .collect();
        Applied {
            physical_id: stack.stack_id().unwrap_or_default().to_string(),
            outputs,
        }
    }
}

#[async_trait]
impl Resource for StackResource {
    fn address(&self) -> &Address {
        &self.address
    }

    fn kind(&self) -> &'static str {
        "aws_cloudformation_stack"
    }

    fn dependencies(&self) -> Vec<Address> {
        let mut deps: Vec<Address> = self.inputs.iter().map(|p| p.from.clone()).collect();
        deps.sort();
        deps.dedup();
        deps
    }

    fn spec(&self) -> Value {
        let mut spec = json!({
            "stack_name": self.stack_name,
            "template_sha256": self.template_hash(),
            "parameters": self.parameters,
            "health": HEALTHY,
            ROLLBACK_FAILED_FIELD: false,
        });
        for guard in &self.guards {
            spec.as_object_mut()
                .expect("an object")
                .extend(guard.desired());
        }
        spec
    }

    fn replace_fields(&self) -> &[&str] {
        // A stack that failed and was left unusable can only be deleted and
        // made again.
        &["stack_name", "health"]
    }

    fn estimate(&self) -> Duration {
        self.estimate
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(40 * 60)
    }

    async fn read(&self, recorded: Option<&ResourceState>) -> Result<Observed, ResourceError> {
        let Some(stack) = self.recorded_stack(recorded).await? else {
            return Ok(Observed::Gone);
        };
        // Every live parameter, inputs included (the guards read those);
        // the spec compares the ones from the config.
        let all_params: BTreeMap<String, String> = stack
            .parameters()
            .iter()
            .filter_map(|p| {
                Some((
                    p.parameter_key()?.to_string(),
                    p.parameter_value()?.to_string(),
                ))
            })
            .collect();
        let live_params: BTreeMap<&String, &String> = all_params
            .iter()
            .filter(|(k, _)| self.parameters.contains_key(*k))
            .collect();
        let mut spec = serde_json::Map::new();
        spec.insert("stack_name".into(), json!(stack.stack_name()));
        spec.insert(
            "health".into(),
            json!(health(
                stack.stack_status().map_or("UNKNOWN", |s| s.as_str())
            )),
        );
        spec.insert(
            ROLLBACK_FAILED_FIELD.into(),
            json!(stack.stack_status() == Some(&StackStatus::UpdateRollbackFailed)),
        );
        spec.insert("parameters".into(), json!(live_params));
        // The template as CloudFormation runs it now: an edit made outside
        // kfaws (UpdateStack with another template) is drift.
        let id = stack.stack_id().unwrap_or(&self.stack_name);
        let template = self
            .client
            .get_template()
            .stack_name(id)
            .send()
            .await
            .map_err(|e| ResourceError::msg(format!("GetTemplate {id}: {}", sdk_message(&e))))?;
        if let Some(body) = template.template_body() {
            let hash = crate::state::spec_hash(&Value::String(body.to_string()));
            spec.insert("template_sha256".into(), json!(hash));
        }
        if let Some(recorded) = recorded {
            for guard in &self.guards {
                spec.extend(guard.observe(recorded, &all_params).await?);
            }
        }
        let applied = Self::applied(&stack);
        Ok(Observed::Present {
            physical_id: Some(applied.physical_id),
            spec,
            outputs: applied.outputs,
        })
    }

    async fn create(&self, token: &str, inputs: &Inputs) -> Result<Applied, ResourceError> {
        if let Some(existing) = self.describe(&self.stack_name).await? {
            if !self.owned(&existing) {
                return Err(self.foreign(&existing));
            }
            let id = existing.stack_id().unwrap_or(&self.stack_name).to_string();
            match existing.stack_status() {
                Some(StackStatus::RollbackComplete) => {
                    // Only deletion is possible from ROLLBACK_COMPLETE.
                    self.delete_stack(&id).await?;
                }
                _ => {
                    // An earlier create of ours (interrupted before its
                    // result was recorded): re-attach. A stack whose last
                    // update rolled back works too (the previous template
                    // is back); the next plan updates it as it would any.
                    // One whose rollback failed is re-attached as well, never
                    // replaced: the next plan continues its rollback.
                    let stack = self
                        .wait_for(
                            &id,
                            &[
                                StackStatus::CreateComplete,
                                StackStatus::UpdateComplete,
                                StackStatus::UpdateRollbackComplete,
                                StackStatus::UpdateRollbackFailed,
                            ],
                            false,
                        )
                        .await?
                        .expect("not gone");
                    return Ok(Self::applied(&stack));
                }
            }
        }
        let sent = self
            .client
            .create_stack()
            .stack_name(&self.stack_name)
            .template_body(self.template)
            .set_parameters(Some(self.all_parameters(inputs)?))
            .capabilities(Capability::CapabilityNamedIam)
            .on_failure(OnFailure::Rollback)
            .client_request_token(token)
            .set_tags(Some(self.tags()))
            .send()
            .await;
        let id = match sent {
            Ok(out) => out.stack_id().unwrap_or(&self.stack_name).to_string(),
            // The same token again: the stack of our first call.
            Err(e) if e.code() == Some("AlreadyExistsException") => self.stack_name.clone(),
            Err(e) => {
                return Err(ResourceError::msg(format!(
                    "CreateStack {}: {}",
                    self.stack_name,
                    sdk_message(&e)
                )))
            }
        };
        let what = format!("stack {} to reach CREATE_COMPLETE", self.stack_name);
        let stack = unless_interrupted(
            &what,
            self.wait_for(&id, &[StackStatus::CreateComplete], false),
        )
        .await?
        .expect("not gone");
        if !self.owned(&stack) {
            return Err(self.foreign(&stack));
        }
        Ok(Self::applied(&stack))
    }

    async fn update(
        &self,
        recorded: &ResourceState,
        inputs: &Inputs,
    ) -> Result<Applied, ResourceError> {
        let id = recorded.physical_id.as_deref().unwrap_or(&self.stack_name);
        let settled = [
            StackStatus::UpdateComplete,
            StackStatus::CreateComplete,
            StackStatus::UpdateRollbackComplete,
            StackStatus::UpdateRollbackFailed,
        ];
        let what = format!("stack {} to finish updating", self.stack_name);
        // An update an interrupted run left in progress ends first: a stack
        // takes no change set while UPDATE_IN_PROGRESS.
        let stack = unless_interrupted(&what, self.wait_for(id, &settled, false))
            .await?
            .expect("not gone");
        // Nor while UPDATE_ROLLBACK_FAILED: the rollback is continued first.
        if stack.stack_status() == Some(&StackStatus::UpdateRollbackFailed) {
            self.continue_rollback(id).await?;
        }
        let name = format!("kfaws-apply-{}", uuid::Uuid::new_v4().simple());
        let set = self.change_set(&name, inputs, false).await?;
        if let Some(set) = &set {
            self.client
                .execute_change_set()
                .stack_name(&self.stack_name)
                .change_set_name(&set.id)
                .client_request_token(uuid::Uuid::new_v4().to_string())
                .send()
                .await
                .map_err(|e| {
                    ResourceError::msg(format!(
                        "ExecuteChangeSet {name} of {}: {}",
                        self.stack_name,
                        sdk_message(&e)
                    ))
                })?;
        }
        // Without changes ("didn't contain changes", CloudFormation's "No
        // updates are to be performed") the stack is already as desired.
        let stack = unless_interrupted(&what, self.wait_for(id, &settled, false))
            .await?
            .expect("not gone");
        if set.is_some() && stack.stack_status() == Some(&StackStatus::UpdateRollbackComplete) {
            let reason = self.first_failure(id).await;
            return Err(ResourceError::msg(format!(
                "stack {} is UPDATE_ROLLBACK_COMPLETE; first failure: {reason}",
                self.stack_name
            )));
        }
        if stack.stack_status() == Some(&StackStatus::UpdateRollbackFailed) {
            let reason = self.first_failure(id).await;
            let failures = self.rollback_failures(id).await;
            return Err(ResourceError::msg(format!(
                "stack {} is UPDATE_ROLLBACK_FAILED: the update failed (first failure: {reason}) \
                 and CloudFormation could not roll it back: {}; {}",
                self.stack_name,
                said(&failures),
                self.after_failed_rollback(&failures, true)
            )));
        }
        let parameters: BTreeMap<String, String> = self
            .all_parameters(inputs)?
            .into_iter()
            .filter_map(|p| Some((p.parameter_key?, p.parameter_value?)))
            .collect();
        for guard in &self.guards {
            guard.repair(&parameters).await?;
        }
        Ok(Self::applied(&stack))
    }

    fn preview_create(&self) -> Vec<Detail> {
        template_resources(self.template)
    }

    async fn importable(&self) -> Result<Option<String>, ResourceError> {
        Ok(self
            .describe(&self.stack_name)
            .await?
            .filter(|s| self.owned(s))
            .map(|s| s.stack_id().unwrap_or(&self.stack_name).to_string()))
    }

    async fn preview_update(
        &self,
        recorded: &ResourceState,
        inputs: &Inputs,
    ) -> Result<Vec<Detail>, ResourceError> {
        // CloudFormation computes no change set for a stack in UPDATE_ROLLBACK_FAILED: the
        // plan says which resources the continued rollback retries.
        if let Some(stack) = self.recorded_stack(Some(recorded)).await? {
            if stack.stack_status() == Some(&StackStatus::UpdateRollbackFailed) {
                let id = stack.stack_id().unwrap_or(&self.stack_name);
                let mut details = self.rollback_failures(id).await;
                if details.is_empty() {
                    details.push(Detail {
                        action: "Rollback".into(),
                        name: self.stack_name.clone(),
                        kind: "AWS::CloudFormation::Stack".into(),
                        replacement: None,
                        condition: None,
                        note: None,
                    });
                }
                for d in &mut details {
                    let failed = d.note.take().unwrap_or_else(|| "no reason given".into());
                    d.note = Some(format!(
                        "its rollback failed ({failed}); apply continues the rollback \
                         (ContinueUpdateRollback), then updates the stack through a change set \
                         computed after it"
                    ));
                }
                return Ok(details);
            }
        }
        let name = format!("kfaws-plan-{}", uuid::Uuid::new_v4().simple());
        // A plan leaves nothing behind: the change set goes whatever it said.
        let set = self.change_set(&name, inputs, true).await?;
        Ok(set.map(|s| s.changes).unwrap_or_default())
    }

    /// What the delete removes: every resource the live stack holds (as `terraform plan
    /// -destroy` lists each), with what its guards say in place of the resources they
    /// describe (by physical id: a bucket emptied first), then the guards' other details.
    async fn preview_delete(&self, recorded: &ResourceState) -> Result<Vec<Detail>, ResourceError> {
        let mut guarded = Vec::new();
        for guard in &self.guards {
            guarded.extend(guard.preview_delete(recorded).await?);
        }
        let live = match self.recorded_stack(Some(recorded)).await? {
            Some(stack) => {
                self.resources_of(stack.stack_id().unwrap_or(&self.stack_name))
                    .await?
            }
            None => Vec::new(),
        };
        let mut details: Vec<Detail> = live
            .into_iter()
            .map(|(physical, detail)| {
                match guarded
                    .iter()
                    .position(|g| Some(&g.name) == physical.as_ref())
                {
                    Some(i) => guarded.remove(i),
                    None => detail,
                }
            })
            .collect();
        details.append(&mut guarded);
        Ok(details)
    }

    async fn delete(&self, recorded: &ResourceState) -> Result<(), ResourceError> {
        // Only the stack kfaws recorded, or, for a create never recorded as
        // finished, the stack of that name if it carries our tags.
        let Some(stack) = self.recorded_stack(Some(recorded)).await? else {
            return Ok(());
        };
        let id = stack.stack_id().unwrap_or(&self.stack_name).to_string();
        self.delete_stack(&id).await
    }

    /// Before a create, a live stack of our name must be ours (an interrupted create, which
    /// `create` re-attaches to): another state's or anyone else's is refused here, at plan
    /// time, rather than by CreateStack half way through an apply. Then the guards.
    /// The guards are told what a stack of ours that the create re-attaches to holds
    /// ([`Check::held`]): its bucket and roles are the stack's even with their tags removed.
    async fn check(&self, check: &Check<'_>) -> Result<(), ResourceError> {
        let mut held = BTreeSet::new();
        if check.action == Action::Create {
            if let Some(existing) = self.describe(&self.stack_name).await? {
                if !self.owned(&existing) {
                    return Err(self.foreign(&existing));
                }
                let id = existing.stack_id().unwrap_or(&self.stack_name);
                held = self
                    .resources_of(id)
                    .await?
                    .into_iter()
                    .filter_map(|(physical_id, _)| physical_id)
                    .collect();
            }
        }
        let check = Check {
            held: &held,
            ..*check
        };
        for guard in &self.guards {
            guard.check(&check).await?;
        }
        Ok(())
    }

    async fn before_delete(
        &self,
        recorded: &ResourceState,
        options: &DeleteOptions,
    ) -> Result<(), ResourceError> {
        for guard in &self.guards {
            guard.before_delete(recorded, options).await?;
        }
        Ok(())
    }
}

/// A computed change set: its id and its resource changes.
struct ChangeSet {
    id: String,
    changes: Vec<Detail>,
}

/// Whether a failed change set failed only because nothing would change
/// (AWS CloudFormation User Guide, "Update stacks using change sets": "The
/// submitted information didn't contain changes").
fn no_changes(reason: &str) -> bool {
    reason.contains("didn't contain changes") || reason.contains("No updates are to be performed")
}

impl StackResource {
    /// Creates the change set `name` that would update the stack to the
    /// desired template, parameters and tags, and waits until CloudFormation
    /// has computed it
    /// ([CreateChangeSet](https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateChangeSet.html)).
    /// `None` when it contains no changes.
    ///
    /// The stack is named by its name, not its recorded ID: an update is
    /// planned only after the refresh found the recorded stack live by its
    /// ID, and a name has one live stack at a time.
    async fn change_set(
        &self,
        name: &str,
        inputs: &Inputs,
        delete_after: bool,
    ) -> Result<Option<ChangeSet>, ResourceError> {
        let created = self
            .client
            .create_change_set()
            .stack_name(&self.stack_name)
            .change_set_name(name)
            .change_set_type(ChangeSetType::Update)
            .template_body(self.template)
            .set_parameters(Some(self.all_parameters(inputs)?))
            .capabilities(Capability::CapabilityNamedIam)
            .set_tags(Some(self.tags()))
            .send()
            .await;
        let created = match created {
            Ok(out) => out,
            // Some endpoints refuse an unchanged change set at once instead
            // of failing it: nothing was created.
            Err(e) if e.message().is_some_and(no_changes) => return Ok(None),
            Err(e) => {
                return Err(ResourceError::msg(format!(
                    "CreateChangeSet {name} of {}: {}",
                    self.stack_name,
                    sdk_message(&e)
                )))
            }
        };
        let set_id = created.id().unwrap_or(name).to_string();
        let tolerance = Tolerance::default();
        let described = wait_until(Backoff::with_deadline(Duration::from_secs(300)), || async {
            match self.describe_change_set(&set_id).await {
                Ok((status, reason, changes)) => {
                    tolerance.ok();
                    match status.as_str() {
                        "CREATE_COMPLETE" => Poll::Ready(Some(changes)),
                        "FAILED" if no_changes(&reason) => Poll::Ready(None),
                        "FAILED" => Poll::Failed(format!("change set {name} failed: {reason}")),
                        other => Poll::Pending(other.to_string()),
                    }
                }
                Err(e) => tolerance.failed(e.to_string()),
            }
        })
        .await
        .map_err(|e| ResourceError::msg(format!("stack {}: {e}", self.stack_name)));
        // A change set that is not executed stays until deleted; one that found nothing to
        // change is of no use to anyone.
        if delete_after || matches!(described, Ok(None)) {
            let deleted = self
                .client
                .delete_change_set()
                .stack_name(&self.stack_name)
                .change_set_name(&set_id)
                .send()
                .await;
            if let Err(e) = deleted {
                tracing::warn!(stack = %self.stack_name, change_set = %name, error = %sdk_message(&e), "could not delete the change set");
            }
        }
        Ok(described?.map(|changes| ChangeSet {
            id: set_id,
            changes,
        }))
    }

    /// The status, status reason and resource changes of a change set (all
    /// pages of them).
    async fn describe_change_set(
        &self,
        set_id: &str,
    ) -> Result<(String, String, Vec<Detail>), ResourceError> {
        let mut details = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let out = self
                .client
                .describe_change_set()
                .stack_name(&self.stack_name)
                .change_set_name(set_id)
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| {
                    ResourceError::msg(format!("DescribeChangeSet {set_id}: {}", sdk_message(&e)))
                })?;
            details.extend(
                out.changes()
                    .iter()
                    .filter_map(|c| c.resource_change())
                    .map(|r| Detail {
                        action: r.action().map_or("?", |a| a.as_str()).to_string(),
                        name: r.logical_resource_id().unwrap_or("?").to_string(),
                        kind: r.resource_type().unwrap_or("?").to_string(),
                        replacement: r.replacement().map(|x| x.as_str().to_string()),
                        condition: None,
                        note: None,
                    }),
            );
            let status = out.status().map_or("UNKNOWN", |s| s.as_str()).to_string();
            let reason = out.status_reason().unwrap_or_default().to_string();
            match out.next_token() {
                Some(t) if status == "CREATE_COMPLETE" && !t.is_empty() => {
                    next = Some(t.to_string())
                }
                _ => return Ok((status, reason, details)),
            }
        }
    }

    /// Continues the rollback of stack `id`, which is `UPDATE_ROLLBACK_FAILED`, and waits for
    /// it to end
    /// ([ContinueUpdateRollback](https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ContinueUpdateRollback.html)).
    /// No resource is skipped: CloudFormation would mark a skipped resource rolled back
    /// while it is not, so that is left to a person who knows it is
    /// ([`Self::after_failed_rollback`] says how). A rollback that fails again is an error
    /// naming the resources and CloudFormation's reasons; the stack stays as it is.
    async fn continue_rollback(&self, id: &str) -> Result<(), ResourceError> {
        tracing::info!(stack = %self.stack_name, "UPDATE_ROLLBACK_FAILED: continuing the rollback");
        crate::engine::progress::report_status("UPDATE_ROLLBACK_FAILED: continuing the rollback");
        self.client
            .continue_update_rollback()
            .stack_name(id)
            .client_request_token(uuid::Uuid::new_v4().to_string())
            .send()
            .await
            .map_err(|e| {
                ResourceError::msg(format!(
                    "ContinueUpdateRollback {}: {}",
                    self.stack_name,
                    sdk_message(&e)
                ))
            })?;
        let what = format!("stack {} to finish its rollback", self.stack_name);
        let stack = unless_interrupted(
            &what,
            self.wait_for(
                id,
                &[
                    StackStatus::UpdateRollbackComplete,
                    StackStatus::UpdateRollbackFailed,
                ],
                false,
            ),
        )
        .await?
        .expect("not gone");
        if stack.stack_status() == Some(&StackStatus::UpdateRollbackFailed) {
            let failures = self.rollback_failures(id).await;
            return Err(ResourceError::msg(format!(
                "stack {} is still UPDATE_ROLLBACK_FAILED: CloudFormation could not roll back {}; \
                 {}",
                self.stack_name,
                said(&failures),
                self.after_failed_rollback(&failures, false)
            )));
        }
        Ok(())
    }

    /// What to do about a stack whose rollback failed on `failures`: fix the cause and apply
    /// again, or skip what cannot be rolled back with the AWS CLI (the User Guide's
    /// "Continue rolling back an update" and its troubleshooting entry "Update rollback
    /// failed"). `first`: the rollback failed for the first time (apply has not yet
    /// continued it).
    fn after_failed_rollback(&self, failures: &[Detail], first: bool) -> String {
        let skip = if failures.is_empty() {
            "LOGICAL_ID".to_string()
        } else {
            failures
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let again = if first {
            "the next apply continues the rollback (ContinueUpdateRollback) and then updates \
             the stack"
        } else {
            "apply again to continue the rollback once the cause is fixed (a resource changed or \
             deleted outside CloudFormation is the usual one: \
             https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/troubleshooting.html#troubleshooting-errors-update-rollback-failed)"
        };
        format!(
            "{again}. A resource that cannot be rolled back can be skipped by hand, after which \
             CloudFormation takes it for rolled back whatever its real state: `aws cloudformation \
             continue-update-rollback --stack-name {} --resources-to-skip {skip}`; kfaws never \
             deletes or replaces the stack for this",
            self.stack_name
        )
    }

    /// The resources whose rollback failed in stack `id`'s latest rollback, newest first, as
    /// `Rollback` details whose note is CloudFormation's reason: the resource events with a
    /// `*_FAILED` status after the stack's latest `UPDATE_ROLLBACK_IN_PROGRESS` event
    /// (DescribeStackEvents lists newest first). Empty when the events cannot be read (the
    /// caller says so in general terms).
    async fn rollback_failures(&self, id: &str) -> Vec<Detail> {
        let mut failures: Vec<Detail> = Vec::new();
        self.walk_events(id, |e| {
            let status = e.resource_status().map_or("", |s| s.as_str());
            if e.logical_resource_id() == Some(self.stack_name.as_str()) {
                return status != "UPDATE_ROLLBACK_IN_PROGRESS";
            }
            let name = e.logical_resource_id().unwrap_or("?");
            if status.ends_with("_FAILED") && !failures.iter().any(|d| d.name == name) {
                failures.push(Detail {
                    action: "Rollback".into(),
                    name: name.to_string(),
                    kind: e
                        .resource_type()
                        .filter(|t| !t.is_empty())
                        .unwrap_or("type not given")
                        .to_string(),
                    replacement: None,
                    condition: None,
                    note: Some(
                        e.resource_status_reason()
                            .unwrap_or("no reason given")
                            .to_string(),
                    ),
                });
            }
            true
        })
        .await;
        failures
    }

    /// Calls `visit` on stack `id`'s events, newest first
    /// ([DescribeStackEvents](https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DescribeStackEvents.html),
    /// a page at a time), until it answers `false` or [`MAX_EVENT_PAGES`] pages were read.
    /// Returns the pages read and, when a page could not be read (which ends the walk), why.
    async fn walk_events(
        &self,
        id: &str,
        mut visit: impl FnMut(&aws_sdk_cloudformation::types::StackEvent) -> bool,
    ) -> (usize, Option<String>) {
        let mut pages = self
            .client
            .describe_stack_events()
            .stack_name(id)
            .into_paginator()
            .send();
        let mut read = 0;
        while let Some(page) = pages.next().await {
            let page = match page {
                Ok(page) => page,
                Err(e) => return (read, Some(sdk_message(&e))),
            };
            read += 1;
            if !page.stack_events().iter().all(&mut visit) || read == MAX_EVENT_PAGES {
                break;
            }
        }
        (read, None)
    }

    /// Deletes the stack `id` (callers have just described it) and waits until it is gone.
    ///
    /// Each call is a new DeleteStack request with a `ClientRequestToken` of its own: the token
    /// marks retries of one request (DeleteStack, API reference), which the SDK's own retries of
    /// this call are. A delete run again after one that left the stack `DELETE_FAILED` (the
    /// cause removed by hand, say) is a new request: sent with the old token, CloudFormation
    /// would take it for the old one, or refuse it (`TokenAlreadyExistsException`).
    async fn delete_stack(&self, id: &str) -> Result<(), ResourceError> {
        self.client
            .delete_stack()
            .stack_name(id)
            .client_request_token(uuid::Uuid::new_v4().to_string())
            .send()
            .await
            .map_err(|e| {
                ResourceError::msg(format!(
                    "DeleteStack {}: {}",
                    self.stack_name,
                    sdk_message(&e)
                ))
            })?;
        let what = format!("stack {} to be deleted", self.stack_name);
        unless_interrupted(&what, self.wait_for(id, &[], true))
            .await
            .map(|_| ())
    }
}

/// `failures` ([`StackResource::rollback_failures`]) in a sentence: `Role (AWS::IAM::Role:
/// reason), ...`, or that the stack events did not say which.
fn said(failures: &[Detail]) -> String {
    if failures.is_empty() {
        return "the stack events do not say which resource".into();
    }
    failures
        .iter()
        .map(|d| {
            format!(
                "{} ({}: {})",
                d.name,
                d.kind,
                d.note.as_deref().unwrap_or("no reason given")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The resources a template declares, as a create adds them: logical id and
/// type, sorted by logical id; a resource with a `Condition` is added only if
/// the condition holds ([`Detail::condition`]). Template anatomy: AWS
/// CloudFormation User Guide, "Resources" and "Conditions" sections.
pub fn template_resources(template: &str) -> Vec<Detail> {
    // Short-form intrinsic functions (`!Ref`, `!Sub`, ...) are YAML tags;
    // the resource names, types and conditions read here are plain scalars.
    let Ok(doc) = serde_saphyr::from_str::<serde_json::Value>(template) else {
        return Vec::new();
    };
    let Some(resources) = doc.get("Resources").and_then(|r| r.as_object()) else {
        return Vec::new();
    };
    resources
        .iter()
        .map(|(name, r)| Detail {
            action: "Add".into(),
            condition: r
                .get("Condition")
                .and_then(|c| c.as_str())
                .map(str::to_string),
            name: name.clone(),
            kind: r
                .get("Type")
                .and_then(|t| t.as_str())
                .unwrap_or("unknown")
                .to_string(),
            replacement: None,
            note: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{health, template_resources};

    #[test]
    fn only_stacks_left_broken_by_a_failure_or_being_deleted_are_unhealthy() {
        // A failed rollback of an update is repaired in place (ContinueUpdateRollback), never
        // by replacing the stack.
        for ok in [
            "CREATE_COMPLETE",
            "UPDATE_COMPLETE",
            "UPDATE_ROLLBACK_COMPLETE",
            "UPDATE_ROLLBACK_FAILED",
            "CREATE_IN_PROGRESS",
            "UPDATE_IN_PROGRESS",
        ] {
            assert_eq!(health(ok), "healthy", "{ok}");
        }
        for broken in [
            "ROLLBACK_COMPLETE",
            "ROLLBACK_FAILED",
            "DELETE_IN_PROGRESS",
            "DELETE_FAILED",
        ] {
            assert_eq!(health(broken), broken);
        }
    }

    #[test]
    fn a_create_lists_every_resource_of_the_template() {
        for (file, template) in [
            ("network", include_str!("../../stacks/network.yaml")),
            ("iam", include_str!("../../stacks/iam.yaml")),
            ("storage", include_str!("../../stacks/storage.yaml")),
            ("efs", include_str!("../../stacks/efs.yaml")),
            ("irsa", include_str!("../../stacks/irsa.yaml")),
        ] {
            let details = template_resources(template);
            assert!(!details.is_empty(), "{file}");
            for d in &details {
                assert_eq!(d.action, "Add");
                assert!(d.kind.starts_with("AWS::"), "{file}: {d:?}");
                assert!(
                    template.contains(&format!("\n  {}:\n", d.name)),
                    "{file}: {d:?}"
                );
            }
            // Every `Type: AWS::...` line of the template is one resource.
            assert_eq!(
                details.len(),
                template.matches("\n    Type: AWS::").count(),
                "{file}"
            );
        }
        let network = template_resources(include_str!("../../stacks/network.yaml"));
        assert!(network.iter().any(|d| d.kind == "AWS::EC2::VPCEndpoint"));
    }
}
