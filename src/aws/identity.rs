//! Who we are in AWS: `sts:GetCallerIdentity`, compared with the account and
//! region recorded in the state before any plan.

use aws_config::SdkConfig;
use aws_types::os_shim_internal::{Env, Fs};

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

/// Calls STS GetCallerIdentity with `config`, whose profile (`--aws-profile`)
/// is `profile`.
///
/// # Errors
/// [`IdentityError`] with the SDK's message (expired token, unreachable
/// endpoint, ...); when the credential provider failed, it says so, names
/// what is half set up (`credential_hints`) and lists where the SDK's
/// default chain looks (AWS SDKs and Tools Reference Guide, "Understand the
/// credential provider chain").
pub async fn caller_identity(
    config: &SdkConfig,
    profile: Option<&str>,
) -> Result<CallerIdentity, IdentityError> {
    let sts = super::client::<aws_sdk_sts::Client>(config);
    let out = match sts.get_caller_identity().send().await {
        Ok(out) => out,
        Err(e) => {
            let message = super::error_message(&e);
            if !credentials_failed(&e) {
                return Err(IdentityError(message));
            }
            let hints = credential_hints(&Env::real(), &Fs::real(), profile).await;
            let hints: String = hints.iter().map(|h| format!(": {h}")).collect();
            let chain = match profile {
                Some(_) => PROFILE_ONLY,
                None => CHAIN,
            };
            return Err(IdentityError(format!(
                "no usable AWS credentials{hints}; {chain} ({message})"
            )));
        }
    };
    Ok(CallerIdentity {
        account: out.account().unwrap_or_default().to_string(),
        arn: out.arn().unwrap_or_default().to_string(),
    })
}

/// The places the SDK's default credential chain reads, in its order.
const CHAIN: &str = "the AWS SDK's default chain reads AWS_ACCESS_KEY_ID and \
     AWS_SECRET_ACCESS_KEY, then the profile of --aws-profile or AWS_PROFILE (~/.aws/config and \
     ~/.aws/credentials; run `aws sso login` first for an SSO profile), a web identity token \
     (AWS_WEB_IDENTITY_TOKEN_FILE), then the ECS task or EC2 instance role";

/// Where the credentials come from with `--aws-profile` ([`super::with_profile`]).
const PROFILE_ONLY: &str = "with --aws-profile they come from that profile only \
     (~/.aws/config and ~/.aws/credentials; run `aws sso login` first for an SSO profile), not \
     from the environment";

/// What is half set up in the places the default chain reads, when it found
/// no credentials: one access-key variable without the other (the
/// environment provider needs both; not read with `--aws-profile`), or a selected profile (`--aws-profile`
/// as `profile`, else `AWS_PROFILE`) that neither profile file defines
/// (their locations follow `AWS_CONFIG_FILE` and
/// `AWS_SHARED_CREDENTIALS_FILE`, read by the SDK's own loader,
/// [`aws_config::profile::load`]). Empty when nothing is half set up.
async fn credential_hints(env: &Env, fs: &Fs, profile: Option<&str>) -> Vec<String> {
    let set = |name| env.get(name).is_ok_and(|v| !v.is_empty());
    let mut hints = Vec::new();
    // With --aws-profile the environment's keys are not read.
    match (set("AWS_ACCESS_KEY_ID"), set("AWS_SECRET_ACCESS_KEY")) {
        _ if profile.is_some() => {}
        (true, false) => hints.push(
            "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not (both are needed)".into(),
        ),
        (false, true) => hints.push(
            "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not (both are needed)".into(),
        ),
        _ => {}
    }
    let selected = match profile {
        Some(p) => Some((p.to_string(), "--aws-profile")),
        None => super::env_profile(env).map(|p| (p, "AWS_PROFILE")),
    };
    match selected {
        Some((name, from)) => hints.extend(undefined_profile(env, fs, &name, from).await),
        // The default profile is optional, but files it cannot parse stop
        // the whole profile provider.
        None => {
            let files = Default::default();
            if let Err(e) = aws_config::profile::load(fs, env, &files, None).await {
                hints.push(unreadable(&e));
            }
        }
    }
    hints
}

