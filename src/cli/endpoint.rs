//! `kfaws endpoint deploy|invoke|delete`: a SageMaker real-time endpoint for
//! a training job's model artifact, served by the same trainer image
//! (`kfaws-trainer serve`, the SageMaker inference container contract).
//! Endpoints are recorded in the deployment's state before they are
//! created, and `kfaws destroy` deletes them first.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _};
use aws_config::SdkConfig;
use kfaws::sagemaker::endpoint::{self, EndpointSpec};
use kfaws::sagemaker::{validate_name, Kind};
use kfaws::state::lock::StateLock;
use kfaws::state::store::StateStore;
use kfaws::state::EndpointRecord;
use tokio_util::sync::CancellationToken;

use super::context;
use super::train::Deployment;
use super::Global;

/// How long an endpoint may take to become InService or go away.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(3600);

fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// `kfaws endpoint deploy --job JOB`.
pub async fn deploy(
    g: &Global,
    job: &str,
    name: Option<&str>,
    instance_type: &str,
    instance_count: i32,
    cancel: &CancellationToken,
) -> anyhow::Result<u8> {
    let name = name.unwrap_or(job);
    validate_name(Kind::TrainingJob, job)?;
    validate_name(Kind::Endpoint, name)?;
    let d = Deployment::load(g)?;
    let role_arn = d.output("stack.iam", "SageMakerRoleArn", "SageMaker execution role")?;
    let aws = d.aws(g, cancel).await?;
    let sm = aws_sdk_sagemaker::Client::new(&aws);
    let described = kfaws::sagemaker::training::describe_training_job(&sm, job).await?;
    let status = described.status.as_str();
    let Some(model_data_url) = described
        .model_artifact
        .clone()
        .filter(|_| status == "Completed")
    else {
        bail!("training job {job} is {status}, not Completed: it has no model artifact to deploy");
    };
    let image = described
        .image
        .clone()
        .context("the training job names no training image")?;
    let spec = EndpointSpec {
        name: name.to_string(),
        image: image.clone(),
        model_data_url: model_data_url.clone(),
        role_arn,
        instance_type: instance_type.to_string(),
        instance_count,
        tags: vec![("kfaws:deployment".into(), d.loaded.config.name.clone())],
    };
    endpoint::validate(&spec)?;
    if let Some(r) = d.state.endpoints.get(name) {
        let same = r.model_data_url == model_data_url
            && r.image == image
            && r.instance_type == instance_type
            && r.instance_count == instance_count;
        if !same {
            bail!(
                "endpoint {name} is already deployed (job {}, {} × {}); kfaws does not update \
                 endpoints in place: `kfaws endpoint delete {name}` first, or deploy under another \
                 --endpoint-name",
                r.job,
                r.instance_count,
                r.instance_type
            );
        }
    }
    // Recorded before the first call: a crash leaves it known to destroy.
    let record = EndpointRecord {
        job: job.to_string(),
        image,
        model_data_url: model_data_url.clone(),
        instance_type: instance_type.to_string(),
        instance_count,
        status: "creating".into(),
        created_at: chrono::Utc::now(),
    };
    d.record("endpoint deploy", |s| {
        s.endpoints.insert(name.to_string(), record);
    })?;
    say(&format!(
        "Deploying endpoint {name}: model {model_data_url}, {instance_count} × {instance_type}"
    ));
    let deploying = endpoint::deploy(&sm, &spec, ENDPOINT_TIMEOUT, |e| say(&format!("  {e}")));
    let info = match super::interruptible(cancel, deploying).await {
        Ok(r) => r?,
        Err(_) => {
            say(&format!(
                "Stopped waiting; endpoint {name} is recorded in the state: `kfaws endpoint delete \
                 {name}` or `kfaws destroy` removes it."
            ));
            return Ok(kfaws::engine::interrupt::EXIT_INTERRUPTED as u8);
        }
    };
    d.record("endpoint deploy", |s| {
        if let Some(r) = s.endpoints.get_mut(name) {
            r.status = "in_service".into();
        }
    })?;
    say(&format!(
        "Endpoint {name} is {} ({}).",
        info.status, info.arn
    ));
    say(&format!(
        "Classify an image with: kfaws endpoint invoke {name} --image FILE.png"
    ));
    Ok(0)
}

