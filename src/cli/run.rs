//! `kfaws plan`, `kfaws apply` and `kfaws destroy`.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use kfaws::engine::interrupt::exit_status;
use kfaws::engine::progress::{report_table, Console};
use kfaws::engine::{execute, ApplyReport, ExecOptions, Outcome, SharedStore};
use kfaws::plan::{self, make_plan, render, Action, Plan, PlanRequest, Step};
use kfaws::profiles;
use kfaws::resource::DeleteOptions;
use kfaws::state::lock::StateLock;
use kfaws::state::store::StateStore;
use tokio_util::sync::CancellationToken;

use super::context::{self, Loaded};
use super::{interruptible, Global, PlanFlags};

fn warn_targets(flags: &PlanFlags) {
    if !flags.target.is_empty() {
        errln!(
            "Warning: resource targeting is in effect. The plan may be incomplete: only the \
             targets and their dependencies (apply) or dependants (destroy) are considered. \
             --target is for exceptional situations such as recovering from errors, not for \
             routine use.\n"
        );
    }
}

struct Planned {
    loaded: Loaded,
    _lock: StateLock,
    store: StateStore,
    plan: Plan,
    handles: plan::Handles,
    account: String,
    aws: aws_config::SdkConfig,
    /// For a destroy: resources of the config that the state does not hold
    /// but that exist with this state's tags (removed with `state rm`, or
    /// left by an earlier interrupted apply).
    untracked: Vec<Untracked>,
    /// For a destroy: what the deployment left outside every resource its
    /// state records (`profiles::left_behind`), as `(what, note)`.
    left_behind: Vec<(String, String)>,
}

/// A resource of the config that the state does not hold but that exists with
/// this state's tags ([`find_untracked`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Untracked {
    address: kfaws::address::Address,
    /// Its provider id (a Kubernetes bundle's: its ApplySet id).
    id: String,
    /// [`kfaws::resource::Resource::kind`].
    kind: &'static str,
}

/// What a plan is made for: apply with its `--replace` addresses, or
/// destroy with its choices.
#[derive(Debug, Clone, Copy)]
pub struct Goal<'a> {
    /// Plan a destroy.
    pub destroy: bool,
    /// The destroy's choices.
    pub delete_options: DeleteOptions,
    /// Resources to replace although nothing about them changed.
    pub replace: &'a [kfaws::address::Address],
}

