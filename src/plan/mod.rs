//! Plans: what an apply or destroy will do, per address, and why.
//!
//! A plan is data before it is text: [`make_plan`] refreshes every recorded
//! resource live (in parallel), diffs desired vs recorded vs live
//! ([`diff`]), applies `--target`, and returns a [`Plan`]; [`render`] turns
//! it into Terraform-style text or JSON; [`file`](mod@file) saves it so that `kfaws
//! apply FILE` applies exactly it. Before a plan is returned, every change
//! passes its resource's plan-time [`check`].

pub mod check;
pub mod diff;
pub mod file;
pub mod preview;
pub mod refresh;
pub mod render;
pub mod replace;
pub mod unknown;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::address::Address;
use crate::config::Config;
use crate::graph::{Closure, Dag, GraphError};
use crate::resource::{DeleteOptions, Provider, Resource};
use crate::state::State;

/// What will happen to one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Create (or re-attach to an interrupted create).
    Create,
    /// Change in place.
    Update,
    /// Delete, then create.
    Replace,
    /// Delete.
    Delete,
    /// Nothing to do.
    NoOp,
    /// Read a data source for its outputs.
    Read,
}

impl Action {
    /// Terraform's symbol for the action.
    pub fn symbol(self) -> &'static str {
        match self {
            Self::Create => "+",
            Self::Update => "~",
            Self::Replace => "-/+",
            Self::Delete => "-",
            Self::NoOp => " ",
            Self::Read => "<=",
        }
    }

    /// The action as a word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Replace => "replace",
            Self::Delete => "delete",
            Self::NoOp => "no-op",
            Self::Read => "read",
        }
    }

    /// Whether the action changes anything.
    pub fn is_change(self) -> bool {
        matches!(
            self,
            Self::Create | Self::Update | Self::Replace | Self::Delete
        )
    }
}

/// One field's difference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldChange {
    /// Top-level spec field.
    pub field: String,
    /// The value now (live where reported, else recorded); absent if unset.
    pub before: Option<Value>,
    /// The desired value; absent if the field goes away.
    pub after: Option<Value>,
    /// Whether changing it requires replacement.
    pub forces_replacement: bool,
    /// Whether the value was changed outside kfaws.
    pub drift: bool,
    /// For a drifted field: the value recorded at the last apply, so that
    /// the plan marks only the parts of an object field that changed
    /// outside kfaws (a config change to one key of `parameters` is not
    /// drift because another key drifted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<Value>,
    /// The values are not shown ([`crate::resource::Resource::sensitive_fields`]):
    /// `before` and `after` are JSON `null` where set (`None` where unset) and
    /// `recorded` is `None`, in the text, the JSON and a saved plan alike.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sensitive: bool,
}

impl FieldChange {
    /// Drops the values, keeping only whether each side is set
    /// ([`FieldChange::sensitive`]).
    pub fn hide(&mut self) {
        for v in [&mut self.before, &mut self.after] {
            if v.is_some() {
                *v = Some(Value::Null);
            }
        }
        self.recorded = None;
        self.sensitive = true;
    }
}

