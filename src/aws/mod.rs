//! AWS access: SDK configuration from the standard chain, and the resources
//! that live in AWS: CloudFormation stacks ([`stack`]), the EKS cluster and
//! node groups ([`eks`]) and the cluster's IAM OIDC provider ([`oidc`]).
//!
//! Credentials come from the profile of `--aws-profile`, else the SDK's
//! default chain (environment, `AWS_PROFILE`, SSO, web identity, container
//! and instance metadata; [`with_profile`]);
//! the endpoint from the SDK's standard `AWS_ENDPOINT_URL` override when set
//! (how tests and `make demo` reach the local emulator). Retries use the SDK's
//! standard retry mode with a bounded number of attempts, and each attempt
//! is bounded in time ([`CONNECT_TIMEOUT`], [`ATTEMPT_TIMEOUT`]), so a
//! stalled connection fails and is retried instead of hanging.

pub mod bucket;
pub mod clients;
pub mod drift;
pub mod eks;
pub mod guards;
pub mod identity;
pub mod ingress;
pub mod instance_types;
#[cfg(test)]
pub(crate) mod loopback;
pub mod oidc;
pub mod stack;
pub mod token;
pub mod trust;
pub mod vpc;
pub mod wait;
pub mod zones;

pub use clients::client;

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_types::os_shim_internal::Env;

/// Attempts per AWS call, including the first (the SDK's standard retry mode
/// backs off exponentially with jitter between them, at most 20 s apart).
/// Bounded, and higher than the SDK's default of 3 because one plan or
/// apply makes hundreds of calls: at 20 % throttled or failing calls (the
/// CLI tests' fault load) a call fails 8 attempts with probability
/// 0.2^8 ≈ 3e-6, against 3e-4 for 5, which failed a plan of about 100 calls
/// now and then. For comparison, the Terraform AWS provider's `max_retries`
/// defaults to 25.
pub const MAX_ATTEMPTS: u32 = 8;

/// The longest wait to open a connection to an AWS endpoint, TCP and TLS
/// handshakes together (the SDK's connect timeout wraps its HTTPS
/// connector), per attempt. Longer than the SDK's default of 3.1 s (set
/// from `BehaviorVersion` 2026-01-12, the "standard" smart defaults mode of
/// the AWS SDKs and Tools Reference Guide), which a lost SYN makes an
/// attempt miss: Linux resends an unanswered SYN after 1 s, then 2 s and
/// 4 s later (RFC 6298's initial 1 s timeout, doubled), so 10 s leaves
/// room for the fourth SYN, at 7 s, and the TLS round trips after it, on
/// the slow or lossy links (VPNs, hotel Wi-Fi) kfaws is run from.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest one attempt of an AWS call may take, from sending the
/// request to reading the whole response (the SDK's
/// `operation_attempt_timeout`); a timed-out attempt is retried as a
/// transient error, up to [`MAX_ATTEMPTS`] in all, so a call whose every
/// attempt stalls fails after about 8 × 60 s plus the backoffs instead of
/// never. It bounds what the SDK's read timeout (which ends at the first
/// byte of the response) cannot: a connection that went silent (a
/// half-open TCP connection, a peer that never answers) in the middle of
/// the response body. kfaws's control plane calls (CloudFormation, EC2,
/// EFS, EKS, IAM, SageMaker, ECR, STS, CloudWatch Logs) send and receive
/// at most a few hundred KiB and are answered in seconds; 60 s is the AWS
/// CLI's default read timeout (`--cli-read-timeout`). Image layers go to
/// ECR through the registry API ([`crate::image::push`]), not the SDK.
/// Not applied to S3 uploads ([`bucket::upload_client`]): an attempt's
/// time includes sending the request body (as does the read timeout's), and
/// a PutObject of a large training data file may take longer than any fixed
/// bound; the other S3 calls ([`bucket::client`]) have it.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(60);

/// [`ATTEMPT_TIMEOUT`] for SageMaker Runtime (InvokeEndpoint): the model
/// container may take up to 60 s to answer (Amazon SageMaker Runtime API
/// Reference, InvokeEndpoint, which advises a 70 s SDK socket timeout), and
/// the attempt also sends and receives up to 6 MiB each way
/// ([`crate::sagemaker::endpoint::MAX_INVOKE_BODY_BYTES`]): 60 s more is
/// room for those 12 MiB at 1.6 Mbit/s.
pub const INVOKE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(120);