async fn make(
    g: &Global,
    flags: &PlanFlags,
    goal: Goal<'_>,
    operation: &str,
    cancel: &CancellationToken,
) -> anyhow::Result<Planned> {
    let mut loaded = context::load_for(g, flags.profile, goal.destroy)?;
    // A destroy reads no [kubeflow] manifests (prepare drops them).
    let sources = match goal.destroy {
        true => profiles::Sources::default(),
        false => profiles::read_sources(&loaded.config)?,
    };
    // Bad manifests are refused before the first call; the addresses depend
    // on the config alone, so a mistyped --target or a refused --replace
    // fails before the credentials are looked up too.
    let offline = context::build_offline(&loaded.config, &sources)?;
    let lock = StateLock::acquire(&loaded.state_dir, &loaded.config.name, operation)?;
    let store = StateStore::open(&loaded.state_dir, &loaded.config.name)?;
    plan::select(
        &offline.resources,
        store.state(),
        offline.provider.as_ref(),
        &flags.target,
        goal.replace,
        goal.destroy,
    )?;
    let aws = context::aws(g, &loaded.config).await;
    let id = interruptible(
        cancel,
        context::check_identity(g, &aws, &loaded.config, store.state()),
    )
    .await??;
    if goal.destroy {
        refuse_while_jobs_run(&aws, &loaded.config, store.state(), "destroy", cancel).await?;
    }
    let preparing = profiles::prepare(&loaded.config, &aws, store.state(), goal.destroy);
    loaded.config = interruptible(cancel, preparing).await??;
    let config = &loaded.config;
    let built = profiles::build(config, &aws, store.state().lineage, &sources)?;
    let planning = make_plan(PlanRequest {
        config,
        desired: &built.resources,
        provider: built.provider.as_ref(),
        state: store.state(),
        destroy: goal.destroy,
        targets: &flags.target,
        replace: goal.replace,
        parallelism: usize::from(flags.parallelism),
        delete_options: goal.delete_options,
    });
    let (plan, handles) = interruptible(cancel, planning).await??;
    // A whole destroy names what it leaves: the lookups at once. A targeted one names the
    // bundles outside the state too: a target they depend on (the EFS file system under
    // k8s.efs-storage's volume) may go while their objects stay in the cluster.
    let whole = flags.target.is_empty();
    let (untracked, left_behind) = match goal.destroy {
        true => {
            let looking = async {
                tokio::join!(
                    async {
                        match whole {
                            true => find_untracked(&built.resources, store.state(), flags).await,
                            false => Vec::new(),
                        }
                    },
                    profiles::bundles_outside_state(config, &aws, store.state()),
                    async {
                        match whole {
                            true => profiles::left_behind(config, &aws, store.state()).await,
                            false => Ok(Vec::new()),
                        }
                    },
                )
            };
            let (mut untracked, bundles, left_behind) = interruptible(cancel, looking).await?;
            // Bundles of any config, [kubeflow] ones too: a destroy builds none for them.
            match bundles {
                Ok(bundles) => {
                    for (address, id) in bundles {
                        if !untracked.iter().any(|u| u.address == address || u.id == id) {
                            let kind = kfaws::k8s::resource::KIND;
                            untracked.push(Untracked { address, id, kind });
                        }
                    }
                    untracked.sort();
                }
                Err(e) => tracing::warn!("cannot look for bundles outside the state: {e}"),
            }
            let left_behind = left_behind.unwrap_or_else(|e| {
                tracing::warn!("cannot look for what the deployment left behind: {e}");
                Vec::new()
            });
            (untracked, left_behind)
        }
        false => (Vec::new(), Vec::new()),
    };
    // A destroy was checked above, before planning it.
    if let (false, Some(what)) = (goal.destroy, disturbs_running_jobs(&plan)) {
        refuse_while_jobs_run(&aws, config, store.state(), what, cancel).await?;
    }
    warn_targets(flags);
    Ok(Planned {
        loaded,
        _lock: lock,
        store,
        plan,
        handles,
        account: id.account,
        aws,
        untracked,
        left_behind,
    })
}

/// The resources of `desired` the state does not hold that exist with
/// this state's tags (each resource's own import lookup, as a plan for
/// apply makes it): a destroy leaves them, and says so. A failed lookup is
/// logged and skipped: this is a warning, never a reason to stop.
async fn find_untracked(
    desired: &[std::sync::Arc<dyn kfaws::resource::Resource>],
    state: &kfaws::state::State,
    flags: &PlanFlags,
) -> Vec<Untracked> {
    let outside = desired
        .iter()
        .filter(|r| !state.resources.contains_key(r.address()))
        // Gone with a dependency the destroy deletes (an access entry with its cluster).
        .filter(|r| {
            r.deleted_with()
                .is_none_or(|d| !state.resources.contains_key(d))
        })
        .map(|r| ((r.address().clone(), r.kind()), std::sync::Arc::clone(r)));
    let parallelism = usize::from(flags.parallelism);
    let mut found: Vec<_> = plan::preview::lookup_imports(outside, parallelism)
        .await
        .into_iter()
        .filter_map(|((address, kind), result)| match result {
            Ok(found) => found.map(|id| Untracked { address, id, kind }),
            Err(e) => {
                tracing::warn!("{address}: cannot look for it outside the state: {e}");
                None
            }
        })
        .collect();
    found.sort();
    found
}

