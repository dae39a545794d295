//! The executor: applies a [`Plan`] by walking its execution graph and
//! calling each resource's create, update or delete, recording every
//! transition in the state before and after the call.
//!
//! The order of writes is what makes `kill -9` safe at any moment:
//! 1. `creating` + idempotency token is written **before** `create` is
//!    called, so a re-run re-attaches with the same token;
//! 2. `deleting` is written before `before_delete` and `delete`, so a
//!    re-run finishes both;
//! 3. `created` + outputs, or removal, is written after the call returns;
//! 4. a failed or timed-out create leaves the resource `tainted`, replaced
//!    on the next apply. There is no rollback.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::progress::Progress;
use super::store::{PersistError, SharedStore};
use super::walk::{walk, Outcome};
use crate::address::Address;
use crate::graph::GraphError;
use crate::plan::diff::deps_in_state;
use crate::plan::{Action, Change, Handles, Plan, Step};
use crate::resource::{DeleteOptions, ErrorKind, Inputs, Observed, Resource};
use crate::state::{inputs_hash, inputs_unchanged, spec_hash, ResourceState, Status};

/// Executor settings.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// At most this many resources change at once (`--parallelism`, default 10).
    pub parallelism: usize,
}

impl Default for ExecOptions {
    fn default() -> Self {
        Self { parallelism: 10 }
    }
}

/// What happened to one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceResult {
    /// The address.
    pub address: Address,
    /// The action taken: the planned one, or [`Action::NoOp`] for a
    /// conditional update whose dependencies' outputs did not change.
    pub action: Action,
    /// The same, with imports and forgets told apart ([`Change::step`]).
    pub step: Step,
    /// How it ended.
    pub outcome: Outcome,
    /// Wall time of its job, if it ran.
    pub elapsed: Option<Duration>,
}

/// The result of an apply or destroy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyReport {
    /// One entry per planned change, in address order.
    pub results: Vec<ResourceResult>,
    /// Whether an interrupt (SIGINT, SIGTERM, SIGHUP) arrived during the run
    /// and something did not succeed (not started, or failed after it); a
    /// run that still succeeded in full is not interrupted.
    pub interrupted: bool,
    /// Wall time of the whole walk.
    pub elapsed: Duration,
    /// No-op resources whose state entry took the live values of fields
    /// changed outside kfaws ([`crate::plan::Change::refreshed`]).
    pub refreshed: Vec<Address>,
}

impl ApplyReport {
    /// Whether every change succeeded.
    pub fn succeeded(&self) -> bool {
        !self.interrupted && self.results.iter().all(|r| r.outcome == Outcome::Succeeded)
    }
}

/// Why the executor could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The plan's changes do not form a DAG.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A change has no resource handle.
    #[error("no resource handle for {0}")]
    NoHandle(Address),
}

struct Job {
    store: SharedStore,
    handle: Arc<dyn Resource>,
    change: Change,
    progress: Arc<dyn Progress>,
    delete_options: DeleteOptions,
}

