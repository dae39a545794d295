//! `kfaws state ...`, `kfaws untaint` and `kfaws output`.

use anyhow::{bail, Context as _};
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use kfaws::address::Address;
use kfaws::state::lock::{self, StateLock};
use kfaws::state::store::StateStore;
use kfaws::state::Status;

use super::context;
use super::Global;

fn open(g: &Global) -> anyhow::Result<(StateStore, std::path::PathBuf, String)> {
    let (name, state_dir) = context::deployment(g)?;
    let store = StateStore::open(&state_dir, &name)?;
    Ok((store, state_dir, name))
}

/// The state of the deployment, opened under its lock (held until the lock is dropped) for
/// `operation`, which changes it; with the deployment's name.
fn open_locked(g: &Global, operation: &str) -> anyhow::Result<(StateLock, StateStore, String)> {
    let (name, state_dir) = context::deployment(g)?;
    let lock = StateLock::acquire(&state_dir, &name, operation)?;
    let store = StateStore::open(&state_dir, &name)?;
    Ok((lock, store, name))
}

/// The state entry of `address`, or an error saying deployment `name` does not record it.
fn entry<'a>(
    store: &'a StateStore,
    address: &Address,
    name: &str,
) -> anyhow::Result<&'a kfaws::state::ResourceState> {
    store
        .state()
        .resources
        .get(address)
        .with_context(|| format!("{address} is not in the state of deployment {name:?}"))
}