/// Names what a destroy leaves: what the profile left outside every resource
/// (`profiles::left_behind`), and resources with this state's tags that the
/// state does not hold ([`find_untracked`]).
fn untracked_note(p: &Planned) -> anyhow::Result<()> {
    for (_, note) in &p.left_behind {
        outln!("\nWarning: not destroyed: {note}")?;
    }
    let (bundles, others): (Vec<&Untracked>, Vec<&Untracked>) = p
        .untracked
        .iter()
        .partition(|u| u.kind == kfaws::k8s::resource::KIND);
    let list = |of: &[&Untracked]| -> Vec<String> {
        of.iter()
            .map(|u| format!("{} ({})", u.address, u.id))
            .collect()
    };
    if !bundles.is_empty() {
        outln!(
            "\nWarning: not destroyed one by one: {} Kubernetes bundle(s) this deployment applied \
             are not in its state (removed with `kfaws state rm`): {}. Their objects go only \
             with the EKS cluster, and what controllers made in AWS for them (load balancers, \
             EFS access points) may stay. Bring one back with `kfaws apply --target ADDRESS` \
             (it is imported), then destroy.",
            bundles.len(),
            list(&bundles).join(", ")
        )?;
    }
    if others.is_empty() {
        return Ok(());
    }
    let list = list(&others);
    outln!(
        "\nWarning: not destroyed: {} resource(s) carry this deployment's tags but are not in \
         its state (removed with `kfaws state rm`, or left by an interrupted apply): {}. kfaws \
         deletes only what its state records; bring one back with `kfaws apply --target \
         ADDRESS` (it is imported, with what it depends on), then destroy, or delete it by hand.",
        list.len(),
        list.join(", ")
    )?;
    Ok(())
}

/// Fails when SageMaker training jobs this deployment started are still
/// running (they use its execution role, bucket and network), saying what to
/// do before `what`. Without `sagemaker:ListTrainingJobs` (a role that only
/// manages the infrastructure) the check is skipped with a warning.
async fn refuse_while_jobs_run(
    aws: &aws_config::SdkConfig,
    config: &kfaws::config::Config,
    state: &kfaws::state::State,
    what: &str,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    let lineage = state.lineage.to_string();
    let checking = super::train_sagemaker::running_jobs(aws, &config.name, &lineage);
    match interruptible(cancel, checking).await? {
        Ok(jobs) if !jobs.is_empty() => anyhow::bail!(
            "the plan cannot be carried out; nothing was changed: SageMaker training job(s) {} \
             of this deployment are still running on its execution role and bucket; stop them \
             (aws sagemaker stop-training-job --training-job-name NAME) or let them finish, \
             then {what}",
            jobs.join(", ")
        ),
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::warn!("cannot check for running SageMaker training jobs: {e:#}");
            Ok(())
        }
    }
}

/// What in `plan` running SageMaker training jobs of the deployment
/// forbid, worded as the end of [`refuse_while_jobs_run`]'s message: a
/// destroy, or a rename of the execution role or of the artifact bucket
/// (CloudFormation replaces a renamed role or bucket and deletes the old
/// one, which running jobs assume or write their checkpoints and model
/// artifact to; resource reference: `RoleName` and `BucketName` "Update
/// requires: Replacement").
fn disturbs_running_jobs(plan: &Plan) -> Option<&'static str> {
    if plan.destroy {
        Some("destroy")
    } else if renames(plan, "SageMakerRoleName") {
        Some(
            "rename options.sagemaker_role_name (CloudFormation replaces the role and deletes the \
             old one, which the jobs run as)",
        )
    } else if renames(plan, "BucketName") {
        Some(
            "rename options.artifact_bucket (CloudFormation replaces the bucket and deletes the old \
             one, which the jobs write their checkpoints and model artifacts to)",
        )
    } else {
        None
    }
}

/// Whether the plan changes the stack parameter `key` (`SageMakerRoleName`
/// of the IAM stack, `BucketName` of the storage stack) of a stack it keeps.
fn renames(plan: &Plan, key: &str) -> bool {
    plan.changes
        .iter()
        .filter(|c| c.action.is_change() && c.action != Action::Delete)
        .flat_map(|c| &c.fields)
        .filter(|f| f.field == "parameters")
        .any(|f| {
            let name = |v: &Option<serde_json::Value>| v.as_ref().and_then(|p| p.get(key)).cloned();
            let (before, after) = (name(&f.before), name(&f.after));
            before.is_some() && after.is_some() && before != after
        })
}