/// Applies `plan`: every change whose action is not a no-op, in dependency
/// order, at most `opts.parallelism` at once. A state write failure cancels
/// the walk (nothing may run that the state cannot record).
///
/// # Errors
/// [`ExecError`] before anything runs; failures of resources are in the report.
pub async fn execute(
    plan: &Plan,
    handles: &Handles,
    store: SharedStore,
    opts: &ExecOptions,
    progress: Arc<dyn Progress>,
    cancel: CancellationToken,
) -> Result<ApplyReport, ExecError> {
    let refreshed = record_refreshes(plan, handles, &store).await;
    let mut todo = plan.clone();
    todo.changes.retain(|c| c.action != Action::NoOp);
    let dag = todo.execution_graph()?;
    let changes: BTreeMap<Address, Change> = todo
        .changes
        .into_iter()
        .map(|c| (c.address.clone(), c))
        .collect();
    for address in changes.keys() {
        if !handles.contains_key(address) {
            return Err(ExecError::NoHandle(address.clone()));
        }
    }
    let estimate = |a: &Address| handles[a].estimate();
    let priority = dag.bottom_levels(estimate);
    let elapsed: Arc<Mutex<BTreeMap<Address, Duration>>> = Arc::default();
    let skipped: Arc<Mutex<std::collections::BTreeSet<Address>>> = Arc::default();
    let stopped: Arc<Mutex<std::collections::BTreeSet<Address>>> = Arc::default();
    let started = Instant::now();
    let abort = cancel.child_token();
    let result = walk(
        &dag,
        opts.parallelism,
        &abort,
        |a| priority[a],
        |address| {
            let job = Job {
                store: store.clone(),
                handle: Arc::clone(&handles[&address]),
                change: changes[&address].clone(),
                progress: Arc::clone(&progress),
                delete_options: plan.delete_options,
            };
            let elapsed = Arc::clone(&elapsed);
            let skipped = Arc::clone(&skipped);
            let stopped = Arc::clone(&stopped);
            let abort = abort.clone();
            async move {
                let t0 = Instant::now();
                // A conditional update first checks its dependencies' outputs: it
                // is "Checking" until it knows it changes anything.
                let starting = match job.change.conditional {
                    true => Step::NoOp,
                    false => job.change.step(),
                };
                job.progress.started(&job.change.address, starting);
                let scope = super::progress::Scope {
                    progress: Arc::clone(&job.progress),
                    address: address.clone(),
                };
                let result = super::progress::SCOPE.scope(scope, run(&job)).await;
                let performed = match &result {
                    Ok(action) => *action,
                    Err(_) => job.change.action,
                };
                if let Err(Failure::Interrupted(_)) = &result {
                    stopped
                        .lock()
                        .expect("not poisoned")
                        .insert(address.clone());
                }
                if performed != job.change.action {
                    skipped
                        .lock()
                        .expect("not poisoned")
                        .insert(address.clone());
                }
                let took = t0.elapsed();
                elapsed.lock().expect("not poisoned").insert(address, took);
                let message = result.as_ref().map(|_| ()).map_err(|e| e.to_string());
                let outcome = match &result {
                    Ok(_) => Outcome::Succeeded,
                    Err(Failure::Interrupted(m)) => Outcome::Interrupted(m.clone()),
                    Err(e) => Outcome::Failed(e.to_string()),
                };
                let step = match performed == job.change.action {
                    true => job.change.step(),
                    false => Step::from(performed),
                };
                job.progress
                    .finished(&job.change.address, step, &outcome, took);
                if let Err(Failure::State(_)) = &result {
                    abort.cancel();
                }
                message
            }
        },
    )
    .await;
    let elapsed = elapsed.lock().expect("not poisoned").clone();
    let skipped = skipped.lock().expect("not poisoned").clone();
    let unchanged = plan
        .changes
        .iter()
        .filter(|c| c.action == Action::NoOp || skipped.contains(&c.address))
        .map(|c| c.address.clone());
    record_dependencies(plan, unchanged, handles, &store).await;
    let stopped = stopped.lock().expect("not poisoned").clone();
    let results: Vec<ResourceResult> = changes
        .values()
        .map(|c| ResourceResult {
            address: c.address.clone(),
            action: if skipped.contains(&c.address) {
                Action::NoOp
            } else {
                c.action
            },
            step: if skipped.contains(&c.address) {
                Step::NoOp
            } else {
                c.step()
            },
            // A job whose wait the interrupt stopped did not fail, and what
            // waited on it was not started because of the interrupt.
            outcome: match &result.outcomes[&c.address] {
                Outcome::Failed(m) if stopped.contains(&c.address) => {
                    Outcome::Interrupted(m.clone())
                }
                Outcome::UpstreamFailed(root) if stopped.contains(root) => Outcome::NotStarted,
                other => other.clone(),
            },
            elapsed: elapsed.get(&c.address).copied(),
        })
        .collect();
    // Also when every job had started before the signal: a job that then
    // failed (a delete waiting out its deadline) was interrupted too.
    let interrupted =
        cancel.is_cancelled() && results.iter().any(|r| r.outcome != Outcome::Succeeded);
    Ok(ApplyReport {
        results,
        interrupted,
        elapsed: started.elapsed(),
        refreshed,
    })
}

