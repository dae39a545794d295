//! An EKS access entry with its access policy (`aws_eks_access_entry`): an
//! IAM principal admitted to the cluster's Kubernetes API.
//!
//! Without one, only the identity that created the cluster can use it (EKS
//! User Guide, "Grant IAM users access to Kubernetes with EKS access
//! entries"). Calls follow the Amazon EKS API Reference:
//! - create sends `CreateAccessEntry` (type `STANDARD`) with the idempotency
//!   token as `clientRequestToken`; an entry for the principal that exists
//!   already is re-attached to only if it carries this deployment's tags
//!   (an earlier, unrecorded create), else refused at plan: EKS admits one
//!   entry per principal, and the cluster creator's own entry (made by EKS
//!   with the cluster) is one;
//! - the entry holds exactly one access policy, associated with
//!   `AssociateAccessPolicy` (which replaces the scope of a policy already
//!   associated); any other policy associated with it outside kfaws is drift
//!   and apply disassociates it;
//! - the principal cannot change in place (`principalArn` is the entry's
//!   key): a new principal replaces the entry;
//! - delete sends `DeleteAccessEntry` (which removes its associations); an
//!   entry or cluster already gone is success.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_eks::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_eks::types::{AccessEntry, AccessScope, AccessScopeType};
use aws_sdk_eks::Client;
use serde_json::{json, Value};

use super::{code, is_not_found, owned, tags};
use crate::address::Address;
use crate::aws::error_message;
use crate::aws::stack::DEPLOYMENT_TAG;
use crate::plan::Action;
use crate::resource::{Applied, Check, Detail, Inputs, Observed, Outputs, Resource, ResourceError};
use crate::state::ResourceState;

/// The only access entry type kfaws makes: a principal using the
/// Kubernetes API (EKS API Reference, `CreateAccessEntry.type`; the other
/// types are for nodes).
pub const STANDARD: &str = "STANDARD";

/// One access entry.
pub struct AccessEntryResource {
    /// Graph address, `eks.access_entry.<name>`.
    pub address: Address,
    /// The cluster it admits to, `eks.cluster`.
    pub cluster: Address,
    /// The EKS cluster's name.
    pub cluster_name: String,
    /// The IAM role or user ARN (validated by [`crate::config`]).
    pub principal_arn: String,
    /// The access policy's ARN,
    /// `arn:<partition>:eks::aws:cluster-access-policy/<name>`.
    pub policy_arn: String,
    /// The namespaces of the policy's scope, sorted; `None`: the cluster.
    pub namespaces: Option<Vec<String>>,
    /// The deployment, written as the deployment tag.
    pub deployment: String,
    /// The lineage of the state, written as the lineage tag.
    pub lineage: String,
    /// The client.
    pub client: Client,
    /// STS, to tell whether the principal is the identity running kfaws (the cluster's
    /// creator when the cluster does not exist yet) and which account that is.
    pub sts: aws_sdk_sts::Client,
    /// IAM, to tell whether a principal of that account exists.
    pub iam: aws_sdk_iam::Client,
}

/// A principal ARN's `(account, "role" | "user", name)`:
/// `arn:<p>:iam::<account>:role/<path>/<name>` (IAM User Guide, "IAM identifiers"); `None`
/// for anything else.
fn principal_parts(principal: &str) -> Option<(&str, &str, &str)> {
    let mut parts = principal.splitn(6, ':').skip(4);
    let (account, resource) = (parts.next()?, parts.next()?);
    let (kind, path) = resource.split_once('/')?;
    let name = path.rsplit('/').next()?;
    matches!(kind, "role" | "user").then_some((account, kind, name))
}

/// The IAM principal behind a caller ARN as STS GetCallerIdentity gives it, as `(account,
/// "role" | "user", name)`: `arn:<p>:sts::<account>:assumed-role/<role>/<session>` is the role
/// (STS drops the role's path), `arn:<p>:iam::<account>:user/<path>/<name>` the user; the
/// account root and federated users are neither (`None`). IAM User Guide, "IAM identifiers".
pub(crate) fn caller_principal(caller: &str) -> Option<(&str, &'static str, &str)> {
    let mut parts = caller.splitn(6, ':').skip(4);
    let (account, resource) = (parts.next()?, parts.next()?);
    if let Some(rest) = resource.strip_prefix("assumed-role/") {
        return Some((account, "role", rest.split('/').next()?));
    }
    let name = resource.strip_prefix("user/")?.rsplit('/').next()?;
    Some((account, "user", name))
}

