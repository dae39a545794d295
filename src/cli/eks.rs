//! `kfaws eks get-token` and `kfaws kubeconfig`.

use anyhow::Context as _;
use aws_config::{BehaviorVersion, Region};
use aws_types::os_shim_internal::Env;
use kfaws::aws::token;
use kfaws::k8s::exec_credential::{requested_api_version, ExecCredential};
use kfaws::k8s::kubeconfig::{self, AwsProfile, ClusterAccess};
use kfaws::state::store::StateStore;

use super::{context, Global};

/// `kfaws eks get-token --cluster-name NAME`: prints an `ExecCredential`
/// with the EKS token. Reads no kfaws.toml and no state: kubectl runs it
/// from any directory.
pub async fn get_token(g: &Global, cluster: &str) -> anyhow::Result<u8> {
    token::check_cluster_name(cluster)?;
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(region) = &g.region {
        loader = loader.region(Region::new(region.clone()));
    }
    let sdk = kfaws::aws::with_profile(loader, g.aws_profile.as_deref())
        .load()
        .await;
    let t = match token::get_token(&sdk, cluster).await {
        Ok(t) => t,
        // Name the cause the credential provider's error does not: the
        // profile a kubeconfig recorded may be gone since.
        Err(e) => {
            let (env, fs) = (Env::real(), aws_types::os_shim_internal::Fs::real());
            let selected = match &g.aws_profile {
                Some(p) => Some((p.clone(), "--aws-profile")),
                None => kfaws::aws::env_profile(&env).map(|p| (p, "AWS_PROFILE")),
            };
            let Some((profile, from)) = selected else {
                return Err(e.into());
            };
            match kfaws::aws::identity::undefined_profile(&env, &fs, &profile, from).await {
                Some(problem) => anyhow::bail!("{e}; {problem}"),
                None => return Err(e.into()),
            }
        }
    };
    tracing::debug!(cluster, expiration = %t.expiration, "made an EKS token");
    let info = std::env::var("KUBERNETES_EXEC_INFO").ok();
    let credential = ExecCredential::new(
        requested_api_version(info.as_deref()),
        t.token,
        t.expiration,
    );
    outln!("{}", serde_json::to_string(&credential)?)?;
    Ok(0)
}

/// `kfaws kubeconfig`: writes the deployment's cluster, a user that runs
/// `kfaws eks get-token` and a context into the kubeconfig, then checks
/// that the credentials the token would be made with (`--aws-profile`, else
/// the SDK's default chain) are of the account the state records: a token
/// of another account's identity is refused by the cluster (401
/// Unauthorized). A mismatch, or credentials that cannot be checked, is a
/// warning: the kubeconfig is written either way, as kubectl may run with
/// other credentials. A profile to record (`--aws-profile`, else
/// `AWS_PROFILE`) that no profile file defines is an error and nothing is
/// written (as `aws eks update-kubeconfig --profile`): kubectl calls would
/// fail with it. So is a `--region` other than the one the state records:
/// the context would point at the recorded cluster anyway.
pub async fn kubeconfig(
    g: &Global,
    path: Option<&std::path::Path>,
    alias: Option<&str>,
) -> anyhow::Result<u8> {
    let exec = context::exec_auth(g)?;
    let recorded = match &exec.aws_profile {
        Some(AwsProfile::Flag(p)) => Some((p, "--aws-profile", "")),
        Some(AwsProfile::Env(p)) => Some((
            p,
            "AWS_PROFILE",
            " (unset AWS_PROFILE, or set it to a defined profile)",
        )),
        None => None,
    };
    if let Some((profile, from, fix)) = recorded {
        let (env, fs) = (Env::real(), aws_types::os_shim_internal::Fs::real());
        if let Some(problem) =
            kfaws::aws::identity::undefined_profile(&env, &fs, profile, from).await
        {
            anyhow::bail!(
                "{problem}. The kubeconfig would record it for kubectl's `kfaws eks get-token`, \
                 so nothing was written{fix}"
            );
        }
    }
    let (name, state_dir) = context::deployment(g)?;
    let store = StateStore::open(&state_dir, &name)?;
    let state = store.state();
    let cluster = kfaws::address::Address::new("eks.cluster").expect("a valid address");
    let recorded = state.resources.get(&cluster).with_context(|| {
        format!("deployment {name:?} has no eks.cluster in its state: run `kfaws apply` first")
    })?;
    if let Some(asked) = &g.region {
        if !kfaws::naming::KNOWN_REGIONS.contains(&asked.as_str()) {
            anyhow::bail!(
                "--region {asked:?} is not an AWS Region kfaws knows (AWS General Reference, \
                 \"AWS Regions\"); nothing was written"
            );
        }
    }
    if let (Some(asked), Some(region)) = (&g.region, &state.region) {
        if asked != region {
            anyhow::bail!(
                "--region {asked}: the EKS cluster of deployment {name:?} is in region {region} \
                 (recorded in its state), and the kubeconfig points at that cluster, so nothing \
                 was written; drop --region, or name the deployment of region {asked} with --name"
            );
        }
    }
    let access = ClusterAccess::from_outputs(&recorded.outputs, state.region.as_deref())?;
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => kubeconfig::default_path()?,
    };
    let mut config = kubeconfig::read(&path)?;
    let context = kubeconfig::merge(&mut config, &access, &exec, alias);
    kubeconfig::write(&path, &config)?;
    outln!(
        "Updated context {context} in {} (current context; cluster {}, token by `{} eks get-token`).",
        path.display(),
        access.arn,
        exec.command.display()
    )?;
    if let (Some(account), Some(region)) = (&state.account_id, &state.region) {
        let sdk = kfaws::aws::sdk_config(region, g.aws_profile.as_deref()).await;
        let whose = match (&g.aws_profile, kfaws::aws::env_profile(&Env::real())) {
            (Some(p), _) => format!("of --aws-profile {p}"),
            (None, Some(p)) => format!("of the AWS SDK's default chain (AWS_PROFILE={p})"),
            (None, None) => "of the AWS SDK's default chain".to_string(),
        };
        match kfaws::aws::identity::caller_identity(&sdk, g.aws_profile.as_deref()).await {
            Ok(id) if id.account != *account => errln!(
                "Warning: the credentials {whose} are for account {} ({}), but the cluster is in \
                 account {account}: kubectl will be refused (401 Unauthorized) unless the cluster \
                 grants that identity access. Run kubectl with credentials of account {account} \
                 (`kfaws --aws-profile PROFILE kubeconfig` records the profile in the kubeconfig).",
                id.account,
                id.arn
            ),
            Ok(_) => {}
            Err(e) => errln!(
                "Warning: cannot check that the credentials {whose} are for account {account}, \
                 the cluster's: {e}"
            ),
        }
    }
    Ok(0)
}
