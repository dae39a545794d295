//! The deployment config: `kfaws.toml` merged with command-line overrides,
//! validated as a whole before anything talks to AWS.
//!
//! Parsing is strict: unknown keys, duplicate keys and wrong types are errors
//! with the line and column (the `toml` crate's spans), never ignored.
//! Validation then checks every value and every name the deployment will
//! create against the rule of the service that receives it ([`crate::naming`]).

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::naming::{self, DerivedName, NameError};

/// The config file read from the working directory unless `--config` says otherwise.
pub const CONFIG_FILE: &str = "kfaws.toml";

/// Deployment profiles: which Kubeflow-on-AWS variant to install. The names
/// are those of the Kubeflow on AWS distribution's deployment options.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, PartialOrd, Ord,
)]
#[serde(rename_all = "kebab-case")]
pub enum ProfileName {
    /// Kubeflow with EFS storage, the training operator and SageMaker access.
    Vanilla,
    /// Vanilla with RDS for metadata and S3 for pipeline artifacts (not yet available).
    RdsS3,
    /// Vanilla behind Cognito authentication (not yet available).
    Cognito,
    /// Cognito and RDS/S3 together (not yet available).
    CognitoRdsS3,
}

impl ProfileName {
    /// The name as written in config and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Vanilla => "vanilla",
            Self::RdsS3 => "rds-s3",
            Self::Cognito => "cognito",
            Self::CognitoRdsS3 => "cognito-rds-s3",
        }
    }

    /// Whether this build of kfaws can deploy the profile.
    pub fn is_available(self) -> bool {
        matches!(self, Self::Vanilla)
    }
}

impl fmt::Display for ProfileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Policy attached to the SageMaker execution role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SageMakerRolePolicy {
    /// `AmazonSageMakerFullAccess` and `AmazonS3FullAccess`, as the Kubeflow on AWS guides do:
    /// every bucket of the account and every SageMaker action, for jobs that read data
    /// outside the artifact bucket.
    Full,
    /// The default (least privilege): only the artifact bucket and what an execution role
    /// needs: ECR pulls, CloudWatch Logs and metrics, VPC network interfaces (SageMaker
    /// Developer Guide, "CreateTrainingJob API: Execution Role Permissions"); no SageMaker API
    /// action. `kfaws train --runtime sagemaker` uploads its data to the artifact bucket.
    #[default]
    Scoped,
}

/// One EKS managed node group; a field left out takes its default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeGroup {
    /// EC2 instance type, e.g. `m5.xlarge`.
    pub instance_type: String,
    /// Minimum number of nodes (EKS `scalingConfig.minSize`).
    pub min_size: u32,
    /// Desired number of nodes (EKS `scalingConfig.desiredSize`).
    pub desired_size: u32,
    /// Maximum number of nodes (EKS `scalingConfig.maxSize`, at least 1).
    pub max_size: u32,
    /// Root volume size in GiB (encrypted).
    #[serde(default = "default_disk_size")]
    pub disk_size_gib: u32,
}

fn default_disk_size() -> u32 {
    50
}

impl Default for NodeGroup {
    fn default() -> Self {
        Self {
            instance_type: "m5.xlarge".into(),
            min_size: 1,
            desired_size: 2,
            max_size: 4,
            disk_size_gib: default_disk_size(),
        }
    }
}

/// One EKS access entry (`[access_entries.<name>]`): an IAM principal admitted
/// to the cluster's Kubernetes API with one EKS access policy (Amazon EKS
/// User Guide, "Grant IAM users access to Kubernetes with EKS access
/// entries"). Without one, only the identity that created the cluster can
/// use it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessEntry {
    /// The IAM role or user, `arn:<partition>:iam::<account>:role/<path><name>`
    /// or `...:user/...` (a role may have a path; another account is fine:
    /// EKS User Guide, "Create access entries"). One entry per principal.
    pub principal_arn: String,
    /// The access policy: `cluster-admin`, `admin`, `edit` or `view` (EKS's
    /// `AmazonEKSClusterAdminPolicy`, `AmazonEKSAdminPolicy`,
    /// `AmazonEKSEditPolicy`, `AmazonEKSViewPolicy`, which mirror the
    /// Kubernetes user-facing roles: EKS User Guide, "Review access policy
    /// permissions").
    pub policy: AccessPolicy,
    /// The namespaces the policy applies in; left out: the whole cluster.
    /// Each a DNS-1123 label, or a prefix ending in `*` (EKS
    /// `AccessScope.namespaces`).
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
}

/// An EKS access policy ([`AccessEntry::policy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessPolicy {
    /// `AmazonEKSClusterAdminPolicy`: everything (Kubernetes `cluster-admin`).
    ClusterAdmin,
    /// `AmazonEKSAdminPolicy`: most resources (Kubernetes `admin`).
    Admin,
    /// `AmazonEKSEditPolicy`: edit most resources (Kubernetes `edit`).
    Edit,
    /// `AmazonEKSViewPolicy`: read most resources (Kubernetes `view`).
    View,
}

impl AccessPolicy {
    /// The policy's name in EKS.
    pub fn eks_name(self) -> &'static str {
        match self {
            Self::ClusterAdmin => "AmazonEKSClusterAdminPolicy",
            Self::Admin => "AmazonEKSAdminPolicy",
            Self::Edit => "AmazonEKSEditPolicy",
            Self::View => "AmazonEKSViewPolicy",
        }
    }

    /// The policy's ARN in `partition`:
    /// `arn:<partition>:eks::aws:cluster-access-policy/<name>` (EKS API
    /// Reference, ListAccessPolicies).
    pub fn arn(self, partition: &str) -> String {
        format!(
            "arn:{partition}:eks::aws:cluster-access-policy/{}",
            self.eks_name()
        )
    }
}

/// How the EKS cluster authenticates IAM principals (`options.authentication_mode`; EKS API
/// Reference, `CreateAccessConfigRequest` / `UpdateAccessConfigRequest` `authenticationMode`).
///
/// EKS changes a cluster's mode one way only, `CONFIG_MAP` -> `API_AND_CONFIG_MAP` -> `API`,
/// and never back (Amazon EKS User Guide, "Change authentication mode to use access
/// entries"), so a cluster once in `API` stays there whatever this option later says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuthenticationMode {
    /// The default: EKS `API_AND_CONFIG_MAP`, both EKS access entries and the `aws-auth`
    /// ConfigMap admit principals. A cluster in `CONFIG_MAP` mode is switched to it in
    /// place; one already in `API` (stricter: set outside kfaws, or by an earlier `api`) is
    /// left so.
    #[default]
    ApiAndConfigMap,
    /// EKS `API`: access entries alone admit principals and the `aws-auth` ConfigMap is
    /// ignored, the mode the EKS Best Practices Guide recommends (Security, "Identity and
    /// Access Management"). A cluster in another mode is switched to it in place (from
    /// `CONFIG_MAP` through `API_AND_CONFIG_MAP`); one-way.
    Api,
}

/// Deployment options; every key has a default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// IPv4 CIDR of the VPC.
    pub vpc_cidr: String,
    /// Name of the SageMaker execution role.
    pub sagemaker_role_name: String,
    /// What the SageMaker execution role may do. Unset: what the deployment's state records
    /// (`stack.iam`'s `SageMakerRolePolicy`, so a deployment applied while `full` was the
    /// default keeps it), else [`SageMakerRolePolicy::Scoped`]; filled in before planning
    /// ([`crate::profiles`]).
    pub sagemaker_role_policy: Option<SageMakerRolePolicy>,
    /// Name of the S3 artifact bucket; default `kfaws-<name>-<region>-artifacts`.
    pub artifact_bucket: Option<String>,
    /// The Kubeflow profile namespace users work in.
    pub user_namespace: String,
    /// The two Availability Zones of the network (e.g. `["us-east-1a",
    /// "us-east-1b"]`). Unset: the zones recorded for the deployment, else
    /// the first two, by name, that offer every node group's instance type
    /// ([`crate::aws::zones`]), filled in before planning.
    pub availability_zones: Option<Vec<String>>,
    /// Managed policies attached to the node role besides
    /// [`EKS_NODE_POLICIES`], as full ARNs (e.g.
    /// `arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore` for Session
    /// Manager on the nodes). The node role holds exactly these and EKS's
    /// three: any other policy attached outside kfaws is drift and apply
    /// detaches it. At most [`MAX_EXTRA_NODE_POLICIES`].
    pub node_role_policies: Vec<String>,
    /// The EKS cluster's authentication mode ([`AuthenticationMode`]): `api-and-config-map`
    /// (the default) or `api`. A deployment whose cluster kfaws switched to `API` keeps it
    /// when this is set back or left out (filled in before planning, [`crate::profiles`]):
    /// EKS cannot switch back.
    pub authentication_mode: AuthenticationMode,
}

/// The purposes of the IAM roles a deployment names itself
/// ([`Config::role_name`]): the EKS cluster and node roles and the IRSA roles.
pub const DERIVED_ROLES: [&str; 4] = [
    "eks-cluster",
    "eks-node",
    "irsa-efs-csi-controller",
    "irsa-pipelines",
];

/// The AWS managed policies every EKS node role holds (Amazon EKS User
/// Guide, "Amazon EKS node IAM role").
pub const EKS_NODE_POLICIES: [&str; 3] = [
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
];

/// How many policies `options.node_role_policies` may add: IAM attaches at
/// most 10 managed policies to a role by default (IAM User Guide, "IAM and
/// AWS STS quotas": managed policies attached to an IAM role), and
/// [`EKS_NODE_POLICIES`] take 3.
pub const MAX_EXTRA_NODE_POLICIES: usize = 7;

impl Default for Options {
    fn default() -> Self {
        Self {
            vpc_cidr: "10.0.0.0/16".into(),
            sagemaker_role_name: "sagemakerrole".into(),
            sagemaker_role_policy: None,
            artifact_bucket: None,
            user_namespace: "kubeflow-user-example-com".into(),
            availability_zones: None,
            node_role_policies: Vec::new(),
            authentication_mode: AuthenticationMode::default(),
        }
    }
}

