//! The EKS authentication token: a presigned STS `GetCallerIdentity` request.
//!
//! EKS authenticates a Kubernetes bearer token of the form
//! `k8s-aws-v1.<base64url of a URL>` by performing the GET the URL describes
//! against STS and mapping the IAM identity STS answers to a Kubernetes user
//! (aws-iam-authenticator, which EKS runs: "API Authorization from Outside a
//! Cluster", <https://github.com/kubernetes-sigs/aws-iam-authenticator#how-does-it-work>;
//! <https://docs.aws.amazon.com/eks/latest/userguide/cluster-auth.html>). The
//! token is what `aws eks get-token` and `aws-iam-authenticator token` print:
//!
//! - the request: `GET <STS endpoint>/?Action=GetCallerIdentity&Version=2011-06-15`,
//!   to the regional STS endpoint of the cluster's region (or the endpoint
//!   override of the SDK config: `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`);
//! - SigV4 query-string authentication (a presigned URL) with
//!   `X-Amz-Expires=60` and the header `x-k8s-aws-id: <cluster name>` signed
//!   in, so a token made for one cluster is refused by another
//!   (<https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html>);
//! - the token: `k8s-aws-v1.` + base64url without padding of the URL.
//!
//! STS accepts the request for 15 minutes after its `X-Amz-Date` whatever
//! `X-Amz-Expires` says, and the authenticator refuses older tokens; clients
//! treat a token as valid for 14 minutes (the AWS CLI's `aws eks get-token`),
//! or until the signing credentials expire if that is sooner.

use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_credential_types::provider::ProvideCredentials as _;
use aws_credential_types::Credentials;
use aws_sdk_sts::config::endpoint::{Params, ResolveEndpoint as _};
use aws_sigv4::http_request::{
    sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use url::Url;

/// Prefix of a version-1 EKS token (aws-iam-authenticator `v1Prefix`).
pub const TOKEN_PREFIX: &str = "k8s-aws-v1.";

/// The signed header naming the cluster the token is for (aws-iam-authenticator `clusterIDHeader`).
pub const CLUSTER_ID_HEADER: &str = "x-k8s-aws-id";

/// `X-Amz-Expires` of the presigned request, in seconds (as the AWS CLI and
/// aws-iam-authenticator send it).
pub const PRESIGN_EXPIRES: Duration = Duration::from_secs(60);

/// How long a token is used: 14 minutes, one under the 15 minutes STS and
/// the authenticator accept (AWS CLI `aws eks get-token`, `TOKEN_EXPIRATION_MINS`).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(14 * 60);

/// The query of the presigned request (STS API version 2011-06-15).
const QUERY: &str = "Action=GetCallerIdentity&Version=2011-06-15";

/// An EKS bearer token and when to stop using it. `Debug` does not show the
/// token: it authenticates as the signer for 15 minutes.
#[derive(Clone, PartialEq, Eq)]
pub struct EksToken {
    /// `k8s-aws-v1.` + base64url (no padding) of the presigned URL.
    pub token: String,
    /// When a client should get a new token: signing time + [`TOKEN_LIFETIME`],
    /// or the credentials' expiry if sooner.
    pub expiration: DateTime<Utc>,
}

impl std::fmt::Debug for EksToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EksToken")
            .field("token", &"** redacted **")
            .field("expiration", &self.expiration)
            .finish()
    }
}

/// Why no token could be made.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The cluster name cannot be an EKS cluster name.
    #[error(
        "cluster name {0:?} is invalid: EKS cluster names are 1 to 100 characters of letters, \
         digits, '-' and '_', starting with a letter or digit (EKS CreateCluster, name)"
    )]
    ClusterName(String),
    /// No region was configured.
    #[error("no AWS Region: pass --region or set AWS_REGION (the token is signed for the cluster's region)")]
    NoRegion,
    /// The SDK config has no credentials provider, or it gave none.
    #[error("no AWS credentials to sign the token with: {0}")]
    Credentials(String),
    /// The STS endpoint could not be resolved or is not a URL.
    #[error("cannot determine the STS endpoint for region {region}: {reason}")]
    Endpoint {
        /// The region.
        region: String,
        /// What went wrong.
        reason: String,
    },
    /// aws-sigv4 refused to sign.
    #[error("cannot sign the STS request: {0}")]
    Signing(String),
    /// A token to decode is not `k8s-aws-v1.` + base64url of a URL.
    #[error("not an EKS token: {0}")]
    Malformed(String),
}

