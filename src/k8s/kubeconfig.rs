//! Writing the deployment's cluster into a kubeconfig, as `aws eks
//! update-kubeconfig` does, authenticating with `kfaws eks get-token`.
//!
//! Three entries are written or replaced by name, everything else in the
//! file is kept: a cluster (the EKS endpoint and CA), a user whose `exec`
//! runs this kfaws binary's `eks get-token` (Kubernetes docs, "client-go
//! credential plugins",
//! <https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-credential-plugins>),
//! and a context joining them, which becomes the current context. Names follow
//! `aws eks update-kubeconfig`: the cluster and the user are named by the
//! cluster ARN, the context too unless an alias is given
//! (<https://docs.aws.amazon.com/cli/latest/reference/eks/update-kubeconfig.html>).
//!
//! The file is read and written with kube's [`Kubeconfig`] types, which keep
//! fields they do not model (`other` maps) so other entries round-trip. What
//! does not survive a rewrite: YAML comments and formatting (the AWS CLI
//! and `kubectl config` rewrite the file the same way), and an exec user
//! without `provideClusterInfo` gains the explicit default
//! `provideClusterInfo: false`. Relative file paths in other entries stay
//! relative (the file is parsed with [`Kubeconfig::from_yaml`], not
//! `read_from`, which would rewrite them to absolute paths).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kube::config::{
    AuthInfo, Cluster, Context, ExecConfig, ExecInteractiveMode, Kubeconfig, NamedAuthInfo,
    NamedCluster, NamedContext,
};
use serde_json::Value;

use super::exec_credential::V1BETA1;

/// What a kubeconfig needs to reach and authenticate to an EKS cluster: the
/// outputs of `eks.cluster`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterAccess {
    /// The EKS cluster name (`x-k8s-aws-id` of its tokens).
    pub name: String,
    /// The cluster ARN, `arn:<partition>:eks:<region>:<account>:cluster/<name>`.
    pub arn: String,
    /// The API server's HTTPS endpoint.
    pub endpoint: String,
    /// Base64 of the PEM CA certificate (EKS `certificateAuthority.data`).
    pub certificate_authority_data: String,
    /// The cluster's region (signs its tokens).
    pub region: String,
}

/// The command the kubeconfig's user runs for a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecAuth {
    /// Absolute path of the kfaws binary.
    pub command: PathBuf,
    /// The AWS profile for the plugin, when the user chose one.
    pub aws_profile: Option<AwsProfile>,
}

/// How the user chose an AWS profile; the plugin gets it the same way, so
/// that its tokens are signed by the credentials kfaws itself used
/// ([`crate::aws::with_profile`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AwsProfile {
    /// `--aws-profile NAME`: the plugin's `--aws-profile` (that profile's
    /// credentials only).
    Flag(String),
    /// `AWS_PROFILE=NAME`: the plugin's `AWS_PROFILE` (the SDK's chain,
    /// environment keys first).
    Env(String),
}

