//! Who we are in AWS: `sts:GetCallerIdentity`, compared with the account and
//! region recorded in the state before any plan.

use std::sync::atomic::{AtomicBool, Ordering};

use aws_config::SdkConfig;
use aws_sdk_sts::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextRef;

/// The caller identity (STS GetCallerIdentity response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerIdentity {
    /// 12-digit account id.
    pub account: String,
    /// ARN of the calling principal.
    pub arn: String,
}

/// Why the identity could not be established.
#[derive(Debug, thiserror::Error)]
#[error("cannot determine the AWS identity (sts:GetCallerIdentity): {0}")]
pub struct IdentityError(String);

/// Calls STS GetCallerIdentity.
///
/// # Errors
/// [`IdentityError`] with the SDK's message (no credentials, expired token,
/// unreachable endpoint, ...).
pub async fn caller_identity(config: &SdkConfig) -> Result<CallerIdentity, IdentityError> {
    let sts = aws_sdk_sts::Client::from_conf(
        aws_sdk_sts::config::Builder::from(config)
            .interceptor(UnreachableNotice {
                endpoint: match (config.endpoint_url(), config.region()) {
                    (Some(url), _) => url.to_string(),
                    (None, Some(region)) => format!("STS in {region}"),
                    (None, None) => "STS".to_string(),
                },
                said: AtomicBool::new(false),
            })
            .build(),
    );
    let out = sts
        .get_caller_identity()
        .send()
        .await
        .map_err(|e| IdentityError(super::error_message(&e)))?;
    Ok(CallerIdentity {
        account: out.account().unwrap_or_default().to_string(),
        arn: out.arn().unwrap_or_default().to_string(),
    })
}

/// Says, once, that the endpoint could not be reached and the call is being
/// retried. GetCallerIdentity is every command's first call: with a wrong
/// `AWS_ENDPOINT_URL` or no network the SDK's standard retries
/// ([`super::MAX_ATTEMPTS`] attempts, jittered backoff up to 20 s) would
/// otherwise be up to a minute of silence before the error.
#[derive(Debug)]
struct UnreachableNotice {
    /// The endpoint override, else the service and region.
    endpoint: String,
    said: AtomicBool,
}

impl Intercept for UnreachableNotice {
    fn name(&self) -> &'static str {
        "kfaws::UnreachableNotice"
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(Err(e)) = context.output_or_error() else {
            return Ok(());
        };
        let unreachable = e.as_connector_error().is_some() || e.is_timeout_error();
        if unreachable && !self.said.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "cannot reach {} ({}); retrying, up to {} attempts in all",
                self.endpoint,
                super::error_chain(e),
                super::MAX_ATTEMPTS
            );
        }
        Ok(())
    }
}
