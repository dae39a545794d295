//! SageMaker real-time endpoints: deploy a trained model, invoke it, delete
//! it.
//!
//! An endpoint `NAME` is three resources of that one name: the model
//! (CreateModel: the image and the `model.tar.gz`), the endpoint
//! configuration (CreateEndpointConfig: one production variant `AllTraffic`
//! with the instance type and count) and the endpoint (CreateEndpoint),
//! which goes `Creating` → `InService` (or `Failed` with a
//! `FailureReason`). Amazon SageMaker API Reference:
//! <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateModel.html>,
//! <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateEndpointConfig.html>,
//! <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateEndpoint.html>,
//! <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeEndpoint.html>,
//! <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DeleteEndpoint.html>,
//! <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html>.
//!
//! None of the Create calls takes a client token; a second create of a name
//! answers "Cannot create already existing ...". [`deploy`] then reads the
//! existing resource back: one with the same spec (an earlier, interrupted
//! deploy) is kept and the deploy goes on, one with another spec is an error.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use aws_sdk_sagemaker::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sagemaker::operation::describe_endpoint::DescribeEndpointOutput;
use aws_sdk_sagemaker::operation::describe_endpoint_config::DescribeEndpointConfigOutput;
use aws_sdk_sagemaker::operation::describe_model::DescribeModelOutput;
use aws_sdk_sagemaker::types::{
    ContainerDefinition, EndpointStatus, ProductionVariant, ProductionVariantInstanceType,
};
use aws_sdk_sagemaker::Client;
use aws_sdk_sagemakerruntime::operation::invoke_endpoint::InvokeEndpointError;

use super::{is_not_found, tags_of, validate_name, Kind, SageMakerError};
use crate::aws::wait::{wait_until, Backoff, Poll, Tolerance, WaitError};

/// The name of the endpoint configuration's one production variant.
pub const VARIANT: &str = "AllTraffic";

/// How long [`delete`] waits, all told, for SageMaker to let it delete the
/// endpoint (see [`refuses_delete`]) and for the endpoint to be gone.
pub const DELETE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// Whether SageMaker refuses DeleteEndpoint for an endpoint in `status`
/// (`ValidationException`): while it is `Creating`, or being updated
/// (`Updating`, `SystemUpdating`, `RollingBack`). An endpoint stuck
/// `Creating` stays so until SageMaker fails it. Amazon SageMaker API
/// Reference, DescribeEndpoint `EndpointStatus` and DeleteEndpoint:
/// <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeEndpoint.html>,
/// <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DeleteEndpoint.html>.
pub fn refuses_delete(status: &EndpointStatus) -> bool {
    matches!(
        status,
        EndpointStatus::Creating
            | EndpointStatus::Updating
            | EndpointStatus::SystemUpdating
            | EndpointStatus::RollingBack
    )
}

/// What to deploy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSpec {
    /// The endpoint name, also the model's and the configuration's
    /// ([`super::NAME_PATTERN`]).
    pub name: String,
    /// The inference image (the trainer image: SageMaker runs it with
    /// `serve`).
    pub image: String,
    /// The `model.tar.gz` S3 URI (a training job's `S3ModelArtifacts`).
    pub model_data_url: String,
    /// The IAM role SageMaker assumes to pull the image and the model.
    pub role_arn: String,
    /// The instance type, e.g. `ml.m5.large`.
    pub instance_type: String,
    /// Instances behind the endpoint, at least 1.
    pub instance_count: i32,
    /// Tags of all three resources, `(key, value)`.
    pub tags: Vec<(String, String)>,
}

/// A deployed endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointInfo {
    /// The endpoint name.
    pub name: String,
    /// The endpoint ARN.
    pub arn: String,
    /// The model's name.
    pub model_name: String,
    /// The endpoint configuration's name.
    pub config_name: String,
    /// `EndpointStatus` (`InService` once [`deploy`] returns).
    pub status: String,
}

fn invalid(field: String, reason: &str) -> SageMakerError {
    SageMakerError::Invalid {
        field,
        reason: reason.to_string(),
    }
}

/// Checks everything in `spec` that the three Create calls would refuse.
///
/// # Errors
/// [`SageMakerError::InvalidName`] or [`SageMakerError::Invalid`] for the
/// first problem found.
pub fn validate(spec: &EndpointSpec) -> Result<(), SageMakerError> {
    validate_name(Kind::Endpoint, &spec.name)?;
    super::validate_role_arn(&spec.role_arn)?;
    super::validate_tags(&spec.tags)?;
    super::validate_image(&spec.image, "ContainerDefinition, Image")?;
    // ContainerDefinition.ModelDataUrl: `^(https|s3)://([^/]+)/?(.*)$`, at
    // most 1024 characters; kfaws sends only the s3:// form.
    let bucket = spec
        .model_data_url
        .strip_prefix("s3://")
        .and_then(|rest| rest.split('/').next());
    if !matches!(bucket, Some(b) if !b.is_empty()) || spec.model_data_url.len() > 1024 {
        return Err(invalid(
            format!("model data URL {:?}", spec.model_data_url),
            "expected s3://bucket/key of a model.tar.gz (ContainerDefinition, ModelDataUrl)",
        ));
    }
    // ProductionVariant.InstanceType is an enum of the API model.
    let known = aws_sdk_sagemaker::types::ProductionVariantInstanceType::values();
    if !known.contains(&spec.instance_type.as_str()) {
        return Err(invalid(
            format!("instance type {:?}", spec.instance_type),
            &format!(
                "not a SageMaker hosting instance type this kfaws knows (ProductionVariant \
                 InstanceType: the values of the SDK it was built with), e.g. ml.m5.large; {}",
                super::similar(&spec.instance_type, known)
            ),
        ));
    }
    if spec.instance_count < 1 {
        return Err(invalid(
            "instance_count".into(),
            "an endpoint needs at least 1 instance (ProductionVariant, InitialInstanceCount)",
        ));
    }
    Ok(())
}

