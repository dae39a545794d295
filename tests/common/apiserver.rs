//! A real kube-apiserver for tests: `kfaws-testenv` from `tests/apiserver`
//! (see its README, "Using it from tests").
//!
//! The binaries come from `KFAWS_TESTENV_BIN` (`make test` exports the
//! directory `tests/apiserver/build.sh` prints), else from running
//! `build.sh` once per test binary (a second when its cache is warm; a cold
//! build of the servers takes about 15 minutes). Each [`ApiServer`] is a
//! fresh etcd + kube-apiserver in a temporary directory, stopped on drop;
//! if the test process dies first, the harness notices and stops itself.
//!
//! Tests that need no harness of their own share one per test binary,
//! [`env`], started on first use.
//!
//! Include it with `#[path = "common/apiserver.rs"] mod apiserver;`.

#![allow(dead_code)] // each test binary uses part of this module

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::Deserialize;

/// `DIR/ready.json` of a started harness.
#[derive(Debug, Clone, Deserialize)]
pub struct Ready {
    /// `https://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The harness CA (PEM file) that signed the serving certificate.
    pub ca_file: PathBuf,
    /// An admin kubeconfig (client certificate in `system:masters`).
    pub kubeconfig: PathBuf,
    /// `v1.37.2`.
    pub kubernetes_version: String,
    /// The EKS token webhook, when started with [`Options::eks`].
    #[serde(default)]
    pub token_webhook: Option<String>,
    /// Whether the PyTorchJob runner runs (with [`Options::eks`]; see the
    /// harness README, "PyTorchJob runner").
    #[serde(default)]
    pub pytorchjob_runner: bool,
}

/// How to start the harness.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Authenticate EKS tokens for cluster `.1` against the STS at `.0` (the
    /// AWS emulator's URL): `--aws-sts-endpoint`, `--eks-cluster-name`. The
    /// emulated cluster then also runs PyTorchJobs (`--pytorchjob-runner`,
    /// images from the emulator's registry, EFS claims on its local EFS,
    /// found through its control API at `.0` + `/_kfaws`).
    pub eks: Option<(String, String)>,
}

/// A running harness; stopped (and its directory removed) on drop.
pub struct ApiServer {
    child: Child,
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// What the harness reported when ready.
    pub ready: Ready,
}

/// The directory holding `kfaws-testenv`, `kube-apiserver` and `etcd`.
pub fn bin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("KFAWS_TESTENV_BIN").filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apiserver/build.sh");
        let out = Command::new(&script)
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed ({}); set KFAWS_TESTENV_BIN to a built directory or fix the build",
            script.display(),
            out.status
        );
        let stdout = String::from_utf8(out.stdout).expect("build.sh prints a path");
        PathBuf::from(
            stdout
                .lines()
                .last()
                .expect("build.sh prints the directory last"),
        )
    })
    .clone()
}

impl ApiServer {
    /// Starts a harness and waits (up to 3 minutes) until it is ready.
    pub fn start(options: &Options) -> Self {
        let bin = bin_dir().join("kfaws-testenv");
        let dir = tempfile::Builder::new()
            .prefix("kfaws-testenv.")
            .tempdir()
            .unwrap();
        let mut cmd = Command::new(&bin);
        cmd.arg("start")
            .arg("--dir")
            .arg(dir.path().join("env"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(dir.path().join("testenv.log"))
                    .expect("a log file in the temporary directory"),
            );
        if let Some((sts, cluster)) = &options.eks {
            cmd.args(["--aws-sts-endpoint", sts, "--eks-cluster-name", cluster]);
            cmd.arg("--pytorchjob-runner");
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let ready_file = dir.path().join("env").join("ready.json");
        let deadline = Instant::now() + Duration::from_secs(180);
        let ready: Ready = loop {
            if let Ok(bytes) = std::fs::read(&ready_file) {
                break serde_json::from_slice(&bytes).expect("ready.json is the harness's JSON");
            }
            if let Some(status) = child.try_wait().unwrap() {
                let log =
                    std::fs::read_to_string(dir.path().join("testenv.log")).unwrap_or_default();
                panic!("kfaws-testenv exited ({status}) before it was ready:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "kfaws-testenv not ready within 180 s; see {}",
                dir.path().display()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        Self {
            child,
            bin,
            dir,
            ready,
        }
    }

    /// The harness CA certificate, PEM.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(&self.ready.ca_file).unwrap()
    }

    /// A log of the harness (`kube_apiserver`, `kube_controller_manager`,
    /// `token_webhook`, `pytorchjob_runner`), for assertion messages.
    pub fn log(&self, name: &str) -> String {
        let file = match name {
            "kube_apiserver" => "kube-apiserver.log",
            "token_webhook" => "token-webhook.log",
            "pytorchjob_runner" => "pytorchjob-runner.log",
            "kube_controller_manager" => "kube-controller-manager.log",
            other => return format!("(no log {other})"),
        };
        std::fs::read_to_string(self.dir.path().join("env/logs").join(file)).unwrap_or_default()
    }
}

/// The harness shared by the tests of this binary, started on first use. A
/// static is never dropped: the harness stops itself when the test binary
/// exits (it watches its parent process).
pub fn env() -> &'static ApiServer {
    static ENV: OnceLock<ApiServer> = OnceLock::new();
    ENV.get_or_init(|| ApiServer::start(&Options::default()))
}

/// The shared harness's type, as the bench names it.
pub type TestEnv = ApiServer;

impl ApiServer {
    /// A new admin client (each test has its own tokio runtime, and a
    /// client's connections belong to the runtime that made them).
    pub async fn client(&self) -> kube::Client {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(&self.ready.kubeconfig).expect("read kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("kubeconfig to config");
        kube::Client::try_from(config).expect("client")
    }

    /// The log of a PyTorchJob replica Pod's `pytorch` container
    /// (`DIR/logs/pytorchjobs/<namespace>/<pod>.log`; all its runs), empty
    /// if it never ran.
    pub fn replica_log(&self, namespace: &str, pod: &str) -> String {
        std::fs::read_to_string(
            self.dir
                .path()
                .join("env/logs/pytorchjobs")
                .join(namespace)
                .join(format!("{pod}.log")),
        )
        .unwrap_or_default()
    }

    /// The built kubectl.
    pub fn kubectl(&self) -> PathBuf {
        bin_dir().join("kubectl")
    }

    /// Stops the harness and waits for it (for the shared one, which is
    /// never dropped; benches call this).
    pub fn stop(&self) {
        let _ = Command::new(&self.bin)
            .arg("stop")
            .arg("--dir")
            .arg(self.dir.path().join("env"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        // `stop` signals the harness and waits until it and its servers exited.
        let _ = Command::new(&self.bin)
            .arg("stop")
            .arg("--dir")
            .arg(self.dir.path().join("env"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
