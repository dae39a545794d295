//! The IAM OpenID Connect provider of the EKS cluster (`aws_iam_oidc_provider`),
//! which IAM roles for service accounts (IRSA) trust.
//!
//! EKS User Guide, "Create an IAM OIDC provider for your cluster": the
//! provider's URL is the cluster's OIDC issuer and its audience (client id)
//! `sts.amazonaws.com`. No thumbprint is sent: the IAM API Reference
//! (CreateOpenIDConnectProvider, `ThumbprintList`) makes it optional — IAM
//! then retrieves the issuer's top intermediate CA thumbprint itself — and
//! for EKS issuers IAM verifies the JWKS endpoint against its library of
//! trusted root CAs anyway, so a thumbprint computed by kfaws would add a
//! network fetch at apply time and go stale when the issuer's CA rotates.
//!
//! IAM has no idempotency token for providers: one provider per URL per
//! account is the key. A provider for the issuer that already exists is
//! adopted only if it carries this deployment's tags (an earlier create
//! of ours whose result was not recorded); anyone else's is refused, never
//! taken over or deleted.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_iam::error::ProvideErrorMetadata;
use aws_sdk_iam::types::Tag;
use aws_sdk_iam::Client;
use serde_json::{json, Value};

use super::eks::ADDRESS_TAG;
use super::error_message;
use super::stack::{DEPLOYMENT_TAG, LINEAGE_TAG};
use crate::address::Address;
use crate::plan::Action;
use crate::resource::{Applied, Check, Inputs, Observed, Outputs, Resource, ResourceError};
use crate::state::ResourceState;

/// The audience EKS service account tokens are requested for and the AWS
/// SDKs present to STS (EKS User Guide, "IAM roles for service accounts").
pub const STS_AUDIENCE: &str = "sts.amazonaws.com";

/// The `eks.cluster` output with the issuer URL.
pub const ISSUER_OUTPUT: &str = "oidc_issuer";

/// The provider's URL as IAM keys it: the issuer without its `https://`
/// (the form trust policy condition keys use, `<host/path>:sub`).
pub fn issuer_host_path(issuer: &str) -> &str {
    issuer
        .strip_prefix("https://")
        .unwrap_or(issuer)
        .trim_end_matches('/')
}

/// One IAM OIDC provider.
pub struct OidcProviderResource {
    /// Graph address, `iam.oidc`.
    pub address: Address,
    /// The cluster whose issuer it trusts.
    pub cluster: Address,
    /// The deployment, written as the deployment tag.
    pub deployment: String,
    /// The lineage of the state, written as the lineage tag.
    pub lineage: String,
    /// The client.
    pub client: Client,
    /// The EKS client, to read the live cluster's issuer (what an import is
    /// matched on).
    pub eks: aws_sdk_eks::Client,
    /// The EKS cluster's name.
    pub cluster_name: String,
}

/// What GetOpenIDConnectProvider says of one provider.
struct Found {
    arn: String,
    url: String,
    client_ids: Vec<String>,
    tags: Vec<Tag>,
}

fn tag<'a>(tags: &'a [Tag], key: &str) -> Option<&'a str> {
    tags.iter().find(|t| t.key() == key).map(Tag::value)
}

fn is_no_such_entity<E: ProvideErrorMetadata, R>(e: &aws_sdk_iam::error::SdkError<E, R>) -> bool {
    e.as_service_error()
        .and_then(ProvideErrorMetadata::code)
        .is_some_and(|c| c == "NoSuchEntity")
}

impl OidcProviderResource {
    fn owned(&self, tags: &[Tag]) -> bool {
        tag(tags, DEPLOYMENT_TAG) == Some(self.deployment.as_str())
            && tag(tags, LINEAGE_TAG) == Some(self.lineage.as_str())
    }

