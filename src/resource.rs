//! The `Resource` trait every node of the graph implements, and the
//! `Provider` that recreates handles for resources known only from state.
//!
//! A resource is a desired spec plus four calls against the real world:
//! `read`, `create`, `update`, `delete`. The engine decides which to call and
//! when; the resource only talks to its service. The contract each
//! implementation must keep is what makes resume and destroy safe:
//!
//! - `create` is **idempotent for a given token**: called twice with the same
//!   token (because the first call's process was killed after the state
//!   recorded the token), it re-attaches to what the first call created
//!   instead of creating a second one (AWS client request tokens have
//!   exactly this meaning, e.g. CloudFormation `ClientRequestToken`).
//! - `delete` of something already gone succeeds.
//! - Outputs hold identifiers and public endpoints only, never secrets: they
//!   are written to the state file and printed by `kfaws output`.
//! - [`Resource::check`] makes read-only calls only: it runs while planning,
//!   before anything is written or created.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::address::Address;
use crate::plan::Action;
use crate::state::ResourceState;

/// Output values by name.
pub type Outputs = BTreeMap<String, Value>;

/// Managed resources are created and deleted by kfaws; data sources are only read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Created, updated and deleted by kfaws.
    Managed,
    /// Read for its outputs only (Terraform's `data` blocks).
    Data,
}

/// What a `read` found.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// The resource does not exist.
    Gone,
    /// The resource exists.
    Present {
        /// Its provider id.
        physical_id: Option<String>,
        /// The live value of each spec field the service reports, keyed like
        /// the desired spec's top-level fields. Fields the service cannot
        /// report are left out and not compared.
        spec: serde_json::Map<String, Value>,
        /// Its current outputs.
        outputs: Outputs,
    },
}

/// The result of a successful create or update.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The provider id.
    pub physical_id: String,
    /// Outputs for dependants and `kfaws output`.
    pub outputs: Outputs,
}

/// A failed call, with the service's message.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ResourceError {
    /// What failed, in the service's words where possible.
    pub message: String,
    /// The underlying error.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
    /// How the call ended ([`ErrorKind`]).
    pub kind: ErrorKind,
}

/// How a failed call of a resource ended, which decides what the engine records for a create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// It failed; a create's entry is recorded tainted (replaced by the next apply).
    Failed,
    /// It refused what it found, before anything was changed: a foreign resource holds the
    /// name, or a recorded one's ownership tags were changed by hand. A create refused this way
    /// leaves the state as it was instead of recording a tainted entry, which a later plan would
    /// replace by deleting whatever then holds the name; a refresh failing only this way leaves
    /// out its advice for reads that failed (the message says the ways on).
    Refused,
    /// The first interrupt stopped a wait after the change was sent
    /// ([`crate::engine::interrupt::stopping`]): a create's entry stays `creating` with its
    /// idempotency token, so the next apply re-attaches to what the call made and waits again.
    Interrupted,
}

impl ResourceError {
    /// An error with a message only ([`ErrorKind::Failed`]).
    pub fn msg(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
            kind: ErrorKind::Failed,
        }
    }

    /// A refusal before anything was created or changed ([`ErrorKind::Refused`]).
    pub fn refused(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Refused,
            ..Self::msg(message)
        }
    }

    /// A wait stopped by the first interrupt ([`ErrorKind::Interrupted`]).
    pub fn interrupted(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Interrupted,
            ..Self::msg(message)
        }
    }
}

/// Waits for `wait` unless the first interrupt comes first
/// ([`crate::engine::interrupt::stopping`]); then the wait is dropped (it only polls) and the
/// result is [`ResourceError::interrupted`], saying `what` was being waited for and that the
/// next run waits again.
///
/// # Errors
/// The wait's own error, or the interruption.
pub async fn unless_interrupted<T>(
    what: &str,
    wait: impl std::future::Future<Output = Result<T, ResourceError>>,
) -> Result<T, ResourceError> {
    let stopping = crate::engine::interrupt::stopping();
    tokio::select! {
        result = wait => result,
        () = stopping.cancelled() => Err(ResourceError::interrupted(format!(
            "stopped waiting for {what}: interrupted; the request was sent and is recorded, and \
             the next run waits for it again"
        ))),
    }
}

/// One change inside a resource that a plan can show before applying it,
/// e.g. a resource of a CloudFormation change set
/// ([ResourceChange](https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ResourceChange.html)).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Detail {
    /// What happens to it, in the service's words (`Add`, `Modify`, `Remove`, ...).
    pub action: String,
    /// Its name inside the resource (a stack's logical resource id).
    pub name: String,
    /// Its type, e.g. `AWS::EC2::NatGateway`.
    pub kind: String,
    /// Whether the change replaces it: `True`, `False` or `Conditional`
    /// where the service says; absent where it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// The template condition the change depends on, for a create's
    /// resources declared with `Condition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// What else the change does that a reader must not miss, e.g. that
    /// removing a namespace deletes everything in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The outputs of a resource's dependencies, by address, as recorded when
