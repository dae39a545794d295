//! `--target` and `--replace` addresses that name no resource: one error
//! for both flags, saying why the address is not there where the profile
//! knows (the kfaws.toml setting that would add it, or that it left the
//! config), else the nearest address there is.

use std::fmt;
use std::sync::Arc;

use crate::address::Address;
use crate::resource::{Provider, Resource};
use crate::state::State;

/// The command-line flag an address came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// `--target`.
    Target,
    /// `--replace`.
    Replace,
}

impl fmt::Display for Flag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Target => "--target",
            Self::Replace => "--replace",
        })
    }
}

/// An address given to `flag` that the plan has no resource at; nothing
/// was planned or changed. `hint` says why, or which address is near.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {address}: {hint}")]
pub struct UnknownAddress {
    /// The flag.
    pub flag: Flag,
    /// The address as given.
    pub address: Address,
    /// Why it names nothing, and what to do.
    pub hint: String,
}

/// What an address is checked against: the desired resources, the state,
/// and the profile's reasons for an address it does not make
/// ([`Provider::why_absent`]).
#[derive(Clone, Copy)]
pub struct Known<'a> {
    /// The resources of the config.
    pub desired: &'a [Arc<dyn Resource>],
    /// The recorded resources.
    pub state: &'a State,
    /// The profile.
    pub provider: &'a dyn Provider,
    /// A destroy, whose targets are the state's resources.
    pub destroy: bool,
}

impl Known<'_> {
    fn desired_has(&self, address: &Address) -> bool {
        self.desired.iter().any(|r| r.address() == address)
    }

    /// Whether `address` names a resource for this command: one of the
    /// config, or for a destroy one of the config or the state.
    pub fn has(&self, address: &Address) -> bool {
        self.desired_has(address) || (self.destroy && self.state.resources.contains_key(address))
    }

    /// The error for `address`, which [`Known::has`] said names nothing.
    /// In the state but not the config (an apply): it says it left the
    /// config and what deletes it. Else the profile's reason, where it
    /// makes the address under another config; and the nearest address
    /// ([`nearest`]) where one is near, else the addresses it is a prefix of
    /// (`eks.nodegroup` names the node groups).
    pub fn unknown(&self, flag: Flag, address: &Address) -> UnknownAddress {
        let why = self.provider.why_absent(address);
        let lists = match self.destroy {
            true => "`kfaws state list` lists what the state holds",
            false => "`kfaws graph` lists the resources",
        };
        let mut candidates: Vec<&Address> = self.desired.iter().map(|r| r.address()).collect();
        if self.destroy {
            candidates.extend(self.state.resources.keys());
        }
        // A near typo, else the addresses under it (`eks.nodegroup` for its groups).
        let under = format!("{address}.");
        let mut near: Vec<String> = match nearest(address, candidates.iter().copied()) {
            Some(n) => vec![n.to_string()],
            None => candidates
                .iter()
                .filter(|c| c.as_str().starts_with(&under))
                .map(ToString::to_string)
                .collect(),
        };
        near.sort();
        near.dedup();
        let near = match near.as_slice() {
            [] => String::new(),
            [one] => format!("; did you mean {one}?"),
            many => format!("; did you mean one of {}?", many.join(", ")),
        };
        let hint = if self.state.resources.contains_key(address) {
            // Not `destroy --target`: it takes the dependants too (every bundle on a
            // node group).
            format!(
                "in the state but not in the configuration any more{}; a whole `kfaws apply` \
                 deletes it (`kfaws plan` shows what that changes)",
                why.map(|w| format!(": {w}")).unwrap_or_default()
            )
        } else if let Some(why) = why {
            format!("not a resource of this deployment: {why}{near}")
        } else {
            format!("not a resource of this deployment{near} ({lists})")
        };
        UnknownAddress {
            flag,
            address: address.clone(),
            hint,
        }
    }

    /// Checks each of `addresses`, in order.
    ///
    /// # Errors
    /// [`UnknownAddress`] for the first that names nothing.
    pub fn check(&self, flag: Flag, addresses: &[Address]) -> Result<(), UnknownAddress> {
        match addresses.iter().find(|a| !self.has(a)) {
            Some(a) => Err(self.unknown(flag, a)),
            None => Ok(()),
        }
    }
}