/// The planned action for one address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The address.
    pub address: Address,
    /// The resource kind.
    pub kind: String,
    /// The action.
    pub action: Action,
    /// Why, in words.
    pub reason: String,
    /// Whether the action repairs a change made outside kfaws.
    pub drift: bool,
    /// Field differences for updates and replacements.
    pub fields: Vec<FieldChange>,
    /// The addresses this change must wait for: desired dependencies for
    /// creates and updates, recorded dependencies for deletes.
    pub dependencies: Vec<Address>,
    /// Hash of the desired spec (absent for deletes); `apply FILE` checks it.
    pub spec_hash: Option<String>,
    /// For a create resuming an interrupted one: the recorded token.
    pub resume_token: Option<String>,
    /// For an update: what it changes inside the resource, as the service
    /// computed it at plan time ([`Resource::preview_update`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<crate::resource::Detail>,
    /// An update planned only because a dependency changes: at apply time
    /// it runs only if the dependencies' outputs differ from those the
    /// resource was last applied with (Terraform's "known after apply");
    /// otherwise it is skipped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub conditional: bool,
    /// For a no-op: fields changed outside kfaws since the last apply that
    /// already hold the desired value (`before` is the recorded value,
    /// `after` the live one). Nothing is called for them; apply records the
    /// live values in the state (Terraform's refresh), so the next change
    /// of such a field is not reported as drift.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refreshed: Vec<FieldChange>,
    /// For a no-op: the resource's dependencies (those in the state) are
    /// not the recorded ones, only because one that orders it without
    /// being an input ([`Resource::input_dependencies`]) was added or
    /// removed. Nothing is called; apply records them, which a later
    /// destroy from the state orders by.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reordered: bool,
    /// For a create of an address the state does not hold: the provider id
    /// of the live resource with this state's tags that the create
    /// re-attaches to ([`Resource::importable`]); the plan says "will be
    /// imported".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import: Option<String>,
    /// For a delete: the refresh found the resource already gone, so apply
    /// only removes its entry from the state (Terraform likewise drops an
    /// object its refresh finds deleted); not counted in "to destroy".
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
    /// For an update: an earlier delete the service refused left the
    /// resource whole, and nothing in it differs from the config, so apply
    /// makes no call and only records it as created again; not counted in
    /// "to change".
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kept: bool,
    /// For a change of a recorded resource: the dependencies the state records for it that the
    /// config no longer gives it. It may still use them until this change is applied, so a
    /// delete of one waits for it (Terraform orders a destroy after the update of what used
    /// it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<Address>,
    /// The resource has sensitive fields ([`crate::resource::Resource::sensitive_fields`]):
    /// `--json` leaves out its `spec_hash`, which covers them (the saved plan, private,
    /// keeps it for `apply PLANFILE`'s check).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sensitive: bool,
}

impl Change {
    /// What applying this change does, in words finer than its
    /// [`Action`]: an import is a create that re-attaches, a forget is a
    /// delete of something already gone.
    pub fn step(&self) -> Step {
        match self.action {
            Action::Create if self.import.is_some() => Step::Import,
            Action::Delete if self.gone => Step::Forget,
            Action::Update if self.kept => Step::Keep,
            other => Step::from(other),
        }
    }
}

/// What one resource's job did or does, for progress lines and the final
/// table: an [`Action`], with an import and a forget told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Create.
    Create,
    /// Create that re-attaches to a live resource ([`Change::import`]).
    Import,
    /// Change in place.
    Update,
    /// Delete, then create.
    Replace,
    /// Delete.
    Delete,
    /// Remove from the state a resource already gone ([`Change::gone`]).
    Forget,
    /// Record as created again a resource an earlier delete left whole
    /// ([`Change::kept`]).
    Keep,
    /// Nothing to do (or a conditional update that found nothing changed).
    NoOp,
    /// Read a data source.
    Read,
}

impl From<Action> for Step {
    fn from(action: Action) -> Self {
        match action {
            Action::Create => Self::Create,
            Action::Update => Self::Update,
            Action::Replace => Self::Replace,
            Action::Delete => Self::Delete,
            Action::NoOp => Self::NoOp,
            Action::Read => Self::Read,
        }
    }
}

impl Step {
    /// Lower-case name, as the final table shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Import => "import",
            Self::Forget => "forget",
            Self::Keep => "keep",
            Self::Create => Action::Create.as_str(),
            Self::Update => Action::Update.as_str(),
            Self::Replace => Action::Replace.as_str(),
            Self::Delete => Action::Delete.as_str(),
            Self::NoOp => Action::NoOp.as_str(),
            Self::Read => Action::Read.as_str(),
        }
    }
}

