//! Every AWS service client kfaws uses, made one way: from the shared
//! [`SdkConfig`] plus what that config cannot carry, the
//! [`UnreachableNotice`] and [`RetryNotice`] interceptors, the
//! [`NoRetryOnceStopping`] retry classifier (an `SdkConfig` holds none of
//! them, so `Client::new(&config)` would leave them out) and the timeouts
//! of each attempt ([`Service::ATTEMPT_TIMEOUT`]), which the S3 client must
//! not share.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::SdkConfig;
use aws_sdk_sts::config::ConfigBag;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::InterceptorContext;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
    FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::retries::classifiers::{ClassifyRetry, RetryAction};
use aws_smithy_runtime_api::client::retries::RequestAttempts;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use aws_smithy_types::retry::RetryConfig;

/// A service client made from an [`SdkConfig`] with kfaws's interceptors.
pub trait Service: Sized {
    /// The longest one attempt of a call to this service may take
    /// ([`super::ATTEMPT_TIMEOUT`], or [`super::INVOKE_ATTEMPT_TIMEOUT`] for
    /// SageMaker Runtime).
    const ATTEMPT_TIMEOUT: Duration = super::ATTEMPT_TIMEOUT;

    /// Attempts per call of this service, where it differs from the
    /// config's ([`super::MAX_ATTEMPTS`]): [`super::INVOKE_MAX_ATTEMPTS`] for
    /// SageMaker Runtime.
    const MAX_ATTEMPTS: Option<u32> = None;

    /// The client for `config`, with kfaws's interceptors and
    /// [`super::call_timeouts`] of [`Self::ATTEMPT_TIMEOUT`].
    fn from_sdk(config: &SdkConfig) -> Self {
        Self::with_timeouts(config, super::call_timeouts(Self::ATTEMPT_TIMEOUT))
    }

    /// The client for `config`, with kfaws's interceptors and `timeouts`
    /// (over those of `config`, which fill what `timeouts` leaves unset).
    fn with_timeouts(config: &SdkConfig, timeouts: TimeoutConfig) -> Self;
}

/// The client of service `C` (`aws_sdk_eks::Client`, …) for `config`: the
/// region, credentials, endpoint override and retry configuration of
/// `config`, plus the [`UnreachableNotice`], [`RetryNotice`],
/// [`NoRetryOnceStopping`] and the service's timeouts
/// ([`Service::from_sdk`]).
pub fn client<C: Service>(config: &SdkConfig) -> C {
    C::from_sdk(config)
}

macro_rules! services {
    ($($sdk:ident $(=> $attempt:expr, $attempts:expr)?),* $(,)?) => {$(
        impl Service for $sdk::Client {
            $(const ATTEMPT_TIMEOUT: Duration = $attempt;)?
            $(const MAX_ATTEMPTS: Option<u32> = Some($attempts);)?

            fn with_timeouts(config: &SdkConfig, timeouts: TimeoutConfig) -> Self {
                let mut builder = $sdk::config::Builder::from(config)
                    .timeout_config(timeouts)
                    .interceptor(UnreachableNotice)
                    .interceptor(RetryNotice)
                    .retry_classifier(NoRetryOnceStopping(
                        crate::engine::interrupt::stopping(),
                    ));
                if let Some(attempts) = Self::MAX_ATTEMPTS {
                    let retry = config.retry_config().cloned().unwrap_or_else(RetryConfig::standard);
                    builder = builder.retry_config(retry.with_max_attempts(attempts));
                }
                $sdk::Client::from_conf(builder.build())
            }
        }
    )*};
}

services!(
    aws_sdk_cloudformation,
    aws_sdk_cloudwatchlogs,
    aws_sdk_ec2,
    aws_sdk_ecr,
    aws_sdk_efs,
    aws_sdk_eks,
    aws_sdk_iam,
    aws_sdk_sagemaker,
    aws_sdk_sagemakerruntime => super::INVOKE_ATTEMPT_TIMEOUT, super::INVOKE_MAX_ATTEMPTS,
    aws_sdk_sts,
);