/// `kfaws state list`.
pub fn list(g: &Global) -> anyhow::Result<u8> {
    let (store, _, name) = open(g)?;
    let state = store.state();
    if state.resources.is_empty() {
        outln!("Deployment {name:?} has no resources in its state.")?;
        return Ok(0);
    }
    let mut table = Table::new();
    table.load_style(UTF8_BORDERS_ONLY);
    table.set_header(["Address", "Kind", "Status", "ID"]);
    for (address, r) in &state.resources {
        table.add_row([
            address.to_string(),
            r.kind.clone(),
            match (r.status, &r.updating) {
                // An update was started and did not finish: `plan` shows it again.
                (Status::Created, Some(_)) => "created, update unfinished".to_string(),
                (status, _) => status.as_str().to_string(),
            },
            r.physical_id.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    outln!("{table}")?;
    for (name, e) in &state.endpoints {
        outln!(
            "SageMaker endpoint {name}: {} (job {}, {} × {}; deleted first by destroy)",
            e.status,
            e.job,
            e.instance_count,
            e.instance_type
        )?;
    }
    outln!(
        "serial {}, lineage {}, account {}, region {}",
        state.serial,
        state.lineage,
        state.account_id.as_deref().unwrap_or("-"),
        state.region.as_deref().unwrap_or("-")
    )?;
    Ok(0)
}

/// `kfaws state show ADDR`.
pub fn show(g: &Global, address: &Address) -> anyhow::Result<u8> {
    let (store, _, name) = open(g)?;
    let mut r = entry(&store, address, &name)?.clone();
    // As in a plan: a bundle's hashes cover its Secret values (see
    // `Resource::sensitive_fields`); the state file keeps them.
    kfaws::k8s::resource::hide_sensitive(&mut r, kfaws::plan::render::SENSITIVE);
    outln!("{}", serde_json::to_string_pretty(&r)?)?;
    Ok(0)
}

/// `kfaws state rm ADDR`.
pub fn rm(g: &Global, address: &Address) -> anyhow::Result<u8> {
    let (_lock, mut store, name) = open_locked(g, "state rm")?;
    let r = entry(&store, address, &name)?.clone();
    let a = address.clone();
    store.write(move |s| {
        s.resources.remove(&a);
    })?;
    // A Kubernetes bundle is found by its ApplySet parent, and its import is a server-side
    // apply (same field manager and ApplySet) that takes the objects back.
    let again = if r.kind == kfaws::k8s::resource::KIND {
        "While it is in the config, the next apply imports it again (the plan says \"will be \
         imported\": its ApplySet parent is found in the cluster, and server-side apply takes the \
         live objects back, nothing is made twice). Until then a destroy does not delete its \
         objects one by one (they go only with the cluster), and names it in a warning"
    } else {
        "If it carries this deployment's kfaws:deployment and kfaws:lineage tags and is in the \
         config, the next apply imports it again (the plan says \"will be imported\"); if its \
         tags were changed, plans refuse to create another of its name until it is deleted or \
         renamed"
    };
    outln!(
        "Removed {address} from the state. kfaws no longer manages it; it still exists{}. \
         {again}; to let it go for good, remove it from the config or delete it by hand.",
        r.physical_id
            .map(|id| format!(" ({id})"))
            .unwrap_or_default()
    )?;
    Ok(0)
}

/// `kfaws untaint ADDR`: a tainted entry becomes `created` again, so the next plan diffs it
/// with the live resource instead of replacing it.
///
/// # Errors
/// When the address is not in the state or is not tainted.
pub fn untaint(g: &Global, address: &Address) -> anyhow::Result<u8> {
    let (_lock, mut store, name) = open_locked(g, "untaint")?;
    let r = entry(&store, address, &name)?;
    if r.status != Status::Tainted {
        bail!(
            "{address} is not tainted (its status is {})",
            r.status.as_str()
        );
    }
    let id = r
        .physical_id
        .as_ref()
        .map(|id| format!(" ({id})"))
        .unwrap_or_default();
    let a = address.clone();
    store.write(move |s| {
        if let Some(r) = s.resources.get_mut(&a) {
            r.status = Status::Created;
        }
    })?;
    outln!(
        "{address}{id} is no longer tainted: the next plan compares it with the config and the \
         live resource instead of replacing it."
    )?;
    Ok(0)
}

/// `kfaws state unlock ID`.
pub fn unlock(g: &Global, id: &str, force: bool) -> anyhow::Result<u8> {
    let (name, state_dir) = context::deployment(g)?;
    let info = lock::force_unlock(&state_dir, &name, id, force)?;
    outln!(
        "Removed the lock {} held by {} (pid {}) for `{}` since {}.",
        info.id,
        info.who,
        info.pid,
        info.operation,
        info.created.to_rfc3339()
    )?;
    Ok(0)
}

/// `kfaws output [NAME] [--json]`: the profile's named outputs, or any
/// resource output as `<address>.<output>`.
pub fn output(g: &Global, name: Option<&str>, json: bool) -> anyhow::Result<u8> {
    let (store, _, deployment) = open(g)?;
    let state = store.state();
    let raw = state.outputs();
    let profile = state.profile.unwrap_or(kfaws::config::ProfileName::Vanilla);
    let named: std::collections::BTreeMap<&str, &serde_json::Value> =
        kfaws::profiles::named_outputs(profile)
            .iter()
            .filter_map(|o| Some((o.name, raw.get(&format!("{}.{}", o.address, o.key))?)))
            .collect();
    match name {
        Some(n) => {
            // A named output whose resource has not recorded it yet.
            let pending = kfaws::profiles::named_outputs(profile)
                .iter()
                .find(|o| o.name == n);
            let v =
                named
                    .get(n)
                    .copied()
                    .or_else(|| raw.get(n))
                    .with_context(|| match pending {
                        Some(o) => format!(
                            "output {n:?} of deployment {deployment:?} is not known yet: it comes \
                         from {}, which the state does not record as created; run `kfaws apply` \
                         first",
                            o.address
                        ),
                        None => format!(
                        "no output {n:?} in deployment {deployment:?}; `kfaws output` lists the \
                         named ones, `kfaws state show ADDRESS` a resource's outputs (asked for \
                         as ADDRESS.KEY)"
                    ),
                    })?;
            match (json, v.as_str()) {
                (false, Some(s)) => outln!("{s}")?,
                _ => outln!("{v}")?,
            }
        }
        None if json => outln!("{}", serde_json::to_string_pretty(&named)?)?,
        None if named.is_empty() => {
            outln!("Deployment {deployment:?} has no outputs: its state records none.")?
        }
        None => {
            for o in kfaws::profiles::named_outputs(profile) {
                if let Some(v) = named.get(o.name) {
                    outln!("{} = {v}", o.name)?;
                }
            }
        }
    }
    Ok(0)
}