/// Checks `name` against the EKS cluster name rule
/// (`^[0-9A-Za-z][A-Za-z0-9\-_]*`, 1 to 100 characters; EKS API Reference, CreateCluster).
///
/// # Errors
/// [`TokenError::ClusterName`].
pub fn check_cluster_name(name: &str) -> Result<(), TokenError> {
    let mut chars = name.chars();
    let ok = name.len() <= 100
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(TokenError::ClusterName(name.to_string()))
    }
}

/// The STS endpoint the token's request goes to: the SDK config's endpoint
/// override for STS (`AWS_ENDPOINT_URL_STS`, the `sts` section of a profile's
/// `services`, `AWS_ENDPOINT_URL`), else the regional endpoint the STS
/// client would use (`https://sts.<region>.amazonaws.com`, honouring FIPS and
/// dual-stack settings; never the legacy global endpoint, which EKS does not
/// require and which signs for us-east-1).
///
/// # Errors
/// [`TokenError::Endpoint`].
pub async fn sts_endpoint(sdk: &SdkConfig, region: &str) -> Result<Url, TokenError> {
    let err = |reason: String| TokenError::Endpoint {
        region: region.to_string(),
        reason,
    };
    let key = aws_types::service_config::ServiceConfigKey::builder()
        .service_id("STS")
        .env("AWS_ENDPOINT_URL")
        .profile("endpoint_url")
        .build()
        .expect("every field is set");
    let configured = sdk
        .service_config()
        .and_then(|c| c.load_config(key))
        .or_else(|| sdk.endpoint_url().map(str::to_string));
    let params = Params::builder()
        .region(region)
        .use_fips(sdk.use_fips().unwrap_or(false))
        .use_dual_stack(sdk.use_dual_stack().unwrap_or(false))
        .use_global_endpoint(false)
        .set_endpoint(configured)
        .build()
        .map_err(|e| err(e.to_string()))?;
    let endpoint = aws_sdk_sts::config::endpoint::DefaultResolver::new()
        .resolve_endpoint(&params)
        .await
        .map_err(|e| err(e.to_string()))?;
    Url::parse(endpoint.url()).map_err(|e| err(format!("{:?}: {e}", endpoint.url())))
}

/// The presigned `GetCallerIdentity` URL for `cluster`, signed at `time`
/// for `region` with `credentials`. Pure: no I/O, deterministic for a given
/// time.
///
/// # Errors
/// [`TokenError::ClusterName`], [`TokenError::Signing`].
pub fn presign(
    endpoint: &Url,
    cluster: &str,
    region: &str,
    credentials: Credentials,
    time: SystemTime,
) -> Result<Url, TokenError> {
    check_cluster_name(cluster)?;
    let mut url = endpoint.clone();
    url.set_path("/");
    url.set_query(Some(QUERY));
    url.set_fragment(None);

    let identity = Identity::from(credentials);
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(PRESIGN_EXPIRES);
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| TokenError::Signing(e.to_string()))?
        .into();
    let request = SignableRequest::new(
        "GET",
        url.as_str(),
        std::iter::once((CLUSTER_ID_HEADER, cluster)),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| TokenError::Signing(e.to_string()))?;
    let (instructions, _signature) = sign(request, &params)
        .map_err(|e| TokenError::Signing(e.to_string()))?
        .into_parts();
    {
        let mut query = url.query_pairs_mut();
        for (name, value) in instructions.params() {
            query.append_pair(name, value);
        }
    }
    Ok(url)
}

