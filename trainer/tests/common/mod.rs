//! Helpers for tests that run the `kfaws-trainer` binary as separate processes.
#![allow(dead_code)] // each test binary uses a different subset

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's `dataset-fashion-mnist` (installed by `trainer/setup.sh`).
pub const FASHION_MNIST: &str = "/usr/share/datasets/fashion-mnist";

/// The real Fashion-MNIST directory; panics with the fix when it is absent.
pub fn fashion_mnist() -> PathBuf {
    let dir = PathBuf::from(FASHION_MNIST);
    assert!(
        dir.join("train-images-idx3-ubyte.gz").is_file(),
        "{FASHION_MNIST} is missing: run `bash trainer/setup.sh` (installs Debian's dataset-fashion-mnist)"
    );
    dir
}

/// `--hp=backend=…` from `KFAWS_TRAINER_TEST_BACKEND`, appended after a test's own flags so
/// the same tests run on a GPU: `KFAWS_TRAINER_TEST_BACKEND=nccl` with a `--features cuda`
/// build trains on CUDA device 0 (see trainer/README.md, "GPU"). Unset: none, the trainer's
/// default (`gloo`, the CPU).
pub fn backend_args() -> Vec<String> {
    match std::env::var("KFAWS_TRAINER_TEST_BACKEND") {
        Ok(backend) if !backend.is_empty() => vec![format!("--hp=backend={backend}")],
        _ => Vec::new(),
    }
}

/// A loopback port free right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running trainer whose stdout and stderr go to files under `dir`.
pub struct Proc {
    pub child: Child,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl Proc {
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits up to `limit` for the process to exit; kills it and panics otherwise.
    pub fn wait(&mut self, limit: Duration) -> i32 {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "trainer still running after {limit:?}\nstderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until stderr contains `needle`, up to `limit`.
    pub fn wait_for_log(&self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.stderr().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in stderr after {limit:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Test accuracy of each epoch line on stdout.
    pub fn test_accuracies(&self) -> Vec<f64> {
        self.stdout()
            .lines()
            .filter_map(|l| l.split("test_acc=").nth(1))
            .map(|rest| rest.split(';').next().unwrap().parse().unwrap())
            .collect()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `kfaws-trainer train` with `args` and `envs`, logs into `dir/<name>.{out,err}`.
/// The PyTorchJob and SageMaker variables of the test's own environment are cleared.
pub fn spawn_train(dir: &Path, name: &str, args: &[String], envs: &[(&str, String)]) -> Proc {
    let stdout = dir.join(format!("{name}.out"));
    let stderr = dir.join(format!("{name}.err"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_kfaws-trainer"));
    command.arg("train").args(args).args(backend_args());
    for var in [
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "PET_NNODES",
        "PET_NODE_RANK",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
    ] {
        command.env_remove(var);
    }
    command
        .env("TRAINER_SAGEMAKER_ROOT", dir.join("no-sagemaker"))
        .env("RUST_LOG", "info")
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap());
    Proc {
        child: command.spawn().unwrap(),
        stdout,
        stderr,
    }
}

/// Flags for rank `rank` of `world` on loopback `port`, with its own model and checkpoint dirs.
pub fn rank_args(
    dir: &Path,
    data: &Path,
    rank: usize,
    world: usize,
    port: u16,
    hp: &[&str],
) -> Vec<String> {
    let mut args = vec![
        format!("--data-dir={}", data.display()),
        format!(
            "--model-dir={}",
            dir.join(format!("model-{rank}")).display()
        ),
        format!(
            "--checkpoint-dir={}",
            dir.join(format!("ckpt-{rank}")).display()
        ),
        format!("--rank={rank}"),
        format!("--world-size={world}"),
        "--master-addr=127.0.0.1".into(),
        "--bind-addr=127.0.0.1".into(),
        format!("--master-port={port}"),
    ];
    args.extend(hp.iter().map(|h| format!("--hp={h}")));
    args
}

/// One HTTP/1.1 request to `127.0.0.1:port`; returns the status and the body.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    http_with(port, method, path, &[("Content-Type", content_type)], body)
}

/// As [`http`], with the request headers `headers` (`Host`, `Content-Length` and
/// `Connection: close` are added).
pub fn http_with(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    // The server may answer (413) before reading a large body and close: ignore a failed write.
    let _ = stream.write_all(body);
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// Waits until `GET /ping` answers 200.
pub fn wait_for_ping(port: u16, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok((200, _)) = http(port, "GET", "/ping", "text/plain", b"") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no 200 from /ping on port {port} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts `kfaws-trainer serve` for `model_dir` on loopback `port`.
pub fn spawn_serve(dir: &Path, model_dir: &Path, port: u16, extra: &[&str]) -> Proc {
    let stdout = dir.join("serve.out");
    let stderr = dir.join("serve.err");
    let child = Command::new(env!("CARGO_BIN_EXE_kfaws-trainer"))
        .arg("serve")
        .arg(format!("--model-dir={}", model_dir.display()))
        .arg(format!("--port={port}"))
        .arg("--bind-addr=127.0.0.1")
        .args(extra)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    Proc {
        child,
        stdout,
        stderr,
    }
}

/// Whether `dir` holds a checkpoint written mid-epoch 1 (`checkpoint-000001-SSSSSSSS.bin` with
/// S > 0: the step a stop signal left it at); `Err` lists what it holds.
pub fn has_mid_epoch_checkpoint(dir: &Path) -> Result<(), Vec<String>> {
    let saved: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if saved
        .iter()
        .any(|n| n.starts_with("checkpoint-000001-") && !n.ends_with("-00000000.bin"))
    {
        Ok(())
    } else {
        Err(saved)
    }
}