/// Why the kubeconfig could not be made, read or written.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// The state lacks an `eks.cluster` output.
    #[error(
        "the state has no output eks.cluster.{0}: run `kfaws apply` until eks.cluster is created"
    )]
    MissingOutput(&'static str),
    /// An output is not a non-empty string.
    #[error("output eks.cluster.{0} is not a non-empty string")]
    BadOutput(&'static str),
    /// No region in the state nor in the cluster ARN.
    #[error(
        "the cluster's region is unknown: the state records none and the ARN {0:?} names none"
    )]
    NoRegion(String),
    /// Neither `--kubeconfig`, `KUBECONFIG` nor a home directory.
    #[error("no kubeconfig path: pass --kubeconfig, or set KUBECONFIG or HOME")]
    NoPath,
    /// The file exists but cannot be parsed.
    #[error("kubeconfig {path} cannot be parsed: {message}; fix or move it, or pass --kubeconfig")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// The kubeconfig cannot be serialized.
    #[error("cannot serialize the kubeconfig: {0}")]
    Serialize(String),
    /// Reading or writing failed.
    #[error("kubeconfig {path}: {source}")]
    Io {
        /// The file or its directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl ClusterAccess {
    /// Reads the `eks.cluster` outputs `name`, `arn`, `endpoint` and
    /// `certificate_authority_data`; the region is `region` (the state's),
    /// else the ARN's fourth field.
    ///
    /// # Errors
    /// [`KubeconfigError::MissingOutput`], [`KubeconfigError::BadOutput`],
    /// [`KubeconfigError::NoRegion`].
    pub fn from_outputs(
        outputs: &BTreeMap<String, Value>,
        region: Option<&str>,
    ) -> Result<Self, KubeconfigError> {
        let get = |key: &'static str| -> Result<String, KubeconfigError> {
            match outputs.get(key) {
                None | Some(Value::Null) => Err(KubeconfigError::MissingOutput(key)),
                Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
                Some(_) => Err(KubeconfigError::BadOutput(key)),
            }
        };
        let arn = get("arn")?;
        let region = match region {
            Some(r) => r.to_string(),
            None => arn
                .split(':')
                .nth(3)
                .filter(|r| !r.is_empty())
                .map(str::to_string)
                .ok_or_else(|| KubeconfigError::NoRegion(arn.clone()))?,
        };
        Ok(Self {
            name: get("name")?,
            endpoint: get("endpoint")?,
            certificate_authority_data: get("certificate_authority_data")?,
            arn,
            region,
        })
    }
}

/// The kubeconfig to write: `$KUBECONFIG`'s first path, else `~/.kube/config`
/// (where kubectl writes; Kubernetes docs, "Organizing Cluster Access Using
/// kubeconfig Files").
///
/// # Errors
/// [`KubeconfigError::NoPath`].
pub fn default_path() -> Result<PathBuf, KubeconfigError> {
    if let Some(value) = std::env::var_os("KUBECONFIG") {
        if let Some(first) = std::env::split_paths(&value).find(|p| !p.as_os_str().is_empty()) {
            return Ok(first);
        }
    }
    std::env::home_dir()
        .map(|h| h.join(".kube").join("config"))
        .ok_or(KubeconfigError::NoPath)
}