/// they finished.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs(pub BTreeMap<Address, Outputs>);

impl Inputs {
    /// The output `name` of dependency `address`.
    ///
    /// # Errors
    /// [`ResourceError`] naming the missing output: a dependency that did not
    /// produce what a dependant needs is a bug in the profile.
    pub fn get(&self, address: &Address, name: &str) -> Result<&Value, ResourceError> {
        self.0
            .get(address)
            .and_then(|o| o.get(name))
            .ok_or_else(|| {
                ResourceError::msg(format!("dependency {address} has no output {name:?}"))
            })
    }
}

/// Choices of a destroy (or of the delete half of a replacement) that
/// resources act on; recorded in the plan so `kfaws apply PLAN_FILE` acts the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeleteOptions {
    /// Delete every object version and delete marker of a bucket before the
    /// bucket (`--force-destroy-buckets`, Terraform's `force_destroy`);
    /// otherwise a bucket that holds any stops the plan.
    pub force_destroy_buckets: bool,
}

/// What a plan-time [`Resource::check`] is asked about.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The planned action: create, update, replace or delete.
    pub action: Action,
    /// The state entry, if the resource is recorded.
    pub recorded: Option<&'a ResourceState>,
    /// The destroy's choices.
    pub options: &'a DeleteOptions,
    /// Every address the plan deletes or replaces (this one too, when it
    /// does): what goes with this resource's dependencies, e.g. the cluster
    /// a Kubernetes bundle's objects live in.
    pub deletes: &'a std::collections::BTreeSet<Address>,
    /// Every address the plan creates (a replace's create too, and a create that re-attaches
    /// to a live resource): what the apply makes or takes into the state; what a `--target`
    /// leaves out is not among them, e.g. the access entries that keep a cluster usable after
    /// its switch to API mode.
    pub creates: &'a std::collections::BTreeSet<Address>,
    /// The whole state the plan was made against.
    pub state: &'a crate::state::State,
    /// For a create that re-attaches to a live resource of this state's (an interrupted
    /// create, or one `kfaws state rm` dropped, [`crate::plan::Change::import`]): the provider
    /// ids of what it holds (a stack's resources, by physical id), which are this deployment's
    /// whatever their own tags say. Empty otherwise.
    pub held: &'a std::collections::BTreeSet<String>,
}

/// A node of the graph: its identity, its desired spec and the calls that
/// reconcile the real world with it.
#[async_trait]
pub trait Resource: Send + Sync {
    /// The address, unique in the graph.
    fn address(&self) -> &Address;

    /// The kind, e.g. `aws_cloudformation_stack`; recorded in state so a
    /// resource that left the config can still be deleted ([`Provider`]).
    fn kind(&self) -> &'static str;

    /// Addresses whose outputs this resource needs, or that must exist while
    /// it does; they are created first and deleted last.
    fn dependencies(&self) -> Vec<Address>;

    /// The [`Resource::dependencies`] whose outputs this resource's create or
    /// update uses (the default: all of them): a change of their outputs, or
    /// one of them added, re-applies it ([`crate::state::inputs_hash`]). The
    /// others only order it (created before it, deleted after it): one added
    /// or removed is recorded in the state without re-applying it, as
    /// Terraform records a `depends_on` change without a plan entry.
    fn input_dependencies(&self) -> Vec<Address> {
        self.dependencies()
    }

    /// Managed or data source.
    fn mode(&self) -> Mode {
        Mode::Managed
    }

    /// The desired spec, a JSON object computed from the config alone (no
    /// calls). Its hash is recorded in state; a change of a field is an
    /// update, or a replacement for [`Resource::replace_fields`].
    fn spec(&self) -> Value;

    /// Top-level spec fields that cannot change in place.
    fn replace_fields(&self) -> &[&str] {
        &[]
    }

    /// Whether a resource tainted by a failed create is repaired by an update
    /// rather than replaced. The default, as Terraform's taint, replaces:
    /// deletes what the failed create left, then creates it again. A resource
    /// whose update converges from any partial state (server-side apply of a
    /// manifest bundle) answers `true`: replacing it would first delete what
    /// the failed apply did make, and with a CRD every custom resource of it,
    /// whoever made them.
    fn repairs_taint_in_place(&self) -> bool {
        false
    }

