//! EKS tokens for kfaws's own Kubernetes clients, made in this process.
//!
//! kubectl reaches the cluster with `kfaws eks get-token` run as a client-go
//! exec credential plugin (the kubeconfig `kfaws kubeconfig` writes). kfaws's
//! own clients make the same token ([`crate::aws::token`]: a presigned STS
//! `GetCallerIdentity`, valid 14 minutes) without a child process, with the
//! credentials every other call of the run uses. A child would share the
//! terminal's process group: the SIGINT of a Ctrl-C, which kfaws answers by
//! stopping at a safe point and saving its state, also killed the token
//! command, and the request waiting for the token failed (in `apply`,
//! `destroy` and `train` alike) as if the cluster had refused it.
//!
//! [`EksAuthLayer`] wraps a client's service: readiness waits for a token
//! (the cached one while it has more than [`REFRESH_BEFORE`] left, else a new
//! one), each request gets `Authorization: Bearer <token>`. A token that
//! cannot be made fails that request with [`AuthError`], not the client: the
//! next request tries again (kube's `Client` puts its service behind a
//! `tower::buffer::Buffer`, which an error from `poll_ready` would close for
//! good).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use aws_config::SdkConfig;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use http::header::{HeaderValue, AUTHORIZATION};
use http::Request;
use tower::{BoxError, Layer, Service};

use crate::aws::token::{self, TokenError};

/// How long before its expiration a token is replaced: a request signed
/// with it must still reach the API server in time (client-go's exec
/// plugin renews at expiry; kube-client 10 s before; one minute leaves room
/// for a slow connection).
pub const REFRESH_BEFORE: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// Why a request went without a token.
#[derive(Debug, thiserror::Error)]
#[error("cannot make an EKS token for cluster {cluster}: {source}")]
pub struct AuthError {
    /// The cluster the token was for.
    pub cluster: String,
    /// What went wrong.
    #[source]
    pub source: TokenError,
}

/// The `Authorization` value and when to stop sending it.
type Bearer = (HeaderValue, DateTime<Utc>);

/// Tokens for one cluster, shared by the clones (one cache for every client
/// of a connector). `Debug` shows no token.
#[derive(Clone)]
pub struct EksTokens {
    sdk: SdkConfig,
    cluster: String,
    region: String,
    cached: Arc<tokio::sync::Mutex<Option<Bearer>>>,
}

impl std::fmt::Debug for EksTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EksTokens")
            .field("cluster", &self.cluster)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl EksTokens {
    /// Tokens for EKS cluster `cluster` of `region`, signed with `sdk`'s
    /// credentials and sent to its STS endpoint ([`token::sts_endpoint`]).
    /// Makes none yet.
    pub fn new(sdk: SdkConfig, cluster: impl Into<String>, region: impl Into<String>) -> Self {
        Self {
            sdk,
            cluster: cluster.into(),
            region: region.into(),
            cached: Arc::default(),
        }
    }

    /// The cluster's name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// `Bearer <token>` and its expiration: the cached token while it has
    /// more than [`REFRESH_BEFORE`] left at `now`, else a new one (cached).
    /// Concurrent callers wait for one new token.
    ///
    /// # Errors
    /// [`AuthError`] when no token can be made ([`token::get_token_in`]).
    async fn bearer(&self, now: DateTime<Utc>) -> Result<Bearer, AuthError> {
        let mut cached = self.cached.lock().await;
        if let Some(bearer) = cached.as_ref().filter(|(_, until)| fresh(*until, now)) {
            return Ok(bearer.clone());
        }
        let err = |source| AuthError {
            cluster: self.cluster.clone(),
            source,
        };
        let t = token::get_token_in(&self.sdk, &self.cluster, &self.region)
            .await
            .map_err(err)?;
        let mut value = HeaderValue::from_str(&format!("Bearer {}", t.token))
            .map_err(|e| err(TokenError::Malformed(e.to_string())))?;
        value.set_sensitive(true);
        tracing::debug!(cluster = %self.cluster, expiration = %t.expiration, "made an EKS token");
        let bearer = (value, t.expiration);
        *cached = Some(bearer.clone());
        Ok(bearer)
    }
}

/// Whether a token that expires at `until` may still be sent at `now`.
fn fresh(until: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    until - now > REFRESH_BEFORE
}

/// Adds an EKS token to every request of the service it wraps (see the
/// module docs).
#[derive(Debug, Clone)]
pub struct EksAuthLayer {
    tokens: EksTokens,
}

impl EksAuthLayer {
    /// A layer sending `tokens`' tokens.
    pub fn new(tokens: EksTokens) -> Self {
        Self { tokens }
    }
}

impl<S> Layer<S> for EksAuthLayer {
    type Service = EksAuth<S>;

    fn layer(&self, inner: S) -> EksAuth<S> {
        EksAuth {
            inner,
            tokens: self.tokens.clone(),
            ready: None,
            pending: None,
        }
    }
}

/// The service [`EksAuthLayer`] makes.
pub struct EksAuth<S> {
    inner: S,
    tokens: EksTokens,
    /// What the next call sends: the token, or why there is none.
    ready: Option<Result<Bearer, AuthError>>,
    /// The token being fetched.
    pending: Option<BoxFuture<'static, Result<Bearer, AuthError>>>,
}