/// Whether a Create call failed because the name is taken.
fn already_exists<E: ProvideErrorMetadata>(e: &SdkError<E>) -> bool {
    e.as_service_error().is_some_and(|s| {
        s.code() == Some("ResourceInUse")
            || s.message().is_some_and(|m| m.contains("already existing"))
    })
}

fn exists_with(
    kind: Kind,
    name: &str,
    arn: Option<&str>,
    differences: Vec<String>,
) -> Result<(), SageMakerError> {
    if differences.is_empty() {
        return Ok(());
    }
    Err(SageMakerError::AlreadyExists {
        kind,
        name: name.to_string(),
        arn: arn.map(str::to_string),
        status: None,
        differences,
    })
}

/// What of `spec` an existing model differs in (empty: the same).
fn model_differences(model: &DescribeModelOutput, spec: &EndpointSpec) -> Vec<String> {
    let container = model.primary_container();
    let mut differences = Vec::new();
    if container.and_then(|c| c.image()) != Some(spec.image.as_str()) {
        differences.push("image".to_string());
    }
    if container.and_then(|c| c.model_data_url()) != Some(spec.model_data_url.as_str()) {
        differences.push("model data URL".to_string());
    }
    if model.execution_role_arn() != Some(spec.role_arn.as_str()) {
        differences.push("role".to_string());
    }
    differences
}

/// What of `spec` an existing endpoint configuration differs in (empty: the same).
fn config_differences(config: &DescribeEndpointConfigOutput, spec: &EndpointSpec) -> Vec<String> {
    let variants = config.production_variants();
    let same = variants.len() == 1
        && variants[0].model_name() == Some(spec.name.as_str())
        && variants[0].instance_type().map(|t| t.as_str()) == Some(spec.instance_type.as_str())
        && variants[0].initial_instance_count() == Some(spec.instance_count);
    if same {
        vec![]
    } else {
        vec!["production variant (model, instance type or count)".to_string()]
    }
}

async fn create_model(client: &Client, spec: &EndpointSpec) -> Result<bool, SageMakerError> {
    let container = ContainerDefinition::builder()
        .image(&spec.image)
        .model_data_url(&spec.model_data_url)
        .build();
    let sent = client
        .create_model()
        .model_name(&spec.name)
        .primary_container(container)
        .execution_role_arn(&spec.role_arn)
        .set_tags((!spec.tags.is_empty()).then(|| super::tags(&spec.tags)))
        .send()
        .await;
    match sent {
        Ok(_) => Ok(true),
        Err(e) if already_exists(&e) => {
            let model = client
                .describe_model()
                .model_name(&spec.name)
                .send()
                .await
                .map_err(|e| SageMakerError::api("DescribeModel", &spec.name, &e))?;
            exists_with(
                Kind::Model,
                &spec.name,
                model.model_arn(),
                model_differences(&model, spec),
            )?;
            Ok(false)
        }
        Err(e) => Err(SageMakerError::api("CreateModel", &spec.name, &e)),
    }
}

async fn create_config(client: &Client, spec: &EndpointSpec) -> Result<bool, SageMakerError> {
    let variant = ProductionVariant::builder()
        .variant_name(VARIANT)
        .model_name(&spec.name)
        .instance_type(ProductionVariantInstanceType::from(
            spec.instance_type.as_str(),
        ))
        .initial_instance_count(spec.instance_count)
        .initial_variant_weight(1.0)
        .build();
    let sent = client
        .create_endpoint_config()
        .endpoint_config_name(&spec.name)
        .production_variants(variant)
        .set_tags((!spec.tags.is_empty()).then(|| super::tags(&spec.tags)))
        .send()
        .await;
    match sent {
        Ok(_) => Ok(true),
        Err(e) if already_exists(&e) => {
            let config = client
                .describe_endpoint_config()
                .endpoint_config_name(&spec.name)
                .send()
                .await
                .map_err(|e| SageMakerError::api("DescribeEndpointConfig", &spec.name, &e))?;
            exists_with(
                Kind::EndpointConfig,
                &spec.name,
                config.endpoint_config_arn(),
                config_differences(&config, spec),
            )?;
            Ok(false)
        }
        Err(e) => Err(SageMakerError::api("CreateEndpointConfig", &spec.name, &e)),
    }
}

