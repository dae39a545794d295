//! Plan-time checks: every change asks its resource whether it can finish
//! ([`Resource::check`]), in parallel, before the plan is returned. A
//! failed check fails the plan, so nothing is written or created for a
//! plan that would stop half way (a taken role name, a bucket that is not
//! empty, something else's network interface in the VPC).
//!
//! [`Resource::check`]: crate::resource::Resource::check

use std::collections::BTreeSet;

use futures::stream::{self, StreamExt};

use super::{Action, Change, Handles};
use crate::address::Address;
use crate::resource::{Check, DeleteOptions};
use crate::state::State;

/// [`Check::held`] as the plan asks it: the resource fills it in for a create that
/// re-attaches.
static NOTHING_HELD: BTreeSet<String> = BTreeSet::new();

/// The checks that failed, by address.
#[derive(Debug, thiserror::Error)]
#[error("the plan cannot be carried out; nothing was changed:\n{}", render(.failures))]
pub struct CheckError {
    /// `(address, message)` for each failed check, in address order.
    pub failures: Vec<(Address, String)>,
}

fn render(failures: &[(Address, String)]) -> String {
    failures
        .iter()
        .map(|(a, m)| format!("  {a}: {}", m.replace('\n', &format!("\n  {a}: "))))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs the check of every change that creates, updates, replaces or
/// deletes, at most `parallelism` at once; all run, so every problem is
/// reported together. Each is told what else the plan deletes and creates.
///
/// # Errors
/// [`CheckError`] listing every failed check.
///
/// # Panics
/// If a change has no handle; [`super::make_plan`] builds one for each.
pub async fn check(
    changes: &[Change],
    handles: &Handles,
    state: &State,
    options: &DeleteOptions,
    parallelism: usize,
) -> Result<(), CheckError> {
    let deletes: BTreeSet<Address> = changes
        .iter()
        .filter(|c| matches!(c.action, Action::Delete | Action::Replace))
        .map(|c| c.address.clone())
        .collect();
    let deletes = &deletes;
    let creates: BTreeSet<Address> = changes
        .iter()
        .filter(|c| matches!(c.action, Action::Create | Action::Replace))
        .map(|c| c.address.clone())
        .collect();
    let creates = &creates;
    let checks = changes.iter().filter(|c| c.action.is_change()).map(|c| {
        let handle = handles
            .get(&c.address)
            .unwrap_or_else(|| panic!("no handle for {}", c.address));
        let request = Check {
            action: c.action,
            recorded: state.resources.get(&c.address),
            options,
            deletes,
            creates,
            state,
            held: &NOTHING_HELD,
        };
        async move { (c.address.clone(), handle.check(&request).await) }
    });
    let mut failures: Vec<(Address, String)> = stream::iter(checks)
        .buffer_unordered(parallelism.max(1))
        .filter_map(
            |(address, result)| async move { result.err().map(|e| (address, e.to_string())) },
        )
        .collect()
        .await;
    if failures.is_empty() {
        return Ok(());
    }
    failures.sort();
    Err(CheckError { failures })
}
