//! The trust and permissions of the roles a stack makes (`stack.irsa`,
//! case C13, and `stack.iam`): who may assume each role, and which
//! policies it holds.
//!
//! Each role of `stacks/irsa.yaml` trusts exactly one Kubernetes service
//! account: one statement allowing `sts:AssumeRoleWithWebIdentity` to the
//! cluster's OIDC provider with `StringEquals` on `<issuer>:sub`
//! (`system:serviceaccount:<namespace>:<name>`) and `<issuer>:aud`
//! (`sts.amazonaws.com`) (EKS User Guide, "Configure a Kubernetes service
//! account to assume an IAM role"). Each role of `stacks/iam.yaml` trusts
//! exactly one AWS service principal with `sts:AssumeRole`
//! (`eks.amazonaws.com`, `ec2.amazonaws.com`, `sagemaker.amazonaws.com`:
//! EKS User Guide, "Amazon EKS cluster IAM role" and "Amazon EKS node IAM
//! role"; SageMaker Developer Guide, "How to use SageMaker AI execution
//! roles"). An `UpdateAssumeRolePolicy` or `AttachRolePolicy` made outside
//! kfaws changes neither the stack's template nor its parameters, so the
//! stack itself looks unchanged; [`TrustGuard`] reads the roles' trust
//! policies (`GetRole`, whose document is URL-encoded, RFC 3986) and their
//! policy lists (`ListRolePolicies`, `ListAttachedRolePolicies`) so that
//! such an edit (another account's principal added to the node role's
//! trust, `AdministratorAccess` attached to it, a template policy
//! detached) is drift; after an update it writes the trust policy the
//! template declares back, removes the policies the template does not have
//! and attaches the managed ones it has. The content of the template's own
//! inline policies is compared by CloudFormation's drift detection
//! ([`super::drift`]): a document edited outside kfaws is drift, and apply
//! writes back the document CloudFormation expects (`PutRolePolicy`), as it
//! does for one deleted outside kfaws from a role of `stack.iam`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_iam::error::ProvideErrorMetadata as _;
use serde_json::{json, Map, Value};

use super::error_message;
use crate::resource::{Guard, ResourceError};
use crate::state::ResourceState;

/// The audience every IRSA token is issued for (EKS User Guide, "IAM
/// roles for service accounts").
pub const AUDIENCE: &str = "sts.amazonaws.com";

/// The spec field holding each role's trust, by template resource.
pub const FIELD: &str = "trust";

/// The spec field holding each role's policies (inline names, managed
/// ARNs), by template resource: a policy attached outside kfaws (say
/// `AdministratorAccess`) is drift, and apply removes it.
pub const POLICIES: &str = "policies";

/// The key of a role's [`FIELD`] entry holding a permissions boundary set
/// outside kfaws (IAM User Guide, "Permissions boundaries for IAM
/// entities"); absent when there is none, as the templates declare.
pub const BOUNDARY: &str = "permissions_boundary";

/// The stack parameter naming the OIDC provider's ARN.
pub const PROVIDER_PARAMETER: &str = "OidcProviderArn";

/// The stack parameter holding the issuer URL without `https://`.
pub const ISSUER_PARAMETER: &str = "OidcIssuerHostPath";

/// Whom a role's trust policy lets assume it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trustee {
    /// One Kubernetes service account, `system:serviceaccount:<ns>:<name>`,
    /// through the cluster's OIDC provider (IRSA; [`document`]).
    ServiceAccount(String),
    /// One AWS service principal, e.g. `eks.amazonaws.com`
    /// ([`service_document`]).
    Service(&'static str),
}

/// One role of the stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedRole {
    /// The template's logical resource id, e.g. `EfsCsiControllerRole`.
    pub resource: &'static str,
    /// The stack parameter holding the role name.
    pub parameter: &'static str,
    /// The role name the config asks for.
    pub name: String,
    /// Whom it trusts.
    pub trustee: Trustee,
    /// The names of its inline policies in the template.
    pub inline: Vec<&'static str>,
    /// The ARNs of the managed policies the template attaches
    /// ([`aws_managed_policy`]).
    pub managed: Vec<String>,
}