/// Creates the model, the endpoint configuration and the endpoint of
/// `spec`, then waits (DescribeEndpoint, [`Backoff::with_deadline`]) until
/// the endpoint is `InService`. `on_event` hears each step and each status
/// change, e.g. `CreateModel fmnist-1`, `endpoint fmnist-1: Creating`.
/// Resources left by an earlier deploy of the same spec are kept.
///
/// # Errors
/// - the validation errors of [`validate`], before any call;
/// - [`SageMakerError::AlreadyExists`] when a resource of that name exists
///   with another spec;
/// - [`SageMakerError::Failed`] with SageMaker's `FailureReason` when the
///   endpoint ends `Failed` (the three resources are left for inspection;
///   [`delete`] removes them);
/// - [`SageMakerError::TimedOut`] with the statuses seen;
/// - [`SageMakerError::Api`] for a failed call.
pub async fn deploy(
    client: &Client,
    spec: &EndpointSpec,
    timeout: Duration,
    mut on_event: impl FnMut(&str),
) -> Result<EndpointInfo, SageMakerError> {
    validate(spec)?;
    let name = spec.name.as_str();
    let created = create_model(client, spec).await?;
    on_event(&if created {
        format!("CreateModel {name}")
    } else {
        format!("model {name} exists with the same spec")
    });
    let created = create_config(client, spec).await?;
    on_event(&if created {
        format!("CreateEndpointConfig {name}")
    } else {
        format!("endpoint configuration {name} exists with the same spec")
    });
    let sent = client
        .create_endpoint()
        .endpoint_name(name)
        .endpoint_config_name(name)
        .set_tags((!spec.tags.is_empty()).then(|| super::tags(&spec.tags)))
        .send()
        .await;
    match sent {
        Ok(_) => on_event(&endpoint_requested(name)),
        Err(e) if already_exists(&e) => {
            let existing = describe(client, name).await?;
            let differences = endpoint_differences(existing.as_ref(), name);
            if !differences.is_empty() {
                return Err(SageMakerError::AlreadyExists {
                    kind: Kind::Endpoint,
                    name: name.to_string(),
                    arn: existing
                        .as_ref()
                        .and_then(|d| d.endpoint_arn())
                        .map(str::to_string),
                    status: existing
                        .as_ref()
                        .and_then(|d| d.endpoint_status())
                        .map(|s| s.as_str().to_string()),
                    differences,
                });
            }
            on_event(&endpoint_existed(name));
        }
        Err(e) => return Err(SageMakerError::api("CreateEndpoint", name, &e)),
    }
    wait_in_service(client, name, timeout, on_event).await
}

/// [`deploy`]'s event once CreateEndpoint was accepted for endpoint `name`.
fn endpoint_requested(name: &str) -> String {
    format!("CreateEndpoint {name}")
}

/// [`deploy`]'s event when endpoint `name` existed already with the same configuration.
fn endpoint_existed(name: &str) -> String {
    format!("endpoint {name} exists with the same configuration")
}

/// Whether `event`, one of [`deploy`]'s, says endpoint `name` itself exists (CreateEndpoint
/// accepted, or the same endpoint there already): from then on SageMaker creates it whether
/// or not anyone waits.
pub fn endpoint_exists_event(event: &str, name: &str) -> bool {
    event == endpoint_requested(name) || event == endpoint_existed(name)
}

/// The tag whose value names the kfaws deployment that made a resource;
/// [`deploy`]'s callers put it in [`EndpointSpec::tags`].
pub const DEPLOYMENT_TAG: &str = "kfaws:deployment";

/// The tag whose value is the state lineage of the deployment that made a
/// resource (two states of one deployment name have different lineages).
pub const LINEAGE_TAG: &str = "kfaws:lineage";

/// Refuses a deploy of `spec` before anything is created or recorded when
/// its model, endpoint configuration or endpoint exists and either another
/// deployment made it — its [`DEPLOYMENT_TAG`] and [`LINEAGE_TAG`] are not
/// those of `spec.tags` (a missing lineage tag is accepted when `recorded`:
/// the state records this endpoint, deployed before kfaws tagged lineages) —
/// or it differs from `spec` (it would be kept, not changed, and a later
/// delete would remove it). Someone else's resources are thus never adopted
/// nor deleted. Reads only (Describe*, ListTags); with no deployment tag in
/// `spec.tags` only the spec is compared.
///
/// # Errors
/// [`SageMakerError::NotOurs`] or [`SageMakerError::AlreadyExists`] for the
/// first resource refused; [`SageMakerError::Api`] for a failed call.
pub async fn check_existing(
    client: &Client,
    spec: &EndpointSpec,
    recorded: bool,
) -> Result<(), SageMakerError> {
    let name = spec.name.as_str();
    let mut found: Vec<(Kind, String, Vec<String>)> = Vec::new();
    match client.describe_model().model_name(name).send().await {
        Ok(m) => found.extend(
            m.model_arn()
                .map(|arn| (Kind::Model, arn.to_string(), model_differences(&m, spec))),
        ),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(SageMakerError::api("DescribeModel", name, &e)),
    }
    match client
        .describe_endpoint_config()
        .endpoint_config_name(name)
        .send()
        .await
    {
        Ok(c) => found.extend(c.endpoint_config_arn().map(|arn| {
            (
                Kind::EndpointConfig,
                arn.to_string(),
                config_differences(&c, spec),
            )
        })),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(SageMakerError::api("DescribeEndpointConfig", name, &e)),
    }
    if let Some(d) = describe(client, name).await? {
        let differences = endpoint_differences(Some(&d), name);
        found.extend(
            d.endpoint_arn()
                .map(|arn| (Kind::Endpoint, arn.to_string(), differences)),
        );
    }
    let wanted = |key: &str| spec.tags.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    for (kind, arn, differences) in found {
        if let Some(deployment) = wanted(DEPLOYMENT_TAG) {
            let tags = tags_of(client, &arn).await?;
            let owner = tags.get(DEPLOYMENT_TAG).cloned();
            let lineage = tags.get(LINEAGE_TAG).cloned();
            let lineage_ok = match (wanted(LINEAGE_TAG), lineage.as_ref()) {
                (None, _) => true,
                (Some(w), Some(l)) => w == l,
                (Some(_), None) => recorded,
            };
            if owner.as_deref() != Some(deployment.as_str()) || !lineage_ok {
                return Err(SageMakerError::NotOurs {
                    kind,
                    name: name.to_string(),
                    arn,
                    owner: owner.map(|o| match lineage {
                        Some(l) => format!("{o}, lineage {l}"),
                        None => o,
                    }),
                    deployment: deployment.clone(),
                });
            }
        }
        exists_with(kind, name, Some(&arn), differences)?;
    }
    Ok(())
}

