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
//! good). kfaws's own retries ([`super::retry`]) do not retry an
//! [`AuthError`]: credentials that are gone stay gone.

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

/// How long before its expiration a token is replaced, so a token is used
/// for 9 of its 14 minutes ([`token::TOKEN_LIFETIME`]). The layer sits above
/// kube's own retry of 429 and 5xx answers, whose tries reuse the token they
/// started with: 15 tries doubling from 5 ms, about 164 s in all (kube-client
/// 5.0 `RetryPolicy::server_retry`), must end before the token does.
pub const REFRESH_BEFORE: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// How long making a token may take before the request fails: the
/// credentials provider may run a `credential_process`, refresh an SSO
/// session or ask the instance metadata service, any of which can hang.
pub const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

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
    /// [`AuthError`] when no token can be made ([`token::get_token_in`]) within
    /// [`FETCH_TIMEOUT`].
    async fn bearer(&self, now: DateTime<Utc>) -> Result<Bearer, AuthError> {
        let mut cached = self.cached.lock().await;
        if let Some(bearer) = cached.as_ref().filter(|(_, until)| fresh(*until, now)) {
            return Ok(bearer.clone());
        }
        let err = |source| AuthError {
            cluster: self.cluster.clone(),
            source,
        };
        let making = token::get_token_in(&self.sdk, &self.cluster, &self.region);
        let t = tokio::time::timeout(FETCH_TIMEOUT, making)
            .await
            .map_err(|_| {
                err(TokenError::Credentials(format!(
                    "the credentials provider did not answer within {} s",
                    FETCH_TIMEOUT.as_secs()
                )))
            })?
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
            bearer: None,
            failed: None,
            pending: None,
        }
    }
}

