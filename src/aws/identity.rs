//! Who we are in AWS: `sts:GetCallerIdentity`, compared with the account and
//! region recorded in the state before any plan.

use aws_config::SdkConfig;

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
    let sts = super::client::<aws_sdk_sts::Client>(config);
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