/// What an existing endpoint named `name` differs in from the one a deploy
/// makes (its endpoint configuration is the one of its name); `existing` is
/// DescribeEndpoint's answer, `None` when it could not be read.
fn endpoint_differences(existing: Option<&DescribeEndpointOutput>, name: &str) -> Vec<String> {
    let config = existing.and_then(|d| d.endpoint_config_name());
    if config == Some(name) {
        vec![]
    } else {
        vec![format!(
            "endpoint configuration ({})",
            config.unwrap_or("none")
        )]
    }
}

async fn describe(
    client: &Client,
    name: &str,
) -> Result<Option<DescribeEndpointOutput>, SageMakerError> {
    match client.describe_endpoint().endpoint_name(name).send().await {
        Ok(out) => Ok(Some(out)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(SageMakerError::api("DescribeEndpoint", name, &e)),
    }
}

/// One DescribeEndpoint of a wait. A failed call (after the SDK's retries)
/// is a pending poll for the first [`Tolerance::LIMIT`] in a row, then the
/// wait's end, with the error kept in `error`.
async fn describe_polled<T>(
    client: &Client,
    name: &str,
    tolerance: &Tolerance,
    error: &RefCell<Option<SageMakerError>>,
) -> Result<Option<DescribeEndpointOutput>, Poll<T>> {
    match describe(client, name).await {
        Ok(described) => {
            tolerance.ok();
            Ok(described)
        }
        Err(e) => {
            let poll = tolerance.failed(e.to_string());
            if matches!(poll, Poll::Failed(_)) {
                *error.borrow_mut() = Some(e);
            }
            Err(poll)
        }
    }
}

/// What the wait for an endpoint made of its status.
enum Step {
    /// `InService`.
    Ready,
    /// Still changing.
    Pending,
    /// `Failed` or being deleted: the reason.
    Failed(String),
}

/// How an endpoint in `status` (with `FailureReason` `reason`) stands for a
/// deploy: `InService` is ready; `Failed`, `Deleting` and
/// `UpdateRollbackFailed` will not become ready; the others (`Creating`,
/// `Updating`, `SystemUpdating`, `RollingBack`, `OutOfService`) may.
fn step(status: &EndpointStatus, reason: Option<&str>) -> Step {
    let reason = || reason.unwrap_or("no FailureReason given").to_string();
    match status {
        EndpointStatus::InService => Step::Ready,
        EndpointStatus::Failed | EndpointStatus::UpdateRollbackFailed => Step::Failed(reason()),
        EndpointStatus::Deleting => Step::Failed("the endpoint is being deleted".into()),
        _ => Step::Pending,
    }
}

async fn wait_in_service(
    client: &Client,
    name: &str,
    timeout: Duration,
    on_event: impl FnMut(&str),
) -> Result<EndpointInfo, SageMakerError> {
    let error: RefCell<Option<SageMakerError>> = RefCell::new(None);
    let on_event = RefCell::new(on_event);
    let last: RefCell<Option<String>> = RefCell::new(None);
    // A few failed polls in a row do not end a wait of minutes: the
    // endpoint goes on being created regardless.
    let tolerance = Tolerance::default();
    let (error_ref, on_event_ref, last_ref, tolerance) = (&error, &on_event, &last, &tolerance);
    let waited = wait_until(Backoff::with_deadline(timeout), || async move {
        let described = match describe_polled(client, name, tolerance, error_ref).await {
            Ok(Some(d)) => d,
            Ok(None) => {
                *error_ref.borrow_mut() = Some(SageMakerError::NotFound {
                    kind: Kind::Endpoint,
                    name: name.to_string(),
                });
                return Poll::Failed("the endpoint disappeared".into());
            }
            Err(poll) => return poll,
        };
        let status = described
            .endpoint_status()
            .cloned()
            .unwrap_or(EndpointStatus::from("Unknown"));
        if last_ref.borrow().as_deref() != Some(status.as_str()) {
            (on_event_ref.borrow_mut())(&format!("endpoint {name}: {}", status.as_str()));
            *last_ref.borrow_mut() = Some(status.as_str().to_string());
        }
        match step(&status, described.failure_reason()) {
            Step::Ready => Poll::Ready(EndpointInfo {
                name: name.to_string(),
                arn: described.endpoint_arn().unwrap_or_default().to_string(),
                model_name: name.to_string(),
                config_name: described.endpoint_config_name().unwrap_or(name).to_string(),
                status: status.as_str().to_string(),
            }),
            Step::Pending => Poll::Pending(status.as_str().to_string()),
            Step::Failed(reason) => Poll::Failed(reason),
        }
    })
    .await;
    match waited {
        Ok(info) => Ok(info),
        Err(_) if error.borrow().is_some() => Err(error.into_inner().expect("checked")),
        Err(WaitError::Failed { message, history }) => Err(SageMakerError::Failed {
            kind: Kind::Endpoint,
            name: name.to_string(),
            reason: message,
            history,
        }),
        Err(WaitError::TimedOut { after, history }) => Err(SageMakerError::TimedOut {
            kind: Kind::Endpoint,
            name: name.to_string(),
            after,
            history,
        }),
    }
}

/// Refuses a request body of `bytes` over [`MAX_INVOKE_BODY_BYTES`];
/// `what` names it in the error (e.g. the file it comes from).
///
/// # Errors
/// [`SageMakerError::Invalid`] naming `what`, its size and the limit.
pub fn check_body_size(what: &str, bytes: u64) -> Result<(), SageMakerError> {
    if bytes > MAX_INVOKE_BODY_BYTES {
        return Err(SageMakerError::Invalid {
            field: what.to_string(),
            reason: format!(
                "it is {bytes} bytes; InvokeEndpoint takes at most {MAX_INVOKE_BODY_BYTES} bytes \
                 (6 MiB, Amazon SageMaker Runtime API Reference, InvokeEndpoint); send a smaller \
                 image"
            ),
        });
    }
    Ok(())
}

/// Refuses a request body the serving container (`kfaws-trainer serve`)
/// would answer with 400, before InvokeEndpoint is called: for
/// `application/x-image`, a body that is neither PNG (signature
/// `89 50 4E 47 0D 0A 1A 0A`, PNG specification §5.2) nor JPEG (`FF D8 FF`,
/// the SOI marker and the next marker's prefix, ITU-T T.81 B.1); for
/// `application/json`, one that is not a JSON object with an `instances`
/// array. `what` names the body in the error (e.g. `--image FILE`).
///
/// # Errors
/// [`SageMakerError::Invalid`] naming `what` and what it must be.
pub fn check_body(what: &str, content_type: &str, body: &[u8]) -> Result<(), SageMakerError> {
    let invalid = |reason: String| SageMakerError::Invalid {
        field: what.to_string(),
        reason,
    };
    match content_type {
        "application/x-image" => {
            const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";
            const JPEG: &[u8] = b"\xff\xd8\xff";
            if !(body.starts_with(PNG) || body.starts_with(JPEG)) {
                return Err(invalid(
                    "not a PNG or JPEG file (the serving container, kfaws-trainer serve, \
                     decodes those two); pass a PNG or JPEG image, or --json for pixel values"
                        .into(),
                ));
            }
        }
        "application/json" => {
            let value: serde_json::Value =
                serde_json::from_slice(body).map_err(|e| invalid(format!("not JSON: {e}")))?;
            if !value
                .get("instances")
                .is_some_and(serde_json::Value::is_array)
            {
                return Err(invalid(
                    "has no \"instances\" array: the serving container takes \
                     {\"instances\": [[pixel, ...], ...]}, each instance the model's C×H×W \
                     pixel values in 0..=255"
                        .into(),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// The largest request body InvokeEndpoint takes, in bytes (6 MiB: `Body`,
/// "Maximum length of 6291456", Amazon SageMaker Runtime API Reference,
/// InvokeEndpoint).
pub const MAX_INVOKE_BODY_BYTES: u64 = 6_291_456;

/// Sends `body` (of media type `content_type`) to endpoint `name`
/// (InvokeEndpoint) and returns the container's answer.
///
/// # Errors
/// - [`SageMakerError::InvalidName`] before the call;
/// - [`SageMakerError::Invalid`] before the call for a body over
///   [`MAX_INVOKE_BODY_BYTES`];
/// - [`SageMakerError::Model`] when the container answered with an error
///   (`ModelError`: its HTTP status and message, and its log stream);
/// - [`SageMakerError::Api`] for any other failure (no such endpoint,
///   endpoint not ready, payload too large).
pub async fn invoke(
    rt: &aws_sdk_sagemakerruntime::Client,
    name: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Result<Vec<u8>, SageMakerError> {
    validate_name(Kind::Endpoint, name)?;
    check_body_size("the request body", body.len() as u64)?;
    match rt
        .invoke_endpoint()
        .endpoint_name(name)
        .content_type(content_type)
        .body(aws_sdk_sagemakerruntime::primitives::Blob::new(body))
        .send()
        .await
    {
        Ok(out) => Ok(out.body().map(|b| b.as_ref().to_vec()).unwrap_or_default()),
        Err(e) => match e.as_service_error() {
            Some(InvokeEndpointError::ModelError(m)) => Err(SageMakerError::Model {
                name: name.to_string(),
                status: m.original_status_code().unwrap_or_default(),
                message: m
                    .original_message()
                    .or(m.message())
                    .unwrap_or("no message")
                    .to_string(),
                log_stream_arn: m.log_stream_arn().map(str::to_string),
            }),
            _ => Err(SageMakerError::Api {
                operation: "InvokeEndpoint",
                name: name.to_string(),
                message: crate::aws::error_message(&e),
            }),
        },
    }
}

/// Deletes endpoint `name`, then its endpoint configuration and model (both
/// named `name`). The endpoint is read first (DescribeEndpoint): SageMaker
/// refuses to delete one that is `Creating` or being updated
/// ([`refuses_delete`]), so while it is, this waits (polling as
/// [`Backoff::with_deadline`]) for it to leave that state, then calls
/// DeleteEndpoint and waits until the endpoint is gone; both waits together
/// take at most [`DELETE_TIMEOUT`]. A few failed DescribeEndpoint polls in a
/// row are tolerated ([`Tolerance`]). Each resource that does not exist
/// counts as deleted, so a delete can be repeated after an interruption.
/// Returns the kinds that existed and were deleted by this call, in that
/// order.
///
/// # Errors
/// - [`SageMakerError::InvalidName`] before any call;
/// - [`SageMakerError::Busy`] when the endpoint is still `Creating` (or
///   being updated) after [`DELETE_TIMEOUT`]: nothing was deleted, and the
///   delete is to be retried later;
/// - [`SageMakerError::TimedOut`] when the endpoint is still there
///   [`DELETE_TIMEOUT`] after the wait began, in any other case (DeleteEndpoint
///   accepted, or the endpoint being deleted by someone else);
/// - [`SageMakerError::Api`] for a failed call (DescribeEndpoint: after
///   [`Tolerance::LIMIT`] failed polls in a row), including a DeleteEndpoint
///   that SageMaker refuses for an endpoint in none of the states above.
pub async fn delete(client: &Client, name: &str) -> Result<Vec<Kind>, SageMakerError> {
    delete_within(client, name, DELETE_TIMEOUT).await
}

/// [`delete`] with `deadline` for the endpoint's waits.
async fn delete_within(
    client: &Client,
    name: &str,
    deadline: Duration,
) -> Result<Vec<Kind>, SageMakerError> {
    validate_name(Kind::Endpoint, name)?;
    let mut deleted = Vec::new();
    if delete_endpoint(client, name, deadline).await? {
        deleted.push(Kind::Endpoint);
    }
    match client
        .delete_endpoint_config()
        .endpoint_config_name(name)
        .send()
        .await
    {
        Ok(_) => deleted.push(Kind::EndpointConfig),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(SageMakerError::api("DeleteEndpointConfig", name, &e)),
    }
    match client.delete_model().model_name(name).send().await {
        Ok(_) => deleted.push(Kind::Model),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(SageMakerError::api("DeleteModel", name, &e)),
    }
    Ok(deleted)
}

/// Deletes endpoint `name` once SageMaker takes DeleteEndpoint for it and
/// waits until it is gone, within `deadline`; whether this call deleted it
/// (`false`: it did not exist, or something else was deleting it).
async fn delete_endpoint(
    client: &Client,
    name: &str,
    deadline: Duration,
) -> Result<bool, SageMakerError> {
    let error: RefCell<Option<SageMakerError>> = RefCell::new(None);
    // DeleteEndpoint was taken.
    let sent = Cell::new(false);
    // DeleteEndpoint refused the endpoint in a status that allows it: an
    // update that began after the DescribeEndpoint before it, or a refusal
    // for another reason, which the next poll tells apart.
    let refused: RefCell<Option<SageMakerError>> = RefCell::new(None);
    let status: RefCell<Option<EndpointStatus>> = RefCell::new(None);
    let tolerance = Tolerance::default();
    let (error_ref, sent_ref, refused_ref, status_ref, tolerance) =
        (&error, &sent, &refused, &status, &tolerance);
    let gone = wait_until(Backoff::with_deadline(deadline), || async move {
        let described = match describe_polled(client, name, tolerance, error_ref).await {
            Ok(Some(d)) => d,
            Ok(None) => return Poll::Ready(()),
            Err(poll) => return poll,
        };
        let now = described
            .endpoint_status()
            .cloned()
            .unwrap_or(EndpointStatus::from("Unknown"));
        *status_ref.borrow_mut() = Some(now.clone());
        let label = now.as_str().to_string();
        if refuses_delete(&now) {
            refused_ref.take();
            return Poll::Pending(label);
        }
        if sent_ref.get() || now == EndpointStatus::Deleting {
            return Poll::Pending(label);
        }
        if let Some(e) = refused_ref.take() {
            let message = e.to_string();
            *error_ref.borrow_mut() = Some(e);
            return Poll::Failed(message);
        }
        match client.delete_endpoint().endpoint_name(name).send().await {
            Ok(_) => {
                sent_ref.set(true);
                Poll::Pending(label)
            }
            Err(e) if is_not_found(&e) => Poll::Ready(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.code() == Some("ValidationException")) =>
            {
                *refused_ref.borrow_mut() = Some(SageMakerError::api("DeleteEndpoint", name, &e));
                Poll::Pending(label)
            }
            Err(e) => {
                let e = SageMakerError::api("DeleteEndpoint", name, &e);
                let message = e.to_string();
                *error_ref.borrow_mut() = Some(e);
                Poll::Failed(message)
            }
        }
    })
    .await;
    match gone {
        Ok(()) => Ok(sent.get()),
        Err(_) if error.borrow().is_some() => Err(error.into_inner().expect("checked")),
        Err(WaitError::TimedOut { after, history }) => match status.into_inner() {
            Some(last) if refuses_delete(&last) && !sent.get() => Err(SageMakerError::Busy {
                kind: Kind::Endpoint,
                name: name.to_string(),
                status: last.as_str().to_string(),
                after,
                history,
            }),
            _ => Err(SageMakerError::TimedOut {
                kind: Kind::Endpoint,
                name: name.to_string(),
                after,
                history,
            }),
        },
        Err(WaitError::Failed { message, .. }) => Err(SageMakerError::Api {
            operation: "DescribeEndpoint",
            name: name.to_string(),
            message,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Only the events that say the endpoint itself exists count, for any endpoint name.
    #[test]
    fn only_the_endpoint_s_own_events_say_it_exists() {
        for name in ["ep1", "configuration"] {
            assert!(endpoint_exists_event(&endpoint_requested(name), name));
            assert!(endpoint_exists_event(&endpoint_existed(name), name));
            for other in [
                format!("CreateModel {name}"),
                format!("CreateEndpointConfig {name}"),
                format!("model {name} exists with the same spec"),
                format!("endpoint configuration {name} exists with the same spec"),
            ] {
                assert!(!endpoint_exists_event(&other, name), "{other}");
            }
        }
        assert!(!endpoint_exists_event(&endpoint_requested("a"), "b"));
    }

    /// A loopback SageMaker ([`crate::aws::loopback::json_service`]) whose answer to the
    /// `n`th call (from 1) of an operation is `answer(operation, n)`: an HTTP status and a
    /// JSON body. Its client makes one attempt per call, so an error answer is one failed
    /// poll. Returns the client and the operations called, in order.
    async fn sagemaker(
        answer: impl Fn(&str, usize) -> (u16, String) + Send + 'static,
    ) -> (Client, Arc<Mutex<Vec<String>>>) {
        let (url, calls) = crate::aws::loopback::json_service("SageMaker.", answer).await;
        let config = aws_sdk_sagemaker::Config::builder()
            .behavior_version(aws_sdk_sagemaker::config::BehaviorVersion::latest())
            .region(aws_sdk_sagemaker::config::Region::new("us-east-1"))
            .endpoint_url(url)
            .credentials_provider(aws_sdk_sagemaker::config::Credentials::for_tests())
            .retry_config(aws_sdk_sagemaker::config::retry::RetryConfig::disabled())
            .build();
        (Client::from_conf(config), calls)
    }

    /// DescribeEndpoint's answer for endpoint `fmnist-1` in `status`.
    fn endpoint_in(status: &str) -> (u16, String) {
        (
            200,
            format!(
                r#"{{"EndpointName":"fmnist-1","EndpointArn":"arn:aws:sagemaker:us-east-1:123456789012:endpoint/fmnist-1","EndpointConfigName":"fmnist-1","EndpointStatus":"{status}","CreationTime":0,"LastModifiedTime":0}}"#
            ),
        )
    }

    fn validation(message: &str) -> (u16, String) {
        (
            400,
            format!(r#"{{"__type":"ValidationException","message":"{message}"}}"#),
        )
    }

    fn gone() -> (u16, String) {
        validation("Could not find endpoint fmnist-1.")
    }

    fn server_error() -> (u16, String) {
        (
            500,
            r#"{"__type":"InternalFailure","message":"boom"}"#.into(),
        )
    }

    fn ok() -> (u16, String) {
        (200, "{}".into())
    }

    fn called(calls: &Mutex<Vec<String>>) -> Vec<String> {
        calls.lock().unwrap().clone()
    }

    /// SageMaker refuses DeleteEndpoint while the endpoint is Creating; the
    /// delete waits for it to be InService, then deletes it and the rest.
    #[tokio::test]
    async fn an_endpoint_still_creating_is_deleted_once_sagemaker_lets_it() {
        let (client, calls) = sagemaker(|operation, n| match (operation, n) {
            ("DescribeEndpoint", 1..=3) => endpoint_in("Creating"),
            ("DescribeEndpoint", 4) => endpoint_in("InService"),
            ("DescribeEndpoint", 5) => endpoint_in("Deleting"),
            ("DescribeEndpoint", _) => gone(),
            ("DeleteEndpoint", _) => ok(),
            ("DeleteEndpointConfig" | "DeleteModel", _) => ok(),
            _ => server_error(),
        })
        .await;
        let deleted = delete_within(&client, "fmnist-1", Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(deleted, [Kind::Endpoint, Kind::EndpointConfig, Kind::Model]);
        assert_eq!(
            called(&calls),
            [
                "DescribeEndpoint",
                "DescribeEndpoint",
                "DescribeEndpoint",
                "DescribeEndpoint",
                "DeleteEndpoint",
                "DescribeEndpoint",
                "DescribeEndpoint",
                "DeleteEndpointConfig",
                "DeleteModel"
            ]
        );
    }

    /// Past the deadline an endpoint still Creating is left, with all the
    /// rest, and the error says so and to retry later.
    #[tokio::test]
    async fn an_endpoint_creating_past_the_deadline_is_left_and_the_error_says_retry_later() {
        let (client, calls) = sagemaker(|operation, _| match operation {
            "DescribeEndpoint" => endpoint_in("Creating"),
            _ => validation("Cannot delete an endpoint that is Creating."),
        })
        .await;
        let e = delete_within(&client, "fmnist-1", Duration::from_millis(500))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, SageMakerError::Busy { status, .. } if status == "Creating"),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("endpoint \"fmnist-1\" is still Creating after 0s (statuses: Creating at 0s): SageMaker refuses to delete")
                && text.ends_with("nothing was deleted; retry the delete later"),
            "{text}"
        );
        assert!(
            called(&calls).iter().all(|c| c == "DescribeEndpoint"),
            "{:?}",
            called(&calls)
        );
    }

    /// A refusal from an update that began after the endpoint was read is
    /// waited out; a refusal of an endpoint that SageMaker could delete is
    /// the error.
    #[tokio::test]
    async fn a_refused_delete_is_retried_only_after_an_update() {
        let (client, calls) = sagemaker(|operation, n| match (operation, n) {
            ("DescribeEndpoint", 1) => endpoint_in("InService"),
            ("DescribeEndpoint", 2) => endpoint_in("SystemUpdating"),
            ("DescribeEndpoint", 3) => endpoint_in("InService"),
            ("DescribeEndpoint", _) => gone(),
            ("DeleteEndpoint", 1) => validation("Cannot delete an endpoint that is updating."),
            _ => ok(),
        })
        .await;
        let deleted = delete_within(&client, "fmnist-1", Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(deleted[0], Kind::Endpoint);
        let deletes = called(&calls)
            .iter()
            .filter(|c| *c == "DeleteEndpoint")
            .count();
        assert_eq!(deletes, 2);

        let (client, calls) = sagemaker(|operation, _| match operation {
            "DescribeEndpoint" => endpoint_in("InService"),
            "DeleteEndpoint" => validation("It has inference components."),
            _ => ok(),
        })
        .await;
        let e = delete_within(&client, "fmnist-1", Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("DeleteEndpoint fmnist-1: ValidationException: It has inference"),
            "{e}"
        );
        assert!(!called(&calls).contains(&"DeleteModel".to_string()));
    }

    /// A few failed DescribeEndpoint polls in a row do not end either wait;
    /// one more than [`Tolerance::LIMIT`] does.
    #[tokio::test]
    async fn a_few_failed_polls_do_not_end_the_endpoint_waits() {
        let limit = Tolerance::LIMIT as usize;
        let (client, _) = sagemaker(move |operation, n| match operation {
            "DescribeEndpoint" if n <= limit => server_error(),
            "DescribeEndpoint" if n == limit + 1 => endpoint_in("Creating"),
            "DescribeEndpoint" if n <= 2 * limit + 1 => server_error(),
            "DescribeEndpoint" => endpoint_in("InService"),
            _ => ok(),
        })
        .await;
        let mut events = Vec::new();
        let info = wait_in_service(&client, "fmnist-1", Duration::from_secs(30), |e| {
            events.push(e.to_string())
        })
        .await
        .unwrap();
        assert_eq!(info.status, "InService");
        assert_eq!(
            events,
            [
                "endpoint fmnist-1: Creating",
                "endpoint fmnist-1: InService"
            ]
        );

        let (client, _) = sagemaker(move |operation, n| match operation {
            "DescribeEndpoint" if n <= limit => server_error(),
            "DescribeEndpoint" => gone(),
            _ => ok(),
        })
        .await;
        let deleted = delete_within(&client, "fmnist-1", Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(deleted, [Kind::EndpointConfig, Kind::Model]);

        let (client, calls) = sagemaker(|operation, _| match operation {
            "DescribeEndpoint" => server_error(),
            _ => ok(),
        })
        .await;
        let e = wait_in_service(&client, "fmnist-1", Duration::from_secs(30), |_| {})
            .await
            .unwrap_err();
        assert!(
            e.to_string().starts_with("DescribeEndpoint fmnist-1: "),
            "{e}"
        );
        assert_eq!(called(&calls).len(), limit + 1);
        let e = delete_within(&client, "fmnist-1", Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(
            e.to_string().starts_with("DescribeEndpoint fmnist-1: "),
            "{e}"
        );
    }

    #[test]
    fn a_body_the_container_would_refuse_is_refused_naming_it() {
        let image = |b: &[u8]| check_body("--image f", "application/x-image", b);
        image(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
        image(b"\xff\xd8\xff\xe0\0\x10JFIF").unwrap();
        for bad in [
            &b"root:x:0:0:root:/root:/bin/bash\n"[..],
            b"",
            b"\x89PNG",
            b"\xff\xd8",
        ] {
            let e = image(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("--image f is invalid: not a PNG or JPEG file"),
                "{e}"
            );
        }
        let json = |b: &str| check_body("--json f", "application/json", b.as_bytes());
        json(r#"{"instances": [[0, 255]]}"#).unwrap();
        let e = json("{\"instances\": [").unwrap_err().to_string();
        assert!(e.starts_with("--json f is invalid: not JSON: EOF"), "{e}");
        for bad in [
            r#"[[0, 1]]"#,
            r#"{"instance": [[0]]}"#,
            r#"{"instances": 3}"#,
        ] {
            let e = json(bad).unwrap_err().to_string();
            assert!(e.contains("has no \"instances\" array"), "{bad}: {e}");
        }
    }

    fn spec() -> EndpointSpec {
        EndpointSpec {
            name: "fmnist-1".into(),
            image: "123456789012.dkr.ecr.us-east-1.amazonaws.com/kfaws-trainer@sha256:ab".into(),
            model_data_url: "s3://bucket/models/fmnist-1/output/model.tar.gz".into(),
            role_arn: "arn:aws:iam::123456789012:role/kfaws-sagemaker".into(),
            instance_type: "ml.m5.large".into(),
            instance_count: 1,
            tags: vec![],
        }
    }

    #[test]
    fn specs_are_checked_before_any_call() {
        validate(&spec()).unwrap();
        let cases = [
            (
                EndpointSpec {
                    name: "a_b".into(),
                    ..spec()
                },
                "endpoint name \"a_b\"",
            ),
            (
                EndpointSpec {
                    model_data_url: "model.tar.gz".into(),
                    ..spec()
                },
                "model data URL",
            ),
            (
                EndpointSpec {
                    instance_type: "t3.large".into(),
                    ..spec()
                },
                "instance type",
            ),
            (
                EndpointSpec {
                    instance_count: 0,
                    ..spec()
                },
                "instance_count",
            ),
            (
                EndpointSpec {
                    role_arn: "role".into(),
                    ..spec()
                },
                "role ARN",
            ),
        ];
        for (s, expected) in cases {
            let e = validate(&s).unwrap_err().to_string();
            assert!(e.contains(expected), "{expected}: {e}");
        }
    }

    #[test]
    fn statuses_that_cannot_become_in_service_fail_with_the_reason() {
        assert!(matches!(
            step(&EndpointStatus::InService, None),
            Step::Ready
        ));
        for pending in [
            EndpointStatus::Creating,
            EndpointStatus::Updating,
            EndpointStatus::SystemUpdating,
            EndpointStatus::RollingBack,
        ] {
            assert!(matches!(step(&pending, None), Step::Pending), "{pending:?}");
        }
        let Step::Failed(reason) = step(&EndpointStatus::Failed, Some("ping failed")) else {
            panic!("Failed is a failure")
        };
        assert_eq!(reason, "ping failed");
        assert!(matches!(
            step(&EndpointStatus::Deleting, None),
            Step::Failed(_)
        ));
    }
}