    /// Whether `--replace` may replace the resource while resources that
    /// depend on it exist ([`crate::plan::replace`]): `true` when their own
    /// objects do not live in it and they keep working across its delete and
    /// create. The default refuses: deleting a network stack under a cluster
    /// fails half-way. A replacement the diff forces (a changed
    /// replace-only field) is not asked.
    fn replaceable_under_dependants(&self) -> bool {
        false
    }

    /// What a replacement of the resource interrupts, added to the reason of
    /// every planned replacement; `None` (the default) when nothing beyond
    /// the resource itself.
    fn replace_note(&self) -> Option<&'static str> {
        None
    }

    /// The dependency whose delete deletes this resource too, by the service's own
    /// rule (an EKS access entry goes with its cluster: EKS API Reference, DeleteCluster);
    /// `None` (the default) when none does. A whole destroy does not report such a
    /// resource as left outside the state while that dependency is in it.
    fn deleted_with(&self) -> Option<&Address> {
        None
    }

    /// Spec fields whose values a plan never shows (only that they change): a
    /// hash over content that holds secrets, which a dictionary attack could
    /// reverse from plan output kept in CI logs. Default none.
    fn sensitive_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Expected wall time of a create, used for the critical path.
    fn estimate(&self) -> Duration;

    /// Longest a single create, update or delete may take before it fails.
    fn timeout(&self) -> Duration {
        Duration::from_secs(45 * 60)
    }

    /// Reads the live resource. `recorded` is the state entry (absent for
    /// data sources read for the first time). A resource whose delete is
    /// under way (or failed half-way) says so in a field of
    /// [`Resource::replace_fields`] (`health`: EKS `DELETING`, CloudFormation
    /// `DELETE_IN_PROGRESS`, `DELETE_FAILED`): the plan tells such a resource
    /// from one whose delete the service refused, which is still whole and is
    /// kept ([`crate::plan::diff`]).
    async fn read(&self, recorded: Option<&ResourceState>) -> Result<Observed, ResourceError>;

    /// Creates the resource, idempotently for `token` (see the module docs),
    /// and waits until it is usable.
    async fn create(&self, token: &str, inputs: &Inputs) -> Result<Applied, ResourceError>;

    /// Changes the resource in place to the desired spec and waits until it is usable.
    async fn update(
        &self,
        recorded: &ResourceState,
        inputs: &Inputs,
    ) -> Result<Applied, ResourceError>;

    /// What an update to the desired spec would change inside the resource,
    /// as the service computes it, without changing anything (for `plan`).
    /// `recorded` is the state entry, `inputs` the dependencies' recorded
    /// outputs. The default shows nothing.
    ///
    /// # Errors
    /// [`ResourceError`] when the service refuses the change (the update would fail).
    async fn preview_update(
        &self,
        recorded: &ResourceState,
        inputs: &Inputs,
    ) -> Result<Vec<Detail>, ResourceError> {
        let _ = (recorded, inputs);
        Ok(Vec::new())
    }

    /// Whether [`Resource::preview_update`] reads `inputs`. The plan skips
    /// the preview of an update whose dependencies change too (their
    /// recorded outputs would be stale), unless it does not read them.
    /// The default: it does.
    fn preview_reads_inputs(&self) -> bool {
        true
    }

    /// What a create would make inside the resource, from the desired spec
    /// alone (for `plan`; no call), e.g. every resource of a stack's
    /// template. The default shows nothing.
    fn preview_create(&self) -> Vec<Detail> {
        Vec::new()
    }

    /// For a create of a resource the state does not hold (for `plan`): the
    /// provider id of a live one of its name that carries this state's
    /// deployment and lineage tags, which `create` re-attaches to instead of
    /// making another (left by `kfaws state rm`, or by a create whose result
    /// was never recorded). The plan shows it as imported, Terraform's term.
    /// The default finds none.
    ///
    /// # Errors
    /// [`ResourceError`] for a failed read; the plan fails.
    async fn importable(&self) -> Result<Option<String>, ResourceError> {
        Ok(None)
    }

    /// What a delete would remove inside the resource (for `plan`), from
    /// its state entry and read-only calls, e.g. what other actors left in
    /// a VPC that the delete removes too. The default shows nothing.
    ///
    /// # Errors
    /// [`ResourceError`] for a failed read; the plan fails.
    async fn preview_delete(&self, recorded: &ResourceState) -> Result<Vec<Detail>, ResourceError> {
        let _ = recorded;
        Ok(Vec::new())
    }

    /// Deletes the resource and waits until it is gone; gone already is success.
    async fn delete(&self, recorded: &ResourceState) -> Result<(), ResourceError>;

    /// Plan-time check of what the planned action would run into (a name
    /// someone else holds, a bucket that is not empty, something in the
    /// way of a delete), so that a plan that cannot finish fails before
    /// its first change instead of half way. Read-only calls only. Called
    /// by [`crate::plan::make_plan`] for every change that is not a no-op
    /// or a read.
    ///
    /// # Errors
    /// [`ResourceError`] saying what is in the way, naming the config field
    /// or flag that resolves it; the plan fails.
    async fn check(&self, _check: &Check<'_>) -> Result<(), ResourceError> {
        Ok(())
    }

    /// Work that must precede the delete (of a destroy or a replacement):
    /// removing what other actors left that would make it fail. Called by
    /// the executor once the resource is recorded as `deleting`, right
    /// before [`Resource::delete`], so after every dependant is gone; a
    /// resumed run calls it again, so it must be idempotent.
    ///
    /// # Errors
    /// [`ResourceError`]; the delete is not attempted.
    async fn before_delete(
        &self,
        _recorded: &ResourceState,
        _options: &DeleteOptions,
    ) -> Result<(), ResourceError> {
        Ok(())
    }
}

