//! Loading what every command needs: the validated config, where the state
//! lives, and (for commands that call AWS) the SDK config and identity.

use std::path::{Path, PathBuf};

use aws_config::SdkConfig;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use kfaws::aws::identity::{caller_identity, CallerIdentity};
use kfaws::config::{Config, ConfigError, ConfigFile, Overrides, ProfileName, CONFIG_FILE};
use kfaws::state::store::StateStore;
use kfaws::state::State;

use super::Global;

/// A loaded, validated config and where its state lives.
pub struct Loaded {
    /// The config.
    pub config: Config,
    /// The state directory.
    pub state_dir: PathBuf,
}

pub fn env_region() -> Option<String> {
    std::env::var("AWS_REGION")
        .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
        .ok()
        .filter(|r| !r.is_empty())
}

/// Reads kfaws.toml (or --config) without resolving it.
pub fn read_file(g: &Global) -> anyhow::Result<(ConfigFile, PathBuf)> {
    let path = config_path(g);
    let file = ConfigFile::load(&path, g.config.is_some())?;
    with_state_dir(g, file, &path)
}

/// [`read_file`] that returns the bad fixed-choice values beside the file
/// ([`ConfigFile::load_reporting`]), for [`load_for`] to report with the
/// config's other problems.
fn read_file_reporting(g: &Global) -> anyhow::Result<(ConfigFile, Vec<ConfigError>, PathBuf)> {
    let path = config_path(g);
    let (file, invalid) = ConfigFile::load_reporting(&path, g.config.is_some())?;
    let (file, state_dir) = with_state_dir(g, file, &path)?;
    Ok((file, invalid, state_dir))
}

fn config_path(g: &Global) -> PathBuf {
    g.config
        .clone()
        .unwrap_or_else(|| PathBuf::from(CONFIG_FILE))
}

/// The file and the state directory it names (or `--state-dir`), checked.
fn with_state_dir(
    g: &Global,
    file: ConfigFile,
    path: &Path,
) -> anyhow::Result<(ConfigFile, PathBuf)> {
    let state_dir = g.state_dir.clone().unwrap_or_else(|| file.state_dir(path));
    let named_by = match (&g.state_dir, &file.state_dir) {
        (Some(_), _) => "--state-dir",
        (None, Some(_)) => "state_dir (kfaws.toml)",
        (None, None) => "the default state directory",
    };
    check_state_dir(&state_dir, named_by)?;
    Ok((file, state_dir))
}

/// Refuses a state directory that exists as something else than a directory (a file), naming
/// where it came from (`named_by`): otherwise the state lock would fail later with a bare
/// "Not a directory". A missing one is made by the first apply.
fn check_state_dir(dir: &Path, named_by: &str) -> anyhow::Result<()> {
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => anyhow::bail!(
            "{named_by} {:?} is invalid: it exists and is not a directory (the state directory \
             holds a state file and a lock per deployment)",
            dir.display().to_string()
        ),
        _ => Ok(()),
    }
}

/// The deployment name from the flag or the file, for commands that only
/// read the state.
///
/// A config that breaks the schema elsewhere (an unfinished edit) does not
/// stop them: `name` and `state_dir` are read on their own, with a warning
/// that shows the error the next plan or apply will report. A file that is
/// not TOML at all is an error unless `--name` and `--state-dir` are both
/// given (then it is ignored, with a warning).
pub fn deployment(g: &Global) -> anyhow::Result<(String, PathBuf)> {
    let path = config_path(g);
    let file = match ConfigFile::load(&path, g.config.is_some()) {
        Ok(file) => file,
        Err(
            strict @ (ConfigError::Parse { .. }
            | ConfigError::Invalid { .. }
            | ConfigError::Several(_)),
        ) => {
            match ConfigFile::load_location(&path, g.config.is_some()) {
                Ok(file) => {
                    tracing::warn!(
                        "reading only `name` and `state_dir` from the config, which the \
                         commands that read all of it (plan, apply, destroy, validate, graph) \
                         refuse: {strict}"
                    );
                    file
                }
                // Both flags given: the file is not needed at all.
                Err(unreadable) if g.name.is_some() && g.state_dir.is_some() => {
                    tracing::warn!(
                        "ignoring the config, which cannot be read ({unreadable}): --name and \
                         --state-dir name the deployment and its state directory"
                    );
                    ConfigFile::default()
                }
                Err(_) => return Err(strict.into()),
            }
        }
        Err(e) => return Err(e.into()),
    };
    let (file, state_dir) = with_state_dir(g, file, &path)?;
    Ok((name(g, file)?, state_dir))
}