/// Counts for the summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Creates plus replacements.
    pub add: usize,
    /// Updates.
    pub change: usize,
    /// Deletes plus replacements.
    pub destroy: usize,
    /// Updates that run only if a dependency's outputs change
    /// ([`Change::conditional`]), not counted in `change`.
    #[serde(default)]
    pub conditional: usize,
    /// Creates that re-attach to a live resource ([`Change::import`]), not
    /// counted in `add`.
    #[serde(default)]
    pub import: usize,
    /// Deletes of resources already gone ([`Change::gone`]): only removed
    /// from the state, not counted in `destroy`.
    #[serde(default)]
    pub forget: usize,
    /// Updates that only record a resource as created again
    /// ([`Change::kept`]), not counted in `change`.
    #[serde(default)]
    pub keep: usize,
}

/// A complete plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The plan format version (for plan files and `--json`).
    pub format_version: u32,
    /// Whether this is a destroy plan.
    pub destroy: bool,
    /// The config the plan was made from.
    pub config: Config,
    /// The state serial the plan was made against.
    pub state_serial: u64,
    /// The state lineage the plan was made against.
    pub state_lineage: Uuid,
    /// `--target` addresses, if any.
    pub targets: Vec<Address>,
    /// The AWS account the plan was made in (set by the caller once the
    /// identity is known); `apply FILE` refuses another account.
    #[serde(default)]
    pub account_id: Option<String>,
    /// The destroy's choices (`--force-destroy-buckets`), checked at plan
    /// time and acted on before each delete.
    #[serde(default)]
    pub delete_options: DeleteOptions,
    /// One entry per address, sorted by address.
    pub changes: Vec<Change>,
}

/// The plan format this build writes.
pub const PLAN_FORMAT_VERSION: u32 = 1;

impl Plan {
    /// Counts creates, updates and deletes like Terraform's summary line.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for c in &self.changes {
            match c.action {
                Action::Create if c.import.is_some() => s.import += 1,
                Action::Create => s.add += 1,
                Action::Update if c.conditional => s.conditional += 1,
                Action::Update if c.kept => s.keep += 1,
                Action::Update => s.change += 1,
                Action::Replace => {
                    s.add += 1;
                    s.destroy += 1;
                }
                Action::Delete if c.gone => s.forget += 1,
                Action::Delete => s.destroy += 1,
                Action::NoOp | Action::Read => {}
            }
        }
        s
    }

    /// Whether applying the plan would change anything.
    pub fn has_changes(&self) -> bool {
        self.changes.iter().any(|c| c.action.is_change())
    }

    /// The changes whose state entry apply refreshes with live values
    /// ([`Change::refreshed`]): no-ops, and conditional updates (no field
    /// of their own changes; they run only if a dependency's outputs do).
    pub fn refreshes(&self) -> impl Iterator<Item = &Change> {
        self.changes
            .iter()
            .filter(|c| (c.action == Action::NoOp || c.conditional) && !c.refreshed.is_empty())
    }

    /// Whether apply writes anything to the state without calling a
    /// service: [`Plan::refreshes`], or dependencies to record
    /// ([`Change::reordered`]). A plan without changes but with these is
    /// still applied.
    pub fn records_state(&self) -> bool {
        self.refreshes().next().is_some() || self.changes.iter().any(|c| c.reordered)
    }

    /// The graph of the plan's changes in execution order: for an apply,
    /// dependencies first; for a destroy, dependants first. A delete of `c`
    /// goes before every change to what `c` depended on, except a no-op or a
    /// read, to which nothing happens (the reverse of creation order). A
    /// delete of `d` also waits for the change of each resource that no
    /// longer depends on `d` ([`Change::released`]), which uses it until that
    /// change is applied, unless that change already waits for the delete
    /// through the edges above (`x` → `d` → `y` where the config now makes
    /// `x` depend on `y` and `y` changes: `d` goes first, as before; waiting
    /// for `x` too would be a cycle).
    ///
    /// # Errors
    /// [`GraphError::Cycle`] when the recorded and desired dependencies
    /// contradict each other.
    pub fn execution_graph(&self) -> Result<Dag, GraphError> {
        let present: BTreeMap<&Address, &Change> =
            self.changes.iter().map(|c| (&c.address, c)).collect();
        let mut deps: BTreeMap<Address, Vec<Address>> = self
            .changes
            .iter()
            .map(|c| (c.address.clone(), Vec::new()))
            .collect();
        for c in &self.changes {
            for d in &c.dependencies {
                let Some(of_d) = present.get(d) else {
                    continue;
                };
                if c.action != Action::Delete {
                    deps.get_mut(&c.address).expect("present").push(d.clone());
                } else if !matches!(of_d.action, Action::NoOp | Action::Read) {
                    // `c` depended on `d`: whatever happens to `d` waits
                    // until `c` is deleted.
                    deps.get_mut(d).expect("present").push(c.address.clone());
                }
            }
        }
        for c in self.changes.iter().filter(|c| c.action != Action::Delete) {
            for d in &c.released {
                let deleted = present.get(d).is_some_and(|r| r.action == Action::Delete);
                if deleted && !waits_for(&deps, &c.address, d) {
                    deps.get_mut(d).expect("present").push(c.address.clone());
                }
            }
        }
        Dag::new(deps)
    }
}