impl<S, B> Service<Request<B>> for EksAuth<S>
where
    S: Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        let usable = match &self.ready {
            Some(Ok((_, until))) => fresh(*until, Utc::now()),
            // A failure is held for the next call; a retry comes after it.
            Some(Err(_)) => true,
            None => false,
        };
        if !usable {
            let tokens = self.tokens.clone();
            let pending = self
                .pending
                .get_or_insert_with(|| Box::pin(async move { tokens.bearer(Utc::now()).await }));
            let got = ready!(pending.as_mut().poll(cx));
            self.pending = None;
            self.ready = Some(got);
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        match self.ready.take() {
            Some(Ok(bearer)) => {
                request
                    .headers_mut()
                    .insert(AUTHORIZATION, bearer.0.clone());
                self.ready = Some(Ok(bearer));
                let response = self.inner.call(request);
                Box::pin(async move { response.await.map_err(Into::into) })
            }
            Some(Err(e)) => Box::pin(std::future::ready(Err(e.into()))),
            None => Box::pin(std::future::ready(Err(
                "EksAuth called before poll_ready returned Ready".into(),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_config::{BehaviorVersion, Region};
    use aws_credential_types::provider::SharedCredentialsProvider;
    use aws_credential_types::Credentials;
    use std::future::poll_fn;
    use std::sync::Mutex;

    fn sdk(credentials: bool) -> SdkConfig {
        let mut b = SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("eu-west-1"))
            .endpoint_url("http://127.0.0.1:5000");
        if credentials {
            b = b.credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "AKIDEXAMPLE",
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                None,
                None,
                "test",
            )));
        }
        b.build()
    }

    /// An inner service that records the `Authorization` of each request.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<Option<String>>>>);

    impl Service<Request<()>> for Recorder {
        type Response = ();
        type Error = BoxError;
        type Future = std::future::Ready<Result<(), BoxError>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<()>) -> Self::Future {
            let sent = request
                .headers()
                .get(AUTHORIZATION)
                .map(|v| v.to_str().unwrap().to_string());
            self.0.lock().unwrap().push(sent);
            std::future::ready(Ok(()))
        }
    }

    async fn send(service: &mut EksAuth<Recorder>) -> Result<(), BoxError> {
        poll_fn(|cx| service.poll_ready(cx)).await?;
        service.call(Request::new(())).await
    }

    #[tokio::test]
    async fn every_request_carries_a_token_for_the_cluster_signed_for_its_region() {
        let recorder = Recorder::default();
        let tokens = EksTokens::new(sdk(true), "ml", "eu-west-1");
        let mut service = EksAuthLayer::new(tokens).layer(recorder.clone());
        send(&mut service).await.unwrap();
        send(&mut service).await.unwrap();
        let sent = recorder.0.lock().unwrap().clone();
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0], sent[1], "the token is reused while fresh");
        let header = sent[0].clone().expect("an Authorization header");
        let url = token::decode(header.strip_prefix("Bearer ").expect("a bearer token")).unwrap();
        assert_eq!(url.host_str(), Some("127.0.0.1"), "the SDK's STS endpoint");
        let query: std::collections::BTreeMap<_, _> = url.query_pairs().into_owned().collect();
        assert_eq!(query["Action"], "GetCallerIdentity");
        assert!(
            query["X-Amz-SignedHeaders"].contains(token::CLUSTER_ID_HEADER),
            "{query:?}"
        );
        assert!(
            query["X-Amz-Credential"].contains("/eu-west-1/sts/aws4_request"),
            "{query:?}"
        );
    }

    #[tokio::test]
    async fn a_token_is_replaced_once_it_is_within_a_minute_of_its_expiration() {
        let tokens = EksTokens::new(sdk(true), "ml", "eu-west-1");
        let now = Utc::now();
        let (_, first) = tokens.bearer(now).await.unwrap();
        assert!(
            first - now > chrono::TimeDelta::minutes(13),
            "{first} {now}"
        );
        let (_, again) = tokens.bearer(now).await.unwrap();
        assert_eq!(again, first, "cached");
        // Later, with 59 s left: a new token, expiring 14 minutes after its signing.
        let later = first - chrono::TimeDelta::seconds(59);
        let (_, renewed) = tokens.bearer(later).await.unwrap();
        assert_ne!(renewed, first);
        assert_eq!(
            tokens.cached.lock().await.as_ref().map(|(_, until)| *until),
            Some(renewed)
        );
    }

    #[tokio::test]
    async fn a_token_that_cannot_be_made_fails_the_request_not_the_service() {
        let recorder = Recorder::default();
        let mut service = EksAuthLayer::new(EksTokens::new(sdk(false), "ml", "eu-west-1"))
            .layer(recorder.clone());
        for _ in 0..2 {
            let err = send(&mut service).await.unwrap_err().to_string();
            assert!(
                err.starts_with("cannot make an EKS token for cluster ml: no AWS credentials"),
                "{err}"
            );
        }
        assert!(recorder.0.lock().unwrap().is_empty(), "nothing was sent");
    }

    #[test]
    fn the_debug_form_shows_no_token() {
        let tokens = EksTokens::new(sdk(true), "ml", "eu-west-1");
        *tokens.cached.try_lock().unwrap() = Some((
            HeaderValue::from_static("Bearer k8s-aws-v1.secret"),
            Utc::now(),
        ));
        assert!(!format!("{tokens:?}").contains("secret"));
    }
}