/// Says which SageMaker endpoints a destroy deletes before the graph.
fn endpoints_note(p: &Planned) -> anyhow::Result<()> {
    let endpoints = &p.store.state().endpoints;
    if super::endpoint::destroy_deletes_endpoints(&p.plan) && !endpoints.is_empty() {
        outln!(
            "\nFirst, {} SageMaker endpoint(s) deployed with `kfaws endpoint deploy` will be deleted \
             (with their endpoint configs and models): {}",
            endpoints.len(),
            endpoints.keys().cloned().collect::<Vec<_>>().join(", ")
        )?;
    }
    Ok(())
}

/// `kfaws plan`.
pub async fn plan(
    g: &Global,
    flags: &PlanFlags,
    goal: Goal<'_>,
    out: Option<&Path>,
    json: bool,
    detailed_exitcode: bool,
    cancel: &CancellationToken,
) -> anyhow::Result<u8> {
    if let Some(file) = out {
        plan::file::check_writable(file)?;
    }
    let mut p = make(g, flags, goal, "plan", cancel).await?;
    // An interrupt that came as the last read finished: the plan is not shown, as the
    // interrupt said ("stopping"), and the exit status is the interrupt's.
    if cancel.is_cancelled() {
        return Err(super::Interrupted.into());
    }
    // The account the plan was made in: shown by --json, checked by `apply FILE`.
    p.plan.account_id = Some(p.account.clone());
    if json {
        outln!("{}", serde_json::to_string_pretty(&render::json(&p.plan))?)?;
    } else {
        out!("{}", render::human(&p.plan))?;
        endpoints_note(&p)?;
        untracked_note(&p)?;
    }
    if let Some(file) = out {
        plan::file::save(&p.plan, file)?;
        if !json {
            outln!(
                "\nSaved the plan to: {}\nTo perform exactly these actions, run: kfaws apply {}",
                file.display(),
                shell_word(file)
            )?;
        }
    }
    Ok(if detailed_exitcode && p.plan.has_changes() {
        2
    } else {
        0
    })
}

async fn confirm(destroy: bool, cancel: &CancellationToken) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "refusing to {} without confirmation: stdin is not a terminal; pass --auto-approve",
            if destroy { "destroy" } else { "apply" }
        );
    }
    let question = if destroy {
        "Do you really want to destroy all resources of this deployment?\n  There is no undo."
    } else {
        "Do you want to perform these actions?"
    };
    outln!("\n{question}\n  Only 'yes' will be accepted to approve.\n")?;
    out!("  Enter a value: ")?;
    std::io::Write::flush(&mut std::io::stdout())?;
    let reading = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    });
    let answer = interruptible(cancel, reading).await???;
    Ok(answer.trim() == "yes")
}

