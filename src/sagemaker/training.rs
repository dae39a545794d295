//! SageMaker training jobs: create one from a [`TrainingJobSpec`], wait for
//! it with its status transitions, stop it.
//!
//! Calls and rules follow the Amazon SageMaker API Reference:
//! - CreateTrainingJob,
//!   <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateTrainingJob.html>;
//!   the spec is checked against its limits before the call. It takes no
//!   client token: a second create of the same name answers `ResourceInUse`,
//!   which [`create_training_job`] reports with the existing job's ARN and
//!   status, and whether it was created with the same spec;
//! - DescribeTrainingJob,
//!   <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeTrainingJob.html>:
//!   `TrainingJobStatus` (`InProgress`, `Completed`, `Failed`, `Stopping`,
//!   `Stopped`), `SecondaryStatus` and `SecondaryStatusTransitions`,
//!   `FailureReason`, `ModelArtifacts`, `FinalMetricDataList`,
//!   `BillableTimeInSeconds`;
//! - StopTrainingJob,
//!   <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StopTrainingJob.html>.
//!
//! The job's logs are read with [`follow_logs`] (re-exported from
//! [`super::logs`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use aws_sdk_sagemaker::operation::create_training_job::CreateTrainingJobError;
use aws_sdk_sagemaker::operation::describe_training_job::DescribeTrainingJobOutput;
pub use aws_sdk_sagemaker::types::MetricDefinition;
use aws_sdk_sagemaker::types::{
    AlgorithmSpecification, Channel, CheckpointConfig, CompressionType, DataSource,
    FileSystemAccessMode, FileSystemDataSource, FileSystemType, OutputDataConfig, RecordWrapper,
    ResourceConfig, S3DataDistribution, S3DataSource, S3DataType, SecondaryStatus,
    StoppingCondition, TrainingInputMode, TrainingInstanceType, TrainingJobStatus,
};
use aws_sdk_sagemaker::Client;

pub use super::logs::{follow_logs, follow_logs_from, FollowCursor, LogLine};
use super::{is_not_found, validate_name, Kind, SageMakerError};
use crate::aws::wait::{wait_until, Backoff, History, Poll, WaitError};

/// The name of the one input channel: the trainer reads its data from
/// `/opt/ml/input/data/train` (SageMaker mounts channel `NAME` at
/// `/opt/ml/input/data/NAME`).
pub const CHANNEL: &str = "train";

/// At most this many hyperparameters (CreateTrainingJob, `HyperParameters`:
/// "You can specify a maximum of 100 hyperparameters").
pub const MAX_HYPERPARAMETERS: usize = 100;

/// Longest hyperparameter key and value in characters (CreateTrainingJob,
/// `HyperParameters`: "Each key and value is limited to 256 characters").
pub const MAX_HYPERPARAMETER_LEN: usize = 256;

/// What to train: everything CreateTrainingJob needs.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingJobSpec {
    /// The job name ([`super::NAME_PATTERN`]).
    pub name: String,
    /// The training image, `ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME[:TAG|@sha256:HEX]`.
    pub image: String,
    /// The IAM role SageMaker assumes for the job.
    pub role_arn: String,
    /// The instance type, e.g. `ml.m5.xlarge`.
    pub instance_type: String,
    /// Instances (the trainer's world size), at least 1.
    pub instance_count: i32,
    /// The ML storage volume per instance, in GB.
    pub volume_size_gb: i32,
    /// Hyperparameters, passed as strings ([`validate_hyperparameters`]).
    pub hyperparameters: BTreeMap<String, String>,
    /// Where the `train` channel's data comes from.
    pub input: ChannelSource,
    /// Where the model artifact goes: `s3://bucket/prefix`; SageMaker
    /// writes `prefix/<job>/output/model.tar.gz`.
    pub output_s3_uri: String,
    /// Where checkpoints are synchronised (`s3://bucket/prefix`), if anywhere.
    pub checkpoint_s3_uri: Option<String>,
    /// The stopping condition: SageMaker stops the job after this long.
    pub max_runtime: Duration,
    /// The VPC the instances run in; required for an EFS channel.
    pub vpc: Option<VpcConfig>,
    /// `EnableNetworkIsolation`: the container makes no outbound calls.
    pub network_isolation: bool,
    /// `EnableInterContainerTrafficEncryption`: traffic between the
    /// instances of a distributed job is encrypted.
    pub inter_container_encryption: bool,
    /// Tags, `(key, value)`.
    pub tags: Vec<(String, String)>,
}

/// The source of the `train` channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelSource {
    /// Every object under an S3 prefix (`S3Prefix`), copied in full to each
    /// instance (`FullyReplicated`: the trainer shards by rank itself).
    S3 {
        /// `s3://bucket/prefix`.
        uri: String,
    },
    /// A directory of an EFS file system, mounted read-only
    /// (`FileSystemDataSource`; the job needs a [`VpcConfig`] that reaches
    /// the file system's mount targets).
    Efs {
        /// `fs-...`.
        file_system_id: String,
        /// Absolute path in the file system, e.g. `/fashion-mnist`.
        directory_path: String,
    },
}

/// The subnets and security groups of the job's instances.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VpcConfig {
    /// Subnet IDs (1 to 16).
    pub subnets: Vec<String>,
    /// Security group IDs (1 to 5).
    pub security_group_ids: Vec<String>,
}

/// Checks hyperparameters against CreateTrainingJob's limits: at most
/// [`MAX_HYPERPARAMETERS`] entries, each key and value at most
/// [`MAX_HYPERPARAMETER_LEN`] characters, and no line breaks (the key and
/// value pattern is `.*`, which matches within one line).
///
/// # Errors
/// [`SageMakerError::Invalid`] naming the first offending entry.
pub fn validate_hyperparameters(h: &BTreeMap<String, String>) -> Result<(), SageMakerError> {
    const SOURCE: &str = "Amazon SageMaker API Reference, CreateTrainingJob, HyperParameters";
    if h.len() > MAX_HYPERPARAMETERS {
        return Err(SageMakerError::Invalid {
            field: "hyperparameters".into(),
            reason: format!(
                "{} entries, SageMaker allows at most {MAX_HYPERPARAMETERS} ({SOURCE})",
                h.len()
            ),
        });
    }
    for (key, value) in h {
        let field = || format!("hyperparameter {}", kfaws_trainer_contract::quoted(key));
        let key_len = key.chars().count();
        if key_len > MAX_HYPERPARAMETER_LEN {
            return Err(SageMakerError::Invalid {
                field: field(),
                reason: format!(
                    "the key is {key_len} characters, SageMaker allows at most \
                     {MAX_HYPERPARAMETER_LEN} ({SOURCE})"
                ),
            });
        }
        let value_len = value.chars().count();
        if value_len > MAX_HYPERPARAMETER_LEN {
            return Err(SageMakerError::Invalid {
                field: field(),
                reason: format!(
                    "the value is {value_len} characters, SageMaker allows at most \
                     {MAX_HYPERPARAMETER_LEN} ({SOURCE})"
                ),
            });
        }
        if key.contains(['\n', '\r']) || value.contains(['\n', '\r']) {
            return Err(SageMakerError::Invalid {
                field: field(),
                reason: format!("line breaks do not match the pattern .* ({SOURCE})"),
            });
        }
    }
    Ok(())
}

