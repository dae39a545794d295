//! `kfaws image push`: the image `kfaws image build` wrote, pushed to an
//! Amazon ECR repository.
//!
//! 1. The inputs are checked before any call: the repository name against
//!    ECR's rule ([`check_repository_name`]), the tag against the Docker
//!    reference grammar ([`check_tag`]), and the OCI layout on disk
//!    ([`LocalImage::read`]: one Docker v2 schema 2 manifest, every blob
//!    present with the digest its descriptor names).
//! 2. The repository is created if `DescribeRepositories` does not find it
//!    ([`ensure_repository`]), with secure defaults.
//! 3. `GetAuthorizationToken` gives the registry endpoint (`proxyEndpoint`)
//!    and a token, the base64 of `AWS:<password>`, sent as HTTP Basic auth
//!    (ECR User Guide, "Private registry authentication";
//!    <https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_GetAuthorizationToken.html>).
//! 4. Over the Docker Registry HTTP API V2 (OCI Distribution Specification
//!    v1.0, "Push"): each blob is first asked for with `HEAD
//!    /v2/<name>/blobs/<digest>` and skipped when present, else uploaded
//!    monolithically (`POST /v2/<name>/blobs/uploads/`, then `PUT
//!    <Location>?digest=<digest>` with the whole blob); then the manifest
//!    is `PUT /v2/<name>/manifests/<tag>` with its media type,
//!    `application/vnd.docker.distribution.manifest.v2+json`.
//!
//! The result is `<repositoryUri>@sha256:<hex>`, the reference SageMaker
//! and Kubernetes pull. The registry's scheme is the `proxyEndpoint`'s:
//! `https` for ECR, `http` for the local emulator's loopback registry.
//!
//! HTTP goes through a plain hyper client with rustls (the HTTP stack the
//! AWS SDK and `kube` already build on), with connection and per-request
//! time limits: see [`Registry`].

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_ecr::types::{
    EncryptionConfiguration, EncryptionType, ImageScanningConfiguration, ImageTagMutability,
};
use base64::Engine as _;
use http::{header, HeaderValue};
use http_body_util::{BodyExt as _, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

use super::digest;
use super::manifest::MANIFEST_MEDIA_TYPE;

/// The repository when none is given.
pub const DEFAULT_REPOSITORY: &str = "kfaws-trainer";
/// The image directory when none is given (`kfaws image build`'s default output).
pub const DEFAULT_IMAGE_DIR: &str = "kfaws-trainer-image";
/// The tag when neither `--tag` nor the layout's `index.json` names one.
pub const FALLBACK_TAG: &str = "latest";

/// Why an image could not be pushed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The tag names another image in a repository with immutable tags.
    #[error(
        "tag {tag:?} of the immutable ECR repository {repository} already names {existing}, not \
         this image ({image}); push it under a new tag (--tag), e.g. a version or the digest's \
         first characters"
    )]
    TagTaken {
        /// The repository.
        repository: String,
        /// The tag.
        tag: String,
        /// The digest it names.
        existing: String,
        /// This image's digest.
        image: String,
    },
    /// The repository name breaks ECR's rule.
    #[error("--repository {name:?} is invalid: {problem} (ECR CreateRepository repositoryName: 2-256 characters, lowercase path components of letters and digits separated by one of . _ -, joined by /)")]
    InvalidRepository {
        /// The name given.
        name: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// The tag breaks the Docker reference grammar.
    #[error("--tag {tag:?} is invalid: {problem} (a tag is 1-128 of letters, digits, _ . - and does not start with . or -)")]
    InvalidTag {
        /// The tag given.
        tag: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// The image directory is not a usable OCI layout from `kfaws image build`.
    #[error("{}: {problem}; build the image first (`kfaws image build`) or pass --image DIR", path.display())]
    Layout {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// An ECR API call failed.
    #[error("ECR {operation}: {message}")]
    Ecr {
        /// The operation, e.g. `CreateRepository`.
        operation: &'static str,
        /// `Code: message` from the service, or the SDK's description.
        message: String,
    },
    /// ECR answered something this push cannot use.
    #[error("ECR {operation} answered {problem}")]
    Answer {
        /// The operation.
        operation: &'static str,
        /// What is missing or malformed (never a secret).
        problem: String,
    },
    /// The first interrupt came: the push stopped before its next step.
    #[error(
        "interrupted before {before}: {uploaded} blob(s) uploaded, no tag written; push again to \
         finish (blobs already in the registry are not uploaded again)"
    )]
    Interrupted {
        /// The step not taken, e.g. `uploading blob sha256:…`.
        before: String,
        /// Blobs uploaded before it.
        uploaded: usize,
    },
    /// A registry request failed or was refused.
    #[error("registry {endpoint}: {method} {path}: {problem}")]
    Registry {
        /// The registry endpoint.
        endpoint: String,
        /// The HTTP method.
        method: &'static str,
        /// The request path (no credentials are ever in it).
        path: String,
        /// The status and the registry's error, or the transport error.
        problem: String,
    },
}