/// `kfaws apply` and `kfaws destroy` (without a saved plan).
pub async fn apply(
    g: &Global,
    flags: &PlanFlags,
    goal: Goal<'_>,
    auto_approve: bool,
    cancel: &CancellationToken,
) -> anyhow::Result<u8> {
    let destroy = goal.destroy;
    let operation = if destroy { "destroy" } else { "apply" };
    if destroy {
        let (name, state_dir) = context::deployment_strict(g)?;
        let store = StateStore::open(&state_dir, &name)?;
        // Never written: its lineage is new, so nothing carries its tags. With
        // --target the plan checks the addresses first (before any call): a
        // typo is an error, not "nothing to destroy".
        if store.state().serial == 0 && flags.target.is_empty() {
            outln!(
                "No resources to destroy: the state of deployment {name:?} in {} records \
                 nothing (never applied from here).",
                state_dir.display()
            )?;
            return Ok(0);
        }
    }
    let p = make(g, flags, goal, operation, cancel).await?;
    if destroy && p.store.state().resources.is_empty() {
        // Like a non-empty destroy, it names what carries this state's tags outside it.
        outln!(
            "No resources to destroy: deployment {:?} has nothing in its state.",
            p.loaded.config.name
        )?;
        untracked_note(&p)?;
        return Ok(0);
    }
    out!("{}", render::human(&p.plan))?;
    endpoints_note(&p)?;
    untracked_note(&p)?;
    if !p.plan.has_changes() {
        // Nothing to ask about: only the state learns what the services report.
        return if p.plan.records_state() {
            run(p, usize::from(flags.parallelism), cancel).await
        } else {
            Ok(0)
        };
    }
    if !auto_approve && !confirm(destroy, cancel).await? {
        outln!("\n{} cancelled.", if destroy { "Destroy" } else { "Apply" })?;
        return Ok(1);
    }
    outln!()?;
    run(p, usize::from(flags.parallelism), cancel).await
}

/// `kfaws apply FILE`.
pub async fn apply_saved(
    g: &Global,
    file: &Path,
    parallelism: u16,
    force_destroy_buckets: bool,
    cancel: &CancellationToken,
) -> anyhow::Result<u8> {
    let saved = plan::file::load(file)?;
    // The flag may repeat the plan's choice, never add to it.
    if force_destroy_buckets && !saved.delete_options.force_destroy_buckets {
        anyhow::bail!(
            "--force-destroy-buckets differs from the saved plan, made without it; a saved plan is \
             applied exactly as made: run `kfaws plan --force-destroy-buckets -out FILE` again"
        );
    }
    let config = saved.config.clone();
    // A destroy reads no [kubeflow] manifests: their files may be gone.
    config.check(!saved.destroy)?;
    // A saved plan is applied exactly: flags that would change it are refused.
    for (flag, given, planned) in [
        ("--name", g.name.as_deref(), config.name.as_str()),
        ("--region", g.region.as_deref(), config.region.as_str()),
    ] {
        if given.is_some_and(|v| v != planned) {
            anyhow::bail!(
                "{flag} {} differs from the saved plan's {planned}; a saved plan is applied \
                 exactly as made: run `kfaws plan` again instead",
                given.unwrap_or_default()
            );
        }
    }
    let state_dir = context::read_file(g)?.1;
    let lock = StateLock::acquire(&state_dir, &config.name, "apply")?;
    let store = StateStore::open(&state_dir, &config.name)?;
    let aws = context::aws(g, &config).await;
    let built = profiles::build(
        &config,
        &aws,
        store.state().lineage,
        &profiles::read_sources(&config)?,
    )?;
    let id = interruptible(
        cancel,
        context::check_identity(g, &aws, &config, store.state()),
    )
    .await??;
    let handles = plan::handles(&built.resources, built.provider.as_ref(), store.state())?;
    plan::file::check(&saved, &id.account, store.state(), &handles)?;
    // What the plan-time checks guard against may have appeared since the
    // plan was made: a pod mounting a claim the plan deletes, an object in
    // a bucket it deletes, something else in the VPC; jobs may have started.
    let checking = plan::check::check(
        &saved.changes,
        &handles,
        store.state(),
        &saved.delete_options,
        usize::from(parallelism),
    );
    interruptible(cancel, checking).await??;
    if let Some(what) = disturbs_running_jobs(&saved) {
        refuse_while_jobs_run(&aws, &config, store.state(), what, cancel).await?;
    }
    if !saved.has_changes() && !saved.records_state() {
        outln!("The saved plan has no changes.")?;
        return Ok(0);
    }
    run(
        Planned {
            loaded: Loaded { config, state_dir },
            _lock: lock,
            store,
            plan: saved,
            handles,
            account: id.account,
            aws,
            untracked: Vec::new(),
            left_behind: Vec::new(),
        },
        usize::from(parallelism),
        cancel,
    )
    .await
}