/// Forbids the SDK's retries once `.0` is cancelled: by the first interrupt
/// ([`crate::engine::interrupt::stopping`]) in kfaws. The attempt in flight
/// finishes and its answer is the call's, so a call that keeps failing
/// (up to [`super::MAX_ATTEMPTS`] attempts with backoff, about a minute)
/// does not hold up the exit after Ctrl-C; an interrupted create or delete
/// is recorded as in flight and resumed by the next run.
#[derive(Debug, Clone)]
pub struct NoRetryOnceStopping(pub tokio_util::sync::CancellationToken);

impl ClassifyRetry for NoRetryOnceStopping {
    fn classify_retry(&self, _: &InterceptorContext) -> RetryAction {
        match self.0.is_cancelled() {
            // Any classifier's RetryForbidden wins over every other verdict
            // (`ClassifyRetry::priority`, aws-smithy-runtime-api).
            true => RetryAction::RetryForbidden,
            false => RetryAction::NoActionIndicated,
        }
    }

    fn name(&self) -> &'static str {
        "kfaws::NoRetryOnceStopping"
    }
}

/// Whether the notice was given since the last attempt that reached AWS.
/// One flag for the process: after a network failure every client's calls
/// fail alike, and one line says so.
static SAID: AtomicBool = AtomicBool::new(false);

/// Says, at the first attempt that cannot reach the endpoint, that the
/// call is being retried: the SDK's standard retries
/// ([`super::MAX_ATTEMPTS`] attempts, jittered backoff up to 20 s) are
/// otherwise up to a minute of silence before the error (a wrong
/// `AWS_ENDPOINT_URL`, no network, a VPN dropped mid-apply). Said once
/// until an attempt reaches an endpoint again.
#[derive(Debug, Clone, Copy)]
pub struct UnreachableNotice;

/// The endpoint of the attempt in flight, `scheme://authority`, kept for
/// [`UnreachableNotice`]: once the attempt fails, the request is gone from
/// the interceptor context.
#[derive(Debug, Clone)]
struct Endpoint(String);

impl Storable for Endpoint {
    type Storer = StoreReplace<Self>;
}

impl Intercept for UnreachableNotice {
    fn name(&self) -> &'static str {
        "kfaws::UnreachableNotice"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(endpoint) = context
            .request()
            .uri()
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| Some(format!("{}://{}", u.scheme_str()?, u.authority()?)))
        {
            cfg.interceptor_state().store_put(Endpoint(endpoint));
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if context.response().is_some() {
            // An answer (even an error one) came back: the endpoint is
            // reachable again.
            SAID.store(false, Ordering::Relaxed);
            return Ok(());
        }
        let Some(Err(e)) = context.output_or_error() else {
            return Ok(());
        };
        if !(e.as_connector_error().is_some() || e.is_timeout_error())
            || SAID.swap(true, Ordering::Relaxed)
        {
            return Ok(());
        }
        let endpoint = cfg
            .load::<Endpoint>()
            .map_or("the AWS endpoint", |e| e.0.as_str());
        let call = cfg
            .load::<Metadata>()
            .map_or_else(String::new, |m| format!("{} {}: ", m.service(), m.name()));
        tracing::warn!(
            "cannot reach {endpoint} ({call}{}); retrying, up to {} attempts in all",
            super::error_chain(e),
            super::MAX_ATTEMPTS
        );
        Ok(())
    }
}

/// Tells the progress display of the resource job making a call
/// ([`crate::engine::progress::report_retry`]) that the SDK retries it:
/// before each retry, which call, which attempt of how many, and what the
/// last one got (`retrying EKS DeleteNodegroup, attempt 2 of 8, after: HTTP
/// 500: …`), and when its attempts end, that they did. Without it, a call
/// the standard retries repeat (up to [`super::MAX_ATTEMPTS`] attempts with
/// jittered backoff up to 20 s, about a minute) shows only "Still
/// destroying…" until it fails. Each retry is also logged at INFO (`-v`),
/// which is all there is of it outside a resource job.
#[derive(Debug, Clone, Copy)]
pub struct RetryNotice;