/// Whether `from` waits, directly or through others, for `to` in `deps`
/// (address → the addresses it waits for).
fn waits_for(deps: &BTreeMap<Address, Vec<Address>>, from: &Address, to: &Address) -> bool {
    let mut seen = BTreeSet::new();
    let mut next = vec![from];
    while let Some(at) = next.pop() {
        if at == to {
            return true;
        }
        if seen.insert(at) {
            next.extend(deps.get(at).into_iter().flatten());
        }
    }
    false
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The desired graph or the targets are invalid.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// Some resources could not be read.
    #[error(transparent)]
    Refresh(#[from] refresh::RefreshError),
    /// A `--replace` address cannot be replaced.
    #[error(transparent)]
    Replace(#[from] replace::ReplaceError),
    /// A `--target` address names no resource.
    #[error(transparent)]
    Unknown(#[from] unknown::UnknownAddress),
    /// Plan-time checks found changes that could not finish.
    #[error(transparent)]
    Check(#[from] check::CheckError),
    /// The service refused a planned update.
    #[error(transparent)]
    Preview(#[from] preview::PreviewError),
    /// Two or more addresses of the state record the same resource (a
    /// state edited by hand, or merged from two copies): whatever one
    /// address plans (a delete, a replacement) would hit the resource the
    /// other manages.
    #[error(
        "{} record the same resource {physical_id}; one resource is managed from one address. \
         Remove the wrong one from the state (`kfaws state rm ADDRESS` forgets it and deletes \
         nothing), then plan again",
        addresses.iter().map(ToString::to_string).collect::<Vec<_>>().join(" and ")
    )]
    SharedResource {
        /// The resource's id as recorded.
        physical_id: String,
        /// The addresses recording it, sorted.
        addresses: Vec<Address>,
    },
    /// A create re-attaches to (imports) the resource that a delete of the
    /// same plan removes: the configuration names it at a new address, the
    /// state at the old one (a renamed `[access_entries.NAME]` table, say).
    /// The apply would delete it, then fail to import it.
    #[error(
        "{import} would import {physical_id}, which the delete of {deleted} removes in the same \
         apply (the configuration names it {import} now, the state {deleted}); nothing was \
         changed. To keep it under the new name: `kfaws state rm {deleted}` (forgets it, deletes \
         nothing), then `kfaws apply` imports it as {import}. To make it again instead: `kfaws \
         destroy --target {deleted}`, then `kfaws apply`"
    )]
    ImportOfDeleted {
        /// The address whose create imports it.
        import: Address,
        /// The address whose delete removes it.
        deleted: Address,
        /// The resource's id.
        physical_id: String,
    },
    /// A destroy `--target` names a resource of the configuration that the
    /// state does not hold: kfaws has nothing of it to delete.
    #[error(
        "--target {0}: not in the state, so there is nothing of it to destroy (it is in the \
         configuration; removed with `kfaws state rm`, or never applied). If it exists (an AWS \
         resource with this deployment's tags, a Kubernetes bundle with its ApplySet parent), \
         `kfaws apply --target {0}` imports it, then destroy deletes it"
    )]
    TargetNotInState(Address),
    /// A recorded resource's kind is unknown to this build.
    #[error(
        "{address} has kind {kind:?}, which this kfaws cannot manage; it cannot be read or deleted"
    )]
    UnknownKind {
        /// The address.
        address: Address,
        /// The recorded kind.
        kind: String,
    },
}

