//! A deployment in a folder of its own and an AWS account of its own on the
//! local AWS emulator, driven through the `kfaws` binary, with SDK clients
//! for checking what it made and the emulator's control API for latencies
//! and call counts. Tests using it run under `tests/emulator/with_emulator.sh`.

use std::path::PathBuf;

use assert_cmd::Command;
use aws_credential_types::Credentials;

/// The emulator's endpoint; panics with how to get one.
pub fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL").expect(
        "these tests need the local AWS emulator: run them under \
         tests/emulator/with_emulator.sh (make test does)",
    )
}

/// One deployment: a folder with `kfaws.toml`, a fresh 12-digit account.
pub struct Deployment {
    /// The folder (state under `.kfaws/`).
    pub dir: tempfile::TempDir,
    /// The account id, also the access key id.
    pub account: String,
    /// The deployment (and cluster) name.
    pub name: String,
}

impl Deployment {
    /// A deployment whose `kfaws.toml` holds name, region and `extra`.
    pub fn new(extra: &str) -> Self {
        let _ = endpoint();
        let account = format!("{:012}", fastrand::u64(100_000_000_000..999_999_999_999));
        let name = format!("e2e{}", fastrand::u32(10_000..99_999));
        let dir = tempfile::tempdir().unwrap();
        let d = Self { dir, account, name };
        d.write_config(extra);
        d
    }

    /// Rewrites `kfaws.toml` with name, region and `extra`.
    pub fn write_config(&self, extra: &str) {
        std::fs::write(
            self.dir.path().join("kfaws.toml"),
            format!(
                "name = \"{}\"\nregion = \"us-east-1\"\n{extra}\n",
                self.name
            ),
        )
        .unwrap();
    }

    /// `kfaws ARGS` in the folder, as this account.
    pub fn kfaws(&self, args: &[&str]) -> Command {
        let mut cmd = Command::cargo_bin("kfaws").unwrap();
        cmd.current_dir(self.dir.path())
            .env("AWS_ACCESS_KEY_ID", &self.account)
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("KFAWS_NAME")
            .env_remove("KFAWS_CONFIG")
            .args(args);
        cmd
    }

    /// The same as a child process not waited for (to kill it).
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("kfaws"))
            .args(args)
            .current_dir(self.dir.path())
            .env("AWS_ACCESS_KEY_ID", &self.account)
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("KFAWS_NAME")
            .env_remove("KFAWS_CONFIG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Stdout of a `kfaws ARGS` that must succeed.
    pub fn stdout(&self, args: &[&str]) -> String {
        let out = self.kfaws(args).assert().success().get_output().clone();
        String::from_utf8(out.stdout).unwrap()
    }

    /// SDK configuration for this account on the emulator.
    pub async fn sdk(&self) -> aws_config::SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(endpoint())
            .credentials_provider(Credentials::new(&self.account, "test", None, None, "test"))
            .load()
            .await
    }

    /// The state file.
    pub fn state_file(&self) -> PathBuf {
        self.dir
            .path()
            .join(".kfaws")
            .join(&self.name)
            .join("state.json")
    }

    /// Sets this account's lifecycle latencies (`{"scale": ..., "durations": {...}}`).
    pub fn lifecycle(&self, settings: &str) {
        control(
            &format!("lifecycle?account_id={}", self.account),
            "PUT",
            settings,
        );
    }

    /// Calls of `operation` that reached moto in this account (not faulted).
    pub fn calls(&self, operation: &str) -> u64 {
        let calls: serde_json::Value = serde_json::from_str(&control(
            &format!("calls?account_id={}", self.account),
            "GET",
            "",
        ))
        .unwrap();
        calls
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["operation"] == operation)
            .map(|c| c["calls"].as_u64().unwrap() - c["faulted"].as_u64().unwrap())
            .sum()
    }
}

/// A call to the emulator's control API; returns the body.
pub fn control(path: &str, method: &str, body: &str) -> String {
    let url = format!(
        "{}/{path}",
        std::env::var("KFAWS_EMULATOR_CONTROL").expect("run under with_emulator.sh")
    );
    let out = std::process::Command::new("curl")
        .args([
            "-fsS",
            "-X",
            method,
            &url,
            "-H",
            "content-type: application/json",
        ])
        .args(if body.is_empty() {
            vec![]
        } else {
            vec!["-d", body]
        })
        .output()
        .unwrap();
    assert!(out.status.success(), "{url}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}