/// `k8s-aws-v1.` + base64url (no padding) of `url`.
pub fn encode(url: &Url) -> String {
    format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url.as_str())
    )
}

/// The URL inside a token made by [`encode`].
///
/// # Errors
/// [`TokenError::Malformed`] for a missing prefix, bad base64 or a non-URL.
pub fn decode(token: &str) -> Result<Url, TokenError> {
    let body = token
        .strip_prefix(TOKEN_PREFIX)
        .ok_or_else(|| TokenError::Malformed(format!("it does not start with {TOKEN_PREFIX}")))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|e| TokenError::Malformed(format!("base64url: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| TokenError::Malformed("the decoded URL is not UTF-8".into()))?;
    Url::parse(&text).map_err(|e| TokenError::Malformed(format!("the decoded URL: {e}")))
}

/// Makes a token for `cluster` with the SDK config's credentials, region
/// and endpoint, signed now.
///
/// # Errors
/// [`TokenError`]: no region, no credentials, endpoint or signing failures.
pub async fn get_token(sdk: &SdkConfig, cluster: &str) -> Result<EksToken, TokenError> {
    let region = sdk.region().ok_or(TokenError::NoRegion)?.to_string();
    get_token_in(sdk, cluster, &region).await
}

/// Makes a token for `cluster` of `region` with the SDK config's
/// credentials and STS endpoint ([`sts_endpoint`] for `region`), signed now.
///
/// # Errors
/// [`TokenError`]: a bad cluster name, no credentials, endpoint or signing failures.
pub async fn get_token_in(
    sdk: &SdkConfig,
    cluster: &str,
    region: &str,
) -> Result<EksToken, TokenError> {
    check_cluster_name(cluster)?;
    let region = region.to_string();
    let endpoint = sts_endpoint(sdk, &region).await?;
    let provider = sdk.credentials_provider().ok_or_else(|| {
        TokenError::Credentials("the SDK config has no credentials provider".into())
    })?;
    let credentials = provider
        .provide_credentials()
        .await
        .map_err(|e| TokenError::Credentials(super::error_chain(&e)))?;
    let now = SystemTime::now();
    let mut until = now + TOKEN_LIFETIME;
    if let Some(expiry) = credentials.expiry() {
        until = until.min(expiry);
    }
    let url = presign(&endpoint, cluster, &region, credentials, now)?;
    Ok(EksToken {
        token: encode(&url),
        expiration: DateTime::<Utc>::from(until),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn creds(token: Option<&str>) -> Credentials {
        Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            token.map(str::to_string),
            None,
            "test",
        )
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn query(url: &Url) -> BTreeMap<String, String> {
        url.query_pairs().into_owned().collect()
    }

    fn regional() -> Url {
        Url::parse("https://sts.eu-west-1.amazonaws.com").unwrap()
    }

    #[test]
    fn the_token_is_the_prefixed_base64url_of_a_presigned_get_caller_identity() {
        let url = presign(
            &regional(),
            "ml",
            "eu-west-1",
            creds(None),
            at(1_790_000_000),
        )
        .unwrap();
        let token = encode(&url);
        let body = token.strip_prefix("k8s-aws-v1.").unwrap();
        assert!(
            body.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "base64url without padding: {body}"
        );
        let decoded = decode(&token).unwrap();
        assert_eq!(decoded, url);
        assert_eq!(decoded.scheme(), "https");
        assert_eq!(decoded.host_str(), Some("sts.eu-west-1.amazonaws.com"));
        assert_eq!(decoded.path(), "/");
        let q = query(&decoded);
        assert_eq!(q["Action"], "GetCallerIdentity");
        assert_eq!(q["Version"], "2011-06-15");
        assert_eq!(q["X-Amz-Algorithm"], "AWS4-HMAC-SHA256");
        assert_eq!(
            q["X-Amz-Credential"],
            "AKIDEXAMPLE/20260921/eu-west-1/sts/aws4_request"
        );
        assert_eq!(q["X-Amz-Date"], "20260921T141320Z");
        assert_eq!(q["X-Amz-Expires"], "60");
        assert_eq!(q["X-Amz-SignedHeaders"], "host;x-k8s-aws-id");
        assert_eq!(q["X-Amz-Signature"].len(), 64);
        assert!(!q.contains_key("X-Amz-Security-Token"));
        assert!(!decoded.as_str().contains("wJalr"), "no secret in the URL");
    }

    #[test]
    fn the_signature_covers_the_cluster_name_and_the_time() {
        let sig = |cluster: &str, t: u64| {
            let url = presign(&regional(), cluster, "eu-west-1", creds(None), at(t)).unwrap();
            query(&url)["X-Amz-Signature"].clone()
        };
        assert_eq!(sig("ml", 1_790_000_000), sig("ml", 1_790_000_000));
        assert_ne!(sig("ml", 1_790_000_000), sig("ml2", 1_790_000_000));
        assert_ne!(sig("ml", 1_790_000_000), sig("ml", 1_790_000_001));
    }

    #[test]
    fn a_session_token_is_carried_and_signed() {
        let with = presign(
            &regional(),
            "ml",
            "eu-west-1",
            creds(Some("FwoG+/=")),
            at(1_790_000_000),
        )
        .unwrap();
        let without = presign(
            &regional(),
            "ml",
            "eu-west-1",
            creds(None),
            at(1_790_000_000),
        )
        .unwrap();
        assert_eq!(query(&with)["X-Amz-Security-Token"], "FwoG+/=");
        assert_ne!(
            query(&with)["X-Amz-Signature"],
            query(&without)["X-Amz-Signature"]
        );
    }

    #[test]
    fn an_endpoint_override_keeps_its_scheme_host_and_port() {
        let endpoint = Url::parse("http://127.0.0.1:41234").unwrap();
        let url = presign(&endpoint, "ml", "us-east-1", creds(None), at(1_790_000_000)).unwrap();
        assert!(
            url.as_str().starts_with("http://127.0.0.1:41234/?Action=GetCallerIdentity&Version=2011-06-15&X-Amz-Algorithm="),
            "{url}"
        );
    }

    #[test]
    fn bad_cluster_names_are_refused_before_signing() {
        for bad in ["", "-ml", "ml.prod", "ml prod", &"a".repeat(101)] {
            let e = presign(&regional(), bad, "eu-west-1", creds(None), at(0)).unwrap_err();
            assert!(matches!(e, TokenError::ClusterName(_)), "{bad:?}: {e}");
        }
        check_cluster_name("ml_team-1").unwrap();
    }

    #[test]
    fn decode_names_what_is_wrong() {
        assert!(decode("k8s-aws-v2.aGk")
            .unwrap_err()
            .to_string()
            .contains("k8s-aws-v1."));
        assert!(decode("k8s-aws-v1.***")
            .unwrap_err()
            .to_string()
            .contains("base64url"));
    }

    #[test]
    fn debug_does_not_show_the_token() {
        let t = EksToken {
            token: "k8s-aws-v1.c2VjcmV0".into(),
            expiration: DateTime::<Utc>::from(at(0)),
        };
        assert!(!format!("{t:?}").contains("c2VjcmV0"));
    }

    #[tokio::test]
    async fn the_endpoint_is_regional_or_the_override() {
        let sdk = SdkConfig::builder().build();
        assert_eq!(
            sts_endpoint(&sdk, "eu-west-1").await.unwrap().as_str(),
            "https://sts.eu-west-1.amazonaws.com/"
        );
        assert_eq!(
            sts_endpoint(&sdk, "cn-north-1").await.unwrap().as_str(),
            "https://sts.cn-north-1.amazonaws.com.cn/"
        );
        let sdk = SdkConfig::builder()
            .endpoint_url("http://127.0.0.1:41234")
            .build();
        assert_eq!(
            sts_endpoint(&sdk, "eu-west-1").await.unwrap().as_str(),
            "http://127.0.0.1:41234/"
        );
    }
}