/// Records, in one state write, the dependencies of each resource at `addresses` that the
/// apply did not change (a no-op, or a conditional update whose inputs were unchanged): a
/// dependency that only orders it ([`Resource::input_dependencies`] leaves it out) may have
/// been added or removed, which changes nothing to apply but the order of a later destroy
/// from the state. Only dependencies in the state are recorded (one whose create failed is
/// recorded by a later apply) and only on `created` entries; the inputs hash becomes that of
/// the input dependencies, which the plan (or [`inputs_unchanged`] at apply time) found equal
/// to the recorded one, also where an older kfaws hashed all dependencies. A failed write is a
/// warning: the next plan finds the order still to record ([`Change::reordered`]).
async fn record_dependencies(
    plan: &Plan,
    addresses: impl Iterator<Item = Address>,
    handles: &Handles,
    store: &SharedStore,
) {
    let wanted: Vec<(Address, Vec<Address>, Vec<Address>)> = addresses
        .filter_map(|a| {
            let h = handles.get(&a)?;
            Some((a, h.dependencies(), h.input_dependencies()))
        })
        .collect();
    // An input of theirs that this apply changed (or read: a data source) may have new
    // outputs, which their inputs hash must not absorb; the next plan compares them.
    let touched: std::collections::BTreeSet<&Address> = plan
        .changes
        .iter()
        .filter(|c| c.action != Action::NoOp)
        .map(|c| &c.address)
        .collect();
    // What to write: other dependencies, and the inputs hash over the input dependencies
    // where it is not that (an older kfaws hashed all of them) and their inputs are known to
    // be those it was applied with.
    let update = |s: &crate::state::State, a: &Address, deps: &[Address], inputs: &[Address]| {
        let r = s.resources.get(a).filter(|r| r.status == Status::Created)?;
        let now = deps_in_state(s, deps);
        let hash = inputs_hash(s, inputs);
        let known =
            inputs.iter().all(|i| !touched.contains(i)) || inputs_unchanged(s, r, inputs, deps);
        let hash = (known && r.inputs_hash.as_deref() != Some(hash.as_str())).then_some(hash);
        (r.dependencies != now || hash.is_some()).then_some((now, hash))
    };
    let updates: Vec<(Address, Vec<Address>, Option<String>)> = store.read(|s| {
        wanted
            .iter()
            .filter_map(|(a, d, i)| update(s, a, d, i).map(|(d, h)| (a.clone(), d, h)))
            .collect()
    });
    if updates.is_empty() {
        return;
    }
    let result = store
        .persist(move |s| {
            for (address, deps, hash) in updates {
                if let Some(r) = s.resources.get_mut(&address) {
                    r.dependencies = deps;
                    if hash.is_some() {
                        r.inputs_hash = hash;
                    }
                    r.updated_at = Utc::now();
                }
            }
        })
        .await;
    if let Err(e) = result {
        tracing::warn!(error = %e, "could not record the resources' dependencies in the state");
    }
}

/// Records the plan's refreshes ([`Plan::refreshes`]) in one state write:
/// each no-op resource's entry takes its desired spec, which is what the
/// service reports for every field that differed (the plan found no field
/// change). Outputs, status and tokens stay. An entry whose handle's spec no
/// longer hashes to the planned one, or that is no longer `created`, is left
/// alone. A failed write is logged and left for the next apply: the entry
/// then still holds what it held, which is what the plan compared against.
async fn record_refreshes(plan: &Plan, handles: &Handles, store: &SharedStore) -> Vec<Address> {
    let specs: Vec<(Address, serde_json::Value, String)> = plan
        .refreshes()
        .filter_map(|c| {
            let spec = handles.get(&c.address)?.spec();
            let hash = spec_hash(&spec);
            (c.spec_hash.as_deref() == Some(hash.as_str())).then(|| (c.address.clone(), spec, hash))
        })
        .collect();
    if specs.is_empty() {
        return Vec::new();
    }
    let addresses: Vec<Address> = specs.iter().map(|(a, ..)| a.clone()).collect();
    let result = store
        .persist(move |s| {
            for (address, spec, hash) in specs {
                if let Some(r) = s.resources.get_mut(&address) {
                    if r.status == Status::Created {
                        r.spec = spec;
                        r.spec_hash = hash;
                        r.updated_at = Utc::now();
                    }
                }
            }
        })
        .await;
    match result {
        Ok(()) => addresses,
        Err(e) => {
            tracing::warn!(error = %e, "could not record the refreshed values in the state");
            Vec::new()
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("{0}")]
    Resource(String),
    /// The first interrupt stopped a wait after the change was sent.
    #[error("{0}")]
    Interrupted(String),
    #[error("could not record the change in the state: {0}")]
    State(#[from] PersistError),
}

fn recorded(store: &SharedStore, address: &Address) -> Option<ResourceState> {
    store.read(|s| s.resources.get(address).cloned())
}

fn inputs(store: &SharedStore, handle: &dyn Resource) -> Inputs {
    store.read(|s| {
        Inputs(
            handle
                .dependencies()
                .into_iter()
                .filter_map(|d| s.resources.get(&d).map(|r| (d, r.outputs.clone())))
                .collect(),
        )
    })
}

/// A failed or timed-out call of a resource, in the engine's words.
struct Failed {
    message: String,
    kind: ErrorKind,
}

impl From<Failed> for Failure {
    fn from(f: Failed) -> Self {
        match f.kind {
            ErrorKind::Interrupted => Failure::Interrupted(f.message),
            ErrorKind::Failed | ErrorKind::Refused => Failure::Resource(f.message),
        }
    }
}

async fn timed<T>(
    handle: &dyn Resource,
    verb: &str,
    call: impl std::future::Future<Output = Result<T, crate::resource::ResourceError>>,
) -> Result<T, Failed> {
    let limit = handle.timeout();
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Failed {
            message: if e.kind == ErrorKind::Interrupted {
                format!("{verb}: {e}")
            } else {
                format!("{verb} failed: {e}")
            },
            kind: e.kind,
        }),
        Err(_) => Err(Failed {
            message: format!("{verb} timed out after {}s", limit.as_secs()),
            kind: ErrorKind::Failed,
        }),
    }
}

