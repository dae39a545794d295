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
/// [`IdentityError`] with the SDK's message (expired token, unreachable
/// endpoint, ...); when the credential provider failed, it says so and
/// lists where the SDK's default chain looks (AWS SDKs and Tools Reference
/// Guide, "Understand the credential provider chain").
pub async fn caller_identity(config: &SdkConfig) -> Result<CallerIdentity, IdentityError> {
    let sts = super::client::<aws_sdk_sts::Client>(config);
    let out = sts.get_caller_identity().send().await.map_err(|e| {
        let message = super::error_message(&e);
        IdentityError(match credentials_failed(&e) {
            true => format!("{NO_CREDENTIALS} ({message})"),
            false => message,
        })
    })?;
    Ok(CallerIdentity {
        account: out.account().unwrap_or_default().to_string(),
        arn: out.arn().unwrap_or_default().to_string(),
    })
}

/// What to do when no credentials were loaded: the places the SDK's default
/// credential chain reads, in its order.
const NO_CREDENTIALS: &str = "no usable AWS credentials; the AWS SDK's default chain reads \
     AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, then the profile of --aws-profile or \
     AWS_PROFILE (~/.aws/config and ~/.aws/credentials; run `aws sso login` first for an SSO \
     profile), a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE), then the ECS task or EC2 \
     instance role";

/// Whether `e` or one of its causes is the credential provider's failure
/// (`CredentialsError`): no request was sent.
fn credentials_failed(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |e| e.source())
        .any(|e| e.is::<aws_credential_types::provider::error::CredentialsError>())
}