/// The trainer's metrics and the regexes that find them in its epoch line,
/// e.g. `epoch=2 train_loss=0.4123; train_acc=0.8512; test_loss=0.3911;
/// test_acc=0.8634; images_per_sec=5120;` (`kfaws_trainer::metrics::EpochMetrics::line`).
/// Names are the trainer's field names. Each regex also names the field
/// before or after it, so that only the epoch line matches (the trainer's
/// other log lines mention `epochs=`).
pub const METRICS: [(&str, &str); 6] = [
    ("epoch", r"epoch=([0-9]+) train_loss="),
    ("train_loss", r"train_loss=([0-9.]+);"),
    ("train_acc", r"train_acc=([0-9.]+);"),
    ("test_loss", r"test_loss=([0-9.]+);"),
    ("test_acc", r"test_acc=([0-9.]+);"),
    ("images_per_sec", r"images_per_sec=([0-9.]+);"),
];

/// [`METRICS`] as SageMaker metric definitions: SageMaker applies each
/// `Regex` to the job's log lines and records the first capture group as the
/// metric `Name` (Amazon SageMaker Developer Guide, "Define metrics",
/// <https://docs.aws.amazon.com/sagemaker/latest/dg/training-metrics.html>;
/// `MetricDefinition`: name 1–255 characters, regex 1–500).
pub fn metric_definitions() -> Vec<MetricDefinition> {
    METRICS
        .iter()
        .map(|(name, regex)| {
            MetricDefinition::builder()
                .name(*name)
                .regex(*regex)
                .build()
        })
        .collect()
}

/// Whether `uri` is `s3://bucket[/prefix]` as SageMaker's `S3Uri`,
/// `S3OutputPath` and `CheckpointConfig.S3Uri` accept (pattern
/// `^(https|s3)://([^/]+)/?(.*)$`, at most 1024 characters; kfaws sends
/// only the `s3://` form).
fn validate_s3_uri(field: &str, uri: &str) -> Result<(), SageMakerError> {
    let bucket = uri.strip_prefix("s3://").map(|rest| rest.split('/').next());
    if matches!(bucket, Some(Some(b)) if !b.is_empty()) && uri.len() <= 1024 {
        return Ok(());
    }
    Err(SageMakerError::Invalid {
        field: format!("{field} {uri:?}"),
        reason: "expected s3://bucket/prefix of at most 1024 characters \
                 (Amazon SageMaker API Reference, S3DataSource, S3Uri)"
            .into(),
    })
}