/// Runs the job's change; returns the action taken (a conditional update
/// may be skipped, [`Action::NoOp`]).
async fn run(job: &Job) -> Result<Action, Failure> {
    let address = job.change.address.clone();
    let action = job.change.action;
    match action {
        Action::Create => create(job, job.change.resume_token.clone()).await?,
        Action::Replace => {
            delete(job).await?;
            // Said, since a create that fails now leaves nothing in its place.
            super::progress::report_status("the old one is deleted; creating it again");
            create(job, None).await.map_err(|e| match e {
                Failure::Resource(m) => {
                    Failure::Resource(format!("the old one was deleted, then {m}"))
                }
                other => other,
            })?
        }
        Action::Update => return update(job).await,
        Action::Delete => {
            delete(job).await?;
            job.store
                .persist(move |s| {
                    s.resources.remove(&address);
                })
                .await?;
        }
        Action::Read => read(job).await?,
        Action::NoOp => {}
    }
    Ok(action)
}

fn entry(job: &Job, status: Status, token: Option<String>) -> ResourceState {
    let spec = job.handle.spec();
    ResourceState {
        kind: job.handle.kind().to_string(),
        status,
        physical_id: None,
        idempotency_token: token,
        spec_hash: spec_hash(&spec),
        spec,
        outputs: BTreeMap::new(),
        dependencies: job.handle.dependencies(),
        updating: None,
        inputs_hash: None,
        updated_at: Utc::now(),
    }
}

async fn create(job: &Job, resume: Option<String>) -> Result<(), Failure> {
    let address = job.change.address.clone();
    let token = resume.unwrap_or_else(|| Uuid::new_v4().to_string());
    let mut pending = entry(job, Status::Creating, Some(token.clone()));
    let previous = recorded(&job.store, &address);
    if let Some(previous) = previous.as_ref() {
        if previous.status == Status::Creating {
            pending.physical_id.clone_from(&previous.physical_id);
        }
    }
    let a = address.clone();
    job.store
        .persist(move |s| {
            s.resources.insert(a, pending);
        })
        .await?;
    let inputs = inputs(&job.store, job.handle.as_ref());
    let result = timed(
        job.handle.as_ref(),
        "create",
        job.handle.create(&token, &inputs),
    )
    .await;
    let deps = job.handle.input_dependencies();
    match result {
        Ok(applied) => {
            job.store
                .persist(move |s| {
                    let inputs = inputs_hash(s, &deps);
                    if let Some(r) = s.resources.get_mut(&address) {
                        r.status = Status::Created;
                        r.physical_id = Some(applied.physical_id);
                        r.outputs = applied.outputs;
                        r.inputs_hash = Some(inputs);
                        r.updated_at = Utc::now();
                    }
                })
                .await?;
            Ok(())
        }
        // Refused before anything was made: the entry goes back to what it
        // was (none, or the one a replace's delete just emptied, is none);
        // a tainted entry would make the next plan delete whatever holds
        // the name by then.
        // Stopped waiting by the first interrupt after the request was
        // sent: the `creating` entry keeps its token, and the next apply
        // re-attaches to what the request made.
        Err(failed) if failed.kind == ErrorKind::Interrupted => Err(failed.into()),
        Err(failed) if failed.kind == ErrorKind::Refused => {
            job.store
                .persist(move |s| match previous {
                    Some(p) if p.status != Status::Deleting => {
                        s.resources.insert(address, p);
                    }
                    _ => {
                        s.resources.remove(&address);
                    }
                })
                .await?;
            Err(failed.into())
        }
        Err(failed) => {
            set_status(job, address, Status::Tainted).await?;
            Err(failed.into())
        }
    }
}