/// Whether `principal` (an IAM role or user ARN) is the IAM principal behind `caller`:
/// same account, kind and name (IAM names are unique ignoring case, and STS drops a role's
/// path, so the path is not compared).
pub(crate) fn is_caller(principal: &str, caller: &str) -> bool {
    let Some((account, kind, name)) = caller_principal(caller) else {
        return false;
    };
    let mut parts = principal.splitn(6, ':').skip(4);
    let (Some(configured_account), Some(resource)) = (parts.next(), parts.next()) else {
        return false;
    };
    let Some((configured_kind, path)) = resource.split_once('/') else {
        return false;
    };
    configured_account == account
        && configured_kind == kind
        && path
            .rsplit('/')
            .next()
            .is_some_and(|n| n.eq_ignore_ascii_case(name))
}

/// Whether EKS refused an access entry call because the cluster's
/// authentication mode is `CONFIG_MAP` (`InvalidRequestException`: "The
/// cluster's authentication mode must be set to one of [API,
/// API_AND_CONFIG_MAP] to perform this operation"): such a cluster has no
/// access entries.
fn mode_refuses_entries<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    code(e) == Some("InvalidRequestException")
        && e.as_service_error()
            .and_then(ProvideErrorMetadata::message)
            .is_some_and(|m| m.contains("authentication mode"))
}

/// A policy's scope as the spec writes it: `{"type": "cluster"}` or
/// `{"type": "namespace", "namespaces": [sorted]}`.
fn scope_json(scope: Option<&AccessScope>) -> Value {
    match scope {
        Some(s) if s.r#type() == Some(&AccessScopeType::Namespace) => {
            let mut namespaces = s.namespaces().to_vec();
            namespaces.sort();
            json!({"type": "namespace", "namespaces": namespaces})
        }
        _ => json!({"type": "cluster"}),
    }
}

impl AccessEntryResource {
    fn what(&self) -> String {
        format!(
            "EKS access entry for {} on cluster {}",
            self.principal_arn, self.cluster_name
        )
    }

    /// The entry of the configured principal, unless it or the cluster does not exist.
    async fn describe(&self) -> Result<Option<AccessEntry>, ResourceError> {
        self.describe_principal(&self.principal_arn).await
    }

    /// The entry of `principal`, unless it or the cluster does not exist.
    async fn describe_principal(
        &self,
        principal: &str,
    ) -> Result<Option<AccessEntry>, ResourceError> {
        match self
            .client
            .describe_access_entry()
            .cluster_name(&self.cluster_name)
            .principal_arn(principal)
            .send()
            .await
        {
            Ok(out) => Ok(out.access_entry().cloned()),
            Err(e) if is_not_found(&e) || mode_refuses_entries(&e) => Ok(None),
            Err(e) => Err(ResourceError::msg(format!(
                "DescribeAccessEntry {principal} on cluster {}: {}",
                self.cluster_name,
                error_message(&e)
            ))),
        }
    }

    /// The principal the state records for this entry (what exists), else the configured
    /// one: a changed `principal_arn` is read and deleted as the old principal's entry, so the
    /// plan shows the replacement and its delete removes the old entry.
    fn recorded_principal<'a>(&'a self, recorded: Option<&'a ResourceState>) -> &'a str {
        recorded
            .and_then(|r| r.spec.get("principal_arn"))
            .and_then(Value::as_str)
            .unwrap_or(&self.principal_arn)
    }

    /// The policies associated with the entry: ARN → scope ([`scope_json`]).
    /// One page of up to 100 (the API's largest `maxResults`): kfaws
    /// associates one, and EKS offers a dozen access policies in all
    /// (ListAccessPolicies), each associated at most once.
    async fn policies(&self, principal: &str) -> Result<BTreeMap<String, Value>, ResourceError> {
        let out = self
            .client
            .list_associated_access_policies()
            .cluster_name(&self.cluster_name)
            .principal_arn(principal)
            .max_results(100)
            .send()
            .await
            .map_err(|e| {
                ResourceError::msg(format!(
                    "ListAssociatedAccessPolicies {principal} on cluster {}: {}",
                    self.cluster_name,
                    error_message(&e)
                ))
            })?;
        Ok(out
            .associated_access_policies()
            .iter()
            .filter_map(|p| Some((p.policy_arn()?.to_string(), scope_json(p.access_scope()))))
            .collect())
    }