/// Attempts per SageMaker Runtime call (InvokeEndpoint), in place of
/// [`MAX_ATTEMPTS`]: the SDK's default for the standard retry mode (AWS SDKs
/// and Tools Reference Guide, "Retry behavior"). An attempt may take up to
/// [`INVOKE_ATTEMPT_TIMEOUT`], and a model that did not answer in one
/// seldom answers in the next: `kfaws endpoint invoke` gives up after
/// about 3 × 120 s plus the backoffs, not 8 × 120 s. A model's own error
/// (`ModelError`) is not retried at all.
pub const INVOKE_MAX_ATTEMPTS: u32 = 3;

/// The timeouts of one attempt of each call of a client [`clients::client`]
/// makes: [`CONNECT_TIMEOUT`] to connect and `attempt` for the whole
/// attempt ([`ATTEMPT_TIMEOUT`] or [`INVOKE_ATTEMPT_TIMEOUT`]).
pub fn call_timeouts(attempt: Duration) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(attempt)
        .build()
}

/// The partition of `region`, as `${AWS::Partition}` resolves it in a
/// template: `aws-cn` for the China regions (`cn-`), `aws-us-gov` for
/// GovCloud (`us-gov-`), `aws` for the rest (AWS General Reference,
/// "Amazon Resource Names": partitions). The isolated partitions are not
/// reachable by kfaws's users and are not listed.
pub fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

/// A one-line description of a failed AWS call: `Code: message (request id
/// …, after N attempts)` for errors the service returned (the attempts only
/// when the SDK retried the call, from [`clients::ATTEMPTS_HEADER`]), the SDK's own description (timeouts,
/// connection and credential errors) otherwise, never the raw response dump.
pub fn error_message<E>(e: &aws_sdk_sts::error::SdkError<E>) -> String
where
    E: aws_sdk_sts::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match e.as_service_error() {
        Some(service) => {
            let headers = e.raw_response().map(|r| r.headers());
            let notes: Vec<String> = [
                headers
                    .and_then(|h| h.get("x-amzn-requestid"))
                    .map(|id| format!("request id {id}")),
                headers
                    .and_then(|h| h.get(clients::ATTEMPTS_HEADER))
                    .map(|n| format!("after {n} attempts")),
            ]
            .into_iter()
            .flatten()
            .collect();
            let request = match notes.is_empty() {
                true => String::new(),
                false => format!(" ({})", notes.join(", ")),
            };
            match service.code() {
                Some(code) => {
                    let message = service.message().unwrap_or("no message");
                    format!("{code}: {message}{request}")
                }
                // No AWS error in the body (an HTML page from a proxy or a
                // failing server): the HTTP status is all there is to say.
                None => {
                    let status = e
                        .raw_response()
                        .map_or_else(|| "no".to_string(), |r| r.status().as_u16().to_string());
                    format!(
                        "HTTP status {status} with no AWS error code in the response (the \
                         service, or a proxy in front of it, failed){request}"
                    )
                }
            }
        }
        None => error_chain(e),
    }
}

/// `error: cause: cause …` on one line from the `source()` chain, each
/// error by its `Display`, a cause whose text the line already holds left
/// out. The SDK's `DisplayErrorContext` also appends the whole error's
/// `Debug` (`DispatchFailure(DispatchFailure { source: ConnectorError {
/// … }})`), which tells a user nothing more.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// Loads the SDK configuration for `region`, its credentials as
/// [`with_profile`] says for `profile` (`--aws-profile`). Without it, when
/// both `AWS_PROFILE` and `AWS_ACCESS_KEY_ID` are set, a warning says the
/// profile is not used (the environment's keys come first in the chain).
/// Every client made from it connects within [`CONNECT_TIMEOUT`]; the
/// attempt timeout is added per service by [`clients::client`] (and
/// [`bucket::client`]), since S3 uploads ([`bucket::upload_client`]) must
/// not have one.
pub async fn sdk_config(region: &str, profile: Option<&str>) -> SdkConfig {
    warn_if_profile_shadowed(profile);
    let loader = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .retry_config(RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .build(),
        );
    with_profile(loader, profile).load().await
}

/// Without `--aws-profile` (`profile`), when both `AWS_PROFILE` and
/// `AWS_ACCESS_KEY_ID` are set: a warning that the profile is not used (the
/// environment's keys come first in the SDK's chain).
pub fn warn_if_profile_shadowed(profile: Option<&str>) {
    let env = Env::real();
    let keys = env.get("AWS_ACCESS_KEY_ID").is_ok_and(|v| !v.is_empty());
    if let (None, Some(p), true) = (profile, env_profile(&env), keys) {
        tracing::warn!(
            "AWS_PROFILE={p} is not used: AWS_ACCESS_KEY_ID in the environment comes first in \
             the AWS SDK's credential chain (unset it to use the profile, or pass --aws-profile)"
        );
    }
}