    fn tags(&self) -> Result<Vec<Tag>, ResourceError> {
        [
            (DEPLOYMENT_TAG, self.deployment.as_str()),
            (LINEAGE_TAG, self.lineage.as_str()),
            (ADDRESS_TAG, self.address.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| {
            Tag::builder()
                .key(k)
                .value(v)
                .build()
                .map_err(|e| ResourceError::msg(format!("tag {k}: {e}")))
        })
        .collect()
    }

    async fn get(&self, arn: &str) -> Result<Option<Found>, ResourceError> {
        match self
            .client
            .get_open_id_connect_provider()
            .open_id_connect_provider_arn(arn)
            .send()
            .await
        {
            Ok(out) => Ok(Some(Found {
                arn: arn.to_string(),
                url: out.url().unwrap_or_default().to_string(),
                client_ids: out.client_id_list().to_vec(),
                tags: out.tags().to_vec(),
            })),
            Err(e) if is_no_such_entity(&e) => Ok(None),
            Err(e) => Err(ResourceError::msg(format!(
                "GetOpenIDConnectProvider {arn}: {}",
                error_message(&e)
            ))),
        }
    }

    async fn list(&self) -> Result<Vec<String>, ResourceError> {
        let out = self
            .client
            .list_open_id_connect_providers()
            .send()
            .await
            .map_err(|e| {
                ResourceError::msg(format!("ListOpenIDConnectProviders: {}", error_message(&e)))
            })?;
        Ok(out
            .open_id_connect_provider_list()
            .iter()
            .filter_map(|p| p.arn().map(str::to_string))
            .collect())
    }

    /// The provider for `host_path` in this account, if any (provider ARNs
    /// end in `:oidc-provider/<host/path>`).
    async fn find_by_url(&self, host_path: &str) -> Result<Option<Found>, ResourceError> {
        let suffix = format!(":oidc-provider/{host_path}");
        for arn in self.list().await? {
            if arn.ends_with(&suffix) {
                return self.get(&arn).await;
            }
        }
        Ok(None)
    }

    /// The provider this resource made, found by its tags: for a create
    /// whose result (the ARN) never reached the state.
    async fn find_by_tags(&self) -> Result<Option<Found>, ResourceError> {
        for arn in self.list().await? {
            if let Some(found) = self.get(&arn).await? {
                if self.owned(&found.tags)
                    && tag(&found.tags, ADDRESS_TAG) == Some(self.address.as_str())
                {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }

    async fn recorded(
        &self,
        recorded: Option<&ResourceState>,
    ) -> Result<Option<Found>, ResourceError> {
        match recorded.and_then(|r| r.physical_id.as_deref()) {
            Some(arn) => match self.get(arn).await? {
                Some(found) if !self.owned(&found.tags) => Err(super::eks::retagged(
                    "IAM OIDC provider",
                    arn,
                    &self.address,
                    found.tags.iter().map(|t| (t.key(), t.value())),
                    &self.deployment,
                    &self.lineage,
                )),
                found => Ok(found),
            },
            None => self.find_by_tags().await,
        }
    }

    fn applied(found: &Found) -> Applied {
        let outputs: Outputs = [
            ("arn".to_string(), json!(found.arn)),
            ("issuer_host_path".to_string(), json!(found.url)),
            (
                "issuer".to_string(),
                json!(format!("https://{}", found.url)),
            ),
        ]
        .into_iter()
        .collect();
        Applied {
            physical_id: found.arn.clone(),
            outputs,
        }
    }

    /// Adds our audience and removes any other, so the provider matches the spec.
    /// Takes a provider of the cluster's issuer that already exists as this
    /// create's, if this deployment's tags say it is ours (else refuses it),
    /// its client ids brought back to the STS audience alone.
    async fn adopt(&self, found: &Found) -> Result<Applied, ResourceError> {
        if !self.owned(&found.tags) {
            return Err(self.refuse(found));
        }
        self.sync_client_ids(found).await?;
        Ok(Self::applied(found))
    }

    async fn sync_client_ids(&self, found: &Found) -> Result<(), ResourceError> {
        let have: BTreeSet<&str> = found.client_ids.iter().map(String::as_str).collect();
        if !have.contains(STS_AUDIENCE) {
            self.client
                .add_client_id_to_open_id_connect_provider()
                .open_id_connect_provider_arn(&found.arn)
                .client_id(STS_AUDIENCE)
                .send()
                .await
                .map_err(|e| {
                    ResourceError::msg(format!(
                        "AddClientIDToOpenIDConnectProvider {}: {}",
                        found.arn,
                        error_message(&e)
                    ))
                })?;
        }
        for other in have.iter().filter(|c| **c != STS_AUDIENCE) {
            self.client
                .remove_client_id_from_open_id_connect_provider()
                .open_id_connect_provider_arn(&found.arn)
                .client_id(*other)
                .send()
                .await
                .map_err(|e| {
                    ResourceError::msg(format!(
                        "RemoveClientIDFromOpenIDConnectProvider {}: {}",
                        found.arn,
                        error_message(&e)
                    ))
                })?;
        }
        Ok(())
    }

    fn refuse(&self, found: &Found) -> ResourceError {
        let whose = match (
            tag(&found.tags, DEPLOYMENT_TAG),
            tag(&found.tags, LINEAGE_TAG),
        ) {
            (Some(d), Some(l)) if d == self.deployment => format!(
                "its tags say it belongs to another kfaws state of deployment {d:?} (lineage {l}); \
                 use that state, or destroy from it first"
            ),
            _ => "it was not created by kfaws for this deployment (eksctl `utils \
                  associate-iam-oidc-provider` or the console make one too); kfaws does not adopt \
                  it: delete it (aws iam delete-open-id-connect-provider) or manage the cluster \
                  with the tool that created it"
                .to_string(),
        };
        ResourceError::refused(format!(
            "an IAM OIDC provider for https://{} already exists ({}): {whose}",
            found.url, found.arn
        ))
    }
}

#[async_trait]
impl Resource for OidcProviderResource {
    fn address(&self) -> &Address {
        &self.address
    }

    fn kind(&self) -> &'static str {
        "aws_iam_oidc_provider"
    }

    /// The provider `create` would re-attach to: the one of the live
    /// cluster's issuer, when it carries this state's tags. A provider with
    /// our tags for another issuer (left by `kfaws state rm` for a cluster
    /// since deleted) is not imported: a new cluster has a new issuer, and
    /// its create makes another provider.
    async fn importable(&self) -> Result<Option<String>, ResourceError> {
        let Some(cluster) = super::eks::describe_cluster(&self.eks, &self.cluster_name).await?
        else {
            return Ok(None);
        };
        let Some(issuer) = cluster
            .identity()
            .and_then(|i| i.oidc())
            .and_then(|o| o.issuer())
        else {
            return Ok(None);
        };
        Ok(self
            .find_by_url(issuer_host_path(issuer))
            .await?
            .filter(|f| {
                self.owned(&f.tags) && tag(&f.tags, ADDRESS_TAG) == Some(self.address.as_str())
            })
            .map(|f| f.arn))
    }

    fn dependencies(&self) -> Vec<Address> {
        vec![self.cluster.clone()]
    }

    fn spec(&self) -> Value {
        json!({ "client_ids": [STS_AUDIENCE] })
    }

    fn estimate(&self) -> Duration {
        Duration::from_secs(5)
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(5 * 60)
    }

    async fn read(&self, recorded: Option<&ResourceState>) -> Result<Observed, ResourceError> {
        let Some(found) = self.recorded(recorded).await? else {
            return Ok(Observed::Gone);
        };
        let mut ids: Vec<&str> = found.client_ids.iter().map(String::as_str).collect();
        ids.sort_unstable();
        let mut spec = serde_json::Map::new();
        spec.insert("client_ids".into(), json!(ids));
        let applied = Self::applied(&found);
        Ok(Observed::Present {
            physical_id: Some(applied.physical_id),
            spec,
            outputs: applied.outputs,
        })
    }

    async fn create(&self, _token: &str, inputs: &Inputs) -> Result<Applied, ResourceError> {
        let issuer = inputs.get(&self.cluster, ISSUER_OUTPUT)?;
        let issuer = issuer.as_str().ok_or_else(|| {
            ResourceError::msg(format!(
                "output {ISSUER_OUTPUT} of {} is not a string",
                self.cluster
            ))
        })?;
        let host_path = issuer_host_path(issuer);
        if let Some(found) = self.find_by_url(host_path).await? {
            return self.adopt(&found).await;
        }
        let sent = self
            .client
            .create_open_id_connect_provider()
            .url(format!("https://{host_path}"))
            .client_id_list(STS_AUDIENCE)
            .set_tags(Some(self.tags()?))
            .send()
            .await;
        match sent {
            Ok(out) => {
                let arn = out.open_id_connect_provider_arn().unwrap_or_default();
                let found = self.get(arn).await?.ok_or_else(|| {
                    ResourceError::msg(format!("OIDC provider {arn} vanished after its creation"))
                })?;
                Ok(Self::applied(&found))
            }
            Err(e) if e.code() == Some("EntityAlreadyExists") => {
                // Made between our look and our create: adopt only if ours.
                let found = self.find_by_url(host_path).await?.ok_or_else(|| {
                    ResourceError::msg(format!(
                        "CreateOpenIDConnectProvider {issuer}: {}",
                        error_message(&e)
                    ))
                })?;
                self.adopt(&found).await
            }
            Err(e) => Err(ResourceError::msg(format!(
                "CreateOpenIDConnectProvider {issuer}: {}",
                error_message(&e)
            ))),
        }
    }

    async fn update(
        &self,
        recorded: &ResourceState,
        inputs: &Inputs,
    ) -> Result<Applied, ResourceError> {
        let Some(found) = self.recorded(Some(recorded)).await? else {
            return Err(ResourceError::msg(format!(
                "{} is gone; plan again to create it",
                self.address
            )));
        };
        // A new cluster has a new issuer: the provider of the old one is
        // of no use, and IAM cannot change a provider's URL.
        let issuer = inputs
            .get(&self.cluster, ISSUER_OUTPUT)?
            .as_str()
            .map(issuer_host_path)
            .unwrap_or_default()
            .to_string();
        if issuer != found.url {
            self.delete(recorded).await?;
            return self.create("", inputs).await;
        }
        self.sync_client_ids(&found).await?;
        Ok(Self::applied(&found))
    }

    /// A create is refused at plan when the cluster's issuer is already
    /// known (the cluster is recorded) and an OIDC provider for it exists
    /// that this state did not make: IAM allows one provider per URL, and
    /// kfaws does not adopt another's (`Self::refuse`). A cluster still to
    /// be created has no issuer yet; its create refuses then.
    async fn check(&self, check: &Check<'_>) -> Result<(), ResourceError> {
        if check.action != Action::Create {
            return Ok(());
        }
        let Some(issuer) = check
            .state
            .resources
            .get(&self.cluster)
            .and_then(|r| r.outputs.get(ISSUER_OUTPUT))
            .and_then(Value::as_str)
        else {
            return Ok(());
        };
        match self.find_by_url(issuer_host_path(issuer)).await? {
            Some(found) if !self.owned(&found.tags) => Err(self.refuse(&found)),
            _ => Ok(()),
        }
    }

    async fn delete(&self, recorded: &ResourceState) -> Result<(), ResourceError> {
        let Some(found) = self.recorded(Some(recorded)).await? else {
            return Ok(());
        };
        match self
            .client
            .delete_open_id_connect_provider()
            .open_id_connect_provider_arn(&found.arn)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_no_such_entity(&e) => Ok(()),
            Err(e) => Err(ResourceError::msg(format!(
                "DeleteOpenIDConnectProvider {}: {}",
                found.arn,
                error_message(&e)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::issuer_host_path;

    #[test]
    fn the_provider_url_is_the_issuer_without_its_scheme() {
        assert_eq!(
            issuer_host_path("https://oidc.eks.us-east-1.amazonaws.com/id/ABC"),
            "oidc.eks.us-east-1.amazonaws.com/id/ABC"
        );
        assert_eq!(
            issuer_host_path("https://oidc.eks.us-east-1.amazonaws.com/id/ABC/"),
            "oidc.eks.us-east-1.amazonaws.com/id/ABC"
        );
    }
}
