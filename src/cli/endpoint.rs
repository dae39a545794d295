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
    let sm = kfaws::aws::client::<aws_sdk_sagemaker::Client>(&aws);
    let described = kfaws::sagemaker::training::describe_training_job(&sm, job).await?;
    let status = described.status.as_str();
    let model_data_url = match (status, described.model_artifact.clone()) {
        ("Completed", Some(url)) => url,
        ("Completed", None) => {
            bail!("training job {job} is Completed but names no model artifact to deploy")
        }
        // SageMaker uploads the model directory of a stopped (or failed) job too.
        (_, Some(_)) => bail!(
            "training job {job} is {status}, not Completed: only a completed job's model is \
             deployed (its model artifact is from a run that did not finish)"
        ),
        (_, None) => bail!(
            "training job {job} is {status}, not Completed: only a completed job's model is \
             deployed, and it has no model artifact"
        ),
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
        tags: vec![
            (
                endpoint::DEPLOYMENT_TAG.into(),
                d.loaded.config.name.clone(),
            ),
            (endpoint::LINEAGE_TAG.into(), d.state.lineage.to_string()),
        ],
    };
    endpoint::validate(&spec)?;
    check_model_artifact(&aws, job, &model_data_url).await?;
    let model_bucket = model_data_url
        .strip_prefix("s3://")
        .and_then(|rest| rest.split('/').next());
    if let (Some(model_bucket), Ok(artifact)) = (
        model_bucket,
        d.output("stack.storage", "BucketName", "artifact bucket"),
    ) {
        let what = format!("the model artifact {model_data_url} of training job {job}");
        let policy = super::train_sagemaker::role_policy(&d);
        if let Some(warning) =
            super::train_sagemaker::scoped_role_warning(policy, &artifact, &what, model_bucket)
        {
            eprintln!("Warning: {warning}");
        }
    }
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
    // Someone else's model, configuration or endpoint of that name, or one
    // that differs, is neither adopted nor recorded (a delete would remove it).
    endpoint::check_existing(&sm, &spec, d.state.endpoints.contains_key(name))
        .await
        .map_err(|e| anyhow::anyhow!("{e} (--endpoint-name NAME deploys under another name)"))?;
    // Interrupted during the checks: nothing was created, nothing is recorded.
    if cancel.is_cancelled() {
        say(&format!(
            "Stopped before anything of endpoint {name} was created."
        ));
        return Ok(kfaws::engine::interrupt::exit_status());
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
    // Whether the endpoint itself exists (asked for, or there already): what an interrupt says.
    let endpoint_asked = std::cell::Cell::new(false);
    let deploying = endpoint::deploy(&sm, &spec, ENDPOINT_TIMEOUT, |e| {
        if endpoint::endpoint_exists_event(e, name) {
            endpoint_asked.set(true);
        }
        say(&format!("  {e}"));
    });
    let info = match super::interruptible(cancel, deploying).await {
        Ok(Ok(info)) => info,
        Ok(Err(e)) => {
            // What was created stays recorded for delete and destroy.
            d.record("endpoint deploy", |s| {
                if let Some(r) = s.endpoints.get_mut(name) {
                    r.status = "failed".into();
                }
            })?;
            return Err(anyhow::anyhow!(e).context(format!(
                "deploying endpoint {name} (recorded as failed: `kfaws endpoint delete {name}` \
                 or `kfaws destroy` removes what was created)"
            )));
        }
        Err(_) if endpoint_asked.get() => {
            say(&format!(
                "Stopped waiting; endpoint {name} is recorded in the state with its model and \
                 endpoint config, and SageMaker goes on creating the endpoint (billed once \
                 InService). `kfaws endpoint delete {name}` or `kfaws destroy` removes it: \
                 SageMaker refuses to delete an endpoint while it is Creating, so they first \
                 wait for it to be InService or Failed (up to {} minutes; past that they fail \
                 and are to be run again later).",
                endpoint::DELETE_TIMEOUT.as_secs() / 60
            ));
            return Ok(kfaws::engine::interrupt::exit_status());
        }
        Err(_) => {
            say(&format!(
                "Stopped before the endpoint was confirmed created: endpoint {name} is recorded \
                 in the state with whatever of its model, endpoint config and endpoint exists \
                 (a CreateEndpoint call under way when stopped may have created the endpoint; \
                 nothing is billed unless it did). `kfaws endpoint deploy --job {job}{}` again \
                 goes on from there; `kfaws endpoint delete {name}` or `kfaws destroy` removes \
                 what exists.",
                if name == job {
                    String::new()
                } else {
                    format!(" --endpoint-name {name}")
                }
            ));
            return Ok(kfaws::engine::interrupt::exit_status());
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

/// Refuses a model artifact that is no longer in S3 (HeadObject), before
/// anything is created or recorded: SageMaker would find out only when the
/// endpoint's instances start, minutes later, and the endpoint would fail.
async fn check_model_artifact(
    aws: &aws_config::SdkConfig,
    job: &str,
    url: &str,
) -> anyhow::Result<()> {
    let Some((bucket, key)) = url.strip_prefix("s3://").and_then(|r| r.split_once('/')) else {
        bail!("training job {job} names model artifact {url:?}, not s3://bucket/key");
    };
    let s3 = kfaws::aws::bucket::client(aws);
    match s3.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => Ok(()),
        Err(e) if e.as_service_error().is_some_and(|e| e.is_not_found()) => bail!(
            "the model artifact {url} of training job {job} is gone (HeadObject: not found; the \
             bucket was emptied or made again since the job ran): train again and deploy that job"
        ),
        Err(e) => bail!(
            "reading the model artifact {url} of training job {job}: {}",
            kfaws::aws::error_message(&e)
        ),
    }
}

/// `kfaws endpoint invoke NAME --image FILE | --json FILE`.
pub async fn invoke(
    g: &Global,
    name: &str,
    image: Option<&Path>,
    json: Option<&Path>,
) -> anyhow::Result<u8> {
    validate_name(Kind::Endpoint, name)?;
    let (path, content_type, flag) = match (image, json) {
        (Some(p), None) => (p, "application/x-image", "--image"),
        (None, Some(p)) => (p, "application/json", "--json"),
        _ => bail!("pass exactly one of --image FILE or --json FILE"),
    };
    let size = tokio::fs::metadata(path)
        .await
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    endpoint::check_body_size(&path.display().to_string(), size)?;
    let body = tokio::fs::read(path)
        .await
        .with_context(|| format!("reading {}", path.display()))?;
    endpoint::check_body(&format!("{flag} {}", path.display()), content_type, &body)?;
    let region = invoke_region(g)?;
    let aws = kfaws::aws::sdk_config(&region, g.aws_profile.as_deref()).await;
    let rt = kfaws::aws::client::<aws_sdk_sagemakerruntime::Client>(&aws);
    let answer = endpoint::invoke(&rt, name, content_type, body).await?;
    let v: serde_json::Value = serde_json::from_slice(&answer)
        .with_context(|| format!("endpoint {name} answered something other than JSON"))?;
    for line in classification_lines(&path.display().to_string(), &v) {
        say(&line);
    }
    Ok(0)
}

/// The region `endpoint invoke` calls. Invoking an endpoint needs nothing else of a
/// deployment (as `aws sagemaker-runtime invoke-endpoint`), so without a deployment name
/// (`--name`, `name` in kfaws.toml) the region is `--region`, the file's `region`, or
/// `AWS_REGION`; with one, the deployment's. A kfaws.toml that does not parse is still an error.
fn invoke_region(g: &Global) -> anyhow::Result<String> {
    let (file, _) = context::read_file(g)?;
    if g.name.is_some() || file.name.is_some() {
        return Ok(context::load(g, None)?.config.region);
    }
    let region = g
        .region
        .clone()
        .or(file.region)
        .or_else(context::env_region)
        .context(
            "region is not set: pass --region, export AWS_REGION, or run the command beside the \
             deployment's kfaws.toml",
        )?;
    if !kfaws::naming::KNOWN_REGIONS.contains(&region.as_str()) {
        bail!("region {region:?} is invalid: not an AWS region kfaws knows");
    }
    Ok(region)
}

/// The lines `endpoint invoke` prints for the container's answer `v`
/// (`{"score": [[…], …], "label", "index", "labels": […], "indices": […]}`, see
/// `kfaws-trainer serve`): `SOURCE: LABEL (class N)` and the instance's scores, once
/// per instance; with several instances (JSON), each line names its instance (`SOURCE[i]`).
fn classification_lines(source: &str, v: &serde_json::Value) -> Vec<String> {
    let scores = v.get("score").and_then(|s| s.as_array());
    let labels = v.get("labels").and_then(|l| l.as_array());
    let indices = v.get("indices").and_then(|l| l.as_array());
    let count = scores.map_or(0, Vec::len).max(1);
    let mut lines = Vec::new();
    for i in 0..count {
        let label = labels
            .and_then(|l| l.get(i))
            .or_else(|| (i == 0).then(|| v.get("label")).flatten())
            .and_then(|l| l.as_str())
            .unwrap_or("?");
        let index = indices
            .and_then(|l| l.get(i))
            .or_else(|| (i == 0).then(|| v.get("index")).flatten())
            .map(ToString::to_string)
            .unwrap_or_else(|| "?".into());
        let name = if count == 1 {
            source.to_string()
        } else {
            format!("{source}[{i}]")
        };
        lines.push(format!("{name}: {label} (class {index})"));
        if let Some(row) = scores.and_then(|s| s.get(i)).and_then(|r| r.as_array()) {
            let s: Vec<String> = row
                .iter()
                .map(|x| x.as_f64().map_or("?".into(), |f| format!("{f:.3}")))
                .collect();
            lines.push(format!("scores: [{}]", s.join(", ")));
        }
    }
    lines
}

/// Deletes endpoint `name` (with its config and model) and forgets it;
/// returns what existed and was deleted, e.g. `endpoint, endpoint
/// configuration, model`.
async fn delete_one(aws: &SdkConfig, store: &mut StateStore, name: &str) -> anyhow::Result<String> {
    let sm = kfaws::aws::client::<aws_sdk_sagemaker::Client>(aws);
    let deleted = endpoint::delete(&sm, name)
        .await
        .with_context(|| format!("deleting endpoint {name}"))?;
    store.write(|s| {
        s.endpoints.remove(name);
    })?;
    Ok(if deleted.is_empty() {
        "nothing: none of them existed any more".to_string()
    } else {
        deleted
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    })
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
    let deleted = delete_one(&aws, &mut store, name).await?;
    say(&format!("Deleted endpoint {name}: {deleted}."));
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

/// What a deployed endpoint uses: the SageMaker execution role (`stack.iam`) and the bucket
/// holding its model artifact (`stack.storage`).
pub const USES: [&str; 2] = ["stack.iam", "stack.storage"];

/// Whether destroy plan `plan` deletes the endpoints recorded in the state first: a whole
/// destroy does; a targeted one (`--target`) only when it deletes something they use
/// ([`USES`]), as it deletes the dependants of its targets and nothing else.
pub fn destroy_deletes_endpoints(plan: &kfaws::plan::Plan) -> bool {
    plan.destroy
        && (plan.targets.is_empty()
            || plan.changes.iter().any(|c| {
                c.action == kfaws::plan::Action::Delete && USES.contains(&c.address.as_str())
            }))
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
        let deleted = delete_one(aws, store, name).await?;
        say(&format!("sagemaker endpoint {name}: deleted {deleted}"));
    }
    Ok(names.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_instance_prints_its_class_and_scores() {
        let v = serde_json::json!({"score": [[0.1, 0.9]], "label": "Sandal", "index": 5,
            "labels": ["Sandal"], "indices": [5]});
        assert_eq!(
            classification_lines("shoe.png", &v),
            ["shoe.png: Sandal (class 5)", "scores: [0.100, 0.900]"]
        );
    }

    #[test]
    fn every_instance_is_printed() {
        let v = serde_json::json!({"score": [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]],
            "label": "Sandal", "index": 5, "labels": ["Sandal", "Shirt", "Shirt"],
            "indices": [5, 6, 6]});
        assert_eq!(
            classification_lines("j.json", &v),
            [
                "j.json[0]: Sandal (class 5)",
                "scores: [1.000, 0.000]",
                "j.json[1]: Shirt (class 6)",
                "scores: [0.000, 1.000]",
                "j.json[2]: Shirt (class 6)",
                "scores: [0.500, 0.500]",
            ]
        );
    }
}
