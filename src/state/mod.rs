//! The state: what kfaws created, as a versioned JSON document per deployment.
//!
//! One file per deployment, `<state_dir>/<name>/state.json`, written
//! atomically after every resource transition ([`store`]) under a lock that
//! every writing command holds ([`lock`]). Like Terraform's state it carries a
//! format version, a serial that increases on every write and a lineage that
//! identifies the deployment across copies; unlike it, it also records the
//! AWS account and region it belongs to, so a command run with the wrong
//! credentials or region is refused instead of "finding nothing".
//!
//! The state never holds secrets: resources put only identifiers and public
//! endpoints in their outputs.

pub mod lock;
pub mod replace;
pub mod store;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::address::Address;
use crate::config::ProfileName;

/// The state format this build writes. Older formats are upgraded on read
/// ([`store::upgrade`]); newer ones are refused.
pub const FORMAT_VERSION: u32 = 1;

/// Lifecycle of one resource as far as kfaws knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A create call was started (recorded before the call, with its
    /// idempotency token); the resource may or may not exist yet.
    Creating,
    /// Created and usable; outputs are valid.
    Created,
    /// A create or replace failed part-way; the next apply replaces it.
    Tainted,
    /// A delete call was started; the resource may still exist.
    Deleting,
}

impl Status {
    /// The status as shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "creating",
            Self::Created => "created",
            Self::Tainted => "tainted",
            Self::Deleting => "deleting",
        }
    }
}

/// What kfaws recorded about one resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceState {
    /// The resource kind, e.g. `aws_cloudformation_stack`.
    pub kind: String,
    /// Where the resource is in its lifecycle.
    pub status: Status,
    /// The provider's identifier (stack ARN, cluster name, ...), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_id: Option<String>,
    /// The idempotency token of the create in flight or last completed
    /// (`ClientRequestToken`, `clientRequestToken`, `CreationToken`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_token: Option<String>,
    /// The desired spec the resource was created or last updated from.
    pub spec: Value,
    /// The spec of an update that was started and not recorded as done
    /// (recorded before the update's calls, removed with the entry that
    /// records the result): after a crash, an interrupt or a failed update
    /// the next plan knows the live values it finds may be that update's,
    /// not changes made outside kfaws, and applies it again (updates
    /// converge from whatever the last one reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updating: Option<Value>,
    /// SHA-256 (hex) of the canonical JSON of `spec`.
    pub spec_hash: String,
    /// Values other resources and `kfaws output` consume.
    #[serde(default)]
    pub outputs: BTreeMap<String, Value>,
    /// Addresses this resource depended on when it was created: destroy
    /// needs them even after the resource left the config.
    #[serde(default)]
    pub dependencies: Vec<Address>,
    /// [`inputs_hash`] of the outputs of the input dependencies
    /// ([`crate::resource::Resource::input_dependencies`]) the resource was
    /// last created or updated with (of all its `dependencies` for an entry
    /// written by a kfaws that did not tell them apart); when they differ
    /// from the outputs recorded now (a dependency changed, or this
    /// resource's update failed), the resource is updated again
    /// ([`inputs_unchanged`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_hash: Option<String>,
    /// When this entry last changed.
    pub updated_at: DateTime<Utc>,
}

/// The state document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// [`FORMAT_VERSION`] when written by this build.
    pub format_version: u32,
    /// The kfaws version that last wrote the document.
    pub kfaws_version: String,
    /// Increases by one on every write; a saved plan records it.
    pub serial: u64,
    /// Identifies this deployment's state across copies and re-creations.
    pub lineage: Uuid,
    /// The deployment name.
    pub deployment: String,
    /// The profile the deployment was applied with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileName>,
    /// The AWS account id the resources live in, set on first apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// The AWS Region the resources live in, set on first apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Resources by address.
    #[serde(default)]
    pub resources: BTreeMap<Address, ResourceState>,
    /// SageMaker endpoints `kfaws endpoint deploy` created, by name: deleted
    /// by `kfaws endpoint delete`, and by `kfaws destroy` before any resource
    /// (an endpoint's model uses the execution role and the bucket). An
    /// endpoint is recorded before its first create call, so a crash
    /// never loses track of it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub endpoints: BTreeMap<String, EndpointRecord>,
}