/// The Kubeflow manifests (`[kubeflow]`): a pinned Kubeflow release the user
/// builds (`kustomize build` of kubeflow/manifests) — kfaws ships no copy.
/// Relative paths are relative to the config file. Each one left out is not
/// installed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Kubeflow {
    /// The Kubeflow platform: a YAML file (one multi-document stream) or a
    /// directory of `*.yaml`/`*.yml` files, applied as `k8s.kubeflow`.
    pub manifests: Option<PathBuf>,
    /// The training operator's CRDs and controller from the same release
    /// (`apps/training-operator`), applied as `k8s.training-operator`, after
    /// which `kubeflow.org/v1` `PyTorchJob` must be served.
    pub training_operator: Option<PathBuf>,
}

impl Kubeflow {
    /// Makes relative paths relative to `base` (the config file's directory).
    fn rebase(&mut self, base: &Path) {
        for p in [&mut self.manifests, &mut self.training_operator]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }
}

/// `kfaws.toml` as written; every key optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Deployment name (also the EKS cluster name).
    pub name: Option<String>,
    /// AWS Region.
    pub region: Option<String>,
    /// Deployment profile.
    pub profile: Option<ProfileName>,
    /// Kubernetes version of the EKS cluster, `1.NN`.
    pub kubernetes_version: Option<String>,
    /// Directory holding the state of each deployment.
    pub state_dir: Option<PathBuf>,
    /// Node groups by name; default one group `cpu`.
    pub node_groups: Option<BTreeMap<String, NodeGroup>>,
    /// EKS access entries by name; default none.
    #[serde(default)]
    pub access_entries: BTreeMap<String, AccessEntry>,
    /// Options.
    #[serde(default)]
    pub options: Options,
    /// The Kubeflow manifests.
    #[serde(default)]
    pub kubeflow: Kubeflow,
    /// Where `kfaws train` runs when `--runtime` is not given: `local`,
    /// `kubernetes` or `sagemaker` (any other value is an error that lists
    /// these, case C18: [`ConfigFile::parse_reporting`]).
    pub training_runtime: Option<crate::train::Runtime>,
}

/// Values given on the command line; they win over the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--name`.
    pub name: Option<String>,
    /// `--region`.
    pub region: Option<String>,
    /// `--profile`.
    pub profile: Option<ProfileName>,
    /// For a destroy, which reads no `[kubeflow]` manifests: their paths
    /// need not exist (a destroy still runs once the files are gone).
    pub destroy: bool,
}

/// A complete, validated deployment config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Deployment name; also the EKS cluster name.
    pub name: String,
    /// AWS Region.
    pub region: String,
    /// Deployment profile.
    pub profile: ProfileName,
    /// Kubernetes version, `1.NN`.
    pub kubernetes_version: String,
    /// Node groups by name.
    pub node_groups: BTreeMap<String, NodeGroup>,
    /// EKS access entries by name.
    #[serde(default)]
    pub access_entries: BTreeMap<String, AccessEntry>,
    /// Options.
    pub options: Options,
    /// The Kubeflow manifests.
    #[serde(default)]
    pub kubeflow: Kubeflow,
}

/// The Kubernetes version used when the config names none: the newest
/// version in EKS standard support when this kfaws was released (source:
/// Amazon EKS User Guide, "Understand the Kubernetes version lifecycle on EKS").
pub const DEFAULT_KUBERNETES_VERSION: &str = "1.33";

/// The node group made when kfaws.toml has no `[node_groups]` table: one
/// group of this name with [`NodeGroup::default`]'s settings. A
/// `[node_groups]` table replaces it entirely.
pub const DEFAULT_NODE_GROUP: &str = "cpu";

/// Kubernetes minor versions EKS offers in standard or extended support
/// when this kfaws was released (Amazon EKS User Guide, "Understand the
/// Kubernetes version lifecycle on EKS").
pub const SUPPORTED_MINORS: std::ops::RangeInclusive<u32> = 29..=36;

/// Namespaces a user namespace may not be: Kubernetes' own and the
/// Kubeflow components' (destroy deletes the user namespace).
pub const RESERVED_NAMESPACES: &[&str] = &[
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "kubeflow",
    "istio-system",
    "cert-manager",
    "auth",
    "knative-serving",
];

/// Why a config cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not match the schema; the message
    /// carries the line and column.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The `toml` crate's message, with line, column and the offending text.
        message: String,
    },
    /// A required value is missing from both the file and the command line.
    #[error("{field} is not set: {hint}")]
    Missing {
        /// The field.
        field: &'static str,
        /// How to set it.
        hint: &'static str,
    },
    /// A value breaks a rule.
    #[error("{field} {value:?} is invalid: {problem}")]
    Invalid {
        /// The field, as a dotted path.
        field: String,
        /// The value.
        value: String,
        /// What is wrong and which rule says so.
        problem: String,
    },
    /// One or more derived names break their service's rule.
    #[error("{}", render_names(.0))]
    Names(Vec<NameError>),
    /// More than one value breaks a rule: every one of them, in the order
    /// the fields are checked, so that one run shows all there is to fix.
    #[error("{}", render_several(.0))]
    Several(Vec<ConfigError>),
}

/// `N problems in the config:` and one `\n  - problem` line per problem
/// (per derived name of [`ConfigError::Names`]).
fn render_several(errors: &[ConfigError]) -> String {
    let lines: Vec<String> = errors
        .iter()
        .flat_map(|e| match e {
            ConfigError::Names(names) => name_lines(names),
            e => e.to_string().lines().map(str::to_string).collect(),
        })
        .collect();
    list_problems(&lines)
}

/// `N problems in the config:` and one `\n  - line` per line.
fn list_problems(lines: &[String]) -> String {
    let mut out = format!("{} problems in the config:", lines.len());
    for line in lines {
        out.push_str("\n  - ");
        out.push_str(line);
    }
    out
}

/// The broken names: one line, or `N problems in the config:` and one line
/// each ([`name_lines`]).
fn render_names(errors: &[NameError]) -> String {
    match name_lines(errors).as_slice() {
        [one] => one.clone(),
        lines => list_problems(lines),
    }
}

/// One line per broken name; names that break the same rule for the same
/// reason (the four stack names of an underscored deployment name) share a
/// line that lists them all.
fn name_lines(errors: &[NameError]) -> Vec<String> {
    let mut groups: Vec<(&NameError, Vec<&str>)> = Vec::new();
    for e in errors {
        let same = |g: &NameError| {
            g.field == e.field && g.what == e.what && g.problem == e.problem && g.value != g.input
        };
        match groups
            .iter_mut()
            .find(|(g, _)| same(g) && e.value != e.input)
        {
            Some((_, values)) => values.push(&e.value),
            None => groups.push((e, vec![&e.value])),
        }
    }
    groups
        .into_iter()
        .map(|(e, values)| {
            if values.len() == 1 {
                return e.to_string();
            }
            let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
            format!(
                "{} {:?} is invalid: the derived {}s {} break the rule {} ({}); {}",
                e.field,
                e.input,
                e.what,
                quoted.join(", "),
                e.rule,
                e.reference,
                e.problem
            )
        })
        .collect()
}