/// Reads `path`; a missing or empty file is an empty kubeconfig. Anything
/// but a regular file (through a symbolic link too) is refused before it is
/// opened: opening a FIFO would block until a writer came.
///
/// # Errors
/// [`KubeconfigError::Io`], [`KubeconfigError::Parse`].
pub fn read(path: &Path) -> Result<Kubeconfig, KubeconfigError> {
    crate::state::replace::ensure_regular(path).map_err(|source| KubeconfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Kubeconfig::default()),
        Err(source) => {
            return Err(KubeconfigError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    Kubeconfig::from_yaml(&text).map_err(|e| KubeconfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Adds or replaces the cluster, user and context for `access` in `config`
/// and makes the context current; returns the context name (`alias`, else
/// the cluster ARN).
pub fn merge(
    config: &mut Kubeconfig,
    access: &ClusterAccess,
    exec: &ExecAuth,
    alias: Option<&str>,
) -> String {
    let context_name = alias.unwrap_or(&access.arn).to_string();
    upsert(&mut config.clusters, named_cluster(access), |c| {
        c.name.as_str()
    });
    let mut args: Vec<String> = ["eks", "get-token", "--cluster-name", &access.name]
        .into_iter()
        .map(str::to_string)
        .collect();
    args.extend(["--region".to_string(), access.region.clone()]);
    let env = match &exec.aws_profile {
        Some(AwsProfile::Flag(p)) => {
            args.extend(["--aws-profile".to_string(), p.clone()]);
            None
        }
        Some(AwsProfile::Env(p)) => Some(vec![std::collections::HashMap::from([
            ("name".to_string(), "AWS_PROFILE".to_string()),
            ("value".to_string(), p.clone()),
        ])]),
        None => None,
    };
    upsert(
        &mut config.auth_infos,
        NamedAuthInfo {
            name: access.arn.clone(),
            auth_info: Some(AuthInfo {
                exec: Some(ExecConfig {
                    api_version: Some(V1BETA1.to_string()),
                    command: Some(exec.command.to_string_lossy().into_owned()),
                    args: Some(args),
                    env,
                    interactive_mode: Some(ExecInteractiveMode::Never),
                    ..ExecConfig::default()
                }),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        },
        |u| u.name.as_str(),
    );
    upsert(
        &mut config.contexts,
        NamedContext {
            name: context_name.clone(),
            context: Some(Context {
                cluster: access.arn.clone(),
                user: Some(access.arn.clone()),
                ..Context::default()
            }),
            ..NamedContext::default()
        },
        |c| c.name.as_str(),
    );
    config.current_context = Some(context_name.clone());
    config.kind.get_or_insert_with(|| "Config".to_string());
    config.api_version.get_or_insert_with(|| "v1".to_string());
    context_name
}

/// A kubeconfig of `access`'s cluster alone: its endpoint and CA, a current
/// context without a user. For a client whose requests carry their own
/// `Authorization` ([`crate::k8s::auth`]): kube-client, like client-go,
/// loads a context without a user as one without credentials.
pub fn without_user(access: &ClusterAccess) -> Kubeconfig {
    Kubeconfig {
        clusters: vec![named_cluster(access)],
        contexts: vec![NamedContext {
            name: access.arn.clone(),
            context: Some(Context {
                cluster: access.arn.clone(),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(access.arn.clone()),
        kind: Some("Config".to_string()),
        api_version: Some("v1".to_string()),
        ..Kubeconfig::default()
    }
}

/// The cluster entry of `access`, named by its ARN (as `aws eks update-kubeconfig`).
fn named_cluster(access: &ClusterAccess) -> NamedCluster {
    NamedCluster {
        name: access.arn.clone(),
        cluster: Some(Cluster {
            server: Some(access.endpoint.clone()),
            certificate_authority_data: Some(access.certificate_authority_data.clone()),
            ..Cluster::default()
        }),
        ..NamedCluster::default()
    }
}

/// Replaces the entry named like `entry` in place (dropping any duplicates
/// of that name), or appends it.
fn upsert<T>(list: &mut Vec<T>, entry: T, name: impl Fn(&T) -> &str) {
    let wanted = name(&entry).to_string();
    match list.iter().position(|e| name(e) == wanted) {
        Some(i) => {
            list[i] = entry;
            let mut seen = false;
            list.retain(|e| {
                let dup = name(e) == wanted;
                let keep = !dup || !seen;
                seen |= dup;
                keep
            });
        }
        None => list.push(entry),
    }
}

/// Writes `config` to `path` atomically (a temporary file in the same
/// directory, fsync, rename) with mode 0600, creating the directory (mode
/// 0700) if needed: the file can hold other users' credentials.
///
/// # Errors
/// [`KubeconfigError::Serialize`], [`KubeconfigError::Io`].
pub fn write(path: &Path, config: &Kubeconfig) -> Result<(), KubeconfigError> {
    let yaml =
        serde_saphyr::to_string(config).map_err(|e| KubeconfigError::Serialize(e.to_string()))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| KubeconfigError::Io { path: p, source }
    };
    if !dir.exists() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir).map_err(io(&dir))?;
    }
    // Mode 0600; a symbolic link (`~/.kube/config` kept in a dotfiles
    // repository) is followed and kept, as kubectl does.
    crate::state::replace::replace_file(path, yaml.as_bytes(), ".kubeconfig-")
        .map_err(|(p, source)| KubeconfigError::Io { path: p, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_fifo_is_refused_without_being_opened() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("config");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        // Opening it for reading would block this test forever.
        let err = read(&fifo).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    fn access() -> ClusterAccess {
        ClusterAccess::from_outputs(
            &BTreeMap::from([
                ("name".to_string(), json!("ml")),
                (
                    "arn".to_string(),
                    json!("arn:aws:eks:eu-west-1:111122223333:cluster/ml"),
                ),
                (
                    "endpoint".to_string(),
                    json!("https://ABC.gr7.eu-west-1.eks.amazonaws.com"),
                ),
                (
                    "certificate_authority_data".to_string(),
                    json!("LS0tLS1CRUdJTg=="),
                ),
            ]),
            None,
        )
        .unwrap()
    }

    fn exec() -> ExecAuth {
        ExecAuth {
            command: PathBuf::from("/opt/kfaws/bin/kfaws"),
            aws_profile: Some(AwsProfile::Env("ml-admin".into())),
        }
    }

    const EXISTING: &str = r#"apiVersion: v1
kind: Config
clusters:
- name: kind-dev
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: ca/kind.crt
    x-vendor-field: kept
users:
- name: kind-dev
  user:
    client-certificate: certs/dev.crt
    client-key-data: c2VjcmV0
contexts:
- name: kind-dev
  context:
    cluster: kind-dev
    user: kind-dev
    namespace: team-a
current-context: kind-dev
preferences: {}
"#;

    #[test]
    fn outputs_give_the_cluster_and_the_region_of_its_arn() {
        let a = access();
        assert_eq!(a.name, "ml");
        assert_eq!(a.region, "eu-west-1");
        let mut outputs = BTreeMap::from([(
            "arn".to_string(),
            json!("arn:aws:eks:eu-west-1:1:cluster/ml"),
        )]);
        let e = ClusterAccess::from_outputs(&outputs, Some("eu-west-1")).unwrap_err();
        assert!(e.to_string().contains("eks.cluster.name"), "{e}");
        outputs.insert("name".into(), json!(3));
        let e = ClusterAccess::from_outputs(&outputs, Some("eu-west-1")).unwrap_err();
        assert!(matches!(e, KubeconfigError::BadOutput("name")), "{e}");
    }

    #[test]
    fn merge_adds_our_entries_and_keeps_the_others() {
        let mut config = Kubeconfig::from_yaml(EXISTING).unwrap();
        let context = merge(&mut config, &access(), &exec(), None);
        let arn = "arn:aws:eks:eu-west-1:111122223333:cluster/ml";
        assert_eq!(context, arn);
        assert_eq!(config.current_context.as_deref(), Some(arn));

        let text = serde_saphyr::to_string(&config).unwrap();
        let back = Kubeconfig::from_yaml(&text).unwrap();
        let names = |v: Vec<&String>| v.into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(
            names(back.clusters.iter().map(|c| &c.name).collect()),
            ["kind-dev", arn]
        );
        assert_eq!(
            names(back.auth_infos.iter().map(|c| &c.name).collect()),
            ["kind-dev", arn]
        );
        assert_eq!(
            names(back.contexts.iter().map(|c| &c.name).collect()),
            ["kind-dev", arn]
        );

        let kind = back.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(
            kind.certificate_authority.as_deref(),
            Some("ca/kind.crt"),
            "relative path kept"
        );
        assert_eq!(kind.other["x-vendor-field"], json!("kept"));
        let kind_user = back.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(
            kind_user.client_certificate.as_deref(),
            Some("certs/dev.crt")
        );
        assert!(text.contains("client-key-data: c2VjcmV0"), "{text}");
        assert_eq!(
            back.contexts[0]
                .context
                .as_ref()
                .unwrap()
                .namespace
                .as_deref(),
            Some("team-a")
        );

        let ours = back.clusters[1].cluster.as_ref().unwrap();
        assert_eq!(
            ours.server.as_deref(),
            Some("https://ABC.gr7.eu-west-1.eks.amazonaws.com")
        );
        assert_eq!(
            ours.certificate_authority_data.as_deref(),
            Some("LS0tLS1CRUdJTg==")
        );
        let exec = back.auth_infos[1]
            .auth_info
            .as_ref()
            .unwrap()
            .exec
            .as_ref()
            .unwrap();
        assert_eq!(exec.api_version.as_deref(), Some(V1BETA1));
        assert_eq!(exec.command.as_deref(), Some("/opt/kfaws/bin/kfaws"));
        assert_eq!(
            exec.args.as_deref().unwrap(),
            [
                "eks",
                "get-token",
                "--cluster-name",
                "ml",
                "--region",
                "eu-west-1"
            ]
        );
        assert_eq!(exec.env.as_ref().unwrap()[0]["name"], "AWS_PROFILE");
        assert_eq!(exec.env.as_ref().unwrap()[0]["value"], "ml-admin");
        assert_eq!(exec.interactive_mode, Some(ExecInteractiveMode::Never));
        let ctx = back.contexts[1].context.as_ref().unwrap();
        assert_eq!(
            (ctx.cluster.as_str(), ctx.user.as_deref()),
            (arn, Some(arn))
        );
    }

    #[test]
    fn a_profile_chosen_with_the_flag_reaches_the_plugin_as_the_flag() {
        let mut config = Kubeconfig::default();
        let flag = ExecAuth {
            aws_profile: Some(AwsProfile::Flag("ml-admin".into())),
            ..exec()
        };
        merge(&mut config, &access(), &flag, None);
        let exec = config.auth_infos[0]
            .auth_info
            .as_ref()
            .and_then(|a| a.exec.as_ref())
            .unwrap();
        let args = exec.args.as_deref().unwrap();
        assert_eq!(args[args.len() - 2..], ["--aws-profile", "ml-admin"]);
        assert_eq!(exec.env, None, "no AWS_PROFILE beside the flag");
    }

    #[test]
    fn merging_again_replaces_our_entries_without_duplicates() {
        let mut config = Kubeconfig::from_yaml(EXISTING).unwrap();
        merge(&mut config, &access(), &exec(), None);
        let mut moved = access();
        moved.endpoint = "https://NEW.gr7.eu-west-1.eks.amazonaws.com".into();
        let no_profile = ExecAuth {
            aws_profile: None,
            ..exec()
        };
        merge(&mut config, &moved, &no_profile, None);
        assert_eq!(config.clusters.len(), 2);
        assert_eq!(config.auth_infos.len(), 2);
        assert_eq!(config.contexts.len(), 2);
        let ours = config.clusters[1].cluster.as_ref().unwrap();
        assert_eq!(
            ours.server.as_deref(),
            Some("https://NEW.gr7.eu-west-1.eks.amazonaws.com")
        );
        let exec = config.auth_infos[1]
            .auth_info
            .as_ref()
            .unwrap()
            .exec
            .as_ref()
            .unwrap();
        assert!(exec.env.is_none());
    }

    #[test]
    fn an_alias_names_the_context_only() {
        let mut config = Kubeconfig::default();
        assert_eq!(merge(&mut config, &access(), &exec(), Some("ml")), "ml");
        assert_eq!(config.contexts[0].name, "ml");
        assert_eq!(config.clusters[0].name, access().arn);
        assert_eq!(config.current_context.as_deref(), Some("ml"));
        assert_eq!(config.kind.as_deref(), Some("Config"));
    }

    #[test]
    fn upsert_collapses_duplicates_of_the_name() {
        let mut v = vec![("a", 1), ("b", 2), ("a", 3)];
        upsert(&mut v, ("a", 9), |e| e.0);
        assert_eq!(v, [("a", 9), ("b", 2)]);
    }

    #[test]
    fn write_is_private_and_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new").join("config");
        assert!(
            read(&path).unwrap().clusters.is_empty(),
            "missing file is empty"
        );
        let mut config = Kubeconfig::from_yaml(EXISTING).unwrap();
        merge(&mut config, &access(), &exec(), None);
        write(&path, &config).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(path.parent().unwrap()), 0o700);
        }
        let back = read(&path).unwrap();
        assert_eq!(back.contexts.len(), 2);
        std::fs::write(&path, "clusters: [").unwrap();
        let e = read(&path).unwrap_err();
        assert!(e.to_string().contains("cannot be parsed"), "{e}");
    }
}