/// Checks a repository name against ECR's rule (ECR API Reference,
/// CreateRepository, `repositoryName`: length 2-256, pattern
/// `(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*`).
///
/// # Errors
/// [`PushError::InvalidRepository`] saying which part is wrong.
pub fn check_repository_name(name: &str) -> Result<(), PushError> {
    let bad = |problem| {
        Err(PushError::InvalidRepository {
            name: name.to_string(),
            problem,
        })
    };
    if !(2..=256).contains(&name.len()) {
        return bad("it must be 2 to 256 characters long");
    }
    for component in name.split('/') {
        if component.is_empty() {
            return bad("a path component is empty (leading, trailing or doubled /)");
        }
        if !component
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        {
            return bad("only lowercase letters, digits, . _ - and / are allowed");
        }
        let separators: &[char] = &['.', '_', '-'];
        if component.starts_with(separators) || component.ends_with(separators) {
            return bad("a path component starts or ends with . _ or -");
        }
        let chars: Vec<char> = component.chars().collect();
        if chars
            .windows(2)
            .any(|w| separators.contains(&w[0]) && separators.contains(&w[1]))
        {
            return bad("two of . _ - follow each other");
        }
    }
    Ok(())
}

/// Checks a tag against the Docker reference grammar
/// (distribution/reference: `[\w][\w.-]{0,127}`), which the registry API
/// enforces in the manifest path; it is stricter than ECR's `imageTag`
/// (1-300 characters).
///
/// # Errors
/// [`PushError::InvalidTag`] saying which part is wrong.
pub fn check_tag(tag: &str) -> Result<(), PushError> {
    let bad = |problem| {
        Err(PushError::InvalidTag {
            tag: tag.to_string(),
            problem,
        })
    };
    if !(1..=128).contains(&tag.len()) {
        return bad("it must be 1 to 128 characters long");
    }
    if tag.starts_with(['.', '-']) {
        return bad("it starts with . or -");
    }
    if !tag
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    {
        return bad("only letters, digits, _ . - are allowed");
    }
    Ok(())
}

/// A blob of the local image: its digest and bytes.
#[derive(Debug, Clone)]
pub struct Blob {
    /// `sha256:<hex>`, checked against the bytes.
    pub digest: String,
    /// The content.
    pub bytes: Vec<u8>,
}

/// The image read from an OCI layout directory.
#[derive(Debug, Clone)]
pub struct LocalImage {
    /// The manifest bytes, exactly as stored (their sha256 is the image digest).
    pub manifest: Vec<u8>,
    /// The config blob, then the layers in order.
    pub blobs: Vec<Blob>,
    /// The tag recorded in `index.json` (`org.opencontainers.image.ref.name`), if any.
    pub tag: Option<String>,
    /// The whole reference the image was built as, recorded in `index.json`
    /// (`io.containerd.image.name`, [`super::layout::IMAGE_NAME`]), if any.
    pub reference: Option<String>,
}

#[derive(Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    config: Descriptor,
    layers: Vec<Descriptor>,
}

impl LocalImage {
    /// Reads the image under `dir`: `dir/oci` (what `kfaws image build`
    /// writes) or `dir` itself when it holds `index.json` (OCI Image Layout
    /// Specification v1.0). The index must name exactly one manifest, of
    /// the Docker v2 schema 2 media type; each blob must exist and hash to
    /// its digest.
    ///
    /// # Errors
    /// [`PushError::Layout`] naming the file and the problem.
    pub fn read(dir: &Path) -> Result<Self, PushError> {
        let root = if dir.join("oci/index.json").is_file() {
            dir.join("oci")
        } else {
            dir.to_path_buf()
        };
        let layout = |path: &Path, problem: String| PushError::Layout {
            path: path.to_path_buf(),
            problem,
        };
        let index_path = root.join("index.json");
        let index_bytes =
            std::fs::read(&index_path).map_err(|e| layout(&index_path, e.to_string()))?;
        let index: Index = serde_json::from_slice(&index_bytes)
            .map_err(|e| layout(&index_path, format!("not an OCI image index: {e}")))?;
        let [entry] = index.manifests.as_slice() else {
            return Err(layout(
                &index_path,
                format!("names {} manifests, expected 1", index.manifests.len()),
            ));
        };
        if entry.media_type != MANIFEST_MEDIA_TYPE {
            return Err(layout(
                &index_path,
                format!(
                    "the manifest's media type is {:?}, not {MANIFEST_MEDIA_TYPE} (SageMaker accepts Docker v2 schema 2 only)",
                    entry.media_type
                ),
            ));
        }
        let read_blob = |d: &str| -> Result<Blob, PushError> {
            let hex = d
                .strip_prefix("sha256:")
                .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                .ok_or_else(|| {
                    layout(&index_path, format!("digest {d:?} is not sha256:<64 hex>"))
                })?;
            let path = root.join("blobs/sha256").join(hex);
            let bytes = std::fs::read(&path).map_err(|e| layout(&path, e.to_string()))?;
            if digest(&bytes) != d {
                return Err(layout(&path, format!("content does not hash to {d}")));
            }
            Ok(Blob {
                digest: d.to_string(),
                bytes,
            })
        };
        let manifest = read_blob(&entry.digest)?.bytes;
        let parsed: Manifest = serde_json::from_slice(&manifest).map_err(|e| {
            layout(
                &index_path,
                format!("manifest {} is not an image manifest: {e}", entry.digest),
            )
        })?;
        if parsed.media_type != MANIFEST_MEDIA_TYPE {
            return Err(layout(
                &index_path,
                format!(
                    "manifest {} has media type {:?}",
                    entry.digest, parsed.media_type
                ),
            ));
        }
        let mut blobs = vec![read_blob(&parsed.config.digest)?];
        for layer in &parsed.layers {
            blobs.push(read_blob(&layer.digest)?);
        }
        Ok(Self {
            manifest,
            blobs,
            tag: entry.annotations.get(super::layout::REF_NAME).cloned(),
            reference: entry.annotations.get(super::layout::IMAGE_NAME).cloned(),
        })
    }