/// `address: message` pairs on one line, for the errors of steps that run
/// for every resource and report all failures together.
/// `a: message` for one failure; for several, their count, then one per line (a refusal
/// runs to several hundred characters, and ten on one line cannot be read).
fn render_failures(failures: &[(Address, String)]) -> String {
    match failures {
        [(a, m)] => format!("{a}: {m}"),
        many => format!(
            "{} resources:\n  - {}\n",
            many.len(),
            many.iter()
                .map(|(a, m)| format!("{a}: {m}"))
                .collect::<Vec<_>>()
                .join("\n  - ")
        ),
    }
}

/// Inputs of [`make_plan`].
pub struct PlanRequest<'a> {
    /// The validated config.
    pub config: &'a Config,
    /// Desired resources (ignored for a destroy, except to find handles).
    pub desired: &'a [Arc<dyn Resource>],
    /// Handles for recorded resources that are not desired.
    pub provider: &'a dyn Provider,
    /// The current state.
    pub state: &'a State,
    /// Whether to plan a destroy.
    pub destroy: bool,
    /// `--target` addresses.
    pub targets: &'a [Address],
    /// `--replace` addresses (apply only).
    pub replace: &'a [Address],
    /// At most this many reads at once.
    pub parallelism: usize,
    /// The destroy's choices.
    pub delete_options: DeleteOptions,
}

/// Handles for every address a plan touches.
pub type Handles = BTreeMap<Address, Arc<dyn Resource>>;

/// The `--target` selection and the `--replace` checks of a plan, which
/// need no call: the targets with their dependencies (apply, from the graph
/// of `desired`) or the dependants they feed (destroy, from the graph of
/// `state` without the edges that only order a desired resource:
/// [`Resource::input_dependencies`]),
/// or `None` without targets. [`make_plan`] runs it before the refresh; the
/// CLI runs it on resources built offline before the credentials are
/// looked up, so a mistyped address fails before the first AWS call (the
/// profile's addresses depend on the config alone). `provider` says why an
/// address is absent ([`Provider::why_absent`]).
///
/// # Errors
/// [`PlanError::Graph`] for a dependency cycle; [`PlanError::Unknown`] for
/// a target that names no resource (an apply's: none of the config; a
/// destroy's: none of the config or the state);
/// [`PlanError::TargetNotInState`] for a destroy target only the config
/// holds; [`PlanError::Replace`] for a refused `--replace`.
pub fn select(
    desired: &[Arc<dyn Resource>],
    state: &State,
    provider: &dyn Provider,
    targets: &[Address],
    replace: &[Address],
    destroy: bool,
) -> Result<Option<Dag>, PlanError> {
    let desired_graph = Dag::new(
        desired
            .iter()
            .map(|r| (r.address().clone(), r.dependencies())),
    )?;
    let known = unknown::Known {
        desired,
        state,
        provider,
        destroy,
    };
    known.check(unknown::Flag::Target, targets)?;
    let targeted = match targets {
        [] => None,
        targets if destroy => {
            if let Some(t) = targets.iter().find(|t| !state.resources.contains_key(*t)) {
                return Err(PlanError::TargetNotInState(t.clone()));
            }
            Some(inputs_graph(desired, state)?.select(targets, Closure::Dependants)?)
        }
        targets => Some(desired_graph.select(targets, Closure::Dependencies)?),
    };
    if !destroy {
        replace::check(replace, &known, targeted.as_ref())?;
    }
    Ok(targeted)
}