/// The ARN of the AWS managed policy `name` in `partition` (IAM User
/// Guide, "IAM ARNs": `arn:<partition>:iam::aws:policy/<name>`).
pub fn aws_managed_policy(partition: &str, name: &str) -> String {
    format!("arn:{partition}:iam::aws:policy/{name}")
}

/// The error of IAM call `call` on `target` (`role`, or `role policy`).
fn iam_error(call: &str, target: &str, message: String) -> ResourceError {
    ResourceError::msg(format!("{call} {target}: {message}"))
}

/// Watches and restores the trust policies and policy lists of a stack's
/// roles.
pub struct TrustGuard {
    /// The IAM client.
    pub iam: aws_sdk_iam::Client,
    /// The roles.
    pub roles: Vec<TrustedRole>,
    /// Whether a role or inline policy deleted outside kfaws makes the
    /// stack unhealthy, so the plan replaces it (CloudFormation recreates
    /// neither in an update): true for `stack.irsa`, whose replacement
    /// touches nothing else. False for `stack.iam`, whose replacement would
    /// take the cluster's KMS key with it: there a deleted service role
    /// without inline policies is recreated in place (same name, so the
    /// same ARN), and anything else is an error naming the remedy.
    pub replace_when_gone: bool,
    /// The CloudFormation client, for drift detection of the roles' inline
    /// policy documents ([`super::drift::inline_policies`]).
    pub cfn: aws_sdk_cloudformation::Client,
    /// The name of the stack that holds the roles.
    pub stack_name: String,
}

/// How [`grant`] names the subject or audience of a web-identity statement
/// that does not pin one with a condition.
const ANY: &str = "any (no condition)";

/// How [`grant`] names the cluster's own OIDC provider.
pub const CLUSTER_PROVIDER: &str = "the cluster's OIDC provider";

/// What a trust policy grants, as compared with the desired one: the
/// identity providers, subjects and audiences of its web-identity
/// statements. The template's policy reads `{"provider": CLUSTER_PROVIDER,
/// "subject": "system:serviceaccount:…", "audience": "sts.amazonaws.com"}`
/// when `provider_arn` is the cluster's provider; anything else (another or
/// a second provider or subject, a `StringLike` wildcard, a second
/// statement, one that pins no `:sub` or no `:aud`) reads differently and
/// so is drift. Pure.
pub fn grant(document: &Value, provider_arn: Option<&str>) -> Value {
    let statements = match document.get("Statement") {
        Some(Value::Array(list)) => list.clone(),
        Some(one) => vec![one.clone()],
        None => vec![],
    };
    let mut subjects = Vec::new();
    let mut audiences = Vec::new();
    let mut providers = Vec::new();
    let mut other = Vec::new();
    for st in &statements {
        let web_identity = st.get("Effect") == Some(&json!("Allow"))
            && values(st.get("Action"))
                .iter()
                .any(|a| a == "sts:AssumeRoleWithWebIdentity");
        if !web_identity {
            other.push(st.clone());
            continue;
        }
        match st.get("Principal") {
            Some(Value::Object(principals)) => {
                for (kind, who) in principals {
                    for arn in values(Some(who)) {
                        providers.push(
                            if kind == "Federated" && Some(arn.as_str()) == provider_arn {
                                CLUSTER_PROVIDER.to_string()
                            } else {
                                format!("{kind} {arn}")
                            },
                        );
                    }
                }
            }
            other => providers.push(format!("Principal {}", other.unwrap_or(&Value::Null))),
        }
        let conditions = st.get("Condition").and_then(Value::as_object);
        // Each statement pins its own subject and audience: a second
        // statement without them (`{}`, or only `:aud`) lets every service
        // account of the provider assume the role, whatever the first pins.
        let (mut pins_subject, mut pins_audience) = (false, false);
        for (operator, keys) in conditions.into_iter().flatten() {
            let prefix = if operator == "StringEquals" {
                String::new()
            } else {
                format!("{operator} ")
            };
            for (key, value) in keys.as_object().into_iter().flatten() {
                let into = if key.ends_with(":sub") {
                    pins_subject = true;
                    &mut subjects
                } else if key.ends_with(":aud") {
                    pins_audience = true;
                    &mut audiences
                } else {
                    continue;
                };
                into.extend(
                    values(Some(value))
                        .into_iter()
                        .map(|v| format!("{prefix}{v}")),
                );
            }
        }
        if !pins_subject {
            // Any service account of the provider.
            subjects.push(ANY.into());
        }
        if !pins_audience {
            audiences.push(ANY.into());
        }
    }
    let one_or_all = |mut v: Vec<String>| {
        v.sort();
        v.dedup();
        match v.as_slice() {
            [one] => json!(one),
            _ => json!(v),
        }
    };
    let mut grant = json!({
        "provider": one_or_all(providers),
        "subject": one_or_all(subjects),
        "audience": one_or_all(audiences),
    });
    if !other.is_empty() {
        grant["other_statements"] = json!(other);
    }
    grant
}

