//! `kfaws-trainer serve`: the SageMaker inference container contract
//! (docs.aws.amazon.com/sagemaker, "Use Your Own Inference Code with Hosting Services"):
//! `GET /ping` (and `HEAD`) answers 200 once the model is loaded; `POST /invocations` classifies
//! `application/x-image` (PNG or JPEG of any size, resized to the model's input) or
//! `application/json` (`{"instances": [[pixel, …], …]}`, each instance `C×H×W` pixel values in
//! `0..=255`, channel-major) and answers `{"score": [[p0, …, p9], …], "label": "…", "index": N,
//! "labels": […], "indices": […]}` (`label`/`index` for the first instance, scores are
//! softmax probabilities).
//!
//! HTTP/1.1 by hyper on one asynchronous thread, which answers `/ping` and receives bodies;
//! classification runs on `--workers` blocking threads, so a slow invocation (or a client slow
//! to send its body) never delays the health check SageMaker polls. At most `--workers` × 5
//! invocations are admitted at once (running, waiting for a worker, or receiving their body);
//! the next gets 503 without its body being read. A client has `--body-timeout-secs` to send
//! its headers, then as long again for its body (408), so a client that stops sending frees its
//! place.

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::model::Net;
use crate::ModelInfo;

/// `kfaws-trainer serve` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Directory with `model.bpk` and `model.json` (SageMaker extracts the model there).
    #[arg(long, env = "TRAINER_MODEL_DIR", default_value = "/opt/ml/model")]
    pub model_dir: PathBuf,
    /// Port to listen on (SageMaker sends traffic to 8080).
    #[arg(long, env = "TRAINER_SERVE_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Address to bind.
    #[arg(long, env = "TRAINER_SERVE_BIND_ADDR", default_value = "0.0.0.0")]
    pub bind_addr: String,
    /// Largest request body accepted, in bytes (SageMaker real-time endpoints cap payloads at 6 MB).
    #[arg(long, env = "TRAINER_MAX_BODY_BYTES", default_value_t = 6 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_body_bytes: u64,
    /// Largest image accepted, in pixels (width × height), checked from the image's header
    /// before it is decoded: the body limit bounds only the compressed size, and a 400 KB PNG
    /// can declare 20000×20000 pixels. Larger images get 413.
    #[arg(long, env = "TRAINER_MAX_IMAGE_PIXELS", default_value_t = DEFAULT_MAX_IMAGE_PIXELS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_image_pixels: u64,
    /// Invocations classified at once, each on its own thread [default: the number of CPUs].
    /// Up to 4 more per worker wait in a queue; beyond that a request gets 503.
    #[arg(long, env = "TRAINER_SERVE_WORKERS")]
    pub workers: Option<NonZeroUsize>,
    /// Seconds a client has to send a request's headers, and then its body; a body that has
    /// not arrived by then gets 408 and frees its place in the queue.
    #[arg(long, env = "TRAINER_BODY_TIMEOUT", default_value_t = DEFAULT_BODY_TIMEOUT_SECS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub body_timeout_secs: u64,
}

/// The default `--max-image-pixels`: 16,777,216 (4096 × 4096), which takes a 12-megapixel
/// camera photo (4032 × 3024) and bounds a decoded image to 64 MiB as RGBA with 8 bits per
/// channel.
pub const DEFAULT_MAX_IMAGE_PIXELS: u64 = 4096 * 4096;

/// Invocations that may wait per worker before the server answers 503.
const QUEUED_PER_WORKER: usize = 4;

/// How long a stop signal leaves the requests in progress to finish: `docker stop`'s default
/// wait before it kills a container (10 s).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The default `--body-timeout-secs`: SageMaker real-time endpoints give a container 60 s to
/// answer an invocation, so a body still arriving after that has no one waiting for it.
pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 60;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The model directory is incomplete or unreadable.
    #[error("cannot load the model from {path}: {detail}")]
    Model {
        /// The file that could not be loaded: `model.json` or the model record `model.bpk`.
        path: PathBuf,
        /// The I/O, JSON or burn record error.
        detail: String,
    },
    /// The port could not be bound.
    #[error("cannot listen on {addr}: {detail}")]
    Bind {
        /// The address asked for, `bind_addr:port`.
        addr: String,
        /// The operating system's error.
        detail: String,
    },
    /// The asynchronous I/O runtime (tokio) could not start: no file descriptor or thread left.
    #[error("cannot start the I/O runtime: {0}")]
    Runtime(String),
}