/// The profile `AWS_PROFILE` names in `env` (the process environment with
/// [`Env::real`]): its value when set and not empty, else `None`. The one
/// reading of the variable for the warnings, the credential hints and the
/// kubeconfig's exec plugin, so they agree on what is selected.
pub fn env_profile(env: &Env) -> Option<String> {
    env.get("AWS_PROFILE").ok().filter(|p| !p.is_empty())
}

/// Where credentials come from. With `--aws-profile` (`profile`): that
/// profile only (its keys, SSO session, role or `credential_process`), as
/// the AWS CLI's `--profile` — keys in the environment do not override an
/// explicit flag, and a profile no file defines fails instead of falling
/// through to other credentials. Without it: the SDK's default chain, in
/// which `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` come before
/// `AWS_PROFILE` (AWS SDKs and Tools Reference Guide, "Understand the
/// credential provider chain").
pub fn with_profile(
    loader: aws_config::ConfigLoader,
    profile: Option<&str>,
) -> aws_config::ConfigLoader {
    match profile {
        Some(p) => loader.profile_name(p).credentials_provider(
            aws_config::profile::ProfileFileCredentialsProvider::builder()
                .profile_name(p)
                .build(),
        ),
        None => loader,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sts::error::{ErrorMetadata, SdkError};
    use aws_sdk_sts::operation::get_caller_identity::GetCallerIdentityError;
    use aws_smithy_runtime_api::http::{Response, StatusCode};

    fn failed(status: u16, meta: ErrorMetadata) -> SdkError<GetCallerIdentityError, Response> {
        SdkError::service_error(
            GetCallerIdentityError::generic(meta),
            Response::new(
                StatusCode::try_from(status).unwrap(),
                aws_smithy_types::body::SdkBody::from("<html>500</html>"),
            ),
        )
    }

    #[tokio::test]
    async fn a_refused_connection_is_one_line_of_causes_without_debug_output() {
        // A port nothing listens on (9, discard), one attempt.
        let config = aws_sdk_sts::Config::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:9")
            .credentials_provider(aws_sdk_sts::config::Credentials::for_tests())
            .retry_config(RetryConfig::disabled())
            .build();
        let e = aws_sdk_sts::Client::from_conf(config)
            .get_caller_identity()
            .send()
            .await
            .unwrap_err();
        let text = error_message(&e);
        assert!(
            text.starts_with("dispatch failure") && text.contains("Connection refused"),
            "{text}"
        );
        assert!(!text.contains("DispatchFailure {"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }

    #[test]
    fn a_service_error_names_its_code_and_one_without_a_code_its_http_status() {
        let coded = failed(
            400,
            ErrorMetadata::builder()
                .code("ValidationError")
                .message("bad")
                .build(),
        );
        assert_eq!(error_message(&coded), "ValidationError: bad");
        let html = failed(500, ErrorMetadata::builder().build());
        let text = error_message(&html);
        assert!(
            text.starts_with("HTTP status 500 with no AWS error code in the response"),
            "{text}"
        );
    }

    /// The shared config bounds connecting and nothing else; the S3 client
    /// for uploads made from it has no attempt timeout, which would cut the
    /// upload of a large training data file (PutObject), and the one for
    /// every other S3 call has it.
    #[tokio::test]
    async fn the_sdk_config_bounds_connecting_but_not_s3_uploads() {
        let sdk = sdk_config("us-east-1", None).await;
        let t = sdk.timeout_config().unwrap();
        assert_eq!(t.connect_timeout(), Some(Duration::from_secs(10)));
        assert_eq!(t.operation_attempt_timeout(), None);
        assert_eq!(t.read_timeout(), None);
        let uploads = bucket::upload_client(&sdk);
        let t = uploads.config().timeout_config().unwrap();
        assert_eq!(t.connect_timeout(), Some(CONNECT_TIMEOUT));
        assert_eq!(t.operation_attempt_timeout(), None);
        let calls = bucket::client(&sdk);
        let t = calls.config().timeout_config().unwrap();
        assert_eq!(t.connect_timeout(), Some(CONNECT_TIMEOUT));
        assert_eq!(t.operation_attempt_timeout(), Some(ATTEMPT_TIMEOUT));
    }

    #[test]
    fn partitions_follow_the_region_prefix() {
        assert_eq!(partition("us-east-1"), "aws");
        assert_eq!(partition("cn-north-1"), "aws-cn");
        assert_eq!(partition("us-gov-west-1"), "aws-us-gov");
    }
}
