//! Which API errors are worth retrying, and the bounded retry itself.
//!
//! Transient (retried with exponential backoff and full jitter until the
//! bundle's deadline): a kind that is not served yet right after its CRD was
//! created (404 for the resource type itself), a webhook whose backend is
//! still starting (the API server answers 500 `failed calling webhook`, with
//! `connection refused`, `no endpoints available` or an `x509` error inside),
//! 409 conflicts, 429 throttling (API Priority and Fairness), every 5xx,
//! and connection errors and timeouts (but not a 409 for a failed uid
//! precondition, nor an EKS token that could not be made,
//! [`super::auth::AuthError`]: credentials that are gone or a bad endpoint
//! stay so). Everything else (400 invalid, 403
//! forbidden, 404 for a missing namespace, 422 rejected by validation or by a
//! webhook that answered "denied") fails at once with the server's message:
//! retrying would only delay the same answer.
//!
//! Backoff: 200 ms doubling to 5 s with jitter (`backon`'s exponential
//! builder), the schedule client-go's retry helpers use at this scale.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use tokio::time::Instant;

/// The backoff schedule of every retry and poll in this module tree:
/// 200 ms doubling to 5 s, with jitter, no attempt limit (the deadline bounds it).
pub fn schedule() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

/// Whether an API error is transient (see the module docs).
pub fn is_transient(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => {
            let code = status.code;
            let message = status.message.as_str();
            match code {
                // A failed precondition on the object's uid never heals: the
                // object was deleted and made again, or never existed.
                409 if message.contains("Precondition failed")
                    || message.contains("uid mismatch") =>
                {
                    false
                }
                409 | 429 => true,
                500..=599 => true,
                // The resource type is not (yet) served: the API server's
                // generic 404 has no details naming an object.
                404 => {
                    status.details.as_ref().is_none_or(|d| d.name.is_empty())
                        && message.contains("the server could not find the requested resource")
                }
                _ => is_webhook_starting(message),
            }
        }
        kube::Error::HyperError(_) => true,
        kube::Error::Service(e) => !is_auth_error(e.as_ref()),
        _ => false,
    }
}

/// Whether `err` is, or was caused by, an EKS token that could not be made
/// ([`super::auth::AuthError`]).
fn is_auth_error(err: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(err), |e| e.source()).any(|e| e.is::<super::auth::AuthError>())
}

/// Whether a message says a webhook could not be called (as opposed to a
/// webhook that answered and denied the request).
pub fn is_webhook_starting(message: &str) -> bool {
    message.contains("failed calling webhook")
        || message.contains("connection refused")
        || message.contains("no endpoints available")
        || message.contains("x509:")
}

/// The server's message for an error, or the client's description. A 401
/// adds why an EKS cluster refuses credentials of its own account: by
/// default it admits only the IAM identity that created it (EKS User Guide,
/// "Grant IAM users and roles access to Kubernetes APIs": the cluster
/// creator's admin permissions; others need an access entry or an
/// `aws-auth` mapping).
pub fn message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if !status.message.is_empty() => {
            let hint = if status.code == 401 {
                UNAUTHORIZED_HINT
            } else {
                ""
            };
            format!(
                "{} ({} {}){hint}",
                status.message, status.code, status.reason
            )
        }
        other => other.to_string(),
    }
}

/// What [`message`] adds to a 401.
const UNAUTHORIZED_HINT: &str = "; the cluster does not admit these credentials. On EKS, only \
     the IAM identity that created the cluster is admitted unless an access entry or the \
     aws-auth ConfigMap admits another: run with the creator's credentials (`aws sts \
     get-caller-identity` shows whose these are), or have someone the cluster admits apply an \
     [access_entries] table of kfaws.toml for yours";

/// Why a retried call failed.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    /// A permanent error, or the last transient one when the deadline passed (told in
    /// the message, not as a `source`: kube's `Status` would follow as a debug dump).
    #[error("{}", message(.0))]
    Failed(kube::Error),
    /// The deadline passed; the last transient error seen.
    #[error("still failing at the deadline; last error: {last}")]
    DeadlineExceeded {
        /// The last transient error's message, or that no attempt finished.
        last: String,
    },
}

/// Calls `op` until it succeeds, fails permanently, or `deadline` passes,
/// sleeping [`schedule`] between transient failures. After the first
/// interrupt ([`crate::engine::interrupt::stopping`]) the attempt in flight
/// finishes and its error, transient or not, is the result: no new attempt
/// starts.
///
/// # Errors
/// [`RetryError::Failed`] with a permanent error at once, or with any error
/// once the command is stopping; [`RetryError::DeadlineExceeded`] with the
/// last transient error.
pub async fn retry<T, F, Fut>(deadline: Instant, op: F) -> Result<T, RetryError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    retry_unless(
        deadline,
        &crate::engine::interrupt::stopping(),
        is_transient,
        op,
    )
    .await
}

/// Whether the API server's generic 404 says the resource type itself is not served (a
/// CRD not Established yet, or any more): [`is_transient`] waits for it, a read of what
/// exists takes it as the answer.
pub fn is_not_served(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 404) && is_transient(err)
}

/// [`retry`] for reading what exists of a kind that may not be served: a 404 for the type
/// itself ([`is_not_served`]: its group and version are not registered, e.g. a CRD deleted
/// since it was listed) is returned at once as [`RetryError::Failed`] (nothing can be stored
/// through it) instead of being waited for until `deadline`. (A CRD that exists but is not
/// Established is answered with a plain-text `404 page not found`, which is never retried.)
///
/// # Errors
/// As [`retry`].
pub async fn retry_served<T, F, Fut>(deadline: Instant, op: F) -> Result<T, RetryError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let transient = |e: &kube::Error| is_transient(e) && !is_not_served(e);
    retry_unless(
        deadline,
        &crate::engine::interrupt::stopping(),
        transient,
        op,
    )
    .await
}

