//! Saved plans: `kfaws plan -out FILE` writes one, `kfaws apply FILE`
//! applies exactly it, and refuses it if the state moved since (Terraform's
//! "Saved plan is stale" rule) or if this build would compute a different
//! desired spec from the saved config.

use std::path::{Path, PathBuf};

use super::{Handles, Plan, PLAN_FORMAT_VERSION};
use crate::address::Address;
use crate::state::replace::replace_file;
use crate::state::{spec_hash, State};

/// Why a saved plan cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PlanFileError {
    /// The file could not be read or written.
    #[error("plan file {path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// The state changed since the plan was made.
    #[error(
        "the saved plan is stale: it was made {}, the state is now serial {current} of lineage \
         {current_lineage}; run `kfaws plan` again",
        made_against(*.planned, .lineage)
    )]
    Stale {
        /// Serial the plan was made against.
        planned: u64,
        /// Its lineage.
        lineage: uuid::Uuid,
        /// Serial now.
        current: u64,
        /// Lineage now.
        current_lineage: uuid::Uuid,
    },
    /// The plan names an address this deployment does not have.
    #[error("the saved plan changes {0}, which is neither in the configuration nor in the state")]
    UnknownAddress(Address),
    /// The plan was made in another AWS account.
    #[error("the saved plan was made in AWS account {planned}, the credentials are for account {current}")]
    WrongAccount {
        /// The account of the plan.
        planned: String,
        /// The caller's account.
        current: String,
    },
    /// The desired spec computed now differs from the one planned.
    #[error("the saved plan's spec for {0} differs from what this kfaws computes now from the plan's config and the files it names (a [kubeflow] manifests file edited since the plan, or another kfaws version); run `kfaws plan` again")]
    SpecChanged(Address),
}

/// What a stale plan was made against, for [`PlanFileError::Stale`]: a
/// state never written (serial 0) has no lineage yet (its lineage is drawn
/// anew until the first write), so none is named.
fn made_against(serial: u64, lineage: &uuid::Uuid) -> String {
    if serial == 0 {
        "before the deployment had a state (an apply has written one since)".to_string()
    } else {
        format!("against state serial {serial} of lineage {lineage}")
    }
}

/// Checks before planning that [`save`] can write `path`: an existing
/// `path` (through a link too) is a regular file, and its directory exists.
/// Planning can take minutes; a path that cannot take the plan is better
/// refused before it.
///
/// # Errors
/// [`PlanFileError::Io`] naming the path or the missing directory.
pub fn check_writable(path: &Path) -> Result<(), PlanFileError> {
    // Where `save` will write: through a symbolic link, its target's directory.
    let target = crate::state::replace::destination(path).map_err(|e| PlanFileError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => Err(PlanFileError::Io {
            path: path.to_path_buf(),
            message: format!("{}: no such directory", dir.display()),
        }),
        _ => Ok(()),
    }
}

/// Writes `plan` to `path` (JSON, mode 0600) atomically
/// ([`crate::state::replace`]: a symbolic link is followed, anything but a
/// regular file refused, a missing directory is an error, as Terraform's
/// `plan -out`).
///
/// # Errors
/// [`PlanFileError::Io`].
pub fn save(plan: &Plan, path: &Path) -> Result<(), PlanFileError> {
    let bytes = serde_json::to_vec_pretty(plan).expect("a plan serializes");
    replace_file(path, &bytes, ".plan-").map_err(|(p, source)| PlanFileError::Io {
        path: path.to_path_buf(),
        // The error of the file itself, or of the directory it goes in.
        message: if p == path {
            source.to_string()
        } else {
            format!("{}: {source}", p.display())
        },
    })
}

/// Reads a plan written by [`save`].
///
/// # Errors
/// [`PlanFileError::Io`] for unreadable, malformed or newer-format files.
pub fn load(path: &Path) -> Result<Plan, PlanFileError> {
    let io = |message: String| PlanFileError::Io {
        path: path.to_path_buf(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| io(e.to_string()))?;
    let plan: Plan =
        serde_json::from_slice(&bytes).map_err(|e| io(format!("not a kfaws plan: {e}")))?;
    if plan.format_version != PLAN_FORMAT_VERSION {
        return Err(io(format!(
            "plan format {} is not {PLAN_FORMAT_VERSION}; make the plan with this kfaws",
            plan.format_version
        )));
    }
    Ok(plan)
}

/// Checks that `plan` was made in `account` and still applies to `state`
/// and to the specs `handles` compute now.
///
/// # Errors
/// [`PlanFileError::WrongAccount`], [`PlanFileError::Stale`],
/// [`PlanFileError::UnknownAddress`] or [`PlanFileError::SpecChanged`].
pub fn check(
    plan: &Plan,
    account: &str,
    state: &State,
    handles: &Handles,
) -> Result<(), PlanFileError> {
    if let Some(planned) = &plan.account_id {
        if planned != account {
            return Err(PlanFileError::WrongAccount {
                planned: planned.clone(),
                current: account.to_string(),
            });
        }
    }
    // Serial 0 is a state never written: its lineage is not fixed until the
    // first write, so only the serial can be compared.
    let never_written = plan.state_serial == 0 && state.serial == 0;
    if !never_written && (plan.state_serial != state.serial || plan.state_lineage != state.lineage)
    {
        return Err(PlanFileError::Stale {
            planned: plan.state_serial,
            lineage: plan.state_lineage,
            current: state.serial,
            current_lineage: state.lineage,
        });
    }
    for c in &plan.changes {
        let handle = handles
            .get(&c.address)
            .ok_or_else(|| PlanFileError::UnknownAddress(c.address.clone()))?;
        if let Some(planned) = &c.spec_hash {
            if *planned != spec_hash(&handle.spec()) {
                return Err(PlanFileError::SpecChanged(c.address.clone()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link (dangling, as kubectl and editors leave them) into a directory that does not
    /// exist is refused before the plan, naming the directory, not after it.
    #[test]
    fn a_dangling_link_into_a_missing_directory_is_refused_before_planning() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("plan.json");
        std::os::unix::fs::symlink(dir.path().join("gone/plan.json"), &link).unwrap();
        let e = check_writable(&link).unwrap_err().to_string();
        assert!(e.contains("gone: no such directory"), "{e}");
        std::fs::create_dir(dir.path().join("gone")).unwrap();
        check_writable(&link).unwrap();
    }

    #[test]
    fn a_plan_made_before_any_state_does_not_name_a_lineage() {
        let lineage = uuid::Uuid::new_v4();
        let current = uuid::Uuid::new_v4();
        let stale = |planned| PlanFileError::Stale {
            planned,
            lineage,
            current: 26,
            current_lineage: current,
        };
        let fresh = stale(0).to_string();
        assert!(
            fresh.contains("made before the deployment had a state")
                && !fresh.contains(&lineage.to_string())
                && fresh.contains(&format!("now serial 26 of lineage {current}")),
            "{fresh}"
        );
        let later = stale(3).to_string();
        assert!(
            later.contains(&format!("made against state serial 3 of lineage {lineage}")),
            "{later}"
        );
    }
}