fn values(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(list)) => list
            .iter()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
            .collect(),
        _ => vec![],
    }
}

/// What a service role's trust policy grants, as compared with the
/// desired one: `{"service": "eks.amazonaws.com"}` for the one statement
/// allowing `sts:AssumeRole` to one service principal without a
/// condition, which `stacks/iam.yaml` declares; another or a second
/// service reads differently, and any other statement (another account's
/// principal, a web identity, a condition) is listed under
/// `other_statements`, so it is drift. Pure.
pub fn service_grant(document: &Value) -> Value {
    let statements = match document.get("Statement") {
        Some(Value::Array(list)) => list.clone(),
        Some(one) => vec![one.clone()],
        None => vec![],
    };
    let mut services = Vec::new();
    let mut other = Vec::new();
    for st in statements {
        let principals = st.get("Principal").and_then(Value::as_object);
        let service_only = principals.is_some_and(|p| p.len() == 1 && p.contains_key("Service"));
        let plain = st.get("Effect") == Some(&json!("Allow"))
            && values(st.get("Action")) == ["sts:AssumeRole"]
            && st.get("Condition").is_none()
            && service_only;
        match (plain, principals.and_then(|p| p.get("Service"))) {
            (true, Some(who)) => services.extend(values(Some(who))),
            _ => other.push(st),
        }
    }
    services.sort();
    services.dedup();
    let mut grant = match services.as_slice() {
        [one] => json!({"service": one}),
        _ => json!({"service": services}),
    };
    if !other.is_empty() {
        grant["other_statements"] = json!(other);
    }
    grant
}

/// The trust policy `stacks/iam.yaml` declares for a role `service`
/// assumes. Pure.
pub fn service_document(service: &str) -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": service},
            "Action": "sts:AssumeRole"
        }]
    })
}

/// The trust policy `stacks/irsa.yaml` declares for a role trusting
/// `subject` through the provider `provider_arn` whose issuer, without
/// `https://`, is `issuer`. Pure.
pub fn document(provider_arn: &str, issuer: &str, subject: &str) -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                format!("{issuer}:sub"): subject,
                format!("{issuer}:aud"): AUDIENCE,
            }}
        }]
    })
}

impl TrustedRole {
    fn desired(&self) -> Value {
        match &self.trustee {
            Trustee::ServiceAccount(subject) => {
                json!({"provider": CLUSTER_PROVIDER, "subject": subject, "audience": AUDIENCE})
            }
            Trustee::Service(service) => json!({"service": service}),
        }
    }

    fn desired_policies(&self) -> Value {
        let mut inline = self.inline.clone();
        inline.sort_unstable();
        let mut managed = self.managed.clone();
        managed.sort();
        json!({"inline": inline, "managed": managed})
    }
}

