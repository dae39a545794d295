//! `--replace ADDR`: Terraform's `-replace` ("Forcing Re-creation of
//! Resources", Terraform CLI documentation, the successor of `terraform
//! taint`). The named resources are planned as a replacement even though
//! nothing about them changed, e.g. a node group whose nodes went bad or a
//! Kubernetes bundle to re-create from scratch.
//!
//! A replacement deletes the resource, then creates it again
//! ([`crate::engine`]), so the request is checked before a plan is returned:
//! the address must be in the configuration and in the state, be managed
//! (not a data source), and have no dependants in the state whose own
//! objects live in it (a VPC stack under an EKS cluster cannot be deleted
//! and would be left half-deleted), unless its kind says dependants survive
//! ([`Resource::replaceable_under_dependants`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::unknown::{Flag, Known, UnknownAddress};
use crate::address::Address;
use crate::resource::{Mode, Observed, Resource};
use crate::state::State;

/// Why a `--replace` request was refused; nothing was planned or changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplaceError {
    /// The address is not a resource of the configuration.
    #[error(transparent)]
    NotInConfig(#[from] UnknownAddress),
    /// The address is a data source: it is read, never created.
    #[error(
        "--replace {0}: a data source is read on every plan, not created, so it cannot be replaced"
    )]
    DataSource(Address),
    /// Nothing was ever created at the address.
    #[error("--replace {0}: not in the state, so there is nothing to replace; apply creates it")]
    NotInState(Address),
    /// `--target` leaves the address out of the plan.
    #[error("--replace {0}: not among the --target addresses and their dependencies")]
    OutsideTargets(Address),
    /// Resources recorded in the state depend on it and would not survive
    /// its deletion.
    #[error(
        "--replace {address}: {} {} on it and would break while it is deleted and made \
         again; replace them together in dependency order with `kfaws destroy --target \
         {address}` then `kfaws apply`",
        dependants.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        if dependants.len() == 1 { "depends" } else { "depend" }
    )]
    HasDependants {
        /// The address to replace.
        address: Address,
        /// Recorded resources that depend on it, sorted.
        dependants: Vec<Address>,
    },
}

/// Checks every address of `replace` against the desired resources and
/// the state (`known`, whose `destroy` is false), and against `targets` (an
/// address `--target` leaves out of the plan): what needs no call, so a
/// mistyped address fails before the refresh.
///
/// # Errors
/// The first [`ReplaceError`], in the order of `replace`.
pub fn check(
    replace: &[Address],
    known: &Known<'_>,
    targeted: Option<&crate::graph::Dag>,
) -> Result<(), ReplaceError> {
    let (desired, state) = (known.desired, known.state);
    for address in replace {
        let Some(handle) = desired.iter().find(|r| r.address() == address) else {
            return Err(known.unknown(Flag::Replace, address).into());
        };
        if handle.mode() == Mode::Data {
            return Err(ReplaceError::DataSource(address.clone()));
        }
        if !state.resources.contains_key(address) {
            return Err(ReplaceError::NotInState(address.clone()));
        }
        if targeted.is_some_and(|keep| !keep.contains(address)) {
            return Err(ReplaceError::OutsideTargets(address.clone()));
        }
    }
    Ok(())
}

/// Checks that no resource recorded in `state` depends on an address of
/// `replace`, unless its kind says dependants survive; a recorded dependant
/// the refresh found gone (`observed`) does not count.
///
/// # Errors
/// [`ReplaceError::HasDependants`] for the first address, in the order of
/// `replace`, that has some.
pub fn check_dependants(
    replace: &[Address],
    desired: &[Arc<dyn Resource>],
    state: &State,
    observed: &BTreeMap<Address, Observed>,
) -> Result<(), ReplaceError> {
    for address in replace {
        let survives = desired
            .iter()
            .find(|r| r.address() == address)
            .is_some_and(|r| r.replaceable_under_dependants());
        if survives {
            continue;
        }
        // A dependant that only follows it (not an input of the dependant's) keeps working.
        let input_of = |a: &Address| {
            desired
                .iter()
                .find(|r| r.address() == a)
                .is_none_or(|r| r.input_dependencies().contains(address))
        };
        let dependants: Vec<Address> = state
            .resources
            .iter()
            .filter(|(a, r)| {
                r.dependencies.contains(address)
                    && input_of(a)
                    && !matches!(observed.get(*a), Some(Observed::Gone))
            })
            .map(|(a, _)| a.clone())
            .collect();
        if !dependants.is_empty() {
            return Err(ReplaceError::HasDependants {
                address: address.clone(),
                dependants,
            });
        }
    }
    Ok(())
}

