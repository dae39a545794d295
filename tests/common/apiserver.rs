//! One real kube-apiserver (with etcd) per test binary, started through
//! `kfaws-testenv` (tests/apiserver/README.md, "Using it from tests"), and
//! kube clients for it. Self-contained: include it with
//! `#[path = "common/apiserver.rs"] mod apiserver;`.
//!
//! The binaries come from `KFAWS_TESTENV_BIN` (exported by `make test`), or
//! else from `tests/apiserver/build.sh` (about a second when built, a cold
//! build otherwise). The harness lives in a directory under the target's
//! temporary directory and stops by itself when the test binary exits (it
//! watches its parent process); leftovers of earlier runs whose harness is
//! gone are removed at start.

#![allow(dead_code)] // each test binary uses part of this module

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// `DIR/ready.json` of a started harness.
#[derive(Debug, Clone, Deserialize)]
pub struct Ready {
    /// `https://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// `v1.37.2`.
    pub kubernetes_version: String,
}

/// A running harness.
pub struct TestEnv {
    /// Its ready file.
    pub ready: Ready,
    /// Directory of etcd, kube-apiserver, kubectl and kfaws-testenv.
    pub bin_dir: PathBuf,
    /// Its working directory.
    pub dir: PathBuf,
    child: Mutex<Child>,
}

static ENV: OnceLock<TestEnv> = OnceLock::new();

/// The directory holding the harness binaries.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KFAWS_TESTENV_BIN") {
        return PathBuf::from(dir);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apiserver/build.sh");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(out.status.success(), "{} failed", script.display());
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(
        stdout
            .lines()
            .last()
            .expect("build.sh prints the binary directory")
            .trim(),
    )
}

/// The harness of this test binary, started on first use.
pub fn env() -> &'static TestEnv {
    ENV.get_or_init(start)
}

fn start() -> TestEnv {
    let bin_dir = bin_dir();
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kfaws-apiserver");
    std::fs::create_dir_all(&root).expect("create the harness root");
    remove_stale(&root);
    let dir = root.join(format!(
        "{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let log = std::fs::File::create(format!("{}.log", dir.display())).expect("harness log file");
    let mut child = Command::new(bin_dir.join("kfaws-testenv"))
        .arg("start")
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}/kfaws-testenv: {e}", bin_dir.display()));
    let ready_file = dir.join("ready.json");
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(&ready_file) {
            let ready: Ready = serde_json::from_str(&text).expect("ready.json parses");
            return TestEnv {
                ready,
                bin_dir,
                dir,
                child: Mutex::new(child),
            };
        }
        if let Some(status) = child.try_wait().expect("poll the harness") {
            let log = std::fs::read_to_string(format!("{}.log", dir.display())).unwrap_or_default();
            panic!("kfaws-testenv exited with {status} before ready:\n{log}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "kfaws-testenv not ready in 180 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Removes harness directories of earlier runs whose test process is gone.
fn remove_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let pid = name
            .split(['-', '.'])
            .next()
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

impl TestEnv {
    /// A new client (each test has its own tokio runtime, and a client's
    /// connections belong to the runtime that made them).
    pub async fn client(&self) -> kube::Client {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(&self.ready.kubeconfig).expect("read kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("kubeconfig to config");
        kube::Client::try_from(config).expect("client")
    }

    /// The built kubectl.
    pub fn kubectl(&self) -> PathBuf {
        self.bin_dir.join("kubectl")
    }

    /// Stops the harness and waits for it (benches call this; test binaries
    /// rely on the harness stopping when they exit).
    pub fn stop(&self) {
        let status = Command::new(self.bin_dir.join("kfaws-testenv"))
            .arg("stop")
            .arg("--dir")
            .arg(&self.dir)
            .status();
        if status.is_ok() {
            let _ = self.child.lock().map(|mut c| c.wait());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