    /// The image digest, `sha256:<hex>` of the manifest.
    pub fn digest(&self) -> String {
        digest(&self.manifest)
    }
}

fn ecr_error<E>(
    operation: &'static str,
) -> impl FnOnce(aws_sdk_ecr::error::SdkError<E>) -> PushError
where
    E: aws_sdk_ecr::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    move |e| PushError::Ecr {
        operation,
        message: crate::aws::error_message(&e),
    }
}

/// The repository's URI (`ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME`) and
/// whether this call created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    /// `repositoryUri`.
    pub uri: String,
    /// True when `CreateRepository` made it now.
    pub created: bool,
    /// Whether its tags are immutable (`imageTagMutability` `IMMUTABLE`).
    pub immutable: bool,
}

/// Finds repository `name` (`DescribeRepositories`) or creates it
/// (`CreateRepository`).
///
/// A new repository gets secure defaults: encryption at rest with
/// `AES256` (ECR-managed keys; a KMS key would add a key policy kfaws
/// does not manage), scan on push (ECR basic scanning reports known CVEs of
/// each pushed image), and **immutable tags**: a tag, once pushed, always
/// names the same image, as AWS Security Hub control ECR.2 asks ("ECR
/// private repositories should have tag immutability configured"). kfaws
/// refers to images by digest anyway; a rebuilt trainer is pushed under a
/// new `--tag`, and pushing the same image under the same tag again is a
/// no-op ([`push`] checks the tag first). An existing repository is used as
/// it is.
///
/// # Errors
/// [`PushError::Ecr`] when a call fails, [`PushError::Answer`] when the
/// repository has no URI.
pub async fn ensure_repository(
    ecr: &aws_sdk_ecr::Client,
    name: &str,
) -> Result<Repository, PushError> {
    let uri_of = |repos: &[aws_sdk_ecr::types::Repository], operation| {
        repos
            .iter()
            .find_map(|r| r.repository_uri().map(str::to_string))
            .ok_or_else(|| PushError::Answer {
                operation,
                problem: format!("no repositoryUri for {name:?}"),
            })
    };
    match ecr
        .describe_repositories()
        .repository_names(name)
        .send()
        .await
    {
        Ok(out) => {
            let immutable = out
                .repositories()
                .iter()
                .any(|r| r.image_tag_mutability() == Some(&ImageTagMutability::Immutable));
            return uri_of(out.repositories(), "DescribeRepositories").map(|uri| Repository {
                uri,
                created: false,
                immutable,
            });
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_repository_not_found_exception()) => {}
        Err(e) => return Err(ecr_error("DescribeRepositories")(e)),
    }
    let encryption = EncryptionConfiguration::builder()
        .encryption_type(EncryptionType::Aes256)
        .build()
        .expect("encryption_type is set");
    let created = ecr
        .create_repository()
        .repository_name(name)
        .image_tag_mutability(ImageTagMutability::Immutable)
        .image_scanning_configuration(
            ImageScanningConfiguration::builder()
                .scan_on_push(true)
                .build(),
        )
        .encryption_configuration(encryption)
        .send()
        .await;
    match created {
        Ok(out) => {
            let uri = out
                .repository()
                .and_then(|r| r.repository_uri())
                .ok_or_else(|| PushError::Answer {
                    operation: "CreateRepository",
                    problem: format!("no repositoryUri for {name:?}"),
                })?;
            tracing::info!(repository = name, uri, "created the ECR repository");
            Ok(Repository {
                uri: uri.to_string(),
                created: true,
                immutable: true,
            })
        }
        // Created by someone else between the two calls.
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_repository_already_exists_exception()) =>
        {
            let out = ecr
                .describe_repositories()
                .repository_names(name)
                .send()
                .await
                .map_err(ecr_error("DescribeRepositories"))?;
            let immutable = out
                .repositories()
                .iter()
                .any(|r| r.image_tag_mutability() == Some(&ImageTagMutability::Immutable));
            uri_of(out.repositories(), "DescribeRepositories").map(|uri| Repository {
                uri,
                created: false,
                immutable,
            })
        }
        Err(e) => Err(ecr_error("CreateRepository")(e)),
    }
}

/// Registry credentials from `GetAuthorizationToken`. `Debug` shows the
/// endpoint only.
#[derive(Clone)]
pub struct Authorization {
    /// `proxyEndpoint`: the registry URL (`https://ACCOUNT.dkr.ecr.REGION.amazonaws.com`).
    pub endpoint: String,
    /// The token: base64 of `AWS:<password>`, valid 12 hours.
    token: String,
}

impl std::fmt::Debug for Authorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorization")
            .field("endpoint", &self.endpoint)
            .field("token", &"<redacted>")
            .finish()
    }
}