    fn scope(&self) -> AccessScope {
        match &self.namespaces {
            Some(ns) => AccessScope::builder()
                .r#type(AccessScopeType::Namespace)
                .set_namespaces(Some(ns.clone()))
                .build(),
            None => AccessScope::builder()
                .r#type(AccessScopeType::Cluster)
                .build(),
        }
    }

    fn desired_scope(&self) -> Value {
        match &self.namespaces {
            Some(ns) => json!({"type": "namespace", "namespaces": ns}),
            None => json!({"type": "cluster"}),
        }
    }

    /// Makes the entry grant exactly what the config says: no Kubernetes groups (each would
    /// add whatever RBAC binds to it), then the desired policy with its scope (associated
    /// unless it already is with this scope), then no other policy.
    async fn sync(&self, entry: &AccessEntry) -> Result<(), ResourceError> {
        if !entry.kubernetes_groups().is_empty() {
            self.client
                .update_access_entry()
                .cluster_name(&self.cluster_name)
                .principal_arn(&self.principal_arn)
                .set_kubernetes_groups(Some(Vec::new()))
                .send()
                .await
                .map_err(|e| {
                    ResourceError::msg(format!(
                        "UpdateAccessEntry {} (kubernetesGroups): {}",
                        self.what(),
                        error_message(&e)
                    ))
                })?;
        }
        self.sync_policies().await
    }