/// [`deployment`] for a command that needs the whole config valid anyway (a
/// destroy): a config error is that error, without a warning first.
pub fn deployment_strict(g: &Global) -> anyhow::Result<(String, PathBuf)> {
    let (file, state_dir) = read_file(g)?;
    Ok((name(g, file)?, state_dir))
}

/// `--name`, else the file's `name`; the error says when the file it would
/// come from does not exist.
fn name(g: &Global, file: ConfigFile) -> anyhow::Result<String> {
    if let Some(name) = g.name.clone().or(file.name) {
        return Ok(name);
    }
    anyhow::bail!(
        "name is not set: pass --name or set `name` in kfaws.toml{}",
        missing_file(g)
    )
}

/// ` (there is no kfaws.toml in DIR)` when the config file does not exist
/// (a default one that is missing is an empty config), else empty.
fn missing_file(g: &Global) -> String {
    let path = config_path(g);
    if path.exists() {
        return String::new();
    }
    let dir = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|_| ".".into());
    format!(" (there is no {} in {dir})", path.display())
}

/// Loads and validates the config. The profile is the flag's, else the one
/// recorded in the deployment's state, else the file's, else vanilla.
pub fn load(g: &Global, profile: Option<ProfileName>) -> anyhow::Result<Loaded> {
    load_for(g, profile, false)
}

/// [`load`] for a destroy (`destroy`), which reads no `[kubeflow]` manifests:
/// their paths need not exist.
pub fn load_for(g: &Global, profile: Option<ProfileName>, destroy: bool) -> anyhow::Result<Loaded> {
    let (file, invalid, state_dir) = read_file_reporting(g)?;
    let name = g.name.clone().or_else(|| file.name.clone());
    let recorded = name
        .as_deref()
        .and_then(|n| StateStore::open(&state_dir, n).ok())
        .and_then(|s| s.state().profile);
    if let (None, Some(rec), Some(f)) = (profile, recorded, file.profile) {
        if rec != f {
            tracing::warn!(
                "kfaws.toml says profile {f}, the deployment was applied with {rec}; using {rec} \
                 (pass --profile to change it)"
            );
        }
    }
    let overrides = Overrides {
        name: g.name.clone(),
        region: g.region.clone(),
        profile: profile.or(recorded),
        destroy,
    };
    let config = file
        .resolve_reporting(invalid, &overrides, env_region())
        .map_err(|e| match e {
            ConfigError::Missing { .. } => anyhow::anyhow!("{e}{}", missing_file(g)),
            e => e.into(),
        })?;
    Ok(Loaded { config, state_dir })
}

/// The SDK config for the deployment's region.
pub async fn aws(g: &Global, config: &Config) -> SdkConfig {
    kfaws::aws::sdk_config(&config.region, g.aws_profile.as_deref()).await
}

/// Establishes the caller identity (the credentials of `aws`, whose profile
/// is `--aws-profile`) and checks it against the state.
pub async fn check_identity(
    g: &Global,
    aws: &SdkConfig,
    config: &Config,
    state: &State,
) -> anyhow::Result<CallerIdentity> {
    let id = caller_identity(aws, g.aws_profile.as_deref()).await?;
    state.check_identity(&id.account, &config.region)?;
    tracing::debug!(account = %id.account, arn = %id.arn, "caller identity");
    Ok(id)
}