impl Authorization {
    /// The `Authorization` header value: `Basic <token>`.
    fn header(&self) -> String {
        format!("Basic {}", self.token)
    }

    /// The same token for the registry at `endpoint` (another account's
    /// registry in the same region: "the returned authorization token can
    /// be used to access any Amazon ECR registry that the IAM principal has
    /// access to", GetAuthorizationToken API reference, `registryIds`).
    #[must_use]
    pub fn at(&self, endpoint: String) -> Self {
        Self {
            endpoint,
            token: self.token.clone(),
        }
    }
}

/// Calls `GetAuthorizationToken` for the caller's default registry. The
/// token is good for every registry of the client's region that the
/// caller may access (which is why the API deprecates `registryIds`): see
/// [`Authorization::at`].
///
/// # Errors
/// [`PushError::Ecr`] when the call fails; [`PushError::Answer`] when the
/// answer lacks a token or endpoint, the token is not base64 of
/// `user:password`, or the endpoint is not an http(s) URL.
pub async fn authorization(ecr: &aws_sdk_ecr::Client) -> Result<Authorization, PushError> {
    let out = ecr
        .get_authorization_token()
        .send()
        .await
        .map_err(ecr_error("GetAuthorizationToken"))?;
    let answer = |problem: &str| PushError::Answer {
        operation: "GetAuthorizationToken",
        problem: problem.to_string(),
    };
    let data = out
        .authorization_data()
        .first()
        .ok_or_else(|| answer("no authorizationData"))?;
    let token = data
        .authorization_token()
        .ok_or_else(|| answer("no authorizationToken"))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token)
        .map_err(|_| answer("an authorizationToken that is not base64"))?;
    if !decoded.contains(&b':') {
        return Err(answer("an authorizationToken that is not user:password"));
    }
    let endpoint = data
        .proxy_endpoint()
        .ok_or_else(|| answer("no proxyEndpoint"))?
        .trim_end_matches('/')
        .to_string();
    let url = url::Url::parse(&endpoint)
        .map_err(|e| answer(&format!("proxyEndpoint {endpoint:?}, not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(answer(&format!(
            "proxyEndpoint {endpoint:?}, not an http(s) URL"
        )));
    }
    tracing::debug!(endpoint, expires_at = ?data.expires_at(), "got an ECR authorization token");
    Ok(Authorization {
        endpoint,
        token: token.to_string(),
    })
}

/// One registry answer: status, the headers a push reads, the body.
#[derive(Debug)]
struct Reply {
    status: u16,
    location: Option<String>,
    digest: Option<String>,
    body: Vec<u8>,
}

impl Reply {
    /// The registry's error (`{"errors": [{"code", "message"}]}`, OCI
    /// Distribution Specification "Error Codes") or the start of the body.
    fn problem(&self) -> String {
        #[derive(Deserialize)]
        struct Errors {
            errors: Vec<ErrorEntry>,
        }
        #[derive(Deserialize)]
        struct ErrorEntry {
            code: String,
            #[serde(default)]
            message: String,
        }
        let detail = match serde_json::from_slice::<Errors>(&self.body) {
            Ok(e) if !e.errors.is_empty() => e
                .errors
                .iter()
                .map(|e| format!("{}: {}", e.code, e.message))
                .collect::<Vec<_>>()
                .join("; "),
            _ => String::from_utf8_lossy(&self.body[..self.body.len().min(300)]).into_owned(),
        };
        format!("HTTP {} {detail}", self.status)
    }
}

/// How long [`Registry`] waits for the TCP connection to the registry.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The time every registry request may take, whatever its size: the
/// connection, the TLS handshake, the registry's work and its answer.
const REQUEST_TIME_BASE: Duration = Duration::from_secs(120);

/// The slowest upload a request's time limit allows for, in bytes per
/// second: 256 KiB/s, about 2 Mbit/s, a slow office or home uplink.
const MIN_UPLOAD_BYTES_PER_SECOND: u64 = 256 * 1024;

/// The time limit of one registry request sending `body_len` bytes, from
/// its start to the last byte of the answer: [`REQUEST_TIME_BASE`] plus the
/// body's time at [`MIN_UPLOAD_BYTES_PER_SECOND`] (2 minutes for a `HEAD`,
/// about 70 minutes for a 1 GiB layer). A stalled or far too slow transfer
/// fails instead of hanging the push; a layer on a slow link still fits.
fn request_timeout(body_len: usize) -> Duration {
    let body_len = u64::try_from(body_len).unwrap_or(u64::MAX);
    REQUEST_TIME_BASE + Duration::from_secs(body_len.div_ceil(MIN_UPLOAD_BYTES_PER_SECOND))
}

/// `error` and its sources, joined by `: ` (hyper's errors name only their
/// kind, e.g. `client error (Connect)`; the cause is in the sources).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The request body type of [`Registry`]'s client: the whole body, sent at once.
type RequestBody = Full<Cursor<Vec<u8>>>;

