//! Preview: ask each resource planned for an update what the update will
//! change inside it (a CloudFormation change set's resource changes), and
//! each one planned for a delete what else goes with it (what other actors
//! left in a VPC), at most `parallelism` at once. Nothing is changed.
//!
//! Dependencies' outputs are taken as recorded. Where a dependency changes
//! in the same apply its new outputs are not known yet, so such an update is
//! not previewed (a preview with the old outputs would show the wrong changes).

use futures::stream::{self, StreamExt};

use super::{Action, Change, Handles};
use crate::address::Address;
use crate::resource::Inputs;
use crate::state::{State, Status};

/// Previews that failed: updates the service refused, or reads of a
/// delete's preview that failed, by address.
#[derive(Debug, thiserror::Error)]
#[error("the planned change could not be previewed for {}", super::render_failures(.failures))]
pub struct PreviewError {
    /// `(address, message)` for each failed preview.
    pub failures: Vec<(Address, String)>,
}

/// Fills [`Change::details`] of every update in `changes`, of every create
/// and replacement from [`crate::resource::Resource::preview_create`], and
/// of every delete from [`crate::resource::Resource::preview_delete`] (a
/// recorded replacement's details start with its delete half's: replacing
/// a bundle deletes what deleting it would, custom resources of its CRDs
/// included); and
/// [`Change::import`] of every create of an address the state does not
/// hold from [`crate::resource::Resource::importable`].
///
/// # Errors
/// [`PreviewError`] listing every preview that failed (all previews run).
///
/// # Panics
/// If an updated address has no handle or no state entry; [`super::make_plan`]
/// plans updates only for recorded resources it has handles for.
pub async fn preview(
    changes: &mut [Change],
    handles: &Handles,
    state: &State,
    parallelism: usize,
) -> Result<(), PreviewError> {
    for c in changes.iter_mut() {
        let Some(handle) = handles.get(&c.address) else {
            continue;
        };
        if matches!(c.action, Action::Create | Action::Replace) {
            c.details = handle.preview_create();
        }
    }
    let changing: std::collections::BTreeSet<&Address> = changes
        .iter()
        .filter(|c| c.action.is_change())
        .map(|c| &c.address)
        .collect();
    let previewed: Vec<usize> = changes
        .iter()
        .enumerate()
        .filter(|(_, c)| c.action == Action::Update && !c.kept)
        .filter(|(_, c)| {
            let handle = &handles[&c.address];
            !handle.preview_reads_inputs()
                || !handle.dependencies().iter().any(|d| changing.contains(d))
        })
        .map(|(i, _)| i)
        .collect();
    let deleted: Vec<usize> = changes
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c.action, Action::Delete | Action::Replace))
        .filter(|(_, c)| {
            handles.contains_key(&c.address) && state.resources.contains_key(&c.address)
        })
        .map(|(i, _)| i)
        .collect();
    let calls = previewed
        .into_iter()
        .chain(deleted)
        .map(|i| (i, &changes[i]))
        .map(|(i, c)| {
            let handle = &handles[&c.address];
            let recorded = &state.resources[&c.address];
            let inputs = Inputs(
                handle
                    .dependencies()
                    .into_iter()
                    .filter_map(|d| state.resources.get(&d).map(|r| (d, r.outputs.clone())))
                    .collect(),
            );
            let delete = matches!(c.action, Action::Delete | Action::Replace);
            async move {
                let details = if delete {
                    handle.preview_delete(recorded).await
                } else {
                    handle.preview_update(recorded, &inputs).await
                };
                (i, details)
            }
        });
    let results: Vec<_> = stream::iter(calls)
        .buffer_unordered(parallelism.max(1))
        .collect()
        .await;
    let mut failures = Vec::new();
    for (i, result) in results {
        match result {
            // A replacement's delete half comes first, as it runs first.
            Ok(mut details) if changes[i].action == Action::Replace => {
                details.append(&mut changes[i].details);
                changes[i].details = details;
            }
            Ok(details) => changes[i].details = details,
            Err(e) => failures.push((changes[i].address.clone(), e.to_string())),
        }
    }
    list_objects_once(changes, handles, state);
    // Creates of addresses the state does not hold, or whose recorded
    // resource is gone (deleted outside kfaws, or an id edited by hand): a
    // live resource with this state's tags is imported (create re-attaches
    // to it). An unfinished create re-attaches with its token, and says so.
    let lookups = changes
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.action == Action::Create
                && state
                    .resources
                    .get(&c.address)
                    .is_none_or(|r| r.status != Status::Creating)
        })
        .filter_map(|(i, c)| Some((i, std::sync::Arc::clone(handles.get(&c.address)?))));
    for (i, result) in lookup_imports(lookups, parallelism).await {
        match result {
            Ok(Some(id)) => {
                let why = if state.resources.contains_key(&changes[i].address) {
                    changes[i].reason.as_str()
                } else {
                    "not in state"
                };
                changes[i].reason = format!(
                    "{why}; {id} exists with this state's deployment and lineage tags, and the \
                     create re-attaches to it instead of making another"
                );
                changes[i].import = Some(id);
                // The resource is re-attached, not made: what a create would make is not news.
                changes[i].details.clear();
            }
            Ok(None) => {}
            Err(e) => failures.push((changes[i].address.clone(), e.to_string())),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        failures.sort();
        Err(PreviewError { failures })
    }
}