impl ConfigFile {
    /// Parses `kfaws.toml` text strictly.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] with line and column for syntax errors,
    /// duplicate keys, unknown keys and wrong types.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let (file, invalid) = Self::parse_reporting(path, text)?;
        combine(invalid, Ok(())).map(|()| file)
    }

    /// [`ConfigFile::parse`], except that a fixed-choice field whose value is
    /// not one of its choices (`profile`, `training_runtime`,
    /// `options.sagemaker_role_policy`, `options.authentication_mode`, an
    /// access entry's `policy`) is not a
    /// parse error: it comes back as a [`ConfigError::Invalid`] naming the
    /// field and the choices, beside the file read without it (an access
    /// entry's `policy`, which is required, reads as `view`), so that
    /// [`ConfigFile::resolve_reporting`] reports it with the config's other
    /// problems in one run. The file is for that alone while the list is not
    /// empty.
    ///
    /// # Errors
    /// As [`ConfigFile::parse`] for any other problem; when the file has
    /// another one beside bad choices, the parser's first error, with its
    /// line.
    pub fn parse_reporting(
        path: &Path,
        text: &str,
    ) -> Result<(Self, Vec<ConfigError>), ConfigError> {
        let parse_error = |e: toml::de::Error| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        };
        let (mut file, invalid) = match toml::from_str::<Self>(text) {
            Ok(file) => (file, Vec::new()),
            Err(strict) => {
                let Ok(mut table) = toml::from_str::<toml::Table>(text) else {
                    return Err(parse_error(strict));
                };
                let invalid = take_bad_choices(&mut table);
                if invalid.is_empty() {
                    return Err(parse_error(strict));
                }
                match toml::Value::Table(table).try_into::<Self>() {
                    Ok(file) => (file, invalid),
                    Err(_) => return Err(parse_error(strict)),
                }
            }
        };
        file.kubeflow.rebase(path.parent().unwrap_or(Path::new("")));
        match file.refuse_empty_state_dir() {
            Ok(file) => Ok((file, invalid)),
            Err(e) => Err(combine(invalid, Err(e)).expect_err("one problem at least")),
        }
    }

    /// Reads and parses a config file; a missing file at the default path is
    /// an empty config, a missing file named explicitly is an error.
    ///
    /// # Errors
    /// [`ConfigError::Read`] or [`ConfigError::Parse`].
    pub fn load(path: &Path, explicit: bool) -> Result<Self, ConfigError> {
        let (file, invalid) = Self::load_reporting(path, explicit)?;
        combine(invalid, Ok(())).map(|()| file)
    }

    /// [`ConfigFile::load`] that returns bad fixed-choice values beside the
    /// file, as [`ConfigFile::parse_reporting`].
    ///
    /// # Errors
    /// As [`ConfigFile::load`].
    pub fn load_reporting(
        path: &Path,
        explicit: bool,
    ) -> Result<(Self, Vec<ConfigError>), ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse_reporting(path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                Ok((Self::default(), Vec::new()))
            }
            Err(source) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Reads only `name` and `state_dir` from a config file whose other keys
    /// may break the schema: for commands that only read a deployment's
    /// state (`state list`, `output`, `kubeconfig`), which must keep working
    /// while an edit elsewhere in the file is unfinished. The file must still
    /// be TOML, and those two keys strings; a missing file is as in
    /// [`ConfigFile::load`].
    ///
    /// # Errors
    /// [`ConfigError::Read`], [`ConfigError::Parse`] for a file that is not
    /// TOML, [`ConfigError::Invalid`] for a `name` or `state_dir` that is not
    /// a string or an empty `state_dir`.
    pub fn load_location(path: &Path, explicit: bool) -> Result<Self, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                return Ok(Self::default())
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let string = |field: &str| match table.get(field) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(ConfigError::Invalid {
                field: field.into(),
                value: other.to_string(),
                problem: format!("must be a string, not {}", other.type_str()),
            }),
        };
        let file = Self {
            name: string("name")?,
            state_dir: string("state_dir")?.map(PathBuf::from),
            ..Self::default()
        };
        file.refuse_empty_state_dir()
    }

    /// `state_dir = ""` names no directory.
    fn refuse_empty_state_dir(self) -> Result<Self, ConfigError> {
        if self
            .state_dir
            .as_ref()
            .is_some_and(|d| d.as_os_str().is_empty())
        {
            return Err(ConfigError::Invalid {
                field: "state_dir".into(),
                value: String::new(),
                problem: "must name a directory (leave it out for .kfaws)".into(),
            });
        }
        Ok(self)
    }

    /// The state directory named in the file, or `.kfaws` beside it.
    pub fn state_dir(&self, config_path: &Path) -> PathBuf {
        let base = config_path.parent().unwrap_or(Path::new("."));
        match &self.state_dir {
            Some(dir) if dir.is_absolute() => dir.clone(),
            Some(dir) => base.join(dir),
            None => base.join(".kfaws"),
        }
    }

    /// Merges the file with command-line overrides and validates the result.
    /// `env_region` is the region from `AWS_REGION`/`AWS_DEFAULT_REGION`,
    /// used when neither the flag nor the file sets one.
    ///
    /// # Errors
    /// [`ConfigError::Missing`] for a missing name or region ([`ConfigError::Several`] when
    /// both are),
    /// [`ConfigError::Invalid`] for a bad value, [`ConfigError::Names`] with
    /// every derived name that breaks its rule.
    pub fn resolve(
        self,
        overrides: &Overrides,
        env_region: Option<String>,
    ) -> Result<Config, ConfigError> {
        self.resolve_reporting(Vec::new(), overrides, env_region)
    }

    /// [`ConfigFile::resolve`] that reports `earlier` (the bad fixed-choice
    /// values of [`ConfigFile::parse_reporting`]) first among the config's
    /// problems, as one [`ConfigError::Several`] with them all.
    ///
    /// # Errors
    /// As [`ConfigFile::resolve`]; a missing name or region is among the
    /// others when `earlier` is not empty.
    pub fn resolve_reporting(
        self,
        mut earlier: Vec<ConfigError>,
        overrides: &Overrides,
        env_region: Option<String>,
    ) -> Result<Config, ConfigError> {
        let name = overrides.name.clone().or(self.name);
        let region = overrides.region.clone().or(self.region).or(env_region);
        let (name, region) = match (name, region) {
            (Some(name), Some(region)) => (name, region),
            (name, region) => {
                if name.is_none() {
                    earlier.push(ConfigError::Missing {
                        field: "name",
                        hint: "pass --name or set `name` in kfaws.toml",
                    });
                }
                if region.is_none() {
                    earlier.push(ConfigError::Missing {
                        field: "region",
                        hint: "pass --region, set `region` in kfaws.toml, or export AWS_REGION",
                    });
                }
                return Err(combine(earlier, Ok(())).expect_err("a problem was pushed"));
            }
        };
        let config = Config {
            name,
            region,
            profile: overrides
                .profile
                .or(self.profile)
                .unwrap_or(ProfileName::Vanilla),
            kubernetes_version: self
                .kubernetes_version
                .unwrap_or_else(|| DEFAULT_KUBERNETES_VERSION.to_string()),
            node_groups: self.node_groups.unwrap_or_else(|| {
                BTreeMap::from([(DEFAULT_NODE_GROUP.to_string(), NodeGroup::default())])
            }),
            access_entries: self.access_entries,
            options: self.options,
            kubeflow: self.kubeflow,
        };
        combine(earlier, config.check(!overrides.destroy))?;
        Ok(config)
    }
}

/// `earlier` and `result`'s problems as one error: none is `Ok`, one is
/// itself, more are [`ConfigError::Several`] (a `Several` in `result`
/// flattened into it).
fn combine(
    mut earlier: Vec<ConfigError>,
    result: Result<(), ConfigError>,
) -> Result<(), ConfigError> {
    match result {
        Ok(()) => {}
        Err(ConfigError::Several(more)) => earlier.extend(more),
        Err(e) => earlier.push(e),
    }
    match earlier.len() {
        0 => Ok(()),
        1 => Err(earlier.remove(0)),
        _ => Err(ConfigError::Several(earlier)),
    }
}

/// Checks a fixed-choice value by deserializing it as `T`; the error is
/// serde's, which lists the choices (`unknown variant `k8s`, expected one of
/// `local`, `kubernetes`, `sagemaker``).
fn choice<T: serde::de::DeserializeOwned>(value: &toml::Value) -> Result<(), String> {
    T::deserialize(value.clone())
        .map(drop)
        .map_err(|e| e.to_string().trim_end().to_string())
}

/// Takes each fixed-choice field whose value is not one of its choices out of
/// `table` (a TOML document as parsed), one [`ConfigError::Invalid`] each, in
/// the order `profile`, `options.sagemaker_role_policy`,
/// `options.authentication_mode`, `access_entries.<name>.policy`,
/// `training_runtime` (a removed option takes its default). An access entry's
/// `policy` is required: it is replaced by `view` rather than removed, so the
/// entry's other fields are still checked.
fn take_bad_choices(table: &mut toml::Table) -> Vec<ConfigError> {
    type Check = fn(&toml::Value) -> Result<(), String>;
    let mut errors = Vec::new();
    let mut take =
        |t: &mut toml::Table, key: &str, field: String, check: Check, keep: Option<&str>| {
            // A value of another type is the parser's error, with its line and column.
            let Some(value @ toml::Value::String(s)) = t.get(key) else {
                return;
            };
            let Err(problem) = check(value) else { return };
            errors.push(ConfigError::Invalid {
                field,
                value: s.clone(),
                problem,
            });
            match keep {
                Some(placeholder) => {
                    t.insert(key.into(), toml::Value::String(placeholder.into()));
                }
                None => {
                    t.remove(key);
                }
            }
        };
    take(
        table,
        "profile",
        "profile".into(),
        choice::<ProfileName>,
        None,
    );
    if let Some(toml::Value::Table(options)) = table.get_mut("options") {
        take(
            options,
            "sagemaker_role_policy",
            "options.sagemaker_role_policy".into(),
            choice::<SageMakerRolePolicy>,
            None,
        );
        take(
            options,
            "authentication_mode",
            "options.authentication_mode".into(),
            choice::<AuthenticationMode>,
            None,
        );
    }
    if let Some(toml::Value::Table(entries)) = table.get_mut("access_entries") {
        for (name, entry) in entries.iter_mut() {
            if let toml::Value::Table(entry) = entry {
                take(
                    entry,
                    "policy",
                    format!("access_entries.{name}.policy"),
                    choice::<AccessPolicy>,
                    Some("view"),
                );
            }
        }
    }
    take(
        table,
        "training_runtime",
        "training_runtime".into(),
        choice::<crate::train::Runtime>,
        None,
    );
    errors
}

impl Config {
    /// Name of the CloudFormation stack for `part` (`network`, `iam`, ...).
    pub fn stack_name(&self, part: &str) -> String {
        format!("kfaws-{}-{part}", self.name)
    }

    /// Name of an IAM role kfaws creates for `purpose` (`eks-cluster`, ...).
    /// IAM names are global to the account, so the region is part of it.
    pub fn role_name(&self, purpose: &str) -> String {
        format!("kfaws-{}-{}-{purpose}", self.name, self.region)
    }

    /// Name of the EKS node group for config group `group`.
    pub fn nodegroup_name(&self, group: &str) -> String {
        format!("{}-{group}", self.name)
    }

    /// The artifact bucket's name.
    pub fn bucket_name(&self) -> String {
        self.options
            .artifact_bucket
            .clone()
            .unwrap_or_else(|| format!("kfaws-{}-{}-artifacts", self.name, self.region))
    }

    /// The name of the ApplySet parent object that inventories our
    /// Kubernetes objects.
    pub fn applyset_name(&self) -> String {
        format!("kfaws-{}", self.name)
    }

    /// Every name the deployment will create, with its field and rule.
    pub fn derived_names(&self) -> Vec<DerivedName> {
        let named = |field: &str, input: &str, value: String, rule| DerivedName {
            field: field.to_string(),
            input: input.to_string(),
            value,
            rule,
        };
        let n = self.name.as_str();
        let mut names = vec![named("name", n, n.to_string(), &naming::EKS_CLUSTER)];
        for part in ["network", "iam", "irsa", "storage", "efs"] {
            names.push(named("name", n, self.stack_name(part), &naming::CFN_STACK));
        }
        for purpose in [
            "eks-cluster",
            "eks-node",
            "irsa-efs-csi-controller",
            "irsa-pipelines",
        ] {
            names.push(named("name", n, self.role_name(purpose), &naming::IAM_ROLE));
        }
        // `{name}-{group}`: the group key is blamed unless `name` alone leaves
        // it no room (or is empty), which only a shorter name can fix.
        let room = naming::EKS_NODEGROUP
            .max_len
            .saturating_sub(n.chars().count() + 1);
        for group in self.node_groups.keys() {
            let (field, input) = match room == 0 || n.is_empty() {
                true => ("name".to_string(), n),
                false => (format!("node_groups.{group}"), group.as_str()),
            };
            names.push(named(
                &field,
                input,
                self.nodegroup_name(group),
                &naming::EKS_NODEGROUP,
            ));
        }
        let role = &self.options.sagemaker_role_name;
        names.push(named(
            "options.sagemaker_role_name",
            role,
            role.clone(),
            &naming::IAM_ROLE,
        ));
        let bucket_field = if self.options.artifact_bucket.is_some() {
            ("options.artifact_bucket", self.bucket_name())
        } else {
            ("name", n.to_string())
        };
        names.push(named(
            bucket_field.0,
            &bucket_field.1,
            self.bucket_name(),
            &naming::S3_BUCKET,
        ));
        let ns = &self.options.user_namespace;
        names.push(named(
            "options.user_namespace",
            ns,
            ns.clone(),
            &naming::DNS1123_LABEL,
        ));
        names.push(named(
            "name",
            n,
            self.applyset_name(),
            &naming::DNS1123_SUBDOMAIN,
        ));
        names
    }