fn invalid(field: &str, reason: impl Into<String>) -> SageMakerError {
    SageMakerError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Checks that `instance_type` (e.g. `ml.m5.xlarge`) is a training
/// instance type: `ResourceConfig.InstanceType` is an enum of the API model,
/// whose values the SDK this kfaws was built with lists.
///
/// # Errors
/// [`SageMakerError::Invalid`] naming the type as unknown, with the known
/// types of its family (or of similar names).
pub fn validate_instance_type(instance_type: &str) -> Result<(), SageMakerError> {
    let known = aws_sdk_sagemaker::types::TrainingInstanceType::values();
    if known.contains(&instance_type) {
        return Ok(());
    }
    Err(invalid(
        &format!("instance type {instance_type:?}"),
        format!(
            "an unknown SageMaker training instance type (ResourceConfig InstanceType: the \
             values of the SDK this kfaws was built with), e.g. ml.m5.xlarge; {}",
            super::similar(instance_type, known)
        ),
    ))
}

/// Checks everything in `spec` that CreateTrainingJob would refuse, so that
/// a refused job is refused before any call.
///
/// # Errors
/// [`SageMakerError::InvalidName`] or [`SageMakerError::Invalid`] for the
/// first problem found.
pub fn validate(spec: &TrainingJobSpec) -> Result<(), SageMakerError> {
    validate_name(Kind::TrainingJob, &spec.name)?;
    validate_hyperparameters(&spec.hyperparameters)?;
    super::validate_role_arn(&spec.role_arn)?;
    super::validate_tags(&spec.tags)?;
    super::validate_image(&spec.image, "AlgorithmSpecification, TrainingImage")?;
    validate_instance_type(&spec.instance_type)?;
    if spec.instance_count < 1 {
        return Err(invalid(
            "instance_count",
            format!("{}: a job needs at least 1 instance", spec.instance_count),
        ));
    }
    if spec.volume_size_gb < 1 {
        return Err(invalid(
            "volume_size_gb",
            format!(
                "{}: the trainer needs a storage volume of at least 1 GB",
                spec.volume_size_gb
            ),
        ));
    }
    let secs = spec.max_runtime.as_secs();
    if secs < 1 || secs > i32::MAX as u64 {
        return Err(invalid(
            "max_runtime",
            format!(
                "{secs}s: MaxRuntimeInSeconds is at least 1 (StoppingCondition, MaxRuntimeInSeconds)"
            ),
        ));
    }
    validate_s3_uri("output", &spec.output_s3_uri)?;
    if let Some(uri) = &spec.checkpoint_s3_uri {
        validate_s3_uri("checkpoint", uri)?;
    }
    match &spec.input {
        ChannelSource::S3 { uri } => validate_s3_uri("input", uri)?,
        ChannelSource::Efs {
            file_system_id,
            directory_path,
        } => {
            // FileSystemDataSource: FileSystemId pattern `.*`, at least 11
            // characters (EFS IDs are `fs-` and at least 8 hex digits);
            // DirectoryPath at most 4096 characters.
            let id_ok = file_system_id
                .strip_prefix("fs-")
                .is_some_and(|hex| hex.len() >= 8 && hex.chars().all(|c| c.is_ascii_hexdigit()));
            if !id_ok {
                return Err(invalid(
                    &format!("EFS file system {file_system_id:?}"),
                    "expected fs- and at least 8 hexadecimal digits \
                     (FileSystemDataSource, FileSystemId)",
                ));
            }
            if !directory_path.starts_with('/') || directory_path.len() > 4096 {
                return Err(invalid(
                    &format!("EFS directory {directory_path:?}"),
                    "expected an absolute path of at most 4096 characters \
                     (FileSystemDataSource, DirectoryPath)",
                ));
            }
            if spec.vpc.is_none() {
                return Err(invalid(
                    "vpc",
                    "an EFS channel needs the VPC config of subnets that reach the file \
                     system's mount targets (Amazon SageMaker Developer Guide, \"Give SageMaker \
                     training jobs access to resources in your Amazon VPC\")",
                ));
            }
        }
    }
    if let Some(vpc) = &spec.vpc {
        // VpcConfig: Subnets 1..=16 items, SecurityGroupIds 1..=5 items.
        if !(1..=16).contains(&vpc.subnets.len())
            || !(1..=5).contains(&vpc.security_group_ids.len())
        {
            return Err(invalid(
                "vpc",
                format!(
                    "{} subnets and {} security groups; SageMaker takes 1 to 16 subnets and 1 \
                     to 5 security groups (VpcConfig)",
                    vpc.subnets.len(),
                    vpc.security_group_ids.len()
                ),
            ));
        }
    }
    Ok(())
}

fn channel(input: &ChannelSource) -> Channel {
    let source = match input {
        ChannelSource::S3 { uri } => DataSource::builder()
            .s3_data_source(
                S3DataSource::builder()
                    .s3_data_type(S3DataType::S3Prefix)
                    .s3_uri(uri)
                    .s3_data_distribution_type(S3DataDistribution::FullyReplicated)
                    .build(),
            )
            .build(),
        ChannelSource::Efs {
            file_system_id,
            directory_path,
        } => DataSource::builder()
            .file_system_data_source(
                FileSystemDataSource::builder()
                    .file_system_id(file_system_id)
                    .file_system_access_mode(FileSystemAccessMode::Ro)
                    .file_system_type(FileSystemType::Efs)
                    .directory_path(directory_path)
                    .build(),
            )
            .build(),
    };
    Channel::builder()
        .channel_name(CHANNEL)
        .data_source(source)
        .input_mode(TrainingInputMode::File)
        .build()
}

fn sdk_vpc(vpc: &VpcConfig) -> aws_sdk_sagemaker::types::VpcConfig {
    aws_sdk_sagemaker::types::VpcConfig::builder()
        .set_subnets(Some(vpc.subnets.clone()))
        .set_security_group_ids(Some(vpc.security_group_ids.clone()))
        .build()
}

/// Creates the training job of `spec` after [`validate`]; returns its ARN.
///
/// # Errors
/// - the validation errors, before any call;
/// - [`SageMakerError::AlreadyExists`] when a job of that name exists
///   (training job names are unique per account and region, finished jobs
///   included), with its ARN, status and the fields that differ from
///   `spec` (none when an earlier run created it from the same spec);
/// - [`SageMakerError::Api`] for any other failure.
pub async fn create_training_job(
    client: &Client,
    spec: &TrainingJobSpec,
) -> Result<String, SageMakerError> {
    validate(spec)?;
    let hyperparameters: HashMap<String, String> =
        spec.hyperparameters.clone().into_iter().collect();
    let algorithm = AlgorithmSpecification::builder()
        .training_image(&spec.image)
        .training_input_mode(TrainingInputMode::File)
        .set_metric_definitions(Some(metric_definitions()))
        .build();
    let resources = ResourceConfig::builder()
        .instance_type(TrainingInstanceType::from(spec.instance_type.as_str()))
        .instance_count(spec.instance_count)
        .volume_size_in_gb(spec.volume_size_gb)
        .build();
    let stopping = StoppingCondition::builder()
        .max_runtime_in_seconds(spec.max_runtime.as_secs() as i32)
        .build();
    let sent = client
        .create_training_job()
        .training_job_name(&spec.name)
        .algorithm_specification(algorithm)
        .role_arn(&spec.role_arn)
        .set_hyper_parameters(Some(hyperparameters))
        .input_data_config(channel(&spec.input))
        .output_data_config(
            OutputDataConfig::builder()
                .s3_output_path(&spec.output_s3_uri)
                .build(),
        )
        .resource_config(resources)
        .stopping_condition(stopping)
        .set_vpc_config(spec.vpc.as_ref().map(sdk_vpc))
        .enable_network_isolation(spec.network_isolation)
        .enable_inter_container_traffic_encryption(spec.inter_container_encryption)
        .set_checkpoint_config(
            spec.checkpoint_s3_uri
                .as_ref()
                .map(|uri| CheckpointConfig::builder().s3_uri(uri).build()),
        )
        .set_tags((!spec.tags.is_empty()).then(|| super::tags(&spec.tags)))
        .send()
        .await;
    match sent {
        Ok(out) => Ok(out.training_job_arn().unwrap_or_default().to_string()),
        Err(e)
            if matches!(
                e.as_service_error(),
                Some(CreateTrainingJobError::ResourceInUse(_))
            ) =>
        {
            let existing = describe(client, &spec.name).await?;
            Err(already_exists(spec, &existing))
        }
        Err(e) => Err(SageMakerError::api("CreateTrainingJob", &spec.name, &e)),
    }
}

/// Refuses `spec.name` when a training job of that name exists, with the error
/// CreateTrainingJob's `ResourceInUse` gets: for a caller that must know before it writes
/// anything for the job (`kfaws train` uploads a local `--data` directory to a prefix named
/// after the job). Training job names are unique in an account and Region and cannot be reused
/// (CreateTrainingJob, SageMaker API Reference).
///
/// # Errors
/// [`SageMakerError::AlreadyExists`], or DescribeTrainingJob's error.
pub async fn check_name_free(
    client: &Client,
    spec: &TrainingJobSpec,
) -> Result<(), SageMakerError> {
    match describe(client, &spec.name).await {
        Ok(existing) => Err(already_exists(spec, &existing)),
        Err(SageMakerError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

fn already_exists(spec: &TrainingJobSpec, existing: &DescribeTrainingJobOutput) -> SageMakerError {
    SageMakerError::AlreadyExists {
        kind: Kind::TrainingJob,
        name: spec.name.clone(),
        arn: existing.training_job_arn().map(str::to_string),
        status: existing
            .training_job_status()
            .map(|s| s.as_str().to_string()),
        differences: differences(spec, existing),
    }
}

async fn describe(
    client: &Client,
    name: &str,
) -> Result<DescribeTrainingJobOutput, SageMakerError> {
    match client
        .describe_training_job()
        .training_job_name(name)
        .send()
        .await
    {
        Ok(out) => Ok(out),
        Err(e) if is_not_found(&e) => Err(SageMakerError::NotFound {
            kind: Kind::TrainingJob,
            name: name.to_string(),
        }),
        Err(e) => Err(SageMakerError::api("DescribeTrainingJob", name, &e)),
    }
}

/// The fields of `spec` that the existing job `job` was not created with.
pub fn differences(spec: &TrainingJobSpec, job: &DescribeTrainingJobOutput) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |field: &str, same: bool| {
        if !same {
            out.push(field.to_string());
        }
    };
    let algorithm = job.algorithm_specification();
    check(
        "image",
        algorithm.and_then(|a| a.training_image()) == Some(spec.image.as_str()),
    );
    check("role", job.role_arn() == Some(spec.role_arn.as_str()));
    let hyperparameters: BTreeMap<String, String> = job
        .hyper_parameters()
        .map(|h| h.clone().into_iter().collect())
        .unwrap_or_default();
    check("hyperparameters", hyperparameters == spec.hyperparameters);
    let resources = job.resource_config();
    check(
        "instance type",
        resources
            .and_then(|r| r.instance_type())
            .map(|t| t.as_str())
            == Some(spec.instance_type.as_str()),
    );
    check(
        "instance count",
        resources.and_then(|r| r.instance_count()) == Some(spec.instance_count),
    );
    check(
        "volume size",
        resources.and_then(|r| r.volume_size_in_gb()) == Some(spec.volume_size_gb),
    );
    let channels = job.input_data_config();
    let job_mode = algorithm.and_then(|a| a.training_input_mode());
    check(
        "input",
        channels.len() == 1 && same_channel(&channels[0], job_mode, &spec.input),
    );
    check(
        "output",
        job.output_data_config().and_then(|o| o.s3_output_path())
            == Some(spec.output_s3_uri.as_str()),
    );
    check(
        "checkpoint",
        job.checkpoint_config().and_then(|c| c.s3_uri()) == spec.checkpoint_s3_uri.as_deref(),
    );
    check(
        "max runtime",
        job.stopping_condition()
            .and_then(|s| s.max_runtime_in_seconds())
            .map(i64::from)
            == Some(spec.max_runtime.as_secs() as i64),
    );
    let vpc = job.vpc_config().map(|v| VpcConfig {
        subnets: v.subnets().to_vec(),
        security_group_ids: v.security_group_ids().to_vec(),
    });
    check("vpc", vpc == spec.vpc);
    check(
        "network isolation",
        job.enable_network_isolation().unwrap_or(false) == spec.network_isolation,
    );
    check(
        "inter-container encryption",
        job.enable_inter_container_traffic_encryption()
            .unwrap_or(false)
            == spec.inter_container_encryption,
    );
    out
}

/// Whether `described`, a channel of DescribeTrainingJob's
/// `InputDataConfig`, reads what [`channel`] of `wanted` asked for, so that
/// an identical re-run is not reported as differing. Compared: the channel
/// name, the input mode (the channel's, else `job_mode`, the job's
/// `AlgorithmSpecification.TrainingInputMode`), the compression and record
/// wrapper (kfaws sets neither: absent and `None`, the API's default, are
/// equal), and the data source: for S3 the type, URI and distribution
/// (absent equals `FullyReplicated`, the default), for EFS the file system,
/// directory, type and access mode. `ContentType`, `ShuffleConfig` and what
/// else SageMaker fills in change nothing the trainer reads and are not
/// compared. Amazon SageMaker API Reference, `Channel`, `S3DataSource`,
/// `FileSystemDataSource`:
/// <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_Channel.html>,
/// <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_S3DataSource.html>,
/// <https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_FileSystemDataSource.html>.
fn same_channel(
    described: &Channel,
    job_mode: Option<&TrainingInputMode>,
    wanted: &ChannelSource,
) -> bool {
    let mode = described.input_mode().or(job_mode);
    let compression = described
        .compression_type()
        .is_none_or(|c| *c == CompressionType::None);
    let wrapper = described
        .record_wrapper_type()
        .is_none_or(|r| *r == RecordWrapper::None);
    let source = described.data_source();
    let same_source = match wanted {
        ChannelSource::S3 { uri } => source.and_then(|d| d.s3_data_source()).is_some_and(|s| {
            s.s3_data_type() == Some(&S3DataType::S3Prefix)
                && s.s3_uri() == Some(uri.as_str())
                && s.s3_data_distribution_type()
                    .is_none_or(|d| *d == S3DataDistribution::FullyReplicated)
        }),
        ChannelSource::Efs {
            file_system_id,
            directory_path,
        } => source
            .and_then(|d| d.file_system_data_source())
            .is_some_and(|f| {
                f.file_system_id() == Some(file_system_id.as_str())
                    && f.directory_path() == Some(directory_path.as_str())
                    && f.file_system_type() == Some(&FileSystemType::Efs)
                    && f.file_system_access_mode() == Some(&FileSystemAccessMode::Ro)
            }),
    };
    described.channel_name() == Some(CHANNEL)
        && mode == Some(&TrainingInputMode::File)
        && compression
        && wrapper
        && same_source
}

/// A change seen while waiting: the job's status, its secondary status and
/// SageMaker's message for it, e.g. `InProgress` / `Downloading` /
/// "Downloading input data".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingEvent {
    /// `TrainingJobStatus`.
    pub status: String,
    /// `SecondaryStatus` (`Starting`, `Downloading`, `Training`,
    /// `Uploading`, `Completed`, ...), when given.
    pub secondary_status: Option<String>,
    /// The transition's `StatusMessage`, when given.
    pub message: Option<String>,
    /// Time since the wait began.
    pub elapsed: Duration,
}

impl std::fmt::Display for TrainingEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.status)?;
        if let Some(s) = &self.secondary_status {
            write!(f, "/{s}")?;
        }
        if let Some(m) = &self.message {
            write!(f, ": {m}")?;
        }
        Ok(())
    }
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrainingStatus {
    /// `Completed`: the model artifact is in S3.
    Completed,
    /// `Failed`: see the outcome's `failure_reason`.
    Failed,
    /// `Stopped`: StopTrainingJob or the stopping condition.
    Stopped,
}

