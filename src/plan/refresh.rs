//! Refresh: read every recorded resource live, at most `parallelism` at once.

use std::collections::BTreeMap;

use futures::stream::{self, StreamExt};

use super::Handles;
use crate::address::Address;
use crate::resource::Observed;
use crate::state::State;

/// Reads that failed, by address.
#[derive(Debug, thiserror::Error)]
#[error("{}", message(.failures, *.refusals_only))]
pub struct RefreshError {
    /// `(address, message)` for each failed read.
    pub failures: Vec<(Address, String)>,
    /// Every read refused what it found ([`crate::resource::ErrorKind::Refused`],
    /// e.g. ownership tags changed by hand) rather than failing to read: their messages say
    /// the ways on, and the advice for failed reads is left out.
    pub refusals_only: bool,
}

/// What a failed read of a recorded resource asks of the user (left out when every failure is
/// a refusal, whose message says the ways on).
const ADVICE: &str = "every recorded resource is read before a plan: fix what stops the read \
                      (credentials, network, the cluster's endpoint) and run again; a resource \
                      that can no longer be read at all (its cluster deleted by hand) can be \
                      forgotten, not deleted, with `kfaws state rm ADDRESS`";

fn message(failures: &[(Address, String)], refusals_only: bool) -> String {
    let failed = super::render_failures(failures);
    match (refusals_only, failures.len()) {
        (true, _) => format!("refresh failed for {failed}"),
        // Several failures end with their list's line break.
        (false, n) if n > 1 => format!("refresh failed for {failed}Note: {ADVICE}"),
        (false, _) => format!("refresh failed for {failed}; {ADVICE}"),
    }
}

/// Reads every resource in `state` through its handle in parallel.
///
/// # Errors
/// [`RefreshError`] listing every read that failed (all reads run).
///
/// # Panics
/// If a recorded address has no handle; [`super::make_plan`] builds one for each.
pub async fn refresh(
    handles: &Handles,
    state: &State,
    parallelism: usize,
) -> Result<BTreeMap<Address, Observed>, RefreshError> {
    let reads = state.resources.iter().map(|(address, recorded)| {
        let handle = handles
            .get(address)
            .unwrap_or_else(|| panic!("no handle for recorded resource {address}"));
        async move {
            let result = handle.read(Some(recorded)).await;
            (address.clone(), result)
        }
    });
    let results: Vec<_> = stream::iter(reads)
        .buffer_unordered(parallelism.max(1))
        .collect()
        .await;
    let mut observed = BTreeMap::new();
    let mut failures = Vec::new();
    let mut refusals_only = true;
    for (address, result) in results {
        match result {
            Ok(o) => {
                observed.insert(address, o);
            }
            Err(e) => {
                refusals_only &= e.kind == crate::resource::ErrorKind::Refused;
                failures.push((address, e.to_string()));
            }
        }
    }
    if failures.is_empty() {
        Ok(observed)
    } else {
        failures.sort();
        Err(RefreshError {
            failures,
            refusals_only,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(address: &str) -> (Address, String) {
        (address.parse().unwrap(), format!("{address} was retagged"))
    }

    #[test]
    fn one_failure_is_one_line_and_several_are_one_per_line_with_their_count() {
        let one = message(&[failure("eks.cluster")], true);
        assert_eq!(
            one,
            "refresh failed for eks.cluster: eks.cluster was retagged"
        );
        let many = message(&[failure("eks.cluster"), failure("iam.oidc")], true);
        assert_eq!(
            many.lines().collect::<Vec<_>>(),
            [
                "refresh failed for 2 resources:",
                "  - eks.cluster: eks.cluster was retagged",
                "  - iam.oidc: iam.oidc was retagged",
            ]
        );
        let advised = message(&[failure("eks.cluster"), failure("iam.oidc")], false);
        assert!(
            advised.ends_with(&format!("was retagged\nNote: {ADVICE}")),
            "{advised}"
        );
        let advised = message(&[failure("eks.cluster")], false);
        assert!(
            advised.ends_with(&format!("retagged; {ADVICE}")),
            "{advised}"
        );
    }
}