/// An endpoint `kfaws endpoint deploy` created (its model and endpoint
/// config have the same name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointRecord {
    /// The training job whose model it serves.
    pub job: String,
    /// The serving image.
    pub image: String,
    /// The model artifact (`s3://…/model.tar.gz`).
    pub model_data_url: String,
    /// The instance type.
    pub instance_type: String,
    /// Instances.
    pub instance_count: i32,
    /// `creating` until InService was seen, then `in_service`; `failed` when the deploy
    /// failed (what was created stays, for `endpoint delete` and destroy).
    pub status: String,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
}

impl State {
    /// Physical ids that more than one address records, with those
    /// addresses (sorted), by id. Empty for any state kfaws itself wrote:
    /// each create records the id of what it made under its own address.
    pub fn shared_physical_ids(&self) -> BTreeMap<String, Vec<Address>> {
        let mut by_id: BTreeMap<String, Vec<Address>> = BTreeMap::new();
        for (address, r) in &self.resources {
            if let Some(id) = &r.physical_id {
                by_id.entry(id.clone()).or_default().push(address.clone());
            }
        }
        by_id.retain(|_, addresses| addresses.len() > 1);
        by_id
    }

    /// An empty state for a new deployment, serial 0, fresh lineage.
    pub fn new(deployment: &str) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            kfaws_version: env!("CARGO_PKG_VERSION").to_string(),
            serial: 0,
            lineage: Uuid::new_v4(),
            deployment: deployment.to_string(),
            profile: None,
            account_id: None,
            region: None,
            resources: BTreeMap::new(),
            endpoints: BTreeMap::new(),
        }
    }

    /// All outputs of all resources, flattened: `<address>.<output>`.
    pub fn outputs(&self) -> BTreeMap<String, Value> {
        self.resources
            .iter()
            .flat_map(|(a, r)| {
                r.outputs
                    .iter()
                    .map(move |(k, v)| (format!("{a}.{k}"), v.clone()))
            })
            .collect()
    }
}

/// SHA-256 (hex) of the outputs of `dependencies` as recorded in `state`:
/// what a resource consumes from the resources it depends on.
pub fn inputs_hash(state: &State, dependencies: &[Address]) -> String {
    let inputs: BTreeMap<&Address, Option<&BTreeMap<String, Value>>> = dependencies
        .iter()
        .map(|d| (d, state.resources.get(d).map(|r| &r.outputs)))
        .collect();
    spec_hash(&serde_json::to_value(inputs).expect("outputs serialize"))
}

/// Whether the resource at `recorded` takes the same inputs as when it was last applied: its
/// [`ResourceState::inputs_hash`] is the [`inputs_hash`] of `inputs` (its input dependencies)
/// in `state`. An entry written before input dependencies were told apart from those that
/// only order a resource hashed all of its recorded `dependencies`: it takes the same inputs
/// when that hash is unchanged, every one of `inputs` is among them (equal outputs of all are
/// equal outputs of `inputs`) and none of them left `dependencies` (the resource's now: one
/// that did may have been an input it must stop using). `false` without a recorded hash.
pub fn inputs_unchanged(
    state: &State,
    recorded: &ResourceState,
    inputs: &[Address],
    dependencies: &[Address],
) -> bool {
    let Some(then) = recorded.inputs_hash.as_deref() else {
        return false;
    };
    let then_all = &recorded.dependencies;
    then == inputs_hash(state, inputs)
        || (inputs.iter().all(|a| then_all.contains(a))
            && then_all.iter().all(|a| dependencies.contains(a))
            && then == inputs_hash(state, then_all))
}

/// The state belongs to another account or region than the caller's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "deployment {deployment:?} lives in account {state_account} region {state_region}, but the \
     credentials are for account {account} and the region is {region}; switch credentials \
     (AWS_PROFILE / --aws-profile) or region: kfaws works on a deployment only in its own \
     account and region (a plan elsewhere would find nothing and plan to create everything \
     again)"
)]
pub struct IdentityMismatch {
    /// The deployment.
    pub deployment: String,
    /// Account recorded in state.
    pub state_account: String,
    /// Region recorded in state.
    pub state_region: String,
    /// The caller's account.
    pub account: String,
    /// The configured region.
    pub region: String,
}