/// The response header in which [`RetryNotice`] records the attempt that
/// got the response, on retries only (kfaws' own; no AWS response has it).
pub const ATTEMPTS_HEADER: &str = "x-kfaws-attempt";

/// What the last failed attempt of the call got, kept for [`RetryNotice`]
/// until the next attempt starts.
#[derive(Debug, Clone)]
struct LastFailure(String);

impl Storable for LastFailure {
    type Storer = StoreReplace<Self>;
}

/// The AWS error code of an error response, where the protocol puts it in
/// a place every service shares: the `x-amzn-ErrorType` header of the JSON
/// protocols (EKS, EFS, SageMaker; the part before any `:`, Smithy
/// "awsJson1_1 / restJson1 operation error serialization"), or the
/// `<Code>` element of the XML ones (CloudFormation, IAM, STS, EC2, S3).
/// The operation's own error is type-erased here, so its
/// `ProvideErrorMetadata` is out of reach.
fn error_code(response: &aws_smithy_runtime_api::http::Response) -> Option<String> {
    if let Some(kind) = response.headers().get("x-amzn-ErrorType") {
        let code = kind.split(':').next().unwrap_or(kind).trim();
        return (!code.is_empty()).then(|| code.to_string());
    }
    let body = std::str::from_utf8(response.body().bytes()?).ok()?;
    let start = body.find("<Code>")? + "<Code>".len();
    let len = body[start..].find("</Code>")?;
    let code = body[start..start + len].trim();
    (!code.is_empty()).then(|| code.to_string())
}

/// The number of the attempt under way (1 for the first; the orchestrator's count).
fn attempt(cfg: &ConfigBag) -> u32 {
    cfg.load::<RequestAttempts>()
        .map_or(1, RequestAttempts::attempts)
}