    /// Associates the desired policy with its scope unless it already is, then disassociates
    /// every other.
    async fn sync_policies(&self) -> Result<(), ResourceError> {
        let live = self.policies(&self.principal_arn).await?;
        if live.get(&self.policy_arn) != Some(&self.desired_scope()) {
            self.client
                .associate_access_policy()
                .cluster_name(&self.cluster_name)
                .principal_arn(&self.principal_arn)
                .policy_arn(&self.policy_arn)
                .access_scope(self.scope())
                .send()
                .await
                .map_err(|e| {
                    ResourceError::msg(format!(
                        "AssociateAccessPolicy {} with {}: {}",
                        self.policy_arn,
                        self.what(),
                        error_message(&e)
                    ))
                })?;
        }
        for other in live.keys().filter(|a| **a != self.policy_arn) {
            tracing::info!(entry = %self.address, policy = %other, "disassociating an access policy not in the config");
            match self
                .client
                .disassociate_access_policy()
                .cluster_name(&self.cluster_name)
                .principal_arn(&self.principal_arn)
                .policy_arn(other)
                .send()
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    return Err(ResourceError::msg(format!(
                        "DisassociateAccessPolicy {other} from {}: {}",
                        self.what(),
                        error_message(&e)
                    )))
                }
            }
        }
        Ok(())
    }

    fn applied(entry: &AccessEntry) -> Applied {
        let arn = entry.access_entry_arn().unwrap_or_default().to_string();
        let mut outputs = Outputs::new();
        outputs.insert("access_entry_arn".into(), json!(arn));
        outputs.insert("principal_arn".into(), json!(entry.principal_arn()));
        if let Some(user) = entry.username() {
            outputs.insert("username".into(), json!(user));
        }
        Applied {
            physical_id: arn,
            outputs,
        }
    }

    /// Whether `entry` is this deployment's ([`super::ours_or_retagged`]: the refusal when
    /// the state records it and its tags were changed by hand).
    fn ours_or_retagged(
        &self,
        entry: &AccessEntry,
        recorded: Option<&ResourceState>,
    ) -> Result<bool, ResourceError> {
        super::ours_or_retagged(
            entry.tags(),
            entry.access_entry_arn().unwrap_or_default(),
            recorded,
            &self.what(),
            &self.address,
            &self.deployment,
            &self.lineage,
        )
    }

    /// Why an existing entry for our principal is not ours to adopt.
    fn not_ours(&self, entry: &AccessEntry) -> ResourceError {
        if entry
            .tags()
            .is_some_and(|t| t.get(DEPLOYMENT_TAG) == Some(&self.deployment))
        {
            return super::foreign(&self.what(), entry.tags(), &self.deployment);
        }
        ResourceError::refused(format!(
            "{} already exists and this deployment did not create it (EKS admits one access \
             entry per principal). If it is the cluster creator's own entry, which EKS makes \
             with the cluster and which grants cluster admin, that principal has access \
             already: remove {} from kfaws.toml. Otherwise remove it from kfaws.toml too, or \
             delete that entry first (`aws eks delete-access-entry --cluster-name {} \
             --principal-arn {}`) and plan again",
            self.what(),
            self.config_table(),
            self.cluster_name,
            self.principal_arn
        ))
    }

    /// The config table this entry comes from, `[access_entries.<name>]`.
    fn config_table(&self) -> String {
        let name = self.address.as_str().rsplit('.').next().unwrap_or_default();
        format!("[access_entries.{name}]")
    }

    /// Refuses an entry for the identity running kfaws when the cluster does not exist yet:
    /// this apply creates it, and EKS then gives its creator an entry of its own, with cluster
    /// admin (`bootstrapClusterCreatorAdminPermissions`), on which CreateAccessEntry would fail
    /// minutes into the apply.
    async fn check_not_creator(&self, caller: &str) -> Result<(), ResourceError> {
        if super::describe_cluster(&self.client, &self.cluster_name)
            .await?
            .is_some()
        {
            return Ok(());
        }
        if !is_caller(&self.principal_arn, caller) {
            return Ok(());
        }
        Err(ResourceError::refused(format!(
            "{}: principal_arn {} is the identity running kfaws ({caller}), which creates \
             cluster {}; EKS gives a cluster's creator an access entry of its own, with cluster \
             admin, so this one would collide with it: remove {} from kfaws.toml",
            self.config_table(),
            self.principal_arn,
            self.cluster_name,
            self.config_table()
        )))
    }

    /// The ARN of the identity running kfaws (STS GetCallerIdentity).
    async fn caller(&self) -> Result<String, ResourceError> {
        match self.sts.get_caller_identity().send().await {
            Ok(out) => Ok(out.arn().unwrap_or_default().to_string()),
            Err(e) => Err(ResourceError::msg(format!(
                "GetCallerIdentity: {}",
                error_message(&e)
            ))),
        }
    }

    /// Refuses an entry for a principal of the account running kfaws (`caller`'s) that does
    /// not exist (IAM GetRole or GetUser answers `NoSuchEntity`): EKS resolves the principal
    /// when the entry is created (EKS User Guide, "Create access entries": an entry made
    /// before its principal does not work), so a typo in the ARN would fail the apply after
    /// the cluster's 15 minutes. A principal of another account cannot be read with these
    /// credentials and is left to EKS; so is one IAM does not let kfaws read (any other
    /// error: a warning).
    async fn check_principal_exists(&self, caller: &str) -> Result<(), ResourceError> {
        let Some((account, kind, name)) = principal_parts(&self.principal_arn) else {
            return Ok(());
        };
        // The caller's account is the fifth field of its ARN, whatever its kind.
        if caller.split(':').nth(4) != Some(account) {
            tracing::debug!(principal = %self.principal_arn, "principal of another account: not checked");
            return Ok(());
        }
        let missing = |e: &dyn ProvideErrorMetadata| e.code() == Some("NoSuchEntity");
        let (call, found) = if kind == "role" {
            let found = self.iam.get_role().role_name(name).send().await;
            (
                "GetRole",
                found
                    .map(|out| out.role().map(|r| r.arn().to_string()))
                    .map_err(|e| (missing(&e), error_message(&e))),
            )
        } else {
            let found = self.iam.get_user().user_name(name).send().await;
            (
                "GetUser",
                found
                    .map(|out| out.user().map(|u| u.arn().to_string()))
                    .map_err(|e| (missing(&e), error_message(&e))),
            )
        };
        // EKS takes a role's ARN with its path or without (EKS User Guide, "Create access
        // entries"); one with a path must have the principal's.
        let with_path = self.principal_arn.matches('/').count() > 1;
        match found {
            Ok(Some(arn)) if with_path && !arn.eq_ignore_ascii_case(&self.principal_arn) => {
                Err(ResourceError::refused(format!(
                    "{}: principal_arn {}: IAM {kind} {name} of account {account} is {arn} \
                     (IAM {call}): correct the path, or leave it out",
                    self.config_table(),
                    self.principal_arn,
                )))
            }
            Ok(_) => Ok(()),
            Err((true, _)) => Err(ResourceError::refused(format!(
                "{}: principal_arn {}: IAM {kind} {name} does not exist in account {account} \
                 (IAM {call}), and EKS creates no access entry for a principal that does not \
                 exist; create the {kind} first, or correct the ARN",
                self.config_table(),
                self.principal_arn,
            ))),
            Err((_, message)) => {
                tracing::warn!(principal = %self.principal_arn, "could not check that the principal exists (IAM {call}: {message}); EKS will say if it does not");
                Ok(())
            }
        }
    }
}