impl std::fmt::Display for TrainingStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TrainingStatus::Completed => "Completed",
            TrainingStatus::Failed => "Failed",
            TrainingStatus::Stopped => "Stopped",
        })
    }
}

/// A finished job, from its last DescribeTrainingJob.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingJobOutcome {
    /// The job name.
    pub name: String,
    /// The job ARN.
    pub arn: Option<String>,
    /// How it ended.
    pub status: TrainingStatus,
    /// The last `SecondaryStatus` (e.g. `MaxRuntimeExceeded` for a job the
    /// stopping condition stopped).
    pub secondary_status: Option<String>,
    /// `ModelArtifacts.S3ModelArtifacts`: the `model.tar.gz` S3 URI.
    pub model_artifact: Option<String>,
    /// `FailureReason`, for a failed (or stopped) job.
    pub failure_reason: Option<String>,
    /// `FinalMetricDataList`: each metric's last value by name.
    pub final_metrics: BTreeMap<String, f64>,
    /// `BillableTimeInSeconds`.
    pub billable_seconds: Option<i32>,
    /// `TrainingTimeInSeconds`.
    pub training_seconds: Option<i32>,
    /// The statuses seen while waiting.
    pub history: History,
}

impl TrainingJobOutcome {
    fn from_description(
        name: &str,
        status: TrainingStatus,
        job: &DescribeTrainingJobOutput,
        history: History,
    ) -> Self {
        Self {
            name: name.to_string(),
            arn: job.training_job_arn().map(str::to_string),
            status,
            secondary_status: job.secondary_status().map(|s| s.as_str().to_string()),
            model_artifact: model_artifact(job),
            failure_reason: job.failure_reason().map(str::to_string),
            final_metrics: final_metrics(job),
            billable_seconds: job.billable_time_in_seconds(),
            training_seconds: job.training_time_in_seconds(),
            history,
        }
    }
}