/// Records `status` on the state entry at `address`, if any.
async fn set_status(job: &Job, address: Address, status: Status) -> Result<(), Failure> {
    job.store
        .persist(move |s| {
            if let Some(r) = s.resources.get_mut(&address) {
                r.status = status;
                r.updated_at = Utc::now();
            }
        })
        .await?;
    Ok(())
}

async fn update(job: &Job) -> Result<Action, Failure> {
    let address = job.change.address.clone();
    let Some(current) = recorded(&job.store, &address) else {
        return Err(Failure::Resource(format!(
            "{address} is not in state; cannot update it"
        )));
    };
    if job.change.conditional {
        let (inputs, deps) = (job.handle.input_dependencies(), job.handle.dependencies());
        if job
            .store
            .read(|s| inputs_unchanged(s, &current, &inputs, &deps))
        {
            tracing::debug!(%address, "dependencies' outputs unchanged; not re-applied");
            return Ok(Action::NoOp);
        }
        super::progress::report_status("a dependency's outputs changed: re-applying it");
    }
    // An earlier delete left it whole and nothing differs: no call, the
    // state records it as created again.
    if job.change.kept {
        set_status(job, address, Status::Created).await?;
        return Ok(Action::Update);
    }
    // Recorded before the calls: if they are cut short, the next plan tells
    // this update's effects from changes made outside kfaws.
    let mut marked = current.clone();
    marked.updating = Some(job.handle.spec());
    marked.updated_at = Utc::now();
    let a = address.clone();
    job.store
        .persist(move |s| {
            s.resources.insert(a, marked);
        })
        .await?;
    let inputs = inputs(&job.store, job.handle.as_ref());
    let applied = timed(
        job.handle.as_ref(),
        "update",
        job.handle.update(&current, &inputs),
    )
    .await
    .map_err(Failure::from)?;
    let mut next = entry(job, Status::Created, current.idempotency_token);
    next.physical_id = Some(applied.physical_id);
    next.outputs = applied.outputs;
    let deps = job.handle.input_dependencies();
    job.store
        .persist(move |s| {
            next.inputs_hash = Some(inputs_hash(s, &deps));
            s.resources.insert(address, next);
        })
        .await?;
    Ok(Action::Update)
}

async fn delete(job: &Job) -> Result<(), Failure> {
    let address = job.change.address.clone();
    let Some(mut current) = recorded(&job.store, &address) else {
        return Ok(());
    };
    let previous = current.clone();
    current.status = Status::Deleting;
    current.updated_at = Utc::now();
    let (a, marked) = (address.clone(), current.clone());
    job.store
        .persist(move |s| {
            s.resources.insert(a, marked);
        })
        .await?;
    tracing::debug!(%address, "recorded as deleting; preparing the delete");
    timed(
        job.handle.as_ref(),
        "preparing the delete",
        job.handle.before_delete(&current, &job.delete_options),
    )
    .await
    .map_err(Failure::from)?;
    match timed(job.handle.as_ref(), "delete", job.handle.delete(&current)).await {
        Ok(()) => Ok(()),
        // Refused before anything was deleted (DeleteCluster with node
        // groups attached): the entry goes back to what it was, so the next
        // plan does not take a live resource for a half-finished delete.
        Err(failed) if failed.kind == ErrorKind::Refused => {
            job.store
                .persist(move |s| {
                    s.resources.insert(address, previous);
                })
                .await?;
            Err(failed.into())
        }
        Err(failed) => Err(failed.into()),
    }
}

async fn read(job: &Job) -> Result<(), Failure> {
    let address = job.change.address.clone();
    let observed = timed(job.handle.as_ref(), "read", job.handle.read(None))
        .await
        .map_err(Failure::from)?;
    let Observed::Present {
        physical_id,
        outputs,
        ..
    } = observed
    else {
        return Err(Failure::Resource(format!(
            "data source {address} found nothing"
        )));
    };
    let mut next = entry(job, Status::Created, None);
    next.physical_id = physical_id;
    next.outputs = outputs;
    job.store
        .persist(move |s| {
            s.resources.insert(address, next);
        })
        .await?;
    Ok(())
}