#[async_trait]
impl Resource for AccessEntryResource {
    fn address(&self) -> &Address {
        &self.address
    }

    fn kind(&self) -> &'static str {
        "aws_eks_access_entry"
    }

    fn dependencies(&self) -> Vec<Address> {
        vec![self.cluster.clone()]
    }

    fn spec(&self) -> Value {
        json!({
            "cluster_name": self.cluster_name,
            "principal_arn": self.principal_arn,
            "type": STANDARD,
            "kubernetes_groups": [],
            "access_policies": {self.policy_arn.clone(): self.desired_scope()},
        })
    }

    fn replace_fields(&self) -> &[&str] {
        &["cluster_name", "principal_arn", "type"]
    }

    /// EKS deletes a cluster's access entries with it.
    fn deleted_with(&self) -> Option<&Address> {
        Some(&self.cluster)
    }

    /// Whom the entry admits and with what, so that a plan (and a saved plan's reviewer)
    /// sees the grant before it is made.
    fn preview_create(&self) -> Vec<Detail> {
        let scope = match &self.namespaces {
            Some(ns) => format!("in namespaces {}", ns.join(", ")),
            None => "cluster-wide".to_string(),
        };
        let policy = self
            .policy_arn
            .rsplit('/')
            .next()
            .unwrap_or(&self.policy_arn);
        vec![Detail {
            action: "Add".into(),
            name: self.principal_arn.clone(),
            kind: "EKS access entry".into(),
            replacement: None,
            condition: None,
            note: Some(format!("{policy} {scope}")),
        }]
    }

    /// Seconds: two API calls.
    fn estimate(&self) -> Duration {
        Duration::from_secs(5)
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(5 * 60)
    }

    async fn importable(&self) -> Result<Option<String>, ResourceError> {
        Ok(self
            .describe()
            .await?
            .filter(|e| owned(e.tags(), &self.deployment, &self.lineage))
            .map(|e| e.access_entry_arn().unwrap_or_default().to_string()))
    }

    async fn read(&self, recorded: Option<&ResourceState>) -> Result<Observed, ResourceError> {
        let principal = self.recorded_principal(recorded);
        let Some(entry) = self.describe_principal(principal).await? else {
            return Ok(Observed::Gone);
        };
        if !self.ours_or_retagged(&entry, recorded)? {
            return Ok(Observed::Gone);
        }
        let policies: serde_json::Map<String, Value> =
            self.policies(principal).await?.into_iter().collect();
        let mut groups = entry.kubernetes_groups().to_vec();
        groups.sort();
        let mut spec = serde_json::Map::new();
        spec.insert("cluster_name".into(), json!(self.cluster_name));
        // The principal it was looked up by (EKS keys entries by it; its answer's spelling
        // is not compared).
        spec.insert("principal_arn".into(), json!(principal));
        spec.insert("type".into(), json!(entry.r#type()));
        spec.insert("kubernetes_groups".into(), json!(groups));
        spec.insert("access_policies".into(), Value::Object(policies));
        let applied = Self::applied(&entry);
        Ok(Observed::Present {
            physical_id: Some(applied.physical_id),
            spec,
            outputs: applied.outputs,
        })
    }

    async fn create(&self, token: &str, _inputs: &Inputs) -> Result<Applied, ResourceError> {
        let sent = self
            .client
            .create_access_entry()
            .cluster_name(&self.cluster_name)
            .principal_arn(&self.principal_arn)
            .r#type(STANDARD)
            .client_request_token(token)
            .set_tags(Some(tags(&self.deployment, &self.lineage, &self.address)))
            .send()
            .await;
        let entry = match sent {
            Ok(out) => out.access_entry().cloned(),
            Err(e) if code(&e) == Some("ResourceInUseException") => None,
            Err(e) => {
                return Err(ResourceError::msg(format!(
                    "CreateAccessEntry {}: {}",
                    self.what(),
                    error_message(&e)
                )))
            }
        };
        // Created now, or there already (ours from an unrecorded create, or
        // someone else's).
        let entry = match entry {
            Some(e) => e,
            None => match self.describe().await? {
                Some(e) if owned(e.tags(), &self.deployment, &self.lineage) => e,
                Some(e) => return Err(self.not_ours(&e)),
                None => {
                    return Err(ResourceError::msg(format!(
                        "CreateAccessEntry {}: EKS said it exists, then that it does not; run \
                         the command again",
                        self.what()
                    )))
                }
            },
        };
        self.sync(&entry).await?;
        Ok(Self::applied(&entry))
    }

    async fn update(
        &self,
        _recorded: &ResourceState,
        _inputs: &Inputs,
    ) -> Result<Applied, ResourceError> {
        let Some(entry) = self
            .describe()
            .await?
            .filter(|e| owned(e.tags(), &self.deployment, &self.lineage))
        else {
            return Err(ResourceError::msg(format!(
                "{} is gone; plan again to create it",
                self.what()
            )));
        };
        self.sync(&entry).await?;
        Ok(Self::applied(&entry))
    }

    async fn delete(&self, recorded: &ResourceState) -> Result<(), ResourceError> {
        let principal = self.recorded_principal(Some(recorded));
        let Some(entry) = self.describe_principal(principal).await? else {
            return Ok(());
        };
        if !self.ours_or_retagged(&entry, Some(recorded))? {
            // Ours is gone; the entry of this principal now is someone else's.
            return Ok(());
        }
        match self
            .client
            .delete_access_entry()
            .cluster_name(&self.cluster_name)
            .principal_arn(principal)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(ResourceError::msg(format!(
                "DeleteAccessEntry {principal} on cluster {}: {}",
                self.cluster_name,
                error_message(&e)
            ))),
        }
    }

    /// A create is refused at plan when the cluster already has an entry for
    /// the principal that this state did not make, or will have one because the
    /// principal is the identity that is about to create the cluster
    /// (CreateAccessEntry would fail on either).
    async fn check(&self, check: &Check<'_>) -> Result<(), ResourceError> {
        if !matches!(check.action, Action::Create | Action::Replace) {
            return Ok(());
        }
        match self.describe().await? {
            Some(e) if !owned(e.tags(), &self.deployment, &self.lineage) => Err(self.not_ours(&e)),
            Some(_) => Ok(()),
            None => {
                let caller = self.caller().await?;
                self.check_not_creator(&caller).await?;
                self.check_principal_exists(&caller).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_arn_gives_its_account_kind_and_name() {
        assert_eq!(
            principal_parts("arn:aws:iam::123456789012:role/teams/platform/Admins"),
            Some(("123456789012", "role", "Admins"))
        );
        assert_eq!(
            principal_parts("arn:aws-cn:iam::123456789012:user/alice"),
            Some(("123456789012", "user", "alice"))
        );
        assert_eq!(principal_parts("arn:aws:iam::123456789012:root"), None);
        assert_eq!(principal_parts("arn:aws:iam::123456789012:group/ops"), None);
    }

    #[test]
    fn the_caller_is_matched_by_account_kind_and_name_not_path() {
        let role = "arn:aws:sts::123456789012:assumed-role/Admins/alice@example.com";
        assert!(is_caller("arn:aws:iam::123456789012:role/Admins", role));
        assert!(is_caller(
            "arn:aws:iam::123456789012:role/teams/admins",
            role
        ));
        assert!(!is_caller("arn:aws:iam::210987654321:role/Admins", role));
        assert!(!is_caller("arn:aws:iam::123456789012:user/Admins", role));
        assert!(!is_caller("arn:aws:iam::123456789012:role/Admin", role));
        let user = "arn:aws:iam::123456789012:user/ops/bob";
        assert!(is_caller("arn:aws:iam::123456789012:user/bob", user));
        assert!(!is_caller("arn:aws:iam::123456789012:role/bob", user));
        assert!(!is_caller(
            "arn:aws:iam::123456789012:role/root",
            "arn:aws:iam::123456789012:root"
        ));
    }

    #[test]
    fn scopes_read_as_the_spec_writes_them() {
        let ns = AccessScope::builder()
            .r#type(AccessScopeType::Namespace)
            .namespaces("team-b")
            .namespaces("team-a")
            .build();
        assert_eq!(
            scope_json(Some(&ns)),
            json!({"type": "namespace", "namespaces": ["team-a", "team-b"]})
        );
        let cluster = AccessScope::builder()
            .r#type(AccessScopeType::Cluster)
            .build();
        assert_eq!(scope_json(Some(&cluster)), json!({"type": "cluster"}));
    }
}