async fn run(p: Planned, parallelism: usize, cancel: &CancellationToken) -> anyhow::Result<u8> {
    let Planned {
        loaded,
        _lock,
        mut store,
        plan,
        handles,
        account,
        aws,
        untracked,
        left_behind,
    } = p;
    let config = loaded.config;
    // Everything that can refuse the plan runs before the first state write.
    plan.execution_graph()?;
    store
        .write(|s| {
            s.account_id = Some(account);
            s.region = Some(config.region.clone());
            s.profile = Some(config.profile);
        })
        .context("recording the deployment's account and region in the state")?;
    if super::endpoint::destroy_deletes_endpoints(&plan) && !store.state().endpoints.is_empty() {
        // Endpoints use the execution role and the bucket: they go first.
        super::endpoint::delete_recorded(&aws, &mut store).await?;
    }
    let state_path = store.path().to_path_buf();
    let report = execute(
        &plan,
        &handles,
        SharedStore::new(store),
        &ExecOptions { parallelism },
        Arc::new(Console::new()),
        cancel.clone(),
    )
    .await?;
    if !report.results.is_empty() {
        outln!("\n{}", report_table(&report))?;
    }
    if !report.refreshed.is_empty() {
        let names: Vec<String> = report.refreshed.iter().map(ToString::to_string).collect();
        outln!(
            "\nRecorded in the state the values changed outside kfaws of: {}",
            names.join(", ")
        )?;
    }
    let code = finish(&plan, &report, &state_path)?;
    // Repeated after the summary, as the warnings above may have scrolled away.
    let (bundles, others): (Vec<&Untracked>, Vec<&Untracked>) = untracked
        .iter()
        .partition(|u| u.kind == kfaws::k8s::resource::KIND);
    let left: Vec<String> = others
        .iter()
        .map(|u| u.address.to_string())
        .chain(left_behind.iter().map(|(what, _)| what.clone()))
        .collect();
    if !left.is_empty() {
        outln!(
            "Left (with this deployment's tags, not in its state; see the warning above): {}",
            left.join(", ")
        )?;
    }
    // A bundle's objects go with the cluster; what its controllers made in AWS may not.
    if !bundles.is_empty() {
        let names: Vec<String> = bundles.iter().map(|u| u.address.to_string()).collect();
        outln!(
            "Not destroyed one by one (Kubernetes bundles not in the state; see the warning \
             above): {}",
            names.join(", ")
        )?;
    }
    Ok(code)
}

fn finish(plan: &Plan, report: &ApplyReport, state_path: &Path) -> anyhow::Result<u8> {
    let count = |steps: &[Step]| {
        report
            .results
            .iter()
            .filter(|r| r.outcome == Outcome::Succeeded && steps.contains(&r.step))
            .count()
    };
    let imported = match count(&[Step::Import]) {
        0 => String::new(),
        n => format!("{n} imported, "),
    };
    let added = count(&[Step::Create, Step::Replace]);
    let changed = count(&[Step::Update]);
    // What only the state saw: entries dropped or recorded again, no call made.
    let recorded: String = [
        (Step::Forget, "removed from the state (already gone)"),
        (Step::Keep, "kept (recorded as created again)"),
    ]
    .into_iter()
    .filter_map(|(step, what)| match count(&[step]) {
        0 => None,
        n => Some(format!(", {n} {what}")),
    })
    .collect();
    let destroyed = count(&[Step::Delete, Step::Replace]);
    let verb = if plan.destroy { "Destroy" } else { "Apply" };
    if report.succeeded() {
        outln!(
            "{verb} complete! Resources: {imported}{added} added, {changed} changed, {destroyed} destroyed{recorded}."
        )?;
        Ok(0)
    } else if report.interrupted {
        // A call that failed on its own while the run was stopping is told too.
        let failed = match report
            .results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Failed(_)))
            .count()
        {
            0 => String::new(),
            n => format!(", {n} failed (see the errors above)"),
        };
        outln!(
            "{verb} interrupted after {imported}{added} added, {changed} changed, {destroyed} destroyed{recorded}{failed}. \
             The state ({}) records everything that may exist; run the command again to resume.",
            state_path.display()
        )?;
        Ok(exit_status())
    } else {
        let what = if plan.destroy {
            "Failed deletes stay recorded (status deleting; one refused before anything was \
             deleted, such as a cluster still in use, keeps its status)"
        } else {
            "Failed creates are tainted (replaced by the next apply; a Kubernetes bundle is \
             applied again in place), failed updates are planned again"
        };
        outln!(
            "{verb} failed after {imported}{added} added, {changed} changed, {destroyed} destroyed{recorded}. \
             {what}; fix the cause and run the command again to resume."
        )?;
        Ok(1)
    }
}