/// Refreshes, diffs and targets: the whole of `kfaws plan` but the printing.
///
/// # Errors
/// [`PlanError`].
pub async fn make_plan(req: PlanRequest<'_>) -> Result<(Plan, Handles), PlanError> {
    if let Some((physical_id, addresses)) = req.state.shared_physical_ids().into_iter().next() {
        return Err(PlanError::SharedResource {
            physical_id,
            addresses,
        });
    }
    let targeted = select(
        req.desired,
        req.state,
        req.provider,
        req.targets,
        req.replace,
        req.destroy,
    )?;
    let handles = handles(req.desired, req.provider, req.state)?;
    let observed = refresh::refresh(&handles, req.state, req.parallelism).await?;
    let mut changes = if req.destroy {
        diff::diff_destroy(req.state, &observed)
    } else {
        replace::check_dependants(req.replace, req.desired, req.state, &observed)?;
        diff::diff_apply(
            req.desired,
            req.state,
            &observed,
            &replace::set(req.replace),
        )
    };
    for c in &mut changes {
        if c.action == Action::Delete && c.reason == diff::NOT_IN_CONFIG {
            if let Some(why) = req.provider.why_removed(&c.address) {
                c.reason = why;
            }
        }
    }
    if let Some(keep) = &targeted {
        changes.retain(|c| keep.contains(&c.address));
    }
    check::check(
        &changes,
        &handles,
        req.state,
        &req.delete_options,
        req.parallelism,
    )
    .await?;
    preview::preview(&mut changes, &handles, req.state, req.parallelism).await?;
    if let Some(conflict) = import_of_deleted(&changes, req.state) {
        return Err(conflict);
    }
    let plan = Plan {
        format_version: PLAN_FORMAT_VERSION,
        destroy: req.destroy,
        config: req.config.clone(),
        state_serial: req.state.serial,
        state_lineage: req.state.lineage,
        targets: req.targets.to_vec(),
        account_id: None,
        delete_options: req.delete_options,
        changes,
    };
    Ok((plan, handles))
}

/// The first create of `changes` that imports a resource another change deletes (same
/// physical id as the deleted address records in `state`): [`PlanError::ImportOfDeleted`].
fn import_of_deleted(changes: &[Change], state: &State) -> Option<PlanError> {
    changes.iter().find_map(|c| {
        let id = c.import.as_deref()?;
        let deleted = changes.iter().find(|d| {
            matches!(d.action, Action::Delete | Action::Replace)
                && d.address != c.address
                && state
                    .resources
                    .get(&d.address)
                    .and_then(|r| r.physical_id.as_deref())
                    == Some(id)
        })?;
        Some(PlanError::ImportOfDeleted {
            import: c.address.clone(),
            deleted: deleted.address.clone(),
            physical_id: id.to_string(),
        })
    })
}

/// [`state_graph`] without the edges from a dependency that only orders a resource of
/// `desired` ([`Resource::input_dependencies`] leaves it out): what a destroy `--target` of a
/// resource takes with it. Destroying an access entry or a node group does not destroy the
/// Kubernetes bundles that merely follow it; destroying the cluster does.
fn inputs_graph(desired: &[Arc<dyn Resource>], state: &State) -> Result<Dag, GraphError> {
    let inputs: BTreeMap<&Address, Vec<Address>> = desired
        .iter()
        .map(|r| (r.address(), r.input_dependencies()))
        .collect();
    Dag::new(state.resources.iter().map(|(a, r)| {
        let deps = r
            .dependencies
            .iter()
            .filter(|d| state.resources.contains_key(*d))
            .filter(|d| inputs.get(a).is_none_or(|i| i.contains(d)))
            .cloned()
            .collect();
        (a.clone(), deps)
    }))
}

/// The graph recorded in state (what exists and what it depended on).
///
/// # Errors
/// [`GraphError`] for a state whose dependencies are inconsistent.
pub fn state_graph(state: &State) -> Result<Dag, GraphError> {
    Dag::new(state.resources.iter().map(|(a, r)| {
        let deps = r
            .dependencies
            .iter()
            .filter(|d| state.resources.contains_key(*d))
            .cloned()
            .collect();
        (a.clone(), deps)
    }))
}