fn model_artifact(job: &DescribeTrainingJobOutput) -> Option<String> {
    job.model_artifacts()
        .and_then(|m| m.s3_model_artifacts())
        // A job without an artifact can come back as `ModelArtifacts: {}`,
        // which the SDK reads as an empty URI.
        .filter(|uri| !uri.is_empty())
        .map(str::to_string)
}

fn final_metrics(job: &DescribeTrainingJobOutput) -> BTreeMap<String, f64> {
    job.final_metric_data_list()
        .iter()
        .filter_map(|m| Some((m.metric_name()?.to_string(), f64::from(m.value()?))))
        .collect()
}

/// A training job as DescribeTrainingJob shows it now, in any status: what
/// `kfaws endpoint deploy --job NAME` needs (the image and the model
/// artifact) and what a status line shows.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingJobInfo {
    /// The job name.
    pub name: String,
    /// The job ARN.
    pub arn: Option<String>,
    /// `TrainingJobStatus`: `InProgress`, `Completed`, `Failed`,
    /// `Stopping` or `Stopped`.
    pub status: String,
    /// `SecondaryStatus`.
    pub secondary_status: Option<String>,
    /// `AlgorithmSpecification.TrainingImage`.
    pub image: Option<String>,
    /// `ModelArtifacts.S3ModelArtifacts`, once the job has one.
    pub model_artifact: Option<String>,
    /// `FailureReason`.
    pub failure_reason: Option<String>,
    /// `FinalMetricDataList`: each metric's last value by name.
    pub final_metrics: BTreeMap<String, f64>,
}

/// Training job `name` as it is now (DescribeTrainingJob).
///
/// # Errors
/// [`SageMakerError::InvalidName`] before the call,
/// [`SageMakerError::NotFound`] when there is no such job,
/// [`SageMakerError::Api`] for other failures.
pub async fn describe_training_job(
    client: &Client,
    name: &str,
) -> Result<TrainingJobInfo, SageMakerError> {
    validate_name(Kind::TrainingJob, name)?;
    let job = describe(client, name).await?;
    Ok(TrainingJobInfo {
        name: name.to_string(),
        arn: job.training_job_arn().map(str::to_string),
        status: job
            .training_job_status()
            .map_or("Unknown", |s| s.as_str())
            .to_string(),
        secondary_status: job.secondary_status().map(|s| s.as_str().to_string()),
        image: job
            .algorithm_specification()
            .and_then(|a| a.training_image())
            .map(str::to_string),
        model_artifact: model_artifact(&job),
        failure_reason: job.failure_reason().map(str::to_string),
        final_metrics: final_metrics(&job),
    })
}

/// The events in `job` not reported yet: each secondary status transition
/// after the first `seen`, and the newest one again when its message or the
/// job's status changed since `last`. Returns the events and the new `seen`.
/// Each event but the newest carries the status the job had then
/// (`InProgress`, or `Stopping` for that secondary status), so that a poll
/// that sees the job finished with several new transitions reports only the
/// newest as its end.
fn new_events(
    job: &DescribeTrainingJobOutput,
    seen: usize,
    last: Option<&TrainingEvent>,
    elapsed: Duration,
) -> (Vec<TrainingEvent>, usize) {
    let status = job
        .training_job_status()
        .map_or_else(|| "Unknown".to_string(), |s| s.as_str().to_string());
    let transitions = job.secondary_status_transitions();
    let newest = transitions.len().saturating_sub(1);
    let mut events: Vec<TrainingEvent> = transitions
        .iter()
        .enumerate()
        .skip(seen)
        .map(|(i, t)| TrainingEvent {
            // Only the newest transition is the job's present; an earlier one happened while
            // the job was still running (or stopping), whatever its status is now.
            status: if i == newest {
                status.clone()
            } else if t.status() == Some(&SecondaryStatus::Stopping) {
                "Stopping".to_string()
            } else {
                "InProgress".to_string()
            },
            secondary_status: t.status().map(|s| s.as_str().to_string()),
            message: t.status_message().map(str::to_string),
            elapsed,
        })
        .collect();
    if events.is_empty() {
        let current = TrainingEvent {
            status: status.clone(),
            secondary_status: job
                .secondary_status()
                .map(|s| s.as_str().to_string())
                .or_else(|| last.and_then(|l| l.secondary_status.clone())),
            message: transitions
                .last()
                .and_then(|t| t.status_message())
                .map(str::to_string),
            elapsed,
        };
        let changed = last.is_none_or(|l| {
            (&l.status, &l.secondary_status, &l.message)
                != (&current.status, &current.secondary_status, &current.message)
        });
        if changed {
            events.push(current);
        }
    }
    (events, transitions.len().max(seen))
}