/// `kfaws endpoint invoke NAME --image FILE | --json FILE`.
pub async fn invoke(
    g: &Global,
    name: &str,
    image: Option<&Path>,
    json: Option<&Path>,
) -> anyhow::Result<u8> {
    validate_name(Kind::Endpoint, name)?;
    let (path, content_type) = match (image, json) {
        (Some(p), None) => (p, "application/x-image"),
        (None, Some(p)) => (p, "application/json"),
        _ => bail!("pass exactly one of --image FILE or --json FILE"),
    };
    let body = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let d = Deployment::load(g)?;
    let aws = context::aws(g, &d.loaded.config).await;
    let rt = aws_sdk_sagemakerruntime::Client::new(&aws);
    let answer = endpoint::invoke(&rt, name, content_type, body).await?;
    let v: serde_json::Value = serde_json::from_slice(&answer)
        .with_context(|| format!("endpoint {name} answered something other than JSON"))?;
    let label = v.get("label").and_then(|l| l.as_str()).unwrap_or("?");
    let index = v.get("index").map(ToString::to_string).unwrap_or_default();
    say(&format!("{}: {label} (class {index})", path.display()));
    if let Some(scores) = v.pointer("/score/0").and_then(|s| s.as_array()) {
        let s: Vec<String> = scores
            .iter()
            .map(|x| x.as_f64().map_or("?".into(), |f| format!("{f:.3}")))
            .collect();
        say(&format!("scores: [{}]", s.join(", ")));
    }
    Ok(0)
}

/// Deletes endpoint `name` (with its config and model) and forgets it.
async fn delete_one(aws: &SdkConfig, store: &mut StateStore, name: &str) -> anyhow::Result<()> {
    let sm = aws_sdk_sagemaker::Client::new(aws);
    endpoint::delete(&sm, name)
        .await
        .with_context(|| format!("deleting endpoint {name}"))?;
    store.write(|s| {
        s.endpoints.remove(name);
    })?;
    Ok(())
}

/// `kfaws endpoint delete NAME`.
pub async fn delete(g: &Global, name: &str) -> anyhow::Result<u8> {
    validate_name(Kind::Endpoint, name)?;
    let d = Deployment::load(g)?;
    let _lock = StateLock::acquire(
        &d.loaded.state_dir,
        &d.loaded.config.name,
        "endpoint delete",
    )?;
    let mut store = StateStore::open(&d.loaded.state_dir, &d.loaded.config.name)?;
    if !store.state().endpoints.contains_key(name) {
        bail!(
            "endpoint {name} is not recorded in deployment {:?}: kfaws deletes only endpoints it \
             deployed (recorded: {})",
            d.loaded.config.name,
            recorded(store.state())
        );
    }
    let aws = context::aws(g, &d.loaded.config).await;
    delete_one(&aws, &mut store, name).await?;
    say(&format!(
        "Deleted endpoint {name} (and its endpoint config and model)."
    ));
    Ok(0)
}

fn recorded(state: &kfaws::state::State) -> String {
    if state.endpoints.is_empty() {
        "none".into()
    } else {
        state
            .endpoints
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Deletes every endpoint recorded in `store` (destroy, before the graph).
///
/// # Errors
/// The first endpoint that cannot be deleted; those deleted are forgotten.
pub async fn delete_recorded(aws: &SdkConfig, store: &mut StateStore) -> anyhow::Result<usize> {
    let names: Vec<String> = store.state().endpoints.keys().cloned().collect();
    for name in &names {
        say(&format!(
            "sagemaker endpoint {name}: deleting (deployed by `kfaws endpoint deploy`)"
        ));
        delete_one(aws, store, name).await?;
    }
    Ok(names.len())
}