/// A client of one repository of a Docker Registry HTTP API V2 endpoint.
///
/// The transport is a plain HTTP/1.1 client (hyper-util's pooled client on
/// tokio) with a rustls connector using the aws-lc-rs provider and the
/// platform's root certificates (`rustls-native-certs`: the system bundle,
/// or `SSL_CERT_FILE` / `SSL_CERT_DIR`). It speaks `https` (ECR) or plain
/// `http` (the local emulator's loopback registry), whichever the endpoint
/// names, and returns any status to the caller. Connecting times out after
/// 30 s; each request, answer included, must finish within 2 minutes plus
/// its body's time at 256 KiB/s (`request_timeout`), so large layers
/// upload on slow links but a stalled transfer fails. The `Authorization`
/// header is marked sensitive and never logged.
pub struct Registry {
    client: Client<HttpsConnector<HttpConnector>, RequestBody>,
    endpoint: String,
    authorization: String,
    repository: String,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("endpoint", &self.endpoint)
            .field("repository", &self.repository)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A client of `repository` at `auth.endpoint`.
    ///
    /// # Errors
    /// [`PushError::Registry`] when the client cannot be built: the
    /// endpoint is not a URI, or no root certificate could be loaded for
    /// TLS.
    pub fn new(auth: &Authorization, repository: &str) -> Result<Self, PushError> {
        let fail = |problem: String| PushError::Registry {
            endpoint: auth.endpoint.clone(),
            method: "CONNECT",
            path: String::new(),
            problem,
        };
        if let Err(e) = auth.endpoint.parse::<http::Uri>() {
            return Err(fail(format!("not a URI: {e}")));
        }
        let mut tcp = HttpConnector::new();
        // The TLS connector wrapping it handles `https`.
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        // rustls' default crypto provider: aws-lc-rs, the only one this tree
        // compiles (as for kube and the AWS SDK's clients).
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| fail(format!("TLS root certificates: {e}")))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self {
            client,
            endpoint: auth.endpoint.clone(),
            authorization: auth.header(),
            repository: repository.to_string(),
        })
    }

    fn fail(&self, method: &'static str, path: &str, problem: String) -> PushError {
        PushError::Registry {
            endpoint: self.endpoint.clone(),
            method,
            path: path.to_string(),
            problem,
        }
    }

    /// Sends one request; `path_and_query` is relative to the endpoint, or
    /// an absolute `http(s)://` URL on another host (where a registry
    /// redirects a blob download: ECR to a pre-signed S3 URL), which is sent
    /// without the registry's credentials and shown in errors without its
    /// query (the pre-signed signature). The whole exchange, answer body
    /// included, is bounded by [`request_timeout`].
    async fn call(
        &self,
        method: &'static str,
        path_and_query: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Reply, PushError> {
        let absolute =
            path_and_query.starts_with("https://") || path_and_query.starts_with("http://");
        let shown = match absolute {
            true => path_and_query.split('?').next().unwrap_or_default(),
            false => path_and_query,
        };
        let fail = |problem: String| self.fail(method, shown, problem);
        let verb = http::Method::from_bytes(method.as_bytes())
            .map_err(|e| fail(format!("method: {e}")))?;
        let target = match absolute {
            true => path_and_query.to_string(),
            false => format!("{}{path_and_query}", self.endpoint),
        };
        let uri: http::Uri = target.parse().map_err(|e| fail(format!("path: {e}")))?;
        let value = |name: &str, value: &str| {
            HeaderValue::from_str(value).map_err(|e| fail(format!("header {name}: {e}")))
        };
        let mut request = http::Request::builder().method(verb).uri(uri);
        if !absolute {
            let mut authorization = value("authorization", &self.authorization)?;
            authorization.set_sensitive(true);
            request = request.header(header::AUTHORIZATION, authorization);
        }
        let mut request = request.header(
            header::ACCEPT,
            value(
                "accept",
                "application/vnd.docker.distribution.manifest.v2+json, application/json",
            )?,
        );
        if let Some(ct) = content_type {
            request = request.header(header::CONTENT_TYPE, value("content-type", ct)?);
        }
        let limit = request_timeout(body.len());
        let request = request
            .body(Full::new(Cursor::new(body)))
            .map_err(|e| fail(e.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| fail(error_chain(&e)))?;
            let read = |name: header::HeaderName| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let (status, location, digest) = (
                response.status().as_u16(),
                read(header::LOCATION),
                read(header::HeaderName::from_static("docker-content-digest")),
            );
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| fail(error_chain(&e)))?
                .to_bytes()
                .to_vec();
            Ok(Reply {
                status,
                location,
                digest,
                body,
            })
        };
        let reply = tokio::time::timeout(limit, exchange).await.map_err(|_| {
            fail(format!(
                "no complete answer within {} s (the time limit for this request's size)",
                limit.as_secs()
            ))
        })??;
        tracing::debug!(method, path = shown, status = reply.status, "registry");
        Ok(reply)
    }

    /// Whether the repository has blob `digest` (`HEAD /v2/<name>/blobs/<digest>`: 200 yes, 404 no).
    ///
    /// # Errors
    /// [`PushError::Registry`] for any other answer.
    pub async fn has_blob(&self, digest: &str) -> Result<bool, PushError> {
        let path = format!("/v2/{}/blobs/{digest}", self.repository);
        let reply = self.call("HEAD", &path, None, Vec::new()).await?;
        match reply.status {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(self.fail("HEAD", &path, reply.problem())),
        }
    }

    /// Uploads `blob` in one request: `POST /v2/<name>/blobs/uploads/`
    /// (202 with `Location`), then `PUT <Location>?digest=<digest>` with the
    /// whole content (201).
    ///
    /// # Errors
    /// [`PushError::Registry`] when either step is refused, the upload
    /// location is on another host, or the registry stored another digest.
    pub async fn upload_blob(&self, blob: &Blob) -> Result<(), PushError> {
        let start = format!("/v2/{}/blobs/uploads/", self.repository);
        let reply = self.call("POST", &start, None, Vec::new()).await?;
        if reply.status != 202 {
            return Err(self.fail("POST", &start, reply.problem()));
        }
        let location = reply.location.ok_or_else(|| {
            self.fail("POST", &start, "HTTP 202 without a Location header".into())
        })?;
        let base = url::Url::parse(&self.endpoint)
            .map_err(|e| self.fail("POST", &start, e.to_string()))?;
        let mut target = base
            .join(&location)
            .map_err(|e| self.fail("POST", &start, format!("Location {location:?}: {e}")))?;
        if target.origin() != base.origin() {
            return Err(self.fail(
                "POST",
                &start,
                format!(
                    "the upload location {} is on another host",
                    target.origin().ascii_serialization()
                ),
            ));
        }
        target.query_pairs_mut().append_pair("digest", &blob.digest);
        let put = target[url::Position::BeforePath..].to_string();
        let reply = self
            .call(
                "PUT",
                &put,
                Some("application/octet-stream"),
                blob.bytes.clone(),
            )
            .await?;
        let path = format!("/v2/{}/blobs/uploads/<upload id>", self.repository);
        if reply.status != 201 {
            return Err(self.fail("PUT", &path, reply.problem()));
        }
        if let Some(stored) = reply.digest.filter(|d| *d != blob.digest) {
            return Err(self.fail(
                "PUT",
                &path,
                format!("the registry stored {stored}, expected {}", blob.digest),
            ));
        }
        Ok(())
    }

    /// The digest of the manifest `reference` names, if it exists
    /// (`HEAD /v2/<name>/manifests/<reference>`).
    ///
    /// # Errors
    /// [`PushError::Registry`] for an answer other than 200 or 404.
    pub async fn manifest_digest(&self, reference: &str) -> Result<Option<String>, PushError> {
        let path = format!("/v2/{}/manifests/{reference}", self.repository);
        let reply = self.call("HEAD", &path, None, Vec::new()).await?;
        match reply.status {
            200 => Ok(reply.digest),
            404 => Ok(None),
            _ => Err(self.fail("HEAD", &path, reply.problem())),
        }
    }

    /// The manifest `reference` (a tag or `sha256:` digest) names, if it
    /// exists (`GET /v2/<name>/manifests/<reference>`, asking for Docker v2
    /// schema 2); a digest reference is checked against the bytes.
    ///
    /// # Errors
    /// [`PushError::Registry`] for an answer other than 200 or 404, or
    /// bytes that do not have the digest asked for.
    pub async fn manifest(&self, reference: &str) -> Result<Option<Vec<u8>>, PushError> {
        let path = format!("/v2/{}/manifests/{reference}", self.repository);
        let reply = self.call("GET", &path, None, Vec::new()).await?;
        match reply.status {
            200 => {
                self.check_digest(&path, reference, &reply.body)?;
                Ok(Some(reply.body))
            }
            404 => Ok(None),
            _ => Err(self.fail("GET", &path, reply.problem())),
        }
    }

    /// Blob `digest` (`GET /v2/<name>/blobs/<digest>`), following one
    /// redirect (ECR answers 307 with a pre-signed S3 URL; OCI Distribution
    /// Specification, "Pulling blobs"), checked against its digest.
    ///
    /// # Errors
    /// [`PushError::Registry`] when refused, redirected more than once, or
    /// the bytes do not have `digest`.
    pub async fn blob(&self, digest: &str) -> Result<Vec<u8>, PushError> {
        let path = format!("/v2/{}/blobs/{digest}", self.repository);
        let mut reply = self.call("GET", &path, None, Vec::new()).await?;
        if matches!(reply.status, 301 | 302 | 303 | 307 | 308) {
            let location = reply.location.clone().ok_or_else(|| {
                self.fail(
                    "GET",
                    &path,
                    format!("HTTP {} without a Location header", reply.status),
                )
            })?;
            let base = url::Url::parse(&self.endpoint)
                .map_err(|e| self.fail("GET", &path, e.to_string()))?;
            let target = base
                .join(&location)
                .map_err(|e| self.fail("GET", &path, format!("Location: {e}")))?;
            // The registry's own host gets the credentials again; another host does not.
            let next = match target.origin() == base.origin() {
                true => target[url::Position::BeforePath..].to_string(),
                false => target.to_string(),
            };
            reply = self.call("GET", &next, None, Vec::new()).await?;
        }
        if reply.status != 200 {
            return Err(self.fail("GET", &path, reply.problem()));
        }
        self.check_digest(&path, digest, &reply.body)?;
        Ok(reply.body)
    }

    /// Checks `bytes` against `reference` when it is a `sha256:` digest.
    fn check_digest(&self, path: &str, reference: &str, bytes: &[u8]) -> Result<(), PushError> {
        let actual = digest(bytes);
        if reference.starts_with("sha256:") && actual != reference {
            return Err(self.fail(
                "GET",
                path,
                format!("the registry answered bytes of digest {actual}"),
            ));
        }
        Ok(())
    }

    /// Puts `manifest` (Docker v2 schema 2) under `tag` (201); returns the
    /// digest the registry reports.
    ///
    /// # Errors
    /// [`PushError::Registry`] when refused (e.g. `TAG_INVALID` for an
    /// existing tag of an immutable repository, a blob unknown).
    pub async fn put_manifest(&self, tag: &str, manifest: &[u8]) -> Result<String, PushError> {
        let path = format!("/v2/{}/manifests/{tag}", self.repository);
        let reply = self
            .call("PUT", &path, Some(MANIFEST_MEDIA_TYPE), manifest.to_vec())
            .await?;
        if reply.status != 201 {
            return Err(self.fail("PUT", &path, reply.problem()));
        }
        Ok(reply.digest.unwrap_or_else(|| digest(manifest)))
    }
}