/// `the AWS profile files cannot be read: …` with each cause of `e` (the
/// parse error names the file and line).
fn unreadable(e: &(dyn std::error::Error + 'static)) -> String {
    let causes: Vec<String> = std::iter::successors(Some(e), |e| e.source())
        .map(ToString::to_string)
        .collect();
    format!(
        "the AWS profile files cannot be read: {}",
        causes.join(": ")
    )
}

/// Why the profile `name` (selected by `from`, e.g. `--aws-profile`) cannot
/// be used: neither profile file defines it (their locations follow
/// `AWS_CONFIG_FILE` and `AWS_SHARED_CREDENTIALS_FILE`, read by the SDK's
/// own loader, [`aws_config::profile::load`]), with the profiles they do
/// define; or the files cannot be read. `None` when it is defined. `env` and
/// `fs` are the process's with [`Env::real`] and [`Fs::real`].
pub async fn undefined_profile(env: &Env, fs: &Fs, name: &str, from: &str) -> Option<String> {
    // The default files (the SDK's `EnvConfigFiles::default()`).
    let files = Default::default();
    match aws_config::profile::load(fs, env, &files, Some(name.to_string().into())).await {
        Ok(profiles) if profiles.get_profile(name).is_none() => {
            let mut known: Vec<&str> = profiles.profiles().collect();
            known.sort_unstable();
            let known = match known.is_empty() {
                true => "they define no profile".to_string(),
                false => format!("profiles defined: {}", known.join(", ")),
            };
            Some(format!(
                "profile {name:?} (from {from}) is defined in neither ~/.aws/config nor \
                 ~/.aws/credentials (or AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE); {known}"
            ))
        }
        Ok(_) => None,
        Err(e) => Some(unreadable(&e)),
    }
}

/// Whether `e` or one of its causes is the credential provider's failure
/// (`CredentialsError`): no request was sent.
fn credentials_failed(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |e| e.source())
        .any(|e| e.is::<aws_credential_types::provider::error::CredentialsError>())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Profile files under `/home/.aws` with `dev` (config) and `default`
    /// (credentials).
    fn files() -> Fs {
        Fs::from_slice(&[
            ("/home/.aws/config", "[profile dev]\nregion = us-east-1\n"),
            (
                "/home/.aws/credentials",
                "[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = x\n",
            ),
        ])
    }

    #[tokio::test]
    async fn profile_files_that_do_not_parse_are_named_with_the_line_with_or_without_a_profile() {
        let broken = Fs::from_slice(&[("/home/.aws/config", "[default]\nregion = x\nfoo\n")]);
        let env = Env::from_slice(&[("HOME", "/home")]);
        for hints in [
            credential_hints(&env, &broken, None).await,
            credential_hints(&env, &broken, Some("dev")).await,
        ] {
            assert_eq!(hints.len(), 1, "{hints:?}");
            assert!(
                hints[0].starts_with("the AWS profile files cannot be read: ")
                    && hints[0].contains("/home/.aws/config on line 3"),
                "{hints:?}"
            );
        }
        // Files that parse, without a selected profile: nothing to say.
        assert!(credential_hints(&env, &files(), None).await.is_empty());
    }

    #[tokio::test]
    async fn one_access_key_variable_without_the_other_is_named() {
        let env = Env::from_slice(&[("HOME", "/home"), ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")]);
        assert_eq!(
            credential_hints(&env, &files(), None).await,
            ["AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not (both are needed)"]
        );
        let env = Env::from_slice(&[("HOME", "/home"), ("AWS_SECRET_ACCESS_KEY", "s")]);
        assert_eq!(
            credential_hints(&env, &files(), None).await,
            ["AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not (both are needed)"]
        );
    }

    #[tokio::test]
    async fn a_selected_profile_no_file_defines_is_named_with_where_it_was_chosen() {
        let env = Env::from_slice(&[("HOME", "/home"), ("AWS_PROFILE", "prod")]);
        let hints = credential_hints(&env, &files(), None).await;
        assert_eq!(hints.len(), 1, "{hints:?}");
        assert!(
            hints[0].starts_with("profile \"prod\" (from AWS_PROFILE) is defined in neither")
                && hints[0].ends_with("profiles defined: default, dev"),
            "{hints:?}"
        );
        // The flag wins over the variable, as in the SDK config.
        let hints = credential_hints(&env, &files(), Some("staging")).await;
        assert!(
            hints[0].starts_with("profile \"staging\" (from --aws-profile)"),
            "{hints:?}"
        );
        let none = Fs::from_slice(&[]);
        let hints = credential_hints(&env, &none, None).await;
        assert!(hints[0].ends_with("they define no profile"), "{hints:?}");
    }

    #[tokio::test]
    async fn nothing_half_set_up_gives_no_hint() {
        let env = Env::from_slice(&[("HOME", "/home"), ("AWS_PROFILE", "dev")]);
        assert!(credential_hints(&env, &files(), None).await.is_empty());
        assert!(credential_hints(&env, &files(), Some("default"))
            .await
            .is_empty());
        let env = Env::from_slice(&[
            ("HOME", "/home"),
            ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ]);
        assert!(credential_hints(&env, &files(), None).await.is_empty());
        let env = Env::from_slice(&[("HOME", "/home")]);
        assert!(credential_hints(&env, &files(), None).await.is_empty());
    }
}
