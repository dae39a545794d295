//! Amazon SageMaker: training jobs ([`training`]) with their CloudWatch logs
//! ([`logs`]), resumed from another job's checkpoints ([`resume`]), and real-time endpoints ([`endpoint`]) serving a trained model.
//!
//! Every call checks its input against the rules of the SageMaker API
//! Reference before anything is sent, so a bad name or hyperparameter is an
//! error that names the input and the rule, and nothing is created. Waits
//! poll with [`crate::aws::wait`]'s backoff and report the statuses seen.
//!
//! Sources: Amazon SageMaker API Reference,
//! <https://docs.aws.amazon.com/sagemaker/latest/APIReference/Welcome.html>.

pub mod endpoint;
pub mod logs;
pub mod resume;
pub mod training;

use std::fmt;
use std::time::Duration;

use aws_sdk_sagemaker::error::{ProvideErrorMetadata, SdkError};

use crate::aws::wait::History;

/// The tags of the SageMaker resource `arn` (ListTags, every page), by key; a
/// tag without a value maps to "".
///
/// # Errors
/// [`SageMakerError::Api`] naming `arn` when a ListTags call fails.
pub async fn tags_of(
    client: &aws_sdk_sagemaker::Client,
    arn: &str,
) -> Result<std::collections::BTreeMap<String, String>, SageMakerError> {
    let listed = client
        .list_tags()
        .resource_arn(arn)
        .into_paginator()
        .items()
        .send()
        .collect::<Vec<_>>()
        .await;
    let mut tags = std::collections::BTreeMap::new();
    for tag in listed {
        let tag = tag.map_err(|e| SageMakerError::api("ListTags", arn, &e))?;
        if let Some(key) = tag.key() {
            tags.insert(key.to_string(), tag.value().unwrap_or_default().to_string());
        }
    }
    Ok(tags)
}

/// The kinds of SageMaker resource kfaws names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A training job (`CreateTrainingJob`).
    TrainingJob,
    /// A model (`CreateModel`).
    Model,
    /// An endpoint configuration (`CreateEndpointConfig`).
    EndpointConfig,
    /// An endpoint (`CreateEndpoint`).
    Endpoint,
}

impl Kind {
    /// The API operation and member that define the kind's name rule.
    fn name_source(self) -> &'static str {
        match self {
            Kind::TrainingJob => "CreateTrainingJob, TrainingJobName",
            Kind::Model => "CreateModel, ModelName",
            Kind::EndpointConfig => "CreateEndpointConfig, EndpointConfigName",
            Kind::Endpoint => "CreateEndpoint, EndpointName",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::TrainingJob => "training job",
            Kind::Model => "model",
            Kind::EndpointConfig => "endpoint configuration",
            Kind::Endpoint => "endpoint",
        })
    }
}

/// The name pattern shared by training jobs, models, endpoint configurations
/// and endpoints: 1 to 63 characters, letters, digits and hyphens, starting
/// and ending with a letter or digit (Amazon SageMaker API Reference:
/// `TrainingJobName`, `ModelName`, `EndpointConfigName` and `EndpointName`
/// all have the pattern `^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}` and a maximum
/// length of 63).
pub const NAME_PATTERN: &str = "^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}";

/// Checks `name` against [`NAME_PATTERN`], the rule SageMaker applies to
/// names of `kind`.
///
/// # Errors
/// [`SageMakerError::InvalidName`] saying which characters or which length
/// the rule refuses, e.g. `training job name "ml_job" is invalid: it
/// contains '_' (not allowed); SageMaker allows ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}
/// (Amazon SageMaker API Reference, CreateTrainingJob, TrainingJobName)`.
pub fn validate_name(kind: Kind, name: &str) -> Result<(), SageMakerError> {
    // The rule in `naming` is the same pattern, stated for training jobs;
    // only its explanation of the mismatch is used here.
    match crate::naming::SAGEMAKER_JOB.violation(name) {
        None => Ok(()),
        Some(reason) => Err(SageMakerError::InvalidName {
            kind,
            name: name.to_string(),
            reason,
        }),
    }
}