/// [`retry`] with the token that stops it and the errors it retries.
async fn retry_unless<T, F, Fut>(
    deadline: Instant,
    stopping: &tokio_util::sync::CancellationToken,
    transient: impl Fn(&kube::Error) -> bool,
    op: F,
) -> Result<T, RetryError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let last = Mutex::new(None::<String>);
    let attempt = op
        .retry(schedule())
        .sleep(tokio::time::sleep)
        .when(|e| transient(e) && !stopping.is_cancelled())
        .notify(|e, after| {
            tracing::debug!("transient error, retrying in {after:?}: {}", message(e));
            *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(message(e));
        });
    match tokio::time::timeout_at(deadline, attempt).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(RetryError::Failed(e)),
        Err(_) => Err(RetryError::DeadlineExceeded {
            last: last
                .into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_else(|| "no attempt finished before the deadline".into()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure(message, reason).with_code(code)))
    }

    #[test]
    fn a_401_says_which_identity_an_eks_cluster_admits() {
        let m = message(&api(401, "Unauthorized", "Unauthorized"));
        assert!(
            m.starts_with("Unauthorized (401 Unauthorized); the cluster does not admit")
                && m.contains("only the IAM identity that created the cluster"),
            "{m}"
        );
        let m = message(&api(403, "Forbidden", "forbidden"));
        assert_eq!(m, "forbidden (403 Forbidden)");
    }

    #[test]
    fn classification_follows_the_module_rules() {
        let transient = [
            api(404, "NotFound", "the server could not find the requested resource"),
            api(500, "InternalError", "Internal error occurred: failed calling webhook \"v.example.com\": failed to call webhook: Post \"https://guard.wh.svc:443/validate?timeout=10s\": dial tcp 10.0.0.7:443: connect: connection refused"),
            api(409, "Conflict", "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"),
            api(429, "TooManyRequests", "too many requests"),
            api(503, "ServiceUnavailable", "unavailable"),
        ];
        for e in &transient {
            assert!(is_transient(e), "{e}");
        }
        let permanent = [
            api(404, "NotFound", "namespaces \"missing\" not found"),
            api(
                422,
                "Invalid",
                "ConfigMap \"x\" is invalid: data: Invalid value",
            ),
            api(403, "Forbidden", "configmaps is forbidden"),
            api(409, "Conflict", "Operation cannot be fulfilled on configmaps \"exported\": uid mismatch: the provided object specified uid 1234-5678, and no existing object was found"),
            api(409, "Conflict", "Precondition failed: UID in precondition: 1234, UID in object meta: 5678"),
            api(
                400,
                "BadRequest",
                "admission webhook \"v.example.com\" denied the request: no",
            ),
        ];
        for e in &permanent {
            assert!(!is_transient(e), "{e}");
        }
        // A connection that broke is retried; a token that cannot be made is not.
        let broken = kube::Error::Service("connection reset by peer".into());
        assert!(is_transient(&broken));
        let no_token = kube::Error::Service(Box::new(crate::k8s::auth::AuthError {
            cluster: "ml".into(),
            source: crate::aws::token::TokenError::Credentials("the SSO session expired".into()),
        }));
        assert!(!is_transient(&no_token), "{no_token}");
    }

    #[tokio::test]
    async fn permanent_errors_fail_at_once_and_transient_ones_until_the_deadline() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let deadline = Instant::now() + Duration::from_secs(2);
        let err = retry(deadline, || async {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err::<(), _>(api(422, "Invalid", "bad"))
        })
        .await
        .unwrap_err();
        assert!(matches!(err, RetryError::Failed(_)));
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);

        let err = retry(deadline, || async {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err::<(), _>(api(503, "ServiceUnavailable", "try later"))
        })
        .await
        .unwrap_err();
        assert!(err.to_string().contains("try later"), "{err}");
        assert!(Instant::now() >= deadline);
        let n = calls.load(std::sync::atomic::Ordering::SeqCst);
        // 200 ms doubling with jitter: a handful of attempts in 2 s, not a busy loop.
        assert!(n > 2 && n < 20, "{n} attempts in 2 s of backoff");

        // Once stopping, a transient error ends the retry after its attempt.
        calls.store(0, std::sync::atomic::Ordering::SeqCst);
        let stopping = tokio_util::sync::CancellationToken::new();
        stopping.cancel();
        let err = retry_unless(
            Instant::now() + Duration::from_secs(60),
            &stopping,
            is_transient,
            || async {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err::<(), _>(api(503, "ServiceUnavailable", "try later"))
            },
        )
        .await
        .unwrap_err();
        assert!(matches!(err, RetryError::Failed(_)), "{err}");
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A read of what exists takes "type not served" as its answer at once; other transient
    /// errors are still retried.
    #[tokio::test]
    async fn a_read_of_a_kind_not_served_is_answered_at_once() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let deadline = Instant::now() + Duration::from_secs(60);
        let err = retry_served(deadline, || async {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err::<(), _>(api(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ))
        })
        .await
        .unwrap_err();
        assert!(
            matches!(&err, RetryError::Failed(e) if is_not_served(e)),
            "{err}"
        );
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(!is_not_served(&api(
            404,
            "NotFound",
            "namespaces \"missing\" not found"
        )));
        let short = Instant::now() + Duration::from_millis(600);
        let err = retry_served(short, || async {
            Err::<(), _>(api(503, "ServiceUnavailable", "try later"))
        })
        .await
        .unwrap_err();
        assert!(matches!(err, RetryError::DeadlineExceeded { .. }), "{err}");
    }
}