impl Intercept for RetryNotice {
    fn name(&self) -> &'static str {
        "kfaws::RetryNotice"
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Err(e)) = context.output_or_error() {
            let failure = match context.response() {
                Some(r) => match error_code(r) {
                    Some(code) => format!("HTTP {} {code}", r.status().as_u16()),
                    None => format!("HTTP {}", r.status().as_u16()),
                },
                None => super::error_chain(e),
            };
            cfg.interceptor_state().store_put(LastFailure(failure));
        }
        Ok(())
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let attempt = attempt(cfg);
        if attempt < 2 {
            return Ok(());
        }
        let of = cfg
            .load::<RetryConfig>()
            .map_or(super::MAX_ATTEMPTS, RetryConfig::max_attempts);
        let call = cfg.load::<Metadata>().map_or_else(
            || "a call".to_string(),
            |m| format!("{} {}", m.service(), m.name()),
        );
        let after = cfg
            .load::<LastFailure>()
            .map_or_else(String::new, |f| format!(", after: {}", f.0));
        let retry = format!("retrying {call}, attempt {attempt} of {of}{after}");
        // Outside a resource job (a plan's refresh, `kfaws train`) only the
        // log says so: `-v` shows it.
        tracing::info!("{retry}");
        crate::engine::progress::report_retry(Some(&retry));
        Ok(())
    }

    /// Marks the response of a retry with its attempt number
    /// ([`ATTEMPTS_HEADER`]), so the error of a call whose last attempt
    /// failed too says how many it made ([`super::error_message`]).
    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let attempt = attempt(cfg);
        if attempt > 1 {
            context
                .response_mut()
                .headers_mut()
                .insert(ATTEMPTS_HEADER, attempt.to_string());
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        _context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if attempt(cfg) > 1 {
            crate::engine::progress::report_retry(None);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use aws_config::retry::RetryConfig;
    use aws_config::{BehaviorVersion, Region};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tracing_subscriber::util::SubscriberInitExt as _;

    use super::*;

    /// Log lines written by the code under test.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn config(endpoint: &str) -> SdkConfig {
        SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(endpoint)
            .credentials_provider(aws_sdk_eks::config::SharedCredentialsProvider::new(
                aws_sdk_eks::config::Credentials::for_tests(),
            ))
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(3)
                    .with_initial_backoff(std::time::Duration::from_millis(1)),
            )
            .build()
    }

    /// Held by the tests whose calls cannot reach their endpoint: the
    /// [`UnreachableNotice`]'s flag ([`SAID`]) is the process's, and one
    /// test's failures would silence the notice another counts.
    static UNREACHABLE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    const ERROR_500: &[u8] =
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

    /// A loopback endpoint that answers request `n` (from 1) with
    /// `answer(n)`, and counts the requests.
    async fn endpoint(
        answer: impl Fn(usize) -> &'static [u8] + Send + 'static,
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = Arc::clone(&count);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
                let _ = socket.write_all(answer(n)).await;
            }
        });
        (format!("http://{addr}"), count)
    }

    /// An endpoint that answers the first `failures` requests with HTTP 503,
    /// then an empty EKS ListClusters.
    async fn flaky(failures: usize) -> String {
        let (url, _) = endpoint(move |n| match n <= failures {
            true => b"HTTP/1.1 503 Service Unavailable\r\nx-amzn-ErrorType: ServiceUnavailableException:http://internal.amazon.com/coral/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            false => b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\nconnection: close\r\n\r\n{\"clusters\":[]}",
        })
        .await;
        url
    }

    /// The retries a resource job's progress display was told of.
    #[derive(Default)]
    struct Retries(Mutex<Vec<Option<String>>>);

    impl crate::engine::progress::Progress for Retries {
        fn started(&self, _: &crate::address::Address, _: crate::plan::Step) {}
        fn finished(
            &self,
            _: &crate::address::Address,
            _: crate::plan::Step,
            _: &crate::engine::walk::Outcome,
            _: std::time::Duration,
        ) {
        }
        fn retry(&self, _: &crate::address::Address, retry: Option<&str>) {
            self.0.lock().unwrap().push(retry.map(str::to_string));
        }
    }

    #[test]
    fn the_error_code_comes_from_the_json_header_or_the_xml_body() {
        let response = |header: Option<&str>, body: &str| {
            let mut r = aws_smithy_runtime_api::http::Response::new(
                aws_smithy_runtime_api::http::StatusCode::try_from(500).unwrap(),
                aws_smithy_types::body::SdkBody::from(body),
            );
            if let Some(h) = header {
                r.headers_mut().insert("x-amzn-ErrorType", h.to_string());
            }
            r
        };
        assert_eq!(
            error_code(&response(Some("InternalFailure:http://x/"), "")).as_deref(),
            Some("InternalFailure")
        );
        assert_eq!(
            error_code(&response(
                None,
                "<ErrorResponse><Error><Type>Receiver</Type><Code>Throttling</Code>\
                 <Message>Rate exceeded</Message></Error></ErrorResponse>"
            ))
            .as_deref(),
            Some("Throttling")
        );
        assert_eq!(error_code(&response(None, "")), None);
    }

    /// Each retry of a call is told to the job's progress display before it
    /// starts, with the attempt and what the last one got; the end of the
    /// retries is told too. A call that succeeds at once tells nothing.
    #[tokio::test]
    async fn a_retried_call_is_told_to_the_progress_display_of_its_job() {
        let lines = Lines::default();
        let writer = lines.clone();
        let _guard = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .set_default();
        let seen = Arc::new(Retries::default());
        let scope = crate::engine::progress::Scope {
            progress: Arc::clone(&seen) as Arc<dyn crate::engine::progress::Progress>,
            address: "eks.cluster".parse().unwrap(),
        };
        let endpoint = flaky(2).await;
        crate::engine::progress::SCOPE
            .scope(scope, async {
                // Without the UnreachableNotice: its flag is the process's, which the
                // test of it running beside this one reads.
                let eks = aws_sdk_eks::Client::from_conf(
                    aws_sdk_eks::config::Builder::from(&config(&endpoint))
                        .interceptor(RetryNotice)
                        .build(),
                );
                eks.list_clusters().send().await.unwrap();
                eks.list_clusters().send().await.unwrap();
            })
            .await;
        let seen = seen.0.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "{seen:?}");
        for (i, told) in seen[..2].iter().enumerate() {
            let told = told.as_deref().unwrap();
            assert_eq!(
                told,
                format!(
                    "retrying EKS ListClusters, attempt {} of 3, after: HTTP 503 \
                     ServiceUnavailableException",
                    i + 2
                ),
            );
        }
        assert_eq!(seen[2], None, "the retries ended");
        // The log (`-v`) says each retry too.
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text.lines()
                .filter(|l| l.contains("INFO") && l.contains("retrying EKS ListClusters, attempt"))
                .count(),
            2,
            "{text}"
        );
    }

    /// A call whose retries all failed says how many attempts it made; one refused at its
    /// first attempt (not retryable) says nothing of attempts.
    #[tokio::test]
    async fn the_error_of_a_retried_call_says_how_many_attempts_it_made() {
        let with_notice = |endpoint: &str| {
            aws_sdk_eks::Client::from_conf(
                aws_sdk_eks::config::Builder::from(&config(endpoint))
                    .interceptor(RetryNotice)
                    .build(),
            )
        };
        let (failing, _) = endpoint(|_| {
            b"HTTP/1.1 500 Internal Server Error\r\nx-amzn-ErrorType: InternalFailure\r\n\
              x-amzn-requestid: r-1\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
        })
        .await;
        let e = with_notice(&failing)
            .list_clusters()
            .send()
            .await
            .unwrap_err();
        assert_eq!(
            super::super::error_message(&e),
            "InternalFailure: no message (request id r-1, after 3 attempts)"
        );
        let (refusing, attempts) = endpoint(|_| {
            b"HTTP/1.1 400 Bad Request\r\nx-amzn-ErrorType: InvalidParameterException\r\n\
              content-length: 17\r\nconnection: close\r\n\r\n{\"message\":\"bad\"}"
        })
        .await;
        let e = with_notice(&refusing)
            .list_clusters()
            .send()
            .await
            .unwrap_err();
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
        assert_eq!(
            super::super::error_message(&e),
            "InvalidParameterException: bad"
        );
    }

    #[tokio::test]
    async fn no_call_is_retried_once_the_command_is_stopping() {
        let (endpoint, attempts) = endpoint(|_| ERROR_500).await;
        let call = |token: tokio_util::sync::CancellationToken| {
            let config = config(&endpoint);
            async move {
                let client = aws_sdk_eks::Client::from_conf(
                    aws_sdk_eks::config::Builder::from(&config)
                        .retry_classifier(NoRetryOnceStopping(token))
                        .build(),
                );
                client.list_clusters().send().await.unwrap_err();
            }
        };
        // Not stopping: the standard retries (3 attempts in this config).
        call(tokio_util::sync::CancellationToken::new()).await;
        assert_eq!(attempts.swap(0, Ordering::SeqCst), 3);
        // Stopping: the one attempt, then the error.
        let stopping = tokio_util::sync::CancellationToken::new();
        stopping.cancel();
        call(stopping).await;
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }

    /// A client kfaws makes bounds each attempt of a call: an endpoint that
    /// accepts the connection and the request but never answers (a
    /// half-open connection, a stalled peer) fails the attempt after its
    /// attempt timeout, the retries make a bounded number of them, and the
    /// error says it timed out. Without the timeout the call never returns.
    #[tokio::test]
    async fn a_call_to_an_endpoint_that_never_answers_times_out() {
        let _unreachable = UNREACHABLE.lock().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = Arc::clone(&accepted);
        tokio::spawn(async move {
            // Each connection is kept open and never written to.
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                open.push(socket);
            }
        });
        // kfaws's timeouts (`call_timeouts`), shortened for the test.
        let attempt = Duration::from_millis(300);
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(1))
            .operation_attempt_timeout(attempt)
            .build();
        let sts = aws_sdk_sts::Client::with_timeouts(&config(&url), timeouts);
        let start = std::time::Instant::now();
        let e = tokio::time::timeout(Duration::from_secs(30), sts.get_caller_identity().send())
            .await
            .expect("the call hung past 30 s")
            .unwrap_err();
        let took = start.elapsed();
        assert!(
            matches!(e, aws_sdk_sts::error::SdkError::TimeoutError(_)),
            "{e:?}"
        );
        let text = super::super::error_message(&e);
        assert_eq!(
            text,
            "request has timed out: operation attempt timeout (single attempt) occurred after \
             300ms"
        );
        // The config's 3 attempts, each on a new connection and cut after
        // 300 ms, with backoffs of a few ms between them.
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
        assert!(
            took >= 3 * attempt && took < Duration::from_secs(5),
            "{took:?}"
        );
    }

    /// The clients kfaws makes carry its timeouts: connecting within
    /// `CONNECT_TIMEOUT`, each attempt within `ATTEMPT_TIMEOUT`, SageMaker
    /// Runtime's (InvokeEndpoint, up to 60 s of the model's time) within
    /// `INVOKE_ATTEMPT_TIMEOUT`, and SageMaker Runtime's calls make
    /// `INVOKE_MAX_ATTEMPTS` attempts where the others make the config's.
    #[tokio::test]
    async fn every_client_bounds_connecting_and_each_attempt() {
        let backoff = Duration::from_millis(7);
        let sdk = config("http://127.0.0.1:9")
            .into_builder()
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(super::super::MAX_ATTEMPTS)
                    .with_initial_backoff(backoff),
            )
            .build();
        let eks = client::<aws_sdk_eks::Client>(&sdk);
        let t = eks.config().timeout_config().unwrap();
        assert_eq!(t.connect_timeout(), Some(super::super::CONNECT_TIMEOUT));
        assert_eq!(t.operation_attempt_timeout(), Some(Duration::from_secs(60)));
        assert_eq!(
            eks.config().retry_config().unwrap().max_attempts(),
            super::super::MAX_ATTEMPTS
        );
        let rt = client::<aws_sdk_sagemakerruntime::Client>(&sdk);
        let t = rt.config().timeout_config().unwrap();
        assert_eq!(t.connect_timeout(), Some(super::super::CONNECT_TIMEOUT));
        assert_eq!(
            t.operation_attempt_timeout(),
            Some(Duration::from_secs(120))
        );
        let retry = rt.config().retry_config().unwrap();
        assert_eq!(retry.max_attempts(), super::super::INVOKE_MAX_ATTEMPTS);
        // The rest of the config's retry settings are kept.
        assert_eq!(retry.initial_backoff(), backoff);
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_said_once_until_an_answer_comes_back() {
        let _unreachable = UNREACHABLE.lock().await;
        // As after an answer: a test before this one may have left no
        // endpoint reachable.
        SAID.store(false, Ordering::Relaxed);
        let lines = Lines::default();
        let writer = lines.clone();
        let _guard = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .set_default();
        // Port 9 (discard): nothing listens, the connection is refused.
        let refused = client::<aws_sdk_eks::Client>(&config("http://127.0.0.1:9"));
        let describe = || refused.describe_cluster().name("ml").send();
        describe().await.unwrap_err();
        describe().await.unwrap_err();
        let answered = client::<aws_sdk_eks::Client>(&config(&endpoint(|_| ERROR_500).await.0));
        answered
            .describe_cluster()
            .name("ml")
            .send()
            .await
            .unwrap_err();
        describe().await.unwrap_err();

        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let notices: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("cannot reach"))
            .collect();
        // Six refused attempts in all: one notice for the first two calls,
        // one more after the answer.
        assert_eq!(notices.len(), 2, "{text}");
        for n in notices {
            assert!(
                n.contains("cannot reach http://127.0.0.1:9 (EKS DescribeCluster: ")
                    && n.contains("retrying, up to 8 attempts in all"),
                "{n}"
            );
        }
    }
}