/// What to do about an existing resource created with the same spec: one still running can be
/// waited for; a finished training job (`Completed`, `Failed`, `Stopped`) keeps its name for
/// good (training job names cannot be reused: CreateTrainingJob, SageMaker API Reference).
fn same_spec_advice(kind: Kind, status: Option<&str>) -> String {
    match (kind, status) {
        (Kind::TrainingJob, Some(done @ ("Completed" | "Failed" | "Stopped"))) => format!(
            "it was created with the same spec by an earlier run and is {done} (a local --data \
             directory is compared by the S3 prefix it is uploaded to, not by its files); its \
             name cannot be reused: use another name"
        ),
        _ => "it was created with the same spec (an earlier run); wait for it or use another \
              name"
            .to_string(),
    }
}

/// What went wrong in a SageMaker call or wait.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SageMakerError {
    /// A name SageMaker would refuse; nothing was sent.
    #[error(
        "{kind} name {name:?} is invalid: {reason}; SageMaker allows {NAME_PATTERN} \
         (Amazon SageMaker API Reference, {})",
        kind.name_source()
    )]
    InvalidName {
        /// What the name is for.
        kind: Kind,
        /// The name.
        name: String,
        /// What the rule refuses.
        reason: String,
    },
    /// Any other input SageMaker would refuse; nothing was sent.
    #[error("{field} is invalid: {reason}")]
    Invalid {
        /// The input, e.g. `hyperparameter "lr"` or `instance_count`.
        field: String,
        /// What is wrong and the rule's source.
        reason: String,
    },
    /// A resource of that name exists already (`ResourceInUse`, or
    /// "Cannot create already existing ...").
    #[error(
        "{kind} {name:?} already exists{}{}: {}",
        status.as_deref().map(|s| format!(" (status {s})")).unwrap_or_default(),
        arn.as_deref().map(|a| format!(" as {a}")).unwrap_or_default(),
        if differences.is_empty() {
            same_spec_advice(*kind, status.as_deref())
        } else {
            format!("it differs in {}; use another name", differences.join(", "))
        }
    )]
    AlreadyExists {
        /// What exists.
        kind: Kind,
        /// Its name.
        name: String,
        /// Its ARN, when known.
        arn: Option<String>,
        /// Its status, when known.
        status: Option<String>,
        /// The fields of the request that differ from the existing
        /// resource; empty when it was created with the same spec.
        differences: Vec<String>,
    },
    /// A resource of the name exists but another deployment, or no kfaws,
    /// made it: its `kfaws:deployment` (or `kfaws:lineage`) tag is not this
    /// deployment's.
    #[error(
        "{kind} {name:?} exists as {arn} but deployment {deployment:?} did not make it (its \
         kfaws:deployment tag: {}); kfaws neither adopts nor deletes it: use another name",
        owner.as_deref().map_or_else(|| "none".to_string(), |o| format!("{o:?}"))
    )]
    NotOurs {
        /// What exists.
        kind: Kind,
        /// Its name.
        name: String,
        /// Its ARN.
        arn: String,
        /// The deployment its tag names (with its lineage tag, if any).
        owner: Option<String>,
        /// This deployment.
        deployment: String,
    },
    /// The resource does not exist.
    #[error("{kind} {name:?} does not exist")]
    NotFound {
        /// What is missing.
        kind: Kind,
        /// Its name.
        name: String,
    },
    /// A call failed: `Code: message (request id)` or the SDK's description
    /// (see [`crate::aws::error_message`]).
    #[error("{operation} {name}: {message}")]
    Api {
        /// The API operation, e.g. `CreateTrainingJob`.
        operation: &'static str,
        /// The resource name the call was about.
        name: String,
        /// What the service or the SDK said.
        message: String,
    },
    /// The resource reached a failed state (an endpoint `Failed`), with the
    /// service's `FailureReason`.
    #[error("{kind} {name:?} failed: {reason}{}", .history.suffix())]
    Failed {
        /// What failed.
        kind: Kind,
        /// Its name.
        name: String,
        /// SageMaker's `FailureReason`.
        reason: String,
        /// The statuses seen while waiting.
        history: History,
    },
    /// A wait passed its deadline.
    #[error("{kind} {name:?} did not finish within {}s{}", after.as_secs(), .history.suffix())]
    TimedOut {
        /// What was waited for.
        kind: Kind,
        /// Its name.
        name: String,
        /// The deadline.
        after: Duration,
        /// The statuses seen.
        history: History,
    },
    /// A resource stayed, until the deadline, in a status in which SageMaker
    /// refuses to delete it (an endpoint `Creating` or being updated:
    /// [`endpoint::refuses_delete`]); nothing was deleted.
    #[error(
        "{kind} {name:?} is still {status} after {}s{}: SageMaker refuses to delete an endpoint \
         while it is Creating, Updating, SystemUpdating or RollingBack (DeleteEndpoint), so \
         nothing was deleted; retry the delete later",
        after.as_secs(),
        .history.suffix()
    )]
    Busy {
        /// What was to be deleted.
        kind: Kind,
        /// Its name.
        name: String,
        /// The status it was last seen in, e.g. `Creating`.
        status: String,
        /// How long the delete waited.
        after: Duration,
        /// The statuses seen.
        history: History,
    },
    /// The endpoint's container answered an invocation with an error
    /// (InvokeEndpoint `ModelError`).
    #[error(
        "the model behind endpoint {name:?} answered HTTP {status}: {message}{}",
        log_stream_arn.as_deref().map(|l| format!(" (container log: {l})")).unwrap_or_default()
    )]
    Model {
        /// The endpoint.
        name: String,
        /// The container's HTTP status (`OriginalStatusCode`).
        status: i32,
        /// The container's answer (`OriginalMessage`).
        message: String,
        /// The CloudWatch Logs stream of the container, when given.
        log_stream_arn: Option<String>,
    },
}

