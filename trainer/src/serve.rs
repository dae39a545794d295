//! `kfaws-trainer serve`: the SageMaker inference container contract
//! (docs.aws.amazon.com/sagemaker, "Use Your Own Inference Code with Hosting Services"):
//! `GET /ping` answers 200 once the model is loaded; `POST /invocations` classifies
//! `application/x-image` (PNG or JPEG of any size, resized to the model's input) or
//! `application/json` (`{"instances": [[pixel, …], …]}`, each instance `C×H×W` pixel values in
//! `0..=255`, channel-major) and answers `{"score": [[p0, …, p9], …], "label": "…", "index": N,
//! "labels": […], "indices": […]}` (`label`/`index` for the first instance, scores are
//! softmax probabilities).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use tiny_http::{Header, Method, Request, Response};

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
    #[arg(long, env = "TRAINER_MAX_BODY_BYTES", default_value_t = 6 * 1024 * 1024)]
    pub max_body_bytes: u64,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The model directory is incomplete or unreadable.
    #[error("cannot load the model from {path}: {detail}")]
    Model { path: PathBuf, detail: String },
    /// The port could not be bound.
    #[error("cannot listen on {addr}: {detail}")]
    Bind { addr: String, detail: String },
}

/// A loaded model ready to classify.
#[derive(Debug)]
pub struct Classifier {
    net: Net,
    info: ModelInfo,
    device: Device,
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
    /// [`ServeError::Model`] naming the file that is missing or unreadable.
    pub fn load(dir: &Path) -> Result<Self, ServeError> {
        let info_path = dir.join(crate::MODEL_INFO_FILE);
        let model_err = |path: &Path, detail: String| ServeError::Model {
            path: path.to_path_buf(),
            detail,
        };
        let text = std::fs::read_to_string(&info_path)
            .map_err(|e| model_err(&info_path, e.to_string()))?;
        let info: ModelInfo =
            serde_json::from_str(&text).map_err(|e| model_err(&info_path, e.to_string()))?;
        let device = Device::flex();
        let weights = dir.join(crate::MODEL_FILE);
        let net = Net::new(info.input_shape, &device)
            .try_load_file(&weights)
            .map_err(|e| model_err(&weights, e.to_string()))?;
        Ok(Self { net, info, device })
    }

    /// The model's description.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Classifies a request body of `content_type`.
    ///
    /// # Errors
    /// 415 for a content type other than `application/x-image`, `image/png`, `image/jpeg` or
    /// `application/json`; 400 for an undecodable image or malformed JSON.
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
                    format!("content type {other:?} is not supported: use application/x-image (PNG or JPEG) or application/json"),
                ))
            }
        };
        Ok(self.predict(&instances))
    }

    /// An image of any size and colour type → `C×H×W` pixels of the model's input.
    fn decode_image(&self, body: &[u8]) -> Result<Vec<u8>, Rejection> {
        let image = image::load_from_memory(body)
            .map_err(|e| reject(400, format!("cannot decode the image: {e}")))?;
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
                                reject(400, format!("instance {i}: pixel {p} is outside 0..=255"))
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

/// Serves `classifier` until `stop` is set (SIGTERM or SIGINT), then returns after the request in hand.
///
/// # Errors
/// [`ServeError::Bind`].
pub fn serve(
    classifier: &Classifier,
    args: &ServeArgs,
    stop: &AtomicBool,
) -> Result<(), ServeError> {
    let addr = format!("{}:{}", args.bind_addr, args.port);
    let server = tiny_http::Server::http(&addr).map_err(|e| ServeError::Bind {
        addr: addr.clone(),
        detail: e.to_string(),
    })?;
    // The bound address: with port 0 the system picked one.
    let addr = server
        .server_addr()
        .to_ip()
        .map_or(addr, |bound| bound.to_string());
    tracing::info!(%addr, dataset = classifier.info.dataset.name(), "serving");
    while !stop.load(Ordering::SeqCst) {
        // Poll so SIGTERM is noticed within 200 ms even when idle.
        match server.recv_timeout(Duration::from_millis(200)) {
            Ok(Some(request)) => handle(classifier, args.max_body_bytes, request),
            Ok(None) => {}
            Err(e) => tracing::warn!("accepting a request failed: {e}"),
        }
    }
    tracing::info!("stop signal (SIGTERM or SIGINT): stopped serving");
    Ok(())
}

fn handle(classifier: &Classifier, max_body: u64, mut request: Request) {
    let result = match (request.method(), request.url()) {
        (Method::Get, "/ping") => Ok(String::new()),
        (Method::Post, "/invocations") => invocation(classifier, max_body, &mut request),
        (_, "/ping" | "/invocations") => Err(reject(405, "method not allowed")),
        _ => Err(reject(
            404,
            "not found: the endpoints are GET /ping and POST /invocations",
        )),
    };
    let response = match result {
        Ok(body) => Response::from_string(body).with_header(
            Header::from_bytes("Content-Type", "application/json").expect("valid header"),
        ),
        Err(r) => Response::from_string(r.message).with_status_code(r.status),
    };
    if let Err(e) = request.respond(response) {
        tracing::debug!("client went away: {e}");
    }
}

fn invocation(
    classifier: &Classifier,
    max_body: u64,
    request: &mut Request,
) -> Result<String, Rejection> {
    let too_large = || reject(413, format!("request body exceeds {max_body} bytes"));
    if request.body_length().is_some_and(|n| n as u64 > max_body) {
        return Err(too_large());
    }
    let content_type = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Content-Type"))
        .map(|h| h.value.as_str().to_string())
        .unwrap_or_default();
    let mut body = Vec::new();
    // A chunked body has no length up front: read one byte past the limit to detect it.
    request
        .as_reader()
        .take(max_body + 1)
        .read_to_end(&mut body)
        .map_err(|e| reject(400, format!("reading the body: {e}")))?;
    if body.len() as u64 > max_body {
        return Err(too_large());
    }
    let prediction = classifier.invoke(&content_type, &body)?;
    Ok(serde_json::to_string(&prediction).expect("serialisable"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::DatasetKind;

    /// An untrained Fashion-MNIST model written to a temporary model directory.
    fn classifier() -> (tempfile::TempDir, Classifier) {
        let dir = tempfile::tempdir().unwrap();
        let kind = DatasetKind::FashionMnist;
        Net::new(kind.shape(), &Device::flex())
            .save_file(dir.path().join(crate::MODEL_FILE))
            .unwrap();
        let (mean, std) = kind.normalisation();
        let info = ModelInfo {
            dataset: kind,
            classes: kind.classes().iter().map(|c| c.to_string()).collect(),
            input_shape: kind.shape(),
            mean,
            std,
            test_accuracy: None,
            test_loss: None,
            epochs: 0,
            parameters: 44_426,
        };
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

    #[test]
    fn bad_requests_get_their_status() {
        let (_dir, c) = classifier();
        assert_eq!(c.invoke("text/csv", b"1,2").unwrap_err().status, 415);
        assert_eq!(
            c.invoke("application/x-image", b"not an image")
                .unwrap_err()
                .status,
            400
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
            .contains("outside 0..=255"));
        assert_eq!(c.invoke("application/json", b"{}").unwrap_err().status, 400);
    }

    #[test]
    fn missing_model_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = Classifier::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("model.json"), "{err}");
    }
}
