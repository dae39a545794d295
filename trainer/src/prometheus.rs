//! The Prometheus endpoint of `--metrics-port`: `GET /metrics` returns the figures of the
//! metrics line in the text exposition format (prometheus.io/docs/instrumenting/exposition_formats).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;

use crate::metrics::EpochMetrics;
use crate::train::Progress;

/// What the endpoint serves, shared between the training loop and the endpoint.
pub type Latest = Arc<Mutex<Published>>;

/// The last completed epoch and, once an epoch has ended in this process, its figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Published {
    /// Last completed epoch: 0 while the first runs; after a resume, the checkpoint's last
    /// completed epoch until the next one ends.
    pub epoch: u64,
    /// The figures of the last epoch that ended in this process; `None` before one has (a
    /// checkpoint records no figures, so a resumed run has none until its first epoch ends).
    pub metrics: Option<EpochMetrics>,
}

impl Published {
    /// Takes in what [`crate::train::train`] reports: a resume sets the epoch (the figures of
    /// an earlier process are not known), an ended epoch sets both.
    pub fn record(&mut self, progress: Progress) {
        match progress {
            Progress::Resumed { completed_epoch } => {
                self.epoch = completed_epoch;
                self.metrics = None;
            }
            Progress::Epoch(metrics) => {
                self.epoch = metrics.epoch;
                self.metrics = Some(metrics);
            }
        }
    }
}

/// Help text of the `epoch` gauge, the one gauge served before an epoch ends in this process.
const EPOCH_HELP: &str =
    "Last completed epoch (0 while the first runs; after a resume, the checkpoint's).";

/// Renders `published` as Prometheus gauges. Before an epoch ends in this process only
/// `kfaws_trainer_epoch` is served (0, or after a resume the checkpoint's last completed
/// epoch): a scrape then tells a running trainer from a missing one, and no loss or accuracy
/// is made up.
pub fn render(published: &Published) -> String {
    let Some(m) = &published.metrics else {
        return gauge("epoch", EPOCH_HELP, published.epoch as f64);
    };
    let gauges = [
        ("epoch", EPOCH_HELP, m.epoch as f64),
        (
            "train_loss",
            "Mean training cross-entropy of the last epoch.",
            m.train_loss,
        ),
        (
            "train_accuracy",
            "Training accuracy of the last epoch.",
            m.train_acc,
        ),
        (
            "test_loss",
            "Mean test cross-entropy after the last epoch.",
            m.test_loss,
        ),
        (
            "test_accuracy",
            "Test accuracy after the last epoch.",
            m.test_acc,
        ),
        (
            "images_per_second",
            "Training images per second, all ranks, last epoch.",
            m.images_per_sec,
        ),
    ];
    gauges
        .iter()
        .map(|(name, help, value)| gauge(name, help, *value))
        .collect()
}

/// One gauge in the text exposition format: `# HELP`, `# TYPE`, the sample.
fn gauge(name: &str, help: &str, value: f64) -> String {
    format!(
        "# HELP kfaws_trainer_{name} {help}\n# TYPE kfaws_trainer_{name} gauge\nkfaws_trainer_{name} {value}\n"
    )
}

/// Serves `latest` on `bind_addr:port` (the rank's `--bind-addr`: all interfaces in a pod or
/// a SageMaker container, loopback for a local job) from a background thread for the life
/// of the process.
///
/// # Errors
/// The bind error, as text.
pub fn spawn(bind_addr: &str, port: u16, latest: Latest) -> Result<std::net::SocketAddr, String> {
    let listener = std::net::TcpListener::bind((bind_addr, port))
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| format!("metrics port {port}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("metrics port {port}: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("metrics port {port}: cannot start the I/O runtime: {e}"))?;
    std::thread::spawn(move || runtime.block_on(serve(listener, latest)));
    Ok(addr)
}

async fn serve(listener: std::net::TcpListener, latest: Latest) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("inside a runtime");
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!("metrics: accepting a connection failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let latest = Arc::clone(&latest);
        let service = service_fn(move |request: Request<Incoming>| {
            let answer = if request.uri().path() == "/metrics" {
                let body = render(&latest.lock().expect("metrics lock"));
                (StatusCode::OK, "text/plain; version=0.0.4", body)
            } else {
                let body = "not found: GET /metrics".to_string();
                (StatusCode::NOT_FOUND, "text/plain; charset=utf-8", body)
            };
            std::future::ready(Ok::<_, Infallible>(crate::serve::response(answer)))
        });
        let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("metrics client went away: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn serves_the_latest_epoch_as_gauges() {
        let latest: Latest = Arc::default();
        let addr = spawn("127.0.0.1", 0, Arc::clone(&latest)).unwrap();
        let get = || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", addr.port())).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        // Before the first epoch ends: the trainer is up, at epoch 0, and nothing else is said.
        let before = get();
        assert!(before.contains("kfaws_trainer_epoch 0\n"), "{before}");
        assert!(
            !before.contains("accuracy") && !before.contains("loss"),
            "{before}"
        );
        latest.lock().unwrap().record(Progress::Epoch(EpochMetrics {
            epoch: 3,
            test_acc: 0.875,
            ..EpochMetrics::default()
        }));
        let body = get();
        assert!(body.starts_with("HTTP/1.1 200"), "{body}");
        assert!(
            body.contains(
                "# TYPE kfaws_trainer_test_accuracy gauge\nkfaws_trainer_test_accuracy 0.875\n"
            ),
            "{body}"
        );
        assert!(body.contains("kfaws_trainer_epoch 3\n"), "{body}");
    }

    /// A run resumed from the checkpoint written after epoch 4 has finished 4 epochs: a
    /// scrape before its first epoch ends reads 4, not 0, and still makes up no figures.
    #[test]
    fn a_resumed_run_serves_the_checkpoint_epoch_until_its_first_ends() {
        let mut published = Published::default();
        published.record(Progress::Resumed { completed_epoch: 4 });
        let body = render(&published);
        assert!(body.contains("kfaws_trainer_epoch 4\n"), "{body}");
        assert!(
            !body.contains("accuracy") && !body.contains("loss"),
            "{body}"
        );
        published.record(Progress::Epoch(EpochMetrics {
            epoch: 5,
            train_loss: 0.5,
            ..EpochMetrics::default()
        }));
        let body = render(&published);
        assert!(body.contains("kfaws_trainer_epoch 5\n"), "{body}");
        assert!(body.contains("kfaws_trainer_train_loss 0.5\n"), "{body}");
    }
}