/// A loaded model ready to classify.
#[derive(Debug)]
pub struct Classifier {
    net: Net,
    info: ModelInfo,
    device: Device,
    max_image_pixels: u64,
}

/// The answer to one invocation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Prediction {
    /// Softmax probabilities per instance, 10 each.
    pub score: Vec<Vec<f32>>,
    /// Class name of the first instance.
    pub label: String,
    /// Class index of the first instance.
    pub index: usize,
    /// Class names of all instances.
    pub labels: Vec<String>,
    /// Class indices of all instances.
    pub indices: Vec<usize>,
}

/// A request the server refuses, with its HTTP status.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// HTTP status code.
    pub status: u16,
    /// Reason, sent as the body.
    pub message: String,
}

fn reject(status: u16, message: impl Into<String>) -> Rejection {
    Rejection {
        status,
        message: message.into(),
    }
}

impl Classifier {
    /// Loads `model.json` and `model.bpk` from `dir` onto burn's CPU backend.
    ///
    /// # Errors
    /// [`ServeError::Model`] naming the file that is missing or unreadable, or naming
    /// `model.json` when it does not describe itself or `model.bpk` consistently
    /// ([`ModelInfo::check`], [`ModelInfo::check_against`]).
    pub fn load(dir: &Path) -> Result<Self, ServeError> {
        let info_path = dir.join(crate::MODEL_INFO_FILE);
        let model_err = |path: &Path, detail: String| ServeError::Model {
            path: path.to_path_buf(),
            detail,
        };
        let text = std::fs::read_to_string(&info_path)
            .map_err(|e| model_err(&info_path, e.to_string()))?;
        // Checked before the network is built: `Net::new` panics on an input under 16×16.
        let info = ModelInfo::from_json(&text).map_err(|e| model_err(&info_path, e.to_string()))?;
        let device = Device::flex();
        let weights = dir.join(crate::MODEL_FILE);
        let net = Net::new(info.input_shape, &device)
            .try_load_file(&weights)
            .map_err(|e| match e {
                // Tensors of other shapes than the network built for `input_shape` has.
                burn::store::RecordError::Validation(_) => model_err(
                    &weights,
                    format!(
                        "it does not fit the network that model.json's `input_shape` {:?} \
                         describes (`input_shape` must have the model's channels and the size \
                         it was trained for): {e}",
                        info.input_shape
                    ),
                ),
                burn::store::RecordError::Io(_) => model_err(&weights, e.to_string()),
            })?;
        info.check_against(&net)
            .map_err(|e| model_err(&info_path, e.to_string()))?;
        Ok(Self {
            net,
            info,
            device,
            max_image_pixels: DEFAULT_MAX_IMAGE_PIXELS,
        })
    }

    /// Refuses images of more than `pixels` pixels (width × height) with 413
    /// ([`DEFAULT_MAX_IMAGE_PIXELS`] unless set).
    #[must_use]
    pub fn with_max_image_pixels(mut self, pixels: u64) -> Self {
        self.max_image_pixels = pixels;
        self
    }

    /// The model's description.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Classifies a request body of `content_type`.
    ///
    /// # Errors
    /// 415 for a content type other than `application/x-image`, `image/png`, `image/jpeg` or
    /// `application/json`; 400 for an undecodable image or malformed JSON; 413 for an image
    /// of more pixels than the limit ([`Classifier::with_max_image_pixels`]).
    pub fn invoke(&self, content_type: &str, body: &[u8]) -> Result<Prediction, Rejection> {
        let media = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let instances = match media.as_str() {
            "application/x-image" | "image/png" | "image/jpeg" => vec![self.decode_image(body)?],
            "application/json" => self.decode_json(body)?,
            other => {
                return Err(reject(
                    415,
                    format!("content type {other:?} is not supported: use application/x-image, image/png or image/jpeg (a PNG or JPEG image), or application/json"),
                ))
            }
        };
        Ok(self.predict(&instances))
    }