/// The [`Resource::check`] and [`Resource::before_delete`] of a resource
/// kind that serves several purposes (a CloudFormation stack holds a
/// network, roles or a bucket): the profile attaches the guards its
/// content needs.
#[async_trait]
pub trait Guard: Send + Sync {
    /// As [`Resource::check`].
    ///
    /// # Errors
    /// As [`Resource::check`].
    async fn check(&self, _check: &Check<'_>) -> Result<(), ResourceError> {
        Ok(())
    }

    /// As [`Resource::before_delete`].
    ///
    /// # Errors
    /// As [`Resource::before_delete`].
    async fn before_delete(
        &self,
        _recorded: &ResourceState,
        _options: &DeleteOptions,
    ) -> Result<(), ResourceError> {
        Ok(())
    }

    /// As [`Resource::preview_delete`], for what the guard deletes first.
    ///
    /// # Errors
    /// As [`Resource::preview_delete`].
    async fn preview_delete(
        &self,
        _recorded: &ResourceState,
    ) -> Result<Vec<Detail>, ResourceError> {
        Ok(Vec::new())
    }

    /// Spec fields for what the stack holds that its own description does
    /// not show (an IAM role's trust policy edited outside CloudFormation):
    /// added to [`Resource::spec`], computed from the config alone.
    fn desired(&self) -> serde_json::Map<String, Value> {
        serde_json::Map::new()
    }

    /// The live values of [`Guard::desired`]'s fields, added to what
    /// [`Resource::read`] observes, so a difference is drift. A `health`
    /// field replaces the stack's own (a part of it that is gone).
    /// `parameters` are the live stack's, inputs included.
    ///
    /// # Errors
    /// [`ResourceError`] for a failed call; the refresh fails.
    async fn observe(
        &self,
        _recorded: &ResourceState,
        _parameters: &BTreeMap<String, String>,
    ) -> Result<serde_json::Map<String, Value>, ResourceError> {
        Ok(serde_json::Map::new())
    }

    /// Runs after the stack's update: puts back what
    /// [`Guard::observe`] found changed outside kfaws, which a change set
    /// leaves as it is (CloudFormation updates only resources whose template
    /// or parameters changed). `parameters` are the stack's, inputs
    /// resolved.
    ///
    /// # Errors
    /// [`ResourceError`]; the update fails and is planned again.
    async fn repair(&self, _parameters: &BTreeMap<String, String>) -> Result<(), ResourceError> {
        Ok(())
    }
}

/// Recreates a handle for a resource known only from state (it left the
/// config, or `destroy` runs without it), so it can be read and deleted.
/// Terraform keeps providers for the same reason.
pub trait Provider: Send + Sync {
    /// A handle for the recorded resource at `address`, or `None` for a kind
    /// this provider does not know.
    fn handle_for(&self, address: &Address, recorded: &ResourceState) -> Option<Arc<dyn Resource>>;

    /// Why the profile has no resource at `address` under this config, for
    /// an address the profile makes under another config: which kfaws.toml
    /// setting would add it (`kfaws.toml has no [node_groups.gpu]`,
    /// `kubeflow.manifests is not set`). `None` for an address this config
    /// has, or one the profile never makes.
    fn why_absent(&self, _address: &Address) -> Option<String> {
        None
    }

    /// Why the recorded resource at `address` is no longer in the config:
    /// "not in the configuration any more" with [`Provider::why_absent`]'s
    /// words, or `None` where it has none.
    fn why_removed(&self, address: &Address) -> Option<String> {
        self.why_absent(address)
            .map(|why| format!("{}: {why}", crate::plan::diff::NOT_IN_CONFIG))
    }
}