    /// Validates values and derived names; reports every broken name at once.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a bad value, [`ConfigError::Names`]
    /// listing every derived name that breaks a rule, or
    /// [`ConfigError::Several`] with each of those when there is more than
    /// one (in an unknown region, only the derived names that do not embed it).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check(true)
    }

    /// [`Config::validate`], checking that the `[kubeflow]` paths exist only
    /// with `sources` (a destroy reads none of them).
    ///
    /// # Errors
    /// As [`Config::validate`].
    pub fn check(&self, sources: bool) -> Result<(), ConfigError> {
        let invalid = |field: &str, value: &str, problem: String| ConfigError::Invalid {
            field: field.to_string(),
            value: value.to_string(),
            problem,
        };
        let mut errors = Vec::new();
        if !self.profile.is_available() {
            errors.push(invalid(
                "profile",
                self.profile.as_str(),
                "is not yet available in this kfaws; available: vanilla (rds-s3, cognito and \
                 cognito-rds-s3 are planned)"
                    .into(),
            ));
        }
        let region_known = naming::KNOWN_REGIONS.contains(&self.region.as_str());
        if !region_known {
            errors.push(invalid(
                "region",
                &self.region,
                "not an AWS Region kfaws knows (AWS General Reference, \"AWS Regions\"); \
                 e.g. us-east-1, eu-west-1, ap-southeast-1 (the names that embed the region, \
                 availability zones and policy ARNs are checked once it is known)"
                    .into(),
            ));
        }
        let kv = &self.kubernetes_version;
        // EKS writes versions as "1.33": digits, no sign, no leading zero
        // (a "1.033" would reach CreateCluster and compare unequal to "1.33").
        let minor = kv
            .strip_prefix("1.")
            .filter(|m| {
                !m.is_empty()
                    && m.bytes().all(|b| b.is_ascii_digit())
                    && (m.len() == 1 || !m.starts_with('0'))
            })
            .and_then(|m| m.parse::<u32>().ok());
        match minor {
            None => errors.push(invalid(
                "kubernetes_version",
                kv,
                "must be MAJOR.MINOR such as \"1.33\" (EKS CreateCluster, version)".into(),
            )),
            Some(m) if !SUPPORTED_MINORS.contains(&m) => errors.push(invalid(
                "kubernetes_version",
                kv,
                format!(
                    "EKS offers Kubernetes 1.{}..=1.{} (standard and extended support, \
                         Amazon EKS User Guide, \"Kubernetes version lifecycle\")",
                    SUPPORTED_MINORS.start(),
                    SUPPORTED_MINORS.end()
                ),
            )),
            Some(_) => {}
        }
        if let Err(p) = check_cidr(&self.options.vpc_cidr) {
            errors.push(invalid("options.vpc_cidr", &self.options.vpc_cidr, p));
        }
        // Zones, policy ARNs (partition) and derived names follow the region.
        if region_known {
            if let Some(zones) = &self.options.availability_zones {
                if let Err(p) = check_zones(zones, &self.region) {
                    errors.push(invalid("options.availability_zones", &zones.join(", "), p));
                }
            }
            if let Err(p) = check_policy_arns(&self.options.node_role_policies, &self.region) {
                errors.push(invalid(
                    "options.node_role_policies",
                    &self.options.node_role_policies.join(", "),
                    p,
                ));
            }
        }
        if self.node_groups.is_empty() {
            errors.push(invalid(
                "node_groups",
                "{}",
                "at least one node group is required".into(),
            ));
        }
        // IAM role names are unique in the account, case-insensitively (IAM
        // User Guide, "IAM identifiers": friendly names): the SageMaker role
        // may not take the name of a role the deployment derives.
        let sagemaker = &self.options.sagemaker_role_name;
        if let Some(purpose) = DERIVED_ROLES
            .iter()
            .find(|p| self.role_name(p).eq_ignore_ascii_case(sagemaker))
        {
            errors.push(invalid(
                "options.sagemaker_role_name",
                sagemaker,
                format!(
                    "is the name of this deployment's {purpose} role (IAM role names are unique in \
                     the account, ignoring case); choose another, e.g. \"{}-sagemaker\"",
                    self.name
                ),
            ));
        }
        if RESERVED_NAMESPACES.contains(&self.options.user_namespace.as_str()) {
            errors.push(invalid(
                "options.user_namespace",
                &self.options.user_namespace,
                "is a namespace of Kubernetes or of the Kubeflow components; choose a namespace of \
                 its own (destroy deletes it)"
                    .into(),
            ));
        }
        for (group, ng) in &self.node_groups {
            let field = |k: &str| format!("node_groups.{group}.{k}");
            // The group name becomes an address segment (eks.nodegroup.<group>)
            // and a Kubernetes label value.
            if let Some(problem) = naming::DNS1123_LABEL.violation(group) {
                errors.push(invalid(
                    "node_groups",
                    group,
                    format!(
                        "the name of table [node_groups.{group}] must be a DNS-1123 label ({problem})"
                    ),
                ));
            }
            if ng.max_size < 1 {
                errors.push(invalid(
                    &field("max_size"),
                    &ng.max_size.to_string(),
                    "must be at least 1 (EKS NodegroupScalingConfig, maxSize)".into(),
                ));
            }
            if ng.min_size > ng.max_size {
                errors.push(invalid(
                    &field("min_size"),
                    &ng.min_size.to_string(),
                    format!(
                        "must be at most max_size ({}) (EKS NodegroupScalingConfig)",
                        ng.max_size
                    ),
                ));
            } else if !(ng.min_size <= ng.desired_size && ng.desired_size <= ng.max_size) {
                errors.push(invalid(
                    &field("desired_size"),
                    &ng.desired_size.to_string(),
                    format!(
                        "must satisfy min_size ({}) <= desired_size <= max_size ({}) \
                         (EKS NodegroupScalingConfig){}",
                        ng.min_size,
                        ng.max_size,
                        // Serde fills a left-out key with the default: say so, as the
                        // user may not have written it.
                        match ng.desired_size == NodeGroup::default().desired_size {
                            true => "; 2 is the default when desired_size is not set",
                            false => "",
                        }
                    ),
                ));
            }
            let it = &ng.instance_type;
            let family_size = it.split_once('.');
            if !family_size.is_some_and(|(f, s)| {
                !f.is_empty()
                    && !s.is_empty()
                    && it.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-'
                    })
            }) {
                errors.push(invalid(
                    &field("instance_type"),
                    it,
                    "must be an EC2 instance type such as m5.xlarge (family.size)".into(),
                ));
            }
            if !(20..=16384).contains(&ng.disk_size_gib) {
                errors.push(invalid(
                    &field("disk_size_gib"),
                    &ng.disk_size_gib.to_string(),
                    "must be 20..=16384 GiB (EKS CreateNodegroup diskSize; gp3 volume limit)"
                        .into(),
                ));
            }
        }
        let mut principals: BTreeMap<String, &str> = BTreeMap::new();
        let node_role = self.role_name("eks-node");
        for (name, entry) in &self.access_entries {
            let field = |k: &str| format!("access_entries.{name}.{k}");
            // The name becomes an address segment (eks.access_entry.<name>).
            if let Some(problem) = naming::DNS1123_LABEL.violation(name) {
                errors.push(invalid(
                    "access_entries",
                    name,
                    format!(
                        "the name of table [access_entries.{name}] must be a DNS-1123 label \
                         ({problem})"
                    ),
                ));
            }
            if region_known {
                if let Err(p) = check_principal_arn(&entry.principal_arn, &self.region) {
                    errors.push(invalid(&field("principal_arn"), &entry.principal_arn, p));
                }
            }
            if let Some(other) = principals.insert(principal_key(&entry.principal_arn), name) {
                errors.push(invalid(
                    &field("principal_arn"),
                    &entry.principal_arn,
                    format!(
                        "is also the principal of [access_entries.{other}] (IAM names are unique \
                         in an account ignoring case and path); EKS admits one access entry per \
                         principal (CreateAccessEntry, principalArn)"
                    ),
                ));
            }
            if principal_key(&entry.principal_arn)
                .ends_with(&format!(":role/{}", node_role.to_ascii_lowercase()))
            {
                errors.push(invalid(
                    &field("principal_arn"),
                    &entry.principal_arn,
                    format!(
                        "is this deployment's node role ({node_role}): EKS gives the role of a \
                         managed node group an access entry of its own (type EC2_LINUX) so that \
                         its nodes join; a STANDARD entry for it would collide with that one"
                    ),
                ));
            }
            if let Some(namespaces) = &entry.namespaces {
                if let Err(p) = check_scope_namespaces(namespaces) {
                    let shown = format!("[{}]", namespaces.join(", "));
                    errors.push(invalid(&field("namespaces"), &shown, p));
                }
            }
        }
        for (field, path) in [
            ("kubeflow.manifests", &self.kubeflow.manifests),
            (
                "kubeflow.training_operator",
                &self.kubeflow.training_operator,
            ),
        ] {
            if let (Some(path), true) = (path, sources) {
                if !path.exists() {
                    errors.push(invalid(
                        field,
                        &path.display().to_string(),
                        "no such file or directory: name a `kustomize build` output or a \
                         directory of YAML files of your pinned Kubeflow release (relative \
                         paths are relative to the config file)"
                            .into(),
                    ));
                }
            }
        }
        // In an unknown region, the names that do not embed it are still checked.
        let names: Vec<naming::DerivedName> = self
            .derived_names()
            .into_iter()
            .filter(|d| region_known || !d.value.contains(self.region.as_str()))
            .collect();
        let names = naming::check_all(&names);
        if !names.is_empty() {
            errors.push(ConfigError::Names(names));
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(ConfigError::Several(errors)),
        }
    }
}