/// Runs the import lookup ([`crate::resource::Resource::importable`]) of
/// each resource, at most `parallelism` at once, and returns each result
/// under the key it came with (in completion order): a live resource with
/// this state's tags, by id, or `None`. Used by the plan for creates, and
/// by a destroy to name what the state does not hold.
pub async fn lookup_imports<K>(
    resources: impl IntoIterator<Item = (K, std::sync::Arc<dyn crate::resource::Resource>)>,
    parallelism: usize,
) -> Vec<(K, Result<Option<String>, crate::resource::ResourceError>)> {
    let lookups = resources
        .into_iter()
        .map(|(key, resource)| async move { (key, resource.importable().await) });
    stream::iter(lookups)
        .buffer_unordered(parallelism.max(1))
        .collect()
        .await
}

/// A Kubernetes object that several deletes of one plan remove (a user's
/// PyTorchJob goes with its namespace and with its CRD) is listed once,
/// under the change that deletes it first: dependants are deleted before
/// their dependencies, so the latest in the state's dependency order.
/// Objects are told apart by kind and `namespace/name` (unique in a
/// cluster; every bundle of a deployment is in the same one); entries that
/// are not one object (`3 more` custom resources: a Kubernetes name has no
/// space) are left alone.
fn list_objects_once(changes: &mut [Change], handles: &Handles, state: &State) {
    let Ok(graph) = super::state_graph(state) else {
        return; // make_plan reports the graph error
    };
    let rank: std::collections::BTreeMap<Address, usize> = graph
        .reverse_topological_order()
        .into_iter()
        .enumerate()
        .map(|(i, a)| (a, i))
        .collect();
    let mut deleting: Vec<usize> = changes
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c.action, Action::Delete | Action::Replace))
        .filter(|(_, c)| {
            handles
                .get(&c.address)
                .is_some_and(|h| h.kind() == crate::k8s::resource::KIND)
        })
        .map(|(i, _)| i)
        .collect();
    deleting.sort_by_key(|i| {
        rank.get(&changes[*i].address)
            .copied()
            .unwrap_or(usize::MAX)
    });
    let mut seen = std::collections::BTreeSet::new();
    for i in deleting {
        changes[i].details.retain(|d| {
            d.action != "Remove"
                || d.name.contains(' ')
                || seen.insert((d.kind.clone(), d.name.clone()))
        });
    }
}