/// Waits until training job `name` is `Completed`, `Failed` or `Stopped`,
/// calling `on_event` for each status transition seen (polling
/// DescribeTrainingJob with [`Backoff::with_deadline`]`(timeout)`).
///
/// # Errors
/// - [`SageMakerError::InvalidName`] before any call;
/// - [`SageMakerError::NotFound`] when there is no such job;
/// - [`SageMakerError::TimedOut`] with the statuses seen when `timeout`
///   passes first (the job keeps running: stop it with
///   [`stop_training_job`]);
/// - [`SageMakerError::Api`] when DescribeTrainingJob fails (after the SDK's
///   retries).
///
/// A `Failed` or `Stopped` job is `Ok`, with its status and `FailureReason`.
pub async fn wait_training_job(
    client: &Client,
    name: &str,
    timeout: Duration,
    on_event: impl FnMut(&TrainingEvent),
) -> Result<TrainingJobOutcome, SageMakerError> {
    validate_name(Kind::TrainingJob, name)?;
    struct Seen<F> {
        transitions: usize,
        last: Option<TrainingEvent>,
        history: History,
        error: Option<SageMakerError>,
        on_event: F,
    }
    let start = Instant::now();
    let seen = RefCell::new(Seen {
        transitions: 0,
        last: None,
        history: History::default(),
        error: None,
        on_event,
    });
    let seen_ref = &seen;
    // A few failed polls in a row (after the SDK's retries) do not end a
    // wait of hours; the job runs on regardless.
    let tolerance = crate::aws::wait::Tolerance::default();
    let tolerance = &tolerance;
    let waited = wait_until(Backoff::with_deadline(timeout), || async move {
        let job = match describe(client, name).await {
            Ok(job) => {
                tolerance.ok();
                job
            }
            Err(e) => {
                let message = e.to_string();
                let poll = if matches!(e, SageMakerError::NotFound { .. }) {
                    Poll::Failed(message)
                } else {
                    tolerance.failed(message)
                };
                if matches!(poll, Poll::Failed(_)) {
                    seen_ref.borrow_mut().error = Some(e);
                }
                return poll;
            }
        };
        let mut s = seen_ref.borrow_mut();
        let s = &mut *s;
        let elapsed = start.elapsed();
        let (events, transitions) = new_events(&job, s.transitions, s.last.as_ref(), elapsed);
        s.transitions = transitions;
        for event in events {
            (s.on_event)(&event);
            let label = match &event.secondary_status {
                Some(secondary) => format!("{}/{secondary}", event.status),
                None => event.status.clone(),
            };
            if s.history.0.last().map(|(_, l)| l) != Some(&label) {
                s.history.0.push((elapsed, label));
            }
            s.last = Some(event);
        }
        let status = match job.training_job_status() {
            Some(TrainingJobStatus::Completed) => TrainingStatus::Completed,
            Some(TrainingJobStatus::Failed) => TrainingStatus::Failed,
            Some(TrainingJobStatus::Stopped) => TrainingStatus::Stopped,
            other => {
                return Poll::Pending(other.map_or("Unknown", |s| s.as_str()).to_string());
            }
        };
        Poll::Ready(TrainingJobOutcome::from_description(
            name,
            status,
            &job,
            s.history.clone(),
        ))
    })
    .await;
    let seen = seen.into_inner();
    match waited {
        Ok(outcome) => Ok(outcome),
        Err(_) if seen.error.is_some() => Err(seen.error.expect("checked")),
        Err(WaitError::TimedOut { after, .. }) => Err(SageMakerError::TimedOut {
            kind: Kind::TrainingJob,
            name: name.to_string(),
            after,
            history: seen.history,
        }),
        Err(WaitError::Failed { message, .. }) => Err(SageMakerError::Api {
            operation: "DescribeTrainingJob",
            name: name.to_string(),
            message,
        }),
    }
}