/// The addresses of `replace` as a set, for [`super::diff::diff_apply`].
pub fn set(replace: &[Address]) -> BTreeSet<Address> {
    replace.iter().cloned().collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::diff::tests::{present, recorded, Fake};
    use crate::state::Status;

    fn a(name: &str) -> Address {
        Address::new(name).unwrap()
    }

    /// A profile with nothing to say about absent addresses.
    struct Plain;

    impl crate::resource::Provider for Plain {
        fn handle_for(
            &self,
            _: &Address,
            _: &crate::state::ResourceState,
        ) -> Option<Arc<dyn Resource>> {
            None
        }
    }

    fn check(
        replace: &[Address],
        desired: &[Arc<dyn Resource>],
        state: &State,
        targeted: Option<&crate::graph::Dag>,
    ) -> Result<(), ReplaceError> {
        let known = Known {
            desired,
            state,
            provider: &Plain,
            destroy: false,
        };
        super::check(replace, &known, targeted)
    }

    fn fake(name: &str, deps: &[&str], mode: Mode, replaceable: bool) -> Arc<dyn Resource> {
        Arc::new(Fake {
            address: a(name),
            spec: json!({}),
            mode,
            deps: deps.iter().map(|d| a(d)).collect(),
            repairs_in_place: false,
            replaceable,
            only_order: vec![],
        })
    }

    /// network ← cluster ← nodes ← app; `zones` is a data source.
    fn world(nodes_replaceable: bool) -> (Vec<Arc<dyn Resource>>, State) {
        let desired = vec![
            fake("zones", &[], Mode::Data, false),
            fake("network", &[], Mode::Managed, false),
            fake("cluster", &["network"], Mode::Managed, false),
            fake("nodes", &["cluster"], Mode::Managed, nodes_replaceable),
            fake("app", &["nodes"], Mode::Managed, false),
        ];
        let mut state = State::new("ml");
        for (name, deps) in [
            ("network", vec![]),
            ("cluster", vec![a("network")]),
            ("nodes", vec![a("cluster")]),
            ("app", vec![a("nodes")]),
        ] {
            let mut r = recorded(Status::Created, json!({}));
            r.dependencies = deps;
            state.resources.insert(a(name), r);
        }
        (desired, state)
    }

    #[test]
    fn a_leaf_or_a_kind_whose_dependants_survive_may_be_replaced() {
        let (desired, state) = world(true);
        for replace in [vec![a("app")], vec![a("nodes"), a("app")]] {
            check(&replace, &desired, &state, None).unwrap();
            check_dependants(&replace, &desired, &state, &BTreeMap::new()).unwrap();
        }
    }

    #[test]
    fn dependants_in_the_state_refuse_it_and_are_named() {
        let (desired, state) = world(false);
        check(&[a("network")], &desired, &state, None).unwrap();
        let e = check_dependants(&[a("network")], &desired, &state, &BTreeMap::new()).unwrap_err();
        assert_eq!(
            e,
            ReplaceError::HasDependants {
                address: a("network"),
                dependants: vec![a("cluster")],
            }
        );
        assert!(
            e.to_string().contains("kfaws destroy --target network"),
            "{e}"
        );
        // Replacing the dependant too does not help: the network would be
        // deleted first, under the cluster.
        let e = check_dependants(&[a("nodes"), a("app")], &desired, &state, &BTreeMap::new())
            .unwrap_err();
        assert!(
            matches!(e, ReplaceError::HasDependants { ref address, .. } if *address == a("nodes"))
        );
        // A dependant already deleted outside kfaws does not count.
        let observed = BTreeMap::from([
            (a("app"), Observed::Gone),
            (a("cluster"), present(json!({}))),
        ]);
        check_dependants(&[a("nodes")], &desired, &state, &observed).unwrap();
    }

    /// A dependant that only follows the resource (it is no input of the dependant's, as an
    /// access entry before a Kubernetes bundle) keeps working across its replacement.
    #[test]
    fn a_dependant_that_only_follows_it_does_not_refuse_a_replacement() {
        let (mut desired, state) = world(false);
        // `app` follows `nodes` without taking anything of it.
        desired[4] = Arc::new(Fake {
            address: a("app"),
            spec: json!({}),
            mode: Mode::Managed,
            deps: vec![],
            repairs_in_place: false,
            replaceable: false,
            only_order: vec![a("nodes")],
        });
        check_dependants(&[a("nodes")], &desired, &state, &BTreeMap::new()).unwrap();
        // Its input, the cluster, still refuses.
        assert!(check_dependants(&[a("cluster")], &desired, &state, &BTreeMap::new()).is_err());
    }

    #[test]
    fn unknown_data_source_unrecorded_and_untargeted_addresses_are_refused() {
        let (desired, mut state) = world(false);
        let e = check(&[a("nowher")], &desired, &state, None).unwrap_err();
        assert!(
            matches!(e, ReplaceError::NotInConfig(ref u) if u.address == a("nowher")),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "--replace nowher: not a resource of this deployment (`kfaws graph` lists the \
             resources)"
        );
        let e = check(&[a("netwrok")], &desired, &state, None).unwrap_err();
        assert!(e.to_string().contains("did you mean network?"), "{e}");
        assert_eq!(
            check(&[a("zones")], &desired, &state, None),
            Err(ReplaceError::DataSource(a("zones")))
        );
        let only_cluster = crate::graph::Dag::new(
            desired
                .iter()
                .map(|r| (r.address().clone(), r.dependencies())),
        )
        .unwrap()
        .select(&[a("cluster")], crate::graph::Closure::Dependencies)
        .unwrap();
        assert_eq!(
            check(&[a("app")], &desired, &state, Some(&only_cluster)),
            Err(ReplaceError::OutsideTargets(a("app")))
        );
        state.resources.remove(&a("app"));
        assert_eq!(
            check(&[a("app")], &desired, &state, None),
            Err(ReplaceError::NotInState(a("app")))
        );
    }
}