/// The candidate nearest to `address` by optimal string alignment distance
/// (Damerau–Levenshtein with adjacent transpositions, `strsim::osa_distance`)
/// if it is a likely typo: at most 2 edits, or a fifth of the address's
/// length for longer ones, and fewer than the address's own length (so
/// `x` does not suggest `k8s`). Ties go to the first in `candidates`' sorted
/// order.
pub fn nearest<'a>(
    address: &Address,
    candidates: impl IntoIterator<Item = &'a Address>,
) -> Option<&'a Address> {
    let given = address.as_str();
    let limit = (given.chars().count() / 5).max(2);
    let mut scored: Vec<(usize, &Address)> = candidates
        .into_iter()
        .map(|c| (strsim::osa_distance(given, c.as_str()), c))
        .filter(|(d, _)| *d <= limit && *d < given.chars().count())
        .collect();
    scored.sort();
    scored.first().map(|(_, c)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::diff::tests::{recorded, Fake};
    use crate::state::{ResourceState, Status};

    fn a(s: &str) -> Address {
        Address::new(s).unwrap()
    }

    /// A profile that makes `eks.nodegroup.gpu` only under another config.
    struct Groups;

    impl Provider for Groups {
        fn handle_for(&self, _: &Address, _: &ResourceState) -> Option<Arc<dyn Resource>> {
            None
        }

        fn why_absent(&self, address: &Address) -> Option<String> {
            (address.as_str() == "eks.nodegroup.gpu")
                .then(|| "kfaws.toml has no [node_groups.gpu]".into())
        }
    }

    fn desired() -> Vec<Arc<dyn Resource>> {
        [
            "k8s.kubeflow",
            "k8s.efs-csi",
            "stack.network",
            "eks.nodegroup.cpu",
        ]
        .into_iter()
        .map(|s| Arc::new(Fake::managed(a(s), vec![])) as Arc<dyn Resource>)
        .collect()
    }

    #[test]
    fn a_typo_gets_the_nearest_address_a_far_miss_none_and_an_absent_one_its_setting() {
        let desired = desired();
        let state = State::new("ml");
        let known = Known {
            desired: &desired,
            state: &state,
            provider: &Groups,
            destroy: false,
        };
        let e = known.check(Flag::Target, &[a("k8s.kubefow")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--target k8s.kubefow: not a resource of this deployment; did you mean k8s.kubeflow? \
             (`kfaws graph` lists the resources)"
        );
        let e = known
            .check(Flag::Replace, &[a("stack.netwrok")])
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--replace stack.netwrok: not a resource of this deployment; did you mean stack.network?"),
            "{e}"
        );
        let e = known.check(Flag::Target, &[a("eks.cluster")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--target eks.cluster: not a resource of this deployment (`kfaws graph` lists the \
             resources)"
        );
        assert_eq!(known.check(Flag::Target, &[a("k8s.efs-csi")]), Ok(()));
        // A prefix of addresses names them.
        let e = known
            .check(Flag::Replace, &[a("eks.nodegroup")])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--replace eks.nodegroup: not a resource of this deployment; did you mean \
             eks.nodegroup.cpu? (`kfaws graph` lists the resources)"
        );
        let e = known.check(Flag::Target, &[a("k8s")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("did you mean one of k8s.efs-csi, k8s.kubeflow?"),
            "{e}"
        );
        // An address the profile makes under another config says which setting adds it;
        // the delete of a recorded one gives the same reason.
        assert_eq!(
            Groups.why_removed(&a("eks.nodegroup.gpu")).as_deref(),
            Some("not in the configuration any more: kfaws.toml has no [node_groups.gpu]")
        );
        let e = known.unknown(Flag::Target, &a("eks.nodegroup.gpu"));
        assert_eq!(
            e.to_string(),
            "--target eks.nodegroup.gpu: not a resource of this deployment: kfaws.toml has no \
             [node_groups.gpu]; did you mean eks.nodegroup.cpu?"
        );
    }

    #[test]
    fn a_recorded_address_is_known_to_a_destroy_and_left_the_config_for_an_apply() {
        let desired = desired();
        let mut state = State::new("ml");
        state.resources.insert(
            a("eks.nodegroup.gpu"),
            recorded(Status::Created, serde_json::json!({})),
        );
        let mut known = Known {
            desired: &desired,
            state: &state,
            provider: &Groups,
            destroy: true,
        };
        assert_eq!(known.check(Flag::Target, &[a("eks.nodegroup.gpu")]), Ok(()));
        let e = known
            .check(Flag::Target, &[a("eks.nodegroup.gpi")])
            .unwrap_err();
        assert!(
            e.to_string().ends_with(
                "did you mean eks.nodegroup.gpu? (`kfaws state list` lists what the state holds)"
            ),
            "{e}"
        );
        known.destroy = false;
        let e = known
            .check(Flag::Target, &[a("eks.nodegroup.gpu")])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--target eks.nodegroup.gpu: in the state but not in the configuration any more: \
             kfaws.toml has no [node_groups.gpu]; a whole `kfaws apply` deletes it (`kfaws plan` \
             shows what that changes)"
        );
    }

    #[test]
    fn nearest_allows_two_edits_or_a_fifth_of_the_length() {
        let c = [a("stack.network"), a("stack.iam"), a("k8s.kubeflow")];
        assert_eq!(
            nearest(&a("stack.ima"), &c),
            Some(&c[1]),
            "a transposition is one edit"
        );
        assert_eq!(nearest(&a("stack.i"), &c), Some(&c[1]));
        assert_eq!(nearest(&a("stack.efs"), &c), None, "3 edits from stack.iam");
        assert_eq!(nearest(&a("k8"), &c), None);
    }
}