/// The key of a role's [`POLICIES`] entry holding its inline policies
/// whose document was edited outside kfaws (policy name → differences,
/// [`super::drift::InlineDrift::edited`]); absent when there are none, as
/// the template declares.
pub const EDITED: &str = "edited";

/// A role's policies as [`POLICIES`] holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Policies {
    inline: Vec<String>,
    managed: Vec<String>,
}

impl Policies {
    fn json(&self) -> Value {
        json!({"inline": self.inline, "managed": self.managed})
    }
}

impl TrustGuard {
    /// The live grant of `role` named `name` ([`grant`] with `provider`
    /// the cluster's OIDC provider, or [`service_grant`]), or `None` when
    /// the role does not exist.
    async fn live(
        &self,
        role: &TrustedRole,
        name: &str,
        provider: Option<&str>,
    ) -> Result<Option<Value>, ResourceError> {
        let live = match self.iam.get_role().role_name(name).send().await {
            Ok(out) => out.role,
            Err(e) if e.code() == Some("NoSuchEntity") => return Ok(None),
            Err(e) => {
                return Err(ResourceError::msg(format!(
                    "GetRole {name}: {}",
                    error_message(&e)
                )))
            }
        };
        let Some(text) = live.as_ref().and_then(|r| r.assume_role_policy_document()) else {
            return Ok(Some(json!(null)));
        };
        // IAM returns the document URL-encoded (IAM API Reference, Role);
        // some implementations return it plain.
        let text = if text.trim_start().starts_with('{') {
            text.to_string()
        } else {
            percent_encoding::percent_decode_str(text)
                .decode_utf8_lossy()
                .into_owned()
        };
        let doc: Value = serde_json::from_str(&text).map_err(|e| {
            ResourceError::msg(format!(
                "the trust policy of IAM role {name} is not JSON: {e}"
            ))
        })?;
        let mut granted = match role.trustee {
            Trustee::ServiceAccount(_) => grant(&doc, provider),
            Trustee::Service(_) => service_grant(&doc),
        };
        // A permissions boundary caps what the role may do (AWSDenyAll on
        // the cluster role stops EKS); the templates set none.
        if let Some(boundary) = live
            .as_ref()
            .and_then(|r| r.permissions_boundary())
            .and_then(|b| b.permissions_boundary_arn())
        {
            granted[BOUNDARY] = json!(boundary);
        }
        Ok(Some(granted))
    }

    /// The role's inline policy names and attached managed policy ARNs,
    /// sorted (one page each: a role holds at most 10 managed policies by
    /// default, IAM quotas).
    async fn policies(&self, name: &str) -> Result<Policies, ResourceError> {
        let fail = |call: &str, e: String| iam_error(call, name, e);
        let inline = self
            .iam
            .list_role_policies()
            .role_name(name)
            .send()
            .await
            .map_err(|e| fail("ListRolePolicies", error_message(&e)))?;
        let managed = self
            .iam
            .list_attached_role_policies()
            .role_name(name)
            .send()
            .await
            .map_err(|e| fail("ListAttachedRolePolicies", error_message(&e)))?;
        let mut inline: Vec<String> = inline.policy_names().to_vec();
        let mut managed: Vec<String> = managed
            .attached_policies()
            .iter()
            .filter_map(|p| p.policy_arn().map(str::to_string))
            .collect();
        inline.sort();
        managed.sort();
        Ok(Policies { inline, managed })
    }