/// The profile's resources for config `c` and `sources` ([`read_sources`]
/// of it: strict YAML, removed APIs, EFS CSI rules), built with an
/// unconfigured SDK and the nil lineage: no AWS call is made (nor can be).
/// Refuses objects in two bundles; the addresses and dependencies are those
/// of the plan, which depend on the config alone. For checks that must come
/// before the first call: the manifests are read once, and a plan builds
/// its graph from the same sources once the profile is prepared.
///
/// [`read_sources`]: kfaws::profiles::read_sources
pub fn build_offline(
    c: &Config,
    sources: &kfaws::profiles::Sources,
) -> anyhow::Result<kfaws::profiles::Built> {
    let offline = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(c.region.clone()))
        .build();
    Ok(kfaws::profiles::build(
        c,
        &offline,
        uuid::Uuid::nil(),
        sources,
    )?)
}

/// `kfaws validate`.
pub fn validate(g: &Global, profile: Option<ProfileName>) -> anyhow::Result<u8> {
    let loaded = load(g, profile)?;
    let c = &loaded.config;
    let sources = kfaws::profiles::read_sources(c)?;
    let built = build_offline(c, &sources)?;
    outln!(
        "The configuration is valid: deployment {:?}, profile {}, region {}, Kubernetes {}.\n",
        c.name,
        c.profile,
        c.region,
        c.kubernetes_version
    )?;
    let bundles: Vec<String> = built
        .resources
        .iter()
        .filter(|r| r.kind() == kfaws::k8s::resource::KIND)
        .map(|r| r.address().to_string())
        .collect();
    outln!("Kubernetes bundles: {}.", bundles.join(", "))?;
    // Both are optional; say what leaving one out means.
    if c.kubeflow.manifests.is_none() {
        outln!(
            "Note: kubeflow.manifests is not set, so the Kubeflow platform is not installed \
             (set it to a manifests file or directory to add k8s.kubeflow)."
        )?;
    }
    if c.kubeflow.training_operator.is_none() {
        outln!(
            "Note: kubeflow.training_operator is not set, so no training operator is installed \
             and `kfaws train --runtime kubernetes` has no PyTorchJob kind to create (set it to add \
             k8s.training-operator)."
        )?;
    }
    outln!()?;
    let mut table = Table::new();
    table.load_style(UTF8_BORDERS_ONLY);
    table.set_header(["Name", "Kind", "From"]);
    for n in c.derived_names() {
        table.add_row([n.value, n.rule.what.to_string(), n.field]);
    }
    outln!("{table}")?;
    outln!(
        "State: {}",
        state_path(&loaded.state_dir, &c.name).display()
    )?;
    Ok(0)
}

/// Where the state of `name` lives.
pub fn state_path(state_dir: &Path, name: &str) -> PathBuf {
    kfaws::state::store::deployment_dir(state_dir, name).join("state.json")
}

/// The exec credential plugin the kubeconfig `kfaws kubeconfig` writes uses:
/// this binary's `eks get-token`, with the AWS profile chosen by
/// `--aws-profile` or `AWS_PROFILE`.
pub fn exec_auth(g: &Global) -> anyhow::Result<kfaws::k8s::kubeconfig::ExecAuth> {
    use anyhow::Context as _;
    use kfaws::k8s::kubeconfig::AwsProfile;
    Ok(kfaws::k8s::kubeconfig::ExecAuth {
        command: std::env::current_exe().context("cannot locate the kfaws executable")?,
        aws_profile: match &g.aws_profile {
            Some(p) => Some(AwsProfile::Flag(p.clone())),
            None => kfaws::aws::env_profile(&aws_types::os_shim_internal::Env::real())
                .map(AwsProfile::Env),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_dir_that_is_a_file_is_refused_naming_where_it_came_from() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_state_dir(dir.path(), "--state-dir").is_ok());
        assert!(check_state_dir(&dir.path().join("new"), "--state-dir").is_ok());
        let file = dir.path().join("passwd");
        std::fs::write(&file, "x").unwrap();
        let err = check_state_dir(&file, "state_dir (kfaws.toml)")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("state_dir (kfaws.toml) \"")
                && err.contains("passwd")
                && err.contains("is not a directory"),
            "{err}"
        );
    }
}
