//! The `ExecCredential` object an exec credential plugin prints for kubectl
//! and other client-go style clients (Kubernetes docs, "client-go credential
//! plugins", <https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-credential-plugins>;
//! API: <https://kubernetes.io/docs/reference/config-api/client-authentication.v1beta1/>).
//!
//! The client runs the plugin with `KUBERNETES_EXEC_INFO` holding an
//! `ExecCredential` whose `apiVersion` is the one the kubeconfig asked for;
//! the plugin answers in that version on stdout with `status.token` and
//! `status.expirationTimestamp` (RFC 3339), and the client runs it again
//! once the timestamp has passed.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

/// `client.authentication.k8s.io/v1beta1`: what `kfaws kubeconfig` writes,
/// as `aws eks update-kubeconfig` does (every client since Kubernetes 1.11).
pub const V1BETA1: &str = "client.authentication.k8s.io/v1beta1";

/// `client.authentication.k8s.io/v1` (Kubernetes 1.22+), answered when the client asks for it.
pub const V1: &str = "client.authentication.k8s.io/v1";

/// An `ExecCredential` with a bearer token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecCredential {
    /// Always `ExecCredential`.
    pub kind: String,
    /// [`V1BETA1`] or [`V1`].
    pub api_version: String,
    /// Empty in the answer (the request's spec is the client's).
    pub spec: serde_json::Map<String, serde_json::Value>,
    /// The credential.
    pub status: ExecCredentialStatus,
}

/// `ExecCredential.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecCredentialStatus {
    /// RFC 3339 UTC time after which the client asks again.
    pub expiration_timestamp: String,
    /// The bearer token.
    pub token: String,
}

impl ExecCredential {
    /// An answer in `api_version` carrying `token` until `expiration`.
    pub fn new(api_version: &str, token: String, expiration: DateTime<Utc>) -> Self {
        Self {
            kind: "ExecCredential".into(),
            api_version: api_version.into(),
            spec: serde_json::Map::new(),
            status: ExecCredentialStatus {
                expiration_timestamp: expiration.to_rfc3339_opts(SecondsFormat::Secs, true),
                token,
            },
        }
    }
}

/// The `apiVersion` to answer in: the one of `KUBERNETES_EXEC_INFO` when it
/// is [`V1`] or [`V1BETA1`], else [`V1BETA1`] (a plugin run by hand, or an
/// older client that sets no exec info).
pub fn requested_api_version(exec_info: Option<&str>) -> &'static str {
    let asked = exec_info
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .and_then(|v| {
            v.get("apiVersion")
                .and_then(|a| a.as_str())
                .map(str::to_string)
        });
    match asked.as_deref() {
        Some(V1) => V1,
        _ => V1BETA1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_client_go_expects() {
        let at = DateTime::parse_from_rfc3339("2026-11-30T07:14:00.123Z")
            .unwrap()
            .to_utc();
        let c = ExecCredential::new(V1BETA1, "k8s-aws-v1.abc".into(), at);
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "kind": "ExecCredential",
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "spec": {},
                "status": {"expirationTimestamp": "2026-11-30T07:14:00Z", "token": "k8s-aws-v1.abc"}
            })
        );
    }

    #[test]
    fn answers_in_the_version_the_client_asked_for() {
        let info = r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{"interactive":false}}"#;
        assert_eq!(requested_api_version(Some(info)), V1);
        assert_eq!(requested_api_version(None), V1BETA1);
        assert_eq!(requested_api_version(Some("not json")), V1BETA1);
    }
}