    /// The names of the role's inline policies when the stack was last
    /// applied (the recorded [`POLICIES`]); none for a state recorded
    /// before kfaws watched them.
    fn applied_inline(role: &TrustedRole, recorded: &ResourceState) -> Vec<String> {
        recorded
            .spec
            .get(POLICIES)
            .and_then(|p| p.get(role.resource))
            .and_then(|r| r.get("inline"))
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Recreates the service role `name` deleted outside kfaws, as the
    /// template declares it: its trust policy, the deployment tag and its
    /// managed policies. Only for roles without inline policies, whose
    /// documents only the template holds.
    async fn recreate(
        &self,
        role: &TrustedRole,
        name: &str,
        service: &str,
        parameters: &BTreeMap<String, String>,
    ) -> Result<(), ResourceError> {
        let fail = |call: &str, e: String| iam_error(call, name, e);
        tracing::warn!(role = %name, "recreating an IAM role deleted outside kfaws");
        let mut create = self
            .iam
            .create_role()
            .role_name(name)
            .assume_role_policy_document(service_document(service).to_string());
        if let Some(deployment) = parameters.get("Deployment") {
            create = create.tags(
                aws_sdk_iam::types::Tag::builder()
                    .key(super::stack::DEPLOYMENT_TAG)
                    .value(deployment)
                    .build()
                    .map_err(|e| fail("CreateRole", e.to_string()))?,
            );
        }
        create
            .send()
            .await
            .map_err(|e| fail("CreateRole", error_message(&e)))?;
        for arn in &role.managed {
            self.attach(name, arn).await?;
        }
        Ok(())
    }

    /// CloudFormation's drift detection of `role`'s inline policies.
    async fn inline_drift(
        &self,
        role: &TrustedRole,
    ) -> Result<super::drift::InlineDrift, ResourceError> {
        super::drift::inline_policies(&self.cfn, &self.stack_name, role.resource).await
    }

    /// Attaches the managed policy `arn` to role `name`.
    async fn attach(&self, name: &str, arn: &str) -> Result<(), ResourceError> {
        self.iam
            .attach_role_policy()
            .role_name(name)
            .policy_arn(arn)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| {
                iam_error(
                    "AttachRolePolicy",
                    &format!("{name} {arn}"),
                    error_message(&e),
                )
            })
    }

    /// The error for what kfaws cannot rebuild in place in a stack it must
    /// not replace (`stack.iam`: its replacement would take the cluster's
    /// KMS key).
    fn not_rebuilt(name: &str, what: &str) -> ResourceError {
        ResourceError::msg(format!(
            "IAM role {name}: {what} was deleted outside kfaws, and kfaws cannot rebuild it in \
             place (only the template holds its policy document; CloudFormation recreates it only \
             in a new stack, which would also replace the cluster's KMS key and so the cluster). \
             Recreate it by hand as stacks/iam.yaml declares it, or `kfaws destroy` and apply again"
        ))
    }

    /// The role's name as applied: the recorded parameter, else the config's.
    fn recorded_name<'a>(role: &'a TrustedRole, recorded: &'a ResourceState) -> &'a str {
        recorded
            .spec
            .get("parameters")
            .and_then(|p| p.get(role.parameter))
            .and_then(Value::as_str)
            .unwrap_or(&role.name)
    }
}

#[async_trait]
impl Guard for TrustGuard {
    fn desired(&self) -> Map<String, Value> {
        let trust: Map<String, Value> = self
            .roles
            .iter()
            .map(|r| (r.resource.to_string(), r.desired()))
            .collect();
        let policies: Map<String, Value> = self
            .roles
            .iter()
            .map(|r| (r.resource.to_string(), r.desired_policies()))
            .collect();
        Map::from_iter([
            (FIELD.to_string(), Value::Object(trust)),
            (POLICIES.to_string(), Value::Object(policies)),
        ])
    }