impl SageMakerError {
    /// An [`SageMakerError::Api`] from an SDK error.
    fn api<E>(operation: &'static str, name: &str, e: &SdkError<E>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        SageMakerError::Api {
            operation,
            name: name.to_string(),
            message: crate::aws::error_message(e),
        }
    }
}

/// Whether SageMaker said the resource does not exist. The Describe and
/// Delete operations of models, endpoint configurations, endpoints and
/// training jobs answer `ValidationException` with "Could not find ..." (or
/// "Requested resource not found" for training jobs) rather than a typed
/// not-found error, so the message is what tells.
/// What to suggest for an instance type not in `known` (an enum of the
/// SageMaker API model, as the SDK lists it): the sizes of its family when
/// the family exists, else every family.
pub(crate) fn similar(given: &str, known: &[&'static str]) -> String {
    let family = |t: &'static str| t.rsplit_once('.').map_or(t, |(f, _)| f);
    let given_family = given.rsplit_once('.').map_or(given, |(f, _)| f);
    let same: Vec<&str> = known
        .iter()
        .copied()
        .filter(|k| family(k) == given_family)
        .collect();
    if same.is_empty() {
        let mut families: Vec<&str> = known.iter().copied().map(family).collect();
        families.sort_unstable();
        families.dedup();
        format!("the families are {}", families.join(", "))
    } else {
        format!("{given_family} comes in {}", same.join(", "))
    }
}

fn is_not_found<E: ProvideErrorMetadata>(e: &SdkError<E>) -> bool {
    let Some(service) = e.as_service_error() else {
        return false;
    };
    service.code() == Some("ResourceNotFound")
        || service.message().is_some_and(|m| {
            m.contains("Could not find") || m.contains("Requested resource not found")
        })
}

/// SageMaker [`Tag`](aws_sdk_sagemaker::types::Tag)s from `(key, value)` pairs.
fn tags(pairs: &[(String, String)]) -> Vec<aws_sdk_sagemaker::types::Tag> {
    pairs
        .iter()
        .map(|(k, v)| {
            aws_sdk_sagemaker::types::Tag::builder()
                .key(k)
                .value(v)
                .build()
        })
        .collect()
}

/// At most this many tags per resource (Amazon SageMaker API Reference,
/// `Tags`: "Array Members: Minimum number of 0 items. Maximum number of 50
/// items").
pub const MAX_TAGS: usize = 50;

/// Checks an image URI as CreateTrainingJob (`AlgorithmSpecification.
/// TrainingImage`) and CreateModel (`ContainerDefinition.Image`) take it from
/// kfaws: 1 to 255 characters matching `[\S]+`, and in Amazon ECR. SageMaker
/// pulls from another registry only in VPC access mode
/// (`TrainingImageConfig` / `ImageConfig.RepositoryAccessMode = Vpc`, SageMaker
/// Developer Guide, "Use a private Docker registry for training"), which
/// kfaws does not set. `api_field` names the parameter in the message.
///
/// # Errors
/// [`SageMakerError::Invalid`] naming the image and the rule.
pub fn validate_image(image: &str, api_field: &str) -> Result<(), SageMakerError> {
    let invalid = |reason: String| SageMakerError::Invalid {
        field: format!("image {image:?}"),
        reason,
    };
    if image.is_empty() || image.len() > 255 || image.contains(char::is_whitespace) {
        return Err(invalid(format!(
            "SageMaker expects an image URI of 1 to 255 characters without spaces ({api_field})"
        )));
    }
    if crate::image::inspect::EcrImage::parse(image).is_none() {
        return Err(invalid(format!(
            "SageMaker pulls images from Amazon ECR (ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME; \
             {api_field}; another registry needs VPC access mode, which kfaws does not set): \
             push the image with `kfaws image push` and pass the URI it prints"
        )));
    }
    Ok(())
}

fn validate_tags(pairs: &[(String, String)]) -> Result<(), SageMakerError> {
    if pairs.len() > MAX_TAGS {
        return Err(SageMakerError::Invalid {
            field: "tags".into(),
            reason: format!(
                "{} tags, SageMaker allows at most {MAX_TAGS} per resource \
                 (Amazon SageMaker API Reference, Tag)",
                pairs.len()
            ),
        });
    }
    // Tag: Key 1..=128 characters, Value 0..=256 characters.
    for (k, v) in pairs {
        if k.is_empty() || k.chars().count() > 128 || v.chars().count() > 256 {
            return Err(SageMakerError::Invalid {
                field: format!("tag {k:?}"),
                reason: "tag keys have 1 to 128 characters and values at most 256 \
                         (Amazon SageMaker API Reference, Tag)"
                    .into(),
            });
        }
    }
    Ok(())
}

/// An IAM role ARN as SageMaker accepts it for `RoleArn` and
/// `ExecutionRoleArn`: 20 to 2048 characters, pattern
/// `^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$`.
fn validate_role_arn(arn: &str) -> Result<(), SageMakerError> {
    let re = regex_lite::Regex::new(r"^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$")
        .expect("the role ARN pattern is valid");
    let len = arn.chars().count();
    if (20..=2048).contains(&len) && re.is_match(arn) {
        return Ok(());
    }
    Err(SageMakerError::Invalid {
        field: format!("role ARN {arn:?}"),
        reason: "SageMaker expects an IAM role ARN, arn:aws:iam::ACCOUNT:role/NAME \
                 (Amazon SageMaker API Reference, CreateTrainingJob, RoleArn)"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_sagemaker_pattern() {
        for ok in ["a", "job-1", "A--b", &"x".repeat(63)] {
            assert!(validate_name(Kind::TrainingJob, ok).is_ok(), "{ok}");
        }
        let e = validate_name(Kind::TrainingJob, "ml_job").unwrap_err();
        assert_eq!(
            e.to_string(),
            "training job name \"ml_job\" is invalid: it contains '_' (not allowed); SageMaker \
             allows ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62} (Amazon SageMaker API Reference, \
             CreateTrainingJob, TrainingJobName)"
        );
        let long = "a".repeat(70);
        let e = validate_name(Kind::Endpoint, &long)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("it is 70 characters, the limit is 1..=63"),
            "{e}"
        );
        assert!(e.contains("CreateEndpoint, EndpointName"), "{e}");
        for bad in ["", "-job", "job-", "job.1"] {
            assert!(validate_name(Kind::Model, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn role_arns_follow_the_sagemaker_pattern() {
        assert!(validate_role_arn("arn:aws:iam::123456789012:role/kfaws-sagemaker").is_ok());
        assert!(validate_role_arn("arn:aws-cn:iam::123456789012:role/path/r").is_ok());
        for bad in [
            "kfaws-sagemaker",
            "arn:aws:iam::1234:role/r",
            "arn:aws:s3:::bucket",
        ] {
            assert!(validate_role_arn(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn at_most_fifty_tags() {
        let tags: Vec<(String, String)> = (0..51).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(validate_tags(&tags[..50]).is_ok());
        let e = validate_tags(&tags).unwrap_err().to_string();
        assert!(e.contains("51 tags, SageMaker allows at most 50"), "{e}");
        assert!(validate_tags(&[(String::new(), "v".into())]).is_err());
    }
}