/// What [`push`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// `repositoryUri@sha256:<hex>`.
    pub reference: String,
    /// The repository.
    pub repository: Repository,
    /// The tag.
    pub tag: String,
    /// Blobs uploaded.
    pub uploaded: usize,
    /// Blobs the registry already had.
    pub skipped: usize,
    /// Whether the manifest was put (false: the tag already named this image).
    pub manifest_put: bool,
}

/// Pushes `image` to ECR repository `repository` under `tag`: the
/// repository is found or created, then the blobs and the manifest are
/// pushed as the module documentation describes.
///
/// `repository` and `tag` are checked by the caller ([`check_repository_name`],
/// [`check_tag`]) before any call; they are checked again here. Once `stop`
/// is cancelled (the first interrupt) the call in flight finishes and no
/// further step (repository, token, blob, manifest) starts.
///
/// # Errors
/// [`PushError`]: invalid input, a failed ECR call, a registry refusal, a
/// registry that stored another digest than the image's, or
/// [`PushError::Interrupted`].
pub async fn push(
    sdk: &SdkConfig,
    image: &LocalImage,
    repository: &str,
    tag: &str,
    stop: &tokio_util::sync::CancellationToken,
) -> Result<Pushed, PushError> {
    check_repository_name(repository)?;
    check_tag(tag)?;
    let (mut uploaded, mut skipped) = (0, 0);
    let check = |before: &str, uploaded: usize| match stop.is_cancelled() {
        true => Err(PushError::Interrupted {
            before: before.to_string(),
            uploaded,
        }),
        false => Ok(()),
    };
    let ecr = crate::aws::client::<aws_sdk_ecr::Client>(sdk);
    check("looking up the repository", 0)?;
    let repo = ensure_repository(&ecr, repository).await?;
    check("asking for a registry token", 0)?;
    let auth = authorization(&ecr).await?;
    let registry = Registry::new(&auth, repository)?;
    let image_digest = image.digest();
    // ECR refuses to move a tag of an immutable repository
    // (ImageTagAlreadyExistsException on the manifest PUT): say so before
    // uploading anything.
    let existing = registry.manifest_digest(tag).await?;
    if let Some(other) = existing
        .as_deref()
        .filter(|d| *d != image_digest && repo.immutable)
    {
        return Err(PushError::TagTaken {
            repository: repository.to_string(),
            tag: tag.to_string(),
            existing: other.to_string(),
            image: image_digest,
        });
    }
    for blob in &image.blobs {
        check(&format!("uploading blob {}", blob.digest), uploaded)?;
        if registry.has_blob(&blob.digest).await? {
            tracing::info!(digest = %blob.digest, "blob already in the registry");
            skipped += 1;
        } else {
            registry.upload_blob(blob).await?;
            tracing::info!(digest = %blob.digest, bytes = blob.bytes.len(), "uploaded blob");
            uploaded += 1;
        }
    }
    let manifest_put = existing.as_deref() != Some(image_digest.as_str());
    if manifest_put {
        check(&format!("writing the manifest under tag {tag}"), uploaded)?;
        let stored = registry.put_manifest(tag, &image.manifest).await?;
        if stored != image_digest {
            return Err(PushError::Registry {
                endpoint: auth.endpoint.clone(),
                method: "PUT",
                path: format!("/v2/{repository}/manifests/{tag}"),
                problem: format!("the registry stored {stored}, expected {image_digest}"),
            });
        }
    }
    Ok(Pushed {
        reference: format!("{}@{image_digest}", repo.uri),
        repository: repo,
        tag: tag.to_string(),
        uploaded,
        skipped,
        manifest_put,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_names_follow_ecr_rules() {
        for ok in ["kfaws-trainer", "team/trainer", "a.b_c-d/e0", "ab"] {
            check_repository_name(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "a",
            "Trainer",
            "-trainer",
            "trainer-",
            "a//b",
            "/ab",
            "ab/",
            "a..b",
            "a_-b",
            "a b",
            "tr:ainer",
            &"a".repeat(257),
        ] {
            let err = check_repository_name(bad).expect_err(bad).to_string();
            assert!(err.starts_with("--repository "), "{err}");
        }
    }

    #[test]
    fn tags_follow_the_docker_grammar() {
        for ok in ["latest", "0.1.0", "v1_rc-2", "_x", &"a".repeat(128)] {
            check_tag(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in ["", ".x", "-x", "a:b", "a/b", "a b", &"a".repeat(129)] {
            let err = check_tag(bad).expect_err(bad).to_string();
            assert!(err.starts_with("--tag "), "{err}");
        }
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let auth = Authorization {
            endpoint: "https://1.dkr.ecr.us-east-1.amazonaws.com".into(),
            token: "QVdTOnNlY3JldA==".into(),
        };
        let shown = format!("{auth:?}");
        assert!(!shown.contains("QVdTOnNlY3JldA"), "{shown}");
        assert!(shown.contains("redacted"));
    }

    #[test]
    fn request_time_limits_grow_with_the_body() {
        assert_eq!(request_timeout(0), REQUEST_TIME_BASE);
        let gib = 1u64 << 30;
        let limit = request_timeout(usize::try_from(gib).unwrap());
        assert_eq!(
            limit,
            REQUEST_TIME_BASE + Duration::from_secs(gib / MIN_UPLOAD_BYTES_PER_SECOND)
        );
        assert!(limit > Duration::from_secs(3600), "{limit:?}");
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_registry_error_with_its_cause() {
        // A loopback port nobody listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let auth = Authorization {
            endpoint: format!("http://127.0.0.1:{port}"),
            token: "QVdTOnNlY3JldA==".into(),
        };
        let registry = Registry::new(&auth, "kfaws-trainer").unwrap();
        let err = registry.has_blob(&digest(b"x")).await.unwrap_err();
        let PushError::Registry { method, path, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(*method, "HEAD");
        assert!(
            path.starts_with("/v2/kfaws-trainer/blobs/sha256:"),
            "{path}"
        );
        let shown = err.to_string();
        // hyper's own error names only its kind; the cause comes from its sources.
        assert!(shown.contains("client error (Connect): "), "{shown}");
        assert!(shown.contains("Connection refused"), "{shown}");
        assert!(!shown.contains("QVdTOnNlY3JldA"), "{shown}");
    }

    /// Answers one HTTP request on `listener` with `response` (a whole
    /// HTTP/1.1 answer); returns the request's head.
    async fn answer_once(
        listener: tokio::net::TcpListener,
        response: String,
    ) -> tokio::task::JoinHandle<String> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                stream.read_exact(&mut byte).await.unwrap();
                head.push(byte[0]);
            }
            stream.write_all(response.as_bytes()).await.unwrap();
            stream.shutdown().await.unwrap();
            String::from_utf8(head).unwrap().to_ascii_lowercase()
        })
    }

    /// ECR answers a blob GET with 307 and a pre-signed S3 URL (OCI
    /// Distribution Specification, "Pulling blobs"). The CNCF registry the
    /// emulator runs serves blobs itself, so this branch is proven against
    /// two loopback listeners: the registry's token goes to the registry
    /// only, and the pre-signed query never reaches an error message.
    #[tokio::test]
    async fn a_blob_redirected_to_another_host_is_fetched_without_the_registry_token() {
        let bind = || async { tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap() };
        let (ecr, s3) = (bind().await, bind().await);
        let s3_url = format!("http://{}", s3.local_addr().unwrap());
        let auth = Authorization {
            endpoint: format!("http://{}", ecr.local_addr().unwrap()),
            token: "QVdTOnNlY3JldA==".into(),
        };
        let registry = Registry::new(&auth, "kfaws-trainer").unwrap();
        let blob = b"{\"config\":{}}".to_vec();
        let redirect = |to: &str| {
            format!("HTTP/1.1 307 Temporary Redirect\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        };
        let location = format!("{s3_url}/layers/x?X-Amz-Signature=presigned-secret");
        let ecr_seen = answer_once(ecr, redirect(&location)).await;
        let s3_seen = answer_once(
            s3,
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                blob.len(),
                String::from_utf8(blob.clone()).unwrap()
            ),
        )
        .await;
        assert_eq!(registry.blob(&digest(&blob)).await.unwrap(), blob);
        let ecr_head = ecr_seen.await.unwrap();
        assert!(
            ecr_head.contains("authorization: basic qvdtonnly3jlda=="),
            "{ecr_head}"
        );
        let s3_head = s3_seen.await.unwrap();
        assert!(
            s3_head.starts_with("get /layers/x?x-amz-signature="),
            "{s3_head}"
        );
        assert!(!s3_head.contains("authorization"), "{s3_head}");

        // The other host refuses: the error names it without the pre-signed query.
        let (ecr, s3) = (bind().await, bind().await);
        let auth = Authorization {
            endpoint: format!("http://{}", ecr.local_addr().unwrap()),
            token: "QVdTOnNlY3JldA==".into(),
        };
        let registry = Registry::new(&auth, "kfaws-trainer").unwrap();
        let location = format!(
            "http://{}/layers/x?X-Amz-Signature=presigned-secret",
            s3.local_addr().unwrap()
        );
        let _ecr = answer_once(ecr, redirect(&location)).await;
        let _s3 = answer_once(
            s3,
            "HTTP/1.1 403 Forbidden\r\nContent-Length: 13\r\nConnection: close\r\n\r\nAccessDenied.".into(),
        )
        .await;
        let err = registry.blob(&digest(&blob)).await.unwrap_err().to_string();
        assert!(
            err.contains("HTTP 403") && err.contains("AccessDenied"),
            "{err}"
        );
        assert!(!err.contains("presigned-secret"), "{err}");
    }
}