    async fn observe(
        &self,
        recorded: &ResourceState,
        parameters: &BTreeMap<String, String>,
    ) -> Result<Map<String, Value>, ResourceError> {
        let provider = parameters.get(PROVIDER_PARAMETER).map(String::as_str);
        let mut trust = Map::new();
        let mut policies = Map::new();
        let mut gone = Vec::new();
        for role in &self.roles {
            let name = Self::recorded_name(role, recorded);
            match self.live(role, name, provider).await? {
                Some(grant) => {
                    trust.insert(role.resource.to_string(), grant);
                    let live = self.policies(name).await?;
                    // The inline policies as last applied, not as the config
                    // now asks: a config that adds one is a change, not a loss.
                    for missing in Self::applied_inline(role, recorded)
                        .into_iter()
                        .filter(|p| !live.inline.contains(p))
                    {
                        gone.push(format!("inline policy {missing} of {name}"));
                    }
                    let mut seen = live.json();
                    if !live.inline.is_empty() {
                        let drift = self.inline_drift(role).await?;
                        if !drift.edited.is_empty() {
                            seen[EDITED] = json!(drift.edited);
                        }
                    }
                    policies.insert(role.resource.to_string(), seen);
                }
                None => gone.push(name.to_string()),
            }
        }
        let mut observed = Map::from_iter([
            (FIELD.to_string(), Value::Object(trust)),
            (POLICIES.to_string(), Value::Object(policies)),
        ]);
        if !gone.is_empty() && self.replace_when_gone {
            // CloudFormation does not recreate a resource deleted behind its
            // back; only a new stack brings the role back. (Otherwise the
            // missing entries of `trust` and `policies` are the drift.)
            observed.insert(
                "health".into(),
                json!(format!(
                    "IAM role(s) {} deleted outside kfaws",
                    gone.join(", ")
                )),
            );
        }
        Ok(observed)
    }