    /// An image of any size and colour type → `C×H×W` pixels of the model's input. Its size
    /// is read from its header and checked before anything is decoded.
    fn decode_image(&self, body: &[u8]) -> Result<Vec<u8>, Rejection> {
        let reader = || {
            image::ImageReader::new(std::io::Cursor::new(body))
                .with_guessed_format()
                .expect("reading from memory cannot fail")
        };
        // The format its signature names, so the error says which of the three cases it is.
        let format = reader().format();
        let undecodable = |e: image::ImageError| {
            use image::ImageFormat::{Jpeg, Png};
            reject(
                400,
                match format {
                    Some(f @ (Png | Jpeg)) => format!(
                        "cannot decode the image: its first bytes say {}, but it does not \
                         decode (damaged, cut short or invalid: {e})",
                        format!("{f:?}").to_uppercase()
                    ),
                    Some(f) => format!(
                        "the image is {}; PNG and JPEG are accepted",
                        format!("{f:?}").to_uppercase()
                    ),
                    None => "the body is not a PNG or JPEG image (its first bytes match neither \
                             signature)"
                        .to_string(),
                },
            )
        };
        let (width, height) = reader().into_dimensions().map_err(undecodable)?;
        let pixels = u64::from(width) * u64::from(height);
        if pixels > self.max_image_pixels {
            return Err(reject(
                413,
                format!(
                    "the image is {width}×{height} = {pixels} pixels; at most {} are accepted \
                     (--max-image-pixels)",
                    self.max_image_pixels
                ),
            ));
        }
        let image = reader().decode().map_err(undecodable)?;
        let [c, h, w] = self.info.input_shape;
        let resized = image.resize_exact(w as u32, h as u32, image::imageops::FilterType::Triangle);
        Ok(if c == 1 {
            resized.to_luma8().into_raw()
        } else {
            let rgb = resized.to_rgb8();
            (0..3)
                .flat_map(|ch| rgb.pixels().map(move |p| p.0[ch]))
                .collect()
        })
    }

    fn decode_json(&self, body: &[u8]) -> Result<Vec<Vec<u8>>, Rejection> {
        #[derive(serde::Deserialize)]
        struct Instances {
            instances: Vec<Vec<f64>>,
        }
        let parsed: Instances = serde_json::from_slice(body).map_err(|e| {
            reject(
                400,
                format!("expected {{\"instances\": [[pixel, ...], ...]}}: {e}"),
            )
        })?;
        let size: usize = self.info.input_shape.iter().product();
        if parsed.instances.is_empty() {
            return Err(reject(400, "\"instances\" is empty"));
        }
        parsed
            .instances
            .iter()
            .enumerate()
            .map(|(i, pixels)| {
                if pixels.len() != size {
                    return Err(reject(
                        400,
                        format!(
                            "instance {i} has {} values, the model takes {size} ({:?} C×H×W)",
                            pixels.len(),
                            self.info.input_shape
                        ),
                    ));
                }
                pixels
                    .iter()
                    .map(|&p| {
                        (0.0..=255.0)
                            .contains(&p)
                            .then_some(p.round() as u8)
                            .ok_or_else(|| {
                                // 1e308 in scientific notation, not 309 digits.
                                let shown = if p.abs() < 1e6 {
                                    format!("{p}")
                                } else {
                                    format!("{p:e}")
                                };
                                reject(
                                    400,
                                    format!("instance {i}: pixel {shown} is not from 0 to 255"),
                                )
                            })
                    })
                    .collect()
            })
            .collect()
    }