/// Managed policy ARNs for the node role: each
/// `arn:<partition>:iam::<aws | 12-digit account>:policy/<path><name>`
/// in the region's partition (IAM User Guide, "IAM identifiers": ARNs;
/// a policy name is 1–128 of `A-Za-z0-9+=,.@_-`), none of
/// [`EKS_NODE_POLICIES`] (the role has them), no repeats, at most
/// [`MAX_EXTRA_NODE_POLICIES`].
fn check_policy_arns(arns: &[String], region: &str) -> Result<(), String> {
    let partition = crate::aws::partition(region);
    if arns.len() > MAX_EXTRA_NODE_POLICIES {
        return Err(format!(
            "lists {} policies; a role holds at most 10 managed policies (IAM quotas) and EKS's \
             node policies take 3, so at most {MAX_EXTRA_NODE_POLICIES} can be added",
            arns.len()
        ));
    }
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 128
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c))
    };
    for (i, arn) in arns.iter().enumerate() {
        let prefix = format!("arn:{partition}:iam::");
        let rest = arn.strip_prefix(&prefix).ok_or_else(|| {
            format!(
                "{arn:?} is not an IAM policy ARN of partition {partition} (region {region}): \
                 expected arn:{partition}:iam::aws:policy/<name> or \
                 arn:{partition}:iam::<account id>:policy/<name>"
            )
        })?;
        let (account, path) = rest.split_once(":policy/").unwrap_or((rest, ""));
        let account_ok = account == "aws"
            || (account.len() == 12 && account.chars().all(|c| c.is_ascii_digit()));
        let name = path.rsplit('/').next().unwrap_or_default();
        if !account_ok || !name_ok(name) {
            return Err(format!(
                "{arn:?} is not an IAM policy ARN: expected arn:{partition}:iam::aws:policy/<name> \
                 or arn:{partition}:iam::<12-digit account id>:policy/<name>, the name 1-128 of \
                 A-Za-z0-9+=,.@_-"
            ));
        }
        if account == "aws" && EKS_NODE_POLICIES.contains(&path) {
            return Err(format!(
                "{arn:?} is one of EKS's node policies, which the node role always holds; list \
                 only the policies to add"
            ));
        }
        if arns[..i].contains(arn) {
            return Err(format!("{arn:?} is listed twice"));
        }
    }
    Ok(())
}

/// An IAM role or user ARN for an EKS access entry:
/// `arn:<partition>:iam::<12-digit account>:role/<path><name>` or
/// `...:user/<path><name>` in the region's partition (IAM User Guide, "IAM
/// identifiers": a role or user name is 1–64 of `A-Za-z0-9+=,.@_-`, a path
/// `/`-separated segments of the same). Roles may have a path and another
/// account (EKS User Guide, "Create access entries"); an STS assumed-role
/// session ARN is refused there.
fn check_principal_arn(arn: &str, region: &str) -> Result<(), String> {
    let partition = crate::aws::partition(region);
    let expected = format!(
        "expected arn:{partition}:iam::<12-digit account id>:role/<name> (or :user/<name>; a \
         role may have a path, role/<path>/<name>)"
    );
    if arn.starts_with(&format!("arn:{partition}:sts::")) {
        let role = arn
            .split(':')
            .nth(5)
            .and_then(|r| r.strip_prefix("assumed-role/"))
            .and_then(|r| r.split('/').next());
        let account = arn.split(':').nth(4).unwrap_or("<account>");
        let hint = role.map_or(expected.clone(), |role| {
            format!("name the role it assumed, arn:{partition}:iam::{account}:role/{role}")
        });
        return Err(format!(
            "is an STS session ARN, which EKS refuses for access entries (a session is \
             temporary); {hint}"
        ));
    }
    let Some(rest) = arn.strip_prefix(&format!("arn:{partition}:iam::")) else {
        let why = if arn.trim() != arn {
            "has leading or trailing white space".to_string()
        } else if arn.to_ascii_lowercase().starts_with("arn:") && !arn.starts_with("arn:") {
            "ARNs are case-sensitive: it must start with lowercase `arn:`".to_string()
        } else {
            format!("is not an IAM ARN of partition {partition} (region {region})")
        };
        return Err(format!("{why}: {expected}"));
    };
    let (account, resource) = rest.split_once(':').unwrap_or((rest, ""));
    if !(account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())) {
        return Err(format!(
            "account {account:?} is not a 12-digit account id: {expected}"
        ));
    }
    let Some((kind @ ("role" | "user"), path)) = resource.split_once('/') else {
        return Err(format!("is not an IAM role or user ARN: {expected}"));
    };
    let segments: Vec<&str> = path.split('/').collect();
    let name = segments.last().copied().unwrap_or_default();
    let chars_ok = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c))
    };
    if segments.iter().any(|s| s.is_empty()) {
        return Err(format!(
            "has an empty {kind} name or path segment (a `/` at the start, at the end or \
             doubled): {expected}"
        ));
    }
    if let Some(bad) = segments.iter().find(|s| !chars_ok(s)) {
        return Err(format!(
            "{kind} name or path segment {bad:?} may hold only A-Za-z0-9+=,.@_- (IAM User \
             Guide, \"IAM identifiers\")"
        ));
    }
    if name.len() > 64 {
        return Err(format!(
            "{kind} name {name:?} is {} characters; IAM names are at most 64",
            name.len()
        ));
    }
    if path.len() > 512 {
        return Err(format!("{kind} path is longer than IAM's 512 characters"));
    }
    Ok(())
}

/// The IAM principal an access entry's ARN names, as IAM tells principals apart: account,
/// kind and name, ignoring the path and the name's case (IAM User Guide, "IAM identifiers":
/// names are unique in the account ignoring case, whatever the path).
fn principal_key(arn: &str) -> String {
    let mut parts = arn.splitn(6, ':').skip(4);
    let (account, resource) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let (kind, path) = resource.split_once('/').unwrap_or((resource, ""));
    let name = path.rsplit('/').next().unwrap_or_default();
    format!("{account}:{kind}/{}", name.to_ascii_lowercase())
}

/// The namespaces of an access policy's scope: at least one, each a DNS-1123
/// label or a label prefix ending in `*` (EKS API Reference, `AccessScope`:
/// "a wildcard character (`*`) at the end of a namespace name"), no repeats.
fn check_scope_namespaces(namespaces: &[String]) -> Result<(), String> {
    if namespaces.is_empty() {
        return Err(
            "is empty; list the namespaces the policy applies in, or leave `namespaces` out for \
             the whole cluster"
                .into(),
        );
    }
    let mut problems = Vec::new();
    for (i, ns) in namespaces.iter().enumerate() {
        let label = ns.strip_suffix('*').unwrap_or(ns);
        let problem = match (ns.ends_with('*'), label.is_empty()) {
            (true, true) => Some(
                "a lone `*` would match every namespace; leave `namespaces` out for the whole \
                 cluster"
                    .to_string(),
            ),
            (true, false) => (!label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                || label.starts_with('-')
                || label.len() > 62)
                .then(|| {
                    "a prefix before `*` must be lowercase letters, digits and `-`, not \
                     starting with `-`"
                        .to_string()
                }),
            (false, _) => naming::DNS1123_LABEL.violation(label),
        };
        if let Some(problem) = problem {
            problems.push(format!(
                "{ns:?} is not a namespace name or prefix: {problem} (EKS AccessScope.namespaces)"
            ));
        } else if namespaces[..i].contains(ns) {
            problems.push(format!("{ns:?} is listed twice"));
        }
    }
    match problems.is_empty() {
        true => Ok(()),
        false => Err(problems.join("; ")),
    }
}

/// Two distinct Availability Zone names of `region` (`us-east-1a`: the
/// region, then a lowercase letter; EC2 User Guide, "Availability Zones").
fn check_zones(zones: &[String], region: &str) -> Result<(), String> {
    if zones.len() != crate::aws::zones::ZONE_COUNT {
        return Err(format!(
            "must list exactly {} Availability Zones (the network has a public and a private \
             subnet in each), e.g. [\"{region}a\", \"{region}b\"]",
            crate::aws::zones::ZONE_COUNT
        ));
    }
    if zones[0] == zones[1] {
        return Err("the two Availability Zones must differ".into());
    }
    for z in zones {
        let suffix = z.strip_prefix(region).unwrap_or_default();
        if suffix.len() != 1 || !suffix.chars().all(|c| c.is_ascii_lowercase()) {
            return Err(format!(
                "{z:?} is not an Availability Zone of {region}: expected {region} followed by \
                 one letter, e.g. \"{region}a\""
            ));
        }
    }
    Ok(())
}

