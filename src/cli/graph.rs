//! `kfaws graph`: the resource graph in DOT, optionally coloured by the plan.

use std::collections::BTreeMap;

use kfaws::config::ProfileName;
use kfaws::graph::{Dag, NodeStyle};
use kfaws::plan::{make_plan, Action, PlanRequest};
use kfaws::profiles;
use kfaws::state::lock::StateLock;
use kfaws::state::store::StateStore;

use super::context;
use super::Global;

fn colour(action: Action) -> &'static str {
    match action {
        Action::Create => "palegreen",
        Action::Update => "khaki",
        Action::Replace => "orange",
        Action::Delete => "salmon",
        Action::Read => "lightblue",
        Action::NoOp => "white",
    }
}

/// `kfaws graph [--plan]`.
pub async fn graph(
    g: &Global,
    profile: Option<ProfileName>,
    with_plan: bool,
    cancel: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<u8> {
    let loaded = context::load(g, profile)?;
    let mut config = loaded.config.clone();
    // Read before any call, so bad manifests are refused first.
    let sources = profiles::read_sources(&config)?;
    let aws = context::aws(g, &config).await;
    // A plan reads the state as `kfaws plan` does: under its lock, so it
    // never sees an apply's state half way.
    let _lock = match with_plan {
        true => Some(StateLock::acquire(
            &loaded.state_dir,
            &config.name,
            "graph --plan",
        )?),
        false => None,
    };
    let store = StateStore::open(&loaded.state_dir, &config.name)?;
    if with_plan {
        super::interruptible(
            cancel,
            context::check_identity(g, &aws, &config, store.state()),
        )
        .await??;
        let preparing = profiles::prepare(&config, &aws, store.state(), false);
        config = super::interruptible(cancel, preparing).await??;
    }
    let config = &config;
    let built = profiles::build(config, &aws, store.state().lineage, &sources)?;
    let mut dag = Dag::new(
        built
            .resources
            .iter()
            .map(|r| (r.address().clone(), r.dependencies())),
    )?;
    let mut styles = BTreeMap::new();
    if with_plan {
        let planning = make_plan(PlanRequest {
            config,
            desired: &built.resources,
            provider: built.provider.as_ref(),
            state: store.state(),
            destroy: false,
            targets: &[],
            replace: &[],
            parallelism: 10,
            delete_options: Default::default(),
        });
        let (plan, _) = super::interruptible(cancel, planning).await??;
        // In execution order, with what the apply deletes (resources that
        // left the config), which the config's graph does not hold.
        dag = plan.execution_graph()?;
        styles = plan
            .changes
            .into_iter()
            .map(|c| {
                let note = match c.conditional {
                    true => "update if a dependency's outputs change".to_string(),
                    false => c.step().as_str().to_string(),
                };
                (c.address.clone(), (c.action, note))
            })
            .collect();
    }
    let dot = dag.to_dot(|a| match styles.get(a) {
        Some((action, note)) => NodeStyle {
            fill: Some(colour(*action)),
            note: Some(note.clone()),
        },
        None => NodeStyle::default(),
    });
    outln!("{dot}")?;
    Ok(0)
}