impl State {
    /// Compares the recorded account and region with the caller's; a state
    /// that records neither (nothing applied yet) matches anything.
    ///
    /// # Errors
    /// [`IdentityMismatch`] naming both.
    pub fn check_identity(&self, account: &str, region: &str) -> Result<(), IdentityMismatch> {
        let account_ok = self.account_id.as_deref().is_none_or(|a| a == account);
        let region_ok = self.region.as_deref().is_none_or(|r| r == region);
        if account_ok && region_ok {
            return Ok(());
        }
        Err(IdentityMismatch {
            deployment: self.deployment.clone(),
            state_account: self.account_id.clone().unwrap_or_else(|| "(unset)".into()),
            state_region: self.region.clone().unwrap_or_else(|| "(unset)".into()),
            account: account.to_string(),
            region: region.to_string(),
        })
    }
}

/// SHA-256 (hex) of the canonical JSON of a spec: object keys sorted
/// (serde_json's map is ordered), no whitespace.
pub fn spec_hash(spec: &Value) -> String {
    use sha2::{Digest, Sha256};
    let canonical = serde_json::to_vec(spec).expect("a JSON value always serializes");
    hex::encode(Sha256::digest(canonical))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spec_hash_ignores_key_order_and_sees_value_changes() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":2,"x":3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":3,"y":2},"b":1}"#).unwrap();
        assert_eq!(spec_hash(&a), spec_hash(&b));
        assert_ne!(
            spec_hash(&a),
            spec_hash(&json!({"b": 2, "a": {"x": 3, "y": 2}}))
        );
        assert_eq!(spec_hash(&a).len(), 64);
    }

    #[test]
    fn identity_must_match_the_recorded_account_and_region() {
        let mut s = State::new("ml");
        s.check_identity("111111111111", "us-east-1").unwrap();
        s.account_id = Some("111111111111".into());
        s.region = Some("us-east-1".into());
        s.check_identity("111111111111", "us-east-1").unwrap();
        let e = s.check_identity("111111111111", "eu-west-1").unwrap_err();
        assert!(
            e.to_string().contains("region us-east-1") && e.to_string().contains("eu-west-1"),
            "{e}"
        );
        let e = s.check_identity("222222222222", "us-east-1").unwrap_err();
        assert!(
            e.to_string().contains("222222222222") && e.to_string().contains("111111111111"),
            "{e}"
        );
    }

    #[test]
    fn outputs_are_flattened_by_address() {
        let mut s = State::new("ml");
        s.resources.insert(
            Address::new("stack.network").unwrap(),
            ResourceState {
                kind: "k".into(),
                status: Status::Created,
                physical_id: None,
                idempotency_token: None,
                spec: json!({}),
                spec_hash: spec_hash(&json!({})),
                outputs: BTreeMap::from([("vpc_id".to_string(), json!("vpc-1"))]),
                dependencies: vec![],
                updating: None,
                inputs_hash: None,
                updated_at: Utc::now(),
            },
        );
        assert_eq!(s.outputs()["stack.network.vpc_id"], json!("vpc-1"));
    }

    #[test]
    fn an_id_recorded_under_two_addresses_is_found_with_both() {
        let entry = |id: Option<&str>| ResourceState {
            kind: "k".into(),
            status: Status::Created,
            physical_id: id.map(str::to_string),
            idempotency_token: None,
            spec: json!({}),
            spec_hash: spec_hash(&json!({})),
            outputs: BTreeMap::new(),
            dependencies: vec![],
            updating: None,
            inputs_hash: None,
            updated_at: Utc::now(),
        };
        let a = |s: &str| Address::new(s).unwrap();
        let mut s = State::new("ml");
        s.resources.insert(a("stack.network"), entry(Some("arn:1")));
        s.resources.insert(a("stack.iam"), entry(Some("arn:2")));
        s.resources.insert(a("k8s.x"), entry(None));
        s.resources.insert(a("k8s.y"), entry(None));
        assert!(
            s.shared_physical_ids().is_empty(),
            "no id is not a shared id"
        );
        s.resources.insert(a("stack.bogus"), entry(Some("arn:1")));
        assert_eq!(
            s.shared_physical_ids(),
            BTreeMap::from([(
                "arn:1".to_string(),
                vec![a("stack.bogus"), a("stack.network")]
            )])
        );
    }
}