/// `path` as one word to paste into a POSIX shell after a command: quoted where the shell
/// would split or expand it (`shlex`), and `./`-prefixed where the command would read it as
/// a flag.
fn shell_word(path: &std::path::Path) -> String {
    let text = path.display().to_string();
    let text = match text.starts_with('-') {
        true => format!("./{text}"),
        false => text,
    };
    shlex::try_quote(&text).map_or(text.clone(), std::borrow::Cow::into_owned)
}

#[cfg(test)]
mod tests {
    use kfaws::config::{ConfigFile, Overrides};
    use kfaws::plan::{Change, FieldChange, PLAN_FORMAT_VERSION};
    use serde_json::json;

    use super::*;

    /// A plan whose one change updates `address`'s stack parameters from
    /// `before` to `after`.
    fn parameters_plan(address: &str, before: serde_json::Value, after: serde_json::Value) -> Plan {
        let config = ConfigFile::parse(Path::new("k"), "name = \"ml\"\nregion = \"us-east-1\"")
            .unwrap()
            .resolve(&Overrides::default(), None)
            .unwrap();
        let change: Change = serde_json::from_value(json!({
            "address": address, "kind": "aws_cloudformation_stack", "action": "update",
            "reason": "config changed: parameters", "drift": false, "fields": [],
            "dependencies": [], "spec_hash": null, "resume_token": null,
        }))
        .unwrap();
        let mut change = change;
        change.fields.push(FieldChange {
            sensitive: false,
            field: "parameters".into(),
            before: Some(before),
            after: Some(after),
            forces_replacement: false,
            drift: false,
            recorded: None,
        });
        Plan {
            format_version: PLAN_FORMAT_VERSION,
            destroy: false,
            config,
            state_serial: 3,
            state_lineage: uuid::Uuid::nil(),
            targets: vec![],
            account_id: None,
            delete_options: Default::default(),
            changes: vec![change],
        }
    }

    #[test]
    fn renaming_the_role_or_the_bucket_disturbs_running_jobs_other_parameters_do_not() {
        let role = parameters_plan(
            "stack.iam",
            json!({"SageMakerRoleName": "a", "NodeRolePolicies": ""}),
            json!({"SageMakerRoleName": "b", "NodeRolePolicies": ""}),
        );
        assert!(disturbs_running_jobs(&role)
            .unwrap()
            .starts_with("rename options.sagemaker_role_name"));
        let bucket = parameters_plan(
            "stack.storage",
            json!({"BucketName": "kfaws-ml-us-east-1-artifacts"}),
            json!({"BucketName": "ml-other"}),
        );
        assert!(disturbs_running_jobs(&bucket)
            .unwrap()
            .starts_with("rename options.artifact_bucket"));
        let other = parameters_plan(
            "stack.iam",
            json!({"SageMakerRoleName": "a", "NodeRolePolicies": ""}),
            json!({"SageMakerRoleName": "a", "NodeRolePolicies": "arn:aws:iam::aws:policy/X"}),
        );
        assert_eq!(disturbs_running_jobs(&other), None);
        let mut destroy = other.clone();
        destroy.destroy = true;
        assert_eq!(disturbs_running_jobs(&destroy), Some("destroy"));
    }
}