/// Asks SageMaker to stop training job `name` (StopTrainingJob: the
/// container gets SIGTERM, then SIGKILL 120 s later). The job goes through
/// `Stopping` to `Stopped`; wait with [`wait_training_job`]. A job that has
/// already ended, or is already stopping, is left as it is and this returns
/// `Ok`: StopTrainingJob refuses such a job with a `ValidationException`,
/// and the job's status (read back) is what decides.
///
/// # Errors
/// [`SageMakerError::NotFound`] when there is no such job,
/// [`SageMakerError::Api`] for other failures.
pub async fn stop_training_job(client: &Client, name: &str) -> Result<(), SageMakerError> {
    validate_name(Kind::TrainingJob, name)?;
    match client
        .stop_training_job()
        .training_job_name(name)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Err(SageMakerError::NotFound {
            kind: Kind::TrainingJob,
            name: name.to_string(),
        }),
        Err(e) => {
            let job = describe(client, name).await?;
            match job.training_job_status() {
                Some(
                    TrainingJobStatus::Completed
                    | TrainingJobStatus::Failed
                    | TrainingJobStatus::Stopped
                    | TrainingJobStatus::Stopping,
                ) => Ok(()),
                _ => Err(SageMakerError::api("StopTrainingJob", name, &e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sagemaker::types::{SecondaryStatus, SecondaryStatusTransition};
    use regex_lite::Regex;

    /// A metrics line as the trainer prints it; the trainer's own test
    /// (`trainer/src/metrics.rs`, `line_has_the_documented_shape`) asserts
    /// that `EpochMetrics::line` produces exactly this text.
    const TRAINER_LINE: &str = "epoch=2 train_loss=0.4123; train_acc=0.8512; test_loss=0.3911; \
                                test_acc=0.8634; images_per_sec=5120;";

    fn capture(regex: &str, line: &str) -> Option<String> {
        Regex::new(regex)
            .unwrap()
            .captures(line)
            .map(|c| c[1].to_string())
    }

    #[test]
    fn metric_regexes_find_each_figure_of_the_trainer_line() {
        let found: Vec<(String, Option<String>)> = metric_definitions()
            .iter()
            .map(|d| {
                (
                    d.name().unwrap().to_string(),
                    capture(d.regex().unwrap(), TRAINER_LINE),
                )
            })
            .collect();
        let expected = [
            ("epoch", "2"),
            ("train_loss", "0.4123"),
            ("train_acc", "0.8512"),
            ("test_loss", "0.3911"),
            ("test_acc", "0.8634"),
            ("images_per_sec", "5120"),
        ];
        let expected: Vec<(String, Option<String>)> = expected
            .iter()
            .map(|(n, v)| (n.to_string(), Some(v.to_string())))
            .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn metric_regexes_ignore_other_log_lines() {
        for line in [
            "INFO kfaws_trainer::train: starting epochs=3 batch_size=64 lr=0.01",
            "hyperparameters: {\"epochs\": \"3\"}",
        ] {
            for (name, regex) in METRICS {
                assert_eq!(capture(regex, line), None, "{name} in {line}");
            }
        }
    }

    #[test]
    fn metric_definitions_fit_the_api_limits() {
        for d in metric_definitions() {
            let (name, regex) = (d.name().unwrap(), d.regex().unwrap());
            assert!((1..=255).contains(&name.len()) && (1..=500).contains(&regex.len()));
        }
    }

    fn hp(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn hyperparameters_at_the_limits_pass() {
        let mut h: BTreeMap<String, String> = (0..100)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        h.insert("k0".into(), "x".repeat(256));
        h.insert("k".repeat(256), "1".into());
        h.remove("k1");
        assert_eq!(h.len(), 100);
        validate_hyperparameters(&h).unwrap();
    }

    #[test]
    fn hyperparameters_over_the_limits_are_refused_with_the_entry() {
        let e = validate_hyperparameters(&hp(&[("lr", "1".repeat(300))]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "hyperparameter \"lr\" is invalid: the value is 300 characters, SageMaker allows at \
             most 256 (Amazon SageMaker API Reference, CreateTrainingJob, HyperParameters)"
        );
        let key = "k".repeat(257);
        let e = validate_hyperparameters(&hp(&[(&key, "1".into())]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("the key is 257 characters"), "{e}");
        let many: BTreeMap<String, String> =
            (0..101).map(|i| (format!("k{i}"), "v".into())).collect();
        let e = validate_hyperparameters(&many).unwrap_err().to_string();
        assert!(
            e.contains("101 entries, SageMaker allows at most 100"),
            "{e}"
        );
        let e = validate_hyperparameters(&hp(&[("note", "a\nb".into())])).unwrap_err();
        assert!(e.to_string().contains("line breaks"), "{e}");
    }

    pub(crate) fn spec() -> TrainingJobSpec {
        TrainingJobSpec {
            name: "fmnist-1".into(),
            image: "123456789012.dkr.ecr.us-east-1.amazonaws.com/kfaws-trainer@sha256:ab".into(),
            role_arn: "arn:aws:iam::123456789012:role/kfaws-sagemaker".into(),
            instance_type: "ml.m5.xlarge".into(),
            instance_count: 2,
            volume_size_gb: 10,
            hyperparameters: hp(&[("epochs", "2".into())]),
            input: ChannelSource::S3 {
                uri: "s3://bucket/data".into(),
            },
            output_s3_uri: "s3://bucket/models".into(),
            checkpoint_s3_uri: None,
            max_runtime: Duration::from_secs(3600),
            vpc: None,
            network_isolation: true,
            inter_container_encryption: true,
            tags: vec![],
        }
    }

    #[test]
    fn specs_are_checked_field_by_field() {
        validate(&spec()).unwrap();
        let cases: Vec<(TrainingJobSpec, &str)> = vec![
            (
                TrainingJobSpec {
                    name: "a_b".into(),
                    ..spec()
                },
                "training job name \"a_b\"",
            ),
            (
                TrainingJobSpec {
                    role_arn: "r".into(),
                    ..spec()
                },
                "role ARN \"r\"",
            ),
            (
                TrainingJobSpec {
                    image: "a b".into(),
                    ..spec()
                },
                "image \"a b\"",
            ),
            (
                TrainingJobSpec {
                    image: "docker.io/library/kfaws-trainer:0.1.0".into(),
                    ..spec()
                },
                "SageMaker pulls images from Amazon ECR",
            ),
            (
                TrainingJobSpec {
                    instance_type: "m5.xlarge".into(),
                    ..spec()
                },
                "instance type",
            ),
            (
                TrainingJobSpec {
                    instance_count: 0,
                    ..spec()
                },
                "instance_count",
            ),
            (
                TrainingJobSpec {
                    volume_size_gb: 0,
                    ..spec()
                },
                "volume_size_gb",
            ),
            (
                TrainingJobSpec {
                    max_runtime: Duration::ZERO,
                    ..spec()
                },
                "max_runtime",
            ),
            (
                TrainingJobSpec {
                    output_s3_uri: "bucket/x".into(),
                    ..spec()
                },
                "output \"bucket/x\"",
            ),
            (
                TrainingJobSpec {
                    checkpoint_s3_uri: Some("s3:///x".into()),
                    ..spec()
                },
                "checkpoint \"s3:///x\"",
            ),
            (
                TrainingJobSpec {
                    input: ChannelSource::Efs {
                        file_system_id: "fs-0123456789abcdef0".into(),
                        directory_path: "/data".into(),
                    },
                    ..spec()
                },
                "vpc is invalid: an EFS channel needs",
            ),
            (
                TrainingJobSpec {
                    input: ChannelSource::Efs {
                        file_system_id: "efs-1".into(),
                        directory_path: "/data".into(),
                    },
                    ..spec()
                },
                "EFS file system \"efs-1\"",
            ),
            (
                TrainingJobSpec {
                    vpc: Some(VpcConfig {
                        subnets: vec![],
                        security_group_ids: vec!["sg-1".into()],
                    }),
                    ..spec()
                },
                "0 subnets and 1 security groups",
            ),
        ];
        for (spec, expected) in cases {
            let e = validate(&spec).unwrap_err().to_string();
            assert!(e.contains(expected), "{expected}: {e}");
        }
    }

    fn described(spec: &TrainingJobSpec) -> DescribeTrainingJobOutput {
        described_with(spec, channel(&spec.input))
    }

    /// The job of `spec` as DescribeTrainingJob answers it, with `input` as
    /// its one channel.
    fn described_with(spec: &TrainingJobSpec, input: Channel) -> DescribeTrainingJobOutput {
        DescribeTrainingJobOutput::builder()
            .training_job_name(&spec.name)
            .algorithm_specification(
                AlgorithmSpecification::builder()
                    .training_image(&spec.image)
                    .training_input_mode(TrainingInputMode::File)
                    .build(),
            )
            .role_arn(&spec.role_arn)
            .set_hyper_parameters(Some(spec.hyperparameters.clone().into_iter().collect()))
            .input_data_config(input)
            .output_data_config(
                OutputDataConfig::builder()
                    .s3_output_path(&spec.output_s3_uri)
                    .build(),
            )
            .resource_config(
                ResourceConfig::builder()
                    .instance_type(TrainingInstanceType::from(spec.instance_type.as_str()))
                    .instance_count(spec.instance_count)
                    .volume_size_in_gb(spec.volume_size_gb)
                    .build(),
            )
            .stopping_condition(
                StoppingCondition::builder()
                    .max_runtime_in_seconds(spec.max_runtime.as_secs() as i32)
                    .build(),
            )
            .enable_network_isolation(spec.network_isolation)
            .enable_inter_container_traffic_encryption(spec.inter_container_encryption)
            .build()
    }

    #[test]
    fn instance_types_are_the_api_enum_and_a_miss_suggests_the_family() {
        for bad in ["ml.bogus", "ml.m5.huge", "m5.xlarge"] {
            let e = validate(&TrainingJobSpec {
                instance_type: bad.into(),
                ..spec()
            })
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(&format!("instance type {bad:?}"))
                    && e.contains("an unknown SageMaker training instance type"),
                "{e}"
            );
        }
        let e = validate(&TrainingJobSpec {
            instance_type: "ml.m5.huge".into(),
            ..spec()
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("ml.m5 comes in ") && e.contains("ml.m5.xlarge"),
            "{e}"
        );
        let e = validate(&TrainingJobSpec {
            instance_type: "ml.bogus".into(),
            ..spec()
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("the families are ") && e.contains("ml.p3"),
            "{e}"
        );
        for ok in ["ml.g5.xlarge", "ml.p3.2xlarge", "ml.c5.2xlarge"] {
            validate(&TrainingJobSpec {
                instance_type: ok.into(),
                ..spec()
            })
            .unwrap();
        }
    }

    #[test]
    fn an_existing_job_differs_in_the_fields_that_changed() {
        let s = spec();
        assert_eq!(differences(&s, &described(&s)), Vec::<String>::new());
        let changed = TrainingJobSpec {
            instance_count: 3,
            hyperparameters: hp(&[("epochs", "5".into())]),
            input: ChannelSource::S3 {
                uri: "s3://bucket/other".into(),
            },
            ..spec()
        };
        assert_eq!(
            differences(&changed, &described(&s)),
            ["hyperparameters", "instance count", "input"]
        );
    }

    /// The channel as DescribeTrainingJob answers it: the server's defaults
    /// filled in (`CompressionType` and `RecordWrapperType` `None`), the
    /// input mode left to the job's, no `ContentType` or `ShuffleConfig`.
    fn served(source: DataSource, compression: CompressionType) -> Channel {
        Channel::builder()
            .channel_name(CHANNEL)
            .data_source(source)
            .compression_type(compression)
            .record_wrapper_type(RecordWrapper::None)
            .build()
    }

    #[test]
    fn a_channel_with_the_servers_defaults_is_the_same_input() {
        let s = spec();
        let ChannelSource::S3 { uri } = &s.input else {
            panic!("the test spec reads S3")
        };
        let s3 = |distribution: Option<S3DataDistribution>| {
            DataSource::builder()
                .s3_data_source(
                    S3DataSource::builder()
                        .s3_data_type(S3DataType::S3Prefix)
                        .s3_uri(uri)
                        .set_s3_data_distribution_type(distribution)
                        .build(),
                )
                .build()
        };
        for distribution in [None, Some(S3DataDistribution::FullyReplicated)] {
            let job = described_with(&s, served(s3(distribution.clone()), CompressionType::None));
            assert_eq!(
                differences(&s, &job),
                Vec::<String>::new(),
                "{distribution:?}"
            );
        }
        let efs = TrainingJobSpec {
            input: ChannelSource::Efs {
                file_system_id: "fs-0123456789abcdef0".into(),
                directory_path: "/fashion-mnist".into(),
            },
            ..spec()
        };
        let efs_source = channel(&efs.input).data_source().unwrap().clone();
        let job = described_with(&efs, served(efs_source.clone(), CompressionType::None));
        assert_eq!(differences(&efs, &job), Vec::<String>::new());

        // What does change the data the trainer reads still differs.
        let gzip = described_with(&s, served(s3(None), CompressionType::Gzip));
        assert_eq!(differences(&s, &gzip), ["input"]);
        let sharded = described_with(
            &s,
            served(
                s3(Some(S3DataDistribution::ShardedByS3Key)),
                CompressionType::None,
            ),
        );
        assert_eq!(differences(&s, &sharded), ["input"]);
        let pipe = Channel::builder()
            .channel_name(CHANNEL)
            .data_source(s3(None))
            .input_mode(TrainingInputMode::Pipe)
            .build();
        assert_eq!(differences(&s, &described_with(&s, pipe)), ["input"]);
        assert_eq!(
            differences(
                &s,
                &described_with(&efs, served(efs_source, CompressionType::None))
            ),
            ["input"]
        );
    }

    fn transition(status: SecondaryStatus, message: &str) -> SecondaryStatusTransition {
        SecondaryStatusTransition::builder()
            .status(status)
            .status_message(message)
            .start_time(aws_sdk_sagemaker::primitives::DateTime::from_secs(0))
            .build()
    }

    fn job(
        status: TrainingJobStatus,
        transitions: Vec<SecondaryStatusTransition>,
    ) -> DescribeTrainingJobOutput {
        let secondary = transitions.last().and_then(|t| t.status().cloned());
        DescribeTrainingJobOutput::builder()
            .training_job_status(status)
            .set_secondary_status(secondary)
            .set_secondary_status_transitions(Some(transitions))
            .build()
    }

    #[test]
    fn each_transition_is_reported_once_and_message_changes_again() {
        let t0 = Duration::ZERO;
        let first = job(
            TrainingJobStatus::InProgress,
            vec![
                transition(SecondaryStatus::Starting, "Preparing the instances"),
                transition(SecondaryStatus::Downloading, "Downloading input data"),
            ],
        );
        let (events, seen) = new_events(&first, 0, None, t0);
        let labels: Vec<String> = events.iter().map(ToString::to_string).collect();
        assert_eq!(
            labels,
            [
                "InProgress/Starting: Preparing the instances",
                "InProgress/Downloading: Downloading input data"
            ]
        );
        assert_eq!(seen, 2);
        let (again, _) = new_events(&first, seen, events.last(), t0);
        assert_eq!(again, vec![], "nothing new");

        let updated = job(
            TrainingJobStatus::InProgress,
            vec![
                transition(SecondaryStatus::Starting, "Preparing the instances"),
                transition(SecondaryStatus::Downloading, "Downloaded 1 GB"),
            ],
        );
        let (events2, _) = new_events(&updated, seen, events.last(), t0);
        assert_eq!(events2.len(), 1);
        assert_eq!(
            events2[0].to_string(),
            "InProgress/Downloading: Downloaded 1 GB"
        );

        let done = job(
            TrainingJobStatus::Completed,
            vec![
                transition(SecondaryStatus::Starting, "Preparing the instances"),
                transition(SecondaryStatus::Downloading, "Downloaded 1 GB"),
                transition(SecondaryStatus::Training, "Training"),
                transition(SecondaryStatus::Completed, "Training job completed"),
            ],
        );
        let (events3, seen3) = new_events(&done, seen, events2.last(), t0);
        let labels: Vec<String> = events3.iter().map(ToString::to_string).collect();
        assert_eq!(
            labels,
            [
                "InProgress/Training: Training",
                "Completed/Completed: Training job completed"
            ]
        );
        assert_eq!(seen3, 4);
    }
}