/// Handles for every desired resource and every recorded one (through the provider).
///
/// # Errors
/// [`PlanError::UnknownKind`] for a recorded kind the provider does not know.
pub fn handles(
    desired: &[Arc<dyn Resource>],
    provider: &dyn Provider,
    state: &State,
) -> Result<Handles, PlanError> {
    let mut out: Handles = desired
        .iter()
        .map(|r| (r.address().clone(), Arc::clone(r)))
        .collect();
    for (address, recorded) in &state.resources {
        if out.contains_key(address) {
            continue;
        }
        let handle =
            provider
                .handle_for(address, recorded)
                .ok_or_else(|| PlanError::UnknownKind {
                    address: address.clone(),
                    kind: recorded.kind.clone(),
                })?;
        out.insert(address.clone(), handle);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::diff::tests::{recorded, Fake};
    use crate::state::Status;
    use serde_json::json;

    fn a(s: &str) -> Address {
        Address::new(s).unwrap()
    }

    fn change(address: &str, action: Action, import: Option<&str>) -> Change {
        Change {
            import: import.map(str::to_string),
            ..crate::plan::render::tests::change(address, action)
        }
    }

    /// A table renamed in the config: the new address would import what the old one's delete
    /// removes. Refused, naming both; an import of anything else is not.
    #[test]
    fn an_import_of_what_the_same_plan_deletes_is_refused() {
        let mut state = State::new("ml");
        let mut old = recorded(Status::Created, json!({}));
        old.physical_id = Some("arn:entry/alice".into());
        state.resources.insert(a("eks.access-entry.viewer"), old);
        let mut changes = vec![
            change(
                "eks.access-entry.alice",
                Action::Create,
                Some("arn:entry/alice"),
            ),
            change("eks.access-entry.viewer", Action::Delete, None),
        ];
        let e = import_of_deleted(&changes, &state).unwrap();
        assert!(
            matches!(&e, PlanError::ImportOfDeleted { import, deleted, .. }
                if *import == a("eks.access-entry.alice") && *deleted == a("eks.access-entry.viewer")),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("`kfaws state rm eks.access-entry.viewer`"),
            "{e}"
        );
        changes[0].import = Some("arn:entry/bob".into());
        assert!(import_of_deleted(&changes, &state).is_none());
    }

    /// A destroy `--target` takes the dependants that take its outputs, not those that only
    /// follow it.
    #[test]
    fn a_destroy_target_takes_only_the_dependants_it_feeds() {
        let (cluster, entry, bundle) = (a("eks.cluster"), a("eks.access-entry.x"), a("k8s.app"));
        let mut state = State::new("ml");
        for (addr, deps) in [
            (&cluster, vec![]),
            (&entry, vec![cluster.clone()]),
            (&bundle, vec![cluster.clone(), entry.clone()]),
        ] {
            let mut r = recorded(Status::Created, json!({}));
            r.dependencies = deps;
            state.resources.insert(addr.clone(), r);
        }
        let desired: Vec<Arc<dyn Resource>> = vec![
            Arc::new(Fake::managed(cluster.clone(), vec![])),
            Arc::new(Fake::managed(entry.clone(), vec![cluster.clone()])),
            Arc::new(Fake {
                only_order: vec![entry.clone()],
                ..Fake::managed(bundle.clone(), vec![cluster.clone()])
            }),
        ];
        let graph = inputs_graph(&desired, &state).unwrap();
        let keep = graph
            .select(std::slice::from_ref(&entry), Closure::Dependants)
            .unwrap();
        assert!(keep.contains(&entry) && !keep.contains(&bundle));
        let keep = graph
            .select(std::slice::from_ref(&cluster), Closure::Dependants)
            .unwrap();
        assert!(keep.contains(&bundle) && keep.contains(&entry));
    }
}