    fn predict(&self, instances: &[Vec<u8>]) -> Prediction {
        let [c, h, w] = self.info.input_shape;
        let plane = h * w;
        let mut input = Vec::with_capacity(instances.len() * c * plane);
        for pixels in instances {
            for (ch, channel) in pixels.chunks_exact(plane).enumerate() {
                input.extend(
                    channel
                        .iter()
                        .map(|&p| (f32::from(p) / 255.0 - self.info.mean[ch]) / self.info.std[ch]),
                );
            }
        }
        let images = Tensor::<4>::from_data(
            TensorData::new(input, [instances.len(), c, h, w]),
            &self.device,
        );
        let probabilities = burn::tensor::activation::softmax(self.net.forward(images), 1)
            .into_data()
            .convert::<f32>();
        let values = probabilities.as_slice::<f32>().expect("f32");
        let classes = self.info.classes.len();
        let score: Vec<Vec<f32>> = values.chunks_exact(classes).map(<[f32]>::to_vec).collect();
        let indices: Vec<usize> = score.iter().map(|row| crate::train::argmax(row)).collect();
        let labels: Vec<String> = indices
            .iter()
            .map(|&i| self.info.classes[i].clone())
            .collect();
        Prediction {
            label: labels[0].clone(),
            index: indices[0],
            score,
            labels,
            indices,
        }
    }
}

/// Serves `classifier` until `stop` is set (SIGTERM or SIGINT), then stops accepting
/// connections and returns once the requests in progress are answered, or after
/// [`SHUTDOWN_GRACE`].
///
/// # Errors
/// [`ServeError::Runtime`], [`ServeError::Bind`].
pub fn serve(
    classifier: Classifier,
    args: &ServeArgs,
    stop: &AtomicBool,
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ServeError::Runtime(e.to_string()))?;
    runtime.block_on(serve_async(classifier, args, stop))
}

/// What the request handlers share.
struct Shared {
    classifier: Classifier,
    max_body: u64,
    body_timeout: Duration,
    /// Invocations admitted: running, waiting for a worker, or still receiving their body.
    admitted: Arc<Semaphore>,
    /// Invocations classifying at once (`--workers`).
    running: Arc<Semaphore>,
}

async fn serve_async(
    classifier: Classifier,
    args: &ServeArgs,
    stop: &AtomicBool,
) -> Result<(), ServeError> {
    let addr = format!("{}:{}", args.bind_addr, args.port);
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|e| ServeError::Bind {
            addr: addr.clone(),
            detail: e.to_string(),
        })?;
    // The bound address: with port 0 the system picked one.
    let addr = listener
        .local_addr()
        .map_or(addr, |bound| bound.to_string());
    let workers = args.workers.map_or_else(
        || std::thread::available_parallelism().map_or(1, NonZeroUsize::get),
        NonZeroUsize::get,
    );
    let body_timeout = Duration::from_secs(args.body_timeout_secs);
    tracing::info!(%addr, workers, dataset = classifier.info.dataset.name(), "serving");
    let shared = Arc::new(Shared {
        classifier,
        max_body: args.max_body_bytes,
        body_timeout,
        admitted: Arc::new(Semaphore::new(workers * (1 + QUEUED_PER_WORKER))),
        running: Arc::new(Semaphore::new(workers)),
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(body_timeout);
    let connections = GracefulShutdown::new();
    // Poll so SIGTERM is noticed within 200 ms even when idle.
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    while !stop.load(Ordering::SeqCst) {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let shared = Arc::clone(&shared);
                    let service = service_fn(move |request| {
                        let shared = Arc::clone(&shared);
                        async move { Ok::<_, Infallible>(handle(request, &shared).await) }
                    });
                    let connection = http.serve_connection(TokioIo::new(stream), service);
                    let connection = connections.watch(connection);
                    tokio::spawn(async move {
                        if let Err(e) = connection.await {
                            tracing::debug!("connection ended: {e}");
                        }
                    });
                }
                // Out of file descriptors and the like: keep serving the connections we have.
                Err(e) => {
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = tick.tick() => {}
        }
    }
    drop(listener);
    tracing::info!("stop signal (SIGTERM or SIGINT): finishing the requests in progress");
    if tokio::time::timeout(SHUTDOWN_GRACE, connections.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in progress after {SHUTDOWN_GRACE:?} were dropped");
    }
    tracing::info!("stopped serving");
    Ok(())
}

/// The answer to a request: a JSON body, or the refusal.
type Answer = Result<String, Rejection>;