/// The service [`EksAuthLayer`] makes.
pub struct EksAuth<S> {
    inner: S,
    tokens: EksTokens,
    /// The token calls send while it is fresh.
    bearer: Option<Bearer>,
    /// Why there is no token: the next call fails with it, and takes it, so
    /// that the readiness after that call tries again.
    failed: Option<AuthError>,
    /// The token being made.
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
        let usable = |b: &Option<Bearer>| b.as_ref().is_some_and(|(_, t)| fresh(*t, Utc::now()));
        if self.failed.is_none() && !usable(&self.bearer) {
            let tokens = self.tokens.clone();
            let pending = self
                .pending
                .get_or_insert_with(|| Box::pin(async move { tokens.bearer(Utc::now()).await }));
            let got = ready!(pending.as_mut().poll(cx));
            self.pending = None;
            match got {
                Ok(bearer) => self.bearer = Some(bearer),
                Err(e) => self.failed = Some(e),
            }
        }
        match self.failed {
            // Ready to fail the next call, which does not reach the inner service.
            Some(_) => Poll::Ready(Ok(())),
            None => self.inner.poll_ready(cx).map_err(Into::into),
        }
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if let Some(e) = self.failed.take() {
            return Box::pin(std::future::ready(Err(e.into())));
        }
        let Some((header, _)) = &self.bearer else {
            return Box::pin(std::future::ready(Err(
                "EksAuth called before poll_ready returned Ready".into(),
            )));
        };
        request.headers_mut().insert(AUTHORIZATION, header.clone());
        let response = self.inner.call(request);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_config::{BehaviorVersion, Region};
    use aws_credential_types::provider::{future, ProvideCredentials, SharedCredentialsProvider};
    use aws_credential_types::Credentials;
    use std::future::poll_fn;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    fn credentials() -> Credentials {
        Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
            None,
            "test",
        )
    }

    /// Credentials that fail the first `failures` times they are asked for.
    #[derive(Debug)]
    struct Flaky {
        failures: usize,
        asked: AtomicUsize,
    }

    impl ProvideCredentials for Flaky {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            match self.asked.fetch_add(1, Ordering::SeqCst) < self.failures {
                true => future::ProvideCredentials::ready(Err(
                    aws_credential_types::provider::error::CredentialsError::not_loaded(
                        "the SSO session expired",
                    ),
                )),
                false => future::ProvideCredentials::ready(Ok(credentials())),
            }
        }
    }

    /// An SDK config of region us-east-1 (the tokens say which region they sign for) whose
    /// credentials fail `failures` times first.
    fn sdk(failures: usize) -> SdkConfig {
        SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:5000")
            .credentials_provider(SharedCredentialsProvider::new(Flaky {
                failures,
                asked: AtomicUsize::new(0),
            }))
            .build()
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

    fn service(failures: usize) -> (EksAuth<Recorder>, Recorder) {
        let recorder = Recorder::default();
        let tokens = EksTokens::new(sdk(failures), "ml", "eu-west-1");
        (EksAuthLayer::new(tokens).layer(recorder.clone()), recorder)
    }

    /// Readiness (which must be `Ok` whatever the token: an error would close kube's
    /// buffer), then the call.
    async fn send(service: &mut EksAuth<Recorder>) -> Result<(), BoxError> {
        poll_fn(|cx| service.poll_ready(cx))
            .await
            .expect("readiness never fails");
        service.call(Request::new(())).await
    }

    #[tokio::test]
    async fn every_request_carries_a_token_for_the_cluster_signed_for_its_region() {
        let (mut service, recorder) = service(0);
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
        // The cluster's region, not the SDK config's.
        assert!(
            query["X-Amz-Credential"].contains("/eu-west-1/sts/aws4_request"),
            "{query:?}"
        );
    }

    #[tokio::test]
    async fn a_token_is_replaced_once_it_is_within_five_minutes_of_its_expiration() {
        let tokens = EksTokens::new(sdk(0), "ml", "eu-west-1");
        let now = Utc::now();
        let (_, first) = tokens.bearer(now).await.unwrap();
        let lifetime = first - now;
        assert!(
            lifetime > chrono::TimeDelta::seconds(14 * 60 - 5)
                && lifetime <= chrono::TimeDelta::seconds(14 * 60 + 5),
            "{lifetime}"
        );
        let (_, again) = tokens
            .bearer(first - chrono::TimeDelta::seconds(301))
            .await
            .unwrap();
        assert_eq!(again, first, "cached with more than 5 minutes left");
        let (_, renewed) = tokens
            .bearer(first - chrono::TimeDelta::seconds(299))
            .await
            .unwrap();
        assert_ne!(renewed, first, "renewed with less than 5 minutes left");
        assert!(
            renewed - Utc::now() > chrono::TimeDelta::minutes(13),
            "{renewed}"
        );

        // The service asks again once its own token is that close to its expiration.
        let (mut service, _) = service(0);
        send(&mut service).await.unwrap();
        let held = service.bearer.clone().unwrap();
        send(&mut service).await.unwrap();
        assert_eq!(
            service.bearer.as_ref().unwrap().1,
            held.1,
            "kept while fresh"
        );
        *service.tokens.cached.lock().await = None;
        service.bearer = Some((held.0, Utc::now() + chrono::TimeDelta::seconds(200)));
        send(&mut service).await.unwrap();
        assert!(
            service.bearer.as_ref().unwrap().1 - Utc::now() > chrono::TimeDelta::minutes(13),
            "a new token"
        );
    }

    #[tokio::test]
    async fn a_token_that_cannot_be_made_fails_that_request_and_the_next_one_tries_again() {
        let (mut service, recorder) = service(2);
        for _ in 0..2 {
            let err = send(&mut service).await.unwrap_err();
            assert!(err.is::<AuthError>(), "{err}");
            let err = err.to_string();
            assert!(
                err.starts_with("cannot make an EKS token for cluster ml: no AWS credentials")
                    && err.contains("the SSO session expired"),
                "{err}"
            );
        }
        assert!(recorder.0.lock().unwrap().is_empty(), "nothing was sent");
        send(&mut service).await.unwrap();
        let sent = recorder.0.lock().unwrap().clone();
        assert!(
            sent.len() == 1
                && sent[0]
                    .as_deref()
                    .is_some_and(|h| h.starts_with("Bearer k8s-aws-v1.")),
            "{sent:?}"
        );
    }

    #[test]
    fn the_debug_form_shows_no_token() {
        let tokens = EksTokens::new(sdk(0), "ml", "eu-west-1");
        *tokens.cached.try_lock().unwrap() = Some((
            HeaderValue::from_static("Bearer k8s-aws-v1.secret"),
            Utc::now(),
        ));
        assert!(!format!("{tokens:?}").contains("secret"));
    }
}
