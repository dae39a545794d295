//! Diffing: desired spec vs recorded state vs refreshed live view → one
//! [`Change`] per address, with its reason. Pure: no I/O, so every action
//! and reason is unit-tested here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use super::{Action, Change, FieldChange};
use crate::address::Address;
use crate::resource::{Mode, Observed, Resource};
use crate::state::{inputs_unchanged, spec_hash, ResourceState, State, Status};

/// Changes for an apply: every desired resource, plus a delete for every
/// recorded resource that left the config. Sorted by address.
///
/// `observed` holds the refreshed view of every resource in `state` (and
/// of nothing else: resources not in state are not read). Each address of
/// `replace` that exists is replaced whatever its diff
/// (`--replace`, checked beforehand by [`super::replace::check`]).
pub fn diff_apply(
    desired: &[Arc<dyn Resource>],
    state: &State,
    observed: &BTreeMap<Address, Observed>,
    replace: &BTreeSet<Address>,
) -> Vec<Change> {
    let mut changes: Vec<Change> = desired
        .iter()
        .map(|r| {
            let recorded = state.resources.get(r.address());
            let live = observed.get(r.address());
            let mut c = diff_one(r.as_ref(), state, recorded, live);
            if let Some(recorded) = recorded {
                c.released = recorded
                    .dependencies
                    .iter()
                    .filter(|d| !c.dependencies.contains(d))
                    .cloned()
                    .collect();
            }
            if replace.contains(r.address()) {
                force_replacement(&mut c, recorded, live);
            }
            // Not for a delete already under way: what it interrupts is
            // interrupted, and the advice to avoid that is too late.
            let deleting = recorded.is_some_and(|r| r.status == Status::Deleting);
            if let (Action::Replace, Some(note), false) = (c.action, r.replace_note(), deleting) {
                c.reason = format!("{}; {note}", c.reason);
            }
            c
        })
        .collect();
    propagate_input_changes(desired, &mut changes);
    let wanted: BTreeSet<&Address> = desired.iter().map(|r| r.address()).collect();
    for (address, recorded) in &state.resources {
        if !wanted.contains(address) {
            changes.push(delete_change(
                address,
                recorded,
                observed.get(address),
                NOT_IN_CONFIG,
            ));
        }
    }
    changes.sort_by(|a, b| a.address.cmp(&b.address));
    changes
}

/// Turns `c` into a replacement requested with `--replace` when the
/// resource exists: created (or tainted, which a Kubernetes bundle would
/// otherwise repair in place, or `deleting` but left whole by a refused
/// delete) and not gone. An unfinished create, a delete under way, or a
/// resource deleted outside kfaws keeps its diff: it is made again anyway.
fn force_replacement(c: &mut Change, recorded: Option<&ResourceState>, live: Option<&Observed>) {
    // A `deleting` entry whose delete left the resource whole is kept as an
    // update ([`diff_one`]): --replace replaces it as any live resource.
    let exists = recorded.is_some_and(|r| match r.status {
        Status::Created | Status::Tainted => true,
        Status::Deleting => c.action == Action::Update,
        Status::Creating => false,
    }) && !matches!(live, Some(Observed::Gone));
    if !exists || c.action == Action::Replace {
        return;
    }
    c.action = Action::Replace;
    c.conditional = false;
    c.kept = false;
    c.reason = if c.fields.is_empty() {
        "replacement requested with --replace".to_string()
    } else {
        format!("replacement requested with --replace ({})", c.reason)
    };
}

/// A resource consumes its dependencies' outputs; when a dependency is
/// created, updated or replaced those outputs may change, so an otherwise
/// up-to-date dependant is updated too, with its new inputs (an update that
/// changes nothing is a no-op for the service: CloudFormation answers "No
/// updates are to be performed"). Terraform shows the same as "known after
/// apply". `changes` is in `desired` order; walked in dependency order here.
fn propagate_input_changes(desired: &[Arc<dyn Resource>], changes: &mut [Change]) {
    let Ok(dag) = crate::graph::Dag::new(
        desired
            .iter()
            .map(|r| (r.address().clone(), r.dependencies())),
    ) else {
        return; // make_plan reports the graph error
    };
    let index: BTreeMap<Address, usize> = changes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.address.clone(), i))
        .collect();
    let inputs: BTreeMap<Address, Vec<Address>> = desired
        .iter()
        .map(|r| (r.address().clone(), r.input_dependencies()))
        .collect();
    for address in dag.topological_order() {
        let i = index[&address];
        if changes[i].action != Action::NoOp {
            continue;
        }
        // A kept resource changes nothing its dependants read; one that only orders
        // this resource gives it nothing to read.
        let moving = inputs[&address].iter().find(|d| {
            index.get(*d).is_some_and(|&j| {
                let c = &changes[j];
                matches!(c.action, Action::Create | Action::Update | Action::Replace) && !c.kept
            })
        });
        if let Some(d) = moving {
            changes[i].action = Action::Update;
            changes[i].conditional = true;
            changes[i].reason = format!(
                "dependency {d} changes; re-applied if its outputs change (known after apply)"
            );
        }
    }
}