async fn handle(request: Request<Incoming>, shared: &Arc<Shared>) -> Response<Full<Bytes>> {
    let answer = match (request.method(), request.uri().path()) {
        // HEAD wherever GET (RFC 9110 §9.3.2); hyper sends its headers without the body.
        (&Method::GET | &Method::HEAD, "/ping") => Ok(r#"{"status":"healthy"}"#.to_string()),
        (&Method::POST, "/invocations") => invocation(request, shared).await,
        (_, path @ ("/ping" | "/invocations")) => {
            let allow = if path == "/ping" { "GET, HEAD" } else { "POST" };
            let mut response = respond(Err(reject(405, "method not allowed")));
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
            return response;
        }
        _ => Err(reject(
            404,
            "not found: the endpoints are GET /ping and POST /invocations",
        )),
    };
    respond(answer)
}

fn respond(answer: Answer) -> Response<Full<Bytes>> {
    response(match answer {
        Ok(body) => (StatusCode::OK, "application/json", body),
        Err(r) => (
            StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "text/plain; charset=utf-8",
            r.message,
        ),
    })
}

/// A response of `status` with a `Content-Type` and a body (also the metrics endpoint's).
pub(crate) fn response(
    (status, content_type, body): (StatusCode, &'static str, String),
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Whether an `Accept` header value allows the `application/json` answer: absent, or a
/// media range of it (`application/json`, `application/*`, `*/*`) without `q=0` (RFC 9110
/// §12.5.1: weight 0 means "not acceptable"). SageMaker passes InvokeEndpoint's `Accept`
/// through to the container.
fn accepts_json(accept: Option<&str>) -> bool {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return true;
    };
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let refused = parts.any(|p| {
            p.split_once('=').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("q") && v.trim().parse::<f32>() == Ok(0.0)
            })
        });
        !refused && matches!(media.as_str(), "application/json" | "application/*" | "*/*")
    })
}

/// Admits the invocation (503 when `--workers` and their queue are taken), receives its body
/// (413 over the limit, 408 when it does not arrive within the body timeout), then classifies
/// it on a blocking thread once a worker is free. 406 when `Accept` does not allow the JSON
/// answer ([`accepts_json`]).
async fn invocation(request: Request<Incoming>, shared: &Arc<Shared>) -> Answer {
    let accept = request
        .headers()
        .get(header::ACCEPT)
        .map(|v| v.to_str().unwrap_or("(not text)"));
    if !accepts_json(accept) {
        return Err(reject(
            406,
            format!(
                "the answer is application/json, which Accept {:?} does not allow",
                accept.unwrap_or_default()
            ),
        ));
    }
    let Ok(admitted) = Arc::clone(&shared.admitted).try_acquire_owned() else {
        return Err(reject(
            503,
            "every worker is busy and the queue is full; retry (--workers sets how many \
             invocations run at once)",
        ));
    };
    let max_body = shared.max_body;
    let too_large = || reject(413, format!("request body exceeds {max_body} bytes"));
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body) {
        return Err(too_large());
    }
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let limit = usize::try_from(max_body).unwrap_or(usize::MAX);
    let body = Limited::new(request.into_body(), limit).collect();
    let body = match tokio::time::timeout(shared.body_timeout, body).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<LengthLimitError>() => return Err(too_large()),
        Ok(Err(e)) => return Err(reject(400, format!("reading the body: {e}"))),
        Err(_) => {
            return Err(reject(
                408,
                format!(
                    "the request body did not arrive within {} s (--body-timeout-secs)",
                    shared.body_timeout.as_secs()
                ),
            ))
        }
    };
    let job = Arc::clone(shared);
    let classified = classify_admitted(Arc::clone(&shared.running), admitted, move || {
        job.classifier
            .invoke(&content_type, &body)
            .map(|prediction| serde_json::to_string(&prediction).expect("serialisable"))
    })
    .await;
    classified.unwrap_or_else(|e| Err(reject(500, format!("the invocation failed: {e}"))))
}