/// A VPC IPv4 CIDR: dotted quad, prefix /16 to /24, no host bits. AWS allows
/// /16 to /28 (Amazon VPC User Guide, "VPC CIDR blocks"); kfaws carves a
/// public and a private subnet for each of at least two Availability Zones
/// out of it, which needs at least a /24.
fn check_cidr(cidr: &str) -> Result<(), String> {
    let (addr, prefix) = cidr
        .split_once('/')
        .ok_or("must be an IPv4 CIDR such as 10.0.0.0/16")?;
    let addr: Ipv4Addr = addr
        .parse()
        .map_err(|_| "the address part is not an IPv4 address".to_string())?;
    let prefix: u32 = prefix
        .parse()
        .map_err(|_| "the prefix length is not a number".to_string())?;
    if !(16..=24).contains(&prefix) {
        return Err(
            "the prefix length must be /16 to /24 (AWS allows /16 to /28; kfaws needs \
                    four subnets)"
                .into(),
        );
    }
    if u32::from(addr) & (u32::MAX >> prefix) != 0 {
        return Err(format!("host bits are set; did you mean {}/{prefix}?", {
            Ipv4Addr::from(u32::from(addr) & !(u32::MAX >> prefix))
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_runtime_is_one_of_three_and_a_bad_value_lists_them() {
        let f: ConfigFile = toml::from_str("training_runtime = \"sagemaker\"").unwrap();
        assert_eq!(f.training_runtime, Some(crate::train::Runtime::Sagemaker));
        let e = toml::from_str::<ConfigFile>("training_runtime = \"k8s\"")
            .unwrap_err()
            .to_string();
        for v in ["k8s", "local", "kubernetes", "sagemaker"] {
            assert!(e.contains(v), "{e}");
        }
    }

    /// `toml` resolved as the commands that plan resolve it.
    fn resolve(toml: &str) -> Result<Config, ConfigError> {
        let (file, invalid) = ConfigFile::parse_reporting(Path::new("kfaws.toml"), toml)?;
        file.resolve_reporting(invalid, &Overrides::default(), None)
    }

    fn names_error(toml: &str) -> Vec<NameError> {
        match resolve(toml) {
            Err(ConfigError::Names(v)) => v,
            other => panic!("expected name errors, got {other:?}"),
        }
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let c = resolve("name = \"ml\"\nregion = \"us-west-2\"\n").unwrap();
        assert_eq!(c.profile, ProfileName::Vanilla);
        assert_eq!(c.kubernetes_version, DEFAULT_KUBERNETES_VERSION);
        assert_eq!(c.node_groups.keys().collect::<Vec<_>>(), ["cpu"]);
        assert_eq!(c.bucket_name(), "kfaws-ml-us-west-2-artifacts");
        assert_eq!(c.stack_name("network"), "kfaws-ml-network");
    }

    #[test]
    fn overrides_win_over_the_file_and_env_region_is_the_fallback() {
        let file =
            ConfigFile::parse(Path::new("k"), "name = \"a\"\nregion = \"eu-west-1\"").unwrap();
        let o = Overrides {
            name: Some("b".into()),
            region: Some("us-east-1".into()),
            profile: Some(ProfileName::Vanilla),
            destroy: false,
        };
        let c = file.resolve(&o, Some("ap-south-1".into())).unwrap();
        assert_eq!((c.name.as_str(), c.region.as_str()), ("b", "us-east-1"));
        assert_eq!(c.profile, ProfileName::Vanilla);
        // The flag's profile wins over the file's (here one not yet available).
        let file =
            ConfigFile::parse(Path::new("k"), "name = \"a\"\nprofile = \"cognito\"").unwrap();
        let c = file.resolve(&o, Some("ap-south-1".into())).unwrap();
        assert_eq!(c.profile, ProfileName::Vanilla);
        let file = ConfigFile::parse(Path::new("k"), "name = \"a\"").unwrap();
        let c = file
            .resolve(&Overrides::default(), Some("ap-south-1".into()))
            .unwrap();
        assert_eq!(c.region, "ap-south-1");
    }

    #[test]
    fn an_unavailable_profile_is_reported_with_the_other_errors() {
        let e = resolve("name = \"ml\"\nregion = \"us-east-1\"\nprofile = \"rds-s3\"\nkubernetes_version = \"2.0\"")
            .unwrap_err();
        match &e {
            ConfigError::Several(v) => {
                let fields: Vec<_> = v
                    .iter()
                    .filter_map(|e| match e {
                        ConfigError::Invalid { field, .. } => Some(field.as_str()),
                        _ => None,
                    })
                    .collect();
                assert_eq!(fields, ["profile", "kubernetes_version"], "{e}");
            }
            other => panic!("expected several errors, got {other:?}"),
        }
        assert!(e.to_string().contains("not yet available"), "{e}");
    }

    #[test]
    fn missing_name_or_region_says_how_to_set_it() {
        let e = resolve("region = \"us-east-1\"").unwrap_err();
        assert!(e.to_string().contains("--name"), "{e}");
        let e = resolve("name = \"x\"").unwrap_err();
        assert!(e.to_string().contains("AWS_REGION"), "{e}");
    }

    #[test]
    fn a_missing_name_and_region_are_reported_together() {
        let e = resolve("").unwrap_err();
        assert_eq!(fields(&e), ["name", "region"], "{e}");
    }

    #[test]
    fn unknown_key_is_an_error_with_its_line() {
        let e = resolve("name = \"ml\"\nregion = \"us-east-1\"\nregoin = \"x\"\n").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("regoin"), "{msg}");
        let e = resolve("name = \"ml\"\n[options]\nvpc = \"10.0.0.0/16\"\n").unwrap_err();
        assert!(e.to_string().contains("line 3"), "{e}");
    }

    #[test]
    fn duplicate_key_is_an_error_with_its_line() {
        let e = resolve("name = \"ml\"\nregion = \"us-east-1\"\nname = \"b\"\n").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("duplicate"), "{msg}");
    }

    #[test]
    fn wrong_type_is_an_error_with_its_line() {
        let e = resolve(
            "name = \"ml\"\nregion = \"us-east-1\"\n[node_groups.cpu]\ninstance_type = \"m5.large\"\nmin_size = \"one\"\ndesired_size = 1\nmax_size = 2\n",
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("line 5"), "{msg}");
        assert!(msg.contains("min_size") || msg.contains("integer"), "{msg}");
    }

    #[test]
    fn unknown_profile_names_its_field_and_the_profiles() {
        let e = resolve("name = \"ml\"\nregion = \"us-east-1\"\nprofile = \"k8s\"\n").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("profile \"k8s\" is invalid: unknown variant `k8s`")
                && msg.contains("`vanilla`"),
            "{msg}"
        );
    }

    #[test]
    fn underscore_name_fails_the_stack_rule_naming_it() {
        let errs = names_error("name = \"ml_team\"\nregion = \"us-east-1\"");
        assert!(errs
            .iter()
            .any(|e| e.value == "kfaws-ml_team-network" && e.what == "CloudFormation stack name"));
        // EKS accepts the underscore itself.
        assert!(!errs.iter().any(|e| e.what == "EKS cluster name"));
    }

    #[test]
    fn names_broken_for_the_same_reason_share_one_line() {
        let Err(e) = resolve("name = \"ml_team\"\nregion = \"us-east-1\"") else {
            panic!("ml_team must be refused")
        };
        let text = e.to_string();
        // Stack names, bucket name, Kubernetes name: three problems, listed as the config's are.
        assert!(
            text.starts_with("3 problems in the config:\n  - name \"ml_team\" is invalid"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 4, "{text}");
        let stack_lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("CloudFormation stack name"))
            .collect();
        assert_eq!(stack_lines.len(), 1, "{text}");
        assert!(
            stack_lines[0].contains("\"kfaws-ml_team-network\", \"kfaws-ml_team-iam\""),
            "{text}"
        );
    }

    #[test]
    fn case_c12_names_the_stack_rule() {
        let errs = names_error("name = \"test-k8_cluster01\"\nregion = \"us-east-1\"");
        let stack = errs
            .iter()
            .find(|e| e.what == "CloudFormation stack name")
            .unwrap();
        assert!(stack.to_string().contains("[a-zA-Z][-a-zA-Z0-9]*"));
    }

    #[test]
    fn case_c11_long_name_in_a_long_region_is_refused_with_the_longest_allowed() {
        let name = "tf-vanilla-uwiqgwfqu3";
        assert_eq!(name.len(), 21);
        let errs = names_error(&format!("name = \"{name}\"\nregion = \"ap-southeast-1\""));
        let role = errs.iter().find(|e| e.what == "IAM role name").unwrap();
        assert_eq!(
            role.value,
            "kfaws-tf-vanilla-uwiqgwfqu3-ap-southeast-1-irsa-efs-csi-controller"
        );
        assert!(role.value.len() > 64);
        let longest = role.longest_input.unwrap();
        let ok = "a".repeat(longest);
        resolve(&format!("name = \"{ok}\"\nregion = \"ap-southeast-1\"")).unwrap();
        let too_long = "a".repeat(longest + 1);
        names_error(&format!(
            "name = \"{too_long}\"\nregion = \"ap-southeast-1\""
        ));
    }

    #[test]
    fn a_twenty_character_name_in_ap_southeast_1_passes_64_in_a_role_name() {
        let errs = names_error("name = \"abcdefghij0123456789\"\nregion = \"ap-southeast-1\"");
        assert!(errs
            .iter()
            .any(|e| e.what == "IAM role name" && e.value.len() > 64));
        // ...but fits in a shorter region.
        resolve("name = \"abcdefghij0123456789\"\nregion = \"us-east-1\"").unwrap();
    }

    #[test]
    fn bad_bucket_names_are_refused() {
        for bucket in ["Artifacts-Bucket", "my..bucket", "my_bucket", "ab"] {
            let errs = names_error(&format!(
                "name = \"ml\"\nregion = \"us-east-1\"\n[options]\nartifact_bucket = \"{bucket}\""
            ));
            assert_eq!(errs[0].field, "options.artifact_bucket", "{bucket}");
        }
        // An uppercase deployment name breaks the default bucket name too.
        let errs = names_error("name = \"MLTeam\"\nregion = \"us-east-1\"");
        assert!(errs.iter().any(|e| e.what == "S3 bucket name"));
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases = [
            ("region = \"us-east1\"", "region"),
            ("region = \"us-east-1\"\nkubernetes_version = \"v1.30\"", "kubernetes_version"),
            // EKS's form only: no leading zero, sign or patch (1.033 would reach CreateCluster).
            ("region = \"us-east-1\"\nkubernetes_version = \"1.033\"", "kubernetes_version"),
            ("region = \"us-east-1\"\nkubernetes_version = \"1.+33\"", "kubernetes_version"),
            ("region = \"us-east-1\"\nkubernetes_version = \"1.33.0\"", "kubernetes_version"),
            ("region = \"us-east-1\"\nkubernetes_version = \"1.\"", "kubernetes_version"),
            ("region = \"us-east-1\"\n[options]\nvpc_cidr = \"10.0.0.1/16\"", "options.vpc_cidr"),
            ("region = \"us-east-1\"\n[options]\nvpc_cidr = \"10.0.0.0/8\"", "options.vpc_cidr"),
            (
                "region = \"us-east-1\"\n[node_groups.cpu]\ninstance_type = \"m5.large\"\nmin_size = 3\ndesired_size = 2\nmax_size = 4",
                "node_groups.cpu.desired_size",
            ),
            (
                "region = \"us-east-1\"\n[node_groups.cpu]\ninstance_type = \"m5.large\"\nmin_size = 5\ndesired_size = 1\nmax_size = 4",
                "node_groups.cpu.min_size",
            ),
            (
                "region = \"us-east-1\"\n[node_groups.cpu]\ninstance_type = \"large\"\nmin_size = 1\ndesired_size = 1\nmax_size = 1",
                "node_groups.cpu.instance_type",
            ),
        ];
        for (toml, field) in cases {
            match resolve(&format!("name = \"ml\"\n{toml}")) {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field, "{toml}"),
                other => panic!("{toml}: expected Invalid {field}, got {other:?}"),
            }
        }
    }

    #[test]
    fn access_entries_are_parsed_with_their_policy_and_scope() {
        let c = resolve(
            "name = \"ml\"\nregion = \"us-east-1\"\n\
             [access_entries.platform]\n\
             principal_arn = \"arn:aws:iam::210987654321:role/teams/platform/Admins\"\n\
             policy = \"cluster-admin\"\n\
             [access_entries.data]\n\
             principal_arn = \"arn:aws:iam::123456789012:user/alice\"\n\
             policy = \"edit\"\nnamespaces = [\"team-a\", \"team-*\"]\n",
        )
        .unwrap();
        let platform = &c.access_entries["platform"];
        assert_eq!(platform.policy, AccessPolicy::ClusterAdmin);
        assert_eq!(platform.namespaces, None);
        assert_eq!(
            platform.policy.arn("aws"),
            "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
        );
        assert_eq!(
            c.access_entries["data"].namespaces.as_deref(),
            Some(&["team-a".to_string(), "team-*".to_string()][..])
        );
        // None by default.
        assert!(resolve("name = \"ml\"\nregion = \"us-east-1\"")
            .unwrap()
            .access_entries
            .is_empty());
    }

    #[test]
    fn bad_access_entries_name_their_field_and_rule() {
        let entry = |name: &str, body: &str| {
            format!("name = \"ml\"\nregion = \"us-east-1\"\n[access_entries.{name}]\n{body}")
        };
        let role = "principal_arn = \"arn:aws:iam::123456789012:role/Admins\"\npolicy = \"view\"";
        let cases = [
            (
                entry("a", "principal_arn = \"arn:aws:sts::123456789012:assumed-role/Admins/me\"\npolicy = \"view\""),
                "access_entries.a.principal_arn",
                "STS session ARN",
            ),
            (
                entry("a", "principal_arn = \"arn:aws-cn:iam::123456789012:role/Admins\"\npolicy = \"view\""),
                "access_entries.a.principal_arn",
                "partition aws",
            ),
            (
                entry("a", "principal_arn = \"arn:aws:iam::12345:role/Admins\"\npolicy = \"view\""),
                "access_entries.a.principal_arn",
                "12-digit account",
            ),
            (
                entry("a", "principal_arn = \"arn:aws:iam::123456789012:group/Admins\"\npolicy = \"view\""),
                "access_entries.a.principal_arn",
                "role or user ARN",
            ),
            (
                entry("a", "principal_arn = \"arn:aws:iam::123456789012:role/\"\npolicy = \"view\""),
                "access_entries.a.principal_arn",
                "has an empty role name",
            ),
            (
                entry("a", &format!("principal_arn = \"arn:aws:iam::123456789012:role/{}\"\npolicy = \"view\"", "r".repeat(65))),
                "access_entries.a.principal_arn",
                "is 65 characters; IAM names are at most 64",
            ),
            (
                entry("a", "principal_arn = \"arn:aws:iam::123456789012:role/has space\"\npolicy = \"view\""),
                "access_entries.a.principal_arn",
                "\"has space\" may hold only",
            ),
            (
                entry("a", "principal_arn = \"ARN:AWS:IAM::123456789012:role/Admins\"\npolicy = \"view\""),
                "access_entries.a.principal_arn",
                "ARNs are case-sensitive",
            ),
            (
                entry("a", "principal_arn = \"arn:aws:sts::123456789012:assumed-role/Admins/me\"\npolicy = \"view\""),
                "access_entries.a.principal_arn",
                "name the role it assumed, arn:aws:iam::123456789012:role/Admins",
            ),
            (
                entry("a", "principal_arn = \"arn:aws:iam::123456789012:role/kfaws-ml-us-east-1-eks-node\"\npolicy = \"view\""),
                "access_entries.a.principal_arn",
                "is this deployment's node role",
            ),
            (
                format!(
                    "{}\n[access_entries.b]\nprincipal_arn = \"arn:aws:iam::123456789012:role/teams/admins\"\npolicy = \"view\"",
                    entry("a", role)
                ),
                "access_entries.b.principal_arn",
                "ignoring case and path",
            ),
            (
                entry("a", &format!("{role}\nnamespaces = [\"Team_A\", \"*\"]")),
                "access_entries.a.namespaces",
                "a lone `*`",
            ),
            (entry("Team", role), "access_entries", "DNS-1123 label"),
            (
                entry("a", &format!("{role}\nnamespaces = []")),
                "access_entries.a.namespaces",
                "is empty",
            ),
            (
                entry("a", &format!("{role}\nnamespaces = [\"*\"]")),
                "access_entries.a.namespaces",
                "lone `*`",
            ),
            (
                entry("a", &format!("{role}\nnamespaces = [\"Team_A\"]")),
                "access_entries.a.namespaces",
                "not a namespace name",
            ),
            (
                entry("a", &format!("{role}\nnamespaces = [\"x\", \"x\"]")),
                "access_entries.a.namespaces",
                "listed twice",
            ),
            (
                format!("{}\n[access_entries.b]\n{role}", entry("a", role)),
                "access_entries.b.principal_arn",
                "also the principal of [access_entries.a]",
            ),
        ];
        for (toml, field, words) in cases {
            match resolve(&toml) {
                Err(e @ ConfigError::Invalid { .. }) => {
                    let ConfigError::Invalid { field: f, .. } = &e else {
                        unreachable!()
                    };
                    assert_eq!(f, field, "{toml}");
                    assert!(e.to_string().contains(words), "{toml}: {e}");
                }
                other => panic!("{toml}: expected Invalid {field}, got {other:?}"),
            }
        }
        // An unknown policy is a parse error listing the four.
        let err = resolve(&entry(
            "a",
            "principal_arn = \"arn:aws:iam::123456789012:role/Admins\"\npolicy = \"owner\"",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("cluster-admin") && err.contains("view"),
            "{err}"
        );
    }

    /// A desired_size left out takes its default, which the error says when it is the one
    /// out of range.
    #[test]
    fn a_defaulted_desired_size_out_of_range_says_it_is_the_default() {
        let toml = "name = \"ml\"\nregion = \"us-east-1\"\n[node_groups.gpu]\n\
                    instance_type = \"g5.xlarge\"\nmin_size = 0\nmax_size = 1";
        let err = resolve(toml).unwrap_err().to_string();
        assert!(
            err.contains("node_groups.gpu.desired_size")
                && err.contains("; 2 is the default when desired_size is not set"),
            "{err}"
        );
    }

    #[test]
    fn unsupported_versions_reserved_namespaces_bad_group_names_and_empty_state_dir_are_refused() {
        let cases = [
            ("kubernetes_version = \"1.99\"", "kubernetes_version"),
            ("kubernetes_version = \"1.20\"", "kubernetes_version"),
            (
                "[options]\nuser_namespace = \"kube-system\"",
                "options.user_namespace",
            ),
            (
                "[node_groups.GPU]\ninstance_type = \"g5.xlarge\"",
                "node_groups",
            ),
            (
                "[node_groups.\"\"]\ninstance_type = \"g5.xlarge\"",
                "node_groups",
            ),
            ("state_dir = \"\"", "state_dir"),
        ];
        for (toml, field) in cases {
            match resolve(&format!("name = \"ml\"\nregion = \"us-east-1\"\n{toml}")) {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field, "{toml}"),
                other => panic!("{toml}: expected Invalid {field}, got {other:?}"),
            }
        }
    }

    /// The fields of a [`ConfigError::Several`] or single [`ConfigError::Invalid`] /
    /// [`ConfigError::Missing`], in order.
    fn fields(e: &ConfigError) -> Vec<String> {
        match e {
            ConfigError::Several(all) => all.iter().flat_map(fields).collect(),
            ConfigError::Invalid { field, .. } => vec![field.clone()],
            ConfigError::Missing { field, .. } => vec![(*field).to_string()],
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bad_fixed_choice_is_reported_with_the_other_problems_naming_the_choices() {
        let toml = "name = \"ml\"\nregion = \"us-east-1\"\nprofile = \"vanila\"\n\
                    training_runtime = \"k8s\"\n\
                    [options]\nsagemaker_role_policy = \"fulll\"\nvpc_cidr = \"10.0.0.0/30\"\n\
                    authentication_mode = \"API\"\n\
                    [access_entries.alice]\n\
                    principal_arn = \"arn:aws:iam::123456789012:role/alice\"\n\
                    policy = \"owner\"\nnamespaces = [\"Bad_NS\"]\n";
        let e = resolve(toml).unwrap_err();
        assert_eq!(
            fields(&e),
            [
                "profile",
                "options.sagemaker_role_policy",
                "options.authentication_mode",
                "access_entries.alice.policy",
                "training_runtime",
                "options.vpc_cidr",
                "access_entries.alice.namespaces",
            ]
        );
        let text = e.to_string();
        assert!(text.starts_with("7 problems in the config:"), "{text}");
        for (line, choices) in [
            (
                "profile \"vanila\" is invalid",
                &["vanilla", "rds-s3", "cognito"][..],
            ),
            (
                "options.sagemaker_role_policy \"fulll\" is invalid",
                &["full", "scoped"],
            ),
            (
                "options.authentication_mode \"API\" is invalid",
                &["api-and-config-map", "api"],
            ),
            (
                "access_entries.alice.policy \"owner\" is invalid",
                &["cluster-admin", "admin", "edit", "view"],
            ),
            (
                "training_runtime \"k8s\" is invalid",
                &["local", "kubernetes", "sagemaker"],
            ),
        ] {
            let found = text
                .lines()
                .find(|l| l.contains(line))
                .unwrap_or_else(|| panic!("no {line:?} in {text}"));
            for choice in choices {
                assert!(found.contains(&format!("`{choice}`")), "{found}");
            }
        }
        // Without the other problems, the parse alone refuses them (for the commands that
        // read the file without resolving it: `kfaws train`'s runtime).
        let e =
            ConfigFile::parse(Path::new("kfaws.toml"), "training_runtime = \"k8s\"").unwrap_err();
        assert_eq!(fields(&e), ["training_runtime"]);
        let e = ConfigFile::parse(
            Path::new("kfaws.toml"),
            "profile = \"x\"\n[options]\nsagemaker_role_policy = \"fulll\"\n",
        )
        .unwrap_err();
        assert_eq!(
            fields(&e),
            ["profile", "options.sagemaker_role_policy"],
            "{e}"
        );
        // An empty state_dir, checked at parse, is among them.
        let e = ConfigFile::parse(Path::new("kfaws.toml"), "profile = \"x\"\nstate_dir = \"\"")
            .unwrap_err();
        assert_eq!(fields(&e), ["profile", "state_dir"], "{e}");
        // A value of another type is the parser's error, with its line and column.
        let e =
            ConfigFile::parse(Path::new("kfaws.toml"), "name = \"ml\"\nprofile = 3\n").unwrap_err();
        let ConfigError::Parse { message, .. } = &e else {
            panic!("expected Parse, got {e:?}");
        };
        assert!(message.contains("line 2"), "{message}");
        // A missing name is among them.
        let (file, invalid) =
            ConfigFile::parse_reporting(Path::new("kfaws.toml"), "profile = \"x\"").unwrap();
        let e = file
            .resolve_reporting(invalid, &Overrides::default(), Some("us-east-1".into()))
            .unwrap_err();
        assert_eq!(fields(&e), ["profile", "name"]);
    }

    #[test]
    fn authentication_mode_is_api_and_config_map_unless_set_to_api() {
        let base = "name = \"ml\"\nregion = \"us-east-1\"\n";
        for (options, want) in [
            ("", AuthenticationMode::ApiAndConfigMap),
            (
                "[options]\nauthentication_mode = \"api-and-config-map\"\n",
                AuthenticationMode::ApiAndConfigMap,
            ),
            (
                "[options]\nauthentication_mode = \"api\"\n",
                AuthenticationMode::Api,
            ),
        ] {
            let config = resolve(&format!("{base}{options}")).unwrap();
            assert_eq!(config.options.authentication_mode, want, "{options}");
        }
    }

    #[test]
    fn a_bad_fixed_choice_beside_a_schema_error_is_the_parser_s_first_error() {
        let e =
            resolve("name = \"ml\"\nregion = \"us-east-1\"\nprofile = \"vanila\"\nregoin = \"x\"")
                .unwrap_err();
        let ConfigError::Parse { message, .. } = &e else {
            panic!("expected Parse, got {e:?}");
        };
        assert!(message.contains("line 3"), "{message}");
    }

    #[test]
    fn every_bad_field_is_reported_in_one_run() {
        let e = resolve(
            "name = \"ml\"\nregion = \"us-east-1\"\nkubernetes_version = \"2.0\"\n\
             [options]\nvpc_cidr = \"10.0.0.0/30\"\n\
             [node_groups.cpu]\ninstance_type = \"m5\"\ndisk_size_gib = 10",
        )
        .unwrap_err();
        let ConfigError::Several(errors) = &e else {
            panic!("expected Several, got {e:?}");
        };
        let fields: Vec<&str> = errors
            .iter()
            .map(|e| match e {
                ConfigError::Invalid { field, .. } => field.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            fields,
            [
                "kubernetes_version",
                "options.vpc_cidr",
                "node_groups.cpu.instance_type",
                "node_groups.cpu.disk_size_gib"
            ]
        );
        let text = e.to_string();
        assert!(
            text.starts_with("4 problems in the config:\n  - kubernetes_version \"2.0\""),
            "{text}"
        );
        assert_eq!(text.lines().count(), 5, "{text}");
    }

    #[test]
    fn an_unknown_region_is_not_followed_by_the_checks_that_depend_on_it() {
        let e = resolve(
            "name = \"ml\"\nregion = \"moon-1\"\n[options]\navailability_zones = [\"moon-1a\"]",
        )
        .unwrap_err();
        assert!(
            matches!(&e, ConfigError::Invalid { field, .. } if field == "region"),
            "{e:?}"
        );
        // What does not depend on the region is still checked: the user
        // namespace and the SageMaker role name here, with the region.
        let e = resolve(
            "name = \"ml\"\nregion = \"moon-1\"\n[options]\nuser_namespace = \"Team_A\"\n\
             sagemaker_role_name = \"sage maker\"",
        )
        .unwrap_err();
        let ConfigError::Several(all) = &e else {
            panic!("{e:?}")
        };
        let text = e.to_string();
        assert!(
            matches!(&all[0], ConfigError::Invalid { field, .. } if field == "region")
                && text.contains("options.user_namespace \"Team_A\"")
                && text.contains("options.sagemaker_role_name \"sage maker\""),
            "{text}"
        );
    }

    #[test]
    fn availability_zones_are_two_distinct_zones_of_the_region() {
        let zones = |list: &str| {
            resolve(&format!(
                "name = \"ml\"\nregion = \"us-east-1\"\n[options]\navailability_zones = {list}"
            ))
        };
        let c = zones("[\"us-east-1c\", \"us-east-1a\"]").unwrap();
        assert_eq!(
            c.options.availability_zones.unwrap(),
            ["us-east-1c", "us-east-1a"]
        );
        for bad in [
            "[\"us-east-1a\"]",
            "[\"us-east-1a\", \"us-east-1a\"]",
            "[\"us-east-1a\", \"eu-west-1b\"]",
            "[\"us-east-1a\", \"us-east-1-bos-1a\"]",
        ] {
            match zones(bad) {
                Err(ConfigError::Invalid { field, .. }) => {
                    assert_eq!(field, "options.availability_zones", "{bad}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_sagemaker_role_may_not_take_a_derived_role_s_name() {
        let err = resolve(
            "name = \"demo\"\nregion = \"us-east-1\"\n[options]\n\
             sagemaker_role_name = \"KFAWS-demo-us-east-1-eks-node\"",
        )
        .unwrap_err();
        match err {
            ConfigError::Invalid { field, problem, .. } => {
                assert_eq!(field, "options.sagemaker_role_name");
                assert!(
                    problem.contains("this deployment's eks-node role")
                        && problem.contains("\"demo-sagemaker\""),
                    "{problem}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn node_role_policies_are_policy_arns_of_the_partition_added_once() {
        let policies = |region: &str, list: &str| {
            resolve(&format!(
                "name = \"ml\"\nregion = \"{region}\"\n[options]\nnode_role_policies = {list}"
            ))
        };
        let ssm = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore";
        let own = "arn:aws:iam::123456789012:policy/team/nodes-extra";
        let c = policies("us-east-1", &format!("[{ssm:?}, {own:?}]")).unwrap();
        assert_eq!(c.options.node_role_policies, [ssm, own]);
        policies(
            "cn-north-1",
            "[\"arn:aws-cn:iam::aws:policy/AmazonSSMManagedInstanceCore\"]",
        )
        .unwrap();
        let eight: Vec<String> = (0..8)
            .map(|i| format!("\"arn:aws:iam::aws:policy/P{i}\""))
            .collect();
        for (region, bad, problem) in [
            ("us-east-1", format!("[{ssm:?}, {ssm:?}]"), "listed twice"),
            (
                "us-east-1",
                "[\"arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy\"]".to_string(),
                "always holds",
            ),
            (
                "us-east-1",
                "[\"AmazonSSMManagedInstanceCore\"]".into(),
                "not an IAM policy ARN",
            ),
            (
                "us-east-1",
                "[\"arn:aws:iam::12:policy/x\"]".into(),
                "12-digit",
            ),
            (
                "us-east-1",
                "[\"arn:aws:iam::aws:role/x\"]".into(),
                "not an IAM policy ARN",
            ),
            ("cn-north-1", format!("[{ssm:?}]"), "partition aws-cn"),
            ("us-east-1", format!("[{}]", eight.join(", ")), "at most 7"),
        ] {
            match policies(region, &bad) {
                Err(ConfigError::Invalid {
                    field, problem: p, ..
                }) => {
                    assert_eq!(field, "options.node_role_policies", "{bad}");
                    assert!(p.contains(problem), "{bad}: {p}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_partial_node_group_takes_the_defaults() {
        let c = resolve("name = \"ml\"\nregion = \"us-east-1\"\n[node_groups.cpu]\nmax_size = 8")
            .unwrap();
        let ng = &c.node_groups["cpu"];
        assert_eq!(
            (ng.instance_type.as_str(), ng.min_size, ng.max_size),
            ("m5.xlarge", 1, 8)
        );
    }

    #[test]
    fn node_group_names_are_checked() {
        let group = "g".repeat(61);
        let errs = names_error(&format!(
            "name = \"ml\"\nregion = \"us-east-1\"\n[node_groups.{group}]\ninstance_type = \"g5.xlarge\"\nmin_size = 0\ndesired_size = 0\nmax_size = 1"
        ));
        assert_eq!(errs[0].field, format!("node_groups.{group}"));
        assert_eq!(errs[0].value, format!("ml-{group}"));
        assert_eq!(errs[0].what, "EKS node group name");
        // A name that leaves the group key no room is the name's fault: it is
        // named, with the length that would fit beside "-cpu".
        let name = "n".repeat(62);
        let errs = names_error(&format!("name = \"{name}\"\nregion = \"us-east-1\""));
        let e = errs
            .iter()
            .find(|e| e.what == "EKS node group name")
            .expect("the node group name breaks its rule");
        assert_eq!(
            (e.field.as_str(), e.input.as_str()),
            ("name", name.as_str())
        );
        assert!(
            e.to_string()
                .ends_with("name may be at most 59 characters here"),
            "{e}"
        );
    }

    #[test]
    fn namespace_and_sagemaker_role_are_checked() {
        let errs = names_error(
            "name = \"ml\"\nregion = \"us-east-1\"\n[options]\nuser_namespace = \"Team_A\"\nsagemaker_role_name = \"sage maker\"",
        );
        let fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["options.sagemaker_role_name", "options.user_namespace"]
        );
    }

    /// Training job names are generated (`kfaws-train-<time>-<suffix>`) or
    /// given to `kfaws train`, never derived from the deployment name, so
    /// the deployment name is not held to the job-name rules (RFC 1035
    /// labels start with a letter; EKS cluster names may start with a digit).
    #[test]
    fn deployment_names_are_not_held_to_training_job_rules() {
        let c = resolve("name = \"1ml\"\nregion = \"us-east-1\"").unwrap();
        assert!(c
            .derived_names()
            .iter()
            .all(|d| d.rule.what != "SageMaker training job name"
                && d.rule.what != "Kubernetes RFC 1035 label"));
    }
}