    async fn repair(&self, parameters: &BTreeMap<String, String>) -> Result<(), ResourceError> {
        let param = |key: &str| {
            parameters
                .get(key)
                .ok_or_else(|| ResourceError::msg(format!("stack parameter {key} is not set")))
        };
        for role in &self.roles {
            let name = param(role.parameter)?;
            let provider = match role.trustee {
                Trustee::ServiceAccount(_) => Some(param(PROVIDER_PARAMETER)?.as_str()),
                Trustee::Service(_) => None,
            };
            let Some(live) = self.live(role, name, provider).await? else {
                match &role.trustee {
                    Trustee::Service(service) if !self.replace_when_gone && role.inline.is_empty() => {
                        self.recreate(role, name, service, parameters).await?;
                        continue;
                    }
                    _ if self.replace_when_gone => {
                        return Err(ResourceError::msg(format!(
                            "IAM role {name} was deleted outside kfaws; CloudFormation does not \
                             recreate it in an update. Run `kfaws plan` again: it replaces the stack"
                        )))
                    }
                    _ => return Err(Self::not_rebuilt(name, "the role")),
                }
            };
            let policies = self.policies(name).await?;
            if !role.inline.is_empty() {
                // Deleted or edited outside kfaws: CloudFormation's
                // expected document goes back.
                let drift = self.inline_drift(role).await?;
                for policy in &role.inline {
                    let missing = !policies.inline.iter().any(|l| l == policy);
                    if !missing && !drift.edited.contains_key(*policy) {
                        continue;
                    }
                    let Some(document) = drift.expected.get(*policy) else {
                        return Err(Self::not_rebuilt(
                            name,
                            &format!("its inline policy {policy}"),
                        ));
                    };
                    tracing::warn!(role = %name, %policy, missing, "restoring an inline policy changed outside kfaws");
                    self.iam
                        .put_role_policy()
                        .role_name(name)
                        .policy_name(*policy)
                        .policy_document(document.to_string())
                        .send()
                        .await
                        .map_err(|e| {
                            iam_error(
                                "PutRolePolicy",
                                &format!("{name} {policy}"),
                                error_message(&e),
                            )
                        })?;
                }
            }
            for extra in policies
                .inline
                .iter()
                .filter(|p| !role.inline.contains(&p.as_str()))
            {
                tracing::warn!(role = %name, policy = %extra, "deleting an inline policy added outside kfaws");
                self.iam
                    .delete_role_policy()
                    .role_name(name)
                    .policy_name(extra)
                    .send()
                    .await
                    .map_err(|e| {
                        iam_error(
                            "DeleteRolePolicy",
                            &format!("{name} {extra}"),
                            error_message(&e),
                        )
                    })?;
            }
            for extra in policies
                .managed
                .iter()
                .filter(|p| !role.managed.contains(p))
            {
                tracing::warn!(role = %name, policy = %extra, "detaching a policy attached outside kfaws");
                self.iam
                    .detach_role_policy()
                    .role_name(name)
                    .policy_arn(extra)
                    .send()
                    .await
                    .map_err(|e| {
                        iam_error(
                            "DetachRolePolicy",
                            &format!("{name} {extra}"),
                            error_message(&e),
                        )
                    })?;
            }
            for missing in role
                .managed
                .iter()
                .filter(|p| !policies.managed.contains(p))
            {
                tracing::warn!(role = %name, policy = %missing, "attaching a policy detached outside kfaws");
                self.attach(name, missing).await?;
            }
            let mut live = live;
            if let Some(boundary) = live.as_object_mut().and_then(|o| o.remove(BOUNDARY)) {
                tracing::warn!(role = %name, %boundary, "removing a permissions boundary set outside kfaws");
                self.iam
                    .delete_role_permissions_boundary()
                    .role_name(name)
                    .send()
                    .await
                    .map_err(|e| {
                        iam_error("DeleteRolePermissionsBoundary", name, error_message(&e))
                    })?;
            }
            if live == role.desired() {
                continue;
            }
            let doc = match &role.trustee {
                Trustee::ServiceAccount(subject) => document(
                    param(PROVIDER_PARAMETER)?,
                    param(ISSUER_PARAMETER)?,
                    subject,
                ),
                Trustee::Service(service) => service_document(service),
            };
            tracing::warn!(role = %name, "restoring the trust policy changed outside kfaws");
            self.iam
                .update_assume_role_policy()
                .role_name(name)
                .policy_document(doc.to_string())
                .send()
                .await
                .map_err(|e| iam_error("UpdateAssumeRolePolicy", name, error_message(&e)))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUER: &str = "oidc.eks.us-east-1.amazonaws.com/id/ABC";
    const SA: &str = "system:serviceaccount:kube-system:efs-csi-controller-sa";
    const PROVIDER: &str = "arn:aws:iam::1:oidc-provider/x";

    #[test]
    fn the_declared_policy_grants_one_subject_for_sts() {
        let doc = document(PROVIDER, ISSUER, SA);
        assert_eq!(
            grant(&doc, Some(PROVIDER)),
            json!({"provider": CLUSTER_PROVIDER, "subject": SA, "audience": AUDIENCE})
        );
        // Another provider (another cluster's, or any identity provider of
        // the account) is seen by its ARN.
        let other = document("arn:aws:iam::1:oidc-provider/other", ISSUER, SA);
        assert_eq!(
            grant(&other, Some(PROVIDER))["provider"],
            "Federated arn:aws:iam::1:oidc-provider/other"
        );
    }

    #[test]
    fn another_subject_a_wildcard_or_a_missing_condition_reads_differently() {
        let mut other = document("p", ISSUER, SA);
        other["Statement"][0]["Condition"]["StringEquals"][format!("{ISSUER}:sub")] =
            json!("system:serviceaccount:kube-system:some-other-sa");
        assert_eq!(
            grant(&other, None)["subject"],
            "system:serviceaccount:kube-system:some-other-sa"
        );

        let mut wildcard = document("p", ISSUER, SA);
        let cond = wildcard["Statement"][0]["Condition"]
            .as_object_mut()
            .unwrap();
        let sub = cond["StringEquals"]
            .as_object_mut()
            .unwrap()
            .remove(&format!("{ISSUER}:sub"))
            .unwrap();
        cond.insert(
            "StringLike".into(),
            json!({format!("{ISSUER}:sub"): sub.as_str().unwrap().replace("efs-csi-controller-sa", "*")}),
        );
        assert_eq!(
            grant(&wildcard, None)["subject"],
            "StringLike system:serviceaccount:kube-system:*"
        );

        let mut open = document("p", ISSUER, SA);
        open["Statement"][0]
            .as_object_mut()
            .unwrap()
            .remove("Condition");
        assert_eq!(grant(&open, None)["subject"], "any (no condition)");
        assert_eq!(grant(&open, None)["audience"], "any (no condition)");
    }

    #[test]
    fn a_second_statement_that_pins_no_subject_is_drift_whatever_the_first_pins() {
        let declared = grant(&document(PROVIDER, ISSUER, SA), Some(PROVIDER));
        let audience_only = json!({
            "Effect": "Allow",
            "Principal": {"Federated": PROVIDER},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {format!("{ISSUER}:aud"): AUDIENCE}}
        });
        let mut empty = audience_only.clone();
        empty["Condition"] = json!({});
        let mut subject_only = document(PROVIDER, ISSUER, SA)["Statement"][0].clone();
        subject_only["Condition"]["StringEquals"]
            .as_object_mut()
            .unwrap()
            .remove(&format!("{ISSUER}:aud"));
        for extra in [audience_only, empty, subject_only] {
            let mut doc = document(PROVIDER, ISSUER, SA);
            doc["Statement"].as_array_mut().unwrap().push(extra.clone());
            let g = grant(&doc, Some(PROVIDER));
            assert_ne!(g, declared, "{extra}");
            assert!(g.to_string().contains("any (no condition)"), "{g}");
        }
    }

    #[test]
    fn a_service_role_grants_its_one_service_and_anything_else_is_seen() {
        let doc = service_document("ec2.amazonaws.com");
        assert_eq!(service_grant(&doc), json!({"service": "ec2.amazonaws.com"}));

        // Another account's principal added beside the service.
        let mut doc = service_document("ec2.amazonaws.com");
        doc["Statement"][0]["Principal"]["AWS"] = json!("arn:aws:iam::2:root");
        let g = service_grant(&doc);
        assert_eq!(g["service"], json!([]));
        assert_eq!(
            g["other_statements"][0]["Principal"]["AWS"],
            "arn:aws:iam::2:root"
        );

        // A second service, as a list, and a statement of its own.
        let mut doc = service_document("ec2.amazonaws.com");
        doc["Statement"][0]["Principal"]["Service"] =
            json!(["ec2.amazonaws.com", "lambda.amazonaws.com"]);
        assert_eq!(
            service_grant(&doc)["service"],
            json!(["ec2.amazonaws.com", "lambda.amazonaws.com"])
        );
        let mut doc = service_document("eks.amazonaws.com");
        let extra =
            json!({"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"});
        doc["Statement"].as_array_mut().unwrap().push(extra.clone());
        let g = service_grant(&doc);
        assert_eq!(g["service"], "eks.amazonaws.com");
        assert_eq!(g["other_statements"], json!([extra]));

        // A condition or another action is not the declared statement.
        let mut doc = service_document("eks.amazonaws.com");
        doc["Statement"][0]["Action"] = json!(["sts:AssumeRole", "sts:TagSession"]);
        assert!(service_grant(&doc).get("other_statements").is_some());
        let mut doc = service_document("eks.amazonaws.com");
        doc["Statement"][0]["Condition"] = json!({"StringEquals": {"aws:SourceAccount": "1"}});
        assert!(service_grant(&doc).get("other_statements").is_some());
    }

    #[test]
    fn aws_managed_policy_arns_name_the_partition() {
        assert_eq!(
            aws_managed_policy("aws-cn", "AmazonEKSClusterPolicy"),
            "arn:aws-cn:iam::aws:policy/AmazonEKSClusterPolicy"
        );
    }

    #[test]
    fn a_second_statement_or_subject_is_seen() {
        let mut doc = document("p", ISSUER, SA);
        doc["Statement"][0]["Condition"]["StringEquals"][format!("{ISSUER}:sub")] =
            json!([SA, "system:serviceaccount:default:x"]);
        assert_eq!(
            grant(&doc, None)["subject"],
            json!(["system:serviceaccount:default:x", SA])
        );

        let mut doc = document("p", ISSUER, SA);
        let extra = json!({"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::2:root"}, "Action": "sts:AssumeRole"});
        doc["Statement"].as_array_mut().unwrap().push(extra.clone());
        let g = grant(&doc, None);
        assert_eq!(g["subject"], SA);
        assert_eq!(g["other_statements"], json!([extra]));
    }
}