/// Why a resource whose recorded [`crate::state::inputs_hash`] differs is updated: its
/// dependencies' outputs changed, or the dependencies themselves (a newer
/// profile orders it after another resource); the update records them, which
/// a later destroy of it orders by.
fn dependencies_changed(recorded: &ResourceState, now: &[Address]) -> String {
    let then: BTreeSet<&Address> = recorded.dependencies.iter().collect();
    let now: BTreeSet<&Address> = now.iter().collect();
    if then == now {
        return "its dependencies' outputs changed since it was last applied".to_string();
    }
    let list = |set: BTreeSet<&&Address>| {
        set.into_iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    let added: BTreeSet<_> = now.difference(&then).collect();
    if !added.is_empty() {
        parts.push(format!("now after {}", list(added)));
    }
    let gone: BTreeSet<_> = then.difference(&now).collect();
    if !gone.is_empty() {
        parts.push(format!("no longer after {}", list(gone)));
    }
    format!(
        "its dependencies changed since it was last applied ({}); applied again to record them",
        parts.join("; ")
    )
}

/// Changes for a destroy: a delete for every recorded resource, sorted by address.
pub fn diff_destroy(state: &State, observed: &BTreeMap<Address, Observed>) -> Vec<Change> {
    state
        .resources
        .iter()
        .map(|(address, recorded)| {
            delete_change(address, recorded, observed.get(address), "destroy")
        })
        .collect()
}

fn delete_change(
    address: &Address,
    recorded: &ResourceState,
    observed: Option<&Observed>,
    why: &str,
) -> Change {
    let gone = matches!(observed, Some(Observed::Gone));
    // Only a resource kfaws saw created can have been deleted by someone
    // else; an unfinished create or delete that left nothing is kfaws's own.
    let drift = gone && matches!(recorded.status, Status::Created | Status::Tainted);
    let reason = match (gone, recorded.status) {
        (true, Status::Creating) => {
            format!("{why}; its create never finished and made nothing, only removed from state")
        }
        (true, Status::Deleting) => {
            format!("{why}; its interrupted delete finished, only removed from state")
        }
        (true, _) => format!("{why}; already gone outside kfaws, only removed from state"),
        (false, Status::Creating) => {
            format!("{why}; its create never finished, deleting what it made")
        }
        (false, Status::Deleting) => {
            format!(
                "{why}; an earlier delete did not finish (interrupted or failed), deleting again"
            )
        }
        (false, Status::Tainted) => format!("{why} (tainted)"),
        (false, Status::Created) => why.to_string(),
    };
    Change {
        address: address.clone(),
        kind: recorded.kind.clone(),
        action: Action::Delete,
        reason,
        drift,
        fields: Vec::new(),
        dependencies: recorded.dependencies.clone(),
        spec_hash: None,
        resume_token: None,
        details: Vec::new(),
        conditional: false,
        refreshed: Vec::new(),
        reordered: false,
        import: None,
        // kfaws's own interrupted delete that finished is a destroy; what
        // went outside kfaws, or a create that never made anything, is only
        // forgotten.
        gone: gone && recorded.status != Status::Deleting,
        kept: false,
        released: Vec::new(),
        sensitive: false,
    }
}

/// [`diff_one_shown`] with the values of the resource's
/// [`Resource::sensitive_fields`] hidden ([`FieldChange::hide`]).
fn diff_one(
    r: &dyn Resource,
    state: &State,
    recorded: Option<&ResourceState>,
    observed: Option<&Observed>,
) -> Change {
    let mut change = diff_one_shown(r, state, recorded, observed);
    let hidden = r.sensitive_fields();
    change.sensitive = !hidden.is_empty();
    for f in change.fields.iter_mut().chain(change.refreshed.iter_mut()) {
        if hidden.contains(&f.field.as_str()) {
            f.hide();
        }
    }
    change
}

fn diff_one_shown(
    r: &dyn Resource,
    state: &State,
    recorded: Option<&ResourceState>,
    observed: Option<&Observed>,
) -> Change {
    let desired = r.spec();
    let change = |action, reason: &str| Change {
        address: r.address().clone(),
        kind: r.kind().to_string(),
        action,
        reason: reason.to_string(),
        drift: false,
        fields: Vec::new(),
        dependencies: r.dependencies(),
        spec_hash: Some(spec_hash(&desired)),
        resume_token: None,
        details: Vec::new(),
        conditional: false,
        refreshed: Vec::new(),
        reordered: false,
        import: None,
        gone: false,
        kept: false,
        released: Vec::new(),
        sensitive: false,
    };
    if r.mode() == Mode::Data {
        return change(Action::Read, "data source, read for its outputs");
    }
    let Some(recorded) = recorded else {
        return change(Action::Create, "not in state");
    };
    // A delete the service refused (DeleteCluster answered an error) left the
    // resource whole: it is diffed as created and kept, not replaced. One under
    // way or failed half-way reports so in a replace field (`health`,
    // [`Resource::read`]) and is replaced below. A bundle's delete may have
    // taken some objects and left namespaces terminating: replaced too.
    if recorded.status == Status::Deleting
        && matches!(observed, Some(Observed::Present { .. }))
        && !r.repairs_taint_in_place()
    {
        let as_created = ResourceState {
            status: Status::Created,
            ..recorded.clone()
        };
        let mut c = diff_one_shown(r, state, Some(&as_created), observed);
        if c.action != Action::Replace {
            let kept = "an earlier delete did not take effect: it is still there and whole, so it \
                        is kept and recorded as created again";
            c.reason = match c.action {
                Action::NoOp => kept.to_string(),
                _ => format!("{kept}; {}", c.reason),
            };
            // With nothing to change, apply only records the status; drift
            // or a config change is an update as any other.
            c.kept = c.action == Action::NoOp;
            c.action = Action::Update;
            c.conditional = false;
            return c;
        }
    }
    match (recorded.status, observed) {
        (Status::Creating, _) => {
            let mut c = change(
                Action::Create,
                "an earlier create did not finish; re-attaching with its idempotency token",
            );
            c.resume_token = recorded.idempotency_token.clone();
            c
        }
        (Status::Tainted, Some(Observed::Gone)) => {
            change(Action::Create, "tainted by a failed apply, and gone")
        }
        (Status::Tainted, _) if r.repairs_taint_in_place() => change(
            Action::Update,
            "tainted by a failed apply; applied again in place, not replaced (a replacement \
             would delete what it made first)",
        ),
        (Status::Tainted, _) => change(Action::Replace, "tainted by a failed apply"),
        (Status::Deleting, Some(Observed::Gone)) => change(
            Action::Create,
            "an earlier delete finished; creating it again",
        ),
        (Status::Deleting, _) => change(Action::Replace, "an earlier delete did not finish"),
        (Status::Created, Some(Observed::Gone)) => {
            let mut c = change(Action::Create, "drift: deleted outside kfaws");
            c.drift = true;
            c
        }
        (Status::Created, live) => {
            let live = match live {
                Some(Observed::Present { spec, .. }) => Some(spec),
                _ => None,
            };
            // An unfinished update may have reached some live values: they
            // are compared with what it wanted; a live value it did not reach
            // (still the spec's before it) is not drift either.
            let (before, previous) = match &recorded.updating {
                Some(wanted) => (wanted, Some(&recorded.spec)),
                None => (&recorded.spec, None),
            };
            let fields = field_changes(&desired, before, previous, live, r.replace_fields());
            let drift = fields.iter().any(|f| f.drift);
            let mut c = if fields.iter().any(|f| f.forces_replacement) {
                change(Action::Replace, &replacement_reason(&fields))
            } else if recorded.updating.is_some() {
                let reason = if fields.is_empty() {
                    UNFINISHED_UPDATE.to_string()
                } else {
                    format!("{UNFINISHED_UPDATE}; {}", update_reason(&fields))
                };
                change(Action::Update, &reason)
            } else if fields.is_empty() {
                // Only what feeds the resource counts: a dependency that only orders it
                // (added or gone) is recorded by the apply without re-applying it.
                let (inputs, deps) = (r.input_dependencies(), r.dependencies());
                if recorded.inputs_hash.is_some()
                    && !inputs_unchanged(state, recorded, &inputs, &deps)
                {
                    // A dependency the state does not hold (removed with
                    // `kfaws state rm`, to be imported or created) has no
                    // outputs to compare yet: known after apply.
                    match inputs.iter().find(|d| !state.resources.contains_key(*d)) {
                        Some(d) => {
                            let mut c = change(
                                Action::Update,
                                &format!(
                                    "dependency {d} is not in state (to be imported or \
                                     created); re-applied if its outputs differ from those this \
                                     was applied with (known after apply)"
                                ),
                            );
                            c.conditional = true;
                            c
                        }
                        None => change(Action::Update, &dependencies_changed(recorded, &deps)),
                    }
                } else {
                    let mut c = change(Action::NoOp, "up to date");
                    c.refreshed = refreshed(&desired, &recorded.spec);
                    c.reordered = recorded.status == Status::Created
                        && deps_in_state(state, &deps) != recorded.dependencies;
                    c
                }
            } else {
                change(Action::Update, &update_reason(&fields))
            };
            c.drift = drift;
            c.fields = fields;
            c
        }
    }
}

/// `deps` that `state` holds, in their order: the dependencies an apply records
/// ([`crate::engine`] records only those in the state).
pub fn deps_in_state(state: &State, deps: &[Address]) -> Vec<Address> {
    deps.iter()
        .filter(|d| state.resources.contains_key(*d))
        .cloned()
        .collect()
}

/// Why a recorded resource that left the config is deleted (a provider may
/// say more: [`crate::resource::Provider::why_removed`]).
pub const NOT_IN_CONFIG: &str = "not in the configuration any more";

/// Why a resource whose last update was started and not recorded as done
/// ([`ResourceState::updating`]) is updated again.
pub const UNFINISHED_UPDATE: &str =
    "an earlier update did not finish (interrupted or failed); applied again";

/// Why an update: the fields the config changed, then those changed
/// outside kfaws, e.g. `config changed: kubernetes_version; drift: changed
/// outside kfaws: scaling`.
fn update_reason(fields: &[FieldChange]) -> String {
    let names = |drift: bool| {
        fields
            .iter()
            .filter(|f| f.drift == drift)
            .map(|f| f.field.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (config, drifted) = (names(false), names(true));
    match (config.is_empty(), drifted.is_empty()) {
        (_, true) => format!("config changed: {config}"),
        (true, false) => format!("drift: changed outside kfaws: {drifted}"),
        (false, false) => {
            format!("config changed: {config}; drift: changed outside kfaws: {drifted}")
        }
    }
}

/// For a resource with no field changes: the fields whose recorded value
/// differs from the desired one. Each was changed outside kfaws to exactly
/// the desired value (otherwise [`field_changes`] would have listed it), so
/// `before` is the recorded value and `after` the live (= desired) one.
/// A field the entry does not record at all is not one of them: the kfaws
/// that recorded it had no such field, and nothing changed outside it.
fn refreshed(desired: &Value, recorded: &Value) -> Vec<FieldChange> {
    // With no live view the comparison is desired vs recorded.
    field_changes(desired, recorded, None, None, &[])
        .into_iter()
        .filter(|f| f.before.is_some())
        .map(|f| FieldChange { drift: true, ..f })
        .collect()
}

/// Field-level differences between the desired spec and the world as last
/// seen: the live value where the service reports one, else the recorded one.
/// A live value is drift when it is neither the recorded one nor
/// `previous`'s (the spec before an unfinished update, which the update may
/// not have reached).
fn field_changes(
    desired: &Value,
    recorded: &Value,
    previous: Option<&Value>,
    live: Option<&serde_json::Map<String, Value>>,
    replace: &[&str],
) -> Vec<FieldChange> {
    let empty = serde_json::Map::new();
    let desired = desired.as_object().unwrap_or(&empty);
    let recorded = recorded.as_object().unwrap_or(&empty);
    let previous = previous.map(|p| p.as_object().unwrap_or(&empty));
    let keys: BTreeSet<&String> = desired.keys().chain(recorded.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let want = desired.get(k);
            let was = recorded.get(k);
            let (now, drift) = match live.and_then(|l| l.get(k)) {
                Some(seen) => (
                    Some(seen),
                    Some(seen) != was
                        && previous.is_none_or(|p| {
                            Some(seen) != p.get(k) && !partly_updated(seen, was, p.get(k))
                        }),
                ),
                None => (was, false),
            };
            (want != now).then(|| FieldChange {
                sensitive: false,
                field: k.clone(),
                before: now.cloned(),
                after: want.cloned(),
                forces_replacement: replace.contains(&k.as_str()),
                drift,
                recorded: if drift { was.cloned() } else { None },
            })
        })
        .collect()
}

/// Whether list or map `seen` is what an unfinished update of a list or map
/// field may have left: every element (list) or entry (map: key and value)
/// in the one it wanted (`wanted`) or in the one before it (`before`), in any
/// mix (a bundle's objects after an update that applied some new objects and
/// pruned some old ones; an access entry's policies after one that associated
/// the new policy and failed to disassociate the old). Neither: `false`.
fn partly_updated(seen: &Value, wanted: Option<&Value>, before: Option<&Value>) -> bool {
    let (Some(wanted), Some(before)) = (wanted, before) else {
        return false;
    };
    if let (Some(seen), Some(wanted), Some(before)) =
        (seen.as_object(), wanted.as_object(), before.as_object())
    {
        return seen
            .iter()
            .all(|(k, v)| wanted.get(k) == Some(v) || before.get(k) == Some(v));
    }
    let (Some(seen), Some(wanted), Some(before)) =
        (seen.as_array(), wanted.as_array(), before.as_array())
    else {
        return false;
    };
    seen.iter()
        .all(|v| wanted.contains(v) || before.contains(v))
}

/// Why a replacement: every field that forces it, those the config changed
/// first, then those changed outside kfaws (`cidr and zone changed; tags
/// changed outside kfaws, which force replacement`). Pure.
fn replacement_reason(fields: &[FieldChange]) -> String {
    let names = |drift: bool| -> Vec<&str> {
        fields
            .iter()
            .filter(|f| f.forces_replacement && f.drift == drift)
            .map(|f| f.field.as_str())
            .collect()
    };
    let and = |names: &[&str]| match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    };
    let (changed, outside) = (names(false), names(true));
    let mut clauses = Vec::new();
    if !changed.is_empty() {
        clauses.push(format!("{} changed", and(&changed)));
    }
    if !outside.is_empty() {
        clauses.push(format!("{} changed outside kfaws", and(&outside)));
    }
    let verb = match changed.len() + outside.len() {
        1 => "forces",
        _ => "force",
    };
    format!("{}, which {verb} replacement", clauses.join("; "))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::resource::{Applied, Inputs, ResourceError};
    use crate::state::inputs_hash;
    use async_trait::async_trait;
    use serde_json::json;
    use std::time::Duration;

    /// A resource whose answers the test sets; it is never called.
    pub(crate) struct Fake {
        pub(crate) address: Address,
        pub(crate) spec: Value,
        pub(crate) mode: Mode,
        pub(crate) deps: Vec<Address>,
        pub(crate) repairs_in_place: bool,
        pub(crate) replaceable: bool,
        /// Dependencies besides `deps` that only order it (not inputs).
        pub(crate) only_order: Vec<Address>,
    }

    impl Fake {
        /// A managed fake at `address` with spec `SPEC()` depending on
        /// `deps`, neither repaired in place nor replaceable under dependants.
        pub(crate) fn managed(address: Address, deps: Vec<Address>) -> Self {
            Fake {
                address,
                spec: SPEC(),
                mode: Mode::Managed,
                deps,
                repairs_in_place: false,
                only_order: vec![],
                replaceable: false,
            }
        }
    }

    #[async_trait]
    impl Resource for Fake {
        fn address(&self) -> &Address {
            &self.address
        }
        fn kind(&self) -> &'static str {
            "fake"
        }
        fn dependencies(&self) -> Vec<Address> {
            self.deps.iter().chain(&self.only_order).cloned().collect()
        }
        fn input_dependencies(&self) -> Vec<Address> {
            self.deps.clone()
        }
        fn mode(&self) -> Mode {
            self.mode
        }
        fn spec(&self) -> Value {
            self.spec.clone()
        }
        fn replace_fields(&self) -> &[&str] {
            &["cidr", "zone"]
        }
        /// The spec field `secret` (no other test's spec has one).
        fn sensitive_fields(&self) -> &'static [&'static str] {
            &["secret"]
        }
        fn repairs_taint_in_place(&self) -> bool {
            self.repairs_in_place
        }
        fn replaceable_under_dependants(&self) -> bool {
            self.replaceable
        }
        /// A replaceable fake stands for a node group, which has a note.
        fn replace_note(&self) -> Option<&'static str> {
            self.replaceable.then_some("the old one goes first")
        }
        fn estimate(&self) -> Duration {
            Duration::from_secs(1)
        }
        async fn read(&self, _: Option<&ResourceState>) -> Result<Observed, ResourceError> {
            unreachable!("diff is pure")
        }
        async fn create(&self, _: &str, _: &Inputs) -> Result<Applied, ResourceError> {
            unreachable!("diff is pure")
        }
        async fn update(&self, _: &ResourceState, _: &Inputs) -> Result<Applied, ResourceError> {
            unreachable!("diff is pure")
        }
        async fn delete(&self, _: &ResourceState) -> Result<(), ResourceError> {
            unreachable!("diff is pure")
        }
    }

    fn addr() -> Address {
        Address::new("stack.network").unwrap()
    }

    fn fake(spec: Value) -> Arc<dyn Resource> {
        Arc::new(Fake {
            address: addr(),
            spec,
            mode: Mode::Managed,
            deps: vec![],
            repairs_in_place: false,
            only_order: vec![],

            replaceable: false,
        })
    }

    pub(crate) fn recorded(status: Status, spec: Value) -> ResourceState {
        ResourceState {
            kind: "fake".into(),
            status,
            physical_id: Some("p-1".into()),
            idempotency_token: Some("tok".into()),
            spec_hash: spec_hash(&spec),
            spec,
            outputs: Default::default(),
            dependencies: vec![],
            updating: None,
            inputs_hash: None,
            updated_at: chrono::Utc::now(),
        }
    }

    pub(crate) fn present(spec: Value) -> Observed {
        Observed::Present {
            physical_id: Some("p-1".into()),
            spec: spec.as_object().unwrap().clone(),
            outputs: Default::default(),
        }
    }

    fn one(desired: Option<Value>, rec: Option<ResourceState>, live: Option<Observed>) -> Change {
        let mut state = State::new("ml");
        if let Some(r) = rec {
            state.resources.insert(addr(), r);
        }
        let mut observed = BTreeMap::new();
        if let Some(o) = live {
            observed.insert(addr(), o);
        }
        let desired: Vec<_> = desired.into_iter().map(fake).collect();
        let mut changes = diff_apply(&desired, &state, &observed, &BTreeSet::new());
        assert_eq!(changes.len(), 1);
        changes.remove(0)
    }

    const SPEC: fn() -> Value = || json!({"cidr": "10.0.0.0/16", "tags": {"a": "1"}});

    #[test]
    fn not_in_state_is_create() {
        let c = one(Some(SPEC()), None, None);
        assert_eq!(
            (c.action, c.reason.as_str()),
            (Action::Create, "not in state")
        );
        assert_eq!(c.spec_hash, Some(spec_hash(&SPEC())));
    }

    #[test]
    fn unchanged_is_noop() {
        let c = one(
            Some(SPEC()),
            Some(recorded(Status::Created, SPEC())),
            Some(present(SPEC())),
        );
        assert_eq!(c.action, Action::NoOp);
        assert!(c.fields.is_empty() && !c.drift && c.refreshed.is_empty());
    }

    #[test]
    fn out_of_band_change_to_the_desired_value_is_a_noop_that_refreshes_state() {
        // Recorded tags a=1; someone set a=2 live; the config now says a=2.
        let want = json!({"cidr": "10.0.0.0/16", "tags": {"a": "2"}});
        let c = one(
            Some(want.clone()),
            Some(recorded(Status::Created, SPEC())),
            Some(present(want)),
        );
        assert_eq!(c.action, Action::NoOp);
        assert!(c.fields.is_empty() && !c.drift, "{c:?}");
        assert_eq!(c.refreshed.len(), 1, "{c:?}");
        let f = &c.refreshed[0];
        assert_eq!(f.field, "tags");
        assert_eq!(f.before, Some(json!({"a": "1"})));
        assert_eq!(f.after, Some(json!({"a": "2"})));
        assert!(f.drift && !f.forces_replacement);
    }

    #[test]
    fn a_sensitive_field_s_values_are_hidden_in_the_change_the_text_and_the_json() {
        let spec = |s: &str| json!({"cidr": "10.0.0.0/16", "tags": {"a": "1"}, "secret": s});
        // Changed in the config, and changed outside kfaws to the desired value.
        let c = one(
            Some(spec("pw-new-2")),
            Some(recorded(Status::Created, spec("pw-old-1"))),
            Some(present(spec("pw-live-3"))),
        );
        assert_eq!(c.action, Action::Update);
        let f = &c.fields[0];
        assert_eq!(f.field, "secret");
        assert!(f.sensitive && f.drift, "{f:?}");
        assert_eq!(
            (&f.before, &f.after),
            (&Some(Value::Null), &Some(Value::Null))
        );
        assert_eq!(f.recorded, None);
        let refreshed = one(
            Some(spec("pw-new-2")),
            Some(recorded(Status::Created, spec("pw-old-1"))),
            Some(present(spec("pw-new-2"))),
        );
        assert!(refreshed.refreshed[0].sensitive, "{refreshed:?}");
        let plan = crate::plan::render::tests::plan(vec![c, refreshed]);
        let text = crate::plan::render::human(&plan);
        let json = serde_json::to_string(&crate::plan::render::json(&plan)).unwrap();
        for out in [&text, &json] {
            assert!(!out.contains("pw-"), "a value shows: {out}");
        }
        assert!(
            text.contains(
                "~ secret: (sensitive value) -> (sensitive value)  # changed outside kfaws"
            ),
            "{text}"
        );
        assert!(json.contains("\"sensitive\":true"), "{json}");
        // Nor the hash of the whole spec, which covers the field (the saved plan keeps it).
        assert!(!json.contains("spec_hash"), "{json}");
        assert!(serde_json::to_string(&plan).unwrap().contains("spec_hash"));
    }

    #[test]
    fn a_field_the_state_never_recorded_is_not_reported_as_changed_outside_kfaws() {
        // An entry written by a kfaws without the spec field `health`: live and desired
        // agree on it, so nothing is to do and nothing changed outside kfaws.
        let want = json!({"cidr": "10.0.0.0/16", "tags": {"a": "1"}, "health": "healthy"});
        let c = one(
            Some(want.clone()),
            Some(recorded(Status::Created, SPEC())),
            Some(present(want)),
        );
        assert_eq!(c.action, Action::NoOp);
        assert!(c.refreshed.is_empty() && !c.drift, "{c:?}");
    }

    #[test]
    fn a_config_change_the_service_does_not_report_is_an_update_not_a_refresh() {
        let want = json!({"cidr": "10.0.0.0/16", "tags": {"a": "2"}});
        let c = one(
            Some(want),
            Some(recorded(Status::Created, SPEC())),
            Some(present(json!({"cidr": "10.0.0.0/16"}))),
        );
        assert_eq!(c.action, Action::Update);
        assert!(c.refreshed.is_empty(), "{c:?}");
    }

    #[test]
    fn config_change_of_an_updatable_field_is_update() {
        let want = json!({"cidr": "10.0.0.0/16", "tags": {"a": "2"}});
        let c = one(
            Some(want),
            Some(recorded(Status::Created, SPEC())),
            Some(present(SPEC())),
        );
        assert_eq!(c.action, Action::Update);
        assert_eq!(c.reason, "config changed: tags");
        assert!(!c.drift);
        assert_eq!(c.fields[0].before, Some(json!({"a": "1"})));
        assert_eq!(c.fields[0].after, Some(json!({"a": "2"})));
    }

    #[test]
    fn an_unfinished_update_is_applied_again_and_what_it_reached_is_not_drift() {
        let want = json!({"cidr": "10.0.0.0/16", "tags": {"a": "2"}});
        let started = || {
            let mut r = recorded(Status::Created, SPEC());
            r.updating = Some(want.clone());
            r
        };
        // The update reached AWS before the interrupt.
        let c = one(
            Some(want.clone()),
            Some(started()),
            Some(present(want.clone())),
        );
        assert_eq!(c.action, Action::Update);
        assert_eq!(c.reason, UNFINISHED_UPDATE);
        assert!(!c.drift && c.fields.is_empty(), "{c:?}");
        // It did not: the fields still to change are the config's, not drift.
        let c = one(Some(want.clone()), Some(started()), Some(present(SPEC())));
        assert_eq!(c.action, Action::Update);
        assert_eq!(
            c.reason,
            format!("{UNFINISHED_UPDATE}; config changed: tags")
        );
        assert!(!c.drift && !c.fields[0].drift, "{c:?}");
        assert_eq!(c.fields[0].before, Some(json!({"a": "1"})));
        assert_eq!(c.fields[0].after, Some(json!({"a": "2"})));
        // A live value that is neither the one before nor the one wanted
        // was changed outside kfaws.
        let elsewhere = json!({"cidr": "10.0.0.0/16", "tags": {"a": "manual"}});
        let c = one(
            Some(want.clone()),
            Some(started()),
            Some(present(elsewhere)),
        );
        assert_eq!(
            c.reason,
            format!("{UNFINISHED_UPDATE}; drift: changed outside kfaws: tags")
        );
        assert!(c.drift && c.fields[0].drift, "{c:?}");
        // Without the record, the same live values would be taken for a
        // change made outside kfaws (and only recorded).
        let c = one(
            Some(want.clone()),
            Some(recorded(Status::Created, SPEC())),
            Some(present(want)),
        );
        assert_eq!(c.action, Action::NoOp);
        assert!(c.refreshed.iter().all(|f| f.drift) && !c.refreshed.is_empty());
    }

    #[test]
    fn a_map_an_unfinished_update_left_half_changed_is_not_drift() {
        let before = json!({"policies": {"Edit": "cluster"}});
        let wanted = json!({"policies": {"View": "cluster"}});
        let mut r = recorded(Status::Created, before);
        r.updating = Some(wanted.clone());
        // The update associated the new policy, then failed to disassociate the old one.
        let half = json!({"policies": {"Edit": "cluster", "View": "cluster"}});
        let c = one(Some(wanted.clone()), Some(r.clone()), Some(present(half)));
        assert_eq!(c.action, Action::Update);
        assert!(!c.drift && !c.fields[0].drift, "{c:?}");
        // An entry in neither map was added outside kfaws.
        let other = json!({"policies": {"View": "cluster", "Admin": "cluster"}});
        let c = one(Some(wanted), Some(r), Some(present(other)));
        assert!(c.drift && c.fields[0].drift, "{c:?}");
    }

    #[test]
    fn a_list_an_unfinished_update_left_half_changed_is_not_drift() {
        let before = json!({"objects": ["Namespace a", "ConfigMap a/x"]});
        let wanted = json!({"objects": ["Namespace b", "ConfigMap b/x"]});
        let mut r = recorded(Status::Created, before.clone());
        r.updating = Some(wanted.clone());
        // The update applied the new namespace, then failed before its prune;
        // the config went back to the old objects.
        let half = json!({"objects": ["ConfigMap a/x", "Namespace a", "Namespace b"]});
        let c = one(Some(before.clone()), Some(r.clone()), Some(present(half)));
        assert_eq!(c.action, Action::Update);
        assert!(!c.drift && !c.fields[0].drift, "{c:?}");
        assert_eq!(
            c.reason,
            format!("{UNFINISHED_UPDATE}; config changed: objects")
        );
        // An element in neither list was added outside kfaws.
        let other = json!({"objects": ["Namespace a", "Namespace c"]});
        let c = one(Some(before), Some(r), Some(present(other)));
        assert!(c.drift && c.fields[0].drift, "{c:?}");
    }

    #[test]
    fn config_change_of_a_replace_field_is_replace_naming_the_field() {
        let want = json!({"cidr": "10.1.0.0/16", "tags": {"a": "1"}});
        let c = one(
            Some(want),
            Some(recorded(Status::Created, SPEC())),
            Some(present(SPEC())),
        );
        assert_eq!(c.action, Action::Replace);
        assert_eq!(c.reason, "cidr changed, which forces replacement");
        assert!(c.fields[0].forces_replacement);
    }

    /// Every field that forces the replacement is named, by who changed it.
    #[test]
    fn a_replacement_forced_by_several_fields_names_each() {
        let spec = |cidr: &str, zone: &str| json!({"cidr": cidr, "zone": zone, "tags": {"a": "1"}});
        let recorded_spec = spec("10.0.0.0/16", "a");
        let c = one(
            Some(spec("10.1.0.0/16", "b")),
            Some(recorded(Status::Created, recorded_spec.clone())),
            Some(present(recorded_spec.clone())),
        );
        assert_eq!(c.reason, "cidr and zone changed, which force replacement");
        // The zone changed outside kfaws too: it is named as such, after the config's change.
        let c = one(
            Some(spec("10.1.0.0/16", "a")),
            Some(recorded(Status::Created, recorded_spec)),
            Some(present(spec("10.0.0.0/16", "c"))),
        );
        assert_eq!(
            c.reason,
            "cidr changed; zone changed outside kfaws, which force replacement"
        );
    }

    #[test]
    fn out_of_band_change_is_drift_and_update_back() {
        let live = json!({"cidr": "10.0.0.0/16", "tags": {"a": "manual"}});
        let c = one(
            Some(SPEC()),
            Some(recorded(Status::Created, SPEC())),
            Some(present(live)),
        );
        assert_eq!(c.action, Action::Update);
        assert!(c.drift);
        assert_eq!(c.reason, "drift: changed outside kfaws: tags");
        assert_eq!(c.fields[0].before, Some(json!({"a": "manual"})));
    }

    #[test]
    fn out_of_band_change_of_a_replace_field_is_drift_replace() {
        let live = json!({"cidr": "10.9.0.0/16", "tags": {"a": "1"}});
        let c = one(
            Some(SPEC()),
            Some(recorded(Status::Created, SPEC())),
            Some(present(live)),
        );
        assert_eq!(c.action, Action::Replace);
        assert!(c.drift);
        assert_eq!(
            c.reason,
            "cidr changed outside kfaws, which forces replacement"
        );
    }

    #[test]
    fn fields_the_service_does_not_report_are_compared_with_the_record() {
        let live = json!({"cidr": "10.0.0.0/16"});
        let c = one(
            Some(SPEC()),
            Some(recorded(Status::Created, SPEC())),
            Some(present(live)),
        );
        assert_eq!(c.action, Action::NoOp);
    }

    #[test]
    fn deleted_out_of_band_is_drift_create() {
        let c = one(
            Some(SPEC()),
            Some(recorded(Status::Created, SPEC())),
            Some(Observed::Gone),
        );
        assert_eq!((c.action, c.drift), (Action::Create, true));
        assert_eq!(c.reason, "drift: deleted outside kfaws");
    }

    #[test]
    fn interrupted_create_resumes_with_its_token() {
        let c = one(
            Some(SPEC()),
            Some(recorded(Status::Creating, SPEC())),
            Some(Observed::Gone),
        );
        assert_eq!(c.action, Action::Create);
        assert_eq!(c.resume_token.as_deref(), Some("tok"));
        assert!(c.reason.contains("re-attaching"));
    }

    #[test]
    fn tainted_is_replace_or_create_when_gone() {
        let c = one(
            Some(SPEC()),
            Some(recorded(Status::Tainted, SPEC())),
            Some(present(SPEC())),
        );
        assert_eq!(
            (c.action, c.reason.as_str()),
            (Action::Replace, "tainted by a failed apply")
        );
        let c = one(
            Some(SPEC()),
            Some(recorded(Status::Tainted, SPEC())),
            Some(Observed::Gone),
        );
        assert_eq!(c.action, Action::Create);
    }

    #[test]
    fn tainted_is_an_update_for_resources_that_repair_in_place() {
        let r: Arc<dyn Resource> = Arc::new(Fake {
            repairs_in_place: true,
            ..Fake::managed(addr(), vec![])
        });
        let mut state = State::new("ml");
        state
            .resources
            .insert(addr(), recorded(Status::Tainted, SPEC()));
        let observed = BTreeMap::from([(addr(), present(SPEC()))]);
        let c = diff_apply(&[r], &state, &observed, &BTreeSet::new()).remove(0);
        assert_eq!(c.action, Action::Update);
        assert!(c.reason.contains("not replaced"), "{}", c.reason);
    }

    #[test]
    fn interrupted_delete_of_a_desired_resource_is_replace_or_create() {
        // Still going: the live resource says so in a replace field (as `health`). A live
        // resource still whole is kept (a_refused_delete_keeps_the_resource).
        let c = one(
            Some(SPEC()),
            Some(recorded(Status::Deleting, SPEC())),
            Some(present(json!({"cidr": "DELETING", "tags": {"a": "1"}}))),
        );
        assert_eq!(c.action, Action::Replace);
        let c = one(
            Some(SPEC()),
            Some(recorded(Status::Deleting, SPEC())),
            Some(Observed::Gone),
        );
        assert_eq!(c.action, Action::Create);
    }

    #[test]
    fn recorded_but_not_desired_is_delete() {
        let c = one(
            None,
            Some(recorded(Status::Created, SPEC())),
            Some(present(SPEC())),
        );
        assert_eq!(
            (c.action, c.reason.as_str()),
            (Action::Delete, "not in the configuration any more")
        );
        let c = one(
            None,
            Some(recorded(Status::Created, SPEC())),
            Some(Observed::Gone),
        );
        assert_eq!(c.action, Action::Delete);
        assert!(c.drift && c.reason.contains("already gone"));
    }

    #[test]
    fn dependants_of_a_changing_resource_are_updated_with_its_outputs() {
        let net: Arc<dyn Resource> = fake(json!({"cidr": "10.1.0.0/16", "tags": {"a": "1"}}));
        let storage: Arc<dyn Resource> = Arc::new(Fake::managed(
            Address::new("stack.storage").unwrap(),
            vec![addr()],
        ));
        let far: Arc<dyn Resource> = Arc::new(Fake::managed(Address::new("far").unwrap(), vec![]));
        let mut state = State::new("ml");
        let mut observed = BTreeMap::new();
        for a in ["stack.network", "stack.storage", "far"] {
            state
                .resources
                .insert(Address::new(a).unwrap(), recorded(Status::Created, SPEC()));
            observed.insert(Address::new(a).unwrap(), present(SPEC()));
        }
        let changes = diff_apply(&[net, storage, far], &state, &observed, &BTreeSet::new());
        let by: BTreeMap<&str, &Change> = changes.iter().map(|c| (c.address.as_str(), c)).collect();
        assert_eq!(by["stack.network"].action, Action::Replace);
        assert_eq!(by["stack.storage"].action, Action::Update);
        assert_eq!(
            by["stack.storage"].reason,
            "dependency stack.network changes; re-applied if its outputs change (known after apply)"
        );
        assert!(by["stack.storage"].conditional);
        assert!(!by["stack.network"].conditional);
        assert_eq!(by["far"].action, Action::NoOp);
    }

    /// A kept resource (an earlier delete left it whole, nothing differs) changes no
    /// output, so its dependants are not planned as conditional updates.
    #[test]
    fn dependants_of_a_kept_resource_stay_up_to_date() {
        let net: Arc<dyn Resource> = fake(SPEC());
        let storage: Arc<dyn Resource> = Arc::new(Fake::managed(
            Address::new("stack.storage").unwrap(),
            vec![addr()],
        ));
        let mut state = State::new("ml");
        let mut observed = BTreeMap::new();
        for (a, status) in [
            ("stack.network", Status::Deleting),
            ("stack.storage", Status::Created),
        ] {
            state
                .resources
                .insert(Address::new(a).unwrap(), recorded(status, SPEC()));
            observed.insert(Address::new(a).unwrap(), present(SPEC()));
        }
        let changes = diff_apply(&[net, storage], &state, &observed, &BTreeSet::new());
        let by: BTreeMap<&str, &Change> = changes.iter().map(|c| (c.address.as_str(), c)).collect();
        assert!(by["stack.network"].kept, "{:?}", by["stack.network"]);
        assert_eq!(by["stack.storage"].action, Action::NoOp);
    }

    #[test]
    fn replace_forces_a_replacement_of_what_exists_and_moves_its_dependants() {
        let bundle = |name: &str, deps: Vec<Address>| -> Arc<dyn Resource> {
            Arc::new(Fake {
                address: Address::new(name).unwrap(),
                spec: SPEC(),
                mode: Mode::Managed,
                deps,
                repairs_in_place: true,
                only_order: vec![],
                replaceable: false,
            })
        };
        let (ops, users) = (
            Address::new("k8s.ops").unwrap(),
            Address::new("k8s.users").unwrap(),
        );
        let gone = Address::new("k8s.gone").unwrap();
        let desired = [
            bundle("k8s.ops", vec![]),
            bundle("k8s.users", vec![ops.clone()]),
            bundle("k8s.gone", vec![]),
        ];
        let mut state = State::new("ml");
        let mut observed = BTreeMap::new();
        for a in [&ops, &users, &gone] {
            state
                .resources
                .insert(a.clone(), recorded(Status::Created, SPEC()));
            observed.insert(a.clone(), present(SPEC()));
        }
        // Deleted outside kfaws: created again, as without --replace.
        observed.insert(gone.clone(), Observed::Gone);
        let replace = BTreeSet::from([ops.clone(), gone.clone()]);
        let changes = diff_apply(&desired, &state, &observed, &replace);
        let by: BTreeMap<&str, &Change> = changes.iter().map(|c| (c.address.as_str(), c)).collect();
        assert_eq!(
            (by["k8s.ops"].action, by["k8s.ops"].reason.as_str()),
            (Action::Replace, "replacement requested with --replace")
        );
        assert!(!by["k8s.ops"].conditional);
        assert_eq!(by["k8s.users"].action, Action::Update);
        assert!(by["k8s.users"].conditional);
        assert_eq!(by["k8s.gone"].action, Action::Create);
        assert!(by["k8s.gone"].drift);

        // A tainted bundle is repaired in place unless --replace asks.
        state.resources.get_mut(&ops).unwrap().status = Status::Tainted;
        let repaired = diff_apply(&desired, &state, &observed, &BTreeSet::new());
        assert_eq!(repaired[1].address, ops);
        assert_eq!(repaired[1].action, Action::Update);
        let replaced = diff_apply(&desired, &state, &observed, &BTreeSet::from([ops.clone()]));
        assert_eq!(replaced[1].action, Action::Replace);
    }

    #[test]
    fn replace_keeps_the_fields_a_replacement_also_changes() {
        let want = json!({"cidr": "10.0.0.0/16", "tags": {"a": "2"}});
        let mut state = State::new("ml");
        state
            .resources
            .insert(addr(), recorded(Status::Created, SPEC()));
        let observed = BTreeMap::from([(addr(), present(SPEC()))]);
        let c = diff_apply(&[fake(want)], &state, &observed, &BTreeSet::from([addr()])).remove(0);
        assert_eq!(c.action, Action::Replace);
        assert_eq!(
            c.reason,
            "replacement requested with --replace (config changed: tags)"
        );
        assert_eq!(c.fields.len(), 1);
    }

    #[test]
    fn a_config_change_beside_drift_names_each_kind() {
        let want = json!({"cidr": "10.0.0.0/16", "tags": {"a": "2"}, "size": 1});
        let rec = json!({"cidr": "10.0.0.0/16", "tags": {"a": "1"}, "size": 1});
        let live = json!({"cidr": "10.0.0.0/16", "tags": {"a": "1"}, "size": 3});
        let c = one(
            Some(want),
            Some(recorded(Status::Created, rec)),
            Some(present(live)),
        );
        assert_eq!(c.action, Action::Update);
        assert_eq!(
            c.reason,
            "config changed: tags; drift: changed outside kfaws: size"
        );
    }

    #[test]
    fn a_conditional_update_still_refreshes_what_changed_outside_kfaws() {
        // The network's tags change in the config; the storage stack depends
        // on it, and its own tags were set outside kfaws to what the config
        // now says.
        let net: Arc<dyn Resource> = fake(json!({"cidr": "10.0.0.0/16", "tags": {"a": "9"}}));
        let wanted = json!({"cidr": "10.0.0.0/16", "tags": {"a": "2"}});
        let storage: Arc<dyn Resource> = Arc::new(Fake {
            address: Address::new("stack.storage").unwrap(),
            spec: wanted.clone(),
            mode: Mode::Managed,
            deps: vec![addr()],
            repairs_in_place: false,
            only_order: vec![],

            replaceable: false,
        });
        let mut state = State::new("ml");
        let mut observed = BTreeMap::new();
        state
            .resources
            .insert(addr(), recorded(Status::Created, SPEC()));
        observed.insert(addr(), present(SPEC()));
        let st = Address::new("stack.storage").unwrap();
        state
            .resources
            .insert(st.clone(), recorded(Status::Created, SPEC()));
        observed.insert(st.clone(), present(wanted));
        let changes = diff_apply(&[net, storage], &state, &observed, &BTreeSet::new());
        let c = changes.iter().find(|c| c.address == st).unwrap();
        assert!(c.conditional && c.action == Action::Update, "{c:?}");
        assert_eq!(c.refreshed.len(), 1, "{c:?}");
        assert_eq!(c.refreshed[0].field, "tags");
    }

    #[test]
    fn a_resource_whose_dependencies_outputs_changed_since_it_was_applied_is_updated() {
        let storage: Arc<dyn Resource> = Arc::new(Fake::managed(
            Address::new("stack.storage").unwrap(),
            vec![addr()],
        ));
        let mut state = State::new("ml");
        let mut net = recorded(Status::Created, SPEC());
        net.outputs.insert("subnet".into(), json!("subnet-old"));
        state.resources.insert(addr(), net);
        let mut st = recorded(Status::Created, SPEC());
        st.dependencies = vec![addr()];
        st.inputs_hash = Some(inputs_hash(&state, &[addr()]));
        state
            .resources
            .insert(Address::new("stack.storage").unwrap(), st);
        let observed = BTreeMap::from([(Address::new("stack.storage").unwrap(), present(SPEC()))]);
        let unchanged = diff_apply(
            std::slice::from_ref(&storage),
            &state,
            &observed,
            &BTreeSet::new(),
        );
        assert_eq!(unchanged[1].action, Action::NoOp, "{unchanged:?}");
        // The network was updated, the storage update failed: the record of
        // the network has new outputs, the storage's inputs are the old ones.
        state
            .resources
            .get_mut(&addr())
            .unwrap()
            .outputs
            .insert("subnet".into(), json!("subnet-new"));
        let changes = diff_apply(&[storage], &state, &observed, &BTreeSet::new());
        let c = changes
            .iter()
            .find(|c| c.address.as_str() == "stack.storage")
            .unwrap();
        assert_eq!(c.action, Action::Update);
        assert!(c.reason.contains("outputs changed"), "{}", c.reason);
    }

    #[test]
    fn a_resource_with_a_dependency_added_since_it_was_applied_says_so() {
        let other = Address::new("stack.iam").unwrap();
        let storage: Arc<dyn Resource> = Arc::new(Fake::managed(
            Address::new("stack.storage").unwrap(),
            vec![addr(), other.clone()],
        ));
        let mut state = State::new("ml");
        state
            .resources
            .insert(addr(), recorded(Status::Created, SPEC()));
        state
            .resources
            .insert(other.clone(), recorded(Status::Created, SPEC()));
        // Applied by a version that ordered it after the network only.
        let mut st = recorded(Status::Created, SPEC());
        st.dependencies = vec![addr()];
        st.inputs_hash = Some(inputs_hash(&state, &[addr()]));
        state
            .resources
            .insert(Address::new("stack.storage").unwrap(), st);
        let observed = BTreeMap::from([(Address::new("stack.storage").unwrap(), present(SPEC()))]);
        let changes = diff_apply(&[storage], &state, &observed, &BTreeSet::new());
        let c = changes
            .iter()
            .find(|c| c.address.as_str() == "stack.storage")
            .unwrap();
        assert_eq!(c.action, Action::Update);
        assert_eq!(
            c.reason,
            "its dependencies changed since it was last applied (now after stack.iam); applied \
             again to record them"
        );
    }

    /// A dependency that only orders a resource (a node group or an access entry before a
    /// Kubernetes bundle), added since it was applied, or being created in this plan, does
    /// not re-apply it; an entry hashed over all its dependencies by an older kfaws is
    /// compared as such; a changed output of an input dependency still re-applies it.
    #[test]
    fn a_dependency_that_only_orders_a_resource_does_not_re_apply_it() {
        let bundle = Address::new("k8s.app").unwrap();
        let entry = Address::new("eks.access-entry.alice").unwrap();
        let nodes = Address::new("eks.nodegroup.cpu").unwrap();
        let r: Arc<dyn Resource> = Arc::new(Fake {
            only_order: vec![nodes.clone(), entry.clone()],
            ..Fake::managed(bundle.clone(), vec![addr()])
        });
        let mut state = State::new("ml");
        let mut cluster = recorded(Status::Created, SPEC());
        cluster
            .outputs
            .insert("endpoint".into(), json!("https://a"));
        state.resources.insert(addr(), cluster);
        let mut ng = recorded(Status::Created, SPEC());
        ng.outputs.insert("arn".into(), json!("arn:ng"));
        state.resources.insert(nodes.clone(), ng);
        // Applied by an older kfaws: ordered after the cluster and the node group, its hash
        // over both.
        let mut b = recorded(Status::Created, SPEC());
        b.dependencies = vec![addr(), nodes.clone()];
        b.inputs_hash = Some(inputs_hash(&state, &b.dependencies));
        state.resources.insert(bundle.clone(), b);
        let observed = BTreeMap::from([(bundle.clone(), present(SPEC()))]);
        // The entry is new: created by this plan, not in state.
        let entry_r: Arc<dyn Resource> = Arc::new(Fake::managed(entry.clone(), vec![addr()]));
        let desired = [Arc::clone(&r), Arc::clone(&entry_r)];
        let plan = |state: &State| {
            diff_apply(&desired, state, &observed, &BTreeSet::new())
                .into_iter()
                .find(|c| c.address == bundle)
                .unwrap()
        };
        let c = plan(&state);
        assert_eq!(c.action, Action::NoOp, "{c:?}");
        // Recorded the new way (the hash over its input dependencies), the same.
        let b = state.resources.get_mut(&bundle).unwrap();
        b.dependencies = vec![addr(), nodes.clone(), entry.clone()];
        let hash = inputs_hash(&state, &[addr()]);
        state.resources.get_mut(&bundle).unwrap().inputs_hash = Some(hash);
        assert_eq!(plan(&state).action, Action::NoOp);
        // A new output of the node group does not re-apply it either.
        state
            .resources
            .get_mut(&nodes)
            .unwrap()
            .outputs
            .insert("arn".into(), json!("arn:ng2"));
        assert_eq!(plan(&state).action, Action::NoOp);
        // The cluster's outputs, which it uses, changed: applied again.
        state
            .resources
            .get_mut(&addr())
            .unwrap()
            .outputs
            .insert("endpoint".into(), json!("https://b"));
        let c = plan(&state);
        assert_eq!(c.action, Action::Update, "{c:?}");
        assert!(c.reason.contains("outputs changed"), "{}", c.reason);
    }

    /// A dependency that only orders a resource and changes in the plan does not make it a
    /// conditional update; one it takes inputs from does.
    #[test]
    fn only_an_input_dependency_that_changes_makes_a_conditional_update() {
        let bundle = Address::new("k8s.app").unwrap();
        let nodes = Address::new("eks.nodegroup.cpu").unwrap();
        let r: Arc<dyn Resource> = Arc::new(Fake {
            only_order: vec![nodes.clone()],
            ..Fake::managed(bundle.clone(), vec![addr()])
        });
        let ng: Arc<dyn Resource> = Arc::new(Fake::managed(nodes.clone(), vec![]));
        let cluster: Arc<dyn Resource> = Arc::new(Fake::managed(addr(), vec![]));
        let mut state = State::new("ml");
        state
            .resources
            .insert(addr(), recorded(Status::Created, SPEC()));
        state
            .resources
            .insert(nodes.clone(), recorded(Status::Created, SPEC()));
        let mut b = recorded(Status::Created, SPEC());
        b.dependencies = vec![addr(), nodes.clone()];
        b.inputs_hash = Some(inputs_hash(&state, &[addr()]));
        state.resources.insert(bundle.clone(), b);
        let changed = json!({"cidr": "10.0.0.0/16", "tags": {"a": "2"}});
        let desired = |changing: &Address| -> Vec<Arc<dyn Resource>> {
            let moved: Arc<dyn Resource> = Arc::new(Fake {
                spec: changed.clone(),
                ..Fake::managed(changing.clone(), vec![])
            });
            let other = if *changing == nodes { &cluster } else { &ng };
            vec![Arc::clone(&r), moved, Arc::clone(other)]
        };
        let observed = BTreeMap::from([
            (bundle.clone(), present(SPEC())),
            (addr(), present(SPEC())),
            (nodes.clone(), present(SPEC())),
        ]);
        let bundle_change = |changing: &Address| {
            diff_apply(&desired(changing), &state, &observed, &BTreeSet::new())
                .into_iter()
                .find(|c| c.address == bundle)
                .unwrap()
        };
        assert_eq!(bundle_change(&nodes).action, Action::NoOp);
        let c = bundle_change(&addr());
        assert!(c.action == Action::Update && c.conditional, "{c:?}");
    }

    #[test]
    fn the_replace_note_is_left_out_once_the_delete_is_under_way() {
        let nodes = |status: Status| {
            let r: Arc<dyn Resource> = Arc::new(Fake {
                address: addr(),
                spec: SPEC(),
                mode: Mode::Managed,
                deps: vec![],
                repairs_in_place: false,
                only_order: vec![],
                replaceable: true,
            });
            let mut state = State::new("ml");
            state.resources.insert(addr(), recorded(status, SPEC()));
            let observed = BTreeMap::from([(addr(), present(SPEC()))]);
            diff_apply(&[r], &state, &observed, &BTreeSet::new()).remove(0)
        };
        let tainted = nodes(Status::Tainted);
        assert_eq!(tainted.action, Action::Replace);
        assert!(
            tainted.reason.ends_with("; the old one goes first"),
            "{}",
            tainted.reason
        );
        let deleting = nodes(Status::Deleting);
        assert_eq!(deleting.action, Action::Update, "a refused delete keeps it");
        // Under way: the live resource says so in a replace field.
        let replaceable = Fake {
            replaceable: true,
            ..Fake::managed(addr(), vec![])
        };
        let going = json!({"cidr": "DELETING", "tags": {"a": "1"}});
        let deleting = diff_recorded(replaceable, Status::Deleting, going);
        assert_eq!(deleting.action, Action::Replace);
        assert_eq!(deleting.reason, "an earlier delete did not finish");
    }

    /// A delete the service refused (its call failed) left the resource whole: an apply
    /// keeps it, recording it as created again, rather than replacing a healthy resource;
    /// drift on it is still repaired. A bundle, which a delete may have half taken, is
    /// replaced.
    #[test]
    fn a_refused_delete_keeps_the_resource() {
        let kept = one(
            Some(SPEC()),
            Some(recorded(Status::Deleting, SPEC())),
            Some(present(SPEC())),
        );
        assert_eq!(kept.action, Action::Update);
        assert!(kept.kept, "nothing differs: only recorded");
        assert_eq!(kept.step(), crate::plan::Step::Keep);
        assert_eq!(
            kept.reason,
            "an earlier delete did not take effect: it is still there and whole, so it is kept \
             and recorded as created again"
        );
        let drifted = one(
            Some(SPEC()),
            Some(recorded(Status::Deleting, SPEC())),
            Some(present(json!({"cidr": "10.0.0.0/16", "tags": {"a": "2"}}))),
        );
        assert_eq!(drifted.action, Action::Update);
        assert!(!drifted.kept, "drift is repaired by the update's calls");
        assert!(
            drifted
                .reason
                .ends_with("recorded as created again; drift: changed outside kfaws: tags"),
            "{}",
            drifted.reason
        );
        let bundle = Fake {
            repairs_in_place: true,
            ..Fake::managed(addr(), vec![])
        };
        let c = diff_recorded(bundle, Status::Deleting, SPEC());
        assert_eq!(c.action, Action::Replace);
        // --replace of a kept one replaces it, as the user asked.
        let mut state = State::new("ml");
        state
            .resources
            .insert(addr(), recorded(Status::Deleting, SPEC()));
        let observed = BTreeMap::from([(addr(), present(SPEC()))]);
        let c = diff_apply(
            &[fake(SPEC())],
            &state,
            &observed,
            &BTreeSet::from([addr()]),
        )
        .remove(0);
        assert_eq!(c.action, Action::Replace, "{c:?}");
        assert!(!c.kept && c.reason.starts_with("replacement requested with --replace"));
    }

    /// The apply diff of `r`, recorded with `status` and spec `SPEC()`, live as `live`.
    fn diff_recorded(r: Fake, status: Status, live: Value) -> Change {
        let mut state = State::new("ml");
        state
            .resources
            .insert(r.address.clone(), recorded(status, SPEC()));
        let observed = BTreeMap::from([(r.address.clone(), present(live))]);
        let r: Arc<dyn Resource> = Arc::new(r);
        diff_apply(&[r], &state, &observed, &BTreeSet::new()).remove(0)
    }

    #[test]
    fn data_sources_are_read() {
        let r: Arc<dyn Resource> = Arc::new(Fake {
            address: addr(),
            spec: json!({}),
            mode: Mode::Data,
            deps: vec![],
            repairs_in_place: false,
            only_order: vec![],

            replaceable: false,
        });
        let changes = diff_apply(&[r], &State::new("ml"), &BTreeMap::new(), &BTreeSet::new());
        assert_eq!(changes[0].action, Action::Read);
    }

    #[test]
    fn destroy_deletes_everything_recorded_with_reasons() {
        let mut state = State::new("ml");
        state
            .resources
            .insert(addr(), recorded(Status::Creating, SPEC()));
        let b = Address::new("b").unwrap();
        state
            .resources
            .insert(b.clone(), recorded(Status::Created, SPEC()));
        let observed = BTreeMap::from([(addr(), present(SPEC())), (b, Observed::Gone)]);
        let changes = diff_destroy(&state, &observed);
        assert!(changes.iter().all(|c| c.action == Action::Delete));
        assert!(changes[0].reason.contains("already gone"));
        assert!(changes[1].reason.contains("create never finished"));
    }

    #[test]
    fn unfinished_operations_that_left_nothing_are_not_drift() {
        let mut state = State::new("ml");
        let deleting = Address::new("d").unwrap();
        state
            .resources
            .insert(addr(), recorded(Status::Creating, SPEC()));
        state
            .resources
            .insert(deleting.clone(), recorded(Status::Deleting, SPEC()));
        let observed =
            BTreeMap::from([(addr(), Observed::Gone), (deleting.clone(), Observed::Gone)]);
        let changes = diff_destroy(&state, &observed);
        assert!(changes
            .iter()
            .all(|c| c.action == Action::Delete && !c.drift));
        let reason = |a: &Address| &changes.iter().find(|c| &c.address == a).unwrap().reason;
        let created = reason(&addr());
        assert!(
            created.contains("made nothing") && !created.contains("outside"),
            "{created}"
        );
        let deleted = reason(&deleting);
        assert!(
            deleted.contains("interrupted delete finished") && !deleted.contains("outside"),
            "{deleted}"
        );
        // kfaws's own delete that finished counts as destroyed; a create
        // that made nothing is only forgotten.
        let gone = |a: &Address| changes.iter().find(|c| &c.address == a).unwrap().gone;
        assert!(gone(&addr()) && !gone(&deleting));
        // Still there: deleted again, without calling a failed delete interrupted.
        let observed = BTreeMap::from([(deleting.clone(), present(SPEC()))]);
        let again = diff_destroy(&state, &observed);
        let again = &again.iter().find(|c| c.address == deleting).unwrap().reason;
        assert_eq!(
            again,
            "destroy; an earlier delete did not finish (interrupted or failed), deleting again"
        );
    }

    #[test]
    fn a_resource_gone_outside_kfaws_is_only_forgotten() {
        let mut state = State::new("ml");
        let tainted = Address::new("t").unwrap();
        state
            .resources
            .insert(addr(), recorded(Status::Created, SPEC()));
        state
            .resources
            .insert(tainted.clone(), recorded(Status::Tainted, SPEC()));
        let observed = BTreeMap::from([(addr(), Observed::Gone), (tainted, present(SPEC()))]);
        let changes = diff_destroy(&state, &observed);
        assert_eq!(
            changes
                .iter()
                .map(|c| (c.gone, c.drift))
                .collect::<Vec<_>>(),
            [(true, true), (false, false)]
        );
    }
}