/// Waits for one of `running`'s permits (a free worker), then runs `classify` on a blocking
/// thread and returns its result (a [`tokio::task::JoinError`] when it panicked).
///
/// The worker permit and the invocation's `admitted` permit move into the blocking task and
/// are released only when `classify` returns. hyper drops a request's future when its client
/// disconnects, but a blocking task cannot be cancelled: were the permits held by the future,
/// each post-and-disconnect would free its place while its forward pass ran on, and a client
/// repeating it would start any number of forward passes despite `--workers`. Dropping this
/// future before a worker is free releases `admitted`, since nothing started.
async fn classify_admitted<T: Send + 'static>(
    running: Arc<Semaphore>,
    admitted: OwnedSemaphorePermit,
    classify: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    let worker = running.acquire_owned().await.expect("never closed");
    tokio::task::spawn_blocking(move || {
        // Released when the classification ends, whether or not anyone still awaits it.
        let _permits = (worker, admitted);
        classify()
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::DatasetKind;

    #[test]
    fn the_json_answer_is_given_to_an_accept_that_allows_it() {
        for ok in [
            None,
            Some(""),
            Some("application/json"),
            Some("Application/JSON; charset=utf-8"),
            Some("text/csv, application/json;q=0.5"),
            Some("application/*"),
            Some("*/*"),
        ] {
            assert!(accepts_json(ok), "{ok:?}");
        }
        for refused in [
            Some("text/csv"),
            Some("application/json;q=0"),
            Some("image/png, */*; q=0.0"),
            Some("(not text)"),
        ] {
            assert!(!accepts_json(refused), "{refused:?}");
        }
    }

    /// An untrained Fashion-MNIST model written to a temporary model directory.
    fn classifier() -> (tempfile::TempDir, Classifier) {
        let dir = tempfile::tempdir().unwrap();
        let kind = DatasetKind::FashionMnist;
        Net::new(kind.shape(), &Device::flex())
            .save_file(dir.path().join(crate::MODEL_FILE))
            .unwrap();
        let info = ModelInfo::for_dataset(kind, 44_426);
        std::fs::write(
            dir.path().join(crate::MODEL_INFO_FILE),
            serde_json::to_string(&info).unwrap(),
        )
        .unwrap();
        let classifier = Classifier::load(dir.path()).unwrap();
        (dir, classifier)
    }

    fn png(width: u32, height: u32) -> Vec<u8> {
        let image = image::RgbImage::from_fn(width, height, |x, y| {
            image::Rgb([(x * 3) as u8, (y * 5) as u8, 77])
        });
        let mut out = std::io::Cursor::new(Vec::new());
        image.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }

    #[test]
    fn image_of_any_size_gets_ten_probabilities() {
        let (_dir, c) = classifier();
        let p = c.invoke("application/x-image", &png(100, 37)).unwrap();
        assert_eq!(p.score.len(), 1);
        assert_eq!(p.score[0].len(), 10);
        assert!((p.score[0].iter().sum::<f32>() - 1.0).abs() < 1e-4);
        assert_eq!(p.label, c.info().classes[p.index]);
    }

    #[test]
    fn json_instances_match_the_equivalent_image() {
        let (_dir, c) = classifier();
        // A 28×28 grey PNG and the same pixels as JSON give the same scores.
        let grey = image::GrayImage::from_fn(28, 28, |x, y| image::Luma([(x * 9 + y) as u8]));
        let mut encoded = std::io::Cursor::new(Vec::new());
        grey.write_to(&mut encoded, image::ImageFormat::Png)
            .unwrap();
        let from_image = c.invoke("image/png", encoded.get_ref()).unwrap();
        let pixels: Vec<u8> = grey.into_raw();
        let body = serde_json::json!({ "instances": [pixels, pixels] }).to_string();
        let from_json = c
            .invoke("application/json; charset=utf-8", body.as_bytes())
            .unwrap();
        assert_eq!(from_json.score.len(), 2);
        assert_eq!(from_json.score[0], from_image.score[0]);
        assert_eq!(from_json.indices, vec![from_image.index; 2]);
    }

    /// With one worker: a request whose client disconnects while it is classified (hyper
    /// drops its future) keeps both its permits until the classification ends, so a second
    /// request waits for the worker instead of starting a second forward pass.
    #[tokio::test]
    async fn a_dropped_request_keeps_its_permits_until_its_classification_ends() {
        let running = Arc::new(Semaphore::new(1));
        let admitted = Arc::new(Semaphore::new(1 + QUEUED_PER_WORKER));
        let (started, has_started) = tokio::sync::oneshot::channel();
        let (finish, may_finish) = std::sync::mpsc::channel::<()>();
        let first = tokio::spawn(classify_admitted(
            Arc::clone(&running),
            Arc::clone(&admitted).try_acquire_owned().unwrap(),
            move || {
                started.send(()).unwrap();
                may_finish.recv().unwrap();
                1
            },
        ));
        has_started.await.unwrap();
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        assert_eq!(running.available_permits(), 0, "the worker is still busy");
        assert_eq!(
            admitted.available_permits(),
            QUEUED_PER_WORKER,
            "the disconnected invocation is still admitted"
        );
        let mut second = tokio::spawn(classify_admitted(
            Arc::clone(&running),
            Arc::clone(&admitted).try_acquire_owned().unwrap(),
            || 2,
        ));
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut second)
                .await
                .is_err(),
            "the second invocation ran while the first one's classification was running"
        );
        finish.send(()).unwrap();
        assert_eq!(second.await.unwrap().unwrap(), 2);
        assert_eq!(running.available_permits(), 1);
        assert_eq!(admitted.available_permits(), 1 + QUEUED_PER_WORKER);
    }

    #[test]
    fn zero_limits_are_refused_at_start() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        use clap::Parser as _;
        for flag in [
            "--max-body-bytes=0",
            "--max-image-pixels=0",
            "--body-timeout-secs=0",
        ] {
            let err = Cli::try_parse_from(["serve", flag])
                .err()
                .unwrap_or_else(|| panic!("{flag} accepted"))
                .to_string();
            assert!(err.contains("0 is not in 1.."), "{flag}: {err}");
        }
    }

    #[test]
    fn bad_requests_get_their_status() {
        let (_dir, c) = classifier();
        assert_eq!(c.invoke("text/csv", b"1,2").unwrap_err().status, 415);
        let not_image = c
            .invoke("application/x-image", b"not an image")
            .unwrap_err();
        assert_eq!(not_image.status, 400);
        assert!(
            not_image.message.contains("not a PNG or JPEG image"),
            "{}",
            not_image.message
        );
        let whole = png(100, 37);
        let cut = c
            .invoke("image/png", &whole[..whole.len() / 2])
            .unwrap_err();
        assert_eq!(cut.status, 400);
        assert!(
            cut.message
                .contains("its first bytes say PNG, but it does not decode (damaged, cut short"),
            "{}",
            cut.message
        );
        let gif = c
            .invoke(
                "application/x-image",
                b"GIF89a\x01\x00\x01\x00\x00\x00\x00;",
            )
            .unwrap_err();
        assert_eq!(gif.status, 400);
        assert!(
            gif.message
                .contains("the image is GIF; PNG and JPEG are accepted"),
            "{}",
            gif.message
        );
        let short = c
            .invoke("application/json", br#"{"instances": [[1, 2, 3]]}"#)
            .unwrap_err();
        assert_eq!(short.status, 400);
        assert!(
            short.message.contains("has 3 values, the model takes 784"),
            "{}",
            short.message
        );
        let body = serde_json::json!({ "instances": [vec![300; 784]] }).to_string();
        assert!(c
            .invoke("application/json", body.as_bytes())
            .unwrap_err()
            .message
            .contains("pixel 300 is not from 0 to 255"));
        let huge = serde_json::json!({ "instances": [vec![1e308; 784]] }).to_string();
        let message = c
            .invoke("application/json", huge.as_bytes())
            .unwrap_err()
            .message;
        assert!(
            message.contains("pixel 1e308 is not from 0 to 255"),
            "{message}"
        );
        assert_eq!(c.invoke("application/json", b"{}").unwrap_err().status, 400);
    }

    #[test]
    fn images_over_the_pixel_limit_get_413() {
        let (_dir, c) = classifier();
        let c = c.with_max_image_pixels(100 * 100);
        assert!(c.invoke("image/png", &png(100, 100)).is_ok());
        assert!(c.invoke("image/png", &png(400, 25)).is_ok());
        let big = c.invoke("image/png", &png(101, 100)).unwrap_err();
        assert_eq!(big.status, 413);
        assert!(
            big.message
                .contains("101×100 = 10100 pixels; at most 10000"),
            "{}",
            big.message
        );
    }

    #[test]
    fn missing_model_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = Classifier::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("model.json"), "{err}");
    }

    /// `model.json` of an untrained Fashion-MNIST model changed by `edit`, loaded: each
    /// description that does not fit itself or `model.bpk` is refused naming `model.json`,
    /// the field and the rule, and none panics (a 14×14 `input_shape` used to panic in
    /// `Net::new`, too few classes served three rows of scores, too many panicked per request).
    #[test]
    fn a_model_json_that_does_not_fit_the_model_is_refused() {
        let cases: [(&str, serde_json::Value, &[&str]); 14] = [
            (
                "classes",
                serde_json::json!(["a", "b", "c"]),
                &["`classes` has 3 entries", "10 outputs"],
            ),
            (
                "classes",
                serde_json::json!(vec!["x"; 12]),
                &["`classes` has 12 entries", "10 outputs"],
            ),
            ("classes", serde_json::json!([]), &["`classes` is empty"]),
            (
                "std",
                serde_json::json!([0.0]),
                &["`std` holds 0", "finite and above 0"],
            ),
            (
                "std",
                serde_json::json!([-1.0]),
                &["`std` holds -1", "finite and above 0"],
            ),
            (
                "std",
                serde_json::json!([0.3, 0.3]),
                &["`std` has 2 values", "one per channel"],
            ),
            (
                "mean",
                serde_json::json!([0.2, 0.2]),
                &["`mean` has 2 values", "one per channel"],
            ),
            (
                "mean",
                serde_json::json!([]),
                &["`mean` has 0 values", "one per channel"],
            ),
            (
                "input_shape",
                serde_json::json!([1, 14, 14]),
                &["`input_shape` [1, 14, 14]", "at least 16×16"],
            ),
            (
                "input_shape",
                serde_json::json!([3, 3200, 3200]),
                &["`input_shape` [3, 3200, 3200] is larger than any model"],
            ),
            (
                "input_shape",
                serde_json::json!([0, 0, 0]),
                &["`input_shape` [0, 0, 0] has 0 channels"],
            ),
            (
                "input_shape",
                serde_json::json!([1, 32, 32]),
                &[
                    "model.json's `input_shape` [1, 32, 32]",
                    "must have the model's channels and the size",
                ],
            ),
            // Three channels with three means and deviations: consistent, but not this model.
            (
                "input_shape",
                serde_json::json!([3, 28, 28]),
                &[
                    "model.json's `input_shape` [3, 28, 28]",
                    "must have the model's channels",
                    "shape mismatch",
                ],
            ),
            // Parsed as f32, 1e39 is infinite.
            (
                "std",
                serde_json::json!([1e39]),
                &["`std` holds inf", "finite and above 0"],
            ),
        ];
        for (field, value, expected) in cases {
            let (dir, _) = classifier();
            let path = dir.path().join(crate::MODEL_INFO_FILE);
            let mut info: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            info[field] = value.clone();
            if value == serde_json::json!([3, 28, 28]) {
                info["mean"] = serde_json::json!([0.5, 0.5, 0.5]);
                info["std"] = serde_json::json!([0.2, 0.2, 0.2]);
            }
            std::fs::write(&path, info.to_string()).unwrap();
            let err = Classifier::load(dir.path())
                .err()
                .unwrap_or_else(|| panic!("{field} = {value} accepted"))
                .to_string();
            assert!(err.contains("model.json"), "{field} = {value}: {err}");
            for part in expected {
                assert!(err.contains(part), "{field} = {value}: {err}");
            }
        }
        // NaN and infinity are not JSON numbers, so a non-finite mean cannot be written; the
        // rule is checked all the same.
        let (_dir, c) = classifier();
        let mut info = c.info().clone();
        info.mean = vec![f32::NAN];
        assert!(info
            .check()
            .unwrap_err()
            .to_string()
            .contains("model.json: `mean` holds NaN; every mean must be finite"));
    }
}
